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
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/**
 * server_fork() - a kvmm server in a child process
 * @p: the context to create there
 * @path: its socket
 * @flags: KVMM_SERVER_*
 *
 * The child serves until SIGTERM, then stops, runs kvmm_check() and exits
 * 0 only if it passed.  It gets that SIGTERM too when the benchmark dies
 * (PR_SET_PDEATHSIG), even of a crash, so it never outlives its parent
 * holding the parent's output open and its socket bound.
 *
 * Return: the child's pid once it serves, or -1.
 */
pid_t server_fork(const struct kvmm_params *p, const char *path, uint32_t flags)
{
	pid_t parent = getpid(), pid;
	int pfd[2];
	char c = 'e';

	if (pipe(pfd))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		struct kvmm_server *srv = NULL;
		struct kvmm_ctx *ctx = NULL;
		sigset_t set;
		int sig, bad;

		close(pfd[0]);
		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigprocmask(SIG_BLOCK, &set, NULL);
		/* blocked until sigwait(): a parent gone meanwhile still stops us */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
			_exit(2);
		if (!kvmm_create(p, &ctx) && !kvmm_server_start(ctx, path, flags, &srv))
			c = 'k';
		if (write(pfd[1], &c, 1) != 1 || c != 'k')
			_exit(2);
		sigwait(&set, &sig);
		kvmm_server_stop(srv);
		bad = kvmm_check(ctx);
		kvmm_destroy(ctx);
		_exit(bad ? 1 : 0);
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) != 1 || c != 'k') {
		close(pfd[0]);
		waitpid(pid, NULL, 0);
		return -1;
	}
	close(pfd[0]);
	return pid;
}

/* Stop a server_fork() child; 0 when it exited clean. */
int server_reap(pid_t pid)
{
	int status;

	kill(pid, SIGTERM);
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : -1;
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
	pid_t srv;
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
	srv = server_fork(&p, sock, 0);
	if (srv < 0) {
		fprintf(stderr, "ring: cannot start a server\n");
		return 1;
	}
	ret = kvmm_ring_connect(sock, &rp, &ring);
	if (!ret) {
		memcpy(ring.buf, tokens, sizeof(tokens));
		ret = run_suite(&ring, "process", 0, quick);
		kvmm_ring_exit(&ring);
	}
	if (server_reap(srv) && !ret)
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "ring: across processes: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
