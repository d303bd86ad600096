#!/bin/bash
# SPDX-License-Identifier: MIT
# python/transformers-env.sh - the environment of kvmm.transformers: torch
# and a pinned transformers (python/requirements-transformers.txt) with
# this tree's package.  torch is several GB, so the virtual environment
# lives outside the clone, in
# ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-transformers-HASH (HASH of
# requirements.txt and requirements-transformers.txt), reused when present
# and built when not.  The package is installed into it from this tree
# (built in OBJTREE, default build, unless KVMM_BUILT is set: make check
# has built it at its own DEBUG).  Prints the environment's directory;
# exits 75 (EX_TEMPFAIL) when it cannot be built (no package index),
# having said why on stderr.
#
#   python/transformers-env.sh [OBJTREE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
objtree=$(cd "$root" && realpath -m "${1:-build}")
hash=$(cat "$here/requirements.txt" "$here/requirements-transformers.txt" | sha256sum | cut -c1-12)
venv=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}/venv-transformers-$hash

if [ ! -f "$venv/.requirements-installed" ]; then
	echo "python: building $venv (torch and transformers from the package index)" >&2
	rm -rf "$venv"
	if ! { python3 -m venv "$venv" &&
	       "$venv/bin/pip" install -q -r "$here/requirements-transformers.txt"; } >&2; then
		echo "python: transformers skipped: could not build $venv" \
			"(python/requirements-transformers.txt from the package index)" >&2
		rm -rf "$venv"
		exit 75
	fi
	touch "$venv/.requirements-installed"
fi
[ -n "${KVMM_BUILT:-}" ] || make -C "$root" -s O="$objtree" lib tools >&2
KVMM_O=$objtree "$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall \
	"$here" >&2
echo "$venv"
