// SPDX-License-Identifier: MIT
/*
 * fuzz/remote_fuzz.c - libFuzzer harness playing a hostile cluster node
 * against the remote tier's client (driver/remote/): whatever bytes the
 * node sends back to a batch of GETs, PUTs or EXISTS, cut into pieces of
 * any size, the client must end the batch (no hang, no crash, no stray
 * access: ASan watches its buffers), and never report a page read whose
 * bytes are not the page that was written.
 *
 * The node is a thread on a loopback socket.  It answers CLUSTER SLOTS
 * with a map of all slots to itself (so that the client's slot-map reads
 * work) and anything else with the fuzz input, then closes the
 * connection, which ends the batch at once.
 *
 * Input: byte 0 picks the call (get, probe, put) and the size of the
 * pieces the node writes; the rest is the reply stream.  Seeds worth
 * keeping in a corpus: a valid value ("$4208\r\n" + bytes + "\r\n"),
 * one cut after its length line (the client then reads the rest into the
 * page directly), MOVED/ASK to itself, arrays where strings belong.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libkvmm.h>
#include "../driver/driver.h"
#include "autoconf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if CONFIG_KVMM_HIREDIS

#define PS		4
#define PAGE		4096
#define NR		4

static int lfd, port;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t input[1 << 16];	/* the reply stream of the call running (a copy:
				 * the node may still send it after the call) */
static size_t input_len;
static size_t piece;		/* bytes the node writes at a time */

static void say(int fd, const void *p, size_t n)
{
	const char *s = p;

	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* One connection: CLUSTER SLOTS answered, anything else gets the input. */
static void serve(int fd)
{
	char buf[1 << 16], map[128];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
	size_t at;

	if (n <= 0)
		return;
	buf[n] = '\0';
	while (strstr(buf, "CLUSTER") && strstr(buf, "SLOTS")) {
		int len = snprintf(map, sizeof(map), "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n"
				   "$9\r\n127.0.0.1\r\n:%d\r\n", port);

		say(fd, map, (size_t)len);
		n = recv(fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			return;
		buf[n] = '\0';
	}
	pthread_mutex_lock(&mu);
	for (at = 0; at < input_len; at += piece)
		say(fd, input + at, input_len - at < piece ? input_len - at : piece);
	pthread_mutex_unlock(&mu);
}

static void *node_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(lfd, NULL, NULL), one = 1;

		if (fd < 0)
			continue;
		/* small pieces go out as they are, not held for an ACK */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve(fd);
		close(fd);
	}
	return NULL;
}

static void node_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t al = sizeof(a);
	pthread_t th;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 16) ||
	    getsockname(lfd, (struct sockaddr *)&a, &al))
		abort();
	port = ntohs(a.sin_port);
	if (pthread_create(&th, NULL, node_main, NULL))
		abort();
}

/* Page @i's bytes: what the harness writes, and what a read must match. */
static void stamp(uint8_t *p, uint32_t i)
{
	uint32_t b;

	for (b = 0; b < PAGE; b++)
		p[b] = (uint8_t)(b * 31u + i * 7u + 1u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct kvmm_remote_ops *ops;
	static void *priv;
	static uint32_t tok[NR * PS];
	static struct kvmm_remote_page pg[NR];
	static uint8_t page[NR][PAGE], want[NR][PAGE];
	void *dst[NR];
	const void *src[NR];
	uint8_t ok[NR];
	uint32_t i, got;

	if (!ops) {
		char err[256] = "";
		struct kvmm_remote_cfg cfg = {
			.salt = "fuzz", .model_id = "fuzz@1",
			.model = { .layers = 1, .kv_heads = 1, .head_dim = 1024,
				   .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
			.page_size = PS, .page_bytes = PAGE, .timeout_ms = 300,
			.err = err, .err_len = sizeof(err),
		};
		char seed[32];

		node_start();
		snprintf(seed, sizeof(seed), "127.0.0.1:%d", port);
		cfg.seeds = seed;
		ops = kvmm_remote_lookup("redis");
		if (!ops || ops->init(&cfg, &priv)) {
			fprintf(stderr, "remote_fuzz: %s\n", err);
			abort();
		}
		for (i = 0; i < NR * PS; i++)
			tok[i] = i * 13u + 5u;
		ops->chain(priv, NULL, tok, NR, pg);
		for (i = 0; i < NR; i++)
			stamp(want[i], i);
	}
	if (!size)
		return 0;
	pthread_mutex_lock(&mu);
	input_len = size - 1 < sizeof(input) ? size - 1 : sizeof(input);
	memcpy(input, data + 1, input_len);
	piece = 1 + (data[0] >> 2) * 67u;	/* 1 .. 4222 bytes at a time */
	pthread_mutex_unlock(&mu);
	for (i = 0; i < NR; i++) {
		dst[i] = page[i];
		src[i] = want[i];
	}
	switch (data[0] & 3) {
	case 0:	/* a prefix: the run read must be the pages written */
		got = ops->get(priv, pg, NR, dst, NULL);
		if (got > NR)
			abort();
		for (i = 0; i < got; i++)
			if (memcmp(page[i], want[i], PAGE))
				abort();
		break;
	case 1:	/* keyed values, page by page */
		ops->get(priv, pg, NR, dst, ok);
		for (i = 0; i < NR; i++)
			if (ok[i] && memcmp(page[i], want[i], PAGE))
				abort();
		break;
	case 2:
		if (ops->probe(priv, pg, NR, NULL) > NR)
			abort();
		break;
	default:
		if (ops->put(priv, pg, NR, src) > (int)NR)
			abort();
		break;
	}
	return 0;
}

#else

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	(void)data;
	(void)size;
	return 0;	/* built without hiredis: no remote tier to fuzz */
}

#endif
