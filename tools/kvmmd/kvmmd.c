// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/kvmmd.c - kvmmd: own a kvmm context and serve command rings
 * to engines and admin tools in other processes over a Unix socket.
 *
 *   kvmmd --socket PATH [options]       (see kvmmd(8), or --help)
 *
 * Runs in the foreground with its log on stderr, which is what a
 * systemd service (Type=simple) or a container wants.  SIGINT and SIGTERM
 * stop it cleanly: every client's ring is released, the socket removed.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libkvmm.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmmd --socket PATH [options]\n"
		"  --socket PATH        Unix socket to serve (required)\n"
		"  --config FILE        read options from FILE: one 'name value' per line, '#' comments\n"
		"  --page-size N        tokens per page (power of two; default 16)\n"
		"  --pages N            pages in the pool (default 65536) ...\n"
		"  --mem-avail BYTES    ... or size it from free memory (with --mem-total, --mem-fraction)\n"
		"  --mem-total BYTES    total device memory\n"
		"  --mem-fraction F     SGLang's mem_fraction_static (default 0.88)\n"
		"  --max-pages N        pages the pool may be resized to at run time\n"
		"                       (kvmmctl set nr_pages; default: its size, fixed)\n"
		"  --backend mock|cuda  where the KV lives (default mock: host memory)\n"
		"  --cuda-device N      the GPU of the cuda backend (default 0)\n"
		"  --layers N --kv-heads N --head-dim N --dtype-bytes N   MHA geometry (default 32 8 128 2)\n"
		"  --mla-dim N          MLA latent width instead of heads and head dim\n"
		"  --max-seqs N         page-table rows (default 1024)\n"
		"  --max-seq-len N      tokens per sequence (default 32768)\n"
		"  --wmark-min N --wmark-low N --wmark-high N   watermarks in pages (default 0)\n"
		"  --evict lru|slru     eviction policy (default lru)\n"
		"  --host-pages N       a host tier of N pages: reclaim demotes there (default 0: none)\n"
		"  --host-node N|nearest  its NUMA node (default nearest the device)\n"
		"  --nvme-file PATH     an NVMe tier below the host tier, in this file or block device;\n"
		"                       a kvmm file of the same geometry and model is recovered (restart)\n"
		"  --nvme-pages N       pages of the NVMe tier\n"
		"  --nvme-qd N          its io_uring queue depth (default 32)\n"
		"  --model-id STR       the model whose KV this is (name and revision): the NVMe\n"
		"                       file records it and refuses to serve it to another model\n"
		"  --nvme-reformat      format the NVMe file afresh (a cold start), even one of\n"
		"                       another model or geometry or with a damaged superblock\n"
		"  --write-policy write-back|write-through   copy KV to the host tier when\n"
		"                       reclaim demotes it (default), or when it is committed\n"
		"  --poll               serve every ring in polling mode (a core spins)\n"
		"  --ns-per-uid         bind each client that is not root to the namespace of its uid\n"
		"  --quiet              log only errors\n");
}

static int parse_num(const char *opt, const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	if (!*s || *end || errno || *s == '-') {
		fprintf(stderr, "kvmmd: %s: '%s' is not a number\n", opt, s);
		return -1;
	}
	return 0;
}

struct opts {
	struct kvmm_params p;
	struct kvmm_cuda_arg cuda;
	struct kvmm_mock_arg mock;
	const char *socket;
	const char *evict;
	uint32_t server_flags;
	int quiet;
	char model_id[KVMM_MODEL_ID_MAX + 1];	/* p.model_id points here */
};

enum { O_SOCKET = 256, O_CONFIG, O_PAGE_SIZE, O_PAGES, O_MEM_AVAIL, O_MEM_TOTAL,
       O_MEM_FRAC, O_LAYERS, O_KV_HEADS, O_HEAD_DIM, O_DTYPE, O_MLA, O_MAX_SEQS,
       O_MAX_LEN, O_WMIN, O_WLOW, O_WHIGH, O_EVICT, O_POLL, O_QUIET, O_HELP, O_NS_UID,
       O_HOST_PAGES, O_HOST_NODE, O_NVME_FILE, O_NVME_PAGES, O_NVME_QD, O_WRITE_POLICY,
       O_MAX_PAGES, O_BACKEND, O_CUDA_DEVICE, O_MODEL_ID, O_NVME_REFORMAT };

static const struct option lopts[] = {
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "config", required_argument, NULL, O_CONFIG },
	{ "page-size", required_argument, NULL, O_PAGE_SIZE },
	{ "pages", required_argument, NULL, O_PAGES },
	{ "mem-avail", required_argument, NULL, O_MEM_AVAIL },
	{ "mem-total", required_argument, NULL, O_MEM_TOTAL },
	{ "mem-fraction", required_argument, NULL, O_MEM_FRAC },
	{ "layers", required_argument, NULL, O_LAYERS },
	{ "kv-heads", required_argument, NULL, O_KV_HEADS },
	{ "head-dim", required_argument, NULL, O_HEAD_DIM },
	{ "dtype-bytes", required_argument, NULL, O_DTYPE },
	{ "mla-dim", required_argument, NULL, O_MLA },
	{ "max-seqs", required_argument, NULL, O_MAX_SEQS },
	{ "max-seq-len", required_argument, NULL, O_MAX_LEN },
	{ "wmark-min", required_argument, NULL, O_WMIN },
	{ "wmark-low", required_argument, NULL, O_WLOW },
	{ "wmark-high", required_argument, NULL, O_WHIGH },
	{ "evict", required_argument, NULL, O_EVICT },
	{ "poll", no_argument, NULL, O_POLL },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "help", no_argument, NULL, O_HELP },
	{ "ns-per-uid", no_argument, NULL, O_NS_UID },
	{ "host-pages", required_argument, NULL, O_HOST_PAGES },
	{ "host-node", required_argument, NULL, O_HOST_NODE },
	{ "nvme-file", required_argument, NULL, O_NVME_FILE },
	{ "nvme-pages", required_argument, NULL, O_NVME_PAGES },
	{ "nvme-qd", required_argument, NULL, O_NVME_QD },
	{ "write-policy", required_argument, NULL, O_WRITE_POLICY },
	{ "max-pages", required_argument, NULL, O_MAX_PAGES },
	{ "backend", required_argument, NULL, O_BACKEND },
	{ "cuda-device", required_argument, NULL, O_CUDA_DEVICE },
	{ "model-id", required_argument, NULL, O_MODEL_ID },
	{ "nvme-reformat", no_argument, NULL, O_NVME_REFORMAT },
	{ 0 }
};

static int apply(struct opts *o, int id, const char *name, const char *val);

/* A config file: "name value" lines with the long option names. */
static int read_config(struct opts *o, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	unsigned lineno = 0;

	if (!f) {
		fprintf(stderr, "kvmmd: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char name[64], val[400];
		const struct option *lo;
		int n;

		lineno++;
		n = sscanf(line, " %63s %399s", name, val);
		if (n <= 0 || name[0] == '#')
			continue;
		for (lo = lopts; lo->name && strcmp(lo->name, name); lo++)
			;
		if (!lo->name || lo->val == O_CONFIG || lo->val == O_HELP ||
		    (lo->has_arg && n < 2)) {
			fprintf(stderr, "kvmmd: %s:%u: unknown or incomplete option '%s'\n",
				path, lineno, name);
			fclose(f);
			return -1;
		}
		if (apply(o, lo->val, name, lo->has_arg ? val : NULL)) {
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

static char *keep(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		fprintf(stderr, "kvmmd: out of memory\n");
		exit(1);
	}
	return d;
}

static int apply(struct opts *o, int id, const char *name, const char *val)
{
	struct kvmm_params *p = &o->p;
	uint64_t v = 0;

	switch (id) {
	case O_SOCKET: o->socket = keep(val); return 0;
	case O_CONFIG: return read_config(o, val);
	case O_EVICT: o->evict = keep(val); return 0;
	case O_POLL: o->server_flags |= KVMM_SERVER_POLL; return 0;
	case O_NS_UID: o->server_flags |= KVMM_SERVER_NS_UID; return 0;
	case O_QUIET: o->quiet = 1; return 0;
	case O_NVME_FILE: p->nvme_path = keep(val); return 0;
	case O_MODEL_ID:
		if (strlen(val) > KVMM_MODEL_ID_MAX) {
			fprintf(stderr, "kvmmd: %s: '%.20s...' is longer than %u bytes\n", name,
				val, KVMM_MODEL_ID_MAX);
			return -1;
		}
		strcpy(o->model_id, val);
		p->model_id = o->model_id;
		return 0;
	case O_NVME_REFORMAT: p->nvme_flags |= KVMM_NVME_REFORMAT; return 0;
	case O_BACKEND:
		if (!kvmm_backend_lookup(val)) {
			fprintf(stderr, "kvmmd: %s: no backend '%s' in this build\n", name, val);
			return -1;
		}
		p->backend = keep(val);
		p->backend_arg = strcmp(val, "cuda") ? (void *)&o->mock : (void *)&o->cuda;
		return 0;
	case O_WRITE_POLICY:
		if (!strcmp(val, "write-back") || !strcmp(val, "write-through")) {
			p->write_policy = val[6] == 't' ? KVMM_WRITE_THROUGH : KVMM_WRITE_BACK;
			return 0;
		}
		fprintf(stderr, "kvmmd: %s: '%s' is not write-back or write-through\n", name, val);
		return -1;
	case O_HOST_NODE:
		if (!strcmp(val, "nearest")) {
			p->host_node = KVMM_NODE_NEAREST;
			return 0;
		}
		break;
	case O_MEM_FRAC: {
		char *end;

		p->mem_fraction = strtod(val, &end);
		if (!*val || *end || !(p->mem_fraction > 0.0 && p->mem_fraction <= 1.0)) {
			fprintf(stderr, "kvmmd: %s: '%s' is not a fraction in (0, 1]\n", name, val);
			return -1;
		}
		p->nr_pages = 0;
		return 0;
	}
	}
	if (parse_num(name, val, &v))
		return -1;
	if (id != O_MEM_AVAIL && id != O_MEM_TOTAL && v > UINT32_MAX) {
		fprintf(stderr, "kvmmd: %s: %s is too large\n", name, val);
		return -1;
	}
	switch (id) {
	case O_PAGE_SIZE: p->page_size = (uint32_t)v; break;
	case O_PAGES: p->nr_pages = (uint32_t)v; break;
	case O_MEM_AVAIL: p->mem_avail = v; p->nr_pages = 0; break;
	case O_MEM_TOTAL: p->mem_total = v; p->nr_pages = 0; break;
	case O_LAYERS: p->model.layers = (uint32_t)v; break;
	case O_KV_HEADS: p->model.kv_heads = (uint32_t)v; break;
	case O_HEAD_DIM: p->model.head_dim = (uint32_t)v; break;
	case O_DTYPE: p->model.dtype_bytes = (uint32_t)v; break;
	case O_MLA:
		p->model.attn = KVMM_ATTN_MLA;
		p->model.latent_dim = (uint32_t)v;
		p->model.kv_heads = p->model.head_dim = 0;
		break;
	case O_MAX_SEQS: p->max_seqs = (uint32_t)v; break;
	case O_MAX_LEN: p->max_seq_len = (uint32_t)v; break;
	case O_WMIN: p->wmark_min = (uint32_t)v; break;
	case O_WLOW: p->wmark_low = (uint32_t)v; break;
	case O_WHIGH: p->wmark_high = (uint32_t)v; break;
	case O_HOST_PAGES: p->host_pages = (uint32_t)v; break;
	case O_HOST_NODE: p->host_node = v > INT32_MAX ? -2 : (int32_t)v; break;
	case O_NVME_PAGES: p->nvme_pages = (uint32_t)v; break;
	case O_NVME_QD: p->nvme_qd = (uint32_t)v; break;
	case O_MAX_PAGES: p->max_pages = (uint32_t)v; break;
	case O_CUDA_DEVICE: o->cuda.device = v > INT32_MAX ? -1 : (int)v; break;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.p = {
			.model = { .layers = 32, .kv_heads = 8, .head_dim = 128,
				   .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
			.page_size = 16, .nr_pages = 65536,
			.max_seqs = 1024, .max_seq_len = 32768,
			.host_node = KVMM_NODE_NEAREST,
		},
		/* clients may map the pool (kvmm_kv_attach()) */
		.mock = { .shareable = true },
	};
	struct kvmm_server *srv = NULL;
	struct kvmm_ctx *ctx = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	int c, ret;

	o.p.backend_arg = &o.mock;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		if (c == O_HELP) {
			usage(stdout);
			return 0;
		}
		if (c == '?') {
			usage(stderr);
			return 2;
		}
		if (apply(&o, c, lopts[c - O_SOCKET].name, optarg)) {
			fprintf(stderr, "kvmmd: see 'kvmmd --help' for the options\n");
			return 2;
		}
	}
	if (!o.socket || optind != argc) {
		fprintf(stderr, "kvmmd: --socket PATH is required%s\n",
			optind != argc ? " (and takes no other arguments)" : "");
		usage(stderr);
		return 2;
	}
	if (!o.p.nr_pages && o.p.mem_fraction == 0.0)
		o.p.mem_fraction = 0.88;
	if (!o.p.nr_pages && !o.p.mem_total)
		o.p.mem_total = o.p.mem_avail;
	o.p.evict_policy = o.evict;
	if (o.p.nvme_pages && !o.p.model_id && !o.quiet)
		fprintf(stderr, "kvmmd: warning: --nvme-file without --model-id: the file cannot "
			"tell this model's KV from another's of the same geometry\n");
	ret = kvmm_create(&o.p, &ctx);
	if (ret) {
		fprintf(stderr, "kvmmd: cannot create the pool: %s%s\n", strerror(-ret),
			ret == -EINVAL ? " (check the geometry, page size, sizes, --max-pages and watermarks; "
					 "an NVMe tier needs --host-pages and --nvme-file, "
					 "write-through needs --host-pages)" :
			ret == -ENOSPC ? " (the memory budget holds no page)" : "");
		return 1;
	}
	ret = kvmm_server_start(ctx, o.socket, o.server_flags, &srv);
	if (ret) {
		fprintf(stderr, "kvmmd: cannot serve %s: %s%s\n", o.socket, strerror(-ret),
			ret == -EADDRINUSE ? " (another kvmmd answers there)" :
			ret == -EEXIST ? " (the path exists and is not a socket)" : "");
		kvmm_destroy(ctx);
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (!o.quiet)
		fprintf(stderr, "kvmmd: serving %s: %u pages of %u tokens, %u sequences of up to "
			"%u tokens, eviction %s\n", o.socket, kvmm_nr_pages(ctx),
			kvmm_page_size(ctx), o.p.max_seqs, o.p.max_seq_len,
			kvmm_evict_policy(ctx));
	if (!o.quiet && o.p.host_pages) {
		uint64_t st[NR_KVMM_STATS];

		kvmm_stats(ctx, st, NR_KVMM_STATS);
		fprintf(stderr, "kvmmd: host tier %u pages, %s", o.p.host_pages,
			o.p.write_policy == KVMM_WRITE_THROUGH ? "write-through" : "write-back");
		if (o.p.nvme_pages)
			fprintf(stderr, ", NVMe tier %u pages in %s (%s%llu recovered)",
				o.p.nvme_pages, o.p.nvme_path,
				o.p.nvme_flags & KVMM_NVME_REFORMAT ? "reformatted, " : "",
				(unsigned long long)st[KVMM_STAT_NVME_PAGES_CACHED]);
		fputc('\n', stderr);
	}
	while (!stop)
		pause();
	if (!o.quiet)
		fprintf(stderr, "kvmmd: stopping (%u clients attached)\n",
			kvmm_server_clients(srv));
	kvmm_server_stop(srv);
	ret = kvmm_check(ctx);
	if (ret)
		fprintf(stderr, "kvmmd: invariant check failed at exit: %s\n", strerror(-ret));
	kvmm_destroy(ctx);
	return ret ? 1 : 0;
}
