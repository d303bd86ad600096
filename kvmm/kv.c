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
	uint32_t *lens, stamp, i;
	int ret = 0;

	if (!ctx || !b || (b->count && !b->seqs) || !b->indptr ||
	    (b->count && !b->last_page_len) || b->count > ctx->max_seqs)
		return -EINVAL;
	if (!ctx->backend->kv_indices)
		return -EOPNOTSUPP;
	lens = kvmm_malloc(ctx, (size_t)b->count * sizeof(*lens) + 1);
	if (!lens)
		return -ENOMEM;
	stamp = ++ctx->batch;
	for (i = 0; i < b->count && !ret; i++) {
		struct kvmm_seq *s = kvmm_seq_get(ctx, b->seqs[i]);

		if (!s || s->mark == stamp) {
			ret = -EINVAL;
			break;
		}
		s->mark = stamp;
		lens[i] = s->len;
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
			.rows = b->seqs,
			.lens = lens,
			.count = b->count,
			.indptr = b->indptr,
			.indices = b->indices,
			.last = b->last_page_len,
			.stream = b->stream,
		};
		ret = ctx->backend->kv_indices(ctx->backend_priv, &job);
	}
	kvmm_mfree(ctx, lens, (size_t)b->count * sizeof(*lens) + 1);
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
