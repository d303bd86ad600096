// SPDX-License-Identifier: MIT
/*
 * kvmm/stats.c - the statistics snapshot: gauges read from the live
 * structures, events from counters bumped where they happen.
 */
#include <assert.h>

#include "internal.h"

static const char *const stat_names[] = {
	[KVMM_STAT_PAGES_TOTAL] = "pages_total",
	[KVMM_STAT_PAGES_FREE] = "pages_free",
	[KVMM_STAT_PAGES_OWNED] = "pages_owned",
	[KVMM_STAT_PAGES_CACHED] = "pages_cached",
	[KVMM_STAT_PAGES_EVICTABLE] = "pages_evictable",
	[KVMM_STAT_PAGES_PROTECTED] = "pages_protected",
	[KVMM_STAT_PAGES_PINNED] = "pages_pinned",
	[KVMM_STAT_NODES] = "nodes",
	[KVMM_STAT_LEAVES_EVICTABLE] = "leaves_evictable",
	[KVMM_STAT_SEQS_OPEN] = "seqs_open",
	[KVMM_STAT_WMARK_MIN] = "wmark_min",
	[KVMM_STAT_WMARK_LOW] = "wmark_low",
	[KVMM_STAT_WMARK_HIGH] = "wmark_high",
	[KVMM_STAT_META_BYTES] = "meta_bytes",
	[KVMM_STAT_MATCH_CALLS] = "match_calls",
	[KVMM_STAT_MATCH_TOKENS] = "match_tokens",
	[KVMM_STAT_HIT_TOKENS] = "hit_tokens",
	[KVMM_STAT_MISS_TOKENS] = "miss_tokens",
	[KVMM_STAT_INSERT_TOKENS] = "insert_tokens",
	[KVMM_STAT_DEDUP_PAGES] = "dedup_pages",
	[KVMM_STAT_SPLITS] = "splits",
	[KVMM_STAT_ALLOC_PAGES] = "alloc_pages",
	[KVMM_STAT_FREE_PAGES] = "free_pages",
	[KVMM_STAT_ALLOC_FAIL] = "alloc_fail",
	[KVMM_STAT_RECLAIM_RUNS] = "reclaim_runs",
	[KVMM_STAT_EVICT_NODES] = "evict_nodes",
	[KVMM_STAT_EVICT_PAGES] = "evict_pages",
	[KVMM_STAT_RETRACTS] = "retracts",
	[KVMM_STAT_HOST_PAGES_TOTAL] = "host_pages_total",
	[KVMM_STAT_HOST_PAGES_FREE] = "host_pages_free",
	[KVMM_STAT_HOST_PAGES_CACHED] = "host_pages_cached",
	[KVMM_STAT_HOST_HIT_TOKENS] = "host_hit_tokens",
	[KVMM_STAT_HOST_DEMOTE_PAGES] = "host_demote_pages",
	[KVMM_STAT_HOST_PROMOTE_PAGES] = "host_promote_pages",
	[KVMM_STAT_HOST_EVICT_PAGES] = "host_evict_pages",
	[KVMM_STAT_HOST_BYTES_IN] = "host_bytes_in",
	[KVMM_STAT_HOST_BYTES_OUT] = "host_bytes_out",
	[KVMM_STAT_HOST_NS_IN] = "host_ns_in",
	[KVMM_STAT_HOST_NS_OUT] = "host_ns_out",
	[KVMM_STAT_HOST_CSUM_FAIL] = "host_csum_fail",
	[KVMM_STAT_HOST_IO_ERRORS] = "host_io_errors",
	[KVMM_STAT_NVME_PAGES_TOTAL] = "nvme_pages_total",
	[KVMM_STAT_NVME_PAGES_FREE] = "nvme_pages_free",
	[KVMM_STAT_NVME_PAGES_CACHED] = "nvme_pages_cached",
	[KVMM_STAT_NVME_HIT_TOKENS] = "nvme_hit_tokens",
	[KVMM_STAT_NVME_DEMOTE_PAGES] = "nvme_demote_pages",
	[KVMM_STAT_NVME_PROMOTE_PAGES] = "nvme_promote_pages",
	[KVMM_STAT_NVME_EVICT_PAGES] = "nvme_evict_pages",
	[KVMM_STAT_NVME_BYTES_IN] = "nvme_bytes_in",
	[KVMM_STAT_NVME_BYTES_OUT] = "nvme_bytes_out",
	[KVMM_STAT_NVME_NS_IN] = "nvme_ns_in",
	[KVMM_STAT_NVME_NS_OUT] = "nvme_ns_out",
	[KVMM_STAT_NVME_CSUM_FAIL] = "nvme_csum_fail",
	[KVMM_STAT_NVME_IO_ERRORS] = "nvme_io_errors",
	[KVMM_STAT_PAGES_IO] = "pages_io",
	[KVMM_STAT_PROMOTE_ASYNC] = "promote_async",
	[KVMM_STAT_PROMOTE_CANCELED] = "promote_canceled",
	[KVMM_STAT_PAGES_SHADOWED] = "pages_shadowed",
	[KVMM_STAT_WT_PAGES] = "wt_pages",
	[KVMM_STAT_WT_SKIP_PAGES] = "wt_skip_pages",
	[KVMM_STAT_DEMOTE_FREE_PAGES] = "demote_free_pages",
	[KVMM_STAT_SHADOW_DROP_PAGES] = "shadow_drop_pages",
	[KVMM_STAT_PAGES_MAX] = "pages_max",
	[KVMM_STAT_MIGRATE_PAGES] = "migrate_pages",
	[KVMM_STAT_HOST_WMARK_LOW] = "host_wmark_low",
	[KVMM_STAT_HOST_WMARK_HIGH] = "host_wmark_high",
	[KVMM_STAT_HOST_PAGES_WRITEBACK] = "host_pages_writeback",
	[KVMM_STAT_WRITEBACK_RUNS] = "writeback_runs",
	[KVMM_STAT_KEYED_SPACES] = "keyed_spaces",
	[KVMM_STAT_KEYED_VALUES] = "keyed_values",
	[KVMM_STAT_KEYED_HOST_PAGES] = "keyed_host_pages",
	[KVMM_STAT_KEYED_NVME_PAGES] = "keyed_nvme_pages",
	[KVMM_STAT_KEYED_PUTS] = "keyed_puts",
	[KVMM_STAT_KEYED_GETS] = "keyed_gets",
	[KVMM_STAT_KEYED_MISSES] = "keyed_misses",
	[KVMM_STAT_KEYED_EVICTS] = "keyed_evicts",
	[KVMM_STAT_KEYED_SHARE] = "keyed_share",
	[KVMM_STAT_REMOTE_PROBES] = "remote_probes",
	[KVMM_STAT_REMOTE_PROBE_HITS] = "remote_probe_hits",
	[KVMM_STAT_REMOTE_GET_PAGES] = "remote_get_pages",
	[KVMM_STAT_REMOTE_GET_HITS] = "remote_get_hits",
	[KVMM_STAT_REMOTE_BYTES_OUT] = "remote_bytes_out",
	[KVMM_STAT_REMOTE_PUT_PAGES] = "remote_put_pages",
	[KVMM_STAT_REMOTE_PUT_SKIPPED] = "remote_put_skipped",
	[KVMM_STAT_REMOTE_BYTES_IN] = "remote_bytes_in",
	[KVMM_STAT_REMOTE_CORRUPT] = "remote_corrupt",
	[KVMM_STAT_REMOTE_TIMEOUTS] = "remote_timeouts",
	[KVMM_STAT_REMOTE_ERRORS] = "remote_errors",
	[KVMM_STAT_REMOTE_NS] = "remote_ns",
	[KVMM_STAT_KEYED_REMOTE_GETS] = "keyed_remote_gets",
	[KVMM_STAT_REMOTE_FETCH_TOKENS] = "remote_fetch_tokens",
	[KVMM_STAT_REMOTE_PUSH_TOKENS] = "remote_push_tokens",
	[KVMM_STAT_REMOTE_DEMOTE_PAGES] = "remote_demote_pages",
	[KVMM_STAT_ORPHAN_PAGES] = "orphan_pages",
	[KVMM_STAT_ORPHAN_ADOPTED] = "orphan_adopted",
	[KVMM_STAT_PAGES_WRITEBACK] = "pages_writeback",
	[KVMM_STAT_EVENTS] = "events",
	[KVMM_STAT_EVENTS_DROPPED] = "events_dropped",
	[KVMM_STAT_EVENTS_BYTES] = "events_bytes",
	[KVMM_STAT_HOST_OFFER_TOKENS] = "host_offer_tokens",
	[KVMM_STAT_NVME_OFFER_TOKENS] = "nvme_offer_tokens",
	[KVMM_STAT_THROTTLE_PAGES] = "throttle_pages",
	[KVMM_STAT_PREFETCH_PAGES] = "prefetch_pages",
	[KVMM_STAT_PREFETCH_HITS] = "prefetch_hits",
	[KVMM_STAT_PREFETCH_CANCELED] = "prefetch_canceled",
};
static_assert(ARRAY_SIZE(stat_names) == NR_KVMM_STATS, "a stat has no name");

/* Event counter + 1 behind each event item; 0 for a gauge. */
static const uint8_t stat_event[NR_KVMM_STATS] = {
	[KVMM_STAT_MATCH_CALLS] = EV_MATCH_CALLS + 1,
	[KVMM_STAT_MATCH_TOKENS] = EV_MATCH_TOKENS + 1,
	[KVMM_STAT_HIT_TOKENS] = EV_HIT_TOKENS + 1,
	[KVMM_STAT_INSERT_TOKENS] = EV_INSERT_TOKENS + 1,
	[KVMM_STAT_DEDUP_PAGES] = EV_DEDUP_PAGES + 1,
	[KVMM_STAT_SPLITS] = EV_SPLITS + 1,
	[KVMM_STAT_ALLOC_PAGES] = EV_ALLOC_PAGES + 1,
	[KVMM_STAT_FREE_PAGES] = EV_FREE_PAGES + 1,
	[KVMM_STAT_ALLOC_FAIL] = EV_ALLOC_FAIL + 1,
	[KVMM_STAT_RECLAIM_RUNS] = EV_RECLAIM_RUNS + 1,
	[KVMM_STAT_EVICT_NODES] = EV_EVICT_NODES + 1,
	[KVMM_STAT_EVICT_PAGES] = EV_EVICT_PAGES + 1,
	[KVMM_STAT_RETRACTS] = EV_RETRACTS + 1,
	[KVMM_STAT_PROMOTE_ASYNC] = EV_PROMOTE_ASYNC + 1,
	[KVMM_STAT_PROMOTE_CANCELED] = EV_PROMOTE_CANCELED + 1,
	[KVMM_STAT_WT_PAGES] = EV_WT_PAGES + 1,
	[KVMM_STAT_WT_SKIP_PAGES] = EV_WT_SKIP_PAGES + 1,
	[KVMM_STAT_DEMOTE_FREE_PAGES] = EV_DEMOTE_FREE_PAGES + 1,
	[KVMM_STAT_SHADOW_DROP_PAGES] = EV_SHADOW_DROP_PAGES + 1,
	[KVMM_STAT_MIGRATE_PAGES] = EV_MIGRATED + 1,
	[KVMM_STAT_WRITEBACK_RUNS] = EV_WRITEBACK_RUNS + 1,
	[KVMM_STAT_KEYED_PUTS] = EV_KEYED_PUTS + 1,
	[KVMM_STAT_KEYED_GETS] = EV_KEYED_GETS + 1,
	[KVMM_STAT_KEYED_MISSES] = EV_KEYED_MISSES + 1,
	[KVMM_STAT_EVENTS] = EV_CACHE_EVENTS + 1,
	[KVMM_STAT_REMOTE_FETCH_TOKENS] = EV_REMOTE_FETCH_TOKENS + 1,
	[KVMM_STAT_REMOTE_PUSH_TOKENS] = EV_REMOTE_PUSH_TOKENS + 1,
	[KVMM_STAT_REMOTE_DEMOTE_PAGES] = EV_REMOTE_DEMOTE_PAGES + 1,
	[KVMM_STAT_ORPHAN_ADOPTED] = EV_ORPHAN_PAGES + 1,
	[KVMM_STAT_EVENTS_DROPPED] = EV_CACHE_EVENTS_DROPPED + 1,
	[KVMM_STAT_THROTTLE_PAGES] = EV_THROTTLE_PAGES + 1,
	[KVMM_STAT_PREFETCH_PAGES] = EV_PREFETCH_PAGES + 1,
	[KVMM_STAT_PREFETCH_HITS] = EV_PREFETCH_HITS + 1,
	[KVMM_STAT_PREFETCH_CANCELED] = EV_PREFETCH_CANCELED + 1,
};

/**
 * kvmm_stat_name() - the name of statistics item @item
 * @item: enum kvmm_stat_item
 *
 * Return: a lower_case name, NULL past the last item.
 */
KVMM_EXPORT const char *kvmm_stat_name(uint32_t item)
{
	return item < NR_KVMM_STATS ? stat_names[item] : NULL;
}

/* The items of lower tier @t, from its zone and its event counters. */
static void tier_stats(const struct kvmm_ctx *ctx, uint32_t t, uint64_t *v)
{
	static const uint8_t tev[KVMM_STAT_TIER_ITEMS] = {
		[KVMM_STAT_HOST_HIT_TOKENS - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_HIT_TOKENS + 1,
		[KVMM_STAT_HOST_DEMOTE_PAGES - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_DEMOTE_PAGES + 1,
		[KVMM_STAT_HOST_PROMOTE_PAGES - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_PROMOTE_PAGES + 1,
		[KVMM_STAT_HOST_EVICT_PAGES - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_EVICT_PAGES + 1,
		[KVMM_STAT_HOST_BYTES_IN - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_BYTES_IN + 1,
		[KVMM_STAT_HOST_BYTES_OUT - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_BYTES_OUT + 1,
		[KVMM_STAT_HOST_NS_IN - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_NS_IN + 1,
		[KVMM_STAT_HOST_NS_OUT - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_NS_OUT + 1,
		[KVMM_STAT_HOST_CSUM_FAIL - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_CSUM_FAIL + 1,
		[KVMM_STAT_HOST_IO_ERRORS - KVMM_STAT_HOST_PAGES_TOTAL] = TEV_IO_ERRORS + 1,
	};
	uint64_t *tv = v + KVMM_STAT_HOST_PAGES_TOTAL +
		       (t - KVMM_TIER_HOST) * KVMM_STAT_TIER_ITEMS;
	uint32_t i;

	for (i = 0; i < KVMM_STAT_TIER_ITEMS; i++)
		tv[i] = tev[i] ? ctx->tier_events[t][tev[i] - 1] : 0;
	tv[0] = ctx->zone[t].nr_pages;
	tv[KVMM_STAT_HOST_PAGES_FREE - KVMM_STAT_HOST_PAGES_TOTAL] = ctx->zone[t].nr_free;
	tv[KVMM_STAT_HOST_PAGES_CACHED - KVMM_STAT_HOST_PAGES_TOTAL] = ctx->tree.cached[t];
	v[KVMM_STAT_HOST_OFFER_TOKENS + t - KVMM_TIER_HOST] = ctx->tier_events[t][TEV_OFFER_TOKENS];
	v[KVMM_STAT_MISS_TOKENS] -= ctx->tier_events[t][TEV_OFFER_TOKENS];
}

/**
 * kvmm_stats() - a snapshot of every statistics item
 * @ctx: the context
 * @vals: out, indexed by enum kvmm_stat_item
 * @nr: room in @vals; fewer items than exist is fine (an older caller)
 *
 * Return: items this library has (NR_KVMM_STATS), or -EINVAL.
 */
KVMM_EXPORT int kvmm_stats(const struct kvmm_ctx *ctx, uint64_t *vals, uint32_t nr)
{
	uint64_t v[NR_KVMM_STATS];
	uint32_t i, t;

	if (!ctx || (!vals && nr))
		return -EINVAL;
	for (i = 0; i < NR_KVMM_STATS; i++)
		v[i] = stat_event[i] ? ctx->events[stat_event[i] - 1] : 0;
	v[KVMM_STAT_PAGES_TOTAL] = ctx->zone[KVMM_TIER_DEVICE].nr_pages;
	v[KVMM_STAT_PAGES_MAX] = ctx->zone[KVMM_TIER_DEVICE].max_pages;
	v[KVMM_STAT_PAGES_FREE] = ctx->zone[KVMM_TIER_DEVICE].nr_free;
	v[KVMM_STAT_PAGES_CACHED] = ctx->tree.cached[KVMM_TIER_DEVICE];
	v[KVMM_STAT_PAGES_OWNED] = ctx->zone[KVMM_TIER_DEVICE].nr_pages - ctx->zone[KVMM_TIER_DEVICE].nr_free -
				   ctx->tree.cached[KVMM_TIER_DEVICE] -
				   ctx->io_pages[KVMM_TIER_DEVICE];
	v[KVMM_STAT_PAGES_IO] = ctx->io_pages[KVMM_TIER_DEVICE];
	v[KVMM_STAT_HOST_WMARK_LOW] = ctx->zone[KVMM_TIER_HOST].wmark[KVMM_WMARK_LOW];
	v[KVMM_STAT_HOST_WMARK_HIGH] = ctx->zone[KVMM_TIER_HOST].wmark[KVMM_WMARK_HIGH];
	v[KVMM_STAT_HOST_PAGES_WRITEBACK] = ctx->writeback[KVMM_TIER_HOST];
	v[KVMM_STAT_PAGES_WRITEBACK] = ctx->writeback[KVMM_TIER_DEVICE];
	v[KVMM_STAT_PAGES_SHADOWED] = ctx->tree.shadowed;
	v[KVMM_STAT_PAGES_EVICTABLE] = ctx->lruvec[KVMM_TIER_DEVICE].evictable;
	v[KVMM_STAT_PAGES_PROTECTED] = ctx->tree.protected[KVMM_TIER_DEVICE];
	v[KVMM_STAT_PAGES_PINNED] = ctx->tree.pinned;
	v[KVMM_STAT_NODES] = ctx->tree.nr_nodes;
	v[KVMM_STAT_LEAVES_EVICTABLE] = ctx->lruvec[KVMM_TIER_DEVICE].nr_leaves;
	v[KVMM_STAT_SEQS_OPEN] = ctx->nr_open;
	v[KVMM_STAT_WMARK_MIN] = ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_MIN];
	v[KVMM_STAT_WMARK_LOW] = ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_LOW];
	v[KVMM_STAT_WMARK_HIGH] = ctx->zone[KVMM_TIER_DEVICE].wmark[KVMM_WMARK_HIGH];
	v[KVMM_STAT_META_BYTES] = __atomic_load_n(&ctx->meta_bytes, __ATOMIC_RELAXED);
	v[KVMM_STAT_EVENTS_BYTES] = kvmm_events_bytes(ctx);
	v[KVMM_STAT_ORPHAN_PAGES] = kvmm_orphans_live(ctx);
	v[KVMM_STAT_MISS_TOKENS] = v[KVMM_STAT_MATCH_TOKENS] - v[KVMM_STAT_HIT_TOKENS];
	for (t = KVMM_TIER_HOST; t < KVMM_NR_TIERS; t++)
		tier_stats(ctx, t, v);
	kvmm_keyed_stats(ctx, v);
	kvmm_remote_stats(ctx, v);
	if (nr)
		memcpy(vals, v, (nr < NR_KVMM_STATS ? nr : NR_KVMM_STATS) * sizeof(*v));
	return NR_KVMM_STATS;
}
