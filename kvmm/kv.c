// SPDX-License-Identifier: MIT
/*
 * kvmm/kv.c - what an engine asks of the pool's bytes, through the backend.
 *
 * The core never touches KV bytes; these calls check what the engine names
 * against the core's state (pages it may write, sequences that are open)
 * and hand the work to the backend's optional ops: copy pages, build
 * FlashInfer's paged-KV arrays for a batch, make a compute stream wait for
 * the backend's copies, describe the pool.  A backend without an op gets
 * -EOPNOTSUPP.  Like the rest of the direct API they take no lock; an
 * engine that also serves rings from other threads brackets them with
 * kvmm_lock().
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

/**
 * kvmm_kv_copy() - copy the leading slots of pages onto other pages
 * @ctx: the context
 * @src: pages to copy from: any page holding KV (owned, cached, in I/O)
 * @dst: pages to copy to: each owned by an open sequence, none in @src,
 *	none twice (a shared page is never written)
 * @nr: pairs
 * @slots: leading slots of each page to copy, 1..page_size
 *
 * Copy-on-write of a partial page: a sequence that extends a page it
 * shares takes a page of its own and copies the shared page's filled slots
 * into it, in every layer.
 *
 * Return: 0; -EINVAL for a page out of range or in the wrong state, or a
 * bad @slots; -EOPNOTSUPP when the backend cannot copy; its error.
 */
KVMM_EXPORT int kvmm_kv_copy(struct kvmm_ctx *ctx, const int32_t *src,
			     const int32_t *dst, uint32_t nr, uint32_t slots)
{
	const struct kvmm_zone *zone;
	uint32_t i, j;

	if (!ctx || (nr && (!src || !dst)) || !slots || slots > ctx->page_size)
		return -EINVAL;
	if (!ctx->backend->copy)
		return -EOPNOTSUPP;
	zone = &ctx->zone[KVMM_TIER_DEVICE];
	for (i = 0; i < nr; i++) {
		if ((uint32_t)src[i] >= zone->nr_pages || (uint32_t)dst[i] >= zone->nr_pages ||
		    zone->pages[src[i]].state == KVMM_PAGE_FREE ||
		    zone->pages[dst[i]].state != KVMM_PAGE_OWNED)
			return -EINVAL;
		/* Quadratic, but a copy-on-write batch is a handful of pages. */
		for (j = 0; j < nr; j++)
			if (src[j] == dst[i] || (j < i && dst[j] == dst[i]))
				return -EINVAL;
	}
	return nr ? ctx->backend->copy(ctx->backend_priv, src, dst, nr, slots) : 0;
}

/**
 * kvmm_kv_indices() - FlashInfer's paged-KV arrays for a batch
 * @ctx: the context
 * @b: the batch and where the arrays go (see struct kvmm_kv_batch)
 *
 * What SGLang's create_flashinfer_kv_indices_triton computes, from the
 * page table rows of @b->seqs and their lengths, built by the backend (a
 * kernel on cuda, kernels/ref.c on mock).
 *
 * Return: the number of pages written to @b->indices; -EINVAL for a
 * sequence that is not open or named twice, or missing arrays; -ENOSPC
 * when @b->max_indices is too small; -EOVERFLOW when the total does not
 * fit an int32; -EOPNOTSUPP when the backend cannot build them; -ENOMEM;
 * the backend's error.  Nothing is written on error, except by a backend
 * that failed midway.
 */
KVMM_EXPORT int64_t kvmm_kv_indices(struct kvmm_ctx *ctx, const struct kvmm_kv_batch *b)
{
	struct kvmm_kv_index_job job;
	uint64_t total = 0;
	uint32_t *lens, *rows, stamp, i;
	size_t bytes;
	int ret = 0;

	if (!ctx || !b || (b->count && !b->seqs) || !b->indptr ||
	    (b->count && !b->last_page_len) || b->count > ctx->max_seqs)
		return -EINVAL;
	if (!ctx->backend->kv_indices)
		return -EOPNOTSUPP;
	/* The lengths, then the rows: @b->seqs may be ids (KVMM_SEQ_ID). */
	bytes = 2 * (size_t)b->count * sizeof(*lens) + 1;
	lens = kvmm_malloc(ctx, bytes);
	if (!lens)
		return -ENOMEM;
	rows = lens + b->count;
	stamp = ++ctx->batch;
	for (i = 0; i < b->count && !ret; i++) {
		struct kvmm_seq *s = kvmm_seq_lookup(ctx, b->seqs[i]);

		if (!s || s->mark == stamp) {
			ret = -EINVAL;
			break;
		}
		s->mark = stamp;
		lens[i] = s->len;
		rows[i] = KVMM_SEQ_ROW(b->seqs[i]);
		total += kvmm_pages_of(ctx, s->len);
	}
	if (!ret && total > INT32_MAX)
		ret = -EOVERFLOW;
	else if (!ret && total > b->max_indices)
		ret = -ENOSPC;
	else if (!ret && total && !b->indices)
		ret = -EINVAL;
	if (!ret) {
		job = (struct kvmm_kv_index_job){
			.table = ctx->table,
			.table_bytes = (size_t)ctx->row_pages * ctx->max_seqs * sizeof(*ctx->table),
			.stride = ctx->row_pages,
			.page_size = ctx->page_size,
			.rows = rows,
			.lens = lens,
			.count = b->count,
			.indptr = b->indptr,
			.indices = b->indices,
			.last = b->last_page_len,
			.stream = b->stream,
		};
		ret = ctx->backend->kv_indices(ctx->backend_priv, &job);
	}
	kvmm_mfree(ctx, lens, bytes);
	return ret ? ret : (int64_t)total;
}

/**
 * kvmm_backend_info() - one line on the backend and its pool
 * @ctx: the context
 * @buf: where it goes, NUL-terminated (truncated to fit)
 * @len: bytes at @buf
 *
 * Return: its length (as snprintf), -EINVAL, or -EOPNOTSUPP.
 */
KVMM_EXPORT int kvmm_backend_info(struct kvmm_ctx *ctx, char *buf, size_t len)
{
	if (!ctx || !buf || !len)
		return -EINVAL;
	if (!ctx->backend->info)
		return -EOPNOTSUPP;
	return ctx->backend->info(ctx->backend_priv, buf, len);
}

/**
 * kvmm_stream_wait() - order an engine's stream after the backend's copies
 * @ctx: the context
 * @stream: cuda: the CUstream the engine computes on
 *
 * Demotion, promotion and kvmm_kv_copy() finish before they return, so a
 * host thread may go on at once; a GPU stream queued before them may not
 * have seen them.  After this call, work queued on @stream runs after
 * every copy the backend has issued.
 *
 * Return: 0; -EOPNOTSUPP for a backend with no streams (mock: its copies
 * are plain memory, nothing to wait for); the backend's error.
 */
KVMM_EXPORT int kvmm_stream_wait(struct kvmm_ctx *ctx, void *stream)
{
	if (!ctx || !stream)
		return -EINVAL;
	if (!ctx->backend->stream_wait)
		return -EOPNOTSUPP;
	return ctx->backend->stream_wait(ctx->backend_priv, stream);
}

/**
 * kvmm_page_table_dev() - the page table where the backend's kernels read it
 * @ctx: the context
 * @dev: out: its address in the backend's memory
 *
 * The table stays where kvmm_seq_table() says and is updated in place; on
 * cuda it is registered (mapped, read-only) and @dev is the device address
 * of that mapping, so an attention kernel reads rows as the core writes
 * them.  On mock @dev is the host address.
 *
 * Return: 0; -EINVAL; -EOPNOTSUPP for a backend without kernels; the
 * backend's error.
 */
KVMM_EXPORT int kvmm_page_table_dev(struct kvmm_ctx *ctx, void **dev)
{
	if (!ctx || !dev)
		return -EINVAL;
	if (!ctx->backend->table_map)
		return -EOPNOTSUPP;
	return ctx->backend->table_map(ctx->backend_priv, ctx->table,
				       (size_t)ctx->row_pages * ctx->max_seqs *
				       sizeof(*ctx->table), dev);
}

/* A bare description: magic and @status, all else zero; returns @status. */
static int share_header(struct kvmm_share *share, int status)
{
	memset(share, 0, sizeof(*share));
	share->magic = KVMM_SHARE_MAGIC;
	share->status = status;
	return status;
}

/**
 * kvmm_kv_share() - describe the pool so another process can map it
 * @ctx: the context; its lock held when rings are served
 * @share: out: the description (uapi struct kvmm_share); on failure a
 *	refusal: magic set, status the negative errno, nothing else
 * @ext: out: share->nr_ext extents
 * @fds: out: share->nr_fds new descriptors
 *
 * The caller gives @ext and @fds back with kvmm_kv_share_release() (which
 * closes the descriptors) once it has sent or opened them.  What kvmmd
 * sends a client that asks (kvmm_kv_pool_attach()).  The pages the
 * importer maps are the same memory: what it writes there the pool has.
 * The description is of the pool as it is now; after kvmm_resize() a
 * client maps it again.
 *
 * Return: 0; -EOPNOTSUPP when the backend cannot export its memory (cuda:
 * a device without POSIX file-descriptor handles); its error.
 */
KVMM_EXPORT int kvmm_kv_share(struct kvmm_ctx *ctx, struct kvmm_share *share,
			      struct kvmm_share_ext **ext, int **fds)
{
	const struct kvmm_model *m;
	int ret;

	if (!ctx || !share || !ext || !fds)
		return -EINVAL;
	*ext = NULL;
	*fds = NULL;
	if (!ctx->backend->share)
		return share_header(share, -EOPNOTSUPP);
	share_header(share, 0);
	m = &ctx->params.model;
	snprintf(share->backend, sizeof(share->backend), "%s", ctx->backend->name);
	share->layers = m->layers;
	share->kv_heads = m->kv_heads;
	share->head_dim = m->head_dim;
	share->latent_dim = m->latent_dim;
	share->dtype_bytes = m->dtype_bytes;
	share->attn = m->attn;
	share->page_size = ctx->page_size;
	share->nr_pages = ctx->zone[KVMM_TIER_DEVICE].nr_pages;
	ret = ctx->backend->share(ctx->backend_priv, share, ext, fds);
	return ret ? share_header(share, ret) : 0;
}

/*
 * struct kvmm_kv_pool - another process's pool, mapped here
 * @ops: the backend that mapped it; @priv: its state
 * @nr_pages: pages shared; @layers: the model's
 */
struct kvmm_kv_pool {
	const struct kvmm_backend_ops *ops;
	void *priv;
	uint32_t nr_pages;
	uint32_t layers;
};

/**
 * kvmm_kv_share_release() - give back what kvmm_kv_share() handed out
 * @share: the description @ext and @fds came with (its nr_fds counts them)
 * @ext: its extents, or NULL
 * @fds: its descriptors, or NULL; each is closed
 *
 * The arrays are the library's allocations, so the library frees them.
 *
 * Context: any.
 */
KVMM_EXPORT void kvmm_kv_share_release(const struct kvmm_share *share,
				       struct kvmm_share_ext *ext, int *fds)
{
	uint32_t i;

	for (i = 0; fds && share && i < share->nr_fds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	free(ext);
}

/**
 * kvmm_kv_pool_open() - map a pool another process shared
 * @share: its description (from kvmm_kv_share() there)
 * @ext: its share->nr_ext extents
 * @fds: its share->nr_fds descriptors; they stay the caller's
 * @backend_arg: this side's backend argument (cuda: struct kvmm_cuda_arg;
 *	the device is the one named in @share whatever its ordinal here)
 * @poolp: out
 *
 * Return: 0; -EINVAL for a description that does not hold together
 * (geometry whose pool bytes overflow included); -EOPNOTSUPP for a backend this build lacks or that cannot import; its
 * error (-ENODEV: the device is not visible here).
 */
KVMM_EXPORT int kvmm_kv_pool_open(const struct kvmm_share *share,
				  const struct kvmm_share_ext *ext, const int *fds,
				  void *backend_arg, struct kvmm_kv_pool **poolp)
{
	struct kvmm_backend_cfg cfg = { 0 };
	const struct kvmm_backend_ops *ops;
	struct kvmm_kv_pool *pool;
	uint64_t covered = 0, page_bytes, bytes;
	uint32_t i;
	int ret;

	if (!share || !poolp || share->magic != KVMM_SHARE_MAGIC || share->status ||
	    !share->nr_ext || (!ext || !fds) ||
	    share->nr_fds != (uint64_t)share->nr_ext * share->nbufs ||
	    memchr(share->backend, 0, sizeof(share->backend)) == NULL)
		return -EINVAL;
	cfg.model = (struct kvmm_model){
		.layers = share->layers, .kv_heads = share->kv_heads,
		.head_dim = share->head_dim, .latent_dim = share->latent_dim,
		.dtype_bytes = share->dtype_bytes, .attn = share->attn,
	};
	if (kvmm_check_model(&cfg.model) || !share->page_size ||
	    (share->page_size & (share->page_size - 1)) ||
	    share->page_size > KVMM_MAX_PAGE_SIZE || !share->nr_pages ||
	    share->nr_pages > share->mapped_pages || share->mapped_pages > share->max_pages ||
	    (uint64_t)share->max_pages * share->page_size > KVMM_MAX_SLOTS ||
	    share->nbufs != cfg.model.layers * (cfg.model.attn == KVMM_ATTN_MLA ? 1 : 2))
		return -EINVAL;
	/* The bytes the backend maps, as kvmm_create() bounds them there. */
	page_bytes = kvmm_page_bytes(&cfg.model, share->page_size);
	if (!page_bytes || __builtin_mul_overflow(page_bytes, (uint64_t)share->max_pages, &bytes) ||
	    bytes > INT64_MAX)
		return -EINVAL;
	/* The extents tile [0, mapped_pages) in order. */
	for (i = 0; i < share->nr_ext; i++) {
		if (ext[i].first != covered || !ext[i].pages)
			return -EINVAL;
		covered += ext[i].pages;
	}
	if (covered != share->mapped_pages)
		return -EINVAL;
	ops = kvmm_backend_lookup(share->backend);
	if (!ops || !ops->import)
		return -EOPNOTSUPP;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	cfg.page_size = share->page_size;
	cfg.nr_pages = share->nr_pages;
	cfg.max_pages = share->max_pages;
	cfg.tier = KVMM_TIER_DEVICE;
	cfg.arg = backend_arg;
	ret = ops->import(&cfg, share, ext, fds, &pool->priv);
	if (ret) {
		free(pool);
		return ret;
	}
	pool->ops = ops;
	pool->nr_pages = share->nr_pages;
	pool->layers = share->layers;
	*poolp = pool;
	return 0;
}

/**
 * kvmm_kv_pool_layer() - where layer @layer's KV is in an imported pool
 * @pool: from kvmm_kv_pool_open() or kvmm_kv_pool_attach()
 * @layer: 0 .. layers - 1
 * @out: filled on success, as kvmm_kv_layer() does for the owner
 *
 * Return: 0, or -EINVAL.
 */
KVMM_EXPORT int kvmm_kv_pool_layer(const struct kvmm_kv_pool *pool, uint32_t layer,
				   struct kvmm_kv_layer *out)
{
	if (!pool || !out || layer >= pool->layers)
		return -EINVAL;
	return pool->ops->kv_layer(pool->priv, layer, out);
}

/* kvmm_kv_pool_pages() - pages of the pool as shared (0 for NULL) */
KVMM_EXPORT uint32_t kvmm_kv_pool_pages(const struct kvmm_kv_pool *pool)
{
	return pool ? pool->nr_pages : 0;
}

/* kvmm_kv_pool_close() - unmap an imported pool; the owner's is untouched */
KVMM_EXPORT void kvmm_kv_pool_close(struct kvmm_kv_pool *pool)
{
	if (!pool)
		return;
	pool->ops->exit(pool->priv);
	free(pool);
}
