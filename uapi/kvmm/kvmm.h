/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * uapi/kvmm/kvmm.h - the parts of kvmm's ABI that the core already fixes:
 * tier numbers, statistics item ids and the page states an admin tool may
 * see.  Fixed-width types only; compiles alone as C99 and C++.  Values are
 * append-only: a new item goes before the NR_ sentinel and never renumbers
 * an old one.
 */
#ifndef _UAPI_KVMM_KVMM_H
#define _UAPI_KVMM_KVMM_H

#include <linux/types.h>

#define KVMM_ABI_VERSION	1

/* Tiers, fastest first.  A page lives on exactly one. */
#define KVMM_TIER_DEVICE	0
#define KVMM_TIER_HOST		1
#define KVMM_TIER_NVME		2
#define KVMM_NR_TIERS		3

/*
 * Attention layout of the KV cache (struct kvmm_model.attn, and
 * struct kvmm_share.attn on the wire): how many bytes one token occupies.
 */
#define KVMM_ATTN_MHA		0	/* a K and a V vector per KV head (MHA/GQA/MQA) */
#define KVMM_ATTN_MLA		1	/* one latent vector per token (DeepSeek MLA) */

/* Page states as reported by dumps and kvmm_page_state(). */
#define KVMM_PAGE_FREE		0	/* on the zone's free bitmap */
#define KVMM_PAGE_OWNED		1	/* private to one open sequence */
#define KVMM_PAGE_CACHED	2	/* owned by a prefix-tree node */
#define KVMM_PAGE_IO		3	/* held by a promotion in flight */
#define KVMM_NR_PAGE_STATES	4

/* Page flags, as reported by kvmm_page_flags(). */
#define KVMM_PG_PINNED		(1u << 0)	/* cached on a pinned prefix */
#define KVMM_PG_FLAGS		KVMM_PG_PINNED

/* Eviction priority levels: lower levels are reclaimed first. */
#define KVMM_NR_PRIO		4

/*
 * Statistics items.  Items marked (gauge) are a current level, the rest
 * are event counters that only grow.  Page figures are in pages of the
 * context's page size, token figures in tokens.
 */
enum kvmm_stat_item {
	KVMM_STAT_PAGES_TOTAL,		/* (gauge) pages in the device pool */
	KVMM_STAT_PAGES_FREE,		/* (gauge) */
	KVMM_STAT_PAGES_OWNED,		/* (gauge) private to open sequences */
	KVMM_STAT_PAGES_CACHED,		/* (gauge) held by the prefix tree */
	KVMM_STAT_PAGES_EVICTABLE,	/* (gauge) cached, in unlocked nodes */
	KVMM_STAT_PAGES_PROTECTED,	/* (gauge) cached, in locked nodes */
	KVMM_STAT_PAGES_PINNED,		/* (gauge) cached, under a pin */
	KVMM_STAT_NODES,		/* (gauge) tree nodes, roots excluded */
	KVMM_STAT_LEAVES_EVICTABLE,	/* (gauge) nodes on reclaim lists */
	KVMM_STAT_SEQS_OPEN,		/* (gauge) */
	KVMM_STAT_WMARK_MIN,		/* (gauge) */
	KVMM_STAT_WMARK_LOW,		/* (gauge) */
	KVMM_STAT_WMARK_HIGH,		/* (gauge) */
	KVMM_STAT_META_BYTES,		/* (gauge) metadata memory in use */
	KVMM_STAT_MATCH_CALLS,
	KVMM_STAT_MATCH_TOKENS,		/* tokens asked for by MATCH */
	KVMM_STAT_HIT_TOKENS,		/* of those, found on the device */
	KVMM_STAT_MISS_TOKENS,		/* of those, found on no tier */
	KVMM_STAT_INSERT_TOKENS,	/* tokens newly added to the tree */
	KVMM_STAT_DEDUP_PAGES,		/* committed pages found already cached */
	KVMM_STAT_SPLITS,
	KVMM_STAT_ALLOC_PAGES,		/* pages handed out */
	KVMM_STAT_FREE_PAGES,		/* pages given back */
	KVMM_STAT_ALLOC_FAIL,		/* allocations refused with -ENOSPC */
	KVMM_STAT_RECLAIM_RUNS,
	KVMM_STAT_EVICT_NODES,
	KVMM_STAT_EVICT_PAGES,
	KVMM_STAT_RETRACTS,
	/*
	 * Per lower tier, the same items in the same order: host first, then
	 * NVMe (KVMM_STAT_NVME_x == KVMM_STAT_HOST_x + KVMM_STAT_TIER_ITEMS).
	 * A tier that is not configured reads 0 everywhere.
	 */
	KVMM_STAT_HOST_PAGES_TOTAL,     /* (gauge) pages of the tier */
	KVMM_STAT_HOST_PAGES_FREE,      /* (gauge) */
	KVMM_STAT_HOST_PAGES_CACHED,    /* (gauge) held by demoted prefixes */
	KVMM_STAT_HOST_HIT_TOKENS,      /* tokens PROMOTE brought from the tier
					 * into a sequence (served) */
	KVMM_STAT_HOST_DEMOTE_PAGES,    /* pages moved onto the tier */
	KVMM_STAT_HOST_PROMOTE_PAGES,   /* pages moved from the tier back to the device */
	KVMM_STAT_HOST_EVICT_PAGES,     /* pages dropped from the tier */
	KVMM_STAT_HOST_BYTES_IN,        /* bytes written to the tier */
	KVMM_STAT_HOST_BYTES_OUT,       /* bytes read back from the tier */
	KVMM_STAT_HOST_NS_IN,           /* nanoseconds spent writing */
	KVMM_STAT_HOST_NS_OUT,          /* nanoseconds spent reading back */
	KVMM_STAT_HOST_CSUM_FAIL,       /* pages that failed verification (served as misses) */
	KVMM_STAT_HOST_IO_ERRORS,       /* copies or I/O that failed */
	KVMM_STAT_NVME_PAGES_TOTAL,     /* (gauge) pages of the tier */
	KVMM_STAT_NVME_PAGES_FREE,      /* (gauge) */
	KVMM_STAT_NVME_PAGES_CACHED,    /* (gauge) held by demoted prefixes */
	KVMM_STAT_NVME_HIT_TOKENS,      /* tokens PROMOTE brought from the tier
					 * into a sequence (served) */
	KVMM_STAT_NVME_DEMOTE_PAGES,    /* pages moved onto the tier */
	KVMM_STAT_NVME_PROMOTE_PAGES,   /* pages moved from the tier back to the device */
	KVMM_STAT_NVME_EVICT_PAGES,     /* pages dropped from the tier */
	KVMM_STAT_NVME_BYTES_IN,        /* bytes written to the tier */
	KVMM_STAT_NVME_BYTES_OUT,       /* bytes read back from the tier */
	KVMM_STAT_NVME_NS_IN,           /* nanoseconds spent writing */
	KVMM_STAT_NVME_NS_OUT,          /* nanoseconds spent reading back */
	KVMM_STAT_NVME_CSUM_FAIL,       /* pages that failed verification (served as misses) */
	KVMM_STAT_NVME_IO_ERRORS,       /* copies or I/O that failed */
	KVMM_STAT_PAGES_IO,		/* (gauge) device pages promotions in
					 * flight are reading into */
	KVMM_STAT_PROMOTE_ASYNC,	/* PROMOTEs that completed later */
	KVMM_STAT_PROMOTE_CANCELED,	/* of those, whose sequence closed first */
	/* Write-through (struct kvmm_params.write_policy): */
	KVMM_STAT_PAGES_SHADOWED,	/* (gauge) device pages with a copy on the
					 * host tier; those host pages are in use
					 * but not in host_pages_cached */
	KVMM_STAT_WT_PAGES,		/* pages copied down when committed */
	KVMM_STAT_WT_SKIP_PAGES,	/* pages committed without a copy: no room
					 * below, or the copy failed */
	KVMM_STAT_DEMOTE_FREE_PAGES,	/* demoted pages whose copy was there: no
					 * byte moved */
	KVMM_STAT_SHADOW_DROP_PAGES,	/* copies given up: reclaimed on the host
					 * tier, or their device pages dropped */
	/* Resizing (kvmm_resize(), SET nr_pages): */
	KVMM_STAT_PAGES_MAX,		/* (gauge) pages the pool may grow to */
	KVMM_STAT_MIGRATE_PAGES,	/* cached pages moved down by a shrink */
	/* Background reclaim of the host tier (writeback to NVMe): */
	KVMM_STAT_HOST_WMARK_LOW,	/* (gauge) below it, writeback starts */
	KVMM_STAT_HOST_WMARK_HIGH,	/* (gauge) writeback goes on to it */
	KVMM_STAT_HOST_PAGES_WRITEBACK,	/* (gauge) host pages being written down */
	KVMM_STAT_WRITEBACK_RUNS,	/* writeback jobs started */
	/* The keyed page store (KSPACE, KPUT, KGET, ...): */
	KVMM_STAT_KEYED_SPACES,		/* (gauge) spaces registered or recovered */
	KVMM_STAT_KEYED_VALUES,		/* (gauge) values stored, on any tier */
	KVMM_STAT_KEYED_HOST_PAGES,	/* (gauge) host pages they hold (within
					 * host_pages_cached) */
	KVMM_STAT_KEYED_NVME_PAGES,	/* (gauge) NVMe pages they hold (within
					 * nvme_pages_cached) */
	KVMM_STAT_KEYED_PUTS,		/* values stored by KPUT */
	KVMM_STAT_KEYED_GETS,		/* values read by KGET */
	KVMM_STAT_KEYED_MISSES,		/* KGET keys not found, or found bad */
	KVMM_STAT_KEYED_EVICTS,		/* values reclaim dropped */
	KVMM_STAT_KEYED_SHARE,		/* (gauge) KVMM_SET_KEYED_SHARE, percent */
	KVMM_STAT_PAGES_WRITEBACK,	/* (gauge) device pages background reclaim
					 * is moving to the host tier */
	/* The remote tier (struct kvmm_params.remote), in pages of the pool: */
	KVMM_STAT_REMOTE_PROBES,	/* pages probed for */
	KVMM_STAT_REMOTE_PROBE_HITS,	/* ... and found */
	KVMM_STAT_REMOTE_GET_PAGES,	/* pages asked for */
	KVMM_STAT_REMOTE_GET_HITS,	/* ... read and verified */
	KVMM_STAT_REMOTE_BYTES_OUT,	/* bytes read from it */
	KVMM_STAT_REMOTE_PUT_PAGES,	/* pages written to it */
	KVMM_STAT_REMOTE_PUT_SKIPPED,	/* pages it had already: not written */
	KVMM_STAT_REMOTE_BYTES_IN,	/* bytes written to it */
	KVMM_STAT_REMOTE_CORRUPT,	/* values that did not verify: misses, deleted */
	KVMM_STAT_REMOTE_TIMEOUTS,	/* commands a shard did not answer in time */
	KVMM_STAT_REMOTE_ERRORS,	/* commands failed otherwise */
	KVMM_STAT_REMOTE_NS,		/* nanoseconds spent in its batches */
	KVMM_STAT_KEYED_REMOTE_GETS,	/* keyed values a get brought from it */
	/* Cache events (KVMM_SET_EVENTS, KVMM_OP_EVENTS): */
	KVMM_STAT_EVENTS,		/* events recorded */
	KVMM_STAT_EVENTS_DROPPED,	/* of those, overwritten before any reader
					 * read them (or dropped whole) */
	KVMM_STAT_EVENTS_BYTES,		/* (gauge) bytes of the event buffer, 0: off */
	/* The prefix tree over the remote tier (kvmm_remote_fetch(), _push()): */
	KVMM_STAT_REMOTE_FETCH_TOKENS,	/* tokens brought to the host tier */
	KVMM_STAT_REMOTE_PUSH_TOKENS,	/* tokens of prefixes pushed (written or there) */
	KVMM_STAT_REMOTE_DEMOTE_PAGES,	/* pages written to it (or there) as they left
					 * the host tier (KVMM_REMOTE_WRITE_DEMOTE) */
	/* A restart's NVMe pages whose prefix was not on the file: */
	KVMM_STAT_ORPHAN_PAGES,		/* (gauge) waiting for a prompt to compute it */
	KVMM_STAT_ORPHAN_ADOPTED,	/* hung in the tree below it since */
	/* What MATCH offered below the device (host_hit_tokens: what was served): */
	KVMM_STAT_HOST_OFFER_TOKENS,	/* tokens MATCH found on the host tier */
	KVMM_STAT_NVME_OFFER_TOKENS,	/* tokens MATCH found on the NVMe tier */
	KVMM_STAT_THROTTLE_PAGES,	/* host pages direct reclaim wrote to NVMe
					 * itself, background writeback behind */
	/* PREFETCH (kvmm_prefetch()), KPREFETCH (kvmm_keyed_prefetch()): */
	KVMM_STAT_PREFETCH_PAGES,	/* pages moved up to the device ahead of a MATCH,
					 * or keyed values to the host ahead of a get */
	KVMM_STAT_PREFETCH_HITS,	/* of those, pages a MATCH mapped, a get read */
	KVMM_STAT_PREFETCH_CANCELED,	/* pages of prefetches cancelled: given back */
	NR_KVMM_STATS
};

#define KVMM_STAT_TIER_ITEMS	(KVMM_STAT_NVME_PAGES_TOTAL - KVMM_STAT_HOST_PAGES_TOTAL)

#endif /* _UAPI_KVMM_KVMM_H */
