// SPDX-License-Identifier: MIT
/*
 * kvmm/check.c - kvmm_check(): verify every invariant of the design
 * (DESIGN.md section 6) by walking all of a context's state.
 *
 * DOC: what is checked
 *
 *  - Every page of every tier is in exactly one state.  A free page is on the free
 *    bitmap with no reference; a cached page is held by exactly one tree
 *    node (or one node's write-through copy); an owned page by exactly
 *    one open sequence's row; an IO page by exactly one migrate job in
 *    flight (a promotion's on the device, a demotion's on the tier it
 *    writes to).  The counts add up to the pool size, so a page that no
 *    owner claims (a leak) or that two claim (handed out twice) is found.
 *  - A write-through copy belongs to a device node, under that policy;
 *    its frames are CACHED on the host tier and held by no one else, and
 *    exactly the nodes with a copy are on the copy list.
 *  - A migrate job's nodes are marked, locked and on a lower tier than
 *    the device, not yet on its destination; a promotion's sequence
 *    names it, and holds nothing of its own meanwhile; the host pages
 *    that demotions are writing down are counted right.
 *  - The free bitmap's summary levels agree with its pages.
 *  - A node is never on a faster tier than its parent, counts its
 *    children on its own tier right, and is pinned only on the device
 *    and locked only there or by a promotion.
 *  - Per tier, evictable + protected == cached; lock_ref of a node is the sum of its
 *    children's plus the sequences and pins that end on it, so a locked
 *    node's ancestors are locked and no count is negative or lost.
 *  - pin_ref likewise; pinned pages match, and exactly their frames carry
 *    KVMM_PG_PINNED.
 *  - Per namespace, the pinned pages and the device pages cached that its
 *    struct kvmm_ns counts are those of the nodes under its root (the
 *    pin and cache limits are enforced against these counters).
 *  - Every reclaim list is sorted by access time and holds exactly the
 *    unlocked leaves of its tier.
 *  - Each open sequence's row starts with exactly the frames of the path
 *    it locks, continues with its own frames and is -1 after them.
 *  - Every node can be found through the child hash.
 *  - A keyed value is a leaf under a keyed space's root, on a lower tier,
 *    locked only by the keyed gets that hold it; the frames keyed puts
 *    hold are in state IO; every space counts its values' pages right.
 *
 *  - While events are on, the page identities a node keeps (events.c)
 *    are its prefix's, hashed again from the root; none are kept while
 *    they are off.
 *
 * The walk is O(pages + nodes + table), and O(the tree's tokens) more
 * while events are on, and allocates one byte per page (and a hash
 * state per level of the tree) with calloc (not through the context's
 * allocator, so that fault injection never makes the checker itself
 * fail).  It runs after every
 * operation in DEBUG=3 builds and in the tests.
 */
#include <stdlib.h>

#include "internal.h"

#define CHECK(cond, ...)					\
	do {							\
		if (unlikely(!(cond))) {			\
			kvmm_report(ctx, "check: " __VA_ARGS__);	\
			ret = -EUCLEAN;				\
			goto out;				\
		}						\
	} while (0)

enum { MARK_NONE, MARK_TREE, MARK_SEQ, MARK_IO };

struct check_sums {
	uint64_t cached[KVMM_NR_TIERS], protected[KVMM_NR_TIERS];
	uint64_t evictable[KVMM_NR_TIERS], leaves[KVMM_NR_TIERS];
	uint64_t pinned, nodes, direct, io_nodes, prefetched;
	uint64_t shadowed, shadow_nodes;
	uint64_t keyed[KVMM_NR_TIERS], keyed_values;
};

static int check_zone(const struct kvmm_ctx *ctx, uint32_t tier)
{
	const struct kvmm_zone *zone = &ctx->zone[tier];
	const struct kvmm_hbitmap *hb = &zone->free;
	uint64_t nfree = 0, w;
	uint32_t pfn, l;
	int ret = 0;

	for (pfn = 0; pfn < zone->nr_pages; pfn++) {
		const struct kvmm_page *page = &zone->pages[pfn];
		bool bit = kvmm_zone_test_free(zone, pfn);

		CHECK(page->tier == zone->tier, "pfn %u tier %u in zone of tier %u",
		      pfn, page->tier, zone->tier);
		CHECK(page->state < KVMM_NR_PAGE_STATES, "pfn %u bad state %u",
		      pfn, page->state);
		CHECK(bit == (page->state == KVMM_PAGE_FREE),
		      "pfn %u state %u but free bit %d", pfn, page->state, bit);
		CHECK((page->refcount == 0) == bit, "pfn %u refcount %u, free bit %d",
		      pfn, page->refcount, bit);
		CHECK(!(page->flags & ~KVMM_PG_FLAGS) &&
		      (page->state == KVMM_PAGE_CACHED || !page->flags),
		      "pfn %u state %u has flags %#x", pfn, page->state, page->flags);
		nfree += bit;
	}
	CHECK(nfree == zone->nr_free, "zone counts %u free, bitmap has %llu",
	      zone->nr_free, (unsigned long long)nfree);
	for (pfn = zone->nr_pages; pfn < zone->max_pages; pfn++)
		CHECK(zone->pages[pfn].state == KVMM_PAGE_FREE && !zone->pages[pfn].refcount &&
		      !zone->pages[pfn].flags, "offline pfn %u is in state %u",
		      pfn, zone->pages[pfn].state);
	for (w = zone->nr_pages; w < (uint64_t)hb->nwords[0] * 64; w++)
		CHECK(!(hb->level[0][w >> 6] >> (w & 63) & 1), "bit %llu past the pool set",
		      (unsigned long long)w);
	for (l = 1; l < hb->nr_levels; l++) {
		for (w = 0; w < hb->nwords[l - 1]; w++) {
			bool sum = hb->level[l][w >> 6] >> (w & 63) & 1;

			CHECK(sum == (hb->level[l - 1][w] != 0),
			      "bitmap level %u bit %llu disagrees with the level below",
			      l, (unsigned long long)w);
		}
	}
out:
	return ret;
}

/* A write-through copy: a device node's, of its length, in CACHED host frames. */
static int check_shadow(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
			uint8_t *mark)
{
	const struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	const int32_t *copy = kvmm_node_shadow(ctx, node);
	uint32_t nr = node->len >> ctx->page_shift, i;
	int ret = 0;

	CHECK(ctx->params.write_policy == KVMM_WRITE_THROUGH && mark &&
	      node->tier == KVMM_TIER_DEVICE,
	      "node %p on tier %u has a copy (policy %u)", (void *)node, node->tier,
	      ctx->params.write_policy);
	for (i = 0; i < nr; i++) {
		int32_t pfn = copy[i];

		CHECK(pfn >= 0 && (uint32_t)pfn < host->nr_pages,
		      "node %p copy maps host pfn %d", (void *)node, pfn);
		CHECK(host->pages[pfn].state == KVMM_PAGE_CACHED && !host->pages[pfn].flags,
		      "node %p copy: host pfn %d in state %u flags %#x", (void *)node, pfn,
		      host->pages[pfn].state, host->pages[pfn].flags);
		CHECK(mark[pfn] == MARK_NONE, "host pfn %d held twice (copy of %p)", pfn,
		      (void *)node);
		mark[pfn] = MARK_TREE;
	}
out:
	return ret;
}

static int check_node(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
		      uint8_t **marks, struct check_sums *sums)
{
	const struct kvmm_zone *zone = &ctx->zone[node->tier];
	uint8_t *mark = marks[node->tier];
	const struct kvmm_node *child;
	struct kvmm_list *pos;
	uint64_t child_locks = 0, child_pins = 0, tkids = 0;
	uint32_t nr = node->len >> ctx->page_shift, i;
	bool queued;
	int ret = 0;

	list_for_each(pos, &node->children) {
		child = list_entry(pos, struct kvmm_node, sibling);
		CHECK(child->parent == node, "child %p of %p names parent %p",
		      (void *)child, (void *)node, (void *)child->parent);
		CHECK(child->tier >= node->tier, "child %p on tier %u below %p on tier %u",
		      (void *)child, child->tier, (void *)node, node->tier);
		child_locks += child->lock_ref;
		child_pins += child->pin_ref;
		tkids += child->tier == node->tier;
	}
	if (node->flags & KVMM_NODE_ROOT) {
		CHECK(!node->len && !node->lock_ref && !node->pins && !node->parent,
		      "root of ns %u has len %u lock_ref %u", node->ns, node->len,
		      node->lock_ref);
		return 0;
	}
	if (node->flags & KVMM_NODE_KEYED)
		sums->keyed[node->tier] += nr;
	CHECK(node->len && !(node->len & (ctx->page_size - 1)),
	      "node %p edge of %u tokens", (void *)node, node->len);
	CHECK(kvmm_tree_lookup_child(ctx, node->parent, node->tokens) == node,
	      "node %p not found through the hash", (void *)node);
	CHECK(node->lock_ref >= child_locks + node->pins,
	      "node %p lock_ref %u < children %llu + pins %u", (void *)node,
	      node->lock_ref, (unsigned long long)child_locks, node->pins);
	CHECK(node->keep_pins <= node->pins &&
	      (uint64_t)(node->pins - node->keep_pins) == kvmm_owners_pins_on(ctx, node),
	      "node %p has %u pins, %u kept, rings hold %llu", (void *)node, node->pins,
	      node->keep_pins, (unsigned long long)kvmm_owners_pins_on(ctx, node));
	CHECK(node->pin_ref == child_pins + node->pins, "node %p pin_ref %u != %llu + %u",
	      (void *)node, node->pin_ref, (unsigned long long)child_pins, node->pins);
	CHECK(node->prio < KVMM_NR_PRIO, "node %p prio %u", (void *)node, node->prio);
	CHECK(node->tier < KVMM_NR_TIERS && zone->nr_pages, "node %p on absent tier %u",
	      (void *)node, node->tier);
	CHECK(node->tkids == tkids, "node %p counts %u children on its tier, has %llu",
	      (void *)node, node->tkids, (unsigned long long)tkids);
	CHECK(node->tier == KVMM_TIER_DEVICE ||
	      (!node->pin_ref &&
	       (!node->lock_ref || (node->flags & (KVMM_NODE_IO | KVMM_NODE_KEYED)))),
	      "node %p on tier %u is locked (%u) or pinned (%u)", (void *)node,
	      node->tier, node->lock_ref, node->pin_ref);
	CHECK(!!(node->flags & KVMM_NODE_KEYED) == !!(node->parent->flags & KVMM_NODE_KEYED),
	      "node %p is keyed %d under a root keyed %d", (void *)node,
	      !!(node->flags & KVMM_NODE_KEYED), !!(node->parent->flags & KVMM_NODE_KEYED));
	CHECK(!(node->flags & KVMM_NODE_KEYED) ||
	      (node->tier != KVMM_TIER_DEVICE && kvmm_node_is_leaf(node) && !node->pins &&
	       node->len >= KVMM_KEY_WORDS),
	      "keyed value %p on tier %u, %u tokens, not a leaf or pinned", (void *)node,
	      node->tier, node->len);
	sums->io_nodes += !!(node->flags & KVMM_NODE_IO);
	sums->prefetched += !!(node->flags & KVMM_NODE_PREFETCHED);
	CHECK(!(node->flags & KVMM_NODE_PREFETCHED) || node->tier == KVMM_TIER_DEVICE ||
	      ((node->flags & KVMM_NODE_KEYED) && node->tier == KVMM_TIER_HOST),
	      "node %p prefetched, on tier %u", (void *)node, node->tier);
	CHECK(!(node->flags & KVMM_NODE_KREAD) ||
	      ((node->flags & KVMM_NODE_KEYED) && node->lock_ref &&
	       !ctx->store[node->tier]->page),
	      "node %p read up by a keyed prefetch, on tier %u, lock_ref %u", (void *)node,
	      node->tier, node->lock_ref);
	queued = node->flags & KVMM_NODE_EVICTABLE;
	CHECK(queued == (!tkids && !node->lock_ref && !(node->flags & KVMM_NODE_IO)),
	      "node %p queued %d, %llu children on its tier, lock_ref %u, flags %#x",
	      (void *)node, queued, (unsigned long long)tkids, node->lock_ref, node->flags);
	for (i = 0; i < nr; i++) {
		int32_t pfn = node->pfns[i];

		CHECK(pfn >= 0 && (uint32_t)pfn < zone->nr_pages,
		      "node %p maps pfn %d of tier %u", (void *)node, pfn, node->tier);
		CHECK(zone->pages[pfn].state == KVMM_PAGE_CACHED,
		      "node %p maps pfn %d in state %u", (void *)node, pfn,
		      zone->pages[pfn].state);
		CHECK(mark[pfn] == MARK_NONE, "pfn %d of tier %u held twice", pfn,
		      node->tier);
		CHECK(!(zone->pages[pfn].flags & KVMM_PG_PINNED) == !node->pin_ref,
		      "pfn %d pinned flag %u, node pin_ref %u", pfn,
		      zone->pages[pfn].flags, node->pin_ref);
		mark[pfn] = MARK_TREE;
	}
	if (node->flags & KVMM_NODE_SHADOW) {
		ret = check_shadow(ctx, node, marks[KVMM_TIER_HOST]);
		if (ret)
			goto out;
		sums->shadowed += nr;
		sums->shadow_nodes++;
	}
	sums->nodes++;
	sums->cached[node->tier] += nr;
	sums->leaves[node->tier] += queued;
	sums->direct += node->lock_ref - child_locks - node->pins;
	if (node->lock_ref)
		sums->protected[node->tier] += nr;
	else
		sums->evictable[node->tier] += nr;
	if (node->pin_ref)
		sums->pinned += nr;
out:
	return ret;
}

static int check_tree(const struct kvmm_ctx *ctx, uint8_t **marks,
		      struct check_sums *sums)
{
	struct kvmm_list *pos;
	uint32_t t;
	int ret = 0;

	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling);
		const struct kvmm_ns *ns = kvmm_root_ns(root);
		uint64_t pinned = sums->pinned;
		uint64_t cached = sums->cached[KVMM_TIER_DEVICE];
		uint64_t keyed[KVMM_NR_TIERS];
		struct kvmm_node *node;

		CHECK(root->flags & KVMM_NODE_ROOT, "non-root %p on the root list",
		      (void *)root);
		memcpy(keyed, sums->keyed, sizeof(keyed));
		for (node = root; node; node = kvmm_tree_next(root, node)) {
			ret = check_node(ctx, node, marks, sums);
			if (ret)
				return ret;
			sums->keyed_values += node != root && (node->flags & KVMM_NODE_KEYED);
		}
		for (t = 0; t < KVMM_NR_TIERS; t++)
			CHECK(ns->keyed[t] == sums->keyed[t] - keyed[t],
			      "keyed space of ns %u: %llu pages on tier %u, counted %llu",
			      root->ns, (unsigned long long)(sums->keyed[t] - keyed[t]), t,
			      (unsigned long long)ns->keyed[t]);
		pinned = sums->pinned - pinned;
		cached = sums->cached[KVMM_TIER_DEVICE] - cached;
		CHECK(ns->pinned == pinned, "namespace %u: pinned %llu, counted %llu",
		      root->ns, (unsigned long long)pinned, (unsigned long long)ns->pinned);
		CHECK(ns->cached == cached, "namespace %u: %llu device pages cached, counted %llu",
		      root->ns, (unsigned long long)cached, (unsigned long long)ns->cached);
	}
	CHECK(sums->nodes == ctx->tree.nr_nodes, "%llu nodes counted as %llu",
	      (unsigned long long)sums->nodes, (unsigned long long)ctx->tree.nr_nodes);
	CHECK(sums->keyed_values == ctx->keyed_values, "%llu keyed values counted as %llu",
	      (unsigned long long)sums->keyed_values, (unsigned long long)ctx->keyed_values);
	for (t = 0; t < KVMM_NR_TIERS; t++)
		CHECK(sums->keyed[t] == ctx->keyed_pages[t],
		      "tier %u: keyed values hold %llu pages, counted %llu", t,
		      (unsigned long long)sums->keyed[t], (unsigned long long)ctx->keyed_pages[t]);
	for (t = 0; t < KVMM_NR_TIERS; t++) {
		CHECK(sums->cached[t] == ctx->tree.cached[t],
		      "tier %u: %llu cached pages counted as %llu", t,
		      (unsigned long long)sums->cached[t],
		      (unsigned long long)ctx->tree.cached[t]);
		CHECK(sums->protected[t] == ctx->tree.protected[t],
		      "tier %u: protected %llu, counted %llu", t,
		      (unsigned long long)sums->protected[t],
		      (unsigned long long)ctx->tree.protected[t]);
		CHECK(sums->evictable[t] == ctx->lruvec[t].evictable,
		      "tier %u: evictable %llu, counted %llu", t,
		      (unsigned long long)sums->evictable[t],
		      (unsigned long long)ctx->lruvec[t].evictable);
		CHECK(ctx->lruvec[t].evictable + ctx->tree.protected[t] == ctx->tree.cached[t],
		      "tier %u: evictable + protected != cached", t);
	}
	CHECK(sums->pinned == ctx->tree.pinned, "pinned %llu, counted %llu",
	      (unsigned long long)sums->pinned, (unsigned long long)ctx->tree.pinned);
	CHECK(sums->shadowed == ctx->tree.shadowed, "copies hold %llu pages, counted %llu",
	      (unsigned long long)sums->shadowed, (unsigned long long)ctx->tree.shadowed);
	list_for_each(pos, &ctx->tree.shadows) {
		const struct kvmm_node *node = list_entry(pos, struct kvmm_node, shadow);

		CHECK(node->flags & KVMM_NODE_SHADOW, "node %p on the copy list has none",
		      (void *)node);
		CHECK(sums->shadow_nodes--, "more nodes on the copy list than have copies");
	}
	CHECK(!sums->shadow_nodes, "%llu nodes with copies are not on the copy list",
	      (unsigned long long)sums->shadow_nodes);
out:
	return ret;
}

static int check_lruvec(const struct kvmm_ctx *ctx, const struct check_sums *sums,
			uint32_t tier)
{
	const struct kvmm_lruvec *lv = &ctx->lruvec[tier];
	uint64_t queued = 0;
	uint32_t prio, l;
	int ret = 0;

	for (prio = 0; prio < KVMM_NR_PRIO; prio++) {
		for (l = 0; l < KVMM_LRU_LISTS; l++) {
			const struct kvmm_list *head = &lv->lists[prio][l];
			const struct kvmm_list *pos;
			uint64_t last = 0;

			for (pos = head->next; pos != head; pos = pos->next) {
				const struct kvmm_node *node =
					list_entry(pos, struct kvmm_node, lru);

				CHECK(node->flags & KVMM_NODE_EVICTABLE,
				      "unqueued node %p on a reclaim list", (void *)node);
				CHECK(node->prio == prio, "node %p of prio %u on list %u",
				      (void *)node, node->prio, prio);
				CHECK(node->tier == tier, "node %p of tier %u on tier %u's list",
				      (void *)node, node->tier, tier);
				CHECK(node->atime >= last, "reclaim list %u/%u out of order",
				      prio, l);
				last = node->atime;
				queued++;
			}
		}
	}
	CHECK(queued == lv->nr_leaves && queued == sums->leaves[tier],
	      "tier %u: %llu queued leaves, %llu counted, %llu found", tier,
	      (unsigned long long)queued, (unsigned long long)lv->nr_leaves,
	      (unsigned long long)sums->leaves[tier]);
out:
	return ret;
}

static int check_seq(const struct kvmm_ctx *ctx, uint32_t id, int32_t *path,
		     uint8_t *mark, uint64_t *locked)
{
	const struct kvmm_seq *s = &ctx->seqs[id];
	const int32_t *row = kvmm_row(ctx, id);
	const struct kvmm_node *n;
	uint32_t depth = 0, i, shared, mapped;
	int ret = 0;

	if (!s->open) {
		for (i = 0; i < ctx->row_pages; i++)
			CHECK(row[i] == -1, "closed seq %u maps pfn %d at %u", id, row[i], i);
		return 0;
	}
	CHECK(s->root && (s->root->flags & KVMM_NODE_ROOT) && s->root->ns == s->ns,
	      "seq %u has a bad root", id);
	for (n = s->node; n && n != s->root; n = n->parent)
		depth += n->len;
	CHECK(n == s->root, "seq %u locks a node outside its namespace", id);
	CHECK(depth == s->cached, "seq %u cached %u but its path holds %u", id,
	      s->cached, depth);
	CHECK(s->cached <= s->len && s->len <= ctx->params.max_seq_len,
	      "seq %u cached %u len %u", id, s->cached, s->len);
	CHECK(!s->promo || s->len == s->cached,
	      "seq %u holds tokens of its own while it promotes", id);
	if (s->node != s->root) {
		CHECK(s->node->lock_ref, "seq %u holds unlocked node %p", id,
		      (void *)s->node);
		(*locked)++;
	}
	shared = s->cached >> ctx->page_shift;
	mapped = kvmm_pages_of(ctx, s->len);
	kvmm_tree_fill(ctx, s->root, s->node, path);
	for (i = 0; i < shared; i++)
		CHECK(row[i] == path[i], "seq %u page %u maps %d, its path %d", id, i,
		      row[i], path[i]);
	for (; i < mapped; i++) {
		int32_t pfn = row[i];

		CHECK(pfn >= 0 && (uint32_t)pfn < ctx->zone[KVMM_TIER_DEVICE].nr_pages,
		      "seq %u page %u maps pfn %d", id, i, pfn);
		CHECK(ctx->zone[KVMM_TIER_DEVICE].pages[pfn].state == KVMM_PAGE_OWNED,
		      "seq %u page %u: pfn %d in state %u", id, i, pfn,
		      ctx->zone[KVMM_TIER_DEVICE].pages[pfn].state);
		CHECK(mark[pfn] == MARK_NONE, "pfn %d held twice (seq %u)", pfn, id);
		mark[pfn] = MARK_SEQ;
	}
	for (; i < ctx->row_pages; i++)
		CHECK(row[i] == -1, "seq %u maps pfn %d past its length", id, row[i]);
out:
	return ret;
}

/**
 * kvmm_check() - verify every invariant of a context
 * @ctx: the context
 *
 * The first violation found is reported through the log hook.
 *
 * Return: 0 when all hold; -EUCLEAN on a violation; -EINVAL for a NULL
 * context; -ENOMEM when the checker's scratch memory cannot be had.
 */
KVMM_EXPORT int kvmm_check(const struct kvmm_ctx *ctx)
{
	struct check_sums sums = { 0 };
	uint64_t locked = 0, nfree_seqs = 0, io[KVMM_NR_TIERS], job_locks, job_nodes, copies;
	const char *why = "";
	const struct kvmm_node *bad = NULL;
	uint8_t *marks[KVMM_NR_TIERS] = { NULL };
	int32_t *path;
	uint32_t i, t;
	int ret = 0;

	if (!ctx)
		return -EINVAL;
	path = calloc(ctx->row_pages, sizeof(*path));
	if (!path)
		return -ENOMEM;
	for (t = 0; t < KVMM_NR_TIERS; t++) {
		if (!ctx->zone[t].nr_pages)
			continue;
		ret = check_zone(ctx, t);
		if (ret)
			goto out;
		marks[t] = calloc(ctx->zone[t].nr_pages, 1);
		if (!marks[t]) {
			ret = -ENOMEM;
			goto out;
		}
	}
	ret = check_tree(ctx, marks, &sums);
	if (ret)
		goto out;
	ret = kvmm_events_ids_check(ctx, &why, &bad);
	if (ret == -ENOMEM)
		goto out;
	CHECK(!ret, "node %p %s", (void *)bad, why);
	for (t = 0; t < KVMM_NR_TIERS; t++) {
		ret = check_lruvec(ctx, &sums, t);
		if (ret)
			goto out;
	}
	for (i = 0; i < ctx->max_seqs; i++) {
		ret = check_seq(ctx, i, path, marks[KVMM_TIER_DEVICE], &locked);
		if (ret)
			goto out;
	}
	CHECK(!kvmm_migrations_check(ctx, marks, MARK_IO, io, &job_locks, &job_nodes, &why),
	      "%s", why);
	CHECK(!kvmm_keyed_check(ctx, marks, MARK_IO, io, &job_locks, &why), "%s", why);
	CHECK(!kvmm_remote_check(ctx, marks, MARK_IO, io, &job_locks, &why), "%s", why);
	CHECK(!kvmm_events_check(ctx, &why), "%s", why);
	for (t = 0; t < KVMM_NR_TIERS; t++)
		CHECK(io[t] == ctx->io_pages[t], "migrations hold %llu frames of tier %u, "
		      "counted %llu", (unsigned long long)io[t], t,
		      (unsigned long long)ctx->io_pages[t]);
	CHECK(job_nodes == sums.io_nodes, "migrations arm %llu nodes, %llu are marked",
	      (unsigned long long)job_nodes, (unsigned long long)sums.io_nodes);
	CHECK(sums.prefetched == ctx->prefetched, "%llu nodes marked prefetched, counted %llu",
	      (unsigned long long)sums.prefetched, (unsigned long long)ctx->prefetched);
	CHECK(locked + job_locks + ctx->frames_locks == sums.direct,
	      "%llu sequences and %llu migrations (and %llu engine references) hold locks, "
	      "nodes count %llu",
	      (unsigned long long)locked, (unsigned long long)job_locks,
	      (unsigned long long)ctx->frames_locks, (unsigned long long)sums.direct);
	for (t = 0; t < KVMM_NR_TIERS; t++) {
		const struct kvmm_zone *zone = &ctx->zone[t];
		uint64_t owned = 0;

		for (i = 0; i < zone->nr_pages; i++) {
			uint8_t state = zone->pages[i].state;

			CHECK(state != KVMM_PAGE_OWNED || marks[t][i] == MARK_SEQ,
			      "pfn %u of tier %u owned by no sequence (leaked)", i, t);
			CHECK(state != KVMM_PAGE_CACHED || marks[t][i] == MARK_TREE,
			      "pfn %u of tier %u cached by no node (leaked)", i, t);
			CHECK(state != KVMM_PAGE_IO || marks[t][i] == MARK_IO,
			      "pfn %u of tier %u held by no migration (leaked)", i, t);
			owned += marks[t][i] == MARK_SEQ;
		}
		copies = t == KVMM_TIER_HOST ? sums.shadowed : 0;
		CHECK(owned + sums.cached[t] + copies + io[t] + zone->nr_free == zone->nr_pages,
		      "tier %u: owned %llu + cached %llu + copies %llu + io %llu + free %u "
		      "!= %u pages", t, (unsigned long long)owned,
		      (unsigned long long)sums.cached[t], (unsigned long long)copies,
		      (unsigned long long)io[t], zone->nr_free, zone->nr_pages);
	}
	for (i = ctx->free_seq; i != UINT32_MAX; i = ctx->seqs[i].next_free) {
		CHECK(i < ctx->max_seqs && !ctx->seqs[i].open, "free row list holds %u", i);
		CHECK(++nfree_seqs <= ctx->max_seqs, "free row list loops");
	}
	CHECK(nfree_seqs + ctx->nr_open == ctx->max_seqs,
	      "%llu free rows + %u open != %u", (unsigned long long)nfree_seqs,
	      ctx->nr_open, ctx->max_seqs);
out:
	free(path);
	for (t = 0; t < KVMM_NR_TIERS; t++)
		free(marks[t]);
	return ret;
}
