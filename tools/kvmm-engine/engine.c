// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/engine.c - the scheduler: SGLang's event loop over
 * kvmm's command ring, on a simulated clock.
 *
 * Each step is a prefill batch or a decode batch, as in SGLang's
 * event_loop_normal: requests that have arrived wait in a queue ordered
 * by the policy; get_new_batch_prefill admits from its head while the
 * step's token budget, max-running-requests and the KV memory allow
 * (free plus evictable pages, less a share of what running requests will
 * still decode); a prompt larger than the budget is prefilled in chunks,
 * each chunk committed so other requests can match it (SGLang's
 * cache_unfinished_req).  With nothing to prefill, every running request
 * decodes one token through one batched EXTEND; when that finds no
 * memory, requests are retracted in SGLang's retract_decode order (fewest
 * decoded tokens first, then the longest prompt), their KV committed to
 * the cache, and queued again at the front.  A finished request closes,
 * committing its prompt and output (or only its prompt when the output
 * token ids are not what a later turn sends).
 *
 * Every kvmm command travels through an in-process ring; the tokens a
 * command names are staged in the ring's data area, as an engine in
 * another process would write them.  Time is the step-time model's.
 *
 * The disk is on the same clock.  With an NVMe tier, background
 * writeback is off (host_wmark_low 0): a step that needs room on the full
 * host tier writes its coldest pages to NVMe itself (kvmm throttles the
 * writer rather than drop them), so what is written, and when, depends on
 * the traffic alone, never on how fast the I/O worker ran beside the
 * simulation, and every run of the same traffic is the same run.  On the
 * clock the writes go to a disk that writes at --nvme-write-gbps beside
 * the steps, as background writeback would; the pages it has not written
 * yet are dirty, and while they are more than a quarter of the host tier
 * (its default high watermark) the engine waits before its next step
 * (throttle_secs), as balance_dirty_pages() makes a writer that outruns
 * its disk wait.
 *
 * With lower tiers the engine knows what its queue will need: the first
 * --prefetch-depth waiting requests (as they arrive, and at each prefill
 * step in policy order) are PREFETCHed, at most --prefetch-budget pages
 * each, so their lower-tier prefix is on the device when they are
 * admitted.  On the clock those copies run one after another on a copy
 * engine beside the steps; a step that admits a request whose copy is not
 * over yet waits for it.  Admission counts the pages a PROMOTE will take
 * (those it can find now, and what the step has left): a request whose
 * promotion does not fit waits, rather than find no room and recompute.
 * --no-prefetch runs the engine as it was without both, to compare.
 *
 * A request that does not fit stops the step's admissions, as in SGLang;
 * with --lookahead N the next N behind it are tried, in free pages only
 * (prefill_admit_behind()), and each goes in only if it cannot delay the
 * head (backfill_allowed()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libkvmm.h>

#include "engine.h"

#define NONE		UINT32_MAX
#define RING_SQ		256

enum { R_PENDING, R_PARKED, R_WAITING, R_PREFILL, R_DECODE, R_DONE };

struct ereq {
	const struct wl_request *w;
	uint32_t *tok;		/* prompt, then output; while admitted */
	uint32_t seq;		/* kvmm sequence, or NONE */
	uint32_t input;		/* tokens whose KV the next prefill needs */
	uint32_t kvlen;		/* tokens with KV in the sequence */
	uint32_t decoded;	/* output tokens produced */
	uint32_t child, sibling;	/* later turns waiting for this one */
	uint32_t cached;	/* LOOKUP result, for lpm */
	uint32_t from_host;	/* of the last match, tokens promoted from the host */
	uint32_t from_nvme;	/* ... and from NVMe */
	uint32_t from_remote;	/* of from_host, fetched from the remote tier first */
	uint32_t pf_dev;	/* PREFETCH: tokens on the device when it was asked */
	uint32_t pf_host;	/* ... and of those after them, what it brought up from the host */
	uint32_t pf_nvme;	/* ... and from NVMe */
	double t_ready;		/* when its prefetch's copy is over */
	bool prefetched;	/* its PREFETCH was asked for */
	uint32_t first_match;	/* tokens matched at its first admission */
	uint32_t first_lower;	/* ... of those, from the host or NVMe tier */
	double t_arrive, t_first;
	uint8_t state;
	bool admitted;
};

struct eng {
	const struct workload *wl;
	const struct eng_opts *o;
	struct eng_report *rep;
	struct kvmm_ctx *ctx;
	struct kvmm_ring ring;
	uint64_t staged;
	uint32_t nsqe;
	int sqe_err;			/* ring_sqe() failed in this batch */
	struct kvmm_sqe spare;		/* stands in for the entry it gave none */
	struct ereq *r;
	uint32_t *waiting, nwait;
	uint32_t *running, nrun;	/* decoding */
	uint32_t chunked;		/* being prefilled in chunks */
	uint32_t next_arrival;
	double now;
	double *tpot;
	uint32_t ntpot;
	double sample_dt, next_sample;
	double disk_free;		/* when the simulated disk has written its queue */
	double copy_free;		/* when the copy engine has done its prefetches */
	uint64_t stats[NR_KVMM_STATS];
	uint64_t progress_ns;
	struct kvmm_extend_ent *ents;
	struct eng_job *jobs;		/* backfill_shadow()'s scratch */
};

/* A request that holds KV until it finishes: backfill_shadow()'s view. */
struct eng_job {
	uint32_t steps;			/* decode steps until it finishes */
	double back;			/* avail tokens its finish gives back */
};

/* ---- the ring ---- */

static uint64_t stage(struct eng *e, const uint32_t *tok, uint32_t n)
{
	uint64_t off = e->staged;

	memcpy((char *)e->ring.buf + off, tok, (size_t)n * sizeof(*tok));
	e->staged += ((uint64_t)n * sizeof(*tok) + 63) & ~63ull;
	return off;
}

static bool stage_fits(const struct eng *e, uint32_t n)
{
	return e->staged + (uint64_t)n * sizeof(uint32_t) + 64 <= e->ring.buf_size &&
	       e->nsqe < RING_SQ;
}

/*
 * The next entry of the batch being prepared.  Should the ring give none
 * (ring_sqe() failed), a spare that is never submitted stands in and the
 * error is kept for kv_run(), so callers may prepare unconditionally.
 */
static struct kvmm_sqe *sqe(struct eng *e)
{
	struct kvmm_sqe *s;
	int ret = ring_sqe(&e->ring, &s);

	if (ret) {
		if (!e->sqe_err)
			e->sqe_err = ret;
		memset(&e->spare, 0, sizeof(e->spare));
		return &e->spare;
	}
	e->nsqe++;
	return s;
}

/* Run what is prepared; results into @res (or the first error). */
static int kv_run(struct eng *e, int32_t *res)
{
	uint32_t n = e->nsqe;
	int ret, err = e->sqe_err;

	e->nsqe = 0;
	e->staged = 0;
	e->sqe_err = 0;
	ret = ring_run(&e->ring, n, res);	/* what did go in still runs */
	return err ? err : ret;
}

static int kv1(struct eng *e)
{
	int32_t res;
	int ret = kv_run(e, &res);

	return ret ? ret : res;
}

static int kv_stats(struct eng *e)
{
	struct kvmm_stats_snap *snap = e->ring.buf;
	int ret;

	kvmm_prep_stats(sqe(e), 0, 0, sizeof(*snap) + sizeof(e->stats));
	ret = kv1(e);
	if (ret < 0)
		return ret;
	memcpy(e->stats, snap + 1, sizeof(e->stats));
	return 0;
}

/* RETRACT: commit @n tokens (0: none), release, keep the sequence open */
static int kv_retract(struct eng *e, struct ereq *r, uint32_t n)
{
	uint64_t off = n ? stage(e, r->tok, n) : 0;

	kvmm_prep_retract(sqe(e), r->seq, 0, off, n);
	r->kvlen = 0;
	return kv1(e);
}

/* ---- scheduler pieces ---- */

/**
 * eng_chunk_len() - how much of a prefill fits this step
 * @need: tokens still to compute
 * @budget: tokens left in the step's budget
 * @chunk: chunked-prefill size, 0 for none
 * @page_size: tokens per page
 *
 * A prefill that does not finish stops on a page boundary, so what it
 * commits is whole pages.
 *
 * Return: tokens to compute now; 0 when none fit.
 */
uint32_t eng_chunk_len(uint32_t need, uint32_t budget, uint32_t chunk, uint32_t page_size)
{
	uint32_t c = need;

	if (!chunk)
		return need <= budget ? need : 0;
	if (c > budget)
		c = budget;
	if (c > chunk)
		c = chunk;
	if (c < need)
		c -= c % page_size;
	return c;
}

/*
 * SGLang's retract_decode order: the request that decoded least goes
 * first (it loses least work), among those the longest prompt (it frees
 * most).  Negative: @a is retracted before @b.
 */
int eng_retract_cmp(const struct eng_victim *a, const struct eng_victim *b)
{
	if (a->decoded != b->decoded)
		return a->decoded < b->decoded ? -1 : 1;
	if (a->input != b->input)
		return a->input > b->input ? -1 : 1;
	return 0;
}

static void event(struct eng *e, int type, uint32_t req, uint32_t a, uint32_t b)
{
	if (e->o->event)
		e->o->event(e->o->event_priv, type, req, a, b);
}

static uint64_t page_tokens(const struct eng *e, uint64_t pages)
{
	return pages * e->o->page_size;
}

/* What a request's output tokens are worth keeping: all, or none. */
static uint32_t commit_len(const struct eng *e, const struct ereq *r, uint32_t kvlen)
{
	if (e->o->no_cache)
		return 0;
	if (!e->wl->outputs_known && kvlen > r->w->prompt_len)
		return r->w->prompt_len;
	return kvlen;
}

static void enqueue(struct eng *e, uint32_t i, bool front)
{
	struct ereq *r = &e->r[i];

	r->state = R_WAITING;
	if (front) {
		memmove(e->waiting + 1, e->waiting, e->nwait * sizeof(*e->waiting));
		e->waiting[0] = i;
	} else {
		e->waiting[e->nwait] = i;
	}
	e->nwait++;
}

static int fill_tokens(struct eng *e, struct ereq *r);

/* LOOKUP @n tokens of @r's prompt on every tier into *@hits. */
static int lookup_tiers(struct eng *e, struct ereq *r, uint32_t n, struct kvmm_tier_hits *hits)
{
	uint64_t off = stage(e, r->tok, n), hoff = e->staged;
	struct kvmm_sqe *q;
	int ret;

	e->staged += 64;
	q = sqe(e);
	kvmm_prep_lookup(q, 0, 0, off, n);
	q->arg = KVMM_LOOKUP_TIERS;
	q->arg2 = hoff;
	ret = kv1(e);
	if (ret < 0)
		return ret;
	memcpy(hits, (char *)e->ring.buf + hoff, sizeof(*hits));
	return 0;
}

/*
 * A request joined the queue: PREFETCH the part of its prefix below the
 * device, at most --prefetch-budget pages, taking them as an allocation
 * would (the device is always full of cache here: KVMM_PREFETCH_RECLAIM).
 * The copy runs on the copy engine beside the steps, one prefetch after
 * another, and the request is not served before it is over (t_ready).
 */
static int prefetch(struct eng *e, struct ereq *r)
{
	const struct eng_opts *o = e->o;
	double tb = (double)eng_model_token_bytes(&o->model), start;
	uint32_t n = r->input - 1, lower, host, nvme, moved;
	struct kvmm_tier_hits hits;
	struct kvmm_sqe *q;
	int ret;

	if (!o->prefetch_budget || !o->host_pages || o->no_cache || o->remote ||
	    r->input <= o->page_size || r->prefetched)
		return 0;
	r->prefetched = true;
	ret = fill_tokens(e, r);
	if (!ret)
		ret = lookup_tiers(e, r, n, &hits);
	if (ret)
		return ret;
	lower = (hits.tokens[KVMM_TIER_HOST] + hits.tokens[KVMM_TIER_NVME]) / o->page_size;
	if (!lower)
		return 0;
	q = sqe(e);
	kvmm_prep_prefetch(q, 0, 0, stage(e, r->tok, n), n,
			   lower < o->prefetch_budget ? lower : o->prefetch_budget);
	q->arg2 = KVMM_PREFETCH_RECLAIM;
	ret = kv1(e);
	if (ret <= 0)
		return ret;
	moved = (uint32_t)ret * o->page_size;
	host = moved < hits.tokens[KVMM_TIER_HOST] ? moved : hits.tokens[KVMM_TIER_HOST];
	nvme = moved - host;
	r->pf_dev = hits.tokens[KVMM_TIER_DEVICE];
	r->pf_host = host;
	r->pf_nvme = nvme;
	start = e->copy_free > e->now ? e->copy_free : e->now;
	e->copy_free = start + host * tb / (o->host_gbps * 1e9) + nvme * tb / (o->nvme_gbps * 1e9);
	r->t_ready = e->copy_free;
	e->rep->prefetched_tokens += moved;
	return 0;
}

static int arrivals(struct eng *e)
{
	const struct workload *wl = e->wl;
	int ret;

	while (e->next_arrival < wl->nreq) {
		uint32_t i = e->next_arrival;
		const struct wl_request *w = &wl->reqs[i];
		double t = wl->has_time ? w->t_ms / 1000.0 : (double)i / e->o->rate;
		struct ereq *r = &e->r[i];

		if (t > e->now)
			break;
		e->next_arrival++;
		r->t_arrive = t;
		if (w->prev >= 0 && e->r[w->prev].state != R_DONE) {
			/* a later turn follows its previous one's answer */
			r->state = R_PARKED;
			r->sibling = e->r[w->prev].child;
			e->r[w->prev].child = i;
			continue;
		}
		enqueue(e, i, false);
		if (e->nwait <= e->o->prefetch_depth) {
			ret = prefetch(e, r);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* The head of the queue, in policy order: prefetch what is not yet. */
static int prefetch_head(struct eng *e)
{
	uint32_t k;
	int ret;

	for (k = 0; k < e->nwait && k < e->o->prefetch_depth; k++) {
		ret = prefetch(e, &e->r[e->waiting[k]]);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * The policy's order, except that with --max-wait a request which has
 * waited that long goes ahead of every younger one, the oldest first:
 * lpm alone passes over a prompt with nothing cached for as long as
 * requests with more keep arriving, under a burst until it is over.
 */
static int cmp_prio(const void *a, const void *b, void *priv)
{
	const struct eng *e = priv;
	const struct ereq *x = &e->r[*(const uint32_t *)a], *y = &e->r[*(const uint32_t *)b];
	double bound = e->o->max_wait;

	if (bound > 0) {
		bool ox = e->now - x->t_arrive >= bound, oy = e->now - y->t_arrive >= bound;

		if (ox != oy)
			return ox ? -1 : 1;
		if (ox && x->t_arrive != y->t_arrive)
			return x->t_arrive < y->t_arrive ? -1 : 1;
	}
	if (e->o->policy == ENG_LPM && x->cached != y->cached)
		return x->cached > y->cached ? -1 : 1;
	if (e->o->policy == ENG_PRIORITY && x->w->prio != y->w->prio)
		return x->w->prio > y->w->prio ? -1 : 1;
	return 0;
}

/* Stable insertion sort: queues are short and mostly in order already. */
static void sort_waiting(struct eng *e)
{
	uint32_t i, j, x;

	for (i = 1; i < e->nwait; i++) {
		x = e->waiting[i];
		for (j = i; j && cmp_prio(&x, &e->waiting[j - 1], e) < 0; j--)
			e->waiting[j] = e->waiting[j - 1];
		e->waiting[j] = x;
	}
}

/* The request's tokens, built when it is first needed (untimed work). */
static int fill_tokens(struct eng *e, struct ereq *r)
{
	if (r->tok)
		return 0;
	r->tok = malloc(((size_t)r->w->prompt_len + r->w->output_len) * sizeof(*r->tok));
	if (!r->tok)
		return -ENOMEM;
	workload_tokens(e->wl, r->w, r->tok);
	return 0;
}

/* lpm: how much of each waiting prompt is cached, without locking it */
static int lookup_waiting(struct eng *e)
{
	int32_t res[RING_SQ];
	uint32_t first = 0, i, k;
	int ret;

	while (first < e->nwait) {
		for (i = first; i < e->nwait; i++) {
			struct ereq *r = &e->r[e->waiting[i]];
			uint32_t n = r->input > 1 ? r->input - 1 : 1;

			ret = fill_tokens(e, r);
			if (ret)
				return ret;
			if (!stage_fits(e, n))
				break;
			kvmm_prep_lookup(sqe(e), 0, 0, stage(e, r->tok, n), n);
		}
		ret = kv_run(e, res);
		if (ret)
			return ret;
		for (k = first; k < i; k++)
			e->r[e->waiting[k]].cached = res[k - first] > 0 ? (uint32_t)res[k - first] : 0;
		first = i;
	}
	return 0;
}

/* @r finished: the later turns that waited for it join the queue. */
static int park_release(struct eng *e, struct ereq *r)
{
	uint32_t c = r->child, next;
	int ret = 0;

	for (; c != NONE; c = next) {
		next = e->r[c].sibling;
		if (e->r[c].t_arrive < e->now)
			e->r[c].t_arrive = e->now;
		enqueue(e, c, false);
		if (!ret && e->nwait <= e->o->prefetch_depth)
			ret = prefetch(e, &e->r[c]);
	}
	r->child = NONE;
	return ret;
}

static int finish(struct eng *e, uint32_t i)
{
	struct ereq *r = &e->r[i];
	uint32_t n = commit_len(e, r, r->kvlen);
	int ret;

	kvmm_prep_close(sqe(e), r->seq, 0, n ? stage(e, r->tok, n) : 0, n);
	ret = kv1(e);
	if (ret < 0)
		return ret;
	r->seq = NONE;
	if (e->o->remote && !e->o->remote_write && n) {	/* the committed pages */
		kvmm_prep_rpush(sqe(e), 0, 0, stage(e, r->tok, n), n);
		ret = kv1(e);
		if (ret > 0)
			e->rep->remote_pushed += (uint64_t)ret;
	}
	r->kvlen = 0;
	r->state = R_DONE;
	free(r->tok);
	r->tok = NULL;
	if (r->w->output_len > 1)
		e->tpot[e->ntpot++] = (e->now - r->t_first) / (r->w->output_len - 1);
	e->rep->completed++;
	event(e, ENG_EV_FINISH, i, 0, 0);
	return park_release(e, r);
}

/* A prefill ended: the request has its next token. */
static int prefill_done(struct eng *e, uint32_t i)
{
	struct ereq *r = &e->r[i];

	r->decoded++;
	if (r->decoded == 1) {
		r->t_first = e->now;
		e->rep->ttft[e->rep->nttft++] = e->now - r->t_arrive;
	}
	event(e, ENG_EV_FIRST, i, r->decoded, 0);
	if (r->decoded >= r->w->output_len)
		return finish(e, i);
	r->state = R_DECODE;
	e->running[e->nrun++] = i;
	return 0;
}

/*
 * Extend @r by @c tokens and commit what it has (SGLang's
 * cache_unfinished_req), in one round trip.  -ENOSPC: no memory.
 */
static int prefill_chunk(struct eng *e, uint32_t i, uint32_t c, double *flops)
{
	struct ereq *r = &e->r[i];
	uint32_t n = r->kvlen + c;
	int32_t res[2];
	int ret;

	kvmm_prep_extend(sqe(e), r->seq, c, 0);
	if (!e->o->no_cache)
		kvmm_prep_commit(sqe(e), r->seq, 0, stage(e, r->tok, n), n);
	ret = kv_run(e, res);
	if (ret)
		return ret;
	if (res[0])
		return res[0];
	if (!e->o->no_cache && res[1] < 0)
		return res[1];
	*flops += eng_prefill_flops(&e->o->model, r->kvlen, c);
	e->rep->prefill_tokens += c;
	r->kvlen = n;
	event(e, ENG_EV_CHUNK, i, c, e->o->no_cache ? 0 : (uint32_t)res[1]);
	return 0;
}

/*
 * One prefill step's batch as it is assembled: what is left of the token
 * budget and of the pool, the requests whose prompt is now complete, and
 * what the step costs.
 */
struct prefill_batch {
	uint32_t budget;		/* prompt tokens this step may still take */
	uint64_t avail;			/* pool tokens free or evictable, less reserve */
	uint32_t done[RING_SQ];		/* prompts finished this step */
	uint32_t ndone;
	double flops;
	double promote_secs;		/* lower-tier promotions, before compute */
	double prefetch_wait;		/* until its requests' prefetches are over */
	/* --lookahead's guard: backfill_allowed() */
	int64_t lack;			/* avail tokens the last refused request lacked */
	uint64_t ev_before;		/* evictable pages before the tried one's MATCH */
	bool blocked;			/* the head was refused; those behind backfill */
	bool checked;			/* the request being tried passed the guard */
	uint32_t shadow;		/* decode steps until the head fits */
	double extra;			/* avail tokens at the shadow it leaves */
	uint32_t steps;			/* the request being tried: its decode steps, */
	double use;			/* ... its want and the cache its MATCH locked */
};

/*
 * DOC: the guard of --lookahead (EASY backfilling)
 *
 * Past a head that does not fit, --lookahead tries the requests behind it.
 * Unguarded, what they take is part of the room the head waits for, and a
 * head can wait behind request after request.  The guard is EASY
 * backfilling, as HPC batch schedulers run it: it predicts when the head
 * will fit, and lets a request behind it in only if it cannot move that
 * time.  Everything is counted in the units admission counts, "avail"
 * tokens: pool tokens free or evictable less the decode reserve
 * (prefill_avail()).
 *
 * The head was refused lacking D avail tokens: what it wants (the tokens
 * it must compute or promote, prefetched pages on the device being part
 * of its match, plus the reserve for its output) less what the step had
 * left; for a promotion, also the pages it needs past the free and
 * evictable ones.  Requests admitted earlier in the step add their
 * reserve to D (the next steps count it).  A running request k has s_k
 * decode steps left and holds L_k tokens: each decode step costs the
 * pool 1 - reserve tokens while it runs, and when it finishes its L_k
 * tokens become cache and its reserve is let go: avail grows by
 * L_k + reserve * s_k.  The head's shadow S is the first number of decode
 * steps after which the growth covers D (with nothing left running the
 * head goes in alone anyway: S is then the last finish); the extra E is
 * the growth at S less D.
 *
 * A request j behind the head, whose prefill would give it its next token
 * and leave s_j decode steps, goes in only if its whole prompt fits this
 * step (a chunked prefill would hold the queue) and
 *  (a) s_j <= S: it has finished and given back all it took by the
 *      time the head fits; or
 *  (b) it takes no more than E: its want (tokens to compute or promote
 *      plus reserve), (1 - reserve) * S tokens it decodes by then, and the
 *      cached pages its MATCH locked (evictable before, not after).  E
 *      then shrinks by that much for the next request.
 * The prediction assumes nothing is retracted, counts a finishing
 * request's whole KV as given back, a prefix it shares with another
 * running request included, and counts decode steps, not time: the
 * prefill a request behind takes is a step the running requests do not
 * decode in.
 */

static int cmp_job(const void *a, const void *b)
{
	const struct eng_job *x = a, *y = b;

	return (x->steps > y->steps) - (x->steps < y->steps);
}

/* Decode steps @r has left after its next token (@next: a prefill gives it). */
static uint32_t steps_left(const struct ereq *r, bool next)
{
	uint32_t left = r->w->output_len - r->decoded;

	return next ? (left > 1 ? left - 1 : 0) : left;
}

/*
 * The head was refused lacking b->lack avail tokens: its shadow is the
 * first number of decode steps after which what the requests holding KV
 * give back covers that, and what requests admitted in this step will
 * hold back for their output (the next steps count it).
 */
static void backfill_shadow(struct eng *e, struct prefill_batch *b)
{
	double rs = e->o->decode_reserve, need = (double)b->lack, have = 0, gain = 0;
	uint32_t n = 0, k, d = 0;

	for (k = 0; k < e->nrun; k++) {
		const struct ereq *r = &e->r[e->running[k]];
		uint32_t s = steps_left(r, false);

		e->jobs[n++] = (struct eng_job){ s, r->kvlen + rs * s };
	}
	for (k = 0; k < b->ndone; k++) {
		const struct ereq *r = &e->r[b->done[k]];
		uint32_t s = steps_left(r, true);

		need += rs * s;
		e->jobs[n++] = (struct eng_job){ s, r->kvlen + rs * s };
	}
	qsort(e->jobs, n, sizeof(*e->jobs), cmp_job);
	for (k = 0;;) {
		while (k < n && e->jobs[k].steps <= d)
			gain += e->jobs[k++].back;
		have = gain - (1 - rs) * d * (n - k);
		if (have >= need || k == n)
			break;
		d = e->jobs[k].steps;
	}
	b->shadow = d;
	b->extra = have > need ? have - need : 0;
}

/*
 * May @r, behind the head, go in wanting @want avail tokens, with
 * @ev_after evictable pages left after its MATCH?  (a) or (b) of the DOC
 * above.
 */
static bool backfill_allowed(struct eng *e, struct prefill_batch *b, const struct ereq *r,
			     uint64_t want, uint64_t ev_after)
{
	uint64_t locked = b->ev_before > ev_after ? b->ev_before - ev_after : 0;

	b->steps = steps_left(r, true);
	b->use = (double)want + (double)page_tokens(e, locked) +
		 (1 - e->o->decode_reserve) * b->shadow;
	return b->steps <= b->shadow || b->use <= b->extra;
}

/*
 * Admission counts what a promotion will take.  Run the prepared LOOKUP
 * and MATCH with a STATS after them; PROMOTE only if the pages it will
 * take are there now (free, or cached and unlocked: what PROMOTE may
 * reclaim) and the tokens the prompt still needs on the device, promoted
 * or computed, fit what this step has left (unless nothing else runs).
 * @res: out, the LOOKUP's, MATCH's and PROMOTE's results.
 * Return: 0; 1 when it does not fit (the match is let go, the request
 * waits); a negative errno.
 */
static int admit_promotion(struct eng *e, struct ereq *r, uint32_t n,
			   const struct kvmm_tier_hits *hits, struct prefill_batch *b,
			   bool alone, int32_t *res)
{
	const struct eng_opts *o = e->o;
	uint64_t soff = e->staged, want, room;
	uint32_t lower;
	const uint64_t *st;
	int32_t res2[3];
	int ret;

	e->staged += sizeof(struct kvmm_stats_snap) + sizeof(e->stats);
	kvmm_prep_stats(sqe(e), 0, soff, sizeof(struct kvmm_stats_snap) + sizeof(e->stats));
	ret = kv_run(e, res2);
	if (ret)
		return ret;
	res[0] = res2[0];
	res[1] = res2[1];
	res[2] = res2[1];	/* no promotion */
	if (res[0] < 0 || res[1] < 0 || res2[2] < 0)
		return res[0] < 0 ? res[0] : res[1] < 0 ? res[1] : res2[2];
	lower = (hits->tokens[KVMM_TIER_HOST] + hits->tokens[KVMM_TIER_NVME]) / o->page_size;
	if (!lower)
		return 0;
	st = (const uint64_t *)((char *)e->ring.buf + soff + sizeof(struct kvmm_stats_snap));
	room = st[KVMM_STAT_PAGES_FREE] + st[KVMM_STAT_PAGES_EVICTABLE];
	want = r->input - (uint32_t)res[1] +
	       (uint64_t)((r->w->output_len - r->decoded) * o->decode_reserve);
	if (lower > room || (!alone && want > b->avail)) {
		b->lack = (int64_t)want - (int64_t)b->avail;
		if (lower > room && (int64_t)page_tokens(e, lower - room) > b->lack)
			b->lack = (int64_t)page_tokens(e, lower - room);
		return 1;
	}
	if (b->blocked && o->lookahead_guard) {
		if (!backfill_allowed(e, b, r, want, st[KVMM_STAT_PAGES_EVICTABLE]))
			return 1;
		b->checked = true;
	}
	kvmm_prep_promote(sqe(e), r->seq, 0, stage(e, r->tok, n), n);
	res[2] = kv1(e);
	return 0;
}

/*
 * MATCH @r's prompt; with lower tiers, in the same batch LOOKUP how much
 * sits on each tier and PROMOTE it (which may complete later, from the
 * I/O worker).  *@m: tokens the sequence holds now; the copy's estimated
 * time is added to @b's promotion time, host and NVMe at their
 * bandwidths, and its prefetch's copy, if still running, to its wait.
 * Admission counts the promotion (admit_promotion()) unless
 * --no-prefetch: then a PROMOTE the device has no room for is a miss,
 * those tokens recomputed.  Return: 0; 1 when the promotion does not fit
 * this step (@alone: nothing else runs, it goes in anyway); a negative
 * errno.
 */
static int match(struct eng *e, struct ereq *r, uint32_t *m, struct prefill_batch *b,
		 bool alone)
{
	const struct eng_opts *o = e->o;
	uint32_t n = r->input - 1, promoted, host, nvme, fetched = 0, pf;
	struct kvmm_tier_hits *hits;
	uint64_t off = stage(e, r->tok, n), hoff;
	double tb = (double)eng_model_token_bytes(&o->model);
	struct kvmm_sqe *q;
	int32_t res[3];
	int ret;

	r->from_host = r->from_nvme = r->from_remote = 0;
	if (!o->host_pages) {
		kvmm_prep_match(sqe(e), r->seq, 0, off, n);
		ret = kv1(e);
		if (ret < 0)
			return ret;
		*m = (uint32_t)ret;
		return 0;
	}
	/*
	 * With a remote tier: what the cluster has past the local cache, to the
	 * host tier first.  RFETCH completes later (the I/O worker waits on the
	 * network), so the match goes in the next batch, after it.
	 */
	if (o->remote) {
		kvmm_prep_rfetch(sqe(e), 0, 0, off, n);
		ret = kv1(e);		/* a cluster that fails is a miss, not an error */
		fetched = ret > 0 ? (uint32_t)ret : 0;
		off = stage(e, r->tok, n);
	}
	hoff = e->staged;
	e->staged += 64;
	hits = (struct kvmm_tier_hits *)((char *)e->ring.buf + hoff);
	q = sqe(e);
	kvmm_prep_lookup(q, 0, 0, off, n);
	q->arg = KVMM_LOOKUP_TIERS;
	q->arg2 = hoff;
	kvmm_prep_match(sqe(e), r->seq, 0, off, n);
	if (o->admit_promotions) {
		ret = admit_promotion(e, r, n, hits, b, alone, res);
		if (ret)
			return ret;
	} else {
		kvmm_prep_promote(sqe(e), r->seq, 0, off, n);
		ret = kv_run(e, res);
		if (ret)
			return ret;
	}
	if (res[0] < 0 || res[1] < 0)
		return res[0] < 0 ? res[0] : res[1];
	if (res[2] == -ENOSPC) {
		e->rep->promote_failed++;
		res[2] = res[1];
	}
	if (res[2] < 0)
		return res[2];
	*m = (uint32_t)res[2];
	promoted = (uint32_t)(res[2] - res[1]);
	host = hits->tokens[KVMM_TIER_HOST] < promoted ? hits->tokens[KVMM_TIER_HOST] : promoted;
	nvme = promoted - host;
	r->from_host = host;
	r->from_nvme = nvme;
	r->from_remote = fetched < host ? fetched : host;
	b->promote_secs += host * tb / (o->host_gbps * 1e9) + nvme * tb / (o->nvme_gbps * 1e9) +
			   r->from_remote * tb / (o->remote_gbps * 1e9);
	if (o->admit_promotions)	/* the promoted pages came out of the pool */
		b->avail = b->avail > promoted ? b->avail - promoted : 0;
	/* what its prefetch brought up, found on the device: from those tiers */
	pf = (uint32_t)res[1] > r->pf_dev ? (uint32_t)res[1] - r->pf_dev : 0;
	if (pf > r->pf_host + r->pf_nvme)
		pf = r->pf_host + r->pf_nvme;
	r->from_host += pf < r->pf_host ? pf : r->pf_host;
	r->from_nvme += pf > r->pf_host ? pf - r->pf_host : 0;
	if (r->t_ready - e->now > b->prefetch_wait)
		b->prefetch_wait = r->t_ready - e->now;
	return 0;
}

/* Tokens running requests may still decode, the share held back for them. */
static uint64_t decode_reserved(const struct eng *e)
{
	double t = 0;
	uint32_t k;

	for (k = 0; k < e->nrun; k++) {
		const struct ereq *r = &e->r[e->running[k]];

		t += r->w->output_len - r->decoded;
	}
	return (uint64_t)(t * e->o->decode_reserve);
}


/* Pool tokens a prefill may take: free or evictable, less the decode reserve. */
static uint64_t prefill_avail(struct eng *e)
{
	uint64_t avail, reserved;

	/* e->stats: read at the end of the last step; nothing ran since */
	avail = page_tokens(e, e->stats[KVMM_STAT_PAGES_FREE] +
			       e->stats[KVMM_STAT_PAGES_EVICTABLE]);
	reserved = decode_reserved(e);
	return avail > reserved ? avail - reserved : 0;
}

/* @c tokens went into the batch: take them from the budget and the pool. */
static void prefill_take(struct prefill_batch *b, uint32_t c)
{
	b->budget -= c;
	b->avail = b->avail > c ? b->avail - c : 0;
}

/*
 * The chunked request goes first: its next chunk, and it is done when its
 * whole prompt is in.  -ENOSPC leaves it for the next step.
 */
static int prefill_chunked(struct eng *e, struct prefill_batch *b)
{
	const struct eng_opts *o = e->o;
	uint32_t i = e->chunked;
	struct ereq *r = &e->r[i];
	uint32_t c = eng_chunk_len(r->input - r->kvlen, b->budget, o->chunk, o->page_size);
	int ret;

	ret = c ? prefill_chunk(e, i, c, &b->flops) : 0;
	if (ret && ret != -ENOSPC)
		return ret;
	if (!ret && c) {
		prefill_take(b, c);
		if (r->kvlen == r->input) {
			e->chunked = NONE;
			b->done[b->ndone++] = i;
		}
	}
	return 0;
}

/* waiting[@k] goes in with @m tokens matched: count its hits. */
static void prefill_admitted(struct eng *e, uint32_t k, uint32_t m, uint32_t need)
{
	uint32_t i = e->waiting[k];
	struct ereq *r = &e->r[i];

	memmove(e->waiting + k, e->waiting + k + 1, (--e->nwait - k) * sizeof(*e->waiting));
	r->state = R_PREFILL;
	e->rep->saved_tokens += m;
	if (!r->admitted) {
		r->admitted = true;
		r->first_match = m;
		r->first_lower = r->from_host + r->from_nvme;
		e->rep->cached_tokens += m;
		e->rep->host_tokens += r->from_host;
		e->rep->nvme_tokens += r->from_nvme;
		e->rep->remote_tokens += r->from_remote;
		e->rep->hit_blocks += m / WL_BLOCK;
	}
	event(e, ENG_EV_ADMIT, i, m, need);
}

/*
 * Try waiting[@k] (0: the head of the queue): open its sequence, match
 * its prefix, and prefill its first chunk if the budget and the pool
 * allow.  Return: 1 if it went in, 0 if it did not (its match let go), or
 * a negative errno.
 */
static int prefill_admit(struct eng *e, struct prefill_batch *b, uint32_t k)
{
	const struct eng_opts *o = e->o;
	uint32_t i = e->waiting[k], m = 0, need, c;
	/* with nothing else to run, the head goes in if it fits at all */
	bool alone = !b->ndone && !e->nrun && e->chunked == NONE;
	struct ereq *r = &e->r[i];
	uint64_t want;
	int ret;

	ret = fill_tokens(e, r);
	if (ret)
		return ret;
	if (r->seq == NONE) {
		kvmm_prep_open(sqe(e), 0);
		ret = kv1(e);
		if (ret < 0)
			return ret;
		r->seq = (uint32_t)ret;
	}
	b->checked = false;
	if (!o->no_cache && r->input > 1) {
		ret = match(e, r, &m, b, alone);
		if (ret < 0)
			return ret;
		if (ret)
			goto out_retract;	/* its promotion does not fit: not this step */
	}
	need = r->input - m;
	want = need + (uint64_t)((r->w->output_len - r->decoded) * o->decode_reserve);
	/* without chunking, a prompt over the budget goes alone, whole */
	c = eng_chunk_len(need, !o->chunk && !b->ndone && need > b->budget ? need : b->budget,
			  o->chunk, o->page_size);
	if (!c || (want > b->avail && !alone)) {
		b->lack = (int64_t)want - (int64_t)b->avail;
		goto out_retract;	/* not this step: let go of the match */
	}
	if (b->blocked && o->lookahead_guard) {
		if (c < need)
			goto out_retract;	/* its next chunks would hold the queue */
		if (!b->checked) {
			ret = kv_stats(e);
			if (ret)
				return ret;
			if (!backfill_allowed(e, b, r, want, e->stats[KVMM_STAT_PAGES_EVICTABLE]))
				goto out_retract;
		}
	}
	r->kvlen = m;
	ret = prefill_chunk(e, i, c, &b->flops);
	if (ret == -ENOSPC) {
		b->lack = (int64_t)want - (int64_t)b->avail;
		if (b->lack <= 0)
			b->lack = o->page_size;	/* the pool had less than it said */
		goto out_retract;
	}
	if (ret)
		return ret;
	if (b->blocked && o->lookahead_guard && b->steps > b->shadow)
		b->extra -= b->use;	/* (b): it holds that at the shadow */
	prefill_admitted(e, k, m, need);
	prefill_take(b, c);
	if (c < need)
		e->chunked = i;
	else
		b->done[b->ndone++] = i;
	return 1;

out_retract:
	ret = kv_retract(e, r, 0);
	return ret < 0 ? ret : 0;
}

/*
 * --lookahead: the head does not fit this step; try waiting[@k], behind
 * it, but only in the pages that are free now (less the decode reserve),
 * never in cache that reclaim would have to evict, so the prefixes lpm
 * ordered the queue by stay cached.  Without it one request whose prompt
 * or promotion does not fit holds the whole queue, free pages and all,
 * until running requests finish, as SGLang's get_new_batch_prefill()
 * stops at the first request that finds no room.  The price: the free
 * pages a request behind takes are part of the room the head waits for,
 * and more requests run at once, so more of the cache is reclaimed later;
 * the guard (backfill_allowed()) keeps it from taking what the head will
 * need, unless --no-lookahead-guard.  With --lookahead-evict it may take
 * cached pages too, as the head would.
 */
static int prefill_admit_behind(struct eng *e, struct prefill_batch *b, uint32_t k)
{
	uint64_t avail = b->avail, room, reserved;
	int ret;

	ret = kv_stats(e);
	if (ret)
		return ret;
	b->ev_before = e->stats[KVMM_STAT_PAGES_EVICTABLE];
	if (e->o->lookahead_evict)
		return prefill_admit(e, b, k);
	room = page_tokens(e, e->stats[KVMM_STAT_PAGES_FREE]);
	reserved = decode_reserved(e);
	room = room > reserved ? room - reserved : 0;
	if (room >= avail)
		return prefill_admit(e, b, k);
	b->avail = room;
	ret = prefill_admit(e, b, k);
	b->avail = avail - (room - b->avail);	/* what it took, from the step's */
	return ret;
}

/*
 * Charge the step: the wait for its requests' prefetches still copying,
 * then promotions (not overlapped with the compute),
 * then the prefill compute, then finish the prompts that completed.
 * Return: 1 if a prefill step ran, 0 if nothing was computed, or a
 * negative errno.
 */
static int prefill_charge(struct eng *e, struct prefill_batch *b)
{
	uint32_t k;
	int ret;

	e->now += b->prefetch_wait + b->promote_secs;
	e->rep->promote_secs += b->promote_secs;
	e->rep->prefetch_wait_secs += b->prefetch_wait;
	if (b->flops == 0)
		return 0;
	e->now += eng_prefill_secs(&e->o->model, b->flops);
	e->rep->prefill_steps++;
	for (k = 0; k < b->ndone; k++) {
		ret = prefill_done(e, b->done[k]);
		if (ret)
			return ret;
	}
	return 1;
}

/*
 * get_new_batch_prefill(): the chunked request first, then the waiting
 * queue in policy order; past a request that does not fit, up to
 * --lookahead more, in free pages only (prefill_admit_behind()), where
 * the head's shadow allows (backfill_shadow()).
 * Return: 1 if a prefill step ran, 0 if there was nothing to prefill, or
 * a negative errno.
 */
static int step_prefill(struct eng *e)
{
	const struct eng_opts *o = e->o;
	struct prefill_batch b = { .budget = o->max_prefill_tokens };
	uint32_t k = 0;		/* requests passed over this step */
	int ret;

	if (!e->nwait && e->chunked == NONE)
		return 0;
	if (e->chunked == NONE && e->nrun >= o->max_running)
		return 0;
	b.avail = prefill_avail(e);
	if (e->chunked != NONE) {
		ret = prefill_chunked(e, &b);
		if (ret)
			return ret;
	}
	if (o->policy == ENG_LPM && e->nwait <= o->lpm_max_queue && e->chunked == NONE &&
	    (b.avail >= o->page_size || !e->nrun)) {
		ret = lookup_waiting(e);
		if (ret)
			return ret;
	}
	if (o->policy != ENG_FCFS)
		sort_waiting(e);
	ret = prefetch_head(e);
	if (ret)
		return ret;
	while (e->nwait > k && e->chunked == NONE && b.budget && b.ndone < RING_SQ &&
	       e->nrun + b.ndone < o->max_running) {
		ret = k ? prefill_admit_behind(e, &b, k) : prefill_admit(e, &b, 0);
		if (ret < 0)
			return ret;
		if (ret)
			continue;
		if (!k && o->lookahead) {
			b.blocked = true;	/* the head: those behind it backfill */
			if (o->lookahead_guard)
				backfill_shadow(e, &b);
		}
		if (++k > o->lookahead)
			break;
	}
	return prefill_charge(e, &b);
}

static int cmp_victim(const void *a, const void *b, void *priv)
{
	const struct eng *e = priv;
	const struct ereq *x = &e->r[*(const uint32_t *)a], *y = &e->r[*(const uint32_t *)b];
	struct eng_victim vx = { x->decoded, x->w->prompt_len };
	struct eng_victim vy = { y->decoded, y->w->prompt_len };

	return eng_retract_cmp(&vx, &vy);
}

/* retract_decode(): the first victim in SGLang's order goes back to the queue */
static int retract_one(struct eng *e)
{
	uint32_t best = 0, k, i;
	struct ereq *r;
	int ret;

	for (k = 1; k < e->nrun; k++)
		if (cmp_victim(&e->running[k], &e->running[best], e) < 0)
			best = k;
	i = e->running[best];
	r = &e->r[i];
	ret = kv_retract(e, r, commit_len(e, r, r->kvlen));
	if (ret < 0)
		return ret;
	memmove(e->running + best, e->running + best + 1,
		(--e->nrun - best) * sizeof(*e->running));
	r->input = r->w->prompt_len + r->decoded;
	e->rep->retractions++;
	event(e, ENG_EV_RETRACT, i, r->decoded, 0);
	enqueue(e, i, true);
	return 0;
}

/* One token for every running request, in one batched EXTEND. */
static int step_decode(struct eng *e)
{
	uint64_t ctx = 0;
	uint32_t k, kept;
	int ret;

	for (;;) {
		for (k = 0; k < e->nrun; k++)
			e->ents[k] = (struct kvmm_extend_ent){ e->r[e->running[k]].seq, 1 };
		memcpy(e->ring.buf, e->ents, e->nrun * sizeof(*e->ents));
		kvmm_prep_extend_batch(sqe(e), 0, 0, e->nrun, 0);
		ret = kv1(e);
		if (ret != -ENOSPC)
			break;
		if (e->nrun == 1) {
			fprintf(stderr, "%s: request %u cannot decode: the pool is full\n",
				tool_name, e->running[0]);
			return -ENOSPC;
		}
		ret = retract_one(e);
		if (ret)
			return ret;
	}
	if (ret)
		return ret;
	for (k = 0; k < e->nrun; k++)
		ctx += e->r[e->running[k]].kvlen + 1;
	e->now += eng_decode_secs(&e->o->model, e->nrun, ctx);
	e->rep->decode_steps++;
	for (k = 0, kept = 0; k < e->nrun; k++) {
		uint32_t i = e->running[k];
		struct ereq *r = &e->r[i];

		r->kvlen++;
		r->decoded++;
		if (r->decoded >= r->w->output_len) {
			ret = finish(e, i);
			if (ret)
				return ret;
		} else {
			e->running[kept++] = i;
		}
	}
	e->nrun = kept;
	return 1;
}

/* ---- what the run looked like ---- */

static void sample(struct eng *e, bool force)
{
	struct eng_report *rep = e->rep;
	struct eng_sample *s;
	const uint64_t *st = e->stats;
	uint32_t k;

	if (!force && e->now < e->next_sample)
		return;
	if (rep->nsamples == ENG_MAX_SAMPLES) {
		/* full: keep every other point, sample half as often */
		for (k = 0; k < ENG_MAX_SAMPLES / 2; k++)
			rep->samples[k] = rep->samples[2 * k + 1];
		rep->nsamples = ENG_MAX_SAMPLES / 2;
		e->sample_dt *= 2;
	}
	s = &rep->samples[rep->nsamples++];
	s->t = e->now;
	s->done = rep->completed;
	s->hit_rate = rep->prompt_tokens ? (double)rep->cached_tokens / (double)rep->prompt_tokens : 0;
	s->free = (uint32_t)st[KVMM_STAT_PAGES_FREE];
	s->owned = (uint32_t)st[KVMM_STAT_PAGES_OWNED];
	s->cached = (uint32_t)st[KVMM_STAT_PAGES_CACHED];
	s->evictable = (uint32_t)st[KVMM_STAT_PAGES_EVICTABLE];
	e->next_sample = e->now + e->sample_dt;
}

static void peaks(struct eng *e)
{
	struct eng_report *rep = e->rep;
	const uint64_t *st = e->stats;
	uint32_t prot = (uint32_t)(st[KVMM_STAT_PAGES_CACHED] - st[KVMM_STAT_PAGES_EVICTABLE]);

#define PEAK(f, v)	do { if ((v) > rep->f) rep->f = (v); } while (0)
	PEAK(peak_owned, (uint32_t)st[KVMM_STAT_PAGES_OWNED]);
	PEAK(peak_cached, (uint32_t)st[KVMM_STAT_PAGES_CACHED]);
	PEAK(peak_evictable, (uint32_t)st[KVMM_STAT_PAGES_EVICTABLE]);
	PEAK(peak_protected, prot);
	PEAK(max_running_seen, e->nrun);
#undef PEAK
	if (st[KVMM_STAT_PAGES_FREE] < rep->peak_free_min)
		rep->peak_free_min = (uint32_t)st[KVMM_STAT_PAGES_FREE];
}

static void progress(struct eng *e, bool last)
{
	const struct eng_report *rep = e->rep;
	uint64_t t = now_ns();
	uint32_t k, w = 30, fill;

	if (!e->o->progress || (!last && t - e->progress_ns < 100000000ull))
		return;
	e->progress_ns = t;
	fill = rep->requests ? (uint32_t)((uint64_t)w * rep->completed / rep->requests) : w;
	fputs("\r[", stderr);
	for (k = 0; k < w; k++)
		fputc(k < fill ? '#' : '.', stderr);
	fprintf(stderr, "] %u/%u requests  t=%.1f s  hit %.4f ", rep->completed, rep->requests,
		e->now, rep->prompt_tokens ? (double)rep->cached_tokens / (double)rep->prompt_tokens : 0.0);
	if (last)
		fputc('\n', stderr);
}

/* ---- the loop ---- */

static int setup(struct eng *e, const struct workload *wl, const struct eng_opts *o,
		 struct eng_report *rep)
{
	struct kvmm_params p;
	struct kvmm_ring_params rp = { .sq_entries = RING_SQ };
	uint64_t pool = (uint64_t)o->device_pages * o->page_size;
	uint32_t i, max_len = (wl->max_seq_len + o->page_size - 1) / o->page_size * o->page_size;
	int ret;

	for (i = 0; i < wl->nreq; i++)
		if ((uint64_t)wl->reqs[i].prompt_len + wl->reqs[i].output_len > pool) {
			fprintf(stderr, "%s: request %u needs %u tokens of KV; the pool holds %llu "
				"(%u pages of %u): raise --device-pages\n", tool_name, i,
				wl->reqs[i].prompt_len + wl->reqs[i].output_len,
				(unsigned long long)pool, o->device_pages, o->page_size);
			return -ENOSPC;
		}
	/*
	 * The engine computes no attention: kvmm gets a stand-in per token,
	 * and the model's real KV bytes per token size the pool
	 * (--device-mem) and price the steps.
	 */
	p = tool_params(o->page_size, o->device_pages, o->max_running + RING_SQ + 1, max_len);
	p.evict_policy = o->evict;
	p.backend = "mock";
	if (!o->no_cache && o->host_pages) {
		p.host_pages = o->host_pages;
		p.host_node = KVMM_NODE_NEAREST;
		p.write_policy = o->write_policy;
		p.nvme_pages = o->nvme_pages;
		p.nvme_path = o->nvme_file;
		p.remote = o->remote;
		p.remote_salt = o->remote_salt;
		p.remote_write = o->remote_write;
		if (o->nvme_pages) {	/* the writer writes: see the DOC above */
			p.host_wmark_low = 0;
			p.host_wmark_high = 1;
		}
		/* every run starts cold, so runs (and --compare, --plot) compare */
		if (o->nvme_file && unlink(o->nvme_file) && errno != ENOENT) {
			fprintf(stderr, "%s: cannot empty %s: %s\n", tool_name, o->nvme_file,
				strerror(errno));
			return -errno;
		}
	}
	ret = kvmm_create(&p, &e->ctx);
	if (ret) {
		fprintf(stderr, "%s: kvmm_create: %s\n", tool_name, strerror(-ret));
		return ret;
	}
	/* room to stage a batch of lookups, or a whole request's tokens twice */
	rp.buf_size = (uint64_t)max_len * 8 + (1u << 20);
	if (rp.buf_size < ((uint64_t)o->max_running + 1) * sizeof(struct kvmm_extend_ent))
		rp.buf_size = ((uint64_t)o->max_running + 1) * sizeof(struct kvmm_extend_ent);
	ret = kvmm_ring_init(e->ctx, &rp, &e->ring);
	if (ret) {
		fprintf(stderr, "%s: kvmm_ring_init: %s\n", tool_name, strerror(-ret));
		kvmm_destroy(e->ctx);
		return ret;
	}
	e->r = calloc(wl->nreq, sizeof(*e->r));
	e->waiting = malloc(wl->nreq * sizeof(*e->waiting));
	e->running = malloc(((size_t)o->max_running + 1) * sizeof(*e->running));
	e->ents = malloc(((size_t)o->max_running + 1) * sizeof(*e->ents));
	e->jobs = malloc(((size_t)o->max_running + RING_SQ + 1) * sizeof(*e->jobs));
	e->tpot = malloc(wl->nreq * sizeof(*e->tpot));
	rep->ttft = malloc(wl->nreq * sizeof(*rep->ttft));
	rep->slow = malloc(wl->nreq * sizeof(*rep->slow));
	if (!e->r || !e->waiting || !e->running || !e->ents || !e->jobs || !e->tpot ||
	    !rep->ttft || !rep->slow)
		return -ENOMEM;
	for (i = 0; i < wl->nreq; i++) {
		e->r[i] = (struct ereq){ .w = &wl->reqs[i], .seq = NONE, .child = NONE,
					 .sibling = NONE, .input = wl->reqs[i].prompt_len };
		rep->blocks += (wl->reqs[i].prompt_len + WL_BLOCK - 1) / WL_BLOCK;
	}
	rep->requests = wl->nreq;
	rep->prompt_tokens = wl->prompt_tokens;
	rep->output_tokens = wl->output_tokens;
	rep->peak_free_min = o->device_pages;
	e->chunked = NONE;
	ret = kv_stats(e);
	if (ret)
		return ret;
	e->sample_dt = wl->has_time && wl->nreq ?
		       wl->reqs[wl->nreq - 1].t_ms / 1000.0 / (ENG_MAX_SAMPLES / 2) :
		       (double)wl->nreq / o->rate / (ENG_MAX_SAMPLES / 2);
	if (!(e->sample_dt > 0))
		e->sample_dt = 0.01;
	return 0;
}

static void teardown(struct eng *e)
{
	uint32_t i;

	if (e->r)
		for (i = 0; i < e->wl->nreq; i++)
			free(e->r[i].tok);
	free(e->r);
	free(e->waiting);
	free(e->running);
	free(e->ents);
	free(e->jobs);
	free(e->tpot);
	if (e->ctx) {
		kvmm_ring_exit(&e->ring);
		kvmm_destroy(e->ctx);
	}
}

static int cmp_slow(const void *a, const void *b)
{
	const struct eng_slow *x = a, *y = b;

	if (x->ttft != y->ttft)
		return x->ttft > y->ttft ? -1 : 1;
	return x->req < y->req ? -1 : x->req > y->req;
}

/* The requests whose TTFT is at or above the p99, slowest first. */
static void summarize_slow(struct eng *e)
{
	struct eng_report *rep = e->rep;
	uint32_t i;

	for (i = 0; i < e->wl->nreq; i++) {
		const struct ereq *r = &e->r[i];

		if (!r->decoded || r->t_first - r->t_arrive < rep->ttft_p99)
			continue;
		rep->slow[rep->nslow++] = (struct eng_slow){
			.req = i, .prompt = r->w->prompt_len, .cached = r->first_match,
			.lower = r->first_lower,
			.arrive = r->t_arrive, .ttft = r->t_first - r->t_arrive,
		};
	}
	qsort(rep->slow, rep->nslow, sizeof(*rep->slow), cmp_slow);
}

static void summarize(struct eng *e)
{
	struct eng_report *rep = e->rep;
	double sum = 0;
	uint32_t k;

	rep->sim_secs = e->now;
	rep->evicted_pages = e->stats[KVMM_STAT_EVICT_PAGES];
	rep->host_demoted = e->stats[KVMM_STAT_HOST_DEMOTE_PAGES];
	rep->nvme_demoted = e->stats[KVMM_STAT_NVME_DEMOTE_PAGES];
	rep->wt_pages = e->stats[KVMM_STAT_WT_PAGES];
	rep->free_demoted = e->stats[KVMM_STAT_DEMOTE_FREE_PAGES];
	rep->prefetch_hit_tokens = e->stats[KVMM_STAT_PREFETCH_HITS] * e->o->page_size;
	if (e->o->remote_write)	/* kvmm wrote them on its own: its count */
		rep->remote_pushed = e->stats[KVMM_STAT_REMOTE_PUSH_TOKENS] +
				     e->stats[KVMM_STAT_REMOTE_DEMOTE_PAGES] * e->o->page_size;
	rep->host_copied = rep->host_demoted - rep->free_demoted + rep->wt_pages;
	rep->steps = rep->prefill_steps + rep->decode_steps;
	sort_double(rep->ttft, rep->nttft);
	for (k = 0; k < rep->nttft; k++)
		sum += rep->ttft[k];
	rep->ttft_mean = rep->nttft ? sum / rep->nttft : 0;
	rep->ttft_p50 = percentile(rep->ttft, rep->nttft, 0.50);
	rep->ttft_p99 = percentile(rep->ttft, rep->nttft, 0.99);
	sort_double(e->tpot, e->ntpot);
	for (sum = 0, k = 0; k < e->ntpot; k++)
		sum += e->tpot[k];
	rep->tpot_mean = e->ntpot ? sum / e->ntpot : 0;
	rep->tpot_p50 = percentile(e->tpot, e->ntpot, 0.50);
	rep->tpot_p99 = percentile(e->tpot, e->ntpot, 0.99);
	rep->throughput = e->now > 0 ? (double)rep->output_tokens / e->now : 0;
	summarize_slow(e);
}

/**
 * eng_run() - serve a workload through kvmm
 * @wl: the requests
 * @o: options (eng_opts_default() first)
 * @rep: out; eng_report_free() it
 *
 * Return: 0; -ENOSPC when a request can never fit (said on stderr);
 * -EUCLEAN when kvmm_check() fails at the end; another negative errno
 * from kvmm.
 */
/*
 * The step that began at @t0 ended: the NVMe writes it made (since
 * @written pages) join the disk's queue, and the engine waits while more
 * than a quarter of the host tier is dirty (see the DOC above).
 */
static void disk_wait(struct eng *e, double t0, uint64_t written)
{
	const struct eng_opts *o = e->o;
	double page_secs = (double)o->page_size * (double)eng_model_token_bytes(&o->model) /
			   (o->nvme_write_gbps * 1e9);
	uint64_t pages = e->stats[KVMM_STAT_THROTTLE_PAGES] - written;
	double limit = (double)(o->host_pages / 4) * page_secs;

	if (!pages)
		return;
	e->rep->throttle_pages += pages;
	e->disk_free = (e->disk_free > t0 ? e->disk_free : t0) + (double)pages * page_secs;
	if (e->disk_free - e->now <= limit)
		return;
	e->rep->throttle_secs += e->disk_free - e->now - limit;
	e->now = e->disk_free - limit;
}

int eng_run(const struct workload *wl, const struct eng_opts *o, struct eng_report *rep)
{
	struct eng e = { .wl = wl, .o = o, .rep = rep };
	uint64_t t0 = now_ns(), written;
	double step0;
	int ret;

	memset(rep, 0, sizeof(*rep));
	ret = setup(&e, wl, o, rep);
	while (!ret && rep->completed < wl->nreq) {
		step0 = e.now;
		written = e.stats[KVMM_STAT_THROTTLE_PAGES];
		ret = arrivals(&e);	/* a prefetch's demotions: this step's writes */
		if (!ret)
			ret = step_prefill(&e);
		if (ret == 0 && e.nrun)
			ret = step_decode(&e);
		if (ret < 0)
			break;
		if (ret == 0) {
			/* idle: nothing fits or nothing is here; on to the next arrival */
			if (e.nwait || e.chunked != NONE) {
				fprintf(stderr, "%s: request %u cannot be admitted with nothing "
					"running\n", tool_name, e.nwait ? e.waiting[0] : e.chunked);
				ret = -ENOSPC;
				break;
			}
			if (e.next_arrival >= wl->nreq) {
				fprintf(stderr, "%s: %u requests never became ready\n", tool_name,
					wl->nreq - rep->completed);
				ret = -EDEADLK;
				break;
			}
			e.now = wl->has_time ? wl->reqs[e.next_arrival].t_ms / 1000.0 :
					       (double)e.next_arrival / o->rate;
			continue;
		}
		ret = kv_stats(&e);
		if (ret)
			break;
		disk_wait(&e, step0, written);
		peaks(&e);
		sample(&e, false);
		progress(&e, false);
	}
	if (!ret) {
		ret = kv_stats(&e);
		sample(&e, true);
		progress(&e, true);
		summarize(&e);
		rep->check_ok = kvmm_check(e.ctx) == 0 &&
				e.stats[KVMM_STAT_PAGES_OWNED] == 0 &&
				e.stats[KVMM_STAT_PAGES_FREE] + e.stats[KVMM_STAT_PAGES_CACHED] ==
				o->device_pages;
		if (!ret && !rep->check_ok)
			ret = -EUCLEAN;
	}
	rep->wall_secs = (double)(now_ns() - t0) / 1e9;
	teardown(&e);
	return ret;
}

void eng_report_free(struct eng_report *rep)
{
	free(rep->ttft);
	rep->ttft = NULL;
	free(rep->slow);
	rep->slow = NULL;
	rep->nslow = 0;
}

void eng_opts_default(struct eng_opts *o)
{
	*o = (struct eng_opts){
		.host_gbps = 25, .nvme_gbps = 6, .nvme_write_gbps = 4, .remote_gbps = 1,
		.page_size = 16,
		.device_pages = 8192,
		.evict = "lru",
		.policy = ENG_LPM,
		.lpm_max_queue = 128,
		.max_running = 64,
		.max_prefill_tokens = 16384,
		.chunk = 8192,
		.decode_reserve = 0.3,
		.rate = 4,
		.prefetch_budget = 256,
		.prefetch_depth = 16,
		.admit_promotions = true,
		.lookahead = 16,
		.lookahead_guard = true,
	};
	eng_model_default(&o->model);
}
