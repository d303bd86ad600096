// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/ns_test.c - kvmm_ns: per-namespace limits and the operator's
 * way to list and drop pins.  A ring bound to a namespace may pin no more
 * than the namespace's pin limit (-EDQUOT); the operator sees every pin
 * (DUMP_PINS), every namespace's use (DUMP_NS), and drops pins by node id
 * or by namespace (PIN_DROP), whoever took them; kvmm_check() recounts
 * the per-namespace counters.
 */
#include <errno.h>

#include "../helpers.h"
#include "../../kvmm/internal.h"

#define NS	3
#define NTOK	128

struct nfix {
	struct kvmm_ctx *ctx;
	struct kvmm_ring ring;		/* bound to NS */
	struct test_log log;
	uint32_t *tok;			/* in the ring's buffer 0 */
	uint64_t out[512];
};

static void nfix_init(struct nfix *f)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096,
				       .flags = KVMM_RING_F_NS, .ns = NS };
	struct kvmm_params p = test_params(1, 128, 4, NTOK);

	memset(f, 0, sizeof(*f));
	p.log = test_log_fn;
	p.log_priv = &f->log;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &f->ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(f->ctx, &rp, &f->ring), 0);
	f->tok = f->ring.buf;
	test_tokens(f->tok, NTOK, 7);
}

static void nfix_exit(struct nfix *f)
{
	kvmm_ring_exit(&f->ring);
	CHECK_OK(f->ctx);
	kvmm_destroy(f->ctx);
}

/* One operator command through kvmm_ioctl(), output to f->out. */
static int op(struct nfix *f, struct kvmm_sqe sqe)
{
	struct kvmm_iovec iov = { f->out, sizeof(f->out) };

	return kvmm_ioctl(f->ctx, &sqe, &iov, 1);
}

static int op_dump(struct nfix *f, uint32_t kind)
{
	struct kvmm_sqe sqe = { 0 };

	kvmm_prep_dump(&sqe, kind, 0, 0, 0, sizeof(f->out));
	return op(f, sqe);
}

static int op_set(struct nfix *f, uint32_t key, uint64_t value)
{
	struct kvmm_sqe sqe = { 0 };

	kvmm_prep_set(&sqe, key, value);
	return op(f, sqe);
}

static int op_pin_drop(struct nfix *f, uint32_t how, uint32_t ns, uint64_t id)
{
	struct kvmm_sqe sqe = { 0 };

	kvmm_prep_pin_drop(&sqe, how, ns, id);
	return op(f, sqe);
}

/* The bound ring pins the first @n tokens. */
static int ring_pin(struct nfix *f, uint32_t n, uint32_t flags)
{
	kvmm_prep_pin(kvmm_get_sqe(&f->ring), NS, 0, 0, n, flags);
	return test_ring1(&f->ring, NULL);
}

static const struct kvmm_dump_pin *dump_pin_rec(struct nfix *f, uint32_t i)
{
	return (const struct kvmm_dump_pin *)((struct kvmm_dump_hdr *)f->out + 1) + i;
}

static const struct kvmm_dump_ns *dump_ns_rec(struct nfix *f, uint32_t i)
{
	return (const struct kvmm_dump_ns *)((struct kvmm_dump_hdr *)f->out + 1) + i;
}

static void pin_past_namespace_limit_fails_with_edquot(void)
{
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	struct nfix f;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 100), 0);
	/* the default limit is half the pool: 64 of 128 pages */
	test_stats(f.ctx, before);
	CU_ASSERT_EQUAL(ring_pin(&f, 100, KVMM_PIN_KEEP), -EDQUOT);
	CU_ASSERT_EQUAL(ring_pin(&f, 65, KVMM_PIN_KEEP), -EDQUOT);
	test_stats(f.ctx, after);
	ASSERT_STATS_SAME(before, after);
	CU_ASSERT_EQUAL(ring_pin(&f, 65, 0), -EDQUOT);
	CHECK_OK(f.ctx);
	CU_ASSERT_EQUAL(ring_pin(&f, 64, KVMM_PIN_KEEP), 64);
	/* pins nest: the same prefix again costs nothing */
	CU_ASSERT_EQUAL(ring_pin(&f, 64, 0), 64);
	CU_ASSERT_EQUAL(ring_pin(&f, 32, 0), 32);
	CU_ASSERT_EQUAL(ring_pin(&f, 65, KVMM_PIN_KEEP), -EDQUOT);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 64);
	CHECK_OK(f.ctx);
	/* the operator is not limited */
	CU_ASSERT_EQUAL(kvmm_prefix_pin(f.ctx, NS, f.tok, 100), 100);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 100);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(f.ctx, NS, f.tok, 100), 100);
	/* a lower limit refuses new pins, keeps the old ones */
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 10), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 65, 0), -EDQUOT);
	CU_ASSERT_EQUAL(ring_pin(&f, 16, 0), 16);	/* already pinned: no new page */
	CU_ASSERT_EQUAL(ring_pin(&f, 64, 0), 64);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 0), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 65, 0), -EDQUOT);
	CU_ASSERT_EQUAL(ring_pin(&f, 32, 0), 32);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 128), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 100, 0), 100);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 100);
	nfix_exit(&f);
}

static void pin_limit_counts_a_split_edge_by_its_head(void)
{
	struct nfix f;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 100), 0);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 40), 0);
	/* one 100-token edge: a pin of 40 splits it and pins only the head */
	CU_ASSERT_EQUAL(ring_pin(&f, 40, KVMM_PIN_KEEP), 40);
	CU_ASSERT_EQUAL(ring_pin(&f, 41, KVMM_PIN_KEEP), -EDQUOT);
	CU_ASSERT_EQUAL(kvmm_node_ns(kvmm_tree_root(f.ctx, NS, false))->pinned, 40);
	nfix_exit(&f);
}

static void pin_drop_by_id_and_by_namespace(void)
{
	const struct kvmm_dump_hdr *hdr;
	uint64_t id16 = 0, id32 = 0;
	struct nfix f;
	uint32_t i;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 50), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 32, KVMM_PIN_KEEP), 32);
	CU_ASSERT_EQUAL(ring_pin(&f, 16, 0), 16);
	/* the operator sees both, with their owners */
	CU_ASSERT_EQUAL_FATAL(op_dump(&f, KVMM_DUMP_PINS), 2);
	hdr = (const struct kvmm_dump_hdr *)f.out;
	CU_ASSERT_EQUAL(hdr->rec_size, sizeof(struct kvmm_dump_pin));
	CU_ASSERT_EQUAL(hdr->next, 0);
	for (i = 0; i < 2; i++) {
		const struct kvmm_dump_pin *p = dump_pin_rec(&f, i);

		CU_ASSERT_EQUAL(p->ns, NS);
		CU_ASSERT_EQUAL(p->pins, 1);
		CU_ASSERT_EQUAL(p->pages, p->tokens);
		if (p->tokens == 16) {
			id16 = p->id;
			CU_ASSERT_EQUAL(p->keep, 0);
			CU_ASSERT_EQUAL(p->owner, f.ring.hdr->ring_id);
		} else {
			id32 = p->id;
			CU_ASSERT_EQUAL(p->tokens, 32);
			CU_ASSERT_EQUAL(p->keep, 1);
			CU_ASSERT_EQUAL(p->owner, 0);
		}
	}
	CU_ASSERT_FATAL(id16 && id32);
	/* a tenant cannot drop pins, not even its own namespace's */
	kvmm_prep_pin_drop(kvmm_get_sqe(&f.ring), KVMM_PIN_DROP_NS, NS, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EPERM);
	kvmm_prep_dump(kvmm_get_sqe(&f.ring), KVMM_DUMP_PINS, 0, 0, 1024, 1024);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EPERM);
	/* malformed drops change nothing */
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_ID, 0, 0), -ENOENT);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_ID, 0, 999999), -ENOENT);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_ID, NS, id32), -EINVAL);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_NS, NS, 1), -EINVAL);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_LAST, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 32);
	/* by id: the kept pin; the node under it stays pinned by the ring */
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_ID, 0, id32), 1);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_ID, 0, id32), -ENOENT);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 16);
	CHECK_OK(f.ctx);
	/* by namespace: the ring's own pin; the ring finds it gone */
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_NS, NS + 1, 0), 0);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_NS, NS, 0), 1);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 0);
	kvmm_prep_unpin(kvmm_get_sqe(&f.ring), NS, 0, 0, 16, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
	CU_ASSERT_EQUAL(op_dump(&f, KVMM_DUMP_PINS), 0);
	CHECK_OK(f.ctx);
	/* and drop-caches frees what was held */
	CU_ASSERT_EQUAL(kvmm_drop_caches(f.ctx), 50);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_CACHED), 0);
	nfix_exit(&f);
}

static void pin_drop_of_a_ring_pin_survives_the_ring_exit(void)
{
	struct nfix f;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 50), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 16, 0), 16);
	CU_ASSERT_EQUAL(ring_pin(&f, 16, 0), 16);
	CU_ASSERT_EQUAL(op_pin_drop(&f, KVMM_PIN_DROP_NS, NS, 0), 2);
	/* the ring's release has nothing left to unpin: no double unpin */
	kvmm_ring_exit(&f.ring);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 0);
	CHECK_OK(f.ctx);
	kvmm_destroy(f.ctx);
}

static void ns_dump_reports_usage_and_limits(void)
{
	const struct kvmm_dump_ns *n;
	struct nfix f;
	int nr, i;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 50), 0);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS + 1, f.tok, 20), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 30, KVMM_PIN_KEEP), 30);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_CACHE_SHARE, 50), 0);
	nr = op_dump(&f, KVMM_DUMP_NS);
	CU_ASSERT_EQUAL_FATAL(nr, 2);
	for (i = 0; i < nr; i++) {
		n = dump_ns_rec(&f, (uint32_t)i);
		CU_ASSERT_EQUAL(n->pin_limit, 64);
		CU_ASSERT_EQUAL(n->cache_limit, 64);
		CU_ASSERT_EQUAL(n->resv, 0);
		if (n->ns == NS) {
			CU_ASSERT_EQUAL(n->pinned, 30);
			CU_ASSERT_EQUAL(n->cached, 50);
		} else {
			CU_ASSERT_EQUAL(n->ns, NS + 1);
			CU_ASSERT_EQUAL(n->pinned, 0);
			CU_ASSERT_EQUAL(n->cached, 20);
		}
	}
	/* paging: one record per call, the cursor walks on */
	{
		struct kvmm_sqe sqe = { 0 };
		const struct kvmm_dump_hdr *hdr = (const struct kvmm_dump_hdr *)f.out;

		kvmm_prep_dump(&sqe, KVMM_DUMP_NS, 0, 0, 0,
			       sizeof(*hdr) + sizeof(struct kvmm_dump_ns));
		CU_ASSERT_EQUAL(op(&f, sqe), 1);
		CU_ASSERT_EQUAL(hdr->next, 1);
		sqe.arg2 = 1;
		CU_ASSERT_EQUAL(op(&f, sqe), 1);
		CU_ASSERT_EQUAL(hdr->next, 0);
	}
	nfix_exit(&f);
}

static void set_ns_limits_rejects_bad_values(void)
{
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	struct nfix f;

	nfix_init(&f);
	test_stats(f.ctx, before);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 1ull << 32), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(f.log.last, "ns_pin_pages"));
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_CACHE_SHARE, 0), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(f.log.last, "ns_cache_share"));
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_CACHE_SHARE, 101), -EINVAL);
	test_stats(f.ctx, after);
	ASSERT_STATS_SAME(before, after);
	CU_ASSERT_EQUAL(kvmm_ns_pin_limit(f.ctx), 64);
	CU_ASSERT_EQUAL(kvmm_ns_cache_limit(f.ctx), 128);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, 7), 0);
	CU_ASSERT_EQUAL(kvmm_ns_pin_limit(f.ctx), 7);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_PIN_PAGES, KVMM_NS_PIN_AUTO), 0);
	CU_ASSERT_EQUAL(kvmm_ns_pin_limit(f.ctx), 64);
	/* a tenant may not set them */
	kvmm_prep_set(kvmm_get_sqe(&f.ring), KVMM_SET_NS_PIN_PAGES, 128);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EPERM);
	nfix_exit(&f);
}

static uint64_t ns_cached(struct nfix *f, uint32_t ns)
{
	return kvmm_root_ns(kvmm_tree_root(f->ctx, ns, false))->cached;
}

/*
 * Tenant A caches more than its share after tenant B cached its own: a
 * third tenant's allocation reclaims A's cache, not B's older one.
 */
static void reclaim_takes_the_namespace_over_its_share_first(void)
{
	uint32_t seq, i;
	struct nfix f;

	nfix_init(&f);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_CACHE_SHARE, 50), 0);
	/* B: 3 prefixes of 10 pages, the oldest in the pool */
	for (i = 0; i < 3; i++) {
		test_tokens(f.tok, 10, 100 + i);
		CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS + 1, f.tok, 10), 0);
	}
	/* A: 8 prefixes of 10 pages, 80 > 64 of a 128-page pool */
	for (i = 0; i < 8; i++) {
		test_tokens(f.tok, 10, 200 + i);
		CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 10), 0);
	}
	CU_ASSERT_EQUAL(ns_cached(&f, NS), 80);
	CU_ASSERT_EQUAL(ns_cached(&f, NS + 1), 30);
	/* C needs 30 pages; 18 are free */
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(f.ctx, NS + 2, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(f.ctx, seq, 30, 0), 0);
	CU_ASSERT_EQUAL(ns_cached(&f, NS + 1), 30);
	CU_ASSERT_EQUAL(ns_cached(&f, NS), 60);	/* two of its leaves: 12 pages were short */
	CHECK_OK(f.ctx);
	/* under its share, A's cache is reclaimed in plain LRU order again */
	CU_ASSERT_EQUAL(kvmm_seq_close(f.ctx, seq, NULL, 0), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(f.ctx, NS + 2, &seq), 0);
	CU_ASSERT_EQUAL(op_set(&f, KVMM_SET_NS_CACHE_SHARE, 100), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(f.ctx, seq, 70, 0), 0);
	CU_ASSERT_EQUAL(ns_cached(&f, NS + 1), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(f.ctx, seq, NULL, 0), 0);
	/* drop-caches frees every tenant's unpinned cache */
	CU_ASSERT(kvmm_drop_caches(f.ctx) > 0);
	CU_ASSERT_EQUAL(ns_cached(&f, NS), 0);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_CACHED), 0);
	nfix_exit(&f);
}

static void check_catches_wrong_namespace_counters(void)
{
	struct kvmm_ns *ns;
	struct nfix f;

	nfix_init(&f);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, NS, f.tok, 50), 0);
	CU_ASSERT_EQUAL(ring_pin(&f, 20, KVMM_PIN_KEEP), 20);
	ns = kvmm_root_ns(kvmm_tree_root(f.ctx, NS, false));
	CU_ASSERT_EQUAL(ns->pinned, 20);
	CU_ASSERT_EQUAL(ns->cached, 50);
	ns->pinned++;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), -EUCLEAN);
	CU_ASSERT_PTR_NOT_NULL(strstr(f.log.last, "namespace 3: pinned"));
	ns->pinned--;
	ns->cached--;
	CU_ASSERT_EQUAL(kvmm_check(f.ctx), -EUCLEAN);
	CU_ASSERT_PTR_NOT_NULL(strstr(f.log.last, "device pages cached"));
	ns->cached++;
	nfix_exit(&f);
}

int register_ns_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_ns", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, pin_past_namespace_limit_fails_with_edquot);
	ADD_TEST(s, pin_limit_counts_a_split_edge_by_its_head);
	ADD_TEST(s, pin_drop_by_id_and_by_namespace);
	ADD_TEST(s, pin_drop_of_a_ring_pin_survives_the_ring_exit);
	ADD_TEST(s, ns_dump_reports_usage_and_limits);
	ADD_TEST(s, set_ns_limits_rejects_bad_values);
	ADD_TEST(s, reclaim_takes_the_namespace_over_its_share_first);
	ADD_TEST(s, check_catches_wrong_namespace_counters);
	return 0;
}
