#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check.sh - make check's runner: the CUnit suites, then the Python
# package's pytest suites, and one closing line "N passed, N failed" that
# counts both.
#
#   check.sh OBJTREE SAN TESTS [TESTARGS...]
#
# TESTARGS "-s python" runs only pytest; any other -s SUITE only CUnit.
# pytest runs in a virtual environment at OBJTREE/pyvenv-HASH, HASH a hash
# of python/requirements.txt, created on first use (from the package
# index); the package is reinstalled there when its sources or libkvmm.a
# changed.  No python3, no venv module, no index to install from, or a
# sanitizer build (the extension would need the sanitizer's runtime
# preloaded): pytest is skipped with a line saying why.
set -uo pipefail

objtree=$1 san=$2 tests=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0 rc=0

# count KIND LOG - the number before " KIND" on LOG's last summary line
count() {
	grep -Eo "[0-9]+ $1" "$2" | tail -1 | cut -d' ' -f1
}

run_cunit() {
	local log=$objtree/cunit.log
	"$tests" "$@" | tee "$log"
	rc=${PIPESTATUS[0]}
	passed=$(count passed "$log") failed=$(count failed "$log")
	passed=${passed:-0} failed=${failed:-$((rc != 0))}
	# CUnit's line is not the last one any more: pytest's and ours follow.
}

# venv_ready VENV - create VENV with python/requirements.txt unless it is there
venv_ready() {
	[ -f "$1/.requirements-installed" ] && return 0
	rm -rf "$1"
	python3 -m venv "$1" >/dev/null 2>&1 &&
		"$1/bin/pip" install -q -r "$here/requirements.txt" &&
		touch "$1/.requirements-installed"
}

# pkg_ready VENV - install the package into VENV when its inputs changed
pkg_ready() {
	local stamp=$1/.kvmm-installed
	if [ -f "$stamp" ] && [ -z "$(find "$here/src" "$here/csrc" "$here/build_ffi.py" \
			"$here/setup.py" "$objtree/libkvmm.a" -newer "$stamp" -print -quit)" ]; then
		return 0
	fi
	KVMM_O=$objtree "$1/bin/pip" install -q --no-build-isolation --no-deps "$here" \
		>"$objtree/pip.log" 2>&1 && touch "$stamp" || { cat "$objtree/pip.log"; return 1; }
}

run_pytest() {
	local venv log=$objtree/pytest.log
	if [ -n "$san" ]; then
		echo "python: pytest skipped under SAN=$san"; return
	fi
	if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
		echo "python: pytest skipped: no python3 with venv"; return
	fi
	venv=$objtree/pyvenv-$(sha256sum "$here/requirements.txt" | cut -c1-12)
	if ! venv_ready "$venv"; then
		echo "python: pytest skipped: could not install python/requirements.txt"; return
	fi
	if ! pkg_ready "$venv"; then
		echo "python: the kvmm package failed to build"; failed=$((failed + 1)); return
	fi
	echo "python: pytest python/tests"
	(cd "$here/tests" && KVMM_O=$objtree "$venv/bin/python" -X dev -m pytest -q \
		-p no:cacheprovider .) |
		tee "$log"
	# pytest's status before anything else runs: a conftest that does not
	# import prints no counts at all, and must still fail
	local prc=${PIPESTATUS[0]} p f e
	p=$(count passed "$log") f=$(count failed "$log") e=$(count error "$log")
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0}))
	if [ "$prc" != 0 ] && [ -z "$f$e" ]; then
		failed=$((failed + 1))
	fi
}

case " $* " in
*" -s python "*)	run_pytest ;;
*" -s "*)		run_cunit "$@" ;;
*)			run_cunit "$@"; run_pytest ;;
esac
echo
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$rc" = 0 ]
