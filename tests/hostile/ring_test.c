// SPDX-License-Identifier: MIT
/*
 * tests/hostile/ring_test.c - the ring's own ordering, and what a ring
 * client or a careless operator can do to the processes around a ring:
 *  - a completion is never visible before the submission slot it came
 *    from is free again (io_uring's order), observed instruction by
 *    instruction with ptrace so the test cannot pass by luck;
 *  - absurd pool geometry given to kvmmd is refused with a message
 *    naming the field, not a SIGFPE;
 *  - the server kvmm-bench ring forks dies with the benchmark, and so
 *    does the CPU hog kvmm-bench replay --contend forks.
 */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "../../tools/lib/tools.h"
#include "../helpers.h"
#include "hostile.h"

#define ORDER_SQ	8	/* entries: the SQ is full when the batch goes in */
#define ORDER_STEPS	2000000	/* single-steps before the tracer gives up */

/*
 * The traced side: an in-process ring, its SQ filled to the brim with
 * NOPs, stopped until the tracer is ready, then one kvmm_submit() that
 * runs the dispatcher on this thread.
 */
static void order_tracee(int wfd)
{
	struct kvmm_ring_params rp = { .sq_entries = ORDER_SQ };
	struct kvmm_ring ring;
	struct kvmm_ctx *ctx;
	struct kvmm_sqe *sqe;
	uintptr_t addr;
	int i;

	if (ptrace(PTRACE_TRACEME, 0, NULL, NULL))
		_exit(10);
	ctx = test_ctx(1, 64, 4, 64);
	if (!ctx || kvmm_ring_init(ctx, &rp, &ring))
		_exit(11);
	for (i = 0; i < ORDER_SQ; i++) {
		sqe = kvmm_get_sqe(&ring);
		if (!sqe)
			_exit(12);
		kvmm_prep_nop(sqe);
	}
	if (kvmm_get_sqe(&ring))
		_exit(13);		/* the SQ must be full */
	addr = (uintptr_t)ring.hdr;
	if (write(wfd, &addr, sizeof(addr)) != sizeof(addr))
		_exit(14);
	close(wfd);
	raise(SIGSTOP);
	if (kvmm_submit(&ring) != ORDER_SQ)
		_exit(15);
	kvmm_ring_exit(&ring);
	_exit(kvmm_check(ctx) ? 16 : 0);
}

static int peek_indices(pid_t pid, uintptr_t hdr, uint32_t *sq_head, uint32_t *cq_tail)
{
	struct iovec local[2] = { { sq_head, 4 }, { cq_tail, 4 } };
	struct iovec remote[2] = {
		{ (void *)(hdr + offsetof(struct kvmm_ring_hdr, sq_head)), 4 },
		{ (void *)(hdr + offsetof(struct kvmm_ring_hdr, cq_tail)), 4 },
	};

	return process_vm_readv(pid, local, 2, remote, 2, 0) == 8 ? 0 : -1;
}

/*
 * The tracer: single-step the tracee through its submit and read the
 * ring header's published indices after every instruction.  Every
 * completion is of a NOP taken from the SQ, so at every instant the
 * published sq_head must be at least the published cq_tail.
 * Return: 0 when the order held, 1 when a completion was visible first,
 * 2 + n on a tracing failure.
 */
static int order_tracer(void *arg)
{
	uint32_t sq_head = 0, cq_tail = 0;
	uintptr_t hdr;
	long steps;
	int p[2], st, ret = 0;
	pid_t pid;

	(void)arg;
	if (pipe(p))
		return 2;
	pid = fork();
	if (pid < 0)
		return 3;
	if (!pid) {
		close(p[0]);
		order_tracee(p[1]);
	}
	close(p[1]);
	if (read(p[0], &hdr, sizeof(hdr)) != sizeof(hdr)) {
		waitpid(pid, &st, 0);
		return 4;
	}
	close(p[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st) || WSTOPSIG(st) != SIGSTOP)
		return 5;
	for (steps = 0; steps < ORDER_STEPS; steps++) {
		if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL))
			return 6;
		if (waitpid(pid, &st, 0) != pid)
			return 7;
		if (!WIFSTOPPED(st))
			return 8;	/* exited while we still watched */
		if (peek_indices(pid, hdr, &sq_head, &cq_tail))
			return 9;
		if ((int32_t)(cq_tail - sq_head) > 0) {
			fprintf(stderr, "completion visible first: cq_tail %u, sq_head %u\n",
				cq_tail, sq_head);
			ret = 1;
			break;
		}
		if (sq_head == ORDER_SQ && cq_tail == ORDER_SQ)
			break;
	}
	if (steps == ORDER_STEPS)
		ret = 10;
	if (ptrace(PTRACE_CONT, pid, NULL, NULL))
		kill(pid, SIGKILL);
	if (waitpid(pid, &st, 0) != pid)
		return 11;
	if (!ret && (!WIFEXITED(st) || WEXITSTATUS(st)))
		ret = 12;
	return ret;
}

/* Item 9: sq_head is published before cq_tail, instruction by instruction. */
static void ring_completion_never_visible_before_its_slot_is_free(void)
{
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, order_tracer, NULL, 60000), 0);
}

/* kvmmd with @geom (NULL-terminated flags): refused, exit 1, naming @field. */
static void kvmmd_refuses(const char *const *geom, const char *field)
{
	const char *argv[16] = { "kvmmd", "--socket", NULL };
	char dir[256], sock[300], out[4096];
	int i, n = 3, st;

	CU_ASSERT_EQUAL_FATAL(hostile_tmpdir(dir, sizeof(dir)), 0);
	snprintf(sock, sizeof(sock), "%s/kvmmd.sock", dir);
	argv[2] = sock;
	for (i = 0; geom[i] && n < 15; i++)
		argv[n++] = geom[i];
	argv[n] = NULL;
	st = hostile_run(argv, out, sizeof(out), 10000);
	if (st != 1 || !strstr(out, field))
		fprintf(stderr, "kvmmd %s ...: status %d, output '%s'\n", geom[0], st, out);
	CU_ASSERT_EQUAL(st, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, field));
	unlink(sock);
	CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* Item 2: absurd geometry on kvmmd's command line, as the issue gives it. */
static void kvmmd_absurd_geometry_exits_naming_the_field(void)
{
	static const char *const zero[] = {
		"--kv-heads", "2147483648", "--head-dim", "2147483648",
		"--mem-avail", "1073741824", NULL,
	};
	static const char *const small[] = {
		"--kv-heads", "3340214413", "--head-dim", "2761311370",
		"--dtype-bytes", "1", NULL,
	};
	static const char *const layers[] = { "--layers", "4294967295", NULL };

	kvmmd_refuses(zero, "kv_heads");	/* was SIGFPE: exit 136 */
	kvmmd_refuses(small, "head_dim");	/* was accepted and served */
	kvmmd_refuses(layers, "layers");
}

/* The one child of @parent (its pid), or -1: a scan of /proc/N/stat. */
static pid_t child_of(pid_t parent)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = -1;

	while (d && (de = readdir(d))) {
		char path[300], buf[512], *rp;
		int ppid = 0;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f) && (rp = strrchr(buf, ')')) &&
		    sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == parent)
			found = atoi(de->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * SIGKILL @bench (a crash) and give its child @orphan, now ours as the
 * subreaper's, 10 s to go.  Return: 0 when it went, 1 when it outlived
 * the benchmark (it is killed then).
 */
static int orphan_goes(pid_t bench, pid_t orphan, const char *what)
{
	kill(bench, SIGKILL);
	hostile_reap(bench, 10000);
	if (hostile_reap(orphan, 10000) != -ETIMEDOUT)
		return 0;
	fprintf(stderr, "kvmm-bench's %s %d outlived it\n", what, (int)orphan);
	kill(orphan, SIGKILL);
	hostile_reap(orphan, 10000);
	return 1;
}

/*
 * As a subreaper, so that the benchmark's orphaned server is ours to
 * reap: start kvmm-bench ring, wait until its forked server listens,
 * SIGKILL the benchmark (a crash), and give the server 10 s to go.
 * Return: 0 when it went, 1 when it outlived its parent, 2 + n otherwise.
 */
static int bench_orphan(void *arg)
{
	const char *argv[] = { "kvmm-bench", "ring", "--quick", NULL };
	char sock[108];
	pid_t bench, srv;
	int ret = 0;

	(void)arg;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1))
		return 2;
	bench = hostile_spawn(argv, -1);
	if (bench < 0)
		return 3;
	snprintf(sock, sizeof(sock), "/tmp/kvmm-bench-ring-%d.sock", (int)bench);
	if (hostile_wait_socket(sock, 120000)) {
		ret = 4;
		goto out_bench;
	}
	srv = child_of(bench);
	if (srv < 0) {
		ret = 5;
		goto out_bench;
	}
	ret = orphan_goes(bench, srv, "ring server");
	unlink(sock);
	return ret;

out_bench:
	kill(bench, SIGKILL);
	hostile_reap(bench, 10000);
	srv = child_of(getpid());	/* a server orphaned meanwhile */
	if (srv > 0) {
		kill(srv, SIGKILL);
		hostile_reap(srv, 10000);
	}
	unlink(sock);
	return ret;
}

/* Item 9: the server kvmm-bench ring forks dies with the benchmark. */
static void bench_ring_server_dies_with_its_parent(void)
{
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, bench_orphan, NULL, 180000), 0);
}

/* A workload of one request: eight prompt tokens, four out. */
static const char tiny_workload[] =
	"M capacity_tokens 64\nM max_inflight 2\nM max_seq_len 16\n"
	"S 0 system 8 1 2 3 4 5 6 7 8\nS 1 output 4 9 10 11 12\n"
	"R 0 0 0 0 -1 8 1 4 1 0\n";

/*
 * As a subreaper: kvmm-bench replay --contend on a CPU it may use, with
 * repeats enough to last minutes, until its contender (its one child)
 * runs; SIGKILL the benchmark and give the contender 10 s to go.
 * Return: 0 when it went, 1 when it outlived its parent, 2 + n otherwise.
 */
static int contender_orphan(void *arg)
{
	char path[] = "/tmp/kvmm-contend-XXXXXX", cpu[16];
	const char *argv[] = { "kvmm-bench", "replay", "--workload", path, "--repeat",
			       "10000000", "--contend", cpu, NULL };
	int fd = mkstemp(path), i, ret;
	pid_t bench, hog = -1;
	cpu_set_t set;

	(void)arg;
	if (fd < 0 || write(fd, tiny_workload, sizeof(tiny_workload) - 1) < 0 || close(fd))
		return 2;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) || sched_getaffinity(0, sizeof(set), &set))
		return 3;
	for (i = 0; i < CPU_SETSIZE && !CPU_ISSET(i, &set); i++)
		;
	snprintf(cpu, sizeof(cpu), "%d", i);
	bench = hostile_spawn(argv, -1);
	if (bench < 0)
		return 4;
	for (i = 0; i < 10000 && hog < 0; i++) {
		usleep(1000);
		hog = child_of(bench);
	}
	if (hog < 0) {
		kill(bench, SIGKILL);
		hostile_reap(bench, 10000);
		ret = 5;
	} else {
		ret = orphan_goes(bench, hog, "contender");
	}
	unlink(path);
	return ret;
}

/*
 * kvmm-bench replay --contend: a CPU this process may not use is a usage
 * error (exit 2); the hog it starts dies with the benchmark, however the
 * benchmark ends.
 */
static void bench_contender_dies_with_its_parent(void)
{
	const char *bad[] = { "kvmm-bench", "replay", "--workload", "/dev/null", "--contend",
			      "100000", NULL };
	char out[512];

	CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), 10000), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "--contend"));
	CU_ASSERT_EQUAL(hostile_child((uid_t)-1, contender_orphan, NULL, 60000), 0);
}

/*
 * kvmm-bench ratio: a line per page size and load, each JSON with the
 * medians and the ratio, for a workload of one request; options that
 * name nothing are usage errors (exit 2) saying which; a workload it
 * cannot read is exit 1.
 */
static void bench_ratio_prints_both_loads_and_refuses_bad_options(void)
{
	static const char *const bad[][3] = {
		{ "--rounds", "0", "--rounds" },
		{ "--rounds", "65", "--rounds" },
		{ "--repeat", "0", "--repeat" },
		{ "--page-size", "3", "--page-size" },
		{ "--contend", "100000", "--contend" },
	};
	char path[] = "/tmp/kvmm-ratio-XXXXXX", cpu[16];
	const char *argv[] = { "kvmm-bench", "ratio", "--workload", path, "--rounds", "1",
			       "--repeat", "1", "--contend", cpu, "--json", NULL };
	static char out[4096];
	const char *loads[] = { "quiet", "contended" };
	char *line, *save = NULL;
	unsigned n = 0, i;
	json_error_t err;
	cpu_set_t set;
	int fd = mkstemp(path);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(write(fd, tiny_workload, sizeof(tiny_workload) - 1) > 0);
	close(fd);
	CU_ASSERT_FATAL(!sched_getaffinity(0, sizeof(set), &set));
	for (i = 0; i < CPU_SETSIZE && !CPU_ISSET(i, &set); i++)
		;
	snprintf(cpu, sizeof(cpu), "%u", i);
	CU_ASSERT_EQUAL(hostile_run(argv, out, sizeof(out), 60000), 0);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
		json_t *j = json_loads(line, 0, &err);

		CU_ASSERT_PTR_NOT_NULL_FATAL(j);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "bench")), "ratio");
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "page_size")),
				n < 2 ? 1 : 16);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "load")),
				       loads[n % 2]);
		CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "contend")),
				n % 2 ? (json_int_t)i : -1);
		CU_ASSERT(json_number_value(json_object_get(j, "direct_us")) > 0);
		CU_ASSERT(json_number_value(json_object_get(j, "remote_us")) > 0);
		CU_ASSERT(json_number_value(json_object_get(j, "remote_over_direct")) > 0);
		json_decref(j);
	}
	CU_ASSERT_EQUAL(n, 4);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *a[] = { "kvmm-bench", "ratio", "--workload", path, bad[i][0],
				    bad[i][1], NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), 10000), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i][2]));
	}
	{
		const char *a[] = { "kvmm-bench", "ratio", NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), 10000), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--workload"));
	}
	unlink(path);
	{
		const char *a[] = { "kvmm-bench", "ratio", "--workload", path, NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), 10000), 1);
	}
}

/*
 * A workload with both sharing and eviction, in the shared benchmark's
 * text form: two system prompts, eight conversations of two turns (the
 * second's prompt is the first's prompt, its output and a new user turn),
 * three in flight, a pool that holds a few prompts.
 */
static int write_chat_workload(char *path)
{
	FILE *f;
	int fd = mkstemp(path), c, t, seg = 2, req = 0;
	int first[8];
	uint32_t i;

	if (fd < 0 || !(f = fdopen(fd, "w")))
		return -1;
	fprintf(f, "M capacity_tokens 200\nM max_inflight 3\nM max_seq_len 128\n");
	for (i = 0; i < 2; i++) {
		fprintf(f, "S %u system %u", i, 24 - 8 * i);
		for (c = 0; c < 24 - 8 * (int)i; c++)
			fprintf(f, " %u", 1000 * (i + 1) + c);
		fprintf(f, "\n");
	}
	for (t = 0; t < 2; t++) {
		for (c = 0; c < 8; c++, req++) {
			int sys = c % 3 ? 0 : 1, u = seg++, o = seg++, len = 6 + c + 2 * t;
			int sys_len = 24 - 8 * sys, j;

			fprintf(f, "S %d user %d", u, len);
			for (j = 0; j < len; j++)
				fprintf(f, " %d", 10000 * (u + 1) + j);
			fprintf(f, "\nS %d output 6", o);
			for (j = 0; j < 6; j++)
				fprintf(f, " %d", 10000 * (o + 1) + j);
			if (!t) {
				fprintf(f, "\nR %d %d %d 0 -1 %d %d 6 2 %d %d\n", req, req, c,
					sys_len + len, o, sys, u);
				first[c] = req;
			} else {
				int p = first[c];
				int plen = sys_len + (6 + c) + 6 + len;

				fprintf(f, "\nR %d %d %d 1 %d %d %d 6 4 %d %d %d %d\n", req, req, c,
					p, plen, o, sys, 2 + 2 * p, 3 + 2 * p, u);
			}
		}
	}
	return fclose(f) ? -1 : 0;
}

/* kvmm-bench replay --json of @path with @extra options: its JSON, or NULL. */
static json_t *replay_json(const char *path, const char *ps, const char *const extra[])
{
	const char *argv[16] = { "kvmm-bench", "replay", "--workload", path, "--page-size", ps,
				 "--json" };
	static char out[4096];
	json_error_t err;
	int n = 7, ret;

	while (*extra)
		argv[n++] = *extra++;
	argv[n] = NULL;
	ret = hostile_run(argv, out, sizeof(out), 60000);
	if (ret) {
		fprintf(stderr, "kvmm-bench replay exit %d: %s\n", ret, out);
		return NULL;
	}
	return json_loads(out, 0, &err);
}

static json_int_t jint(json_t *j, const char *key)
{
	return json_integer_value(json_object_get(j, key));
}

/*
 * kvmm-bench replay --batch: through a ring, the commands of up to N
 * requests go as one batch; the cache sees the direct replay's commands
 * in the same order, so every count is the direct replay's, in-process
 * and across processes, whatever N (more than the requests in flight
 * is that many: the tokens' slots come round again after them).  A
 * batch of 0 is a usage error, for replay and ratio.
 */
static void bench_replay_batches_give_the_direct_counts(void)
{
	static const char *const vias[][5] = {
		{ "--via", "ring", "--batch", "1", NULL },
		{ "--via", "ring", "--batch", "3", NULL },
		{ "--via", "remote", "--batch", "1", NULL },
		{ "--via", "remote", "--batch", "2", NULL },
		{ "--via", "remote", "--batch", "3", NULL },
		{ "--via", "remote", "--batch", "100", NULL },
	};
	static const json_int_t batch[] = { 1, 3, 1, 2, 3, 3 };
	static const char *const direct[] = { NULL };
	const char *ps[] = { "1", "4" };
	char path[] = "/tmp/kvmm-chat-XXXXXX", out[512];
	uint32_t p, i;

	CU_ASSERT_EQUAL_FATAL(write_chat_workload(path), 0);
	for (p = 0; p < 2; p++) {
		json_t *d = replay_json(path, ps[p], direct);

		CU_ASSERT_PTR_NOT_NULL(d);
		if (!d)
			break;
		CU_ASSERT(json_is_true(json_object_get(d, "accounting_ok")));
		CU_ASSERT(jint(d, "matched_tokens") > 0);	/* sharing */
		CU_ASSERT(jint(d, "evicted_tokens") > 0);	/* and eviction */
		for (i = 0; i < sizeof(vias) / sizeof(vias[0]); i++) {
			json_t *r = replay_json(path, ps[p], vias[i]);

			CU_ASSERT_PTR_NOT_NULL(r);
			if (!r)
				continue;
			CU_ASSERT(json_is_true(json_object_get(r, "accounting_ok")));
			CU_ASSERT_EQUAL(jint(r, "batch"), batch[i]);
			CU_ASSERT_EQUAL(jint(r, "matched_tokens"), jint(d, "matched_tokens"));
			CU_ASSERT_EQUAL(jint(r, "evicted_tokens"), jint(d, "evicted_tokens"));
			CU_ASSERT_EQUAL(jint(r, "requests"), 16);
			json_decref(r);
		}
		json_decref(d);
	}
	{
		const char *a[] = { "kvmm-bench", "replay", "--workload", path, "--batch", "0",
				    NULL };
		const char *b[] = { "kvmm-bench", "ratio", "--workload", path, "--batch", "0",
				    NULL };

		CU_ASSERT_EQUAL(hostile_run(a, out, sizeof(out), 10000), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--batch"));
		CU_ASSERT_EQUAL(hostile_run(b, out, sizeof(out), 10000), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "--batch"));
	}
	unlink(path);
}

/*
 * ring_sqe(), the tools' kvmm_get_sqe() that never hands out NULL: a full
 * SQ of the caller's own unsubmitted entries is -ENOSPC at once; one of
 * submitted entries the dispatcher cannot take (the CQ is full) is -EBUSY
 * after its wait; after reaping, there is room again.
 */
static void ring_sqe_full_sq_fails_instead_of_null(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .cq_entries = 4 };
	struct kvmm_ctx *ctx = test_ctx(1, 16, 2, 16);
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	struct kvmm_cqe *cqe;
	int i;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_init(ctx, &rp, &ring), 0);
	for (i = 0; i < 4; i++) {
		CU_ASSERT_EQUAL_FATAL(ring_sqe(&ring, &sqe), 0);
		kvmm_prep_nop(sqe);
	}
	CU_ASSERT_EQUAL(ring_sqe(&ring, &sqe), -ENOSPC);
	CU_ASSERT_PTR_NULL(sqe);
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 4);		/* the CQ is now full */
	for (i = 0; i < 4; i++) {
		CU_ASSERT_EQUAL_FATAL(ring_sqe(&ring, &sqe), 0);
		kvmm_prep_nop(sqe);
	}
	CU_ASSERT_EQUAL(kvmm_submit(&ring), 4);		/* not taken: no CQ room */
	CU_ASSERT_EQUAL(ring_sqe(&ring, &sqe), -EBUSY);
	for (i = 0; i < 8; i++) {
		CU_ASSERT_EQUAL_FATAL(kvmm_wait_cqe(&ring, &cqe), 0);
		CU_ASSERT_EQUAL(cqe->res, 0);
		kvmm_cqe_seen(&ring, cqe);
		if (i == 3)
			CU_ASSERT_EQUAL(kvmm_submit_and_wait(&ring, 4), 0);
	}
	CU_ASSERT_EQUAL(ring_sqe(&ring, &sqe), 0);
	kvmm_ring_exit(&ring);
	CHECK_OK(ctx);
	kvmm_destroy(ctx);
}

int register_hostile_ring_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_ring", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, ring_completion_never_visible_before_its_slot_is_free);
	ADD_TEST(s, kvmmd_absurd_geometry_exits_naming_the_field);
	ADD_TEST(s, bench_ring_server_dies_with_its_parent);
	ADD_TEST(s, bench_contender_dies_with_its_parent);
	ADD_TEST(s, ring_sqe_full_sq_fails_instead_of_null);
	ADD_TEST(s, bench_ratio_prints_both_loads_and_refuses_bad_options);
	ADD_TEST(s, bench_replay_batches_give_the_direct_counts);
	return 0;
}
