// SPDX-License-Identifier: MIT
/*
 * tools/lib/workload.c - the workload in memory: building it record by
 * record (which the loaders in workload_load.c and the generator in
 * workload_gen.c share), freeing it, and the token ids of its prompts and
 * outputs.
 *
 * Every record is checked as it is added: a segment used before it is
 * defined, a prompt whose length disagrees with its segments, an output
 * longer than its segment: each stops the load with the file, line and
 * reason, and nothing half-loaded is returned.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"
#include "workload.h"

/**
 * wl_bad() - report a bad record at the loader's file and line
 * @ld: the loader
 * @why: the reason, printed after "path:line: "
 *
 * Return: -EINVAL.
 */
int wl_bad(struct wl_loader *ld, const char *why)
{
	fprintf(stderr, "%s:%lu: %s\n", ld->path, ld->line, why);
	return -EINVAL;
}

/**
 * wl_add_segment() - append segment @id to the workload being built
 * @ld: the loader
 * @id: must be the next id; ids are dense and in order
 * @tokens: the segment's token ids, malloc'ed; owned by the workload from
 *	    here on, freed here if the segment is refused
 * @n: the number of tokens
 *
 * Return: 0, or -EINVAL after printing why.
 */
int wl_add_segment(struct wl_loader *ld, uint32_t id, uint32_t *tokens, uint32_t n)
{
	struct workload *wl = ld->wl;

	if (id != wl->nsegs) {
		free(tokens);
		return wl_bad(ld, "segment ids must be dense and in order");
	}
	if (wl->nsegs == ld->seg_cap) {
		uint32_t cap = ld->seg_cap ? ld->seg_cap * 2 : 1024;
		uint32_t **t = realloc(wl->seg_tokens, cap * sizeof(*t));
		uint32_t *l = t ? realloc(wl->seg_len, cap * sizeof(*l)) : NULL;

		if (t)
			wl->seg_tokens = t;
		if (!l) {
			free(tokens);
			return wl_bad(ld, "out of memory");
		}
		wl->seg_len = l;
		ld->seg_cap = cap;
	}
	wl->seg_tokens[id] = tokens;
	wl->seg_len[id] = n;
	wl->nsegs++;
	return 0;
}

/**
 * wl_add_request() - check a request against what is loaded and append it
 * @ld: the loader
 * @r: the request; its segs array passes to the workload, or is freed
 *     here if the request is refused
 *
 * Return: 0, or -EINVAL after printing why.
 */
int wl_add_request(struct wl_loader *ld, struct wl_request *r)
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
			return wl_bad(ld, "out of memory");
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
	return wl_bad(ld, "request refers to a missing segment or request, or its "
		       "prompt_len disagrees with its segments");
}


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

/* ---- token ids ---- */

/**
 * wl_mix64() - the splitmix64 finaliser, under token ids and the generator
 * @z: the input
 *
 * Return: @z mixed.
 */
uint64_t wl_mix64(uint64_t z)
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
	return (uint32_t)(wl_mix64(h * 0x9e3779b97f4a7c15ull ^ ((uint64_t)j << 32 | k)) % 100000);
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
	return 100000 + (uint32_t)(wl_mix64((uint64_t)r->id << 32 | i) % 1000000000u);
}
