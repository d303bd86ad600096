// SPDX-License-Identifier: MIT
/*
 * kvmm/remote.c - the remote tier: a distributed store (a Redis Cluster)
 * below the host tier, shared by every machine that runs the same model
 * under the same tenant salt.
 *
 * DOC: remote tier
 *
 * The store is content-addressed (driver/remote/): a prefix's page is
 * named by its tokens and its parent page's name, so a page one machine
 * wrote is found by another that has the same prompt.  The tree stays
 * local.  Two things use the store:
 *
 *  - the keyed page store (keyed.c): values are written through, found
 *    by EXISTS and read by GET when no lower tier here has them;
 *  - the prefix tree, on the engine's word: kvmm_remote_push() writes the
 *    pages of a cached prefix, kvmm_remote_fetch() reads the pages of a
 *    prompt past what the tree has into the host tier, as a leaf there,
 *    which the next MATCH finds and PROMOTE brings to the device.
 *
 * Nothing here runs with the context's lock held across the network: the
 * direct API holds none, and the client has its own mutex (a ring's
 * keyed GET may be on the I/O worker meanwhile).  Every page read is
 * checked by the store (identity, tokens, checksum); the run fetched ends
 * at the first page that does not verify.
 */
#include <stdlib.h>

#include "internal.h"
#include "migrate.h"

/**
 * kvmm_remote_snapshot() - copy the client's counters for STATS
 * @ctx: the context, its remote_lock held (after a call to the client)
 */
void kvmm_remote_snapshot(struct kvmm_ctx *ctx)
{
	struct kvmm_remote_stats st;
	uint64_t *dst = (uint64_t *)&ctx->remote_stats, *src = (uint64_t *)&st;
	size_t i;

	ctx->remote->stats(ctx->remote_priv, &st);
	for (i = 0; i < sizeof(st) / sizeof(uint64_t); i++)
		__atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
}

/* The remote tier's counters, as STATS items (the last copy of them). */
void kvmm_remote_stats(const struct kvmm_ctx *ctx, uint64_t *v)
{
	const struct kvmm_remote_stats *st = &ctx->remote_stats;
#define RS(f) __atomic_load_n(&st->f, __ATOMIC_RELAXED)
	v[KVMM_STAT_REMOTE_PROBES] = RS(probes);
	v[KVMM_STAT_REMOTE_PROBE_HITS] = RS(probe_hits);
	v[KVMM_STAT_REMOTE_GET_PAGES] = RS(gets);
	v[KVMM_STAT_REMOTE_GET_HITS] = RS(get_hits);
	v[KVMM_STAT_REMOTE_BYTES_OUT] = RS(get_bytes);
	v[KVMM_STAT_REMOTE_PUT_PAGES] = RS(puts);
	v[KVMM_STAT_REMOTE_PUT_SKIPPED] = RS(put_skipped);
	v[KVMM_STAT_REMOTE_BYTES_IN] = RS(put_bytes);
	v[KVMM_STAT_REMOTE_CORRUPT] = RS(corrupt);
	v[KVMM_STAT_REMOTE_TIMEOUTS] = RS(timeouts);
	v[KVMM_STAT_REMOTE_ERRORS] = RS(errors);
	v[KVMM_STAT_REMOTE_NS] = RS(probe_ns) + RS(get_ns) + RS(put_ns);
#undef RS
}

/* The remote tier of @ctx's parameters: connected, or why not. */
int kvmm_remote_init(struct kvmm_ctx *ctx)
{
	const struct kvmm_params *p = &ctx->params;
	char why[512] = "";
	struct kvmm_remote_cfg cfg = {
		.seeds = p->remote, .salt = p->remote_salt ? p->remote_salt : "",
		.model_id = p->model_id ? p->model_id : "", .model = p->model,
		.page_size = p->page_size, .page_bytes = kvmm_page_bytes(&p->model, p->page_size),
		.timeout_ms = p->remote_timeout_ms, .err = why, .err_len = sizeof(why),
	};
	const struct kvmm_remote_ops *ops;
	int ret;

	if (!p->remote)
		return 0;
	ops = kvmm_remote_lookup("redis");
	if (!ops) {
		kvmm_report(ctx, "remote tier: this build has no Redis client (hiredis)");
		return -EOPNOTSUPP;
	}
	if (pthread_mutex_init(&ctx->remote_lock, NULL))
		return -ENOMEM;
	ret = ops->init(&cfg, &ctx->remote_priv);
	if (ret) {
		kvmm_report(ctx, "%s", why[0] ? why : strerror(-ret));
		pthread_mutex_destroy(&ctx->remote_lock);
		return ret;
	}
	ctx->remote = ops;
	return 0;
}

void kvmm_remote_exit(struct kvmm_ctx *ctx)
{
	if (!ctx->remote)
		return;
	ctx->remote->exit(ctx->remote_priv);
	pthread_mutex_destroy(&ctx->remote_lock);
	ctx->remote = NULL;
}

/**
 * struct kvmm_rjob - a push or a fetch while it waits on the network
 * @link: on ctx->rjobs
 * @locked: a push's prefix, locked so that its pages stay put; or NULL
 * @pfns: a fetch's new host frames, in state IO
 * @nr: how many
 */
struct kvmm_rjob {
	struct kvmm_list link;
	struct kvmm_node *locked;
	const int32_t *pfns;
	uint32_t nr;
};

/*
 * kvmm_check()'s view of them: the frames fetches hold (marked @mark_io,
 * counted in @io) and the locks pushes hold (@locks).
 */
int kvmm_remote_check(const struct kvmm_ctx *ctx, uint8_t *const *marks, uint8_t mark_io,
		      uint64_t *io, uint64_t *locks, const char **why)
{
	const struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	const struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->rjobs) {
		const struct kvmm_rjob *rj = list_entry(pos, struct kvmm_rjob, link);

		if (rj->locked) {
			if (!rj->locked->lock_ref) {
				*why = "a remote push holds a prefix it has not locked";
				return -EUCLEAN;
			}
			(*locks)++;
		}
		for (i = 0; i < rj->nr; i++) {
			int32_t pfn = rj->pfns[i];

			if (pfn < 0 || (uint32_t)pfn >= host->nr_pages ||
			    host->pages[pfn].state != KVMM_PAGE_IO || marks[KVMM_TIER_HOST][pfn]) {
				*why = "a remote fetch's frame is not in state IO, or is held twice";
				return -EUCLEAN;
			}
			marks[KVMM_TIER_HOST][pfn] = mark_io;
		}
		io[KVMM_TIER_HOST] += rj->nr;
	}
	return 0;
}

/* Most pages one push or fetch moves: a long prompt's, in one batch. */
#define KVMM_REMOTE_BATCH	4096u

/* The names of the first @nr pages of @tokens; NULL without memory. */
static struct kvmm_remote_page *names_of(struct kvmm_ctx *ctx, const uint32_t *tokens,
					 uint32_t nr)
{
	struct kvmm_remote_page *pg = kvmm_malloc(ctx, (size_t)nr * sizeof(*pg));

	if (pg)
		ctx->remote->chain(ctx->remote_priv, NULL, tokens, nr, pg);
	return pg;
}

/* The nodes of @path from the root's child down, into @out; how many. */
static uint32_t path_nodes(const struct kvmm_path *path, struct kvmm_node **out, uint32_t max)
{
	struct kvmm_node *node;
	uint32_t nr = 0, i;

	for (node = path->node; node && !(node->flags & KVMM_NODE_ROOT) && nr < max;
	     node = node->parent)
		out[nr++] = node;
	for (i = 0; i < nr / 2; i++) {
		struct kvmm_node *t = out[i];

		out[i] = out[nr - 1 - i];
		out[nr - 1 - i] = t;
	}
	return nr;
}

/**
 * kvmm_remote_push() - write a cached prefix's pages to the remote tier
 * @ctx: the context, with a remote tier
 * @ns: the prefix's namespace
 * @tokens: the prompt
 * @n: its tokens
 *
 * The pages of @tokens the tree holds (from the start, whole pages) on
 * the device or the host tier are written, skipping those the cluster
 * has; the push stops at a page on NVMe.  Device pages are gathered
 * first.  The prefix is locked meanwhile.  A push of committed pages
 * after COMMIT is the remote tier's write-through.
 *
 * Return: tokens the cluster holds now from the start (written or
 * there before), or -EINVAL, -EOPNOTSUPP (no remote tier), -ENOMEM, -EIO
 * (the cluster took none of them), the backend's gather error.
 */
int kvmm_remote_push_held(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			  uint32_t n, bool held)
{
	const struct kvmm_store_ops *host;
	struct kvmm_remote_page *pg = NULL;
	struct kvmm_node **nodes = NULL, *root;
	struct kvmm_path path;
	uint32_t max, nr_pages, nr_nodes, i, k = 0, dev = 0, d = 0;
	uint64_t pb;
	void **addrs = NULL, **dst = NULL;
	char *staging = NULL;
	int32_t *dev_pfns = NULL;
	bool registered = false;
	struct kvmm_rjob rj = { .locked = NULL };
	int ret = 0;

	if (!ctx || (n && !tokens) || ns == KVMM_NS_ANY)
		return -EINVAL;
	if (!ctx->remote)
		return -EOPNOTSUPP;
	root = kvmm_tree_root(ctx, ns, false);
	if (!root)
		return 0;
	kvmm_migrate_reap(ctx);
	kvmm_tree_walk(ctx, root, tokens, n < KVMM_REMOTE_BATCH << ctx->page_shift ?
		       n : KVMM_REMOTE_BATCH << ctx->page_shift, &path);
	max = path.matched >> ctx->page_shift;
	if (!max)
		return 0;
	host = ctx->store[KVMM_TIER_HOST];
	pb = kvmm_page_bytes(&ctx->params.model, ctx->page_size);
	nodes = kvmm_malloc(ctx, (size_t)max * sizeof(*nodes));
	addrs = kvmm_malloc(ctx, (size_t)max * sizeof(*addrs));
	dst = kvmm_malloc(ctx, (size_t)max * sizeof(*dst));
	dev_pfns = kvmm_malloc(ctx, (size_t)max * sizeof(*dev_pfns));
	pg = names_of(ctx, tokens, max);
	if (!nodes || !addrs || !dst || !dev_pfns || !pg) {
		ret = -ENOMEM;
		goto out;
	}
	nr_nodes = path_nodes(&path, nodes, max);
	/* each page's bytes: a host page where it is, device pages gathered */
	for (i = 0; i < nr_nodes && k < max; i++) {
		struct kvmm_node *node = nodes[i];
		uint32_t j, np = node->len >> ctx->page_shift;

		if (node->tier == KVMM_TIER_NVME)
			break;
		for (j = 0; j < np && k < max; j++, k++) {
			addrs[k] = NULL;
			if (node->tier == KVMM_TIER_HOST)
				addrs[k] = host->page(ctx->store_priv[KVMM_TIER_HOST],
						      (uint32_t)node->pfns[j]);
			else
				dev_pfns[dev++] = node->pfns[j];
		}
	}
	nr_pages = k;
	if (!nr_pages)
		goto out;
	if (dev) {
		staging = kvmm_malloc(ctx, dev * pb);
		if (!staging) {
			ret = -ENOMEM;
			goto out;
		}
		if (ctx->dma.reg) {
			ret = ctx->dma.reg(ctx->dma.priv, staging, dev * pb);
			if (ret)
				goto out;
			registered = true;
		}
		for (i = 0; i < nr_pages; i++) {
			if (addrs[i])
				continue;
			dst[d] = staging + (uint64_t)d * pb;
			addrs[i] = dst[d++];
		}
	}
	kvmm_tree_lock(ctx, path.node);		/* its pages stay where they are */
	rj.locked = path.node;
	list_add_tail(&rj.link, &ctx->rjobs);
	if (held)
		pthread_mutex_unlock(&ctx->lock);
	if (dev)
		ret = ctx->backend->gather(ctx->backend_priv, dev_pfns, dev, dst);
	if (!ret) {
		pthread_mutex_lock(&ctx->remote_lock);
		ret = ctx->remote->put(ctx->remote_priv, pg, nr_pages,
				       (const void *const *)addrs);
		kvmm_remote_snapshot(ctx);
		pthread_mutex_unlock(&ctx->remote_lock);
	}
	if (held)
		pthread_mutex_lock(&ctx->lock);
	list_del(&rj.link);
	kvmm_tree_unlock(ctx, path.node);
	if (ret >= 0) {
		kvmm_count(ctx, EV_REMOTE_PUSH_TOKENS, (uint64_t)ret << ctx->page_shift);
		ret <<= ctx->page_shift;
	}
out:
	if (registered)
		ctx->dma.unreg(ctx->dma.priv, staging, dev * pb);
	if (staging)
		kvmm_mfree(ctx, staging, dev * pb);
	if (pg)
		kvmm_mfree(ctx, pg, (size_t)max * sizeof(*pg));
	if (nodes)
		kvmm_mfree(ctx, nodes, (size_t)max * sizeof(*nodes));
	if (addrs)
		kvmm_mfree(ctx, addrs, (size_t)max * sizeof(*addrs));
	if (dst)
		kvmm_mfree(ctx, dst, (size_t)max * sizeof(*dst));
	if (dev_pfns)
		kvmm_mfree(ctx, dev_pfns, (size_t)max * sizeof(*dev_pfns));
	kvmm_debug_check(ctx, "remote push");
	return ret;
}

KVMM_EXPORT int kvmm_remote_push(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				 uint32_t n)
{
	return kvmm_remote_push_held(ctx, ns, tokens, n, false);
}

/* Give back @nr frames a fetch held (state IO) on the host tier. */
static void fetch_free(struct kvmm_ctx *ctx, int32_t *pfns, uint32_t nr)
{
	struct kvmm_zone *hz = &ctx->zone[KVMM_TIER_HOST];

	if (!nr)
		return;
	kvmm_pages_set_state(hz, pfns, nr, KVMM_PAGE_OWNED);
	kvmm_free_pages(ctx, hz, pfns, nr);
}

/**
 * kvmm_remote_fetch() - bring a prompt's pages from the remote tier
 * @ctx: the context, with a remote tier
 * @ns: the namespace
 * @tokens: the prompt
 * @n: its tokens
 *
 * The whole pages of @tokens past what the tree holds are looked for on
 * the remote tier; the run of them it has, from the first, is read into
 * new host pages (held in state IO meanwhile), verified, and hung in the
 * tree as one leaf on the host tier under the prefix the tree has then
 * (pages another request cached meanwhile are not taken twice).  A
 * MATCH then reports them as a host hit, and PROMOTE brings them to the
 * device.  Nothing is fetched under a prefix that ends on NVMe (promote
 * that first), and at most half the host tier at once.
 *
 * Return: tokens fetched (0: none there, or no room on the host tier),
 * or -EINVAL, -EOPNOTSUPP (no remote tier), -ENOMEM.
 */
int kvmm_remote_fetch_held(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			   uint32_t n, bool held)
{
	const struct kvmm_store_ops *host;
	struct kvmm_zone *hz;
	struct kvmm_remote_page *pg = NULL;
	struct kvmm_node *root, *leaf = NULL;
	struct kvmm_path path;
	uint32_t total, from, now, want = 0, got = 0, skip = 0, i;
	int32_t *pfns = NULL;
	void **addrs = NULL;
	struct kvmm_rjob rj = { .locked = NULL };
	uint32_t cap;
	int ret = 0;

	if (!ctx || (n && !tokens) || ns == KVMM_NS_ANY)
		return -EINVAL;
	if (!ctx->remote)
		return -EOPNOTSUPP;
	total = n >> ctx->page_shift;
	if (total > KVMM_REMOTE_BATCH)
		total = KVMM_REMOTE_BATCH;
	root = kvmm_tree_root(ctx, ns, true);
	if (!root)
		return -ENOMEM;
	kvmm_migrate_reap(ctx);
	kvmm_tree_walk(ctx, root, tokens, total << ctx->page_shift, &path);
	from = path.matched >> ctx->page_shift;
	/* a host leaf never hangs under a slower node */
	if (from >= total ||
	    (!(path.node->flags & KVMM_NODE_ROOT) && path.node->tier > KVMM_TIER_HOST))
		return 0;
	hz = &ctx->zone[KVMM_TIER_HOST];
	cap = total - from;
	if (cap > hz->nr_pages / 2)	/* never the whole host tier for one prompt */
		cap = hz->nr_pages / 2;
	if (!cap)
		return 0;
	want = cap;
	pg = names_of(ctx, tokens, total);
	pfns = kvmm_malloc(ctx, (size_t)cap * sizeof(*pfns));
	addrs = kvmm_malloc(ctx, (size_t)cap * sizeof(*addrs));
	if (!pg || !pfns || !addrs) {
		ret = -ENOMEM;
		goto out;
	}
	if (held)
		pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_lock(&ctx->remote_lock);
	want = ctx->remote->probe(ctx->remote_priv, pg + from, want, NULL);
	kvmm_remote_snapshot(ctx);
	pthread_mutex_unlock(&ctx->remote_lock);
	if (held)
		pthread_mutex_lock(&ctx->lock);
	if (!want || !kvmm_tier_make_room(ctx, KVMM_TIER_HOST, want)) {
		want = 0;
		goto out;
	}
	host = ctx->store[KVMM_TIER_HOST];
	__kvmm_alloc_pages(ctx, hz, want, pfns);
	kvmm_pages_set_state(hz, pfns, want, KVMM_PAGE_IO);
	ctx->io_pages[KVMM_TIER_HOST] += want;
	rj.pfns = pfns;
	rj.nr = want;
	list_add_tail(&rj.link, &ctx->rjobs);
	for (i = 0; i < want; i++)
		addrs[i] = host->page(ctx->store_priv[KVMM_TIER_HOST], (uint32_t)pfns[i]);
	if (held)
		pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_lock(&ctx->remote_lock);
	got = ctx->remote->get(ctx->remote_priv, pg + from, want, addrs, NULL);
	kvmm_remote_snapshot(ctx);
	pthread_mutex_unlock(&ctx->remote_lock);
	if (got)
		host->seal(ctx->store_priv[KVMM_TIER_HOST], pfns, got);
	if (held)
		pthread_mutex_lock(&ctx->lock);
	ctx->io_pages[KVMM_TIER_HOST] -= want;
	list_del(&rj.link);
	/* where the prefix ends now: others may have cached some, or lost some */
	kvmm_tree_walk(ctx, root, tokens, (from + got) << ctx->page_shift, &path);
	now = path.matched >> ctx->page_shift;
	if (got && now >= from && now < from + got &&
	    ((path.node->flags & KVMM_NODE_ROOT) || path.node->tier <= KVMM_TIER_HOST)) {
		skip = now - from;
		ret = kvmm_tree_split(ctx, &path);
		if (!ret) {
			kvmm_pages_set_state(hz, pfns + skip, got - skip, KVMM_PAGE_OWNED);
			leaf = kvmm_tree_add_leaf(ctx, path.node, tokens + path.matched,
						  (got - skip) << ctx->page_shift, pfns + skip,
						  KVMM_TIER_HOST);
			if (!leaf)
				kvmm_pages_set_state(hz, pfns + skip, got - skip, KVMM_PAGE_IO);
		}
		ret = ret == -EBUSY ? 0 : ret;
	}
	if (leaf) {
		kvmm_lru_update(ctx, leaf);
		kvmm_count(ctx, EV_REMOTE_FETCH_TOKENS, (uint64_t)(got - skip) << ctx->page_shift);
		fetch_free(ctx, pfns, skip);
		fetch_free(ctx, pfns + got, want - got);
		ret = (int)((got - skip) << ctx->page_shift);
	} else {
		fetch_free(ctx, pfns, want);
	}
out:
	if (pfns)
		kvmm_mfree(ctx, pfns, (size_t)cap * sizeof(*pfns));
	if (addrs)
		kvmm_mfree(ctx, addrs, (size_t)cap * sizeof(*addrs));
	if (pg)
		kvmm_mfree(ctx, pg, (size_t)total * sizeof(*pg));
	kvmm_debug_check(ctx, "remote fetch");
	return ret;
}

KVMM_EXPORT int kvmm_remote_fetch(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				  uint32_t n)
{
	return kvmm_remote_fetch_held(ctx, ns, tokens, n, false);
}

/* ---- through a ring: on the I/O worker, completing later ---- */

/**
 * struct kvmm_rreq - a ring's RPUSH or RFETCH, queued to the I/O worker
 * @work: its queue entry
 * @link: on ctx->rreqs until it completes
 * @owner: where the completion goes; NULL once its ring is gone
 * @user_data: the completion's
 * @fetch: RFETCH (else RPUSH)
 * @ns: the namespace
 * @n: tokens at @tokens, a copy of the ring's (which may change)
 */
struct kvmm_rreq {
	struct kvmm_work work;
	struct kvmm_list link;
	struct kvmm_owner *owner;
	uint64_t user_data;
	bool fetch;
	uint32_t ns;
	uint32_t n;
	uint32_t tokens[];
};

static void rreq_run(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_rreq *rq = container_of(work, struct kvmm_rreq, work);
	int ret;

	pthread_mutex_lock(&ctx->lock);
	ret = rq->fetch ? kvmm_remote_fetch_held(ctx, rq->ns, rq->tokens, rq->n, true) :
			  kvmm_remote_push_held(ctx, rq->ns, rq->tokens, rq->n, true);
	if (rq->owner)
		kvmm_owner_complete(rq->owner, rq->user_data, ret);
	list_del(&rq->link);
	kvmm_mfree(ctx, rq, sizeof(*rq) + (size_t)rq->n * sizeof(uint32_t));
	pthread_mutex_unlock(&ctx->lock);
}

/**
 * kvmm_remote_ring() - a ring's RPUSH or RFETCH
 * @ctx: the context, its lock held
 * @owner: the ring's owner, for the completion that comes later; NULL
 *	(kvmm_ioctl()): run it here, the lock dropped while the network answers
 * @user_data: that completion's user_data
 * @fetch: RFETCH (else RPUSH)
 * @ns, @tokens, @n: the command's
 *
 * With an owner and an I/O worker the command is queued to the worker
 * (which waits on the network in its place, so that a stalled shard stalls
 * no ring) and completes later.
 *
 * Return: -EINPROGRESS when the completion comes later; else the result.
 */
int kvmm_remote_ring(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
		     bool fetch, uint32_t ns, const uint32_t *tokens, uint32_t n)
{
	struct kvmm_rreq *rq;

	if (!ctx->remote)
		return -EOPNOTSUPP;
	if (!owner || !ctx->iow)
		return fetch ? kvmm_remote_fetch_held(ctx, ns, tokens, n, true) :
			       kvmm_remote_push_held(ctx, ns, tokens, n, true);
	rq = kvmm_malloc(ctx, sizeof(*rq) + (size_t)n * sizeof(uint32_t));
	if (!rq)
		return -ENOMEM;
	rq->owner = owner;
	rq->user_data = user_data;
	rq->fetch = fetch;
	rq->ns = ns;
	rq->n = n;
	memcpy(rq->tokens, tokens, (size_t)n * sizeof(uint32_t));
	rq->work.run = rreq_run;
	list_add_tail(&rq->link, &ctx->rreqs);
	kvmm_work_queue(ctx, &rq->work);
	return -EINPROGRESS;
}

/* An owner is going: its queued commands complete to no one. */
void kvmm_remote_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->rreqs) {
		struct kvmm_rreq *rq = list_entry(pos, struct kvmm_rreq, link);

		if (rq->owner == owner)
			rq->owner = NULL;
	}
}
