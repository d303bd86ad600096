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
 * into a negative errno by cu_errno() and nowhere else; none leaves the
 * files of driver/cuda/ (this one: the shim and the lifecycle; pool.c: the
 * mapped memory; copy.c: the lanes and copies).
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
#include "internal.h"

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

void kvmm_cu_set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len || *err)
		return;		/* the first reason is the one worth keeping */
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* A failed driver call: its errno, with the driver's words in @err. */
int kvmm_cu_fail(const struct cu_api *api, CUresult r, const char *what,
		 char *err, size_t len)
{
	const char *s = NULL;

	if (api->cuGetErrorString)
		api->cuGetErrorString(r, &s);
	kvmm_cu_set_err(err, len, "cuda: %s: %s (%d)", what, s ? s : "unknown error", (int)r);
	return kvmm_cu_errno(r);
}


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
		kvmm_cu_set_err(err, len, "cuda: no driver: %s", dlerror());
		return -ENODEV;
	}
#define X(f) \
	api->f = (__typeof__(f) *)dlsym(api->dl, STR(f)); \
	if (!api->f) { \
		kvmm_cu_set_err(err, len, "cuda: %s lacks %s: driver too old", lib, STR(f)); \
		return -ENODEV; \
	}
	CU_FUNCS(X)
#undef X
	ret = CU(pool, cuInit(0), err, len) ?:
	      CU(pool, cuDeviceGetCount(&count), err, len);
	if (ret)
		return ret;
	if (!count) {
		kvmm_cu_set_err(err, len, "cuda: the driver sees no device");
		return -ENODEV;
	}
	if (bus) {
		if (api->cuDeviceGetByPCIBusId(&pool->dev, bus)) {
			kvmm_cu_set_err(err, len, "cuda: no device at %s here", bus);
			return -ENODEV;
		}
	} else if (arg && (arg->device < 0 || arg->device >= count)) {
		kvmm_cu_set_err(err, len, "cuda: no device %d (%d present)", arg->device, count);
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

static void cuda_exit(void *priv)
{
	struct cuda_pool *pool = priv;
	uint32_t i;

	if (!pool)
		return;
	if (pool->cuctx)
		pool->api.cuCtxSetCurrent(pool->cuctx);
	for (i = 0; i < 2; i++)
		kvmm_cu_lane_exit(pool, &pool->lane[i]);
	if (pool->cuctx) {
		if (pool->table)
			pool->api.cuMemHostUnregister((void *)pool->table);
		for (i = 0; i < pool->nr_ext; i++)
			kvmm_cu_extent_free(pool, &pool->ext[i]);
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
		ret = kvmm_cu_lane_init(pool, &pool->lane[i], cfg->err, cfg->err_len);
	if (ret)
		goto out;
	ret = kvmm_cu_pool_map(pool, cfg->nr_pages, cfg->max_pages, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	kvmm_cu_kernels_load(pool, arg);
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
	ret = kvmm_cu_pool_reserve(pool, sh->granularity, sh->max_pages, cfg->err, cfg->err_len);
	if (ret)
		goto out;
	if (pool->max_pages != sh->max_pages) {
		ret = -EINVAL;
		goto out;
	}
	for (i = 0; i < sh->nr_ext && !ret; i++)
		ret = kvmm_cu_extent_map(pool, ext[i].pages, fds + (size_t)i * sh->nbufs,
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
	out->k = (void *)(uintptr_t)kvmm_cu_buf_base(pool, layer * per);
	out->v = per > 1 ? (void *)(uintptr_t)kvmm_cu_buf_base(pool, layer * per + 1) : NULL;
	out->slot_bytes = pool->geom.slot_bytes;
	out->bytes = (uint64_t)pool->nr_pages * kvmm_kv_run(&pool->geom);
	return 0;
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

static int cuda_info(void *priv, char *buf, size_t len)
{
	struct cuda_pool *pool = priv;
	uint64_t run = kvmm_kv_run(&pool->geom);

	const char *why = NULL;

	if (pool->kernels_err && pool->api.cuGetErrorString)
		pool->api.cuGetErrorString((CUresult)pool->kernels_err, &why);
	return snprintf(buf, len, "cuda: %s, %u buffers, %u pages mapped of %u reserved "
			"(%.1f MiB each buffer), %u-page chunks (%" PRIu64 " KiB granularity), "
			"copies by %s%s%s%s, numa node %d",
			pool->name, pool->geom.nbufs, pool->nr_pages, pool->max_pages,
			pool->nr_pages * run / 1048576.0, pool->chunk, pool->gran >> 10,
			pool->kernels ? "kernels" : "copy engines",
			pool->kernels_err ? " (kernels: " : "",
			pool->kernels_err ? (why ? why : "load failed") : "",
			pool->kernels_err ? ")" : "", pool->numa);
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
	.gather = kvmm_cu_gather,
	.scatter = kvmm_cu_scatter,
	.numa_node = cuda_numa_node,
	.mem_register = kvmm_cu_mem_register,
	.mem_unregister = kvmm_cu_mem_unregister,
	.copy = kvmm_cu_copy,
	.kv_indices = kvmm_cu_kv_indices,
	.table_map = kvmm_cu_table_map,
	.mem_info = cuda_mem_info,
	.info = cuda_info,
	.stream_wait = cuda_stream_wait,
	.resize = kvmm_cu_resize,
	.share = kvmm_cu_share,
	.import = cuda_import,
};
