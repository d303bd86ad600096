#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/consumer-test.sh - install kvmm into a scratch DESTDIR and build
# the README's C example against the installed headers with pkg-config,
# linked statically and dynamically, and a ring client: the public headers
# and kvmm.pc must be enough for a stranger's program.  The driver contract
# and the fault-injection knobs must not be installed.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$src" install DESTDIR="$tmp/root" PREFIX=/usr >/dev/null
# The README's first C block: a whole program (make check also runs it).
awk '/^```c$/ {on = 1; next} /^```$/ && on {exit} on' "$src/README.md" > "$tmp/example.c"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_LIBDIR="$tmp/root/usr/lib/pkgconfig"
flags=$(pkg-config --cflags --libs kvmm)
case "$flags" in *"$tmp/root/usr/include"*) ;; *) echo "kvmm.pc: wrong prefix: $flags" >&2; exit 1;; esac
cc -std=c11 -Wall -Wextra -Werror "$tmp/example.c" -o "$tmp/ex-shared" $flags
cc -std=c11 -Wall -Wextra -Werror "$tmp/example.c" -o "$tmp/ex-static" \
	$(pkg-config --cflags kvmm) "$tmp/root/usr/lib/libkvmm.a" \
	$(pkg-config --static --libs-only-l kvmm | sed "s/-lkvmm//")
"$tmp/ex-static" >/dev/null
c++ -x c++ -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) - <<'CXX'
#include <libkvmm.h>
#include <libkvmm-ring.h>
#include <kvmm/kvmm.h>
int main() { return kvmm_stat_name(0) ? 0 : 1; }
CXX
# A ring client builds against the installed headers alone.
cat > "$tmp/client.c" <<'EOF'
#include <libkvmm-ring.h>
int main(void)
{
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;

	if (kvmm_ring_connect("/nonexistent/kvmmd.sock", NULL, &ring))
		return 0;
	sqe = kvmm_get_sqe(&ring);
	if (sqe)
		kvmm_prep_extend(sqe, 0, 1, KVMM_EXTEND_NORECLAIM);
	kvmm_ring_exit(&ring);
	return 0;
}
EOF
cc -std=c99 -Wall -Wextra -Werror "$tmp/client.c" -o "$tmp/client" $flags
# The driver contract and the drivers' fault knobs are the library's own:
# no installed header may name them (kvmm_mock_arg.faults is an opaque
# pointer to them), and only these headers are installed.
inc="$tmp/root/usr/include"
public='libkvmm.h libkvmm-ring.h kvmm/kvmm.h kvmm/ring.h'
for h in $public; do
	[ -f "$inc/$h" ] || { echo "consumer: $h is not installed" >&2; exit 1; }
done
extra=$(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | while read -r h; do
	case " $public " in *" $h "*) ;; *) echo "$h";; esac; done)
[ -z "$extra" ] || { echo "consumer: headers installed that are not public: $extra" >&2; exit 1; }
private='kvmm_backend_ops|kvmm_store_ops|kvmm_backend_cfg|kvmm_store_cfg|kvmm_store_key'
private="$private|kvmm_kv_index_job|kvmm_backend_lookup|kvmm_store_lookup"
private="$private|kvmm_host_arg|kvmm_nvme_arg|fail_[a-z_]*|flip_every|tear_every|fault_every|dma_strict"
if grep -rEnw "$private" "$inc"; then
	echo "consumer: a driver contract or fault knob is visible in the installed headers" >&2
	exit 1
fi
# the ABI headers alone, as C99 and as C++, pedantic
for h in kvmm/kvmm.h kvmm/ring.h; do
	printf '#include <%s>\nint main(void) { return 0; }\n' "$h" > "$tmp/abi.c"
	cc -std=c99 -pedantic -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) "$tmp/abi.c"
	c++ -x c++ -std=c++11 -pedantic -Wall -Werror -fsyntax-only $(pkg-config --cflags kvmm) "$tmp/abi.c"
done
echo "consumer: README example builds against the installed kvmm (shared, static, C++ headers);"
echo "consumer: a ring client builds; only the public headers are installed, and they name no driver contract or fault knob;"
echo "consumer: uapi/kvmm/*.h compile alone as C99 and C++11 (-pedantic)"
