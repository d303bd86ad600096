// SPDX-License-Identifier: MIT
/*
 * driver/cuda/copy.c - the cuda backend's copies: the two lanes (streams
 * with their own events and argument buffers), the KV kernels or
 * cuMemcpyAsync runs that gather, scatter and copy pages, host memory
 * registration, and the page-table index kernels (cuda.c's DOC says how).
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include <libkvmm.h>
#include "autoconf.h"
#include "../backend.h"
#include "internal.h"

int kvmm_cu_lane_init(struct cuda_pool *pool, struct cuda_lane *lane, char *err, size_t len)
{
	/* pfns (int32) and addresses (64-bit) of ARGS_PAGES pages, twice for copy */
	lane->args_bytes = ARGS_PAGES * (sizeof(int32_t) + sizeof(uint64_t)) * 2;
	return CU(pool, cuStreamCreate(&lane->stream, CU_STREAM_NON_BLOCKING), err, len) ?:
	       CU(pool, cuEventCreate(&lane->done, CU_EVENT_DISABLE_TIMING), err, len) ?:
	       CU(pool, cuMemAllocHost(&lane->args, lane->args_bytes), err, len) ?:
	       CU(pool, cuMemAlloc(&lane->dargs, lane->args_bytes), err, len);
}

void kvmm_cu_lane_exit(struct cuda_pool *pool, struct cuda_lane *lane)
{
	if (lane->done)
		pool->api.cuEventSynchronize(lane->done);
	if (lane->dargs)
		pool->api.cuMemFree(lane->dargs);
	if (lane->args)
		pool->api.cuMemFreeHost(lane->args);
	if (lane->done)
		pool->api.cuEventDestroy(lane->done);
	if (lane->stream)
		pool->api.cuStreamDestroy(lane->stream);
	pthread_mutex_destroy(&lane->lock);
}

/* Load the kernels; without them copies go through the copy engines. */
void kvmm_cu_kernels_load(struct cuda_pool *pool, const struct kvmm_cuda_arg *arg)
{
#if CONFIG_KVMM_NVCC
	if (arg && arg->no_kernels)
		return;
	/* no image for this GPU: the copy engines serve, and info says why */
	pool->kernels_err = pool->api.cuModuleLoadData(&pool->mod, kvmm_kv_fatbin) ?:
		pool->api.cuModuleGetFunction(&pool->fn_move, pool->mod, KVMM_KV_MOVE_FN) ?:
		pool->api.cuModuleGetFunction(&pool->fn_copy, pool->mod, KVMM_KV_COPY_FN) ?:
		pool->api.cuModuleGetFunction(&pool->fn_indptr, pool->mod, KVMM_KV_INDPTR_FN) ?:
		pool->api.cuModuleGetFunction(&pool->fn_indices, pool->mod, KVMM_KV_INDICES_FN);
	pool->kernels = !pool->kernels_err;
#else
	(void)pool;
	(void)arg;
#endif
}

/*
 * A lane for one call: the first free one, else wait for lane 0.  At most
 * two threads copy at once (the one under the context lock and the I/O
 * worker), so a caller rarely waits.  The lane's last work is finished.
 */
static struct cuda_lane *lane_get(struct cuda_pool *pool)
{
	struct cuda_lane *lane = &pool->lane[0];

	if (pthread_mutex_trylock(&lane->lock)) {
		lane = &pool->lane[1];
		if (pthread_mutex_trylock(&lane->lock)) {
			lane = &pool->lane[0];
			pthread_mutex_lock(&lane->lock);
		}
	}
	pool->api.cuCtxSetCurrent(pool->cuctx);
	pool->api.cuEventSynchronize(lane->done);	/* its args are free again */
	return lane;
}

static void lane_put(struct cuda_lane *lane)
{
	pthread_mutex_unlock(&lane->lock);
}

/* Record the lane's event after its work and wait for it. */
static int lane_wait(struct cuda_pool *pool, struct cuda_lane *lane)
{
	return CUQ(pool, cuEventRecord(lane->done, lane->stream)) ?:
	       CUQ(pool, cuEventSynchronize(lane->done));
}

static uint32_t launch_blocks(const struct cuda_pool *pool, uint64_t warps)
{
	uint64_t per = KVMM_KV_THREADS / 32, blocks = (warps + per - 1) / per;
	uint64_t cap = (uint64_t)(pool->sms > 0 ? pool->sms : 1) * 8;

	return (uint32_t)(blocks < cap ? blocks : cap);
}

/* One launch of kvmm_kv_move over at most ARGS_PAGES pages. */
static int move_kernel(struct cuda_pool *pool, struct cuda_lane *lane,
		       const int32_t *pfns, uint32_t nr, void *const *host, int dir)
{
	uint64_t run = kvmm_kv_run(&pool->geom), page = kvmm_kv_page_bytes(&pool->geom);
	uint64_t *haddr = lane->args;
	int32_t *hpfn = (int32_t *)(haddr + nr);
	CUdeviceptr dpfn = lane->dargs + nr * sizeof(uint64_t), daddr = lane->dargs;
	uint32_t nbufs = pool->geom.nbufs;
	void *params[] = { &pool->dbufs, &nbufs, &run, &dpfn, &daddr, &nr, &dir };
	uint64_t pieces = (run + KVMM_KV_PIECE - 1) / KVMM_KV_PIECE;

	if (!kvmm_dma_ranges_find_many(&pool->dma, host, nr, page, haddr))
		return -EFAULT;	/* a store handed us unregistered memory */
	memcpy(hpfn, pfns, nr * sizeof(*hpfn));
	return CUQ(pool, cuMemcpyHtoDAsync(lane->dargs, lane->args,
					   nr * (sizeof(uint64_t) + sizeof(int32_t)),
					   lane->stream)) ?:
	       CUQ(pool, cuLaunchKernel(pool->fn_move,
					launch_blocks(pool, (uint64_t)nr * nbufs * pieces), 1, 1,
					KVMM_KV_THREADS, 1, 1, 0, lane->stream, params, NULL));
}

/* The same with the copy engines: one cuMemcpyAsync per page run. */
static int move_memcpy(struct cuda_pool *pool, struct cuda_lane *lane,
		       const int32_t *pfns, uint32_t nr, void *const *host, int dir)
{
	uint64_t run = kvmm_kv_run(&pool->geom), page = kvmm_kv_page_bytes(&pool->geom);
	uint32_t i, b;
	int ret = 0;

	for (i = 0; i < nr && !ret; i++) {
		char *h = host[i];

		if (!kvmm_dma_ranges_find(&pool->dma, h, page))
			return -EFAULT;
		/* Unified addressing: the driver tells host staging from device staging. */
		for (b = 0; b < pool->geom.nbufs && !ret; b++, h += run) {
			CUdeviceptr d = kvmm_cu_buf_base(pool, b) + (uint64_t)pfns[i] * run;
			CUdeviceptr s = (CUdeviceptr)(uintptr_t)h;

			ret = dir == KVMM_KV_GATHER ?
			      CUQ(pool, cuMemcpyAsync(s, d, run, lane->stream)) :
			      CUQ(pool, cuMemcpyAsync(d, s, run, lane->stream));
		}
	}
	return ret;
}

static int cuda_move(struct cuda_pool *pool, const int32_t *pfns, uint32_t nr,
		     void *const *host, int dir)
{
	struct cuda_lane *lane = lane_get(pool);
	uint32_t done, n;
	int ret = 0;

	for (done = 0; done < nr && !ret; done += n) {
		n = nr - done < ARGS_PAGES ? nr - done : ARGS_PAGES;
		ret = pool->kernels ?
		      move_kernel(pool, lane, pfns + done, n, host + done, dir) :
		      move_memcpy(pool, lane, pfns + done, n, host + done, dir);
		/* The args are reused by the next launch: wait for this one. */
		ret = ret ?: lane_wait(pool, lane);
	}
	if (ret)
		pool->api.cuEventSynchronize(lane->done);
	lane_put(lane);
	return ret;
}

int kvmm_cu_gather(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst)
{
	return cuda_move(priv, pfns, nr, dst, KVMM_KV_GATHER);
}

int kvmm_cu_scatter(void *priv, const int32_t *pfns, uint32_t nr, void *const *src)
{
	return cuda_move(priv, pfns, nr, src, KVMM_KV_SCATTER);
}

int kvmm_cu_copy(void *priv, const int32_t *src, const int32_t *dst,
		 uint32_t nr, uint32_t slots)
{
	struct cuda_pool *pool = priv;
	struct cuda_lane *lane = lane_get(pool);
	uint64_t run = kvmm_kv_run(&pool->geom), bytes = slots * pool->geom.slot_bytes;
	uint64_t pieces = (bytes + KVMM_KV_PIECE - 1) / KVMM_KV_PIECE;
	uint32_t nbufs = pool->geom.nbufs, done, n, i, b;
	int ret = 0;

	for (done = 0; done < nr && !ret; done += n) {
		n = nr - done < ARGS_PAGES ? nr - done : ARGS_PAGES;
		if (pool->kernels) {
			int32_t *h = lane->args;
			CUdeviceptr ds = lane->dargs, dd = lane->dargs + n * sizeof(int32_t);
			void *params[] = { &pool->dbufs, &nbufs, &run, &bytes, &ds, &dd, &n };

			memcpy(h, src + done, n * sizeof(int32_t));
			memcpy(h + n, dst + done, n * sizeof(int32_t));
			ret = CUQ(pool, cuMemcpyHtoDAsync(lane->dargs, h, 2 * n * sizeof(int32_t),
							  lane->stream)) ?:
			      CUQ(pool, cuLaunchKernel(pool->fn_copy,
						launch_blocks(pool, (uint64_t)n * nbufs * pieces),
						1, 1, KVMM_KV_THREADS, 1, 1, 0, lane->stream,
						params, NULL));
		} else {
			for (i = done; i < done + n && !ret; i++)
				for (b = 0; b < nbufs && !ret; b++)
					ret = CUQ(pool, cuMemcpyDtoDAsync(
						kvmm_cu_buf_base(pool, b) + (uint64_t)dst[i] * run,
						kvmm_cu_buf_base(pool, b) + (uint64_t)src[i] * run,
						bytes, lane->stream));
		}
		ret = ret ?: lane_wait(pool, lane);
	}
	if (ret)
		pool->api.cuEventSynchronize(lane->done);
	lane_put(lane);
	return ret;
}

/* Pin and map host memory, so kernels and copy engines reach it directly. */
/* Is @addr device memory (cuMemAlloc'ed staging), not host memory? */
/*
 * cuPointerGetAttributes, unlike cuPointerGetAttribute, answers for
 * memory the driver never saw (type 0) instead of failing, so a probe of
 * plain host memory is no API error (compute-sanitizer reports those).
 */
static bool is_device_mem(struct cuda_pool *pool, const void *addr)
{
	CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
	unsigned int type = 0;
	void *data = &type;

	return !pool->api.cuPointerGetAttributes(1, &attr, &data, (CUdeviceptr)(uintptr_t)addr) &&
	       type == CU_MEMORYTYPE_DEVICE;
}

/*
 * Host memory is page-locked and mapped; device memory (staging on the
 * GPU, as a device-to-device baseline or a GPUDirect path would use) needs
 * nothing and is recorded as it is.
 */
int kvmm_cu_mem_register(void *priv, void *addr, size_t len)
{
	struct cuda_pool *pool = priv;
	CUdeviceptr dev = 0;
	int ret;

	if (!addr || !len)
		return -EINVAL;
	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (is_device_mem(pool, addr)) {
		ret = kvmm_dma_ranges_add(&pool->dma, addr, len, (uintptr_t)addr);
		return ret > 0 ? 0 : ret;
	}
	ret = CUQ(pool, cuMemHostRegister(addr, len, CU_MEMHOSTREGISTER_PORTABLE |
						     CU_MEMHOSTREGISTER_DEVICEMAP));
	if (ret)
		return ret;
	ret = CUQ(pool, cuMemHostGetDevicePointer(&dev, addr, 0));
	if (!ret) {
		ret = kvmm_dma_ranges_add(&pool->dma, addr, len, dev);
		if (ret > 0)
			return 0;
	}
	pool->api.cuMemHostUnregister(addr);
	return ret;
}

void kvmm_cu_mem_unregister(void *priv, void *addr, size_t len)
{
	struct cuda_pool *pool = priv;

	kvmm_dma_ranges_del(&pool->dma, addr, len);
	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (!is_device_mem(pool, addr))
		pool->api.cuMemHostUnregister(addr);
}

/*
 * The page table, for the kernels: host memory registered on first use
 * (mapped, read-only to the device) and read through that mapping, so
 * every update the core makes is seen without a copy.
 */
int kvmm_cu_table_map(void *priv, const int32_t *table, size_t bytes, void **dev)
{
	struct cuda_pool *pool = priv;
	CUdeviceptr d;
	int ret;

	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (pool->table != table) {
		if (pool->table)
			return -EINVAL;	/* a context has one table for life */
		ret = CUQ(pool, cuMemHostRegister((void *)table, bytes,
						  CU_MEMHOSTREGISTER_PORTABLE |
						  CU_MEMHOSTREGISTER_DEVICEMAP |
						  CU_MEMHOSTREGISTER_READ_ONLY));
		if (ret)
			return ret;
		pool->table = table;
		pool->table_bytes = bytes;
	}
	ret = CUQ(pool, cuMemHostGetDevicePointer(&d, (void *)table, 0));
	if (!ret)
		*dev = (void *)(uintptr_t)d;
	return ret;
}

/*
 * kv_indptr and kv_indices for a batch, from the mapped page table.  The
 * rows and lengths go up through the lane's argument buffers, so the lane
 * is held until the build has run.
 */
int kvmm_cu_kv_indices(void *priv, const struct kvmm_kv_index_job *job)
{
	struct cuda_pool *pool = priv;
	CUstream stream = job->stream;
	struct cuda_lane *lane;
	CUdeviceptr table, drows, dlens;
	uint32_t count = job->count, stride = job->stride, ps = job->page_size;
	uint32_t blocks = count < 65535 ? count : 65535;
	size_t half = ARGS_PAGES * (sizeof(int32_t) + sizeof(uint64_t));
	void *ip[] = { &dlens, &count, &ps, (void *)&job->indptr, (void *)&job->last };
	void *xp[] = { &table, &stride, &drows, (void *)&job->indptr, &count,
		       (void *)&job->indices };
	void *tdev;
	CUstream s;
	int ret;

	if (!pool->kernels)
		return -EOPNOTSUPP;
	if ((size_t)count * sizeof(uint32_t) > half)
		return -E2BIG;
	ret = kvmm_cu_table_map(pool, job->table, job->table_bytes, &tdev);
	if (ret)
		return ret;
	table = (CUdeviceptr)(uintptr_t)tdev;
	lane = lane_get(pool);
	s = stream ? stream : lane->stream;
	drows = lane->dargs;
	dlens = lane->dargs + half;
	memcpy(lane->args, job->rows, count * sizeof(uint32_t));
	memcpy((char *)lane->args + half, job->lens, count * sizeof(uint32_t));
	ret = CUQ(pool, cuMemcpyHtoDAsync(lane->dargs, lane->args, half + count * sizeof(uint32_t), s)) ?:
	      CUQ(pool, cuLaunchKernel(pool->fn_indptr, 1, 1, 1, KVMM_KV_SCAN_THREADS, 1, 1,
				       0, s, ip, NULL)) ?:
	      CUQ(pool, cuLaunchKernel(pool->fn_indices, blocks ? blocks : 1, 1, 1,
				       KVMM_KV_THREADS, 1, 1, 0, s, xp, NULL)) ?:
	      CUQ(pool, cuEventRecord(lane->done, s));
	/* Without a stream of the caller's, the arrays are ready on return. */
	if (!ret && !stream)
		ret = CUQ(pool, cuEventSynchronize(lane->done));
	lane_put(lane);
	return ret;
}

