/* SPDX-License-Identifier: MIT */
/*
 * kvmm/migrate.h - migrate jobs: moving nodes' pages between tiers in
 * three steps, arm (under the context's lock), copy (without it, on the
 * I/O worker or inline) and settle (under the lock again).  Private to
 * kvmm/: migrate.c holds the mechanism and demotion, promote.c PROMOTE.
 */
#ifndef KVMM_MIGRATE_H
#define KVMM_MIGRATE_H

#include <pthread.h>

#include "internal.h"

/**
 * struct kvmm_work - an entry of the I/O worker's queue
 * @link: on the queue, then on the worker's done list
 * @run: what the worker does with it, holding no lock: the copy, then
 *	whatever settles it (which may free the entry), or kvmm_work_done()
 * @settle: for an entry put on the done list: settles and frees it on
 *	the context's own thread (kvmm_migrate_reap())
 */
struct kvmm_work {
	struct kvmm_list link;
	void (*run)(struct kvmm_ctx *ctx, struct kvmm_work *work);
	void (*settle)(struct kvmm_ctx *ctx, struct kvmm_work *work);
};

void kvmm_work_queue(struct kvmm_ctx *ctx, struct kvmm_work *work);
void kvmm_work_queue_remote(struct kvmm_ctx *ctx, struct kvmm_work *work);
void kvmm_work_done(struct kvmm_ctx *ctx, struct kvmm_work *work);

/**
 * struct migrate_node - one node of an armed job: its pages in the job's
 *	arrays
 * @node: the node; NULL once a demotion's node was dropped (the job then
 *	holds its source frames, in state KVMM_PAGE_IO, and frees them)
 * @first: its first page in the job's per-page arrays
 * @nr: its pages
 * @tier: the tier it is copied from
 * @err: after the copy, 0 or why its pages did not all arrive
 * @taken: a demotion's: the node a promotion took from it (@node is then
 *	NULL; the source frames are still the node's, the job writes them
 *	for nothing); a promotion's: the node itself, when it took it from a
 *	demotion still in flight (kvmm_writeback_take())
 */
struct migrate_node {
	struct kvmm_node *node;
	uint32_t first;
	uint32_t nr;
	uint32_t tier;
	int err;
	struct kvmm_node *taken;
};

/**
 * struct kvmm_migrate - one migrate job: a promotion (@to is the device)
 *	or a demotion (@to is the tier below its nodes)
 * @link: on ctx->migrations while it exists
 * @work: its entry on the worker's queue
 * @qlink: on the waiters of the promotion it waits for
 * @waiters: promotions waiting for this one's chain
 * @owner: where a promotion's deferred completion goes; NULL: nobody
 *	waits for one
 * @user_data: the completion's user_data
 * @seq: a promotion's sequence; KVMM_SEQ_NONE for a demotion or once
 *	cancelled
 * @n: tokens at @tokens
 * @tokens: a promotion's key past the sequence's cached tokens
 * @chain: the armed nodes, @nr_nodes of them (a promotion's top down, a
 *	demotion's in any order); NULL before arming
 * @src, @dst: per page, the frame copied from and the frame on @to (held
 *	by the job in state KVMM_PAGE_IO)
 * @keys: per page, its identity (for an I/O store)
 * @addrs: per page, scratch for the copy
 * @sums: per page, scratch: the checksums a memory store sealed
 * @nr_pages: pages of the chain
 * @nr_locks: node locks the job holds (a promotion's one)
 * @tokens_copy: a demotion's copy of its nodes' tokens, which @keys and
 *	@rpages point into (a node may be dropped while the worker writes it)
 * @rpages: a demotion from the host tier under KVMM_REMOTE_WRITE_DEMOTE:
 *	per page, its remote name; the copy writes the pages there too
 * @to: the tier its pages go to; @from for a demotion whose only
 *	destination is the remote tier (@no_dst)
 * @from: a demotion's: the tier its nodes come from
 * @io: the copy reads or writes an I/O store (the worker's kind of job)
 * @no_dst: no frames below: the remote tier takes the pages and the
 *	nodes are dropped when they are written
 * @rput: after the copy, pages the remote tier took (or had)
 * @t0: when it was armed
 * @offer: a promotion's: per tier, tokens of its key found there when it
 *	was asked for and not mapped yet (what it serves from each tier)
 * @prefetch: a promotion that no sequence asked for (PREFETCH): @seq is
 *	KVMM_SEQ_NONE, and nothing is mapped when it settles
 * @canceled: a prefetch's: its owner cancelled it; when the copy is over
 *	its frames are given back and its nodes stay where they were
 */
struct kvmm_migrate {
	struct kvmm_list link;
	struct kvmm_work work;
	struct kvmm_list qlink;
	struct kvmm_list waiters;
	struct kvmm_owner *owner;
	uint64_t user_data;
	uint32_t seq;
	uint32_t n;
	uint32_t *tokens;
	struct migrate_node *chain;
	uint32_t nr_nodes;
	uint32_t nr_pages;
	int32_t *src, *dst;
	struct kvmm_store_key *keys;
	uint64_t *sums;
	void **addrs;
	uint32_t nr_locks;
	uint32_t *tokens_copy;
	struct kvmm_remote_page *rpages;
	uint32_t to;
	uint32_t from;
	bool io;
	bool no_dst;
	uint32_t rput;
	uint64_t t0;
	uint32_t offer[KVMM_NR_TIERS];
	bool prefetch;
	bool canceled;
};

#define KVMM_SEQ_NONE	UINT32_MAX

size_t kvmm_migrate_bytes(uint32_t n);
size_t kvmm_migrate_arm_bytes(uint32_t nr_nodes, uint32_t nr_pages);
void kvmm_migrate_lay_out(struct kvmm_migrate *job, char *p, uint32_t nr_nodes,
			  uint32_t nr_pages);
void kvmm_migrate_free(struct kvmm_ctx *ctx, struct kvmm_migrate *job);
struct kvmm_migrate *kvmm_migrate_of(struct kvmm_ctx *ctx, const struct kvmm_node *node);
void kvmm_migrate_hold(struct kvmm_ctx *ctx, struct kvmm_migrate *job);
void kvmm_migrate_release(struct kvmm_ctx *ctx, struct kvmm_migrate *job);
void kvmm_migrate_copy(struct kvmm_ctx *ctx, struct kvmm_migrate *job, uint32_t chan);
void kvmm_migrate_queue(struct kvmm_ctx *ctx, struct kvmm_migrate *job);

/* a promotion and the demotions whose nodes it reads up */
void kvmm_writeback_take(struct kvmm_ctx *ctx, struct kvmm_node *node);
void kvmm_writeback_give(struct kvmm_ctx *ctx, struct kvmm_node *node);

/* promote.c: a promotion the worker copied, settled under the lock */
void kvmm_promo_finished(struct kvmm_ctx *ctx, struct kvmm_migrate *job);

#endif /* KVMM_MIGRATE_H */
