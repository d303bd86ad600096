// SPDX-License-Identifier: MIT
/*
 * fuzz/ring_fuzz.c - libFuzzer harness playing a hostile client: it
 * writes arbitrary values into a ring's shared header (its indices, the
 * dispatcher's indices, the geometry fields) and entries between batches,
 * and the dispatcher must neither touch memory outside the region (the
 * region is allocated at its exact size, so ASan sees any stray access)
 * nor break an invariant.
 *
 * Input: records of 1 + 64 bytes.  The first byte picks what the client
 * does (write a header word, write an entry, or let the dispatcher run);
 * the rest is the value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libkvmm.h>
#include "../disp/disp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SQ	8
#define CQ	16
#define BUF	1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmm_params p = {
		.size = sizeof(p),
		.model = { .layers = 1, .kv_heads = 1, .head_dim = 1, .dtype_bytes = 2,
			   .attn = KVMM_ATTN_MHA },
		.page_size = 2, .max_seqs = 8, .max_seq_len = 128, .nr_pages = 64,
		.host_pages = 32, .host_node = KVMM_NODE_NEAREST,
	};
	/* space 0 of the keyed store: the keyed commands with arg 0 reach it */
	const struct kvmm_keyed_spec spec = { .value_bytes = 24, .model_id = "fuzz" };
	uint32_t space;
	size_t region_size = sizeof(struct kvmm_ring_hdr) + SQ * sizeof(struct kvmm_sqe) +
			     CQ * sizeof(struct kvmm_cqe) + BUF;
	struct kvmm_ring_hdr *hdr;
	struct kvmm_sqe *sqes;
	struct kvmm_disp *d;
	struct kvmm_ctx *ctx;
	uint8_t *region;
	size_t pos;

	if (kvmm_create(&p, &ctx) || kvmm_keyed_space(ctx, &spec, &space))
		abort();
	region = malloc(region_size);
	memset(region, 0, region_size);
	hdr = (struct kvmm_ring_hdr *)region;
	sqes = (struct kvmm_sqe *)(hdr + 1);
	if (kvmm_disp_create(ctx, true, &d))
		abort();
	kvmm_disp_attach(d, hdr, sqes, SQ, (struct kvmm_cqe *)(sqes + SQ), CQ);
	kvmm_disp_set_buf(d, 0, region + region_size - BUF, BUF);
	if (size & 1)
		kvmm_disp_bind_ns(d, 0);	/* half the inputs play a bound tenant */

	for (pos = 0; pos + 65 <= size; pos += 65) {
		const uint8_t *rec = data + pos + 1;
		uint32_t word;

		memcpy(&word, rec, sizeof(word));
		switch (data[pos] % 4) {
		case 0:	/* scribble over a header word (any of them) */
			memcpy((uint32_t *)hdr + rec[4] % (sizeof(*hdr) / 4), &word, 4);
			break;
		case 1:	/* write an entry, mostly sane opcodes */
			memcpy(&sqes[rec[63] % SQ], rec, sizeof(struct kvmm_sqe));
			sqes[rec[63] % SQ].opcode %= KVMM_OP_LAST + 1;
			break;
		case 2:	/* payload bytes */
			memcpy(region + region_size - BUF + (rec[0] % (BUF / 64)) * 64, rec, 64);
			break;
		case 3:	/* the dispatcher takes what it sees */
			kvmm_disp_process(d);
			if (kvmm_check(ctx))
				abort();
			break;
		}
	}
	kvmm_disp_process(d);
	kvmm_disp_destroy(d);
	if (kvmm_check(ctx))
		abort();
	free(region);
	kvmm_destroy(ctx);
	return 0;
}
