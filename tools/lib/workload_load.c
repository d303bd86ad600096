// SPDX-License-Identifier: MIT
/*
 * tools/lib/workload_load.c - read the shared multi-turn workload (the
 * text form, or the JSON-lines form through jansson) or a Mooncake trace.
 *
 * Every record is checked as it is read (see wl_add_request()): a
 * malformed line stops the load with the file, line and reason, and
 * nothing half-loaded is returned.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tools.h"
#include "workload.h"

/* ---- text form ---- */

static int next_u32(struct wl_loader *ld, char **p, uint32_t *v)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(*p, &end, 10);
	if (end == *p || errno || x > UINT32_MAX)
		return wl_bad(ld, "expected an unsigned number");
	*p = end;
	*v = (uint32_t)x;
	return 0;
}

/* prev: a request id or -1 */
static int next_prev(struct wl_loader *ld, char **p, int32_t *v)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(*p, &end, 10);
	if (end == *p || errno || x < -1 || x > INT32_MAX)
		return wl_bad(ld, "expected a request id or -1");
	*p = end;
	*v = (int32_t)x;
	return 0;
}

static int text_line(struct wl_loader *ld, char *p)
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
			return wl_bad(ld, "out of memory");
		for (i = 0; i < v[1]; i++) {
			if ((ret = next_u32(ld, &p, &arr[i]))) {
				free(arr);
				return ret;
			}
		}
		return wl_add_segment(ld, v[0], arr, v[1]);
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
			return wl_bad(ld, "out of memory");
		for (i = 0; i < r.nseg; i++) {
			if ((ret = next_u32(ld, &p, &r.segs[i]))) {
				free(r.segs);
				return ret;
			}
		}
		return wl_add_request(ld, &r);
	}
	default:
		return wl_bad(ld, "unknown record type");
	}
}

/* Each non-empty line of @f to @fn, counting lines for messages; stops at an error. */
static int load_lines(struct wl_loader *ld, FILE *f, int (*fn)(struct wl_loader *ld, char *line))
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

static int json_u32(struct wl_loader *ld, json_t *obj, const char *key, uint32_t *v)
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

static int json_array_u32(struct wl_loader *ld, json_t *obj, const char *key,
			  uint32_t **arrp, uint32_t *np)
{
	json_t *a = json_object_get(obj, key), *x;
	uint32_t *arr;
	size_t i;

	if (!json_is_array(a))
		return wl_bad(ld, "expected an array");
	arr = malloc((json_array_size(a) ? json_array_size(a) : 1) * sizeof(*arr));
	if (!arr)
		return wl_bad(ld, "out of memory");
	json_array_foreach(a, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > UINT32_MAX) {
			free(arr);
			return wl_bad(ld, "array element is not a token id");
		}
		arr[i] = (uint32_t)json_integer_value(x);
	}
	*arrp = arr;
	*np = (uint32_t)json_array_size(a);
	return 0;
}

static int json_line(struct wl_loader *ld, char *text)
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
		ret = wl_bad(ld, "record has no \"type\"");
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
			ret = wl_add_segment(ld, id, tokens, n);
	} else if (!strcmp(type, "request")) {
		struct wl_request r = { 0 };
		json_t *prev = json_object_get(o, "prev");

		ret = json_u32(ld, o, "id", &r.id) ?: json_u32(ld, o, "arrival", &r.arrival) ?:
		      json_u32(ld, o, "conv", &r.conv) ?: json_u32(ld, o, "turn", &r.turn) ?:
		      json_u32(ld, o, "prompt_len", &r.prompt_len) ?:
		      json_u32(ld, o, "output_segment", &r.output_seg) ?:
		      json_u32(ld, o, "output_len", &r.output_len);
		if (!ret && !json_is_integer(prev))
			ret = wl_bad(ld, "field \"prev\" missing");
		if (!ret && json_is_number(json_object_get(o, "t_ms")))
			r.t_ms = json_number_value(json_object_get(o, "t_ms"));
		else
			ld->no_time = true;
		if (!ret) {
			r.prev = (int32_t)json_integer_value(prev);
			ret = json_array_u32(ld, o, "prompt_segments", &r.segs, &r.nseg);
		}
		if (!ret)
			ret = wl_add_request(ld, &r);
	} else {
		ret = wl_bad(ld, "unknown record type");
	}
	json_decref(o);
	return ret;
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
	struct wl_loader ld = { .path = path, .wl = wl };
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
		ret = load_lines(&ld, f, json_line);
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

static int mooncake_line(struct wl_loader *ld, char *text)
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
		ret = wl_bad(ld, "field \"timestamp\" missing or negative");
	if (!ret && (!json_is_array(ids) || !json_array_size(ids) ||
		     json_array_size(ids) != ((size_t)r.prompt_len + WL_BLOCK - 1) / WL_BLOCK))
		ret = wl_bad(ld, "needs one hash id per 512 tokens of input_length");
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
			return wl_bad(ld, "out of memory");
		}
		wl->blk_ids = n;
		ld->blk_cap = cap;
	}
	json_array_foreach(ids, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0) {
			json_decref(o);
			return wl_bad(ld, "a hash id is not a non-negative integer");
		}
		wl->blk_ids[wl->total_blocks + i] = (uint64_t)json_integer_value(x);
	}
	json_decref(o);
	if (wl->nreq && r.t_ms < wl->reqs[wl->nreq - 1].t_ms)
		return wl_bad(ld, "timestamps go backwards");
	ret = wl_add_request(ld, &r);
	if (!ret)
		wl->total_blocks += r.nblk;
	return ret;
}

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
	struct wl_loader ld = { .path = path, .wl = wl };
	int ret;
	FILE *f;

	memset(wl, 0, sizeof(*wl));
	f = fopen(path, "r");
	if (!f) {
		ret = -errno;
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return ret;
	}
	ret = load_lines(&ld, f, mooncake_line);
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
