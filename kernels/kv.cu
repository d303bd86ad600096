// SPDX-License-Identifier: MIT
/*
 * kernels/kv.cu - the KV kernels for the GPU.
 *
 * Built by nvcc into a fatbin (sm_90 code plus compute_90 PTX, which newer
 * GPUs JIT) that is embedded in libkvmm and loaded with the module API by
 * driver/cuda; nothing here is called through the runtime API.  Each
 * kernel must produce exactly what its C reference in kernels/ref.c does.
 *
 * The copies are memory bound.  Work is cut into pieces of at most
 * KVMM_KV_PIECE bytes of one run (one page of one buffer), a warp per piece,
 * so that a batch of one large page and a batch of many small ones both
 * spread over every SM; lanes move 16 bytes each where both ends are 16-byte
 * aligned (always, for real head dims), bytes otherwise.  Consecutive
 * warps take consecutive pieces of one staging page, so writes to host
 * memory over PCIe go out in order and combine.
 */
#include <stdint.h>

#include "kv.h"

__device__ static void warp_copy(char *dst, const char *src, uint64_t n,
				 unsigned lane)
{
	uint64_t i;

	if (!(((uintptr_t)dst | (uintptr_t)src | n) & 15)) {
		uint4 *d = (uint4 *)dst;
		const uint4 *s = (const uint4 *)src;
		uint64_t n16 = n / 16;

		/*
		 * Four loads in flight before the first store: a read from
		 * registered host memory crosses PCIe, and one at a time a
		 * warp would wait out each round trip.
		 */
		for (i = lane; i + 96 < n16; i += 128) {
			uint4 a = s[i], b = s[i + 32], c = s[i + 64], e = s[i + 96];

			d[i] = a;
			d[i + 32] = b;
			d[i + 64] = c;
			d[i + 96] = e;
		}
		for (; i < n16; i += 32)
			d[i] = s[i];
		return;
	}
	for (i = lane; i < n; i += 32)
		dst[i] = src[i];
}

/* The warp this thread is in, and how many there are: work is grid-strided. */
__device__ static inline uint64_t warp_id(void)
{
	return ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
}

__device__ static inline uint64_t nr_warps(void)
{
	return (uint64_t)gridDim.x * blockDim.x / 32;
}

/*
 * kvmm_kv_move() - gather (dir KVMM_KV_GATHER) pages @pfns of every buffer
 * into staging @host[i], or scatter them back.  @host entries are
 * device-accessible addresses: registered host memory or device memory.
 */
/*
 * Piece @w of a batch: page @i, buffer @b, bytes [@off, @off + @n) of the
 * @bytes to move in that buffer.  Consecutive pieces walk one page's
 * buffers in order, which is the staging layout.
 */
struct piece {
	uint32_t i, b;
	uint64_t off, n;
};

__device__ static inline struct piece piece_of(uint64_t w, uint32_t nbufs, uint64_t bytes)
{
	uint64_t pieces = (bytes + KVMM_KV_PIECE - 1) / KVMM_KV_PIECE, rb = w / pieces;
	struct piece p;

	p.b = rb % nbufs;
	p.i = rb / nbufs;
	p.off = w % pieces * KVMM_KV_PIECE;
	p.n = bytes - p.off < KVMM_KV_PIECE ? bytes - p.off : KVMM_KV_PIECE;
	return p;
}

__device__ static inline uint64_t nr_pieces(uint32_t nr, uint32_t nbufs, uint64_t bytes)
{
	return (uint64_t)nr * nbufs * ((bytes + KVMM_KV_PIECE - 1) / KVMM_KV_PIECE);
}

/*
 * kvmm_kv_move() - gather (dir KVMM_KV_GATHER) pages @pfns of every buffer
 * into staging @host[i], or scatter them back.  @host entries are
 * device-accessible addresses: registered host memory or device memory.
 */
extern "C" __global__ void kvmm_kv_move(char *const *bufs, uint32_t nbufs,
					uint64_t run, const int32_t *pfns,
					char *const *host, uint32_t nr, int dir)
{
	uint64_t total = nr_pieces(nr, nbufs, run);
	unsigned lane = threadIdx.x & 31;

	for (uint64_t w = warp_id(); w < total; w += nr_warps()) {
		struct piece p = piece_of(w, nbufs, run);
		char *pool = bufs[p.b] + (uint64_t)pfns[p.i] * run + p.off;
		char *h = host[p.i] + (uint64_t)p.b * run + p.off;

		if (dir == KVMM_KV_GATHER)
			warp_copy(h, pool, p.n, lane);
		else
			warp_copy(pool, h, p.n, lane);
	}
}

/* kvmm_kv_copy() - the leading @bytes of page @src[i] onto @dst[i], every buffer. */
extern "C" __global__ void kvmm_kv_copy(char *const *bufs, uint32_t nbufs,
					uint64_t run, uint64_t bytes,
					const int32_t *src, const int32_t *dst,
					uint32_t nr)
{
	uint64_t total = nr_pieces(nr, nbufs, bytes);
	unsigned lane = threadIdx.x & 31;

	for (uint64_t w = warp_id(); w < total; w += nr_warps()) {
		struct piece p = piece_of(w, nbufs, bytes);

		warp_copy(bufs[p.b] + (uint64_t)dst[p.i] * run + p.off,
			  bufs[p.b] + (uint64_t)src[p.i] * run + p.off, p.n, lane);
	}
}

__device__ static inline int64_t pages_of(uint32_t len, uint32_t page_size)
{
	return ((uint64_t)len + page_size - 1) / page_size;
}

/*
 * kvmm_kv_indptr() - one block of KVMM_KV_SCAN_THREADS: each thread sums a
 * contiguous share of the batch, the block scans the shares, and each
 * thread writes its share's prefix sums.  The host has already checked
 * that the total fits an int32.
 */
extern "C" __global__ void kvmm_kv_indptr(const uint32_t *lens, uint32_t count,
					  uint32_t page_size, int32_t *indptr,
					  int32_t *last)
{
	__shared__ int64_t part[KVMM_KV_SCAN_THREADS];
	uint32_t t = threadIdx.x, per = (count + blockDim.x - 1) / blockDim.x;
	uint32_t lo = min(t * per, count), hi = min(lo + per, count);
	int64_t s = 0;

	for (uint32_t i = lo; i < hi; i++)
		s += pages_of(lens[i], page_size);
	part[t] = s;
	__syncthreads();
	for (uint32_t off = 1; off < blockDim.x; off <<= 1) {
		int64_t v = t >= off ? part[t - off] : 0;

		__syncthreads();
		part[t] += v;
		__syncthreads();
	}
	s = part[t] - s;
	for (uint32_t i = lo; i < hi; i++) {
		indptr[i] = (int32_t)s;
		s += pages_of(lens[i], page_size);
		last[i] = lens[i] ? (int32_t)((lens[i] - 1) % page_size + 1) : 0;
	}
	if (t == blockDim.x - 1)
		indptr[count] = (int32_t)part[t];
}

/* kvmm_kv_indices() - a block per sequence, grid-strided, copies its row. */
extern "C" __global__ void kvmm_kv_indices(const int32_t *table, uint32_t stride,
					   const uint32_t *rows, const int32_t *indptr,
					   uint32_t count, int32_t *indices)
{
	for (uint32_t i = blockIdx.x; i < count; i += gridDim.x) {
		const int32_t *row = table + (uint64_t)rows[i] * stride;
		int32_t *out = indices + indptr[i];
		int32_t n = indptr[i + 1] - indptr[i];

		for (int32_t j = threadIdx.x; j < n; j += blockDim.x)
			out[j] = row[j];
	}
}
