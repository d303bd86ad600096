// SPDX-License-Identifier: MIT
/*
 * tools/lib/kvevents_pack.c - vLLM's KV event classes as msgpack, as the
 * KV events publisher writes them into the message being built
 * (kvevents_buf.c).
 */
#include <string.h>

#include "kvevents_int.h"

/* ---- msgpack: the structures msgspec makes of vLLM's classes ---- */

/*
 * The msgpack the publisher writes is written here byte by byte, as
 * msgpack-c writes it (and msgspec, which vLLM's routers decode with):
 * every value in its shortest form, strings shorter than 32 bytes as
 * fixstr.  What never changes within an event is one constant.
 */

/* An array head of @n elements into @p.  Return: its bytes, 5 at most. */
static size_t put_array_head(uint8_t *p, uint32_t n)
{
	if (n < 16) {
		p[0] = (uint8_t)(0x90 | n);	/* fixarray */
		return 1;
	}
	if (n < 0x10000) {
		p[0] = 0xdc;			/* array 16 */
		p[1] = (uint8_t)(n >> 8);
		p[2] = (uint8_t)n;
		return 3;
	}
	p[0] = 0xdd;				/* array 32 */
	p[1] = (uint8_t)(n >> 24);
	p[2] = (uint8_t)(n >> 16);
	p[3] = (uint8_t)(n >> 8);
	p[4] = (uint8_t)n;
	return 5;
}

/**
 * kvev_put_uint() - an unsigned int into @p, as msgpack_pack_uint32() writes it
 * @p: where, 5 bytes of room
 * @t: the value
 *
 * Return: its bytes, 5 at most.
 */
size_t kvev_put_uint(uint8_t *p, uint32_t t)
{
	if (t < 0x80) {
		p[0] = (uint8_t)t;
		return 1;
	}
	if (t < 0x100) {
		p[0] = 0xcc;
		p[1] = (uint8_t)t;
		return 2;
	}
	if (t < 0x10000) {
		p[0] = 0xcd;
		p[1] = (uint8_t)(t >> 8);
		p[2] = (uint8_t)t;
		return 3;
	}
	p[0] = 0xce;
	p[1] = (uint8_t)(t >> 24);
	p[2] = (uint8_t)(t >> 16);
	p[3] = (uint8_t)(t >> 8);
	p[4] = (uint8_t)t;
	return 5;
}

/* @n token ids as an array of uints: one reserve for the worst case. */
static void pack_tokens(struct kvev *ev, const uint32_t *tok, uint64_t n)
{
	struct kvev_buf *b = &ev->out;
	uint8_t *p;
	uint64_t i;

	if (kvev_buf_reserve(ev, 5 + 5 * n))
		return;
	p = (uint8_t *)b->data + b->len;
	p += put_array_head(p, (uint32_t)n);
	for (i = 0; i < n; i++)
		p += kvev_put_uint(p, tok[i]);
	b->len = (size_t)((char *)p - b->data);
}

/* The token ids of @n pages found in the table (ev->found), from their slots. */
static void pack_token_slots(struct kvev *ev, uint32_t n)
{
	struct kvev_buf *b = &ev->out;
	uint8_t *p;
	uint32_t j;

	if (kvev_buf_reserve(ev, 5 + (size_t)n * 5 * ev->p.page_size))
		return;
	p = (uint8_t *)b->data + b->len;
	p += put_array_head(p, n * ev->p.page_size);
	for (j = 0; j < n; j++) {
		const uint8_t *t = kvev_tok_at(ev, ev->found[j]->tok);
		uint16_t len;

		memcpy(&len, t, sizeof(len));
		memcpy(p, t + sizeof(len), len);
		p += len;
	}
	b->len = (size_t)((char *)p - b->data);
}

static const char *const media[] = {
	[KVMM_TIER_DEVICE] = "GPU", [KVMM_TIER_HOST] = "CPU", [KVMM_TIER_NVME] = "STORAGE",
};

/* The value of "block_hashes": an array of @n bin 8 of ev->hlen bytes each. */
static void pack_hashes(struct kvev *ev, const uint8_t *h, uint32_t n)
{
	struct kvev_buf *b = &ev->out;
	uint8_t *p;
	uint32_t i;

	if (kvev_buf_reserve(ev, 5 + (size_t)n * (2 + ev->hlen)))
		return;
	p = (uint8_t *)b->data + b->len;
	p += put_array_head(p, n);
	for (i = 0; i < n; i++, p += ev->hlen) {
		*p++ = 0xc4;
		*p++ = (uint8_t)ev->hlen;
		memcpy(p, h + (size_t)i * ev->hlen, ev->hlen);
	}
	b->len = (size_t)((char *)p - b->data);
}

/**
 * kvev_make_tails() - the constant ends of @ev's events, per tier
 * @ev: the publisher (kvev_create())
 *
 * What follows the token ids in a BlockStored on each tier, and the
 * medium that ends a BlockRemoved, into ev->stored_tail and
 * ev->removed_tail.
 */
void kvev_make_tails(struct kvev *ev)
{
	uint8_t *p;
	int t;

	for (t = 0; t < KVMM_NR_TIERS; t++) {
		size_t ml = strlen(media[t]);

		p = ev->stored_tail[t];
		memcpy(p, "\xaa" "block_size", 11);
		p += 11;
		p += kvev_put_uint(p, ev->p.page_size);
		memcpy(p, "\xa7" "lora_id" "\xc0" "\xa6" "medium", 16);
		p += 16;
		*p++ = (uint8_t)(0xa0 | ml);
		memcpy(p, media[t], ml);
		p += ml;
		memcpy(p, "\xa9" "lora_name" "\xc0", 11);
		p += 11;
		ev->stored_tail_len[t] = (uint8_t)(p - ev->stored_tail[t]);

		p = ev->removed_tail[t];
		memcpy(p, "\xa6" "medium", 7);
		p += 7;
		*p++ = (uint8_t)(0xa0 | ml);
		memcpy(p, media[t], ml);
		p += ml;
		ev->removed_tail_len[t] = (uint8_t)(p - ev->removed_tail[t]);
	}
}

/**
 * kvev_pack_stored() - a BlockStored onto the message being built
 * @ev: the publisher
 * @h: the pages' hashes, @n of kvev_hash_bytes() bytes
 * @n: how many
 * @parent: the hash of the page before the first; NULL: none
 * @tok: the pages' token ids; NULL: those of the pages found in the
 *	table (ev->found)
 * @tier: the medium they are on
 *
 * BlockStored is a tagged msgspec Struct of 16 fields of which 8 have no
 * default: msgspec writes a map16 head for it whatever the count, so the
 * head is written here as it does, for byte-identical messages.
 */
void kvev_pack_stored(struct kvev *ev, const uint8_t *h, uint32_t n, const uint8_t *parent,
		      const uint32_t *tok, uint8_t tier)
{
	static const char head[] = "\xde\x00\x08" "\xa4" "type" "\xab" "BlockStored"
				   "\xac" "block_hashes";
	static const char par[] = "\xb1" "parent_block_hash";
	static const char toks[] = "\xa9" "token_ids";
	uint8_t bin[2 + HASH_MAX] = { 0xc4, (uint8_t)ev->hlen };

	kvev_buf_put(ev, head, sizeof(head) - 1);
	pack_hashes(ev, h, n);
	kvev_buf_put(ev, par, sizeof(par) - 1);
	if (parent) {
		memcpy(bin + 2, parent, ev->hlen);
		kvev_buf_put(ev, bin, 2 + ev->hlen);
	} else {
		kvev_buf_put(ev, "\xc0", 1);			/* nil */
	}
	kvev_buf_put(ev, toks, sizeof(toks) - 1);
	if (tok)
		pack_tokens(ev, tok, (uint64_t)n * ev->p.page_size);
	else
		pack_token_slots(ev, n);
	kvev_buf_put(ev, ev->stored_tail[tier], ev->stored_tail_len[tier]);
	ev->nev++;
	ev->st.stored++;
}

/**
 * kvev_pack_removed() - a BlockRemoved onto the message being built
 * @ev: the publisher
 * @h: the pages' hashes, @n of kvev_hash_bytes() bytes
 * @n: how many
 * @tier: the medium they left
 */
void kvev_pack_removed(struct kvev *ev, const uint8_t *h, uint32_t n, uint8_t tier)
{
	static const char head[] = "\x83" "\xa4" "type" "\xac" "BlockRemoved"
				   "\xac" "block_hashes";

	kvev_buf_put(ev, head, sizeof(head) - 1);
	pack_hashes(ev, h, n);
	kvev_buf_put(ev, ev->removed_tail[tier], ev->removed_tail_len[tier]);
	ev->nev++;
	ev->st.removed++;
}

/**
 * kvev_pack_head() - KVEventBatch's head: [ts, [@nev events (they follow)
 * @p: where, HDR_ROOM bytes of room
 * @ts: the batch's time stamp, seconds
 * @nev: the events that follow
 *
 * Return: its bytes, HDR_ROOM at most.
 */
size_t kvev_pack_head(uint8_t *p, double ts, uint32_t nev)
{
	uint64_t bits;
	size_t n = 0;
	int i;

	p[n++] = 0x93;				/* fixarray 3 */
	memcpy(&bits, &ts, sizeof(bits));
	p[n++] = 0xcb;				/* float 64 */
	for (i = 7; i >= 0; i--)
		p[n++] = (uint8_t)(bits >> (8 * i));
	return n + put_array_head(p + n, nev);
}

