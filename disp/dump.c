// SPDX-License-Identifier: MIT
/*
 * disp/dump.c - DUMP: the context's nodes, sequences, pins, namespaces and
 * keyed spaces
 * as fixed-size records (uapi/kvmm/ring.h), a page at a time.
 *
 * A page is a cursor and as many records as the client's buffer holds;
 * the completion's KVMM_CQE_F_MORE and the header's next say where to
 * resume.  The context may change between pages: a page is consistent,
 * the whole dump is not.  Only the operator runs it (a ring bound to a
 * namespace gets -EPERM from the dispatcher), since it shows every
 * tenant's tokens.
 */
#include "../kvmm/internal.h"
#include "dump.h"

static uint32_t node_depth(const struct kvmm_node *node)
{
	uint32_t depth = 0;

	for (; node->parent; node = node->parent)
		depth++;
	return depth;
}

static void dump_node(const struct kvmm_node *node, struct kvmm_dump_node *rec)
{
	memset(rec, 0, sizeof(*rec));
	rec->id = node->id;
	rec->parent = node->parent ? node->parent->id : 0;
	rec->atime = node->atime;
	rec->len = node->len;
	rec->lock_ref = node->lock_ref;
	rec->pins = node->pins;
	rec->hits = node->hits;
	rec->depth = node_depth(node);
	rec->prio = node->prio;
	rec->tier = node->tier;
	rec->token0 = node->len ? node->tokens[0] : 0;
	if (node->flags & KVMM_NODE_ROOT)
		rec->flags |= KVMM_DUMP_F_ROOT;
	if (node->flags & KVMM_NODE_EVICTABLE)
		rec->flags |= KVMM_DUMP_F_EVICTABLE;
	if (node->flags & KVMM_NODE_SHADOW)
		rec->flags |= KVMM_DUMP_F_SHADOW;
	if (node->flags & KVMM_NODE_KEYED)
		rec->flags |= KVMM_DUMP_F_KEYED;
	for (; node->parent; node = node->parent)
		;
	rec->ns = node->ns;
}

static uint32_t dump_seqs(const struct kvmm_ctx *ctx, uint64_t cursor,
			  void *out, uint32_t room, uint64_t *next)
{
	struct kvmm_dump_seq *rec = out;
	uint32_t nr = 0;
	uint64_t i;

	*next = 0;
	for (i = cursor; i < ctx->max_seqs; i++) {
		const struct kvmm_seq *s = &ctx->seqs[i];

		if (!s->open)
			continue;
		if (nr == room) {
			*next = i;
			return nr;
		}
		rec[nr++] = (struct kvmm_dump_seq){
			.seq = (uint32_t)i, .ns = s->ns, .len = s->len, .cached = s->cached,
			.owner = s->owner,
			.node = s->node != s->root ? s->node->id : 0,
		};
	}
	return nr;
}

static void dump_pin(const struct kvmm_ctx *ctx, const struct kvmm_node *node,
		     struct kvmm_dump_pin *rec)
{
	const struct kvmm_node *n;
	uint64_t tokens = 0;

	for (n = node; n->parent; n = n->parent)
		tokens += n->len;
	*rec = (struct kvmm_dump_pin){
		.id = node->id, .ns = n->ns,
		.tokens = (uint32_t)tokens,
		.pages = (uint32_t)(tokens >> ctx->page_shift),
		.pins = node->pins, .keep = node->keep_pins,
		.owner = kvmm_pin_owner(ctx, node),
	};
}

/*
 * DUMP of nodes, and of pins (@pins: only the nodes pins end at, each as
 * a struct kvmm_dump_pin): pre-order over every namespace; the cursor is
 * a position in that walk, every node counted, so a page costs
 * O(cursor + page).  The tree may change between pages: a page is
 * consistent, the whole dump is not.  Records go to @rec, at most @room;
 * *@next is the cursor to resume at, 0 after the last.  Return: records
 * written.
 */
static uint32_t dump_tree(const struct kvmm_ctx *ctx, uint64_t cursor, bool pins,
			  void *rec, uint32_t room, uint64_t *next)
{
	struct kvmm_list *pos_root;
	uint64_t pos = 0;
	uint32_t nr = 0;

	*next = 0;
	list_for_each(pos_root, &ctx->tree.roots) {
		struct kvmm_node *root = list_entry(pos_root, struct kvmm_node, sibling);
		struct kvmm_node *node;

		for (node = root; node; node = kvmm_tree_next(root, node), pos++) {
			if (pos < cursor || (pins && !node->pins))
				continue;
			if (nr == room) {
				*next = pos;
				return nr;
			}
			if (pins)
				dump_pin(ctx, node, (struct kvmm_dump_pin *)rec + nr++);
			else
				dump_node(node, (struct kvmm_dump_node *)rec + nr++);
		}
	}
	return nr;
}

/* DUMP of namespaces; the cursor counts the namespaces already returned. */
static uint32_t dump_ns(const struct kvmm_ctx *ctx, uint64_t cursor,
			void *out, uint32_t room, uint64_t *next)
{
	struct kvmm_dump_ns *rec = out;
	const struct kvmm_list *pos;
	uint64_t i = 0;
	uint32_t nr = 0;

	*next = 0;
	list_for_each(pos, &ctx->tree.roots) {
		const struct kvmm_node *root = list_entry(pos, struct kvmm_node, sibling);
		const struct kvmm_ns *ns = kvmm_root_ns(root);

		if (root->flags & KVMM_NODE_KEYED)
			continue;	/* a keyed space: counted with its namespace */
		if (i++ < cursor)
			continue;
		if (nr == room) {
			*next = i - 1;
			return nr;
		}
		rec[nr++] = (struct kvmm_dump_ns){
			.ns = root->ns, .pinned = ns->pinned, .cached = ns->cached,
			.pin_limit = kvmm_ns_pin_limit(ctx),
			.cache_limit = kvmm_ns_cache_limit(ctx),
			.keyed_host = kvmm_keyed_ns_pages(ctx, root->ns, KVMM_TIER_HOST),
			.keyed_nvme = kvmm_keyed_ns_pages(ctx, root->ns, KVMM_TIER_NVME),
		};
	}
	return nr;
}

static uint32_t dump_nodes(const struct kvmm_ctx *ctx, uint64_t cursor,
			   void *out, uint32_t room, uint64_t *next)
{
	return dump_tree(ctx, cursor, false, out, room, next);
}

static uint32_t dump_pins(const struct kvmm_ctx *ctx, uint64_t cursor,
			  void *out, uint32_t room, uint64_t *next)
{
	return dump_tree(ctx, cursor, true, out, room, next);
}

/**
 * struct dump_kind - what one DUMP table is (enum kvmm_dump_type)
 * @rec_size: the size of its records
 * @fill: writes at most @room records from @cursor to @out and the cursor
 *	to resume at (0 after the last) to *@next; returns records written
 */
struct dump_kind {
	uint32_t rec_size;
	uint32_t (*fill)(const struct kvmm_ctx *ctx, uint64_t cursor, void *out,
			 uint32_t room, uint64_t *next);
};

/* DUMP of keyed spaces; the cursor is a slot of the space table. */
static uint32_t dump_kspaces(const struct kvmm_ctx *ctx, uint64_t cursor,
			     void *out, uint32_t room, uint64_t *next)
{
	struct kvmm_dump_kspace *rec = out;
	uint32_t nr = 0;
	uint64_t i;
	int got;

	*next = 0;
	for (i = cursor; i < UINT32_MAX; i++) {
		struct kvmm_dump_kspace r;

		got = kvmm_keyed_dump(ctx, (uint32_t)i, &r);
		if (got < 0)
			break;
		if (!got)	/* a removed space's slot */
			continue;
		if (nr == room) {
			*next = i;
			return nr;
		}
		rec[nr++] = r;
	}
	return nr;
}

/* DUMP of the latency histograms, KVMM_HIST_* in order; the cursor is the next. */
static uint32_t dump_hist(const struct kvmm_ctx *ctx, uint64_t cursor,
			  void *out, uint32_t room, uint64_t *next)
{
	struct kvmm_dump_hist *rec = out;
	uint32_t nr = 0;
	uint64_t i;

	*next = 0;
	for (i = cursor; i < KVMM_HIST_LAST; i++) {
		if (nr == room) {
			*next = i;
			return nr;
		}
		rec[nr] = ctx->hist[i];
		rec[nr].which = (uint32_t)i;
		rec[nr++].nr_buckets = KVMM_HIST_BUCKETS;
	}
	return nr;
}

static const struct dump_kind dump_kinds[] = {
	[KVMM_DUMP_NODES] = { sizeof(struct kvmm_dump_node), dump_nodes },
	[KVMM_DUMP_SEQS] = { sizeof(struct kvmm_dump_seq), dump_seqs },
	[KVMM_DUMP_PINS] = { sizeof(struct kvmm_dump_pin), dump_pins },
	[KVMM_DUMP_NS] = { sizeof(struct kvmm_dump_ns), dump_ns },
	[KVMM_DUMP_KSPACES] = { sizeof(struct kvmm_dump_kspace), dump_kspaces },
	[KVMM_DUMP_HIST] = { sizeof(struct kvmm_dump_hist), dump_hist },
};
_Static_assert(sizeof(dump_kinds) / sizeof(dump_kinds[0]) == KVMM_DUMP_LAST,
	       "every DUMP table has a struct dump_kind");

/**
 * kvmm_dump() - one page of DUMP records
 * @ctx: the context
 * @sqe: the command: arg the table (enum kvmm_dump_type), arg2 the cursor,
 *	len the output buffer's size
 * @hdr: the output buffer, checked by the dispatcher: 8-byte aligned,
 *	@sqe->len bytes
 * @cflags: KVMM_CQE_F_MORE is set here when more follows
 *
 * The output buffer is the client's: everything is counted in our own
 * variables and only written there, never read back.
 *
 * Context: ctx->lock held.
 * Return: records written, or -EINVAL.
 */
int kvmm_dump(const struct kvmm_ctx *ctx, const struct kvmm_sqe *sqe,
	      struct kvmm_dump_hdr *hdr, uint32_t *cflags)
{
	const struct dump_kind *kind;
	uint32_t room, nr;
	uint64_t next;

	if (sqe->arg >= KVMM_DUMP_LAST || !dump_kinds[sqe->arg].fill)
		return -EINVAL;
	kind = &dump_kinds[sqe->arg];
	if (sqe->len < sizeof(*hdr) + kind->rec_size)
		return -EINVAL;
	room = (sqe->len - (uint32_t)sizeof(*hdr)) / kind->rec_size;
	nr = kind->fill(ctx, sqe->arg2, hdr + 1, room, &next);
	hdr->next = next;
	hdr->nr = nr;
	hdr->rec_size = kind->rec_size;
	if (next)
		*cflags |= KVMM_CQE_F_MORE;
	return (int)nr;
}
