// SPDX-License-Identifier: MIT
/* tests/driver/mock_test.c - the backend contract, run against mock. */
#include <errno.h>

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

int register_mock_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_backend_mock", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, backend_lookup_finds_mock_only);
	ADD_TEST(s, kv_layer_mha_has_k_and_v_of_pool_size);
	ADD_TEST(s, kv_layer_mla_has_one_latent_buffer);
	ADD_TEST(s, init_failure_is_reported_as_is);
	return 0;
}
