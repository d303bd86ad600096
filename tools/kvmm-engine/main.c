// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/main.c - kvmm-engine: the reference engine.  Reads or
 * generates traffic, serves it through kvmm (engine.c), and reports what
 * the prefix cache bought (report.c): a summary, --json, --compare against
 * --no-cache, and --plot pictures drawn by gnuplot.  The options are read
 * in args.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *tool_name = "kvmm-engine";

/* ---- main ---- */

static int load_input(struct cli *c, struct workload *wl, char *desc, size_t len)
{
	int ret;

	if (c->workload) {
		ret = workload_load(c->workload, wl);
		snprintf(desc, len, "workload %s", c->workload);
	} else if (c->trace) {
		ret = workload_load_mooncake(c->trace, wl);
		snprintf(desc, len, "mooncake trace %s", c->trace);
	} else {
		ret = workload_generate(&c->gen, wl);
		if (ret)
			fprintf(stderr, "%s: cannot generate the workload: %s\n", tool_name,
				strerror(-ret));
		snprintf(desc, len, "generated (seed %llu, %.2f sessions/s)",
			 (unsigned long long)c->gen.seed, c->gen.rate);
	}
	if (!ret) {
		size_t n = strlen(desc);

		snprintf(desc + n, len - n, ": %u requests, %llu prompt tokens, %llu output tokens",
			 wl->nreq, (unsigned long long)wl->prompt_tokens,
			 (unsigned long long)wl->output_tokens);
	}
	return ret;
}

int main(int argc, char **argv)
{
	struct cli c = { .gen = { .seed = 20261122, .requests = 2000, .rate = 2 } };
	struct eng_report r, nc;
	struct workload wl;
	char desc[8192];
	FILE *out;
	int ret;

	eng_opts_default(&c.o);
	cli_parse(argc, argv, &c);
	if (load_input(&c, &wl, desc, sizeof(desc)))
		return 1;
	ret = eng_run(&wl, &c.o, &r);
	if (ret) {
		if (ret != -ENOSPC)
			fprintf(stderr, "%s: %s\n", tool_name, strerror(-ret));
		workload_free(&wl);
		return 1;
	}
	if (c.compare) {
		struct eng_opts o = c.o;

		o.no_cache = true;
		ret = eng_run(&wl, &o, &nc);
		if (ret) {
			fprintf(stderr, "%s: the --no-cache run: %s\n", tool_name, strerror(-ret));
			eng_report_free(&r);
			workload_free(&wl);
			return 1;
		}
	}
	/* --json - keeps standard output for JSON alone (for | jq) */
	out = c.json && !strcmp(c.json, "-") ? stderr : stdout;
	if (!c.quiet)
		report_summary(out, &c, desc, &r, c.compare ? &nc : NULL);
	if (c.json)
		ret = report_json(&c, desc, &r, c.compare ? &nc : NULL);
	if (!ret && c.plot) {
		ret = report_plots(&c, desc, &wl, &r, c.compare ? &nc : NULL);
		if (!ret && !c.quiet)
			fprintf(out, "  plots: %s/{hit_rate,pages,ttft,sweep}.svg\n", c.plot);
	}
	if (c.compare)
		eng_report_free(&nc);
	eng_report_free(&r);
	workload_free(&wl);
	return ret ? 1 : 0;
}
