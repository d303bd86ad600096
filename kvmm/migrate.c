// SPDX-License-Identifier: MIT
/*
 * kvmm/migrate.c - migrate jobs: moving nodes' pages between tiers without
 * holding the context across the copy, in both directions.
 *
 * DOC: migration
 *
 * A job (struct kvmm_migrate) moves the pages of some nodes to one tier
 * in three steps, as the kernel's migrate.c isolates, copies and remaps:
 *
 *  - arm, under the context's lock: mark each node KVMM_NODE_IO (nothing
 *    splits it, moves it or adopts into it; an insert stops before it),
 *    hold it (a promotion locks its chain, so that reclaim leaves the
 *    path alone; a demotion only takes its leaves off the reclaim lists,
 *    so that their ancestors stay reclaimable: a leaf dropped with one of
 *    them leaves its pages to the job, kvmm_writeback_cancel()), take
 *    frames on the
 *    destination tier in state KVMM_PAGE_IO (held by the job, in no node)
 *    and record each page's source frame and identity in the job;
 *  - copy, without the lock: the job's arrays, the stores and the backend
 *    only, so the I/O worker can run it while other commands are served;
 *  - settle, under the lock: a node whose pages all arrived moves to the
 *    destination; one whose copy failed is put back as it was, or dropped
 *    with what hangs below it when its own pages failed verification (a
 *    miss, never wrong KV).
 *
 * Promotions (promote.c) move a chain of a matched prefix up to the
 * device.  Demotions move cold leaves of the host tier down to an I/O
 * store (NVMe): that is background reclaim, the kswapd of this project
 * (kvmm_writeback()).  When an allocation on the host tier leaves fewer
 * free pages than its low watermark, the oldest host leaves are armed,
 * enough to bring the free pages and those on their way out to the high
 * watermark, in jobs of at most KVMM_WRITEBACK_PAGES pages (each settles
 * and frees its host pages as soon as it is written), and queued to the
 * worker, which writes them while
 * the context serves other commands.  Direct reclaim on the host tier
 * (the caller found it full: background reclaim fell behind) writes its
 * victims itself, under the lock, throttled to the disk's pace, rather
 * than drop them (kvmm_demote()); what is in flight already it cannot
 * wait for.
 *
 * Under KVMM_REMOTE_WRITE_DEMOTE a demotion from the host tier also
 * writes its pages to the remote tier, from the host frames it holds,
 * after its copy (kvmm_remote_demoted()); with no tier below the host,
 * the remote tier is the only destination (@no_dst): the job holds no
 * frames below, and settling drops the nodes it wrote.
 *
 * The worker's done list holds any work whose settle step belongs to the
 * context's own thread (struct kvmm_work.settle): demotions, and the
 * remote tier's write-through pushes (remote.c).
 *
 * The worker settles a promotion itself, under the context's lock, since
 * a ring waits for its completion (rings are the only source of queued
 * promotions, and every ring command holds that lock).  A demotion has no
 * one waiting: the worker puts it on its done list and the context's own
 * thread settles it the next time it reclaims, matches or calls
 * kvmm_sync() (kvmm_migrate_reap()).  So the worker takes the lock only
 * where the lock is in use, and an embedder on the direct API needs none.
 *
 * Lock order: ctx->lock, then the worker's lock; the worker never holds
 * its own lock while it takes ctx->lock.
 */
#include <stdlib.h>

#include "migrate.h"

/* Nodes one writeback job takes at most, and pages (or the first node's). */
#define KVMM_WRITEBACK_BATCH	64
#define KVMM_WRITEBACK_PAGES	1024

/**
 * struct kvmm_iow - the I/O worker of a context
 * @ctx: the context
 * @thread: it
 * @rthread: with a remote tier, a second thread for the work that only
 *	waits on the network (@rqueue), so that a stalled cluster never
 *	holds a promotion or a writeback behind it
 * @rthread_on: @rthread runs
 * @mu: protects everything below
 * @cv: broadcast when @queue, @rqueue or @stop changes
 * @idle: signalled when the workers have nothing queued or in hand
 * @queue: armed jobs to copy, oldest first
 * @rqueue: the remote tier's jobs (kvmm_work_queue_remote())
 * @done: copied demotions, to settle
 * @nr_done: jobs on @done (read without @mu as a hint)
 * @busy: jobs the threads are running
 * @stop: exit once the queues are empty
 */
struct kvmm_iow {
	struct kvmm_ctx *ctx;
	pthread_t thread;
	pthread_t rthread;
	bool rthread_on;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t idle;
	struct kvmm_list queue;
	struct kvmm_list rqueue;
	struct kvmm_list done;
	uint32_t nr_done;
	uint32_t busy;
	bool stop;
};

size_t kvmm_migrate_bytes(uint32_t n)
{
	return sizeof(struct kvmm_migrate) + (size_t)n * sizeof(uint32_t);
}

/* The allocation behind an armed job: its chain and per-page arrays. */
size_t kvmm_migrate_arm_bytes(uint32_t nr_nodes, uint32_t nr_pages)
{
	return nr_nodes * sizeof(struct migrate_node) +
	       nr_pages * (2 * sizeof(int32_t) + sizeof(struct kvmm_store_key) +
			   sizeof(uint64_t) + sizeof(void *));
}

/* Give @job the arrays at @p (kvmm_migrate_arm_bytes() long). */
void kvmm_migrate_lay_out(struct kvmm_migrate *job, char *p, uint32_t nr_nodes,
			  uint32_t nr_pages)
{
	job->chain = (struct migrate_node *)p;
	job->keys = (struct kvmm_store_key *)(job->chain + nr_nodes);
	job->sums = (uint64_t *)(job->keys + nr_pages);
	job->addrs = (void **)(job->sums + nr_pages);
	job->src = (int32_t *)(job->addrs + nr_pages);
	job->dst = job->src + nr_pages;
	job->nr_nodes = nr_nodes;
	job->nr_pages = nr_pages;
	job->io = false;
}

/* Bytes of a demotion's token copy, for @nr_pages pages. */
static size_t tokens_bytes(const struct kvmm_ctx *ctx, uint32_t nr_pages)
{
	return (size_t)nr_pages * ctx->page_size * sizeof(uint32_t);
}

void kvmm_migrate_free(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	list_del(&job->link);
	if (job->tokens_copy)
		kvmm_mfree(ctx, job->tokens_copy, tokens_bytes(ctx, job->nr_pages));
	if (job->rpages)
		kvmm_mfree(ctx, job->rpages, (size_t)job->nr_pages * sizeof(*job->rpages));
	if (job->chain)
		kvmm_mfree(ctx, job->chain, kvmm_migrate_arm_bytes(job->nr_nodes,
								   job->nr_pages));
	kvmm_mfree(ctx, job, kvmm_migrate_bytes(job->n));
}

/* The job that armed @node (KVMM_NODE_IO). */
struct kvmm_migrate *kvmm_migrate_of(struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->migrations) {
		struct kvmm_migrate *job = list_entry(pos, struct kvmm_migrate, link);

		for (i = 0; job->chain && i < job->nr_nodes; i++)
			if (job->chain[i].node == node)
				return job;
	}
	return NULL;
}

/*
 * The chain and the destination frames (job->dst, just allocated on
 * job->to) are filled in: mark the nodes and frames as the job's.
 */
void kvmm_migrate_hold(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	uint32_t i;

	for (i = 0; i < job->nr_nodes; i++) {
		job->chain[i].node->flags |= KVMM_NODE_IO;
		job->chain[i].err = 0;
	}
	job->t0 = kvmm_now_ns();
	if (job->no_dst)
		return;
	kvmm_pages_set_state(&ctx->zone[job->to], job->dst, job->nr_pages, KVMM_PAGE_IO);
	ctx->io_pages[job->to] += job->nr_pages;
}

/* Settling: the nodes and frames are no longer the job's. */
void kvmm_migrate_release(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	uint32_t i;

	for (i = 0; i < job->nr_nodes; i++)
		if (job->chain[i].node)
			job->chain[i].node->flags &= (uint8_t)~KVMM_NODE_IO;
	if (!job->no_dst)
		ctx->io_pages[job->to] -= job->nr_pages;
}

/*
 * Copy node @pn of a promotion up: verify and scatter a memory store's
 * pages in place, read an I/O store's on channel @chan and scatter them
 * from its buffers.
 */
static int copy_up(struct kvmm_ctx *ctx, struct kvmm_migrate *job,
		   const struct migrate_node *pn, uint32_t chan)
{
	const struct kvmm_backend_ops *b = ctx->backend;
	const struct kvmm_store_ops *ops = ctx->store[pn->tier];
	void *priv = ctx->store_priv[pn->tier];
	const int32_t *src = job->src + pn->first;
	const int32_t *dst = job->dst + pn->first;
	uint32_t j, done, got;
	int ret = 0, err;

	if (ops->page) {
		if (ops->verify(priv, src, pn->nr) < pn->nr)
			return -EBADMSG;
		for (j = 0; j < pn->nr; j++)
			job->addrs[j] = ops->page(priv, (uint32_t)src[j]);
		return b->scatter(ctx->backend_priv, dst, pn->nr, job->addrs);
	}
	for (done = 0; done < pn->nr && !ret; done += got) {
		got = ops->read(priv, chan, src + done, pn->nr - done,
				job->keys + pn->first + done, NULL, job->addrs, &err);
		if (got)
			ret = b->scatter(ctx->backend_priv, dst + done, got, job->addrs);
		if (!ret && err)
			ret = err;
		else if (!ret && !got)
			ret = -EIO;	/* a store that makes no progress */
	}
	return ret;
}

/**
 * kvmm_migrate_copy() - the copy step of an armed job
 * @ctx: the context
 * @job: the job
 * @chan: the I/O stores' channel: 0 under the context's lock, 1 on the
 *	worker
 *
 * Sets each node's err.  A promotion stops at its first failure (what
 * follows hangs below it); a demotion's nodes are independent leaves.
 * Changes nothing in the context: runs with or without its lock.
 */
void kvmm_migrate_copy(struct kvmm_ctx *ctx, struct kvmm_migrate *job, uint32_t chan)
{
	int failed = 0;
	uint32_t i;

	for (i = 0; i < job->nr_nodes; i++) {
		struct migrate_node *pn = &job->chain[i];

		if (failed) {
			pn->err = -ECANCELED;
			continue;
		}
		if (job->to == KVMM_TIER_DEVICE)
			failed = pn->err = copy_up(ctx, job, pn, chan);
		else if (!job->no_dst)
			pn->err = kvmm_tier_copy_down(ctx, pn->tier, job->src + pn->first,
						      job->to, job->dst + pn->first, pn->nr,
						      job->addrs, job->sums, job->keys + pn->first,
						      chan);
	}
	if (job->rpages)
		kvmm_remote_demoted(ctx, job);
}

/* The worker ran @work: its settle step is for the context's own thread. */
void kvmm_work_done(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_iow *w = ctx->iow;

	pthread_mutex_lock(&w->mu);
	list_add_tail(&work->link, &w->done);
	__atomic_store_n(&w->nr_done, w->nr_done + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&w->mu);
}

static void work_queue_on(struct kvmm_iow *w, struct kvmm_list *q, struct kvmm_work *work)
{
	pthread_mutex_lock(&w->mu);
	list_add_tail(&work->link, q);
	pthread_cond_broadcast(&w->cv);	/* two threads wait on it */
	pthread_mutex_unlock(&w->mu);
}

/* Hand @work to the I/O worker. */
void kvmm_work_queue(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	work_queue_on(ctx->iow, &ctx->iow->queue, work);
}

/*
 * Hand @work, which touches no NVMe and waits only on the remote tier,
 * to the worker's remote thread: however long the cluster takes, the
 * promotions and writebacks queued meanwhile do not wait behind it.
 */
void kvmm_work_queue_remote(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_iow *w = ctx->iow;

	work_queue_on(w, w->rthread_on ? &w->rqueue : &w->queue, work);
}

/*
 * The worker's part of a migrate job: the copy, then a promotion is
 * settled at once (a ring waits for it), a demotion goes on the done list
 * for the context's own thread.
 */
static void migrate_run(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_migrate *job = container_of(work, struct kvmm_migrate, work);

	kvmm_migrate_copy(ctx, job, 1);
	if (job->to == KVMM_TIER_DEVICE) {	/* settled and freed there */
		pthread_mutex_lock(&ctx->lock);
		kvmm_promo_finished(ctx, job);
		pthread_mutex_unlock(&ctx->lock);
		return;
	}
	kvmm_work_done(ctx, work);
}

static void writeback_settle(struct kvmm_ctx *ctx, struct kvmm_migrate *job);

/* A copied demotion, on the context's own thread: settle it, free it. */
static void migrate_settle(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_migrate *job = container_of(work, struct kvmm_migrate, work);

	writeback_settle(ctx, job);
	kvmm_migrate_free(ctx, job);
}

void kvmm_migrate_queue(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	job->work.run = migrate_run;
	job->work.settle = migrate_settle;
	kvmm_work_queue(ctx, &job->work);
}

/* ---- demotion: background reclaim ---- */

/* Pages of @tier on their way down, and free ones: what the watermarks count. */
static uint64_t headroom(const struct kvmm_ctx *ctx, uint32_t tier)
{
	return ctx->zone[tier].nr_free + ctx->writeback[tier];
}

/*
 * Isolate up to @max of the oldest leaves of @tier, @want pages or a
 * little more, into @nodes: each is marked KVMM_NODE_IO and so leaves the
 * reclaim lists, and the next victim is the next one.  A device leaf with
 * a write-through copy is demoted at once instead (a swap: no byte
 * moves).  Return: how many were isolated.
 */
static uint32_t writeback_isolate(struct kvmm_ctx *ctx, uint32_t tier, struct kvmm_node **nodes,
				  uint32_t max, uint64_t want, uint32_t *pages)
{
	struct kvmm_lruvec *lv = &ctx->lruvec[tier];
	uint32_t nr = 0;

	*pages = 0;
	while (nr < max && *pages < want) {
		struct kvmm_node *node = lv->ops->victim(lv);

		if (!node)
			break;
		if ((node->flags & KVMM_NODE_SHADOW) && !kvmm_demote(ctx, node)) {
			want -= want < (node->len >> ctx->page_shift) ? want :
				node->len >> ctx->page_shift;
			continue;
		}
		node->flags |= KVMM_NODE_IO;
		kvmm_lru_del(ctx, node);
		nodes[nr++] = node;
		*pages += node->len >> ctx->page_shift;
	}
	return nr;
}

/* Put back a node writeback isolated, as the oldest of its tier. */
static void writeback_putback(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	node->flags &= (uint8_t)~KVMM_NODE_IO;
	__kvmm_lru_update(ctx, node, true);
}

/*
 * Arm a writeback job of @nodes (@pages pages, isolated on tier @from) to
 * tier @to (@from itself: the remote tier is the only one below).  Pages
 * written to an I/O store or the remote tier carry their identity, hashed
 * from a copy of their tokens the job keeps (a node may be dropped while
 * the worker writes it); a memory store needs neither.
 */
static struct kvmm_migrate *writeback_arm(struct kvmm_ctx *ctx, struct kvmm_node **nodes,
					  uint32_t nr, uint32_t pages, uint32_t from,
					  uint32_t to)
{
	bool no_dst = to == from, io = !no_dst && !ctx->store[to]->page;
	bool remote = from == KVMM_TIER_HOST &&
		      ctx->params.remote_write == KVMM_REMOTE_WRITE_DEMOTE;
	size_t tok_bytes = io || remote ? tokens_bytes(ctx, pages) : 0;
	size_t rp_bytes = remote ? (size_t)pages * sizeof(struct kvmm_remote_page) : 0;
	struct kvmm_migrate *job = kvmm_zalloc(ctx, kvmm_migrate_bytes(0));
	char *arm = kvmm_malloc(ctx, kvmm_migrate_arm_bytes(nr, pages));
	uint32_t *tok = tok_bytes ? kvmm_malloc(ctx, tok_bytes) : NULL;
	struct kvmm_remote_page *rp = remote ? kvmm_malloc(ctx, rp_bytes) : NULL;
	uint32_t i, at = 0;

	if (!job || !arm || (tok_bytes && !tok) || (remote && !rp) ||
	    (!no_dst && !kvmm_tier_make_room(ctx, to, pages))) {
		kvmm_mfree(ctx, rp, rp_bytes);
		kvmm_mfree(ctx, tok, tok_bytes);
		kvmm_mfree(ctx, arm, kvmm_migrate_arm_bytes(nr, pages));
		kvmm_mfree(ctx, job, kvmm_migrate_bytes(0));
		return NULL;
	}
	kvmm_migrate_lay_out(job, arm, nr, pages);
	job->tokens_copy = tok;
	job->rpages = rp;
	job->seq = KVMM_SEQ_NONE;
	job->to = to;
	job->from = from;
	job->io = io;
	job->no_dst = no_dst;
	list_init(&job->waiters);
	for (i = 0; i < nr; i++) {
		uint32_t len = nodes[i]->len >> ctx->page_shift;
		uint32_t *t = tok ? tok + (size_t)at * ctx->page_size : NULL;

		job->chain[i] = (struct migrate_node){ .node = nodes[i], .first = at,
						       .nr = len, .tier = nodes[i]->tier };
		memcpy(job->src + at, nodes[i]->pfns, len * sizeof(int32_t));
		if (tok)
			memcpy(t, nodes[i]->tokens, (size_t)nodes[i]->len * sizeof(uint32_t));
		if (remote && !(nodes[i]->flags & KVMM_NODE_KEYED))
			kvmm_remote_name_node(ctx, nodes[i], t, rp + at);
		else if (remote)	/* written through when put: not again */
			memset(rp + at, 0, len * sizeof(*rp));
		if (io)
			kvmm_tier_keys(ctx, nodes[i], job->keys + at);
		for (; len; len--, at++)
			if (io)
				job->keys[at].tokens = tok + (size_t)at * ctx->page_size;
	}
	if (!no_dst)
		__kvmm_alloc_pages(ctx, &ctx->zone[to], pages, job->dst);
	kvmm_migrate_hold(ctx, job);
	list_add_tail(&job->link, &ctx->migrations);
	return job;
}

/*
 * Queue writeback jobs taking tier @tier's oldest leaves down to @lower
 * until @target of its pages are free or on their way down.
 */
static void writeback_until(struct kvmm_ctx *ctx, uint32_t tier, uint32_t lower,
			    uint64_t target)
{
	struct kvmm_node *nodes[KVMM_WRITEBACK_BATCH];
	struct kvmm_migrate *job;
	uint32_t nr, pages, i;

	/* in jobs of a bounded size, so that each settles (and frees) soon */
	while (headroom(ctx, tier) < target) {
		uint64_t want = target - headroom(ctx, tier);

		nr = writeback_isolate(ctx, tier, nodes, KVMM_WRITEBACK_BATCH,
				       want < KVMM_WRITEBACK_PAGES ? want : KVMM_WRITEBACK_PAGES,
				       &pages);
		if (!nr)
			return;
		job = writeback_arm(ctx, nodes, nr, pages, tier, lower);
		if (!job) {
			for (i = 0; i < nr; i++)
				writeback_putback(ctx, nodes[i]);
			return;
		}
		ctx->writeback[tier] += pages;
		kvmm_count(ctx, EV_WRITEBACK_RUNS, 1);
		kvmm_migrate_queue(ctx, job);
	}
}

/*
 * kvmm_writeback_tier() - background reclaim of tier @tier: below its low
 *	watermark (counting pages already on their way down as free), the
 *	oldest leaves go down to the tier below in jobs on the I/O worker,
 *	enough to reach the high watermark.  Nothing waits for them here.
 * @ctx: the context
 * @tier: the tier, after an allocation on it
 */
void kvmm_writeback_tier(struct kvmm_ctx *ctx, uint32_t tier)
{
	struct kvmm_zone *zone = &ctx->zone[tier];
	uint32_t lower;

	if (!kvmm_writeback_serves(ctx, tier) ||
	    headroom(ctx, tier) >= zone->wmark[KVMM_WMARK_LOW])
		return;
	if (!kvmm_tier_below(ctx, tier, &lower))
		lower = tier;	/* the remote tier, and nothing here, takes them */
	kvmm_migrate_reap(ctx);
	if (headroom(ctx, tier) >= zone->wmark[KVMM_WMARK_LOW])
		return;
	writeback_until(ctx, tier, lower, zone->wmark[KVMM_WMARK_HIGH]);
}

/**
 * kvmm_writeback_room() - write tier @tier's oldest leaves down now, to
 *	make room for @nr pages, whatever its watermarks say
 * @ctx: the context, its lock held where it has one
 * @tier: a tier background reclaim serves (kvmm_writeback_serves())
 * @nr: pages wanted free
 *
 * For an allocation that would rather wait for the write than drop what
 * it would evict (a keyed put): queues writeback jobs until @nr pages (or
 * the high watermark, if more) are free or on their way down.
 *
 * Return: whether pages are on their way down, so that waiting for the
 * I/O worker frees some; false: nothing could be written down (the tier
 * below refused room, or every leaf is locked or in flight).
 */
bool kvmm_writeback_room(struct kvmm_ctx *ctx, uint32_t tier, uint64_t nr)
{
	uint64_t high = ctx->zone[tier].wmark[KVMM_WMARK_HIGH];
	uint32_t lower;

	if (!kvmm_writeback_serves(ctx, tier))
		return false;
	if (!kvmm_tier_below(ctx, tier, &lower))
		lower = tier;
	writeback_until(ctx, tier, lower, nr > high ? nr : high);
	return ctx->writeback[tier] > 0;
}

/**
 * kvmm_iow_idle() - wait until the I/O worker has nothing queued or in
 *	hand (what it did is settled by the next kvmm_migrate_reap())
 * @ctx: the context
 *
 * Context: without ctx->lock (the worker may need it to finish a PROMOTE).
 */
void kvmm_iow_idle(struct kvmm_ctx *ctx)
{
	struct kvmm_iow *w = ctx->iow;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	while (w->busy || !list_empty(&w->queue) || !list_empty(&w->rqueue))
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/*
 * Whether background reclaim keeps tier @tier above its low watermark:
 * with a tier below, or for the host tier with none, when its pages go to
 * the remote tier as they leave it (KVMM_REMOTE_WRITE_DEMOTE).
 */
bool kvmm_writeback_serves(const struct kvmm_ctx *ctx, uint32_t tier)
{
	uint32_t lower;

	return ctx->iow && ctx->zone[tier].wmark[KVMM_WMARK_LOW] &&
	       (kvmm_tier_below(ctx, tier, &lower) ||
		(tier == KVMM_TIER_HOST &&
		 ctx->params.remote_write == KVMM_REMOTE_WRITE_DEMOTE));
}

/**
 * kvmm_writeback() - background reclaim, the kswapd of this project
 * @ctx: the context, after an allocation on one of its tiers
 *
 * The device (with a low watermark set and a host tier below) demotes
 * its oldest leaves to the host tier on the I/O worker, so that EXTEND
 * normally finds free pages; the host tier writes its oldest leaves to
 * NVMe the same way.  Each tier goes down to its high watermark once it
 * is below its low one.  Without a worker (no lower tier) there is
 * nothing to do.
 */
void kvmm_writeback(struct kvmm_ctx *ctx)
{
	kvmm_writeback_tier(ctx, KVMM_TIER_DEVICE);
	kvmm_writeback_tier(ctx, KVMM_TIER_HOST);
}

/**
 * kvmm_writeback_cancel() - @node, which a demotion is writing down, is
 *	being dropped
 * @ctx: the context
 * @node: the node, about to leave the tree
 *
 * The worker may be reading its pages: the job takes them over (state
 * KVMM_PAGE_IO) and frees them, and the copy it made, when it settles.
 */
void kvmm_writeback_cancel(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_migrate *job = kvmm_migrate_of(ctx, node);
	uint32_t i;

	for (i = 0; i < job->nr_nodes; i++) {
		struct migrate_node *pn = &job->chain[i];

		if (pn->node != node)
			continue;
		pn->node = NULL;
		kvmm_pages_set_state(&ctx->zone[pn->tier], job->src + pn->first, pn->nr,
				     KVMM_PAGE_IO);
		ctx->io_pages[pn->tier] += pn->nr;
		node->flags &= (uint8_t)~KVMM_NODE_IO;
		return;
	}
}

/* The entry of a demotion in flight that holds (or held) @node: NULL if none. */
static struct migrate_node *writeback_entry(struct kvmm_ctx *ctx, const struct kvmm_node *node,
					    bool taken)
{
	struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->migrations) {
		struct kvmm_migrate *job = list_entry(pos, struct kvmm_migrate, link);

		if (job->to == KVMM_TIER_DEVICE || !job->chain)
			continue;
		for (i = 0; i < job->nr_nodes; i++)
			if ((taken ? job->chain[i].taken : job->chain[i].node) == node)
				return &job->chain[i];
	}
	return NULL;
}

/**
 * kvmm_writeback_take() - a promotion arms @node, which a demotion is
 *	writing down
 * @ctx: the context
 * @node: the node, on a lower tier, locked by the promotion
 *
 * Its pages are still where they were and can be read while the demotion
 * reads them too: the promotion takes the node over, and the demotion
 * goes on writing pages nobody will keep (its settle frees the frames it
 * wrote to).  The source frames stay the node's until the promotion
 * settles (kvmm_writeback_give()).
 */
void kvmm_writeback_take(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct migrate_node *pn = writeback_entry(ctx, node, false);

	pn->node = NULL;
	pn->taken = node;
	node->flags &= (uint8_t)~KVMM_NODE_IO;	/* the promotion marks it again */
}

/**
 * kvmm_writeback_give() - the promotion that took @node settles: the
 *	node's source frames leave it (it moves up, or is dropped)
 * @ctx: the context
 * @node: the node, released by the promotion
 *
 * If the demotion it was taken from is still in flight, its copy may be
 * reading those frames: they pass to the demotion (state KVMM_PAGE_IO,
 * with a second reference that the node's own free drops), which frees
 * them when it settles, as it frees a dropped node's.  Once the demotion
 * has settled its copy is over, and the node frees its frames itself.
 */
void kvmm_writeback_give(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct migrate_node *pn = writeback_entry(ctx, node, true);
	struct kvmm_zone *zone = &ctx->zone[node->tier];
	uint32_t i;

	if (!pn)
		return;
	pn->taken = NULL;
	kvmm_pages_set_state(zone, node->pfns, pn->nr, KVMM_PAGE_IO);
	for (i = 0; i < pn->nr; i++)
		zone->pages[node->pfns[i]].refcount = 2;
	ctx->io_pages[node->tier] += pn->nr;
}

/* Settle a copied demotion: see the DOC above. */
static void writeback_settle(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	uint32_t i;

	kvmm_migrate_release(ctx, job);
	ctx->writeback[job->from] -= job->nr_pages;
	kvmm_count(ctx, EV_REMOTE_DEMOTE_PAGES, job->rput);
	for (i = 0; i < job->nr_nodes; i++) {
		const struct migrate_node *pn = &job->chain[i];
		struct kvmm_node *node = pn->node;

		if (!node) {	/* dropped or promoted meanwhile: nothing to keep */
			if (!job->no_dst)
				kvmm_free_pages(ctx, &ctx->zone[job->to], job->dst + pn->first,
						pn->nr);
			if (pn->taken)	/* its frames are still the promotion's */
				continue;
			kvmm_free_pages(ctx, &ctx->zone[pn->tier], job->src + pn->first, pn->nr);
			ctx->io_pages[pn->tier] -= pn->nr;
			continue;
		}
		if (job->no_dst) {	/* written to the remote tier, or lost: it goes */
			if (pn->err)
				kvmm_tier_copy_failed(ctx, pn->tier, job->to, pn->err);
			if (node->lock_ref)
				writeback_putback(ctx, node);
			else
				kvmm_drop_subtree(ctx, node);
			continue;
		}
		if (!pn->err && !node->lock_ref) {
			kvmm_node_moved(ctx, node, job->to, job->dst + pn->first, job->to,
					job->t0);
			continue;
		}
		/* failed, or a keyed get reads its frames now: it stays */
		kvmm_free_pages(ctx, &ctx->zone[job->to], job->dst + pn->first, pn->nr);
		if (pn->err)
			kvmm_tier_copy_failed(ctx, pn->tier, job->to, pn->err);
		writeback_putback(ctx, node);
		if (pn->err == -EBADMSG && !node->lock_ref)	/* bad: never serve them */
			kvmm_drop_subtree(ctx, node);
	}
}

/**
 * kvmm_migrate_reap() - settle the demotions the worker has copied
 * @ctx: the context, held by the caller (its lock, or the direct API's
 *	one thread)
 */
void kvmm_migrate_reap(struct kvmm_ctx *ctx)
{
	struct kvmm_iow *w = ctx->iow;
	struct kvmm_list done;
	bool to_host = false;

	if (!w || !__atomic_load_n(&w->nr_done, __ATOMIC_RELAXED))
		return;
	list_init(&done);
	pthread_mutex_lock(&w->mu);
	list_splice_init(&w->done, &done);
	__atomic_store_n(&w->nr_done, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&w->mu);
	while (!list_empty(&done)) {
		struct kvmm_work *work = list_entry(done.next, struct kvmm_work, link);
		const struct kvmm_migrate *job = work->settle == migrate_settle ?
						 container_of(work, struct kvmm_migrate, work) : NULL;

		list_del(&work->link);
		to_host |= job && job->to == KVMM_TIER_HOST && !job->no_dst;
		work->settle(ctx, work);
	}
	if (to_host)	/* what the device's background reclaim brought may be too much */
		kvmm_writeback_tier(ctx, KVMM_TIER_HOST);
}

/* ---- the I/O worker ---- */

/* Run the jobs of @q until the worker stops and @q is empty. */
static void iow_loop(struct kvmm_iow *w, struct kvmm_list *q)
{
	struct kvmm_ctx *ctx = w->ctx;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct kvmm_work *work;

		while (list_empty(q) && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (list_empty(q))
			break;
		work = list_entry(q->next, struct kvmm_work, link);
		list_del(&work->link);
		w->busy++;
		pthread_mutex_unlock(&w->mu);
		work->run(ctx, work);
		pthread_mutex_lock(&w->mu);
		w->busy--;
		if (!w->busy && list_empty(&w->queue) && list_empty(&w->rqueue))
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
}

static void *iow_main(void *arg)
{
	struct kvmm_iow *w = arg;

	iow_loop(w, &w->queue);
	return NULL;
}

static void *iow_remote_main(void *arg)
{
	struct kvmm_iow *w = arg;

	iow_loop(w, &w->rqueue);
	return NULL;
}

/**
 * kvmm_iow_start() - start the context's I/O worker
 * @ctx: the context, its tiers set up
 *
 * Return: 0, -ENOMEM, or the error of pthread_create().
 */
int kvmm_iow_start(struct kvmm_ctx *ctx)
{
	struct kvmm_iow *w = kvmm_zalloc(ctx, sizeof(*w));
	int ret;

	if (!w)
		return -ENOMEM;
	w->ctx = ctx;
	list_init(&w->queue);
	list_init(&w->rqueue);
	list_init(&w->done);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	pthread_cond_init(&w->idle, NULL);
	ret = -pthread_create(&w->thread, NULL, iow_main, w);
	if (!ret && ctx->remote) {
		ret = -pthread_create(&w->rthread, NULL, iow_remote_main, w);
		w->rthread_on = !ret;
		if (ret) {
			pthread_mutex_lock(&w->mu);
			w->stop = true;
			pthread_cond_broadcast(&w->cv);
			pthread_mutex_unlock(&w->mu);
			pthread_join(w->thread, NULL);
		}
	}
	if (ret) {
		pthread_cond_destroy(&w->idle);
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		kvmm_mfree(ctx, w, sizeof(*w));
		return ret;
	}
	ctx->iow = w;
	return 0;
}

/**
 * kvmm_iow_stop() - finish every queued job, settle them, stop the worker
 * @ctx: the context; its lock not held
 *
 * The remote tier's calls are cut short first (a miss each, at once):
 * what is queued for it runs, but waits on no cluster.
 */
void kvmm_iow_stop(struct kvmm_ctx *ctx)
{
	struct kvmm_iow *w = ctx->iow;

	if (!w)
		return;
	if (ctx->remote && ctx->remote->cancel)
		ctx->remote->cancel(ctx->remote_priv);
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	if (w->rthread_on)
		pthread_join(w->rthread, NULL);
	kvmm_migrate_reap(ctx);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	kvmm_mfree(ctx, w, sizeof(*w));
	ctx->iow = NULL;
}

/**
 * kvmm_sync() - wait for the demotions in flight and settle them
 * @ctx: the context
 *
 * Background reclaim writes cold prefixes to the NVMe tier while the
 * context serves other calls; this waits until the I/O worker has nothing
 * queued or in hand and settles what it did, so that every page it took
 * is on its new tier (or back where it was, if its write failed).  It
 * takes the context's lock to settle them, so call it without holding
 * kvmm_lock(): the worker may need that lock to finish a ring's PROMOTE
 * queued before them.  A context with no NVMe tier returns at once.
 *
 * Return: 0, or -EINVAL.
 */
KVMM_EXPORT int kvmm_sync(struct kvmm_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	if (!ctx->iow)
		return 0;
	kvmm_iow_idle(ctx);
	pthread_mutex_lock(&ctx->lock);
	kvmm_migrate_reap(ctx);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

/* Mark @pfns of @zone as a job's: each must be IO and not marked yet. */
static int mark_frames(const struct kvmm_zone *zone, uint8_t *mark, uint8_t mark_io,
		       const int32_t *pfns, uint32_t nr)
{
	uint32_t i;

	for (i = 0; i < nr; i++) {
		int32_t pfn = pfns[i];

		if (pfn < 0 || (uint32_t)pfn >= zone->nr_pages ||
		    zone->pages[pfn].state != KVMM_PAGE_IO || mark[pfn])
			return -EUCLEAN;
		mark[pfn] = mark_io;
	}
	return 0;
}

/**
 * kvmm_migrations_check() - kvmm_check()'s view of the jobs
 * @ctx: the context
 * @marks: per tier, a byte per frame; the jobs' frames are set to @mark_io
 * @mark_io: kvmm_check()'s mark for a frame a job holds
 * @io: out, per tier, frames the jobs hold there
 * @locks: out, node locks the jobs hold
 * @nodes: out, nodes the jobs have armed
 * @why: out, what is wrong
 *
 * Return: 0, or -EUCLEAN with @why set.
 */
int kvmm_migrations_check(const struct kvmm_ctx *ctx, uint8_t *const *marks,
			  uint8_t mark_io, uint64_t *io, uint64_t *locks, uint64_t *nodes,
			  const char **why)
{
	const struct kvmm_list *pos;
	uint64_t wb[KVMM_NR_TIERS] = { 0 };
	uint32_t i;

	memset(io, 0, KVMM_NR_TIERS * sizeof(*io));
	*locks = *nodes = 0;
	list_for_each(pos, &ctx->migrations) {
		const struct kvmm_migrate *job = list_entry(pos, struct kvmm_migrate, link);
		const struct kvmm_zone *zone = &ctx->zone[job->to];

		if (job->seq != KVMM_SEQ_NONE && ctx->seqs[job->seq].promo != job) {
			*why = "a promotion's sequence does not name it";
			return -EUCLEAN;
		}
		if (!job->chain)
			continue;
		for (i = 0; i < job->nr_nodes; i++) {
			const struct migrate_node *pn = &job->chain[i];
			const struct kvmm_node *n = pn->node;

			if (!n && pn->taken) {
				if (job->to == KVMM_TIER_DEVICE || !(pn->taken->flags & KVMM_NODE_IO)) {
					*why = "a node taken from a demotion is not a promotion's";
					return -EUCLEAN;
				}
				continue;	/* its frames are the node's */
			}
			if (!n && mark_frames(&ctx->zone[pn->tier], marks[pn->tier], mark_io,
					      job->src + pn->first, pn->nr)) {
				*why = "a dropped node's frames are not held by its demotion";
				return -EUCLEAN;
			}
			if (!n) {
				io[pn->tier] += pn->nr;
				continue;
			}
			*nodes += 1;
			if (!(n->flags & KVMM_NODE_IO) || n->tier != job->chain[i].tier ||
			    (n->tier == job->to && !job->no_dst) ||
			    (job->to == KVMM_TIER_DEVICE ? !n->lock_ref
							 : !!(n->flags & KVMM_NODE_EVICTABLE))) {
				*why = "a migrating node is not marked, held and off its destination";
				return -EUCLEAN;
			}
		}
		if (!job->no_dst &&
		    mark_frames(zone, marks[job->to], mark_io, job->dst, job->nr_pages)) {
			*why = "a migration's frame is not in state IO, or is held twice";
			return -EUCLEAN;
		}
		if ((job->rpages || job->no_dst) &&
		    (job->from != KVMM_TIER_HOST || job->to == KVMM_TIER_DEVICE)) {
			*why = "a job writes the remote tier from another tier than the host's";
			return -EUCLEAN;
		}
		if (!job->no_dst)
			io[job->to] += job->nr_pages;
		if (job->to != KVMM_TIER_DEVICE)
			wb[job->from] += job->nr_pages;
		*locks += job->nr_locks;
	}
	for (i = 0; i < KVMM_NR_TIERS; i++) {
		if (wb[i] != ctx->writeback[i]) {
			*why = "the pages demotions are moving down are miscounted";
			return -EUCLEAN;
		}
	}
	return 0;
}
