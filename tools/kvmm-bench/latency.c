// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/latency.c - kvmm-bench latency: how long ring commands
 * that do no I/O take while the NVMe tier is written flat out, against
 * the same commands with no writeback in flight.
 *
 * A context with device, host and NVMe tiers is served in this process
 * (kvmm_server_start()).  A probe client times, one command at a time
 * (clock reads around submit and wait), a MATCH of a pinned prefix
 * cached on the device, an EXTEND of one page that may not reclaim
 * (KVMM_EXTEND_NORECLAIM | KVMM_EXTEND_RESERVE) and a STATS.  Phases
 * alternate: idle (no other client, no writeback in flight) and busy (a
 * second client on its own thread commits new prefixes flat out, so
 * reclaim demotes device pages to the host tier and background reclaim
 * writes host pages down to NVMe all the time).  The busy phase's STATS
 * probes read host_pages_writeback, to show the writes were in flight.
 *
 * Before background reclaim, a command whose allocation reclaimed waited
 * for the NVMe write; now no command waits for the disk, and a probe
 * waits at most for another client's command to give up the lock.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define LAT_PAGE_SIZE	16
#define LAT_PREFIX	256		/* tokens of a prefix: the probe's and each pushed one */
#define LAT_STATS_OFF	4096		/* where in a ring's data area STATS output goes */
#define LAT_BUF_SIZE	8192
#define LAT_QUIET_NS	(30 * 1000000000ull)	/* longest wait for writeback to settle
						 * (or start): a shared disk, a
						 * sanitizer build are slow */

enum { OP_MATCH, OP_EXTEND, OP_STATS, NR_OPS };
enum { PH_IDLE, PH_BUSY, NR_PHASES };

static const char *const op_names[NR_OPS] = { "match", "extend", "stats" };
static const char *const phase_names[NR_PHASES] = { "idle", "busy" };

/* 2 layers of 2 KV heads of 128, bf16: 2 KiB a token, 32 KiB a page. */
static const struct kvmm_model lat_model = {
	.layers = 2, .kv_heads = 2, .head_dim = 128, .dtype_bytes = 2,
	.attn = KVMM_ATTN_MHA,
};

/**
 * struct lat_opts - what kvmm-bench latency was asked for
 * @nvme_file: the NVMe tier's file, recreated for the run and removed after
 * @rounds: idle and busy phases, alternating, this many each
 * @phase_ms: how long each phase probes
 * @no_nvme: no NVMe tier: the busy phase's load without its writes (a control)
 * @json: JSON lines, not text
 */
struct lat_opts {
	const char *nvme_file;
	uint32_t rounds;
	uint32_t phase_ms;
	bool no_nvme;
	bool json;
};

/**
 * struct lat_samples - round trips of one op in one phase, in ns
 * @v: the samples
 * @n: how many
 * @cap: room in @v
 */
struct lat_samples {
	uint64_t *v;
	size_t n, cap;
};

/**
 * struct lat_wb - what writeback did in one phase kind, over all rounds
 * @runs: writeback jobs started (writeback_runs grew by this)
 * @nvme_bytes: bytes written to the NVMe tier
 * @stats_seen: STATS probes that found host pages being written down
 */
struct lat_wb {
	uint64_t runs;
	uint64_t nvme_bytes;
	uint64_t stats_seen;
};

/**
 * struct lat_probe - the timing client
 * @ring: its ring; the prefix's tokens at 0, STATS output at LAT_STATS_OFF
 * @seq: its sequence
 * @s: samples per phase and op
 * @wb: writeback per phase
 * @failed: probes whose command failed or found less than the prefix
 */
struct lat_probe {
	struct kvmm_ring ring;
	uint32_t seq;
	struct lat_samples s[NR_PHASES][NR_OPS];
	struct lat_wb wb[NR_PHASES];
	uint64_t failed;
};

/**
 * struct lat_pusher - the client that keeps the NVMe tier busy
 * @ring: its ring; each new prefix's tokens at 0
 * @seq: its sequence
 * @thread: the thread driving @ring during a busy phase
 * @stop: set to end the phase
 * @prefixes: prefixes committed, over all busy phases
 * @err: the first command that failed, or 0
 */
struct lat_pusher {
	struct kvmm_ring ring;
	uint32_t seq;
	pthread_t thread;
	atomic_bool stop;
	uint64_t prefixes;
	int err;
};

static int samples_add(struct lat_samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 4096;
		uint64_t *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = ns;
	return 0;
}

/* The @q quantile of @s in µs (nearest rank); sorts @s. */
static double samples_us(struct lat_samples *s, double q)
{
	size_t k;

	if (!s->n)
		return 0;
	sort_u64(s->v, s->n);
	k = (size_t)(q * (double)s->n + 0.999999);
	return (double)s->v[k ? k - 1 : 0] / 1e3;
}

/* Open a sequence through @ring into @seq. */
static int lat_open(struct kvmm_ring *ring, uint32_t *seq)
{
	struct kvmm_sqe *sqe;
	int32_t res;
	int ret = ring_sqe(ring, &sqe);

	if (ret)
		return ret;
	kvmm_prep_open(sqe, 0);
	ret = ring_run(ring, 1, &res);
	if (ret)
		return ret;
	if (res < 0)
		return res;
	*seq = (uint32_t)res;
	return 0;
}

/* Prepare @n entries of @ring at once. */
static int lat_sqes(struct kvmm_ring *ring, struct kvmm_sqe **sqe, uint32_t n)
{
	uint32_t i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = ring_sqe(ring, &sqe[i]);
		if (ret)
			return ret;
	}
	return 0;
}

/* Cache the @n tokens at the start of @seq's ring's data area; empty @seq again. */
static int lat_commit(struct kvmm_ring *ring, uint32_t seq, uint32_t n)
{
	struct kvmm_sqe *sqe[3];
	int ret = lat_sqes(ring, sqe, 3);

	if (ret)
		return ret;
	kvmm_prep_extend(sqe[0], seq, n, 0);
	kvmm_prep_commit(sqe[1], seq, 0, 0, n);
	kvmm_prep_retract(sqe[2], seq, 0, 0, 0);
	return ring_run(ring, 3, NULL);
}

/* One new prefix, shared with nothing cached, committed through @pu's ring. */
static int pusher_step(struct lat_pusher *pu)
{
	uint32_t *tok = pu->ring.buf, i;

	for (i = 0; i < LAT_PREFIX; i++)
		tok[i] = (uint32_t)(pu->prefixes * LAT_PREFIX + i) | 0x80000000u;
	pu->prefixes++;
	return lat_commit(&pu->ring, pu->seq, LAT_PREFIX);
}

static void *pusher_thread(void *arg)
{
	struct lat_pusher *pu = arg;

	while (!atomic_load_explicit(&pu->stop, memory_order_relaxed) && !pu->err)
		pu->err = pusher_step(pu);
	return NULL;
}

/* Time one command through @ring; its result in @res. */
static int lat_time(struct kvmm_ring *ring, int32_t *res, uint64_t *ns)
{
	uint64_t t0 = now_ns();
	int ret = ring_run(ring, 1, res);

	*ns = now_ns() - t0;
	return ret;
}

/* Undo a probe's MATCH or EXTEND (not timed). */
static int probe_retract(struct lat_probe *pr)
{
	struct kvmm_sqe *sqe;
	int ret = ring_sqe(&pr->ring, &sqe);

	if (ret)
		return ret;
	kvmm_prep_retract(sqe, pr->seq, 0, 0, 0);
	return ring_run(&pr->ring, 1, NULL);
}

/* The STATS values of @pr's last STATS probe. */
static const uint64_t *probe_stats_vals(const struct lat_probe *pr)
{
	return (const uint64_t *)((const char *)pr->ring.buf + LAT_STATS_OFF +
				  sizeof(struct kvmm_stats_snap));
}

/* Prepare probe @op on @sqe: what it expects back in @want (-1: anything >= 0). */
static void probe_prep(struct lat_probe *pr, int op, struct kvmm_sqe *sqe, int32_t *want)
{
	*want = -1;
	switch (op) {
	case OP_MATCH:
		kvmm_prep_match(sqe, pr->seq, 0, 0, LAT_PREFIX);
		*want = LAT_PREFIX;
		break;
	case OP_EXTEND:
		kvmm_prep_extend(sqe, pr->seq, LAT_PAGE_SIZE,
				 KVMM_EXTEND_NORECLAIM | KVMM_EXTEND_RESERVE);
		break;
	default:
		kvmm_prep_stats(sqe, 0, LAT_STATS_OFF, sizeof(struct kvmm_stats_snap) +
				NR_KVMM_STATS * sizeof(uint64_t));
		break;
	}
}

/* Time one probe of @op in @phase, and put the sequence back as it was. */
static int probe_one(struct lat_probe *pr, int phase, int op)
{
	struct kvmm_sqe *sqe;
	int32_t res, want;
	uint64_t ns;
	int ret = ring_sqe(&pr->ring, &sqe);

	if (ret)
		return ret;
	probe_prep(pr, op, sqe, &want);
	ret = lat_time(&pr->ring, &res, &ns);
	if (ret)
		return ret;
	if (res < 0 || (want >= 0 && res != want))
		pr->failed++;
	else
		ret = samples_add(&pr->s[phase][op], ns);
	if (op == OP_STATS && res > KVMM_STAT_HOST_PAGES_WRITEBACK &&
	    probe_stats_vals(pr)[KVMM_STAT_HOST_PAGES_WRITEBACK])
		pr->wb[phase].stats_seen++;
	if (!ret && op != OP_STATS && res >= 0)
		ret = probe_retract(pr);
	return ret;
}

/* One STATS, not timed: @item's value in @val. */
static int probe_stat(struct lat_probe *pr, uint32_t item, uint64_t *val)
{
	struct kvmm_sqe *sqe;
	int32_t want, res;
	int ret = ring_sqe(&pr->ring, &sqe);

	if (ret)
		return ret;
	probe_prep(pr, OP_STATS, sqe, &want);
	ret = ring_run(&pr->ring, 1, &res);
	if (!ret && res <= (int32_t)item)
		ret = res < 0 ? res : -EPROTO;
	if (!ret)
		*val = probe_stats_vals(pr)[item];
	return ret;
}

/*
 * Wait (not timed) until no host page is being written down, and none is
 * about to be: a run that settles can start the next one at once (the host
 * tier still below its low watermark), so quiet is three looks in a row,
 * 2 ms apart, with nothing in flight and no run started since the last.
 */
static int probe_quiet(struct lat_probe *pr)
{
	uint64_t deadline = now_ns() + LAT_QUIET_NS, wb = 1, runs, last = UINT64_MAX;
	uint32_t calm = 0;
	int ret;

	for (;;) {
		ret = probe_stat(pr, KVMM_STAT_HOST_PAGES_WRITEBACK, &wb);
		ret = ret ?: probe_stat(pr, KVMM_STAT_WRITEBACK_RUNS, &runs);
		if (ret)
			return ret;
		calm = !wb && runs == last ? calm + 1 : 0;
		last = runs;
		if (calm == 3)
			return 0;
		if (now_ns() > deadline)
			return -ETIMEDOUT;
		usleep(2000);
	}
}

/* Probe MATCH, EXTEND and STATS in turn for @ms; writeback's share in pr->wb[@phase]. */
static int probe_phase(struct lat_probe *pr, int phase, uint32_t ms)
{
	uint64_t runs0, runs1, in0, in1, end;
	int op, ret;

	ret = probe_stat(pr, KVMM_STAT_WRITEBACK_RUNS, &runs0);
	ret = ret ?: probe_stat(pr, KVMM_STAT_NVME_BYTES_IN, &in0);
	end = now_ns() + (uint64_t)ms * 1000000ull;
	while (!ret && now_ns() < end)
		for (op = 0; op < NR_OPS && !ret; op++)
			ret = probe_one(pr, phase, op);
	ret = ret ?: probe_stat(pr, KVMM_STAT_WRITEBACK_RUNS, &runs1);
	ret = ret ?: probe_stat(pr, KVMM_STAT_NVME_BYTES_IN, &in1);
	if (!ret) {
		pr->wb[phase].runs += runs1 - runs0;
		pr->wb[phase].nvme_bytes += in1 - in0;
	}
	return ret;
}

/* Start @pu and, @wait_wb, wait (not timed) until writeback has started. */
static int busy_start(struct lat_probe *pr, struct lat_pusher *pu, bool wait_wb)
{
	uint64_t runs0, runs = 0, deadline = now_ns() + LAT_QUIET_NS;
	int ret = probe_stat(pr, KVMM_STAT_WRITEBACK_RUNS, &runs0);

	if (ret)
		return ret;
	atomic_store(&pu->stop, false);
	if (pthread_create(&pu->thread, NULL, pusher_thread, pu))
		return -EAGAIN;
	if (!wait_wb)
		return 0;
	while (!ret && runs == runs0 && now_ns() < deadline) {
		usleep(1000);
		ret = probe_stat(pr, KVMM_STAT_WRITEBACK_RUNS, &runs);
	}
	return ret ?: (runs == runs0 ? -ETIMEDOUT : 0);
}

static int busy_stop(struct lat_pusher *pu)
{
	atomic_store(&pu->stop, true);
	pthread_join(pu->thread, NULL);
	return pu->err;
}

/* The idle and busy phases, alternating, @o->rounds each. */
static int lat_rounds(const struct lat_opts *o, struct lat_probe *pr, struct lat_pusher *pu)
{
	uint32_t r;
	int ret = 0;

	for (r = 0; r < o->rounds && !ret; r++) {
		ret = probe_quiet(pr);
		ret = ret ?: probe_phase(pr, PH_IDLE, o->phase_ms);
		if (ret)
			break;
		ret = busy_start(pr, pu, !o->no_nvme);
		if (!ret)
			ret = probe_phase(pr, PH_BUSY, o->phase_ms);
		if (busy_stop(pu) && !ret)
			ret = pu->err;
	}
	return ret;
}

/* The probe's pinned prefix, and both clients' sequences. */
static int lat_setup(struct lat_probe *pr, struct lat_pusher *pu)
{
	uint32_t *tok = pr->ring.buf, i;
	struct kvmm_sqe *sqe;
	int ret;

	for (i = 0; i < LAT_PREFIX; i++)
		tok[i] = i * 7 + 3;
	ret = lat_open(&pr->ring, &pr->seq);
	ret = ret ?: lat_open(&pu->ring, &pu->seq);
	ret = ret ?: lat_commit(&pr->ring, pr->seq, LAT_PREFIX);
	ret = ret ?: ring_sqe(&pr->ring, &sqe);
	if (ret)
		return ret;
	kvmm_prep_pin(sqe, 0, 0, 0, LAT_PREFIX, 0);
	return ring_run(&pr->ring, 1, NULL);
}

static void lat_report_op(const struct lat_opts *o, struct lat_probe *pr, int ph, int op)
{
	struct lat_samples *s = &pr->s[ph][op];
	double p50 = samples_us(s, 0.5), p99 = samples_us(s, 0.99), max = samples_us(s, 1);

	if (!o->json) {
		printf("%-4s %-6s %8zu probes   p50 %8.1f us   p99 %8.1f us   max %9.1f us\n",
		       phase_names[ph], op_names[op], s->n, p50, p99, max);
		return;
	}
	tool_json_line(json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "bench", "latency",
				 "phase", phase_names[ph], "op", op_names[op],
				 "count", tool_json_u64(s->n), "p50_us", tool_json_fixed(p50, 1),
				 "p99_us", tool_json_fixed(p99, 1), "max_us", tool_json_fixed(max, 1)),
		       stdout);
}

/* busy p99 / idle p99 of each op, and the largest of them in @worst. */
static void lat_ratios(struct lat_probe *pr, double *ratio, double *worst)
{
	int op;

	*worst = 0;
	for (op = 0; op < NR_OPS; op++) {
		double idle = samples_us(&pr->s[PH_IDLE][op], 0.99);

		ratio[op] = idle > 0 ? samples_us(&pr->s[PH_BUSY][op], 0.99) / idle : 0;
		if (ratio[op] > *worst)
			*worst = ratio[op];
	}
}

static void lat_summary(const struct lat_opts *o, struct lat_probe *pr,
			const struct lat_pusher *pu)
{
	const struct lat_wb *b = &pr->wb[PH_BUSY];
	double ratio[NR_OPS], worst, busy_stats = (double)pr->s[PH_BUSY][OP_STATS].n;
	double seen = busy_stats > 0 ? (double)b->stats_seen / busy_stats : 0;
	double mib = (double)b->nvme_bytes / (1024.0 * 1024.0);

	lat_ratios(pr, ratio, &worst);
	if (!o->json) {
		printf("busy/idle p99: match %.2fx, extend %.2fx, stats %.2fx (worst %.2fx)\n"
		       "busy phases: %llu writeback runs, %.1f MiB written to NVMe, writeback in "
		       "flight at %.0f%% of STATS probes; idle phases: %llu runs\n",
		       ratio[OP_MATCH], ratio[OP_EXTEND], ratio[OP_STATS], worst,
		       (unsigned long long)b->runs, mib, seen * 100,
		       (unsigned long long)pr->wb[PH_IDLE].runs);
		return;
	}
	tool_json_line(json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:b}",
		"bench", "latency", "phase", "summary",
		"match_p99_ratio", tool_json_fixed(ratio[OP_MATCH], 2),
		"extend_p99_ratio", tool_json_fixed(ratio[OP_EXTEND], 2),
		"stats_p99_ratio", tool_json_fixed(ratio[OP_STATS], 2),
		"worst_p99_ratio", tool_json_fixed(worst, 2),
		"busy_writeback_runs", tool_json_u64(b->runs),
		"busy_nvme_mib", tool_json_fixed(mib, 1),
		"busy_writeback_seen", tool_json_fixed(seen, 3),
		"idle_writeback_runs", tool_json_u64(pr->wb[PH_IDLE].runs),
		"prefixes", tool_json_u64(pu->prefixes), "failed", tool_json_u64(pr->failed),
		"rounds", (json_int_t)o->rounds, "phase_ms", (json_int_t)o->phase_ms,
		"nvme", !o->no_nvme), stdout);
}

static void lat_report(const struct lat_opts *o, struct lat_probe *pr,
		       const struct lat_pusher *pu)
{
	int ph, op;

	for (ph = 0; ph < NR_PHASES; ph++)
		for (op = 0; op < NR_OPS; op++)
			lat_report_op(o, pr, ph, op);
	lat_summary(o, pr, pu);
	fflush(stdout);
}

/* The context: device, host and NVMe tiers, background reclaim on, pages kept free. */
static struct kvmm_params lat_params(const struct lat_opts *o)
{
	struct kvmm_params p = tool_params(LAT_PAGE_SIZE, 512, 16, 4096);

	p.model = lat_model;
	/* free pages the probe's EXTEND takes without reclaiming */
	p.wmark_min = 8;
	p.wmark_low = 32;
	p.wmark_high = 64;
	p.host_pages = 1024;
	if (o->no_nvme)
		return p;
	p.nvme_pages = 8192;
	p.nvme_path = o->nvme_file;
	p.nvme_flags = KVMM_NVME_REFORMAT;
	return p;
}

/* Connect both clients to the server at @sock and run the phases. */
static int lat_clients(const struct lat_opts *o, const char *sock, struct lat_probe *pr,
		       struct lat_pusher *pu)
{
	struct kvmm_ring_params rp = { .sq_entries = 16, .buf_size = LAT_BUF_SIZE };
	int ret;

	ret = kvmm_ring_connect(sock, &rp, &pr->ring);
	if (ret)
		return ret;
	ret = kvmm_ring_connect(sock, &rp, &pu->ring);
	if (!ret) {
		ret = lat_setup(pr, pu);
		ret = ret ?: lat_rounds(o, pr, pu);
		kvmm_ring_exit(&pu->ring);
	}
	kvmm_ring_exit(&pr->ring);
	return ret;
}

/* Serve a fresh context at a socket of our own, run, and check the context after. */
static int lat_run(const struct lat_opts *o, struct lat_probe *pr, struct lat_pusher *pu)
{
	struct kvmm_params p = lat_params(o);
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx;
	char sock[108];
	int ret;

	snprintf(sock, sizeof(sock), "/tmp/kvmm-bench-latency-%d.sock", (int)getpid());
	if (p.nvme_path)	/* every run starts cold */
		unlink(p.nvme_path);
	ret = kvmm_create(&p, &ctx);
	if (ret)
		goto out;
	ret = kvmm_server_start(ctx, sock, 0, &srv);
	if (!ret) {
		ret = lat_clients(o, sock, pr, pu);
		kvmm_server_stop(srv);
		if (!ret && kvmm_check(ctx))
			ret = -EUCLEAN;
	}
	kvmm_destroy(ctx);
out:
	if (p.nvme_path)
		unlink(p.nvme_path);
	return ret;
}

static void lat_usage(FILE *f)
{
	fprintf(f, "usage: kvmm-bench latency [--json] [--quick] [--nvme-file PATH]\n"
		   "                          [--rounds N] [--phase-ms MS] [--no-nvme]\n");
}

static void lat_parse(int argc, char **argv, struct lat_opts *o)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "nvme-file", required_argument, NULL, 'F' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "phase-ms", required_argument, NULL, 'm' },
		{ "no-nvme", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'j': o->json = true; break;
		case 'q': o->rounds = 2; o->phase_ms = 300; break;
		case 'F': o->nvme_file = optarg; break;
		case 'r': o->rounds = (uint32_t)parse_u64("--rounds", optarg); break;
		case 'm': o->phase_ms = (uint32_t)parse_u64("--phase-ms", optarg); break;
		case 'n': o->no_nvme = true; break;
		case 'h': lat_usage(stdout); exit(0);
		default: lat_usage(stderr); exit(2);
		}
	}
	if (!o->rounds || !o->phase_ms || o->rounds > 1000 || o->phase_ms > 600000)
		die_usage("latency: --rounds must be 1..1000 and --phase-ms 1..600000");
}

int cmd_latency(int argc, char **argv)
{
	struct lat_opts o = { .rounds = 5, .phase_ms = 4000 };
	struct lat_probe *pr = calloc(1, sizeof(*pr));
	struct lat_pusher *pu = calloc(1, sizeof(*pu));
	char path[64];
	int ph, op, ret = -ENOMEM;

	snprintf(path, sizeof(path), "/tmp/kvmm-bench-latency-%d.nvme", (int)getpid());
	o.nvme_file = path;
	lat_parse(argc, argv, &o);
	if (pr && pu)
		ret = lat_run(&o, pr, pu);
	if (!ret)
		lat_report(&o, pr, pu);
	else
		fprintf(stderr, "latency: %s\n", strerror(-ret));
	for (ph = 0; pr && ph < NR_PHASES; ph++)
		for (op = 0; op < NR_OPS; op++)
			free(pr->s[ph][op].v);
	free(pr);
	free(pu);
	return ret ? 1 : 0;
}
