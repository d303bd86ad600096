// SPDX-License-Identifier: MIT
/* tests/driver/mock_test.c - the backend contract, run against mock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers.h"

static void backend_lookup_finds_mock_only(void)
{
	const struct kvmm_backend_ops *ops = kvmm_backend_lookup("mock");

	CU_ASSERT_PTR_NOT_NULL_FATAL(ops);
	CU_ASSERT_STRING_EQUAL(ops->name, "mock");
	CU_ASSERT_PTR_NULL(kvmm_backend_lookup("nosuch"));
	CU_ASSERT_PTR_NULL(kvmm_backend_lookup(NULL));
}

static void kv_layer_mha_has_k_and_v_of_pool_size(void)
{
	struct kvmm_ctx *ctx = test_ctx(4, 16, 2, 64);
	struct kvmm_kv_layer l0, l1;

	CU_ASSERT_EQUAL_FATAL(kvmm_kv_layer(ctx, 0, &l0), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_layer(ctx, 1, &l1), 0);
	CU_ASSERT_EQUAL(l0.slot_bytes, 1 * 4 * 2);	/* heads * dim * dtype */
	CU_ASSERT_EQUAL(l0.bytes, 16 * 4 * l0.slot_bytes);
	CU_ASSERT_PTR_NOT_NULL(l0.k);
	CU_ASSERT_PTR_NOT_NULL(l0.v);
	CU_ASSERT(l0.k != l1.k && l0.v != l1.v && l0.k != l0.v);
	/* every slot is writable: the whole pool exists */
	memset(l1.v, 0xab, l1.bytes);
	CU_ASSERT_EQUAL(kvmm_kv_layer(ctx, 2, &l0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_kv_layer(ctx, 0, NULL), -EINVAL);
	kvmm_destroy(ctx);
}

static void kv_layer_mla_has_one_latent_buffer(void)
{
	struct kvmm_params p = test_params(1, 8, 2, 16);
	struct kvmm_ctx *ctx = NULL;
	struct kvmm_kv_layer l;

	p.model = (struct kvmm_model){ .layers = 3, .latent_dim = 576, .dtype_bytes = 2,
				       .attn = KVMM_ATTN_MLA };
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_kv_layer(ctx, 2, &l), 0);
	CU_ASSERT_PTR_NULL(l.v);
	CU_ASSERT_EQUAL(l.slot_bytes, 1152);
	CU_ASSERT_EQUAL(l.bytes, 8 * 1152);
	kvmm_destroy(ctx);
}

static void init_failure_is_reported_as_is(void)
{
	struct kvmm_mock_faults f = { .fail_init = -ENOMEM };
	struct kvmm_mock_arg arg = { .faults = &f };
	struct kvmm_params p = test_params(1, 8, 2, 16);
	struct kvmm_ctx *ctx = NULL;

	p.backend_arg = &arg;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -ENOMEM);
	CU_ASSERT_PTR_NULL(ctx);
}

/**
 * struct move_pool - a mock pool opened straight from its ops, beside a
 *	mirror the test moves the plainest way
 * @ops: the mock's
 * @priv: its pool
 * @nbufs: buffers (K and V of every layer, or every layer's latent)
 * @run: bytes of one page in one buffer
 * @page: bytes of one page in the staging layout
 * @nr_pages: pages in the pool
 * @bufs: the pool's buffers
 * @mirror: what they must hold
 */
struct move_pool {
	const struct kvmm_backend_ops *ops;
	void *priv;
	uint32_t nbufs;
	uint64_t run, page;
	uint32_t nr_pages;
	char *bufs[8];
	char *mirror[8];
};

static void fill_bytes(char *p, size_t n, unsigned *seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (char)rand_r(seed);
}

/* Open a mock pool of @nr_pages pages of @page_size in @m, random bytes. */
static void move_pool_open(struct move_pool *mp, const struct kvmm_model *m,
			   uint32_t page_size, uint32_t nr_pages, unsigned *seed)
{
	struct kvmm_backend_cfg cfg = { .model = *m, .page_size = page_size,
					.nr_pages = nr_pages, .tier = KVMM_TIER_DEVICE };
	struct kvmm_kv_layer kl;
	uint32_t l, b;

	memset(mp, 0, sizeof(*mp));
	mp->ops = kvmm_backend_lookup("mock");
	CU_ASSERT_EQUAL_FATAL(mp->ops->init(&cfg, &mp->priv), 0);
	for (l = 0; mp->ops->kv_layer(mp->priv, l, &kl) == 0; l++) {
		mp->bufs[mp->nbufs++] = kl.k;
		if (kl.v)
			mp->bufs[mp->nbufs++] = kl.v;
		mp->run = (uint64_t)page_size * kl.slot_bytes;
	}
	CU_ASSERT_FATAL(mp->nbufs <= 8);
	mp->page = mp->run * mp->nbufs;
	mp->nr_pages = nr_pages;
	for (b = 0; b < mp->nbufs; b++) {
		fill_bytes(mp->bufs[b], mp->run * nr_pages, seed);
		mp->mirror[b] = malloc(mp->run * nr_pages);
		memcpy(mp->mirror[b], mp->bufs[b], mp->run * nr_pages);
	}
}

static void move_pool_close(struct move_pool *mp)
{
	uint32_t b;

	for (b = 0; b < mp->nbufs; b++)
		free(mp->mirror[b]);
	mp->ops->exit(mp->priv);
}

/* The staging layout the plainest way: page i is each buffer's run, in turn. */
static void naive_move(struct move_pool *mp, const int32_t *pfns, uint32_t nr,
		       char *const *host, bool gather)
{
	uint32_t i, b;

	for (i = 0; i < nr; i++)
		for (b = 0; b < mp->nbufs; b++) {
			char *pool = mp->mirror[b] + (uint64_t)pfns[i] * mp->run;
			char *h = host[i] + (uint64_t)b * mp->run;

			memmove(gather ? h : pool, gather ? pool : h, mp->run);
		}
}

static bool pool_is_mirror(const struct move_pool *mp)
{
	uint32_t b;

	for (b = 0; b < mp->nbufs; b++)
		if (memcmp(mp->bufs[b], mp->mirror[b], mp->run * mp->nr_pages))
			return false;
	return true;
}

#define MOVE_GUARD	64	/* bytes between staging pages that no copy may touch */

/*
 * Gather @pfns into staging pages laid out with guards between them (at
 * @skew bytes from 16-byte alignment, in reverse order so they are not
 * adjacent), compare with the plain copy; scatter fresh bytes back into
 * @pfns and compare the whole pool with the mirror.
 */
static void move_check(struct move_pool *mp, const int32_t *pfns, uint32_t nr, uint32_t skew,
		       unsigned *seed)
{
	uint64_t stride = mp->page + MOVE_GUARD, i;
	size_t len = stride * nr + skew + 2 * MOVE_GUARD;
	char *stage = malloc(len), *want = malloc(mp->page * nr);
	char **host = malloc(nr * sizeof(*host)), **wh = malloc(nr * sizeof(*wh));
	/* 16-byte aligned, then @skew, with a guard before the first page */
	char *base = (char *)(((uintptr_t)stage + MOVE_GUARD) & ~(uintptr_t)15) + skew;

	memset(stage, 0xee, len);
	for (i = 0; i < nr; i++) {
		host[i] = base + stride * (nr - 1 - i);
		wh[i] = want + mp->page * i;
	}
	CU_ASSERT_EQUAL(mp->ops->gather(mp->priv, pfns, nr, (void *const *)host), 0);
	naive_move(mp, pfns, nr, wh, true);
	for (i = 0; i < nr; i++) {
		CU_ASSERT(!memcmp(host[i], wh[i], mp->page));
		CU_ASSERT((unsigned char)host[i][mp->page] == 0xee);
		CU_ASSERT((unsigned char)host[i][mp->page + MOVE_GUARD - 1] == 0xee);
	}
	CU_ASSERT((unsigned char)base[-1] == 0xee && (unsigned char)stage[0] == 0xee);
	for (i = 0; i < nr; i++)
		fill_bytes(host[i], mp->page, seed);
	CU_ASSERT_EQUAL(mp->ops->scatter(mp->priv, pfns, nr, (void *const *)host), 0);
	naive_move(mp, pfns, nr, host, false);
	CU_ASSERT(pool_is_mirror(mp));
	free(wh);
	free(host);
	free(want);
	free(stage);
}

/* The page sets a move sees: in runs, reversed, shuffled, runs out of order. */
enum move_order { MOVE_RUN, MOVE_REVERSED, MOVE_SHUFFLED, MOVE_RUNS_SHUFFLED };

static void move_pfns(int32_t *pfns, uint32_t nr, uint32_t nr_pages, enum move_order o,
		      unsigned *seed)
{
	uint32_t first = (uint32_t)rand_r(seed) % (nr_pages - nr + 1), i;

	for (i = 0; i < nr; i++)
		pfns[i] = (int32_t)(o == MOVE_REVERSED ? first + nr - 1 - i : first + i);
	for (i = nr; o == MOVE_SHUFFLED && i > 1; i--) {
		uint32_t j = (uint32_t)rand_r(seed) % i;
		int32_t t = pfns[i - 1];

		pfns[i - 1] = pfns[j];
		pfns[j] = t;
	}
	/* runs of 5 consecutive pages, the runs swapped from the two ends */
	for (i = 0; o == MOVE_RUNS_SHUFFLED && (i + 1) * 5 <= nr / 2; i++) {
		uint32_t a = i * 5, b = nr - (i + 1) * 5, k;

		for (k = 0; k < 5; k++) {
			int32_t t = pfns[a + k];

			pfns[a + k] = pfns[b + k];
			pfns[b + k] = t;
		}
	}
}

static const struct kvmm_model move_models[] = {
	/* 2 KiB slots: a page size of 1 streams, one 2 KiB run per buffer */
	{ .layers = 2, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
	/* 1152-byte latent slots: streams from a page size of 1 */
	{ .layers = 3, .latent_dim = 576, .dtype_bytes = 2, .attn = KVMM_ATTN_MLA },
	/* 6-byte slots: runs too short or odd for streaming, memcpy */
	{ .layers = 2, .kv_heads = 1, .head_dim = 3, .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
};

/*
 * Gather and scatter move exactly the bytes of the staging layout, whatever
 * order the copy walks in: page sets of 1, 2 and odd counts, past the
 * pages a gather orders on the stack (256), as a run of consecutive pages,
 * reversed, shuffled and as runs out of order, out of a pool up to four
 * times their size, into staging aligned or not, and nothing beside.
 */
static void gather_scatter_match_plain_copy(void)
{
	static const uint32_t counts[] = { 1, 2, 3, 37, 257, 300 };
	static const uint32_t page_sizes[] = { 1, 4, 16 };
	unsigned seed = 4242;
	size_t mi, pi, ci;
	int32_t pfns[300];
	int o;

	for (mi = 0; mi < sizeof(move_models) / sizeof(move_models[0]); mi++)
		for (pi = 0; pi < sizeof(page_sizes) / sizeof(page_sizes[0]); pi++) {
			uint32_t nr_pages = page_sizes[pi] == 1 ? 1200 : 320;
			struct move_pool mp;

			move_pool_open(&mp, &move_models[mi], page_sizes[pi], nr_pages, &seed);
			for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
				for (o = MOVE_RUN; o <= MOVE_RUNS_SHUFFLED; o++) {
					move_pfns(pfns, counts[ci], nr_pages, o, &seed);
					move_check(&mp, pfns, counts[ci], ci % 2 ? 8 : 0, &seed);
				}
			move_pool_close(&mp);
		}
}

/* A move of no pages copies nothing and succeeds. */
static void gather_scatter_of_nothing(void)
{
	unsigned seed = 7;
	struct move_pool mp;
	int32_t pfn = 0;
	char page[1];
	void *host[1] = { page };

	move_pool_open(&mp, &move_models[0], 1, 4, &seed);
	page[0] = 0x11;
	CU_ASSERT_EQUAL(mp.ops->gather(mp.priv, &pfn, 0, host), 0);
	CU_ASSERT_EQUAL(mp.ops->scatter(mp.priv, &pfn, 0, host), 0);
	CU_ASSERT_EQUAL(page[0], 0x11);
	CU_ASSERT(pool_is_mirror(&mp));
	move_pool_close(&mp);
}

/* An injected copy failure leaves the pool as it was and says so. */
static void failed_scatter_changes_nothing(void)
{
	struct kvmm_mock_faults f = { .fail_every = 1, .fail_copy = -EIO };
	struct kvmm_mock_arg arg = { .faults = &f };
	struct kvmm_backend_cfg cfg = { .model = move_models[0], .page_size = 1,
					.nr_pages = 8, .tier = KVMM_TIER_DEVICE, .arg = &arg };
	const struct kvmm_backend_ops *ops = kvmm_backend_lookup("mock");
	int32_t pfns[3] = { 5, 1, 2 };
	struct kvmm_kv_layer kl;
	void *priv = NULL, *host[3];
	char *stage;
	int i;

	CU_ASSERT_EQUAL_FATAL(ops->init(&cfg, &priv), 0);
	stage = calloc(3, kvmm_page_bytes(&cfg.model, 1));
	for (i = 0; i < 3; i++)
		host[i] = stage + i * kvmm_page_bytes(&cfg.model, 1);
	CU_ASSERT_EQUAL(ops->kv_layer(priv, 0, &kl), 0);
	memset(kl.k, 0x33, kl.slot_bytes * 8);
	memset(stage, 0x44, 3 * kvmm_page_bytes(&cfg.model, 1));
	CU_ASSERT_EQUAL(ops->scatter(priv, pfns, 3, host), -EIO);
	CU_ASSERT_EQUAL(((unsigned char *)kl.k)[5 * kl.slot_bytes], 0x33);
	CU_ASSERT_EQUAL(ops->gather(priv, pfns, 3, host), -EIO);
	CU_ASSERT_EQUAL((unsigned char)stage[0], 0x44);
	ops->exit(priv);
	free(stage);
}

/*
 * The stores' copies that checksum on the way (driver/csum): for every
 * alignment of the destination and length around the streaming copy's
 * steps and the 16 KiB pieces, the bytes are the plain copy's and the
 * checksum is XXH3 of the whole page, in each build the CPU can run.
 */
uint64_t kvmm_csum(const void *p, size_t n);	/* XXH3-64, the reference */
uint64_t kvmm_csum_fill_base(void *page, const void *src, size_t len, size_t page_bytes);
uint64_t kvmm_csum_copy_out_base(void *dst, const void *page, size_t len, size_t page_bytes);
#if defined(__x86_64__)
uint64_t kvmm_csum_fill_avx2(void *page, const void *src, size_t len, size_t page_bytes);
uint64_t kvmm_csum_copy_out_avx2(void *dst, const void *page, size_t len, size_t page_bytes);
#endif

typedef uint64_t (*csum_copy_fn)(void *, const void *, size_t, size_t);

/* The builds of fill and copy_out this CPU runs, into @fill and @out: how many. */
static uint32_t csum_impls(csum_copy_fn *fill, csum_copy_fn *out)
{
	fill[0] = kvmm_csum_fill_base;
	out[0] = kvmm_csum_copy_out_base;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2")) {
		fill[1] = kvmm_csum_fill_avx2;
		out[1] = kvmm_csum_copy_out_avx2;
		return 2;
	}
#endif
	return 1;
}

static void csum_copies_match_plain_copy_and_hash(void)
{
	csum_copy_fn fill[2], out[2];
	static const size_t lens[] = { 0, 1, 63, 255, 256, 4096 + 17, 16384, 16384 + 100,
				       40000, 65536 };
	const size_t pb = 65536;
	unsigned char *src = malloc(pb + 64), *page = aligned_alloc(64, pb + 64),
		      *dst = aligned_alloc(64, pb + 64);
	unsigned seed = 9;
	uint32_t impls = csum_impls(fill, out), f, a, l;
	size_t i;

	CU_ASSERT_FATAL(src && page && dst);
	for (i = 0; i < pb + 64; i++)
		src[i] = (unsigned char)rand_r(&seed);
	for (f = 0; f < impls; f++)
		for (a = 0; a < 64; a += a < 4 ? 1 : 12)
			for (l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
				size_t len = lens[l];
				uint64_t c;

				memset(page, 0xAB, pb + 64);
				c = fill[f](page + a, src, len, pb);
				CU_ASSERT_EQUAL(c, kvmm_csum(page + a, pb));
				CU_ASSERT(!memcmp(page + a, src, len));
				CU_ASSERT(len == pb || page[a + len] == 0);
				CU_ASSERT(page[a + pb - 1] == (len == pb ? src[pb - 1] : 0));
				memset(dst, 0xCD, pb + 64);
				CU_ASSERT_EQUAL(out[f](dst + a, page + a, len, pb), c);
				CU_ASSERT(!memcmp(dst + a, page + a, len));
				CU_ASSERT(dst[a + len] == 0xCD);	/* nothing past @len */
			}
	free(src);
	free(page);
	free(dst);
}

/*
 * Whole pages (the common case: a value fills its page) of sizes around
 * XXH3's stripes and blocks, 32-byte aligned: the fused copy-and-hash
 * (driver/csum/csum_impl.h, AVX2 builds) must give XXH3's sum and the
 * plain copy's bytes, on a 2 MiB KV page too.
 */
static void csum_whole_pages_fused(void)
{
	csum_copy_fn fill[2], out[2];
	static const size_t sizes[] = { 241, 255, 256, 319, 320, 1023, 1024, 1025, 1087, 1088,
					4096 + 17, 65536, 65536 + 64, 2u << 20 };
	const size_t max = 2u << 20;
	unsigned char *src = malloc(max), *page = aligned_alloc(64, max), *dst = aligned_alloc(64, max);
	unsigned seed = 11;
	uint32_t impls = csum_impls(fill, out), f, z;
	size_t i;

	CU_ASSERT_FATAL(src && page && dst);
	for (i = 0; i < max; i++)
		src[i] = (unsigned char)rand_r(&seed);
	for (f = 0; f < impls; f++)
		for (z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			size_t n = sizes[z];
			uint64_t want = kvmm_csum(src, n);

			memset(page, 0xAB, n);
			CU_ASSERT_EQUAL(fill[f](page, src, n, n), want);
			CU_ASSERT(!memcmp(page, src, n));
			memset(dst, 0xCD, n);
			CU_ASSERT_EQUAL(out[f](dst, page, n, n), want);
			CU_ASSERT(!memcmp(dst, src, n));
		}
	free(src);
	free(page);
	free(dst);
}

int register_mock_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_backend_mock", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, backend_lookup_finds_mock_only);
	ADD_TEST(s, kv_layer_mha_has_k_and_v_of_pool_size);
	ADD_TEST(s, kv_layer_mla_has_one_latent_buffer);
	ADD_TEST(s, init_failure_is_reported_as_is);
	ADD_TEST(s, gather_scatter_match_plain_copy);
	ADD_TEST(s, gather_scatter_of_nothing);
	ADD_TEST(s, failed_scatter_changes_nothing);
	ADD_TEST(s, csum_copies_match_plain_copy_and_hash);
	ADD_TEST(s, csum_whole_pages_fused);
	return 0;
}
