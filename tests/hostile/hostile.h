/* SPDX-License-Identifier: MIT */
/*
 * tests/hostile/hostile.h - what the hostile-client suites share: run a
 * piece of code in a child process (as another uid if asked) under a
 * deadline, start the built kvmmd and kvmmctl, and wait for a socket.
 *
 * An attack runs in a child so that whatever it does to itself (a crash,
 * a hang, a dropped privilege) stays there; the parent then checks the
 * victim is alive and kvmm_check() holds.
 */
#ifndef KVMM_TESTS_HOSTILE_H
#define KVMM_TESTS_HOSTILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kvmm_ring;
struct kvmm_sqe;

#define HOSTILE_NOBODY	65534u		/* the uid attacks drop to */

/*
 * hostile_child() - run @fn(@arg) in a forked child, as @uid (and gid)
 * unless @uid is (uid_t)-1, for at most @timeout_ms.
 * Return: the child's exit status (0..255); 128 + signal when it died of
 * one (a child past its deadline is killed: 128 + SIGKILL); -errno when
 * it could not be started.
 */
int hostile_child(uid_t uid, int (*fn)(void *arg), void *arg, int timeout_ms);

/* A private directory under /tmp everyone may enter; @buf gets its path. */
int hostile_tmpdir(char *buf, size_t len);

/* The path of a built tool (kvmmd, kvmmctl, ...) beside this test binary. */
const char *hostile_bin(const char *name);

/*
 * hostile_spawn() - start @argv (argv[0] a hostile_bin() name) with
 * standard output and error to /dev/null unless @out_fd >= 0, where both go.
 * Return: the pid, or -errno.
 */
pid_t hostile_spawn(const char *const argv[], int out_fd);

/*
 * hostile_run() - run @argv to the end within @timeout_ms, its output
 * (stdout and stderr together, at most @len - 1 bytes, NUL-terminated) in
 * @out when @out is not NULL.
 * Return: exit status as hostile_child() reports it.
 */
int hostile_run(const char *const argv[], char *out, size_t len, int timeout_ms);

/* Wait up to @timeout_ms for a server to accept at @path.  Return: 0 or -ETIMEDOUT. */
int hostile_wait_socket(const char *path, int timeout_ms);

/*
 * hostile_wait() - look every millisecond, for at most @timeout_ms, until
 * @cond(@arg) holds.  Return: 0, or -ETIMEDOUT.
 */
int hostile_wait(bool (*cond)(void *arg), void *arg, int timeout_ms);

/*
 * hostile_ring1() - one entry's round trip, for children: test_ring1()'s
 * CUnit assertions would jump back into the suite runner in the child.
 * Return: the completion's res; INT32_MIN when none came.
 */
int32_t hostile_ring1(struct kvmm_ring *ring);

/*
 * hostile_sqe() - kvmm_get_sqe() for children, which keep one entry in
 * flight at a time: a full SQ is a bug, and the child exits 99.
 */
struct kvmm_sqe *hostile_sqe(struct kvmm_ring *ring);

/*
 * hostile_reap() - wait up to @timeout_ms for @pid to exit.
 * Return: its status as hostile_child() reports it, or -ETIMEDOUT (still running).
 */
int hostile_reap(pid_t pid, int timeout_ms);

/* Is @pid alive (not exited, not a zombie we could reap)? */
bool hostile_alive(pid_t pid);

/* @pid's anonymous memory now (RssAnon of /proc/PID/status), in KiB; 0 when unknown. */
uint64_t hostile_rss_anon(pid_t pid);

#endif
