// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

static void *t_alloc(size_t size, void *priv)
{
	struct test_alloc *ta = priv;
	void *p;

	ta->calls++;
	if (ta->fail_at && ta->calls == ta->fail_at)
		return NULL;
	if (ta->fail_size && size == ta->fail_size)
		return NULL;
	p = malloc(size);
	if (p) {
		ta->live_blocks++;
		ta->live_bytes += (long long)size;
		if (ta->live_bytes > ta->peak_bytes)
			ta->peak_bytes = ta->live_bytes;
	}
	return p;
}

static void t_free(void *ptr, size_t size, void *priv)
{
	struct test_alloc *ta = priv;

	ta->live_blocks--;
	ta->live_bytes -= (long long)size;
	free(ptr);
}

const struct kvmm_alloc_ops test_alloc_ops = { .alloc = t_alloc, .free = t_free };

void test_log_fn(void *priv, const char *msg)
{
	struct test_log *tl = priv;

	tl->count++;
	snprintf(tl->last, sizeof(tl->last), "%s", msg);
}

struct kvmm_params test_params(uint32_t page_size, uint32_t nr_pages,
			       uint32_t max_seqs, uint32_t max_seq_len)
{
	struct kvmm_params p;

	kvmm_params_init(&p);
	p.model = (struct kvmm_model){ .layers = 2, .kv_heads = 1, .head_dim = 4,
				       .dtype_bytes = 2, .attn = KVMM_ATTN_MHA };
	p.page_size = page_size;
	p.nr_pages = nr_pages;
	p.max_seqs = max_seqs;
	p.max_seq_len = max_seq_len;
	return p;
}

struct kvmm_ctx *test_ctx(uint32_t page_size, uint32_t nr_pages,
			  uint32_t max_seqs, uint32_t max_seq_len)
{
	struct kvmm_params p = test_params(page_size, nr_pages, max_seqs, max_seq_len);
	struct kvmm_ctx *ctx = NULL;

	if (kvmm_create(&p, &ctx))
		return NULL;
	return ctx;
}

void test_stats(const struct kvmm_ctx *ctx, uint64_t *st)
{
	kvmm_stats(ctx, st, NR_KVMM_STATS);
}

uint64_t test_stat(const struct kvmm_ctx *ctx, unsigned item)
{
	uint64_t st[NR_KVMM_STATS];

	test_stats(ctx, st);
	return st[item];
}

/* test_stat() under kvmm_lock(), for a context another thread drives */
uint64_t test_stat_locked(struct kvmm_ctx *ctx, unsigned item)
{
	uint64_t v;

	kvmm_lock(ctx);
	v = test_stat(ctx, item);
	kvmm_unlock(ctx);
	return v;
}

void test_tokens(uint32_t *t, uint32_t n, uint32_t seed)
{
	uint32_t i, x = seed * 2654435761u + 1;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		t[i] = x % 32000;
	}
}

/* Open a sequence, match, extend to @n tokens: a request after prefill. */
int test_seq_fill(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok,
		  uint32_t n, uint32_t *seqp)
{
	int m, ret = kvmm_seq_open(ctx, ns, seqp);

	if (ret)
		return ret;
	m = kvmm_seq_match(ctx, *seqp, tok, n);
	if (m < 0)
		return m;
	if ((uint32_t)m < n)
		return kvmm_seq_extend(ctx, *seqp, n - (uint32_t)m, 0);
	return 0;
}

/* Put @tok[0..n) in the cache, unlocked: a finished request. */
int test_cache(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok, uint32_t n)
{
	uint32_t seq;
	int ret = kvmm_seq_open(ctx, ns, &seq);

	if (ret)
		return ret;
	ret = kvmm_seq_close(ctx, seq, NULL, 0);
	if (ret)
		return ret;
	ret = test_seq_fill(ctx, ns, tok, n, &seq);
	if (!ret)
		ret = kvmm_seq_close(ctx, seq, tok, n);
	if (ret)
		kvmm_seq_close(ctx, seq, NULL, 0);
	return ret;
}

/* A request that matches @tok and finishes at once: the prefix is used again. */
int test_reuse(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok, uint32_t n)
{
	uint32_t seq;
	int m, ret = kvmm_seq_open(ctx, ns, &seq);

	if (ret)
		return ret;
	m = kvmm_seq_match(ctx, seq, tok, n);
	ret = kvmm_seq_close(ctx, seq, NULL, 0);
	return m < 0 ? m : ret ? ret : m;
}

/* Submit what was prepared on @ring and return its one completion's res. */
int32_t test_ring1(struct kvmm_ring *ring, uint32_t *flags)
{
	struct kvmm_cqe *cqe;
	int32_t res;

	CU_ASSERT_EQUAL(kvmm_submit_and_wait(ring, 1), 1);
	CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(ring, &cqe), 0);
	res = cqe->res;
	if (flags)
		*flags = cqe->flags;
	kvmm_cqe_seen(ring, cqe);
	return res;
}

struct kvmm_sqe *test_sqe(struct kvmm_ring *ring, const char *file, unsigned int line)
{
	struct kvmm_sqe *sqe = kvmm_get_sqe(ring);

	CU_assertImplementation(sqe != NULL, line, "kvmm_get_sqe() != NULL (the SQ is full)",
				file, "", CU_TRUE);
	return sqe;
}

/*
 * A kvmm_nvme_arg.latch: the I/O worker's reads wait while the int at
 * @arg is nonzero, so a promotion from NVMe stays in flight.
 */
void test_hold_worker_reads(void *arg, uint32_t site, uint32_t chan)
{
	const int *hold = arg;

	if (site != KVMM_NVME_SITE_READ || !chan)
		return;
	while (__atomic_load_n(hold, __ATOMIC_ACQUIRE))
		usleep(1000);
}

struct kvmm_sqe *child_sqe(struct kvmm_ring *ring, const char *file, unsigned int line)
{
	struct kvmm_sqe *sqe = kvmm_get_sqe(ring);

	if (!sqe) {
		fprintf(stderr, "%s:%u: kvmm_get_sqe(): the SQ is full\n", file, line);
		_exit(99);
	}
	return sqe;
}

static char tmp_dir[256];

/*
 * A file in this run's scratch directory, under $TMPDIR (else /tmp); the
 * last four paths given stay valid.
 */
const char *test_tmp_file(const char *name)
{
	static char paths[4][512];
	static unsigned next;
	char *path = paths[next++ % 4];
	const char *tmp = getenv("TMPDIR");

	if (!tmp_dir[0]) {
		snprintf(tmp_dir, sizeof(tmp_dir), "%s/kvmm-tests-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(tmp_dir))
			tmp_dir[0] = 0;
		CU_ASSERT_FATAL(tmp_dir[0] != 0);
	}
	snprintf(path, sizeof(paths[0]), "%s/%s", tmp_dir, name);
	return path;
}

/* Remove the scratch directory (a suite's cleanup; its files are gone by then). */
void test_tmp_dir_remove(void)
{
	if (tmp_dir[0] && !rmdir(tmp_dir))
		tmp_dir[0] = 0;
}

/* ---- an in-process ring with one 1 MiB buffer registered (buffer 1) ---- */

void test_kring_init(struct kvmm_ctx *ctx, struct test_kring *r, uint32_t flags, uint32_t ns)
{
	struct kvmm_ring_params rp = { .sq_entries = 16, .flags = flags, .ns = ns };
	struct kvmm_iovec iov;

	r->bytes = 1 << 20;
	r->mem = calloc(1, r->bytes);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r->mem);
	iov = (struct kvmm_iovec){ r->mem, r->bytes };
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &r->ring), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_register_buffers(&r->ring, &iov, 1), 0);
}

void test_kring_exit(struct test_kring *r)
{
	kvmm_ring_exit(&r->ring);
	free(r->mem);
}

/* A keyed command on space @sp, its @n entries or keys at offset 0: its result. */
int32_t test_kring_io(struct test_kring *r, uint8_t op, uint32_t sp, uint32_t n)
{
	struct kvmm_sqe *sqe = TEST_SQE(&r->ring);

	kvmm_prep_rw(sqe, op, 0, 1, 0, n);
	sqe->arg = sp;
	return test_ring1(&r->ring, NULL);
}

/* ---- KV bytes a test can check: stamped by token and position ---- */

/* The byte token @t at position @pos holds in @layer's K (kv 0) or V. */
static uint8_t kv_stamp_of(uint32_t t, uint32_t pos, uint32_t layer, uint32_t kv,
			uint32_t byte)
{
	return (uint8_t)((t * 131u) ^ (pos * 7u) ^ (layer << 5) ^ (kv << 4) ^ byte);
}

/*
 * Write (or, with @check, compare) the KV of tokens [from, n) of @seq (a
 * row or a ring's id): each byte a function of its token, position, layer
 * and K/V (the mock backend's memory, as an engine's attention would
 * write it).
 */
int test_kv_stamp(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tok,
		  uint32_t from, uint32_t n, bool check)
{
	uint32_t PS = kvmm_page_size(ctx);
	struct kvmm_table tab;
	struct kvmm_kv_layer kl;
	uint32_t i, layer, kv, b;
	int bad = 0;

	kvmm_seq_table(ctx, &tab);
	for (layer = 0; kvmm_kv_layer(ctx, layer, &kl) == 0; layer++) {
		for (i = from; i < n; i++) {
			int32_t pfn = tab.base[(size_t)KVMM_SEQ_ROW(seq) * tab.stride + i / PS];
			uint64_t slot = (uint64_t)pfn * PS + i % PS;

			for (kv = 0; kv < 2; kv++) {
				uint8_t *p = (uint8_t *)(kv ? kl.v : kl.k) + slot * kl.slot_bytes;

				for (b = 0; b < kl.slot_bytes; b++) {
					uint8_t want = kv_stamp_of(tok[i], i, layer, kv, b);

					if (!check)
						p[b] = want;
					else
						bad += p[b] != want;
				}
			}
		}
	}
	return bad;
}

/*
 * A request: match (and promote), check the KV that came back against the
 * stamps, compute (stamp) the rest, finish.  Return: tokens matched, or
 * the failing call's error.
 */
int test_kv_serve(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t n, bool promote)
{
	uint32_t seq;
	int m, ret;

	ret = kvmm_seq_open(ctx, 0, &seq);
	if (ret)
		return ret;
	m = kvmm_seq_match(ctx, seq, tok, n);
	if (m >= 0 && promote)
		m = kvmm_seq_promote(ctx, seq, tok, n);
	if (m < 0) {
		kvmm_seq_close(ctx, seq, NULL, 0);
		return m;
	}
	CU_ASSERT_EQUAL(test_kv_stamp(ctx, seq, tok, 0, (uint32_t)m, true), 0);
	if ((uint32_t)m < n) {
		ret = kvmm_seq_extend(ctx, seq, n - (uint32_t)m, 0);
		if (ret) {
			kvmm_seq_close(ctx, seq, NULL, 0);
			return ret;
		}
		test_kv_stamp(ctx, seq, tok, (uint32_t)m, n, false);
	}
	ret = kvmm_seq_close(ctx, seq, tok, n);
	return ret ? ret : m;
}

