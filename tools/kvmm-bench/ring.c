// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/ring.c - kvmm-bench ring: command throughput and
 * round-trip latency of the ring, in-process and across processes (a
 * server in a forked child), batched and one command at a time.
 *
 * NOP measures the ring itself; MATCH a real command (a 1,024-token cached
 * prefix, page size 16; each MATCH is followed by a RETRACT that empties
 * the sequence again, not counted).  Latencies are round trips of a whole
 * batch (one command when the batch is 1), clock reads included.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/*
 * A kvmm server in a child process, which serves one fresh context per
 * session: server_open() creates it and starts serving, server_close()
 * stops, runs kvmm_check() on it and destroys it.  One process serves
 * every session of a run, as kvmmd serves its clients for hours: its heap
 * is warm from the second session on, as a direct replay's is from its
 * second repeat, so repeats compare like with like.
 *
 * The parent drives it over a pipe (one byte a command, one byte an
 * answer); the child leaves when that pipe closes, so it never outlives
 * its parent, even one that crashed.
 */
static void server_child(const struct kvmm_params *p, const char *path, uint32_t flags,
			 int cmd, int ack)
{
	struct kvmm_server *srv = NULL;
	struct kvmm_ctx *ctx = NULL;
	char c;

	signal(SIGPIPE, SIG_IGN);	/* a parent gone: answer nobody, then leave */
	while (read(cmd, &c, 1) == 1) {
		char a = 'e';

		if (c == 'o' && !ctx) {
			if (kvmm_create(p, &ctx))
				ctx = NULL;
			else if (!kvmm_server_start(ctx, path, flags, &srv))
				a = 'k';
			else
				c = 'c';	/* undo the create below */
		} else if (c == 'c' && ctx) {
			kvmm_server_stop(srv);
			if (!kvmm_check(ctx))
				a = 'k';
		}
		if (c == 'c' && ctx) {
			kvmm_destroy(ctx);
			ctx = NULL;
			srv = NULL;
		}
		if (write(ack, &a, 1) != 1)
			break;
	}
	if (ctx) {
		kvmm_server_stop(srv);
		kvmm_destroy(ctx);
	}
	_exit(0);
}

/**
 * server_spawn() - start a child that serves kvmm contexts at @path
 * @s: out
 * @p: the context each session creates
 * @path: its socket
 * @flags: KVMM_SERVER_*
 *
 * Return: 0, or -1 (nothing to clean up).
 */
int server_spawn(struct bench_server *s, const struct kvmm_params *p, const char *path,
		 uint32_t flags)
{
	int cmd[2], ack[2];

	if (pipe(cmd))
		return -1;
	if (pipe(ack)) {
		close(cmd[0]);
		close(cmd[1]);
		return -1;
	}
	fflush(NULL);	/* what is buffered is printed once, by this process */
	s->pid = fork();
	if (!s->pid) {
		close(cmd[1]);
		close(ack[0]);
		server_child(p, path, flags, cmd[0], ack[1]);
	}
	close(cmd[0]);
	close(ack[1]);
	if (s->pid < 0) {
		close(cmd[1]);
		close(ack[0]);
		return -1;
	}
	s->cmd = cmd[1];
	s->ack = ack[0];
	return 0;
}

static int server_ask(struct bench_server *s, char c)
{
	char a;

	if (write(s->cmd, &c, 1) != 1 || read(s->ack, &a, 1) != 1)
		return -1;
	return a == 'k' ? 0 : -1;
}

/* Create a fresh context in the child and serve it; 0 once it serves. */
int server_open(struct bench_server *s)
{
	return server_ask(s, 'o');
}

/* Stop serving; 0 when the context passed kvmm_check(). */
int server_close(struct bench_server *s)
{
	return server_ask(s, 'c');
}

/* End the child; 0 when it exited. */
int server_reap(struct bench_server *s)
{
	int status;

	close(s->cmd);
	close(s->ack);
	if (waitpid(s->pid, &status, 0) != s->pid)
		return -1;
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : -1;
}

/**
 * contender_check() - may this process run on CPU @cpu?
 * Return: 0, or -EINVAL.
 */
int contender_check(int cpu)
{
	cpu_set_t set;

	if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(set), &set) ||
	    !CPU_ISSET(cpu, &set))
		return -EINVAL;
	return 0;
}

/**
 * contender_start() - a child that spins on CPU @cpu until stopped (or
 *	until this process exits, however it exits), what another process
 *	keeping one core busy does to a benchmark
 * @cpu: a CPU contender_check() accepted
 *
 * Return: its pid, or -1.
 */
pid_t contender_start(int cpu)
{
	volatile uint64_t spins = 0;
	cpu_set_t set;
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		_exit(1);
	for (;;)
		spins++;
}

/* Stop what contender_start() started. */
void contender_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static bool json;

static void report(const char *op, const char *mode, uint32_t batch, double ops_s,
		   uint64_t *lat, uint64_t nlat)
{
	uint64_t p50 = 0, p99 = 0;

	if (nlat) {
		sort_u64(lat, nlat);
		p50 = lat[nlat / 2];
		p99 = lat[nlat * 99 / 100];
	}
	if (json)
		tool_json_line(json_pack("{s:s,s:s,s:s,s:I,s:o,s:I,s:I}", "bench", "ring",
					 "op", op, "mode", mode, "batch", (json_int_t)batch,
					 "ops_per_s", tool_json_fixed(ops_s, 0),
					 "p50_ns", (json_int_t)p50, "p99_ns", (json_int_t)p99),
			       stdout);
	else
		printf("%-6s %-8s batch %-4u %12.0f ops/s   p50 %6llu ns   p99 %6llu ns\n", op,
		       mode, batch, ops_s, (unsigned long long)p50, (unsigned long long)p99);
	fflush(stdout);
}

#define RUNS 5

static int bench_nop(struct kvmm_ring *ring, const char *mode, uint32_t batch, uint64_t total)
{
	double rate[RUNS];
	uint64_t *lat = malloc((total / batch + 1) * sizeof(*lat)), nlat = 0;
	struct kvmm_sqe *sqe;
	int r, ret = 0;

	for (r = 0; r < RUNS; r++) {
		uint64_t done = 0, t0 = now_ns();

		nlat = 0;
		while (done < total) {
			uint64_t t1 = now_ns();
			uint32_t i;

			for (i = 0; i < batch; i++) {
				ret = ring_sqe(ring, &sqe);
				if (ret)
					goto out;
				kvmm_prep_nop(sqe);
			}
			ret = ring_run(ring, batch, NULL);
			if (ret)
				goto out;
			if (lat)
				lat[nlat++] = now_ns() - t1;
			done += batch;
		}
		rate[r] = (double)done * 1e9 / (double)(now_ns() - t0);
	}
	report("nop", mode, batch, median(rate, RUNS), lat, nlat);
out:
	free(lat);
	return ret;
}

/* MATCH on @nseq empty sequences, then RETRACT them; only MATCHes counted. */
static int bench_match(struct kvmm_ring *ring, const char *mode, uint32_t batch,
		       const int32_t *seqs, uint64_t rounds, uint16_t buf)
{
	double rate[RUNS];
	uint64_t *lat = malloc((rounds + 1) * sizeof(*lat)), nlat = 0;
	struct kvmm_sqe *sqe;
	int r, ret = 0;

	for (r = 0; r < RUNS; r++) {
		uint64_t done = 0, tmatch = 0;

		nlat = 0;
		while (done < rounds * batch) {
			uint64_t t1 = now_ns();
			uint32_t i;

			for (i = 0; i < batch; i++) {
				ret = ring_sqe(ring, &sqe);
				if (ret)
					goto out;
				kvmm_prep_match(sqe, (uint32_t)seqs[i], buf, 0, 1024);
			}
			ret = ring_run(ring, batch, NULL);
			if (ret)
				goto out;
			t1 = now_ns() - t1;
			tmatch += t1;
			if (lat)
				lat[nlat++] = t1;
			for (i = 0; i < batch; i++) {
				ret = ring_sqe(ring, &sqe);
				if (ret)
					goto out;
				kvmm_prep_retract(sqe, (uint32_t)seqs[i], 0, 0, 0);
			}
			ret = ring_run(ring, batch, NULL);
			if (ret)
				goto out;
			done += batch;
		}
		rate[r] = (double)done * 1e9 / (double)tmatch;
	}
	report("match", mode, batch, median(rate, RUNS), lat, nlat);
out:
	free(lat);
	return ret;
}

/* Cache the 1,024-token prefix and open @nseq sequences through @ring. */
static int match_setup(struct kvmm_ring *ring, uint16_t buf, int32_t *seqs, uint32_t nseq)
{
	struct kvmm_sqe *sqe[3];
	uint32_t i;
	int32_t seq;
	int ret;

	for (i = 0; i < nseq; i++) {
		ret = ring_sqe(ring, &sqe[0]);
		if (ret)
			return ret;
		kvmm_prep_open(sqe[0], 0);
		ret = ring_run(ring, 1, &seqs[i]);
		if (ret)
			return ret;
		if (seqs[i] < 0)
			return seqs[i];
	}
	seq = seqs[0];
	for (i = 0; i < 3; i++) {
		ret = ring_sqe(ring, &sqe[i]);
		if (ret)
			return ret;
	}
	kvmm_prep_extend(sqe[0], (uint32_t)seq, 1024, 0);
	kvmm_prep_commit(sqe[1], (uint32_t)seq, buf, 0, 1024);
	kvmm_prep_retract(sqe[2], (uint32_t)seq, 0, 0, 0);
	return ring_run(ring, 3, NULL);
}

static int run_suite(struct kvmm_ring *ring, const char *mode, uint16_t buf, bool quick)
{
	int32_t seqs[128];
	int ret;

	ret = bench_nop(ring, mode, 256, quick ? 1u << 20 : 16u << 20);
	if (!ret)
		ret = bench_nop(ring, mode, 1, quick ? 1u << 16 : 1u << 20);
	if (!ret)
		ret = match_setup(ring, buf, seqs, 128);
	if (!ret)
		ret = bench_match(ring, mode, 128, seqs, quick ? 64 : 1024, buf);
	if (!ret)
		ret = bench_match(ring, mode, 1, seqs, quick ? 8192 : 100000, buf);
	return ret;
}

int cmd_ring(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct kvmm_params p = tool_params(16, 4096, 256, 2048);
	struct kvmm_ring_params rp = { .sq_entries = 256, .buf_size = 8192 };
	uint32_t tokens[1024], i;
	struct kvmm_iovec iov = { tokens, sizeof(tokens) };
	struct kvmm_ring ring;
	struct kvmm_ctx *ctx;
	bool quick = false;
	char sock[108];
	struct bench_server srv;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'q': quick = true; break;
		case 'h': printf("usage: kvmm-bench ring [--json] [--quick]\n"); return 0;
		default: return 2;
		}
	}
	for (i = 0; i < 1024; i++)
		tokens[i] = i * 7 + 3;

	/* in-process: the tokens are a registered buffer (index 1) */
	ret = kvmm_create(&p, &ctx);
	if (!ret)
		ret = kvmm_ring_init(ctx, &rp, &ring);
	if (!ret)
		ret = kvmm_ring_register_buffers(&ring, &iov, 1);
	if (!ret)
		ret = run_suite(&ring, "inproc", 1, quick);
	kvmm_ring_exit(&ring);
	kvmm_destroy(ctx);
	if (ret) {
		fprintf(stderr, "ring: in-process: %s\n", strerror(-ret));
		return 1;
	}

	/* across processes: the tokens live in the ring's data area (buffer 0) */
	snprintf(sock, sizeof(sock), "/tmp/kvmm-bench-ring-%d.sock", (int)getpid());
	if (server_spawn(&srv, &p, sock, 0)) {
		fprintf(stderr, "ring: cannot start a server\n");
		return 1;
	}
	ret = server_open(&srv) ? -ECHILD : kvmm_ring_connect(sock, &rp, &ring);
	if (!ret) {
		memcpy(ring.buf, tokens, sizeof(tokens));
		ret = run_suite(&ring, "process", 0, quick);
		kvmm_ring_exit(&ring);
	}
	if ((server_close(&srv) | server_reap(&srv)) && !ret)
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "ring: across processes: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
