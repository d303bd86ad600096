/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/kvevents_int.h - what the KV events publisher's files share:
 * the publisher (kvevents.c: vLLM's block hashes, its tables, events in,
 * the thread), the messages it builds and keeps for replay
 * (kvevents_buf.c) and the msgpack they are written in (kvevents_pack.c).
 */
#ifndef KVMM_TOOLS_KVEVENTS_INT_H
#define KVMM_TOOLS_KVEVENTS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include <openssl/evp.h>

#include "kvevents.h"

#define HASH_MAX	32
#define HUGE_BYTES	(2u << 20)	/* a huge page */
#define CACHE_LINE	64
#define TOPIC_MAX	96

/* A page the publisher has seen stored: its vLLM hash and tier. */
struct kvev_ent {
	uint64_t lo, hi;	/* its kvmm key; lo == hi == 0: a free slot */
	uint32_t ns;
	uint8_t tier;
	uint8_t hash[HASH_MAX];
	uint32_t tok;		/* with stored_tokens: its token ids' slot + 1 (kvev_tok_at()) */
};

/* A page by its vLLM hash (the first 8 bytes) and namespace: its kvmm key. */
struct kvev_rev {
	uint64_t h;
	uint32_t ns;
	uint32_t used;
	struct kvmm_key key;
};

/*
 * The message being built, which the packers (kvevents_pack.c) write into
 * (kvev_buf_reserve(), then the bytes): @len bytes
 * at @data, the free end of the chunk being filled (@cap bytes of room
 * there); after HDR_ROOM bytes, its KVEventBatch header is written into
 * once the events are counted.
 */
struct kvev_buf {
	char *data;		/* NULL: no room yet */
	size_t len, cap;
	int err;		/* -ENOMEM once a write did not fit */
};

/*
 * Messages kept for replay, and sent from there (ZMQ takes no copy),
 * are built in place in chunks filled one after the other, as a log: a
 * message that outgrows the room left in its chunk moves, what it has
 * so far, to a new one.  A message goes when its replay slot is taken,
 * in the order they came, so a chunk is free once its last message went
 * and ZMQ's I/O thread is done with all of them.  A chunk counts its
 * holders: the publisher while it fills it, each message kept in it,
 * each message ZMQ still sends from it.
 *
 * Chunks are huge pages where the kernel gives them, and a free one
 * goes back to a pool for the next, up to as many as the publisher made
 * ready when it was created (kvev_params.prepare_bytes): those are
 * touched there, so that the stream's first pass over them does not
 * wait for the kernel to fault and zero fresh memory, and no later pass
 * does either.  A chunk from the pool keeps the bytes of the messages it
 * held before; nothing reads them, as a message is sent and replayed
 * from exactly the bytes written for it.
 */
struct kvev_pool {
	pthread_mutex_t lock;		/* the publisher's thread and ZMQ's I/O thread */
	struct kvev_chunk *free;	/* chained through ->next */
	uint32_t nr, max;
};

struct kvev_chunk {
	atomic_uint refs;
	struct kvev_pool *pool;
	struct kvev_chunk *next;	/* in the pool */
	size_t size;			/* bytes at @data */
	size_t used;			/* by messages kept */
	char data[];
};

#define CHUNK_BYTES	HUGE_BYTES
#define CHUNK_DATA	(CHUNK_BYTES - offsetof(struct kvev_chunk, data))

/* [ts, [events...], rank]: fixarray, float64, array32 at most */
#define HDR_ROOM	(1 + 9 + 5)

/* One message kept for replay: @len bytes at @data, within @chunk. */
struct kvev_msg {
	uint64_t seq;
	char topic[TOPIC_MAX];
	struct kvev_chunk *chunk;
	const char *data;
	size_t len;
};

/**
 * struct kvev - a publisher
 * @p: its parameters (strings owned: @endpoint, @topic copied)
 * @zctx, @pub, @router: the ZMQ context and sockets
 * @none_hash: NONE_HASH, @hlen bytes
 * @cbor: scratch for one block's CBOR
 * @ents: the table of pages, @mask + 1 slots, @nr used
 * @hashes: scratch for one event's page hashes
 * @found: scratch for one event's pages in the table (page_lookup())
 * @md, @mdctx: sha256, fetched once, and a context reused for every block
 * @out: the message being built (msgpack), @nev events after HDR_ROOM
 * @chunk: the chunk messages are built and kept in (NULL: none yet)
 * @pool: free chunks
 * @ns: the namespace of the message being built
 * @ring: messages kept for replay, @p.buffer_steps slots
 * @toks: with @p.stored_tokens, the token ids of the pages in the table,
 *	as the msgpack a BlockStored carries them (kvev_tok_at()): @ntoks slots of
 *	@tok_stride bytes, whole cache lines; the numbers (slot + 1) of the
 *	@ntfree free ones at @tfree, a stack
 * @ntokmax: the most token ids an event that carries none may name
 * @unyielded: pages published since the CPU was last offered (@p.yield_pages)
 * @st: what it did; @st.messages is the next sequence number
 */
struct kvev {
	struct kvev_params p;
	char *topic;
	void *zctx, *pub, *router;
	uint8_t none_hash[HASH_MAX];
	uint32_t hlen;
	uint8_t *cbor;
	struct kvev_ent *ents;
	uint64_t mask, nr;
	struct kvev_rev *revs;		/* @rmask + 1 slots, half full at most; NULL: none */
	uint64_t rmask;
	pthread_mutex_t lock;		/* the tables, between publisher and askers */
	uint8_t *hashes;
	struct kvev_ent **found;
	EVP_MD *md;
	EVP_MD_CTX *mdctx;
	struct kvev_buf out;
	struct kvev_chunk *chunk;
	struct kvev_pool pool;
	uint8_t stored_tail[KVMM_NR_TIERS][64];
	uint8_t removed_tail[KVMM_NR_TIERS][24];
	uint8_t stored_tail_len[KVMM_NR_TIERS], removed_tail_len[KVMM_NR_TIERS];
	uint32_t nev;
	uint32_t ns;
	struct kvev_msg *ring;
	uint8_t *toks;
	uint32_t *tfree;
	uint32_t ntoks, ntfree, tok_stride;
	uint32_t ntokmax;
	uint32_t unyielded;
	struct kvev_stats st;
};

/* A page's token ids, slot @slot (slot + 1) of kvev.toks. */
static inline uint8_t *kvev_tok_at(const struct kvev *ev, uint32_t slot)
{
	return ev->toks + (size_t)(slot - 1) * ev->tok_stride;
}

/* kvevents_buf.c */
void *kvev_huge_alloc(size_t *bytes);
void kvev_chunk_put(struct kvev_chunk *c);
int kvev_pool_prepare(struct kvev_pool *pool, uint32_t nr);
void kvev_pool_drain(struct kvev_pool *pool);
int kvev_buf_reserve(struct kvev *ev, size_t n);
void kvev_buf_put(struct kvev *ev, const void *p, size_t n);
void kvev_batch_reset(struct kvev *ev);
int kvev_flush_batch(struct kvev *ev);

/* kvevents_pack.c */
size_t kvev_put_uint(uint8_t *p, uint32_t t);
size_t kvev_pack_head(uint8_t *p, double ts, uint32_t nev);
void kvev_make_tails(struct kvev *ev);
void kvev_pack_stored(struct kvev *ev, const uint8_t *h, uint32_t n, const uint8_t *parent,
		      const uint32_t *tok, uint8_t tier);
void kvev_pack_removed(struct kvev *ev, const uint8_t *h, uint32_t n, uint8_t tier);

#endif
