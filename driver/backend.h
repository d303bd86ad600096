/* SPDX-License-Identifier: MIT */
/*
 * driver/backend.h - the backends this build can offer, and what the
 * drivers share.
 */
#ifndef KVMM_DRIVER_BACKEND_H
#define KVMM_DRIVER_BACKEND_H

#include <libkvmm.h>

extern const struct kvmm_backend_ops kvmm_mock_backend;
extern const struct kvmm_backend_ops kvmm_cuda_backend;
extern const struct kvmm_store_ops kvmm_host_store;
extern const struct kvmm_store_ops kvmm_nvme_store;

void *kvmm_map_anon(uint64_t bytes);
void kvmm_hint_huge(void *p, uint64_t bytes);

/* driver/cuda: the one CUresult-to-errno map (tests check it) */
int kvmm_cu_errno(int r);

#endif
