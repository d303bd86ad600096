// SPDX-License-Identifier: MIT
/*
 * kvmm/frames.c - the prefix tree over frames an engine allocates itself.
 *
 * DOC: engine-owned frames (kvmm_params.frames = KVMM_FRAMES_ENGINE)
 *
 * An engine with its own slot allocator (SGLang's TokenToKVPoolAllocator)
 * wants kvmm's tree and reclaim without kvmm's allocator: it hands the
 * tree frames it allocated when it inserts, and gets them back when the
 * tree evicts them.  This is a mode of the one tree, with the page states
 * it already has: a FREE frame is the engine's (kvmm never allocates one
 * in this mode: sequences, tiers and promotion are refused), a CACHED one
 * the tree's.  An insert takes the frames of the part the tree did not
 * have off the free bitmap (each must be FREE: a frame the tree already
 * holds refuses the whole insert); an eviction drops whole LRU leaves and
 * writes their frames out as it frees them.  kvmm_check() holds the same
 * invariants as in the default mode: every frame FREE or CACHED by exactly
 * one node, the counts adding up, evictable + protected == cached.
 *
 * Nodes are named to the engine by a handle (struct kvmm_fnode): the node
 * and its id.  Nodes live in slabs that stay mapped for the context's
 * life and a freed node's id is cleared, so a handle to a node that was
 * evicted or merged away is recognised and refused (-ESTALE), never
 * followed.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

static bool engine_mode(const struct kvmm_ctx *ctx)
{
	return ctx && ctx->params.frames == KVMM_FRAMES_ENGINE;
}

/* The node a handle names into @*out (NULL for a root's); -ESTALE for one gone. */
static int fnode_get(const struct kvmm_fnode *h, struct kvmm_node **out)
{
	struct kvmm_node *node = h->node;

	*out = NULL;
	if (!node)
		return 0;
	if (!h->id || node->id != h->id || (node->flags & KVMM_NODE_ROOT))
		return -ESTALE;
	*out = node;
	return 0;
}

static void fnode_set(struct kvmm_fnode *h, struct kvmm_node *node)
{
	if (!h)
		return;
	if (node->flags & KVMM_NODE_ROOT)
		*h = (struct kvmm_fnode){ 0 };
	else
		*h = (struct kvmm_fnode){ .node = node, .id = node->id };
}

/*
 * Stamp a walk that ended on @end as used.  A walk that split an edge
 * stamps the edge's remainder @rest as well, first (older than the path):
 * SGLang's tree stamps the node it splits before it splits it, and this
 * mode keeps its eviction order.
 */
static void touch_split(struct kvmm_ctx *ctx, struct kvmm_node *rest, struct kvmm_node *end)
{
	if (rest)
		kvmm_tree_touch(ctx, rest);
	kvmm_tree_touch(ctx, end);
}

/**
 * kvmm_frames_match() - the longest cached prefix of @tokens, and its frames
 * @ctx: a context in engine-frames mode
 * @ns: the namespace
 * @tokens: token ids
 * @n: how many; a trailing partial page is not looked at
 * @frames: out, a frame per matched page (room for @n / page_size)
 * @last: out (may be NULL): the node the match ends on, split there if it
 *	ended inside an edge; the root's handle ({NULL, 0}) when nothing
 *	matched
 *
 * The matched path is stamped as accessed.  Nothing is locked.
 *
 * Return: tokens matched (a multiple of the page size), -EINVAL, or
 * -ENOMEM (a split that could not allocate: nothing changed).
 */
KVMM_EXPORT int kvmm_frames_match(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				  uint32_t n, int32_t *frames, struct kvmm_fnode *last)
{
	struct kvmm_node *root, *rest;
	struct kvmm_path path;
	int ret;

	if (!engine_mode(ctx) || (n && (!tokens || !frames)) || n > ctx->params.max_seq_len)
		return -EINVAL;
	root = kvmm_tree_root(ctx, ns, true);
	if (!root)
		return -ENOMEM;
	kvmm_tree_walk(ctx, root, tokens, n, &path);
	rest = path.split ? path.node : NULL;
	ret = kvmm_tree_split(ctx, &path);
	if (ret)
		return ret;
	if (path.matched) {
		touch_split(ctx, rest, path.node);
		kvmm_tree_fill(ctx, root, path.node, frames);
	}
	fnode_set(last, path.node);
	kvmm_count(ctx, EV_MATCH_CALLS, 1);
	kvmm_count(ctx, EV_MATCH_TOKENS, n);
	kvmm_count(ctx, EV_HIT_TOKENS, path.matched);
	kvmm_debug_check(ctx, "frames_match");
	return (int)path.matched;
}

/*
 * The insert itself, along the walk kvmm_frames_insert() made, without
 * kvmm_tree_insert()'s second walk of the whole key (a few microseconds on
 * a long prompt at page size 1, three times a request under SGLang): a
 * walk that ended on a node boundary needs no split, and the new part is
 * a leaf under that node (kvmm_tree_add_leaf()); one that ended inside an
 * edge with nothing new is a split.  A new part below a split goes
 * through kvmm_tree_insert(), which splits only once it holds the leaf,
 * so that nothing changes on -ENOMEM.
 *
 * This mode has no tiers, so no node is being read up (KVMM_NODE_IO)
 * and the insert may take the whole key.  The key is the caller's own
 * memory (the API is the only way in; the ring's inserts copy theirs).
 *
 * Return: @n, or -errno with nothing changed.
 */
static int frames_link(struct kvmm_ctx *ctx, struct kvmm_node *root, const uint32_t *tokens,
		       uint32_t n, const int32_t *frames, struct kvmm_path *path,
		       struct kvmm_insert *ins)
{
	uint32_t rest = n - path->matched;
	struct kvmm_node *leaf;
	int ret;

	if (path->split) {
		if (rest)
			return kvmm_tree_insert(ctx, root, tokens, n, frames, ins);
		ret = kvmm_tree_split(ctx, path);
		if (ret)
			return ret;
	}
	ins->match = ins->end = path->node;
	ins->matched = path->matched;
	if (!rest)
		return (int)n;
	if (kvmm_tree_lookup_child(ctx, path->node, tokens + path->matched))
		return -EINVAL;		/* the key changed since the walk */
	leaf = kvmm_tree_add_leaf(ctx, path->node, tokens + path->matched, rest,
				  frames + (path->matched >> ctx->page_shift), KVMM_TIER_DEVICE);
	if (!leaf)
		return -ENOMEM;
	kvmm_count(ctx, EV_INSERT_TOKENS, rest);
	ins->end = leaf;
	return (int)n;
}

/*
 * Hits, in this mode, are counted as SGLang's tree counts them (its slru
 * policy's): an insert counts one on each node of the key's path that
 * ends past @inserted_len, the tokens the request had inserted before
 * (so that a request counts each node once), and a match counts none.
 * @end is the key's node, @len tokens deep.
 */
static void count_hits(struct kvmm_ctx *ctx, struct kvmm_node *end, uint32_t len,
		       uint32_t inserted_len)
{
	struct kvmm_node *x;

	for (x = end; !(x->flags & KVMM_NODE_ROOT) && len > inserted_len; x = x->parent) {
		if (x->hits < UINT16_MAX)
			x->hits++;
		len -= x->len;
	}
}

/*
 * The insert of kvmm_frames_insert() and _extend(): the key's first @base
 * tokens are the path from @root down to @start (a node boundary) and are
 * not read; the walk starts at @start.  Stamps the path and queues its end
 * for reclaim; @*endp is where the key ends.
 *
 * Return: tokens the tree had (from the key's start), or -errno with
 * nothing changed.
 */
static int frames_insert(struct kvmm_ctx *ctx, struct kvmm_node *root, struct kvmm_node *start,
			 uint32_t base, const uint32_t *tokens, uint32_t n, const int32_t *frames,
			 uint32_t inserted_len, struct kvmm_node **endp)
{
	struct kvmm_zone *zone = &ctx->zone[KVMM_TIER_DEVICE];
	struct kvmm_node *rest;
	struct kvmm_insert ins;
	struct kvmm_path path;
	uint32_t first, nr, i;
	int ret;

	kvmm_tree_walk(ctx, start, tokens + base, n - base, &path);
	rest = path.split ? path.node : NULL;	/* insert splits it; it stays the tail */
	first = (base + path.matched) >> ctx->page_shift;
	nr = (n >> ctx->page_shift) - first;
	for (i = 0; i < nr; i++)
		if (frames[first + i] < 0 || (uint32_t)frames[first + i] >= zone->nr_pages)
			return -EINVAL;
	/* the new part's frames leave the engine: FREE to OWNED, then the leaf's */
	i = kvmm_alloc_pfns(zone, frames + first, nr);
	if (i < nr) {
		kvmm_free_pages(ctx, zone, frames + first, i);
		return -EBUSY;
	}
	*endp = start;
	if (n == base && start == root)
		return 0;
	ret = frames_link(ctx, start, tokens + base, n - base, frames + (base >> ctx->page_shift),
			  &path, &ins);
	if (ret < 0 || (uint32_t)ret != n - base) {
		kvmm_free_pages(ctx, zone, frames + first, nr);
		return ret < 0 ? ret : -EBUSY;
	}
	count_hits(ctx, ins.end, n, inserted_len);
	touch_split(ctx, rest, ins.end);
	kvmm_lru_update(ctx, ins.end);
	*endp = ins.end;
	return (int)(base + ins.matched);
}

static bool frames_args_ok(const struct kvmm_ctx *ctx, const uint32_t *tokens, uint32_t n,
			   const int32_t *frames)
{
	return engine_mode(ctx) && (!n || (tokens && frames)) && kvmm_align_down(ctx, n) == n &&
	       n <= ctx->params.max_seq_len;
}

/**
 * kvmm_frames_insert() - cache @tokens, whose KV is in the engine's @frames
 * @ctx: a context in engine-frames mode
 * @ns: the namespace
 * @tokens: token ids
 * @n: how many, a multiple of the page size
 * @frames: the engine's frame of each page of @tokens
 * @last: out (may be NULL): the node the key ends on
 *
 * The part of the key the tree had already keeps the tree's frames: the
 * engine's frames for it are duplicates, the engine's to free.  The rest
 * become the tree's (CACHED), each of which must be a frame of the pool
 * the tree does not hold, named once.  The path is stamped as accessed,
 * each of its nodes counts a hit, and its end is queued for eviction.
 *
 * Return: tokens the tree had already (from the start of the key);
 * -EINVAL for bad arguments (an unaligned @n, a frame outside the pool);
 * -EBUSY when a new frame is one the tree holds or is named twice;
 * -ENOMEM.  Nothing changed on error.
 */
KVMM_EXPORT int kvmm_frames_insert(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				   uint32_t n, const int32_t *frames, struct kvmm_fnode *last)
{
	struct kvmm_node *root, *end;
	int had;

	if (!frames_args_ok(ctx, tokens, n, frames))
		return -EINVAL;
	root = kvmm_tree_root(ctx, ns, true);
	if (!root)
		return -ENOMEM;
	had = frames_insert(ctx, root, root, 0, tokens, n, frames, 0, &end);
	if (had < 0)
		return had;
	fnode_set(last, end);
	kvmm_debug_check(ctx, "frames_insert");
	return had;
}

/*
 * Make the path down to @end (@len tokens long) end a node at @at tokens
 * as well: the edge across @at is split there, from the structure alone
 * (no token is read).  Nothing to do when a node ends there already.
 */
static int frames_split_at(struct kvmm_ctx *ctx, struct kvmm_node *end, uint32_t len, uint32_t at)
{
	struct kvmm_node *x;

	for (x = end; !(x->flags & KVMM_NODE_ROOT) && at < len; x = x->parent) {
		uint32_t top = len - x->len;

		if (at > top) {
			struct kvmm_path path = { .node = x, .split = at - top };

			return kvmm_tree_split(ctx, &path);
		}
		len = top;
	}
	return 0;
}

/**
 * kvmm_frames_extend() - kvmm_frames_insert() from a node on the key's path
 * @ctx: a context in engine-frames mode
 * @ns: the namespace
 * @tokens: the key's token ids; the first @from_len are not read
 * @n: the key's tokens, a multiple of the page size
 * @frames: in, the engine's frame of each page of the key (those of the
 *	first @from_len tokens are not read); out, past @from_len, the
 *	tree's frame of each page
 * @from: a handle to a node whose path is the key's first @from_len tokens
 *	(the root's, with 0): on the caller's word, only its length and
 *	namespace are checked
 * @from_len: its tokens, a multiple of the page size, at most @n
 * @split: where the key's path must end a node as well (0 or >= @n: none)
 * @inserted_len: the tokens of the key the request inserted before: a
 *	node of the key's path counts a hit only if it ends past them, as
 *	SGLang counts them (kvmm_frames_insert() counts one on every node)
 * @last: out (may be NULL): the node the key ends on
 *
 * What an engine does when a request it holds locked at @from grows:
 * kvmm_frames_insert() of the whole key, kvmm_frames_insert() of its first
 * @split tokens (a split, in SGLang at a prompt's end) and
 * kvmm_frames_match() of the key (the tree's frames, the path stamped
 * once more), without reading the part of the key the request holds
 * already: where a request's key is thousands of tokens and its new part
 * a few, that reading is the work.  The split needs no token either; it
 * is left out, and the call still succeeds, when no node can be allocated
 * for it (the tree then has one node fewer than SGLang's would).
 *
 * Return: tokens the tree had already (from the start of the key, at
 * least @from_len), as kvmm_frames_insert(); -ESTALE for a handle to a
 * node that is gone; -EXDEV when @from's path is not @from_len tokens of
 * namespace @ns; -EINVAL, -EBUSY, -ENOMEM as kvmm_frames_insert().
 * Nothing changed on error.
 */
KVMM_EXPORT int kvmm_frames_extend(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				   uint32_t n, int32_t *frames, const struct kvmm_fnode *from,
				   uint32_t from_len, uint32_t split, uint32_t inserted_len,
				   struct kvmm_fnode *last)
{
	struct kvmm_node *root, *start, *end, *x;
	uint64_t len = 0;
	int had, ret;

	if (!frames_args_ok(ctx, tokens, n, frames) || !from || from_len > n ||
	    kvmm_align_down(ctx, from_len) != from_len || kvmm_align_down(ctx, split) != split)
		return -EINVAL;
	ret = fnode_get(from, &start);
	if (ret)
		return ret;
	/* a node of @ns has its root already: none made on the way to -EXDEV */
	root = kvmm_tree_root(ctx, ns, !start);
	if (!root)
		return start ? -EXDEV : -ENOMEM;
	if (!start)
		start = root;
	for (x = start; !(x->flags & KVMM_NODE_ROOT); x = x->parent)
		len += x->len;
	if (x != root || len != from_len)
		return -EXDEV;
	had = frames_insert(ctx, root, start, from_len, tokens, n, frames, inserted_len, &end);
	if (had < 0)
		return had;
	if (split && split < n)
		frames_split_at(ctx, end, n, split);	/* -ENOMEM: left out */
	if (end != root) {
		kvmm_tree_touch(ctx, end);
		kvmm_tree_fill(ctx, start, end, frames + (from_len >> ctx->page_shift));
	}
	fnode_set(last, end);
	kvmm_debug_check(ctx, "frames_extend");
	return had;
}

/**
 * kvmm_frames_lock() - take or drop a lock reference on a node's path
 * @ctx: a context in engine-frames mode
 * @node: a handle from kvmm_frames_match() or _insert(); the root's
 *	handle locks nothing
 * @delta: +1 to lock, -1 to unlock
 *
 * A locked node and its ancestors are never evicted.
 *
 * Return: tokens that moved from evictable to protected (locking) or
 * back (unlocking), as SGLang's inc_lock_ref/dec_lock_ref return them;
 * -ESTALE for a handle to a node that is gone; -EINVAL for another
 * @delta or unlocking a node that holds no lock.  Nothing changed on error.
 */
KVMM_EXPORT int64_t kvmm_frames_lock(struct kvmm_ctx *ctx, const struct kvmm_fnode *node,
				     int delta)
{
	struct kvmm_lruvec *lv;
	struct kvmm_node *x;
	uint64_t before;
	int ret;

	if (!engine_mode(ctx) || !node || (delta != 1 && delta != -1))
		return -EINVAL;
	ret = fnode_get(node, &x);
	if (ret || !x)
		return ret;	/* the root's locks nothing */
	if (delta < 0 && !x->lock_ref)
		return -EINVAL;
	lv = &ctx->lruvec[KVMM_TIER_DEVICE];
	before = lv->evictable;
	if (delta > 0)
		kvmm_tree_lock(ctx, x);
	else
		__kvmm_tree_unlock(ctx, x, false);	/* a release is no use */
	ctx->frames_locks += delta;
	kvmm_debug_check(ctx, "frames_lock");
	return (int64_t)((delta > 0 ? before - lv->evictable : lv->evictable - before)
			 << ctx->page_shift);
}

/**
 * kvmm_frames_evict() - evict at least @nr_pages, handing their frames back
 * @ctx: a context in engine-frames mode
 * @nr_pages: pages wanted
 * @frames: out, the evicted frames, the engine's again
 * @max: room at @frames
 *
 * Whole unlocked leaves go, least recently used first (by the context's
 * eviction policy); eviction stops when @nr_pages are out, when nothing
 * evictable is left, or before a leaf whose frames would not fit @max.
 *
 * Return: frames written, or -EINVAL.
 */
KVMM_EXPORT int64_t kvmm_frames_evict(struct kvmm_ctx *ctx, uint32_t nr_pages, int32_t *frames,
				      uint32_t max)
{
	struct kvmm_lruvec *lv;
	uint32_t out = 0;

	if (!engine_mode(ctx) || (max && !frames))
		return -EINVAL;
	lv = &ctx->lruvec[KVMM_TIER_DEVICE];
	while (out < nr_pages) {
		struct kvmm_node *victim = lv->ops->victim(lv);
		uint32_t nr;

		if (!victim)
			break;
		nr = victim->len >> ctx->page_shift;
		if (nr > max - out)
			break;
		memcpy(frames + out, victim->pfns, (size_t)nr * sizeof(*frames));
		out += nr;
		kvmm_drop_leaf(ctx, victim);
		kvmm_count(ctx, EV_EVICT_NODES, 1);
		kvmm_count(ctx, EV_EVICT_PAGES, nr);
	}
	kvmm_debug_check(ctx, "frames_evict");
	return out;
}

/**
 * kvmm_frames_path() - the frames of the path from the root to a node
 * @ctx: a context in engine-frames mode
 * @node: a handle; the root's has an empty path
 * @frames: out, a frame per page of the path, in order
 * @max: room at @frames
 *
 * What SGLang's path_device_indices() gives, a page at a time.
 *
 * Return: frames written; -ESTALE for a node that is gone; -ENOSPC when
 * the path has more than @max pages (nothing written); -EINVAL.
 */
KVMM_EXPORT int kvmm_frames_path(const struct kvmm_ctx *ctx, const struct kvmm_fnode *node,
				 int32_t *frames, uint32_t max)
{
	const struct kvmm_node *n;
	struct kvmm_node *x;
	uint64_t pages = 0;
	int ret;

	if (!engine_mode(ctx) || !node || (max && !frames))
		return -EINVAL;
	ret = fnode_get(node, &x);
	if (ret || !x)
		return ret;	/* the root's path is empty */
	for (n = x; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		pages += n->len >> ctx->page_shift;
	if (pages > max)
		return -ENOSPC;
	return (int)kvmm_tree_fill(ctx, n, x, frames);
}

/**
 * kvmm_frames_sizes() - the tree's evictable and protected tokens
 * @ctx: a context in engine-frames mode
 * @evictable: out, tokens of unlocked cached pages
 * @locked: out, tokens of locked ones (protected, in SGLang's words)
 *
 * Return: 0, or -EINVAL.
 */
KVMM_EXPORT int kvmm_frames_sizes(const struct kvmm_ctx *ctx, uint64_t *evictable,
				  uint64_t *locked)
{
	if (!engine_mode(ctx) || !evictable || !locked)
		return -EINVAL;
	*evictable = ctx->lruvec[KVMM_TIER_DEVICE].evictable << ctx->page_shift;
	*locked = ctx->tree.protected[KVMM_TIER_DEVICE] << ctx->page_shift;
	return 0;
}

/**
 * kvmm_frames_cached() - the frames the tree holds
 * @ctx: a context in engine-frames mode
 * @frames: out, the tree's frames in increasing order, @max at most
 * @max: room in @frames (0 to count them only)
 *
 * A debugging walk over the pool's frames, not the tree (SGLang's
 * all_values_flatten()): linear in the frames of the pool.
 *
 * Return: how many frames the tree holds (only the first @max written),
 * or -EINVAL.
 */
KVMM_EXPORT int64_t kvmm_frames_cached(const struct kvmm_ctx *ctx, int32_t *frames,
				       uint32_t max)
{
	const struct kvmm_zone *zone;
	int64_t n = 0;
	uint32_t pfn;

	if (!engine_mode(ctx) || (!frames && max))
		return -EINVAL;
	zone = &ctx->zone[KVMM_TIER_DEVICE];
	for (pfn = 0; pfn < zone->nr_pages; pfn++) {
		if (zone->pages[pfn].state != KVMM_PAGE_CACHED)
			continue;
		if (n < max)
			frames[n] = (int32_t)pfn;
		n++;
	}
	return n;
}
