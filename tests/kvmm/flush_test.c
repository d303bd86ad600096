// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/flush_test.c - kvmm_flush() and warm restart: a chat
 * workload (conversations sharing a system prompt, a small device pool,
 * host and NVMe tiers under it) is flushed and the context destroyed; a
 * context on the same file serves it again, every byte checked against
 * the stamps the KV was computed with.  Also: a flush bounded by the
 * tier's room keeps the ancestors, faults on its writes are misses and
 * never wrong KV, and the calls it refuses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../helpers.h"

#define PS		1	/* SGLang's page size: the hardest case */
#define NCONV		40	/* conversations */
#define SYS		50	/* tokens of the system prompt they share */
#define TURN		12	/* tokens a turn adds */
#define TURNS		3
#define CHAT_MAX	(SYS + TURNS * TURN)

/* Conversation @c's prompt at turn @t (1 .. TURNS): the system prompt, then its turns. */
static uint32_t chat_prompt(uint32_t *tok, uint32_t c, uint32_t t)
{
	uint32_t i;

	test_tokens(tok, SYS, 7);
	for (i = 0; i < t; i++)
		test_tokens(tok + SYS + i * TURN, TURN, 1000 + c * 16 + i);
	return SYS + t * TURN;
}

static struct kvmm_params chat_params(uint32_t host, uint32_t nvme, const char *path,
				      struct kvmm_nvme_arg *arg)
{
	struct kvmm_params p = test_params(PS, 512, 8, 256);

	p.host_pages = host;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = nvme;
	p.nvme_path = path;
	p.nvme_arg = arg;
	return p;
}

static struct kvmm_ctx *chat_ctx(uint32_t host, uint32_t nvme, const char *path,
				 struct kvmm_nvme_arg *arg)
{
	struct kvmm_params p = chat_params(host, nvme, path, arg);
	struct kvmm_ctx *ctx = NULL;

	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

/*
 * An engine loop: every conversation takes its turns, interleaved; with
 * @paced, the I/O worker keeps up (kvmm_sync() after every request), as
 * it does when requests take the time a model's forward pass takes.
 */
static void chat_run_paced(struct kvmm_ctx *ctx, bool paced)
{
	uint32_t tok[CHAT_MAX], c, t, n;

	for (t = 1; t <= TURNS; t++) {
		for (c = 0; c < NCONV; c++) {
			n = chat_prompt(tok, c, t);
			CU_ASSERT(test_kv_serve(ctx, tok, n, true) >= 0);
			if (paced)
				CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		}
		CHECK_OK(ctx);
	}
}

static void chat_run(struct kvmm_ctx *ctx)
{
	chat_run_paced(ctx, false);
}

/* Tokens of every conversation's last prompt cached on any tier. */
static uint64_t chat_cached(struct kvmm_ctx *ctx)
{
	struct kvmm_tier_hits hits;
	uint32_t tok[CHAT_MAX], c, n;
	uint64_t sum = 0;

	for (c = 0; c < NCONV; c++) {
		n = chat_prompt(tok, c, TURNS);
		sum += (uint32_t)kvmm_prefix_tiers(ctx, 0, tok, n, &hits);
	}
	return sum;
}

/* Pages the tree holds on every tier. */
static uint64_t tree_pages(struct kvmm_ctx *ctx)
{
	return test_stat(ctx, KVMM_STAT_PAGES_CACHED) + test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED) +
	       test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
}

/*
 * Every conversation's last prompt again, promoted and checked byte for
 * byte (test_kv_serve()); Return: the tokens served from the cache.
 */
static uint64_t chat_serve(struct kvmm_ctx *ctx)
{
	uint32_t tok[CHAT_MAX], c, n;
	uint64_t sum = 0;
	int m;

	for (c = 0; c < NCONV; c++) {
		n = chat_prompt(tok, c, TURNS);
		m = test_kv_serve(ctx, tok, n, true);
		CU_ASSERT(m >= 0);
		sum += m > 0 ? (uint32_t)m : 0;
	}
	CHECK_OK(ctx);
	return sum;
}

/*
 * The warm restart: the system prompt is hot on the device at shutdown,
 * most conversations below it on the host and NVMe.  After a flush, the
 * restarted context has (nearly) every page and serves every
 * conversation whole; without one it would find almost nothing below the
 * prompt the file never held.
 */
static void test_flush_chat_restart(void)
{
	const char *path = test_tmp_file("flush-chat");
	struct kvmm_ctx *ctx = chat_ctx(256, 4096, path, NULL);
	struct kvmm_flush_info info;
	uint64_t before, pages, served;
	uint32_t tok[CHAT_MAX];
	int64_t ret;

	chat_run(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CHECK_OK(ctx);
	test_tokens(tok, SYS, 7);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, SYS), SYS);	/* on the device */
	before = chat_cached(ctx);
	pages = tree_pages(ctx);
	CU_ASSERT(before >= NCONV * CHAT_MAX / 2);
	ret = kvmm_flush(ctx, 0, &info);
	CU_ASSERT(ret > 0);
	CU_ASSERT_EQUAL((uint64_t)ret, info.pages);
	CU_ASSERT_EQUAL(info.left, 0);
	CU_ASSERT_EQUAL(info.pages, pages - test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED));
	CU_ASSERT_EQUAL(tree_pages(ctx), pages);	/* the tree did not change */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	ctx = chat_ctx(256, 4096, path, NULL);
	CHECK_OK(ctx);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) * 100 >= pages * 95);
	CU_ASSERT(chat_cached(ctx) * 100 >= before * 95);
	served = chat_serve(ctx);
	CU_ASSERT(served * 100 >= before * 95);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A tier with room for a fraction of the cache: the flush writes
 * parents first, so what is left out is deep, and the shared prompt
 * comes back with as much below it as fits.
 */
static void test_flush_bounded_by_room(void)
{
	const char *path = test_tmp_file("flush-room");
	struct kvmm_ctx *ctx = chat_ctx(256, 256, path, NULL);
	struct kvmm_flush_info info;
	uint32_t tok[CHAT_MAX];

	chat_run(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT(kvmm_flush(ctx, 0, &info) > 0);
	CU_ASSERT(info.left > 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	ctx = chat_ctx(256, 256, path, NULL);
	CHECK_OK(ctx);
	test_tokens(tok, SYS, 7);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, SYS), 0);	/* not on the device ... */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, SYS, NULL), SYS);	/* ... but found */
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) >= 256 * 9 / 10);
	CU_ASSERT(chat_serve(ctx) >= 256 * 9 / 10);
	kvmm_destroy(ctx);
	unlink(path);
}

/* A write that takes 5 ms: longer than the flush below may take. */
static void slow_write(void *arg, uint32_t site, uint32_t chan)
{
	const struct timespec ts = { .tv_nsec = 5000000 };

	(void)arg;
	if (site == KVMM_NVME_SITE_WRITE && chan == 0)
		nanosleep(&ts, NULL);
}

/*
 * A flush out of time stops after the batch in hand: what it wrote is
 * the top of the tree (the shared prompt first), the rest is counted as
 * left out.
 */
static void test_flush_time_limit(void)
{
	const char *path = test_tmp_file("flush-time");
	struct kvmm_nvme_arg arg = { 0 };
	struct kvmm_ctx *ctx = chat_ctx(256, 4096, path, &arg);
	struct kvmm_flush_info info;
	uint32_t tok[CHAT_MAX];
	uint64_t want;

	chat_run(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	want = tree_pages(ctx) - test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	arg.latch = slow_write;
	CU_ASSERT(kvmm_flush(ctx, 1, &info) >= 0);
	arg.latch = NULL;
	CU_ASSERT(info.left > 0);
	CU_ASSERT(info.pages <= 256);		/* one batch at most */
	CU_ASSERT_EQUAL(info.pages + info.left, want);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	ctx = chat_ctx(256, 4096, path, NULL);
	test_tokens(tok, SYS, 7);
	if (info.pages >= SYS)			/* parents first: the prompt went */
		CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok, SYS, NULL), SYS);
	chat_serve(ctx);			/* checks every byte it serves */
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Write errors and bits flipped on the way to the file: the pages of a
 * failed write are counted as left out, a flipped page fails its
 * checksum after the restart, and every byte served is right.
 */
static void test_flush_faults(void)
{
	static const struct kvmm_nvme_arg faults[] = {
		{ .fault = -EIO, .fault_every = 3, .fault_sites = KVMM_NVME_SITE_WRITE },
		{ .flip_every = 7 },
		{ .tear_every = 5 },
	};
	uint32_t i;

	for (i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		const char *path = test_tmp_file("flush-faults");
		struct kvmm_nvme_arg arg = { 0 };
		struct kvmm_ctx *ctx = chat_ctx(256, 4096, path, &arg);
		struct kvmm_flush_info info;

		chat_run(ctx);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		arg = faults[i];
		CU_ASSERT(kvmm_flush(ctx, 0, &info) >= 0);
		if (faults[i].fault)
			CU_ASSERT(info.left > 0);
		CHECK_OK(ctx);
		arg = (struct kvmm_nvme_arg){ 0 };
		kvmm_destroy(ctx);

		ctx = chat_ctx(256, 4096, path, NULL);
		CHECK_OK(ctx);
		chat_serve(ctx);	/* checks every byte it serves */
		kvmm_destroy(ctx);
		unlink(path);
	}
}

/*
 * A crash: nothing flushed, the system prompt was only ever on the
 * device, the conversations below it went down to NVMe.  The restart
 * keeps them aside; once a request computes the prompt again, the next
 * MATCH of each conversation finds its pages below it, every byte right.
 */
static void test_crash_orphans_adopted_below_hot_prefix(void)
{
	const char *path = test_tmp_file("flush-crash");
	struct kvmm_ctx *ctx = chat_ctx(256, 4096, path, NULL);
	uint64_t on_file, waiting;
	uint32_t tok[CHAT_MAX];

	chat_run_paced(ctx, true);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	test_tokens(tok, SYS, 7);
	CU_ASSERT_EQUAL(kvmm_prefix_lookup(ctx, 0, tok, SYS), SYS);
	on_file = test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
	CU_ASSERT(on_file >= 100);
	kvmm_destroy(ctx);		/* writes nothing more: the file a crash leaves */

	ctx = chat_ctx(256, 4096, path, NULL);
	CHECK_OK(ctx);
	waiting = test_stat(ctx, KVMM_STAT_ORPHAN_PAGES);
	CU_ASSERT(waiting + test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED) >= on_file);
	CU_ASSERT(waiting * 100 >= on_file * 90);	/* nearly all wait for the prompt */
	chat_serve(ctx);		/* checks every byte it serves */
	CU_ASSERT(test_stat(ctx, KVMM_STAT_ORPHAN_ADOPTED) * 100 >= waiting * 90);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES) * 100 >= waiting * 90);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * The file a crash leaves at @path: the chat served with the I/O worker
 * keeping up, then the context destroyed without a flush.
 */
static void crash_file(const char *path)
{
	struct kvmm_ctx *ctx = chat_ctx(256, 4096, path, NULL);

	chat_run_paced(ctx, true);
	kvmm_destroy(ctx);
}

/*
 * Orphans whose slots the tier wrote over before their prefix came back:
 * a slot in use is skipped; one written and freed again holds another
 * page, which the promotion's identity check makes a miss.  Never a
 * wrong byte.
 */
static void test_crash_orphans_slots_reused(void)
{
	const char *path = test_tmp_file("flush-reused");
	struct kvmm_params p = chat_params(256, 4096, path, NULL);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[CHAT_MAX], c;

	crash_file(path);
	p.host_wmark_low = p.host_wmark_high = 256;	/* the host tier stages NVMe */
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_ORPHAN_PAGES) > 0);
	/* other prompts go down to NVMe and away again, through the free slots */
	for (c = 0; c < 60; c++) {
		test_tokens(tok, CHAT_MAX, 50000 + c);
		CU_ASSERT(test_kv_serve(ctx, tok, CHAT_MAX, true) >= 0);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	}
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_DEMOTE_PAGES) > 0);
	CU_ASSERT(kvmm_drop_caches(ctx) >= 0);
	CHECK_OK(ctx);
	chat_serve(ctx);		/* checks every byte it serves */
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL) > 0);	/* a reused slot: a miss */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Every allocation of a restart that finds orphans failed in turn: the
 * context is refused (-ENOMEM) or starts, without the orphans it had no
 * memory for (said in the log), and nothing leaks either way.
 */
static void test_crash_orphans_alloc_faults(void)
{
	const char *path = test_tmp_file("flush-orphan-alloc");
	struct kvmm_params p = chat_params(256, 4096, path, NULL);
	struct kvmm_ctx *ctx;
	struct test_alloc ta;
	struct test_log log;
	bool kept_none = false;
	unsigned long at;
	int ret;

	crash_file(path);
	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	p.log = test_log_fn;
	p.log_priv = &log;
	for (at = 1;; at++) {
		ta = (struct test_alloc){ .fail_at = at };
		log = (struct test_log){ 0 };
		ctx = NULL;
		ret = kvmm_create(&p, &ctx);
		if (ret) {
			CU_ASSERT_EQUAL(ret, -ENOMEM);
			CU_ASSERT_EQUAL(ta.live_blocks, 0);
			continue;
		}
		CHECK_OK(ctx);
		if (strstr(log.last, "no memory to keep")) {
			kept_none = true;
			CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_ORPHAN_PAGES), 0);
		}
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		if (ta.calls < at)
			break;		/* no call failed: the sweep is over */
	}
	CU_ASSERT(kept_none);
	unlink(path);
}

/* A flush of an empty cache writes nothing; one with no NVMe tier is refused. */
static void test_flush_refused(void)
{
	const char *path = test_tmp_file("flush-empty");
	struct kvmm_ctx *ctx = chat_ctx(256, 64, path, NULL);
	struct kvmm_params p = chat_params(256, 0, NULL, NULL);
	struct kvmm_flush_info info = { .pages = 1 };

	CU_ASSERT_EQUAL(kvmm_flush(NULL, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_flush(ctx, 0, &info), 0);
	CU_ASSERT_EQUAL(info.pages, 0);
	CU_ASSERT_EQUAL(info.left, 0);
	kvmm_destroy(ctx);
	unlink(path);
	ctx = NULL;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_flush(ctx, 0, &info), -EOPNOTSUPP);
	kvmm_destroy(ctx);
}

/*
 * FLUSH through a ring: the pages written as its result, CQE_F_MORE when
 * some were left out (a tier too small), -EOPNOTSUPP without NVMe.
 */
static void test_flush_ring(void)
{
	const char *path = test_tmp_file("flush-ring");
	uint32_t nvme[] = { 4096, 128 };
	struct test_kring r;
	uint32_t i, flags;
	int32_t res;

	for (i = 0; i < 2; i++) {
		struct kvmm_ctx *ctx = chat_ctx(256, nvme[i], path, NULL);
		uint64_t want;

		chat_run(ctx);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		want = tree_pages(ctx) - test_stat(ctx, KVMM_STAT_NVME_PAGES_CACHED);
		test_kring_init(ctx, &r, 0, 0);
		kvmm_prep_flush(TEST_SQE(&r.ring), 0);
		flags = 0;
		res = test_ring1(&r.ring, &flags);
		if (i == 0) {
			CU_ASSERT_EQUAL(res, (int32_t)want);
			CU_ASSERT_FALSE(flags & KVMM_CQE_F_MORE);
		} else {
			CU_ASSERT(res > 0 && res < (int32_t)want);
			CU_ASSERT(flags & KVMM_CQE_F_MORE);
		}
		CHECK_OK(ctx);
		test_kring_exit(&r);
		kvmm_destroy(ctx);
		unlink(path);
	}
	{
		struct kvmm_params p = chat_params(256, 0, NULL, NULL);
		struct kvmm_ctx *ctx = NULL;

		CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
		test_kring_init(ctx, &r, 0, 0);
		kvmm_prep_flush(TEST_SQE(&r.ring), 10);
		CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EOPNOTSUPP);
		test_kring_exit(&r);
		kvmm_destroy(ctx);
	}
}

/* Every allocation of a flush failed in turn: -ENOMEM, nothing changed. */
static void test_flush_alloc_faults(void)
{
	const char *path = test_tmp_file("flush-alloc");
	struct test_alloc ta = { 0 };
	struct kvmm_params p = chat_params(256, 4096, path, NULL);
	struct kvmm_ctx *ctx = NULL;
	uint64_t st[NR_KVMM_STATS], st2[NR_KVMM_STATS];
	unsigned long at;
	int64_t ret;

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	chat_run(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	for (at = 1;; at++) {
		test_stats(ctx, st);
		ta.fail_at = ta.calls + at;
		ret = kvmm_flush(ctx, 0, NULL);
		ta.fail_at = 0;
		CHECK_OK(ctx);
		if (ret >= 0)
			break;
		CU_ASSERT_EQUAL(ret, -ENOMEM);
		test_stats(ctx, st2);
		ASSERT_STATS_SAME(st, st2);
	}
	CU_ASSERT(at > 1);
	kvmm_destroy(ctx);
	unlink(path);
}

int register_flush_suite(void)
{
	CU_pSuite s = CU_add_suite("flush", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, test_flush_chat_restart);
	ADD_TEST(s, test_flush_bounded_by_room);
	ADD_TEST(s, test_flush_faults);
	ADD_TEST(s, test_flush_time_limit);
	ADD_TEST(s, test_flush_refused);
	ADD_TEST(s, test_flush_alloc_faults);
	ADD_TEST(s, test_flush_ring);
	ADD_TEST(s, test_crash_orphans_adopted_below_hot_prefix);
	ADD_TEST(s, test_crash_orphans_slots_reused);
	ADD_TEST(s, test_crash_orphans_alloc_faults);
	return 0;
}
