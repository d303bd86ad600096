#!/bin/bash
# SPDX-License-Identifier: MIT
# scripts/gpu-run.sh - build kvmm on a bare GPU machine and run everything
# that needs the device, in one go (GPU time is short: nothing here waits
# on anything it does not need).  Run from the repository root, with the
# .gpu/ folder scripts/gpu-prepare.sh filled beside it:
#
#   OUT=DIR [BUDGET=seconds] [STEPS="env build contract bench python memcheck racecheck ncu"] \
#       scripts/gpu-run.sh
#
# Steps, each logged to DIR (at most eight files, as the device tool
# brings back):
#   env       nvidia-smi -L, the driver and CUDA versions, nvcc, torch
#   build     the .debs unpacked (dpkg -x) into /tmp/kvmm-deps, make with
#             that prefix on CFLAGS/LDFLAGS (an rpath, so nothing else is
#             needed at run time) into build-gpu/
#   contract  kvmm-tests -s kvmm_contract_cuda: the kernels against their
#             C references, demote/promote, resize, export/import
#   bench     kvmm-bench cuda --json
#   python    the package (.gpu/whl) into /tmp/kvmm-site, then pytest on
#             the device: test_torch.py, test_gpu_transformer.py and the
#             cuda tests of test_api.py
#   memcheck, racecheck
#             compute-sanitizer over the contract suite, each given what
#             is left of BUDGET (default 540 s)
#   ncu       Nsight Compute over the bench's first copy kernels
# env's lines head summary.txt.
# The last lines are a table of each step's status and time.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
BUDGET=${BUDGET:-540}
STEPS=${STEPS:-env build contract bench python memcheck racecheck ncu}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/tmp/kvmm-deps
objtree=$root/build-gpu
libdir=$prefix/usr/lib/x86_64-linux-gnu
start=$(date +%s)
summary=()
mkdir -p "$OUT"
cd "$root"

left() { echo $((BUDGET - ($(date +%s) - start))); }

# step NAME COMMAND... - run, log the status and the time
step() {
	local name=$1 t0 rc
	shift
	case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
	t0=$(date +%s)
	echo "=== $name (at $((t0 - start)) s)"
	"$@"
	rc=$?
	summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" $(($(date +%s) - t0)))")
	return $rc
}

cuda_home=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
sanitizer=$(command -v compute-sanitizer || echo "$cuda_home/bin/compute-sanitizer")

do_env() {
	{
		nvidia-smi -L
		nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
			--format=csv
		nvidia-smi | sed -n '3p'
		"$cuda_home/bin/nvcc" --version | tail -2
		python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
		uname -r; nproc; grep MemTotal /proc/meminfo
	} 2>&1 | tee "$OUT/env.txt.tmp"
}

do_build() {
	rm -rf "$prefix"
	for f in .gpu/debs/*.deb; do
		dpkg -x "$f" "$prefix" || return 1
	done
	export CFLAGS="-I$prefix/usr/include"
	export LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
	make -j"$(nproc)" O="$objtree" CUDA_HOME="$cuda_home" all tests >"$OUT/build.log" 2>&1
	local rc=$?
	tail -5 "$OUT/build.log"
	grep -E 'CONFIG_KVMM_[A-Z_]+ :=' "$objtree/config.mk"
	return $rc
}

# an inactive suite or a skipped bench is a failure here: the device is the point
do_contract() {
	timeout 180 "$objtree/tests/kvmm-tests" -s kvmm_contract_cuda 2>&1 | tee "$OUT/contract.log" |
		grep -v '\.\.\.passed$' | tail -40 &&
		! grep -q 'kvmm_contract_cuda: inactive' "$OUT/contract.log"
}

do_bench() {
	timeout 150 "$objtree/bin/kvmm-bench" cuda --json | tee "$OUT/bench-cuda.json" &&
		! grep -q '"skipped"' "$OUT/bench-cuda.json"
}

do_python() {
	local site=/tmp/kvmm-site
	rm -rf "$site"
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
		.gpu/whl/*.whl || return 1
	(cd python/tests && PYTHONPATH=$site LD_LIBRARY_PATH=$libdir KVMM_O=$objtree \
		PYTHONUNBUFFERED=1 timeout "$(left)" python3 -m pytest -q -p no:cacheprovider -rs \
		test_torch.py test_gpu_transformer.py test_api.py -k 'cuda or torch or gpu or dlpack' \
		2>&1) | tee "$OUT/pytest.log" | tail -30
}

# sanitize TOOL - compute-sanitizer over the contract suite, in what is left
sanitize() {
	local t
	t=$(( $(left) - 20 ))
	[ "$t" -gt 30 ] || { echo "$1: no time left"; return 124; }
	timeout "$t" "$sanitizer" --tool "$1" --error-exitcode 3 --print-limit 20 \
		"$objtree/tests/kvmm-tests" -s kvmm_contract_cuda >"$OUT/$1.log" 2>&1
	local rc=$?
	grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^cunit: [0-9]+ tests, [0-9]+ failed|Invalid|Race' "$OUT/$1.log" | tail -8
	return $rc
}

# ncu over the bench's copy kernels at page size 1, past its probe (14
# launches): host staging, then device staging
do_ncu() {
	local ncu t
	ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	t=$(( $(left) - 10 ))
	[ -n "$ncu" ] && [ "$t" -gt 30 ] || { echo "ncu: none, or no time left"; return 124; }
	timeout "$t" "$ncu" --kernel-name regex:kvmm_kv --launch-skip 14 --launch-count 28 \
		--section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
		--section Occupancy "$objtree/bin/kvmm-bench" cuda --set-mib 64 >"$OUT/ncu.log" 2>&1
	local rc=$?
	grep -E '^  kvmm_kv|Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy' \
		"$OUT/ncu.log" | head -60
	return $rc
}

step env do_env
step build do_build || { printf '%s\n' "${summary[@]}"; exit 1; }
step contract do_contract
step bench do_bench
step python do_python
step memcheck sanitize memcheck
step racecheck sanitize racecheck
step ncu do_ncu
echo "=== summary ($(($(date +%s) - start)) s in all)"
{ cat "$OUT/env.txt.tmp" 2>/dev/null; printf '%s\n' "${summary[@]}"; } > "$OUT/summary.txt"
rm -f "$OUT/env.txt.tmp"
printf '%s\n' "${summary[@]}"
