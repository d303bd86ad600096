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

#include "bench.h"

#define BLOCK	WL_BLOCK

static int trace_run(const struct workload *t, uint32_t pages, const char *evict,
		     double *block_hit, double *secs)
{
	uint32_t max_len = (t->max_seq_len + BLOCK - 1) / BLOCK * BLOCK;
	struct kvmm_params p = tool_params(BLOCK, pages, 1, max_len);
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
		uint32_t n = t->reqs[r].prompt_len;
		int m;

		workload_prompt(t, &t->reqs[r], tok);
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
	struct workload t;
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
	ret = workload_load_mooncake(path, &t);
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
			tool_json_line(json_pack("{s:s,s:s,s:I,s:I,s:i,s:I,s:s,s:o,s:o}",
						 "bench", "trace", "trace", path,
						 "requests", (json_int_t)t.nreq,
						 "blocks", (json_int_t)t.total_blocks,
						 "page_size", BLOCK,
						 "capacity_pages", (json_int_t)caps[i],
						 "evict", evict,
						 "block_hit_rate", tool_json_fixed(hit, 4),
						 "seconds", tool_json_fixed(secs, 2)), stdout);
		else
			printf("%8u pages  %-5s  block hit rate %.4f  (%u requests, %.2f s)\n",
			       caps[i], evict, hit, t.nreq, secs);
		fflush(stdout);
	}
	workload_free(&t);
	return ret ? 1 : 0;
}
