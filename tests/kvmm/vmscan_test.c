// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/vmscan_test.c - kvmm_vmscan: victim order of each policy,
 * parents after children, policy switches.
 */
#include <errno.h>

#include "../helpers.h"

#define NLEAF 6

static void cache_leaves(struct kvmm_ctx *ctx, uint32_t tok[NLEAF][8])
{
	uint32_t i;

	for (i = 0; i < NLEAF; i++) {
		test_tokens(tok[i], 8, 100 + i);
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok[i], 8), 0);
	}
}

static void reclaim_evicts_least_recently_used_leaf(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 16);
	uint32_t tok[NLEAF][8], i;

	cache_leaves(ctx, tok);
	/* use leaf 0 again: now leaf 1 is the oldest */
	CU_ASSERT_EQUAL(test_reuse(ctx, 0, tok[0], 8), 8);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 8);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[1], 8), 0);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 9), 16);	/* whole leaves: 2 and 3 */
	for (i = 0; i < NLEAF; i++)
		CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[i], 8),
				i == 0 || i >= 4 ? 8 : 0);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 0), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void reclaim_takes_parent_after_its_children(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 32);
	uint32_t a[20], b[20];

	test_tokens(a, 20, 1);
	memcpy(b, a, sizeof(a));
	b[10] ^= 1;
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, a, 20), 0);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, b, 20), 0);
	/* shared 10 + two leaves of 10 */
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 10);	/* a's tail */
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, a, 20), 10);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 10);	/* b's tail, not the parent */
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, b, 20), 10);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_LEAVES_EVICTABLE), 1);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 10);	/* now the parent */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void drop_caches_keeps_locked_paths(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 16);
	uint32_t tok[NLEAF][8], seq;

	cache_leaves(ctx, tok);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok[3], 8), 8);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 40);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 8);
	CU_ASSERT_EQUAL(kvmm_drop_caches(NULL), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void slru_evicts_once_used_leaves_first(void)
{
	struct kvmm_params p = test_params(1, 64, 2, 16);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[NLEAF][8], i;

	p.evict_policy = "slru";
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	cache_leaves(ctx, tok);
	/* leaf 0, the oldest, is used again: it is now active */
	CU_ASSERT_EQUAL(test_reuse(ctx, 0, tok[0], 8), 8);
	/* every once-used leaf goes before it, whatever their age */
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 40), 40);
	for (i = 1; i < NLEAF; i++)
		CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[i], 8), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[0], 8), 8);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void set_policy_switch_keeps_age_order(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 16);
	uint32_t tok[NLEAF][8];

	cache_leaves(ctx, tok);
	CU_ASSERT_EQUAL(test_reuse(ctx, 0, tok[0], 8), 8);
	CU_ASSERT_EQUAL(kvmm_set_evict_policy(ctx, "slru"), 0);
	CU_ASSERT_STRING_EQUAL(kvmm_evict_policy(ctx), "slru");
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_set_evict_policy(ctx, "lru"), 0);
	CHECK_OK(ctx);
	/* back on lru, leaf 1 is still the oldest and leaf 0 the newest */
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 8);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[1], 8), 0);
	CU_ASSERT_EQUAL(kvmm_set_evict_policy(ctx, "nosuch"), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_set_evict_policy(ctx, NULL), -EINVAL);
	kvmm_destroy(ctx);
}

int register_vmscan_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_vmscan", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, reclaim_evicts_least_recently_used_leaf);
	ADD_TEST(s, reclaim_takes_parent_after_its_children);
	ADD_TEST(s, drop_caches_keeps_locked_paths);
	ADD_TEST(s, slru_evicts_once_used_leaves_first);
	ADD_TEST(s, set_policy_switch_keeps_age_order);
	return 0;
}
