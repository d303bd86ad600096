// SPDX-License-Identifier: MIT
/*
 * tests/hostile/remote_test.c - kvmm_hostile_remote: tenants of one
 * kvmmd (--ns-per-uid, each bound to its uid's namespace) over the remote
 * tier, against a real Redis Cluster (scripts/redis-cluster.sh, as the
 * remote suite starts it), and a cluster node that is not one.
 *
 *  - A tenant's keyed values are not another's: uid nobody, in a space of
 *    the same model and value size in its own namespace, finds none of
 *    another tenant's values, nor root's, by KEXISTS or KGET; and the
 *    value it puts first under a key does not become the value another
 *    tenant reads under that key once the host tier has forgotten it
 *    (a restart).
 *  - A tenant's prefixes are not another's: RFETCH in nobody's namespace
 *    brings none of what another tenant pushed (or, with --remote-write
 *    commit or demote, only committed, or had demoted out of the
 *    machine), and what nobody pushes is fetched into no other tree,
 *    root's included.
 *  - A node that answers a command with an array header of 2^31 - 1
 *    elements and then nothing costs a client of kvmmd its deadline at
 *    most, and kvmmd stops on SIGTERM at once after.
 *  - A node that never answers (a deadline of 30 s) holds neither another
 *    client's promotion from NVMe nor kvmmd's SIGTERM.
 *
 * Without redis-server (or a build without hiredis) the cluster tests are
 * not registered, and say so.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers.h"
#include "autoconf.h"
#include "hostile.h"

#if CONFIG_KVMM_HIREDIS

#define PAGE		16		/* tokens per page */
#define VB		2048		/* bytes of a keyed value */
#define NKEYS		16
#define VICTIM_UID	1001u
#define OTHER_UID	65533u
#define TIMEOUT_MS	20000
#define MODEL		"hostile-remote-model@1"
#define VAL_OFF		65536		/* where values sit in a ring's buffer */

static char cdir[256];
static char seeds[512];
static const char *script = KVMM_SRCTREE "/scripts/redis-cluster.sh";

struct daemon {
	char dir[64];
	char sock[96];
	pid_t pid;
};

/*
 * kvmmd --ns-per-uid over the cluster at @remote as salt @salt, its socket
 * open to every uid; @extra more flags (up to 16, NULL-terminated; or NULL).
 */
static int daemon_start(struct daemon *d, const char *remote, const char *salt,
			const char *const *extra)
{
	const char *argv[48] = { "kvmmd", "--socket", d->sock, "--ns-per-uid", "--quiet",
				 "--pages", "128", "--page-size", "16", "--layers", "1",
				 "--kv-heads", "1", "--head-dim", "8", "--max-seqs", "8",
				 "--max-seq-len", "4096", "--model-id", MODEL, "--remote", remote,
				 "--remote-salt", salt };
	int i, n = 0;

	while (argv[n])
		n++;
	for (i = 0; extra && extra[i] && i < 16; i++)
		argv[n++] = extra[i];
	if (!extra || !extra[0] || strcmp(extra[0], "--host-pages")) {
		argv[n++] = "--host-pages";
		argv[n++] = "256";
	}
	argv[n] = NULL;
	d->pid = hostile_spawn(argv, -1);
	if (d->pid < 0 || hostile_wait_socket(d->sock, TIMEOUT_MS))
		return -1;
	return chmod(d->sock, 0777);
}

static bool daemon_up_argv(struct daemon *d, const char *remote, const char *salt,
			   const char *const *extra)
{
	memset(d, 0, sizeof(*d));
	d->pid = -1;
	if (!hostile_tmpdir(d->dir, sizeof(d->dir))) {
		snprintf(d->sock, sizeof(d->sock), "%s/kvmmd.sock", d->dir);
		if (!daemon_start(d, remote, salt, extra))
			return true;
	}
	CU_FAIL("kvmmd did not start");
	return false;
}

static bool daemon_up(struct daemon *d, const char *remote, const char *salt,
		      const char *extra1, const char *extra2)
{
	const char *extra[] = { extra1, extra2, NULL };

	return daemon_up_argv(d, remote, salt, extra);
}

/* SIGTERM, and its exit status (0: kvmm_check() held at exit). */
static int daemon_stop(struct daemon *d)
{
	int st = -1;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		st = hostile_reap(d->pid, TIMEOUT_MS);
		if (st == -ETIMEDOUT) {
			kill(d->pid, SIGKILL);
			hostile_reap(d->pid, TIMEOUT_MS);
		}
		d->pid = -1;
	}
	unlink(d->sock);
	return st;
}

static void daemon_down(struct daemon *d)
{
	CU_ASSERT(hostile_alive(d->pid));
	CU_ASSERT_EQUAL(daemon_stop(d), 0);
	rmdir(d->dir);
}

/* ---- the keyed store, as a tenant ---- */

enum kop { K_PUT, K_EXISTS, K_GET_ANY, K_GET_OWN };

/*
 * One tenant's keyed command: keys @from .. @from + NKEYS - 1 in a space
 * of MODEL and VB bytes in its namespace, values stamped by @owner.
 */
struct kjob {
	const char *sock;
	uint32_t from;
	uint8_t owner;
	enum kop op;
};

static struct kvmm_key kkey(uint32_t i)
{
	return (struct kvmm_key){ .lo = 0x9e3779b97f4a7c15ull * (i + 7), .hi = i };
}

static void kstamp(uint8_t *v, uint32_t key, uint8_t owner)
{
	uint32_t b;

	for (b = 0; b < VB; b++)
		v[b] = (uint8_t)(key * 131u ^ b * 7u ^ (b >> 8) ^ owner * 29u);
}

/*
 * In a child, as whoever it runs as.  Exit status: K_PUT 0 when every
 * value is stored; K_EXISTS the leading keys found; K_GET_ANY the values
 * read; K_GET_OWN the values read that are byte for byte @owner's.  100
 * and up: a step failed.
 */
static int kjob_run(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 1 << 20 };
	const struct kjob *j = arg;
	struct kvmm_kspace_reg *reg;
	struct kvmm_ring ring;
	struct kvmm_kent *e;
	struct kvmm_key *k;
	struct kvmm_sqe *sqe;
	uint8_t want[VB];
	uint32_t ns = getuid(), i, n = 0;
	int32_t sp, res;

	if (kvmm_ring_connect(j->sock, &rp, &ring))
		return 100;
	reg = ring.buf;
	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = VB;
	snprintf(reg->model_id, sizeof(reg->model_id), "%s", MODEL);
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
	sqe->ns = ns;
	sp = hostile_ring1(&ring);
	if (sp < 0)
		return 101;
	e = ring.buf;
	k = ring.buf;
	for (i = 0; i < NKEYS; i++) {
		uint8_t *v = (uint8_t *)ring.buf + VAL_OFF + (size_t)i * VB;

		if (j->op == K_EXISTS) {
			k[i] = kkey(j->from + i);
			continue;
		}
		e[i] = (struct kvmm_kent){ .key = kkey(j->from + i), .res = 12345,
					   .off = VAL_OFF + (uint64_t)i * VB };
		if (j->op == K_PUT)
			kstamp(v, j->from + i, j->owner);
		else
			memset(v, 0, VB);
	}
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, j->op == K_PUT ? KVMM_OP_KPUT : j->op == K_EXISTS ? KVMM_OP_KEXISTS :
		     KVMM_OP_KGET, 0, 0, 0, NKEYS);
	sqe->arg = (uint32_t)sp;
	res = hostile_ring1(&ring);
	if (res < 0)
		return 102;
	if (j->op == K_PUT)
		return res == NKEYS ? 0 : 103;
	if (j->op == K_EXISTS || j->op == K_GET_ANY)
		return res;
	for (i = 0; i < NKEYS; i++) {
		kstamp(want, j->from + i, j->owner);
		n += !e[i].res && !memcmp(want, (uint8_t *)ring.buf + VAL_OFF + (size_t)i * VB, VB);
	}
	kvmm_ring_exit(&ring);
	return (int)n;
}

static int kjob(uid_t uid, const struct daemon *d, enum kop op, uint32_t from, uint8_t owner)
{
	struct kjob j = { .sock = d->sock, .from = from, .owner = owner, .op = op };

	return hostile_child(uid, kjob_run, &j, TIMEOUT_MS);
}

/*
 * uid 1001 and root put 16 values each; nobody, in a space of the same
 * model and value size in its own namespace, finds none of them on any
 * tier, and reads none.  Another daemon with the same salt, no host copy
 * of anything: the same tenants still find their own there, nobody
 * still none.
 */
static void remote_tenant_reads_no_other_tenants_values(void)
{
	struct daemon d;

	if (!daemon_up(&d, seeds, "hostile-keyed-1", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_PUT, 0, 1), 0);
	CU_ASSERT_EQUAL(kjob((uid_t)-1, &d, K_PUT, 100, 2), 0);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_EXISTS, 0, 1), NKEYS);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_EXISTS, 0, 0), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_GET_ANY, 0, 0), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_EXISTS, 100, 0), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_GET_ANY, 100, 0), 0);
	daemon_down(&d);
	/* nothing on the host tier now: what is found comes from the cluster */
	if (!daemon_up(&d, seeds, "hostile-keyed-1", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_EXISTS, 0, 0), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_GET_ANY, 100, 0), 0);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_GET_OWN, 0, 1), NKEYS);
	CU_ASSERT_EQUAL(kjob((uid_t)-1, &d, K_GET_OWN, 100, 2), NKEYS);
	daemon_down(&d);
}

/*
 * nobody puts its values under keys first; uid 1001 puts its own under
 * the same keys (the cluster has values under them already); after a
 * restart (the host tier forgot both) uid 1001 reads its own bytes.
 */
static void remote_tenant_cannot_poison_another(void)
{
	struct daemon d;

	if (!daemon_up(&d, seeds, "hostile-keyed-2", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_PUT, 0, 66), 0);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_PUT, 0, 1), 0);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_GET_OWN, 0, 1), NKEYS);
	daemon_down(&d);
	if (!daemon_up(&d, seeds, "hostile-keyed-2", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_GET_OWN, 0, 1), NKEYS);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_GET_OWN, 0, 66), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_GET_OWN, 0, 66), NKEYS);
	daemon_down(&d);
}

/* ---- the prefix tree, as a tenant ---- */

enum top { T_PUSH, T_COMMIT, T_FETCH };

struct tjob {
	const char *sock;
	uint32_t seed;		/* of the prompt's tokens */
	uint32_t n;		/* its tokens */
	enum top op;
};

/*
 * In a child: T_COMMIT computes the prompt (OPEN, EXTEND, CLOSE with a
 * commit) in its namespace; T_PUSH then pushes it too.  Exit status:
 * pages the remote tier holds (T_PUSH) or 0 (T_COMMIT); T_FETCH: pages
 * RFETCH brought into its namespace.  100 and up: a step failed.
 */
static int tjob_run(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	const struct tjob *j = arg;
	struct kvmm_ring ring;
	uint32_t ns = getuid(), *tok, i;
	int32_t seq, res;

	if (kvmm_ring_connect(j->sock, &rp, &ring))
		return 100;
	tok = ring.buf;
	for (i = 0; i < j->n; i++)
		tok[i] = j->seed * 7919u + i * 31u + 5u;
	if (j->op == T_FETCH) {
		kvmm_prep_rfetch(hostile_sqe(&ring), ns, 0, 0, j->n);
		res = hostile_ring1(&ring);
		return res < 0 ? 101 : res / PAGE;
	}
	kvmm_prep_open(hostile_sqe(&ring), ns);
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 102;
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, j->n, 0);
	if (hostile_ring1(&ring))
		return 103;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)seq, 0, 0, j->n);
	if (hostile_ring1(&ring))
		return 104;
	if (j->op == T_COMMIT)
		return 0;
	kvmm_prep_rpush(hostile_sqe(&ring), ns, 0, 0, j->n);
	res = hostile_ring1(&ring);
	kvmm_ring_exit(&ring);
	return res < 0 ? 105 : res / PAGE;
}

static int tjob(uid_t uid, const struct daemon *d, enum top op, uint32_t seed, uint32_t n)
{
	struct tjob j = { .sock = d->sock, .seed = seed, .n = n, .op = op };

	return hostile_child(uid, tjob_run, &j, TIMEOUT_MS);
}

/*
 * uid 1001 pushes a prompt of 8 pages: nobody's RFETCH of it brings
 * nothing; nobody pushes another: RFETCH brings none of it into root's
 * tree or another tenant's, while nobody's own fetch (from a fresh
 * daemon) finds all of it.
 */
static void remote_tenant_fetches_no_other_tenants_prefix(void)
{
	struct daemon d;

	if (!daemon_up(&d, seeds, "hostile-tree-1", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(tjob(VICTIM_UID, &d, T_PUSH, 1, 8 * PAGE + 3), 8);
	CU_ASSERT_EQUAL(tjob(HOSTILE_NOBODY, &d, T_FETCH, 1, 8 * PAGE + 3), 0);
	CU_ASSERT_EQUAL(tjob(HOSTILE_NOBODY, &d, T_PUSH, 2, 8 * PAGE), 8);
	CU_ASSERT_EQUAL(tjob((uid_t)-1, &d, T_FETCH, 2, 8 * PAGE), 0);
	CU_ASSERT_EQUAL(tjob(OTHER_UID, &d, T_FETCH, 2, 8 * PAGE), 0);
	daemon_down(&d);
	if (!daemon_up(&d, seeds, "hostile-tree-1", NULL, NULL))
		return;
	CU_ASSERT_EQUAL(tjob(VICTIM_UID, &d, T_FETCH, 1, 8 * PAGE + 3), 8);
	CU_ASSERT_EQUAL(tjob(HOSTILE_NOBODY, &d, T_FETCH, 2, 8 * PAGE), 8);
	daemon_down(&d);
}

/* kvmmctl stat's value of @name; 0 when it is not there. */
static unsigned long long ctl_stat(const struct daemon *d, const char *name)
{
	const char *argv[] = { "kvmmctl", "--socket", d->sock, "stat", NULL };
	char out[16384], *p;

	if (hostile_run(argv, out, sizeof(out), TIMEOUT_MS))
		return 0;
	p = strstr(out, name);
	return p ? strtoull(p + strcspn(p, "0123456789"), NULL, 10) : 0;
}

static bool written_through(void *arg)
{
	return ctl_stat(arg, "remote_put_pages") >= 8;
}

/* --remote-write commit: what uid 1001 only committed, nobody does not fetch. */
static void remote_tenant_fetches_no_other_tenants_commit(void)
{
	struct daemon d;

	if (!daemon_up(&d, seeds, "hostile-tree-2", "--remote-write", "commit"))
		return;
	CU_ASSERT_EQUAL(tjob(VICTIM_UID, &d, T_COMMIT, 3, 8 * PAGE), 0);
	CU_ASSERT_EQUAL(hostile_wait(written_through, &d, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(tjob(HOSTILE_NOBODY, &d, T_FETCH, 3, 8 * PAGE), 0);
	daemon_down(&d);
}

/* As root: reclaim the device, which demotes to the host tier. */
static int reclaim_run(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	struct kvmm_ring ring;
	int32_t res;

	if (kvmm_ring_connect(arg, &rp, &ring))
		return 100;
	kvmm_prep_reclaim(hostile_sqe(&ring), 128);
	res = hostile_ring1(&ring);
	kvmm_ring_exit(&ring);
	return res < 0 ? 101 : 0;
}

/*
 * --remote-write demote, no NVMe tier: uid 1001's prompt leaves the host
 * tier (its watermarks past it) for the cluster; nobody's RFETCH of it
 * brings nothing, uid 1001's own brings it back.
 */
static void remote_tenant_fetches_no_other_tenants_demotion(void)
{
	const char *extra[] = { "--host-pages", "16", "--host-wmark-low", "15",
				"--host-wmark-high", "16", "--remote-write", "demote", NULL };
	struct daemon d;

	if (!daemon_up_argv(&d, seeds, "hostile-tree-3", extra))
		return;
	CU_ASSERT_EQUAL(tjob(VICTIM_UID, &d, T_COMMIT, 4, 8 * PAGE), 0);
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, reclaim_run, d.sock, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_wait(written_through, &d, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(tjob(HOSTILE_NOBODY, &d, T_FETCH, 4, 8 * PAGE), 0);
	CU_ASSERT_EQUAL(tjob(VICTIM_UID, &d, T_FETCH, 4, 8 * PAGE), 8);
	daemon_down(&d);
}

/* ---- a node that is not one ---- */

struct fake {
	int lfd;
	int port;
	bool silent;		/* answer nothing but CLUSTER SLOTS */
	bool stop;		/* atomic */
	unsigned long cmds;	/* chunks of other commands received (atomic) */
	pthread_t th;
};

/*
 * A "cluster" of one node: CLUSTER SLOTS is answered with itself, any
 * other command with an array header of 2^31 - 1 elements, and then
 * nothing more on that connection (or, @silent, with nothing at all).
 */
static void *fake_main(void *arg)
{
	struct fake *f = arg;
	struct pollfd pfd[9];
	bool said[9] = { false };
	char buf[65536], line[160];
	int nfds = 1, i;

	pfd[0] = (struct pollfd){ .fd = f->lfd, .events = POLLIN };
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		if (poll(pfd, (nfds_t)nfds, 20) <= 0)
			continue;
		if ((pfd[0].revents & POLLIN) && nfds < 9) {
			int fd = accept(f->lfd, NULL, NULL);

			if (fd >= 0) {
				said[nfds] = false;
				pfd[nfds++] = (struct pollfd){ .fd = fd, .events = POLLIN };
			}
		}
		for (i = 1; i < nfds; i++) {
			ssize_t r;

			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = recv(pfd[i].fd, buf, sizeof(buf) - 1, 0);
			if (r <= 0) {
				close(pfd[i].fd);
				pfd[i] = pfd[--nfds];
				said[i] = said[nfds];
				i--;
				continue;
			}
			buf[r] = '\0';
			if (strstr(buf, "SLOTS")) {
				snprintf(line, sizeof(line), "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n"
					 "$9\r\n127.0.0.1\r\n:%d\r\n", f->port);
				send(pfd[i].fd, line, strlen(line), MSG_NOSIGNAL);
			} else {
				__atomic_add_fetch(&f->cmds, 1, __ATOMIC_RELAXED);
				if (!said[i] && !f->silent)
					send(pfd[i].fd, "*2147483647\r\n", 13, MSG_NOSIGNAL);
				said[i] = true;
			}
		}
	}
	for (i = 1; i < nfds; i++)
		close(pfd[i].fd);
	return NULL;
}

static int fake_start(struct fake *f, bool silent)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);

	memset(f, 0, sizeof(*f));
	f->silent = silent;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(f->lfd, 16) || getsockname(f->lfd, (struct sockaddr *)&a, &al))
		return -1;
	f->port = ntohs(a.sin_port);
	return pthread_create(&f->th, NULL, fake_main, f) ? -1 : 0;
}

static void fake_stop(struct fake *f)
{
	__atomic_store_n(&f->stop, true, __ATOMIC_RELAXED);
	pthread_join(f->th, NULL);
	close(f->lfd);
}

static double secs_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * kvmmd over the fake node (--remote-timeout-ms 1000): a tenant's KEXISTS
 * and KGET (each a batch to the node, or two) end well within a few
 * deadlines, a second round too, and kvmmd stops on SIGTERM in a second.
 * (Before the client refused the header, each batch kept kvmmd's worker
 * about 30 s freeing a reply of 2^31 - 1 empty elements.)
 */
static void remote_node_huge_array_costs_a_deadline(void)
{
	struct timespec t0;
	struct daemon d;
	struct fake f;
	char remote[32];

	CU_ASSERT_EQUAL_FATAL(fake_start(&f, false), 0);
	snprintf(remote, sizeof(remote), "127.0.0.1:%d", f.port);
	if (!daemon_up(&d, remote, "hostile-fake", "--remote-timeout-ms", "1000")) {
		fake_stop(&f);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_EXISTS, 0, 0), 0);
	CU_ASSERT_EQUAL(kjob(HOSTILE_NOBODY, &d, K_GET_ANY, 0, 0), 0);
	CU_ASSERT_EQUAL(kjob(VICTIM_UID, &d, K_EXISTS, 0, 0), 0);
	CU_ASSERT(secs_since(&t0) < 8.0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT(hostile_alive(d.pid));
	CU_ASSERT_EQUAL(daemon_stop(&d), 0);
	CU_ASSERT(secs_since(&t0) < 3.0);
	rmdir(d.dir);
	fake_stop(&f);
}

/* A tenant's RFETCH, which the silent node holds for its deadline, in a thread. */
struct stalled {
	struct tjob job;
	pthread_t th;
	int status;
};

static void *stall_main(void *arg)
{
	struct stalled *st = arg;

	st->status = hostile_child(HOSTILE_NOBODY, tjob_run, &st->job, 60000);
	return NULL;
}

static bool fake_asked(void *arg)
{
	const struct fake *f = arg;

	return __atomic_load_n(&f->cmds, __ATOMIC_RELAXED) > 0;
}

#define PROMPT		(4 * PAGE)
#define PROMPT_TOK(i)	(424242u + (i))

/* As root: the prompt's cached tokens on each tier, LOOKUP's. */
static int lookup_tiers(struct kvmm_ring *ring, struct kvmm_tier_hits *hits)
{
	const uint64_t off = 4 * PROMPT;
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	kvmm_prep_lookup(sqe, 0, 0, 0, PROMPT);
	sqe->arg = KVMM_LOOKUP_TIERS;
	sqe->arg2 = off;
	if (hostile_ring1(ring) < 0)
		return -1;
	memcpy(hits, (char *)ring->buf + off, sizeof(*hits));
	return 0;
}

/*
 * As root: compute a prompt of 4 pages and reclaim the device, which
 * demotes it to the host tier, whose background reclaim (past its
 * watermarks) writes it down to NVMe.  Return: 0 once it is all there, or
 * the step that failed.
 */
static int to_nvme_run(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	struct kvmm_tier_hits hits;
	struct kvmm_ring ring;
	uint32_t *tok, i;
	int32_t seq;

	if (kvmm_ring_connect(arg, &rp, &ring))
		return 100;
	tok = ring.buf;
	for (i = 0; i < PROMPT; i++)
		tok[i] = PROMPT_TOK(i);
	kvmm_prep_open(hostile_sqe(&ring), 0);
	seq = hostile_ring1(&ring);
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, PROMPT, 0);
	if (seq < 0 || hostile_ring1(&ring))
		return 101;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)seq, 0, 0, PROMPT);
	if (hostile_ring1(&ring))
		return 102;
	for (i = 0; i < 2000; i++) {
		kvmm_prep_reclaim(hostile_sqe(&ring), 128);
		if (hostile_ring1(&ring) < 0 || lookup_tiers(&ring, &hits))
			return 103;
		if (hits.tokens[KVMM_TIER_NVME] == PROMPT)
			break;
		usleep(5000);
	}
	kvmm_ring_exit(&ring);
	return i < 2000 ? 0 : 104;
}

/* As root: MATCH the prompt (a hit below the device) and PROMOTE it. */
static int promote_run(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	struct kvmm_cqe *cqe;
	struct kvmm_ring ring;
	uint32_t *tok, i, flags;
	int32_t seq, res;

	if (kvmm_ring_connect(arg, &rp, &ring))
		return 100;
	tok = ring.buf;
	for (i = 0; i < PROMPT; i++)
		tok[i] = PROMPT_TOK(i);
	kvmm_prep_open(hostile_sqe(&ring), 0);
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 101;
	kvmm_prep_match(hostile_sqe(&ring), (uint32_t)seq, 0, 0, PROMPT);
	if (kvmm_submit_and_wait(&ring, 1) != 1 || kvmm_wait_cqe(&ring, &cqe))
		return 102;
	res = cqe->res;
	flags = cqe->flags;
	kvmm_cqe_seen(&ring, cqe);
	if (res != 0 || !(flags & KVMM_CQE_F_LOWER))
		return 103;
	kvmm_prep_promote(hostile_sqe(&ring), (uint32_t)seq, 0, 0, PROMPT);
	if (hostile_ring1(&ring) != PROMPT)
		return 104;
	kvmm_ring_exit(&ring);
	return 0;
}

/*
 * kvmmd over a node that never answers (--remote-timeout-ms 30000), with
 * an NVMe tier: while a tenant's RFETCH waits on the node, root's
 * promotion from NVMe (the I/O worker's read) completes at once, and
 * SIGTERM stops kvmmd at once, however long the deadline.  (Before, the
 * promotion queued behind the fetch on the one worker, and the shutdown
 * waited for it: up to 30 s each.)
 */
static void remote_stalled_node_holds_no_promotion_nor_shutdown(void)
{
	struct stalled st = { .job = { .seed = 9, .n = 4 * PAGE, .op = T_FETCH } };
	char remote[32], nvme[96];
	const char *extra[] = { "--host-pages", "16", "--host-wmark-low", "15",
				"--host-wmark-high", "16", "--remote-timeout-ms", "30000", NULL };
	const char *nv[] = { "--nvme-file", nvme, "--nvme-pages", "256", NULL };
	const char *all[13];
	struct timespec t0;
	struct daemon d;
	struct fake f;
	int i, n = 0;

	CU_ASSERT_EQUAL_FATAL(fake_start(&f, true), 0);
	snprintf(remote, sizeof(remote), "127.0.0.1:%d", f.port);
	memset(&d, 0, sizeof(d));
	CU_ASSERT_EQUAL_FATAL(hostile_tmpdir(d.dir, sizeof(d.dir)), 0);
	snprintf(nvme, sizeof(nvme), "%s/nvme", d.dir);
	snprintf(d.sock, sizeof(d.sock), "%s/kvmmd.sock", d.dir);
	for (i = 0; extra[i]; i++)
		all[n++] = extra[i];
	for (i = 0; nv[i]; i++)
		all[n++] = nv[i];
	all[n] = NULL;
	if (daemon_start(&d, remote, "hostile-stall", all)) {
		CU_FAIL("kvmmd did not start");
		daemon_stop(&d);
		rmdir(d.dir);
		fake_stop(&f);
		return;
	}
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, to_nvme_run, d.sock, TIMEOUT_MS), 0);
	st.job.sock = d.sock;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&st.th, NULL, stall_main, &st), 0);
	CU_ASSERT_EQUAL(hostile_wait(fake_asked, &f, TIMEOUT_MS), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, promote_run, d.sock, 60000), 0);
	CU_ASSERT(secs_since(&t0) < 10.0);
	/* the fetch still waits on the node: kvmmd stops all the same */
	CU_ASSERT(hostile_alive(d.pid));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL(daemon_stop(&d), 0);
	CU_ASSERT(secs_since(&t0) < 10.0);
	pthread_join(st.th, NULL);
	unlink(nvme);
	rmdir(d.dir);
	fake_stop(&f);
}

static int sh(const char *cmd)
{
	int st = system(cmd);

	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int suite_clean(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "%s stop %s; rm -rf %s", script, cdir, cdir);
	sh(cmd);
	return 0;
}

/* The suite's cluster, as the remote suite starts it. */
static int suite_init(void)
{
	const char *tmp = getenv("TMPDIR");
	char cmd[600];
	FILE *f;
	int st;

	snprintf(cdir, sizeof(cdir), "%s/kvmm-hredis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(cdir))
		return -1;
	snprintf(cmd, sizeof(cmd), "%s start %s", script, cdir);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	if (!fgets(seeds, sizeof(seeds), f))
		seeds[0] = '\0';
	seeds[strcspn(seeds, "\n")] = '\0';
	while (fgetc(f) != EOF)
		;
	st = pclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st) || !strchr(seeds, ':')) {
		fprintf(stderr, "kvmm_hostile_remote: could not start a cluster (%s)\n", cdir);
		suite_clean();
		return -1;
	}
	return 0;
}

int register_hostile_remote_suite(void)
{
	CU_pSuite s;

	if (sh("command -v redis-server >/dev/null 2>&1")) {
		fprintf(stderr, "kvmm_hostile_remote: no redis-server: not registered\n");
		return 0;
	}
	s = CU_add_suite("kvmm_hostile_remote", suite_init, suite_clean);
	if (!s)
		return -1;
	ADD_TEST(s, remote_tenant_reads_no_other_tenants_values);
	ADD_TEST(s, remote_tenant_cannot_poison_another);
	ADD_TEST(s, remote_tenant_fetches_no_other_tenants_prefix);
	ADD_TEST(s, remote_tenant_fetches_no_other_tenants_commit);
	ADD_TEST(s, remote_tenant_fetches_no_other_tenants_demotion);
	ADD_TEST(s, remote_node_huge_array_costs_a_deadline);
	ADD_TEST(s, remote_stalled_node_holds_no_promotion_nor_shutdown);
	return 0;
}

#else

int register_hostile_remote_suite(void)
{
	fprintf(stderr, "kvmm_hostile_remote: no hiredis in this build: not registered\n");
	return 0;
}

#endif
