#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check-transformers.sh - the Hugging Face transformers suites
# (python/tests/test_transformers*.py): kvmm.transformers' KvmmCache under
# real model code.  torch and transformers are several GB, so the virtual
# environment lives outside the clone, in
# ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-transformers-HASH (HASH of
# requirements.txt and requirements-transformers.txt), reused when
# present and built when not.  The package is installed into it from this
# tree (built in OBJTREE, default build).  Prints pytest's summary; exits
# with its status, or 75 (EX_TEMPFAIL) when the environment cannot be
# built (no package index), having said so.
#
#   python/check-transformers.sh [OBJTREE [PYTEST-ARGS...]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
objtree=$(cd "$root" && realpath -m "${1:-build}")
[ $# -eq 0 ] || shift
hash=$(cat "$here/requirements.txt" "$here/requirements-transformers.txt" | sha256sum | cut -c1-12)
venv=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}/venv-transformers-$hash

if [ ! -f "$venv/.requirements-installed" ]; then
	echo "python: building $venv (torch and transformers from the package index)"
	rm -rf "$venv"
	if ! { python3 -m venv "$venv" &&
	       "$venv/bin/pip" install -q -r "$here/requirements-transformers.txt"; }; then
		echo "python: transformers suites skipped: could not build $venv" \
			"(python/requirements-transformers.txt from the package index)"
		rm -rf "$venv"
		exit 75
	fi
	touch "$venv/.requirements-installed"
fi
# make check has built the library and kvmmd in OBJTREE at its own DEBUG
[ -n "${KVMM_BUILT:-}" ] || make -C "$root" -s O="$objtree" lib tools
KVMM_O=$objtree "$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall "$here"
cd "$here/tests"
KVMM_O=$objtree exec "$venv/bin/python" -X dev -m pytest -q -rs -p no:cacheprovider \
	"${@:-test_transformers.py}"
