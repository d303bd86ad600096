// SPDX-License-Identifier: MIT
/*
 * driver/csum/csum_avx2.c - the checksum functions for CPUs with AVX2:
 * the Makefile builds this file with -mavx2 on x86-64 (elsewhere it is
 * empty).
 */
#ifdef __AVX2__
#define CSUM(name)	name##_avx2
#include "csum_impl.h"
#endif
