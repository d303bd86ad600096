// SPDX-License-Identifier: MIT
/*
 * kvmm/prefix.c - prefixes as the operator sees them: pin, unpin,
 * priority, lookup, and the per-namespace pin and cache limits.
 *
 * DOC: prefixes
 *
 * These are policy over the prefix tree, not part of it: a prefix is
 * "cached" when it is cached in full on the device tier (a path partly
 * demoted is clipped, kvmm_path_clip()), a pin is a lock the operator
 * holds instead of a sequence (counted in the namespace, against a limit
 * a bound ring may not pass), and a priority files the nodes of a path
 * on other reclaim lists (vmscan.c).  The tree gives them walk, split,
 * lock and unlock (prefix_tree.c); the limits are read by the dispatcher
 * and by reclaim.
 */
#include "internal.h"

/*
 * Resolve a whole cached prefix to the node it ends on, splitting if it
 * ends inside an edge.  Only the device tier counts: a prefix partly
 * demoted is not cached in full until it is promoted.  -EINVAL for a bad
 * argument, -ENOENT when the prefix is not cached in full.
 */
static int prefix_resolve(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			  uint32_t n, bool split, struct kvmm_path *path)
{
	struct kvmm_node *root;

	path->node = NULL;
	path->split = 0;
	path->matched = 0;
	if (!ctx || !tokens || !n || n > ctx->params.max_seq_len)
		return -EINVAL;
	n = kvmm_align_down(ctx, n);
	if (!n)
		return -EINVAL;
	root = kvmm_tree_root(ctx, ns, false);
	if (!root)
		return -ENOENT;
	kvmm_tree_walk(ctx, root, tokens, n, path);
	kvmm_path_clip(path);
	if (path->matched < n)
		return -ENOENT;
	return split ? kvmm_tree_split(ctx, path) : 0;
}

/*
 * Pin refs count the pins at or below a node; its frames carry the flag.
 * The walk ends at the root, whose namespace counts the pages too.
 */
static void pin_path(struct kvmm_ctx *ctx, struct kvmm_node *node, int delta)
{
	uint64_t pages = 0;

	for (; !(node->flags & KVMM_NODE_ROOT); node = node->parent) {
		uint32_t nr = node->len >> ctx->page_shift;

		if (delta > 0 && node->pin_ref++ == 0) {
			pages += nr;
			kvmm_set_page_flags(kvmm_node_zone(ctx, node), node->pfns, nr,
					    KVMM_PG_PINNED, 0);
		} else if (delta < 0 && --node->pin_ref == 0) {
			pages += nr;
			kvmm_set_page_flags(kvmm_node_zone(ctx, node), node->pfns, nr,
					    0, KVMM_PG_PINNED);
		}
	}
	if (delta > 0) {
		ctx->tree.pinned += pages;
		kvmm_root_ns(node)->pinned += pages;
	} else {
		ctx->tree.pinned -= pages;
		kvmm_root_ns(node)->pinned -= pages;
	}
}

/*
 * Pages a pin on @path would newly pin: those of the unpinned nodes on
 * it.  pin_ref only grows towards the root, so the walk stops at the
 * first pinned node.  A pin ending inside an edge pins only its head.
 */
static uint64_t pin_cost(const struct kvmm_ctx *ctx, const struct kvmm_path *path)
{
	const struct kvmm_node *node = path->node;
	uint64_t pages = 0;

	if (node->pin_ref)
		return 0;
	pages = (path->split ? path->split : node->len) >> ctx->page_shift;
	for (node = node->parent; !(node->flags & KVMM_NODE_ROOT) && !node->pin_ref;
	     node = node->parent)
		pages += node->len >> ctx->page_shift;
	return pages;
}

/**
 * kvmm_ns_pin_limit() - pages a ring bound to a namespace may pin in it
 * @ctx: the context
 *
 * Return: the limit set with KVMM_SET_NS_PIN_PAGES, or half the device
 * pool (as it is now) by default.
 */
uint64_t kvmm_ns_pin_limit(const struct kvmm_ctx *ctx)
{
	if (ctx->ns_pin_pages == KVMM_NS_PIN_AUTO)
		return ctx->zone[KVMM_TIER_DEVICE].nr_pages / 2;
	return ctx->ns_pin_pages;
}

/**
 * kvmm_ns_cache_limit() - device pages one namespace may cache before
 *	reclaim takes its cache first
 * @ctx: the context
 */
uint64_t kvmm_ns_cache_limit(const struct kvmm_ctx *ctx)
{
	return (uint64_t)ctx->zone[KVMM_TIER_DEVICE].nr_pages * ctx->ns_cache_share / 100;
}

/**
 * kvmm_set_ns_pin_pages() - set the pin limit of bound namespaces
 * @ctx: the context
 * @pages: the limit in pages, or KVMM_NS_PIN_AUTO for half the pool
 *
 * Pins already taken stay; only new ones are refused.
 *
 * Return: 0, or -EINVAL for a value above 2^32 - 1 (other than AUTO).
 */
int kvmm_set_ns_pin_pages(struct kvmm_ctx *ctx, uint64_t pages)
{
	if (pages != KVMM_NS_PIN_AUTO && pages > UINT32_MAX) {
		kvmm_report(ctx, "ns_pin_pages: %llu is above 2^32 - 1",
			    (unsigned long long)pages);
		return -EINVAL;
	}
	ctx->ns_pin_pages = pages;
	return 0;
}

/**
 * kvmm_set_ns_cache_share() - set the share of the pool a namespace may cache
 * @ctx: the context
 * @pct: percent of the device pool, 1 .. 100; 100 turns the share off
 *
 * Return: 0, or -EINVAL outside 1 .. 100.
 */
int kvmm_set_ns_cache_share(struct kvmm_ctx *ctx, uint64_t pct)
{
	return kvmm_set_percent(ctx, "ns_cache_share", pct, &ctx->ns_cache_share);
}

/**
 * __kvmm_prefix_pin() - pin a cached prefix, and say which node holds the pin
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix
 * @n: its length; a trailing partial page is ignored
 * @keep: a pin of nobody's (the direct API, KVMM_PIN_KEEP) rather than
 *	one a ring owns and drops when it goes
 * @limit: pages the namespace may have pinned after this pin, or
 *	KVMM_NO_LIMIT
 * @nodep: out, the node the pin ends on
 *
 * Return: the pinned length, or -errno as kvmm_prefix_pin(); -EDQUOT
 * when the pin would take the namespace's pinned pages past @limit (a pin
 * on pages already pinned adds none, and is not refused).
 */
int __kvmm_prefix_pin(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		      uint32_t n, bool keep, uint64_t limit, struct kvmm_node **nodep)
{
	struct kvmm_path path;
	uint64_t cost;
	int ret = prefix_resolve(ctx, ns, tokens, n, false, &path);

	if (ret)
		return ret;
	if (!path.split && path.node->pins == UINT8_MAX)
		return -EBUSY;
	/* a pin that pins no new page (nested, or under one) takes nothing */
	if (limit != KVMM_NO_LIMIT) {
		cost = pin_cost(ctx, &path);
		if (cost && kvmm_node_ns(path.node)->pinned + cost > limit)
			return -EDQUOT;
	}
	ret = kvmm_tree_split(ctx, &path);
	if (ret)
		return ret;
	kvmm_tree_touch(ctx, path.node);
	kvmm_tree_lock(ctx, path.node);
	path.node->pins++;
	path.node->keep_pins += keep;
	pin_path(ctx, path.node, 1);
	*nodep = path.node;
	return (int)path.matched;
}

/**
 * kvmm_prefix_pin() - keep a cached prefix from ever being evicted
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix
 * @n: its length; a trailing partial page is ignored
 *
 * Pins nest: a prefix pinned twice needs two unpins.
 *
 * Return: the pinned length in tokens; -EINVAL for a bad argument or a
 * prefix shorter than a page; -ENOENT when the prefix is not cached in
 * full; -EBUSY when the node has 255 pins already; -ENOMEM.
 */
KVMM_EXPORT int kvmm_prefix_pin(struct kvmm_ctx *ctx, uint32_t ns,
				const uint32_t *tokens, uint32_t n)
{
	struct kvmm_node *node = NULL;
	int ret = __kvmm_prefix_pin(ctx, ns, tokens, n, true, KVMM_NO_LIMIT, &node);

	if (ret >= 0)
		kvmm_debug_check(ctx, "pin");
	return ret;
}

/**
 * __kvmm_prefix_pinned() - the node a pin on this prefix ends on
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix, as pinned
 * @n: its length, as pinned
 * @nodep: out, the node
 *
 * Return: the prefix length; -EINVAL for a bad argument or a prefix with
 * no pin ending exactly there.
 */
int __kvmm_prefix_pinned(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			 uint32_t n, struct kvmm_node **nodep)
{
	struct kvmm_path path;
	int ret = prefix_resolve(ctx, ns, tokens, n, false, &path);

	if (ret == -ENOENT || (!ret && (path.split || !path.node->pins)))
		return -EINVAL;
	if (ret)
		return ret;
	*nodep = path.node;
	return (int)path.matched;
}

/**
 * kvmm_node_unpin() - drop one pin ending at @node
 * @ctx: the context
 * @node: a node with a pin of the kind @keep says
 * @keep: drop a pin of nobody's rather than a ring's
 */
void kvmm_node_unpin(struct kvmm_ctx *ctx, struct kvmm_node *node, bool keep)
{
	kvmm_assert(ctx, node->pins > 0 && (!keep || node->keep_pins > 0));
	node->pins--;
	node->keep_pins -= keep;
	pin_path(ctx, node, -1);
	kvmm_tree_unlock(ctx, node);
}

/**
 * kvmm_prefix_unpin() - drop a pin taken by kvmm_prefix_pin()
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix, as pinned
 * @n: its length, as pinned
 *
 * Pins a ring owns are dropped by that ring (or when it goes), not here.
 *
 * Return: the unpinned length; -EINVAL for a bad argument or a prefix that
 * is not pinned.
 */
KVMM_EXPORT int kvmm_prefix_unpin(struct kvmm_ctx *ctx, uint32_t ns,
				  const uint32_t *tokens, uint32_t n)
{
	struct kvmm_node *node = NULL;
	int ret = __kvmm_prefix_pinned(ctx, ns, tokens, n, &node);

	if (ret < 0)
		return ret;
	if (!node->keep_pins)
		return -EINVAL;
	kvmm_node_unpin(ctx, node, true);
	kvmm_debug_check(ctx, "unpin");
	return ret;
}

/**
 * kvmm_prefix_set_prio() - set the eviction priority of a cached prefix
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix
 * @n: its length; a trailing partial page is ignored
 * @prio: 0 .. KVMM_NR_PRIO - 1; lower priorities are evicted first, and
 *	recency only orders victims within a priority
 *
 * Every node of the path gets @prio; nodes added below later get 0.
 *
 * Return: the prefix length; -EINVAL, -ENOENT or -ENOMEM as for pin.
 */
KVMM_EXPORT int kvmm_prefix_set_prio(struct kvmm_ctx *ctx, uint32_t ns,
				     const uint32_t *tokens, uint32_t n,
				     uint32_t prio)
{
	struct kvmm_path path;
	struct kvmm_node *node;
	int ret;

	if (prio >= KVMM_NR_PRIO)
		return -EINVAL;
	ret = prefix_resolve(ctx, ns, tokens, n, true, &path);
	if (ret)
		return ret;
	for (node = path.node; !(node->flags & KVMM_NODE_ROOT); node = node->parent) {
		/* off and back on: the lists are per priority */
		kvmm_lru_del(ctx, node);
		node->prio = (uint8_t)prio;
		kvmm_lru_update(ctx, node);
	}
	kvmm_debug_check(ctx, "set_prio");
	return (int)path.matched;
}

/**
 * kvmm_prefix_lookup() - how much of a prefix is cached, without using it
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix
 * @n: its length
 *
 * Takes no reference and changes no access time.
 *
 * Return: cached tokens (page aligned), or -EINVAL.
 */
KVMM_EXPORT int kvmm_prefix_lookup(struct kvmm_ctx *ctx, uint32_t ns,
				   const uint32_t *tokens, uint32_t n)
{
	struct kvmm_path path;
	int ret = prefix_resolve(ctx, ns, tokens, n, false, &path);

	if (ret == -ENOENT)
		return (int)path.matched;
	return ret ? ret : (int)path.matched;
}

/**
 * kvmm_prefix_tiers() - how much of a prefix is cached on each tier
 * @ctx: the context
 * @ns: namespace
 * @tokens: the prefix
 * @n: its length
 * @hits: out, tokens per tier (may be NULL)
 *
 * Takes no reference and changes no access time.  The device part is what
 * kvmm_seq_match() would map; the rest is what kvmm_seq_promote() would
 * bring back.
 *
 * Return: cached tokens on all tiers together, or -EINVAL.
 */
KVMM_EXPORT int kvmm_prefix_tiers(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				  uint32_t n, struct kvmm_tier_hits *hits)
{
	uint32_t t[KVMM_NR_TIERS] = { 0 };
	struct kvmm_node *root;
	struct kvmm_path path;

	if (!ctx || !tokens || !n || n > ctx->params.max_seq_len)
		return -EINVAL;
	root = kvmm_tree_root(ctx, ns, false);
	path.matched = 0;
	if (root) {
		kvmm_tree_walk(ctx, root, tokens, n, &path);
		kvmm_path_tiers(root, &path, t);
	}
	if (hits) {
		memset(hits, 0, sizeof(*hits));
		memcpy(hits->tokens, t, sizeof(t));
	}
	return (int)path.matched;
}
