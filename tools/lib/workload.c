// SPDX-License-Identifier: MIT
/*
 * tools/lib/workload.c - read the shared multi-turn workload (the text
 * form, or the JSON-lines form through jansson) or a Mooncake trace, or
 * generate prefix-sharing traffic.
 *
 * Every record is checked as it is read: a segment used before it is
 * defined, a prompt whose length disagrees with its segments, an output
 * longer than its segment, a malformed line: each stops the load with the
 * file, line and reason, and nothing half-loaded is returned.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autoconf.h"
#include "tools.h"

#if CONFIG_KVMM_JANSSON
#include <jansson.h>
#endif

struct loader {
	const char *path;
	unsigned long line;
	struct workload *wl;
	uint32_t seg_cap, req_cap;
	uint64_t blk_cap;
	bool no_time;		/* a request without t_ms */
};

static int bad(struct loader *ld, const char *why)
{
	fprintf(stderr, "%s:%lu: %s\n", ld->path, ld->line, why);
	return -EINVAL;
}

static int add_segment(struct loader *ld, uint32_t id, uint32_t *tokens, uint32_t n)
{
	struct workload *wl = ld->wl;

	if (id != wl->nsegs) {
		free(tokens);
		return bad(ld, "segment ids must be dense and in order");
	}
	if (wl->nsegs == ld->seg_cap) {
		uint32_t cap = ld->seg_cap ? ld->seg_cap * 2 : 1024;
		uint32_t **t = realloc(wl->seg_tokens, cap * sizeof(*t));
		uint32_t *l = t ? realloc(wl->seg_len, cap * sizeof(*l)) : NULL;

		if (t)
			wl->seg_tokens = t;
		if (!l) {
			free(tokens);
			return bad(ld, "out of memory");
		}
		wl->seg_len = l;
		ld->seg_cap = cap;
	}
	wl->seg_tokens[id] = tokens;
	wl->seg_len[id] = n;
	wl->nsegs++;
	return 0;
}

static int add_request(struct loader *ld, struct wl_request *r)
{
	struct workload *wl = ld->wl;
	uint64_t sum = 0;
	uint32_t i;

	for (i = 0; i < r->nseg; i++) {
		if (r->segs[i] >= wl->nsegs)
			goto out_bad;
		sum += wl->seg_len[r->segs[i]];
	}
	if (r->nblk) {
		/* block form: one id per WL_BLOCK tokens, the last one cut */
		sum = r->prompt_len;
		if ((uint64_t)(r->nblk - 1) * WL_BLOCK >= r->prompt_len ||
		    (uint64_t)r->nblk * WL_BLOCK < r->prompt_len)
			goto out_bad;
	} else if (r->output_seg >= wl->nsegs || r->output_len > wl->seg_len[r->output_seg]) {
		goto out_bad;
	}
	if (sum != r->prompt_len || !r->prompt_len ||
	    (r->prev >= 0 && (uint32_t)r->prev >= wl->nreq) || r->id != wl->nreq)
		goto out_bad;
	if (wl->nreq == ld->req_cap) {
		uint32_t cap = ld->req_cap ? ld->req_cap * 2 : 1024;
		struct wl_request *t = realloc(wl->reqs, cap * sizeof(*t));

		if (!t) {
			free(r->segs);
			return bad(ld, "out of memory");
		}
		wl->reqs = t;
		ld->req_cap = cap;
	}
	wl->reqs[wl->nreq++] = *r;
	wl->prompt_tokens += r->prompt_len;
	wl->output_tokens += r->output_len;
	if (r->prompt_len + r->output_len > wl->max_seq_len)
		wl->max_seq_len = r->prompt_len + r->output_len;
	return 0;

out_bad:
	free(r->segs);
	return bad(ld, "request refers to a missing segment or request, or its "
		       "prompt_len disagrees with its segments");
}

/* ---- text form ---- */

static int next_u32(struct loader *ld, char **p, uint32_t *v)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(*p, &end, 10);
	if (end == *p || errno || x > UINT32_MAX)
		return bad(ld, "expected an unsigned number");
	*p = end;
	*v = (uint32_t)x;
	return 0;
}

/* prev: a request id or -1 */
static int next_prev(struct loader *ld, char **p, int32_t *v)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(*p, &end, 10);
	if (end == *p || errno || x < -1 || x > INT32_MAX)
		return bad(ld, "expected a request id or -1");
	*p = end;
	*v = (int32_t)x;
	return 0;
}

static int text_line(struct loader *ld, char *p)
{
	struct workload *wl = ld->wl;
	uint32_t v[9], i, *arr;
	char *key;
	int ret;

	switch (*p) {
	case '#': case '\0': case '\n':
		return 0;
	case 'M':
		key = p + 2;
		if (!strncmp(key, "capacity_tokens ", 16))
			wl->capacity_tokens = strtoull(key + 16, NULL, 10);
		else if (!strncmp(key, "max_inflight ", 13))
			wl->max_inflight = (uint32_t)strtoul(key + 13, NULL, 10);
		return 0;
	case 'S':
		p++;
		if ((ret = next_u32(ld, &p, &v[0])))
			return ret;
		while (*p == ' ')
			p++;
		while (*p && *p != ' ')
			p++;
		if ((ret = next_u32(ld, &p, &v[1])))
			return ret;
		arr = malloc((v[1] ? v[1] : 1) * sizeof(*arr));
		if (!arr)
			return bad(ld, "out of memory");
		for (i = 0; i < v[1]; i++) {
			if ((ret = next_u32(ld, &p, &arr[i]))) {
				free(arr);
				return ret;
			}
		}
		return add_segment(ld, v[0], arr, v[1]);
	case 'R': {
		struct wl_request r = { 0 };

		p++;
		for (i = 0; i < 9; i++) {
			ret = i == 4 ? next_prev(ld, &p, &r.prev) : next_u32(ld, &p, &v[i]);
			if (ret)
				return ret;
		}
		r.id = v[0];
		r.arrival = v[1];
		r.conv = v[2];
		r.turn = v[3];
		r.prompt_len = v[5];
		r.output_seg = v[6];
		r.output_len = v[7];
		r.nseg = v[8];
		ld->no_time = true;
		r.segs = malloc((r.nseg ? r.nseg : 1) * sizeof(*r.segs));
		if (!r.segs)
			return bad(ld, "out of memory");
		for (i = 0; i < r.nseg; i++) {
			if ((ret = next_u32(ld, &p, &r.segs[i]))) {
				free(r.segs);
				return ret;
			}
		}
		return add_request(ld, &r);
	}
	default:
		return bad(ld, "unknown record type");
	}
}

/* Each non-empty line of @f to @fn, counting lines for messages; stops at an error. */
static int load_lines(struct loader *ld, FILE *f, int (*fn)(struct loader *ld, char *line))
{
	char *line = NULL;
	size_t cap = 0;
	int ret = 0;

	while (!ret && getline(&line, &cap, f) > 0) {
		ld->line++;
		if (line[0] != '\n' && line[0])
			ret = fn(ld, line);
	}
	free(line);
	return ret;
}

#if CONFIG_KVMM_JANSSON
static int json_u32(struct loader *ld, json_t *obj, const char *key, uint32_t *v)
{
	json_t *x = json_object_get(obj, key);

	if (!json_is_integer(x) || json_integer_value(x) < 0 ||
	    json_integer_value(x) > UINT32_MAX) {
		fprintf(stderr, "%s:%lu: field \"%s\" missing or not a count\n",
			ld->path, ld->line, key);
		return -EINVAL;
	}
	*v = (uint32_t)json_integer_value(x);
	return 0;
}

static int json_array_u32(struct loader *ld, json_t *obj, const char *key,
			  uint32_t **arrp, uint32_t *np)
{
	json_t *a = json_object_get(obj, key), *x;
	uint32_t *arr;
	size_t i;

	if (!json_is_array(a))
		return bad(ld, "expected an array");
	arr = malloc((json_array_size(a) ? json_array_size(a) : 1) * sizeof(*arr));
	if (!arr)
		return bad(ld, "out of memory");
	json_array_foreach(a, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > UINT32_MAX) {
			free(arr);
			return bad(ld, "array element is not a token id");
		}
		arr[i] = (uint32_t)json_integer_value(x);
	}
	*arrp = arr;
	*np = (uint32_t)json_array_size(a);
	return 0;
}

static int json_line(struct loader *ld, char *text)
{
	struct workload *wl = ld->wl;
	json_error_t err;
	json_t *o = json_loads(text, 0, &err);
	const char *type;
	int ret = 0;

	if (!o) {
		fprintf(stderr, "%s:%lu:%d: %s\n", ld->path, ld->line, err.column, err.text);
		return -EINVAL;
	}
	type = json_string_value(json_object_get(o, "type"));
	if (!type) {
		ret = bad(ld, "record has no \"type\"");
	} else if (!strcmp(type, "meta")) {
		json_t *c = json_object_get(o, "capacity_tokens");
		json_t *m = json_object_get(o, "max_inflight");

		if (json_is_integer(c))
			wl->capacity_tokens = (uint64_t)json_integer_value(c);
		if (json_is_integer(m))
			wl->max_inflight = (uint32_t)json_integer_value(m);
	} else if (!strcmp(type, "segment")) {
		uint32_t id, n, *tokens;

		ret = json_u32(ld, o, "id", &id);
		if (!ret)
			ret = json_array_u32(ld, o, "tokens", &tokens, &n);
		if (!ret)
			ret = add_segment(ld, id, tokens, n);
	} else if (!strcmp(type, "request")) {
		struct wl_request r = { 0 };
		json_t *prev = json_object_get(o, "prev");

		ret = json_u32(ld, o, "id", &r.id) ?: json_u32(ld, o, "arrival", &r.arrival) ?:
		      json_u32(ld, o, "conv", &r.conv) ?: json_u32(ld, o, "turn", &r.turn) ?:
		      json_u32(ld, o, "prompt_len", &r.prompt_len) ?:
		      json_u32(ld, o, "output_segment", &r.output_seg) ?:
		      json_u32(ld, o, "output_len", &r.output_len);
		if (!ret && !json_is_integer(prev))
			ret = bad(ld, "field \"prev\" missing");
		if (!ret && json_is_number(json_object_get(o, "t_ms")))
			r.t_ms = json_number_value(json_object_get(o, "t_ms"));
		else
			ld->no_time = true;
		if (!ret) {
			r.prev = (int32_t)json_integer_value(prev);
			ret = json_array_u32(ld, o, "prompt_segments", &r.segs, &r.nseg);
		}
		if (!ret)
			ret = add_request(ld, &r);
	} else {
		ret = bad(ld, "unknown record type");
	}
	json_decref(o);
	return ret;
}

#endif

void workload_free(struct workload *wl)
{
	uint32_t i;

	for (i = 0; i < wl->nsegs; i++)
		free(wl->seg_tokens[i]);
	for (i = 0; i < wl->nreq; i++)
		free(wl->reqs[i].segs);
	free(wl->blk_ids);
	free(wl->seg_tokens);
	free(wl->seg_len);
	free(wl->reqs);
	memset(wl, 0, sizeof(*wl));
}

/**
 * workload_load() - read a workload file, .jsonl or text
 * @path: the file
 * @wl: out
 *
 * Return: 0, or a negative errno after printing why.
 */
int workload_load(const char *path, struct workload *wl)
{
	struct loader ld = { .path = path, .wl = wl };
	size_t len = strlen(path);
	FILE *f;
	int ret;

	memset(wl, 0, sizeof(*wl));
	f = fopen(path, "r");
	if (!f) {
		ret = -errno;
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return ret;
	}
	if (len > 6 && !strcmp(path + len - 6, ".jsonl")) {
#if CONFIG_KVMM_JANSSON
		ret = load_lines(&ld, f, json_line);
#else
		fprintf(stderr, "%s: this build has no JSON reader (libjansson-dev); "
			"use the .txt form\n", path);
		ret = -EOPNOTSUPP;
#endif
	} else {
		ret = load_lines(&ld, f, text_line);
	}
	fclose(f);
	if (!ret && !wl->nreq) {
		fprintf(stderr, "%s: no requests\n", path);
		ret = -EINVAL;
	}
	if (!ret && !wl->max_inflight)
		wl->max_inflight = 16;
	wl->has_time = !ld.no_time;
	wl->outputs_known = true;
	if (ret)
		workload_free(wl);
	return ret;
}


/* ---- Mooncake traces: JSON lines of timestamp, lengths and hash ids ---- */

#if CONFIG_KVMM_JANSSON
static int mooncake_line(struct loader *ld, char *text)
{
	struct workload *wl = ld->wl;
	struct wl_request r = { .id = wl->nreq, .arrival = wl->nreq, .prev = -1,
				.output_seg = WL_NO_SEG, .kind = WL_KIND_FILE };
	json_error_t err;
	json_t *o = json_loads(text, 0, &err), *ids, *x;
	uint64_t cap = 0;
	size_t i;
	int ret;

	if (!o) {
		fprintf(stderr, "%s:%lu:%d: %s\n", ld->path, ld->line, err.column, err.text);
		return -EINVAL;
	}
	ids = json_object_get(o, "hash_ids");
	x = json_object_get(o, "timestamp");
	ret = json_u32(ld, o, "input_length", &r.prompt_len) ?:
	      json_u32(ld, o, "output_length", &r.output_len);
	if (!ret && (!json_is_number(x) || json_number_value(x) < 0))
		ret = bad(ld, "field \"timestamp\" missing or negative");
	if (!ret && (!json_is_array(ids) || !json_array_size(ids) ||
		     json_array_size(ids) != ((size_t)r.prompt_len + WL_BLOCK - 1) / WL_BLOCK))
		ret = bad(ld, "needs one hash id per 512 tokens of input_length");
	if (ret) {
		json_decref(o);
		return ret;
	}
	r.t_ms = json_number_value(x);
	r.nblk = (uint32_t)json_array_size(ids);
	r.blk_first = wl->total_blocks;
	if (wl->total_blocks + r.nblk > ld->blk_cap) {
		uint64_t *n;

		cap = ld->blk_cap ? ld->blk_cap * 2 : 1 << 16;
		while (cap < wl->total_blocks + r.nblk)
			cap *= 2;
		n = realloc(wl->blk_ids, cap * sizeof(*n));

		if (!n) {
			json_decref(o);
			return bad(ld, "out of memory");
		}
		wl->blk_ids = n;
		ld->blk_cap = cap;
	}
	json_array_foreach(ids, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0) {
			json_decref(o);
			return bad(ld, "a hash id is not a non-negative integer");
		}
		wl->blk_ids[wl->total_blocks + i] = (uint64_t)json_integer_value(x);
	}
	json_decref(o);
	if (wl->nreq && r.t_ms < wl->reqs[wl->nreq - 1].t_ms)
		return bad(ld, "timestamps go backwards");
	ret = add_request(ld, &r);
	if (!ret)
		wl->total_blocks += r.nblk;
	return ret;
}
#endif

/**
 * workload_load_mooncake() - read a Mooncake trace
 * @path: JSON lines with timestamp (ms), input_length, output_length and
 *	  hash_ids (one per 512-token block; equal ids mean equal prefixes)
 * @wl: out; prompts come from workload_prompt(), outputs are not known
 *
 * Return: 0, or a negative errno after printing why.
 */
int workload_load_mooncake(const char *path, struct workload *wl)
{
	struct loader ld = { .path = path, .wl = wl };
	int ret = -EOPNOTSUPP;
	FILE *f;

	memset(wl, 0, sizeof(*wl));
	f = fopen(path, "r");
	if (!f) {
		ret = -errno;
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return ret;
	}
#if CONFIG_KVMM_JANSSON
	ret = load_lines(&ld, f, mooncake_line);
#else
	fprintf(stderr, "%s: this build has no JSON reader (libjansson-dev)\n", path);
#endif
	fclose(f);
	if (!ret && !wl->nreq) {
		fprintf(stderr, "%s: no requests\n", path);
		ret = -EINVAL;
	}
	wl->has_time = true;
	wl->max_inflight = 16;
	if (ret)
		workload_free(wl);
	return ret;
}

/* ---- token ids ---- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Token k of block id h at block position j: a function of (h, j, k)
 * alone, below 100,000, so equal ids share and different ids (almost
 * surely) diverge at their first token.
 */
static uint32_t block_token(uint64_t h, uint32_t j, uint32_t k)
{
	return (uint32_t)(mix64(h * 0x9e3779b97f4a7c15ull ^ ((uint64_t)j << 32 | k)) % 100000);
}

/* workload_prompt() - the prompt's prompt_len token ids into @tok */
void workload_prompt(const struct workload *wl, const struct wl_request *r, uint32_t *tok)
{
	uint32_t i, j, k, pos = 0;

	if (r->nblk) {
		for (j = 0; j < r->nblk; j++)
			for (k = 0; k < WL_BLOCK && pos < r->prompt_len; k++)
				tok[pos++] = block_token(wl->blk_ids[r->blk_first + j], j, k);
		return;
	}
	for (i = 0; i < r->nseg; i++) {
		memcpy(tok + pos, wl->seg_tokens[r->segs[i]],
		       wl->seg_len[r->segs[i]] * sizeof(*tok));
		pos += wl->seg_len[r->segs[i]];
	}
}

/* workload_tokens() - prompt_len + output_len token ids: the prompt, then the output */
void workload_tokens(const struct workload *wl, const struct wl_request *r, uint32_t *tok)
{
	uint32_t i;

	workload_prompt(wl, r, tok);
	for (i = 0; i < r->output_len; i++)
		tok[r->prompt_len + i] = workload_output_token(wl, r, i);
}

/*
 * Output token @i: from the output segment where the workload has one;
 * otherwise a per-request id at or above 100,000, never a prompt token.
 */
uint32_t workload_output_token(const struct workload *wl, const struct wl_request *r,
			       uint32_t i)
{
	if (r->output_seg != WL_NO_SEG)
		return wl->seg_tokens[r->output_seg][i];
	return 100000 + (uint32_t)(mix64((uint64_t)r->id << 32 | i) % 1000000000u);
}

/* ---- the generator ---- */

static uint64_t rng_next(uint64_t *s)
{
	return mix64(*s += 0x9e3779b97f4a7c15ull);
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

static uint32_t gen_segment(struct loader *ld, uint64_t *s, uint32_t n)
{
	uint32_t *t = malloc(n * sizeof(*t)), i, id = ld->wl->nsegs;

	if (!t)
		return UINT32_MAX;
	for (i = 0; i < n; i++)
		t[i] = (uint32_t)(rng_next(s) % 32000);
	return add_segment(ld, id, t, n) ? UINT32_MAX : id;
}

/* A request as generated, before requests are put in arrival order. */
struct gen_req {
	struct wl_request r;
	uint32_t order;
};

struct gen {
	struct loader ld;
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
		ret = add_request(&g.ld, &r);
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
