// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/main.c - kvmm-engine: the reference engine.  Reads or
 * generates traffic, serves it through kvmm (engine.c), and reports what
 * the prefix cache bought: a summary, --json, --compare against
 * --no-cache, and --plot pictures drawn by gnuplot.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libkvmm.h>

#include "autoconf.h"
#include "engine.h"

#if CONFIG_KVMM_JANSSON
#include <jansson.h>
#endif

const char *tool_name = "kvmm-engine";

static const char *const policy_names[] = { "fcfs", "lpm", "priority" };

struct cli {
	struct eng_opts o;
	struct wl_gen gen;
	const char *workload, *trace, *json, *plot;
	uint64_t device_mem;
	bool compare;
	bool quiet;
};

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
"  --device-mem SIZE       KV pool bytes instead (K, M, G suffixes)\n"
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
"\n"
"Scheduler:\n"
"  --policy NAME           fcfs, lpm (longest cached prefix first), priority (lpm)\n"
"  --lpm-max-queue N       lpm orders queues up to this long, fcfs above (128)\n"
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
	O_HOST_PAGES, O_NVME_FILE, O_NVME_PAGES, O_WRITE_POLICY, O_HOST_GBPS, O_NVME_GBPS,
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

static void parse_args(int argc, char **argv, struct cli *c)
{
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
		{ 0 }
	};
	struct eng_opts *o = &c->o;
	bool pages_set = false;
	int opt;
	uint32_t k;

	while ((opt = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
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
			for (k = 0; k < 3 && strcmp(optarg, policy_names[k]); k++)
				;
			if (k == 3)
				die_usage("--policy: '%s' is not fcfs, lpm or priority", optarg);
			o->policy = (enum eng_policy)k;
			break;
		case O_LPM_MAX_QUEUE: o->lpm_max_queue = parse_u32("--lpm-max-queue", optarg, 0); break;
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
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s' (see --help)", argv[optind]);
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
	if ((o->host_pages || o->nvme_pages) && o->no_cache)
		die_usage("--host-pages and --nvme-pages hold the cache: not with --no-cache");
	if (c->quiet && !c->json && !c->plot)
		die_usage("--quiet with neither --json nor --plot prints nothing");
	if (o->sequential) {
		/* one at a time, in arrival order */
		o->max_running = 1;
		o->policy = ENG_FCFS;
	}
	o->progress = isatty(STDERR_FILENO);
}

/* ---- the summary ---- */

/*
 * Where the summary goes: standard output, or standard error when
 * --json - makes standard output carry only JSON (for | jq).
 */
static FILE *sum_out;

/* @tokens of @r's prompt tokens, as a share */
static double tier_rate(const struct eng_report *r, uint64_t tokens)
{
	return r->prompt_tokens ? (double)tokens / (double)r->prompt_tokens : 0;
}

static double hit_rate(const struct eng_report *r)
{
	return tier_rate(r, r->cached_tokens);
}

static void row_u(const char *label, uint64_t a, uint64_t b, const void *two)
{
	fprintf(sum_out, "  %-32s %14llu", label, (unsigned long long)a);
	if (two)
		fprintf(sum_out, " %14llu", (unsigned long long)b);
	fputc('\n', sum_out);
}

static void row_f(const char *label, const char *fmt, double a, double b, const void *two)
{
	fprintf(sum_out, "  %-32s ", label);
	fprintf(sum_out, fmt, a);
	if (two) {
		fputc(' ', sum_out);
		fprintf(sum_out, fmt, b);
	}
	fputc('\n', sum_out);
}

/* A lower tier's rows: tokens promoted from it and pages demoted to it. */
static void tier_rows(const char *tier, uint64_t tokens, uint64_t demoted, uint64_t nc_tokens,
		      uint64_t nc_demoted, const struct eng_report *r,
		      const struct eng_report *nc)
{
	char label[64];

	snprintf(label, sizeof(label), "  of those, promoted from %s", tier);
	row_u(label, tokens, nc_tokens, nc);
	snprintf(label, sizeof(label), "  %s tier hit rate", tier);
	row_f(label, "%14.4f", tier_rate(r, tokens), nc ? tier_rate(nc, nc_tokens) : 0, nc);
	snprintf(label, sizeof(label), "pages demoted to %s", tier);
	row_u(label, demoted, nc_demoted, nc);
}

static void print_summary(const struct cli *c, const char *input, const struct eng_report *r,
			  const struct eng_report *nc)
{
	const struct eng_opts *o = &c->o;
	const struct eng_model *m = &o->model;
	uint64_t pool = (uint64_t)o->device_pages * o->page_size;

	fprintf(sum_out, "kvmm-engine: %s\n", input);
	fprintf(sum_out, "  pool %u pages x %u tokens = %llu tokens (%.2f GiB of KV at %llu B/token); "
	       "evict %s; policy %s; max running %u; prefill budget %u, chunk %u%s\n",
	       o->device_pages, o->page_size, (unsigned long long)pool,
	       (double)pool * (double)eng_model_token_bytes(m) / (1 << 30),
	       (unsigned long long)eng_model_token_bytes(m), o->evict, policy_names[o->policy],
	       o->max_running, o->max_prefill_tokens, o->chunk,
	       o->sequential ? "; sequential" : "");
	if (nc)
		fprintf(sum_out, "  %-32s %14s %14s\n", "", "prefix cache", "no cache");
	row_u("requests completed", r->completed, nc ? nc->completed : 0, nc);
	row_u("prompt tokens", r->prompt_tokens, nc ? nc->prompt_tokens : 0, nc);
	row_u("tokens served from cache", r->cached_tokens, nc ? nc->cached_tokens : 0, nc);
	row_f("hit rate", "%14.4f", hit_rate(r), nc ? hit_rate(nc) : 0, nc);
	if (o->host_pages)
		tier_rows("host", r->host_tokens, r->host_demoted, nc ? nc->host_tokens : 0,
			  nc ? nc->host_demoted : 0, r, nc);
	if (o->nvme_pages)
		tier_rows("NVMe", r->nvme_tokens, r->nvme_demoted, nc ? nc->nvme_tokens : 0,
			  nc ? nc->nvme_demoted : 0, r, nc);
	if (o->host_pages) {
		row_u("promotions refused (recomputed)", r->promote_failed,
		      nc ? nc->promote_failed : 0, nc);
		row_u("pages copied to host", r->host_copied, nc ? nc->host_copied : 0, nc);
	}
	if (o->write_policy == KVMM_WRITE_THROUGH) {
		row_u("  of those, when committed", r->wt_pages, nc ? nc->wt_pages : 0, nc);
		row_u("demoted pages already copied", r->free_demoted,
		      nc ? nc->free_demoted : 0, nc);
	}
	if (o->sequential)
		row_f("block hit rate (512 tokens)", "%14.4f",
		      r->blocks ? (double)r->hit_blocks / (double)r->blocks : 0,
		      nc && nc->blocks ? (double)nc->hit_blocks / (double)nc->blocks : 0, nc);
	row_u("prefill tokens computed", r->prefill_tokens, nc ? nc->prefill_tokens : 0, nc);
	row_u("prefill tokens saved", r->saved_tokens, nc ? nc->saved_tokens : 0, nc);
	row_u("pages evicted", r->evicted_pages, nc ? nc->evicted_pages : 0, nc);
	row_u("retractions", r->retractions, nc ? nc->retractions : 0, nc);
	row_u("steps (prefill + decode)", r->steps, nc ? nc->steps : 0, nc);
	row_u("peak running requests", r->max_running_seen, nc ? nc->max_running_seen : 0, nc);
	row_u("peak pages owned", r->peak_owned, nc ? nc->peak_owned : 0, nc);
	row_u("peak pages cached", r->peak_cached, nc ? nc->peak_cached : 0, nc);
	row_u("peak pages cached, evictable", r->peak_evictable, nc ? nc->peak_evictable : 0, nc);
	row_u("peak pages cached, protected", r->peak_protected, nc ? nc->peak_protected : 0, nc);
	row_u("fewest pages free", r->peak_free_min, nc ? nc->peak_free_min : 0, nc);
	fprintf(sum_out, "  estimated (step-time model: %s, %.0f TFLOP/s x %.2f, %.0f GB/s x %.2f):\n",
	       m->name, m->peak_tflops, m->mfu, m->mem_gbps, m->bw_eff);
	if (o->host_pages)
		row_f("promotion time (s)", "%14.3f", r->promote_secs,
		      nc ? nc->promote_secs : 0, nc);
	row_f("TTFT p50 (s)", "%14.3f", r->ttft_p50, nc ? nc->ttft_p50 : 0, nc);
	row_f("TTFT p99 (s)", "%14.3f", r->ttft_p99, nc ? nc->ttft_p99 : 0, nc);
	row_f("TPOT mean (ms)", "%14.2f", r->tpot_mean * 1e3, nc ? nc->tpot_mean * 1e3 : 0, nc);
	row_f("throughput (output tok/s)", "%14.0f", r->throughput, nc ? nc->throughput : 0, nc);
	row_f("simulated time (s)", "%14.1f", r->sim_secs, nc ? nc->sim_secs : 0, nc);
	row_f("wall time (s)", "%14.2f", r->wall_secs, nc ? nc->wall_secs : 0, nc);
	fprintf(sum_out, "  kvmm_check at the end: %s\n", r->check_ok && (!nc || nc->check_ok) ?
	       "ok, every page free or cached" : "FAILED");
}

/* ---- --json ---- */

#if CONFIG_KVMM_JANSSON
static json_t *json_results(const struct eng_report *r, bool sequential)
{
	json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
		"requests", (json_int_t)r->requests,
		"completed", (json_int_t)r->completed,
		"prompt_tokens", (json_int_t)r->prompt_tokens,
		"cached_tokens", (json_int_t)r->cached_tokens,
		"hit_rate", hit_rate(r),
		"prefill_tokens", (json_int_t)r->prefill_tokens,
		"prefill_tokens_saved", (json_int_t)r->saved_tokens,
		"output_tokens", (json_int_t)r->output_tokens,
		"evicted_pages", (json_int_t)r->evicted_pages,
		"retractions", (json_int_t)r->retractions,
		"prefill_steps", (json_int_t)r->prefill_steps,
		"decode_steps", (json_int_t)r->decode_steps,
		"peak_running", (json_int_t)r->max_running_seen);

	json_object_set_new(j, "peak_pages", json_pack("{s:I,s:I,s:I,s:I,s:I}",
		"owned", (json_int_t)r->peak_owned,
		"cached", (json_int_t)r->peak_cached,
		"evictable", (json_int_t)r->peak_evictable,
		"protected", (json_int_t)r->peak_protected,
		"free_min", (json_int_t)r->peak_free_min));
	json_object_set_new(j, "estimated", json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
		"ttft_p50_s", r->ttft_p50, "ttft_p99_s", r->ttft_p99, "ttft_mean_s", r->ttft_mean,
		"tpot_mean_s", r->tpot_mean, "tpot_p50_s", r->tpot_p50, "tpot_p99_s", r->tpot_p99,
		"throughput_tok_s", r->throughput, "sim_seconds", r->sim_secs));
	if (sequential)
		json_object_set_new(j, "block_hit_rate",
				    json_real(r->blocks ? (double)r->hit_blocks / r->blocks : 0));
	json_object_set_new(j, "tiers", json_pack("{s:I,s:I,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:f}",
		"host_tokens", (json_int_t)r->host_tokens,
		"nvme_tokens", (json_int_t)r->nvme_tokens,
		"host_hit_rate", tier_rate(r, r->host_tokens),
		"nvme_hit_rate", tier_rate(r, r->nvme_tokens),
		"host_demoted_pages", (json_int_t)r->host_demoted,
		"nvme_demoted_pages", (json_int_t)r->nvme_demoted,
		"host_copied_pages", (json_int_t)r->host_copied,
		"write_through_pages", (json_int_t)r->wt_pages,
		"free_demoted_pages", (json_int_t)r->free_demoted,
		"promotions_refused", (json_int_t)r->promote_failed,
		"promote_seconds", r->promote_secs));
	json_object_set_new(j, "wall_seconds", json_real(r->wall_secs));
	json_object_set_new(j, "check_ok", json_boolean(r->check_ok));
	return j;
}

static int write_json(const struct cli *c, const char *input, const struct eng_report *r,
		      const struct eng_report *nc)
{
	const struct eng_opts *o = &c->o;
	const struct eng_model *m = &o->model;
	json_t *j = json_pack("{s:s,s:i,s:s}", "tool", "kvmm-engine", "version", 1,
			      "input", input);
	int ret;

	json_object_set_new(j, "config", json_pack(
		"{s:I,s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:b,s:b}",
		"device_pages", (json_int_t)o->device_pages,
		"page_size", (json_int_t)o->page_size,
		"evict", o->evict, "policy", policy_names[o->policy],
		"lpm_max_queue", (json_int_t)o->lpm_max_queue,
		"max_running", (json_int_t)o->max_running,
		"max_prefill_tokens", (json_int_t)o->max_prefill_tokens,
		"chunk", (json_int_t)o->chunk,
		"decode_reserve", o->decode_reserve,
		"sequential", o->sequential, "no_cache", o->no_cache));
	json_object_set_new(json_object_get(j, "config"), "tiers", json_pack(
		"{s:I,s:I,s:s?,s:s,s:f,s:f}",
		"host_pages", (json_int_t)o->host_pages,
		"nvme_pages", (json_int_t)o->nvme_pages,
		"nvme_file", o->nvme_file, "write_policy",
		o->write_policy == KVMM_WRITE_THROUGH ? "write-through" : "write-back",
		"host_gbps", o->host_gbps, "nvme_gbps", o->nvme_gbps));
	json_object_set_new(j, "model", json_pack(
		"{s:s,s:I,s:I,s:I,s:I,s:f,s:I,s:f,s:f,s:f,s:f,s:f,s:I}",
		"name", m->name, "layers", (json_int_t)m->layers, "heads", (json_int_t)m->heads,
		"kv_heads", (json_int_t)m->kv_heads, "head_dim", (json_int_t)m->head_dim,
		"params", m->params, "dtype_bytes", (json_int_t)m->dtype_bytes,
		"peak_tflops", m->peak_tflops, "mfu", m->mfu, "mem_gbps", m->mem_gbps,
		"bw_eff", m->bw_eff, "step_us", m->step_us,
		"kv_bytes_per_token", (json_int_t)eng_model_token_bytes(m)));
	json_object_set_new(j, "results", json_results(r, o->sequential));
	if (nc)
		json_object_set_new(j, "no_cache", json_results(nc, o->sequential));
	if (!strcmp(c->json, "-")) {
		ret = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else {
		ret = json_dump_file(j, c->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (ret)
			fprintf(stderr, "%s: cannot write %s: %s\n", tool_name, c->json,
				strerror(errno));
	}
	json_decref(j);
	return ret ? -EIO : 0;
}
#else
static int write_json(const struct cli *c, const char *input, const struct eng_report *r,
		      const struct eng_report *nc)
{
	(void)input; (void)r; (void)nc;
	fprintf(stderr, "%s: --json %s: this build has no JSON support (libjansson-dev)\n",
		tool_name, c->json);
	return -EOPNOTSUPP;
}
#endif

/* ---- --plot ---- */

static FILE *plot_file(const char *dir, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "%s: %s: %s\n", tool_name, path, strerror(errno));
	return f;
}

static const char gnuplot_script[] =
"set terminal svg size 800,480 dynamic font 'sans,12' background '#ffffff'\n"
"set grid lc rgb '#dddddd'\n"
"set key outside right top\n"
"set datafile separator ' '\n"
"set output 'hit_rate.svg'\n"
"set title 'Prompt tokens served from the prefix cache (cumulative)'\n"
"set xlabel 'simulated time (s)'\n"
"set ylabel 'hit rate'\n"
"set yrange [0:1]\n"
"plot 'series.dat' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'hit rate'\n"
"set output 'pages.svg'\n"
"set title 'KV pool pages by state'\n"
"set ylabel 'pages'\n"
"set yrange [0:*]\n"
"plot 'series.dat' using 1:($4+$5+$6+$3) with filledcurves x1 lc rgb '#cfe8cf' title 'free', \\\n"
"     '' using 1:($4+$5+$6) with filledcurves x1 lc rgb '#9ecae1' title 'cached, evictable', \\\n"
"     '' using 1:($4+$5) with filledcurves x1 lc rgb '#3182bd' title 'cached, protected', \\\n"
"     '' using 1:4 with filledcurves x1 lc rgb '#e6550d' title 'owned by requests'\n"
"set output 'ttft.svg'\n"
"set title 'Time to first token (estimated): share of requests at or below'\n"
"set xlabel 'TTFT (s)'\n"
"set ylabel 'share of requests'\n"
"set yrange [0:1]\n"
"set logscale x\n"
"plot 'ttft.dat' using 1:2 with steps lw 2 lc rgb '#1f77b4' title 'prefix cache', \\\n"
"     'ttft_nocache.dat' using 1:2 with steps lw 2 lc rgb '#d62728' title 'no cache'\n"
"unset logscale x\n"
"set output 'sweep.svg'\n"
"set title 'Hit rate against KV pool size'\n"
"set xlabel 'pool pages'\n"
"set ylabel 'hit rate'\n"
"set logscale x 2\n"
"set yrange [0:1]\n"
"plot 'sweep.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'hit rate'\n";

static int write_cdf(const char *dir, const char *name, const struct eng_report *r)
{
	FILE *f = plot_file(dir, name);
	uint32_t k;

	if (!f)
		return -errno;
	for (k = 0; k < r->nttft; k++)
		fprintf(f, "%.6f %.6f\n", r->ttft[k] > 1e-4 ? r->ttft[k] : 1e-4,
			(double)(k + 1) / r->nttft);
	return fclose(f) ? -errno : 0;
}

/*
 * The data files, the sweep (the same traffic at 1/8 to 4 times the
 * pool), and gnuplot over them.  Returns 0 or a negative errno.
 */
static int write_plots(const struct cli *c, const struct workload *wl,
		       const struct eng_report *r, const struct eng_report *nc)
{
	static const double scale[] = { 0.125, 0.25, 0.5, 1, 2, 4 };
	struct eng_report nc_own;
	char cmd[4200];
	FILE *f;
	uint32_t k;
	int ret;

	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "%s: --plot needs gnuplot (apt-get install gnuplot-nox)\n",
			tool_name);
		return -ENOENT;
	}
	if (mkdir(c->plot, 0777) && errno != EEXIST) {
		fprintf(stderr, "%s: %s: %s\n", tool_name, c->plot, strerror(errno));
		return -errno;
	}
	f = plot_file(c->plot, "series.dat");
	if (!f)
		return -errno;
	fprintf(f, "# t_s hit_rate free owned protected evictable done\n");
	for (k = 0; k < r->nsamples; k++) {
		const struct eng_sample *s = &r->samples[k];

		fprintf(f, "%.4f %.5f %u %u %u %u %u\n", s->t, s->hit_rate, s->free, s->owned,
			s->cached - s->evictable, s->evictable, s->done);
	}
	if (fclose(f))
		return -errno;
	if (!nc) {
		struct eng_opts o = c->o;

		o.no_cache = true;
		o.progress = false;
		ret = eng_run(wl, &o, &nc_own);
		if (ret)
			return ret;
		nc = &nc_own;
	}
	ret = write_cdf(c->plot, "ttft.dat", r) ?: write_cdf(c->plot, "ttft_nocache.dat", nc);
	if (nc == &nc_own)
		eng_report_free(&nc_own);
	if (ret)
		return ret;
	f = plot_file(c->plot, "sweep.dat");
	if (!f)
		return -errno;
	fprintf(f, "# device_pages hit_rate\n");
	for (k = 0; k < sizeof(scale) / sizeof(scale[0]); k++) {
		struct eng_opts o = c->o;
		struct eng_report s;
		double pages = o.device_pages * scale[k];

		/* too small for the longest request, or too large: no point */
		if (pages * o.page_size < wl->max_seq_len || pages > KVMM_MAX_PAGES)
			continue;
		o.device_pages = (uint32_t)pages;
		o.progress = false;
		ret = eng_run(wl, &o, &s);
		eng_report_free(&s);
		if (ret)
			break;
		fprintf(f, "%u %.5f\n", o.device_pages, hit_rate(&s));
		if (c->o.progress)
			fprintf(stderr, "sweep: %u pages: hit rate %.4f\n", o.device_pages,
				hit_rate(&s));
	}
	if (fclose(f) || ret)
		return ret ? ret : -errno;
	f = plot_file(c->plot, "plots.gp");
	if (!f)
		return -errno;
	fputs(gnuplot_script, f);
	if (fclose(f))
		return -errno;
	snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot plots.gp", c->plot);
	if (strchr(c->plot, '\'') || system(cmd)) {
		fprintf(stderr, "%s: gnuplot failed in %s\n", tool_name, c->plot);
		return -EIO;
	}
	return 0;
}

/* ---- main ---- */

static int load_input(struct cli *c, struct workload *wl, char *desc, size_t len)
{
	int ret;

	if (c->workload) {
		ret = workload_load(c->workload, wl);
		snprintf(desc, len, "workload %s", c->workload);
	} else if (c->trace) {
		ret = workload_load_mooncake(c->trace, wl);
		snprintf(desc, len, "mooncake trace %s", c->trace);
	} else {
		ret = workload_generate(&c->gen, wl);
		if (ret)
			fprintf(stderr, "%s: cannot generate the workload: %s\n", tool_name,
				strerror(-ret));
		snprintf(desc, len, "generated (seed %llu, %.2f sessions/s)",
			 (unsigned long long)c->gen.seed, c->gen.rate);
	}
	if (!ret) {
		size_t n = strlen(desc);

		snprintf(desc + n, len - n, ": %u requests, %llu prompt tokens, %llu output tokens",
			 wl->nreq, (unsigned long long)wl->prompt_tokens,
			 (unsigned long long)wl->output_tokens);
	}
	return ret;
}

int main(int argc, char **argv)
{
	struct cli c = { .gen = { .seed = 20261122, .requests = 2000, .rate = 2 } };
	struct eng_report r, nc;
	struct workload wl;
	char desc[8192];
	int ret;

	eng_opts_default(&c.o);
	parse_args(argc, argv, &c);
	if (load_input(&c, &wl, desc, sizeof(desc)))
		return 1;
	ret = eng_run(&wl, &c.o, &r);
	if (ret) {
		if (ret != -ENOSPC)
			fprintf(stderr, "%s: %s\n", tool_name, strerror(-ret));
		workload_free(&wl);
		return 1;
	}
	if (c.compare) {
		struct eng_opts o = c.o;

		o.no_cache = true;
		ret = eng_run(&wl, &o, &nc);
		if (ret) {
			fprintf(stderr, "%s: the --no-cache run: %s\n", tool_name, strerror(-ret));
			eng_report_free(&r);
			workload_free(&wl);
			return 1;
		}
	}
	sum_out = c.json && !strcmp(c.json, "-") ? stderr : stdout;
	if (!c.quiet)
		print_summary(&c, desc, &r, c.compare ? &nc : NULL);
	if (c.json)
		ret = write_json(&c, desc, &r, c.compare ? &nc : NULL);
	if (!ret && c.plot) {
		ret = write_plots(&c, &wl, &r, c.compare ? &nc : NULL);
		if (!ret && !c.quiet)
			fprintf(sum_out, "  plots: %s/{hit_rate,pages,ttft,sweep}.svg\n", c.plot);
	}
	if (c.compare)
		eng_report_free(&nc);
	eng_report_free(&r);
	workload_free(&wl);
	return ret ? 1 : 0;
}
