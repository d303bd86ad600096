// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/fault_test.c - kvmm_fault: fail the N-th metadata allocation
 * of every operation that allocates, for N = 1, 2, ... until it succeeds.
 * Each failure must return -ENOMEM, leave every statistic byte for byte
 * as it was (but meta_bytes, when the node cache kept a new slab), keep
 * kvmm_check() passing and leak nothing.
 */
#include <errno.h>

#include "../helpers.h"

struct scenario {
	const char *name;
	uint32_t page_size;
	void (*setup)(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t *seq);
	int (*op)(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq);
	uint32_t host_pages;
	uint32_t write_policy;
};

#define NTOK 48

static void setup_cached(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t *seq)
{
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, NTOK), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, seq), 0);
}

/* a sequence that computed a prompt diverging from the cached one at 20 */
static void setup_diverging(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t *seq)
{
	uint32_t other[NTOK];

	memcpy(other, tok, sizeof(other));
	other[20] ^= 1;
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, other, NTOK), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, seq), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_extend(ctx, *seq, NTOK, 0), 0);
}

/*
 * Use up the node cache's first slab (63 nodes: a root, @tok's leaf and 61
 * one-token leaves), so that the next node (a new namespace's root, or
 * the upper half of a split) needs a new slab.
 */
static void setup_slab_full(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t *seq)
{
	uint32_t i, one;

	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, NTOK), 0);
	for (i = 0; i < 61; i++) {
		one = 5000 + i;
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, &one, 1), 0);
	}
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, seq), 0);
}

/* @tok cached, then demoted to the host tier; a sequence matched it (0). */
static void setup_demoted(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t *seq)
{
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, NTOK), 0);
	CU_ASSERT_FATAL(kvmm_reclaim(ctx, 1u << 20) > 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_prefix_tiers(ctx, 0, tok, NTOK, NULL), NTOK);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, seq), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_match(ctx, *seq, tok, NTOK), 0);
}

static int op_open_new_ns(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	uint32_t s;

	(void)tok;
	(void)seq;
	return kvmm_seq_open(ctx, 42, &s);
}

static int op_match_split(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	return kvmm_seq_match(ctx, seq, tok, 24);
}

static int op_commit(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	return kvmm_seq_commit(ctx, seq, tok, NTOK);
}

static int op_close(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	return kvmm_seq_close(ctx, seq, tok, NTOK);
}

static int op_retract(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	return kvmm_seq_retract(ctx, seq, tok, NTOK);
}

static int op_pin(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	(void)seq;
	return kvmm_prefix_pin(ctx, 0, tok, 16);
}

static int op_set_prio(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	(void)seq;
	return kvmm_prefix_set_prio(ctx, 0, tok, 16, 3);
}

/* a promotion whose path ends inside a demoted node */
static int op_promote_split(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	return kvmm_seq_promote(ctx, seq, tok, 24);
}

/* a prefetch whose budget ends inside a demoted node (no sequence involved) */
static int op_prefetch_split(struct kvmm_ctx *ctx, uint32_t *tok, uint32_t seq)
{
	(void)seq;
	return kvmm_prefetch(ctx, 0, tok, NTOK, 5, 0);
}

static const struct scenario scenarios[] = {
	{ "open in a new namespace", 1, setup_slab_full, .op = op_open_new_ns },
	{ "match that splits, node cache empty", 1, setup_slab_full, .op = op_match_split },
	{ "match that splits", 1, setup_cached, .op = op_match_split },
	{ "match that splits, pages of 8", 8, setup_cached, .op = op_match_split },
	{ "commit that splits and adds a leaf", 1, setup_diverging, .op = op_commit },
	{ "commit, pages of 4", 4, setup_diverging, .op = op_commit },
	{ "close that commits", 2, setup_diverging, .op = op_close },
	{ "retract that commits", 1, setup_diverging, .op = op_retract },
	{ "pin that splits", 1, setup_cached, .op = op_pin },
	{ "set_prio that splits", 4, setup_cached, .op = op_set_prio },
	{ "promote that splits", 1, setup_demoted, .op = op_promote_split, .host_pages = 256 },
	{ "promote, pages of 4", 4, setup_demoted, .op = op_promote_split, .host_pages = 256 },
	{ "commit that splits a copied node", 1, setup_diverging, .op = op_commit,
	  .host_pages = 256, .write_policy = KVMM_WRITE_THROUGH },
	{ "promote that keeps the copy", 1, setup_demoted, .op = op_promote_split,
	  .host_pages = 256, .write_policy = KVMM_WRITE_THROUGH },
	{ "prefetch that splits", 1, setup_demoted, .op = op_prefetch_split, .host_pages = 256 },
	{ "prefetch, pages of 4", 4, setup_demoted, .op = op_prefetch_split, .host_pages = 256 },
};

static void run_scenario(const struct scenario *sc)
{
	unsigned long n, failures = 0;
	uint32_t tok[NTOK];

	test_tokens(tok, NTOK, 77);
	for (n = 1; n < 100; n++) {
		struct test_alloc ta = { 0 };
		struct kvmm_params p = test_params(sc->page_size, 256, 4, 64);
		uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
		struct kvmm_ctx *ctx = NULL;
		uint32_t seq;
		int ret;

		p.alloc = &test_alloc_ops;
		p.alloc_priv = &ta;
		p.host_pages = sc->host_pages;
		p.host_node = KVMM_NODE_NEAREST;
		p.write_policy = sc->write_policy;
		CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
		sc->setup(ctx, tok, &seq);
		test_stats(ctx, before);
		ta.fail_at = ta.calls + n;
		ret = sc->op(ctx, tok, seq);
		ta.fail_at = 0;
		CU_ASSERT_EQUAL(kvmm_check(ctx), 0);
		if (ret == -ENOMEM) {
			failures++;
			test_stats(ctx, after);
			/*
			 * The node cache may have grown by a slab before a later
			 * allocation failed: kept for reuse, freed at destroy
			 * (checked below), so only meta_bytes may differ.
			 */
			CU_ASSERT(after[KVMM_STAT_META_BYTES] >= before[KVMM_STAT_META_BYTES]);
			after[KVMM_STAT_META_BYTES] = before[KVMM_STAT_META_BYTES];
			ASSERT_STATS_SAME(before, after);
		} else {
			CU_ASSERT(ret >= 0);
		}
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		CU_ASSERT_EQUAL(ta.live_bytes, 0);
		if (ret != -ENOMEM)
			break;
	}
	if (!failures)
		fprintf(stderr, "scenario '%s' never allocated\n", sc->name);
	CU_ASSERT(failures > 0);
	CU_ASSERT(n < 100);
}

static void every_allocation_failure_changes_nothing(void)
{
	size_t i;

	for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		run_scenario(&scenarios[i]);
}

static void create_fails_cleanly_at_every_allocation(void)
{
	unsigned long n;

	for (n = 1; n < 50; n++) {
		struct test_alloc ta = { .fail_at = n };
		struct kvmm_params p = test_params(4, 1000, 8, 256);
		struct kvmm_ctx *ctx = NULL;
		int ret;

		p.alloc = &test_alloc_ops;
		p.alloc_priv = &ta;
		ret = kvmm_create(&p, &ctx);
		if (!ret) {
			CU_ASSERT(n > 3);
			kvmm_destroy(ctx);
			CU_ASSERT_EQUAL(ta.live_blocks, 0);
			return;
		}
		CU_ASSERT_EQUAL(ret, -ENOMEM);
		CU_ASSERT_PTR_NULL(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
	}
	CU_FAIL("kvmm_create never succeeded");
}

static void hash_growth_failure_is_harmless(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_params p = test_params(1, 4096, 2, 8);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[2], i;

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	/*
	 * 1,500 leaves grow the 256-bucket hash to 1,024, then try 2,048.
	 * Refuse every bucket array of 2,048 (no other block has that size):
	 * the inserts must not notice, only the chains get longer.
	 */
	ta.fail_size = 2048 * sizeof(void *);
	for (i = 0; i < 1500; i++) {
		tok[0] = i;
		tok[1] = i + 1;
		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 2), 0);
	}
	ta.fail_size = 0;
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 1500);
	CU_ASSERT(ta.calls > 0);
	for (i = 0; i < 1500; i += 97) {
		tok[0] = i;
		tok[1] = i + 1;
		CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 2), 2);
	}
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
}

int register_fault_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_fault", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, every_allocation_failure_changes_nothing);
	ADD_TEST(s, create_fails_cleanly_at_every_allocation);
	ADD_TEST(s, hash_growth_failure_is_harmless);
	return 0;
}
