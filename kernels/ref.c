// SPDX-License-Identifier: MIT
/*
 * kernels/ref.c - the KV kernels in plain C.
 *
 * These are the definitions: kv.cu must produce the same bytes.  They are
 * also what the mock backend runs, so everything above the backend (the
 * tiers, the engine) exercises the same data movement on a machine with no
 * GPU.  See kernels/kv.h for what each computes.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kv.h"

/* Source bytes a move reads ahead of its copy: enough misses in flight. */
#define REF_AHEAD_BYTES	4096
#define REF_LINE	64
/* Shortest run that streams; shorter ones are copied the plain way. */
#define REF_STREAM_MIN	1024
/* Pages a gather orders on the stack; more take an allocation. */
#define REF_ORDER_STACK	256

/**
 * struct ref_walk - the runs of one kvmm_ref_move(), in the order it
 *	copies them
 * @g: the pool's shape
 * @bufs: its buffers
 * @pfns: the pages
 * @host: their staging
 * @nr: pages
 * @dir: KVMM_KV_GATHER or KVMM_KV_SCATTER
 * @run: bytes of one run (kvmm_kv_run())
 * @total: runs, @nr * @g->nbufs
 * @order: a gather's pages by pool address: (pfn << 32 | i), ascending;
 *	NULL: in @pfns order
 *
 * A move reads whole runs from wherever they are and writes them with
 * streaming stores, which cost the same scattered or not; so it walks in
 * the order that keeps its reads together.  A gather reads the pool:
 * buffer by buffer, all the pages' runs of one buffer before the next, in
 * pool order, so the reads of a stretch stay inside one buffer and move
 * forward through it (a run of pfns reads as one sequential stretch)
 * instead of hopping over every layer of the pool for each page.  A
 * scatter reads staging: page by page, each page's staging front to back.
 */
struct ref_walk {
	const struct kvmm_kv_geom *g;
	char *const *bufs;
	const int32_t *pfns;
	char *const *host;
	uint32_t nr;
	int dir;
	uint64_t run;
	uint64_t total;
	const uint64_t *order;
};

/**
 * struct ref_ahead - where a walk's read-ahead stands
 * @k: the next run to read ahead of
 * @p: the next line to prefetch in run @k - 1
 * @left: bytes of that run not yet prefetched
 */
struct ref_ahead {
	uint64_t k;
	const char *p;
	uint64_t left;
};

/* The source and destination of run @k of @w (see struct ref_walk). */
static void walk_run(const struct ref_walk *w, uint64_t k, const char **src, char **dst)
{
	uint32_t i, b;
	char *pool, *host;

	if (w->dir == KVMM_KV_GATHER) {
		b = (uint32_t)(k / w->nr);
		i = (uint32_t)(k % w->nr);
		if (w->order)
			i = (uint32_t)w->order[i];
	} else {
		i = (uint32_t)(k / w->g->nbufs);
		b = (uint32_t)(k % w->g->nbufs);
	}
	pool = w->bufs[b] + (uint64_t)w->pfns[i] * w->run;
	host = w->host[i] + (uint64_t)b * w->run;
	*src = w->dir == KVMM_KV_GATHER ? pool : host;
	*dst = w->dir == KVMM_KV_GATHER ? host : pool;
}

/*
 * Prefetch one more line of the walk's sources.  Runs of a page size of 1
 * are 2 KiB each from a place of their own: too short for the hardware
 * prefetcher to follow, so each would start with a full memory latency.
 * Inline: it runs once per line copied (out of line, it cost a gather at
 * page size 1 about a sixth of its bandwidth).
 */
static inline void ahead_step(const struct ref_walk *w, struct ref_ahead *a)
{
	char *dst;

	if (!a->left) {
		if (a->k == w->total)
			return;
		walk_run(w, a->k++, &a->p, &dst);
		a->left = w->run;
	}
	__builtin_prefetch(a->p, 0, 3);
	a->p += REF_LINE;
	a->left = a->left > REF_LINE ? a->left - REF_LINE : 0;
}

/*
 * Copy a slot run with streaming stores where it can, reading ahead a
 * line per line copied: a page set is moved once and not read again soon,
 * and write-allocating every destination line would cost a read of it too
 * (glibc's memcpy streams only copies far larger than a run).  The caller
 * fences.
 */
static void copy_run(char *dst, const char *src, uint64_t n, const struct ref_walk *w,
		     struct ref_ahead *a)
{
	uint64_t i;

#ifdef __SSE2__
	if (n >= REF_STREAM_MIN && !(n % REF_LINE) &&
	    !(((uintptr_t)dst | (uintptr_t)src) % 16)) {
		__m128i *d = (__m128i *)dst;
		const __m128i *s = (const __m128i *)src;

		for (i = 0; i < n / REF_LINE; i++, d += 4, s += 4) {
			__m128i x0 = _mm_load_si128(s), x1 = _mm_load_si128(s + 1);
			__m128i x2 = _mm_load_si128(s + 2), x3 = _mm_load_si128(s + 3);

			ahead_step(w, a);
			_mm_stream_si128(d, x0);
			_mm_stream_si128(d + 1, x1);
			_mm_stream_si128(d + 2, x2);
			_mm_stream_si128(d + 3, x3);
		}
		return;
	}
#endif
	for (i = 0; i < n; i += REF_LINE)
		ahead_step(w, a);
	memcpy(dst, src, n);
}

static void copy_fence(void)
{
#ifdef __SSE2__
	_mm_sfence();	/* streaming stores are visible before we return */
#endif
}

static int order_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A gather's pages in pool order, into @stack when they fit, else into an
 * allocation (the caller frees what is not @stack).  NULL when the walk
 * keeps @pfns order: a scatter, or no memory (the same bytes, slower).
 */
static uint64_t *walk_order(const struct ref_walk *w, uint64_t *stack)
{
	uint64_t *o = stack;
	uint32_t i;

	if (w->dir != KVMM_KV_GATHER || w->nr < 2)
		return NULL;
	if (w->nr > REF_ORDER_STACK)
		o = malloc(w->nr * sizeof(*o));
	if (!o)
		return NULL;
	for (i = 0; i < w->nr; i++)
		o[i] = (uint64_t)(uint32_t)w->pfns[i] << 32 | i;
	qsort(o, w->nr, sizeof(*o), order_cmp);
	return o;
}

/*
 * Runs too short to stream (a tiny stand-in model, an odd slot size):
 * page by page, a memcpy each.  Ordering and reading ahead would cost more
 * than such runs take to copy.
 */
static void move_plain(const struct ref_walk *w)
{
	uint32_t i, b;

	for (i = 0; i < w->nr; i++) {
		uint64_t at = (uint64_t)w->pfns[i] * w->run;
		char *h = w->host[i];

		for (b = 0; b < w->g->nbufs; b++, h += w->run) {
			if (w->dir == KVMM_KV_GATHER)
				memcpy(h, w->bufs[b] + at, w->run);
			else
				memcpy(w->bufs[b] + at, h, w->run);
		}
	}
}

/**
 * kvmm_ref_move() - gather pages into staging, or scatter them back
 * @g: the pool's shape
 * @bufs: its @g->nbufs buffers
 * @pfns: the pages
 * @nr: how many
 * @host: staging, one page (kvmm_kv_page_bytes()) at each @host[i]
 * @dir: KVMM_KV_GATHER (pool to @host) or KVMM_KV_SCATTER
 *
 * The order of the copies (struct ref_walk) is invisible in the result,
 * for destinations that do not overlap (the GPU kernel copies them all at
 * once): distinct staging pages, and distinct @pfns for a scatter.
 */
void kvmm_ref_move(const struct kvmm_kv_geom *g, char *const *bufs,
		   const int32_t *pfns, uint32_t nr, char *const *host, int dir)
{
	struct ref_walk w = {
		.g = g, .bufs = bufs, .pfns = pfns, .host = host, .nr = nr, .dir = dir,
		.run = kvmm_kv_run(g), .total = (uint64_t)nr * g->nbufs,
	};
	uint64_t stack[REF_ORDER_STACK], *order;
	struct ref_ahead a = { 0 };
	uint64_t k, i;

	if (w.run < REF_STREAM_MIN || w.run % REF_LINE) {
		move_plain(&w);
		return;
	}
	order = walk_order(&w, stack);
	w.order = order;
	for (i = 0; i < REF_AHEAD_BYTES; i += REF_LINE)
		ahead_step(&w, &a);
	for (k = 0; k < w.total; k++) {
		const char *src;
		char *dst;

		walk_run(&w, k, &src, &dst);
		copy_run(dst, src, w.run, &w, &a);
	}
	copy_fence();
	if (order != stack)
		free(order);
}

/**
 * kvmm_ref_copy() - copy the leading slots of pages onto other pages
 * @g: the pool's shape
 * @bufs: its buffers
 * @src: pages to copy from
 * @dst: pages to copy to, none of them in @src
 * @nr: pairs
 * @slots: leading slots of each page to copy, 1..page_size
 */
void kvmm_ref_copy(const struct kvmm_kv_geom *g, char *const *bufs,
		   const int32_t *src, const int32_t *dst, uint32_t nr,
		   uint32_t slots)
{
	uint64_t run = kvmm_kv_run(g), bytes = slots * g->slot_bytes;
	uint32_t i, b;

	for (i = 0; i < nr; i++)
		for (b = 0; b < g->nbufs; b++)
			memcpy(bufs[b] + (uint64_t)dst[i] * run,
			       bufs[b] + (uint64_t)src[i] * run, bytes);
}

/**
 * kvmm_ref_kv_indptr() - page counts of a batch, prefix-summed
 * @lens: tokens of each sequence
 * @count: sequences
 * @page_size: tokens per page
 * @indptr: out, @count + 1 entries: sequence i's pages are
 *	kv_indices[indptr[i] .. indptr[i + 1])
 * @last: out, @count entries: tokens in each sequence's last page
 *	(1..page_size; 0 for an empty sequence)
 *
 * Return: the total, or -EOVERFLOW when it does not fit an int32 (the
 * arrays are then undefined).
 */
int64_t kvmm_ref_kv_indptr(const uint32_t *lens, uint32_t count,
			   uint32_t page_size, int32_t *indptr, int32_t *last)
{
	int64_t sum = 0;
	uint32_t i;

	for (i = 0; i < count; i++) {
		indptr[i] = (int32_t)sum;
		sum += ((uint64_t)lens[i] + page_size - 1) / page_size;
		last[i] = lens[i] ? (int32_t)((lens[i] - 1) % page_size + 1) : 0;
		if (sum > INT32_MAX)
			return -EOVERFLOW;
	}
	indptr[count] = (int32_t)sum;
	return sum;
}

/**
 * kvmm_ref_kv_indices() - the pages of a batch, from the page table
 * @table: the page table (struct kvmm_table.base)
 * @stride: its entries per row
 * @rows: each sequence's row
 * @indptr: as kvmm_ref_kv_indptr() made it
 * @count: sequences
 * @indices: out, indptr[count] entries
 */
void kvmm_ref_kv_indices(const int32_t *table, uint32_t stride,
			 const uint32_t *rows, const int32_t *indptr,
			 uint32_t count, int32_t *indices)
{
	uint32_t i;

	for (i = 0; i < count; i++)
		memcpy(indices + indptr[i], table + (uint64_t)rows[i] * stride,
		       (size_t)(indptr[i + 1] - indptr[i]) * sizeof(*indices));
}
