/* SPDX-License-Identifier: MIT */
/*
 * libkvmm-ring.h - the command ring of kvmm: its client API, the
 * liburing-like inline helpers that fill submission entries, and the
 * server an engine or kvmmd runs so that other processes can attach
 * rings to its context.
 *
 * The entries and every value in them are the ABI (uapi/kvmm/ring.h;
 * Documentation/userspace-api/ring.rst); this header is the C library's
 * way to reach them.  It includes libkvmm.h, which an embedder that only
 * calls the direct API reads alone.
 */
#ifndef LIBKVMM_RING_H
#define LIBKVMM_RING_H

#include <string.h>
#include <time.h>
#include <libkvmm.h>
#include <kvmm/ring.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declared here too: strict C99 has <time.h> without it (POSIX adds it). */
struct timespec;

/*
 * A ring is in-process (kvmm_ring_init: submit runs the commands inline, no
 * thread, no syscall) or attached to a server in another process
 * (kvmm_ring_connect: kvmmd, or an engine's kvmm_server_start()).  The
 * same entries and helpers serve both.  One thread drives a ring.
 */

/**
 * struct kvmm_iovec - a buffer payloads may refer to by (index, offset)
 * @base: its memory
 * @len: its size in bytes
 */
struct kvmm_iovec {
	void *base;
	size_t len;
};

/**
 * struct kvmm_ring_params - the shape of a ring
 * @sq_entries: submission entries, a power of two, 1..32768
 * @cq_entries: completion entries, a power of two >= @sq_entries; 0 for
 *	twice @sq_entries
 * @buf_size: bytes of the ring's data area, which is buffer 0 (payloads
 *	across processes live there); may be 0 in-process
 * @flags: KVMM_RING_F_POLL: the server polls the SQ longer (2 ms, not 50 µs)
 *	before it sleeps between doorbells; KVMM_RING_F_NS: bind
 *	the ring to namespace @ns (see uapi/kvmm/ring.h)
 * @ns: the namespace, with KVMM_RING_F_NS
 */
struct kvmm_ring_params {
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t buf_size;
	uint32_t flags;
	uint32_t ns;
};

struct kvmm_disp;

/**
 * struct kvmm_ring - a ring as its user sees it (members are the library's)
 * @hdr: the shared region; @sqes, @cqes: its arrays
 * @buf: the data area (buffer 0); @buf_size: its size
 * @sq_mask, @cq_mask: entries - 1
 * @sqe_tail: entries handed out by kvmm_get_sqe()
 * @sq_tail: entries published to the dispatcher
 * @cq_head: completions consumed
 * @ctx, @disp: in-process: the context and the dispatcher
 * @sock, @sq_fd, @cq_fd: across processes: the connection and doorbells
 * @map_size: bytes mapped at @hdr
 * @flags: KVMM_RING_F_*
 */
struct kvmm_ring {
	struct kvmm_ring_hdr *hdr;
	struct kvmm_sqe *sqes;
	struct kvmm_cqe *cqes;
	void *buf;
	uint64_t buf_size;
	uint32_t sq_mask, cq_mask;
	uint32_t sqe_tail, sq_tail, cq_head;
	struct kvmm_ctx *ctx;
	struct kvmm_disp *disp;
	int sock, sq_fd, cq_fd;
	size_t map_size;
	uint32_t flags;
};

int kvmm_ring_init(struct kvmm_ctx *ctx, const struct kvmm_ring_params *p,
		   struct kvmm_ring *ring);
int kvmm_ring_connect(const char *path, const struct kvmm_ring_params *p,
		      struct kvmm_ring *ring);
/* kvmm_ring_connect()'s deadline for connecting and the handshake */
#define KVMM_CONNECT_TIMEOUT_MS	10000
int kvmm_ring_connect_timeout(const char *path, const struct kvmm_ring_params *p,
			      struct kvmm_ring *ring, const struct timespec *timeout);
int kvmm_ring_register_buffers(struct kvmm_ring *ring, const struct kvmm_iovec *iov,
			       uint32_t nr);
void kvmm_ring_exit(struct kvmm_ring *ring);
int kvmm_submit(struct kvmm_ring *ring);
int kvmm_submit_and_wait(struct kvmm_ring *ring, uint32_t wait_nr);
int kvmm_wait_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep);
int kvmm_wait_cqe_timeout(struct kvmm_ring *ring, struct kvmm_cqe **cqep,
			  const struct timespec *timeout);
int kvmm_kv_pool_attach(struct kvmm_ring *ring, void *backend_arg, struct kvmm_kv_pool **poolp);
int kvmm_kv_pool_attach_timeout(struct kvmm_ring *ring, void *backend_arg,
				struct kvmm_kv_pool **poolp, const struct timespec *timeout);
int kvmm_ioctl(struct kvmm_ctx *ctx, const struct kvmm_sqe *sqe,
	       const struct kvmm_iovec *bufs, uint32_t nr_bufs);
void kvmm_lock(struct kvmm_ctx *ctx);
void kvmm_unlock(struct kvmm_ctx *ctx);

/* Servers: kvmmd, or an engine's admin socket. */
struct kvmm_server;
#define KVMM_SERVER_POLL	(1u << 0)	/* serve every ring in polling mode */
#define KVMM_SERVER_NS_UID	(1u << 1)	/* bind each non-root client to ns = its uid */
int kvmm_server_start(struct kvmm_ctx *ctx, const char *path, uint32_t flags,
		      struct kvmm_server **srvp);
void kvmm_server_stop(struct kvmm_server *srv);
uint32_t kvmm_server_clients(struct kvmm_server *srv);

/**
 * struct kvmm_server_limits - what a server grants its clients
 * @max_clients: rings attached at once (default 256); a hello over it is
 *	refused with -EBUSY
 * @max_pending: handshakes in progress, not counted in @max_clients
 *	(default 64, at most 1024); a new connection evicts the oldest
 * @handshake_ms: a whole hello, or a share request once begun, must be
 *	in within this (default 5000)
 * @send_ms: a whole welcome or share answer must be out within this
 *	(default 5000): a client that does not read is dropped
 * @resv: 0
 *
 * A field of 0 means its default.
 */
struct kvmm_server_limits {
	uint32_t max_clients;
	uint32_t max_pending;
	uint32_t handshake_ms;
	uint32_t send_ms;
	uint32_t resv[4];
};
int kvmm_server_set_limits(struct kvmm_server *srv, const struct kvmm_server_limits *lim);

/**
 * kvmm_get_sqe() - the next free submission entry, zeroed
 * @ring: the ring
 *
 * Return: the entry, or NULL when the SQ is full (submit, then reap).
 */
static inline struct kvmm_sqe *kvmm_get_sqe(struct kvmm_ring *ring)
{
	/* Pairs with the dispatcher's release store of sq_head. */
	uint32_t head = __atomic_load_n(&ring->hdr->sq_head, __ATOMIC_ACQUIRE);
	struct kvmm_sqe *sqe;

	if (ring->sqe_tail - head > ring->sq_mask)
		return NULL;
	sqe = &ring->sqes[ring->sqe_tail++ & ring->sq_mask];
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

/**
 * kvmm_peek_cqe() - the oldest completion not yet seen, without waiting
 * @ring: the ring
 * @cqep: out
 *
 * Return: 0, or -EAGAIN when there is none.
 */
static inline int kvmm_peek_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep)
{
	/* Pairs with the dispatcher's release store of cq_tail. */
	uint32_t tail = __atomic_load_n(&ring->hdr->cq_tail, __ATOMIC_ACQUIRE);

	if (tail == ring->cq_head)
		return -EAGAIN;
	*cqep = &ring->cqes[ring->cq_head & ring->cq_mask];
	return 0;
}

/* kvmm_cqe_seen() - done with the completion kvmm_peek/wait_cqe() gave */
static inline void kvmm_cqe_seen(struct kvmm_ring *ring, struct kvmm_cqe *cqe)
{
	(void)cqe;
	/* Pairs with the dispatcher's acquire load of cq_head. */
	__atomic_store_n(&ring->hdr->cq_head, ++ring->cq_head, __ATOMIC_RELEASE);
}

static inline void kvmm_sqe_set_data(struct kvmm_sqe *sqe, uint64_t data)
{
	sqe->user_data = data;
}

static inline void kvmm_prep_rw(struct kvmm_sqe *sqe, uint8_t op, uint32_t seq,
				uint16_t buf, uint64_t off, uint32_t len)
{
	sqe->opcode = op;
	sqe->seq = seq;
	sqe->buf = buf;
	sqe->off = off;
	sqe->len = len;
}

static inline void kvmm_prep_nop(struct kvmm_sqe *sqe)
{
	sqe->opcode = KVMM_OP_NOP;
}

static inline void kvmm_prep_probe(struct kvmm_sqe *sqe, uint16_t buf, uint64_t off)
{
	kvmm_prep_rw(sqe, KVMM_OP_PROBE, 0, buf, off, sizeof(struct kvmm_probe));
}

static inline void kvmm_prep_open(struct kvmm_sqe *sqe, uint32_t ns)
{
	sqe->opcode = KVMM_OP_OPEN;
	sqe->ns = ns;
}

/* Tokens live at (buf, off): @n uint32_t token ids. */
static inline void kvmm_prep_match(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				   uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_MATCH, seq, buf, off, n);
}

static inline void kvmm_prep_extend(struct kvmm_sqe *sqe, uint32_t seq, uint32_t n,
				    uint32_t flags)
{
	sqe->opcode = KVMM_OP_EXTEND;
	sqe->seq = seq;
	sqe->arg = n;
	sqe->arg2 = flags;
}

/* @count struct kvmm_extend_ent at (buf, off): a whole decode batch. */
static inline void kvmm_prep_extend_batch(struct kvmm_sqe *sqe, uint16_t buf,
					  uint64_t off, uint32_t count, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_EXTEND, 0, buf, off, count);
	sqe->arg2 = flags;
}

static inline void kvmm_prep_commit(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				    uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_COMMIT, seq, buf, off, n);
}

/* @n 0 closes without committing (buf and off 0 then). */
static inline void kvmm_prep_close(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				   uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_CLOSE, seq, buf, off, n);
}

static inline void kvmm_prep_retract(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				     uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_RETRACT, seq, buf, off, n);
}

static inline void kvmm_prep_pin(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				 uint64_t off, uint32_t n, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_PIN, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = flags;
}

static inline void kvmm_prep_unpin(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				   uint64_t off, uint32_t n, uint32_t flags)
{
	kvmm_prep_rw(sqe, KVMM_OP_UNPIN, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = flags;
}

static inline void kvmm_prep_prio(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				  uint64_t off, uint32_t n, uint32_t prio)
{
	kvmm_prep_rw(sqe, KVMM_OP_PRIO, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = prio;
}

/*
 * The demoted rest of what @seq matched: @n tokens at (buf, off), as given
 * to MATCH.  Completes when the pages are on the device and mapped.
 */
static inline void kvmm_prep_promote(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				     uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_PROMOTE, seq, buf, off, n);
}

/*
 * How much of @n tokens at (buf, off) is cached in @ns; locks nothing.
 * For every tier's share, set sqe->arg = KVMM_LOOKUP_TIERS and sqe->arg2
 * to where in buffer @buf the struct kvmm_tier_hits goes.
 */
static inline void kvmm_prep_lookup(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				    uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_LOOKUP, 0, buf, off, n);
	sqe->ns = ns;
}

/* RPUSH / RFETCH: a prompt's pages to or from the remote tier (kvmm_remote_push/fetch()) */
static inline void kvmm_prep_rpush(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				   uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_RPUSH, 0, buf, off, n);
	sqe->ns = ns;
}

/*
 * Bring the demoted part of @ns's prefix of @n tokens at (buf, off) up to
 * the device ahead of its MATCH, at most @budget pages (0: what is free
 * above the low watermark).  Its user_data is what cancels it.
 */
static inline void kvmm_prep_prefetch(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				      uint64_t off, uint32_t n, uint32_t budget)
{
	kvmm_prep_rw(sqe, KVMM_OP_PREFETCH, 0, buf, off, n);
	sqe->ns = ns;
	sqe->arg = budget;	/* sqe->arg2: KVMM_PREFETCH_RECLAIM */
}

/* Cancel this ring's prefetches whose user_data is @tag. */
static inline void kvmm_prep_prefetch_cancel(struct kvmm_sqe *sqe, uint64_t tag)
{
	kvmm_prep_rw(sqe, KVMM_OP_PREFETCH, 0, 0, 0, 0);
	sqe->arg = KVMM_PREFETCH_CANCEL;
	sqe->arg2 = tag;
}

static inline void kvmm_prep_rfetch(struct kvmm_sqe *sqe, uint32_t ns, uint16_t buf,
				    uint64_t off, uint32_t n)
{
	kvmm_prep_rw(sqe, KVMM_OP_RFETCH, 0, buf, off, n);
	sqe->ns = ns;
}

static inline void kvmm_prep_reclaim(struct kvmm_sqe *sqe, uint32_t pages)
{
	sqe->opcode = KVMM_OP_RECLAIM;
	sqe->arg = pages;
}

/* Output: a struct kvmm_stats_snap and its values in @bytes at (buf, off). */
static inline void kvmm_prep_stats(struct kvmm_sqe *sqe, uint16_t buf, uint64_t off,
				   uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_STATS, 0, buf, off, bytes);
}

/* Output: a struct kvmm_dump_hdr and records in @bytes at (buf, off). */
static inline void kvmm_prep_dump(struct kvmm_sqe *sqe, uint32_t kind, uint64_t cursor,
				  uint16_t buf, uint64_t off, uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_DUMP, 0, buf, off, bytes);
	sqe->arg = kind;
	sqe->arg2 = cursor;
}

/*
 * Output: a struct kvmm_events_hdr and the cache events from @cursor on in
 * @bytes at (buf, off); @flags KVMM_EVENTS_NS keeps namespace @ns's only.
 */
static inline void kvmm_prep_events(struct kvmm_sqe *sqe, uint64_t cursor, uint32_t flags,
				    uint32_t ns, uint16_t buf, uint64_t off, uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_EVENTS, 0, buf, off, bytes);
	sqe->arg = flags;
	sqe->arg2 = cursor;
	sqe->ns = ns;
}

/* Output: a struct kvmm_seq_row and @seq's page frames in @bytes at (buf, off). */
static inline void kvmm_prep_seq_row(struct kvmm_sqe *sqe, uint32_t seq, uint16_t buf,
				     uint64_t off, uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_SEQ_ROW, seq, buf, off, bytes);
}

static inline void kvmm_prep_set(struct kvmm_sqe *sqe, uint32_t key, uint64_t value)
{
	sqe->opcode = KVMM_OP_SET;
	sqe->arg = key;
	sqe->arg2 = value;
}

static inline void kvmm_prep_drop_caches(struct kvmm_sqe *sqe)
{
	sqe->opcode = KVMM_OP_DROP_CACHES;
}

/*
 * DROP_CACHES on the tiers of @tiers (KVMM_DROP_*) only; with @bytes ==
 * sizeof(struct kvmm_drop_counts), each tier's count to @buf at @off
 */
static inline void kvmm_prep_drop_caches_tiers(struct kvmm_sqe *sqe, uint32_t tiers,
					       uint16_t buf, uint64_t off, uint32_t bytes)
{
	kvmm_prep_rw(sqe, KVMM_OP_DROP_CACHES, 0, buf, off, bytes);
	sqe->arg = tiers;
}

/*
 * FLUSH: write every cached page not on NVMe to the tier's file, for at
 * most @timeout_ms (0: no limit); operator rings only (kvmm_flush())
 */
static inline void kvmm_prep_flush(struct kvmm_sqe *sqe, uint32_t timeout_ms)
{
	sqe->opcode = KVMM_OP_FLUSH;
	sqe->arg = timeout_ms;
}

/* CHECK: kvmm_check() of the server's context (operator rings only) */
static inline void kvmm_prep_check(struct kvmm_sqe *sqe)
{
	sqe->opcode = KVMM_OP_CHECK;
}

/*
 * PIN_DROP: @how is KVMM_PIN_DROP_ID (drop the pins ending at node @id;
 * @ns must be 0) or KVMM_PIN_DROP_NS (every pin in namespace @ns; @id
 * must be 0).  Operator rings only.
 */
static inline void kvmm_prep_pin_drop(struct kvmm_sqe *sqe, uint32_t how, uint32_t ns,
				      uint64_t id)
{
	sqe->opcode = KVMM_OP_PIN_DROP;
	sqe->arg = how;
	sqe->ns = ns;
	sqe->arg2 = id;
}

#ifdef __cplusplus
}
#endif

#endif /* LIBKVMM_RING_H */
