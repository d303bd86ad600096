/* SPDX-License-Identifier: MIT */
/*
 * driver/cuda/internal.h - private to driver/cuda/: the Driver API table,
 * the pool, its lanes and extents, and what cuda.c (the shim and the
 * backend's lifecycle), pool.c (the mapped memory) and copy.c (the copies)
 * call in each other.  No CUresult crosses out of these files.
 */
#ifndef KVMM_DRIVER_CUDA_INTERNAL_H
#define KVMM_DRIVER_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include <libkvmm.h>
#include "../backend.h"


/* The Driver API entry points we use; cuda.h's macros pick the versions. */
#define CU_FUNCS(X) \
	X(cuInit) X(cuGetErrorString) X(cuDeviceGet) \
	X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) \
	X(cuDeviceGetPCIBusId) X(cuDevicePrimaryCtxRetain) \
	X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuMemGetInfo) \
	X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) \
	X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) \
	X(cuMemUnmap) X(cuMemSetAccess) X(cuMemHostRegister) \
	X(cuMemHostUnregister) X(cuMemHostGetDevicePointer) X(cuMemAlloc) \
	X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemcpyHtoDAsync) \
	X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuStreamCreate) \
	X(cuStreamDestroy) X(cuStreamWaitEvent) X(cuEventCreate) \
	X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) \
	X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) \
	X(cuLaunchKernel) X(cuMemExportToShareableHandle) \
	X(cuMemImportFromShareableHandle) X(cuDeviceGetByPCIBusId) \
	X(cuPointerGetAttributes) X(cuMemcpyAsync)

#define STR_(x)	#x
#define STR(x)	STR_(x)

struct cu_api {
	void *dl;
#define X(f) __typeof__(f) *f;
	CU_FUNCS(X)
#undef X
};

#define ARGS_PAGES	4096	/* pages one launch takes; more loop */

/* One stream's copy state; lock held while in use. */
struct cuda_lane {
	pthread_mutex_t lock;
	CUstream stream;
	CUevent done;
	void *args;		/* pinned host: a launch's pfns and addresses */
	CUdeviceptr dargs;	/* their device copy */
	size_t args_bytes;
};

/* Physical memory mapped at pages [first, first + pages) of every buffer. */
struct cuda_extent {
	uint32_t first, pages;
	CUmemGenericAllocationHandle *h;	/* nbufs handles */
};

struct cuda_pool {
	struct cu_api api;
	CUdevice dev;
	CUcontext cuctx;
	struct kvmm_kv_geom geom;
	uint32_t layers;
	int sms;
	char name[96];
	CUmemAllocationProp prop;
	uint64_t gran;		/* allocation granularity */
	uint32_t chunk;		/* pages per chunk */
	uint32_t nr_pages;	/* mapped: extents cover [0, nr_pages) */
	uint32_t max_pages;	/* reserved */
	CUdeviceptr va;		/* the reservation */
	uint64_t va_bytes;
	uint64_t buf_va;	/* bytes of address space per buffer */
	CUdeviceptr dbufs;	/* device array of nbufs buffer bases */
	struct cuda_extent *ext;
	uint32_t nr_ext;
	CUmodule mod;
	CUfunction fn_move, fn_copy, fn_indptr, fn_indices;
	bool kernels;
	int kernels_err;		/* why they did not load (a CUresult), 0 */
	struct cuda_lane lane[2];
	struct kvmm_dma_ranges dma;	/* registered host memory */
	const int32_t *table;	/* the page table, registered on first use */
	size_t table_bytes;
	int numa;
};
#define CU(pool, call, err, len) \
	({ CUresult r_ = (pool)->api.call; \
	   r_ == CUDA_SUCCESS ? 0 : kvmm_cu_fail(&(pool)->api, r_, STR(call), err, len); })

/* Copy paths have nowhere to write a reason: the errno says enough. */
#define CUQ(pool, call) CU(pool, call, NULL, 0)

/* cuda.c */
void kvmm_cu_set_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int kvmm_cu_fail(const struct cu_api *api, CUresult r, const char *what,
		 char *err, size_t len);

/* pool.c */
CUdeviceptr kvmm_cu_buf_base(const struct cuda_pool *pool, uint32_t b);
void kvmm_cu_extent_free(struct cuda_pool *pool, struct cuda_extent *e);
int kvmm_cu_extent_map(struct cuda_pool *pool, uint32_t pages, const int *fds,
		       char *err, size_t len);
uint32_t kvmm_cu_chunks(const struct cuda_pool *pool, uint32_t pages);
int kvmm_cu_pool_reserve(struct cuda_pool *pool, uint64_t gran, uint32_t max_pages,
			 char *err, size_t len);
int kvmm_cu_pool_map(struct cuda_pool *pool, uint32_t nr_pages, uint32_t max_pages,
		     char *err, size_t len);
int kvmm_cu_resize(void *priv, uint32_t nr_pages);
int kvmm_cu_share(void *priv, struct kvmm_share *sh, struct kvmm_share_ext **ext,
		  int **fds);

/* copy.c */
int kvmm_cu_lane_init(struct cuda_pool *pool, struct cuda_lane *lane, char *err, size_t len);
void kvmm_cu_lane_exit(struct cuda_pool *pool, struct cuda_lane *lane);
void kvmm_cu_kernels_load(struct cuda_pool *pool, const struct kvmm_cuda_arg *arg);
int kvmm_cu_gather(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst);
int kvmm_cu_scatter(void *priv, const int32_t *pfns, uint32_t nr, void *const *src);
int kvmm_cu_copy(void *priv, const int32_t *src, const int32_t *dst,
		 uint32_t nr, uint32_t slots);
int kvmm_cu_mem_register(void *priv, void *addr, size_t len);
void kvmm_cu_mem_unregister(void *priv, void *addr, size_t len);
int kvmm_cu_kv_indices(void *priv, const struct kvmm_kv_index_job *job);
int kvmm_cu_table_map(void *priv, const int32_t *table, size_t bytes, void **dev);

#endif
