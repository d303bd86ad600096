// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/micro.c - micro benchmarks through the public API.
 *
 * Each benchmark prints one line; with --json a JSON object
 * {"bench":NAME, "ns_per_op":X, ...} where X is the median of several
 * runs.  Nothing here passes or fails: the figures go to people.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define RUNS 5

static bool json;
static bool quick;

/*
 * One result line.  Timings are medians over @runs runs, in ns per @unit;
 * the metadata figure (@unit "cached token") is in bytes.  @extra (NULL:
 * none; this drops it) holds more fields, which follow in the JSON and
 * close the text line as they read in JSON.
 */
static void report(const char *bench, uint32_t page_size, const char *unit,
		   uint64_t count, double *v, unsigned runs, json_t *extra)
{
	bool bytes = !strcmp(unit, "cached token");
	double med = median(v, runs);
	json_t *j;
	char *s;

	if (json) {
		j = json_pack("{s:s,s:I,s:s,s:I,s:o,s:I}", "bench", bench,
			      "page_size", (json_int_t)page_size, "unit", unit,
			      "count", (json_int_t)count,
			      bytes ? "bytes_per_token" : "ns_per_op", tool_json_fixed(med, 2),
			      "runs", (json_int_t)runs);
		if (j && extra)
			json_object_update(j, extra);
		tool_json_line(j, stdout);
	} else {
		s = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
		/* the fields without the object's braces */
		printf("%-24s ps %-4u %10.2f %s per %s%s%.*s\n", bench, page_size, med,
		       bytes ? "bytes" : "ns", unit, s ? "  " : "", s ? (int)strlen(s) - 2 : 0,
		       s ? s + 1 : "");
		free(s);
	}
	json_decref(extra);
	fflush(stdout);
}

static struct kvmm_ctx *make_ctx(uint32_t page_size, uint32_t nr_pages,
				 uint32_t max_seqs, uint32_t max_seq_len)
{
	struct kvmm_params p = tool_params(page_size, nr_pages, max_seqs, max_seq_len);
	struct kvmm_ctx *ctx = NULL;
	int ret = kvmm_create(&p, &ctx);

	if (ret) {
		fprintf(stderr, "micro: kvmm_create: %s\n", strerror(-ret));
		exit(1);
	}
	return ctx;
}

static void must(int ret, const char *what)
{
	if (ret < 0) {
		fprintf(stderr, "micro: %s: %s\n", what, strerror(-ret));
		exit(1);
	}
}

static void fill_tokens(uint32_t *t, uint64_t n, uint64_t seed)
{
	uint64_t i, x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		t[i] = (uint32_t)(x % 32000);
	}
}

/* One page per extend, then all freed at once by close. */
static void bench_alloc_single(void)
{
	uint32_t n = quick ? 1 << 16 : 1 << 20, i, r, seq;
	double alloc[RUNS], freeb[RUNS];

	for (r = 0; r < RUNS; r++) {
		struct kvmm_ctx *ctx = make_ctx(1, n, 1, n);
		uint64_t t0;

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		t0 = now_ns();
		for (i = 0; i < n; i++)
			must(kvmm_seq_extend(ctx, seq, 1, 0), "extend");
		alloc[r] = (double)(now_ns() - t0) / n;
		t0 = now_ns();
		must(kvmm_seq_close(ctx, seq, NULL, 0), "close");
		freeb[r] = (double)(now_ns() - t0) / n;
		kvmm_destroy(ctx);
	}
	report("page_alloc_single", 1, "page", n, alloc, RUNS, NULL);
	report("page_free_bulk", 1, "page", n, freeb, RUNS, NULL);
}

/* Many sequences of one page each: each close frees one page. */
static void bench_free_single(void)
{
	uint32_t n = quick ? 1 << 14 : 1 << 18, i, r, seq;
	double ns[RUNS];

	for (r = 0; r < RUNS; r++) {
		struct kvmm_ctx *ctx = make_ctx(1, n, n, 1);
		uint64_t t0;

		for (i = 0; i < n; i++) {
			must(kvmm_seq_open(ctx, 0, &seq), "open");
			must(kvmm_seq_extend(ctx, seq, 1, 0), "extend");
		}
		t0 = now_ns();
		for (i = 0; i < n; i++)
			must(kvmm_seq_close(ctx, i, NULL, 0), "close");
		ns[r] = (double)(now_ns() - t0) / n;
		kvmm_destroy(ctx);
	}
	report("page_free_single", 1, "page", n, ns, RUNS, NULL);
}

static void bench_alloc_bulk(void)
{
	uint32_t chunk = 4096, rounds = quick ? 16 : 256, i, r, seq;
	double ns[RUNS];

	for (r = 0; r < RUNS; r++) {
		struct kvmm_ctx *ctx = make_ctx(1, chunk * rounds, 1, chunk * rounds);
		uint64_t t0;

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		t0 = now_ns();
		for (i = 0; i < rounds; i++)
			must(kvmm_seq_extend(ctx, seq, chunk, 0), "extend");
		ns[r] = (double)(now_ns() - t0) / ((double)chunk * rounds);
		kvmm_destroy(ctx);
	}
	report("page_alloc_bulk", 1, "page", (uint64_t)chunk * rounds, ns, RUNS,
	       json_pack("{s:I}", "chunk", (json_int_t)chunk));
}

/* Match of one long cached prefix: the cost per matched token. */
static void bench_match(uint32_t page_size)
{
	uint32_t len = quick ? 8192 : 65536, reps = quick ? 20 : 100, i, r, seq;
	uint32_t *tok = malloc(len * sizeof(*tok));
	double ns[RUNS];

	fill_tokens(tok, len, 1);
	for (r = 0; r < RUNS; r++) {
		struct kvmm_ctx *ctx = make_ctx(page_size, len / page_size, 1, len);
		uint64_t total = 0;

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		must(kvmm_seq_extend(ctx, seq, len, 0), "extend");
		must(kvmm_seq_close(ctx, seq, tok, len), "close");
		for (i = 0; i < reps; i++) {
			uint64_t t0;

			must(kvmm_seq_open(ctx, 0, &seq), "open");
			t0 = now_ns();
			must(kvmm_seq_match(ctx, seq, tok, len), "match");
			total += now_ns() - t0;
			must(kvmm_seq_close(ctx, seq, NULL, 0), "close");
		}
		ns[r] = (double)total / ((double)len * reps);
		kvmm_destroy(ctx);
	}
	report("match_per_token", page_size, "token", len, ns, RUNS, NULL);
	free(tok);
}

/* Commit of a fresh prompt into the tree: the cost per inserted token. */
static void bench_insert(uint32_t page_size)
{
	uint32_t len = 16384, reps = quick ? 4 : 32, i, r, seq;
	uint32_t *tok = malloc((size_t)len * reps * sizeof(*tok));
	double ns[RUNS];

	fill_tokens(tok, (uint64_t)len * reps, 2);
	for (r = 0; r < RUNS; r++) {
		struct kvmm_ctx *ctx = make_ctx(page_size, len * reps / page_size, 1, len);
		uint64_t total = 0;

		for (i = 0; i < reps; i++) {
			uint64_t t0;

			must(kvmm_seq_open(ctx, 0, &seq), "open");
			must(kvmm_seq_extend(ctx, seq, len, 0), "extend");
			t0 = now_ns();
			must(kvmm_seq_commit(ctx, seq, tok + (size_t)i * len, len), "commit");
			total += now_ns() - t0;
			must(kvmm_seq_close(ctx, seq, NULL, 0), "close");
		}
		ns[r] = (double)total / ((double)len * reps);
		kvmm_destroy(ctx);
	}
	report("insert_per_token", page_size, "token", (uint64_t)len * reps, ns, RUNS, NULL);
	free(tok);
}

/*
 * Eviction cost per node with N cached leaves: N one-page prompts under
 * one shared root, then reclaim in chunks of N/10 (at most 10,000) leaves;
 * the figure is the median chunk's cost per evicted node.  With @shuffled,
 * every leaf is matched again in a random order first, so that the LRU
 * order has nothing to do with where the nodes sit in memory (what a long
 * run looks like).
 */
static void bench_evict(uint32_t nodes, bool shuffled)
{
	uint32_t chunk = nodes / 10 > 10000 ? 10000 : nodes / 10, i, r, seq;
	uint32_t *perm = malloc(nodes * sizeof(*perm));
	uint64_t x = 88172645463325252ull;
	double ns[RUNS];
	struct kvmm_ctx *ctx = make_ctx(1, nodes, 1, 2);

	for (i = 0; i < nodes; i++) {
		uint32_t tok[2] = { i, i ^ 0x5555 };

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		must(kvmm_seq_extend(ctx, seq, 1, 0), "extend");
		must(kvmm_seq_close(ctx, seq, tok, 1), "close");
		perm[i] = i;
	}
	for (i = nodes - 1; shuffled && i > 0; i--) {
		uint32_t j, t;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		j = (uint32_t)(x % (i + 1));
		t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (i = 0; shuffled && i < nodes; i++) {
		uint32_t tok[2] = { perm[i], perm[i] ^ 0x5555 };

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		must(kvmm_seq_match(ctx, seq, tok, 1), "match");
		must(kvmm_seq_close(ctx, seq, NULL, 0), "close");
	}
	free(perm);
	for (r = 0; r < RUNS; r++) {
		uint64_t t0 = now_ns();
		int64_t got = kvmm_reclaim(ctx, chunk);

		ns[r] = (double)(now_ns() - t0) / chunk;
		if (got != chunk) {
			fprintf(stderr, "micro: reclaim freed %lld of %u\n", (long long)got, chunk);
			exit(1);
		}
	}
	kvmm_destroy(ctx);
	report(shuffled ? "evict_per_node_shuffled" : "evict_per_node", 1, "node",
	       chunk, ns, RUNS, json_pack("{s:I}", "nodes", (json_int_t)nodes));
}

/*
 * Tail latency of commits while the tree grows to 2M one-page leaves (the
 * child hash resizes several times on the way): median, p99 and the
 * single worst close, which is what an engine step would stall on.
 */
static void bench_insert_tail(void)
{
	uint32_t n = quick ? 1u << 17 : 1u << 21, i, seq;
	uint64_t *lat = malloc(n * sizeof(*lat));
	struct kvmm_ctx *ctx = make_ctx(1, n, 1, 2);
	double med;

	for (i = 0; i < n; i++) {
		uint32_t tok[1] = { i };
		uint64_t t0;

		must(kvmm_seq_open(ctx, 0, &seq), "open");
		must(kvmm_seq_extend(ctx, seq, 1, 0), "extend");
		t0 = now_ns();
		must(kvmm_seq_close(ctx, seq, tok, 1), "close");
		lat[i] = now_ns() - t0;
	}
	kvmm_destroy(ctx);
	sort_u64(lat, n);
	med = (double)lat[n / 2];
	report("insert_close_latency", 1, "close", n, &med, 1,
	       json_pack("{s:I,s:I,s:I}", "nodes", (json_int_t)n,
			 "p99_ns", (json_int_t)lat[(uint64_t)n * 99 / 100],
			 "max_ns", (json_int_t)lat[n - 1]));
	free(lat);
}

/*
 * Metadata per cached token on a chat-shaped tree: 20 system prompts of
 * 2,000 tokens, each shared by 100 conversations of 500 tokens of their
 * own; the pool holds exactly what is cached.
 */
static void bench_meta(uint32_t page_size)
{
	uint32_t nsys = 20, conv = quick ? 20 : 100, sys_len = 2000, own = 496;
	uint32_t total = nsys * (sys_len + conv * own), s, c, seq;
	uint32_t tok[2000 + 496];
	uint64_t st[NR_KVMM_STATS];
	struct kvmm_ctx *ctx = make_ctx(page_size, total / page_size, 16, 4096);
	double bpt;

	for (s = 0; s < nsys; s++) {
		fill_tokens(tok, sys_len, 100 + s);
		for (c = 0; c < conv; c++) {
			int m;

			fill_tokens(tok + sys_len, own, 1000 + s * conv + c);
			must(kvmm_seq_open(ctx, 0, &seq), "open");
			m = kvmm_seq_match(ctx, seq, tok, sys_len + own);
			must(m, "match");
			must(kvmm_seq_extend(ctx, seq, sys_len + own - (uint32_t)m, 0), "extend");
			must(kvmm_seq_close(ctx, seq, tok, sys_len + own), "close");
		}
	}
	kvmm_stats(ctx, st, NR_KVMM_STATS);
	bpt = (double)st[KVMM_STAT_META_BYTES] /
	      (double)(st[KVMM_STAT_PAGES_CACHED] * page_size);
	report("meta_bytes_per_token", page_size, "cached token",
	       st[KVMM_STAT_PAGES_CACHED] * page_size, &bpt, 1,
	       json_pack("{s:I,s:I}",
			 "cached_tokens", (json_int_t)(st[KVMM_STAT_PAGES_CACHED] * page_size),
			 "meta_bytes", (json_int_t)st[KVMM_STAT_META_BYTES]));
	kvmm_destroy(ctx);
}

int cmd_micro(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	uint32_t n;
	int c;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'q': quick = true; break;
		case 'h':
			printf("usage: kvmm-bench micro [--json] [--quick]\n");
			return 0;
		default:
			fprintf(stderr, "usage: kvmm-bench micro [--json] [--quick]\n");
			return 2;
		}
	}
	bench_alloc_single();
	bench_free_single();
	bench_alloc_bulk();
	bench_match(1);
	bench_match(16);
	bench_insert(1);
	bench_insert(16);
	bench_insert_tail();
	for (n = 1000; n <= (quick ? 100000u : 1000000u); n *= 10)
		bench_evict(n, false);
	for (n = 1000; n <= (quick ? 100000u : 1000000u); n *= 10)
		bench_evict(n, true);
	bench_meta(1);
	bench_meta(16);
	return 0;
}
