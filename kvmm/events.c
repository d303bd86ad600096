// SPDX-License-Identifier: MIT
/*
 * kvmm/events.c - cache events: what enters and leaves the prefix tree
 * and moves between its tiers, told to readers outside.
 *
 * DOC: cache events
 *
 * A KV-aware router (Dynamo, llm-d) sends each request to the engine
 * instance that already holds the longest part of its prompt.  It learns
 * what each instance holds from a stream of events, as vLLM's KV events
 * and SGLang's kv_events give it: pages stored, removed, demoted and
 * promoted, each named by a content key the router can compute from a
 * prompt.  kvmm names a page the way its tiers already do (tier.c,
 * kvmm_tier_keys()): XXH3-128 of the prefix's token ids up to and
 * including the page, seeded with the namespace.  So a router hashes a
 * prompt page by page and looks the keys up in each instance's set.
 *
 * The engine must never wait for a reader.  Events go to a ring of
 * 16-byte slots that keeps the newest and overwrites the oldest, as the
 * kernel's printk buffer: a reader names where it is with a sequence
 * number (its cursor) and one that fell behind is told how many it
 * missed.  An event overwritten before any reader got it is counted as
 * dropped (@ctx->ev_read is how far the fastest reader has come).
 *
 * Cost: nothing but a test while events are off.  On, recording an event
 * allocates nothing and writes O(pages) slots, and naming the pages
 * needs the hash state of the node's prefix from the root (the identity
 * is a chain over the whole prefix).  Events come in runs about one
 * place in the tree: a sequence's commits store a leaf under the leaf
 * its last commit stored, reclaim demotes the leaves of one parent one
 * after the other.  So the buffer keeps the hash state at the end of
 * the last two nodes it named (the node of the last event and that
 * node's parent), by node id, and an event about a child of either
 * starts from there instead of from the root.  A node's id is never
 * reused and the tokens from the root to its end never change while it
 * lives (a split moves the head of its edge into a new parent), so a
 * kept state is right whenever its id matches.
 *
 * A publisher that names pages as another engine does (vLLM hashes
 * each block's token ids chained to its parent's hash) needs the tokens
 * themselves: with KVMM_SET_EVENT_TOKENS the buffer keeps them after each
 * event's keys, four to a slot, and an event is cut at
 * KVMM_EVENT_MAX_TOKENS tokens so that the smallest such buffer still
 * holds any event.
 *
 * All of it is under the context's lock, as the tree.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

/* Slots of an event's header: struct kvmm_cache_event is three keys long. */
#define EV_HDR_SLOTS	(sizeof(struct kvmm_cache_event) / sizeof(struct kvmm_key))
_Static_assert(sizeof(struct kvmm_cache_event) == 48, "kvmm_cache_event is 48 bytes");
/* Token ids a slot holds */
#define EV_TOK_PER_SLOT	(sizeof(struct kvmm_key) / sizeof(uint32_t))
_Static_assert(KVMM_EVENTS_BUF_MIN / sizeof(struct kvmm_key) >=
	       EV_HDR_SLOTS + KVMM_EVENT_MAX_PAGES, "the smallest buffer holds any event");
_Static_assert(KVMM_EVENTS_TOKENS_BUF_MIN / sizeof(struct kvmm_key) >=
	       EV_HDR_SLOTS + KVMM_EVENT_MAX_PAGES + KVMM_MAX_PAGE_SIZE / EV_TOK_PER_SLOT,
	       "the smallest buffer that keeps tokens holds any event");
_Static_assert(KVMM_EVENTS_TOKENS_LEN_MIN >= KVMM_EVENTS_LEN_MIN +
	       KVMM_MAX_PAGE_SIZE * sizeof(uint32_t), "EVENTS with tokens fits any event");

/**
 * struct kvmm_evbuf - the event ring
 * @slots: @mask + 1 slots, a power of two
 * @head: slot position of the next event (positions only grow; masked
 *	into @slots)
 * @tail: slot position of the oldest event held
 * @first: its sequence number; the context's ev_seq when empty
 * @start: slot position of each event held, by sequence number & @emask
 *	(an event takes at least EV_HDR_SLOTS + 1 slots, so no two held
 *	events share an entry)
 * @path: scratch for the ancestors of the node an event is about
 * @max_depth: its room
 * @memo: the hash state at the end of the two nodes named last, by node
 *	id (0: none), with the key of the node's last page; kept as bytes,
 *	as XXH3_state_t wants an alignment the allocator does not give
 * @tokens: each event's token ids follow its keys
 * @page_size: tokens per page, with @tokens
 * @bytes: the size of the allocation
 */
struct kvmm_evbuf {
	struct kvmm_key *slots;
	uint64_t mask;
	uint64_t head;
	uint64_t tail;
	uint64_t first;
	uint64_t *start;
	uint64_t emask;
	struct kvmm_node **path;
	uint32_t max_depth;
	struct {
		uint64_t id;
		uint64_t key[2];
		uint32_t ns;
		unsigned char st[sizeof(XXH3_state_t)];
	} memo[2];
	bool tokens;
	uint32_t page_size;
	size_t bytes;
};

/* Copy @nr slots in or out of the ring at position @pos, across its end. */
static void ring_put(struct kvmm_evbuf *eb, uint64_t pos, const void *src, uint64_t nr)
{
	uint64_t at = pos & eb->mask, first = eb->mask + 1 - at;

	if (first > nr)
		first = nr;
	memcpy(eb->slots + at, src, first * sizeof(struct kvmm_key));
	memcpy(eb->slots, (const struct kvmm_key *)src + first,
	       (nr - first) * sizeof(struct kvmm_key));
}

static void ring_get(const struct kvmm_evbuf *eb, uint64_t pos, void *dst, uint64_t nr)
{
	uint64_t at = pos & eb->mask, first = eb->mask + 1 - at;

	if (first > nr)
		first = nr;
	memcpy(dst, eb->slots + at, first * sizeof(struct kvmm_key));
	memcpy((struct kvmm_key *)dst + first, eb->slots,
	       (nr - first) * sizeof(struct kvmm_key));
}

/* Slots the token ids of @pages pages take (none unless kept). */
static uint64_t ev_tok_slots(const struct kvmm_evbuf *eb, uint32_t pages)
{
	if (!eb->tokens)
		return 0;
	return ((uint64_t)pages * eb->page_size + EV_TOK_PER_SLOT - 1) / EV_TOK_PER_SLOT;
}

/* Slots of an event of @pages pages, header to last token. */
static uint64_t ev_slots(const struct kvmm_evbuf *eb, uint32_t pages)
{
	return EV_HDR_SLOTS + pages + ev_tok_slots(eb, pages);
}

/* Slots of the event at slot position @pos. */
static uint64_t ev_slots_at(const struct kvmm_evbuf *eb, uint64_t pos)
{
	struct kvmm_cache_event ev;

	ring_get(eb, pos, &ev, EV_HDR_SLOTS);
	return ev_slots(eb, ev.pages);
}

/* Let go of the oldest event held; an unread one is dropped. */
static void ev_pop(struct kvmm_ctx *ctx, struct kvmm_evbuf *eb)
{
	eb->tail += ev_slots_at(eb, eb->tail);
	if (eb->first >= ctx->ev_read)
		kvmm_count(ctx, EV_CACHE_EVENTS_DROPPED, 1);
	eb->first++;
}

/*
 * Make room for @nr slots at the head, overwriting the oldest events,
 * and take a sequence number for an event there.
 */
static uint64_t ev_reserve(struct kvmm_ctx *ctx, struct kvmm_evbuf *eb, uint64_t nr)
{
	while (eb->head + nr - eb->tail > eb->mask + 1)
		ev_pop(ctx, eb);
	eb->start[ctx->ev_seq & eb->emask] = eb->head;
	kvmm_count(ctx, EV_CACHE_EVENTS, 1);
	return ctx->ev_seq++;
}

/* Put @n token ids at slot position @pos, the last slot zero-padded. */
static void ev_put_tokens(struct kvmm_evbuf *eb, uint64_t pos, const uint32_t *tok, uint32_t n)
{
	uint32_t whole = n / EV_TOK_PER_SLOT, rest = n % EV_TOK_PER_SLOT;

	ring_put(eb, pos, tok, whole);
	if (rest) {
		struct kvmm_key last = { 0 };

		memcpy(&last, tok + (size_t)whole * EV_TOK_PER_SLOT, rest * sizeof(*tok));
		ring_put(eb, pos + whole, &last, 1);
	}
}

/*
 * A node too deep for the scratch, which no sequence can make (an NVMe
 * tier recovered under a larger max_seq_len could): its events are
 * dropped, counted but given no number.
 */
static bool ev_too_deep(const struct kvmm_evbuf *eb, const struct kvmm_node *node)
{
	const struct kvmm_node *n;
	uint32_t depth = 0;

	for (n = node->parent; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		if (++depth > eb->max_depth)
			return true;
	return false;
}

static void ev_memo_put(struct kvmm_evbuf *eb, int i, uint64_t id, uint32_t ns,
			const XXH3_state_t *st, const uint64_t *key)
{
	eb->memo[i].id = id;
	eb->memo[i].ns = ns;
	eb->memo[i].key[0] = key[0];
	eb->memo[i].key[1] = key[1];
	memcpy(eb->memo[i].st, st, sizeof(*st));
}

/*
 * kvmm_node_hash_start() for @node, from a kept state where its parent
 * was named last or was the parent of the node named last.  The start
 * is kept in turn, for @node's siblings.  Return: the namespace.
 */
static uint32_t ev_hash_start(struct kvmm_evbuf *eb, const struct kvmm_node *node,
			      XXH3_state_t *st, uint64_t *parent)
{
	const struct kvmm_node *p = node->parent;
	uint32_t ns;
	int i;

	if (p->flags & KVMM_NODE_ROOT)
		return kvmm_node_hash_start(node, eb->path, st, parent);
	for (i = 0; i < 2; i++) {
		if (eb->memo[i].id != p->id)
			continue;
		memcpy(st, eb->memo[i].st, sizeof(*st));
		parent[0] = eb->memo[i].key[0];
		parent[1] = eb->memo[i].key[1];
		ns = eb->memo[i].ns;
		if (i)	/* a child of the node named last: now the parent */
			eb->memo[0] = eb->memo[1];
		eb->memo[1].id = 0;
		return ns;
	}
	ns = kvmm_node_hash_start(node, eb->path, st, parent);
	ev_memo_put(eb, 0, p->id, ns, st, parent);
	return ns;
}

/**
 * __kvmm_event_node() - record events about all of @node's pages
 * @ctx: the context, with events on
 * @type: KVMM_EVENT_*
 * @node: a node linked in the tree (not a root, not a keyed value)
 * @from: the tier the pages were on (STORED: the tier they went onto)
 * @to: the tier they are on now
 *
 * One event per KVMM_EVENT_MAX_PAGES pages, each with the identity of the
 * page before its first.  Never fails and never waits: room is made by
 * overwriting the oldest events.
 *
 * Context: ctx->lock held (or the direct API's single driver).
 */
void __kvmm_event_node(struct kvmm_ctx *ctx, uint8_t type, const struct kvmm_node *node,
		       uint32_t from, uint32_t to)
{
	struct kvmm_evbuf *eb = ctx->evbuf;
	uint32_t pages = node->len >> ctx->page_shift, ps = ctx->page_size, ns, i, k;
	uint32_t kmax = KVMM_EVENT_MAX_PAGES;
	const uint32_t *tok = node->tokens;
	uint64_t parent[2];
	XXH3_state_t st;

	if (ev_too_deep(eb, node)) {	/* counted, not numbered */
		kvmm_count(ctx, EV_CACHE_EVENTS_DROPPED, 1);
		return;
	}
	if (eb->tokens && KVMM_EVENT_MAX_TOKENS / ps < kmax)
		kmax = KVMM_EVENT_MAX_TOKENS / ps ? KVMM_EVENT_MAX_TOKENS / ps : 1;
	ns = ev_hash_start(eb, node, &st, parent);
	for (i = 0; i < pages; i += k) {
		struct kvmm_cache_event ev = {
			.type = type, .tier = (uint8_t)from, .to = (uint8_t)to, .ns = ns,
			.parent = { parent[0], parent[1] },
		};
		uint64_t pos;
		uint32_t j;

		k = pages - i < kmax ? pages - i : kmax;
		ev.pages = k;
		ev.seq = ev_reserve(ctx, eb, ev_slots(eb, k));
		pos = eb->head;
		ring_put(eb, pos, &ev, EV_HDR_SLOTS);
		if (eb->tokens)
			ev_put_tokens(eb, pos + EV_HDR_SLOTS + k, tok, k * ps);
		for (j = 0; j < k; j++, tok += ps) {
			struct kvmm_key *key = &eb->slots[(pos + EV_HDR_SLOTS + j) & eb->mask];
			XXH128_hash_t h;

			XXH3_128bits_update(&st, tok, ps * sizeof(*tok));
			h = XXH3_128bits_digest(&st);
			key->lo = parent[0] = h.low64;
			key->hi = parent[1] = h.high64;
		}
		eb->head = pos + ev_slots(eb, k);
	}
	if (node->len == pages << ctx->page_shift)	/* the state is at its end */
		ev_memo_put(eb, 1, node->id, ns, &st, parent);
}

static size_t evbuf_bytes(uint64_t slots, uint64_t nr_start, uint32_t depth)
{
	return sizeof(struct kvmm_evbuf) + slots * sizeof(struct kvmm_key) +
	       nr_start * sizeof(uint64_t) + depth * sizeof(struct kvmm_node *);
}

/* Free the buffer: the events it held and nobody read are dropped. */
static void evbuf_free(struct kvmm_ctx *ctx)
{
	struct kvmm_evbuf *eb = ctx->evbuf;
	uint64_t unread;

	if (!eb)
		return;
	unread = ctx->ev_seq - (eb->first > ctx->ev_read ? eb->first : ctx->ev_read);
	kvmm_count(ctx, EV_CACHE_EVENTS_DROPPED, unread);
	kvmm_mfree(ctx, eb, eb->bytes);
	ctx->evbuf = NULL;
}

/**
 * kvmm_set_events() - give cache events a buffer, or take it away
 * @ctx: the context
 * @bytes: its size, KVMM_EVENTS_BUF_MIN .. KVMM_EVENTS_BUF_MAX, rounded up
 *	to a power of two; 0 turns events off
 *
 * The events the old buffer held go with it (readers see the gap); the
 * sequence numbers go on.
 *
 * Return: 0; -EINVAL for a size out of range; -ENOMEM, with nothing
 * changed.
 */
int kvmm_set_events(struct kvmm_ctx *ctx, uint64_t bytes)
{
	uint64_t slots, nr_start;
	uint32_t depth = ctx->row_pages + 1;
	struct kvmm_evbuf *eb;
	size_t total;

	if (bytes && (bytes < (ctx->ev_tokens ? KVMM_EVENTS_TOKENS_BUF_MIN : KVMM_EVENTS_BUF_MIN) ||
		      bytes > KVMM_EVENTS_BUF_MAX))
		return -EINVAL;
	if (!bytes) {
		evbuf_free(ctx);
		return 0;
	}
	slots = 1;
	while (slots * sizeof(struct kvmm_key) < bytes)
		slots <<= 1;
	nr_start = slots / (EV_HDR_SLOTS + 1);	/* the most events that fit */
	while (nr_start & (nr_start - 1))	/* a power of two, no fewer */
		nr_start += nr_start & -nr_start;
	total = evbuf_bytes(slots, nr_start, depth);
	/* touched here, not by the first pass of events over it */
	eb = kvmm_zalloc(ctx, total);
	if (!eb)
		return -ENOMEM;
	*eb = (struct kvmm_evbuf){
		.slots = (struct kvmm_key *)(eb + 1), .mask = slots - 1,
		.emask = nr_start - 1, .max_depth = depth, .bytes = total,
		.first = ctx->ev_seq, .tokens = ctx->ev_tokens, .page_size = ctx->page_size,
	};
	eb->start = (uint64_t *)(eb->slots + slots);
	eb->path = (struct kvmm_node **)(eb->start + nr_start);
	evbuf_free(ctx);
	ctx->evbuf = eb;
	return 0;
}

/**
 * kvmm_set_event_tokens() - keep each event's token ids in the buffer, or not
 * @ctx: the context
 * @on: 1 or 0
 *
 * A change empties the buffer (readers see the gap), as a new size does.
 *
 * Return: 0; -EINVAL for @on not 0 or 1, or a buffer too small to keep
 * tokens (KVMM_EVENTS_TOKENS_BUF_MIN); -ENOMEM, with nothing changed.
 */
int kvmm_set_event_tokens(struct kvmm_ctx *ctx, uint64_t on)
{
	uint64_t bytes = kvmm_events_bytes(ctx);
	int ret;

	if (on > 1)
		return -EINVAL;
	if (ctx->ev_tokens == (bool)on)
		return 0;
	ctx->ev_tokens = on;
	if (!bytes)
		return 0;
	ret = kvmm_set_events(ctx, bytes);
	if (ret)
		ctx->ev_tokens = !on;
	return ret;
}

/**
 * kvmm_events_exit() - free the event buffer (kvmm_destroy())
 * @ctx: the context
 */
void kvmm_events_exit(struct kvmm_ctx *ctx)
{
	if (ctx->evbuf)
		kvmm_mfree(ctx, ctx->evbuf, ctx->evbuf->bytes);
	ctx->evbuf = NULL;
}

/**
 * kvmm_events_bytes() - the event buffer's size, 0 while events are off
 * @ctx: the context
 */
uint64_t kvmm_events_bytes(const struct kvmm_ctx *ctx)
{
	return ctx->evbuf ? (ctx->evbuf->mask + 1) * sizeof(struct kvmm_key) : 0;
}

/**
 * kvmm_events_read() - copy events out, from a cursor on (EVENTS)
 * @ctx: the context
 * @cursor: the sequence number of the first event wanted
 * @filter: only events of namespace @ns
 * @ns: the namespace, with @filter
 * @tokens: copy each event's token ids after its keys (KVMM_EVENTS_TOKENS)
 * @out: a struct kvmm_events_hdr, then the events, @len bytes in all
 *	(8-byte aligned; only written, never read back)
 * @len: its room
 * @cflags: KVMM_CQE_F_MORE is set when events after hdr.next wait
 *
 * Return: events written; -EOPNOTSUPP with events off, or @tokens from a
 * buffer that keeps none; -EINVAL for a
 * cursor past the newest event or a @len that cannot hold the header and
 * the first event due.  Nothing is written on failure.
 */
int kvmm_events_read(struct kvmm_ctx *ctx, uint64_t cursor, bool filter, uint32_t ns,
		     bool tokens, void *out, uint32_t len, uint32_t *cflags)
{
	const struct kvmm_evbuf *eb = ctx->evbuf;
	struct kvmm_events_hdr hdr = { 0 };
	uint64_t seq, room;
	char *p = (char *)out + sizeof(hdr);

	if (!eb || (tokens && !eb->tokens))
		return -EOPNOTSUPP;
	if (cursor > ctx->ev_seq || len < sizeof(hdr))
		return -EINVAL;
	room = len - sizeof(hdr);
	seq = cursor;
	if (seq < eb->first) {
		hdr.lost = eb->first - seq;
		seq = eb->first;
	}
	for (; seq < ctx->ev_seq; seq++) {
		uint64_t pos = eb->start[seq & eb->emask];
		struct kvmm_cache_event ev;
		uint64_t bytes, slots;

		ring_get(eb, pos, &ev, EV_HDR_SLOTS);
		if (filter && ev.ns != ns)
			continue;
		slots = tokens ? ev_slots(eb, ev.pages) : EV_HDR_SLOTS + ev.pages;
		bytes = slots * sizeof(struct kvmm_key);
		if (bytes > room) {
			if (!hdr.nr)
				return -EINVAL;
			break;
		}
		ring_get(eb, pos, p, slots);
		p += bytes;
		room -= bytes;
		hdr.bytes += (uint32_t)bytes;
		hdr.nr++;
	}
	hdr.next = seq;
	memcpy(out, &hdr, sizeof(hdr));
	if (seq < ctx->ev_seq)
		*cflags |= KVMM_CQE_F_MORE;
	if (seq > ctx->ev_read)
		ctx->ev_read = seq;
	return (int)hdr.nr;
}

/**
 * kvmm_events_check() - the event ring's bookkeeping adds up (kvmm_check())
 * @ctx: the context
 * @why: out, what is wrong
 *
 * Return: 0, or -EUCLEAN.
 */
int kvmm_events_check(const struct kvmm_ctx *ctx, const char **why)
{
	const struct kvmm_evbuf *eb = ctx->evbuf;
	uint64_t pos, seq;

	if (!eb)
		return 0;
	if (eb->head - eb->tail > eb->mask + 1 || eb->first > ctx->ev_seq ||
	    ctx->ev_seq - eb->first > eb->emask + 1) {
		*why = "event ring: head, tail and sequence numbers disagree";
		return -EUCLEAN;
	}
	for (pos = eb->tail, seq = eb->first; seq < ctx->ev_seq; seq++) {
		struct kvmm_cache_event ev;

		ring_get(eb, pos, &ev, EV_HDR_SLOTS);
		if (eb->start[seq & eb->emask] != pos || ev.seq != seq || !ev.pages ||
		    ev.pages > KVMM_EVENT_MAX_PAGES || ev.type >= KVMM_EVENT_LAST ||
		    (eb->tokens && (uint64_t)(ev.pages - 1) * eb->page_size >= KVMM_EVENT_MAX_TOKENS)) {
			*why = "event ring: an event is not where its number says";
			return -EUCLEAN;
		}
		pos += ev_slots(eb, ev.pages);
	}
	if (pos != eb->head) {
		*why = "event ring: its events do not end at its head";
		return -EUCLEAN;
	}
	return 0;
}
