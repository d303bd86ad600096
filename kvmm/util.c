// SPDX-License-Identifier: MIT
/*
 * kvmm/util.c - the bottom of the core, which every other file uses:
 * metadata allocation through the context's hooks (counted in
 * meta_bytes), corruption reports and BUG, the debug invariant walk after
 * an operation (DEBUG=3: the only call out of this file, to check.c), and
 * the sizing of KV from a model's geometry.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

static void *default_alloc(size_t size, void *priv)
{
	(void)priv;
	return malloc(size);
}

static void default_free(void *ptr, size_t size, void *priv)
{
	(void)size;
	(void)priv;
	free(ptr);
}

const struct kvmm_alloc_ops kvmm_default_alloc_ops = {
	.alloc = default_alloc,
	.free = default_free,
};

void *kvmm_malloc(struct kvmm_ctx *ctx, size_t size)
{
	void *p = ctx->alloc->alloc(size, ctx->alloc_priv);

	if (p)	/* keyed jobs allocate off the context's lock */
		__atomic_fetch_add(&ctx->meta_bytes, size, __ATOMIC_RELAXED);
	return p;
}

#define HUGE_BYTES	(2ul << 20)

/*
 * Zeroed metadata.  A block of megabytes from the default allocator (the
 * event buffer: kvmm_set_events()) is asked for transparent huge pages
 * before it is zeroed, so that it faults in by 2 MiB and the writes and
 * reads that sweep it, a few hundred bytes at a time, do not miss the TLB
 * every 4 KiB (five times slower on a VM, with its nested page tables).
 * A hint: a kernel without THP is fine, and an embedder's allocator's
 * memory is left as it gives it.
 */
void *kvmm_zalloc(struct kvmm_ctx *ctx, size_t size)
{
	void *p = kvmm_malloc(ctx, size);
	uintptr_t lo, hi;

	if (!p)
		return NULL;
	if (size >= 2 * HUGE_BYTES && ctx->alloc == &kvmm_default_alloc_ops) {
		lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
		hi = ((uintptr_t)p + size) & ~(uintptr_t)4095;
		madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
	}
	memset(p, 0, size);
	return p;
}

void kvmm_mfree(struct kvmm_ctx *ctx, void *ptr, size_t size)
{
	if (!ptr)
		return;
	__atomic_fetch_sub(&ctx->meta_bytes, size, __ATOMIC_RELAXED);
	ctx->alloc->free(ptr, size, ctx->alloc_priv);
}

/**
 * kvmm_report() - report corruption or a failed check through the log hook
 * @ctx: the context
 * @fmt: printf format of one line, without "kvmm: " or a newline
 */
void kvmm_report(const struct kvmm_ctx *ctx, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (ctx && ctx->params.log)
		ctx->params.log(ctx->params.log_priv, msg);
	else
		fprintf(stderr, "kvmm: %s\n", msg);
}

void kvmm_bug(const struct kvmm_ctx *ctx, const char *cond, const char *file,
	      int line)
{
	kvmm_report(ctx, "BUG: %s at %s:%d", cond, file, line);
	abort();
}

#if KVMM_DEBUG >= 3
void kvmm_debug_check(struct kvmm_ctx *ctx, const char *op)
{
	if (kvmm_check(ctx)) {
		kvmm_report(ctx, "invariant broken after %s", op);
		abort();
	}
}
#endif

/**
 * kvmm_model_cell() - check a geometry and compute its bytes per token
 * @m: the geometry
 * @cellp: out, the bytes of one token's KV across all layers
 * @why: when not NULL, names the refused field on -EINVAL
 * @len: its size
 *
 * Every product is checked for overflow.
 *
 * Return: 0, or -EINVAL.
 */
int kvmm_model_cell(const struct kvmm_model *m, uint64_t *cellp, char *why, size_t len)
{
	uint64_t slot, cell;
	uint32_t nbufs;

#define BAD(...) do { if (why) snprintf(why, len, __VA_ARGS__); return -EINVAL; } while (0)
	if (!m->layers)
		BAD("layers is 0");
	if (!m->dtype_bytes || m->dtype_bytes > 16)
		BAD("dtype_bytes %u is not 1..16", m->dtype_bytes);
	if (m->attn == KVMM_ATTN_MHA) {
		if (!m->kv_heads)
			BAD("kv_heads is 0");
		if (!m->head_dim)
			BAD("head_dim is 0");
		if (m->latent_dim)
			BAD("latent_dim %u given for MHA attention", m->latent_dim);
		if (__builtin_mul_overflow(m->layers, 2u, &nbufs))
			BAD("layers %u: its K and V buffers overflow 32 bits", m->layers);
		if (__builtin_mul_overflow((uint64_t)m->kv_heads, m->head_dim, &slot) ||
		    __builtin_mul_overflow(slot, m->dtype_bytes, &slot) ||
		    __builtin_mul_overflow(slot, nbufs, &cell) || cell > KVMM_MAX_BYTES)
			BAD("kv_heads %u * head_dim %u * dtype_bytes %u * 2 * layers %u: "
			    "the bytes per token exceed 2^63 - 1", m->kv_heads, m->head_dim,
			    m->dtype_bytes, m->layers);
	} else if (m->attn == KVMM_ATTN_MLA) {
		if (!m->latent_dim)
			BAD("latent_dim is 0");
		if (m->kv_heads || m->head_dim)
			BAD("kv_heads/head_dim given for MLA attention");
		slot = (uint64_t)m->latent_dim * m->dtype_bytes;	/* < 2^36 */
		if (__builtin_mul_overflow(slot, m->layers, &cell) || cell > KVMM_MAX_BYTES)
			BAD("latent_dim %u * dtype_bytes %u * layers %u: "
			    "the bytes per token exceed 2^63 - 1", m->latent_dim,
			    m->dtype_bytes, m->layers);
	} else {
		BAD("attn %u is neither MHA nor MLA", m->attn);
	}
#undef BAD
	*cellp = cell;
	return 0;
}

/**
 * kvmm_cell_bytes() - bytes of KV one token occupies across all layers
 * @model: the geometry
 *
 * SGLang's cell size: heads * head_dim * layers * 2 (K and V) * dtype
 * bytes for MHA, latent_dim * layers * dtype bytes for MLA.
 *
 * Return: the size, 0 for a geometry that describes no KV or whose size
 * overflows (kvmm_create() refuses both with -EINVAL).
 */
KVMM_EXPORT uint64_t kvmm_cell_bytes(const struct kvmm_model *model)
{
	uint64_t cell;

	if (!model || kvmm_model_cell(model, &cell, NULL, 0))
		return 0;
	return cell;
}

/**
 * kvmm_page_bytes() - bytes of one page of KV in the staging layout
 * @model: the geometry
 * @page_size: tokens per page
 *
 * Return: the size a lower tier stores per page, 0 for no KV or a size
 * that overflows.
 */
uint64_t kvmm_page_bytes(const struct kvmm_model *model, uint32_t page_size)
{
	uint64_t page;

	if (__builtin_mul_overflow(kvmm_cell_bytes(model), page_size, &page) ||
	    page > KVMM_MAX_BYTES)
		return 0;
	return page;
}

/* Is @m a geometry that describes KV, of a size that fits?  (Also for an imported pool.) */
int kvmm_check_model(const struct kvmm_model *m)
{
	uint64_t cell;

	return kvmm_model_cell(m, &cell, NULL, 0);
}

/**
 * kvmm_set_percent() - set a tunable that is a percentage, 1 .. 100
 * @ctx: the context
 * @name: the tunable, for the report
 * @pct: the value asked for
 * @dst: the field
 *
 * Return: 0, or -EINVAL (reported) outside 1 .. 100, @dst unchanged.
 */
int kvmm_set_percent(struct kvmm_ctx *ctx, const char *name, uint64_t pct, uint32_t *dst)
{
	if (pct < 1 || pct > 100) {
		kvmm_report(ctx, "%s: %llu is not a percentage in 1..100", name,
			    (unsigned long long)pct);
		return -EINVAL;
	}
	*dst = (uint32_t)pct;
	return 0;
}
