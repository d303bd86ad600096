/* SPDX-License-Identifier: MIT */
/*
 * driver/remote/cluster.h - a Redis Cluster client for the remote tier:
 * the slot map, one connection per node, and batches of commands run
 * pipelined on every shard at once under one deadline.
 *
 * hiredis parses the replies (its reader, fed from our reads); commands
 * are written by us, with writev() straight from the caller's buffers, so
 * a 2 MiB value is never copied on its way out (hiredis's append path
 * copies it twice and moves what is left of its output buffer after every
 * partial write: kvmm-bench remote --hiredis-writes measures it).
 *
 * Private to driver/remote/.  Not thread-safe: one caller at a time
 * (rc_cancel() excepted, which any thread may call).
 */
#ifndef KVMM_DRIVER_REMOTE_CLUSTER_H
#define KVMM_DRIVER_REMOTE_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define RC_SLOTS	16384
#define RC_MAX_ARGS	6
#define RC_MAX_PIECES	3
#define RC_MAX_HOPS	5	/* MOVED/ASK redirections followed per command */

/**
 * struct rc_cmd - one command of a batch
 * @argv, @len, @argc: the command (the buffers stay the caller's until
 *	rc_exec() returns)
 * @piece, @piece_len, @pieces: when @pieces is nonzero, the last
 *	argument is these buffers back to back (argv[argc - 1] unused), so a
 *	value made of a header and a page is sent without joining them
 * @into, @into_len: optional: where the bytes of a string reply go, the
 *	first @into_len[0] to @into[0] and the rest to @into[1], when the
 *	reply is exactly @into_len[0] + @into_len[1] long: copied there once,
 *	from the reader's buffer, as the reply is parsed
 * @landed_fn: optional: called, inside rc_exec(), as soon as a reply's
 *	bytes are all in @into (with @landed_arg): the caller's work on them
 *	then overlaps the other shards' replies still on their way
 * @landed_arg: its argument
 * @slot: the hash slot it goes to (rc_slot() of its key)
 * @reply: out: the reply (the caller frees it with freeReplyObject()),
 *	NULL when @err is set
 * @landed: out: the bytes copied to @into (the reply is then an empty
 *	string), or 0
 * @err: out: 0, or why there is no reply: -ETIMEDOUT (its shard did not
 *	answer before the deadline), -EIO (the connection failed), -ENXIO
 *	(no node serves the slot now), -EAGAIN (the cluster said
 *	CLUSTERDOWN/TRYAGAIN/LOADING), -ELOOP (too many redirections),
 *	-EACCES (the node refused AUTH), -ECANCELED (rc_cancel())
 *
 * The rest is the client's.
 */
struct rc_cmd {
	const char *argv[RC_MAX_ARGS];
	size_t len[RC_MAX_ARGS];
	int argc;
	const void *piece[RC_MAX_PIECES];
	size_t piece_len[RC_MAX_PIECES];
	int pieces;
	void *into[2];
	size_t into_len[2];
	void (*landed_fn)(struct rc_cmd *c, void *arg);
	void *landed_arg;
	uint16_t slot;
	redisReply *reply;
	size_t landed;
	int err;
	/* private */
	struct rc_cmd *next;
	int node;
	uint8_t hops;
	bool asking;		/* send ASKING before it */
	bool asked;		/* ... and its +OK is still to be read */
	char head[160];		/* the RESP text before the last argument */
	uint32_t head_len;
	uint64_t sent;		/* bytes of it written */
	bool slot_map;		/* CLUSTER SLOTS: its reply may be arrays */
};

/**
 * struct rc_stats - what the client has done, since rc_open()
 * @batches: rc_exec() calls
 * @cmds: commands run
 * @timeouts: commands failed by the deadline
 * @io_errors: commands failed by a broken connection or a refused connect
 * @moved, @ask: redirections followed
 * @busy: CLUSTERDOWN, TRYAGAIN and LOADING answers
 * @connects: connections made
 * @refreshes: slot maps read (CLUSTER SLOTS)
 * @stale: connections dropped because the server sent replies nobody
 *	asked for, or (found before a batch) had closed them
 * @refused: connections dropped because a reply was larger than its
 *	command can need (an array where none belongs, a string past the
 *	value's length), read no further
 * @bytes_out, @bytes_in: bytes written and read
 */
struct rc_stats {
	uint64_t batches;
	uint64_t cmds;
	uint64_t timeouts;
	uint64_t io_errors;
	uint64_t moved;
	uint64_t ask;
	uint64_t busy;
	uint64_t connects;
	uint64_t refreshes;
	uint64_t stale;
	uint64_t refused;
	uint64_t bytes_out;
	uint64_t bytes_in;
};

struct rc_cluster;

struct rc_cluster *rc_open(const char *seeds, uint32_t timeout_ms, const char *user,
			   const char *password, char *err, size_t err_len);
void rc_close(struct rc_cluster *cl);
void rc_exec(struct rc_cluster *cl, struct rc_cmd *cmds, uint32_t n);
void rc_cancel(struct rc_cluster *cl);
uint16_t rc_slot(const char *key, size_t len);
void rc_set_hiredis_writes(struct rc_cluster *cl, bool on);
const struct rc_stats *rc_stats(const struct rc_cluster *cl);
uint32_t rc_nodes(const struct rc_cluster *cl);

#endif /* KVMM_DRIVER_REMOTE_CLUSTER_H */
