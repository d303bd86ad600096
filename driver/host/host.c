// SPDX-License-Identifier: MIT
/*
 * driver/host/host.c - the host tier's store: KV pages in host DRAM.
 *
 * The pages are carved from a few large chunks, each placed on one NUMA
 * node with libnuma (numa_alloc_onnode), so that demotion and promotion
 * copies run against local memory: the node is the one the core asks for
 * (kvmm_params.host_node, else the node nearest the device as its backend
 * reports it, else the node of the CPU that creates the context).  Without
 * libnuma, or where the kernel has no NUMA support, the chunks come from
 * plain anonymous mmap.
 *
 * Each chunk is registered with the backend for DMA (struct kvmm_dma:
 * page-locked, for the CUDA backend) as soon as it is allocated, and
 * unregistered before it is freed; a chunk that cannot be registered
 * fails init, with the reason.
 *
 * Every sealed page's XXH3-64 checksum is kept beside it; verify recomputes
 * it, so a page whose bytes changed after it was written (memory
 * corruption, a stray write, an injected fault) is a miss, never served.
 * fill and copy_out (the keyed store's values) copy and checksum in one
 * pass, a cache-sized piece at a time.
 *
 * Fault injection: kvmm_host_arg.fail_init fails init; flip_every flips a
 * bit in every n-th page verified, before the check.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <libkvmm.h>
#include "autoconf.h"
#include "../backend.h"
#include "../csum/csum.h"

#if CONFIG_KVMM_LIBNUMA
#include <numa.h>

static int numa_max_node_safe(void)
{
	return numa_max_node();
}
#else
static int numa_max_node_safe(void)
{
	return 0;
}
#endif

#define HOST_CHUNK_BYTES	(64ull << 20)

struct host_store {
	uint64_t page_bytes;
	uint32_t nr_pages;
	uint32_t per_chunk;	/* pages in one chunk */
	uint32_t nr_chunks;
	bool numa;		/* chunks came from libnuma */
	uint32_t flip_every;
	uint64_t verified;	/* pages verified, for flip_every */
	uint64_t chunk_bytes;
	char **chunks;
	uint64_t *csum;		/* per page */
	struct kvmm_dma dma;	/* .reg NULL: the backend needs no registration */
	uint32_t nr_reg;	/* leading chunks registered */
};

/* A chunk, on @node where libnuma places it, in huge pages where it can. */
static void *chunk_alloc(struct host_store *hs, int node)
{
#if CONFIG_KVMM_LIBNUMA
	if (hs->numa) {
		void *p = numa_alloc_onnode(hs->chunk_bytes, node);

		if (p)
			kvmm_hint_huge(p, hs->chunk_bytes);
		return p;
	}
#endif
	(void)node;
	return kvmm_map_anon(hs->chunk_bytes);
}

static void chunk_free(struct host_store *hs, void *p)
{
#if CONFIG_KVMM_LIBNUMA
	if (hs->numa) {
		numa_free(p, hs->chunk_bytes);
		return;
	}
#endif
	munmap(p, hs->chunk_bytes);
}

static void host_exit(void *priv)
{
	struct host_store *hs = priv;
	uint32_t i;

	if (!hs)
		return;
	for (i = 0; i < hs->nr_reg; i++)
		hs->dma.unreg(hs->dma.priv, hs->chunks[i], hs->chunk_bytes);
	for (i = 0; hs->chunks && i < hs->nr_chunks; i++)
		if (hs->chunks[i])
			chunk_free(hs, hs->chunks[i]);
	free(hs->chunks);
	free(hs->csum);
	free(hs);
}

/* The node to place chunks on: the one asked for, else this CPU's. */
static int host_node(const struct kvmm_store_cfg *cfg)
{
#if CONFIG_KVMM_LIBNUMA
	int cpu;

	if (cfg->numa_node >= 0)
		return cfg->numa_node;
	cpu = sched_getcpu();
	if (cpu >= 0 && numa_node_of_cpu(cpu) >= 0)
		return numa_node_of_cpu(cpu);
#endif
	return cfg->numa_node >= 0 ? cfg->numa_node : 0;
}

static int host_init(const struct kvmm_store_cfg *cfg, void **privp)
{
	const struct kvmm_host_arg *arg = cfg->arg;
	struct host_store *hs;
	uint32_t i;
	int node, ret;

	if (arg && arg->fail_init)
		return arg->fail_init < 0 ? arg->fail_init : -EIO;
	if (!cfg->page_bytes || !cfg->nr_pages)
		return -EINVAL;
	hs = calloc(1, sizeof(*hs));
	if (!hs)
		return -ENOMEM;
	hs->page_bytes = cfg->page_bytes;
	hs->nr_pages = cfg->nr_pages;
	hs->flip_every = arg ? arg->flip_every : 0;
	hs->per_chunk = cfg->page_bytes >= HOST_CHUNK_BYTES ? 1 :
			(uint32_t)(HOST_CHUNK_BYTES / cfg->page_bytes);
	if (hs->per_chunk > cfg->nr_pages)
		hs->per_chunk = cfg->nr_pages;
	hs->chunk_bytes = hs->per_chunk * cfg->page_bytes;
	hs->nr_chunks = (cfg->nr_pages + hs->per_chunk - 1) / hs->per_chunk;
#if CONFIG_KVMM_LIBNUMA
	hs->numa = numa_available() >= 0;
#endif
	node = host_node(cfg);
	if (hs->numa && node > numa_max_node_safe())
		goto out_inval;
	hs->chunks = calloc(hs->nr_chunks, sizeof(*hs->chunks));
	hs->csum = calloc(hs->nr_pages, sizeof(*hs->csum));
	if (!hs->chunks || !hs->csum)
		goto out_nomem;
	if (cfg->dma)
		hs->dma = *cfg->dma;
	for (i = 0; i < hs->nr_chunks; i++) {
		hs->chunks[i] = chunk_alloc(hs, node);
		if (!hs->chunks[i])
			goto out_nomem;
		if (!hs->dma.reg)
			continue;
		ret = hs->dma.reg(hs->dma.priv, hs->chunks[i], hs->chunk_bytes);
		if (ret) {
			if (cfg->err && cfg->err_len)
				snprintf(cfg->err, cfg->err_len,
					 "cannot register %llu MiB of host memory for DMA: %s",
					 (unsigned long long)(hs->chunk_bytes >> 20), strerror(-ret));
			host_exit(hs);
			return ret;
		}
		hs->nr_reg++;
	}
	*privp = hs;
	return 0;

out_inval:
	host_exit(hs);
	return -EINVAL;
out_nomem:
	host_exit(hs);
	return -ENOMEM;
}

static void *host_page(void *priv, uint32_t pfn)
{
	struct host_store *hs = priv;

	return hs->chunks[pfn / hs->per_chunk] +
	       (uint64_t)(pfn % hs->per_chunk) * hs->page_bytes;
}

/* Flip a bit of @p as flip_every says: a fault for the tests. */
static void host_maybe_flip(struct host_store *hs, unsigned char *p)
{
	uint64_t nth;

	/* Called from the I/O worker too: count atomically. */
	if (hs->flip_every &&
	    !((nth = __atomic_add_fetch(&hs->verified, 1, __ATOMIC_RELAXED)) % hs->flip_every))
		p[nth % hs->page_bytes] ^= 0x10;
}

static void host_seal(void *priv, const int32_t *pfns, uint32_t nr)
{
	struct host_store *hs = priv;
	uint32_t i;

	for (i = 0; i < nr; i++)
		hs->csum[pfns[i]] = kvmm_csum(host_page(hs, (uint32_t)pfns[i]), hs->page_bytes);
}

static uint32_t host_verify(void *priv, const int32_t *pfns, uint32_t nr)
{
	struct host_store *hs = priv;
	uint32_t i;

	for (i = 0; i < nr; i++) {
		unsigned char *p = host_page(hs, (uint32_t)pfns[i]);

		host_maybe_flip(hs, p);
		if (kvmm_csum(p, hs->page_bytes) != hs->csum[pfns[i]])
			break;
	}
	return i;
}


/*
 * What host_seal() recorded for @pfn, for a write to NVMe to check the page
 * against as it copies it (the flip injection happens here then, as it
 * would in host_verify()).
 */
static uint64_t host_sum(void *priv, uint32_t pfn)
{
	struct host_store *hs = priv;

	host_maybe_flip(hs, host_page(hs, pfn));
	return hs->csum[pfn];
}

/* fill and copy_out: the copy and the checksum in one pass (csum.h) */
static void host_fill(void *priv, uint32_t pfn, const void *src, uint64_t len)
{
	struct host_store *hs = priv;

	hs->csum[pfn] = kvmm_csum_fill(host_page(hs, pfn), src, len, hs->page_bytes);
}

static int host_copy_out(void *priv, uint32_t pfn, void *dst, uint64_t len)
{
	struct host_store *hs = priv;
	unsigned char *page = host_page(hs, pfn);

	host_maybe_flip(hs, page);
	return kvmm_csum_copy_out(dst, page, len, hs->page_bytes) == hs->csum[pfn] ? 0 : -EBADMSG;
}

const struct kvmm_store_ops kvmm_host_store = {
	.name = "host",
	.init = host_init,
	.exit = host_exit,
	.page = host_page,
	.seal = host_seal,
	.verify = host_verify,
	.fill = host_fill,
	.copy_out = host_copy_out,
	.sum = host_sum,
};
