// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/main.c - kvmm-bench: benchmarks of kvmm, machine
 * readable (--json: one JSON object per line), never pass/fail.
 *
 *   kvmm-bench micro [--json] [--quick]
 *   kvmm-bench replay --workload FILE [options] [--json]
 *   kvmm-bench demo
 *   kvmm-bench ring [--json] [--quick]
 *   kvmm-bench ratio --workload FILE [options] [--json]
 *   kvmm-bench tiers [--json] [--quick]
 *   kvmm-bench cuda [--json] [--driver LIB] [--set-mib N]
 *   kvmm-bench latency [--json] [--quick] [--nvme-file PATH]
 *   kvmm-bench keyed [--json] [--quick] [--batch N] [--nvme-file PATH]
 *   kvmm-bench remote --seeds HOST:PORT[,...] [--json] [--batch N]
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *tool_name = "kvmm-bench";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmm-bench COMMAND [options]\n"
		"  micro [--json] [--quick]   allocator, tree and reclaim micro benchmarks\n"
		"  replay --workload FILE ... replay a shared workload (see replay --help)\n"
		"  demo                       a short generated replay with a readable summary\n"
		"  ring [--json] [--quick]    command ring throughput and latency, in and across processes\n"
		"  ratio --workload FILE ...  replay through another process against direct, quiet and\n"
		"                             with a core kept busy (see ratio --help)\n"
		"  trace --trace FILE ...     a Mooncake trace, one request at a time (see trace --help)\n"
		"  tiers [--json] [--quick]   host and NVMe tier bandwidth beside memcpy and fio\n"
		"  cuda [--json] [--driver LIB] [--set-mib N]\n"
		"                             GPU demote/promote and kv_indices beside the driver's copies\n"
		"  latency [--json] [--quick] [--nvme-file PATH]\n"
		"                             command p50/p99 while NVMe is written, against idle\n"
		"  keyed [--json] [--quick] [--batch N] [--nvme-file PATH] [--qd N] [--no-fio]\n"
		"                             keyed store put/get GB/s beside memcpy, fio, in-process\n"
		"  remote --seeds HOST:PORT[,...] [--json] [--batch N] [--rounds R] [--value-kib K]\n"
		"                             remote tier (Redis Cluster) put/get beside redis-benchmark\n");
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
	if (!strcmp(argv[1], "ratio"))
		return cmd_ratio(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return cmd_trace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "tiers"))
		return cmd_tiers(argc - 1, argv + 1);
	if (!strcmp(argv[1], "cuda"))
		return cmd_cuda(argc - 1, argv + 1);
	if (!strcmp(argv[1], "latency"))
		return cmd_latency(argc - 1, argv + 1);
	if (!strcmp(argv[1], "keyed"))
		return cmd_keyed(argc - 1, argv + 1);
	if (!strcmp(argv[1], "remote"))
		return cmd_remote(argc - 1, argv + 1);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "kvmm-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
