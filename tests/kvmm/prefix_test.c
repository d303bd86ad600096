// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/prefix_test.c - kvmm_prefix: pins, priorities, lookup.
 */
#include <errno.h>
#include <stdlib.h>

#include "../helpers.h"

/* Frames that carry KVMM_PG_PINNED, read one by one as a dump tool would. */
static uint32_t pinned_frames(const struct kvmm_ctx *ctx)
{
	uint32_t pfn, n = 0;

	for (pfn = 0; pfn < kvmm_nr_pages(ctx); pfn++)
		n += (kvmm_page_flags(ctx, pfn) & KVMM_PG_PINNED) != 0;
	return n;
}

static void pin_keeps_prefix_through_drop_caches(void)
{
	struct kvmm_ctx *ctx = test_ctx(2, 64, 2, 64);
	uint32_t tok[40];

	test_tokens(tok, 40, 5);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 40), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 21), 20);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PINNED), 10);
	CU_ASSERT_EQUAL(pinned_frames(ctx), 10);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 10);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 40), 20);
	/* pins nest */
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 20), 20);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 0, tok, 20), 20);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 0, tok, 20), 20);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PINNED), 0);
	CU_ASSERT_EQUAL(pinned_frames(ctx), 0);
	CU_ASSERT_EQUAL(kvmm_page_flags(ctx, 64), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 10);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void unpin_of_unpinned_prefix_fails(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 64);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	uint32_t tok[40];

	test_tokens(tok, 40, 6);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 40), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 30), 30);
	test_stats(ctx, before);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 0, tok, 40), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 0, tok, 20), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 9, tok, 30), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(ctx, 0, tok, 0), -EINVAL);
	test_stats(ctx, after);
	ASSERT_STATS_SAME(before, after);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void pin_of_uncached_prefix_fails_enoent(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 64, 2, 64);
	uint32_t tok[40];

	test_tokens(tok, 40, 7);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 8), -ENOENT);	/* no root */
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 16), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 24), -ENOENT);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 3), -EINVAL);	/* < a page */
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, NULL, 8), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefix_pin(ctx, 0, tok, 65), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 24), 16);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 1, tok, 24), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void set_prio_orders_victims_before_recency(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 30, 2, 64);
	uint32_t a[10], b[10], c[20];

	test_tokens(a, 10, 20);
	test_tokens(b, 10, 21);
	test_tokens(c, 20, 22);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, a, 10), 0);	/* oldest */
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, b, 10), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_set_prio(ctx, 0, a, 10, 2), 10);
	CU_ASSERT_EQUAL(kvmm_prefix_set_prio(ctx, 0, a, 10, KVMM_NR_PRIO), -EINVAL);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, c, 20), 0);	/* needs 10 pages */
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, a, 10), 10);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, b, 10), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void lookup_takes_no_reference(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 64);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	uint32_t tok[40];

	test_tokens(tok, 40, 8);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 40), 0);
	test_stats(ctx, before);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 17), 17);
	test_stats(ctx, after);
	ASSERT_STATS_SAME(before, after);	/* no split, no lock */
	kvmm_destroy(ctx);
}

int register_prefix_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_prefix", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, pin_keeps_prefix_through_drop_caches);
	ADD_TEST(s, unpin_of_unpinned_prefix_fails);
	ADD_TEST(s, pin_of_uncached_prefix_fails_enoent);
	ADD_TEST(s, set_prio_orders_victims_before_recency);
	ADD_TEST(s, lookup_takes_no_reference);
	return 0;
}
