# SPDX-License-Identifier: MIT
"""build_ffi.py - the cffi (API mode) description of kvmm's C API.

The extension ``kvmm._kvmm`` is compiled against this tree's headers
(``include/``, ``uapi/``) and linked with the static ``libkvmm.a`` that
``make lib`` builds, so an installed package does not depend on the build
tree staying where it was.  setup.py runs ``make lib`` first.
"""
import os
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
OBJTREE = Path(os.environ.get("KVMM_O", ROOT / "build")).resolve()

CDEF = r"""
#define KVMM_ATTN_MHA ...
#define KVMM_ATTN_MLA ...
#define KVMM_NR_TIERS ...
#define KVMM_EXTEND_RESERVE ...
#define KVMM_EXTEND_NORECLAIM ...
#define KVMM_WRITE_BACK ...
#define KVMM_WRITE_THROUGH ...
#define KVMM_NVME_REFORMAT ...
#define KVMM_NODE_NEAREST ...
#define KVMM_MAX_PAGE_SIZE ...
#define KVMM_NR_PRIO ...
#define NR_KVMM_STATS ...

struct kvmm_ctx;

struct kvmm_model {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t latent_dim;
	uint32_t dtype_bytes;
	uint32_t attn;
};

struct kvmm_params {
	uint32_t size;
	struct kvmm_model model;
	uint32_t page_size;
	const char *model_id;
	uint32_t max_seqs;
	uint32_t max_seq_len;
	uint32_t nr_pages;
	uint32_t max_pages;
	uint64_t mem_total;
	uint64_t mem_avail;
	double mem_fraction;
	const char *backend;
	void *backend_arg;
	uint32_t wmark_min;
	uint32_t wmark_low;
	uint32_t wmark_high;
	const char *evict_policy;
	uint32_t host_pages;
	int32_t host_node;
	uint32_t write_policy;
	uint32_t nvme_pages;
	uint32_t nvme_qd;
	uint32_t nvme_flags;
	const char *nvme_path;
	void (*log)(void *priv, const char *msg);
	void *log_priv;
	...;
};

struct kvmm_mock_arg {
	bool shareable;
	uint64_t mem_total;
	uint64_t mem_avail;
	...;
};

struct kvmm_seq_info {
	uint32_t len;
	uint32_t cached;
	uint32_t ns;
};

struct kvmm_table {
	const int32_t *base;
	uint32_t stride;
	uint32_t rows;
};

struct kvmm_kv_layer {
	void *k;
	void *v;
	uint64_t slot_bytes;
	uint64_t bytes;
};

struct kvmm_tier_hits {
	uint32_t tokens[];
	...;
};

void kvmm_params_init(struct kvmm_params *params);
int kvmm_create(const struct kvmm_params *params, struct kvmm_ctx **ctxp);
void kvmm_destroy(struct kvmm_ctx *ctx);
uint64_t kvmm_cell_bytes(const struct kvmm_model *model);
uint32_t kvmm_page_size(const struct kvmm_ctx *ctx);
uint32_t kvmm_nr_pages(const struct kvmm_ctx *ctx);
int kvmm_resize(struct kvmm_ctx *ctx, uint32_t nr_pages);

int kvmm_seq_open(struct kvmm_ctx *ctx, uint32_t ns, uint32_t *seqp);
int kvmm_seq_match(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens, uint32_t n);
int kvmm_seq_extend(struct kvmm_ctx *ctx, uint32_t seq, uint32_t n, uint32_t flags);
int kvmm_seq_extend_batch(struct kvmm_ctx *ctx, const uint32_t *seqs, const uint32_t *ns,
			  uint32_t count, uint32_t flags);
int kvmm_seq_commit(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens, uint32_t n);
int kvmm_seq_close(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens, uint32_t n);
int kvmm_seq_retract(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens, uint32_t n);
int kvmm_seq_promote(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens, uint32_t n);
int kvmm_seq_info(const struct kvmm_ctx *ctx, uint32_t seq, struct kvmm_seq_info *info);
void kvmm_seq_table(const struct kvmm_ctx *ctx, struct kvmm_table *table);

int kvmm_prefix_tiers(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n,
		      struct kvmm_tier_hits *hits);
int kvmm_prefix_pin(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n);
int kvmm_prefix_unpin(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n);
int kvmm_prefix_set_prio(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n,
			 uint32_t prio);
int kvmm_prefix_lookup(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n);

int64_t kvmm_reclaim(struct kvmm_ctx *ctx, uint32_t nr_pages);
int64_t kvmm_drop_caches(struct kvmm_ctx *ctx);
int kvmm_set_watermarks(struct kvmm_ctx *ctx, uint32_t min, uint32_t low, uint32_t high);
int kvmm_set_evict_policy(struct kvmm_ctx *ctx, const char *name);
const char *kvmm_evict_policy(const struct kvmm_ctx *ctx);

int kvmm_stats(const struct kvmm_ctx *ctx, uint64_t *vals, uint32_t nr);
const char *kvmm_stat_name(uint32_t item);
int kvmm_page_state(const struct kvmm_ctx *ctx, uint32_t pfn);
int kvmm_check(const struct kvmm_ctx *ctx);

int kvmm_kv_layer(const struct kvmm_ctx *ctx, uint32_t layer, struct kvmm_kv_layer *out);
int kvmm_backend_info(struct kvmm_ctx *ctx, char *buf, size_t len);
bool kvmm_backend_available(const char *name);

extern "Python" void kvmm_py_log(void *priv, const char *msg);

/* The command ring (libkvmm-ring.h) */
#define KVMM_OP_NOP ...
#define KVMM_OP_OPEN ...
#define KVMM_OP_MATCH ...
#define KVMM_OP_EXTEND ...
#define KVMM_OP_COMMIT ...
#define KVMM_OP_CLOSE ...
#define KVMM_OP_RETRACT ...
#define KVMM_OP_PIN ...
#define KVMM_OP_UNPIN ...
#define KVMM_OP_RECLAIM ...
#define KVMM_OP_PRIO ...
#define KVMM_OP_LOOKUP ...
#define KVMM_OP_PROMOTE ...
#define KVMM_OP_DROP_CACHES ...
#define KVMM_PIN_KEEP ...
#define KVMM_CQE_F_LOWER ...
#define KVMM_RING_F_NS ...

struct timespec { long tv_sec; long tv_nsec; ...; };

struct kvmm_sqe {
	uint8_t opcode;
	uint16_t buf;
	uint32_t seq;
	uint64_t off;
	uint32_t len;
	uint32_t ns;
	uint32_t arg;
	uint64_t arg2;
	uint64_t user_data;
	...;
};

struct kvmm_cqe {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
};

struct kvmm_ring_params {
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t buf_size;
	uint32_t flags;
	uint32_t ns;
};

struct kvmm_ring {
	void *buf;
	uint64_t buf_size;
	int sock;
	int sq_fd;
	int cq_fd;
	...;
};

int kvmm_ring_init(struct kvmm_ctx *ctx, const struct kvmm_ring_params *p,
		   struct kvmm_ring *ring);
int kvmm_ring_connect_timeout(const char *path, const struct kvmm_ring_params *p,
			      struct kvmm_ring *ring, const struct timespec *timeout);
void kvmm_ring_exit(struct kvmm_ring *ring);
int kvmm_submit(struct kvmm_ring *ring);
int kvmm_wait_cqe_timeout(struct kvmm_ring *ring, struct kvmm_cqe **cqep,
			  const struct timespec *timeout);
struct kvmm_sqe *kvmm_get_sqe(struct kvmm_ring *ring);
int kvmm_peek_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep);
void kvmm_cqe_seen(struct kvmm_ring *ring, struct kvmm_cqe *cqe);

/* The package's own (below): arming the CQ doorbell for an event loop. */
uint32_t kvmm_py_cq_arm(struct kvmm_ring *ring);
void kvmm_py_cq_disarm(struct kvmm_ring *ring);
"""

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
	__atomic_store_n(&ring->hdr->cq_sleeping, 1, __ATOMIC_RELAXED);
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

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
	"kvmm._kvmm",
	SOURCE,
	include_dirs=[str(ROOT / "include"), str(ROOT / "uapi")],
	extra_objects=[str(OBJTREE / "libkvmm.a")],
	libraries=["pthread"],
	extra_compile_args=["-O2"],
)

if __name__ == "__main__":
	ffibuilder.compile(verbose=True)
