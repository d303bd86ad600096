// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/prefix_tree_test.c - kvmm_prefix_tree: splits, lock
 * accounting, the child hash.
 */
#include <errno.h>
#include <stdlib.h>

#include "../helpers.h"

static void match_splits_node_on_partial_match(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 64);
	uint32_t tok[40], seq;

	test_tokens(tok, 40, 1);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 40), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 1);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 25), 25);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_SPLITS), 1);
	/* only the matched part is locked */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PROTECTED), 25);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_EVICTABLE), 15);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void insert_splits_on_divergence(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 64, 2, 64);
	uint32_t a[40], b[40];

	test_tokens(a, 40, 2);
	memcpy(b, a, sizeof(a));
	b[21] ^= 1;	/* diverges inside page 5: pages 0-4 shared */
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, a, 40), 0);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, b, 40), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 3);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 10 + 5);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, b, 40), 40);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, a, 40), 40);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void lock_protects_path_until_close(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 40, 2, 64);
	uint32_t tok[40], other[40], seq;

	test_tokens(tok, 40, 3);
	test_tokens(other, 40, 4);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 30), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 30), 30);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PROTECTED), 30);
	/* 10 free + nothing evictable: 11 cannot be had */
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 30), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, other, 11), -ENOSPC);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_EVICTABLE), 30);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, other, 11), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 30), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void many_children_grow_the_hash(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 20000, 2, 8);
	uint32_t tok[4], i;

	for (i = 0; i < 5000; i++) {
		tok[0] = 7;
		tok[1] = i;
		tok[2] = i * 3;
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 3), 0);
	}
	/* one shared first token, then 5000 children of it */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 5001);
	for (i = 0; i < 5000; i += 499) {
		tok[1] = i;
		tok[2] = i * 3;
		CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 3), 3);
	}
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * Roots and children of 3,000 namespaces: the hash resizes several times
 * while they are added, and every one stays findable throughout (the
 * DEBUG=3 build checks every node after every operation, mid-resize too).
 */
static void namespaces_stay_findable_across_resizes(void)
{
	struct kvmm_ctx *ctx = test_ctx(2, 8192, 2, 8);
	uint32_t tok[2], ns;

	for (ns = 0; ns < 3000; ns++) {
		tok[0] = ns % 7;
		tok[1] = ns;
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, ns, tok, 2), 0);
		if (ns % 97 == 0) {
			uint32_t back = ns / 2;

			tok[0] = back % 7;
			tok[1] = back;
			CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, back, tok, 2), 2);
			CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, back + 1, tok, 2), 0);
		}
	}
	CU_ASSERT(test_stat(ctx, KVMM_STAT_META_BYTES) > 4096 * sizeof(void *));
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

int register_prefix_tree_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_prefix_tree", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, match_splits_node_on_partial_match);
	ADD_TEST(s, insert_splits_on_divergence);
	ADD_TEST(s, lock_protects_path_until_close);
	ADD_TEST(s, many_children_grow_the_hash);
	ADD_TEST(s, namespaces_stay_findable_across_resizes);
	return 0;
}
