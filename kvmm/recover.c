// SPDX-License-Identifier: MIT
/*
 * kvmm/recover.c - restart: the pages an I/O store kept, back into the tree.
 *
 * DOC: restart recovery
 *
 * Every page an I/O store (the NVMe tier) holds carries its identity and
 * its parent's (struct kvmm_store_key, from kvmm_tier_keys()).  When a
 * context opens a store that holds pages from an earlier run, the store
 * reports each page it found valid, and the pages are hung back in the
 * tree, each under the page its key names as its parent: one-page nodes
 * on the store's tier, unlocked, queued for reclaim like any demoted
 * prefix.  A page whose parent is missing (lost, torn, dropped) cannot be
 * reached by any prompt and is left out; of two copies of one page, the
 * newer is kept.
 *
 * Pages of keyed values (KVMM_STORE_KEY_KEYED) say their space, key,
 * index and count instead: a value whose every page is there comes back
 * whole under its space (made again if no client registered it yet, and
 * found by the next one that registers the same model and size); a value
 * missing a page is left out, its pages free.
 */
#include <stdlib.h>

#include "internal.h"

enum { REC_NEW, REC_VISITING, REC_DONE, REC_FAILED };

/* One page found on the store, while the tree is rebuilt. */
struct tier_rec {
	uint64_t id[2];
	uint64_t parent[2];
	uint64_t seq;
	struct kvmm_node *node;
	uint32_t pfn;
	uint32_t ns;
	uint32_t tok;		/* its tokens: tier_scan.tokens[tok * page_size] */
	uint32_t state;
	uint32_t flags;		/* the rest of the key, for keyed values */
	uint32_t index;
	uint32_t count;
	uint64_t space[2];
	uint64_t value_bytes;
};

struct tier_scan {
	struct kvmm_ctx *ctx;
	struct tier_rec *recs;
	uint32_t *tokens;	/* page_size per record */
	uint32_t nr, max;
};

static int scan_one(void *arg, uint32_t pfn, const struct kvmm_store_key *key,
		    uint64_t seq)
{
	struct tier_scan *ts = arg;
	uint32_t ps = ts->ctx->page_size;
	struct tier_rec *r;

	if (ts->nr == ts->max)
		return -E2BIG;	/* the store broke its promise: keep what we have */
	r = &ts->recs[ts->nr];
	*r = (struct tier_rec){
		.id = { key->id[0], key->id[1] },
		.parent = { key->parent[0], key->parent[1] },
		.seq = seq, .pfn = pfn, .ns = key->ns, .tok = ts->nr,
		.flags = key->flags, .index = key->index, .count = key->count,
		.space = { key->space[0], key->space[1] },
		.value_bytes = key->value_bytes,
	};
	memcpy(ts->tokens + (size_t)ts->nr * ps, key->tokens, ps * sizeof(uint32_t));
	ts->nr++;
	return 0;
}

static int id_cmp(const uint64_t *a, const uint64_t *b)
{
	if (a[0] != b[0])
		return a[0] < b[0] ? -1 : 1;
	return a[1] < b[1] ? -1 : a[1] > b[1];
}

/* By identity, and the newest copy of each first. */
static int rec_cmp(const void *pa, const void *pb)
{
	const struct tier_rec *a = pa, *b = pb;
	int c = id_cmp(a->id, b->id);

	if (c)
		return c;
	return a->seq > b->seq ? -1 : a->seq < b->seq;
}

static int rec_key_cmp(const void *key, const void *pr)
{
	return id_cmp(key, ((const struct tier_rec *)pr)->id);
}

/*
 * Hang record @r's page in the tree below its parent's node, attaching
 * the parent first: an explicit stack (@stack) rather than recursion, as
 * chains are as long as prompts.
 */
static void rec_attach(struct tier_scan *ts, uint32_t tier, uint32_t r, uint32_t *stack)
{
	static const uint64_t none[2];
	struct kvmm_ctx *ctx = ts->ctx;
	uint32_t sp = 0;

	stack[sp++] = r;
	while (sp) {
		struct tier_rec *rec = &ts->recs[stack[sp - 1]], *p = NULL;
		struct kvmm_node *parent;
		int32_t pfn = (int32_t)rec->pfn;

		if (rec->state == REC_DONE || rec->state == REC_FAILED) {
			sp--;
			continue;
		}
		if (rec->flags & KVMM_STORE_KEY_KEYED) {	/* keyed_attach()'s */
			sp--;
			continue;
		}
		if (id_cmp(rec->parent, none)) {
			p = bsearch(rec->parent, ts->recs, ts->nr, sizeof(*p), rec_key_cmp);
			if (p && (p->flags & KVMM_STORE_KEY_KEYED))
				p = NULL;	/* never a prefix's parent */
			if (p && p->state == REC_NEW && p->ns == rec->ns) {
				rec->state = REC_VISITING;
				stack[sp++] = (uint32_t)(p - ts->recs);
				continue;
			}
		}
		sp--;
		/* An orphan (its parent lost or torn) or a cycle of forged ids. */
		if (p ? p->state != REC_DONE || p->ns != rec->ns : id_cmp(rec->parent, none)) {
			rec->state = REC_FAILED;
			continue;
		}
		parent = p ? p->node : kvmm_tree_root(ctx, rec->ns, true);
		rec->state = REC_FAILED;
		if (!parent || !kvmm_alloc_pfn(&ctx->zone[tier], rec->pfn))
			continue;
		rec->node = kvmm_tree_add_leaf(ctx, parent,
					       ts->tokens + (size_t)rec->tok * ctx->page_size,
					       ctx->page_size, &pfn, tier);
		if (!rec->node) {
			kvmm_free_pages(ctx, &ctx->zone[tier], &pfn, 1);
			continue;
		}
		kvmm_lru_update(ctx, rec->node);
		rec->state = REC_DONE;
	}
}

/* Keyed pages by value (namespace, space, size, key), then index. */
static int keyed_cmp(const void *pa, const void *pb)
{
	const struct tier_rec *a = *(struct tier_rec *const *)pa;
	const struct tier_rec *b = *(struct tier_rec *const *)pb;
	int c;

	if (a->ns != b->ns)
		return a->ns < b->ns ? -1 : 1;
	if ((c = id_cmp(a->space, b->space)) || (c = id_cmp(a->parent, b->parent)))
		return c;
	if (a->value_bytes != b->value_bytes)
		return a->value_bytes < b->value_bytes ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

static bool same_value(const struct tier_rec *a, const struct tier_rec *b)
{
	return a->ns == b->ns && !id_cmp(a->space, b->space) &&
	       !id_cmp(a->parent, b->parent) && a->value_bytes == b->value_bytes &&
	       a->count == b->count;
}

/*
 * The keyed values among the records: each whose pages 0 .. count - 1
 * are all there (and agree on what they belong to) goes back whole.
 * What does not is left out, its slots free, and said in one line: a
 * value torn or forged, or over the keyed space limits (a namespace's
 * KVMM_SET_NS_KSPACES, the context's table).
 */
static void keyed_attach(struct tier_scan *ts, uint32_t tier, struct tier_rec **k,
			 int32_t *pfns)
{
	struct kvmm_ctx *ctx = ts->ctx;
	uint32_t n = 0, i, j, end, cnt, taken;
	uint32_t torn = 0, forged = 0, over = 0, nomem = 0;
	int err;

	for (i = 0; i < ts->nr; i++)
		if (ts->recs[i].flags & KVMM_STORE_KEY_KEYED)
			k[n++] = &ts->recs[i];
	qsort(k, n, sizeof(*k), keyed_cmp);
	for (i = 0; i < n; i = end) {
		for (end = i + 1; end < n && same_value(k[i], k[end]); end++)
			;
		cnt = k[i]->count;
		for (j = 0; end - i == cnt && j < cnt && k[i + j]->index == j; j++)
			;
		if (end - i != cnt || j < cnt) {
			torn++;		/* a page is missing (or forged ones are extra) */
			continue;
		}
		for (taken = 0; taken < cnt; taken++) {
			if (!kvmm_alloc_pfn(&ctx->zone[tier], k[i + taken]->pfn))
				break;
			pfns[taken] = (int32_t)k[i + taken]->pfn;
		}
		err = taken < cnt ? -EINVAL :
		      kvmm_keyed_recover(ctx, k[i]->ns, k[i]->space, k[i]->value_bytes,
					 k[i]->parent, k[i]->id, pfns, cnt, tier);
		if (!err)
			continue;
		over += err == -ENOSPC;
		nomem += err == -ENOMEM;
		forged += err == -EINVAL;
		if (taken)
			kvmm_free_pages(ctx, &ctx->zone[tier], pfns, taken);
	}
	if (torn + forged + over + nomem)
		kvmm_report(ctx, "%s tier: recovery skipped %u keyed values, their slots now "
			    "free: %u torn, %u not what they claim, %u over the keyed space "
			    "limits (%u per namespace, ns_kspaces; %u in all), %u for want of "
			    "memory", ctx->store[tier]->name, torn + forged + over + nomem, torn,
			    forged, over, ctx->ns_kspaces, KVMM_KSPACES_MAX, nomem);
}

/**
 * kvmm_tier_recover() - give the tree back the pages an I/O store kept
 * @ctx: the context, its tier @tier just set up
 * @tier: a tier with an I/O store
 *
 * Each page the store found valid becomes a one-page node under the page
 * its header names as its parent; pages whose parent is missing (lost,
 * torn, dropped) are left out and their slots are free, as are older
 * copies of a page.  Best effort, so it cannot fail: a context that cannot
 * get the memory to recover starts cold, with a report.
 */
void kvmm_tier_recover(struct kvmm_ctx *ctx, uint32_t tier)
{
	struct tier_scan ts = { .ctx = ctx, .max = ctx->zone[tier].nr_pages };
	size_t rec_bytes = (size_t)ts.max * sizeof(*ts.recs);
	size_t tok_bytes = (size_t)ts.max * ctx->page_size * sizeof(uint32_t);
	size_t stack_bytes = (size_t)ts.max * (sizeof(uint32_t) + sizeof(struct tier_rec *));
	uint32_t *stack, i, u;

	if (!ctx->store[tier]->recover)
		return;
	ts.recs = kvmm_malloc(ctx, rec_bytes);
	ts.tokens = kvmm_malloc(ctx, tok_bytes);
	stack = kvmm_malloc(ctx, stack_bytes);	/* also keyed_attach()'s scratch */
	if (!ts.recs || !ts.tokens || !stack) {
		kvmm_report(ctx, "%s tier: no memory to recover its pages; starting cold",
			    ctx->store[tier]->name);
		goto out;
	}
	ctx->store[tier]->recover(ctx->store_priv[tier], scan_one, &ts);
	qsort(ts.recs, ts.nr, sizeof(*ts.recs), rec_cmp);
	for (i = 0, u = 0; i < ts.nr; i++) {	/* keep the newest of each id */
		if (u && !id_cmp(ts.recs[u - 1].id, ts.recs[i].id))
			continue;
		ts.recs[u++] = ts.recs[i];
	}
	ts.nr = u;
	for (i = 0; i < ts.nr; i++)
		rec_attach(&ts, tier, i, stack);
	keyed_attach(&ts, tier, (struct tier_rec **)(stack + ts.max), (int32_t *)stack);
out:
	kvmm_mfree(ctx, stack, stack_bytes);
	kvmm_mfree(ctx, ts.tokens, tok_bytes);
	kvmm_mfree(ctx, ts.recs, rec_bytes);
}
