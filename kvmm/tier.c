// SPDX-License-Identifier: MIT
/*
 * kvmm/tier.c - the lower tiers: demotion, promotion and their bookkeeping.
 *
 * DOC: tiers
 *
 * Every node's pages sit on one tier (node->tier), and a node is never on a
 * faster tier than its parent: a cached path is some nodes on the device,
 * then some on the host, then some on NVMe.  Each tier is a zone with its
 * own allocator and its own lruvec.  A tier's reclaim lists hold its
 * "tier leaves": unlocked nodes on the tier with no child on the same tier
 * (node->tkids == 0), so the coldest tail of every path on a tier can go.
 *
 *   device reclaim:  victim leaf --demote--> host (room made by host reclaim)
 *                                  \--drop--> when no lower tier can take it
 *   host reclaim:    victim leaf --drop--> (or demote, once a tier is below)
 *
 * Demotion keeps the node and moves its pages: the backend gathers the
 * device pages into the lower store's pages, the store seals them (a
 * checksum per page), the device pages are freed.  Promotion is the
 * reverse, after the store verified the pages; a page that fails is a miss:
 * its node and everything below it is dropped, never served.
 *
 * Where a sequence commits tokens whose prefix node was demoted, the node
 * adopts the freshly computed device pages and its lower copy is freed
 * (kvmm_tree_insert), so no work is done twice.
 *
 * The core never reads KV bytes: it hands page addresses from the store to
 * the backend's gather and scatter.
 */
#include <time.h>

#include "internal.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/**
 * kvmm_tier_below() - the next tier below @tier that has pages
 * @ctx: the context
 * @tier: a tier
 * @lower: out, that tier
 *
 * Return: whether there is one.
 */
bool kvmm_tier_below(const struct kvmm_ctx *ctx, uint32_t tier, uint32_t *lower)
{
	uint32_t t;

	for (t = tier + 1; t < KVMM_NR_TIERS; t++) {
		if (ctx->store[t]) {
			*lower = t;
			return true;
		}
	}
	return false;
}

/*
 * Scratch for moving one path between tiers: page addresses, frames and
 * nodes, a row's worth each (a path has no more nodes than pages).
 */
static size_t scratch_bytes(const struct kvmm_ctx *ctx)
{
	return (size_t)ctx->row_pages * (sizeof(void *) + sizeof(int32_t) +
					 sizeof(struct kvmm_node *));
}

/* The node nearest the device, for a host tier with no node configured. */
static int tier_numa_node(const struct kvmm_ctx *ctx)
{
	if (ctx->params.host_node >= 0 || !ctx->backend->numa_node)
		return ctx->params.host_node;
	return ctx->backend->numa_node(ctx->backend_priv);
}

/**
 * kvmm_tiers_init() - set up the lower tiers the parameters ask for
 * @ctx: the context, with its backend up
 *
 * Return: 0; -EOPNOTSUPP when the backend cannot copy pages out; -ENOMEM;
 * the store's error.  Nothing is held on failure.
 */
int kvmm_tiers_init(struct kvmm_ctx *ctx)
{
	const struct kvmm_params *p = &ctx->params;
	const struct kvmm_store_ops *ops;
	struct kvmm_store_cfg cfg;
	int ret;

	if (!p->host_pages)
		return 0;
	ops = kvmm_store_lookup(KVMM_TIER_HOST);
	if (!ops || !ctx->backend->gather || !ctx->backend->scatter)
		return -EOPNOTSUPP;
	ctx->staging = kvmm_malloc(ctx, scratch_bytes(ctx));
	if (!ctx->staging)
		return -ENOMEM;
	ctx->tier_nodes = (struct kvmm_node **)(ctx->staging + ctx->row_pages);
	ctx->tier_pfns = (int32_t *)(ctx->tier_nodes + ctx->row_pages);
	ret = kvmm_zone_init(ctx, &ctx->zone[KVMM_TIER_HOST], p->host_pages,
			     KVMM_TIER_HOST);
	if (ret)
		goto out_staging;
	cfg = (struct kvmm_store_cfg){
		.page_bytes = kvmm_page_bytes(&p->model, p->page_size),
		.nr_pages = p->host_pages,
		.tier = KVMM_TIER_HOST,
		.numa_node = tier_numa_node(ctx),
		.arg = p->host_arg,
	};
	ret = ops->init(&cfg, &ctx->store_priv[KVMM_TIER_HOST]);
	if (ret)
		goto out_zone;
	ctx->store[KVMM_TIER_HOST] = ops;
	return 0;

out_zone:
	kvmm_zone_exit(ctx, &ctx->zone[KVMM_TIER_HOST]);
out_staging:
	kvmm_mfree(ctx, ctx->staging, scratch_bytes(ctx));
	ctx->staging = NULL;
	return ret;
}

void kvmm_tiers_exit(struct kvmm_ctx *ctx)
{
	uint32_t t;

	for (t = KVMM_TIER_HOST; t < KVMM_NR_TIERS; t++) {
		if (!ctx->store[t])
			continue;
		ctx->store[t]->exit(ctx->store_priv[t]);
		kvmm_zone_exit(ctx, &ctx->zone[t]);
		ctx->store[t] = NULL;
	}
	if (ctx->staging)
		kvmm_mfree(ctx, ctx->staging, scratch_bytes(ctx));
	ctx->staging = NULL;
}

/*
 * Move @node's accounting, list membership and tier-leaf counts from its
 * tier to @tier, with @pfns (already CACHED on @tier) as its new frames.
 * The caller frees the old frames first.
 */
static void node_set_tier(struct kvmm_ctx *ctx, struct kvmm_node *node,
			  uint32_t tier, const int32_t *pfns)
{
	struct kvmm_node *parent = node->parent, *child;
	uint32_t old = node->tier, nr = node->len >> ctx->page_shift;
	bool proper = !(parent->flags & KVMM_NODE_ROOT);
	struct kvmm_list *pos;

	kvmm_lru_del(ctx, node);
	ctx->tree.cached[old] -= nr;
	ctx->tree.cached[tier] += nr;
	if (node->lock_ref) {
		ctx->tree.protected[old] -= nr;
		ctx->tree.protected[tier] += nr;
	} else {
		ctx->lruvec[old].evictable -= nr;
		ctx->lruvec[tier].evictable += nr;
	}
	if (proper && parent->tier == old)
		parent->tkids--;
	if (proper && parent->tier == tier)
		parent->tkids++;
	node->tkids = 0;
	list_for_each(pos, &node->children) {
		child = list_entry(pos, struct kvmm_node, sibling);
		node->tkids += child->tier == tier;
	}
	node->tier = (uint8_t)tier;
	memcpy(node->pfns, pfns, (size_t)nr * sizeof(*pfns));
	kvmm_lru_update(ctx, node);
	if (proper)
		__kvmm_lru_update(ctx, parent, true);
}

/* Point ctx->staging at the store pages of @pfns on @tier. */
static void **tier_addrs(struct kvmm_ctx *ctx, uint32_t tier, const int32_t *pfns,
			 uint32_t nr)
{
	uint32_t i;

	for (i = 0; i < nr; i++)
		ctx->staging[i] = ctx->store[tier]->page(ctx->store_priv[tier],
							 (uint32_t)pfns[i]);
	return ctx->staging;
}

static uint64_t tier_bytes(const struct kvmm_ctx *ctx, uint32_t nr)
{
	return nr * kvmm_page_bytes(&ctx->params.model, ctx->page_size);
}

/*
 * The copy of @node's pages into @pfns on tier @to, begun at @t0, is done:
 * count it against lower tier @lt (a demotion when @to is @lt), give the
 * tree the new frames and free the old ones.
 */
static void node_moved(struct kvmm_ctx *ctx, struct kvmm_node *node, uint32_t to,
		       const int32_t *pfns, uint32_t lt, uint64_t t0)
{
	uint32_t nr = node->len >> ctx->page_shift;
	bool in = to == lt;

	kvmm_tier_count(ctx, lt, in ? TEV_NS_IN : TEV_NS_OUT, now_ns() - t0);
	kvmm_tier_count(ctx, lt, in ? TEV_BYTES_IN : TEV_BYTES_OUT, tier_bytes(ctx, nr));
	kvmm_tier_count(ctx, lt, in ? TEV_DEMOTE_PAGES : TEV_PROMOTE_PAGES, nr);
	kvmm_pages_to_tree(&ctx->zone[to], pfns, nr);
	kvmm_free_pages(ctx, kvmm_node_zone(ctx, node), node->pfns, nr);
	node_set_tier(ctx, node, to, pfns);
}

/**
 * kvmm_demote() - move a device leaf's pages down a tier
 * @ctx: the context
 * @node: an unlocked leaf of the device tier
 *
 * The lower tier makes room by its own reclaim.  On failure nothing moved.
 *
 * Return: 0; -ENOSPC when the lower tier cannot make room; the backend's
 * error from the copy.
 */
int kvmm_demote(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	uint32_t nr = node->len >> ctx->page_shift, lower;
	struct kvmm_zone *zone;
	int32_t *pfns;
	uint64_t t0;
	int ret;

	if (node->tier != KVMM_TIER_DEVICE || !kvmm_tier_below(ctx, node->tier, &lower))
		return -ENOSPC;
	zone = &ctx->zone[lower];
	pfns = ctx->tier_pfns;
	if (zone->nr_free < nr) {
		struct kvmm_scan_control sc = { .nr_to_reclaim = nr - zone->nr_free,
						.tier = lower };

		kvmm_shrink(ctx, &sc);
		if (zone->nr_free < nr)
			return -ENOSPC;
	}
	__kvmm_alloc_pages(ctx, zone, nr, pfns);
	t0 = now_ns();
	ret = ctx->backend->gather(ctx->backend_priv, node->pfns, nr,
				   tier_addrs(ctx, lower, pfns, nr));
	if (ret) {
		kvmm_free_pages(ctx, zone, pfns, nr);
		kvmm_tier_count(ctx, lower, TEV_IO_ERRORS, 1);
		return ret;
	}
	ctx->store[lower]->seal(ctx->store_priv[lower], pfns, nr);
	node_moved(ctx, node, lower, pfns, lower, t0);
	return 0;
}

/**
 * kvmm_drop_leaf() - drop a leaf on any tier: free its pages, unlink it
 * @ctx: the context
 * @node: an unlocked node with no children
 *
 * Its parent is queued if it became a leaf of its tier.
 */
void kvmm_drop_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_node *parent = node->parent;
	uint32_t nr = node->len >> ctx->page_shift;

	kvmm_assert(ctx, !node->lock_ref && kvmm_node_is_leaf(node));
	kvmm_lru_del(ctx, node);
	kvmm_free_pages(ctx, kvmm_node_zone(ctx, node), node->pfns, nr);
	kvmm_node_lruvec(ctx, node)->evictable -= nr;
	ctx->tree.cached[node->tier] -= nr;
	if (node->tier != KVMM_TIER_DEVICE)
		kvmm_tier_count(ctx, node->tier, TEV_EVICT_PAGES, nr);
	if (!(parent->flags & KVMM_NODE_ROOT) && parent->tier == node->tier)
		parent->tkids--;
	kvmm_tree_delete_leaf(ctx, node);
	if (!(parent->flags & KVMM_NODE_ROOT))
		__kvmm_lru_update(ctx, parent, true);
}

/**
 * kvmm_drop_subtree() - drop @node and everything below it, leaves first
 * @ctx: the context
 * @node: an unlocked node whose descendants are unlocked (lower-tier
 *	nodes always are)
 */
void kvmm_drop_subtree(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	while (!kvmm_node_is_leaf(node)) {
		struct kvmm_node *n = list_entry(node->children.next,
						 struct kvmm_node, sibling);

		while (!kvmm_node_is_leaf(n))
			n = list_entry(n->children.next, struct kvmm_node, sibling);
		kvmm_drop_leaf(ctx, n);
	}
	kvmm_drop_leaf(ctx, node);
}

/**
 * kvmm_path_tiers() - tokens of a walked path on each tier
 * @root: where the walk started
 * @path: the walk
 * @tokens: out, KVMM_NR_TIERS counts
 */
void kvmm_path_tiers(const struct kvmm_node *root, const struct kvmm_path *path,
		     uint32_t *tokens)
{
	const struct kvmm_node *n = path->node;

	memset(tokens, 0, KVMM_NR_TIERS * sizeof(*tokens));
	if (n != root && path->split) {
		tokens[n->tier] += path->split;
		n = n->parent;
	}
	for (; n != root; n = n->parent)
		tokens[n->tier] += n->len;
}

/**
 * kvmm_path_clip() - cut a walked path back to its device part
 * @path: the walk; updated to end on the deepest device node (or the root)
 *
 * Lower-tier nodes only follow device ones, so what is cut is a tail.
 */
void kvmm_path_clip(struct kvmm_path *path)
{
	struct kvmm_node *n = path->node;

	while (!(n->flags & KVMM_NODE_ROOT) && n->tier != KVMM_TIER_DEVICE) {
		path->matched -= path->split ? path->split : n->len;
		path->split = 0;
		n = n->parent;
	}
	path->node = n;
}

/*
 * Bring one lower-tier node up to the device into the frames reserved for
 * it.  Return: 0; -EBADMSG when a page fails verification; the backend's
 * error.  On failure nothing moved and the frames are given back.
 */
static int promote_node(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	uint32_t nr = node->len >> ctx->page_shift, tier = node->tier;
	struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	int32_t *pfns = ctx->tier_pfns;
	uint64_t t0 = now_ns();
	int ret = 0;

	__kvmm_alloc_pages(ctx, dev, nr, pfns);
	if (ctx->store[tier]->verify(ctx->store_priv[tier], node->pfns, nr) < nr) {
		kvmm_tier_count(ctx, tier, TEV_CSUM_FAIL, 1);
		ret = -EBADMSG;
	} else {
		ret = ctx->backend->scatter(ctx->backend_priv, pfns, nr,
					    tier_addrs(ctx, tier, node->pfns, nr));
		if (ret)
			kvmm_tier_count(ctx, tier, TEV_IO_ERRORS, 1);
	}
	if (ret) {
		kvmm_free_pages(ctx, dev, pfns, nr);
		return ret;
	}
	node_moved(ctx, node, KVMM_TIER_DEVICE, pfns, tier, t0);
	return 0;
}

/**
 * kvmm_promote_path() - bring the lower-tier part of a path to the device
 * @ctx: the context
 * @from: the node the path starts below (a root or a device node)
 * @path: a walk from @from that ends on a node boundary; on return it
 *	ends on the deepest node now on the device (see kvmm_path_clip())
 *
 * The path is locked while its pages move, so reclaim making room on the
 * device cannot take it.  A node whose pages fail verification or whose
 * copy fails is dropped with everything below it: a miss, never wrong KV.
 *
 * Return: 0, also when only part of the path came up; -ENOSPC, with
 * nothing moved, when the device cannot make room for the whole path.
 */
int kvmm_promote_path(struct kvmm_ctx *ctx, struct kvmm_node *from,
		      struct kvmm_path *path)
{
	struct kvmm_node **nodes = ctx->tier_nodes, *n, *failed = NULL;
	uint32_t nr_nodes = 0, pages = 0, i;
	int ret;

	for (n = path->node; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		nodes[nr_nodes++] = n;
		pages += n->len >> ctx->page_shift;
	}
	if (!nr_nodes)
		return 0;
	kvmm_tree_lock(ctx, path->node);
	ret = kvmm_zone_reserve(ctx, &ctx->zone[KVMM_TIER_DEVICE], pages, 0);
	for (i = nr_nodes; !ret && i-- > 0; ) {
		if (promote_node(ctx, nodes[i]))
			failed = nodes[i];
		if (failed)
			break;
	}
	kvmm_tree_unlock(ctx, path->node);
	if (failed) {
		for (n = path->node; n != failed; n = n->parent)
			path->matched -= n->len;
		path->matched -= failed->len;
		path->node = failed->parent;
		path->split = 0;
		kvmm_drop_subtree(ctx, failed);
	} else if (!ret) {
		kvmm_tree_touch(ctx, path->node);
	}
	kvmm_path_clip(path);
	return ret;
}

/**
 * kvmm_tier_adopt() - give demoted nodes on a path freshly computed frames
 * @ctx: the context
 * @from: where the path starts (exclusive)
 * @end: where it ends, on a node boundary
 * @pfns: the caller's OWNED device frames for the whole path
 * @nr: pages of the path
 *
 * A sequence that recomputed tokens whose node was demoted has their KV on
 * the device already: the node takes those frames (now CACHED) and frees
 * its lower copy, which is cheaper than a promotion and can never fail.
 *
 * Return: the leading pages of the path that were on the device all
 * along, which the caller frees as duplicates.
 */
uint32_t kvmm_tier_adopt(struct kvmm_ctx *ctx, struct kvmm_node *from,
			 struct kvmm_node *end, int32_t *pfns, uint32_t nr)
{
	struct kvmm_node *n;
	uint32_t at = nr;

	for (n = end; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		uint32_t len = n->len >> ctx->page_shift, tier = n->tier;

		at -= len;
		kvmm_pages_to_tree(&ctx->zone[KVMM_TIER_DEVICE], pfns + at, len);
		kvmm_free_pages(ctx, &ctx->zone[tier], n->pfns, len);
		kvmm_tier_count(ctx, tier, TEV_EVICT_PAGES, len);
		node_set_tier(ctx, n, KVMM_TIER_DEVICE, pfns + at);
	}
	return at;
}
