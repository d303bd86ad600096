// SPDX-License-Identifier: MIT
/*
 * disp/dispatch.c - the command dispatcher: what a ring's entries mean.
 *
 * DOC: dispatching commands
 *
 * A dispatcher consumes submission entries and produces completions for
 * one ring.  It never trusts the ring's memory: the other side may be
 * another process, and a hostile one.  So
 *  - the ring's geometry and the dispatcher's own indices (SQ head, CQ
 *    tail) are kept here and only ever written out, never read back;
 *  - the client's indices are read once per batch; a tail more than a
 *    ring ahead is clamped to one ring;
 *  - each entry is copied out of the ring, then validated, then used, so a
 *    client rewriting it meanwhile changes nothing that was checked;
 *  - every field the opcode does not use, every reserved field and every
 *    flag must be zero (-EINVAL), so new fields can be added later;
 *  - output records are counted in the dispatcher's own variables and
 *    only written to the client's buffer, never read back from it;
 *  - payloads are (buffer, offset, length) triples checked against the
 *    registered buffers (-EFAULT), never pointers.  Token payloads are
 *    read in place: a key rewritten while the tree reads it can only
 *    change that command's own result, and the tree refuses an insert
 *    whose copied edge no longer agrees with its walk (-EINVAL), so the
 *    structure stays sound.  A dispatcher for another process copies
 *    batch lists into private memory first, since they name sequences
 *    that are checked once and then used.
 *
 * A failed command changes nothing: validation happens before the core
 * is called, and every core call is itself all-or-nothing.
 *
 * One table says what each opcode is (struct disp_op, as io_uring's
 * io_op_defs): the fields it reads, the shape of its payload, whether its
 * sequence must be the ring's own, whether a bound ring may run it, and
 * its handler.  disp_exec() checks an entry against its row, in that
 * order, then runs the handler.  PROBE's opcode mask is read off the same
 * table (a row with a handler is a supported opcode), so an opcode cannot
 * be served without being advertised, nor advertised without being served.
 *
 * Tenants.  A ring bound to a namespace may only name that namespace
 * (OPEN, PIN, UNPIN, PRIO) and may not run the commands that act on the
 * whole context or show other tenants' tokens (RECLAIM, DROP_CACHES, SET,
 * DUMP, PIN_DROP, CHECK, FLUSH): -EPERM.  Its pins, KVMM_PIN_KEEP or not, count against
 * the namespace's pin limit (-EDQUOT past it), so a tenant cannot pin the
 * pool away from the others; the operator (an unbound ring) lists every
 * pin with DUMP_PINS and drops any of them, whoever took it, with
 * PIN_DROP.  Its EVENTS show the events of its namespace only.
 *
 * Ownership.  A sequence opened through a ring belongs to it: other rings
 * (and the direct API) cannot touch it, and when the ring goes (the client
 * exits or is killed) every sequence it still holds is closed without
 * commit and every pin it took without KVMM_PIN_KEEP is dropped, so no
 * page stays owned or locked for a client that is gone.
 *
 * Sequence ids.  OPEN answers KVMM_SEQ_ID(row, generation), never the
 * bare row, and every command naming a sequence is checked against the
 * row's current generation (seq_mine()), so an id an engine kept past
 * its CLOSE fails with -ESTALE instead of reaching the request that
 * reused the row.  The core takes either form; it is checked here first
 * for the errno.
 *
 * Locking.  The context lock is taken once per batch of entries, not per
 * command.  A keyed KPUT or KGET drops it while it copies values, and
 * now and then while it takes or gives back many frames (the entries
 * before it in the batch have completed, the ones after it have not
 * started), so that other rings are served meanwhile.
 *
 * Keyed spaces.  A ring bound to a namespace registers spaces in its own
 * namespace only (KSPACE names it) and reaches only spaces of its own
 * (-EINVAL for any other id, as for one that does not exist).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "../kvmm/internal.h"
#include "disp.h"
#include "dump.h"

/**
 * struct kvmm_disp - the dispatcher of one ring
 * @ctx: the context it drives
 * @owner: what it holds, registered on the context (owner.c); its id
 *	owns its sequences, 1 up; id 0 and unregistered for kvmm_ioctl()
 * @keep_only: pins never belong to it (kvmm_ioctl)
 * @bufs: registered buffers: base and length
 * @hdr: the ring region, or NULL before kvmm_disp_attach()
 * @sqes, @cqes: its arrays; @sq_mask, @cq_mask: entries - 1 (private)
 * @sq_head, @cq_tail: the indices this side owns (private)
 * @ns_bound: the ring may only name namespace @ns, and no admin command
 * @ns: its namespace when bound
 * @scratch: private copy of an untrusted batch list (NULL when trusted)
 * @scratch_bytes: its size
 * @deferred: commands whose completion comes later (a PROMOTE on the I/O
 *	worker); the CQ keeps room for them.  Written under ctx->lock.
 * @notify: called, under ctx->lock, after a deferred completion is posted,
 *	so the transport can wake a client that sleeps on the CQ
 * @notify_arg: its argument
 */
struct kvmm_disp {
	struct kvmm_ctx *ctx;
	struct kvmm_owner owner;
	bool keep_only;
	struct kvmm_iovec bufs[KVMM_RING_MAX_BUFS];
	struct kvmm_ring_hdr *hdr;
	struct kvmm_sqe *sqes;
	struct kvmm_cqe *cqes;
	uint32_t sq_mask, cq_mask;
	uint32_t sq_head, cq_tail;
	bool ns_bound;
	uint32_t ns;
	void *scratch;
	size_t scratch_bytes;
	uint32_t deferred;
	void (*notify)(void *arg);
	void *notify_arg;
};

/* disp_exec()'s result for a command that completes later. */
#define RES_DEFERRED	INT32_MIN

/* Fields an opcode reads (struct disp_op.fields); every other must be zero. */
#define F_SEQ	(1u << 0)
#define F_BUF	(1u << 1)	/* buf and off */
#define F_LEN	(1u << 2)
#define F_NS	(1u << 3)
#define F_ARG	(1u << 4)
#define F_ARG2	(1u << 5)
#define F_TOK	(F_BUF | F_LEN)

/*
 * A payload of @bytes at (buf, off), or NULL when it leaves the buffer or
 * its address is not @align aligned (4 for tokens and batch entries, 8 for
 * the output records, which hold 64-bit fields).
 */
static void *payload_aligned(const struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			     uint64_t bytes, uintptr_t align)
{
	const struct kvmm_iovec *iov;
	char *p;

	if (sqe->buf >= KVMM_RING_MAX_BUFS)
		return NULL;
	iov = &d->bufs[sqe->buf];
	if (!iov->base || sqe->off > iov->len || bytes > iov->len - sqe->off)
		return NULL;
	p = (char *)iov->base + sqe->off;
	return ((uintptr_t)p & (align - 1)) ? NULL : p;
}

static void *payload(const struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		     uint64_t bytes)
{
	return payload_aligned(d, sqe, bytes, 4);
}

static void *output(const struct kvmm_disp *d, const struct kvmm_sqe *sqe)
{
	return payload_aligned(d, sqe, sqe->len, 8);
}

/*
 * A batch list to read: in place for a trusted ring, else copied to the
 * dispatcher's scratch (sized for the largest batch allowed, one entry per
 * sequence; a longer one is refused).  @err is -EFAULT or -EINVAL on NULL.
 */
static const void *input(const struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			 uint64_t bytes, int *err)
{
	const void *p = payload(d, sqe, bytes);

	*err = -EFAULT;
	if (!p || !d->scratch)
		return p;
	*err = -EINVAL;
	if (bytes > d->scratch_bytes)
		return NULL;
	memcpy(d->scratch, p, bytes);
	return d->scratch;
}

/*
 * 0 if this ring may use sequence id @seq: its row is open, the ring's
 * own, and opened under that id.  -ESTALE for an id the ring kept past
 * its CLOSE while the row is open again under a later generation (the
 * same ring's: another's row says nothing of its generation to it);
 * -EINVAL otherwise.  kvmm_ioctl() (owner 0) also takes a bare row, as
 * the direct API it shares its sequences with.
 */
static int seq_mine(const struct kvmm_disp *d, uint32_t seq)
{
	const struct kvmm_ctx *ctx = d->ctx;
	uint32_t row = KVMM_SEQ_ROW(seq), gen = KVMM_SEQ_GEN(seq);
	const struct kvmm_seq *s;

	if (row >= ctx->max_seqs)
		return -EINVAL;
	s = &ctx->seqs[row];
	if (!s->open || s->owner != d->owner.id)
		return -EINVAL;
	if (gen == s->gen || (!gen && !d->owner.id))
		return 0;
	return gen ? -ESTALE : -EINVAL;
}

static int op_pin(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	bool keep = d->keep_only || (sqe->arg & KVMM_PIN_KEEP);
	struct kvmm_node *node = NULL;
	int ret;

	if (sqe->arg & ~KVMM_PIN_FLAGS)
		return -EINVAL;
	if (!keep) {
		ret = kvmm_owner_reserve_pin(d->ctx, &d->owner);
		if (ret)
			return ret;
	}
	ret = __kvmm_prefix_pin(d->ctx, sqe->ns, tok, sqe->len, keep,
				d->ns_bound ? kvmm_ns_pin_limit(d->ctx) : KVMM_NO_LIMIT,
				&node);
	if (ret >= 0 && !keep)
		kvmm_owner_add_pin(&d->owner, node);
	return ret;
}

static int op_unpin(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	bool keep = d->keep_only || (sqe->arg & KVMM_PIN_KEEP);
	struct kvmm_node *node = NULL;
	int ret;

	if (sqe->arg & ~KVMM_PIN_FLAGS)
		return -EINVAL;
	ret = __kvmm_prefix_pinned(d->ctx, sqe->ns, tok, sqe->len, &node);
	if (ret < 0)
		return ret;
	if (keep) {
		if (!node->keep_pins)
			return -EINVAL;
	} else if (!kvmm_owner_del_pin(&d->owner, node)) {
		return -EINVAL;	/* not a pin of this ring's */
	}
	kvmm_node_unpin(d->ctx, node, keep);
	return ret;
}

/*
 * PIN_DROP: the operator's way out of pins nobody will drop (a tenant's
 * KVMM_PIN_KEEP pins after it exited, or a live ring's).  A ring whose
 * pin was dropped finds it gone: its UNPIN gets -EINVAL.
 */
static int op_pin_drop(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_ctx *ctx = d->ctx;
	struct kvmm_node *root, *node;
	uint64_t n = 0;

	switch (sqe->arg) {
	case KVMM_PIN_DROP_ID:
		if (sqe->ns)
			return -EINVAL;
		node = sqe->arg2 ? kvmm_tree_find_id(ctx, sqe->arg2) : NULL;
		if (!node || !node->pins)
			return -ENOENT;
		n = kvmm_pins_drop_node(ctx, node);
		break;
	case KVMM_PIN_DROP_NS:
		if (sqe->arg2)
			return -EINVAL;
		root = kvmm_tree_root(ctx, sqe->ns, false);
		for (node = root; node; node = kvmm_tree_next(root, node))
			if (node->pins)
				n += kvmm_pins_drop_node(ctx, node);
		break;
	default:
		return -EINVAL;
	}
	kvmm_debug_check(ctx, "pin drop");
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

/*
 * A single EXTEND: by @sqe->arg tokens, or with KVMM_EXTEND_TO up to that
 * length (what a MATCH earlier in the batch did not map).
 */
static int extend_one(struct kvmm_disp *d, const struct kvmm_sqe *sqe)
{
	uint32_t n = sqe->arg, flags = (uint32_t)sqe->arg2 & ~KVMM_EXTEND_TO;
	const struct kvmm_seq *s;
	int ret;

	if (sqe->buf || sqe->off)
		return -EINVAL;
	ret = seq_mine(d, sqe->seq);
	if (ret)
		return ret;
	if (sqe->arg2 & KVMM_EXTEND_TO) {
		s = kvmm_seq_lookup(d->ctx, sqe->seq);
		if (!s || n <= s->len)
			return -EINVAL;
		n -= s->len;
	}
	return __kvmm_seq_extend(d->ctx, &sqe->seq, &n, 1, 1, flags);
}

static int op_extend(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	const struct kvmm_extend_ent *ents;
	uint32_t i;
	int ret;

	if (sqe->arg2 > UINT32_MAX)
		return -EINVAL;
	if (!sqe->len)
		return extend_one(d, sqe);
	if (sqe->seq || sqe->arg || (sqe->arg2 & KVMM_EXTEND_TO))
		return -EINVAL;
	ents = input(d, sqe, (uint64_t)sqe->len * sizeof(*ents), &ret);
	if (!ents)
		return ret;
	for (i = 0; i < sqe->len; i++) {
		ret = seq_mine(d, ents[i].seq);
		if (ret)
			return ret;
	}
	return __kvmm_seq_extend(d->ctx, &ents->seq, &ents->n,
				 sizeof(*ents) / sizeof(uint32_t), sqe->len,
				 (uint32_t)sqe->arg2);
}

static void probe_ops(struct kvmm_probe *p);

static int op_probe(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	const struct kvmm_ctx *ctx = d->ctx;
	struct kvmm_probe *p = output(d, sqe);

	if (!p)
		return -EFAULT;
	if (sqe->len < sizeof(*p))
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->abi = KVMM_ABI_VERSION;
	p->nr_ops = KVMM_OP_LAST;
	probe_ops(p);
	p->features = KVMM_FEAT_NAMESPACES | KVMM_FEAT_PIN_KEEP | KVMM_FEAT_SLRU |
		      KVMM_FEAT_TIERS | KVMM_FEAT_NS_LIMITS | KVMM_FEAT_KEYED |
		      KVMM_FEAT_EVENTS | KVMM_FEAT_SEQ_GEN | KVMM_FEAT_KPREFETCH;
	p->page_size = ctx->page_size;
	p->nr_pages = ctx->zone[KVMM_TIER_DEVICE].nr_pages;
	p->max_seqs = ctx->max_seqs;
	p->max_seq_len = ctx->params.max_seq_len;
	p->sqe_size = sizeof(struct kvmm_sqe);
	p->cqe_size = sizeof(struct kvmm_cqe);
	return (int)sizeof(*p);
}

/* MATCH, flagging a prefix that goes on below the device. */
static int op_match(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	uint32_t below = 0;
	int ret = __kvmm_seq_match(d->ctx, sqe->seq, tok, sqe->len, &below);

	if (ret >= 0 && below)
		*cflags |= KVMM_CQE_F_LOWER;
	return ret;
}

static int op_lookup(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_sqe out = *sqe;
	struct kvmm_tier_hits hits, *dst;
	int ret;

	if (sqe->arg & ~KVMM_LOOKUP_FLAGS)
		return -EINVAL;
	if (!(sqe->arg & KVMM_LOOKUP_TIERS))
		return sqe->arg2 ? -EINVAL : kvmm_prefix_lookup(d->ctx, sqe->ns, tok, sqe->len);
	out.off = sqe->arg2;
	dst = payload(d, &out, sizeof(*dst));
	if (!dst)
		return -EFAULT;
	ret = kvmm_prefix_tiers(d->ctx, sqe->ns, tok, sqe->len, &hits);
	if (ret >= 0)
		memcpy(dst, &hits, sizeof(hits));
	return ret;
}

static int op_stats(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_stats_snap *snap = output(d, sqe);
	uint32_t room, nr;

	if (!snap)
		return -EFAULT;
	if (sqe->len < sizeof(*snap) + sizeof(uint64_t))
		return -EINVAL;
	/* Counts stay in our variables: the client may rewrite its buffer. */
	room = (sqe->len - (uint32_t)sizeof(*snap)) / sizeof(uint64_t);
	nr = room < NR_KVMM_STATS ? room : NR_KVMM_STATS;
	kvmm_stats(d->ctx, (uint64_t *)(snap + 1), nr);
	snap->nr = nr;
	snap->abi = KVMM_ABI_VERSION;
	return (int)nr;
}

/* DUMP: the records are dump.c's; the buffer is checked here. */
static int op_dump(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_dump_hdr *hdr = output(d, sqe);

	if (!hdr)
		return -EFAULT;
	return kvmm_dump(d->ctx, sqe, hdr, cflags);
}

/*
 * SEQ_ROW: a remote client's view of its sequence's page-table row, which
 * an in-process engine reads in place (kvmm_seq_table()).  The row is
 * copied whole or not at all; the sequence is the ring's own (own_seq).
 */
static int op_seq_row(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		      const uint32_t *tok, uint32_t *cflags)
{
	const struct kvmm_ctx *ctx = d->ctx;
	const struct kvmm_seq *s = kvmm_seq_lookup(ctx, sqe->seq);
	uint32_t pages = kvmm_pages_of(ctx, s->len);
	struct kvmm_seq_row *row = payload(d, sqe, sqe->len);

	if (!row)
		return -EFAULT;
	if (sqe->len < sizeof(*row) + (uint64_t)pages * sizeof(int32_t))
		return -EINVAL;
	*row = (struct kvmm_seq_row){ .len = s->len, .cached = s->cached, .pages = pages };
	memcpy(row + 1, kvmm_row(ctx, sqe->seq), (size_t)pages * sizeof(int32_t));
	return (int)pages;
}

static int op_set(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_ctx *ctx = d->ctx;
	uint32_t w[NR_KVMM_WMARK];
	static const char *const policies[KVMM_POLICY_LAST] = {
		[KVMM_POLICY_LRU] = "lru",
		[KVMM_POLICY_SLRU] = "slru",
	};

	switch (sqe->arg) {
	case KVMM_SET_WMARK_MIN:
	case KVMM_SET_WMARK_LOW:
	case KVMM_SET_WMARK_HIGH:
		if (sqe->arg2 > UINT32_MAX)
			return -EINVAL;
		memcpy(w, ctx->zone[KVMM_TIER_DEVICE].wmark, sizeof(w));
		w[sqe->arg - KVMM_SET_WMARK_MIN] = (uint32_t)sqe->arg2;
		return kvmm_set_watermarks(ctx, w[KVMM_WMARK_MIN], w[KVMM_WMARK_LOW],
					   w[KVMM_WMARK_HIGH]);
	case KVMM_SET_POLICY:
		if (sqe->arg2 >= KVMM_POLICY_LAST)
			return -EINVAL;
		return kvmm_set_evict_policy(ctx, policies[sqe->arg2]);
	case KVMM_SET_NR_PAGES:
		if (sqe->arg2 > UINT32_MAX)
			return -EINVAL;
		return kvmm_resize(ctx, (uint32_t)sqe->arg2);
	case KVMM_SET_NS_PIN_PAGES:
		return kvmm_set_ns_pin_pages(ctx, sqe->arg2);
	case KVMM_SET_NS_CACHE_SHARE:
		return kvmm_set_ns_cache_share(ctx, sqe->arg2);
	case KVMM_SET_KEYED_SHARE:
		return kvmm_set_keyed_share(ctx, sqe->arg2);
	case KVMM_SET_EVENTS:
		return kvmm_set_events(ctx, sqe->arg2);
	case KVMM_SET_EVENT_TOKENS:
		return kvmm_set_event_tokens(ctx, sqe->arg2);
	case KVMM_SET_NS_KSPACES:
		return kvmm_set_ns_kspaces(ctx, sqe->arg2);
	case KVMM_SET_NS_KJOB_BYTES:
		return kvmm_set_ns_kjob_bytes(ctx, sqe->arg2);
	default:
		return -EINVAL;
	}
}

static int64_t clamp_res(int64_t v)
{
	return v > INT32_MAX ? INT32_MAX : v;
}

static int op_nop(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		  const uint32_t *tok, uint32_t *cflags)
{
	return 0;
}

static int op_open(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_seq *s;
	uint32_t seq;
	int ret = kvmm_seq_open(d->ctx, sqe->ns, &seq);

	if (ret)
		return ret;
	s = &d->ctx->seqs[seq];
	s->owner = d->owner.id;
	return (int)KVMM_SEQ_ID(seq, s->gen);
}

/* A ring's PROMOTE may complete later, through its owner; kvmm_ioctl() waits. */
static int op_promote(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		      const uint32_t *tok, uint32_t *cflags)
{
	int ret = kvmm_promote(d->ctx, sqe->seq, tok, sqe->len,
			       d->hdr ? &d->owner : NULL, sqe->user_data);

	return ret == -EINPROGRESS ? RES_DEFERRED : ret;
}

static int op_commit(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		     const uint32_t *tok, uint32_t *cflags)
{
	return __kvmm_seq_commit(d->ctx, sqe->seq, tok, sqe->len);
}

static int op_close(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		    const uint32_t *tok, uint32_t *cflags)
{
	return kvmm_seq_close(d->ctx, sqe->seq, tok, sqe->len);
}

static int op_retract(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		      const uint32_t *tok, uint32_t *cflags)
{
	return kvmm_seq_retract(d->ctx, sqe->seq, tok, sqe->len);
}

static int op_reclaim(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		      const uint32_t *tok, uint32_t *cflags)
{
	return (int)clamp_res(kvmm_reclaim(d->ctx, sqe->arg));
}

/* DROP_CACHES: every tier (arg 0), or the tiers of arg, with their counts. */
static int op_drop_caches(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			  const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_drop_counts *out = NULL;
	uint64_t freed[KVMM_NR_TIERS];
	int64_t ret;

	if (!sqe->len && (sqe->buf || sqe->off))
		return -EINVAL;
	if (!sqe->arg && !sqe->len)
		return (int)clamp_res(kvmm_drop_caches(d->ctx));
	if (!sqe->arg || (sqe->len && sqe->len != sizeof(*out)))
		return -EINVAL;
	if (sqe->len && !(out = output(d, sqe)))
		return -EFAULT;
	ret = kvmm_drop_caches_tiers(d->ctx, sqe->arg, freed);
	if (ret >= 0 && out)
		memcpy(out->pages, freed, sizeof(freed));
	return (int)clamp_res(ret);
}

static int op_prio(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		   const uint32_t *tok, uint32_t *cflags)
{
	return kvmm_prefix_set_prio(d->ctx, sqe->ns, tok, sqe->len, sqe->arg);
}

/*
 * FLUSH: kvmm_flush() under the lock the batch holds, for at most arg
 * milliseconds: the rings wait meanwhile, as the operator asked.
 */
static int op_flush(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		    const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_flush_info info;
	int64_t ret = kvmm_flush_held(d->ctx, (uint32_t)sqe->arg, &info);

	if (ret >= 0 && info.left)
		*cflags |= KVMM_CQE_F_MORE;
	return (int)clamp_res(ret);
}

/* CHECK: kvmm_check() of the whole context, under its lock like every command */
static int op_check(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		    const uint32_t *tok, uint32_t *cflags)
{
	return kvmm_check(d->ctx);
}

/* RPUSH, RFETCH: a ring's complete later, from the I/O worker; kvmm_ioctl() waits. */
static int op_rpush(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		    const uint32_t *tok, uint32_t *cflags)
{
	int ret = kvmm_remote_ring(d->ctx, d->hdr ? &d->owner : NULL, sqe->user_data, false,
				   sqe->ns, tok, sqe->len);

	return ret == -EINPROGRESS ? RES_DEFERRED : ret;
}

static int op_rfetch(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		     const uint32_t *tok, uint32_t *cflags)
{
	int ret = kvmm_remote_ring(d->ctx, d->hdr ? &d->owner : NULL, sqe->user_data, true,
				   sqe->ns, tok, sqe->len);

	return ret == -EINPROGRESS ? RES_DEFERRED : ret;
}

/*
 * PREFETCH: a ring's may complete later, from the I/O worker (kvmm_ioctl()
 * waits); with KVMM_PREFETCH_CANCEL alone and no tokens it cancels the
 * ring's prefetches tagged arg2.
 */
static int op_prefetch(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		       const uint32_t *tok, uint32_t *cflags)
{
	int ret;

	if (sqe->arg & KVMM_PREFETCH_CANCEL) {
		if (sqe->arg != KVMM_PREFETCH_CANCEL || sqe->len)
			return -EINVAL;
		return kvmm_prefetch_cancel(d->ctx, d->hdr ? &d->owner : NULL, sqe->arg2);
	}
	if (sqe->arg2 > UINT32_MAX)
		return -EINVAL;
	ret = __kvmm_prefetch(d->ctx, sqe->ns, tok, sqe->len, sqe->arg, (uint32_t)sqe->arg2,
			      d->hdr ? &d->owner : NULL, sqe->user_data);
	return ret == -EINPROGRESS ? RES_DEFERRED : ret;
}

/* KSPACE: register (or find) a keyed space in the entry's namespace. */
static int op_kspace(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		     const uint32_t *tok, uint32_t *cflags)
{
	const struct kvmm_kspace_reg *in = payload_aligned(d, sqe, sizeof(*in), 8);
	struct kvmm_kspace_reg reg;
	struct kvmm_keyed_spec spec;
	uint32_t space;
	int ret;

	if (!in)
		return -EFAULT;
	memcpy(&reg, in, sizeof(reg));	/* checked once, then used */
	if (sqe->len != sizeof(reg) || reg.resv ||
	    !memchr(reg.model_id, '\0', sizeof(reg.model_id)))
		return -EINVAL;
	spec = (struct kvmm_keyed_spec){ .ns = sqe->ns, .flags = reg.flags,
					 .value_bytes = reg.value_bytes,
					 .model_id = reg.model_id };
	ret = kvmm_keyed_space(d->ctx, &spec, &space);
	return ret ? ret : (int)space;
}

/* The keyed space @id, if this ring may use it. */
static struct kvmm_kspace *ring_kspace(struct kvmm_disp *d, uint32_t id)
{
	return kvmm_kspace_of(d->ctx, id, d->ns_bound ? d->ns : KVMM_NS_ANY);
}

/* Values one KPUT or KGET may name. */
#define KVMM_KIO_MAX	4096

/*
 * KPUT, KGET: the entries are copied once and checked whole (each value's
 * bytes inside a registered buffer) before anything is done; each one's
 * res is written back into the client's array at settle.  A command that
 * reads NVMe completes later, through the owner.
 */
static int op_kio(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		  const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_kspace *s = ring_kspace(d, sqe->arg);
	struct kvmm_kent *ents = payload_aligned(d, sqe, (uint64_t)sqe->len * sizeof(*ents), 8);
	uint64_t vb;
	size_t bytes = (size_t)sqe->len * (sizeof(struct kvmm_key) + 2 * sizeof(void *));
	struct kvmm_key *keys;
	int32_t **resps;
	void **bufs;
	uint32_t i;
	int ret;

	if (!s || !sqe->len || sqe->len > KVMM_KIO_MAX)
		return -EINVAL;
	if (!ents)
		return -EFAULT;
	vb = kvmm_kspace_value_bytes(s);
	keys = kvmm_malloc(d->ctx, bytes);
	if (!keys)
		return -ENOMEM;
	bufs = (void **)(keys + sqe->len);
	resps = (int32_t **)(bufs + sqe->len);
	for (i = 0, ret = 0; i < sqe->len && !ret; i++) {
		struct kvmm_kent e;
		struct kvmm_sqe at = { .buf = 0 };

		memcpy(&e, &ents[i], sizeof(e));
		at.buf = e.buf;
		at.off = e.off;
		keys[i] = e.key;
		resps[i] = &ents[i].res;
		bufs[i] = payload_aligned(d, &at, vb, 1);
		if (e.resv)
			ret = -EINVAL;
		else if (!bufs[i])
			ret = -EFAULT;
	}
	if (!ret)
		ret = kvmm_keyed_ring(d->ctx, d->hdr ? &d->owner : NULL, sqe->user_data, s,
				      sqe->opcode == KVMM_OP_KPUT, keys, bufs, resps, sqe->len);
	kvmm_mfree(d->ctx, keys, bytes);
	return ret == -EINPROGRESS ? RES_DEFERRED : ret;
}

/*
 * KEXISTS, KDELETE: an array of keys, copied before it is read; with
 * KVMM_KEYS_EACH in arg2, of struct kvmm_kent, each one's res written.
 * KDELETE with KVMM_KDELETE_SPACE (and no keys) removes the whole space.
 */
static int op_kkeys(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		    const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_kspace *s = ring_kspace(d, sqe->arg);
	bool each = sqe->arg2 & KVMM_KEYS_EACH;
	size_t esz = each ? sizeof(struct kvmm_kent) : sizeof(struct kvmm_key);
	void *in = payload_aligned(d, sqe, (uint64_t)sqe->len * esz, 8);
	size_t bytes = (size_t)sqe->len * (sizeof(struct kvmm_key) + (each ? sizeof(int32_t *) : 0));
	struct kvmm_key *keys;
	int32_t **resps = NULL;
	uint32_t i;
	int ret;

	if (!s || sqe->len > KVMM_KIO_MAX || (sqe->arg2 & ~(uint64_t)KVMM_KEYS_FLAGS))
		return -EINVAL;
	if (sqe->arg2 & KVMM_KDELETE_SPACE) {
		if (sqe->opcode != KVMM_OP_KDELETE || sqe->len || each)
			return -EINVAL;
		return kvmm_keyed_space_remove_in(d->ctx, s);
	}
	if (!in)
		return -EFAULT;
	if (!sqe->len)
		return 0;
	keys = kvmm_malloc(d->ctx, bytes);
	if (!keys)
		return -ENOMEM;
	if (each) {
		struct kvmm_kent *ents = in;

		resps = (int32_t **)(keys + sqe->len);
		for (i = 0; i < sqe->len; i++) {
			memcpy(&keys[i], &ents[i].key, sizeof(keys[i]));
			resps[i] = &ents[i].res;
		}
	} else {
		memcpy(keys, in, bytes);
	}
	ret = kvmm_keyed_run_keys(d->ctx, s, keys, sqe->len, sqe->opcode == KVMM_OP_KDELETE,
				  resps, true);
	kvmm_mfree(d->ctx, keys, bytes);
	return ret;
}

/*
 * KPREFETCH: an array of keys, each read once, where the client wrote it
 * (the job copies it in at once: a key rewritten meanwhile is only
 * another key); arg2 a budget in pages and KVMM_KPREFETCH_* flags.  It
 * completes at once (the reads go on, on the I/O worker); PREFETCH's
 * cancel names it by its user_data.
 */
static int op_kprefetch(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			const uint32_t *tok, uint32_t *cflags)
{
	struct kvmm_kspace *s = ring_kspace(d, sqe->arg);
	const struct kvmm_key *keys = payload_aligned(d, sqe, (uint64_t)sqe->len *
						      sizeof(struct kvmm_key), 8);

	if (!s || sqe->len > KVMM_KIO_MAX ||
	    (sqe->arg2 & ~(uint64_t)(UINT32_MAX | KVMM_KPREFETCH_FLAGS)))
		return -EINVAL;
	if (!keys)
		return -EFAULT;
	return kvmm_keyed_prefetch_in(d->ctx, d->hdr ? &d->owner : NULL, sqe->user_data, s, keys,
				      sqe->len, (uint32_t)sqe->arg2, (uint32_t)(sqe->arg2 >> 32));
}

/*
 * EVENTS: cache events from cursor arg2 on (events.c).  A ring bound to
 * a namespace sees its own only, whatever arg says: it names its
 * namespace in ns (checked as every bound ring's), and the filter is on.
 */
static int op_events(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		     const uint32_t *tok, uint32_t *cflags)
{
	void *out = output(d, sqe);
	bool filter = sqe->arg & KVMM_EVENTS_NS;

	if ((sqe->arg & ~KVMM_EVENTS_FLAGS) || (!filter && !d->ns_bound && sqe->ns))
		return -EINVAL;
	if (!out)
		return -EFAULT;
	return kvmm_events_read(d->ctx, sqe->arg2, filter || d->ns_bound, sqe->ns,
				sqe->arg & KVMM_EVENTS_TOKENS, out, sqe->len, cflags);
}

/* What (buf, off, len) hold for an opcode: struct disp_op.payload. */
enum disp_payload {
	P_NONE,		/* nothing: the fields are zero */
	P_TOKENS,	/* len tokens, read in place, checked before the handler */
	P_OWN,		/* the handler resolves it: an output record or a batch list */
};

/**
 * struct disp_op - what one opcode is, io_uring's io_op_defs
 * @fields: the fields it reads (F_*); every other field must be zero
 * @payload: what (buf, off, len) hold, enum disp_payload
 * @own_seq: seq must name a sequence of this ring's (-EINVAL)
 * @admin: acts on the whole context or shows other tenants' tokens: a
 *	ring bound to a namespace may not run it (-EPERM); a bound ring's
 *	other commands may name only its namespace
 * @handler: runs it once everything above was checked; ctx->lock held.
 *	Returns the completion's res, RES_DEFERRED for one posted later;
 *	may set KVMM_CQE_F_* in *cflags.  A row without one is an opcode
 *	this build does not support: -EINVAL, and PROBE leaves its bit clear
 */
struct disp_op {
	uint8_t fields;
	uint8_t payload;
	bool own_seq;
	bool admin;
	int (*handler)(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
		       const uint32_t *tok, uint32_t *cflags);
};

static const struct disp_op disp_ops[] = {
	[KVMM_OP_NOP]		= { 0, P_NONE, false, false, op_nop },
	[KVMM_OP_PROBE]		= { F_TOK, P_OWN, false, false, op_probe },
	[KVMM_OP_OPEN]		= { F_NS, P_NONE, false, false, op_open },
	[KVMM_OP_MATCH]		= { F_SEQ | F_TOK, P_TOKENS, true, false, op_match },
	[KVMM_OP_EXTEND]	= { F_SEQ | F_TOK | F_ARG | F_ARG2, P_OWN, false, false, op_extend },
	[KVMM_OP_COMMIT]	= { F_SEQ | F_TOK, P_TOKENS, true, false, op_commit },
	[KVMM_OP_CLOSE]		= { F_SEQ | F_TOK, P_TOKENS, true, false, op_close },
	[KVMM_OP_RETRACT]	= { F_SEQ | F_TOK, P_TOKENS, true, false, op_retract },
	[KVMM_OP_PIN]		= { F_NS | F_TOK | F_ARG, P_TOKENS, false, false, op_pin },
	[KVMM_OP_UNPIN]		= { F_NS | F_TOK | F_ARG, P_TOKENS, false, false, op_unpin },
	[KVMM_OP_RECLAIM]	= { F_ARG, P_NONE, false, true, op_reclaim },
	[KVMM_OP_STATS]		= { F_TOK, P_OWN, false, false, op_stats },
	[KVMM_OP_DUMP]		= { F_TOK | F_ARG | F_ARG2, P_OWN, false, true, op_dump },
	[KVMM_OP_SET]		= { F_ARG | F_ARG2, P_NONE, false, true, op_set },
	[KVMM_OP_DROP_CACHES]	= { F_TOK | F_ARG, P_OWN, false, true, op_drop_caches },
	[KVMM_OP_PRIO]		= { F_NS | F_TOK | F_ARG, P_TOKENS, false, false, op_prio },
	[KVMM_OP_LOOKUP]	= { F_NS | F_TOK | F_ARG | F_ARG2, P_TOKENS, false, false, op_lookup },
	[KVMM_OP_PROMOTE]	= { F_SEQ | F_TOK, P_TOKENS, true, false, op_promote },
	[KVMM_OP_PIN_DROP]	= { F_NS | F_ARG | F_ARG2, P_NONE, false, true, op_pin_drop },
	[KVMM_OP_SEQ_ROW]	= { F_SEQ | F_TOK, P_OWN, true, false, op_seq_row },
	[KVMM_OP_KSPACE]	= { F_NS | F_TOK, P_OWN, false, false, op_kspace },
	[KVMM_OP_KPUT]		= { F_TOK | F_ARG, P_OWN, false, false, op_kio },
	[KVMM_OP_KGET]		= { F_TOK | F_ARG, P_OWN, false, false, op_kio },
	[KVMM_OP_KEXISTS]	= { F_TOK | F_ARG | F_ARG2, P_OWN, false, false, op_kkeys },
	[KVMM_OP_KDELETE]	= { F_TOK | F_ARG | F_ARG2, P_OWN, false, false, op_kkeys },
	[KVMM_OP_EVENTS]	= { F_NS | F_TOK | F_ARG | F_ARG2, P_OWN, false, false, op_events },
	[KVMM_OP_RPUSH]		= { F_NS | F_TOK, P_TOKENS, false, false, op_rpush },
	[KVMM_OP_RFETCH]	= { F_NS | F_TOK, P_TOKENS, false, false, op_rfetch },
	[KVMM_OP_CHECK]		= { 0, P_NONE, false, true, op_check },
	[KVMM_OP_FLUSH]		= { F_ARG, P_NONE, false, true, op_flush },
	[KVMM_OP_PREFETCH]	= { F_NS | F_TOK | F_ARG | F_ARG2, P_TOKENS, false, false, op_prefetch },
	[KVMM_OP_KPREFETCH]	= { F_TOK | F_ARG | F_ARG2, P_OWN, false, false, op_kprefetch },
};
_Static_assert(sizeof(disp_ops) / sizeof(disp_ops[0]) == KVMM_OP_LAST,
	       "every opcode has a struct disp_op");
_Static_assert(KVMM_OP_LAST <= 8 * sizeof(((struct kvmm_probe *)0)->ops),
	       "struct kvmm_probe.ops has a bit for every opcode");

/* PROBE's opcode mask: bit n for each row of disp_ops[] with a handler. */
static void probe_ops(struct kvmm_probe *p)
{
	uint32_t op;

	for (op = 0; op < KVMM_OP_LAST; op++)
		if (disp_ops[op].handler)
			p->ops[op / 64] |= 1ull << (op % 64);
}

/* The opcode's definition, or NULL for a malformed entry (-EINVAL). */
static const struct disp_op *sqe_check_fields(const struct kvmm_sqe *sqe)
{
	const struct disp_op *op;
	uint8_t f;

	if (sqe->opcode >= KVMM_OP_LAST || sqe->flags || sqe->resv0 ||
	    sqe->resv[0] || sqe->resv[1])
		return NULL;
	op = &disp_ops[sqe->opcode];
	if (!op->handler)
		return NULL;
	f = op->fields;
	if ((!(f & F_SEQ) && sqe->seq) || (!(f & F_BUF) && (sqe->buf || sqe->off)) ||
	    (!(f & F_LEN) && sqe->len) || (!(f & F_NS) && sqe->ns) ||
	    (!(f & F_ARG) && sqe->arg) || (!(f & F_ARG2) && sqe->arg2))
		return NULL;
	return op;
}

/*
 * Execute one entry: its fields, the ring's permission, its sequence and
 * its token payload are checked as its struct disp_op says, then its
 * handler runs.  Context lock held.
 */
static int32_t disp_exec_timed(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			       uint32_t *cflags);

/*
 * The command latency histogram (KVMM_HIST_CMD) times every command, and
 * a read of the monotonic clock costs about what a MATCH of a short
 * prefix does (tens of ns in a VM).  So a batch reads the clock twice,
 * at its start and its end (and every DISP_CLOCK_CMDS commands), and each
 * command's own length in between is counted in the TSC's ticks, a few
 * ns a read: the batch's two clock reads say how many ns a tick is, there
 * and then, so nothing has to be calibrated, nor trusted to stay
 * constant for longer than a batch.  The TSC is read only where the
 * kernel's clock is the TSC itself (its clocksource): elsewhere it may be
 * unstable, or a hypervisor may trap every read, and the ticks are the
 * clock's own ns.
 */
#define DISP_CLOCK_CMDS	64
#define DISP_CLOCKSOURCE	"/sys/devices/system/clocksource/clocksource0/current_clocksource"

static pthread_once_t disp_tsc_once = PTHREAD_ONCE_INIT;
static bool disp_tsc;	/* set once, before any reader (pthread_once) */

static void disp_tsc_probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
	char cs[8] = "";
	int fd = open(DISP_CLOCKSOURCE, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	disp_tsc = read(fd, cs, sizeof(cs)) == 4 && !memcmp(cs, "tsc\n", 4);
	close(fd);
#endif
}

static inline uint64_t disp_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (disp_tsc)
		return __builtin_ia32_rdtsc();
#endif
	return kvmm_now_ns();
}

/*
 * struct disp_clock - the commands of a batch timed, not yet observed
 * @ns, @tick: kvmm_now_ns() and disp_ticks() where their span starts
 * @last: disp_ticks() when the last command ended
 * @nr: commands timed in @ticks
 */
struct disp_clock {
	uint64_t ns, tick, last;
	uint32_t nr;
	uint64_t ticks[DISP_CLOCK_CMDS];
};

static void disp_clock_start(struct disp_clock *c)
{
	pthread_once(&disp_tsc_once, disp_tsc_probe);
	c->ns = kvmm_now_ns();
	c->tick = c->last = disp_ticks();
	c->nr = 0;
}

/* Observe the commands timed since @c started, in ns; @c starts again. */
static void disp_clock_flush(struct kvmm_disp *d, struct disp_clock *c)
{
	uint64_t ns = kvmm_now_ns(), tick = disp_ticks();
	double per_tick = tick > c->tick ? (double)(ns - c->ns) / (double)(tick - c->tick) : 0;
	uint32_t i;

	for (i = 0; i < c->nr; i++)
		kvmm_hist_observe(d->ctx, KVMM_HIST_CMD, (uint64_t)((double)c->ticks[i] * per_tick));
	c->ns = ns;
	c->tick = c->last = tick;
	c->nr = 0;
}

/*
 * disp_exec_timed(), its length counted in @c.  A DUMP shows the
 * histogram with the batch's commands before it, as if each had been
 * observed as it ended.
 */
static int32_t disp_exec(struct kvmm_disp *d, const struct kvmm_sqe *sqe, uint32_t *cflags,
			 struct disp_clock *c)
{
	uint64_t now;
	int32_t res;

	if (sqe->opcode == KVMM_OP_DUMP && c->nr)
		disp_clock_flush(d, c);
	res = disp_exec_timed(d, sqe, cflags);
	now = disp_ticks();

	/* a TSC that went back (another CPU's, not in step): nothing */
	c->ticks[c->nr++] = now > c->last ? now - c->last : 0;
	c->last = now;
	if (c->nr == DISP_CLOCK_CMDS)
		disp_clock_flush(d, c);
	return res;
}

static int32_t disp_exec_timed(struct kvmm_disp *d, const struct kvmm_sqe *sqe,
			       uint32_t *cflags)
{
	const struct disp_op *op = sqe_check_fields(sqe);
	const uint32_t *tok = NULL;

	if (!op)
		return -EINVAL;
	if (d->ns_bound && (op->admin || ((op->fields & F_NS) && sqe->ns != d->ns)))
		return -EPERM;
	if (op->own_seq) {
		int ret = seq_mine(d, sqe->seq);

		if (ret)
			return ret;
	}
	if (op->payload == P_TOKENS) {
		if (sqe->len) {
			tok = payload(d, sqe, (uint64_t)sqe->len * sizeof(*tok));
			if (!tok)
				return -EFAULT;
		} else if (sqe->buf || sqe->off) {
			return -EINVAL;
		}
	}
	return op->handler(d, sqe, tok, cflags);
}

/* Drop everything @d holds; ctx->lock held. */
static void disp_release(struct kvmm_disp *d)
{
	struct kvmm_ctx *ctx = d->ctx;

	kvmm_owner_del(ctx, &d->owner);
	kvmm_mfree(ctx, d->scratch, d->scratch_bytes);
	kvmm_mfree(ctx, d, sizeof(*d));
}

/* kvmm_destroy(): a ring still attached loses its dispatcher. */
static void disp_owner_release(struct kvmm_owner *o)
{
	disp_release(container_of(o, struct kvmm_disp, owner));
}

static void disp_complete(struct kvmm_owner *o, uint64_t user_data, int32_t res);

static const struct kvmm_owner_ops disp_owner_ops = {
	.complete = disp_complete,
	.release = disp_owner_release,
};

/**
 * kvmm_disp_create() - a dispatcher for a new ring on @ctx
 * @ctx: the context
 * @untrusted: the ring's memory is shared with another process: copy
 *	batch lists before reading them
 * @dp: out
 *
 * Context: takes ctx->lock.
 * Return: 0, or -ENOMEM.
 */
int kvmm_disp_create(struct kvmm_ctx *ctx, bool untrusted, struct kvmm_disp **dp)
{
	size_t scratch = 0;
	struct kvmm_disp *d;

	if (untrusted)
		scratch = (size_t)ctx->max_seqs * sizeof(struct kvmm_extend_ent);
	pthread_mutex_lock(&ctx->lock);
	d = kvmm_zalloc(ctx, sizeof(*d));
	if (d && scratch) {
		d->scratch = kvmm_malloc(ctx, scratch);
		if (!d->scratch) {
			kvmm_mfree(ctx, d, sizeof(*d));
			d = NULL;
		}
		d->scratch_bytes = scratch;
	}
	if (d) {
		d->ctx = ctx;
		kvmm_owner_add(ctx, &d->owner, &disp_owner_ops);
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!d)
		return -ENOMEM;
	*dp = d;
	return 0;
}

/**
 * kvmm_disp_destroy() - release a ring's sequences and pins, then itself
 * @d: the dispatcher, or NULL
 *
 * What a client that went away held is given back here: its sequences
 * are closed without commit (their committed pages stay cached) and its
 * pins dropped.
 *
 * Context: takes ctx->lock.
 */
void kvmm_disp_destroy(struct kvmm_disp *d)
{
	struct kvmm_ctx *ctx;

	if (!d)
		return;
	ctx = d->ctx;
	pthread_mutex_lock(&ctx->lock);
	/* the I/O worker may still be writing values into the ring's memory */
	while (kvmm_keyed_pending(ctx, &d->owner))
		pthread_cond_wait(&ctx->kjobs_done, &ctx->lock);
	disp_release(d);
	kvmm_debug_check(ctx, "ring release");
	pthread_mutex_unlock(&ctx->lock);
}

uint32_t kvmm_disp_id(const struct kvmm_disp *d)
{
	return d->owner.id;
}

/**
 * kvmm_disp_bind_ns() - confine a ring to one namespace, for good
 * @d: the dispatcher
 * @ns: the namespace
 */
void kvmm_disp_bind_ns(struct kvmm_disp *d, uint32_t ns)
{
	d->ns_bound = true;
	d->ns = ns;
}

/**
 * kvmm_disp_set_buf() - register buffer @index of the ring
 * @d: the dispatcher
 * @index: 0 .. KVMM_RING_MAX_BUFS - 1
 * @base: its memory as the dispatcher sees it
 * @len: its size in bytes
 *
 * Return: 0, or -EINVAL.
 */
int kvmm_disp_set_buf(struct kvmm_disp *d, uint32_t index, void *base, uint64_t len)
{
	if (index >= KVMM_RING_MAX_BUFS || (!base && len))
		return -EINVAL;
	d->bufs[index].base = base;
	d->bufs[index].len = len;
	return 0;
}

/**
 * kvmm_disp_replace_bufs() - register buffers 1 .. @nr of the ring anew
 * @d: the dispatcher
 * @iov: the new buffers; iov[i] becomes buffer i + 1, the rest none
 * @nr: how many, below KVMM_RING_MAX_BUFS
 *
 * The buffers replaced may still be in use: a KGET the I/O worker reads
 * from NVMe writes into its buffer, and a KPUT reads its values from
 * one, after the command was taken.  Wait until the ring has no such job
 * in flight, so that the caller may free the old memory once this
 * returns, and swap the set under the lock the dispatcher reads it under.
 *
 * Context: takes ctx->lock; sleeps while the ring's keyed jobs run.
 */
void kvmm_disp_replace_bufs(struct kvmm_disp *d, const struct kvmm_iovec *iov, uint32_t nr)
{
	struct kvmm_ctx *ctx = d->ctx;
	uint32_t i;

	pthread_mutex_lock(&ctx->lock);
	while (kvmm_keyed_pending(ctx, &d->owner))
		pthread_cond_wait(&ctx->kjobs_done, &ctx->lock);
	for (i = 1; i < KVMM_RING_MAX_BUFS; i++) {
		d->bufs[i].base = i <= nr ? iov[i - 1].base : NULL;
		d->bufs[i].len = i <= nr ? iov[i - 1].len : 0;
	}
	pthread_mutex_unlock(&ctx->lock);
}

/**
 * kvmm_disp_attach() - give the dispatcher its ring
 * @d: the dispatcher
 * @hdr: the ring region's header
 * @sqes: its SQE array, @sq_entries of them (a power of two)
 * @cqes: its CQE array, @cq_entries of them (a power of two)
 *
 * The layout is the creator's (ipc/), passed here rather than read from
 * the header, which the other side may rewrite.
 */
void kvmm_disp_attach(struct kvmm_disp *d, struct kvmm_ring_hdr *hdr,
		      struct kvmm_sqe *sqes, uint32_t sq_entries,
		      struct kvmm_cqe *cqes, uint32_t cq_entries)
{
	d->hdr = hdr;
	d->sqes = sqes;
	d->cqes = cqes;
	d->sq_mask = sq_entries - 1;
	d->cq_mask = cq_entries - 1;
	d->sq_head = 0;
	d->cq_tail = 0;
}

/**
 * kvmm_disp_pending() - does the SQ hold entries the dispatcher has not taken
 * @d: the dispatcher
 */
bool kvmm_disp_pending(const struct kvmm_disp *d)
{
	/* Pairs with the client's release store of sq_tail. */
	return __atomic_load_n(&d->hdr->sq_tail, __ATOMIC_ACQUIRE) != d->sq_head;
}

/**
 * kvmm_disp_process() - consume the ring's pending entries
 * @d: the dispatcher
 *
 * Takes at most a ring's worth, and no more than the CQ has room for.
 *
 * Context: takes ctx->lock once for the batch.
 * Return: entries consumed.
 */
uint32_t kvmm_disp_process(struct kvmm_disp *d)
{
	struct kvmm_ring_hdr *hdr = d->hdr;
	uint32_t tail, cq_head, n, room, i;
	struct disp_clock clock;

	/* Pairs with the client's release stores of sq_tail and cq_head. */
	tail = __atomic_load_n(&hdr->sq_tail, __ATOMIC_ACQUIRE);
	cq_head = __atomic_load_n(&hdr->cq_head, __ATOMIC_ACQUIRE);
	n = tail - d->sq_head;
	if (n > d->sq_mask + 1)
		n = d->sq_mask + 1;	/* a tail that ran ahead: one ring at most */
	if (!n)
		return 0;

	/*
	 * Across processes the entries were just written on the client's
	 * core: start all their cache misses now, so that they overlap
	 * instead of coming one per command.
	 */
	for (i = 0; i < n; i++)
		__builtin_prefetch(&d->sqes[(d->sq_head + i) & d->sq_mask]);
	pthread_mutex_lock(&d->ctx->lock);
	kvmm_migrate_reap(d->ctx);	/* a batch sees what writeback finished */
	/* Every command completes once, now or later: room for both. */
	room = d->cq_mask + 1 - (d->cq_tail - cq_head);
	if (room > d->cq_mask + 1)
		room = 0;		/* a head that ran ahead: the CQ looks full */
	room = room > d->deferred ? room - d->deferred : 0;
	if (n > room)
		n = room;
	disp_clock_start(&clock);
	for (i = 0; i < n; i++) {
		struct kvmm_sqe sqe;
		struct kvmm_cqe *cqe;
		uint32_t cflags = 0;
		int32_t res;

		memcpy(&sqe, &d->sqes[(d->sq_head + i) & d->sq_mask], sizeof(sqe));
		res = disp_exec(d, &sqe, &cflags, &clock);
		/* the client's poll sees the batch move (a line it reads rarely) */
		__atomic_store_n(&hdr->sq_done, d->sq_head + i + 1, __ATOMIC_RELAXED);
		if (res == RES_DEFERRED) {
			__atomic_store_n(&d->deferred, d->deferred + 1, __ATOMIC_RELAXED);
			continue;
		}
		/* after the command: a keyed copy drops the lock, and a deferred
		 * completion may have taken the slot meanwhile */
		cqe = &d->cqes[d->cq_tail & d->cq_mask];
		cqe->user_data = sqe.user_data;
		cqe->res = res;
		cqe->flags = cflags;
		d->cq_tail++;
	}
	d->sq_head += n;
	/*
	 * Free the slots before the completions show, io_uring's order: a
	 * client that reaped every completion of a full SQ and refills at
	 * once must find kvmm_get_sqe() non-NULL.  The sq_head store pairs
	 * with the acquire load in kvmm_get_sqe(); the cq_tail store, which
	 * the client's acquire load of cq_tail orders after it, pairs with
	 * kvmm_peek_cqe() and the CQ waiters.
	 */
	__atomic_store_n(&hdr->sq_head, d->sq_head, __ATOMIC_RELEASE);
	__atomic_store_n(&hdr->cq_tail, d->cq_tail, __ATOMIC_RELEASE);
	if (clock.nr)	/* after the completions show: the client need not wait */
		disp_clock_flush(d, &clock);
	pthread_mutex_unlock(&d->ctx->lock);
	return n;
}

/*
 * The core's callback (struct kvmm_owner_ops) posting the completion of a
 * command @o's ring deferred; the CQ kept room for it when the command
 * was taken.  ctx->lock held.
 */
static void disp_complete(struct kvmm_owner *o, uint64_t user_data, int32_t res)
{
	struct kvmm_disp *d = container_of(o, struct kvmm_disp, owner);
	struct kvmm_cqe *cqe = &d->cqes[d->cq_tail & d->cq_mask];

	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = 0;
	d->cq_tail++;
	__atomic_store_n(&d->deferred, d->deferred - 1, __ATOMIC_RELAXED);
	/* Pairs with the client's acquire load of cq_tail. */
	__atomic_store_n(&d->hdr->cq_tail, d->cq_tail, __ATOMIC_RELEASE);
	if (d->notify)
		d->notify(d->notify_arg);
}

/**
 * kvmm_disp_deferred() - commands of the ring whose completion is still due
 * @d: the dispatcher
 */
uint32_t kvmm_disp_deferred(const struct kvmm_disp *d)
{
	return __atomic_load_n(&d->deferred, __ATOMIC_RELAXED);
}

/**
 * kvmm_disp_set_notify() - say how to wake the client after a deferred
 *	completion
 * @d: the dispatcher
 * @fn: called with @arg, under ctx->lock, from whichever thread posts it
 * @arg: its argument
 */
void kvmm_disp_set_notify(struct kvmm_disp *d, void (*fn)(void *arg), void *arg)
{
	d->notify = fn;
	d->notify_arg = arg;
}

/**
 * kvmm_ioctl() - one command, synchronously, without a ring
 * @ctx: the context
 * @sqe: the command, as it would be submitted
 * @bufs: buffers the command's (buf, off) refer to
 * @nr_bufs: how many, at most KVMM_RING_MAX_BUFS
 *
 * Sequences it opens belong to the direct API (owner 0); pins it takes
 * belong to nobody, as if KVMM_PIN_KEEP were given.  The cqe flags are
 * not returned; DUMP's header says whether more follows.
 *
 * Context: takes ctx->lock.
 * Return: the completion's res.
 */
KVMM_EXPORT int kvmm_ioctl(struct kvmm_ctx *ctx, const struct kvmm_sqe *sqe,
			   const struct kvmm_iovec *bufs, uint32_t nr_bufs)
{
	struct kvmm_disp d = { .ctx = ctx, .keep_only = true };
	struct kvmm_sqe copy;
	struct disp_clock clock;
	uint32_t cflags = 0, i;
	int32_t res;

	if (!ctx || !sqe || nr_bufs > KVMM_RING_MAX_BUFS || (nr_bufs && !bufs))
		return -EINVAL;
	for (i = 0; i < nr_bufs; i++)
		d.bufs[i] = bufs[i];
	memcpy(&copy, sqe, sizeof(copy));
	pthread_mutex_lock(&ctx->lock);
	disp_clock_start(&clock);
	res = disp_exec(&d, &copy, &cflags, &clock);
	disp_clock_flush(&d, &clock);
	pthread_mutex_unlock(&ctx->lock);
	return res;
}

/**
 * kvmm_lock() - serialise with rings served by other threads
 * @ctx: the context
 *
 * An engine that drives a context through the direct API while a server
 * thread (kvmm_server_start()) serves rings on it must hold this around
 * its calls; the rings take it once per batch.
 */
KVMM_EXPORT void kvmm_lock(struct kvmm_ctx *ctx)
{
	pthread_mutex_lock(&ctx->lock);
}

KVMM_EXPORT void kvmm_unlock(struct kvmm_ctx *ctx)
{
	pthread_mutex_unlock(&ctx->lock);
}
