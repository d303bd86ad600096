/* SPDX-License-Identifier: MIT */
/*
 * kernels/kv.h - the KV kernels: what they compute, and their plain C
 * references.
 *
 * Four operations on a pool laid out as engines expect (per buffer, slot
 * after slot; a buffer is one layer's K or V, or its latent for MLA):
 *
 *   gather      pages pfns[i] of every buffer into staging dst[i], in the
 *               staging layout of struct kvmm_backend_ops (buffer after
 *               buffer, the page's run of slots from each);
 *   scatter     the reverse;
 *   copy        the leading @slots slots of page src[i] onto page dst[i]
 *               in every buffer (copy-on-write of a shared partial page);
 *   kv_indices  FlashInfer's paged-KV arrays for a batch, from the page
 *               table: kv_indptr (page counts, prefix-summed),
 *               kv_indices (the pages) and kv_last_page_len.
 *
 * kernels/kv.cu implements each for the GPU (kvmm_kv_move, kvmm_kv_copy,
 * kvmm_kv_indptr, kvmm_kv_indices); kernels/ref.c implements each in C.
 * The mock backend runs the C references, and the tests hold the GPU's
 * results to them bit for bit.  Both are plain copies of bytes and int32s,
 * so "the same" means identical, not close.
 */
#ifndef KVMM_KERNELS_KV_H
#define KVMM_KERNELS_KV_H

#include <stdint.h>

/**
 * struct kvmm_kv_geom - a pool's shape as the kernels see it
 * @nbufs: buffers: layers * 2 (K, V) for MHA, layers for MLA
 * @page_size: slots per page
 * @slot_bytes: bytes of one slot in one buffer
 */
struct kvmm_kv_geom {
	uint32_t nbufs;
	uint32_t page_size;
	uint64_t slot_bytes;
};

/* Bytes of one page's slots in one buffer: a "run". */
static inline uint64_t kvmm_kv_run(const struct kvmm_kv_geom *g)
{
	return g->page_size * g->slot_bytes;
}

/* Bytes of one page in the staging layout. */
static inline uint64_t kvmm_kv_page_bytes(const struct kvmm_kv_geom *g)
{
	return kvmm_kv_run(g) * g->nbufs;
}

/* Direction of kvmm_kv_move: pool to staging, or staging to pool. */
#define KVMM_KV_GATHER	0
#define KVMM_KV_SCATTER	1

void kvmm_ref_move(const struct kvmm_kv_geom *g, char *const *bufs,
		   const int32_t *pfns, uint32_t nr, char *const *host, int dir);
void kvmm_ref_copy(const struct kvmm_kv_geom *g, char *const *bufs,
		   const int32_t *src, const int32_t *dst, uint32_t nr,
		   uint32_t slots);
int64_t kvmm_ref_kv_indptr(const uint32_t *lens, uint32_t count,
			   uint32_t page_size, int32_t *indptr, int32_t *last);
void kvmm_ref_kv_indices(const int32_t *table, uint32_t stride,
			 const uint32_t *rows, const int32_t *indptr,
			 uint32_t count, int32_t *indices);

/* kernels/fatbin.S: the GPU build of kv.cu, when nvcc was there. */
extern const unsigned char kvmm_kv_fatbin[];
extern const unsigned char kvmm_kv_fatbin_end[];

/* Kernel names and launch shapes, shared by the CUDA backend and kv.cu. */
#define KVMM_KV_MOVE_FN		"kvmm_kv_move"
#define KVMM_KV_COPY_FN		"kvmm_kv_copy"
#define KVMM_KV_INDPTR_FN	"kvmm_kv_indptr"
#define KVMM_KV_INDICES_FN	"kvmm_kv_indices"
#define KVMM_KV_THREADS		256	/* per block; a warp per piece */
#define KVMM_KV_PIECE		8192u	/* most bytes of one run a warp moves */
#define KVMM_KV_SCAN_THREADS	1024	/* the one block of kvmm_kv_indptr */

#endif
