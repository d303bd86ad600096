// SPDX-License-Identifier: MIT
/*
 * driver/remote/remote.c - the remote tier on a Redis Cluster: pages
 * addressed by their content, shared by every node that runs the same
 * model under the same tenant salt.
 *
 * Names.  A page's key is XXH3-128 of (its space, its parent's key, its
 * tokens); the space is XXH3-128 of the salt, the model id and the
 * geometry.  So every node derives the same key for the same prefix page,
 * and keys of different salts, models or prefixes differ (a collision of
 * 128-bit keys would still be a miss: the value carries what it is).
 *
 * Values.  One page is one value:
 *
 *	the page's bytes | struct rv_hdr | tokens (page_size x u32)
 *
 * (the header trails, so that a read lands the page's bytes where they go
 * straight from the client's read buffer, and the header beside them).
 * The header says what the value is (magic, version, space, key, parent,
 * length), the checksum of the page's bytes (kvmm_csum) and one of the
 * header and tokens.  A read checks all of it against what was asked
 * for; anything that does not verify is a miss, is deleted, is counted,
 * and ends the prefix there: never served.
 *
 * Sizes.  The server's allocator (jemalloc) rounds a value up to a size
 * class, four per power of two: a 2 MiB page plus its header would take
 * the 2.5 MiB class, a quarter more.  So a value that would waste more
 * than 1/32 of itself is cut in two keys in one slot ({key} hash tag):
 * the first (the page's first bytes, the header and tokens) exactly fills
 * the class below, less the server's own header; the second holds the
 * page's last few KiB.  Both are read and written
 * in the same pipeline; a missing second part reads as a torn value.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../csum/csum.h"
#include "../driver.h"
#include "cluster.h"

#define RV_MAGIC	0x5652564bu	/* "KVRV" */
#define RV_VERSION	1
#define RV_KEY_LEN	(sizeof("kvmm:{") - 1 + 32 + 1)
#define RV_SERVER_HDR	32	/* what the server adds to a string's bytes */

struct rv_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t hdr_bytes;
	uint32_t page_size;
	uint32_t parts;
	uint64_t space[2];
	uint64_t key[2];
	uint64_t parent[2];
	uint64_t len;		/* the page's bytes */
	uint64_t split;		/* ... of them in the first part */
	uint64_t psum;		/* kvmm_csum() of the page's bytes */
	uint64_t hsum;		/* XXH3-64 of this header (hsum 0) and the tokens */
};

_Static_assert(sizeof(struct rv_hdr) == 96, "the value header's layout is the format");

/* Per page of a batch: its keys and the commands about it */
struct rv_slot {
	char key[2][RV_KEY_LEN + 2];
	size_t key_len[2];
	struct rv_hdr hdr;
	uint64_t psum;		/* a get's page's checksum, taken as its last part landed */
	bool summed;
};

struct remote {
	struct rc_cluster *cl;
	uint64_t space[2];
	uint32_t page_size;
	uint64_t page_bytes;
	uint64_t split;		/* page bytes in the first part */
	uint32_t parts;
	struct kvmm_remote_stats st;
	/* per-batch scratch, grown as needed */
	struct rv_slot *slot;
	char *trail;		/* per page: where a read's header and tokens land */
	struct rc_cmd *cmd;
	uint8_t *ok;
	uint32_t cap;
	uint32_t *zeros;	/* the tokens of a page named by its key alone */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The largest allocator size class at most @n (four per power of two). */
static uint64_t class_floor(uint64_t n)
{
	unsigned int k = 63 - (unsigned int)__builtin_clzll(n);
	uint64_t step = k >= 4 ? 1ull << (k - 2) : 1;

	return n / step * step;
}

/* The smallest allocator size class at least @n. */
static uint64_t class_ceil(uint64_t n)
{
	unsigned int k = 63 - (unsigned int)__builtin_clzll(n);
	uint64_t step = k >= 4 ? 1ull << (k - 2) : 1;

	return (n + step - 1) / step * step;
}

/*
 * How many of a page's bytes go in its first part: all of them when the
 * whole value wastes little, else what fills the size class below.
 */
static uint64_t rv_split(uint64_t head, uint64_t page_bytes)
{
	uint64_t whole = head + page_bytes + RV_SERVER_HDR;
	uint64_t first;

	if (whole < 4096 || class_ceil(whole) - whole <= whole / 32)
		return page_bytes;
	first = class_floor(whole) - RV_SERVER_HDR;
	if (first <= head)
		return page_bytes;
	return first - head;
}

static uint64_t rv_head(const struct remote *r)
{
	return sizeof(struct rv_hdr) + (uint64_t)r->page_size * sizeof(uint32_t);
}

static int grow(struct remote *r, uint32_t nr)
{
	struct rv_slot *s;
	struct rc_cmd *c;
	uint8_t *ok;
	char *t;

	if (nr <= r->cap)
		return 0;
	t = realloc(r->trail, nr * rv_head(r));
	if (t)
		r->trail = t;
	s = realloc(r->slot, nr * sizeof(*s));
	if (s)
		r->slot = s;
	c = realloc(r->cmd, 2ull * nr * sizeof(*c));
	if (c)
		r->cmd = c;
	ok = realloc(r->ok, nr);
	if (ok)
		r->ok = ok;
	if (!s || !c || !ok || !t)
		return -ENOMEM;
	r->cap = nr;
	return 0;
}

static void hex128(char *out, const uint64_t k[2])
{
	static const char digits[] = "0123456789abcdef";
	int i;

	for (i = 0; i < 32; i++) {
		uint64_t w = k[i / 16];

		out[i] = digits[(w >> (60 - 4 * (i % 16))) & 15];
	}
}

/*
 * The keys of page @pg: "kvmm:{HEX}" and, for a second part,
 * "kvmm:{HEX}:1", HEX naming (the space, the page's key): every key
 * depends on the salt and model, however the caller derived the page's.
 */
static void slot_keys(const struct remote *r, struct rv_slot *s, const struct kvmm_remote_page *pg)
{
	uint64_t in[4] = { r->space[0], r->space[1], pg->key[0], pg->key[1] };
	XXH128_hash_t h = XXH3_128bits(in, sizeof(in));
	uint64_t name[2] = { h.low64, h.high64 };

	memcpy(s->key[0], "kvmm:{", 6);
	hex128(s->key[0] + 6, name);
	s->key[0][38] = '}';
	s->key_len[0] = 39;
	memcpy(s->key[1], s->key[0], 39);
	memcpy(s->key[1] + 39, ":1", 2);
	s->key_len[1] = 41;
}

static void cmd_set(struct rc_cmd *c, int argc, const char *a0, const char *a1, size_t l1)
{
	memset(c, 0, sizeof(*c));
	c->argc = argc;
	c->argv[0] = a0;
	c->len[0] = strlen(a0);
	c->argv[1] = a1;
	c->len[1] = l1;
	c->slot = rc_slot(a1, l1);
}

/* @verb (EXISTS, DEL) of every key of the value in @s. */
static void cmd_value_keys(const struct remote *r, struct rc_cmd *c, const char *verb,
			   const struct rv_slot *s)
{
	cmd_set(c, (int)r->parts + 1, verb, s->key[0], s->key_len[0]);
	if (r->parts == 2) {
		c->argv[2] = s->key[1];
		c->len[2] = s->key_len[1];
	}
}

static void cmds_free(struct rc_cmd *c, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (c[i].reply)
			freeReplyObject(c[i].reply);
}

/* Commands with no reply, or an error reply (NOPERM, OOM under maxmemory ...). */
static void count_errors(struct remote *r, const struct rc_cmd *c, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (c[i].err == -ETIMEDOUT)
			r->st.timeouts++;
		else if (c[i].err || (c[i].reply && c[i].reply->type == REDIS_REPLY_ERROR))
			r->st.errors++;
}

static const uint32_t *tokens_of(const struct remote *r, const struct kvmm_remote_page *pg)
{
	return pg->tokens ? pg->tokens : r->zeros;
}

static uint64_t hdr_sum(const struct rv_hdr *h, const uint32_t *tokens, uint32_t page_size)
{
	struct rv_hdr z = *h;
	XXH3_state_t st;

	z.hsum = 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &z, sizeof(z));
	XXH3_64bits_update(&st, tokens, (size_t)page_size * sizeof(uint32_t));
	return XXH3_64bits_digest(&st);
}

static void remote_chain(void *priv, const uint64_t parent[2], const uint32_t *tokens,
			 uint32_t nr, struct kvmm_remote_page *out)
{
	struct remote *r = priv;
	uint64_t prev[2] = { parent ? parent[0] : 0, parent ? parent[1] : 0 };
	uint32_t i;

	for (i = 0; i < nr; i++) {
		XXH3_state_t st;
		XXH128_hash_t h;

		XXH3_128bits_reset(&st);
		XXH3_128bits_update(&st, r->space, sizeof(r->space));
		XXH3_128bits_update(&st, prev, sizeof(prev));
		XXH3_128bits_update(&st, tokens + (size_t)i * r->page_size,
				    (size_t)r->page_size * sizeof(uint32_t));
		h = XXH3_128bits_digest(&st);
		out[i].parent[0] = prev[0];
		out[i].parent[1] = prev[1];
		out[i].key[0] = prev[0] = h.low64;
		out[i].key[1] = prev[1] = h.high64;
		out[i].tokens = tokens + (size_t)i * r->page_size;
	}
}

/* EXISTS of every page's parts; r->ok[i] says page i is whole there. */
static int exists(struct remote *r, const struct kvmm_remote_page *pages, uint32_t nr)
{
	uint32_t i;

	if (grow(r, nr))
		return -ENOMEM;
	for (i = 0; i < nr; i++) {
		struct rv_slot *s = &r->slot[i];
		struct rc_cmd *c = &r->cmd[i];

		slot_keys(r, s, &pages[i]);
		cmd_value_keys(r, c, "EXISTS", s);
	}
	rc_exec(r->cl, r->cmd, nr);
	count_errors(r, r->cmd, nr);
	for (i = 0; i < nr; i++) {
		redisReply *rep = r->cmd[i].reply;

		r->ok[i] = rep && rep->type == REDIS_REPLY_INTEGER &&
			   rep->integer == (long long)r->parts;
	}
	cmds_free(r->cmd, nr);
	return 0;
}

static uint32_t remote_probe(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
			     uint8_t *ok)
{
	struct remote *r = priv;
	uint64_t t0 = now_ns();
	uint32_t i, run = 0;

	if (!nr || exists(r, pages, nr))
		return 0;
	while (run < nr && r->ok[run])
		run++;
	for (i = 0; i < nr; i++)
		r->st.probe_hits += r->ok[i];
	if (ok)
		memcpy(ok, r->ok, nr);
	r->st.probes += nr;
	r->st.probe_batches++;
	r->st.probe_ns += now_ns() - t0;
	return run;
}

/* Delete the pages whose r->ok[i] is 2 (did not verify), best effort. */
static void drop_bad(struct remote *r, uint32_t nr)
{
	uint32_t i, n = 0;

	for (i = 0; i < nr; i++) {
		struct rv_slot *s = &r->slot[i];

		if (r->ok[i] != 2)
			continue;
		cmd_value_keys(r, &r->cmd[n++], "DEL", s);
	}
	if (!n)
		return;
	rc_exec(r->cl, r->cmd, n);
	count_errors(r, r->cmd, n);
	cmds_free(r->cmd, n);
}

/*
 * Check page @pg's value, whose bytes landed in @dst and its header and
 * tokens at @trail (@c0, and @c1 for a second part): 1 when it is the page
 * asked for, 0 when it is absent, 2 when it is there but not what it
 * should be.
 */
static int verify(struct remote *r, const struct kvmm_remote_page *pg, const struct rc_cmd *c0,
		  const struct rc_cmd *c1, const struct rv_slot *s, const char *trail)
{
	const redisReply *a = c0->reply, *b = c1 ? c1->reply : NULL;
	uint64_t head = rv_head(r);
	struct rv_hdr h;

	if (!a || a->type == REDIS_REPLY_NIL)
		return b && b->type == REDIS_REPLY_STRING ? 2 : 0;
	if (a->type != REDIS_REPLY_STRING || c0->landed != head + r->split)
		return 2;
	if (c1 && (!b || b->type != REDIS_REPLY_STRING ||
		   c1->landed != r->page_bytes - r->split))
		return 2;
	memcpy(&h, trail, sizeof(h));
	if (h.magic != RV_MAGIC || h.version != RV_VERSION || h.hdr_bytes != sizeof(h) ||
	    h.page_size != r->page_size || h.parts != r->parts || h.len != r->page_bytes ||
	    h.split != r->split || memcmp(h.space, r->space, sizeof(h.space)) ||
	    memcmp(h.key, pg->key, sizeof(h.key)) || memcmp(h.parent, pg->parent, sizeof(h.parent)))
		return 2;
	if (memcmp(trail + sizeof(h), tokens_of(r, pg), (size_t)r->page_size * sizeof(uint32_t)))
		return 2;
	if (hdr_sum(&h, tokens_of(r, pg), r->page_size) != h.hsum)
		return 2;
	if ((s->summed ? s->psum : kvmm_csum(c0->into[0], r->page_bytes)) != h.psum)
		return 2;
	return 1;
}

/*
 * A get's last part of a page landed (cluster.c calls it mid-batch): sum
 * the page now, while its bytes are in cache and other shards' replies
 * are still arriving, rather than after the batch.
 */
static void page_landed(struct rc_cmd *c, void *arg)
{
	struct remote *r = arg;
	uint32_t i = (uint32_t)(c - r->cmd) / r->parts;	/* its page */

	r->slot[i].psum = kvmm_csum(r->cmd[i * r->parts].into[0], r->page_bytes);
	r->slot[i].summed = true;
}

static uint32_t remote_get(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
			   void *const *dst, uint8_t *ok)
{
	struct remote *r = priv;
	uint64_t t0 = now_ns();
	uint32_t i, run = 0, k = r->parts;
	bool ended = false;

	if (!nr || grow(r, nr))
		return 0;
	for (i = 0; i < nr; i++) {
		struct rv_slot *s = &r->slot[i];
		struct rc_cmd *c = &r->cmd[i * k];

		slot_keys(r, s, &pages[i]);
		s->summed = false;
		cmd_set(c, 2, "GET", s->key[0], s->key_len[0]);
		c->into[0] = dst[i];
		c->into_len[0] = r->split;
		c->into[1] = r->trail + i * rv_head(r);
		c->into_len[1] = rv_head(r);
		if (k == 2) {
			cmd_set(++c, 2, "GET", s->key[1], s->key_len[1]);
			c->into[0] = (char *)dst[i] + r->split;
			c->into_len[0] = r->page_bytes - r->split;
		}
		c->landed_fn = page_landed;	/* the page's last part */
		c->landed_arg = r;
	}
	rc_exec(r->cl, r->cmd, nr * k);
	count_errors(r, r->cmd, nr * k);
	for (i = 0; i < nr; i++) {
		const struct rc_cmd *c0 = &r->cmd[i * k], *c1 = k == 2 ? c0 + 1 : NULL;
		int v = c0->err || (c1 && c1->err) ? 0 :
			verify(r, &pages[i], c0, c1, &r->slot[i], r->trail + i * rv_head(r));

		r->ok[i] = (uint8_t)v;
		if (ok)
			ok[i] = v == 1;
		if (v == 2)
			r->st.corrupt++;
		if (v == 1 && (!ended || ok)) {
			r->st.get_hits++;
			r->st.get_bytes += r->page_bytes;
		}
		if (v == 1 && !ended)
			run++;
		else
			ended = true;
	}
	cmds_free(r->cmd, nr * k);
	drop_bad(r, nr);
	r->st.gets += nr;
	r->st.get_batches++;
	r->st.get_ns += now_ns() - t0;
	return run;
}

static int remote_put(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
		      const void *const *src)
{
	struct remote *r = priv;
	uint64_t t0 = now_ns();
	uint32_t i, n = 0, there = 0, done = 0;

	if (!nr)
		return 0;
	if (exists(r, pages, nr))
		return -ENOMEM;
	for (i = 0; i < nr; i++) {
		struct rv_slot *s = &r->slot[i];
		struct rv_hdr *h = &s->hdr;
		struct rc_cmd *c;

		if (r->ok[i]) {
			r->st.put_skipped++;
			there++;
			continue;
		}
		if (!r->cmd[i].reply && r->cmd[i].err)
			continue;	/* its shard did not answer: do not write blind */
		memset(h, 0, sizeof(*h));
		h->magic = RV_MAGIC;
		h->version = RV_VERSION;
		h->hdr_bytes = sizeof(*h);
		h->page_size = r->page_size;
		h->parts = r->parts;
		memcpy(h->space, r->space, sizeof(h->space));
		memcpy(h->key, pages[i].key, sizeof(h->key));
		memcpy(h->parent, pages[i].parent, sizeof(h->parent));
		h->len = r->page_bytes;
		h->split = r->split;
		h->psum = kvmm_csum(src[i], r->page_bytes);
		h->hsum = hdr_sum(h, tokens_of(r, &pages[i]), r->page_size);
		/* the second part first: a first part found means a whole value */
		if (r->parts == 2) {
			c = &r->cmd[n++];
			cmd_set(c, 3, "SET", s->key[1], s->key_len[1]);
			c->pieces = 1;
			c->piece[0] = (const char *)src[i] + r->split;
			c->piece_len[0] = r->page_bytes - r->split;
		}
		c = &r->cmd[n++];
		cmd_set(c, 3, "SET", s->key[0], s->key_len[0]);
		c->pieces = 3;
		c->piece[0] = src[i];
		c->piece_len[0] = r->split;
		c->piece[1] = h;
		c->piece_len[1] = sizeof(*h);
		c->piece[2] = tokens_of(r, &pages[i]);
		c->piece_len[2] = (size_t)r->page_size * sizeof(uint32_t);
	}
	/* exists() left r->cmd's replies freed: the SETs reuse the array */
	if (n) {
		rc_exec(r->cl, r->cmd, n);
		count_errors(r, r->cmd, n);
		/* a page's SETs are adjacent, its second part's first: it counts
		 * when every one of them landed */
		for (i = 0; i < n; i += r->parts) {
			uint32_t k, landed = 0;

			for (k = 0; k < r->parts; k++) {
				const redisReply *rep = r->cmd[i + k].reply;

				landed += rep && rep->type == REDIS_REPLY_STATUS;
			}
			if (landed == r->parts) {
				done++;
				r->st.put_bytes += r->page_bytes;
			}
		}
		cmds_free(r->cmd, n);
	}
	r->st.puts += done;
	r->st.put_batches++;
	r->st.put_ns += now_ns() - t0;
	if (!there && !done)
		return -EIO;
	return (int)(there + done);
}

static void remote_drop(void *priv, const struct kvmm_remote_page *pages, uint32_t nr)
{
	struct remote *r = priv;
	uint32_t i;

	if (!nr || grow(r, nr))
		return;
	for (i = 0; i < nr; i++) {
		slot_keys(r, &r->slot[i], &pages[i]);
		r->ok[i] = 2;
	}
	drop_bad(r, nr);
}

static int remote_key_name(void *priv, const struct kvmm_remote_page *pg, uint32_t part,
			   char *buf, size_t len)
{
	struct remote *r = priv;
	struct rv_slot s;

	if (part >= r->parts || len < sizeof(s.key[0]))
		return -EINVAL;
	slot_keys(r, &s, pg);
	memcpy(buf, s.key[part], s.key_len[part]);
	buf[s.key_len[part]] = '\0';
	return 0;
}

static void remote_stats(void *priv, struct kvmm_remote_stats *out)
{
	struct remote *r = priv;
	const struct rc_stats *cs = rc_stats(r->cl);

	*out = r->st;
	out->moved = cs->moved;
	out->ask = cs->ask;
	out->connects = cs->connects;
	out->refreshes = cs->refreshes;
	out->stale = cs->stale;
}

static void remote_hiredis_writes(void *priv, bool on)
{
	struct remote *r = priv;

	rc_set_hiredis_writes(r->cl, on);
}

static void remote_cancel(void *priv)
{
	struct remote *r = priv;

	rc_cancel(r->cl);
}

static void remote_exit(void *priv)
{
	struct remote *r = priv;

	if (!r)
		return;
	rc_close(r->cl);
	free(r->slot);
	free(r->cmd);
	free(r->ok);
	free(r->trail);
	free(r->zeros);
	free(r);
}

static int remote_init(const struct kvmm_remote_cfg *cfg, void **privp)
{
	struct remote *r;
	XXH3_state_t st;
	XXH128_hash_t h;
	static const char tag[] = "kvmm-remote/1";

	if (!cfg->seeds || !cfg->page_size || !cfg->page_bytes) {
		snprintf(cfg->err, cfg->err_len, "remote: no seeds, or no page geometry");
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->page_size = cfg->page_size;
	r->page_bytes = cfg->page_bytes;
	r->zeros = calloc(cfg->page_size, sizeof(uint32_t));
	if (!r->zeros) {
		free(r);
		return -ENOMEM;
	}
	r->split = rv_split(rv_head(r), r->page_bytes);
	r->parts = r->split < r->page_bytes ? 2 : 1;
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, tag, sizeof(tag));
	XXH3_128bits_update(&st, cfg->salt ? cfg->salt : "", strlen(cfg->salt ? cfg->salt : "") + 1);
	XXH3_128bits_update(&st, cfg->model_id ? cfg->model_id : "",
			    strlen(cfg->model_id ? cfg->model_id : "") + 1);
	XXH3_128bits_update(&st, &cfg->model, sizeof(cfg->model));
	XXH3_128bits_update(&st, &cfg->page_size, sizeof(cfg->page_size));
	h = XXH3_128bits_digest(&st);
	r->space[0] = h.low64;
	r->space[1] = h.high64;
	r->cl = rc_open(cfg->seeds, cfg->timeout_ms, cfg->user, cfg->password, cfg->err,
			cfg->err_len);
	if (!r->cl) {
		remote_exit(r);
		return -ECONNREFUSED;
	}
	*privp = r;
	return 0;
}

const struct kvmm_remote_ops kvmm_remote_redis = {
	.name = "redis",
	.init = remote_init,
	.exit = remote_exit,
	.chain = remote_chain,
	.probe = remote_probe,
	.get = remote_get,
	.put = remote_put,
	.drop = remote_drop,
	.key_name = remote_key_name,
	.stats = remote_stats,
	.hiredis_writes = remote_hiredis_writes,
	.cancel = remote_cancel,
};
