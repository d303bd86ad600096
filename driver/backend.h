/* SPDX-License-Identifier: MIT */
/*
 * driver/backend.h - the backends this build can offer, and what the
 * drivers share.
 */
#ifndef KVMM_DRIVER_BACKEND_H
#define KVMM_DRIVER_BACKEND_H

#include <pthread.h>

#include <libkvmm.h>
#include "driver.h"
#include "fault.h"
#include "../kernels/kv.h"

extern const struct kvmm_backend_ops kvmm_mock_backend;
extern const struct kvmm_backend_ops kvmm_cuda_backend;
extern const struct kvmm_store_ops kvmm_host_store;
extern const struct kvmm_store_ops kvmm_nvme_store;
extern const struct kvmm_remote_ops kvmm_remote_redis;

void *kvmm_map_anon(uint64_t bytes);
void kvmm_hint_huge(void *p, uint64_t bytes);

void kvmm_kv_geom_of(const struct kvmm_model *m, uint32_t page_size,
		     struct kvmm_kv_geom *g);

/**
 * struct kvmm_dma_ranges - the host ranges a backend's copies may reach
 *	(what mem_register registered), and where the device sees each
 * @lock: the I/O worker copies while stores register
 * @r: the ranges; @nr of them, room for @max
 */
struct kvmm_dma_ranges {
	pthread_mutex_t lock;
	struct kvmm_dma_range {
		uintptr_t start, end;
		uint64_t dev;
	} *r;
	uint32_t nr, max;
};

void kvmm_dma_ranges_init(struct kvmm_dma_ranges *rs);
void kvmm_dma_ranges_exit(struct kvmm_dma_ranges *rs);
int kvmm_dma_ranges_add(struct kvmm_dma_ranges *rs, void *addr, size_t len, uint64_t dev);
uint32_t kvmm_dma_ranges_del(struct kvmm_dma_ranges *rs, void *addr, size_t len);
uint64_t kvmm_dma_ranges_find(struct kvmm_dma_ranges *rs, const void *addr, uint64_t bytes);
bool kvmm_dma_ranges_find_many(struct kvmm_dma_ranges *rs, void *const *addr, uint32_t n,
			       uint64_t bytes, uint64_t *dev);

/* driver/cuda: the one CUresult-to-errno map (tests check it) */
int kvmm_cu_errno(int r);

#endif
