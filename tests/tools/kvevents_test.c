// SPDX-License-Identifier: MIT
/*
 * tests/tools/kvevents_test.c - kvmm_kvevents: the KV events publisher
 * (tools/lib/kvevents.c) fed EVENTS outputs made here, its messages read
 * back through its replay socket and decoded with msgpack-c.  With
 * stored_tokens only STORED events carry token ids: the publisher keeps
 * each page's from then on, and the BlockStored a demotion sends carries
 * them; a page it never saw stored cannot be named and is counted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <autoconf.h>

#include "../helpers.h"

#if CONFIG_KVMM_KVEVENTS
#include <msgpack.h>
#include <zmq.h>

#include "../../tools/lib/kvevents.h"

#define PS	4

/* An EVENTS output being made: the header, then events. */
struct evout {
	uint64_t buf[1024];
	size_t len;
};

static void evout_init(struct evout *o)
{
	memset(o, 0, sizeof(*o));
	o->len = sizeof(struct kvmm_events_hdr);
}

/* One event of @pages pages keyed @key0, @key0 + 1, ...; @tok: NULL for none. */
static void evout_add(struct evout *o, uint8_t type, uint8_t tier, uint8_t to,
		      uint64_t key0, uint64_t parent, uint32_t pages, const uint32_t *tok)
{
	struct kvmm_events_hdr *h = (struct kvmm_events_hdr *)o->buf;
	struct kvmm_cache_event e = {
		.type = type, .tier = tier, .to = to, .pages = pages,
		.parent = { parent, parent },
	};
	char *p = (char *)o->buf + o->len;
	uint32_t i;

	e.seq = h->next;
	memcpy(p, &e, sizeof(e));
	p += sizeof(e);
	for (i = 0; i < pages; i++) {
		struct kvmm_key k = { key0 + i, key0 + i };

		memcpy(p, &k, sizeof(k));
		p += sizeof(k);
	}
	if (tok) {
		memcpy(p, tok, (size_t)pages * PS * sizeof(*tok));
		p += ((size_t)pages * PS * sizeof(*tok) + 15) & ~(size_t)15;
	}
	h->bytes += (uint32_t)(p - ((char *)o->buf + o->len));
	h->nr++;
	h->next++;
	o->len = (size_t)(p - (char *)o->buf);
}

/* The value under @key in msgpack map @m, or NULL. */
static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
	uint32_t i;

	if (m->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (i = 0; i < m->via.map.size; i++) {
		const msgpack_object_kv *kv = &m->via.map.ptr[i];

		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
		    !memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size))
			return &kv->val;
	}
	return NULL;
}

/* What one message said: its events' types, media, first hashes and tokens. */
struct msg_seen {
	uint32_t nev;
	char type[4][16];
	char medium[4][16];
	uint8_t hash0[4][32];
	uint32_t ntok[4];
	uint32_t tok[4][16];
};

static void decode(const char *data, size_t len, struct msg_seen *m)
{
	msgpack_unpacked u;
	const msgpack_object *evs;
	uint32_t i, j;

	memset(m, 0, sizeof(*m));
	msgpack_unpacked_init(&u);
	CU_ASSERT_FATAL(msgpack_unpack_next(&u, data, len, NULL) == MSGPACK_UNPACK_SUCCESS);
	CU_ASSERT_FATAL(u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3);
	evs = &u.data.via.array.ptr[1];
	CU_ASSERT_FATAL(evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size <= 4);
	m->nev = evs->via.array.size;
	for (i = 0; i < m->nev; i++) {
		const msgpack_object *e = &evs->via.array.ptr[i];
		const msgpack_object *t = map_get(e, "type"), *md = map_get(e, "medium");
		const msgpack_object *h = map_get(e, "block_hashes"), *tk = map_get(e, "token_ids");

		CU_ASSERT_FATAL(t && md && h && h->type == MSGPACK_OBJECT_ARRAY);
		memcpy(m->type[i], t->via.str.ptr, t->via.str.size < 15 ? t->via.str.size : 15);
		memcpy(m->medium[i], md->via.str.ptr, md->via.str.size < 15 ? md->via.str.size : 15);
		if (h->via.array.size && h->via.array.ptr[0].type == MSGPACK_OBJECT_BIN)
			memcpy(m->hash0[i], h->via.array.ptr[0].via.bin.ptr,
			       h->via.array.ptr[0].via.bin.size);
		if (!tk)
			continue;
		CU_ASSERT_FATAL(tk->type == MSGPACK_OBJECT_ARRAY && tk->via.array.size <= 16);
		m->ntok[i] = tk->via.array.size;
		for (j = 0; j < m->ntok[i]; j++)
			m->tok[i][j] = (uint32_t)tk->via.array.ptr[j].via.u64;
	}
	msgpack_unpacked_destroy(&u);
}

/* Ask @ev's replay socket for every message from @start; decode each into @m. */
static uint32_t replay(struct kvev *ev, void *dealer, uint64_t start, struct msg_seen *m,
		       uint32_t max)
{
	uint8_t sb[8];
	uint32_t n = 0;
	int i;

	for (i = 0; i < 8; i++)
		sb[i] = (uint8_t)(start >> (56 - 8 * i));
	CU_ASSERT(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
	CU_ASSERT(zmq_send(dealer, sb, 8, 0) == 8);
	CU_ASSERT_EQUAL(kvev_serve_replay(ev, 5000), 1);
	for (;;) {
		char payload[8192], topic[128];
		uint8_t seq[8];
		int len;

		CU_ASSERT_FATAL(zmq_recv(dealer, topic, 0, 0) == 0);	/* "" */
		zmq_recv(dealer, topic, sizeof(topic), 0);
		CU_ASSERT_FATAL(zmq_recv(dealer, seq, 8, 0) == 8);
		len = zmq_recv(dealer, payload, sizeof(payload), 0);
		CU_ASSERT_FATAL(len >= 0 && len < (int)sizeof(payload));
		if (!len)
			return n;	/* the end marker */
		CU_ASSERT_FATAL(n < max);
		decode(payload, (size_t)len, &m[n++]);
	}
}

struct fixture {
	char dir[64];
	char pub[96], rep[96];
	struct kvev *ev;
	void *zctx, *dealer;
};

static void setup(struct fixture *f, bool stored_tokens)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				 .stored_tokens = stored_tokens };

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvmm-kvev-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(f->dir));
	snprintf(f->pub, sizeof(f->pub), "ipc://%s/pub", f->dir);
	snprintf(f->rep, sizeof(f->rep), "ipc://%s/rep", f->dir);
	p.endpoint = f->pub;
	p.replay = f->rep;
	CU_ASSERT_EQUAL_FATAL(kvev_create(&p, &f->ev), 0);
	f->zctx = zmq_ctx_new();
	f->dealer = zmq_socket(f->zctx, ZMQ_DEALER);
	CU_ASSERT_FATAL(f->dealer && zmq_connect(f->dealer, f->rep) == 0);
}

static void teardown(struct fixture *f)
{
	char path[128];
	int linger = 0;

	zmq_setsockopt(f->dealer, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_close(f->dealer);
	zmq_ctx_term(f->zctx);
	kvev_destroy(f->ev);
	snprintf(path, sizeof(path), "%s/pub", f->dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/rep", f->dir);
	unlink(path);
	rmdir(f->dir);
}

/*
 * Stored (with token ids), demoted (without): the demotion's BlockStored
 * on "CPU" carries the ids the STORED event gave, and the same hashes.
 * A demotion of a page never stored names nothing and is counted; a
 * removal forgets the pages (their ids too).
 */
static void kvevents_stored_tokens_name_moved_pages(void)
{
	uint32_t tok[2 * PS] = { 7, 8, 9, 10, 300, 301, 70000, 70001 }, lookup[KVMM_NR_TIERS];
	uint8_t want0[32], want1[32], hashes[64];
	struct kvev_stats st;
	struct msg_seen m[4];
	struct fixture f;
	struct evout o;
	uint32_t i;

	setup(&f, true);
	CU_ASSERT_EQUAL(kvev_block_hash(f.ev, NULL, tok, want0), 0);
	CU_ASSERT_EQUAL(kvev_block_hash(f.ev, want0, tok + PS, want1), 0);

	evout_init(&o);
	evout_add(&o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 100, 0, 2, tok);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	evout_init(&o);
	evout_add(&o, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 100, 0, 2, NULL);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	memcpy(hashes, want0, 32);
	memcpy(hashes + 32, want1, 32);
	CU_ASSERT_EQUAL(kvev_lookup(f.ev, 0, hashes, 2, lookup), 2);
	CU_ASSERT_EQUAL(lookup[KVMM_TIER_HOST], 2 * PS);
	evout_init(&o);		/* a page it never saw stored */
	evout_add(&o, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 900, 0, 1, NULL);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	evout_init(&o);
	evout_add(&o, KVMM_EVENT_REMOVED, KVMM_TIER_HOST, KVMM_TIER_HOST, 100, 0, 2, NULL);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	CU_ASSERT_EQUAL(kvev_lookup(f.ev, 0, hashes, 2, lookup), 0);

	kvev_get_stats(f.ev, &st);
	CU_ASSERT_EQUAL(st.messages, 3);
	CU_ASSERT_EQUAL(st.unnamed, 1);
	CU_ASSERT_EQUAL_FATAL(replay(f.ev, f.dealer, 0, m, 4), 3);
	CU_ASSERT_EQUAL(m[0].nev, 1);
	CU_ASSERT_STRING_EQUAL(m[0].type[0], "BlockStored");
	CU_ASSERT_STRING_EQUAL(m[0].medium[0], "GPU");
	CU_ASSERT(!memcmp(m[0].hash0[0], want0, 32));
	CU_ASSERT_EQUAL(m[1].nev, 2);
	CU_ASSERT_STRING_EQUAL(m[1].type[0], "BlockRemoved");
	CU_ASSERT_STRING_EQUAL(m[1].medium[0], "GPU");
	CU_ASSERT_STRING_EQUAL(m[1].type[1], "BlockStored");
	CU_ASSERT_STRING_EQUAL(m[1].medium[1], "CPU");
	CU_ASSERT(!memcmp(m[1].hash0[1], want0, 32));
	CU_ASSERT_EQUAL_FATAL(m[1].ntok[1], 2 * PS);
	for (i = 0; i < 2 * PS; i++)
		CU_ASSERT_EQUAL(m[1].tok[1][i], tok[i]);
	CU_ASSERT_EQUAL(m[2].nev, 1);
	CU_ASSERT_STRING_EQUAL(m[2].type[0], "BlockRemoved");
	CU_ASSERT_STRING_EQUAL(m[2].medium[0], "CPU");
	teardown(&f);
}

/* Without stored_tokens every event carries its token ids, as it is given them. */
static void kvevents_every_event_carries_tokens(void)
{
	uint32_t tok[PS] = { 1, 2, 3, 4 }, other[PS] = { 5, 6, 7, 8 };
	struct msg_seen m[4];
	struct fixture f;
	struct evout o;
	uint32_t i;

	setup(&f, false);
	evout_init(&o);
	evout_add(&o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 100, 0, 1, tok);
	/* a demotion's own ids are the ones it sends */
	evout_add(&o, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 100, 0, 1, other);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	CU_ASSERT_EQUAL_FATAL(replay(f.ev, f.dealer, 0, m, 4), 1);
	CU_ASSERT_EQUAL_FATAL(m[0].nev, 3);
	CU_ASSERT_STRING_EQUAL(m[0].type[2], "BlockStored");
	CU_ASSERT_EQUAL_FATAL(m[0].ntok[2], PS);
	for (i = 0; i < PS; i++)
		CU_ASSERT_EQUAL(m[0].tok[2][i], other[i]);
	teardown(&f);
}
#endif /* CONFIG_KVMM_KVEVENTS */

int register_kvevents_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_kvevents", NULL, NULL);

	if (!s)
		return -1;
#if CONFIG_KVMM_KVEVENTS
	ADD_TEST(s, kvevents_stored_tokens_name_moved_pages);
	ADD_TEST(s, kvevents_every_event_carries_tokens);
#else
	fprintf(stderr, "kvmm_kvevents: built without libzmq, msgpack-c or libcrypto\n");
#endif
	return 0;
}
