// SPDX-License-Identifier: MIT
/*
 * driver/cuda/pool.c - the cuda backend's pool in virtual memory: one
 * reservation for every buffer, extents of physical memory mapped into it
 * as the pool grows and unmapped as it shrinks, and their export as file
 * descriptors so another process can map the same KV (cuda.c's DOC has
 * the layout).
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

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

CUdeviceptr kvmm_cu_buf_base(const struct cuda_pool *pool, uint32_t b)
{
	return pool->va + b * pool->buf_va;
}

void kvmm_cu_extent_free(struct cuda_pool *pool, struct cuda_extent *e)
{
	uint64_t run = kvmm_kv_run(&pool->geom);
	uint32_t b;

	for (b = 0; e->h && b < pool->geom.nbufs; b++) {
		if (!e->h[b])
			continue;
		pool->api.cuMemUnmap(kvmm_cu_buf_base(pool, b) + e->first * run, e->pages * run);
		pool->api.cuMemRelease(e->h[b]);
	}
	free(e->h);
	e->h = NULL;
}

/*
 * Map pages [pool->nr_pages, +pages) of every buffer: one allocation per
 * buffer (created, or imported from @fds[b] when @fds is not NULL), mapped
 * behind the last extent and made accessible.  @pages is a whole number
 * of chunks.  On failure nothing stays mapped.
 */
int kvmm_cu_extent_map(struct cuda_pool *pool, uint32_t pages, const int *fds,
		       char *err, size_t len)
{
	uint64_t run = kvmm_kv_run(&pool->geom), bytes = pages * run;
	CUmemAccessDesc acc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = pool->dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	struct cuda_extent *e, *ext;
	uint32_t b;
	int ret = 0;

	ext = realloc(pool->ext, (pool->nr_ext + 1) * sizeof(*ext));
	if (!ext)
		return -ENOMEM;
	pool->ext = ext;
	e = &ext[pool->nr_ext];
	*e = (struct cuda_extent){ .first = pool->nr_pages, .pages = pages };
	e->h = calloc(pool->geom.nbufs, sizeof(*e->h));
	if (!e->h)
		return -ENOMEM;
	for (b = 0; b < pool->geom.nbufs && !ret; b++) {
		CUdeviceptr at = kvmm_cu_buf_base(pool, b) + e->first * run;

		ret = fds ? CU(pool, cuMemImportFromShareableHandle(&e->h[b],
				(void *)(intptr_t)fds[b], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
				err, len) :
			    CU(pool, cuMemCreate(&e->h[b], bytes, &pool->prop, 0), err, len);
		if (ret)
			break;
		ret = CU(pool, cuMemMap(at, bytes, 0, e->h[b], 0), err, len);
		if (ret) {
			pool->api.cuMemRelease(e->h[b]);
			e->h[b] = 0;
			break;
		}
		ret = CU(pool, cuMemSetAccess(at, bytes, &acc, 1), err, len);
	}
	if (ret) {
		kvmm_cu_extent_free(pool, e);
		return ret;
	}
	pool->nr_ext++;
	pool->nr_pages += pages;
	return 0;
}

/* @pages rounded up to whole chunks */
uint32_t kvmm_cu_chunks(const struct cuda_pool *pool, uint32_t pages)
{
	return (uint32_t)(((uint64_t)pages + pool->chunk - 1) / pool->chunk * pool->chunk);
}

/*
 * Granularity, chunk and the reservation: address space for @max_pages
 * (rounded up to a chunk) of every buffer.
 */
int kvmm_cu_pool_reserve(struct cuda_pool *pool, uint64_t gran, uint32_t max_pages,
			 char *err, size_t len)
{
	uint64_t run = kvmm_kv_run(&pool->geom);

	pool->gran = gran;
	/* The fewest pages whose run in one buffer is a multiple of gran. */
	pool->chunk = (uint32_t)(gran / gcd64(run, gran));
	pool->max_pages = kvmm_cu_chunks(pool, max_pages);
	pool->buf_va = pool->max_pages * run;
	pool->va_bytes = pool->buf_va * pool->geom.nbufs;
	return CU(pool, cuMemAddressReserve(&pool->va, pool->va_bytes, gran, 0, 0), err, len);
}

/*
 * The pool's layout: granularity, chunk, the reservation, the first
 * extent, and the device's table of buffer bases.
 */
int kvmm_cu_pool_map(struct cuda_pool *pool, uint32_t nr_pages, uint32_t max_pages,
		     char *err, size_t len)
{
	CUdeviceptr bases[2 * 1024];
	int vmm = 0, fd_ok = 0, ret;
	size_t gran = 0;
	uint32_t b;

	ret = CU(pool, cuDeviceGetAttribute(&vmm,
			CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, pool->dev), err, len) ?:
	      CU(pool, cuDeviceGetAttribute(&fd_ok,
			CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, pool->dev), err, len);
	if (ret)
		return ret;
	if (!vmm) {
		kvmm_cu_set_err(err, len, "cuda: %s has no virtual memory management", pool->name);
		return -EOPNOTSUPP;
	}
	if (pool->geom.nbufs > sizeof(bases) / sizeof(bases[0])) {
		kvmm_cu_set_err(err, len, "cuda: %u buffers is more than this backend maps",
				pool->geom.nbufs);
		return -EINVAL;
	}
	pool->prop = (CUmemAllocationProp){
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = pool->dev },
		.requestedHandleTypes = fd_ok ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR :
						CU_MEM_HANDLE_TYPE_NONE,
	};
	ret = CU(pool, cuMemGetAllocationGranularity(&gran, &pool->prop,
			CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), err, len) ?:
	      kvmm_cu_pool_reserve(pool, gran, max_pages > nr_pages ? max_pages : nr_pages, err, len);
	if (ret)
		return ret;
	ret = kvmm_cu_extent_map(pool, kvmm_cu_chunks(pool, nr_pages), NULL, err, len);
	if (ret)
		return ret;
	for (b = 0; b < pool->geom.nbufs; b++)
		bases[b] = kvmm_cu_buf_base(pool, b);
	ret = CU(pool, cuMemAlloc(&pool->dbufs, pool->geom.nbufs * sizeof(bases[0])), err, len);
	if (ret)
		return ret;
	ret = CU(pool, cuMemcpyHtoDAsync(pool->dbufs, bases,
					 pool->geom.nbufs * sizeof(bases[0]),
					 pool->lane[0].stream), err, len);
	return ret ?: CU(pool, cuEventRecord(pool->lane[0].done, pool->lane[0].stream), err, len) ?:
		      CU(pool, cuEventSynchronize(pool->lane[0].done), err, len);
}

/*
 * Map or unmap whole extents so that pages [0, @nr_pages) are backed:
 * growth is one new extent behind the last; shrinking releases the
 * extents wholly above the new end (the first always stays).
 */
int kvmm_cu_resize(void *priv, uint32_t nr_pages)
{
	struct cuda_pool *pool = priv;
	uint32_t want = kvmm_cu_chunks(pool, nr_pages);

	if (want > pool->max_pages || !nr_pages)
		return -EINVAL;
	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (want > pool->nr_pages)
		return kvmm_cu_extent_map(pool, want - pool->nr_pages, NULL, NULL, 0);
	while (pool->nr_ext > 1 && pool->ext[pool->nr_ext - 1].first >= want) {
		struct cuda_extent *e = &pool->ext[--pool->nr_ext];

		pool->nr_pages = e->first;
		kvmm_cu_extent_free(pool, e);
	}
	return 0;
}

/* Every allocation as a POSIX descriptor, extent by extent. */
int kvmm_cu_share(void *priv, struct kvmm_share *sh, struct kvmm_share_ext **ext,
		  int **fds)
{
	struct cuda_pool *pool = priv;
	uint32_t nbufs = pool->geom.nbufs, n = 0, e, b;
	int ret = 0;

	if (pool->prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return -EOPNOTSUPP;
	pool->api.cuCtxSetCurrent(pool->cuctx);
	*ext = malloc(pool->nr_ext * sizeof(**ext));
	*fds = malloc((size_t)pool->nr_ext * nbufs * sizeof(**fds));
	if (!*ext || !*fds) {
		ret = -ENOMEM;
		goto out;
	}
	for (e = 0; e < pool->nr_ext && !ret; e++) {
		(*ext)[e] = (struct kvmm_share_ext){ .first = pool->ext[e].first,
						     .pages = pool->ext[e].pages };
		for (b = 0; b < nbufs && !ret; b++) {
			ret = CUQ(pool, cuMemExportToShareableHandle(&(*fds)[n],
					pool->ext[e].h[b], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
			n += !ret;
		}
	}
	if (!ret)
		ret = CUQ(pool, cuDeviceGetPCIBusId(sh->device, sizeof(sh->device), pool->dev));
	if (ret)
		goto out;
	sh->nbufs = nbufs;
	sh->mapped_pages = pool->nr_pages;
	sh->max_pages = pool->max_pages;
	sh->nr_ext = pool->nr_ext;
	sh->nr_fds = n;
	sh->granularity = pool->gran;
	return 0;
out:
	while (n--)
		close((*fds)[n]);
	free(*ext);
	free(*fds);
	*ext = NULL;
	*fds = NULL;
	return ret;
}

