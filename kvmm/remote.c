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
 *    which the next MATCH finds and PROMOTE brings to the device;
 *  - the prefix tree, on its own (kvmm_params.remote_write): a commit
 *    queues a push of its new pages to the I/O worker (write-through,
 *    settled by the next kvmm_migrate_reap()), or a demotion from the
 *    host tier writes its pages from the frames it holds (migrate.c).
 *
 * Nothing here runs with the context's lock held across the network: the
 * direct API holds none, and the client has its own mutex (a ring's
 * keyed GET may be on the I/O worker meanwhile).  Every page read is
 * checked by the store (identity, tokens, checksum); the run fetched ends
 * at the first page that does not verify.
 *
 * Tenants.  A page's name chains from its namespace's seed
 * (kvmm_remote_ns_seed()), not from nothing, and a keyed value's name
 * hashes it too: the same tokens, or the same key, under two namespaces
 * of one context are two names, so one tenant can neither read another's
 * pages nor plant pages under another's names (the store checks the
 * parent of every page it reads).  Machines share a page only when they
 * run the same model under the same salt and the same namespace.
 */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

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
		.user = p->remote_user, .password = p->remote_password,
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

/**
 * kvmm_remote_ns_seed() - the name a namespace's remote names start from
 * @ns: the namespace (a tenant's, under kvmmd --ns-per-uid its uid)
 * @seed: out: the parent name of its prefixes' first pages, and a part of
 *	every name of its keyed values
 *
 * Never { 0, 0 }, and different for every namespace, so no name of one
 * namespace is a name of another.  A function of @ns alone: the same
 * namespace on another machine (under the same salt) shares its pages.
 */
void kvmm_remote_ns_seed(uint32_t ns, uint64_t seed[2])
{
	const struct {
		uint32_t tag;
		uint32_t ns;
	} in = { 0x534e564bu /* "KVNS" */, ns };
	XXH128_hash_t h = XXH3_128bits(&in, sizeof(in));

	seed[0] = h.low64;
	seed[1] = h.high64;
}

/* The names of the first @nr pages of @tokens in @ns; NULL without memory. */
static struct kvmm_remote_page *names_of(struct kvmm_ctx *ctx, uint32_t ns,
					 const uint32_t *tokens, uint32_t nr)
{
	struct kvmm_remote_page *pg = kvmm_malloc(ctx, (size_t)nr * sizeof(*pg));
	uint64_t seed[2];

	kvmm_remote_ns_seed(ns, seed);
	if (pg)
		ctx->remote->chain(ctx->remote_priv, seed, tokens, nr, pg);
	return pg;
}

/**
 * kvmm_remote_name_node() - the remote names of a tree node's pages
 * @ctx: the context, with a remote tier; its lock held
 * @node: a node of the prefix tree (not a root, not a keyed value)
 * @tokens: its tokens, or a copy of them that the names will point into
 * @out: one name per page
 *
 * A page's name chains its parent's, so its ancestors' tokens are hashed
 * from the root (its namespace's seed) down first.
 */
void kvmm_remote_name_node(struct kvmm_ctx *ctx, const struct kvmm_node *node,
			   const uint32_t *tokens, struct kvmm_remote_page *out)
{
	struct kvmm_node **path = ctx->tier_path;
	struct kvmm_remote_page one;
	const struct kvmm_node *n;
	uint64_t parent[2];
	uint32_t depth = 0, j;

	for (n = node->parent; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		path[depth++] = (struct kvmm_node *)n;
	kvmm_remote_ns_seed(n->ns, parent);
	while (depth--) {
		n = path[depth];
		for (j = 0; j < n->len >> ctx->page_shift; j++) {
			ctx->remote->chain(ctx->remote_priv, parent,
					   n->tokens + (size_t)j * ctx->page_size, 1, &one);
			parent[0] = one.key[0];
			parent[1] = one.key[1];
		}
	}
	ctx->remote->chain(ctx->remote_priv, parent, tokens, node->len >> ctx->page_shift, out);
}

/**
 * kvmm_remote_demoted() - a demotion from the host tier writes its pages
 *	to the remote tier too (KVMM_REMOTE_WRITE_DEMOTE)
 * @ctx: the context; on the I/O worker, its lock not held
 * @job: the demotion, copied; its host frames are still its own
 *
 * Pages of a node whose copy failed are not written, nor keyed values
 * (written through when they were put; unnamed here).  A job with no tier
 * below the host (@job->no_dst) verifies its pages here; one that does
 * not verify is not written and its node is dropped all the same.
 */
void kvmm_remote_demoted(struct kvmm_ctx *ctx, struct kvmm_migrate *job)
{
	const struct kvmm_store_ops *host = ctx->store[KVMM_TIER_HOST];
	void *hp = ctx->store_priv[KVMM_TIER_HOST];
	uint32_t i, j, k = 0;
	int ret;

	for (i = 0; i < job->nr_nodes; i++) {
		struct migrate_node *pn = &job->chain[i];
		const int32_t *src = job->src + pn->first;

		if (!pn->err && job->no_dst && host->verify(hp, src, pn->nr) < pn->nr)
			pn->err = -EBADMSG;
		if (pn->err || !job->rpages[pn->first].tokens)	/* or a keyed value */
			continue;
		for (j = 0; j < pn->nr; j++, k++) {	/* the good ones, to the front */
			job->rpages[k] = job->rpages[pn->first + j];
			job->addrs[k] = host->page(hp, (uint32_t)src[j]);
		}
	}
	if (!k)
		return;
	pthread_mutex_lock(&ctx->remote_lock);
	ret = ctx->remote->put(ctx->remote_priv, job->rpages, k, (const void *const *)job->addrs);
	kvmm_remote_snapshot(ctx);
	pthread_mutex_unlock(&ctx->remote_lock);
	job->rput = ret > 0 ? (uint32_t)ret : 0;
}

/**
 * struct kvmm_rpush - a push of a prefix's pages: armed under the
 *	context's lock, written without it (inline, or on the I/O worker),
 *	settled under it again
 * @work: on the worker's queue, then its done list (a write-through)
 * @rj: on ctx->rjobs; locks the prefix's last node, so that no page of
 *	it leaves the device meanwhile
 * @pg: the pushed pages' names, @nr of them
 * @addrs: where each page's bytes are: in @staging
 * @dev_pfns: the device pages, gathered into @staging when written
 * @dst: their places in @staging
 * @tokens: a copy of the pushed pages' tokens (@pg's point into it: a
 *	split may move a node's own while the worker writes)
 * @staging: a copy of every pushed page; host pages are copied in when
 *	the push is armed (a promotion may free their frames meanwhile)
 * @staging_bytes: its size
 * @skipped: pages before @pg that this context pushed earlier
 * @max: pages of the path the job was sized for
 * @cap: pages @staging holds
 * @nr: pages pushed
 * @dev: of them on the device
 * @registered: @staging is registered with the backend for DMA
 * @ret: the store's answer: pages written or there already, or an error
 */
struct kvmm_rpush {
	struct kvmm_work work;
	struct kvmm_rjob rj;
	struct kvmm_remote_page *pg;
	void **addrs;
	int32_t *dev_pfns;
	void **dst;
	uint32_t *tokens;
	char *staging;
	size_t staging_bytes;
	uint32_t skipped;
	uint32_t max;
	uint32_t cap;
	uint32_t nr;
	uint32_t dev;
	bool registered;
	int ret;
};

static size_t rpush_bytes(const struct kvmm_ctx *ctx, uint32_t max)
{
	return sizeof(struct kvmm_rpush) +
	       (size_t)max * (sizeof(struct kvmm_remote_page) + 2 * sizeof(void *) +
			      sizeof(int32_t) + ctx->page_size * sizeof(uint32_t));
}

static void rpush_free(struct kvmm_ctx *ctx, struct kvmm_rpush *job)
{
	if (job->registered)
		ctx->dma.unreg(ctx->dma.priv, job->staging, job->staging_bytes);
	if (job->staging)
		kvmm_mfree(ctx, job->staging, job->staging_bytes);
	kvmm_mfree(ctx, job, rpush_bytes(ctx, job->max));
}

/*
 * The pages of the path from the root to @end, the first @max of them,
 * up to the first on NVMe or the first host page that does not verify:
 * named, and past the run of nodes pushed before when @skip
 * (KVMM_NODE_REMOTE), staged to be written.  Nodes pushed whole are
 * marked; @end is locked.  Return: 0 with *@out NULL when there is
 * nothing to write; -ENOMEM; the backend's DMA registration error.
 */
static int rpush_arm(struct kvmm_ctx *ctx, struct kvmm_node *end, uint32_t max, bool skip,
		     struct kvmm_rpush **out)
{
	const struct kvmm_store_ops *host = ctx->store[KVMM_TIER_HOST];
	void *hp = ctx->store_priv[KVMM_TIER_HOST];
	uint64_t pb = kvmm_page_bytes(&ctx->params.model, ctx->page_size);
	struct kvmm_node **path = ctx->tier_path, *n;
	struct kvmm_remote_page *all;
	struct kvmm_rpush *job;
	uint32_t depth = 0, d, j, np, k = 0, first = UINT32_MAX, ps = ctx->page_size;
	uint64_t seed[2];
	int ret;

	*out = NULL;
	for (n = end; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		path[depth++] = n;
	kvmm_remote_ns_seed(n->ns, seed);
	job = kvmm_zalloc(ctx, rpush_bytes(ctx, max));
	if (!job)
		return -ENOMEM;
	job->max = max;
	all = (struct kvmm_remote_page *)(job + 1);
	job->addrs = (void **)(all + max);
	job->dst = job->addrs + max;
	job->dev_pfns = (int32_t *)(job->dst + max);
	job->tokens = (uint32_t *)(job->dev_pfns + max);
	/* name them all from the root; what is pushed starts at @first */
	for (d = depth; d-- && k < max; k += j) {
		n = path[d];
		j = n->len >> ctx->page_shift;
		j = j < max - k ? j : max - k;
		if (n->tier == KVMM_TIER_NVME)
			break;
		ctx->remote->chain(ctx->remote_priv, k ? all[k - 1].key : seed, n->tokens, j,
				   all + k);
		if (first == UINT32_MAX && !(skip && (n->flags & KVMM_NODE_REMOTE)))
			first = k;
	}
	if (first == UINT32_MAX || first == k) {
		rpush_free(ctx, job);
		return 0;
	}
	job->pg = all + first;
	job->skipped = first;
	job->cap = k - first;
	job->staging_bytes = (size_t)job->cap * pb;
	job->staging = kvmm_malloc(ctx, job->staging_bytes);
	ret = job->staging ? 0 : -ENOMEM;
	if (!ret && ctx->dma.reg) {
		ret = ctx->dma.reg(ctx->dma.priv, job->staging, job->staging_bytes);
		job->registered = !ret;
	}
	if (ret) {
		rpush_free(ctx, job);
		return ret;
	}
	/* each pushed page's bytes and tokens, into the job (@first starts a node) */
	for (d = depth, k = 0; d-- && job->nr < job->cap; k += np) {
		n = path[d];
		np = n->len >> ctx->page_shift;
		if (k < first)
			continue;	/* pushed before: only named */
		for (j = 0; j < np && job->nr < job->cap; j++) {
			uint32_t i = job->nr;
			char *at = job->staging + (size_t)i * pb;
			int32_t pfn = n->pfns[j];

			if (n->tier == KVMM_TIER_HOST) {
				if (host->verify(hp, &pfn, 1) < 1)
					goto armed;	/* bad here: the push ends before it */
				memcpy(at, host->page(hp, (uint32_t)pfn), pb);
			} else {
				job->dev_pfns[job->dev] = pfn;
				job->dst[job->dev++] = at;
			}
			job->addrs[i] = at;
			memcpy(job->tokens + (size_t)i * ps, n->tokens + (size_t)j * ps,
			       ps * sizeof(uint32_t));
			job->pg[i].tokens = job->tokens + (size_t)i * ps;
			job->nr++;
		}
		if (j == np)
			n->flags |= KVMM_NODE_REMOTE;
	}
armed:
	kvmm_tree_lock(ctx, end);	/* its device pages stay where they are */
	job->rj.locked = end;
	list_add_tail(&job->rj.link, &ctx->rjobs);
	*out = job;
	return 0;
}

/* Write an armed push: gather its device pages, then the store. No lock. */
static void rpush_write(struct kvmm_ctx *ctx, struct kvmm_rpush *job)
{
	int ret = 0;

	if (job->dev)
		ret = ctx->backend->gather(ctx->backend_priv, job->dev_pfns, job->dev, job->dst);
	if (!ret && job->nr) {
		pthread_mutex_lock(&ctx->remote_lock);
		ret = ctx->remote->put(ctx->remote_priv, job->pg, job->nr,
				       (const void *const *)job->addrs);
		kvmm_remote_snapshot(ctx);
		pthread_mutex_unlock(&ctx->remote_lock);
	}
	job->ret = ret;
}

/*
 * Settle a written push, under the lock: unlock the prefix; when not all
 * of its pages landed, no node of the path counts as pushed any more (the
 * next write-through asks the store again).  Return: tokens the store
 * holds from the start as far as this context knows, or the error.
 */
static int rpush_settle(struct kvmm_ctx *ctx, struct kvmm_rpush *job)
{
	struct kvmm_node *n;
	int ret = job->ret;

	list_del(&job->rj.link);
	if (ret < (int)job->nr)
		for (n = job->rj.locked; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
			n->flags &= (uint8_t)~KVMM_NODE_REMOTE;
	__kvmm_tree_unlock(ctx, job->rj.locked, false);
	if (ret >= 0) {
		kvmm_count(ctx, EV_REMOTE_PUSH_TOKENS, (uint64_t)ret << ctx->page_shift);
		ret = (int)((job->skipped + (uint32_t)ret) << ctx->page_shift);
	}
	rpush_free(ctx, job);
	return ret;
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
 * has; the push stops at a page on NVMe.  Host pages are copied when the
 * push starts, device pages gathered after; the prefix is locked
 * meanwhile.  A push of committed pages after COMMIT is the remote tier's
 * write-through (which KVMM_REMOTE_WRITE_COMMIT does on its own).
 *
 * Return: tokens the cluster holds now from the start (written or
 * there before), or -EINVAL, -EOPNOTSUPP (no remote tier), -ENOMEM, -EIO
 * (the cluster took none of them), the backend's gather error.
 */
int kvmm_remote_push_held(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
			  uint32_t n, bool held)
{
	struct kvmm_rpush *job;
	struct kvmm_node *root;
	struct kvmm_path path;
	uint32_t max;
	int ret;

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
	ret = rpush_arm(ctx, path.node, max, false, &job);
	if (ret || !job)
		return ret;
	if (held)
		pthread_mutex_unlock(&ctx->lock);
	rpush_write(ctx, job);
	if (held)
		pthread_mutex_lock(&ctx->lock);
	ret = rpush_settle(ctx, job);
	kvmm_debug_check(ctx, "remote push");
	return ret;
}

KVMM_EXPORT int kvmm_remote_push(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tokens,
				 uint32_t n)
{
	return kvmm_remote_push_held(ctx, ns, tokens, n, false);
}

/* A write-through's push, on the worker, settled on the context's thread. */
static void wt_run(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	rpush_write(ctx, container_of(work, struct kvmm_rpush, work));
	kvmm_work_done(ctx, work);
}

static void wt_settle(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_rpush *job = container_of(work, struct kvmm_rpush, work);

	rpush_settle(ctx, job);
}

/**
 * kvmm_remote_write_through() - a commit left @end cached (or found it
 *	all cached): queue the write of its path's pages this context has
 *	not written yet (KVMM_REMOTE_WRITE_COMMIT), to the I/O worker
 * @ctx: the context, held by the caller
 * @end: the committed path's last node
 *
 * Nothing is waited for: the worker gathers and writes the pages while
 * the path is locked, and the context's own thread settles the job the
 * next time it matches, reclaims or syncs.  A push that cannot be armed
 * (no memory) is skipped, and a write that fails leaves the path
 * unmarked: the pages are written by the next commit over them, or never,
 * which costs another machine a recomputation.
 */
void kvmm_remote_write_through(struct kvmm_ctx *ctx, struct kvmm_node *end)
{
	struct kvmm_rpush *job;
	struct kvmm_node *n;
	uint32_t pages = 0;

	bool all = true;

	if (ctx->params.remote_write != KVMM_REMOTE_WRITE_COMMIT || !ctx->iow)
		return;
	for (n = end; !(n->flags & KVMM_NODE_ROOT); n = n->parent) {
		pages += n->len >> ctx->page_shift;
		all &= !!(n->flags & KVMM_NODE_REMOTE);
	}
	if (all)	/* written, or being written: nothing to ask */
		return;
	kvmm_migrate_reap(ctx);
	if (rpush_arm(ctx, end, pages, true, &job) || !job)
		return;
	job->work.run = wt_run;
	job->work.settle = wt_settle;
	kvmm_work_queue_remote(ctx, &job->work);
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
	pg = names_of(ctx, ns, tokens, total);
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
	kvmm_work_queue_remote(ctx, &rq->work);
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
