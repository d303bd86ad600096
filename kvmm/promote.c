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
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

#define SEQ_NONE	UINT32_MAX

/* One lower-tier node of an armed chain: its pages in the job's arrays. */
struct promo_node {
	struct kvmm_node *node;
	uint32_t first;
	uint32_t nr;
	uint32_t tier;
};

/**
 * struct kvmm_promo - one promotion
 * @link: on ctx->promos while it exists
 * @qlink: on the worker's queue, or on the waiters of the job it waits for
 * @waiters: jobs waiting for this one's chain
 * @owner: where its deferred completion goes; NULL: nobody waits for one
 * @user_data: the completion's user_data
 * @seq: its sequence; SEQ_NONE once cancelled
 * @tokens: the key past the sequence's cached tokens, @n of them
 * @chain: the armed chain, top down, @nr_nodes of them; NULL before arming
 * @src, @dst: per page, the lower-tier frame and the device (IO) frame
 * @keys: per page, its identity (for an I/O store's check)
 * @addrs: per page, scratch for the copy
 * @nr_pages: pages of the chain
 * @done: nodes of the chain copied whole
 * @err: why node @done could not be copied
 * @io: the chain reaches an I/O store
 * @t0: when it was armed
 */
struct kvmm_promo {
	struct kvmm_list link;
	struct kvmm_list qlink;
	struct kvmm_list waiters;
	struct kvmm_owner *owner;
	uint64_t user_data;
	uint32_t seq;
	uint32_t n;
	uint32_t *tokens;
	struct promo_node *chain;
	uint32_t nr_nodes;
	uint32_t nr_pages;
	int32_t *src, *dst;
	struct kvmm_store_key *keys;
	void **addrs;
	uint32_t done;
	int err;
	bool io;
	uint64_t t0;
};

/**
 * struct kvmm_iow - the I/O worker of a context
 * @ctx: the context
 * @thread: it
 * @mu: protects @queue and @stop
 * @cv: signalled when either changes
 * @queue: armed jobs to copy, oldest first
 * @stop: exit once the queue is empty
 */
struct kvmm_iow {
	struct kvmm_ctx *ctx;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct kvmm_list queue;
	bool stop;
};

static size_t job_bytes(uint32_t n)
{
	return sizeof(struct kvmm_promo) + (size_t)n * sizeof(uint32_t);
}

/* The allocation behind an armed chain: @chain and the per-page arrays. */
static size_t arm_bytes(uint32_t nr_nodes, uint32_t nr_pages)
{
	return nr_nodes * sizeof(struct promo_node) +
	       nr_pages * (2 * sizeof(int32_t) + sizeof(struct kvmm_store_key) +
			   sizeof(void *));
}

static void job_free(struct kvmm_ctx *ctx, struct kvmm_promo *job)
{
	list_del(&job->link);
	if (job->chain)
		kvmm_mfree(ctx, job->chain, arm_bytes(job->nr_nodes, job->nr_pages));
	kvmm_mfree(ctx, job, job_bytes(job->n));
}

/* The job that armed @node (KVMM_NODE_IO). */
static struct kvmm_promo *job_of(struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->promos) {
		struct kvmm_promo *job = list_entry(pos, struct kvmm_promo, link);

		for (i = 0; job->chain && i < job->nr_nodes; i++)
			if (job->chain[i].node == node)
				return job;
	}
	return NULL;
}

/*
 * Arm the chain of @path below @from with the arrays at @p (arm_bytes()
 * long, taken over): see the DOC above.  Nothing changes on failure.
 * Return: 0, or -ENOSPC when the device cannot make room for the chain.
 */
static int job_arm(struct kvmm_ctx *ctx, struct kvmm_promo *job, struct kvmm_node *from,
		   struct kvmm_path *path, uint32_t nr_nodes, uint32_t nr_pages, char *p)
{
	struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	struct kvmm_node *n;
	uint32_t i, at;
	int ret;

	kvmm_tree_lock(ctx, path->node);	/* before reclaim can look at it */
	ret = kvmm_zone_reserve(ctx, dev, nr_pages, 0);
	if (ret) {
		kvmm_tree_unlock(ctx, path->node);
		kvmm_mfree(ctx, p, arm_bytes(nr_nodes, nr_pages));
		return ret;
	}
	job->chain = (struct promo_node *)p;
	job->keys = (struct kvmm_store_key *)(job->chain + nr_nodes);
	job->addrs = (void **)(job->keys + nr_pages);
	job->src = (int32_t *)(job->addrs + nr_pages);
	job->dst = job->src + nr_pages;
	job->nr_nodes = nr_nodes;
	job->nr_pages = nr_pages;
	job->done = 0;
	job->err = 0;
	job->io = false;
	at = nr_pages;
	i = nr_nodes;
	for (n = path->node; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		struct promo_node *pn = &job->chain[--i];
		uint32_t nr = n->len >> ctx->page_shift;

		at -= nr;
		*pn = (struct promo_node){ .node = n, .first = at, .nr = nr, .tier = n->tier };
		memcpy(job->src + at, n->pfns, nr * sizeof(*n->pfns));
		if (!ctx->store[n->tier]->page) {
			kvmm_tier_keys(ctx, n, job->keys + at);
			job->io = true;
		}
		n->flags |= KVMM_NODE_IO;
	}
	__kvmm_alloc_pages(ctx, dev, nr_pages, job->dst);
	kvmm_pages_set_state(dev, job->dst, nr_pages, KVMM_PAGE_IO);
	ctx->io_pages += nr_pages;
	job->t0 = kvmm_now_ns();
	return 0;
}

/*
 * Copy the armed chain up: verify and scatter a memory store's pages in
 * place, read an I/O store's on channel @chan and scatter them from its
 * buffers.  Changes nothing in the context: runs with or without its lock.
 */
static void job_copy(struct kvmm_ctx *ctx, struct kvmm_promo *job, uint32_t chan)
{
	const struct kvmm_backend_ops *b = ctx->backend;
	uint32_t i, j, done, got;
	int ret = 0, err;

	for (i = 0; i < job->nr_nodes && !ret; i++) {
		const struct promo_node *pn = &job->chain[i];
		const struct kvmm_store_ops *ops = ctx->store[pn->tier];
		void *priv = ctx->store_priv[pn->tier];
		const int32_t *src = job->src + pn->first;
		const int32_t *dst = job->dst + pn->first;

		if (ops->page) {
			if (ops->verify(priv, src, pn->nr) < pn->nr) {
				ret = -EBADMSG;
				break;
			}
			for (j = 0; j < pn->nr; j++)
				job->addrs[j] = ops->page(priv, (uint32_t)src[j]);
			ret = b->scatter(ctx->backend_priv, dst, pn->nr, job->addrs);
		}
		for (done = 0; !ops->page && done < pn->nr && !ret; done += got) {
			got = ops->read(priv, chan, src + done, pn->nr - done,
					job->keys + pn->first + done, job->addrs, &err);
			if (got)
				ret = b->scatter(ctx->backend_priv, dst + done, got, job->addrs);
			if (!ret && err)
				ret = err;
			else if (!ret && !got)
				ret = -EIO;	/* a store that makes no progress */
		}
		if (!ret)
			job->done = i + 1;
	}
	job->err = ret;
}

/*
 * The copy is over: move what arrived to the device, give back the rest,
 * drop a node that failed with what hangs below it.
 */
static void job_settle(struct kvmm_ctx *ctx, struct kvmm_promo *job)
{
	struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	struct kvmm_node *end = job->chain[job->nr_nodes - 1].node, *failed = NULL;
	uint32_t i;

	for (i = 0; i < job->nr_nodes; i++)
		job->chain[i].node->flags &= (uint8_t)~KVMM_NODE_IO;
	for (i = 0; i < job->done; i++) {
		const struct promo_node *pn = &job->chain[i];

		kvmm_node_moved(ctx, pn->node, KVMM_TIER_DEVICE, job->dst + pn->first,
				pn->tier, job->t0);
	}
	if (job->done < job->nr_nodes) {
		const struct promo_node *pn = &job->chain[job->done];

		kvmm_tier_count(ctx, pn->tier, job->err == -EBADMSG ? TEV_CSUM_FAIL
								    : TEV_IO_ERRORS, 1);
		kvmm_free_pages(ctx, dev, job->dst + pn->first, job->nr_pages - pn->first);
		failed = pn->node;
	}
	ctx->io_pages -= job->nr_pages;
	kvmm_tree_unlock(ctx, end);
	if (failed) {
		kvmm_assert(ctx, !failed->lock_ref);
		kvmm_drop_subtree(ctx, failed);
	} else {
		kvmm_tree_touch(ctx, end);
	}
}

/*
 * Map the device part of the job's key into the sequence's row and lock
 * it.  Cannot fail: a walk that ends inside an edge backs off to the node
 * before rather than split.  Return: the sequence's cached tokens.
 */
static int job_map(struct kvmm_ctx *ctx, struct kvmm_promo *job)
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
	}
	return (int)s->cached;
}

static void iow_queue(struct kvmm_iow *w, struct kvmm_promo *job)
{
	pthread_mutex_lock(&w->mu);
	list_add_tail(&job->qlink, &w->queue);
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
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
static int job_run(struct kvmm_ctx *ctx, struct kvmm_promo *job, bool sync)
{
	struct kvmm_node *n, *busy = NULL, *from;
	uint32_t nr_nodes = 0, nr_pages = 0;
	struct kvmm_path path;
	char *arm = NULL;
	struct kvmm_seq *s;
	int ret;

	if (job->seq == SEQ_NONE)
		return -ECANCELED;
	s = &ctx->seqs[job->seq];
	from = s->node;
	kvmm_tree_walk(ctx, from, job->tokens, job->n, &path);
	for (n = path.node; n != from; n = n->parent)
		if (n->flags & KVMM_NODE_IO)
			busy = n;
	if (busy) {
		if (sync)
			return -EBUSY;
		list_add_tail(&job->qlink, &job_of(ctx, busy)->waiters);
		return -EINPROGRESS;
	}
	/* The chain as it will be after the split, to allocate before it. */
	for (n = path.node; n != from && n->tier != KVMM_TIER_DEVICE; n = n->parent) {
		nr_nodes++;
		nr_pages += (n == path.node && path.split ? path.split : n->len) >>
			    ctx->page_shift;
	}
	if (nr_nodes) {
		arm = kvmm_malloc(ctx, arm_bytes(nr_nodes, nr_pages));
		if (!arm)
			return -ENOMEM;
	}
	ret = kvmm_tree_split(ctx, &path);
	if (ret) {
		kvmm_mfree(ctx, arm, arm_bytes(nr_nodes, nr_pages));
		return ret;
	}
	if (nr_nodes) {
		ret = job_arm(ctx, job, from, &path, nr_nodes, nr_pages, arm);
		if (ret)
			return ret;
		if (job->io && !sync && ctx->iow) {
			iow_queue(ctx->iow, job);
			return -EINPROGRESS;
		}
		job_copy(ctx, job, 0);
		job_settle(ctx, job);
	}
	return job_map(ctx, job);
}

static void job_complete(struct kvmm_ctx *ctx, struct kvmm_promo *job, int res);

/*
 * A job's chain is settled: finish it and start the jobs that waited for
 * it, each of which may finish at once, wait again or go to the worker.
 */
static void job_finished(struct kvmm_ctx *ctx, struct kvmm_promo *job)
{
	struct kvmm_list woken;
	int res;

	job_settle(ctx, job);
	res = job->seq == SEQ_NONE ? -ECANCELED : job_map(ctx, job);
	list_init(&woken);
	while (!list_empty(&job->waiters)) {
		struct kvmm_list *e = job->waiters.next;

		list_del(e);
		list_add_tail(e, &woken);
	}
	job_complete(ctx, job, res);
	while (!list_empty(&woken)) {
		struct kvmm_promo *w = list_entry(woken.next, struct kvmm_promo, qlink);

		list_del(&w->qlink);
		res = job_run(ctx, w, false);
		if (res != -EINPROGRESS)
			job_complete(ctx, w, res);
	}
}

/* Post the job's completion, free its sequence, free it. */
static void job_complete(struct kvmm_ctx *ctx, struct kvmm_promo *job, int res)
{
	if (job->seq != SEQ_NONE)
		ctx->seqs[job->seq].promo = NULL;
	else
		kvmm_count(ctx, EV_PROMOTE_CANCELED, 1);
	if (job->owner)
		kvmm_owner_complete(job->owner, job->user_data, res);
	job_free(ctx, job);
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
	struct kvmm_promo *job;
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
	job = kvmm_zalloc(ctx, job_bytes(n - s->cached));
	if (!job)
		return -ENOMEM;
	job->tokens = (uint32_t *)(job + 1);
	job->n = n - s->cached;
	memcpy(job->tokens, tokens + s->cached, (size_t)job->n * sizeof(*tokens));
	job->seq = seq;
	job->owner = owner;
	job->user_data = user_data;
	list_init(&job->waiters);
	list_add_tail(&job->link, &ctx->promos);
	s->promo = job;
	ret = job_run(ctx, job, !owner);
	if (ret == -EINPROGRESS) {
		kvmm_count(ctx, EV_PROMOTE_ASYNC, 1);
		return ret;
	}
	s->promo = NULL;
	job_free(ctx, job);
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
void kvmm_promo_cancel(struct kvmm_ctx *ctx, struct kvmm_promo *job)
{
	ctx->seqs[job->seq].promo = NULL;
	job->seq = SEQ_NONE;
}

/* @owner is going away: its jobs complete to nobody. */
void kvmm_promos_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->promos) {
		struct kvmm_promo *job = list_entry(pos, struct kvmm_promo, link);

		if (job->owner == owner)
			job->owner = NULL;
	}
}

static void *iow_main(void *arg)
{
	struct kvmm_iow *w = arg;
	struct kvmm_ctx *ctx = w->ctx;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct kvmm_promo *job;

		while (list_empty(&w->queue) && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (list_empty(&w->queue))
			break;
		job = list_entry(w->queue.next, struct kvmm_promo, qlink);
		list_del(&job->qlink);
		pthread_mutex_unlock(&w->mu);
		job_copy(ctx, job, 1);
		pthread_mutex_lock(&ctx->lock);
		job_finished(ctx, job);
		pthread_mutex_unlock(&ctx->lock);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
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
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	ret = -pthread_create(&w->thread, NULL, iow_main, w);
	if (ret) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		kvmm_mfree(ctx, w, sizeof(*w));
		return ret;
	}
	ctx->iow = w;
	return 0;
}

/**
 * kvmm_iow_stop() - finish every queued job, then stop the worker
 * @ctx: the context; its lock not held
 */
void kvmm_iow_stop(struct kvmm_ctx *ctx)
{
	struct kvmm_iow *w = ctx->iow;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	kvmm_mfree(ctx, w, sizeof(*w));
	ctx->iow = NULL;
}

/**
 * kvmm_promos_check() - kvmm_check()'s view of the jobs
 * @ctx: the context
 * @mark: a byte per device frame; the jobs' frames are set to @mark_io
 * @mark_io: kvmm_check()'s mark for a frame a promotion holds
 * @locks: out, node locks the jobs hold
 * @nodes: out, nodes the jobs have armed
 * @why: out, what is wrong
 *
 * Return: device frames the jobs hold, or UINT64_MAX with @why set.
 */
uint64_t kvmm_promos_check(const struct kvmm_ctx *ctx, uint8_t *mark, uint8_t mark_io,
			   uint64_t *locks, uint64_t *nodes, const char **why)
{
	const struct kvmm_zone *dev = &ctx->zone[KVMM_TIER_DEVICE];
	const struct kvmm_list *pos;
	uint64_t pages = 0;
	uint32_t i;

	*locks = *nodes = 0;
	list_for_each(pos, &ctx->promos) {
		const struct kvmm_promo *job = list_entry(pos, struct kvmm_promo, link);

		if (job->seq != SEQ_NONE && ctx->seqs[job->seq].promo != job) {
			*why = "a promotion's sequence does not name it";
			return UINT64_MAX;
		}
		if (!job->chain)
			continue;
		for (i = 0; i < job->nr_nodes; i++) {
			const struct kvmm_node *n = job->chain[i].node;

			if (!(n->flags & KVMM_NODE_IO) || n->tier != job->chain[i].tier ||
			    n->tier == KVMM_TIER_DEVICE || !n->lock_ref) {
				*why = "a promoting node is not locked, marked and below the device";
				return UINT64_MAX;
			}
		}
		for (i = 0; i < job->nr_pages; i++) {
			int32_t pfn = job->dst[i];

			if (pfn < 0 || (uint32_t)pfn >= dev->nr_pages ||
			    dev->pages[pfn].state != KVMM_PAGE_IO || mark[pfn]) {
				*why = "a promotion's frame is not in state IO, or is held twice";
				return UINT64_MAX;
			}
			mark[pfn] = mark_io;
		}
		pages += job->nr_pages;
		*locks += 1;
		*nodes += job->nr_nodes;
	}
	return pages;
}
