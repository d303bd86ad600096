// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/metrics.c - the Prometheus text format of a context's
 * statistics, for kvmmd's /metrics (http.c).
 *
 * Every statistic kvmmctl stat shows is one sample here, under a name
 * that follows Prometheus' conventions: counters end in _total, units are
 * in the name (_bytes, _seconds; kvmm's nanoseconds are converted), and
 * what kvmm counts per tier (the HOST_x and NVME_x pairs, the device's
 * own) is one metric with a tier label.  Pages by state are one gauge,
 * kvmm_pages{tier,state}.  Per namespace, the device pages cached and
 * pinned (DUMP_NS).  Histograms of command latency and of the time a
 * node's pages take to copy down or up a tier (DUMP_HIST).  The table below is checked against NR_KVMM_STATS at
 * build time, so a new statistic cannot be left out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "http.h"

enum { C, G };		/* counter, gauge */

/**
 * struct metric - how one statistic is shown
 * @name: the metric's name; samples of one name are shown together
 * @labels: its labels for this statistic ("" for none)
 * @type: C or G
 * @nano: nanoseconds shown as seconds
 * @help: the HELP line (the first statistic of a name gives it)
 */
struct metric {
	const char *name;
	const char *labels;
	uint8_t type;
	bool nano;
	const char *help;
};

#define M(stat, n, l, t, h)	[KVMM_STAT_##stat] = { n, l, t, false, h }
#define NS(stat, n, l, h)	[KVMM_STAT_##stat] = { n, l, C, true, h }
/* a statistic the host and NVMe tiers both count (KVMM_STAT_TIER_ITEMS apart) */
#define TIER(x, n, t, h)	M(HOST_##x, n, "tier=\"host\"", t, h), \
				M(NVME_##x, n, "tier=\"nvme\"", t, h)
#define TIER_NS(x, n, h)	NS(HOST_##x, n, "tier=\"host\"", h), \
				NS(NVME_##x, n, "tier=\"nvme\"", h)

static const struct metric metrics[] = {
	M(PAGES_TOTAL, "kvmm_tier_capacity_pages", "tier=\"device\"", G, "Pages of the tier"),
	M(PAGES_FREE, "kvmm_pages", "tier=\"device\",state=\"free\"", G,
	  "Pages of a tier by state: free, owned (open sequences), cached (the prefix tree), "
	  "io (promotions in flight), writeback"),
	M(PAGES_OWNED, "kvmm_pages", "tier=\"device\",state=\"owned\"", G, NULL),
	M(PAGES_CACHED, "kvmm_pages", "tier=\"device\",state=\"cached\"", G, NULL),
	M(PAGES_EVICTABLE, "kvmm_cached_pages", "class=\"evictable\"", G,
	  "Cached device pages: evictable (unlocked), protected (locked), pinned"),
	M(PAGES_PROTECTED, "kvmm_cached_pages", "class=\"protected\"", G, NULL),
	M(PAGES_PINNED, "kvmm_cached_pages", "class=\"pinned\"", G, NULL),
	M(NODES, "kvmm_tree_nodes", "", G, "Prefix tree nodes, roots excluded"),
	M(LEAVES_EVICTABLE, "kvmm_tree_evictable_leaves", "", G, "Nodes on the reclaim lists"),
	M(SEQS_OPEN, "kvmm_sequences_open", "", G, "Open sequences"),
	M(WMARK_MIN, "kvmm_watermark_pages", "tier=\"device\",mark=\"min\"", G,
	  "Free-page watermarks of a tier"),
	M(WMARK_LOW, "kvmm_watermark_pages", "tier=\"device\",mark=\"low\"", G, NULL),
	M(WMARK_HIGH, "kvmm_watermark_pages", "tier=\"device\",mark=\"high\"", G, NULL),
	M(META_BYTES, "kvmm_metadata_bytes", "", G, "Metadata memory in use"),
	M(MATCH_CALLS, "kvmm_match_calls_total", "", C, "MATCH commands"),
	M(MATCH_TOKENS, "kvmm_match_tokens_total", "", C, "Tokens asked for by MATCH"),
	M(HIT_TOKENS, "kvmm_hit_tokens_total", "tier=\"device\"", C,
	  "Tokens found cached: on the device by MATCH, on a lower tier brought back by PROMOTE"),
	M(MISS_TOKENS, "kvmm_miss_tokens_total", "", C, "Tokens MATCH found on no tier"),
	M(INSERT_TOKENS, "kvmm_inserted_tokens_total", "", C, "Tokens newly added to the tree"),
	M(DEDUP_PAGES, "kvmm_dedup_pages_total", "", C, "Committed pages found already cached"),
	M(SPLITS, "kvmm_tree_splits_total", "", C, "Node splits"),
	M(ALLOC_PAGES, "kvmm_allocated_pages_total", "", C, "Device pages handed out"),
	M(FREE_PAGES, "kvmm_freed_pages_total", "", C, "Device pages given back"),
	M(ALLOC_FAIL, "kvmm_alloc_failures_total", "", C, "Allocations refused with ENOSPC"),
	M(RECLAIM_RUNS, "kvmm_reclaim_runs_total", "", C, "Reclaim runs"),
	M(EVICT_NODES, "kvmm_evicted_nodes_total", "", C, "Nodes evicted from the device"),
	M(EVICT_PAGES, "kvmm_evicted_pages_total", "tier=\"device\"", C,
	  "Pages dropped from a tier"),
	M(RETRACTS, "kvmm_retracts_total", "", C, "RETRACT commands"),
	TIER(PAGES_TOTAL, "kvmm_tier_capacity_pages", G, NULL),
	M(HOST_PAGES_FREE, "kvmm_pages", "tier=\"host\",state=\"free\"", G, NULL),
	M(NVME_PAGES_FREE, "kvmm_pages", "tier=\"nvme\",state=\"free\"", G, NULL),
	M(HOST_PAGES_CACHED, "kvmm_pages", "tier=\"host\",state=\"cached\"", G, NULL),
	M(NVME_PAGES_CACHED, "kvmm_pages", "tier=\"nvme\",state=\"cached\"", G, NULL),
	TIER(HIT_TOKENS, "kvmm_hit_tokens_total", C, NULL),
	TIER(DEMOTE_PAGES, "kvmm_demoted_pages_total", C, "Pages moved onto a tier"),
	TIER(PROMOTE_PAGES, "kvmm_promoted_pages_total", C,
	     "Pages moved from a tier back to the device"),
	TIER(EVICT_PAGES, "kvmm_evicted_pages_total", C, NULL),
	TIER(BYTES_IN, "kvmm_tier_written_bytes_total", C, "Bytes written to a tier"),
	TIER(BYTES_OUT, "kvmm_tier_read_bytes_total", C, "Bytes read back from a tier"),
	TIER_NS(NS_IN, "kvmm_tier_write_seconds_total", "Time spent writing to a tier"),
	TIER_NS(NS_OUT, "kvmm_tier_read_seconds_total", "Time spent reading back from a tier"),
	TIER(CSUM_FAIL, "kvmm_checksum_failures_total", C,
	     "Pages that failed verification, served as misses"),
	TIER(IO_ERRORS, "kvmm_io_errors_total", C, "Copies or I/O that failed"),
	M(PAGES_IO, "kvmm_pages", "tier=\"device\",state=\"io\"", G, NULL),
	M(PROMOTE_ASYNC, "kvmm_promotes_async_total", "", C, "PROMOTEs that completed later"),
	M(PROMOTE_CANCELED, "kvmm_promotes_canceled_total", "", C,
	  "Asynchronous PROMOTEs whose sequence closed first"),
	M(PAGES_SHADOWED, "kvmm_shadowed_pages", "", G,
	  "Device pages with a copy on the host tier"),
	M(WT_PAGES, "kvmm_write_through_pages_total", "", C, "Pages copied down when committed"),
	M(WT_SKIP_PAGES, "kvmm_write_through_skipped_pages_total", "", C,
	  "Pages committed without a copy"),
	M(DEMOTE_FREE_PAGES, "kvmm_demote_free_pages_total", "", C,
	  "Demoted pages whose copy was there already"),
	M(SHADOW_DROP_PAGES, "kvmm_shadow_dropped_pages_total", "", C, "Copies given up"),
	M(PAGES_MAX, "kvmm_tier_max_pages", "tier=\"device\"", G, "Pages the pool may grow to"),
	M(MIGRATE_PAGES, "kvmm_migrated_pages_total", "", C, "Cached pages moved down by a shrink"),
	M(HOST_WMARK_LOW, "kvmm_watermark_pages", "tier=\"host\",mark=\"low\"", G, NULL),
	M(HOST_WMARK_HIGH, "kvmm_watermark_pages", "tier=\"host\",mark=\"high\"", G, NULL),
	M(HOST_PAGES_WRITEBACK, "kvmm_pages", "tier=\"host\",state=\"writeback\"", G, NULL),
	M(WRITEBACK_RUNS, "kvmm_writeback_runs_total", "", C, "Writeback jobs started"),
	M(KEYED_SPACES, "kvmm_keyed_spaces", "", G, "Keyed spaces registered or recovered"),
	M(KEYED_VALUES, "kvmm_keyed_values", "", G, "Keyed values stored, on any tier"),
	M(KEYED_HOST_PAGES, "kvmm_keyed_pages", "tier=\"host\"", G, "Pages keyed values hold"),
	M(KEYED_NVME_PAGES, "kvmm_keyed_pages", "tier=\"nvme\"", G, NULL),
	M(KEYED_PUTS, "kvmm_keyed_puts_total", "", C, "Values stored by KPUT"),
	M(KEYED_GETS, "kvmm_keyed_gets_total", "", C, "Values read by KGET"),
	M(KEYED_MISSES, "kvmm_keyed_misses_total", "", C, "KGET keys not found, or found bad"),
	M(KEYED_EVICTS, "kvmm_keyed_evictions_total", "", C, "Keyed values reclaim dropped"),
	M(KEYED_SHARE, "kvmm_keyed_share_percent", "", G, "KVMM_SET_KEYED_SHARE"),
	M(PAGES_WRITEBACK, "kvmm_pages", "tier=\"device\",state=\"writeback\"", G, NULL),
	M(REMOTE_PROBES, "kvmm_remote_probed_pages_total", "", C, "Remote tier: pages probed for"),
	M(REMOTE_PROBE_HITS, "kvmm_remote_probe_hits_total", "", C, "Remote tier: probes found"),
	M(REMOTE_GET_PAGES, "kvmm_remote_get_pages_total", "", C, "Remote tier: pages asked for"),
	M(REMOTE_GET_HITS, "kvmm_remote_get_hits_total", "", C,
	  "Remote tier: pages read and verified"),
	M(REMOTE_BYTES_OUT, "kvmm_remote_read_bytes_total", "", C, "Remote tier: bytes read"),
	M(REMOTE_PUT_PAGES, "kvmm_remote_put_pages_total", "", C, "Remote tier: pages written"),
	M(REMOTE_PUT_SKIPPED, "kvmm_remote_put_skipped_pages_total", "", C,
	  "Remote tier: pages it had already"),
	M(REMOTE_BYTES_IN, "kvmm_remote_written_bytes_total", "", C, "Remote tier: bytes written"),
	M(REMOTE_CORRUPT, "kvmm_remote_corrupt_values_total", "", C,
	  "Remote tier: values that did not verify"),
	M(REMOTE_TIMEOUTS, "kvmm_remote_timeouts_total", "", C,
	  "Remote tier: commands not answered in time"),
	M(REMOTE_ERRORS, "kvmm_remote_errors_total", "", C, "Remote tier: commands failed"),
	NS(REMOTE_NS, "kvmm_remote_seconds_total", "", "Remote tier: time spent in batches"),
	M(KEYED_REMOTE_GETS, "kvmm_keyed_remote_gets_total", "", C,
	  "Keyed values a get brought from the remote tier"),
	M(EVENTS, "kvmm_events_total", "", C, "Cache events recorded"),
	M(EVENTS_DROPPED, "kvmm_events_dropped_total", "", C,
	  "Cache events overwritten before any reader read them"),
	M(EVENTS_BYTES, "kvmm_events_buffer_bytes", "", G, "Bytes of the cache event buffer"),
	M(REMOTE_FETCH_TOKENS, "kvmm_remote_fetched_tokens_total", "", C,
	  "Tokens brought from the remote tier to the host tier"),
	M(REMOTE_PUSH_TOKENS, "kvmm_remote_pushed_tokens_total", "", C,
	  "Tokens of prefixes pushed to the remote tier"),
	M(REMOTE_DEMOTE_PAGES, "kvmm_remote_demoted_pages_total", "", C,
	  "Pages written to the remote tier as they left the host tier"),
	M(ORPHAN_PAGES, "kvmm_orphan_pages", "", G, "Recovered pages waiting for their prompt"),
	M(ORPHAN_ADOPTED, "kvmm_orphans_adopted_total", "", C, "Orphan pages adopted since"),
	M(HOST_OFFER_TOKENS, "kvmm_offered_tokens_total", "tier=\"host\"", C,
	  "Tokens MATCH found on a lower tier"),
	M(NVME_OFFER_TOKENS, "kvmm_offered_tokens_total", "tier=\"nvme\"", C, NULL),
	M(THROTTLE_PAGES, "kvmm_throttled_pages_total", "", C,
	  "Host pages a command wrote to NVMe itself (throttled)"),
	M(PREFETCH_PAGES, "kvmm_prefetched_pages_total", "", C,
	  "Pages PREFETCH moved up to the device ahead of a MATCH"),
	M(PREFETCH_HITS, "kvmm_prefetch_hit_pages_total", "", C,
	  "Prefetched pages a MATCH then mapped"),
	M(PREFETCH_CANCELED, "kvmm_prefetch_canceled_pages_total", "", C,
	  "Pages of cancelled prefetches, given back"),
};
_Static_assert(sizeof(metrics) / sizeof(metrics[0]) == NR_KVMM_STATS,
	       "every statistic has a metric");

/* One sample's value: a count, or nanoseconds as seconds. */
static void put_value(FILE *f, const struct metric *m, uint64_t v)
{
	if (m->nano)
		fprintf(f, "%.9f\n", v / 1e9);
	else
		fprintf(f, "%llu\n", (unsigned long long)v);
}

/* The statistics, each name's samples together under one HELP and TYPE. */
static void put_stats(FILE *f, const uint64_t *st)
{
	bool done[NR_KVMM_STATS] = { false };
	uint32_t i, j;

	for (i = 0; i < NR_KVMM_STATS; i++) {
		const struct metric *m = &metrics[i];

		if (done[i])
			continue;
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name,
			m->help ? m->help : "", m->name, m->type == C ? "counter" : "gauge");
		for (j = i; j < NR_KVMM_STATS; j++) {
			const struct metric *o = &metrics[j];

			if (done[j] || strcmp(o->name, m->name))
				continue;
			done[j] = true;
			fprintf(f, "%s%s%s%s ", o->name, *o->labels ? "{" : "", o->labels,
				*o->labels ? "}" : "");
			put_value(f, o, st[j]);
		}
	}
}

/* Per namespace: the device pages each caches and pins (DUMP_NS). */
static int put_namespaces(FILE *f, struct kvmm_ctx *ctx)
{
	static const char *const what[2] = { "cached", "pinned" };
	struct kvmm_iovec iov;
	uint64_t cursor = 0;
	size_t len = 64 << 10;
	void *buf = aligned_alloc(8, len);
	char *rows[2] = { NULL, NULL };
	size_t rlen[2] = { 0, 0 };
	FILE *rf[2];
	int ret = 0, k;

	if (!buf)
		return -ENOMEM;
	rf[0] = open_memstream(&rows[0], &rlen[0]);
	rf[1] = open_memstream(&rows[1], &rlen[1]);
	if (!rf[0] || !rf[1]) {
		ret = -ENOMEM;
		goto out;
	}
	iov = (struct kvmm_iovec){ buf, len };
	do {
		const struct kvmm_dump_hdr *hdr = buf;
		struct kvmm_sqe sqe;
		uint32_t i;

		memset(&sqe, 0, sizeof(sqe));
		kvmm_prep_dump(&sqe, KVMM_DUMP_NS, cursor, 0, 0, (uint32_t)len);
		ret = kvmm_ioctl(ctx, &sqe, &iov, 1);
		if (ret < 0)
			goto out;
		for (i = 0; i < hdr->nr; i++) {
			const struct kvmm_dump_ns *n = (const void *)((const char *)(hdr + 1) +
								     (size_t)i * hdr->rec_size);

			fprintf(rf[0], "kvmm_namespace_pages{ns=\"%u\",state=\"cached\"} %llu\n",
				n->ns, (unsigned long long)n->cached);
			fprintf(rf[1], "kvmm_namespace_pages{ns=\"%u\",state=\"pinned\"} %llu\n",
				n->ns, (unsigned long long)n->pinned);
		}
		cursor = hdr->next;
	} while (cursor);
	ret = 0;
out:
	for (k = 0; k < 2; k++)
		if (rf[k])
			fclose(rf[k]);
	if (!ret) {
		fprintf(f, "# HELP kvmm_namespace_pages Device pages of a namespace: %s, %s\n"
			"# TYPE kvmm_namespace_pages gauge\n%s%s", what[0], what[1],
			rows[0] ? rows[0] : "", rows[1] ? rows[1] : "");
	}
	free(rows[0]);
	free(rows[1]);
	free(buf);
	return ret;
}

/* One histogram's samples: cumulative buckets, +Inf, sum and count. */
static void put_hist(FILE *f, const char *name, const char *labels,
		     const struct kvmm_dump_hist *h)
{
	uint64_t cum = 0;
	uint32_t i;

	for (i = 0; i + 1 < KVMM_HIST_BUCKETS; i++) {
		cum += h->buckets[i];
		fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, *labels ? "," : "",
			(double)(1ull << i) * 1e-6, (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, *labels ? "," : "",
		(unsigned long long)h->count);
	fprintf(f, "%s_sum%s%s%s %.9f\n%s_count%s%s%s %llu\n", name, *labels ? "{" : "", labels,
		*labels ? "}" : "", h->sum_ns / 1e9, name, *labels ? "{" : "", labels,
		*labels ? "}" : "", (unsigned long long)h->count);
}

/* The latency histograms (DUMP_HIST). */
static int put_histograms(FILE *f, struct kvmm_ctx *ctx)
{
	struct {
		struct kvmm_dump_hdr hdr;
		struct kvmm_dump_hist h[KVMM_HIST_LAST];
	} out;
	struct kvmm_iovec iov = { &out, sizeof(out) };
	struct kvmm_sqe sqe;
	int ret;

	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_dump(&sqe, KVMM_DUMP_HIST, 0, 0, 0, sizeof(out));
	ret = kvmm_ioctl(ctx, &sqe, &iov, 1);
	if (ret < 0)
		return ret;
	if (ret != KVMM_HIST_LAST || out.hdr.rec_size != sizeof(out.h[0]))
		return -EPROTO;
	fprintf(f, "# HELP kvmm_command_duration_seconds Time a command took in the "
		"dispatcher, under the context's lock\n"
		"# TYPE kvmm_command_duration_seconds histogram\n");
	put_hist(f, "kvmm_command_duration_seconds", "", &out.h[KVMM_HIST_CMD]);
	fprintf(f, "# HELP kvmm_tier_copy_duration_seconds Time a node's pages took to copy "
		"down a tier (demote) or back up (promote)\n"
		"# TYPE kvmm_tier_copy_duration_seconds histogram\n");
	put_hist(f, "kvmm_tier_copy_duration_seconds", "direction=\"demote\"",
		 &out.h[KVMM_HIST_DEMOTE]);
	put_hist(f, "kvmm_tier_copy_duration_seconds", "direction=\"promote\"",
		 &out.h[KVMM_HIST_PROMOTE]);
	return 0;
}

/**
 * kvmmd_metrics_text() - the Prometheus exposition of @ctx's statistics
 * @ctx: the context
 * @extra: more samples to append (the HTTP server's own), or NULL
 * @extra_arg: its argument
 * @out: the text, malloc()ed; the caller frees it
 * @len: its length
 *
 * Return: 0 or -errno.
 */
int kvmmd_metrics_text(struct kvmm_ctx *ctx, void (*extra)(FILE *f, void *arg), void *extra_arg,
		       char **out, size_t *len)
{
	uint64_t st[NR_KVMM_STATS];
	FILE *f;
	int ret;

	*out = NULL;
	f = open_memstream(out, len);
	if (!f)
		return -ENOMEM;
	ret = kvmm_stats(ctx, st, NR_KVMM_STATS);
	if (ret >= 0) {
		put_stats(f, st);
		ret = put_namespaces(f, ctx);
	}
	if (!ret)
		ret = put_histograms(f, ctx);
	if (!ret && extra)
		extra(f, extra_arg);
	if (fclose(f) || ret < 0) {
		free(*out);
		*out = NULL;
		return ret < 0 ? ret : -ENOMEM;
	}
	return 0;
}
