// SPDX-License-Identifier: MIT
/*
 * driver/mock/mock.c - the mock backend: the KV pool in plain host memory.
 *
 * Laid out exactly as a device pool: per layer one K and one V buffer of
 * nr_pages * page_size slots (one latent buffer for MLA), each slot
 * kv_heads * head_dim * dtype_bytes wide.  Deterministic and free of any
 * device, it is what CI and the tests run on; an engine can also run on it
 * end to end (its "attention" reads and writes the same slots a GPU
 * kernel would).  Each buffer is mapped for max_pages, and memory is
 * taken lazily, only where pages are written.  By default a buffer is
 * private anonymous memory with transparent huge pages (copies run at
 * memcpy speed); a shrink gives the tail back with MADV_DONTNEED and a
 * growth needs nothing.  With kvmm_mock_arg.shareable each buffer is a
 * memfd instead, and the descriptors are what share hands another
 * process, which maps the same bytes (import), as a GPU's exportable
 * allocations are.  A memfd is sized for max_pages once and sealed
 * (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): a client that holds a
 * descriptor can then never truncate memory this process maps, which
 * would make the next access here a SIGBUS.  A shrink punches the tail
 * out (FALLOC_FL_PUNCH_HOLE) instead; a growth needs nothing.  Shared memory
 * gets no huge pages on a default kernel (shmem_enabled "never"), which
 * costs the copies about a quarter of their bandwidth, so it is opt-in.
 *
 * Gather, scatter, copy and the kv_indices build run the kernels' C
 * references (kernels/ref.c), so the engine and the tiers on this backend
 * move exactly the bytes the GPU kernels would.
 *
 * Fault injection (struct kvmm_mock_faults, driver/fault.h, reached
 * through kvmm_mock_arg.faults): fail_init makes init fail;
 * fail_copy/fail_every make chosen gather/scatter calls fail, and
 * fail_resize/fail_share make resize and share fail, for tests of the
 * core's error paths.
 *
 * DMA registration is modelled, not needed: mem_register records ranges,
 * and with kvmm_mock_faults.dma_strict a copy to or from host memory outside
 * them fails as a device's DMA would, so tests prove that every buffer a
 * store hands the backend was registered first (the CUDA backend's
 * contract).  fail_register/fail_register_at fail chosen registrations.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <libkvmm.h>
#include "../backend.h"

struct mock_pool {
	struct kvmm_mock_arg *arg;	/* its faults read live: tests change them */
	uint64_t copies;	/* gather/scatter calls, for fail_every */
	uint32_t registers;	/* mem_register calls, for fail_register_at */
	struct kvmm_dma_ranges dma;
	uint32_t layers;
	uint32_t nr_pages;	/* backed now */
	uint32_t max_pages;	/* mapped */
	uint64_t buf_bytes;	/* nr_pages of one buffer */
	uint64_t max_bytes;	/* max_pages of one buffer */
	struct kvmm_kv_geom geom;	/* every buffer, for kernels/ref.c */
	void **bufs;		/* geom.nbufs buffers, a layer's adjacent */
	int *fds;		/* their memfds; -1 in an imported pool */
};

/* The test's fault knobs, read at every call; NULL in production. */
static struct kvmm_mock_faults *mock_faults(const struct kvmm_mock_arg *arg)
{
	return arg ? arg->faults : NULL;
}

static void mock_exit(void *priv)
{
	struct mock_pool *pool = priv;
	uint32_t i;

	if (!pool)
		return;
	for (i = 0; pool->bufs && i < pool->geom.nbufs; i++) {
		if (pool->bufs[i])
			munmap(pool->bufs[i], pool->max_bytes);
		if (pool->fds[i] >= 0)
			close(pool->fds[i]);
	}
	free(pool->bufs);
	kvmm_dma_ranges_exit(&pool->dma);
	free(pool);
}

/* A pool of @cfg's shape with no buffer yet (fds -1). */
static struct mock_pool *pool_new(const struct kvmm_backend_cfg *cfg)
{
	struct mock_pool *pool = calloc(1, sizeof(*pool));
	uint32_t i;

	if (!pool)
		return NULL;
	kvmm_dma_ranges_init(&pool->dma);
	pool->layers = cfg->model.layers;
	pool->arg = cfg->arg;
	kvmm_kv_geom_of(&cfg->model, cfg->page_size, &pool->geom);
	pool->nr_pages = cfg->nr_pages;
	pool->max_pages = cfg->max_pages > cfg->nr_pages ? cfg->max_pages : cfg->nr_pages;
	pool->buf_bytes = pool->nr_pages * kvmm_kv_run(&pool->geom);
	pool->max_bytes = pool->max_pages * kvmm_kv_run(&pool->geom);
	/* bufs and fds in one block */
	pool->bufs = calloc(pool->geom.nbufs, sizeof(*pool->bufs) + sizeof(*pool->fds));
	if (!pool->bufs) {
		mock_exit(pool);
		return NULL;
	}
	pool->fds = (int *)(pool->bufs + pool->geom.nbufs);
	for (i = 0; i < pool->geom.nbufs; i++)
		pool->fds[i] = -1;
	return pool;
}

/* Map buffer @b from @fd, all max_bytes of it: pages past the file fault. */
static int buf_map(struct mock_pool *pool, uint32_t b, int fd)
{
	void *p = mmap(NULL, pool->max_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	kvmm_hint_huge(p, pool->max_bytes);
	pool->bufs[b] = p;
	return 0;
}

/*
 * Size a shared buffer's memfd for good and seal it: whoever else holds
 * the descriptor can neither shrink it (our mapping would fault) nor grow
 * it, nor lift the seals.
 */
static int memfd_size_and_seal(int fd, uint64_t bytes)
{
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -errno;
	return 0;
}

static int mock_init(const struct kvmm_backend_cfg *cfg, void **privp)
{
	struct kvmm_mock_arg *arg = cfg->arg;
	struct kvmm_mock_faults *f = mock_faults(arg);
	struct mock_pool *pool;
	uint32_t i;
	int ret = 0;

	if (f && f->fail_init)
		return f->fail_init < 0 ? f->fail_init : -EIO;
	pool = pool_new(cfg);
	if (!pool)
		return -ENOMEM;
	for (i = 0; i < pool->geom.nbufs && !ret; i++) {
		if (!arg || !arg->shareable) {
			pool->bufs[i] = kvmm_map_anon(pool->max_bytes);
			ret = pool->bufs[i] ? 0 : -ENOMEM;
			continue;
		}
		pool->fds[i] = memfd_create("kvmm-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		ret = pool->fds[i] < 0 ? -errno : memfd_size_and_seal(pool->fds[i],
								      pool->max_bytes);
		if (!ret)
			ret = buf_map(pool, i, pool->fds[i]);
	}
	if (ret) {
		snprintf(cfg->err, cfg->err_len, "mock: a %llu-byte buffer: %s",
			 (unsigned long long)pool->buf_bytes, strerror(-ret));
		mock_exit(pool);
		return ret;
	}
	*privp = pool;
	return 0;
}

static int mock_kv_layer(void *priv, uint32_t layer, struct kvmm_kv_layer *out)
{
	struct mock_pool *pool = priv;
	uint32_t per = pool->geom.nbufs / pool->layers;

	if (layer >= pool->layers)
		return -EINVAL;
	out->k = pool->bufs[layer * per];
	out->v = per > 1 ? pool->bufs[layer * per + 1] : NULL;
	out->slot_bytes = pool->geom.slot_bytes;
	out->bytes = pool->buf_bytes;
	return 0;
}

/* Should this gather/scatter call fail?  Counts every call. */
static int mock_copy_fault(struct mock_pool *pool)
{
	const struct kvmm_mock_faults *f = mock_faults(pool->arg);
	/* The I/O worker scatters while other copies run: count atomically. */
	uint64_t n = __atomic_add_fetch(&pool->copies, 1, __ATOMIC_RELAXED);

	if (f && f->fail_every && !(n % f->fail_every))
		return f->fail_copy ? f->fail_copy : -EIO;
	return 0;
}

/* With dma_strict: is every page of @host inside one registered range? */
static int mock_dma_check(struct mock_pool *pool, uint32_t nr, void *const *host)
{
	const struct kvmm_mock_faults *f = mock_faults(pool->arg);
	uint64_t bytes = kvmm_kv_page_bytes(&pool->geom);
	uint32_t i;

	if (!f || !f->dma_strict)
		return 0;
	for (i = 0; i < nr; i++)
		if (!kvmm_dma_ranges_find(&pool->dma, host[i], bytes))
			return -EFAULT;
	return 0;
}

static int mock_copy(struct mock_pool *pool, const int32_t *pfns, uint32_t nr,
		     void *const *host, int dir)
{
	int ret = mock_copy_fault(pool) ?: mock_dma_check(pool, nr, host);

	if (!ret)
		kvmm_ref_move(&pool->geom, (char *const *)pool->bufs, pfns, nr,
			      (char *const *)host, dir);
	return ret;
}

static int mock_gather(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst)
{
	struct mock_pool *pool = priv;
	const struct kvmm_mock_faults *f = mock_faults(pool->arg);

	if (f && f->latch)
		f->latch(f->latch_arg);
	return mock_copy(priv, pfns, nr, dst, KVMM_KV_GATHER);
}

static int mock_scatter(void *priv, const int32_t *pfns, uint32_t nr, void *const *src)
{
	return mock_copy(priv, pfns, nr, src, KVMM_KV_SCATTER);
}

/* Plain host memory: no node is nearer than another. */
static int mock_numa_node(void *priv)
{
	(void)priv;
	return -1;
}

static int mock_mem_register(void *priv, void *addr, size_t len)
{
	struct mock_pool *pool = priv;
	struct kvmm_mock_faults *f = mock_faults(pool->arg);
	uint32_t n = __atomic_add_fetch(&pool->registers, 1, __ATOMIC_RELAXED);
	int ret;

	if (f && f->fail_register && (!f->fail_register_at || n == f->fail_register_at))
		return f->fail_register;
	/* Plain memory: the "device" sees it where the host does. */
	ret = kvmm_dma_ranges_add(&pool->dma, addr, len, (uintptr_t)addr);
	if (ret < 0)
		return ret;
	if (f)
		f->dma_ranges = (uint32_t)ret;
	return 0;
}

/* An unknown range is a caller's bug: left counted, so the test sees it. */
static void mock_mem_unregister(void *priv, void *addr, size_t len)
{
	struct mock_pool *pool = priv;
	struct kvmm_mock_faults *f = mock_faults(pool->arg);
	uint32_t left = kvmm_dma_ranges_del(&pool->dma, addr, len);

	if (f)
		f->dma_ranges = left;
}

static int mock_kv_copy(void *priv, const int32_t *src, const int32_t *dst,
			uint32_t nr, uint32_t slots)
{
	struct mock_pool *pool = priv;
	int ret = mock_copy_fault(pool);

	if (!ret)
		kvmm_ref_copy(&pool->geom, (char *const *)pool->bufs, src, dst, nr, slots);
	return ret;
}

static int mock_kv_indices(void *priv, const struct kvmm_kv_index_job *job)
{
	struct mock_pool *pool = priv;
	int ret = mock_copy_fault(pool);

	if (ret)
		return ret;
	if (kvmm_ref_kv_indptr(job->lens, job->count, job->page_size, job->indptr,
			       job->last) < 0)
		return -EOVERFLOW;
	kvmm_ref_kv_indices(job->table, job->stride, job->rows, job->indptr,
			    job->count, job->indices);
	return 0;
}

/* The kernels' references read the page table where it is. */
static int mock_table_map(void *priv, const int32_t *table, size_t bytes, void **dev)
{
	*dev = (void *)table;
	return 0;
}

/* A pretend device of the size the test says (both zero: none). */
static int mock_mem_info(void *arg, uint64_t *total, uint64_t *avail, char *err,
			 size_t err_len)
{
	const struct kvmm_mock_arg *a = arg;

	if (!a || !a->mem_total) {
		snprintf(err, err_len, "mock: no device memory to size from (kvmm_mock_arg.mem_total)");
		return -EOPNOTSUPP;
	}
	*total = a->mem_total;
	*avail = a->mem_avail;
	return 0;
}

static int mock_info(void *priv, char *buf, size_t len)
{
	struct mock_pool *pool = priv;

	return snprintf(buf, len, "mock: host memory, %u buffers of %.1f MiB, "
			"copies by the C reference kernels", pool->geom.nbufs,
			pool->buf_bytes / 1048576.0);
}

/*
 * Pages [0, @nr_pages) backed, the rest given back; nothing moves.  Every
 * buffer is mapped (and a memfd sized) for max_pages: a shrink gives back
 * the whole OS pages past the new end, by punching them out of a sealed
 * memfd or dropping them from anonymous memory; a growth needs nothing.
 */
static int mock_resize(void *priv, uint32_t nr_pages)
{
	struct mock_pool *pool = priv;
	uint64_t bytes = nr_pages * kvmm_kv_run(&pool->geom);
	uint64_t os = (uint64_t)sysconf(_SC_PAGESIZE), tail = (bytes + os - 1) / os * os;
	const struct kvmm_mock_faults *f = mock_faults(pool->arg);
	uint32_t i;
	int ret = 0;

	if (nr_pages > pool->max_pages)
		return -EINVAL;
	if (f && f->fail_resize)
		return f->fail_resize;
	for (i = 0; i < pool->geom.nbufs && !ret; i++) {
		if (tail >= pool->max_bytes || bytes >= pool->buf_bytes)
			break;
		if (pool->fds[i] < 0)
			madvise((char *)pool->bufs[i] + tail, pool->max_bytes - tail, MADV_DONTNEED);
		else if (fallocate(pool->fds[i], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)tail, (off_t)(pool->max_bytes - tail)))
			ret = -errno;	/* pages past the end stay: harmless */
	}
	if (ret)
		return ret;
	pool->nr_pages = nr_pages;
	pool->buf_bytes = bytes;
	return 0;
}

/* One extent per buffer: its memfd, whatever size it has now. */
static int mock_share(void *priv, struct kvmm_share *sh, struct kvmm_share_ext **ext,
		      int **fds)
{
	struct mock_pool *pool = priv;
	const struct kvmm_mock_faults *f = mock_faults(pool->arg);
	uint32_t i;

	if (f && f->fail_share)
		return f->fail_share;
	if (pool->fds[0] < 0)
		return -EOPNOTSUPP;	/* anonymous memory: not shareable */
	*ext = malloc(sizeof(**ext));
	*fds = malloc(pool->geom.nbufs * sizeof(**fds));
	if (!*ext || !*fds)
		goto out_nomem;
	for (i = 0; i < pool->geom.nbufs; i++) {
		(*fds)[i] = fcntl(pool->fds[i], F_DUPFD_CLOEXEC, 0);
		if ((*fds)[i] < 0) {
			while (i--)
				close((*fds)[i]);
			goto out_nomem;
		}
	}
	**ext = (struct kvmm_share_ext){ .first = 0, .pages = pool->nr_pages };
	sh->nbufs = pool->geom.nbufs;
	sh->mapped_pages = pool->nr_pages;
	sh->max_pages = pool->max_pages;
	sh->nr_ext = 1;
	sh->nr_fds = pool->geom.nbufs;
	sh->granularity = (uint64_t)sysconf(_SC_PAGESIZE);
	snprintf(sh->device, sizeof(sh->device), "host");
	return 0;

out_nomem:
	free(*ext);
	free(*fds);
	*ext = NULL;
	*fds = NULL;
	return -ENOMEM;
}

static int mock_import(const struct kvmm_backend_cfg *cfg, const struct kvmm_share *sh,
		       const struct kvmm_share_ext *ext, const int *fds, void **privp)
{
	struct mock_pool *pool;
	uint32_t i;
	int ret = 0;

	if (sh->nr_ext != 1 || ext[0].first || strcmp(sh->device, "host"))
		return -EINVAL;
	pool = pool_new(cfg);
	if (!pool)
		return -ENOMEM;
	for (i = 0; i < pool->geom.nbufs && !ret; i++)
		ret = buf_map(pool, i, fds[i]);
	if (ret) {
		mock_exit(pool);
		return ret;
	}
	*privp = pool;
	return 0;
}

const struct kvmm_backend_ops kvmm_mock_backend = {
	.name = "mock",
	.init = mock_init,
	.exit = mock_exit,
	.kv_layer = mock_kv_layer,
	.gather = mock_gather,
	.scatter = mock_scatter,
	.numa_node = mock_numa_node,
	.mem_register = mock_mem_register,
	.mem_unregister = mock_mem_unregister,
	.copy = mock_kv_copy,
	.kv_indices = mock_kv_indices,
	.table_map = mock_table_map,
	.mem_info = mock_mem_info,
	.info = mock_info,
	.resize = mock_resize,
	.share = mock_share,
	.import = mock_import,
};
