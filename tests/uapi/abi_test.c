// SPDX-License-Identifier: MIT
/*
 * tests/uapi/abi_test.c - kvmm_abi: the ABI's sizes and offsets are
 * pinned here.  A change that moves a field fails to compile; append-only
 * growth must update these numbers deliberately.
 */
#include <assert.h>
#include <stddef.h>

#include <kvmm/ring.h>

/*
 * Every value that crosses the ring comes from uapi/ alone, before any
 * library header: a client generated from uapi/ is complete.
 */
#if !defined(KVMM_EXTEND_RESERVE) || !defined(KVMM_EXTEND_NORECLAIM) || \
	!defined(KVMM_EXTEND_FLAGS) || !defined(KVMM_EXTEND_TO) || !defined(KVMM_ATTN_MHA) || \
	!defined(KVMM_ATTN_MLA)
#error "a value that crosses the ring is not in uapi/"
#endif
static_assert(sizeof(struct kvmm_tier_hits) == 16, "kvmm_tier_hits changed size");
static_assert(sizeof(struct kvmm_drop_counts) == 24, "kvmm_drop_counts changed size");

#include "../helpers.h"

#define PIN(type, field, off) \
	static_assert(offsetof(struct type, field) == (off), #type "." #field " moved")
#define SIZE(type, size) \
	static_assert(sizeof(struct type) == (size), #type " changed size")

SIZE(kvmm_sqe, 64);
PIN(kvmm_sqe, opcode, 0);
PIN(kvmm_sqe, flags, 1);
PIN(kvmm_sqe, buf, 2);
PIN(kvmm_sqe, seq, 4);
PIN(kvmm_sqe, off, 8);
PIN(kvmm_sqe, len, 16);
PIN(kvmm_sqe, ns, 20);
PIN(kvmm_sqe, arg, 24);
PIN(kvmm_sqe, resv0, 28);
PIN(kvmm_sqe, arg2, 32);
PIN(kvmm_sqe, user_data, 40);
PIN(kvmm_sqe, resv, 48);

SIZE(kvmm_cqe, 16);
PIN(kvmm_cqe, user_data, 0);
PIN(kvmm_cqe, res, 8);
PIN(kvmm_cqe, flags, 12);

SIZE(kvmm_extend_ent, 8);
SIZE(kvmm_dump_hdr, 16);
SIZE(kvmm_dump_node, 64);
PIN(kvmm_dump_node, atime, 16);
PIN(kvmm_dump_node, prio, 48);
PIN(kvmm_dump_node, token0, 52);
SIZE(kvmm_dump_seq, 32);
PIN(kvmm_dump_seq, node, 24);
SIZE(kvmm_dump_pin, 32);
PIN(kvmm_dump_pin, ns, 8);
PIN(kvmm_dump_pin, owner, 28);
SIZE(kvmm_dump_ns, 56);	/* 40 before the keyed fields: records grow by appending */
PIN(kvmm_dump_ns, pinned, 8);
PIN(kvmm_dump_ns, cache_limit, 32);
PIN(kvmm_dump_ns, keyed_host, 40);
PIN(kvmm_dump_ns, keyed_nvme, 48);
SIZE(kvmm_dump_kspace, 320);
PIN(kvmm_dump_kspace, value_bytes, 8);
PIN(kvmm_dump_kspace, values, 24);
PIN(kvmm_dump_kspace, fp, 48);
PIN(kvmm_dump_kspace, model_id, 64);
SIZE(kvmm_kent, 32);
PIN(kvmm_kent, off, 16);
PIN(kvmm_kent, buf, 24);
PIN(kvmm_kent, res, 28);
SIZE(kvmm_kspace_reg, 272);
SIZE(kvmm_seq_row, 16);
PIN(kvmm_seq_row, cached, 4);
PIN(kvmm_seq_row, pages, 8);
SIZE(kvmm_stats_snap, 8);
SIZE(kvmm_probe, 128);
PIN(kvmm_probe, features, 24);
PIN(kvmm_probe, sqe_size, 48);

SIZE(kvmm_ring_hdr, 320);
PIN(kvmm_ring_hdr, sq_entries, 16);
PIN(kvmm_ring_hdr, ring_id, 44);
PIN(kvmm_ring_hdr, sq_head, 64);
PIN(kvmm_ring_hdr, server_cpu, 68);
PIN(kvmm_ring_hdr, cq_bell, 72);
PIN(kvmm_ring_hdr, server_wakes, 76);
PIN(kvmm_ring_hdr, sq_tail, 128);
PIN(kvmm_ring_hdr, client_cpu, 132);
PIN(kvmm_ring_hdr, sq_bell, 136);
PIN(kvmm_ring_hdr, client_wakes, 140);
PIN(kvmm_ring_hdr, cq_head, 192);
PIN(kvmm_ring_hdr, cq_tail, 256);
PIN(kvmm_ring_hdr, sq_sleeping, 260);
PIN(kvmm_ring_hdr, cq_sleeping, 264);
PIN(kvmm_ring_hdr, cq_wait, 268);

SIZE(kvmm_hello, 56);
PIN(kvmm_hello, ns, 40);
SIZE(kvmm_welcome, 48);
SIZE(kvmm_share_req, 24);
SIZE(kvmm_share, 152);
PIN(kvmm_share, backend, 16);
PIN(kvmm_share, page_size, 56);
PIN(kvmm_share, nr_fds, 76);
PIN(kvmm_share, granularity, 80);
PIN(kvmm_share, device, 88);
SIZE(kvmm_share_ext, 8);
SIZE(kvmm_events_hdr, 32);
PIN(kvmm_events_hdr, lost, 8);
PIN(kvmm_events_hdr, nr, 16);
PIN(kvmm_events_hdr, bytes, 20);
SIZE(kvmm_cache_event, 48);
PIN(kvmm_cache_event, type, 8);
PIN(kvmm_cache_event, tier, 9);
PIN(kvmm_cache_event, to, 10);
PIN(kvmm_cache_event, ns, 12);
PIN(kvmm_cache_event, pages, 16);
PIN(kvmm_cache_event, parent, 24);

static void abi_opcodes_and_stats_are_append_only(void)
{
	/* the numbers are ABI: a new one goes at the end */
	CU_ASSERT_EQUAL(KVMM_OP_NOP, 0);
	CU_ASSERT_EQUAL(KVMM_OP_PRIO, 15);
	CU_ASSERT_EQUAL(KVMM_OP_LOOKUP, 16);
	CU_ASSERT_EQUAL(KVMM_OP_PROMOTE, 17);
	CU_ASSERT_EQUAL(KVMM_OP_PIN_DROP, 18);
	CU_ASSERT_EQUAL(KVMM_OP_SEQ_ROW, 19);
	CU_ASSERT_EQUAL(KVMM_OP_KSPACE, 20);
	CU_ASSERT_EQUAL(KVMM_OP_KPUT, 21);
	CU_ASSERT_EQUAL(KVMM_OP_KGET, 22);
	CU_ASSERT_EQUAL(KVMM_OP_KEXISTS, 23);
	CU_ASSERT_EQUAL(KVMM_OP_KDELETE, 24);
	CU_ASSERT_EQUAL(KVMM_OP_EVENTS, 25);
	CU_ASSERT_EQUAL(KVMM_OP_RPUSH, 26);
	CU_ASSERT_EQUAL(KVMM_OP_RFETCH, 27);
	CU_ASSERT_EQUAL(KVMM_OP_CHECK, 28);
	CU_ASSERT_EQUAL(KVMM_OP_FLUSH, 29);
	CU_ASSERT_EQUAL(KVMM_DROP_DEVICE, 1);
	CU_ASSERT_EQUAL(KVMM_DROP_HOST, 2);
	CU_ASSERT_EQUAL(KVMM_DROP_NVME, 4);
	CU_ASSERT_EQUAL(KVMM_DROP_ALL, 7);
	CU_ASSERT_EQUAL(KVMM_OP_PREFETCH, 30);
	CU_ASSERT_EQUAL(KVMM_PREFETCH_CANCEL, 1u << 31);
	CU_ASSERT_EQUAL(KVMM_OP_KPREFETCH, 31);
	CU_ASSERT_EQUAL(KVMM_KPREFETCH_RECLAIM, 1ull << 32);
	CU_ASSERT_EQUAL(KVMM_FEAT_KPREFETCH, 1ull << 8);
	CU_ASSERT_EQUAL(KVMM_OP_LAST, 32);
	CU_ASSERT_EQUAL(KVMM_FEAT_EVENTS, 1ull << 6);
	CU_ASSERT_EQUAL(KVMM_FEAT_SEQ_GEN, 1ull << 7);
	/* a sequence id: row in bits 0..19, generation 1..2047 in 20..30 */
	CU_ASSERT_EQUAL(KVMM_SEQ_ROW_BITS, 20);
	CU_ASSERT_EQUAL(KVMM_SEQ_GEN_MAX, 2047);
	CU_ASSERT_EQUAL(KVMM_SEQ_ID(5, 3), (3u << 20) | 5);
	CU_ASSERT_EQUAL(KVMM_SEQ_ROW(KVMM_SEQ_ID(KVMM_SEQ_ROW_MASK, KVMM_SEQ_GEN_MAX)),
			KVMM_SEQ_ROW_MASK);
	CU_ASSERT_EQUAL(KVMM_SEQ_GEN(KVMM_SEQ_ID(KVMM_SEQ_ROW_MASK, KVMM_SEQ_GEN_MAX)),
			KVMM_SEQ_GEN_MAX);
	CU_ASSERT(KVMM_SEQ_ID(KVMM_SEQ_ROW_MASK, KVMM_SEQ_GEN_MAX) <= INT32_MAX);
	CU_ASSERT_EQUAL(KVMM_EVENTS_NS, 1);
	CU_ASSERT_EQUAL(KVMM_EVENT_STORED, 0);
	CU_ASSERT_EQUAL(KVMM_EVENT_REMOVED, 1);
	CU_ASSERT_EQUAL(KVMM_EVENT_DEMOTED, 2);
	CU_ASSERT_EQUAL(KVMM_EVENT_PROMOTED, 3);
	CU_ASSERT_EQUAL(KVMM_EVENT_LAST, 4);
	CU_ASSERT_EQUAL(KVMM_EVENT_MAX_PAGES, 256);
	CU_ASSERT_EQUAL(KVMM_EVENTS_LEN_MIN, 32 + 48 + 256 * 16);
	CU_ASSERT_EQUAL(KVMM_FEAT_KEYED, 1ull << 5);
	CU_ASSERT_EQUAL(sizeof(struct kvmm_key), 16);
	CU_ASSERT_EQUAL(sizeof(struct kvmm_kent), 32);
	CU_ASSERT_EQUAL(offsetof(struct kvmm_kent, res), 28);
	CU_ASSERT_EQUAL(sizeof(struct kvmm_kspace_reg), 272);
	CU_ASSERT_EQUAL(offsetof(struct kvmm_kspace_reg, model_id), 16);
	CU_ASSERT_EQUAL(KVMM_PIN_DROP_ID, 0);
	CU_ASSERT_EQUAL(KVMM_PIN_DROP_NS, 1);
	CU_ASSERT_EQUAL(KVMM_SET_NS_PIN_PAGES, 5);
	CU_ASSERT_EQUAL(KVMM_SET_NS_CACHE_SHARE, 6);
	CU_ASSERT_EQUAL(KVMM_SET_KEYED_SHARE, 7);
	CU_ASSERT_EQUAL(KVMM_SET_EVENTS, 8);
	CU_ASSERT_EQUAL(KVMM_SET_NS_KSPACES, 9);
	CU_ASSERT_EQUAL(KVMM_KSPACES_MAX, 1024);
	CU_ASSERT_EQUAL(KVMM_NS_KSPACES_DEFAULT, 64);
	CU_ASSERT_EQUAL(KVMM_KEYS_EACH, 1);
	CU_ASSERT_EQUAL(KVMM_KDELETE_SPACE, 2);
	CU_ASSERT_EQUAL(KVMM_SET_NS_KJOB_BYTES, 10);
	CU_ASSERT_EQUAL(KVMM_SET_EVENT_TOKENS, 11);
	CU_ASSERT_EQUAL(KVMM_SET_LAST, 12);
	CU_ASSERT_EQUAL(KVMM_EVENT_TOKENS_STORED, 2);
	CU_ASSERT_EQUAL(KVMM_EVENTS_TOKENS, 2);
	CU_ASSERT_EQUAL(KVMM_EVENT_MAX_TOKENS, 1024);
	CU_ASSERT_EQUAL(KVMM_EVENTS_TOKENS_BUF_MIN, 32u << 10);
	CU_ASSERT_EQUAL(KVMM_EVENTS_TOKENS_LEN_MIN, 32 + 48 + 256 * 16 + 4096 * 4);
	CU_ASSERT_EQUAL(KVMM_NS_KJOB_BYTES_DEFAULT, 64ull << 20);
	CU_ASSERT_EQUAL(KVMM_NS_PIN_AUTO, ~0ull);
	CU_ASSERT_EQUAL(KVMM_DUMP_PINS, 2);
	CU_ASSERT_EQUAL(KVMM_DUMP_NS, 3);
	CU_ASSERT_EQUAL(KVMM_DUMP_KSPACES, 4);
	CU_ASSERT_EQUAL(KVMM_DUMP_HIST, 5);
	CU_ASSERT_EQUAL(KVMM_DUMP_LAST, 6);
	CU_ASSERT_EQUAL(KVMM_HIST_CMD, 0);
	CU_ASSERT_EQUAL(KVMM_HIST_DEMOTE, 1);
	CU_ASSERT_EQUAL(KVMM_HIST_PROMOTE, 2);
	CU_ASSERT_EQUAL(KVMM_HIST_LAST, 3);
	CU_ASSERT_EQUAL(KVMM_HIST_BUCKETS, 24);
	CU_ASSERT_EQUAL(sizeof(struct kvmm_dump_hist), 216);
	CU_ASSERT_EQUAL(offsetof(struct kvmm_dump_hist, buckets), 24);
	CU_ASSERT_EQUAL(KVMM_DUMP_F_KEYED, 8);
	CU_ASSERT_EQUAL(KVMM_FEAT_NS_LIMITS, 1ull << 4);
	CU_ASSERT_EQUAL(KVMM_CQE_F_LOWER, 2);
	CU_ASSERT_EQUAL(KVMM_LOOKUP_TIERS, 1);
	CU_ASSERT_EQUAL(KVMM_EXTEND_RESERVE, 1);
	CU_ASSERT_EQUAL(KVMM_EXTEND_NORECLAIM, 2);
	CU_ASSERT_EQUAL(KVMM_EXTEND_FLAGS, 3);
	CU_ASSERT_EQUAL(KVMM_EXTEND_TO, 4);	/* ring only: not in KVMM_EXTEND_FLAGS */
	CU_ASSERT_EQUAL(KVMM_ATTN_MHA, 0);
	CU_ASSERT_EQUAL(KVMM_ATTN_MLA, 1);
	CU_ASSERT_EQUAL(KVMM_STAT_PAGES_TOTAL, 0);
	CU_ASSERT_EQUAL(KVMM_STAT_RETRACTS, 27);
	CU_ASSERT_EQUAL(KVMM_STAT_PAGES_IO, 54);
	CU_ASSERT_EQUAL(KVMM_STAT_PAGES_SHADOWED, 57);
	CU_ASSERT_EQUAL(KVMM_STAT_SHADOW_DROP_PAGES, 61);
	CU_ASSERT_EQUAL(KVMM_STAT_MIGRATE_PAGES, 63);
	CU_ASSERT_EQUAL(KVMM_STAT_HOST_WMARK_LOW, 64);
	CU_ASSERT_EQUAL(KVMM_STAT_WRITEBACK_RUNS, 67);
	CU_ASSERT_EQUAL(KVMM_STAT_KEYED_SPACES, 68);
	CU_ASSERT_EQUAL(KVMM_STAT_KEYED_EVICTS, 75);
	CU_ASSERT_EQUAL(KVMM_STAT_KEYED_SHARE, 76);
	CU_ASSERT_EQUAL(KVMM_STAT_PAGES_WRITEBACK, 77);
	CU_ASSERT_EQUAL(KVMM_STAT_REMOTE_PROBES, 78);
	CU_ASSERT_EQUAL(KVMM_STAT_KEYED_REMOTE_GETS, 90);
	CU_ASSERT_EQUAL(KVMM_STAT_EVENTS, 91);
	CU_ASSERT_EQUAL(KVMM_STAT_EVENTS_DROPPED, 92);
	CU_ASSERT_EQUAL(KVMM_STAT_EVENTS_BYTES, 93);
	CU_ASSERT_EQUAL(KVMM_STAT_REMOTE_FETCH_TOKENS, 94);
	CU_ASSERT_EQUAL(KVMM_STAT_REMOTE_PUSH_TOKENS, 95);
	CU_ASSERT_EQUAL(KVMM_STAT_REMOTE_DEMOTE_PAGES, 96);
	CU_ASSERT_EQUAL(KVMM_STAT_ORPHAN_PAGES, 97);
	CU_ASSERT_EQUAL(KVMM_STAT_ORPHAN_ADOPTED, 98);
	CU_ASSERT_EQUAL(KVMM_STAT_HOST_OFFER_TOKENS, 99);
	CU_ASSERT_EQUAL(KVMM_STAT_NVME_OFFER_TOKENS, 100);
	CU_ASSERT_EQUAL(KVMM_STAT_THROTTLE_PAGES, 101);
	CU_ASSERT_EQUAL(KVMM_STAT_PREFETCH_PAGES, 102);
	CU_ASSERT_EQUAL(KVMM_STAT_PREFETCH_HITS, 103);
	CU_ASSERT_EQUAL(KVMM_STAT_PREFETCH_CANCELED, 104);
	CU_ASSERT_EQUAL(NR_KVMM_STATS, 105);
	CU_ASSERT_EQUAL(KVMM_SET_NR_PAGES, 4);
	CU_ASSERT_EQUAL(KVMM_SHARE_FDS_MAX, 253);
	CU_ASSERT_EQUAL(KVMM_DUMP_F_SHADOW, 4);
	CU_ASSERT_EQUAL(KVMM_PAGE_IO, 3);
	CU_ASSERT_EQUAL(KVMM_STAT_HOST_PAGES_TOTAL, 28);
	CU_ASSERT_EQUAL(KVMM_STAT_NVME_PAGES_TOTAL, 41);
	CU_ASSERT_EQUAL(KVMM_STAT_TIER_ITEMS, 13);
	CU_ASSERT_EQUAL(KVMM_RING_MAGIC, 0x474e49524d4d564bull);
	CU_ASSERT_EQUAL(KVMM_ABI_VERSION, 1);
}

int register_abi_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_abi", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, abi_opcodes_and_stats_are_append_only);
	return 0;
}
