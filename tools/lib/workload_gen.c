// SPDX-License-Identifier: MIT
/*
 * tools/lib/workload_gen.c - generate prefix-sharing traffic: chats,
 * few-shot prompts and agents arriving as a Poisson process, built with
 * the same checks as a loaded workload (workload.c).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"
#include "workload.h"

/* ---- the generator ---- */

static uint64_t rng_next(uint64_t *s)
{
	return wl_mix64(*s += 0x9e3779b97f4a7c15ull);
}

static uint32_t rng_range(uint64_t *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rng_next(s) % (hi - lo + 1));
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

/* exponential with mean @mean */
static double rng_exp(uint64_t *s, double mean)
{
	return -mean * log(1.0 - rng_unit(s));
}

/* index in [0, n) with weight 1 / (i + 1): a few popular, a long tail */
static uint32_t rng_zipf(uint64_t *s, uint32_t n)
{
	double total = 0, x;
	uint32_t i;

	for (i = 0; i < n; i++)
		total += 1.0 / (i + 1);
	x = rng_unit(s) * total;
	for (i = 0; i < n - 1; i++) {
		x -= 1.0 / (i + 1);
		if (x < 0)
			break;
	}
	return i;
}

static uint32_t gen_segment(struct wl_loader *ld, uint64_t *s, uint32_t n)
{
	uint32_t *t = malloc(n * sizeof(*t)), i, id = ld->wl->nsegs;

	if (!t)
		return UINT32_MAX;
	for (i = 0; i < n; i++)
		t[i] = (uint32_t)(rng_next(s) % 32000);
	return wl_add_segment(ld, id, t, n) ? UINT32_MAX : id;
}

/* A request as generated, before requests are put in arrival order. */
struct gen_req {
	struct wl_request r;
	uint32_t order;
};

struct gen {
	struct wl_loader ld;
	uint64_t s;
	struct gen_req *reqs;
	uint32_t n, cap;
};

/*
 * One turn: the prompt is @parent's prompt and output (or @base segments
 * for a first turn) and a new segment of @add tokens; it arrives at @t.
 */
static int gen_turn(struct gen *g, int32_t parent, const uint32_t *base, uint32_t nbase,
		    uint32_t add, uint32_t out, double t, uint32_t kind, uint32_t prio)
{
	struct wl_request r = { .prev = parent, .t_ms = t, .kind = kind, .prio = prio };
	uint32_t seg = gen_segment(&g->ld, &g->s, add), i;

	r.output_seg = gen_segment(&g->ld, &g->s, out);
	if (seg == UINT32_MAX || r.output_seg == UINT32_MAX)
		return -ENOMEM;
	if (parent >= 0) {
		const struct wl_request *p = &g->reqs[parent].r;

		base = p->segs;
		nbase = p->nseg;
		r.turn = p->turn + 1;
		r.conv = p->conv;
	}
	r.nseg = nbase + (parent >= 0) + 1;
	r.segs = malloc(r.nseg * sizeof(*r.segs));
	if (!r.segs)
		return -ENOMEM;
	memcpy(r.segs, base, nbase * sizeof(*base));
	if (parent >= 0)
		r.segs[nbase] = g->reqs[parent].r.output_seg;
	r.segs[r.nseg - 1] = seg;
	for (i = 0; i < r.nseg; i++)
		r.prompt_len += g->ld.wl->seg_len[r.segs[i]];
	r.output_len = out;
	if (g->n == g->cap) {
		uint32_t cap = g->cap ? g->cap * 2 : 1024;
		struct gen_req *n = realloc(g->reqs, cap * sizeof(*n));

		if (!n) {
			free(r.segs);
			return -ENOMEM;
		}
		g->reqs = n;
		g->cap = cap;
	}
	g->reqs[g->n].r = r;
	g->reqs[g->n].order = g->n;
	g->n++;
	return 0;
}

static int cmp_gen(const void *a, const void *b)
{
	const struct gen_req *x = a, *y = b;

	if (x->r.t_ms != y->r.t_ms)
		return x->r.t_ms < y->r.t_ms ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

/*
 * A session of @kind starting at @t (ms): a chat of 1-6 turns over one of
 * 8 shared system prompts, with a user's think time between turns; a
 * few-shot prompt (one of 4 long shared headers and a short question);
 * or an agent: a long task context from which 2-6 branches run a few
 * tool-call steps each, seconds apart.
 */
static int gen_session(struct gen *g, uint32_t kind, double t, uint32_t conv,
		       const uint32_t *sys, const uint32_t *shots, const uint32_t *tools)
{
	uint32_t turns, b, k, base[2];
	int32_t prev;
	int ret = 0;

	switch (kind) {
	case WL_KIND_CHAT:
		base[0] = sys[rng_zipf(&g->s, 8)];
		turns = 1 + rng_zipf(&g->s, 6);
		prev = -1;
		for (k = 0; k < turns && !ret; k++) {
			ret = gen_turn(g, prev, base, 1, rng_range(&g->s, 30, 300),
				       rng_range(&g->s, 50, 300), t, kind, 2);
			g->reqs[g->n - 1].r.conv = conv;
			prev = (int32_t)g->n - 1;
			t += 2000 + rng_exp(&g->s, 20000);
		}
		return ret;
	case WL_KIND_FEWSHOT:
		base[0] = shots[rng_zipf(&g->s, 4)];
		ret = gen_turn(g, -1, base, 1, rng_range(&g->s, 20, 120),
			       rng_range(&g->s, 5, 60), t, kind, 0);
		if (!ret)
			g->reqs[g->n - 1].r.conv = conv;
		return ret;
	case WL_KIND_AGENT:
		base[0] = tools[rng_zipf(&g->s, 2)];
		base[1] = gen_segment(&g->ld, &g->s, rng_range(&g->s, 2000, 6000));
		if (base[1] == UINT32_MAX)
			return -ENOMEM;
		for (b = rng_range(&g->s, 2, 6); b && !ret; b--) {
			double tb = t + rng_unit(&g->s) * 2000;

			prev = -1;
			for (k = rng_range(&g->s, 1, 4); k && !ret; k--) {
				ret = gen_turn(g, prev, base, 2, rng_range(&g->s, 20, 400),
					       rng_range(&g->s, 20, 150), tb, kind, 1);
				g->reqs[g->n - 1].r.conv = conv;
				prev = (int32_t)g->n - 1;
				tb += 500 + rng_exp(&g->s, 1500);
			}
		}
		return ret;
	}
	return -EINVAL;
}

/**
 * workload_generate() - deterministic prefix-sharing traffic
 * @gp: seed, about how many requests, sessions started per second
 * @wl: out, requests in arrival order (t_ms), each turn after its previous
 *
 * Sessions start as a Poisson process: 55% chats, 20% few-shot prompts,
 * 25% agents (see gen_session()).  Priorities: chat 2, agent 1, few-shot 0.
 *
 * Return: 0, -EINVAL for no requests or rate, or -ENOMEM.
 */
int workload_generate(const struct wl_gen *gp, struct workload *wl)
{
	struct gen g = { .ld = { .path = "(generated)", .wl = wl }, .s = gp->seed };
	uint32_t sys[8], shots[4], tools[2], i, conv = 0, *rank = NULL;
	double t = 0;
	int ret = -ENOMEM;

	memset(wl, 0, sizeof(*wl));
	if (!gp->requests || !(gp->rate > 0))
		return -EINVAL;
	for (i = 0; i < 8; i++)
		if ((sys[i] = gen_segment(&g.ld, &g.s, rng_range(&g.s, 300, 2000))) == UINT32_MAX)
			goto out;
	for (i = 0; i < 4; i++)
		if ((shots[i] = gen_segment(&g.ld, &g.s, rng_range(&g.s, 1500, 3000))) == UINT32_MAX)
			goto out;
	for (i = 0; i < 2; i++)
		if ((tools[i] = gen_segment(&g.ld, &g.s, rng_range(&g.s, 1000, 2000))) == UINT32_MAX)
			goto out;
	while (g.n < gp->requests) {
		double u = rng_unit(&g.s);
		uint32_t kind = u < 0.55 ? WL_KIND_CHAT : u < 0.75 ? WL_KIND_FEWSHOT : WL_KIND_AGENT;

		t += rng_exp(&g.s, 1000.0 / gp->rate);
		ret = gen_session(&g, kind, t, conv++, sys, shots, tools);
		if (ret)
			goto out;
	}
	/* arrival order; a later turn always arrives after its previous one */
	qsort(g.reqs, g.n, sizeof(*g.reqs), cmp_gen);
	rank = malloc(g.n * sizeof(*rank));
	ret = -ENOMEM;
	if (!rank)
		goto out;
	for (i = 0; i < g.n; i++)
		rank[g.reqs[i].order] = i;
	for (i = 0; i < g.n; i++) {
		struct wl_request r = g.reqs[i].r;

		r.id = r.arrival = i;
		r.prev = r.prev >= 0 ? (int32_t)rank[r.prev] : -1;
		g.reqs[i].r.segs = NULL;
		ret = wl_add_request(&g.ld, &r);
		if (ret)
			goto out;
	}
	wl->max_inflight = 16;
	wl->has_time = true;
	wl->outputs_known = true;
	ret = 0;
out:
	for (i = 0; i < g.n; i++)
		free(g.reqs[i].r.segs);
	free(g.reqs);
	free(rank);
	if (ret)
		workload_free(wl);
	return ret;
}
