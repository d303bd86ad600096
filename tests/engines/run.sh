#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/engines/run.sh - the inference engines' own tests of their KV
# offloading code, run with this tree's package installed beside them
# (make check-engines).  For each ENGINE (vllm, lmcache; default both):
#
#  - its virtual environment lives outside the clone (torch and its CUDA
#    libraries are several GB), in
#    ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-ENGINE-HASH (HASH of
#    requirements-ENGINE.txt and python/requirements.txt), reused when
#    present and built when not; the package is installed into it from
#    this tree (built in OBJTREE, default build);
#  - its source distribution, pinned by sha256 in sdists.txt, is downloaded
#    once into ${KVMM_VENV_CACHE:-~/.cache/kvmm}/sdist/ (fetch.py), and the
#    members its tests need are extracted afresh into OBJTREE/engines/ENGINE;
#  - pytest runs those tests there, with ENGINE_plugin.py from this folder
#    loaded as a plugin (-p) when it exists, and unmodified when it does
#    not; test_kvmm_ENGINE.py from this folder, when it exists, runs in the
#    same session (python/tests is on PYTHONPATH for its kvmmd helper, and
#    KVMM_O names OBJTREE).  KVMM_ENGINES_BASELINE=1 leaves both out: the
#    engines' tests exactly as they ship.
#
# Prints pytest's output, then per test file what passed, failed and was
# skipped, and closes with "N passed, N failed" over all the engines; exits
# non-zero when anything failed.
#
#   tests/engines/run.sh [OBJTREE [ENGINE...]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
objtree=$(cd "$root" && realpath -m "${1:-build}")
[ $# -eq 0 ] || shift
engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(vllm lmcache sglang)
cache=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}

# What each engine's tests need from its sdist (a trailing / is a whole
# folder), which of those pytest runs, and whether the sdist's own source
# is what the tests import (vllm: its wheel is a CUDA build, not installed).
# The engines' top-level tests/conftest.py is left out: it imports the
# whole engine.
engine_setup() {
	pytest_extra=()
	case $1 in
	vllm)
		# the tiering folder: the example and fs tiers' tests with kvmm's
		# tier in their place (vllm_plugin.py), the rest (vLLM's async
		# lookup, backpressure, factory, metrics, poll thread and its
		# other tiers) as they ship; not p2p/, vLLM's peer-to-peer
		# transport over zmq, which holds no tier and times its sessions
		# against wall-clock deadlines (flaky on a loaded machine)
		tests=(tests/v1/kv_offload/tiering/)
		pytest_extra=(--ignore=tests/v1/kv_offload/tiering/p2p)
		# tests/distributed: vLLM's KV event publisher tests and their
		# subscriber, which test_kvmm_vllm_kv_events.py runs against kvmmd
		members=(vllm/ tests/__init__.py tests/v1/__init__.py
			 tests/v1/kv_offload/__init__.py
			 tests/v1/kv_offload/conftest.py "${tests[@]}"
			 tests/distributed/__init__.py tests/distributed/conftest.py
			 tests/distributed/test_events.py)
		# kvmmd for the second pass: 64 KiB pages (vLLM's 2 MiB blocks), 128 MiB
		kvmmd_geom=(--head-dim 2048 --host-pages 2048)
		source_on_path=y ;;
	lmcache)
		# the native connector adapter's tests over kvmm's connector, and
		# the StorageManager's with kvmm as its L2 native plugin
		# (lmcache_plugin.py)
		tests=(tests/v1/distributed/test_native_connector_l2_adapter.py
		       tests/v1/distributed/test_distributed_storage_manager.py)
		members=(tests/__init__.py tests/v1/__init__.py
			 tests/v1/distributed/__init__.py
			 tests/v1/distributed/utils.py "${tests[@]}")
		# kvmmd for the second pass: 4 KiB pages (LMCache's test chunks), 64 MiB
		kvmmd_geom=(--head-dim 128 --host-pages 16384)
		source_on_path= ;;
	sglang)
		# SGLang ships no storage-backend tests in its packages (its test/
		# tree is in neither sdist nor wheel): ours alone, in its environment.
		tests=() members=()
		source_on_path= ;;
	*)
		echo "engines: unknown engine '$1' (vllm, lmcache, sglang)" >&2
		exit 2 ;;
	esac
}

# Sets venv to ENGINE's virtual environment, building it when missing.
# The requirements file's "# no-deps: SPEC" lines are installed last,
# without their dependencies.
engine_venv() {
	local req=$here/requirements-$1.txt hash nodeps inc start=$SECONDS
	# the hash covers the files it includes (-r) too
	inc=$(sed -n 's/^-r[[:space:]]*//p' "$req" | sed "s|^|$here/|")
	# shellcheck disable=SC2086 # file names without spaces
	hash=$(cat "$req" $inc | sha256sum | cut -c1-12)
	venv=$cache/venv-$1-$hash
	[ ! -f "$venv/.requirements-installed" ] || return 0
	echo "engines: building $venv (torch from the package index)"
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q -r "$req"
	nodeps=$(sed -n 's/^#[[:space:]]*no-deps:[[:space:]]*//p' "$req")
	if [ -n "$nodeps" ]; then
		# shellcheck disable=SC2086 # one or more specifiers
		"$venv/bin/pip" install -q --no-deps $nodeps
	fi
	touch "$venv/.requirements-installed"
	echo "engines: built $venv in $((SECONDS - start))s"
}

for engine in "${engines[@]}"; do
	engine_setup "$engine"
done
make -C "$root" -s O="$objtree" lib tools

results=()
for engine in "${engines[@]}"; do
	echo "=== $engine"
	engine_setup "$engine"
	dest=$objtree/engines/$engine
	if [ ${#members[@]} -gt 0 ]; then
		sdist=$(python3 "$here/fetch.py" fetch "$engine" "$cache/sdist")
		python3 "$here/fetch.py" extract "$sdist" "$dest" "${members[@]}"
	else
		rm -rf "$dest" && mkdir -p "$dest"
	fi
	# An empty configuration there ends pytest's search for one in the
	# folders above (this tree's, or any other).
	printf '[pytest]\n' >"$dest/pytest.ini"
	engine_venv "$engine"
	KVMM_O=$objtree "$venv/bin/pip" install -q --no-build-isolation \
		--no-deps --force-reinstall "$root/python"

	plugin=() ours=()
	if [ -z "${KVMM_ENGINES_BASELINE:-}" ]; then
		if [ -f "$here/${engine}_plugin.py" ]; then
			plugin=(-p "${engine}_plugin")
		fi
		for f in "$here/test_kvmm_$engine.py" "$here/test_kvmm_${engine}_"*.py; do
			[ -f "$f" ] && ours+=("$f")
		done
	else
		echo "engines: KVMM_ENGINES_BASELINE: $engine's tests as shipped"
	fi
	pythonpath=$here:$root/python/tests${source_on_path:+:$dest}
	status=0
	(cd "$dest" && KVMM_O=$objtree PYTHONPATH=$pythonpath \
		"$venv/bin/python" -m pytest -q -p no:cacheprovider \
		-o log_cli=false -rs "${plugin[@]}" \
		-o junit_family=xunit1 --junitxml="$dest/junit.xml" \
		"${pytest_extra[@]}" "${tests[@]}" "${ours[@]}") || status=$?
	results+=("$engine:$status:$dest/junit.xml")
	[ ${#plugin[@]} -gt 0 ] || continue

	# The second pass: the engine's tests again, every tier or connector
	# through one kvmmd (KVMM_ENGINE_SOCKET, read by the plugin).
	echo "=== $engine, through kvmmd"
	sock=$dest/kvmmd.sock
	rm -f "$sock"
	# Each test's store is a model identity of its own (a keyed space), all
	# in the one namespace of this kvmmd's unbound clients: the whole table,
	# not the 64 a namespace may hold by default (--ns-kspaces).
	"$objtree/bin/kvmmd" --socket "$sock" --model-id engines --page-size 4 --pages 16 \
		--layers 1 --kv-heads 1 --dtype-bytes 4 --ns-kspaces 1024 "${kvmmd_geom[@]}" \
		>"$dest/kvmmd.log" 2>&1 &
	kvmmd_pid=$!
	# the socket's file appears at bind(), a moment before listen(): wait
	# until kvmmd answers, as python/tests/kvmmd.py does
	for _ in $(seq 100); do
		"$objtree/bin/kvmmctl" --socket "$sock" probe >/dev/null 2>&1 && break
		sleep 0.1
	done
	status=0
	(cd "$dest" && KVMM_ENGINE_SOCKET=$sock PYTHONPATH=$pythonpath \
		"$venv/bin/python" -m pytest -q -p no:cacheprovider \
		-o log_cli=false -rs "${plugin[@]}" \
		-o junit_family=xunit1 --junitxml="$dest/junit-kvmmd.xml" \
		"${pytest_extra[@]}" "${tests[@]}") || status=$?
	kill "$kvmmd_pid" 2>/dev/null || status=1	# it must still be serving
	wait "$kvmmd_pid" || true
	results+=("$engine (through kvmmd):$status:$dest/junit-kvmmd.xml")
done

echo "=== summary"
exec python3 "$here/summary.py" "${results[@]}"
