// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/args.c - kvmm-engine's command line: the options, the
 * usage text, and the checks between options, into a struct cli.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libkvmm.h>

#include "autoconf.h"
#include "cli.h"

const char *const cli_policy_names[ENG_PRIORITY + 1] = { "fcfs", "lpm", "priority" };

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvmm-engine [INPUT] [options]\n"
"Serves LLM requests through kvmm's command ring with an SGLang-style\n"
"scheduler on a simulated clock, and reports what the prefix cache buys.\n"
"\n"
"Input (default: generated chats, few-shot prompts and agent trees):\n"
"  --requests N            generated requests, about (2000)\n"
"  --session-rate R        generated sessions started per second (2)\n"
"  --seed N                generator seed (20261122)\n"
"  --workload FILE         the shared workload format (.txt or .jsonl)\n"
"  --trace FILE            a trace; --trace-format mooncake (the only one)\n"
"  --rate R                arrivals per second for a workload without times (4)\n"
"\n"
"Memory and cache:\n"
"  --device-pages N        KV pool pages (8192)\n"
"  --device-mem SIZE       KV pool bytes instead (K, M, G, T suffixes)\n"
"  --page-size N           tokens per page (16)\n"
"  --evict NAME            eviction policy: lru, slru (lru)\n"
"  --no-cache              prefix caching off: nothing matched, nothing kept\n"
"  --compare               run with and without the cache, side by side\n"
"  --host-pages N          a host DRAM tier of N pages below the device (0)\n"
"  --nvme-file PATH        an NVMe tier in PATH (emptied first) below the host\n"
"  --nvme-pages N          its pages (with --nvme-file; needs --host-pages)\n"
"  --write-policy NAME     when KV is copied to the host tier: write-back\n"
"                          (when demoted) or write-through (when committed)\n"
"  --host-gbps F           host-to-device copy bandwidth charged for a\n"
"                          promotion from the host tier, GB/s (25)\n"
"  --nvme-gbps F           NVMe read bandwidth charged for one from NVMe (6)\n"
"  --nvme-write-gbps F     NVMe write bandwidth: a step waits for the disk\n"
"                          when its writes fall behind (4)\n"
"  --prefetch-budget N     pages a queued request's PREFETCH may bring up\n"
"                          from the lower tiers when it arrives (256; 0: none)\n"
"  --no-prefetch           no PREFETCH, and admission does not count the\n"
"                          pages a promotion will take (the engine before\n"
"                          PREFETCH, to compare)\n"
"  --remote HOST:PORT,...  a Redis Cluster below the host tier, shared with\n"
"                          other engines: each prompt's pages past the local\n"
"                          cache are fetched from it, committed ones pushed\n"
"  --remote-salt S         the tenant's salt: engines share under the same (\"\")\n"
"  --remote-gbps F         cluster read bandwidth charged for a fetch (1)\n"
"  --remote-write W        how pages reach the cluster: rpush (the engine\n"
"                          pushes each finished request's, the default),\n"
"                          commit (kvmm writes every commit through on its\n"
"                          own) or demote (kvmm writes them as they leave\n"
"                          the host tier)\n"
"\n"
"Scheduler:\n"
"  --policy NAME           fcfs, lpm (longest cached prefix first), priority (lpm)\n"
"  --lpm-max-queue N       lpm orders queues up to this long, fcfs above (128)\n"
"  --max-wait S            a request waiting S seconds goes ahead of the lpm or\n"
"                          priority order, the oldest first (0: never, the default)\n"
"  --lookahead N           past a request that does not fit, try N more in\n"
"                          order, each only in free pages, not in cache (16;\n"
"                          0: none, the queue waits for its head)\n"
"  --lookahead-evict       those requests may take cached pages too, as the\n"
"                          head would (lower TTFT, more of the cache evicted)\n"
"  --no-lookahead-guard    let in any that fits, even if the head then waits\n"
"                          longer (guarded: only one that finishes before the\n"
"                          head would fit, or fits in what the head leaves)\n"
"  --max-running N         running requests at most (64)\n"
"  --max-prefill-tokens N  tokens prefilled per step (16384)\n"
"  --chunk N               chunked prefill size, 0 for none (8192)\n"
"  --decode-reserve F      share of running requests' remaining output\n"
"                          held back when admitting (0.3)\n"
"  --sequential            one request at a time, no concurrency; reports\n"
"                          block_hit_rate (fully matched 512-token blocks)\n"
"\n"
"Step-time model (estimates; defaults: an 8B Llama-class model in bf16 on\n"
"one H100-class GPU):\n"
"  --layers N --heads N --kv-heads N --head-dim N --params N --dtype-bytes N\n"
"  --peak-tflops F (989) --mfu F (0.5) --mem-gbps F (3350) --bw-eff F (0.8)\n"
"  --step-us F (200)\n"
"\n"
"Output:\n"
"  --json FILE             the results as JSON ('-': standard output, which then\n"
"                          carries only the JSON; the summary goes to standard error)\n"
"  --plot DIR              SVG plots (gnuplot): hit rate and pages by state\n"
"                          over time, TTFT distribution, hit rate against\n"
"                          cache size (a sweep of extra runs)\n"
"  --quiet                 no summary (with --json FILE or --plot)\n"
"  --help\n");
}

enum {
	O_REQUESTS = 256, O_SESSION_RATE, O_SEED, O_WORKLOAD, O_TRACE, O_TRACE_FORMAT, O_RATE,
	O_DEVICE_PAGES, O_DEVICE_MEM, O_PAGE_SIZE, O_EVICT, O_NO_CACHE, O_COMPARE, O_POLICY,
	O_LPM_MAX_QUEUE, O_MAX_RUNNING, O_MAX_PREFILL, O_CHUNK, O_DECODE_RESERVE, O_SEQUENTIAL,
	O_LAYERS, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_PARAMS, O_DTYPE_BYTES, O_PEAK_TFLOPS,
	O_MFU, O_MEM_GBPS, O_BW_EFF, O_STEP_US, O_JSON, O_PLOT, O_QUIET, O_HELP,
	O_HOST_PAGES, O_NVME_FILE, O_NVME_PAGES, O_WRITE_POLICY, O_HOST_GBPS, O_NVME_GBPS, O_NVME_WRITE_GBPS,
	O_REMOTE, O_REMOTE_SALT, O_REMOTE_GBPS, O_REMOTE_WRITE, O_PREFETCH_BUDGET, O_NO_PREFETCH,
	O_PREFETCH_DEPTH, O_MAX_WAIT, O_LOOKAHEAD, O_LOOKAHEAD_EVICT,
	O_NO_LOOKAHEAD_GUARD,
};

static uint32_t parse_u32(const char *opt, const char *s, uint32_t min)
{
	uint64_t v = parse_u64(opt, s);

	if (v < min || v > UINT32_MAX)
		die_usage("%s: '%s' is out of range (at least %u)", opt, s, min);
	return (uint32_t)v;
}

static double parse_pos(const char *opt, const char *s)
{
	double v = parse_double(opt, s);

	if (!(v > 0))
		die_usage("%s: '%s' must be above 0", opt, s);
	return v;
}

/* the long options; getopt_long() hands back their O_* codes */
static const struct option lopts[] = {
	{ "requests", required_argument, NULL, O_REQUESTS },
	{ "session-rate", required_argument, NULL, O_SESSION_RATE },
	{ "seed", required_argument, NULL, O_SEED },
	{ "workload", required_argument, NULL, O_WORKLOAD },
	{ "trace", required_argument, NULL, O_TRACE },
	{ "trace-format", required_argument, NULL, O_TRACE_FORMAT },
	{ "rate", required_argument, NULL, O_RATE },
	{ "device-pages", required_argument, NULL, O_DEVICE_PAGES },
	{ "device-mem", required_argument, NULL, O_DEVICE_MEM },
	{ "page-size", required_argument, NULL, O_PAGE_SIZE },
	{ "evict", required_argument, NULL, O_EVICT },
	{ "no-cache", no_argument, NULL, O_NO_CACHE },
	{ "compare", no_argument, NULL, O_COMPARE },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "lpm-max-queue", required_argument, NULL, O_LPM_MAX_QUEUE },
	{ "max-wait", required_argument, NULL, O_MAX_WAIT },
	{ "max-running", required_argument, NULL, O_MAX_RUNNING },
	{ "max-prefill-tokens", required_argument, NULL, O_MAX_PREFILL },
	{ "chunk", required_argument, NULL, O_CHUNK },
	{ "decode-reserve", required_argument, NULL, O_DECODE_RESERVE },
	{ "sequential", no_argument, NULL, O_SEQUENTIAL },
	{ "layers", required_argument, NULL, O_LAYERS },
	{ "heads", required_argument, NULL, O_HEADS },
	{ "kv-heads", required_argument, NULL, O_KV_HEADS },
	{ "head-dim", required_argument, NULL, O_HEAD_DIM },
	{ "params", required_argument, NULL, O_PARAMS },
	{ "dtype-bytes", required_argument, NULL, O_DTYPE_BYTES },
	{ "peak-tflops", required_argument, NULL, O_PEAK_TFLOPS },
	{ "mfu", required_argument, NULL, O_MFU },
	{ "mem-gbps", required_argument, NULL, O_MEM_GBPS },
	{ "bw-eff", required_argument, NULL, O_BW_EFF },
	{ "step-us", required_argument, NULL, O_STEP_US },
	{ "json", required_argument, NULL, O_JSON },
	{ "plot", required_argument, NULL, O_PLOT },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "help", no_argument, NULL, O_HELP },
	{ "host-pages", required_argument, NULL, O_HOST_PAGES },
	{ "nvme-file", required_argument, NULL, O_NVME_FILE },
	{ "nvme-pages", required_argument, NULL, O_NVME_PAGES },
	{ "write-policy", required_argument, NULL, O_WRITE_POLICY },
	{ "host-gbps", required_argument, NULL, O_HOST_GBPS },
	{ "nvme-gbps", required_argument, NULL, O_NVME_GBPS },
	{ "nvme-write-gbps", required_argument, NULL, O_NVME_WRITE_GBPS },
	{ "remote", required_argument, NULL, O_REMOTE },
	{ "remote-salt", required_argument, NULL, O_REMOTE_SALT },
	{ "remote-gbps", required_argument, NULL, O_REMOTE_GBPS },
	{ "remote-write", required_argument, NULL, O_REMOTE_WRITE },
	{ "prefetch-budget", required_argument, NULL, O_PREFETCH_BUDGET },
	{ "no-prefetch", no_argument, NULL, O_NO_PREFETCH },
	{ "lookahead", required_argument, NULL, O_LOOKAHEAD },
	{ "lookahead-evict", no_argument, NULL, O_LOOKAHEAD_EVICT },
	{ "no-lookahead-guard", no_argument, NULL, O_NO_LOOKAHEAD_GUARD },
	{ "prefetch-depth", required_argument, NULL, O_PREFETCH_DEPTH },
	{ 0 }
};

/*
 * The options against each other, once all are read: --device-mem into
 * pages, an eviction policy the library knows, the tiers' prerequisites;
 * and --sequential's overrides.
 */
static void cli_check(struct cli *c, bool pages_set)
{
	struct eng_opts *o = &c->o;

	if (c->workload && c->trace)
		die_usage("--workload and --trace: one input at a time");
	if (c->device_mem) {
		uint64_t page = eng_model_token_bytes(&o->model) * o->page_size;

		if (pages_set)
			die_usage("--device-pages and --device-mem: one or the other");
		if (c->device_mem / page < 1 || c->device_mem / page > KVMM_MAX_PAGES)
			die_usage("--device-mem: %llu bytes is not 1 to %u pages of %llu bytes",
				  (unsigned long long)c->device_mem, KVMM_MAX_PAGES,
				  (unsigned long long)page);
		o->device_pages = (uint32_t)(c->device_mem / page);
	}
	{
		/* ask the library whether it knows the eviction policy */
		struct kvmm_params p = tool_params(1, 1, 1, 1);
		struct kvmm_ctx *ctx;

		if (!kvmm_create(&p, &ctx)) {
			int bad_policy = kvmm_set_evict_policy(ctx, o->evict);

			kvmm_destroy(ctx);
			if (bad_policy)
				die_usage("--evict: '%s' is not an eviction policy kvmm knows "
					  "(lru, slru)", o->evict);
		}
	}
	if (o->model.mfu > 1 || o->model.bw_eff > 1)
		die_usage("--mfu and --bw-eff are shares of peak: at most 1");
	if (o->model.kv_heads > o->model.heads)
		die_usage("--kv-heads cannot exceed --heads");
	if (c->compare && o->no_cache)
		die_usage("--compare already runs --no-cache beside the cache");
	if (!!o->nvme_file != !!o->nvme_pages)
		die_usage("--nvme-file and --nvme-pages go together");
	if (o->nvme_pages && !o->host_pages)
		die_usage("--nvme-pages: the NVMe tier stages through a host tier: "
			  "give --host-pages too");
	if (o->write_policy == KVMM_WRITE_THROUGH && !o->host_pages)
		die_usage("--write-policy write-through copies to the host tier: "
			  "give --host-pages too");
	if (o->remote && !o->host_pages)
		die_usage("--remote: pages come and go through the host tier: give --host-pages too");
	if (o->remote_write && !o->remote)
		die_usage("--remote-write: there is no cluster to write to: give --remote too");
	if (o->remote && c->compare)
		die_usage("--remote with --compare: the second run would find the first's pages");
	if ((o->host_pages || o->nvme_pages) && o->no_cache)
		die_usage("--host-pages and --nvme-pages hold the cache: not with --no-cache");
	if (c->quiet && !c->json && !c->plot)
		die_usage("--quiet with neither --json nor --plot prints nothing");
	if (o->sequential) {
		/* one at a time, in arrival order */
		o->max_running = 1;
		o->policy = ENG_FCFS;
	}
}

/**
 * cli_parse() - read kvmm-engine's command line into @c
 * @argc: from main()
 * @argv: from main()
 * @c: defaults in; the options given, checked against each other, out
 *
 * Context: exits through die_usage() on anything it cannot use.
 */
void cli_parse(int argc, char **argv, struct cli *c)
{
	struct eng_opts *o = &c->o;
	bool pages_set = false;
	int opt;
	uint32_t k;

	opterr = 0;		/* die_bad_option() says what was wrong, in one line */
	while ((opt = getopt_long(argc, argv, ":", lopts, NULL)) != -1) {
		switch (opt) {
		case O_REQUESTS: c->gen.requests = parse_u32("--requests", optarg, 1); break;
		case O_SESSION_RATE: c->gen.rate = parse_pos("--session-rate", optarg); break;
		case O_SEED: c->gen.seed = parse_u64("--seed", optarg); break;
		case O_WORKLOAD: c->workload = optarg; break;
		case O_TRACE: c->trace = optarg; break;
		case O_TRACE_FORMAT:
			if (strcmp(optarg, "mooncake"))
				die_usage("--trace-format: '%s' is not known (mooncake)", optarg);
			break;
		case O_RATE: o->rate = parse_pos("--rate", optarg); break;
		case O_DEVICE_PAGES:
			o->device_pages = parse_u32("--device-pages", optarg, 1);
			pages_set = true;
			break;
		case O_DEVICE_MEM: c->device_mem = parse_size("--device-mem", optarg); break;
		case O_PAGE_SIZE:
			o->page_size = parse_u32("--page-size", optarg, 1);
			if (o->page_size > KVMM_MAX_PAGE_SIZE)
				die_usage("--page-size: at most %u", KVMM_MAX_PAGE_SIZE);
			break;
		case O_EVICT: o->evict = optarg; break;
		case O_NO_CACHE: o->no_cache = true; break;
		case O_COMPARE: c->compare = true; break;
		case O_POLICY:
			for (k = 0; k < 3 && strcmp(optarg, cli_policy_names[k]); k++)
				;
			if (k == 3)
				die_usage("--policy: '%s' is not fcfs, lpm or priority", optarg);
			o->policy = (enum eng_policy)k;
			break;
		case O_LPM_MAX_QUEUE: o->lpm_max_queue = parse_u32("--lpm-max-queue", optarg, 0); break;
		case O_MAX_WAIT: o->max_wait = parse_double("--max-wait", optarg); break;
		case O_LOOKAHEAD: o->lookahead = parse_u32("--lookahead", optarg, 0); break;
		case O_LOOKAHEAD_EVICT: o->lookahead_evict = true; break;
		case O_NO_LOOKAHEAD_GUARD: o->lookahead_guard = false; break;
		case O_MAX_RUNNING: o->max_running = parse_u32("--max-running", optarg, 1); break;
		case O_MAX_PREFILL:
			o->max_prefill_tokens = parse_u32("--max-prefill-tokens", optarg, 1);
			break;
		case O_CHUNK: o->chunk = parse_u32("--chunk", optarg, 0); break;
		case O_DECODE_RESERVE:
			o->decode_reserve = parse_double("--decode-reserve", optarg);
			if (o->decode_reserve > 1)
				die_usage("--decode-reserve: a share between 0 and 1");
			break;
		case O_SEQUENTIAL: o->sequential = true; break;
		case O_LAYERS: o->model.layers = parse_u32("--layers", optarg, 1); break;
		case O_HEADS: o->model.heads = parse_u32("--heads", optarg, 1); break;
		case O_KV_HEADS: o->model.kv_heads = parse_u32("--kv-heads", optarg, 1); break;
		case O_HEAD_DIM: o->model.head_dim = parse_u32("--head-dim", optarg, 1); break;
		case O_PARAMS: o->model.params = parse_pos("--params", optarg); break;
		case O_DTYPE_BYTES: o->model.dtype_bytes = parse_u32("--dtype-bytes", optarg, 1); break;
		case O_PEAK_TFLOPS: o->model.peak_tflops = parse_pos("--peak-tflops", optarg); break;
		case O_MFU: o->model.mfu = parse_pos("--mfu", optarg); break;
		case O_MEM_GBPS: o->model.mem_gbps = parse_pos("--mem-gbps", optarg); break;
		case O_BW_EFF: o->model.bw_eff = parse_pos("--bw-eff", optarg); break;
		case O_STEP_US: o->model.step_us = parse_double("--step-us", optarg); break;
		case O_JSON: c->json = optarg; break;
		case O_PLOT: c->plot = optarg; break;
		case O_QUIET: c->quiet = true; break;
		case O_HOST_PAGES: o->host_pages = parse_u32("--host-pages", optarg, 0); break;
		case O_NVME_FILE: o->nvme_file = optarg; break;
		case O_NVME_PAGES: o->nvme_pages = parse_u32("--nvme-pages", optarg, 0); break;
		case O_WRITE_POLICY:
			if (!strcmp(optarg, "write-through"))
				o->write_policy = KVMM_WRITE_THROUGH;
			else if (!strcmp(optarg, "write-back"))
				o->write_policy = KVMM_WRITE_BACK;
			else
				die_usage("--write-policy: '%s' is not write-back or "
					  "write-through", optarg);
			break;
		case O_HOST_GBPS: o->host_gbps = parse_pos("--host-gbps", optarg); break;
		case O_NVME_GBPS: o->nvme_gbps = parse_pos("--nvme-gbps", optarg); break;
		case O_NVME_WRITE_GBPS:
			o->nvme_write_gbps = parse_pos("--nvme-write-gbps", optarg);
			break;
		case O_PREFETCH_BUDGET:
			o->prefetch_budget = parse_u32("--prefetch-budget", optarg, 0);
			break;
		case O_PREFETCH_DEPTH:
			o->prefetch_depth = parse_u32("--prefetch-depth", optarg, 1);
			break;
		case O_NO_PREFETCH:
			o->prefetch_budget = 0;
			o->admit_promotions = false;
			break;
		case O_REMOTE: o->remote = optarg; break;
		case O_REMOTE_SALT: o->remote_salt = optarg; break;
		case O_REMOTE_GBPS: o->remote_gbps = parse_pos("--remote-gbps", optarg); break;
		case O_REMOTE_WRITE:
			if (!strcmp(optarg, "rpush"))
				o->remote_write = KVMM_REMOTE_WRITE_NONE;
			else if (!strcmp(optarg, "commit"))
				o->remote_write = KVMM_REMOTE_WRITE_COMMIT;
			else if (!strcmp(optarg, "demote"))
				o->remote_write = KVMM_REMOTE_WRITE_DEMOTE;
			else
				die_usage("--remote-write: '%s' is not rpush, commit or demote",
					  optarg);
			break;
		case O_HELP: usage(stdout); exit(0);
		default: die_bad_option(lopts, argv[optind - 1], opt);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s' (see --help)", argv[optind]);
	cli_check(c, pages_set);
	o->progress = isatty(STDERR_FILENO);
}
