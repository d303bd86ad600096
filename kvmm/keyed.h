/* SPDX-License-Identifier: MIT */
/*
 * kvmm/keyed.h - the keyed page store's spaces and jobs, shared by
 * keyed.c (jobs, the direct API, the ring's commands, prefetch),
 * keyed_space.c (spaces and their values) and keyed_remote.c (the remote
 * tier under them).  Private to kvmm/; the DOC is in keyed.c.
 */
#ifndef KVMM_KEYED_H
#define KVMM_KEYED_H

#include "migrate.h"

/*
 * A space's id is its slot in ctx->kspaces (KVMM_KSPACES_MAX of them) and,
 * above, the context's removal count when it was made: an id kept past
 * its space's removal names nothing, even once the slot is taken again.
 * The first spaces of a context have ids 0, 1, 2 ...
 */
#define KSPACE_SLOT_BITS	10
#define KSPACE_GEN_MASK		((1u << 21) - 1)	/* ids stay below 2^31 */
_Static_assert(KVMM_KSPACES_MAX == 1u << KSPACE_SLOT_BITS, "a slot is the id's low bits");

/**
 * struct kvmm_kspace - one keyed space
 * @root: the root its values hang under (KVMM_NODE_KEYED)
 * @fp: the model identity's fingerprint, XXH3-128 of model_id
 * @value_bytes: bytes of each value
 * @pages: frames a value takes: its bytes, at least KVMM_KEY_WORDS tokens
 * @ns: its namespace
 * @id: its id: its index in ctx->kspaces, and its generation above
 * @busy: callers using it with the context's lock dropped (an EXISTS
 *	asking the remote tier): it is not removed under them
 * @model_id: the identity it was registered with; empty for a space
 *	recovered from NVMe that no client has registered since
 */
struct kvmm_kspace {
	struct kvmm_node *root;
	uint64_t fp[2];
	uint64_t value_bytes;
	uint32_t pages;
	uint32_t ns;
	uint32_t id;
	uint32_t busy;
	char model_id[KVMM_MODEL_ID_MAX + 1];
};

/**
 * struct kjob_val - one value of a keyed job
 * @key: its key
 * @buf: the caller's bytes (put: read; get: written)
 * @resp: where its result goes at settle, or NULL
 * @node: get: the value, locked; NULL when it was not found
 * @first: a put, or a get from the remote tier: its frames' index in the
 *	job's @frames
 * @err: 0, or why it failed (set at arm when it was never armed)
 * @armed: the copy step has work for it (cleared once it has settled)
 * @remote: get: not stored here, asked of the remote tier into new host
 *	frames (held in state IO like a put's), stored here when it verifies
 * @edge: a put's, or a remote get's, node edge made in the copy step
 *	(kvmm_tree_keyed_buf()), for its settle; NULL before
 */
struct kjob_val {
	struct kvmm_key key;
	void *buf;
	int32_t *resp;
	struct kvmm_node *node;
	uint32_t *edge;
	uint32_t first;
	int err;
	bool armed;
	bool remote;
};

/*
 * What one keyed job may make the context allocate (see "Bounds" in the
 * DOC above).  The copy step works through a job's pages a window at a
 * time, whatever the values' size; the frames a job takes are listed in
 * one array sized by what it can take; the lock is let go every
 * KJOB_ROUND frames armed or settled.
 */
#define KJOB_WIN		1024u		/* pages of per-page scratch */
#define KJOB_ROUND		16384u		/* frames between breaths of the lock */
#define KJOB_LOCKED_BYTES	(64u << 10)	/* frame lists allocated under the lock */
#define KVMM_NS_KJOB_BYTES_MIN	4096u		/* kvmm_set_ns_kjob_bytes()'s floor */
#define KJOB_SLICE_BYTES	(16u << 20)	/* values the worker copies between others' work */
#define KJOB_STALLS		64u		/* rounds a put waits with nothing armed */

/**
 * struct kvmm_kjob - a keyed command's values in flight
 * @work: the I/O worker's queue entry (a get that reads NVMe)
 * @link: on ctx->kjobs while it exists
 * @owner: where a queued job's completion goes; NULL: nobody waits
 * @user_data: that completion's user_data
 * @space: the space
 * @put: a put (else a get, or a prefetch)
 * @pf: a prefetch: its values are read from an I/O store into host frames
 *	it takes (@frames) and move up to the host tier at settle; its
 *	completion was posted when it was armed
 * @canceled: a prefetch its ring cancelled: what it read is given back
 * @nr_behind: a ring's get: its values that a prefetch is reading up
 *	(KVMM_NODE_KREAD) at arm; it is queued once they have all settled
 * @parked: that get waits for them, queued by the last one's settle
 * @room: a prefetch: host pages it may take at most
 * @t0: a prefetch: when it was armed
 * @io: a value is read from an I/O store: the worker's kind of job
 * @remote: the copy calls the remote tier (a put writes through to it, a
 *	get asks it for what is not stored here): the worker's kind too, and
 *	never under the context's lock
 * @n: values
 * @vals: them
 * @nr_locks: get: values it holds locked
 * @frames: the host frames its values took (a put's, a remote get's), in
 *	state IO, held by the job: @nr_frames of @cap_frames
 * @new_pages: put: pages its values not stored yet take, on arrival
 * @wait: put: it may wait for writeback to make room on the host tier
 *	rather than drop what is there (see "Rounds" in the DOC above)
 * @nr_wait: put: values waiting for that room (err -EAGAIN until armed)
 * @rearm: put: on the I/O worker, the next run arms the waiting values
 * @stalls: put: rounds in a row that armed none of them
 * @charge: bytes of memory it holds or may still take (its block, its
 *	frame list, its window), counted against its namespace's limit
 * @lo, @hi: the values the copy step works on now: all of them, but on
 *	the I/O worker a slice of about KJOB_SLICE_BYTES at a time, the job
 *	queued again behind the others' work after each
 * @win: pages of the window below; 0 while it has none (outside the copy)
 * @keys: per page of the window read from an I/O store, its identity
 * @to: ... where its bytes go
 * @pfns: ... its frame there
 * @page_val: per page of the window, the value it is of
 * @addrs: per page of the window, its bytes (a store's read, a copy out,
 *	the remote tier's get and put)
 * @rpages: per page of the window, its name on the remote tier
 * @rok: per page of the window, whether the remote tier had it
 */
struct kvmm_kjob {
	struct kvmm_work work;
	struct kvmm_list link;
	struct kvmm_owner *owner;
	uint64_t user_data;
	struct kvmm_kspace *space;
	bool put;
	bool pf;
	bool canceled;
	uint32_t nr_behind;
	bool parked;
	uint64_t room;
	uint64_t t0;
	bool io;
	bool remote;
	uint32_t n;
	struct kjob_val *vals;
	uint32_t nr_locks;
	int32_t *frames;
	uint32_t nr_frames, cap_frames;
	uint64_t new_pages;
	bool wait;
	bool rearm;
	uint32_t nr_wait;
	uint32_t stalls;
	size_t charge;
	uint32_t lo, hi;
	uint32_t win;
	struct kvmm_store_key *keys;
	struct kvmm_store_to *to;
	int32_t *pfns;
	uint32_t *page_val;
	void **addrs;
	struct kvmm_remote_page *rpages;
	uint8_t *rok;
};

/* keyed_space.c: spaces and the index of their values */
uint64_t keyed_page_bytes(const struct kvmm_ctx *ctx);
void kspace_slots_trim(struct kvmm_ctx *ctx);
struct kvmm_kspace *kspace_direct(struct kvmm_ctx *ctx, uint32_t id);
void keyed_key_words(const struct kvmm_key *key, uint32_t *w);
struct kvmm_node *keyed_value_find(struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
				   const struct kvmm_key *key);
void kspace_store_keys(const struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
		       const struct kvmm_node *node, uint32_t from, uint32_t nr,
		       struct kvmm_store_key *keys);

/* keyed.c: the jobs' copy and settle steps */
void kjob_copy_frames_out(struct kvmm_ctx *ctx, struct kvmm_kjob *job, uint32_t tier,
			  const int32_t *pfns, char *dst);
struct kvmm_node *kjob_store(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v);

/* keyed_remote.c: a job's part on the remote tier */
void kjob_remote_copy(struct kvmm_ctx *ctx, struct kvmm_kjob *job);
void kjob_remote_settle(struct kvmm_ctx *ctx, struct kvmm_kjob *job, struct kjob_val *v);

#endif /* KVMM_KEYED_H */
