// SPDX-License-Identifier: MIT
/*
 * kvmm/seq.c - sequences and their page tables (SGLang's
 * req_to_token_pool, vLLM's block tables).
 *
 * DOC: sequences
 *
 * The page table is one dense int32 array of max_seqs rows; the direct
 * API's sequence id is its row.  Each open of a row counts a generation,
 * and the ring names a sequence by KVMM_SEQ_ID(row, generation), so that
 * an id an engine kept past its CLOSE cannot reach the row's next
 * sequence; every entry point here takes either form (a bare row is not
 * checked, a generation must be the row's current one).  Entry i of a row is the frame of the sequence's page i, -1
 * where none is mapped, so attention kernels read slot indices straight
 * out of it.  A row has two parts:
 *
 *   [0, cached / page_size)            frames of the tree path the sequence
 *                                      locks (shared, CACHED)
 *   [cached / page_size, pages(len))   frames private to the sequence (OWNED),
 *                                      the last one possibly partly filled
 *
 * MATCH fills the first part from the tree and locks the path; EXTEND
 * appends private frames; COMMIT moves whole private pages into the tree
 * (or swaps them for frames another sequence inserted meanwhile) and moves
 * the lock down to the new end of the path.  The tree only indexes: COMMIT
 * then calls the tier layer itself, so that nodes of the path on a lower
 * tier adopt the recomputed frames and, under write-through, the path
 * gets its host copy (seq -> tree, then seq -> tier).  CLOSE commits,
 * unlocks and frees the private frames; RETRACT does the same but keeps
 * the sequence open and empty, so a preempted request can match again
 * later.
 *
 * Every entry point validates all of its arguments before it changes
 * anything, and allocates what it needs before it changes anything, so a
 * call that fails leaves the context as it was.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define SEQ_NONE	UINT32_MAX

_Static_assert(KVMM_MAX_SEQS - 1 <= KVMM_SEQ_ROW_MASK, "a row fits a sequence id");
_Static_assert(KVMM_SEQ_GEN_MAX <= UINT16_MAX, "struct kvmm_seq.gen holds a generation");

int kvmm_seqs_init(struct kvmm_ctx *ctx)
{
	const struct kvmm_params *p = &ctx->params;
	uint64_t row_pages = ((uint64_t)p->max_seq_len + p->page_size - 1) >>
			     ctx->page_shift;
	size_t entries = (size_t)row_pages * p->max_seqs;
	uint32_t i;

	ctx->seqs = kvmm_zalloc(ctx, (size_t)p->max_seqs * sizeof(*ctx->seqs));
	if (!ctx->seqs)
		return -ENOMEM;
	ctx->table = kvmm_malloc(ctx, entries * sizeof(*ctx->table));
	if (!ctx->table) {
		kvmm_mfree(ctx, ctx->seqs, (size_t)p->max_seqs * sizeof(*ctx->seqs));
		ctx->seqs = NULL;
		return -ENOMEM;
	}
	memset(ctx->table, 0xff, entries * sizeof(*ctx->table));
	ctx->max_seqs = p->max_seqs;
	ctx->row_pages = (uint32_t)row_pages;
	/* Low ids first, so a light load keeps the hot rows together. */
	for (i = 0; i < p->max_seqs; i++)
		ctx->seqs[i].next_free = i + 1 < p->max_seqs ? i + 1 : SEQ_NONE;
	ctx->free_seq = 0;
	return 0;
}

void kvmm_seqs_exit(struct kvmm_ctx *ctx)
{
	if (!ctx->seqs)
		return;
	kvmm_mfree(ctx, ctx->table,
		   (size_t)ctx->row_pages * ctx->max_seqs * sizeof(*ctx->table));
	kvmm_mfree(ctx, ctx->seqs, (size_t)ctx->max_seqs * sizeof(*ctx->seqs));
	ctx->seqs = NULL;
}

/*
 * Say through the log hook why the embedder's own call refused (-EINVAL):
 * the field and the rule.  The ring's commands stay quiet (they call the
 * __kvmm_seq_*() forms), so that a client cannot fill a server's log.
 */
static int __attribute__((format(printf, 2, 3)))
seq_refuse(const struct kvmm_ctx *ctx, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	kvmm_report(ctx, "%s", msg);
	return -EINVAL;
}

/* -EINVAL for @call on @seq, which is not an open sequence. */
static int seq_refuse_closed(const struct kvmm_ctx *ctx, const char *call, uint32_t seq)
{
	if (KVMM_SEQ_ROW(seq) >= ctx->max_seqs)
		return seq_refuse(ctx, "%s: seq %u is not a sequence id (row 0..%u)", call, seq,
				  ctx->max_seqs - 1);
	return seq_refuse(ctx, "%s: seq %u is not open (closed, never opened, or its row "
			  "since reopened)", call, seq);
}

/*
 * The open sequence @seq (a bare row, or a ring's id whose generation is
 * the row's), or NULL for a bad, closed or stale one.
 */
struct kvmm_seq *kvmm_seq_lookup(const struct kvmm_ctx *ctx, uint32_t seq)
{
	uint32_t row = KVMM_SEQ_ROW(seq), gen = KVMM_SEQ_GEN(seq);
	struct kvmm_seq *s;

	if (!ctx || row >= ctx->max_seqs)
		return NULL;
	s = &ctx->seqs[row];
	if (!s->open || (gen && gen != s->gen))
		return NULL;
	return s;
}

/**
 * kvmm_seq_open() - open a sequence: take a page-table row
 * @ctx: the context
 * @ns: namespace the sequence shares prefixes in
 * @seqp: out, the sequence id (its row)
 *
 * Return: 0; -EINVAL for a NULL argument; -EBUSY when every row is in use;
 * -ENOMEM when a new namespace root cannot be allocated.
 */
KVMM_EXPORT int kvmm_seq_open(struct kvmm_ctx *ctx, uint32_t ns, uint32_t *seqp)
{
	struct kvmm_node *root;
	struct kvmm_seq *s;
	uint32_t id;

	if (!ctx || !seqp)
		return -EINVAL;
	if (ctx->params.frames == KVMM_FRAMES_ENGINE)
		return -EOPNOTSUPP;	/* kvmm allocates no frame in this mode */
	if (ctx->free_seq == SEQ_NONE)
		return -EBUSY;
	root = kvmm_tree_root(ctx, ns, true);
	if (!root)
		return -ENOMEM;
	id = ctx->free_seq;
	s = &ctx->seqs[id];
	ctx->free_seq = s->next_free;
	*s = (struct kvmm_seq){ .root = root, .node = root, .ns = ns, .open = true,
				.gen = s->gen % KVMM_SEQ_GEN_MAX + 1 };
	ctx->nr_open++;
	*seqp = id;
	kvmm_debug_check(ctx, "seq_open");
	return 0;
}

/**
 * kvmm_seq_match() - reuse the longest cached prefix of @tokens
 * @ctx: the context
 * @seq: an open sequence with nothing in it yet
 * @tokens: the prompt (engines pass all but its last token, which they
 *	always recompute)
 * @n: tokens, at least 1
 *
 * The matched frames are copied into the row and the path is locked until
 * the sequence commits past it, retracts or closes.  Only whole pages
 * match.
 *
 * Return: matched tokens (page aligned, possibly 0); -EINVAL for a bad
 * sequence, a sequence that already holds tokens, a NULL or empty key or
 * one longer than max_seq_len; -EBUSY while a promotion of the sequence
 * is in flight; -ENOMEM when the split the match needs cannot be
 * allocated.
 */
KVMM_EXPORT int kvmm_seq_match(struct kvmm_ctx *ctx, uint32_t seq,
			       const uint32_t *tokens, uint32_t n)
{
	int ret = __kvmm_seq_match(ctx, seq, tokens, n, NULL);
	struct kvmm_seq *s;

	if (ret != -EINVAL || !ctx)
		return ret;
	s = kvmm_seq_lookup(ctx, seq);
	if (!s)
		return seq_refuse_closed(ctx, "match", seq);
	if (s->len)
		return seq_refuse(ctx, "match: seq %u holds %u tokens already: match an empty "
				  "sequence (after open or retract)", seq, s->len);
	if (!tokens || !n)
		return seq_refuse(ctx, "match: n = 0: the key needs at least one token");
	return seq_refuse(ctx, "match: n = %u is above max_seq_len %u", n,
			  ctx->params.max_seq_len);
}

/*
 * kvmm_seq_match(), also saying in *@below (when not NULL) how many
 * tokens of the prefix go on below the device: the ring's CQE_F_LOWER.
 */
int __kvmm_seq_match(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		     uint32_t n, uint32_t *below)
{
	struct kvmm_seq *s = kvmm_seq_lookup(ctx, seq);
	uint32_t tiers[KVMM_NR_TIERS], t;
	struct kvmm_path path;
	int ret;

	if (s && s->promo)
		return -EBUSY;
	if (!s || s->len || !tokens || !n || n > ctx->params.max_seq_len)
		return -EINVAL;
	kvmm_migrate_reap(ctx);	/* what was written down is found there */
	kvmm_tree_walk(ctx, s->root, tokens, n, &path);
	if (unlikely(ctx->orphans) && kvmm_orphans_adopt(ctx, s->root, tokens, n, &path))
		kvmm_tree_walk(ctx, s->root, tokens, n, &path);	/* on into them */
	kvmm_path_tiers(s->root, &path, tiers);
	kvmm_path_clip(&path);
	if (path.split && (path.node->flags & KVMM_NODE_IO)) {
		/* background reclaim is moving it down: match up to it, not into it */
		path.matched -= path.split;
		path.split = 0;
		path.node = path.node->parent;
	}
	ret = kvmm_tree_split(ctx, &path);
	if (ret)
		return ret;
	if (path.matched) {
		kvmm_tree_touch(ctx, path.node);
		kvmm_tree_lock(ctx, path.node);
		kvmm_tree_fill(ctx, s->root, path.node, kvmm_row(ctx, seq));
		if (unlikely(ctx->prefetched))
			kvmm_prefetch_hit(ctx, s->root, path.node);
	}
	s->node = path.node;
	s->len = s->cached = path.matched;
	kvmm_count(ctx, EV_MATCH_CALLS, 1);
	kvmm_count(ctx, EV_MATCH_TOKENS, n);
	kvmm_count(ctx, EV_HIT_TOKENS, path.matched);
	for (t = KVMM_TIER_HOST; t < KVMM_NR_TIERS; t++)
		kvmm_tier_count(ctx, t, TEV_OFFER_TOKENS, tiers[t]);
	if (below)
		*below = tiers[KVMM_TIER_HOST] + tiers[KVMM_TIER_NVME];
	kvmm_debug_check(ctx, "seq_match");
	return (int)path.matched;
}

/*
 * The batch extend behind both public forms and the ring's EXTEND: entry
 * i is seqs[i * stride] / ns[i * stride], so the ring can pass its
 * interleaved struct kvmm_extend_ent array without copying it.
 */
int __kvmm_seq_extend(struct kvmm_ctx *ctx, const uint32_t *seqs, const uint32_t *ns,
		      size_t stride, uint32_t count, uint32_t flags)
{
	uint64_t total = 0;
	uint32_t i, stamp;
	int ret;

	if (!ctx || !seqs || !ns || !count || (flags & ~KVMM_EXTEND_FLAGS))
		return -EINVAL;
	stamp = ++ctx->batch;
	for (i = 0; i < count; i++) {
		struct kvmm_seq *s = kvmm_seq_lookup(ctx, seqs[i * stride]);
		uint32_t n = ns[i * stride];

		/* The stamps a refused batch leaves behind are harmless. */
		if (!s || s->mark == stamp || !n || n > ctx->params.max_seq_len - s->len)
			return -EINVAL;
		if (s->promo)
			return -EBUSY;
		s->mark = stamp;
		total += kvmm_pages_of(ctx, s->len + n) - kvmm_pages_of(ctx, s->len);
	}
	if (ctx->writeback[KVMM_TIER_DEVICE] && ctx->zone[KVMM_TIER_DEVICE].nr_free < total)
		kvmm_migrate_reap(ctx);	/* device frames background reclaim freed */
	ret = kvmm_zone_reserve(ctx, &ctx->zone[KVMM_TIER_DEVICE], total, flags);
	if (ret)
		return ret;
	for (i = 0; i < count; i++) {
		uint32_t id = seqs[i * stride];
		struct kvmm_seq *s = &ctx->seqs[KVMM_SEQ_ROW(id)];
		uint32_t have = kvmm_pages_of(ctx, s->len);
		uint32_t need = kvmm_pages_of(ctx, s->len + ns[i * stride]);

		__kvmm_alloc_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], need - have, kvmm_row(ctx, id) + have);
		s->len += ns[i * stride];
	}
	kvmm_writeback_tier(ctx, KVMM_TIER_DEVICE);	/* below low: demote ahead */
	kvmm_debug_check(ctx, "seq_extend");
	return 0;
}

/**
 * kvmm_seq_extend_batch() - allocate KV for more tokens of several sequences
 * @ctx: the context
 * @seqs: open sequences, each at most once
 * @ns: tokens to add to each, at least 1
 * @count: entries, at least 1
 * @flags: KVMM_EXTEND_RESERVE, KVMM_EXTEND_NORECLAIM
 *
 * All or nothing: either every sequence gets its frames or none does.  A
 * decode step passes its whole batch with ns[i] = 1.  Frames go to the
 * end of each row; the first of them may complete a partly filled page,
 * which takes no frame.
 *
 * Return: 0; -EINVAL for a bad, closed or repeated sequence, a zero count
 * or a length past max_seq_len, or unknown flags; -EBUSY for a sequence
 * whose promotion is in flight; -ENOSPC when the pool cannot hold the
 * batch even after reclaim (nothing evicted then).
 */
KVMM_EXPORT int kvmm_seq_extend_batch(struct kvmm_ctx *ctx, const uint32_t *seqs,
				      const uint32_t *ns, uint32_t count,
				      uint32_t flags)
{
	int ret = __kvmm_seq_extend(ctx, seqs, ns, 1, count, flags);
	uint32_t i, stamp;

	if (ret != -EINVAL || !ctx || !seqs || !ns)
		return ret;
	if (flags & ~KVMM_EXTEND_FLAGS)
		return seq_refuse(ctx, "extend: flags %#x: only KVMM_EXTEND_RESERVE and "
				  "KVMM_EXTEND_NORECLAIM", flags);
	if (!count)
		return seq_refuse(ctx, "extend: count 0: at least one sequence");
	stamp = ++ctx->batch;	/* the refused batch's walk again, saying where */
	for (i = 0; i < count; i++) {
		struct kvmm_seq *s = kvmm_seq_lookup(ctx, seqs[i]);

		if (!s)
			return seq_refuse_closed(ctx, "extend", seqs[i]);
		if (s->mark == stamp)
			return seq_refuse(ctx, "extend: seq %u is named twice in one batch",
					  seqs[i]);
		if (!ns[i])
			return seq_refuse(ctx, "extend: seq %u: n = 0: at least one token",
					  seqs[i]);
		if (ns[i] > ctx->params.max_seq_len - s->len)
			return seq_refuse(ctx, "extend: seq %u: its %u tokens + n %u are above "
					  "max_seq_len %u", seqs[i], s->len, ns[i],
					  ctx->params.max_seq_len);
		s->mark = stamp;
	}
	return ret;
}

/**
 * kvmm_seq_extend() - allocate KV for @n more tokens of one sequence
 * @ctx: the context
 * @seq: an open sequence
 * @n: tokens, at least 1
 * @flags: as for kvmm_seq_extend_batch()
 *
 * Return: as kvmm_seq_extend_batch().
 */
KVMM_EXPORT int kvmm_seq_extend(struct kvmm_ctx *ctx, uint32_t seq, uint32_t n,
				uint32_t flags)
{
	return kvmm_seq_extend_batch(ctx, &seq, &n, 1, flags);
}

/*
 * The tokens of the matched part of @ins were in the tree before this
 * commit, and the sequence computed them again into @pfns: the nodes of
 * that path on a lower tier take those frames (kvmm_tier_adopt()), and
 * the frames of the nodes that were on the device all along are
 * duplicates: freed, the row pointing at the shared ones (SGLang frees
 * kv_indices[prefix:new_prefix]).
 */
static void seq_share_prefix(struct kvmm_ctx *ctx, struct kvmm_node *from,
			     const struct kvmm_insert *ins, int32_t *pfns)
{
	uint32_t dup = kvmm_tier_adopt(ctx, from, ins->match, pfns,
				       ins->matched >> ctx->page_shift);

	if (!dup)
		return;
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], pfns, dup);
	kvmm_tree_fill(ctx, from, ins->match, pfns);
	kvmm_count(ctx, EV_DEDUP_PAGES, dup);
}

/*
 * Insert the sequence's whole computed pages past its cached prefix into
 * the tree (which only indexes them), then settle the pages the tree
 * already had (seq_share_prefix()), stamp the path and queue its end for
 * reclaim, give it a host copy under write-through, and move the
 * sequence's lock down to the new end.
 */
static int __seq_commit(struct kvmm_ctx *ctx, uint32_t seq, struct kvmm_seq *s,
			const uint32_t *tokens, uint32_t n)
{
	int32_t *pfns = kvmm_row(ctx, seq) + (s->cached >> ctx->page_shift);
	struct kvmm_insert ins;
	int ret;

	n = kvmm_align_down(ctx, n);
	if (n <= s->cached) {	/* nothing new; a write-through that failed is retried */
		if (s->node != s->root)
			kvmm_remote_write_through(ctx, s->node);
		return 0;
	}
	ret = kvmm_tree_insert(ctx, s->node, tokens + s->cached, n - s->cached,
			       pfns, &ins);
	if (ret <= 0)
		return ret;
	seq_share_prefix(ctx, s->node, &ins, pfns);
	kvmm_tree_touch(ctx, ins.end);
	kvmm_lru_update(ctx, ins.end);
	kvmm_write_through(ctx, s->node, ins.end);
	kvmm_tree_lock(ctx, ins.end);
	if (s->node != s->root)
		kvmm_tree_unlock(ctx, s->node);
	s->node = ins.end;
	s->cached += (uint32_t)ret;
	kvmm_remote_write_through(ctx, ins.end);
	return 0;
}

static bool commit_args_ok(const struct kvmm_seq *s, const uint32_t *tokens,
			   uint32_t n)
{
	return s && tokens && n && n <= s->len;
}

/**
 * kvmm_seq_commit() - make a sequence's computed tokens shareable
 * @ctx: the context
 * @seq: an open sequence
 * @tokens: all of the sequence's tokens from its start
 * @n: how many have their KV computed, at most the sequence's length
 *
 * Whole pages of tokens[cached..n) go into the tree; a trailing partial
 * page stays private.  Chunked prefill calls this after every chunk
 * (SGLang's cache_unfinished_req).  Pages that another sequence inserted
 * meanwhile are freed and the row points at the shared copies.
 *
 * Tokens whose node a promotion is reading up just now stay private (the
 * commit stops before them), as does everything after them.
 *
 * Return: tokens now cached for the sequence; -EINVAL for a bad sequence,
 * a NULL or empty key, or @n past the sequence's length; -EBUSY while a
 * promotion of the sequence is in flight; -ENOMEM.
 */
KVMM_EXPORT int kvmm_seq_commit(struct kvmm_ctx *ctx, uint32_t seq,
				const uint32_t *tokens, uint32_t n)
{
	int ret = __kvmm_seq_commit(ctx, seq, tokens, n);
	struct kvmm_seq *s;

	if (ret != -EINVAL || !ctx)
		return ret;
	s = kvmm_seq_lookup(ctx, seq);
	if (!s)
		return seq_refuse_closed(ctx, "commit", seq);
	if (!tokens || !n)
		return seq_refuse(ctx, "commit: n = 0: commit at least one token");
	return seq_refuse(ctx, "commit: n = %u is past seq %u's %u tokens: extend them "
			  "first", n, seq, s->len);
}

/* kvmm_seq_commit() without the log line: the ring's COMMIT. */
int __kvmm_seq_commit(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		      uint32_t n)
{
	struct kvmm_seq *s = kvmm_seq_lookup(ctx, seq);
	int ret;

	if (s && s->promo)
		return -EBUSY;
	if (!commit_args_ok(s, tokens, n))
		return -EINVAL;
	ret = __seq_commit(ctx, seq, s, tokens, n);
	if (ret)
		return ret;
	kvmm_debug_check(ctx, "seq_commit");
	return (int)s->cached;
}

/* Unlock the path and free the private frames; the row is left empty. */
static void seq_release(struct kvmm_ctx *ctx, uint32_t seq, struct kvmm_seq *s)
{
	int32_t *row = kvmm_row(ctx, seq);
	uint32_t shared = s->cached >> ctx->page_shift;
	uint32_t mapped = kvmm_pages_of(ctx, s->len);

	if (s->node != s->root)
		kvmm_tree_unlock(ctx, s->node);
	kvmm_free_pages(ctx, &ctx->zone[KVMM_TIER_DEVICE], row + shared, mapped - shared);
	memset(row, 0xff, (size_t)mapped * sizeof(*row));
	s->node = s->root;
	s->len = s->cached = 0;
}

/*
 * Close and retract share their arguments: @n == 0 (tokens may be NULL)
 * releases without committing.
 */
static int seq_finish(struct kvmm_ctx *ctx, uint32_t seq, const uint32_t *tokens,
		      uint32_t n, struct kvmm_seq **sp)
{
	struct kvmm_seq *s = kvmm_seq_lookup(ctx, seq);
	int ret;

	if (!s || (n && !commit_args_ok(s, tokens, n)))
		return -EINVAL;
	if (n) {
		ret = __seq_commit(ctx, seq, s, tokens, n);
		if (ret)
			return ret;
	}
	if (s->promo)
		kvmm_promo_cancel(ctx, s->promo);
	seq_release(ctx, seq, s);
	*sp = s;
	return 0;
}

/**
 * kvmm_seq_close() - finish a sequence
 * @ctx: the context
 * @seq: an open sequence
 * @tokens: its tokens, or NULL with @n 0
 * @n: tokens with computed KV to commit first (SGLang's
 *	cache_finished_req), or 0 to drop everything private
 *
 * The committed pages stay cached, unlocked, and become evictable.  A
 * promotion of the sequence still in flight is cancelled: it keeps its
 * frames until its I/O is over, then completes with -ECANCELED.
 *
 * Return: 0; -EINVAL for a bad or closed sequence (a double close, or a
 * ring's id of the row's earlier sequence) or bad commit arguments;
 * -ENOMEM from the commit, with the sequence still open.
 */
KVMM_EXPORT int kvmm_seq_close(struct kvmm_ctx *ctx, uint32_t seq,
			       const uint32_t *tokens, uint32_t n)
{
	struct kvmm_seq *s;
	int ret = seq_finish(ctx, seq, tokens, n, &s);

	if (ret)
		return ret;
	s->open = false;
	s->next_free = ctx->free_seq;
	ctx->free_seq = KVMM_SEQ_ROW(seq);
	ctx->nr_open--;
	kvmm_debug_check(ctx, "seq_close");
	return 0;
}

/**
 * kvmm_seq_retract() - give a running sequence's pages back, keep it open
 * @ctx: the context
 * @seq: an open sequence
 * @tokens: its tokens, or NULL with @n 0
 * @n: tokens to commit first so that a retried request hits them, or 0
 *
 * SGLang's retract_decode: the request goes back to the waiting queue and
 * later matches again (the sequence is left empty).
 *
 * Return: as kvmm_seq_close().
 */
KVMM_EXPORT int kvmm_seq_retract(struct kvmm_ctx *ctx, uint32_t seq,
				 const uint32_t *tokens, uint32_t n)
{
	struct kvmm_seq *s;
	int ret = seq_finish(ctx, seq, tokens, n, &s);

	if (ret)
		return ret;
	kvmm_count(ctx, EV_RETRACTS, 1);
	kvmm_debug_check(ctx, "seq_retract");
	return 0;
}

/**
 * kvmm_seq_info() - where a sequence stands
 * @ctx: the context
 * @seq: an open sequence
 * @info: out
 *
 * Return: 0, or -EINVAL for a bad or closed sequence.
 */
KVMM_EXPORT int kvmm_seq_info(const struct kvmm_ctx *ctx, uint32_t seq,
			      struct kvmm_seq_info *info)
{
	const struct kvmm_seq *s = kvmm_seq_lookup(ctx, seq);

	if (!s || !info)
		return -EINVAL;
	info->len = s->len;
	info->cached = s->cached;
	info->ns = s->ns;
	return 0;
}

/**
 * kvmm_seq_table() - the page table, for reading in place
 * @ctx: the context
 * @table: out
 */
KVMM_EXPORT void kvmm_seq_table(const struct kvmm_ctx *ctx, struct kvmm_table *table)
{
	table->base = ctx->table;
	table->stride = ctx->row_pages;
	table->rows = ctx->max_seqs;
}
