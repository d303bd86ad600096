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

#include <stddef.h>
#include <stdint.h>
#include <kvmm/kvmm.h>

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
 * @backend: backend name, "mock" (default when NULL)
 * @backend_arg: passed to the backend's init, backend specific (may be NULL)
 * @alloc: metadata allocator, NULL for malloc/free
 * @alloc_priv: passed to @alloc's hooks
 * @log: where kvmm reports corruption and check failures; NULL for stderr
 * @log_priv: passed to @log
 *
 * Budget sizing follows SGLang: with @nr_pages 0 the pool gets
 * (mem_avail - mem_total * (1 - mem_fraction)) bytes, divided by the cell
 * size times @page_size.  Unused fields must be zero.
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
	const char *backend;
	void *backend_arg;
	const struct kvmm_alloc_ops *alloc;
	void *alloc_priv;
	void (*log)(void *priv, const char *msg);
	void *log_priv;
};

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
 */
struct kvmm_backend_cfg {
	struct kvmm_model model;
	uint32_t page_size;
	uint32_t nr_pages;
	uint32_t tier;
	void *arg;
};

/**
 * struct kvmm_backend_ops - a KV pool's storage
 * @name: what kvmm_params.backend selects it by
 * @init: allocate the pool for @cfg; store private state in *@privp
 * @exit: release everything @init took
 * @kv_layer: describe layer @layer of the pool
 */
struct kvmm_backend_ops {
	const char *name;
	int (*init)(const struct kvmm_backend_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	int (*kv_layer)(void *priv, uint32_t layer, struct kvmm_kv_layer *out);
};

const struct kvmm_backend_ops *kvmm_backend_lookup(const char *name);

/**
 * struct kvmm_mock_arg - kvmm_params.backend_arg of the mock backend
 * @fail_init: make init fail with this negative errno (fault injection)
 */
struct kvmm_mock_arg {
	int fail_init;
};

#ifdef __cplusplus
}
#endif

#endif /* LIBKVMM_H */
