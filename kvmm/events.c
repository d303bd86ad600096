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
 * writes O(pages) slots, and naming the pages needs the hash state of
 * the node's prefix from the root (the identity is a chain over the
 * whole prefix).  So the first event about a node keeps what it
 * computed in the node (struct kvmm_node.ids): its pages' identities,
 * which every later event about it (demoted, promoted, removed) copies,
 * and where hashing stood at its end (struct ev_resume), from which a
 * child is named in O(its own tokens).  That is one allocation per node
 * while events are on, 16 bytes a page and 112 a node; a node that gets
 * none is named from its prefix each time, as every node was before.
 * A node's tokens from the root to its end never change while it lives
 * (a split moves the head of its edge into a new parent, which takes
 * its share of what was kept), so what it keeps stays right; turning
 * events off forgets it all, as nothing would keep it right then, and
 * kvmm_check() hashes every kept identity again.
 *
 * What is not kept (a node named before events were on, or one that got
 * no memory) is hashed from the root, or from a state kept for the last
 * two nodes named (the node of the last event and that node's parent),
 * by node id: events come in runs about one place in the tree, a
 * sequence's commits store a leaf under the leaf its last commit stored.
 * A node's id is never reused, so a kept state is right whenever its id
 * matches.
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
#include <stdlib.h>

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
 * @max_depth: its room, and that of @ids
 * @ids: scratch for the identities of a node's pages when no memory is
 *	left to keep them in the node
 * @resume_ok: nodes keep where hashing stood at their end (struct
 *	ev_resume): resume_works() said that gives XXH3's state back
 * @memo: the hash state at the end of the two nodes named last, by node
 *	id (0: none), with the key of the node's last page; kept as bytes,
 *	as XXH3_state_t wants an alignment the allocator does not give
 * @tokens: each event's token ids follow its keys: 0, 1, or
 *	KVMM_EVENT_TOKENS_STORED (STORED events' only)
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
	struct kvmm_key *ids;
	bool resume_ok;
	struct {
		uint64_t id;
		uint64_t key[2];
		uint32_t ns;
		unsigned char st[sizeof(XXH3_state_t)];
	} memo[2];
	uint8_t tokens;
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

/* Slots the token ids of an event of @type about @pages pages take (none unless kept). */
static uint64_t ev_tok_slots(const struct kvmm_evbuf *eb, uint8_t type, uint32_t pages)
{
	if (!eb->tokens || (eb->tokens == KVMM_EVENT_TOKENS_STORED && type != KVMM_EVENT_STORED))
		return 0;
	return ((uint64_t)pages * eb->page_size + EV_TOK_PER_SLOT - 1) / EV_TOK_PER_SLOT;
}

/* Slots of an event of @type about @pages pages, header to last token. */
static uint64_t ev_slots(const struct kvmm_evbuf *eb, uint8_t type, uint32_t pages)
{
	return EV_HDR_SLOTS + pages + ev_tok_slots(eb, type, pages);
}

/* Slots of the event at slot position @pos. */
static uint64_t ev_slots_at(const struct kvmm_evbuf *eb, uint64_t pos)
{
	struct kvmm_cache_event ev;

	ring_get(eb, pos, &ev, EV_HDR_SLOTS);
	return ev_slots(eb, ev.type, ev.pages);
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
 * The root above @node, or NULL for a node too deep for the scratch,
 * which no sequence can make (an NVMe tier recovered under a larger
 * max_seq_len could): its events are dropped, counted but given no
 * number.
 */
static const struct kvmm_node *ev_root(const struct kvmm_evbuf *eb, const struct kvmm_node *node)
{
	const struct kvmm_node *n;
	uint32_t depth = 0;

	for (n = node->parent; !(n->flags & KVMM_NODE_ROOT); n = n->parent)
		if (++depth > eb->max_depth)
			return NULL;
	return n;
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
 * Where hashing stood at a node's end, kept after its identities so that
 * naming a child starts there rather than at the root: XXH3's
 * accumulators and counts.  The rest of its state is the namespace's
 * seed, which reset gives back, and the last bytes hashed, which are the
 * prefix's last tokens: RESUME_TAIL bytes at most (what is buffered,
 * and the stripe before it).  Taking XXH3's state apart this way is
 * checked once per event buffer (resume_works()); where it does not
 * hold, every child is named from the root as before.
 */
struct ev_resume {
	uint64_t acc[8];
	uint64_t stripes;
	uint64_t total;
	uint32_t buffered;
	uint32_t ok;		/* 0: nothing kept (the next child starts at the root) */
	uint32_t ns;		/* the node's namespace, kept with its identities */
};

#define RESUME_SLOTS	((sizeof(struct ev_resume) + sizeof(struct kvmm_key) - 1) / \
			 sizeof(struct kvmm_key))
_Static_assert(RESUME_SLOTS * sizeof(struct kvmm_key) == 96, "a resume point is six slots");
#define XXH_BUF		sizeof(((XXH3_state_t *)0)->buffer)
#define XXH_STRIPE	64
#define RESUME_TAIL	(XXH_BUF + XXH_STRIPE)

static struct ev_resume *node_resume(const struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	return (struct ev_resume *)(node->ids + (node->len >> ctx->page_shift) + 1);
}

static void resume_save(const XXH3_state_t *st, struct ev_resume *r)
{
	memcpy(r->acc, st->acc, sizeof(r->acc));
	r->stripes = st->nbStripesSoFar;
	r->total = st->totalLen;
	r->buffered = st->bufferedSize;
	r->ok = 1;
}

/*
 * Whether XXH3 reads the stripe before what it buffered: it has consumed
 * some bytes and buffered less than a stripe, so that its digest takes
 * the rest of its last stripe from there.
 */
static bool resume_catchup(const struct ev_resume *r)
{
	return r->total > XXH_BUF && r->buffered < XXH_STRIPE;
}

/* Bytes of the prefix's tail resume_load() needs after @r. */
static size_t resume_need(const struct ev_resume *r)
{
	return r->buffered + (resume_catchup(r) ? XXH_STRIPE : 0);
}

/*
 * XXH3's state after hashing @r->total bytes whose last @n bytes are
 * @tail (@n >= resume_need()) and whose accumulators and counts @r kept.
 * XXH3 buffers the last bytes and, once it has consumed any, keeps the
 * stripe before them at the end of its buffer, which its digest reads
 * when less than a stripe is buffered (resume_catchup()); what else is
 * in its buffer it overwrites before reading.
 */
static void resume_load(XXH3_state_t *st, uint32_t ns, const struct ev_resume *r,
			const unsigned char *tail, size_t n)
{
	XXH3_INITSTATE(st);	/* not a state left from another seed */
	XXH3_128bits_reset_withSeed(st, ns);
	memcpy(st->acc, r->acc, sizeof(r->acc));
	st->nbStripesSoFar = (size_t)r->stripes;
	st->totalLen = r->total;
	st->bufferedSize = r->buffered;
	memcpy(st->buffer, tail + n - r->buffered, r->buffered);
	if (resume_catchup(r))
		memcpy(st->buffer + XXH_BUF - XXH_STRIPE, tail + n - r->buffered - XXH_STRIPE,
		       XXH_STRIPE);
}

/*
 * The hash state at the end of @node, from what it keeps, into @st.
 * Return: false when it keeps nothing.
 */
static bool node_resume_load(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
			     uint32_t ns, XXH3_state_t *st)
{
	uint32_t tail[RESUME_TAIL / sizeof(uint32_t)];
	const struct ev_resume *r;
	const struct kvmm_node *n;
	size_t need, have = 0;

	if (!node->ids || !ctx->evbuf->resume_ok)
		return false;
	r = node_resume(ctx, node);
	if (!r->ok)
		return false;
	need = resume_need(r) / sizeof(uint32_t);
	/* the last tokens of the prefix, from the end of @node upwards */
	for (n = node; have < need && !(n->flags & KVMM_NODE_ROOT); n = n->parent) {
		size_t k = n->len < need - have ? n->len : need - have;

		memcpy(tail + (need - have - k), n->tokens + (n->len - k), k * sizeof(uint32_t));
		have += k;
	}
	if (have < need)
		return false;
	resume_load(st, ns, r, (const unsigned char *)tail, need * sizeof(uint32_t));
	return true;
}

/*
 * Whether resume_load() gives back the state XXH3 had: hashing on from it
 * ends where hashing on from the state itself does, at cuts on either
 * side of XXH3's buffer and block sizes.
 */
static bool resume_works(void)
{
	static const uint32_t cuts[] = { 1, 4, 16, 60, 63, 64, 65, 80, 128, 256, 300, 1023, 1030 };
	uint32_t tok[1100], i, j;
	XXH3_state_t a, b;
	struct ev_resume r;

	for (i = 0; i < 1100; i++)
		tok[i] = i * 2654435761u;
	for (i = 0; i < 2 * sizeof(cuts) / sizeof(cuts[0]); i++) {
		uint32_t c = cuts[i / 2], step = i & 1 ? 16 : c;
		uint32_t from = c > RESUME_TAIL / 4 ? c - RESUME_TAIL / 4 : 0;
		XXH128_hash_t x, y;

		XXH3_INITSTATE(&a);
		XXH3_128bits_reset_withSeed(&a, 7);
		for (j = 0; j < c; j += step)	/* in one go, or page by page */
			XXH3_128bits_update(&a, tok + j, (c - j < step ? c - j : step) * sizeof(*tok));
		resume_save(&a, &r);
		if (resume_need(&r) > (c - from) * sizeof(*tok))
			return false;
		resume_load(&b, 7, &r, (const unsigned char *)(tok + from), (c - from) * sizeof(*tok));
		x = XXH3_128bits_digest(&a);
		y = XXH3_128bits_digest(&b);
		if (!XXH128_isEqual(x, y))
			return false;
		XXH3_128bits_update(&a, tok + c, 67 * sizeof(*tok));
		XXH3_128bits_update(&b, tok + c, 67 * sizeof(*tok));
		x = XXH3_128bits_digest(&a);
		y = XXH3_128bits_digest(&b);
		if (!XXH128_isEqual(x, y))
			return false;
	}
	return true;
}

/*
 * kvmm_node_hash_start() for @node: from where hashing stood at its
 * parent's end when the parent keeps that, else from a kept state where
 * its parent was named last or was the parent of the node named last,
 * else from the root.  The start is kept in turn, for @node's siblings.
 * Return: the namespace.
 */
static uint32_t ev_hash_start(const struct kvmm_ctx *ctx, struct kvmm_evbuf *eb,
			      const struct kvmm_node *node, const struct kvmm_node *root,
			      XXH3_state_t *st, uint64_t *parent)
{
	const struct kvmm_node *p = node->parent;
	uint32_t ns;
	int i;

	if (p->flags & KVMM_NODE_ROOT)
		return kvmm_node_hash_start(node, eb->path, st, parent);
	if (node_resume_load(ctx, p, root->ns, st)) {
		const struct kvmm_key *last = &p->ids[p->len >> ctx->page_shift];

		parent[0] = last->lo;
		parent[1] = last->hi;
		return root->ns;
	}
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
 * kvmm_node_ids_bytes() - bytes of what a node of @len tokens keeps in
 *	struct kvmm_node.ids: its identities and where hashing stood at its end
 * @ctx: the context
 * @len: the node's tokens
 */
size_t kvmm_node_ids_bytes(const struct kvmm_ctx *ctx, uint32_t len)
{
	return ((size_t)(len >> ctx->page_shift) + 1 + RESUME_SLOTS) * sizeof(struct kvmm_key);
}

/**
 * kvmm_node_ids_free() - forget the identities @node keeps (node_free())
 * @ctx: the context
 * @node: a node; its @len is the one they were kept for
 */
void kvmm_node_ids_free(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	if (!node->ids)
		return;
	kvmm_mfree(ctx, node->ids, kvmm_node_ids_bytes(ctx, node->len));
	node->ids = NULL;
}

/**
 * kvmm_node_ids_split() - share out a split node's identities
 * @ctx: the context
 * @head: the new parent, which took the head of @tail's edge
 * @tail: the node split, its @len already the rest
 *
 * A page's identity is that of the tokens from the root to its end, so
 * each keeps its own; the page before @tail's edge is now @head's last.
 * @tail ends where it did; where hashing stands at @head's end is
 * hashed on from @head's parent's (as a child is named).  Without memory
 * for both halves neither keeps any: the next event about each names
 * its pages again.
 */
void kvmm_node_ids_split(struct kvmm_ctx *ctx, struct kvmm_node *head, struct kvmm_node *tail)
{
	uint32_t hp = head->len >> ctx->page_shift, tp = tail->len >> ctx->page_shift;
	struct kvmm_key *old = tail->ids, *h, *t;
	XXH3_state_t st;
	uint32_t ns;

	if (!old)
		return;
	h = kvmm_malloc(ctx, kvmm_node_ids_bytes(ctx, head->len));
	t = kvmm_malloc(ctx, kvmm_node_ids_bytes(ctx, tail->len));
	if (!h || !t) {
		if (h)
			kvmm_mfree(ctx, h, kvmm_node_ids_bytes(ctx, head->len));
		if (t)
			kvmm_mfree(ctx, t, kvmm_node_ids_bytes(ctx, tail->len));
		kvmm_mfree(ctx, old, kvmm_node_ids_bytes(ctx, head->len + tail->len));
		tail->ids = NULL;
		return;
	}
	memcpy(h, old, (hp + 1) * sizeof(*h));
	memcpy(t, old + hp, (tp + 1 + RESUME_SLOTS) * sizeof(*t));	/* and its end */
	kvmm_mfree(ctx, old, kvmm_node_ids_bytes(ctx, head->len + tail->len));
	head->ids = h;
	tail->ids = t;
	ns = node_resume(ctx, tail)->ns;
	node_resume(ctx, head)->ok = 0;
	node_resume(ctx, head)->ns = ns;
	if (!ctx->evbuf->resume_ok)
		return;
	if (head->parent->flags & KVMM_NODE_ROOT) {
		XXH3_INITSTATE(&st);
		XXH3_128bits_reset_withSeed(&st, ns);
	} else if (!node_resume_load(ctx, head->parent, ns, &st)) {
		return;
	}
	XXH3_128bits_update(&st, head->tokens, (size_t)head->len * sizeof(uint32_t));
	resume_save(&st, node_resume(ctx, head));
}

/* Forget every node's identities: events went off (nothing keeps them right). */
static void ids_drop_all(struct kvmm_ctx *ctx)
{
	struct kvmm_list *pos;

	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling);
		struct kvmm_node *node;

		for (node = root; node; node = kvmm_tree_next(root, node))
			kvmm_node_ids_free(ctx, node);
	}
}

/*
 * The identities of @node's pages, hashed from the prefix's tokens, into
 * @ids (1 + its pages: the page before first), and where hashing stood
 * at its end into @r (NULL: not kept).  Return: the namespace.
 */
static uint32_t ev_hash_ids(struct kvmm_ctx *ctx, struct kvmm_evbuf *eb,
			    const struct kvmm_node *node, const struct kvmm_node *root,
			    struct kvmm_key *ids, struct ev_resume *r)
{
	uint32_t pages = node->len >> ctx->page_shift, ps = ctx->page_size, ns, j;
	const uint32_t *tok = node->tokens;
	uint64_t parent[2];
	XXH3_state_t st;

	ns = ev_hash_start(ctx, eb, node, root, &st, parent);
	ids[0] = (struct kvmm_key){ parent[0], parent[1] };
	for (j = 0; j < pages; j++, tok += ps) {
		XXH128_hash_t h;

		XXH3_128bits_update(&st, tok, ps * sizeof(*tok));
		h = XXH3_128bits_digest(&st);
		ids[1 + j] = (struct kvmm_key){ h.low64, h.high64 };
	}
	if (r && eb->resume_ok) {
		resume_save(&st, r);
		r->ns = ns;
		return ns;
	}
	if (r) {
		r->ok = 0;
		r->ns = ns;
	}
	parent[0] = ids[pages].lo;
	parent[1] = ids[pages].hi;
	ev_memo_put(eb, 1, node->id, ns, &st, parent);	/* the state is at its end */
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
 * page before its first.  The first event about a node hashes its
 * prefix and keeps the identities in it (@node->ids); later ones copy
 * them.  Never fails and never waits: room is made by overwriting the
 * oldest events, and a node that gets no memory for its identities is
 * named from its prefix again next time.
 *
 * Context: ctx->lock held (or the direct API's single driver).
 */
void __kvmm_event_node(struct kvmm_ctx *ctx, uint8_t type, struct kvmm_node *node,
		       uint32_t from, uint32_t to)
{
	struct kvmm_evbuf *eb = ctx->evbuf;
	uint32_t pages = node->len >> ctx->page_shift, ps = ctx->page_size, ns, i, k;
	uint32_t kmax = KVMM_EVENT_MAX_PAGES;
	const uint32_t *tok = node->tokens;
	struct kvmm_key *ids = node->ids;
	const struct kvmm_node *root;

	if (eb->tokens && KVMM_EVENT_MAX_TOKENS / ps < kmax)
		kmax = KVMM_EVENT_MAX_TOKENS / ps ? KVMM_EVENT_MAX_TOKENS / ps : 1;
	if (ids) {	/* named before: no walk up the tree at all */
		ns = node_resume(ctx, node)->ns;
		goto record;
	}
	root = ev_root(eb, node);
	if (!root || pages >= eb->max_depth) {	/* counted, not numbered */
		kvmm_count(ctx, EV_CACHE_EVENTS_DROPPED, 1);
		return;
	}
	ids = kvmm_malloc(ctx, kvmm_node_ids_bytes(ctx, node->len));
	if (ids) {
		node->ids = ids;
		ns = ev_hash_ids(ctx, eb, node, root, ids, node_resume(ctx, node));
	} else {	/* named in the event buffer's scratch, not kept */
		ids = eb->ids;
		ns = ev_hash_ids(ctx, eb, node, root, ids, NULL);
	}
record:
	for (i = 0; i < pages; i += k) {
		struct kvmm_cache_event ev = {
			.type = type, .tier = (uint8_t)from, .to = (uint8_t)to, .ns = ns,
			.parent = { ids[i].lo, ids[i].hi },
		};
		uint64_t pos;

		k = pages - i < kmax ? pages - i : kmax;
		ev.pages = k;
		ev.seq = ev_reserve(ctx, eb, ev_slots(eb, type, k));
		pos = eb->head;
		ring_put(eb, pos, &ev, EV_HDR_SLOTS);
		ring_put(eb, pos + EV_HDR_SLOTS, ids + 1 + i, k);
		if (ev_tok_slots(eb, type, k))
			ev_put_tokens(eb, pos + EV_HDR_SLOTS + k, tok + (size_t)i * ps, k * ps);
		eb->head = pos + ev_slots(eb, type, k);
	}
}

/*
 * Check @node, whose parent's hash state (where hashing stood at the
 * parent's end, hashed by the checker itself) is @st and the identity
 * of whose parent's last page is @parent; leave @node's own end in @st.
 */
static int ids_check_node(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
			  XXH3_state_t *st, struct kvmm_key *parent, const char **why)
{
	uint32_t pages = node->len >> ctx->page_shift, ps = ctx->page_size, j;
	const struct kvmm_key *ids = node->ids;
	const struct ev_resume *r;
	XXH3_state_t mine;

	if (!ids) {
		XXH3_128bits_update(st, node->tokens, (size_t)node->len * sizeof(uint32_t));
		if (pages) {
			XXH128_hash_t h = XXH3_128bits_digest(st);

			*parent = (struct kvmm_key){ h.low64, h.high64 };
		}
		return 0;
	}
	if (memcmp(&ids[0], parent, sizeof(*parent)))
		goto bad;
	for (j = 0; j < pages; j++) {
		XXH128_hash_t h;

		XXH3_128bits_update(st, node->tokens + (size_t)j * ps, ps * sizeof(uint32_t));
		h = XXH3_128bits_digest(st);
		if (ids[1 + j].lo != h.low64 || ids[1 + j].hi != h.high64)
			goto bad;
	}
	*parent = ids[pages];
	r = node_resume(ctx, node);
	if (r->ns != kvmm_node_ns(node)->root.ns) {
		*why = "keeps another namespace's identities";
		return -EUCLEAN;
	}
	/* where hashing stood at its end, if kept, digests to its last page's */
	if (r->ok) {
		XXH128_hash_t h;

		if (!node_resume_load(ctx, node, r->ns, &mine)) {
			*why = "keeps a resume point it cannot be resumed from";
			return -EUCLEAN;
		}
		h = XXH3_128bits_digest(&mine);
		if (ids[pages].lo != h.low64 || ids[pages].hi != h.high64) {
			*why = "keeps a resume point that is not its end";
			return -EUCLEAN;
		}
	}
	return 0;
bad:
	*why = "keeps page identities that are not its prefix's";
	return -EUCLEAN;
}

/**
 * kvmm_events_ids_check() - the identities nodes keep are their pages' (kvmm_check())
 * @ctx: the context
 * @why: out, what is wrong
 * @bad: out, the node it is wrong about
 *
 * Hashes every prefix once, top down, keeping the state at the end of
 * each node on the path walked: O(the tree's tokens), as the event that
 * named each node would, and without trusting anything a node keeps.
 * With events off no node may keep any.
 *
 * Return: 0, -EUCLEAN, or -ENOMEM for the checker's own scratch.
 */
int kvmm_events_ids_check(const struct kvmm_ctx *ctx, const char **why,
			  const struct kvmm_node **bad)
{
	const struct kvmm_evbuf *eb = ctx->evbuf;
	const struct kvmm_node **nodes = NULL;
	struct kvmm_key *keys = NULL;
	XXH3_state_t *st = NULL;
	struct kvmm_list *pos;
	uint32_t cap = eb ? eb->max_depth + 1 : 0;
	int ret = 0;

	if (eb) {
		st = aligned_alloc(64, cap * sizeof(*st));
		nodes = calloc(cap, sizeof(*nodes));
		keys = calloc(cap, sizeof(*keys));
		if (!st || !nodes || !keys) {
			ret = -ENOMEM;
			goto out;
		}
	}
	list_for_each(pos, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling), *n;
		uint32_t depth = 0;	/* nodes on the path above the one visited */
		bool hash = eb && !(root->flags & KVMM_NODE_KEYED);

		for (n = kvmm_tree_next(root, root); n;) {
			*bad = n;
			while (depth && nodes[depth - 1] != n->parent)
				depth--;
			if (!hash || depth >= cap) {	/* no event names it, nor below it */
				struct kvmm_node *m;

				for (m = n; m; m = kvmm_tree_next(n, m)) {
					*bad = m;
					if (m->ids) {
						*why = "keeps page identities no event could have named";
						ret = -EUCLEAN;
						goto out;
					}
				}
				n = kvmm_tree_skip(root, n);
				continue;
			}
			if (depth) {
				memcpy(&st[depth], &st[depth - 1], sizeof(*st));
				keys[depth] = keys[depth - 1];
			} else {
				XXH3_INITSTATE(&st[0]);
				XXH3_128bits_reset_withSeed(&st[0], root->ns);
				keys[0] = (struct kvmm_key){ 0, 0 };
			}
			ret = ids_check_node(ctx, n, &st[depth], &keys[depth], why);
			if (ret)
				goto out;
			nodes[depth++] = n;
			n = kvmm_tree_next(root, n);
		}
	}
out:
	free(st);
	free(nodes);
	free(keys);
	return ret;
}

static size_t evbuf_bytes(uint64_t slots, uint64_t nr_start, uint32_t depth)
{
	return sizeof(struct kvmm_evbuf) + (slots + depth) * sizeof(struct kvmm_key) +
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
		ids_drop_all(ctx);
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
		.resume_ok = resume_works(),
	};
	eb->ids = eb->slots + slots;
	eb->start = (uint64_t *)(eb->ids + depth);
	eb->path = (struct kvmm_node **)(eb->start + nr_start);
	evbuf_free(ctx);
	ctx->evbuf = eb;
	return 0;
}

/**
 * kvmm_set_event_tokens() - keep events' token ids in the buffer, or not
 * @ctx: the context
 * @on: 1 (every event's), KVMM_EVENT_TOKENS_STORED (STORED events' only)
 *	or 0
 *
 * A change empties the buffer (readers see the gap), as a new size does.
 *
 * Return: 0; -EINVAL for another @on, or a buffer too small to keep
 * tokens (KVMM_EVENTS_TOKENS_BUF_MIN); -ENOMEM, with nothing changed.
 */
int kvmm_set_event_tokens(struct kvmm_ctx *ctx, uint64_t on)
{
	uint64_t bytes = kvmm_events_bytes(ctx);
	uint8_t old = ctx->ev_tokens;
	int ret;

	if (on > KVMM_EVENT_TOKENS_STORED)
		return -EINVAL;
	if (ctx->ev_tokens == on)
		return 0;
	ctx->ev_tokens = (uint8_t)on;
	if (!bytes)
		return 0;
	ret = kvmm_set_events(ctx, bytes);
	if (ret)
		ctx->ev_tokens = old;
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
		slots = tokens ? ev_slots(eb, ev.type, ev.pages) : EV_HDR_SLOTS + ev.pages;
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
		pos += ev_slots(eb, ev.type, ev.pages);
	}
	if (pos != eb->head) {
		*why = "event ring: its events do not end at its head";
		return -EUCLEAN;
	}
	return 0;
}
