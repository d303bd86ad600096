/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/kvevents.h - kvmm's cache events on the wire as vLLM
 * publishes its KV events: msgpack KVEventBatch messages over a ZMQ PUB
 * socket, with a ROUTER socket that replays missed sequence numbers.
 * Used by kvmmd (--kv-events) and by an engine that embeds libkvmm
 * (kvmm-bench replay --kv-events shows how).
 */
#ifndef KVMM_TOOLS_KVEVENTS_H
#define KVMM_TOOLS_KVEVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

/* vLLM's prefix_caching_hash_algo values a C publisher reproduces exactly */
enum kvev_hash {
	KVEV_HASH_SHA256_CBOR,	/* sha256_cbor: 32-byte block hashes */
	KVEV_HASH_XXHASH_CBOR,	/* xxhash_cbor: 16-byte (needs PYTHONHASHSEED) */
	NR_KVEV_HASH
};

extern const char *const kvev_hash_names[NR_KVEV_HASH + 1];

/* vLLM's seed of NONE_HASH when PYTHONHASHSEED is unset (sha256_cbor) */
#define KVEV_SEED_DEFAULT	"vllm-none-hash"
#define KVEV_TOPIC_DEFAULT	"kvmm"
#define KVEV_BUFFER_STEPS	10000	/* batches kept for replay, as vLLM */
#define KVEV_HWM		100000
#define KVEV_PREPARE_BYTES	(8ull << 20)	/* replay buffer made ready */
/* pages a publisher's thread publishes between two offers of its CPU (about 20 us) */
#define KVEV_YIELD_PAGES	128

/**
 * struct kvev_params - what kvev_create() sets up
 * @endpoint: the PUB socket's address, bound (tcp://127.0.0.1:5557,
 *	ipc://PATH)
 * @replay: the ROUTER socket's address for replay requests; NULL: none
 * @topic: the prefix of every topic: namespace N publishes on
 *	"@topic/ns/N/" (NULL: KVEV_TOPIC_DEFAULT)
 * @hash: how block hashes are computed, as vLLM's prefix_caching_hash_algo
 * @seed: NONE_HASH's seed, as vLLM's PYTHONHASHSEED (NULL: KVEV_SEED_DEFAULT)
 * @page_size: tokens per page: vLLM's block_size
 * @buffer_steps: messages kept for replay (0: KVEV_BUFFER_STEPS)
 * @hwm: the PUB socket's high-water mark (0: KVEV_HWM)
 * @prepare_bytes: memory for the messages kept for replay made ready
 *	(faulted in) when the publisher is made, and kept for reuse once the
 *	buffer lets messages go, in 2 MiB chunks (0: KVEV_PREPARE_BYTES;
 *	kvev_thread_start(): the context's event buffer's size): the stream
 *	does not wait for fresh memory until it keeps more
 * @pages: pages the context's tiers hold at most: the publisher's tables
 *	are made for that many (up to 131072; 0: 512) rather than grown
 *	while the stream fills them (kvev_thread_start() sets it)
 * @index_hashes: keep the index of the pages by vLLM hash that
 *	kvev_lookup() reads; without it kvev_lookup() finds nothing, and
 *	publishing does not pay for keeping it
 * @stored_tokens: the EVENTS output it is given carries token ids with
 *	STORED events only (KVMM_SET_EVENT_TOKENS KVMM_EVENT_TOKENS_STORED):
 *	the publisher keeps each page's from its STORED event on, for the
 *	BlockStored a demotion or promotion sends (kvev_thread_start() sets
 *	both)
 * @yield_pages: offer the CPU (sched_yield()) after every that many
 *	pages published, so that a thread of the engine the publisher's
 *	took a core from (the engine's own, or kvmmd's serving one, on a
 *	machine with fewer cores than busy threads) gets it back within a
 *	few tens of microseconds, not at the end of the publisher's time
 *	slice; where nothing else waits for the core it returns at once
 *	(0: never; kvev_thread_start(): KVEV_YIELD_PAGES)
 */
struct kvev_params {
	const char *endpoint;
	const char *replay;
	const char *topic;
	enum kvev_hash hash;
	const char *seed;
	uint32_t page_size;
	uint32_t buffer_steps;
	uint32_t hwm;
	uint64_t prepare_bytes;
	uint64_t pages;
	bool stored_tokens;
	bool index_hashes;
	uint32_t yield_pages;
};

/* What a publisher did, for its owner's log and tests. */
struct kvev_stats {
	uint64_t messages;	/* KVEventBatch messages sent, the next seq */
	uint64_t stored;	/* BlockStored events in them */
	uint64_t removed;	/* BlockRemoved events in them */
	uint64_t lost;		/* kvmm events overwritten before the publisher read them */
	uint64_t unnamed;	/* kvmm events whose parent hash it did not know */
	uint64_t replays;	/* replay requests answered */
	uint64_t yields;	/* offers of the CPU (kvev_params.yield_pages) */
};

struct kvev;

int kvev_create(const struct kvev_params *p, struct kvev **out);
void kvev_destroy(struct kvev *ev);
int kvev_publish(struct kvev *ev, const struct kvmm_events_hdr *hdr);
int kvev_serve_replay(struct kvev *ev, int timeout_ms);
void kvev_get_stats(const struct kvev *ev, struct kvev_stats *st);
int kvev_block_hash(const struct kvev *ev, const uint8_t *parent, const uint32_t *tok,
		    uint8_t *out);
uint32_t kvev_hash_bytes(const struct kvev *ev);
uint32_t kvev_lookup(struct kvev *ev, uint32_t ns, const uint8_t *hashes, uint32_t n,
		     uint32_t *tokens);
int kvev_pump(struct kvev *ev, struct kvmm_ctx *ctx, uint64_t *cursor, void *buf,
	      uint32_t len);

struct kvev_thread;

int kvev_thread_start(struct kvmm_ctx *ctx, const struct kvev_params *p, uint64_t events_bytes,
		      uint32_t interval_ms, struct kvev_thread **out);
int kvev_thread_stop(struct kvev_thread *t, struct kvev_stats *st);
struct kvev *kvev_thread_publisher(struct kvev_thread *t);

#endif
