// SPDX-License-Identifier: MIT
/*
 * tests/hostile/hostile.c - child processes, privileges and deadlines for
 * the hostile-client suites (see hostile.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
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

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "hostile.h"

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int status_of(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

int hostile_reap(pid_t pid, int timeout_ms)
{
	long end = now_ms() + timeout_ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return status_of(st);
		if (r < 0)
			return -errno;
		if (now_ms() >= end)
			return -ETIMEDOUT;
		usleep(2000);
	}
}

/* Past its deadline the child is killed and its status reported. */
static int reap_or_kill(pid_t pid, int timeout_ms)
{
	int st = hostile_reap(pid, timeout_ms);

	if (st != -ETIMEDOUT)
		return st;
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return status_of(st);
}

static int drop_to(uid_t uid)
{
	if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
		return -1;
	return 0;
}

int hostile_child(uid_t uid, int (*fn)(void *arg), void *arg, int timeout_ms)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		if (uid != (uid_t)-1 && drop_to(uid))
			_exit(126);
		_exit(fn(arg) & 0xff);
	}
	return reap_or_kill(pid, timeout_ms);
}

int hostile_tmpdir(char *buf, size_t len)
{
	if ((size_t)snprintf(buf, len, "/tmp/kvmm-hostile-XXXXXX") >= len)
		return -EINVAL;
	if (!mkdtemp(buf))
		return -errno;
	return chmod(buf, 0777) ? -errno : 0;
}

const char *hostile_bin(const char *name)
{
	static char path[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t dir, len;
	char *slash;

	if (n <= 0)
		return name;
	self[n] = '\0';
	slash = strrchr(self, '/');	/* .../tests/kvmm-tests -> .../bin/NAME */
	if (slash)
		*slash = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	/* a tree too deep for PATH_MAX: the bare name, which then fails to run */
	dir = strlen(self);
	len = strlen(name);
	if (dir + sizeof("/bin/") + len > sizeof(path))
		return name;
	memcpy(path, self, dir);
	memcpy(path + dir, "/bin/", 5);
	memcpy(path + dir + 5, name, len + 1);
	return path;
}

pid_t hostile_spawn(const char *const argv[], int out_fd)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		int fd = out_fd >= 0 ? out_fd : open("/dev/null", O_WRONLY);

		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		/* no stdin: a tool that waits on it must not hang the suite */
		close(STDIN_FILENO);
		open("/dev/null", O_RDONLY);
		execv(hostile_bin(argv[0]), (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int hostile_run(const char *const argv[], char *out, size_t len, int timeout_ms)
{
	int pfd[2], st;
	size_t got = 0;
	long end = now_ms() + timeout_ms;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC))
		return -errno;
	pid = hostile_spawn(argv, pfd[1]);
	close(pfd[1]);
	if (pid < 0) {
		close(pfd[0]);
		return pid;
	}
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		long left = end - now_ms();
		char sink[256];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		if (out && got + 1 < len)
			n = read(pfd[0], out + got, len - 1 - got);
		else
			n = read(pfd[0], sink, sizeof(sink));
		if (n <= 0)
			break;
		if (out && got + 1 < len)
			got += (size_t)n;
	}
	if (out && len)
		out[got] = '\0';
	close(pfd[0]);
	st = reap_or_kill(pid, (int)(end > now_ms() ? end - now_ms() : 0));
	return st;
}

int hostile_wait_socket(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long end = now_ms() + timeout_ms;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	do {
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int ok = s >= 0 && !connect(s, (struct sockaddr *)&sa, sizeof(sa));

		if (s >= 0)
			close(s);
		if (ok)
			return 0;
		usleep(5000);
	} while (now_ms() < end);
	return -ETIMEDOUT;
}

int hostile_wait(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
	long end = now_ms() + timeout_ms;

	while (!cond(arg)) {
		if (now_ms() >= end)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return 0;
}

int32_t hostile_ring1(struct kvmm_ring *ring)
{
	struct kvmm_cqe *cqe;
	int32_t res;

	if (kvmm_submit_and_wait(ring, 1) != 1 || kvmm_wait_cqe(ring, &cqe))
		return INT32_MIN;
	res = cqe->res;
	kvmm_cqe_seen(ring, cqe);
	return res;
}

struct kvmm_sqe *hostile_sqe(struct kvmm_ring *ring)
{
	struct kvmm_sqe *sqe = kvmm_get_sqe(ring);

	if (!sqe)
		_exit(99);
	return sqe;
}

bool hostile_alive(pid_t pid)
{
	siginfo_t si = { 0 };

	/* WNOWAIT: look without reaping, so hostile_reap() still can */
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT))
		return false;
	return si.si_pid == 0;
}

uint64_t hostile_rss_anon(pid_t pid)
{
	char path[64], line[256];
	unsigned long kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %lu kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}
