// SPDX-License-Identifier: MIT
/*
 * driver/backend.c - the table of backends compiled into this build.
 *
 * The core asks for a backend by name and talks to it only through
 * struct kvmm_backend_ops; it never includes a backend's header.  A
 * backend that needs a feature the build lacks is left out of the table
 * by the generated config, so asking for it gives -EOPNOTSUPP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <libkvmm.h>
#include "autoconf.h"
#include "backend.h"

#define KVMM_EXPORT __attribute__((visibility("default")))

static const struct kvmm_backend_ops *const backends[] = {
	&kvmm_mock_backend,
#if CONFIG_KVMM_CUDA_H
	&kvmm_cuda_backend,
#endif
};

/**
 * kvmm_backend_lookup() - find a backend by name
 * @name: e.g. "mock"
 *
 * Return: its ops, or NULL when this build has no such backend.
 */
const struct kvmm_backend_ops *kvmm_backend_lookup(const char *name)
{
	size_t i;

	for (i = 0; name && i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

/**
 * kvmm_backend_available() - is there a backend of this name in this build
 * @name: e.g. "mock" or "cuda"
 *
 * What kvmm_params.backend may name; an embedder or a tool can check a
 * name given to it before it builds a context.
 *
 * Return: true when kvmm_create() would find the backend.
 */
KVMM_EXPORT bool kvmm_backend_available(const char *name)
{
	return kvmm_backend_lookup(name) != NULL;
}

/**
 * kvmm_store_lookup() - the store that holds the pages of a lower tier
 * @tier: KVMM_TIER_HOST or KVMM_TIER_NVME
 *
 * Return: its ops, or NULL when this build has none for @tier (the NVMe
 * store needs liburing).
 */
const struct kvmm_store_ops *kvmm_store_lookup(uint32_t tier)
{
	if (tier == KVMM_TIER_HOST)
		return &kvmm_host_store;
#if CONFIG_KVMM_LIBURING
	if (tier == KVMM_TIER_NVME)
		return &kvmm_nvme_store;
#endif
	return NULL;
}

/**
 * kvmm_remote_lookup() - a remote tier's client by name
 * @name: "redis" (a Redis Cluster, or Valkey)
 *
 * Return: its ops, or NULL when this build has none of that name (the
 * Redis one needs hiredis).
 */
const struct kvmm_remote_ops *kvmm_remote_lookup(const char *name)
{
#if CONFIG_KVMM_HIREDIS
	if (name && !strcmp(name, "redis"))
		return &kvmm_remote_redis;
#endif
	return NULL;
}

/**
 * kvmm_hint_huge() - ask for transparent huge pages under a large buffer
 * @p: page aligned
 * @bytes: its length
 *
 * Pools and tiers copy pages scattered over them: with 4 KiB pages every
 * slot run would be a TLB miss.  A hint only: a kernel without THP is fine.
 */
void kvmm_hint_huge(void *p, uint64_t bytes)
{
	madvise(p, bytes, MADV_HUGEPAGE);
}

/**
 * kvmm_map_anon() - zeroed memory for a pool or a tier, mapped lazily
 * @bytes: how much
 *
 * Return: the mapping (with kvmm_hint_huge()), or NULL; munmap() frees it.
 */
void *kvmm_map_anon(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	kvmm_hint_huge(p, bytes);
	return p;
}

/**
 * kvmm_kv_geom_of() - a pool's shape as the kernels see it
 * @m: the model
 * @page_size: tokens per page
 * @g: out: every buffer of every layer (K and V for MHA, the latent for
 *	MLA), and the bytes of one slot in one buffer
 */
void kvmm_kv_geom_of(const struct kvmm_model *m, uint32_t page_size,
		     struct kvmm_kv_geom *g)
{
	g->page_size = page_size;
	if (m->attn == KVMM_ATTN_MLA) {
		g->nbufs = m->layers;
		g->slot_bytes = (uint64_t)m->latent_dim * m->dtype_bytes;
	} else {
		g->nbufs = m->layers * 2;
		g->slot_bytes = (uint64_t)m->kv_heads * m->head_dim * m->dtype_bytes;
	}
}

void kvmm_dma_ranges_init(struct kvmm_dma_ranges *rs)
{
	memset(rs, 0, sizeof(*rs));
	pthread_mutex_init(&rs->lock, NULL);
}

/* A store unregisters its ranges before the backend exits; any left are its leak. */
void kvmm_dma_ranges_exit(struct kvmm_dma_ranges *rs)
{
	free(rs->r);
	pthread_mutex_destroy(&rs->lock);
}

/**
 * kvmm_dma_ranges_add() - record registered host memory
 * @rs: the table
 * @addr: its start
 * @len: its length
 * @dev: where the device sees @addr
 *
 * Return: the number of ranges now, or -EINVAL for an empty range or
 * -ENOMEM.
 */
int kvmm_dma_ranges_add(struct kvmm_dma_ranges *rs, void *addr, size_t len, uint64_t dev)
{
	int ret = 0;

	if (!addr || !len)
		return -EINVAL;
	pthread_mutex_lock(&rs->lock);
	if (rs->nr == rs->max) {
		uint32_t max = rs->max ? 2 * rs->max : 8;
		struct kvmm_dma_range *r = realloc(rs->r, max * sizeof(*r));

		if (r) {
			rs->r = r;
			rs->max = max;
		} else {
			ret = -ENOMEM;
		}
	}
	if (!ret) {
		rs->r[rs->nr++] = (struct kvmm_dma_range){ (uintptr_t)addr,
							   (uintptr_t)addr + len, dev };
		ret = (int)rs->nr;
	}
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

/*
 * kvmm_dma_ranges_del() - forget the range registered as [@addr, +@len);
 * an unknown range is left alone.  Return: the ranges left.
 */
uint32_t kvmm_dma_ranges_del(struct kvmm_dma_ranges *rs, void *addr, size_t len)
{
	uint32_t i, nr;

	pthread_mutex_lock(&rs->lock);
	for (i = 0; i < rs->nr; i++) {
		if (rs->r[i].start == (uintptr_t)addr && rs->r[i].end == (uintptr_t)addr + len) {
			rs->r[i] = rs->r[--rs->nr];
			break;
		}
	}
	nr = rs->nr;
	pthread_mutex_unlock(&rs->lock);
	return nr;
}

/*
 * kvmm_dma_ranges_find_many() - where the device sees each of @n ranges
 * of @bytes at @addr[i], into @dev[i]; each must lie inside one
 * registered range.  One hold of the lock for the batch, and the last
 * hit is tried first (a batch's staging pages mostly share a range): a
 * launch of thousands of small pages pays nanoseconds a page, not a lock.
 * Return: true when every one was found.
 */
bool kvmm_dma_ranges_find_many(struct kvmm_dma_ranges *rs, void *const *addr, uint32_t n,
			       uint64_t bytes, uint64_t *dev)
{
	const struct kvmm_dma_range *hit = NULL;
	uint32_t i, j;

	pthread_mutex_lock(&rs->lock);
	for (i = 0; i < n; i++) {
		uintptr_t a = (uintptr_t)addr[i];

		if (!hit || a < hit->start || a + bytes > hit->end) {
			for (hit = NULL, j = 0; j < rs->nr && !hit; j++)
				if (a >= rs->r[j].start && a + bytes <= rs->r[j].end)
					hit = &rs->r[j];
			if (!hit)
				break;
		}
		dev[i] = hit->dev + (a - hit->start);
	}
	pthread_mutex_unlock(&rs->lock);
	return i == n;
}

/*
 * kvmm_dma_ranges_find() - where the device sees [@addr, +@bytes), which
 * must lie inside one registered range.  Return: that address, or 0.
 */
uint64_t kvmm_dma_ranges_find(struct kvmm_dma_ranges *rs, const void *addr, uint64_t bytes)
{
	void *a = (void *)addr;
	uint64_t dev = 0;

	return kvmm_dma_ranges_find_many(rs, &a, 1, bytes, &dev) ? dev : 0;
}
