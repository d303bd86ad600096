// SPDX-License-Identifier: MIT
/*
 * kvmm/flush.c - flush: a copy of every cached page on the NVMe tier's
 * file, ancestors first, so that a restart finds the whole cache.
 *
 * DOC: flush
 *
 * A restart recovers what the NVMe tier's slot headers name
 * (recover.c), and a page is hung back in the tree only below its
 * parent.  Pages on the device or the host tier are not on the file, and
 * the hottest prefixes (a system prompt every conversation shares) are
 * exactly those: without them, the conversations below them would be
 * found with no place to go.  kvmm_flush() writes a copy of every cached
 * page that is not on NVMe to a free slot of the file, labelled with its
 * identity as a demotion labels it, walking the tree breadth first from
 * the roots: every page is written after its parent, and when the time
 * or the room runs out, what is left out is the deepest part, never a
 * parent of what went in.
 *
 * The tree does not change: the copies are not nodes, their slots are
 * free again when the flush ends, and the file keeps them until the tier
 * reuses those slots.  So a flush is a checkpoint: a context destroyed
 * right after it (a clean shutdown) leaves a file a restart recovers in
 * full; a context that goes on overwrites the copies as its tier needs
 * the room.  The room a copy needs is made by the NVMe tier's own
 * reclaim (its oldest leaves go), as a demotion's is.
 *
 * Demotions the I/O worker finished are settled first, and none while
 * the flush runs: a settle may move or drop the nodes it walks.
 *
 * The flush holds the context (its lock, for a ring) and waits for its
 * writes, on the store's channel 0 (the one for calls under the lock),
 * in batches of at most 256 pages and 16 MiB (what it may overrun its
 * time by), for at most the time it is given; the I/O worker's
 * demotions go on on their own channel.  Device pages are gathered into
 * a staging buffer first; host pages are verified before they are
 * written (a page that fails is not written, and counts as a checksum
 * failure of the host tier).
 */
#include <stdlib.h>

#include "internal.h"

/*
 * Pages one write of a flush carries at most, and bytes: a batch is the
 * most a flush overruns its time by, and the staging buffer's size.
 */
#define KVMM_FLUSH_BATCH	256
#define KVMM_FLUSH_BATCH_BYTES	(16u << 20)

/**
 * struct flush_batch - pages gathered for one write of a flush
 * @dst: their slots on the NVMe tier
 * @keys: their identities
 * @addrs: where their bytes are: host pages, or @stage slots
 * @dev: device frames to gather, @nr_dev of them, into @dev_addrs
 * @dev_addrs: their @stage slots
 * @stage: staging memory for device pages, @cap pages
 * @cap: pages a batch holds: KVMM_FLUSH_BATCH, fewer for large pages
 * @nr: pages in the batch
 */
struct flush_batch {
	int32_t dst[KVMM_FLUSH_BATCH];
	struct kvmm_store_key keys[KVMM_FLUSH_BATCH];
	void *addrs[KVMM_FLUSH_BATCH];
	int32_t dev[KVMM_FLUSH_BATCH];
	void *dev_addrs[KVMM_FLUSH_BATCH];
	char *stage;
	uint32_t cap;
	uint32_t nr;
	uint32_t nr_dev;
};

/* The nodes to flush, breadth first: parents first. */
static uint64_t flush_order(struct kvmm_ctx *ctx, struct kvmm_node **q)
{
	uint64_t nr = kvmm_tree_bfs(ctx, q), i, out = 0;

	for (i = 0; i < nr; i++)
		if (q[i]->len && q[i]->tier < KVMM_TIER_NVME)
			q[out++] = q[i];
	return out;
}

/* Write the batch: gather its device pages, then one write. */
static int flush_write(struct kvmm_ctx *ctx, struct flush_batch *b)
{
	uint64_t t0 = kvmm_now_ns();
	int ret = 0;

	if (b->nr_dev)
		ret = ctx->backend->gather(ctx->backend_priv, b->dev, b->nr_dev, b->dev_addrs);
	if (!ret)
		ret = ctx->store[KVMM_TIER_NVME]->write(ctx->store_priv[KVMM_TIER_NVME], 0,
							b->dst, b->nr, b->addrs, b->keys, NULL);
	if (ret) {
		kvmm_tier_copy_failed(ctx, KVMM_TIER_NVME, KVMM_TIER_NVME, ret);
	} else {
		kvmm_tier_count(ctx, KVMM_TIER_NVME, TEV_NS_IN, kvmm_now_ns() - t0);
		kvmm_tier_count(ctx, KVMM_TIER_NVME, TEV_BYTES_IN,
				b->nr * kvmm_page_bytes(&ctx->params.model, ctx->page_size));
	}
	b->nr = b->nr_dev = 0;
	return ret;
}

/*
 * Add pages @from .. @from + @nr of @node (whose identities are at
 * @keys) to the batch, taking slots for them (@held grows).
 * Return: whether the tier had the room.
 */
static bool flush_add(struct kvmm_ctx *ctx, struct flush_batch *b, struct kvmm_node *node,
		      const struct kvmm_store_key *keys, uint32_t from, uint32_t nr,
		      int32_t *held, uint64_t *nr_held)
{
	const struct kvmm_store_ops *host = ctx->store[KVMM_TIER_HOST];
	uint64_t bytes = kvmm_page_bytes(&ctx->params.model, ctx->page_size);
	struct kvmm_zone *zone = &ctx->zone[KVMM_TIER_NVME];
	uint32_t i;

	if (zone->nr_free < nr) {	/* not kvmm_tier_make_room(): no reap */
		struct kvmm_scan_control sc = { .nr_to_reclaim = nr - zone->nr_free,
						.tier = KVMM_TIER_NVME };

		kvmm_shrink(ctx, &sc);
		if (zone->nr_free < nr)
			return false;
	}
	__kvmm_alloc_pages(ctx, zone, nr, held + *nr_held);
	memcpy(b->dst + b->nr, held + *nr_held, nr * sizeof(int32_t));
	memcpy(b->keys + b->nr, keys + from, nr * sizeof(*keys));
	*nr_held += nr;
	for (i = 0; i < nr; i++) {
		int32_t pfn = node->pfns[from + i];

		if (node->tier == KVMM_TIER_HOST) {
			b->addrs[b->nr + i] = host->page(ctx->store_priv[KVMM_TIER_HOST],
							 (uint32_t)pfn);
			continue;
		}
		b->dev[b->nr_dev] = pfn;
		b->dev_addrs[b->nr_dev] = b->stage + (size_t)b->nr_dev * bytes;
		b->addrs[b->nr + i] = b->dev_addrs[b->nr_dev++];
	}
	b->nr += nr;
	return true;
}

/* Write the batch if it holds anything; count what went and what did not. */
static void flush_drain(struct kvmm_ctx *ctx, struct flush_batch *b, uint64_t *written,
			uint64_t *left)
{
	uint32_t in = b->nr;

	if (!in)
		return;
	if (flush_write(ctx, b))
		*left += in;
	else
		*written += in;
}

/*
 * Flush @node, in batches, until @deadline.  Return: its pages left out
 * (out of time or room, or a host page that does not verify).
 */
static uint64_t flush_node(struct kvmm_ctx *ctx, struct flush_batch *b, struct kvmm_node *node,
			   uint64_t deadline, int32_t *held, uint64_t *nr_held,
			   uint64_t *written, uint64_t *left)
{
	uint32_t nr = node->len >> ctx->page_shift, at = 0, n;
	struct kvmm_store_key *keys = ctx->tier_keys;

	if (node->tier == KVMM_TIER_HOST &&
	    ctx->store[KVMM_TIER_HOST]->verify(ctx->store_priv[KVMM_TIER_HOST],
					       node->pfns, nr) < nr) {
		kvmm_tier_count(ctx, KVMM_TIER_HOST, TEV_CSUM_FAIL, 1);
		return nr;
	}
	if (nr > ctx->row_pages) {	/* a keyed value longer than the scratch's row */
		keys = kvmm_malloc(ctx, (size_t)nr * sizeof(*keys));
		if (!keys)
			return nr;
	}
	kvmm_tier_keys(ctx, node, keys);
	while (at < nr) {
		if (b->nr == b->cap)
			flush_drain(ctx, b, written, left);
		if (kvmm_now_ns() >= deadline)
			break;
		n = nr - at < b->cap - b->nr ? nr - at : b->cap - b->nr;
		if (!flush_add(ctx, b, node, keys, at, n, held, nr_held))
			break;
		at += n;
	}
	if (keys != ctx->tier_keys) {
		flush_drain(ctx, b, written, left);	/* the batch points into @keys */
		kvmm_mfree(ctx, keys, (size_t)nr * sizeof(*keys));
	}
	return nr - at;
}

/*
 * The staging buffer for device pages, registered for the backend's
 * copies where it asks for that.
 */
static char *stage_alloc(struct kvmm_ctx *ctx, size_t bytes)
{
	char *p = kvmm_malloc(ctx, bytes);

	if (p && ctx->dma.reg && ctx->dma.reg(ctx->dma.priv, p, bytes)) {
		kvmm_mfree(ctx, p, bytes);
		return NULL;
	}
	return p;
}

static void stage_free(struct kvmm_ctx *ctx, char *p, size_t bytes)
{
	if (!p)
		return;
	if (ctx->dma.reg)
		ctx->dma.unreg(ctx->dma.priv, p, bytes);
	kvmm_mfree(ctx, p, bytes);
}

/**
 * kvmm_flush_held() - kvmm_flush() for a caller that holds the context
 * @ctx: the context, its lock held (or the direct API's one thread)
 * @timeout_ms: how long it may take; 0: no limit
 * @info: out, or NULL: what it wrote and left out
 *
 * Return: as kvmm_flush().
 */
int64_t kvmm_flush_held(struct kvmm_ctx *ctx, uint32_t timeout_ms,
			struct kvmm_flush_info *info)
{
	uint64_t t0 = kvmm_now_ns(), i, nr, nr_held = 0, written = 0, left = 0;
	uint64_t deadline = timeout_ms ? t0 + timeout_ms * 1000000ull : UINT64_MAX;
	uint64_t page_bytes = kvmm_page_bytes(&ctx->params.model, ctx->page_size), cap;
	size_t stage_bytes, q_bytes, held_bytes;
	struct kvmm_zone *nvme = &ctx->zone[KVMM_TIER_NVME];
	struct kvmm_node **q = NULL;
	struct flush_batch *b;
	int32_t *held = NULL;
	int64_t ret = 0;

	if (info)
		*info = (struct kvmm_flush_info){ 0 };
	if (!ctx->store[KVMM_TIER_NVME])
		return -EOPNOTSUPP;
	kvmm_migrate_reap(ctx);
	cap = KVMM_FLUSH_BATCH_BYTES / page_bytes;
	cap = cap < 1 ? 1 : cap > KVMM_FLUSH_BATCH ? KVMM_FLUSH_BATCH : cap;
	stage_bytes = (size_t)cap * page_bytes;
	q_bytes = kvmm_tree_bfs_bytes(ctx);
	held_bytes = (size_t)nvme->nr_pages * sizeof(*held);
	b = kvmm_zalloc(ctx, sizeof(*b));
	q = kvmm_malloc(ctx, q_bytes);
	held = kvmm_malloc(ctx, held_bytes);
	if (b) {
		b->cap = (uint32_t)cap;
		b->stage = stage_alloc(ctx, stage_bytes);
	}
	if (!b || !b->stage || !q || !held) {
		ret = -ENOMEM;
		goto out;
	}
	nr = flush_order(ctx, q);
	for (i = 0; i < nr; i++) {
		uint64_t out = flush_node(ctx, b, q[i], deadline, held, &nr_held, &written, &left);

		left += out;
	}
	flush_drain(ctx, b, &written, &left);
	ret = (int64_t)written;
out:
	if (held)
		kvmm_free_pages(ctx, nvme, held, (uint32_t)nr_held);
	if (info)
		*info = (struct kvmm_flush_info){ .pages = written, .left = left,
						  .ns = kvmm_now_ns() - t0 };
	kvmm_mfree(ctx, held, held_bytes);
	kvmm_mfree(ctx, q, q_bytes);
	if (b)
		stage_free(ctx, b->stage, stage_bytes);
	kvmm_mfree(ctx, b, sizeof(*b));
	return ret;
}

/**
 * kvmm_flush() - write every cached page not on the NVMe tier to its
 *	file, ancestors first, so that a restart recovers the whole cache
 * @ctx: the context; call it without kvmm_lock() held, as kvmm_sync()
 * @timeout_ms: how long it may take; 0: no limit
 * @info: out, or NULL: pages written, pages left out (out of time or
 *	room, or failed), and the time it took
 *
 * See the DOC above: the tree does not change, and the copies last on
 * the file until the tier reuses their slots; a clean shutdown is
 * kvmm_flush() then kvmm_destroy().
 *
 * Return: pages written; -EINVAL; -EOPNOTSUPP with no NVMe tier; -ENOMEM.
 */
KVMM_EXPORT int64_t kvmm_flush(struct kvmm_ctx *ctx, uint32_t timeout_ms,
			       struct kvmm_flush_info *info)
{
	int64_t ret;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	ret = kvmm_flush_held(ctx, timeout_ms, info);
	kvmm_debug_check(ctx, "flush");
	pthread_mutex_unlock(&ctx->lock);
	return ret;
}
