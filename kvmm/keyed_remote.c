// SPDX-License-Identifier: MIT
/*
 * kvmm/keyed_remote.c - keyed values on the remote tier: their names
 * there, a job's copies to and from it, and EXISTS asked of it.  See the
 * DOC in keyed.c.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "keyed.h"

/*
 * The name of page @index of the value with key words @w in @s on the
 * remote tier: XXH3-128 of (a tag, the space's namespace's seed @seed,
 * its model fingerprint and value size, the key, the index).  Contexts on
 * other machines share them within one namespace, kept apart by the
 * tier's salt; two namespaces never share a name, so a tenant neither
 * reads nor plants another's values.
 */
static void remote_name(const struct kvmm_kspace *s, const uint64_t *seed, const uint32_t *w,
			uint32_t index, uint64_t *out)
{
	struct {
		uint32_t tag;
		uint32_t index;
		uint64_t ns[2];
		uint64_t fp[2];
		uint64_t value_bytes;
		uint32_t key[KVMM_KEY_WORDS];
	} in = { 0x594b564bu /* "KVKY" */, index, { seed[0], seed[1] }, { s->fp[0], s->fp[1] },
		 s->value_bytes, { w[0], w[1], w[2], w[3] } };
	XXH128_hash_t h = XXH3_128bits(&in, sizeof(in));

	out[0] = h.low64;
	out[1] = h.high64;
}

/*
 * The names of pages @from .. @from + @nr - 1 of the value with key @key
 * in @s on the remote tier; each one's parent is the page before it.
 */
static void remote_names(const struct kvmm_kspace *s, const struct kvmm_key *key,
			 uint32_t from, uint32_t nr, struct kvmm_remote_page *out)
{
	uint32_t w[KVMM_KEY_WORDS], i;
	uint64_t seed[2], prev[2] = { 0, 0 };

	keyed_key_words(key, w);
	kvmm_remote_ns_seed(s->ns, seed);
	if (from)
		remote_name(s, seed, w, from - 1, prev);
	for (i = 0; i < nr; i++) {
		out[i].parent[0] = prev[0];
		out[i].parent[1] = prev[1];
		remote_name(s, seed, w, from + i, out[i].key);
		prev[0] = out[i].key[0];
		prev[1] = out[i].key[1];
		out[i].tokens = NULL;
	}
}

/*
 * One call to the remote tier for the window's @k pages: a put's written,
 * a get's read (a page it had not fails its value: a miss).
 */
static void remote_window(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t k)
{
	uint32_t i;

	pthread_mutex_lock(&ctx->remote_lock);
	if (job->put)
		ctx->remote->put(ctx->remote_priv, job->rpages, k, (const void *const *)job->addrs);
	else
		ctx->remote->get(ctx->remote_priv, job->rpages, k, job->addrs, job->rok);
	kvmm_remote_snapshot(ctx);
	pthread_mutex_unlock(&ctx->remote_lock);
	for (i = 0; !job->put && i < k; i++)
		if (!job->rok[i])
			job->vals[job->page_val[i]].err = -ENOENT;
}

/*
 * The remote tier's part of the copy step, without the context's lock: a
 * put's values (in their frames now) written through, skipping what the
 * cluster has; a get's values not stored here read into their new frames,
 * a window of pages at a time, then sealed and copied out to the caller.
 * A value the tier does not have whole and verified is a miss.
 */
void kjob_remote_copy(struct kvmm_ctx *ctx, struct kvmm_kjob *job)
{
	const struct kvmm_store_ops *host = ctx->store[KVMM_TIER_HOST];
	void *hpriv = ctx->store_priv[KVMM_TIER_HOST];
	uint32_t pages = job->space->pages, i, j, p, m, k = 0;

	for (i = job->lo; i < job->hi; i++) {
		struct kjob_val *v = &job->vals[i];
		const int32_t *pfns = job->frames + v->first;

		if (!v->armed || (!job->put && !v->remote))
			continue;
		for (j = 0; j < pages && !v->err; j += m) {
			m = pages - j < job->win - k ? pages - j : job->win - k;
			remote_names(job->space, &v->key, j, m, job->rpages + k);
			for (p = 0; p < m; p++) {
				job->addrs[k + p] = host->page(hpriv, (uint32_t)pfns[j + p]);
				job->page_val[k + p] = i;
			}
			k += m;
			if (k == job->win) {
				remote_window(ctx, job, k);
				k = 0;
			}
		}
	}
	if (k)
		remote_window(ctx, job, k);
	if (job->put)
		return;		/* the local put stands either way */
	for (i = job->lo; i < job->hi; i++) {
		struct kjob_val *v = &job->vals[i];

		if (!v->armed || !v->remote || v->err)
			continue;
		host->seal(hpriv, job->frames + v->first, pages);
		kjob_copy_frames_out(ctx, job, KVMM_TIER_HOST, job->frames + v->first, v->buf);
	}
}

/* Settle a value asked of the remote tier: stored here now, or a miss. */
void kjob_remote_settle(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	if (kjob_store(ctx, job, v)) {
		kvmm_count(ctx, EV_KEYED_GETS, 1);
		kvmm_count(ctx, EV_KEYED_REMOTE_GETS, 1);
	} else {	/* a miss, or there first meanwhile, or no memory */
		kvmm_count(ctx, v->err ? EV_KEYED_MISSES : EV_KEYED_GETS, 1);
	}
}

/*
 * struct rprobe - a remote EXISTS's window: per page probed, its name,
 * the key (index into the caller's) it is of, and the answer
 */
struct rprobe {
	struct kvmm_remote_page *pg;
	uint32_t *which;
	uint8_t *ok;
	uint32_t k;
};

/* Probe the window's pages; a key with a page the tier lacks is not whole. */
static void rprobe_flush(struct kvmm_ctx *ctx, struct rprobe *rp, bool *whole)
{
	uint32_t i;

	if (!rp->k)
		return;
	pthread_mutex_lock(&ctx->remote_lock);
	ctx->remote->probe(ctx->remote_priv, rp->pg, rp->k, rp->ok);
	kvmm_remote_snapshot(ctx);
	pthread_mutex_unlock(&ctx->remote_lock);
	for (i = 0; i < rp->k; i++)
		if (!rp->ok[i])
			whole[rp->which[i]] = false;
	rp->k = 0;
}

/* Queue pages @from .. @to - 1 of key @i for a probe, flushing a full window. */
static void rprobe_add(struct kvmm_ctx *ctx, struct rprobe *rp, const struct kvmm_kspace *s,
		       const struct kvmm_key *key, uint32_t i, uint32_t from, uint32_t to,
		       bool *whole)
{
	uint32_t m, j;

	for (; from < to && whole[i]; from += m) {
		m = to - from < KJOB_WIN - rp->k ? to - from : KJOB_WIN - rp->k;
		remote_names(s, key, from, m, rp->pg + rp->k);
		for (j = 0; j < m; j++)
			rp->which[rp->k++] = i;
		if (rp->k == KJOB_WIN)
			rprobe_flush(ctx, rp, whole);
	}
}

/**
 * kvmm_keyed_remote_exists() - carry on an EXISTS on the remote tier
 * @ctx: the context, its lock not held (a probe waits on the network)
 * @s: the space
 * @keys: the keys
 * @n: how many
 * @from: the first key not stored here (a run's end); with @res, every
 *	key whose res[i] is -ENOENT is asked
 * @res: NULL, or each key's result, as keyed_walk_keys() left it: a key the
 *	remote tier has whole turns 0
 *
 * The first page of every key asked is probed first; only a key the tier
 * has that page of costs more probes, its other pages', and a key stops
 * costing at its first page the tier lacks: probes (and memory) follow
 * the answer, never the value size times the keys asked.  The scratch is
 * one window of KJOB_WIN pages, given back before the return.
 *
 * Return: how many more keys from @from on the remote tier has, one after
 * the other (@res: how many of the keys asked it has); 0 without a
 * remote tier (or without memory for the window).  Nothing is read: a get
 * that follows brings them here.
 */
int kvmm_keyed_remote_exists(struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
			     const struct kvmm_key *keys, uint32_t n, uint32_t from,
			     int32_t *const *res)
{
	size_t bytes = (size_t)KJOB_WIN * (sizeof(struct kvmm_remote_page) + sizeof(uint32_t) + 1) +
		       (size_t)n * sizeof(bool);
	struct rprobe rp = { 0 };
	uint32_t i, more = 0;
	bool *whole;
	char *mem;

	if (!ctx->remote || from >= n)
		return 0;
	mem = kvmm_malloc(ctx, bytes);
	if (!mem)
		return 0;
	rp.pg = (struct kvmm_remote_page *)mem;
	rp.which = (uint32_t *)(rp.pg + KJOB_WIN);
	rp.ok = (uint8_t *)(rp.which + KJOB_WIN);
	whole = (bool *)(rp.ok + KJOB_WIN);
	for (i = 0; i < n; i++)		/* the keys asked */
		whole[i] = res ? *res[i] == -ENOENT : i >= from;
	for (i = 0; i < n; i++)		/* their first pages, all at once */
		rprobe_add(ctx, &rp, s, &keys[i], i, 0, 1, whole);
	rprobe_flush(ctx, &rp, whole);
	for (i = 0; i < n; i++) {	/* the rest of those found */
		rprobe_add(ctx, &rp, s, &keys[i], i, 1, s->pages, whole);
		if (!res) {		/* a run: each one's answer before the next */
			rprobe_flush(ctx, &rp, whole);
			if (i >= from && !whole[i])
				break;
		}
	}
	rprobe_flush(ctx, &rp, whole);
	for (i = res ? 0 : from; i < n; i++) {
		if (!whole[i] && !res)
			break;
		if (whole[i] && res)
			*res[i] = 0;
		more += whole[i];
	}
	kvmm_mfree(ctx, mem, bytes);
	return (int)more;
}
