// SPDX-License-Identifier: MIT
/*
 * tests/hostile/server_test.c - kvmm_hostile_server: clients that attack
 * the ring server itself.  Each attack runs in a child process (as uid
 * nobody where the attack is a tenant's); the parent then checks the
 * server (kvmmd, or kvmm_server_start() in this process) is alive, still
 * serves, stops in bounded time, and kvmm_check() holds.
 *
 *   - a client shrinks the memfds it was given (ring, KV pool) and makes
 *     the server touch them: sealed, so the shrink fails (issue 16, 1)
 *   - a tenant bound to its uid's namespace asks for the KV pool: refused
 *     with -EPERM, an unbound client still gets it (3)
 *   - a trickled hello or unread share replies cannot hold up stop (5)
 *   - 256 trickling handshakes do not lock a new client out (6)
 *   - a client whose CQ is full and who sleeps costs no wake-ups (7)
 *   - every connect over the client limit reads -EBUSY (13)
 *   - an engine's stale sequence id cannot close the request that reuses
 *     its row (issue 33, 11)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <linux/sockios.h>

#include <CUnit/CUnit.h>

#include "../helpers.h"
#include "../../ipc/ipc.h"
#include "hostile.h"

#define STOP_BOUND_MS	3000	/* a stop that takes longer is wedged */

static char dir[64], sock[128];

/* A private directory and the socket path in it. */
static int setup_dir(void)
{
	if (hostile_tmpdir(dir, sizeof(dir)))
		return -1;
	snprintf(sock, sizeof(sock), "%s/s", dir);
	return 0;
}

static void cleanup_dir(void)
{
	unlink(sock);
	rmdir(dir);
}

/*
 * A small context (its KV pool shareable when @share) served in this
 * process at a fresh socket with @flags; the test fails when it cannot be.
 */
static struct kvmm_ctx *server_up(bool share, uint32_t flags, struct kvmm_server **srvp)
{
	static struct kvmm_mock_arg arg = { .shareable = true };
	struct kvmm_params p = test_params(16, 64, 8, 256);
	struct kvmm_ctx *ctx = NULL;

	if (share)
		p.backend_arg = &arg;
	CU_ASSERT_FATAL(!setup_dir());
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, sock, flags, srvp), 0);
	return ctx;
}

/* Stop @srv (NULL: stopped already); kvmm_check() must hold after it. */
static void server_down(struct kvmm_ctx *ctx, struct kvmm_server *srv)
{
	if (srv)
		kvmm_server_stop(srv);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
	cleanup_dir();
}

static int connect_raw(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		close(s);
		return -1;
	}
	return s;
}

static struct kvmm_hello hello_of(uint32_t sq, uint32_t cq, uint64_t buf)
{
	return (struct kvmm_hello){
		.magic = KVMM_RING_MAGIC, .abi = KVMM_ABI_VERSION,
		.sqe_size = sizeof(struct kvmm_sqe), .cqe_size = sizeof(struct kvmm_cqe),
		.sq_entries = sq, .cq_entries = cq, .buf_size = buf,
	};
}

/*
 * The handshake by hand, keeping what kvmm_ring_connect() closes: the
 * ring's memfd (fds[0]) and its doorbells.  Return: the socket, or -1.
 */
static int handshake_raw(const char *path, int fds[3])
{
	struct kvmm_hello h = hello_of(8, 16, 4096);
	struct kvmm_welcome w;
	uint32_t n;
	int s = connect_raw(path);

	if (s < 0)
		return -1;
	if (send(s, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h) ||
	    kvmm_sock_recv(s, &w, sizeof(w), fds, 3, &n) || w.status || n != 3) {
		close(s);
		return -1;
	}
	return s;
}

#define SHARE_BROKEN	(-100000)	/* no answer came */

/*
 * Ask for the pool on @s and keep its descriptors (up to @max).
 * Return: how many; the server's refusal (-errno); SHARE_BROKEN.
 */
static int share_raw(int s, int *fds, uint32_t max)
{
	struct kvmm_share_req req = { .magic = KVMM_SHARE_MAGIC };
	struct kvmm_share sh;
	struct kvmm_share_ext ext[4];
	uint32_t got = 0, n, k;

	if (kvmm_sock_send(s, &req, sizeof(req), NULL, 0) ||
	    kvmm_sock_recv(s, &sh, sizeof(sh), NULL, 0, &k))
		return SHARE_BROKEN;
	if (sh.status)
		return sh.status;
	if (sh.nr_ext > 4 || sh.nr_fds > max ||
	    kvmm_sock_recv(s, ext, sh.nr_ext * sizeof(ext[0]), NULL, 0, &k))
		return SHARE_BROKEN;
	while (got < sh.nr_fds) {
		if (kvmm_sock_recv(s, &n, sizeof(n), fds + got, max - got, &k) || !k)
			return SHARE_BROKEN;
		got += k;
	}
	return (int)got;
}

static pid_t kvmmd_start(const char *extra)
{
	const char *argv[] = { "kvmmd", "--socket", sock, "--quiet", "--pages", "64",
			       "--layers", "2", "--kv-heads", "1", "--head-dim", "8",
			       "--page-size", "16", "--max-seqs", "8", "--max-seq-len",
			       "1024", "--host-pages", "64", extra, NULL };
	pid_t pid = hostile_spawn(argv, -1);

	if (pid < 0)
		return pid;
	if (hostile_wait_socket(sock, 10000) || chmod(sock, 0666)) {
		kill(pid, SIGKILL);
		hostile_reap(pid, 5000);
		return -1;
	}
	return pid;
}

/* SIGTERM; kvmmd exits 0 only when kvmm_check() held at exit. */
static int kvmmd_stop(pid_t pid)
{
	int st;

	kill(pid, SIGTERM);
	st = hostile_reap(pid, 10000);
	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		hostile_reap(pid, 5000);
	}
	return st;
}

/* A new client connects and a NOP on its ring completes. */
static void new_client_is_served(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256 };
	struct kvmm_ring ring = { 0 };

	CU_ASSERT_EQUAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	if (ring.hdr) {
		kvmm_prep_nop(kvmm_get_sqe(&ring));
		CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
		kvmm_ring_exit(&ring);
	}
}

/*
 * kvmmd (started with @extra) under @attack, run as nobody for at most
 * @timeout_ms: the attack exits 0 (what it tried failed), and kvmmd still
 * serves a new client and stops with kvmm_check() holding.
 */
static void kvmmd_survives(const char *extra, int (*attack)(void *arg), int timeout_ms)
{
	pid_t pid;

	CU_ASSERT_FATAL(!setup_dir());
	pid = kvmmd_start(extra);
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, attack, sock, timeout_ms), 0);
	CU_ASSERT_FATAL(hostile_alive(pid));
	new_client_is_served();
	CU_ASSERT(hostile_alive(pid));
	CU_ASSERT_EQUAL(kvmmd_stop(pid), 0);
	cleanup_dir();
}

/*
 * Ask for the pool on @s and read the answer, whatever it is (a refusal,
 * or the share: its descriptors are closed).  Return: 0 when one came.
 */
static int share_roundtrip(int s)
{
	int fds[16], n = share_raw(s, fds, 16);

	while (n > 0)
		close(fds[--n]);
	return n;
}

/*
 * Child (nobody): shrink the ring's memfd and ring the doorbell.  Two
 * round trips on the socket after it prove the server went once more
 * round its loop, where it reads the ring.
 */
static int shrink_ring(void *arg)
{
	int fds[3], s = handshake_raw(arg, fds);
	uint64_t one = 1;
	int bad = 0;

	if (s < 0)
		return 10;
	if (!ftruncate(fds[0], 0) || errno != EPERM)
		bad = 11;
	if (!ftruncate(fds[0], 1 << 30) || errno != EPERM)
		bad = bad ?: 12;
	if (write(fds[1], &one, sizeof(one)) != sizeof(one))
		bad = bad ?: 13;
	if (share_roundtrip(s) == SHARE_BROKEN || share_roundtrip(s) == SHARE_BROKEN)
		bad = bad ?: 14;
	close(s);
	return bad;
}

/* Issue 16, 1: a shrunk ring memfd. */
static void ring_memfd_cannot_be_shrunk(void)
{
	kvmmd_survives("--ns-per-uid", shrink_ring, 10000);
}

/*
 * Child (nobody, unbound: kvmmd runs without --ns-per-uid): take the
 * pool's memfds, shrink them, then fill the pool and make kvmmd demote
 * to the host tier (it reads the pool's pages).
 */
static int shrink_pool(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	int fds[3], pool[16], s = handshake_raw(arg, fds), n, i, bad = 0;
	struct kvmm_ring ring;
	uint32_t *tok;
	int32_t seq;

	if (s < 0)
		return 10;
	n = share_raw(s, pool, 16);
	if (n <= 0)
		return 11;
	for (i = 0; i < n; i++)
		if (!ftruncate(pool[i], 0) || errno != EPERM)
			bad = 12;
	if (kvmm_ring_connect(arg, &rp, &ring))
		return 13;
	tok = ring.buf;
	for (i = 0; i < 4; i++) {
		test_tokens(tok, 256, (uint32_t)i + 1);
		kvmm_prep_open(kvmm_get_sqe(&ring), 0);
		seq = hostile_ring1(&ring);
		if (seq < 0)
			return 14;
		kvmm_prep_extend(kvmm_get_sqe(&ring), (uint32_t)seq, 256, 0);
		if (hostile_ring1(&ring))
			return 15;
		kvmm_prep_close(kvmm_get_sqe(&ring), (uint32_t)seq, 0, 0, 256);
		if (hostile_ring1(&ring))
			return 16;
	}
	kvmm_prep_reclaim(kvmm_get_sqe(&ring), 64);
	if (hostile_ring1(&ring) < 0)
		return 17;
	kvmm_ring_exit(&ring);
	close(s);
	return bad;
}

/* Issue 16, 1: shrunk KV-pool memfds. */
static void pool_memfds_cannot_be_shrunk(void)
{
	kvmmd_survives("--quiet", shrink_pool, 20000);
}

/* Child: attach a ring and ask for the pool; exit 0 when the answer is *@arg. */
static int attach_pool(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256 };
	struct kvmm_kv_pool *pool = NULL;
	struct kvmm_ring ring;
	int ret;

	if (kvmm_ring_connect(sock, &rp, &ring))
		return 10;
	ret = kvmm_kv_pool_attach(&ring, NULL, &pool);
	kvmm_kv_pool_close(pool);
	if (ret != *(int *)arg)
		return 11;
	/* the ring goes on after a refusal */
	kvmm_prep_nop(kvmm_get_sqe(&ring));
	if (hostile_ring1(&ring))
		return 12;
	kvmm_ring_exit(&ring);
	return 0;
}

/* Issue 16, 3: a ring bound to a namespace never maps the whole pool. */
static void bound_tenant_is_refused_the_pool(void)
{
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx = server_up(true, KVMM_SERVER_NS_UID, &srv);
	int eperm = -EPERM, ok = 0;

	CU_ASSERT_EQUAL_FATAL(chmod(sock, 0666), 0);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, attach_pool, &eperm, 10000), 0);
	/* root (the operator) is not bound and still gets the pool */
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, attach_pool, &ok, 10000), 0);
	server_down(ctx, srv);
}

struct stopper {
	pthread_t thread;
	struct kvmm_server *srv;
};

static void *stop_thread(void *arg)
{
	kvmm_server_stop(((struct stopper *)arg)->srv);
	return NULL;
}

/*
 * Stop @srv in a thread; true when it returned within STOP_BOUND_MS.
 * Past the bound @pid (what wedges it) is killed, so that the stop ends.
 */
static bool stop_bounded(struct kvmm_server *srv, pid_t pid)
{
	struct stopper st = { .srv = srv };
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += STOP_BOUND_MS / 1000;
	if (pthread_create(&st.thread, NULL, stop_thread, &st))
		return false;
	ok = !pthread_timedjoin_np(st.thread, NULL, &ts);
	kill(pid, SIGKILL);
	if (!ok)
		pthread_join(st.thread, NULL);
	return ok;
}

/* Fork @fn, which writes one byte to @fd once its attack is under way. */
static pid_t attacker(void (*fn)(int fd), int *ready)
{
	int pfd[2];
	pid_t pid;
	char c;

	*ready = 0;
	if (pipe(pfd))
		return -1;
	fflush(NULL);
	pid = fork();
	if (!pid) {
		/* dies with the suite, whatever happens to it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pfd[0]);
		fn(pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	*ready = pid > 0 && read(pfd[0], &c, 1) == 1;
	close(pfd[0]);
	return pid;
}

/*
 * Serve a small context (@share: its pool shareable), fork @attack, and
 * once it is under way run @meanwhile (NULL: nothing), then stop the
 * server: within STOP_BOUND_MS, kvmm_check() holding.
 */
static void stop_bounded_under(bool share, void (*attack)(int fd), void (*meanwhile)(void))
{
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx = server_up(share, 0, &srv);
	int ready;
	pid_t pid = attacker(attack, &ready);

	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT(ready);
	if (meanwhile)
		meanwhile();
	CU_ASSERT(stop_bounded(srv, pid));
	waitpid(pid, NULL, 0);
	server_down(ctx, NULL);
}

struct unread {
	const int *s;
	int nr;
};

/* Nothing sent on the sockets of @arg (a struct unread) is left unread. */
static bool all_read(void *arg)
{
	const struct unread *u = arg;
	int i, left;

	for (i = 0; i < u->nr; i++)
		if (ioctl(u->s[i], SIOCOUTQ, &left) || left)
			return false;
	return true;
}

/*
 * Wait (5 s at most) until the server has read everything sent on the
 * @nr sockets @s (or closed them): it has accepted them and is in their
 * handshake.  Return: 0, or -ETIMEDOUT past the deadline.
 */
static int wait_read(const int *s, int nr)
{
	return hostile_wait(all_read, &(struct unread){ s, nr }, 5000);
}

/* One byte of hello every 200 ms: 11 s for all of it. */
static void trickle_hello(int fd)
{
	struct kvmm_hello h = hello_of(8, 16, 4096);
	int s = connect_raw(sock);
	size_t i;

	if (s < 0)
		_exit(1);
	for (i = 0; i < sizeof(h); i++) {
		if (send(s, (char *)&h + i, 1, MSG_NOSIGNAL) != 1)
			_exit(0);
		if (!i && (wait_read(&s, 1) || write(fd, "x", 1) != 1))
			_exit(1);
		usleep(200000);
	}
	pause();
}

/* Issue 16, 5: a hello trickled a byte at a time does not hold up stop. */
static void stop_is_bounded_under_a_trickled_hello(void)
{
	stop_bounded_under(false, trickle_hello, NULL);
}

/* Issue 16, 5: the same against kvmmd: SIGTERM ends it in bounded time. */
static void kvmmd_sigterm_is_bounded_under_a_trickled_hello(void)
{
	int ready, st;
	pid_t pid, att;

	CU_ASSERT_FATAL(!setup_dir());
	pid = kvmmd_start("--quiet");
	CU_ASSERT_FATAL(pid > 0);
	att = attacker(trickle_hello, &ready);
	CU_ASSERT(att > 0 && ready);
	kill(pid, SIGTERM);
	st = hostile_reap(pid, STOP_BOUND_MS);
	CU_ASSERT_EQUAL(st, 0);		/* exited, kvmm_check() held */
	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		hostile_reap(pid, 5000);
	}
	if (att > 0) {
		kill(att, SIGKILL);
		waitpid(att, NULL, 0);
	}
	cleanup_dir();
}

/* Ask for the pool over and over, never reading an answer. */
static void flood_share_requests(int fd)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256 };
	struct kvmm_share_req req = { .magic = KVMM_SHARE_MAGIC };
	struct pollfd pfd;
	struct kvmm_ring ring;

	if (kvmm_ring_connect(sock, &rp, &ring))
		_exit(1);
	pfd = (struct pollfd){ .fd = ring.sock, .events = POLLOUT };
	/* until the server stops reading (stuck sending), or hangs up on us */
	while (poll(&pfd, 1, 500) == 1)
		if (send(ring.sock, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
		    errno != EAGAIN)
			break;
	if (write(fd, "x", 1) != 1)
		_exit(1);
	pause();
}

/* Issue 16, 5: share answers a client never reads do not hold up stop. */
static void stop_is_bounded_under_unread_share_replies(void)
{
	stop_bounded_under(true, flood_share_requests, NULL);
}

/*
 * Commands without a pause: four NOPs in flight, one more as each
 * completes, until the server goes.
 */
static void busy_client(int fd)
{
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	struct kvmm_ring ring;
	struct kvmm_cqe *cqe;
	uint32_t i;

	if (kvmm_ring_connect(sock, &rp, &ring))
		_exit(1);
	for (i = 0; i < 4; i++)
		kvmm_prep_nop(kvmm_get_sqe(&ring));
	kvmm_submit(&ring);
	for (i = 0; !kvmm_wait_cqe(&ring, &cqe); i++) {
		kvmm_cqe_seen(&ring, cqe);
		kvmm_prep_nop(kvmm_get_sqe(&ring));
		kvmm_submit(&ring);
		if (i == 1000 && write(fd, "x", 1) != 1)
			_exit(1);
	}
	_exit(0);
}

/* The SQ's futex bell rung without a pause, and no command behind it. */
static void bell_ringer(int fd)
{
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	struct kvmm_ring ring;
	uint32_t i;

	if (kvmm_ring_connect(sock, &rp, &ring))
		_exit(1);
	for (i = 0;; i++) {
		__atomic_fetch_add(&ring.hdr->sq_bell, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, &ring.hdr->sq_bell, FUTEX_WAKE, 1, NULL, NULL, 0);
		if (i == 100000 && write(fd, "x", 1) != 1)
			_exit(1);
	}
}

/*
 * A client that keeps its server thread busy, command after command or
 * by ringing its bell, does not hold up stop: the thread looked at the
 * stop event only when it slept on its doorbell, and a thread whose
 * polls pay, or whose naps are always cut short, never does.
 */
static void stop_is_bounded_under_a_busy_client(void)
{
	void (*attack[])(int fd) = { busy_client, bell_ringer };
	uint32_t i;

	for (i = 0; i < 2; i++) {
		struct kvmm_server *srv;
		struct kvmm_ctx *ctx = server_up(false, KVMM_SERVER_POLL, &srv);
		int ready;
		pid_t pid = attacker(attack[i], &ready);

		CU_ASSERT_FATAL(pid > 0);
		CU_ASSERT(ready);
		CU_ASSERT(stop_bounded(srv, pid));
		waitpid(pid, NULL, 0);
		server_down(ctx, NULL);
	}
}

#define NR_TRICKLERS	256

/* 256 connections, each trickling a byte of hello every 500 ms. */
static void trickle_many(int fd)
{
	static int s[NR_TRICKLERS];
	struct kvmm_hello h = hello_of(8, 16, 4096);
	size_t at;
	int i;

	for (i = 0; i < NR_TRICKLERS; i++) {
		s[i] = connect_raw(sock);
		if (s[i] < 0)
			_exit(1);
	}
	for (at = 0; at < sizeof(h); at++) {
		for (i = 0; i < NR_TRICKLERS; i++)
			(void)!send(s[i], (char *)&h + at, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (!at && (wait_read(s, NR_TRICKLERS) || write(fd, "x", 1) != 1))
			_exit(1);
		usleep(500000);
	}
	pause();
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 8192) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Issue 16, 6: slow handshakes do not take client slots. */
static void trickling_handshakes_do_not_lock_clients_out(void)
{
	raise_nofile();
	stop_bounded_under(false, trickle_many, new_client_is_served);
}

#define NR_FULL		256	/* the server's default client limit */

/* Issue 16, 13: a connect over the client limit reads -EBUSY, every time. */
static void over_limit_connects_read_ebusy(void)
{
	static struct kvmm_ring rings[NR_FULL];
	struct kvmm_ring_params rp = { .sq_entries = 2, .buf_size = 0 };
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx;
	struct kvmm_ring extra;
	int i, ebusy = 0, other = 0;

	raise_nofile();
	ctx = server_up(false, 0, &srv);
	for (i = 0; i < NR_FULL; i++)
		CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &rings[i]), 0);
	for (i = 0; i < 200; i++) {
		int ret = kvmm_ring_connect(sock, &rp, &extra);

		if (!ret)
			kvmm_ring_exit(&extra);
		if (ret == -EBUSY)
			ebusy++;
		else if (!other++)
			fprintf(stderr, "over-limit connect %d: %s\n", i, strerror(-ret));
	}
	CU_ASSERT_EQUAL(ebusy, 200);
	for (i = 0; i < NR_FULL; i++)
		kvmm_ring_exit(&rings[i]);
	server_down(ctx, srv);
}

/* Voluntary context switches of every thread of this process but the caller. */
static long others_switches(void)
{
	long self = (long)syscall(SYS_gettid), sum = 0;
	struct dirent *de;
	DIR *d = opendir("/proc/self/task");

	while (d && (de = readdir(d))) {
		char path[300], line[128];
		FILE *f;

		if (de->d_name[0] == '.' || atol(de->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				sum += atol(line + 24);
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return sum;
}

/* The server thread of ring @arg sleeps on its doorbell. */
static bool server_sleeps(void *arg)
{
	struct kvmm_ring *ring = arg;

	return __atomic_load_n(&ring->hdr->sq_sleeping, __ATOMIC_ACQUIRE);
}

/*
 * Issue 16, 7: a client whose CQ is full, with entries still waiting,
 * sleeps; its server thread must sleep too (it was woken every 1 ms).
 * Counted in context switches over half a second, not timed.
 */
static void full_cq_costs_no_wakeups(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .cq_entries = 8 };
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx = server_up(false, 0, &srv);
	struct kvmm_cqe *cqe;
	struct kvmm_ring ring;
	long before, after;
	int i, done = 0;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	for (i = 0; i < 8; i++)
		kvmm_prep_nop(kvmm_get_sqe(&ring));
	CU_ASSERT_EQUAL(kvmm_submit_and_wait(&ring, 8), 8);
	for (i = 0; i < 8; i++)	/* the CQ is full: these wait */
		kvmm_prep_nop(kvmm_get_sqe(&ring));
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 8);
	CU_ASSERT_EQUAL_FATAL(hostile_wait(server_sleeps, &ring, 5000), 0);
	before = others_switches();
	usleep(500000);		/* the window counted, not a synchronisation */
	after = others_switches();
	CU_ASSERT(after - before < 25);
	if (after - before >= 25)
		fprintf(stderr, "server threads woke %ld times in 0.5 s\n", after - before);
	/* reaping lets the waiting entries complete */
	while (done < 16 && !kvmm_wait_cqe(&ring, &cqe)) {
		CU_ASSERT_EQUAL(cqe->res, 0);
		kvmm_cqe_seen(&ring, cqe);
		done++;
	}
	CU_ASSERT_EQUAL(done, 16);
	kvmm_ring_exit(&ring);
	server_down(ctx, srv);
}

/* The welcome a raw connection reads (5 s at most). Return: its status, or 1. */
static int read_welcome(int s)
{
	struct timeval tv = { .tv_sec = 5 };
	struct kvmm_welcome w;

	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (recv(s, &w, sizeof(w), MSG_WAITALL) != sizeof(w))
		return 1;
	return w.status;
}

/* The server of @arg has no client left. */
static bool no_clients(void *arg)
{
	return !kvmm_server_clients(arg);
}

/* The limits: checked, and each one enforced with the errno it documents. */
static void server_limits_are_enforced(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 256 };
	struct kvmm_server_limits lim = { .max_clients = 1, .max_pending = 1,
					  .handshake_ms = 200 };
	struct kvmm_hello h = hello_of(8, 16, 4096);
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx = server_up(false, 0, &srv);
	struct kvmm_ring ring, extra;
	int a, b;

	CU_ASSERT_EQUAL(kvmm_server_set_limits(NULL, &lim), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_server_set_limits(srv, NULL), -EINVAL);
	lim.resv[3] = 1;
	CU_ASSERT_EQUAL(kvmm_server_set_limits(srv, &lim), -EINVAL);
	lim.resv[3] = 0;
	lim.max_pending = 1025;
	CU_ASSERT_EQUAL(kvmm_server_set_limits(srv, &lim), -EINVAL);
	lim.max_pending = 1;
	CU_ASSERT_EQUAL_FATAL(kvmm_server_set_limits(srv, &lim), 0);
	/* max_clients */
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	CU_ASSERT_EQUAL(kvmm_ring_connect(sock, &rp, &extra), -EBUSY);
	kvmm_ring_exit(&ring);
	CU_ASSERT(!hostile_wait(no_clients, srv, 5000));
	/* handshake_ms: a hello not complete in time is refused */
	a = connect_raw(sock);
	CU_ASSERT_FATAL(a >= 0);
	CU_ASSERT_EQUAL(send(a, &h, 10, MSG_NOSIGNAL), 10);
	CU_ASSERT_EQUAL(read_welcome(a), -ETIMEDOUT);
	close(a);
	/* max_pending: a new connection evicts the oldest handshake */
	a = connect_raw(sock);
	CU_ASSERT_EQUAL(send(a, &h, 10, MSG_NOSIGNAL), 10);
	CU_ASSERT(!wait_read(&a, 1));
	b = connect_raw(sock);
	CU_ASSERT(a >= 0 && b >= 0);
	CU_ASSERT_EQUAL(read_welcome(a), -EBUSY);
	close(a);
	close(b);
	/* 0: the defaults again */
	CU_ASSERT_EQUAL(kvmm_server_set_limits(srv, &(struct kvmm_server_limits){ 0 }), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &extra), 0);
	kvmm_ring_exit(&extra);
	kvmm_ring_exit(&ring);
	server_down(ctx, srv);
}

/* send_ms: a client that never reads its share answers is dropped. */
static void client_that_does_not_read_is_dropped(void)
{
	struct kvmm_server_limits lim = { .send_ms = 200 };
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx = server_up(true, 0, &srv);
	int ready;
	pid_t pid;

	CU_ASSERT_EQUAL_FATAL(kvmm_server_set_limits(srv, &lim), 0);
	pid = attacker(flood_share_requests, &ready);
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT(ready);
	CU_ASSERT(!hostile_wait(no_clients, srv, 5000));	/* while the attacker still lives */
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	server_down(ctx, srv);
}

/* Fill (or, with @check, compare) the KV of @n frames at @pfn with @byte. */
static int stamp_frames(const struct kvmm_kv_pool *pool, const int32_t *pfn, uint32_t n,
			int byte, bool check)
{
	struct kvmm_kv_layer kl;
	uint32_t l, i;
	size_t bytes, j;

	for (l = 0; kvmm_kv_pool_layer(pool, l, &kl) == 0; l++) {
		bytes = 16 * kl.slot_bytes;	/* kvmmd_start(): page size 16 */
		for (i = 0; i < n; i++) {
			uint8_t *k = (uint8_t *)kl.k + (size_t)pfn[i] * bytes;
			uint8_t *v = (uint8_t *)kl.v + (size_t)pfn[i] * bytes;

			if (!check) {
				memset(k, byte + (int)l, bytes);
				memset(v, byte + (int)l + 1, bytes);
				continue;
			}
			for (j = 0; j < bytes; j++)
				if (k[j] != (uint8_t)(byte + (int)l) ||
				    v[j] != (uint8_t)(byte + (int)l + 1))
					return -1;
		}
	}
	return l ? 0 : -1;
}

/* SEQ_ROW of @seq into the start of the ring's data area. */
static int32_t row_of(struct kvmm_ring *ring, uint32_t seq)
{
	kvmm_prep_seq_row(hostile_sqe(ring), seq, 0, 0, 512);
	return hostile_ring1(ring);
}

/*
 * Child (an engine in its own process): request A is closed, request B
 * takes its row, and A's id is used again.  Every command naming it must
 * fail with -ESTALE; B keeps its frames and the KV it wrote, even after
 * request C takes every page kvmmd would have handed out again.
 */
static int stale_close(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	struct kvmm_kv_pool *pool;
	struct kvmm_seq_row *row;
	struct kvmm_ring ring;
	int32_t a, b, c, res, frames[2];

	if (kvmm_ring_connect(arg, &rp, &ring) || kvmm_kv_pool_attach(&ring, NULL, &pool))
		return 10;
	row = ring.buf;
	kvmm_prep_open(hostile_sqe(&ring), 0);
	a = hostile_ring1(&ring);
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)a, 32, 0);
	if (a < 0 || hostile_ring1(&ring))
		return 11;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)a, 0, 0, 0);
	if (hostile_ring1(&ring))
		return 12;
	kvmm_prep_open(hostile_sqe(&ring), 0);
	b = hostile_ring1(&ring);
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)b, 32, 0);
	if (b < 0 || hostile_ring1(&ring) || row_of(&ring, (uint32_t)b) != 2)
		return 13;
	memcpy(frames, row + 1, sizeof(frames));
	if (stamp_frames(pool, frames, 2, 0xb0, false))
		return 14;
	/* the engine's stale CLOSE, and the rest of what it might send */
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)a, 0, 0, 0);
	res = hostile_ring1(&ring);
	if (res != -ESTALE) {
		fprintf(stderr, "stale CLOSE: %d\n", res);
		return 15;
	}
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)a, 16, 0);
	if (hostile_ring1(&ring) != -ESTALE || row_of(&ring, (uint32_t)a) != -ESTALE)
		return 16;
	/* C takes what is free: had B's frames been freed, they would be C's */
	kvmm_prep_open(hostile_sqe(&ring), 0);
	c = hostile_ring1(&ring);
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)c, 60 * 16, 0);
	if (c < 0 || hostile_ring1(&ring) || row_of(&ring, (uint32_t)c) != 60 ||
	    stamp_frames(pool, (int32_t *)(row + 1), 60, 0xc0, false))
		return 17;
	if (row_of(&ring, (uint32_t)b) != 2 || memcmp(frames, row + 1, sizeof(frames)))
		return 18;
	if (stamp_frames(pool, frames, 2, 0xb0, true))
		return 19;
	kvmm_prep_check(hostile_sqe(&ring));
	if (hostile_ring1(&ring))
		return 20;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)b, 0, 0, 0);
	if (hostile_ring1(&ring))
		return 21;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)c, 0, 0, 0);
	if (hostile_ring1(&ring))
		return 22;
	kvmm_kv_pool_close(pool);
	kvmm_ring_exit(&ring);
	return 0;
}

/*
 * struct hint_writer - a client thread writing polling hints at random
 * @hdr: the ring's header; @stop: set to end it
 */
struct hint_writer {
	struct kvmm_ring_hdr *hdr;
	bool stop;
};

static void *write_hints(void *arg)
{
	struct hint_writer *w = arg;
	uint32_t x = 12345;

	while (!__atomic_load_n(&w->stop, __ATOMIC_RELAXED)) {
		x = x * 1103515245 + 12345;
		/* its CPU as anything, the server's too, and "asleep" */
		__atomic_store_n(&w->hdr->client_cpu, x >> 16 & 7, __ATOMIC_RELAXED);
		__atomic_store_n(&w->hdr->server_cpu, x >> 20 & 7, __ATOMIC_RELAXED);
		__atomic_store_n(&w->hdr->cq_sleeping, 1, __ATOMIC_RELAXED);
		sched_yield();
	}
	return NULL;
}

/*
 * The polling hints in the ring header (the CPU each side ran on, the
 * client asleep) only choose between polling and sleeping: a client that
 * writes false ones meanwhile still gets every completion, in polling
 * mode and not, and the server stops with kvmm_check() holding.
 */
static void false_polling_hints_lose_no_completion(void)
{
	const struct timespec t = { .tv_sec = 5 };
	struct kvmm_ring_params rp = { .sq_entries = 8 };
	uint32_t mode, i, done;

	for (mode = 0; mode < 2; mode++) {
		struct kvmm_server *srv;
		struct kvmm_ctx *ctx = server_up(false, mode ? KVMM_SERVER_POLL : 0, &srv);
		struct hint_writer w = { 0 };
		struct kvmm_ring ring;
		struct kvmm_cqe *cqe;
		pthread_t th;

		CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
		w.hdr = ring.hdr;
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, write_hints, &w), 0);
		for (i = done = 0; i < 500; i++) {
			kvmm_prep_nop(kvmm_get_sqe(&ring));
			if (kvmm_submit(&ring) != 1 || kvmm_wait_cqe_timeout(&ring, &cqe, &t))
				break;
			done += cqe->res == 0;
			kvmm_cqe_seen(&ring, cqe);
		}
		__atomic_store_n(&w.stop, true, __ATOMIC_RELAXED);
		pthread_join(th, NULL);
		CU_ASSERT_EQUAL(done, 500);
		kvmm_ring_exit(&ring);
		server_down(ctx, srv);
	}
}

/*
 * A stale sequence id through kvmmd fails with -ESTALE and the request
 * that reuses the row keeps its pages and KV; kvmmd stops with
 * kvmm_check() holding.
 */
static void stale_seq_id_cannot_close_another_request(void)
{
	pid_t pid;

	CU_ASSERT_FATAL(!setup_dir());
	pid = kvmmd_start("--quiet");
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, stale_close, sock, 20000), 0);
	CU_ASSERT(hostile_alive(pid));
	CU_ASSERT_EQUAL(kvmmd_stop(pid), 0);
	cleanup_dir();
}

int register_hostile_server_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_server", NULL, NULL);
	bool root = !geteuid();
	CU_pTest t;

	if (!s)
		return -1;
	ADD_TEST(s, stop_is_bounded_under_a_trickled_hello);
	ADD_TEST(s, stop_is_bounded_under_unread_share_replies);
	ADD_TEST(s, trickling_handshakes_do_not_lock_clients_out);
	ADD_TEST(s, over_limit_connects_read_ebusy);
	ADD_TEST(s, full_cq_costs_no_wakeups);
	ADD_TEST(s, server_limits_are_enforced);
	ADD_TEST(s, kvmmd_sigterm_is_bounded_under_a_trickled_hello);
	ADD_TEST(s, client_that_does_not_read_is_dropped);
	ADD_TEST(s, stale_seq_id_cannot_close_another_request);
	ADD_TEST(s, false_polling_hints_lose_no_completion);
	ADD_TEST(s, stop_is_bounded_under_a_busy_client);
	/* these run a client as nobody: root only */
	t = CU_add_test(s, "ring_memfd_cannot_be_shrunk", ring_memfd_cannot_be_shrunk);
	if (t && !root)
		CU_set_test_active(t, CU_FALSE);
	t = t ? CU_add_test(s, "pool_memfds_cannot_be_shrunk", pool_memfds_cannot_be_shrunk) : t;
	if (t && !root)
		CU_set_test_active(t, CU_FALSE);
	t = t ? CU_add_test(s, "bound_tenant_is_refused_the_pool",
			    bound_tenant_is_refused_the_pool) : t;
	if (t && !root)
		CU_set_test_active(t, CU_FALSE);
	if (!t)
		return -1;
	if (!root)
		printf("kvmm_hostile_server: the tests as uid nobody are inactive: not root\n");
	return 0;
}
