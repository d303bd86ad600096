// SPDX-License-Identifier: MIT
/* tests/kvmm/ctx_test.c - kvmm_ctx: creation parameters, sizing, unwinding. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../helpers.h"
#include "../hostile/hostile.h"

static int create(struct kvmm_params *p)
{
	struct kvmm_ctx *ctx = NULL;
	int ret = kvmm_create(p, &ctx);

	if (!ret) {
		CU_ASSERT_EQUAL(kvmm_check(ctx), 0);
		kvmm_destroy(ctx);
	}
	return ret;
}

static void create_valid_params_succeeds(void)
{
	struct kvmm_params p = test_params(16, 64, 4, 256);
	struct kvmm_ctx *ctx = NULL;

	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL(kvmm_page_size(ctx), 16);
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), 64);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE), 64);
	CU_ASSERT_STRING_EQUAL(kvmm_evict_policy(ctx), "lru");
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void create_every_power_of_two_page_size_succeeds(void)
{
	uint32_t ps;

	for (ps = 1; ps <= 512; ps *= 2) {
		struct kvmm_params p = test_params(ps, 8, 2, 4 * ps);

		CU_ASSERT_EQUAL(create(&p), 0);
	}
}

/*
 * The size field: a caller that never called kvmm_params_init() (size 0)
 * or claims less than the first sized version is refused; one built
 * against a newer header is accepted while it leaves the fields this
 * library does not know unset, and refused when it sets one.
 */
static void create_checks_params_size(void)
{
	struct {
		struct kvmm_params p;
		uint64_t newer[2];
	} big;
	struct kvmm_params p = test_params(1, 32, 4, 64);
	struct kvmm_ctx *ctx = NULL;

	CU_ASSERT_EQUAL(p.size, sizeof(struct kvmm_params));
	p.size = 0;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	p.size = KVMM_PARAMS_SIZE_VER0 - 1;
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	CU_ASSERT_PTR_NULL(ctx);

	memset(&big, 0, sizeof(big));
	big.p = test_params(1, 32, 4, 64);
	big.p.size = sizeof(big);
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&big.p, &ctx), 0);
	kvmm_destroy(ctx);
	ctx = NULL;
	big.newer[1] = 1;
	CU_ASSERT_EQUAL(kvmm_create(&big.p, &ctx), -EINVAL);
	CU_ASSERT_PTR_NULL(ctx);
}

static void create_page_size_not_power_of_two_fails(void)
{
	struct kvmm_params p = test_params(24, 8, 2, 64);

	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.page_size = 0;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.page_size = KVMM_MAX_PAGE_SIZE * 2;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
}

static void create_zero_sizes_fail(void)
{
	struct kvmm_params p = test_params(1, 8, 2, 64);

	p.max_seqs = 0;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p = test_params(1, 8, 2, 0);
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p = test_params(1, 8, 2, 64);
	p.model.layers = 0;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_create(NULL, NULL), -EINVAL);
}

static void create_inconsistent_model_fails(void)
{
	struct kvmm_params p = test_params(1, 8, 2, 64);

	p.model.latent_dim = 512;	/* MHA with a latent vector */
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.model.attn = KVMM_ATTN_MLA;	/* MLA with heads */
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.model.kv_heads = p.model.head_dim = 0;
	CU_ASSERT_EQUAL(create(&p), 0);
	p.model.attn = 7;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
}

static void create_unknown_backend_or_policy_fails(void)
{
	struct kvmm_params p = test_params(1, 8, 2, 64);

	p.backend = "nosuch";
	CU_ASSERT_EQUAL(create(&p), -EOPNOTSUPP);
	p.backend = NULL;
	p.evict_policy = "fifo9";
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.evict_policy = "slru";
	CU_ASSERT_EQUAL(create(&p), 0);
}

static void create_pool_past_int32_slots_fails(void)
{
	struct kvmm_params p = test_params(4096, (1u << 19) + 1, 2, 64);

	/* 2^19 + 1 pages of 4,096 slots: a slot index would overflow int32 */
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p = test_params(1, KVMM_MAX_PAGES + 1, 2, 64);
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
}

static void create_bad_watermarks_fail(void)
{
	struct kvmm_params p = test_params(1, 8, 2, 64);

	p.wmark_min = 3;
	p.wmark_low = 2;
	p.wmark_high = 4;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.wmark_min = 1;
	p.wmark_high = 9;	/* above the pool */
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.wmark_high = 8;
	CU_ASSERT_EQUAL(create(&p), 0);
}

static void cell_bytes_follows_sglang(void)
{
	struct kvmm_model mha = { .layers = 32, .kv_heads = 8, .head_dim = 128,
				  .dtype_bytes = 2, .attn = KVMM_ATTN_MHA };
	struct kvmm_model mla = { .layers = 61, .latent_dim = 576, .dtype_bytes = 2,
				  .attn = KVMM_ATTN_MLA };

	/* Llama-3-8B: 128 KiB per token; DeepSeek-V3 MLA: 70,272 bytes */
	CU_ASSERT_EQUAL(kvmm_cell_bytes(&mha), 131072);
	CU_ASSERT_EQUAL(kvmm_cell_bytes(&mla), 61 * 576 * 2);
	CU_ASSERT_EQUAL(kvmm_cell_bytes(NULL), 0);
}

/*
 * Absurd geometry: every size computed from the parameters is checked for
 * overflow, and the refusal names the field.  Each case runs in a child,
 * since the unchecked code divided by a product that wrapped to 0.
 */
struct geom_case {
	const char *what;
	const char *field;	/* the log message must name it */
	struct kvmm_model model;
	uint32_t page_size, nr_pages, host_pages, nvme_pages;
	uint64_t mem_avail;	/* budget sizing when not 0 */
};

#define MHA(l, h, d, b) { .layers = (l), .kv_heads = (h), .head_dim = (d), \
			  .dtype_bytes = (b), .attn = KVMM_ATTN_MHA }

static const struct geom_case geom_cases[] = {
	{ "bytes per token wrap to 0 (SIGFPE)", "kv_heads",
	  MHA(32, 2147483648u, 2147483648u, 2), .page_size = 16, .mem_avail = 1ull << 30 },
	{ "bytes per token wrap to a small number", "head_dim",
	  MHA(32, 3340214413u, 2761311370u, 1), .page_size = 16, .nr_pages = 8 },
	{ "K and V buffers past 32 bits", "layers", MHA(1u << 31, 1, 1, 1),
	  .page_size = 1, .nr_pages = 8 },
	{ "MLA bytes per token", "latent_dim",
	  { .layers = UINT32_MAX, .latent_dim = UINT32_MAX, .dtype_bytes = 16,
	    .attn = KVMM_ATTN_MLA }, .page_size = 1, .nr_pages = 8 },
	{ "bytes per page", "page_size", MHA(65536, 65536, 65536, 16),
	  .page_size = 4096, .nr_pages = 8 },
	{ "device pool bytes", "nr_pages", MHA(65536, 65536, 65536, 16),
	  .page_size = 512, .nr_pages = 2 },
	{ "host tier bytes", "host_pages", MHA(65536, 65536, 65536, 16),
	  .page_size = 512, .nr_pages = 1, .host_pages = 2 },
	{ "NVMe tier bytes", "nvme_pages", MHA(65536, 65536, 65536, 16),
	  .page_size = 512, .nr_pages = 1, .host_pages = 1, .nvme_pages = 2 },
	{ "page size not a power of two", "page_size", MHA(2, 1, 4, 2),
	  .page_size = 3, .nr_pages = 8 },
	{ "dtype_bytes past 16", "dtype_bytes", MHA(2, 1, 4, 17),
	  .page_size = 1, .nr_pages = 8 },
	{ "unknown attention", "attn", { .layers = 2, .kv_heads = 1, .head_dim = 4,
					 .dtype_bytes = 2, .attn = 7 },
	  .page_size = 1, .nr_pages = 8 },
};

/* In the child: 0 when refused with -EINVAL and a message naming the field. */
static int geom_refused(void *arg)
{
	const struct geom_case *gc = arg;
	struct kvmm_params p = test_params(gc->page_size, gc->nr_pages, 2, 64);
	struct test_log log = { 0 };
	struct kvmm_ctx *ctx = NULL;
	int ret;

	p.model = gc->model;
	p.host_pages = gc->host_pages;
	p.nvme_pages = gc->nvme_pages;
	p.nvme_path = gc->nvme_pages ? "/nonexistent/kvmm-nvme" : NULL;
	if (gc->mem_avail) {
		p.mem_avail = p.mem_total = gc->mem_avail;
		p.mem_fraction = 0.88;
	}
	p.log = test_log_fn;
	p.log_priv = &log;
	ret = kvmm_create(&p, &ctx);
	if (!ret)
		kvmm_destroy(ctx);
	if (ret != -EINVAL || !strstr(log.last, gc->field)) {
		fprintf(stderr, "geometry '%s': %d, log '%s' (wants -EINVAL naming %s)\n",
			gc->what, ret, log.last, gc->field);
		return 1;
	}
	return 0;
}

static void create_absurd_geometry_fails_naming_the_field(void)
{
	struct kvmm_model wrap = MHA(32, 2147483648u, 2147483648u, 2);
	size_t i;

	for (i = 0; i < sizeof(geom_cases) / sizeof(geom_cases[0]); i++)
		CU_ASSERT_EQUAL(hostile_child((uid_t)-1, geom_refused,
					      (void *)&geom_cases[i], 20000), 0);
	/* the public size helpers say 0 rather than a wrapped size */
	CU_ASSERT_EQUAL(kvmm_cell_bytes(&wrap), 0);
	wrap = (struct kvmm_model)MHA(65536, 65536, 65536, 16);
	CU_ASSERT_EQUAL(kvmm_cell_bytes(&wrap), 1ull << 53);
	CU_ASSERT_EQUAL(kvmm_page_bytes(&wrap, 4096), 0);
}

static void create_budget_sizing_matches_formula(void)
{
	struct kvmm_params p = test_params(16, 0, 2, 64);
	struct kvmm_ctx *ctx = NULL;
	uint64_t cell = kvmm_cell_bytes(&p.model);	/* 2*1*4*2*2 = 32 */

	p.mem_total = 1 << 20;
	p.mem_avail = 900 * 1024;
	p.mem_fraction = 0.5;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	/* (avail - total * (1 - frac)) / (cell * page_size) */
	CU_ASSERT_EQUAL(kvmm_nr_pages(ctx), (900 * 1024 - (1 << 19)) / (cell * 16));
	kvmm_destroy(ctx);

	p.mem_avail = 1 << 18;	/* below what the fraction leaves */
	CU_ASSERT_EQUAL(create(&p), -ENOSPC);
	p.mem_fraction = 1.5;
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
	p.mem_fraction = 0.5;
	p.nr_pages = 8;		/* both sizings at once */
	CU_ASSERT_EQUAL(create(&p), -EINVAL);
}

static void create_backend_failure_unwinds_everything(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_mock_faults f = { .fail_init = -EIO };
	struct kvmm_mock_arg arg = { .faults = &f };
	struct kvmm_params p = test_params(1, 32, 4, 64);

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	p.backend_arg = &arg;
	CU_ASSERT_EQUAL(create(&p), -EIO);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	CU_ASSERT_EQUAL(ta.live_bytes, 0);
}

static void destroy_with_open_sequences_frees_all(void)
{
	struct test_alloc ta = { 0 };
	struct kvmm_params p = test_params(2, 64, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	uint32_t tok[40], seq;

	p.alloc = &test_alloc_ops;
	p.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	test_tokens(tok, 40, 1);
	CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, 40), 0);
	CU_ASSERT_EQUAL(test_seq_fill(ctx, 3, tok, 30, &seq), 0);
	CU_ASSERT(ta.live_blocks > 0);
	kvmm_destroy(ctx);
	kvmm_destroy(NULL);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	CU_ASSERT_EQUAL(ta.live_bytes, 0);
}

static void set_watermarks_validates(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 100, 2, 64);

	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 5, 4, 10), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 1, 2, 101), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_set_watermarks(NULL, 0, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_set_watermarks(ctx, 1, 2, 3), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_WMARK_LOW), 2);
	kvmm_destroy(ctx);
}

int register_ctx_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_ctx", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, create_valid_params_succeeds);
	ADD_TEST(s, create_every_power_of_two_page_size_succeeds);
	ADD_TEST(s, create_checks_params_size);
	ADD_TEST(s, create_page_size_not_power_of_two_fails);
	ADD_TEST(s, create_zero_sizes_fail);
	ADD_TEST(s, create_inconsistent_model_fails);
	ADD_TEST(s, create_unknown_backend_or_policy_fails);
	ADD_TEST(s, create_pool_past_int32_slots_fails);
	ADD_TEST(s, create_bad_watermarks_fail);
	ADD_TEST(s, cell_bytes_follows_sglang);
	ADD_TEST(s, create_absurd_geometry_fails_naming_the_field);
	ADD_TEST(s, create_budget_sizing_matches_formula);
	ADD_TEST(s, create_backend_failure_unwinds_everything);
	ADD_TEST(s, destroy_with_open_sequences_frees_all);
	ADD_TEST(s, set_watermarks_validates);
	return 0;
}
