// SPDX-License-Identifier: MIT
/*
 * driver/csum/csum_sse2.c - the checksum functions for the baseline
 * x86-64 (or whatever the build targets), and the choice between them
 * and csum_avx2.c's, made once.
 */
#define CSUM(name)	name##_base
#include "csum_impl.h"

#if defined(__x86_64__) && !defined(__AVX2__) && defined(KVMM_CSUM_AVX2)
uint64_t kvmm_csum_avx2(const void *p, size_t n);
uint64_t kvmm_csum_fill_avx2(void *page, const void *src, size_t len, size_t page_bytes);
uint64_t kvmm_csum_copy_out_avx2(void *dst, const void *page, size_t len, size_t page_bytes);

static int has_avx2(void)
{
	static int v = -1;	/* racing first calls agree: the answer is the same */

	if (v < 0)
		v = __builtin_cpu_supports("avx2") ? 1 : 0;
	return v;
}
#define PICK(name, ...) (has_avx2() ? name##_avx2(__VA_ARGS__) : name##_base(__VA_ARGS__))
#else
#define PICK(name, ...) name##_base(__VA_ARGS__)
#endif

uint64_t kvmm_csum(const void *p, size_t n)
{
	return PICK(kvmm_csum, p, n);
}

uint64_t kvmm_csum_fill(void *page, const void *src, size_t len, size_t page_bytes)
{
	return PICK(kvmm_csum_fill, page, src, len, page_bytes);
}

uint64_t kvmm_csum_copy_out(void *dst, const void *page, size_t len, size_t page_bytes)
{
	return PICK(kvmm_csum_copy_out, dst, page, len, page_bytes);
}
