// SPDX-License-Identifier: MIT
/*
 * driver/cuda/cuda.c - the cuda backend: the KV pool in GPU memory.
 *
 * DOC: how the pool sits on the GPU
 *
 * Only the Driver API is used, and libcuda.so.1 is opened at run time: the
 * library builds with the toolkit's cuda.h alone, and on a machine with no
 * driver or no device this backend's init fails with -ENODEV and a line
 * saying why, while every other backend works.  Every CUresult is turned
 * into a negative errno by cu_errno() and nowhere else; none leaves this
 * file.
 *
 * The pool is laid out as the mock's and as engines expect: per layer a K
 * and a V buffer (one latent buffer for MLA) of nr_pages * page_size slots.
 * It is built with virtual memory management: one address range is
 * reserved for all buffers at init, max_pages long each, and physical
 * memory is created and mapped into it in extents, one allocation per
 * buffer per extent, each a whole number of "chunks" (the smallest page
 * count whose run in one buffer is a multiple of the allocation
 * granularity).  Growing maps another extent behind the last; nothing
 * moves.  Each allocation is created exportable as a POSIX file
 * descriptor where the device allows it, which is how another process can
 * map the same KV.
 *
 * Copies run on two "lanes", each a non-blocking stream with its own
 * event and argument buffers: gather and scatter under the context lock
 * take one, a scatter from the I/O worker (promotion from NVMe) the other,
 * so the two never wait on each other's arguments.  A copy of a page set
 * is one launch of kvmm_kv_move (kernels/kv.cu), which reads and writes
 * the host tier's registered memory directly; without the kernels (no
 * nvcc at build time, a GPU the fatbin cannot serve, or no_kernels) it is
 * one cuMemcpyAsync per page run instead.  Every copy waits for its event
 * before returning, so the core's contract (the bytes are there when
 * gather returns) holds; stream_wait lets an engine's compute stream wait
 * on the lanes as well.
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
	X(cuPointerGetAttribute) X(cuMemcpyAsync)

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
	struct cuda_lane lane[2];
	struct kvmm_dma_ranges dma;	/* registered host memory */
	const int32_t *table;	/* the page table, registered on first use */
	size_t table_bytes;
	int numa;
};

/**
 * cu_errno() - the one place a CUresult becomes an errno
 * @r: what the driver returned
 *
 * Return: 0 for CUDA_SUCCESS, else a negative errno: -ENODEV when there is
 * no usable driver or device, -ENOMEM when memory ran out, -EINVAL for a
 * rejected argument, -EOPNOTSUPP for an unsupported feature, -ENOEXEC when
 * no kernel image fits the device, -EAGAIN for not ready, -EEXIST/-ENOENT
 * for a host range already/not registered, and -EIO for everything else
 * (launch failures, illegal addresses, ECC errors: the device is suspect).
 */
int kvmm_cu_errno(int r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_DEVICE_NOT_LICENSED:
	case CUDA_ERROR_SYSTEM_NOT_READY:
		return -ENODEV;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_INVALID_CONTEXT:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
	case CUDA_ERROR_NOT_PERMITTED:
		return -EOPNOTSUPP;
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
	case CUDA_ERROR_INVALID_PTX:
	case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
	case CUDA_ERROR_INVALID_IMAGE:
	case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
		return -ENOEXEC;
	case CUDA_ERROR_NOT_READY:
		return -EAGAIN;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return -EEXIST;
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return -ENOENT;
	case CUDA_ERROR_NOT_FOUND:
		return -ENOENT;
	default:
		return -EIO;
	}
}

static void set_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len || *err)
		return;		/* the first reason is the one worth keeping */
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* A failed driver call: its errno, with the driver's words in @err. */
static int cu_fail(const struct cu_api *api, CUresult r, const char *what,
		   char *err, size_t len)
{
	const char *s = NULL;

	if (api->cuGetErrorString)
		api->cuGetErrorString(r, &s);
	set_err(err, len, "cuda: %s: %s (%d)", what, s ? s : "unknown error", (int)r);
	return kvmm_cu_errno(r);
}

#define CU(pool, call, err, len) \
	({ CUresult r_ = (pool)->api.call; \
	   r_ == CUDA_SUCCESS ? 0 : cu_fail(&(pool)->api, r_, STR(call), err, len); })

/* Copy paths have nowhere to write a reason: the errno says enough. */
#define CUQ(pool, call) CU(pool, call, NULL, 0)

/*
 * Open the driver, bring up @device and make its primary context current.
 * -ENODEV, with the reason in @err, when there is no driver or device.
 */
static int cu_open(struct cuda_pool *pool, const struct kvmm_cuda_arg *arg,
		   const char *bus, char *err, size_t len)
{
	const char *lib = arg && arg->driver ? arg->driver : "libcuda.so.1";
	struct cu_api *api = &pool->api;
	int count = 0, ret;

	api->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!api->dl) {
		set_err(err, len, "cuda: no driver: %s", dlerror());
		return -ENODEV;
	}
#define X(f) \
	api->f = (__typeof__(f) *)dlsym(api->dl, STR(f)); \
	if (!api->f) { \
		set_err(err, len, "cuda: %s lacks %s: driver too old", lib, STR(f)); \
		return -ENODEV; \
	}
	CU_FUNCS(X)
#undef X
	ret = CU(pool, cuInit(0), err, len) ?:
	      CU(pool, cuDeviceGetCount(&count), err, len);
	if (ret)
		return ret;
	if (!count) {
		set_err(err, len, "cuda: the driver sees no device");
		return -ENODEV;
	}
	if (bus) {
		if (api->cuDeviceGetByPCIBusId(&pool->dev, bus)) {
			set_err(err, len, "cuda: no device at %s here", bus);
			return -ENODEV;
		}
	} else if (arg && (arg->device < 0 || arg->device >= count)) {
		set_err(err, len, "cuda: no device %d (%d present)", arg->device, count);
		return -ENODEV;
	} else {
		ret = CU(pool, cuDeviceGet(&pool->dev, arg ? arg->device : 0), err, len);
		if (ret)
			return ret;
	}
	ret = CU(pool, cuDevicePrimaryCtxRetain(&pool->cuctx, pool->dev), err, len);
	if (ret)
		return ret;
	return CU(pool, cuCtxSetCurrent(pool->cuctx), err, len);
}

static void cu_close(struct cuda_pool *pool)
{
	if (pool->cuctx)
		pool->api.cuDevicePrimaryCtxRelease(pool->dev);
	if (pool->api.dl)
		dlclose(pool->api.dl);
}

/* The NUMA node of the device's PCI function, from sysfs; -1 if unknown. */
static int cu_numa_node(struct cuda_pool *pool)
{
	char bus[32], path[96], *p;
	int node = -1;
	FILE *f;

	if (pool->api.cuDeviceGetPCIBusId(bus, sizeof(bus), pool->dev))
		return -1;
	for (p = bus; *p; p++)
		*p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static CUdeviceptr buf_base(const struct cuda_pool *pool, uint32_t b)
{
	return pool->va + b * pool->buf_va;
}

static void extent_free(struct cuda_pool *pool, struct cuda_extent *e)
{
	uint64_t run = kvmm_kv_run(&pool->geom);
	uint32_t b;

	for (b = 0; e->h && b < pool->geom.nbufs; b++) {
		if (!e->h[b])
			continue;
		pool->api.cuMemUnmap(buf_base(pool, b) + e->first * run, e->pages * run);
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
static int extent_map(struct cuda_pool *pool, uint32_t pages, const int *fds,
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
		CUdeviceptr at = buf_base(pool, b) + e->first * run;

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
		extent_free(pool, e);
		return ret;
	}
	pool->nr_ext++;
	pool->nr_pages += pages;
	return 0;
}

/* @pages rounded up to whole chunks */
static uint32_t chunks(const struct cuda_pool *pool, uint32_t pages)
{
	return (uint32_t)(((uint64_t)pages + pool->chunk - 1) / pool->chunk * pool->chunk);
}

/*
 * Granularity, chunk and the reservation: address space for @max_pages
 * (rounded up to a chunk) of every buffer.
 */
static int pool_reserve(struct cuda_pool *pool, uint64_t gran, uint32_t max_pages,
			char *err, size_t len)
{
	uint64_t run = kvmm_kv_run(&pool->geom);

	pool->gran = gran;
	/* The fewest pages whose run in one buffer is a multiple of gran. */
	pool->chunk = (uint32_t)(gran / gcd64(run, gran));
	pool->max_pages = chunks(pool, max_pages);
	pool->buf_va = pool->max_pages * run;
	pool->va_bytes = pool->buf_va * pool->geom.nbufs;
	return CU(pool, cuMemAddressReserve(&pool->va, pool->va_bytes, gran, 0, 0), err, len);
}

/*
 * The pool's layout: granularity, chunk, the reservation, the first
 * extent, and the device's table of buffer bases.
 */
static int pool_map(struct cuda_pool *pool, uint32_t nr_pages, uint32_t max_pages,
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
		set_err(err, len, "cuda: %s has no virtual memory management", pool->name);
		return -EOPNOTSUPP;
	}
	if (pool->geom.nbufs > sizeof(bases) / sizeof(bases[0])) {
		set_err(err, len, "cuda: %u buffers is more than this backend maps",
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
	      pool_reserve(pool, gran, max_pages > nr_pages ? max_pages : nr_pages, err, len);
	if (ret)
		return ret;
	ret = extent_map(pool, chunks(pool, nr_pages), NULL, err, len);
	if (ret)
		return ret;
	for (b = 0; b < pool->geom.nbufs; b++)
		bases[b] = buf_base(pool, b);
	ret = CU(pool, cuMemAlloc(&pool->dbufs, pool->geom.nbufs * sizeof(bases[0])), err, len);
	if (ret)
		return ret;
	ret = CU(pool, cuMemcpyHtoDAsync(pool->dbufs, bases,
					 pool->geom.nbufs * sizeof(bases[0]),
					 pool->lane[0].stream), err, len);
	return ret ?: CU(pool, cuEventRecord(pool->lane[0].done, pool->lane[0].stream), err, len) ?:
		      CU(pool, cuEventSynchronize(pool->lane[0].done), err, len);
}

static int lane_init(struct cuda_pool *pool, struct cuda_lane *lane, char *err, size_t len)
{
	/* pfns (int32) and addresses (64-bit) of ARGS_PAGES pages, twice for copy */
	lane->args_bytes = ARGS_PAGES * (sizeof(int32_t) + sizeof(uint64_t)) * 2;
	return CU(pool, cuStreamCreate(&lane->stream, CU_STREAM_NON_BLOCKING), err, len) ?:
	       CU(pool, cuEventCreate(&lane->done, CU_EVENT_DISABLE_TIMING), err, len) ?:
	       CU(pool, cuMemAllocHost(&lane->args, lane->args_bytes), err, len) ?:
	       CU(pool, cuMemAlloc(&lane->dargs, lane->args_bytes), err, len);
}

static void lane_exit(struct cuda_pool *pool, struct cuda_lane *lane)
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
static void kernels_load(struct cuda_pool *pool, const struct kvmm_cuda_arg *arg)
{
#if CONFIG_KVMM_NVCC
	if (arg && arg->no_kernels)
		return;
	if (pool->api.cuModuleLoadData(&pool->mod, kvmm_kv_fatbin))
		return;		/* no image for this GPU: the copy engines serve */
	if (pool->api.cuModuleGetFunction(&pool->fn_move, pool->mod, KVMM_KV_MOVE_FN) ||
	    pool->api.cuModuleGetFunction(&pool->fn_copy, pool->mod, KVMM_KV_COPY_FN) ||
	    pool->api.cuModuleGetFunction(&pool->fn_indptr, pool->mod, KVMM_KV_INDPTR_FN) ||
	    pool->api.cuModuleGetFunction(&pool->fn_indices, pool->mod, KVMM_KV_INDICES_FN))
		return;
	pool->kernels = true;
#else
	(void)pool;
	(void)arg;
#endif
}

static void cuda_exit(void *priv)
{
	struct cuda_pool *pool = priv;
	uint32_t i;

	if (!pool)
		return;
	if (pool->cuctx)
		pool->api.cuCtxSetCurrent(pool->cuctx);
	for (i = 0; i < 2; i++)
		lane_exit(pool, &pool->lane[i]);
	if (pool->cuctx) {
		if (pool->table)
			pool->api.cuMemHostUnregister((void *)pool->table);
		for (i = 0; i < pool->nr_ext; i++)
			extent_free(pool, &pool->ext[i]);
		if (pool->va)
			pool->api.cuMemAddressFree(pool->va, pool->va_bytes);
		if (pool->dbufs)
			pool->api.cuMemFree(pool->dbufs);
		if (pool->mod)
			pool->api.cuModuleUnload(pool->mod);
	}
	kvmm_dma_ranges_exit(&pool->dma);
	free(pool->ext);
	cu_close(pool);
	free(pool);
}

/* A pool of @cfg's shape holding nothing yet (cuda_exit() undoes it). */
static struct cuda_pool *pool_new(const struct kvmm_backend_cfg *cfg)
{
	struct cuda_pool *pool = calloc(1, sizeof(*pool));
	uint32_t i;

	if (!pool)
		return NULL;
	kvmm_dma_ranges_init(&pool->dma);
	for (i = 0; i < 2; i++)
		pthread_mutex_init(&pool->lane[i].lock, NULL);
	pool->layers = cfg->model.layers;
	pool->numa = -1;
	kvmm_kv_geom_of(&cfg->model, cfg->page_size, &pool->geom);
	return pool;
}

static int cuda_init(const struct kvmm_backend_cfg *cfg, void **privp)
{
	const struct kvmm_cuda_arg *arg = cfg->arg;
	struct cuda_pool *pool;
	uint32_t i;
	int ret;

	pool = pool_new(cfg);
	if (!pool)
		return -ENOMEM;
	ret = cu_open(pool, arg, NULL, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	pool->api.cuDeviceGetName(pool->name, sizeof(pool->name), pool->dev);
	ret = CU(pool, cuDeviceGetAttribute(&pool->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
					    pool->dev), cfg->err, cfg->err_len);
	for (i = 0; i < 2 && !ret; i++)
		ret = lane_init(pool, &pool->lane[i], cfg->err, cfg->err_len);
	if (ret)
		goto out;
	ret = pool_map(pool, cfg->nr_pages, cfg->max_pages, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	kernels_load(pool, arg);
	pool->numa = cu_numa_node(pool);
	*privp = pool;
	return 0;
out:
	cuda_exit(pool);
	return ret;
}

/*
 * Map the extents another process shared: the same physical allocations
 * behind a reservation of the same shape.  Only kv_layer, info and exit
 * serve the result (no lanes, no kernels).
 */
static int cuda_import(const struct kvmm_backend_cfg *cfg, const struct kvmm_share *sh,
		       const struct kvmm_share_ext *ext, const int *fds, void **privp)
{
	struct cuda_pool *pool = pool_new(cfg);
	uint64_t run;
	uint32_t i;
	int ret;

	if (!pool)
		return -ENOMEM;
	run = kvmm_kv_run(&pool->geom);
	ret = cu_open(pool, cfg->arg, sh->device, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	pool->api.cuDeviceGetName(pool->name, sizeof(pool->name), pool->dev);
	ret = -EINVAL;
	if (!sh->granularity || sh->nbufs != pool->geom.nbufs)
		goto out;
	for (i = 0; i < sh->nr_ext; i++)
		if (ext[i].pages * run % sh->granularity)
			goto out;
	ret = pool_reserve(pool, sh->granularity, sh->max_pages, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	if (pool->max_pages != sh->max_pages) {
		ret = -EINVAL;
		goto out;
	}
	for (i = 0; i < sh->nr_ext && !ret; i++)
		ret = extent_map(pool, ext[i].pages, fds + (size_t)i * sh->nbufs,
				 cfg->err, cfg->err_len);
	if (ret)
		goto out;
	*privp = pool;
	return 0;
out:
	cuda_exit(pool);
	return ret;
}

static int cuda_kv_layer(void *priv, uint32_t layer, struct kvmm_kv_layer *out)
{
	struct cuda_pool *pool = priv;
	uint32_t per = pool->geom.nbufs / pool->layers;

	if (layer >= pool->layers)
		return -EINVAL;
	out->k = (void *)(uintptr_t)buf_base(pool, layer * per);
	out->v = per > 1 ? (void *)(uintptr_t)buf_base(pool, layer * per + 1) : NULL;
	out->slot_bytes = pool->geom.slot_bytes;
	out->bytes = (uint64_t)pool->nr_pages * kvmm_kv_run(&pool->geom);
	return 0;
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
	uint32_t nbufs = pool->geom.nbufs, i;
	void *params[] = { &pool->dbufs, &nbufs, &run, &dpfn, &daddr, &nr, &dir };
	uint64_t pieces = (run + KVMM_KV_PIECE - 1) / KVMM_KV_PIECE;

	for (i = 0; i < nr; i++) {
		haddr[i] = kvmm_dma_ranges_find(&pool->dma, host[i], page);
		if (!haddr[i])
			return -EFAULT;	/* a store handed us unregistered memory */
		hpfn[i] = pfns[i];
	}
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
			CUdeviceptr d = buf_base(pool, b) + (uint64_t)pfns[i] * run;
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

static int cuda_gather(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst)
{
	return cuda_move(priv, pfns, nr, dst, KVMM_KV_GATHER);
}

static int cuda_scatter(void *priv, const int32_t *pfns, uint32_t nr, void *const *src)
{
	return cuda_move(priv, pfns, nr, src, KVMM_KV_SCATTER);
}

static int cuda_copy(void *priv, const int32_t *src, const int32_t *dst,
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
						buf_base(pool, b) + (uint64_t)dst[i] * run,
						buf_base(pool, b) + (uint64_t)src[i] * run,
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
static bool is_device_mem(struct cuda_pool *pool, const void *addr)
{
	unsigned int type = 0;

	return !pool->api.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
						(CUdeviceptr)(uintptr_t)addr) &&
	       type == CU_MEMORYTYPE_DEVICE;
}

/*
 * Host memory is page-locked and mapped; device memory (staging on the
 * GPU, as a device-to-device baseline or a GPUDirect path would use) needs
 * nothing and is recorded as it is.
 */
static int cuda_mem_register(void *priv, void *addr, size_t len)
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

static void cuda_mem_unregister(void *priv, void *addr, size_t len)
{
	struct cuda_pool *pool = priv;

	kvmm_dma_ranges_del(&pool->dma, addr, len);
	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (!is_device_mem(pool, addr))
		pool->api.cuMemHostUnregister(addr);
}

/*
 * kv_indptr and kv_indices for a batch.  The page table stays in host
 * memory, registered on first use; the kernels read the batch's rows
 * through the mapping.  The rows and lengths go up through the lane's
 * argument buffers, so the lane is held until the build has run.
 */
static int cuda_kv_indices(void *priv, const struct kvmm_kv_index_job *job)
{
	struct cuda_pool *pool = priv;
	CUstream stream = job->stream;
	struct cuda_lane *lane;
	CUdeviceptr table, drows, dlens;
	uint32_t count = job->count, stride = job->stride, ps = job->page_size;
	uint32_t blocks = count < 65535 ? count : 65535;
	size_t half = ARGS_PAGES * (sizeof(int32_t) + sizeof(uint64_t));
	int ret;

	if (!pool->kernels)
		return -EOPNOTSUPP;
	if ((size_t)count * sizeof(uint32_t) > half)
		return -E2BIG;
	if (pool->table != job->table) {
		if (pool->table)
			return -EINVAL;	/* a context has one table for life */
		pool->api.cuCtxSetCurrent(pool->cuctx);
		ret = CUQ(pool, cuMemHostRegister((void *)job->table, job->table_bytes,
						  CU_MEMHOSTREGISTER_PORTABLE |
						  CU_MEMHOSTREGISTER_DEVICEMAP |
						  CU_MEMHOSTREGISTER_READ_ONLY));
		if (ret)
			return ret;
		pool->table = job->table;
		pool->table_bytes = job->table_bytes;
	}
	lane = lane_get(pool);
	ret = CUQ(pool, cuMemHostGetDevicePointer(&table, (void *)job->table, 0));
	if (!ret) {
		void *ip[] = { &dlens, &count, &ps, (void *)&job->indptr, (void *)&job->last };
		void *xp[] = { &table, &stride, &drows, (void *)&job->indptr, &count,
			       (void *)&job->indices };
		CUstream s = stream ? stream : lane->stream;

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
	}
	lane_put(lane);
	return ret;
}

static int cuda_numa_node(void *priv)
{
	return ((struct cuda_pool *)priv)->numa;
}

/* Device memory for sizing, before init: opens the driver for the call. */
static int cuda_mem_info(void *arg, uint64_t *total, uint64_t *avail, char *err,
			 size_t err_len)
{
	struct cuda_pool *pool = calloc(1, sizeof(*pool));
	size_t f = 0, t = 0;
	int ret;

	if (!pool)
		return -ENOMEM;
	ret = cu_open(pool, arg, NULL, err, err_len) ?:
	      CU(pool, cuMemGetInfo(&f, &t), err, err_len);
	cu_close(pool);
	free(pool);
	*total = t;
	*avail = f;
	return ret;
}

/*
 * Map or unmap whole extents so that pages [0, @nr_pages) are backed:
 * growth is one new extent behind the last; shrinking releases the
 * extents wholly above the new end (the first always stays).
 */
static int cuda_resize(void *priv, uint32_t nr_pages)
{
	struct cuda_pool *pool = priv;
	uint32_t want = chunks(pool, nr_pages);

	if (want > pool->max_pages || !nr_pages)
		return -EINVAL;
	pool->api.cuCtxSetCurrent(pool->cuctx);
	if (want > pool->nr_pages)
		return extent_map(pool, want - pool->nr_pages, NULL, NULL, 0);
	while (pool->nr_ext > 1 && pool->ext[pool->nr_ext - 1].first >= want) {
		struct cuda_extent *e = &pool->ext[--pool->nr_ext];

		pool->nr_pages = e->first;
		extent_free(pool, e);
	}
	return 0;
}

/* Every allocation as a POSIX descriptor, extent by extent. */
static int cuda_share(void *priv, struct kvmm_share *sh, struct kvmm_share_ext **ext,
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

static int cuda_info(void *priv, char *buf, size_t len)
{
	struct cuda_pool *pool = priv;
	uint64_t run = kvmm_kv_run(&pool->geom);

	return snprintf(buf, len, "cuda: %s, %u buffers, %u pages mapped of %u reserved "
			"(%.1f MiB each buffer), %u-page chunks (%" PRIu64 " KiB granularity), "
			"copies by %s, numa node %d",
			pool->name, pool->geom.nbufs, pool->nr_pages, pool->max_pages,
			pool->nr_pages * run / 1048576.0, pool->chunk, pool->gran >> 10,
			pool->kernels ? "kernels" : "copy engines", pool->numa);
}

static int cuda_stream_wait(void *priv, void *stream)
{
	struct cuda_pool *pool = priv;
	uint32_t i;
	int ret = 0;

	pool->api.cuCtxSetCurrent(pool->cuctx);
	for (i = 0; i < 2 && !ret; i++)
		ret = CUQ(pool, cuStreamWaitEvent((CUstream)stream, pool->lane[i].done, 0));
	return ret;
}

const struct kvmm_backend_ops kvmm_cuda_backend = {
	.name = "cuda",
	.init = cuda_init,
	.exit = cuda_exit,
	.kv_layer = cuda_kv_layer,
	.gather = cuda_gather,
	.scatter = cuda_scatter,
	.numa_node = cuda_numa_node,
	.mem_register = cuda_mem_register,
	.mem_unregister = cuda_mem_unregister,
	.copy = cuda_copy,
	.kv_indices = cuda_kv_indices,
	.mem_info = cuda_mem_info,
	.info = cuda_info,
	.stream_wait = cuda_stream_wait,
	.resize = cuda_resize,
	.share = cuda_share,
	.import = cuda_import,
};
