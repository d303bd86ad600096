// SPDX-License-Identifier: MIT
/*
 * tools/lib/kvevents.c - kvmm's cache events as vLLM's KV events.
 *
 * DOC: speaking vLLM's KV events
 *
 * KV-aware routers (llm-d's KV-cache indexer, Dynamo's router, SGLang's
 * router) read the stream vLLM's ZmqEventPublisher sends: multipart ZMQ
 * messages (topic, 8-byte big-endian sequence number, payload) on a PUB
 * socket, each payload a msgpack KVEventBatch [ts, events, dp_rank] of
 * BlockStored / BlockRemoved / AllBlocksCleared maps, and a ROUTER
 * socket that resends the messages from a sequence number on, then an
 * end marker.  This file turns the EVENTS output of a context (with
 * KVMM_EVENTS_TOKENS) into exactly that, with libzmq, its msgpack written
 * byte for byte as msgpack-c writes it.
 *
 * A router finds a prompt's blocks by hashing it as vLLM does, so the
 * blocks are named by vLLM's hash, not kvmm's page keys: block i's hash
 * is H(cbor([hash of block i-1, [its token ids], None])), the first
 * block's parent NONE_HASH = H(cbor(seed)), where H is sha256 or xxh3-128
 * of the canonical CBOR (vLLM's sha256_cbor and xxhash_cbor; the pickle
 * based sha256 and xxhash depend on Python's pickle and are not
 * offered).  An event gives its pages' tokens and its parent's kvmm
 * key; the parent's vLLM hash comes from a table of every page the
 * publisher has seen stored and not yet removed, keyed by kvmm key.  A
 * page whose parent it never saw (the stream lost events, or the page
 * was recovered from NVMe before the publisher started) cannot be named
 * and is counted, not sent.
 *
 * Tiers are vLLM's media: device "GPU", host "CPU", NVMe "STORAGE".  A
 * demotion or promotion is a BlockRemoved on the old medium and a
 * BlockStored on the new one, as vLLM's offloading managers publish.
 * The remote tier is shared by many instances and is not this one's to
 * announce: it is no page tier of the context, and what leaves the host
 * tier for it is a BlockRemoved from "CPU" like any eviction.
 *
 * Every namespace has its own topic, "<topic>/ns/<ns>/" (the trailing
 * slash keeps namespace 1's subscribers off namespace 10's topic, since
 * ZMQ matches prefixes), and a message never mixes namespaces.
 *
 * A publisher's thread shares the machine with the engine's, and on
 * one with fewer cores than busy threads (kvmmd's client, its serving
 * thread and the publisher on two cores) it takes a core from one of
 * them whenever it runs: a thread woken or preempted there then waits
 * for the publisher's time slice to end, and the engine's round trips
 * with it.  So the publisher offers its CPU (sched_yield()) after every
 * few dozen microseconds of work (kvev_params.yield_pages): a thread
 * waiting for that core gets it back at once, and where none waits the
 * call returns at once.  The publisher keeps its share of the CPU (it is
 * not lowered in priority, which could starve it) and publishes every
 * event as soon as before.
 *
 * The same table answers a router that asks by vLLM block hashes which
 * tier holds them (kvev_lookup(), kvmmd's prefix query): a second table,
 * kept only for a publisher made to answer (kvev_params.index_hashes),
 * indexes the pages by their vLLM hash and namespace.  The publisher's
 * thread and the asker's share both under @lock.
 *
 * This file is the publisher: vLLM's block hashes, the tables, events
 * in, and the thread; the messages are written by kvevents_pack.c, and
 * built, sent and kept for replay by kvevents_buf.c
 * (kvevents_int.h is what they share).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <zmq.h>

#include "kvevents_int.h"


const char *const kvev_hash_names[NR_KVEV_HASH + 1] = {
	[KVEV_HASH_SHA256_CBOR] = "sha256_cbor",
	[KVEV_HASH_XXHASH_CBOR] = "xxhash_cbor",
	NULL,
};

/* ---- vLLM's block hashes ---- */

/* A canonical (shortest) CBOR head of major type @major and value @v. */
static size_t cbor_head(uint8_t *p, uint8_t major, uint64_t v)
{
	int i, n;

	major <<= 5;
	if (v < 24) {
		p[0] = major | (uint8_t)v;
		return 1;
	}
	n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffull ? 4 : 8;
	p[0] = major | (n == 1 ? 24 : n == 2 ? 25 : n == 4 ? 26 : 27);
	for (i = 0; i < n; i++)
		p[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
	return 1 + (size_t)n;
}

static void digest(const struct kvev *ev, const uint8_t *in, size_t n, uint8_t *out)
{
	if (ev->p.hash == KVEV_HASH_SHA256_CBOR) {
		unsigned int len;

		/* cannot fail on a fetched digest and an allocated context */
		EVP_DigestInit_ex2(ev->mdctx, ev->md, NULL);
		EVP_DigestUpdate(ev->mdctx, in, n);
		EVP_DigestFinal_ex(ev->mdctx, out, &len);
	} else {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, XXH3_128bits(in, n));
		memcpy(out, c.digest, sizeof(c.digest));
	}
}

/**
 * kvev_block_hash() - vLLM's hash_block_tokens() of one full block
 * @ev: the publisher (its hash, seed and block size)
 * @parent: the hash of the block before, kvev_hash_bytes() bytes; NULL:
 *	the first block (NONE_HASH)
 * @tok: the block's page_size token ids
 * @out: the hash, kvev_hash_bytes() bytes
 *
 * Return: 0.
 */
int kvev_block_hash(const struct kvev *ev, const uint8_t *parent, const uint32_t *tok,
		    uint8_t *out)
{
	uint8_t *p = ev->cbor;
	uint32_t i;

	*p++ = 0x83;				/* (parent, tokens, extra_keys) */
	p += cbor_head(p, 2, ev->hlen);
	memcpy(p, parent ? parent : ev->none_hash, ev->hlen);
	p += ev->hlen;
	p += cbor_head(p, 4, ev->p.page_size);
	for (i = 0; i < ev->p.page_size; i++)
		p += cbor_head(p, 0, tok[i]);
	*p++ = 0xf6;				/* None */
	digest(ev, ev->cbor, (size_t)(p - ev->cbor), out);
	return 0;
}

/** kvev_hash_bytes() - bytes of a block hash: 32 (sha256) or 16 (xxh3-128) */
uint32_t kvev_hash_bytes(const struct kvev *ev)
{
	return ev->hlen;
}

/* ---- the table of pages, by kvmm key (linear probing) ---- */

/* The most slots kvev_create() makes the tables with (24 MiB); they grow from there. */
#define TABLE_MADE_MAX	(1u << 18)

/*
 * Zeroed room for a table read before it is written: calloc() maps a
 * large block to the shared zero page on the first read, and the first
 * write to each 4 KiB then copies it and flushes the TLB of every CPU
 * the process runs on (an interrupt to each, the engine's included).
 * Written here first, each page faults in once; a table of 2 MiB or
 * more is asked for huge pages, which its random probes also want.
 */
static void *table_alloc(size_t n, size_t size)
{
	size_t bytes = n * size;
	void *p;

	if (size && n > (SIZE_MAX - HUGE_BYTES) / size)
		return NULL;
	if (bytes < HUGE_BYTES) {
		bytes = (bytes + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
		p = aligned_alloc(CACHE_LINE, bytes);
	} else
		p = kvev_huge_alloc(&bytes);
	if (p)
		memset(p, 0, bytes);
	return p;
}

static struct kvev_ent *ent_lookup(const struct kvev *ev, const struct kvmm_key *k)
{
	uint64_t i;

	for (i = k->lo & ev->mask;; i = (i + 1) & ev->mask) {
		struct kvev_ent *e = &ev->ents[i];

		if (!e->lo && !e->hi)
			return NULL;
		if (e->lo == k->lo && e->hi == k->hi)
			return e;
	}
}

static int ent_grow(struct kvev *ev)
{
	uint64_t n = (ev->mask + 1) * 2, i, j;
	struct kvev_ent *ents = table_alloc(n, sizeof(*ents));

	if (!ents)
		return -ENOMEM;
	for (i = 0; i <= ev->mask; i++) {
		const struct kvev_ent *e = &ev->ents[i];

		if (!e->lo && !e->hi)
			continue;
		for (j = e->lo & (n - 1); ents[j].lo || ents[j].hi; j = (j + 1) & (n - 1))
			;
		ents[j] = *e;
	}
	free(ev->ents);
	ev->ents = ents;
	ev->mask = n - 1;
	return 0;
}

/* ---- the pages by vLLM hash and namespace (linear probing) ---- */

static uint64_t rev_h(const uint8_t *hash)
{
	uint64_t h;

	memcpy(&h, hash, sizeof(h));
	return h;
}

static uint64_t rev_home(uint64_t h, uint32_t ns, uint64_t mask)
{
	return (h ^ (ns * 0x9e3779b97f4a7c15ull)) & mask;
}

/* The slot of the page @hash names in @ns, or NULL. */
static struct kvev_rev *rev_find(const struct kvev *ev, const uint8_t *hash, uint32_t ns)
{
	uint64_t h = rev_h(hash), i;

	for (i = rev_home(h, ns, ev->rmask); ev->revs[i].used; i = (i + 1) & ev->rmask) {
		struct kvev_rev *r = &ev->revs[i];
		const struct kvev_ent *e;

		if (r->h != h || r->ns != ns)
			continue;
		e = ent_lookup(ev, &r->key);
		if (e && !memcmp(e->hash, hash, ev->hlen))
			return r;
	}
	return NULL;
}

static void rev_insert(struct kvev_rev *revs, uint64_t mask, const struct kvev_rev *r)
{
	uint64_t i;

	for (i = rev_home(r->h, r->ns, mask); revs[i].used; i = (i + 1) & mask)
		;
	revs[i] = *r;
}

static int rev_add(struct kvev *ev, const uint8_t *hash, uint32_t ns, const struct kvmm_key *k)
{
	struct kvev_rev r = { .h = rev_h(hash), .ns = ns, .used = 1, .key = *k };

	if (!ev->revs)
		return 0;
	if (ev->nr * 2 > ev->rmask + 1) {	/* ev->nr counts this one already */
		uint64_t n = (ev->rmask + 1) * 2, i;
		struct kvev_rev *revs = table_alloc(n, sizeof(*revs));

		if (!revs)
			return -ENOMEM;
		for (i = 0; i <= ev->rmask; i++)
			if (ev->revs[i].used)
				rev_insert(revs, n - 1, &ev->revs[i]);
		free(ev->revs);
		ev->revs = revs;
		ev->rmask = n - 1;
	}
	rev_insert(ev->revs, ev->rmask, &r);
	return 0;
}

/* Remove the slot of key @k (its hash @hash, in @ns), with backward shift. */
static void rev_del(struct kvev *ev, const uint8_t *hash, uint32_t ns, const struct kvmm_key *k)
{
	uint64_t h = rev_h(hash), i, j, home;

	if (!ev->revs)
		return;
	for (i = rev_home(h, ns, ev->rmask); ev->revs[i].used; i = (i + 1) & ev->rmask)
		if (ev->revs[i].key.lo == k->lo && ev->revs[i].key.hi == k->hi)
			break;
	if (!ev->revs[i].used)
		return;
	for (j = (i + 1) & ev->rmask; ev->revs[j].used; j = (j + 1) & ev->rmask) {
		home = rev_home(ev->revs[j].h, ev->revs[j].ns, ev->rmask);
		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			ev->revs[i] = ev->revs[j];
			i = j;
		}
	}
	ev->revs[i].used = 0;
}

/*
 * ---- the token ids of the pages in the table (stored_tokens) ----
 *
 * A page's token ids are kept as the bytes a BlockStored carries them
 * in (a 16-bit length, then each id as kvev_put_uint() writes it), so that
 * the BlockStored of a demotion or promotion, most of what a tiered
 * cache publishes, copies them instead of writing each id again.
 *
 * Moves are looked up at random, one cache miss per line a page's
 * bytes touch: a slot starts on a cache line (whole lines, on huge
 * pages), so that the ids of a page of 16 (about 50 bytes) are one
 * line, not the two that a slot straddling lines costs; and the free
 * slots are a stack of their numbers, which taking one reads in order,
 * not a chain through the slots, which read one more line at random.
 */

/* Give slot @slot (slot + 1) back. */
static void tok_free(struct kvev *ev, uint32_t slot)
{
	ev->tfree[ev->ntfree++] = slot;
}

/* Room for @n slots (all of them free, as the table grows).  Return: 0 or -ENOMEM. */
static int tok_grow(struct kvev *ev, uint32_t n)
{
	uint32_t *f;
	uint8_t *t;
	uint32_t i;

	if (n <= ev->ntoks)	/* 2^31 pages named: no more */
		return -ENOMEM;
	f = realloc(ev->tfree, (size_t)n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	ev->tfree = f;
	t = table_alloc(n, ev->tok_stride);
	if (!t)
		return -ENOMEM;
	if (ev->toks)
		memcpy(t, ev->toks, (size_t)ev->ntoks * ev->tok_stride);
	free(ev->toks);
	ev->toks = t;
	for (i = n; i > ev->ntoks; i--)
		tok_free(ev, i);
	ev->ntoks = n;
	return 0;
}

/* A slot for a page's token ids.  Return: slot + 1, or 0 with no memory. */
static uint32_t tok_alloc(struct kvev *ev)
{
	if (!ev->ntfree && tok_grow(ev, ev->ntoks ? ev->ntoks * 2 : 1024))
		return 0;
	return ev->tfree[--ev->ntfree];
}

/* Keep @tok, a page's token ids, in slot @slot. */
static void tok_set(struct kvev *ev, uint32_t slot, const uint32_t *tok)
{
	uint8_t *p = kvev_tok_at(ev, slot), *q = p + sizeof(uint16_t);
	uint16_t len;
	uint32_t i;

	for (i = 0; i < ev->p.page_size; i++)
		q += kvev_put_uint(q, tok[i]);
	len = (uint16_t)(q - p - sizeof(len));
	memcpy(p, &len, sizeof(len));
}

/*
 * Put page @k (its hash @hash, in @ns) in the table on @tier; with
 * stored_tokens, its token ids @tok (NULL: those it has).
 */
static int ent_put(struct kvev *ev, const struct kvmm_key *k, const uint8_t *hash,
		   uint32_t ns, uint8_t tier, const uint32_t *tok)
{
	struct kvev_ent *e = ent_lookup(ev, k);
	uint32_t slot = 0;
	uint64_t i;

	if (e) {
		e->tier = tier;
		return 0;
	}
	if (ev->p.stored_tokens && tok) {
		slot = tok_alloc(ev);
		if (!slot)
			return -ENOMEM;
		tok_set(ev, slot, tok);
	}

	if ((ev->nr + 1) * 2 > ev->mask + 1 && ent_grow(ev))
		goto out_free_tok;
	for (i = k->lo & ev->mask; ev->ents[i].lo || ev->ents[i].hi; i = (i + 1) & ev->mask)
		;
	e = &ev->ents[i];
	e->lo = k->lo;
	e->hi = k->hi;
	e->ns = ns;
	e->tier = tier;
	e->tok = slot;
	memcpy(e->hash, hash, ev->hlen);
	ev->nr++;
	if (rev_add(ev, hash, ns, k)) {
		ev->nr--;
		e->lo = e->hi = 0;	/* the last slot of its run: nothing to shift */
		goto out_free_tok;
	}
	return 0;

out_free_tok:
	if (slot)
		tok_free(ev, slot);
	return -ENOMEM;
}

/* Delete with backward shift, so that no tombstones build up. */
static void ent_del(struct kvev *ev, const struct kvmm_key *k)
{
	struct kvev_ent *e = ent_lookup(ev, k);
	uint64_t i, j, home;

	if (!e)
		return;
	if (e->tok)
		tok_free(ev, e->tok);
	rev_del(ev, e->hash, e->ns, k);
	i = (uint64_t)(e - ev->ents);
	for (j = (i + 1) & ev->mask; ev->ents[j].lo || ev->ents[j].hi; j = (j + 1) & ev->mask) {
		home = ev->ents[j].lo & ev->mask;
		/* move j back to i unless its home lies cyclically in (i, j] */
		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			ev->ents[i] = ev->ents[j];
			i = j;
		}
	}
	ev->ents[i].lo = ev->ents[i].hi = 0;
	ev->nr--;
}

/* ---- events in, messages out ---- */

/*
 * The vLLM hash of the page before @e's first into @out: NONE_HASH's
 * stand-in NULL for a prompt's first page.  Return: false when the
 * publisher never saw that page.
 */
static bool parent_hash(const struct kvev *ev, const struct kvmm_cache_event *e,
			const uint8_t **out)
{
	const struct kvev_ent *pe;

	*out = NULL;
	if (!e->parent.lo && !e->parent.hi)
		return true;
	pe = ent_lookup(ev, &e->parent);
	if (pe)
		*out = pe->hash;
	return pe != NULL;
}

/*
 * Look up @e's pages into ev->found (NULL: not in the table).  Their
 * slots (and their parent's) are fetched first, all of them, and then
 * the token ids of those found (@tok NULL), so that the cache misses of
 * a few hundred random pages overlap instead of following one another.
 */
static void page_lookup(struct kvev *ev, const struct kvmm_cache_event *e, const uint32_t *tok)
{
	const struct kvmm_key *keys = (const struct kvmm_key *)(e + 1);
	uint32_t j;

	__builtin_prefetch(&ev->ents[e->parent.lo & ev->mask]);
	for (j = 0; j < e->pages; j++)
		__builtin_prefetch(&ev->ents[keys[j].lo & ev->mask]);
	for (j = 0; j < e->pages; j++) {
		struct kvev_ent *pe = ent_lookup(ev, &keys[j]);

		ev->found[j] = pe;
		if (pe && pe->tok && !tok)
			__builtin_prefetch(kvev_tok_at(ev, pe->tok));
	}
}

/*
 * The hashes of @e's pages (looked up: page_lookup()) into ev->hashes:
 * those it knows from the table, the others chained from the page
 * before, hashed from @tok (NULL: the event carries no token ids,
 * stored_tokens, and then every page must be in the table with its
 * own).  A page already named keeps its name even where its parent has
 * gone (a subtree is removed parent first).  Return: false when some
 * page cannot be named.
 */
static bool page_hashes(struct kvev *ev, const struct kvmm_cache_event *e, const uint8_t *parent,
			bool parent_known, const uint32_t *tok)
{
	uint32_t j, ps = ev->p.page_size;

	if (!tok && (uint64_t)e->pages * ps > ev->ntokmax)
		return false;
	for (j = 0; j < e->pages; j++) {
		const struct kvev_ent *pe = ev->found[j];
		uint8_t *hj = ev->hashes + (size_t)j * ev->hlen;

		if (pe)
			memcpy(hj, pe->hash, ev->hlen);
		else if (tok && (j || parent_known))
			kvev_block_hash(ev, j ? hj - ev->hlen : parent, tok + (size_t)j * ps, hj);
		else
			return false;
		if (!tok && !pe->tok)
			return false;
	}
	return true;
}

/* Whether @e carries its token ids (with stored_tokens, STORED events only). */
static bool has_tokens(const struct kvev *ev, const struct kvmm_cache_event *e)
{
	return !ev->p.stored_tokens || e->type == KVMM_EVENT_STORED;
}

/* One kvmm event: the pages' hashes, then BlockStored / BlockRemoved. */
static int publish_one(struct kvev *ev, const struct kvmm_cache_event *e)
{
	const struct kvmm_key *keys = (const struct kvmm_key *)(e + 1);
	const uint32_t *tok = has_tokens(ev, e) ? (const uint32_t *)(keys + e->pages) : NULL;
	const uint8_t *parent;
	uint32_t j;
	bool known;
	int ret;

	/*
	 * Room for every page first: the entries found (@parent's hash,
	 * ev->found) stay where they are while the new ones go in.
	 */
	while (e->type != KVMM_EVENT_REMOVED && (ev->nr + e->pages) * 2 > ev->mask + 1)
		if (ent_grow(ev))
			return -ENOMEM;
	page_lookup(ev, e, tok);
	known = parent_hash(ev, e, &parent);
	if (!page_hashes(ev, e, parent, known, tok)) {
		ev->st.unnamed++;
		if (e->type == KVMM_EVENT_REMOVED)
			for (j = 0; j < e->pages; j++)
				ent_del(ev, &keys[j]);
		return 0;
	}
	if (ev->nev && ev->ns != e->ns) {
		ret = kvev_flush_batch(ev);
		if (ret)
			return ret;
	}
	ev->ns = e->ns;
	if (e->type != KVMM_EVENT_STORED)
		kvev_pack_removed(ev, ev->hashes, e->pages, e->tier);
	if (e->type != KVMM_EVENT_REMOVED)
		kvev_pack_stored(ev, ev->hashes, e->pages, parent, tok, e->to);
	if (e->type == KVMM_EVENT_REMOVED) {
		for (j = 0; j < e->pages; j++)
			ent_del(ev, &keys[j]);
		return 0;
	}
	for (j = 0; j < e->pages; j++) {
		if (ev->found[j])
			ev->found[j]->tier = e->to;
		else if (ent_put(ev, &keys[j], ev->hashes + (size_t)j * ev->hlen, e->ns, e->to,
				 tok ? tok + (size_t)j * ev->p.page_size : NULL))
			return -ENOMEM;
	}
	return 0;
}

/**
 * kvev_publish() - publish one EVENTS output (read with KVMM_EVENTS_TOKENS)
 * @ev: the publisher
 * @hdr: the output: header, then the events with their keys and tokens
 *
 * One message per run of events of one namespace.
 *
 * Return: 0 or -errno (-ENOMEM, or the socket's error).
 */
int kvev_publish(struct kvev *ev, const struct kvmm_events_hdr *hdr)
{
	const char *p = (const char *)(hdr + 1);
	uint32_t i;
	int ret = 0;

	pthread_mutex_lock(&ev->lock);
	ev->st.lost += hdr->lost;
	for (i = 0; i < hdr->nr && !ret; i++) {
		const struct kvmm_cache_event *e = (const void *)p;
		uint64_t tok_bytes = has_tokens(ev, e) ?
				     ((uint64_t)e->pages * ev->p.page_size * 4 + 15) & ~15ull : 0;

		if (e->tier >= KVMM_NR_TIERS || e->to >= KVMM_NR_TIERS || e->type >= KVMM_EVENT_LAST ||
		    !e->pages || e->pages > KVMM_EVENT_MAX_PAGES)
			ret = -EINVAL;
		else
			ret = publish_one(ev, e);
		p += sizeof(*e) + e->pages * sizeof(struct kvmm_key) + tok_bytes;
		if (ev->p.yield_pages && (ev->unyielded += e->pages) >= ev->p.yield_pages) {
			ev->unyielded = 0;
			ev->st.yields++;
			sched_yield();
		}
	}
	if (!ret)
		ret = kvev_flush_batch(ev);
	pthread_mutex_unlock(&ev->lock);
	return ret;
}

/**
 * kvev_lookup() - which tiers hold a prompt's blocks, named by vLLM hashes
 * @ev: the publisher
 * @ns: the namespace
 * @hashes: @n block hashes of kvev_hash_bytes() bytes, in prompt order
 * @n: how many
 * @tokens: out, KVMM_NR_TIERS counts: tokens of the leading run of blocks
 *	the publisher has seen stored in @ns and not removed, per tier
 *
 * As published so far: what the context did since its last read is not
 * in it yet.  A publisher made without kvev_params.index_hashes finds
 * nothing.
 *
 * Context: takes the publisher's lock, never the context's.
 * Return: the blocks of the leading run.
 */
uint32_t kvev_lookup(struct kvev *ev, uint32_t ns, const uint8_t *hashes, uint32_t n,
		     uint32_t *tokens)
{
	uint32_t i;

	memset(tokens, 0, KVMM_NR_TIERS * sizeof(*tokens));
	pthread_mutex_lock(&ev->lock);
	for (i = 0; ev->revs && i < n; i++) {
		const struct kvev_rev *r = rev_find(ev, hashes + (size_t)i * ev->hlen, ns);

		if (!r)
			break;
		tokens[ent_lookup(ev, &r->key)->tier] += ev->p.page_size;
	}
	pthread_mutex_unlock(&ev->lock);
	return i;
}

/**
 * kvev_pump() - read a context's new events and publish them
 * @ev: the publisher
 * @ctx: the context (events on, with token ids: KVMM_SET_EVENT_TOKENS)
 * @cursor: in, the first event wanted; out, the next
 * @buf: room for the EVENTS output, 8-byte aligned
 * @len: its bytes, KVMM_EVENTS_TOKENS_LEN_MIN at least
 *
 * Context: takes ctx->lock (kvmm_ioctl()) while it copies the events.
 * Return: events published (0: none new), or -errno.
 */
int kvev_pump(struct kvev *ev, struct kvmm_ctx *ctx, uint64_t *cursor, void *buf, uint32_t len)
{
	struct kvmm_iovec iov = { buf, len };
	struct kvmm_sqe sqe;
	int res, ret;

	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_events(&sqe, *cursor, KVMM_EVENTS_TOKENS, 0, 0, 0, len);
	res = kvmm_ioctl(ctx, &sqe, &iov, 1);
	if (res < 0)
		return res;
	*cursor = ((const struct kvmm_events_hdr *)buf)->next;
	ret = kvev_publish(ev, buf);
	return ret ? ret : res;
}

/** kvev_get_stats() - what @ev did so far, into @st */
void kvev_get_stats(const struct kvev *ev, struct kvev_stats *st)
{
	*st = ev->st;
}

static int bind_socket(void *zctx, int type, const char *endpoint, int hwm, void **out)
{
	void *s = zmq_socket(zctx, type);
	int linger = 0;

	if (!s)
		return -zmq_errno();
	if (zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) || zmq_bind(s, endpoint)) {
		int ret = -zmq_errno();

		zmq_close(s);
		return ret;
	}
	*out = s;
	return 0;
}

/**
 * kvev_create() - a publisher, its sockets bound
 * @p: what it publishes where (see struct kvev_params)
 * @out: the publisher
 *
 * Return: 0; -EINVAL for a bad hash, page size or endpoint; -EADDRINUSE
 * and the like from binding; -ENOMEM.
 */
int kvev_create(const struct kvev_params *p, struct kvev **out)
{
	const char *seed = p->seed ? p->seed : KVEV_SEED_DEFAULT;
	uint8_t head[9];
	uint64_t slots;
	size_t hn, sn = strlen(seed);
	uint8_t *sbuf;
	struct kvev *ev;
	int ret = -ENOMEM;

	if (p->hash >= NR_KVEV_HASH || !p->page_size || p->page_size > KVMM_MAX_PAGE_SIZE ||
	    !p->endpoint)
		return -EINVAL;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->p = *p;
	if (!ev->p.buffer_steps)
		ev->p.buffer_steps = KVEV_BUFFER_STEPS;
	if (!ev->p.hwm)
		ev->p.hwm = KVEV_HWM;
	if (!ev->p.prepare_bytes)
		ev->p.prepare_bytes = KVEV_PREPARE_BYTES;
	ev->hlen = p->hash == KVEV_HASH_SHA256_CBOR ? 32 : 16;
	ev->topic = strdup(p->topic ? p->topic : KVEV_TOPIC_DEFAULT);
	ev->cbor = malloc(32 + HASH_MAX + 5 * (size_t)p->page_size);
	ev->hashes = malloc((size_t)KVMM_EVENT_MAX_PAGES * HASH_MAX);
	ev->found = malloc(KVMM_EVENT_MAX_PAGES * sizeof(*ev->found));
	/* an event that carries token ids is cut at KVMM_EVENT_MAX_TOKENS (one page at least) */
	ev->ntokmax = p->page_size > KVMM_EVENT_MAX_TOKENS ? p->page_size : KVMM_EVENT_MAX_TOKENS;
	ev->tok_stride = (uint32_t)((sizeof(uint16_t) + 5 * (size_t)p->page_size + CACHE_LINE - 1) &
				    ~(size_t)(CACHE_LINE - 1));
	/* made for the pages the tiers hold, half full, up to TABLE_MADE_MAX slots */
	for (slots = 1024; slots < TABLE_MADE_MAX && slots < 2 * p->pages; slots *= 2)
		;
	ev->ents = table_alloc(slots, sizeof(*ev->ents));
	ev->mask = slots - 1;
	if (p->index_hashes) {
		ev->revs = table_alloc(slots, sizeof(*ev->revs));
		ev->rmask = slots - 1;
	}
	pthread_mutex_init(&ev->lock, NULL);
	ev->ring = table_alloc(ev->p.buffer_steps, sizeof(*ev->ring));
	kvev_make_tails(ev);
	pthread_mutex_init(&ev->pool.lock, NULL);
	kvev_batch_reset(ev);
	ev->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	ev->mdctx = EVP_MD_CTX_new();
	sbuf = malloc(sizeof(head) + sn);
	if (!ev->topic || !ev->cbor || !ev->hashes || !ev->found || !ev->ents ||
	    (p->index_hashes && !ev->revs) ||
	    !ev->ring ||
	    !ev->md || !ev->mdctx || !sbuf)
		goto out_free;
	/* and the slots of the pages' token ids, as many as the tables' pages */
	if (p->stored_tokens && p->pages &&
	    tok_grow(ev, (uint32_t)(p->pages < TABLE_MADE_MAX / 2 ? p->pages : TABLE_MADE_MAX / 2)))
		goto out_free;
	/* NONE_HASH = H(cbor(seed)): the seed is a text string */
	hn = cbor_head(sbuf, 3, sn);
	memcpy(sbuf + hn, seed, sn);
	digest(ev, sbuf, hn + sn, ev->none_hash);
	free(sbuf);
	sbuf = NULL;
	if (ev->p.prepare_bytes > (uint64_t)UINT32_MAX * CHUNK_BYTES ||
	    kvev_pool_prepare(&ev->pool, (uint32_t)((ev->p.prepare_bytes + CHUNK_BYTES - 1) / CHUNK_BYTES))) {
		ret = ev->p.prepare_bytes > (uint64_t)UINT32_MAX * CHUNK_BYTES ? -EINVAL : -ENOMEM;
		goto out_free;
	}
	ev->zctx = zmq_ctx_new();
	if (!ev->zctx)
		goto out_free;
	ret = bind_socket(ev->zctx, ZMQ_PUB, p->endpoint, (int)ev->p.hwm, &ev->pub);
	if (ret)
		goto out_free;
	if (p->replay) {
		/* room for a whole replay and its end marker, as vLLM */
		ret = bind_socket(ev->zctx, ZMQ_ROUTER, p->replay,
				  (int)(2 * (ev->p.buffer_steps + 1)), &ev->router);
		if (ret)
			goto out_free;
	}
	*out = ev;
	return 0;

out_free:
	free(sbuf);
	kvev_destroy(ev);
	return ret == -ENOENT || ret == -EPROTONOSUPPORT ? -EINVAL : ret;
}

/** kvev_destroy() - close the sockets and free @ev (NULL: nothing) */
void kvev_destroy(struct kvev *ev)
{
	uint32_t i;

	if (!ev)
		return;
	if (ev->pub)
		zmq_close(ev->pub);
	if (ev->router)
		zmq_close(ev->router);
	if (ev->zctx)
		zmq_ctx_term(ev->zctx);
	for (i = 0; ev->ring && i < ev->p.buffer_steps; i++)
		if (ev->ring[i].chunk)
			kvev_chunk_put(ev->ring[i].chunk);
	free(ev->ring);
	if (ev->chunk)
		kvev_chunk_put(ev->chunk);
	kvev_pool_drain(&ev->pool);
	pthread_mutex_destroy(&ev->pool.lock);
	EVP_MD_CTX_free(ev->mdctx);
	EVP_MD_free(ev->md);
	free(ev->ents);
	free(ev->revs);
	pthread_mutex_destroy(&ev->lock);
	free(ev->hashes);
	free(ev->found);
	free(ev->toks);
	free(ev->tfree);
	free(ev->cbor);
	free(ev->topic);
	free(ev);
}

/* ---- a thread that publishes a context's events (kvmmd, an embedding engine) ---- */

#define PUMP_BYTES	(KVMM_EVENTS_TOKENS_LEN_MIN * 4)

struct kvev_thread {
	struct kvmm_ctx *ctx;
	struct kvev *ev;
	pthread_t thread;
	pthread_mutex_t lock;
	bool stop;
	uint32_t interval_ms;
	uint64_t cursor;
	void *buf;
	int err;		/* the first error, for kvev_thread_stop() */
};

/* Publish everything new.  Return: 0 or -errno. */
static int thread_drain(struct kvev_thread *t)
{
	int ret;

	do
		ret = kvev_pump(t->ev, t->ctx, &t->cursor, t->buf, PUMP_BYTES);
	while (ret > 0);
	return ret;
}

static void *kvev_thread_fn(void *arg)
{
	struct kvev_thread *t = arg;
	bool stop = false;
	int ret;

	while (!stop) {
		ret = thread_drain(t);
		/* the wait between reads is spent answering replay requests */
		if (!ret)
			ret = kvev_serve_replay(t->ev, (int)t->interval_ms);
		pthread_mutex_lock(&t->lock);
		if (ret < 0 && !t->err)
			t->err = ret;
		stop = t->stop;
		pthread_mutex_unlock(&t->lock);
	}
	return NULL;
}

/**
 * kvev_thread_start() - publish @ctx's events from a thread of their own
 * @ctx: the context; its events are turned on here (KVMM_SET_EVENT_TOKENS,
 *	and KVMM_SET_EVENTS @events_bytes unless they are on already)
 * @p: the publisher's parameters (page_size is taken from @ctx)
 * @events_bytes: the event buffer's size when it has none
 * @interval_ms: how often the buffer is read; replay requests are
 *	answered in between
 * @out: the thread
 *
 * The engine never waits for the thread: events wait in @ctx's buffer,
 * which the thread drains one EVENTS read at a time, under the context's
 * lock only while it copies.  Unless @p says otherwise, the publisher's
 * tables are made for the pages of @ctx's tiers, as much memory is
 * made ready for the messages kept for replay as the event buffer has,
 * and the thread offers its CPU every KVEV_YIELD_PAGES pages it
 * publishes (kvev_params.yield_pages).
 *
 * Return: 0, or -errno (the events' settings, the sockets, the thread).
 */
int kvev_thread_start(struct kvmm_ctx *ctx, const struct kvev_params *p, uint64_t events_bytes,
		      uint32_t interval_ms, struct kvev_thread **out)
{
	struct kvmm_sqe tokens = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS,
				   .arg2 = KVMM_EVENT_TOKENS_STORED };
	struct kvmm_sqe bytes = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENTS,
				  .arg2 = events_bytes };
	struct kvev_params pp = *p;
	uint64_t st[NR_KVMM_STATS];
	struct kvev_thread *t;
	int ret;

	ret = kvmm_stats(ctx, st, NR_KVMM_STATS);
	if (ret < 0)
		return ret;
	if (st[KVMM_STAT_EVENTS_BYTES] < KVMM_EVENTS_TOKENS_BUF_MIN && !events_bytes)
		return -EINVAL;
	/*
	 * A buffer too small for tokens is replaced: the old one goes first
	 * and tokens are turned on before the new one is made, so that it
	 * is allocated (and touched) once, not twice.
	 */
	if (st[KVMM_STAT_EVENTS_BYTES] < KVMM_EVENTS_TOKENS_BUF_MIN) {
		bytes.arg2 = 0;
		ret = kvmm_ioctl(ctx, &bytes, NULL, 0);
		bytes.arg2 = events_bytes;
		if (ret)
			return ret;
	}
	ret = kvmm_ioctl(ctx, &tokens, NULL, 0);
	if (!ret && st[KVMM_STAT_EVENTS_BYTES] < KVMM_EVENTS_TOKENS_BUF_MIN)
		ret = kvmm_ioctl(ctx, &bytes, NULL, 0);
	if (ret)
		return ret;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ctx = ctx;
	t->interval_ms = interval_ms;
	pp.page_size = kvmm_page_size(ctx);
	pp.pages = st[KVMM_STAT_PAGES_TOTAL] + st[KVMM_STAT_HOST_PAGES_TOTAL] +
		   st[KVMM_STAT_NVME_PAGES_TOTAL];
	/* the messages the event buffer's events make, ready as the buffer is */
	if (!pp.prepare_bytes)
		pp.prepare_bytes = st[KVMM_STAT_EVENTS_BYTES] >= KVMM_EVENTS_TOKENS_BUF_MIN ?
				   st[KVMM_STAT_EVENTS_BYTES] : events_bytes;
	pp.stored_tokens = true;
	if (!pp.yield_pages)
		pp.yield_pages = KVEV_YIELD_PAGES;
	t->buf = aligned_alloc(8, PUMP_BYTES);
	ret = t->buf ? kvev_create(&pp, &t->ev) : -ENOMEM;
	if (ret)
		goto out_free;
	pthread_mutex_init(&t->lock, NULL);
	ret = -pthread_create(&t->thread, NULL, kvev_thread_fn, t);
	if (ret) {
		pthread_mutex_destroy(&t->lock);
		kvev_destroy(t->ev);
		goto out_free;
	}
	pthread_setname_np(t->thread, "kvmm-kvevents");	/* for top -H and perf; a hint */
	*out = t;
	return 0;

out_free:
	free(t->buf);
	free(t);
	return ret;
}

/** kvev_thread_publisher() - the publisher of thread @t (kvev_lookup()) */
struct kvev *kvev_thread_publisher(struct kvev_thread *t)
{
	return t->ev;
}

/**
 * kvev_thread_stop() - publish what is left, stop, close the sockets
 * @t: the thread (NULL: nothing)
 * @st: out, what it did (may be NULL)
 *
 * Return: 0, or the first error the thread met.
 */
int kvev_thread_stop(struct kvev_thread *t, struct kvev_stats *st)
{
	int ret;

	if (!t)
		return 0;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	ret = thread_drain(t);
	if (st)
		kvev_get_stats(t->ev, st);
	kvev_destroy(t->ev);
	pthread_mutex_destroy(&t->lock);
	ret = t->err ? t->err : ret;
	free(t->buf);
	free(t);
	return ret;
}
