// SPDX-License-Identifier: MIT
/*
 * kvmm/keyed.c - the keyed page store: values an engine names by its own
 * keys, kept on the host and NVMe tiers beside the prefix tree's demoted
 * pages.  This file: its jobs, the direct API, the ring's commands and
 * prefetch; keyed_space.c: the spaces and the index of their values;
 * keyed_remote.c: the remote tier under them; keyed.h: what they share.
 *
 * DOC: keyed page store
 *
 * Engines with a GPU prefix cache of their own (vLLM, LMCache, SGLang's
 * HiCache) offload KV by hash, not by token prefix.  For them the lower
 * tiers are a store of fixed-size values addressed by 128-bit keys
 * (struct kvmm_key), in spaces: a space is the values of one size under
 * one model identity in one namespace, and the same three always make
 * the same space, so engines that register alike share values.
 *
 * A value is a node of the tree: a child of its space's root
 * (kvmm_tree_keyed_root(), on the root list but found by no namespace
 * lookup), whose edge starts with its key (the child hash tells a keyed
 * root's children apart by key, not by first page) and whose frames hold
 * its bytes, split in pages of the context's geometry, the last one
 * zero-filled.  Being a node gives it everything the tree's demoted pages
 * have, with no second mechanism: the tier's reclaim lists and policy
 * (one capacity and one LRU per tier, shared), background writeback to
 * NVMe with its identity in every slot (kvmm_keyed_store_keys()),
 * checksums on every page, kvmm_check()'s accounting.  A value is never
 * on the device and never matched by MATCH; it always stays a leaf.
 *
 * A command moves values in three steps, as a migrate job does:
 *
 *  - arm, under the context's lock: a put takes host frames (reclaim on
 *    the host tier makes room; background writeback keeps it ahead) in
 *    state IO, where no one else sees them; a get takes a lock reference
 *    on each value found, so that reclaim, writeback and delete leave it
 *    alone;
 *  - copy, without the lock: the caller's bytes into the frames (sealed
 *    with a checksum each), or the value's pages, verified, out to the
 *    caller: from the host tier's memory, or read from NVMe (identity
 *    and checksum checked by the store);
 *  - settle, under the lock: a put's value joins the index (unless the
 *    same key got there first: its frames go back), a get's values are
 *    unlocked and touched, and one that failed verification is dropped:
 *    a miss, never wrong bytes.
 *
 * The direct API runs the three steps in a row.  Through a ring, the
 * dispatcher's thread copies memory itself with the lock dropped, so
 * other rings run meanwhile; a get that reads NVMe goes to the I/O worker
 * and completes later, like a PROMOTE.
 *
 * A value being written to NVMe by writeback is still served from the
 * host (its frames stay until the write settles); a value a get holds is
 * not moved by that settle (the write is put back, kvmm_keyed_busy()).
 * A delete skips values a get holds.
 *
 * Rounds.  A value leaves the host tier by being written down while a
 * tier below has room, never by being dropped to make room for a put:
 * where background writeback serves the host tier and the put can wait
 * (a ring's, completed later; the direct API), a value that finds no free
 * host frame does not evict but waits (kvmm_writeback_room() writes the
 * oldest host values down at once, whatever the watermarks say).  The put
 * then runs in rounds: arm what has room, copy, settle (those values are
 * stored and may themselves be written down), and on the I/O worker,
 * behind the writeback it started, arm the rest again; so a put larger
 * than the host tier streams through it to NVMe.  A put that the tiers
 * together cannot hold (its new values more than the host and the tier
 * below have, or only the host where it cannot wait) fails whole at arm,
 * its new values -ENOSPC, and evicts nothing.  A put that waits through
 * KJOB_STALLS rounds with nothing armed (writeback failing, every host
 * value locked) stops waiting and reclaims as one that cannot wait: it
 * drops the oldest, or fails -ENOSPC.
 *
 * Bounds.  A client chooses the value size (up to 1 GiB), the entries of
 * a command (up to 4096) and where they point, so nothing a job holds may
 * grow with entries times value pages.  A job holds a record per entry,
 * the list of the host frames it really takes (a put's new values, a
 * get's values asked of the remote tier: never more than the host tier
 * has), and, during the copy only, one window of KJOB_WIN pages of
 * per-page scratch (identities, destinations, remote names) through which
 * every copy works a window at a time.  The window, a large frame list
 * and a new value's edge in the index (kvmm_tree_keyed_buf(): a page's
 * worth of token slots a page) are allocated with the lock let go; arm
 * and settle let it go every
 * KJOB_ROUND frames.  The I/O worker copies a job KJOB_SLICE_BYTES of
 * values at a time and queues it again behind the others' work after
 * each slice.  What the jobs of one namespace hold or may still
 * take together is bounded by ctx->ns_kjob_bytes (-EDQUOT past it,
 * checked before anything is done).  An EXISTS asked of the remote tier
 * probes each key's first page first and a key's other pages only when
 * the tier has that one, so its probes follow its answer.
 */
#include <sched.h>
#include <stdlib.h>

#include "keyed.h"

/* ---- jobs ---- */

/* Bytes of the window's arrays, per page. */
#define KJOB_WIN_PAGE_BYTES						\
	(sizeof(struct kvmm_store_key) + sizeof(struct kvmm_store_to) +	\
	 sizeof(int32_t) + sizeof(uint32_t) + sizeof(void *) +		\
	 sizeof(struct kvmm_remote_page) + 1)

/* A job's block: itself and its values. */
static size_t kjob_bytes(uint32_t n)
{
	return sizeof(struct kvmm_kjob) + n * sizeof(struct kjob_val);
}

/* The window a job works through: no more pages than it has. */
static uint32_t kjob_win(const struct kvmm_kjob *job)
{
	uint64_t pages = (uint64_t)job->n * job->space->pages;

	return pages < KJOB_WIN ? (uint32_t)pages : KJOB_WIN;
}

static void kjob_free(struct kvmm_ctx *ctx, struct kvmm_kjob *job)
{
	uint32_t i;

	for (i = 0; i < job->n; i++)	/* an edge whose settle never came */
		if (job->vals[i].edge)
			kvmm_tree_keyed_buf_free(ctx, job->vals[i].edge, job->space->pages);
	list_del(&job->link);
	kvmm_mfree(ctx, job->frames, (size_t)job->cap_frames * sizeof(int32_t));
	kvmm_mfree(ctx, job, kjob_bytes(job->n));
}

static struct kvmm_kjob *kjob_alloc(struct kvmm_ctx *ctx, struct kvmm_kspace *s, bool put,
				    uint32_t n)
{
	struct kvmm_kjob *job = kvmm_zalloc(ctx, kjob_bytes(n));

	if (!job)
		return NULL;
	job->space = s;
	job->put = put;
	job->n = n;
	job->hi = n;
	job->vals = (struct kjob_val *)(job + 1);
	job->charge = kjob_bytes(n) + (size_t)kjob_win(job) * KJOB_WIN_PAGE_BYTES;
	list_add_tail(&job->link, &ctx->kjobs);
	return job;
}

/* Memory the keyed jobs of namespace @ns hold or may still take, @except's aside. */
static size_t ns_charge(const struct kvmm_ctx *ctx, uint32_t ns, const struct kvmm_kjob *except)
{
	const struct kvmm_list *pos;
	size_t bytes = 0;

	list_for_each(pos, &ctx->kjobs) {
		const struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);

		if (job != except && job->space->ns == ns)
			bytes += job->charge;
	}
	return bytes;
}

/*
 * Let the context's lock go for a moment, if the caller holds it (@held)
 * and @*since frames were armed or settled since the last time, so that
 * other rings' commands are not held behind a long job.
 */
static void kjob_breathe(struct kvmm_ctx *ctx, bool held, uint32_t *since)
{
	if (!held || *since < KJOB_ROUND)
		return;
	*since = 0;
	pthread_mutex_unlock(&ctx->lock);
	sched_yield();
	pthread_mutex_lock(&ctx->lock);
}

/*
 * The list of the frames the job's values may take (a put's new values,
 * a get's values asked of the remote tier): no more than the host tier
 * has, charged to the namespace first.  A large one is allocated with the
 * lock let go (@held).  Return: 0, -EDQUOT (past the namespace's limit),
 * or -ENOMEM.
 */
static int kjob_frames(struct kvmm_ctx *ctx, struct kvmm_kjob *job, bool held)
{
	struct kvmm_kspace *s = job->space;
	uint64_t want = 0, host = ctx->zone[KVMM_TIER_HOST].nr_pages;
	size_t bytes;
	int32_t *frames;
	uint32_t i;

	for (i = 0; i < job->n; i++) {
		const struct kvmm_node *node = keyed_value_find(ctx, s, &job->vals[i].key);

		if (job->pf ? node && !ctx->store[node->tier]->page :
			      (job->put || ctx->remote) && !node)
			want += s->pages;
	}
	if (job->put)
		job->new_pages = want;
	if (job->pf && want > job->room)
		want = job->room / s->pages * s->pages;
	if (want > host)
		want = host;
	bytes = (size_t)want * sizeof(int32_t);
	if (ns_charge(ctx, s->ns, job) + job->charge + bytes > ctx->ns_kjob_bytes)
		return -EDQUOT;
	if (!want)
		return 0;
	job->charge += bytes;		/* taken now: jobs meanwhile see it */
	if (held && bytes > KJOB_LOCKED_BYTES)
		pthread_mutex_unlock(&ctx->lock);
	frames = kvmm_malloc(ctx, bytes);
	if (held && bytes > KJOB_LOCKED_BYTES)
		pthread_mutex_lock(&ctx->lock);
	if (!frames)
		return -ENOMEM;
	job->frames = frames;
	job->cap_frames = (uint32_t)want;
	return 0;
}

/*
 * Room for @nr pages on the host tier.  A job that may wait (@job->wait)
 * evicts nothing: it has the room free, or has the oldest values written
 * down to make it and waits (-EAGAIN), or waits for other jobs' frames
 * (puts in flight: values to write down once they settle); else, or when
 * nothing can be written down, reclaim makes it as for the tree.
 * Return: 0, -EAGAIN or -ENOSPC.
 */
static int host_room(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t nr)
{
	struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];

	if (host->nr_free < nr)
		kvmm_migrate_reap(ctx);
	if (host->nr_free >= nr)
		return 0;
	if (job->wait && (kvmm_writeback_room(ctx, KVMM_TIER_HOST, nr) ||
			  ctx->io_pages[KVMM_TIER_HOST] > job->nr_frames))
		return -EAGAIN;
	return kvmm_tier_make_room(ctx, KVMM_TIER_HOST, nr) ? 0 : -ENOSPC;
}

/*
 * Take @s->pages host frames for @v, in state IO.  Return: 0, -EAGAIN
 * (wait for writeback, or for the next round's frame list) or -ENOSPC.
 */
static int kjob_take(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	uint32_t pages = job->space->pages;
	int32_t *pfns = job->frames + job->nr_frames;
	int ret;

	if (job->cap_frames - job->nr_frames < pages)
		return job->wait && job->nr_frames ? -EAGAIN : -ENOSPC;
	ret = host_room(ctx, job, pages);
	if (ret)
		return ret;
	__kvmm_alloc_pages(ctx, host, pages, pfns);
	kvmm_pages_set_state(host, pfns, pages, KVMM_PAGE_IO);
	ctx->io_pages[KVMM_TIER_HOST] += pages;
	v->first = job->nr_frames;
	job->nr_frames += pages;
	return 0;
}

/* Pages a put's new values may take: the host tier's, and below if it waits. */
static uint64_t put_room(struct kvmm_ctx *ctx, const struct kvmm_kjob *job)
{
	uint64_t room = ctx->zone[KVMM_TIER_HOST].nr_pages;
	uint32_t lower;

	if (job->wait && kvmm_tier_below(ctx, KVMM_TIER_HOST, &lower))
		room += ctx->zone[lower].nr_pages;
	return room;
}

/*
 * Arm a put's value @v (@node: its key's value, if stored): as good as
 * new when stored, else on new host frames; or it waits (@job->nr_wait),
 * or fails.
 */
static void put_arm(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v,
		    struct kvmm_node *node)
{
	if (node) {		/* stored already: as good as new */
		kvmm_tree_touch(ctx, node);
		v->err = 0;
		return;
	}
	if (job->new_pages > put_room(ctx, job)) {	/* never fits: evict nothing */
		v->err = -ENOSPC;
		return;
	}
	/* once one waits, the rest wait behind it: the room goes in order */
	v->err = job->nr_wait ? -EAGAIN : kjob_take(ctx, job, v);
	if (v->err == -EAGAIN) {
		job->nr_wait++;
		return;
	}
	if (v->err)
		return;
	v->armed = true;
	job->remote |= ctx->remote != NULL;	/* written through */
}

/*
 * Arm the job's values (see the DOC above).  A put of a key already
 * stored succeeds at once; a key that finds no room waits (put_arm()) or
 * fails with -ENOSPC.  With @held, the lock is let go now and then
 * (kjob_breathe()).
 */
static void kjob_arm(struct kvmm_ctx *ctx, struct kvmm_kjob *job, bool held)
{
	struct kvmm_kspace *s = job->space;
	uint32_t i, since = 0;

	for (i = 0; i < job->n; i++) {
		struct kjob_val *v = &job->vals[i];
		struct kvmm_node *node;

		kjob_breathe(ctx, held, &since);	/* before the lookup: it may go meanwhile */
		node = keyed_value_find(ctx, s, &v->key);
		if (job->put) {
			put_arm(ctx, job, v, node);
			since += v->armed ? s->pages : 0;
			continue;
		}
		if (!node && ctx->remote) {	/* ask the remote tier, into new frames */
			if (kjob_take(ctx, job, v)) {
				v->err = -ENOENT;
				kvmm_count(ctx, EV_KEYED_MISSES, 1);
				continue;
			}
			since += s->pages;
			v->armed = v->remote = true;
			job->remote = true;
			continue;
		}
		if (!node) {
			v->err = -ENOENT;
			kvmm_count(ctx, EV_KEYED_MISSES, 1);
			continue;
		}
		kvmm_tree_lock(ctx, node);
		job->nr_locks++;
		v->node = node;
		v->armed = true;
		job->io |= !ctx->store[node->tier]->page;
		job->nr_behind += !!(node->flags & KVMM_NODE_KREAD);
	}
}

/*
 * The next round of a put that waits: the frames of the last one are the
 * values' now, and the values that waited are armed again, in order, as
 * far as there is room.  After KJOB_STALLS rounds in a row that armed
 * none, it stops waiting (see "Rounds" in the DOC above).  Return:
 * whether any value was armed.
 */
static bool kjob_rearm(struct kvmm_ctx *ctx, struct kvmm_kjob *job, bool held)
{
	struct kvmm_kspace *s = job->space;
	uint32_t i, since = 0, waiting = job->nr_wait;
	bool armed = false;

	job->nr_frames = 0;
	job->nr_wait = 0;
	if (job->stalls >= KJOB_STALLS)
		job->wait = false;
	for (i = 0; i < job->n && waiting; i++) {
		struct kjob_val *v = &job->vals[i];

		if (v->err != -EAGAIN)
			continue;
		waiting--;
		kjob_breathe(ctx, held, &since);
		put_arm(ctx, job, v, keyed_value_find(ctx, s, &v->key));
		since += v->armed ? s->pages : 0;
		armed |= v->armed;
	}
	job->stalls = armed ? 0 : job->stalls + 1;
	return armed;
}

/*
 * The window's arrays, for the copy step: taken off the lock where the
 * caller has one, within what the job was charged for.  Return: 0 or
 * -ENOMEM.
 */
static int kjob_win_alloc(struct kvmm_ctx *ctx, struct kvmm_kjob *job)
{
	uint32_t w = kjob_win(job);
	char *p = kvmm_malloc(ctx, (size_t)w * KJOB_WIN_PAGE_BYTES);

	if (!p)
		return -ENOMEM;
	job->win = w;
	job->keys = (struct kvmm_store_key *)p;
	job->to = (struct kvmm_store_to *)(job->keys + w);
	job->rpages = (struct kvmm_remote_page *)(job->to + w);
	job->addrs = (void **)(job->rpages + w);
	job->pfns = (int32_t *)(job->addrs + w);
	job->page_val = (uint32_t *)(job->pfns + w);
	job->rok = (uint8_t *)(job->page_val + w);
	return 0;
}

static void kjob_win_free(struct kvmm_ctx *ctx, struct kvmm_kjob *job)
{
	kvmm_mfree(ctx, job->keys, (size_t)job->win * KJOB_WIN_PAGE_BYTES);
	job->keys = NULL;
	job->win = 0;
}

/* Copy @v's bytes into its frames (a put), sealed: in one pass where the store can. */
static int copy_in(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	const struct kvmm_store_ops *ops = ctx->store[KVMM_TIER_HOST];
	void *priv = ctx->store_priv[KVMM_TIER_HOST];
	const int32_t *pfns = job->frames + v->first;
	uint64_t pb = keyed_page_bytes(ctx), left = job->space->value_bytes;
	const char *src = v->buf;
	uint32_t i;

	for (i = 0; i < job->space->pages; i++) {
		char *page = ops->fill ? NULL : ops->page(priv, (uint32_t)pfns[i]);
		uint64_t b = left < pb ? left : pb;

		if (ops->fill) {
			ops->fill(priv, (uint32_t)pfns[i], src, b);
		} else {
			memcpy(page, src, b);
			memset(page + b, 0, pb - b);
		}
		src += b;
		left -= b;
	}
	if (!ops->fill)
		ops->seal(priv, pfns, job->space->pages);
	return 0;
}

/* Copy a value's pages @first.. (@addrs, @nr of them) out to the caller's bytes at @dst. */
static void copy_pages_out(const struct kvmm_kspace *s, uint64_t pb, void *const *addrs,
			   uint32_t first, uint32_t nr, char *dst)
{
	uint64_t done = (uint64_t)first * pb;
	uint32_t i;

	for (i = 0; i < nr && done < s->value_bytes; i++) {
		uint64_t b = s->value_bytes - done < pb ? s->value_bytes - done : pb;

		memcpy(dst + done, addrs[i], b);
		done += b;
	}
}

/*
 * Copy a whole value's bytes out to @dst from its @pfns on memory store
 * @tier (verified already), a window of pages at a time.
 */
void kjob_copy_frames_out(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t tier,
			  const int32_t *pfns, char *dst)
{
	const struct kvmm_store_ops *ops = ctx->store[tier];
	void *priv = ctx->store_priv[tier];
	uint32_t pages = job->space->pages, i, j, m;

	for (j = 0; j < pages; j += m) {
		m = pages - j < job->win ? pages - j : job->win;
		for (i = 0; i < m; i++)
			job->addrs[i] = ops->page(priv, (uint32_t)pfns[j + i]);
		copy_pages_out(job->space, keyed_page_bytes(ctx), job->addrs, j, m, dst);
	}
}

/*
 * Copy @v's value out to the caller from a memory store, verified on the
 * way (in one pass where the store can).  Return: 0, or -EBADMSG.
 */
static int copy_out(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	const struct kvmm_node *node = v->node;
	const struct kvmm_store_ops *ops = ctx->store[node->tier];
	void *priv = ctx->store_priv[node->tier];
	uint32_t nr = node->len >> ctx->page_shift, i;
	uint64_t pb = keyed_page_bytes(ctx);

	if (ops->copy_out) {
		uint64_t left = job->space->value_bytes;
		char *dst = v->buf;

		for (i = 0; i < nr; i++, dst += pb, left -= left < pb ? left : pb)
			if (ops->copy_out(priv, (uint32_t)node->pfns[i], dst, left < pb ? left : pb))
				return -EBADMSG;
		return 0;
	}
	if (ops->verify(priv, node->pfns, nr) < nr)
		return -EBADMSG;
	kjob_copy_frames_out(ctx, job, node->tier, node->pfns, v->buf);
	return 0;
}

/*
 * Read the window's @k pages from I/O store @tier, in as few reads as the
 * store takes.  A page that fails fails its value, whose other pages in
 * the window are skipped (and the later ones not queued).
 */
static void read_window(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t tier,
			uint32_t chan, uint32_t k)
{
	const struct kvmm_store_ops *ops = ctx->store[tier];
	void *priv = ctx->store_priv[tier];
	uint32_t i, done, got;
	int err;

	for (done = 0; done < k; ) {
		err = 0;
		got = ops->read(priv, chan, job->pfns + done, k - done, job->keys + done,
				job->to + done, job->addrs, &err);
		done += got;
		if ((!err && got) || done >= k)
			continue;
		i = job->page_val[done];	/* its value failed: skip the rest of it */
		job->vals[i].err = err ? err : -EIO;	/* no progress: -EIO */
		while (done < k && job->page_val[done] == i)
			done++;
	}
}

/*
 * Read the job's values that are on I/O store @tier, a window of pages at
 * a time (the store's queue depth of them in flight, not one value after
 * the other), each page copied to its value's bytes by the store as it
 * lands, checksummed in the same pass; a prefetch's pages go whole into
 * the host frames it took for them.
 */
static void read_values(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t tier,
			uint32_t chan)
{
	const struct kvmm_store_ops *host = ctx->store[KVMM_TIER_HOST];
	void *hpriv = ctx->store_priv[KVMM_TIER_HOST];
	uint64_t pb = keyed_page_bytes(ctx), vb = job->space->value_bytes;
	uint32_t i, j, p, m, k = 0;

	for (i = job->lo; i < job->hi; i++) {
		struct kjob_val *v = &job->vals[i];
		struct kvmm_node *node = v->node;
		uint32_t nr;

		if (!v->armed || v->remote || v->err || node->tier != tier)
			continue;
		nr = node->len >> ctx->page_shift;
		for (j = 0; j < nr && !v->err; j += m) {
			m = nr - j < job->win - k ? nr - j : job->win - k;
			kspace_store_keys(ctx, job->space, node, j, m, job->keys + k);
			memcpy(job->pfns + k, node->pfns + j, m * sizeof(int32_t));
			for (p = 0; p < m; p++) {
				uint64_t at = (uint64_t)(j + p) * pb;

				job->page_val[k + p] = i;
				job->to[k + p] = job->pf ?	/* the whole page, into its frame */
					(struct kvmm_store_to){
						.dst = host->page(hpriv,
							(uint32_t)job->frames[v->first + j + p]),
						.len = pb } :
					(struct kvmm_store_to){
						.dst = (char *)v->buf + at,
						.len = vb - at < pb ? vb - at : pb };
			}
			k += m;
			if (k == job->win) {
				read_window(ctx, job, tier, chan, k);
				k = 0;
			}
		}
	}
	if (k)
		read_window(ctx, job, tier, chan, k);
}


/*
 * The copy step: no context state changes, so it runs with or without
 * the lock (@chan: the I/O stores' channel, as kvmm_migrate_copy()).
 * A get's identities are taken here, from the locked values' tokens.
 * Its window is taken here and given back at the end.
 */
static void kjob_copy(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t chan)
{
	uint32_t i, t;

	if (kjob_win_alloc(ctx, job)) {
		for (i = job->lo; i < job->hi; i++)
			if (job->vals[i].armed)
				job->vals[i].err = -ENOMEM;
		return;
	}
	for (i = job->lo; i < job->hi; i++) {
		struct kjob_val *v = &job->vals[i];

		if (!v->armed)
			continue;
		if (job->put)
			v->err = copy_in(ctx, job, v);
		else if (!job->pf && !v->remote && ctx->store[v->node->tier]->page)
			v->err = copy_out(ctx, job, v);
	}
	if (job->remote)
		kjob_remote_copy(ctx, job);
	for (t = KVMM_TIER_HOST; !job->put && job->io && t < KVMM_NR_TIERS; t++)
		if (ctx->store[t] && !ctx->store[t]->page)
			read_values(ctx, job, t, chan);
	for (i = job->lo; job->pf && i < job->hi; i++)	/* verified as read: sealed anew */
		if (job->vals[i].armed && !job->vals[i].err)
			ctx->store[KVMM_TIER_HOST]->seal(ctx->store_priv[KVMM_TIER_HOST],
							 job->frames + job->vals[i].first,
							 job->space->pages);
	kjob_win_free(ctx, job);
	for (i = job->lo; i < job->hi; i++) {	/* the new values' edges, off the lock */
		struct kjob_val *v = &job->vals[i];
		uint32_t w[KVMM_KEY_WORDS];

		if (!v->armed || v->err || (!job->put && !v->remote))
			continue;
		keyed_key_words(&v->key, w);
		v->edge = kvmm_tree_keyed_buf(ctx, w, job->space->pages, job->frames + v->first);
		if (!v->edge)
			v->err = -ENOMEM;
	}
}

/**
 * kjob_store() - a value the job copied into new host frames (a put's, or
 *	a remote get's) joins its space's index
 * @ctx: the context, its lock held where it has one
 * @job: the job, which holds the frames (state IO)
 * @v: the value; unless it failed (@v->err), it is stored
 *
 * Return: its node, touched and its bytes counted in; NULL when it failed,
 * its key got there first meanwhile, or memory ran out: its frames are
 * given back.
 */
struct kvmm_node *kjob_store(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	struct kvmm_kspace *s = job->space;
	struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	int32_t *pfns = job->frames + v->first;
	struct kvmm_node *node = NULL;
	uint32_t w[KVMM_KEY_WORDS];

	ctx->io_pages[KVMM_TIER_HOST] -= s->pages;
	if (!v->err) {
		keyed_key_words(&v->key, w);
		node = kvmm_tree_add_keyed(ctx, s->root, w, s->pages, pfns, KVMM_TIER_HOST,
					   v->edge);
	}
	if (!node) {
		kvmm_pages_set_state(host, pfns, s->pages, KVMM_PAGE_OWNED);
		kvmm_free_pages(ctx, host, pfns, s->pages);
		return NULL;
	}
	v->edge = NULL;		/* the node's now */
	kvmm_lru_update(ctx, node);
	kvmm_tier_count(ctx, KVMM_TIER_HOST, TEV_BYTES_IN, (uint64_t)s->pages * keyed_page_bytes(ctx));
	return node;
}

/* Settle a put's value: it joins the index, or its frames go back. */
static void put_settle(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	if (kjob_store(ctx, job, v))
		kvmm_count(ctx, EV_KEYED_PUTS, 1);
	else if (!v->err && !keyed_value_find(ctx, job->space, &v->key))
		v->err = -ENOMEM;	/* not there first: no memory */
}

/*
 * A prefetch's read of @node is over: the rings' gets parked behind it
 * (struct kvmm_kjob.nr_behind) that waited for no other go to the I/O
 * worker, to find it where the read left it.
 */
static void pf_wake(struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->kjobs) {
		struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);

		if (!job->nr_behind)
			continue;
		for (i = 0; i < job->n; i++)
			if (job->vals[i].armed && job->vals[i].node == node)
				job->nr_behind--;
		if (!job->nr_behind && job->parked) {
			job->parked = false;
			kvmm_work_queue(ctx, &job->work);
		}
	}
}

/*
 * Settle a prefetch's value: read whole, it moves up into the host
 * frames the job took, marked KVMM_NODE_PREFETCHED for the get it is
 * read for; cancelled or failed, the frames go back and it stays where
 * it was (dropped when it failed verification and nobody else holds it).
 */
static void pf_settle(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v)
{
	struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	int32_t *pfns = job->frames + v->first;
	struct kvmm_node *node = v->node;
	uint32_t pages = job->space->pages, tier = node->tier;

	ctx->io_pages[KVMM_TIER_HOST] -= pages;
	node->flags &= (uint8_t)~KVMM_NODE_KREAD;
	if (job->canceled && !v->err)
		v->err = -ECANCELED;
	if (!v->err) {
		kvmm_node_moved(ctx, node, KVMM_TIER_HOST, pfns, tier, job->t0);
		node->flags |= KVMM_NODE_PREFETCHED;
		ctx->prefetched++;
		kvmm_count(ctx, EV_PREFETCH_PAGES, pages);
	} else {
		kvmm_pages_set_state(host, pfns, pages, KVMM_PAGE_OWNED);
		kvmm_free_pages(ctx, host, pfns, pages);
		if (v->err == -ECANCELED)
			kvmm_count(ctx, EV_PREFETCH_CANCELED, pages);
		else
			kvmm_tier_copy_failed(ctx, tier, tier, v->err);
	}
	kvmm_tree_unlock(ctx, node);
	job->nr_locks--;
	if (!v->err)
		kvmm_tree_touch(ctx, node);	/* asked for: the newest on the host tier */
	pf_wake(ctx, node);
	if (v->err == -EBADMSG && !node->lock_ref)
		kvmm_drop_leaf(ctx, node);	/* never served */
}

/*
 * The settle step; with @held, the lock is let go now and then (a value
 * settled is no longer armed, so kvmm_check() meanwhile sees it done).
 * Return: values that succeeded.
 */
static int kjob_settle(struct kvmm_ctx *ctx, struct kvmm_kjob *job, bool held)
{
	uint32_t i, since = 0;
	int ok = 0;

	for (i = 0; i < job->n; i++) {
		struct kjob_val *v = &job->vals[i];
		struct kvmm_node *node = v->node;	/* locked by the job: it stays */

		kjob_breathe(ctx, held, &since);
		if (job->put && v->armed) {
			put_settle(ctx, job, v);
			since += job->space->pages;
		} else if (job->pf && v->armed) {
			pf_settle(ctx, job, v);
			since += job->space->pages;
		} else if (v->armed && v->remote) {
			kjob_remote_settle(ctx, job, v);
			since += job->space->pages;
		} else if (!job->put && v->armed) {
			uint32_t tier = node->tier, nr = node->len >> ctx->page_shift;

			kvmm_tree_unlock(ctx, node);
			job->nr_locks--;
			if (v->err) {
				kvmm_tier_copy_failed(ctx, tier, tier, v->err);
				kvmm_count(ctx, EV_KEYED_MISSES, 1);
				if (v->err == -EBADMSG && !node->lock_ref)
					kvmm_drop_leaf(ctx, node);	/* never served */
			} else {
				kvmm_count(ctx, EV_KEYED_GETS, 1);
				kvmm_tier_count(ctx, tier, TEV_BYTES_OUT,
						(uint64_t)nr * keyed_page_bytes(ctx));
				if (node->flags & KVMM_NODE_PREFETCHED) {	/* brought up for it */
					kvmm_count(ctx, EV_PREFETCH_HITS, nr);
					kvmm_prefetch_forget(ctx, node);
				}
			}
		}
		v->armed = false;
		ok += !v->err;
		if (v->resp)
			*v->resp = v->err;
	}
	if (job->put || job->pf)
		kvmm_writeback(ctx);
	return ok;
}

/*
 * A job for the values of one command, keys and buffers copied in, its
 * frame list ready (kjob_frames()).  Return: it, or NULL with *@err set.
 */
static struct kvmm_kjob *kjob_make(struct kvmm_ctx *ctx, struct kvmm_kspace *s, bool put,
				   const struct kvmm_key *keys, void *const *bufs,
				   int32_t *const *resps, uint32_t n, bool held, int *err)
{
	struct kvmm_kjob *job = kjob_alloc(ctx, s, put, n);
	uint32_t i;

	*err = -ENOMEM;
	if (!job)
		return NULL;
	for (i = 0; i < n; i++) {
		job->vals[i].key = keys[i];
		job->vals[i].buf = bufs[i];
		job->vals[i].resp = resps ? resps[i] : NULL;
	}
	*err = kjob_frames(ctx, job, held);
	if (*err) {
		kjob_free(ctx, job);
		return NULL;
	}
	return job;
}

/* ---- the direct API ---- */

static int direct_io(struct kvmm_ctx *ctx, uint32_t space, bool put,
		     const struct kvmm_key *keys, void *const *bufs, uint32_t n, int32_t *res)
{
	struct kvmm_kspace *s;
	struct kvmm_kjob *job;
	uint32_t i;
	int ok, err;

	if (!ctx || (n && (!keys || !bufs)))
		return -EINVAL;
	s = kvmm_kspace_of(ctx, space, KVMM_NS_ANY);
	if (!s)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (!bufs[i])
			return -EINVAL;
	if (!n)
		return 0;
	kvmm_migrate_reap(ctx);
	job = kjob_make(ctx, s, put, keys, bufs, NULL, n, false, &err);
	if (!job)
		return err;
	job->wait = put && kvmm_writeback_serves(ctx, KVMM_TIER_HOST);
	kjob_arm(ctx, job, false);
	job->nr_behind = 0;	/* a ring's prefetch in flight: read it where it is */
	for (;;) {
		kjob_copy(ctx, job, 0);
		ok = kjob_settle(ctx, job, false);
		if (!job->nr_wait)
			break;
		kvmm_iow_idle(ctx);	/* the writeback that makes its room */
		kjob_rearm(ctx, job, false);
	}
	for (i = 0; res && i < n; i++)
		res[i] = job->vals[i].err;
	kjob_free(ctx, job);
	kvmm_debug_check(ctx, put ? "keyed put" : "keyed get");
	return ok;
}

/**
 * kvmm_keyed_put() - store values
 * @ctx: the context
 * @space: a space (kvmm_keyed_space())
 * @keys: their keys
 * @src: their bytes, the space's value_bytes each
 * @n: values
 * @res: out (may be NULL): per value, 0 or -errno (-ENOSPC: no room on
 *	the tiers even after reclaim, or more new values than the host
 *	tier and NVMe hold together, when nothing is evicted; -ENOMEM)
 *
 * A key already stored keeps its value (it is as good as this one: the
 * same key names the same KV) and counts as stored.  New values go to the
 * host tier; background writeback takes the oldest host pages down to
 * NVMe.  With an NVMe tier a put that finds the host tier full waits for
 * its oldest values to be written down rather than drop them, so a put
 * larger than the host tier streams through it to NVMe.
 *
 * Context: a put that waits for writeback waits for the I/O worker: call
 * it without kvmm_lock() held where rings share the context.
 *
 * Return: values stored, or -EINVAL for bad arguments, -EDQUOT past the
 * namespace's ns_kjob_bytes, -ENOMEM (nothing done).
 */
KVMM_EXPORT int kvmm_keyed_put(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
			       const void *const *src, uint32_t n, int32_t *res)
{
	return direct_io(ctx, space, true, keys, (void *const *)src, n, res);
}

/**
 * kvmm_keyed_get() - read values
 * @ctx: the context
 * @space: a space
 * @keys: their keys
 * @dst: where their bytes go, the space's value_bytes each
 * @n: values
 * @res: out (may be NULL): per value, 0, -ENOENT (not stored), -EBADMSG
 *	(it failed its checksum or identity: it is dropped, never served),
 *	or an I/O error
 *
 * Values are read from whatever tier holds them, without moving them.
 *
 * Return: values read, or -EINVAL, -EDQUOT, -ENOMEM (nothing done).
 */
KVMM_EXPORT int kvmm_keyed_get(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
			       void *const *dst, uint32_t n, int32_t *res)
{
	return direct_io(ctx, space, false, keys, dst, n, res);
}

/*
 * The leading keys of @keys that are stored (each touched, as an access),
 * or the values deleted (@del: each one stored and not being read goes).
 * With @res, every key is looked at and res[i] says what became of key i:
 * 0 (stored; deleted), -ENOENT (not stored) or -EBUSY (a get reads it: it
 * stays); the count is then of every key stored, or deleted.
 */
static int walk_keys(struct kvmm_ctx *ctx, struct kvmm_kspace *s, const struct kvmm_key *keys,
		     uint32_t n, bool del, int32_t *const *res)
{
	uint32_t i;
	int done = 0;

	for (i = 0; i < n; i++) {
		struct kvmm_node *node = keyed_value_find(ctx, s, &keys[i]);
		int32_t r = 0;

		if (!node)
			r = -ENOENT;
		else if (!del)
			kvmm_tree_touch(ctx, node);
		else if (node->lock_ref)
			r = -EBUSY;
		else {
			kvmm_drop_leaf(ctx, node);
			kvmm_count(ctx, EV_KEYED_DELETES, 1);
		}
		if (res)
			*res[i] = r;
		else if (r == -ENOENT && !del)
			break;
		done += !r;
	}
	return done;
}

/**
 * kvmm_keyed_run_keys() - EXISTS or DELETE on a space, whoever calls
 * @ctx: the context, held
 * @s: the space
 * @keys: the keys
 * @n: how many
 * @del: delete (else: look up)
 * @res: NULL, or where each key's result goes (see walk_keys())
 * @held: the caller holds the context's lock (a ring): it is dropped
 *	while the remote tier is asked, and taken again
 *
 * An EXISTS carries on on the remote tier past the keys stored here
 * (kvmm_keyed_remote_exists()).
 *
 * Return: leading keys stored (@res: keys stored), or values deleted.
 */
int kvmm_keyed_run_keys(struct kvmm_ctx *ctx, struct kvmm_kspace *s,
			const struct kvmm_key *keys, uint32_t n, bool del, int32_t *const *res,
			bool held)
{
	int ret;

	kvmm_migrate_reap(ctx);
	ret = walk_keys(ctx, s, keys, n, del, res);
	kvmm_debug_check(ctx, del ? "keyed delete" : "keyed exists");
	if (del || !ctx->remote || (!res && (uint32_t)ret == n))
		return ret;
	/* what is not here may be on the remote tier: ask, off the lock */
	s->busy++;
	if (held)
		pthread_mutex_unlock(&ctx->lock);
	ret += kvmm_keyed_remote_exists(ctx, s, keys, n, (uint32_t)ret, res);
	if (held)
		pthread_mutex_lock(&ctx->lock);
	s->busy--;
	return ret;
}

static int direct_keys(struct kvmm_ctx *ctx, uint32_t space, const struct kvmm_key *keys,
		       uint32_t n, bool del, int32_t *res)
{
	struct kvmm_kspace *s;
	int32_t **resps = NULL;
	size_t bytes = (size_t)n * sizeof(*resps);
	uint32_t i;
	int ret;

	if (!ctx || (n && !keys))
		return -EINVAL;
	s = kvmm_kspace_of(ctx, space, KVMM_NS_ANY);
	if (!s)
		return -EINVAL;
	if (res && n) {
		resps = kvmm_malloc(ctx, bytes);
		if (!resps)
			return -ENOMEM;
		for (i = 0; i < n; i++)
			resps[i] = &res[i];
	}
	ret = kvmm_keyed_run_keys(ctx, s, keys, n, del, resps, false);
	if (resps)
		kvmm_mfree(ctx, resps, bytes);
	return ret;
}

/**
 * kvmm_keyed_exists() - which of @keys are stored
 * @ctx: the context
 * @space: a space
 * @keys: the keys, in the order an engine would load them
 * @n: how many
 * @res: NULL, or out: per key, 0 (stored) or -ENOENT
 *
 * Without @res, the run of consecutive hits from the start, as HiCache's
 * batch_exists and vLLM's lookup want it; with it, every key is looked at
 * (LMCache's batch exists wants a bit per key).  The values found count
 * as accessed.
 *
 * Return: that run (@res: the keys stored), or -EINVAL, -ENOMEM.
 */
KVMM_EXPORT int kvmm_keyed_exists(struct kvmm_ctx *ctx, uint32_t space,
				  const struct kvmm_key *keys, uint32_t n, int32_t *res)
{
	return direct_keys(ctx, space, keys, n, false, res);
}

/**
 * kvmm_keyed_delete() - drop values
 * @ctx: the context
 * @space: a space
 * @keys: their keys; keys not stored are skipped
 * @n: how many
 * @res: NULL, or out: per key, 0 (deleted), -ENOENT (not stored) or
 *	-EBUSY (a get through a ring is reading it: it stays)
 *
 * Return: values deleted, or -EINVAL, -ENOMEM.
 */
KVMM_EXPORT int kvmm_keyed_delete(struct kvmm_ctx *ctx, uint32_t space,
				  const struct kvmm_key *keys, uint32_t n, int32_t *res)
{
	return direct_keys(ctx, space, keys, n, true, res);
}

/* Whether a command of @s is in flight: its values or frames are held. */
static bool space_busy(const struct kvmm_ctx *ctx, const struct kvmm_kspace *s)
{
	const struct kvmm_list *pos;

	if (s->busy)
		return true;
	list_for_each(pos, &ctx->kjobs)
		if (list_entry(pos, struct kvmm_kjob, link)->space == s)
			return true;
	list_for_each(pos, &s->root->children)
		if (list_entry(pos, struct kvmm_node, sibling)->lock_ref)
			return true;
	return false;
}

/**
 * kvmm_keyed_space_remove_in() - remove a space: every value it stores
 *	here, on every tier, then the space itself
 * @ctx: the context, held
 * @s: the space; freed on success
 *
 * Refused, with nothing dropped, while a command of the space is in
 * flight.  The space's slot is free again; its id names nothing from now
 * on, even once a new space takes the slot.
 *
 * Return: values dropped, or -EBUSY.
 */
int kvmm_keyed_space_remove_in(struct kvmm_ctx *ctx, struct kvmm_kspace *s)
{
	uint32_t slot = s->id & (KVMM_KSPACES_MAX - 1);
	int dropped = 0;

	kvmm_migrate_reap(ctx);
	if (space_busy(ctx, s))
		return -EBUSY;
	while (!list_empty(&s->root->children)) {
		kvmm_drop_leaf(ctx, list_entry(s->root->children.next, struct kvmm_node,
					       sibling));
		kvmm_count(ctx, EV_KEYED_DELETES, 1);
		dropped++;
	}
	kvmm_tree_keyed_root_free(ctx, s->root);
	ctx->kspaces[slot] = NULL;
	kspace_slots_trim(ctx);
	ctx->nr_kspaces_live--;
	ctx->kspace_gen = (ctx->kspace_gen + 1) & KSPACE_GEN_MASK;
	kvmm_mfree(ctx, s, sizeof(*s));
	kvmm_debug_check(ctx, "keyed space remove");
	return dropped;
}

/**
 * kvmm_keyed_space_remove() - remove a keyed space and every value it
 *	stores on the host and NVMe tiers
 * @ctx: the context
 * @space: a space (kvmm_keyed_space())
 *
 * Its slot counts no more against its namespace's limit
 * (KVMM_SET_NS_KSPACES) nor the context's table; @space names nothing
 * from now on.  Values written through to a remote tier stay there (other
 * contexts may share them).
 *
 * Return: values dropped; -EINVAL for no such space; -EBUSY while a
 * command of the space is in flight (nothing is dropped then).
 */
KVMM_EXPORT int kvmm_keyed_space_remove(struct kvmm_ctx *ctx, uint32_t space)
{
	struct kvmm_kspace *s = kspace_direct(ctx, space);

	return s ? kvmm_keyed_space_remove_in(ctx, s) : -EINVAL;
}

/* ---- through a ring ---- */

/*
 * The worker's next slice of @job's values: from where the last one
 * ended, values until about KJOB_SLICE_BYTES are copied (one at least).
 */
static uint32_t kjob_slice_end(const struct kvmm_kjob *job)
{
	uint64_t vb = job->space->value_bytes, bytes = 0;
	uint32_t i = job->lo;

	while (i < job->n && (i == job->lo || bytes + vb <= KJOB_SLICE_BYTES))
		bytes += job->vals[i++].armed ? vb : 0;
	return i;
}

/*
 * The worker copies a get's values (from NVMe, from the remote tier) a
 * slice at a time, queued again behind the others' work after each, so
 * that a long one does not hold theirs; after the last it settles and
 * completes the job.  A put that waits for room runs a round a time: it
 * is queued again behind the writeback its round started, and arms its
 * waiting values when it runs next.
 */
static void kjob_run(struct kvmm_ctx *ctx, struct kvmm_work *work)
{
	struct kvmm_kjob *job = container_of(work, struct kvmm_kjob, work);
	int ok;

	if (job->rearm) {
		pthread_mutex_lock(&ctx->lock);
		kjob_rearm(ctx, job, true);
		pthread_mutex_unlock(&ctx->lock);
		job->rearm = false;
		job->lo = 0;
	}
	job->hi = kjob_slice_end(job);
	kjob_copy(ctx, job, 1);
	if (job->hi < job->n) {
		job->lo = job->hi;
		kvmm_work_queue(ctx, &job->work);
		return;
	}
	pthread_mutex_lock(&ctx->lock);
	ok = kjob_settle(ctx, job, true);
	if (job->nr_wait) {	/* behind the writeback that makes its room */
		job->rearm = true;
		kvmm_debug_check(ctx, "keyed put round");
		pthread_mutex_unlock(&ctx->lock);
		kvmm_work_queue(ctx, &job->work);
		return;
	}
	if (job->owner && !job->pf)	/* a prefetch completed when it was armed */
		kvmm_owner_complete(job->owner, job->user_data, ok);
	kjob_free(ctx, job);
	kvmm_debug_check(ctx, "keyed get done");
	pthread_cond_broadcast(&ctx->kjobs_done);
	pthread_mutex_unlock(&ctx->lock);
}

/**
 * kvmm_keyed_ring() - a ring's KPUT or KGET
 * @ctx: the context, its lock held
 * @owner: the ring's owner, for a completion that comes later
 * @user_data: that completion's user_data
 * @s: the space
 * @put: KPUT (else KGET)
 * @keys: the values' keys
 * @bufs: where their bytes are (read for a put, written for a get), in
 *	memory the ring keeps mapped until its completion
 * @resps: where each value's result goes, in the same memory
 * @n: values, at least 1
 *
 * Copies that need no I/O run on the calling thread with the context's
 * lock dropped (other rings go on meanwhile) and retaken; a get that
 * reads NVMe, or a put that waits for writeback to make room on the host
 * tier (see "Rounds" in the DOC above), goes to the I/O worker, whose
 * completion is posted to @owner later (the owner must then stay until
 * it has been).  Arming
 * and settling many frames let the lock go now and then too.
 *
 * Return: values that succeeded; -EINPROGRESS when the completion comes
 * later; -EDQUOT when the memory the command would take is past its
 * namespace's limit (KVMM_SET_NS_KJOB_BYTES; nothing done); -ENOMEM.
 */
int kvmm_keyed_ring(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
		    struct kvmm_kspace *s, bool put, const struct kvmm_key *keys,
		    void *const *bufs, int32_t *const *resps, uint32_t n)
{
	struct kvmm_kjob *job;
	int ok;

	job = kjob_make(ctx, s, put, keys, bufs, resps, n, true, &ok);
	if (!job)
		return ok;
	/* a put completed later may wait for writeback instead of dropping */
	job->wait = put && owner && kvmm_writeback_serves(ctx, KVMM_TIER_HOST);
	kjob_arm(ctx, job, true);
	if ((job->io || job->remote || job->nr_wait) && owner && ctx->iow) {
		job->owner = owner;
		job->user_data = user_data;
		job->work.run = kjob_run;
		job->parked = job->nr_behind > 0;
		if (job->parked)	/* queued when the prefetches' reads settle */
			return -EINPROGRESS;
		if (job->io || job->nr_wait)	/* a wait: behind the writeback */
			kvmm_work_queue(ctx, &job->work);
		else	/* the remote tier alone: never ahead of NVMe I/O */
			kvmm_work_queue_remote(ctx, &job->work);
		return -EINPROGRESS;
	}
	job->nr_behind = 0;	/* it reads them where they are now */
	if (job->io) {		/* kvmm_ioctl(): it waits, under the lock */
		kjob_copy(ctx, job, 0);
	} else {		/* memory, and the remote tier: never under it */
		pthread_mutex_unlock(&ctx->lock);
		kjob_copy(ctx, job, 0);	/* memory only: channel 0 is not used */
		pthread_mutex_lock(&ctx->lock);
	}
	ok = kjob_settle(ctx, job, true);
	kjob_free(ctx, job);
	kvmm_debug_check(ctx, put ? "keyed put" : "keyed get");
	return ok;
}

/* An owner is going: its queued jobs complete to no one. */
void kvmm_keyed_forget(struct kvmm_ctx *ctx, const struct kvmm_owner *owner)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->kjobs) {
		struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);

		if (job->owner == owner)
			job->owner = NULL;
	}
}

/* Whether an owner still has jobs the worker may write into its memory. */
bool kvmm_keyed_pending(const struct kvmm_ctx *ctx, const struct kvmm_owner *owner)
{
	const struct kvmm_list *pos;

	list_for_each(pos, &ctx->kjobs) {
		const struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);

		if (job->owner == owner && !job->pf)	/* a prefetch writes nothing there */
			return true;
	}
	return false;
}

/* ---- prefetch ---- */

/*
 * DOC: keyed prefetch
 *
 * An engine on the keyed store learns which values it will load before
 * it loads them: vLLM's scheduler looks a waiting request's blocks up
 * (KvmmSecondaryTier.lookup()) and asks for the load later, SGLang's
 * HiCache prefetch thread asks which pages exist and then gets them.  A
 * value on NVMe costs its read at the get; a prefetch starts that read at
 * the lookup instead, so that the get finds the value on the host tier.
 *
 * A prefetch is a keyed job of its own kind (@pf), armed, copied and
 * settled as a get is.  Arming takes, for each value on an I/O store that
 * no one holds (not locked by a get, not read up by another prefetch), in
 * the order of the keys, host frames in state IO and a lock reference on
 * the value, and marks it KVMM_NODE_KREAD.  Its room is what the prefix
 * PREFETCH takes on the device, on the host tier: at most the budget, and
 * by default only the free host pages above the low watermark, with no
 * reclaim, so it evicts nothing and wakes no writeback; with
 * KVMM_PREFETCH_RECLAIM the budget is taken as a put takes its room,
 * reclaim dropping or writing down the coldest unlocked values (a value a
 * job holds is locked, never taken).  The copy reads each value's pages
 * whole into its frames, checksum and identity checked by the store as
 * for a get, and seals them for the host tier.  Settling moves the value
 * up into those frames (kvmm_node_moved(): its NVMe slots are freed, the
 * host copy is the value now), touched, and marks it
 * KVMM_NODE_PREFETCHED until a get reads it (prefetch_hits counts those
 * pages, prefetch_pages the pages moved).  A value that failed its read
 * stays where it was (dropped when it failed verification: a miss, never
 * wrong bytes).
 *
 * Through a ring the copy runs on the I/O worker and the command
 * completes when it is armed, with the number of values whose read was
 * started: the engine does not wait for it.  The ring that issued it
 * cancels it by its user_data (PREFETCH with KVMM_PREFETCH_CANCEL, as
 * for the tree's): I/O already issued is not recalled, but when it is
 * over the frames go back, the values stay on NVMe and prefetch_canceled
 * counts the pages.  A ring's KGET that finds a value being read up
 * does not read it a second time: it waits, parked (@nr_behind), until
 * the reads it needs have settled and then goes to the worker, which
 * finds the value on the host tier (or, if the read failed or was
 * cancelled, still on NVMe).  A get that cannot wait (the direct API,
 * kvmm_ioctl()) reads such a value from NVMe itself; a delete of it
 * fails with -EBUSY as for a value a get reads.  The direct API's
 * kvmm_keyed_prefetch() runs the three steps in a row and returns once
 * the values are on the host tier.
 */

/* Host pages a prefetch may take: see the DOC above. */
static uint64_t pf_room(const struct kvmm_ctx *ctx, uint32_t budget, uint32_t flags)
{
	const struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	uint64_t keep = host->wmark[KVMM_WMARK_LOW], room;

	if (flags & KVMM_PREFETCH_RECLAIM)
		return budget;
	if (keep < host->wmark[KVMM_WMARK_MIN])
		keep = host->wmark[KVMM_WMARK_MIN];
	room = host->nr_free > keep ? host->nr_free - keep : 0;
	return budget && budget < room ? budget : room;
}

/*
 * Arm a prefetch: each value on an I/O store that no one holds, in order,
 * while its frames fit.  Return: values armed.
 */
static uint32_t pf_arm(struct kvmm_ctx *ctx, struct kvmm_kjob *job, bool held, uint32_t flags)
{
	struct kvmm_kspace *s = job->space;
	uint32_t i, since = 0, armed = 0;

	for (i = 0; i < job->n; i++) {
		struct kjob_val *v = &job->vals[i];
		struct kvmm_node *node;

		kjob_breathe(ctx, held, &since);
		node = keyed_value_find(ctx, s, &v->key);
		v->err = node ? -EALREADY : -ENOENT;
		if (!node || ctx->store[node->tier]->page || node->lock_ref)
			continue;	/* not stored, on the host, or held */
		/* others may have taken free pages while the lock was let go */
		v->err = (flags & KVMM_PREFETCH_RECLAIM) || pf_room(ctx, 0, 0) >= s->pages ?
			 kjob_take(ctx, job, v) : -ENOSPC;
		if (v->err)
			break;	/* no more room: the later values are as big */
		kvmm_tree_lock(ctx, node);
		node->flags |= KVMM_NODE_KREAD;
		job->nr_locks++;
		v->node = node;
		v->armed = true;
		job->io = true;
		since += s->pages;
		armed++;
	}
	for (; i < job->n; i++)
		if (!job->vals[i].armed && !job->vals[i].err)
			job->vals[i].err = -ENOSPC;
	return armed;
}

/**
 * kvmm_keyed_prefetch_in() - start reading values of a space up from NVMe
 *	to the host tier ahead of their get
 * @ctx: the context, its lock held (or the direct API's caller)
 * @owner: the ring whose KPREFETCH this is (its reads go to the I/O
 *	worker, and its user_data cancels them); NULL: read them now
 * @user_data: that command's user_data
 * @s: the space
 * @keys: the values' keys
 * @n: how many
 * @budget: host pages it may take at most; 0: the free host pages above
 *	the low watermark (never more)
 * @flags: 0, or KVMM_PREFETCH_RECLAIM: take @budget (not 0) pages as a
 *	put does, reclaiming cold unlocked values for them
 *
 * See "keyed prefetch" above.
 *
 * Return: with @owner, values whose read was started; without, values
 * moved to the host tier; -EINVAL for a bad flag, -EDQUOT past the
 * namespace's ns_kjob_bytes, -ENOMEM.  Nothing changes on failure.
 */
int kvmm_keyed_prefetch_in(struct kvmm_ctx *ctx, struct kvmm_owner *owner, uint64_t user_data,
			   struct kvmm_kspace *s, const struct kvmm_key *keys, uint32_t n,
			   uint32_t budget, uint32_t flags)
{
	bool held = owner != NULL;
	struct kvmm_kjob *job;
	uint32_t i, armed;
	int ret;

	if ((flags & ~KVMM_PREFETCH_FLAGS) || ((flags & KVMM_PREFETCH_RECLAIM) && !budget) ||
	    (n && !keys))
		return -EINVAL;
	if (!n)
		return 0;
	kvmm_migrate_reap(ctx);
	job = kjob_alloc(ctx, s, false, n);
	if (!job)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		job->vals[i].key = keys[i];
	job->pf = true;
	job->room = pf_room(ctx, budget, flags);
	job->t0 = kvmm_now_ns();
	ret = kjob_frames(ctx, job, held);
	if (ret || !job->cap_frames)	/* nothing on NVMe, or no room */
		goto out_free;
	armed = pf_arm(ctx, job, held, flags);
	if (armed && owner && ctx->iow) {
		job->owner = owner;
		job->user_data = user_data;
		job->work.run = kjob_run;
		kvmm_work_queue(ctx, &job->work);
		return (int)armed;
	}
	if (armed) {	/* the direct API, kvmm_ioctl(): under the lock */
		kjob_copy(ctx, job, 0);
		ret = kjob_settle(ctx, job, held);
	}
out_free:
	kjob_free(ctx, job);
	kvmm_debug_check(ctx, "keyed prefetch");
	return ret;
}

/**
 * kvmm_keyed_prefetch() - bring values of a space up from NVMe to the
 *	host tier ahead of their get
 * @ctx: the context
 * @space: a space
 * @keys: their keys
 * @n: how many
 * @budget: host pages it may take at most; 0: as many as are free above
 *	the host tier's low watermark
 * @flags: 0, or KVMM_PREFETCH_RECLAIM: take @budget (which must not be 0)
 *	pages as a put would, reclaiming the coldest unlocked values
 *
 * Each value that is on NVMe and that no get is reading is read into
 * host frames (nothing is reclaimed for them by default, so nothing on
 * the host tier is evicted), in the order of @keys while they fit, and
 * stays on the host tier, cached, for the get that follows.  Values not
 * stored, already on the host tier, or held are skipped.  Returns when
 * the reads are done; a ring's KPREFETCH starts them on the I/O worker
 * and completes at once.
 *
 * Return: values moved to the host tier; -EINVAL (bad space, flag, or
 * KVMM_PREFETCH_RECLAIM with no budget), -EDQUOT, -ENOMEM.
 */
KVMM_EXPORT int kvmm_keyed_prefetch(struct kvmm_ctx *ctx, uint32_t space,
				    const struct kvmm_key *keys, uint32_t n, uint32_t budget,
				    uint32_t flags)
{
	struct kvmm_kspace *s = kspace_direct(ctx, space);

	return s ? kvmm_keyed_prefetch_in(ctx, NULL, 0, s, keys, n, budget, flags) : -EINVAL;
}

/**
 * kvmm_keyed_prefetch_cancel() - cancel @owner's keyed prefetches tagged
 *	@user_data
 * @ctx: the context, its lock held
 * @owner: the ring
 * @user_data: the KPREFETCH entries' user_data
 *
 * Their reads go on; when each is over its frames go back and its values
 * stay where they were.
 *
 * Return: how many were cancelled.
 */
int kvmm_keyed_prefetch_cancel(struct kvmm_ctx *ctx, const struct kvmm_owner *owner,
			       uint64_t user_data)
{
	struct kvmm_list *pos;
	int nr = 0;

	if (!owner)
		return 0;
	list_for_each(pos, &ctx->kjobs) {
		struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);

		if (job->pf && !job->canceled && job->owner == owner &&
		    job->user_data == user_data) {
			job->canceled = true;
			nr++;
		}
	}
	return nr;
}

/**
 * kvmm_set_keyed_share() - split the lower tiers between keyed values and
 *	the tree's demoted pages
 * @ctx: the context
 * @pct: percent of each lower tier keyed values may hold (the tree's pages
 *	100 - @pct) before reclaim on that tier takes the kind over its part
 *	first, oldest first; 1 .. 100, 100 (the default) for no split
 *
 * Return: 0, or -EINVAL outside 1 .. 100.
 */
int kvmm_set_keyed_share(struct kvmm_ctx *ctx, uint64_t pct)
{
	return kvmm_set_percent(ctx, "keyed_share", pct, &ctx->keyed_share);
}

/**
 * kvmm_set_ns_kjob_bytes() - bound the memory one namespace's keyed
 *	commands may make the context hold at once
 * @ctx: the context, held
 * @bytes: the limit: the values' records, frame lists and copy windows of
 *	every KPUT and KGET of a namespace in flight; at least
 *	KVMM_NS_KJOB_BYTES_MIN, at most 2^40 (KVMM_NS_KJOB_BYTES_DEFAULT,
 *	64 MiB, by default)
 *
 * A command that would take its namespace past it is refused with
 * -EDQUOT before anything is done; the ones in flight are not touched.
 *
 * Return: 0, or -EINVAL out of range.
 */
int kvmm_set_ns_kjob_bytes(struct kvmm_ctx *ctx, uint64_t bytes)
{
	if (bytes < KVMM_NS_KJOB_BYTES_MIN || bytes > (1ull << 40)) {
		kvmm_report(ctx, "ns_kjob_bytes: %llu is outside %u .. 2^40",
			    (unsigned long long)bytes, KVMM_NS_KJOB_BYTES_MIN);
		return -EINVAL;
	}
	ctx->ns_kjob_bytes = bytes;
	return 0;
}

/* ---- statistics and checks ---- */

void kvmm_keyed_stats(const struct kvmm_ctx *ctx, uint64_t *v)
{
	v[KVMM_STAT_KEYED_SPACES] = ctx->nr_kspaces_live;
	v[KVMM_STAT_KEYED_HOST_PAGES] = ctx->keyed_pages[KVMM_TIER_HOST];
	v[KVMM_STAT_KEYED_NVME_PAGES] = ctx->keyed_pages[KVMM_TIER_NVME];
	v[KVMM_STAT_KEYED_SHARE] = ctx->keyed_share;
	v[KVMM_STAT_KEYED_VALUES] = ctx->keyed_values;
	v[KVMM_STAT_KEYED_EVICTS] = ctx->events[EV_KEYED_DROPS] - ctx->events[EV_KEYED_DELETES];
	v[KVMM_STAT_KEYED_REMOTE_GETS] = ctx->events[EV_KEYED_REMOTE_GETS];
}

/*
 * kvmm_check()'s view of the keyed jobs: the frames puts hold (state IO,
 * marked @mark_io on @marks of the host tier, counted in *@io) and the
 * locks gets hold (*@locks).  Return: 0, or -EUCLEAN with @why set.
 */
int kvmm_keyed_check(const struct kvmm_ctx *ctx, uint8_t *const *marks, uint8_t mark_io,
		     uint64_t *io, uint64_t *locks, const char **why)
{
	const struct kvmm_zone *host = &ctx->zone[KVMM_TIER_HOST];
	const struct kvmm_list *pos;
	uint32_t i, j;

	list_for_each(pos, &ctx->kjobs) {
		const struct kvmm_kjob *job = list_entry(pos, struct kvmm_kjob, link);
		uint32_t locked = 0;

		for (i = 0; i < job->n; i++) {
			const struct kjob_val *v = &job->vals[i];

			if (!v->armed)
				continue;
			if (!job->put && !v->remote) {
				if (!v->node || !v->node->lock_ref ||
				    !(v->node->flags & KVMM_NODE_KEYED) ||
				    (job->pf && !(v->node->flags & KVMM_NODE_KREAD))) {
					*why = "a keyed get holds a value it has not locked";
					return -EUCLEAN;
				}
				locked++;
				if (!job->pf)	/* a prefetch holds frames too */
					continue;
			}
			for (j = 0; j < job->space->pages; j++) {
				int32_t pfn = job->frames[v->first + j];

				if (pfn < 0 || (uint32_t)pfn >= host->nr_pages ||
				    host->pages[pfn].state != KVMM_PAGE_IO ||
				    marks[KVMM_TIER_HOST][pfn]) {
					*why = "a keyed put's (or remote get's, or prefetch's) frame "
					       "is not in state IO, or is held twice";
					return -EUCLEAN;
				}
				marks[KVMM_TIER_HOST][pfn] = mark_io;
			}
			io[KVMM_TIER_HOST] += job->space->pages;
		}
		if (locked != job->nr_locks) {
			*why = "a keyed get miscounts its locks";
			return -EUCLEAN;
		}
		*locks += locked;
	}
	return 0;
}
