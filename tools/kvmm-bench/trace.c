// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/trace.c - kvmm-bench trace: a Mooncake trace (JSON
 * lines of timestamp, input_length, output_length, hash_ids) through kvmm,
 * one request at a time, to set beside block-level cache simulations.
 *
 * Block id h at position j expands into 512 token ids derived from (h, j)
 * (the last block cut to the input length), so the token-level prefix tree
 * sees exactly the sharing the ids describe.  Each request matches its
 * whole prompt, allocates the rest, commits its prompt (whole pages) and
 * closes; outputs are not cached, as in the block-level reference.
 *
 * block_hit_rate = fully matched 512-token blocks / all blocks.  A cache
 * of whole pages never holds a request's partial last block, which the
 * block-level reference counts when it is resident.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "autoconf.h"
#include "bench.h"

#if CONFIG_KVMM_JANSSON
#include <jansson.h>
#endif

#define BLOCK	512

struct trace {
	uint32_t nreq;
	uint32_t *len;		/* input length per request */
	uint32_t *nblk;		/* blocks per request */
	uint64_t *first;	/* index of its first id in ids */
	uint64_t *ids;
	uint64_t total_blocks;
	uint32_t max_len;
};

static uint32_t block_token(uint64_t h, uint32_t j, uint32_t k)
{
	uint64_t z = h * 0x9e3779b97f4a7c15ull ^ ((uint64_t)j << 32 | k);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) % 100000);
}

#if CONFIG_KVMM_JANSSON
static int trace_load(const char *path, struct trace *t)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0, idcap = 0, rcap = 0;
	unsigned long lineno = 0;
	int ret = 0;

	memset(t, 0, sizeof(*t));
	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -errno;
	}
	while (getline(&line, &cap, f) > 0) {
		json_error_t err;
		json_t *o = json_loads(line, 0, &err), *ids, *len, *x;
		size_t i;

		lineno++;
		if (!o) {
			fprintf(stderr, "%s:%lu: %s\n", path, lineno, err.text);
			ret = -EINVAL;
			break;
		}
		ids = json_object_get(o, "hash_ids");
		len = json_object_get(o, "input_length");
		if (!json_is_array(ids) || !json_is_integer(len) || json_integer_value(len) <= 0 ||
		    json_array_size(ids) != (size_t)(json_integer_value(len) + BLOCK - 1) / BLOCK) {
			fprintf(stderr, "%s:%lu: needs input_length and one hash id per %d "
				"tokens\n", path, lineno, BLOCK);
			json_decref(o);
			ret = -EINVAL;
			break;
		}
		if (t->nreq == rcap) {
			rcap = rcap ? rcap * 2 : 4096;
			t->len = realloc(t->len, rcap * sizeof(*t->len));
			t->nblk = realloc(t->nblk, rcap * sizeof(*t->nblk));
			t->first = realloc(t->first, rcap * sizeof(*t->first));
		}
		while (t->total_blocks + json_array_size(ids) > idcap) {
			idcap = idcap ? idcap * 2 : 1 << 16;
			t->ids = realloc(t->ids, idcap * sizeof(*t->ids));
		}
		if (!t->len || !t->nblk || !t->first || !t->ids) {
			json_decref(o);
			ret = -ENOMEM;
			break;
		}
		t->len[t->nreq] = (uint32_t)json_integer_value(len);
		t->nblk[t->nreq] = (uint32_t)json_array_size(ids);
		t->first[t->nreq] = t->total_blocks;
		json_array_foreach(ids, i, x)
			t->ids[t->total_blocks++] = (uint64_t)json_integer_value(x);
		if (t->len[t->nreq] > t->max_len)
			t->max_len = t->len[t->nreq];
		t->nreq++;
		json_decref(o);
	}
	free(line);
	fclose(f);
	if (!ret && !t->nreq) {
		fprintf(stderr, "%s: no requests\n", path);
		ret = -EINVAL;
	}
	return ret;
}
#else
static int trace_load(const char *path, struct trace *t)
{
	(void)t;
	fprintf(stderr, "%s: this build has no JSON reader (libjansson-dev)\n", path);
	return -EOPNOTSUPP;
}
#endif

static void trace_free(struct trace *t)
{
	free(t->len);
	free(t->nblk);
	free(t->first);
	free(t->ids);
}

static int trace_run(const struct trace *t, uint32_t pages, const char *evict,
		     double *block_hit, double *secs)
{
	uint32_t max_len = (t->max_len + BLOCK - 1) / BLOCK * BLOCK;
	struct kvmm_params p = bench_params(BLOCK, pages, 1, max_len);
	uint32_t *tok = malloc((size_t)max_len * sizeof(*tok)), r, seq;
	uint64_t hit_blocks = 0, t0 = now_ns();
	struct kvmm_ctx *ctx;
	int ret;

	if (!tok)
		return -ENOMEM;
	p.evict_policy = evict;
	ret = kvmm_create(&p, &ctx);
	if (ret) {
		free(tok);
		return ret;
	}
	for (r = 0; r < t->nreq && !ret; r++) {
		uint32_t n = t->len[r], j, k;
		int m;

		for (j = 0; j < t->nblk[r]; j++)
			for (k = 0; k < BLOCK && j * BLOCK + k < n; k++)
				tok[j * BLOCK + k] = block_token(t->ids[t->first[r] + j], j, k);
		ret = kvmm_seq_open(ctx, 0, &seq);
		if (ret)
			break;
		m = kvmm_seq_match(ctx, seq, tok, n);
		if (m < 0) {
			ret = m;
			break;
		}
		hit_blocks += (uint32_t)m / BLOCK;
		if ((uint32_t)m < n)
			ret = kvmm_seq_extend(ctx, seq, n - (uint32_t)m, 0);
		if (!ret)
			ret = kvmm_seq_close(ctx, seq, tok, n);
	}
	if (!ret && kvmm_check(ctx))
		ret = -EUCLEAN;
	kvmm_destroy(ctx);
	free(tok);
	*block_hit = (double)hit_blocks / (double)t->total_blocks;
	*secs = (double)(now_ns() - t0) / 1e9;
	return ret;
}

int cmd_trace(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "trace", required_argument, NULL, 't' },
		{ "capacity-pages", required_argument, NULL, 'c' },
		{ "evict", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	uint32_t caps[16], ncap = 0, i;
	const char *path = NULL, *evict = "lru";
	struct trace t;
	bool json = false;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 't': path = optarg; break;
		case 'c':
			if (ncap == 16)
				die_usage("trace: at most 16 capacities");
			caps[ncap++] = (uint32_t)parse_u64("--capacity-pages", optarg);
			if (!caps[ncap - 1])
				die_usage("trace: --capacity-pages must be at least 1");
			break;
		case 'e': evict = optarg; break;
		case 'j': json = true; break;
		case 'h':
			printf("usage: kvmm-bench trace --trace FILE [--capacity-pages N]... "
			       "[--evict lru|slru] [--json]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (!path)
		die_usage("trace: --trace FILE (Mooncake JSON lines) is required");
	if (strcmp(evict, "lru") && strcmp(evict, "slru"))
		die_usage("trace: --evict must be lru or slru");
	if (!ncap) {
		caps[0] = 1000;
		caps[1] = 10000;
		caps[2] = 30000;
		ncap = 3;
	}
	ret = trace_load(path, &t);
	if (ret)
		return 1;
	for (i = 0; i < ncap; i++) {
		double hit, secs;

		ret = trace_run(&t, caps[i], evict, &hit, &secs);
		if (ret) {
			fprintf(stderr, "trace: %u pages: %s\n", caps[i], strerror(-ret));
			break;
		}
		if (json)
			printf("{\"bench\":\"trace\",\"trace\":\"%s\",\"requests\":%u,\"blocks\":%llu,"
			       "\"page_size\":%d,\"capacity_pages\":%u,\"evict\":\"%s\","
			       "\"block_hit_rate\":%.4f,\"seconds\":%.2f}\n", path, t.nreq,
			       (unsigned long long)t.total_blocks, BLOCK, caps[i], evict, hit, secs);
		else
			printf("%8u pages  %-5s  block hit rate %.4f  (%u requests, %.2f s)\n",
			       caps[i], evict, hit, t.nreq, secs);
		fflush(stdout);
	}
	trace_free(&t);
	return ret ? 1 : 0;
}
