/* SPDX-License-Identifier: MIT */
/*
 * driver/csum/csum_impl.h - the checksum functions, built once per vector
 * unit: the includer defines CSUM(name) to suffix the names.  Copies go
 * a piece at a time, small enough to stay in the L1/L2 cache between the
 * copy and the hash, so the hash costs no second trip to memory.
 */
#include <stdbool.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "csum.h"

#define CSUM_PIECE	(16u << 10)

#ifdef __SSE2__
#include <immintrin.h>

/*
 * memcpy() with non-temporal stores where @dst is 16-byte aligned: the
 * destination's lines are not read in before they are written (no
 * read-for-ownership), so a page moves two bytes of memory traffic per
 * byte copied, not three; a large memcpy() does the same.  The source is
 * left in cache, where the caller hashes it.  The caller fences
 * (CSUM_FENCE) before anyone else may read @dst.
 */
static inline void CSUM(copy_stream)(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;

	if (((uintptr_t)d & 15) || n < 256) {
		memcpy(d, s, n);
		return;
	}
#ifdef __AVX2__
	if (!((uintptr_t)d & 31))
		for (; n >= 128; n -= 128, d += 128, s += 128) {
			__m256i a = _mm256_loadu_si256((const __m256i *)s);
			__m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
			__m256i c = _mm256_loadu_si256((const __m256i *)(s + 64));
			__m256i e = _mm256_loadu_si256((const __m256i *)(s + 96));

			_mm256_stream_si256((__m256i *)d, a);
			_mm256_stream_si256((__m256i *)(d + 32), b);
			_mm256_stream_si256((__m256i *)(d + 64), c);
			_mm256_stream_si256((__m256i *)(d + 96), e);
		}
#endif
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
}
#define CSUM_FENCE()	_mm_sfence()	/* the streamed stores, before ours are seen */
#else
#define copy_stream_base(d, s, n)	memcpy(d, s, n)
#define CSUM_FENCE()	do { } while (0)
#endif

/*
 * XXH3-64 of @n bytes at @src (long input: n > 240) while copying them to
 * @dst (32-byte aligned) with streamed stores, one 64-byte stripe at a
 * time: the stripe is hashed from the registers' cache line it was just
 * loaded into, so the hash's arithmetic runs while the copy's loads and
 * stores are in flight, not after them (a copy then a hash of each piece
 * leaves the memory idle while it hashes).  The same steps as xxhash.h's
 * XXH3_hashLong_64b with the default secret: 16 stripes a block, the
 * accumulators scrambled after each block, then the partial block, the
 * last stripe, and the merge.  Built on xxhash.h's internals, which
 * XXH_INLINE_ALL exposes, so only for the 0.8 series it was written
 * against (csum_test.c compares it with XXH3_64bits()).
 */
#if defined(__AVX2__) && XXH_VERSION_NUMBER >= 801 && XXH_VERSION_NUMBER < 900
#define CSUM_FUSED	1
#ifndef CSUM_PREFETCH
#define CSUM_PREFETCH	2048
#endif
static inline void CSUM(stripe_stream)(unsigned char *d, const unsigned char *s)
{
	__m256i a = _mm256_loadu_si256((const __m256i *)s);
	__m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));

	_mm256_stream_si256((__m256i *)d, a);
	_mm256_stream_si256((__m256i *)(d + 32), b);
}

static uint64_t CSUM(copy_hash)(void *dst, const void *src, size_t n)
{
	XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
	const xxh_u8 *secret = XXH3_kSecret, *s = src;
	const size_t secret_size = sizeof(XXH3_kSecret);
	const size_t per_block = (secret_size - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
	const size_t block = XXH_STRIPE_LEN * per_block;
	size_t blocks = (n - 1) / block, b, k, last, off = 0;
	unsigned char *d = dst;

	for (b = 0; b < blocks; b++) {
		for (k = 0; k < per_block; k++, off += XXH_STRIPE_LEN) {
			__builtin_prefetch(s + off + CSUM_PREFETCH);
			CSUM(stripe_stream)(d + off, s + off);
			XXH3_accumulate_512(acc, s + off, secret + k * XXH_SECRET_CONSUME_RATE);
		}
		XXH3_scrambleAcc(acc, secret + secret_size - XXH_STRIPE_LEN);
	}
	last = ((n - 1) - off) / XXH_STRIPE_LEN;
	for (k = 0; k < last; k++, off += XXH_STRIPE_LEN) {
		CSUM(stripe_stream)(d + off, s + off);
		XXH3_accumulate_512(acc, s + off, secret + k * XXH_SECRET_CONSUME_RATE);
	}
	XXH3_accumulate_512(acc, s + n - XXH_STRIPE_LEN,
			    secret + secret_size - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
	memcpy(d + off, s + off, n - off);	/* under a stripe: not streamed */
	return XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, (xxh_u64)n * XXH_PRIME64_1);
}
#endif

/*
 * A whole page (@len == @page_bytes, long) to a 32-byte aligned @dst in
 * the fused loop, its sum in *@sum; false where the loop does not apply
 * (the caller takes the pieces loop).
 */
static inline bool CSUM(whole_page)(void *dst, const void *src, size_t len, size_t page_bytes,
				    uint64_t *sum)
{
#ifdef CSUM_FUSED
	if (len == page_bytes && len > 240 && !((uintptr_t)dst & 31)) {
		*sum = CSUM(copy_hash)(dst, src, len);
		CSUM_FENCE();
		return true;
	}
#else
	(void)dst;
	(void)src;
	(void)len;
	(void)page_bytes;
	(void)sum;
#endif
	return false;
}

uint64_t CSUM(kvmm_csum)(const void *p, size_t n);
uint64_t CSUM(kvmm_csum_fill)(void *page, const void *src, size_t len, size_t page_bytes);
uint64_t CSUM(kvmm_csum_copy_out)(void *dst, const void *page, size_t len, size_t page_bytes);

uint64_t CSUM(kvmm_csum)(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

uint64_t CSUM(kvmm_csum_fill)(void *page, const void *src, size_t len, size_t page_bytes)
{
	unsigned char *d = page;
	const unsigned char *s = src;
	XXH3_state_t st;
	uint64_t sum;
	size_t off, n;

	if (CSUM(whole_page)(page, src, len, page_bytes, &sum))
		return sum;
	XXH3_64bits_reset(&st);
	for (off = 0; off < page_bytes; off += n) {
		n = page_bytes - off < CSUM_PIECE ? page_bytes - off : CSUM_PIECE;
		if (off + n <= len) {	/* hash the source: in cache after the copy */
			CSUM(copy_stream)(d + off, s + off, n);
			XXH3_64bits_update(&st, s + off, n);
			continue;
		}
		if (off < len) {
			memcpy(d + off, s + off, len - off);
			memset(d + len, 0, off + n - len);
		} else {
			memset(d + off, 0, n);
		}
		XXH3_64bits_update(&st, d + off, n);
	}
	CSUM_FENCE();
	return XXH3_64bits_digest(&st);
}

uint64_t CSUM(kvmm_csum_copy_out)(void *dst, const void *page, size_t len, size_t page_bytes)
{
	const unsigned char *p = page;
	unsigned char *d = dst;
	XXH3_state_t st;
	uint64_t sum;
	size_t off, n;

	if (CSUM(whole_page)(dst, page, len, page_bytes, &sum))
		return sum;
	XXH3_64bits_reset(&st);
	for (off = 0; off < page_bytes; off += n) {
		n = page_bytes - off < CSUM_PIECE ? page_bytes - off : CSUM_PIECE;
		if (off < len)	/* then hash the page's piece: in cache after the copy */
			CSUM(copy_stream)(d + off, p + off, off + n <= len ? n : len - off);
		XXH3_64bits_update(&st, p + off, n);
	}
	CSUM_FENCE();
	return XXH3_64bits_digest(&st);
}
