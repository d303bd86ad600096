// SPDX-License-Identifier: MIT
/*
 * kvmm/promote.c - PROMOTE: bringing the demoted part of a matched prefix
 * back to the device, at once or in the background.
 *
 * DOC: promotion
 *
 * A promotion is a job (struct kvmm_promo) with a copy of the key it
 * promotes.  Running it walks the tree from the sequence's node, splits
 * the path at the key's end and takes the "chain": the path's nodes below
 * its last device node, all on lower tiers.  Arming the chain
 *
 *  - locks its deepest node (so reclaim leaves the whole path alone),
 *  - takes device frames for every page (state KVMM_PAGE_IO: held by the
 *    job, in no row and no node),
 *  - marks the chain's nodes KVMM_NODE_IO: nothing splits them, moves
 *    them between tiers or adopts freshly computed frames into them while
 *    their pages are being read (an insert stops before them, another
 *    promotion of the same prefix waits for this one),
 *  - and records each page's source frame and identity in the job.
 *
 * The copy reads the lower tier and scatters into the IO frames; it
 * changes nothing in the context, so it can run without the context lock.
 * Finishing (under the lock) moves each node whose pages all arrived to
 * the device, frees the frames of a node that failed with everything
 * below it (a miss, never wrong KV: the failed node is dropped), maps
 * the result into the sequence's row and wakes the promotions that waited
 * for the chain.
 *
 * When the chain lies on memory stores only (the host tier), or the
 * caller wants the answer now (the direct API, kvmm_ioctl()), the copy
 * runs inline.  A ring's PROMOTE whose chain reaches an I/O store (NVMe)
 * goes to the context's I/O worker instead: the ring's CQE is deferred
 * until the worker has finished the job, and meanwhile the ring and the
 * context serve other commands.  The sequence is busy then: every command
 * on it but CLOSE and RETRACT fails with -EBUSY.  Closing it cancels the
 * job, which still owns its frames and its lock until the I/O is over:
 * the data is kept (the nodes still move up, cached and unlocked) and the
 * deferred CQE says -ECANCELED.
 *
 * Lock order: ctx->lock, then the worker's queue lock; the worker never
 * holds its queue lock while it takes ctx->lock.
 */
#include <stdlib.h>

#include "migrate.h"

/*
 * Arm the chain of @path below @from with the arrays at @p
 * (kvmm_migrate_arm_bytes() long, taken over): see the DOC above.
 * Nothing changes on failure.
 * Return: 0, or -ENOSPC when the device cannot make room for the chain.
 */
static int job_arm(struct kvmm_ctx *ctx, struct kvmm_migrate *job, struct kvmm_node *from,
		   struct kvmm_path *path, uint32_t nr_nodes, uint32_t nr_pages, char *p,
		   uint32_t alloc_flags)
{
	struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	struct kvmm_node *n;
	uint32_t i, at;
	int ret;

	kvmm_tree_lock(ctx, path->node);	/* before reclaim can look at it */
	ret = kvmm_zone_reserve(ctx, dev, nr_pages, alloc_flags);
	if (ret) {
		kvmm_tree_unlock(ctx, path->node);
		kvmm_mfree(ctx, p, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
		return ret;
	}
	kvmm_migrate_lay_out(job, p, nr_nodes, nr_pages);
	job->to = KVMM_TIER_DEVICE;
	job->nr_locks = 1;
	at = nr_pages;
	i = nr_nodes;
	for (n = path->node; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		struct migrate_node *pn = &job->chain[--i];
		uint32_t nr = n->len >> ctx->page_shift;

		at -= nr;
		*pn = (struct migrate_node){ .node = n, .first = at, .nr = nr, .tier = n->tier };
		memcpy(job->src + at, n->pfns, nr * sizeof(*n->pfns));
		if (n->flags & KVMM_NODE_IO) {	/* being written down: still readable */
			kvmm_writeback_take(ctx, n);
			pn->taken = n;
		}
		if (!ctx->store[n->tier]->page) {
			kvmm_tier_keys(ctx, n, job->keys + at);
			job->io = true;
		}
	}
	__kvmm_alloc_pages(ctx, dev, nr_pages, job->dst);
	kvmm_migrate_hold(ctx, job);
	kvmm_writeback_tier(ctx, KVMM_TIER_DEVICE);	/* below low: demote ahead */
	return 0;
}

/*
 * The copy is over: move what arrived to the device, give back the rest,
 * drop the node that failed with what hangs below it.
 */
static void job_settle(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	struct kvmm_node *end = job->chain[job->nr_nodes - 1].node, *failed = NULL;
	uint32_t i;

	kvmm_migrate_release(ctx, job);
	for (i = 0; i < job->nr_nodes; i++)	/* their frames may still be read */
		if (job->chain[i].taken)
			kvmm_writeback_give(ctx, job->chain[i].node);
	for (i = 0; i < job->nr_nodes; i++) {
		const struct migrate_node *pn = &job->chain[i];

		if (pn->err) {
			kvmm_tier_copy_failed(ctx, pn->tier, pn->tier, pn->err);	/* a read */
			kvmm_free_pages(ctx, dev, job->dst + pn->first,
					job->nr_pages - pn->first);
			failed = pn->node;
			break;
		}
		kvmm_node_moved(ctx, pn->node, KVMM_TIER_DEVICE, job->dst + pn->first,
				pn->tier, job->t0);
	}
	kvmm_tree_unlock(ctx, end);
	if (failed) {
		kvmm_assert(ctx, !failed->lock_ref);
		kvmm_drop_subtree(ctx, failed);
	} else {
		kvmm_tree_touch(ctx, end);
	}
}

/*
 * The promotion mapped @nr more tokens into its sequence: count them as
 * hits of the tiers they were found on when it was asked for (job_offer()),
 * in path order.
 */
static void job_served(struct kvmm_ctx *ctx, struct kvmm_migrate *job, uint32_t nr)
{
	uint32_t t, k;

	for (t = KVMM_TIER_DEVICE; t < KVMM_NR_TIERS && nr; t++) {
		k = nr < job->offer[t] ? nr : job->offer[t];
		if (t != KVMM_TIER_DEVICE)
			kvmm_tier_count(ctx, t, TEV_HIT_TOKENS, k);
		job->offer[t] -= k;
		nr -= k;
	}
}

/*
 * Map the device part of the job's key into the sequence's row and lock
 * it.  Cannot fail: a walk that ends inside an edge backs off to the node
 * before rather than split.  Return: the sequence's cached tokens.
 */
static int job_map(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	struct kvmm_seq *s = &ctx->seqs[job->seq];
	struct kvmm_node *old = s->node;
	struct kvmm_path path;

	kvmm_tree_walk(ctx, s->node, job->tokens, job->n, &path);
	kvmm_path_clip(&path);
	if (path.split) {
		path.matched -= path.split;
		path.split = 0;
		path.node = path.node->parent;
	}
	if (path.matched) {
		kvmm_tree_lock(ctx, path.node);
		if (old != s->root)
			kvmm_tree_unlock(ctx, old);
		kvmm_tree_fill(ctx, old, path.node,
			       kvmm_row(ctx, job->seq) + (s->cached >> ctx->page_shift));
		s->node = path.node;
		s->len = s->cached += path.matched;
		job_served(ctx, job, path.matched);
	}
	return (int)s->cached;
}

/* Whether @n is a node a demotion is writing down (and not read up). */
static bool written_down(struct kvmm_ctx *ctx, const struct kvmm_node *n)
{
	return (n->flags & KVMM_NODE_IO) && kvmm_migrate_of(ctx, n)->to != KVMM_TIER_DEVICE;
}

/*
 * Walk the key @tokens (@nr long) from @from into @path.  A node a demotion is writing
 * down is still readable where it is, so the prefix goes on through it
 * (job_arm() takes it from the demotion); but nothing splits it, so a key
 * that ends inside one ends before it.  Return: the first node on the
 * path another promotion is reading up, or NULL.
 */
static struct kvmm_node *job_walk(struct kvmm_ctx *ctx, struct kvmm_node *from,
				  const uint32_t *tokens, uint32_t nr, struct kvmm_path *path)
{
	struct kvmm_node *n, *busy = NULL;

	kvmm_tree_walk(ctx, from, tokens, nr, path);
	if (path->split && written_down(ctx, path->node)) {
		path->matched -= path->split;
		path->split = 0;
		path->node = path->node->parent;
	}
	for (n = path->node; n != from; n = n->parent)
		if ((n->flags & KVMM_NODE_IO) && !written_down(ctx, n))
			busy = n;
	return busy;
}

/*
 * What the job may serve from each tier: the tokens of its key on each,
 * as the tree holds them now, in path order (the device's first: nodes
 * another promotion brought up since the sequence matched).
 */
static void job_offer(struct kvmm_ctx *ctx, struct kvmm_migrate *job, struct kvmm_node *from)
{
	struct kvmm_path path;

	kvmm_tree_walk(ctx, from, job->tokens, job->n, &path);
	kvmm_path_tiers(from, &path, job->offer);
}

/*
 * Run @job from where its sequence stands: wait for another job's chain,
 * arm its own and copy it (inline or on the worker), or find nothing to
 * do.  @sync: the caller needs the answer now.
 *
 * Return: the sequence's cached tokens when the job is over; -EINPROGRESS
 * when it waits or is queued; -EBUSY (@sync) when another promotion holds
 * the chain; -ENOMEM or -ENOSPC with nothing changed; -ECANCELED.
 */
static int job_run(struct kvmm_ctx *ctx, struct kvmm_migrate *job, bool sync)
{
	struct kvmm_node *n, *busy, *from;
	uint32_t nr_nodes = 0, nr_pages = 0;
	struct kvmm_path path;
	char *arm = NULL;
	struct kvmm_seq *s;
	int ret;

	if (job->seq == KVMM_SEQ_NONE)
		return -ECANCELED;
	s = &ctx->seqs[job->seq];
	from = s->node;
	busy = job_walk(ctx, from, job->tokens, job->n, &path);
	if (busy) {
		if (sync)
			return -EBUSY;
		list_add_tail(&job->qlink, &kvmm_migrate_of(ctx, busy)->waiters);
		return -EINPROGRESS;
	}
	/* The chain as it will be after the split, to allocate before it. */
	for (n = path.node; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		nr_nodes++;
		nr_pages += (n == path.node && path.split ? path.split : n->len) >>
			    ctx->page_shift;
	}
	if (nr_nodes) {
		arm = kvmm_malloc(ctx, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
		if (!arm)
			return -ENOMEM;
	}
	ret = kvmm_tree_split(ctx, &path);
	if (ret) {
		kvmm_mfree(ctx, arm, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
		return ret;
	}
	if (nr_nodes) {
		ret = job_arm(ctx, job, from, &path, nr_nodes, nr_pages, arm, 0);
		if (ret)
			return ret;
		if (job->io && !sync && ctx->iow) {
			kvmm_migrate_queue(ctx, job);
			return -EINPROGRESS;
		}
		kvmm_migrate_copy(ctx, job, 0);
		job_settle(ctx, job);
	}
	return job_map(ctx, job);
}

static void job_complete(struct kvmm_ctx *ctx, struct kvmm_migrate *job, int res);
static int prefetch_settle(struct kvmm_ctx *ctx, struct kvmm_migrate *job);

/**
 * kvmm_promo_finished() - the worker copied a promotion: settle it, finish
 *	it and start the jobs that waited for it, each of which may finish
 *	at once, wait again or go to the worker
 * @ctx: the context, its lock held
 * @job: the promotion
 */
void kvmm_promo_finished(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	struct kvmm_list woken;
	int res;

	if (job->prefetch) {
		res = prefetch_settle(ctx, job);
	} else {
		job_settle(ctx, job);
		res = job->seq == KVMM_SEQ_NONE ? -ECANCELED : job_map(ctx, job);
	}
	list_init(&woken);
	while (!list_empty(&job->waiters)) {
		struct kvmm_list *e = job->waiters.next;

		list_del(e);
		list_add_tail(e, &woken);
	}
	job_complete(ctx, job, res);
	while (!list_empty(&woken)) {
		struct kvmm_migrate *w = list_entry(woken.next, struct kvmm_migrate, qlink);

		list_del(&w->qlink);
		res = job_run(ctx, w, false);
		if (res != -EINPROGRESS)
			job_complete(ctx, w, res);
	}
}

/* Post the job's completion, free its sequence, free it. */
static void job_complete(struct kvmm_ctx *ctx, struct kvmm_migrate *job, int res)
{
	if (job->seq != KVMM_SEQ_NONE)
		ctx->seqs[job->seq].promo = NULL;
	else if (!job->prefetch)
		kvmm_count(ctx, EV_PROMOTE_CANCELED, 1);
	if (job->owner)
		kvmm_owner_complete(job->owner, job->user_data, res);
	kvmm_migrate_free(ctx, job);
	kvmm_debug_check(ctx, "promote done");
}

/**
 * kvmm_promote() - bring the demoted rest of a sequence's prefix back
 * @ctx: the context
 * @seq: an open sequence that matched and holds nothing else yet
 * @tokens: the prompt, as given to MATCH
 * @n: its length
 * @owner: the owner (a ring) whose PROMOTE this is, to complete it later
 *	through its ops; NULL for an answer now
 * @user_data: the deferred completion's user_data
 *
 * Return: the sequence's cached tokens (page aligned); -EINPROGRESS when
 * the completion is deferred (@owner only); -EINVAL for a bad sequence or
 * key or one that holds tokens of its own; -EBUSY for a sequence with a
 * promotion in flight, or (@owner NULL) a prefix another promotion is
 * reading; -ENOSPC when the device cannot make room; -ENOMEM.  Nothing
 * changed on failure but a split.
 */
int kvmm_promote(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		 uint32_t n, struct kvmm_owner *owner, uint64_t user_data)
{
	struct kvmm_seq *s = kvmm_seq_lookup(ctx, seq);
	struct kvmm_migrate *job;
	int ret;

	if (!s)
		return -EINVAL;
	if (s->promo)
		return -EBUSY;
	if (s->len != s->cached || !tokens || !n || n > ctx->params.max_seq_len)
		return -EINVAL;
	n = kvmm_align_down(ctx, n);
	if (n <= s->cached)
		return (int)s->cached;
	job = kvmm_zalloc(ctx, kvmm_migrate_bytes(n - s->cached));
	if (!job)
		return -ENOMEM;
	job->tokens = (uint32_t *)(job + 1);
	job->n = n - s->cached;
	memcpy(job->tokens, tokens + s->cached, (size_t)job->n * sizeof(*tokens));
	job->seq = KVMM_SEQ_ROW(seq);
	job->owner = owner;
	job->user_data = user_data;
	list_init(&job->waiters);
	list_add_tail(&job->link, &ctx->migrations);
	s->promo = job;
	kvmm_migrate_reap(ctx);	/* what was written down is read from there */
	job_offer(ctx, job, s->node);
	ret = job_run(ctx, job, !owner);
	if (ret == -EINPROGRESS) {
		kvmm_count(ctx, EV_PROMOTE_ASYNC, 1);
		return ret;
	}
	s->promo = NULL;
	kvmm_migrate_free(ctx, job);
	kvmm_debug_check(ctx, "seq_promote");
	return ret;
}

/**
 * kvmm_seq_promote() - bring the demoted rest of a matched prefix back
 * @ctx: the context
 * @seq: a sequence that matched and holds nothing else yet
 * @tokens: the prompt, as given to kvmm_seq_match()
 * @n: its length
 *
 * The part of the prefix that kvmm_seq_match() found on the host or NVMe
 * tier is copied back to the device and mapped into the row, exactly as
 * if it had matched there; the call returns when it is done.  A page that
 * fails verification ends the prefix there (its node and what hangs below
 * it are dropped): a miss, never wrong KV.
 *
 * Return: the sequence's cached tokens now (page aligned); -EINVAL for a
 * bad sequence or key, or one that has tokens of its own; -EBUSY when a
 * ring's promotion is reading the same prefix; -ENOSPC when the device
 * cannot make room (nothing changed); -ENOMEM.
 */
KVMM_EXPORT int kvmm_seq_promote(struct kvmm_ctx *ctx, uint32_t seq,
				 const uint32_t *tokens, uint32_t n)
{
	return kvmm_promote(ctx, seq, tokens, n, NULL, 0);
}

/**
 * kvmm_promo_cancel() - the sequence of @job is closing
 * @ctx: the context
 * @job: its promotion
 *
 * Nothing is freed here: a job waiting for another one finishes when
 * that one does, an armed one when its I/O is over.
 */
void kvmm_promo_cancel(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	ctx->seqs[job->seq].promo = NULL;
	job->seq = KVMM_SEQ_NONE;
}

/* @owner is going away: its jobs complete to nobody. */
void kvmm_promos_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->migrations) {
		struct kvmm_migrate *job = list_entry(pos, struct kvmm_migrate, link);

		if (job->owner == owner)
			job->owner = NULL;
	}
}

/*
 * DOC: prefetch
 *
 * PREFETCH is a promotion that no sequence has asked for yet.  An engine
 * knows its waiting queue: it names a queued prompt, and the part of the
 * prompt's cached prefix that lies on the host or NVMe tier moves up to
 * the device before the request is admitted, so that the MATCH at
 * admission maps it in place and no PROMOTE has to wait for a copy, or
 * find no room for one.
 *
 * It takes only what nobody needs: free device frames above the low
 * watermark, at most the caller's budget of them, with no reclaim at all.
 * So it never evicts a cached page, let alone one a running sequence
 * holds, and never pushes the device below the point where background
 * reclaim would start.  An engine whose device is always full of cache
 * (watermarks 0, SGLang's way) has no such room; with
 * KVMM_PREFETCH_RECLAIM it may take its budget as an allocation does,
 * demoting the coldest unlocked cached leaves, which are never pages a
 * sequence holds (reclaim skips locked nodes), in exchange for a prefix
 * a queued request is known to need.  What it brings up is cached and unlocked like any
 * prefix: the coldest part of it is what reclaim takes first if the
 * request never comes.  A chain longer than the room is cut from the
 * bottom, at a page boundary, since a prefix's head is what a MATCH can
 * use without the rest.  A prefix another promotion is reading up already
 * is left to it.  So is a node a demotion is writing down, and what hangs
 * below it: a PROMOTE reads it where it is, but a prefetch, which may be
 * cancelled and then put its nodes back, must not take it from the
 * demotion (kvmm_writeback_take()), so its chain ends above it.
 *
 * The job is a promotion without a sequence (job->prefetch), armed,
 * copied and settled as one: inline from memory stores (and for the
 * direct API), on the I/O worker when a ring's chain reaches an I/O
 * store, the ring's CQE then waiting for the copy as PROMOTE's does.
 * While it is in flight its nodes are KVMM_NODE_IO, so a PROMOTE that
 * needs them waits for it and then finds them on the device.  A ring
 * cancels its prefetch by user_data: I/O already issued cannot be
 * recalled, but when it is over the job's frames are freed and its nodes
 * stay where they were, so the room goes back to the engine.
 *
 * The nodes it moved carry KVMM_NODE_PREFETCHED until a MATCH maps them
 * (prefetch_hits counts those pages) or they move or go.
 */

/* Device frames a prefetch may take: the free ones above the low watermark. */
static uint64_t prefetch_room(const struct kvmm_ctx *ctx)
{
	const struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	uint64_t keep = dev->wmark[KVMM_WMARK_LOW];

	if (keep < dev->wmark[KVMM_WMARK_MIN])
		keep = dev->wmark[KVMM_WMARK_MIN];
	return dev->nr_free > keep ? dev->nr_free - keep : 0;
}

/* Pages of the part of @path's last node that it takes. */
static uint32_t path_tail_pages(const struct kvmm_ctx *ctx, const struct kvmm_path *path)
{
	return (path->split ? path->split : path->node->len) >> ctx->page_shift;
}

/*
 * Cut the walked @path (from @root) so that its chain below the device
 * ends above every node a demotion is writing down and holds at most
 * @max pages, dropping from the bottom.
 * Return: the chain's pages; its nodes in *@nr_nodes.
 */
static uint32_t prefetch_cut(struct kvmm_ctx *ctx, struct kvmm_node *root,
			     struct kvmm_path *path, uint64_t max, uint32_t *nr_nodes)
{
	uint64_t pages = 0, excess, below = 0, cut_pages = 0;
	struct kvmm_node *n, *cut = NULL;
	uint32_t nr;

	for (n = path->node; n != root && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		nr = n == path->node ? path_tail_pages(ctx, path) : n->len >> ctx->page_shift;
		pages += nr;
		below += nr;
		if (written_down(ctx, n)) {
			cut = n;
			cut_pages = below;
		}
	}
	if (cut) {
		path->matched -= (uint32_t)cut_pages << ctx->page_shift;
		path->split = 0;
		path->node = cut->parent;
		pages -= cut_pages;
	}
	while (pages > max) {
		n = path->node;
		nr = path_tail_pages(ctx, path);
		excess = pages - max;
		if (excess < nr) {
			path->split = (nr - (uint32_t)excess) << ctx->page_shift;
			path->matched -= (uint32_t)excess << ctx->page_shift;
			pages = max;
			break;
		}
		path->matched -= nr << ctx->page_shift;
		path->split = 0;
		path->node = n->parent;
		pages -= nr;
	}
	*nr_nodes = 0;
	for (n = path->node; n != root && n->tier != KVMM_TIER_DEVICE; n = n->parent)
		(*nr_nodes)++;
	return (uint32_t)pages;
}

/* A cancelled prefetch's copy is over: free its frames, leave its nodes. */
static void prefetch_put_back(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	kvmm_migrate_release(ctx, job);	/* none was taken from a demotion */
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], job->dst, job->nr_pages);
	kvmm_tree_unlock(ctx, job->chain[job->nr_nodes - 1].node);
}

/*
 * Settle a prefetch whose copy is over.  Return: the pages it moved to
 * the device, or -ECANCELED.
 */
static int prefetch_settle(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	uint32_t ok = 0, pages = 0, i;

	if (job->canceled) {
		prefetch_put_back(ctx, job);
		kvmm_count(ctx, EV_PREFETCH_CANCELED, job->nr_pages);
		return -ECANCELED;
	}
	while (ok < job->nr_nodes && !job->chain[ok].err)
		pages += job->chain[ok++].nr;
	job_settle(ctx, job);	/* the nodes above the first failure stay */
	for (i = 0; i < ok; i++) {
		job->chain[i].node->flags |= KVMM_NODE_PREFETCHED;
		ctx->prefetched++;
	}
	kvmm_count(ctx, EV_PREFETCH_PAGES, pages);
	return (int)pages;
}

/**
 * __kvmm_prefetch() - bring a queued prompt's demoted prefix up ahead of
 *	its admission
 * @ctx: the context
 * @ns: the prompt's namespace
 * @tokens: the prompt
 * @n: its length
 * @budget: device pages it may take at most; 0: as many as are free above
 *	the low watermark (never more)
 * @flags: KVMM_PREFETCH_RECLAIM: it may reclaim cold cached pages for
 *	@budget pages (which must not be 0), as an allocation does
 * @owner: the ring whose PREFETCH this is, to complete it later; NULL for
 *	an answer now
 * @user_data: the deferred completion's user_data, what cancels it
 *
 * See the DOC above.  Context: ctx->lock held (or the direct API's caller).
 *
 * Return: pages moved to the device (0: nothing below the device, no room,
 * or another promotion is reading it); -EINPROGRESS when the completion
 * is deferred (@owner only); -EINVAL for a bad key; -ENOMEM.  Nothing
 * changed on failure but a split.
 */
int __kvmm_prefetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens, uint32_t n,
		    uint32_t budget, uint32_t flags, struct kvmm_owner *owner, uint64_t user_data)
{
	struct kvmm_node *root;
	struct kvmm_migrate *job;
	uint32_t nr_nodes, nr_pages;
	struct kvmm_path path;
	uint64_t room;
	char *arm;
	int ret = 0;

	if (!tokens || !n || n > ctx->params.max_seq_len || (flags & ~KVMM_PREFETCH_FLAGS) ||
	    ((flags & KVMM_PREFETCH_RECLAIM) && !budget))
		return -EINVAL;
	n = kvmm_align_down(ctx, n);
	root = kvmm_tree_root(ctx, ns, false);
	if (!n || !root)
		return 0;
	kvmm_migrate_reap(ctx);	/* what was written down is read from there */
	room = (flags & KVMM_PREFETCH_RECLAIM) ? budget : prefetch_room(ctx);
	if (budget && budget < room)
		room = budget;
	if (job_walk(ctx, root, tokens, n, &path))
		return 0;	/* another promotion is bringing it up */
	nr_pages = prefetch_cut(ctx, root, &path, room, &nr_nodes);
	if (!nr_pages)
		return 0;
	job = kvmm_zalloc(ctx, kvmm_migrate_bytes(0));
	arm = kvmm_malloc(ctx, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
	if (!job || !arm) {
		ret = -ENOMEM;
		goto out_free_arm;
	}
	job->seq = KVMM_SEQ_NONE;
	job->prefetch = true;
	job->owner = owner;
	job->user_data = user_data;
	list_init(&job->waiters);
	list_add_tail(&job->link, &ctx->migrations);
	ret = kvmm_tree_split(ctx, &path);
	if (ret) {
		kvmm_mfree(ctx, arm, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
		goto out_free_job;
	}
	ret = job_arm(ctx, job, root, &path, nr_nodes, nr_pages, arm,
		      (flags & KVMM_PREFETCH_RECLAIM) ? 0 : KVMM_ALLOC_NORECLAIM);
	if (ret) {	/* @arm freed; -ENOSPC: not even reclaim made room */
		ret = ret == -ENOSPC ? 0 : ret;
		goto out_free_job;
	}
	if (job->io && owner && ctx->iow) {
		kvmm_migrate_queue(ctx, job);
		return -EINPROGRESS;
	}
	kvmm_migrate_copy(ctx, job, 0);
	ret = prefetch_settle(ctx, job);
out_free_job:
	kvmm_migrate_free(ctx, job);
	kvmm_debug_check(ctx, "prefetch");
	return ret;

out_free_arm:
	kvmm_mfree(ctx, arm, kvmm_migrate_arm_bytes(nr_nodes, nr_pages));
	kvmm_mfree(ctx, job, kvmm_migrate_bytes(0));
	return ret;
}

/**
 * kvmm_prefetch() - bring a prompt's demoted prefix up to the device
 *	before it is admitted
 * @ctx: the context
 * @ns: the prompt's namespace
 * @tokens: the prompt, as it will be given to kvmm_seq_match()
 * @n: its length
 * @budget: device pages it may take at most; 0: as many as are free
 *	above the low watermark
 * @flags: 0, or KVMM_PREFETCH_RECLAIM
 *
 * The part of the cached prefix that lies on the host or NVMe tier is
 * copied up into free device frames above the low watermark (nothing is
 * reclaimed for it, so nothing cached is evicted, and no page a running
 * sequence holds is touched), as much of its head as the budget allows,
 * and stays cached there, unlocked, until a MATCH maps it.  With
 * KVMM_PREFETCH_RECLAIM it may instead take @budget pages as an
 * allocation would, reclaiming the coldest unlocked cached pages for them
 * (demoted, as reclaim does; never a page a sequence holds).  Returns
 * when the copy is done.
 *
 * Return: pages moved to the device; 0 when nothing was below the device,
 * there was no room, or another promotion is reading that prefix;
 * -EINVAL for a bad key or flag (or KVMM_PREFETCH_RECLAIM with no
 * budget); -ENOMEM.
 */
KVMM_EXPORT int kvmm_prefetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			      uint32_t n, uint32_t budget, uint32_t flags)
{
	if (!ctx)
		return -EINVAL;
	return __kvmm_prefetch(ctx, ns, tokens, n, budget, flags, NULL, 0);
}

/**
 * kvmm_prefetch_cancel() - cancel @owner's prefetches tagged @user_data
 * @ctx: the context, its lock held
 * @owner: the ring
 * @user_data: the PREFETCH entries' user_data
 *
 * Their copies go on (I/O already issued is not recalled); when each is
 * over, its frames are freed, its nodes stay below and its CQE says
 * -ECANCELED.  The ring's keyed prefetches (KPREFETCH) of that user_data
 * are cancelled too (kvmm_keyed_prefetch_cancel()).
 *
 * Return: how many were cancelled.
 */
int kvmm_prefetch_cancel(struct kvmm_ctx *ctx, const struct kvmm_owner *owner,
			 uint64_t user_data)
{
	struct kvmm_list *pos;
	int nr = 0;

	if (!owner)
		return 0;
	list_for_each(pos, &ctx->migrations) {
		struct kvmm_migrate *job = list_entry(pos, struct kvmm_migrate, link);

		if (job->prefetch && !job->canceled && job->owner == owner &&
		    job->user_data == user_data) {
			job->canceled = true;
			nr++;
		}
	}
	return nr + kvmm_keyed_prefetch_cancel(ctx, owner, user_data);
}

/**
 * kvmm_prefetch_hit() - a MATCH mapped the path from @root to @node:
 *	count the pages a prefetch brought up for it
 * @ctx: the context
 * @root: where the path starts
 * @node: where it ends
 */
void kvmm_prefetch_hit(struct kvmm_ctx *ctx, const struct kvmm_node *root,
		       struct kvmm_node *node)
{
	for (; node != root && ctx->prefetched; node = node->parent)
		if (node->flags & KVMM_NODE_PREFETCHED) {
			kvmm_count(ctx, EV_PREFETCH_HITS, node->len >> ctx->page_shift);
			kvmm_prefetch_forget(ctx, node);
		}
}
