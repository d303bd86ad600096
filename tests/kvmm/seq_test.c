// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/seq_test.c - kvmm_seq: page-table rows, match, extend,
 * commit, close, retract, and every bad argument.
 */
#include <errno.h>

#include "../helpers.h"

static const int32_t *row_of(const struct kvmm_ctx *ctx, uint32_t seq)
{
	struct kvmm_table t;

	kvmm_seq_table(ctx, &t);
	return t.base + (size_t)seq * t.stride;
}

static void seq_open_gives_each_row_once_then_ebusy(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 16, 3, 8);
	uint32_t a, b, c, d;

	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &a), 0);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &b), 0);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 1, &c), 0);
	CU_ASSERT(a != b && b != c && a != c && a < 3 && b < 3 && c < 3);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &d), -EBUSY);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, b, NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &d), 0);
	CU_ASSERT_EQUAL(d, b);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_SEQS_OPEN), 3);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_match_fills_row_with_cached_frames(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 64, 4, 64);
	struct kvmm_seq_info info;
	uint32_t tok[40], a, b, i;
	const int32_t *ra, *rb;

	test_tokens(tok, 40, 11);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 40, &a), 0);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, a, tok, 40), 40);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &b), 0);
	/* 39 tokens: only whole pages match, 36 */
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, b, tok, 39), 36);
	ra = row_of(ctx, a);
	rb = row_of(ctx, b);
	for (i = 0; i < 9; i++)
		CU_ASSERT_EQUAL(rb[i], ra[i]);
	CU_ASSERT_EQUAL(rb[9], -1);
	CU_ASSERT_EQUAL(kvmm_seq_info(ctx, b, &info), 0);
	CU_ASSERT_EQUAL(info.len, 36);
	CU_ASSERT_EQUAL(info.cached, 36);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HIT_TOKENS), 36);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_MISS_TOKENS), 40 + 3);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_match_bad_arguments_fail(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 32, 2, 16);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	uint32_t tok[20], seq;

	test_tokens(tok, 20, 2);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	test_stats(ctx, before);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, NULL, 4), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 17), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, 5, tok, 4), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, 1, tok, 4), -EINVAL);	/* closed */
	CU_ASSERT_EQUAL(kvmm_seq_match(NULL, seq, tok, 4), -EINVAL);
	test_stats(ctx, after);
	ASSERT_STATS_SAME(before, after);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 4, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 4), -EINVAL);	/* not empty */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_extend_partial_page_takes_no_frame(void)
{
	struct kvmm_ctx *ctx = test_ctx(16, 8, 2, 128);
	uint32_t seq;

	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 10, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 1);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 6, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 1);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 1, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 2);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_extend_bad_arguments_change_nothing(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 32, 3, 16);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	uint32_t a, b, seqs[2], ns[2] = { 2, 2 };

	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &a), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &b), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, a, 10, 0), 0);
	test_stats(ctx, before);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, a, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, a, 7, 0), -EINVAL);	/* past 16 */
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, a, UINT32_MAX, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, 2, 1, 0), -EINVAL);	/* closed */
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, 99, 1, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, b, 1, 1u << 7), -EINVAL);
	seqs[0] = seqs[1] = b;
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, seqs, ns, 2, 0), -EINVAL);
	seqs[0] = b;
	seqs[1] = a;
	ns[1] = 7;
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, seqs, ns, 2, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, seqs, ns, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, NULL, ns, 1, 0), -EINVAL);
	test_stats(ctx, after);
	ASSERT_STATS_SAME(before, after);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_extend_batch_is_all_or_nothing(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 10, 3, 16);
	uint32_t seqs[3], ns[3] = { 4, 4, 4 }, i;
	struct kvmm_seq_info info;

	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seqs[i]), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, seqs, ns, 3, 0), -ENOSPC);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 10);
	for (i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(kvmm_seq_info(ctx, seqs[i], &info), 0);
		CU_ASSERT_EQUAL(info.len, 0);
	}
	ns[2] = 2;
	CU_ASSERT_EQUAL(kvmm_seq_extend_batch(ctx, seqs, ns, 3, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_commit_dedups_pages_inserted_meanwhile(void)
{
	struct kvmm_ctx *ctx = test_ctx(2, 64, 3, 32);
	uint32_t tok[20], a, b;
	const int32_t *ra, *rb;
	int i;

	test_tokens(tok, 20, 5);
	/* two requests compute the same prompt at once */
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 20, &a), 0);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 20, &b), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 20);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, a, tok, 20), 20);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, b, tok, 20), 20);
	/* b's copies were freed; its row points at a's pages */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_DEDUP_PAGES), 10);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 10);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 0);
	ra = row_of(ctx, a);
	rb = row_of(ctx, b);
	for (i = 0; i < 10; i++)
		CU_ASSERT_EQUAL(ra[i], rb[i]);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_commit_partial_page_stays_private(void)
{
	struct kvmm_ctx *ctx = test_ctx(8, 16, 2, 64);
	struct kvmm_seq_info info;
	uint32_t tok[30], seq;

	test_tokens(tok, 30, 6);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 30, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, tok, 30), 24);
	CU_ASSERT_EQUAL(kvmm_seq_info(ctx, seq, &info), 0);
	CU_ASSERT_EQUAL(info.cached, 24);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PROTECTED), 3);
	/* committing again, or less, is a no-op */
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, tok, 30), 24);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, tok, 9), 24);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, tok, 31), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, NULL, 8), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, seq, tok, 0), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_close_frees_private_and_keeps_cached(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 32, 2, 64);
	uint32_t tok[30], seq;

	test_tokens(tok, 30, 8);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 30, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok, 30), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 7);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_EVICTABLE), 7);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 25);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok, 30), -EINVAL);	/* double */
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(row_of(ctx, seq)[0], -1);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_close_without_commit_drops_everything_private(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 32, 2, 64);
	uint32_t tok[30], seq;

	test_tokens(tok, 30, 9);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 30, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_retract_keeps_seq_open_and_empty(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 32, 2, 64);
	struct kvmm_seq_info info;
	uint32_t tok[30], seq;

	test_tokens(tok, 30, 10);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 30, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_retract(ctx, seq, tok, 20), 0);
	CU_ASSERT_EQUAL(kvmm_seq_info(ctx, seq, &info), 0);
	CU_ASSERT_EQUAL(info.len, 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 20);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_RETRACTS), 1);
	/* the retried request hits what was committed */
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 29), 20);
	CU_ASSERT_EQUAL(kvmm_seq_retract(ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_retract(ctx, 1, NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_retract(ctx, seq, tok, 5), -EINVAL);	/* past len 0 */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_namespaces_never_share(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 2, 32);
	uint32_t tok[20], seq;

	test_tokens(tok, 20, 12);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 7, tok, 20), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 8, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 20), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 7, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 20), 20);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void seq_table_layout_is_dense_rows(void)
{
	struct kvmm_ctx *ctx = test_ctx(16, 64, 5, 100);
	struct kvmm_table t;
	uint32_t seq;

	kvmm_seq_table(ctx, &t);
	CU_ASSERT_EQUAL(t.stride, 7);	/* ceil(100 / 16) */
	CU_ASSERT_EQUAL(t.rows, 5);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 100, 0), 0);
	CU_ASSERT(t.base[seq * t.stride + 6] >= 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 1, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_info(ctx, 4, NULL), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

int register_seq_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_seq", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, seq_open_gives_each_row_once_then_ebusy);
	ADD_TEST(s, seq_match_fills_row_with_cached_frames);
	ADD_TEST(s, seq_match_bad_arguments_fail);
	ADD_TEST(s, seq_extend_partial_page_takes_no_frame);
	ADD_TEST(s, seq_extend_bad_arguments_change_nothing);
	ADD_TEST(s, seq_extend_batch_is_all_or_nothing);
	ADD_TEST(s, seq_commit_dedups_pages_inserted_meanwhile);
	ADD_TEST(s, seq_commit_partial_page_stays_private);
	ADD_TEST(s, seq_close_frees_private_and_keeps_cached);
	ADD_TEST(s, seq_close_without_commit_drops_everything_private);
	ADD_TEST(s, seq_retract_keeps_seq_open_and_empty);
	ADD_TEST(s, seq_namespaces_never_share);
	ADD_TEST(s, seq_table_layout_is_dense_rows);
	return 0;
}
