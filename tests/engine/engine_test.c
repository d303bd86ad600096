// SPDX-License-Identifier: MIT
/*
 * tests/engine/engine_test.c - kvmm-engine's scheduler: its arithmetic,
 * its order of admission and retraction, chunk commits, and whole runs
 * that must finish with every page accounted for.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "../../tools/kvmm-engine/engine.h"
#include "../helpers.h"

const char *tool_name = "kvmm-tests";

#define MAX_EV	4096

struct evlog {
	uint32_t n;
	struct { int type; uint32_t req, a, b; } ev[MAX_EV];
};

static void log_event(void *priv, int type, uint32_t req, uint32_t a, uint32_t b)
{
	struct evlog *l = priv;

	if (l->n < MAX_EV)
		l->ev[l->n++] = (typeof(l->ev[0])){ type, req, a, b };
}

/* The first event of @type, or -1. */
static int first_of(const struct evlog *l, int type)
{
	uint32_t k;

	for (k = 0; k < l->n; k++)
		if (l->ev[k].type == type)
			return (int)k;
	return -1;
}

/*
 * A workload in the shared text form: segments of @len[i] tokens (segment
 * i's tokens are i * 10000 + position), requests of "segs... | out_seg
 * out_len" given as a string each, arriving at --rate.
 */
static int load_text(struct workload *wl, const uint32_t *len, uint32_t nseg,
		     const char *const *reqs, uint32_t nreq)
{
	char path[] = "/tmp/kvmm-engine-test-XXXXXX";
	int fd = mkstemp(path), ret;
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	uint32_t i, k;

	if (!f)
		return -errno;
	for (i = 0; i < nseg; i++) {
		fprintf(f, "S %u user %u", i, len[i]);
		for (k = 0; k < len[i]; k++)
			fprintf(f, " %u", i * 10000 + k);
		fputc('\n', f);
	}
	for (i = 0; i < nreq; i++)
		fprintf(f, "R %u %u 0 0 -1 %s\n", i, i, reqs[i]);
	fclose(f);
	ret = workload_load(path, wl);
	unlink(path);
	return ret;
}

static void engine_chunk_arithmetic(void)
{
	/* fits whole: no rounding */
	CU_ASSERT_EQUAL(eng_chunk_len(100, 16384, 256, 16), 100);
	/* the chunk size caps it; a partial prefill stops on a page */
	CU_ASSERT_EQUAL(eng_chunk_len(1000, 16384, 256, 16), 256);
	CU_ASSERT_EQUAL(eng_chunk_len(1000, 100, 256, 16), 96);
	CU_ASSERT_EQUAL(eng_chunk_len(1000, 250, 256, 100), 200);
	/* less than a page of budget left: nothing this step */
	CU_ASSERT_EQUAL(eng_chunk_len(1000, 10, 256, 16), 0);
	/* the last chunk of a prompt ends where the prompt does */
	CU_ASSERT_EQUAL(eng_chunk_len(37, 256, 256, 16), 37);
	/* no chunking: all or nothing */
	CU_ASSERT_EQUAL(eng_chunk_len(400, 500, 0, 16), 400);
	CU_ASSERT_EQUAL(eng_chunk_len(1000, 500, 0, 16), 0);
}

static void engine_retract_order(void)
{
	struct eng_victim a = { .decoded = 3, .input = 100 }, b = { .decoded = 9, .input = 500 };
	struct eng_victim c = { .decoded = 3, .input = 400 };

	/* the one that decoded least goes first... */
	CU_ASSERT(eng_retract_cmp(&a, &b) < 0);
	CU_ASSERT(eng_retract_cmp(&b, &a) > 0);
	/* ...and among equals, the longest prompt */
	CU_ASSERT(eng_retract_cmp(&c, &a) < 0);
	CU_ASSERT_EQUAL(eng_retract_cmp(&a, &a), 0);
}

static void opts_small(struct eng_opts *o, struct evlog *l)
{
	eng_opts_default(o);
	o->device_pages = 256;
	o->page_size = 16;
	o->rate = 1000;
	o->event = log_event;
	o->event_priv = l;
}

/* Each chunk is committed as it is prefilled: later requests match it. */
static void engine_chunks_are_committed(void)
{
	static const uint32_t len[] = { 1000, 8, 8 };
	static const char *const reqs[] = { "1000 1 4 1 0", "1000 2 4 1 0" };
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;
	uint32_t k, chunks = 0, kv = 0;
	int adm1 = -1;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 3, reqs, 2), 0);
	opts_small(&o, l);
	o.chunk = 256;
	o.max_prefill_tokens = 256;
	CU_ASSERT_EQUAL_FATAL(eng_run(&wl, &o, &rep), 0);
	for (k = 0; k < l->n; k++) {
		if (l->ev[k].type == ENG_EV_CHUNK && l->ev[k].req == 0) {
			kv += l->ev[k].a;
			/* everything prefilled so far is cached, in whole pages */
			CU_ASSERT_EQUAL(l->ev[k].b, kv / 16 * 16);
			chunks++;
		}
		if (l->ev[k].type == ENG_EV_ADMIT && l->ev[k].req == 1)
			adm1 = (int)k;
	}
	CU_ASSERT_EQUAL(chunks, 4);	/* 256 + 256 + 256 + 232 */
	CU_ASSERT_EQUAL(kv, 1000);
	/* the second request, same prompt, matched what the first committed */
	CU_ASSERT_FATAL(adm1 >= 0);
	CU_ASSERT_EQUAL(l->ev[adm1].a, 992);
	CU_ASSERT_EQUAL(rep.completed, 2);
	CU_ASSERT(rep.check_ok);
	eng_report_free(&rep);
	workload_free(&wl);
	free(l);
}

/* Decode runs out of memory: retract in order, re-admit, finish all. */
static void engine_retracts_and_readmits(void)
{
	static const uint32_t len[] = { 100, 150, 200, 120, 300 };
	static const char *const reqs[] = {
		"100 4 300 1 0", "150 4 300 1 1", "200 4 300 1 2", "120 4 300 1 3",
	};
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;
	int r, fin;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 5, reqs, 4), 0);
	opts_small(&o, l);
	o.device_pages = 64;		/* 1,024 tokens: all four cannot finish at once */
	o.decode_reserve = 0;		/* admit on what prefill needs alone */
	o.rate = 1e6;			/* all waiting at the first step */
	CU_ASSERT_EQUAL_FATAL(eng_run(&wl, &o, &rep), 0);
	CU_ASSERT(rep.retractions > 0);
	r = first_of(l, ENG_EV_RETRACT);
	CU_ASSERT_FATAL(r >= 0);
	/* all decoded alike when memory ran out: the longest prompt goes */
	CU_ASSERT_EQUAL(l->ev[r].req, 2);
	/* it comes back and finishes */
	fin = -1;
	for (uint32_t k = (uint32_t)r; k < l->n; k++)
		if (l->ev[k].type == ENG_EV_FINISH && l->ev[k].req == 2)
			fin = (int)k;
	CU_ASSERT(fin > r);
	CU_ASSERT_EQUAL(rep.completed, 4);
	CU_ASSERT(rep.check_ok);
	eng_report_free(&rep);
	workload_free(&wl);
	free(l);
}

/* lpm admits the request with the longest cached prefix first. */
static void engine_lpm_orders_by_cached_prefix(void)
{
	static const uint32_t len[] = { 400, 400, 50, 64 };
	/* 0: prompt A; 1: prompt B; 2: prompt A + more */
	static const char *const reqs[] = { "400 3 50 1 0", "400 3 4 1 1", "450 3 4 2 0 2" };
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;
	enum eng_policy pol;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 4, reqs, 3), 0);
	for (pol = ENG_FCFS; pol <= ENG_LPM; pol++) {
		uint32_t k, order[3], n = 0;

		opts_small(&o, l);
		l->n = 0;
		o.policy = pol;
		o.max_running = 1;	/* 1 and 2 wait while 0 decodes */
		CU_ASSERT_EQUAL_FATAL(eng_run(&wl, &o, &rep), 0);
		for (k = 0; k < l->n && n < 3; k++)
			if (l->ev[k].type == ENG_EV_ADMIT)
				order[n++] = l->ev[k].req;
		CU_ASSERT_EQUAL_FATAL(n, 3);
		CU_ASSERT_EQUAL(order[0], 0);
		CU_ASSERT_EQUAL(order[1], pol == ENG_LPM ? 2 : 1);
		CU_ASSERT(rep.check_ok);
		eng_report_free(&rep);
	}
	workload_free(&wl);
	free(l);
}

/*
 * lpm passes over a prompt with nothing cached while requests sharing a
 * cached prefix keep coming; --max-wait bounds that: past the bound the
 * oldest waiting request goes first.  The report names who makes the p99.
 */
static void engine_max_wait_bounds_lpm_starvation(void)
{
	static const uint32_t len[] = { 400, 400, 50 };
	/* 0: prompt A; 1: prompt B, nothing shared; 2-9: A + more */
	static const char *const reqs[] = {
		"400 2 50 1 0", "400 2 50 1 1", "450 2 50 2 0 2", "450 2 50 2 0 2",
		"450 2 50 2 0 2", "450 2 50 2 0 2", "450 2 50 2 0 2", "450 2 50 2 0 2",
		"450 2 50 2 0 2", "450 2 50 2 0 2",
	};
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;
	uint32_t pass;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 3, reqs, 10), 0);
	for (pass = 0; pass < 2; pass++) {
		uint32_t k, n = 0, pos_b = UINT32_MAX;

		opts_small(&o, l);
		l->n = 0;
		o.max_running = 1;	/* one at a time: the rest wait in lpm order */
		o.max_wait = pass ? 0.5 : 0;	/* each request decodes for about 0.3 s */
		CU_ASSERT_EQUAL_FATAL(eng_run(&wl, &o, &rep), 0);
		for (k = 0; k < l->n; k++)
			if (l->ev[k].type == ENG_EV_ADMIT && l->ev[k].req == 1)
				pos_b = n++;
			else if (l->ev[k].type == ENG_EV_ADMIT)
				n++;
		CU_ASSERT_EQUAL(n, 10);
		/* past 0.5 s all have aged: by arrival, B second; lpm alone: B last */
		CU_ASSERT(pass ? pos_b <= 3 : pos_b == 9);
		/* the p99 of ten is the slowest: B, with nothing cached, unless bounded */
		CU_ASSERT_FATAL(rep.nslow >= 1);
		CU_ASSERT_DOUBLE_EQUAL(rep.slow[0].ttft, rep.ttft[rep.nttft - 1], 1e-12);
		for (k = 0; k < rep.nslow; k++) {
			CU_ASSERT(rep.slow[k].ttft >= rep.ttft_p99);
			CU_ASSERT(k == 0 || rep.slow[k].ttft <= rep.slow[k - 1].ttft);
		}
		if (!pass) {
			CU_ASSERT_EQUAL(rep.nslow, 1);
			CU_ASSERT_EQUAL(rep.slow[0].req, 1);
			CU_ASSERT_EQUAL(rep.slow[0].prompt, 400);
			CU_ASSERT_EQUAL(rep.slow[0].cached, 0);
		} else {
			CU_ASSERT(rep.slow[0].req != 1);
		}
		CU_ASSERT_EQUAL(rep.completed, 10);
		CU_ASSERT(rep.check_ok);
		eng_report_free(&rep);
	}
	workload_free(&wl);
	free(l);
}

/* The requests of @l in the order they were first admitted, at most @max. */
static uint32_t admit_order(const struct evlog *l, uint32_t *order, uint32_t max)
{
	uint32_t k, j, n = 0;

	for (k = 0; k < l->n && n < max; k++) {
		if (l->ev[k].type != ENG_EV_ADMIT)
			continue;
		for (j = 0; j < n && order[j] != l->ev[k].req; j++)
			;
		if (j == n)
			order[n++] = l->ev[k].req;
	}
	return n;
}

/*
 * Run @wl on 64 pages with --lookahead @la (and --lookahead-evict if
 * @evict); every request must finish, kvmm_check() clean, and the
 * requests must be first admitted in the order @want.  Return: the
 * pages evicted.
 */
static uint64_t run_lookahead(const struct workload *wl, uint32_t la, bool evict,
			      const uint32_t *want, uint32_t n)
{
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	uint32_t order[8], k;
	uint64_t evicted;

	CU_ASSERT_FATAL(l != NULL && n <= 8);
	opts_small(&o, l);
	o.device_pages = 64;
	o.lookahead = la;
	o.lookahead_evict = evict;
	CU_ASSERT_EQUAL_FATAL(eng_run(wl, &o, &rep), 0);
	CU_ASSERT_EQUAL_FATAL(admit_order(l, order, n), n);
	for (k = 0; k < n; k++)
		CU_ASSERT_EQUAL(order[k], want[k]);
	CU_ASSERT_EQUAL(rep.completed, n);
	CU_ASSERT(rep.check_ok);
	evicted = rep.evicted_pages;
	eng_report_free(&rep);
	free(l);
	return evicted;
}

/*
 * A head that does not fit holds the queue; --lookahead tries the
 * requests behind it, but only in free pages: one that would have to
 * evict cache to fit still waits for the head, unless --lookahead-evict.
 */
static void engine_lookahead_passes_a_head_in_free_pages_or_cache(void)
{
	/* 64 pages of 16 tokens; segments: A, B 600 tokens, C 100, D 200, P 300, out */
	static const uint32_t len[] = { 600, 600, 100, 200, 300, 64 };
	/* A runs; B (38 pages) does not fit beside it; C (7 pages) does */
	static const char *const free_reqs[] = { "600 5 60 1 0", "600 5 4 1 1", "100 5 4 1 2" };
	/* P leaves 18 pages cached; A runs; B waits; D fits only by evicting P */
	static const char *const cache_reqs[] = {
		"300 5 1 1 4", "600 5 4 1 0", "600 5 4 1 1", "200 5 4 1 3",
	};
	static const uint32_t in_order[] = { 0, 1, 2, 3 }, c_first[] = { 0, 2, 1 },
			      d_first[] = { 0, 1, 3, 2 };
	struct workload wl[2];

	CU_ASSERT_EQUAL_FATAL(load_text(&wl[0], len, 6, free_reqs, 3), 0);
	CU_ASSERT_EQUAL_FATAL(load_text(&wl[1], len, 6, cache_reqs, 4), 0);
	/* without lookahead C waits for B, which waits for A to finish */
	run_lookahead(&wl[0], 0, false, in_order, 3);
	run_lookahead(&wl[0], 16, false, c_first, 3);
	/* D would fit in P's cache, not in the free pages: it waits either way */
	run_lookahead(&wl[1], 0, false, in_order, 4);
	run_lookahead(&wl[1], 16, false, in_order, 4);
	/* with --lookahead-evict D takes P's cached pages and goes before B */
	CU_ASSERT(run_lookahead(&wl[1], 16, true, d_first, 4) > 0);
	workload_free(&wl[0]);
	workload_free(&wl[1]);
}

/*
 * The guard's workloads: 128 pages of 16 tokens, no decode reserve.  A
 * (1,000 tokens, 40 out) runs; the head B (1,600 tokens) fits only once A
 * has finished, 39 decode steps on, and then leaves 441 tokens to spare.
 * C (500 tokens, 200 out) fits beside A now but would still hold 539
 * tokens then, so B would wait for it; D (500, 20 out) has finished by
 * then; E and F (300, 200 out) would each hold 339.
 */
static const uint32_t guard_len[] = { 1000, 1600, 500, 500, 300, 300, 600 };

/*
 * Run @wl with --lookahead 16, guarded or not; every request must finish,
 * kvmm_check() clean, and the first admissions come in the order @want
 * (unguarded, C and D together outgrow the pool and one is retracted).
 * Return: the event log (free() it).
 */
static struct evlog *run_guard(const struct workload *wl, bool guard, const uint32_t *want,
			       uint32_t n)
{
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	uint32_t order[8], k;

	CU_ASSERT_FATAL(l != NULL && n <= 8);
	opts_small(&o, l);
	o.device_pages = 128;
	o.decode_reserve = 0;
	o.lookahead = 16;
	o.lookahead_guard = guard;
	CU_ASSERT_EQUAL_FATAL(eng_run(wl, &o, &rep), 0);
	CU_ASSERT_EQUAL_FATAL(admit_order(l, order, n), n);
	for (k = 0; k < n; k++)
		CU_ASSERT_EQUAL(order[k], want[k]);
	CU_ASSERT_EQUAL(rep.completed, wl->nreq);
	if (guard)	/* the prediction holds: nothing is retracted */
		CU_ASSERT_EQUAL(rep.retractions, 0);
	CU_ASSERT(rep.check_ok);
	eng_report_free(&rep);
	return l;
}

/*
 * @reqs (@n of them) unguarded, first admitted in the order @unguarded,
 * then guarded, the first @ng in the order @guarded.  Return: the guarded
 * run's event log, and the unguarded one's in *@ulog unless it is NULL
 * (free() them).
 */
static struct evlog *guard_runs(const char *const *reqs, uint32_t n, const uint32_t *unguarded,
				const uint32_t *guarded, uint32_t ng, struct evlog **ulog)
{
	struct workload wl;
	struct evlog *l;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, guard_len, 7, reqs, n), 0);
	l = run_guard(&wl, false, unguarded, n);
	if (ulog)
		*ulog = l;
	else
		free(l);
	l = run_guard(&wl, true, guarded, ng);
	workload_free(&wl);
	return l;
}

/* The index in @l of request @req's first event of @type, or -1. */
static int event_of(const struct evlog *l, int type, uint32_t req)
{
	uint32_t k;

	for (k = 0; k < l->n; k++)
		if (l->ev[k].type == type && l->ev[k].req == req)
			return (int)k;
	return -1;
}

/*
 * C fits in the free pages beside A, and unguarded goes before the head;
 * B then waits until C has finished.  The guard refuses C, and B goes in
 * as soon as A is done.
 */
static void engine_lookahead_guard_refuses_a_backfill_that_delays_the_head(void)
{
	static const char *const reqs[] = { "1000 6 40 1 0", "1600 6 4 1 1", "500 6 200 1 2" };
	static const uint32_t unguarded[] = { 0, 2, 1 }, guarded[] = { 0, 1, 2 };
	struct evlog *u, *l = guard_runs(reqs, 3, unguarded, guarded, 3, &u);

	CU_ASSERT(event_of(u, ENG_EV_ADMIT, 1) > event_of(u, ENG_EV_FINISH, 2));
	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) > event_of(l, ENG_EV_FINISH, 0));
	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) < event_of(l, ENG_EV_ADMIT, 2));
	free(u);
	free(l);
}

/*
 * D would hold more than B leaves to spare, had it not finished: it has,
 * 19 decode steps in, so it goes before the head, and C still waits.
 * Unguarded, C takes the room first.
 */
static void engine_lookahead_guard_admits_one_done_before_the_shadow(void)
{
	static const char *const reqs[] = {
		"1000 6 40 1 0", "1600 6 4 1 1", "500 6 200 1 2", "500 6 20 1 3",
	};
	static const uint32_t unguarded[] = { 0, 2, 3, 1 }, guarded[] = { 0, 3, 1, 2 };
	struct evlog *l = guard_runs(reqs, 4, unguarded, guarded, 4, NULL);

	/* D is done before B goes in, and B before anything else finishes */
	CU_ASSERT(event_of(l, ENG_EV_FINISH, 3) < event_of(l, ENG_EV_FINISH, 0));
	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) < event_of(l, ENG_EV_FINISH, 1) &&
		  event_of(l, ENG_EV_FINISH, 1) < event_of(l, ENG_EV_FINISH, 2));
	free(l);
}

/*
 * E outlives the shadow but fits in what B leaves to spare: it goes before
 * the head, and what it holds then comes off the spare, so F, as large,
 * no longer fits and waits behind B with C.
 */
static void engine_lookahead_guard_admits_one_in_the_extra(void)
{
	static const char *const reqs[] = {
		"1000 6 40 1 0", "1600 6 4 1 1", "500 6 200 1 2", "300 6 200 1 4",
		"300 6 200 1 5",
	};
	static const uint32_t unguarded[] = { 0, 2, 3, 4, 1 }, guarded[] = { 0, 3, 1 };
	struct evlog *l = guard_runs(reqs, 5, unguarded, guarded, 3, NULL);

	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) < event_of(l, ENG_EV_ADMIT, 2));
	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) < event_of(l, ENG_EV_ADMIT, 4));
	CU_ASSERT(event_of(l, ENG_EV_ADMIT, 1) < event_of(l, ENG_EV_FINISH, 3));
	free(l);
}

/*
 * The guard comes before a promotion: C's 400-token prefix P is on the
 * host tier (X computed it, F's prompt pushed it down), and C would still
 * hold 539 tokens when A is done, which B needs.  The guard refuses C
 * before its PROMOTE, counting P as tokens C must bring up; C goes in
 * after B and promotes P from the host then.  (FCFS, no PREFETCH, and the
 * lookahead may evict, so that C's room is the cache F left.)
 */
static void engine_lookahead_guard_comes_before_a_promotion(void)
{
	static const uint32_t len[] = { 1000, 1600, 400, 100, 600, 1100, 600 };
	static const char *const reqs[] = {
		"400 4 1 1 2", "1700 4 1 2 5 6", "1000 4 40 1 0", "1600 4 4 1 1",
		"500 4 200 2 2 3",
	};
	static const uint32_t unguarded[] = { 0, 1, 2, 4, 3 }, guarded[] = { 0, 1, 2, 3, 4 };
	struct evlog *l = calloc(1, sizeof(*l));
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;
	uint32_t order[5], k, g;

	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 7, reqs, 5), 0);
	for (g = 0; g < 2; g++) {
		opts_small(&o, l);
		o.device_pages = 128;
		o.host_pages = 512;
		o.decode_reserve = 0;
		o.policy = ENG_FCFS;
		o.prefetch_budget = 0;
		o.lookahead = 16;
		o.lookahead_evict = true;
		o.lookahead_guard = g;
		l->n = 0;
		CU_ASSERT_EQUAL_FATAL(eng_run(&wl, &o, &rep), 0);
		CU_ASSERT_EQUAL_FATAL(admit_order(l, order, 5), 5);
		for (k = 0; k < 5; k++)
			CU_ASSERT_EQUAL(order[k], g ? guarded[k] : unguarded[k]);
		/* P came up from the host for C, at its admission */
		CU_ASSERT_EQUAL(rep.host_tokens, 400);
		CU_ASSERT_EQUAL(rep.completed, 5);
		CU_ASSERT(rep.check_ok);
		eng_report_free(&rep);
	}
	workload_free(&wl);
	free(l);
}

/* A request larger than the whole pool: a clear error at once. */
static void engine_pool_too_small_fails_cleanly(void)
{
	static const uint32_t len[] = { 100, 5000, 8 };
	static const char *const reqs[] = { "100 2 4 1 0", "5000 2 4 1 1" };
	struct eng_report rep;
	struct eng_opts o;
	struct workload wl;

	CU_ASSERT_EQUAL_FATAL(load_text(&wl, len, 3, reqs, 2), 0);
	opts_small(&o, NULL);
	o.event = NULL;
	o.device_pages = 64;
	CU_ASSERT_EQUAL(eng_run(&wl, &o, &rep), -ENOSPC);
	eng_report_free(&rep);
	workload_free(&wl);
}

/* 200 generated requests under @o. */
static int run_with(const struct eng_opts *o, struct eng_report *rep)
{
	struct wl_gen g = { .seed = 7, .requests = 200, .rate = 2 };
	struct workload wl;
	int ret;

	ret = workload_generate(&g, &wl);
	if (ret)
		return ret;
	ret = eng_run(&wl, o, rep);
	workload_free(&wl);
	return ret;
}

static int run_generated(uint32_t pages, bool no_cache, bool sequential, const char *evict,
			 struct eng_report *rep)
{
	struct eng_opts o;

	eng_opts_default(&o);
	o.device_pages = pages;
	o.no_cache = no_cache;
	o.evict = evict;
	if (sequential) {
		o.sequential = true;
		o.max_running = 1;
		o.policy = ENG_FCFS;
	}
	return run_with(&o, rep);
}

/* The same on @pages device pages over @host and @nvme pages of tiers. */
static int run_tiered(uint32_t pages, uint32_t host, uint32_t nvme, const char *path,
		      uint32_t write_policy, struct eng_report *rep)
{
	struct eng_opts o;

	eng_opts_default(&o);
	o.write_policy = write_policy;
	o.device_pages = pages;
	o.host_pages = host;
	o.nvme_pages = nvme;
	o.nvme_file = path;
	return run_with(&o, rep);
}

/*
 * Lower tiers under a small device: what is demoted comes back, is
 * counted per tier and charged on the clock; the run ends clean.
 */
static void engine_tiers_keep_the_cache(void)
{
	const char *tmp = getenv("TMPDIR");
	struct eng_report none, host, nvme, wt;
	char path[512];

	snprintf(path, sizeof(path), "%s/kvmm-engine-test-%d.nvme", tmp && *tmp ? tmp : "/tmp",
		 (int)getpid());
	CU_ASSERT_EQUAL_FATAL(run_tiered(1200, 0, 0, NULL, KVMM_WRITE_BACK, &none), 0);
	CU_ASSERT_EQUAL_FATAL(run_tiered(1200, 4800, 0, NULL, KVMM_WRITE_BACK, &host), 0);
	CU_ASSERT_EQUAL_FATAL(run_tiered(1200, 1200, 4800, path, KVMM_WRITE_BACK, &nvme), 0);
	CU_ASSERT_EQUAL_FATAL(run_tiered(1200, 1200, 4800, path, KVMM_WRITE_THROUGH, &wt), 0);
	unlink(path);
	CU_ASSERT(none.check_ok && host.check_ok && nvme.check_ok && wt.check_ok);
	/* write-back copies at demotion only; write-through mostly at commit */
	CU_ASSERT_EQUAL(host.host_copied, host.host_demoted);
	CU_ASSERT_EQUAL(host.wt_pages + host.free_demoted, 0);
	CU_ASSERT(wt.wt_pages > 0);
	CU_ASSERT(wt.free_demoted > 0 && wt.free_demoted <= wt.host_demoted);
	CU_ASSERT_EQUAL(wt.host_copied, wt.host_demoted - wt.free_demoted + wt.wt_pages);
	CU_ASSERT(wt.nvme_tokens > 0);
	CU_ASSERT(wt.cached_tokens > none.cached_tokens);
	CU_ASSERT_EQUAL(none.host_tokens + none.nvme_tokens, 0);
	CU_ASSERT_EQUAL(none.promote_secs, 0);
	CU_ASSERT(host.host_demoted > 0);
	CU_ASSERT(host.host_tokens > 0);
	CU_ASSERT_EQUAL(host.nvme_tokens, 0);
	CU_ASSERT(host.promote_secs > 0);
	CU_ASSERT(host.cached_tokens > none.cached_tokens);
	CU_ASSERT(nvme.nvme_demoted > 0);
	CU_ASSERT(nvme.nvme_tokens > 0);
	CU_ASSERT(nvme.cached_tokens > none.cached_tokens);
	CU_ASSERT(host.cached_tokens >= host.host_tokens);
	eng_report_free(&none);
	eng_report_free(&host);
	eng_report_free(&nvme);
	eng_report_free(&wt);
}

/* kvmm-engine's defaults on 300 generated requests, 1,024 device pages, over tiers. */
static int run_tiered_300_opts(uint32_t host, uint32_t nvme, const char *path,
			       bool prefetch, struct eng_report *rep)
{
	struct wl_gen g = { .seed = 20261122, .requests = 300, .rate = 2 };
	struct workload wl;
	struct eng_opts o;
	int ret;

	eng_opts_default(&o);
	o.device_pages = 1024;
	o.host_pages = host;
	o.nvme_pages = nvme;
	o.nvme_file = path;
	if (!prefetch) {
		o.prefetch_budget = 0;
		o.admit_promotions = false;
	}
	ret = workload_generate(&g, &wl);
	if (ret)
		return ret;
	ret = eng_run(&wl, &o, rep);
	workload_free(&wl);
	return ret;
}

static int run_tiered_300(uint32_t host, uint32_t nvme, const char *path,
			  struct eng_report *rep)
{
	return run_tiered_300_opts(host, nvme, path, true, rep);
}

/*
 * Admission counts the pages a promotion will take, so no PROMOTE finds
 * the device without room (without that, many do and recompute); the
 * queue's head is prefetched, most of what comes up is then matched, and
 * the run is still the same run every time.
 */
static void engine_admission_counts_promotions(void)
{
	const char *tmp = getenv("TMPDIR");
	struct eng_report old, pf[2], nv;
	char path[512];
	uint32_t i;

	snprintf(path, sizeof(path), "%s/kvmm-engine-prefetch-%d.nvme",
		 tmp && *tmp ? tmp : "/tmp", (int)getpid());
	CU_ASSERT_EQUAL_FATAL(run_tiered_300_opts(1024, 0, NULL, false, &old), 0);
	for (i = 0; i < 2; i++)
		CU_ASSERT_EQUAL_FATAL(run_tiered_300(1024, 0, NULL, &pf[i]), 0);
	CU_ASSERT_EQUAL_FATAL(run_tiered_300(1024, 8192, path, &nv), 0);
	unlink(path);
	CU_ASSERT(old.check_ok && pf[0].check_ok && nv.check_ok);
	CU_ASSERT(old.promote_failed > 0);	/* what admission did not count */
	CU_ASSERT_EQUAL(old.prefetched_tokens, 0);
	CU_ASSERT_EQUAL(pf[0].promote_failed, 0);
	CU_ASSERT_EQUAL(nv.promote_failed, 0);
	CU_ASSERT(pf[0].prefetched_tokens > 0);
	CU_ASSERT(pf[0].prefetch_hit_tokens > 0);
	CU_ASSERT(pf[0].prefetch_hit_tokens <= pf[0].prefetched_tokens);
	CU_ASSERT(nv.prefetched_tokens > 0);
	CU_ASSERT(pf[0].cached_tokens >= pf[0].host_tokens);
	CU_ASSERT_EQUAL(pf[1].cached_tokens, pf[0].cached_tokens);
	CU_ASSERT_EQUAL(pf[1].prefetched_tokens, pf[0].prefetched_tokens);
	CU_ASSERT_EQUAL(pf[1].prefetch_hit_tokens, pf[0].prefetch_hit_tokens);
	CU_ASSERT_EQUAL(pf[1].steps, pf[0].steps);
	CU_ASSERT_DOUBLE_EQUAL(pf[1].ttft_p99, pf[0].ttft_p99, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(pf[1].sim_secs, pf[0].sim_secs, 1e-12);
	eng_report_free(&old);
	eng_report_free(&pf[0]);
	eng_report_free(&pf[1]);
	eng_report_free(&nv);
}

/*
 * A tiered run is the same run every time (what reaches NVMe, and when,
 * depends on the traffic alone: the writer writes, on the simulated
 * clock), even with the disk throttling it; and each tier added keeps at
 * least the hit rate of the configuration without it.
 */
static void engine_tiered_runs_repeat_and_add(void)
{
	const char *tmp = getenv("TMPDIR");
	struct eng_report none, host, nvme[3];
	char path[512];
	uint32_t i;

	snprintf(path, sizeof(path), "%s/kvmm-engine-repeat-%d.nvme", tmp && *tmp ? tmp : "/tmp",
		 (int)getpid());
	CU_ASSERT_EQUAL_FATAL(run_tiered_300(0, 0, NULL, &none), 0);
	CU_ASSERT_EQUAL_FATAL(run_tiered_300(1024, 0, NULL, &host), 0);
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL_FATAL(run_tiered_300(1024, 8192, path, &nvme[i]), 0);
	unlink(path);
	CU_ASSERT(nvme[0].check_ok);
	CU_ASSERT(nvme[0].nvme_tokens > 0);
	CU_ASSERT(nvme[0].throttle_pages > 0);	/* every page that went down was written by a step */
	CU_ASSERT_EQUAL(nvme[0].throttle_pages, nvme[0].nvme_demoted);
	for (i = 1; i < 3; i++) {
		CU_ASSERT_EQUAL(nvme[i].cached_tokens, nvme[0].cached_tokens);
		CU_ASSERT_EQUAL(nvme[i].host_tokens, nvme[0].host_tokens);
		CU_ASSERT_EQUAL(nvme[i].nvme_tokens, nvme[0].nvme_tokens);
		CU_ASSERT_EQUAL(nvme[i].nvme_demoted, nvme[0].nvme_demoted);
		CU_ASSERT_EQUAL(nvme[i].promote_failed, nvme[0].promote_failed);
		CU_ASSERT_EQUAL(nvme[i].steps, nvme[0].steps);
		CU_ASSERT_EQUAL(nvme[i].retractions, nvme[0].retractions);
		CU_ASSERT_DOUBLE_EQUAL(nvme[i].ttft_p50, nvme[0].ttft_p50, 1e-12);
		CU_ASSERT_DOUBLE_EQUAL(nvme[i].ttft_p99, nvme[0].ttft_p99, 1e-12);
		CU_ASSERT_DOUBLE_EQUAL(nvme[i].throttle_secs, nvme[0].throttle_secs, 1e-12);
		CU_ASSERT_DOUBLE_EQUAL(nvme[i].sim_secs, nvme[0].sim_secs, 1e-12);
	}
	CU_ASSERT(host.cached_tokens >= none.cached_tokens);
	CU_ASSERT(nvme[0].cached_tokens >= host.cached_tokens);
	eng_report_free(&none);
	eng_report_free(&host);
	for (i = 0; i < 3; i++)
		eng_report_free(&nvme[i]);
}

static void engine_generated_runs_end_clean_and_repeat(void)
{
	static const uint32_t pages[] = { 8192, 1200 };
	uint32_t i;

	for (i = 0; i < 2; i++) {
		struct eng_report a, b, nc, seq;

		CU_ASSERT_EQUAL_FATAL(run_generated(pages[i], false, false, "lru", &a), 0);
		CU_ASSERT_EQUAL_FATAL(run_generated(pages[i], false, false, "lru", &b), 0);
		CU_ASSERT_EQUAL(a.completed, a.requests);
		CU_ASSERT(a.check_ok);
		CU_ASSERT(a.cached_tokens > 0);
		/* deterministic: the same traffic gives the same run */
		CU_ASSERT_EQUAL(a.cached_tokens, b.cached_tokens);
		CU_ASSERT_EQUAL(a.steps, b.steps);
		CU_ASSERT_EQUAL(a.evicted_pages, b.evicted_pages);
		CU_ASSERT_EQUAL(a.retractions, b.retractions);
		CU_ASSERT_DOUBLE_EQUAL(a.ttft_p99, b.ttft_p99, 1e-12);
		CU_ASSERT_DOUBLE_EQUAL(a.sim_secs, b.sim_secs, 1e-12);
		/* no cache: nothing matched, nothing kept, everything computed */
		CU_ASSERT_EQUAL_FATAL(run_generated(pages[i], true, false, "lru", &nc), 0);
		CU_ASSERT_EQUAL(nc.cached_tokens, 0);
		if (!nc.retractions)
			CU_ASSERT_EQUAL(nc.prefill_tokens, nc.prompt_tokens);
		CU_ASSERT(nc.prefill_tokens >= nc.prompt_tokens);
		CU_ASSERT_EQUAL(nc.peak_cached, 0);
		CU_ASSERT(nc.check_ok);
		/* one at a time */
		CU_ASSERT_EQUAL_FATAL(run_generated(pages[i], false, true, "slru", &seq), 0);
		CU_ASSERT_EQUAL(seq.max_running_seen, 1);
		CU_ASSERT_EQUAL(seq.retractions, 0);
		CU_ASSERT(seq.check_ok);
		CU_ASSERT(seq.hit_blocks <= seq.blocks);
		eng_report_free(&a);
		eng_report_free(&b);
		eng_report_free(&nc);
		eng_report_free(&seq);
	}
}

int register_engine_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_engine", NULL, NULL);

	if (!s ||
	    !CU_add_test(s, "chunk arithmetic", engine_chunk_arithmetic) ||
	    !CU_add_test(s, "retract order", engine_retract_order) ||
	    !CU_add_test(s, "chunks are committed", engine_chunks_are_committed) ||
	    !CU_add_test(s, "retracts and re-admits", engine_retracts_and_readmits) ||
	    !CU_add_test(s, "lpm orders by cached prefix", engine_lpm_orders_by_cached_prefix) ||
	    !CU_add_test(s, "max wait bounds lpm starvation",
			 engine_max_wait_bounds_lpm_starvation) ||
	    !CU_add_test(s, "pool too small fails cleanly", engine_pool_too_small_fails_cleanly) ||
	    !CU_add_test(s, "generated runs end clean and repeat",
			 engine_generated_runs_end_clean_and_repeat) ||
	    !CU_add_test(s, "tiers keep the cache", engine_tiers_keep_the_cache) ||
	    !CU_add_test(s, "tiered runs repeat and add", engine_tiered_runs_repeat_and_add) ||
	    !CU_add_test(s, "admission counts promotions", engine_admission_counts_promotions) ||
	    !CU_add_test(s, "lookahead passes a head in free pages, or in cache",
			 engine_lookahead_passes_a_head_in_free_pages_or_cache) ||
	    !CU_add_test(s, "lookahead guard refuses a backfill that delays the head",
			 engine_lookahead_guard_refuses_a_backfill_that_delays_the_head) ||
	    !CU_add_test(s, "lookahead guard admits one done before the shadow",
			 engine_lookahead_guard_admits_one_done_before_the_shadow) ||
	    !CU_add_test(s, "lookahead guard admits one in the extra",
			 engine_lookahead_guard_admits_one_in_the_extra) ||
	    !CU_add_test(s, "lookahead guard comes before a promotion",
			 engine_lookahead_guard_comes_before_a_promotion))
		return -1;
	return 0;
}
