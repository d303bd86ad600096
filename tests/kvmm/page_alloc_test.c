// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/page_alloc_test.c - kvmm_page_alloc: the free bitmap, bulk
 * runs, watermarks.  White box: calls the zone functions directly.
 */
#include <stdlib.h>

#include "../helpers.h"
#include "../../kvmm/internal.h"

static void alloc_pages_single_all_distinct_then_enospc(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 5000, 2, 8);
	uint8_t *seen = calloc(5000, 1);
	int32_t pfn;
	uint32_t i;

	for (i = 0; i < 5000; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, &pfn, 0), 0);
		CU_ASSERT_FATAL(pfn >= 0 && pfn < 5000 && !seen[pfn]);
		seen[pfn] = 1;
		CU_ASSERT_EQUAL(kvmm_page_state(ctx, (uint32_t)pfn), KVMM_PAGE_OWNED);
	}
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, &pfn, 0), -ENOSPC);
	for (i = 0; i < 5000; i += 2) {
		pfn = (int32_t)i;
		kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], &pfn, 1);
	}
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 2500);
	for (i = 0; i < 2500; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, &pfn, 0), 0);
		CU_ASSERT(pfn % 2 == 0);
	}
	free(seen);
	for (i = 0; i < 5000; i++) {
		pfn = (int32_t)i;
		kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], &pfn, 1);
	}
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void alloc_pages_bulk_on_fresh_zone_is_contiguous(void)
{
	struct kvmm_ctx *ctx = test_ctx(16, 1000, 2, 64);
	int32_t pfns[300];
	uint32_t i;

	CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 300, pfns, 0), 0);
	for (i = 1; i < 300; i++)
		CU_ASSERT_EQUAL(pfns[i], pfns[0] + (int32_t)i);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, 300);
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 1000);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void alloc_pages_bulk_wraps_and_fills_holes(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 200, 2, 64);
	int32_t a[200], b[120];
	uint32_t i;

	CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 200, a, 0), 0);
	/* free every third frame, then ask for all of them in one go */
	for (i = 0; i < 200; i += 3)
		kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], &a[i], 1);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 67, b, 0), 0);
	for (i = 0; i < 67; i++)
		CU_ASSERT_EQUAL(b[i] % 3, 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, b, 0), -ENOSPC);
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 0);
	kvmm_destroy(ctx);
}

static void alloc_pages_enospc_changes_nothing(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 64);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	int32_t pfns[65];

	test_stats(ctx, before);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 65, pfns, 0), -ENOSPC);
	test_stats(ctx, after);
	after[KVMM_STAT_ALLOC_FAIL]--;	/* the one thing a refusal counts */
	ASSERT_STATS_SAME(before, after);
	kvmm_destroy(ctx);
}

static void alloc_pages_below_min_watermark_fails(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 100, 2, 64);
	int32_t pfns[100];

	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 10, 10, 10), 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 91, pfns, 0), -ENOSPC);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 90, pfns, 0), 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, pfns + 90, 0), -ENOSPC);
	/* the reserve is there for callers that must not fail */
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 10, pfns + 90,
					 KVMM_ALLOC_RESERVE), 0);
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 0);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, 100);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void alloc_pages_low_watermark_reclaims_to_high(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 100, 4, 100);
	uint32_t tok[100], i;
	int32_t pfns[40];

	test_tokens(tok, 100, 7);
	/* ten cached leaves of 8 pages under one root */
	for (i = 0; i < 10; i++) {
		tok[0] = 1000 + i;
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 8), 0);
	}
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 20);
	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 0, 10, 30), 0);
	/* 15 would leave 5 < low: reclaim until 15 + high are free */
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 15, pfns, 0), 0);
	/* 25 short of 15 + high: 4 leaves of 8 went, 15 taken */
	CU_ASSERT_EQUAL(ctx->zone[KVMM_TIER_DEVICE].nr_free, 20 + 32 - 15);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVICT_NODES), 4);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, 15);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void alloc_pages_noreclaim_fails_without_evicting(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 16, 2, 16);
	uint32_t tok[16];
	int32_t pfns[16];

	test_tokens(tok, 16, 3);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 16), 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, pfns,
					 KVMM_ALLOC_NORECLAIM), -ENOSPC);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 16);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, pfns, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 0);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, 1);
	kvmm_destroy(ctx);
}

static void alloc_pages_large_pool_finds_last_frame(void)
{
	/* 300k frames: three bitmap levels; the last free frame is found */
	struct kvmm_ctx *ctx = test_ctx(1, 300000, 1, 8);
	int32_t *pfns = malloc(300000 * sizeof(*pfns));

	CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 299999, pfns, 0), 0);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, pfns + 299999, 0), 0);
	CU_ASSERT_EQUAL(pfns[299999], 299999);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns + 123456, 1);
	CU_ASSERT_EQUAL(kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], 1, pfns + 123456, 0), 0);
	CU_ASSERT_EQUAL(pfns[123456], 123456);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, 300000);
	CHECK_OK(ctx);
	free(pfns);
	kvmm_destroy(ctx);
}

static void page_state_out_of_range_fails(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 8, 2, 8);

	CU_ASSERT_EQUAL(kvmm_page_state(ctx, 8), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_page_state(NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_page_state(ctx, 7), KVMM_PAGE_FREE);
	kvmm_destroy(ctx);
}

int register_page_alloc_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_page_alloc", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, alloc_pages_single_all_distinct_then_enospc);
	ADD_TEST(s, alloc_pages_bulk_on_fresh_zone_is_contiguous);
	ADD_TEST(s, alloc_pages_bulk_wraps_and_fills_holes);
	ADD_TEST(s, alloc_pages_enospc_changes_nothing);
	ADD_TEST(s, alloc_pages_below_min_watermark_fails);
	ADD_TEST(s, alloc_pages_low_watermark_reclaims_to_high);
	ADD_TEST(s, alloc_pages_noreclaim_fails_without_evicting);
	ADD_TEST(s, alloc_pages_large_pool_finds_last_frame);
	ADD_TEST(s, page_state_out_of_range_fails);
	return 0;
}
