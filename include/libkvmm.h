/* SPDX-License-Identifier: MIT */
/*
 * libkvmm.h - the public C API of kvmm, the KV-cache memory manager.
 *
 * An engine creates one context per KV pool, opens a sequence per request,
 * matches the request's prompt against the prefix cache, extends the
 * sequence as it computes tokens, commits computed tokens so later requests
 * can share them, and closes the sequence when it finishes.  The page table
 * (one int32 page frame number per page of every open sequence) is read in
 * place by the attention kernels: kvmm_seq_table().
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; none sets errno.  A call that fails changes nothing.  The errno
 * vocabulary is in Documentation/userspace-api/errno.rst.
 *
 * A context is not thread-safe: one thread drives it at a time (the command
 * ring of a later layer serialises submitters).
 */
#ifndef LIBKVMM_H
#define LIBKVMM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <kvmm/kvmm.h>
#include <kvmm/ring.h>

/* For the timeouts; declared here too, as strict C99 <time.h> does not. */
struct timespec;

#ifdef __cplusplus
extern "C" {
#endif

#define KVMM_VERSION_MAJOR	0
#define KVMM_VERSION_MINOR	1

struct kvmm_ctx;

/* Attention layout of the KV cache: how many bytes one token occupies. */
#define KVMM_ATTN_MHA		0	/* a K and a V vector per KV head (MHA/GQA/MQA) */
#define KVMM_ATTN_MLA		1	/* one latent vector per token (DeepSeek MLA) */

/**
 * struct kvmm_model - geometry of the model whose KV the pool holds
 * @layers: transformer layers holding KV
 * @kv_heads: KV heads per layer (MHA only)
 * @head_dim: elements per head (MHA only)
 * @latent_dim: elements of the latent vector, kv_lora_rank + rope dim (MLA only)
 * @dtype_bytes: bytes per element (2 for bf16, 1 for fp8)
 * @attn: KVMM_ATTN_MHA or KVMM_ATTN_MLA
 */
struct kvmm_model {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t latent_dim;
	uint32_t dtype_bytes;
	uint32_t attn;
};

/**
 * struct kvmm_alloc_ops - where kvmm's metadata memory comes from
 * @alloc: return @size bytes or NULL
 * @free: give back a block of @size bytes returned by @alloc
 *
 * Optional.  Every metadata allocation of a context goes through these
 * (the page descriptors, page tables, tree nodes, hash buckets), which is
 * how tests inject an allocation failure at every site.
 */
struct kvmm_alloc_ops {
	void *(*alloc)(size_t size, void *priv);
	void (*free)(void *ptr, size_t size, void *priv);
};

/**
 * struct kvmm_params - what kvmm_create() builds
 * @model: the model geometry; sets the bytes per token (cell size)
 * @page_size: tokens per page, a power of two in [1, KVMM_MAX_PAGE_SIZE]
 * @nr_pages: pages in the device pool; 0 to size it from the budget below
 * @mem_total: total device memory in bytes (budget sizing)
 * @mem_avail: device memory free now, in bytes (budget sizing)
 * @mem_fraction: SGLang's mem_fraction_static, in (0, 1]
 * @max_seqs: rows of the page table: sequences open at once
 * @max_seq_len: tokens one sequence may hold
 * @wmark_min: pages kept back from ordinary allocations (see the tunables doc)
 * @wmark_low: an allocation that would leave fewer free pages reclaims first
 * @wmark_high: reclaim frees until this many pages are free after the allocation
 * @evict_policy: "lru" (default when NULL) or "slru"
 * @host_pages: pages of the host tier (0: none); reclaim demotes cold
 *	prefixes there instead of dropping them
 * @host_node: NUMA node of the host tier's memory, or KVMM_NODE_NEAREST
 *	(-1) for the node nearest the device (see the tiers doc)
 * @backend: backend name, "mock" (default when NULL)
 * @backend_arg: passed to the backend's init, backend specific (may be NULL)
 * @host_arg: passed to the host store's init (struct kvmm_host_arg, or NULL)
 * @nvme_pages: pages of the NVMe tier (0: none); needs a host tier, which
 *	stages its pages (see the tiers doc)
 * @nvme_qd: io_uring queue depth of the NVMe tier (0: 32)
 * @nvme_path: the file or block device of the NVMe tier; an existing
 *	kvmm file of the same geometry and @model_id is recovered (restart),
 *	an empty or new one is formatted, anything else is refused (see the
 *	tiers doc); the file is locked while the context lives, and a
 *	second context on it is refused (-EBUSY)
 * @nvme_arg: passed to the NVMe store's init (struct kvmm_nvme_arg, or NULL)
 * @alloc: metadata allocator, NULL for malloc/free
 * @alloc_priv: passed to @alloc's hooks
 * @log: where kvmm reports corruption and check failures; NULL for stderr
 * @log_priv: passed to @log
 * @write_policy: when device KV gets a copy on the host tier:
 *	KVMM_WRITE_BACK (0, the default) copies a prefix down when reclaim
 *	demotes it; KVMM_WRITE_THROUGH copies it when it is committed, so
 *	that its later demotion copies nothing (needs a host tier; see the
 *	tiers doc)
 * @max_pages: pages the device pool may grow to at run time with
 *	kvmm_resize() (0: the pool's size, fixed); the backend reserves
 *	address space for them and the core sizes its page descriptors
 *	(2 bytes each) for them, while memory is held only for the pages
 *	in use
 * @model_id: what the KV is of, beyond its geometry: a string naming the
 *	model and its weights (e.g. "meta-llama/Llama-3.1-8B@5206a32"), at
 *	most KVMM_MODEL_ID_MAX bytes of printable characters, or NULL.  The
 *	NVMe tier's file records a fingerprint of it (XXH3-128) and refuses
 *	to recover a file written under another one (-EEXIST), so KV of one
 *	model is never served to another of the same geometry
 * @nvme_flags: KVMM_NVME_* flags of the NVMe tier: KVMM_NVME_REFORMAT
 *	formats its file afresh, dropping whatever it held, even a file of
 *	another model, geometry or layout version or one whose superblock
 *	is damaged (never a file that is not a kvmm file)
 *
 * Budget sizing follows SGLang: with @nr_pages 0 the pool gets
 * (mem_avail - mem_total * (1 - mem_fraction)) bytes, divided by the cell
 * size times @page_size.  With @mem_total and @mem_avail both 0 the
 * backend is asked for them (cuda: cuMemGetInfo on its device).  Unused
 * fields must be zero.
 */
struct kvmm_params {
	struct kvmm_model model;
	uint32_t page_size;
	uint32_t nr_pages;
	uint64_t mem_total;
	uint64_t mem_avail;
	double mem_fraction;
	uint32_t max_seqs;
	uint32_t max_seq_len;
	uint32_t wmark_min;
	uint32_t wmark_low;
	uint32_t wmark_high;
	const char *evict_policy;
	uint32_t host_pages;
	int32_t host_node;
	void *host_arg;
	uint32_t nvme_pages;
	uint32_t nvme_qd;
	const char *nvme_path;
	void *nvme_arg;
	const char *backend;
	void *backend_arg;
	const struct kvmm_alloc_ops *alloc;
	void *alloc_priv;
	void (*log)(void *priv, const char *msg);
	void *log_priv;
	uint32_t write_policy;
	uint32_t max_pages;
	const char *model_id;
	uint32_t nvme_flags;
};

#define KVMM_NODE_NEAREST	(-1)

#define KVMM_WRITE_BACK		0
#define KVMM_WRITE_THROUGH	1

/* kvmm_params.nvme_flags */
#define KVMM_NVME_REFORMAT	(1u << 0)	/* format the file afresh: a cold start */
#define KVMM_NVME_FLAGS		KVMM_NVME_REFORMAT	/* every flag known */

#define KVMM_MODEL_ID_MAX	255	/* bytes of kvmm_params.model_id */

#define KVMM_MAX_PAGE_SIZE	4096
#define KVMM_MAX_PAGES		(1u << 30)
/* nr_pages * page_size: every slot index fits an int32, as kernels expect */
#define KVMM_MAX_SLOTS		(1ull << 31)
#define KVMM_MAX_SEQS		(1u << 20)

/* Context */
int kvmm_create(const struct kvmm_params *params, struct kvmm_ctx **ctxp);
void kvmm_destroy(struct kvmm_ctx *ctx);
uint64_t kvmm_cell_bytes(const struct kvmm_model *model);
uint32_t kvmm_page_size(const struct kvmm_ctx *ctx);
uint32_t kvmm_nr_pages(const struct kvmm_ctx *ctx);
int kvmm_resize(struct kvmm_ctx *ctx, uint32_t nr_pages);

/* Sequences (SGLang's req_to_token_pool rows) */
int kvmm_seq_open(struct kvmm_ctx *ctx, uint32_t ns, uint32_t *seqp);
int kvmm_seq_match(struct kvmm_ctx *ctx, uint32_t seq,
		   const uint32_t *tokens, uint32_t n);

#define KVMM_EXTEND_RESERVE	(1u << 0)	/* may dip below the min watermark */
#define KVMM_EXTEND_NORECLAIM	(1u << 1)	/* fail rather than reclaim */
#define KVMM_EXTEND_FLAGS	(KVMM_EXTEND_RESERVE | KVMM_EXTEND_NORECLAIM)

int kvmm_seq_extend(struct kvmm_ctx *ctx, uint32_t seq, uint32_t n,
		    uint32_t flags);
int kvmm_seq_extend_batch(struct kvmm_ctx *ctx, const uint32_t *seqs,
			  const uint32_t *ns, uint32_t count, uint32_t flags);
int kvmm_seq_commit(struct kvmm_ctx *ctx, uint32_t seq,
		    const uint32_t *tokens, uint32_t n);
int kvmm_seq_close(struct kvmm_ctx *ctx, uint32_t seq,
		   const uint32_t *tokens, uint32_t n);
int kvmm_seq_retract(struct kvmm_ctx *ctx, uint32_t seq,
		     const uint32_t *tokens, uint32_t n);
int kvmm_seq_promote(struct kvmm_ctx *ctx, uint32_t seq,
		     const uint32_t *tokens, uint32_t n);

/**
 * struct kvmm_tier_hits - how much of a prefix is cached, per tier
 * @tokens: tokens[t] of the prefix are on tier t; the device part comes
 *	first, then host, then NVMe (a prefix never climbs back up)
 */
struct kvmm_tier_hits {
	uint32_t tokens[KVMM_NR_TIERS];
	uint32_t resv;
};
int kvmm_prefix_tiers(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		      uint32_t n, struct kvmm_tier_hits *hits);

/**
 * struct kvmm_seq_info - where one sequence stands
 * @len: tokens with KV allocated (the row covers ceil(len / page_size) pages)
 * @cached: leading tokens whose pages are shared prefix-tree pages
 * @ns: namespace the sequence was opened in
 */
struct kvmm_seq_info {
	uint32_t len;
	uint32_t cached;
	uint32_t ns;
};
int kvmm_seq_info(const struct kvmm_ctx *ctx, uint32_t seq,
		  struct kvmm_seq_info *info);

/**
 * struct kvmm_table - the page table, readable in place
 * @base: row r starts at base + r * stride; entry i is the page frame
 *	number of the sequence's page i, -1 where none is mapped
 * @stride: entries per row, ceil(max_seq_len / page_size)
 * @rows: max_seqs; a row's index is its sequence id
 *
 * The slot of token t of sequence s is
 * base[s * stride + t / page_size] * page_size + t % page_size.
 * The table stays at the same address for the context's life.
 */
struct kvmm_table {
	const int32_t *base;
	uint32_t stride;
	uint32_t rows;
};
void kvmm_seq_table(const struct kvmm_ctx *ctx, struct kvmm_table *table);

/* Prefixes: operator controls over what the tree holds */
int kvmm_prefix_pin(struct kvmm_ctx *ctx, uint32_t ns,
		    const uint32_t *tokens, uint32_t n);
int kvmm_prefix_unpin(struct kvmm_ctx *ctx, uint32_t ns,
		      const uint32_t *tokens, uint32_t n);
int kvmm_prefix_set_prio(struct kvmm_ctx *ctx, uint32_t ns,
			 const uint32_t *tokens, uint32_t n, uint32_t prio);
int kvmm_prefix_lookup(struct kvmm_ctx *ctx, uint32_t ns,
		       const uint32_t *tokens, uint32_t n);

/* Reclaim and tunables */
int64_t kvmm_reclaim(struct kvmm_ctx *ctx, uint32_t nr_pages);
int64_t kvmm_drop_caches(struct kvmm_ctx *ctx);
int kvmm_set_watermarks(struct kvmm_ctx *ctx, uint32_t min, uint32_t low,
			uint32_t high);
int kvmm_set_evict_policy(struct kvmm_ctx *ctx, const char *name);
const char *kvmm_evict_policy(const struct kvmm_ctx *ctx);

/* Statistics and checks */
int kvmm_stats(const struct kvmm_ctx *ctx, uint64_t *vals, uint32_t nr);
const char *kvmm_stat_name(uint32_t item);
int kvmm_page_state(const struct kvmm_ctx *ctx, uint32_t pfn);
int kvmm_page_flags(const struct kvmm_ctx *ctx, uint32_t pfn);
int kvmm_check(const struct kvmm_ctx *ctx);

/**
 * struct kvmm_kv_layer - where one layer's KV lives in the backend's pool
 * @k: base of the K buffer (the latent buffer for MLA)
 * @v: base of the V buffer, NULL for MLA
 * @slot_bytes: bytes between consecutive slots in @k and @v
 * @bytes: size of each buffer
 *
 * Slot s of the layer is at k + s * slot_bytes.  The addresses are the
 * backend's: host addresses for mock, device addresses for cuda.
 */
struct kvmm_kv_layer {
	void *k;
	void *v;
	uint64_t slot_bytes;
	uint64_t bytes;
};
int kvmm_kv_layer(const struct kvmm_ctx *ctx, uint32_t layer,
		  struct kvmm_kv_layer *out);
int kvmm_kv_copy(struct kvmm_ctx *ctx, const int32_t *src, const int32_t *dst,
		 uint32_t nr, uint32_t slots);

/**
 * struct kvmm_kv_batch - a batch whose paged-KV arrays kvmm_kv_indices()
 *	builds, FlashInfer's layout (SGLang's create_flashinfer_kv_indices)
 * @seqs: the batch's open sequences (host memory); each covers its
 *	whole length (kvmm_seq_info().len)
 * @count: how many
 * @max_indices: room at @indices
 * @indptr: out, @count + 1 entries: sequence i's pages are
 *	indices[indptr[i] .. indptr[i + 1])
 * @indices: out: the page frame numbers (slots, at page size 1)
 * @last_page_len: out, @count entries: tokens in each last page
 *	(1..page_size; 0 for an empty sequence)
 * @stream: cuda: the CUstream the attention kernels run on; the build is
 *	ordered on it and the call returns without waiting.  NULL: the call
 *	returns when the arrays are written.  The sequences must not change
 *	until the stream has passed the build.
 *
 * The out arrays are in the backend's memory: host for mock, device for
 * cuda.
 */
struct kvmm_kv_batch {
	const uint32_t *seqs;
	uint32_t count;
	uint32_t max_indices;
	int32_t *indptr;
	int32_t *indices;
	int32_t *last_page_len;
	void *stream;
};
int64_t kvmm_kv_indices(struct kvmm_ctx *ctx, const struct kvmm_kv_batch *batch);
int kvmm_backend_info(struct kvmm_ctx *ctx, char *buf, size_t len);
int kvmm_stream_wait(struct kvmm_ctx *ctx, void *stream);

/*
 * Sharing the pool with another process: the owner describes it
 * (kvmm_kv_share(), what kvmmd sends a client that asks), the other side
 * maps the same memory (kvmm_kv_import(), or kvmm_kv_attach() over a ring
 * connected to kvmmd) and hands its kernels the addresses it gets.
 */
struct kvmm_kv_pool;
int kvmm_kv_share(struct kvmm_ctx *ctx, struct kvmm_share *share,
		  struct kvmm_share_ext **ext, int **fds);
int kvmm_kv_import(const struct kvmm_share *share, const struct kvmm_share_ext *ext,
		   const int *fds, void *backend_arg, struct kvmm_kv_pool **poolp);
int kvmm_kv_pool_layer(const struct kvmm_kv_pool *pool, uint32_t layer,
		       struct kvmm_kv_layer *out);
uint32_t kvmm_kv_pool_pages(const struct kvmm_kv_pool *pool);
void kvmm_kv_pool_close(struct kvmm_kv_pool *pool);


/*
 * The command ring (uapi/kvmm/ring.h; Documentation/userspace-api/ring.rst).
 * A ring is in-process (kvmm_ring_init: submit runs the commands inline, no
 * thread, no syscall) or attached to a server in another process
 * (kvmm_ring_connect: kvmmd, or an engine's kvmm_server_start()).  The
 * same entries and helpers serve both.  One thread drives a ring.
 */

/**
 * struct kvmm_iovec - a buffer payloads may refer to by (index, offset)
 * @base: its memory
 * @len: its size in bytes
 */
struct kvmm_iovec {
	void *base;
	size_t len;
};

/**
 * struct kvmm_ring_params - the shape of a ring
 * @sq_entries: submission entries, a power of two, 1..32768
 * @cq_entries: completion entries, a power of two >= @sq_entries; 0 for
 *	twice @sq_entries
 * @buf_size: bytes of the ring's data area, which is buffer 0 (payloads
 *	across processes live there); may be 0 in-process
 * @flags: KVMM_RING_F_POLL: the server polls the SQ instead of sleeping
 *	between doorbells (lower latency, a core busy); KVMM_RING_F_NS: bind
 *	the ring to namespace @ns (see uapi/kvmm/ring.h)
 * @ns: the namespace, with KVMM_RING_F_NS
 */
struct kvmm_ring_params {
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t buf_size;
	uint32_t flags;
	uint32_t ns;
};

struct kvmm_disp;

/**
 * struct kvmm_ring - a ring as its user sees it (members are the library's)
 * @hdr: the shared region; @sqes, @cqes: its arrays
 * @buf: the data area (buffer 0); @buf_size: its size
 * @sq_mask, @cq_mask: entries - 1
 * @sqe_tail: entries handed out by kvmm_get_sqe()
 * @sq_tail: entries published to the dispatcher
 * @cq_head: completions consumed
 * @ctx, @disp: in-process: the context and the dispatcher
 * @sock, @sq_fd, @cq_fd: across processes: the connection and doorbells
 * @map_size: bytes mapped at @hdr
 * @flags: KVMM_RING_F_*
 */
struct kvmm_ring {
	struct kvmm_ring_hdr *hdr;
	struct kvmm_sqe *sqes;
	struct kvmm_cqe *cqes;
	void *buf;
	uint64_t buf_size;
	uint32_t sq_mask, cq_mask;
	uint32_t sqe_tail, sq_tail, cq_head;
	struct kvmm_ctx *ctx;
	struct kvmm_disp *disp;
	int sock, sq_fd, cq_fd;
	size_t map_size;
	uint32_t flags;
};

int kvmm_ring_init(struct kvmm_ctx *ctx, const struct kvmm_ring_params *p,
		   struct kvmm_ring *ring);
int kvmm_ring_connect(const char *path, const struct kvmm_ring_params *p,
		      struct kvmm_ring *ring);
/* kvmm_ring_connect()'s deadline for connecting and the handshake */
#define KVMM_CONNECT_TIMEOUT_MS	10000
int kvmm_ring_connect_timeout(const char *path, const struct kvmm_ring_params *p,
			      struct kvmm_ring *ring, const struct timespec *timeout);
int kvmm_ring_register_buffers(struct kvmm_ring *ring, const struct kvmm_iovec *iov,
			       uint32_t nr);
void kvmm_ring_exit(struct kvmm_ring *ring);
int kvmm_submit(struct kvmm_ring *ring);
int kvmm_submit_and_wait(struct kvmm_ring *ring, uint32_t wait_nr);
int kvmm_wait_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep);
int kvmm_wait_cqe_timeout(struct kvmm_ring *ring, struct kvmm_cqe **cqep,
			  const struct timespec *timeout);
int kvmm_kv_attach(struct kvmm_ring *ring, void *backend_arg, struct kvmm_kv_pool **poolp);
int kvmm_ioctl(struct kvmm_ctx *ctx, const struct kvmm_sqe *sqe,
	       const struct kvmm_iovec *bufs, uint32_t nr_bufs);
void kvmm_lock(struct kvmm_ctx *ctx);
void kvmm_unlock(struct kvmm_ctx *ctx);

/* Servers: kvmmd, or an engine's admin socket. */
struct kvmm_server;
#define KVMM_SERVER_POLL	(1u << 0)	/* serve every ring in polling mode */
#define KVMM_SERVER_NS_UID	(1u << 1)	/* bind each non-root client to ns = its uid */
int kvmm_server_start(struct kvmm_ctx *ctx, const char *path, uint32_t flags,
		      struct kvmm_server **srvp);
void kvmm_server_stop(struct kvmm_server *srv);
uint32_t kvmm_server_clients(struct kvmm_server *srv);

/**
 * struct kvmm_server_limits - what a server grants its clients
 * @max_clients: rings attached at once (default 256); a hello over it is
 *	refused with -EBUSY
 * @max_pending: handshakes in progress, not counted in @max_clients
 *	(default 64, at most 1024); a new connection evicts the oldest
 * @handshake_ms: a whole hello, or a share request once begun, must be
 *	in within this (default 5000)
 * @send_ms: a whole welcome or share answer must be out within this
 *	(default 5000): a client that does not read is dropped
 * @resv: 0
 *
 * A field of 0 means its default.
 */
struct kvmm_server_limits {
	uint32_t max_clients;
	uint32_t max_pending;
	uint32_t handshake_ms;
	uint32_t send_ms;
	uint32_t resv[4];
};
int kvmm_server_set_limits(struct kvmm_server *srv, const struct kvmm_server_limits *lim);

/**
 * kvmm_get_sqe() - the next free submission entry, zeroed
 * @ring: the ring
 *
 * Return: the entry, or NULL when the SQ is full (submit, then reap).
 */
static inline struct kvmm_sqe *kvmm_get_sqe(struct kvmm_ring *ring)
{
	/* Pairs with the dispatcher's release store of sq_head. */
	uint32_t head = __atomic_load_n(&ring->hdr->sq_head, __ATOMIC_ACQUIRE);
	struct kvmm_sqe *sqe;

	if (ring->sqe_tail - head > ring->sq_mask)
		return NULL;
	sqe = &ring->sqes[ring->sqe_tail++ & ring->sq_mask];
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

/**
 * kvmm_peek_cqe() - the oldest completion not yet seen, without waiting
 * @ring: the ring
 * @cqep: out
 *
 * Return: 0, or -EAGAIN when there is none.
 */
static inline int kvmm_peek_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep)
{
	/* Pairs with the dispatcher's release store of cq_tail. */
	uint32_t tail = __atomic_load_n(&ring->hdr->cq_tail, __ATOMIC_ACQUIRE);

	if (tail == ring->cq_head)
		return -EAGAIN;
	*cqep = &ring->cqes[ring->cq_head & ring->cq_mask];
	return 0;
}

/* kvmm_cqe_seen() - done with the completion kvmm_peek/wait_cqe() gave */
static inline void kvmm_cqe_seen(struct kvmm_ring *ring, struct kvmm_cqe *cqe)
{
	(void)cqe;
	/* Pairs with the dispatcher's acquire load of cq_head. */
	__atomic_store_n(&ring->hdr->cq_head, ++ring->cq_head, __ATOMIC_RELEASE);
}

static inline void kvmm_sqe_set_data(struct kvmm_sqe *sqe, uint64_t data)
{
	sqe->user_data = data;
}

static inline void kvmm_prep_rw(struct kvmm_sqe *sqe, uint8_t op, uint32_t seq,
				uint16_t buf, uint64_t off, uint32_t len)
{
	sqe->opcode = op;
	sqe->seq = seq;
	sqe->buf = buf;
	sqe->off = off;
	sqe->len = len;
}

static inline void kvmm_prep_nop(struct kvmm_sqe *sqe)
{
	sqe->opcode = KVMM_OP_NOP;
}

static inline void kvmm_prep_probe(struct kvmm_sqe *sqe, uint16_t buf, uint64_t off)
{
	kvmm_prep_rw(sqe, KVMM_OP_PROBE, 0, buf, off, sizeof(struct kvmm_probe));
}

static inline void kvmm_prep_open(struct kvmm_sqe *sqe, uint32_t ns)
{
	sqe->opcode = KVMM_OP_OPEN;
	sqe->ns = ns;
}

/* Tokens live at (buf, off): @n uint32_t token ids. */
static inline void kvmm_prep_match(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				   uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_MATCH, seq, buf, off, n);
}

static inline void kvmm_prep_extend(struct kvmm_sqe *sqe, uint32_t seq, uint32_t n,
				    uint32_t flags)
{
	sqe->opcode = KVMM_OP_EXTEND;
	sqe->seq = seq;
	sqe->arg = n;
	sqe->arg2 = flags;
}

/* @count struct kvmm_extend_ent at (buf, off): a whole decode batch. */
static inline void kvmm_prep_extend_batch(struct kvmm_sqe *sqe, uint16_t buf,
					  uint64_t off, uint32_t count, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_EXTEND, 0, buf, off, count);
	sqe->arg2 = flags;
}

static inline void kvmm_prep_commit(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				    uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_COMMIT, seq, buf, off, n);
}

/* @n 0 closes without committing (buf and off 0 then). */
static inline void kvmm_prep_close(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				   uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_CLOSE, seq, buf, off, n);
}

static inline void kvmm_prep_retract(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				     uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_RETRACT, seq, buf, off, n);
}

static inline void kvmm_prep_pin(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				 uint64_t off, uint32_t n, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_PIN, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = flags;
}

static inline void kvmm_prep_unpin(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				   uint64_t off, uint32_t n, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_UNPIN, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = flags;
}

static inline void kvmm_prep_prio(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				  uint64_t off, uint32_t n, uint32_t prio)
{
	kvmm_prep_rw(sqe, KVMM_OP_PRIO, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = prio;
}

/*
 * The demoted rest of what @seq matched: @n tokens at (buf, off), as given
 * to MATCH.  Completes when the pages are on the device and mapped.
 */
static inline void kvmm_prep_promote(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				     uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_PROMOTE, seq, buf, off, n);
}

/*
 * How much of @n tokens at (buf, off) is cached in @ns; locks nothing.
 * For every tier's share, set sqe->arg = KVMM_LOOKUP_TIERS and sqe->arg2
 * to where in buffer @buf the struct kvmm_tier_hits goes.
 */
static inline void kvmm_prep_lookup(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				    uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_LOOKUP, 0, buf, off, n);
	sqe->ns = ns;
}

static inline void kvmm_prep_reclaim(struct kvmm_sqe *sqe, uint32_t pages)
{
	sqe->opcode = KVMM_OP_RECLAIM;
	sqe->arg = pages;
}

/* Output: a struct kvmm_stats_snap and its values in @bytes at (buf, off). */
static inline void kvmm_prep_stats(struct kvmm_sqe *sqe, uint16_t buf, uint64_t off,
				   uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_STATS, 0, buf, off, bytes);
}

/* Output: a struct kvmm_dump_hdr and records in @bytes at (buf, off). */
static inline void kvmm_prep_dump(struct kvmm_sqe *sqe, uint32_t kind, uint64_t cursor,
				  uint16_t buf, uint64_t off, uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_DUMP, 0, buf, off, bytes);
	sqe->arg = kind;
	sqe->arg2 = cursor;
}

static inline void kvmm_prep_set(struct kvmm_sqe *sqe, uint32_t key, uint64_t value)
{
	sqe->opcode = KVMM_OP_SET;
	sqe->arg = key;
	sqe->arg2 = value;
}

static inline void kvmm_prep_drop_caches(struct kvmm_sqe *sqe)
{
	sqe->opcode = KVMM_OP_DROP_CACHES;
}

/*
 * PIN_DROP: @how is KVMM_PIN_DROP_ID (drop the pins ending at node @id;
 * @ns must be 0) or KVMM_PIN_DROP_NS (every pin in namespace @ns; @id
 * must be 0).  Operator rings only.
 */
static inline void kvmm_prep_pin_drop(struct kvmm_sqe *sqe, uint32_t how, uint32_t ns,
				      uint64_t id)
{
	sqe->opcode = KVMM_OP_PIN_DROP;
	sqe->arg = how;
	sqe->ns = ns;
	sqe->arg2 = id;
}

/*
 * Backends.  A backend owns the KV bytes of a pool; the core never touches
 * them.  Backends register in driver/backend.c; an embedder selects one by
 * name in kvmm_params.backend.
 */

/**
 * struct kvmm_backend_cfg - what a backend is asked to hold
 * @model: geometry of the KV
 * @page_size: tokens per page
 * @nr_pages: pages in the pool
 * @tier: KVMM_TIER_* of the pool
 * @arg: kvmm_params.backend_arg
 * @err: where init may write a line saying why it failed
 * @err_len: bytes at @err
 * @max_pages: pages the pool may be resized to (at least @nr_pages):
 *	reserve addresses for them, back only @nr_pages
 */
struct kvmm_backend_cfg {
	struct kvmm_model model;
	uint32_t page_size;
	uint32_t nr_pages;
	uint32_t tier;
	void *arg;
	char *err;
	size_t err_len;
	uint32_t max_pages;
};

/**
 * struct kvmm_kv_index_job - a batch's page-table rows, to be turned into
 *	FlashInfer's paged-KV arrays by the backend
 * @table: the page table (struct kvmm_table.base), host memory
 * @table_bytes: its size
 * @stride: entries per row
 * @page_size: tokens per page
 * @rows: each sequence's row (host)
 * @lens: each sequence's tokens (host)
 * @count: sequences
 * @indptr: out (backend memory), @count + 1 entries
 * @indices: out (backend memory), the total pages
 * @last: out (backend memory), @count entries
 * @stream: cuda: the CUstream the build is ordered on (NULL: the
 *	backend's own, and the call waits for it); ignored by mock
 */
struct kvmm_kv_index_job {
	const int32_t *table;
	size_t table_bytes;
	uint32_t stride;
	uint32_t page_size;
	const uint32_t *rows;
	const uint32_t *lens;
	uint32_t count;
	int32_t *indptr;
	int32_t *indices;
	int32_t *last;
	void *stream;
};

/**
 * struct kvmm_backend_ops - a KV pool's storage
 * @name: what kvmm_params.backend selects it by
 * @init: allocate the pool for @cfg; store private state in *@privp
 * @exit: release everything @init took
 * @kv_layer: describe layer @layer of the pool
 * @gather: copy pages @pfns[0..nr) out of the pool, page i to @dst[i]
 *	(host memory, kvmm_page_bytes() each, in the staging layout below)
 * @scatter: the reverse: @src[i] into page @pfns[i] of the pool
 * @numa_node: the NUMA node nearest the pool's memory, or -1 if unknown
 * @mem_register: optional (with @mem_unregister): make host memory
 *	[@addr, +@len) a place @gather may copy to and @scatter from by
 *	DMA (CUDA: page-locked and mapped; device memory, as staging on
 *	the GPU, is taken as it is); 0 or a negative errno.  The
 *	lower tiers' stores register every such buffer (struct kvmm_dma)
 * @mem_unregister: undo @mem_register of the same range
 * @copy: optional: copy the leading @slots slots of page @src[i] onto page
 *	@dst[i], in every buffer (copy-on-write of a shared partial page)
 * @kv_indices: optional: build FlashInfer's kv_indptr, kv_indices and
 *	kv_last_page_len for a batch (struct kvmm_kv_index_job)
 * @mem_info: optional: the device memory this backend would hold its pool
 *	in, total and free now, before @init (for kvmm_params.mem_fraction
 *	sizing); called with kvmm_params.backend_arg, may write why it
 *	failed to @err
 * @info: optional: one line describing the pool (device, layout, mode)
 * @stream_wait: optional: make the engine's @stream (cuda: a CUstream)
 *	wait for every copy this backend has issued
 * @resize: optional: back pages [0, @nr_pages) of every buffer and no
 *	more than the backend's unit of mapping needs, without moving any
 *	byte of the pages that stay; @nr_pages is at most cfg->max_pages.
 *	Shrinking is asked only for pages the core holds free.  0, or a
 *	negative errno with the mapping as it was
 * @share: optional: describe the pool so another process can map it:
 *	fill @share's nbufs, mapped_pages, max_pages, nr_ext, nr_fds,
 *	granularity and device (the core fills the rest), and set *@ext to
 *	nr_ext extents and *@fds to nr_fds new descriptors (the order of
 *	struct kvmm_share), both from malloc; the caller closes and frees
 *	them.  -EOPNOTSUPP when this pool's memory cannot be exported
 * @import: optional: map a pool another process shared (@share, @ext,
 *	@fds; the descriptors stay the caller's) with the geometry in @cfg
 *	(nr_pages and max_pages as shared, arg the importer's backend_arg);
 *	the state stored in *@privp serves @kv_layer, @info and @exit only
 *
 * Staging layout of one page: for each layer, the page's K slots then
 * its V slots (MLA: its latent slots), slot after slot, as they sit in
 * the pool.  @gather and @scatter return 0 or a negative errno; on error
 * the destination's contents are undefined and nothing else changed.
 * @scatter may be called from the I/O worker (a promotion from NVMe)
 * while other calls run under the context lock, on other pages.
 */
struct kvmm_backend_ops {
	const char *name;
	int (*init)(const struct kvmm_backend_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	int (*kv_layer)(void *priv, uint32_t layer, struct kvmm_kv_layer *out);
	int (*gather)(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst);
	int (*scatter)(void *priv, const int32_t *pfns, uint32_t nr,
		       void *const *src);
	int (*numa_node)(void *priv);
	int (*mem_register)(void *priv, void *addr, size_t len);
	void (*mem_unregister)(void *priv, void *addr, size_t len);
	int (*copy)(void *priv, const int32_t *src, const int32_t *dst,
		    uint32_t nr, uint32_t slots);
	int (*kv_indices)(void *priv, const struct kvmm_kv_index_job *job);
	int (*mem_info)(void *arg, uint64_t *total, uint64_t *avail, char *err,
			size_t err_len);
	int (*info)(void *priv, char *buf, size_t len);
	int (*stream_wait)(void *priv, void *stream);
	int (*resize)(void *priv, uint32_t nr_pages);
	int (*share)(void *priv, struct kvmm_share *share, struct kvmm_share_ext **ext,
		     int **fds);
	int (*import)(const struct kvmm_backend_cfg *cfg, const struct kvmm_share *share,
		      const struct kvmm_share_ext *ext, const int *fds, void **privp);
};

const struct kvmm_backend_ops *kvmm_backend_lookup(const char *name);
uint64_t kvmm_page_bytes(const struct kvmm_model *model, uint32_t page_size);

/**
 * struct kvmm_dma - how a store makes its memory reachable by the
 *	backend's copies: the backend's mem_register/mem_unregister
 * @reg: register [@addr, +@len) before the backend copies to or from it;
 *	0 or a negative errno (the store then fails what needed it)
 * @unreg: undo @reg of the same range, before the memory is freed
 * @priv: the backend's state, for both
 */
struct kvmm_dma {
	int (*reg)(void *priv, void *addr, size_t len);
	void (*unreg)(void *priv, void *addr, size_t len);
	void *priv;
};

/**
 * struct kvmm_store_cfg - what a lower-tier store is asked to hold
 * @page_bytes: bytes of one page in the staging layout
 * @nr_pages: pages
 * @tier: KVMM_TIER_*
 * @numa_node: node to place the memory on, -1 for no preference
 * @arg: kvmm_params.host_arg or nvme_arg
 * @model: the model geometry (a persistent store refuses another's file)
 * @page_size: tokens per page
 * @path: file or block device of a persistent store
 * @qd: I/O queue depth of a persistent store
 * @err: where init may write a line saying why it failed
 * @err_len: bytes at @err
 * @dma: registration for memory the backend copies to or from (a memory
 *	store's pages, an I/O store's buffers), or NULL when the backend
 *	needs none; valid until the store's exit
 * @model_id: kvmm_params.model_id (a persistent store refuses a file
 *	written under another)
 * @flags: kvmm_params.nvme_flags, for the NVMe store
 */
struct kvmm_store_cfg {
	uint64_t page_bytes;
	uint32_t nr_pages;
	uint32_t tier;
	int32_t numa_node;
	void *arg;
	struct kvmm_model model;
	uint32_t page_size;
	const char *path;
	uint32_t qd;
	char *err;
	size_t err_len;
	const struct kvmm_dma *dma;
	const char *model_id;
	uint32_t flags;
};

/**
 * struct kvmm_store_key - what a page of a persistent store holds
 * @id: the page's identity: XXH3-128, seeded with @ns, of the token ids of
 *	its whole prefix up to and including its own
 * @parent: the identity of the page before it; zero for a first page
 * @ns: namespace of the prefix
 * @tokens: the page's own token ids (page_size of them)
 */
struct kvmm_store_key {
	uint64_t id[2];
	uint64_t parent[2];
	uint32_t ns;
	const uint32_t *tokens;
};

/**
 * struct kvmm_store_ops - the bytes of a lower tier's pages
 * @name: what selects it
 * @init: set up @cfg->nr_pages pages; store private state in *@privp
 * @exit: release everything @init took
 *
 * A memory store (the host tier) has its pages in addressable memory:
 * @page: the address of page @pfn (kvmm_page_bytes() long)
 * @seal: pages @pfns were just written: record what they must read back as
 * @verify: check pages @pfns against what @seal recorded; return the
 *	number of leading pages that verify (nr when all do)
 *
 * An I/O store (the NVMe tier) has them behind reads and writes:
 * @write: write @src[i] as page @pfns[i], labelled @keys[i]; 0, or a
 *	negative errno after which no page of the call can be trusted
 * @read: read pages @pfns and check them against @keys (identity) and
 *	their checksums; set @dst[i] to page i's bytes, valid until the next
 *	call on channel @chan.  Return the number of leading pages that read
 *	and verified; a store may stop early at its batch size, with *@err 0;
 *	otherwise *@err says why page [return] failed: -EBADMSG (it does not
 *	verify) or the I/O error.  Channel 0 is called under the context
 *	lock, channel 1 only from the I/O worker (promote.c), each by one
 *	thread at a time; the two may run at once, on different pages
 * @recover: call @fn for every page found valid on the store at init
 *	(restart), with its key and a write sequence number (higher is newer);
 *	a nonzero return from @fn stops the walk and is returned
 *
 * Every page is checksummed; a page that fails verification is treated as
 * a miss by the core and never served.  @page and @verify may be called
 * from the I/O worker while other calls run under the context lock, on
 * pages of other nodes.
 */
#define KVMM_STORE_CHANS	2
struct kvmm_store_ops {
	const char *name;
	int (*init)(const struct kvmm_store_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	void *(*page)(void *priv, uint32_t pfn);
	void (*seal)(void *priv, const int32_t *pfns, uint32_t nr);
	uint32_t (*verify)(void *priv, const int32_t *pfns, uint32_t nr);
	int (*write)(void *priv, const int32_t *pfns, uint32_t nr,
		     void *const *src, const struct kvmm_store_key *keys);
	uint32_t (*read)(void *priv, uint32_t chan, const int32_t *pfns, uint32_t nr,
			 const struct kvmm_store_key *keys, void **dst, int *err);
	int (*recover)(void *priv,
		       int (*fn)(void *arg, uint32_t pfn,
				 const struct kvmm_store_key *key, uint64_t seq),
		       void *arg);
};

const struct kvmm_store_ops *kvmm_store_lookup(uint32_t tier);

/**
 * struct kvmm_mock_arg - kvmm_params.backend_arg of the mock backend
 * @fail_init: make init fail with this negative errno (fault injection)
 * @fail_copy: make gather/scatter calls fail with this negative errno ...
 * @fail_every: ... on every @fail_every-th call (1: every call; 0: never)
 * @dma_strict: act as a device that reaches only registered host memory:
 *	a gather or scatter to or from memory outside every range given to
 *	mem_register fails with -EFAULT
 * @fail_register: make mem_register fail with this negative errno ...
 * @fail_register_at: ... on its @fail_register_at-th call (0: every call)
 * @dma_ranges: out: ranges registered now (0 after a clean destroy)
 * @mem_total: the device memory the mock reports for mem_fraction sizing
 * @mem_avail: ... and how much of it is free (both 0: it reports none)

 * @fail_resize: make resize fail with this negative errno (0: never)
 * @fail_share: make share (export) fail with this negative errno
 * @shareable: back the pool with memfds, which share can hand another
 *	process; shared memory gets no transparent huge pages on a default
 *	kernel, so copies are slower (without it share is -EOPNOTSUPP)
 *
 * The backend keeps the pointer and reads @fail_copy and @fail_every at
 * every call, so a test can turn faults on and off while it runs.
 */
struct kvmm_mock_arg {
	int fail_init;
	int fail_copy;
	uint32_t fail_every;
	bool dma_strict;
	int fail_register;
	uint32_t fail_register_at;
	uint32_t dma_ranges;
	uint64_t mem_total;
	uint64_t mem_avail;
	int fail_resize;
	int fail_share;
	bool shareable;
};

/**
 * struct kvmm_cuda_arg - kvmm_params.backend_arg of the cuda backend
 * @device: CUDA device ordinal
 * @driver: the driver library to open (NULL: "libcuda.so.1")
 * @no_kernels: copy with the copy engines (a cuMemcpyAsync per page run)
 *	instead of the kernels, as a baseline
 *
 * NULL as backend_arg means device 0, the default driver.
 */
struct kvmm_cuda_arg {
	int device;
	const char *driver;
	bool no_kernels;
};

/**
 * struct kvmm_host_arg - kvmm_params.host_arg: fault injection in the
 *	host store
 * @fail_init: make init fail with this negative errno
 * @flip_every: flip one bit of every @flip_every-th page verified, before
 *	verifying it (0: never), as memory corruption would
 */
struct kvmm_host_arg {
	int fail_init;
	uint32_t flip_every;
};

#define KVMM_NVME_SHORT		1	/* kvmm_nvme_arg.fault: a short transfer */

#define KVMM_NVME_SITE_WRITE	(1u << 0)
#define KVMM_NVME_SITE_READ	(1u << 1)
#define KVMM_NVME_SITE_SCAN	(1u << 2)	/* the restart scan */

/**
 * struct kvmm_nvme_arg - kvmm_params.nvme_arg: fault injection in the NVMe
 *	store, under its I/O path
 * @fail_init: make init fail with this negative errno
 * @fault: what a chosen completion turns into: a negative errno (-EIO,
 *	-ENOSPC, -EAGAIN, ...) or KVMM_NVME_SHORT (half the bytes moved)
 * @fault_every: choose every @fault_every-th completion (0: none) ...
 * @fault_sites: ... at these KVMM_NVME_SITE_* (0: all)
 * @flip_every: flip a bit in the data of every @flip_every-th page
 *	written, on its way to the file (0: never)
 * @tear_every: write only the first half of every @tear_every-th page, as
 *	a power cut would (0: never)
 * @latch: when not NULL, called with @latch_arg, the KVMM_NVME_SITE_* and
 *	the channel (0: calls under the context lock, 1: the I/O worker)
 *	before each batch of I/O starts; it may block, so a test can hold
 *	an I/O in flight (a promotion's reads) while it drives the rest
 * @latch_arg: for @latch
 *
 * The store keeps the pointer and reads the fields at every I/O.
 */
struct kvmm_nvme_arg {
	int fail_init;
	int fault;
	uint32_t fault_every;
	uint32_t fault_sites;
	uint32_t flip_every;
	uint32_t tear_every;
	void (*latch)(void *latch_arg, uint32_t site, uint32_t chan);
	void *latch_arg;
};

#ifdef __cplusplus
}
#endif

#endif /* LIBKVMM_H */
