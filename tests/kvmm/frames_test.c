// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/frames_test.c - the tree over frames the engine allocates
 * (kvmm_params.frames = KVMM_FRAMES_ENGINE, kvmm/frames.c).
 *
 * The tests play the engine: a free list of frames it allocates from,
 * hands to the tree on insert, frees when insert says they duplicate what
 * the tree has, and gets back from eviction.  Every frame is always
 * exactly one side's, and kvmm_check() runs after every step.
 */
#include <errno.h>
#include <stdlib.h>

#include "../helpers.h"

#define NR_FRAMES	256

/* The engine's allocator: which frames it holds. */
struct engine {
	bool mine[NR_FRAMES];
	uint32_t nr_mine;
};

static void engine_init(struct engine *e)
{
	uint32_t i;

	for (i = 0; i < NR_FRAMES; i++)
		e->mine[i] = true;
	e->nr_mine = NR_FRAMES;
}

/* @nr frames from the engine's own, lowest first; false when it lacks them. */
static bool engine_alloc(struct engine *e, int32_t *frames, uint32_t nr)
{
	uint32_t i, got = 0;

	for (i = 0; i < NR_FRAMES && got < nr; i++)
		if (e->mine[i])
			frames[got++] = (int32_t)i;
	if (got < nr)
		return false;
	for (i = 0; i < nr; i++)
		e->mine[frames[i]] = false;
	e->nr_mine -= nr;
	return true;
}

static void engine_free(struct engine *e, const int32_t *frames, uint32_t nr)
{
	uint32_t i;

	for (i = 0; i < nr; i++) {
		CU_ASSERT_FATAL(frames[i] >= 0 && frames[i] < NR_FRAMES);
		CU_ASSERT_FATAL(!e->mine[frames[i]]);	/* never handed out twice */
		e->mine[frames[i]] = true;
	}
	e->nr_mine += nr;
}

static struct kvmm_ctx *frames_ctx(uint32_t ps, struct test_alloc *ta)
{
	struct kvmm_params p = test_params(ps, NR_FRAMES, 4, 4096);
	struct kvmm_ctx *ctx = NULL;

	p.frames = KVMM_FRAMES_ENGINE;
	if (ta) {
		p.alloc = &test_alloc_ops;
		p.alloc_priv = ta;
	}
	return kvmm_create(&p, &ctx) ? NULL : ctx;
}

/* Every frame is the engine's or the tree's, never both. */
static void check_conserved(struct kvmm_ctx *ctx, const struct engine *e, uint32_t ps)
{
	uint64_t ev = 0, pr = 0;

	int32_t cached[NR_FRAMES];
	int64_t i, nr;

	CU_ASSERT_EQUAL(kvmm_frames_sizes(ctx, &ev, &pr), 0);
	CU_ASSERT_EQUAL(e->nr_mine + (ev + pr) / ps, NR_FRAMES);
	/* the frames the tree lists are exactly those the engine does not hold */
	nr = kvmm_frames_cached(ctx, cached, NR_FRAMES);
	CU_ASSERT_EQUAL(nr, (int64_t)((ev + pr) / ps));
	for (i = 0; i < nr && i < NR_FRAMES; i++) {
		CU_ASSERT(!e->mine[cached[i]]);
		CU_ASSERT(i == 0 || cached[i] > cached[i - 1]);
	}
	CHECK_OK(ctx);
}

/* Insert @n tokens as an engine does: allocate, insert, free the duplicates. */
static int engine_insert(struct kvmm_ctx *ctx, struct engine *e, uint32_t ns,
			 const uint32_t *tok, uint32_t n, uint32_t ps, struct kvmm_fnode *last)
{
	int32_t frames[4096];
	int had;

	if (!engine_alloc(e, frames, n / ps))
		return -ENOSPC;
	had = kvmm_frames_insert(ctx, ns, tok, n, frames, last);
	if (had < 0)
		engine_free(e, frames, n / ps);
	else
		engine_free(e, frames, (uint32_t)had / ps);	/* the tree had those */
	return had;
}

static void frames_insert_match_at(uint32_t ps)
{
	struct kvmm_ctx *ctx = frames_ctx(ps, NULL);
	uint32_t tok[512], n = 16 * ps;
	int32_t got[512];
	struct kvmm_fnode a, b, m;
	struct engine e;
	int32_t want[512];

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	engine_init(&e);
	test_tokens(tok, 2 * n, 7);
	/* nothing cached: the root's handle */
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, tok, n, got, &m), 0);
	CU_ASSERT_PTR_NULL(m.node);
	/* the first half, then the whole: the tree had the first half */
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, tok, n, ps, &a), 0);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, tok, 2 * n, ps, &b), (int)n);
	check_conserved(ctx, &e, ps);
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, tok, 2 * n + ps - 1, got, &m), (int)(2 * n));
	CU_ASSERT(m.node == b.node && m.id == b.id);
	/* a match inside the edge splits it: its node ends there */
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, tok, n + 3 * ps, want, &m), (int)(n + 3 * ps));
	CU_ASSERT(!memcmp(want, got, (n / ps + 3) * sizeof(int32_t)));
	CU_ASSERT(m.node != b.node);
	/* the paths to both nodes, as the match gave them; too little room */
	CU_ASSERT_EQUAL(kvmm_frames_path(ctx, &m, want, 512), (int)(n / ps + 3));
	CU_ASSERT(!memcmp(want, got, (n / ps + 3) * sizeof(int32_t)));
	CU_ASSERT_EQUAL(kvmm_frames_path(ctx, &b, want, 512), (int)(2 * n / ps));
	CU_ASSERT(!memcmp(want, got, 2 * n / ps * sizeof(int32_t)));
	CU_ASSERT_EQUAL(kvmm_frames_path(ctx, &b, want, 2 * n / ps - 1), -ENOSPC);
	CU_ASSERT_EQUAL(kvmm_frames_path(ctx, &(struct kvmm_fnode){ 0 }, want, 0), 0);
	/* another namespace sees none of it */
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 1, tok, n, got, NULL), 0);
	/* a key diverging after the first page: one page hit */
	tok[ps] ^= 1;
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, tok, n, got, NULL), (int)ps);
	CU_ASSERT_EQUAL(got[0], want[0]);
	check_conserved(ctx, &e, ps);
	kvmm_destroy(ctx);
}

static void frames_insert_match(void)
{
	frames_insert_match_at(1);
	frames_insert_match_at(4);
}

/* What an engine might get wrong is refused, with nothing changed. */
static void frames_refusals(void)
{
	struct kvmm_ctx *ctx = frames_ctx(4, NULL), *plain;
	struct kvmm_params p = test_params(4, NR_FRAMES, 4, 4096);
	int32_t frames[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, bad[2] = { 8, NR_FRAMES };
	/* named twice: another bitmap word between, and inside a run of one word */
	int32_t twice[4] = { 8, 70, 130, 70 }, run[4] = { 10, 11, 12, 11 };
	uint32_t tok[32], seq;
	struct kvmm_fnode h;
	struct engine e;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	engine_init(&e);
	test_tokens(tok, 32, 3);
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 6, frames, NULL), -EINVAL); /* unaligned */
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 8, bad, NULL), -EINVAL);
	bad[1] = -1;
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 8, bad, NULL), -EINVAL);
	bad[1] = 8;	/* named twice */
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 8, bad, NULL), -EBUSY);
	check_conserved(ctx, &e, 4);
	/* the frames taken before the refused one go back */
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 16, twice, NULL), -EBUSY);
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 16, run, NULL), -EBUSY);
	check_conserved(ctx, &e, 4);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, tok, 8, 4, &h), 0);
	/* a frame the tree holds, for another key */
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok + 16, 8, frames, NULL), -EBUSY);
	check_conserved(ctx, &e, 4);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &h, 2), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &h, -1), -EINVAL);	/* not locked */
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, NULL, 4), -EINVAL);
	/* kvmm allocates nothing, and moves nothing, in this mode */
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &seq), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kvmm_reclaim(ctx, 1), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kvmm_drop_caches(ctx), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kvmm_drop_caches_tiers(ctx, KVMM_DROP_ALL, NULL), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, NR_FRAMES / 2), -EOPNOTSUPP);
	check_conserved(ctx, &e, 4);
	kvmm_destroy(ctx);

	/* a context of the default mode has no engine frames; nor a tiered one */
	plain = test_ctx(4, NR_FRAMES, 4, 4096);
	CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
	CU_ASSERT_EQUAL(kvmm_frames_match(plain, 0, tok, 8, frames, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_insert(plain, 0, tok, 8, frames, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_evict(plain, 1, frames, 8), -EINVAL);
	kvmm_destroy(plain);
	p.frames = KVMM_FRAMES_ENGINE;
	p.host_pages = 16;
	CU_ASSERT_EQUAL(kvmm_create(&p, &plain), -EINVAL);
	p.host_pages = 0;
	p.frames = 2;
	CU_ASSERT_EQUAL(kvmm_create(&p, &plain), -EINVAL);
}

/*
 * Lock references protect a path from eviction and say how many tokens
 * moved; eviction goes least recently used first, whole leaves, hands the
 * frames back, and leaves handles to what went stale.
 */
static void frames_lock_and_evict(void)
{
	struct kvmm_ctx *ctx = frames_ctx(1, NULL);
	uint32_t a[16], b[16], c[24];
	struct kvmm_fnode ha, hb, hc, hsplit;
	uint64_t ev, pr;
	int32_t out[64];
	struct engine e;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	engine_init(&e);
	test_tokens(a, 16, 1);
	test_tokens(b, 16, 2);
	memcpy(c, a, 8 * sizeof(*c));		/* c shares a's first 8 tokens */
	test_tokens(c + 8, 16, 3);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, a, 16, 1, &ha), 0);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, b, 16, 1, &hb), 0);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, c, 24, 1, &hc), 8);	/* splits a */
	check_conserved(ctx, &e, 1);
	/* lock c's path: its 16 and the shared 8 become protected */
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hc, 1), 24);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hc, 1), 0);		/* nested */
	CU_ASSERT_EQUAL(kvmm_frames_sizes(ctx, &ev, &pr), 0);
	CU_ASSERT_EQUAL(pr, 24);
	CU_ASSERT_EQUAL(ev, 24);		/* a's tail 8, b's 16 */
	/*
	 * b is the oldest leaf: c's insert stamped a's tail as it split it,
	 * as SGLang's tree stamps the node it splits; c's path stays
	 */
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out, 8), 0);	/* b's 16 do not fit */
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out, 64), 16);
	engine_free(&e, out, 16);
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, b, 16, out, NULL), 0);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out, 64), 8);	/* a's tail */
	engine_free(&e, out, 8);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &ha, 1), -ESTALE);	/* gone */
	CU_ASSERT_EQUAL(kvmm_frames_path(ctx, &ha, out, 64), -ESTALE);
	check_conserved(ctx, &e, 1);
	/* locked: nothing more to evict */
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 100, out, 64), 0);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hc, -1), 0);		/* still held once */
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hc, -1), 24);
	/* a match splitting c's edge: the handle of the part above stays good */
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, c, 12, out, &hsplit), 12);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hsplit, 1), 12);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 100, out, 64), 12);	/* c's last 12 */
	engine_free(&e, out, 12);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hc, 1), -ESTALE);
	CU_ASSERT_EQUAL(kvmm_frames_lock(ctx, &hsplit, -1), 12);
	check_conserved(ctx, &e, 1);
	kvmm_destroy(ctx);
}

/*
 * An engine's life at random: requests over a few shared prefixes,
 * each matched, locked, extended with fresh frames, inserted, unlocked;
 * eviction under pressure.  After every step the frames add up and the
 * tree is consistent; whatever is matched is what was inserted.
 */
static void frames_random_engine(void)
{
	uint32_t ps;

	for (ps = 1; ps <= 4; ps *= 4) {
		struct kvmm_ctx *ctx = frames_ctx(ps, NULL);
		unsigned seed = 11 * ps;
		uint64_t evicted = 0;
		struct engine e;
		uint32_t step;

		CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
		engine_init(&e);
		for (step = 0; step < 400; step++) {
			uint32_t tok[96], n = (1 + (uint32_t)rand_r(&seed) % (80 / ps)) * ps;
			uint32_t prefix = (uint32_t)rand_r(&seed) % 4, i, ns = rand_r(&seed) % 2;
			int32_t got[96], frames[96];
			struct kvmm_fnode m, end;
			int hit, had;

			/* four system prompts of 32 tokens, then the request's own */
			for (i = 0; i < n; i++)
				tok[i] = i < 32 ? prefix * 1000 + i : (uint32_t)rand_r(&seed) % 3;
			hit = kvmm_frames_match(ctx, ns, tok, n, got, &m);
			CU_ASSERT_FATAL(hit >= 0 && (uint32_t)hit <= n && hit % ps == 0);
			CU_ASSERT_FATAL(kvmm_frames_lock(ctx, &m, 1) >= 0);
			/* the engine's frames for the rest, evicting when short */
			while (!engine_alloc(&e, frames + hit / ps, (n - hit) / ps)) {
				int32_t out[NR_FRAMES];
				int64_t k = kvmm_frames_evict(ctx, (n - hit) / ps, out, NR_FRAMES);

				CU_ASSERT_FATAL(k > 0);
				engine_free(&e, out, (uint32_t)k);
				evicted += (uint64_t)k;
			}
			memcpy(frames, got, (size_t)hit / ps * sizeof(*frames));
			had = kvmm_frames_insert(ctx, ns, tok, n, frames, &end);
			CU_ASSERT_FATAL(had >= hit);
			/* frames past what the tree had are its now; the engine frees the rest */
			if ((uint32_t)had > (uint32_t)hit)
				engine_free(&e, frames + hit / ps, (uint32_t)(had - hit) / ps);
			CU_ASSERT_EQUAL(kvmm_frames_match(ctx, ns, tok, n, got, NULL), (int)n);
			CU_ASSERT(!memcmp(got + had / ps, frames + had / ps,
					  (size_t)(n - had) / ps * sizeof(*got)));
			CU_ASSERT_FATAL(kvmm_frames_lock(ctx, &m, -1) >= 0);
			check_conserved(ctx, &e, ps);
		}
		CU_ASSERT(evicted > NR_FRAMES);	/* the pool turned over */
		kvmm_destroy(ctx);
	}
}

/* Every allocation the tree makes failing in turn: nothing changed, nothing lost. */
static void frames_alloc_faults(void)
{
	unsigned long n;

	for (n = 1; n < 100; n++) {
		struct test_alloc ta = { 0 };
		struct kvmm_ctx *ctx = frames_ctx(1, &ta);
		uint32_t tok[24];
		struct engine e;
		int r1, r2;

		CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
		engine_init(&e);
		test_tokens(tok, 24, 5);
		ta.fail_at = ta.calls + n;
		r1 = engine_insert(ctx, &e, 0, tok, 16, 1, NULL);
		r2 = engine_insert(ctx, &e, 0, tok, 24, 1, NULL);
		CU_ASSERT(r1 == 0 || r1 == -ENOMEM);
		CU_ASSERT(r2 == -ENOMEM || r2 == (r1 == 0 ? 16 : 0));
		check_conserved(ctx, &e, 1);
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		if (ta.calls < ta.fail_at)
			break;
	}
	CU_ASSERT(n > 1);
}

/*
 * Under slru a node reached twice is kept over one reached once.  In this
 * mode a hit is what SGLang's tree counts: an insert, on the nodes past
 * what the request inserted before; a match counts none.  y is inserted
 * twice (protected); z once, then again as a request that had inserted it
 * all (no hit); x once and matched three times (no hit), the newest.  The
 * once-reached go first, oldest first: z, x, then y.
 */
static void frames_slru_hits(void)
{
	struct kvmm_params p = test_params(1, NR_FRAMES, 4, 4096);
	uint32_t x[16], y[16], z[16], i;
	struct kvmm_fnode root = { 0 };
	int32_t frames[16], out[64];
	struct kvmm_ctx *ctx = NULL;
	struct engine e;

	p.frames = KVMM_FRAMES_ENGINE;
	p.evict_policy = "slru";
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	engine_init(&e);
	test_tokens(y, 16, 1);
	test_tokens(z, 16, 2);
	test_tokens(x, 16, 3);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, y, 16, 1, NULL), 0);		/* frames 0.. */
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, y, 16, 1, NULL), 16);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, z, 16, 1, NULL), 0);		/* 16.. */
	for (i = 0; i < 16; i++)
		frames[i] = 100 + (int32_t)i;	/* all duplicates: not read */
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, z, 16, frames, &root, 0, 0, 16, NULL), 16);
	CU_ASSERT_EQUAL(frames[0], 16);		/* the tree's */
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, x, 16, 1, NULL), 0);		/* 32.. */
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, x, 16, out, NULL), 16);
	check_conserved(ctx, &e, 1);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out, 64), 16);
	CU_ASSERT_EQUAL(out[0], 16);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out + 16, 48), 16);
	CU_ASSERT_EQUAL(out[16], 32);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out + 32, 32), 16);
	CU_ASSERT_EQUAL(out[32], 0);
	engine_free(&e, out, 48);
	check_conserved(ctx, &e, 1);
	kvmm_destroy(ctx);
}

/*
 * kvmm_frames_extend() with each allocation failing in turn: the insert's
 * failure changes nothing; the split's is left out and the call succeeds.
 */
static void frames_extend_faults(void)
{
	unsigned long n;

	for (n = 1; n < 100; n++) {
		struct test_alloc ta = { 0 };
		struct kvmm_ctx *ctx = frames_ctx(1, &ta);
		struct kvmm_fnode h, end;
		int32_t frames[32], given[32];
		uint32_t tok[32];
		struct engine e;
		int had;

		CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
		engine_init(&e);
		test_tokens(tok, 32, 6);
		CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, tok, 16, 1, &h), 0);
		CU_ASSERT(engine_alloc(&e, given + 16, 16));
		memcpy(frames, given, sizeof(frames));
		ta.fail_at = ta.calls + n;
		had = kvmm_frames_extend(ctx, 0, tok, 32, frames, &h, 16, 8, 0, &end);
		CU_ASSERT(had == 16 || had == -ENOMEM);
		if (had < 0)
			engine_free(&e, given + 16, 16);	/* still the engine's */
		else
			CU_ASSERT(!memcmp(frames + 16, given + 16, 16 * sizeof(*frames)));
		check_conserved(ctx, &e, 1);
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		if (ta.calls < ta.fail_at)
			break;
	}
	CU_ASSERT(n > 2);	/* the leaf's allocations, then the split's */
}

/*
 * kvmm_frames_extend() against what it stands for.  Two trees and two
 * engines take the same requests: one checkpoints as SGLang's tree does
 * (insert the key, insert its first @split tokens, match the key), the
 * other with one kvmm_frames_extend() from the node the request holds
 * locked.  Every answer is the same: tokens had, the tree's frames, and
 * the order eviction hands leaves back in.
 */
struct twin {
	struct kvmm_ctx *ctx;
	struct engine e;
};

/*
 * Cache @n tokens of a request holding @*lock (@held tokens): the engine
 * allocates frames for the rest, the tree takes them, the engine frees the
 * duplicates; @frames gets the tree's frame of each page, the lock moves
 * to the key's end.  Returns tokens the tree had.
 */
static int twin_checkpoint(struct twin *t, bool extend, uint32_t ns, const uint32_t *tok,
			   uint32_t n, uint32_t held, uint32_t split, int32_t *frames,
			   struct kvmm_fnode *lock, uint32_t ps)
{
	int32_t given[96];
	struct kvmm_fnode end;
	int had;

	CU_ASSERT_FATAL(engine_alloc(&t->e, given + held / ps, (n - held) / ps));
	memcpy(frames + held / ps, given + held / ps, (size_t)(n - held) / ps * sizeof(*given));
	if (extend) {
		had = kvmm_frames_extend(t->ctx, ns, tok, n, frames, lock, held, split, held, &end);
	} else {
		had = kvmm_frames_insert(t->ctx, ns, tok, n, frames, &end);
		if (split && split < n)
			CU_ASSERT_EQUAL(kvmm_frames_insert(t->ctx, ns, tok, split, frames, NULL),
					(int)split);
		CU_ASSERT_EQUAL(kvmm_frames_match(t->ctx, ns, tok, n, frames, &end), (int)n);
	}
	CU_ASSERT_FATAL(had >= (int)held);
	engine_free(&t->e, given + held / ps, ((uint32_t)had - held) / ps);
	CU_ASSERT_FATAL(kvmm_frames_lock(t->ctx, lock, -1) >= 0);
	CU_ASSERT_FATAL(kvmm_frames_lock(t->ctx, &end, 1) >= 0);
	*lock = end;
	return had;
}

/* evict @nr pages from both; they must hand back the same frames */
static void twin_evict(struct twin *t, uint32_t nr)
{
	int32_t out[2][NR_FRAMES];
	int64_t k[2];
	int i;

	for (i = 0; i < 2; i++) {
		k[i] = kvmm_frames_evict(t[i].ctx, nr, out[i], NR_FRAMES);
		CU_ASSERT_FATAL(k[i] > 0);
		engine_free(&t[i].e, out[i], (uint32_t)k[i]);
	}
	CU_ASSERT_FATAL(k[0] == k[1]);
	CU_ASSERT(!memcmp(out[0], out[1], (size_t)k[0] * sizeof(out[0][0])));
}

static void frames_extend_as_insert(void)
{
	uint32_t ps;

	for (ps = 1; ps <= 4; ps *= 4) {
		struct twin t[2];
		unsigned seed = 5 + ps;
		uint32_t step, i;

		for (i = 0; i < 2; i++) {
			t[i].ctx = frames_ctx(ps, NULL);
			CU_ASSERT_PTR_NOT_NULL_FATAL(t[i].ctx);
			engine_init(&t[i].e);
		}
		for (step = 0; step < 300; step++) {
			uint32_t prompt = (1 + (uint32_t)rand_r(&seed) % (48 / ps)) * ps;
			uint32_t out = (uint32_t)rand_r(&seed) % (32 / ps) * ps, n = prompt + out;
			uint32_t tok[96], pfx = (uint32_t)rand_r(&seed) % 4, ns = rand_r(&seed) % 2;
			int32_t frames[2][96];
			struct kvmm_fnode lock[2];
			int hit[2], had[2];

			for (i = 0; i < n; i++)
				tok[i] = i < 24 ? pfx * 1000 + i : (uint32_t)rand_r(&seed) % 3;
			while (t[0].e.nr_mine < n / ps)
				twin_evict(t, n / ps);
			for (i = 0; i < 2; i++) {
				hit[i] = kvmm_frames_match(t[i].ctx, ns, tok, prompt, frames[i], &lock[i]);
				CU_ASSERT_FATAL(kvmm_frames_lock(t[i].ctx, &lock[i], 1) >= 0);
			}
			CU_ASSERT_FATAL(hit[0] == hit[1]);
			/* the prompt, then the prompt and its output, split at the prompt */
			for (i = 0; i < 2; i++)
				had[i] = twin_checkpoint(&t[i], i, ns, tok, prompt, (uint32_t)hit[i], 0,
							 frames[i], &lock[i], ps);
			CU_ASSERT_EQUAL(had[0], had[1]);
			CU_ASSERT(!memcmp(frames[0], frames[1], prompt / ps * sizeof(int32_t)));
			for (i = 0; i < 2; i++)
				had[i] = twin_checkpoint(&t[i], i, ns, tok, n, prompt, prompt,
							 frames[i], &lock[i], ps);
			CU_ASSERT_EQUAL(had[0], had[1]);
			CU_ASSERT(!memcmp(frames[0], frames[1], n / ps * sizeof(int32_t)));
			for (i = 0; i < 2; i++) {
				uint64_t ev, pr;

				CU_ASSERT_FATAL(kvmm_frames_lock(t[i].ctx, &lock[i], -1) >= 0);
				check_conserved(t[i].ctx, &t[i].e, ps);
				CU_ASSERT_EQUAL(kvmm_frames_sizes(t[i].ctx, &ev, &pr), 0);
				CU_ASSERT_EQUAL(pr, 0);
			}
		}
		/* the same leaves, in the same order, down to nothing */
		while (t[0].e.nr_mine < NR_FRAMES)
			twin_evict(t, 1);
		CU_ASSERT_EQUAL(t[1].e.nr_mine, NR_FRAMES);
		for (i = 0; i < 2; i++)
			kvmm_destroy(t[i].ctx);
	}
}

/* What kvmm_frames_extend() refuses, with nothing changed. */
static void frames_extend_refusals(void)
{
	struct kvmm_ctx *ctx = frames_ctx(4, NULL);
	struct kvmm_fnode h, root = { 0 }, gone;
	int32_t frames[16], out[16];
	uint32_t tok[64];
	struct engine e;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	engine_init(&e);
	test_tokens(tok, 64, 9);
	CU_ASSERT_EQUAL(engine_insert(ctx, &e, 0, tok, 16, 4, &h), 0);
	CU_ASSERT(engine_alloc(&e, frames + 4, 4));
	/* the node's path is 16 tokens of namespace 0, no other */
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &h, 12, 0, 0, NULL), -EXDEV);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 1, tok, 32, frames, &h, 16, 0, 0, NULL), -EXDEV);
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 1, tok, 16, out, NULL), 0);	/* ns 1 exists now */
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 1, tok, 32, frames, &h, 16, 0, 0, NULL), -EXDEV);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &root, 16, 0, 0, NULL), -EXDEV);
	/* unaligned, past the key, no handle */
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &h, 14, 0, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &h, 16, 18, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 12, frames, &h, 16, 0, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, NULL, 16, 0, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, NULL, &h, 16, 0, 0, NULL), -EINVAL);
	engine_free(&e, frames + 4, 4);
	check_conserved(ctx, &e, 4);
	/* a handle to a node gone */
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 4, out, 16), 4);
	engine_free(&e, out, 4);
	gone = h;
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &gone, 16, 0, 0, NULL), -ESTALE);
	check_conserved(ctx, &e, 4);
	/* from the root, with a split: the key and its first 8 tokens as nodes */
	CU_ASSERT(engine_alloc(&e, frames, 8));
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &root, 0, 8, 0, &h), 0);
	CU_ASSERT_EQUAL(kvmm_frames_evict(ctx, 1, out, 16), 6);	/* the key past the split */
	engine_free(&e, out, 6);
	CU_ASSERT_EQUAL(kvmm_frames_match(ctx, 0, tok, 32, out, NULL), 8);
	check_conserved(ctx, &e, 4);
	/* a default-mode context has none of it */
	kvmm_destroy(ctx);
	ctx = test_ctx(4, NR_FRAMES, 4, 4096);
	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL(kvmm_frames_extend(ctx, 0, tok, 32, frames, &root, 0, 0, 0, NULL), -EINVAL);
	kvmm_destroy(ctx);
}

/* kvmm_frames_cached(): counts past its room, writes only that; refusals. */
static void frames_cached_bounds(void)
{
	struct kvmm_ctx *ctx = frames_ctx(2, NULL);
	uint32_t tok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	int32_t frames[4] = { 9, 3, 7, 5 }, out[4] = { -1, -1, -1, -1 };

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, out, 4), 0);
	CU_ASSERT_EQUAL(kvmm_frames_insert(ctx, 0, tok, 8, frames, NULL), 0);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, NULL, 0), 4);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, out, 2), 4);
	CU_ASSERT(out[0] == 3 && out[1] == 5 && out[2] == -1);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, out, 4), 4);
	CU_ASSERT(out[0] == 3 && out[1] == 5 && out[2] == 7 && out[3] == 9);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_frames_cached(NULL, out, 4), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	ctx = test_ctx(2, NR_FRAMES, 4, 4096);		/* kvmm's own frames: refused */
	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL(kvmm_frames_cached(ctx, out, 4), -EINVAL);
	kvmm_destroy(ctx);
}

int register_frames_suite(void)
{
	CU_pSuite s = CU_add_suite("frames", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, frames_insert_match);
	ADD_TEST(s, frames_refusals);
	ADD_TEST(s, frames_lock_and_evict);
	ADD_TEST(s, frames_random_engine);
	ADD_TEST(s, frames_alloc_faults);
	ADD_TEST(s, frames_extend_as_insert);
	ADD_TEST(s, frames_extend_refusals);
	ADD_TEST(s, frames_extend_faults);
	ADD_TEST(s, frames_slru_hits);
	ADD_TEST(s, frames_cached_bounds);
	return 0;
}
