// SPDX-License-Identifier: MIT
/*
 * tests/hostile/tools_test.c - the admin tools against careless operators
 * and servers that are not what they claim: kvmmctl's command line is
 * parsed whole before connecting, every wait has a deadline, every errno
 * prints by name; kvmmd's options are strict and independent of order.
 *
 * Each bad invocation runs the built tool (hostile_run) and checks its
 * exit code and that the message names the thing.  Fake servers run in
 * a child (hostile_child) that the test kills.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "../../tools/lib/json.h"
#include "../../tools/lib/parse.h"
#include "../helpers.h"
#include "autoconf.h"
#include "hostile.h"

#define RUN_MS		20000	/* a tool that hangs fails the test */

struct env {
	char dir[64];
	char sock[100];		/* fits sun_path */
	pid_t kvmmd;
};

static void env_init(struct env *e)
{
	CU_ASSERT_FATAL(!hostile_tmpdir(e->dir, sizeof(e->dir)));
	snprintf(e->sock, sizeof(e->sock), "%s/s", e->dir);
	e->kvmmd = -1;
}

static int rm_entry(const char *dir, const char *name)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return unlink(p);
}

/* Stop what the test started and remove its directory. */
static void env_fini(struct env *e)
{
	if (e->kvmmd > 0) {
		kill(e->kvmmd, SIGKILL);
		hostile_reap(e->kvmmd, RUN_MS);
	}
	rm_entry(e->dir, "s");
	rm_entry(e->dir, "cfg");
	rm_entry(e->dir, "nvme");
	rmdir(e->dir);
}

/* Wait for the kvmmd the test started to serve; one that does not is stopped. */
static void wait_kvmmd(struct env *e)
{
	CU_ASSERT_FATAL(e->kvmmd > 0);
	if (hostile_wait_socket(e->sock, RUN_MS)) {
		env_fini(e);
		CU_FAIL_FATAL("kvmmd did not serve");
	}
}

static void start_kvmmd(struct env *e)
{
	const char *argv[] = { "kvmmd", "--socket", e->sock, "--pages", "256", "--quiet", NULL };

	e->kvmmd = hostile_spawn(argv, -1);
	wait_kvmmd(e);
}

/* ---- fake servers ---- */

enum fake_kind {
	FAKE_SHORT,		/* accepts, sends 4 bytes of a welcome, waits */
	FAKE_GARBAGE,		/* answers the hello with a welcome-sized non-kvmm reply */
	FAKE_STATUS,		/* a welcome refusing with fake_status */
	FAKE_CLOSE,		/* reads the hello, closes */
	FAKE_NOACCEPT,		/* listens with a backlog of 0, never accepts */
};

struct fake {
	const char *path;
	enum fake_kind kind;
	int32_t status;
	int ready[2];		/* the child writes a byte once it listens */
};

static int fake_server(void *arg)
{
	struct fake *f = arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmm_hello hello;
	int ls, s;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	ls = socket(AF_UNIX, SOCK_STREAM, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(ls, f->kind == FAKE_NOACCEPT ? 0 : 8))
		return 1;
	if (write(f->ready[1], "r", 1) != 1)
		return 1;
	if (f->kind == FAKE_NOACCEPT)
		for (;;)
			pause();
	for (;;) {
		s = accept(ls, NULL, NULL);
		if (s < 0)
			return 1;
		if (f->kind == FAKE_SHORT) {
			if (write(s, "\0\0\0\0", 4) != 4)
				return 1;
			continue;	/* and never more: s stays open */
		}
		if (recv(s, &hello, sizeof(hello), MSG_WAITALL) != sizeof(hello)) {
			close(s);
			continue;
		}
		if (f->kind == FAKE_GARBAGE) {
			static const char junk[sizeof(struct kvmm_welcome)] =
				"\x2d\x4b\x60\x9f HTTP/1.0 400 Bad Request\r\n\r\n";

			if (write(s, junk, sizeof(junk)) != sizeof(junk))
				return 1;
		} else if (f->kind == FAKE_STATUS) {
			struct kvmm_welcome w = { .status = f->status };

			if (write(s, &w, sizeof(w)) != sizeof(w))
				return 1;
		}
		close(s);
	}
}

/* Run the fake server in a child; return its pid once it listens. */
static pid_t fake_start(struct fake *f)
{
	pid_t pid;
	char c;

	CU_ASSERT_FATAL(!pipe2(f->ready, O_CLOEXEC));
	fflush(NULL);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid)
		_exit(fake_server(f));
	close(f->ready[1]);
	CU_ASSERT_FATAL(read(f->ready[0], &c, 1) == 1);
	close(f->ready[0]);
	return pid;
}

/* A connection that does not wait for the backlog: -1 once it is full. */
static int nb_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		close(s);
		return -1;
	}
	return s;
}

static void fake_stop(pid_t pid)
{
	kill(pid, SIGKILL);
	hostile_reap(pid, RUN_MS);
}

/* ---- kvmmctl: item 10, options anywhere, no stray arguments ---- */

static void ctl_options_after_the_command(void)
{
	struct env e;
	char out[4096];

	env_init(&e);
	start_kvmmd(&e);
	{
		const char *argv[] = { "kvmmctl", "stat", "--json", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_EQUAL(out[0], '{');
	}
	{
		const char *argv[] = { "kvmmctl", "top", "--count", "1", "--socket", e.sock,
				       "--interval", "0.01", "--json", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"hit_rate\""));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"remote_get_pages_per_s\""));
	}
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

static void ctl_stray_argument_is_a_usage_error(void)
{
	struct env e;
	char out[4096];

	env_init(&e);
	start_kvmmd(&e);
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "drop-caches", "now", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "'now'"));
	}
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "stat", "--depth", "2", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--depth"));
	}
	env_fini(&e);
}

/* A refusal names the field and the rule, not a bare errno. */
static void ctl_refusals_say_the_rule(void)
{
	struct env e;
	char out[4096];

	env_init(&e);
	start_kvmmd(&e);
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "set", "wmark_high", "20",
				       NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
	}
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "set", "wmark_low", "30",
				       NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "wmark_low 30: the watermarks must keep "
					      "wmark_min <= wmark_low <= wmark_high <= nr_pages"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "wmark_high 20, nr_pages 256"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "EINVAL"));
	}
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "set", "ns_cache_share",
				       "0", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns_cache_share 0: a percentage in 1..100"));
	}
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "pin", "1", "2", "3", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "3 tokens are less than a page: a pin takes "
					      "whole cached pages of page_size 16 tokens"));
	}
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/* ---- item 11: usage errors are exit 2 before anything is reached ---- */

static void ctl_usage_errors_before_connecting(void)
{
	static const struct {
		const char *args[6];
		const char *says;
	} bad[] = {
		{ { "pin", "4294967296" }, "token id" },
		{ { "pin", "--", "-1" }, "token id" },
		{ { "pin", "--ns", "-1", "5" }, "-1" },
		{ { "set", "wmark_min", "-1" }, "-1" },
		{ { "set", "wmark_min", "--", "-1" }, "wmark_min" },
		{ { "set", "nr_pages", "4294967296" }, "nr_pages" },
		{ { "top", "--interval", "nan" }, "--interval" },
		{ { "top", "--interval", "inf" }, "--interval" },
		{ { "top", "--interval", "0" }, "--interval" },
		{ { "top", "--count", "1x" }, "--count" },
		{ { "reclaim", " 5" }, "PAGES" },
		{ { "stat", "--timeout", "-1" }, "--timeout" },
		{ { "stat", "--timeout" }, "--timeout" },
		{ { "--socket", "", "stat" }, "--socket" },
		{ { "--socket", "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock", "stat" },
		  "longer than" },
		{ { "stat", "-x" }, "'-x'" },
		{ { "stat", "--frob" }, "'--frob'" },
		{ { "set", "wmark_min" }, "KEY and a VALUE" },
		{ { "set", "colour", "blue" }, "colour" },
		{ { "pin" }, "token ids" },
		{ { "frobnicate" }, "frobnicate" },
	};
	const char *argv[10];
	char out[4096];
	size_t i, k;
	int st;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* nothing answers there: a usage error must not get that far */
		argv[0] = "kvmmctl";
		argv[1] = "--socket";
		argv[2] = "/nonexistent/kvmm.sock";
		for (k = 0; bad[i].args[k]; k++)
			argv[3 + k] = bad[i].args[k];
		argv[3 + k] = NULL;
		st = hostile_run(argv, out, sizeof(out), RUN_MS);
		CU_ASSERT_EQUAL(st, 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].says));
		if (st != 2 || !strstr(out, bad[i].says))
			fprintf(stderr, "\n  kvmmctl ... %s %s: exit %d: %s", bad[i].args[0],
				bad[i].args[1] ? bad[i].args[1] : "", st, out);
	}
}

/* ---- item 12: deadlines and errno names ---- */

static void ctl_short_welcome_times_out(void)
{
	struct env e;
	struct fake f = { .kind = FAKE_SHORT };
	char out[4096];
	pid_t srv;

	env_init(&e);
	f.path = e.sock;
	srv = fake_start(&f);
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "--timeout", "0.3", "stat",
				       NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 3);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "ETIMEDOUT"));
	}
	fake_stop(srv);
	env_fini(&e);
}

static void ctl_garbage_welcome_is_a_protocol_error(void)
{
	struct env e;
	struct fake f = { .kind = FAKE_GARBAGE };
	const char *argv[] = { "kvmmctl", "--socket", NULL, "stat", NULL };
	char out[4096];
	pid_t srv;

	env_init(&e);
	f.path = argv[2] = e.sock;
	srv = fake_start(&f);
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 3);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "EPROTO: Protocol error"));
	CU_ASSERT_PTR_NULL(strstr(out, "Unknown error"));
	fake_stop(srv);
	env_fini(&e);
}

static void ctl_errnos_print_by_name(void)
{
	static const struct {
		enum fake_kind kind;
		int32_t status;
		const char *says;
	} cases[] = {
		{ FAKE_STATUS, -EPERM, "EPERM: Operation not permitted" },
		{ FAKE_STATUS, -EBUSY, "EBUSY: Device or resource busy" },
		{ FAKE_CLOSE, 0, "ECONNRESET: Connection reset by peer" },
	};
	const char *argv[] = { "kvmmctl", "--socket", NULL, "probe", NULL };
	char out[4096];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fake f = { .kind = cases[i].kind, .status = cases[i].status };
		struct env e;
		pid_t srv;

		env_init(&e);
		f.path = argv[2] = e.sock;
		srv = fake_start(&f);
		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 3);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[i].says));
		fake_stop(srv);
		env_fini(&e);
	}
}

/* Read @fd until @want appears in what came (or the deadline passes). */
static bool read_until(int fd, const char *want, int timeout_ms)
{
	char buf[4096];
	size_t got = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while (got + 1 < sizeof(buf) && poll(&p, 1, timeout_ms) > 0) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
		if (strstr(buf, want))
			return true;
	}
	return false;
}

static void ctl_top_exits_3_when_kvmmd_dies(void)
{
	struct env e;
	int pfd[2], st;
	pid_t top;

	env_init(&e);
	start_kvmmd(&e);
	CU_ASSERT_FATAL(!pipe2(pfd, O_CLOEXEC));
	{
		const char *argv[] = { "kvmmctl", "--socket", e.sock, "--json", "top",
				       "--interval", "0.02", NULL };

		top = hostile_spawn(argv, pfd[1]);
	}
	close(pfd[1]);
	CU_ASSERT_FATAL(top > 0);
	/* top is running once it printed a line; then its instance dies */
	CU_ASSERT(read_until(pfd[0], "hit_rate", RUN_MS));
	kill(e.kvmmd, SIGKILL);
	hostile_reap(e.kvmmd, RUN_MS);
	e.kvmmd = -1;
	st = hostile_reap(top, RUN_MS);
	if (st == -ETIMEDOUT) {
		kill(top, SIGKILL);
		hostile_reap(top, RUN_MS);
	}
	CU_ASSERT_EQUAL(st, 3);
	close(pfd[0]);
	env_fini(&e);
}

/* The library's own deadlines: connect and wait. */
static void ring_waits_have_deadlines(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 4096 };
	const struct timespec t = { .tv_nsec = 100 * 1000000L };
	const struct timespec bad = { .tv_nsec = 1000000000L };
	struct fake f = { .kind = FAKE_SHORT };
	struct kvmm_ring ring;
	struct kvmm_cqe *cqe;
	struct env e;
	pid_t srv;

	env_init(&e);
	f.path = e.sock;
	srv = fake_start(&f);
	CU_ASSERT_EQUAL(kvmm_ring_connect_timeout(e.sock, &rp, &ring, &t), -ETIMEDOUT);
	CU_ASSERT_EQUAL(kvmm_ring_connect_timeout(e.sock, &rp, &ring, &bad), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_ring_connect_timeout("", &rp, &ring, &t), -EINVAL);
	fake_stop(srv);
	unlink(e.sock);

	/* a server that never accepts: its backlog fills, connect() itself waits */
	f.kind = FAKE_NOACCEPT;
	srv = fake_start(&f);
	{
		int i, s[4];

		for (i = 0; i < 4; i++)
			s[i] = nb_connect(e.sock);
		CU_ASSERT_EQUAL(kvmm_ring_connect_timeout(e.sock, &rp, &ring, &t), -ETIMEDOUT);
		for (i = 0; i < 4; i++)
			if (s[i] >= 0)
				close(s[i]);
	}
	fake_stop(srv);
	unlink(e.sock);

	start_kvmmd(&e);
	CU_ASSERT_FATAL(!kvmm_ring_connect_timeout(e.sock, &rp, &ring, &t));
	/* nothing submitted: nothing completes */
	CU_ASSERT_EQUAL(kvmm_wait_cqe_timeout(&ring, &cqe, &t), -ETIMEDOUT);
	CU_ASSERT_EQUAL(kvmm_wait_cqe_timeout(&ring, &cqe, &bad), -EINVAL);
	kvmm_prep_probe(kvmm_get_sqe(&ring), 0, 0);
	kvmm_submit(&ring);
	CU_ASSERT_EQUAL(kvmm_wait_cqe_timeout(&ring, &cqe, &t), 0);
	kvmm_ring_exit(&ring);
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/* ---- kvmmd: item 14's tool parts ---- */

/* Write @text to the test's config file; its path goes to @path. */
static void write_cfg(const struct env *e, const char *text, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/cfg", e->dir);
	f = fopen(path, "w");
	CU_ASSERT_FATAL(f != NULL);
	fputs(text, f);
	fclose(f);
}

static void kvmmd_option_order_does_not_matter(void)
{
	static const char *const pairs[][4] = {
		{ "--pages", "100", "--mem-fraction", "0.5" },
		{ "--pages", "100", "--mem-avail", "1073741824" },
		{ "--mla-dim", "512", "--kv-heads", "2" },
	};
	char out1[1024], out2[1024];
	struct env e;
	size_t i;

	env_init(&e);
	for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		const char *a1[] = { "kvmmd", "--socket", e.sock, pairs[i][0], pairs[i][1],
				     pairs[i][2], pairs[i][3], NULL };
		const char *a2[] = { "kvmmd", "--socket", e.sock, pairs[i][2], pairs[i][3],
				     pairs[i][0], pairs[i][1], NULL };

		CU_ASSERT_EQUAL(hostile_run(a1, out1, sizeof(out1), RUN_MS), 2);
		CU_ASSERT_EQUAL(hostile_run(a2, out2, sizeof(out2), RUN_MS), 2);
		CU_ASSERT_STRING_EQUAL(out1, out2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out1, pairs[i][0]));
		CU_ASSERT_PTR_NOT_NULL(strstr(out1, pairs[i][2]));
	}
	env_fini(&e);
}

static void kvmmd_config_trailing_words_are_errors(void)
{
	static const char *const bad[] = {
		"pages 100 200\n",
		"# a comment\n\npoll yes\n",
		"page-size 16 # ok\nmax-seqs 8 16\n",
		"pages\n",
		"frobnicate 1\n",
		"config /etc/kvmmd.conf\n",
		NULL,		/* a line longer than the buffer */
	};
	static char longline[5000];
	char cfg[128], out[1024];
	struct env e;
	size_t i;

	env_init(&e);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--config", cfg, NULL };

		if (!bad[i]) {
			memset(longline, 'x', sizeof(longline) - 2);
			longline[sizeof(longline) - 2] = '\n';
		}
		write_cfg(&e, bad[i] ? bad[i] : longline, cfg, sizeof(cfg));
		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "cfg:"));
		CU_ASSERT(access(e.sock, F_OK) != 0);	/* it never served */
	}
	env_fini(&e);
}

static void kvmmd_numbers_are_strict(void)
{
	static const char *const bad[][2] = {
		{ "--host-node", "3000000000" },
		{ "--cuda-device", "4294967295" },
		{ "--mem-avail", " 1073741824" },
		{ "--mem-fraction", " 0.5" },
		{ "--mem-fraction", "nan" },
		{ "--pages", "4294967296" },
		{ "--pages", "-0" },
		{ "--layers", "0x" },
		{ "--mem-fraction", "0" },
		{ "--evict", "fifo" },
		{ "--write-policy", "sometimes" },
		{ "--backend", "abacus" },
		{ "--nvme-file", "" },
	};
	char out[1024];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* where nothing can be served: a number let through fails there */
		const char *argv[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock",
				       bad[i][0], bad[i][1], NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i][0]));
	}
	{
		const char *argv[] = { "kvmmd", "--socket", "", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--socket"));
	}
	{
		const char *argv[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock", "serve",
				       NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "'serve'"));
	}
	{
		const char *argv[] = { "kvmmd", "--pages", "64", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--socket PATH is required"));
	}
}

static void kvmmd_says_who_answers_at_its_socket(void)
{
	struct fake f = { .kind = FAKE_GARBAGE };
	struct env e;
	char out[1024];
	pid_t srv;

	env_init(&e);
	f.path = e.sock;
	srv = fake_start(&f);
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--pages", "64", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NULL(strstr(out, "another kvmmd"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "not kvmm"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "EADDRINUSE: Address already in use"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "a probe got EPROTO"));
	}
	fake_stop(srv);
	unlink(e.sock);
	start_kvmmd(&e);
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--pages", "64", NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "another kvmmd"));
	}
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/*
 * A SIGTERM that arrives before kvmmd serves is not lost: started with
 * SIGTERM blocked and already pending (as a supervisor may), it still
 * stops cleanly, and so does one sent once it serves.
 */
static void kvmmd_early_sigterm_is_not_lost(void)
{
	const char *argv[] = { "kvmmd", "--socket", NULL, "--pages", "64", "--quiet", NULL };
	sigset_t set, old;
	struct env e;
	pid_t pid;

	env_init(&e);
	argv[2] = e.sock;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, &old);
	pid = hostile_spawn(argv, -1);
	sigprocmask(SIG_SETMASK, &old, NULL);
	CU_ASSERT_FATAL(pid > 0);
	kill(pid, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(pid, RUN_MS), 0);
	if (hostile_alive(pid)) {
		kill(pid, SIGKILL);
		hostile_reap(pid, RUN_MS);
	}
	start_kvmmd(&e);
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = -1;
	CU_ASSERT(access(e.sock, F_OK) != 0);	/* the socket is removed */
	env_fini(&e);
}

/* kvmmd's server limits are options: --max-clients 1 refuses a second client. */
static void kvmmd_server_limits_are_options(void)
{
	const char *bad[] = { "kvmmd", "--socket", NULL, "--max-pending", "1025", NULL };
	struct kvmm_ring_params rp = { .sq_entries = 4 };
	struct kvmm_ring one, two;
	char out[512];
	struct env e;
	int log[2];

	env_init(&e);
	bad[2] = e.sock;
	CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), RUN_MS), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "--max-pending"));
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--pages", "64",
				       "--max-clients", "1", "--handshake-ms", "2000",
				       "--send-ms", "2000", "--max-pending", "8", NULL };

		CU_ASSERT_FATAL(!pipe(log));
		e.kvmmd = hostile_spawn(argv, log[1]);
		close(log[1]);
		/* the limits hold from "serving" on (they are set after the socket listens) */
		CU_ASSERT(read_until(log[0], "kvmmd: serving", RUN_MS));
		close(log[0]);
	}
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(e.sock, &rp, &one), 0);
	CU_ASSERT_EQUAL(kvmm_ring_connect(e.sock, &rp, &two), -EBUSY);
	kvmm_ring_exit(&one);
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = -1;
	env_fini(&e);
}

/*
 * Attaching the pool has a deadline too: a server that stops answering
 * (here: kvmmd stopped with SIGSTOP) gives -ETIMEDOUT, not a hang.
 */
static void pool_attach_has_a_deadline(void)
{
	const struct timespec t = { .tv_nsec = 200 * 1000000L }, bad = { .tv_nsec = -1 };
	struct kvmm_ring_params rp = { .sq_entries = 4 };
	struct kvmm_kv_pool *pool;
	struct kvmm_ring ring;
	struct env e;
	int st, ret;

	env_init(&e);
	start_kvmmd(&e);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(e.sock, &rp, &ring), 0);
	CU_ASSERT_EQUAL(kvmm_kv_pool_attach_timeout(&ring, NULL, &pool, &bad), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_pool_attach_timeout(&ring, NULL, &pool, &t), 0);
	kvmm_kv_pool_close(pool);
	kill(e.kvmmd, SIGSTOP);
	/* stopped for sure, not about to be: */
	CU_ASSERT_EQUAL_FATAL(waitpid(e.kvmmd, &st, WUNTRACED), e.kvmmd);
	CU_ASSERT_FATAL(WIFSTOPPED(st));
	ret = kvmm_kv_pool_attach_timeout(&ring, NULL, &pool, &t);
	CU_ASSERT_EQUAL(ret, -ETIMEDOUT);
	if (!ret)
		kvmm_kv_pool_close(pool);
	kvmm_ring_exit(&ring);
	kill(e.kvmmd, SIGCONT);
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = -1;
	env_fini(&e);
}

/*
 * Every string option kvmmd keeps is freed at exit: under ASan
 * (make check SAN=address,undefined) a leak makes the exit status non-zero.
 */
static void kvmmd_frees_its_options(void)
{
	char cfg[128], nvme[128], text[512];
	struct env e;

	env_init(&e);
	snprintf(nvme, sizeof(nvme), "%s/nvme", e.dir);
	snprintf(text, sizeof(text), "socket %s\nnvme-file %s\nevict slru\nbackend mock\n",
		 e.sock, nvme);
	write_cfg(&e, text, cfg, sizeof(cfg));
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--config", cfg,
				       "--nvme-file", nvme, "--evict", "lru", "--pages", "64",
				       "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
				       "--host-pages", "16", "--nvme-pages", "32", "--quiet", NULL };

		e.kvmmd = hostile_spawn(argv, -1);
	}
	wait_kvmmd(&e);
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = -1;
	env_fini(&e);
}

/* ---- kvmm-engine --json -: standard output is JSON only ---- */

/* Run @argv with its standard output (only) in @out; standard error is dropped. */
/*
 * kvmmctl spaces, ns and top show what the keyed page store holds: a
 * client registers a space and stores two values through kvmmd.
 */
static void ctl_shows_keyed_spaces(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 1 << 16 };
	struct kvmm_kspace_reg *reg;
	struct kvmm_kent *ent;
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	char out[8192];
	struct env e;
	int32_t space;
	json_t *j, *rec;

	env_init(&e);
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--pages", "64",
				       "--host-pages", "8", "--keyed-share", "40", "--quiet", NULL };

		e.kvmmd = hostile_spawn(argv, -1);
		wait_kvmmd(&e);
	}
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(e.sock, &rp, &ring), 0);
	reg = ring.buf;
	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = 1000;
	strcpy(reg->model_id, "org/model@abc");
	sqe = TEST_SQE(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
	sqe->ns = 3;
	space = test_ring1(&ring, NULL);
	CU_ASSERT_FATAL(space >= 0);
	ent = ring.buf;
	ent[0] = (struct kvmm_kent){ .key = { 1, 2 }, .off = 4096 };
	ent[1] = (struct kvmm_kent){ .key = { 3, 4 }, .off = 8192 };
	sqe = TEST_SQE(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KPUT, 0, 0, 0, 2);
	sqe->arg = (uint32_t)space;
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 2);
	{
		const char *argv[] = { "kvmmctl", "spaces", "--json", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		j = json_loads(out, 0, NULL);
		CU_ASSERT_FATAL(json_is_array(j) && json_array_size(j) == 1);
		rec = json_array_get(j, 0);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(rec, "id")), space);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(rec, "ns")), 3);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(rec, "model_id")),
				       "org/model@abc");
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(rec, "values")), 2);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(rec, "host_pages")), 2);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(rec, "nvme_pages")), 0);
		json_decref(j);
	}
	{
		const char *argv[] = { "kvmmctl", "spaces", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "org/model@abc"));
	}
	{
		const char *argv[] = { "kvmmctl", "top", "--count", "1", "--interval", "0.01",
				       "--json", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		j = json_loads(out, 0, NULL);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "keyed_host_pages")), 2);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "host_pages_cached")), 2);
		json_decref(j);
	}
	/* the split: kvmmd's option, then kvmmctl set; out of range is refused */
	{
		const char *st[] = { "kvmmctl", "stat", "--json", "--socket", e.sock, NULL };
		const char *set[] = { "kvmmctl", "set", "keyed_share", "30", "--socket", e.sock,
				      NULL };
		const char *bad[] = { "kvmmctl", "set", "keyed_share", "0", "--socket", e.sock,
				      NULL };

		CU_ASSERT_EQUAL(hostile_run(st, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"keyed_share\":40"));
		CU_ASSERT_EQUAL(hostile_run(set, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_EQUAL(hostile_run(st, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"keyed_share\":30"));
		CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), RUN_MS), 1);
	}
	kvmm_ring_exit(&ring);
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/* XXH3-128 of @n tokens seeded with @ns, as kvmmctl events prints a page key. */
static void page_key_hex(uint32_t ns, const uint32_t *tok, uint32_t n, char *hex)
{
	XXH128_hash_t h = XXH3_128bits_withSeed(tok, n * sizeof(*tok), ns);

	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

/* kvmmd --events, a prompt committed through a ring, kvmmctl events reads it. */
static void ctl_shows_cache_events(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 1 << 16 };
	uint32_t *tok, seq, i;
	struct kvmm_ring ring;
	char out[8192], k0[33], k1[33];
	struct env e;
	json_t *j, *keys;
	env_init(&e);
	{
		const char *argv[] = { "kvmmd", "--socket", e.sock, "--pages", "64", "--page-size",
				       "4", "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
				       "--events", "65536", "--quiet", NULL };

		e.kvmmd = hostile_spawn(argv, -1);
		wait_kvmmd(&e);
	}
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(e.sock, &rp, &ring), 0);
	tok = ring.buf;
	for (i = 0; i < 8; i++)
		tok[i] = 100 + i;
	kvmm_prep_open(TEST_SQE(&ring), 2);
	seq = (uint32_t)test_ring1(&ring, NULL);
	kvmm_prep_extend(TEST_SQE(&ring), seq, 8, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), seq, 0, 0, 8);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	page_key_hex(2, tok, 4, k0);
	page_key_hex(2, tok, 8, k1);
	{
		const char *argv[] = { "kvmmctl", "events", "--json", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		j = json_loads(out, 0, NULL);
		CU_ASSERT_FATAL(json_is_object(j));
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "seq")), 0);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "type")), "stored");
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "ns")), 2);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "tier")), "device");
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "pages")), 2);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "parent")),
				       "00000000000000000000000000000000");
		keys = json_object_get(j, "keys");
		CU_ASSERT_FATAL(json_is_array(keys) && json_array_size(keys) == 2);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(keys, 0)), k0);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(keys, 1)), k1);
		json_decref(j);
	}
	/* --follow --count: the stored event, then the removal it waits for */
	{
		const char *drop[] = { "kvmmctl", "drop-caches", "--socket", e.sock, NULL };
		const char *argv[] = { "kvmmctl", "events", "--follow", "--count", "2",
				       "--interval", "0.01", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(drop, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 stored ns 2 device pages 2"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "1 removed ns 2 device pages 2"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, k1));
	}
	/* off: a clear refusal, exit 1; a bad size is refused by the instance */
	{
		const char *off[] = { "kvmmctl", "set", "events", "off", "--socket", e.sock, NULL };
		const char *small[] = { "kvmmctl", "set", "events", "100", "--socket", e.sock,
					NULL };
		const char *argv[] = { "kvmmctl", "events", "--socket", e.sock, NULL };
		const char *usage[] = { "kvmmctl", "events", "extra", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(small, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_EQUAL(hostile_run(off, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_EQUAL(hostile_run(usage, out, sizeof(out), RUN_MS), 2);
	}
	kvmm_ring_exit(&ring);
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/* A kvmmd with small KV and events on, at @sock. */
static pid_t start_events_kvmmd(const char *sock)
{
	const char *argv[] = { "kvmmd", "--socket", sock, "--pages", "64", "--page-size", "4",
			       "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
			       "--events", "65536", "--quiet", NULL };
	pid_t pid = hostile_spawn(argv, -1);

	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT_FATAL(!hostile_wait_socket(sock, RUN_MS));
	return pid;
}

/* Commit the first @n tokens 100, 101, ... to @sock's cache in namespace @ns. */
static void commit_prompt(const char *sock, uint32_t ns, uint32_t n)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 1 << 16 };
	struct kvmm_ring ring;
	uint32_t *tok, seq, i;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	tok = ring.buf;
	for (i = 0; i < n; i++)
		tok[i] = 100 + i;
	kvmm_prep_open(TEST_SQE(&ring), ns);
	seq = (uint32_t)test_ring1(&ring, NULL);
	kvmm_prep_extend(TEST_SQE(&ring), seq, n, 0);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_prep_close(TEST_SQE(&ring), seq, 0, 0, n);
	CU_ASSERT_EQUAL(test_ring1(&ring, NULL), 0);
	kvmm_ring_exit(&ring);
}

/* MATCH @n tokens @first, @first + 1, ... on @sock; return the tokens hit. */
static int match_prompt(const char *sock, uint32_t first, uint32_t n)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 1 << 16 };
	struct kvmm_ring ring;
	uint32_t *tok, seq, i;
	int hit;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	tok = ring.buf;
	for (i = 0; i < n; i++)
		tok[i] = first + i;
	kvmm_prep_open(TEST_SQE(&ring), 0);
	seq = (uint32_t)test_ring1(&ring, NULL);
	kvmm_prep_match(TEST_SQE(&ring), seq, 0, 0, n);
	hit = test_ring1(&ring, NULL);
	kvmm_ring_exit(&ring);
	return hit;
}

/*
 * kvmmctl top says which hit rate is which: this interval's ("-" when it
 * matched nothing, not a rate of 0) beside the one since the start; and
 * device pages dropped beside those demoted to the host tier.
 */
static void ctl_top_labels_its_rates(void)
{
	const char *argv[] = { "kvmmctl", "top", "--count", "1", "--interval", "0.01",
			       "--socket", NULL, NULL };
	const char *json[] = { "kvmmctl", "--json", "top", "--count", "1", "--interval", "0.01",
			       "--socket", NULL, NULL };
	char out[4096];
	struct env e;
	json_t *j;

	env_init(&e);
	argv[7] = json[8] = e.sock;
	e.kvmmd = start_events_kvmmd(e.sock);
	commit_prompt(e.sock, 0, 12);
	CU_ASSERT_EQUAL(match_prompt(e.sock, 100, 12), 12);	/* all of it */
	CU_ASSERT_EQUAL(match_prompt(e.sock, 500, 12), 0);	/* none: 12 of 24 in all */
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, " hit/int  hit/all     drop/s   demote/s "));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "       -   0.5000 "));
	CU_ASSERT_EQUAL(hostile_run(json, out, sizeof(out), RUN_MS), 0);
	j = json_loads(out, 0, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "hit_rate_total")), 0.5, 1e-9);
	CU_ASSERT(json_is_number(json_object_get(j, "demoted_pages_per_s")));
	CU_ASSERT(json_is_number(json_object_get(j, "hit_rate")));
	json_decref(j);
	json[2] = "check";		/* kvmm_check() of the instance */
	json[3] = "--socket";
	json[4] = e.sock;
	json[5] = NULL;
	CU_ASSERT_EQUAL(hostile_run(json, out, sizeof(out), RUN_MS), 0);
	CU_ASSERT(hostile_alive(e.kvmmd));
	env_fini(&e);
}

/* A kvmmd with host and NVMe tiers on @e's "nvme" file, its log to @log_fd. */
static pid_t start_tiered_kvmmd(struct env *e, int log_fd, const char *flush_ms)
{
	char nvme[128];
	const char *argv[] = { "kvmmd", "--socket", e->sock, "--pages", "64", "--page-size", "4",
			       "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
			       "--host-pages", "32", "--nvme-pages", "256", "--nvme-file", nvme,
			       "--model-id", "flush-test", "--shutdown-flush-ms", flush_ms, NULL };
	pid_t pid;

	snprintf(nvme, sizeof(nvme), "%s/nvme", e->dir);
	unlink(e->sock);
	pid = hostile_spawn(argv, log_fd);
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT_FATAL(!hostile_wait_socket(e->sock, RUN_MS));
	return pid;
}

/* Tokens of the first @n tokens 100, 101, ... cached on NVMe at @sock (LOOKUP_TIERS). */
static int32_t nvme_tokens(const char *sock, uint32_t n)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 1 << 16 };
	struct kvmm_tier_hits *hits;
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	uint32_t *tok, i;
	int32_t ret;

	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(sock, &rp, &ring), 0);
	tok = ring.buf;
	for (i = 0; i < n; i++)
		tok[i] = 100 + i;
	hits = (struct kvmm_tier_hits *)((char *)ring.buf + 32768);
	sqe = TEST_SQE(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_LOOKUP, 0, 0, 0, n);
	sqe->arg = KVMM_LOOKUP_TIERS;
	sqe->arg2 = 32768;
	ret = test_ring1(&ring, NULL);
	CU_ASSERT(ret >= 0 && ret <= (int32_t)n);
	ret = ret < 0 ? ret : (int32_t)hits->tokens[KVMM_TIER_NVME];
	kvmm_ring_exit(&ring);
	return ret;
}

/*
 * A prefix hot on the device when kvmmd stops: without a flush a restart
 * does not find it; kvmmctl flush writes it without moving it; SIGTERM
 * writes it and says so, and a restart finds all of it on NVMe.
 */
static void kvmmd_sigterm_flushes_to_nvme(void)
{
	char out[4096], log[128];
	struct env e;
	json_t *j;
	int fd;

	env_init(&e);
	snprintf(log, sizeof(log), "%s/log", e.dir);
	e.kvmmd = start_tiered_kvmmd(&e, -1, "0");
	commit_prompt(e.sock, 0, 64);
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	e.kvmmd = start_tiered_kvmmd(&e, fd, "5000");
	close(fd);
	CU_ASSERT_EQUAL(nvme_tokens(e.sock, 64), 0);	/* it was on the device */
	commit_prompt(e.sock, 0, 64);
	{
		const char *argv[] = { "kvmmctl", "flush", "--json", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
		j = json_loads(out, 0, NULL);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "pages")), 16);
		CU_ASSERT(json_is_true(json_object_get(j, "complete")));
		json_decref(j);
	}
	{
		const char *argv[] = { "kvmmctl", "flush", "1", "2", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
	}
	CU_ASSERT_EQUAL(nvme_tokens(e.sock, 64), 0);	/* still on the device */
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = start_tiered_kvmmd(&e, -1, "5000");
	CU_ASSERT_EQUAL(nvme_tokens(e.sock, 64), 64);	/* found again, all of it */
	/* drop-caches per tier: the device's drop leaves NVMe alone, each counted */
	{
		const char *dev[] = { "kvmmctl", "drop-caches", "device", "--json", "--socket",
				      e.sock, NULL };
		const char *nvme[] = { "kvmmctl", "drop-caches", "nvme", "--json", "--socket",
				       e.sock, NULL };
		const char *bad[] = { "kvmmctl", "drop-caches", "gpu", "--socket", e.sock, NULL };

		CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "'gpu'"));
		CU_ASSERT_EQUAL(hostile_run(dev, out, sizeof(out), RUN_MS), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"nvme\":0"));
		CU_ASSERT_EQUAL(nvme_tokens(e.sock, 64), 64);
		CU_ASSERT_EQUAL(hostile_run(nvme, out, sizeof(out), RUN_MS), 0);
		j = json_loads(out, 0, NULL);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "pages")), 16);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "nvme")), 16);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "device")), 0);
		json_decref(j);
		CU_ASSERT_EQUAL(nvme_tokens(e.sock, 64), 0);
	}
	kill(e.kvmmd, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(e.kvmmd, RUN_MS), 0);
	e.kvmmd = -1;
	fd = open(log, O_RDONLY);
	CU_ASSERT_FATAL(fd >= 0);
	memset(out, 0, sizeof(out));
	CU_ASSERT(read(fd, out, sizeof(out) - 1) > 0);
	close(fd);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "kvmmd: flushed 16 pages to NVMe in "));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, ", 0 left out"));
	unlink(log);
	env_fini(&e);
}

/* kvmm-route sends a prompt to the instance with the longest cached prefix. */
static void route_picks_the_longest_cached_prefix(void)
{
	struct env a, b;
	char out[4096], want[512];
	const char *drop[] = { "kvmmctl", "drop-caches", "--socket", b.sock, NULL };
	const char *argv[] = { "kvmm-route", a.sock, b.sock, "--", "100", "101", "102", "103",
			       "104", "105", "106", "107", "108", "109", "110", "111", "112", NULL };
	const char *other[] = { "kvmm-route", "--ns", "1", a.sock, b.sock, "--", "100", "101",
				"102", "103", NULL };

	env_init(&a);
	env_init(&b);
	a.kvmmd = start_events_kvmmd(a.sock);
	b.kvmmd = start_events_kvmmd(b.sock);
	commit_prompt(a.sock, 0, 4);	/* one page */
	commit_prompt(b.sock, 0, 12);	/* three */
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
	snprintf(want, sizeof(want), "%s 1\n%s 3\nroute %s\n", a.sock, b.sock, b.sock);
	CU_ASSERT_STRING_EQUAL(out, want);
	/* namespace 1 holds nothing anywhere: the first one named */
	CU_ASSERT_EQUAL(hostile_run(other, out, sizeof(out), RUN_MS), 0);
	snprintf(want, sizeof(want), "%s 0\n%s 0\nroute %s\n", a.sock, b.sock, a.sock);
	CU_ASSERT_STRING_EQUAL(out, want);
	/* b's pages evicted: its removed events take them out of its set */
	CU_ASSERT_EQUAL(hostile_run(drop, out, sizeof(out), RUN_MS), 0);
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 0);
	snprintf(want, sizeof(want), "%s 1\n%s 0\nroute %s\n", a.sock, b.sock, a.sock);
	CU_ASSERT_STRING_EQUAL(out, want);
	env_fini(&a);
	env_fini(&b);
}

static int run_stdout(const char *const argv[], char *out, size_t len)
{
	const char *errpath = test_tmp_file("run_stdout.err");
	int pfd[2], devnull, st;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	CU_ASSERT_FATAL(!pipe2(pfd, O_CLOEXEC));
	fflush(NULL);
	pid = fork();
	if (!pid) {
		int errfd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		devnull = open("/dev/null", O_RDWR);
		dup2(pfd[1], STDOUT_FILENO);
		dup2(errfd >= 0 ? errfd : devnull, STDERR_FILENO);
		dup2(devnull, STDIN_FILENO);
		execv(hostile_bin(argv[0]), (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	while (got + 1 < len && (n = read(pfd[0], out + got, len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(pfd[0]);
	st = pid > 0 ? hostile_reap(pid, RUN_MS) : -1;
	if (st) {	/* say why: what the tool wrote to stderr */
		char why[1024] = "";
		FILE *f = fopen(errpath, "r");

		if (f) {
			why[fread(why, 1, sizeof(why) - 1, f)] = '\0';
			fclose(f);
		}
		fprintf(stderr, "\n  %s %s: exit %d: %s", argv[0], argv[1] ? argv[1] : "", st, why);
	}
	unlink(errpath);
	return st;
}

static void engine_json_stdout_is_only_json(void)
{
	const char *argv[] = { "kvmm-engine", "--requests", "20", "--json", "-", NULL };
	static char out[1 << 16];

	CU_ASSERT_EQUAL(run_stdout(argv, out, sizeof(out)), 0);
	CU_ASSERT_EQUAL(out[0], '{');
	CU_ASSERT_PTR_NULL(strstr(out, "kvmm-engine:"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"results\""));
	CU_ASSERT_EQUAL(out[strlen(out) - 2], '}');
}

/* The number after @label on its summary row of @out, or -1. */
static long long summary_row(const char *out, const char *label)
{
	const char *p = strstr(out, label);

	return p ? strtoll(p + strlen(label), NULL, 10) : -1;
}

/*
 * kvmm-engine's tiered summary puts each breakdown under what it breaks
 * down (tokens promoted from each tier under the tokens served from cache,
 * never under a tier's demotions), and says why the tokens saved differ
 * from those served from cache when they do.
 */
static void engine_tier_summary_reads_in_order(void)
{
	struct env e;
	char nvme[128];
	const char *argv[] = { "kvmm-engine", "--requests", "200", "--device-pages", "512",
			       "--host-pages", "512", "--nvme-file", nvme, "--nvme-pages", "2048",
			       NULL };
	static char out[1 << 14];
	const char *cached, *host, *nvm, *hrate, *dem_host, *dem_nvme;
	long long served, saved;

	env_init(&e);
	snprintf(nvme, sizeof(nvme), "%s/nvme", e.dir);
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS * 3), 0);
	cached = strstr(out, "tokens served from cache");
	host = strstr(out, "of those, promoted from host");
	nvm = strstr(out, "of those, promoted from NVMe");
	hrate = strstr(out, "host tier hit rate");
	dem_host = strstr(out, "pages demoted to host");
	dem_nvme = strstr(out, "pages demoted to NVMe");
	CU_ASSERT_FATAL(cached && host && nvm && hrate && dem_host && dem_nvme);
	CU_ASSERT(cached < host && host < nvm && nvm < hrate && hrate < dem_host &&
		  dem_host < dem_nvme);
	served = summary_row(out, "tokens served from cache");
	saved = summary_row(out, "prefill tokens saved");
	CU_ASSERT(served > 0 && saved >= served);
	CU_ASSERT_EQUAL(strstr(out, "prefill tokens saved count every admission") != NULL,
			saved != served);
	env_fini(&e);
}

/* @dir/@name's text in @buf (NUL-terminated, cut to @len - 1 bytes); 0 or -1. */
static int read_text(const char *dir, const char *name, char *buf, size_t len)
{
	char path[256];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return 0;
}

/*
 * --plot: each title names the run and its page size; the requests' own
 * pages get a line on an axis of their own; the sweep says why it may fall.
 */
static void engine_plots_name_their_run(void)
{
	struct env e;
	char dir[128];
	const char *argv[] = { "kvmm-engine", "--requests", "60", "--page-size", "8", "--plot", dir,
			       "--quiet", NULL };
	static char text[1 << 20];

	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "engine_plots_name_their_run: skipped, no gnuplot\n");
		return;
	}
	env_init(&e);
	snprintf(dir, sizeof(dir), "%s/plots", e.dir);
	CU_ASSERT_EQUAL_FATAL(hostile_run(argv, NULL, 0, RUN_MS * 3), 0);
	CU_ASSERT_EQUAL_FATAL(read_text(dir, "plots.gp", text, sizeof(text)), 0);
	/* four titles, each with the run's name and pool on its second line */
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "(cumulative)\\ngenerated (seed "));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "by state\\ngenerated (seed "));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "; pool 8192 pages of 8 tokens\"\nset ylabel 'pages'"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "axes x1y2 with lines"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "need not rise with the pool"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "pool pages (this run: 8192)"));
	CU_ASSERT_EQUAL_FATAL(read_text(dir, "pages.svg", text, sizeof(text)), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "owned (right axis)"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "pool 8192 pages of 8 tokens"));
	{
		const char *rm[] = { "rm", "-rf", dir, NULL };
		pid_t pid = fork();

		if (pid == 0) {
			execvp(rm[0], (char *const *)rm);
			_exit(127);
		}
		hostile_reap(pid, RUN_MS);
	}
	env_fini(&e);
}

/* ---- tools/lib/json.c: the tools' --json lines ---- */

/* @j as tool_json_line() prints it, in @buf. */
static int json_line_of(json_t *j, char *buf, size_t len)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);
	int ret;

	if (!f)
		return -ENOMEM;
	ret = tool_json_line(j, f);
	fclose(f);
	snprintf(buf, len, "%s", text ? text : "");
	free(text);
	return ret;
}

static void json_figures_print_as_printf_rounds_them(void)
{
	char out[256];
	json_t *j;

	j = json_pack("{s:o,s:o,s:o,s:o}", "hit_rate", tool_json_fixed(0.06504, 4),
		      "gbps", tool_json_fixed(12.3456, 2), "sum", tool_json_fixed(0.1 + 0.2, 3),
		      "whole", tool_json_fixed(5.0, 2));
	CU_ASSERT_EQUAL(json_line_of(j, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out,
			       "{\"hit_rate\":0.065,\"gbps\":12.35,\"sum\":0.3,\"whole\":5.0}\n");
	/* a per-second rate is a whole number; a ratio over zero has no JSON number */
	j = json_pack("{s:o,s:o,s:o}", "iops", tool_json_fixed(18566.4, 0),
		      "nan", tool_json_fixed(NAN, 3), "inf", tool_json_fixed(INFINITY, 3));
	CU_ASSERT_EQUAL(json_line_of(j, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "{\"iops\":18566,\"nan\":null,\"inf\":null}\n");
	/* counts stay unsigned past INT64_MAX, where json_int_t would turn negative */
	j = json_pack("{s:o,s:o}", "n", tool_json_u64(42), "max", tool_json_u64(UINT64_MAX));
	CU_ASSERT_EQUAL(json_line_of(j, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "{\"n\":42,\"max\":1.84467440737096e19}\n");
	/* a json_pack() that failed prints nothing and says so */
	CU_ASSERT_EQUAL(json_line_of(NULL, out, sizeof(out)), -EIO);
	CU_ASSERT_STRING_EQUAL(out, "");
}

/* A string the tool did not make (here a path, in dlerror()'s message) is escaped. */
static void bench_json_escapes_what_it_prints(void)
{
	const char *argv[] = { "kvmm-bench", "cuda", "--json", "--driver",
			       "/nonexistent/a\"b\\c.so", NULL };
	static char out[4096];
	json_error_t err;
	json_t *j, *why;

	CU_ASSERT_EQUAL(run_stdout(argv, out, sizeof(out)), 0);
	j = json_loads(out, 0, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "bench")), "cuda");
	why = json_object_get(j, "skipped");
	CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(why) ?: "", "/nonexistent/a\"b\\c.so"));
	json_decref(j);
}

#if CONFIG_KVMM_CUDA_H
/*
 * On the fake driver the whole cuda bench runs (figures meaningless):
 * the device it measured comes first, then a line per page size and
 * kv_indices, each JSON.
 */
static void bench_cuda_names_its_device(void)
{
	static char fake[4096], out[1 << 14];
	const char *argv[] = { "kvmm-bench", "cuda", "--json", "--set-mib", "16", "--driver",
			       fake, NULL };
	unsigned moves = 0, indices = 0, lines = 0;
	char *line, *save = NULL;
	ssize_t n = readlink("/proc/self/exe", fake, sizeof(fake) - 32);

	CU_ASSERT_FATAL(n > 0);
	fake[n] = '\0';
	strcpy(strrchr(fake, '/'), "/libfakecuda.so");
	CU_ASSERT_EQUAL(run_stdout(argv, out, sizeof(out)), 0);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_error_t err;
		json_t *j = json_loads(line, 0, &err);
		const char *op;

		CU_ASSERT_PTR_NOT_NULL_FATAL(j);
		op = json_string_value(json_object_get(j, "op")) ?: "";
		if (!lines++) {
			CU_ASSERT_STRING_EQUAL(op, "device");
			CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "device")) ?: "",
					       "fakecuda");
			CU_ASSERT(json_integer_value(json_object_get(j, "driver_version")) >= 12000);
		}
		moves += !strcmp(op, "move");
		indices += !strcmp(op, "kv_indices");
		json_decref(j);
	}
	CU_ASSERT_EQUAL(moves, 3);
	CU_ASSERT_EQUAL(indices, 1);
}
#endif

/* One phase/op line of kvmm-bench latency: counts and ordered quantiles. */
static void latency_check_op(json_t *j)
{
	double p50 = json_number_value(json_object_get(j, "p50_us"));
	double p99 = json_number_value(json_object_get(j, "p99_us"));
	double max = json_number_value(json_object_get(j, "max_us"));

	CU_ASSERT(json_integer_value(json_object_get(j, "count")) > 0);
	CU_ASSERT(json_is_number(json_object_get(j, "p99_us")));
	CU_ASSERT(p50 > 0 && p50 <= p99 && p99 <= max);
}

/* The summary: ratios present, writeback seen only while busy, no probe failed. */
static void latency_check_summary(json_t *j)
{
	static const char *const ratios[] = { "match_p99_ratio", "extend_p99_ratio",
					      "stats_p99_ratio", "worst_p99_ratio" };
	unsigned i;

	for (i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++)
		CU_ASSERT(json_number_value(json_object_get(j, ratios[i])) > 0);
	CU_ASSERT(json_integer_value(json_object_get(j, "busy_writeback_runs")) > 0);
	/*
	 * How much of the busy phases' writeback reaches NVMe (rather than
	 * the host tier) depends on how much time the machine gives the
	 * phase: under load it may round to 0.0 MiB.  The field is there.
	 */
	CU_ASSERT(json_is_number(json_object_get(j, "busy_nvme_mib")));
	CU_ASSERT(json_number_value(json_object_get(j, "busy_nvme_mib")) >= 0);
	/*
	 * The idle phase starts once writeback has settled, but its own probes
	 * allocate, and on a slow machine (a sanitizer build, a busy disk) a
	 * run may still start in it: the bench reports it, and it is fewer.
	 */
	CU_ASSERT(json_integer_value(json_object_get(j, "idle_writeback_runs")) <
		  json_integer_value(json_object_get(j, "busy_writeback_runs")));
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "failed")), 0);
	CU_ASSERT(json_integer_value(json_object_get(j, "prefixes")) > 0);
}

/* kvmm-bench latency --json: a line per phase and op, then the summary, all JSON. */
static void bench_latency_json_has_its_fields(void)
{
	const char *argv[] = { "kvmm-bench", "latency", "--quick", "--json", "--phase-ms", "100",
			       NULL };
	static char out[1 << 14];
	unsigned ops = 0, summaries = 0;
	char *line, *save = NULL;
	json_error_t err;

	CU_ASSERT_EQUAL_FATAL(run_stdout(argv, out, sizeof(out)), 0);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_t *j = json_loads(line, 0, &err);
		const char *phase;

		CU_ASSERT_PTR_NOT_NULL_FATAL(j);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "bench")), "latency");
		phase = json_string_value(json_object_get(j, "phase")) ?: "";
		if (!strcmp(phase, "summary")) {
			latency_check_summary(j);
			summaries++;
		} else {
			CU_ASSERT(!strcmp(phase, "idle") || !strcmp(phase, "busy"));
			latency_check_op(j);
			ops++;
		}
		json_decref(j);
	}
	CU_ASSERT_EQUAL(ops, 6);
	CU_ASSERT_EQUAL(summaries, 1);
}

/* ---- tools/lib/parse.c ---- */

static void parse_numbers_strictly(void)
{
	uint64_t v = 7;
	double d = 7;

	CU_ASSERT_EQUAL(parse_uint("42", 100, &v), 0);
	CU_ASSERT_EQUAL(v, 42);
	CU_ASSERT_EQUAL(parse_uint("0x10", 100, &v), 0);
	CU_ASSERT_EQUAL(v, 16);
	CU_ASSERT_EQUAL(parse_uint("010", 100, &v), 0);
	CU_ASSERT_EQUAL(v, 10);
	CU_ASSERT_EQUAL(parse_uint("18446744073709551615", UINT64_MAX, &v), 0);
	v = 7;
	CU_ASSERT_EQUAL(parse_uint("18446744073709551616", UINT64_MAX, &v), -ERANGE);
	CU_ASSERT_EQUAL(parse_uint("4294967296", UINT32_MAX, &v), -ERANGE);
	CU_ASSERT_EQUAL(parse_uint("-1", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(parse_uint(" 1", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(parse_uint("+1", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(parse_uint("1x", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(parse_uint("0x", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(parse_uint("", UINT64_MAX, &v), -EINVAL);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(parse_real("0.5", 0, 1, &d), 0);
	CU_ASSERT_EQUAL(d, 0.5);
	d = 7;
	CU_ASSERT_EQUAL(parse_real("nan", 0, 1, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("inf", 0, 1, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("+inf", 0, 1e308, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("1e999", 0, 1e308, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real(" 0.5", 0, 1, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("0.5s", 0, 1, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("", 0, 1, &d), -EINVAL);
	CU_ASSERT_EQUAL(parse_real("2", 0, 1, &d), -ERANGE);
	CU_ASSERT_EQUAL(parse_real("-0.5", 0, 1, &d), -ERANGE);
	CU_ASSERT_EQUAL(d, 7);
	CU_ASSERT_STRING_EQUAL(parse_strerror(-ERANGE), "is out of range");
	CU_ASSERT_STRING_EQUAL(parse_strerror(-EINVAL), "is not a number");
	CU_ASSERT_STRING_EQUAL(errno_str(EPERM), "EPERM: Operation not permitted");
	CU_ASSERT_STRING_EQUAL(errno_str(ECONNRESET), "ECONNRESET: Connection reset by peer");
	CU_ASSERT_STRING_EQUAL(errno_str(1620730221), "error 1620730221 (not an errno value)");
}

/* Byte counts take K, M, G and T (powers of 1024), with iB or B or bare. */
static void parse_bytes_takes_units(void)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "0x10", 16 }, { "1K", 1024 }, { "1k", 1024 },
		{ "2KiB", 2048 }, { "3MB", 3ull << 20 }, { "1G", 1ull << 30 },
		{ "1GiB", 1ull << 30 }, { "16T", 16ull << 40 }, { "0x10G", 16ull << 30 },
	};
	static const struct {
		const char *s;
		int err;
	} bad[] = {
		{ "", -EINVAL }, { "G", -EINVAL }, { "1Q", -EINVAL }, { "1GG", -EINVAL },
		{ "1Gi", -EINVAL }, { "1G1", -EINVAL }, { " 1G", -EINVAL }, { "-1K", -EINVAL },
		{ "1.5G", -EINVAL }, { "16777216T", -ERANGE }, { "2G", -ERANGE },
	};
	uint64_t v;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 7;
		CU_ASSERT_EQUAL(parse_bytes(good[i].s, UINT64_MAX, &v), 0);
		CU_ASSERT_EQUAL(v, good[i].v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 7;
		/* "2G" against a field of at most 1 GiB */
		CU_ASSERT_EQUAL(parse_bytes(bad[i].s, 1ull << 30, &v), bad[i].err);
		CU_ASSERT_EQUAL(v, 7);
	}
}

/*
 * kvmmd's byte options take units, on the command line and in a config
 * file: with the options read, it gets as far as the socket (exit 1, not
 * the usage error 2).
 */
static void kvmmd_sizes_take_units(void)
{
	const char *argv[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock", "--mem-avail",
			       "64M", "--mem-total", "64MiB", "--events", "64K", NULL };
	char out[1024], cfg[4096];
	struct env e;

	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "cannot serve"));
	/* the units count: 64 MiB free of 1 GiB is below what SGLang's formula keeps back */
	argv[6] = "1G";
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "the memory budget holds no page"));
	env_init(&e);
	write_cfg(&e, "mem-avail 64MiB\nmem-total 64M\n", cfg, sizeof(cfg));
	{
		const char *a[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock", "--config",
				    cfg, NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), RUN_MS), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "cannot serve"));
	}
	env_fini(&e);
	{
		const char *a[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock", "--events",
				    "2G", NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--events: '2G' is out of range"));
	}
	{
		const char *a[] = { "kvmmd", "--socket", "/nonexistent/kvmmd.sock", "--mem-avail",
				    "1Q", NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--mem-avail: '1Q' is not a size"));
	}
}

/*
 * A refused option gets one line naming it (an unknown one with the
 * option a typo most likely meant) and a pointer to --help; not the whole
 * help.  @tool is run with @arg last (and kvmmd with a socket it never
 * reaches, kvmm-engine with nothing else).
 */
static void bad_options_are_named(void)
{
	static const struct {
		const char *tool, *arg, *want;
	} cases[] = {
		{ "kvmm-engine", "--devce-pages",
		  "kvmm-engine: unknown option --devce-pages: did you mean --device-pages?" },
		{ "kvmm-engine", "--plt", "kvmm-engine: unknown option --plt: did you mean --plot?" },
		{ "kvmm-engine", "--frobnicate", "kvmm-engine: unknown option --frobnicate (see" },
		{ "kvmm-engine", "--requests", "kvmm-engine: --requests needs a value" },
		{ "kvmm-engine", "--quiet=1", "kvmm-engine: --quiet takes no value" },
		{ "kvmm-engine", "--re", "kvmm-engine: --re is ambiguous" },
		{ "kvmm-engine", "-x", "kvmm-engine: unknown option '-x'" },
		{ "kvmmd", "--page-sise", "kvmmd: unknown option --page-sise: did you mean --page-size?" },
		{ "kvmmd", "--frobnicate", "kvmmd: unknown option --frobnicate\n" },
		{ "kvmmd", "--pages", "kvmmd: --pages: needs a value" },
		{ "kvmmd", "--poll=1", "kvmmd: --poll takes no value" },
		{ "kvmmd", "-x", "kvmmd: -x: unknown option" },
	};
	char out[4096];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool engine = !strcmp(cases[i].tool, "kvmm-engine");
		const char *argv[] = { cases[i].tool, "--socket", "/nonexistent/kvmmd.sock",
				       cases[i].arg, NULL };

		if (engine) {
			argv[1] = cases[i].arg;
			argv[2] = NULL;
		}
		CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), RUN_MS), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[i].want));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--help"));
		CU_ASSERT_PTR_NULL(strstr(out, "usage:"));		/* not the whole help */
		if (engine)	/* one line */
			CU_ASSERT(strchr(out, '\n') && !strchr(strchr(out, '\n') + 1, '\n'));
	}
}

int register_hostile_tools_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_tools", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, parse_numbers_strictly);
	ADD_TEST(s, parse_bytes_takes_units);
	ADD_TEST(s, kvmmd_sizes_take_units);
	ADD_TEST(s, bad_options_are_named);
	ADD_TEST(s, ctl_options_after_the_command);
	ADD_TEST(s, ctl_stray_argument_is_a_usage_error);
	ADD_TEST(s, ctl_refusals_say_the_rule);
	ADD_TEST(s, ctl_usage_errors_before_connecting);
	ADD_TEST(s, ctl_short_welcome_times_out);
	ADD_TEST(s, ctl_garbage_welcome_is_a_protocol_error);
	ADD_TEST(s, ctl_errnos_print_by_name);
	ADD_TEST(s, ctl_top_exits_3_when_kvmmd_dies);
	ADD_TEST(s, ctl_top_labels_its_rates);
	ADD_TEST(s, ctl_shows_keyed_spaces);
	ADD_TEST(s, ctl_shows_cache_events);
	ADD_TEST(s, route_picks_the_longest_cached_prefix);
	ADD_TEST(s, ring_waits_have_deadlines);
	ADD_TEST(s, kvmmd_option_order_does_not_matter);
	ADD_TEST(s, kvmmd_config_trailing_words_are_errors);
	ADD_TEST(s, kvmmd_numbers_are_strict);
	ADD_TEST(s, kvmmd_says_who_answers_at_its_socket);
	ADD_TEST(s, kvmmd_early_sigterm_is_not_lost);
	ADD_TEST(s, kvmmd_sigterm_flushes_to_nvme);
	ADD_TEST(s, kvmmd_frees_its_options);
	ADD_TEST(s, kvmmd_server_limits_are_options);
	ADD_TEST(s, pool_attach_has_a_deadline);
	ADD_TEST(s, engine_json_stdout_is_only_json);
	ADD_TEST(s, engine_tier_summary_reads_in_order);
	ADD_TEST(s, engine_plots_name_their_run);
	ADD_TEST(s, json_figures_print_as_printf_rounds_them);
	ADD_TEST(s, bench_json_escapes_what_it_prints);
#if CONFIG_KVMM_CUDA_H
	ADD_TEST(s, bench_cuda_names_its_device);
#endif
	ADD_TEST(s, bench_latency_json_has_its_fields);
	return 0;
}
