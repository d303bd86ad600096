// SPDX-License-Identifier: MIT
/*
 * kvmm/resize.c - growing and shrinking the device pool while it serves.
 *
 * DOC: resizing the pool
 *
 * As memory hotplug onlines and offlines sections.  The zone's descriptors
 * and free bitmap are sized once for kvmm_params.max_pages and the backend
 * reserves address space for as many; frames from nr_pages up are offline
 * (no bit, never allocated).  Nothing that stays in the pool ever moves:
 * slot indices, page-table rows and the buffer addresses engines hold stay
 * valid across a resize.
 *
 * Growing asks the backend to back the new frames (cuda maps another
 * extent behind the last) and then onlines them as free frames.
 *
 * Shrinking to N needs frames N and up empty.  Free ones are simply taken
 * off the bitmap ("isolated", so nothing allocates them meanwhile).  A
 * frame cached by an unlocked prefix node is migrated, as the kernel's
 * offline_pages() migrates movable pages: a free frame below N is taken,
 * the backend copies the page there (its copy op, the kernels' copy), and
 * the node's pfn is rewritten.  Unlocked nodes are in no sequence's
 * page-table row, so no engine reads the old frame.  A frame that is owned
 * by a sequence, cached by a locked node or held by I/O cannot move: the
 * resize is refused with -EBUSY before anything changes, and one that
 * would need more free frames below N than there are gets -ENOSPC (reclaim
 * or drop caches first).  Only then are the frames offlined and the
 * backend asked to release their memory.
 *
 * Cost: growing is O(new frames); shrinking walks the device tier of the
 * tree twice and copies what it migrates.  Resizing is an operator's or a
 * sizing loop's act, not a per-step one.
 */
#include "internal.h"

/* The next child of @parent on @tier after list position @from, or NULL. */
static struct kvmm_node *child_after(struct kvmm_node *parent, struct kvmm_list *from,
				     uint32_t tier)
{
	struct kvmm_list *pos;

	for (pos = from->next; pos != &parent->children; pos = pos->next) {
		struct kvmm_node *c = list_entry(pos, struct kvmm_node, sibling);

		if (c->tier == tier)
			return c;
	}
	return NULL;
}

/*
 * Preorder over one namespace's nodes on @tier: a child is never on a
 * faster tier than its parent, so the device nodes are a subtree at the
 * top and the walk never descends below them.  NULL after the last.
 */
static struct kvmm_node *tier_next(struct kvmm_node *node, uint32_t tier)
{
	struct kvmm_node *c = child_after(node, &node->children, tier);

	for (; !c && node->parent; node = node->parent)
		c = child_after(node->parent, &node->sibling, tier);
	return c;
}

/* Can @node's frames move?  Unlocked, not being read up, on the device. */
static bool node_movable(const struct kvmm_node *node)
{
	return !node->lock_ref && !(node->flags & KVMM_NODE_IO);
}

/*
 * Walk every device node's frames at or above @cut.  With @pfns NULL,
 * count the movable ones (return) and the unmovable ones (*@stuck).
 * Otherwise collect (@rewrite false) or rewrite (@rewrite true) them in
 * walk order, so a collect and a rewrite pair up frame for frame.
 */
static uint64_t walk_cut(struct kvmm_ctx *ctx, uint32_t cut, int32_t *pfns, bool rewrite,
			 uint64_t *stuck)
{
	struct kvmm_list *pos;
	uint64_t n = 0;

	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling), *node;

		for (node = tier_next(root, KVMM_TIER_DEVICE); node;
		     node = tier_next(node, KVMM_TIER_DEVICE)) {
			uint32_t i, nr = node->len >> ctx->page_shift;

			for (i = 0; i < nr; i++) {
				if ((uint32_t)node->pfns[i] < cut)
					continue;
				if (!node_movable(node))
					*stuck += 1;
				else if (!pfns)
					n++;
				else if (rewrite)
					node->pfns[i] = pfns[n++];
				else
					pfns[n++] = node->pfns[i];
			}
		}
	}
	return n;
}

/* Move @nr cached frames from at or above @cut (isolated) to frames below. */
static int migrate(struct kvmm_ctx *ctx, uint32_t cut, uint32_t nr)
{
	struct kvmm_zone *zone = &ctx->zone[KVMM_TIER_DEVICE];
	size_t bytes = (size_t)nr * 2 * sizeof(int32_t);
	int32_t *src, *dst;
	uint64_t stuck = 0;
	uint32_t i;
	int ret;

	if (!ctx->backend->copy)
		return -EOPNOTSUPP;
	src = kvmm_malloc(ctx, bytes);
	if (!src)
		return -ENOMEM;
	dst = src + nr;
	walk_cut(ctx, cut, src, false, &stuck);
	__kvmm_alloc_pages(ctx, zone, nr, dst);
	ret = ctx->backend->copy(ctx->backend_priv, src, dst, nr, ctx->page_size);
	if (ret) {
		kvmm_free_pages(ctx, zone, dst, nr);
		goto out;
	}
	for (i = 0; i < nr; i++)
		zone->pages[dst[i]] = zone->pages[src[i]];
	walk_cut(ctx, cut, dst, true, &stuck);
	kvmm_count(ctx, EV_MIGRATED, nr);
out:
	kvmm_mfree(ctx, src, bytes);
	return ret;
}

static int shrink(struct kvmm_ctx *ctx, uint32_t nr_pages)
{
	struct kvmm_zone *zone = &ctx->zone[KVMM_TIER_DEVICE];
	uint32_t old = zone->nr_pages, free_cut;
	uint64_t stuck = 0, movable;
	int ret;

	if (zone->wmark[KVMM_WMARK_HIGH] > nr_pages)
		return -EINVAL;
	free_cut = kvmm_zone_count_free(zone, nr_pages, old);
	movable = walk_cut(ctx, nr_pages, NULL, false, &stuck);
	if (stuck || free_cut + movable != old - nr_pages)
		return -EBUSY;
	if (zone->nr_free - free_cut < movable)
		return -ENOSPC;
	kvmm_zone_isolate(zone, nr_pages);
	if (movable) {
		ret = migrate(ctx, nr_pages, (uint32_t)movable);
		if (ret) {
			kvmm_zone_unisolate(zone, nr_pages);
			return ret;
		}
	}
	kvmm_zone_offline(zone, nr_pages);
	ret = ctx->backend->resize(ctx->backend_priv, nr_pages);
	if (ret) {
		/* The frames are free and their memory still there: take them back. */
		kvmm_zone_online(zone, old);
		return ret;
	}
	return (int)movable;
}

/**
 * kvmm_resize() - grow or shrink the device pool to @nr_pages pages
 * @ctx: the context
 * @nr_pages: 1 .. kvmm_params.max_pages (its size at creation by default)
 *
 * Pages that stay keep their frame numbers and their bytes; see "resizing
 * the pool" in the design doc for what shrinking moves.
 *
 * Return: the number of cached pages migrated below the new end (0 when
 * growing), or a negative errno with the pool as it was: -EINVAL for 0,
 * more than max_pages, or a size below the high watermark; -EBUSY when a
 * page above the new end is owned, locked or under I/O; -ENOSPC when the
 * cached pages above it do not fit in the free pages below it;
 * -EOPNOTSUPP when the backend cannot resize (or, to migrate, copy); the
 * backend's error (-ENOMEM: the device has no memory for the growth).
 */
KVMM_EXPORT int kvmm_resize(struct kvmm_ctx *ctx, uint32_t nr_pages)
{
	struct kvmm_zone *zone;
	int ret;

	if (!ctx)
		return -EINVAL;
	if (ctx->params.frames == KVMM_FRAMES_ENGINE)
		return -EOPNOTSUPP;	/* a shrink would move the engine's frames */
	zone = &ctx->zone[KVMM_TIER_DEVICE];
	if (!nr_pages || nr_pages > zone->max_pages)
		return -EINVAL;
	if (nr_pages == zone->nr_pages)
		return 0;
	if (!ctx->backend->resize)
		return -EOPNOTSUPP;
	if (nr_pages < zone->nr_pages)
		return shrink(ctx, nr_pages);
	ret = ctx->backend->resize(ctx->backend_priv, nr_pages);
	if (ret)
		return ret;
	kvmm_zone_online(zone, nr_pages);
	return 0;
}
