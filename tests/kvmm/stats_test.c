// SPDX-License-Identifier: MIT
/* tests/kvmm/stats_test.c - kvmm_stats: names and a consistent snapshot. */
#include <errno.h>

#include "../helpers.h"

static void stat_names_are_all_set_and_unique(void)
{
	uint32_t i, j;

	for (i = 0; i < NR_KVMM_STATS; i++) {
		CU_ASSERT_PTR_NOT_NULL_FATAL(kvmm_stat_name(i));
		for (j = 0; j < i; j++)
			CU_ASSERT(strcmp(kvmm_stat_name(i), kvmm_stat_name(j)) != 0);
	}
	CU_ASSERT_PTR_NULL(kvmm_stat_name(NR_KVMM_STATS));
}

static void stats_snapshot_adds_up(void)
{
	struct kvmm_ctx *ctx = test_ctx(2, 64, 3, 64);
	uint64_t st[NR_KVMM_STATS];
	uint32_t tok[40], seq;

	test_tokens(tok, 40, 1);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 30), 0);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 40, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_stats(ctx, st, NR_KVMM_STATS), NR_KVMM_STATS);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_FREE] + st[KVMM_STAT_PAGES_OWNED] +
			st[KVMM_STAT_PAGES_CACHED], st[KVMM_STAT_PAGES_TOTAL]);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_EVICTABLE] + st[KVMM_STAT_PAGES_PROTECTED],
			st[KVMM_STAT_PAGES_CACHED]);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_OWNED], 5);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_PROTECTED], 15);
	CU_ASSERT_EQUAL(st[KVMM_STAT_HIT_TOKENS], 30);
	CU_ASSERT_EQUAL(st[KVMM_STAT_SEQS_OPEN], 1);
	CU_ASSERT(st[KVMM_STAT_META_BYTES] > 0);
	CU_ASSERT_EQUAL(st[KVMM_STAT_ALLOC_PAGES] - st[KVMM_STAT_FREE_PAGES],
			st[KVMM_STAT_PAGES_OWNED] + st[KVMM_STAT_PAGES_CACHED]);
	kvmm_destroy(ctx);
}

static void stats_short_buffer_gets_a_prefix(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 10, 2, 8);
	uint64_t st[2] = { 0, 0 };

	CU_ASSERT_EQUAL(kvmm_stats(ctx, st, 2), NR_KVMM_STATS);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_TOTAL], 10);
	CU_ASSERT_EQUAL(st[KVMM_STAT_PAGES_FREE], 10);
	CU_ASSERT_EQUAL(kvmm_stats(ctx, NULL, 0), NR_KVMM_STATS);
	CU_ASSERT_EQUAL(kvmm_stats(ctx, NULL, 3), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_stats(NULL, st, 2), -EINVAL);
	kvmm_destroy(ctx);
}

int register_stats_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_stats", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, stat_names_are_all_set_and_unique);
	ADD_TEST(s, stats_snapshot_adds_up);
	ADD_TEST(s, stats_short_buffer_gets_a_prefix);
	return 0;
}
