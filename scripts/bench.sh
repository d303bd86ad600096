#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/bench.sh BENCH WORKLOAD OUT [TRACE] - what `make bench` runs: the micro
# and ring benchmarks, then the shared workload replay at page sizes 1 and
# 16 and through an in-process and a cross-process ring (median of 9), the
# tiers, the cross-process/direct ratio quiet and with CPU 1 busy
# (kvmm-bench ratio), and kvmm.transformers under a small transformers
# model.  JSON lines go to stdout and to OUT.  Benchmarks never fail on a
# number: the figures are for people to read.
set -eu
bench=$1
workload=$2
out=$3
mkdir -p "$(dirname "$out")"
: > "$out"
echo "bench: micro" >&2
"$bench" micro --json | tee -a "$out"
echo "bench: ring" >&2
"$bench" ring --json | tee -a "$out"
if [ -r "$workload" ]; then
	for ps in 1 16; do
		echo "bench: replay $workload, page size $ps" >&2
		"$bench" replay --workload "$workload" --page-size "$ps" --repeat 9 --json |
			tee -a "$out"
	done
	echo "bench: replay $workload, device 10%, host tier 4x" >&2
	"$bench" replay --workload "$workload" --capacity-tokens 100208 \
		--host-tokens 400832 --repeat 3 --json | tee -a "$out"
	nvme_file="$(dirname "$out")/replay.nvme"
	echo "bench: replay $workload, device 10%, host 1x, NVMe 3x ($nvme_file)" >&2
	"$bench" replay --workload "$workload" --capacity-tokens 100208 \
		--host-tokens 100208 --nvme-tokens 300624 --nvme-file "$nvme_file" \
		--json | tee -a "$out"
	rm -f "$nvme_file"
	for via in ring remote; do
		echo "bench: replay $workload, page size 1, via $via" >&2
		"$bench" replay --workload "$workload" --via "$via" --repeat 9 --json |
			tee -a "$out"
	done
	if [ "$(nproc)" -ge 2 ]; then
		echo "bench: ratio: replay through another process / direct, quiet and CPU 1 busy" >&2
		"$bench" ratio --workload "$workload" --json | tee -a "$out"
	fi
else
	echo "bench: $workload not found: replay skipped (pass WORKLOAD=FILE)" >&2
fi
echo "bench: tiers (host gather/scatter vs memcpy, NVMe vs fio)" >&2
"$bench" tiers --json --nvme-file "$(dirname "$out")/tiers.nvme" | tee -a "$out"
echo "bench: latency (MATCH, EXTEND, STATS p50/p99 while writeback writes NVMe, vs idle)" >&2
"$bench" latency --json --nvme-file "$(dirname "$out")/latency.nvme" | tee -a "$out"
echo "bench: keyed (put/get of 2 MiB values vs memcpy and fio, through a ring vs in-process)" >&2
"$bench" keyed --json --nvme-file "$(dirname "$out")/keyed.nvme" | tee -a "$out"
rm -f "$(dirname "$out")/keyed.nvme"
if command -v redis-server >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1; then
	echo "bench: remote (Redis Cluster put/get of 2 MiB pages vs redis-benchmark; a throwaway cluster)" >&2
	rdir=$(mktemp -d)
	here=$(cd "$(dirname "$0")" && pwd)
	if seeds=$("$here/redis-cluster.sh" start "$rdir"); then
		"$bench" remote --json --seeds "$seeds" | tee -a "$out" || true
	fi
	"$here/redis-cluster.sh" stop "$rdir"
	rm -rf "$rdir"
else
	echo "bench: no redis-server/redis-benchmark: remote skipped (apt-get install redis-server redis-tools)" >&2
fi
echo "bench: cuda (GPU demote/promote vs pinned copies, kv_indices; skipped without a GPU)" >&2
"$bench" cuda --json | tee -a "$out"
echo "bench: transformers (decode step with KvmmCache vs DynamicCache at batch 1 and 8; TTFT of a prompt 90% cached vs none)" >&2
here=$(cd "$(dirname "$0")" && pwd)
if venv=$("$here/../python/venv.sh" transformers "$(dirname "$(dirname "$bench")")"); then
	"$venv/bin/python" "$here/../python/bench/hf_chat.py" bench --json | tee -a "$out"
else
	echo "bench: transformers skipped: no environment for it" >&2
fi
trace=${4:-}
if [ -n "$trace" ] && [ -r "$trace" ]; then
	for evict in lru slru; do
		echo "bench: trace $trace, evict $evict" >&2
		"$bench" trace --trace "$trace" --evict "$evict" --json | tee -a "$out"
	done
else
	echo "bench: no Mooncake trace: trace skipped (pass TRACE=FILE)" >&2
fi
echo "bench: results in $out" >&2
