// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/events_test.c - kvmm_events: cache events (kvmm/events.c)
 * and the EVENTS command.  The core is driven through the direct API
 * (insert, evict, demote to the host tier, promote back) and each step's
 * events are read back through kvmm_ioctl() and compared, type, tiers,
 * namespace and every page key, with keys computed here independently
 * from the tokens.  Then the ring: overflow and its counter, paging,
 * malformed commands, and a ring bound to a namespace.
 */
#include <errno.h>
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../helpers.h"
#include "../../kvmm/internal.h"

#define PS	4
#define OUT_BYTES	(64u << 10)

static uint64_t out[OUT_BYTES / 8];

/* The identities of pages [first, first + nr) of prompt @tok in @ns. */
static void ref_keys(uint32_t ns, const uint32_t *tok, uint32_t ps, uint32_t first,
		     uint32_t nr, struct kvmm_key *keys, struct kvmm_key *parent)
{
	XXH3_state_t st;
	XXH128_hash_t h = { 0, 0 };
	uint32_t i;

	XXH3_INITSTATE(&st);
	XXH3_128bits_reset_withSeed(&st, ns);
	for (i = 0; i < first + nr; i++) {
		if (i == first)
			*parent = (struct kvmm_key){ h.low64, h.high64 };
		XXH3_128bits_update(&st, tok + i * ps, ps * sizeof(*tok));
		h = XXH3_128bits_digest(&st);
		if (i >= first)
			keys[i - first] = (struct kvmm_key){ h.low64, h.high64 };
	}
}

static int set_events(struct kvmm_ctx *ctx, uint64_t bytes)
{
	struct kvmm_sqe sqe = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENTS, .arg2 = bytes };

	return kvmm_ioctl(ctx, &sqe, NULL, 0);
}

/* EVENTS from @cursor into out[] (kvmm_ioctl: buffer 0). */
static int read_events(struct kvmm_ctx *ctx, uint64_t cursor, uint32_t flags, uint32_t ns,
		       uint32_t len)
{
	struct kvmm_iovec iov = { out, sizeof(out) };
	struct kvmm_sqe sqe;

	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_events(&sqe, cursor, flags, ns, 0, 0, len);
	return kvmm_ioctl(ctx, &sqe, &iov, 1);
}

static const struct kvmm_events_hdr *hdr(void)
{
	return (const struct kvmm_events_hdr *)out;
}

/* The @i-th event of the last read. */
static const struct kvmm_cache_event *event(uint32_t i)
{
	const char *p = (const char *)(hdr() + 1);

	while (i--) {
		const struct kvmm_cache_event *e = (const void *)p;

		p += sizeof(*e) + e->pages * sizeof(struct kvmm_key);
	}
	return (const struct kvmm_cache_event *)p;
}

static const struct kvmm_key *event_keys(const struct kvmm_cache_event *e)
{
	return (const struct kvmm_key *)(e + 1);
}

/* Event @e is @type from @from to @to in @ns, pages [first, +nr) of @tok. */
static void assert_event(const struct kvmm_cache_event *e, uint64_t seq, uint8_t type,
			 uint8_t from, uint8_t to, uint32_t ns, const uint32_t *tok,
			 uint32_t ps, uint32_t first, uint32_t nr)
{
	struct kvmm_key keys[512], parent;

	CU_ASSERT_EQUAL(e->seq, seq);
	CU_ASSERT_EQUAL(e->type, type);
	CU_ASSERT_EQUAL(e->tier, from);
	CU_ASSERT_EQUAL(e->to, to);
	CU_ASSERT_EQUAL(e->ns, ns);
	CU_ASSERT_EQUAL_FATAL(e->pages, nr);
	CU_ASSERT(!e->resv0 && !e->resv1 && !e->resv2);
	ref_keys(ns, tok, ps, first, nr, keys, &parent);
	CU_ASSERT(memcmp(&e->parent, &parent, sizeof(parent)) == 0);
	CU_ASSERT(memcmp(event_keys(e), keys, nr * sizeof(keys[0])) == 0);
}

static void events_are_off_by_default(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	uint32_t tok[16];

	test_tokens(tok, 16, 1);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 16), 0);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void set_events_checks_the_size(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);

	CU_ASSERT_EQUAL(set_events(ctx, 1), -EINVAL);
	CU_ASSERT_EQUAL(set_events(ctx, KVMM_EVENTS_BUF_MIN - 1), -EINVAL);
	CU_ASSERT_EQUAL(set_events(ctx, (uint64_t)KVMM_EVENTS_BUF_MAX + 1), -EINVAL);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 0);
	CU_ASSERT_EQUAL(set_events(ctx, 10000), 0);	/* rounded up */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 16384);
	CU_ASSERT_EQUAL(set_events(ctx, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Insert, extend the prompt, evict everything: STORED, STORED, REMOVED x2. */
static void events_insert_and_evict(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	uint32_t tok[24];

	test_tokens(tok, 24, 2);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_BUF_MIN), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 16), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 24), 0);	/* 4 pages hit, 2 new */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 2);
	CU_ASSERT_EQUAL(hdr()->next, 2);
	CU_ASSERT_EQUAL(hdr()->lost, 0);
	assert_event(event(0), 0, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 3,
		     tok, PS, 0, 4);
	assert_event(event(1), 1, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 3,
		     tok, PS, 4, 2);
	CU_ASSERT_EQUAL(hdr()->bytes, 2 * 48 + 6 * 16);

	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 6);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 2, 0, 0, OUT_BYTES), 2);
	/* leaves first */
	assert_event(event(0), 2, KVMM_EVENT_REMOVED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 3,
		     tok, PS, 4, 2);
	assert_event(event(1), 3, KVMM_EVENT_REMOVED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 3,
		     tok, PS, 0, 4);
	/* caught up: nothing more, the cursor stays */
	CU_ASSERT_EQUAL(read_events(ctx, 4, 0, 0, OUT_BYTES), 0);
	CU_ASSERT_EQUAL(hdr()->next, 4);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS), 4);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Demoted to the host tier by reclaim, promoted back by PROMOTE. */
static void events_demote_and_promote(void)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[32], seq;

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(tok, 32, 3);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 32), 0);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 8), 8);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 8);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 2);
	assert_event(event(0), 0, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 0,
		     tok, PS, 0, 8);
	assert_event(event(1), 1, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 0,
		     tok, PS, 0, 8);

	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, 32), 0);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, seq, tok, 32), 32);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, hdr()->next, 0, 0, OUT_BYTES), 1);
	assert_event(event(0), 2, KVMM_EVENT_PROMOTED, KVMM_TIER_HOST, KVMM_TIER_DEVICE, 0,
		     tok, PS, 0, 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), 0);
	kvmm_destroy(ctx);
}

/* A node of more than KVMM_EVENT_MAX_PAGES pages is told in order, in parts. */
static void events_split_a_long_node(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 1024, 2, 700);
	static uint32_t tok[600];

	test_tokens(tok, 600, 4);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 9, tok, 600), 0);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 3);
	assert_event(event(0), 0, KVMM_EVENT_STORED, 0, 0, 9, tok, 1, 0, 256);
	assert_event(event(1), 1, KVMM_EVENT_STORED, 0, 0, 9, tok, 1, 256, 256);
	assert_event(event(2), 2, KVMM_EVENT_STORED, 0, 0, 9, tok, 1, 512, 88);
	/* a buffer that holds one part at a time pages through them */
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, KVMM_EVENTS_LEN_MIN), 1);
	CU_ASSERT_EQUAL(hdr()->next, 1);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, 32 + 48 + 255 * 16), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * The smallest buffer holds 512 slots, a one-page event 4 of them: more
 * events than that overwrite the oldest, which nobody read: dropped and
 * counted, and a reader from 0 is told the gap.  Events a reader got are
 * not counted when they go.
 */
static void events_overflow_drops_and_counts(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 512, 4, 64);
	uint32_t tok[4 * 300], i;
	uint64_t dropped;

	test_tokens(tok, 4 * 300, 5);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_BUF_MIN), 0);
	for (i = 0; i < 200; i++)	/* 200 one-page prompts */
		CU_ASSERT_EQUAL(test_cache(ctx, 0, tok + 4 * i, 4), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS), 200);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), 200 - 128);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 128);
	CU_ASSERT_EQUAL(hdr()->lost, 72);
	CU_ASSERT_EQUAL(hdr()->next, 200);
	assert_event(event(0), 72, KVMM_EVENT_STORED, 0, 0, 0, tok + 4 * 72, PS, 0, 1);
	/* read: overwriting them drops nothing more */
	dropped = test_stat(ctx, KVMM_STAT_EVENTS_DROPPED);
	for (i = 200; i < 300; i++)
		CU_ASSERT_EQUAL(test_cache(ctx, 0, tok + 4 * i, 4), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), dropped);
	/* a cursor past the newest event is refused, and nothing is written */
	out[0] = 0xa5a5a5a5a5a5a5a5ull;
	CU_ASSERT_EQUAL(read_events(ctx, 301, 0, 0, OUT_BYTES), -EINVAL);
	CU_ASSERT_EQUAL(out[0], 0xa5a5a5a5a5a5a5a5ull);
	/* a new size keeps the numbers; what the old buffer held is gone */
	CU_ASSERT_EQUAL(set_events(ctx, 1u << 16), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), dropped + 100);
	CU_ASSERT_EQUAL(read_events(ctx, 200, 0, 0, OUT_BYTES), 0);
	CU_ASSERT_EQUAL(hdr()->lost, 100);
	CU_ASSERT_EQUAL(hdr()->next, 300);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Malformed EVENTS commands fail and change nothing. */
static void events_bad_commands(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	struct kvmm_iovec iov = { out, sizeof(out) };
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	static const struct { struct kvmm_sqe sqe; int expect; } bad[] = {
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .arg = 4 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .arg = KVMM_EVENTS_TOKENS }, -EOPNOTSUPP },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .ns = 3 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .seq = 1 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .resv0 = 1 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .resv = { 0, 1 } }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .flags = 1 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 16 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 128 }, -EINVAL },	/* first event is 112 */
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .arg2 = 2 }, -EINVAL },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .off = 4 }, -EFAULT },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .off = OUT_BYTES - 8 }, -EFAULT },
		{ { .opcode = KVMM_OP_EVENTS, .len = 4096, .buf = 1 }, -EFAULT },
		{ { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENTS, .arg2 = 100 }, -EINVAL },
		/* too small a buffer to keep tokens in */
		{ { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS, .arg2 = 1 }, -EINVAL },
		{ { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS, .arg2 = 2 }, -EINVAL },
		/* no such setting */
		{ { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS, .arg2 = 3 }, -EINVAL },
	};
	uint32_t tok[16], i;

	test_tokens(tok, 16, 6);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_BUF_MIN), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 16), 0);	/* one event, 4 pages */
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		test_stats(ctx, before);
		memset(out, 0xa5, 256);
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &bad[i].sqe, &iov, 1), bad[i].expect);
		CU_ASSERT_EQUAL(out[0], 0xa5a5a5a5a5a5a5a5ull);
		test_stats(ctx, after);
		ASSERT_STATS_SAME(before, after);
	}
	/* a good one, then: the cursor two is now the end */
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, 4096), 1);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A ring bound to namespace 5 sees namespace 5's events and no other. */
static void events_bound_ring_sees_its_namespace_only(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	struct kvmm_ring_params rp = { .sq_entries = 4, .flags = KVMM_RING_F_NS, .ns = 5 };
	struct kvmm_ring ring;
	struct kvmm_iovec iov = { out, sizeof(out) };
	uint32_t a[8], b[12], cflags;

	test_tokens(a, 8, 7);
	test_tokens(b, 12, 8);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_BUF_MIN), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	/* buffer 0 is the ring's own data area: ours is 1 */
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&ring, &iov, 1), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 4, a, 8), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 5, b, 12), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 6, a, 8), 0);
	/* another namespace: refused, as every command of a bound ring */
	kvmm_prep_events(TEST_SQE(&ring), 0, KVMM_EVENTS_NS, 4, 1, 0, 4096);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	/* without the flag, or with it: its own only */
	kvmm_prep_events(TEST_SQE(&ring), 0, 0, 5, 1, 0, 4096);
	CU_ASSERT_EQUAL(test_ring1(&ring, &cflags), 1);
	assert_event(event(0), 1, KVMM_EVENT_STORED, 0, 0, 5, b, PS, 0, 3);
	CU_ASSERT_EQUAL(hdr()->next, 3);
	CU_ASSERT_FALSE(cflags & KVMM_CQE_F_MORE);
	kvmm_prep_events(TEST_SQE(&ring), 0, KVMM_EVENTS_NS, 5, 1, 0, 4096);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 1);
	CU_ASSERT_EQUAL(event(0)->ns, 5);
	/* the operator filters by hand, or sees all */
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_NS, 6, 4096), 1);
	assert_event(event(0), 2, KVMM_EVENT_STORED, 0, 0, 6, a, PS, 0, 2);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, 4096), 3);
	/* a page at a time, with F_MORE while more wait */
	kvmm_prep_events(TEST_SQE(&ring), 0, 0, 5, 1, 0, 32 + 48 + 3 * 16);
	CU_ASSERT_EQUAL(test_ring1(&ring, &cflags), 1);
	CU_ASSERT_EQUAL(hdr()->next, 3);
	kvmm_ring_exit(&ring);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, 32 + 48 + 2 * 16), 1);
	CU_ASSERT_EQUAL(hdr()->next, 1);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static int set_event_tokens(struct kvmm_ctx *ctx, uint64_t on)
{
	struct kvmm_sqe sqe = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS, .arg2 = on };

	return kvmm_ioctl(ctx, &sqe, NULL, 0);
}

/* The @i-th event of the last read made with KVMM_EVENTS_TOKENS at @ps. */
/*
 * The @i-th event of the last read with token ids (page size @ps) after
 * every event's keys, or after STORED events' only (@stored_only).
 */
static const struct kvmm_cache_event *event_tok_of(uint32_t i, uint32_t ps, bool stored_only)
{
	const char *p = (const char *)(hdr() + 1);

	while (i--) {
		const struct kvmm_cache_event *e = (const void *)p;
		uint64_t tok_bytes = ((uint64_t)e->pages * ps * 4 + 15) / 16 * 16;

		if (stored_only && e->type != KVMM_EVENT_STORED)
			tok_bytes = 0;
		p += sizeof(*e) + e->pages * sizeof(struct kvmm_key) + tok_bytes;
	}
	return (const struct kvmm_cache_event *)p;
}

static const struct kvmm_cache_event *event_tok(uint32_t i, uint32_t ps)
{
	return event_tok_of(i, ps, false);
}

/* Event @e carries tokens [first, +nr) pages of @tok, zero-padded to 16 bytes. */
static void assert_event_tokens(const struct kvmm_cache_event *e, const uint32_t *tok,
				uint32_t ps, uint32_t first, uint32_t nr)
{
	const uint32_t *t = (const uint32_t *)(event_keys(e) + e->pages);
	uint32_t n = nr * ps, i;

	CU_ASSERT_EQUAL_FATAL(e->pages, nr);
	CU_ASSERT(memcmp(t, tok + first * ps, n * sizeof(*t)) == 0);
	for (i = n; i % 4; i++)
		CU_ASSERT_EQUAL(t[i], 0);
}

/*
 * With KVMM_SET_EVENT_TOKENS each event keeps its pages' token ids: a
 * larger minimum buffer, events cut at KVMM_EVENT_MAX_TOKENS, the tokens
 * read with KVMM_EVENTS_TOKENS and left out without it.
 */
static void events_carry_tokens(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	uint32_t tok[24];

	test_tokens(tok, 24, 11);
	CU_ASSERT_EQUAL(set_event_tokens(ctx, 1), 0);		/* off: just the setting */
	CU_ASSERT_EQUAL(set_events(ctx, KVMM_EVENTS_BUF_MIN), -EINVAL);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 0);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_TOKENS_BUF_MIN), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 22), 0);	/* 4 pages hit, 1 new */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), 2);
	assert_event(event_tok(0, PS), 0, KVMM_EVENT_STORED, 0, 0, 3, tok, PS, 0, 4);
	assert_event_tokens(event_tok(0, PS), tok, PS, 0, 4);
	assert_event(event_tok(1, PS), 1, KVMM_EVENT_STORED, 0, 0, 3, tok, PS, 4, 1);
	assert_event_tokens(event_tok(1, PS), tok, PS, 4, 1);
	CU_ASSERT_EQUAL(hdr()->bytes, 2 * 48 + 5 * 16 + 5 * 16);
	/* without the flag: the keys only, as ever */
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 2);
	CU_ASSERT_EQUAL(hdr()->bytes, 2 * 48 + 5 * 16);
	assert_event(event(1), 1, KVMM_EVENT_STORED, 0, 0, 3, tok, PS, 4, 1);
	/* removals carry them too; a bound filter still applies */
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 5);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 2, KVMM_EVENTS_TOKENS | KVMM_EVENTS_NS, 3, OUT_BYTES), 2);
	assert_event(event_tok(1, PS), 3, KVMM_EVENT_REMOVED, 0, 0, 3, tok, PS, 0, 4);
	assert_event_tokens(event_tok(1, PS), tok, PS, 0, 4);
	CU_ASSERT_EQUAL(read_events(ctx, 2, KVMM_EVENTS_TOKENS | KVMM_EVENTS_NS, 4, OUT_BYTES), 0);
	/* turning them off empties the buffer; the numbers go on */
	CU_ASSERT_EQUAL(set_event_tokens(ctx, 0), 0);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 0);
	CU_ASSERT_EQUAL(hdr()->lost, 4);
	CU_ASSERT_EQUAL(hdr()->next, 4);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* With tokens kept, a node is cut every KVMM_EVENT_MAX_TOKENS tokens. */
static void events_with_tokens_split_at_max_tokens(void)
{
	struct kvmm_ctx *ctx = test_ctx(16, 256, 2, 2048);
	static uint32_t tok[1600];
	uint32_t per = KVMM_EVENT_MAX_TOKENS / 16;

	test_tokens(tok, 1600, 12);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);
	CU_ASSERT_EQUAL_FATAL(set_event_tokens(ctx, 1), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_BYTES), 1u << 16);
	CU_ASSERT_EQUAL(test_cache(ctx, 1, tok, 1600), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), 2);
	assert_event(event_tok(0, 16), 0, KVMM_EVENT_STORED, 0, 0, 1, tok, 16, 0, per);
	assert_event_tokens(event_tok(0, 16), tok, 16, 0, per);
	assert_event(event_tok(1, 16), 1, KVMM_EVENT_STORED, 0, 0, 1, tok, 16, per, 100 - per);
	assert_event_tokens(event_tok(1, 16), tok, 16, per, 100 - per);
	/* paging: room for the first event and no more, then 16 bytes short */
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0,
				    32 + 48 + per * 16 + per * 16 * 4), 1);
	CU_ASSERT_EQUAL(hdr()->next, 1);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0,
				    32 + 48 + per * 16 + per * 16 * 4 - 16), -EINVAL);
	CU_ASSERT(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, KVMM_EVENTS_TOKENS_LEN_MIN) >= 1);
	kvmm_destroy(ctx);
}

static const struct kvmm_cache_event *event_stored_tok(uint32_t i, uint32_t ps)
{
	return event_tok_of(i, ps, true);
}

/*
 * KVMM_EVENT_TOKENS_STORED: STORED events carry their token ids, the
 * others (a demotion, a promotion, a removal) their keys alone, with the
 * flag or without; a change of setting empties the buffer.
 */
static void events_carry_stored_tokens_only(void)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[24];

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(tok, 24, 12);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_TOKENS_BUF_MIN), 0);
	CU_ASSERT_EQUAL(set_event_tokens(ctx, KVMM_EVENT_TOKENS_STORED), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 3, tok, 20), 0);	/* 4 pages hit, 1 new */
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), 1);		/* the leaf, demoted */
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 4);	/* device pages; the host's go too */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), 5);
	assert_event(event_stored_tok(0, PS), 0, KVMM_EVENT_STORED, 0, 0, 3, tok, PS, 0, 4);
	assert_event_tokens(event_stored_tok(0, PS), tok, PS, 0, 4);
	assert_event(event_stored_tok(1, PS), 1, KVMM_EVENT_STORED, 0, 0, 3, tok, PS, 4, 1);
	assert_event_tokens(event_stored_tok(1, PS), tok, PS, 4, 1);
	assert_event(event_stored_tok(2, PS), 2, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE,
		     KVMM_TIER_HOST, 3, tok, PS, 4, 1);
	assert_event(event_stored_tok(3, PS), 3, KVMM_EVENT_REMOVED, KVMM_TIER_HOST,
		     KVMM_TIER_HOST, 3, tok, PS, 4, 1);
	assert_event(event_stored_tok(4, PS), 4, KVMM_EVENT_REMOVED, 0, 0, 3, tok, PS, 0, 4);
	/* headers and keys of five events, tokens of the two stored */
	CU_ASSERT_EQUAL(hdr()->bytes, 5 * 48 + 11 * 16 + (4 + 1) * 16);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 5);
	CU_ASSERT_EQUAL(hdr()->bytes, 5 * 48 + 11 * 16);
	/* every event's again: the buffer starts over */
	CU_ASSERT_EQUAL(set_event_tokens(ctx, 1), 0);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), 0);
	CU_ASSERT_EQUAL(hdr()->lost, 5);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Keeping tokens rebuilds the buffer: a failed allocation changes nothing. */
static void set_event_tokens_fails_cleanly(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_params p = test_params(PS, 64, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[8];

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(tok, 8, 13);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, KVMM_EVENTS_TOKENS_BUF_MIN), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 8), 0);
	ta.fail_at = ta.calls + 1;
	CU_ASSERT_EQUAL(set_event_tokens(ctx, 1), -ENOMEM);
	ta.fail_at = 0;
	CHECK_OK(ctx);
	/* still the old buffer, its event and no tokens */
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 1);
	CU_ASSERT_EQUAL(set_event_tokens(ctx, 1), 0);
	CU_ASSERT_EQUAL(read_events(ctx, 0, KVMM_EVENTS_TOKENS, 0, OUT_BYTES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
}

/*
 * Events about a child of the node named last, or of its parent, start
 * from the hash state kept for it: still the keys of the whole prefix
 * after that node was split (it keeps the tail of its edge, so its end
 * is where it was), after it was freed and its struct reused for other
 * tokens, and in another namespace with the same tokens.
 */
static void events_kept_prefix_state_names_pages_right(void)
{
	struct kvmm_ctx *ctx = test_ctx(PS, 64, 4, 64);
	uint32_t a[24], b[24];
	uint32_t i;

	test_tokens(a, 24, 21);
	test_tokens(b, 24, 22);
	memcpy(b, a, 2 * PS * sizeof(*a));		/* b leaves a after two pages */
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 5, a, 16), 0);	/* node X: pages 0-3 */
	CU_ASSERT_EQUAL(test_cache(ctx, 5, a, 20), 0);	/* a child of X */
	CU_ASSERT_EQUAL(test_cache(ctx, 5, b, 16), 0);	/* splits X at page 2 */
	CU_ASSERT_EQUAL(test_cache(ctx, 5, a, 24), 0);	/* a child of X's child */
	CU_ASSERT_EQUAL(test_cache(ctx, 5, b, 24), 0);	/* a child of b's leaf */
	CU_ASSERT_EQUAL(test_cache(ctx, 6, a, 20), 0);	/* the same tokens, namespace 6 */
	CU_ASSERT_EQUAL(test_cache(ctx, 6, a, 24), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 0, 0, 0, OUT_BYTES), 7);
	assert_event(event(0), 0, KVMM_EVENT_STORED, 0, 0, 5, a, PS, 0, 4);
	assert_event(event(1), 1, KVMM_EVENT_STORED, 0, 0, 5, a, PS, 4, 1);
	assert_event(event(2), 2, KVMM_EVENT_STORED, 0, 0, 5, b, PS, 2, 2);
	assert_event(event(3), 3, KVMM_EVENT_STORED, 0, 0, 5, a, PS, 5, 1);
	assert_event(event(4), 4, KVMM_EVENT_STORED, 0, 0, 5, b, PS, 4, 2);
	assert_event(event(5), 5, KVMM_EVENT_STORED, 0, 0, 6, a, PS, 0, 5);
	assert_event(event(6), 6, KVMM_EVENT_STORED, 0, 0, 6, a, PS, 5, 1);

	/* everything freed; new nodes (the same structs) hold other tokens */
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 16);	/* eight nodes, eight events */
	CHECK_OK(ctx);
	for (i = 0; i < 24; i++)
		a[i] ^= 0x5a5a;
	CU_ASSERT_EQUAL(test_cache(ctx, 5, a, 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 5, a, 24), 0);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(read_events(ctx, 15, 0, 0, OUT_BYTES), 2);
	assert_event(event(0), 15, KVMM_EVENT_STORED, 0, 0, 5, a, PS, 0, 4);
	assert_event(event(1), 16, KVMM_EVENT_STORED, 0, 0, 5, a, PS, 4, 2);
	kvmm_destroy(ctx);
}

/* ---- what a node keeps: its pages' identities and where hashing stood ---- */

#define NPROMPTS	3

/* Identities of every page of each prompt (pages of @ps tokens, @n each). */
struct ref_set {
	struct kvmm_key key[NPROMPTS][16];
	uint32_t pages[NPROMPTS];
};

static void ref_set_init(struct ref_set *r, uint32_t ns, uint32_t *const *tok, uint32_t n)
{
	struct kvmm_key parent;
	uint32_t i;

	for (i = 0; i < NPROMPTS; i++) {
		r->pages[i] = n / PS;
		ref_keys(ns, tok[i], PS, 0, n / PS, r->key[i], &parent);
	}
}

/*
 * Event @e names pages of one of the prompts, in order, each with its
 * identity, chained from the page before its first (none for a prompt's
 * first page).
 */
static void assert_event_known(const struct ref_set *r, const struct kvmm_cache_event *e)
{
	const struct kvmm_key *k = event_keys(e);
	uint32_t i, j, p;

	for (p = 0; p < NPROMPTS; p++)
		for (i = 0; i + e->pages <= r->pages[p]; i++) {
			const struct kvmm_key none = { 0, 0 }, *before = i ? &r->key[p][i - 1] : &none;

			if (memcmp(&k[0], &r->key[p][i], sizeof(k[0])) ||
			    memcmp(&e->parent, before, sizeof(*before)))
				continue;
			for (j = 0; j < e->pages; j++)
				if (memcmp(&k[j], &r->key[p][i + j], sizeof(k[j])))
					break;
			if (j == e->pages)
				return;
		}
	CU_FAIL("an event names pages that are no prompt's");
}

/* Every event since @cursor names its pages right; return: the new cursor. */
static uint64_t assert_events_known(struct kvmm_ctx *ctx, const struct ref_set *r,
				    uint64_t cursor, uint32_t *nr)
{
	int n = read_events(ctx, cursor, 0, 0, OUT_BYTES), i;

	CU_ASSERT_FATAL(n >= 0);
	CU_ASSERT_EQUAL(hdr()->lost, 0);
	for (i = 0; i < n; i++)
		assert_event_known(r, event((uint32_t)i));
	*nr = (uint32_t)n;
	return hdr()->next;
}

/* Nodes (roots aside) that keep identities; @all: out, all nodes. */
static uint32_t nodes_with_ids(struct kvmm_ctx *ctx, uint32_t *all)
{
	struct kvmm_list *pos;
	uint32_t n = 0;

	*all = 0;
	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling), *node;

		for (node = kvmm_tree_next(root, root); node; node = kvmm_tree_next(root, node)) {
			(*all)++;
			n += node->ids != NULL;
		}
	}
	return n;
}

/*
 * The first event about a node keeps its pages' identities in it and
 * where hashing stood at its end: a split shares them out (the new
 * parent's end hashed on from its own parent's), a child is named from
 * its parent's end however many other nodes were named since, and
 * demotion, promotion and eviction tell the kept identities.
 * kvmm_check() hashes every kept one again after each step.
 */
static void events_nodes_keep_page_identities(void)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	static uint32_t a[32], b[32], c[32];
	uint32_t *prompts[NPROMPTS] = { a, b, c }, seq, all, n;
	struct kvmm_ctx *ctx = NULL;
	struct ref_set r;
	uint64_t cur = 0;

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(a, 32, 31);
	test_tokens(b, 32, 32);
	test_tokens(c, 32, 33);
	memcpy(b, a, 2 * PS * sizeof(*a));		/* b and c leave a after two pages */
	memcpy(c, a, 2 * PS * sizeof(*a));
	ref_set_init(&r, 0, prompts, 32);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);

	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 16), 0);	/* X: pages 0-3 */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 24), 0);	/* Y under X */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 2);
	CU_ASSERT_EQUAL(all, 2);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, b, 16), 0);	/* X split at page 2 */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 4);
	CU_ASSERT_EQUAL(all, 4);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, c, 12), 0);	/* under the split's head */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, b, 28), 0);	/* under b's leaf, c named since */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 32), 0);	/* under Y */
	CHECK_OK(ctx);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT_EQUAL(n, 6);

	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 12), 12);	/* demoted, leaves first */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 12);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT(n >= 2);
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT(kvmm_seq_match(ctx, seq, a, 32) >= 0);
	CU_ASSERT(kvmm_seq_promote(ctx, seq, a, 32) > 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	CHECK_OK(ctx);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT(n >= 1);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx) > 0, 1);
	CHECK_OK(ctx);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 0);
	CU_ASSERT_EQUAL(all, 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), 0);

	/* events off: no node keeps anything (nothing would keep it right) */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 16), 0);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 24), 0);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 2);
	CU_ASSERT_EQUAL(set_events(ctx, 0), 0);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 0);
	CU_ASSERT_EQUAL(all, 2);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * A node that gets no memory for its identities is named from its
 * prefix, in the buffer's scratch, and keeps nothing; a split that gets
 * none for either half leaves both keeping nothing.  Every event is
 * still right and nothing leaks.
 */
static void events_node_identities_without_memory(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_params p = test_params(PS, 64, 4, 64);
	static uint32_t a[32], b[32], c[32];
	uint32_t *prompts[NPROMPTS] = { a, b, c }, all, n;
	struct kvmm_ctx *ctx = NULL;
	struct ref_set r;
	uint64_t cur = 0;

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(a, 32, 41);
	test_tokens(b, 32, 42);
	test_tokens(c, 32, 43);
	memcpy(b, a, 2 * PS * sizeof(*a));
	ref_set_init(&r, 0, prompts, 32);
	CU_ASSERT_EQUAL_FATAL(set_events(ctx, 1u << 16), 0);

	ta.fail_size = kvmm_node_ids_bytes(ctx, 4 * PS);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 16), 0);	/* X, 4 pages: keeps nothing */
	ta.fail_size = 0;
	CU_ASSERT_EQUAL(test_cache(ctx, 0, c, 16), 0);	/* another prompt in between */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 24), 0);	/* under X: from the root */
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 2);
	CU_ASSERT_EQUAL(all, 3);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT_EQUAL(n, 3);

	/* X named now (an eviction names it): it keeps them; then a split fails */
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 10);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, a, 16), 0);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 1);
	ta.fail_size = kvmm_node_ids_bytes(ctx, 2 * PS);	/* both halves, and b's leaf */
	CU_ASSERT_EQUAL(test_cache(ctx, 0, b, 16), 0);
	ta.fail_size = 0;
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(nodes_with_ids(ctx, &all), 0);
	CU_ASSERT_EQUAL(all, 3);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, b, 24), 0);	/* under b's leaf */
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), 8);
	CHECK_OK(ctx);
	cur = assert_events_known(ctx, &r, cur, &n);
	CU_ASSERT_EQUAL(n, 7);	/* STORED X, b's leaf and its child; REMOVED x4 */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_EVENTS_DROPPED), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
}

int register_events_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_events", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, events_are_off_by_default);
	ADD_TEST(s, set_events_checks_the_size);
	ADD_TEST(s, events_insert_and_evict);
	ADD_TEST(s, events_demote_and_promote);
	ADD_TEST(s, events_split_a_long_node);
	ADD_TEST(s, events_overflow_drops_and_counts);
	ADD_TEST(s, events_bad_commands);
	ADD_TEST(s, events_bound_ring_sees_its_namespace_only);
	ADD_TEST(s, events_carry_tokens);
	ADD_TEST(s, events_with_tokens_split_at_max_tokens);
	ADD_TEST(s, events_carry_stored_tokens_only);
	ADD_TEST(s, set_event_tokens_fails_cleanly);
	ADD_TEST(s, events_kept_prefix_state_names_pages_right);
	ADD_TEST(s, events_nodes_keep_page_identities);
	ADD_TEST(s, events_node_identities_without_memory);
	return 0;
}
