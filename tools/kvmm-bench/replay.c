// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/replay.c - replay a workload by the rule of
 * ../shared/bench/README.md through kvmm, timing only the cache-management
 * calls.
 *
 * Per request: open a sequence; match prompt[:N-1] (the last prompt token
 * is always recomputed); extend by the unmatched prompt tokens; commit the
 * prompt (SGLang's cache_unfinished_req); extend by the L-1 decoded tokens
 * (all at once, or --decode-chunk at a time).  A request finishes, by the
 * FIFO rule, with a close that commits prompt + L-1 output tokens (SGLang's
 * cache_finished_req).  Eviction happens inside extend when the pool is
 * short, exactly as SGLang evicts in alloc_token_slots.
 *
 * A request's token array is built from its segments just before it is
 * admitted, untimed, as an engine's tokenizer hands over a prompt it has
 * just produced; it lives in the request's in-flight slot until finish.
 *
 * --via says how the commands travel: the C API (direct), an in-process
 * ring (the slots are registered buffers: zero copy), or a ring attached
 * to a kvmm server in a forked process (the slots live in the ring's data
 * area, where the engine writes its tokens).  One server process serves
 * every repeat, each on a fresh context, as one process runs every direct
 * repeat: from the second repeat on, both allocate from a warm heap.
 * Through a ring the replay batches as an engine's step would: it keeps
 * finished sequences open for reuse (a finish is a RETRACT that commits:
 * insert, release, keep the row), defers them into the batch of the
 * admissions that follow, and queues each request's MATCH + EXTEND (to
 * the prompt's length: KVMM_EXTEND_TO) + COMMIT + the decode EXTENDs
 * behind them.  The batch goes, one round trip, once --batch requests
 * are in it (an engine step that admits that many, with the finishes
 * before them): no command needs the result of another in its batch.
 * The cache sees the same commands in the same order as the direct
 * replay, and the timed work is the same: each request's tokens are
 * built, untimed, before its admission; preparing each command is timed,
 * and so is the batch's round trip, from its submission to its last
 * completion reaped.  The direct
 * replay runs each request's commands right after building its tokens
 * (so they are in the cache it runs on), never batched.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <autoconf.h>

#include "bench.h"
#if CONFIG_KVMM_KVEVENTS
#include "../lib/kvevents.h"
#endif

#define RING_SQ		256

struct replay {
	const struct workload *wl;
	const struct replay_opts *o;
	struct kvmm_ctx *ctx;		/* direct, ring */
	struct kvmm_ring ring;		/* ring, remote */
	struct bench_server server;	/* remote: one process, a context a repeat */
	bool spawned, serving;
	char sock[108];
	uint32_t **tokens;		/* token slots: prompt, then output[:L-1] */
	uint32_t nslots, next_slot;	/* twice the in-flight requests, round robin,
					 * so a deferred finish still finds its tokens */
	uint32_t *fifo_req, *fifo_seq, *fifo_tok;
	uint32_t head, count;
	uint32_t *idle, nidle;		/* ring: open, empty sequences to reuse */
	uint32_t pending;		/* ring: entries prepared, not submitted */
	uint32_t step;			/* ring: requests admitted, not submitted */
	uint32_t batch;			/* ring: requests a batch carries */
	uint32_t *want, nwant;		/* ring: of the entries pending, those
					 * whose result is a request's matched
					 * tokens (its MATCH, or PROMOTE) */
	uint8_t *done;
	uint64_t ns;
	uint64_t matched;		/* tokens matched, summed */
	void *pub;			/* --kv-events: struct kvev_thread */
};

/* Where slot @slot's tokens are for a ring command. */
static void slot_buf(const struct replay *rp, uint32_t slot, uint16_t *buf, uint64_t *off)
{
	if (rp->o->via == VIA_RING) {
		*buf = (uint16_t)(slot + 1);
		*off = 0;
	} else {
		*buf = 0;
		*off = (uint64_t)((char *)rp->tokens[slot] - (char *)rp->ring.buf);
	}
}

static int first_error(const int32_t *res, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (res[i] < 0)
			return res[i];
	return 0;
}

/*
 * Ring: run every entry prepared and not yet submitted, as one batch (one
 * round trip); the results of its MATCHes (or PROMOTEs) add up to the
 * tokens matched.  With @res, the caller reads the other results there.
 */
static int batch_run(struct replay *rp, int32_t *res)
{
	uint32_t n = rp->pending, i;
	int ret;

	if (!n)
		return 0;
	rp->pending = 0;
	rp->step = 0;
	ret = ring_run(&rp->ring, n, res);
	if (ret || (ret = first_error(res, n)))
		return ret;
	for (i = 0; i < rp->nwant; i++)
		rp->matched += (uint32_t)res[rp->want[i]];
	rp->nwant = 0;
	return 0;
}

/* Ring: what is still prepared (the end of the replay). */
static int flush_pending(struct replay *rp)
{
	int32_t res[RING_SQ];
	uint64_t t0 = now_ns();
	int ret = batch_run(rp, res);

	rp->ns += now_ns() - t0;
	return ret;
}

/* Ring: one more entry in the batch, running the batch first if the SQ is full. */
static int admit_sqe(struct replay *rp, int32_t *res, struct kvmm_sqe **sqe)
{
	int ret = rp->pending == RING_SQ ? batch_run(rp, res) : 0;

	if (!ret)
		ret = ring_sqe(&rp->ring, sqe);
	if (!ret)
		rp->pending++;
	return ret;
}

static int replay_finish_oldest(struct replay *rp)
{
	uint32_t fifo = rp->head % rp->wl->max_inflight, slot = rp->fifo_tok[fifo];
	uint32_t r = rp->fifo_req[fifo], seq = rp->fifo_seq[fifo];
	const struct wl_request *req = &rp->wl->reqs[r];
	uint32_t n = req->prompt_len + (req->output_len ? req->output_len - 1 : 0);
	uint64_t t0 = now_ns();
	int32_t res[RING_SQ];
	struct kvmm_sqe *sqe;
	uint16_t buf;
	uint64_t off;
	int ret = 0;

	if (rp->o->via == VIA_DIRECT) {
		ret = kvmm_seq_close(rp->ctx, seq, rp->tokens[slot], n);
		if (!ret && rp->o->sync)
			ret = kvmm_sync(rp->ctx);
	} else {
		/* deferred: it runs in the next batch (its slot stays put) */
		slot_buf(rp, slot, &buf, &off);
		ret = admit_sqe(rp, res, &sqe);
		if (!ret) {
			kvmm_prep_retract(sqe, seq, buf, off, n);
			rp->idle[rp->nidle++] = seq;
		}
	}
	rp->ns += now_ns() - t0;
	if (ret) {
		fprintf(stderr, "replay: close of request %u: %s\n", r, strerror(-ret));
		return ret;
	}
	rp->done[r] = 1;
	rp->head++;
	rp->count--;
	return 0;
}

static int admit_direct(struct replay *rp, const uint32_t *tok, uint32_t n, uint32_t out,
			uint32_t chunk, uint32_t *seqp, uint32_t *mp)
{
	uint32_t seq, m = 0;
	int ret;

	ret = kvmm_seq_open(rp->ctx, 0, &seq);
	if (!ret && n > 1) {
		ret = kvmm_seq_match(rp->ctx, seq, tok, n - 1);
		if (ret >= 0 && rp->o->host_tokens)
			ret = kvmm_seq_promote(rp->ctx, seq, tok, n - 1);
		if (ret >= 0) {
			m = (uint32_t)ret;
			ret = 0;
		}
	}
	if (!ret)
		ret = kvmm_seq_extend(rp->ctx, seq, n - m, 0);
	if (!ret) {
		ret = kvmm_seq_commit(rp->ctx, seq, tok, n);
		ret = ret < 0 ? ret : 0;
	}
	while (!ret && out) {
		uint32_t step = out < chunk ? out : chunk;

		ret = kvmm_seq_extend(rp->ctx, seq, step, 0);
		out -= step;
	}
	*seqp = seq;
	*mp = m;
	return ret;
}

/* Ring: a sequence of the ring's own, opened now (one round trip). */
static int admit_open(struct replay *rp, int32_t *res, uint32_t *seq)
{
	struct kvmm_sqe *sqe;
	int ret = admit_sqe(rp, res, &sqe);
	uint32_t i;

	if (ret)
		return ret;
	kvmm_prep_open(sqe, 0);
	i = rp->pending - 1;
	ret = batch_run(rp, res);
	*seq = (uint32_t)res[i];
	return ret;
}

/*
 * Ring: a request is MATCH, EXTEND to the prompt's length (KVMM_EXTEND_TO:
 * what the MATCH did not map), COMMIT, the decode EXTENDs, behind the
 * finishes deferred to it.  None of them needs a result the ring has not
 * given yet (a finished sequence is reused: no OPEN), so the batch runs
 * only once --batch requests are in it (an engine step that admits that
 * many), or the SQ is full; the ring runs it in order, so the cache sees
 * the commands the direct replay makes, in the same order.  With a host
 * tier a PROMOTE follows the MATCH and may finish on the I/O worker, and
 * an EXTEND of its sequence is refused until it has (-EBUSY): those two
 * end a batch.
 */
static int admit_ring(struct replay *rp, uint32_t slot, uint32_t n, uint32_t out,
		      uint32_t chunk, uint32_t *seqp)
{
	int32_t res[RING_SQ];
	struct kvmm_sqe *sqe;
	uint32_t seq;
	uint16_t buf;
	uint64_t off;
	int ret;

	slot_buf(rp, slot, &buf, &off);
	if (!rp->nidle) {
		/* only while the replay fills up: no finished sequence to reuse */
		ret = admit_open(rp, res, &seq);
		if (ret)
			return ret;
		rp->idle[rp->nidle++] = seq;
	}
	seq = rp->idle[--rp->nidle];
	*seqp = seq;
	if (n > 1) {
		ret = admit_sqe(rp, res, &sqe);
		if (ret)
			return ret;
		kvmm_prep_match(sqe, seq, buf, off, n - 1);
		if (rp->o->host_tokens) {	/* in the same batch: runs after the match */
			ret = admit_sqe(rp, res, &sqe);
			if (ret)
				return ret;
			kvmm_prep_promote(sqe, seq, buf, off, n - 1);
		}
		rp->want[rp->nwant++] = rp->pending - 1;
		if (rp->o->host_tokens && (ret = batch_run(rp, res)))
			return ret;
	}
	ret = admit_sqe(rp, res, &sqe);
	if (ret)
		return ret;
	kvmm_prep_extend(sqe, seq, n, KVMM_EXTEND_TO);
	ret = admit_sqe(rp, res, &sqe);
	if (ret)
		return ret;
	kvmm_prep_commit(sqe, seq, buf, off, n);
	while (out) {
		uint32_t step = out < chunk ? out : chunk;

		ret = admit_sqe(rp, res, &sqe);
		if (ret)
			return ret;
		kvmm_prep_extend(sqe, seq, step, 0);
		out -= step;
	}
	if (++rp->step < rp->batch)
		return 0;
	return batch_run(rp, res);
}

static int replay_admit(struct replay *rp, uint32_t r)
{
	const struct wl_request *req = &rp->wl->reqs[r];
	uint32_t fifo = (rp->head + rp->count) % rp->wl->max_inflight;
	uint32_t slot = rp->next_slot++ % rp->nslots;
	uint32_t n = req->prompt_len, out = req->output_len ? req->output_len - 1 : 0;
	uint32_t chunk = rp->o->decode_chunk ? rp->o->decode_chunk : (out ? out : 1);
	uint32_t seq = 0, m = 0;
	uint64_t t0;
	int ret;

	workload_tokens(rp->wl, req, rp->tokens[slot]);	/* untimed */
	t0 = now_ns();
	if (rp->o->via == VIA_DIRECT)
		ret = admit_direct(rp, rp->tokens[slot], n, out, chunk, &seq, &m);
	else
		ret = admit_ring(rp, slot, n, out, chunk, &seq);
	rp->ns += now_ns() - t0;
	if (ret) {
		fprintf(stderr, "replay: admitting request %u: %s\n", r, strerror(-ret));
		return ret;
	}
	rp->fifo_req[fifo] = r;
	rp->fifo_seq[fifo] = seq;
	rp->fifo_tok[fifo] = slot;
	rp->count++;
	rp->matched += m;
	return 0;
}

static int fetch_stats(struct replay *rp, uint64_t *st)
{
	struct kvmm_stats_snap *snap;
	struct kvmm_sqe *sqe;
	size_t off = (size_t)rp->nslots * (rp->wl->max_seq_len + 1) * 4;
	int32_t res;
	int ret;

	if (rp->o->via == VIA_DIRECT) {
		kvmm_stats(rp->ctx, st, NR_KVMM_STATS);
		return 0;
	}
	/* in-process: buffer 0 is the ring's small data area; remote: past the slots */
	if (rp->o->via == VIA_RING)
		off = 0;
	off = (off + 7) & ~(size_t)7;
	snap = (struct kvmm_stats_snap *)((char *)rp->ring.buf + off);
	ret = ring_sqe(&rp->ring, &sqe);
	if (ret)
		return ret;
	kvmm_prep_stats(sqe, 0, off, sizeof(*snap) + NR_KVMM_STATS * 8);
	ret = ring_run(&rp->ring, 1, &res);
	if (ret || res < 0)
		return ret ? ret : res;
	memcpy(st, snap + 1, NR_KVMM_STATS * sizeof(*st));
	return 0;
}

/*
 * --kv-events: the context's events published from a thread of their
 * own, as an engine that embeds libkvmm would (kvmmd does the same).
 */
static int pub_start(struct replay *rp)
{
#if CONFIG_KVMM_KVEVENTS
	struct kvev_params kp = { .endpoint = rp->o->kv_events };

	return kvev_thread_start(rp->ctx, &kp, 64u << 20, 2, (struct kvev_thread **)&rp->pub);
#else
	return -EOPNOTSUPP;
#endif
}

static bool pub_stop(struct replay *rp)
{
#if CONFIG_KVMM_KVEVENTS
	struct kvev_stats st;
	int ret = kvev_thread_stop(rp->pub, &st);

	rp->pub = NULL;
	return !ret && !st.unnamed;
#else
	return true;
#endif
}

static int session_start(struct replay *rp, const struct kvmm_params *p)
{
	const struct workload *wl = rp->wl;
	size_t stride = (size_t)wl->max_seq_len + 1;
	struct kvmm_ring_params rp_params = { .sq_entries = RING_SQ,
					      .flags = rp->o->via == VIA_REMOTE ?
						       KVMM_RING_F_POLL : 0 };
	struct kvmm_iovec iov[KVMM_RING_MAX_BUFS - 1];
	uint32_t i;
	int ret;

	if (rp->o->via == VIA_REMOTE && rp->o->socket) {
		snprintf(rp->sock, sizeof(rp->sock), "%s", rp->o->socket);
		rp->serving = true;
	} else if (rp->o->via == VIA_REMOTE) {
		if (!rp->spawned) {
			snprintf(rp->sock, sizeof(rp->sock), "/tmp/kvmm-bench-%d.sock",
				 (int)getpid());
			if (server_spawn(&rp->server, p, rp->sock, 0))
				return -ECHILD;
			rp->spawned = true;
		}
		if (server_open(&rp->server))
			return -ECHILD;
		rp->serving = true;
	}
	if (rp->o->via == VIA_REMOTE) {
		rp_params.buf_size = ((stride * 4 * rp->nslots + 7) & ~7ull) +
				     sizeof(struct kvmm_stats_snap) + NR_KVMM_STATS * 8;
		ret = kvmm_ring_connect(rp->sock, &rp_params, &rp->ring);
		if (ret)
			return ret;
		for (i = 0; i < rp->nslots; i++)
			rp->tokens[i] = (uint32_t *)rp->ring.buf + i * stride;
		return 0;
	}
	ret = kvmm_create(p, &rp->ctx);
	if (!ret && rp->o->kv_events)
		ret = pub_start(rp);
	if (ret || rp->o->via == VIA_DIRECT)
		return ret;
	rp_params.buf_size = sizeof(struct kvmm_stats_snap) + NR_KVMM_STATS * 8;
	ret = kvmm_ring_init(rp->ctx, &rp_params, &rp->ring);
	if (ret)
		return ret;
	for (i = 0; i < rp->nslots; i++)
		iov[i] = (struct kvmm_iovec){ rp->tokens[i], stride * sizeof(uint32_t) };
	return kvmm_ring_register_buffers(&rp->ring, iov, rp->nslots);
}

/* A running server's kvmm_check(), through the ring (CHECK). */
static bool server_check(struct replay *rp)
{
	struct kvmm_sqe *sqe;
	int32_t res;

	if (ring_sqe(&rp->ring, &sqe))
		return false;
	kvmm_prep_check(sqe);
	return !ring_run(&rp->ring, 1, &res) && !res;
}

/*
 * Tear down; for a remote server, its kvmm_check() at close is the
 * verdict, for a running one (--socket) its CHECK.
 */
static bool session_end(struct replay *rp)
{
	bool ok = true;

	if (rp->o->via == VIA_REMOTE && rp->o->socket) {
		ok = rp->serving && server_check(rp);
		rp->serving = false;
		kvmm_ring_exit(&rp->ring);
		return ok;
	}
	if (rp->o->via != VIA_DIRECT)
		kvmm_ring_exit(&rp->ring);
	if (rp->o->via == VIA_REMOTE) {
		ok = rp->serving && !server_close(&rp->server);
		rp->serving = false;
	} else {
		ok = kvmm_check(rp->ctx) == 0;
		if (rp->pub)
			ok = pub_stop(rp) && ok;
		kvmm_destroy(rp->ctx);
		rp->ctx = NULL;
	}
	return ok;
}

static int replay_once(struct replay *rp, struct replay_result *res, double *us)
{
	const struct workload *wl = rp->wl;
	struct kvmm_params p = tool_params(rp->o->page_size,
					    (uint32_t)(rp->o->capacity_tokens / rp->o->page_size),
					    wl->max_inflight, wl->max_seq_len);
	uint64_t st[NR_KVMM_STATS];
	uint32_t r;
	bool checked;
	int ret;

	p.evict_policy = rp->o->evict;
	p.host_pages = (uint32_t)(rp->o->host_tokens / rp->o->page_size);
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = (uint32_t)(rp->o->nvme_tokens / rp->o->page_size);
	p.nvme_path = rp->o->nvme_file;
	if (p.nvme_path)	/* every run starts cold: nothing from the last one */
		unlink(p.nvme_path);
	ret = session_start(rp, &p);
	if (ret) {
		fprintf(stderr, "replay: setting up: %s\n", strerror(-ret));
		session_end(rp);
		return ret;
	}
	rp->head = rp->count = 0;
	rp->nidle = rp->pending = rp->step = rp->nwant = rp->next_slot = 0;
	rp->ns = rp->matched = 0;
	memset(rp->done, 0, wl->nreq);
	for (r = 0; r < wl->nreq && !ret; r++) {
		int32_t prev = wl->reqs[r].prev;

		while (!ret && rp->count == wl->max_inflight)
			ret = replay_finish_oldest(rp);
		while (!ret && prev >= 0 && !rp->done[prev] && rp->count)
			ret = replay_finish_oldest(rp);
		if (!ret)
			ret = replay_admit(rp, r);
	}
	while (!ret && rp->count)
		ret = replay_finish_oldest(rp);
	if (!ret && rp->o->via != VIA_DIRECT)
		ret = flush_pending(rp);
	if (!ret)
		ret = fetch_stats(rp, st);
	checked = session_end(rp);
	if (ret)
		return ret;
	res->requests = wl->nreq;
	res->prompt_tokens = wl->prompt_tokens;
	res->matched_tokens = rp->matched;
	res->evicted_tokens = st[KVMM_STAT_EVICT_PAGES] * p.page_size;
	res->promoted_tokens = st[KVMM_STAT_HOST_PROMOTE_PAGES] * p.page_size;
	res->demoted_tokens = st[KVMM_STAT_HOST_DEMOTE_PAGES] * p.page_size;
	res->nvme_promoted_tokens = st[KVMM_STAT_NVME_PROMOTE_PAGES] * p.page_size;
	res->nvme_demoted_tokens = st[KVMM_STAT_NVME_DEMOTE_PAGES] * p.page_size;
	res->cached_tokens_end = st[KVMM_STAT_PAGES_CACHED] * p.page_size;
	res->meta_bytes_end = st[KVMM_STAT_META_BYTES];
	res->accounting_ok = checked && st[KVMM_STAT_PAGES_OWNED] == 0 &&
			     st[KVMM_STAT_PAGES_FREE] + st[KVMM_STAT_PAGES_CACHED] ==
			     st[KVMM_STAT_PAGES_TOTAL];
	*us = (double)rp->ns / 1e3 / wl->nreq;
	return 0;
}

/**
 * replay_run() - replay @wl @o->repeat times, each on a fresh context
 * @wl: the workload
 * @o: options; capacity_tokens must be set
 * @res: out; counts from the last replay, time as the median
 *
 * Return: 0, or the first kvmm error (printed).
 */
int replay_run(const struct workload *wl, const struct replay_opts *o,
	       struct replay_result *res)
{
	struct replay rp = { .wl = wl, .o = o };
	uint32_t rep = o->repeat ? o->repeat : 1, r, i;
	double *us = calloc(rep, sizeof(*us));
	pid_t contender = -1;
	int ret = -ENOMEM;

	memset(res, 0, sizeof(*res));
	rp.nslots = 2 * wl->max_inflight;
	if (o->via != VIA_DIRECT && rp.nslots > KVMM_RING_MAX_BUFS - 1) {
		fprintf(stderr, "replay: max_inflight %u is more than a ring can name buffers for\n",
			wl->max_inflight);
		free(us);
		return -EINVAL;
	}
	/*
	 * A request's tokens stay in their slot until its finish has run,
	 * and a slot comes round again max_inflight admissions later: a
	 * batch holds no more admissions than that.
	 */
	rp.batch = o->batch < wl->max_inflight ? o->batch : wl->max_inflight;
	if (!rp.batch)
		rp.batch = 1;
	rp.tokens = calloc(rp.nslots, sizeof(*rp.tokens));
	rp.fifo_req = calloc(wl->max_inflight, sizeof(uint32_t));
	rp.fifo_seq = calloc(wl->max_inflight, sizeof(uint32_t));
	rp.fifo_tok = calloc(wl->max_inflight, sizeof(uint32_t));
	rp.done = calloc(wl->nreq, 1);
	rp.idle = calloc(wl->max_inflight + 1, sizeof(uint32_t));
	rp.want = calloc(wl->max_inflight + 1, sizeof(uint32_t));
	if (!us || !rp.tokens || !rp.fifo_req || !rp.fifo_seq || !rp.fifo_tok || !rp.done ||
	    !rp.idle || !rp.want)
		goto out;
	for (r = 0; o->via != VIA_REMOTE && r < rp.nslots; r++) {
		rp.tokens[r] = malloc(((size_t)wl->max_seq_len + 1) * sizeof(uint32_t));
		if (!rp.tokens[r])
			goto out;
	}
	if (o->contend >= 0) {
		contender = contender_start(o->contend);
		ret = contender < 0 ? -ECHILD : 0;
		if (ret)
			goto out;
	}
	for (i = 0; i < rep; i++) {
		ret = replay_once(&rp, res, &us[i]);
		if (ret)
			goto out;
		if (!i || us[i] < res->us_min)
			res->us_min = us[i];
		if (!i || us[i] > res->us_max)
			res->us_max = us[i];
	}
	res->us_per_request = median(us, rep);
	res->batch = o->via == VIA_DIRECT ? 0 : rp.batch;
out:
	contender_stop(contender);
	if (rp.spawned && server_reap(&rp.server) && !ret)
		ret = -ECHILD;
	for (r = 0; o->via != VIA_REMOTE && rp.tokens && r < rp.nslots; r++)
		free(rp.tokens[r]);
	free(rp.tokens);
	free(rp.fifo_req);
	free(rp.fifo_seq);
	free(rp.fifo_tok);
	free(rp.done);
	free(rp.idle);
	free(rp.want);
	free(us);
	return ret;
}

static void replay_usage(void)
{
	fprintf(stderr,
		"usage: kvmm-bench replay --workload FILE [--page-size N] [--capacity-tokens N]\n"
		"                         [--decode-chunk N] [--repeat N] [--evict lru|slru]\n"
		"                         [--via direct|ring|remote] [--batch N] [--host-tokens N]\n"
		"                         [--nvme-tokens N --nvme-file PATH [--sync]]\n"
		"                         [--contend CPU] [--socket PATH] [--kv-events ENDPOINT]\n"
		"                         [--json]\n"
		"  --batch N: through a ring, the commands of up to N requests (default %u,\n"
		"  at most the workload's max_inflight) go as one batch, one round trip\n"
		"  --socket PATH: with --via remote, replay once against the kvmm server\n"
		"  (kvmmd) serving PATH, its pool and tiers as it was started, instead of\n"
		"  one spawned per repeat\n"
		"  --kv-events ENDPOINT: with --via ring, publish the context's\n"
		"  cache events as vLLM's KV events at ENDPOINT from a thread, as kvmmd\n"
		"  --kv-events does (what publishing costs the replay)\n", REPLAY_BATCH);
}

static const char *const via_names[] = { "direct", "ring", "remote" };

/* The command line of kvmm-bench replay. */
struct replay_cli {
	struct replay_opts o;
	const char *path;	/* --workload */
	bool json;
};

/* --contend's CPU; one past any CPU_SETSIZE for a number too large. */
static int parse_cpu(const char *s)
{
	uint64_t v = parse_u64("--contend", s);

	return v > INT32_MAX ? INT32_MAX : (int)v;
}

static enum replay_via parse_via(const char *s)
{
	enum replay_via via;

	for (via = VIA_DIRECT; via <= VIA_REMOTE; via++)
		if (!strcmp(s, via_names[via]))
			return via;
	die_usage("replay: --via must be direct, ring or remote");
}

/* Parse the options into @c.  Return: -1 to go on, or the exit code (--help, a bad option). */
static int replay_parse(int argc, char **argv, struct replay_cli *c)
{
	static const struct option lopts[] = {
		{ "workload", required_argument, NULL, 'w' },
		{ "page-size", required_argument, NULL, 'p' },
		{ "capacity-tokens", required_argument, NULL, 'c' },
		{ "decode-chunk", required_argument, NULL, 'd' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "evict", required_argument, NULL, 'e' },
		{ "via", required_argument, NULL, 'v' },
		{ "batch", required_argument, NULL, 'b' },
		{ "host-tokens", required_argument, NULL, 'H' },
		{ "nvme-tokens", required_argument, NULL, 'N' },
		{ "nvme-file", required_argument, NULL, 'F' },
		{ "sync", no_argument, NULL, 's' },
		{ "contend", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 'S' },
		{ "kv-events", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct replay_opts *o = &c->o;
	int opt;

	while ((opt = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (opt) {
		case 'w': c->path = optarg; break;
		case 'p': o->page_size = (uint32_t)parse_u64("--page-size", optarg); break;
		case 'c': o->capacity_tokens = parse_u64("--capacity-tokens", optarg); break;
		case 'd': o->decode_chunk = (uint32_t)parse_u64("--decode-chunk", optarg); break;
		case 'r': o->repeat = (uint32_t)parse_u64("--repeat", optarg); break;
		case 'e': o->evict = optarg; break;
		case 'v': o->via = parse_via(optarg); break;
		case 'b': o->batch = (uint32_t)parse_u64("--batch", optarg); break;
		case 'H': o->host_tokens = parse_u64("--host-tokens", optarg); break;
		case 'N': o->nvme_tokens = parse_u64("--nvme-tokens", optarg); break;
		case 'F': o->nvme_file = optarg; break;
		case 's': o->sync = true; break;
		case 'C': o->contend = parse_cpu(optarg); break;
		case 'j': c->json = true; break;
		case 'S': o->socket = optarg; break;
		case 'K': o->kv_events = optarg; break;
		case 'h': replay_usage(); return 0;
		default: replay_usage(); return 2;
		}
	}
	return -1;
}

/* Options that contradict each other or name nothing are usage errors (exit 2). */
static void replay_check(const struct replay_cli *c)
{
	const struct replay_opts *o = &c->o;

	if (!c->path)
		die_usage("replay: --workload FILE is required");
	if (!o->page_size || (o->page_size & (o->page_size - 1)))
		die_usage("replay: --page-size must be a power of two");
	if (!o->repeat)
		die_usage("replay: --repeat must be at least 1");
	if (!o->batch)
		die_usage("replay: --batch must be at least 1");
	if (o->socket && (o->via != VIA_REMOTE || o->repeat != 1 || o->nvme_tokens))
		die_usage("replay: --socket needs --via remote, --repeat 1 and no tiers of its own");
	/* the publisher takes the context's lock, which the direct API does not */
	if (o->kv_events && o->via != VIA_RING)
		die_usage("replay: --kv-events needs --via ring (kvmmd publishes its own)");
	if (o->host_tokens && o->via == VIA_REMOTE)
		die_usage("replay: --host-tokens needs --via direct or ring (kvmmd sets its own tiers)");
	if (o->host_tokens && o->host_tokens < o->page_size)
		die_usage("replay: --host-tokens holds no page");
	if (!o->nvme_tokens != !o->nvme_file)
		die_usage("replay: --nvme-tokens and --nvme-file go together");
	if (o->nvme_tokens && (!o->host_tokens || o->nvme_tokens < o->page_size))
		die_usage("replay: --nvme-tokens needs --host-tokens and must hold a page");
	if (o->sync && (!o->nvme_tokens || o->via != VIA_DIRECT))
		die_usage("replay: --sync needs an NVMe tier and --via direct");
	if (o->evict && strcmp(o->evict, "lru") && strcmp(o->evict, "slru"))
		die_usage("replay: --evict must be lru or slru");
	if (o->contend >= 0 && contender_check(o->contend))
		die_usage("replay: --contend must name a CPU this process may run on");
}

static double replay_hit_rate(const struct replay_result *res)
{
	return (double)res->matched_tokens / (double)res->prompt_tokens;
}

/* The result as one JSON line: the options, the counts, then the timings. */
static void replay_print_json(const struct replay_cli *c, const struct replay_result *res)
{
	const struct replay_opts *o = &c->o;
	double meta = res->cached_tokens_end ? (double)res->meta_bytes_end /
					       (double)res->cached_tokens_end : 0.0;

	tool_json_line(json_pack("{s:s,s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:I,s:o,s:I,s:I,s:I,s:I,"
				 "s:I,s:I,s:I,s:b,s:o,s:o,s:o,s:I,s:o,s:b,s:i,s:I}",
		"bench", "replay", "workload", c->path, "via", via_names[o->via],
		"page_size", (json_int_t)o->page_size,
		"capacity_tokens", (json_int_t)o->capacity_tokens,
		"evict", o->evict ? o->evict : "lru",
		"requests", (json_int_t)res->requests,
		"prompt_tokens", (json_int_t)res->prompt_tokens,
		"matched_tokens", (json_int_t)res->matched_tokens,
		"hit_rate", tool_json_fixed(replay_hit_rate(res), 4),
		"evicted_tokens", (json_int_t)res->evicted_tokens,
		"host_tokens", (json_int_t)o->host_tokens,
		"demoted_tokens", (json_int_t)res->demoted_tokens,
		"promoted_tokens", (json_int_t)res->promoted_tokens,
		"nvme_tokens", (json_int_t)o->nvme_tokens,
		"nvme_demoted_tokens", (json_int_t)res->nvme_demoted_tokens,
		"nvme_promoted_tokens", (json_int_t)res->nvme_promoted_tokens,
		"sync", o->sync,
		"us_per_request", tool_json_fixed(res->us_per_request, 3),
		"us_min", tool_json_fixed(res->us_min, 3),
		"us_max", tool_json_fixed(res->us_max, 3),
		"repeat", (json_int_t)o->repeat,
		"meta_bytes_per_cached_token", tool_json_fixed(meta, 2),
		"accounting_ok", res->accounting_ok, "contend", o->contend,
		"batch", (json_int_t)res->batch), stdout);
}

static void replay_print_text(const struct replay_cli *c, const struct replay_result *res)
{
	const struct replay_opts *o = &c->o;

	printf("via             %s\nrequests        %u\nprompt tokens   %llu\n"
	       "matched tokens  %llu\nhit rate        %.4f\nevicted tokens  %llu\n"
	       "promoted tokens %llu (from the host tier of %llu)\n"
	       "                %llu (from the NVMe tier of %llu)\n"
	       "us per request  %.3f (median of %u)\naccounting      %s\n",
	       via_names[o->via], res->requests, (unsigned long long)res->prompt_tokens,
	       (unsigned long long)res->matched_tokens, replay_hit_rate(res),
	       (unsigned long long)res->evicted_tokens,
	       (unsigned long long)res->promoted_tokens,
	       (unsigned long long)o->host_tokens,
	       (unsigned long long)res->nvme_promoted_tokens,
	       (unsigned long long)o->nvme_tokens, res->us_per_request, o->repeat,
	       res->accounting_ok ? "ok" : "BROKEN");
}

int cmd_replay(int argc, char **argv)
{
	struct replay_cli c = { .o = { .page_size = 1, .repeat = 1, .batch = REPLAY_BATCH,
				       .contend = -1 } };
	struct replay_result res;
	struct workload wl;
	int ret;

	ret = replay_parse(argc, argv, &c);
	if (ret >= 0)
		return ret;
	replay_check(&c);
	if (workload_load(c.path, &wl))
		return 1;
	if (!c.o.capacity_tokens)
		c.o.capacity_tokens = wl.capacity_tokens;
	if (c.o.capacity_tokens < c.o.page_size) {
		fprintf(stderr, "replay: no capacity: pass --capacity-tokens\n");
		ret = 2;
	} else if (replay_run(&wl, &c.o, &res)) {
		ret = 1;
	} else {
		if (c.json)
			replay_print_json(&c, &res);
		else
			replay_print_text(&c, &res);
		ret = res.accounting_ok ? 0 : 1;
	}
	workload_free(&wl);
	return ret;
}
