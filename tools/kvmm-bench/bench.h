/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmm-bench/bench.h - shared pieces of kvmm-bench.  The tool uses
 * only the public API (libkvmm.h), like any engine would.
 */
#ifndef KVMM_BENCH_H
#define KVMM_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <libkvmm.h>

/* One request of a workload (format: ../shared/bench/README.md). */
struct wl_request {
	uint32_t id;
	uint32_t arrival;
	uint32_t conv;
	uint32_t turn;
	int32_t prev;		/* previous turn's request id, or -1 */
	uint32_t prompt_len;
	uint32_t output_seg;
	uint32_t output_len;
	uint32_t nseg;
	uint32_t *segs;		/* prompt segment ids */
};

struct workload {
	uint32_t nsegs;
	uint32_t **seg_tokens;
	uint32_t *seg_len;
	uint32_t nreq;
	struct wl_request *reqs;
	uint64_t capacity_tokens;
	uint32_t max_inflight;
	uint64_t prompt_tokens;
	uint32_t max_seq_len;	/* longest prompt + output */
};

int workload_load(const char *path, struct workload *wl);
void workload_free(struct workload *wl);
int workload_generate(uint64_t seed, uint32_t nconv, struct workload *wl);

enum replay_via {
	VIA_DIRECT,	/* the C API */
	VIA_RING,	/* an in-process ring */
	VIA_REMOTE,	/* a ring attached to a server in another process */
};

struct replay_opts {
	uint32_t page_size;
	uint64_t capacity_tokens;	/* 0: the workload's */
	uint32_t decode_chunk;		/* 0: all output tokens at once */
	uint32_t repeat;
	const char *evict;		/* NULL: lru */
	enum replay_via via;
};

struct replay_result {
	uint32_t requests;
	uint64_t prompt_tokens;
	uint64_t matched_tokens;
	uint64_t evicted_tokens;
	uint64_t cached_tokens_end;
	uint64_t meta_bytes_end;
	double us_per_request;		/* median over repeats */
	double us_min, us_max;
	bool accounting_ok;
};

int replay_run(const struct workload *wl, const struct replay_opts *o,
	       struct replay_result *res);

int cmd_replay(int argc, char **argv);
int cmd_micro(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_ring(int argc, char **argv);
int cmd_trace(int argc, char **argv);
pid_t server_fork(const struct kvmm_params *p, const char *path, uint32_t flags);
int server_reap(pid_t pid);

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double median(double *v, unsigned n);
void sort_u64(uint64_t *v, size_t n);
struct kvmm_params bench_params(uint32_t page_size, uint32_t nr_pages, uint32_t max_seqs,
				uint32_t max_seq_len);
int ring_run(struct kvmm_ring *ring, uint32_t n, int32_t *res);
void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
uint64_t parse_u64(const char *opt, const char *s);

#endif
