// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-engine/report.c - what kvmm-engine says about a run: the
 * summary table (beside the --no-cache run with --compare), --json, and
 * --plot's data files, cache-size sweep and gnuplot pictures.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <libkvmm.h>

#include "cli.h"

/* ---- the summary ---- */

/* Where the summary goes: report_summary()'s @out, for the row helpers. */
static FILE *sum_out;

/* @tokens of @r's prompt tokens, as a share */
static double tier_rate(const struct eng_report *r, uint64_t tokens)
{
	return r->prompt_tokens ? (double)tokens / (double)r->prompt_tokens : 0;
}

static double hit_rate(const struct eng_report *r)
{
	return tier_rate(r, r->cached_tokens);
}

static void row_u(const char *label, uint64_t a, uint64_t b, const void *two)
{
	fprintf(sum_out, "  %-32s %14llu", label, (unsigned long long)a);
	if (two)
		fprintf(sum_out, " %14llu", (unsigned long long)b);
	fputc('\n', sum_out);
}

static void row_f(const char *label, const char *fmt, double a, double b, const void *two)
{
	fprintf(sum_out, "  %-32s ", label);
	fprintf(sum_out, fmt, a);
	if (two) {
		fputc(' ', sum_out);
		fprintf(sum_out, fmt, b);
	}
	fputc('\n', sum_out);
}

/*
 * The lower tiers' rows, each group under what it breaks down: the
 * tokens served from cache that were promoted from each tier, each
 * tier's share of the prompt tokens, then the pages demoted to each.
 */
static void tier_rows(const struct eng_opts *o, const struct eng_report *r,
		      const struct eng_report *nc)
{
	static const char *const name[2] = { "host", "NVMe" };
	uint64_t tok[2] = { r->host_tokens, r->nvme_tokens };
	uint64_t nc_tok[2] = { nc ? nc->host_tokens : 0, nc ? nc->nvme_tokens : 0 };
	uint64_t dem[2] = { r->host_demoted, r->nvme_demoted };
	uint64_t nc_dem[2] = { nc ? nc->host_demoted : 0, nc ? nc->nvme_demoted : 0 };
	bool on[2] = { o->host_pages != 0, o->nvme_pages != 0 };
	char label[64];
	int t;

	for (t = 0; t < 2; t++) {
		if (!on[t])
			continue;
		snprintf(label, sizeof(label), "  of those, promoted from %s", name[t]);
		row_u(label, tok[t], nc_tok[t], nc);
	}
	for (t = 0; t < 2; t++) {
		if (!on[t])
			continue;
		snprintf(label, sizeof(label), "%s tier hit rate", name[t]);
		row_f(label, "%14.4f", tier_rate(r, tok[t]), nc ? tier_rate(nc, nc_tok[t]) : 0, nc);
	}
	for (t = 0; t < 2; t++) {
		if (!on[t])
			continue;
		snprintf(label, sizeof(label), "pages demoted to %s", name[t]);
		row_u(label, dem[t], nc_dem[t], nc);
	}
}

/**
 * report_summary() - print the run's summary, and the --no-cache run's beside it
 * @out: standard output, or standard error when --json - takes standard output
 * @c: the options the runs had
 * @input: what the traffic was, one line
 * @r: the run
 * @nc: the --compare run without the cache, or NULL
 */
void report_summary(FILE *out, const struct cli *c, const char *input,
		    const struct eng_report *r, const struct eng_report *nc)
{
	sum_out = out;
	const struct eng_opts *o = &c->o;
	const struct eng_model *m = &o->model;
	uint64_t pool = (uint64_t)o->device_pages * o->page_size;

	fprintf(sum_out, "kvmm-engine: %s\n", input);
	fprintf(sum_out, "  pool %u pages x %u tokens = %llu tokens (%.2f GiB of KV at %llu B/token); "
	       "evict %s; policy %s; max running %u; prefill budget %u, chunk %u%s\n",
	       o->device_pages, o->page_size, (unsigned long long)pool,
	       (double)pool * (double)eng_model_token_bytes(m) / (1 << 30),
	       (unsigned long long)eng_model_token_bytes(m), o->evict, cli_policy_names[o->policy],
	       o->max_running, o->max_prefill_tokens, o->chunk,
	       o->sequential ? "; sequential" : "");
	if (nc)
		fprintf(sum_out, "  %-32s %14s %14s\n", "", "prefix cache", "no cache");
	row_u("requests completed", r->completed, nc ? nc->completed : 0, nc);
	row_u("prompt tokens", r->prompt_tokens, nc ? nc->prompt_tokens : 0, nc);
	row_u("tokens served from cache", r->cached_tokens, nc ? nc->cached_tokens : 0, nc);
	row_f("hit rate", "%14.4f", hit_rate(r), nc ? hit_rate(nc) : 0, nc);
	tier_rows(o, r, nc);
	if (o->remote) {
		row_u("tokens from the remote tier", r->remote_tokens, 0, nc);
		row_f("  remote hit rate", "%14.4f", tier_rate(r, r->remote_tokens), 0, nc);
		row_u("tokens held there after pushes", r->remote_pushed, 0, nc);
	}
	if (o->host_pages) {
		row_u("promotions refused (recomputed)", r->promote_failed,
		      nc ? nc->promote_failed : 0, nc);
		row_u("tokens prefetched", r->prefetched_tokens, nc ? nc->prefetched_tokens : 0, nc);
		row_u("  of those, matched", r->prefetch_hit_tokens,
		      nc ? nc->prefetch_hit_tokens : 0, nc);
		row_u("pages copied to host", r->host_copied, nc ? nc->host_copied : 0, nc);
	}
	if (o->write_policy == KVMM_WRITE_THROUGH) {
		row_u("  of those, when committed", r->wt_pages, nc ? nc->wt_pages : 0, nc);
		row_u("demoted pages already copied", r->free_demoted,
		      nc ? nc->free_demoted : 0, nc);
	}
	if (o->sequential)
		row_f("block hit rate (512 tokens)", "%14.4f",
		      r->blocks ? (double)r->hit_blocks / (double)r->blocks : 0,
		      nc && nc->blocks ? (double)nc->hit_blocks / (double)nc->blocks : 0, nc);
	row_u("prefill tokens computed", r->prefill_tokens, nc ? nc->prefill_tokens : 0, nc);
	row_u("prefill tokens saved", r->saved_tokens, nc ? nc->saved_tokens : 0, nc);
	row_u("pages evicted", r->evicted_pages, nc ? nc->evicted_pages : 0, nc);
	row_u("retractions", r->retractions, nc ? nc->retractions : 0, nc);
	row_u("steps (prefill + decode)", r->steps, nc ? nc->steps : 0, nc);
	row_u("peak running requests", r->max_running_seen, nc ? nc->max_running_seen : 0, nc);
	row_u("peak pages owned", r->peak_owned, nc ? nc->peak_owned : 0, nc);
	row_u("peak pages cached", r->peak_cached, nc ? nc->peak_cached : 0, nc);
	row_u("peak pages cached, evictable", r->peak_evictable, nc ? nc->peak_evictable : 0, nc);
	row_u("peak pages cached, protected", r->peak_protected, nc ? nc->peak_protected : 0, nc);
	row_u("fewest pages free", r->peak_free_min, nc ? nc->peak_free_min : 0, nc);
	fprintf(sum_out, "  estimated (step-time model: %s, %.0f TFLOP/s x %.2f, %.0f GB/s x %.2f):\n",
	       m->name, m->peak_tflops, m->mfu, m->mem_gbps, m->bw_eff);
	if (o->host_pages)
		row_f("promotion time (s)", "%14.3f", r->promote_secs,
		      nc ? nc->promote_secs : 0, nc);
	if (o->host_pages)
		row_f("waited for prefetches (s)", "%14.3f", r->prefetch_wait_secs,
		      nc ? nc->prefetch_wait_secs : 0, nc);
	if (o->nvme_pages)
		row_f("waited for NVMe writes (s)", "%14.3f", r->throttle_secs,
		      nc ? nc->throttle_secs : 0, nc);
	row_f("TTFT p50 (s)", "%14.3f", r->ttft_p50, nc ? nc->ttft_p50 : 0, nc);
	row_f("TTFT p99 (s)", "%14.3f", r->ttft_p99, nc ? nc->ttft_p99 : 0, nc);
	row_f("TPOT mean (ms)", "%14.2f", r->tpot_mean * 1e3, nc ? nc->tpot_mean * 1e3 : 0, nc);
	row_f("throughput (output tok/s)", "%14.0f", r->throughput, nc ? nc->throughput : 0, nc);
	row_f("simulated time (s)", "%14.1f", r->sim_secs, nc ? nc->sim_secs : 0, nc);
	row_f("wall time (s)", "%14.2f", r->wall_secs, nc ? nc->wall_secs : 0, nc);
	fprintf(sum_out, "  kvmm_check at the end: %s\n", r->check_ok && (!nc || nc->check_ok) ?
	       "ok, every page free or cached" : "FAILED");
	if (r->saved_tokens != r->cached_tokens)
		fprintf(sum_out, "  (tokens served from cache count each request's first admission;\n"
			"   prefill tokens saved count every admission, so a request retracted\n"
			"   and admitted again saves its own committed tokens once more)\n");
}

/* ---- --json ---- */

/* Who makes the TTFT p99: each request at or above it, slowest first. */
static json_t *json_slow(const struct eng_report *r)
{
	json_t *a = json_array();
	uint32_t k;

	for (k = 0; a && k < r->nslow; k++) {
		const struct eng_slow *s = &r->slow[k];

		json_array_append_new(a, json_pack("{s:I,s:f,s:f,s:I,s:I,s:I}",
			"request", (json_int_t)s->req, "arrival_s", s->arrive,
			"ttft_s", s->ttft, "prompt_tokens", (json_int_t)s->prompt,
			"cached_tokens", (json_int_t)s->cached,
			"lower_tier_tokens", (json_int_t)s->lower));
	}
	return a;
}

static json_t *json_results(const struct eng_report *r, bool sequential)
{
	json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
		"requests", (json_int_t)r->requests,
		"completed", (json_int_t)r->completed,
		"prompt_tokens", (json_int_t)r->prompt_tokens,
		"cached_tokens", (json_int_t)r->cached_tokens,
		"hit_rate", hit_rate(r),
		"prefill_tokens", (json_int_t)r->prefill_tokens,
		"prefill_tokens_saved", (json_int_t)r->saved_tokens,
		"output_tokens", (json_int_t)r->output_tokens,
		"evicted_pages", (json_int_t)r->evicted_pages,
		"retractions", (json_int_t)r->retractions,
		"prefill_steps", (json_int_t)r->prefill_steps,
		"decode_steps", (json_int_t)r->decode_steps,
		"peak_running", (json_int_t)r->max_running_seen);

	json_object_set_new(j, "peak_pages", json_pack("{s:I,s:I,s:I,s:I,s:I}",
		"owned", (json_int_t)r->peak_owned,
		"cached", (json_int_t)r->peak_cached,
		"evictable", (json_int_t)r->peak_evictable,
		"protected", (json_int_t)r->peak_protected,
		"free_min", (json_int_t)r->peak_free_min));
	json_object_set_new(j, "estimated", json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
		"ttft_p50_s", r->ttft_p50, "ttft_p99_s", r->ttft_p99, "ttft_mean_s", r->ttft_mean,
		"tpot_mean_s", r->tpot_mean, "tpot_p50_s", r->tpot_p50, "tpot_p99_s", r->tpot_p99,
		"throughput_tok_s", r->throughput, "sim_seconds", r->sim_secs));
	json_object_set_new(json_object_get(j, "estimated"), "ttft_p99_requests",
			    json_slow(r));
	if (sequential)
		json_object_set_new(j, "block_hit_rate",
				    json_real(r->blocks ? (double)r->hit_blocks / r->blocks : 0));
	json_object_set_new(j, "tiers", json_pack("{s:I,s:I,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:f,s:I,s:f,s:I,s:I,s:f}",
		"host_tokens", (json_int_t)r->host_tokens,
		"nvme_tokens", (json_int_t)r->nvme_tokens,
		"host_hit_rate", tier_rate(r, r->host_tokens),
		"nvme_hit_rate", tier_rate(r, r->nvme_tokens),
		"host_demoted_pages", (json_int_t)r->host_demoted,
		"nvme_demoted_pages", (json_int_t)r->nvme_demoted,
		"host_copied_pages", (json_int_t)r->host_copied,
		"write_through_pages", (json_int_t)r->wt_pages,
		"free_demoted_pages", (json_int_t)r->free_demoted,
		"promotions_refused", (json_int_t)r->promote_failed,
		"remote_tokens", (json_int_t)r->remote_tokens,
		"remote_hit_rate", tier_rate(r, r->remote_tokens),
		"remote_pushed_tokens", (json_int_t)r->remote_pushed,
		"promote_seconds", r->promote_secs,
		"throttle_pages", (json_int_t)r->throttle_pages,
		"throttle_seconds", r->throttle_secs,
		"prefetch_tokens", (json_int_t)r->prefetched_tokens,
		"prefetch_hit_tokens", (json_int_t)r->prefetch_hit_tokens,
		"prefetch_wait_seconds", r->prefetch_wait_secs));
	json_object_set_new(j, "wall_seconds", json_real(r->wall_secs));
	json_object_set_new(j, "check_ok", json_boolean(r->check_ok));
	return j;
}

/**
 * report_json() - write --json: the options, the input and each run's results
 * @c: the options; @c->json is the file, "-" for standard output
 * @input: what the traffic was, one line
 * @r: the run
 * @nc: the --compare run without the cache, or NULL
 *
 * Return: 0 or -EIO.
 */
int report_json(const struct cli *c, const char *input, const struct eng_report *r,
		const struct eng_report *nc)
{
	const struct eng_opts *o = &c->o;
	const struct eng_model *m = &o->model;
	json_t *j = json_pack("{s:s,s:i,s:s}", "tool", "kvmm-engine", "version", 1,
			      "input", input);
	int ret;

	json_object_set_new(j, "config", json_pack(
		"{s:I,s:I,s:s,s:s,s:I,s:f,s:I,s:b,s:b,s:I,s:I,s:I,s:f,s:b,s:b}",
		"device_pages", (json_int_t)o->device_pages,
		"page_size", (json_int_t)o->page_size,
		"evict", o->evict, "policy", cli_policy_names[o->policy],
		"lpm_max_queue", (json_int_t)o->lpm_max_queue,
		"max_wait", o->max_wait,
		"lookahead", (json_int_t)o->lookahead,
		"lookahead_evict", o->lookahead_evict,
		"lookahead_guard", o->lookahead_guard,
		"max_running", (json_int_t)o->max_running,
		"max_prefill_tokens", (json_int_t)o->max_prefill_tokens,
		"chunk", (json_int_t)o->chunk,
		"decode_reserve", o->decode_reserve,
		"sequential", o->sequential, "no_cache", o->no_cache));
	json_object_set_new(json_object_get(j, "config"), "tiers", json_pack(
		"{s:I,s:I,s:s?,s:s,s:f,s:f,s:f}",
		"host_pages", (json_int_t)o->host_pages,
		"nvme_pages", (json_int_t)o->nvme_pages,
		"nvme_file", o->nvme_file, "write_policy",
		o->write_policy == KVMM_WRITE_THROUGH ? "write-through" : "write-back",
		"host_gbps", o->host_gbps, "nvme_gbps", o->nvme_gbps,
		"nvme_write_gbps", o->nvme_write_gbps));
	json_object_set_new(j, "model", json_pack(
		"{s:s,s:I,s:I,s:I,s:I,s:f,s:I,s:f,s:f,s:f,s:f,s:f,s:I}",
		"name", m->name, "layers", (json_int_t)m->layers, "heads", (json_int_t)m->heads,
		"kv_heads", (json_int_t)m->kv_heads, "head_dim", (json_int_t)m->head_dim,
		"params", m->params, "dtype_bytes", (json_int_t)m->dtype_bytes,
		"peak_tflops", m->peak_tflops, "mfu", m->mfu, "mem_gbps", m->mem_gbps,
		"bw_eff", m->bw_eff, "step_us", m->step_us,
		"kv_bytes_per_token", (json_int_t)eng_model_token_bytes(m)));
	json_object_set_new(j, "results", json_results(r, o->sequential));
	if (nc)
		json_object_set_new(j, "no_cache", json_results(nc, o->sequential));
	if (!strcmp(c->json, "-")) {
		ret = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else {
		ret = json_dump_file(j, c->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (ret)
			fprintf(stderr, "%s: cannot write %s: %s\n", tool_name, c->json,
				strerror(errno));
	}
	json_decref(j);
	return ret ? -EIO : 0;
}

/* ---- --plot ---- */

static FILE *plot_file(const char *dir, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "%s: %s: %s\n", tool_name, path, strerror(errno));
	return f;
}

/*
 * The gnuplot script.  Each title's second line names the run (its input
 * and pool) as %1$s.  The requests' own pages are a few percent of the
 * pool, too thin a band to see under the cache: they are a line on the
 * right-hand axis instead.  The sweep reruns the traffic at each pool
 * size, and a larger pool admits more requests at once, which then find
 * less of each other's prompts cached: its curve need not rise, and says
 * so.
 */
static const char gnuplot_script[] =
"set terminal svg size 800,480 dynamic font 'sans,12' background '#ffffff'\n"
"set grid lc rgb '#dddddd'\n"
"set key outside right top\n"
"set datafile separator ' '\n"
"set output 'hit_rate.svg'\n"
"set title \"Prompt tokens served from the prefix cache (cumulative)\\n%1$s\"\n"
"set xlabel 'simulated time (s)'\n"
"set ylabel 'hit rate'\n"
"set yrange [0:1]\n"
"plot 'series.dat' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'hit rate'\n"
"set output 'pages.svg'\n"
"set title \"KV pool pages by state\\n%1$s\"\n"
"set ylabel 'pages'\n"
"set yrange [0:*]\n"
"set y2label 'pages owned by requests'\n"
"set y2range [0:*]\n"
"set y2tics\n"
"plot 'series.dat' using 1:($4+$5+$6+$3) with filledcurves x1 lc rgb '#cfe8cf' title 'free', \\\n"
"     '' using 1:($4+$5+$6) with filledcurves x1 lc rgb '#9ecae1' title 'cached, evictable', \\\n"
"     '' using 1:($4+$5) with filledcurves x1 lc rgb '#3182bd' title 'cached, protected', \\\n"
"     '' using 1:4 with filledcurves x1 lc rgb '#e6550d' title 'owned by requests', \\\n"
"     '' using 1:4 axes x1y2 with lines lw 2 lc rgb '#a63603' title 'owned (right axis)'\n"
"unset y2tics\n"
"unset y2label\n"
"set output 'ttft.svg'\n"
"set title \"Time to first token (estimated): share of requests at or below\\n%1$s\"\n"
"set xlabel 'TTFT (s)'\n"
"set ylabel 'share of requests'\n"
"set yrange [0:1]\n"
"set logscale x\n"
"plot 'ttft.dat' using 1:2 with steps lw 2 lc rgb '#1f77b4' title 'prefix cache', \\\n"
"     'ttft_nocache.dat' using 1:2 with steps lw 2 lc rgb '#d62728' title 'no cache'\n"
"unset logscale x\n"
"set output 'sweep.svg'\n"
"set title \"Hit rate against KV pool size: the same traffic rerun at each size\\n%1$s\"\n"
"set xlabel 'pool pages (this run: %2$u)'\n"
"set ylabel 'hit rate'\n"
"set logscale x 2\n"
"set yrange [0:1]\n"
"set label 1 \"A larger pool runs more requests at once, and they find less of each other's"
" prompts cached:\\nthe hit rate need not rise with the pool.\" at graph 0.02, graph 0.1"
" font 'sans,10'\n"
"plot 'sweep.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'hit rate'\n";

/* The run, for the plots' titles: its input and pool, no quote or backslash. */
static void plot_run_name(const struct cli *c, const char *input, char *buf, size_t len)
{
	char *p;

	/* the input's name, not its counts: "generated (seed ...)", a file */
	snprintf(buf, len, "%.*s; pool %u pages of %u tokens%s", (int)strcspn(input, ":"), input,
		 c->o.device_pages, c->o.page_size, c->o.host_pages ? ", with lower tiers" : "");
	for (p = buf; *p; p++)
		if (*p == '"' || *p == '\\' || *p == '\'' || *p == '\n')
			*p = ' ';
}

static int write_cdf(const char *dir, const char *name, const struct eng_report *r)
{
	FILE *f = plot_file(dir, name);
	uint32_t k;

	if (!f)
		return -errno;
	for (k = 0; k < r->nttft; k++)
		fprintf(f, "%.6f %.6f\n", r->ttft[k] > 1e-4 ? r->ttft[k] : 1e-4,
			(double)(k + 1) / r->nttft);
	return fclose(f) ? -errno : 0;
}

/**
 * report_plots() - write --plot: the data files, the sweep (the same
 *	traffic at 1/8 to 4 times the pool), and gnuplot over them
 * @c: the options; @c->plot is the directory
 * @input: what the traffic was, one line (the plots' titles name it)
 * @wl: the traffic, run again for the sweep
 * @r: the run
 * @nc: the --compare run without the cache, or NULL to run one here
 *
 * Return: 0 or a negative errno.
 */
int report_plots(const struct cli *c, const char *input, const struct workload *wl,
		 const struct eng_report *r, const struct eng_report *nc)
{
	static const double scale[] = { 0.125, 0.25, 0.5, 1, 2, 4 };
	struct eng_report nc_own;
	char cmd[4200], name[512];
	FILE *f;
	uint32_t k;
	int ret;

	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "%s: --plot needs gnuplot (apt-get install gnuplot-nox)\n",
			tool_name);
		return -ENOENT;
	}
	if (mkdir(c->plot, 0777) && errno != EEXIST) {
		fprintf(stderr, "%s: %s: %s\n", tool_name, c->plot, strerror(errno));
		return -errno;
	}
	f = plot_file(c->plot, "series.dat");
	if (!f)
		return -errno;
	fprintf(f, "# t_s hit_rate free owned protected evictable done\n");
	for (k = 0; k < r->nsamples; k++) {
		const struct eng_sample *s = &r->samples[k];

		fprintf(f, "%.4f %.5f %u %u %u %u %u\n", s->t, s->hit_rate, s->free, s->owned,
			s->cached - s->evictable, s->evictable, s->done);
	}
	if (fclose(f))
		return -errno;
	if (!nc) {
		struct eng_opts o = c->o;

		o.no_cache = true;
		o.progress = false;
		ret = eng_run(wl, &o, &nc_own);
		if (ret)
			return ret;
		nc = &nc_own;
	}
	ret = write_cdf(c->plot, "ttft.dat", r) ?: write_cdf(c->plot, "ttft_nocache.dat", nc);
	if (nc == &nc_own)
		eng_report_free(&nc_own);
	if (ret)
		return ret;
	f = plot_file(c->plot, "sweep.dat");
	if (!f)
		return -errno;
	fprintf(f, "# device_pages hit_rate\n");
	for (k = 0; k < sizeof(scale) / sizeof(scale[0]); k++) {
		struct eng_opts o = c->o;
		struct eng_report s;
		double pages = o.device_pages * scale[k];

		/* too small for the longest request, or too large: no point */
		if (pages * o.page_size < wl->max_seq_len || pages > KVMM_MAX_PAGES)
			continue;
		o.device_pages = (uint32_t)pages;
		o.progress = false;
		ret = eng_run(wl, &o, &s);
		eng_report_free(&s);
		if (ret)
			break;
		fprintf(f, "%u %.5f\n", o.device_pages, hit_rate(&s));
		if (c->o.progress)
			fprintf(stderr, "sweep: %u pages: hit rate %.4f\n", o.device_pages,
				hit_rate(&s));
	}
	if (fclose(f) || ret)
		return ret ? ret : -errno;
	f = plot_file(c->plot, "plots.gp");
	if (!f)
		return -errno;
	plot_run_name(c, input, name, sizeof(name));
	fprintf(f, gnuplot_script, name, c->o.device_pages);
	if (fclose(f))
		return -errno;
	snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot plots.gp", c->plot);
	if (strchr(c->plot, '\'') || system(cmd)) {
		fprintf(stderr, "%s: gnuplot failed in %s\n", tool_name, c->plot);
		return -EIO;
	}
	return 0;
}
