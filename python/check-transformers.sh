#!/bin/bash
# SPDX-License-Identifier: MIT
# python/check-transformers.sh - the Hugging Face transformers suite
# (python/tests/test_transformers.py): kvmm.transformers' KvmmCache under
# transformers' own model code, in the environment of
# python/venv.sh transformers (built when missing).  Prints pytest's
# summary; exits with its status, or 75 when the environment cannot be
# built, having said so.
#
#   python/check-transformers.sh [OBJTREE [PYTEST-ARGS...]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
objtree=$(cd "$(dirname "$here")" && realpath -m "${1:-build}")
[ $# -eq 0 ] || shift
venv=$("$here/venv.sh" transformers "$objtree") || exit $?
cd "$here/tests"
KVMM_O=$objtree exec "$venv/bin/python" -X dev -m pytest -q -rs -p no:cacheprovider \
	"${@:-test_transformers.py}"
