// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/keyed_test.c - the keyed page store: spaces, put/get/exists/
 * delete through the C API and a ring, the shared capacity and reclaim of
 * the host tier, writeback to NVMe and reads back from it, restart, and
 * the faults on the way (a corrupted or torn value, a failed allocation,
 * a full tier).  Every value's bytes are stamped from its key, and every
 * get is compared with the stamp: a value read back is exactly the value
 * stored under that key, or a miss.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../helpers.h"

#define PS	4		/* tokens per page: 128 bytes a page */
#define VB	300		/* bytes a value: 3 pages, the last one part-filled */
#define VPAGES	3

static const char model[] = "test-model@rev1";

static struct kvmm_key key_of(uint32_t i)
{
	return (struct kvmm_key){ .lo = 0x9e3779b97f4a7c15ull * (i + 1), .hi = i };
}

static void stamp(uint8_t *v, uint64_t bytes, uint32_t i)
{
	uint64_t b;

	for (b = 0; b < bytes; b++)
		v[b] = (uint8_t)(i * 131u ^ b * 7u ^ b >> 8);
}

static bool stamped(const uint8_t *v, uint64_t bytes, uint32_t i)
{
	uint64_t b;

	for (b = 0; b < bytes; b++)
		if (v[b] != (uint8_t)(i * 131u ^ b * 7u ^ b >> 8))
			return false;
	return true;
}

static struct kvmm_ctx *host_ctx(uint32_t host_pages, struct kvmm_host_arg *host,
				 struct test_alloc *ta)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;

	p.host_pages = host_pages;
	p.host_node = KVMM_NODE_NEAREST;
	p.host_arg = host;
	if (ta) {
		p.alloc = &test_alloc_ops;
		p.alloc_priv = ta;
	}
	if (kvmm_create(&p, &ctx))
		return NULL;
	return ctx;
}

static uint32_t space_of(struct kvmm_ctx *ctx, uint32_t ns, uint64_t vb)
{
	struct kvmm_keyed_spec spec = { .ns = ns, .value_bytes = vb, .model_id = model };
	uint32_t id = ~0u;

	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), 0);
	return id;
}

/* Put values @from .. @to - 1 (stamped), one call; return what it said. */
static int put_range(struct kvmm_ctx *ctx, uint32_t sp, uint32_t from, uint32_t to)
{
	uint32_t n = to - from, i;
	struct kvmm_key *keys = calloc(n, sizeof(*keys));
	uint8_t *vals = malloc((size_t)n * VB);
	const void **src = calloc(n, sizeof(*src));
	int32_t *res = calloc(n, sizeof(*res));
	int ret;

	for (i = 0; i < n; i++) {
		keys[i] = key_of(from + i);
		stamp(vals + (size_t)i * VB, VB, from + i);
		src[i] = vals + (size_t)i * VB;
	}
	ret = kvmm_keyed_put(ctx, sp, keys, src, n, res);
	for (i = 0; ret >= 0 && i < n; i++)
		CU_ASSERT(res[i] == 0 || res[i] == -ENOSPC || res[i] == -ENOMEM);
	free(keys);
	free(vals);
	free(src);
	free(res);
	return ret;
}

/* Get value @i: 0 and its stamp checked, or the error. */
static int get_one(struct kvmm_ctx *ctx, uint32_t sp, uint32_t i)
{
	struct kvmm_key k = key_of(i);
	uint8_t v[VB + 16];
	void *dst = v;
	int32_t res = 1;
	int ret;

	memset(v, 0xee, sizeof(v));
	ret = kvmm_keyed_get(ctx, sp, &k, &dst, 1, &res);
	if (ret < 0)
		return ret;
	CU_ASSERT(ret == 0 || ret == 1);
	CU_ASSERT_EQUAL(ret == 1, res == 0);
	if (res)
		return res;
	CU_ASSERT(stamped(v, VB, i));
	CU_ASSERT_EQUAL(v[VB], 0xee);	/* not a byte past the value */
	return 0;
}

static void test_keyed_roundtrip(void)
{
	struct kvmm_ctx *ctx = host_ctx(64, NULL, NULL);
	struct kvmm_key k[3] = { key_of(0), key_of(1), key_of(2) };
	uint32_t sp;

	CU_ASSERT_FATAL(ctx != NULL);
	sp = space_of(ctx, 0, VB);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 3), 3);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 3);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), 3 * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 3 * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_PUTS), 3);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 2), 0);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 7), -ENOENT);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_GETS), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_MISSES), 1);
	/* a key stored again keeps its value: nothing new is taken */
	CU_ASSERT_EQUAL(put_range(ctx, sp, 1, 2), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 3);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_PUTS), 3);
	/* exists: the run of hits from the start */
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, k, 3, NULL), 3);
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, sp, &k[1], 1, NULL), 1);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, k, 3, NULL), 1);
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, sp, &k[1], 1, NULL), 0);	/* gone already */
	CU_ASSERT_EQUAL(get_one(ctx, sp, 1), -ENOENT);
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, sp, k, 3, NULL), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), 64);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 0);	/* deletes, not evictions */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A result per key: exists and delete with @res, and what a space holds. */
static void test_keyed_each(void)
{
	struct kvmm_ctx *ctx = host_ctx(64, NULL, NULL);
	struct kvmm_key k[4] = { key_of(0), key_of(1), key_of(2), key_of(3) };
	struct kvmm_dump_kspace info;
	int32_t res[4] = { 7, 7, 7, 7 };
	uint32_t sp;

	CU_ASSERT_FATAL(ctx != NULL);
	sp = space_of(ctx, 0, VB);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 1), 1);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 2, 3), 1);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, k, 4, NULL), 1);	/* the run */
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, k, 4, res), 2);	/* every key */
	CU_ASSERT(res[0] == 0 && res[1] == -ENOENT && res[2] == 0 && res[3] == -ENOENT);
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, sp, &info), 0);
	CU_ASSERT_EQUAL(info.values, 2);
	CU_ASSERT_EQUAL(info.host_pages, 2 * VPAGES);
	CU_ASSERT_EQUAL(info.value_bytes, VB);
	CU_ASSERT_STRING_EQUAL(info.model_id, model);
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, sp, &k[1], 2, res), 1);
	CU_ASSERT(res[0] == -ENOENT && res[1] == 0);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, k, 4, res), 1);
	CU_ASSERT(res[0] == 0 && res[2] == -ENOENT);
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, sp, &info), 0);
	CU_ASSERT_EQUAL(info.values, 1);
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, sp + 1, &info), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, sp, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_info(NULL, sp, &info), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void test_keyed_spaces(void)
{
	struct kvmm_ctx *ctx = host_ctx(64, NULL, NULL), *bare = test_ctx(PS, 16, 4, 64);
	struct kvmm_keyed_spec spec = { .value_bytes = VB, .model_id = model };
	struct kvmm_key k = key_of(0);
	char long_id[KVMM_MODEL_ID_MAX + 2];
	uint32_t a, b, c, d, id;
	void *dst = &id;

	CU_ASSERT_FATAL(ctx && bare);
	a = space_of(ctx, 0, VB);
	CU_ASSERT_EQUAL(space_of(ctx, 0, VB), a);		/* the same space */
	b = space_of(ctx, 1, VB);			/* another namespace */
	c = space_of(ctx, 0, VB + 1);			/* another size */
	spec.model_id = "another-model";
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &d), 0);	/* another model */
	CU_ASSERT(a != b && a != c && a != d && b != c && b != d && c != d);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), 4);
	/* the same key in two spaces is two values */
	CU_ASSERT_EQUAL(put_range(ctx, a, 0, 1), 1);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, a, &k, 1, NULL), 1);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, b, &k, 1, NULL), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, d, &k, 1, NULL), 0);

	/* bad specs, bad spaces, no host tier */
	spec = (struct kvmm_keyed_spec){ .value_bytes = VB, .model_id = model };
	CU_ASSERT_EQUAL(kvmm_keyed_space(NULL, &spec, &id), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, NULL, &id), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, NULL), -EINVAL);
	spec.flags = 1;
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.flags = 0;
	spec.value_bytes = 0;
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.value_bytes = KVMM_KVALUE_MAX + 1;
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.value_bytes = VB;
	spec.model_id = "";
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.model_id = NULL;
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.model_id = "tab\there";
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	memset(long_id, 'm', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = 0;
	spec.model_id = long_id;
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), -EINVAL);
	spec.model_id = model;
	CU_ASSERT_EQUAL(kvmm_keyed_space(bare, &spec, &id), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, 99, &k, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, 99, &k, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, 99, &k, &dst, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, a, NULL, &dst, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, a, &k, NULL, 1, NULL), -EINVAL);
	dst = NULL;
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, a, &k, &dst, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, a, &k, (const void *const *)&dst, 1, NULL),
			-EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, a, NULL, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, a, &k, 0, NULL), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 1);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	kvmm_destroy(bare);
}

/*
 * A host tier of 8 values: putting more evicts the oldest, never fails a
 * put; a value read since is younger than one that was not.  A batch
 * larger than the tier stores what fits and says which did not.
 */
static void test_keyed_pressure(void)
{
	struct kvmm_ctx *ctx = host_ctx(8 * VPAGES, NULL, NULL);
	struct kvmm_key keys[12];
	uint8_t vals[12][VB];
	const void *src[12];
	int32_t res[12];
	uint32_t sp, i, stored = 0;

	CU_ASSERT_FATAL(ctx != NULL);
	sp = space_of(ctx, 0, VB);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 8), 8);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);	/* 0 is now the youngest */
	for (i = 8; i < 15; i++)
		CU_ASSERT_EQUAL(put_range(ctx, sp, i, i + 1), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 7);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_EVICT_PAGES), 7 * VPAGES);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);
	for (i = 1; i < 8; i++)
		CU_ASSERT_EQUAL(get_one(ctx, sp, i), -ENOENT);
	for (i = 8; i < 15; i++)
		CU_ASSERT_EQUAL(get_one(ctx, sp, i), 0);

	/*
	 * 12 at once into a tier of 8 with nothing below: it can never fit,
	 * so it fails whole and evicts nothing (it used to evict all 8 and
	 * then fail 4 of its own)
	 */
	for (i = 0; i < 12; i++) {
		keys[i] = key_of(100 + i);
		stamp(vals[i], VB, 100 + i);
		src[i] = vals[i];
	}
	keys[11] = key_of(9);		/* stored already: as good as new */
	stamp(vals[11], VB, 9);
	CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, sp, keys, src, 12, res), 1);
	for (i = 0; i < 11; i++) {
		CU_ASSERT_EQUAL(res[i], -ENOSPC);
		CU_ASSERT_EQUAL(get_one(ctx, sp, 100 + i), -ENOENT);
	}
	CU_ASSERT_EQUAL(res[11], 0);
	CHECK_OK(ctx);
	for (i = 8; i < 15; i++)
		stored += get_one(ctx, sp, i) == 0;
	CU_ASSERT_EQUAL(stored + (get_one(ctx, sp, 0) == 0), 8);	/* all still there */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 7);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * Prefixes the device demotes and keyed values share the host tier and
 * its one LRU: the oldest goes first, whichever kind it is.
 */
static void test_keyed_shares_host_tier(void)
{
	struct kvmm_ctx *ctx = host_ctx(8, NULL, NULL);
	uint32_t tok[3][32], sp, i, seq;

	CU_ASSERT_FATAL(ctx != NULL);
	sp = space_of(ctx, 0, VB);
	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 900 + i);
	/* device of 16 pages: two 8-page prompts fill it, the third demotes the first */
	for (i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &seq), 0);
		CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 32, 0), 0);
		CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok[i], 32), 0);
	}
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 8);
	/* a value needs 3 of the 8 host pages: the demoted prefix goes */
	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 2), 2);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[0], 32, NULL), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), 2 * VPAGES);
	/* the next demotion takes the oldest value */
	CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 32, 0), 0);
	test_tokens(tok[0], 32, 990);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok[0], 32), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 2);
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[1], 32, NULL), 32);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * The operator's split of the host tier (keyed_share): the kind over its
 * part goes first, even when the other kind's pages are older.
 */
static void test_keyed_share(void)
{
	static const uint32_t shares[] = { 100, 25 };
	uint32_t tok[3][32], sp, i, seq, share, k;

	for (i = 0; i < 3; i++)
		test_tokens(tok[i], 32, 700 + i);
	for (k = 0; k < 2; k++) {
		struct kvmm_ctx *ctx = host_ctx(8 * VPAGES, NULL, NULL);
		struct kvmm_sqe set = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_KEYED_SHARE,
					.arg2 = shares[k] };

		share = shares[k];
		CU_ASSERT_FATAL(ctx != NULL);
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &set, NULL, 0), 0);
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SHARE), share);
		sp = space_of(ctx, 0, VB);
		/* the first prompt demoted to the host tier: its oldest pages */
		for (i = 0; i < 3; i++) {
			CU_ASSERT_EQUAL(kvmm_seq_open(ctx, 0, &seq), 0);
			CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 32, 0), 0);
			CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok[i], 32), 0);
		}
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_CACHED), 8);
		/* 4 newer values (12 pages), then 2 more: 2 pages short */
		for (i = 0; i < 6; i++)
			CU_ASSERT_EQUAL(put_range(ctx, sp, i, i + 1), 1);
		if (share == 100) {	/* plain LRU: the older prefix went */
			CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[0], 32, NULL), 0);
			CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 6);
		} else {		/* values over their quarter went first */
			CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[0], 32, NULL), 32);
			CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 5);
			CU_ASSERT_EQUAL(get_one(ctx, sp, 0), -ENOENT);
			CU_ASSERT_EQUAL(get_one(ctx, sp, 5), 0);
		}
		set.arg2 = 0;
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &set, NULL, 0), -EINVAL);
		set.arg2 = 101;
		CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &set, NULL, 0), -EINVAL);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
	}
}

/* A value whose host page rots is a miss, and is gone. */
static void test_keyed_corrupt_is_a_miss(void)
{
	/* the 6th page verified flips: the second value read */
	struct kvmm_host_arg host = { .flip_every = 2 * VPAGES };
	struct kvmm_ctx *ctx = host_ctx(64, &host, NULL);
	struct kvmm_key k = key_of(2);
	uint32_t sp;

	CU_ASSERT_FATAL(ctx != NULL);
	sp = space_of(ctx, 0, VB);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 3), 3);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 1), 0);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 2), -EBADMSG);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, &k, 1, NULL), 0);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 2), -ENOENT);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_CSUM_FAIL), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_MISSES), 2);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Every allocation of a put, then of a get, fails in turn: nothing leaks. */
static void test_keyed_alloc_faults(void)
{
	unsigned long n;

	for (n = 1; n < 200; n++) {
		struct test_alloc ta = { 0 };
		struct kvmm_ctx *ctx = host_ctx(64, NULL, &ta);
		uint32_t sp;
		int put, got;

		CU_ASSERT_FATAL(ctx != NULL);
		sp = space_of(ctx, 0, VB);
		ta.fail_at = ta.calls + n;
		put = put_range(ctx, sp, 0, 4);
		got = get_one(ctx, sp, 3);
		CU_ASSERT(put == -ENOMEM || (put >= 0 && put <= 4));
		CU_ASSERT(got == 0 || got == -ENOENT || got == -ENOMEM);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		if (ta.calls < ta.fail_at)
			break;		/* the whole run took fewer: every one was tried */
	}
	CU_ASSERT(n > 3);
}

/* ---- through a ring ---- */

static int32_t ring_kspace(struct test_kring *r, uint32_t ns, uint64_t vb, const char *id)
{
	struct kvmm_kspace_reg *reg = (void *)r->mem;
	struct kvmm_sqe *sqe = TEST_SQE(&r->ring);

	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = vb;
	snprintf(reg->model_id, sizeof(reg->model_id), "%s", id);
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 1, 0, sizeof(*reg));
	sqe->ns = ns;
	return test_ring1(&r->ring, NULL);
}

/* Entries at offset 0, values from offset 4096 (VB apart), stamped for a put. */
static struct kvmm_kent *ring_ents(struct test_kring *r, uint32_t from, uint32_t n, bool put)
{
	struct kvmm_kent *e = (void *)r->mem;
	uint32_t i;

	for (i = 0; i < n; i++) {
		uint64_t off = 4096 + (uint64_t)i * VB;

		e[i] = (struct kvmm_kent){ .key = key_of(from + i), .off = off, .buf = 1,
					   .res = 12345 };
		if (put)
			stamp(r->mem + off, VB, from + i);
		else
			memset(r->mem + off, 0, VB);
	}
	return e;
}

/* KEXISTS or KDELETE of keys @from.. (at offset 0) */
static int32_t ring_kkeys(struct test_kring *r, uint8_t op, uint32_t sp, uint32_t from, uint32_t n)
{
	struct kvmm_key *k = (void *)r->mem;
	uint32_t i;

	for (i = 0; i < n; i++)
		k[i] = key_of(from + i);
	return test_kring_io(r, op, sp, n);
}

/* KEXISTS or KDELETE with KVMM_KEYS_EACH of keys @from.. (entries at offset 0) */
static int32_t ring_keach(struct test_kring *r, uint8_t op, uint32_t sp, uint32_t from, uint32_t n)
{
	struct kvmm_kent *e = (void *)r->mem;
	struct kvmm_sqe *sqe = TEST_SQE(&r->ring);
	uint32_t i;

	for (i = 0; i < n; i++)
		e[i] = (struct kvmm_kent){ .key = key_of(from + i), .res = 12345 };
	kvmm_prep_rw(sqe, op, 0, 1, 0, n);
	sqe->arg = sp;
	sqe->arg2 = KVMM_KEYS_EACH;
	return test_ring1(&r->ring, NULL);
}

static void test_keyed_ring(void)
{
	struct kvmm_ctx *ctx = host_ctx(64, NULL, NULL);
	struct kvmm_kent *e;
	struct test_kring r;
	int32_t sp;
	uint32_t i;

	CU_ASSERT_FATAL(ctx != NULL);
	test_kring_init(ctx, &r, 0, 0);
	sp = ring_kspace(&r, 0, VB, model);
	CU_ASSERT(sp >= 0);
	CU_ASSERT_EQUAL(sp, (int32_t)space_of(ctx, 0, VB));	/* the C API's space too */
	e = ring_ents(&r, 0, 4, true);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 4), 4);
	for (i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(e[i].res, 0);
	CU_ASSERT_EQUAL(get_one(ctx, (uint32_t)sp, 2), 0);	/* seen by the C API */
	/* a get of two hits and a miss */
	e = ring_ents(&r, 2, 3, false);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, (uint32_t)sp, 3), 2);
	CU_ASSERT_EQUAL(e[0].res, 0);
	CU_ASSERT_EQUAL(e[1].res, 0);
	CU_ASSERT_EQUAL(e[2].res, -ENOENT);
	CU_ASSERT(stamped(r.mem + 4096, VB, 2));
	CU_ASSERT(stamped(r.mem + 4096 + VB, VB, 3));
	CU_ASSERT_EQUAL(ring_kkeys(&r, KVMM_OP_KEXISTS, (uint32_t)sp, 0, 6), 4);
	CU_ASSERT_EQUAL(ring_kkeys(&r, KVMM_OP_KDELETE, (uint32_t)sp, 1, 2), 2);
	CU_ASSERT_EQUAL(ring_kkeys(&r, KVMM_OP_KEXISTS, (uint32_t)sp, 0, 6), 1);
	/* a result per key */
	CU_ASSERT_EQUAL(ring_keach(&r, KVMM_OP_KEXISTS, (uint32_t)sp, 0, 5), 2);
	e = (void *)r.mem;
	CU_ASSERT(e[0].res == 0 && e[1].res == -ENOENT && e[2].res == -ENOENT &&
		  e[3].res == 0 && e[4].res == -ENOENT);
	CU_ASSERT_EQUAL(ring_keach(&r, KVMM_OP_KDELETE, (uint32_t)sp, 3, 2), 1);
	CU_ASSERT(e[0].res == 0 && e[1].res == -ENOENT);
	CU_ASSERT_EQUAL(ring_keach(&r, KVMM_OP_KEXISTS, (uint32_t)sp, 3, 1), 0);
	CU_ASSERT_EQUAL(e[0].res, -ENOENT);
	ring_ents(&r, 3, 1, true);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 1), 1);	/* back */
	CU_ASSERT_EQUAL(ring_kkeys(&r, KVMM_OP_KEXISTS, (uint32_t)sp, 3, 1), 1);
	CU_ASSERT_EQUAL(ring_keach(&r, KVMM_OP_KEXISTS, 77, 0, 1), -EINVAL);
	{
		struct kvmm_sqe *sqe = TEST_SQE(&r.ring);

		kvmm_prep_rw(sqe, KVMM_OP_KEXISTS, 0, 1, 0, 1);
		sqe->arg = (uint32_t)sp;
		sqe->arg2 = 2;		/* no such flag */
		CU_ASSERT_EQUAL(test_ring1(&r.ring, NULL), -EINVAL);
	}

	/* refused whole, nothing done: a value past the buffer, a bad field */
	e = ring_ents(&r, 10, 2, true);
	e[1].off = r.bytes - VB + 1;
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 2), -EFAULT);
	e = ring_ents(&r, 10, 2, true);
	e[1].resv = 1;
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 2), -EINVAL);
	e = ring_ents(&r, 10, 2, true);
	e[1].buf = 7;
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 2), -EFAULT);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 0), -EINVAL);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, 77, 1), -EINVAL);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, (uint32_t)sp, 4097), -EINVAL);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_VALUES), 2);
	CU_ASSERT_EQUAL(ring_kspace(&r, 0, 0, model), -EINVAL);
	CU_ASSERT_EQUAL(ring_kspace(&r, 0, VB, ""), -EINVAL);
	CHECK_OK(ctx);
	test_kring_exit(&r);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A ring bound to a namespace reaches only that namespace's spaces. */
static void test_keyed_ring_tenant(void)
{
	struct kvmm_ctx *ctx = host_ctx(64, NULL, NULL);
	struct test_kring a, b;
	int32_t sa, sb;

	CU_ASSERT_FATAL(ctx != NULL);
	test_kring_init(ctx, &a, KVMM_RING_F_NS, 5);
	test_kring_init(ctx, &b, KVMM_RING_F_NS, 6);
	sa = ring_kspace(&a, 5, VB, model);
	sb = ring_kspace(&b, 6, VB, model);
	CU_ASSERT(sa >= 0 && sb >= 0 && sa != sb);
	CU_ASSERT_EQUAL(ring_kspace(&a, 6, VB, model), -EPERM);	/* not its namespace */
	ring_ents(&a, 0, 2, true);
	CU_ASSERT_EQUAL(test_kring_io(&a, KVMM_OP_KPUT, (uint32_t)sa, 2), 2);
	/* b cannot name a's space, to read, probe or delete */
	ring_ents(&b, 0, 2, false);
	CU_ASSERT_EQUAL(test_kring_io(&b, KVMM_OP_KGET, (uint32_t)sa, 2), -EINVAL);
	CU_ASSERT_EQUAL(ring_kkeys(&b, KVMM_OP_KEXISTS, (uint32_t)sa, 0, 2), -EINVAL);
	CU_ASSERT_EQUAL(ring_kkeys(&b, KVMM_OP_KDELETE, (uint32_t)sa, 0, 2), -EINVAL);
	/* its own space of the same model holds none of a's values */
	CU_ASSERT_EQUAL(ring_kkeys(&b, KVMM_OP_KEXISTS, (uint32_t)sb, 0, 2), 0);
	CU_ASSERT_EQUAL(ring_kkeys(&a, KVMM_OP_KEXISTS, (uint32_t)sa, 0, 2), 2);
	test_kring_exit(&a);
	test_kring_exit(&b);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* ---- what one command may make the context hold ---- */

#define BIG_VB		(4u << 20)	/* a value of 32768 pages of 128 bytes */
#define BIG_PAGES	(BIG_VB / 128)
#define BIG_N		24
#define JOB_BOUND	(1 << 20)	/* a window, a frame list, a value's node */

/*
 * The metadata a keyed command makes the context allocate follows what
 * it moves, never its entries times the value's pages: BIG_N gets of a
 * value of 32768 pages, all into one buffer (a miss each, then a hit
 * each), and the put of it, each peak at most JOB_BOUND over what the
 * context held before (not BIG_N x 32768 records of a page).
 */
static void test_keyed_job_memory_follows_what_it_moves(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_ctx *ctx = host_ctx(BIG_PAGES + 64, NULL, &ta);
	uint8_t *buf = malloc(BIG_VB), *src = malloc(BIG_VB);
	struct kvmm_key keys[BIG_N];
	void *dst[BIG_N];
	int32_t res[BIG_N];
	long long before;
	uint32_t sp, i;

	CU_ASSERT_FATAL(ctx != NULL && buf && src);
	sp = space_of(ctx, 0, BIG_VB);
	for (i = 0; i < BIG_N; i++) {
		keys[i] = key_of(7);
		dst[i] = buf;
	}
	before = ta.peak_bytes = ta.live_bytes;
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, sp, keys, dst, BIG_N, res), 0);
	for (i = 0; i < BIG_N; i++)
		CU_ASSERT_EQUAL(res[i], -ENOENT);
	CU_ASSERT(ta.peak_bytes - before <= JOB_BOUND);
	CU_ASSERT_EQUAL(ta.live_bytes, before);		/* all given back */
	CHECK_OK(ctx);

	stamp(src, BIG_VB, 7);
	before = ta.peak_bytes = ta.live_bytes;
	CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, sp, keys, (const void *const *)&src, 1, res), 1);
	CU_ASSERT(ta.peak_bytes - before <= JOB_BOUND);
	CHECK_OK(ctx);

	before = ta.peak_bytes = ta.live_bytes;
	memset(buf, 0, BIG_VB);
	CU_ASSERT_EQUAL(kvmm_keyed_get(ctx, sp, keys, dst, BIG_N, res), BIG_N);
	for (i = 0; i < BIG_N; i++)
		CU_ASSERT_EQUAL(res[i], 0);
	CU_ASSERT(stamped(buf, BIG_VB, 7));
	CU_ASSERT(ta.peak_bytes - before <= JOB_BOUND);
	CU_ASSERT_EQUAL(ta.live_bytes, before);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	free(buf);
	free(src);
}

#define MID_PAGES	4096		/* 8 of them pass the frames between breaths */
#define MID_VB		(MID_PAGES * 128u)
#define MID_LIST	(8 * MID_PAGES * sizeof(int32_t))	/* their frame list */
#define MID_EDGE	(MID_PAGES * (PS + 1) * sizeof(int32_t))	/* a value's edge */

/*
 * An allocator that, for blocks of @size[0] or @size[1], looks whether
 * the context's lock is free while the block is allocated: another
 * thread takes it (and is waited for, for long, only when it is held: a
 * failure).
 */
struct lock_probe {
	struct kvmm_ctx *ctx;
	size_t size[2];
	unsigned seen[2], free[2];
	pthread_t t;
	bool waiting;
};

static void *lock_taker(void *arg)
{
	kvmm_lock(arg);
	kvmm_unlock(arg);
	return NULL;
}

static void *probe_alloc(size_t size, void *priv)
{
	struct lock_probe *lp = priv;
	int k = size == lp->size[0] ? 0 : size == lp->size[1] ? 1 : -1;
	struct timespec ts;

	if (lp->ctx && k >= 0 && !lp->waiting &&
	    !pthread_create(&lp->t, NULL, lock_taker, lp->ctx)) {
		lp->seen[k]++;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		if (!pthread_timedjoin_np(lp->t, NULL, &ts))
			lp->free[k]++;
		else
			lp->waiting = true;	/* joined once the command is done */
	}
	return malloc(size);
}

static void probe_free(void *ptr, size_t size, void *priv)
{
	(void)size;
	(void)priv;
	free(ptr);
}

static const struct kvmm_alloc_ops probe_ops = { .alloc = probe_alloc, .free = probe_free };

/*
 * Through a ring, a KPUT and a KGET of 8 values of 4096 pages each (all
 * at one region of the buffer) take and give back 32768 frames: the
 * frame list (128 KiB) and each value's edge in the index (80 KiB) are
 * allocated with the lock free (another thread takes it meanwhile), the
 * lock is let go between values on the way,
 * and every value is stored and read whole, the invariants holding
 * after each.
 */
static void test_keyed_ring_long_job_lets_the_lock_go(void)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct lock_probe lp = { .size = { MID_LIST, MID_EDGE } };
	struct kvmm_ctx *ctx = NULL;
	struct test_kring r;
	struct kvmm_kent *e;
	int32_t sp;
	uint32_t i;

	p.host_pages = 8 * MID_PAGES + 64;
	p.host_node = KVMM_NODE_NEAREST;
	p.alloc = &probe_ops;
	p.alloc_priv = &lp;
	CU_ASSERT_FATAL(kvmm_create(&p, &ctx) == 0);
	test_kring_init(ctx, &r, 0, 0);
	sp = ring_kspace(&r, 0, MID_VB, model);
	CU_ASSERT_FATAL(sp >= 0);
	e = (void *)r.mem;
	for (i = 0; i < 8; i++)
		e[i] = (struct kvmm_kent){ .key = key_of(i), .off = 4096, .buf = 1, .res = 1 };
	stamp(r.mem + 4096, MID_VB, 3);
	lp.ctx = ctx;
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sp, 8), 8);
	lp.ctx = NULL;
	if (lp.waiting)
		pthread_join(lp.t, NULL);
	CU_ASSERT_EQUAL(lp.seen[0], 1);
	CU_ASSERT_EQUAL(lp.free[0], 1);
	CU_ASSERT_EQUAL(lp.seen[1], 8);
	CU_ASSERT_EQUAL(lp.free[1], 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 8);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), 8 * MID_PAGES);
	CHECK_OK(ctx);
	for (i = 0; i < 8; i++)
		e[i].res = 1;
	memset(r.mem + 4096, 0, MID_VB);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, (uint32_t)sp, 8), 8);
	for (i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(e[i].res, 0);
	CU_ASSERT(stamped(r.mem + 4096, MID_VB, 3));
	CHECK_OK(ctx);
	test_kring_exit(&r);
	kvmm_destroy(ctx);
}

static int32_t ring_set(struct test_kring *r, uint32_t key, uint64_t value)
{
	kvmm_prep_set(TEST_SQE(&r->ring), key, value);
	return test_ring1(&r->ring, NULL);
}

/*
 * A namespace's keyed commands may make the context hold at most
 * ns_kjob_bytes: a KPUT of 100 values (its window alone is 300 pages'
 * records) past a 32 KiB limit is refused with -EDQUOT and changes
 * nothing; a small one passes; the tenant cannot raise its own limit; the
 * operator can, and then the big one passes.
 */
static void test_keyed_ns_kjob_bytes_limit(void)
{
	struct kvmm_ctx *ctx = host_ctx(512, NULL, NULL);
	struct test_kring op, t;
	struct kvmm_kent *e;
	uint64_t free_pages;
	int32_t sp;
	uint32_t i;

	CU_ASSERT_FATAL(ctx != NULL);
	test_kring_init(ctx, &op, 0, 0);
	test_kring_init(ctx, &t, KVMM_RING_F_NS, 5);
	sp = ring_kspace(&t, 5, VB, model);
	CU_ASSERT_FATAL(sp >= 0);
	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, 4095), -EINVAL);
	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, (1ull << 40) + 1), -EINVAL);
	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, 32 << 10), 0);
	CU_ASSERT_EQUAL(ring_set(&t, KVMM_SET_NS_KJOB_BYTES, 1ull << 30), -EPERM);

	free_pages = test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE);
	e = ring_ents(&t, 0, 100, true);
	CU_ASSERT_EQUAL(test_kring_io(&t, KVMM_OP_KPUT, (uint32_t)sp, 100), -EDQUOT);
	for (i = 0; i < 100; i++)
		CU_ASSERT_EQUAL(e[i].res, 12345);	/* not touched */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), free_pages);
	CHECK_OK(ctx);

	ring_ents(&t, 0, 4, true);
	CU_ASSERT_EQUAL(test_kring_io(&t, KVMM_OP_KPUT, (uint32_t)sp, 4), 4);
	ring_ents(&t, 0, 100, false);
	CU_ASSERT_EQUAL(test_kring_io(&t, KVMM_OP_KGET, (uint32_t)sp, 100), -EDQUOT);
	CHECK_OK(ctx);

	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, KVMM_NS_KJOB_BYTES_DEFAULT), 0);
	ring_ents(&t, 0, 100, true);
	CU_ASSERT_EQUAL(test_kring_io(&t, KVMM_OP_KPUT, (uint32_t)sp, 100), 100);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 100);
	test_kring_exit(&op);
	test_kring_exit(&t);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* ---- the NVMe tier below ---- */

/* A file in this run's scratch directory (tests/helpers.c). */
#define nvme_file(name)	test_tmp_file(name)

/*
 * A host tier of 8 values over an NVMe tier of 64: background writeback
 * keeps half the host tier free, so most values go down.
 */
static struct kvmm_ctx *nvme_ctx(const char *path, struct kvmm_nvme_arg *arg)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;

	p.host_pages = 8 * VPAGES;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = 64 * VPAGES;
	p.nvme_path = path;
	p.nvme_arg = arg;
	p.nvme_qd = 4;
	p.host_wmark_low = 4 * VPAGES;
	p.host_wmark_high = 6 * VPAGES;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

/*
 * Put values 0 .. n - 1 one at a time, each time letting writeback finish
 * (a put that outruns the disk finds the host tier full: it writes the
 * oldest values down itself, but those in flight it cannot wait for).
 */
static void fill(struct kvmm_ctx *ctx, uint32_t sp, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		CU_ASSERT_EQUAL(put_range(ctx, sp, i, i + 1), 1);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	}
}

static void test_keyed_nvme_roundtrip(void)
{
	const char *path = nvme_file("roundtrip");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;

	fill(ctx, sp, 30);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 30);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) >= 20 * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) +
			test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), 30 * VPAGES);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_WRITEBACK_RUNS) > 0);
	for (i = 0; i < 30; i++)	/* from NVMe or the host, byte for byte */
		CU_ASSERT_EQUAL(get_one(ctx, sp, i), 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_BYTES_OUT) > 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 30);	/* a get moves nothing */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Values of @vb bytes each, three of them into a host tier of two with
 * background writeback off: the third put needs room, and direct reclaim
 * writes the oldest value to NVMe itself (throttled, not dropped) when
 * it fits the row of scratch the write uses (16 pages here), and drops
 * it otherwise.  Return: the context, @sp its space, for the caller.
 */
static struct kvmm_ctx *outrun(const char *path, uint64_t vb, uint32_t *sp)
{
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	uint32_t pages = (uint32_t)((vb + 127) / 128), i;
	uint8_t *v = malloc(vb);
	struct kvmm_ctx *ctx = NULL;

	p.host_pages = 2 * pages;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = 8 * pages;
	p.nvme_path = path;
	p.host_wmark_low = 0;	/* no background writeback: only the writer writes */
	p.host_wmark_high = 1;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	*sp = space_of(ctx, 0, vb);
	for (i = 0; i < 3; i++) {
		struct kvmm_key k = key_of(i);
		const void *src = v;
		int32_t res = 1;

		stamp(v, vb, i);
		CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, *sp, &k, &src, 1, &res), 1);
		CU_ASSERT_EQUAL(res, 0);
		CHECK_OK(ctx);
	}
	free(v);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WRITEBACK_RUNS), 0);
	return ctx;
}

static void test_keyed_nvme_writer_throttled(void)
{
	const char *path = nvme_file("outrun");
	uint32_t sp;
	struct kvmm_ctx *ctx = outrun(path, VB, &sp);

	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_THROTTLE_PAGES), VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 3);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);	/* back from NVMe, byte for byte */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* A value longer than a row: the worker's to write, so the writer drops it. */
static void test_keyed_nvme_long_value_dropped(void)
{
	const char *path = nvme_file("outrun-long");
	uint32_t sp;
	struct kvmm_ctx *ctx = outrun(path, 20 * 128, &sp);

	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_THROTTLE_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 2);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 1);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A flush writes keyed values longer than a page-table row too (their
 * identities do not fit the tier's row of scratch): every page of both
 * values left on the host goes down, and a restart finds them.
 */
static void test_keyed_flush_long_values(void)
{
	const char *path = nvme_file("flush-long");
	struct kvmm_flush_info info;
	uint32_t sp;
	struct kvmm_ctx *ctx = outrun(path, 20 * 128, &sp);

	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 2);
	CU_ASSERT_EQUAL(kvmm_flush(ctx, 0, &info), 2 * 20);
	CU_ASSERT_EQUAL(info.left, 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	ctx = NULL;
	{
		struct kvmm_params p = test_params(PS, 16, 4, 64);

		p.host_pages = 2 * 20;
		p.host_node = KVMM_NODE_NEAREST;
		p.nvme_pages = 8 * 20;
		p.nvme_path = path;
		CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	}
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 2);	/* recovered */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* What was written down survives a restart; another model sees none of it. */
static void test_keyed_nvme_restart(void)
{
	const char *path = nvme_file("restart");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	struct kvmm_keyed_spec spec = { .value_bytes = VB, .model_id = "other" };
	struct kvmm_key k = key_of(0);
	uint32_t sp = space_of(ctx, 0, VB), other, i, back = 0;
	uint64_t on_nvme;

	fill(ctx, sp, 30);
	on_nvme = test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) / VPAGES;
	CU_ASSERT(on_nvme >= 20);
	kvmm_destroy(ctx);

	ctx = nvme_ctx(path, NULL);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), 1);	/* recovered */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), on_nvme);
	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &other), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, other, &k, 1, NULL), 0);
	CU_ASSERT_EQUAL(space_of(ctx, 0, VB), sp);	/* the same space, found again */
	for (i = 0; i < 30; i++) {
		int r = get_one(ctx, sp, i);

		CU_ASSERT(r == 0 || r == -ENOENT);
		back += r == 0;
	}
	CU_ASSERT_EQUAL(back, on_nvme);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Values still on the host tier, among spaces that hold none, are
 * written by a flush and come back whole after a restart.
 */
static void test_keyed_flush_restart(void)
{
	const char *path = nvme_file("flush");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;
	struct kvmm_flush_info info;

	for (i = 1; i <= 12; i++)	/* empty spaces: more roots than nodes */
		space_of(ctx, i, VB);
	fill(ctx, sp, 4);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), 0);	/* all on the host */
	CU_ASSERT_EQUAL(kvmm_flush(ctx, 0, &info), 4 * VPAGES);
	CU_ASSERT_EQUAL(info.left, 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);

	ctx = nvme_ctx(path, NULL);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 4);
	sp = space_of(ctx, 0, VB);
	for (i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(get_one(ctx, sp, i), 0);	/* checks the bytes */
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* Values flipped or torn on their way to NVMe are misses, and are dropped. */
static void test_keyed_nvme_flip_tear(void)
{
	const char *path = nvme_file("flip");
	struct kvmm_nvme_arg arg = { .flip_every = 1 };
	struct kvmm_ctx *ctx;
	uint32_t sp, i, pass, bad = 0;

	for (pass = 0; pass < 2; pass++) {
		arg = (struct kvmm_nvme_arg){ .flip_every = pass ? 0 : 1,
					      .tear_every = pass ? 1 : 0 };
		ctx = nvme_ctx(path, &arg);
		sp = space_of(ctx, 0, VB);
		fill(ctx, sp, 30);
		for (i = 0; i < 30; i++) {
			int r = get_one(ctx, sp, i);

			CU_ASSERT(r == 0 || r == -EBADMSG);
			bad += r == -EBADMSG;
		}
		CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL) >= 20);
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), 0);
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		unlink(path);
	}
	CU_ASSERT(bad >= 40);
}

/*
 * A context on @path whose NVMe reads wait while *@hold (@arg: the
 * latch), space *@sp filled with 30 values, most on NVMe, and on ring @g
 * (set up here) a KGET of value 0, the oldest, held on the I/O worker
 * until the test clears *@hold.
 */
static struct kvmm_ctx *post_held_get(const char *path, int *hold, struct kvmm_nvme_arg *arg,
				      uint32_t *sp, struct test_kring *g)
{
	struct kvmm_ctx *ctx;
	struct kvmm_sqe *sqe;

	*hold = 1;
	*arg = (struct kvmm_nvme_arg){ .latch = test_hold_worker_reads, .latch_arg = hold };
	ctx = nvme_ctx(path, arg);
	*sp = space_of(ctx, 0, VB);
	fill(ctx, *sp, 30);
	test_kring_init(ctx, g, 0, 0);
	ring_ents(g, 0, 1, false);
	sqe = TEST_SQE(&g->ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 1);
	sqe->arg = *sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g->ring), 1);
	return ctx;
}

/*
 * A value a get reads from NVMe is not deleted meanwhile: KDELETE with a
 * result per key says -EBUSY for it, and the get still completes whole.
 */
static void test_keyed_nvme_ring_busy(void)
{
	const char *path = nvme_file("busy");
	struct kvmm_nvme_arg arg;
	struct test_kring g, d;
	struct kvmm_kent *e;
	struct kvmm_cqe *cqe;
	int hold;
	uint32_t sp;
	struct kvmm_ctx *ctx = post_held_get(path, &hold, &arg, &sp, &g);

	test_kring_init(ctx, &d, 0, 0);
	CU_ASSERT_EQUAL(ring_keach(&d, KVMM_OP_KDELETE, sp, 0, 2), 1);
	e = (void *)d.mem;
	CU_ASSERT_EQUAL(e[0].res, -EBUSY);	/* being read: it stays */
	CU_ASSERT_EQUAL(e[1].res, 0);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 1);
	kvmm_cqe_seen(&g.ring, cqe);
	e = (void *)g.mem;
	CU_ASSERT_EQUAL(e[0].res, 0);
	CU_ASSERT(stamped(g.mem + e[0].off, VB, 0));
	CU_ASSERT_EQUAL(ring_keach(&d, KVMM_OP_KDELETE, sp, 0, 1), 1);	/* free now */
	test_kring_exit(&g);
	test_kring_exit(&d);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * The limit is on what a namespace's commands hold together: a KGET that
 * waits on the I/O worker (held by the latch) keeps its memory counted,
 * so a second one of the namespace (16 entries each), that would fit
 * alone, gets -EDQUOT
 * until the first completes.  The limit is set to one and a half times
 * what such a command takes, found by raising it until one passes.
 */
static void test_keyed_ns_kjob_bytes_in_flight(void)
{
	const char *path = nvme_file("inflight");
	int hold = 1;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads, .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(path, &arg);
	uint32_t sp = space_of(ctx, 0, VB);
	struct test_kring g, d;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	struct kvmm_kent *e;
	uint64_t one;

	fill(ctx, sp, 30);
	test_kring_init(ctx, &g, 0, 0);
	test_kring_init(ctx, &d, 0, 0);
	for (one = 4096;; one += 64) {		/* what a KGET of 16 takes */
		CU_ASSERT_EQUAL_FATAL(ring_set(&d, KVMM_SET_NS_KJOB_BYTES, one), 0);
		ring_ents(&d, 1000, 16, false);
		if (test_kring_io(&d, KVMM_OP_KGET, sp, 16) != -EDQUOT)
			break;
	}
	CU_ASSERT(one > 4096);		/* above the floor: a measure of it */
	CU_ASSERT_EQUAL(ring_set(&d, KVMM_SET_NS_KJOB_BYTES, one + one / 2), 0);
	ring_ents(&g, 0, 16, false);		/* values 0..15: the oldest, on NVMe */
	sqe = TEST_SQE(&g.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 16);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g.ring), 1);
	e = ring_ents(&d, 1000, 16, false);
	CU_ASSERT_EQUAL(test_kring_io(&d, KVMM_OP_KGET, sp, 16), -EDQUOT);
	CU_ASSERT_EQUAL(e[0].res, 12345);
	CHECK_OK(ctx);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 16);
	kvmm_cqe_seen(&g.ring, cqe);
	CU_ASSERT(stamped(g.mem + 4096, VB, 0));
	ring_ents(&d, 1000, 16, false);
	CU_ASSERT_EQUAL(test_kring_io(&d, KVMM_OP_KGET, sp, 16), 0);	/* misses, not refused */
	test_kring_exit(&g);
	test_kring_exit(&d);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

#define SL_PAGES	4096			/* a value of 512 KiB */
#define SL_VB		(SL_PAGES * 128u)
#define SL_G		36			/* 18 MiB: more than one slice */

/*
 * Holds the worker's reads while @hold, and, once the other ring's value
 * (@h_res) has settled, until @release: what the worker reads after that
 * is the long job's rest.
 */
struct slice_latch {
	int hold, release;
	const int32_t *h_res;
};

static void slice_latch(void *arg, uint32_t site, uint32_t chan)
{
	struct slice_latch *sl = arg;

	if (site != KVMM_NVME_SITE_READ || !chan)
		return;
	while (__atomic_load_n(&sl->hold, __ATOMIC_ACQUIRE) ||
	       (*sl->h_res != 12345 && !__atomic_load_n(&sl->release, __ATOMIC_ACQUIRE)))
		usleep(1000);
}

/*
 * A long KGET from NVMe (36 values of 512 KiB) does not hold another
 * ring's KGET queued behind it on the I/O worker: the worker copies the
 * long one a slice at a time, queued again behind the other after its
 * first slice, so the other completes while the long one still has
 * values to read; then the long one completes whole.
 */
static void test_keyed_nvme_long_get_is_sliced(void)
{
	const char *path = nvme_file("slice");
	struct slice_latch sl = { .hold = 1 };
	struct kvmm_nvme_arg arg = { .latch = slice_latch, .latch_arg = &sl };
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_kent *eg, *eh;
	struct kvmm_ctx *ctx = NULL;
	struct test_kring g, h;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	uint8_t *v = malloc(SL_VB);
	const void *src = v;
	uint32_t sp, i;

	p.host_pages = 4 * SL_PAGES;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = 48 * SL_PAGES;
	p.nvme_path = path;
	p.nvme_arg = &arg;
	p.nvme_qd = 4;
	p.host_wmark_low = 2 * SL_PAGES;
	p.host_wmark_high = 3 * SL_PAGES;
	CU_ASSERT_FATAL(v && !kvmm_create(&p, &ctx));
	sp = space_of(ctx, 0, SL_VB);
	for (i = 0; i < SL_G + 8; i++) {	/* 0 .. SL_G on NVMe, the newest on the host */
		struct kvmm_key k = key_of(i);

		stamp(v, SL_VB, i);
		CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, sp, &k, &src, 1, NULL), 1);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	}
	test_kring_init(ctx, &g, 0, 0);
	test_kring_init(ctx, &h, 0, 0);
	eg = (void *)g.mem;
	for (i = 0; i < SL_G; i++)
		eg[i] = (struct kvmm_kent){ .key = key_of(1 + i), .off = 4096, .buf = 1,
					    .res = 12345 };
	eh = (void *)h.mem;
	eh[0] = (struct kvmm_kent){ .key = key_of(0), .off = 4096, .buf = 1, .res = 12345 };
	sl.h_res = &eh[0].res;
	sqe = TEST_SQE(&g.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, SL_G);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g.ring), 1);
	sqe = TEST_SQE(&h.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 1);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&h.ring), 1);
	__atomic_store_n(&sl.hold, 0, __ATOMIC_RELEASE);

	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&h.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 1);
	kvmm_cqe_seen(&h.ring, cqe);
	CU_ASSERT_EQUAL(eh[0].res, 0);
	CU_ASSERT(stamped(h.mem + 4096, SL_VB, 0));
	/* the long one has not completed: its rest waits behind the latch */
	CU_ASSERT_EQUAL(kvmm_peek_cqe(&g.ring, &cqe), -EAGAIN);
	CU_ASSERT_EQUAL(eg[SL_G - 1].res, 12345);
	__atomic_store_n(&sl.release, 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, SL_G);
	kvmm_cqe_seen(&g.ring, cqe);
	for (i = 0; i < SL_G; i++)
		CU_ASSERT_EQUAL(eg[i].res, 0);
	test_kring_exit(&g);
	test_kring_exit(&h);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
	free(v);
}

/* Submit a KGET of value 0 (the oldest: on NVMe) into @g's buffer 1. */
static struct kvmm_kent *submit_get_of_oldest(struct test_kring *g, uint32_t sp)
{
	struct kvmm_kent *e = ring_ents(g, 0, 1, false);
	struct kvmm_sqe *sqe = TEST_SQE(&g->ring);

	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 1);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g->ring), 1);
	return e;
}

struct register_call {
	struct kvmm_ring *ring;
	struct kvmm_iovec iov;
	int ret;
	int done;
};

static void *register_thread(void *arg)
{
	struct register_call *c = arg;

	c->ret = kvmm_ring_register_buffers(c->ring, &c->iov, 1);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Registering new buffers while a get from NVMe still writes into the old
 * one waits for that get: the caller may free the old memory once the
 * call returns (the I/O worker used to write into it after).
 */
static void test_keyed_nvme_register_waits_for_a_get(void)
{
	const char *path = nvme_file("register");
	int hold = 1;
	struct kvmm_nvme_arg arg = { .latch = test_hold_worker_reads, .latch_arg = &hold };
	struct kvmm_ctx *ctx = nvme_ctx(path, &arg);
	uint32_t sp = space_of(ctx, 0, VB);
	uint8_t other[64];
	struct register_call c;
	struct kvmm_kent *e;
	struct kvmm_cqe *cqe = NULL;
	struct test_kring g;
	pthread_t t;

	fill(ctx, sp, 30);
	test_kring_init(ctx, &g, 0, 0);
	e = submit_get_of_oldest(&g, sp);
	CU_ASSERT_EQUAL(kvmm_peek_cqe(&g.ring, &cqe), -EAGAIN);	/* held on the worker */
	c = (struct register_call){ .ring = &g.ring, .iov = { other, sizeof(other) } };
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, register_thread, &c), 0);
	usleep(100 * 1000);
	CU_ASSERT_EQUAL(__atomic_load_n(&c.done, __ATOMIC_ACQUIRE), 0);	/* waits */
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(pthread_join(t, NULL), 0);
	CU_ASSERT_EQUAL(c.ret, 0);
	/* the get was done when the call returned: its completion is there */
	CU_ASSERT_EQUAL_FATAL(kvmm_peek_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 1);
	kvmm_cqe_seen(&g.ring, cqe);
	CU_ASSERT_EQUAL(e[0].res, 0);
	CU_ASSERT(stamped(g.mem + e[0].off, VB, 0));
	test_kring_exit(&g);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* Through a ring, a get from NVMe completes later, on the I/O worker. */
static void test_keyed_nvme_ring(void)
{
	const char *path = nvme_file("ring");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;
	struct kvmm_kent *e;
	struct test_kring r;

	fill(ctx, sp, 30);
	test_kring_init(ctx, &r, 0, 0);
	e = ring_ents(&r, 0, 30, false);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, sp, 30), 30);
	for (i = 0; i < 30; i++) {
		CU_ASSERT_EQUAL(e[i].res, 0);
		CU_ASSERT(stamped(r.mem + e[i].off, VB, i));
	}
	CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_NVME_BYTES_OUT) > 0);
	test_kring_exit(&r);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* ---- a put larger than the host tier, and puts outrunning the disk ---- */

/*
 * Every value 0 .. @n - 1 is back byte for byte, from the host or NVMe,
 * and reclaim dropped none of them.
 */
static void all_back(struct kvmm_ctx *ctx, uint32_t sp, uint32_t n)
{
	uint32_t i, back = 0;

	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	for (i = 0; i < n; i++)
		back += get_one(ctx, sp, i) == 0;
	CU_ASSERT_EQUAL(back, n);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), n);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), 0);
	CHECK_OK(ctx);
}

/*
 * A put of 40 values into a host tier of 8 over NVMe of 64 streams
 * through the host tier to NVMe: every value stored, none dropped.  A put
 * larger than the two together fails whole, at once, and what was stored
 * stays.
 */
static void test_keyed_nvme_put_larger_than_host(void)
{
	const char *path = nvme_file("large");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB);

	CU_ASSERT_EQUAL(put_range(ctx, sp, 0, 40), 40);
	CHECK_OK(ctx);
	all_back(ctx, sp, 40);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) >= 32 * VPAGES);
	CU_ASSERT_EQUAL(put_range(ctx, sp, 100, 100 + 73), 0);	/* 8 + 64 hold 72 */
	CU_ASSERT_EQUAL(get_one(ctx, sp, 100), -ENOENT);
	all_back(ctx, sp, 40);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Puts one after another with no pause for the disk: the host tier makes
 * room by writing its oldest values down, never by dropping them, while
 * NVMe has room (60 values in 8 + 64).
 */
static void test_keyed_nvme_puts_outrun_disk(void)
{
	const char *path = nvme_file("outrun");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;

	for (i = 0; i < 60; i += 3)
		CU_ASSERT_EQUAL(put_range(ctx, sp, i, i + 3), 3);
	all_back(ctx, sp, 60);
	kvmm_destroy(ctx);
	unlink(path);
}

/* The same through a ring: the put completes later, on the I/O worker. */
static void test_keyed_nvme_ring_put_larger_than_host(void)
{
	const char *path = nvme_file("ringlarge");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;
	struct kvmm_kent *e;
	struct test_kring r;

	test_kring_init(ctx, &r, 0, 0);
	e = ring_ents(&r, 0, 50, true);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, sp, 50), 50);
	for (i = 0; i < 50; i++)
		CU_ASSERT_EQUAL(e[i].res, 0);
	e = ring_ents(&r, 0, 50, false);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, sp, 50), 50);
	for (i = 0; i < 50; i++) {
		CU_ASSERT_EQUAL(e[i].res, 0);
		CU_ASSERT(stamped(r.mem + e[i].off, VB, i));
	}
	test_kring_exit(&r);
	all_back(ctx, sp, 50);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * Every write to NVMe fails: a put that waits for writeback gives up
 * waiting after a few rounds and reclaims as before (the oldest values
 * dropped), and the context stays whole.
 */
static void test_keyed_nvme_put_write_fails(void)
{
	const char *path = nvme_file("wfail");
	struct kvmm_nvme_arg arg = { .fault = -EIO, .fault_every = 1,
				     .fault_sites = KVMM_NVME_SITE_WRITE };
	struct kvmm_ctx *ctx = nvme_ctx(path, &arg);
	uint32_t sp = space_of(ctx, 0, VB), i, back = 0;
	int ret;

	ret = put_range(ctx, sp, 0, 20);
	CU_ASSERT(ret >= 8 && ret <= 20);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	for (i = 0; i < 20; i++)
		back += get_one(ctx, sp, i) == 0;
	CU_ASSERT(back >= 1 && back <= 8);	/* what the host tier holds */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/* ---- the space table: per-namespace limits, removal, recovery ---- */

static int try_space(struct kvmm_ctx *ctx, uint32_t ns, uint64_t vb, uint32_t *id)
{
	struct kvmm_keyed_spec spec = { .ns = ns, .value_bytes = vb, .model_id = model };

	return kvmm_keyed_space(ctx, &spec, id);
}

static int set_key(struct kvmm_ctx *ctx, uint32_t key, uint64_t val)
{
	struct kvmm_sqe set = { .opcode = KVMM_OP_SET, .arg = key, .arg2 = val };

	return kvmm_ioctl(ctx, &set, NULL, 0);
}

/*
 * One namespace holds at most ns_kspaces spaces (default 64): past them it
 * is refused with a line naming the limit, and every other namespace still
 * registers; the limit moves with SET, within the table's 1,024, which is
 * then the last word.
 */
static void test_keyed_ns_space_limit(void)
{
	struct test_log log = { 0 };
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	uint32_t i, id, first;

	p.host_pages = 64;
	p.host_node = KVMM_NODE_NEAREST;
	p.log = test_log_fn;
	p.log_priv = &log;
	CU_ASSERT_FATAL(kvmm_create(&p, &ctx) == 0);
	for (i = 0; i < KVMM_NS_KSPACES_DEFAULT; i++)
		CU_ASSERT_EQUAL(try_space(ctx, 7, VB + i, &id), 0);
	CU_ASSERT_EQUAL(try_space(ctx, 7, VB + i, &id), -ENOSPC);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "namespace 7 holds 64 spaces"));
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "ns_kspaces"));
	CU_ASSERT_EQUAL(try_space(ctx, 7, VB, &id), 0);		/* one it holds: found */
	CU_ASSERT_EQUAL(try_space(ctx, 0, VB, &first), 0);	/* others are not held up */
	CU_ASSERT_EQUAL(try_space(ctx, 8, VB, &id), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), KVMM_NS_KSPACES_DEFAULT + 2);
	CHECK_OK(ctx);

	CU_ASSERT_EQUAL(set_key(ctx, KVMM_SET_NS_KSPACES, KVMM_KSPACES_MAX + 1), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "ns_kspaces: 1025"));
	CU_ASSERT_EQUAL(set_key(ctx, KVMM_SET_NS_KSPACES, 1), 0);	/* held ones stay */
	CU_ASSERT_EQUAL(try_space(ctx, 8, VB + 1, &id), -ENOSPC);
	CU_ASSERT_EQUAL(try_space(ctx, 8, VB, &id), 0);
	CU_ASSERT_EQUAL(set_key(ctx, KVMM_SET_NS_KSPACES, KVMM_KSPACES_MAX), 0);
	for (i = KVMM_NS_KSPACES_DEFAULT; test_stat(ctx, KVMM_STAT_KEYED_SPACES) < KVMM_KSPACES_MAX; i++)
		CU_ASSERT_EQUAL_FATAL(try_space(ctx, 7, VB + i, &id), 0);
	CU_ASSERT_EQUAL(try_space(ctx, 9, VB, &id), -ENOSPC);	/* the table is full */
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "the context holds 1024 spaces"));
	CU_ASSERT_EQUAL(kvmm_keyed_space_remove(ctx, first), 0);	/* removing makes room */
	CU_ASSERT_EQUAL(try_space(ctx, 9, VB, &id), 0);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * Registering and removing spaces under every allocation failure in turn:
 * a failed registration takes no slot and changes nothing, the table
 * grows past its first 8 slots, and a removed slot is taken again.
 */
static void test_keyed_space_alloc_faults(void)
{
	unsigned long n;

	for (n = 1; n < 100; n++) {
		struct test_alloc ta = { 0 };
		struct kvmm_ctx *ctx = host_ctx(64, NULL, &ta);
		uint32_t i, id, ok = 0, first = ~0u;
		int r;

		CU_ASSERT_FATAL(ctx != NULL);
		ta.fail_at = ta.calls + n;
		for (i = 0; i < 10; i++) {
			r = try_space(ctx, 0, VB + i, &id);
			CU_ASSERT(r == 0 || r == -ENOMEM);
			if (!r && first == ~0u)
				first = id;
			ok += !r;
		}
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), ok);
		if (first != ~0u) {
			CU_ASSERT(kvmm_keyed_space_remove(ctx, first) == 0);
			ok--;
		}
		r = try_space(ctx, 1, VB, &id);
		CU_ASSERT(r == 0 || r == -ENOMEM);
		ok += !r;
		CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), ok);
		CU_ASSERT(r || (id & (KVMM_KSPACES_MAX - 1)) <= 10);	/* a slot at most one past */
		CHECK_OK(ctx);
		kvmm_destroy(ctx);
		CU_ASSERT_EQUAL(ta.live_blocks, 0);
		if (ta.calls < ta.fail_at)
			break;		/* the whole run took fewer: every one was tried */
	}
	CU_ASSERT(n > 3);
}

/*
 * A removed space takes its values with it, on the host tier and on NVMe;
 * its id then names nothing, even once a new space takes its slot, and
 * its namespace may register a new one in its place.
 */
static void test_keyed_space_remove(void)
{
	const char *path = nvme_file("remove");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	struct kvmm_dump_kspace info;
	uint32_t sp = space_of(ctx, 0, VB), keep = space_of(ctx, 1, VB), again, other;
	struct kvmm_key k = key_of(0);

	fill(ctx, sp, 30);
	CU_ASSERT_EQUAL(put_range(ctx, keep, 0, 1), 1);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) > 0);
	CU_ASSERT_EQUAL(kvmm_keyed_space_remove(ctx, sp), 30);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 1);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) +
			test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), VPAGES);
	CHECK_OK(ctx);
	/* the old id names nothing: not even the space that takes its slot */
	CU_ASSERT_EQUAL(kvmm_keyed_space_remove(ctx, sp), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, &k, 1, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, sp, &info), -EINVAL);
	CU_ASSERT_EQUAL(try_space(ctx, 3, VB, &other), 0);
	CU_ASSERT(other != sp);
	CU_ASSERT_EQUAL(other % KVMM_KSPACES_MAX, sp % KVMM_KSPACES_MAX);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, sp, &k, 1, NULL), -EINVAL);
	again = space_of(ctx, 0, VB);		/* registered afresh: empty */
	CU_ASSERT(again != sp);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(ctx, again, &k, 1, NULL), 0);
	CU_ASSERT_EQUAL(get_one(ctx, keep, 0), 0);	/* the other space is untouched */
	CU_ASSERT_EQUAL(kvmm_keyed_info(ctx, keep, &info), 0);
	CU_ASSERT_EQUAL(info.values, 1);
	CU_ASSERT_EQUAL(kvmm_keyed_space_remove(NULL, keep), -EINVAL);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * @op (KDELETE; KEXISTS must refuse it) of space @sp with
 * KVMM_KDELETE_SPACE, @len keys, as namespace @ns: its result.
 */
static int32_t ring_space_op(struct test_kring *r, uint8_t op, uint32_t sp, uint32_t len,
			     uint32_t ns)
{
	struct kvmm_sqe *sqe = TEST_SQE(&r->ring);

	kvmm_prep_rw(sqe, op, 0, 1, 0, len);
	sqe->ns = ns;
	sqe->arg = sp;
	sqe->arg2 = KVMM_KDELETE_SPACE;
	return test_ring1(&r->ring, NULL);
}

/*
 * Through a ring: KDELETE with KVMM_KDELETE_SPACE removes the space, but
 * not while a KGET reads it (-EBUSY, nothing dropped); a ring bound to
 * another namespace cannot name it; the flag takes no keys.
 */
static void test_keyed_space_remove_ring(void)
{
	const char *path = nvme_file("remove-ring");
	struct kvmm_nvme_arg arg;
	struct test_kring g, d, t;
	struct kvmm_cqe *cqe;
	int hold;
	uint32_t sp;
	struct kvmm_ctx *ctx = post_held_get(path, &hold, &arg, &sp, &g);

	test_kring_init(ctx, &d, 0, 0);
	test_kring_init(ctx, &t, KVMM_RING_F_NS, 5);	/* another tenant's */
	CU_ASSERT_EQUAL(ring_space_op(&d, KVMM_OP_KDELETE, sp, 0, 0), -EBUSY);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_VALUES), 30);
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 1);
	kvmm_cqe_seen(&g.ring, cqe);

	CU_ASSERT_EQUAL(ring_space_op(&t, KVMM_OP_KDELETE, sp, 0, 5), -EINVAL);
	CU_ASSERT_EQUAL(ring_space_op(&d, KVMM_OP_KDELETE, sp, 1, 0), -EINVAL);	/* keys */
	CU_ASSERT_EQUAL(ring_space_op(&d, KVMM_OP_KEXISTS, sp, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_VALUES), 30);

	CU_ASSERT_EQUAL(ring_space_op(&d, KVMM_OP_KDELETE, sp, 0, 0), 30);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_SPACES), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_VALUES), 0);
	test_kring_exit(&g);
	test_kring_exit(&d);
	test_kring_exit(&t);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A restart recovers no more spaces per namespace than the limit in force
 * (kvmm_params.ns_kspaces), and says in one line what it skipped.
 */
static void test_keyed_recover_space_limit(void)
{
	const char *path = nvme_file("recover-limit");
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	static const char *const models[] = { "m-a", "m-b", "m-c" };
	uint32_t i, sp;

	for (i = 0; i < 3; i++) {	/* a value in each of 3 spaces of namespace 0 */
		struct kvmm_keyed_spec spec = { .value_bytes = VB, .model_id = models[i] };

		CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &sp), 0);
		CU_ASSERT_EQUAL(put_range(ctx, sp, 100 + i, 101 + i), 1);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	}
	fill(ctx, space_of(ctx, 1, VB), 30);	/* pushes them down to NVMe */
	CU_ASSERT(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES) >= 20 * VPAGES);
	kvmm_destroy(ctx);

	p.host_pages = 8 * VPAGES;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = 64 * VPAGES;
	p.nvme_path = path;
	p.nvme_qd = 4;
	p.ns_kspaces = 2;
	p.log = test_log_fn;
	p.log_priv = &log;
	CU_ASSERT_FATAL(kvmm_create(&p, &ctx) == 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_SPACES), 3);	/* 2 + 1 */
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "recovery skipped 1 keyed values"));
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "1 over the keyed space limits (2 per namespace"));
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	p.ns_kspaces = KVMM_KSPACES_MAX + 1;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "ns_kspaces"));
	unlink(path);
}

/* ---- prefetch: NVMe values read up to the host tier ahead of their get ---- */

/* Keys @from .. @from + @n - 1 */
static void keys_of(struct kvmm_key *k, uint32_t from, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		k[i] = key_of(from + i);
}

/* Whether value @i is on the host tier (its bytes checked: a get from there). */
static bool on_host(struct kvmm_ctx *ctx, uint32_t sp, uint32_t i)
{
	uint64_t nvme = test_stat(ctx, KVMM_STAT_NVME_BYTES_OUT);

	return get_one(ctx, sp, i) == 0 && test_stat(ctx, KVMM_STAT_NVME_BYTES_OUT) == nvme;
}

/*
 * By default a prefetch takes only the free host pages above the low
 * watermark: it evicts nothing, leaves the tier where writeback would not
 * start, and brings the first values of its keys that are on NVMe up, in
 * order; a budget takes fewer.  A get of them then reads the host, byte
 * for byte, and counts as a prefetch hit.
 */
static void test_keyed_prefetch_host_room(void)
{
	const char *path = nvme_file("pf_room");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;
	uint64_t nvme, host, free0, evicts;
	struct kvmm_key k[30];
	int r;

	fill(ctx, sp, 30);
	keys_of(k, 0, 30);
	nvme = test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES);
	host = test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES);
	free0 = test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE);
	evicts = test_stat(ctx, KVMM_STAT_KEYED_EVICTS);
	CU_ASSERT(free0 >= 4 * VPAGES + VPAGES);	/* room for one at least */
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 30, 0, 1u << 5), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 30, 0, KVMM_PREFETCH_RECLAIM), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp + 1, k, 30, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 0, 0, 0), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 1, VPAGES - 1, 0), 0);	/* no room */
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 30, VPAGES, 0), 1);	/* a budget */
	CHECK_OK(ctx);
	r = kvmm_keyed_prefetch(ctx, sp, k, 30, 0, 0);
	CU_ASSERT_EQUAL_FATAL(r, (int)((free0 - VPAGES - 4 * VPAGES) / VPAGES));
	CHECK_OK(ctx);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE) >= 4 * VPAGES);	/* the low mark */
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_EVICTS), evicts);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), nvme - (uint64_t)(r + 1) * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_HOST_PAGES), host + (uint64_t)(r + 1) * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), (uint64_t)(r + 1) * VPAGES);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 1, 0, 0), 0);	/* on the host now */
	for (i = 0; i <= (uint32_t)r; i++)	/* the oldest, in order */
		CU_ASSERT(on_host(ctx, sp, i));
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_HITS), (uint64_t)(r + 1) * VPAGES);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_VALUES), 30);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * With KVMM_PREFETCH_RECLAIM the budget is taken as a put takes room:
 * colder host values make way (written down or dropped, never served
 * wrong), and the values asked for are read up whole.
 */
static void test_keyed_prefetch_reclaim(void)
{
	const char *path = nvme_file("pf_reclaim");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 0, VB), i;
	struct kvmm_key k[6];

	fill(ctx, sp, 30);
	keys_of(k, 0, 6);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 6, 6 * VPAGES, KVMM_PREFETCH_RECLAIM), 6);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), 6 * VPAGES);
	for (i = 0; i < 6; i++)
		CU_ASSERT(on_host(ctx, sp, i));
	for (i = 6; i < 30; i++) {
		int r = get_one(ctx, sp, i);

		CU_ASSERT(r == 0 || r == -ENOENT);
	}
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * struct pf_latch - an NVMe latch that counts the batches of reads and
 * holds the I/O worker's while @hold
 */
struct pf_latch {
	int hold;
	int reads;
};

static void pf_latch(void *arg, uint32_t site, uint32_t chan)
{
	struct pf_latch *l = arg;

	if (site != KVMM_NVME_SITE_READ)
		return;
	__atomic_add_fetch(&l->reads, 1, __ATOMIC_RELAXED);
	test_hold_worker_reads(&l->hold, site, chan);
}

/* Two values' pages: above what is free over the low mark in nvme_ctx() after fill(). */
#define TWO	(KVMM_KPREFETCH_RECLAIM | 2 * VPAGES)

/* A ring's KPREFETCH of keys @from .. @from + @n - 1, tagged @ud: its result. */
static int32_t ring_kprefetch(struct test_kring *r, uint32_t sp, uint32_t from, uint32_t n,
			      uint64_t arg2, uint64_t ud)
{
	struct kvmm_sqe *sqe = TEST_SQE(&r->ring);

	keys_of((void *)r->mem, from, n);
	kvmm_prep_rw(sqe, KVMM_OP_KPREFETCH, 0, 1, 0, n);
	sqe->arg = sp;
	sqe->arg2 = arg2;
	sqe->user_data = ud;
	return test_ring1(&r->ring, NULL);
}

/* PREFETCH's cancel of this ring's prefetches tagged @ud: how many. */
static int32_t ring_pf_cancel(struct test_kring *r, uint64_t ud)
{
	kvmm_prep_prefetch_cancel(TEST_SQE(&r->ring), ud);
	return test_ring1(&r->ring, NULL);
}

/*
 * A ring's KPREFETCH completes at once and reads on the I/O worker; a
 * KGET of the values meanwhile waits for that read instead of reading
 * NVMe again: it completes after it, with the right bytes, from the host
 * tier, and no more reads are issued than the prefetch alone issues (the
 * same two values' worth, measured on values 2 and 3 first).
 */
static void test_keyed_prefetch_ring_get_waits(void)
{
	const char *path = nvme_file("pf_ring");
	struct pf_latch l = { 0, 0 };
	struct kvmm_nvme_arg arg = { .latch = pf_latch, .latch_arg = &l };
	struct kvmm_ctx *ctx = nvme_ctx(path, &arg);
	uint32_t sp = space_of(ctx, 0, VB);
	struct test_kring p, g;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	struct kvmm_kent *e;
	struct kvmm_key k[2];
	int alone;

	fill(ctx, sp, 30);
	keys_of(k, 2, 2);
	__atomic_store_n(&l.reads, 0, __ATOMIC_RELAXED);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 2, 2 * VPAGES, KVMM_PREFETCH_RECLAIM), 2);
	alone = __atomic_load_n(&l.reads, __ATOMIC_RELAXED);
	CU_ASSERT(alone > 0);
	test_kring_init(ctx, &p, 0, 0);
	test_kring_init(ctx, &g, 0, 0);
	__atomic_store_n(&l.hold, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&l.reads, 0, __ATOMIC_RELAXED);
	CU_ASSERT_EQUAL(ring_kprefetch(&p, sp, 0, 2, TWO, 77), 2);	/* started, not waited for */
	CHECK_OK(ctx);
	e = ring_ents(&g, 0, 2, false);
	sqe = TEST_SQE(&g.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 2);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g.ring), 1);
	usleep(20000);
	CU_ASSERT_EQUAL(kvmm_peek_cqe(&g.ring, &cqe), -EAGAIN);	/* waits for the read */
	CHECK_OK(ctx);
	__atomic_store_n(&l.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 2);
	kvmm_cqe_seen(&g.ring, cqe);
	CU_ASSERT_EQUAL(e[0].res, 0);
	CU_ASSERT_EQUAL(e[1].res, 0);
	CU_ASSERT(stamped(g.mem + e[0].off, VB, 0));
	CU_ASSERT(stamped(g.mem + e[1].off, VB, 1));
	CU_ASSERT_EQUAL(__atomic_load_n(&l.reads, __ATOMIC_RELAXED), alone);	/* read once */
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 4 * VPAGES);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_HITS), 2 * VPAGES);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	test_kring_exit(&p);
	test_kring_exit(&g);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A prefetch of more than the I/O worker copies at a time (16 MiB) runs
 * in slices, queued again behind the others' work after each: a KGET of
 * values of its later slices, queued meanwhile, still waits for their
 * reads (parked until they settle) instead of reading NVMe itself, so
 * NVMe is read once for each value, and the KGET counts prefetch hits.
 */
#define BIG_VB		(6u << 20)		/* 49152 pages of 128 bytes */
#define BIG_VP		(BIG_VB / 128)

static void test_keyed_prefetch_sliced_get_waits(void)
{
	const char *path = nvme_file("pf_sliced");
	struct pf_latch l = { 0, 0 };
	struct kvmm_nvme_arg arg = { .latch = pf_latch, .latch_arg = &l };
	struct kvmm_params p = test_params(PS, 16, 4, 64);
	struct kvmm_key k[4], filler[6];
	uint8_t *v = malloc(BIG_VB);
	struct kvmm_ctx *ctx = NULL;
	struct test_kring r, g;
	struct kvmm_iovec iov;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	struct kvmm_kent *e;
	uint64_t out0;
	uint32_t sp, i;

	p.host_pages = 6 * BIG_VP;
	p.host_node = KVMM_NODE_NEAREST;
	p.nvme_pages = 12 * BIG_VP;
	p.nvme_path = path;
	p.nvme_arg = &arg;
	p.host_wmark_low = BIG_VP;
	p.host_wmark_high = 2 * BIG_VP;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	sp = space_of(ctx, 0, BIG_VB);
	for (i = 0; i < 10; i++) {	/* 4 values, then 6 of filler that push them down */
		struct kvmm_key key = key_of(i);
		const void *src = v;

		stamp(v, BIG_VB, i);
		CU_ASSERT_EQUAL(kvmm_keyed_put(ctx, sp, &key, &src, 1, NULL), 1);
		CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
		if (i < 4)
			k[i] = key;
		else
			filler[i - 4] = key;
	}
	CU_ASSERT_EQUAL(kvmm_keyed_delete(ctx, sp, filler, 6, NULL), 6);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_KEYED_NVME_PAGES), 4 * BIG_VP);
	out0 = test_stat(ctx, KVMM_STAT_NVME_BYTES_OUT);
	test_kring_init(ctx, &r, 0, 0);
	test_kring_init(ctx, &g, 0, 0);
	free(g.mem);		/* buffer 1 of two values */
	g.bytes = 4096 + 2 * (size_t)BIG_VB;
	g.mem = calloc(1, g.bytes);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g.mem);
	iov = (struct kvmm_iovec){ g.mem, g.bytes };
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&g.ring, &iov, 1), 0);
	__atomic_store_n(&l.hold, 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_kprefetch(&r, sp, 0, 4, 0, 1), 4);
	e = (void *)g.mem;	/* values 2 and 3: the second slice's */
	for (i = 0; i < 2; i++)
		e[i] = (struct kvmm_kent){ .key = k[2 + i], .off = 4096 + (uint64_t)i * BIG_VB,
					   .buf = 1, .res = 12345 };
	sqe = TEST_SQE(&g.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 2);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g.ring), 1);
	CHECK_OK(ctx);
	__atomic_store_n(&l.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 2);
	kvmm_cqe_seen(&g.ring, cqe);
	CU_ASSERT(stamped(g.mem + 4096, BIG_VB, 2));
	CU_ASSERT(stamped(g.mem + 4096 + BIG_VB, BIG_VB, 3));
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 4 * BIG_VP);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_HITS), 2 * BIG_VP);
	/* NVMe read once: the four values the prefetch moved up, no more */
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_NVME_BYTES_OUT) - out0,
			4ull * BIG_VP * 128);
	test_kring_exit(&r);
	test_kring_exit(&g);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
	free(v);
}

/*
 * The ring that issued a prefetch cancels it by its user_data (another
 * ring's cancel finds nothing): the reads in flight finish, their host
 * pages go back, the values stay on NVMe, prefetch_canceled counts them;
 * a KGET that waited for the read then reads NVMe, byte for byte.
 */
static void test_keyed_prefetch_cancel(void)
{
	const char *path = nvme_file("pf_cancel");
	struct pf_latch l = { 1, 0 };
	struct kvmm_nvme_arg arg = { .latch = pf_latch, .latch_arg = &l };
	struct kvmm_ctx *ctx;
	uint32_t sp;
	struct test_kring p, o, g;
	struct kvmm_cqe *cqe;
	struct kvmm_sqe *sqe;
	struct kvmm_kent *e;
	uint64_t nvme, free0;

	l.hold = 0;
	ctx = nvme_ctx(path, &arg);
	sp = space_of(ctx, 0, VB);
	fill(ctx, sp, 30);
	test_kring_init(ctx, &p, 0, 0);
	test_kring_init(ctx, &o, 0, 0);
	test_kring_init(ctx, &g, 0, 0);
	nvme = test_stat_locked(ctx, KVMM_STAT_KEYED_NVME_PAGES);
	free0 = test_stat_locked(ctx, KVMM_STAT_HOST_PAGES_FREE);
	__atomic_store_n(&l.hold, 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ring_kprefetch(&p, sp, 0, 2, TWO, 99), 2);
	CU_ASSERT_EQUAL(ring_kprefetch(&p, sp, 0, 2, TWO, 98), 0);	/* held by the first */
	CU_ASSERT_EQUAL(ring_kprefetch(&p, sp, 0, 2, 1ull << 40, 97), -EINVAL);
	e = ring_ents(&g, 0, 2, false);
	sqe = TEST_SQE(&g.ring);
	kvmm_prep_rw(sqe, KVMM_OP_KGET, 0, 1, 0, 2);
	sqe->arg = sp;
	CU_ASSERT_EQUAL(kvmm_submit(&g.ring), 1);
	CU_ASSERT_EQUAL(ring_pf_cancel(&o, 99), 0);	/* not its own */
	CU_ASSERT_EQUAL(ring_pf_cancel(&p, 98), 0);
	CU_ASSERT_EQUAL(ring_pf_cancel(&p, 99), 1);
	CU_ASSERT_EQUAL(ring_pf_cancel(&p, 99), 0);	/* once */
	CHECK_OK(ctx);
	__atomic_store_n(&l.hold, 0, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&g.ring, &cqe), 0);
	CU_ASSERT_EQUAL(cqe->res, 2);
	kvmm_cqe_seen(&g.ring, cqe);
	CU_ASSERT(stamped(g.mem + e[0].off, VB, 0));
	CU_ASSERT(stamped(g.mem + e[1].off, VB, 1));
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_CANCELED), 2 * VPAGES);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_KEYED_NVME_PAGES), nvme);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_HOST_PAGES_FREE), free0);
	test_kring_exit(&p);
	test_kring_exit(&o);
	test_kring_exit(&g);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A read that fails leaves the value where it was (an I/O error) or drops
 * it (it failed verification: a miss, never wrong bytes); its host pages
 * go back either way.  A prefetch past its namespace's ns_kjob_bytes is
 * refused whole.
 */
static void test_keyed_prefetch_read_faults(void)
{
	const char *path = nvme_file("pf_fault");
	struct kvmm_nvme_arg arg = { 0 };
	struct kvmm_ctx *ctx = nvme_ctx(path, &arg);
	uint32_t sp = space_of(ctx, 0, VB);
	uint64_t free0;
	struct kvmm_key k[2], many[30];
	struct test_kring op;

	fill(ctx, sp, 30);
	keys_of(k, 0, 2);
	keys_of(many, 0, 30);
	free0 = test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE);
	arg.fault = -EIO;
	arg.fault_sites = KVMM_NVME_SITE_READ;
	arg.fault_every = 1;
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 2, 0, 0), 0);
	CHECK_OK(ctx);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_IO_ERRORS) > 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), free0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PREFETCH_PAGES), 0);
	arg.fault_every = 0;
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);	/* still there, on NVMe */
	test_kring_init(ctx, &op, 0, 0);
	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, 4096), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, many, 30, 0, 0), -EDQUOT);
	CU_ASSERT_EQUAL(ring_kprefetch(&op, sp, 0, 30, 0, 1), -EDQUOT);
	CU_ASSERT_EQUAL(ring_set(&op, KVMM_SET_NS_KJOB_BYTES, KVMM_NS_KJOB_BYTES_DEFAULT), 0);
	test_kring_exit(&op);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);

	arg = (struct kvmm_nvme_arg){ .flip_every = 1 };	/* every page written is bad */
	ctx = nvme_ctx(path, &arg);
	sp = space_of(ctx, 0, VB);
	fill(ctx, sp, 30);
	free0 = test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE);
	CU_ASSERT_EQUAL(kvmm_keyed_prefetch(ctx, sp, k, 2, 2 * VPAGES, KVMM_PREFETCH_RECLAIM), 0);
	CHECK_OK(ctx);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_NVME_CSUM_FAIL) > 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_HOST_PAGES_FREE), free0);
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), -ENOENT);	/* dropped, never served */
	CU_ASSERT_EQUAL(get_one(ctx, sp, 1), -ENOENT);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

/*
 * A ring bound to a namespace prefetches its own namespace's values, and
 * cannot prefetch another namespace's space.
 */
static void test_keyed_prefetch_tenant(void)
{
	const char *path = nvme_file("pf_tenant");
	struct kvmm_ctx *ctx = nvme_ctx(path, NULL);
	uint32_t sp = space_of(ctx, 1, VB);
	struct test_kring t1, t2;

	fill(ctx, sp, 30);
	test_kring_init(ctx, &t1, KVMM_RING_F_NS, 1);
	test_kring_init(ctx, &t2, KVMM_RING_F_NS, 2);
	CU_ASSERT_EQUAL(ring_kprefetch(&t2, sp, 0, 2, TWO, 5), -EINVAL);
	CU_ASSERT_EQUAL(ring_kprefetch(&t1, sp, 2, 2, TWO, 5), 2);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PREFETCH_PAGES), 2 * VPAGES);
	CU_ASSERT(on_host(ctx, sp, 2) && on_host(ctx, sp, 3));
	CU_ASSERT_EQUAL(get_one(ctx, sp, 0), 0);
	test_kring_exit(&t1);
	test_kring_exit(&t2);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	unlink(path);
}

static int keyed_suite_clean(void)
{
	test_tmp_dir_remove();
	return 0;
}

int register_keyed_suite(void)
{
	CU_pSuite s = CU_add_suite("keyed", NULL, keyed_suite_clean);

	if (!s)
		return -1;
	ADD_TEST(s, test_keyed_roundtrip);
	ADD_TEST(s, test_keyed_each);
	ADD_TEST(s, test_keyed_spaces);
	ADD_TEST(s, test_keyed_pressure);
	ADD_TEST(s, test_keyed_shares_host_tier);
	ADD_TEST(s, test_keyed_share);
	ADD_TEST(s, test_keyed_corrupt_is_a_miss);
	ADD_TEST(s, test_keyed_alloc_faults);
	ADD_TEST(s, test_keyed_ring);
	ADD_TEST(s, test_keyed_ring_tenant);
	ADD_TEST(s, test_keyed_job_memory_follows_what_it_moves);
	ADD_TEST(s, test_keyed_ns_kjob_bytes_limit);
	ADD_TEST(s, test_keyed_ring_long_job_lets_the_lock_go);
	ADD_TEST(s, test_keyed_nvme_roundtrip);
	ADD_TEST(s, test_keyed_nvme_restart);
	ADD_TEST(s, test_keyed_nvme_flip_tear);
	ADD_TEST(s, test_keyed_nvme_ring);
	ADD_TEST(s, test_keyed_nvme_ring_busy);
	ADD_TEST(s, test_keyed_nvme_register_waits_for_a_get);
	ADD_TEST(s, test_keyed_nvme_put_larger_than_host);
	ADD_TEST(s, test_keyed_nvme_puts_outrun_disk);
	ADD_TEST(s, test_keyed_nvme_ring_put_larger_than_host);
	ADD_TEST(s, test_keyed_nvme_put_write_fails);
	ADD_TEST(s, test_keyed_ns_space_limit);
	ADD_TEST(s, test_keyed_space_remove);
	ADD_TEST(s, test_keyed_space_alloc_faults);
	ADD_TEST(s, test_keyed_space_remove_ring);
	ADD_TEST(s, test_keyed_recover_space_limit);
	ADD_TEST(s, test_keyed_ns_kjob_bytes_in_flight);
	ADD_TEST(s, test_keyed_nvme_long_get_is_sliced);
	ADD_TEST(s, test_keyed_flush_restart);
	ADD_TEST(s, test_keyed_flush_long_values);
	ADD_TEST(s, test_keyed_nvme_writer_throttled);
	ADD_TEST(s, test_keyed_nvme_long_value_dropped);
	ADD_TEST(s, test_keyed_prefetch_host_room);
	ADD_TEST(s, test_keyed_prefetch_reclaim);
	ADD_TEST(s, test_keyed_prefetch_ring_get_waits);
	ADD_TEST(s, test_keyed_prefetch_sliced_get_waits);
	ADD_TEST(s, test_keyed_prefetch_cancel);
	ADD_TEST(s, test_keyed_prefetch_read_faults);
	ADD_TEST(s, test_keyed_prefetch_tenant);
	return 0;
}
