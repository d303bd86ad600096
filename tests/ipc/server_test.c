// SPDX-License-Identifier: MIT
/*
 * tests/ipc/server_test.c - kvmm_server: rings across processes.  The
 * server runs in this process; clients attach from this process and from
 * forked children, one of which is killed with SIGKILL while it holds
 * sequences and pins.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers.h"

static char sock_path[108];

static const char *test_path(const char *tag)
{
	snprintf(sock_path, sizeof(sock_path), "/tmp/kvmm-test-%d-%s.sock", (int)getpid(), tag);
	return sock_path;
}

/* Wait (at most 5 s) until the server has no client left. */
static bool wait_no_clients(struct kvmm_server *srv)
{
	int i;

	for (i = 0; i < 500; i++) {
		if (!kvmm_server_clients(srv))
			return true;
		usleep(10000);
	}
	return false;
}

static void server_serves_a_ring(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 256, 8, 128);
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	struct kvmm_server *srv;
	struct kvmm_ring ring;
	uint32_t *tok;
	int32_t seq;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("a"), 0, &srv), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock_path, &rp, &ring), 0);
	CU_ASSERT_EQUAL(ring.buf_size, 4096);
	tok = ring.buf;
	test_tokens(tok, 100, 3);
	kvmm_prep_open(TEST_SQE(&ring), 0);
	seq = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(seq >= 0);
	kvmm_prep_match(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 99);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_extend(TEST_SQE(&ring), (uint32_t)seq, 100, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), (uint32_t)seq, 0, 0, 100);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	/* registering memory the server cannot see is refused */
	CU_ASSERT_EQUAL(kvmm_ring_register_buffers(&ring, NULL, 0), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_CACHED), 100);
	kvmm_ring_exit(&ring);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Wait (at most 5 s) until @ring's server thread sleeps on its doorbell. */
static bool wait_server_sleeps(const struct kvmm_ring *ring)
{
	int i;

	for (i = 0; i < 500; i++) {
		if (__atomic_load_n(&ring->hdr->sq_sleeping, __ATOMIC_ACQUIRE))
			return true;
		usleep(10000);
	}
	return false;
}

/*
 * A polling server polls for a bounded while only: with two rings idle
 * after a burst of commands, both threads end up asleep on their
 * doorbells (an idle server costs nothing), and the doorbell still
 * brings each back for the next command.
 */
static void polling_server_sleeps_when_idle(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 256, 8, 128);
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	struct kvmm_server *srv;
	struct kvmm_ring ring[2];
	int i, r;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("poll"), KVMM_SERVER_POLL, &srv),
			      0);
	for (r = 0; r < 2; r++)
		CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock_path, &rp, &ring[r]), 0);
	for (i = 0; i < 3; i++) {
		for (r = 0; r < 2; r++) {
			kvmm_prep_nop(TEST_SQE(&ring[r]));
			CU_ASSERT_EQUAL(test_ring1(&ring[r], NULL), 0);
		}
		for (r = 0; r < 2; r++)
			CU_ASSERT(wait_server_sleeps(&ring[r]));
	}
	for (r = 0; r < 2; r++)
		kvmm_ring_exit(&ring[r]);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/*
 * A side naps on its futex bell only when the other side says it rings
 * it (client_wakes, server_wakes): with both cleared, as an older peer
 * leaves them, the server thread only ever sleeps on its eventfd
 * doorbell (never KVMM_RING_SLEEP_BELL in sq_sleeping), and commands
 * after idle spells still complete, both ways.  Set, it naps.
 */
static void older_peers_are_woken_on_their_doorbells(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 256, 8, 128);
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	struct kvmm_server *srv;
	struct kvmm_ring ring;
	uint32_t how, i, k, bell = 0, naps = 0;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("old"), 0, &srv), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock_path, &rp, &ring), 0);
	CU_ASSERT_EQUAL(ring.hdr->server_wakes, KVMM_RING_WAKES_BELL);
	CU_ASSERT_EQUAL(ring.hdr->client_wakes, KVMM_RING_WAKES_BELL);
	for (k = 0; k < 2; k++) {
		uint32_t wakes = k ? KVMM_RING_WAKES_BELL : 0;

		__atomic_store_n(&ring.hdr->client_wakes, wakes, __ATOMIC_RELAXED);
		__atomic_store_n(&ring.hdr->server_wakes, wakes, __ATOMIC_RELAXED);
		for (i = 0; i < 20; i++) {
			kvmm_prep_nop(TEST_SQE(&ring));
			CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
			/* idle: the thread polls, (naps,) then sleeps on its doorbell */
			while (!wait_server_sleeps(&ring) ||
			       __atomic_load_n(&ring.hdr->sq_sleeping, __ATOMIC_ACQUIRE) !=
			       KVMM_RING_SLEEP_DOORBELL) {
				how = __atomic_load_n(&ring.hdr->sq_sleeping, __ATOMIC_ACQUIRE);
				naps += how == KVMM_RING_SLEEP_BELL;
				if (!k && how == KVMM_RING_SLEEP_BELL)
					bell++;
				usleep(100);
			}
		}
	}
	CU_ASSERT_EQUAL(bell, 0);	/* cleared: never a nap */
	CU_ASSERT(naps > 0);		/* set: 20 naps of 10 ms, seen at least once */
	kvmm_ring_exit(&ring);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

/* Child: attach, take sequences and a pin, report, then wait to be killed. */
static void child_hold_and_wait(const char *path, int fd)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	struct kvmm_ring ring;
	uint32_t *tok;
	int i;

	if (kvmm_ring_connect(path, &rp, &ring))
		_exit(1);
	tok = ring.buf;
	test_tokens(tok, 64, 8);
	for (i = 0; i < 3; i++) {
		int32_t seq;

		kvmm_prep_open(CHILD_SQE(&ring), 0);
		seq = test_ring1(&ring, NULL);
		kvmm_prep_match(CHILD_SQE(&ring), (uint32_t)seq, 0, 0, 63);
		test_ring1(&ring, NULL);
		kvmm_prep_extend(CHILD_SQE(&ring), (uint32_t)seq, 64, 0);
		test_ring1(&ring, NULL);
		kvmm_prep_commit(CHILD_SQE(&ring), (uint32_t)seq, 0, 0, 40);
		test_ring1(&ring, NULL);
	}
	kvmm_prep_pin(CHILD_SQE(&ring), 0, 0, 0, 32, 0);
	if (test_ring1(&ring, NULL) != 32)
		_exit(2);
	if (write(fd, "x", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

/*
 * Child: map the server's KV pool, write page 5 of every buffer (byte
 * 0x40 + buffer), check the ring still works, and exit: 0 when all went
 * as @want_attach (the attach's expected result) says.
 */
static void child_write_shared_kv(const char *path, int want_attach)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	struct kvmm_kv_pool *pool = NULL;
	struct kvmm_kv_layer kl, none;
	struct kvmm_ring ring;
	uint32_t l;

	if (kvmm_ring_connect(path, &rp, &ring))
		_exit(10);
	if (kvmm_kv_pool_attach(&ring, NULL, &pool) != want_attach)
		_exit(11);
	for (l = 0; pool && kvmm_kv_pool_layer(pool, l, &kl) == 0; l++) {
		if (kvmm_kv_pool_pages(pool) != 64)
			_exit(12);
		memset((char *)kl.k + 5 * 16 * kl.slot_bytes, 0x40 + 2 * l, 16 * kl.slot_bytes);
		memset((char *)kl.v + 5 * 16 * kl.slot_bytes, 0x41 + 2 * l, 16 * kl.slot_bytes);
	}
	if (pool && (l != 2 || kvmm_kv_pool_layer(pool, 2, &none) != -EINVAL))
		_exit(13);
	kvmm_kv_pool_close(pool);
	kvmm_prep_nop(CHILD_SQE(&ring));
	if (test_ring1(&ring, NULL) != 0)
		_exit(14);
	kvmm_ring_exit(&ring);
	_exit(0);
}

static int run_child_writer(int want_attach)
{
	int status = -1;
	pid_t pid = fork();

	if (!pid)
		child_write_shared_kv(sock_path, want_attach);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/*
 * kvmmd owns the pool; an engine process maps the same KV buffers through
 * its ring's socket (descriptors passed with SCM_RIGHTS) and what it
 * writes is in the server's pool.  A refused share reaches the client as
 * its errno and the ring goes on.
 */
static void server_shares_the_pool_with_another_process(void)
{
	struct kvmm_mock_faults f = { 0 };
	struct kvmm_mock_arg arg = { .shareable = true, .faults = &f };
	struct kvmm_params p = test_params(16, 64, 8, 256);
	struct kvmm_ctx *ctx = NULL;
	struct kvmm_server *srv;
	struct kvmm_kv_layer kl;
	char want[16 * 8];
	uint32_t l;

	p.backend_arg = &arg;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("s"), 0, &srv), 0);
	CU_ASSERT_EQUAL(run_child_writer(0), 0);
	for (l = 0; l < 2; l++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_kv_layer(ctx, l, &kl), 0);
		CU_ASSERT_EQUAL_FATAL(kl.slot_bytes, 8);
		memset(want, 0x40 + 2 * l, sizeof(want));
		CU_ASSERT(!memcmp((char *)kl.k + 5 * sizeof(want), want, sizeof(want)));
		memset(want, 0x41 + 2 * l, sizeof(want));
		CU_ASSERT(!memcmp((char *)kl.v + 5 * sizeof(want), want, sizeof(want)));
		CU_ASSERT(((char *)kl.k)[4 * sizeof(want)] == 0);	/* page 4 untouched */
	}
	kvmm_lock(ctx);		/* the server reads it under the lock */
	f.fail_share = -EIO;
	kvmm_unlock(ctx);
	CU_ASSERT_EQUAL(run_child_writer(-EIO), 0);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

static void killed_client_releases_everything(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 512, 8, 128);
	struct kvmm_server *srv;
	int pfd[2], status;
	pid_t pid;
	char c;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("k"), 0, &srv), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(pfd), 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid) {
		close(pfd[0]);
		child_hold_and_wait(sock_path, pfd[1]);
	}
	close(pfd[1]);
	CU_ASSERT_EQUAL_FATAL(read(pfd[0], &c, 1), 1);
	close(pfd[0]);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_SEQS_OPEN), 3);
	CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_PAGES_OWNED) > 0);
	CU_ASSERT(test_stat_locked(ctx, KVMM_STAT_PAGES_PROTECTED) > 0);
	CU_ASSERT_EQUAL(test_stat_locked(ctx, KVMM_STAT_PAGES_PINNED), 32);
	kill(pid, SIGKILL);
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_SEQS_OPEN), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PROTECTED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PINNED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_CACHED), 40);
	CHECK_OK(ctx);
	kvmm_unlock(ctx);
	kvmm_server_stop(srv);
	kvmm_destroy(ctx);
}

static void server_refuses_a_bad_hello(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 16, 2, 8);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 64 };
	struct kvmm_welcome w;
	struct kvmm_server *srv;
	struct kvmm_ring ring;
	char junk[sizeof(struct kvmm_hello)];
	int s;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("h"), 0, &srv), 0);
	memset(junk, 0x5a, sizeof(junk));
	strcpy(sa.sun_path, sock_path);
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	CU_ASSERT_EQUAL_FATAL(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CU_ASSERT_EQUAL(send(s, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	CU_ASSERT_EQUAL(recv(s, &w, sizeof(w), MSG_WAITALL), (ssize_t)sizeof(w));
	CU_ASSERT_EQUAL(w.status, -EPROTO);
	close(s);
	/* a shape the server refuses comes back as its errno */
	rp.sq_entries = 1u << 20;
	CU_ASSERT_EQUAL(kvmm_ring_connect(sock_path, &rp, &ring), -EINVAL);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	kvmm_destroy(ctx);
}

static void server_start_checks_the_path(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 16, 2, 8);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmm_server *srv, *other;
	FILE *f;
	int s;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("p"), 0, &srv), 0);
	CU_ASSERT_EQUAL(kvmm_server_start(ctx, sock_path, 0, &other), -EADDRINUSE);
	kvmm_server_stop(srv);
	/* a stale socket (its server died without unlinking) is replaced */
	strcpy(sa.sun_path, sock_path);
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	CU_ASSERT_EQUAL_FATAL(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(s);
	CU_ASSERT_EQUAL(kvmm_server_start(ctx, sock_path, 0, &srv), 0);
	kvmm_server_stop(srv);
	/* something that is not a socket is left alone */
	f = fopen(sock_path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fclose(f);
	CU_ASSERT_EQUAL(kvmm_server_start(ctx, sock_path, 0, &srv), -EEXIST);
	unlink(sock_path);
	CU_ASSERT_EQUAL(kvmm_server_start(ctx, "", 0, &srv), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_ring_connect(sock_path, &(struct kvmm_ring_params){
					   .sq_entries = 4 }, &(struct kvmm_ring){ 0 }),
			-ENOENT);
	kvmm_destroy(ctx);
}

/* A client that binds its ring: the server holds it to that namespace. */
static void server_keeps_a_bound_client_to_its_namespace(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 4, 32);
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256,
				       .flags = KVMM_RING_F_NS, .ns = 9 };
	struct kvmm_server *srv;
	struct kvmm_ring ring;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("b"), 0, &srv), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock_path, &rp, &ring), 0);
	kvmm_prep_open(TEST_SQE(&ring), 8);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_prep_open(TEST_SQE(&ring), 9);
	CU_ASSERT(test_ring1(&ring, NULL) >= 0);
	kvmm_prep_drop_caches(TEST_SQE(&ring));
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), -EPERM);
	kvmm_ring_exit(&ring);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	kvmm_destroy(ctx);
}

/*
 * KVMM_SERVER_NS_UID: a client running as another user is bound to the
 * namespace of its uid, whatever it asks for.  Needs root (to become
 * nobody); inactive otherwise.
 */
static void server_binds_each_user_to_its_uid(void)
{
	struct kvmm_ctx *ctx = test_ctx(1, 64, 4, 32);
	struct kvmm_server *srv;
	int status;
	pid_t pid;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, test_path("u"), KVMM_SERVER_NS_UID,
						&srv), 0);
	CU_ASSERT_EQUAL_FATAL(chmod(sock_path, 0777), 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid) {
		struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256 };
		struct kvmm_ring ring;
		int32_t res;

		if (setgid(65534) || setuid(65534))
			_exit(10);
		if (kvmm_ring_connect(sock_path, &rp, &ring))
			_exit(11);
		kvmm_prep_open(CHILD_SQE(&ring), 0);
		if (test_ring1(&ring, NULL) != -EPERM)
			_exit(12);
		kvmm_prep_open(CHILD_SQE(&ring), 65534);
		res = test_ring1(&ring, NULL);
		if (res < 0)
			_exit(13);
		/* asking for another namespace than its uid's is refused */
		kvmm_ring_exit(&ring);
		rp.flags = KVMM_RING_F_NS;
		rp.ns = 1;
		_exit(kvmm_ring_connect(sock_path, &rp, &ring) == -EPERM ? 0 : 14);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status));
	if (WEXITSTATUS(status))
		fprintf(stderr, "uid-bound client failed at step %d\n", WEXITSTATUS(status));
	CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
	CU_ASSERT(wait_no_clients(srv));
	kvmm_server_stop(srv);
	kvmm_destroy(ctx);
}

int register_server_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_server", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, server_serves_a_ring);
	ADD_TEST(s, killed_client_releases_everything);
	ADD_TEST(s, server_shares_the_pool_with_another_process);
	ADD_TEST(s, server_refuses_a_bad_hello);
	ADD_TEST(s, server_start_checks_the_path);
	ADD_TEST(s, server_keeps_a_bound_client_to_its_namespace);
	ADD_TEST(s, polling_server_sleeps_when_idle);
	ADD_TEST(s, older_peers_are_woken_on_their_doorbells);
	{
		CU_pTest t = CU_add_test(s, "server_binds_each_user_to_its_uid",
					 server_binds_each_user_to_its_uid);

		if (!t)
			return -1;
		if (geteuid()) {
			printf("kvmm_server: server_binds_each_user_to_its_uid inactive: "
			       "needs root to run a client as another user\n");
			CU_set_test_active(t, CU_FALSE);
		}
	}
	return 0;
}
