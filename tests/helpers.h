/* SPDX-License-Identifier: MIT */
/*
 * tests/helpers.h - fixtures shared by the CUnit suites: contexts of a
 * given shape, an allocator that counts and fails on demand, log capture
 * and stats snapshots.
 */
#ifndef KVMM_TESTS_HELPERS_H
#define KVMM_TESTS_HELPERS_H

#include <stdbool.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <libkvmm.h>
#include <libkvmm-ring.h>
#include "../driver/driver.h"
#include "../driver/fault.h"

/* An allocator that counts live blocks and fails the fail_at-th call. */
struct test_alloc {
	unsigned long calls;
	unsigned long fail_at;	/* 0: never */
	size_t fail_size;	/* fail every block of exactly this size; 0: never */
	long live_blocks;
	long long live_bytes;
	long long peak_bytes;	/* the most live_bytes has been */
};
extern const struct kvmm_alloc_ops test_alloc_ops;

/* Messages from kvmm's log hook, kept instead of printed. */
struct test_log {
	unsigned count;
	char last[512];
};
void test_log_fn(void *priv, const char *msg);

struct kvmm_params test_params(uint32_t page_size, uint32_t nr_pages,
			       uint32_t max_seqs, uint32_t max_seq_len);
struct kvmm_ctx *test_ctx(uint32_t page_size, uint32_t nr_pages,
			  uint32_t max_seqs, uint32_t max_seq_len);
void test_stats(const struct kvmm_ctx *ctx, uint64_t *st);
uint64_t test_stat(const struct kvmm_ctx *ctx, unsigned item);
uint64_t test_stat_locked(struct kvmm_ctx *ctx, unsigned item);
void test_tokens(uint32_t *t, uint32_t n, uint32_t seed);
int test_seq_fill(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok,
		  uint32_t n, uint32_t *seqp);
int test_cache(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok, uint32_t n);
int test_reuse(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok, uint32_t n);
int32_t test_ring1(struct kvmm_ring *ring, uint32_t *flags);
const char *test_tmp_file(const char *name);
void test_tmp_dir_remove(void);

/* An in-process ring with a 1 MiB buffer registered as buffer 1. */
struct test_kring {
	struct kvmm_ring ring;
	uint8_t *mem;
	size_t bytes;
};
void test_kring_init(struct kvmm_ctx *ctx, struct test_kring *r, uint32_t flags, uint32_t ns);
void test_kring_exit(struct test_kring *r);
int32_t test_kring_io(struct test_kring *r, uint8_t op, uint32_t sp, uint32_t n);

int test_kv_stamp(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tok,
		  uint32_t from, uint32_t n, bool check);
int test_kv_serve(struct kvmm_ctx *ctx, const uint32_t *tok, uint32_t n, bool promote);

#define CHECK_OK(ctx) CU_ASSERT_EQUAL(kvmm_check(ctx), 0)

/*
 * kvmm_get_sqe() for tests: a full SQ fails the test (fatally) instead of
 * handing out NULL to write through.  CHILD_SQE() is for forked children,
 * where CUnit must not run: the child exits 99 instead.
 */
struct kvmm_sqe *test_sqe(struct kvmm_ring *ring, const char *file, unsigned int line);
struct kvmm_sqe *child_sqe(struct kvmm_ring *ring, const char *file, unsigned int line);
#define TEST_SQE(ring) test_sqe((ring), __FILE__, __LINE__)
#define CHILD_SQE(ring) child_sqe((ring), __FILE__, __LINE__)

/* Every stats item, byte for byte: "nothing changed". */
#define ASSERT_STATS_SAME(a, b) \
	CU_ASSERT(memcmp((a), (b), sizeof(uint64_t) * NR_KVMM_STATS) == 0)

typedef int (*suite_register_fn)(void);
int register_ctx_suite(void);
int register_page_alloc_suite(void);
int register_seq_suite(void);
int register_prefix_tree_suite(void);
int register_prefix_suite(void);
int register_vmscan_suite(void);
int register_stats_suite(void);
int register_check_suite(void);
int register_fault_suite(void);
int register_diff_suite(void);
int register_mock_suite(void);
int register_backend_suite(void);
int register_engine_suite(void);
int register_dispatch_suite(void);
int register_keyed_suite(void);
int register_frames_suite(void);
int register_remote_suite(void);
int register_remote_server_suite(void);
int register_events_suite(void);
int register_kvevents_suite(void);
int register_server_suite(void);
int register_spin_suite(void);
int register_abi_suite(void);
int cuda_attach_child(const char *path, const char *driver);
int register_tier_suite(void);
int register_flush_suite(void);
int register_ns_suite(void);
int register_hostile_tenant_suite(void);
int register_hostile_ring_suite(void);
int register_hostile_tools_suite(void);
int register_hostile_nvme_suite(void);

void test_hold_worker_reads(void *arg, uint32_t site, uint32_t chan);

#define ADD_TEST(suite, fn) \
	do { if (!CU_add_test(suite, #fn, fn)) return -1; } while (0)

#endif
