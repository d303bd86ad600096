// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/main.c - kvmm-bench: benchmarks of kvmm, machine
 * readable (--json: one JSON object per line), never pass/fail.
 *
 *   kvmm-bench micro [--json] [--quick]
 *   kvmm-bench replay --workload FILE [options] [--json]
 *   kvmm-bench demo
 *   kvmm-bench ring [--json] [--quick]
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct kvmm_params bench_params(uint32_t page_size, uint32_t nr_pages, uint32_t max_seqs,
				uint32_t max_seq_len)
{
	struct kvmm_params p = {
		.model = { .layers = 1, .kv_heads = 1, .head_dim = 1, .dtype_bytes = 2,
			   .attn = KVMM_ATTN_MHA },
		.page_size = page_size,
		.nr_pages = nr_pages,
		.max_seqs = max_seqs,
		.max_seq_len = max_seq_len,
	};
	return p;
}

const char *tool_name = "kvmm-bench";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmm-bench COMMAND [options]\n"
		"  micro [--json] [--quick]   allocator, tree and reclaim micro benchmarks\n"
		"  replay --workload FILE ... replay a shared workload (see replay --help)\n"
		"  demo                       a short generated replay with a readable summary\n"
		"  ring [--json] [--quick]    command ring throughput and latency, in and across processes\n"
		"  trace --trace FILE ...     a Mooncake trace, one request at a time (see trace --help)\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "micro"))
		return cmd_micro(argc - 1, argv + 1);
	if (!strcmp(argv[1], "replay"))
		return cmd_replay(argc - 1, argv + 1);
	if (!strcmp(argv[1], "demo"))
		return cmd_demo(argc - 1, argv + 1);
	if (!strcmp(argv[1], "ring"))
		return cmd_ring(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return cmd_trace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "kvmm-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
