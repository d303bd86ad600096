// SPDX-License-Identifier: MIT
/*
 * tests/driver/backend_test.c - the backend contract, and the kernels held
 * to their C references.
 *
 * One set of tests runs as three suites:
 *   kvmm_contract_mock     the mock backend (always);
 *   kvmm_contract_fakecuda the cuda backend on tests/fakecuda, a driver
 *                          made of host memory: the backend's host code,
 *                          error paths and fault injection, without a GPU;
 *   kvmm_contract_cuda     the cuda backend on the real driver: registered
 *                          always, inactive (with the reason printed) when
 *                          there is no driver or device.
 * Every copy is checked bit for bit against a mirror of the pool that the
 * C references (kernels/ref.c) update alongside: on a GPU that holds the
 * kernels to their references on random page sets, sizes and geometries.
 */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../helpers.h"
#include "../../kernels/kv.h"
#include "../../driver/backend.h"
#include "autoconf.h"

/* How a suite reaches the backend's memory (device memory for cuda). */
struct devmem {
	void *(*alloc)(size_t n);
	void (*free)(void *p);
	void (*put)(void *dev, const void *host, size_t n);
	void (*get)(void *host, const void *dev, size_t n);
};

struct target {
	const char *backend;
	char driver[PATH_MAX];		/* cuda: the library, "" for the default */
	const struct devmem *mem;
};

static struct target tgt;

/* ---- mock: the pool is host memory ---- */

static void *host_alloc(size_t n) { return calloc(1, n ? n : 1); }
static void host_put(void *d, const void *h, size_t n) { memcpy(d, h, n); }
static void host_get(void *h, const void *d, size_t n) { memcpy(h, d, n); }

static const struct devmem host_mem = { host_alloc, free, host_put, host_get };

/* ---- cuda: through the same driver library the backend opened ---- */

static void *cu_dl;
static int (*cu_alloc)(uint64_t *p, size_t n);
static int (*cu_free)(uint64_t p);
static int (*cu_htod)(uint64_t d, const void *h, size_t n);
static int (*cu_dtoh)(void *h, uint64_t d, size_t n);

static void *dev_alloc(size_t n)
{
	uint64_t p = 0;

	return cu_alloc(&p, n ? n : 1) ? NULL : (void *)(uintptr_t)p;
}

static void dev_free(void *p) { cu_free((uint64_t)(uintptr_t)p); }
static void dev_put(void *d, const void *h, size_t n)
{
	CU_ASSERT_EQUAL(cu_htod((uint64_t)(uintptr_t)d, h, n), 0);
}
static void dev_get(void *h, const void *d, size_t n)
{
	CU_ASSERT_EQUAL(cu_dtoh(h, (uint64_t)(uintptr_t)d, n), 0);
}

static const struct devmem dev_mem = { dev_alloc, dev_free, dev_put, dev_get };

static int cu_bind(const char *lib)
{
	if (cu_dl)
		dlclose(cu_dl);
	cu_dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!cu_dl)
		return -ENODEV;
	cu_alloc = (int (*)(uint64_t *, size_t))dlsym(cu_dl, "cuMemAlloc_v2");
	cu_free = (int (*)(uint64_t))dlsym(cu_dl, "cuMemFree_v2");
	cu_htod = (int (*)(uint64_t, const void *, size_t))dlsym(cu_dl, "cuMemcpyHtoD_v2");
	cu_dtoh = (int (*)(void *, uint64_t, size_t))dlsym(cu_dl, "cuMemcpyDtoH_v2");
	return cu_alloc && cu_free && cu_htod && cu_dtoh ? 0 : -ENODEV;
}

/* The fake driver's controls (tests/fakecuda/fakecuda.h). */
static void (*fake_reset)(void);
static void (*fake_devices)(int);
static void (*fake_mem)(size_t, size_t);
static void (*fake_fail)(const char *, unsigned, int);
static unsigned (*fake_calls)(const char *);
static long (*fake_live)(void);

/* The cuda backend's argument for the current suite. */
static struct kvmm_cuda_arg cuda_arg;
static struct kvmm_mock_faults mock_faults;
static struct kvmm_mock_arg mock_arg = { .faults = &mock_faults };

static void *backend_arg(void)
{
	if (!strcmp(tgt.backend, "cuda")) {
		cuda_arg.driver = tgt.driver[0] ? tgt.driver : NULL;
		return &cuda_arg;
	}
	return &mock_arg;
}

/* ---- the pool, directly through the ops, and its mirror ---- */

struct pool {
	const struct kvmm_backend_ops *ops;
	void *priv;
	struct kvmm_kv_geom g;
	uint32_t nr_pages;
	char **dbufs;		/* the backend's buffers (its addresses) */
	char **mirror;		/* host copies the references keep up to date */
};

static void fill_random(void *p, size_t n, unsigned *seed)
{
	unsigned char *c = p;
	size_t i;

	for (i = 0; i < n; i++)
		c[i] = (unsigned char)rand_r(seed);
}

static int pool_open(struct pool *pl, const struct kvmm_model *m, uint32_t page_size,
		     uint32_t nr_pages, unsigned *seed)
{
	struct kvmm_backend_cfg cfg = { .model = *m, .page_size = page_size,
					.nr_pages = nr_pages, .tier = KVMM_TIER_DEVICE,
					.arg = backend_arg() };
	uint32_t per = m->attn == KVMM_ATTN_MLA ? 1 : 2, l, b;
	struct kvmm_kv_layer kl;
	int ret;

	memset(pl, 0, sizeof(*pl));
	pl->ops = kvmm_backend_lookup(tgt.backend);
	if (!pl->ops)
		return -EOPNOTSUPP;
	ret = pl->ops->init(&cfg, &pl->priv);
	if (ret)
		return ret;
	pl->nr_pages = nr_pages;
	pl->g.nbufs = m->layers * per;
	pl->g.page_size = page_size;
	pl->dbufs = calloc(pl->g.nbufs, sizeof(char *));
	pl->mirror = calloc(pl->g.nbufs, sizeof(char *));
	for (l = 0; l < m->layers; l++) {
		CU_ASSERT_EQUAL_FATAL(pl->ops->kv_layer(pl->priv, l, &kl), 0);
		pl->g.slot_bytes = kl.slot_bytes;
		pl->dbufs[l * per] = kl.k;
		if (per > 1)
			pl->dbufs[l * per + 1] = kl.v;
		CU_ASSERT(kl.bytes >= (uint64_t)nr_pages * page_size * kl.slot_bytes);
	}
	for (b = 0; b < pl->g.nbufs; b++) {
		size_t n = (size_t)nr_pages * kvmm_kv_run(&pl->g);

		pl->mirror[b] = malloc(n);
		fill_random(pl->mirror[b], n, seed);
		tgt.mem->put(pl->dbufs[b], pl->mirror[b], n);
	}
	return 0;
}

/* Does the backend's pool hold exactly the mirror? */
static bool pool_same(struct pool *pl)
{
	size_t n = (size_t)pl->nr_pages * kvmm_kv_run(&pl->g);
	char *tmp = malloc(n);
	bool same = true;
	uint32_t b;

	for (b = 0; b < pl->g.nbufs && same; b++) {
		tgt.mem->get(tmp, pl->dbufs[b], n);
		same = !memcmp(tmp, pl->mirror[b], n);
	}
	free(tmp);
	return same;
}

static void pool_close(struct pool *pl)
{
	uint32_t b;

	for (b = 0; b < pl->g.nbufs; b++)
		free(pl->mirror[b]);
	free(pl->mirror);
	free(pl->dbufs);
	pl->ops->exit(pl->priv);
}

/* @nr distinct pages of @nr_pages, in random order. */
static void random_pfns(int32_t *pfns, uint32_t nr, uint32_t nr_pages, unsigned *seed)
{
	int32_t *all = malloc(nr_pages * sizeof(*all));
	uint32_t i;

	for (i = 0; i < nr_pages; i++)
		all[i] = (int32_t)i;
	for (i = 0; i < nr; i++) {
		uint32_t j = i + (uint32_t)rand_r(seed) % (nr_pages - i);
		int32_t t = all[i];

		all[i] = all[j];
		all[j] = t;
		pfns[i] = all[i];
	}
	free(all);
}

static const struct kvmm_model geoms[] = {
	{ .layers = 2, .kv_heads = 1, .head_dim = 4, .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
	{ .layers = 3, .kv_heads = 2, .head_dim = 64, .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
	{ .layers = 2, .kv_heads = 1, .head_dim = 3, .dtype_bytes = 1, .attn = KVMM_ATTN_MHA },
	{ .layers = 2, .latent_dim = 576, .dtype_bytes = 2, .attn = KVMM_ATTN_MLA },
	{ .layers = 4, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
};
static const uint32_t page_sizes[] = { 1, 4, 16, 64 };

/*
 * Gather, scatter and copy on random page sets, for every geometry and
 * page size, each checked against the references' result on the mirror.
 */
static void contract_copies_match_reference(void)
{
	unsigned seed = 12345;
	size_t gi, pi;

	for (gi = 0; gi < sizeof(geoms) / sizeof(geoms[0]); gi++) {
		for (pi = 0; pi < sizeof(page_sizes) / sizeof(page_sizes[0]); pi++) {
			uint32_t ps = page_sizes[pi], nr_pages = 4096 / ps + 3, round, i;
			uint64_t page;
			struct pool pl;
			char *staging, **host;
			int32_t *pfns, *dst;

			CU_ASSERT_EQUAL_FATAL(pool_open(&pl, &geoms[gi], ps, nr_pages, &seed), 0);
			page = kvmm_kv_page_bytes(&pl.g);
			staging = malloc(page * nr_pages);
			host = malloc(nr_pages * sizeof(*host));
			pfns = malloc(nr_pages * sizeof(*pfns));
			dst = malloc(nr_pages * sizeof(*dst));
			CU_ASSERT_EQUAL_FATAL(pl.ops->mem_register(pl.priv, staging, page * nr_pages), 0);
			for (round = 0; round < 4; round++) {
				uint32_t nr = 1 + (uint32_t)rand_r(&seed) % (nr_pages / 2);
				char *want = malloc(page * nr);
				char **wh = malloc(nr * sizeof(*wh));

				random_pfns(pfns, 2 * nr, nr_pages, &seed);
				/* staging pages in a random order too: they need not be adjacent */
				random_pfns(dst, nr, nr_pages, &seed);
				for (i = 0; i < nr; i++) {
					host[i] = staging + page * (uint32_t)dst[i];
					wh[i] = want + page * i;
				}
				CU_ASSERT_EQUAL(pl.ops->gather(pl.priv, pfns, nr, (void *const *)host), 0);
				kvmm_ref_move(&pl.g, pl.mirror, pfns, nr, wh, KVMM_KV_GATHER);
				for (i = 0; i < nr; i++)
					CU_ASSERT(!memcmp(host[i], wh[i], page));

				for (i = 0; i < nr; i++)
					fill_random(host[i], page, &seed);
				CU_ASSERT_EQUAL(pl.ops->scatter(pl.priv, pfns + nr, nr,
								(void *const *)host), 0);
				kvmm_ref_move(&pl.g, pl.mirror, pfns + nr, nr, host, KVMM_KV_SCATTER);
				CU_ASSERT(pool_same(&pl));

				if (pl.ops->copy) {
					uint32_t slots = 1 + (uint32_t)rand_r(&seed) % ps;

					CU_ASSERT_EQUAL(pl.ops->copy(pl.priv, pfns, pfns + nr, nr, slots), 0);
					kvmm_ref_copy(&pl.g, pl.mirror, pfns, pfns + nr, nr, slots);
					CU_ASSERT(pool_same(&pl));
				}
				free(want);
				free(wh);
			}
			pl.ops->mem_unregister(pl.priv, staging, page * nr_pages);
			pool_close(&pl);
			free(staging);
			free(host);
			free(pfns);
			free(dst);
		}
	}
}

/* A copy to or from staging the backend was never told about is refused. */
static void contract_unregistered_staging_is_efault(void)
{
	struct kvmm_model m = geoms[0];
	unsigned seed = 7;
	struct pool pl;
	int32_t pfn = 3;
	char *page;

	mock_faults.dma_strict = true;
	CU_ASSERT_EQUAL_FATAL(pool_open(&pl, &m, 4, 16, &seed), 0);
	page = malloc(kvmm_kv_page_bytes(&pl.g));
	CU_ASSERT_EQUAL(pl.ops->gather(pl.priv, &pfn, 1, (void *const *)&page), -EFAULT);
	CU_ASSERT_EQUAL(pl.ops->scatter(pl.priv, &pfn, 1, (void *const *)&page), -EFAULT);
	CU_ASSERT(pool_same(&pl));
	pool_close(&pl);
	free(page);
	mock_faults.dma_strict = false;
}

static struct kvmm_ctx *target_ctx_max(uint32_t ps, uint32_t nr_pages, uint32_t host_pages,
				       uint32_t max_pages)
{
	struct kvmm_params p = test_params(ps, nr_pages, 64, 4096);
	struct kvmm_ctx *ctx = NULL;

	p.backend = tgt.backend;
	p.backend_arg = backend_arg();
	p.host_pages = host_pages;
	p.max_pages = max_pages;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), 0);
	return ctx;
}

static struct kvmm_ctx *target_ctx(uint32_t ps, uint32_t nr_pages, uint32_t host_pages)
{
	return target_ctx_max(ps, nr_pages, host_pages, 0);
}

/* kvmm_kv_indices() against kvmm_ref_kv_*() on the page table itself. */
static void contract_kv_indices_match_reference(void)
{
	unsigned seed = 99;
	size_t pi;

	for (pi = 0; pi < sizeof(page_sizes) / sizeof(page_sizes[0]); pi++) {
		uint32_t ps = page_sizes[pi], seqs[40], lens[40], n = 0, i;
		struct kvmm_ctx *ctx = target_ctx(ps, 8192 / ps + 64, 0);
		int32_t *indptr, *indices, *last, want_ptr[41], want_last[40];
		int32_t *got_ptr, *got_idx, *got_last, *want_idx;
		struct kvmm_kv_batch b = { 0 };
		struct kvmm_table tab;
		struct kvmm_seq_info info;
		int64_t total, wtotal;

		CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
		for (i = 0; i < 40; i++) {
			uint32_t len = (uint32_t)rand_r(&seed) % 200;

			CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seqs[n]), 0);
			if (len)
				CU_ASSERT_EQUAL_FATAL(kvmm_seq_extend(ctx, seqs[n], len, 0), 0);
			n++;
		}
		/* a batch in another order than the rows */
		for (i = 0; i < n; i++) {
			uint32_t j = (uint32_t)rand_r(&seed) % n, t = seqs[i];

			seqs[i] = seqs[j];
			seqs[j] = t;
		}
		for (i = 0; i < n; i++) {
			CU_ASSERT_EQUAL(kvmm_seq_info(ctx, seqs[i], &info), 0);
			lens[i] = info.len;
		}
		kvmm_seq_table(ctx, &tab);
		wtotal = kvmm_ref_kv_indptr(lens, n, ps, want_ptr, want_last);
		want_idx = malloc((size_t)wtotal * 4 + 4);
		kvmm_ref_kv_indices(tab.base, tab.stride, seqs, want_ptr, n, want_idx);

		indptr = tgt.mem->alloc(41 * 4);
		indices = tgt.mem->alloc((size_t)wtotal * 4 + 4);
		last = tgt.mem->alloc(40 * 4);
		b = (struct kvmm_kv_batch){ .seqs = seqs, .count = n, .max_indices = (uint32_t)wtotal,
					    .indptr = indptr, .indices = indices,
					    .last_page_len = last };
		total = kvmm_kv_indices(ctx, &b);
		CU_ASSERT_EQUAL(total, wtotal);
		got_ptr = malloc(41 * 4);
		got_idx = malloc((size_t)wtotal * 4 + 4);
		got_last = malloc(40 * 4);
		tgt.mem->get(got_ptr, indptr, (n + 1) * 4);
		tgt.mem->get(got_idx, indices, (size_t)wtotal * 4);
		tgt.mem->get(got_last, last, n * 4);
		CU_ASSERT(!memcmp(got_ptr, want_ptr, (n + 1) * 4));
		CU_ASSERT(!memcmp(got_idx, want_idx, (size_t)wtotal * 4));
		CU_ASSERT(!memcmp(got_last, want_last, n * 4));

		/* refusals: too little room, a sequence twice, a closed one */
		b.max_indices = (uint32_t)wtotal - 1;
		CU_ASSERT_EQUAL(wtotal ? kvmm_kv_indices(ctx, &b) : -ENOSPC, -ENOSPC);
		b.max_indices = (uint32_t)wtotal;
		b.count = 2;
		seqs[1] = seqs[0];
		CU_ASSERT_EQUAL(kvmm_kv_indices(ctx, &b), -EINVAL);
		seqs[1] = 63;
		CU_ASSERT_EQUAL(kvmm_kv_indices(ctx, &b), -EINVAL);
		CHECK_OK(ctx);
		tgt.mem->free(indptr);
		tgt.mem->free(indices);
		tgt.mem->free(last);
		free(got_ptr);
		free(got_idx);
		free(got_last);
		free(want_idx);
		kvmm_destroy(ctx);
	}
}

/*
 * The page table where the kernels read it: the same rows as the host's,
 * and a row the core changes afterwards is seen through the mapping.
 */
static void contract_page_table_dev_is_the_table(void)
{
	struct kvmm_ctx *ctx = target_ctx(16, 256, 0);
	struct kvmm_table tab;
	uint32_t seq[3], i;
	size_t bytes;
	int32_t *got;
	void *dev = NULL, *again = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	for (i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq[i]), 0);
		CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq[i], 40 + 30 * i, 0), 0);
	}
	kvmm_seq_table(ctx, &tab);
	bytes = (size_t)tab.stride * tab.rows * sizeof(int32_t);
	got = malloc(bytes);
	CU_ASSERT_EQUAL_FATAL(kvmm_page_table_dev(ctx, &dev), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
	tgt.mem->get(got, dev, bytes);
	CU_ASSERT(!memcmp(got, tab.base, bytes));
	/* a second call maps nothing new; later updates show through */
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq[1], 100, 0), 0);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq[0], NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_page_table_dev(ctx, &again), 0);
	CU_ASSERT_PTR_EQUAL(again, dev);
	tgt.mem->get(got, dev, bytes);
	CU_ASSERT(!memcmp(got, tab.base, bytes));
	CU_ASSERT_EQUAL(kvmm_page_table_dev(ctx, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_page_table_dev(NULL, &dev), -EINVAL);
	CHECK_OK(ctx);
	free(got);
	kvmm_destroy(ctx);
}

/* The KV of @seq's tokens [0, n): read (@get) or written from @buf. */
static void seq_kv(struct kvmm_ctx *ctx, uint32_t seq, uint32_t n, char *buf, bool get)
{
	struct kvmm_table tab;
	struct kvmm_kv_layer kl;
	uint32_t ps = kvmm_page_size(ctx), layer, i;

	kvmm_seq_table(ctx, &tab);
	for (layer = 0; kvmm_kv_layer(ctx, layer, &kl) == 0; layer++) {
		for (i = 0; i < n; i++) {
			uint64_t slot = (uint64_t)tab.base[seq * tab.stride + i / ps] * ps + i % ps;
			char *k = (char *)kl.k + slot * kl.slot_bytes;
			char *v = (char *)kl.v + slot * kl.slot_bytes;

			if (get) {
				tgt.mem->get(buf, k, kl.slot_bytes);
				tgt.mem->get(buf + kl.slot_bytes, v, kl.slot_bytes);
			} else {
				tgt.mem->put(k, buf, kl.slot_bytes);
				tgt.mem->put(v, buf + kl.slot_bytes, kl.slot_bytes);
			}
			buf += 2 * kl.slot_bytes;
		}
	}
}

/*
 * A prefix computed, demoted to the host tier by reclaim, and promoted
 * back reads exactly as it was written, and kv_copy of a partial page
 * copies the filled slots into a page of the sequence's own.
 */
static void contract_promote_after_demote_is_identical(void)
{
	struct kvmm_ctx *ctx = target_ctx(4, 16, 64);
	uint32_t tok[32], seq, kvb = 32 * 2 * 2 * 8;
	char want[40 * 2 * 2 * 8], got[sizeof(want)];
	unsigned seed = 5;
	struct kvmm_table tab;
	int32_t src, dst;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	test_tokens(tok, 32, 77);
	fill_random(want, kvb, &seed);
	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, 32, &seq), 0);
	seq_kv(ctx, seq, 32, want, false);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok, 32), 0);
	CU_ASSERT(kvmm_reclaim(ctx, 16) >= 0);
	CU_ASSERT(test_stat(ctx, KVMM_STAT_HOST_DEMOTE_PAGES) >= 8);
	CHECK_OK(ctx);

	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT(kvmm_seq_match(ctx, seq, tok, 32) >= 0);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, seq, tok, 32), 32);
	memset(got, 0, sizeof(got));
	seq_kv(ctx, seq, 32, got, true);
	CU_ASSERT(!memcmp(got, want, kvb));

	/* copy-on-write: the last shared page's 3 filled slots into a new page */
	CU_ASSERT_EQUAL(kvmm_seq_extend(ctx, seq, 4, 0), 0);
	kvmm_seq_table(ctx, &tab);
	src = tab.base[seq * tab.stride + 7];
	dst = tab.base[seq * tab.stride + 8];
	CU_ASSERT_EQUAL(kvmm_kv_copy(ctx, &src, &dst, 1, 3), 0);
	memset(got, 0, sizeof(got));
	seq_kv(ctx, seq, 35, got, true);
	CU_ASSERT(!memcmp(got + 32 * 2 * 8, want + 28 * 2 * 8, 3 * 2 * 8));	/* layer 0 */
	/* a shared (cached) page is never the destination, nor a page twice */
	CU_ASSERT_EQUAL(kvmm_kv_copy(ctx, &dst, &src, 1, 3), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_kv_copy(ctx, &src, &dst, 1, 5), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_kv_copy(ctx, &dst, &dst, 1, 1), -EINVAL);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	kvmm_destroy(ctx);
}

/* Cache @n tokens of @tok with KV @kv (2 layers of K and V, 8-byte slots). */
static void cache_with_kv(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t n, char *kv)
{
	uint32_t seq;

	CU_ASSERT_EQUAL_FATAL(test_seq_fill(ctx, 0, tok, n, &seq), 0);
	seq_kv(ctx, seq, n, kv, false);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, tok, n), 0);
}

/* Does the cache hold @kv for @tok?  Matched (and promoted) in a sequence. */
static bool cached_kv_is(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t n,
			 const char *kv)
{
	char *got = calloc(n, 2 * 2 * 8);
	uint32_t seq;
	bool same;

	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);	/* nothing of it on its way down */
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok, n) >= 0, 1);
	CU_ASSERT_EQUAL(kvmm_seq_promote(ctx, seq, tok, n), (int)n);
	seq_kv(ctx, seq, n, got, true);
	same = !memcmp(got, kv, (size_t)n * 2 * 2 * 8);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);
	free(got);
	return same;
}

/*
 * The pool grows and shrinks while it holds KV: growing maps memory the
 * engine can use at once; shrinking refuses while a page above the cut is
 * in use, refuses when its cached pages would not fit below, and
 * otherwise migrates them, bytes and all, and gives the memory back.
 */
static void contract_resize_keeps_every_byte(void)
{
	struct kvmm_ctx *ctx = target_ctx_max(4, 32, 64, 128);
	uint32_t tok[3][120], seq, i;
	char *kv[3];
	uint64_t st[NR_KVMM_STATS], st2[NR_KVMM_STATS];
	struct kvmm_kv_layer kl;
	struct kvmm_sqe sqe = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_NR_PAGES };
	unsigned seed = 31;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_MAX), 128);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 129), -EINVAL);
	/* grow, through the ring's SET as kvmmctl does */
	sqe.arg2 = 128;
	CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, NULL, 0), 0);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), 128);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 128);
	CU_ASSERT_EQUAL(kvmm_kv_layer(ctx, 1, &kl), 0);
	CU_ASSERT(kl.bytes >= 128ull * 4 * kl.slot_bytes);
	CHECK_OK(ctx);

	/* three 30-page prefixes: pages 0-29, 30-59, 60-89 */
	for (i = 0; i < 3; i++) {
		test_tokens(tok[i], 120, 100 + i);
		kv[i] = malloc(120 * 2 * 2 * 8);
		fill_random(kv[i], 120 * 2 * 2 * 8, &seed);
		cache_with_kv(ctx, tok[i], 120, kv[i]);
	}
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 90);

	/* the third is in use: its pages above 64 cannot move */
	CU_ASSERT_EQUAL_FATAL(kvmm_seq_open(ctx, 0, &seq), 0);
	CU_ASSERT_EQUAL(kvmm_seq_match(ctx, seq, tok[2], 120), 120);
	test_stats(ctx, st);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 64), -EBUSY);
	test_stats(ctx, st2);
	ASSERT_STATS_SAME(st, st2);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_seq_close(ctx, seq, NULL, 0), 0);

	/* unlocked, but 26 pages do not fit in the 4 free below 64 */
	test_stats(ctx, st);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 64), -ENOSPC);
	test_stats(ctx, st2);
	ASSERT_STATS_SAME(st, st2);
	CHECK_OK(ctx);

	/* demote the coldest prefix to the host tier: now they fit */
	CU_ASSERT(kvmm_reclaim(ctx, 30) >= 30);
	sqe.arg2 = 64;
	CU_ASSERT_EQUAL(kvmm_ioctl(ctx, &sqe, NULL, 0), 26);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), 64);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_MIGRATE_PAGES), 26);
	CHECK_OK(ctx);
	for (i = 0; i < 3; i++)
		CU_ASSERT(cached_kv_is(ctx, tok[i], 120, kv[i]));
	CHECK_OK(ctx);

	/* below the high watermark is refused; growing again works */
	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 0, 0, 40), 0);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 39), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 0, 0, 0), 0);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 100), 0);
	CU_ASSERT_EQUAL(test_seq_fill(ctx, 0, tok[0], 120, &seq), 0);
	CU_ASSERT_EQUAL(test_seq_fill(ctx, 1, tok[1], 120, &seq), 0);
	CHECK_OK(ctx);
	for (i = 0; i < 3; i++)
		free(kv[i]);
	kvmm_destroy(ctx);
}

/* Open descriptors of this process, to prove none leaked. */
static int open_fds(void)
{
	char path[32];
	int fd, n = 0;

	for (fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += access(path, F_OK) == 0;
	}
	return n;
}

/* Where each open descriptor leads, when a count came out wrong. */
static void show_fds(void)
{
	char path[32], to[256];
	ssize_t n;
	int fd;

	for (fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, to, sizeof(to) - 1);
		if (n >= 0)
			printf("\n    fd %d -> %.*s", fd, (int)n, to);
	}
}

/*
 * What kvmm_kv_share() describes, kvmm_kv_pool_open() maps to the same
 * memory at addresses of its own: bytes written through either side are
 * there on the other.  A grown pool is shared again, bigger.
 */
static void contract_share_maps_the_same_bytes(void)
{
	int *fds, nfd = open_fds();
	struct kvmm_ctx *ctx = target_ctx_max(16, 8, 0, 64);
	struct kvmm_share_ext *ext;
	struct kvmm_kv_pool *pool;
	struct kvmm_kv_layer mine, theirs;
	struct kvmm_share sh, bad;
	char a[512], b[512];
	unsigned seed = 8;
	uint32_t l;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	if (!strcmp(tgt.backend, "mock")) {
		/* the mock's default memory is private: a shareable pool is asked for */
		CU_ASSERT_EQUAL(kvmm_kv_share(ctx, &sh, &ext, &fds), -EOPNOTSUPP);
		kvmm_destroy(ctx);
		mock_arg.shareable = true;
		ctx = target_ctx_max(16, 8, 0, 64);
		mock_arg.shareable = false;
		CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	}
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_share(ctx, &sh, &ext, &fds), 0);
	CU_ASSERT_STRING_EQUAL(sh.backend, tgt.backend);
	CU_ASSERT_EQUAL(sh.nbufs, 4);
	CU_ASSERT_EQUAL(sh.nr_pages, 8);
	CU_ASSERT(sh.mapped_pages >= 8 && sh.max_pages >= 64);
	CU_ASSERT_EQUAL(sh.nr_fds, sh.nr_ext * sh.nbufs);

	/* descriptions that do not hold together are refused */
	bad = sh;
	bad.nbufs = 3;
	CU_ASSERT_EQUAL(kvmm_kv_pool_open(&bad, ext, fds, backend_arg(), &pool), -EINVAL);
	bad = sh;
	bad.mapped_pages = sh.mapped_pages + 1;
	CU_ASSERT_EQUAL(kvmm_kv_pool_open(&bad, ext, fds, backend_arg(), &pool), -EINVAL);
	/*
	 * geometry whose bytes per slot (2^54 + 1) pass the model check but
	 * whose pool bytes wrap to a small number: mapped short, written far
	 */
	bad = sh;
	bad.kv_heads = 37u * 109 * 246241;
	bad.head_dim = 13u * 279073;
	bad.dtype_bytes = 5;
	CU_ASSERT_EQUAL(kvmm_kv_pool_open(&bad, ext, fds, backend_arg(), &pool), -EINVAL);
	bad = sh;
	strcpy(bad.backend, "nosuch");
	CU_ASSERT_EQUAL(kvmm_kv_pool_open(&bad, ext, fds, backend_arg(), &pool), -EOPNOTSUPP);

	CU_ASSERT_EQUAL_FATAL(kvmm_kv_pool_open(&sh, ext, fds, backend_arg(), &pool), 0);
	CU_ASSERT_EQUAL(kvmm_kv_pool_pages(pool), 8);
	CU_ASSERT_EQUAL(kvmm_kv_pool_layer(pool, 2, &theirs), -EINVAL);
	for (l = 0; l < 2; l++) {
		CU_ASSERT_EQUAL(kvmm_kv_layer(ctx, l, &mine), 0);
		CU_ASSERT_EQUAL_FATAL(kvmm_kv_pool_layer(pool, l, &theirs), 0);
		CU_ASSERT(theirs.k != mine.k && theirs.slot_bytes == mine.slot_bytes);
		CU_ASSERT(theirs.bytes >= 8ull * 16 * mine.slot_bytes);
		/* the last page of each buffer: written here, read there, and back */
		fill_random(a, sizeof(a), &seed);
		tgt.mem->put((char *)theirs.k + 7 * 16 * mine.slot_bytes, a, 16 * mine.slot_bytes);
		tgt.mem->get(b, (char *)mine.k + 7 * 16 * mine.slot_bytes, 16 * mine.slot_bytes);
		CU_ASSERT(!memcmp(a, b, 16 * mine.slot_bytes));
		fill_random(a, sizeof(a), &seed);
		tgt.mem->put(mine.v, a, 16 * mine.slot_bytes);
		tgt.mem->get(b, theirs.v, 16 * mine.slot_bytes);
		CU_ASSERT(!memcmp(a, b, 16 * mine.slot_bytes));
	}
	kvmm_kv_pool_close(pool);
	kvmm_kv_share_release(&sh, ext, fds);

	CU_ASSERT_EQUAL(kvmm_resize(ctx, 64), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_share(ctx, &sh, &ext, &fds), 0);
	CU_ASSERT_EQUAL(sh.nr_pages, 64);
	CU_ASSERT(sh.mapped_pages >= 64);
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_pool_open(&sh, ext, fds, backend_arg(), &pool), 0);
	CU_ASSERT_EQUAL(kvmm_kv_pool_pages(pool), 64);
	kvmm_kv_pool_close(pool);
	kvmm_kv_share_release(&sh, ext, fds);
	kvmm_destroy(ctx);
	/*
	 * compute-sanitizer, injected into the driver, opens descriptors of
	 * its own meanwhile (its tree tracker's pipes, seen on an H100); the
	 * same test without it holds the count.
	 */
	if (open_fds() != nfd) {
		show_fds();
		if (!getenv("NV_SANITIZER_INJECTION_PORT_BASE") && !getenv("CUDA_INJECTION64_PATH"))
			CU_FAIL("descriptors left open");
	}
}

/*
 * The I/O worker's scatter (a promotion from NVMe) runs while the thread
 * under the context lock gathers (demotions to the host tier): the two
 * copy paths share the backend (cuda: on different lanes) and neither
 * loses or mixes a byte.  Run under SAN=thread for the races.
 */
static void contract_promotion_beside_demotions(void)
{
	char path[] = "/tmp/kvmm-contract-XXXXXX";
	int hold = 1, fd = mkstemp(path);
	struct kvmm_nvme_arg narg = { .latch = test_hold_worker_reads, .latch_arg = &hold };
	struct kvmm_params p = test_params(4, 16, 64, 4096);
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	uint32_t tok[6][32], i;
	struct kvmm_iovec iov = { tok[0], sizeof(tok[0]) };
	struct kvmm_tier_hits hits;
	struct kvmm_ctx *ctx = NULL;
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	struct kvmm_cqe *cqe;
	unsigned seed = 4;
	char *kv[6];
	int32_t seq;

	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	p.backend = tgt.backend;
	p.backend_arg = backend_arg();
	p.host_pages = 24;
	p.host_wmark_low = 12;	/* room for a prefix while the last one is written */
	p.host_wmark_high = 16;
	p.nvme_pages = 64;
	p.nvme_path = path;
	p.nvme_arg = &narg;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	for (i = 0; i < 6; i++) {
		test_tokens(tok[i], 32, 600 + i);
		kv[i] = malloc(32 * 2 * 2 * 8);
		fill_random(kv[i], 32 * 2 * 2 * 8, &seed);
	}
	/* four prefixes of 8 pages through 16 device and 24 host pages: the first lands on NVMe */
	for (i = 0; i < 4; i++)
		cache_with_kv(ctx, tok[i], 32, kv[i]);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);	/* background reclaim wrote it */
	CU_ASSERT_EQUAL(kvmm_prefix_tiers(ctx, 0, tok[0], 32, &hits), 32);
	CU_ASSERT_EQUAL_FATAL(hits.tokens[KVMM_TIER_NVME], 32);

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&ring, &iov, 1), 0);
	kvmm_prep_open(TEST_SQE(&ring), 0);
	seq = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(seq >= 0);
	kvmm_prep_match(TEST_SQE(&ring), (uint32_t)seq, 1, 0, 32);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	sqe = TEST_SQE(&ring);
	kvmm_prep_promote(sqe, (uint32_t)seq, 1, 0, 32);
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 1);

	/* let the worker go, and demote meanwhile */
	__atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
	kvmm_lock(ctx);
	for (i = 4; i < 6; i++) {
		cache_with_kv(ctx, tok[i], 32, kv[i]);
		CU_ASSERT(kvmm_reclaim(ctx, 8) >= 0);
	}
	kvmm_unlock(ctx);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&ring, &cqe), 0);	/* the PROMOTE's */
	CU_ASSERT_EQUAL(cqe->res, 32);
	kvmm_cqe_seen(&ring, cqe);
	kvmm_prep_close(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_ring_exit(&ring);
	CU_ASSERT_EQUAL(kvmm_sync(ctx), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_NVME_PROMOTE_PAGES), 8);
	CHECK_OK(ctx);
	CU_ASSERT(cached_kv_is(ctx, tok[0], 32, kv[0]));
	CU_ASSERT(cached_kv_is(ctx, tok[5], 32, kv[5]));
	CHECK_OK(ctx);
	for (i = 0; i < 6; i++)
		free(kv[i]);
	kvmm_destroy(ctx);
	unlink(path);
}

static void contract_info_names_the_backend(void)
{
	struct kvmm_ctx *ctx = target_ctx(16, 64, 0);
	char line[256];

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT(kvmm_backend_info(ctx, line, sizeof(line)) > 0);
	CU_ASSERT(!strncmp(line, tgt.backend, strlen(tgt.backend)));
	printf("\n    %s ", line);
	CU_ASSERT_EQUAL(kvmm_backend_info(ctx, line, 0), -EINVAL);
	kvmm_destroy(ctx);
}

/*
 * On a device the copies must be the kernels, or the suite would hold
 * only the copy engines to the references: the fatbin must have an image
 * (or PTX) this GPU loads.
 */
static void cuda_device_runs_the_kernels(void)
{
	struct kvmm_ctx *ctx = target_ctx(16, 64, 0);
	char line[256];

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT(kvmm_backend_info(ctx, line, sizeof(line)) > 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(line, "copies by kernels"));
	kvmm_destroy(ctx);
}

/* ---- cuda on the fake driver: errors, faults, sizing ---- */

static void cuda_errno_is_mapped_in_one_place(void)
{
	CU_ASSERT_EQUAL(kvmm_cu_errno(0), 0);
	CU_ASSERT_EQUAL(kvmm_cu_errno(2), -ENOMEM);		/* OUT_OF_MEMORY */
	CU_ASSERT_EQUAL(kvmm_cu_errno(1), -EINVAL);		/* INVALID_VALUE */
	CU_ASSERT_EQUAL(kvmm_cu_errno(100), -ENODEV);		/* NO_DEVICE */
	CU_ASSERT_EQUAL(kvmm_cu_errno(34), -ENODEV);		/* STUB_LIBRARY */
	CU_ASSERT_EQUAL(kvmm_cu_errno(209), -ENOEXEC);		/* NO_BINARY_FOR_GPU */
	CU_ASSERT_EQUAL(kvmm_cu_errno(801), -EOPNOTSUPP);	/* NOT_SUPPORTED */
	CU_ASSERT_EQUAL(kvmm_cu_errno(712), -EEXIST);		/* HOST_MEMORY_ALREADY_REGISTERED */
	CU_ASSERT_EQUAL(kvmm_cu_errno(700), -EIO);		/* ILLEGAL_ADDRESS */
	CU_ASSERT_EQUAL(kvmm_cu_errno(999), -EIO);		/* UNKNOWN */
}

static int create_logged(struct kvmm_params *p, struct test_log *log, struct kvmm_ctx **ctxp)
{
	memset(log, 0, sizeof(*log));
	p->log = test_log_fn;
	p->log_priv = log;
	return kvmm_create(p, ctxp);
}

static void cuda_without_driver_is_enodev(void)
{
	struct kvmm_params p = test_params(16, 64, 4, 256);
	struct kvmm_cuda_arg arg = { .driver = "/nonexistent/libcuda.so.1" };
	struct kvmm_ctx *ctx = NULL;
	struct test_log log;

	p.backend = "cuda";
	p.backend_arg = &arg;
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), -ENODEV);
	CU_ASSERT_PTR_NULL(ctx);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "no driver"));
	/* sizing asks the driver first: the same answer */
	p.nr_pages = 0;
	p.mem_fraction = 0.5;
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), -ENODEV);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "no driver"));
}

static void cuda_without_device_is_enodev(void)
{
	struct kvmm_params p = test_params(16, 64, 4, 256);
	struct kvmm_ctx *ctx = NULL;
	struct test_log log;

	p.backend = "cuda";
	p.backend_arg = backend_arg();
	fake_devices(0);
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), -ENODEV);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "no device"));
	fake_devices(1);
	cuda_arg.device = 3;
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), -ENODEV);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "no device 3"));
	cuda_arg.device = 0;
	CU_ASSERT_EQUAL(fake_live(), 0);
}

/* Fail each driver call init makes, in turn: a clean error, nothing left. */
static void cuda_init_faults_leave_nothing(void)
{
	static const char *const fns[] = {
		"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuStreamCreate",
		"cuEventCreate", "cuMemAllocHost", "cuMemAlloc", "cuMemGetAllocationGranularity",
		"cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess",
		"cuMemcpyHtoDAsync", "cuEventSynchronize",
	};
	struct kvmm_params p = test_params(4, 600, 4, 256);
	struct kvmm_ctx *ctx = NULL;
	struct test_log log;
	unsigned nth;
	size_t i;

	p.backend = "cuda";
	p.backend_arg = backend_arg();
	p.model.layers = 3;
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		for (nth = 1; nth <= 3; nth++) {
			fake_fail(fns[i], nth, 2 /* OUT_OF_MEMORY */);
			ctx = NULL;
			if (create_logged(&p, &log, &ctx) == 0) {
				kvmm_destroy(ctx);	/* fewer calls than nth */
				continue;
			}
			CU_ASSERT_PTR_NULL(ctx);
			CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "out of memory"));
			CU_ASSERT_EQUAL(fake_live(), 0);
		}
	}
	fake_fail("", 0, 0);
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(fake_live(), 0);
}

/*
 * Resizing maps and unmaps whole extents: with 32 KiB page runs and the
 * fake's 64 KiB granularity a chunk is 2 pages, so 2 -> 7 pages maps one
 * 6-page extent per buffer and 7 -> 2 releases it.  A device that runs
 * out of memory mid-growth leaves the pool as it was; a share whose export
 * fails leaves no descriptor behind.
 */
static void cuda_resize_maps_whole_extents(void)
{
	struct kvmm_ctx *ctx = target_ctx_max(4096, 2, 0, 16);
	struct kvmm_share_ext *ext;
	struct kvmm_share sh;
	char line[256];
	long live;
	int *fds, nfd;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	live = fake_live();
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 7), 0);
	CU_ASSERT_EQUAL(fake_live(), live + 8);	/* a handle and a mapping per buffer */
	CU_ASSERT(kvmm_backend_info(ctx, line, sizeof(line)) > 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(line, "8 pages mapped of 16 reserved"));
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 3), 0);	/* the extent still backs page 2 */
	CU_ASSERT_EQUAL(fake_live(), live + 8);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 2), 0);
	CU_ASSERT_EQUAL(fake_live(), live);
	CHECK_OK(ctx);

	fake_fail("cuMemMap", 3, 2 /* OUT_OF_MEMORY */);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 16), -ENOMEM);
	fake_fail("", 0, 0);
	CU_ASSERT_EQUAL(fake_live(), live);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), 2);
	CHECK_OK(ctx);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 16), 0);

	nfd = open_fds();
	fake_fail("cuMemExportToShareableHandle", 3, 2);
	CU_ASSERT_EQUAL(kvmm_kv_share(ctx, &sh, &ext, &fds), -ENOMEM);
	fake_fail("", 0, 0);
	CU_ASSERT_EQUAL(open_fds(), nfd);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(fake_live(), 0);
}

/**
 * cuda_attach_child() - the second process of cuda_pool_shared_across_processes
 * @path: the server's socket
 * @driver: the driver library ("" for libcuda.so.1)
 *
 * kvmm-tests runs this when exec'ed as "kvmm-tests --cuda-attach-child
 * PATH DRIVER": a fresh process (a CUDA driver does not survive fork()),
 * which attaches to the server's pool through the cuda backend, imports
 * the allocations from the descriptors it was sent and writes page 3 of
 * every K buffer with byte 0x60 + layer.
 *
 * Return: the exit status, 0 when all went well.
 */
int cuda_attach_child(const char *path, const char *driver)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	struct kvmm_cuda_arg arg = { .driver = driver[0] ? driver : NULL };
	struct kvmm_kv_pool *pool;
	struct kvmm_kv_layer kl;
	struct kvmm_ring ring;
	char page[16 * 256];
	uint32_t l;

	if (cu_bind(driver[0] ? driver : "libcuda.so.1"))
		return 9;
	if (kvmm_ring_connect(path, &rp, &ring) || kvmm_kv_pool_attach(&ring, &arg, &pool))
		return 10;
	for (l = 0; kvmm_kv_pool_layer(pool, l, &kl) == 0; l++) {
		if (16 * kl.slot_bytes > sizeof(page))
			return 11;
		memset(page, 0x60 + (int)l, 16 * kl.slot_bytes);
		if (cu_htod((uint64_t)(uintptr_t)kl.k + 3 * 16 * kl.slot_bytes, page,
			    16 * kl.slot_bytes))
			return 12;
	}
	kvmm_kv_pool_close(pool);
	kvmm_ring_exit(&ring);
	return l == 2 ? 0 : 13;
}

/*
 * kvmmd's way: the pool's device allocations mapped by another process,
 * an exec'ed kvmm-tests, through the descriptors sent over the socket.
 */
static void contract_pool_shared_across_processes(void)
{
	struct kvmm_ctx *ctx = target_ctx(16, 64, 0);
	struct kvmm_server *srv;
	struct kvmm_kv_layer kl;
	char path[64], exe[PATH_MAX], got[16 * 256], want[16 * 256];
	int status = -1;
	ssize_t n;
	uint32_t l;
	pid_t pid;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CU_ASSERT_FATAL(n > 0);
	exe[n] = 0;
	snprintf(path, sizeof(path), "/tmp/kvmm-share-%d.sock", (int)getpid());
	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, path, 0, &srv), 0);
	pid = fork();
	if (!pid) {
		execl(exe, exe, "--cuda-attach-child", path, tgt.driver, (char *)NULL);
		_exit(127);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		printf("\n    child status %#x ", status);
	for (l = 0; l < 2; l++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_kv_layer(ctx, l, &kl), 0);
		memset(want, 0x60 + (int)l, 16 * kl.slot_bytes);
		tgt.mem->get(got, (char *)kl.k + 3 * 16 * kl.slot_bytes, 16 * kl.slot_bytes);
		CU_ASSERT(!memcmp(got, want, 16 * kl.slot_bytes));
	}
	kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* A copy the device fails during demotion demotes nothing and loses no page. */
static void cuda_copy_fault_is_contained(void)
{
	struct kvmm_ctx *ctx = target_ctx(4, 16, 64);
	uint64_t before[NR_KVMM_STATS], after[NR_KVMM_STATS];
	uint32_t tok[32];

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	test_tokens(tok, 32, 3);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 32), 0);
	fake_fail("cuLaunchKernel", 1, 700 /* ILLEGAL_ADDRESS */);
	test_stats(ctx, before);
	CU_ASSERT(kvmm_reclaim(ctx, 16) >= 0);
	test_stats(ctx, after);
	CU_ASSERT(after[KVMM_STAT_HOST_DEMOTE_PAGES] < 8);
	CHECK_OK(ctx);
	fake_fail("", 0, 0);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(fake_live(), 0);
}

/* A failed registration of the page table maps nothing; the next call does. */
static void cuda_table_map_fault_is_contained(void)
{
	struct kvmm_ctx *ctx = target_ctx(16, 64, 0);
	void *dev = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	fake_fail("cuMemHostRegister", 1, 2 /* OUT_OF_MEMORY */);
	CU_ASSERT_EQUAL(kvmm_page_table_dev(ctx, &dev), -ENOMEM);
	CU_ASSERT_PTR_NULL(dev);
	fake_fail("cuMemHostGetDevicePointer", 1, 1 /* INVALID_VALUE */);
	CU_ASSERT_EQUAL(kvmm_page_table_dev(ctx, &dev), -EINVAL);
	CU_ASSERT_PTR_NULL(dev);
	fake_fail("", 0, 0);
	CU_ASSERT_EQUAL(kvmm_page_table_dev(ctx, &dev), 0);
	CU_ASSERT_PTR_NOT_NULL(dev);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	CU_ASSERT_EQUAL(fake_live(), 0);
}

/* The copy engines give the same bytes as the kernels, one copy per run. */
static void cuda_copy_engines_match_reference(void)
{
	cuda_arg.no_kernels = true;
	fake_reset();
	contract_copies_match_reference();
	CU_ASSERT_EQUAL(fake_calls("cuLaunchKernel"), 0);
	CU_ASSERT(fake_calls("cuMemcpyAsync") > 0);
	cuda_arg.no_kernels = false;
	fake_reset();
	contract_copies_match_reference();
	CU_ASSERT(fake_calls("cuLaunchKernel") > 0);
	CU_ASSERT_EQUAL(fake_calls("cuMemcpyAsync"), 0);
}

/*
 * Staging may be device memory (the bench's device-to-device baseline, a
 * GPUDirect path): registering it pins nothing, and gather and scatter,
 * by kernel and by copy engine, move the references' bytes.
 */
static void cuda_gathers_into_device_staging(void)
{
	unsigned seed = 77, pass;

	for (pass = 0; pass < 2; pass++) {
		uint32_t nr_pages = 64, nr = 20, i;
		struct pool pl;
		uint64_t page;
		char *dstage, *want, *got;
		void *addr[20];
		char *wh[20];
		int32_t pfns[40];
		unsigned hr;

		cuda_arg.no_kernels = pass == 1;
		CU_ASSERT_EQUAL_FATAL(pool_open(&pl, &geoms[1], 16, nr_pages, &seed), 0);
		page = kvmm_kv_page_bytes(&pl.g);
		dstage = tgt.mem->alloc(page * nr);
		want = malloc(page * nr);
		got = malloc(page * nr);
		hr = fake_calls("cuMemHostRegister");
		CU_ASSERT_EQUAL_FATAL(pl.ops->mem_register(pl.priv, dstage, page * nr), 0);
		CU_ASSERT_EQUAL(fake_calls("cuMemHostRegister"), hr);	/* nothing pinned */
		random_pfns(pfns, 40, nr_pages, &seed);
		for (i = 0; i < nr; i++) {
			addr[i] = dstage + page * (nr - 1 - i);	/* any order */
			wh[i] = want + page * (nr - 1 - i);
		}
		CU_ASSERT_EQUAL(pl.ops->gather(pl.priv, pfns, nr, addr), 0);
		kvmm_ref_move(&pl.g, pl.mirror, pfns, nr, wh, KVMM_KV_GATHER);
		tgt.mem->get(got, dstage, page * nr);
		CU_ASSERT(!memcmp(got, want, page * nr));
		CU_ASSERT_EQUAL(pl.ops->scatter(pl.priv, pfns + nr, nr, addr), 0);
		kvmm_ref_move(&pl.g, pl.mirror, pfns + nr, nr, wh, KVMM_KV_SCATTER);
		CU_ASSERT(pool_same(&pl));
		pl.ops->mem_unregister(pl.priv, dstage, page * nr);
		tgt.mem->free(dstage);
		free(want);
		free(got);
		pool_close(&pl);
		fake_reset();
	}
	cuda_arg.no_kernels = false;
}

/* mem_fraction sizing from what the device reports, as SGLang does. */
static void cuda_pool_sized_from_device_memory(void)
{
	struct kvmm_params p = test_params(16, 0, 4, 256);
	struct kvmm_ctx *ctx = NULL;
	uint64_t cell = kvmm_cell_bytes(&p.model) * 16;

	p.backend = "cuda";
	p.backend_arg = backend_arg();
	p.mem_fraction = 0.75;
	fake_mem(64ull << 20, 56ull << 20);
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	/* 56 MiB free - 64 MiB * 0.25 kept back = 40 MiB for the pool */
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), (40ull << 20) / cell);
	kvmm_destroy(ctx);
	fake_mem(64ull << 20, 8ull << 20);
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -ENOSPC);
	fake_reset();
}

static void mock_pool_sized_from_its_pretend_device(void)
{
	struct kvmm_params p = test_params(16, 0, 4, 256);
	struct kvmm_mock_arg arg = { .mem_total = 1 << 20, .mem_avail = 1 << 19 };
	struct kvmm_ctx *ctx = NULL;
	struct test_log log;

	p.backend_arg = &arg;
	p.mem_fraction = 1.0;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), (1u << 19) / (kvmm_cell_bytes(&p.model) * 16));
	kvmm_destroy(ctx);
	arg.mem_total = 0;
	CU_ASSERT_EQUAL(create_logged(&p, &log, &ctx), -EOPNOTSUPP);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "mem_total"));
}

/* A resize the backend refuses changes nothing; so does a share it refuses. */
static void mock_resize_and_share_faults_change_nothing(void)
{
	struct kvmm_ctx *ctx = target_ctx_max(4, 32, 0, 64);
	struct kvmm_share_ext *ext = (void *)1;
	struct kvmm_share sh;
	uint64_t st[NR_KVMM_STATS], st2[NR_KVMM_STATS];
	struct kvmm_params p = test_params(4, 32, 4, 256);
	struct kvmm_ctx *c2 = NULL;
	int *fds = (void *)1;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	mock_faults.fail_resize = -ENOMEM;
	test_stats(ctx, st);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 64), -ENOMEM);
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 16), -ENOMEM);
	test_stats(ctx, st2);
	ASSERT_STATS_SAME(st, st2);
	CHECK_OK(ctx);
	mock_faults.fail_resize = 0;
	CU_ASSERT_EQUAL(kvmm_resize(ctx, 16), 0);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), 16);
	CHECK_OK(ctx);

	mock_faults.fail_share = -EIO;
	CU_ASSERT_EQUAL(kvmm_kv_share(ctx, &sh, &ext, &fds), -EIO);
	CU_ASSERT(ext == NULL && fds == NULL && sh.status == -EIO);
	mock_faults.fail_share = 0;
	kvmm_destroy(ctx);

	/* max_pages below the pool, or past the limits, is refused */
	p.max_pages = 31;
	CU_ASSERT_EQUAL(kvmm_create(&p, &c2), -EINVAL);
	p.max_pages = KVMM_MAX_PAGES + 1;
	CU_ASSERT_EQUAL(kvmm_create(&p, &c2), -EINVAL);
}

/* ---- suites ---- */

static int mock_setup(void)
{
	tgt = (struct target){ .backend = "mock", .mem = &host_mem };
	return 0;
}

static int cuda_setup_fake(void)
{
	tgt.backend = "cuda";
	tgt.mem = &dev_mem;
	/* the fake sits beside kvmm-tests */
	if (readlink("/proc/self/exe", tgt.driver, sizeof(tgt.driver) - 32) < 0)
		return -1;
	strcpy(strrchr(tgt.driver, '/'), "/libfakecuda.so");
	if (cu_bind(tgt.driver))
		return -1;
	fake_reset = (void (*)(void))dlsym(cu_dl, "fakecuda_reset");
	fake_devices = (void (*)(int))dlsym(cu_dl, "fakecuda_devices");
	fake_mem = (void (*)(size_t, size_t))dlsym(cu_dl, "fakecuda_mem");
	fake_fail = (void (*)(const char *, unsigned, int))dlsym(cu_dl, "fakecuda_fail");
	fake_calls = (unsigned (*)(const char *))dlsym(cu_dl, "fakecuda_calls");
	fake_live = (long (*)(void))dlsym(cu_dl, "fakecuda_live");
	return fake_reset && fake_live ? 0 : -1;
}

static int cuda_setup_real(void)
{
	tgt.backend = "cuda";
	tgt.driver[0] = 0;
	tgt.mem = &dev_mem;
	return cu_bind("libcuda.so.1");
}

/*
 * The context the device suite needs; NULL and a reason when this
 * machine cannot give one.
 */
static int cuda_probe(char *why, size_t len)
{
	struct kvmm_params p = test_params(16, 64, 4, 256);
	struct kvmm_cuda_arg arg = { 0 };
	struct kvmm_ctx *ctx = NULL;
	struct test_log log;
	int ret;

	p.backend = "cuda";
	p.backend_arg = &arg;
	ret = create_logged(&p, &log, &ctx);
	if (ret)
		snprintf(why, len, "%.250s", log.last[0] ? log.last : strerror(-ret));
	kvmm_destroy(ctx);
	return ret;
}

static int suite_teardown(void)
{
	if (cu_dl)
		dlclose(cu_dl);
	cu_dl = NULL;
	return 0;
}

#define ADD_CONTRACT(s) do { \
	ADD_TEST(s, contract_copies_match_reference); \
	ADD_TEST(s, contract_unregistered_staging_is_efault); \
	ADD_TEST(s, contract_kv_indices_match_reference); \
	ADD_TEST(s, contract_page_table_dev_is_the_table); \
	ADD_TEST(s, contract_promote_after_demote_is_identical); \
	ADD_TEST(s, contract_info_names_the_backend); \
	ADD_TEST(s, contract_resize_keeps_every_byte); \
	ADD_TEST(s, contract_share_maps_the_same_bytes); \
	ADD_TEST(s, contract_promotion_beside_demotions); \
} while (0)

int register_backend_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_contract_mock", mock_setup, NULL);

	if (!s)
		return -1;
	ADD_CONTRACT(s);
	ADD_TEST(s, mock_pool_sized_from_its_pretend_device);
	ADD_TEST(s, mock_resize_and_share_faults_change_nothing);
#if CONFIG_KVMM_CUDA_H
	{
		char why[300] = "";

		s = CU_add_suite("kvmm_contract_fakecuda", cuda_setup_fake, suite_teardown);
		if (!s)
			return -1;
		ADD_CONTRACT(s);
		ADD_TEST(s, cuda_errno_is_mapped_in_one_place);
		ADD_TEST(s, cuda_without_driver_is_enodev);
		ADD_TEST(s, cuda_without_device_is_enodev);
		ADD_TEST(s, cuda_init_faults_leave_nothing);
		ADD_TEST(s, cuda_copy_fault_is_contained);
		ADD_TEST(s, cuda_table_map_fault_is_contained);
		ADD_TEST(s, cuda_copy_engines_match_reference);
		ADD_TEST(s, cuda_pool_sized_from_device_memory);
		ADD_TEST(s, cuda_resize_maps_whole_extents);
		ADD_TEST(s, cuda_gathers_into_device_staging);
		ADD_TEST(s, contract_pool_shared_across_processes);

		s = CU_add_suite("kvmm_contract_cuda", cuda_setup_real, suite_teardown);
		if (!s)
			return -1;
		ADD_CONTRACT(s);
#if CONFIG_KVMM_NVCC
		ADD_TEST(s, cuda_device_runs_the_kernels);
#endif
		ADD_TEST(s, contract_pool_shared_across_processes);
		if (cuda_probe(why, sizeof(why))) {
			printf("kvmm_contract_cuda: inactive: %s\n", why);
			CU_set_suite_active(s, CU_FALSE);
		}
	}
#else
	printf("kvmm_contract_cuda: not built: no cuda.h (CUDA toolkit) at build time\n");
#endif
	return 0;
}
