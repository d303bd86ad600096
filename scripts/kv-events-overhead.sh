#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/kv-events-overhead.sh [OBJTREE [RUNS [kvmmd|ring]]] - what
# publishing vLLM's KV events costs an engine: the shared workload
# replayed with host and NVMe tiers (as the events' exactness test) with
# the publisher off and on, RUNS times each, alternating, in one run;
# prints the median us/request of each and their ratio
# (Documentation/performance.rst).  kvmmd (the default): through kvmmd,
# --kv-events off and on; ring: in-process through a ring, kvmm-bench's
# publisher thread (tools/lib/kvevents.c) off and on.  Through kvmmd it
# also prints the CPU time of kvmmd's publisher thread (kvmm-kvevents)
# over each replay with events on.
set -eu
O=${1:-build}
RUNS=${2:-5}
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
one() {	# one replay; $@: kvmmd's extra options
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
	"$O/bin/kvmm-bench" replay --workload "$W" --page-size 16 --via remote \
		--socket "$dir/s" --repeat 1 --capacity-tokens 64000 --json |
		sed -n 's/.*"us_per_request":\([0-9.]*\).*/\1/p'
	[ -z "$cpu0" ] || echo "$cpu0 $(pub_ns)" >>"$dir/pub"
	kill $pid
	wait $pid || true
}
inproc() {	# one in-process replay; $@: kvmm-bench's extra options
	"$O/bin/kvmm-bench" replay --workload "$W" --page-size 16 --via ring --repeat 1 \
		--capacity-tokens 64000 --host-tokens 64000 --nvme-tokens 256000 \
		--nvme-file "$dir/nvme" --json "$@" |
		sed -n 's/.*"us_per_request":\([0-9.]*\).*/\1/p'
}
off= on=
for _ in $(seq "$RUNS"); do
	if [ "$MODE" = ring ]; then
		off="$off $(inproc)"
		on="$on $(inproc --kv-events "ipc://$dir/ev")"
	else
		off="$off $(one)"
		on="$on $(one --kv-events "ipc://$dir/ev" --kv-events-replay "ipc://$dir/rep")"
	fi
done
touch "$dir/pub"
python3 - "$off" "$on" "$dir/pub" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
pub = [(int(b) - int(a)) / 1e6 for a, b in (l.split() for l in open(sys.argv[3]) if l.strip())]
mo, mn = statistics.median(off), statistics.median(on)
print(f"events off: {mo:.1f} us/request (runs: {' '.join(f'{x:.1f}' for x in off)})")
print(f"events on:  {mn:.1f} us/request (runs: {' '.join(f'{x:.1f}' for x in on)})")
print(f"on/off:     {mn / mo:.3f}")
if pub:
    print(f"publisher:  {statistics.median(pub):.1f} ms CPU per replay "
          f"(runs: {' '.join(f'{x:.1f}' for x in pub)})")
PY
