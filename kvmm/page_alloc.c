// SPDX-License-Identifier: MIT
/*
 * kvmm/page_alloc.c - the page-frame allocator of a zone.
 *
 * DOC: page frames
 *
 * A zone is an array of page frames numbered 0..nr_pages-1; frame f holds
 * the KV of slots f * page_size .. f * page_size + page_size - 1 in the
 * backend's buffers.  Each frame has a 2-byte descriptor (struct
 * kvmm_page) and a bit in a hierarchical free bitmap.
 *
 * Why a bitmap and not free lists: engines gather KV by slot, and a run of
 * consecutive frames is one contiguous copy for the offload paths and one
 * cache line of page-table entries that differ by one.  A bitmap searched
 * next-fit hands out runs whenever the free space has them, at no extra
 * cost: a bulk allocation takes all the free bits of a word at once.  Each
 * level of the bitmap summarises 64 words of the level below, so finding
 * the next free frame reads one word per level (at most six for 2^30
 * frames): O(1) for one frame, O(n) for n frames, whatever the fill.
 *
 * Watermarks (struct kvmm_zone.wmark), as in the kernel:
 *  - an allocation that would leave fewer than LOW free frames first
 *    reclaims cached leaves until HIGH frames would be free after it;
 *  - ordinary allocations never take the last MIN frames; a caller that
 *    must not fail mid-decode passes KVMM_ALLOC_RESERVE and may.
 * With all three at zero (the default) this is SGLang's behaviour: evict
 * exactly the shortfall, only when the free pool is short.
 *
 * An allocation that cannot be satisfied even after reclaiming every
 * evictable page fails with -ENOSPC before evicting anything, so a failed
 * allocation changes nothing.
 */
#include <stdlib.h>

#include "internal.h"

/* ---- hierarchical bitmap ---- */

static int hb_init(struct kvmm_ctx *ctx, struct kvmm_hbitmap *hb, uint32_t nbits)
{
	uint64_t words = 0, n = nbits;
	uint64_t *mem;
	uint32_t l;

	hb->nr_levels = 0;
	do {
		n = (n + 63) / 64;
		hb->nwords[hb->nr_levels++] = (uint32_t)n;
		words += n;
	} while (n > 1 && hb->nr_levels < KVMM_HB_LEVELS);

	hb->bytes = words * sizeof(uint64_t);
	mem = kvmm_zalloc(ctx, hb->bytes);
	if (!mem)
		return -ENOMEM;
	for (l = 0; l < hb->nr_levels; l++) {
		hb->level[l] = mem;
		mem += hb->nwords[l];
	}
	return 0;
}

/* Set bits in word @w of level 0 and mark the summaries above. */
static void hb_set_mask(struct kvmm_hbitmap *hb, uint64_t w, uint64_t mask)
{
	uint32_t l;

	for (l = 0; l < hb->nr_levels; l++) {
		uint64_t old = hb->level[l][w];

		hb->level[l][w] = old | mask;
		if (old)
			return;
		mask = 1ULL << (w & 63);
		w >>= 6;
	}
}

/* Clear bits in word @w of level 0; an emptied word clears its summary. */
static void hb_clear_mask(struct kvmm_hbitmap *hb, uint64_t w, uint64_t mask)
{
	uint32_t l;

	for (l = 0; l < hb->nr_levels; l++) {
		hb->level[l][w] &= ~mask;
		if (hb->level[l][w])
			return;
		mask = 1ULL << (w & 63);
		w >>= 6;
	}
}

/* The first set bit at or after @pos, or -1. */
static int64_t hb_find(const struct kvmm_hbitmap *hb, uint64_t pos)
{
	uint64_t idx = pos;
	uint32_t l;

	for (l = 0; l < hb->nr_levels; l++) {
		uint64_t w = idx >> 6, bits;

		if (w >= hb->nwords[l])
			return -1;
		bits = hb->level[l][w] & (~0ULL << (idx & 63));
		if (bits) {
			idx = (w << 6) | (uint64_t)__builtin_ctzll(bits);
			break;
		}
		idx = w + 1;
	}
	if (l == hb->nr_levels)
		return -1;
	while (l-- > 0)
		idx = (idx << 6) | (uint64_t)__builtin_ctzll(hb->level[l][idx]);
	return (int64_t)idx;
}

static bool hb_test(const struct kvmm_hbitmap *hb, uint64_t bit)
{
	return hb->level[0][bit >> 6] >> (bit & 63) & 1;
}

/* ---- zones ---- */

/* The descriptor of a free frame of @zone (offline frames have it too). */
static struct kvmm_page page_free(const struct kvmm_zone *zone)
{
	return (struct kvmm_page){ .state = KVMM_PAGE_FREE, .tier = (uint8_t)zone->tier };
}

/* The descriptor of a frame just allocated from @zone. */
static struct kvmm_page page_owned(const struct kvmm_zone *zone)
{
	return (struct kvmm_page){ .state = KVMM_PAGE_OWNED,
				   .tier = (uint8_t)zone->tier, .refcount = 1 };
}


/**
 * kvmm_zone_init() - set up a zone of @nr_pages free frames
 * @ctx: the context whose allocator provides the metadata
 * @zone: caller's memory
 * @nr_pages: frames online now, at least 1
 * @max_pages: frames the zone may grow to (kvmm_zone_online()), at least
 *	@nr_pages; the descriptors and the bitmap are sized for these
 * @tier: KVMM_TIER_* the frames belong to
 *
 * Return: 0, or -ENOMEM with nothing held.
 */
int kvmm_zone_init(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		   uint32_t nr_pages, uint32_t max_pages, uint32_t tier)
{
	int ret;

	memset(zone, 0, sizeof(*zone));
	zone->pages = kvmm_malloc(ctx, (size_t)max_pages * sizeof(*zone->pages));
	if (!zone->pages)
		return -ENOMEM;
	ret = hb_init(ctx, &zone->free, max_pages);
	if (ret) {
		kvmm_mfree(ctx, zone->pages, (size_t)max_pages * sizeof(*zone->pages));
		zone->pages = NULL;
		return ret;
	}
	zone->max_pages = max_pages;
	zone->tier = tier;
	kvmm_zone_offline(zone, 0);	/* every descriptor, no bit */
	kvmm_zone_online(zone, nr_pages);
	return 0;
}

void kvmm_zone_exit(struct kvmm_ctx *ctx, struct kvmm_zone *zone)
{
	if (!zone->pages)
		return;
	kvmm_mfree(ctx, zone->free.level[0], zone->free.bytes);
	kvmm_mfree(ctx, zone->pages, (size_t)zone->max_pages * sizeof(*zone->pages));
	zone->pages = NULL;
}

/*
 * The bits of frames [*@pfn, @to) that lie in *@pfn's bitmap word; moves
 * *@pfn to the first frame of the next word (or @to).
 */
static uint64_t word_span(uint64_t *pfn, uint64_t to)
{
	uint64_t from = *pfn, end = (from | 63) + 1 < to ? (from | 63) + 1 : to;

	*pfn = end;
	return (end - from == 64 ? ~0ULL : ((1ULL << (end - from)) - 1)) << (from & 63);
}

/**
 * kvmm_zone_online() - grow the zone to @nr_pages frames
 * @zone: the zone
 * @nr_pages: at least its size now, at most max_pages
 *
 * Frames [nr_pages now, @nr_pages) join as free frames, a word of the
 * bitmap at a time.  As memory hotplug onlines a section: the backing
 * memory must be there first.
 */
void kvmm_zone_online(struct kvmm_zone *zone, uint32_t nr_pages)
{
	const struct kvmm_page free_desc = page_free(zone);
	uint64_t pfn;

	for (pfn = zone->nr_pages; pfn < nr_pages; pfn++)
		zone->pages[pfn] = free_desc;
	for (pfn = zone->nr_pages; pfn < nr_pages;) {
		uint64_t w = pfn >> 6;

		hb_set_mask(&zone->free, w, word_span(&pfn, nr_pages));
	}
	zone->nr_free += nr_pages - zone->nr_pages;
	zone->nr_pages = nr_pages;
}

/**
 * kvmm_zone_isolate() - keep the allocator off frames @from and up
 * @zone: the zone
 * @from: first frame isolated, at most nr_pages
 *
 * The free ones leave the bitmap (and nr_free); the rest keep their state.
 * Undone by kvmm_zone_unisolate(), completed by kvmm_zone_offline().
 */
void kvmm_zone_isolate(struct kvmm_zone *zone, uint32_t from)
{
	uint64_t pfn;

	zone->nr_free -= kvmm_zone_count_free(zone, from, zone->nr_pages);
	for (pfn = from; pfn < zone->nr_pages;) {
		uint64_t w = pfn >> 6;

		hb_clear_mask(&zone->free, w, word_span(&pfn, zone->nr_pages));
	}
	if (zone->cursor >= from)
		zone->cursor = 0;
}

/* Give the free frames from @from up back to the allocator. */
void kvmm_zone_unisolate(struct kvmm_zone *zone, uint32_t from)
{
	uint32_t pfn;

	for (pfn = from; pfn < zone->nr_pages; pfn++) {
		if (zone->pages[pfn].state != KVMM_PAGE_FREE)
			continue;
		hb_set_mask(&zone->free, pfn >> 6, 1ULL << (pfn & 63));
		zone->nr_free++;
	}
}

/**
 * kvmm_zone_offline() - shrink the zone to @nr_pages frames
 * @zone: the zone
 * @nr_pages: at most its size now
 *
 * Frames from @nr_pages up must hold nothing: free, or isolated and
 * emptied by the caller (whose descriptors say what they held before).
 * They are isolated if they are not yet and get offline descriptors;
 * nothing allocates them until kvmm_zone_online().
 */
void kvmm_zone_offline(struct kvmm_zone *zone, uint32_t nr_pages)
{
	const struct kvmm_page off_desc = page_free(zone);
	uint32_t pfn;

	kvmm_zone_isolate(zone, nr_pages);
	for (pfn = nr_pages; pfn < zone->max_pages; pfn++)
		zone->pages[pfn] = off_desc;
	zone->nr_pages = nr_pages;
}

/* Free frames in [@from, @to): a popcount a word at a time. */
uint32_t kvmm_zone_count_free(const struct kvmm_zone *zone, uint32_t from, uint32_t to)
{
	uint64_t pfn = from, n = 0;

	while (pfn < to) {
		uint64_t w = pfn >> 6;

		n += (uint64_t)__builtin_popcountll(zone->free.level[0][w] &
						    word_span(&pfn, to));
	}
	return (uint32_t)n;
}

bool kvmm_zone_test_free(const struct kvmm_zone *zone, uint32_t pfn)
{
	return hb_test(&zone->free, pfn);
}

/**
 * kvmm_alloc_pfn() - take one given frame, if it is free
 * @zone: its zone
 * @pfn: the frame
 *
 * For a restart, where pages come back to the frames their bytes are in.
 *
 * Return: whether it was free; it is now OWNED with one reference.
 */
bool kvmm_alloc_pfn(struct kvmm_zone *zone, uint32_t pfn)
{
	const struct kvmm_page owned = page_owned(zone);

	if (pfn >= zone->nr_pages || !hb_test(&zone->free, pfn))
		return false;
	hb_clear_mask(&zone->free, pfn >> 6, 1ULL << (pfn & 63));
	zone->pages[pfn] = owned;
	zone->nr_free--;
	return true;
}

/**
 * kvmm_alloc_pfns() - take given frames, in order, while each is free
 * @zone: their zone
 * @pfns: the frames
 * @nr: how many
 *
 * kvmm_alloc_pfn() of each in turn, stopping at the first that is not
 * free (or is named again): the bitmap is read and cleared a word at a
 * time, so a run of frames in one word costs one update of its summaries.
 *
 * Return: how many were taken (the first ones); they are OWNED with one
 * reference each.
 */
uint32_t kvmm_alloc_pfns(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr)
{
	const struct kvmm_page owned = page_owned(zone);
	uint64_t w = UINT64_MAX, mask = 0, avail = 0;
	uint32_t i;

	for (i = 0; i < nr; i++) {
		uint32_t pfn = (uint32_t)pfns[i];
		uint64_t bit = 1ULL << (pfn & 63);

		if (pfn >= zone->nr_pages)
			break;
		if ((pfn >> 6) != w) {
			if (mask)
				hb_clear_mask(&zone->free, w, mask);
			w = pfn >> 6;
			mask = 0;
			avail = zone->free.level[0][w];
		}
		if (!(avail & bit))	/* not free, or taken a moment ago */
			break;
		avail &= ~bit;
		mask |= bit;
		zone->pages[pfn] = owned;
	}
	if (mask)
		hb_clear_mask(&zone->free, w, mask);
	zone->nr_free -= i;
	return i;
}

/*
 * Take @nr frames off the bitmap, next-fit from the cursor, and mark them
 * OWNED with one reference; nr_free >= nr.
 */
static void __rmqueue_bulk(struct kvmm_zone *zone, uint32_t nr, int32_t *pfns)
{
	const struct kvmm_page owned = page_owned(zone);
	uint64_t pos = zone->cursor;
	uint32_t got = 0;

	while (got < nr) {
		int64_t bit = hb_find(&zone->free, pos);
		uint64_t w, word, mask = 0;

		if (bit < 0)
			bit = hb_find(&zone->free, 0);
		w = (uint64_t)bit >> 6;
		word = zone->free.level[0][w] & (~0ULL << (bit & 63));
		/* Whole runs of free frames at a time: iota into pfns[]. */
		while (word && got < nr) {
			uint32_t b = (uint32_t)__builtin_ctzll(word);
			uint64_t rest = ~(word >> b);
			uint32_t run = rest ? (uint32_t)__builtin_ctzll(rest) : 64 - b;
			uint32_t base = (uint32_t)(w * 64 + b), i;

			if (run > nr - got)
				run = nr - got;
			for (i = 0; i < run; i++) {
				pfns[got + i] = (int32_t)(base + i);
				zone->pages[base + i] = owned;
			}
			got += run;
			mask |= (run == 64 ? ~0ULL : ((1ULL << run) - 1)) << b;
			word &= ~mask;
		}
		hb_clear_mask(&zone->free, w, mask);
		pos = (uint64_t)pfns[got - 1] + 1;
		if (pos >= zone->nr_pages)
			pos = 0;
	}
	zone->cursor = (uint32_t)pos;
	zone->nr_free -= nr;
}

/*
 * Reclaim for an allocation of @nr frames that would break the low
 * watermark.  Returns false, having evicted nothing, when even reclaiming
 * everything evictable would not make room for it.
 */
static bool __alloc_pages_reclaim(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
				  uint64_t nr, uint64_t reserve)
{
	struct kvmm_scan_control sc = { 0 };
	uint64_t target = nr + zone->wmark[KVMM_WMARK_HIGH];

	if (zone->nr_free + ctx->lruvec[KVMM_TIER_DEVICE].evictable < nr + reserve)
		return false;
	if (target < nr + reserve)
		target = nr + reserve;
	if (target <= zone->nr_free)
		return true;
	sc.nr_to_reclaim = target - zone->nr_free;
	kvmm_shrink(ctx, &sc);
	return true;
}

/**
 * kvmm_zone_reserve() - make sure @nr frames can be allocated now
 * @ctx: the context
 * @zone: the zone
 * @nr: frames the caller is about to take with __kvmm_alloc_pages()
 * @flags: KVMM_ALLOC_RESERVE, KVMM_ALLOC_NORECLAIM
 *
 * Below the low watermark this reclaims cached leaves first (below the min
 * watermark where background reclaim keeps the zone above low,
 * kvmm_writeback()).  Callers that
 * allocate for several owners at once (a decode batch) reserve the total
 * once, so that the batch either gets all its frames or none.
 *
 * Return: 0, or -ENOSPC with nothing evicted.
 */
int kvmm_zone_reserve(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		      uint64_t nr, uint32_t flags)
{
	uint64_t reserve = (flags & KVMM_ALLOC_RESERVE) ? 0 : zone->wmark[KVMM_WMARK_MIN];
	/* background reclaim keeps it above low: a command reclaims below min */
	uint64_t low = kvmm_writeback_serves(ctx, zone->tier) ? zone->wmark[KVMM_WMARK_MIN] :
							       zone->wmark[KVMM_WMARK_LOW];

	if (zone->nr_free < nr + low && !(flags & KVMM_ALLOC_NORECLAIM)) {
		if (!__alloc_pages_reclaim(ctx, zone, nr, reserve))
			goto nospc;
	}
	if (zone->nr_free < nr + reserve)
		goto nospc;
	return 0;

nospc:
	kvmm_count(ctx, EV_ALLOC_FAIL, 1);
	return -ENOSPC;
}

/**
 * __kvmm_alloc_pages() - take @nr frames that kvmm_zone_reserve() made room for
 * @ctx: the context
 * @zone: the zone
 * @nr: frames, at most nr_free
 * @pfns: out, frame numbers; consecutive where the free space allows
 *
 * The frames come back OWNED with one reference each.
 */
void __kvmm_alloc_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
			uint32_t nr, int32_t *pfns)
{
	if (!nr)
		return;
	kvmm_assert(ctx, nr <= zone->nr_free);
	__rmqueue_bulk(zone, nr, pfns);
	if (zone->tier == KVMM_TIER_DEVICE)
		kvmm_count(ctx, EV_ALLOC_PAGES, nr);
}

/**
 * kvmm_alloc_pages() - allocate @nr page frames
 * @ctx: the context
 * @zone: the zone to allocate from
 * @nr: frames wanted, may be 0
 * @pfns: out, @nr frame numbers
 * @flags: KVMM_ALLOC_RESERVE, KVMM_ALLOC_NORECLAIM
 *
 * kvmm_zone_reserve() then __kvmm_alloc_pages().
 *
 * Return: 0, or -ENOSPC with nothing allocated and nothing evicted.
 */
int kvmm_alloc_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		     uint32_t nr, int32_t *pfns, uint32_t flags)
{
	int ret = kvmm_zone_reserve(ctx, zone, nr, flags);

	if (!ret)
		__kvmm_alloc_pages(ctx, zone, nr, pfns);
	return ret;
}

/**
 * kvmm_free_pages() - drop the owner's reference on @nr frames
 * @ctx: the context
 * @zone: the zone they belong to
 * @pfns: frame numbers; runs of consecutive frames are freed a word at a time
 * @nr: how many
 *
 * A frame whose last reference goes returns to the free bitmap.  Freeing a
 * free frame is reported as corruption and skipped: the release build
 * carries on, a DEBUG >= 2 build stops.
 */
void kvmm_free_pages(struct kvmm_ctx *ctx, struct kvmm_zone *zone,
		     const int32_t *pfns, uint32_t nr)
{
	const struct kvmm_page free_desc = page_free(zone);
	uint64_t w = UINT64_MAX, mask = 0;
	uint32_t i, freed = 0;

	for (i = 0; i < nr; i++) {
		uint32_t pfn = (uint32_t)pfns[i];
		struct kvmm_page *page;

		if (unlikely(pfn >= zone->nr_pages)) {
			kvmm_report(ctx, "bad page free: pfn %u outside the pool", pfn);
			kvmm_assert(ctx, 0);
			continue;
		}
		page = &zone->pages[pfn];
		/* The common case, the owner's last reference: one 2-byte store. */
		if (unlikely(page->refcount != 1 || page->state == KVMM_PAGE_FREE)) {
			if (page->state != KVMM_PAGE_FREE && page->refcount > 1) {
				page->refcount--;
				continue;
			}
			kvmm_report(ctx, "bad page free: pfn %u state %u refcount %u",
				    pfn, page->state, page->refcount);
			kvmm_assert(ctx, 0);
			continue;
		}
		*page = free_desc;
		if ((pfn >> 6) != w) {
			if (mask)
				hb_set_mask(&zone->free, w, mask);
			w = pfn >> 6;
			mask = 0;
		}
		mask |= 1ULL << (pfn & 63);
		freed++;
	}
	if (mask)
		hb_set_mask(&zone->free, w, mask);
	zone->nr_free += freed;
	if (zone->tier == KVMM_TIER_DEVICE)
		kvmm_count(ctx, EV_FREE_PAGES, freed);
}

/**
 * kvmm_pages_to_tree() - hand an owner's frames to a tree node
 * @zone: the zone
 * @pfns: frames, OWNED with one reference and no flags
 * @nr: how many
 *
 * They become CACHED; the reference passes from the sequence to the node.
 */
void kvmm_pages_to_tree(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr)
{
	kvmm_pages_set_state(zone, pfns, nr, KVMM_PAGE_CACHED);
}

/**
 * kvmm_pages_set_state() - pass held frames to another kind of holder
 * @zone: the zone
 * @pfns: frames, not FREE, with one reference and no flags
 * @nr: how many
 * @state: KVMM_PAGE_OWNED, _CACHED or _IO
 */
void kvmm_pages_set_state(struct kvmm_zone *zone, const int32_t *pfns, uint32_t nr,
			  uint8_t state)
{
	const struct kvmm_page desc = { .state = state, .tier = (uint8_t)zone->tier,
					.refcount = 1 };
	uint32_t i;

	for (i = 0; i < nr; i++)
		zone->pages[pfns[i]] = desc;
}

void kvmm_set_page_flags(struct kvmm_zone *zone, const int32_t *pfns,
			 uint32_t nr, uint8_t set, uint8_t clear)
{
	uint32_t i;

	for (i = 0; i < nr; i++)
		zone->pages[pfns[i]].flags = (zone->pages[pfns[i]].flags & ~clear) | set;
}

/**
 * kvmm_page_flags() - flags of frame @pfn of the device pool
 * @ctx: the context
 * @pfn: frame number
 *
 * Return: KVMM_PG_* bits, or -EINVAL for a frame outside the pool.
 */
KVMM_EXPORT int kvmm_page_flags(const struct kvmm_ctx *ctx, uint32_t pfn)
{
	if (!ctx || pfn >= ctx->zone[KVMM_TIER_DEVICE].nr_pages)
		return -EINVAL;
	return ctx->zone[KVMM_TIER_DEVICE].pages[pfn].flags;
}

/**
 * kvmm_page_state() - state of frame @pfn of the device pool
 * @ctx: the context
 * @pfn: frame number
 *
 * Return: KVMM_PAGE_*, or -EINVAL for a frame outside the pool.
 */
KVMM_EXPORT int kvmm_page_state(const struct kvmm_ctx *ctx, uint32_t pfn)
{
	if (!ctx || pfn >= ctx->zone[KVMM_TIER_DEVICE].nr_pages)
		return -EINVAL;
	return ctx->zone[KVMM_TIER_DEVICE].pages[pfn].state;
}
