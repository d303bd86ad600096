// SPDX-License-Identifier: MIT
/*
 * kvmm/keyed_space.c - the keyed page store's spaces (registered, found,
 * removed, recovered from NVMe) and the index of their values.  See the
 * DOC in keyed.c.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "keyed.h"

/* A model identity: printable, 1 .. KVMM_MODEL_ID_MAX bytes. */
static bool model_id_ok(const char *id)
{
	size_t n, i;

	if (!id)
		return false;
	n = strnlen(id, KVMM_MODEL_ID_MAX + 1);
	if (!n || n > KVMM_MODEL_ID_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (id[i] < 0x20 || id[i] > 0x7e)
			return false;
	return true;
}

static void model_fp(const char *id, uint64_t fp[2])
{
	XXH128_hash_t h = XXH3_128bits(id, strlen(id));

	fp[0] = h.low64;
	fp[1] = h.high64;
}

uint64_t keyed_page_bytes(const struct kvmm_ctx *ctx)
{
	return kvmm_page_bytes(&ctx->params.model, ctx->page_size);
}

static struct kvmm_kspace *space_find(struct kvmm_ctx *ctx, uint32_t ns,
				      const uint64_t fp[2], uint64_t value_bytes)
{
	uint32_t i;

	for (i = 0; i < ctx->nr_kspaces; i++) {
		struct kvmm_kspace *s = ctx->kspaces[i];

		if (s && s->ns == ns && s->value_bytes == value_bytes && s->fp[0] == fp[0] &&
		    s->fp[1] == fp[1])
			return s;
	}
	return NULL;
}

/* Spaces namespace @ns holds. */
static uint32_t ns_spaces(const struct kvmm_ctx *ctx, uint32_t ns)
{
	uint32_t i, n = 0;

	for (i = 0; i < ctx->nr_kspaces; i++)
		n += ctx->kspaces[i] && ctx->kspaces[i]->ns == ns;
	return n;
}

/* Drop the free slots at the end of the table. */
void kspace_slots_trim(struct kvmm_ctx *ctx)
{
	while (ctx->nr_kspaces && !ctx->kspaces[ctx->nr_kspaces - 1])
		ctx->nr_kspaces--;
}

/* A free slot: a removed space's, or a new one at the end. */
static int slot_get(struct kvmm_ctx *ctx, uint32_t *slot)
{
	uint32_t i;

	for (i = 0; i < ctx->nr_kspaces; i++) {
		if (!ctx->kspaces[i]) {
			*slot = i;
			return 0;
		}
	}
	if (ctx->nr_kspaces == KVMM_KSPACES_MAX)
		return -ENOSPC;
	if (ctx->nr_kspaces == ctx->cap_kspaces) {
		uint32_t cap = ctx->cap_kspaces ? 2 * ctx->cap_kspaces : 8;
		struct kvmm_kspace **a = kvmm_malloc(ctx, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		if (ctx->nr_kspaces)
			memcpy(a, ctx->kspaces, ctx->nr_kspaces * sizeof(*a));
		kvmm_mfree(ctx, ctx->kspaces, ctx->cap_kspaces * sizeof(*a));
		ctx->kspaces = a;
		ctx->cap_kspaces = cap;
	}
	ctx->kspaces[ctx->nr_kspaces] = NULL;
	*slot = ctx->nr_kspaces++;
	return 0;
}

/*
 * The space (@ns, @fp, @value_bytes), made if it does not exist yet and
 * both the namespace's limit (KVMM_SET_NS_KSPACES) and the table allow.
 * Return: it, or NULL with *err set (-ENOMEM; -ENOSPC: the namespace
 * holds its limit, or the table is full).
 */
static struct kvmm_kspace *space_get(struct kvmm_ctx *ctx, uint32_t ns, const uint64_t fp[2],
				     uint64_t value_bytes, int *err)
{
	struct kvmm_kspace *s = space_find(ctx, ns, fp, value_bytes);
	uint64_t pb = keyed_page_bytes(ctx), min = (KVMM_KEY_WORDS + ctx->page_size - 1) >>
					     ctx->page_shift;
	uint32_t slot;

	if (s)
		return s;
	*err = -ENOSPC;
	if (ns_spaces(ctx, ns) >= ctx->ns_kspaces)
		return NULL;
	*err = slot_get(ctx, &slot);
	if (*err)
		return NULL;
	*err = -ENOMEM;
	s = kvmm_zalloc(ctx, sizeof(*s));
	if (s)
		s->root = kvmm_tree_keyed_root(ctx, ns);
	if (!s || !s->root) {
		if (s)
			kvmm_mfree(ctx, s, sizeof(*s));
		kspace_slots_trim(ctx);
		return NULL;
	}
	s->fp[0] = fp[0];
	s->fp[1] = fp[1];
	s->value_bytes = value_bytes;
	s->pages = (uint32_t)((value_bytes + pb - 1) / pb);
	if (s->pages < min)
		s->pages = (uint32_t)min;
	s->ns = ns;
	s->id = slot | (ctx->kspace_gen << KSPACE_SLOT_BITS);
	ctx->kspaces[slot] = s;
	ctx->nr_kspaces_live++;
	return s;
}

/* Every space's record; their roots go with the tree. */
void kvmm_keyed_exit(struct kvmm_ctx *ctx)
{
	uint32_t i;

	for (i = 0; i < ctx->nr_kspaces; i++)
		if (ctx->kspaces[i])
			kvmm_mfree(ctx, ctx->kspaces[i], sizeof(*ctx->kspaces[i]));
	kvmm_mfree(ctx, ctx->kspaces, ctx->cap_kspaces * sizeof(*ctx->kspaces));
	ctx->kspaces = NULL;
	ctx->nr_kspaces = ctx->cap_kspaces = ctx->nr_kspaces_live = 0;
}

/**
 * kvmm_set_ns_kspaces() - set how many keyed spaces a namespace may hold
 * @ctx: the context
 * @n: the limit, 0 .. KVMM_KSPACES_MAX
 *
 * Spaces a namespace already holds stay; only new ones are refused.
 *
 * Return: 0, or -EINVAL above KVMM_KSPACES_MAX.
 */
int kvmm_set_ns_kspaces(struct kvmm_ctx *ctx, uint64_t n)
{
	if (n > KVMM_KSPACES_MAX) {
		kvmm_report(ctx, "ns_kspaces: %llu is above the table's %u spaces",
			    (unsigned long long)n, KVMM_KSPACES_MAX);
		return -EINVAL;
	}
	ctx->ns_kspaces = (uint32_t)n;
	return 0;
}

/**
 * kvmm_keyed_space() - register (or find) a keyed space
 * @ctx: the context; it must have a host tier
 * @spec: the space: namespace, value size (1 .. KVMM_KVALUE_MAX bytes),
 *	model identity (printable, at most KVMM_MODEL_ID_MAX bytes, not
 *	empty); flags 0
 * @space: out, its id
 *
 * Return: 0; -EINVAL for a bad spec; -EOPNOTSUPP without a host tier;
 * -ENOSPC when the namespace holds as many spaces as its limit allows
 * (KVMM_SET_NS_KSPACES) or the context KVMM_KSPACES_MAX; -ENOMEM.
 */
KVMM_EXPORT int kvmm_keyed_space(struct kvmm_ctx *ctx, const struct kvmm_keyed_spec *spec,
				 uint32_t *space)
{
	struct kvmm_kspace *s;
	uint64_t fp[2];
	int err = 0;

	if (!ctx || !spec || !space || spec->flags || !spec->value_bytes ||
	    spec->value_bytes > KVMM_KVALUE_MAX || !model_id_ok(spec->model_id))
		return -EINVAL;
	if (!ctx->store[KVMM_TIER_HOST])
		return -EOPNOTSUPP;
	model_fp(spec->model_id, fp);
	s = space_get(ctx, spec->ns, fp, spec->value_bytes, &err);
	if (!s && err == -ENOSPC && ns_spaces(ctx, spec->ns) >= ctx->ns_kspaces)
		kvmm_report(ctx, "keyed space: namespace %u holds %u spaces, its limit "
			    "(ns_kspaces); remove one, or raise it", spec->ns, ctx->ns_kspaces);
	else if (!s && err == -ENOSPC)
		kvmm_report(ctx, "keyed space: the context holds %u spaces, all it can",
			    KVMM_KSPACES_MAX);
	if (!s)
		return err;
	if (!s->model_id[0])	/* new, or recovered: now it has a name */
		strcpy(s->model_id, spec->model_id);
	*space = s->id;
	return 0;
}

/* The space @id names, if it exists. */
static struct kvmm_kspace *space_by_id(const struct kvmm_ctx *ctx, uint32_t id)
{
	uint32_t slot = id & (KVMM_KSPACES_MAX - 1);

	if (slot >= ctx->nr_kspaces || !ctx->kspaces[slot] || ctx->kspaces[slot]->id != id)
		return NULL;
	return ctx->kspaces[slot];
}

static void space_dump(const struct kvmm_kspace *s, struct kvmm_dump_kspace *rec)
{
	const struct kvmm_ns *ns = kvmm_root_ns(s->root);

	memset(rec, 0, sizeof(*rec));
	*rec = (struct kvmm_dump_kspace){
		.id = s->id, .ns = s->ns, .value_bytes = s->value_bytes, .pages = s->pages,
		.host_pages = ns->keyed[KVMM_TIER_HOST], .nvme_pages = ns->keyed[KVMM_TIER_NVME],
		.fp = { s->fp[0], s->fp[1] },
	};
	rec->values = (rec->host_pages + rec->nvme_pages) / s->pages;
	memcpy(rec->model_id, s->model_id, sizeof(rec->model_id) < sizeof(s->model_id) ?
					   sizeof(rec->model_id) : sizeof(s->model_id));
}

/**
 * kvmm_keyed_dump() - what DUMP_KSPACES shows of the space in slot @slot
 * @ctx: the context
 * @slot: a slot of the space table, 0 up
 * @rec: out, when the slot holds a space
 *
 * Return: 1 (@rec filled), 0 (a free slot: removed space), or -1 past
 * the last slot.
 */
int kvmm_keyed_dump(const struct kvmm_ctx *ctx, uint32_t slot, struct kvmm_dump_kspace *rec)
{
	if (slot >= ctx->nr_kspaces)
		return -1;
	if (!ctx->kspaces[slot])
		return 0;
	space_dump(ctx->kspaces[slot], rec);
	return 1;
}

/**
 * kvmm_keyed_info() - what a space holds
 * @ctx: the context
 * @space: a space
 * @info: out: what DUMP_KSPACES shows of it (its values, their pages on
 *	each tier, its identity)
 *
 * Return: 0, or -EINVAL for no such space.
 */
KVMM_EXPORT int kvmm_keyed_info(const struct kvmm_ctx *ctx, uint32_t space,
				struct kvmm_dump_kspace *info)
{
	const struct kvmm_kspace *s;

	if (!ctx || !info)
		return -EINVAL;
	s = space_by_id(ctx, space);
	if (!s)
		return -EINVAL;
	space_dump(s, info);
	return 0;
}

/* Pages of tier @tier that the keyed spaces of namespace @ns hold. */
uint64_t kvmm_keyed_ns_pages(const struct kvmm_ctx *ctx, uint32_t ns, uint32_t tier)
{
	uint64_t pages = 0;
	uint32_t i;

	for (i = 0; i < ctx->nr_kspaces; i++)
		if (ctx->kspaces[i] && ctx->kspaces[i]->ns == ns)
			pages += kvmm_root_ns(ctx->kspaces[i]->root)->keyed[tier];
	return pages;
}

/* The space @id, if it exists and @ns may use it (KVMM_NS_ANY: any). */
struct kvmm_kspace *kvmm_kspace_of(struct kvmm_ctx *ctx, uint32_t id, uint32_t ns)
{
	struct kvmm_kspace *s = space_by_id(ctx, id);

	return s && (ns == KVMM_NS_ANY || s->ns == ns) ? s : NULL;
}

/* The space @id for the direct API, which reaches every namespace's. */
struct kvmm_kspace *kspace_direct(struct kvmm_ctx *ctx, uint32_t id)
{
	return ctx ? kvmm_kspace_of(ctx, id, KVMM_NS_ANY) : NULL;
}

uint64_t kvmm_kspace_value_bytes(const struct kvmm_kspace *s)
{
	return s->value_bytes;
}

/* ---- values ---- */

void keyed_key_words(const struct kvmm_key *key, uint32_t *w)
{
	memcpy(w, key, KVMM_KEY_WORDS * sizeof(*w));
}

struct kvmm_node *keyed_value_find(struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
				   const struct kvmm_key *key)
{
	uint32_t w[KVMM_KEY_WORDS];

	keyed_key_words(key, w);
	return kvmm_tree_lookup_child(ctx, s->root, w);
}

/* The space a value node belongs to. */
static const struct kvmm_kspace *value_space(const struct kvmm_ctx *ctx,
					     const struct kvmm_node *node)
{
	uint32_t i;

	for (i = 0; i < ctx->nr_kspaces; i++)
		if (ctx->kspaces[i] && ctx->kspaces[i]->root == node->parent)
			return ctx->kspaces[i];
	return NULL;
}

/* Page @index of the value with key @key in @s: its identity on a store. */
static void page_id(const struct kvmm_kspace *s, const uint32_t *key, uint32_t index,
		    uint64_t *id)
{
	struct {
		uint64_t fp[2];
		uint32_t key[KVMM_KEY_WORDS];
		uint32_t index;
		uint32_t zero;
	} in = { { s->fp[0], s->fp[1] }, { key[0], key[1], key[2], key[3] }, index, 0 };
	XXH128_hash_t h = XXH3_128bits_withSeed(&in, sizeof(in), s->ns);

	id[0] = h.low64;
	id[1] = h.high64;
}

/* Pages @from .. @from + @nr - 1 of value @node of @s: their identities. */
void kspace_store_keys(const struct kvmm_ctx *ctx, const struct kvmm_kspace *s,
		       const struct kvmm_node *node, uint32_t from, uint32_t nr,
		       struct kvmm_store_key *keys)
{
	uint32_t i, count = node->len >> ctx->page_shift;

	for (i = from; i < from + nr; i++) {
		struct kvmm_store_key *k = &keys[i - from];
		uint64_t id[2];

		page_id(s, node->tokens, i, id);
		*k = (struct kvmm_store_key){
			.id = { id[0], id[1] },
			.ns = s->ns,
			.tokens = node->tokens + ((size_t)i << ctx->page_shift),
			.flags = KVMM_STORE_KEY_KEYED,
			.index = i,
			.count = count,
			.space = { s->fp[0], s->fp[1] },
			.value_bytes = s->value_bytes,
		};
		memcpy(k->parent, node->tokens, sizeof(k->parent));
	}
}

/**
 * kvmm_keyed_store_keys() - the identities of a value's pages on an I/O
 *	store (struct kvmm_store_key)
 * @ctx: the context
 * @node: a value
 * @keys: out, one per page
 *
 * Page i of the value with key K in space S is XXH3-128, seeded with the
 * namespace, of (S's model fingerprint, K, i); its parent field is K
 * itself, and the key says it is keyed, with its space, index and count,
 * so a restart can find the value again.
 */
void kvmm_keyed_store_keys(struct kvmm_ctx *ctx, const struct kvmm_node *node,
			   struct kvmm_store_key *keys)
{
	kspace_store_keys(ctx, value_space(ctx, node), node, 0, node->len >> ctx->page_shift,
			  keys);
}

/**
 * kvmm_keyed_recover() - a whole value found again on an I/O store at a
 *	restart (recover.c)
 * @ctx: the context
 * @ns: its space's namespace
 * @fp: ... model fingerprint
 * @value_bytes: ... value size
 * @key: its key
 * @id: the identity its first page was written under
 * @pfns: its frames on @tier, in order, taken (kvmm_alloc_pfn())
 * @nr: how many: what a value of this size takes in this geometry
 * @tier: the store's tier
 *
 * Return: 0 once it is back (the frames are its own); -EINVAL when the
 * pages do not make such a value; -ENOMEM, -ENOSPC (no space for it).
 * On failure the frames are still the caller's.
 */
int kvmm_keyed_recover(struct kvmm_ctx *ctx, uint32_t ns, const uint64_t *fp,
		       uint64_t value_bytes, const uint64_t *key, const uint64_t *id,
		       const int32_t *pfns, uint32_t nr, uint32_t tier)
{
	struct kvmm_kspace *s;
	struct kvmm_node *node;
	uint32_t w[KVMM_KEY_WORDS];
	uint64_t want[2];
	int err = 0;

	if (!value_bytes || value_bytes > KVMM_KVALUE_MAX)
		return -EINVAL;
	s = space_get(ctx, ns, fp, value_bytes, &err);
	if (!s)
		return err;
	if (nr != s->pages)
		return -EINVAL;
	memcpy(w, key, sizeof(w));
	page_id(s, w, 0, want);
	if (want[0] != id[0] || want[1] != id[1])
		return -EINVAL;		/* not what it claims to be */
	node = kvmm_tree_add_keyed(ctx, s->root, w, nr, pfns, tier, NULL);
	if (!node)
		return -ENOMEM;
	kvmm_lru_update(ctx, node);
	return 0;
}
