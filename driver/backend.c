// SPDX-License-Identifier: MIT
/*
 * driver/backend.c - the table of backends compiled into this build.
 *
 * The core asks for a backend by name and talks to it only through
 * struct kvmm_backend_ops; it never includes a backend's header.  A
 * backend that needs a feature the build lacks is left out of the table
 * by the generated config, so asking for it gives -EOPNOTSUPP.
 */
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
KVMM_EXPORT const struct kvmm_backend_ops *kvmm_backend_lookup(const char *name)
{
	size_t i;

	for (i = 0; name && i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

/**
 * kvmm_store_lookup() - the store that holds the pages of a lower tier
 * @tier: KVMM_TIER_HOST or KVMM_TIER_NVME
 *
 * Return: its ops, or NULL when this build has none for @tier (the NVMe
 * store needs liburing).
 */
KVMM_EXPORT const struct kvmm_store_ops *kvmm_store_lookup(uint32_t tier)
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
