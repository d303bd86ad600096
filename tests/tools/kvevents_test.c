// SPDX-License-Identifier: MIT
/*
 * tests/tools/kvevents_test.c - kvmm_kvevents: the KV events publisher
 * (tools/lib/kvevents.c) fed EVENTS outputs made here, its messages read
 * back through its replay socket and decoded with msgpack-c.  With
 * stored_tokens only STORED events carry token ids: the publisher keeps
 * each page's from then on, and the BlockStored a demotion sends carries
 * them; a page it never saw stored cannot be named and is counted.
 * Messages are built in the replay buffer's chunks, which are reused:
 * a replay after the buffer wrapped around returns exactly the messages
 * subscribers were sent.  A publisher offers its CPU every yield_pages
 * pages and sends the same messages; its thread, sharing its one CPU
 * with a thread that never sleeps, still publishes everything.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

static void setup_params(struct fixture *f, struct kvev_params p)
{
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

static void setup(struct fixture *f, bool stored_tokens)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				 .stored_tokens = stored_tokens, .index_hashes = true };

	setup_params(f, p);
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

/* ---- the replay buffer's chunks, and the tables, under a long stream ---- */

/* A subscriber of @f's PUB socket that has seen a message (no slow joiner left). */
static void *subscribe(struct fixture *f)
{
	void *sub = zmq_socket(f->zctx, ZMQ_SUB);
	int zero = 0, timeo = 10000, i;
	uint32_t tok[PS] = { 1, 2, 3, 4 };
	struct evout o;

	CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
	zmq_setsockopt(sub, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeo, sizeof(timeo));
	zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	CU_ASSERT_FATAL(zmq_connect(sub, f->pub) == 0);
	/* a message at a time until one arrives: then every later one does */
	for (i = 0; i < 200; i++) {
		zmq_pollitem_t it = { .socket = sub, .events = ZMQ_POLLIN };

		evout_init(&o);
		evout_add(&o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE,
			  1000000 + (uint64_t)i, 0, 1, tok);
		CU_ASSERT_EQUAL_FATAL(kvev_publish(f->ev, (const void *)o.buf), 0);
		if (zmq_poll(&it, 1, 50) > 0)
			break;
	}
	CU_ASSERT_FATAL(i < 200);
	return sub;
}

/* The next message @sub gets: its sequence number, and its payload (malloc'd). */
static uint64_t sub_recv(void *sub, char **data, size_t *len)
{
	zmq_msg_t m;
	uint8_t seq[8];
	uint64_t s = 0;
	int i;

	CU_ASSERT_FATAL(zmq_recv(sub, seq, 0, 0) >= 0);		/* the topic */
	CU_ASSERT_FATAL(zmq_recv(sub, seq, sizeof(seq), 0) == 8);
	for (i = 0; i < 8; i++)
		s = s << 8 | seq[i];
	zmq_msg_init(&m);
	CU_ASSERT_FATAL(zmq_msg_recv(&m, sub, 0) >= 0);
	*len = zmq_msg_size(&m);
	*data = malloc(*len ? *len : 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(*data);
	memcpy(*data, zmq_msg_data(&m), *len);
	zmq_msg_close(&m);
	return s;
}

/*
 * Ask for a replay from @start: each message must be byte for byte the
 * one subscribers got under its sequence number (@sent, @sent_len, @nsent
 * of them).  Return: the messages replayed, the first's number in @first.
 */
static uint32_t replay_matches(struct fixture *f, uint64_t start, char *const *sent,
			       const size_t *sent_len, uint64_t nsent, uint64_t *first)
{
	uint8_t sb[8];
	uint32_t n = 0;
	int i;

	for (i = 0; i < 8; i++)
		sb[i] = (uint8_t)(start >> (56 - 8 * i));
	CU_ASSERT(zmq_send(f->dealer, "", 0, ZMQ_SNDMORE) == 0);
	CU_ASSERT(zmq_send(f->dealer, sb, 8, 0) == 8);
	CU_ASSERT_EQUAL(kvev_serve_replay(f->ev, 5000), 1);
	for (;;) {
		char topic[128];
		uint8_t seq[8];
		uint64_t s = 0;
		zmq_msg_t m;

		CU_ASSERT_FATAL(zmq_recv(f->dealer, topic, 0, 0) == 0);	/* "" */
		zmq_recv(f->dealer, topic, sizeof(topic), 0);
		CU_ASSERT_FATAL(zmq_recv(f->dealer, seq, 8, 0) == 8);
		for (i = 0; i < 8; i++)
			s = s << 8 | seq[i];
		zmq_msg_init(&m);
		CU_ASSERT_FATAL(zmq_msg_recv(&m, f->dealer, 0) >= 0);
		if (!zmq_msg_size(&m)) {
			zmq_msg_close(&m);
			return n;	/* the end marker */
		}
		if (!n)
			*first = s;
		CU_ASSERT_FATAL(s < nsent && sent[s]);
		CU_ASSERT(zmq_msg_size(&m) == sent_len[s] &&
			  !memcmp(zmq_msg_data(&m), sent[s], sent_len[s]));
		zmq_msg_close(&m);
		n++;
	}
}

/* An EVENTS output of @nev STORED events of @pages first pages each, keyed from @key0. */
static void *stored_batch(uint32_t nev, uint32_t pages, uint64_t key0)
{
	size_t ev_bytes = sizeof(struct kvmm_cache_event) + pages * sizeof(struct kvmm_key) +
			  (((size_t)pages * PS * 4 + 15) & ~(size_t)15);
	struct kvmm_events_hdr *h = aligned_alloc(16, sizeof(*h) + nev * ev_bytes);
	char *p = (char *)(h + 1);
	uint32_t i, j, t;

	CU_ASSERT_PTR_NOT_NULL_FATAL(h);
	memset(h, 0, sizeof(*h) + nev * ev_bytes);
	for (i = 0; i < nev; i++) {
		struct kvmm_cache_event e = { .type = KVMM_EVENT_STORED, .pages = pages, .seq = i };
		uint32_t *tok;

		memcpy(p, &e, sizeof(e));
		for (j = 0; j < pages; j++) {
			struct kvmm_key k = { key0 + (uint64_t)i * pages + j, 7 };

			memcpy(p + sizeof(e) + j * sizeof(k), &k, sizeof(k));
		}
		tok = (uint32_t *)(p + sizeof(e) + pages * sizeof(struct kvmm_key));
		for (t = 0; t < pages * PS; t++)	/* ids of every length msgpack has */
			tok[t] = (uint32_t)((key0 + i * 131u + t) * 2654435761u) >> (t % 4 * 8);
		p += ev_bytes;
		h->nr++;
	}
	h->bytes = (uint32_t)(p - (char *)(h + 1));
	h->next = nev;
	return h;
}

/*
 * Messages of a few KiB to a few MiB, built in the replay buffer's
 * chunks (one made ready, others taken as needed and given back as the
 * 6-message buffer lets messages go, so that later messages are built
 * over earlier ones): a replay after the buffer wrapped around many
 * times returns exactly the messages subscribers were sent.
 */
static void kvevents_replay_after_wraparound_is_exact(void)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				 .buffer_steps = 6, .prepare_bytes = 1 };
	enum { NMSG = 40, NSEQ = NMSG + 256 };
	char **sent = calloc(NSEQ, sizeof(*sent));
	size_t *sent_len = calloc(NSEQ, sizeof(*sent_len));
	uint64_t first = 0, s, k0 = 1;
	struct kvev_stats st;
	struct fixture f;
	void *sub;
	uint32_t i;

	CU_ASSERT_FATAL(sent && sent_len);
	setup_params(&f, p);
	sub = subscribe(&f);
	for (i = 0; i < NMSG; i++) {
		/* 1 to 800 events of 64 pages: 3 KiB to 2.3 MiB a message */
		uint32_t nev = i % 5 == 3 ? 800 : (i * 7919u) % 300 + 1;
		void *batch = stored_batch(nev, 64, k0);

		k0 += (uint64_t)nev * 64;
		CU_ASSERT_EQUAL_FATAL(kvev_publish(f.ev, batch), 0);
		free(batch);
	}
	kvev_get_stats(f.ev, &st);
	CU_ASSERT_EQUAL(st.unnamed, 0);
	CU_ASSERT_FATAL(st.messages >= NMSG && st.messages < NSEQ);
	do {	/* the probe that came through, then every message */
		char *data;
		size_t len;

		s = sub_recv(sub, &data, &len);
		CU_ASSERT_FATAL(s < NSEQ && !sent[s]);
		sent[s] = data;
		sent_len[s] = len;
	} while (s < st.messages - 1);
	/* everything from 0: the 6 kept, the newest */
	CU_ASSERT_EQUAL(replay_matches(&f, 0, sent, sent_len, st.messages, &first), 6);
	CU_ASSERT_EQUAL(first, st.messages - 6);
	CU_ASSERT_EQUAL(replay_matches(&f, st.messages - 2, sent, sent_len, st.messages, &first),
			2);
	CU_ASSERT_EQUAL(first, st.messages - 2);
	for (i = 0; i < NSEQ; i++)
		free(sent[i]);
	free(sent);
	free(sent_len);
	zmq_close(sub);
	teardown(&f);
}

/*
 * A publisher made for 100 pages takes thousands: its tables grow while
 * events whose parent and pages it holds are published, and every
 * BlockStored still names the block before it as its parent; a demotion
 * of them all sends the hashes and token ids they were stored with.
 */
static void kvevents_tables_grow_past_their_made_size(void)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				 .stored_tokens = true, .index_hashes = true, .pages = 100 };
	enum { CHAIN = 3000, PER = 100, MOVE = 50 };
	uint8_t (*want)[32] = malloc(CHAIN * sizeof(*want));
	uint32_t (*tok)[PS] = malloc(CHAIN * sizeof(*tok));
	uint32_t i, j, lookup[KVMM_NR_TIERS], blocks = 0, moved = 0;
	struct evout *o = malloc(sizeof(*o));
	struct kvev_stats st;
	struct fixture f;
	uint64_t s;
	void *sub;

	CU_ASSERT_FATAL(want && tok && o);
	setup_params(&f, p);
	for (i = 0; i < CHAIN; i++) {
		for (j = 0; j < PS; j++)
			tok[i][j] = i * PS + j;
		kvev_block_hash(f.ev, i ? want[i - 1] : NULL, tok[i], want[i]);
	}
	sub = subscribe(&f);
	/* a chain, one page an event, each under the one before */
	for (i = 0; i < CHAIN; i += PER) {
		evout_init(o);
		for (j = i; j < i + PER; j++)
			evout_add(o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE,
				  10 + j, j ? 10 + j - 1 : 0, 1, tok[j]);
		CU_ASSERT_EQUAL_FATAL(kvev_publish(f.ev, (const void *)o->buf), 0);
	}
	/* then all of it to the host tier, MOVE pages an event */
	for (i = 0; i < CHAIN; i += MOVE) {
		evout_init(o);
		evout_add(o, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 10 + i,
			  i ? 10 + i - 1 : 0, MOVE, NULL);
		CU_ASSERT_EQUAL_FATAL(kvev_publish(f.ev, (const void *)o->buf), 0);
	}
	kvev_get_stats(f.ev, &st);
	CU_ASSERT_EQUAL(st.unnamed, 0);

	do {	/* every message as subscribers got it, after the probe */
		const msgpack_object *evs;
		msgpack_unpacked u;
		char *data;
		size_t len;

		s = sub_recv(sub, &data, &len);
		msgpack_unpacked_init(&u);
		CU_ASSERT_FATAL(msgpack_unpack_next(&u, data, len, NULL) == MSGPACK_UNPACK_SUCCESS);
		evs = &u.data.via.array.ptr[1];
		for (i = 0; i < evs->via.array.size; i++) {
			const msgpack_object *e = &evs->via.array.ptr[i];
			const msgpack_object *t = map_get(e, "type"), *h = map_get(e, "block_hashes");
			const msgpack_object *par = map_get(e, "parent_block_hash");
			const msgpack_object *md = map_get(e, "medium"), *tk = map_get(e, "token_ids");
			uint32_t b;

			if (t->via.str.size != 11 || memcmp(t->via.str.ptr, "BlockStored", 11))
				continue;
			if (!memcmp(md->via.str.ptr, "GPU", 3)) {
				if (tk->via.array.ptr[0].via.u64 == 1)	/* the probe's */
					continue;
				CU_ASSERT_FATAL(blocks < CHAIN && h->via.array.size == 1);
				b = blocks++;
				CU_ASSERT(!memcmp(h->via.array.ptr[0].via.bin.ptr, want[b], 32));
				CU_ASSERT(b ? par->type == MSGPACK_OBJECT_BIN &&
					      !memcmp(par->via.bin.ptr, want[b - 1], 32) :
					      par->type == MSGPACK_OBJECT_NIL);
				continue;
			}
			CU_ASSERT_FATAL(moved < CHAIN && h->via.array.size == MOVE &&
					tk->via.array.size == MOVE * PS);
			for (j = 0; j < MOVE; j++)
				CU_ASSERT(!memcmp(h->via.array.ptr[j].via.bin.ptr, want[moved + j], 32));
			for (j = 0; j < MOVE * PS; j++)
				CU_ASSERT_EQUAL(tk->via.array.ptr[j].via.u64,
						tok[moved + j / PS][j % PS]);
			moved += MOVE;
		}
		msgpack_unpacked_destroy(&u);
		free(data);
	} while (s < st.messages - 1);
	CU_ASSERT_EQUAL(blocks, CHAIN);
	CU_ASSERT_EQUAL(moved, CHAIN);
	CU_ASSERT_EQUAL(kvev_lookup(f.ev, 0, &want[0][0], CHAIN, lookup), CHAIN);
	CU_ASSERT_EQUAL(lookup[KVMM_TIER_HOST], CHAIN * PS);
	zmq_close(sub);
	free(o);
	free(tok);
	free(want);
	teardown(&f);
}

/* Without index_hashes the publisher keeps no index: kvev_lookup() finds nothing. */
static void kvevents_lookup_without_index_finds_nothing(void)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS };
	uint32_t tok[PS] = { 1, 2, 3, 4 }, lookup[KVMM_NR_TIERS] = { 1, 1, 1 };
	struct kvev_stats st;
	struct msg_seen m[2];
	uint8_t want[32];
	struct fixture f;
	struct evout o;

	setup_params(&f, p);
	kvev_block_hash(f.ev, NULL, tok, want);
	evout_init(&o);
	evout_add(&o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE, 100, 0, 1, tok);
	CU_ASSERT_EQUAL(kvev_publish(f.ev, (const void *)o.buf), 0);
	CU_ASSERT_EQUAL(kvev_lookup(f.ev, 0, want, 1, lookup), 0);
	CU_ASSERT_EQUAL(lookup[KVMM_TIER_DEVICE], 0);
	CU_ASSERT_EQUAL(lookup[KVMM_TIER_HOST], 0);
	kvev_get_stats(f.ev, &st);
	CU_ASSERT_EQUAL(st.stored, 1);
	CU_ASSERT_EQUAL_FATAL(replay(f.ev, f.dealer, 0, m, 2), 1);
	CU_ASSERT(!memcmp(m[0].hash0[0], want, 32));
	teardown(&f);
}
/*
 * With yield_pages a publisher offers its CPU once per that many pages
 * (counted across events and calls), and sends exactly the messages one
 * without it sends.
 */
static void kvevents_publish_offers_the_cpu_every_yield_pages(void)
{
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				 .stored_tokens = true, .yield_pages = 4 };
	uint32_t tok[3 * PS], i, j;
	struct msg_seen m[2][12];
	struct kvev_stats st[2];
	struct fixture f[2];
	struct evout o;

	for (i = 0; i < 3 * PS; i++)
		tok[i] = 500 + i;
	setup_params(&f[0], p);
	p.yield_pages = 0;
	setup_params(&f[1], p);
	for (j = 0; j < 2; j++) {
		/* ten events of three pages, each its own call: one offer per 4 pages or more */
		for (i = 0; i < 10; i++) {
			evout_init(&o);
			evout_add(&o, KVMM_EVENT_STORED, KVMM_TIER_DEVICE, KVMM_TIER_DEVICE,
				  100 + 3 * i, i ? 100 + 3 * i - 1 : 0, 3, tok);
			CU_ASSERT_EQUAL(kvev_publish(f[j].ev, (const void *)o.buf), 0);
		}
		evout_init(&o);
		evout_add(&o, KVMM_EVENT_DEMOTED, KVMM_TIER_DEVICE, KVMM_TIER_HOST, 100, 0, 3, NULL);
		CU_ASSERT_EQUAL(kvev_publish(f[j].ev, (const void *)o.buf), 0);
		kvev_get_stats(f[j].ev, &st[j]);
		CU_ASSERT_EQUAL_FATAL(replay(f[j].ev, f[j].dealer, 0, m[j], 12), 11);
	}
	CU_ASSERT_EQUAL(st[0].yields, 5);	/* 3+3, 3+3, ... then 3+3 with the demotion */
	CU_ASSERT_EQUAL(st[1].yields, 0);
	CU_ASSERT_EQUAL(st[0].messages, st[1].messages);
	CU_ASSERT_EQUAL(st[0].stored, st[1].stored);
	CU_ASSERT_EQUAL(st[0].removed, st[1].removed);
	CU_ASSERT(!memcmp(m[0], m[1], 11 * sizeof(m[0][0])));
	teardown(&f[0]);
	teardown(&f[1]);
}

static atomic_bool spin_on;

/* A thread of the engine that never sleeps. */
static void *spinner(void *arg)
{
	(void)arg;
	while (atomic_load_explicit(&spin_on, memory_order_relaxed))
		;
	return NULL;
}

/*
 * The publisher's thread and one that never sleeps share one CPU: the
 * publisher, offering its CPU every few pages, still publishes every
 * page of every prompt cached meanwhile, unprompted (its stop, which
 * publishes what is left itself, comes after), and offered its CPU.
 */
static void kvevents_thread_keeps_up_beside_a_busy_core(void)
{
	enum { PROMPTS = 24, LEN = 64 };	/* pages of 4 tokens: 16 a prompt */
	struct kvmm_ctx *ctx = test_ctx(PS, 4096, 8, 1024);
	char dir[] = "/tmp/kvmm-kvev-XXXXXX", ep[96];
	struct kvev_params p = { .hash = KVEV_HASH_SHA256_CBOR, .index_hashes = true,
				 .yield_pages = 8 };
	uint8_t (*want)[32] = malloc(LEN / PS * 32);
	uint32_t tok[LEN], tiers[KVMM_NR_TIERS], i, got = 0;
	cpu_set_t mask, one;
	struct kvev_thread *t;
	struct kvev_stats st;
	struct kvev_params namer_p = { .hash = KVEV_HASH_SHA256_CBOR, .page_size = PS,
				       .endpoint = "inproc://namer" };
	struct kvev *namer;
	pthread_t spin;
	int cpu = sched_getcpu(), ret;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	CU_ASSERT_PTR_NOT_NULL_FATAL(want);
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(ep, sizeof(ep), "ipc://%s/pub", dir);
	p.endpoint = ep;
	/* the last prompt's blocks, named by a publisher of the same hash */
	CU_ASSERT_EQUAL_FATAL(kvev_create(&namer_p, &namer), 0);
	for (i = 0; i < PROMPTS; i++)
		test_tokens(tok, LEN, 1000 + i);	/* the last one stays in @tok */
	for (i = 0; i < LEN / PS; i++)
		kvev_block_hash(namer, i ? want[i - 1] : NULL, tok + i * PS, want[i]);
	kvev_destroy(namer);

	/* this thread, the spinner and the publisher (they inherit it) on one CPU */
	CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof(mask), &mask), 0);
	CPU_ZERO(&one);
	CPU_SET(cpu < 0 ? 0 : cpu, &one);
	CU_ASSERT_EQUAL_FATAL(sched_setaffinity(0, sizeof(one), &one), 0);
	atomic_store(&spin_on, true);
	ret = -pthread_create(&spin, NULL, spinner, NULL);
	CU_ASSERT_EQUAL(ret, 0);
	if (!ret) {
		ret = kvev_thread_start(ctx, &p, 1u << 20, 2, &t);
		CU_ASSERT_EQUAL(ret, 0);
		if (ret) {
			atomic_store(&spin_on, false);
			pthread_join(spin, NULL);
		}
	}
	for (i = 0; !ret && i < PROMPTS; i++) {
		test_tokens(tok, LEN, 1000 + i);
		kvmm_lock(ctx);
		CU_ASSERT_EQUAL(test_cache(ctx, 0, tok, LEN), 0);
		CU_ASSERT_EQUAL(kvmm_check(ctx), 0);
		kvmm_unlock(ctx);
	}
	/* a deadline far past any delay, for a loaded machine: it is not a timing test */
	for (i = 0; !ret && i < 3000 && got < LEN / PS; i++) {
		got = kvev_lookup(kvev_thread_publisher(t), 0, &want[0][0], LEN / PS, tiers);
		if (got < LEN / PS)
			usleep(10000);
	}
	CU_ASSERT_EQUAL(got, LEN / PS);
	CU_ASSERT_EQUAL(tiers[KVMM_TIER_DEVICE], LEN);

	/* the spinner stops and the CPUs come back whatever happened above */
	if (!ret) {
		atomic_store(&spin_on, false);
		pthread_join(spin, NULL);
	}
	CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof(mask), &mask), 0);
	if (!ret) {
		CU_ASSERT_EQUAL(kvev_thread_stop(t, &st), 0);
		CU_ASSERT_EQUAL(st.stored, PROMPTS);
		CU_ASSERT_EQUAL(st.lost, 0);
		CU_ASSERT_EQUAL(st.unnamed, 0);
		/* each prompt's pages are one event of more than yield_pages: an offer each */
		CU_ASSERT_EQUAL(st.yields, st.stored);
	}
	kvmm_destroy(ctx);
	snprintf(ep, sizeof(ep), "%s/pub", dir);
	unlink(ep);
	rmdir(dir);
	free(want);
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
	ADD_TEST(s, kvevents_replay_after_wraparound_is_exact);
	ADD_TEST(s, kvevents_tables_grow_past_their_made_size);
	ADD_TEST(s, kvevents_lookup_without_index_finds_nothing);
	ADD_TEST(s, kvevents_publish_offers_the_cpu_every_yield_pages);
	ADD_TEST(s, kvevents_thread_keeps_up_beside_a_busy_core);
#else
	fprintf(stderr, "kvmm_kvevents: built without libzmq, msgpack-c or libcrypto\n");
#endif
	return 0;
}
