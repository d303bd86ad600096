// SPDX-License-Identifier: MIT
/*
 * fuzz/dispatch_fuzz.c - libFuzzer harness over the command decoder and
 * dispatcher.  The input is a page-size byte, then 64-byte submission
 * entries, each followed by nothing: the bytes after the entries are the
 * token payload (buffer 0); buffer 1 is a 4 KiB output area.  Every entry
 * runs through kvmm_ioctl() on a small context; after the input,
 * kvmm_check() must pass and closing everything must leave every page
 * free or cached.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint32_t tokens[512];
	static uint8_t out[4096];
	struct kvmm_iovec bufs[2] = { { tokens, sizeof(tokens) }, { out, sizeof(out) } };
	struct kvmm_params p = {
		.size = sizeof(p),
		.model = { .layers = 1, .kv_heads = 1, .head_dim = 1, .dtype_bytes = 2,
			   .attn = KVMM_ATTN_MHA },
		.max_seqs = 8, .max_seq_len = 256, .nr_pages = 64,
		.host_pages = 32, .host_node = KVMM_NODE_NEAREST,
	};
	/* space 0 of the keyed store: the keyed commands with arg 0 reach it */
	const struct kvmm_keyed_spec spec = { .value_bytes = 24, .model_id = "fuzz" };
	uint32_t space;
	uint64_t st[NR_KVMM_STATS];
	struct kvmm_ctx *ctx;
	size_t nsqe, i;

	if (size < 1)
		return 0;
	p.page_size = 1u << (data[0] % 5);
	data++;
	size--;
	nsqe = size / sizeof(struct kvmm_sqe);
	if (nsqe > 64)
		nsqe = 64;
	/* the tail is the payload; a small vocabulary makes prefixes repeat */
	memset(tokens, 0, sizeof(tokens));
	for (i = nsqe * sizeof(struct kvmm_sqe); i < size && i - nsqe * 64 < 512; i++)
		tokens[i - nsqe * 64] = data[i] % 8;
	if (kvmm_create(&p, &ctx) || kvmm_keyed_space(ctx, &spec, &space))
		abort();
	for (i = 0; i < nsqe; i++) {
		struct kvmm_sqe sqe;

		memcpy(&sqe, data + i * sizeof(sqe), sizeof(sqe));
		sqe.opcode %= KVMM_OP_LAST + 2;	/* mostly real opcodes */
		kvmm_ioctl(ctx, &sqe, bufs, 2);
		if (kvmm_check(ctx))
			abort();
	}
	for (i = 0; i < p.max_seqs; i++)
		kvmm_seq_close(ctx, (uint32_t)i, NULL, 0);
	kvmm_stats(ctx, st, NR_KVMM_STATS);
	if (st[KVMM_STAT_PAGES_OWNED] || kvmm_check(ctx))
		abort();
	kvmm_destroy(ctx);
	return 0;
}
