/* SPDX-License-Identifier: MIT */
/*
 * driver/csum/csum_impl.h - the checksum functions, built once per vector
 * unit: the includer defines CSUM(name) to suffix the names.  Copies go
 * a piece at a time, small enough to stay in the L1/L2 cache between the
 * copy and the hash, so the hash costs no second trip to memory.
 */
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "csum.h"

#define CSUM_PIECE	(16u << 10)

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
	size_t off, n;

	XXH3_64bits_reset(&st);
	for (off = 0; off < page_bytes; off += n) {
		n = page_bytes - off < CSUM_PIECE ? page_bytes - off : CSUM_PIECE;
		if (off + n <= len) {
			memcpy(d + off, s + off, n);
		} else if (off < len) {
			memcpy(d + off, s + off, len - off);
			memset(d + len, 0, off + n - len);
		} else {
			memset(d + off, 0, n);
		}
		XXH3_64bits_update(&st, d + off, n);
	}
	return XXH3_64bits_digest(&st);
}

uint64_t CSUM(kvmm_csum_copy_out)(void *dst, const void *page, size_t len, size_t page_bytes)
{
	const unsigned char *p = page;
	unsigned char *d = dst;
	XXH3_state_t st;
	size_t off, n;

	XXH3_64bits_reset(&st);
	for (off = 0; off < page_bytes; off += n) {
		n = page_bytes - off < CSUM_PIECE ? page_bytes - off : CSUM_PIECE;
		if (off + n <= len) {	/* hash the copy, in cache: what the caller got */
			memcpy(d + off, p + off, n);
			XXH3_64bits_update(&st, d + off, n);
			continue;
		}
		if (off < len)
			memcpy(d + off, p + off, len - off);
		XXH3_64bits_update(&st, p + off, n);
	}
	return XXH3_64bits_digest(&st);
}
