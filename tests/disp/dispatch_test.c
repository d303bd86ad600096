// SPDX-License-Identifier: MIT
/*
 * tests/disp/dispatch_test.c - kvmm_dispatch: the command dispatcher
 * (disp/), driven through an in-process ring and kvmm_ioctl(): every
 * opcode, ownership, paging, backpressure, and a table of malformed
 * commands that must each fail with their errno and change nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../helpers.h"

#define NTOK	64

struct rfix {
	struct kvmm_ctx *ctx;
	struct kvmm_ring ring;
	uint32_t tok[NTOK];
	uint64_t out[1024];
};

static void rfix_init(struct rfix *f, uint32_t ps, uint32_t pages)
{
	struct kvmm_ring_params rp = { .sq_entries = 16, .buf_size = 4096 };
	struct kvmm_iovec iov[2];

	memset(f, 0, sizeof(*f));
	f->ctx = test_ctx(ps, pages, 4, NTOK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f->ctx);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(f->ctx, &rp, &f->ring), 0);
	test_tokens(f->tok, NTOK, 42);
	iov[0] = (struct kvmm_iovec){ f->tok, sizeof(f->tok) };
	iov[1] = (struct kvmm_iovec){ f->out, sizeof(f->out) };
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&f->ring, iov, 2), 0);
}

static void rfix_exit(struct rfix *f)
{
	kvmm_ring_exit(&f->ring);
	CHECK_OK(f->ctx);
	kvmm_destroy(f->ctx);
}

static void ring_request_lifecycle_matches_direct_api(void)
{
	struct rfix f;
	struct kvmm_sqe *sqe;
	struct kvmm_seq_info info;
	int32_t a, b;

	rfix_init(&f, 4, 64);
	sqe = TEST_SQE(&f.ring);
	kvmm_prep_open(sqe, 0);
	a = test_ring1(&f.ring, NULL);
	CU_ASSERT_FATAL(a >= 0);
	kvmm_prep_match(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 40, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_commit(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 40);
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	/* a second request hits, in one batch of three linked by user_data */
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	b = test_ring1(&f.ring, NULL);
	sqe = TEST_SQE(&f.ring);
	kvmm_prep_match(sqe, (uint32_t)b, 1, 0, 39);
	kvmm_sqe_set_data(sqe, 7);
	sqe = TEST_SQE(&f.ring);
	kvmm_prep_extend(sqe, (uint32_t)b, 3, 0);
	kvmm_sqe_set_data(sqe, 8);
	CU_ASSERT_EQUAL(kvmm_submit(&f.ring), 2);
	{
		struct kvmm_cqe *cqe;

		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&f.ring, &cqe), 0);
		CU_ASSERT_EQUAL(cqe->user_data, 7);
		CU_ASSERT_EQUAL(cqe->res, 36);
		kvmm_cqe_seen(&f.ring, cqe);
		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&f.ring, &cqe), 0);
		CU_ASSERT_EQUAL(cqe->user_data, 8);
		CU_ASSERT_EQUAL(cqe->res, 0);
		kvmm_cqe_seen(&f.ring, cqe);
		CU_ASSERT_EQUAL(kvmm_wait_cqe(&f.ring, &cqe), -EAGAIN);
	}
	CU_ASSERT_EQUAL(kvmm_seq_info(f.ctx, (uint32_t)b, &info), 0);
	CU_ASSERT_EQUAL(info.len, 39);
	CU_ASSERT_EQUAL(info.cached, 36);
	rfix_exit(&f);
}

/* Reap @n completions in order: their results go to @res. */
static void reap_in_order(struct kvmm_ring *ring, int32_t *res, uint32_t n)
{
	struct kvmm_cqe *cqe;
	uint32_t i;

	for (i = 0; i < n; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(ring, &cqe), 0);
		CU_ASSERT_EQUAL(cqe->user_data, i);
		res[i] = cqe->res;
		kvmm_cqe_seen(ring, cqe);
	}
}

/*
 * KVMM_EXTEND_TO lets one batch admit a prompt: the EXTEND adds what the
 * MATCH before it did not map, so the sequence ends as long as the prompt
 * whatever the cache held; the same batch on an empty cache adds it all.
 */
static void ring_extend_to_chains_match_extend_commit(void)
{
	const uint32_t hits[2] = { 36, 0 };	/* pages of 4: 40 cached, 39 matched */
	struct kvmm_sqe *sqe[3];
	struct kvmm_seq_info info;
	int32_t seq, res[3];
	struct rfix f;
	int round, i;

	rfix_init(&f, 4, 64);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, 0, f.tok, 40), 0);
	for (round = 0; round < 2; round++) {
		if (round)
			CU_ASSERT_EQUAL(kvmm_drop_caches(f.ctx), 11);
		kvmm_prep_open(TEST_SQE(&f.ring), 0);
		seq = test_ring1(&f.ring, NULL);
		CU_ASSERT_FATAL(seq >= 0);
		for (i = 0; i < 3; i++)
			sqe[i] = TEST_SQE(&f.ring);
		kvmm_prep_match(sqe[0], (uint32_t)seq, 1, 0, 39);
		kvmm_prep_extend(sqe[1], (uint32_t)seq, 45, KVMM_EXTEND_TO);
		kvmm_prep_commit(sqe[2], (uint32_t)seq, 1, 0, 45);
		for (i = 0; i < 3; i++)
			kvmm_sqe_set_data(sqe[i], i);
		CU_ASSERT_EQUAL(kvmm_submit(&f.ring), 3);
		reap_in_order(&f.ring, res, 3);
		CU_ASSERT_EQUAL(res[0], hits[round]);
		CU_ASSERT_EQUAL(res[1], 0);
		CU_ASSERT_EQUAL(res[2], 44);	/* whole pages of the 45 */
		CU_ASSERT_EQUAL(kvmm_seq_info(f.ctx, (uint32_t)seq, &info), 0);
		CU_ASSERT_EQUAL(info.len, 45);
		CU_ASSERT_EQUAL(info.cached, 44);
		CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_OWNED), 1);	/* the partial page */
		/* already 45 long: growing to 45 is refused and changes nothing */
		kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)seq, 45, KVMM_EXTEND_TO);
		CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
		kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)seq, 0, 0, 0);
		CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	}
	/* the direct API has no such flag: it knows the length itself */
	CU_ASSERT_EQUAL(kvmm_seq_open(f.ctx, 0, (uint32_t *)&seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(f.ctx, (uint32_t)seq, 4, KVMM_EXTEND_TO), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_close(f.ctx, (uint32_t)seq, NULL, 0), 0);
	rfix_exit(&f);
}

static void ring_exit_releases_sequences_and_pins(void)
{
	struct rfix f;
	int32_t a;

	rfix_init(&f, 1, 128);
	CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, 0, f.tok, 50), 0);
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	a = test_ring1(&f.ring, NULL);
	kvmm_prep_match(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 40);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 20, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_pin(TEST_SQE(&f.ring), 0, 1, 0, 30, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 30);
	kvmm_prep_pin(TEST_SQE(&f.ring), 0, 1, 0, 10, KVMM_PIN_KEEP);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 10);
	/* the direct API cannot touch the ring's sequence */
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(f.ctx, 0, f.tok, 30), -EINVAL);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_OWNED), 20);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 30);
	CHECK_OK(f.ctx);
	kvmm_ring_exit(&f.ring);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_OWNED), 0);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_SEQS_OPEN), 0);
	/* the kept pin stays; the ring's own went with it */
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_PAGES_PINNED), 10);
	CU_ASSERT_EQUAL(kvmm_prefix_unpin(f.ctx, 0, f.tok, 10), 10);
	CHECK_OK(f.ctx);
	kvmm_destroy(f.ctx);
}

/*
 * kvmm_destroy() with a ring still attached: the core releases it through
 * the callback its dispatcher registered (owner.c), so the dispatcher,
 * its pin list and its sequences go with the context and no metadata is
 * left.
 */
static void destroy_with_a_ring_attached_releases_it(void)
{
	struct kvmm_params p = test_params(1, 128, 4, NTOK);
	struct kvmm_ring_params rp = { .sq_entries = 16, .buf_size = 4096 };
	struct test_alloc ta = { 0 };
	struct kvmm_ring ring;
	struct kvmm_iovec iov;
	struct kvmm_ctx *ctx;
	uint32_t tok[NTOK];
	int32_t a;

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	test_tokens(tok, NTOK, 42);
	iov = (struct kvmm_iovec){ tok, sizeof(tok) };
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&ring, &iov, 1), 0);
	CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, tok, 50), 0);
	kvmm_prep_open(TEST_SQE(&ring), 0);
	a = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(a >= 0);
	kvmm_prep_match(TEST_SQE(&ring), (uint32_t)a, 1, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 40);
	kvmm_prep_pin(TEST_SQE(&ring), 0, 1, 0, 30, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 30);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	CU_ASSERT_EQUAL(ta.live_bytes, 0);
	ring.disp = NULL;	/* went with the context; free the rest */
	kvmm_ring_exit(&ring);
}

static void ring_sequences_belong_to_their_ring(void)
{
	struct rfix f;
	struct kvmm_ring other;
	struct kvmm_ring_params rp = { .sq_entries = 4 };
	int32_t a;
	uint32_t direct;

	rfix_init(&f, 1, 128);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(f.ctx, &rp, &other), 0);
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	a = test_ring1(&f.ring, NULL);
	kvmm_prep_extend(TEST_SQE(&other), (uint32_t)a, 1, 0);
	CU_ASSERT_EQUAL(test_ring1(&other, NULL), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(f.ctx, 0, &direct), 0);
	kvmm_prep_extend(TEST_SQE(&f.ring), direct, 1, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
	kvmm_ring_exit(&other);
	rfix_exit(&f);
}

static void ring_stats_probe_dump_set(void)
{
	struct rfix f;
	uint64_t direct[NR_KVMM_STATS];
	struct kvmm_stats_snap *snap = (void *)f.out;
	struct kvmm_probe *probe = (void *)f.out;
	struct kvmm_dump_hdr *hdr = (void *)f.out;
	uint32_t i, flags, seen = 0;
	uint64_t cursor = 0;
	int32_t res;

	rfix_init(&f, 1, 4096);
	for (i = 0; i < 200; i++) {
		uint32_t t[2] = { 9000 + i, i };

		CU_ASSERT_EQUAL_FATAL(test_cache(f.ctx, i % 3, t, 2), 0);
	}
	kvmm_prep_stats(TEST_SQE(&f.ring), 2, 0, sizeof(f.out));
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), NR_KVMM_STATS);
	test_stats(f.ctx, direct);
	CU_ASSERT_EQUAL(snap->nr, NR_KVMM_STATS);
	CU_ASSERT(!memcmp(snap + 1, direct, sizeof(direct)));
	/* LOOKUP: how much is cached, per namespace; it locks and touches nothing */
	memcpy(f.tok, (uint32_t[]){ 9000, 0, 7 }, 3 * sizeof(uint32_t));
	kvmm_prep_lookup(TEST_SQE(&f.ring), 0, 1, 0, 3);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 2);
	kvmm_prep_lookup(TEST_SQE(&f.ring), 1, 1, 0, 3);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_lookup(TEST_SQE(&f.ring), 0, 1, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
	test_stats(f.ctx, direct);
	CU_ASSERT(!memcmp(snap + 1, direct, sizeof(direct)));
	kvmm_prep_probe(TEST_SQE(&f.ring), 2, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), (int32_t)sizeof(*probe));
	CU_ASSERT_EQUAL(probe->abi, KVMM_ABI_VERSION);
	CU_ASSERT_EQUAL(probe->sqe_size, 64);
	CU_ASSERT_EQUAL(probe->cqe_size, 16);
	CU_ASSERT_EQUAL(probe->nr_pages, 4096);
	/* every opcode is served, so every bit up to KVMM_OP_LAST and no other */
	CU_ASSERT_EQUAL(probe->nr_ops, KVMM_OP_LAST);
	CU_ASSERT_EQUAL(probe->ops[0], (1ull << KVMM_OP_LAST) - 1);
	CU_ASSERT_EQUAL(probe->ops[1], 0);
	/* 3 roots + 200 leaves in pages of at most 2000 bytes: several pages */
	do {
		kvmm_prep_dump(TEST_SQE(&f.ring), KVMM_DUMP_NODES, cursor, 2, 0, 2000);
		res = test_ring1(&f.ring, &flags);
		CU_ASSERT(res > 0 && res <= (2000 - 16) / 64);
		CU_ASSERT_EQUAL(hdr->rec_size, sizeof(struct kvmm_dump_node));
		CU_ASSERT_EQUAL(!!(flags & KVMM_CQE_F_MORE), !!hdr->next);
		seen += hdr->nr;
		cursor = hdr->next;
	} while (cursor);
	CU_ASSERT_EQUAL(seen, 203);
	kvmm_prep_set(TEST_SQE(&f.ring), KVMM_SET_POLICY, KVMM_POLICY_SLRU);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	CU_ASSERT_STRING_EQUAL(kvmm_evict_policy(f.ctx), "slru");
	kvmm_prep_set(TEST_SQE(&f.ring), KVMM_SET_WMARK_HIGH, 10);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	CU_ASSERT_EQUAL(test_stat(f.ctx, KVMM_STAT_WMARK_HIGH), 10);
	kvmm_prep_reclaim(TEST_SQE(&f.ring), 4);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 4);
	kvmm_prep_drop_caches(TEST_SQE(&f.ring));
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 396);
	kvmm_prep_check(TEST_SQE(&f.ring));
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	rfix_exit(&f);
}

static void ring_full_cq_holds_back_until_reaped(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 16, 2, 8);
	struct kvmm_ring_params rp = { .sq_entries = 4, .cq_entries = 4 };
	struct kvmm_ring ring;
	struct kvmm_cqe *cqe;
	uint32_t i, got = 0;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	for (i = 0; i < 4; i++) {
		struct kvmm_sqe *sqe = TEST_SQE(&ring);

		kvmm_prep_nop(sqe);
		kvmm_sqe_set_data(sqe, i);
	}
	CU_ASSERT_PTR_NULL(kvmm_get_sqe(&ring) ? (void *)1 : NULL);
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 4);
	/* CQ full: these four wait in the SQ until completions are reaped */
	for (i = 4; i < 8; i++) {
		struct kvmm_sqe *sqe = TEST_SQE(&ring);

		CU_ASSERT_PTR_NOT_NULL_FATAL(sqe);
		kvmm_prep_nop(sqe);
		kvmm_sqe_set_data(sqe, i);
	}
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 4);
	while (!kvmm_wait_cqe(&ring, &cqe)) {
		CU_ASSERT_EQUAL(cqe->user_data, got);
		got++;
		kvmm_cqe_seen(&ring, cqe);
	}
	CU_ASSERT_EQUAL(got, 8);
	CU_ASSERT_EQUAL(kvmm_ring_init(ctx, &(struct kvmm_ring_params){ .sq_entries = 3 },
				       &ring) == -EINVAL, 1);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
}

static void ring_bound_to_a_namespace_keeps_to_it(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 256, 4, 64);
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096,
				       .flags = KVMM_RING_F_NS, .ns = 3 };
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	struct kvmm_ring ring;
	uint32_t *tok;
	int32_t seq;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	tok = ring.buf;
	test_tokens(tok, 32, 1);
	kvmm_prep_open(TEST_SQE(&ring), 3);
	seq = test_ring1(&ring, NULL);
	CU_ASSERT(seq >= 0);
	kvmm_prep_extend(TEST_SQE(&ring), (uint32_t)seq, 32, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	test_stats(ctx, before);
	kvmm_prep_open(TEST_SQE(&ring), 4);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_pin(TEST_SQE(&ring), 0, 0, 0, 16, KVMM_PIN_KEEP);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_lookup(TEST_SQE(&ring), 0, 0, 0, 16);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_drop_caches(TEST_SQE(&ring));
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_check(TEST_SQE(&ring));
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_flush(TEST_SQE(&ring), 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_reclaim(TEST_SQE(&ring), 1);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_set(TEST_SQE(&ring), KVMM_SET_POLICY, KVMM_POLICY_SLRU);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_dump(TEST_SQE(&ring), KVMM_DUMP_SEQS, 0, 0, 1024, 1024);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	test_stats(ctx, after);
	ASSERT_STATS_SAME(before, after);
	/* its own namespace still works, and stats are open to all */
	kvmm_prep_pin(TEST_SQE(&ring), 3, 0, 0, 16, KVMM_PIN_KEEP);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 16);
	kvmm_prep_stats(TEST_SQE(&ring), 0, 1024, 1024);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), NR_KVMM_STATS);
	/* a namespace without the flag is a malformed shape */
	rp.flags = 0;
	CU_ASSERT_EQUAL(kvmm_ring_init(ctx, &rp, &(struct kvmm_ring){ 0 }), -EINVAL);
	kvmm_ring_exit(&ring);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* SEQ_ROW of @seq on @ring into f->out (buffer 2) of @bytes; its result. */
static int32_t seq_row(struct rfix *f, struct kvmm_ring *ring, uint32_t seq, uint32_t bytes)
{
	kvmm_prep_seq_row(TEST_SQE(ring), seq, 2, 0, bytes);
	return test_ring1(ring, NULL);
}

/* Does f->out hold @seq's row as the page table has it, and as kvmm_seq_info() says? */
static bool row_is_the_table(const struct rfix *f, uint32_t seq)
{
	const struct kvmm_seq_row *row = (const void *)f->out;
	struct kvmm_seq_info info;
	struct kvmm_table t;

	kvmm_seq_table(f->ctx, &t);
	if (kvmm_seq_info(f->ctx, seq, &info) || row->len != info.len ||
	    row->cached != info.cached || row->resv)
		return false;
	return row->pages == (info.len + 3) / 4 &&
	       !memcmp(row + 1, t.base + (size_t)KVMM_SEQ_ROW(seq) * t.stride,
		       row->pages * sizeof(int32_t));
}

/*
 * SEQ_ROW gives a client in another process what an in-process engine
 * reads in place: its sequence's page-table row, whole or not at all, and
 * only for a sequence of its own ring, bound to a namespace or not.
 */
static void ring_seq_row_is_the_ring_own_page_table_row(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .flags = KVMM_RING_F_NS, .ns = 2 };
	const struct kvmm_seq_row *row;
	struct kvmm_ring tenant;
	struct rfix f;
	int32_t a, b;
	uint32_t direct;

	rfix_init(&f, 4, 64);
	row = (const void *)f.out;
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(f.ctx, &rp, &tenant), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&tenant, (struct kvmm_iovec[]){
		{ f.tok, sizeof(f.tok) }, { f.out, sizeof(f.out) } }, 2), 0);
	/* an empty sequence: the header only */
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	a = test_ring1(&f.ring, NULL);
	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT_EQUAL(seq_row(&f, &f.ring, (uint32_t)a, sizeof(*row)), 0);
	CU_ASSERT(row_is_the_table(&f, (uint32_t)a));
	/* 40 tokens committed, then 2 more: 11 pages, 40 cached */
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 42, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_commit(TEST_SQE(&f.ring), (uint32_t)a, 0, 0, 40);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 40);
	CU_ASSERT_EQUAL(seq_row(&f, &f.ring, (uint32_t)a, sizeof(f.out)), 11);
	CU_ASSERT(row_is_the_table(&f, (uint32_t)a));
	CU_ASSERT_EQUAL(row->len, 42);
	CU_ASSERT_EQUAL(row->cached, 40);
	/* one frame short: refused, the buffer untouched */
	memset(f.out, 0xa5, sizeof(f.out));
	CU_ASSERT_EQUAL(seq_row(&f, &f.ring, (uint32_t)a, sizeof(*row) + 10 * 4), -EINVAL);
	CU_ASSERT_EQUAL(f.out[0], 0xa5a5a5a5a5a5a5a5ull);
	/* the tenant's own sequence: yes; the operator's, the direct API's: no */
	kvmm_prep_open(TEST_SQE(&tenant), 2);
	b = test_ring1(&tenant, NULL);
	CU_ASSERT_FATAL(b >= 0);
	kvmm_prep_extend(TEST_SQE(&tenant), (uint32_t)b, 5, 0);
	CU_ASSERT_EQUAL(test_ring1(&tenant, NULL), 0);
	CU_ASSERT_EQUAL(seq_row(&f, &tenant, (uint32_t)b, sizeof(f.out)), 2);
	CU_ASSERT(row_is_the_table(&f, (uint32_t)b));
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(f.ctx, 2, &direct), 0);
	memset(f.out, 0xa5, sizeof(f.out));
	CU_ASSERT_EQUAL(seq_row(&f, &tenant, (uint32_t)a, sizeof(f.out)), -EINVAL);
	CU_ASSERT_EQUAL(seq_row(&f, &tenant, direct, sizeof(f.out)), -EINVAL);
	CU_ASSERT_EQUAL(seq_row(&f, &f.ring, (uint32_t)b, sizeof(f.out)), -EINVAL);
	CU_ASSERT_EQUAL(f.out[0], 0xa5a5a5a5a5a5a5a5ull);
	/* a closed sequence is no one's */
	kvmm_prep_close(TEST_SQE(&tenant), (uint32_t)b, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&tenant, NULL), 0);
	CU_ASSERT_EQUAL(seq_row(&f, &tenant, (uint32_t)b, sizeof(f.out)), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_close(f.ctx, direct, NULL, 0), 0);
	kvmm_ring_exit(&tenant);
	rfix_exit(&f);
}

/* The page-table row of @seq, a ring's id, read in place. */
static const int32_t *seq_row_in_place(struct kvmm_ctx *ctx, uint32_t seq)
{
	struct kvmm_table t;

	kvmm_seq_table(ctx, &t);
	return t.base + (size_t)KVMM_SEQ_ROW(seq) * t.stride;
}

/* kvmm_kv_indices() of the one sequence @seq into @idx (8 entries). */
static int64_t kv_indices_of(struct kvmm_ctx *ctx, uint32_t seq, int32_t *idx)
{
	int32_t indptr[2], last, scratch[8];
	struct kvmm_kv_batch kb = {
		.seqs = &seq, .count = 1, .max_indices = 8, .indptr = indptr,
		.indices = idx ? idx : scratch, .last_page_len = &last,
	};

	return kvmm_kv_indices(ctx, &kb);
}

/*
 * An id kept past its CLOSE: once the ring opens the row again, every
 * command naming the old id fails with -ESTALE and changes nothing; the
 * row's new sequence keeps its pages and its KV.  (Ids were the bare row,
 * so a stale CLOSE closed the new request.)
 */
static void ring_stale_seq_id_fails_and_changes_nothing(void)
{
	struct kvmm_extend_ent *ents;
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	struct kvmm_seq_info info;
	struct rfix f;
	int32_t a, b;
	size_t i;

	rfix_init(&f, 4, 64);
	ents = (void *)((char *)f.out + 2048);
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	a = test_ring1(&f.ring, NULL);
	CU_ASSERT_FATAL(a > 0);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 8, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)a, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	/* a double close while the row is free: -EINVAL, as before */
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)a, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
	/* another request takes the same row under a new id */
	kvmm_prep_open(TEST_SQE(&f.ring), 0);
	b = test_ring1(&f.ring, NULL);
	CU_ASSERT_FATAL(b > 0);
	CU_ASSERT_EQUAL(KVMM_SEQ_ROW(b), KVMM_SEQ_ROW(a));
	CU_ASSERT_EQUAL(KVMM_SEQ_GEN(b), KVMM_SEQ_GEN(a) + 1);
	CU_ASSERT_NOT_EQUAL_FATAL(b, a);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)b, 20, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	CU_ASSERT_EQUAL(test_kv_stamp(f.ctx, (uint32_t)b, f.tok, 0, 20, false), 0);
	CHECK_OK(f.ctx);
	test_stats(f.ctx, before);

	/* every command that names a sequence, with the old id */
	kvmm_prep_match(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 8);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 4, 0);
	kvmm_prep_extend(TEST_SQE(&f.ring), (uint32_t)a, 24, KVMM_EXTEND_TO);
	kvmm_prep_commit(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 8);
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)a, 0, 0, 0);
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 8);
	kvmm_prep_retract(TEST_SQE(&f.ring), (uint32_t)a, 0, 0, 0);
	kvmm_prep_promote(TEST_SQE(&f.ring), (uint32_t)a, 1, 0, 8);
	kvmm_prep_seq_row(TEST_SQE(&f.ring), (uint32_t)a, 2, 0, 1024);
	/* a decode batch that names the live id and the stale one */
	ents[0] = (struct kvmm_extend_ent){ (uint32_t)b, 1 };
	ents[1] = (struct kvmm_extend_ent){ (uint32_t)a, 1 };
	kvmm_prep_extend_batch(TEST_SQE(&f.ring), 2, 2048, 2, 0);
	for (i = 0; i < 10; i++) {
		struct kvmm_cqe *cqe;

		if (i == 0)
			CU_ASSERT_EQUAL(kvmm_submit(&f.ring), 10);
		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&f.ring, &cqe), 0);
		if (cqe->res != -ESTALE)
			fprintf(stderr, "stale id: command %zu gave %d\n", i, cqe->res);
		CU_ASSERT_EQUAL(cqe->res, -ESTALE);
		kvmm_cqe_seen(&f.ring, cqe);
	}
	test_stats(f.ctx, after);
	ASSERT_STATS_SAME(before, after);
	CHECK_OK(f.ctx);
	CU_ASSERT_EQUAL(kvmm_seq_info(f.ctx, (uint32_t)b, &info), 0);
	CU_ASSERT_EQUAL(info.len, 20);
	CU_ASSERT_EQUAL(test_kv_stamp(f.ctx, (uint32_t)b, f.tok, 0, 20, true), 0);

	/* the direct API refuses the stale id and takes the live one */
	CU_ASSERT_EQUAL(kvmm_seq_close(f.ctx, (uint32_t)a, NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_extend(f.ctx, (uint32_t)a, 1, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_info(f.ctx, (uint32_t)a, &info), -EINVAL);
	CU_ASSERT_EQUAL(kv_indices_of(f.ctx, (uint32_t)a, NULL), -EINVAL);
	/* the backend gets the row of the live id: B's 5 frames */
	{
		int32_t idx[8];

		CU_ASSERT_EQUAL(kv_indices_of(f.ctx, (uint32_t)b, idx), 5);
		CU_ASSERT_EQUAL(memcmp(idx, seq_row_in_place(f.ctx, (uint32_t)b), 5 * 4), 0);
	}
	/* a bare row is no ring's id */
	kvmm_prep_close(TEST_SQE(&f.ring), KVMM_SEQ_ROW(b), 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_seq_info(f.ctx, (uint32_t)b, &info), 0);
	kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)b, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&f.ring, NULL), 0);
	rfix_exit(&f);
}

/*
 * kvmm_ioctl() shares its sequences with the direct API: it hands out
 * ids as a ring does, refuses a stale one, and still takes a bare row.
 */
static void ioctl_stale_seq_id_fails(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 64, 4, NTOK);
	struct kvmm_sqe sqe;
	uint32_t row;
	int32_t a;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	kvmm_prep_open(memset(&sqe, 0, sizeof(sqe)), 0);
	a = kvmm_ioctl(ctx, &sqe, NULL, 0);
	CU_ASSERT_FATAL(a > 0);
	kvmm_prep_close(memset(&sqe, 0, sizeof(sqe)), (uint32_t)a, 0, 0, 0);
	CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, NULL, 0), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &row), 0);
	CU_ASSERT_EQUAL(row, KVMM_SEQ_ROW(a));
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, row, 5, 0), 0);
	CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, NULL, 0), -ESTALE);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 2);
	kvmm_prep_close(memset(&sqe, 0, sizeof(sqe)), row, 0, 0, 0);
	CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, NULL, 0), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * A row's generation counts 1..KVMM_SEQ_GEN_MAX and wraps past 0: every
 * id is positive (a CQE's res), never a bare row, and the same row.
 */
static void ring_seq_generation_wraps_and_is_never_zero(void)
{
	struct rfix f;
	uint32_t i, row = 0;
	int32_t id, prev = 0;

	rfix_init(&f, 4, 64);
	for (i = 0; i < KVMM_SEQ_GEN_MAX + 2; i++) {
		kvmm_prep_open(TEST_SQE(&f.ring), 0);
		id = test_ring1(&f.ring, NULL);
		CU_ASSERT_FATAL(id > 0);
		if (!i)
			row = KVMM_SEQ_ROW(id);
		CU_ASSERT_EQUAL(KVMM_SEQ_ROW(id), row);
		CU_ASSERT_EQUAL(KVMM_SEQ_GEN(id), i % KVMM_SEQ_GEN_MAX + 1);
		CU_ASSERT_NOT_EQUAL(id, prev);
		kvmm_prep_close(TEST_SQE(&f.ring), (uint32_t)id, 0, 0, 0);
		CU_ASSERT_EQUAL_FATAL(test_ring1(&f.ring, NULL), 0);
		prev = id;
	}
	rfix_exit(&f);
}

/* ---- malformed commands ---- */

enum { S_NONE, S_ALL_ROWS };

struct bad_case {
	const char *what;
	struct kvmm_sqe sqe;
	int expect;
	int setup;
};

#define SEQ_A	0	/* open, 18 tokens, 16 cached (pages of 4) */
#define SEQ_C	3	/* never opened */

#define BAD(w, e, ...) { .what = (w), .expect = (e), .sqe = { __VA_ARGS__ } }
#define BAD_SETUP(w, e, st, ...) { .what = (w), .expect = (e), .setup = (st), .sqe = { __VA_ARGS__ } }

static const struct bad_case bad_cases[] = {
	BAD("opcode past the last", -EINVAL, .opcode = KVMM_OP_LAST),
	BAD("opcode 255", -EINVAL, .opcode = 255),
	BAD("sqe flags", -EINVAL, .opcode = KVMM_OP_NOP, .flags = 1),
	BAD("resv0", -EINVAL, .opcode = KVMM_OP_NOP, .resv0 = 1),
	BAD("resv[0]", -EINVAL, .opcode = KVMM_OP_NOP, .resv = { 1, 0 }),
	BAD("resv[1]", -EINVAL, .opcode = KVMM_OP_NOP, .resv = { 0, 1 }),
	BAD("NOP with a seq", -EINVAL, .opcode = KVMM_OP_NOP, .seq = 1),
	BAD("NOP with a length", -EINVAL, .opcode = KVMM_OP_NOP, .len = 1),
	BAD("OPEN with a buffer", -EINVAL, .opcode = KVMM_OP_OPEN, .buf = 1),
	BAD("RECLAIM with ns", -EINVAL, .opcode = KVMM_OP_RECLAIM, .arg = 1, .ns = 3),
	BAD("MATCH unknown seq", -EINVAL, .opcode = KVMM_OP_MATCH, .seq = 999, .len = 4),
	BAD("MATCH never-opened seq", -EINVAL, .opcode = KVMM_OP_MATCH, .seq = SEQ_C, .len = 4),
	BAD("MATCH on a non-empty seq", -EINVAL, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .len = 4),
	BAD("MATCH unregistered buffer", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .buf = 5, .len = 4),
	BAD("MATCH buffer index past table", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .buf = 999, .len = 4),
	BAD("MATCH offset outside", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .off = 4096, .len = 4),
	BAD("MATCH length overflows", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .len = UINT32_MAX),
	BAD("MATCH offset + length wraps", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .off = UINT64_MAX - 3, .len = 4),
	BAD("MATCH unaligned offset", -EFAULT, .opcode = KVMM_OP_MATCH, .seq = SEQ_A, .off = 2, .len = 4),
	BAD("MATCH zero length", -EINVAL, .opcode = KVMM_OP_MATCH, .seq = SEQ_A),
	BAD("EXTEND by zero", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A),
	BAD("EXTEND past max_seq_len", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 47),
	BAD("EXTEND unknown flags", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 1, .arg2 = 8),
	BAD("EXTEND_TO its own length", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 18, .arg2 = KVMM_EXTEND_TO),
	BAD("EXTEND_TO shorter", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 5, .arg2 = KVMM_EXTEND_TO),
	BAD("EXTEND_TO past max_seq_len", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 65, .arg2 = KVMM_EXTEND_TO),
	BAD("EXTEND_TO a batch", -EINVAL, .opcode = KVMM_OP_EXTEND, .buf = 2, .off = 32, .len = 1, .arg2 = KVMM_EXTEND_TO),
	BAD("EXTEND flags past 32 bits", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 1, .arg2 = 1ull << 40),
	BAD("EXTEND single with a buffer", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 1, .off = 4),
	BAD("EXTEND batch with seq and arg", -EINVAL, .opcode = KVMM_OP_EXTEND, .seq = SEQ_A, .arg = 1, .buf = 2, .len = 1),
	BAD("EXTEND batch repeats a seq", -EINVAL, .opcode = KVMM_OP_EXTEND, .buf = 2, .off = 0, .len = 2),
	BAD("EXTEND batch names a closed seq", -EINVAL, .opcode = KVMM_OP_EXTEND, .buf = 2, .off = 16, .len = 1),
	BAD("EXTEND batch too big for the pool", -ENOSPC, .opcode = KVMM_OP_EXTEND, .buf = 2, .off = 32, .len = 1),
	BAD("COMMIT past the seq's length", -EINVAL, .opcode = KVMM_OP_COMMIT, .seq = SEQ_A, .len = 19),
	BAD("CLOSE a closed seq (double close)", -EINVAL, .opcode = KVMM_OP_CLOSE, .seq = SEQ_C),
	BAD("CLOSE without tokens but with a buffer", -EINVAL, .opcode = KVMM_OP_CLOSE, .seq = SEQ_A, .buf = 1),
	BAD("RETRACT past the seq's length", -EINVAL, .opcode = KVMM_OP_RETRACT, .seq = SEQ_A, .len = 30),
	BAD("PIN an uncached prefix", -ENOENT, .opcode = KVMM_OP_PIN, .ns = 7, .len = 8),
	BAD("PIN unknown flags", -EINVAL, .opcode = KVMM_OP_PIN, .len = 8, .arg = 2),
	BAD("UNPIN an unpinned prefix", -EINVAL, .opcode = KVMM_OP_UNPIN, .len = 12, .arg = KVMM_PIN_KEEP),
	BAD("PRIO out of range", -EINVAL, .opcode = KVMM_OP_PRIO, .len = 8, .arg = KVMM_NR_PRIO),
	BAD("LOOKUP longer than max_seq_len", -EINVAL, .opcode = KVMM_OP_LOOKUP, .len = 65),
	BAD("RECLAIM zero pages", -EINVAL, .opcode = KVMM_OP_RECLAIM),
	BAD("STATS buffer too small", -EINVAL, .opcode = KVMM_OP_STATS, .buf = 1, .len = 8),
	BAD("PROBE buffer too small", -EINVAL, .opcode = KVMM_OP_PROBE, .buf = 1, .len = 64),
	BAD("DUMP unknown kind", -EINVAL, .opcode = KVMM_OP_DUMP, .buf = 1, .len = 4096, .arg = 9),
	BAD("DUMP buffer holds no record", -EINVAL, .opcode = KVMM_OP_DUMP, .buf = 1, .len = 40),
	BAD("SEQ_ROW unknown seq", -EINVAL, .opcode = KVMM_OP_SEQ_ROW, .seq = 999, .buf = 1, .len = 64),
	BAD("SEQ_ROW never-opened seq", -EINVAL, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_C, .buf = 1, .len = 64),
	BAD("SEQ_ROW buffer a frame short", -EINVAL, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 1, .len = 32),
	BAD("SEQ_ROW shorter than its header", -EINVAL, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 1, .len = 8),
	BAD("SEQ_ROW unaligned", -EFAULT, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 1, .off = 2, .len = 64),
	BAD("SEQ_ROW outside its buffer", -EFAULT, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 1, .off = 4096, .len = 64),
	BAD("SEQ_ROW unregistered buffer", -EFAULT, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 5, .len = 64),
	BAD("SEQ_ROW with an arg", -EINVAL, .opcode = KVMM_OP_SEQ_ROW, .seq = SEQ_A, .buf = 1, .len = 64, .arg = 1),
	BAD("SET unknown key", -EINVAL, .opcode = KVMM_OP_SET, .arg = KVMM_SET_LAST),
	BAD("SET low above high", -EINVAL, .opcode = KVMM_OP_SET, .arg = KVMM_SET_WMARK_LOW, .arg2 = 5),
	BAD("SET unknown policy", -EINVAL, .opcode = KVMM_OP_SET, .arg = KVMM_SET_POLICY, .arg2 = 7),
	BAD_SETUP("OPEN with every row taken", -EBUSY, S_ALL_ROWS, .opcode = KVMM_OP_OPEN),
};

static void ring_malformed_commands_fail_and_change_nothing(void)
{
	uint32_t tok[256];
	uint64_t out[512];
	struct kvmm_extend_ent ents[6] = {
		{ SEQ_A, 1 }, { SEQ_A, 1 },		/* repeated */
		{ SEQ_C, 1 }, { 0, 0 },			/* closed */
		{ SEQ_A, 40 }, { 0, 0 },		/* 10 pages: more than the pool */
	};
	size_t i;

	CU_ASSERT(sizeof(bad_cases) / sizeof(bad_cases[0]) >= 25);
	test_tokens(tok, 256, 5);
	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *bc = &bad_cases[i];
		struct kvmm_iovec iov[3] = {
			{ tok, sizeof(tok) }, { out, sizeof(out) }, { ents, sizeof(ents) },
		};
		uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
		struct kvmm_ctx *ctx = test_ctx(4, 12, 4, 64);
		uint32_t seq, s;
		int res;

		/* seq A: 18 tokens, 16 committed; prefix tok[0..8) pinned (kept) */
		CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 18, &seq), 0);
		CU_ASSERT_EQUAL_FATAL(seq, SEQ_A);
		CU_ASSERT_EQUAL_FATAL(kvmm_seq_commit(ctx, seq, tok, 18), 16);
		CU_ASSERT_EQUAL_FATAL(kvmm_prefix_pin(ctx, 0, tok, 8), 8);
		CU_ASSERT_EQUAL_FATAL(kvmm_set_watermarks(ctx, 0, 2, 3), 0);
		if (bc->setup == S_ALL_ROWS)
			while (!kvmm_seq_open(ctx, 1, &s))
				;
		test_stats(ctx, before);
		res = kvmm_ioctl(ctx, &bc->sqe, iov, 3);
		test_stats(ctx, after);
		if (bc->expect == -ENOSPC)
			after[KVMM_STAT_ALLOC_FAIL]--;	/* the refusal's own count */
		if (res != bc->expect)
			fprintf(stderr, "bad case '%s': %d, expected %d\n", bc->what, res,
				bc->expect);
		CU_ASSERT_EQUAL(res, bc->expect);
		ASSERT_STATS_SAME(before, after);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
	}
	CU_ASSERT_EQUAL(kvmm_ioctl(NULL, &bad_cases[0].sqe, NULL, 0), -EINVAL);
}

/*
 * struct scribbler - a client thread rewriting its own buffer, as another
 * process can: @nr words at @words, each set to a random token below 3,
 * or with @huge to a count no record fits, from @seed until @stop.
 */
struct scribbler {
	volatile uint32_t *words;
	uint32_t nr;
	uint32_t seed;
	bool huge;
	volatile int stop;
};

static void *scribble(void *arg)
{
	struct scribbler *sc = arg;
	uint32_t x = sc->seed;

	while (!sc->stop) {
		x = x * 1103515245 + 12345;
		sc->words[(x >> 8) % sc->nr] = sc->huge ? x | 0x80000000u : (x >> 20) % 3;
	}
	return NULL;
}

/*
 * A client rewriting its token buffer while commands read it (as another
 * process can): results may be anything, inserts may be refused with
 * -EINVAL (about half of them here), but every invariant must hold after
 * every command (DEBUG=3 checks them) and at the end.
 */
static void ring_tokens_rewritten_while_read_keep_tree_sound(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 4096, 4, 64);
	uint32_t tok[64] = { 0 }, i;
	struct scribbler sc = { .words = tok, .nr = 64, .seed = 1 };
	struct kvmm_iovec iov = { tok, sizeof(tok) };
	pthread_t th;

	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, scribble, &sc), 0);
	for (i = 0; i < 3000; i++) {
		struct kvmm_sqe sqe = { .opcode = KVMM_OP_OPEN };
		int32_t seq = kvmm_ioctl(ctx, &sqe, &iov, 1), res;

		CU_ASSERT_FATAL(seq >= 0);
		sqe = (struct kvmm_sqe){ .opcode = KVMM_OP_EXTEND, .seq = (uint32_t)seq, .arg = 64 };
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, &iov, 1), 0);
		sqe = (struct kvmm_sqe){ .opcode = KVMM_OP_COMMIT, .seq = (uint32_t)seq, .len = 64 };
		res = kvmm_ioctl(ctx, &sqe, &iov, 1);
		CU_ASSERT(res >= 0 || res == -EINVAL);
		sqe = (struct kvmm_sqe){ .opcode = KVMM_OP_CLOSE, .seq = (uint32_t)seq };
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, &iov, 1), 0);
		if (i % 500 == 499)
			kvmm_drop_caches(ctx);
	}
	sc.stop = 1;
	pthread_join(th, NULL);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 0);
	kvmm_destroy(ctx);
}

/*
 * The output buffer belongs to the client, who may rewrite its header
 * while DUMP and STATS fill it: the dispatcher must never read its own
 * counts back from there (under ASan a stray write past the buffer is
 * fatal).
 */
static void ring_output_rewritten_while_written_stays_in_bounds(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 4096, 4, 64);
	uint64_t *out = malloc(1040);	/* header + 16 node records, exactly */
	struct kvmm_iovec iov = { out, 1040 };
	struct scribbler sc = { .words = (volatile uint32_t *)out, .nr = 4, .seed = 7,
				.huge = true };
	pthread_t th;
	uint32_t i;

	for (i = 0; i < 300; i++) {
		uint32_t t[2] = { i, i + 1 };

		CU_ASSERT_EQUAL_FATAL(test_cache(ctx, 0, t, 2), 0);
	}
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, scribble, &sc), 0);
	for (i = 0; i < 2000; i++) {
		struct kvmm_sqe dump = { .opcode = KVMM_OP_DUMP, .len = 1040,
					 .arg = i % 2 ? KVMM_DUMP_NODES : KVMM_DUMP_SEQS,
					 .arg2 = i % 50 };
		struct kvmm_sqe stats = { .opcode = KVMM_OP_STATS, .len = 1040 };
		int32_t res = kvmm_ioctl(ctx, &dump, &iov, 1);

		CU_ASSERT(res >= 0 && res <= 16);
		res = kvmm_ioctl(ctx, &stats, &iov, 1);
		CU_ASSERT_EQUAL(res, NR_KVMM_STATS);
	}
	sc.stop = 1;
	pthread_join(th, NULL);
	CHECK_OK(ctx);
	free(out);
	kvmm_destroy(ctx);
}

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* The two tests above race on purpose: ThreadSanitizer would report them. */
static int add_racy(CU_pSuite s, const char *name, CU_TestFunc fn)
{
	CU_pTest t = CU_add_test(s, name, fn);

	if (!t)
		return -1;
#ifdef UNDER_TSAN
	printf("kvmm_dispatch: %s inactive: it races on purpose (ThreadSanitizer build)\n", name);
	CU_set_test_active(t, CU_FALSE);
#endif
	return 0;
}

/* DUMP KVMM_DUMP_HIST into @out (@len bytes) from @cursor: its res. */
static int dump_hist(struct kvmm_ctx *ctx, void *out, uint32_t len, uint64_t cursor)
{
	struct kvmm_iovec iov = { out, len };
	struct kvmm_sqe sqe;

	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_dump(&sqe, KVMM_DUMP_HIST, cursor, 0, 0, len);
	return kvmm_ioctl(ctx, &sqe, &iov, 1);
}

/* Each histogram's buckets add up to its count. */
static void assert_hist_sane(const struct kvmm_dump_hist *h, uint32_t which)
{
	uint64_t sum = 0;
	uint32_t i;

	CU_ASSERT_EQUAL(h->which, which);
	CU_ASSERT_EQUAL(h->nr_buckets, KVMM_HIST_BUCKETS);
	for (i = 0; i < KVMM_HIST_BUCKETS; i++)
		sum += h->buckets[i];
	CU_ASSERT_EQUAL(sum, h->count);
	CU_ASSERT(h->count ? h->sum_ns > 0 : h->sum_ns == 0);
}

/*
 * The latency histograms count every command the dispatcher ran (the
 * DUMP that reads them is counted after it), every demotion and every
 * promotion of a node's pages; a DUMP page at a time pages through them.
 */
static void dump_hist_counts_commands_and_tier_copies(void)
{
	struct kvmm_params p = test_params(4, 16, 4, 64);
	static struct {
		struct kvmm_dump_hdr hdr;
		struct kvmm_dump_hist h[KVMM_HIST_LAST];
	} out;
	struct kvmm_sqe nop = { .opcode = KVMM_OP_NOP };
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[32], seq, i;

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	for (i = 0; i < 5; i++)
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &nop, NULL, 0), 0);
	CU_ASSERT_EQUAL(dump_hist(ctx, &out, sizeof(out), 0), KVMM_HIST_LAST);
	CU_ASSERT_EQUAL(out.hdr.next, 0);
	CU_ASSERT_EQUAL(out.hdr.rec_size, sizeof(struct kvmm_dump_hist));
	CU_ASSERT_EQUAL(out.h[KVMM_HIST_CMD].count, 5);
	for (i = 0; i < KVMM_HIST_LAST; i++)
		assert_hist_sane(&out.h[i], i);
	CU_ASSERT_EQUAL(out.h[KVMM_HIST_DEMOTE].count, 0);
	/* one node demoted to the host tier, then promoted back */
	test_tokens(tok, 32, 21);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 32), 0);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 8), 8);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 32), 0);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, seq, tok, 32), 32);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(dump_hist(ctx, &out, sizeof(out), 0), KVMM_HIST_LAST);
	CU_ASSERT_EQUAL(out.h[KVMM_HIST_CMD].count, 6);		/* the DUMP before */
	CU_ASSERT_EQUAL(out.h[KVMM_HIST_DEMOTE].count, 1);
	CU_ASSERT_EQUAL(out.h[KVMM_HIST_PROMOTE].count, 1);
	for (i = 0; i < KVMM_HIST_LAST; i++)
		assert_hist_sane(&out.h[i], i);
	/* room for one record: one at a time, the cursor says which is next */
	CU_ASSERT_EQUAL(dump_hist(ctx, &out, sizeof(out.hdr) + sizeof(out.h[0]), 1), 1);
	CU_ASSERT_EQUAL(out.h[0].which, KVMM_HIST_DEMOTE);
	CU_ASSERT_EQUAL(out.hdr.next, 2);
	CU_ASSERT_EQUAL(dump_hist(ctx, &out, sizeof(out.hdr) + sizeof(out.h[0]) - 8, 0), -EINVAL);
	kvmm_destroy(ctx);
}

/*
 * A batch of more commands than the dispatcher times between two reads
 * of the clock still has each command in the histogram once: a DUMP in
 * the middle of the batch sees the commands before it, and the times
 * observed add up to no more than the batch took on the clock.
 */
static void dump_hist_times_each_command_of_a_batch(void)
{
	static struct {
		struct kvmm_dump_hdr hdr;
		struct kvmm_dump_hist h[KVMM_HIST_LAST];
	} out;
	struct kvmm_ring_params rp = { .sq_entries = 256, .buf_size = sizeof(out) };
	struct kvmm_ctx *ctx = test_ctx(4, 16, 4, 64);
	const struct kvmm_dump_hist *cmd = &out.h[KVMM_HIST_CMD];
	struct timespec t0, t1;
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	struct kvmm_cqe *cqe;
	uint64_t wall;
	uint32_t i;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	for (i = 0; i < 251; i++) {
		sqe = kvmm_get_sqe(&ring);
		CU_ASSERT_PTR_NOT_NULL_FATAL(sqe);
		if (i == 200)
			kvmm_prep_dump(sqe, KVMM_DUMP_HIST, 0, 0, 0, sizeof(out));
		else
			kvmm_prep_nop(sqe);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 251);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	wall = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
	       (uint64_t)t0.tv_nsec;
	for (i = 0; i < 251; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&ring, &cqe), 0);
		CU_ASSERT_EQUAL(cqe->res, i == 200 ? KVMM_HIST_LAST : 0);
		kvmm_cqe_seen(&ring, cqe);
	}
	memcpy(&out, ring.buf, sizeof(out));
	CU_ASSERT_EQUAL(cmd->count, 200);
	assert_hist_sane(cmd, KVMM_HIST_CMD);
	/* all 251 by now; the DUMP reading them is counted after it */
	CU_ASSERT_EQUAL(dump_hist(ctx, &out, sizeof(out), 0), KVMM_HIST_LAST);
	CU_ASSERT_EQUAL(cmd->count, 251);
	assert_hist_sane(cmd, KVMM_HIST_CMD);
	CU_ASSERT(cmd->sum_ns <= wall);
	CHECK_OK(ctx);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
}

int register_dispatch_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_dispatch", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, ring_request_lifecycle_matches_direct_api);
	ADD_TEST(s, ring_exit_releases_sequences_and_pins);
	ADD_TEST(s, destroy_with_a_ring_attached_releases_it);
	ADD_TEST(s, ring_sequences_belong_to_their_ring);
	ADD_TEST(s, ring_stats_probe_dump_set);
	ADD_TEST(s, ring_full_cq_holds_back_until_reaped);
	ADD_TEST(s, ring_bound_to_a_namespace_keeps_to_it);
	ADD_TEST(s, ring_malformed_commands_fail_and_change_nothing);
	ADD_TEST(s, ring_extend_to_chains_match_extend_commit);
	ADD_TEST(s, ring_seq_row_is_the_ring_own_page_table_row);
	ADD_TEST(s, ring_stale_seq_id_fails_and_changes_nothing);
	ADD_TEST(s, ioctl_stale_seq_id_fails);
	ADD_TEST(s, ring_seq_generation_wraps_and_is_never_zero);
	ADD_TEST(s, dump_hist_counts_commands_and_tier_copies);
	ADD_TEST(s, dump_hist_times_each_command_of_a_batch);
	if (add_racy(s, "ring_tokens_rewritten_while_read_keep_tree_sound",
		     ring_tokens_rewritten_while_read_keep_tree_sound) ||
	    add_racy(s, "ring_output_rewritten_while_written_stays_in_bounds",
		     ring_output_rewritten_while_written_stays_in_bounds))
		return -1;
	return 0;
}
