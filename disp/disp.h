/* SPDX-License-Identifier: MIT */
/*
 * disp/disp.h - the dispatcher behind a command ring, for the transport
 * layer (ipc/): it owns the ring's memory and wake-ups, the dispatcher
 * owns what the commands mean.  Not installed.
 */
#ifndef KVMM_DISP_H
#define KVMM_DISP_H

#include <stdbool.h>
#include <stdint.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

struct kvmm_disp;

int kvmm_disp_create(struct kvmm_ctx *ctx, bool untrusted, struct kvmm_disp **dp);
void kvmm_disp_destroy(struct kvmm_disp *d);
uint32_t kvmm_disp_id(const struct kvmm_disp *d);
void kvmm_disp_bind_ns(struct kvmm_disp *d, uint32_t ns);
int kvmm_disp_set_buf(struct kvmm_disp *d, uint32_t index, void *base, uint64_t len);
void kvmm_disp_replace_bufs(struct kvmm_disp *d, const struct kvmm_iovec *iov, uint32_t nr);
void kvmm_disp_attach(struct kvmm_disp *d, struct kvmm_ring_hdr *hdr,
		      struct kvmm_sqe *sqes, uint32_t sq_entries,
		      struct kvmm_cqe *cqes, uint32_t cq_entries);
uint32_t kvmm_disp_process(struct kvmm_disp *d);
bool kvmm_disp_pending(const struct kvmm_disp *d);
uint32_t kvmm_disp_deferred(const struct kvmm_disp *d);
void kvmm_disp_set_notify(struct kvmm_disp *d, void (*fn)(void *arg), void *arg);


#endif
