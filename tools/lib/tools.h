/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/tools.h - what the tools share: workloads (the shared
 * multi-turn format, Mooncake traces, a generator) and small helpers.
 * Tools use only the public API (libkvmm.h), like any engine would.
 */
#ifndef KVMM_TOOLS_H
#define KVMM_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

/* One request of a workload (format: ../shared/bench/README.md). */
struct wl_request {
	uint32_t id;
	uint32_t arrival;
	uint32_t conv;
	uint32_t turn;
	int32_t prev;		/* previous turn's request id, or -1 */
	uint32_t prompt_len;
	uint32_t output_seg;	/* WL_NO_SEG: output tokens are not known */
	uint32_t output_len;
	uint32_t nseg;
	uint32_t *segs;		/* prompt segment ids */
	uint32_t nblk;		/* block form (traces): prompt from hash ids */
	uint64_t blk_first;	/* index of its first id in blk_ids */
	double t_ms;		/* arrival time; meaningful when has_time */
	uint32_t prio;		/* 0..3, larger is more urgent */
	uint32_t kind;		/* WL_KIND_* */
};

#define WL_NO_SEG	UINT32_MAX
#define WL_BLOCK	512	/* tokens per hash id in a Mooncake trace */

enum { WL_KIND_CHAT, WL_KIND_FEWSHOT, WL_KIND_AGENT, WL_KIND_FILE, NR_WL_KINDS };

struct workload {
	uint32_t nsegs;
	uint32_t **seg_tokens;
	uint32_t *seg_len;
	uint32_t nreq;
	struct wl_request *reqs;
	uint64_t capacity_tokens;
	uint32_t max_inflight;
	uint64_t prompt_tokens;
	uint64_t output_tokens;
	uint32_t max_seq_len;	/* longest prompt + output */
	uint64_t *blk_ids;	/* block form */
	uint64_t total_blocks;
	bool has_time;		/* requests carry t_ms */
	bool outputs_known;	/* output tokens are what the next turn sends */
};

int workload_load(const char *path, struct workload *wl);
int workload_load_mooncake(const char *path, struct workload *wl);
void workload_free(struct workload *wl);

/* The generator: prefix-sharing traffic with arrival times. */
struct wl_gen {
	uint64_t seed;
	uint32_t requests;	/* about this many */
	double rate;		/* new sessions per second */
};
int workload_generate(const struct wl_gen *g, struct workload *wl);

void workload_prompt(const struct workload *wl, const struct wl_request *r, uint32_t *tok);
void workload_tokens(const struct workload *wl, const struct wl_request *r, uint32_t *tok);
uint32_t workload_output_token(const struct workload *wl, const struct wl_request *r,
			       uint32_t i);

/* util.c */
struct kvmm_params tool_params(uint32_t page_size, uint32_t nr_pages, uint32_t max_seqs,
			       uint32_t max_seq_len);
int ring_run(struct kvmm_ring *ring, uint32_t n, int32_t *res);
int ring_sqe(struct kvmm_ring *ring, struct kvmm_sqe **sqep);
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

extern const char *tool_name;
double median(double *v, unsigned n);
void sort_u64(uint64_t *v, size_t n);
void sort_double(double *v, size_t n);
double percentile(const double *sorted, size_t n, double q);
void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
uint64_t parse_u64(const char *opt, const char *s);
double parse_double(const char *opt, const char *s);
uint64_t parse_size(const char *opt, const char *s);
struct option;
void die_bad_option(const struct option *opts, const char *arg, int opt)
	__attribute__((noreturn));

#endif
