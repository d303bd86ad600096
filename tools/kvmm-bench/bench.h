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

#include <libkvmm.h>

#include "../lib/json.h"
#include "../lib/tools.h"

enum replay_via {
	VIA_DIRECT,	/* the C API */
	VIA_RING,	/* an in-process ring */
	VIA_REMOTE,	/* a ring attached to a server in another process */
};

/* Requests a ring batch carries unless --batch says otherwise. */
#define REPLAY_BATCH	8

struct replay_opts {
	uint32_t page_size;
	uint64_t capacity_tokens;	/* 0: the workload's */
	uint32_t decode_chunk;		/* 0: all output tokens at once */
	uint32_t repeat;
	const char *evict;		/* NULL: lru */
	enum replay_via via;
	uint32_t batch;			/* ring: requests a batch of entries
					 * carries (an engine step's admissions) */
	uint64_t host_tokens;		/* host tier; 0: none */
	uint64_t nvme_tokens;		/* NVMe tier below it; 0: none */
	const char *nvme_file;		/* its file, recreated for every run */
	bool sync;			/* wait for background writeback after each
					 * request (kvmm_sync(), direct only) */
	int contend;			/* a CPU kept busy by another process
					 * meanwhile; -1: none */
	const char *socket;		/* remote: a running server (kvmmd) to
					 * replay against, not a spawned one */
	const char *kv_events;		/* ring: publish the context's
					 * events as vLLM's KV events here */
};

struct replay_result {
	uint32_t requests;
	uint64_t prompt_tokens;
	uint64_t matched_tokens;
	uint64_t evicted_tokens;
	uint64_t promoted_tokens;	/* of matched_tokens, brought back from the host */
	uint64_t demoted_tokens;
	uint64_t nvme_promoted_tokens;	/* the same for the NVMe tier */
	uint64_t nvme_demoted_tokens;
	uint64_t cached_tokens_end;
	uint64_t meta_bytes_end;
	double us_per_request;		/* median over repeats */
	double us_min, us_max;
	uint32_t batch;			/* ring: requests a batch carried; 0: direct */
	bool accounting_ok;
};

int replay_run(const struct workload *wl, const struct replay_opts *o,
	       struct replay_result *res);

int cmd_replay(int argc, char **argv);
int cmd_micro(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_ring(int argc, char **argv);
int cmd_ratio(int argc, char **argv);
int cmd_tiers(int argc, char **argv);
int cmd_cuda(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_latency(int argc, char **argv);
int cmd_keyed(int argc, char **argv);
int cmd_remote(int argc, char **argv);

/* measure.c: what the throughput benchmarks compare kvmm with */
extern const struct kvmm_model bench_model_8b;
struct memcpy_pair {
	char *a, *b;
	uint64_t bytes;
};
struct fio_result {
	double gbps;
	double iops;
};
void prefault(void *p, size_t n);
double gbps(uint64_t bytes, double ns);
int memcpy_pair_init(struct memcpy_pair *m, uint64_t bytes);
void memcpy_pair_free(struct memcpy_pair *m);
double memcpy_gbps(const struct memcpy_pair *m);
int run_fio(const char *path, const char *rw, uint64_t bs, uint64_t bytes,
	    uint32_t qd, struct fio_result *res);
int fio_present(void);
void report_figure(bool json, const char *bench, const char *what, double v, const char *unit,
		   const char *vs_name, double vs, double ratio, json_t *extra);
double median_ratio(const double *a, const double *b, uint32_t n);
/* ring.c: a kvmm server in a child process, one fresh context a session */
struct bench_server {
	pid_t pid;
	int cmd, ack;
};

int server_spawn(struct bench_server *s, const struct kvmm_params *p, const char *path,
		 uint32_t flags);
int server_open(struct bench_server *s);
int server_close(struct bench_server *s);
int server_reap(struct bench_server *s);
/* ring.c: a process that keeps one CPU busy, as another tenant of the machine would */
int contender_check(int cpu);
pid_t contender_start(int cpu);
void contender_stop(pid_t pid);


#endif
