// SPDX-License-Identifier: MIT
/*
 * kvmm/vmscan.c - reclaim: which cached prefixes give their pages back.
 *
 * DOC: reclaim
 *
 * Only a leaf of the prefix tree with no lock can be evicted: its pages are
 * the tail of every prefix that uses them, so dropping it never leaves a
 * hole in a cached path.  Such leaves sit on the reclaim lists of the
 * context's lruvec; everything else (locked nodes, inner nodes, roots) is
 * off the lists, so reclaim never scans past a page it cannot take.
 *
 *   match / insert / unlock ------------------------------+
 *                                                          v
 *   +---------------------------------------------------------------+
 *   | prio 0 list | oldest leaf ......................... newest leaf |
 *   +---------------------------------------------------------------+
 *   | prio 1 list | ...                                              |
 *   +---------------------------------------------------------------+
 *     |
 *     +--> victim: head of the lowest non-empty priority
 *            evict: free its pages, unlink it; if its parent is now an
 *            unlocked leaf, the parent goes in at the head (oldest)
 *
 * Every list is kept sorted by access time, so the victims are exactly
 * SGLang's: the unlocked leaf with the oldest access, repeatedly, until
 * enough pages are free.  A touched leaf moves to the tail: its stamp is
 * the newest, O(1).  A parent that becomes a leaf because its last child
 * was evicted is inserted searching from the head.  Its stamp is usually
 * no newer than that child's (every walk through it to the child stamped
 * it first), and the child was the oldest leaf, so the search stops at
 * once: O(1).  Only a parent whose own prefix was matched after the child
 * was last used (a request that matched exactly the parent's prefix and
 * inserted nothing below it) lands further in; the search then passes
 * just the leaves that are older than it, which reclaim would take first
 * anyway.  Evicting n pages costs O(n) whatever the size of the tree in
 * every other case; kvmm-bench micro measures it at 1e3 to 1e6 nodes.
 *
 * Policies (struct kvmm_evict_ops) decide how the lists of a priority are
 * used:
 *  - "lru": one list per priority; the oldest leaf goes first.
 *  - "slru": segmented LRU.  Leaves reached once (hits < 2) wait on an
 *    inactive list, leaves reached again on an active one; the inactive
 *    list is emptied first.  One-off prompts are evicted before prefixes
 *    that proved to be shared, which resists scans of unique traffic.
 *
 * The lower tiers are shared by the tree's demoted pages and the keyed
 * page store's values (keyed.c), on the same lists.  With a split set
 * (KVMM_SET_KEYED_SHARE: the percent of each lower tier keyed values may
 * hold, the tree the rest) the kind over its part goes first, in the same
 * bounded walk as the namespaces' shares below.
 *
 * Shares.  Tenants share one pool; with a cache share set
 * (KVMM_SET_NS_CACHE_SHARE) a namespace that caches more of the device
 * pool than its share gives back first: device reclaim takes the oldest
 * leaves of such namespaces, in list order, before it takes anyone
 * else's.  The lists are not split per namespace, so this costs a scan
 * from the oldest end, bounded by KVMM_SHARE_SCAN leaves per pass; past
 * it (a namespace whose leaves are all young) reclaim goes on in plain
 * list order.  The namespace of a leaf is found by walking up to its
 * root, O(depth).
 */
#include "internal.h"

/* How far ahead on the reclaim list kvmm_shrink() prefetches. */
#define KVMM_SHRINK_PREFETCH	6

/* Leaves a pass looks at for namespaces over their cache share. */
#define KVMM_SHARE_SCAN		1024

static bool lru_is_head(const struct kvmm_lruvec *lv, const struct kvmm_list *pos)
{
	return (const char *)pos >= (const char *)lv->lists &&
	       (const char *)pos < (const char *)(lv->lists + KVMM_NR_PRIO);
}

static struct kvmm_node *lru_node(struct kvmm_list *pos)
{
	return list_entry(pos, struct kvmm_node, lru);
}

/*
 * Insert keeping @head sorted by atime, searching from the end @oldest
 * says, or from the end nearer @node's atime when the two ends say that
 * is the other one (a node unlocked without being touched, in the
 * engine-frames mode, goes back by an old stamp).  Either way it lands
 * after the nodes of its own stamp: the same place.
 */
static void lru_insert_sorted(struct kvmm_list *head, struct kvmm_node *node,
			      bool oldest)
{
	struct kvmm_list *pos;

	if (!list_empty(head)) {
		uint64_t lo = lru_node(head->next)->atime, hi = lru_node(head->prev)->atime;

		if (node->atime <= lo)
			oldest = true;
		else if (node->atime >= hi)
			oldest = false;
		else
			oldest = node->atime - lo < hi - node->atime;
	}
	if (oldest) {
		for (pos = head->next; pos != head; pos = pos->next)
			if (lru_node(pos)->atime > node->atime)
				break;
		__list_add(&node->lru, pos->prev, pos);
		return;
	}
	for (pos = head->prev; pos != head; pos = pos->prev)
		if (lru_node(pos)->atime <= node->atime)
			break;
	__list_add(&node->lru, pos, pos->next);
}

static void lru_del(struct kvmm_lruvec *lv, struct kvmm_node *node)
{
	(void)lv;
	list_del(&node->lru);
}

/* ---- lru ---- */

static void lru_add(struct kvmm_lruvec *lv, struct kvmm_node *node, bool oldest)
{
	lru_insert_sorted(&lv->lists[node->prio][0], node, oldest);
}

static void lru_touch(struct kvmm_lruvec *lv, struct kvmm_node *node)
{
	list_del(&node->lru);
	list_add_tail(&node->lru, &lv->lists[node->prio][0]);
}

static struct kvmm_node *lru_victim(struct kvmm_lruvec *lv)
{
	uint32_t prio;

	for (prio = 0; prio < KVMM_NR_PRIO; prio++) {
		struct kvmm_list *head = &lv->lists[prio][0];

		if (!list_empty(head))
			return lru_node(head->next);
	}
	return NULL;
}

static const struct kvmm_evict_ops lru_ops = {
	.name = "lru",
	.add = lru_add,
	.del = lru_del,
	.touch = lru_touch,
	.victim = lru_victim,
};

/* ---- slru ---- */

static struct kvmm_list *slru_list(struct kvmm_lruvec *lv, struct kvmm_node *node)
{
	return &lv->lists[node->prio][node->hits >= 2];
}

static void slru_add(struct kvmm_lruvec *lv, struct kvmm_node *node, bool oldest)
{
	lru_insert_sorted(slru_list(lv, node), node, oldest);
}

static void slru_touch(struct kvmm_lruvec *lv, struct kvmm_node *node)
{
	list_del(&node->lru);
	list_add_tail(&node->lru, slru_list(lv, node));
}

static struct kvmm_node *slru_victim(struct kvmm_lruvec *lv)
{
	uint32_t prio, l;

	for (prio = 0; prio < KVMM_NR_PRIO; prio++) {
		for (l = 0; l < KVMM_LRU_LISTS; l++) {
			struct kvmm_list *head = &lv->lists[prio][l];

			if (!list_empty(head))
				return lru_node(head->next);
		}
	}
	return NULL;
}

static const struct kvmm_evict_ops slru_ops = {
	.name = "slru",
	.add = slru_add,
	.del = lru_del,
	.touch = slru_touch,
	.victim = slru_victim,
};

static const struct kvmm_evict_ops *const evict_policies[] = {
	&lru_ops,
	&slru_ops,
};

const struct kvmm_evict_ops *kvmm_evict_ops_lookup(const char *name)
{
	size_t i;

	for (i = 0; name && i < ARRAY_SIZE(evict_policies); i++)
		if (!strcmp(evict_policies[i]->name, name))
			return evict_policies[i];
	return NULL;
}

void kvmm_lruvec_init(struct kvmm_lruvec *lv, const struct kvmm_evict_ops *ops)
{
	uint32_t prio, l;

	memset(lv, 0, sizeof(*lv));
	lv->ops = ops;
	for (prio = 0; prio < KVMM_NR_PRIO; prio++)
		for (l = 0; l < KVMM_LRU_LISTS; l++)
			list_init(&lv->lists[prio][l]);
}

/**
 * __kvmm_lru_update() - queue or unqueue @node after its state changed
 * @ctx: the context
 * @node: a node whose lock count, children, tier or priority may have
 *	changed
 * @oldest: a newly queued node is probably among the oldest (a parent
 *	whose last child on its tier just went): search from that end
 *
 * A node is queued on its tier's lists exactly while it is an unlocked
 * leaf of its tier that is not a root and no demotion is writing down.
 * It goes in by its access time.
 */
void __kvmm_lru_update(struct kvmm_ctx *ctx, struct kvmm_node *node, bool oldest)
{
	struct kvmm_lruvec *lv = kvmm_node_lruvec(ctx, node);
	bool want = !(node->flags & (KVMM_NODE_ROOT | KVMM_NODE_IO)) && !node->lock_ref &&
		    !node->tkids;
	bool queued = node->flags & KVMM_NODE_EVICTABLE;

	if (want == queued)
		return;
	if (want) {
		lv->ops->add(lv, node, oldest);
		node->flags |= KVMM_NODE_EVICTABLE;
		lv->nr_leaves++;
	} else {
		kvmm_lru_del(ctx, node);
	}
}

/**
 * kvmm_lru_del() - take @node off its tier's reclaim lists, if it is on them
 * @ctx: the context
 * @node: a node about to change tier, priority, or go
 */
void kvmm_lru_del(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_lruvec *lv = kvmm_node_lruvec(ctx, node);

	if (!(node->flags & KVMM_NODE_EVICTABLE))
		return;
	lv->ops->del(lv, node);
	node->flags &= ~KVMM_NODE_EVICTABLE;
	lv->nr_leaves--;
}

void kvmm_lru_update(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	__kvmm_lru_update(ctx, node, false);
}

void kvmm_lru_touch(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_lruvec *lv = kvmm_node_lruvec(ctx, node);

	lv->ops->touch(lv, node);
}

/*
 * Take @node, a leaf of tier sc->tier, off the tier: demote it when a
 * lower tier takes it, else drop it with whatever lower-tier nodes hang
 * below it (a demotion writing one of them down is cancelled).
 */
static void evict_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node,
		       struct kvmm_scan_control *sc)
{
	uint32_t nr = node->len >> ctx->page_shift;

	kvmm_assert(ctx, !node->lock_ref && !node->tkids);
	sc->nr_reclaimed += nr;
	if (!sc->drop && !kvmm_demote(ctx, node)) {
		sc->nr_demoted += nr;
		return;
	}
	kvmm_drop_subtree(ctx, node);
	sc->nr_evicted++;
}

/* A namespace over its share of the device pool. */
static bool ns_over_share(struct kvmm_ctx *ctx, const struct kvmm_node *node, uint64_t limit)
{
	return kvmm_node_ns(node)->cached > limit;
}

/*
 * A lower tier's kind over its part of the split (KVMM_SET_KEYED_SHARE):
 * keyed values past keyed_share percent of the tier, or the tree's pages
 * past the rest.  @limit is the keyed part.
 */
static bool kind_over_share(struct kvmm_ctx *ctx, const struct kvmm_node *node, uint64_t limit)
{
	uint32_t t = node->tier;
	uint64_t keyed = ctx->keyed_pages[t], tree = ctx->tree.cached[t] - keyed;

	if (node->flags & KVMM_NODE_KEYED)
		return keyed > limit;
	return tree > ctx->zone[t].nr_pages - limit;
}

/*
 * Reclaim, first part: the oldest leaves of whatever is over its share
 * (see "Shares" above): @over says, for each leaf in list order, whether
 * it goes first.  A leaf's eviction only ever queues its parent (never
 * the next leaf on the list), so the walk may go on from the next one.
 */
static void shrink_over_share(struct kvmm_ctx *ctx, struct kvmm_scan_control *sc,
			      bool (*over)(struct kvmm_ctx *ctx, const struct kvmm_node *node,
					   uint64_t limit), uint64_t limit)
{
	struct kvmm_lruvec *lv = &ctx->lruvec[sc->tier];
	uint32_t prio, l, scanned = 0;

	for (prio = 0; prio < KVMM_NR_PRIO; prio++) {
		for (l = 0; l < KVMM_LRU_LISTS; l++) {
			struct kvmm_list *head = &lv->lists[prio][l], *pos, *next;

			for (pos = head->next; pos != head; pos = next) {
				struct kvmm_node *node = lru_node(pos);

				next = pos->next;
				if (sc->nr_reclaimed >= sc->nr_to_reclaim ||
				    scanned++ == KVMM_SHARE_SCAN)
					return;
				if (over(ctx, node, limit))
					evict_leaf(ctx, node, sc);
			}
		}
	}
}

/**
 * kvmm_shrink() - evict leaves until @sc->nr_to_reclaim pages are freed
 * @ctx: the context
 * @sc: the request; its counters say what was done
 *
 * Stops early when nothing evictable is left.  Whole leaves go, so a pass
 * may free a little more than asked.  On the host tier, write-through
 * copies of device nodes go only when no leaf is left (kvmm_shadows_shrink()).
 */
void kvmm_shrink(struct kvmm_ctx *ctx, struct kvmm_scan_control *sc)
{
	struct kvmm_lruvec *lv = &ctx->lruvec[sc->tier];
	struct kvmm_zone *zone = &ctx->zone[sc->tier];
	uint64_t before_nodes = sc->nr_evicted, before = sc->nr_reclaimed;
	uint64_t before_demoted = sc->nr_demoted;

	if (sc->tier == KVMM_TIER_DEVICE) {
		kvmm_count(ctx, EV_RECLAIM_RUNS, 1);
		if (ctx->ns_cache_share < 100)
			shrink_over_share(ctx, sc, ns_over_share, kvmm_ns_cache_limit(ctx));
	} else if (ctx->keyed_share < 100) {
		shrink_over_share(ctx, sc, kind_over_share,
				  (uint64_t)zone->nr_pages * ctx->keyed_share / 100);
	}
	while (sc->nr_reclaimed < sc->nr_to_reclaim) {
		struct kvmm_node *victim = lv->ops->victim(lv);
		struct kvmm_list *ahead;
		int i;

		if (!victim)
			break;
		/*
		 * The next victims are most likely the next ones on the list,
		 * anywhere in memory.  Start their cache misses early so they
		 * overlap with this eviction: the node line 2N places ahead; the
		 * hash and sibling neighbours and the edge of the node N places
		 * ahead (its line was asked for N evictions ago); the first page
		 * descriptor of the one N/2 ahead.  A wrong guess costs nothing.
		 */
		ahead = &victim->lru;
		for (i = 1; i <= 2 * KVMM_SHRINK_PREFETCH; i++) {
			struct kvmm_node *next;

			ahead = ahead->next;
			if (lru_is_head(lv, ahead))
				break;
			next = lru_node(ahead);
			if (i == KVMM_SHRINK_PREFETCH / 2)	/* its edge arrived */
				__builtin_prefetch(&zone->pages[next->pfns[0]], 1);
			else if (i == KVMM_SHRINK_PREFETCH)
				kvmm_tree_prefetch(next);
		}
		if (i > 2 * KVMM_SHRINK_PREFETCH)
			__builtin_prefetch(lru_node(ahead));
		evict_leaf(ctx, victim, sc);
	}
	if (sc->tier == KVMM_TIER_HOST)
		kvmm_shadows_shrink(ctx, sc);
	if (sc->tier != KVMM_TIER_DEVICE)
		return;
	kvmm_count(ctx, EV_EVICT_NODES, sc->nr_evicted - before_nodes);
	kvmm_count(ctx, EV_EVICT_PAGES, sc->nr_reclaimed - before - sc->nr_demoted +
				       before_demoted);
}

/**
 * kvmm_reclaim() - evict at least @nr_pages cached pages if there are any
 * @ctx: the context
 * @nr_pages: pages wanted
 *
 * Return: pages freed (may exceed @nr_pages: whole leaves go), or -EINVAL.
 */
KVMM_EXPORT int64_t kvmm_reclaim(struct kvmm_ctx *ctx, uint32_t nr_pages)
{
	struct kvmm_scan_control sc = { .nr_to_reclaim = nr_pages };

	if (!ctx || !nr_pages)
		return -EINVAL;
	if (ctx->params.frames == KVMM_FRAMES_ENGINE)
		return -EOPNOTSUPP;	/* kvmm_frames_evict() hands them back */
	kvmm_migrate_reap(ctx);
	kvmm_shrink(ctx, &sc);
	kvmm_debug_check(ctx, "reclaim");
	return (int64_t)sc.nr_reclaimed;
}

/**
 * kvmm_drop_caches() - drop everything that is evictable, on every tier
 * @ctx: the context
 *
 * Locked and pinned prefixes stay.  Nothing is demoted on the way.  The
 * pages it frees on the lower tiers are not in its count:
 * kvmm_drop_caches_tiers() counts each tier's.
 *
 * Return: device pages freed, or -EINVAL.
 */
KVMM_EXPORT int64_t kvmm_drop_caches(struct kvmm_ctx *ctx)
{
	struct kvmm_scan_control sc = { .nr_to_reclaim = UINT64_MAX, .drop = true };
	uint64_t freed;
	uint32_t tier;

	if (!ctx)
		return -EINVAL;
	if (ctx->params.frames == KVMM_FRAMES_ENGINE)
		return -EOPNOTSUPP;
	kvmm_migrate_reap(ctx);
	kvmm_shrink(ctx, &sc);
	freed = sc.nr_reclaimed;
	for (tier = KVMM_TIER_HOST; tier < KVMM_NR_TIERS; tier++) {
		sc = (struct kvmm_scan_control){ .nr_to_reclaim = UINT64_MAX,
						 .drop = true, .tier = tier };
		kvmm_shrink(ctx, &sc);
	}
	kvmm_debug_check(ctx, "drop_caches");
	return (int64_t)freed;
}

/**
 * kvmm_drop_caches_tiers() - drop what is evictable on some tiers only
 * @ctx: the context
 * @tiers: KVMM_DROP_* bits: the tiers that may lose pages
 * @freed: out, or NULL: KVMM_NR_TIERS counts, the pages freed on each
 *
 * As echo N > /proc/sys/vm/drop_caches has levels: every unlocked,
 * unpinned cached node on a tier of @tiers goes, leaves first, unless
 * something below it is on a tier not in @tiers (it would be lost with
 * it, unreachable), so no tier outside @tiers loses a page.  Nothing is
 * demoted on the way.
 *
 * Return: the pages freed on all tiers; -EINVAL for no tier or an unknown
 * bit; -EOPNOTSUPP with engine-owned frames; -ENOMEM.
 */
KVMM_EXPORT int64_t kvmm_drop_caches_tiers(struct kvmm_ctx *ctx, uint32_t tiers, uint64_t *freed)
{
	uint64_t out[KVMM_NR_TIERS] = { 0 }, total = 0, nr, i;
	size_t bytes;
	struct kvmm_node **q;

	if (!ctx || !tiers || (tiers & ~KVMM_DROP_ALL))
		return -EINVAL;
	if (ctx->params.frames == KVMM_FRAMES_ENGINE)
		return -EOPNOTSUPP;
	kvmm_migrate_reap(ctx);
	bytes = kvmm_tree_bfs_bytes(ctx);
	q = kvmm_malloc(ctx, bytes);
	if (!q)
		return -ENOMEM;
	nr = kvmm_tree_bfs(ctx, q);
	for (i = nr; i--; ) {	/* children before their parents */
		struct kvmm_node *n = q[i];
		uint32_t pages = n->len >> ctx->page_shift;

		if (!(tiers & (1u << n->tier)) || !(n->flags & KVMM_NODE_EVICTABLE) ||
		    !kvmm_node_is_leaf(n))
			continue;
		out[n->tier] += pages;
		total += pages;
		kvmm_drop_leaf(ctx, n);
	}
	kvmm_mfree(ctx, q, bytes);
	if (freed)
		memcpy(freed, out, sizeof(out));
	kvmm_debug_check(ctx, "drop_caches");
	return (int64_t)total;
}

/* Move the queued nodes of one priority onto @out, oldest first. */
static void lruvec_drain_prio(struct kvmm_lruvec *lv, uint32_t prio,
			      struct kvmm_list *out)
{
	for (;;) {
		struct kvmm_node *best = NULL;
		uint32_t l;

		for (l = 0; l < KVMM_LRU_LISTS; l++) {
			struct kvmm_list *head = &lv->lists[prio][l];
			struct kvmm_node *first;

			if (list_empty(head))
				continue;
			first = lru_node(head->next);
			if (!best || first->atime < best->atime)
				best = first;
		}
		if (!best)
			return;
		list_del(&best->lru);
		list_add_tail(&best->lru, out);
	}
}

/* Re-queue @lv's leaves under @ops, in access order. */
static void lruvec_set_ops(struct kvmm_lruvec *lv, const struct kvmm_evict_ops *ops)
{
	uint32_t prio;

	for (prio = 0; prio < KVMM_NR_PRIO; prio++) {
		struct kvmm_list tmp;

		list_init(&tmp);
		lruvec_drain_prio(lv, prio, &tmp);
		lv->ops = ops;
		while (!list_empty(&tmp)) {
			struct kvmm_node *node = lru_node(tmp.next);

			list_del(&node->lru);
			ops->add(lv, node, false);
		}
	}
	lv->ops = ops;
}

/**
 * kvmm_set_evict_policy() - switch the eviction policy
 * @ctx: the context
 * @name: "lru" or "slru"
 *
 * Queued leaves are re-queued under the new policy in access order; O(n)
 * in the number of queued leaves.
 *
 * Return: 0, or -EINVAL for an unknown name.
 */
KVMM_EXPORT int kvmm_set_evict_policy(struct kvmm_ctx *ctx, const char *name)
{
	const struct kvmm_evict_ops *ops = kvmm_evict_ops_lookup(name);
	uint32_t tier;

	if (!ctx || !ops)
		return -EINVAL;
	for (tier = 0; tier < KVMM_NR_TIERS; tier++)
		lruvec_set_ops(&ctx->lruvec[tier], ops);
	kvmm_debug_check(ctx, "set_evict_policy");
	return 0;
}

KVMM_EXPORT const char *kvmm_evict_policy(const struct kvmm_ctx *ctx)
{
	return ctx->lruvec[KVMM_TIER_DEVICE].ops->name;
}
