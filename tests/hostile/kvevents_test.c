// SPDX-License-Identifier: MIT
/*
 * tests/hostile/kvevents_test.c - kvmm_hostile_kvevents: kvmmd's KV
 * events (--kv-events) with tenants bound to their uids' namespaces
 * (--ns-per-uid), each running as its own uid.  A tenant's prompts are
 * published on its own namespace's topic and never on another's: the
 * operator, subscribed to every topic, finds tenant A's tokens only on
 * A's topic, and the subscriber of B's topic gets B's tokens and none of
 * A's.  The stream's transport is the access boundary: a tenant that
 * tries to subscribe to an ipc endpoint only the operator may write to
 * receives nothing.  And kvmmd's --kv-events options are checked.
 *
 * The prefix query (--metrics, --query-socket) likewise: over the Unix
 * socket a tenant learns how much of a prompt its own namespace caches
 * and is refused another's; over TCP, where nobody is known, a tenant's
 * namespace is not answered at all.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <autoconf.h>

#include "../helpers.h"
#include "hostile.h"

#define TENANT_B	65533u
#define PROMPT		48		/* tokens: three pages of 16 */
#define A_TOKEN(i)	(0x5ec00000u + (i))	/* >= 2^16: msgpack 0xce + 4 bytes */
#define B_TOKEN(i)	(0x0b000000u + (i))
#define TIMEOUT_MS	10000

/* A tenant caches @arg's PROMPT tokens in its own namespace. */
static int tenant_cache(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	struct kvmm_ring ring;
	const char *sock = ((const char *const *)arg)[0];
	uint32_t base = (uint32_t)(uintptr_t)((void *const *)arg)[1], *tok, i;
	int32_t seq;

	if (kvmm_ring_connect(sock, &rp, &ring))
		return 10;
	tok = ring.buf;
	for (i = 0; i < PROMPT; i++)
		tok[i] = base + i;
	kvmm_prep_open(hostile_sqe(&ring), getuid());
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 11;
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, PROMPT, 0);
	if (hostile_ring1(&ring))
		return 12;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)seq, 0, 0, PROMPT);
	if (hostile_ring1(&ring))
		return 13;
	kvmm_ring_exit(&ring);
	return 0;
}

#if CONFIG_KVMM_KVEVENTS
#include <zmq.h>

struct kvev_env {
	char dir[64];
	char sock[96];
	char endpoint[128];
	pid_t kvmmd;
};

static int env_start(struct kvev_env *e)
{
	char path[112];
	const char *argv[] = { "kvmmd", "--socket", e->sock, "--ns-per-uid", "--quiet",
			       "--pages", "64", "--page-size", "16", "--layers", "1",
			       "--kv-heads", "1", "--head-dim", "8", "--max-seqs", "8",
			       "--kv-events", e->endpoint, NULL };
	int i;

	memset(e, 0, sizeof(*e));
	e->kvmmd = -1;
	if (hostile_tmpdir(e->dir, sizeof(e->dir)))
		return -1;
	snprintf(e->sock, sizeof(e->sock), "%s/kvmmd.sock", e->dir);
	snprintf(path, sizeof(path), "%s/events", e->dir);
	snprintf(e->endpoint, sizeof(e->endpoint), "ipc://%s", path);
	e->kvmmd = hostile_spawn(argv, -1);
	if (e->kvmmd < 0 || hostile_wait_socket(e->sock, TIMEOUT_MS))
		return -1;
	/* tenants may attach rings; the event socket stays the operator's */
	for (i = 0; i < 100 && access(path, F_OK); i++)
		usleep(10000);
	return chmod(e->sock, 0777);
}

static int env_stop(struct kvev_env *e)
{
	char path[112];
	int st = -1;

	if (e->kvmmd > 0) {
		kill(e->kvmmd, SIGTERM);
		st = hostile_reap(e->kvmmd, TIMEOUT_MS);
	}
	snprintf(path, sizeof(path), "%s/events", e->dir);
	unlink(path);
	unlink(e->sock);
	rmdir(e->dir);
	return st;
}

static void *sub_open(void *zctx, const char *endpoint, const char *topic)
{
	void *s = zmq_socket(zctx, ZMQ_SUB);

	if (!s)
		return NULL;
	zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, strlen(topic));
	zmq_connect(s, endpoint);
	return s;
}

/* Does @p[0..n) hold token @t as msgpack writes a uint32 (0xce, big-endian)? */
static bool has_token(const unsigned char *p, size_t n, uint32_t t)
{
	const unsigned char want[5] = { 0xce, t >> 24, t >> 16, t >> 8, t };
	size_t i;

	for (i = 0; i + 5 <= n; i++)
		if (!memcmp(p + i, want, 5))
			return true;
	return false;
}

struct seen {
	unsigned msgs;
	unsigned a_on_a, a_elsewhere, b_on_b;
};

/* Read messages until @quiet_ms pass without one; tally where tokens are. */
static void drain(void *s, int quiet_ms, uint32_t a_ns, uint32_t b_ns, struct seen *out)
{
	zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
	char a_topic[64], b_topic[64];

	snprintf(a_topic, sizeof(a_topic), "kvmm/ns/%u/", a_ns);
	snprintf(b_topic, sizeof(b_topic), "kvmm/ns/%u/", b_ns);
	while (zmq_poll(&it, 1, quiet_ms) > 0) {
		static unsigned char payload[1 << 16];
		char topic[64] = { 0 };
		unsigned char seq[8];
		int n;
		bool a;

		zmq_recv(s, topic, sizeof(topic) - 1, 0);
		zmq_recv(s, seq, sizeof(seq), 0);
		n = zmq_recv(s, payload, sizeof(payload), 0);
		if (n < 0)
			break;
		out->msgs++;
		a = has_token(payload, (size_t)n, A_TOKEN(0)) ||
		    has_token(payload, (size_t)n, A_TOKEN(PROMPT - 1));
		if (a && !strcmp(topic, a_topic))
			out->a_on_a++;
		else if (a)
			out->a_elsewhere++;
		if (has_token(payload, (size_t)n, B_TOKEN(0)) && !strcmp(topic, b_topic))
			out->b_on_b++;
	}
}

/* An eavesdropper, as uid nobody: subscribes to every topic for 2 s. */
static int eavesdrop(const char *endpoint)
{
	void *zctx = zmq_ctx_new(), *s = sub_open(zctx, endpoint, "");
	struct seen seen = { 0 };
	int linger = 0;

	if (!s)
		return 100;
	drain(s, 2000, 0, 0, &seen);
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_close(s);
	zmq_ctx_term(zctx);
	return seen.msgs > 99 ? 99 : (int)seen.msgs;
}

static void kvevents_tenant_prompts_stay_on_their_topic(void)
{
	struct kvev_env e;
	const void *a_arg[2], *b_arg[2];
	struct seen all = { 0 }, b = { 0 };
	void *zctx = zmq_ctx_new(), *s_all, *s_b;
	char b_topic[32];
	int linger = 0, st;
	pid_t spy;

	if (env_start(&e)) {
		CU_FAIL("kvmmd --kv-events did not start");
		env_stop(&e);
		return;
	}
	snprintf(b_topic, sizeof(b_topic), "kvmm/ns/%u/", TENANT_B);
	s_all = sub_open(zctx, e.endpoint, "");
	s_b = sub_open(zctx, e.endpoint, b_topic);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s_all);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s_b);
	spy = fork();
	if (!spy) {
		if (setgid(HOSTILE_NOBODY) || setuid(HOSTILE_NOBODY))
			_exit(101);
		_exit(eavesdrop(e.endpoint));
	}
	usleep(300000);		/* the subscriptions reach kvmmd first */
	a_arg[0] = e.sock, a_arg[1] = (void *)(uintptr_t)A_TOKEN(0);
	b_arg[0] = e.sock, b_arg[1] = (void *)(uintptr_t)B_TOKEN(0);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, tenant_cache, a_arg, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_child(TENANT_B, tenant_cache, b_arg, TIMEOUT_MS), 0);
	drain(s_all, 500, HOSTILE_NOBODY, TENANT_B, &all);
	drain(s_b, 200, HOSTILE_NOBODY, TENANT_B, &b);
	/* the operator sees both tenants, each on its own topic */
	CU_ASSERT(all.a_on_a >= 1);
	CU_ASSERT_EQUAL(all.a_elsewhere, 0);
	CU_ASSERT(all.b_on_b >= 1);
	/* B's topic: B's prompt, nothing of A's */
	CU_ASSERT(b.b_on_b >= 1);
	CU_ASSERT_EQUAL(b.a_on_a + b.a_elsewhere, 0);
	CU_ASSERT_EQUAL(b.msgs, b.b_on_b);
	/* a tenant cannot write to the operator's socket: it got nothing */
	st = hostile_reap(spy, TIMEOUT_MS);
	CU_ASSERT_EQUAL(st, 0);
	zmq_setsockopt(s_all, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(s_b, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_close(s_all);
	zmq_close(s_b);
	zmq_ctx_term(zctx);
	CU_ASSERT(hostile_alive(e.kvmmd));
	CU_ASSERT_EQUAL(env_stop(&e), 0);
}
#endif /* CONFIG_KVMM_KVEVENTS */

#if CONFIG_KVMM_HTTP
struct query_env {
	char dir[64];
	char sock[96];
	char qsock[96];
	char tcp[32];
	int port;
	pid_t kvmmd;
};

/*
 * POST /v1/prefix with {"tokens": the secret prompt, "ns": @ns} (no "ns"
 * when @ns < 0) to @path (a Unix socket) or 127.0.0.1:@port; the status
 * code, the body in @out.
 */
static int query(const char *path, int port, long ns, char *out, size_t len)
{
	char body[1024], req[1400], *p = body;
	int fd, n, got = 0, status = -1;
	uint32_t i;

	p += sprintf(p, "{\"tokens\":[");
	for (i = 0; i < PROMPT; i++)
		p += sprintf(p, "%s%u", i ? "," : "", A_TOKEN(i));
	p += sprintf(p, "]");
	if (ns >= 0)
		p += sprintf(p, ",\"ns\":%ld", ns);
	sprintf(p, "}");
	n = snprintf(req, sizeof(req), "POST /v1/prefix HTTP/1.1\r\nHost: kvmmd\r\n"
		     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
		     "Connection: close\r\n\r\n%s", strlen(body), body);
	if (path) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };

		snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
			goto out;
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
			goto out;
	}
	if (write(fd, req, (size_t)n) != n)
		goto out;
	while (got < (int)len - 1 && (n = (int)read(fd, out + got, len - 1 - (size_t)got)) > 0)
		got += n;
	out[got] = '\0';
	if (sscanf(out, "HTTP/1.1 %d", &status) != 1)
		status = -1;
out:
	if (fd >= 0)
		close(fd);
	return status;
}

/* The body of an answer: past the headers. */
static const char *body_of(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");

	return b ? b + 4 : "";
}

/* A tenant, as its own uid: caches the secret prompt when @arg says so. */
static int q_tenant_cache(void *arg)
{
	const void *a[2] = { arg, (void *)(uintptr_t)A_TOKEN(0) };

	return tenant_cache(a);
}

/*
 * Tenant B, as uid 65533: its own namespace holds none of the prompt;
 * A's namespace is refused over the Unix socket and over TCP.
 */
static int q_tenant_b(void *arg)
{
	const struct query_env *e = arg;
	char out[4096];

	if (query(e->qsock, 0, -1, out, sizeof(out)) != 200 ||
	    !strstr(body_of(out), "\"ns\":65533,") || !strstr(body_of(out), "\"cached_total\":0}"))
		return 30;
	if (query(e->qsock, 0, HOSTILE_NOBODY, out, sizeof(out)) != 403 ||
	    strstr(out, "cached_total"))
		return 31;
	if (query(NULL, e->port, HOSTILE_NOBODY, out, sizeof(out)) != 403 ||
	    strstr(out, "cached_total"))
		return 32;
	if (query(NULL, e->port, 65533, out, sizeof(out)) != 403)
		return 33;
	return 0;
}

/* Tenant A, as nobody: its own prompt, found on the device. */
static int q_tenant_a(void *arg)
{
	const struct query_env *e = arg;
	char out[4096];

	if (query(e->qsock, 0, -1, out, sizeof(out)) != 200 ||
	    !strstr(body_of(out), "\"cached\":{\"device\":48,\"host\":0,\"nvme\":0}"))
		return 40;
	return 0;
}

static void query_tenants_learn_only_their_own_namespace(void)
{
	struct query_env e;
	char out[4096];

	memset(&e, 0, sizeof(e));
	e.port = 20000 + (int)(getpid() % 20000);
	snprintf(e.tcp, sizeof(e.tcp), "127.0.0.1:%d", e.port);
	CU_ASSERT_EQUAL_FATAL(hostile_tmpdir(e.dir, sizeof(e.dir)), 0);
	snprintf(e.sock, sizeof(e.sock), "%s/kvmmd.sock", e.dir);
	snprintf(e.qsock, sizeof(e.qsock), "%s/query.sock", e.dir);
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--ns-per-uid", "--quiet",
				       "--pages", "64", "--page-size", "16", "--layers", "1",
				       "--kv-heads", "1", "--head-dim", "8", "--max-seqs", "8",
				       "--metrics", e.tcp, "--query-socket", e.qsock, NULL };

		e.kvmmd = hostile_spawn(argv, -1);
	}
	if (e.kvmmd < 0 || hostile_wait_socket(e.sock, TIMEOUT_MS) || chmod(e.sock, 0777)) {
		CU_FAIL("kvmmd --metrics --query-socket did not start");
		goto out;
	}
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, q_tenant_cache, e.sock, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, q_tenant_a, &e, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_child(TENANT_B, q_tenant_b, &e, TIMEOUT_MS), 0);
	/* the operator (root) may ask about any namespace, over the Unix socket */
	CU_ASSERT_EQUAL(query(e.qsock, 0, HOSTILE_NOBODY, out, sizeof(out)), 200);
	CU_ASSERT_PTR_NOT_NULL(strstr(body_of(out), "\"cached_total\":48}"));
	CU_ASSERT_EQUAL(query(NULL, e.port, 0, out, sizeof(out)), 200);
	CU_ASSERT(hostile_alive(e.kvmmd));
out:
	if (e.kvmmd > 0) {
		kill(e.kvmmd, SIGTERM);
		CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, TIMEOUT_MS), 0);
	}
	unlink(e.qsock);
	unlink(e.sock);
	rmdir(e.dir);
}

/* kvmm-route asks kvmmd --metrics instances with the prefix query. */
static void route_asks_instances_by_the_prefix_query(void)
{
	char dir[64], sock[2][96], tcp[2][32], url[2][48], toks[PROMPT][16], out[4096],
	     want[512];
	const char *argv[PROMPT + 5] = { "kvmm-route" };
	const char *dead[] = { "kvmm-route", "http://127.0.0.1:1", "--", "1", NULL };
	pid_t pid[2] = { -1, -1 };
	int i, port = 20000 + (int)((getpid() + 7919) % 20000);

	CU_ASSERT_EQUAL_FATAL(hostile_tmpdir(dir, sizeof(dir)), 0);
	for (i = 0; i < 2; i++) {
		snprintf(sock[i], sizeof(sock[i]), "%s/k%d.sock", dir, i);
		snprintf(tcp[i], sizeof(tcp[i]), "127.0.0.1:%d", port + i);
		snprintf(url[i], sizeof(url[i]), "http://%s", tcp[i]);
		{
			const char *k[] = { "kvmmd", "--socket", sock[i], "--quiet", "--pages", "64",
					    "--page-size", "16", "--layers", "1", "--kv-heads", "1",
					    "--head-dim", "8", "--metrics", tcp[i], NULL };

			pid[i] = hostile_spawn(k, -1);
		}
		CU_ASSERT_FATAL(pid[i] > 0 && !hostile_wait_socket(sock[i], TIMEOUT_MS));
		argv[1 + i] = url[i];
	}
	/* the prompt in the second instance only: three pages */
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, q_tenant_cache, sock[1], TIMEOUT_MS), 0);
	argv[3] = "--";
	for (i = 0; i < PROMPT; i++) {
		snprintf(toks[i], sizeof(toks[i]), "%u", A_TOKEN(i));
		argv[4 + i] = toks[i];
	}
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), TIMEOUT_MS), 0);
	snprintf(want, sizeof(want), "%s 0\n%s 3\nroute %s\n", url[0], url[1], url[1]);
	CU_ASSERT_STRING_EQUAL(out, want);
	/* nothing listens there: exit 3, saying which */
	CU_ASSERT_EQUAL(hostile_run(dead, out, sizeof(out), TIMEOUT_MS), 3);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "http://127.0.0.1:1: cannot reach it"));
	for (i = 0; i < 2; i++) {
		kill(pid[i], SIGTERM);
		CU_ASSERT_EQUAL(hostile_reap(pid[i], TIMEOUT_MS), 0);
		unlink(sock[i]);
	}
	rmdir(dir);
}
#endif /* CONFIG_KVMM_HTTP */

/* kvmmd refuses what cannot publish, saying why. */
static void kvevents_options_are_checked(void)
{
	static const struct {
		const char *argv[10];
		int status;
		const char *says;
	} bad[] = {
		{ { "kvmmd", "--socket", "/nonexistent/s", "--kv-events-topic", "x", NULL }, 2,
		  "need --kv-events" },
		{ { "kvmmd", "--socket", "/nonexistent/s", "--kv-events", "ipc:///tmp/x",
		    "--events", "16K", NULL }, 2, "32768" },
		{ { "kvmmd", "--socket", "/nonexistent/s", "--kv-events", "ipc:///tmp/x",
		    "--kv-events-hash", "md5", NULL }, 2, "kv-events-hash" },
		{ { "kvmmd", "--socket", "/nonexistent/s", "--kv-events", "ipc:///tmp/x",
		    "--kv-events-buffer-steps", "0", NULL }, 2, "buffer-steps" },
#if CONFIG_KVMM_KVEVENTS
		/* an endpoint ZMQ cannot bind: before the socket is served */
		{ { "kvmmd", "--socket", "/tmp/kvmm-kvevents-bad.sock", "--pages", "16",
		    "--kv-events", "nosuch://x", NULL }, 1, "--kv-events nosuch://x" },
#else
		{ { "kvmmd", "--socket", "/nonexistent/s", "--kv-events", "ipc:///tmp/x", NULL },
		  2, "libzmq3-dev" },
#endif
	};
	char out[4096];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CU_ASSERT_EQUAL(hostile_run(bad[i].argv, out, sizeof(out), 10000), bad[i].status);
		if (!strstr(out, bad[i].says))
			fprintf(stderr, "kvmmd said: %s\n", out);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].says));
	}
	unlink("/tmp/kvmm-kvevents-bad.sock");
}

int register_hostile_kvevents_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_kvevents", NULL, NULL);

	if (!s)
		return -1;
#if CONFIG_KVMM_KVEVENTS
	ADD_TEST(s, kvevents_tenant_prompts_stay_on_their_topic);
#else
	fprintf(stderr, "kvmm_hostile_kvevents: built without libzmq, msgpack-c or libcrypto: "
		"only the option checks run\n");
#endif
	ADD_TEST(s, kvevents_options_are_checked);
#if CONFIG_KVMM_HTTP
	ADD_TEST(s, query_tenants_learn_only_their_own_namespace);
	ADD_TEST(s, route_asks_instances_by_the_prefix_query);
#else
	fprintf(stderr, "kvmm_hostile_kvevents: built without libmicrohttpd: "
		"the prefix query's isolation is not tested\n");
#endif
	return 0;
}
