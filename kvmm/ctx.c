// SPDX-License-Identifier: MIT
/*
 * kvmm/ctx.c - creating and destroying a context: its parameters checked,
 * its pool sized, its parts set up and torn down, and the tunables kept
 * on the context itself.
 *
 * A context owns everything: the zone, the tree, the page table and the
 * backend's pool.  There is no global state, so an engine may run one
 * context per GPU, or one per model on the same GPU.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/*
 * Report a refused parameter through @p's log hook (there is no context
 * yet), naming the field and the rule; return @err.
 */
static int __attribute__((format(printf, 3, 4)))
params_refuse(const struct kvmm_params *p, int err, const char *fmt, ...)
{
	struct kvmm_ctx *tmp = calloc(1, sizeof(*tmp));
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (tmp)
		tmp->params = *p;
	kvmm_report(tmp, "create: %s", msg);
	free(tmp);
	return err;
}

#define params_bad(p, ...)	params_refuse(p, -EINVAL, __VA_ARGS__)

/* @pages pages of @page_bytes each: does the tier's size fit? */
static int params_tier_bytes(const struct kvmm_params *p, const char *field,
			     uint64_t pages, uint64_t page_bytes)
{
	uint64_t bytes;

	if (__builtin_mul_overflow(pages, page_bytes, &bytes) || bytes > KVMM_MAX_BYTES)
		return params_bad(p, "%s %llu * %llu bytes per page overflows the largest size (2^63 - 1)",
				  field, (unsigned long long)pages,
				  (unsigned long long)page_bytes);
	return 0;
}

/* Pages of the pool: explicit, or SGLang's budget formula. */
static int params_nr_pages(const struct kvmm_params *p, uint64_t page_bytes, uint32_t *nrp)
{
	uint64_t budget, reserved, nr;

	if (p->nr_pages) {
		if (p->mem_total || p->mem_avail || p->mem_fraction != 0.0)
			return params_bad(p, "nr_pages: give nr_pages or mem_fraction sizing "
					  "(mem_total, mem_avail, mem_fraction), not both");
		*nrp = p->nr_pages;
		if (p->nr_pages > KVMM_MAX_PAGES ||
		    (uint64_t)p->nr_pages * p->page_size > KVMM_MAX_SLOTS)
			return params_bad(p, "nr_pages %u: at most %u pages and %llu slots "
					  "(nr_pages * page_size)", p->nr_pages, KVMM_MAX_PAGES,
					  (unsigned long long)KVMM_MAX_SLOTS);
		return 0;
	}
	if (!(p->mem_fraction > 0.0 && p->mem_fraction <= 1.0))
		return params_bad(p, "nr_pages: give nr_pages, or mem_fraction in (0, 1] "
				  "(%g) with mem_total and mem_avail", p->mem_fraction);
	if (!p->mem_avail || p->mem_avail > p->mem_total)
		return params_bad(p, "mem_avail %llu: 0 < mem_avail <= mem_total (%llu)",
				  (unsigned long long)p->mem_avail,
				  (unsigned long long)p->mem_total);
	reserved = (uint64_t)((double)p->mem_total * (1.0 - p->mem_fraction));
	if (p->mem_avail <= reserved)
		return params_refuse(p, -ENOSPC, "mem_fraction %g: mem_avail %llu leaves nothing "
				     "above the %llu bytes mem_total * (1 - mem_fraction) keeps",
				     p->mem_fraction, (unsigned long long)p->mem_avail,
				     (unsigned long long)reserved);
	budget = p->mem_avail - reserved;
	nr = budget / page_bytes;	/* page_bytes != 0: params_geometry() */
	if (!nr)
		return params_refuse(p, -ENOSPC, "mem_fraction %g: its budget of %llu bytes "
				     "holds no page of %llu bytes", p->mem_fraction,
				     (unsigned long long)budget, (unsigned long long)page_bytes);
	if (nr > KVMM_MAX_SLOTS / p->page_size)
		nr = KVMM_MAX_SLOTS / p->page_size;
	*nrp = nr > KVMM_MAX_PAGES ? KVMM_MAX_PAGES : (uint32_t)nr;
	return 0;
}

/* The model and the page size; *@page_bytes: the bytes of one page. */
static int params_geometry(const struct kvmm_params *p, uint64_t *page_bytes)
{
	char why[200];
	uint64_t cell;

	if (kvmm_model_cell(&p->model, &cell, why, sizeof(why)))
		return params_bad(p, "model: %s", why);
	if (!p->page_size || p->page_size > KVMM_MAX_PAGE_SIZE ||
	    (p->page_size & (p->page_size - 1)))
		return params_bad(p, "page_size %u is not a power of two in 1..%u",
				  p->page_size, KVMM_MAX_PAGE_SIZE);
	if (__builtin_mul_overflow(cell, p->page_size, page_bytes) ||
	    *page_bytes > KVMM_MAX_BYTES)
		return params_bad(p, "bytes per page overflow: %llu bytes per token * page_size %u",
				  (unsigned long long)cell, p->page_size);
	return 0;
}

static int params_check(const struct kvmm_params *p, uint32_t *nr_pages,
			uint32_t *max_pages)
{
	uint64_t page_bytes = 0;
	int ret = params_geometry(p, &page_bytes);

	if (ret)
		return ret;
	if (!p->max_seqs || p->max_seqs > KVMM_MAX_SEQS)
		return params_bad(p, "max_seqs %u: page-table rows, 1..%u (it has no default)",
				  p->max_seqs, KVMM_MAX_SEQS);
	if (!p->max_seq_len || p->max_seq_len > INT32_MAX)
		return params_bad(p, "max_seq_len %u: tokens a sequence, 1..%d (it has no "
				  "default)", p->max_seq_len, INT32_MAX);
	if (p->alloc && (!p->alloc->alloc || !p->alloc->free))
		return params_bad(p, "alloc: its alloc and free hooks must both be set");
	if (p->evict_policy && !kvmm_evict_ops_lookup(p->evict_policy))
		return params_bad(p, "evict_policy '%s': not a policy (lru, slru)",
				  p->evict_policy);
	if (p->host_pages > KVMM_MAX_PAGES)
		return params_bad(p, "host_pages %u: at most %u", p->host_pages, KVMM_MAX_PAGES);
	if (p->host_node < KVMM_NODE_NEAREST)
		return params_bad(p, "host_node %d: a NUMA node, or -1 for the nearest",
				  p->host_node);
	/* The NVMe tier is staged through the host tier's pages. */
	if (p->nvme_pages > KVMM_MAX_PAGES)
		return params_bad(p, "nvme_pages %u: at most %u", p->nvme_pages, KVMM_MAX_PAGES);
	if (p->nvme_qd > 4096)
		return params_bad(p, "nvme_qd %u: 0 (32) .. 4096", p->nvme_qd);
	if (p->nvme_pages && (!p->host_pages || !p->nvme_path))
		return params_bad(p, "nvme_pages: the NVMe tier needs nvme_path and a host tier "
				  "(host_pages) to stage through");
	/* Write-through copies to the host tier. */
	if (p->write_policy > KVMM_WRITE_THROUGH)
		return params_bad(p, "write_policy %u: 0 (write-back) or 1 (write-through)",
				  p->write_policy);
	if (p->write_policy == KVMM_WRITE_THROUGH && !p->host_pages)
		return params_bad(p, "write_policy: write-through copies to the host tier: "
				  "set host_pages");
	if (p->host_wmark_low > p->host_wmark_high || p->host_wmark_high > p->host_pages)
		return params_bad(p, "host_wmark_low %u, host_wmark_high %u: low <= high <= "
				  "host_pages (%u)", p->host_wmark_low, p->host_wmark_high,
				  p->host_pages);
	/* Remote values come and go through the host tier. */
	if (p->remote && !p->host_pages)
		return params_bad(p, "remote: values come and go through the host tier: "
				  "set host_pages");
	if (p->remote_timeout_ms > 600000)
		return params_bad(p, "remote_timeout_ms: at most 600000 (10 minutes)");
	if (p->ns_kspaces > KVMM_KSPACES_MAX)
		return params_bad(p, "ns_kspaces: at most 1024 (the keyed space table)");
	if ((p->remote_user || p->remote_password) && !p->remote)
		return params_bad(p, "remote_user, remote_password: there is no remote tier (remote)");
	if (p->remote_user && !p->remote_password)
		return params_bad(p, "remote_user: AUTH needs remote_password too");
	if (p->remote_write > KVMM_REMOTE_WRITE_DEMOTE || (p->remote_write && !p->remote))
		return params_bad(p, "remote_write: %u is not a write policy, or there is no "
				  "remote tier (remote)", p->remote_write);
	/* The engine's frames are never moved: no tiers below, no resize. */
	if (p->frames > KVMM_FRAMES_ENGINE)
		return params_bad(p, "frames %u: 0 (kvmm) or 1 (the engine)", p->frames);
	if (p->frames == KVMM_FRAMES_ENGINE && (p->host_pages || p->max_pages > p->nr_pages))
		return params_bad(p, "frames: the engine's frames take no host tier (host_pages) "
				  "and no growth (max_pages)");
	ret = params_nr_pages(p, page_bytes, nr_pages);
	if (ret)
		return ret;
	if (p->wmark_min > p->wmark_low || p->wmark_low > p->wmark_high ||
	    p->wmark_high > *nr_pages)
		return params_bad(p, "wmark_min %u, wmark_low %u, wmark_high %u: min <= low <= "
				  "high <= the pool's %u pages", p->wmark_min, p->wmark_low,
				  p->wmark_high, *nr_pages);
	*max_pages = p->max_pages ? p->max_pages : *nr_pages;
	if (*max_pages < *nr_pages || *max_pages > KVMM_MAX_PAGES ||
	    (uint64_t)*max_pages * p->page_size > KVMM_MAX_SLOTS)
		return params_bad(p, "max_pages %u: 0 (nr_pages) or nr_pages (%u) .. %u pages "
				  "and %llu slots", p->max_pages, *nr_pages, KVMM_MAX_PAGES,
				  (unsigned long long)KVMM_MAX_SLOTS);
	/* Every tier's bytes, as its backend or store will compute them. */
	return params_tier_bytes(p, "nr_pages/max_pages", *max_pages, page_bytes) ?:
	       params_tier_bytes(p, "host_pages", p->host_pages, page_bytes) ?:
	       params_tier_bytes(p, "nvme_pages", p->nvme_pages, page_bytes);
}

static int backend_init(struct kvmm_ctx *ctx)
{
	const struct kvmm_params *p = &ctx->params;
	char why[256] = "";
	struct kvmm_backend_cfg cfg = {
		.model = p->model,
		.page_size = p->page_size,
		.nr_pages = ctx->zone[KVMM_TIER_DEVICE].nr_pages,
		.tier = KVMM_TIER_DEVICE,
		.arg = p->backend_arg,
		.err = why,
		.err_len = sizeof(why),
		.max_pages = ctx->zone[KVMM_TIER_DEVICE].max_pages,
	};
	int ret;

	if (cfg.max_pages > cfg.nr_pages && !ctx->backend->resize) {
		kvmm_report(ctx, "%s backend: cannot resize its pool (max_pages)",
			    ctx->backend->name);
		return -EOPNOTSUPP;
	}
	ret = ctx->backend->init(&cfg, &ctx->backend_priv);

	if (ret && why[0])
		kvmm_report(ctx, "%s backend: %s", ctx->backend->name, why);
	return ret;
}

/*
 * mem_fraction sizing with no memory figures given: ask the backend what
 * its device has (into *@p, a copy of the caller's parameters).
 */
static int params_mem_info(const struct kvmm_backend_ops *bops, struct kvmm_params *p)
{
	char why[256] = "";
	int ret;

	if (p->nr_pages || p->mem_total || p->mem_avail || p->mem_fraction == 0.0)
		return 0;
	if (!bops->mem_info) {
		snprintf(why, sizeof(why), "cannot tell its device memory: give mem_total and mem_avail");
		ret = -EINVAL;
	} else {
		ret = bops->mem_info(p->backend_arg, &p->mem_total, &p->mem_avail, why, sizeof(why));
	}
	if (ret && why[0]) {
		struct kvmm_ctx tmp = { .params = *p };

		kvmm_report(&tmp, "%s backend: %s", bops->name, why);
	}
	return ret;
}

static_assert(sizeof(struct kvmm_params) >= KVMM_PARAMS_SIZE_VER0,
	      "struct kvmm_params shrank below its first sized version");

/**
 * kvmm_params_init() - the parameters every caller starts from
 * @params: filled with the defaults (every field 0 or NULL) and @size
 *
 * A caller sets what it needs on top.  @size records which fields the
 * caller's build knows, so a program built against this header keeps
 * working with a library that has appended fields since.
 *
 * Context: any.
 */
KVMM_EXPORT void kvmm_params_init(struct kvmm_params *params)
{
	memset(params, 0, sizeof(*params));
	params->size = sizeof(*params);
}

/*
 * The caller's parameters as this library's struct: fields past the
 * caller's @size read as their defaults; fields past ours, which a newer
 * caller knows, must be unset (as Linux's copy_struct_from_user()).
 */
static int params_copy(const struct kvmm_params *in, struct kvmm_params *out)
{
	const unsigned char *tail = (const unsigned char *)in + sizeof(*out);
	size_t size = in->size, i;

	if (size < KVMM_PARAMS_SIZE_VER0) {
		/* too short to read its log hook from: stderr */
		kvmm_report(NULL, "create: size %zu: at least %d (kvmm_params_init() sets it)",
			    size, KVMM_PARAMS_SIZE_VER0);
		return -EINVAL;
	}
	for (i = sizeof(*out); i < size; i++)
		if (tail[i - sizeof(*out)])
			return params_bad(in, "size %zu: a field past this library's %zu bytes "
					  "is set (a newer caller's field)", size, sizeof(*out));
	memset(out, 0, sizeof(*out));
	memcpy(out, in, size < sizeof(*out) ? size : sizeof(*out));
	out->size = sizeof(*out);
	return 0;
}

/**
 * kvmm_create() - build a context: pool, page table, prefix tree
 * @params: what to build; see struct kvmm_params
 * @ctxp: out, the new context
 *
 * Every refusal of a parameter is reported through @params->log (stderr
 * without one) as one line naming the field and the rule it broke.
 *
 * Return: 0; -EINVAL for bad parameters (a @params->size below
 * KVMM_PARAMS_SIZE_VER0 or with fields this library does not know set, a
 * page size that is not a power of two, zero sizes, unknown policy or
 * inconsistent watermarks; geometry whose bytes per token, page or tier
 * overflow); -EOPNOTSUPP for an unknown backend, or max_pages on a
 * backend that cannot resize; -ENOSPC when the memory budget holds
 * no page; -ENOMEM when metadata cannot be allocated; a backend's error
 * from its init or its mem_info (cuda: -ENODEV with no driver or device,
 * with the reason sent to @params->log).  Nothing is held on failure.
 */
KVMM_EXPORT int kvmm_create(const struct kvmm_params *params,
			    struct kvmm_ctx **ctxp)
{
	const struct kvmm_alloc_ops *aops;
	const struct kvmm_backend_ops *bops;
	struct kvmm_params sized;
	struct kvmm_ctx *ctx;
	uint32_t nr_pages = 0, max_pages = 0, tier;
	int ret;

	if (!params || !ctxp)
		return -EINVAL;
	ret = params_copy(params, &sized);
	if (ret)
		return ret;
	bops = kvmm_backend_lookup(sized.backend ? sized.backend : "mock");
	if (!bops)
		return params_refuse(&sized, -EOPNOTSUPP, "backend '%s': not in this build",
				     sized.backend);
	ret = params_mem_info(bops, &sized);
	if (ret)
		return ret;
	params = &sized;
	ret = params_check(params, &nr_pages, &max_pages);
	if (ret)
		return ret;

	aops = params->alloc ? params->alloc : &kvmm_default_alloc_ops;
	ctx = aops->alloc(sizeof(*ctx), params->alloc_priv);
	if (!ctx)
		return -ENOMEM;
	memset(ctx, 0, sizeof(*ctx));
	ctx->params = *params;
	ctx->params.evict_policy = NULL;
	ctx->params.backend = NULL;
	ctx->alloc = aops;
	ctx->alloc_priv = params->alloc_priv;
	ctx->meta_bytes = sizeof(*ctx);
	ctx->page_size = params->page_size;
	ctx->page_shift = (uint32_t)__builtin_ctz(params->page_size);
	ctx->backend = bops;
	list_init(&ctx->owners);
	ctx->ns_pin_pages = KVMM_NS_PIN_AUTO;
	ctx->ns_kjob_bytes = KVMM_NS_KJOB_BYTES_DEFAULT;
	ctx->ns_cache_share = 100;
	ctx->keyed_share = 100;
	ctx->ns_kspaces = params->ns_kspaces ? params->ns_kspaces : KVMM_NS_KSPACES_DEFAULT;
	list_init(&ctx->migrations);
	list_init(&ctx->kjobs);
	list_init(&ctx->rjobs);
	list_init(&ctx->rreqs);
	if (pthread_mutex_init(&ctx->lock, NULL)) {
		aops->free(ctx, sizeof(*ctx), params->alloc_priv);
		return -ENOMEM;
	}
	if (pthread_cond_init(&ctx->kjobs_done, NULL)) {
		pthread_mutex_destroy(&ctx->lock);
		aops->free(ctx, sizeof(*ctx), params->alloc_priv);
		return -ENOMEM;
	}
	for (tier = 0; tier < KVMM_NR_TIERS; tier++)
		kvmm_lruvec_init(&ctx->lruvec[tier],
				 kvmm_evict_ops_lookup(params->evict_policy ?
						       params->evict_policy : "lru"));

	ret = kvmm_zone_init(ctx, &ctx->zone[KVMM_TIER_DEVICE], nr_pages, max_pages,
			     KVMM_TIER_DEVICE);
	if (ret)
		goto out_free_ctx;
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_MIN] = params->wmark_min;
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_LOW] = params->wmark_low;
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_HIGH] = params->wmark_high;
	ret = kvmm_seqs_init(ctx);
	if (ret)
		goto out_exit_zone;
	ret = kvmm_tree_init(ctx);
	if (ret)
		goto out_exit_seqs;
	ret = backend_init(ctx);
	if (ret)
		goto out_exit_tree;
	ret = kvmm_tiers_init(ctx);
	if (ret)
		goto out_exit_backend;
	*ctxp = ctx;
	return 0;

out_exit_backend:
	ctx->backend->exit(ctx->backend_priv);
out_exit_tree:
	kvmm_tree_exit(ctx);
out_exit_seqs:
	kvmm_seqs_exit(ctx);
out_exit_zone:
	kvmm_zone_exit(ctx, &ctx->zone[KVMM_TIER_DEVICE]);
out_free_ctx:
	pthread_cond_destroy(&ctx->kjobs_done);
	pthread_mutex_destroy(&ctx->lock);
	aops->free(ctx, sizeof(*ctx), params->alloc_priv);
	return ret;
}

/**
 * kvmm_destroy() - free a context and everything it holds
 * @ctx: the context, or NULL
 *
 * Open sequences are dropped with the rest; the backend's pool goes too.
 * Rings must be exited (and servers stopped) first; a ring still attached
 * loses its dispatcher here and must not be used again.
 */
KVMM_EXPORT void kvmm_destroy(struct kvmm_ctx *ctx)
{
	const struct kvmm_alloc_ops *aops;
	void *apriv;

	if (!ctx)
		return;
	kvmm_owners_release(ctx);	/* rings still attached */
	kvmm_iow_stop(ctx);	/* promotions in flight finish first */
	pthread_cond_destroy(&ctx->kjobs_done);
	pthread_mutex_destroy(&ctx->lock);
	kvmm_events_exit(ctx);
	kvmm_tree_exit(ctx);
	kvmm_keyed_exit(ctx);
	kvmm_tiers_exit(ctx);
	ctx->backend->exit(ctx->backend_priv);
	kvmm_seqs_exit(ctx);
	kvmm_zone_exit(ctx, &ctx->zone[KVMM_TIER_DEVICE]);
	aops = ctx->alloc;
	apriv = ctx->alloc_priv;
	aops->free(ctx, sizeof(*ctx), apriv);
}

KVMM_EXPORT uint32_t kvmm_page_size(const struct kvmm_ctx *ctx)
{
	return ctx->page_size;
}

KVMM_EXPORT uint32_t kvmm_nr_pages(const struct kvmm_ctx *ctx)
{
	return ctx->zone[KVMM_TIER_DEVICE].nr_pages;
}

/**
 * kvmm_set_watermarks() - set the device zone's min, low and high marks
 * @ctx: the context
 * @min: pages ordinary allocations leave free
 * @low: below this many free pages after an allocation, reclaim first
 * @high: reclaim frees until this many would be free
 *
 * Return: 0, or -EINVAL unless min <= low <= high <= the pool size.
 */
KVMM_EXPORT int kvmm_set_watermarks(struct kvmm_ctx *ctx, uint32_t min,
				    uint32_t low, uint32_t high)
{
	uint32_t pages;

	if (!ctx)
		return -EINVAL;
	pages = ctx->zone[KVMM_TIER_DEVICE].nr_pages;
	if (min > low || low > high || high > pages) {
		kvmm_report(ctx, "watermarks: wmark_min %u, wmark_low %u, wmark_high %u: "
			    "min <= low <= high <= the pool's %u pages", min, low, high, pages);
		return -EINVAL;
	}
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_MIN] = min;
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_LOW] = low;
	ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_HIGH] = high;
	return 0;
}

/**
 * kvmm_kv_layer() - where layer @layer's KV lives
 * @ctx: the context
 * @layer: 0 .. layers - 1
 * @out: filled on success
 *
 * Return: 0, -EINVAL for a layer out of range, or the backend's error.
 */
KVMM_EXPORT int kvmm_kv_layer(const struct kvmm_ctx *ctx, uint32_t layer,
			      struct kvmm_kv_layer *out)
{
	if (!ctx || !out || layer >= ctx->params.model.layers)
		return -EINVAL;
	return ctx->backend->kv_layer(ctx->backend_priv, layer, out);
}
