// SPDX-License-Identifier: MIT
/*
 * kvmm/prefix_tree.c - the refcounted radix tree that shares prompt
 * prefixes between sequences (SGLang's RadixCache).
 *
 * DOC: the prefix tree
 *
 * Each node holds an edge: a run of token ids and the page frames that
 * hold their KV.  Edges are page granular: their length is a multiple of
 * the page size, and only whole pages are ever shared, so a partly filled
 * last page stays private to its sequence.  A path from a namespace root
 * spells a cached prefix; the frames along it, in order, are exactly the
 * page-table row a sequence with that prefix needs.
 *
 * Children are found by their first page of tokens in one hash table per
 * context, keyed by (parent, first page): O(1) expected, and no per-node
 * table, so a node costs the same whether it has one child or a thousand.
 * The hash function is xxHash's XXH3 (libxxhash).
 *
 * Walk, then change.  Every operation first walks the tree without
 * changing it (kvmm_tree_walk()), then allocates what it will need (a
 * split, a new leaf), and only then changes anything.  An allocation that
 * fails therefore leaves the tree exactly as it was.
 *
 * Splitting.  When a key stops inside an edge, the node is split: a new
 * node takes the first part of the edge and becomes the parent; the old
 * node keeps its identity (sequences and pins point at it), its lock
 * count, its pins and the rest of the edge.  The new parent inherits the
 * lock count and access time, so every accounting sum is unchanged.
 *
 * Locking.  A sequence holds a lock reference on the deepest node of its
 * cached prefix, and on every ancestor: lock_ref counts the holders at or
 * below a node, so a locked node's ancestors are locked and nothing on a
 * path in use is evicted.  Pages of locked nodes are "protected", the rest
 * "evictable"; both sums are kept exact on every change.  A pin is a lock
 * held by the operator instead of a sequence.
 *
 * Access time.  kvmm_tree_touch() stamps a node and its ancestors from a
 * logical clock, ancestors older, as SGLang's match and insert do.  A
 * path that ends on an inner node makes it newer than its children; see
 * vmscan.c for what that costs.
 */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

#define KVMM_HASH_MIN_BUCKETS	256
#define KVMM_NODES_PER_SLAB	64

/* Frame arrays per node: its own, and room for a copy's with write-through. */
static size_t node_buf_bytes(const struct kvmm_ctx *ctx, uint32_t len)
{
	return (size_t)len * sizeof(uint32_t) +
	       (size_t)ctx->tree.page_arrays * (len >> ctx->page_shift) * sizeof(int32_t);
}

/*
 * A buffer for @len tokens and their page frames (then the other per-page
 * arrays, tree.page_arrays in all), laid out as one block.
 */
static uint32_t *node_buf_alloc(struct kvmm_ctx *ctx, uint32_t len)
{
	return kvmm_malloc(ctx, node_buf_bytes(ctx, len));
}

static void node_set_buf(struct kvmm_node *node, uint32_t *buf, uint32_t len)
{
	node->tokens = buf;
	node->pfns = buf ? (int32_t *)(buf + len) : NULL;	/* roots have no edge */
	node->len = len;
}

/*
 * The node cache, as the kernel's slab: node structs are carved from
 * blocks of KVMM_NODES_PER_SLAB and a freed node goes back on a free list,
 * so reclaim never hands a node to the allocator (freeing small blocks in
 * random order made glibc coalesce with random neighbours, most of an
 * eviction's cost on a large tree).  The first struct of each block is
 * not handed out: it chains the blocks for kvmm_tree_exit().
 */
static struct kvmm_node *node_cache_get(struct kvmm_ctx *ctx)
{
	struct kvmm_tree *tree = &ctx->tree;
	struct kvmm_node *node = tree->free_nodes;
	uint32_t i;

	if (!node) {
		struct kvmm_node *slab = kvmm_malloc(ctx, KVMM_NODES_PER_SLAB *
							  sizeof(*slab));

		if (!slab)
			return NULL;
		slab[0].parent = tree->slabs;
		tree->slabs = slab;
		for (i = KVMM_NODES_PER_SLAB - 1; i > 0; i--) {
			slab[i].hnext = tree->free_nodes;
			tree->free_nodes = &slab[i];
		}
		node = tree->free_nodes;
	}
	tree->free_nodes = node->hnext;
	return node;
}

static void node_cache_put(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	node->hnext = ctx->tree.free_nodes;
	ctx->tree.free_nodes = node;
}

static struct kvmm_node *node_alloc(struct kvmm_ctx *ctx, uint32_t len)
{
	struct kvmm_node *node = node_cache_get(ctx);
	uint32_t *buf = NULL;

	if (!node)
		return NULL;
	if (len) {
		buf = node_buf_alloc(ctx, len);
		if (!buf) {
			node_cache_put(ctx, node);
			return NULL;
		}
	}
	memset(node, 0, sizeof(*node));
	node->id = ++ctx->tree.next_id;
	node_set_buf(node, buf, len);
	list_init(&node->sibling);
	list_init(&node->children);
	list_init(&node->lru);
	list_init(&node->shadow);
	return node;
}

/* A namespace root: the node inside its struct kvmm_ns. */
static struct kvmm_node *root_alloc(struct kvmm_ctx *ctx)
{
	struct kvmm_ns *ns = kvmm_zalloc(ctx, sizeof(*ns));
	struct kvmm_node *node;

	if (!ns)
		return NULL;
	node = &ns->root;
	node->id = ++ctx->tree.next_id;
	list_init(&node->sibling);
	list_init(&node->children);
	list_init(&node->lru);
	list_init(&node->shadow);
	return node;
}

static void node_free(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	if (!node)
		return;
	kvmm_prefetch_forget(ctx, node);
	if (node->flags & KVMM_NODE_ROOT) {
		kvmm_mfree(ctx, kvmm_root_ns(node), sizeof(struct kvmm_ns));
		return;
	}
	kvmm_mfree(ctx, node->tokens, node_buf_bytes(ctx, node->len));
	kvmm_node_ids_free(ctx, node);
	node->id = 0;	/* a handle to it is stale from now on (frames.c) */
	node_cache_put(ctx, node);
}

/* ---- the child hash ---- */

/*
 * Tokens that tell @parent's children apart: the first page of the edge,
 * or under a keyed space's root the value's key (keyed.c).
 */
static size_t key_bytes(const struct kvmm_ctx *ctx, const struct kvmm_node *parent)
{
	if (unlikely(parent->flags & KVMM_NODE_KEYED))
		return KVMM_KEY_WORDS * sizeof(uint32_t);
	return (size_t)ctx->page_size * sizeof(uint32_t);
}

static uint64_t child_hash(const struct kvmm_ctx *ctx,
			   const struct kvmm_node *parent, const uint32_t *key)
{
	return XXH3_64bits_withSeed(key, key_bytes(ctx, parent), (uint64_t)(uintptr_t)parent);
}

static uint64_t root_hash(uint32_t ns)
{
	return XXH3_64bits_withSeed(&ns, sizeof(ns), 0);
}

static uint64_t node_hash(const struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	if (node->flags & KVMM_NODE_ROOT)
		return root_hash(node->ns);
	return child_hash(ctx, node->parent, node->tokens);
}

static void hlink(struct kvmm_node **head, struct kvmm_node *node)
{
	node->hnext = *head;
	if (node->hnext)
		node->hnext->hpprev = &node->hnext;
	node->hpprev = head;
	*head = node;
}

/*
 * DOC: resizing the child hash
 *
 * The table doubles when it holds more nodes than buckets, but never all
 * at once: rehashing a million nodes in one insert stalled it for a third
 * of a second.  Instead the old table stays beside the new one and every
 * insert moves the next KVMM_REHASH_STEP old buckets across; the doubling
 * that follows needs as many inserts as the old table has buckets, so a
 * resize always finishes before the next one starts.  While it runs, a
 * node is in the old table exactly when its old bucket has not been moved
 * yet (inserts follow the same rule), so a lookup still reads one chain.
 * New buckets are zeroed as they are first used: old bucket i spreads
 * into new buckets i and i + old size, and nothing reaches a new bucket
 * before its old one moved.
 */
#define KVMM_REHASH_STEP	2

static struct kvmm_node **bucket_of(const struct kvmm_tree *tree, uint64_t h)
{
	if (tree->old && (h & tree->old_mask) >= tree->rehash)
		return &tree->old[h & tree->old_mask];
	return &tree->buckets[h & tree->mask];
}

static void htab_rehash_step(struct kvmm_ctx *ctx)
{
	struct kvmm_tree *tree = &ctx->tree;
	uint32_t step;

	for (step = 0; step < KVMM_REHASH_STEP && tree->old; step++) {
		uint64_t i = tree->rehash++;
		struct kvmm_node *node = tree->old[i], *next;

		tree->buckets[i] = NULL;
		tree->buckets[i + tree->old_mask + 1] = NULL;
		for (; node; node = next) {
			next = node->hnext;
			hlink(&tree->buckets[node_hash(ctx, node) & tree->mask], node);
		}
		if (tree->rehash > tree->old_mask) {
			kvmm_mfree(ctx, tree->old, (tree->old_mask + 1) * sizeof(*tree->old));
			tree->old = NULL;
		}
	}
}

/* Start doubling the table; on failure keep the old one (chains get longer). */
static void htab_grow(struct kvmm_ctx *ctx)
{
	struct kvmm_tree *tree = &ctx->tree;
	uint64_t nr = (tree->mask + 1) * 2;
	struct kvmm_node **b = kvmm_malloc(ctx, nr * sizeof(*b));

	if (!b)
		return;
	tree->old = tree->buckets;
	tree->old_mask = tree->mask;
	tree->rehash = 0;
	tree->buckets = b;
	tree->mask = nr - 1;
}

static void htab_add(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_tree *tree = &ctx->tree;

	hlink(bucket_of(tree, node_hash(ctx, node)), node);
	tree->nr_hashed++;
	if (tree->old)
		htab_rehash_step(ctx);
	else if (tree->nr_hashed > tree->mask + 1)
		htab_grow(ctx);
}

/* O(1): the node knows who points at it. */
static void htab_del(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	*node->hpprev = node->hnext;
	if (node->hnext)
		node->hnext->hpprev = node->hpprev;
	node->hnext = NULL;
	node->hpprev = NULL;
	ctx->tree.nr_hashed--;
}

/**
 * kvmm_tree_prefetch() - start loading what deleting @node will touch
 * @node: a leaf reclaim is about to take
 *
 * Its neighbours in the hash chain are random memory; reclaim asks for
 * them a few victims ahead so that the misses overlap.
 */
void kvmm_tree_prefetch(const struct kvmm_node *node)
{
	__builtin_prefetch(node->hpprev, 1);
	if (node->hnext)
		__builtin_prefetch(&node->hnext->hpprev, 1);
	__builtin_prefetch(node->pfns);
	__builtin_prefetch(node->sibling.next, 1);
	__builtin_prefetch(node->sibling.prev, 1);
}

/**
 * kvmm_tree_lookup_child() - the child of @parent whose edge starts with
 *	the page @key
 * @ctx: the context
 * @parent: a node
 * @key: page_size token ids (a keyed space's root: KVMM_KEY_WORDS, the key)
 *
 * Return: the child, or NULL.
 */
struct kvmm_node *kvmm_tree_lookup_child(const struct kvmm_ctx *ctx,
					 const struct kvmm_node *parent,
					 const uint32_t *key)
{
	struct kvmm_node *node = *bucket_of(&ctx->tree, child_hash(ctx, parent, key));
	size_t bytes = key_bytes(ctx, parent);

	for (; node; node = node->hnext) {
		if (node->parent == parent && node->tokens[0] == key[0] &&
		    !memcmp(node->tokens, key, bytes))
			return node;
	}
	return NULL;
}

int kvmm_tree_init(struct kvmm_ctx *ctx)
{
	struct kvmm_tree *tree = &ctx->tree;

	memset(tree, 0, sizeof(*tree));
	list_init(&tree->roots);
	list_init(&tree->shadows);
	tree->page_arrays = 1;
	tree->buckets = kvmm_zalloc(ctx, KVMM_HASH_MIN_BUCKETS * sizeof(*tree->buckets));
	if (!tree->buckets)
		return -ENOMEM;
	tree->mask = KVMM_HASH_MIN_BUCKETS - 1;
	return 0;
}

void kvmm_tree_exit(struct kvmm_ctx *ctx)
{
	struct kvmm_tree *tree = &ctx->tree;

	while (!list_empty(&tree->roots)) {
		struct kvmm_node *root = list_entry(tree->roots.next,
						    struct kvmm_node, sibling);
		struct kvmm_node *node = root;

		/* Post-order: free leaves first, climbing as parents empty. */
		while (node) {
			struct kvmm_node *parent;

			if (!list_empty(&node->children)) {
				node = list_entry(node->children.next,
						  struct kvmm_node, sibling);
				continue;
			}
			parent = node->parent;
			list_del(&node->sibling);
			node_free(ctx, node);
			node = parent;
		}
	}
	while (tree->slabs) {
		struct kvmm_node *slab = tree->slabs;

		tree->slabs = slab[0].parent;
		kvmm_mfree(ctx, slab, KVMM_NODES_PER_SLAB * sizeof(*slab));
	}
	tree->free_nodes = NULL;
	if (tree->old)
		kvmm_mfree(ctx, tree->old, (tree->old_mask + 1) * sizeof(*tree->old));
	tree->old = NULL;
	kvmm_mfree(ctx, tree->buckets, (tree->mask + 1) * sizeof(*tree->buckets));
	tree->buckets = NULL;
}

/**
 * kvmm_tree_root() - the root of namespace @ns
 * @ctx: the context
 * @ns: namespace id (tenant salt, adapter id: whatever the engine keys on)
 * @create: make the root if the namespace has none yet
 *
 * Identical tokens under different roots never share a node, so they
 * never share KV.
 *
 * Return: the root, or NULL when it does not exist (or cannot be made).
 */
struct kvmm_node *kvmm_tree_root(struct kvmm_ctx *ctx, uint32_t ns, bool create)
{
	struct kvmm_tree *tree = &ctx->tree;
	struct kvmm_node *node = *bucket_of(tree, root_hash(ns));

	for (; node; node = node->hnext) {
		if ((node->flags & KVMM_NODE_ROOT) && node->ns == ns)
			return node;
	}
	if (!create)
		return NULL;
	node = root_alloc(ctx);
	if (!node)
		return NULL;
	node->flags = KVMM_NODE_ROOT;
	node->ns = ns;
	list_add(&node->sibling, &tree->roots);
	htab_add(ctx, node);
	return node;
}

/**
 * kvmm_tree_keyed_root() - a new root for a keyed space's values
 * @ctx: the context
 * @ns: the space's namespace
 *
 * Its children are values (kvmm_tree_add_keyed()), told apart by their
 * keys.  It is on the root list, so that walks of the whole tree see
 * them, but no namespace lookup finds it.
 *
 * Return: the root, or NULL.
 */
struct kvmm_node *kvmm_tree_keyed_root(struct kvmm_ctx *ctx, uint32_t ns)
{
	struct kvmm_node *node = root_alloc(ctx);

	if (!node)
		return NULL;
	node->flags = KVMM_NODE_ROOT | KVMM_NODE_KEYED;
	node->ns = ns;
	list_add_tail(&node->sibling, &ctx->tree.roots);
	return node;
}

/**
 * kvmm_tree_keyed_root_free() - take a removed keyed space's root off the
 *	root list and free it
 * @ctx: the context
 * @root: a root from kvmm_tree_keyed_root() whose values are all gone
 */
void kvmm_tree_keyed_root_free(struct kvmm_ctx *ctx, struct kvmm_node *root)
{
	kvmm_assert(ctx, (root->flags & KVMM_NODE_KEYED) && list_empty(&root->children));
	list_del(&root->sibling);
	node_free(ctx, root);
}

/* ---- walking ---- */

/*
 * How many leading tokens of @a and @b agree, at most @n.  Most edges match
 * whole, so one vectorised memcmp settles the common case; a mismatch is
 * then narrowed down 64 tokens at a time.
 */
static uint32_t key_match(const uint32_t *a, const uint32_t *b, uint32_t n)
{
	uint32_t i = 0;

	if (!memcmp(a, b, (size_t)n * sizeof(*a)))
		return n;
	while (n - i >= 64 && !memcmp(a + i, b + i, 64 * sizeof(*a)))
		i += 64;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/**
 * kvmm_tree_walk() - find how much of @key is cached below @from
 * @ctx: the context
 * @from: where @key starts: a root, or a node whose end is the key's start
 * @key: token ids
 * @n: tokens of @key to look at; a trailing partial page is ignored
 * @path: out, where the walk stopped
 *
 * Changes nothing: no access time, no lock, no split.
 */
void kvmm_tree_walk(struct kvmm_ctx *ctx, struct kvmm_node *from,
		    const uint32_t *key, uint32_t n, struct kvmm_path *path)
{
	struct kvmm_node *node = from;
	uint32_t matched = 0;

	n = kvmm_align_down(ctx, n);
	path->split = 0;
	while (matched < n) {
		struct kvmm_node *child = kvmm_tree_lookup_child(ctx, node, key + matched);
		uint32_t want, m;

		if (!child)
			break;
		want = n - matched < child->len ? n - matched : child->len;
		m = ctx->page_size + key_match(child->tokens + ctx->page_size,
					       key + matched + ctx->page_size,
					       want - ctx->page_size);
		m = kvmm_align_down(ctx, m);
		matched += m;
		node = child;
		if (m < child->len) {
			path->split = m;
			break;
		}
	}
	path->node = node;
	path->matched = matched;
}

/**
 * kvmm_tree_split() - make a walk that stopped inside an edge end on a node
 * @ctx: the context
 * @path: a path from kvmm_tree_walk(); updated to end on the new node
 *
 * Return: 0 (also when there was nothing to split), -ENOMEM, or -EBUSY
 * for a node a promotion is reading up, with the tree unchanged.
 */
int kvmm_tree_split(struct kvmm_ctx *ctx, struct kvmm_path *path)
{
	struct kvmm_node *x = path->node, *p;
	uint32_t k = path->split, rest = x->len - k;
	uint32_t kp = k >> ctx->page_shift, a;
	uint32_t *buf;

	if (!k)
		return 0;
	if (x->flags & KVMM_NODE_IO)
		return -EBUSY;	/* a promotion holds its tokens and frames */
	p = node_alloc(ctx, k);
	if (!p)
		return -ENOMEM;
	buf = node_buf_alloc(ctx, rest);
	if (!buf) {
		node_free(ctx, p);
		return -ENOMEM;
	}

	htab_del(ctx, x);
	memcpy(p->tokens, x->tokens, (size_t)k * sizeof(uint32_t));
	memcpy(p->pfns, x->pfns, (size_t)kp * sizeof(int32_t));
	memcpy(buf, x->tokens + k, (size_t)rest * sizeof(uint32_t));
	for (a = 0; a < ctx->tree.page_arrays; a++) {	/* each splits the same way */
		const int32_t *from = x->pfns + (size_t)a * (x->len >> ctx->page_shift);

		memcpy(p->pfns + (size_t)a * kp, from, (size_t)kp * sizeof(int32_t));
		memcpy((int32_t *)(buf + rest) + (size_t)a * (rest >> ctx->page_shift),
		       from + kp, (size_t)(rest >> ctx->page_shift) * sizeof(int32_t));
	}
	kvmm_mfree(ctx, x->tokens, node_buf_bytes(ctx, x->len));
	node_set_buf(x, buf, rest);

	p->parent = x->parent;
	p->lock_ref = x->lock_ref;
	p->pin_ref = x->pin_ref;
	p->atime = x->atime;
	p->hits = x->hits;
	p->prio = x->prio;
	p->tier = x->tier;
	p->flags |= x->flags & (KVMM_NODE_REMOTE | KVMM_NODE_PREFETCHED);
	if (x->flags & KVMM_NODE_PREFETCHED)
		ctx->prefetched++;
	p->tkids = 1;
	list_del(&x->sibling);
	list_add(&p->sibling, &p->parent->children);
	list_add(&x->sibling, &p->children);
	x->parent = p;
	htab_add(ctx, p);
	htab_add(ctx, x);

	ctx->tree.nr_nodes++;
	kvmm_count(ctx, EV_SPLITS, 1);
	kvmm_node_ids_split(ctx, p, x);
	if (ctx->tree.split)
		ctx->tree.split(ctx, p, x);
	path->node = p;
	path->split = 0;
	return 0;
}

/**
 * kvmm_tree_touch() - record an access to @node and the path above it
 * @ctx: the context
 * @node: the deepest node accessed
 *
 * Ancestors get older stamps than the node, in walk order.  Each counts a
 * hit (the slru policy's), except in engine-frames mode, where an insert
 * counts them as the engine's own cache does (kvmm_frames_extend()).
 */
void kvmm_tree_touch(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	/* an engine's own frames: its inserts say what a hit is (frames.c) */
	bool hit = ctx->params.frames != KVMM_FRAMES_ENGINE;
	struct kvmm_node *n;
	uint64_t depth = 0, t;

	for (n = node; n; n = n->parent)
		depth++;
	t = ctx->tree.clock += depth;
	for (n = node; n; n = n->parent) {
		n->atime = t--;
		if (hit && n->hits < UINT16_MAX)
			n->hits++;
	}
	if (node->flags & KVMM_NODE_EVICTABLE)
		kvmm_lru_touch(ctx, node);
}

/* No children at all; reclaim lists hold leaves of a tier (tkids == 0). */
bool kvmm_node_is_leaf(const struct kvmm_node *node)
{
	return list_empty(&node->children);
}

/**
 * kvmm_tree_lock() - take a lock reference on @node and its ancestors
 * @ctx: the context
 * @node: a node, or a root (which takes no reference)
 */
void kvmm_tree_lock(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	for (; !(node->flags & KVMM_NODE_ROOT); node = node->parent) {
		uint32_t nr = node->len >> ctx->page_shift;

		if (node->lock_ref++)
			continue;
		ctx->lruvec[node->tier].evictable -= nr;
		ctx->tree.protected[node->tier] += nr;
		kvmm_lru_update(ctx, node);
	}
}

/**
 * kvmm_tree_unlock() - drop a lock reference taken by kvmm_tree_lock()
 * @ctx: the context
 * @node: the node that was locked
 *
 * If @node becomes an unlocked leaf of its tier it is touched (it was in
 * use until now) and queued for reclaim.  Above a lower-tier @node (a
 * promotion that failed or could not start), an ancestor on a faster
 * tier may become an unlocked leaf of its own tier too, and is queued.
 */
void kvmm_tree_unlock(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	__kvmm_tree_unlock(ctx, node, true);
}

/*
 * kvmm_tree_unlock(), stamping @node as used when it becomes an unlocked
 * leaf only if @touch: an engine whose own cache does not count a release
 * as a use (SGLang's dec_lock_ref) keeps its order (frames.c).
 */
void __kvmm_tree_unlock(struct kvmm_ctx *ctx, struct kvmm_node *node, bool touch)
{
	struct kvmm_node *n;
	bool touched;

	for (n = node; !(n->flags & KVMM_NODE_ROOT); n = n->parent) {
		uint32_t nr = n->len >> ctx->page_shift;

		kvmm_assert(ctx, n->lock_ref > 0);
		if (--n->lock_ref)
			continue;
		ctx->lruvec[n->tier].evictable += nr;
		ctx->tree.protected[n->tier] -= nr;
	}
	if ((node->flags & KVMM_NODE_ROOT) || node->lock_ref)
		return;
	touched = !node->tkids;
	if (touched) {
		if (touch)
			kvmm_tree_touch(ctx, node);
		kvmm_lru_update(ctx, node);
	}
	if (node->tier == KVMM_TIER_DEVICE)
		return;
	/* above a lower-tier node, the last of each faster tier is a leaf of it */
	for (n = node->parent; !(n->flags & KVMM_NODE_ROOT) && !n->lock_ref; n = n->parent)
		if (!n->tkids)
			__kvmm_lru_update(ctx, n, !touched);
}

/**
 * kvmm_tree_fill() - copy the page frames of the path @from..@to
 * @ctx: the context
 * @from: an ancestor of @to (or @to itself: nothing is copied)
 * @to: the deepest node
 * @dst: out, the frames of the edges below @from down to @to, in order
 *
 * Return: the number of frames written.
 */
uint32_t kvmm_tree_fill(const struct kvmm_ctx *ctx, const struct kvmm_node *from,
			const struct kvmm_node *to, int32_t *dst)
{
	const struct kvmm_node *n;
	uint32_t total = 0, pos;

	for (n = to; n != from; n = n->parent)
		total += n->len >> ctx->page_shift;
	pos = total;
	for (n = to; n != from; n = n->parent) {
		uint32_t nr = n->len >> ctx->page_shift;

		pos -= nr;
		memcpy(dst + pos, n->pfns, (size_t)nr * sizeof(*dst));
	}
	return total;
}

/*
 * Hang @leaf (tokens and frames filled in; the frames OWNED on @tier) under
 * @parent: the frames become the tree's, the accounting follows.  tkids
 * counts only children on @parent's own tier, so it stays exact whatever
 * tier @parent is on.
 */
static void link_leaf(struct kvmm_ctx *ctx, struct kvmm_node *parent,
		      struct kvmm_node *leaf, uint32_t tier)
{
	uint32_t nr = leaf->len >> ctx->page_shift;

	kvmm_pages_to_tree(&ctx->zone[tier], leaf->pfns, nr);
	leaf->tier = (uint8_t)tier;
	leaf->parent = parent;
	list_add(&leaf->sibling, &parent->children);
	htab_add(ctx, leaf);
	if (!(parent->flags & KVMM_NODE_ROOT) && parent->tier == tier)
		parent->tkids++;
	kvmm_lru_update(ctx, parent);
	ctx->tree.nr_nodes++;
	ctx->tree.cached[tier] += nr;
	kvmm_ns_cached_add(parent, tier, nr);
	kvmm_keyed_pages_add(ctx, leaf, tier, nr);
	ctx->lruvec[tier].evictable += nr;
	kvmm_event_node(ctx, KVMM_EVENT_STORED, leaf, tier, tier);
}

/**
 * kvmm_tree_add_leaf() - hang cached pages of any tier under a node
 * @ctx: the context
 * @parent: a root or a node on a tier no slower than @tier
 * @key: the new edge's tokens, continuing @parent's path
 * @n: tokens, page aligned
 * @pfns: its OWNED frames on @tier, which become the tree's
 * @tier: KVMM_TIER_*
 *
 * For a restart, which finds an NVMe tier's pages again.  The leaf is
 * stamped newer than its parent but not queued for reclaim: the caller
 * does that when it is done (as after kvmm_tree_insert()).
 *
 * Return: the new leaf; NULL, with nothing changed, when @parent has a
 * child that starts the same way (-EEXIST) or on -ENOMEM.
 */
struct kvmm_node *kvmm_tree_add_leaf(struct kvmm_ctx *ctx, struct kvmm_node *parent,
				     const uint32_t *key, uint32_t n,
				     const int32_t *pfns, uint32_t tier)
{
	struct kvmm_node *leaf;

	if (kvmm_tree_lookup_child(ctx, parent, key))
		return NULL;
	leaf = node_alloc(ctx, n);
	if (!leaf)
		return NULL;
	memcpy(leaf->tokens, key, (size_t)n * sizeof(*key));
	memcpy(leaf->pfns, pfns, (size_t)(n >> ctx->page_shift) * sizeof(*pfns));
	link_leaf(ctx, parent, leaf, tier);
	leaf->atime = ++ctx->tree.clock;	/* newer than its parent */
	return leaf;
}

/**
 * kvmm_tree_keyed_buf() - a keyed value's edge, made ahead of
 *	kvmm_tree_add_keyed(): its tokens (the key, then zeros) and its
 *	frames, in the block a node of @pages pages keeps them in
 * @ctx: the context; its lock need not be held (the block is the
 *	caller's until kvmm_tree_add_keyed() takes it)
 * @key: the key, KVMM_KEY_WORDS words
 * @pages: the value's pages
 * @pfns: its frames
 *
 * A large value's edge holds a page's worth of token slots a page: it is
 * made here, off the lock, rather than allocated and zeroed under it.
 *
 * Return: the block, or NULL.
 */
uint32_t *kvmm_tree_keyed_buf(struct kvmm_ctx *ctx, const uint32_t *key, uint32_t pages,
			      const int32_t *pfns)
{
	uint32_t len = pages << ctx->page_shift;
	uint32_t *buf = node_buf_alloc(ctx, len);

	if (!buf)
		return NULL;
	memset(buf, 0, (size_t)len * sizeof(*buf));
	memcpy(buf, key, KVMM_KEY_WORDS * sizeof(*buf));
	memcpy(buf + len, pfns, (size_t)pages * sizeof(*pfns));
	return buf;
}

/* A block kvmm_tree_keyed_buf() made that no node took. */
void kvmm_tree_keyed_buf_free(struct kvmm_ctx *ctx, uint32_t *buf, uint32_t pages)
{
	kvmm_mfree(ctx, buf, node_buf_bytes(ctx, pages << ctx->page_shift));
}

/**
 * kvmm_tree_add_keyed() - hang a keyed value's pages under its space's root
 * @ctx: the context
 * @root: the space's root (kvmm_tree_keyed_root())
 * @key: its key, KVMM_KEY_WORDS words, the first of its edge's tokens (the
 *	rest are 0)
 * @pages: its frames, at least KVMM_KEY_WORDS tokens' worth
 * @pfns: its frames on @tier, held (OWNED or IO), which become the tree's
 * @tier: KVMM_TIER_*
 * @buf: NULL, or its edge made ahead (kvmm_tree_keyed_buf() of @key,
 *	@pages and @pfns), which the node takes when it is made
 *
 * Like kvmm_tree_add_leaf(), the value is stamped newer than anything and
 * queued for reclaim by the caller.
 *
 * Return: the value; NULL, with nothing changed (@buf still the
 * caller's), when @root has it already or on -ENOMEM.
 */
struct kvmm_node *kvmm_tree_add_keyed(struct kvmm_ctx *ctx, struct kvmm_node *root,
				      const uint32_t *key, uint32_t pages,
				      const int32_t *pfns, uint32_t tier, uint32_t *buf)
{
	uint32_t len = pages << ctx->page_shift;
	struct kvmm_node *leaf;

	if (kvmm_tree_lookup_child(ctx, root, key))
		return NULL;
	leaf = node_alloc(ctx, buf ? 0 : len);
	if (!leaf)
		return NULL;
	if (buf) {
		node_set_buf(leaf, buf, len);
	} else {
		memset(leaf->tokens, 0, (size_t)len * sizeof(*key));
		memcpy(leaf->tokens, key, KVMM_KEY_WORDS * sizeof(*key));
		memcpy(leaf->pfns, pfns, (size_t)pages * sizeof(*pfns));
	}
	leaf->flags = KVMM_NODE_KEYED;
	link_leaf(ctx, root, leaf, tier);
	leaf->atime = ++ctx->tree.clock;
	ctx->keyed_values++;
	return leaf;
}

/*
 * Where an insert along @path (a walk of @n tokens from @from) must stop:
 * before the first node on it that a promotion is reading.  @path is
 * walked again to end there.  Return: the tokens the insert may take.
 */
static uint32_t insert_limit(struct kvmm_node *from, struct kvmm_path *path, uint32_t n)
{
	struct kvmm_node *x = path->node, *busy = NULL;
	uint32_t start = path->matched, len = path->split ? path->split : x->len;

	for (; x != from; x = x->parent, len = x->len) {
		start -= len;	/* where x starts, from @from */
		if (x->flags & KVMM_NODE_IO) {
			busy = x;
			n = start;
		}
	}
	if (busy) {
		path->node = busy->parent;
		path->matched = n;
		path->split = 0;
	}
	return n;
}

/**
 * kvmm_tree_insert() - add computed tokens below @from
 * @ctx: the context
 * @from: the node the key continues (locked by the caller, or a root)
 * @key: token ids continuing @from's path
 * @n: tokens, page aligned
 * @pfns: the caller's OWNED device frames holding @key's KV
 * @ins: out, where the key went
 *
 * The tree indexes the key and nothing more.  The part of it the tree did
 * not have yet becomes a new leaf that takes its frames (from @pfns past
 * the matched part): they become CACHED on the device tier and the
 * tree's.  The matched part (the path @from..@ins->match, split to end on
 * a node boundary) is left as it was, on whatever tier it is, and the
 * caller keeps its frames for it; settling it is the caller's: the tier
 * layer gives its demoted nodes those frames (kvmm_tier_adopt()), and the
 * frames of the rest are duplicates.  Until then a new device leaf may
 * hang below a node of a lower tier.  The new leaf is neither touched nor
 * queued for reclaim: the caller does either when it is done.
 *
 * A node a promotion is reading up (KVMM_NODE_IO) can take nothing: the
 * insert stops before it, and the caller keeps the rest of its frames.
 *
 * Return: tokens inserted (from the start of @key: 0 when it stopped
 * before its first node, and then @ins is not set); -ENOMEM, or -EINVAL
 * for a key that changed while it was read; nothing changed on failure.
 */
int kvmm_tree_insert(struct kvmm_ctx *ctx, struct kvmm_node *from,
		     const uint32_t *key, uint32_t n, const int32_t *pfns,
		     struct kvmm_insert *ins)
{
	struct kvmm_node *leaf = NULL;
	struct kvmm_path path;
	uint32_t rest;
	int ret;

	kvmm_tree_walk(ctx, from, key, n, &path);
	n = insert_limit(from, &path, n);
	if (!n)
		return 0;
	rest = n - path.matched;
	if (rest) {
		leaf = node_alloc(ctx, rest);
		if (!leaf)
			return -ENOMEM;
		/*
		 * Copy the new edge now and check it against what the walk saw:
		 * a key that changed under us (another thread or process writing
		 * the caller's buffer) must not give a node two children with
		 * the same first page.  The walk stopped because no child starts
		 * with the key's next page (or, inside an edge, because the
		 * edge's next page differs), so the copy must not start with it.
		 */
		memcpy(leaf->tokens, key + path.matched, (size_t)rest * sizeof(*key));
		if (path.split ? !memcmp(leaf->tokens, path.node->tokens + path.split,
					 ctx->page_size * sizeof(*key)) :
				 kvmm_tree_lookup_child(ctx, path.node, leaf->tokens) != NULL) {
			node_free(ctx, leaf);
			return -EINVAL;
		}
	}
	ret = kvmm_tree_split(ctx, &path);
	if (ret) {
		node_free(ctx, leaf);
		return ret;
	}

	ins->match = ins->end = path.node;
	ins->matched = path.matched;
	if (leaf) {
		memcpy(leaf->pfns, pfns + (path.matched >> ctx->page_shift),
		       (size_t)(rest >> ctx->page_shift) * sizeof(*pfns));
		link_leaf(ctx, path.node, leaf, KVMM_TIER_DEVICE);
		kvmm_count(ctx, EV_INSERT_TOKENS, rest);
		ins->end = leaf;
	}
	return (int)n;
}

/**
 * kvmm_tree_delete_leaf() - unlink and free a leaf whose frames are gone
 * @ctx: the context
 * @node: an unlocked leaf, already off the reclaim lists
 */
void kvmm_tree_delete_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	htab_del(ctx, node);
	list_del(&node->sibling);
	ctx->tree.nr_nodes--;
	node_free(ctx, node);
}

/**
 * kvmm_tree_next() - pre-order successor of @node within @root's subtree
 * @root: the subtree
 * @node: the current node
 *
 * Return: the next node, or NULL after the last.
 */
struct kvmm_node *kvmm_tree_next(struct kvmm_node *root, struct kvmm_node *node)
{
	if (!list_empty(&node->children))
		return list_entry(node->children.next, struct kvmm_node, sibling);
	return kvmm_tree_skip(root, node);
}

/**
 * kvmm_tree_skip() - pre-order successor of @node's whole subtree within
 *	@root's: kvmm_tree_next() past everything below @node
 * @root: the subtree walked
 * @node: the current node
 *
 * Return: the next node, or NULL after the last.
 */
struct kvmm_node *kvmm_tree_skip(struct kvmm_node *root, struct kvmm_node *node)
{
	while (node != root) {
		struct kvmm_node *parent = node->parent;

		if (node->sibling.next != &parent->children)
			return list_entry(node->sibling.next, struct kvmm_node, sibling);
		node = parent;
	}
	return NULL;
}

/**
 * kvmm_tree_find_id() - the node with id @id, roots excluded
 * @ctx: the context
 * @id: a node id, as dumps show it
 *
 * A walk of the whole tree: for admin commands only.
 *
 * Return: the node, or NULL.
 */
struct kvmm_node *kvmm_tree_find_id(struct kvmm_ctx *ctx, uint64_t id)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling);
		struct kvmm_node *node;

		for (node = kvmm_tree_next(root, root); node; node = kvmm_tree_next(root, node))
			if (node->id == id)
				return node;
	}
	return NULL;
}

/**
 * kvmm_tree_bfs() - every node, breadth first: each after its parent
 * @ctx: the context
 * @q: out, room for kvmm_tree_bfs_max() nodes
 *
 * Roots are walked but not listed.  A walk of the whole tree: for flush
 * and drop_caches only.
 *
 * Return: the nodes listed.
 */
uint64_t kvmm_tree_bfs(struct kvmm_ctx *ctx, struct kvmm_node **q)
{
	uint64_t head = 0, tail = 0, out = 0;
	struct kvmm_list *pos;

	/* @q is the queue and the output: what is listed trails the head */
	list_for_each(pos, &ctx->tree.roots)
		q[tail++] = list_entry(pos, struct kvmm_node, sibling);
	while (head < tail) {
		struct kvmm_node *n = q[head++];

		list_for_each(pos, &n->children)
			q[tail++] = list_entry(pos, struct kvmm_node, sibling);
		if (!(n->flags & KVMM_NODE_ROOT))
			q[out++] = n;
	}
	return out;
}

/*
 * Room kvmm_tree_bfs() needs: every node and every root (keyed spaces'
 * roots are on the list but in no count), and never 0 bytes.
 */
size_t kvmm_tree_bfs_bytes(const struct kvmm_ctx *ctx)
{
	const struct kvmm_list *pos;
	uint64_t roots = 0;

	list_for_each(pos, &ctx->tree.roots)
		roots++;
	return (size_t)(ctx->tree.nr_nodes + roots + 1) * sizeof(struct kvmm_node *);
}
