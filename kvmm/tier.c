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
 *   host reclaim:    victim leaf --demote--> NVMe (room made by NVMe reclaim)
 *                                  \--drop--> when there is none, or it fails
 *   NVMe reclaim:    victim leaf --drop-->
 *
 * The host tier is a memory store: the backend gathers and scatters
 * straight into its pages.  The NVMe tier is an I/O store below it: its
 * pages are written from the host tier's and read into the store's own
 * buffers, which the backend scatters from; so the NVMe tier needs a host
 * tier.  Every page written to NVMe carries its identity, a hash of its
 * whole prefix (kvmm_tier_keys()), which is how a restart puts it back in the
 * tree (kvmm_tier_recover()) and how a read knows the slot holds the page
 * the tree expects.
 *
 * Demotion keeps the node and moves its pages: the backend gathers the
 * device pages into the lower store's pages, the store seals them (a
 * checksum per page), the device pages are freed.  Promotion is the
 * reverse, after the store verified the pages (promote.c); a page that
 * fails is a miss: its node and everything below it is dropped, never
 * served.
 *
 * Where a sequence commits tokens whose prefix node was demoted, the node
 * adopts the freshly computed device pages and its lower copy is freed
 * (kvmm_tier_adopt(), which COMMIT calls after the tree's insert), so no
 * work is done twice.
 *
 * Write-through (kvmm_params.write_policy) gives a device node a copy on
 * the host tier when it is committed (kvmm_write_through()), or keeps
 * its host frames as that copy when it moves up from the host tier; its
 * demotion is then a swap that moves no byte.  The host tier gives up
 * copies only when it has no leaf left to reclaim.
 *
 * The core never reads KV bytes: it hands page addresses from the store to
 * the backend's gather and scatter.
 */
#include <stdlib.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

uint64_t kvmm_now_ns(void)
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
 * Scratch for moving one node down a tier: page addresses, keys, the
 * path's nodes and frames, a row's worth each (a path has no more nodes
 * than pages).
 */
static size_t scratch_bytes(const struct kvmm_ctx *ctx)
{
	return (size_t)ctx->row_pages * (sizeof(void *) + sizeof(struct kvmm_store_key) +
					 sizeof(struct kvmm_node *) + sizeof(int32_t));
}

/* The node nearest the device, for a host tier with no node configured. */
static int tier_numa_node(const struct kvmm_ctx *ctx)
{
	if (ctx->params.host_node >= 0 || !ctx->backend->numa_node)
		return ctx->params.host_node;
	return ctx->backend->numa_node(ctx->backend_priv);
}

/* The host tier's watermarks for background reclaim (kvmm_writeback()). */
static void host_wmarks(struct kvmm_zone *zone, const struct kvmm_params *p)
{
	uint32_t low = p->host_wmark_low, high = p->host_wmark_high;

	if (!low && !high) {
		low = (zone->nr_pages + 7) / 8;
		high = 2 * low < zone->nr_pages ? 2 * low : zone->nr_pages;
	}
	zone->wmark[KVMM_WMARK_LOW] = low;
	zone->wmark[KVMM_WMARK_HIGH] = high;
}

/*
 * Set up lower tier @tier of @nr pages: its zone and its store.  Nothing
 * is held on failure; a store's reason is reported.
 */
static int tier_init(struct kvmm_ctx *ctx, uint32_t tier, uint32_t nr, void *arg)
{
	const struct kvmm_params *p = &ctx->params;
	const struct kvmm_store_ops *ops = kvmm_store_lookup(tier);
	struct kvmm_store_cfg cfg;
	char why[512] = "";
	int ret;

	if (!ops) {
		kvmm_report(ctx, "tier %u: this build has no store for it", tier);
		return -EOPNOTSUPP;
	}
	ret = kvmm_zone_init(ctx, &ctx->zone[tier], nr, nr, tier);
	if (ret)
		return ret;
	if (tier == KVMM_TIER_HOST)
		host_wmarks(&ctx->zone[tier], p);
	cfg = (struct kvmm_store_cfg){
		.page_bytes = kvmm_page_bytes(&p->model, p->page_size),
		.nr_pages = nr,
		.tier = tier,
		.numa_node = tier == KVMM_TIER_HOST ? tier_numa_node(ctx) : -1,
		.arg = arg,
		.model = p->model,
		.page_size = p->page_size,
		.path = p->nvme_path,
		.qd = p->nvme_qd,
		.err = why,
		.err_len = sizeof(why),
		.dma = ctx->dma.reg ? &ctx->dma : NULL,
		.model_id = p->model_id,
		.flags = p->nvme_flags,
	};
	ret = ops->init(&cfg, &ctx->store_priv[tier]);
	if (why[0])	/* why it failed, or a note on how it went */
		kvmm_report(ctx, "%s tier: %s", ops->name, why);
	if (ret) {
		kvmm_zone_exit(ctx, &ctx->zone[tier]);
		return ret;
	}
	ctx->store[tier] = ops;
	return 0;
}

static void shadows_init(struct kvmm_ctx *ctx);

/**
 * kvmm_tiers_init() - set up the lower tiers the parameters ask for
 * @ctx: the context, with its backend up
 *
 * An NVMe tier that holds pages from an earlier run (same file, same
 * geometry) gives them back to the tree, as lower-tier nodes.
 *
 * A context with lower tiers gets its I/O worker, which runs background
 * reclaim (migrate.c) and the ring's promotions and keyed gets from an
 * I/O store.
 *
 * Return: 0; -EOPNOTSUPP when the backend cannot copy pages out or the
 * build has no store for a tier; -ENOMEM; the store's error; the error of
 * starting the worker.  Nothing is held on failure.
 */
int kvmm_tiers_init(struct kvmm_ctx *ctx)
{
	const struct kvmm_params *p = &ctx->params;
	int ret;

	if (!p->host_pages)
		return 0;
	if (!ctx->backend->gather || !ctx->backend->scatter)
		return -EOPNOTSUPP;
	shadows_init(ctx);
	if (ctx->backend->mem_register && ctx->backend->mem_unregister)
		ctx->dma = (struct kvmm_dma){ ctx->backend->mem_register,
					      ctx->backend->mem_unregister, ctx->backend_priv };
	ctx->staging = kvmm_malloc(ctx, scratch_bytes(ctx));
	if (!ctx->staging)
		return -ENOMEM;
	ctx->tier_keys = (struct kvmm_store_key *)(ctx->staging + ctx->row_pages);
	ctx->tier_path = (struct kvmm_node **)(ctx->tier_keys + ctx->row_pages);
	ctx->tier_pfns = (int32_t *)(ctx->tier_path + ctx->row_pages);
	ret = tier_init(ctx, KVMM_TIER_HOST, p->host_pages, p->host_arg);
	if (!ret && p->nvme_pages) {
		ret = tier_init(ctx, KVMM_TIER_NVME, p->nvme_pages, p->nvme_arg);
		if (!ret)
			kvmm_tier_recover(ctx, KVMM_TIER_NVME);
	}
	if (!ret)	/* below them all, shared with other machines */
		ret = kvmm_remote_init(ctx);
	if (!ret)	/* background reclaim, NVMe I/O, the remote tier */
		ret = kvmm_iow_start(ctx);
	if (ret)
		kvmm_tiers_exit(ctx);
	return ret;
}

void kvmm_tiers_exit(struct kvmm_ctx *ctx)
{
	uint32_t t;

	kvmm_iow_stop(ctx);
	kvmm_orphans_free(ctx);
	kvmm_remote_exit(ctx);
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
	kvmm_ns_cached_add(node, old, -(int64_t)nr);
	kvmm_ns_cached_add(node, tier, nr);
	kvmm_keyed_pages_add(ctx, node, old, -(int64_t)nr);
	kvmm_keyed_pages_add(ctx, node, tier, nr);
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

/* Point @addrs at the store pages of @pfns on @tier. */
static void **tier_addrs(struct kvmm_ctx *ctx, uint32_t tier, const int32_t *pfns,
			 uint32_t nr, void **addrs)
{
	uint32_t i;

	for (i = 0; i < nr; i++)
		addrs[i] = ctx->store[tier]->page(ctx->store_priv[tier], (uint32_t)pfns[i]);
	return addrs;
}

static uint64_t tier_bytes(const struct kvmm_ctx *ctx, uint32_t nr)
{
	return nr * kvmm_page_bytes(&ctx->params.model, ctx->page_size);
}

/* ---- write-through: copies of device nodes on the host tier ---- */

static bool write_through(const struct kvmm_ctx *ctx)
{
	return ctx->params.write_policy == KVMM_WRITE_THROUGH;
}

static void shadow_attach(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	node->flags |= KVMM_NODE_SHADOW;
	list_add_tail(&node->shadow, &ctx->tree.shadows);
	ctx->tree.shadowed += node->len >> ctx->page_shift;
}

static void shadow_detach(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	node->flags &= (uint8_t)~KVMM_NODE_SHADOW;
	list_del(&node->shadow);
	ctx->tree.shadowed -= node->len >> ctx->page_shift;
}

/* The tree split a node with a copy: its head @head gets its part of it. */
static void shadow_split(struct kvmm_ctx *ctx, struct kvmm_node *head,
			 struct kvmm_node *tail)
{
	(void)ctx;
	if (!(tail->flags & KVMM_NODE_SHADOW))
		return;
	head->flags |= KVMM_NODE_SHADOW;
	list_add_tail(&head->shadow, &tail->shadow);	/* just as old */
}

/* Under write-through, each node's block keeps its copy's frames, and splits them. */
static void shadows_init(struct kvmm_ctx *ctx)
{
	if (!write_through(ctx))
		return;
	ctx->tree.page_arrays = 2;
	ctx->tree.split = shadow_split;
}

/**
 * kvmm_shadow_drop() - give up @node's copy on the host tier, if it has one
 * @ctx: the context
 * @node: a node
 */
void kvmm_shadow_drop(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	uint32_t nr = node->len >> ctx->page_shift;

	if (!(node->flags & KVMM_NODE_SHADOW))
		return;
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_HOST], kvmm_node_shadow(ctx, node), nr);
	shadow_detach(ctx, node);
	kvmm_count(ctx, EV_SHADOW_DROP_PAGES, nr);
}

/**
 * kvmm_shadows_shrink() - host reclaim, last resort: give up copies
 * @ctx: the context
 * @sc: a reclaim pass on the host tier, its leaves all taken
 *
 * A copy belongs to a prefix still on the device, which is hotter than
 * anything reclaim demoted, so the host tier keeps copies over demoted
 * prefixes (as SGLang's HiCache keeps the host backups of device nodes):
 * they go last, the oldest first.
 */
void kvmm_shadows_shrink(struct kvmm_ctx *ctx, struct kvmm_scan_control *sc)
{
	while (sc->nr_reclaimed < sc->nr_to_reclaim && !list_empty(&ctx->tree.shadows)) {
		struct kvmm_node *node = list_entry(ctx->tree.shadows.next,
						    struct kvmm_node, shadow);

		sc->nr_reclaimed += node->len >> ctx->page_shift;
		kvmm_shadow_drop(ctx, node);
	}
}

/*
 * Whether a node moving from tier @from to tier @to keeps its frames on
 * @from as its copy: under write-through, when it leaves the host tier
 * for the device.
 */
static bool keeps_copy(const struct kvmm_ctx *ctx, uint32_t from, uint32_t to)
{
	return write_through(ctx) && from == KVMM_TIER_HOST && to == KVMM_TIER_DEVICE;
}

/*
 * @node's pages are now @pfns on tier @to (held there, not free): give
 * the tree the new frames, and free the old ones or keep them as the
 * node's copy (keeps_copy()).
 */
static void node_rehome(struct kvmm_ctx *ctx, struct kvmm_node *node, uint32_t to,
			const int32_t *pfns)
{
	uint32_t nr = node->len >> ctx->page_shift, from = node->tier;
	/* frames a demotion still reads are its own now (kvmm_writeback_give()) */
	bool keep = keeps_copy(ctx, from, to) &&
		    ctx->zone[from].pages[node->pfns[0]].state != KVMM_PAGE_IO;

	kvmm_prefetch_forget(ctx, node);
	kvmm_pages_to_tree(&ctx->zone[to], pfns, nr);
	if (keep)
		memcpy(kvmm_node_shadow(ctx, node), node->pfns, (size_t)nr * sizeof(*pfns));
	else
		kvmm_free_pages(ctx, &ctx->zone[from], node->pfns, nr);
	node_set_tier(ctx, node, to, pfns);
	if (keep)
		shadow_attach(ctx, node);
	kvmm_event_node(ctx, to > from ? KVMM_EVENT_DEMOTED : KVMM_EVENT_PROMOTED,
			node, from, to);
}

/*
 * The copy of @node's pages into @pfns on tier @to, begun at @t0, is done:
 * count it against lower tier @lt (a demotion when @to is @lt), give the
 * tree the new frames and free the old ones (or keep them, keeps_copy()).
 */
void kvmm_node_moved(struct kvmm_ctx *ctx, struct kvmm_node *node, uint32_t to,
		     const int32_t *pfns, uint32_t lt, uint64_t t0)
{
	uint32_t nr = node->len >> ctx->page_shift;
	bool in = to == lt;
	uint64_t ns = kvmm_now_ns() - t0;

	kvmm_tier_count(ctx, lt, in ? TEV_NS_IN : TEV_NS_OUT, ns);
	kvmm_hist_observe(ctx, in ? KVMM_HIST_DEMOTE : KVMM_HIST_PROMOTE, ns);
	kvmm_tier_count(ctx, lt, in ? TEV_BYTES_IN : TEV_BYTES_OUT, tier_bytes(ctx, nr));
	kvmm_tier_count(ctx, lt, in ? TEV_DEMOTE_PAGES : TEV_PROMOTE_PAGES, nr);
	node_rehome(ctx, node, to, pfns);
}

/**
 * kvmm_node_hash_start() - begin hashing @node's pages as the tiers name them
 * @node: a node of the prefix tree (not a root, not a keyed value)
 * @path: scratch for its ancestors, room for its depth
 * @st: out, seeded with its namespace and fed its ancestors' tokens:
 *	taking a digest after each of @node's pages gives their identities
 * @parent: out, two words: the identity of the page before @node's first,
 *	zero when its parent is a root
 *
 * Return: the namespace.
 */
uint32_t kvmm_node_hash_start(const struct kvmm_node *node, struct kvmm_node **path,
			      XXH3_state_t *st, uint64_t *parent)
{
	const struct kvmm_node *n;
	uint32_t depth = 0;

	for (n = node->parent; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		path[depth++] = (struct kvmm_node *)n;
	XXH3_INITSTATE(st);	/* its seed is read: not one left on the stack */
	XXH3_128bits_reset_withSeed(st, n->ns);
	while (depth--)
		XXH3_128bits_update(st, path[depth]->tokens,
				    (size_t)path[depth]->len * sizeof(uint32_t));
	parent[0] = parent[1] = 0;
	if (node->parent != n) {
		XXH128_hash_t h = XXH3_128bits_digest(st);

		parent[0] = h.low64;
		parent[1] = h.high64;
	}
	return n->ns;
}

/*
 * The identities of @node's pages (see struct kvmm_store_key), into
 * @keys (one per page): one pass over the tokens of its path from the
 * root, taking a digest after each of its own pages.  Return: @keys.
 */
struct kvmm_store_key *kvmm_tier_keys(struct kvmm_ctx *ctx, const struct kvmm_node *node,
				      struct kvmm_store_key *keys)
{
	uint32_t i, ps = ctx->page_size, ns;
	uint64_t h[2];
	XXH3_state_t st;

	if (node->flags & KVMM_NODE_KEYED) {
		kvmm_keyed_store_keys(ctx, node, keys);
		return keys;
	}
	if (node->ids) {	/* an event named them already (events.c) */
		ns = kvmm_node_ns(node)->root.ns;
		for (i = 0; i < node->len >> ctx->page_shift; i++)
			keys[i] = (struct kvmm_store_key){
				.parent = { node->ids[i].lo, node->ids[i].hi },
				.id = { node->ids[i + 1].lo, node->ids[i + 1].hi },
				.ns = ns, .tokens = node->tokens + i * ps,
			};
		return keys;
	}
	ns = kvmm_node_hash_start(node, ctx->tier_path, &st, h);
	for (i = 0; i < node->len >> ctx->page_shift; i++) {
		XXH128_hash_t d;

		keys[i] = (struct kvmm_store_key){ .parent = { h[0], h[1] }, .ns = ns,
						   .tokens = node->tokens + i * ps };
		XXH3_128bits_update(&st, node->tokens + i * ps, ps * sizeof(uint32_t));
		d = XXH3_128bits_digest(&st);
		keys[i].id[0] = h[0] = d.low64;
		keys[i].id[1] = h[1] = d.high64;
	}
	return keys;
}

/*
 * Whether lower tier @tier has @nr free pages, after its reclaim if need
 * be: finished demotions settled first, then direct reclaim.
 */
bool kvmm_tier_make_room(struct kvmm_ctx *ctx, uint32_t tier, uint32_t nr)
{
	struct kvmm_zone *zone = &ctx->zone[tier];

	if (zone->nr_free < nr)
		kvmm_migrate_reap(ctx);
	if (zone->nr_free < nr) {
		struct kvmm_scan_control sc = { .nr_to_reclaim = nr - zone->nr_free,
						.tier = tier };

		kvmm_shrink(ctx, &sc);
	}
	return zone->nr_free >= nr;
}

/**
 * kvmm_tier_copy_down() - copy pages down a tier
 * @ctx: the context
 * @from: the tier of @src
 * @src: the frames copied
 * @to: a lower tier
 * @dst: its frames, @nr of them, taken for the copy
 * @nr: pages
 * @addrs: scratch, @nr page addresses
 * @sums: scratch, @nr checksums, or NULL: for a memory store @from with
 *	a sum op, the write checks each page as it copies it instead of a
 *	verify pass over all of them first
 * @keys: the pages' identities (see struct kvmm_store_key), for an I/O
 *	store @to
 * @chan: the channel of an I/O store (0 under the context lock, 1 on the
 *	I/O worker)
 *
 * The backend gathers device pages into a memory store, which seals them;
 * pages of a memory store are verified and written to an I/O store.
 * Changes nothing in the context, counts nothing: the I/O worker runs it
 * without the lock, on frames a migrate job holds.
 *
 * Return: 0; -EBADMSG when a source page fails verification (it is never
 * given a fresh checksum); the backend's or the store's error.
 */
int kvmm_tier_copy_down(struct kvmm_ctx *ctx, uint32_t from, const int32_t *src,
			uint32_t to, const int32_t *dst, uint32_t nr, void **addrs,
			uint64_t *sums, const struct kvmm_store_key *keys, uint32_t chan)
{
	const struct kvmm_store_ops *ops = ctx->store[from];
	void *priv = ctx->store_priv[from];
	uint32_t i;
	int ret;

	if (from == KVMM_TIER_DEVICE) {
		ret = ctx->backend->gather(ctx->backend_priv, src, nr,
					   tier_addrs(ctx, to, dst, nr, addrs));
		if (!ret)
			ctx->store[to]->seal(ctx->store_priv[to], dst, nr);
		return ret;
	}
	if (sums && ops->sum) {	/* the write checks each page as it copies it */
		for (i = 0; i < nr; i++)
			sums[i] = ops->sum(priv, (uint32_t)src[i]);
	} else {		/* a pass over them all before the first write */
		if (ops->verify(priv, src, nr) < nr)
			return -EBADMSG;
		sums = NULL;
	}
	return ctx->store[to]->write(ctx->store_priv[to], chan, dst, nr,
				     tier_addrs(ctx, from, src, nr, addrs), keys, sums);
}

/**
 * kvmm_tier_copy_failed() - count a copy between tiers that failed
 * @ctx: the context
 * @from: the tier copied from: a page that failed verification counts there
 * @to: the lower tier the I/O was with: an I/O error counts there (a
 *	promotion reads its lower tier: @from and @to are both that tier)
 * @err: the copy's error
 */
void kvmm_tier_copy_failed(struct kvmm_ctx *ctx, uint32_t from, uint32_t to, int err)
{
	if (err == -EBADMSG)
		kvmm_tier_count(ctx, from, TEV_CSUM_FAIL, 1);
	else
		kvmm_tier_count(ctx, to, TEV_IO_ERRORS, 1);
}

/*
 * Copy @node's pages into @pfns on tier @to, under the lock: an I/O store
 * is written on channel 0, with the pages' identities.
 */
static int tier_copy_node(struct kvmm_ctx *ctx, struct kvmm_node *node, uint32_t to,
			  const int32_t *pfns, uint32_t nr)
{
	const struct kvmm_store_key *keys = ctx->store[to]->page ? NULL :
					    kvmm_tier_keys(ctx, node, ctx->tier_keys);
	int ret = kvmm_tier_copy_down(ctx, node->tier, node->pfns, to, pfns, nr,
				      ctx->staging, NULL, keys, 0);

	if (ret)
		kvmm_tier_copy_failed(ctx, node->tier, to, ret);
	return ret;
}

/*
 * Whether direct reclaim writes @node (@nr pages) to the I/O store below
 * itself: not under KVMM_REMOTE_WRITE_DEMOTE, where only the worker
 * writes (both tiers at once), nor a keyed value longer than the row of
 * scratch (addresses, keys) the write uses.
 */
static bool demote_writes(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
			  uint32_t nr)
{
	return nr <= ctx->row_pages &&
	       !(node->tier == KVMM_TIER_HOST &&
		 ctx->params.remote_write == KVMM_REMOTE_WRITE_DEMOTE);
}

/**
 * kvmm_demote() - move a leaf's pages down a tier, now
 * @ctx: the context
 * @node: an unlocked leaf of its tier
 *
 * Direct reclaim: the copy is made before this returns; the lower tier
 * makes room by its own reclaim.  Into a memory store (the device's pages
 * to the host tier) it is a memory copy.  Into an I/O store (the host
 * tier's pages to NVMe) background reclaim normally writes ahead of
 * demand, on the I/O worker (kvmm_writeback()); a caller that finds the
 * tier full anyway has outrun it, and writes the page itself, on channel
 * 0 under the lock: the writer is throttled to the disk's pace, as
 * Linux's balance_dirty_pages() throttles a task that dirties pages
 * faster than they are written, instead of dropping what is cached.  The
 * exceptions are a host tier whose pages also go to the remote tier as
 * they leave it (KVMM_REMOTE_WRITE_DEMOTE: only the worker writes both),
 * and a keyed value longer than a row (the scratch this write uses); the
 * caller drops those as before.  On failure nothing moved.
 *
 * Return: 0; -ENOSPC when there is no lower tier or it cannot make room;
 * -EWOULDBLOCK when only background reclaim may write the tier below;
 * -EBADMSG when the pages fail verification on the way; the backend's or
 * the store's error from the copy.
 */
int kvmm_demote(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	uint32_t nr = node->len >> ctx->page_shift, lower;
	int32_t *pfns = ctx->tier_pfns;
	uint64_t t0;
	int ret;

	if (node->flags & KVMM_NODE_SHADOW) {	/* the copy is there: no byte moves */
		shadow_detach(ctx, node);
		kvmm_tier_count(ctx, KVMM_TIER_HOST, TEV_DEMOTE_PAGES, nr);
		kvmm_count(ctx, EV_DEMOTE_FREE_PAGES, nr);
		node_rehome(ctx, node, KVMM_TIER_HOST, kvmm_node_shadow(ctx, node));
		return 0;
	}
	if (!kvmm_tier_below(ctx, node->tier, &lower))
		return -ENOSPC;
	if (!ctx->store[lower]->page && !demote_writes(ctx, node, nr))
		return -EWOULDBLOCK;	/* only background reclaim writes it (migrate.c) */
	if (!kvmm_tier_make_room(ctx, lower, nr))
		return -ENOSPC;
	__kvmm_alloc_pages(ctx, &ctx->zone[lower], nr, pfns);
	t0 = kvmm_now_ns();
	ret = tier_copy_node(ctx, node, lower, pfns, nr);
	if (ret) {
		kvmm_free_pages(ctx, &ctx->zone[lower], pfns, nr);
		return ret;
	}
	if (!ctx->store[lower]->page)	/* the writer waited for the disk */
		kvmm_count(ctx, EV_THROTTLE_PAGES, nr);
	kvmm_node_moved(ctx, node, lower, pfns, lower, t0);
	kvmm_writeback(ctx);	/* the tier below may be taking pages down now */
	return 0;
}

/**
 * kvmm_drop_leaf() - drop a leaf on any tier: free its pages, unlink it
 * @ctx: the context
 * @node: an unlocked node with no children
 *
 * Its parent is queued if it became a leaf of its tier.  A node that
 * background reclaim is writing down leaves its pages to the job, which
 * frees them when the write is over (kvmm_writeback_cancel()).
 */
void kvmm_drop_leaf(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_node *parent = node->parent;
	uint32_t nr = node->len >> ctx->page_shift;

	kvmm_assert(ctx, !node->lock_ref && kvmm_node_is_leaf(node));
	kvmm_event_node(ctx, KVMM_EVENT_REMOVED, node, node->tier, node->tier);
	kvmm_lru_del(ctx, node);
	kvmm_shadow_drop(ctx, node);
	if (node->flags & KVMM_NODE_IO)	/* being written down: the job frees them */
		kvmm_writeback_cancel(ctx, node);
	else
		kvmm_free_pages(ctx, kvmm_node_zone(ctx, node), node->pfns, nr);
	kvmm_node_lruvec(ctx, node)->evictable -= nr;
	ctx->tree.cached[node->tier] -= nr;
	kvmm_ns_cached_add(node, node->tier, -(int64_t)nr);
	kvmm_keyed_pages_add(ctx, node, node->tier, -(int64_t)nr);
	if (node->flags & KVMM_NODE_KEYED) {
		ctx->keyed_values--;
		kvmm_count(ctx, EV_KEYED_DROPS, 1);
	}
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
 * its lower copy (or keeps it, under write-through, when it is on the host
 * tier), which is cheaper than a promotion and can never fail.
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
		if (!keeps_copy(ctx, tier, KVMM_TIER_DEVICE))
			kvmm_tier_count(ctx, tier, TEV_EVICT_PAGES, len);
		node_rehome(ctx, n, KVMM_TIER_DEVICE, pfns + at);
	}
	return at;
}

/**
 * kvmm_write_through() - copy freshly committed device nodes to the host tier
 * @ctx: the context
 * @from: where the committed path starts (exclusive)
 * @end: where it ends
 *
 * Under write-through, every device node of the path without a copy gets
 * one, room made by host reclaim as for a demotion; so its demotion
 * later moves no byte (kvmm_demote()).  Best effort: a node that cannot
 * get its copy (no room, a failed copy) just has none, counted.  Nothing
 * on the device changes.
 */
void kvmm_write_through(struct kvmm_ctx *ctx, struct kvmm_node *from,
			struct kvmm_node *end)
{
	struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	struct kvmm_node *n;

	if (!write_through(ctx))
		return;
	for (n = end; n != from; n = n->parent) {
		uint32_t nr = n->len >> ctx->page_shift;
		int32_t *copy = kvmm_node_shadow(ctx, n);
		uint64_t t0;

		if (n->tier != KVMM_TIER_DEVICE || (n->flags & KVMM_NODE_SHADOW))
			continue;
		if (!kvmm_tier_make_room(ctx, KVMM_TIER_HOST, nr)) {
			kvmm_count(ctx, EV_WT_SKIP_PAGES, nr);
			continue;
		}
		__kvmm_alloc_pages(ctx, host, nr, copy);
		t0 = kvmm_now_ns();
		if (tier_copy_node(ctx, n, KVMM_TIER_HOST, copy, nr)) {
			kvmm_free_pages(ctx, host, copy, nr);
			kvmm_count(ctx, EV_WT_SKIP_PAGES, nr);
			continue;
		}
		kvmm_tier_count(ctx, KVMM_TIER_HOST, TEV_NS_IN, kvmm_now_ns() - t0);
		kvmm_tier_count(ctx, KVMM_TIER_HOST, TEV_BYTES_IN, tier_bytes(ctx, nr));
		kvmm_count(ctx, EV_WT_PAGES, nr);
		kvmm_pages_to_tree(host, copy, nr);
		shadow_attach(ctx, n);
	}
	kvmm_writeback(ctx);
}
