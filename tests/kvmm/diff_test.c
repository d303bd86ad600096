// SPDX-License-Identifier: MIT
/*
 * tests/kvmm/diff_test.c - kvmm_diff: a randomized differential test.
 *
 * A deliberately naive reference model (flat arrays, linear scans, victims
 * found by scanning every leaf) and the library are driven with the same
 * random operations: open, match, extend (single and batched), commit,
 * close, retract, pin, unpin, priorities, reclaim, drop_caches, policy
 * and watermark changes, lookups, and bad arguments of every kind.  After
 * each operation the test compares the return value, every open
 * sequence's length, the page counts (free, cached, evictable, protected,
 * pinned), node and leaf counts, and runs kvmm_check().
 *
 * It also checks the KV itself: after every extend the test writes, into
 * the mock backend's slots named by the page table, a value that depends
 * on the whole prefix up to that token (as real KV does), and it verifies
 * every open sequence's slots against it.  A page handed out twice, a row
 * pointing at the wrong shared page, or a dedup gone wrong shows up as a
 * wrong value.
 *
 * KVMM_DIFF_OPS in the environment sets the operations per configuration
 * (default 170,000: over a million in all).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../helpers.h"

#define M_MAX_SEQS	8
#define M_MAX_LEN	128

struct mrun {
	bool alive, root;
	int parent;
	uint32_t ns, len, lock, pins, pin_ref, hits;
	uint64_t atime;
	uint8_t prio;
	uint32_t *tok;
};

struct mseq {
	bool open;
	uint32_t ns, len, cached, next_free;
	int root, node;
	uint32_t tok[M_MAX_LEN];
};

struct model {
	uint32_t ps, nr_pages, max_seqs, max_len;
	uint32_t free, wmin, wlow, whigh;
	bool slru;
	struct mrun *runs;
	int nruns, cap;
	uint64_t clock;
	struct mseq seqs[M_MAX_SEQS];
	uint32_t free_head;
};

static uint64_t rnd_state;

static uint32_t rnd(uint32_t n)
{
	uint64_t z = (rnd_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return n ? (uint32_t)((z ^ (z >> 31)) % n) : 0;
}

/* ---- the model ---- */

static uint32_t m_al(const struct model *m, uint32_t n)
{
	return n / m->ps * m->ps;
}

static uint32_t m_pages(const struct model *m, uint32_t n)
{
	return (n + m->ps - 1) / m->ps;
}

static int m_new_run(struct model *m)
{
	int i;

	for (i = 0; i < m->nruns; i++)
		if (!m->runs[i].alive)
			goto found;
	if (m->nruns == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 64;
		m->runs = realloc(m->runs, (size_t)m->cap * sizeof(*m->runs));
	}
	i = m->nruns++;
found:
	memset(&m->runs[i], 0, sizeof(m->runs[i]));
	m->runs[i].alive = true;
	return i;
}

static int m_root(struct model *m, uint32_t ns, bool create)
{
	int i;

	for (i = 0; i < m->nruns; i++)
		if (m->runs[i].alive && m->runs[i].root && m->runs[i].ns == ns)
			return i;
	if (!create)
		return -1;
	i = m_new_run(m);
	m->runs[i].root = true;
	m->runs[i].ns = ns;
	m->runs[i].parent = -1;
	return i;
}

static bool m_leaf(const struct model *m, int r)
{
	int i;

	for (i = 0; i < m->nruns; i++)
		if (m->runs[i].alive && !m->runs[i].root && m->runs[i].parent == r)
			return false;
	return true;
}

static int m_child(const struct model *m, int parent, const uint32_t *key)
{
	int i;

	for (i = 0; i < m->nruns; i++) {
		const struct mrun *c = &m->runs[i];

		if (c->alive && !c->root && c->parent == parent &&
		    !memcmp(c->tok, key, m->ps * sizeof(*key)))
			return i;
	}
	return -1;
}

struct mpath {
	int node;
	uint32_t split, matched;
};

static void m_walk(const struct model *m, int from, const uint32_t *key, uint32_t n,
		   struct mpath *p)
{
	int node = from;

	n = m_al(m, n);
	p->split = 0;
	p->matched = 0;
	while (p->matched < n) {
		int c = m_child(m, node, key + p->matched);
		uint32_t k = 0;

		if (c < 0)
			break;
		while (k < m->runs[c].len && p->matched + k < n &&
		       m->runs[c].tok[k] == key[p->matched + k])
			k++;
		k = m_al(m, k);
		p->matched += k;
		node = c;
		if (k < m->runs[c].len) {
			p->split = k;
			break;
		}
	}
	p->node = node;
}

static void m_split(struct model *m, struct mpath *p)
{
	int x = p->node, n;
	uint32_t k = p->split;

	if (!k)
		return;
	n = m_new_run(m);
	m->runs[n].tok = malloc(k * sizeof(uint32_t));
	memcpy(m->runs[n].tok, m->runs[x].tok, k * sizeof(uint32_t));
	m->runs[n].len = k;
	memmove(m->runs[x].tok, m->runs[x].tok + k, (m->runs[x].len - k) * sizeof(uint32_t));
	m->runs[x].len -= k;
	m->runs[n].parent = m->runs[x].parent;
	m->runs[n].lock = m->runs[x].lock;
	m->runs[n].pin_ref = m->runs[x].pin_ref;
	m->runs[n].atime = m->runs[x].atime;
	m->runs[n].hits = m->runs[x].hits;
	m->runs[n].prio = m->runs[x].prio;
	m->runs[x].parent = n;
	p->node = n;
	p->split = 0;
}

static void m_touch(struct model *m, int r)
{
	uint64_t depth = 0, t;
	int n;

	for (n = r; n >= 0; n = m->runs[n].parent)
		depth++;
	t = m->clock += depth;
	for (n = r; n >= 0; n = m->runs[n].parent) {
		m->runs[n].atime = t--;
		if (m->runs[n].hits < 65535)
			m->runs[n].hits++;
	}
}

static void m_lock(struct model *m, int r)
{
	for (; !m->runs[r].root; r = m->runs[r].parent)
		m->runs[r].lock++;
}

static void m_unlock(struct model *m, int r)
{
	int n;

	for (n = r; !m->runs[n].root; n = m->runs[n].parent)
		m->runs[n].lock--;
	if (!m->runs[r].root && !m->runs[r].lock && m_leaf(m, r))
		m_touch(m, r);
}

static uint64_t m_evictable(const struct model *m)
{
	uint64_t e = 0;
	int i;

	for (i = 0; i < m->nruns; i++)
		if (m->runs[i].alive && !m->runs[i].root && !m->runs[i].lock)
			e += m->runs[i].len / m->ps;
	return e;
}

static int m_victim(const struct model *m)
{
	int i, best = -1;

	for (i = 0; i < m->nruns; i++) {
		const struct mrun *r = &m->runs[i], *b;

		if (!r->alive || r->root || r->lock || !m_leaf(m, i))
			continue;
		if (best < 0) {
			best = i;
			continue;
		}
		b = &m->runs[best];
		if (r->prio != b->prio) {
			if (r->prio < b->prio)
				best = i;
			continue;
		}
		if (m->slru && (r->hits >= 2) != (b->hits >= 2)) {
			if (r->hits < 2)
				best = i;
			continue;
		}
		if (r->atime < b->atime)
			best = i;
	}
	return best;
}

static uint64_t m_shrink(struct model *m, uint64_t target)
{
	uint64_t freed = 0;

	while (freed < target) {
		int v = m_victim(m);

		if (v < 0)
			break;
		m->free += m->runs[v].len / m->ps;
		freed += m->runs[v].len / m->ps;
		m->runs[v].alive = false;
		free(m->runs[v].tok);
		m->runs[v].tok = NULL;
	}
	return freed;
}

static int m_reserve(struct model *m, uint64_t nr, uint32_t flags)
{
	uint64_t reserve = (flags & KVMM_EXTEND_RESERVE) ? 0 : m->wmin;

	if (m->free < nr + m->wlow && !(flags & KVMM_EXTEND_NORECLAIM)) {
		uint64_t target = nr + m->whigh;

		if (m->free + m_evictable(m) < nr + reserve)
			return -ENOSPC;
		if (target < nr + reserve)
			target = nr + reserve;
		if (target > m->free)
			m_shrink(m, target - m->free);
	}
	return m->free < nr + reserve ? -ENOSPC : 0;
}

static struct mseq *m_seq(struct model *m, uint32_t id)
{
	return id < m->max_seqs && m->seqs[id].open ? &m->seqs[id] : NULL;
}

static int m_open(struct model *m, uint32_t ns, uint32_t *id)
{
	struct mseq *s;

	if (m->free_head == UINT32_MAX)
		return -EBUSY;
	*id = m->free_head;
	s = &m->seqs[*id];
	m->free_head = s->next_free;
	s->open = true;
	s->ns = ns;
	s->len = s->cached = 0;
	s->root = s->node = m_root(m, ns, true);
	return 0;
}

static int m_match(struct model *m, uint32_t id, uint32_t n)
{
	struct mseq *s = m_seq(m, id);
	struct mpath p;

	if (!s || s->len || !n || n > m->max_len)
		return -EINVAL;
	m_walk(m, s->root, s->tok, n, &p);
	m_split(m, &p);
	if (p.matched) {
		m_touch(m, p.node);
		m_lock(m, p.node);
	}
	s->node = p.node;
	s->len = s->cached = p.matched;
	return (int)p.matched;
}

static int m_extend(struct model *m, const uint32_t *ids, const uint32_t *ns,
		    uint32_t count, uint32_t flags)
{
	uint64_t total = 0;
	uint32_t i, j;
	int ret;

	if (!count || (flags & ~KVMM_EXTEND_FLAGS))
		return -EINVAL;
	for (i = 0; i < count; i++) {
		struct mseq *s = m_seq(m, ids[i]);

		for (j = 0; j < i; j++)
			if (ids[j] == ids[i])
				return -EINVAL;
		if (!s || !ns[i] || ns[i] > m->max_len - s->len)
			return -EINVAL;
		total += m_pages(m, s->len + ns[i]) - m_pages(m, s->len);
	}
	ret = m_reserve(m, total, flags);
	if (ret)
		return ret;
	m->free -= (uint32_t)total;
	for (i = 0; i < count; i++)
		m->seqs[ids[i]].len += ns[i];
	return 0;
}

static void m_commit_locked(struct model *m, struct mseq *s, uint32_t n)
{
	struct mpath p;
	uint32_t rest;
	int end;

	n = m_al(m, n);
	if (n <= s->cached)
		return;
	m_walk(m, s->node, s->tok + s->cached, n - s->cached, &p);
	rest = n - s->cached - p.matched;
	m_split(m, &p);
	end = p.node;
	m->free += p.matched / m->ps;	/* our copies of pages already cached */
	if (rest) {
		int leaf = m_new_run(m);

		m->runs[leaf].parent = end;
		m->runs[leaf].len = rest;
		m->runs[leaf].tok = malloc(rest * sizeof(uint32_t));
		memcpy(m->runs[leaf].tok, s->tok + s->cached + p.matched,
		       rest * sizeof(uint32_t));
		end = leaf;
	}
	m_touch(m, end);
	m_lock(m, end);
	if (s->node != s->root)
		m_unlock(m, s->node);
	s->node = end;
	s->cached = n;
}

static int m_commit(struct model *m, uint32_t id, uint32_t n)
{
	struct mseq *s = m_seq(m, id);

	if (!s || !n || n > s->len)
		return -EINVAL;
	m_commit_locked(m, s, n);
	return (int)s->cached;
}

static int m_finish(struct model *m, uint32_t id, uint32_t n, bool close)
{
	struct mseq *s = m_seq(m, id);

	if (!s || (n && n > s->len))
		return -EINVAL;
	if (n)
		m_commit_locked(m, s, n);
	if (s->node != s->root)
		m_unlock(m, s->node);
	m->free += m_pages(m, s->len) - s->cached / m->ps;
	s->node = s->root;
	s->len = s->cached = 0;
	if (close) {
		s->open = false;
		s->next_free = m->free_head;
		m->free_head = id;
	}
	return 0;
}

static int m_resolve(struct model *m, uint32_t ns, const uint32_t *tok, uint32_t n,
		     bool split, struct mpath *p)
{
	int root;

	p->matched = 0;
	p->split = 0;
	if (!n || n > m->max_len || !m_al(m, n))
		return -EINVAL;
	root = m_root(m, ns, false);
	if (root < 0)
		return -ENOENT;
	m_walk(m, root, tok, n, p);
	if (p->matched < m_al(m, n))
		return -ENOENT;
	if (split)
		m_split(m, p);
	return 0;
}

static void m_pin_path(struct model *m, int r, int d)
{
	for (; !m->runs[r].root; r = m->runs[r].parent)
		m->runs[r].pin_ref += (uint32_t)d;
}

static int m_pin(struct model *m, uint32_t ns, const uint32_t *tok, uint32_t n)
{
	struct mpath p;
	int ret = m_resolve(m, ns, tok, n, false, &p);

	if (ret)
		return ret;
	if (!p.split && m->runs[p.node].pins == 255)
		return -EBUSY;
	m_split(m, &p);
	m_touch(m, p.node);
	m_lock(m, p.node);
	m->runs[p.node].pins++;
	m_pin_path(m, p.node, 1);
	return (int)p.matched;
}

static int m_unpin(struct model *m, uint32_t ns, const uint32_t *tok, uint32_t n)
{
	struct mpath p;
	int ret = m_resolve(m, ns, tok, n, false, &p);

	if (ret == -ENOENT || (!ret && (p.split || !m->runs[p.node].pins)))
		return -EINVAL;
	if (ret)
		return ret;
	m->runs[p.node].pins--;
	m_pin_path(m, p.node, -1);
	m_unlock(m, p.node);
	return (int)p.matched;
}

static int m_set_prio(struct model *m, uint32_t ns, const uint32_t *tok, uint32_t n,
		      uint32_t prio)
{
	struct mpath p;
	int ret, r;

	if (prio >= KVMM_NR_PRIO)
		return -EINVAL;
	ret = m_resolve(m, ns, tok, n, true, &p);
	if (ret)
		return ret;
	for (r = p.node; !m->runs[r].root; r = m->runs[r].parent)
		m->runs[r].prio = (uint8_t)prio;
	return (int)p.matched;
}

static int m_lookup(struct model *m, uint32_t ns, const uint32_t *tok, uint32_t n)
{
	struct mpath p;
	int ret = m_resolve(m, ns, tok, n, false, &p);

	if (ret == -ENOENT)
		return (int)p.matched;
	return ret ? ret : (int)p.matched;
}

static void m_counts(const struct model *m, uint64_t *cached, uint64_t *protected,
		     uint64_t *pinned, uint64_t *nodes, uint64_t *leaves)
{
	int i;

	*cached = *protected = *pinned = *nodes = *leaves = 0;
	for (i = 0; i < m->nruns; i++) {
		const struct mrun *r = &m->runs[i];

		if (!r->alive || r->root)
			continue;
		(*nodes)++;
		*cached += r->len / m->ps;
		if (r->lock)
			*protected += r->len / m->ps;
		if (r->pin_ref)
			*pinned += r->len / m->ps;
		if (!r->lock && m_leaf(m, i))
			(*leaves)++;
	}
}

/* ---- the driver ---- */

#define NTEMPL 6

struct diff {
	struct model m;
	struct kvmm_ctx *ctx;
	struct kvmm_kv_layer kv;
	struct kvmm_table table;
	uint32_t templ[NTEMPL][M_MAX_LEN];
	struct { uint32_t ns, t, n; } pins[64];
	uint32_t npins;
	unsigned long op, mismatches;
};

/* The KV of token @pos of @s: a hash of its namespace and whole prefix. */
static uint64_t kv_value(const struct mseq *s, uint32_t pos)
{
	uint64_t h = 0xcbf29ce484222325ull ^ s->ns;
	uint32_t i;

	for (i = 0; i <= pos; i++)
		h = (h ^ s->tok[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t *kv_slot(struct diff *d, uint32_t id, uint32_t pos)
{
	int32_t pfn = d->table.base[(size_t)id * d->table.stride + pos / d->m.ps];

	return (uint64_t *)((char *)d->kv.k +
			    ((uint64_t)pfn * d->m.ps + pos % d->m.ps) * d->kv.slot_bytes);
}

/* What an engine's forward pass does: write KV for the new tokens. */
static void kv_compute(struct diff *d, uint32_t id, uint32_t from, uint32_t to)
{
	const struct mseq *s = &d->m.seqs[id];
	uint32_t pos;

	for (pos = from; pos < to; pos++)
		*kv_slot(d, id, pos) = kv_value(s, pos);
}

#define EXPECT(cond, ...)						\
	do {								\
		if (!(cond)) {						\
			if (d->mismatches++ < 5) {			\
				fprintf(stderr, "diff op %lu: ", d->op);\
				fprintf(stderr, __VA_ARGS__);		\
				fputc('\n', stderr);			\
			}						\
		}							\
	} while (0)

static void compare(struct diff *d, const char *what, long got, long want)
{
	EXPECT(got == want, "%s returned %ld, model %ld", what, got, want);
}

static void verify(struct diff *d)
{
	uint64_t st[NR_KVMM_STATS], cached, protected, pinned, nodes, leaves;
	uint32_t id, pos;

	test_stats(d->ctx, st);
	m_counts(&d->m, &cached, &protected, &pinned, &nodes, &leaves);
	EXPECT(st[KVMM_STAT_PAGES_FREE] == d->m.free, "free %llu, model %u",
	       (unsigned long long)st[KVMM_STAT_PAGES_FREE], d->m.free);
	EXPECT(st[KVMM_STAT_PAGES_CACHED] == cached, "cached %llu, model %llu",
	       (unsigned long long)st[KVMM_STAT_PAGES_CACHED], (unsigned long long)cached);
	EXPECT(st[KVMM_STAT_PAGES_PROTECTED] == protected, "protected differs");
	EXPECT(st[KVMM_STAT_PAGES_EVICTABLE] == cached - protected, "evictable differs");
	EXPECT(st[KVMM_STAT_PAGES_PINNED] == pinned, "pinned differs");
	EXPECT(st[KVMM_STAT_NODES] == nodes, "nodes %llu, model %llu",
	       (unsigned long long)st[KVMM_STAT_NODES], (unsigned long long)nodes);
	EXPECT(st[KVMM_STAT_LEAVES_EVICTABLE] == leaves, "evictable leaves differ");
	EXPECT(kvmm_check(d->ctx) == 0, "kvmm_check failed");
	for (id = 0; id < d->m.max_seqs; id++) {
		const struct mseq *s = &d->m.seqs[id];
		struct kvmm_seq_info info;
		int ret = kvmm_seq_info(d->ctx, id, &info);

		EXPECT((ret == 0) == s->open, "seq %u open state differs", id);
		if (!s->open || ret)
			continue;
		EXPECT(info.len == s->len && info.cached == s->cached,
		       "seq %u len/cached %u/%u, model %u/%u", id, info.len,
		       info.cached, s->len, s->cached);
		for (pos = 0; pos < s->len; pos++)
			EXPECT(*kv_slot(d, id, pos) == kv_value(s, pos),
			       "seq %u token %u reads wrong KV", id, pos);
	}
}

static uint32_t pick_open(struct diff *d, bool want_empty, bool want_data)
{
	uint32_t i, start = rnd(d->m.max_seqs);

	for (i = 0; i < d->m.max_seqs; i++) {
		uint32_t id = (start + i) % d->m.max_seqs;
		const struct mseq *s = &d->m.seqs[id];

		if (s->open && (!want_empty || !s->len) && (!want_data || s->len))
			return id;
	}
	return UINT32_MAX;
}

static void gen_tokens(struct diff *d, uint32_t *tok)
{
	uint32_t i, cut;

	memcpy(tok, d->templ[rnd(NTEMPL)], d->m.max_len * sizeof(*tok));
	if (rnd(3)) {
		cut = rnd(d->m.max_len);
		for (i = cut; i < d->m.max_len; i++)
			tok[i] = rnd(4);	/* tiny vocabulary: more sharing */
	}
}

static void step(struct diff *d)
{
	struct model *m = &d->m;
	uint32_t r = rnd(100), id, n, ns, t;
	long got, want;

	if (r < 9) {				/* open */
		uint32_t a = UINT32_MAX, b = UINT32_MAX;

		ns = rnd(2);
		got = kvmm_seq_open(d->ctx, ns, &a);
		want = m_open(m, ns, &b);
		compare(d, "open", got, want);
		if (!got && !want)
			EXPECT(a == b, "open gave row %u, model %u", a, b);
	} else if (r < 28) {			/* match */
		id = pick_open(d, true, false);
		if (id == UINT32_MAX)
			return;
		gen_tokens(d, m->seqs[id].tok);
		n = rnd(8) ? 1 + rnd(m->max_len) : rnd(2) * (m->max_len + 1);
		got = kvmm_seq_match(d->ctx, id, m->seqs[id].tok, n);
		want = m_match(m, id, n);
		compare(d, "match", got, want);
	} else if (r < 48) {			/* extend, sometimes a batch */
		uint32_t ids[3], ns3[3], cnt = 1 + rnd(3), i, flags = 0, old[3];

		for (i = 0; i < cnt; i++) {
			ids[i] = rnd(10) ? pick_open(d, false, false) : rnd(m->max_seqs + 1);
			if (ids[i] == UINT32_MAX)
				return;
			ns3[i] = rnd(20) ? 1 + rnd(m->ps * 3) : rnd(2) * m->max_len;
			old[i] = ids[i] < m->max_seqs ? m->seqs[ids[i]].len : 0;
		}
		if (!rnd(10))
			flags |= KVMM_EXTEND_RESERVE;
		if (!rnd(10))
			flags |= KVMM_EXTEND_NORECLAIM;
		got = kvmm_seq_extend_batch(d->ctx, ids, ns3, cnt, flags);
		want = m_extend(m, ids, ns3, cnt, flags);
		compare(d, "extend", got, want);
		if (!got && !want)
			for (i = 0; i < cnt; i++)
				kv_compute(d, ids[i], old[i], m->seqs[ids[i]].len);
	} else if (r < 60) {			/* commit */
		id = pick_open(d, false, true);
		if (id == UINT32_MAX)
			return;
		n = rnd(10) ? 1 + rnd(m->seqs[id].len) : m->seqs[id].len + 1;
		got = kvmm_seq_commit(d->ctx, id, m->seqs[id].tok, n);
		want = m_commit(m, id, n);
		compare(d, "commit", got, want);
	} else if (r < 75) {			/* close (< 70), retract */
		bool close = r < 70;

		id = rnd(12) ? pick_open(d, false, false) : rnd(m->max_seqs + 1);
		if (id == UINT32_MAX)
			return;
		n = id < m->max_seqs && m->seqs[id].open ? rnd(m->seqs[id].len + 1) : 0;
		if (close) {
			got = kvmm_seq_close(d->ctx, id, n ? m->seqs[id].tok : NULL, n);
			want = m_finish(m, id, n, true);
		} else {
			got = kvmm_seq_retract(d->ctx, id, n ? m->seqs[id].tok : NULL, n);
			want = m_finish(m, id, n, false);
		}
		compare(d, close ? "close" : "retract", got, want);
	} else if (r < 79) {			/* pin or unpin */
		if (d->npins && rnd(2)) {
			uint32_t k = rnd(d->npins);

			ns = d->pins[k].ns;
			t = d->pins[k].t;
			n = d->pins[k].n;
			got = kvmm_prefix_unpin(d->ctx, ns, d->templ[t], n);
			want = m_unpin(m, ns, d->templ[t], n);
			compare(d, "unpin", got, want);
			if (got >= 0)
				d->pins[k] = d->pins[--d->npins];
		} else {
			ns = rnd(2);
			t = rnd(NTEMPL);
			n = 1 + rnd(m->max_len);
			got = kvmm_prefix_pin(d->ctx, ns, d->templ[t], n);
			want = m_pin(m, ns, d->templ[t], n);
			compare(d, "pin", got, want);
			if (got > 0 && d->npins < 64)
				d->pins[d->npins++] = (typeof(d->pins[0])){ ns, t, n };
			else if (got > 0)	/* no room to remember it: undo */
				compare(d, "unpin", kvmm_prefix_unpin(d->ctx, ns, d->templ[t], n),
					m_unpin(m, ns, d->templ[t], n));
		}
	} else if (r < 82) {			/* priority */
		ns = rnd(2);
		t = rnd(NTEMPL);
		n = 1 + rnd(m->max_len);
		uint32_t prio = rnd(KVMM_NR_PRIO + 1);

		got = kvmm_prefix_set_prio(d->ctx, ns, d->templ[t], n, prio);
		want = m_set_prio(m, ns, d->templ[t], n, prio);
		compare(d, "set_prio", got, want);
	} else if (r < 86) {			/* reclaim */
		n = rnd(3 * m->ps + 4);
		got = (long)kvmm_reclaim(d->ctx, n);
		want = n ? (long)m_shrink(m, n) : -EINVAL;
		compare(d, "reclaim", got, want);
	} else if (r < 87) {
		if (rnd(4))
			return;
		compare(d, "drop_caches", (long)kvmm_drop_caches(d->ctx),
			(long)m_shrink(m, UINT64_MAX));
	} else if (r < 88) {			/* policy */
		m->slru = rnd(2);
		compare(d, "set_evict_policy",
			kvmm_set_evict_policy(d->ctx, m->slru ? "slru" : "lru"), 0);
	} else if (r < 89) {			/* watermarks, valid or not */
		uint32_t a = rnd(4), b = a + rnd(4), c = b + rnd(6);

		if (!rnd(4))
			a = c + 1;
		got = kvmm_set_watermarks(d->ctx, a, b, c);
		want = a <= b && b <= c && c <= m->nr_pages ? 0 : -EINVAL;
		compare(d, "set_watermarks", got, want);
		if (!want) {
			m->wmin = a;
			m->wlow = b;
			m->whigh = c;
		}
	} else if (r < 95) {			/* lookup */
		ns = rnd(2);
		t = rnd(NTEMPL);
		n = rnd(m->max_len + 2);
		got = kvmm_prefix_lookup(d->ctx, ns, d->templ[t], n);
		want = m_lookup(m, ns, d->templ[t], n);
		compare(d, "lookup", got, want);
	} else {				/* an operation on a closed row */
		for (id = 0; id < m->max_seqs && m->seqs[id].open; id++)
			;
		if (id == m->max_seqs)
			id = m->max_seqs + rnd(3);
		n = 1 + rnd(4);
		compare(d, "match on closed", kvmm_seq_match(d->ctx, id, d->templ[0], n),
			-EINVAL);
		compare(d, "commit on closed", kvmm_seq_commit(d->ctx, id, d->templ[0], n),
			-EINVAL);
		compare(d, "close on closed", kvmm_seq_close(d->ctx, id, NULL, 0), -EINVAL);
	}
}

static unsigned long ops_per_config(void)
{
	const char *e = getenv("KVMM_DIFF_OPS");

	return e ? strtoul(e, NULL, 10) : 170000;
}

static void run_config(uint32_t ps, uint32_t nr_pages, uint32_t max_seqs,
		       uint32_t max_len, uint64_t seed)
{
	struct diff *d = calloc(1, sizeof(*d));
	struct kvmm_params p = test_params(ps, nr_pages, max_seqs, max_len);
	unsigned long nops = ops_per_config();
	uint32_t i, j;
	int k;

	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	rnd_state = seed;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &d->ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_kv_layer(d->ctx, 0, &d->kv), 0);
	CU_ASSERT_EQUAL_FATAL(d->kv.slot_bytes, sizeof(uint64_t));
	kvmm_seq_table(d->ctx, &d->table);
	d->m = (struct model){ .ps = ps, .nr_pages = nr_pages, .max_seqs = max_seqs,
			       .max_len = max_len, .free = nr_pages };
	for (i = 0; i < max_seqs; i++)
		d->m.seqs[i].next_free = i + 1 < max_seqs ? i + 1 : UINT32_MAX;
	/* templates share prefixes with each other, at random points */
	for (i = 0; i < NTEMPL; i++) {
		for (j = 0; j < max_len; j++)
			d->templ[i][j] = rnd(1000);
		if (i) {
			uint32_t keep = rnd(max_len);

			memcpy(d->templ[i], d->templ[rnd(i)], keep * sizeof(uint32_t));
		}
	}
	for (d->op = 0; d->op < nops && !d->mismatches; d->op++) {
		step(d);
		verify(d);
	}
	if (d->mismatches)
		fprintf(stderr, "diff: page size %u, %u pages: %lu mismatches\n",
			ps, nr_pages, d->mismatches);
	CU_ASSERT_EQUAL(d->mismatches, 0);
	CU_ASSERT(d->op >= nops);
	kvmm_destroy(d->ctx);
	for (k = 0; k < d->m.nruns; k++)
		free(d->m.runs[k].tok);
	free(d->m.runs);
	free(d);
}

static void diff_page_size_1(void)	{ run_config(1, 48, 6, 32, 1); }
static void diff_page_size_1_roomy(void)	{ run_config(1, 160, 8, 64, 2); }
static void diff_page_size_2(void)	{ run_config(2, 40, 6, 48, 3); }
static void diff_page_size_4(void)	{ run_config(4, 24, 5, 64, 4); }
static void diff_page_size_8(void)	{ run_config(8, 20, 6, 64, 5); }
static void diff_page_size_16(void)	{ run_config(16, 12, 4, 128, 6); }

int register_diff_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_diff", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, diff_page_size_1);
	ADD_TEST(s, diff_page_size_1_roomy);
	ADD_TEST(s, diff_page_size_2);
	ADD_TEST(s, diff_page_size_4);
	ADD_TEST(s, diff_page_size_8);
	ADD_TEST(s, diff_page_size_16);
	return 0;
}
