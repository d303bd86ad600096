# SPDX-License-Identifier: MIT
"""build_ffi.py - the cffi (API mode) description of kvmm's C API.

The extension ``kvmm._kvmm`` is compiled against this tree's headers
(``include/``, ``uapi/``) and linked with the static ``libkvmm.a`` that
``make lib`` builds, so an installed package does not depend on the build
tree staying where it was.  setup.py runs ``make lib`` first.
"""
import os
import re
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
OBJTREE = Path(os.environ.get("KVMM_O", ROOT / "build")).resolve()

# Constants Python uses; their values come from the headers at compile time.
CONSTANTS = """
KVMM_ATTN_MHA KVMM_ATTN_MLA KVMM_NR_TIERS KVMM_EXTEND_RESERVE KVMM_EXTEND_NORECLAIM
KVMM_WRITE_BACK KVMM_WRITE_THROUGH KVMM_NVME_REFORMAT KVMM_NODE_NEAREST KVMM_MAX_PAGE_SIZE
KVMM_NR_PRIO NR_KVMM_STATS KVMM_OP_NOP KVMM_OP_OPEN KVMM_OP_MATCH KVMM_OP_EXTEND
KVMM_OP_COMMIT KVMM_OP_CLOSE KVMM_OP_RETRACT KVMM_OP_PIN KVMM_OP_UNPIN KVMM_OP_RECLAIM
KVMM_OP_PRIO KVMM_OP_LOOKUP KVMM_OP_PROMOTE KVMM_OP_DROP_CACHES KVMM_PIN_KEEP
KVMM_CQE_F_LOWER KVMM_RING_F_NS KVMM_OP_STATS KVMM_OP_SEQ_ROW KVMM_OP_PROBE
KVMM_OP_KSPACE KVMM_OP_KPUT KVMM_OP_KGET KVMM_OP_KEXISTS KVMM_OP_KDELETE KVMM_FEAT_KEYED
KVMM_KEYS_EACH KVMM_OP_DUMP KVMM_DUMP_KSPACES KVMM_FRAMES_KVMM KVMM_FRAMES_ENGINE
KVMM_REMOTE_WRITE_NONE KVMM_REMOTE_WRITE_COMMIT KVMM_REMOTE_WRITE_DEMOTE KVMM_OP_CHECK
KVMM_KDELETE_SPACE KVMM_OP_FLUSH KVMM_CQE_F_MORE KVMM_OP_PREFETCH KVMM_PREFETCH_RECLAIM
KVMM_PREFETCH_CANCEL KVMM_OP_KPREFETCH KVMM_KPREFETCH_RECLAIM KVMM_FEAT_KPREFETCH
KVMM_SEQ_ROW_MASK
""".split()

# The ABI structs the binding fills or reads (uapi/kvmm/ring.h).
UAPI_STRUCTS = ("kvmm_sqe", "kvmm_cqe", "kvmm_tier_hits", "kvmm_stats_snap", "kvmm_seq_row",
		"kvmm_probe", "kvmm_key", "kvmm_kspace_reg", "kvmm_kent", "kvmm_dump_hdr",
		"kvmm_dump_kspace")

# What the headers declare that cffi's parser cannot take as written: the
# static inline helpers of libkvmm-ring.h are declared here instead (cffi
# compiles calls to them in API mode).
EXTRA = r"""
extern "Python" void kvmm_py_log(void *priv, const char *msg);
struct timespec { long tv_sec; long tv_nsec; ...; };
struct kvmm_sqe *kvmm_get_sqe(struct kvmm_ring *ring);
int kvmm_peek_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep);
void kvmm_cqe_seen(struct kvmm_ring *ring, struct kvmm_cqe *cqe);
/* The package's own (below): publishing a context's events as vLLM's KV
   events (tools/lib/kvevents.c), -EOPNOTSUPP in a build without libzmq. */
struct kvev;
int kvmm_py_kvev_create(struct kvmm_ctx *ctx, const char *endpoint, const char *replay,
			const char *topic, int hash, const char *seed, struct kvev **out);
int kvmm_py_kvev_read(struct kvmm_ctx *ctx, uint64_t *cursor, void *buf, uint32_t len);
int kvmm_py_kvev_publish(struct kvev *ev, const void *buf);
int kvmm_py_kvev_serve(struct kvev *ev, int timeout_ms);
void kvmm_py_kvev_stats(struct kvev *ev, uint64_t *out);
void kvmm_py_kvev_destroy(struct kvev *ev);
#define KVMM_PY_KVEV_BUF ...
/* The package's own (below): arming the CQ doorbell for an event loop. */
uint32_t kvmm_py_cq_arm(struct kvmm_ring *ring);
void kvmm_py_cq_disarm(struct kvmm_ring *ring);
/* csrc/radix.c: SGLang's radix-cache calls, one C call each (struct
   kvmm_py_radix: csrc/radix.h, added by cdef()). */
int kvmm_py_radix_match(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids, uint32_t n,
			struct kvmm_fnode *last);
int64_t kvmm_py_radix_path_slots(struct kvmm_py_radix *r, const struct kvmm_fnode *node,
				 uintptr_t out, uint32_t room);
void kvmm_py_radix_slots(const struct kvmm_py_radix *r, uintptr_t out, int expand);
int64_t kvmm_py_radix_evict(struct kvmm_py_radix *r, uint32_t nr_pages, int reverse,
			    uintptr_t out, int expand);
uint32_t kvmm_py_radix_row_free(const struct kvmm_py_radix *r, uintptr_t row, uint32_t start,
				uint32_t end, uintptr_t out, int pages);
int64_t kvmm_py_radix_checkpoint(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids,
				 uint32_t key_len, uint32_t prompt_len, uintptr_t row,
				 uint32_t protected, uint32_t inserted,
				 const struct kvmm_fnode *unlock, struct kvmm_fnode *last, int pages);
"""


# csrc/radix.h: the scratch struct csrc/radix.c's calls take (the cdef
# takes its definition from there)
RADIX_H = Path(__file__).resolve().parent / "csrc" / "radix.h"


def _strip(text: str) -> str:
	"""Drop comments, preprocessor lines, C++ guards and inline function bodies."""
	text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
	text = re.sub(r"//[^\n]*", "", text)
	text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
	text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
	out, i = [], 0
	for m in re.finditer(r"static inline[^{;]*\{", text):
		if m.start() < i:
			continue
		out.append(text[i:m.start()])
		depth, j = 1, m.end()
		while depth:
			depth += {"{": 1, "}": -1}.get(text[j], 0)
			j += 1
		i = j
	out.append(text[i:])
	return "".join(out)


def _uapi_structs(text: str) -> str:
	"""The UAPI_STRUCTS definitions, array sizes left to the compiler."""
	text = _strip(text)
	defs = [re.search(r"struct %s \{.*?\};" % name, text, flags=re.S).group(0)
		for name in UAPI_STRUCTS]
	return re.sub(r"\[[A-Z_][A-Z0-9_]*\]", "[...]", "\n".join(defs))


def cdef() -> str:
	"""The cdef: libkvmm.h and libkvmm-ring.h as they are, plus what cffi needs besides."""
	types = "".join(f"typedef {t}_t __{u};\n" for t, u in
			(("uint8", "u8"), ("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"),
			 ("int32", "s32")))
	consts = "".join(f"#define {c} ...\n" for c in CONSTANTS)
	inc = ROOT / "include"
	radix = re.search(r"struct kvmm_py_radix \{.*?\};", _strip(RADIX_H.read_text()), flags=re.S)
	return (types + consts + _uapi_structs((ROOT / "uapi/kvmm/ring.h").read_text()) +
		_strip((inc / "libkvmm.h").read_text()) +
		_strip((inc / "libkvmm-ring.h").read_text()) + radix.group(0) + "\n" + EXTRA)

# An event loop waits on the CQ doorbell (an eventfd) instead of in
# kvmm_wait_cqe(): before it sleeps it says so as kvmm_wait_cqe() does
# (cq_sleeping, a fence, a kick of a server waiting for CQ room, a last
# look), and clears the flag when it wakes.
SOURCE = r"""
#include <unistd.h>
#include <libkvmm-ring.h>

static uint32_t kvmm_py_cq_ready(struct kvmm_ring *ring)
{
	return __atomic_load_n(&ring->hdr->cq_tail, __ATOMIC_ACQUIRE) - ring->cq_head;
}

static void kvmm_py_kick(struct kvmm_ring *ring)
{
	uint64_t one = 1;

	if (!ring->ctx && __atomic_load_n(&ring->hdr->cq_wait, __ATOMIC_RELAXED) &&
	    write(ring->sq_fd, &one, sizeof(one)) < 0)
		return;	/* a full eventfd has a wake-up pending already */
}

static uint32_t kvmm_py_cq_arm(struct kvmm_ring *ring)
{
	uint32_t ready = kvmm_py_cq_ready(ring);

	if (ready)
		return ready;
	kvmm_py_kick(ring);
	__atomic_store_n(&ring->hdr->cq_sleeping, KVMM_RING_SLEEP_DOORBELL, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	kvmm_py_kick(ring);
	return kvmm_py_cq_ready(ring);
}

static void kvmm_py_cq_disarm(struct kvmm_ring *ring)
{
	uint64_t v;

	__atomic_store_n(&ring->hdr->cq_sleeping, 0, __ATOMIC_RELAXED);
	if (read(ring->cq_fd, &v, sizeof(v)) < 0)
		return;	/* nonblocking: nothing was rung */
}
"""

# KV events (csrc/kvevents.c), with tools/lib/kvevents*.c where the build
# found libzmq, msgpack-c and libcrypto (config.mk's CONFIG_KVMM_KVEVENTS).
KVEVENTS = "CONFIG_KVMM_KVEVENTS := y" in (OBJTREE / "config.mk").read_text() \
	if (OBJTREE / "config.mk").exists() else False
KVEV_C = Path(__file__).resolve().parent / "csrc" / "kvevents.c"
SOURCE += ("#define KVMM_PY_KVEVENTS %d\n" % KVEVENTS) + KVEV_C.read_text()

# SGLang's radix cache, a C call per method (csrc/radix.c).
RADIX = Path(__file__).resolve().parent / "csrc" / "radix.c"
SOURCE += RADIX.read_text()

ffibuilder = FFI()
ffibuilder.cdef(cdef())
ffibuilder.set_source(
	"kvmm._kvmm",
	SOURCE,
	include_dirs=[str(ROOT / "include"), str(ROOT / "uapi"), str(ROOT / "tools" / "lib"),
		      str(RADIX.parent)],
	extra_objects=[str(OBJTREE / "libkvmm.a")],
	# relink when the library changes: setuptools checks sources and depends only
	depends=[str(OBJTREE / "libkvmm.a"), str(ROOT / "include" / "libkvmm.h"),
		 str(ROOT / "include" / "libkvmm-ring.h"), str(RADIX),
		 str(RADIX_H), str(KVEV_C),
		 str(ROOT / "tools" / "lib" / "kvevents.h"), str(ROOT / "tools" / "lib" / "kvevents.c"),
		 *(str(ROOT / "tools" / "lib" / f) for f in ("kvevents_int.h", "kvevents_buf.c",
							       "kvevents_pack.c")),
		 str(Path(__file__).resolve())],
	libraries=["pthread"],
	extra_compile_args=["-O3"],	# csrc/radix.c's loops vectorize
)

if __name__ == "__main__":
	ffibuilder.compile(verbose=True)
