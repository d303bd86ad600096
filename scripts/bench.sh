#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/bench.sh BENCH WORKLOAD OUT - what `make bench` runs: the micro
# benchmarks, then the shared workload replay at page sizes 1 and 16
# (median of 9).  JSON lines go to stdout and to OUT.  Benchmarks never
# fail on a number: the figures are for people to read.
set -eu
bench=$1
workload=$2
out=$3
mkdir -p "$(dirname "$out")"
: > "$out"
echo "bench: micro" >&2
"$bench" micro --json | tee -a "$out"
if [ -r "$workload" ]; then
	for ps in 1 16; do
		echo "bench: replay $workload, page size $ps" >&2
		"$bench" replay --workload "$workload" --page-size "$ps" --repeat 9 --json |
			tee -a "$out"
	done
else
	echo "bench: $workload not found: replay skipped (pass WORKLOAD=FILE)" >&2
fi
echo "bench: results in $out" >&2
