// SPDX-License-Identifier: MIT
/*
 * tests/remote/server_test.c - the remote tier's client against a server
 * that is not what it claims: a fake "cluster" of one node, in a thread,
 * that answers every command as the test says: redirections that loop,
 * ASK, CLUSTERDOWN, bytes that are not RESP, replies nobody asked for, a
 * bulk string that never ends, silence, a closed connection, replies of
 * the wrong type.  Every one must end in misses counted as errors or
 * timeouts, within the batch's deadline, with nothing served: the error
 * paths of driver/remote/cluster.c, which a healthy cluster never takes.
 * Replies larger than their command can need (an array header of 2^31 - 1
 * elements, a bulk string of 1 GiB that keeps coming) are refused as soon
 * as they say so: errors, not timeouts.
 *
 * Needs hiredis in the build, not redis-server.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "../helpers.h"
#include "autoconf.h"

#if CONFIG_KVMM_HIREDIS

#define PS		4
#define PAGE		1024	/* one-part values: small pages */
#define TIMEOUT_MS	300

enum fake_mode {
	FAKE_SLOTS_BAD,		/* CLUSTER SLOTS answered +OK */
	FAKE_MOVED_LOOP,	/* every command MOVED to itself */
	FAKE_ASK,		/* ASK to itself, then the answer after ASKING */
	FAKE_CLUSTERDOWN,
	FAKE_GARBAGE,		/* not RESP */
	FAKE_EXTRA,		/* two replies a command */
	FAKE_SILENT,		/* never answers */
	FAKE_ENDLESS,		/* a bulk string that never ends */
	FAKE_CLOSE,		/* closes the connection */
	FAKE_WRONG_TYPE,	/* a string where an integer belongs, and back */
	FAKE_DRIBBLE,		/* GET: a value of the right length, not kvmm's, in
				 * small pieces (read straight into the page) */
	FAKE_BAD_CRLF,		/* ... and what follows it is not CRLF */
	FAKE_OK,		/* EXISTS :1, GET nil: a healthy empty node */
	FAKE_HUGE_ARRAY,	/* an array header of 2^31 - 1 elements, then nothing */
	FAKE_HUGE_BULK,		/* a bulk string of 1 GiB, sent as fast as it goes */
	FAKE_SLOTS_HUGE,	/* CLUSTER SLOTS answered like FAKE_HUGE_ARRAY */
};

/* Bytes of a value of the client's: the page, the 96-byte header, its tokens. */
#define VALUE_BYTES	(PAGE + 96 + PS * 4)

struct fake {
	int lfd;
	int port;
	int mode;		/* atomic: the test sets it, the thread reads it */
	bool stop;		/* atomic */
	unsigned long asking;	/* ASKING commands seen */
	unsigned long cmds;
	pthread_t th;
};

static struct fake fk;
static const struct kvmm_remote_ops *ops;

static int fake_mode(void)
{
	return __atomic_load_n(&fk.mode, __ATOMIC_RELAXED);
}

static void set_mode(int mode)
{
	__atomic_store_n(&fk.mode, mode, __ATOMIC_RELAXED);
}

/* Send @n bytes of @s, @piece at a time with a pause between (0: at once). */
static void say_n(int fd, const char *s, size_t n, size_t piece)
{
	size_t at = 0;

	while (at < n) {
		size_t k = piece && piece < n - at ? piece : n - at;
		ssize_t w = send(fd, s + at, k, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		at += (size_t)w;
		if (piece)
			usleep(300);
	}
}

static void say(int fd, const char *s)
{
	say_n(fd, s, strlen(s), 0);
}

/* "$1073741824" and its bytes, until the client stops reading (256 MiB at most). */
static void say_endless(int fd)
{
	static char chunk[1 << 16];
	size_t sent;

	say(fd, "$1073741824\r\n");
	memset(chunk, 'x', sizeof(chunk));
	for (sent = 0; sent < (256u << 20); sent += sizeof(chunk))
		if (send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL) != (ssize_t)sizeof(chunk))
			return;
}

/* A string reply of VALUE_BYTES that is not a value of kvmm's, trailed by @end. */
static void say_value(int fd, const char *end, size_t piece)
{
	static char v[16 + VALUE_BYTES + 2];
	int h = snprintf(v, sizeof(v), "$%d\r\n", VALUE_BYTES);

	memset(v + h, 'x', VALUE_BYTES);
	memcpy(v + h + VALUE_BYTES, end, 2);
	say_n(fd, v, (size_t)h + VALUE_BYTES + 2, piece);
}

/*
 * One whole command at @buf (a RESP array of bulk strings): its bytes, or
 * 0 when more are needed; the first argument's name in @name.
 */
static size_t parse_cmd(const char *buf, size_t len, char *name, size_t name_len)
{
	const char *p = buf, *end = buf + len, *nl;
	long argc, i;

	if (len < 4 || *p != '*')
		return 0;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl)
		return 0;
	argc = strtol(p + 1, NULL, 10);
	p = nl + 1;
	for (i = 0; i < argc; i++) {
		long blen;

		if (p >= end || *p != '$')
			return 0;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			return 0;
		blen = strtol(p + 1, NULL, 10);
		p = nl + 1;
		if (end - p < blen + 2)
			return 0;
		if (i == 0) {
			size_t n = (size_t)blen < name_len - 1 ? (size_t)blen : name_len - 1;

			memcpy(name, p, n);
			name[n] = '\0';
		}
		p += blen + 2;
	}
	return (size_t)(p - buf);
}

static void answer(int fd, const char *name, bool *asked)
{
	char line[256];
	bool cluster = !strcasecmp(name, "CLUSTER");

	fk.cmds++;
	if (!strcasecmp(name, "ASKING")) {
		fk.asking++;
		*asked = true;
		say(fd, "+OK\r\n");
		return;
	}
	if (cluster) {
		if (fake_mode() == FAKE_SLOTS_BAD) {
			say(fd, "+OK\r\n");
			return;
		}
		if (fake_mode() == FAKE_SLOTS_HUGE) {
			say(fd, "*2147483647\r\n");
			return;
		}
		snprintf(line, sizeof(line),
			 "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", fk.port);
		say(fd, line);
		return;
	}
	switch (fake_mode()) {
	case FAKE_MOVED_LOOP:
		snprintf(line, sizeof(line), "-MOVED 1 127.0.0.1:%d\r\n", fk.port);
		say(fd, line);
		return;
	case FAKE_ASK:
		if (!*asked) {
			snprintf(line, sizeof(line), "-ASK 1 127.0.0.1:%d\r\n", fk.port);
			say(fd, line);
			return;
		}
		*asked = false;
		say(fd, !strcasecmp(name, "EXISTS") ? ":1\r\n" : "$-1\r\n");
		return;
	case FAKE_CLUSTERDOWN:
		say(fd, "-CLUSTERDOWN The cluster is down\r\n");
		return;
	case FAKE_GARBAGE:
		say(fd, "!!! this is not RESP\r\n");
		return;
	case FAKE_EXTRA:
		say(fd, ":1\r\n:1\r\n");
		return;
	case FAKE_SILENT:
		return;
	case FAKE_HUGE_ARRAY:
		if (!*asked)	/* once a connection: then silence */
			say(fd, "*2147483647\r\n");
		*asked = true;
		return;
	case FAKE_HUGE_BULK:
		say_endless(fd);
		return;
	case FAKE_ENDLESS:
		say(fd, "$2147483647\r\nabc");
		return;
	case FAKE_DRIBBLE:
	case FAKE_BAD_CRLF:
		if (!strcasecmp(name, "GET")) {
			say_value(fd, fake_mode() == FAKE_DRIBBLE ? "\r\n" : "XY", 97);
			return;
		}
		say(fd, ":0\r\n");
		return;
	case FAKE_WRONG_TYPE:
		say(fd, !strcasecmp(name, "EXISTS") ? "$1\r\n1\r\n" :
			!strcasecmp(name, "GET") ? ":42\r\n" : ":0\r\n");
		return;
	default:
		say(fd, !strcasecmp(name, "EXISTS") ? ":1\r\n" :
			!strcasecmp(name, "GET") ? "$-1\r\n" :
			!strcasecmp(name, "SET") ? "+OK\r\n" : ":0\r\n");
		return;
	}
}

struct conn {
	int fd;
	char buf[1 << 16];
	size_t len;
	bool asked;
};

static void *fake_main(void *arg)
{
	struct conn *c = calloc(8, sizeof(*c));
	struct pollfd pfd[9];
	int i;

	for (i = 0; i < 8; i++)
		c[i].fd = -1;
	while (!__atomic_load_n(&fk.stop, __ATOMIC_RELAXED)) {
		pfd[0].fd = fk.lfd;
		pfd[0].events = POLLIN;
		for (i = 0; i < 8; i++) {
			pfd[i + 1].fd = c[i].fd;
			pfd[i + 1].events = POLLIN;
		}
		if (poll(pfd, 9, 20) <= 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			int fd = accept(fk.lfd, NULL, NULL);

			for (i = 0; fd >= 0 && i < 8 && c[i].fd >= 0; i++)
				;
			if (fd >= 0 && i < 8) {
				c[i].fd = fd;
				c[i].len = 0;
				c[i].asked = false;
			} else if (fd >= 0) {
				close(fd);
			}
		}
		for (i = 0; i < 8; i++) {
			ssize_t r;
			size_t used;
			char name[32];

			if (c[i].fd < 0 || !(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = recv(c[i].fd, c[i].buf + c[i].len, sizeof(c[i].buf) - c[i].len, 0);
			if (r <= 0) {
				close(c[i].fd);
				c[i].fd = -1;
				continue;
			}
			c[i].len += (size_t)r;
			while ((used = parse_cmd(c[i].buf, c[i].len, name, sizeof(name))) > 0) {
				if (fake_mode() == FAKE_CLOSE && strcasecmp(name, "CLUSTER")) {
					close(c[i].fd);
					c[i].fd = -1;
					break;
				}
				answer(c[i].fd, name, &c[i].asked);
				memmove(c[i].buf, c[i].buf + used, c[i].len - used);
				c[i].len -= used;
			}
			if (c[i].fd >= 0 && c[i].len == sizeof(c[i].buf))
				c[i].len = 0;	/* a value larger than we care to hold */
		}
	}
	for (i = 0; i < 8; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
	free(c);
	return NULL;
}

static int suite_init(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);

	ops = kvmm_remote_lookup("redis");
	fk.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!ops || fk.lfd < 0 || bind(fk.lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(fk.lfd, 16) || getsockname(fk.lfd, (struct sockaddr *)&a, &al))
		return -1;
	fk.port = ntohs(a.sin_port);
	set_mode(FAKE_OK);
	return pthread_create(&fk.th, NULL, fake_main, NULL) ? -1 : 0;
}

static int suite_clean(void)
{
	__atomic_store_n(&fk.stop, true, __ATOMIC_RELAXED);
	pthread_join(fk.th, NULL);
	close(fk.lfd);
	return 0;
}

static void *client(char *err, size_t err_len)
{
	char seeds[64];
	struct kvmm_remote_cfg cfg = {
		.seeds = seeds, .salt = "s", .model_id = "m", .page_size = PS,
		.page_bytes = PAGE, .timeout_ms = TIMEOUT_MS, .err = err, .err_len = err_len,
	};
	void *priv = NULL;

	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", fk.port);
	return ops->init(&cfg, &priv) ? NULL : priv;
}

static double secs_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * In mode @mode: probe, get and put 8 pages; every call ends within the
 * deadline (two batches for a put: its probe and its writes; the delete
 * after a bad read is a third), nothing is read; the counters after.
 */
static struct kvmm_remote_stats run_mode(int mode)
{
	char err[256] = "";
	void *priv;
	uint32_t tok[8 * PS], i;
	struct kvmm_remote_page pg[8];
	static char page[8][PAGE];
	void *dst[8];
	const void *src[8];
	struct kvmm_remote_stats st = { 0 };
	struct timespec t0;
	int put;

	set_mode(FAKE_OK);	/* the slot map is read at init */
	priv = client(err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	set_mode(mode);
	test_tokens(tok, 8 * PS, 3);
	ops->chain(priv, NULL, tok, 8, pg);
	for (i = 0; i < 8; i++) {
		dst[i] = page[i];
		src[i] = page[i];
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL(ops->get(priv, pg, 8, dst, NULL), 0);
	CU_ASSERT(secs_since(&t0) < 3 * TIMEOUT_MS / 1000.0 + 0.5);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* a server that answers twice may have a probe say yes: reads tell */
	CU_ASSERT(ops->probe(priv, pg, 8, NULL) == 0 || mode == FAKE_ASK || mode == FAKE_EXTRA);
	CU_ASSERT(secs_since(&t0) < TIMEOUT_MS / 1000.0 + 0.5);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	put = ops->put(priv, pg, 8, src);
	CU_ASSERT(secs_since(&t0) < 2 * TIMEOUT_MS / 1000.0 + 0.5);
	CU_ASSERT(put <= 8);
	ops->stats(priv, &st);
	CU_ASSERT_EQUAL(st.get_hits, 0);
	ops->exit(priv);
	set_mode(FAKE_OK);
	return st;
}

static void fake_slots_bad(void)
{
	char err[256] = "";

	set_mode(FAKE_SLOTS_BAD);
	CU_ASSERT_PTR_NULL(client(err, sizeof(err)));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "CLUSTER SLOTS"));
	set_mode(FAKE_OK);
}

static void fake_moved_loop(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_MOVED_LOOP);

	CU_ASSERT(st.moved > 0);
	CU_ASSERT(st.errors > 0);	/* -ELOOP, after RC_MAX_HOPS */
}

static void fake_ask(void)
{
	unsigned long before = fk.asking;
	struct kvmm_remote_stats st = run_mode(FAKE_ASK);

	CU_ASSERT(st.ask > 0);
	CU_ASSERT(fk.asking > before);	/* ASKING went before the command */
	CU_ASSERT_EQUAL(st.probe_hits, 8);	/* its answers were read as answers */
	CU_ASSERT_EQUAL(st.errors + st.timeouts, 0);
}

static void fake_clusterdown(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_CLUSTERDOWN);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.puts, 0);
}

static void fake_garbage(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_GARBAGE);

	CU_ASSERT(st.errors > 0);
}

static void fake_extra(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_EXTRA);

	/* replies in excess: the connection is dropped, not trusted */
	CU_ASSERT(st.errors + st.stale > 0);
	CU_ASSERT_EQUAL(st.corrupt, 8);		/* GETs answered with integers */
}

static void fake_silent(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_SILENT);

	CU_ASSERT(st.timeouts > 0);
	CU_ASSERT_EQUAL(st.puts, 0);
}

/* A bulk string of 2 GiB that never comes: refused at its length. */
static void fake_endless(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_ENDLESS);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.timeouts, 0);
}

static void fake_close(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_CLOSE);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT(st.connects > 1);	/* each batch connects again */
}

static void fake_wrong_type(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_WRONG_TYPE);

	CU_ASSERT_EQUAL(st.probe_hits, 0);
	CU_ASSERT_EQUAL(st.corrupt, 8);		/* GET answered with integers */
	CU_ASSERT_EQUAL(st.puts, 0);		/* SET answered with :0 */
}

/*
 * A value that arrives in small pieces is read into the caller's page as
 * it comes (the reader steps aside once it knows the length): whole, then
 * checked, and not kvmm's, so a miss counted as corrupt.
 */
static void fake_dribble(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_DRIBBLE);

	CU_ASSERT_EQUAL(st.corrupt, 8);
	CU_ASSERT_EQUAL(st.errors + st.timeouts, 0);
}

/*
 * An array header of 2^31 - 1 elements (no command of the tier's has an
 * array reply): refused when it is read, the connection dropped; every
 * call ends within its deadline (run_mode() checks), as an error.
 */
static void fake_huge_array(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_HUGE_ARRAY);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.timeouts, 0);
	CU_ASSERT_EQUAL(st.get_hits + st.probe_hits + st.puts, 0);
}

/* A bulk string longer than any value: refused at its length, not read on. */
static void fake_huge_bulk(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_HUGE_BULK);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.timeouts, 0);
	CU_ASSERT_EQUAL(st.get_hits + st.probe_hits + st.puts, 0);
}

/* A slot map of 2^31 - 1 ranges: no cluster, said within the deadline. */
static void fake_slots_huge(void)
{
	char err[256] = "";
	struct timespec t0;

	set_mode(FAKE_SLOTS_HUGE);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_PTR_NULL(client(err, sizeof(err)));
	CU_ASSERT(secs_since(&t0) < TIMEOUT_MS / 1000.0 + 0.5);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "CLUSTER SLOTS"));
	set_mode(FAKE_OK);
}

/* ... and one that is not followed by CRLF breaks the connection: misses. */
static void fake_bad_crlf(void)
{
	struct kvmm_remote_stats st = run_mode(FAKE_BAD_CRLF);

	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.corrupt, 0);
}

int register_remote_server_suite(void)
{
	CU_pSuite s = CU_add_suite("remote_server", suite_init, suite_clean);

	if (!s)
		return -1;
	ADD_TEST(s, fake_slots_bad);
	ADD_TEST(s, fake_moved_loop);
	ADD_TEST(s, fake_ask);
	ADD_TEST(s, fake_clusterdown);
	ADD_TEST(s, fake_garbage);
	ADD_TEST(s, fake_extra);
	ADD_TEST(s, fake_silent);
	ADD_TEST(s, fake_endless);
	ADD_TEST(s, fake_close);
	ADD_TEST(s, fake_wrong_type);
	ADD_TEST(s, fake_dribble);
	ADD_TEST(s, fake_bad_crlf);
	ADD_TEST(s, fake_huge_array);
	ADD_TEST(s, fake_huge_bulk);
	ADD_TEST(s, fake_slots_huge);
	return 0;
}

#else

int register_remote_server_suite(void)
{
	return 0;	/* register_remote_suite() says hiredis is missing */
}

#endif
