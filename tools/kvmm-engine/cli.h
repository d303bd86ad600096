/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmm-engine/cli.h - private to kvmm-engine's program files
 * (main.c, args.c, report.c): the options as read, and the reports.
 */
#ifndef KVMM_ENGINE_CLI_H
#define KVMM_ENGINE_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"

/**
 * struct cli - kvmm-engine's command line, as read by cli_parse()
 * @o: the engine's options
 * @gen: the generator's, when neither @workload nor @trace is given
 * @workload: --workload FILE, or NULL
 * @trace: --trace FILE (Mooncake), or NULL
 * @json: --json FILE ("-" for standard output), or NULL
 * @plot: --plot DIR, or NULL
 * @device_mem: --device-mem in bytes, 0 if not given
 * @compare: --compare: a --no-cache run beside the cached one
 * @quiet: --quiet: no summary
 */
struct cli {
	struct eng_opts o;
	struct wl_gen gen;
	const char *workload, *trace, *json, *plot;
	uint64_t device_mem;
	bool compare;
	bool quiet;
};

/* args.c */
extern const char *const cli_policy_names[ENG_PRIORITY + 1];
void cli_parse(int argc, char **argv, struct cli *c);

/* report.c */
void report_summary(FILE *out, const struct cli *c, const char *input,
		    const struct eng_report *r, const struct eng_report *nc);
int report_json(const struct cli *c, const char *input, const struct eng_report *r,
		const struct eng_report *nc);
int report_plots(const struct cli *c, const char *input, const struct workload *wl,
		 const struct eng_report *r, const struct eng_report *nc);

#endif
