// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/workload.c - read the shared multi-turn workload (the
 * text form, or the JSON-lines form through jansson), or generate one.
 *
 * Every record is checked as it is read: a segment used before it is
 * defined, a prompt whose length disagrees with its segments, an output
 * longer than its segment, a malformed line: each stops the load with the
 * file, line and reason, and nothing half-loaded is returned.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "autoconf.h"
#include "bench.h"

#if CONFIG_KVMM_JANSSON
#include <jansson.h>
#endif

struct loader {
	const char *path;
	unsigned long line;
	struct workload *wl;
	uint32_t seg_cap, req_cap;
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
	if (sum != r->prompt_len || !r->prompt_len || r->output_seg >= wl->nsegs ||
	    r->output_len > wl->seg_len[r->output_seg] ||
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

static int load_text(struct loader *ld, FILE *f)
{
	char *line = NULL;
	size_t cap = 0;
	int ret = 0;

	while (getline(&line, &cap, f) > 0) {
		ld->line++;
		ret = text_line(ld, line);
		if (ret)
			break;
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

static int json_line(struct loader *ld, const char *text)
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

static int load_jsonl(struct loader *ld, FILE *f)
{
	char *line = NULL;
	size_t cap = 0;
	int ret = 0;

	while (getline(&line, &cap, f) > 0) {
		ld->line++;
		if (line[0] == '\n' || line[0] == '\0')
			continue;
		ret = json_line(ld, line);
		if (ret)
			break;
	}
	free(line);
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
		ret = load_jsonl(&ld, f);
#else
		fprintf(stderr, "%s: this build has no JSON reader (libjansson-dev); "
			"use the .txt form\n", path);
		ret = -EOPNOTSUPP;
#endif
	} else {
		ret = load_text(&ld, f);
	}
	fclose(f);
	if (!ret && !wl->nreq) {
		fprintf(stderr, "%s: no requests\n", path);
		ret = -EINVAL;
	}
	if (!ret && !wl->max_inflight)
		wl->max_inflight = 16;
	if (ret)
		workload_free(wl);
	return ret;
}

/* ---- a generated workload, for the demo: the same shape, smaller ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rng_range(uint64_t *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rng_next(s) % (hi - lo + 1));
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

/**
 * workload_generate() - a deterministic multi-turn workload
 * @seed: RNG seed
 * @nconv: conversations
 * @wl: out
 *
 * 8 system prompts of 500-2,000 tokens picked with a skew towards the
 * first ones; each conversation has 1-4 turns; a turn adds a 50-300 token
 * user suffix and generates 50-200 tokens; turn k+1's prompt is turn k's
 * prompt, its output and a new suffix.  Conversations interleave.
 *
 * Return: 0 or -ENOMEM.
 */
int workload_generate(uint64_t seed, uint32_t nconv, struct workload *wl)
{
	struct loader ld = { .path = "(generated)", .wl = wl };
	uint32_t sys[8], c, i, nsys = 8, turns_total = 0;
	uint32_t (*conv)[3];	/* next turn, turns, last request */
	uint64_t s = seed;

	memset(wl, 0, sizeof(*wl));
	conv = calloc(nconv, sizeof(*conv));
	if (!conv)
		return -ENOMEM;
	for (i = 0; i < nsys; i++)
		if ((sys[i] = gen_segment(&ld, &s, rng_range(&s, 500, 2000))) == UINT32_MAX)
			goto out_nomem;
	for (c = 0; c < nconv; c++) {
		conv[c][1] = rng_range(&s, 1, 4);
		turns_total += conv[c][1];
	}
	while (wl->nreq < turns_total) {
		struct wl_request r = { .id = wl->nreq, .arrival = wl->nreq, .prev = -1 };
		uint32_t user, out, k;

		do {
			c = (uint32_t)(rng_next(&s) % nconv);
		} while (conv[c][0] == conv[c][1]);
		r.conv = c;
		r.turn = conv[c][0];
		user = gen_segment(&ld, &s, rng_range(&s, 50, 300));
		out = gen_segment(&ld, &s, rng_range(&s, 50, 200));
		if (user == UINT32_MAX || out == UINT32_MAX)
			goto out_nomem;
		if (r.turn) {
			const struct wl_request *p = &wl->reqs[conv[c][2]];

			r.prev = (int32_t)p->id;
			r.nseg = p->nseg + 2;
			r.segs = malloc(r.nseg * sizeof(*r.segs));
			if (!r.segs)
				goto out_nomem;
			memcpy(r.segs, p->segs, p->nseg * sizeof(*r.segs));
			r.segs[p->nseg] = p->output_seg;
			r.segs[p->nseg + 1] = user;
		} else {
			/* skewed: system prompt i with weight ~ 1 / (i + 1) */
			uint32_t pick = (uint32_t)(rng_next(&s) % 1000), acc = 0;

			for (k = 0; k < nsys - 1; k++) {
				acc += 1000 / (k + 2);
				if (pick < acc)
					break;
			}
			r.nseg = 2;
			r.segs = malloc(2 * sizeof(*r.segs));
			if (!r.segs)
				goto out_nomem;
			r.segs[0] = sys[k];
			r.segs[1] = user;
		}
		for (k = 0; k < r.nseg; k++)
			r.prompt_len += wl->seg_len[r.segs[k]];
		r.output_seg = out;
		r.output_len = wl->seg_len[out];
		if (add_request(&ld, &r))
			goto out_nomem;
		conv[c][2] = r.id;
		conv[c][0]++;
	}
	wl->max_inflight = 16;
	free(conv);
	return 0;

out_nomem:
	free(conv);
	workload_free(wl);
	return -ENOMEM;
}
