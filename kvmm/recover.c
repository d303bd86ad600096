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
 * reached by any prompt yet; of two copies of one page, the newer is kept.
 *
 * Such orphans are what a crash leaves: a prefix every conversation
 * shares is hot, so it was on the device or the host, never written,
 * while the conversations below it went down to NVMe.  They are kept
 * aside (struct kvmm_orphans), their slots free, indexed by the identity
 * of the parent they wait for.  When a MATCH walks a prompt and stops on
 * a page boundary whose identity an orphan names as its parent (the
 * missing prefix was computed again by an earlier request), the orphan
 * and the orphans below it are hung in the tree there, on the NVMe tier,
 * and the walk goes on into them (kvmm_orphans_adopt()).  A slot taken
 * by the tier meanwhile is skipped; one taken and freed again since
 * holds another page, which the read's identity check turns into a miss
 * at promotion: never wrong KV.
 *
 * Pages of keyed values (KVMM_STORE_KEY_KEYED) say their space, key,
 * index and count instead: a value whose every page is there comes back
 * whole under its space (made again if no client registered it yet, and
 * found by the next one that registers the same model and size); a value
 * missing a page is left out, its pages free.
 */
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

/**
 * struct kvmm_orphan - a page found on the store whose parent was not
 * @id: its identity
 * @parent: the identity of the page it waits for
 * @ns: its namespace
 * @pfn: its slot, free in the zone until it is adopted
 * @tok: its tokens: kvmm_orphans.tokens[tok * page_size]
 * @used: adopted, or tried and given up
 */
struct kvmm_orphan {
	uint64_t id[2];
	uint64_t parent[2];
	uint32_t ns;
	uint32_t pfn;
	uint32_t tok;
	uint32_t used;
};

/**
 * struct kvmm_orphans - the orphans of a restart, by parent identity
 * @recs: @nr of them, sorted by @parent
 * @tokens: page_size token ids each
 * @stack: scratch for an adoption, @nr entries: orphans to hang ...
 * @under: ... each under this node
 * @nr: records
 * @live: records not used yet; the table goes when none are left
 * @tier: the tier their slots are on
 */
struct kvmm_orphans {
	struct kvmm_orphan *recs;
	uint32_t *tokens;
	uint32_t *stack;
	struct kvmm_node **under;
	uint32_t nr;
	uint32_t live;
	uint32_t tier;
};

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

static int orphan_parent_cmp(const void *pa, const void *pb)
{
	const struct kvmm_orphan *a = pa, *b = pb;

	return id_cmp(a->parent, b->parent);
}

/*
 * Keep the prefix pages recovery could not hang in the tree (their parent
 * is not on the file) whose slots are still free, as the orphans.  Best
 * effort: without the memory they are left out, as before.
 */
static void orphans_keep(struct tier_scan *ts, uint32_t tier)
{
	struct kvmm_ctx *ctx = ts->ctx;
	uint32_t ps = ctx->page_size, nr = 0, i;
	struct kvmm_orphans *o;

	for (i = 0; i < ts->nr; i++) {
		const struct tier_rec *r = &ts->recs[i];

		nr += r->state == REC_FAILED && !(r->flags & KVMM_STORE_KEY_KEYED) &&
		      kvmm_zone_test_free(&ctx->zone[tier], r->pfn);
	}
	if (!nr)
		return;
	o = kvmm_zalloc(ctx, sizeof(*o));
	if (o) {
		o->recs = kvmm_malloc(ctx, (size_t)nr * sizeof(*o->recs));
		o->tokens = kvmm_malloc(ctx, (size_t)nr * ps * sizeof(uint32_t));
		o->stack = kvmm_malloc(ctx, (size_t)nr * sizeof(uint32_t));
		o->under = kvmm_malloc(ctx, (size_t)nr * sizeof(*o->under));
	}
	if (!o || !o->recs || !o->tokens || !o->stack || !o->under) {
		kvmm_report(ctx, "%s tier: no memory to keep %u pages whose prefix is not on "
			    "the file; their slots are free", ctx->store[tier]->name, nr);
		if (o) {
			o->nr = nr;
			ctx->orphans = o;
			kvmm_orphans_free(ctx);
		}
		return;
	}
	o->nr = o->live = nr;
	o->tier = tier;
	for (i = 0, nr = 0; i < ts->nr; i++) {
		const struct tier_rec *r = &ts->recs[i];

		if (r->state != REC_FAILED || (r->flags & KVMM_STORE_KEY_KEYED) ||
		    !kvmm_zone_test_free(&ctx->zone[tier], r->pfn))
			continue;
		o->recs[nr] = (struct kvmm_orphan){
			.id = { r->id[0], r->id[1] }, .parent = { r->parent[0], r->parent[1] },
			.ns = r->ns, .pfn = r->pfn, .tok = nr,
		};
		memcpy(o->tokens + (size_t)nr * ps, ts->tokens + (size_t)r->tok * ps,
		       ps * sizeof(uint32_t));
		nr++;
	}
	qsort(o->recs, nr, sizeof(*o->recs), orphan_parent_cmp);
	ctx->orphans = o;
}

/* The first orphan waiting for @parent, or NULL. */
static struct kvmm_orphan *orphan_first(const struct kvmm_orphans *o, const uint64_t *parent)
{
	uint32_t lo = 0, hi = o->nr;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (id_cmp(o->recs[mid].parent, parent) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < o->nr && !id_cmp(o->recs[lo].parent, parent) ? &o->recs[lo] : NULL;
}

/* Push every unused orphan of namespace @ns waiting for @parent, to go under @node. */
static uint32_t orphans_push(struct kvmm_orphans *o, const uint64_t *parent, uint32_t ns,
			     struct kvmm_node *node, uint32_t sp)
{
	struct kvmm_orphan *r = orphan_first(o, parent);

	for (; r && r < o->recs + o->nr && !id_cmp(r->parent, parent); r++) {
		if (r->used || r->ns != ns)
			continue;
		r->used = 1;
		o->live--;
		o->under[sp] = node;
		o->stack[sp++] = (uint32_t)(r - o->recs);
	}
	return sp;
}

/**
 * kvmm_orphans_adopt() - hang the orphans that wait for a walked prefix
 * @ctx: the context, with orphans (ctx->orphans)
 * @root: the namespace root the walk started at
 * @tokens: the prompt walked
 * @n: its tokens
 * @path: the walk, which stopped short of @n; split to end on a node
 *	boundary when orphans wait there
 *
 * See the DOC above.  Best effort: an orphan whose slot was taken since,
 * or that cannot get its node, is left out with what waits for it.  The
 * table goes once every orphan was adopted or given up.
 *
 * Return: whether any orphan was adopted (walk again).
 */
bool kvmm_orphans_adopt(struct kvmm_ctx *ctx, struct kvmm_node *root, const uint32_t *tokens,
			uint32_t n, struct kvmm_path *path)
{
	struct kvmm_orphans *o = ctx->orphans;
	uint32_t ps = ctx->page_size, sp, adopted = 0;
	XXH128_hash_t h;
	uint64_t id[2];

	if (!path->matched || path->matched >= n || (path->node->flags & KVMM_NODE_IO))
		return false;
	h = XXH3_128bits_withSeed(tokens, (size_t)path->matched * sizeof(uint32_t), root->ns);
	id[0] = h.low64;
	id[1] = h.high64;
	if (!orphan_first(o, id) || kvmm_tree_split(ctx, path))
		return false;
	sp = orphans_push(o, id, root->ns, path->node, 0);
	while (sp) {	/* depth first, each under the node made for its parent */
		struct kvmm_orphan *r = &o->recs[o->stack[--sp]];
		struct kvmm_node *node = NULL;
		int32_t pfn = (int32_t)r->pfn;

		if (kvmm_alloc_pfn(&ctx->zone[o->tier], r->pfn)) {
			node = kvmm_tree_add_leaf(ctx, o->under[sp], o->tokens + (size_t)r->tok * ps,
						  ps, &pfn, o->tier);
			if (!node)	/* a child of the same tokens is there: it stays */
				kvmm_free_pages(ctx, &ctx->zone[o->tier], &pfn, 1);
		}
		if (!node)
			continue;
		kvmm_lru_update(ctx, node);
		adopted++;
		sp = orphans_push(o, r->id, root->ns, node, sp);
	}
	if (adopted)
		kvmm_count(ctx, EV_ORPHAN_PAGES, adopted);
	if (!o->live)
		kvmm_orphans_free(ctx);
	return adopted;
}

/* Orphans still waiting (the orphan_pages stat). */
uint64_t kvmm_orphans_live(const struct kvmm_ctx *ctx)
{
	return ctx->orphans ? ctx->orphans->live : 0;
}

/**
 * kvmm_orphans_free() - drop the orphans of a restart, if any
 * @ctx: the context
 */
void kvmm_orphans_free(struct kvmm_ctx *ctx)
{
	struct kvmm_orphans *o = ctx->orphans;

	if (!o)
		return;
	kvmm_mfree(ctx, o->under, (size_t)o->nr * sizeof(*o->under));
	kvmm_mfree(ctx, o->stack, (size_t)o->nr * sizeof(uint32_t));
	kvmm_mfree(ctx, o->tokens, (size_t)o->nr * ctx->page_size * sizeof(uint32_t));
	kvmm_mfree(ctx, o->recs, (size_t)o->nr * sizeof(*o->recs));
	kvmm_mfree(ctx, o, sizeof(*o));
	ctx->orphans = NULL;
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
	orphans_keep(&ts, tier);
	keyed_attach(&ts, tier, (struct tier_rec **)(stack + ts.max), (int32_t *)stack);
out:
	kvmm_mfree(ctx, stack, stack_bytes);
	kvmm_mfree(ctx, ts.tokens, tok_bytes);
	kvmm_mfree(ctx, ts.recs, rec_bytes);
}
