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
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kv.h"

/*
 * Copy a slot run with streaming stores where it can: a page set is moved
 * once and not read again soon, and write-allocating every destination
 * line would cost a read of it too (glibc's memcpy streams only copies
 * far larger than a run).  The caller fences.
 */
static void copy_run(char *dst, const char *src, uint64_t n)
{
#ifdef __SSE2__
	if (n >= 1024 && !(n % 64) && !(((uintptr_t)dst | (uintptr_t)src) % 16)) {
		__m128i *d = (__m128i *)dst;
		const __m128i *s = (const __m128i *)src;
		uint64_t i;

		for (i = 0; i < n / 64; i++, d += 4, s += 4) {
			__m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1);
			__m128i c = _mm_load_si128(s + 2), e = _mm_load_si128(s + 3);

			_mm_stream_si128(d, a);
			_mm_stream_si128(d + 1, b);
			_mm_stream_si128(d + 2, c);
			_mm_stream_si128(d + 3, e);
		}
		return;
	}
#endif
	memcpy(dst, src, n);
}

static void copy_fence(void)
{
#ifdef __SSE2__
	_mm_sfence();	/* streaming stores are visible before we return */
#endif
}

/**
 * kvmm_ref_move() - gather pages into staging, or scatter them back
 * @g: the pool's shape
 * @bufs: its @g->nbufs buffers
 * @pfns: the pages
 * @nr: how many
 * @host: staging, one page (kvmm_kv_page_bytes()) at each @host[i]
 * @dir: KVMM_KV_GATHER (pool to @host) or KVMM_KV_SCATTER
 */
void kvmm_ref_move(const struct kvmm_kv_geom *g, char *const *bufs,
		   const int32_t *pfns, uint32_t nr, char *const *host, int dir)
{
	uint64_t run = kvmm_kv_run(g);
	uint32_t i, b;

	for (i = 0; i < nr; i++) {
		uint64_t at = (uint64_t)pfns[i] * run;
		char *h = host[i];

		for (b = 0; b < g->nbufs; b++, h += run) {
			if (dir == KVMM_KV_GATHER)
				copy_run(h, bufs[b] + at, run);
			else
				copy_run(bufs[b] + at, h, run);
		}
	}
	copy_fence();
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
