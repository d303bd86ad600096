// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/model.c - the step-time model.  Prefill is priced by
 * its FLOPs over a share of peak compute; decode by the bytes it reads
 * (the weights once per step, and every running sequence's KV) over a
 * share of memory bandwidth.  Defaults: a Llama-3-8B-class model in bf16
 * on one H100-class GPU.  Every figure is a flag and is printed with the
 * results, which are estimates, not measurements.
 */
#include "engine.h"

void eng_model_default(struct eng_model *m)
{
	*m = (struct eng_model){
		.name = "llama-8b",
		.layers = 32, .heads = 32, .kv_heads = 8, .head_dim = 128,
		.params = 8.03e9, .dtype_bytes = 2,
		.peak_tflops = 989, .mfu = 0.5,
		.mem_gbps = 3350, .bw_eff = 0.8,
		.step_us = 200,
	};
}

/* K and V of every layer for one token */
uint64_t eng_model_token_bytes(const struct eng_model *m)
{
	return 2ull * m->layers * m->kv_heads * m->head_dim * m->dtype_bytes;
}

/*
 * 2 FLOPs per weight per token, plus attention: each new token's query
 * against every earlier key (QK^T and AV, 2 FLOPs each per element): the
 * chunk sees the whole prefix and a causal triangle of itself.
 */
double eng_prefill_flops(const struct eng_model *m, uint64_t prefix, uint64_t c)
{
	double pairs = (double)c * (double)prefix + (double)c * (double)(c + 1) / 2;

	return 2.0 * m->params * (double)c +
	       4.0 * m->layers * (double)m->heads * m->head_dim * pairs;
}

double eng_prefill_secs(const struct eng_model *m, double flops)
{
	return flops / (m->peak_tflops * 1e12 * m->mfu) + m->step_us * 1e-6;
}

double eng_decode_secs(const struct eng_model *m, uint32_t batch, uint64_t ctx_tokens)
{
	double bytes = m->params * m->dtype_bytes +
		       (double)ctx_tokens * (double)eng_model_token_bytes(m);
	double flops = 2.0 * m->params * batch;
	double t_mem = bytes / (m->mem_gbps * 1e9 * m->bw_eff);
	double t_cmp = flops / (m->peak_tflops * 1e12 * m->mfu);

	return (t_mem > t_cmp ? t_mem : t_cmp) + m->step_us * 1e-6;
}
