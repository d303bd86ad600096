/* SPDX-License-Identifier: MIT */
/*
 * disp/dump.h - the DUMP serialiser (dump.c), for the dispatcher.  Not
 * installed.
 */
#ifndef KVMM_DISP_DUMP_H
#define KVMM_DISP_DUMP_H

#include <stdint.h>

#include <libkvmm.h>

struct kvmm_ctx;

int kvmm_dump(const struct kvmm_ctx *ctx, const struct kvmm_sqe *sqe,
	      struct kvmm_dump_hdr *hdr, uint32_t *cflags);

#endif
