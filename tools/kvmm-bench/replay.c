// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/replay.c - replay a workload by the rule of
 * ../shared/bench/README.md through kvmm's public API, timing only the
 * cache-management calls.
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
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct replay {
	const struct workload *wl;
	const struct replay_opts *o;
	struct kvmm_ctx *ctx;
	uint32_t **tokens;	/* per in-flight slot: prompt, then output[:L-1] */
	uint32_t *fifo_req, *fifo_seq;
	uint32_t head, count;
	uint8_t *done;
	uint64_t ns;
};

static int replay_finish_oldest(struct replay *rp)
{
	uint32_t slot = rp->head % rp->wl->max_inflight;
	uint32_t r = rp->fifo_req[slot];
	const struct wl_request *req = &rp->wl->reqs[r];
	uint32_t n = req->prompt_len + (req->output_len ? req->output_len - 1 : 0);
	uint64_t t0 = now_ns();
	int ret = kvmm_seq_close(rp->ctx, rp->fifo_seq[slot], rp->tokens[slot], n);

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

/* Untimed: the request's prompt and output tokens, from its segments. */
static void build_tokens(const struct workload *wl, const struct wl_request *req,
			 uint32_t *t)
{
	uint32_t i, pos = 0;

	for (i = 0; i < req->nseg; i++) {
		memcpy(t + pos, wl->seg_tokens[req->segs[i]],
		       wl->seg_len[req->segs[i]] * sizeof(*t));
		pos += wl->seg_len[req->segs[i]];
	}
	memcpy(t + pos, wl->seg_tokens[req->output_seg], req->output_len * sizeof(*t));
}

static int replay_admit(struct replay *rp, uint32_t r, uint64_t *matched)
{
	const struct wl_request *req = &rp->wl->reqs[r];
	uint32_t slot = (rp->head + rp->count) % rp->wl->max_inflight;
	const uint32_t *tok = rp->tokens[slot];
	uint32_t n = req->prompt_len, out = req->output_len ? req->output_len - 1 : 0;
	uint32_t chunk = rp->o->decode_chunk ? rp->o->decode_chunk : (out ? out : 1);
	uint32_t seq, m = 0;
	uint64_t t0;
	int ret;

	build_tokens(rp->wl, req, rp->tokens[slot]);
	t0 = now_ns();

	ret = kvmm_seq_open(rp->ctx, 0, &seq);
	if (!ret && n > 1) {
		ret = kvmm_seq_match(rp->ctx, seq, tok, n - 1);
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
	rp->ns += now_ns() - t0;
	if (ret) {
		fprintf(stderr, "replay: admitting request %u: %s\n", r, strerror(-ret));
		return ret;
	}
	rp->fifo_req[slot] = r;
	rp->fifo_seq[slot] = seq;
	rp->count++;
	*matched += m;
	return 0;
}

static int replay_once(struct replay *rp, struct replay_result *res, double *us)
{
	const struct workload *wl = rp->wl;
	struct kvmm_params p = {
		.model = { .layers = 1, .kv_heads = 1, .head_dim = 1, .dtype_bytes = 2,
			   .attn = KVMM_ATTN_MHA },
		.page_size = rp->o->page_size,
		.nr_pages = (uint32_t)(rp->o->capacity_tokens / rp->o->page_size),
		.max_seqs = wl->max_inflight,
		.max_seq_len = wl->max_seq_len,
		.evict_policy = rp->o->evict,
	};
	uint64_t st[NR_KVMM_STATS], matched = 0;
	uint32_t r;
	int ret;

	ret = kvmm_create(&p, &rp->ctx);
	if (ret) {
		fprintf(stderr, "replay: kvmm_create: %s\n", strerror(-ret));
		return ret;
	}
	rp->head = rp->count = 0;
	rp->ns = 0;
	memset(rp->done, 0, wl->nreq);
	for (r = 0; r < wl->nreq && !ret; r++) {
		int32_t prev = wl->reqs[r].prev;

		while (!ret && rp->count == wl->max_inflight)
			ret = replay_finish_oldest(rp);
		while (!ret && prev >= 0 && !rp->done[prev] && rp->count)
			ret = replay_finish_oldest(rp);
		if (!ret)
			ret = replay_admit(rp, r, &matched);
	}
	while (!ret && rp->count)
		ret = replay_finish_oldest(rp);
	if (!ret) {
		kvmm_stats(rp->ctx, st, NR_KVMM_STATS);
		res->requests = wl->nreq;
		res->prompt_tokens = wl->prompt_tokens;
		res->matched_tokens = matched;
		res->evicted_tokens = st[KVMM_STAT_EVICT_PAGES] * p.page_size;
		res->cached_tokens_end = st[KVMM_STAT_PAGES_CACHED] * p.page_size;
		res->meta_bytes_end = st[KVMM_STAT_META_BYTES];
		res->accounting_ok = kvmm_check(rp->ctx) == 0 &&
				     st[KVMM_STAT_PAGES_OWNED] == 0 &&
				     st[KVMM_STAT_PAGES_FREE] + st[KVMM_STAT_PAGES_CACHED] ==
				     st[KVMM_STAT_PAGES_TOTAL];
		*us = (double)rp->ns / 1e3 / wl->nreq;
	}
	kvmm_destroy(rp->ctx);
	rp->ctx = NULL;
	return ret;
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
	int ret = -ENOMEM;

	memset(res, 0, sizeof(*res));
	rp.tokens = calloc(wl->max_inflight, sizeof(*rp.tokens));
	rp.fifo_req = calloc(wl->max_inflight, sizeof(uint32_t));
	rp.fifo_seq = calloc(wl->max_inflight, sizeof(uint32_t));
	rp.done = calloc(wl->nreq, 1);
	if (!us || !rp.tokens || !rp.fifo_req || !rp.fifo_seq || !rp.done)
		goto out;
	for (r = 0; r < wl->max_inflight; r++) {
		rp.tokens[r] = malloc(((size_t)wl->max_seq_len + 1) * sizeof(uint32_t));
		if (!rp.tokens[r])
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
out:
	for (r = 0; rp.tokens && r < wl->max_inflight; r++)
		free(rp.tokens[r]);
	free(rp.tokens);
	free(rp.fifo_req);
	free(rp.fifo_seq);
	free(rp.done);
	free(us);
	return ret;
}

static void replay_usage(void)
{
	fprintf(stderr,
		"usage: kvmm-bench replay --workload FILE [--page-size N] [--capacity-tokens N]\n"
		"                         [--decode-chunk N] [--repeat N] [--evict lru|slru] [--json]\n");
}

int cmd_replay(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "workload", required_argument, NULL, 'w' },
		{ "page-size", required_argument, NULL, 'p' },
		{ "capacity-tokens", required_argument, NULL, 'c' },
		{ "decode-chunk", required_argument, NULL, 'd' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "evict", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct replay_opts o = { .page_size = 1, .repeat = 1 };
	struct replay_result res;
	struct workload wl;
	const char *path = NULL;
	bool json = false;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'w': path = optarg; break;
		case 'p': o.page_size = (uint32_t)parse_u64("--page-size", optarg); break;
		case 'c': o.capacity_tokens = parse_u64("--capacity-tokens", optarg); break;
		case 'd': o.decode_chunk = (uint32_t)parse_u64("--decode-chunk", optarg); break;
		case 'r': o.repeat = (uint32_t)parse_u64("--repeat", optarg); break;
		case 'e': o.evict = optarg; break;
		case 'j': json = true; break;
		case 'h': replay_usage(); return 0;
		default: replay_usage(); return 2;
		}
	}
	if (!path)
		die_usage("replay: --workload FILE is required");
	if (!o.page_size || (o.page_size & (o.page_size - 1)))
		die_usage("replay: --page-size must be a power of two");
	if (!o.repeat)
		die_usage("replay: --repeat must be at least 1");
	if (o.evict && strcmp(o.evict, "lru") && strcmp(o.evict, "slru"))
		die_usage("replay: --evict must be lru or slru");
	ret = workload_load(path, &wl);
	if (ret)
		return 1;
	if (!o.capacity_tokens)
		o.capacity_tokens = wl.capacity_tokens;
	if (o.capacity_tokens < o.page_size) {
		fprintf(stderr, "replay: no capacity: pass --capacity-tokens\n");
		workload_free(&wl);
		return 2;
	}
	ret = replay_run(&wl, &o, &res);
	if (ret) {
		workload_free(&wl);
		return 1;
	}
	if (json) {
		printf("{\"bench\":\"replay\",\"workload\":\"%s\",\"page_size\":%u,"
		       "\"capacity_tokens\":%llu,\"evict\":\"%s\",\"requests\":%u,"
		       "\"prompt_tokens\":%llu,\"matched_tokens\":%llu,\"hit_rate\":%.4f,"
		       "\"evicted_tokens\":%llu,\"us_per_request\":%.3f,\"us_min\":%.3f,"
		       "\"us_max\":%.3f,\"repeat\":%u,\"meta_bytes_per_cached_token\":%.2f,"
		       "\"accounting_ok\":%s}\n",
		       path, o.page_size, (unsigned long long)o.capacity_tokens,
		       o.evict ? o.evict : "lru", res.requests,
		       (unsigned long long)res.prompt_tokens,
		       (unsigned long long)res.matched_tokens,
		       (double)res.matched_tokens / (double)res.prompt_tokens,
		       (unsigned long long)res.evicted_tokens, res.us_per_request,
		       res.us_min, res.us_max, o.repeat,
		       res.cached_tokens_end ? (double)res.meta_bytes_end /
					       (double)res.cached_tokens_end : 0.0,
		       res.accounting_ok ? "true" : "false");
	} else {
		printf("requests        %u\nprompt tokens   %llu\nmatched tokens  %llu\n"
		       "hit rate        %.4f\nevicted tokens  %llu\n"
		       "us per request  %.3f (median of %u)\naccounting      %s\n",
		       res.requests, (unsigned long long)res.prompt_tokens,
		       (unsigned long long)res.matched_tokens,
		       (double)res.matched_tokens / (double)res.prompt_tokens,
		       (unsigned long long)res.evicted_tokens, res.us_per_request, o.repeat,
		       res.accounting_ok ? "ok" : "BROKEN");
	}
	workload_free(&wl);
	return res.accounting_ok ? 0 : 1;
}
