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
 * A context is not thread-safe: one thread drives it at a time.  The
 * command ring (libkvmm-ring.h) serialises submitters, in this process or
 * in others.
 */
#ifndef LIBKVMM_H
#define LIBKVMM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <kvmm/kvmm.h>
#include <kvmm/ring.h>

/* For the timeouts; declared here too, as strict C99 <time.h> does not. */
struct timespec;

#ifdef __cplusplus
extern "C" {
#endif

#define KVMM_VERSION_MAJOR	0
#define KVMM_VERSION_MINOR	2

struct kvmm_ctx;

/**
 * struct kvmm_model - geometry of the model whose KV the pool holds
 * @layers: transformer layers holding KV
 * @kv_heads: KV heads per layer (MHA only)
 * @head_dim: elements per head (MHA only)
 * @latent_dim: elements of the latent vector, kv_lora_rank + rope dim (MLA only)
 * @dtype_bytes: bytes per element (2 for bf16, 1 for fp8)
 * @attn: KVMM_ATTN_MHA or KVMM_ATTN_MLA (uapi/kvmm/kvmm.h)
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
 * how tests inject an allocation failure at every site.  They may be
 * called from several threads at once (a ring's keyed command allocates
 * its copy window and new values' edges without the context's lock, the
 * I/O worker too): they must be thread-safe, as malloc is.
 */
struct kvmm_alloc_ops {
	void *(*alloc)(size_t size, void *priv);
	void (*free)(void *ptr, size_t size, void *priv);
};

/**
 * struct kvmm_params - what kvmm_create() builds
 * @size: sizeof(struct kvmm_params) as the caller was built; set by
 *	kvmm_params_init(), which every caller starts from
 *
 * Geometry:
 * @model: the model geometry; sets the bytes per token (cell size)
 * @page_size: tokens per page, a power of two in [1, KVMM_MAX_PAGE_SIZE]
 * @model_id: what the KV is of, beyond its geometry: a string naming the
 *	model and its weights (e.g. "meta-llama/Llama-3.1-8B@5206a32"), at
 *	most KVMM_MODEL_ID_MAX bytes of printable characters, or NULL.  The
 *	NVMe tier's file records a fingerprint of it (XXH3-128) and refuses
 *	to recover a file written under another one (-EEXIST), so KV of one
 *	model is never served to another of the same geometry
 * @max_seqs: rows of the page table: sequences open at once
 * @max_seq_len: tokens one sequence may hold
 *
 * The device pool:
 * @nr_pages: pages in the device pool; 0 to size it from the budget below
 * @max_pages: pages the device pool may grow to at run time with
 *	kvmm_resize() (0: the pool's size, fixed); the backend reserves
 *	address space for them and the core sizes its page descriptors
 *	(2 bytes each) for them, while memory is held only for the pages
 *	in use
 * @mem_total: total device memory in bytes (budget sizing)
 * @mem_avail: device memory free now, in bytes (budget sizing)
 * @mem_fraction: SGLang's mem_fraction_static, in (0, 1]
 * @backend: backend name, "mock" (default when NULL) or "cuda"
 * @backend_arg: the backend's options (struct kvmm_mock_arg,
 *	struct kvmm_cuda_arg), or NULL for its defaults
 *
 * Reclaim:
 * @wmark_min: pages kept back from ordinary allocations (see the tunables doc)
 * @wmark_low: an allocation that would leave fewer free pages reclaims first
 * @wmark_high: reclaim frees until this many pages are free after the allocation
 * @evict_policy: "lru" (default when NULL) or "slru"
 *
 * Lower tiers (see the tiers doc):
 * @host_pages: pages of the host tier (0: none); reclaim demotes cold
 *	prefixes there instead of dropping them
 * @host_node: NUMA node of the host tier's memory, or KVMM_NODE_NEAREST
 *	(-1) for the node nearest the device
 * @write_policy: when device KV gets a copy on the host tier:
 *	KVMM_WRITE_BACK (0, the default) copies a prefix down when reclaim
 *	demotes it; KVMM_WRITE_THROUGH copies it when it is committed, so
 *	that its later demotion copies nothing (needs a host tier)
 * @nvme_pages: pages of the NVMe tier (0: none); needs a host tier, which
 *	stages its pages
 * @nvme_qd: io_uring queue depth of the NVMe tier (0: 32)
 * @nvme_flags: KVMM_NVME_* flags of the NVMe tier: KVMM_NVME_REFORMAT
 *	formats its file afresh, dropping whatever it held, even a file of
 *	another model, geometry or layout version or one whose superblock
 *	is damaged (never a file that is not a kvmm file)
 * @nvme_path: the file or block device of the NVMe tier; an existing
 *	kvmm file of the same geometry and @model_id is recovered (restart),
 *	an empty (0-byte) or new one is formatted, anything else is refused
 *	(one whose first 4 KiB are zeros is formatted with
 *	KVMM_NVME_REFORMAT); it must be the process's user's, mode 600 (a
 *	block device: no access for others), not a symbolic link (-ELOOP)
 *	and not on procfs or another pseudo filesystem (-EPERM, -EINVAL); the
 *	file is locked while the context lives, and a second context on it
 *	is refused (-EBUSY) after waiting 2 s for the lock (which a killed
 *	instance's in-flight I/O holds a moment after its process is gone)
 * @host_arg: fault injection for kvmm's own tests; NULL
 * @nvme_arg: fault injection for kvmm's own tests; NULL
 * @host_wmark_low: with an NVMe tier, background reclaim writes the
 *	oldest host prefixes down to it when fewer host pages than this are
 *	free (counting those already on their way down); both 0: 1/8 of
 *	the host tier, at least 1 (see the tunables doc)
 * @host_wmark_high: ... until this many are; both 0: twice the low mark
 *
 * Frames:
 * @frames: KVMM_FRAMES_KVMM (0): kvmm allocates the pool's frames to its
 *	sequences; KVMM_FRAMES_ENGINE: the engine's allocator owns them and
 *	the tree takes and hands back frames through kvmm_frames_*() (no
 *	sequences, host or NVMe tier, resize, kvmm_reclaim())
 *
 * The remote tier (Documentation/admin-guide/remote.rst):
 * @remote: NULL, or "host:port[,host:port...]": seed nodes of a Redis
 *	Cluster (or Valkey) that keyed values are written through to and
 *	read from when the lower tiers miss, shared by every context with
 *	the same @remote_salt and @model_id; needs a host tier
 * @remote_salt: the salt (NULL: ""): contexts share pages and values
 *	only under the same salt and @model_id, and within one namespace
 *	(every remote name is derived from its namespace)
 * @remote_timeout_ms: every remote batch's deadline; 0: 1000
 * @remote_write: when the prefix tree's pages go to the remote tier on
 *	their own, on the I/O worker, without holding the context:
 *	KVMM_REMOTE_WRITE_NONE (0, the default) only when the engine pushes
 *	them (kvmm_remote_push(), RPUSH); KVMM_REMOTE_WRITE_COMMIT after every
 *	commit, the committed whole pages the cluster does not have yet
 *	(write-through); KVMM_REMOTE_WRITE_DEMOTE when background reclaim
 *	takes them off the host tier, to NVMe or (with no NVMe tier) out of
 *	the machine.  Keyed values are always written through.
 * @remote_user: the ACL user the client AUTHenticates as (NULL: the
 *	server's default user); used only with @remote_password
 * @remote_password: NULL: no AUTH; else every connection to the cluster
 *	sends AUTH first, and a refusal fails kvmm_create() with the
 *	server's reason (the library keeps a copy, wiped at kvmm_destroy())
 *
 * The keyed store:
 * @ns_kspaces: keyed spaces one namespace may hold, 1 .. KVMM_KSPACES_MAX
 *	(0: KVMM_NS_KSPACES_DEFAULT); in force from the start, so a restart
 *	recovers that many per namespace from NVMe (KVMM_SET_NS_KSPACES
 *	changes it later)
 *
 * Hooks:
 * @alloc: metadata allocator, NULL for malloc/free
 * @alloc_priv: passed to @alloc's hooks
 * @log: where kvmm reports corruption and check failures; NULL for stderr
 * @log_priv: passed to @log
 *
 * Budget sizing follows SGLang: with @nr_pages 0 the pool gets
 * (mem_avail - mem_total * (1 - mem_fraction)) bytes, divided by the cell
 * size times @page_size.  With @mem_total and @mem_avail both 0 the
 * backend is asked for them (cuda: cuMemGetInfo on its device).
 *
 * Every field is 0 (or NULL) for its default.  New fields are only ever
 * appended, and @size tells the library which ones the caller knows: a
 * caller built against an older header gets the defaults for the rest; a
 * caller built against a newer one is refused (-EINVAL) if it sets a
 * field this library does not know.
 */
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
	void *host_arg;
	void *nvme_arg;

	const struct kvmm_alloc_ops *alloc;
	void *alloc_priv;
	void (*log)(void *priv, const char *msg);
	void *log_priv;

	uint32_t host_wmark_low;
	uint32_t host_wmark_high;

	uint32_t frames;

	const char *remote;
	const char *remote_salt;
	uint32_t remote_timeout_ms;
	uint32_t remote_write;
	const char *remote_user;
	const char *remote_password;

	uint32_t ns_kspaces;
};

/* The first struct kvmm_params with a size: no caller passes less. */
#define KVMM_PARAMS_SIZE_VER0	200

#define KVMM_NODE_NEAREST	(-1)

/* kvmm_params.frames: who allocates the pool's frames */
#define KVMM_FRAMES_KVMM	0	/* kvmm: sequences, tiers, promotion */
#define KVMM_FRAMES_ENGINE	1	/* the engine: kvmm_frames_*() only */

#define KVMM_WRITE_BACK		0
#define KVMM_WRITE_THROUGH	1

/* kvmm_params.remote_write: when tree pages go to the remote tier on their own */
#define KVMM_REMOTE_WRITE_NONE		0	/* only when pushed (RPUSH) */
#define KVMM_REMOTE_WRITE_COMMIT	1	/* after every commit */
#define KVMM_REMOTE_WRITE_DEMOTE	2	/* as they leave the host tier */

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
void kvmm_params_init(struct kvmm_params *params);
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

/* flags: KVMM_EXTEND_* (uapi/kvmm/ring.h) */
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
/* budget: device pages at most, 0: what is free above the low watermark;
 * flags: KVMM_PREFETCH_RECLAIM (uapi/kvmm/ring.h) */
int kvmm_prefetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		  uint32_t n, uint32_t budget, uint32_t flags);

/* struct kvmm_tier_hits: uapi/kvmm/ring.h, as LOOKUP writes it too */
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
 * @rows: max_seqs; a row's index is kvmm_seq_open()'s sequence id, or
 *	KVMM_SEQ_ROW() of a ring's
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

/*
 * The keyed page store (struct kvmm_key and the rules: uapi/kvmm/ring.h).
 * Values live on the host tier and go down to NVMe as tree pages do;
 * it needs a host tier.
 */
struct kvmm_keyed_spec {
	uint32_t ns;
	uint32_t flags;
	uint64_t value_bytes;
	const char *model_id;
};
int kvmm_keyed_space(struct kvmm_ctx *ctx, const struct kvmm_keyed_spec *spec,
		     uint32_t *space);
int kvmm_keyed_put(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
		   const void *const *src, uint32_t n, int32_t *res);
int kvmm_keyed_get(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
		   void *const *dst, uint32_t n, int32_t *res);
int kvmm_keyed_exists(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
		      uint32_t n, int32_t *res);
int kvmm_keyed_delete(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
		      uint32_t n, int32_t *res);
/* budget: host pages at most, 0: what is free above the host tier's low
 * watermark; flags: KVMM_PREFETCH_RECLAIM (uapi/kvmm/ring.h) */
int kvmm_keyed_prefetch(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
			uint32_t n, uint32_t budget, uint32_t flags);
int kvmm_keyed_info(const struct kvmm_ctx *ctx, uint32_t space, struct kvmm_dump_kspace *info);
int kvmm_keyed_space_remove(struct kvmm_ctx *ctx, uint32_t space);

/* The prefix tree over the remote tier (kvmm_params.remote) */
int kvmm_remote_push(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n);
int kvmm_remote_fetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n);

/* Reclaim and tunables */
int64_t kvmm_reclaim(struct kvmm_ctx *ctx, uint32_t nr_pages);
int64_t kvmm_drop_caches(struct kvmm_ctx *ctx);
int64_t kvmm_drop_caches_tiers(struct kvmm_ctx *ctx, uint32_t tiers, uint64_t *freed);
int kvmm_sync(struct kvmm_ctx *ctx);

/**
 * struct kvmm_flush_info - what kvmm_flush() did
 * @pages: pages it wrote to the NVMe tier's file
 * @left: cached pages not on NVMe that it did not write: out of time or
 *	room on the tier, or failed (a write error, a host page that does
 *	not verify)
 * @ns: how long it took
 */
struct kvmm_flush_info {
	uint64_t pages;
	uint64_t left;
	uint64_t ns;
};
int64_t kvmm_flush(struct kvmm_ctx *ctx, uint32_t timeout_ms, struct kvmm_flush_info *info);
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
bool kvmm_backend_available(const char *name);
int kvmm_stream_wait(struct kvmm_ctx *ctx, void *stream);
int kvmm_page_table_dev(struct kvmm_ctx *ctx, void **dev);

/*
 * Engine-owned frames (kvmm_params.frames = KVMM_FRAMES_ENGINE): the tree
 * over frames the engine allocates (SGLang's radix cache).  An insert
 * hands the tree the frames of what it did not have; an eviction hands
 * them back.  A node is named by a handle; {NULL, 0} is a namespace's
 * root, and a handle to a node that is gone is refused (-ESTALE).
 */
struct kvmm_fnode {
	void *node;
	uint64_t id;
};
int kvmm_frames_match(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		      uint32_t n, int32_t *frames, struct kvmm_fnode *last);
int kvmm_frames_insert(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		       uint32_t n, const int32_t *frames, struct kvmm_fnode *last);
int kvmm_frames_extend(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		       uint32_t n, int32_t *frames, const struct kvmm_fnode *from,
		       uint32_t from_len, uint32_t split, uint32_t inserted_len,
		       struct kvmm_fnode *last);
int64_t kvmm_frames_lock(struct kvmm_ctx *ctx, const struct kvmm_fnode *node, int delta);
int64_t kvmm_frames_evict(struct kvmm_ctx *ctx, uint32_t nr_pages, int32_t *frames,
			  uint32_t max);
int kvmm_frames_sizes(const struct kvmm_ctx *ctx, uint64_t *evictable, uint64_t *locked);
int kvmm_frames_path(const struct kvmm_ctx *ctx, const struct kvmm_fnode *node,
		     int32_t *frames, uint32_t max);
int64_t kvmm_frames_cached(const struct kvmm_ctx *ctx, int32_t *frames, uint32_t max);

/*
 * Sharing the pool with another process: the owner describes it
 * (kvmm_kv_share(), what kvmmd sends a client that asks), the other side
 * maps the same memory (kvmm_kv_pool_open(), or kvmm_kv_pool_attach() over
 * a ring connected to kvmmd: libkvmm-ring.h) and hands its kernels the
 * addresses it gets.  Every pool, opened or attached, is closed with
 * kvmm_kv_pool_close(); every description with kvmm_kv_share_release().
 */
struct kvmm_kv_pool;
int kvmm_kv_share(struct kvmm_ctx *ctx, struct kvmm_share *share,
		  struct kvmm_share_ext **ext, int **fds);
void kvmm_kv_share_release(const struct kvmm_share *share, struct kvmm_share_ext *ext,
			   int *fds);
int kvmm_kv_pool_open(const struct kvmm_share *share, const struct kvmm_share_ext *ext,
		      const int *fds, void *backend_arg, struct kvmm_kv_pool **poolp);
int kvmm_kv_pool_layer(const struct kvmm_kv_pool *pool, uint32_t layer,
		       struct kvmm_kv_layer *out);
uint32_t kvmm_kv_pool_pages(const struct kvmm_kv_pool *pool);
void kvmm_kv_pool_close(struct kvmm_kv_pool *pool);

/**
 * struct kvmm_mock_arg - kvmm_params.backend_arg of the mock backend
 * @shareable: back the pool with memfds, which kvmm_kv_share() can hand
 *	another process; shared memory gets no transparent huge pages on a
 *	default kernel, so copies are slower (without it sharing is
 *	-EOPNOTSUPP)
 * @mem_total: the device memory the mock reports for mem_fraction sizing
 * @mem_avail: ... and how much of it is free (both 0: it reports none)
 * @faults: fault injection for kvmm's own tests; NULL
 *
 * NULL as backend_arg means none of these.
 */
struct kvmm_mock_faults;
struct kvmm_mock_arg {
	bool shareable;
	uint64_t mem_total;
	uint64_t mem_avail;
	struct kvmm_mock_faults *faults;
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

#ifdef __cplusplus
}
#endif

#endif /* LIBKVMM_H */
