// SPDX-License-Identifier: MIT
/*
 * overhead.c - the C side of overhead.py: the same request loop over the
 * direct API (open, MATCH, EXTEND the rest, COMMIT, CLOSE of a cached 64-token
 * prompt), each call timed with clock_gettime, printing one JSON line of
 * median nanoseconds per call.
 *
 *   overhead ITERS PAGE_SIZE
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <libkvmm.h>

#define PROMPT	64
#define NR_OPS	5

static const char *const op_names[NR_OPS] = { "open", "match", "extend", "commit", "close" };

/** now_ns() - the monotonic clock in nanoseconds */
static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/** cmp_ll() - qsort order of long longs */
static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/** one_request() - time each call of one request into @ns (NR_OPS entries) */
static int one_request(struct kvmm_ctx *ctx, const uint32_t *prompt, long long *ns)
{
	uint32_t seq;
	long long t[NR_OPS + 1];
	int hit, ret;

	t[0] = now_ns();
	ret = kvmm_seq_open(ctx, 0, &seq);
	t[1] = now_ns();
	hit = kvmm_seq_match(ctx, seq, prompt, PROMPT - 1);
	t[2] = now_ns();
	ret |= hit < 0 || kvmm_seq_extend(ctx, seq, PROMPT - hit, 0);
	t[3] = now_ns();
	ret |= kvmm_seq_commit(ctx, seq, prompt, PROMPT) < 0;
	t[4] = now_ns();
	ret |= kvmm_seq_close(ctx, seq, NULL, 0);
	t[5] = now_ns();
	for (int i = 0; i < NR_OPS; i++)
		ns[i] = t[i + 1] - t[i];
	return ret;
}

int main(int argc, char **argv)
{
	struct kvmm_params p;
	struct kvmm_ctx *ctx;
	uint32_t prompt[PROMPT];
	long long *ns[NR_OPS];
	int iters = argc > 1 ? atoi(argv[1]) : 20000;

	kvmm_params_init(&p);
	p.model = (struct kvmm_model){ .layers = 2, .kv_heads = 2, .head_dim = 32,
				       .dtype_bytes = 4, .attn = KVMM_ATTN_MHA };
	p.page_size = argc > 2 ? atoi(argv[2]) : 1;
	p.nr_pages = 4096;
	p.max_seqs = 16;
	p.max_seq_len = 1024;
	if (iters <= 0 || kvmm_create(&p, &ctx))
		return 1;
	for (int i = 0; i < PROMPT; i++)
		prompt[i] = i;
	for (int op = 0; op < NR_OPS; op++)
		ns[op] = calloc(iters, sizeof(long long));
	for (int i = 0; i < iters; i++) {
		long long one[NR_OPS];

		if (one_request(ctx, prompt, one))
			return 1;
		for (int op = 0; op < NR_OPS; op++)
			ns[op][i] = one[op];
	}
	printf("{\"lang\":\"c\"");
	for (int op = 0; op < NR_OPS; op++) {
		qsort(ns[op], iters, sizeof(long long), cmp_ll);
		printf(",\"%s_ns\":%lld", op_names[op], ns[op][iters / 2]);
	}
	printf("}\n");
	kvmm_destroy(ctx);
	return 0;
}
