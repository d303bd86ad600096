/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/workload.h - private to tools/lib/workload*.c: the loader
 * that builds a struct workload record by record, which the file loaders
 * and the generator share.
 */
#ifndef KVMM_TOOLS_WORKLOAD_H
#define KVMM_TOOLS_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "tools.h"

/**
 * struct wl_loader - a workload being built
 * @path: the file, or "(generated)", for messages
 * @line: the current line, for messages
 * @wl: the workload, owned by the caller
 * @seg_cap: segments allocated in @wl
 * @req_cap: requests allocated in @wl
 * @blk_cap: block ids allocated in @wl
 * @no_time: a request without t_ms was seen
 */
struct wl_loader {
	const char *path;
	unsigned long line;
	struct workload *wl;
	uint32_t seg_cap, req_cap;
	uint64_t blk_cap;
	bool no_time;		/* a request without t_ms */
};

/* workload.c */
int wl_bad(struct wl_loader *ld, const char *why);
int wl_add_segment(struct wl_loader *ld, uint32_t id, uint32_t *tokens, uint32_t n);
int wl_add_request(struct wl_loader *ld, struct wl_request *r);
uint64_t wl_mix64(uint64_t z);

#endif
