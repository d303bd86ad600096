// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/demo.c - what `make run` shows: a generated multi-turn
 * chat workload (no file needed) replayed through kvmm at two page sizes
 * and two cache sizes, with and without eviction pressure, in a table a
 * person can read.  Deterministic: the same seed prints the same numbers
 * (all but the timings).
 */
#include <getopt.h>
#include <stdlib.h>

#include "bench.h"

int cmd_demo(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "requests", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const uint32_t page_sizes[] = { 1, 16 };
	static const double fractions[] = { 1.0, 0.5, 0.25 };
	uint64_t unique = 0;
	struct wl_gen gen = { .seed = 20261122, .requests = 600, .rate = 2 };
	uint32_t i, j;
	struct workload wl;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 's': gen.seed = parse_u64("--seed", optarg); break;
		case 'r': gen.requests = (uint32_t)parse_u64("--requests", optarg); break;
		case 'h':
			printf("usage: kvmm-bench demo [--seed N] [--requests N]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (!gen.requests)
		die_usage("demo: --requests must be at least 1");
	ret = workload_generate(&gen, &wl);
	if (ret) {
		fprintf(stderr, "demo: cannot generate the workload: out of memory\n");
		return 1;
	}
	for (i = 0; i < wl.nsegs; i++)
		unique += wl.seg_len[i];

	printf("kvmm demo: %u generated requests (chats, few-shot prompts, agents; "
	       "seed %llu);\n%llu prompt tokens, about %llu distinct.\n"
	       "Each request matches its prompt against the prefix cache, allocates KV\n"
	       "for the rest, decodes, and commits; at most %u run at once.\n\n",
	       wl.nreq, (unsigned long long)gen.seed,
	       (unsigned long long)wl.prompt_tokens, (unsigned long long)unique,
	       wl.max_inflight);
	printf("%-9s %-14s %10s %8s %12s %10s %6s\n", "page size", "cache tokens",
	       "matched", "hit rate", "evicted", "us/request", "check");
	for (i = 0; i < sizeof(page_sizes) / sizeof(page_sizes[0]); i++) {
		for (j = 0; j < sizeof(fractions) / sizeof(fractions[0]); j++) {
			struct replay_opts o = { .page_size = page_sizes[i], .repeat = 3 };
			struct replay_result res;
			uint64_t cap = (uint64_t)((double)unique * fractions[j]);
			uint64_t floor_cap = (uint64_t)wl.max_seq_len * wl.max_inflight;

			if (cap < floor_cap)
				cap = floor_cap;	/* room for the requests in flight */
			o.capacity_tokens = cap / o.page_size * o.page_size;
			ret = replay_run(&wl, &o, &res);
			if (ret) {
				workload_free(&wl);
				return 1;
			}
			printf("%-9u %-14llu %10llu %8.4f %12llu %10.2f %6s\n", o.page_size,
			       (unsigned long long)o.capacity_tokens,
			       (unsigned long long)res.matched_tokens,
			       (double)res.matched_tokens / (double)res.prompt_tokens,
			       (unsigned long long)res.evicted_tokens, res.us_per_request,
			       res.accounting_ok ? "ok" : "BROKEN");
		}
	}
	printf("\nmatched: prompt tokens served from cache instead of recomputed.\n"
	       "check: kvmm_check() after the replay, every page free or cached.\n"
	       "The shared benchmark (make bench) replays ../shared/bench the same way.\n");
	workload_free(&wl);
	return 0;
}
