// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/ratio.c - kvmm-bench ratio: what a ring to another
 * process costs against the C API, on a quiet machine and with one core
 * kept busy, in one run.
 *
 * Each round replays the workload four times, in this order: direct,
 * through a server in another process (--via remote), then both again
 * while a child spins on --contend's CPU.  Rounds interleave the four, so
 * whatever else the machine does falls on all of them alike; the figure
 * is the median over the rounds of each round's remote/direct ratio
 * (beside the medians of the times themselves).  The replays are those of
 * kvmm-bench replay (replay.c), --repeat times each, their median.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define RATIO_MAX_ROUNDS	64

/*
 * struct ratio_runs - one condition's times, a round each
 * @direct, @remote: µs per request, through the C API and through a ring
 *	to another process
 */
struct ratio_runs {
	double direct[RATIO_MAX_ROUNDS];
	double remote[RATIO_MAX_ROUNDS];
};

/* One replay of @wl via @via, contended on @contend (-1: not): µs per request. */
static int ratio_replay(const struct workload *wl, struct replay_opts o, enum replay_via via,
			int contend, double *us)
{
	struct replay_result res;
	int ret;

	o.via = via;
	o.contend = contend;
	ret = replay_run(wl, &o, &res);
	if (!ret && !res.accounting_ok)
		ret = -EIO;
	*us = res.us_per_request;
	return ret;
}

/* Print one condition of @rounds rounds; the arrays are sorted on the way. */
static void ratio_report(bool json, const struct replay_opts *o, const char *cond,
			 int contend, struct ratio_runs *r, uint32_t rounds)
{
	uint32_t ps = o->page_size;

	double ratio = median_ratio(r->remote, r->direct, rounds);
	double d = median(r->direct, rounds), x = median(r->remote, rounds);

	if (json) {
		tool_json_line(json_pack("{s:s,s:I,s:s,s:i,s:I,s:I,s:o,s:o,s:o}", "bench", "ratio",
					 "page_size", (json_int_t)ps, "load", cond,
					 "contend", contend, "rounds", (json_int_t)rounds,
					 "batch", (json_int_t)o->batch,
					 "direct_us", tool_json_fixed(d, 3),
					 "remote_us", tool_json_fixed(x, 3),
					 "remote_over_direct", tool_json_fixed(ratio, 2)),
			       stdout);
		return;
	}
	printf("page size %-3u %-9s direct %8.3f us  remote %8.3f us  remote/direct %.2fx\n",
	       ps, cond, d, x, ratio);
}

/* @rounds interleaved rounds at page size @o->page_size. */
static int ratio_page_size(const struct workload *wl, const struct replay_opts *o,
			   uint32_t rounds, int cpu, bool json)
{
	struct ratio_runs *quiet = calloc(1, sizeof(*quiet)), *busy = calloc(1, sizeof(*busy));
	uint32_t r;
	int ret = quiet && busy ? 0 : -ENOMEM;

	for (r = 0; !ret && r < rounds; r++) {
		ret = ratio_replay(wl, *o, VIA_DIRECT, -1, &quiet->direct[r]);
		if (!ret)
			ret = ratio_replay(wl, *o, VIA_REMOTE, -1, &quiet->remote[r]);
		if (!ret)
			ret = ratio_replay(wl, *o, VIA_DIRECT, cpu, &busy->direct[r]);
		if (!ret)
			ret = ratio_replay(wl, *o, VIA_REMOTE, cpu, &busy->remote[r]);
	}
	if (!ret) {
		ratio_report(json, o, "quiet", -1, quiet, rounds);
		ratio_report(json, o, "contended", cpu, busy, rounds);
	}
	free(quiet);
	free(busy);
	return ret;
}

static void ratio_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmm-bench ratio --workload FILE [--page-size N]... [--rounds R]\n"
		"                        [--repeat N] [--batch N] [--contend CPU] [--json]\n"
		"  remote/direct time per request of the replay, quiet and with CPU (default 1)\n"
		"  kept busy, R (default 5) interleaved rounds at each page size (default 1 and 16);\n"
		"  through the ring N requests a batch (default %u, as kvmm-bench replay)\n",
		REPLAY_BATCH);
}

int cmd_ratio(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "workload", required_argument, NULL, 'w' },
		{ "page-size", required_argument, NULL, 'p' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "repeat", required_argument, NULL, 'R' },
		{ "batch", required_argument, NULL, 'b' },
		{ "contend", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct replay_opts o = { .repeat = 5, .batch = REPLAY_BATCH, .contend = -1 };
	uint32_t ps[8], nps = 0, rounds = 5, i;
	const char *path = NULL;
	struct workload wl;
	bool json = false;
	uint64_t cpu = 1;
	int opt, ret = 0;

	while ((opt = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (opt) {
		case 'w': path = optarg; break;
		case 'p':
			if (nps == 8)
				die_usage("ratio: at most 8 --page-size");
			ps[nps++] = (uint32_t)parse_u64("--page-size", optarg);
			break;
		case 'r': rounds = (uint32_t)parse_u64("--rounds", optarg); break;
		case 'R': o.repeat = (uint32_t)parse_u64("--repeat", optarg); break;
		case 'b': o.batch = (uint32_t)parse_u64("--batch", optarg); break;
		case 'C': cpu = parse_u64("--contend", optarg); break;
		case 'j': json = true; break;
		case 'h': ratio_usage(stdout); return 0;
		default: ratio_usage(stderr); return 2;
		}
	}
	if (!path)
		die_usage("ratio: --workload FILE is required");
	if (!rounds || rounds > RATIO_MAX_ROUNDS)
		die_usage("ratio: --rounds must be 1 to %d", RATIO_MAX_ROUNDS);
	if (!o.repeat)
		die_usage("ratio: --repeat must be at least 1");
	if (!o.batch)
		die_usage("ratio: --batch must be at least 1");
	if (cpu > INT32_MAX || contender_check((int)cpu))
		die_usage("ratio: --contend must name a CPU this process may run on");
	if (!nps) {
		ps[nps++] = 1;
		ps[nps++] = 16;
	}
	for (i = 0; i < nps; i++)
		if (!ps[i] || (ps[i] & (ps[i] - 1)))
			die_usage("ratio: --page-size must be a power of two");
	if (workload_load(path, &wl))
		return 1;
	for (i = 0; !ret && i < nps; i++) {
		o.page_size = ps[i];
		o.capacity_tokens = wl.capacity_tokens;
		if (o.capacity_tokens < o.page_size) {
			fprintf(stderr, "ratio: the workload's capacity holds no page\n");
			ret = -EINVAL;
			break;
		}
		ret = ratio_page_size(&wl, &o, rounds, (int)cpu, json);
		if (ret)
			fprintf(stderr, "ratio: page size %u: %s\n", ps[i], strerror(-ret));
	}
	workload_free(&wl);
	return ret ? 1 : 0;
}
