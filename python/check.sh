#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check.sh - make check's runner: the CUnit suites, the Python
# package's pytest suites, the transformers suites, then every example of
# README.md and Documentation/*.rst (scripts/check-examples.py); and one
# closing line "N passed, N failed" that counts them all, the only line of
# that shape.
#
#   check.sh OBJTREE SAN TESTS [TESTARGS...]
#
# TESTARGS "-s python" runs only pytest, "-s transformers" only the
# transformers suites (python/check-transformers.sh, in an environment of
# its own outside the clone, built when missing), "-s examples" only the
# examples; any other -s SUITE only CUnit.  pytest runs in a virtual environment at
# OBJTREE/pyvenv-HASH, HASH a hash of python/requirements.txt and
# requirements-check.txt (the tests' extra packages), created on
# first use (from the package index); the package is reinstalled there
# when its sources or libkvmm.a changed.  Skipped tests are listed with
# their reasons.  No python3, no venv module, no index to install from, or
# a sanitizer build (the extension would need the sanitizer's runtime
# preloaded): pytest and the examples are skipped with a line saying why.
# The examples' C programs build against the library as `make install`
# puts it in a scratch prefix.
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
	local log=$objtree/cunit.log t f
	"$tests" "$@" | tee "$log"
	rc=${PIPESTATUS[0]}
	# kvmm-tests' own line: "cunit: N tests, N failed"
	t=$(sed -n 's/^cunit: \([0-9]*\) tests, \([0-9]*\) failed$/\1/p' "$log" | tail -1)
	f=$(sed -n 's/^cunit: \([0-9]*\) tests, \([0-9]*\) failed$/\2/p' "$log" | tail -1)
	if [ -z "$t" ]; then
		failed=$((failed + 1))		# it died before its summary
		return
	fi
	passed=$((passed + t - f)) failed=$((failed + f))
}

# venv_ready VENV - create VENV with python/requirements-check.txt (which
# includes requirements.txt) unless it is there
venv_ready() {
	[ -f "$1/.requirements-installed" ] && return 0
	rm -rf "$1"
	python3 -m venv "$1" >/dev/null 2>&1 &&
		"$1/bin/pip" install -q -r "$here/requirements-check.txt" &&
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

# python_env WHAT - set venv to an environment with the package, or say
# why WHAT is skipped (return 1) or count a failure (return 2)
python_env() {
	if [ -n "$san" ]; then
		echo "python: $1 skipped under SAN=$san"; return 1
	fi
	if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
		echo "python: $1 skipped: no python3 with venv"; return 1
	fi
	venv=$objtree/pyvenv-$(cat "$here/requirements.txt" "$here/requirements-check.txt" |
			       sha256sum | cut -c1-12)
	if ! venv_ready "$venv"; then
		echo "python: $1 skipped: could not install python/requirements-check.txt"; return 1
	fi
	if ! pkg_ready "$venv"; then
		echo "python: the kvmm package failed to build"; failed=$((failed + 1)); return 2
	fi
}

run_pytest() {
	local venv log=$objtree/pytest.log
	python_env pytest || return
	echo "python: pytest python/tests"
	# -rs: every skipped test, with its reason, in pytest's summary
	(cd "$here/tests" && KVMM_O=$objtree "$venv/bin/python" -X dev -m pytest -q -rs \
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

# run_examples - install into a scratch prefix, run every documented example
run_examples() {
	local venv prefix log=$objtree/examples.log erc n f
	python_env examples || return
	prefix=$(mktemp -d) || { failed=$((failed + 1)); return; }
	echo "examples: README.md and Documentation/*.rst, kvmm installed in $prefix"
	if ! make -s -f "$here/../Makefile" O="$objtree" PREFIX="$prefix" DESTDIR= install \
			>"$objtree/install.log" 2>&1; then
		cat "$objtree/install.log"; rm -rf "$prefix"; failed=$((failed + 1)); return
	fi
	if [ ! -f "$prefix/share/doc/kvmm/LICENSE" ]; then
		echo "examples: make install did not install LICENSE"; failed=$((failed + 1))
	fi
	# the transformers examples run where its environment was built
	local hf=() tvenv
	tvenv=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}/venv-transformers-$(cat \
		"$here/requirements.txt" "$here/requirements-transformers.txt" | sha256sum | cut -c1-12)
	if [ -f "$tvenv/.requirements-installed" ] && pkg_ready "$tvenv"; then
		hf=(--transformers-python "$tvenv/bin/python")
	fi
	"$venv/bin/python" "$here/../scripts/check-examples.py" --prefix "$prefix" \
		--build "$objtree" --python "$venv/bin/python" "${hf[@]}" | tee "$log"
	erc=${PIPESTATUS[0]}
	rm -rf "$prefix"
	n=$(sed -n 's/^examples: \([0-9]*\) run.*/\1/p' "$log")
	f=$(sed -n 's/^examples: [0-9]* run ([^)]*), \([0-9]*\) failed, \([0-9]*\) unmarked.*/\1 \2/p' "$log")
	if [ -z "$n" ]; then
		failed=$((failed + 1)); return
	fi
	set -- $f
	passed=$((passed + n - $1)) failed=$((failed + $1 + $2))
	[ "$erc" = 0 ] || [ $(($1 + $2)) != 0 ] || failed=$((failed + 1))
}

# run_transformers - the transformers suites in their own environment
# (python/check-transformers.sh), skipped with its reason when that
# environment cannot be built
run_transformers() {
	local log=$objtree/transformers.log p f e
	if [ -n "$san" ]; then
		echo "python: transformers suites skipped under SAN=$san"; return
	fi
	KVMM_BUILT=1 "$here/check-transformers.sh" "$objtree" | tee "$log"
	local prc=${PIPESTATUS[0]}
	[ "$prc" = 75 ] && return
	p=$(count passed "$log") f=$(count failed "$log") e=$(count error "$log")
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0}))
	if [ "$prc" != 0 ] && [ -z "$f$e" ]; then
		failed=$((failed + 1))
	fi
}

case " $* " in
*" -s python "*)	run_pytest ;;
*" -s transformers "*)	run_transformers ;;
*" -s examples "*)	run_examples ;;
*" -s "*)		run_cunit "$@" ;;
*)			run_cunit "$@"; run_pytest; run_transformers; run_examples ;;
esac
echo
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$rc" = 0 ]
