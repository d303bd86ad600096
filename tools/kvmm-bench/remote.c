// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/remote.c - kvmm-bench remote: the remote tier's client
 * on a Redis Cluster, against redis-benchmark on the same cluster.
 *
 *   kvmm-bench remote --seeds HOST:PORT[,...] [--json] [--batch N]
 *                     [--rounds R] [--value-kib K] [--no-redis-benchmark]
 *
 * Pages are 2 MiB (a 16-token block of a Llama-3-8B-shaped KV) unless
 * --value-kib says otherwise.  Each round, side by side:
 *  put:          a batch of N fresh pages, GB/s of page bytes;
 *  put_hiredis:  the same with every command formatted by hiredis (a copy
 *                of the value) instead of written from the page;
 *  get:          the batch read back and verified, GB/s;
 *  redis-benchmark SET and GET of values of the same size on the same
 *                cluster, with as many commands in flight (3 clients, one
 *                per master, pipelining N/3 each), GB/s from its rps;
 *  probe:        EXISTS of 128 stored pages, microseconds a call.
 * Then the batch is deleted.  Medians of the rounds, and the medians of
 * the per-round ratios; --json prints one object per figure.
 *
 * scripts/bench.sh starts a throwaway cluster for it
 * (scripts/redis-cluster.sh) when redis-server is installed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "../../driver/driver.h"

#define REMOTE_ROUNDS	5
#define PROBE_KEYS	128
#define PROBE_CALLS	200
#define PAGE_TOKENS	16

struct remote_opts {
	const char *seeds;
	uint32_t batch;
	uint32_t rounds;
	uint64_t page_bytes;
	bool redis_benchmark;
	bool json;
};

/* One batch of pages: tokens, names, bytes. */
struct rbatch {
	uint32_t n;
	uint32_t *tok;
	struct kvmm_remote_page *pg;
	void **src, **dst;
};

static void rbatch_free(struct rbatch *b)
{
	uint32_t i;

	for (i = 0; b->src && i < b->n; i++) {
		free(b->src[i]);
		free(b->dst[i]);
	}
	free(b->tok);
	free(b->pg);
	free(b->src);
	free(b->dst);
}

static int rbatch_init(struct rbatch *b, uint32_t n, uint64_t bytes)
{
	uint32_t i;

	memset(b, 0, sizeof(*b));
	b->n = n;
	b->tok = malloc(sizeof(uint32_t) * PAGE_TOKENS * n);
	b->pg = calloc(n, sizeof(*b->pg));
	b->src = calloc(n, sizeof(void *));
	b->dst = calloc(n, sizeof(void *));
	if (!b->tok || !b->pg || !b->src || !b->dst)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		b->src[i] = malloc(bytes);
		b->dst[i] = malloc(bytes);
		if (!b->src[i] || !b->dst[i])
			return -ENOMEM;
		memset(b->src[i], (int)(i * 7 + 1), bytes);
		prefault(b->dst[i], bytes);
	}
	return 0;
}

/* Fresh tokens for round @r (so fresh keys), chained from the start. */
static void rbatch_round(const struct kvmm_remote_ops *ops, void *priv, struct rbatch *b,
			 uint32_t r)
{
	uint32_t i;

	for (i = 0; i < PAGE_TOKENS * b->n; i++)
		b->tok[i] = r * 1000003u + i;
	ops->chain(priv, NULL, b->tok, b->n, b->pg);
}

/*
 * redis-benchmark SET or GET of @bytes values, @clients clients
 * pipelining @depth each, @n requests: GB/s, or 0 when it did not run.
 * Without -r every client uses one key on its node, so that every GET
 * finds a whole value (random keys would make some GETs empty misses,
 * and the figure bigger than the bytes moved).
 */
static double redis_benchmark(const char *seeds, const char *test, uint64_t bytes,
			      uint32_t n, uint32_t clients, uint32_t depth)
{
	char cmd[512], line[512], host[128];
	double rps = 0;
	FILE *f;
	int port;

	if (sscanf(seeds, "%127[^:]:%d", host, &port) != 2)
		return 0;
	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark -h %s -p %d --cluster -t %s -d %llu -n %u -c %u -P %u "
		 "--csv 2>/dev/null", host, port, test, (unsigned long long)bytes, n,
		 clients, depth);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char name[32];

		if (sscanf(line, "\"%31[^\"]\",\"%lf\"", name, &rps) == 2 &&
		    !strcasecmp(name, test))
			break;
		rps = 0;
	}
	while (fgets(line, sizeof(line), f))
		;
	pclose(f);
	return rps * (double)bytes / 1e9;
}

static void report(const struct remote_opts *o, const char *what, double v, const char *unit,
		   const char *vs_name, double vs, double ratio)
{
	report_figure(o->json, "remote", what, v, unit, vs_name, vs, ratio,
		      json_pack("{s:I,s:I}", "page_bytes", (json_int_t)o->page_bytes,
				"batch", (json_int_t)o->batch));
}

static int remote_bench(const struct remote_opts *o)
{
	const struct kvmm_remote_ops *ops = kvmm_remote_lookup("redis");
	char err[256] = "";
	struct kvmm_remote_cfg cfg = {
		.seeds = o->seeds, .salt = "bench", .model_id = "meta-llama/Llama-3.1-8B@bench",
		.model = bench_model_8b, .page_size = PAGE_TOKENS, .page_bytes = o->page_bytes,
		.timeout_ms = 10000, .err = err, .err_len = sizeof(err),
	};
	double put[64], puth[64], get[64], rset[64], rget[64], probe[PROBE_CALLS];
	uint64_t bytes = o->page_bytes * o->batch;
	uint32_t r, i, depth = (o->batch + 2) / 3;
	struct kvmm_remote_stats st;
	struct rbatch b, pb;
	void *priv = NULL;
	int ret;

	if (!ops) {
		fprintf(stderr, "kvmm-bench: remote: this build has no remote tier (needs hiredis)\n");
		return 1;
	}
	if (ops->init(&cfg, &priv)) {
		fprintf(stderr, "kvmm-bench: remote: %s\n", err);
		return 1;
	}
	if (rbatch_init(&b, o->batch, o->page_bytes) ||
	    rbatch_init(&pb, PROBE_KEYS, 4096)) {
		fprintf(stderr, "kvmm-bench: remote: out of memory\n");
		ret = 1;
		goto out;
	}
	for (r = 0; r < o->rounds; r++) {
		uint64_t t0;

		rbatch_round(ops, priv, &b, 2 * r);
		ops->hiredis_writes(priv, false);
		t0 = now_ns();
		ret = ops->put(priv, b.pg, b.n, (const void *const *)b.src);
		put[r] = gbps(bytes, (double)(now_ns() - t0));
		if (ret != (int)b.n) {
			fprintf(stderr, "kvmm-bench: remote: put stored %d of %u\n", ret, b.n);
			ret = 1;
			goto out;
		}
		t0 = now_ns();
		ret = (int)ops->get(priv, b.pg, b.n, b.dst, NULL);
		get[r] = gbps(bytes, (double)(now_ns() - t0));
		if (ret != (int)b.n || memcmp(b.dst[b.n - 1], b.src[b.n - 1], o->page_bytes)) {
			fprintf(stderr, "kvmm-bench: remote: get read %d of %u\n", ret, b.n);
			ret = 1;
			goto out;
		}
		ops->drop(priv, b.pg, b.n);
		rbatch_round(ops, priv, &b, 2 * r + 1);
		ops->hiredis_writes(priv, true);
		t0 = now_ns();
		ops->put(priv, b.pg, b.n, (const void *const *)b.src);
		puth[r] = gbps(bytes, (double)(now_ns() - t0));
		ops->hiredis_writes(priv, false);
		ops->drop(priv, b.pg, b.n);
		if (o->redis_benchmark) {
			rset[r] = redis_benchmark(o->seeds, "SET", o->page_bytes, o->batch * 4, 3, depth);
			rget[r] = redis_benchmark(o->seeds, "GET", o->page_bytes, o->batch * 4, 3, depth);
		} else {
			rset[r] = rget[r] = 0;
		}
		if (!o->json)
			fprintf(stderr, "round %u: put %.2f (hiredis %.2f) get %.2f GB/s; "
				"redis-benchmark SET %.2f GET %.2f\n", r, put[r], puth[r], get[r],
				rset[r], rget[r]);
	}
	/* probe: 128 small pages stored once, then EXISTS of all of them */
	ops->exit(priv);
	cfg.page_bytes = 4096;
	if (ops->init(&cfg, &priv)) {
		fprintf(stderr, "kvmm-bench: remote: %s\n", err);
		priv = NULL;
		ret = 1;
		goto out;
	}
	rbatch_round(ops, priv, &pb, 1000);
	ops->put(priv, pb.pg, pb.n, (const void *const *)pb.src);
	for (i = 0; i < PROBE_CALLS; i++) {
		uint64_t t0 = now_ns();

		if (ops->probe(priv, pb.pg, pb.n, NULL) != pb.n) {
			fprintf(stderr, "kvmm-bench: remote: probe missed stored pages\n");
			ret = 1;
			goto out;
		}
		probe[i] = (double)(now_ns() - t0) / 1e3;
	}
	ops->drop(priv, pb.pg, pb.n);
	ops->stats(priv, &st);
	if (o->redis_benchmark) {
		report(o, "put", median(put, o->rounds), "GB/s", "redis_benchmark_set_gbps",
		       median(rset, o->rounds), median_ratio(put, rset, o->rounds));
		report(o, "put_hiredis", median(puth, o->rounds), "GB/s", "redis_benchmark_set_gbps",
		       median(rset, o->rounds), median_ratio(puth, rset, o->rounds));
		report(o, "get", median(get, o->rounds), "GB/s", "redis_benchmark_get_gbps",
		       median(rget, o->rounds), median_ratio(get, rget, o->rounds));
	} else {
		report(o, "put", median(put, o->rounds), "GB/s", NULL, 0, 0);
		report(o, "put_hiredis", median(puth, o->rounds), "GB/s", NULL, 0, 0);
		report(o, "get", median(get, o->rounds), "GB/s", NULL, 0, 0);
	}
	report(o, "probe_128", median(probe, PROBE_CALLS), "us", NULL, 0, 0);
	if (o->json)
		tool_json_line(json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "bench", "remote",
					 "what", "counters", "corrupt", (json_int_t)st.corrupt,
					 "timeouts", (json_int_t)st.timeouts,
					 "errors", (json_int_t)st.errors,
					 "moved", (json_int_t)st.moved,
					 "connects", (json_int_t)st.connects), stdout);
	ret = 0;
out:
	rbatch_free(&b);
	rbatch_free(&pb);
	if (priv)
		ops->exit(priv);
	return ret;
}

int cmd_remote(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "seeds", required_argument, NULL, 's' },
		{ "batch", required_argument, NULL, 'b' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "value-kib", required_argument, NULL, 'k' },
		{ "no-redis-benchmark", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct remote_opts o = {
		.batch = 48, .rounds = REMOTE_ROUNDS, .page_bytes = 0, .redis_benchmark = true,
	};
	int opt;

	o.page_bytes = kvmm_cell_bytes(&bench_model_8b) * PAGE_TOKENS;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (opt) {
		case 's': o.seeds = optarg; break;
		case 'b': o.batch = (uint32_t)parse_u64("--batch", optarg); break;
		case 'r': o.rounds = (uint32_t)parse_u64("--rounds", optarg); break;
		case 'k': o.page_bytes = parse_u64("--value-kib", optarg) << 10; break;
		case 'n': o.redis_benchmark = false; break;
		case 'j': o.json = true; break;
		case 'h':
			printf("usage: kvmm-bench remote --seeds HOST:PORT[,...] [--json] [--batch N]\n"
			       "       [--rounds R] [--value-kib K] [--no-redis-benchmark]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvmm-bench: remote: stray argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!o.batch || o.batch > 1024 || !o.rounds || o.rounds > 64 || o.page_bytes < 4096 ||
	    o.page_bytes > (64ull << 20)) {
		fprintf(stderr, "kvmm-bench: remote: --batch 1..1024, --rounds 1..64, "
			"--value-kib 4..65536\n");
		return 2;
	}
	if (!o.seeds) {
		fprintf(stderr, "kvmm-bench: remote: --seeds HOST:PORT[,...] of a Redis Cluster "
			"is required (scripts/redis-cluster.sh start DIR prints them)\n");
		return 2;
	}
	return remote_bench(&o);
}
