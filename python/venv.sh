#!/bin/bash
# SPDX-License-Identifier: MIT
# python/venv.sh - a cached virtual environment with this tree's package:
# NAME's requirements (python/requirements-NAME.txt: torch, transformers,
# several GB) live outside the clone, in
# ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-NAME-HASH (HASH of requirements.txt
# and requirements-NAME.txt), reused when present and built when not.  The
# package is installed into it from this tree (built in OBJTREE, default
# build, unless KVMM_BUILT is set: make check has built it at its own
# DEBUG).  Prints the environment's directory; exits 75 (EX_TEMPFAIL) when
# it cannot be built (no package index), having said why on stderr.
#
#   python/venv.sh NAME [OBJTREE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
name=$1
objtree=$(cd "$root" && realpath -m "${2:-build}")
reqs=$here/requirements-$name.txt
hash=$(cat "$here/requirements.txt" "$reqs" | sha256sum | cut -c1-12)
venv=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}/venv-$name-$hash

if [ ! -f "$venv/.requirements-installed" ]; then
	echo "python: building $venv ($(basename "$reqs") from the package index)" >&2
	rm -rf "$venv"
	if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q -r "$reqs"; } >&2; then
		echo "python: $name skipped: could not build $venv" \
			"($(basename "$reqs") from the package index)" >&2
		rm -rf "$venv"
		exit 75
	fi
	touch "$venv/.requirements-installed"
fi
[ -n "${KVMM_BUILT:-}" ] || make -C "$root" -s O="$objtree" lib tools >&2
KVMM_O=$objtree "$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall \
	"$here" >&2
echo "$venv"
