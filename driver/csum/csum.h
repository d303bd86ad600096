/* SPDX-License-Identifier: MIT */
/*
 * driver/csum/csum.h - the page checksum the stores keep (XXH3-64), and
 * the copies that compute it on the way, in one pass over the page.
 *
 * XXH3's vector code is picked at build time; built for the baseline
 * x86-64 it runs SSE2 at about half of AVX2's speed, which on a page the
 * size of a KV block costs more than the copy beside it.  So the
 * functions are built twice (csum_impl.h, included by csum_sse2.c and by
 * csum_avx2.c with -mavx2) and the first call picks the one this CPU runs.
 */
#ifndef KVMM_DRIVER_CSUM_H
#define KVMM_DRIVER_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of @n bytes at @p. */
uint64_t kvmm_csum(const void *p, size_t n);

/*
 * Copy @len bytes from @src to the start of @page (@page_bytes long) and
 * zero the rest of it; return XXH3-64 of the whole page.
 */
uint64_t kvmm_csum_fill(void *page, const void *src, size_t len, size_t page_bytes);

/*
 * Copy the first @len bytes of @page to @dst; return XXH3-64 of the whole
 * page.  Both copies stream their stores where the destination is
 * 16-byte aligned (no read of its lines first, as a large memcpy()) and
 * hash the source, still in cache: fill() hashes the caller's bytes it
 * copied (a caller that rewrites them meanwhile stores a page that fails
 * its check later, and is dropped, never served), copy_out() the page.
 */
uint64_t kvmm_csum_copy_out(void *dst, const void *page, size_t len, size_t page_bytes);

#endif /* KVMM_DRIVER_CSUM_H */
