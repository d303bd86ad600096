/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmm-engine/engine.h - the reference engine: an SGLang-style
 * scheduler that drives kvmm through the command ring, on a simulated
 * clock priced by a step-time model.
 */
#ifndef KVMM_ENGINE_H
#define KVMM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/tools.h"

/* Step-time model: an estimate, never a measurement. */
struct eng_model {
	const char *name;
	uint32_t layers, heads, kv_heads, head_dim;
	double params;			/* weights, count */
	uint32_t dtype_bytes;
	double peak_tflops;		/* dense, per GPU */
	double mfu;			/* fraction of peak prefill reaches */
	double mem_gbps;		/* memory bandwidth, GB/s */
	double bw_eff;			/* fraction of it decode reaches */
	double step_us;			/* fixed cost of a step (launches, sampling) */
};

void eng_model_default(struct eng_model *m);
uint64_t eng_model_token_bytes(const struct eng_model *m);
/* prefill of @c new tokens after @prefix cached/computed ones */
double eng_prefill_flops(const struct eng_model *m, uint64_t prefix, uint64_t c);
double eng_prefill_secs(const struct eng_model *m, double flops);
/* decode of @batch sequences that hold @ctx_tokens of KV in all */
double eng_decode_secs(const struct eng_model *m, uint32_t batch, uint64_t ctx_tokens);

enum eng_policy { ENG_FCFS, ENG_LPM, ENG_PRIORITY };

struct eng_opts {
	uint32_t page_size;
	uint32_t device_pages;
	const char *evict;		/* kvmm eviction policy */
	enum eng_policy policy;
	uint32_t lpm_max_queue;		/* lpm falls back to fcfs above this queue length */
	double max_wait;		/* seconds after which a waiting request goes
					 * ahead of lpm or priority order; 0: never */
	uint32_t max_running;
	uint32_t max_prefill_tokens;	/* per step */
	uint32_t chunk;			/* chunked prefill size; 0: no chunking */
	double decode_reserve;		/* share of outstanding decode tokens held back */
	double rate;			/* requests/s when the workload has no times */
	bool sequential;
	bool no_cache;
	uint32_t host_pages;		/* host tier pages; 0: none */
	uint32_t nvme_pages;		/* NVMe tier pages; 0: none (needs a host tier) */
	const char *nvme_file;		/* its file, emptied at the start of a run */
	uint32_t write_policy;		/* KVMM_WRITE_BACK or KVMM_WRITE_THROUGH */
	double host_gbps;		/* host-to-device copy bandwidth, GB/s */
	double nvme_gbps;		/* NVMe read bandwidth, GB/s */
	double nvme_write_gbps;		/* NVMe write bandwidth, GB/s */
	const char *remote;		/* a Redis Cluster's seeds; NULL: no remote tier */
	const char *remote_salt;
	double remote_gbps;		/* its read bandwidth, GB/s */
	uint32_t remote_write;		/* KVMM_REMOTE_WRITE_*; NONE: RPUSH after a finish */
	uint32_t prefetch_budget;	/* pages a request's PREFETCH may take; 0: none */
	uint32_t prefetch_depth;	/* requests at the head of the queue prefetched */
	bool admit_promotions;		/* admission counts what a PROMOTE will take */
	uint32_t lookahead;		/* requests tried past one that does not fit,
					 * in free pages only; 0: none */
	bool lookahead_evict;		/* ... in cached pages too */
	bool lookahead_guard;		/* ... only those that cannot delay the
					 * head (EASY backfilling) */
	bool progress;			/* a progress bar on stderr */
	struct eng_model model;
	/* tests: every scheduling event */
	void (*event)(void *priv, int type, uint32_t req, uint32_t a, uint32_t b);
	void *event_priv;
};

enum {
	ENG_EV_ADMIT,	/* a: matched tokens, b: tokens to compute */
	ENG_EV_CHUNK,	/* a: tokens prefilled in this chunk, b: committed so far */
	ENG_EV_FIRST,	/* prefill done: the first (or next) token */
	ENG_EV_RETRACT,	/* a: decoded tokens so far */
	ENG_EV_FINISH,
};

void eng_opts_default(struct eng_opts *o);

/* One point of the time series. */
struct eng_sample {
	double t;
	double hit_rate;		/* cumulative */
	uint32_t done;
	uint32_t free, owned, cached, evictable;
};

#define ENG_MAX_SAMPLES	1024

/* A request whose TTFT is at or above the p99: who makes the tail. */
struct eng_slow {
	uint32_t req;
	uint32_t prompt;		/* prompt tokens */
	uint32_t cached;		/* of those, matched at its first admission */
	uint32_t lower;			/* of those, promoted or prefetched from below */
	double arrive, ttft;
};

struct eng_report {
	uint32_t requests, completed;
	uint64_t prompt_tokens, cached_tokens;	/* first admission of each request */
	uint64_t host_tokens, nvme_tokens;	/* of cached_tokens, promoted from there */
	uint64_t remote_tokens;			/* of host_tokens, fetched from the
						 * remote tier first */
	uint64_t remote_pushed;			/* tokens the remote tier held after
						 * each request's push */
	uint64_t host_demoted, nvme_demoted;	/* pages moved onto the tier */
	uint64_t host_copied;			/* pages copied to the host tier */
	uint64_t wt_pages, free_demoted;	/* of those, when committed; demoted
						 * pages that were there already */
	uint64_t promote_failed;		/* PROMOTEs refused (-ENOSPC): recomputed */
	double promote_secs;			/* charged for promotions (estimated) */
	double throttle_secs;			/* waited for NVMe writes past a
						 * step's own time (estimated) */
	uint64_t prefetched_tokens;		/* PREFETCH brought up to the device */
	uint64_t prefetch_hit_tokens;		/* ... and a MATCH then mapped */
	double prefetch_wait_secs;		/* steps waited for prefetches
						 * still copying (estimated) */
	uint64_t throttle_pages;		/* pages written to NVMe by a step
						 * that needed the room */
	uint64_t prefill_tokens, saved_tokens;	/* over every admission */
	uint64_t output_tokens;
	uint64_t evicted_pages, retractions, steps, prefill_steps, decode_steps;
	uint64_t blocks, hit_blocks;		/* 512-token blocks (sequential) */
	uint32_t peak_free_min, peak_owned, peak_cached, peak_evictable, peak_protected;
	uint32_t max_running_seen;
	double sim_secs, wall_secs;
	double ttft_p50, ttft_p99, ttft_mean, tpot_mean, tpot_p50, tpot_p99;
	double throughput;			/* output tokens per simulated second */
	double *ttft;				/* per request, sorted */
	uint32_t nttft;
	struct eng_slow *slow;			/* TTFT >= ttft_p99, slowest first */
	uint32_t nslow;
	struct eng_sample samples[ENG_MAX_SAMPLES];
	uint32_t nsamples;
	bool check_ok;
};

int eng_run(const struct workload *wl, const struct eng_opts *o, struct eng_report *rep);
void eng_report_free(struct eng_report *rep);

/* scheduler pieces, exposed for the unit tests */
uint32_t eng_chunk_len(uint32_t need, uint32_t budget, uint32_t chunk, uint32_t page_size);
struct eng_victim {
	uint32_t decoded, input;
};
int eng_retract_cmp(const struct eng_victim *a, const struct eng_victim *b);

#endif
