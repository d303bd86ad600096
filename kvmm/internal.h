/* SPDX-License-Identifier: MIT */
/*
 * kvmm/internal.h - the core's private types and the functions its files
 * call in each other, grouped by the file that defines them.
 *
 * Coding conventions in the core:
 * @ctx is the context, the one handle everything hangs off (no globals);
 * @zone is a pool of pages of one tier; @pfn a page frame number in it;
 * @node a prefix-tree node; @seq a sequence id: its row in the page
 * table, or a ring's KVMM_SEQ_ID(row, generation), which kvmm_seq_lookup()
 * checks and kvmm_row() reads through; @n a count of tokens, @nr a count
 * of pages.
 * Token counts handed to the tree are page aligned unless said otherwise.
 */
#ifndef KVMM_INTERNAL_H
#define KVMM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>
#include "autoconf.h"
#include "../driver/driver.h"

#ifndef KVMM_DEBUG
#define KVMM_DEBUG 0
#endif

#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)
#define KVMM_EXPORT	__attribute__((visibility("default")))

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

/* Internal asserts: compiled in at DEBUG >= 2, as mimalloc's. */
#if KVMM_DEBUG >= 2
#define kvmm_assert(ctx, cond) \
	((cond) ? (void)0 : kvmm_bug(ctx, #cond, __FILE__, __LINE__))
#else
#define kvmm_assert(ctx, cond) ((void)(ctx))
#endif

/* ---- a minimal intrusive list, as the kernel's list.h ---- */
struct kvmm_list {
	struct kvmm_list *next, *prev;
};

static inline void list_init(struct kvmm_list *h)
{
	h->next = h->prev = h;
}

static inline bool list_empty(const struct kvmm_list *h)
{
	return h->next == h;
}

static inline void __list_add(struct kvmm_list *e, struct kvmm_list *prev,
			      struct kvmm_list *next)
{
	next->prev = e;
	e->next = next;
	e->prev = prev;
	prev->next = e;
}

static inline void list_add(struct kvmm_list *e, struct kvmm_list *h)
{
	__list_add(e, h, h->next);
}

static inline void list_add_tail(struct kvmm_list *e, struct kvmm_list *h)
{
	__list_add(e, h->prev, h);
}

static inline void list_del(struct kvmm_list *e)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	e->next = e->prev = e;
}

#define list_entry(ptr, type, member) container_of(ptr, type, member)
/* Move every entry of @from to the end of @to; @from is left empty. */
static inline void list_splice_init(struct kvmm_list *from, struct kvmm_list *to)
{
	if (list_empty(from))
		return;
	from->next->prev = to->prev;
	to->prev->next = from->next;
	from->prev->next = to;
	to->prev = from->prev;
	list_init(from);
}

#define list_for_each(pos, head) \
	for (pos = (head)->next; pos != (head); pos = pos->next)

/* ---- util.c ---- */

/*
 * The largest size, in bytes, computed from parameters: a pool, a tier or
 * a file must fit an off_t and a ssize_t as well as a size_t.
 */
#define KVMM_MAX_BYTES	((uint64_t)INT64_MAX)

extern const struct kvmm_alloc_ops kvmm_default_alloc_ops;
void *kvmm_malloc(struct kvmm_ctx *ctx, size_t size);
void *kvmm_zalloc(struct kvmm_ctx *ctx, size_t size);
void kvmm_mfree(struct kvmm_ctx *ctx, void *ptr, size_t size);
int kvmm_set_percent(struct kvmm_ctx *ctx, const char *name, uint64_t pct, uint32_t *dst);
void kvmm_report(const struct kvmm_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kvmm_bug(const struct kvmm_ctx *ctx, const char *cond,
	      const char *file, int line);

#if KVMM_DEBUG >= 3
void kvmm_debug_check(struct kvmm_ctx *ctx, const char *op);
#else
static inline void kvmm_debug_check(struct kvmm_ctx *ctx, const char *op)
{
	(void)ctx;
	(void)op;
}
#endif

int kvmm_model_cell(const struct kvmm_model *m, uint64_t *cellp, char *why, size_t len);
int kvmm_check_model(const struct kvmm_model *m);

/* ---- page_alloc.c ---- */

/**
 * struct kvmm_page - descriptor of one page frame (2 bytes; one per page)
 * @state: KVMM_PAGE_*
 * @tier: KVMM_TIER_* of the zone the frame belongs to
 * @flags: KVMM_PG_*; 0 on free and owned pages
 * @refcount: holders that keep the frame from being freed: the owning
 *	sequence or tree node holds one; 0 exactly when the page is free
 *
 * At page size 1 there is a descriptor per cached token, so it is kept as
 * small as the information allows: the descriptors of a 250k-token pool
 * fit in 500 KB of cache.  Which sequence or node owns the page is not
 * stored here: the owner's own pfn array says it, and kvmm_check()
 * cross-checks both directions.  LRU links live on tree nodes, not pages,
 * because reclaim works on leaves.
 */
struct kvmm_page {
	uint8_t state : 2;
	uint8_t tier : 2;
	uint8_t flags : 4;
	uint8_t refcount;
};

#define KVMM_HB_LEVELS	6	/* 64^6 bits: more than KVMM_MAX_PAGES */

/*
 * struct kvmm_hbitmap - free-page bitmap with summary levels.  A set bit
 * in level 0 is a free page; a set bit in level l > 0 says word i of level
 * l - 1 has a set bit.  Finding a free page is one word per level.
 */
struct kvmm_hbitmap {
	uint64_t *level[KVMM_HB_LEVELS];
	uint32_t nwords[KVMM_HB_LEVELS];
	uint32_t nr_levels;
	size_t bytes;
};

enum kvmm_wmark {
	KVMM_WMARK_MIN,
	KVMM_WMARK_LOW,
	KVMM_WMARK_HIGH,
	NR_KVMM_WMARK
};

/**
 * struct kvmm_zone - a pool of page frames of one tier
 * @pages: a descriptor per frame
 * @free: bitmap of free frames
 * @nr_pages: frames in the zone now (online): 0 .. nr_pages - 1
 * @max_pages: frames it may grow to; descriptors and bitmap cover these,
 *	and frames from @nr_pages up are offline: free-looking descriptors,
 *	no bit, never allocated
 * @nr_free: frames on @free
 * @cursor: next-fit position, so bulk allocations come out contiguous
 * @wmark: KVMM_WMARK_* levels, in pages
 * @tier: KVMM_TIER_*
 */
struct kvmm_zone {
	struct kvmm_page *pages;
	struct kvmm_hbitmap free;
	uint32_t nr_pages;
	uint32_t max_pages;
	uint32_t nr_free;
	uint32_t cursor;
	uint32_t wmark[NR_KVMM_WMARK];
	uint32_t tier;
};

#define KVMM_ALLOC_RESERVE	KVMM_EXTEND_RESERVE
#define KVMM_ALLOC_NORECLAIM	KVMM_EXTEND_NORECLAIM

int kvmm_zone_init(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		   uint32_t nr_pages, uint32_t max_pages, uint32_t tier);
void kvmm_zone_exit(struct kvmm_ctx *ctx, struct kvmm_zone *zone);
void kvmm_zone_online(struct kvmm_zone *zone, uint32_t nr_pages);
void kvmm_zone_offline(struct kvmm_zone *zone, uint32_t nr_pages);
void kvmm_zone_isolate(struct kvmm_zone *zone, uint32_t from);
void kvmm_zone_unisolate(struct kvmm_zone *zone, uint32_t from);
uint32_t kvmm_zone_count_free(const struct kvmm_zone *zone, uint32_t from, uint32_t to);
int kvmm_zone_reserve(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		      uint64_t nr, uint32_t flags);
void __kvmm_alloc_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
			uint32_t nr, int32_t *pfns);
int kvmm_alloc_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		     uint32_t nr, int32_t *pfns, uint32_t flags);
void kvmm_free_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		     const int32_t *pfns, uint32_t nr);
void kvmm_pages_to_tree(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr);
void kvmm_pages_set_state(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr,
			  uint8_t state);
void kvmm_set_page_flags(struct kvmm_zone *zone, const int32_t *pfns,
			 uint32_t nr, uint8_t set, uint8_t clear);
bool kvmm_zone_test_free(const struct kvmm_zone *zone, uint32_t pfn);
bool kvmm_alloc_pfn(struct kvmm_zone *zone, uint32_t pfn);
uint32_t kvmm_alloc_pfns(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr);

/* ---- prefix_tree.c ---- */

#define KVMM_NODE_EVICTABLE	(1u << 0)	/* on a reclaim list */
#define KVMM_NODE_ROOT		(1u << 1)
#define KVMM_NODE_IO		(1u << 2)	/* its pages are being read up by a
						 * promotion (promote.c): it is
						 * locked, and nothing splits it,
						 * moves it or adopts into it */
#define KVMM_NODE_SHADOW	(1u << 3)	/* on the device, with a copy of its
						 * pages on the host tier (tier.c) */
#define KVMM_NODE_KEYED		(1u << 4)	/* a keyed space's root, or one of its
						 * values (keyed.c) */
#define KVMM_NODE_REMOTE	(1u << 5)	/* its pages were pushed to the remote
						 * tier, or are being (remote.c): a
						 * write-through skips it */
#define KVMM_NODE_PREFETCHED	(1u << 6)	/* a prefetch brought its pages to the
						 * device and no MATCH mapped them yet
						 * (promote.c), or a keyed prefetch
						 * brought a value's to the host tier
						 * and no get read it yet (keyed.c);
						 * counted in ctx->prefetched */
#define KVMM_NODE_KREAD		(1u << 7)	/* a keyed value a prefetch is reading
						 * up from an I/O store (keyed.c): it
						 * is locked; a ring's get of it waits
						 * for the read */

/* Words of a keyed value's key (struct kvmm_key), the start of its edge. */
#define KVMM_KEY_WORDS		4

/**
 * struct kvmm_node - a prefix-tree node: one edge of token ids and the
 *	pages that hold their KV
 * @parent: NULL for a namespace root
 * @hnext: chain in the tree's child hash, keyed by (parent, first page)
 * @hpprev: the pointer that points at this node in its chain (a bucket
 *	or the previous node's @hnext), so unlinking needs no search
 * @sibling: link in @parent's @children
 * @children: child nodes, no order
 * @lru: link on a reclaim list, while KVMM_NODE_EVICTABLE
 * @shadow: link on the context's list of copies, while KVMM_NODE_SHADOW;
 *	the copy's frames follow @pfns in the same block (kvmm_node_shadow())
 * @tokens: @len token ids; the same block holds @pfns
 * @pfns: @len / page_size page frame numbers
 * @ids: while events are on, the identities of the page before the
 *	edge and of its pages (1 + @len / page_size keys, kvmm_tier_keys()),
 *	kept by the first event that named them so that no later one walks
 *	the prefix again; NULL until then (events.c)
 * @atime: logical time of the last match or insert through this node;
 *	never older than the parent's (see vmscan.c)
 * @len: tokens on the edge, a multiple of the page size
 * @lock_ref: sequences and pins that hold this node or a descendant
 * @ns: namespace id (roots only)
 * @tkids: children on the same tier as this node (non-roots only); a
 *	node with none is a leaf of its tier, which reclaim may take
 * @hits: matches and inserts that reached this node (saturating)
 * @pin_ref: pins ending at this node or below it
 * @pins: pins ending at this node
 * @keep_pins: of those, pins that belong to no ring (direct API, PIN_KEEP)
 * @prio: eviction priority, lower goes first
 * @flags: KVMM_NODE_*
 * @tier: KVMM_TIER_* holding @pfns; never faster than the parent's
 * @id: unique for the context's life (dumps name nodes by it)
 *
 * All fields are protected by the context (one driver at a time).
 */
struct kvmm_node {
	struct kvmm_node *parent;
	struct kvmm_node *hnext;
	struct kvmm_node **hpprev;
	struct kvmm_list sibling;
	struct kvmm_list children;
	struct kvmm_list lru;
	struct kvmm_list shadow;
	uint32_t *tokens;
	int32_t *pfns;
	struct kvmm_key *ids;
	uint64_t atime;
	uint32_t len;
	uint32_t lock_ref;
	union {
		uint32_t ns;
		uint32_t tkids;
	};
	uint32_t pin_ref;
	uint16_t hits;
	uint8_t pins;
	uint8_t keep_pins;
	uint8_t prio;
	uint8_t flags;
	uint8_t tier;
	uint64_t id;
};

/**
 * struct kvmm_tree - the prefix cache of one context
 * @buckets: child hash; chains through kvmm_node.hnext
 * @mask: bucket count - 1
 * @old: while a resize is under way, the previous, half-size table;
 *	its buckets below @rehash have been moved to @buckets
 * @old_mask: its bucket count - 1
 * @rehash: next bucket of @old to move
 * @nr_hashed: nodes in the hash, roots included
 * @clock: logical time, advanced on every node access
 * @nr_nodes: nodes, roots excluded
 * @cached: per tier, pages held by nodes
 * @protected: per tier, pages held by locked nodes
 * @pinned: pages of nodes with a pin at or below them
 * @shadowed: pages of nodes with a copy on the host tier (the copies'
 *	frames are CACHED on that tier, not counted in @cached)
 * @shadows: those nodes, oldest copy first (struct kvmm_node.shadow)
 * @roots: namespace roots, linked through kvmm_node.sibling
 * @next_id: the next node id
 * @free_nodes: node cache: free node structs, chained through hnext
 * @slabs: blocks the node cache carved nodes from, chained through their
 *	first node's parent field
 * @page_arrays: arrays of a page entry per page that each node's block
 *	holds after its tokens (its frames, then whatever its owner keeps
 *	per page: the tier layer's copy frames); a split splits them all
 * @split: when not NULL, called after a split moved the head of @tail's
 *	edge into the new node @head, for the per-node state of the layer
 *	that set it
 */
struct kvmm_tree {
	struct kvmm_list roots;
	uint64_t next_id;
	struct kvmm_node *free_nodes;
	struct kvmm_node *slabs;
	struct kvmm_node **buckets;
	uint64_t mask;
	struct kvmm_node **old;
	uint64_t old_mask;
	uint64_t rehash;
	uint64_t nr_hashed;
	uint64_t clock;
	uint64_t nr_nodes;
	uint64_t cached[KVMM_NR_TIERS];
	uint64_t protected[KVMM_NR_TIERS];
	uint64_t pinned;
	uint64_t shadowed;
	struct kvmm_list shadows;
	uint32_t page_arrays;
	void (*split)(struct kvmm_ctx *ctx, struct kvmm_node *head, struct kvmm_node *tail);
};

/**
 * struct kvmm_ns - a namespace: its root, and what it holds of the pool
 * @root: the namespace's root node (KVMM_NODE_ROOT); roots are allocated
 *	as part of this, never from the node cache
 * @pinned: pages of its nodes with a pin at or below them (device only:
 *	pinned nodes never leave it)
 * @cached: device pages its nodes hold
 * @keyed: a keyed space's root (keyed.c): per tier, pages its values hold
 *
 * Protected by the context, as the tree.  kvmm_check() recounts them.
 */
struct kvmm_ns {
	struct kvmm_node root;
	uint64_t pinned;
	uint64_t cached;
	uint64_t keyed[KVMM_NR_TIERS];
};

/*
 * struct kvmm_path - where a walk of the tree stopped.  @node is the
 * deepest node reached; @split is the number of its tokens the key
 * matched when that is fewer than its length (0 when the walk ended on a
 * node boundary); @matched counts tokens from the root.
 */
struct kvmm_path {
	struct kvmm_node *node;
	uint32_t split;
	uint32_t matched;
};

/*
 * struct kvmm_insert - where kvmm_tree_insert() put a key.  @match is the
 * deepest node of the path the tree already had for it (split so that it
 * ends on a node boundary; the start node when there was none) and
 * @matched its tokens, counted from the start node; @end is the node the
 * key now ends on: the new leaf, or @match when the tree had it all.
 */
struct kvmm_insert {
	struct kvmm_node *match;
	struct kvmm_node *end;
	uint32_t matched;
};

int kvmm_tree_init(struct kvmm_ctx *ctx);
void kvmm_tree_exit(struct kvmm_ctx *ctx);
struct kvmm_node *kvmm_tree_root(struct kvmm_ctx *ctx, uint32_t ns,
				 bool create);
struct kvmm_node *kvmm_tree_lookup_child(const struct kvmm_ctx *ctx,
					 const struct kvmm_node *parent,
					 const uint32_t *key);
void kvmm_tree_walk(struct kvmm_ctx *ctx, struct kvmm_node *from,
		    const uint32_t *key, uint32_t n, struct kvmm_path *path);
int kvmm_tree_split(struct kvmm_ctx *ctx, struct kvmm_path *path);
void kvmm_tree_touch(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_tree_lock(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_tree_unlock(struct kvmm_ctx *ctx, struct kvmm_node *node);
void __kvmm_tree_unlock(struct kvmm_ctx *ctx, struct kvmm_node *node, bool touch);
int kvmm_tree_insert(struct kvmm_ctx *ctx, struct kvmm_node *from,
		     const uint32_t *key, uint32_t n, const int32_t *pfns,
		     struct kvmm_insert *ins);
void kvmm_tree_delete_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node);
struct kvmm_node *kvmm_tree_add_leaf(struct kvmm_ctx *ctx, struct kvmm_node *parent,
				     const uint32_t *key, uint32_t n,
				     const int32_t *pfns, uint32_t tier);
struct kvmm_node *kvmm_tree_keyed_root(struct kvmm_ctx *ctx, uint32_t ns);
void kvmm_tree_keyed_root_free(struct kvmm_ctx *ctx, struct kvmm_node *root);
struct kvmm_node *kvmm_tree_add_keyed(struct kvmm_ctx *ctx, struct kvmm_node *root,
				      const uint32_t *key, uint32_t pages,
				      const int32_t *pfns, uint32_t tier, uint32_t *buf);
uint32_t *kvmm_tree_keyed_buf(struct kvmm_ctx *ctx, const uint32_t *key, uint32_t pages,
			      const int32_t *pfns);
void kvmm_tree_keyed_buf_free(struct kvmm_ctx *ctx, uint32_t *buf, uint32_t pages);
void kvmm_tree_prefetch(const struct kvmm_node *node);
uint32_t kvmm_tree_fill(const struct kvmm_ctx *ctx, const struct kvmm_node *from,
			const struct kvmm_node *to, int32_t *dst);
bool kvmm_node_is_leaf(const struct kvmm_node *node);
struct kvmm_node *kvmm_tree_next(struct kvmm_node *root,
				 struct kvmm_node *node);
struct kvmm_node *kvmm_tree_skip(struct kvmm_node *root, struct kvmm_node *node);
struct kvmm_node *kvmm_tree_find_id(struct kvmm_ctx *ctx, uint64_t id);
uint64_t kvmm_tree_bfs(struct kvmm_ctx *ctx, struct kvmm_node **q);
size_t kvmm_tree_bfs_bytes(const struct kvmm_ctx *ctx);

static inline struct kvmm_ns *kvmm_root_ns(const struct kvmm_node *root)
{
	return container_of(root, struct kvmm_ns, root);
}

/* The namespace @node is in: O(depth), as every upward walk. */
static inline struct kvmm_ns *kvmm_node_ns(const struct kvmm_node *node)
{
	while (node->parent)
		node = node->parent;
	return kvmm_root_ns(node);
}

/* Pages of tier @tier that keyed value @node holds change by @delta. */
#define kvmm_keyed_pages_add(ctx, node, tier, delta)				\
	do {									\
		if ((node)->flags & KVMM_NODE_KEYED) {				\
			kvmm_root_ns((node)->parent)->keyed[tier] += (uint64_t)(delta); \
			(ctx)->keyed_pages[tier] += (uint64_t)(delta);		\
		}								\
	} while (0)

/* Device pages the namespace of @node holds change by @delta. */
static inline void kvmm_ns_cached_add(const struct kvmm_node *node, uint32_t tier,
				      int64_t delta)
{
	if (tier == KVMM_TIER_DEVICE)
		kvmm_node_ns(node)->cached += (uint64_t)delta;
}

/* ---- vmscan.c ---- */

struct kvmm_lruvec;

/**
 * struct kvmm_evict_ops - an eviction policy: which evictable leaf goes next
 * @name: what kvmm_set_evict_policy() selects it by
 * @add: @node became an evictable leaf; @oldest when it is the parent
 *	of the victim just taken (its atime is no newer than any listed leaf)
 * @del: @node stops being evictable
 * @touch: @node, evictable, was accessed
 * @victim: the next leaf to evict, or NULL; does not remove it
 *
 * Lists live in the lruvec so that switching policies only re-adds nodes.
 */
struct kvmm_evict_ops {
	const char *name;
	void (*add)(struct kvmm_lruvec *lv, struct kvmm_node *node, bool oldest);
	void (*del)(struct kvmm_lruvec *lv, struct kvmm_node *node);
	void (*touch)(struct kvmm_lruvec *lv, struct kvmm_node *node);
	struct kvmm_node *(*victim)(struct kvmm_lruvec *lv);
};

#define KVMM_LRU_LISTS	2	/* per priority: inactive, active */

/**
 * struct kvmm_lruvec - the reclaim lists of a context
 * @ops: the policy in force
 * @lists: per priority, the policy's lists of evictable leaves
 * @nr_leaves: nodes on any list
 * @evictable: pages of unlocked nodes, leaves or not
 */
struct kvmm_lruvec {
	const struct kvmm_evict_ops *ops;
	struct kvmm_list lists[KVMM_NR_PRIO][KVMM_LRU_LISTS];
	uint64_t nr_leaves;
	uint64_t evictable;
};

/*
 * struct kvmm_scan_control - one reclaim pass on tier @tier.  @nr_to_reclaim
 * pages are wanted; @nr_reclaimed (pages freed on @tier), @nr_evicted
 * (nodes dropped) and @nr_demoted (pages moved a tier down) say what it did.
 * With @drop set nothing is demoted: victims go, with what hangs below them.
 */
struct kvmm_scan_control {
	uint64_t nr_to_reclaim;
	uint64_t nr_reclaimed;
	uint64_t nr_evicted;
	uint64_t nr_demoted;
	uint32_t tier;
	bool drop;
};

void kvmm_lruvec_init(struct kvmm_lruvec *lv, const struct kvmm_evict_ops *ops);
const struct kvmm_evict_ops *kvmm_evict_ops_lookup(const char *name);
void kvmm_lru_update(struct kvmm_ctx *ctx, struct kvmm_node *node);
void __kvmm_lru_update(struct kvmm_ctx *ctx, struct kvmm_node *node, bool oldest);
void kvmm_lru_del(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_lru_touch(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_shrink(struct kvmm_ctx *ctx, struct kvmm_scan_control *sc);

/* ---- tier.c ---- */
int kvmm_tiers_init(struct kvmm_ctx *ctx);
void kvmm_tiers_exit(struct kvmm_ctx *ctx);
bool kvmm_tier_below(const struct kvmm_ctx *ctx, uint32_t tier, uint32_t *lower);
int kvmm_demote(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_drop_subtree(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_path_tiers(const struct kvmm_node *root, const struct kvmm_path *path,
		     uint32_t *tokens);
void kvmm_path_clip(struct kvmm_path *path);
uint32_t kvmm_tier_adopt(struct kvmm_ctx *ctx, struct kvmm_node *from,
			 struct kvmm_node *end, int32_t *pfns, uint32_t nr);
void kvmm_drop_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_write_through(struct kvmm_ctx *ctx, struct kvmm_node *from,
			struct kvmm_node *end);
void kvmm_shadow_drop(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_shadows_shrink(struct kvmm_ctx *ctx, struct kvmm_scan_control *sc);
void kvmm_node_moved(struct kvmm_ctx *ctx, struct kvmm_node *node, uint32_t to,
		     const int32_t *pfns, uint32_t lt, uint64_t t0);
struct kvmm_store_key *kvmm_tier_keys(struct kvmm_ctx *ctx, const struct kvmm_node *node,
				      struct kvmm_store_key *keys);
struct XXH3_state_s;
uint32_t kvmm_node_hash_start(const struct kvmm_node *node, struct kvmm_node **path,
			      struct XXH3_state_s *st, uint64_t *parent);
int kvmm_tier_copy_down(struct kvmm_ctx *ctx, uint32_t from, const int32_t *src,
			uint32_t to, const int32_t *dst, uint32_t nr, void **addrs,
			uint64_t *sums, const struct kvmm_store_key *keys, uint32_t chan);
void kvmm_tier_copy_failed(struct kvmm_ctx *ctx, uint32_t from, uint32_t to, int err);
bool kvmm_tier_make_room(struct kvmm_ctx *ctx, uint32_t tier, uint32_t nr);
uint64_t kvmm_now_ns(void);

/* ---- recover.c ---- */
void kvmm_tier_recover(struct kvmm_ctx *ctx, uint32_t tier);
bool kvmm_orphans_adopt(struct kvmm_ctx *ctx, struct kvmm_node *root, const uint32_t *tokens,
			uint32_t n, struct kvmm_path *path);
uint64_t kvmm_orphans_live(const struct kvmm_ctx *ctx);
void kvmm_orphans_free(struct kvmm_ctx *ctx);

/* ---- migrate.c, promote.c ---- */

struct kvmm_migrate;
struct kvmm_iow;
struct kvmm_owner;

int kvmm_promote(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		 uint32_t n, struct kvmm_owner *owner, uint64_t user_data);
void kvmm_promo_cancel(struct kvmm_ctx *ctx, struct kvmm_migrate *job);
void kvmm_promos_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner);
int __kvmm_prefetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n,
		    uint32_t budget, uint32_t flags, struct kvmm_owner *owner, uint64_t user_data);
int kvmm_prefetch_cancel(struct kvmm_ctx *ctx, const struct kvmm_owner *owner,
			 uint64_t user_data);
void kvmm_prefetch_hit(struct kvmm_ctx *ctx, const struct kvmm_node *root,
		       struct kvmm_node *node);
void kvmm_writeback(struct kvmm_ctx *ctx);
void kvmm_writeback_tier(struct kvmm_ctx *ctx, uint32_t tier);
bool kvmm_writeback_serves(const struct kvmm_ctx *ctx, uint32_t tier);
bool kvmm_writeback_room(struct kvmm_ctx *ctx, uint32_t tier, uint64_t nr);
void kvmm_iow_idle(struct kvmm_ctx *ctx);
void kvmm_writeback_cancel(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_migrate_reap(struct kvmm_ctx *ctx);
int kvmm_iow_start(struct kvmm_ctx *ctx);
void kvmm_iow_stop(struct kvmm_ctx *ctx);
int kvmm_migrations_check(const struct kvmm_ctx *ctx, uint8_t *const *marks,
			  uint8_t mark_io, uint64_t *io, uint64_t *locks, uint64_t *nodes,
			  const char **why);

/* ---- keyed.c ---- */

#define KVMM_NS_ANY	UINT32_MAX	/* kvmm_kspace_of(): whoever asks */

struct kvmm_kspace;
struct kvmm_key;
void kvmm_keyed_exit(struct kvmm_ctx *ctx);
struct kvmm_kspace *kvmm_kspace_of(struct kvmm_ctx *ctx, uint32_t id, uint32_t ns);
uint64_t kvmm_kspace_value_bytes(const struct kvmm_kspace *s);
void kvmm_keyed_store_keys(struct kvmm_ctx *ctx, const struct kvmm_node *node,
			   struct kvmm_store_key *keys);
int kvmm_keyed_recover(struct kvmm_ctx *ctx, uint32_t ns, const uint64_t *fp,
		       uint64_t value_bytes, const uint64_t *key, const uint64_t *id,
		       const int32_t *pfns, uint32_t nr, uint32_t tier);
int kvmm_keyed_run_keys(struct kvmm_ctx *ctx, struct kvmm_kspace *s,
			const struct kvmm_key *keys, uint32_t n, bool del, int32_t *const *res,
			bool held);
int kvmm_keyed_remote_exists(struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
			     const struct kvmm_key *keys, uint32_t n, uint32_t from,
			     int32_t *const *res);
/* ---- remote.c ---- */
int kvmm_remote_init(struct kvmm_ctx *ctx);
void kvmm_remote_exit(struct kvmm_ctx *ctx);
void kvmm_remote_snapshot(struct kvmm_ctx *ctx);
void kvmm_remote_stats(const struct kvmm_ctx *ctx, uint64_t *v);
int kvmm_remote_check(const struct kvmm_ctx *ctx, uint8_t *const *marks, uint8_t mark_io,
		      uint64_t *io, uint64_t *locks, const char **why);
int kvmm_remote_ring(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
		     bool fetch, uint32_t ns, const uint32_t *tokens, uint32_t n);
void kvmm_remote_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner);
int kvmm_remote_push_held(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			  uint32_t n, bool held);
int kvmm_remote_fetch_held(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			   uint32_t n, bool held);
void kvmm_remote_write_through(struct kvmm_ctx *ctx, struct kvmm_node *end);
void kvmm_remote_ns_seed(uint32_t ns, uint64_t seed[2]);
void kvmm_remote_name_node(struct kvmm_ctx *ctx, const struct kvmm_node *node,
			   const uint32_t *tokens, struct kvmm_remote_page *out);
struct kvmm_migrate;
void kvmm_remote_demoted(struct kvmm_ctx *ctx, struct kvmm_migrate *job);
int kvmm_keyed_prefetch_in(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
			   struct kvmm_kspace *s, const struct kvmm_key *keys, uint32_t n,
			   uint32_t budget, uint32_t flags);
int kvmm_keyed_prefetch_cancel(struct kvmm_ctx *ctx, const struct kvmm_owner *owner,
			       uint64_t user_data);
int kvmm_keyed_ring(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
		    struct kvmm_kspace *s, bool put, const struct kvmm_key *keys,
		    void *const *bufs, int32_t *const *resps, uint32_t n);
void kvmm_keyed_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner);
bool kvmm_keyed_pending(const struct kvmm_ctx *ctx, const struct kvmm_owner *owner);
void kvmm_keyed_stats(const struct kvmm_ctx *ctx, uint64_t *v);
int kvmm_set_keyed_share(struct kvmm_ctx *ctx, uint64_t pct);
int kvmm_keyed_dump(const struct kvmm_ctx *ctx, uint32_t slot, struct kvmm_dump_kspace *rec);
int kvmm_set_ns_kspaces(struct kvmm_ctx *ctx, uint64_t n);
int kvmm_keyed_space_remove_in(struct kvmm_ctx *ctx, struct kvmm_kspace *s);
int kvmm_set_ns_kjob_bytes(struct kvmm_ctx *ctx, uint64_t bytes);
uint64_t kvmm_keyed_ns_pages(const struct kvmm_ctx *ctx, uint32_t ns, uint32_t tier);
int kvmm_keyed_check(const struct kvmm_ctx *ctx, uint8_t *const *marks, uint8_t mark_io,
		     uint64_t *io, uint64_t *locks, const char **why);

/* ---- seq.c ---- */

/**
 * struct kvmm_seq - an open sequence (a request)
 * @root: namespace root the sequence matches and inserts under
 * @node: deepest node the sequence holds a lock on; @root when none
 * @len: tokens with KV; the row maps ceil(len / page_size) pages
 * @cached: leading tokens on tree pages; ends at @node's end
 * @ns: namespace id
 * @next_free: free-row list link while closed
 * @mark: batch stamp, to refuse a sequence named twice in one batch
 * @owner: id of the owner (owner.c) that opened it, a ring; 0 for the
 *	direct API
 * @promo: its promotion in flight (promote.c), or NULL; while there is
 *	one, only CLOSE and RETRACT (which cancel it) may touch the sequence
 * @gen: generation of the row, 1..KVMM_SEQ_GEN_MAX, one more at every
 *	open (0 before the first): the ring's id is KVMM_SEQ_ID(row, @gen)
 * @open: the row is in use
 */
struct kvmm_seq {
	struct kvmm_node *root;
	struct kvmm_node *node;
	uint32_t len;
	uint32_t cached;
	uint32_t ns;
	uint32_t next_free;
	uint32_t mark;
	uint32_t owner;
	struct kvmm_migrate *promo;
	uint16_t gen;
	bool open;
};

int kvmm_seqs_init(struct kvmm_ctx *ctx);
struct kvmm_seq *kvmm_seq_lookup(const struct kvmm_ctx *ctx, uint32_t seq);
void kvmm_seqs_exit(struct kvmm_ctx *ctx);
int __kvmm_seq_commit(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		      uint32_t n);
int __kvmm_seq_match(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		     uint32_t n, uint32_t *below);
int __kvmm_seq_extend(struct kvmm_ctx *ctx, const uint32_t *seqs, const uint32_t *ns,
		      size_t stride, uint32_t count, uint32_t flags);

/* ---- prefix.c ---- */
#define KVMM_NO_LIMIT	UINT64_MAX
int __kvmm_prefix_pin(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
		      uint32_t n, bool keep, uint64_t limit, struct kvmm_node **nodep);
uint64_t kvmm_ns_pin_limit(const struct kvmm_ctx *ctx);
uint64_t kvmm_ns_cache_limit(const struct kvmm_ctx *ctx);
int kvmm_set_ns_pin_pages(struct kvmm_ctx *ctx, uint64_t pages);
int kvmm_set_ns_cache_share(struct kvmm_ctx *ctx, uint64_t pct);
int __kvmm_prefix_pinned(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			 uint32_t n, struct kvmm_node **nodep);
void kvmm_node_unpin(struct kvmm_ctx *ctx, struct kvmm_node *node, bool keep);

/* ---- events.c ---- */

struct kvmm_evbuf;
int kvmm_set_events(struct kvmm_ctx *ctx, uint64_t bytes);
int kvmm_set_event_tokens(struct kvmm_ctx *ctx, uint64_t on);
void kvmm_events_exit(struct kvmm_ctx *ctx);
void __kvmm_event_node(struct kvmm_ctx *ctx, uint8_t type, struct kvmm_node *node,
		       uint32_t from, uint32_t to);
size_t kvmm_node_ids_bytes(const struct kvmm_ctx *ctx, uint32_t len);
void kvmm_node_ids_free(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_node_ids_split(struct kvmm_ctx *ctx, struct kvmm_node *head, struct kvmm_node *tail);
int kvmm_events_ids_check(const struct kvmm_ctx *ctx, const char **why,
			  const struct kvmm_node **bad);
int kvmm_events_read(struct kvmm_ctx *ctx, uint64_t cursor, bool filter, uint32_t ns,
		     bool tokens, void *out, uint32_t len, uint32_t *cflags);
uint64_t kvmm_events_bytes(const struct kvmm_ctx *ctx);
int kvmm_events_check(const struct kvmm_ctx *ctx, const char **why);

/* ---- owner.c ---- */

struct kvmm_owner;

/**
 * struct kvmm_owner_ops - how the core calls the layer above back
 * @complete: post the result of a command @o deferred (a PROMOTE);
 *	ctx->lock held, from whichever thread finishes it
 * @release: kvmm_destroy() with @o still registered: the layer gives
 *	back what it holds (kvmm_owner_del()) and its own memory
 */
struct kvmm_owner_ops {
	void (*complete)(struct kvmm_owner *o, uint64_t user_data, int32_t res);
	void (*release)(struct kvmm_owner *o);
};

/**
 * struct kvmm_owner - a holder of sequences and pins above the core (a
 *	ring's dispatcher embeds one)
 * @link: on ctx->owners (under ctx->lock)
 * @id: its id, 1 up: struct kvmm_seq.owner of the sequences it opened
 * @pins: nodes of the pins it took without KVMM_PIN_KEEP, @nr_pins of
 *	@cap_pins (under ctx->lock)
 * @ops: its layer's callbacks
 */
struct kvmm_owner {
	struct kvmm_list link;
	uint32_t id;
	struct kvmm_node **pins;
	uint32_t nr_pins, cap_pins;
	const struct kvmm_owner_ops *ops;
};

void kvmm_owner_add(struct kvmm_ctx *ctx, struct kvmm_owner *o,
		    const struct kvmm_owner_ops *ops);
void kvmm_owner_del(struct kvmm_ctx *ctx, struct kvmm_owner *o);
void kvmm_owners_release(struct kvmm_ctx *ctx);
void kvmm_owner_complete(struct kvmm_owner *o, uint64_t user_data, int32_t res);
int kvmm_owner_reserve_pin(struct kvmm_ctx *ctx, struct kvmm_owner *o);
void kvmm_owner_add_pin(struct kvmm_owner *o, struct kvmm_node *node);
bool kvmm_owner_del_pin(struct kvmm_owner *o, const struct kvmm_node *node);
uint64_t kvmm_owners_pins_on(const struct kvmm_ctx *ctx, const struct kvmm_node *node);
uint32_t kvmm_pin_owner(const struct kvmm_ctx *ctx, const struct kvmm_node *node);
uint32_t kvmm_pins_drop_node(struct kvmm_ctx *ctx, struct kvmm_node *node);

/* ---- flush.c ---- */

int64_t kvmm_flush_held(struct kvmm_ctx *ctx, uint32_t timeout_ms,
			struct kvmm_flush_info *info);

/* ---- stats.c ---- */

enum kvmm_event {
	EV_MATCH_CALLS,
	EV_MATCH_TOKENS,
	EV_HIT_TOKENS,
	EV_INSERT_TOKENS,
	EV_DEDUP_PAGES,
	EV_SPLITS,
	EV_ALLOC_PAGES,
	EV_FREE_PAGES,
	EV_ALLOC_FAIL,
	EV_RECLAIM_RUNS,
	EV_EVICT_NODES,
	EV_EVICT_PAGES,
	EV_RETRACTS,
	EV_PROMOTE_ASYNC,
	EV_PROMOTE_CANCELED,
	EV_WT_PAGES,
	EV_WT_SKIP_PAGES,
	EV_DEMOTE_FREE_PAGES,
	EV_SHADOW_DROP_PAGES,
	EV_MIGRATED,
	EV_WRITEBACK_RUNS,
	EV_KEYED_PUTS,
	EV_KEYED_GETS,
	EV_KEYED_MISSES,
	EV_KEYED_DROPS,
	EV_KEYED_DELETES,
	EV_KEYED_REMOTE_GETS,	/* values a get brought from the remote tier */
	EV_REMOTE_FETCH_TOKENS,	/* prefix tokens kvmm_remote_fetch() brought */
	EV_REMOTE_PUSH_TOKENS,	/* prefix tokens kvmm_remote_push() left there */
	EV_REMOTE_DEMOTE_PAGES,	/* pages demotions wrote there (remote.c) */
	EV_CACHE_EVENTS,	/* cache events recorded (events.c) */
	EV_CACHE_EVENTS_DROPPED,
	EV_ORPHAN_PAGES,	/* orphans of a restart hung in the tree (recover.c) */
	EV_THROTTLE_PAGES,	/* pages direct reclaim wrote to NVMe itself */
	EV_PREFETCH_PAGES,	/* pages prefetches moved to the device (promote.c) */
	EV_PREFETCH_HITS,	/* ... that a MATCH then mapped */
	EV_PREFETCH_CANCELED,	/* pages of prefetches cancelled (given back) */
	NR_KVMM_EVENTS
};

/* Per-tier events of the lower tiers (kvmm_ctx.tier_events[tier]). */
enum kvmm_tier_event {
	TEV_HIT_TOKENS,		/* tokens promoted from the tier into a sequence */
	TEV_DEMOTE_PAGES,	/* pages moved onto the tier */
	TEV_PROMOTE_PAGES,	/* pages moved back to the device */
	TEV_EVICT_PAGES,	/* pages dropped from the tier */
	TEV_BYTES_IN,
	TEV_BYTES_OUT,
	TEV_NS_IN,
	TEV_NS_OUT,
	TEV_CSUM_FAIL,		/* pages that failed verification (now misses) */
	TEV_IO_ERRORS,
	TEV_OFFER_TOKENS,	/* matched tokens found on the tier */
	NR_KVMM_TIER_EVENTS
};

/* ---- the context ---- */

/**
 * struct kvmm_ctx - one KV pool and everything that manages it
 * @params: a copy of the creation parameters (strings not kept)
 * @alloc: metadata allocator and its cookie
 * @meta_bytes: metadata memory held now
 * @page_size: tokens per page; @page_shift its log2
 * @zone: per tier, its pool of pages; a lower tier with no pages is absent
 * @tree: the prefix cache
 * @lruvec: per tier, its reclaim lists
 * @store: per lower tier, the store holding its bytes, and its state
 * @staging: page addresses for one node's move down a tier
 * @tier_pfns: frames for the same
 * @tier_keys, @tier_path: identities of a node's pages for an I/O store,
 *	and the ancestors they are hashed from (one allocation with @staging)
 * @tier_events: per lower tier, enum kvmm_tier_event counters
 * @seqs: a descriptor per page-table row
 * @table: the page table, @max_seqs rows of @row_pages entries
 * @free_seq: head of the free-row list, or UINT32_MAX
 * @nr_open: open sequences
 * @batch: stamp of the last extend batch
 * @events: event counters, enum kvmm_event
 * @backend: the backend holding the KV bytes, and its state
 * @dma: the backend's registration hooks, handed to the stores
 * @lock: taken once per ring batch (and by kvmm_lock()); the direct API
 *	does not take it
 * @owners: holders above the core registered on it (struct kvmm_owner:
 *	the rings' dispatchers)
 * @next_owner_id: their ids, 1 up; 0 is the direct API
 * @migrations: migrate jobs in flight (struct kvmm_migrate.link):
 *	promotions and demotions
 * @io_pages: per tier, frames they hold there (KVMM_PAGE_IO)
 * @prefetched: nodes marked KVMM_NODE_PREFETCHED (promote.c)
 * @writeback: per tier, its pages background reclaim is moving down
 * @iow: the I/O worker that copies them, when an I/O store exists
 * @ns_pin_pages: pages a ring bound to a namespace may have pinned in it;
 *	KVMM_NS_PIN_AUTO for half the device pool
 * @ns_cache_share: percent of the device pool one namespace may cache
 *	before reclaim takes its own cache first; 100 for no share
 * @kspaces: the keyed spaces (keyed.c) by slot, @nr_kspaces slots used of
 *	@cap_kspaces; a removed space's slot is NULL until it is taken again
 * @nr_kspaces_live: spaces in them
 * @kspace_gen: spaces removed so far (masked), the generation a new
 *	space's id carries
 * @ns_kspaces: spaces one namespace may hold (KVMM_SET_NS_KSPACES)
 * @kjobs: keyed commands in flight (struct kvmm_kjob.link)
 * @kjobs_done: signalled, under @lock, when the worker finished one
 * @ns_kjob_bytes: memory the keyed jobs of one namespace may hold at once
 *	(KVMM_SET_NS_KJOB_BYTES)
 * @keyed_values: values of every space, on every tier
 * @keyed_pages: per tier, pages they hold
 * @keyed_share: percent of each lower tier keyed values may hold, and
 *	100 minus it the tree's demoted pages, before reclaim takes that
 *	kind first; 100 for no split
 * @evbuf: the cache event buffer (events.c), NULL while events are off
 * @ev_seq: the sequence number of the next cache event; kept when the
 *	buffer changes, so that readers' cursors stay meaningful
 * @ev_read: one past the newest event a reader was handed (EVENTS'
 *	hdr.next at most): an event overwritten from there on was read by
 *	nobody, and counts as dropped
 * @ev_tokens: the event buffer keeps token ids: 0, 1 or
 *	KVMM_EVENT_TOKENS_STORED (KVMM_SET_EVENT_TOKENS)
 * @hist: latency histograms (KVMM_HIST_*, DUMP KVMM_DUMP_HIST)
 */
struct kvmm_ctx {
	struct kvmm_params params;
	const struct kvmm_alloc_ops *alloc;
	void *alloc_priv;
	size_t meta_bytes;
	uint32_t page_size;
	uint32_t page_shift;
	struct kvmm_zone zone[KVMM_NR_TIERS];
	struct kvmm_tree tree;
	struct kvmm_lruvec lruvec[KVMM_NR_TIERS];
	const struct kvmm_store_ops *store[KVMM_NR_TIERS];
	void *store_priv[KVMM_NR_TIERS];
	void **staging;
	int32_t *tier_pfns;
	struct kvmm_store_key *tier_keys;
	struct kvmm_node **tier_path;
	struct kvmm_seq *seqs;
	int32_t *table;
	uint32_t max_seqs;
	uint32_t row_pages;
	uint32_t free_seq;
	uint32_t nr_open;
	uint32_t batch;
	uint64_t events[NR_KVMM_EVENTS];
	uint64_t tier_events[KVMM_NR_TIERS][NR_KVMM_TIER_EVENTS];
	const struct kvmm_backend_ops *backend;
	void *backend_priv;
	struct kvmm_dma dma;
	pthread_mutex_t lock;
	struct kvmm_list owners;
	uint32_t next_owner_id;
	struct kvmm_list migrations;
	uint64_t io_pages[KVMM_NR_TIERS];
	uint64_t prefetched;
	uint64_t writeback[KVMM_NR_TIERS];
	struct kvmm_iow *iow;
	uint64_t ns_pin_pages;
	uint32_t ns_cache_share;
	struct kvmm_kspace **kspaces;
	uint32_t nr_kspaces, cap_kspaces;
	uint32_t nr_kspaces_live;
	uint32_t kspace_gen;
	uint32_t ns_kspaces;
	struct kvmm_list kjobs;
	struct kvmm_list rjobs;		/* remote.c's pushes and fetches in flight */
	struct kvmm_list rreqs;		/* ... and rings' ones queued to the worker */
	struct kvmm_orphans *orphans;	/* a restart's pages waiting for their prefix */
	pthread_cond_t kjobs_done;
	uint64_t ns_kjob_bytes;
	uint64_t keyed_values;
	uint64_t frames_locks;	/* lock references the engine holds (frames.c) */
	uint64_t keyed_pages[KVMM_NR_TIERS];
	uint32_t keyed_share;
	/* the remote tier (keyed.c): its client, one caller at a time */
	const struct kvmm_remote_ops *remote;
	void *remote_priv;
	pthread_mutex_t remote_lock;
	struct kvmm_remote_stats remote_stats;	/* copied after every call, for STATS */
	struct kvmm_evbuf *evbuf;
	uint64_t ev_seq;
	uint64_t ev_read;
	uint8_t ev_tokens;
	struct kvmm_dump_hist hist[KVMM_HIST_LAST];
};

static inline void kvmm_count(struct kvmm_ctx *ctx, enum kvmm_event ev,
			      uint64_t n)
{
	ctx->events[ev] += n;
}

/*
 * A cache event about @node's pages (KVMM_EVENT_*): nothing but a test
 * while events are off.  Keyed values are the keyed store's, not the
 * prefix cache's, and are not told.
 */
static inline void kvmm_event_node(struct kvmm_ctx *ctx, uint8_t type,
				   struct kvmm_node *node, uint32_t from, uint32_t to)
{
	if (unlikely(ctx->evbuf != NULL) && !(node->flags & KVMM_NODE_KEYED))
		__kvmm_event_node(ctx, type, node, from, to);
}

/*
 * One observation of @ns nanoseconds in histogram @which (KVMM_HIST_*):
 * bucket i holds what took at most 2^i microseconds.
 */
static inline void kvmm_hist_observe(struct kvmm_ctx *ctx, uint32_t which, uint64_t ns)
{
	struct kvmm_dump_hist *h = &ctx->hist[which];
	uint64_t us = (ns + 999) / 1000;
	uint32_t b = us <= 1 ? 0 : 64 - (uint32_t)__builtin_clzll(us - 1);

	h->buckets[b < KVMM_HIST_BUCKETS ? b : KVMM_HIST_BUCKETS - 1]++;
	h->count++;
	h->sum_ns += ns;
}

static inline void kvmm_tier_count(struct kvmm_ctx *ctx, uint32_t tier,
				   enum kvmm_tier_event ev, uint64_t n)
{
	ctx->tier_events[tier][ev] += n;
}

static inline struct kvmm_zone *kvmm_node_zone(struct kvmm_ctx *ctx,
					       const struct kvmm_node *node)
{
	return &ctx->zone[node->tier];
}

/*
 * The frames of @node's copy on the host tier (write-through), valid while
 * KVMM_NODE_SHADOW: with that policy every node's block has room for them.
 */
static inline int32_t *kvmm_node_shadow(const struct kvmm_ctx *ctx,
					const struct kvmm_node *node)
{
	return node->pfns + (node->len >> ctx->page_shift);
}

static inline struct kvmm_lruvec *kvmm_node_lruvec(struct kvmm_ctx *ctx,
						   const struct kvmm_node *node)
{
	return &ctx->lruvec[node->tier];
}

static inline uint32_t kvmm_pages_of(const struct kvmm_ctx *ctx, uint32_t n)
{
	return (uint32_t)(((uint64_t)n + ctx->page_size - 1) >> ctx->page_shift);
}

static inline uint32_t kvmm_align_down(const struct kvmm_ctx *ctx, uint32_t n)
{
	return n & ~(ctx->page_size - 1);
}

/* @node moves, goes or was mapped: a prefetch brought it up for nothing more. */
static inline void kvmm_prefetch_forget(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	if (node->flags & KVMM_NODE_PREFETCHED) {
		node->flags &= (uint8_t)~KVMM_NODE_PREFETCHED;
		ctx->prefetched--;
	}
}

/* The page-table row of @seq, a checked sequence id or bare row. */
static inline int32_t *kvmm_row(const struct kvmm_ctx *ctx, uint32_t seq)
{
	return ctx->table + (size_t)KVMM_SEQ_ROW(seq) * ctx->row_pages;
}

#endif /* KVMM_INTERNAL_H */
