#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/kv-events-overhead.sh [OBJTREE[:OBJTREE...] [PAIRS [kvmmd|ring]]] -
# what publishing vLLM's KV events costs an engine: the shared workload
# replayed with host and NVMe tiers (as the events' exactness test), in
# PAIRS pairs of one replay with the publisher off and one with it on,
# one right after the other (the order swapped every other pair, so that
# neither side always runs first), in one run; prints each side's median
# us/request and, what the bar is about, the median of the pairs' on/off
# ratios with their quartiles and extremes (Documentation/performance.rst).
# With several OBJTREEs (a build and the build it is compared with) each
# round runs a pair of each, interleaved.
#
# kvmmd (the default): through kvmmd, --kv-events off and on; the two
# kvmmds are started with the same options apart from the events', and
# each replay starts once kvmmd answers a probe.  It also prints the CPU
# time of kvmmd's publisher thread (kvmm-kvevents) over each replay with
# events on.  ring: in-process through a ring, kvmm-bench's publisher
# thread (tools/lib/kvevents.c) off and on.
set -eu
OS=${1:-build}
PAIRS=${2:-15}
MODE=${3:-kvmmd}
W=${KVMM_SHARED:-$(dirname "$0")/../../shared}/bench/workload.jsonl
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
pid=
pub_ns() {	# CPU ns of kvmmd's publisher thread so far, or nothing
	for t in /proc/$pid/task/*; do
		if [ "$(cat "$t/comm" 2>/dev/null)" = kvmm-kvevents ]; then
			cut -d' ' -f1 "$t/schedstat"
		fi
	done
	return 0
}
viad() {	# one replay through kvmmd; $1: the objtree, $@: kvmmd's extra options
	O=$1
	shift
	rm -f "$dir/s" "$dir/nvme"
	"$O/bin/kvmmd" --socket "$dir/s" --quiet --page-size 16 --pages 4000 \
		--layers 1 --kv-heads 1 --head-dim 4 --host-pages 4000 \
		--nvme-file "$dir/nvme" --nvme-pages 16000 --nvme-reformat \
		--model-id overhead --shutdown-flush-ms 0 "$@" &
	pid=$!
	for _ in $(seq 100); do
		"$O/bin/kvmmctl" --socket "$dir/s" probe >/dev/null 2>&1 && break
		sleep 0.05
	done
	cpu0=$(pub_ns)
	us=$("$O/bin/kvmm-bench" replay --workload "$W" --page-size 16 --via remote \
		--socket "$dir/s" --repeat 1 --capacity-tokens 64000 --json |
		sed -n 's/.*"us_per_request":\([0-9.]*\).*/\1/p')
	cpu1=$(pub_ns)
	kill $pid
	wait $pid || true
	echo "$us ${cpu0:+$((cpu1 - cpu0))}"
}
inproc() {	# one in-process replay; $1: the objtree, $@: kvmm-bench's extra options
	O=$1
	shift
	rm -f "$dir/nvme"
	us=$("$O/bin/kvmm-bench" replay --workload "$W" --page-size 16 --via ring --repeat 1 \
		--capacity-tokens 64000 --host-tokens 64000 --nvme-tokens 256000 \
		--nvme-file "$dir/nvme" --json "$@" |
		sed -n 's/.*"us_per_request":\([0-9.]*\).*/\1/p')
	echo "$us"
}
one() {	# one replay; $1: the objtree, $2: off or on
	if [ "$MODE" = ring ]; then
		if [ "$2" = on ]; then
			inproc "$1" --kv-events "ipc://$dir/ev"
		else
			inproc "$1"
		fi
	elif [ "$2" = on ]; then
		viad "$1" --kv-events "ipc://$dir/ev" --kv-events-replay "ipc://$dir/rep"
	else
		viad "$1"
	fi
}
: >"$dir/runs"
for i in $(seq "$PAIRS"); do
	for O in $(echo "$OS" | tr : ' '); do
		if [ $((i % 2)) = 1 ]; then sides="off on"; else sides="on off"; fi
		for s in $sides; do
			echo "$O $i $s $(one "$O" "$s")" >>"$dir/runs"
		done
	done
done
python3 - "$dir/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], {}).setdefault(int(f[1]), {})[f[2]] = f[3:]
def q(xs, p):   # the p-quantile, interpolated
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    i = int(k)
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * (k - i)
for o, pairs in runs.items():
    off = [float(p["off"][0]) for p in pairs.values()]
    on = [float(p["on"][0]) for p in pairs.values()]
    ratio = [b / a for a, b in zip(off, on)]
    pub = [int(p["on"][1]) / 1e6 for p in pairs.values() if len(p["on"]) > 1]
    if len(runs) > 1:
        print(f"{o}:")
    print(f"events off: {statistics.median(off):.1f} us/request (runs: {' '.join(f'{x:.1f}' for x in off)})")
    print(f"events on:  {statistics.median(on):.1f} us/request (runs: {' '.join(f'{x:.1f}' for x in on)})")
    print(f"on/off:     {statistics.median(ratio):.3f} median of {len(ratio)} pairs "
          f"(quartiles {q(ratio, .25):.3f} {q(ratio, .75):.3f}, "
          f"range {min(ratio):.3f} {max(ratio):.3f}; "
          f"medians' ratio {statistics.median(on) / statistics.median(off):.3f})")
    print(f"pairs:      {' '.join(f'{x:.3f}' for x in ratio)}")
    if pub:
        print(f"publisher:  {statistics.median(pub):.1f} ms CPU per replay "
              f"(runs: {' '.join(f'{x:.1f}' for x in pub)})")
PY
