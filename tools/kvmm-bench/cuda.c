// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/cuda.c - kvmm-bench cuda: the cuda backend's copies
 * against what the GPU itself can do, measured in the same run.
 *
 *   demote/promote  the backend's gather/scatter of a scattered page set
 *                   between its pool and registered (pinned) host memory,
 *                   beside one contiguous pinned copy of the same bytes;
 *   copy engines    the same page set with no_kernels (one cuMemcpyAsync
 *                   per page run, as engines without a gather kernel do);
 *   on the device   the gather kernel into staging in device memory, and
 *                   the scatter back, beside one contiguous device-to-
 *                   device copy of the same bytes (the kernel's own limit,
 *                   with no PCIe in the way);
 *   kv_indices      kvmm_kv_indices() for 256 sequences of 4k tokens.
 *
 * Geometry: 32 layers, 8 KV heads of 128, bf16, page sizes 1, 16 and 64.
 * The references are the driver's own copies, which this file makes
 * directly through the same libcuda.so.1 the backend opens (--driver
 * names another: tests/fakecuda runs the whole bench without a GPU,
 * with meaningless figures).  Without a driver or a device it prints why
 * and exits 0, so `make bench` runs everywhere.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "../../driver/driver.h"

#define CUDA_REPEAT	7

static const struct kvmm_model cuda_model = {
	.layers = 32, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2,
	.attn = KVMM_ATTN_MHA,
};

/* The driver calls the references need (CUresult as int, CUdeviceptr as u64). */
struct drv {
	void *dl;
	int (*alloc)(uint64_t *p, size_t n);
	int (*free)(uint64_t p);
	int (*alloc_host)(void **p, size_t n);
	int (*free_host)(void *p);
	int (*dtoh)(void *h, uint64_t d, size_t n);
	int (*htod)(uint64_t d, const void *h, size_t n);
	int (*dtod)(uint64_t d, uint64_t s, size_t n);
	int (*sync)(void);
	int (*release)(int dev);
	int dev;
	char name[128];		/* cuDeviceGetName's */
	int version;		/* cuDriverGetVersion's, 0 where unknown */
};

/*
 * The references' own hold on the device's primary context, current on
 * this thread: each backend the bench brings up retains and releases it
 * too, and the last release would leave the thread a dead context.
 */
static int drv_open(struct drv *d, const char *lib, int device)
{
	int (*init)(unsigned int), (*get)(int *, int), (*retain)(void **, int);
	int (*set)(void *), (*getname)(char *, int, int), (*version)(int *);
	void *ctx;

	d->dl = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!d->dl)
		return -ENODEV;
	d->alloc = (int (*)(uint64_t *, size_t))dlsym(d->dl, "cuMemAlloc_v2");
	d->free = (int (*)(uint64_t))dlsym(d->dl, "cuMemFree_v2");
	d->alloc_host = (int (*)(void **, size_t))dlsym(d->dl, "cuMemAllocHost_v2");
	d->free_host = (int (*)(void *))dlsym(d->dl, "cuMemFreeHost");
	d->dtoh = (int (*)(void *, uint64_t, size_t))dlsym(d->dl, "cuMemcpyDtoH_v2");
	d->htod = (int (*)(uint64_t, const void *, size_t))dlsym(d->dl, "cuMemcpyHtoD_v2");
	d->dtod = (int (*)(uint64_t, uint64_t, size_t))dlsym(d->dl, "cuMemcpyDtoD_v2");
	d->sync = (int (*)(void))dlsym(d->dl, "cuCtxSynchronize");
	init = (int (*)(unsigned int))dlsym(d->dl, "cuInit");
	get = (int (*)(int *, int))dlsym(d->dl, "cuDeviceGet");
	retain = (int (*)(void **, int))dlsym(d->dl, "cuDevicePrimaryCtxRetain");
	set = (int (*)(void *))dlsym(d->dl, "cuCtxSetCurrent");
	d->release = (int (*)(int))dlsym(d->dl, "cuDevicePrimaryCtxRelease_v2");
	if (!(d->alloc && d->free && d->alloc_host && d->free_host && d->dtoh && d->htod &&
	      d->dtod && d->sync && init && get && retain && set && d->release))
		return -ENODEV;
	if (init(0) || get(&d->dev, device) || retain(&ctx, d->dev))
		return -ENODEV;
	getname = (int (*)(char *, int, int))dlsym(d->dl, "cuDeviceGetName");
	version = (int (*)(int *))dlsym(d->dl, "cuDriverGetVersion");
	if (!getname || getname(d->name, sizeof(d->name), d->dev))
		strcpy(d->name, "unknown");
	if (version && version(&d->version))
		d->version = 0;
	if (set(ctx)) {
		d->release(d->dev);
		return -ENODEV;
	}
	return 0;
}

static void drv_close(struct drv *d)
{
	if (d->release)
		d->release(d->dev);
	dlclose(d->dl);
}

/* Host staging, as a host tier's chunk is: anonymous, prefaulted. */
static char *staging_map(uint64_t bytes)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0x5a, bytes);
	return p;
}

/* One contiguous pinned copy of @bytes each way: median GB/s. */
static int ref_copy(struct drv *d, uint64_t bytes, double *dtoh, double *htod)
{
	double a[CUDA_REPEAT], b[CUDA_REPEAT];
	uint64_t dev = 0;
	void *host = NULL;
	unsigned r;
	int ret;

	ret = d->alloc(&dev, bytes) || d->alloc_host(&host, bytes) ? -ENOMEM : 0;
	for (r = 0; !ret && r < CUDA_REPEAT; r++) {
		uint64_t t0 = now_ns();

		ret = d->dtoh(host, dev, bytes) || d->sync() ? -EIO : 0;
		a[r] = gbps(bytes, (double)(now_ns() - t0));
		t0 = now_ns();
		ret = ret ?: d->htod(dev, host, bytes) || d->sync() ? -EIO : 0;
		b[r] = gbps(bytes, (double)(now_ns() - t0));
	}
	if (host)
		d->free_host(host);
	if (dev)
		d->free(dev);
	*dtoh = ret ? 0 : median(a, CUDA_REPEAT);
	*htod = ret ? 0 : median(b, CUDA_REPEAT);
	return ret;
}

/* One contiguous device-to-device copy of @bytes: median GB/s. */
static int ref_d2d(struct drv *d, uint64_t bytes, double *gb)
{
	double a[CUDA_REPEAT];
	uint64_t src = 0, dst = 0;
	unsigned r;
	int ret;

	ret = d->alloc(&src, bytes) || d->alloc(&dst, bytes) ? -ENOMEM : 0;
	for (r = 0; !ret && r < CUDA_REPEAT; r++) {
		uint64_t t0 = now_ns();

		/* a device-to-device cuMemcpy returns before it is done */
		ret = d->dtod(dst, src, bytes) || d->sync() ? -EIO : 0;
		a[r] = gbps(bytes, (double)(now_ns() - t0));
	}
	if (src)
		d->free(src);
	if (dst)
		d->free(dst);
	*gb = ret ? 0 : median(a, CUDA_REPEAT);
	return ret;
}

/*
 * Gather and scatter of @nr scattered pages: median GB/s each way.  The
 * staging is registered host memory, or with @d device memory from it.
 */
static int move_bench(const struct kvmm_cuda_arg *arg, struct drv *d, uint32_t page_size,
		      uint32_t nr, double *g, double *s, char *why, size_t len)
{
	const struct kvmm_backend_ops *be = kvmm_backend_lookup("cuda");
	uint64_t page = kvmm_page_bytes(&cuda_model, page_size);
	struct kvmm_backend_cfg cfg = { .model = cuda_model, .page_size = page_size,
					.nr_pages = 4 * nr, .tier = KVMM_TIER_DEVICE,
					.arg = (void *)arg, .err = why, .err_len = len };
	double tg[CUDA_REPEAT], ts[CUDA_REPEAT];
	void *priv = NULL, **addr = NULL;
	int32_t *pfns = NULL;
	char *staging = NULL;
	uint64_t dev = 0;
	unsigned r;
	uint32_t i;
	int ret;

	if (!be)
		return -EOPNOTSUPP;
	ret = be->init(&cfg, &priv);
	if (ret)
		return ret;
	if (!d)
		staging = staging_map(page * nr);
	else if (!d->alloc(&dev, page * nr))
		staging = (char *)(uintptr_t)dev;
	pfns = malloc(nr * sizeof(*pfns));
	addr = malloc(nr * sizeof(*addr));
	ret = staging && pfns && addr ? be->mem_register(priv, staging, page * nr) : -ENOMEM;
	if (ret)
		goto out;
	for (i = 0; i < nr; i++) {
		pfns[i] = (int32_t)((i * 2654435761u) % (4 * nr));	/* scattered, distinct */
		addr[i] = staging + page * i;
	}
	for (r = 0; !ret && r < CUDA_REPEAT; r++) {
		uint64_t t0 = now_ns();

		ret = be->gather(priv, pfns, nr, addr);
		tg[r] = gbps(page * nr, (double)(now_ns() - t0));
		t0 = now_ns();
		ret = ret ?: be->scatter(priv, pfns, nr, addr);
		ts[r] = gbps(page * nr, (double)(now_ns() - t0));
	}
	be->mem_unregister(priv, staging, page * nr);
	*g = median(tg, CUDA_REPEAT);
	*s = median(ts, CUDA_REPEAT);
out:
	free(pfns);
	free(addr);
	if (dev)
		d->free(dev);
	else if (staging)
		munmap(staging, page * nr);
	be->exit(priv);
	return ret;
}

/* kvmm_kv_indices() for 256 sequences of 4096 tokens at page size 1: median µs. */
static int indices_bench(const struct kvmm_cuda_arg *arg, struct drv *d, double *us)
{
	struct kvmm_params p = {
		.size = sizeof(p),
		.model = { .layers = 1, .kv_heads = 1, .head_dim = 8, .dtype_bytes = 2,
			   .attn = KVMM_ATTN_MHA },
		.page_size = 1, .nr_pages = 256 * 4096 + 1024, .max_seqs = 256,
		.max_seq_len = 4096, .backend = "cuda", .backend_arg = (void *)arg,
	};
	uint64_t dptr = 0, didx = 0, dlast = 0;
	double t[CUDA_REPEAT];
	struct kvmm_ctx *ctx = NULL;
	uint32_t seqs[256], i;
	unsigned r;
	int ret;

	ret = kvmm_create(&p, &ctx);
	for (i = 0; !ret && i < 256; i++)
		ret = kvmm_seq_open(ctx, 0, &seqs[i]) ?: kvmm_seq_extend(ctx, seqs[i], 4096, 0);
	if (!ret && (d->alloc(&dptr, 257 * 4) || d->alloc(&didx, 256 * 4096 * 4) ||
		     d->alloc(&dlast, 256 * 4)))
		ret = -ENOMEM;
	for (r = 0; !ret && r < CUDA_REPEAT; r++) {
		struct kvmm_kv_batch b = {
			.seqs = seqs, .count = 256, .max_indices = 256 * 4096,
			.indptr = (int32_t *)(uintptr_t)dptr, .indices = (int32_t *)(uintptr_t)didx,
			.last_page_len = (int32_t *)(uintptr_t)dlast,
		};
		uint64_t t0 = now_ns();
		int64_t n = kvmm_kv_indices(ctx, &b);

		t[r] = (double)(now_ns() - t0) / 1e3;
		ret = n < 0 ? (int)n : n == 256 * 4096 ? 0 : -EIO;
	}
	*us = ret ? 0 : median(t, CUDA_REPEAT);
	if (dptr)
		d->free(dptr);
	if (didx)
		d->free(didx);
	if (dlast)
		d->free(dlast);
	kvmm_destroy(ctx);
	return ret;
}

/* One page size's figures, GB/s: the backend, the copy engines alone, on the device. */
struct move_figs {
	uint32_t page_size, pages;
	uint64_t page_bytes;
	double g, s;		/* demote (gather) and promote (scatter) */
	double cg, cs;		/* the same with no_kernels */
	double dg, ds;		/* gather and scatter within device memory */
};

/* The references, GB/s: contiguous pinned DtoH and HtoD, device to device. */
struct ref_figs {
	double dtoh, htod, d2d;
};

/* Fill @m's figures for its page size and pages; @why says what failed. */
static int move_figs(const struct kvmm_cuda_arg *arg, struct drv *d, struct move_figs *m,
		     char *why, size_t why_len)
{
	struct kvmm_cuda_arg ce = *arg;

	ce.no_kernels = true;
	return move_bench(arg, NULL, m->page_size, m->pages, &m->g, &m->s, why, why_len) ?:
	       move_bench(&ce, NULL, m->page_size, m->pages, &m->cg, &m->cs, why, why_len) ?:
	       move_bench(arg, d, m->page_size, m->pages, &m->dg, &m->ds, why, why_len);
}

/* One line of figures for @m: JSON, or a sentence a person reads. */
static void print_move(const struct move_figs *m, const struct ref_figs *ref, bool json)
{
	double kernel_x = m->cg > 0 ? m->g / m->cg : 0.0;

	if (!json) {
		printf("page size %-2u %5u pages: demote %6.2f GB/s (%.2f of pinned DtoH %.2f), "
		       "promote %6.2f GB/s (%.2f of HtoD %.2f); per-run cuMemcpyAsync "
		       "%.2f / %.2f GB/s (kernel %.1fx); on the device %.2f / %.2f GB/s "
		       "(%.2f / %.2f of D2D %.2f)\n",
		       m->page_size, m->pages, m->g, m->g / ref->dtoh, ref->dtoh, m->s,
		       m->s / ref->htod, ref->htod, m->cg, m->cs, kernel_x, m->dg, m->ds,
		       m->dg / ref->d2d, m->ds / ref->d2d, ref->d2d);
		return;
	}
	tool_json_line(json_pack("{s:s,s:s,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
				 "s:o,s:o,s:o,s:o,s:o,s:i}",
		"bench", "cuda", "op", "move", "page_size", (json_int_t)m->page_size,
		"pages", (json_int_t)m->pages, "page_bytes", (json_int_t)m->page_bytes,
		"demote_gbps", tool_json_fixed(m->g, 2),
		"promote_gbps", tool_json_fixed(m->s, 2),
		"pinned_dtoh_gbps", tool_json_fixed(ref->dtoh, 2),
		"pinned_htod_gbps", tool_json_fixed(ref->htod, 2),
		"demote_vs_pinned", tool_json_fixed(m->g / ref->dtoh, 3),
		"promote_vs_pinned", tool_json_fixed(m->s / ref->htod, 3),
		"memcpy_per_run_demote_gbps", tool_json_fixed(m->cg, 2),
		"memcpy_per_run_promote_gbps", tool_json_fixed(m->cs, 2),
		"kernel_vs_memcpy_per_run", tool_json_fixed(kernel_x, 2),
		"gather_dev_gbps", tool_json_fixed(m->dg, 2),
		"scatter_dev_gbps", tool_json_fixed(m->ds, 2),
		"d2d_gbps", tool_json_fixed(ref->d2d, 2),
		"gather_vs_d2d", tool_json_fixed(m->dg / ref->d2d, 3),
		"scatter_vs_d2d", tool_json_fixed(m->ds / ref->d2d, 3),
		"repeat", CUDA_REPEAT), stdout);
}

int cmd_cuda(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "driver", required_argument, NULL, 'd' },
		{ "set-mib", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	static const uint32_t sizes[] = { 1, 16, 64 };
	struct kvmm_cuda_arg arg = { 0 };
	struct ref_figs ref = { 0 };
	uint64_t set = 256ull << 20, big;
	bool json = false;
	char why[256] = "";
	struct drv d = { 0 };
	double rd, ru, us;
	size_t i;
	int opt, ret;

	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j': json = true; break;
		case 'd': arg.driver = optarg; break;
		case 's': set = strtoull(optarg, NULL, 0) << 20; break;
		default:
			fprintf(stderr, "usage: kvmm-bench cuda [--json] [--driver LIB] [--set-mib N]\n");
			return 2;
		}
	}
	ret = drv_open(&d, arg.driver, arg.device);
	if (!ret && move_bench(&arg, NULL, 1, 1, &rd, &ru, why, sizeof(why)) == -ENODEV)
		ret = -ENODEV;
	if (ret) {
		const char *e = dlerror();

		if (!why[0])
			snprintf(why, sizeof(why), "no CUDA driver or device (%s)",
				 e ? e : "the driver found no device");
		if (json)
			tool_json_line(json_pack("{s:s,s:s}", "bench", "cuda", "skipped", why),
				       stdout);
		else
			printf("cuda: skipped: %s\n", why);
		return 0;
	}
	/* a set that holds no page of the largest size measures nothing there */
	big = kvmm_page_bytes(&cuda_model, sizes[sizeof(sizes) / sizeof(sizes[0]) - 1]);
	if (set < big) {
		fprintf(stderr, "cuda: a set of %" PRIu64 " MiB holds no page of %" PRIu64
			" MiB (page size %u): raise --set-mib\n", set >> 20, big >> 20,
			sizes[sizeof(sizes) / sizeof(sizes[0]) - 1]);
		drv_close(&d);
		return 2;
	}
	/* what the figures were measured on, first */
	if (json)
		tool_json_line(json_pack("{s:s,s:s,s:s,s:i}", "bench", "cuda", "op", "device",
					 "device", d.name, "driver_version", d.version), stdout);
	else
		printf("device: %s, driver API %d.%d\n", d.name, d.version / 1000,
		       d.version % 1000 / 10);
	ret = ref_copy(&d, set, &ref.dtoh, &ref.htod) ?: ref_d2d(&d, set, &ref.d2d);
	for (i = 0; !ret && i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct move_figs m = { .page_size = sizes[i],
				       .page_bytes = kvmm_page_bytes(&cuda_model, sizes[i]) };

		m.pages = (uint32_t)(set / m.page_bytes);
		ret = move_figs(&arg, &d, &m, why, sizeof(why));
		if (!ret)
			print_move(&m, &ref, json);
	}
	ret = ret ?: indices_bench(&arg, &d, &us);
	if (!ret) {
		if (json)
			tool_json_line(json_pack("{s:s,s:s,s:i,s:i,s:i,s:o,s:i}", "bench", "cuda",
						 "op", "kv_indices", "seqs", 256, "tokens", 4096,
						 "page_size", 1, "us", tool_json_fixed(us, 1),
						 "repeat", CUDA_REPEAT), stdout);
		else
			printf("kv_indices: 256 sequences of 4096 tokens: %.1f us\n", us);
	}
	drv_close(&d);
	if (ret)
		fprintf(stderr, "cuda: %s%s%s\n", strerror(-ret), why[0] ? ": " : "", why);
	return ret ? 1 : 0;
}
