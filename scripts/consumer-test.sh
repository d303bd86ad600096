#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/consumer-test.sh - install kvmm into a scratch DESTDIR and build
# the README's C example against the installed headers with pkg-config,
# linked statically and dynamically: the public headers and kvmm.pc must
# be enough for a stranger's program.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$src" install DESTDIR="$tmp/root" PREFIX=/usr >/dev/null
# The README's first C block, wrapped in main().
awk '/^```c$/ {on = 1; next} /^```$/ && on {exit} on' "$src/README.md" |
	grep -v '^#include <libkvmm.h>' > "$tmp/body.c"
{
	echo '#include <libkvmm.h>'
	echo '#include <stdio.h>'
	echo 'int main(void) {'
	echo 'uint32_t prompt[64] = { 0 }, tokens[128] = { 0 }, n = 64, out = 20;'
	cat "$tmp/body.c"
	printf '%s\n' 'printf("%d\n", ret); return 0; }'
} > "$tmp/example.c"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_LIBDIR="$tmp/root/usr/lib/pkgconfig"
flags=$(pkg-config --cflags --libs kvmm)
case "$flags" in *"$tmp/root/usr/include"*) ;; *) echo "kvmm.pc: wrong prefix: $flags" >&2; exit 1;; esac
cc -std=c99 -Wall -Wextra -Werror "$tmp/example.c" -o "$tmp/ex-shared" $flags
cc -std=c99 -Wall -Wextra -Werror "$tmp/example.c" -o "$tmp/ex-static" \
	$(pkg-config --cflags kvmm) "$tmp/root/usr/lib/libkvmm.a" \
	$(pkg-config --static --libs-only-l kvmm | sed "s/-lkvmm//")
c++ -x c++ -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) - <<'CXX'
#include <libkvmm.h>
#include <kvmm/kvmm.h>
int main() { return kvmm_stat_name(0) ? 0 : 1; }
CXX
# the ABI headers alone, as C99 and as C++, pedantic
for h in kvmm/kvmm.h kvmm/ring.h; do
	printf '#include <%s>\nint main(void) { return 0; }\n' "$h" > "$tmp/abi.c"
	cc -std=c99 -pedantic -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) "$tmp/abi.c"
	c++ -x c++ -std=c++11 -pedantic -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) "$tmp/abi.c"
done
echo "consumer: README example builds against the installed kvmm (shared, static, C++ headers);"
echo "consumer: uapi/kvmm/*.h compile alone as C99 and C++11 (-pedantic)"
