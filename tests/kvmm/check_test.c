// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/check_test.c - kvmm_check: each kind of corruption is caught.
 * White box: the tests break the context's internals on purpose, check,
 * and put them back.
 */
#include <errno.h>

#include "../helpers.h"
#include "../../kvmm/internal.h"

struct fixture {
	struct kvmm_ctx *ctx;
	struct test_log log;
	uint32_t seq;
};

static void setup(struct fixture *f)
{
	struct kvmm_params p = test_params(2, 64, 3, 64);
	uint32_t tok[40];

	memset(f, 0, sizeof(*f));
	p.log = test_log_fn;
	p.log_priv = &f->log;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &f->ctx), 0);
	test_tokens(tok, 40, 3);
	CU_ASSERT_EQUAL_FATAL(test_cache(f->ctx, 0, tok, 30), 0);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(f->ctx, 0, tok, 40, &f->seq), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_check(f->ctx), 0);
}

static void expect_broken(struct fixture *f, const char *what)
{
	unsigned before = f->log.count;

	CU_ASSERT_EQUAL(kvmm_check(f->ctx), -EUCLEAN);
	CU_ASSERT(f->log.count == before + 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(f->log.last, what));
}

static void check_clean_context_passes(void)
{
	struct fixture f;

	setup(&f);
	CU_ASSERT_EQUAL(kvmm_check(NULL), -EINVAL);
	kvmm_destroy(f.ctx);
}

static void check_detects_leaked_page(void)
{
	struct fixture f;
	int32_t pfn;

	setup(&f);
	/* a frame taken off the bitmap that no owner knows about */
	CU_ASSERT_EQUAL_FATAL(kvmm_alloc_pages(f.ctx, &f.ctx->zone[KVMM_TIER_DEVICE], 1, &pfn, 0), 0);
	expect_broken(&f, "leaked");
	kvmm_free_pages(f.ctx, &f.ctx->zone[KVMM_TIER_DEVICE], &pfn, 1);
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

static void check_detects_page_held_twice(void)
{
	struct fixture f;
	int32_t *row, saved;
	uint32_t other;

	setup(&f);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(f.ctx, 0, &other), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_extend(f.ctx, other, 2, 0), 0);
	row = kvmm_row(f.ctx, other);
	saved = row[0];
	row[0] = kvmm_row(f.ctx, f.seq)[19];	/* f.seq's private page */
	expect_broken(&f, "twice");
	row[0] = saved;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

static void check_detects_bad_accounting(void)
{
	struct fixture f;

	setup(&f);
	f.ctx->lruvec[KVMM_TIER_DEVICE].evictable++;
	expect_broken(&f, "evictable");
	f.ctx->lruvec[KVMM_TIER_DEVICE].evictable--;
	f.ctx->tree.protected[KVMM_TIER_DEVICE]++;
	expect_broken(&f, "protected");
	f.ctx->tree.protected[KVMM_TIER_DEVICE]--;
	f.ctx->zone[KVMM_TIER_DEVICE].nr_free--;
	expect_broken(&f, "free");
	f.ctx->zone[KVMM_TIER_DEVICE].nr_free++;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

static void check_detects_lost_lock_reference(void)
{
	struct fixture f;
	struct kvmm_node *node;

	setup(&f);
	node = f.ctx->seqs[f.seq].node;
	node->lock_ref++;
	expect_broken(&f, "lock");
	node->lock_ref--;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

/* A node marked prefetched that the count does not know, then one off the device. */
static void check_detects_prefetch_miscount(void)
{
	struct fixture f;
	struct kvmm_node *node;

	setup(&f);
	node = f.ctx->seqs[f.seq].node;
	node->flags |= KVMM_NODE_PREFETCHED;
	expect_broken(&f, "prefetched");
	f.ctx->prefetched++;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	node->tier = KVMM_TIER_HOST;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), -EUCLEAN);
	node->tier = KVMM_TIER_DEVICE;
	kvmm_prefetch_forget(f.ctx, node);
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

static void check_detects_row_not_matching_path(void)
{
	struct fixture f;
	int32_t *row, saved;

	setup(&f);
	row = kvmm_row(f.ctx, f.seq);
	saved = row[3];
	row[3] = row[4];
	expect_broken(&f, "path");
	row[3] = saved;
	kvmm_destroy(f.ctx);
}

static void check_detects_free_bit_on_used_page(void)
{
	struct fixture f;
	uint32_t pfn;

	setup(&f);
	pfn = (uint32_t)kvmm_row(f.ctx, f.seq)[19];
	f.ctx->zone[KVMM_TIER_DEVICE].free.level[0][pfn >> 6] |= 1ULL << (pfn & 63);
	expect_broken(&f, "free bit");
	f.ctx->zone[KVMM_TIER_DEVICE].free.level[0][pfn >> 6] &= ~(1ULL << (pfn & 63));
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_destroy(f.ctx);
}

/*
 * With events on, each node keeps its pages' identities and where
 * hashing stood at its end (events.c): a wrong identity, a wrong resume
 * point, or identities kept while events are off are caught.
 */
static void check_detects_wrong_page_identities(void)
{
	struct kvmm_sqe on = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENTS, .arg2 = 1u << 16 };
	struct kvmm_node *root, *node;
	struct kvmm_key *ids;
	struct fixture f;
	uint64_t *acc;
	uint32_t tok[40], pages;

	setup(&f);
	CU_ASSERT_EQUAL_FATAL(kvmm_ioctl(f.ctx, &on, NULL, 0), 0);
	test_tokens(tok, 40, 9);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, 1, tok, 40), 0);	/* one node, named */
	root = list_entry(f.ctx->tree.roots.next, struct kvmm_node, sibling);
	for (node = root; node && !node->ids; node = kvmm_tree_next(root, node))
		;
	if (!node) {
		root = list_entry(f.ctx->tree.roots.next->next, struct kvmm_node, sibling);
		for (node = root; node && !node->ids; node = kvmm_tree_next(root, node))
			;
	}
	CU_ASSERT_PTR_NOT_NULL_FATAL(node);
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	ids = node->ids;
	pages = node->len >> f.ctx->page_shift;
	ids[1].lo ^= 1;
	expect_broken(&f, "identities that are not");
	ids[1].lo ^= 1;
	ids[0].hi ^= 1;		/* the page before its first */
	expect_broken(&f, "identities that are not");
	ids[0].hi ^= 1;
	/* the resume point follows them: accumulators, stripes, bytes hashed, ... */
	acc = (uint64_t *)(ids + pages + 1);
	acc[9] += 4;
	expect_broken(&f, "resume point");
	acc[9] -= 4;
	((uint32_t *)acc)[22]++;	/* then the namespace */
	expect_broken(&f, "another namespace");
	((uint32_t *)acc)[22]--;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	/* kept while events are off: nothing keeps them right */
	node->ids = NULL;
	on.arg2 = 0;
	CU_ASSERT_EQUAL(kvmm_ioctl(f.ctx, &on, NULL, 0), 0);
	node->ids = ids;
	expect_broken(&f, "no event could have named");
	node->ids = NULL;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), 0);
	kvmm_mfree(f.ctx, ids, kvmm_node_ids_bytes(f.ctx, node->len));
	kvmm_destroy(f.ctx);
}

int register_check_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_check", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, check_clean_context_passes);
	ADD_TEST(s, check_detects_leaked_page);
	ADD_TEST(s, check_detects_page_held_twice);
	ADD_TEST(s, check_detects_bad_accounting);
	ADD_TEST(s, check_detects_lost_lock_reference);
	ADD_TEST(s, check_detects_prefetch_miscount);
	ADD_TEST(s, check_detects_row_not_matching_path);
	ADD_TEST(s, check_detects_free_bit_on_used_page);
	ADD_TEST(s, check_detects_wrong_page_identities);
	return 0;
}
