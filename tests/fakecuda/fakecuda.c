// SPDX-License-Identifier: MIT
/*
 * tests/fakecuda/fakecuda.c - a CUDA driver made of host memory, for
 * testing driver/cuda on machines without a GPU.
 *
 * It implements the Driver API entry points the cuda backend opens, with
 * the semantics the backend relies on, in plain memory:
 *   - "device" memory is host memory: cuMemAlloc is malloc, and the
 *     virtual memory calls are the real thing one level down: a
 *     reservation is a PROT_NONE mapping, cuMemCreate a memfd, cuMemMap
 *     maps it there inaccessible, cuMemSetAccess opens it, and a POSIX
 *     file descriptor handle is the memfd itself, so export and import
 *     across processes work as the driver's do;
 *   - streams and events exist but everything completes at once;
 *   - a kernel launch runs the kernel's C reference (kernels/ref.c) on its
 *     arguments, after checking that every address it would touch is
 *     device memory or registered host memory (CUDA_ERROR_ILLEGAL_ADDRESS
 *     otherwise, as the device would fault);
 *   - fakecuda_*() controls: device count, memory figures, failing the
 *     n-th call of any entry point, counting calls and live objects.
 *
 * It proves the backend's bookkeeping, error paths and argument
 * marshalling, never the GPU kernels themselves: those are checked against
 * the same references on a real device (tests/driver/backend_test.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "../../kernels/kv.h"
#include "fakecuda.h"

#define API __attribute__((visibility("default")))

#define MAX_REGIONS	4096
#define GRAN		(64u << 10)	/* small, so tests cross chunk edges */

/* Memory the device can touch. */
struct region {
	uintptr_t start, end;
	int kind;
};

enum { R_DEV, R_HOSTALLOC, R_REGISTERED, R_MAPPED };

struct fake_handle {
	int fd;
	size_t size;
	unsigned long long types;
};

struct fake_fn {
	const char *name;
};

static const struct fake_fn fns[] = {
	{ KVMM_KV_MOVE_FN }, { KVMM_KV_COPY_FN }, { KVMM_KV_INDPTR_FN }, { KVMM_KV_INDICES_FN },
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct region regions[MAX_REGIONS];
static unsigned nr_regions;
static int devices = 1;
static int vmm = 1;
static size_t mem_total = 1ull << 30, mem_free = 3ull << 28;
static long live;
static char fail_fn[64];
static unsigned fail_nth, fail_seen;
static CUresult fail_res;
static struct { char fn[64]; unsigned n; } calls[64];

/* Count the call; fail it if it is the one armed. */
static CUresult enter(const char *name)
{
	CUresult r = CUDA_SUCCESS;
	char fn[64], *v;
	unsigned i;

	/* cuMemAlloc_v2 is cuMemAlloc to the tests */
	strncpy(fn, name, sizeof(fn) - 1);
	fn[sizeof(fn) - 1] = 0;
	v = strstr(fn, "_v");
	if (v)
		*v = 0;
	pthread_mutex_lock(&lock);
	for (i = 0; i < 64 && calls[i].fn[0] && strcmp(calls[i].fn, fn); i++)
		;
	if (i < 64) {
		if (!calls[i].fn[0])
			memcpy(calls[i].fn, fn, sizeof(fn));
		calls[i].n++;
	}
	if (fail_nth && !strcmp(fn, fail_fn) && ++fail_seen == fail_nth) {
		r = fail_res;
		fail_nth = 0;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

#define ENTER() do { CUresult r_ = enter(__func__); if (r_) return r_; } while (0)

static void region_add(uintptr_t start, size_t len, int kind)
{
	pthread_mutex_lock(&lock);
	if (nr_regions < MAX_REGIONS)
		regions[nr_regions++] = (struct region){ start, start + len, kind };
	pthread_mutex_unlock(&lock);
}

static int region_del(uintptr_t start, int kind)
{
	unsigned i;
	int found = 0;

	pthread_mutex_lock(&lock);
	for (i = 0; i < nr_regions; i++) {
		if (regions[i].start == start && regions[i].kind == kind) {
			regions[i] = regions[--nr_regions];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

/* Drop every mapped region inside [start, end). */
static void regions_unmap(uintptr_t start, uintptr_t end)
{
	unsigned i;

	pthread_mutex_lock(&lock);
	for (i = 0; i < nr_regions;) {
		if (regions[i].kind == R_MAPPED && regions[i].start >= start && regions[i].end <= end)
			regions[i] = regions[--nr_regions];
		else
			i++;
	}
	pthread_mutex_unlock(&lock);
}

/* The kind (R_*) of the region holding [a, a + len), or -1 for none. */
static int region_kind(uintptr_t a, uint64_t len)
{
	unsigned i;
	int kind = -1;

	pthread_mutex_lock(&lock);
	for (i = 0; i < nr_regions && kind < 0; i++)
		if (a >= regions[i].start && a + len <= regions[i].end)
			kind = regions[i].kind;
	pthread_mutex_unlock(&lock);
	return kind;
}

/* Can the device touch [a, a + len)? */
static int reachable(uintptr_t a, uint64_t len)
{
	return region_kind(a, len) >= 0;
}

static void live_add(long n)
{
	__atomic_add_fetch(&live, n, __ATOMIC_RELAXED);
}

/* ---- controls ---- */

API void fakecuda_reset(void)
{
	pthread_mutex_lock(&lock);
	devices = 1;
	vmm = 1;
	mem_total = 1ull << 30;
	mem_free = 3ull << 28;
	fail_nth = 0;
	memset(calls, 0, sizeof(calls));
	pthread_mutex_unlock(&lock);
}

API void fakecuda_devices(int n)
{
	devices = n;
}

API void fakecuda_vmm(int on)
{
	vmm = on;
}

API void fakecuda_mem(size_t total, size_t avail)
{
	mem_total = total;
	mem_free = avail;
}

API void fakecuda_fail(const char *fn, unsigned nth, int res)
{
	pthread_mutex_lock(&lock);
	strncpy(fail_fn, fn, sizeof(fail_fn) - 1);
	fail_nth = nth;
	fail_seen = 0;
	fail_res = (CUresult)res;
	pthread_mutex_unlock(&lock);
}

API unsigned fakecuda_calls(const char *fn)
{
	unsigned i, n = 0;

	pthread_mutex_lock(&lock);
	for (i = 0; i < 64 && calls[i].fn[0]; i++)
		if (!strcmp(calls[i].fn, fn))
			n = calls[i].n;
	pthread_mutex_unlock(&lock);
	return n;
}

API long fakecuda_live(void)
{
	return __atomic_load_n(&live, __ATOMIC_RELAXED);
}

/* ---- driver, device, context ---- */

API CUresult cuInit(unsigned int flags)
{
	ENTER();
	return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" :
	     r == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access was encountered" :
	     r == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected" :
	     "fake error";
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	ENTER();
	*n = devices;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	ENTER();
	if (ordinal < 0 || ordinal >= devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	ENTER();
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*v = 4;
		break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*v = vmm;
		break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*v = 1;
		break;
	default:
		*v = 0;
	}
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	strncpy(name, "fakecuda", (size_t)len);
	name[len - 1] = 0;
	return CUDA_SUCCESS;
}

/* Device d sits at bus 0xf0 + d. */
API CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d)
{
	snprintf(bus, (size_t)len, "0000:%02X:00.0", 0xf0 + d);
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *bus)
{
	unsigned b;

	ENTER();
	if (sscanf(bus, "0000:%x:00.0", &b) != 1 || b < 0xf0 || b - 0xf0 >= (unsigned)devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = (CUdevice)(b - 0xf0);
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	ENTER();
	*c = (CUcontext)(uintptr_t)(d + 1);
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	return CUDA_SUCCESS;
}

/* The version of the toolkit this fake was built against. */
API CUresult cuDriverGetVersion(int *v)
{
	ENTER();
	*v = CUDA_VERSION;
	return CUDA_SUCCESS;
}

/* Every copy here is done when its call returns. */
API CUresult cuCtxSynchronize(void)
{
	ENTER();
	return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo(size_t *f, size_t *t)
{
	ENTER();
	*f = mem_free;
	*t = mem_total;
	return CUDA_SUCCESS;
}

/* ---- memory ---- */

API CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
	void *m;

	ENTER();
	if (posix_memalign(&m, 256, n ? n : 1))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	region_add((uintptr_t)m, n, R_DEV);
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemFree(CUdeviceptr p)
{
	if (!region_del((uintptr_t)p, R_DEV))
		return CUDA_ERROR_INVALID_VALUE;
	free((void *)(uintptr_t)p);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost(void **p, size_t n)
{
	ENTER();
	if (posix_memalign(p, 4096, n ? n : 1))
		return CUDA_ERROR_OUT_OF_MEMORY;
	region_add((uintptr_t)*p, n, R_HOSTALLOC);
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void *p)
{
	if (!region_del((uintptr_t)p, R_HOSTALLOC))
		return CUDA_ERROR_INVALID_VALUE;
	free(p);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
	unsigned i;

	ENTER();
	if (!p || !n)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	for (i = 0; i < nr_regions; i++) {
		if (regions[i].kind == R_REGISTERED && (uintptr_t)p < regions[i].end &&
		    (uintptr_t)p + n > regions[i].start) {
			pthread_mutex_unlock(&lock);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	pthread_mutex_unlock(&lock);
	region_add((uintptr_t)p, n, R_REGISTERED);
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemHostUnregister(void *p)
{
	ENTER();
	if (!region_del((uintptr_t)p, R_REGISTERED))
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	live_add(-1);
	return CUDA_SUCCESS;
}

/* Unified addressing: the device sees registered memory where the host does. */
API CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned int flags)
{
	ENTER();
	if (!reachable((uintptr_t)p, 1))
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					   CUmemAllocationGranularity_flags o)
{
	ENTER();
	*g = GRAN;
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
				 CUdeviceptr addr, unsigned long long flags)
{
	void *m;

	ENTER();
	if (!size || size % GRAN)
		return CUDA_ERROR_INVALID_VALUE;
	/* GRAN-aligned: over-reserve, then trim both ends. */
	m = mmap(NULL, size + GRAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	{
		uintptr_t a = ((uintptr_t)m + GRAN - 1) & ~(uintptr_t)(GRAN - 1);

		if (a > (uintptr_t)m)
			munmap(m, a - (uintptr_t)m);
		munmap((void *)(a + size), (uintptr_t)m + GRAN - a);
		*p = (CUdeviceptr)a;
	}
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	regions_unmap((uintptr_t)p, (uintptr_t)p + size);
	munmap((void *)(uintptr_t)p, size);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
			 const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct fake_handle *fh;

	ENTER();
	if (!size || size % GRAN || flags)
		return CUDA_ERROR_INVALID_VALUE;
	fh = calloc(1, sizeof(*fh));
	if (!fh)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fh->fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fh->fd < 0 || ftruncate(fh->fd, (off_t)size)) {
		if (fh->fd >= 0)
			close(fh->fd);
		free(fh);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	fh->size = size;
	fh->types = prop->requestedHandleTypes;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)fh;
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct fake_handle *fh = (struct fake_handle *)(uintptr_t)h;

	if (!fh)
		return CUDA_ERROR_INVALID_VALUE;
	close(fh->fd);
	free(fh);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset,
		      CUmemGenericAllocationHandle h, unsigned long long flags)
{
	struct fake_handle *fh = (struct fake_handle *)(uintptr_t)h;

	ENTER();
	if (!fh || offset || flags || size > fh->size || size % GRAN)
		return CUDA_ERROR_INVALID_VALUE;
	if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fh->fd, 0) ==
	    MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	live_add(1);
	return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	regions_unmap((uintptr_t)p, (uintptr_t)p + size);
	mmap((void *)(uintptr_t)p, size, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc,
			    size_t count)
{
	ENTER();
	if (!count || mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE))
		return CUDA_ERROR_INVALID_VALUE;
	region_add((uintptr_t)p, size, R_MAPPED);
	return CUDA_SUCCESS;
}

API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
					  CUmemAllocationHandleType type,
					  unsigned long long flags)
{
	struct fake_handle *fh = (struct fake_handle *)(uintptr_t)h;

	ENTER();
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !(fh->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_NOT_SUPPORTED;
	*(int *)out = dup(fh->fd);
	return *(int *)out < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
					    CUmemAllocationHandleType type)
{
	int fd = (int)(intptr_t)os;
	struct fake_handle *fh;
	struct stat st;

	ENTER();
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st))
		return CUDA_ERROR_INVALID_VALUE;
	fh = calloc(1, sizeof(*fh));
	if (!fh)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fh->fd = dup(fd);
	fh->size = (size_t)st.st_size;
	fh->types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)fh;
	live_add(1);
	return CUDA_SUCCESS;
}

/* ---- copies, streams, events: all complete at once ---- */

static CUresult copy(uintptr_t dst, uintptr_t src, size_t n, int dev_dst, int dev_src)
{
	if ((dev_dst && !reachable(dst, n)) || (dev_src && !reachable(src, n)))
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
	ENTER();
	return copy((uintptr_t)d, (uintptr_t)h, n, 1, 0);
}

API CUresult cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
	ENTER();
	return copy((uintptr_t)h, (uintptr_t)d, n, 0, 1);
}

API CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s)
{
	ENTER();
	return copy((uintptr_t)d, (uintptr_t)sp, n, 1, 1);
}

/* Unified addressing: both sides must be memory the device reaches. */
API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s)
{
	ENTER();
	return copy((uintptr_t)d, (uintptr_t)sp, n, 1, 1);
}

API CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr sp, size_t n)
{
	ENTER();
	return copy((uintptr_t)d, (uintptr_t)sp, n, 1, 1);
}

/* As the driver: memory it never saw is type 0, not an error. */
API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *a, void **data,
				    CUdeviceptr p)
{
	int kind;

	ENTER();
	if (n != 1 || a[0] != CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
		return CUDA_ERROR_NOT_SUPPORTED;
	kind = region_kind((uintptr_t)p, 1);
	*(unsigned int *)data[0] = kind < 0 ? 0 :
				   kind == R_DEV || kind == R_MAPPED ? CU_MEMORYTYPE_DEVICE :
								       CU_MEMORYTYPE_HOST;
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n)
{
	ENTER();
	return copy((uintptr_t)d, (uintptr_t)h, n, 1, 0);
}

API CUresult cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n)
{
	ENTER();
	return copy((uintptr_t)h, (uintptr_t)d, n, 0, 1);
}

API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	ENTER();
	*s = malloc(1);
	live_add(1);
	return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuStreamDestroy(CUstream s)
{
	free(s);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	ENTER();
	return s && e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	ENTER();
	*e = malloc(1);
	live_add(1);
	return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuEventDestroy(CUevent e)
{
	free(e);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream s)
{
	ENTER();
	return CUDA_SUCCESS;
}

API CUresult cuEventSynchronize(CUevent e)
{
	ENTER();
	return CUDA_SUCCESS;
}

/* ---- modules and kernels ---- */

API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	ENTER();
	if (!image)
		return CUDA_ERROR_INVALID_IMAGE;
	*m = malloc(1);
	live_add(1);
	return *m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuModuleUnload(CUmodule m)
{
	free(m);
	live_add(-1);
	return CUDA_SUCCESS;
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	unsigned i;

	ENTER();
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		if (!strcmp(fns[i].name, name)) {
			*f = (CUfunction)(uintptr_t)&fns[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

#define ARG(i, type)	(*(type *)params[i])
#define PTR(i, type)	((type)(uintptr_t)ARG(i, CUdeviceptr))

static CUresult launch_move(void **params)
{
	char *const *bufs = PTR(0, char *const *);
	uint32_t nbufs = ARG(1, uint32_t), nr = ARG(5, uint32_t), i, b;
	uint64_t run = ARG(2, uint64_t);
	const int32_t *pfns = PTR(3, const int32_t *);
	char *const *host = PTR(4, char *const *);
	struct kvmm_kv_geom g = { nbufs, 1, run };

	if (!reachable((uintptr_t)bufs, nbufs * sizeof(*bufs)) ||
	    !reachable((uintptr_t)pfns, nr * sizeof(*pfns)) ||
	    !reachable((uintptr_t)host, nr * sizeof(*host)))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (i = 0; i < nr; i++) {
		if (pfns[i] < 0 || !reachable((uintptr_t)host[i], nbufs * run))
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		for (b = 0; b < nbufs; b++)
			if (!reachable((uintptr_t)bufs[b] + pfns[i] * run, run))
				return CUDA_ERROR_ILLEGAL_ADDRESS;
	}
	kvmm_ref_move(&g, bufs, pfns, nr, host, ARG(6, int));
	return CUDA_SUCCESS;
}

static CUresult launch_copy(void **params)
{
	char *const *bufs = PTR(0, char *const *);
	uint32_t nbufs = ARG(1, uint32_t), nr = ARG(6, uint32_t), i, b;
	uint64_t run = ARG(2, uint64_t), bytes = ARG(3, uint64_t);
	const int32_t *src = PTR(4, const int32_t *), *dst = PTR(5, const int32_t *);
	struct kvmm_kv_geom g = { nbufs, (uint32_t)run, 1 };

	if (!reachable((uintptr_t)src, nr * 4) || !reachable((uintptr_t)dst, nr * 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (i = 0; i < nr; i++)
		for (b = 0; b < nbufs; b++)
			if (!reachable((uintptr_t)bufs[b] + src[i] * run, bytes) ||
			    !reachable((uintptr_t)bufs[b] + dst[i] * run, bytes))
				return CUDA_ERROR_ILLEGAL_ADDRESS;
	kvmm_ref_copy(&g, bufs, src, dst, nr, (uint32_t)bytes);
	return CUDA_SUCCESS;
}

static CUresult launch_indptr(void **params)
{
	const uint32_t *lens = PTR(0, const uint32_t *);
	uint32_t count = ARG(1, uint32_t), ps = ARG(2, uint32_t);
	int32_t *indptr = PTR(3, int32_t *), *last = PTR(4, int32_t *);

	if (!reachable((uintptr_t)lens, count * 4) || !reachable((uintptr_t)indptr, count * 4 + 4) ||
	    (count && !reachable((uintptr_t)last, count * 4)))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	kvmm_ref_kv_indptr(lens, count, ps, indptr, last);
	return CUDA_SUCCESS;
}

static CUresult launch_indices(void **params)
{
	const int32_t *table = PTR(0, const int32_t *);
	uint32_t stride = ARG(1, uint32_t), count = ARG(4, uint32_t), i;
	const uint32_t *rows = PTR(2, const uint32_t *);
	const int32_t *indptr = PTR(3, const int32_t *);
	int32_t *indices = PTR(5, int32_t *);

	for (i = 0; i < count; i++) {
		uint64_t n = (uint64_t)(indptr[i + 1] - indptr[i]) * 4;

		if (!reachable((uintptr_t)(table + (uint64_t)rows[i] * stride), n) ||
		    (n && !reachable((uintptr_t)(indices + indptr[i]), n)))
			return CUDA_ERROR_ILLEGAL_ADDRESS;
	}
	kvmm_ref_kv_indices(table, stride, rows, indptr, count, indices);
	return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			    CUstream s, void **params, void **extra)
{
	const struct fake_fn *fn = (const struct fake_fn *)f;

	ENTER();
	if (!fn || !params || !gx || !bx || bx > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	if (!strcmp(fn->name, KVMM_KV_MOVE_FN))
		return launch_move(params);
	if (!strcmp(fn->name, KVMM_KV_COPY_FN))
		return launch_copy(params);
	if (!strcmp(fn->name, KVMM_KV_INDPTR_FN))
		return launch_indptr(params);
	return launch_indices(params);
}
