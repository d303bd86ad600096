#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/gpu-prepare.sh - what a bare GPU machine needs to build and test
# kvmm, gathered here (where Debian's archive and PyPI are reachable) into
# .gpu/, which git ignores and the run carries:
#
#   .gpu/debs/  the -dev and runtime .debs of the libraries the build
#               needs (xxhash, CUnit, liburing, libnuma, jansson), which
#               scripts/gpu-run.sh unpacks with dpkg -x into a prefix
#               under /tmp, never into /;
#   .gpu/whl/   cffi and pycparser for the machine's Python (PYVER,
#               default 3.12), and kvmm's own wheel built from this tree
#               (the extension is abi3, libkvmm.a linked in), so the
#               machine needs no Python headers.
#
#   scripts/gpu-prepare.sh [OBJTREE]     (default build)
#
# Then, on the GPU machine, from the repository root with .gpu beside it:
#   OUT=/some/dir scripts/gpu-run.sh
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
objtree=$(cd "$root" && realpath -m "${1:-build}")
pyver=${PYVER:-3.12}
gpu=$root/.gpu
cd "$root"

exclude=.git/info/exclude
if [ -d .git ] && ! grep -qx '/.gpu/' "$exclude" 2>/dev/null; then
	echo '/.gpu/' >> "$exclude"
fi
rm -rf "$gpu/debs" "$gpu/whl"
mkdir -p "$gpu/debs" "$gpu/whl"

echo "gpu-prepare: Debian packages -> .gpu/debs"
# apt-get download writes as _apt where it can; a root-owned folder only warns
(cd "$gpu/debs" && apt-get download -q \
	libxxhash-dev libxxhash0 libcunit1-dev libcunit1 liburing-dev liburing2 \
	libnuma-dev libnuma1 libjansson-dev libjansson4 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
[ "$(ls "$gpu/debs"/*.deb | wc -l)" -eq 10 ] || { echo "gpu-prepare: a .deb is missing" >&2; exit 1; }

echo "gpu-prepare: cffi and pycparser for CPython $pyver -> .gpu/whl"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
	--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux2014_x86_64 -d "$gpu/whl" cffi pycparser

echo "gpu-prepare: kvmm's wheel from this tree ($objtree) -> .gpu/whl"
make -s -C "$root" O="$objtree" -j"$(nproc)" lib
venv=$(ls -d "$objtree"/pyvenv-* 2>/dev/null | head -1)
if [ -z "$venv" ]; then
	venv=$objtree/pyvenv-gpu
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q -r "$root/python/requirements.txt"
fi
KVMM_O=$objtree "$venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$gpu/whl" "$root/python"
ls -l "$gpu/debs" "$gpu/whl" | sed 's/^/  /'
du -sh "$gpu"
