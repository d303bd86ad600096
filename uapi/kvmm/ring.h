/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * uapi/kvmm/ring.h - the command ring: the ABI through which an engine (in
 * the same process or another) and the admin tools drive kvmm.
 *
 * Modelled on io_uring: a submission queue (SQ) and a completion queue
 * (CQ) of fixed-size entries in one shared region, single producer and
 * single consumer each, head/tail indices that only grow (wrapping at
 * 2^32) and are masked into the arrays.  Payloads (token arrays, batch
 * lists, output buffers) are addressed by (registered buffer, offset),
 * never by pointer, so the same entries work in-process and across
 * processes.  Documentation/userspace-api/ring.rst is the normative spec.
 *
 * Fixed-width types only; no pointers, no bitfields, no enum-typed fields;
 * reserved fields must be zero; opcodes, flags and fields are only ever
 * appended.  Compiles alone as C99 and C++.
 */
#ifndef _UAPI_KVMM_RING_H
#define _UAPI_KVMM_RING_H

#include <linux/types.h>
#include <kvmm/kvmm.h>

/* Opcodes.  Append only; a behaviour change gets a new opcode. */
#define KVMM_OP_NOP		0	/* res 0 */
#define KVMM_OP_PROBE		1	/* out: struct kvmm_probe */
#define KVMM_OP_OPEN		2	/* ns; res: sequence id */
#define KVMM_OP_MATCH		3	/* seq, tokens; res: matched tokens */
#define KVMM_OP_EXTEND		4	/* seq + arg, or a batch; arg2: KVMM_EXTEND_* */
#define KVMM_OP_COMMIT		5	/* seq, tokens; res: cached tokens */
#define KVMM_OP_CLOSE		6	/* seq, tokens (len 0: no commit) */
#define KVMM_OP_RETRACT		7	/* seq, tokens (len 0: no commit) */
#define KVMM_OP_PIN		8	/* ns, tokens, arg: KVMM_PIN_*; res: pinned tokens */
#define KVMM_OP_UNPIN		9	/* ns, tokens; res: unpinned tokens */
#define KVMM_OP_RECLAIM		10	/* arg: pages; res: pages freed */
#define KVMM_OP_STATS		11	/* out: struct kvmm_stats_snap; res: items */
#define KVMM_OP_DUMP		12	/* arg: KVMM_DUMP_*, arg2: cursor; out: records */
#define KVMM_OP_SET		13	/* arg: KVMM_SET_*, arg2: value */
#define KVMM_OP_DROP_CACHES	14	/* arg: KVMM_DROP_* (0: all, res the device's);
					 * res: pages freed; out: struct kvmm_drop_counts */
#define KVMM_OP_PRIO		15	/* ns, tokens, arg: priority; res: tokens */
#define KVMM_OP_LOOKUP		16	/* ns, tokens, arg: KVMM_LOOKUP_*; res: cached tokens */
#define KVMM_OP_PROMOTE		17	/* seq, tokens; res: the sequence's cached tokens */
#define KVMM_OP_PIN_DROP	18	/* arg: KVMM_PIN_DROP_*, ns or arg2: node id;
					 * res: pins dropped (operator only) */
#define KVMM_OP_SEQ_ROW		19	/* seq; out: struct kvmm_seq_row + frames;
					 * res: page frames written */
/* The keyed page store: see struct kvmm_kspace_reg below */
#define KVMM_OP_KSPACE		20	/* ns, in: struct kvmm_kspace_reg; res: space id */
#define KVMM_OP_KPUT		21	/* arg: space, len struct kvmm_kent; res: values stored */
#define KVMM_OP_KGET		22	/* arg: space, len struct kvmm_kent; res: values read */
#define KVMM_OP_KEXISTS		23	/* arg: space, len struct kvmm_key; res: leading hits */
#define KVMM_OP_KDELETE		24	/* arg: space, len struct kvmm_key; res: values deleted */
					/* (both: arg2 KVMM_KEYS_EACH, see below) */
#define KVMM_OP_EVENTS		25	/* ns, arg: KVMM_EVENTS_*, arg2: cursor;
					 * out: struct kvmm_events_hdr + events;
					 * res: events written */
/* The prefix tree over the remote tier (struct kvmm_params.remote): */
#define KVMM_OP_RPUSH		26	/* ns, tokens; res: tokens the remote tier holds */
#define KVMM_OP_RFETCH		27	/* ns, tokens; res: tokens fetched to the host tier */
#define KVMM_OP_CHECK		28	/* res: 0, or -EUCLEAN (what broke goes to the log) */
#define KVMM_OP_FLUSH		29	/* arg: time limit in ms (0: none); res: pages
					 * written to NVMe; CQE_F_MORE: some left out */
#define KVMM_OP_PREFETCH	30	/* ns, tokens, arg: budget in pages (0: what is
					 * free above the low watermark), arg2 flags;
					 * res: pages moved to the device.  arg
					 * KVMM_PREFETCH_CANCEL, no tokens: cancel this
					 * ring's prefetches whose user_data is arg2;
					 * res: how many */
#define KVMM_OP_KPREFETCH	31	/* arg: space, len struct kvmm_key, arg2:
					 * budget in host pages (0: what is free above
					 * the low watermark) | KVMM_KPREFETCH_RECLAIM;
					 * res: values whose read from NVMe started */
#define KVMM_OP_LAST		32

/*
 * A sequence id, what OPEN returns: the sequence's page-table row in the
 * low KVMM_SEQ_ROW_BITS bits, a generation (1..KVMM_SEQ_GEN_MAX, one more
 * each time the row is opened, wrapping) above them, so an id kept past
 * its CLOSE names no later sequence of the same row: a command naming
 * it fails with -ESTALE.  Ids are positive (a CQE's res) and never a
 * bare row.  Read a row in place with KVMM_SEQ_ROW(id).
 */
#define KVMM_SEQ_ROW_BITS	20
#define KVMM_SEQ_ROW_MASK	((1u << KVMM_SEQ_ROW_BITS) - 1)
#define KVMM_SEQ_GEN_MAX	((1u << (31 - KVMM_SEQ_ROW_BITS)) - 1)
#define KVMM_SEQ_ROW(id)	((__u32)(id) & KVMM_SEQ_ROW_MASK)
#define KVMM_SEQ_GEN(id)	((__u32)(id) >> KVMM_SEQ_ROW_BITS)
#define KVMM_SEQ_ID(row, gen)	((__u32)(row) | ((__u32)(gen) << KVMM_SEQ_ROW_BITS))

/*
 * struct kvmm_sqe - one command (64 bytes)
 * @opcode: KVMM_OP_*
 * @flags: KVMM_SQE_*; none defined yet, must be 0
 * @buf: registered buffer index of the payload
 * @seq: sequence id (KVMM_SEQ_ID: row and generation)
 * @off: payload offset in buffer @buf, in bytes; the payload's address
 *	must be 4-byte aligned (tokens, batch entries) or 8-byte aligned
 *	(PROBE, STATS and DUMP output), else the command fails with -EFAULT
 * @len: payload length: tokens, batch entries, or output bytes (per opcode)
 * @ns: namespace
 * @arg: per opcode (tokens for a single EXTEND, pin flags, priority,
 *	pages to reclaim, dump kind, SET key)
 * @resv0: must be 0
 * @arg2: per opcode (EXTEND flags, dump cursor, SET value)
 * @user_data: copied to the completion untouched
 * @resv: must be 0
 */
struct kvmm_sqe {
	__u8	opcode;
	__u8	flags;
	__u16	buf;
	__u32	seq;
	__u64	off;
	__u32	len;
	__u32	ns;
	__u32	arg;
	__u32	resv0;
	__u64	arg2;
	__u64	user_data;
	__u64	resv[2];
};

/*
 * struct kvmm_cqe - one completion (16 bytes)
 * @user_data: the command's user_data
 * @res: result (>= 0) or -errno
 * @flags: KVMM_CQE_F_*
 */
struct kvmm_cqe {
	__u64	user_data;
	__s32	res;
	__u32	flags;
};

#define KVMM_CQE_F_MORE		(1u << 0)	/* DUMP: more records after the cursor;
						 * FLUSH: cached pages it did not write */
#define KVMM_CQE_F_LOWER	(1u << 1)	/* MATCH: the prefix goes on below the
						 * device: PROMOTE brings it back */

/*
 * DROP_CACHES: arg 0 drops what is evictable on every tier, res the device
 * pages freed.  arg a mask of KVMM_DROP_* (1 << KVMM_TIER_*) drops only on
 * those tiers (a node with something below it on another tier stays), res
 * the pages freed on all of them; with len == sizeof(struct
 * kvmm_drop_counts), the count of each tier goes to buffer @buf at @off
 * (8-byte aligned).
 */
#define KVMM_DROP_DEVICE	(1u << KVMM_TIER_DEVICE)
#define KVMM_DROP_HOST		(1u << KVMM_TIER_HOST)
#define KVMM_DROP_NVME		(1u << KVMM_TIER_NVME)
#define KVMM_DROP_ALL		(KVMM_DROP_DEVICE | KVMM_DROP_HOST | KVMM_DROP_NVME)

/**
 * struct kvmm_drop_counts - DROP_CACHES's pages freed, per tier
 * @pages: pages[t] freed on tier t
 */
struct kvmm_drop_counts {
	__u64	pages[KVMM_NR_TIERS];
};

/*
 * LOOKUP: with KVMM_LOOKUP_TIERS in arg, res counts the prefix on every
 * tier and a struct kvmm_tier_hits goes to buffer @buf at byte offset
 * arg2 (4-byte aligned): tokens[t] on tier t.  Without it, res is the
 * device part, what MATCH would map.
 */
#define KVMM_LOOKUP_TIERS	(1u << 0)

/*
 * PREFETCH: arg is a budget in pages, below KVMM_PREFETCH_CANCEL, and
 * arg2 flags: KVMM_PREFETCH_RECLAIM takes the budget (not 0) as an
 * allocation would, reclaiming cold cached pages for it, instead of only
 * free pages above the low watermark.  arg KVMM_PREFETCH_CANCEL alone
 * cancels the ring's prefetches whose user_data is arg2 (their CQEs say
 * -ECANCELED once their I/O is over, and their pages are given back).
 */
#define KVMM_PREFETCH_RECLAIM	(1u << 0)
#define KVMM_PREFETCH_FLAGS	KVMM_PREFETCH_RECLAIM
#define KVMM_PREFETCH_CANCEL	(1u << 31)
#define KVMM_LOOKUP_FLAGS	KVMM_LOOKUP_TIERS

/**
 * struct kvmm_tier_hits - how much of a prefix is cached, per tier (what
 *	LOOKUP with KVMM_LOOKUP_TIERS writes, and kvmm_prefix_tiers() fills)
 * @tokens: tokens[t] of the prefix are on tier t; the device part comes
 *	first, then host, then NVMe (a prefix never climbs back up)
 * @resv: zero
 */
struct kvmm_tier_hits {
	__u32	tokens[KVMM_NR_TIERS];
	__u32	resv;
};

/*
 * struct kvmm_seq_row - what SEQ_ROW writes to (buf, off): where one open
 * sequence of the ring's own stands, then its page-table row, @pages
 * __s32 page frame numbers (page i of the sequence; slot of token t:
 * frame[t / page_size] * page_size + t % page_size).  len bytes must hold
 * the header and every page of the row (16 + 4 * ceil(@len / page_size)),
 * else -EINVAL and nothing is written; the address must be 4-byte aligned.
 * @len: tokens with KV allocated
 * @cached: leading tokens on shared prefix-tree pages
 * @pages: frames that follow, ceil(@len / page_size)
 * @resv: zero
 */
struct kvmm_seq_row {
	__u32	len;
	__u32	cached;
	__u32	pages;
	__u32	resv;
};

/*
 * The keyed page store: the host and NVMe tiers as a store of fixed-size
 * values addressed by 128-bit keys, for engines that keep their own GPU
 * prefix cache and name what they offload by hash (vLLM's block hashes,
 * LMCache's chunk keys, SGLang HiCache's page hashes).
 *
 * KSPACE registers a space: values of value_bytes bytes under one model
 * identity in namespace ns.  The same (ns, model_id, value_bytes) is the
 * same space, for every client and across a restart, so engines that
 * register alike share their values; its id (res) names it in the other
 * commands.  len is sizeof(struct kvmm_kspace_reg).  A ring bound to a
 * namespace registers and reaches only spaces of its own.
 *
 * KPUT copies each entry's value from (buf, off) into the store, KGET
 * copies stored values out to (buf, off): both complete once the bytes
 * are copied (off the context's lock), each entry's res set to 0 or
 * -errno for that value (KGET: -ENOENT for a miss, -EBADMSG for a value
 * that failed its checksum or identity, which is then dropped).  The
 * entry array is read when the command is taken, and its res fields
 * written before the completion; the values are never both read and
 * written in one command.  KEXISTS and KDELETE take an array of keys:
 * KEXISTS answers the run of keys stored from the first on, KDELETE the
 * values deleted.  With KVMM_KEYS_EACH in arg2 they take struct kvmm_kent
 * entries instead (off and buf not read) and answer for every key: each
 * entry's res is 0 (stored; deleted), -ENOENT (not stored) or -EBUSY
 * (KDELETE: a KGET is reading it, it stays), and res counts the keys
 * stored, or deleted.
 *
 * KPREFETCH takes an array of keys and starts reading those of the values
 * on NVMe that no command holds into host memory, in order while they fit
 * its budget (arg2's low 32 bits: host pages at most; 0: the free pages
 * above the host tier's low watermark, never reclaiming; with
 * KVMM_KPREFETCH_RECLAIM, the budget, not 0, taken as a put takes room),
 * so that a KGET of them later reads the host.  It completes at once, res
 * the values whose read started; a KGET of a value being read waits for
 * that read.  PREFETCH with KVMM_PREFETCH_CANCEL and its user_data
 * cancels it: the pages read are given back, the values stay on NVMe.
 */
struct kvmm_key {
	__u64	lo;
	__u64	hi;
};

/*
 * struct kvmm_kspace_reg - KSPACE input
 * @value_bytes: bytes of every value (1 .. KVMM_KVALUE_MAX)
 * @flags: none defined yet, 0
 * @resv: 0
 * @model_id: NUL-terminated identity of the model whose KV the values
 *	are (name and revision, as kvmm_params.model_id); a value is never
 *	served under another
 */
struct kvmm_kspace_reg {
	__u64	value_bytes;
	__u32	flags;
	__u32	resv;
	char	model_id[256];
};

#define KVMM_KVALUE_MAX		(1ull << 30)

/* KEXISTS and KDELETE flags (arg2) */
#define KVMM_KEYS_EACH		(1u << 0)	/* struct kvmm_kent in, a result per key */
#define KVMM_KDELETE_SPACE	(1u << 1)	/* KDELETE, len 0: every value, then
						 * the space itself */
#define KVMM_KEYS_FLAGS		(KVMM_KEYS_EACH | KVMM_KDELETE_SPACE)

/* KPREFETCH: arg2 is a budget in pages (low 32 bits) and these flags */
#define KVMM_KPREFETCH_RECLAIM	((__u64)KVMM_PREFETCH_RECLAIM << 32)
#define KVMM_KPREFETCH_FLAGS	KVMM_KPREFETCH_RECLAIM

/*
 * struct kvmm_kent - one value of a KPUT or KGET (32 bytes)
 * @key: its key
 * @off: where its bytes are, in buffer @buf (value_bytes of them; any
 *	alignment, 64 bytes is fastest)
 * @buf: registered buffer index
 * @resv: 0
 * @res: out: 0, or -errno for this value
 */
struct kvmm_kent {
	struct kvmm_key key;
	__u64	off;
	__u16	buf;
	__u16	resv;
	__s32	res;
};

/* Registered buffers a ring may name: indices 0 .. KVMM_RING_MAX_BUFS - 1. */
#define KVMM_RING_MAX_BUFS	64

/* EXTEND: len 0 extends @seq by @arg tokens; len > 0 reads @len of these. */
struct kvmm_extend_ent {
	__u32	seq;
	__u32	n;
};

/* EXTEND flags (arg2), also kvmm_seq_extend()'s @flags */
#define KVMM_EXTEND_RESERVE	(1u << 0)	/* may dip below the min watermark */
#define KVMM_EXTEND_NORECLAIM	(1u << 1)	/* fail rather than reclaim */
#define KVMM_EXTEND_FLAGS	(KVMM_EXTEND_RESERVE | KVMM_EXTEND_NORECLAIM)
/*
 * Ring only, single form (len 0): @arg is the length the sequence grows
 * to, not the tokens it gains.  So MATCH, EXTEND and COMMIT of a prompt go
 * in one batch: the EXTEND adds what the MATCH before it did not map.
 * Growing to the length the sequence has, or less, is -EINVAL.
 */
#define KVMM_EXTEND_TO		(1u << 2)

/* PIN flags (arg) */
#define KVMM_PIN_KEEP		(1u << 0)	/* outlives the ring that took it */
#define KVMM_PIN_FLAGS		KVMM_PIN_KEEP

/*
 * PIN_DROP (arg): which pins the operator drops, whoever took them (a
 * ring, the direct API, KVMM_PIN_KEEP).  KVMM_PIN_DROP_ID: every pin
 * ending at node arg2 (an id from DUMP_PINS); ns must be 0.
 * KVMM_PIN_DROP_NS: every pin in namespace ns; arg2 must be 0.  A ring
 * bound to a namespace gets -EPERM.
 */
#define KVMM_PIN_DROP_ID	0
#define KVMM_PIN_DROP_NS	1
#define KVMM_PIN_DROP_LAST	2

/* SET keys (arg); value in arg2 */
#define KVMM_SET_WMARK_MIN	0
#define KVMM_SET_WMARK_LOW	1
#define KVMM_SET_WMARK_HIGH	2
#define KVMM_SET_POLICY		3	/* KVMM_POLICY_* */
#define KVMM_SET_NR_PAGES	4	/* resize the device pool; res: pages migrated */
#define KVMM_SET_NS_PIN_PAGES	5	/* pages a bound namespace may pin;
					 * KVMM_NS_PIN_AUTO: half the pool */
#define KVMM_SET_NS_CACHE_SHARE	6	/* percent of the pool a namespace may
					 * cache before its own cache goes first
					 * (1 .. 100; 100: no share) */
#define KVMM_SET_KEYED_SHARE	7	/* percent of each lower tier keyed values
					 * may hold, the rest the tree's pages,
					 * before that kind goes first (1 .. 100;
					 * 100: no split) */
#define KVMM_SET_EVENTS		8	/* bytes of the cache event buffer (EVENTS):
					 * KVMM_EVENTS_BUF_MIN .. KVMM_EVENTS_BUF_MAX,
					 * rounded up to a power of two; 0: off, the
					 * default */
#define KVMM_SET_NS_KSPACES	9	/* keyed spaces one namespace may hold
					 * (0 .. KVMM_KSPACES_MAX; default
					 * KVMM_NS_KSPACES_DEFAULT) */
#define KVMM_SET_NS_KJOB_BYTES	10	/* bytes of memory the keyed commands
					 * (KPUT, KGET) of one namespace may make
					 * the server hold at once (their values,
					 * frame lists and windows); past it,
					 * -EDQUOT.  Default
					 * KVMM_NS_KJOB_BYTES_DEFAULT */
#define KVMM_SET_EVENT_TOKENS	11	/* 1: the event buffer also keeps each
					 * event's token ids (EVENTS with
					 * KVMM_EVENTS_TOKENS);
					 * KVMM_EVENT_TOKENS_STORED: only STORED
					 * events'; 0: not, the default.  A
					 * change empties the buffer */
#define KVMM_SET_LAST		12

#define KVMM_NS_KJOB_BYTES_DEFAULT	(64ull << 20)

/* SET_EVENT_TOKENS: token ids with STORED events only (see EVENTS) */
#define KVMM_EVENT_TOKENS_STORED	2

#define KVMM_NS_PIN_AUTO	(~0ull)	/* SET_NS_PIN_PAGES: the default */
#define KVMM_KSPACES_MAX	1024	/* keyed spaces a context holds */
#define KVMM_NS_KSPACES_DEFAULT	64	/* SET_NS_KSPACES: the default */

#define KVMM_POLICY_LRU		0
#define KVMM_POLICY_SLRU	1
#define KVMM_POLICY_LAST	2

/* DUMP kinds (arg) */
#define KVMM_DUMP_NODES		0
#define KVMM_DUMP_SEQS		1
#define KVMM_DUMP_PINS		2	/* struct kvmm_dump_pin per pinned node */
#define KVMM_DUMP_NS		3	/* struct kvmm_dump_ns per namespace */
#define KVMM_DUMP_KSPACES	4	/* struct kvmm_dump_kspace per keyed space */
#define KVMM_DUMP_HIST		5	/* struct kvmm_dump_hist per KVMM_HIST_* */
#define KVMM_DUMP_LAST		6

/*
 * struct kvmm_dump_hdr - starts a DUMP's output buffer
 * @next: cursor to pass for the next page; 0 when this was the last
 * @nr: records that follow
 * @rec_size: bytes per record (records grow by appending fields)
 */
struct kvmm_dump_hdr {
	__u64	next;
	__u32	nr;
	__u32	rec_size;
};

/*
 * struct kvmm_dump_node - one prefix-tree node (64 bytes)
 * @id: unique for the context's life; @parent: the parent's id, 0 for a root
 * @atime: logical time of the last access (larger is more recent)
 * @ns: namespace; @len: tokens on the edge (0 for a root)
 * @lock_ref: sequences and pins holding it or a descendant
 * @pins: pins ending here; @hits: accesses (saturating)
 * @depth: 0 for a root; @prio: eviction priority; @tier: KVMM_TIER_*
 * @flags: KVMM_DUMP_F_*
 * @token0: first token id of the edge (display only)
 */
struct kvmm_dump_node {
	__u64	id;
	__u64	parent;
	__u64	atime;
	__u32	ns;
	__u32	len;
	__u32	lock_ref;
	__u32	pins;
	__u32	hits;
	__u32	depth;
	__u8	prio;
	__u8	tier;
	__u16	flags;
	__u32	token0;
	__u64	resv;
};

#define KVMM_DUMP_F_ROOT	(1u << 0)
#define KVMM_DUMP_F_EVICTABLE	(1u << 1)	/* an unlocked leaf, on a reclaim list */
#define KVMM_DUMP_F_SHADOW	(1u << 2)	/* on the device, with a copy on the
						 * host tier (write-through) */
#define KVMM_DUMP_F_KEYED	(1u << 3)	/* a keyed space's root, or a value */

/* struct kvmm_dump_seq - one open sequence (32 bytes) */
struct kvmm_dump_seq {
	__u32	seq;
	__u32	ns;
	__u32	len;
	__u32	cached;
	__u32	owner;		/* ring id that opened it, 0 for the direct API */
	__u32	resv;
	__u64	node;		/* id of the deepest node it locks, 0 if none */
};

/*
 * struct kvmm_dump_pin - a node where pins end (32 bytes)
 * @id: the node (KVMM_OP_PIN_DROP by id takes it)
 * @ns: its namespace
 * @tokens: the pinned prefix's length, from the root
 * @pages: device pages the prefix holds
 * @pins: pins ending at the node
 * @keep: of those, pins that belong to no ring (KVMM_PIN_KEEP, direct API)
 * @owner: a ring holding one of the others (its ring id), 0 if none
 */
struct kvmm_dump_pin {
	__u64	id;
	__u32	ns;
	__u32	tokens;
	__u32	pages;
	__u32	pins;
	__u32	keep;
	__u32	owner;
};

/*
 * struct kvmm_dump_ns - one namespace's use of the pool (56 bytes): every
 * namespace with a prefix tree root
 * @ns: the namespace
 * @pinned: device pages under its pins
 * @cached: device pages its prefixes hold
 * @pin_limit: pages a ring bound to it may pin (KVMM_SET_NS_PIN_PAGES)
 * @cache_limit: pages it may cache before its own cache is reclaimed
 *	first (KVMM_SET_NS_CACHE_SHARE)
 * @keyed_host: host pages the values of its keyed spaces hold
 * @keyed_nvme: NVMe pages they hold
 */
struct kvmm_dump_ns {
	__u32	ns;
	__u32	resv;
	__u64	pinned;
	__u64	cached;
	__u64	pin_limit;
	__u64	cache_limit;
	__u64	keyed_host;
	__u64	keyed_nvme;
};

/*
 * Latency histograms (DUMP KVMM_DUMP_HIST), for metrics: how long each
 * command took in the dispatcher (its handler, under the context's
 * lock; a command that completes later counts until it was started),
 * and how long a node's pages took to copy down a tier (DEMOTE) or back
 * up (PROMOTE), from the copy's start to its settling.
 */
#define KVMM_HIST_CMD		0
#define KVMM_HIST_DEMOTE	1
#define KVMM_HIST_PROMOTE	2
#define KVMM_HIST_LAST		3
/* bucket i < KVMM_HIST_BUCKETS - 1: at most 2^i microseconds; the last: more */
#define KVMM_HIST_BUCKETS	24

/*
 * struct kvmm_dump_hist - one histogram (216 bytes)
 * @which: KVMM_HIST_*
 * @nr_buckets: KVMM_HIST_BUCKETS
 * @count: observations
 * @sum_ns: their sum, in nanoseconds
 * @buckets: observations in each bucket (not cumulative)
 */
struct kvmm_dump_hist {
	__u32	which;
	__u32	nr_buckets;
	__u64	count;
	__u64	sum_ns;
	__u64	buckets[KVMM_HIST_BUCKETS];
};

/*
 * struct kvmm_dump_kspace - one keyed space (320 bytes)
 * @id: its id (KPUT, KGET, ... name it by this)
 * @ns: its namespace
 * @value_bytes: bytes of each value
 * @pages: pages each value takes
 * @resv: zero
 * @values: values stored, on any tier
 * @host_pages: host pages they hold
 * @nvme_pages: NVMe pages they hold
 * @fp: the model identity's fingerprint (XXH3-128 of model_id)
 * @model_id: the identity a client registered it with, NUL-terminated;
 *	empty for a space found on NVMe at a restart that no client has
 *	registered since
 */
struct kvmm_dump_kspace {
	__u32	id;
	__u32	ns;
	__u64	value_bytes;
	__u32	pages;
	__u32	resv;
	__u64	values;
	__u64	host_pages;
	__u64	nvme_pages;
	__u64	fp[2];
	char	model_id[256];
};

/*
 * struct kvmm_stats_snap - starts STATS output; @nr __u64 values follow,
 * indexed by enum kvmm_stat_item
 * @nr: the library's NR_KVMM_STATS, or fewer if the buffer is short
 * @abi: KVMM_ABI_VERSION
 */
struct kvmm_stats_snap {
	__u32	nr;
	__u32	abi;
};

/*
 * Cache events: a record of what enters and leaves the prefix tree and
 * moves between its tiers, for a KV-aware router that sends each request
 * to the instance holding most of its prefix (vLLM's KV events, SGLang's
 * kv_events).  Off until KVMM_SET_EVENTS gives them a buffer: a ring
 * that keeps the newest events and overwrites the oldest, so that the
 * engine never waits for a reader.
 *
 * Every event has a sequence number, 0 up, one more than the event
 * before it for the context's life (a new buffer size keeps counting).
 * EVENTS copies the events from cursor arg2 on, oldest first, to
 * (buf, off): a struct kvmm_events_hdr, then each event a struct
 * kvmm_cache_event followed by its @pages struct kvmm_key.  len must hold
 * the header and the first event due (KVMM_EVENTS_LEN_MIN always does),
 * else -EINVAL; the address must be 8-byte aligned.  Events that were
 * overwritten before this reader got them are a gap it is told about
 * (hdr.lost); a cursor past the newest event is -EINVAL (the instance
 * restarted, or the cursor is not one it handed out); with no buffer,
 * -EOPNOTSUPP.  KVMM_CQE_F_MORE: events after hdr.next are waiting.
 *
 * With KVMM_EVENTS_NS in arg only namespace ns's events are copied (ns
 * must be 0 without it); a ring bound to a namespace sees only its own,
 * flag or not.  hdr.next passes over the others' events too.
 *
 * With KVMM_EVENTS_TOKENS in arg each event's keys are followed by the
 * token ids of its pages (pages * page size __u32, zero-padded to a
 * multiple of 16 bytes), so that a publisher can name the pages as
 * another engine's hash would (vLLM's block hashes).  The buffer keeps
 * them only after KVMM_SET_EVENT_TOKENS 1, else -EOPNOTSUPP; it then
 * must be KVMM_EVENTS_TOKENS_BUF_MIN bytes at least, and an event holds
 * at most KVMM_EVENT_MAX_TOKENS tokens' worth of pages (one page at
 * least).  len must hold KVMM_EVENTS_TOKENS_LEN_MIN to be sure of any.
 * After KVMM_SET_EVENT_TOKENS KVMM_EVENT_TOKENS_STORED only STORED events
 * carry them: the others are their keys alone, with or without the flag
 * (a publisher that saw a page stored has its token ids already, and a
 * page moved or dropped costs the engine no copy of them).
 */
#define KVMM_EVENTS_NS		(1u << 0)
#define KVMM_EVENTS_TOKENS	(1u << 1)
#define KVMM_EVENTS_FLAGS	(KVMM_EVENTS_NS | KVMM_EVENTS_TOKENS)

/* Event types (struct kvmm_cache_event.type) */
#define KVMM_EVENT_STORED	0	/* pages entered the tree (a commit), on @tier */
#define KVMM_EVENT_REMOVED	1	/* pages left it (evicted, dropped), from @tier */
#define KVMM_EVENT_DEMOTED	2	/* pages moved down, from @tier to @to */
#define KVMM_EVENT_PROMOTED	3	/* pages moved up, from @tier to @to */
#define KVMM_EVENT_LAST		4

/* A node's pages are told in events of at most this many, in order. */
#define KVMM_EVENT_MAX_PAGES	256

#define KVMM_EVENTS_BUF_MIN	(8u << 10)
#define KVMM_EVENTS_BUF_MAX	(1u << 30)

/* With token ids kept (KVMM_SET_EVENT_TOKENS): */
#define KVMM_EVENT_MAX_TOKENS	1024
#define KVMM_EVENTS_TOKENS_BUF_MIN (32u << 10)

/*
 * struct kvmm_events_hdr - starts EVENTS output (32 bytes)
 * @next: the cursor to pass next: one past the last event looked at
 * @lost: events between the cursor and the oldest the buffer still held:
 *	overwritten before this reader read them
 * @nr: events that follow
 * @bytes: bytes they take, after this header
 * @resv: zero
 */
struct kvmm_events_hdr {
	__u64	next;
	__u64	lost;
	__u32	nr;
	__u32	bytes;
	__u64	resv;
};

/*
 * struct kvmm_cache_event - one event (48 bytes), @pages struct kvmm_key
 *	after it: the identities of its pages, in prefix order
 * @seq: its sequence number
 * @type: KVMM_EVENT_*
 * @tier: KVMM_TIER_* the pages were on (STORED: went onto)
 * @to: DEMOTED, PROMOTED: the tier they are on now; else @tier
 * @resv0: zero
 * @ns: the namespace of the prefix
 * @pages: keys that follow, 1 .. KVMM_EVENT_MAX_PAGES
 * @resv1: zero
 * @parent: the identity of the page before the first (zero when the
 *	first page starts the prefix)
 * @resv2: zero
 *
 * A page's identity is the one its tier copies carry: XXH3-128, seeded
 * with @ns, of the token ids of its whole prefix up to and including its
 * own page (lo: the low 64 bits).  A router computes the same for a
 * prompt's whole pages and finds the longest run an instance holds.
 */
struct kvmm_cache_event {
	__u64	seq;
	__u8	type;
	__u8	tier;
	__u8	to;
	__u8	resv0;
	__u32	ns;
	__u32	pages;
	__u32	resv1;
	struct kvmm_key parent;
	__u64	resv2;
};

/* Bytes of an EVENTS output that any event fits in */
#define KVMM_EVENTS_LEN_MIN	(sizeof(struct kvmm_events_hdr) + \
				 sizeof(struct kvmm_cache_event) + \
				 KVMM_EVENT_MAX_PAGES * sizeof(struct kvmm_key))
/* ... and with KVMM_EVENTS_TOKENS (4096: the largest page size) */
#define KVMM_EVENTS_TOKENS_LEN_MIN (KVMM_EVENTS_LEN_MIN + 4096 * sizeof(__u32))

/* Feature bits of struct kvmm_probe.features */
#define KVMM_FEAT_NAMESPACES	(1ull << 0)
#define KVMM_FEAT_PIN_KEEP	(1ull << 1)
#define KVMM_FEAT_SLRU		(1ull << 2)
#define KVMM_FEAT_TIERS		(1ull << 3)	/* PROMOTE, LOOKUP_TIERS, F_LOWER */
#define KVMM_FEAT_NS_LIMITS	(1ull << 4)	/* PIN_DROP, DUMP_PINS, DUMP_NS,
						 * SET_NS_*: -EDQUOT */
#define KVMM_FEAT_KEYED		(1ull << 5)	/* KSPACE, KPUT, KGET, KEXISTS, KDELETE */
#define KVMM_FEAT_EVENTS	(1ull << 6)	/* EVENTS, SET_EVENTS */
#define KVMM_FEAT_SEQ_GEN	(1ull << 7)	/* sequence ids carry a generation:
						 * KVMM_SEQ_ROW(), -ESTALE */
#define KVMM_FEAT_KPREFETCH	(1ull << 8)	/* KPREFETCH; PREFETCH's cancel
						 * cancels it too */

/*
 * struct kvmm_probe - PROBE output (128 bytes)
 * @abi: KVMM_ABI_VERSION
 * @nr_ops: KVMM_OP_LAST of the library that answered
 * @ops: bit n set: opcode n is supported
 * @features: KVMM_FEAT_*
 * @page_size, @nr_pages, @max_seqs, @max_seq_len: the context's shape
 * @sqe_size, @cqe_size: sizeof the entries, to catch a mismatched build
 * @resv: zero
 */
struct kvmm_probe {
	__u32	abi;
	__u32	nr_ops;
	__u64	ops[2];
	__u64	features;
	__u32	page_size;
	__u32	nr_pages;
	__u32	max_seqs;
	__u32	max_seq_len;
	__u32	sqe_size;
	__u32	cqe_size;
	__u64	resv[9];
};

/*
 * struct kvmm_ring_hdr - the start of a ring region.  The producer of the
 * SQ is the client, its consumer the dispatcher; for the CQ the other way
 * round.  Each index sits on its own 64-byte line.  A producer fills
 * entries, then publishes the tail with a release store; the consumer
 * reads the tail with an acquire load, consumes, then publishes the head
 * with a release store.
 * @magic: KVMM_RING_MAGIC
 * @abi: KVMM_ABI_VERSION
 * @sq_entries, @cq_entries: powers of two
 * @sq_off, @cq_off: byte offsets of the SQE and CQE arrays in the region
 * @buf_off, @buf_size: the region's data area (buffer 0 across processes)
 * @flags: KVMM_RING_F_*
 * @ring_id: the dispatcher's id of this ring (owner of its sequences)
 * @server_cpu, @client_cpu: hints for polling, never trusted: 1 + the
 *	CPU each side last ran on (0: not said).  A side does not poll for
 *	what the other side must do on the CPU it holds itself.
 * @sq_sleeping, @cq_sleeping: 0 awake; KVMM_RING_SLEEP_DOORBELL asleep
 *	on the eventfd doorbell; KVMM_RING_SLEEP_BELL napping on a futex
 *	(sq_bell, cq_bell): the waker adds 1 to the bell and FUTEX_WAKEs it
 * @sq_bell, @cq_bell: futex words, written by the waker only
 * @server_wakes, @client_wakes: what each side can do to wake the other
 *	(KVMM_RING_WAKES_BELL: bump and wake a bell); a side naps on its
 *	bell only when the other one says it rings it (an older peer says
 *	nothing, and is slept for on the eventfd doorbell)
 * @sq_done: a hint for polling, never trusted: entries the dispatcher has
 *	run, stored after each one while it runs a batch, where sq_head and
 *	cq_tail move only at the batch's end.  A client polling for the
 *	completions of a long batch goes on polling while it moves (an older
 *	server leaves it 0: the client then polls for its ceiling only)
 */
struct kvmm_ring_hdr {
	__u64	magic;
	__u32	abi;
	__u32	hdr_size;
	__u32	sq_entries;
	__u32	cq_entries;
	__u32	sq_off;
	__u32	cq_off;
	__u32	buf_off;
	__u32	buf_size;
	__u32	flags;
	__u32	ring_id;
	__u32	resv0[4];
	__u32	sq_head;	/* offset 64: written by the dispatcher */
	__u32	server_cpu;	/* 1 + the CPU it last ran on; 0: not said */
	__u32	cq_bell;	/* bumped to wake a client napping on it */
	__u32	server_wakes;	/* KVMM_RING_WAKES_*: how it wakes the client */
	__u32	sq_done;	/* entries the dispatcher has run, as it goes */
	__u32	pad1[11];
	__u32	sq_tail;	/* offset 128: written by the client */
	__u32	client_cpu;	/* 1 + the CPU it last ran on; 0: not said */
	__u32	sq_bell;	/* bumped to wake a dispatcher napping on it */
	__u32	client_wakes;	/* KVMM_RING_WAKES_*: how it wakes the dispatcher */
	__u32	pad2[12];
	__u32	cq_head;	/* offset 192: written by the client */
	__u32	pad3[15];
	__u32	cq_tail;	/* offset 256: written by the dispatcher */
	__u32	sq_sleeping;	/* the dispatcher waits for a doorbell */
	__u32	cq_sleeping;	/* the client waits for a doorbell */
	__u32	cq_wait;	/* the dispatcher waits for CQ room: doorbell after reaping */
	__u32	pad4[12];
};

#define KVMM_RING_MAGIC		0x474e49524d4d564bull	/* "KVMMRING" */
#define KVMM_RING_SLEEP_DOORBELL	1	/* sq/cq_sleeping: write the eventfd */
#define KVMM_RING_SLEEP_BELL		2	/* sq/cq_sleeping: bump and wake the bell */
#define KVMM_RING_WAKES_BELL		(1u << 0)	/* server/client_wakes */
#define KVMM_RING_F_POLL	(1u << 0)	/* the dispatcher polls the SQ */
#define KVMM_RING_F_NS		(1u << 1)	/* bound to one namespace (hello.ns) */
#define KVMM_RING_F_FLAGS	(KVMM_RING_F_POLL | KVMM_RING_F_NS)

/*
 * Attaching across processes (a Unix stream socket): the client sends a
 * struct kvmm_hello; the server answers with a struct kvmm_welcome and,
 * when status is 0, three descriptors in SCM_RIGHTS: the ring region
 * (map it shared, welcome.map_size bytes), the SQ doorbell and the CQ
 * doorbell (eventfds).  The ring lives until the socket closes; closing
 * it (or dying) releases everything the ring held.
 *
 * A ring bound to a namespace (KVMM_RING_F_NS, or bound by the server)
 * may only name that namespace and may not run the context-wide admin
 * commands (RECLAIM, DROP_CACHES, SET, DUMP, PIN_DROP): those fail with
 * -EPERM.  Its PINs fail with -EDQUOT past the namespace's pin limit.
 */
struct kvmm_hello {
	__u64	magic;		/* KVMM_RING_MAGIC */
	__u32	abi;		/* KVMM_ABI_VERSION */
	__u32	sqe_size;
	__u32	cqe_size;
	__u32	sq_entries;
	__u32	cq_entries;
	__u32	flags;		/* KVMM_RING_F_* */
	__u64	buf_size;
	__u32	ns;		/* the namespace, with KVMM_RING_F_NS */
	__u32	resv0;
	__u64	resv1;
};

struct kvmm_welcome {
	__s32	status;		/* 0, or -errno: why the ring was refused */
	__u32	ring_id;
	__u64	map_size;
	__u32	sq_entries;
	__u32	cq_entries;
	__u64	buf_size;
	__u64	resv[2];
};

/*
 * Sharing the KV pool with a client (kvmm_kv_pool_attach()).  After its hello
 * a client may send a struct kvmm_share_req on the socket, at any time
 * and as often as it likes (after a resize, say).  The server answers
 * with a struct kvmm_share; when its status is 0 there follow nr_ext
 * struct kvmm_share_ext, then nr_fds descriptors in messages of at most
 * KVMM_SHARE_FDS_MAX each, every message carrying one __u32 of data (its
 * count).  Descriptor e * nbufs + b backs buffer b over extent e: bytes
 * [0, pages * page_size * slot_bytes) of it are pages [first, +pages) of
 * that buffer.  Any other byte a client sends ends its connection.
 */
#define KVMM_SHARE_MAGIC	0x6b766d6d73686172ULL	/* "kvmmshar" */
#define KVMM_SHARE_FDS_MAX	253			/* the kernel's SCM_MAX_FD */

struct kvmm_share_req {
	__u64	magic;		/* KVMM_SHARE_MAGIC */
	__u64	resv[2];
};

struct kvmm_share {
	__u64	magic;		/* KVMM_SHARE_MAGIC */
	__s32	status;		/* 0, or -errno: why not (nothing follows) */
	__u32	nbufs;		/* buffers: 2 per layer (K, V), 1 for MLA */
	char	backend[16];	/* the backend that must import it */
	__u32	layers;		/* the model geometry, as struct kvmm_model */
	__u32	kv_heads;
	__u32	head_dim;
	__u32	latent_dim;
	__u32	dtype_bytes;
	__u32	attn;
	__u32	page_size;
	__u32	nr_pages;	/* pages the pool holds now */
	__u32	mapped_pages;	/* pages the descriptors back (>= nr_pages) */
	__u32	max_pages;	/* address space to reserve per buffer, in pages */
	__u32	nr_ext;
	__u32	nr_fds;		/* nr_ext * nbufs */
	__u64	granularity;	/* bytes the importer maps in (cuda) */
	char	device[32];	/* the device the memory is on (cuda: PCI bus id) */
	__u64	resv[4];
};

struct kvmm_share_ext {
	__u32	first;		/* first page the extent backs */
	__u32	pages;
};

#endif /* _UAPI_KVMM_RING_H */
