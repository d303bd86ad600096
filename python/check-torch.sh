#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check-torch.sh - the torch suites (test_torch.py, test_gpu_transformer.py): the
# package with torch CPU tensors in and out.  torch is several GB, so its
# virtual environment lives outside the clone, in
# ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-torch-HASH (HASH of
# requirements.txt and requirements-torch.txt), reused when present and
# built when not.  The package is installed into it from this tree (built
# in OBJTREE, default build).  Prints pytest's summary; exits with its
# status.
#
#   python/check-torch.sh [OBJTREE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
objtree=$(cd "$root" && realpath -m "${1:-build}")
hash=$(cat "$here/requirements.txt" "$here/requirements-torch.txt" | sha256sum | cut -c1-12)
venv=${KVMM_VENV_CACHE:-$HOME/.cache/kvmm}/venv-torch-$hash

if [ ! -f "$venv/.requirements-installed" ]; then
	echo "python: building $venv (torch from the package index)"
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q -r "$here/requirements-torch.txt"
	touch "$venv/.requirements-installed"
fi
make -C "$root" -s O="$objtree" lib
KVMM_O=$objtree "$venv/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall "$here"
cd "$here/tests"
exec "$venv/bin/python" -X dev -m pytest -q test_torch.py test_gpu_transformer.py
