// SPDX-License-Identifier: MIT
/*
 * driver/remote/cluster.c - the Redis Cluster client of the remote tier.
 *
 * The slot map comes from CLUSTER SLOTS on any node that answers (the
 * seeds first), and is read again before the next batch after anything
 * that says it moved: a MOVED answer, a node that failed.  A batch is
 * grouped by the node serving each command's slot; every node's commands
 * are pipelined on its one connection, all nodes at once, in one poll()
 * loop, under one deadline.  A node that does not answer by then fails
 * its commands with -ETIMEDOUT and loses its connection (replies still
 * on their way would otherwise answer the next batch's commands); one
 * whose connection breaks fails them with -EIO.  Nothing here retries on
 * its own past redirections: to the remote tier a failed command is a
 * miss, and the engine recomputes.
 *
 * MOVED updates the slot's node and resends there; ASK resends to the
 * node named, preceded by ASKING.  Both count, and stop after RC_MAX_HOPS.
 *
 * Replies are parsed by hiredis's reader (redisReader), our non-blocking
 * reads landing in its buffer; commands are written by writev() from the caller's
 * buffers (see cluster.h), or formatted by hiredis when asked to
 * (rc_set_hiredis_writes(), for the benchmark that compares the two).
 *
 * A node is not trusted to send what a command can need, and no more: a
 * reply gets at most the bytes its command can need (a GET its value's,
 * CLUSTER SLOTS a slot map's; reply_max_bytes()), and no aggregate but a
 * slot map's, of at most RC_SLOTS entries each.  An array header or a bulk
 * length past that is refused as soon as it is read, before the reader
 * allocates anything for it (an array of 2^31 - 1 elements would cost
 * 16 GiB of address space, and freeing it half a minute), and the
 * connection is dropped like one that broke: the command is a miss.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "cluster.h"

#define RC_MAX_NODES	64
#define RC_RBUF		(256u << 10)
#define RC_IOV		64
#define RC_REPLY_SLACK	(64u << 10)	/* a reply's bytes besides its value: errors, lines */
#define RC_SLOT_MAP_MAX	(4u << 20)	/* CLUSTER SLOTS: 16384 ranges of a few nodes */

#if HIREDIS_MAJOR >= 1
typedef size_t rc_nelem_t;
#else
typedef int rc_nelem_t;
#endif

struct rc_node {
	char host[64];
	int port;
	int fd;			/* -1: not connected */
	bool connecting;
	redisReader *reader;
	struct rc_cmd *q, **q_tail;	/* to write; the first maybe partly */
	struct rc_cmd *w, **w_tail;	/* written, their replies awaited */
	char *fmt;		/* hiredis-formatted command being written */
	size_t fmt_len, fmt_sent;
	struct rc_cmd auth;	/* AUTH, first on every connection when set */
	bool auth_refused;	/* ... and the server said no */
	struct rc_cmd *direct;	/* the awaited command whose value lands by readv() */
	size_t direct_off;	/* bytes of its value and CRLF read */
	char crlf[2];		/* the CRLF after it */
	size_t reply_bytes;	/* bytes the reader consumed of the reply it is in */
};

struct rc_cluster {
	struct rc_node node[RC_MAX_NODES];
	uint32_t nr_nodes;
	int16_t slot_node[RC_SLOTS];	/* -1: unknown */
	bool dirty;			/* read the slot map again */
	uint32_t refresh_from;		/* the node to ask for it first */
	bool hiredis_writes;
	uint32_t timeout_ms;
	char *user;			/* AUTH's; NULL: the server's default user */
	char *password;			/* NULL: no AUTH */
	char auth_err[160];		/* the last refusal, for rc_open()'s message */
	int wake[2];			/* a pipe: rc_cancel() writes, rc_run() polls */
	bool cancelled;			/* rc_cancel() was called (atomic) */
	struct rc_stats stats;
};

static void rc_run(struct rc_cluster *cl, uint64_t deadline);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- key slots: CRC16-CCITT (XMODEM) of the key or of its {hash tag} ---- */

/* CRC16-CCITT, XMODEM (poly 0x1021, init 0): a byte at a time by table */
static uint16_t crc16_table[256];
static pthread_once_t crc16_once = PTHREAD_ONCE_INIT;

static void crc16_init(void)
{
	uint32_t i;
	int b;

	for (i = 0; i < 256; i++) {
		uint16_t crc = (uint16_t)(i << 8);

		for (b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
		crc16_table[i] = crc;
	}
}

static uint16_t crc16(const char *p, size_t n)
{
	uint16_t crc = 0;
	size_t i;

	pthread_once(&crc16_once, crc16_init);
	for (i = 0; i < n; i++)
		crc = (uint16_t)((crc << 8) ^ crc16_table[((crc >> 8) ^ (uint8_t)p[i]) & 0xff]);
	return crc;
}

/**
 * rc_slot() - the hash slot of a key, as Redis Cluster computes it
 * @key: the key
 * @len: its bytes
 *
 * A key with a non-empty {tag} hashes the tag alone, so the keys of one
 * value share a slot (and a shard).
 */
uint16_t rc_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open) {
		size_t at = (size_t)(open - key) + 1;
		const char *close = memchr(key + at, '}', len - at);

		if (close && close > key + at)
			return crc16(key + at, (size_t)(close - key) - at) & (RC_SLOTS - 1);
	}
	return crc16(key, len) & (RC_SLOTS - 1);
}

/*
 * ---- the reader's objects: hiredis's, except a string reply a command
 * asked to land somewhere, which is copied there from the reader's buffer
 * instead of into a new allocation of its size (a 2 MiB malloc is an mmap,
 * and faulting it in cost more than the copy) ----
 */

static redisReplyObjectFunctions rc_fns;
static const redisReplyObjectFunctions *hiredis_fns;
static pthread_once_t rc_fns_once = PTHREAD_ONCE_INIT;
static __thread struct rc_node *rc_cur;	/* the node whose replies are parsed */

/* Bytes of @c's value: what a string reply must hold to land in @c->into. */
static size_t into_bytes(const struct rc_cmd *c)
{
	return c->into_len[0] + c->into_len[1];
}

/* Most bytes a reply to @c (awaited; NULL: none is) may have. */
static size_t reply_max_bytes(const struct rc_cmd *c)
{
	if (!c || c->asked)
		return RC_REPLY_SLACK;
	if (c->slot_map)
		return RC_SLOT_MAP_MAX;
	return into_bytes(c) + RC_REPLY_SLACK;
}

/* @c's value is all in its buffers: say so, and tell its caller's hook. */
static void cmd_landed(struct rc_cmd *c)
{
	c->landed = into_bytes(c);
	if (c->landed_fn)
		c->landed_fn(c, c->landed_arg);
}

static void *rc_create_string(const redisReadTask *task, char *str, size_t len)
{
	struct rc_cmd *c = rc_cur ? rc_cur->w : NULL;

	if (c && !c->asked && !task->parent && task->type == REDIS_REPLY_STRING && c->into[0] &&
	    len == into_bytes(c)) {
		memcpy(c->into[0], str, c->into_len[0]);
		if (c->into_len[1])
			memcpy(c->into[1], str + c->into_len[0], c->into_len[1]);
		cmd_landed(c);
		return hiredis_fns->createString(task, str, 0);
	}
	return hiredis_fns->createString(task, str, len);
}

/*
 * An array header: only a slot map has arrays, of at most RC_SLOTS
 * entries.  NULL (which the reader takes for no memory, and stops) for
 * any other, before it allocates a thing for it.
 */
static void *rc_create_array(const redisReadTask *task, rc_nelem_t elements)
{
	const struct rc_cmd *c = rc_cur ? rc_cur->w : NULL;

	if (!c || c->asked || !c->slot_map || elements < 0 || (uint64_t)elements > RC_SLOTS)
		return NULL;
	return hiredis_fns->createArray(task, elements);
}

static void rc_fns_init(void)
{
	redisReader *r = redisReaderCreate();

	if (!r)
		return;
	hiredis_fns = r->fn;	/* hiredis's own table, static in the library */
	rc_fns = *r->fn;
	rc_fns.createString = rc_create_string;
	rc_fns.createArray = rc_create_array;
	redisReaderFree(r);
}

/* ---- nodes and connections ---- */

static int node_find(struct rc_cluster *cl, const char *host, size_t hlen, int port)
{
	struct rc_node *nd;
	uint32_t i;

	if (!hlen || hlen >= sizeof(nd->host) || port <= 0 || port > 65535)
		return -1;
	for (i = 0; i < cl->nr_nodes; i++)
		if (cl->node[i].port == port && strlen(cl->node[i].host) == hlen &&
		    !memcmp(cl->node[i].host, host, hlen))
			return (int)i;
	if (cl->nr_nodes == RC_MAX_NODES)
		return -1;
	nd = &cl->node[cl->nr_nodes];
	memset(nd, 0, sizeof(*nd));
	memcpy(nd->host, host, hlen);
	nd->host[hlen] = '\0';
	nd->port = port;
	nd->fd = -1;
	nd->q_tail = &nd->q;
	nd->w_tail = &nd->w;
	return (int)cl->nr_nodes++;
}

static void node_disconnect(struct rc_node *nd)
{
	if (nd->fd >= 0)
		close(nd->fd);
	nd->fd = -1;
	nd->connecting = false;
	if (nd->reader)
		redisReaderFree(nd->reader);
	nd->reader = NULL;
	free(nd->fmt);
	nd->fmt = NULL;
	nd->fmt_len = nd->fmt_sent = 0;
	nd->direct = NULL;
	nd->reply_bytes = 0;
}

static bool cmd_head(struct rc_cmd *c);

/*
 * A new connection's first command: AUTH [user] password, in front of
 * whatever is queued (rc_open() checked that its head fits).
 */
static void auth_queue(struct rc_cluster *cl, struct rc_node *nd)
{
	struct rc_cmd *c = &nd->auth;
	int i = 0;

	memset(c, 0, sizeof(*c));
	c->argv[i] = "AUTH";
	c->len[i++] = 4;
	if (cl->user) {
		c->argv[i] = cl->user;
		c->len[i++] = strlen(cl->user);
	}
	c->argv[i] = cl->password;
	c->len[i++] = strlen(cl->password);
	c->argc = i;
	c->node = (int)(nd - cl->node);
	cmd_head(c);
	c->next = nd->q;
	if (!nd->q)
		nd->q_tail = &c->next;
	nd->q = c;
}

/* Start a non-blocking connect; 0 or a negative errno. */
static int node_connect(struct rc_cluster *cl, struct rc_node *nd)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char port[8];
	int fd, one = 1, ret;

	snprintf(port, sizeof(port), "%d", nd->port);
	if (getaddrinfo(nd->host, port, &hints, &ai) || !ai)
		return -EHOSTUNREACH;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		freeaddrinfo(ai);
		return ret;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ret = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (ret < 0 && errno != EINPROGRESS) {
		ret = -errno;
		close(fd);
		return ret;
	}
	pthread_once(&rc_fns_once, rc_fns_init);
	nd->reader = hiredis_fns ? redisReaderCreateWithFunctions(&rc_fns) : NULL;
	if (!nd->reader) {
		close(fd);
		return -ENOMEM;
	}
	nd->reader->maxbuf = 0;	/* keep its buffer: values come back to back */
	nd->fd = fd;
	nd->connecting = ret < 0;
	nd->auth_refused = false;
	cl->stats.connects++;
	if (cl->password)
		auth_queue(cl, nd);
	return 0;
}

static void cmd_done(struct rc_cmd *c, redisReply *reply, int err)
{
	c->reply = reply;
	c->err = err;
	c->next = NULL;
}

/* Fail every command @nd holds with @err, and drop its connection. */
static void node_fail(struct rc_cluster *cl, struct rc_node *nd, int err)
{
	struct rc_cmd *c, *next;
	struct rc_cmd *lists[2] = { nd->w, nd->q };
	int i;

	for (i = 0; i < 2; i++)
		for (c = lists[i]; c; c = next) {
			next = c->next;
			if (c == &nd->auth)
				continue;
			cmd_done(c, NULL, err);
			if (err == -ETIMEDOUT)
				cl->stats.timeouts++;
			else
				cl->stats.io_errors++;
		}
	nd->q = nd->w = NULL;
	nd->q_tail = &nd->q;
	nd->w_tail = &nd->w;
	node_disconnect(nd);
	cl->dirty = true;
}

static void node_queue(struct rc_node *nd, struct rc_cmd *c)
{
	c->next = NULL;
	c->sent = 0;
	*nd->q_tail = c;
	nd->q_tail = &c->next;
}

/* The bytes of @c's last argument. */
static size_t last_len(const struct rc_cmd *c)
{
	size_t n = 0;
	int i;

	if (!c->pieces)
		return c->len[c->argc - 1];
	for (i = 0; i < c->pieces; i++)
		n += c->piece_len[i];
	return n;
}

/* @c's last argument as pieces: @base and @len get at most RC_MAX_PIECES. */
static int last_pieces(const struct rc_cmd *c, const char **base, size_t *len)
{
	int i;

	if (!c->pieces) {
		base[0] = c->argv[c->argc - 1];
		len[0] = c->len[c->argc - 1];
		return 1;
	}
	for (i = 0; i < c->pieces; i++) {
		base[i] = c->piece[i];
		len[i] = c->piece_len[i];
	}
	return c->pieces;
}

/*
 * The RESP text of @c up to its last argument's bytes: ASKING first when
 * asked, then *argc, then every argument but the last whole, then the
 * last one's $length.  Return false when it does not fit c->head.
 */
static bool cmd_head(struct rc_cmd *c)
{
	size_t at = 0, room = sizeof(c->head);
	int i, n;

	if (c->asking) {
		n = snprintf(c->head, room, "*1\r\n$6\r\nASKING\r\n");
		at += (size_t)n;
	}
	n = snprintf(c->head + at, room - at, "*%d\r\n", c->argc);
	at += (size_t)n;
	for (i = 0; i < c->argc; i++) {
		n = snprintf(c->head + at, room - at, "$%zu\r\n",
			     i == c->argc - 1 ? last_len(c) : c->len[i]);
		if (n < 0 || (size_t)n >= room - at)
			return false;
		at += (size_t)n;
		if (i == c->argc - 1)
			break;
		if (c->len[i] + 2 > room - at)
			return false;
		memcpy(c->head + at, c->argv[i], c->len[i]);
		memcpy(c->head + at + c->len[i], "\r\n", 2);
		at += c->len[i] + 2;
	}
	c->head_len = (uint32_t)at;
	return true;
}

static uint64_t cmd_bytes(const struct rc_cmd *c)
{
	return c->head_len + last_len(c) + 2;
}

/* Move @nd's first queued command to its awaited ones. */
static void node_sent(struct rc_node *nd)
{
	struct rc_cmd *c = nd->q;

	nd->q = c->next;
	if (!nd->q)
		nd->q_tail = &nd->q;
	c->next = NULL;
	c->asked = c->asking;
	*nd->w_tail = c;
	nd->w_tail = &c->next;
}

/* hiredis's RESP text of @c (ASKING in front when asked): its length, or -ENOMEM. */
static int cmd_format_hiredis(const struct rc_cmd *c, char **out)
{
	const char *argv[RC_MAX_ARGS], *pb[RC_MAX_PIECES];
	size_t len[RC_MAX_ARGS], pl[RC_MAX_PIECES], at = 0;
	char *joined = NULL, *cmd = NULL, *ask = NULL;
	int i, np, n, na = 0;

	for (i = 0; i < c->argc; i++) {
		argv[i] = c->argv[i];
		len[i] = c->len[i];
	}
	if (c->pieces) {	/* hiredis takes one buffer per argument */
		np = last_pieces(c, pb, pl);
		joined = malloc(last_len(c) + 1);
		if (!joined)
			return -ENOMEM;
		for (i = 0; i < np; i++) {
			memcpy(joined + at, pb[i], pl[i]);
			at += pl[i];
		}
		argv[c->argc - 1] = joined;
		len[c->argc - 1] = at;
	}
	n = redisFormatCommandArgv(&cmd, c->argc, argv, len);
	free(joined);
	if (n < 0)
		return -ENOMEM;
	if (c->asking) {
		const char *av[1] = { "ASKING" };
		size_t al[1] = { 6 };
		char *both;

		na = redisFormatCommandArgv(&ask, 1, av, al);
		both = na < 0 ? NULL : malloc((size_t)na + (size_t)n);
		if (!both) {
			free(ask);
			free(cmd);
			return -ENOMEM;
		}
		memcpy(both, ask, (size_t)na);
		memcpy(both + na, cmd, (size_t)n);
		free(ask);
		free(cmd);
		cmd = both;
	}
	*out = cmd;
	return na + n;
}

/* hiredis formats each command (a copy of the value), we write it. */
static int node_write_hiredis(struct rc_cluster *cl, struct rc_node *nd)
{
	ssize_t n;
	int len;

	while (nd->q) {
		if (!nd->fmt) {
			len = cmd_format_hiredis(nd->q, &nd->fmt);
			if (len < 0)
				return len;
			nd->fmt_len = (size_t)len;
			nd->fmt_sent = 0;
		}
		n = send(nd->fd, nd->fmt + nd->fmt_sent, nd->fmt_len - nd->fmt_sent, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		cl->stats.bytes_out += (uint64_t)n;
		nd->fmt_sent += (size_t)n;
		if (nd->fmt_sent < nd->fmt_len)
			return 0;
		free(nd->fmt);
		nd->fmt = NULL;
		node_sent(nd);
	}
	return 0;
}

/* Write what @nd has queued until the socket is full; 0 or -errno. */
static int node_write(struct rc_cluster *cl, struct rc_node *nd)
{
	static const char crlf[2] = { '\r', '\n' };
	struct iovec iov[RC_IOV];
	struct rc_cmd *c;
	ssize_t n;
	int cnt;

	if (cl->hiredis_writes)
		return node_write_hiredis(cl, nd);
	while (nd->q) {
		cnt = 0;
		for (c = nd->q; c && cnt + RC_MAX_PIECES + 2 <= RC_IOV; c = c->next) {
			const char *base[RC_MAX_PIECES + 2];
			size_t len[RC_MAX_PIECES + 2];
			uint64_t off = c->sent;
			int i, np;

			base[0] = c->head;
			len[0] = c->head_len;
			np = 1 + last_pieces(c, base + 1, len + 1);
			base[np] = crlf;
			len[np++] = 2;
			for (i = 0; i < np; i++) {
				if (off >= len[i]) {
					off -= len[i];
					continue;
				}
				iov[cnt].iov_base = (void *)(base[i] + off);
				iov[cnt].iov_len = len[i] - off;
				cnt++;
				off = 0;
			}
		}
		n = sendmsg(nd->fd, &(struct msghdr){ .msg_iov = iov, .msg_iovlen = (size_t)cnt },
			    MSG_NOSIGNAL);	/* a dead server is an error, not SIGPIPE */
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		cl->stats.bytes_out += (uint64_t)n;
		while (n > 0 && nd->q) {
			uint64_t left = cmd_bytes(nd->q) - nd->q->sent;

			if ((uint64_t)n < left) {
				nd->q->sent += (uint64_t)n;
				return 0;
			}
			n -= (ssize_t)left;
			nd->q->sent += left;
			node_sent(nd);
		}
	}
	return 0;
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node named, or -1. */
static int redirect_node(struct rc_cluster *cl, const char *s, size_t len)
{
	const char *sp, *colon;

	sp = memchr(s, ' ', len);
	if (!sp)
		return -1;
	sp = memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s));
	if (!sp)
		return -1;
	sp++;
	colon = memrchr(sp, ':', len - (size_t)(sp - s));
	if (!colon)
		return -1;
	return node_find(cl, sp, (size_t)(colon - sp), atoi(colon + 1));
}

/* A reply to @nd's first awaited command: settle or redirect it. */
static void node_reply(struct rc_cluster *cl, struct rc_node *nd, redisReply *r)
{
	struct rc_cmd *c = nd->w;
	bool moved, ask;
	int to;

	if (c->asked) {		/* ASKING's +OK */
		c->asked = false;
		freeReplyObject(r);
		return;
	}
	nd->w = c->next;
	if (!nd->w)
		nd->w_tail = &nd->w;
	if (c == &nd->auth) {	/* refused: the connection is given up */
		if (r->type == REDIS_REPLY_ERROR) {
			nd->auth_refused = true;
			snprintf(cl->auth_err, sizeof(cl->auth_err), "%.*s", (int)r->len, r->str);
		}
		freeReplyObject(r);
		return;
	}
	if (r->type != REDIS_REPLY_ERROR) {
		cmd_done(c, r, 0);
		return;
	}
	moved = !strncmp(r->str, "MOVED ", 6);
	ask = !strncmp(r->str, "ASK ", 4);
	if (moved || ask) {
		to = redirect_node(cl, r->str, r->len);
		freeReplyObject(r);
		if (to < 0 || ++c->hops > RC_MAX_HOPS) {
			cmd_done(c, NULL, to < 0 ? -ENXIO : -ELOOP);
			return;
		}
		if (moved) {
			cl->stats.moved++;
			cl->slot_node[c->slot] = (int16_t)to;
			cl->dirty = true;
		} else {
			cl->stats.ask++;
		}
		c->asking = ask;
		c->node = to;
		if (!cmd_head(c)) {
			cmd_done(c, NULL, -EINVAL);
			return;
		}
		node_queue(&cl->node[to], c);
		return;
	}
	if (!strncmp(r->str, "CLUSTERDOWN", 11) || !strncmp(r->str, "TRYAGAIN", 8) ||
	    !strncmp(r->str, "LOADING", 7)) {
		cl->stats.busy++;
		cl->dirty = true;
		freeReplyObject(r);
		cmd_done(c, NULL, -EAGAIN);
		return;
	}
	cmd_done(c, r, 0);	/* an error the caller reads */
}

/*
 * The length of the bulk string the reader stopped in (its '$' consumed,
 * its length line at the reader's cursor), and in *@hdr that line's
 * bytes; -1 when it did not stop in one, or has not its whole length line
 * yet; -2 when that line is not a length.
 */
static long long pending_bulk(const redisReader *rd, size_t *hdr)
{
	const char *p = rd->buf + rd->pos, *nl;
	size_t have = rd->len - rd->pos;
	char *end;
	long long len;

	if (rd->ridx < 0 || rd->rstack[rd->ridx].type != REDIS_REPLY_STRING)
		return -1;
	nl = memchr(p, '\n', have < 24 ? have : 24);
	if (!nl)
		return have < 24 ? -1 : -2;
	if (nl == p || nl[-1] != '\r')
		return -2;
	errno = 0;
	len = strtoll(p, &end, 10);
	if (errno || end != nl - 1 || len < -1)
		return -2;
	*hdr = (size_t)(nl + 1 - p);
	return len;
}

/*
 * After the reader stopped inside a reply to @nd's awaited command: has
 * the reply grown, or does its bulk string say it will grow, past what
 * the command can need?  (The reader only allocates a bulk string once
 * it is all in the buffer: refused here, it never is.)
 */
static bool reply_too_big(struct rc_node *nd)
{
	const redisReader *rd = nd->reader;
	size_t max = reply_max_bytes(nd->w), hdr;
	long long len = pending_bulk(rd, &hdr);

	if (len == -2 || (len > 0 && (uint64_t)len > max))
		return true;
	return nd->reply_bytes + (rd->len - rd->pos) > max;
}

/* Copy @n bytes of @c's value (and its CRLF, past it) from @p, at @nd->direct_off. */
static void direct_copy(struct rc_node *nd, const char *p, size_t n)
{
	struct rc_cmd *c = nd->direct;
	size_t off = nd->direct_off, k;

	for (; n; n -= k, p += k, off += k) {
		if (off < c->into_len[0]) {
			k = c->into_len[0] - off < n ? c->into_len[0] - off : n;
			memcpy((char *)c->into[0] + off, p, k);
		} else if (off < into_bytes(c)) {
			k = into_bytes(c) - off < n ? into_bytes(c) - off : n;
			memcpy((char *)c->into[1] + off - c->into_len[0], p, k);
		} else {
			k = 1;
			nd->crlf[off - into_bytes(c)] = *p;
		}
	}
	nd->direct_off = off;
}

/*
 * The reader stopped inside a string reply to the awaited command, which
 * asked for its value to land in its buffers (@into) and is that long:
 * take the reply over from the reader, so that the rest of the value is
 * read from the socket straight into the buffers, never through the
 * reader's (one copy of every byte less).  Relies on how hiredis's reader
 * leaves an incomplete bulk string: its type read ('$' consumed, and the
 * buffer maybe compacted past it), the length line and the bytes so far
 * unconsumed.  Return: taken over.
 */
static bool direct_start(struct rc_node *nd)
{
	redisReader *rd = nd->reader;
	struct rc_cmd *c = nd->w;
	const char *p = rd->buf + rd->pos;
	size_t have = rd->len - rd->pos, hdr;
	long long len;

	if (!c || c->asked || !c->into[0] || rd->ridx != 0 || rd->rstack[0].parent)
		return false;
	len = pending_bulk(rd, &hdr);
	if (len < 0 || (size_t)len != into_bytes(c))
		return false;
	if (have - hdr >= into_bytes(c) + 2)
		return false;	/* the reader has it whole: it parses it */
	nd->direct = c;
	nd->direct_off = 0;
	direct_copy(nd, p + hdr, have - hdr);
	rd->pos = rd->len;	/* consumed; the reader starts on the next reply */
	rd->ridx = -1;
	return true;
}

/*
 * Read the rest of @nd->direct's value into its buffers; when it is
 * whole (and its CRLF right), settle the command with an empty string
 * reply and @landed set, as rc_create_string() does.  Return: 1 done,
 * 0 the socket is empty, or -errno.
 */
static int direct_read(struct rc_cluster *cl, struct rc_node *nd)
{
	struct rc_cmd *c = nd->direct;
	size_t total = into_bytes(c) + 2, off;
	struct iovec iov[3];
	redisReply *r;
	ssize_t n;
	int cnt;

	while ((off = nd->direct_off) < total) {
		cnt = 0;
		if (off < c->into_len[0])
			iov[cnt++] = (struct iovec){ (char *)c->into[0] + off, c->into_len[0] - off };
		if (c->into_len[1] && off < into_bytes(c))
			iov[cnt++] = off < c->into_len[0] ?
				     (struct iovec){ c->into[1], c->into_len[1] } :
				     (struct iovec){ (char *)c->into[1] + off - c->into_len[0],
						     into_bytes(c) - off };
		iov[cnt++] = off < into_bytes(c) ? (struct iovec){ nd->crlf, 2 } :
			     (struct iovec){ nd->crlf + off - into_bytes(c), total - off };
		n = readv(nd->fd, iov, cnt);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		cl->stats.bytes_in += (uint64_t)n;
		nd->direct_off += (size_t)n;
	}
	if (nd->crlf[0] != '\r' || nd->crlf[1] != '\n')
		return -EPROTO;
	r = calloc(1, sizeof(*r));
	if (r)
		r->str = calloc(1, 1);
	if (!r || !r->str) {
		free(r);
		return -ENOMEM;
	}
	r->type = REDIS_REPLY_STRING;
	nd->direct = NULL;
	cmd_landed(c);
	node_reply(cl, nd, r);
	return 1;
}

/*
 * Read what @nd's socket has straight into its reader's buffer (hiredis's
 * sds, grown for it: one copy of each byte less than feeding the reader
 * from a buffer of ours), and settle the replies; a value that lands in a
 * command's buffers is read into them directly once its length is known
 * (direct_start()).  Return: 0 or -errno.
 */
static int node_read(struct rc_cluster *cl, struct rc_node *nd)
{
	redisReader *rd = nd->reader;
	void *r;
	ssize_t n;
	int ret;

	for (;;) {
		sds buf;

		if (nd->direct) {
			ret = direct_read(cl, nd);
			if (ret <= 0)
				return ret;
		}
		buf = sdsMakeRoomFor(rd->buf, RC_RBUF);

		if (!buf)
			return -ENOMEM;
		rd->buf = buf;
		n = read(nd->fd, buf + rd->len, RC_RBUF);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		cl->stats.bytes_in += (uint64_t)n;
		sdsIncrLen(buf, (int)n);
		rd->len += (size_t)n;
		rc_cur = nd;
		while (nd->w && !nd->auth_refused) {
			size_t before = rd->len - rd->pos;

			if (redisReaderGetReply(rd, &r) != REDIS_OK) {
				rc_cur = NULL;
				if (rd->err == REDIS_ERR_OOM)	/* an array refused */
					cl->stats.refused++;
				return -EPROTO;
			}
			if (!r) {	/* consumed of a reply not whole yet */
				nd->reply_bytes += before - (rd->len - rd->pos);
				break;
			}
			nd->reply_bytes = 0;
			node_reply(cl, nd, r);
		}
		rc_cur = NULL;
		if (nd->auth_refused)
			return -EACCES;
		if (!nd->w && rd->len > rd->pos) {
			cl->stats.stale++;	/* a reply nobody asked for */
			return -EPROTO;
		}
		if (direct_start(nd)) {
			nd->reply_bytes = 0;
			continue;
		}
		if (nd->w && reply_too_big(nd)) {
			cl->stats.refused++;
			return -EPROTO;
		}
		if ((size_t)n < RC_RBUF)
			return 0;
	}
}

/*
 * Before a batch: an idle connection with bytes to read (replies nobody
 * asked for: a server out of step with us, whose next reply would answer
 * the wrong command) or closed by the server is dropped, and made again.
 */
static void node_check_idle(struct rc_cluster *cl, struct rc_node *nd)
{
	char b;
	ssize_t n;

	if (nd->fd < 0 || nd->connecting || nd->w || nd->q)
		return;
	n = recv(nd->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
	    nd->reader->len == nd->reader->pos)
		return;
	cl->stats.stale++;
	node_disconnect(nd);
}

/* ---- the slot map ---- */

/* Read CLUSTER SLOTS from node @i, blocking up to @deadline; 0 or -errno. */
static int slots_from(struct rc_cluster *cl, uint32_t i, uint64_t deadline)
{
	struct rc_node *nd = &cl->node[i];
	struct rc_cmd c = { .argc = 2, .argv = { "CLUSTER", "SLOTS" }, .len = { 7, 5 },
			    .slot_map = true };
	redisReply *r;
	size_t k;
	uint32_t s;
	int ret = 0;

	c.node = (int)i;
	if (!cmd_head(&c))
		return -EINVAL;
	node_queue(nd, &c);
	rc_run(cl, deadline);	/* a batch of one, the slot map left alone */
	r = c.reply;
	if (!r)
		return c.err ? c.err : -EIO;
	if (r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return -EPROTO;
	}
	for (k = 0; k < r->elements; k++) {
		redisReply *e = r->element[k], *m;
		long long lo, hi;
		int to;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER) {
			ret = -EPROTO;
			break;
		}
		m = e->element[2];
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER || lo < 0 || hi >= RC_SLOTS || lo > hi) {
			ret = -EPROTO;
			break;
		}
		/* an empty address means the node we asked */
		if (m->element[0]->len)
			to = node_find(cl, m->element[0]->str, m->element[0]->len,
				       (int)m->element[1]->integer);
		else
			to = node_find(cl, nd->host, strlen(nd->host), (int)m->element[1]->integer);
		if (to < 0) {
			ret = -ENOSPC;
			break;
		}
		for (s = (uint32_t)lo; s <= (uint32_t)hi; s++)
			cl->slot_node[s] = (int16_t)to;
	}
	freeReplyObject(r);
	return ret;
}

/*
 * Read the slot map from the first node that answers, starting after the
 * last one that did not: a stopped node accepts connections and never
 * answers, so each node gets a quarter of the client's timeout at most.
 */
static int slots_refresh(struct rc_cluster *cl, uint64_t deadline)
{
	uint64_t each = (uint64_t)cl->timeout_ms * 1000000u / 4;
	uint32_t i, k;
	int ret = -ENXIO;

	for (k = 0; k < cl->nr_nodes; k++) {
		uint64_t now = now_ns();

		if (now >= deadline)
			break;
		i = (cl->refresh_from + k) % cl->nr_nodes;
		ret = slots_from(cl, i, now + each < deadline ? now + each : deadline);
		if (!ret) {
			cl->refresh_from = i;
			cl->dirty = false;
			cl->stats.refreshes++;
			return 0;
		}
	}
	cl->refresh_from = (cl->refresh_from + k + 1) % cl->nr_nodes;
	return ret;
}

/* ---- the batch loop ---- */

static bool rc_cancelled(const struct rc_cluster *cl)
{
	return __atomic_load_n(&cl->cancelled, __ATOMIC_ACQUIRE);
}

/*
 * Run every node's queued commands until all are settled, @deadline, or
 * rc_cancel() (they fail with -ECANCELED then).
 */
static void rc_run(struct rc_cluster *cl, uint64_t deadline)
{
	struct pollfd pfd[RC_MAX_NODES + 1];
	int idx[RC_MAX_NODES];
	uint32_t i;
	int nfds, ret;

	for (;;) {
		uint64_t now;
		bool cancel = rc_cancelled(cl);

		nfds = 0;
		for (i = 0; i < cl->nr_nodes; i++) {
			struct rc_node *nd = &cl->node[i];

			if (!nd->q && !nd->w)
				continue;
			if (nd->fd < 0) {
				ret = node_connect(cl, nd);
				if (ret) {
					node_fail(cl, nd, ret);
					continue;
				}
			}
			if (!nd->connecting && nd->q) {
				ret = node_write(cl, nd);
				if (ret) {
					node_fail(cl, nd, -EIO);
					continue;
				}
			}
			pfd[nfds].fd = nd->fd;
			pfd[nfds].events = (short)((nd->connecting || nd->q ? POLLOUT : 0) |
						   (nd->connecting ? 0 : POLLIN));
			pfd[nfds].revents = 0;
			idx[nfds++] = (int)i;
		}
		if (!nfds)
			return;
		now = now_ns();
		if (now >= deadline || cancel) {
			for (i = 0; i < (uint32_t)nfds; i++)
				node_fail(cl, &cl->node[idx[i]], cancel ? -ECANCELED : -ETIMEDOUT);
			return;
		}
		pfd[nfds] = (struct pollfd){ .fd = cl->wake[0], .events = POLLIN };
		ret = poll(pfd, (nfds_t)nfds + 1, (int)((deadline - now + 999999u) / 1000000u));
		if (ret < 0 && errno != EINTR) {
			for (i = 0; i < (uint32_t)nfds; i++)
				node_fail(cl, &cl->node[idx[i]], -EIO);
			return;
		}
		for (i = 0; ret > 0 && i < (uint32_t)nfds; i++) {
			struct rc_node *nd = &cl->node[idx[i]];
			short ev = pfd[i].revents;

			if (!ev)
				continue;
			if (nd->connecting) {
				int soerr = 0;
				socklen_t sl = sizeof(soerr);

				getsockopt(nd->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
				if (soerr || (ev & (POLLERR | POLLHUP))) {
					node_fail(cl, nd, -EIO);
					continue;
				}
				nd->connecting = false;
				continue;
			}
			if (ev & (POLLIN | POLLERR | POLLHUP)) {
				ret = node_read(cl, nd);
				if (ret) {
					node_fail(cl, nd, ret == -EACCES ? ret : -EIO);
					continue;
				}
			}
		}
	}
}

/**
 * rc_exec() - run a batch of commands on the cluster
 * @cl: the client
 * @cmds: the commands; each gets its reply or its error
 * @n: how many
 *
 * Pipelined on every shard at once; returns when every command has its
 * reply or its error, at the latest the client's timeout after it began
 * (plus a slot-map read, when one is due, inside the same deadline).
 */
void rc_exec(struct rc_cluster *cl, struct rc_cmd *cmds, uint32_t n)
{
	uint64_t deadline = now_ns() + (uint64_t)cl->timeout_ms * 1000000u;
	uint32_t i;

	cl->stats.batches++;
	cl->stats.cmds += n;
	if (rc_cancelled(cl)) {
		for (i = 0; i < n; i++)
			cmd_done(&cmds[i], NULL, -ECANCELED);
		return;
	}
	for (i = 0; i < cl->nr_nodes; i++)
		node_check_idle(cl, &cl->node[i]);
	if (cl->dirty)
		slots_refresh(cl, deadline);
	for (i = 0; i < n; i++) {
		struct rc_cmd *c = &cmds[i];
		int to = cl->slot_node[c->slot];

		c->reply = NULL;
		c->landed = 0;
		c->err = 0;
		c->hops = 0;
		c->asking = c->asked = false;
		if (to < 0) {
			cmd_done(c, NULL, -ENXIO);
			cl->dirty = true;
			continue;
		}
		if (c->argc < 1 || c->argc > RC_MAX_ARGS || !cmd_head(c)) {
			cmd_done(c, NULL, -EINVAL);
			continue;
		}
		c->node = to;
		node_queue(&cl->node[to], c);
	}
	rc_run(cl, deadline);
}

/**
 * rc_open() - connect to a cluster
 * @seeds: "host:port[,host:port...]": nodes to read the slot map from
 * @timeout_ms: every batch's deadline
 * @user: the ACL user AUTH names, or NULL (the server's default user)
 * @password: NULL: no AUTH; else every connection AUTHenticates first,
 *	and one the server refuses is given up (its commands fail with
 *	-EACCES)
 * @err: where to say why it failed
 * @err_len: bytes at @err
 *
 * Return: the client, or NULL (with @err written) when no seed answers
 * CLUSTER SLOTS with a map, or the seeds refuse AUTH.
 */
struct rc_cluster *rc_open(const char *seeds, uint32_t timeout_ms, const char *user,
			   const char *password, char *err, size_t err_len)
{
	struct rc_cluster *cl;
	const char *p = seeds;
	int ret;

	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		snprintf(err, err_len, "remote: out of memory");
		return NULL;
	}
	memset(cl->slot_node, 0xff, sizeof(cl->slot_node));
	cl->timeout_ms = timeout_ms ? timeout_ms : 1000;
	if (pipe2(cl->wake, O_NONBLOCK | O_CLOEXEC)) {
		snprintf(err, err_len, "remote: pipe: %s", strerror(errno));
		free(cl);
		return NULL;
	}
	if (user && strlen(user) > 100) {
		snprintf(err, err_len, "remote: user name longer than 100 bytes");
		rc_close(cl);
		return NULL;
	}
	cl->user = user && *user ? strdup(user) : NULL;
	cl->password = password ? strdup(password) : NULL;
	if ((user && *user && !cl->user) || (password && !cl->password)) {
		snprintf(err, err_len, "remote: out of memory");
		rc_close(cl);
		return NULL;
	}
	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *colon = memrchr(p, ':', len);

		if (!colon || node_find(cl, p, (size_t)(colon - p), atoi(colon + 1)) < 0) {
			snprintf(err, err_len, "remote: bad seed '%.*s' (want host:port)", (int)len, p);
			rc_close(cl);
			return NULL;
		}
		p = end ? end + 1 : NULL;
	}
	if (!cl->nr_nodes) {
		snprintf(err, err_len, "remote: no seed nodes given");
		rc_close(cl);
		return NULL;
	}
	ret = slots_refresh(cl, now_ns() + (uint64_t)cl->timeout_ms * 1000000u);
	if (ret && cl->auth_err[0]) {
		snprintf(err, err_len, "remote: the cluster refused AUTH as user '%s': %s",
			 cl->user ? cl->user : "default", cl->auth_err);
		rc_close(cl);
		return NULL;
	}
	if (ret) {
		snprintf(err, err_len, "remote: no seed answered CLUSTER SLOTS (%s): is it a cluster?",
			 strerror(-ret));
		rc_close(cl);
		return NULL;
	}
	return cl;
}

void rc_close(struct rc_cluster *cl)
{
	uint32_t i;

	if (!cl)
		return;
	for (i = 0; i < cl->nr_nodes; i++)
		node_disconnect(&cl->node[i]);
	if (cl->password) {
		explicit_bzero(cl->password, strlen(cl->password));
		free(cl->password);
	}
	free(cl->user);
	close(cl->wake[0]);
	close(cl->wake[1]);
	free(cl);
}

/**
 * rc_cancel() - end the call in flight and every later one at once
 * @cl: the client
 *
 * From any thread, while another may be in rc_exec(): its commands and
 * every later one's fail with -ECANCELED (a miss to the caller), waiting
 * on no node.  For a shutdown: the client is of no more use after.
 */
void rc_cancel(struct rc_cluster *cl)
{
	static const char b = 1;

	__atomic_store_n(&cl->cancelled, true, __ATOMIC_RELEASE);
	if (write(cl->wake[1], &b, 1) < 0) {
		/* full: a wake-up is pending already */
	}
}

void rc_set_hiredis_writes(struct rc_cluster *cl, bool on)
{
	cl->hiredis_writes = on;
}

const struct rc_stats *rc_stats(const struct rc_cluster *cl)
{
	return &cl->stats;
}

/* Nodes known: the seeds and every node the slot map or a redirect named. */
uint32_t rc_nodes(const struct rc_cluster *cl)
{
	return cl->nr_nodes;
}
