#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check-torch.sh - the torch suites (test_torch.py, test_gpu_transformer.py): the
# package with torch CPU tensors in and out.  torch is several GB, so its
# virtual environment lives outside the clone (python/venv.sh torch:
# ${KVMM_VENV_CACHE:-~/.cache/kvmm}/venv-torch-HASH, HASH of
# requirements.txt and requirements-torch.txt), reused when present and
# built when not.  The package is installed into it from this tree (built
# in OBJTREE, default build).  Prints pytest's summary; exits with its
# status.
#
#   python/check-torch.sh [OBJTREE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/venv.sh" torch "${1:-build}")
cd "$here/tests"
exec "$venv/bin/python" -X dev -m pytest -q test_torch.py test_gpu_transformer.py
