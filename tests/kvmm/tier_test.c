// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/tier_test.c - the lower tiers: demotion on reclaim, promotion
 * with verification, adoption of recomputed pages, and the faults on the
 * way (a corrupted page, a failed copy, a full tier, a store that will not
 * start); for the NVMe tier also restart, bad files and an I/O fault sweep.  Every sequence's KV is stamped from its tokens when computed,
 * and every promotion is checked against the stamps: promoted KV must be
 * exactly the KV that was demoted for those tokens.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../helpers.h"

#define PS	4	/* tokens per page */
#define ARRAY_LEN(a)	(sizeof(a) / sizeof((a)[0]))

/* The write policy of every context made here; the write-through tests set it. */
static uint32_t policy = KVMM_WRITE_BACK;

static struct kvmm_ctx *tier_ctx(uint32_t dev_pages, uint32_t host_pages,
				 struct kvmm_mock_arg *mock, struct kvmm_host_arg *host)
{
	struct kvmm_params p = test_params(PS, dev_pages, 8, 256);
	struct kvmm_ctx *ctx = NULL;

	p.write_policy = policy;
	p.host_pages = host_pages;
	p.host_node = KVMM_NODE_NEAREST;
	p.backend_arg = mock;
	p.host_arg = host;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

static uint64_t host_stat(struct kvmm_ctx *ctx, unsigned item)
{
	return test_stat(ctx, item);
}

/* Fill the device with other prompts until @tok's prefix is demoted. */
static void push_down(struct kvmm_ctx *ctx, uint32_t seed, uint32_t count)
{
	uint32_t other[32], i;

	for (i = 0; i < count; i++) {
		test_tokens(other, 32, seed + i);
		CU_ASSERT_EQUAL(test_kv_serve(ctx, other, 32, false), 0);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);	/* background reclaim kept up */
		CHECK_OK(ctx);
	}
}

static void test_demote_promote_roundtrip(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	struct kvmm_tier_hits hits;
	uint32_t tok[32];

	test_tokens(tok, 32, 1);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 100, 2);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES) >= 8);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED) >= 8);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 0);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 32);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 0);

	/* the whole prompt comes back and reads as it was computed */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 8);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_HIT_TOKENS), 32);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_BYTES_OUT) > 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_CSUM_FAIL), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A prompt partly on the device, partly demoted: a split path. */
static void test_promote_partial_path(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	struct kvmm_tier_hits hits;
	uint32_t tok[32];

	test_tokens(tok, 32, 2);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 200, 2);
	/* the first half comes back by itself, then the whole */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 16, true), 16);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 16);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 16);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 30, true), 28);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A page whose bytes changed on the host is a miss, never served. */
static void test_corrupt_page_is_a_miss(void)
{
	struct kvmm_host_arg host = { .flip_every = 1 };
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, &host);
	uint32_t tok[32];

	test_tokens(tok, 32, 3);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 300, 2);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_CSUM_FAIL), 1);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 0);
	CHECK_OK(ctx);
	/* the recomputed prompt is cached again, on the device */
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	kvmm_destroy(ctx);
}

/* A failed scatter is a miss; a failed gather drops instead of demoting. */
static void test_copy_faults(void)
{
	struct kvmm_mock_faults mf = { .fail_copy = -EIO, .fail_every = 0 };
	struct kvmm_mock_arg mock = { .faults = &mf };
	struct kvmm_ctx *ctx = tier_ctx(16, 64, &mock, NULL);
	uint32_t tok[32];
	uint64_t demoted;

	test_tokens(tok, 32, 4);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 400, 2);
	demoted = host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES);
	CU_ASSERT(demoted >= 8);
	kvmm_destroy(ctx);

	/* every copy fails: demotion falls back to dropping, promotion to a miss */
	mf.fail_every = 1;
	ctx = tier_ctx(16, 64, &mock, NULL);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 400, 2);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES), 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_IO_ERRORS) > 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_EVICT_PAGES) >= 8);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	/* demotions work, then promotion's scatter fails: a miss */
	mf.fail_every = 0;
	ctx = tier_ctx(16, 64, &mock, NULL);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 400, 2);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 32);
	mf.fail_every = 1;
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_IO_ERRORS) >= 1);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A full host tier drops its own coldest prefixes to take new ones. */
static void test_host_full(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 16, NULL, NULL);
	uint32_t tok[32];

	test_tokens(tok, 32, 5);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 500, 6);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_EVICT_PAGES) > 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED) <= 16);
	/* the oldest prompt went first: it is nowhere now */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Recomputing a demoted prefix hands the node the new device pages. */
static void test_adopt_recomputed(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	struct kvmm_tier_hits hits;
	uint32_t tok[32];

	test_tokens(tok, 32, 6);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 600, 2);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 32);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);	/* no promote: recompute */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void test_drop_caches_all_tiers(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	uint32_t tok[32];

	test_tokens(tok, 32, 7);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 700, 3);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED) > 0);
	CU_ASSERT(kvmm_drop_caches(ctx) > 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 64);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void test_bad_params(void)
{
	struct kvmm_host_arg host = { .fail_init = -ENOMEM };
	struct test_alloc ta = { 0 };
	struct kvmm_params p = test_params(PS, 16, 8, 256);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[8];

	p.host_pages = 16;
	p.host_node = -2;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	p.host_node = KVMM_NODE_NEAREST;
	p.host_arg = &host;
	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -ENOMEM);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	/* promote with nothing demoted, or on a bad sequence */
	ctx = tier_ctx(16, 16, NULL, NULL);
	test_tokens(tok, 8, 8);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, 3, tok, 8), -EINVAL);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 8, true), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 0, NULL), -EINVAL);
	kvmm_destroy(ctx);
}

/*
 * Conversations over shared system prompts on a small device and host:
 * random turns, some promoted, some recomputed.  Every promotion is checked
 * byte for byte and the invariants after every request.
 */
static void random_conversations(struct kvmm_ctx *ctx, uint32_t turns)
{
	uint32_t conv[12][96], len[12] = { 0 }, i, x = 12345;

	for (i = 0; i < 12; i++) {
		test_tokens(conv[i], 96, 1000 + i);
		if (i % 3)	/* three system prompts of 16 tokens */
			memcpy(conv[i], conv[i - i % 3], 16 * sizeof(uint32_t));
	}
	for (i = 0; i < turns; i++) {
		uint32_t c, n;
		int m;

		x = x * 1103515245u + 12345u;
		c = (x >> 8) % 12;
		n = len[c] + 8 + (x >> 20) % 9;
		if (n > 96)
			n = 24;
		len[c] = n;
		m = test_kv_serve(ctx, conv[c], n, (x >> 4) & 1);
		CU_ASSERT(m >= 0);
		/* background reclaim keeps up half the time; else it runs beside */
		if ((x >> 12) & 1)
			CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		if (kvmm_check(ctx)) {
			CU_FAIL("invariants broken");
			break;
		}
	}
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
}

static void test_random_conversations(void)
{
	struct kvmm_ctx *ctx = tier_ctx(48, 96, NULL, NULL);

	random_conversations(ctx, 600);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES) > 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_EVICT_PAGES) > 0);
	CU_ASSERT(kvmm_drop_caches(ctx) >= 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 48);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 96);
	kvmm_destroy(ctx);
}

/* The same through the ring: MATCH flags the rest, LOOKUP splits it, PROMOTE maps it. */
static void test_ring_promote(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	struct {
		uint32_t tok[32];
		struct kvmm_tier_hits hits;
	} buf;
	struct kvmm_iovec iov = { &buf, sizeof(buf) };
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	uint32_t flags;
	int32_t seq;

	test_tokens(buf.tok, 32, 9);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, buf.tok, 32, false), 0);
	push_down(ctx, 900, 2);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&ring, &iov, 1), 0);

	sqe = TEST_SQE(&ring);
	kvmm_prep_lookup(sqe, 0, 1, 0, 32);
	sqe->arg = KVMM_LOOKUP_TIERS;
	sqe->arg2 = offsetof(typeof(buf), hits);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 32);
	CU_ASSERT_EQUAL(buf.hits.tokens[KVMM_TIER_HOST], 32);
	sqe = TEST_SQE(&ring);
	kvmm_prep_lookup(sqe, 0, 1, 0, 32);
	sqe->arg = 2;
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EINVAL);
	sqe = TEST_SQE(&ring);
	kvmm_prep_lookup(sqe, 0, 1, 0, 32);
	sqe->arg = KVMM_LOOKUP_TIERS;
	sqe->arg2 = sizeof(buf);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EFAULT);

	kvmm_prep_open(TEST_SQE(&ring), 0);
	seq = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(seq >= 0);
	kvmm_prep_match(TEST_SQE(&ring), (uint32_t)seq, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, &flags), 0);
	CU_ASSERT(flags & KVMM_CQE_F_LOWER);
	kvmm_prep_promote(TEST_SQE(&ring), (uint32_t)seq, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, &flags), 32);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, (uint32_t)seq, buf.tok, 0, 32, true), 0);
	kvmm_prep_close(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	CHECK_OK(ctx);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
}


/* ---- PREFETCH: a queued prompt's prefix up ahead of its admission ---- */

/* @tok served, then demoted whole to the host tier; the device emptied. */
static void demoted_free_device(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t seed)
{
	struct kvmm_tier_hits hits;

	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, seed, 2);
	CU_ASSERT(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, NULL) >= 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 32);
	CHECK_OK(ctx);
}

/*
 * A prefetched prompt is on the device before it is admitted: its MATCH
 * maps all of it with no PROMOTE, its KV is what was computed, and
 * prefetch_hits counts what was used.  Bad arguments change nothing.
 */
static void test_prefetch_host(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	struct kvmm_tier_hits hits;
	uint64_t evicted;
	uint32_t tok[32];

	test_tokens(tok, 32, 31);
	demoted_free_device(ctx, tok, 3100);
	evicted = test_stat(ctx, KVMM_STAT_EVICT_PAGES);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 2), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, KVMM_PREFETCH_RECLAIM), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, NULL, 32, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 0, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 257, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(NULL, 0, tok, 32, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 7, tok, 32, 0, 0), 0);	/* no such namespace */
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, PS - 1, 0, 0), 0);	/* no whole page */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), 0);
	CHECK_OK(ctx);

	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 8);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), 8);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVICT_PAGES), evicted);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 0);	/* all up already */

	/* admission: MATCH alone maps the whole prompt, stamps checked */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), 8);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), 8);	/* once */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * The budget cuts the prefix from the bottom at a page boundary, and a
 * prefetch takes only free frames above the low watermark: with running
 * sequences holding the rest of the device it evicts nothing, their KV
 * is untouched, and with no room it does nothing at all.
 */
static void test_prefetch_budget_room(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	uint64_t evicted, low, cached;
	uint32_t tok[32], run[40], seq[2];
	struct kvmm_tier_hits hits;

	test_tokens(tok, 32, 32);
	demoted_free_device(ctx, tok, 3200);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 3, 0), 3);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 12);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 20);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), 3);
	push_down(ctx, 3300, 2);
	CU_ASSERT(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, NULL) >= 0);

	/* running sequences hold all but low + 2 frames: 2 come up */
	low = test_stat(ctx, KVMM_STAT_WMARK_LOW);
	CU_ASSERT_FATAL(low + 2 <= 6);
	test_tokens(run, 40, 34);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, run, 40, &seq[0]), 0);
	test_kv_stamp(ctx, seq[0], run, 0, 40, false);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq[1]), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_extend(ctx, seq[1], (uint32_t)(6 - low - 2) * PS, 0), 0);
	test_kv_stamp(ctx, seq[1], run, 0, (uint32_t)(6 - low - 2) * PS, false);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), low + 2);
	evicted = test_stat(ctx, KVMM_STAT_EVICT_PAGES);
	cached = test_stat(ctx, KVMM_STAT_PAGES_CACHED);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), low);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), cached + 2);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 0);	/* no room left */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVICT_PAGES), evicted);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq[0], run, 0, 40, true), 0);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq[1], run, 0, (uint32_t)(6 - low - 2) * PS, true), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq[0], NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq[1], NULL, 0), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * On a device full of cache there is no free room: a prefetch does
 * nothing, unless KVMM_PREFETCH_RECLAIM lets it take its budget as an
 * allocation would, demoting the coldest cached leaves; a running
 * sequence's pages are never among them.
 */
static void test_prefetch_reclaim(void)
{
	struct kvmm_ctx *ctx = tier_ctx(16, 64, NULL, NULL);
	uint32_t tok[32], run[16], other[32], seq, free;
	struct kvmm_tier_hits hits;
	uint64_t demoted;

	test_tokens(tok, 32, 39);
	test_tokens(run, 16, 40);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 3900, 2);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, run, 16, &seq), 0);
	test_kv_stamp(ctx, seq, run, 0, 16, false);
	/* the rest of the device: cache */
	free = (uint32_t)test_stat(ctx, KVMM_STAT_PAGES_FREE);
	CU_ASSERT_FATAL(free >= 1 && free <= 8);
	test_tokens(other, free * PS, 41);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, other, free * PS), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 32);
	demoted = host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES), demoted);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 6, KVMM_PREFETCH_RECLAIM), 6);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES) >= demoted + 6);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 24);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq, run, 0, 16, true), 0);
	CHECK_OK(ctx);
	/* more than the unlocked cache can give: nothing */
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, run, 16, 0, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), 6);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A prefetch whose copy fails or whose page does not verify is a miss. */
static void test_prefetch_faults(void)
{
	struct kvmm_mock_faults mf = { .fail_copy = -EIO, .fail_every = 0 };
	struct kvmm_mock_arg mock = { .faults = &mf };
	struct kvmm_host_arg host = { .flip_every = 0 };
	struct kvmm_ctx *ctx = tier_ctx(16, 64, &mock, &host);
	uint32_t tok[32];

	test_tokens(tok, 32, 35);
	demoted_free_device(ctx, tok, 3500);
	mf.fail_every = 1;
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 0);
	mf.fail_every = 0;
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_IO_ERRORS) >= 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_IO), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 0);	/* recomputed */
	kvmm_destroy(ctx);

	host.flip_every = 1;
	ctx = tier_ctx(16, 64, NULL, &host);
	demoted_free_device(ctx, tok, 3600);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok, 32, 0, 0), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_CSUM_FAIL), 1);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* ---- the NVMe tier: an io_uring store below the host tier ---- */

/* A file in this run's scratch directory (tests/helpers.c). */
#define nvme_file(name)	test_tmp_file(name)

static struct kvmm_params nvme_params(uint32_t ps, uint32_t dev, uint32_t host,
				      uint32_t nvme, const char *path,
				      struct kvmm_nvme_arg *arg)
{
	struct kvmm_params p = test_params(ps, dev, 8, 256);

	p.host_pages = host;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = nvme;
	p.nvme_path = path;
	p.nvme_arg = arg;
	p.nvme_qd = 4;		/* a node of 8 pages takes two batches */
	p.write_policy = policy;
	/*
	 * A host tier of a few nodes: background reclaim keeps half of it
	 * free, so that most of what the device demotes reaches NVMe.
	 */
	p.host_wmark_low = host / 2;
	p.host_wmark_high = host * 3 / 4;
	return p;
}

static int nvme_create(uint32_t dev, uint32_t host, uint32_t nvme, const char *path,
		       struct kvmm_nvme_arg *arg, struct test_log *log,
		       struct kvmm_ctx **ctxp)
{
	struct kvmm_params p = nvme_params(PS, dev, host, nvme, path, arg);

	if (log) {
		p.log = test_log_fn;
		p.log_priv = log;
	}
	*ctxp = NULL;
	return kvmm_create(&p, ctxp);
}

static struct kvmm_ctx *nvme_ctx(uint32_t dev, uint32_t host, uint32_t nvme,
				 const char *path, struct kvmm_nvme_arg *arg)
{
	struct kvmm_ctx *ctx;

	CU_ASSERT_EQUAL_FATAL(nvme_create(dev, host, nvme, path, arg, NULL, &ctx), 0);
	return ctx;
}

/* Serve @tok, then push it down past the host tier onto NVMe. */
static void to_nvme(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t seed)
{
	struct kvmm_tier_hits hits;

	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, seed, 4);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 32);
}

static void test_nvme_roundtrip(void)
{
	const char *path = nvme_file("roundtrip");
	struct kvmm_ctx *ctx = nvme_ctx(16, 8, 64, path, NULL);
	uint32_t tok[32];

	test_tokens(tok, 32, 11);
	to_nvme(ctx, tok, 1100);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES) >= 8);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_BYTES_IN) > 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_HIT_TOKENS), 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_IO_ERRORS), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);	/* what the promotion's room sent down */
	CU_ASSERT(kvmm_drop_caches(ctx) > 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_FREE), 64);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A host page whose bytes changed before writeback is not written down:
 * the write checks each page against its seal as it copies it, and the
 * prefix is dropped, never put on NVMe with a fresh checksum over bad
 * bytes.
 */
static void test_nvme_writeback_refuses_corrupt_host_page(void)
{
	const char *path = nvme_file("wb-corrupt");
	struct kvmm_host_arg host = { .flip_every = 1 };
	struct kvmm_params p = nvme_params(PS, 16, 8, 64, path, NULL);
	struct kvmm_tier_hits hits;
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[32];

	p.host_arg = &host;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(tok, 32, 12);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 1200, 4);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_CSUM_FAIL) >= 1);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_FREE), 64);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* A restarted context on the same file finds its prefixes again. */
static void test_nvme_restart(void)
{
	const char *path = nvme_file("restart");
	struct kvmm_ctx *ctx = nvme_ctx(16, 8, 64, path, NULL);
	struct kvmm_tier_hits hits;
	uint32_t tok[32];
	uint64_t cached;
	struct stat st;

	test_tokens(tok, 32, 12);
	to_nvme(ctx, tok, 1200);
	cached = host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	kvmm_destroy(ctx);

	ctx = nvme_ctx(16, 8, 64, path, NULL);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), cached);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 32);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);	/* the bytes are checked */
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	CHECK_OK(ctx);
	/* it goes down again, then the file loses its tail: fewer pages, all good */
	push_down(ctx, 1250, 4);
	cached = host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(truncate(path, st.st_size / 3 / 4096 * 4096), 0);
	ctx = nvme_ctx(16, 8, 64, path, NULL);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) < cached);
	CHECK_OK(ctx);
	CU_ASSERT(test_kv_serve(ctx, tok, 32, true) >= 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	/* a bigger tier on the same file keeps what it had */
	ctx = nvme_ctx(16, 8, 128, path, NULL);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) > 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

static void write_file(const char *path, const void *buf, size_t n, off_t at)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0600);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pwrite(fd, buf, n, at), (ssize_t)n);
	close(fd);
}

/* Files that are not ours, or not usable: a clear error, or a cold start. */
static void test_nvme_bad_files(void)
{
	struct kvmm_nvme_arg fail = { .fail_init = -EIO };
	const char *path = nvme_file("bad");
	struct test_log log = { 0 };
	struct test_alloc ta = { 0 };
	struct kvmm_params p;
	struct kvmm_ctx *ctx;
	char text[] = "precious data, not a kvmm file", back[sizeof(text)];
	uint32_t tok[32];
	int fd;

	/* the NVMe tier needs a host tier and a path */
	CU_ASSERT_EQUAL(nvme_create(16, 0, 64, path, NULL, NULL, &ctx), -EINVAL);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, NULL, NULL, NULL, &ctx), -EINVAL);
	/* a missing directory, a directory */
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, "/nonexistent-kvmm/x", NULL, &log, &ctx),
			-ENOENT);
	CU_ASSERT(strstr(log.last, "/nonexistent-kvmm/x") != NULL);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, nvme_file("."), NULL, &log, &ctx), -EISDIR);
	/* someone else's file is refused and left alone */
	write_file(path, text, sizeof(text), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EINVAL);
	CU_ASSERT(strstr(log.last, "not a kvmm") != NULL);
	fd = open(path, O_RDONLY);
	CU_ASSERT_EQUAL(read(fd, back, sizeof(back)), (ssize_t)sizeof(back));
	CU_ASSERT_EQUAL(memcmp(back, text, sizeof(text)), 0);
	close(fd);
	unlink(path);

	/* a file of another geometry is refused */
	ctx = nvme_ctx(16, 8, 64, path, NULL);
	kvmm_destroy(ctx);
	p = nvme_params(PS * 2, 16, 8, 64, path, NULL);
	p.log = test_log_fn;
	p.log_priv = &log;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EEXIST);
	CU_ASSERT(strstr(log.last, "another geometry") != NULL);
	/* the same bytes per page in another shape: the message tells them apart */
	p = nvme_params(PS, 16, 8, 64, path, NULL);
	p.model.kv_heads = 2;
	p.model.head_dim = 2;
	p.log = test_log_fn;
	p.log_priv = &log;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EEXIST);
	CU_ASSERT(strstr(log.last, "1 KV heads x 4 x 2 bytes") != NULL);
	CU_ASSERT(strstr(log.last, "2 KV heads x 2 x 2 bytes") != NULL);

	/* a torn superblock: refused, loudly; reformatted, a cold start */
	ctx = nvme_ctx(16, 8, 64, path, NULL);
	test_tokens(tok, 32, 13);
	to_nvme(ctx, tok, 1300);
	kvmm_destroy(ctx);
	write_file(path, "X", 1, 40);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EUCLEAN);
	CU_ASSERT(strstr(log.last, "damaged") != NULL);
	p = nvme_params(PS, 16, 8, 64, path, NULL);
	p.nvme_flags = KVMM_NVME_REFORMAT;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 0);
	kvmm_destroy(ctx);
	/* ... and the pages of the old format never come back */
	ctx = nvme_ctx(16, 8, 64, path, NULL);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	kvmm_destroy(ctx);

	/* a store that fails to start leaks nothing */
	p = nvme_params(PS, 16, 8, 64, path, &fail);
	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EIO);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	unlink(path);
}

/* The first 4 KiB of @path (its superblock), for before/after comparisons. */
static void read_super(const char *path, char *buf)
{
	int fd = open(path, O_RDONLY);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, buf, 4096, 0), 4096);
	close(fd);
}

/* Flip bit @bit of byte @at of @path. */
static void flip_bit(const char *path, off_t at, unsigned bit)
{
	unsigned char c;
	int fd = open(path, O_RDWR);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, &c, 1, at), 1);
	c ^= (unsigned char)(1u << bit);
	CU_ASSERT_EQUAL(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

static int model_create(const char *model_id, uint32_t ps, uint32_t flags, const char *path,
			struct test_log *log, struct kvmm_ctx **ctxp)
{
	struct kvmm_params p = nvme_params(ps, 16, 8, 64, path, NULL);

	p.model_id = model_id;
	p.nvme_flags = flags;
	p.log = test_log_fn;
	p.log_priv = log;
	*ctxp = NULL;
	return kvmm_create(&p, ctxp);
}

/*
 * One file, one context: a second context on a file in use (here in the
 * same process: the lock is the open file's) is refused, and the first
 * goes on undisturbed.
 */
static void test_nvme_file_locked(void)
{
	const char *path = nvme_file("locked");
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx, *second;
	uint32_t tok[32];

	ctx = nvme_ctx(16, 8, 64, path, NULL);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &second), -EBUSY);
	CU_ASSERT_PTR_NULL(second);
	CU_ASSERT(strstr(log.last, path) != NULL);
	CU_ASSERT(strstr(log.last, "in use") != NULL);
	/* reformatting does not take a file in use either */
	CU_ASSERT_EQUAL(model_create(NULL, PS, KVMM_NVME_REFORMAT, path, &log, &second), -EBUSY);
	test_tokens(tok, 32, 14);
	to_nvme(ctx, tok, 1400);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	/* the lock goes with the context */
	ctx = nvme_ctx(16, 8, 64, path, NULL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* Hold the lock of the file at @arg's fd for 200 ms, as a dying instance's I/O. */
static void *drop_lock_later(void *arg)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET };

	usleep(200000);
	fcntl(*(int *)arg, F_OFD_SETLK, &fl);
	return NULL;
}

/*
 * A lock that goes a moment after the context starts (a killed instance's
 * in-flight I/O holding the file) is waited for: the context starts, and
 * its log says it waited.  One held for good is refused after the wait,
 * saying how long kvmm waited.
 */
static void test_nvme_lock_waited_for(void)
{
	const char *path = nvme_file("lockwait");
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx;
	pthread_t t;
	int fd;

	ctx = nvme_ctx(16, 8, 64, path, NULL);		/* a kvmm file */
	kvmm_destroy(ctx);
	fd = open(path, O_RDWR | O_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL_FATAL(fcntl(fd, F_OFD_SETLK, &fl), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, drop_lock_later, &fd), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), 0);
	pthread_join(t, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "waited"));
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "for its lock"));
	if (ctx) {
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
	}
	CU_ASSERT_EQUAL(fcntl(fd, F_OFD_SETLK, &fl), 0);	/* held for good now */
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EBUSY);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "held its lock for the 2000 ms kvmm waits"));
	close(fd);
	unlink(path);
}

/*
 * KV written under one model id is never served under another of the same
 * geometry: refused with both names, the file left alone; reformatting
 * starts cold with nothing of the other model's.
 */
static void test_nvme_model_identity(void)
{
	const char *path = nvme_file("model");
	struct test_log log = { 0 };
	struct kvmm_tier_hits hits;
	struct kvmm_ctx *ctx;
	char before[4096], after[4096];
	uint32_t tok[32];

	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, 0, path, &log, &ctx), 0);
	test_tokens(tok, 32, 15);
	to_nvme(ctx, tok, 1500);
	kvmm_destroy(ctx);
	read_super(path, before);

	CU_ASSERT_EQUAL(model_create("model-b", PS, 0, path, &log, &ctx), -EEXIST);
	CU_ASSERT(strstr(log.last, "'model-a'") != NULL);
	CU_ASSERT(strstr(log.last, "'model-b'") != NULL);
	/* no model id is not a match either */
	CU_ASSERT_EQUAL(model_create(NULL, PS, 0, path, &log, &ctx), -EEXIST);
	CU_ASSERT(strstr(log.last, "no model id") != NULL);
	read_super(path, after);
	CU_ASSERT_EQUAL(memcmp(before, after, sizeof(before)), 0);

	/* the owner still finds its prefixes */
	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, 0, path, &log, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	/* model B reformats: a cold start, and model A's pages never come back */
	CU_ASSERT_EQUAL_FATAL(model_create("model-b", PS, KVMM_NVME_REFORMAT, path, &log,
					   &ctx), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL_FATAL(model_create("model-b", PS, 0, path, &log, &ctx), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0, path, &log, &ctx), -EEXIST);
	unlink(path);
}

/*
 * A superblock that does not check is refused, saying so, whatever
 * geometry the context has: a file of another geometry with one bit
 * flipped is neither reformatted nor recovered.
 */
static void test_nvme_superblock_damaged(void)
{
	const char *path = nvme_file("damaged");
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx;
	char before[4096], after[4096];
	uint32_t tok[32];

	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, 0, path, &log, &ctx), 0);
	test_tokens(tok, 32, 16);
	to_nvme(ctx, tok, 1600);
	kvmm_destroy(ctx);
	flip_bit(path, 12, 0);		/* the page size */
	read_super(path, before);

	/* another geometry, and this one */
	CU_ASSERT_EQUAL(model_create("model-a", PS * 2, 0, path, &log, &ctx), -EUCLEAN);
	CU_ASSERT(strstr(log.last, "damaged") != NULL);
	CU_ASSERT(strstr(log.last, path) != NULL);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0, path, &log, &ctx), -EUCLEAN);
	CU_ASSERT(strstr(log.last, "superblock is damaged") != NULL);
	read_super(path, after);
	CU_ASSERT_EQUAL(memcmp(before, after, sizeof(before)), 0);

	/* a bit of the model id, the version: the same */
	flip_bit(path, 12, 0);
	flip_bit(path, 100, 3);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0, path, &log, &ctx), -EUCLEAN);
	flip_bit(path, 100, 3);
	flip_bit(path, 8, 4);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0, path, &log, &ctx), -EUCLEAN);
	CU_ASSERT(strstr(log.last, "unknown layout version") != NULL);
	flip_bit(path, 8, 4);
	/* put back, it is whole again */
	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, 0, path, &log, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 32);
	kvmm_destroy(ctx);

	/* a superblock cut short */
	CU_ASSERT_EQUAL(truncate(path, 2048), 0);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0, path, &log, &ctx), -EUCLEAN);
	CU_ASSERT(strstr(log.last, "damaged") != NULL);
	/* reformatting takes any of these, cold */
	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS * 2, KVMM_NVME_REFORMAT, path, &log,
					   &ctx), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* Whether @path holds @n bytes of @byte from @at on. */
static bool file_holds(const char *path, off_t at, size_t n, int byte)
{
	char *buf = malloc(n), *want = malloc(n);
	int fd = open(path, O_RDONLY);
	bool ok = buf && want && fd >= 0 && pread(fd, buf, n, at) == (ssize_t)n;

	if (ok) {
		memset(want, byte, n);
		ok = !memcmp(buf, want, n);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	free(want);
	return ok;
}

/*
 * Files the NVMe tier must not take, each refused with its reason and
 * left as it was: another user's file, one its group or others may read
 * or write, a symbolic link (its target is not created), a non-empty file
 * that is not recognisably kvmm's (only a reformat takes one whose first
 * 4 KiB are zeros), a procfs file that says it is empty.
 */
static void test_nvme_files_refused(void)
{
	const char *path = nvme_file("owner"), *link = nvme_file("link");
	const char *target = nvme_file("link-target");
	struct test_log log = { 0 };
	char zeros[4096] = { 0 }, data[65536];
	struct kvmm_ctx *ctx;
	struct stat st;

	memset(data, 0xa5, sizeof(data));
	/* another uid's, even mode 600 */
	write_file(path, data, 8192, 0);
	CU_ASSERT_EQUAL_FATAL(chown(path, 65534, 65534), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "is owned by uid 65534"));
	CU_ASSERT_EQUAL(model_create(NULL, PS, KVMM_NVME_REFORMAT, path, &log, &ctx), -EPERM);
	CU_ASSERT(file_holds(path, 0, 8192, 0xa5));
	unlink(path);
	/* ours, but others or the group may read or write it */
	ctx = nvme_ctx(16, 8, 64, path, NULL);		/* a kvmm file */
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(chmod(path, 0666), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "(mode 666)"));
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "chmod 600"));
	CU_ASSERT_EQUAL(chmod(path, 0640), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EPERM);
	CU_ASSERT_EQUAL(chmod(path, 0600), 0);
	ctx = nvme_ctx(16, 8, 64, path, NULL);		/* and now it is fine */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
	/* a symbolic link: refused, its target never created */
	unlink(target);
	CU_ASSERT_EQUAL_FATAL(symlink(target, link), 0);
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, link, NULL, &log, &ctx), -ELOOP);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "is a symbolic link"));
	CU_ASSERT_NOT_EQUAL(lstat(target, &st), 0);
	unlink(link);
	/* zeros, then someone's data: not formatted without a reformat */
	write_file(path, zeros, sizeof(zeros), 0);
	write_file(path, data, sizeof(data), sizeof(zeros));
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "not recognisably a kvmm file"));
	CU_ASSERT(file_holds(path, sizeof(zeros), sizeof(data), 0xa5));
	CU_ASSERT_EQUAL_FATAL(model_create(NULL, PS, KVMM_NVME_REFORMAT, path, &log, &ctx), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
	/* a file of procfs says it is empty; it is no storage */
	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, "/proc/self/mem", NULL, &log, &ctx), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "is on procfs"));
}

/*
 * The file at @path, of an older layout, is refused with a message naming
 * @why until a context reformats it; then it serves.  It is removed.
 */
static void refused_until_reformatted(const char *path, const char *why)
{
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx;

	CU_ASSERT_EQUAL(nvme_create(16, 8, 64, path, NULL, &log, &ctx), -EEXIST);
	CU_ASSERT(strstr(log.last, why) != NULL);
	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, KVMM_NVME_REFORMAT, path, &log, &ctx),
			      0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL_FATAL(model_create("model-a", PS, 0, path, &log, &ctx), 0);
	kvmm_destroy(ctx);
	unlink(path);
}

/* A file of layout version 1 (no model identity) is refused until reformatted. */
static void test_nvme_layout_v1(void)
{
	const char *path = nvme_file("v1");
	struct kvmm_ctx *ctx;
	char sb[4096];
	uint32_t version = 1;
	uint64_t csum;

	ctx = nvme_ctx(16, 8, 64, path, NULL);
	kvmm_destroy(ctx);
	/* version 1: the same fields through the geometry (72 bytes), then its checksum */
	read_super(path, sb);
	memcpy(sb + 8, &version, sizeof(version));
	csum = XXH3_64bits(sb, 72);
	memcpy(sb + 72, &csum, sizeof(csum));
	memset(sb + 80, 0, sizeof(sb) - 80);
	write_file(path, sb, sizeof(sb), 0);
	refused_until_reformatted(path, "layout version 1");
}

/*
 * A file of layout version 2 (slots without the keyed-value fields) is
 * refused by name until reformatted.  The superblock's checksum is found
 * where it checks, then set again for version 2.
 */
static void test_nvme_layout_v2(void)
{
	const char *path = nvme_file("v2");
	struct kvmm_ctx *ctx;
	char sb[4096];
	uint32_t version = 2, at;
	uint64_t csum = 0;

	ctx = nvme_ctx(16, 8, 64, path, NULL);
	kvmm_destroy(ctx);
	read_super(path, sb);
	for (at = 16; at + 8 <= sizeof(sb); at += 8) {
		memcpy(&csum, sb + at, sizeof(csum));
		if (csum && csum == XXH3_64bits(sb, at))
			break;
	}
	CU_ASSERT_FATAL(at + 8 <= sizeof(sb));
	memcpy(sb + 8, &version, sizeof(version));
	csum = XXH3_64bits(sb, at);
	memcpy(sb + at, &csum, sizeof(csum));
	write_file(path, sb, sizeof(sb), 0);
	refused_until_reformatted(path, "layout version 2");
}

/* What the NVMe tier takes of the parameters: refused, naming the field. */
static void test_nvme_identity_params(void)
{
	const char *path = nvme_file("params");
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx;
	char id[KVMM_MODEL_ID_MAX + 2];

	memset(id, 'm', sizeof(id) - 1);
	id[sizeof(id) - 1] = '\0';
	CU_ASSERT_EQUAL(model_create(id, PS, 0, path, &log, &ctx), -EINVAL);
	CU_ASSERT(strstr(log.last, "model_id is longer than") != NULL);
	id[KVMM_MODEL_ID_MAX] = '\0';		/* the longest there may be */
	CU_ASSERT_EQUAL_FATAL(model_create(id, PS, 0, path, &log, &ctx), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL_FATAL(model_create(id, PS, 0, path, &log, &ctx), 0);
	kvmm_destroy(ctx);
	id[3] = '\n';
	CU_ASSERT_EQUAL(model_create(id, PS, 0, path, &log, &ctx), -EINVAL);
	CU_ASSERT(strstr(log.last, "model_id has a control character") != NULL);
	CU_ASSERT_EQUAL(model_create("model-a", PS, 0x2, path, &log, &ctx), -EINVAL);
	CU_ASSERT(strstr(log.last, "nvme_flags") != NULL);
	/* an empty id is no id */
	CU_ASSERT_EQUAL_FATAL(model_create(NULL, PS, KVMM_NVME_REFORMAT, path, &log, &ctx), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL_FATAL(model_create("", PS, 0, path, &log, &ctx), 0);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Every fault the injection layer can make, at every I/O site: no crash,
 * no leak, no wrong KV (test_kv_serve() checks every promoted byte), failed pages
 * become misses, and errors are counted.
 */
static void test_nvme_fault_sweep(void)
{
	static const int faults[] = { -EIO, -ENOSPC, -EAGAIN, KVMM_NVME_SHORT };
	static const uint32_t sites[] = { KVMM_NVME_SITE_WRITE, KVMM_NVME_SITE_READ };
	static const uint32_t every[] = { 1, 3 };
	const char *path = nvme_file("faults");
	uint32_t f, s, e;

	for (f = 0; f < ARRAY_LEN(faults); f++)
	for (s = 0; s < ARRAY_LEN(sites); s++)
	for (e = 0; e < ARRAY_LEN(every); e++) {
		struct kvmm_nvme_arg arg = { .fault = faults[f], .fault_every = every[e],
					     .fault_sites = sites[s] };
		/* short and -EAGAIN are retried, but not for ever */
		bool hard = every[e] == 1 ||
			    (faults[f] != KVMM_NVME_SHORT && faults[f] != -EAGAIN);
		struct kvmm_ctx *ctx = nvme_ctx(48, 16, 96, path, &arg);

		random_conversations(ctx, 150);
		if (hard)
			CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_IO_ERRORS) > 0);
		if (!hard && sites[s] == KVMM_NVME_SITE_READ)
			CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
		CU_ASSERT(kvmm_drop_caches(ctx) >= 0);
		CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_FREE), 96);
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 48);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		unlink(path);
	}
}

/* Bits flipped and pages torn on the file: misses, counted, never served. */
static void test_nvme_flip_tear(void)
{
	const char *path = nvme_file("flip");
	uint32_t i;

	for (i = 0; i < 2; i++) {
		struct kvmm_nvme_arg arg = { .flip_every = i ? 0 : 7, .tear_every = i ? 7 : 0 };
		struct kvmm_ctx *ctx = nvme_ctx(48, 16, 96, path, &arg);

		random_conversations(ctx, 200);
		CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL) > 0);
		CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		/* and after a restart, the same pages are still misses */
		arg = (struct kvmm_nvme_arg){ 0 };
		ctx = nvme_ctx(48, 16, 96, path, &arg);
		random_conversations(ctx, 100);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		unlink(path);
	}
}

/*
 * Conversations over all three tiers, a restart in the middle, and faults
 * on the restart scan: whatever comes back is exactly what was computed.
 */
static void test_nvme_conversations_restart(void)
{
	struct kvmm_nvme_arg scan = { .fault = -EIO, .fault_every = 2,
				      .fault_sites = KVMM_NVME_SITE_SCAN };
	const char *path = nvme_file("conv");
	struct kvmm_ctx *ctx = nvme_ctx(48, 24, 96, path, NULL);
	uint64_t cached;

	struct kvmm_tier_hits hits;
	uint32_t tok[32];

	random_conversations(ctx, 400);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_EVICT_PAGES) > 0);
	/*
	 * How much of the conversations is whole on NVMe at the end depends
	 * on how far background writeback got in the turns that did not
	 * wait for it; one prefix pushed all the way down is there whatever
	 * the timing, so the restart below always has something to find.
	 */
	test_tokens(tok, 32, 4242);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	push_down(ctx, 77, 16);		/* past the device's 48 and the host's 24 pages */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 32);
	kvmm_destroy(ctx);

	/*
	 * What hung below prefixes that were on the device or the host is
	 * lost with them; the rest comes back.  So may a chain that was
	 * promoted and whose slots were not reused since: its pages are
	 * still the KV of their prefixes (their keys say so), so the count
	 * is not bounded by @cached; test_kv_serve() checks every byte that comes up.
	 */
	ctx = nvme_ctx(48, 24, 96, path, NULL);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) > 0);
	CHECK_OK(ctx);
	random_conversations(ctx, 200);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
	cached = host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	kvmm_destroy(ctx);

	/* half the headers unreadable at start: fewer pages, all of them right */
	ctx = nvme_ctx(48, 24, 96, path, &scan);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) < cached);
	CHECK_OK(ctx);
	random_conversations(ctx, 200);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Per-tier drop_caches: a device prefix with its tail on NVMe (P then Q),
 * a prefix wholly on NVMe (A) and one on the device (D).  Dropping the
 * device keeps P (its tail would be lost with it) and touches no NVMe
 * page; dropping NVMe takes A and Q; then the device lets P go.  Each
 * tier's pages are counted.
 */
static void test_drop_caches_tier_mask(void)
{
	const char *path = nvme_file("drop-tiers");
	/*
	 * NVMe room for everything pushed down (80 pages): at 64 it filled,
	 * and whether Q, its oldest page, was evicted before the checks
	 * below turned on when background writeback ran.
	 */
	struct kvmm_ctx *ctx = nvme_ctx(16, 8, 128, path, NULL);
	uint64_t freed[KVMM_NR_TIERS], nvme, st[NR_KVMM_STATS], st2[NR_KVMM_STATS];
	struct test_alloc ta = { 0 };
	uint32_t pq[32], a[32], d[32];
	struct kvmm_tier_hits hits;

	test_tokens(pq, 32, 31);
	test_tokens(a, 32, 32);
	test_tokens(d, 32, 33);
	to_nvme(ctx, pq, 3100);
	to_nvme(ctx, a, 3200);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, pq, 16, false), 0);	/* P again: adopted */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, d, 32, false), 0);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, pq, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 16);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 16);
	CHECK_OK(ctx);
	nvme = host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	CU_ASSERT(nvme >= 16);

	/* refused: no tier, an unknown bit, no context; nothing changes */
	test_stats(ctx, st);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, 0, freed), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_ALL + 1, freed), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(NULL, KVMM_DROP_ALL, freed), -EINVAL);
	test_stats(ctx, st2);
	ASSERT_STATS_SAME(st, st2);

	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, freed),
			(int64_t)freed[KVMM_TIER_DEVICE]);
	CU_ASSERT(freed[KVMM_TIER_DEVICE] >= 8);		/* D at least */
	CU_ASSERT_EQUAL(freed[KVMM_TIER_HOST], 0);
	CU_ASSERT_EQUAL(freed[KVMM_TIER_NVME], 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), nvme);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, d, 32), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, pq, 32, &hits), 32);	/* P and Q stay */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 4);
	CHECK_OK(ctx);

	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_NVME | KVMM_DROP_HOST, freed),
			(int64_t)(nvme + freed[KVMM_TIER_HOST]));
	CU_ASSERT_EQUAL(freed[KVMM_TIER_DEVICE], 0);
	CU_ASSERT_EQUAL(freed[KVMM_TIER_NVME], nvme);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, pq, 32, &hits), 16);	/* Q went */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, a, 32, NULL), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, freed), 4);	/* P, now */
	CU_ASSERT_EQUAL(freed[KVMM_TIER_DEVICE], 4);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 0);
	CHECK_OK(ctx);

	/* the list of nodes cannot be allocated: -ENOMEM, nothing dropped */
	kvmm_destroy(ctx);
	unlink(path);
	{
		struct kvmm_params p = nvme_params(PS, 16, 8, 64, path, NULL);

		p.alloc = &test_alloc_ops;
		p.alloc_priv = &ta;
		CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	}
	CU_ASSERT_EQUAL(test_kv_serve(ctx, pq, 32, false), 0);
	test_stats(ctx, st);
	ta.fail_at = ta.calls + 1;
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_ALL, freed), -ENOMEM);
	ta.fail_at = 0;
	test_stats(ctx, st2);
	ASSERT_STATS_SAME(st, st2);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_ALL, NULL), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NODES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* DROP_CACHES through a ring: a tier mask, each tier's count, bad shapes. */
static void test_drop_caches_ring(void)
{
	const char *path = nvme_file("drop-ring");
	struct kvmm_ctx *ctx = nvme_ctx(16, 8, 64, path, NULL);
	struct kvmm_drop_counts *cnt;
	struct test_kring r;
	uint32_t a[32], d[32];
	uint64_t nvme;

	test_tokens(a, 32, 41);
	test_tokens(d, 32, 42);
	to_nvme(ctx, a, 4100);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, d, 32, false), 0);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	nvme = host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	test_kring_init(ctx, &r, 0, 0);
	cnt = (struct kvmm_drop_counts *)r.mem;
	/* len that is not the counts' size, a mask with no tier, buf without len */
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), KVMM_DROP_NVME, 1, 0, 8);
	CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EINVAL);
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), 0, 1, 0, sizeof(*cnt));
	CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EINVAL);
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), KVMM_DROP_ALL + 1, 1, 0, sizeof(*cnt));
	CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EINVAL);
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), KVMM_DROP_NVME, 1, 8, 0);
	CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EINVAL);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED), nvme);
	/* NVMe only: A goes, counted; D stays on the device */
	memset(cnt, 0xff, sizeof(*cnt));
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), KVMM_DROP_NVME, 1, 0, sizeof(*cnt));
	CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), (int32_t)nvme);
	CU_ASSERT_EQUAL(cnt->pages[KVMM_TIER_NVME], nvme);
	CU_ASSERT_EQUAL(cnt->pages[KVMM_TIER_DEVICE], 0);
	CU_ASSERT_EQUAL(cnt->pages[KVMM_TIER_HOST], 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, d, 32), 32);
	/* a mask without counts */
	kvmm_prep_drop_caches_tiers(TEST_SQE(&r.ring), KVMM_DROP_DEVICE, 0, 0, 0);
	CU_ASSERT(test_ring1(&r.ring, NULL) >= 8);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, d, 32), 0);
	CHECK_OK(ctx);
	test_kring_exit(&r);
	kvmm_destroy(ctx);
	unlink(path);
}

/* ---- asynchronous PROMOTE: the ring's promotions from NVMe ---- */

/*
 * While the I/O worker may be applying a promotion, the direct API needs
 * the context lock (as with a server thread); these take it.
 */
static int lcheck(struct kvmm_ctx *ctx)
{
	int ret;

	kvmm_lock(ctx);
	ret = kvmm_check(ctx);
	kvmm_unlock(ctx);
	return ret;
}

/* A ring on @ctx whose buffer 1 is @mem. */
static void async_ring(struct kvmm_ctx *ctx, struct kvmm_ring *ring, void *mem, size_t bytes)
{
	struct kvmm_ring_params rp = { .sq_entries = 16 };
	struct kvmm_iovec iov = { mem, bytes };

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, ring), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(ring, &iov, 1), 0);
}

/* OPEN and MATCH @tok (in buffer 1 at @off): the sequence. */
static uint32_t ring_open_match(struct kvmm_ring *ring, uint64_t off, uint32_t n,
				int32_t *matched)
{
	int32_t seq;

	kvmm_prep_open(TEST_SQE(ring), 0);
	seq = test_ring1(ring, NULL);
	CU_ASSERT_FATAL(seq >= 0);
	kvmm_prep_match(TEST_SQE(ring), (uint32_t)seq, 1, off, n);
	*matched = test_ring1(ring, NULL);
	return (uint32_t)seq;
}

static void ring_promote(struct kvmm_ring *ring, uint32_t seq, uint64_t off, uint32_t n,
			 uint64_t data)
{
	struct kvmm_sqe *sqe = TEST_SQE(ring);

	kvmm_prep_promote(sqe, seq, 1, off, n);
	kvmm_sqe_set_data(sqe, data);
	CU_ASSERT_EQUAL(kvmm_submit(ring), 1);
}

/* The next completion, which must be @data's. */
static int32_t ring_reap(struct kvmm_ring *ring, uint64_t data)
{
	struct kvmm_cqe *cqe;
	int32_t res;

	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->user_data, data);
	res = cqe->res;
	kvmm_cqe_seen(ring, cqe);
	return res;
}

/*
 * A PROMOTE from NVMe completes later: meanwhile the ring serves other
 * requests, the sequence is busy, the device frames it reads into are in
 * state IO (and kvmm_check() accounts for them), and a commit of the same
 * tokens by another sequence stops before them.
 */
static void test_nvme_async_promote(void)
{
	const char *path = nvme_file("async");
	int hold = 0;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads,
				     .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(24, 8, 64, path, &arg);
	uint32_t tok[2][32], seq, other;
	struct kvmm_ring ring;
	struct kvmm_cqe *cqe;
	int32_t m;

	test_tokens(tok[0], 32, 21);
	test_tokens(tok[1], 32, 22);
	to_nvme(ctx, tok[0], 2100);
	async_ring(ctx, &ring, tok, sizeof(tok));
	seq = ring_open_match(&ring, 0, 32, &m);
	CU_ASSERT_EQUAL(m, 0);

	__atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
	ring_promote(&ring, seq, 0, 32, 77);
	CU_ASSERT_EQUAL(kvmm_peek_cqe(&ring, &cqe), -EAGAIN);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PROMOTE_ASYNC), 1);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);

	/* the sequence is busy; the ring and the context are not */
	kvmm_prep_match(TEST_SQE(&ring), seq, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EBUSY);
	kvmm_prep_extend(TEST_SQE(&ring), seq, 4, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EBUSY);
	kvmm_prep_promote(TEST_SQE(&ring), seq, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EBUSY);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[1], 32, false), 0);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, seq, tok[0], 32), -EBUSY);

	/* recomputing the same prompt meanwhile caches nothing of it */
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &other), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, other, tok[0], 32), 0);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, other, tok[0], 32), -EBUSY);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, other, 32, 0), 0);
	test_kv_stamp(ctx, other, tok[0], 0, 32, false);
	CU_ASSERT_EQUAL(kvmm_seq_commit(ctx, other, tok[0], 32), 0);
	CHECK_OK(ctx);
	kvmm_unlock(ctx);

	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_reap(&ring, 77), 32);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq, tok[0], 0, 32, true), 0);
	CHECK_OK(ctx);
	/* now the other sequence's copy is a duplicate */
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, other, tok[0], 32), 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_DEDUP_PAGES) >= 8);
	kvmm_unlock(ctx);
	kvmm_prep_close(TEST_SQE(&ring), seq, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	CU_ASSERT_EQUAL(kvmm_wait_cqe(&ring, &cqe), -EAGAIN);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Closing a sequence whose promotion is in flight frees nothing until the
 * I/O is over; a second promotion of the same prefix waits for the first;
 * a ring that goes away with a promotion in flight leaves nothing behind.
 */
static void test_nvme_async_cancel(void)
{
	const char *path = nvme_file("cancel");
	int hold = 1;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads,
				     .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(24, 8, 64, path, &arg);
	uint32_t tok[32], a, b;
	struct kvmm_ring ring;
	int32_t m;

	test_tokens(tok, 32, 23);
	to_nvme(ctx, tok, 2300);
	async_ring(ctx, &ring, tok, sizeof(tok));
	a = ring_open_match(&ring, 0, 32, &m);
	b = ring_open_match(&ring, 0, 32, &m);
	ring_promote(&ring, a, 0, 32, 1);
	ring_promote(&ring, b, 0, 32, 2);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PROMOTE_ASYNC), 2);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);	/* b waits */
	kvmm_prep_close(TEST_SQE(&ring), a, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);	/* still held */
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_SEQS_OPEN), 1);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);

	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_reap(&ring, 1), -ECANCELED);
	CU_ASSERT_EQUAL(ring_reap(&ring, 2), 32);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PROMOTE_CANCELED), 1);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, b, tok, 0, 32, true), 0);
	kvmm_unlock(ctx);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_ring_exit(&ring);

	/* a ring that goes with its promotion in flight (no ring is served now) */
	push_down(ctx, 2400, 6);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, NULL), 32);
	__atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
	async_ring(ctx, &ring, tok, sizeof(tok));
	a = ring_open_match(&ring, 0, 32, &m);
	ring_promote(&ring, a, 0, 32, 3);
	kvmm_ring_exit(&ring);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_SEQS_OPEN), 0);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	kvmm_destroy(ctx);	/* waits for the I/O */
	unlink(path);
}


static void ring_prefetch(struct kvmm_ring *ring, uint64_t off, uint32_t n, uint32_t budget,
			  uint64_t data)
{
	struct kvmm_sqe *sqe = TEST_SQE(ring);

	kvmm_prep_prefetch(sqe, 0, 1, off, n, budget);
	kvmm_sqe_set_data(sqe, data);
	CU_ASSERT_EQUAL(kvmm_submit(ring), 1);
}

/*
 * A ring's PREFETCH from NVMe completes when the worker has read it; the
 * ring goes on meanwhile, and a PROMOTE that needs the same prefix waits
 * for it and then finds it on the device.
 */
static void test_nvme_prefetch_ring(void)
{
	const char *path = nvme_file("prefetch");
	int hold = 0;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads,
				     .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(24, 8, 64, path, &arg);
	struct kvmm_ring ring;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	uint32_t tok[32], seq;
	int32_t m;

	test_tokens(tok, 32, 37);
	to_nvme(ctx, tok, 3700);
	CU_ASSERT(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, NULL) >= 0);
	async_ring(ctx, &ring, tok, sizeof(tok));
	/* malformed entries */
	sqe = TEST_SQE(&ring);
	kvmm_prep_prefetch(sqe, 0, 1, 0, 32, 0);
	sqe->arg2 = 2;
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EINVAL);
	sqe = TEST_SQE(&ring);
	kvmm_prep_prefetch(sqe, 0, 1, 0, 32, 0);
	sqe->arg2 = 1ull << 32;
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EINVAL);
	sqe = TEST_SQE(&ring);
	kvmm_prep_prefetch(sqe, 0, 1, 0, 32, 0);
	sqe->arg = KVMM_PREFETCH_CANCEL | 1;
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EINVAL);
	kvmm_prep_prefetch(TEST_SQE(&ring), 0, 1, sizeof(tok), 32, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EFAULT);

	__atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
	ring_prefetch(&ring, 0, 32, 0, 50);
	CU_ASSERT_EQUAL(kvmm_peek_cqe(&ring, &cqe), -EAGAIN);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	seq = ring_open_match(&ring, 0, 32, &m);
	CU_ASSERT_EQUAL(m, 0);
	ring_promote(&ring, seq, 0, 32, 51);	/* waits for the prefetch */
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_reap(&ring, 50), 8);
	CU_ASSERT_EQUAL(ring_reap(&ring, 51), 32);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq, tok, 0, 32, true), 0);
	CHECK_OK(ctx);
	kvmm_unlock(ctx);
	kvmm_prep_close(TEST_SQE(&ring), seq, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Cancelling a prefetch in flight: its CQE says -ECANCELED when the read
 * is over, its frames are free again and the prefix is still on NVMe;
 * another tag, or another ring naming its tag, cancels nothing; a ring
 * that goes away with one in flight leaves nothing behind.
 */
static void test_nvme_prefetch_cancel(void)
{
	const char *path = nvme_file("prefetch-cancel");
	int hold = 1;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads,
				     .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(24, 8, 64, path, &arg);
	struct kvmm_ring ring, other;
	struct kvmm_tier_hits hits;
	uint64_t free_before;
	uint32_t tok[32];

	test_tokens(tok, 32, 38);
	to_nvme(ctx, tok, 3800);
	CU_ASSERT(kvmm_drop_caches_tiers(ctx, KVMM_DROP_DEVICE, NULL) >= 0);
	free_before = test_stat(ctx, KVMM_STAT_PAGES_FREE);
	async_ring(ctx, &ring, tok, sizeof(tok));
	async_ring(ctx, &other, tok, sizeof(tok));
	ring_prefetch(&ring, 0, 32, 0, 60);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);
	kvmm_prep_prefetch_cancel(TEST_SQE(&ring), 61);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_prefetch_cancel(TEST_SQE(&other), 60);	/* not its prefetch */
	CU_ASSERT_EQUAL(test_ring1(&other, NULL), 0);
	kvmm_ring_exit(&other);
	kvmm_prep_prefetch_cancel(TEST_SQE(&ring), 60);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 1);
	kvmm_prep_prefetch_cancel(TEST_SQE(&ring), 60);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);	/* once */
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 8);	/* I/O goes on */
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_reap(&ring, 60), -ECANCELED);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_FREE), free_before);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_CANCELED), 8);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 0);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
	CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_NVME], 32);
	CHECK_OK(ctx);
	kvmm_unlock(ctx);

	/* the ring goes with a prefetch in flight */
	__atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
	ring_prefetch(&ring, 0, 32, 0, 62);
	kvmm_ring_exit(&ring);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	kvmm_destroy(ctx);	/* waits for the I/O */
	unlink(path);
}

/*
 * Conversations driven through a ring, promotions of a group of requests
 * submitted together so that several are in flight (and some wait for
 * others' prefixes): every promoted byte checked, invariants after every
 * group.
 */
static void ring_conversations(struct kvmm_ctx *ctx, uint32_t turns)
{
	static uint32_t conv[12][96];
	uint32_t len[12] = { 0 }, i, g, x = 777;
	struct kvmm_ring ring;

	for (i = 0; i < 12; i++) {
		test_tokens(conv[i], 96, 3000 + i);
		if (i % 3)
			memcpy(conv[i], conv[i - i % 3], 16 * sizeof(uint32_t));
	}
	async_ring(ctx, &ring, conv, sizeof(conv));
	for (i = 0; i < turns; i += 3) {
		uint32_t c[3], n[3], seq[3];
		int32_t m[3];

		for (g = 0; g < 3; g++) {
			x = x * 1103515245u + 12345u;
			c[g] = (x >> 8) % 12;
			n[g] = len[c[g]] + 8 + (x >> 20) % 9;
			if (n[g] > 96)
				n[g] = 24;
			len[c[g]] = n[g];
			seq[g] = ring_open_match(&ring, c[g] * sizeof(conv[0]), n[g], &m[g]);
			CU_ASSERT(m[g] >= 0);
		}
		for (g = 0; g < 3; g++)
			ring_promote(&ring, seq[g], c[g] * sizeof(conv[0]), n[g], g);
		for (g = 0; g < 3; g++) {
			struct kvmm_cqe *cqe;
			int32_t res;

			CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&ring, &cqe), 0);
			CU_ASSERT_FATAL(cqe->user_data < 3);
			res = cqe->res;
			/* three requests at once may not fit: then they recompute */
			CU_ASSERT(res >= 0 || res == -ENOSPC);
			if (res >= 0)
				m[cqe->user_data] = res;
			kvmm_cqe_seen(&ring, cqe);
		}
		for (g = 0; g < 3; g++) {
			uint64_t off = c[g] * sizeof(conv[0]);
			int32_t ret = 0;

			kvmm_lock(ctx);
			CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq[g], conv[c[g]], 0, (uint32_t)m[g], true), 0);
			kvmm_unlock(ctx);
			if ((uint32_t)m[g] < n[g]) {
				kvmm_prep_extend(TEST_SQE(&ring), seq[g], n[g] - (uint32_t)m[g], 0);
				ret = test_ring1(&ring, NULL);
				CU_ASSERT(ret == 0 || ret == -ENOSPC);
				kvmm_lock(ctx);
				if (!ret)
					test_kv_stamp(ctx, seq[g], conv[c[g]], (uint32_t)m[g], n[g], false);
				kvmm_unlock(ctx);
			}
			if (ret)
				kvmm_prep_close(TEST_SQE(&ring), seq[g], 0, 0, 0);
			else
				kvmm_prep_close(TEST_SQE(&ring), seq[g], 1, off, n[g]);
			CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
		}
		/* background reclaim keeps up half the time; else it runs beside */
		if ((x >> 12) & 1)
			CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		if (lcheck(ctx)) {
			CU_FAIL("invariants broken");
			break;
		}
	}
	kvmm_ring_exit(&ring);
}

/* ---- demotion does not block: a held write, and the ring goes on ---- */

/* The NVMe store's writes, held while @hold: what the latch saw. */
struct write_latch {
	int hold;
	int entered;	/* the worker is in a held write */
	int locked;	/* writes made on channel 0, under the caller's lock */
};

static void hold_writes(void *arg, uint32_t site, uint32_t chan)
{
	struct write_latch *l = arg;

	if (site != KVMM_NVME_SITE_WRITE)
		return;
	if (!chan) {	/* never held: that would hold the context */
		__atomic_add_fetch(&l->locked, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_store_n(&l->entered, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&l->hold, __ATOMIC_ACQUIRE))
		usleep(1000);
}

/*
 * A context whose host tier (8 pages over 16 on the device) is written
 * down as soon as it holds anything, through @arg's latch.
 */
static struct kvmm_ctx *held_ctx(const char *path, struct kvmm_nvme_arg *arg)
{
	struct kvmm_params p = nvme_params(PS, 16, 8, 64, path, arg);
	struct kvmm_ctx *ctx = NULL;

	p.host_wmark_low = 8;
	p.host_wmark_high = 8;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

/* Whether the worker entered a held write within 5 s. */
static bool latch_entered(const struct write_latch *l)
{
	uint32_t i;

	for (i = 0; i < 5000 && !__atomic_load_n(&l->entered, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	return __atomic_load_n(&l->entered, __ATOMIC_ACQUIRE);
}

/* STATS through @ring into @snap (with the stats behind it). */
static uint64_t ring_stat(struct kvmm_ring *ring, void *mem, uint64_t off, unsigned item)
{
	const uint64_t *v = (const uint64_t *)((char *)mem + off +
					       sizeof(struct kvmm_stats_snap));

	kvmm_prep_stats(TEST_SQE(ring), 1, off, sizeof(struct kvmm_stats_snap) +
						NR_KVMM_STATS * sizeof(uint64_t));
	CU_ASSERT(test_ring1(ring, NULL) > (int32_t)item);
	return v[item];
}

/*
 * The contract of asynchronous demotion: while the NVMe store's write of
 * a demoted prefix is held by the test, commands on the ring complete,
 * MATCH (finding the prefix on the host tier), STATS (showing the write in
 * flight), EXTEND that needs no I/O and EXTEND whose reclaim must demote
 * to the full host tier; and no write is ever made on the caller's thread.
 * With the write done under the lock (before), the first prefix went to
 * NVMe on the test's own thread and the latch was never entered.
 */
static void test_nvme_write_held_ring_goes_on(void)
{
	static uint32_t tok[5][32];
	const char *path = nvme_file("held");
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch };
	struct kvmm_ctx *ctx = held_ctx(path, &arg);
	uint64_t off = sizeof(tok), bytes = off + 4096;
	char *mem = calloc(1, bytes);
	struct kvmm_ring ring;
	uint32_t i, flags = 0, a, b;	/* prefixes A, B, C: tok[0..2] */
	int32_t m;

	for (i = 0; i < 5; i++)
		test_tokens(tok[i], 32, 4100 + i);
	memcpy(mem, tok, sizeof(tok));
	/* two prefixes fill the device; the third demotes the first, which writeback takes */
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false), 0);
	CU_ASSERT_FATAL(latch_entered(&latch));

	async_ring(ctx, &ring, mem, bytes);
	CU_ASSERT_EQUAL(ring_stat(&ring, mem, off, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	/* MATCH finds the prefix being written on the host tier */
	kvmm_prep_open(TEST_SQE(&ring), 0);
	a = (uint32_t)test_ring1(&ring, NULL);
	kvmm_prep_match(TEST_SQE(&ring), a, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, &flags), 0);
	CU_ASSERT(flags & KVMM_CQE_F_LOWER);
	/* EXTEND whose reclaim demotes into the host tier, all of it in flight: B is dropped */
	kvmm_prep_extend(TEST_SQE(&ring), a, 32, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), a, 1, 0, 32);	/* the insert stops before A */
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	/* EXTEND that needs no reclaim */
	b = ring_open_match(&ring, 2 * sizeof(tok[0]), 32, &m);
	CU_ASSERT_EQUAL(m, 32);
	kvmm_prep_extend(TEST_SQE(&ring), b, 4, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), b, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	/* all of it while the write was held */
	CU_ASSERT_EQUAL(ring_stat(&ring, mem, off, KVMM_STAT_NVME_DEMOTE_PAGES), 0);
	CU_ASSERT_EQUAL(ring_stat(&ring, mem, off, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	CU_ASSERT(__atomic_load_n(&latch.hold, __ATOMIC_ACQUIRE));
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_ring_exit(&ring);

	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES) >= 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), 32);	/* A is back, from NVMe, byte for byte */
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) >= 8);
	CU_ASSERT_EQUAL(__atomic_load_n(&latch.locked, __ATOMIC_RELAXED), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	free(mem);
	unlink(path);
}

/*
 * A prefix dropped while the worker writes it down (here: drop_caches
 * takes its device parent, and with it everything below): the job takes
 * over its host frames and frees them, and the copy it made, when the
 * write is over; nothing of it is ever served, nothing leaks.
 */
static void test_nvme_dropped_while_written(void)
{
	static uint32_t tok[3][32];
	const char *path = nvme_file("dropped");
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch };
	struct kvmm_ctx *ctx = held_ctx(path, &arg);
	uint32_t i;

	test_tokens(tok[0], 32, 4200);
	memcpy(tok[1], tok[0], 16 * sizeof(uint32_t));	/* shares A's first half */
	test_tokens(tok[1] + 16, 16, 4201);
	test_tokens(tok[2], 32, 4202);
	/* A's tail (16 tokens under the shared half) is demoted, then written, held */
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false) >= 0, 1);
	CU_ASSERT_FATAL(latch_entered(&latch));
	CU_ASSERT(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK) > 0);
	/* everything evictable goes, the prefix being written with its ancestors */
	CU_ASSERT(kvmm_drop_caches(ctx) > 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[0], 32, NULL), 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK) > 0);	/* the job goes on */
	CHECK_OK(ctx);
	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES), 0);	/* never moved */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_PAGES_FREE), 64);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 16);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), 0);	/* a miss, recomputed */
	CU_ASSERT_EQUAL(__atomic_load_n(&latch.locked, __ATOMIC_RELAXED), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Drop every cache of @ctx (16 device pages, @host host pages, 64 NVMe
 * pages in @path): every page of every tier is free again, nothing
 * leaked; then destroy it and remove the file.
 */
static void drop_and_destroy(struct kvmm_ctx *ctx, uint32_t host, const char *path)
{
	CU_ASSERT(kvmm_drop_caches(ctx) > 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 16);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), host);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_PAGES_FREE), 64);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A prefix the worker is writing down is still on the host tier, and
 * readable there while the write reads it too: a promotion takes it from
 * the demotion instead of ending the prefix before it, and the hit
 * counters count what the promotion served.  The demotion writes for
 * nothing: its NVMe frames, and the host frames it was reading, are freed
 * when it is over.  @mock: the backend's faults, to make the promotion's
 * copy fail (NULL: it succeeds).
 */
static void promote_while_written(struct kvmm_mock_faults *mf, const char *name)
{
	static uint32_t tok[3][32];
	const char *path = nvme_file(name);
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch };
	struct kvmm_mock_arg mock = { .faults = mf };
	struct kvmm_params p = nvme_params(PS, 16, 8, 64, path, &arg);
	struct kvmm_ctx *ctx = NULL;
	uint32_t i, want = mf ? 0 : 32;

	p.host_wmark_low = 8;	/* the host tier is written down as soon as it holds anything */
	p.host_wmark_high = 8;
	p.backend_arg = &mock;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 4300 + i);
	for (i = 0; i < 3; i++)	/* the third demotes A, whose write is held */
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false), 0);
	CU_ASSERT_FATAL(latch_entered(&latch));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	CHECK_OK(ctx);

	if (mf) {	/* every copy fails from now on: the promotion's scatter too */
		mf->fail_copy = -EIO;
		mf->fail_every = 1;
	}
	/* A comes back whole (test_kv_serve checks every byte), the write still held */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), (int)want);
	if (mf)
		mf->fail_every = 0;
	CU_ASSERT(__atomic_load_n(&latch.hold, __ATOMIC_ACQUIRE));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_OFFER_TOKENS), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_HIT_TOKENS), want);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), want / PS);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_IO_ERRORS), mf ? 1 : 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[0], 32), 32);	/* on the device */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);	/* still written */
	CHECK_OK(ctx);

	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[0], 32), 32);	/* A was not moved down */
	CU_ASSERT_EQUAL(__atomic_load_n(&latch.locked, __ATOMIC_RELAXED), 0);
	CHECK_OK(ctx);
	drop_and_destroy(ctx, 8, path);
}

/*
 * A prefix a demotion is writing down is left to PROMOTE, which reads it
 * where it is: a prefetch, which could be cancelled and put it back,
 * does not take it from the write.
 */
static void test_nvme_prefetch_while_written(void)
{
	static uint32_t tok[3][32];
	const char *path = nvme_file("prefetch-written");
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch };
	struct kvmm_ctx *ctx = held_ctx(path, &arg);
	uint32_t i;

	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 4400 + i);
	for (i = 0; i < 3; i++)	/* the third demotes A, whose write is held */
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false), 0);
	CU_ASSERT_FATAL(latch_entered(&latch));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	CU_ASSERT_EQUAL(kvmm_prefetch(ctx, 0, tok[0], 32, 8, KVMM_PREFETCH_RECLAIM), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[0], 32), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), 32);
	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CHECK_OK(ctx);
	drop_and_destroy(ctx, 8, path);
}

static void test_nvme_promote_while_written(void)
{
	promote_while_written(NULL, "promote-wb");
}

/* The promotion's copy fails: a miss, and the demotion still frees what it held. */
static void test_nvme_promote_while_written_fails(void)
{
	struct kvmm_mock_faults mf = { 0 };

	promote_while_written(&mf, "promote-wb-fail");
}

/*
 * The same through the socket server that kvmmd runs: MATCH says the
 * prefix goes on below the device (CQE_F_LOWER), PROMOTE brings all of it
 * back while its write is held, and the STATS a client reads count as
 * host hits exactly the tokens served.
 */
static void test_nvme_server_promote_while_written(void)
{
	static uint32_t tok[3][32];
	const char *path = nvme_file("srv-promote-wb");
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch };
	struct kvmm_ctx *ctx = held_ctx(path, &arg);
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	char sock[108];
	struct kvmm_server *srv;
	struct kvmm_ring ring;
	const uint64_t *v;
	uint32_t i, flags = 0;
	int32_t seq;

	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 4400 + i);
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false), 0);
	CU_ASSERT_FATAL(latch_entered(&latch));
	snprintf(sock, sizeof(sock), "/tmp/kvmm-test-%d-promote-wb.sock", (int)getpid());
	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, sock, 0, &srv), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	memcpy(ring.buf, tok[0], sizeof(tok[0]));
	kvmm_prep_open(TEST_SQE(&ring), 0);
	seq = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(seq >= 0);
	kvmm_prep_match(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, &flags), 0);
	CU_ASSERT(flags & KVMM_CQE_F_LOWER);
	kvmm_prep_promote(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 32);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, (uint32_t)seq, tok[0], 0, 32, true), 0);
	kvmm_unlock(ctx);
	kvmm_prep_stats(TEST_SQE(&ring), 0, 1024, sizeof(struct kvmm_stats_snap) +
						  NR_KVMM_STATS * sizeof(uint64_t));
	CU_ASSERT(test_ring1(&ring, NULL) > KVMM_STAT_HOST_OFFER_TOKENS);
	v = (const uint64_t *)((char *)ring.buf + 1024 + sizeof(struct kvmm_stats_snap));
	CU_ASSERT_EQUAL(v[KVMM_STAT_HOST_OFFER_TOKENS], 32);
	CU_ASSERT_EQUAL(v[KVMM_STAT_HOST_HIT_TOKENS], 32);
	CU_ASSERT_EQUAL(v[KVMM_STAT_HOST_PROMOTE_PAGES], 32 / PS);
	CU_ASSERT_EQUAL(v[KVMM_STAT_HOST_PAGES_WRITEBACK], 8);	/* all while the write was held */
	kvmm_prep_close(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_ring_exit(&ring);
	kvmm_server_stop(srv);
	unlink(sock);

	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * An engine that outruns its disk: with the worker's write of A held,
 * the host tier (16 pages, writeback from 4 free up to 8) fills with B
 * and C, and the next demotion needs room there.  Direct reclaim writes
 * the oldest host prefix (B) down itself instead of dropping it: the
 * writer waits for the disk.  B then comes back from NVMe byte for byte.
 * @fail: the throttled write fails: B is dropped (a miss), nothing leaks.
 */
static void throttle(bool fail, const char *name)
{
	static uint32_t tok[5][32];
	const char *path = nvme_file(name);
	struct write_latch latch = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = hold_writes, .latch_arg = &latch,
				     .fault = -EIO, .fault_sites = KVMM_NVME_SITE_WRITE };
	struct kvmm_params p = nvme_params(PS, 16, 16, 64, path, &arg);
	struct kvmm_ctx *ctx = NULL;
	uint32_t i;

	p.host_wmark_low = 4;
	p.host_wmark_high = 8;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	for (i = 0; i < 5; i++)
		test_tokens(tok[i], 32, 4500 + i);
	for (i = 0; i < 4; i++)	/* A and B to the host tier, A's write held */
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[i], 32, false), 0);
	CU_ASSERT_FATAL(latch_entered(&latch));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_WRITEBACK), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 0);
	CHECK_OK(ctx);

	arg.fault_every = fail ? 1 : 0;
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[4], 32, false), 0);	/* C goes to the host */
	arg.fault_every = 0;
	CU_ASSERT(__atomic_load_n(&latch.hold, __ATOMIC_ACQUIRE));
	CU_ASSERT(__atomic_load_n(&latch.locked, __ATOMIC_RELAXED) > 0);	/* B, by the caller */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_THROTTLE_PAGES), fail ? 0 : 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES), fail ? 0 : 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_EVICT_PAGES), fail ? 8 : 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_IO_ERRORS), fail ? 1 : 0);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[1], 32, NULL), fail ? 0 : 32);
	CHECK_OK(ctx);

	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[1], 32, true), fail ? 0 : 32);	/* every byte */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_HIT_TOKENS), fail ? 0 : 32);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), 32);	/* A, written by the worker */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	drop_and_destroy(ctx, 16, path);
}

static void test_nvme_throttled_not_dropped(void)
{
	throttle(false, "throttle");
}

static void test_nvme_throttled_write_fails(void)
{
	throttle(true, "throttle-fail");
}

/* ---- background reclaim of the device (kswapd) ---- */

/* A latch on the mock's gathers: holds the I/O worker's, never the caller's. */
struct gather_latch {
	pthread_t caller;
	int hold;
	int entered;
};

static void hold_gathers(void *arg)
{
	struct gather_latch *l = arg;

	if (pthread_equal(pthread_self(), l->caller))
		return;
	__atomic_store_n(&l->entered, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&l->hold, __ATOMIC_ACQUIRE))
		usleep(1000);
}

/* Device 16 pages with watermarks low 4, high 8, over a host tier of 64. */
static struct kvmm_ctx *kswapd_ctx(struct kvmm_mock_arg *mock)
{
	struct kvmm_params p = test_params(PS, 16, 8, 256);
	struct kvmm_ctx *ctx = NULL;

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	p.backend_arg = mock;
	p.wmark_low = 4;
	p.wmark_high = 8;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

/*
 * Below the device's low watermark, the I/O worker demotes the oldest
 * prefix to the host tier ahead of demand: EXTEND finds free pages and
 * reclaims nothing itself, and the demoted KV comes back byte for byte.
 */
static void test_device_kswapd(void)
{
	struct kvmm_ctx *ctx = kswapd_ctx(NULL);
	uint32_t tok[3][32], i;

	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 5100 + i);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, false), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[1], 32, false), 0);	/* free 0: A goes down */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_WRITEBACK), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_RECLAIM_RUNS), 0);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_WRITEBACK), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES), 8);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_WRITEBACK_RUNS) >= 1);
	CHECK_OK(ctx);
	/* C's EXTEND finds its 8 pages free; B goes down behind it */
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[2], 32, false), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_RECLAIM_RUNS), 0);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, true), 32);	/* from the host, stamped */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVICT_PAGES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * A prefix the worker is moving down is still on the device: a MATCH
 * maps it whole (one that ends inside it stops before it), and the
 * sequence's lock keeps it there when the copy settles (the host copy is
 * given back).  Reclaim and EXTEND go on meanwhile.
 */
static void test_device_kswapd_match_while_moving(void)
{
	struct gather_latch latch = { .caller = pthread_self(), .hold = 1 };
	struct kvmm_mock_faults mf = { .latch = hold_gathers, .latch_arg = &latch };
	struct kvmm_mock_arg mock = { .faults = &mf };
	struct kvmm_ctx *ctx = kswapd_ctx(&mock);
	uint32_t tok[2][32], i, a, b;

	for (i = 0; i < 2; i++)
		test_tokens(tok[i], 32, 5200 + i);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[0], 32, false), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok[1], 32, false), 0);
	for (i = 0; i < 5000 && !__atomic_load_n(&latch.entered, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&latch.entered, __ATOMIC_ACQUIRE));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_WRITEBACK), 8);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &a), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, a, tok[0], 32), 32);	/* whole: mapped */
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, a, tok[0], 0, 32, true), 0);
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &b), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, b, tok[0], 18), 0);	/* inside it: no split */
	CU_ASSERT_EQUAL(kvmm_check(ctx), 0);
	__atomic_store_n(&latch.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	/* locked when the copy settled: still on the device, the host copy freed */
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok[0], 32), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 64);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, a, NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, b, NULL, 0), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* The asynchronous path under the I/O fault sweep and with flipped bits. */
static void test_nvme_async_conversations(void)
{
	static const int faults[] = { 0, -EIO, -EAGAIN, KVMM_NVME_SHORT };
	const char *path = nvme_file("async-conv");
	uint32_t f;

	for (f = 0; f < ARRAY_LEN(faults); f++) {
		struct kvmm_nvme_arg arg = { .fault = faults[f], .fault_every = faults[f] ? 3 : 0,
					     .fault_sites = KVMM_NVME_SITE_READ,
					     .flip_every = faults[f] ? 0 : 7 };
		struct kvmm_ctx *ctx = nvme_ctx(48, 16, 96, path, &arg);

		ring_conversations(ctx, 240);
		CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_PROMOTE_ASYNC) > 0);
		/*
		 * With every third read failing, whether any chain read from NVMe
		 * gets through depends on how many reads each takes (prefixes being
		 * written down are promoted from the host tier): that reads were
		 * tried, and failed as misses, is what counts there.
		 */
		if (faults[f] == -EIO) {
			CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_IO_ERRORS) > 0);
		} else {
			CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
		}
		if (!faults[f])
			CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_CSUM_FAIL) > 0);
		CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_IO), 0);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		kvmm_lock(ctx);
		CU_ASSERT(kvmm_drop_caches(ctx) >= 0);
		kvmm_unlock(ctx);
		CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_PAGES_FREE), 96);
		CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_FREE), 48);
		CU_ASSERT_EQUAL(lcheck(ctx), 0);
		kvmm_destroy(ctx);
		unlink(path);
	}
}

/* ---- write-through: a copy on the host tier from the commit on ---- */

/* Every test above that holds under either policy, under write-through. */
static void test_wt_suite_again(void)
{
	policy = KVMM_WRITE_THROUGH;
	test_demote_promote_roundtrip();
	test_promote_partial_path();
	test_corrupt_page_is_a_miss();
	test_copy_faults();
	test_host_full();
	test_adopt_recomputed();
	test_drop_caches_all_tiers();
	test_random_conversations();
	test_ring_promote();
	test_nvme_roundtrip();
	test_nvme_fault_sweep();
	test_nvme_async_promote();
	test_nvme_async_conversations();
	policy = KVMM_WRITE_BACK;
}

/* A commit copies its pages down; every demotion after that moves no byte. */
static void test_wt_demotion_is_free(void)
{
	struct kvmm_ctx *ctx;
	struct kvmm_tier_hits hits;
	uint64_t per_page;
	uint32_t tok[32], round;

	policy = KVMM_WRITE_THROUGH;
	ctx = tier_ctx(16, 64, NULL, NULL);
	policy = KVMM_WRITE_BACK;
	test_tokens(tok, 32, 11);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_SHADOWED), 8);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 56);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 0);
	per_page = host_stat(ctx, KVMM_STAT_HOST_BYTES_IN) / 8;
	CU_ASSERT(per_page > 0);
	CHECK_OK(ctx);
	for (round = 0; round < 3; round++) {
		push_down(ctx, 1100 + 10 * round, 2);
		CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
		CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_HOST], 32);
		/* every page that went down was there already */
		CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES) >= 8 * (round + 1));
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_DEMOTE_FREE_PAGES),
				host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES));
		CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_BYTES_IN),
				test_stat(ctx, KVMM_STAT_WT_PAGES) * per_page);
		/* it comes back as computed, and keeps its host frames as its copy */
		CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
		CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, 32, &hits), 32);
		CU_ASSERT_EQUAL(hits.tokens[KVMM_TIER_DEVICE], 32);
		CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES), 8 * (round + 1));
		CHECK_OK(ctx);
	}
	/* the prompt was copied once, when it was first committed */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_PAGES), 8 + 3 * 2 * 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_SKIP_PAGES), 0);
	CU_ASSERT(kvmm_drop_caches(ctx) > 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_SHADOWED), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 64);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Splitting a node splits its copy; both halves demote for free. */
static void test_wt_split_keeps_copies(void)
{
	struct kvmm_ctx *ctx;
	uint32_t tok[32], fork[32];

	policy = KVMM_WRITE_THROUGH;
	ctx = tier_ctx(24, 64, NULL, NULL);
	policy = KVMM_WRITE_BACK;
	test_tokens(tok, 32, 12);
	test_tokens(fork, 32, 13);
	memcpy(fork, tok, 16 * sizeof(*tok));
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, fork, 32, false), 16);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_SPLITS), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_SHADOWED), 12);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_PAGES), 12);
	CHECK_OK(ctx);
	push_down(ctx, 1200, 3);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, fork, 32, NULL), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_DEMOTE_FREE_PAGES),
			host_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES));
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, true), 32);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, fork, 32, true), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * A host tier too small for every copy: copies give way to demoted
 * prefixes (oldest first), and a commit whose copy cannot be made, or
 * fails, still commits.
 */
static void test_wt_host_pressure_and_faults(void)
{
	struct kvmm_mock_faults mf = { .fail_copy = -EIO };
	struct kvmm_mock_arg mock = { .faults = &mf };
	struct kvmm_ctx *ctx;
	uint32_t tok[32];

	policy = KVMM_WRITE_THROUGH;
	ctx = tier_ctx(48, 24, &mock, NULL);
	random_conversations(ctx, 600);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_SHADOW_DROP_PAGES) > 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_DEMOTE_FREE_PAGES) > 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES) > 0);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED) +
		  test_stat(ctx, KVMM_STAT_PAGES_SHADOWED) <= 24);

	/* every copy fails: the commit stands, the pages are counted skipped */
	CU_ASSERT(kvmm_drop_caches(ctx) >= 0);
	mf.fail_every = 1;
	test_tokens(tok, 32, 14);
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_SKIP_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_SHADOWED), 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 24);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	/* a copy larger than the host tier is skipped, not forced */
	ctx = tier_ctx(48, 4, NULL, NULL);
	policy = KVMM_WRITE_BACK;
	CU_ASSERT_EQUAL(test_kv_serve(ctx, tok, 32, false), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WT_SKIP_PAGES), 8);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, 32), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void test_wt_bad_params(void)
{
	struct kvmm_params p = test_params(PS, 16, 8, 256);
	struct kvmm_ctx *ctx = NULL;

	p.write_policy = KVMM_WRITE_THROUGH;	/* no host tier to copy to */
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	p.host_pages = 16;
	p.write_policy = 2;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	CU_ASSERT_PTR_NULL(ctx);
}

/* ---- DMA registration: every buffer the backend copies with is registered ---- */

/* The mock's strict mode refuses unregistered memory: the check is live. */
static void test_dma_strict_mock(void)
{
	struct kvmm_mock_faults mf = { .dma_strict = true };
	struct kvmm_mock_arg mock = { .faults = &mf };
	const struct kvmm_backend_ops *b = kvmm_backend_lookup("mock");
	struct kvmm_params p = test_params(PS, 4, 1, 8);
	struct kvmm_backend_cfg cfg = { .model = p.model, .page_size = PS, .nr_pages = 4,
					.arg = &mock };
	size_t len = kvmm_page_bytes(&p.model, PS);
	void *priv, *buf = malloc(len);
	int32_t pfn = 1;

	CU_ASSERT_FATAL(buf != NULL);
	CU_ASSERT_EQUAL_FATAL(b->init(&cfg, &priv), 0);
	CU_ASSERT_EQUAL(b->gather(priv, &pfn, 1, &buf), -EFAULT);
	CU_ASSERT_EQUAL(b->mem_register(priv, buf, len - 1), 0);
	CU_ASSERT_EQUAL(b->scatter(priv, &pfn, 1, &buf), -EFAULT);	/* one byte short */
	CU_ASSERT_EQUAL(b->mem_register(priv, buf, len), 0);
	CU_ASSERT_EQUAL(mf.dma_ranges, 2);
	CU_ASSERT_EQUAL(b->gather(priv, &pfn, 1, &buf), 0);
	CU_ASSERT_EQUAL(b->scatter(priv, &pfn, 1, &buf), 0);
	b->mem_unregister(priv, buf, len);
	b->mem_unregister(priv, buf, len - 1);
	CU_ASSERT_EQUAL(mf.dma_ranges, 0);
	CU_ASSERT_EQUAL(b->gather(priv, &pfn, 1, &buf), -EFAULT);
	b->exit(priv);
	free(buf);
}

/*
 * Against a device that reaches only registered memory, both tiers work:
 * the host store's chunks and both NVMe channels' bounce buffers are
 * registered, and all of it is unregistered at destroy.
 */
static void test_dma_registered_tiers(void)
{
	struct kvmm_mock_faults mf = { .dma_strict = true };
	struct kvmm_mock_arg mock = { .faults = &mf };
	const char *path = nvme_file("dma");
	struct kvmm_params p;
	struct kvmm_ctx *ctx;

	ctx = tier_ctx(48, 96, &mock, NULL);
	CU_ASSERT(mf.dma_ranges >= 1);
	random_conversations(ctx, 300);
	CU_ASSERT(host_stat(ctx, KVMM_STAT_HOST_PROMOTE_PAGES) > 0);
	CU_ASSERT_EQUAL(host_stat(ctx, KVMM_STAT_HOST_IO_ERRORS), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(mf.dma_ranges, 0);

	p = nvme_params(PS, 48, 16, 96, path, NULL);
	p.backend_arg = &mock;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	ring_conversations(ctx, 120);
	CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_PROMOTE_ASYNC) > 0);
	CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) > 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_IO_ERRORS), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_HOST_IO_ERRORS), 0);
	CU_ASSERT_EQUAL(lcheck(ctx), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(mf.dma_ranges, 0);
	unlink(path);
}

/*
 * Fail each registration in turn: create fails with the error and a
 * message, holding nothing; the first that create does not make (the I/O
 * worker's channel, set up at its first read) fails that promotion into
 * a miss.
 */
static void test_dma_register_faults(void)
{
	const char *path = nvme_file("dma-fault");
	uint32_t at;

	for (at = 1; at < 16; at++) {
		struct kvmm_mock_faults mf = { .fail_register = -EPERM, .fail_register_at = at };
		struct kvmm_mock_arg mock = { .faults = &mf };
		struct test_log log = { 0 };
		struct test_alloc ta = { 0 };
		struct kvmm_params p = nvme_params(PS, 48, 16, 96, path, NULL);
		struct kvmm_ctx *ctx = NULL;
		int ret;

		p.backend_arg = &mock;
		p.log = test_log_fn;
		p.log_priv = &log;
		p.alloc = &test_alloc_ops;
		p.alloc_priv = &ta;
		ret = kvmm_create(&p, &ctx);
		if (ret) {
			CU_ASSERT_EQUAL(ret, -EPERM);
			CU_ASSERT_EQUAL(mf.dma_ranges, 0);
			CU_ASSERT(strstr(log.last, "DMA") != NULL);
			CU_ASSERT_EQUAL(ta.live_blocks, 0);
			unlink(path);
			continue;
		}
		CU_ASSERT(at > 1);	/* create registered something */
		ring_conversations(ctx, 120);
		CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_IO_ERRORS) > 0);
		CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 0);
		CU_ASSERT_EQUAL(lcheck(ctx), 0);
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(mf.dma_ranges, 0);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		unlink(path);
		break;
	}
	CU_ASSERT(at < 16);
}

static int tier_suite_clean(void)
{
	test_tmp_dir_remove();
	return 0;
}

int register_tier_suite(void)
{
	CU_pSuite s = CU_add_suite("tier", NULL, tier_suite_clean);

	if (!s)
		return -1;
	ADD_TEST(s, test_demote_promote_roundtrip);
	ADD_TEST(s, test_promote_partial_path);
	ADD_TEST(s, test_corrupt_page_is_a_miss);
	ADD_TEST(s, test_copy_faults);
	ADD_TEST(s, test_host_full);
	ADD_TEST(s, test_adopt_recomputed);
	ADD_TEST(s, test_drop_caches_all_tiers);
	ADD_TEST(s, test_bad_params);
	ADD_TEST(s, test_random_conversations);
	ADD_TEST(s, test_ring_promote);
	ADD_TEST(s, test_prefetch_host);
	ADD_TEST(s, test_prefetch_budget_room);
	ADD_TEST(s, test_prefetch_reclaim);
	ADD_TEST(s, test_prefetch_faults);
	ADD_TEST(s, test_nvme_roundtrip);
	ADD_TEST(s, test_nvme_writeback_refuses_corrupt_host_page);
	ADD_TEST(s, test_nvme_restart);
	ADD_TEST(s, test_nvme_bad_files);
	ADD_TEST(s, test_nvme_file_locked);
	ADD_TEST(s, test_nvme_lock_waited_for);
	ADD_TEST(s, test_nvme_files_refused);
	ADD_TEST(s, test_nvme_model_identity);
	ADD_TEST(s, test_nvme_superblock_damaged);
	ADD_TEST(s, test_nvme_layout_v1);
	ADD_TEST(s, test_nvme_layout_v2);
	ADD_TEST(s, test_nvme_identity_params);
	ADD_TEST(s, test_nvme_fault_sweep);
	ADD_TEST(s, test_nvme_flip_tear);
	ADD_TEST(s, test_nvme_conversations_restart);
	ADD_TEST(s, test_drop_caches_tier_mask);
	ADD_TEST(s, test_drop_caches_ring);
	ADD_TEST(s, test_nvme_async_promote);
	ADD_TEST(s, test_nvme_async_cancel);
	ADD_TEST(s, test_nvme_prefetch_ring);
	ADD_TEST(s, test_nvme_prefetch_cancel);
	ADD_TEST(s, test_nvme_write_held_ring_goes_on);
	ADD_TEST(s, test_nvme_dropped_while_written);
	ADD_TEST(s, test_nvme_promote_while_written);
	ADD_TEST(s, test_nvme_prefetch_while_written);
	ADD_TEST(s, test_nvme_promote_while_written_fails);
	ADD_TEST(s, test_nvme_server_promote_while_written);
	ADD_TEST(s, test_nvme_throttled_not_dropped);
	ADD_TEST(s, test_nvme_throttled_write_fails);
	ADD_TEST(s, test_nvme_async_conversations);
	ADD_TEST(s, test_device_kswapd);
	ADD_TEST(s, test_device_kswapd_match_while_moving);
	ADD_TEST(s, test_wt_suite_again);
	ADD_TEST(s, test_wt_demotion_is_free);
	ADD_TEST(s, test_wt_split_keeps_copies);
	ADD_TEST(s, test_wt_host_pressure_and_faults);
	ADD_TEST(s, test_wt_bad_params);
	ADD_TEST(s, test_dma_strict_mock);
	ADD_TEST(s, test_dma_registered_tiers);
	ADD_TEST(s, test_dma_register_faults);
	return 0;
}
