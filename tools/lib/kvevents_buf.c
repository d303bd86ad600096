// SPDX-License-Identifier: MIT
/*
 * tools/lib/kvevents_buf.c - the messages the KV events publisher builds,
 * sends and keeps for replay: the chunks they are built in (a pool of
 * huge pages), the message being built, and the replay socket's answers
 * (see the chunks' comment in kvevents_int.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include <zmq.h>

#include "kvevents_int.h"

/**
 * kvev_huge_alloc() - memory on huge pages where the kernel gives them
 * @bytes: in, the bytes wanted; out, rounded up to whole huge pages
 *
 * Allocated on a huge page's boundary and asked for huge pages (a hint:
 * small pages do too).
 *
 * Return: the memory, or NULL.
 */
void *kvev_huge_alloc(size_t *bytes)
{
	void *p;

	*bytes = (*bytes + HUGE_BYTES - 1) & ~(size_t)(HUGE_BYTES - 1);
	p = aligned_alloc(HUGE_BYTES, *bytes);
	if (p)
		madvise(p, *bytes, MADV_HUGEPAGE);
	return p;
}

/* A chunk with room for @size bytes (one huge page at least), not in the pool. */
static struct kvev_chunk *chunk_new(struct kvev_pool *pool, size_t size)
{
	size_t bytes = offsetof(struct kvev_chunk, data) + size;
	struct kvev_chunk *c;

	if (size > SIZE_MAX - 2 * CHUNK_BYTES)
		return NULL;
	c = kvev_huge_alloc(&bytes);
	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->pool = pool;
	c->size = bytes - offsetof(struct kvev_chunk, data);
	c->used = 0;
	return c;
}

/**
 * kvev_chunk_put() - let go of a chunk
 * @c: the chunk; its last holder gives it back to the pool, or frees it
 *
 * Context: takes the pool's lock (the publisher's thread, ZMQ's I/O thread).
 */
void kvev_chunk_put(struct kvev_chunk *c)
{
	struct kvev_pool *pool = c->pool;

	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_lock(&pool->lock);
	if (c->size == CHUNK_DATA && pool->nr < pool->max) {
		c->next = pool->free;
		pool->free = c;
		pool->nr++;
		c = NULL;
	}
	pthread_mutex_unlock(&pool->lock);
	free(c);
}

/* A chunk with room for @size bytes, from the pool where one is free. */
static struct kvev_chunk *chunk_get(struct kvev_pool *pool, size_t size)
{
	struct kvev_chunk *c = NULL;

	if (size <= CHUNK_DATA) {
		pthread_mutex_lock(&pool->lock);
		c = pool->free;
		if (c) {
			pool->free = c->next;
			pool->nr--;
		}
		pthread_mutex_unlock(&pool->lock);
	}
	if (!c)
		return chunk_new(pool, size);
	atomic_init(&c->refs, 1);
	c->used = 0;
	return c;
}

/**
 * kvev_pool_prepare() - make chunks ready in a pool
 * @pool: the pool
 * @nr: how many, each 4 KiB written once so that the kernel faults (and
 *	zeroes) it here; the most the pool keeps
 *
 * Return: 0 or -ENOMEM.
 */
int kvev_pool_prepare(struct kvev_pool *pool, uint32_t nr)
{
	uint32_t i;
	size_t off;

	pool->max = nr ? nr : 1;
	for (i = 0; i < nr; i++) {
		struct kvev_chunk *c = chunk_new(pool, CHUNK_DATA);

		if (!c)
			return -ENOMEM;
		for (off = 0; off < c->size; off += 4096)
			c->data[off] = 0;
		kvev_chunk_put(c);
	}
	return 0;
}

/** kvev_pool_drain() - free the chunks of @pool */
void kvev_pool_drain(struct kvev_pool *pool)
{
	while (pool->free) {
		struct kvev_chunk *c = pool->free;

		pool->free = c->next;
		free(c);
	}
	pool->nr = 0;
}

/* zmq_free_fn: ZMQ is done with a message sent from chunk @hint */
static void chunk_put_zmq(void *data, void *hint)
{
	(void)data;
	kvev_chunk_put(hint);
}

/**
 * kvev_buf_reserve() - room in the message being built
 * @ev: the publisher
 * @n: bytes wanted at ev->out.len
 *
 * Where the chunk being filled has none left, the message so far moves
 * to a new chunk (from the pool while it fits one; else one with room
 * for twice as much), and the publisher lets go of the old one (the
 * messages kept in it hold it still).
 *
 * Return: 0, or -ENOMEM (kept in out.err).
 */
int kvev_buf_reserve(struct kvev *ev, size_t n)
{
	struct kvev_buf *b = &ev->out;
	struct kvev_chunk *c;

	if (b->len + n <= b->cap)
		return 0;
	if (b->err)
		return b->err;
	c = chunk_get(&ev->pool, b->len + n <= CHUNK_DATA ? CHUNK_DATA : 2 * (b->len + n));
	if (!c)
		return b->err = -ENOMEM;
	if (b->data)
		memcpy(c->data, b->data, b->len);
	if (ev->chunk)
		kvev_chunk_put(ev->chunk);
	ev->chunk = c;
	b->data = c->data;
	b->cap = c->size;
	return 0;
}

/** kvev_buf_put() - @n bytes at @p onto @ev's message being built (failure: kept in out.err) */
void kvev_buf_put(struct kvev *ev, const void *p, size_t n)
{
	struct kvev_buf *b = &ev->out;

	if (kvev_buf_reserve(ev, n))
		return;
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

/* ---- sending, and replay ---- */

static void topic_of(const struct kvev *ev, uint32_t ns, char *buf)
{
	snprintf(buf, TOPIC_MAX, "%s/ns/%u/", ev->topic, ns);
}

/* @n frames, copied; @last: the flags of the last (ZMQ_SNDMORE: more follow) */
static int send_frames(void *sock, const void *const *f, const size_t *len, int n, int last)
{
	int i;

	for (i = 0; i < n; i++)
		if (zmq_send(sock, f[i], len[i], i < n - 1 ? ZMQ_SNDMORE : last) < 0)
			return -zmq_errno();
	return 0;
}

/* The last frame: message @m's bytes, sent from its chunk, which ZMQ holds till done. */
static int send_kept(void *sock, const struct kvev_msg *m)
{
	zmq_msg_t msg;

	atomic_fetch_add_explicit(&m->chunk->refs, 1, memory_order_relaxed);
	if (zmq_msg_init_data(&msg, (void *)m->data, m->len, chunk_put_zmq, m->chunk)) {
		atomic_fetch_sub_explicit(&m->chunk->refs, 1, memory_order_relaxed);
		return -zmq_errno();
	}
	if (zmq_msg_send(&msg, sock, 0) < 0) {
		int ret = -zmq_errno();

		zmq_msg_close(&msg);	/* lets go of the chunk */
		return ret;
	}
	return 0;
}

static void seq_bytes(uint64_t seq, uint8_t *b)
{
	int i;

	for (i = 0; i < 8; i++)
		b[i] = (uint8_t)(seq >> (56 - 8 * i));
}

/**
 * kvev_batch_reset() - start the next message
 * @ev: the publisher
 *
 * Where the chunk's messages end: its events go after the header's room
 * (and with less room than that left, into the next chunk).
 */
void kvev_batch_reset(struct kvev *ev)
{
	struct kvev_chunk *c = ev->chunk;

	ev->out.data = NULL;
	ev->out.cap = 0;
	if (c && c->size - c->used >= HDR_ROOM) {
		ev->out.data = c->data + c->used;
		ev->out.cap = c->size - c->used;
	}
	ev->out.len = HDR_ROOM;
	ev->out.err = 0;
	ev->nev = 0;
}

/**
 * kvev_flush_batch() - send the message being built, and keep it for replay
 * @ev: the publisher
 *
 * As KVEventBatch [ts, events, 0] (vLLM's publisher fills
 * data_parallel_rank with its rank, 0 for one): its header goes right
 * before its events, in the chunk it was built in, and ZMQ sends it
 * from there.  Nothing to send (no events): nothing done.
 *
 * Return: 0, -ENOMEM (the message did not fit: it is dropped), or the
 * socket's error.
 */
int kvev_flush_batch(struct kvev *ev)
{
	struct kvev_buf *b = &ev->out;
	uint8_t head[HDR_ROOM];
	struct kvev_chunk *c;
	struct kvev_msg *m;
	struct timespec ts;
	uint8_t sb[8];
	const void *f[2];
	size_t len[2], hl, end;
	int ret;

	if (!ev->nev)
		return 0;
	kvev_buf_put(ev, "\x00", 1);		/* data_parallel_rank */
	if (b->err) {
		kvev_batch_reset(ev);
		return -ENOMEM;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	hl = kvev_pack_head(head, ts.tv_sec + ts.tv_nsec / 1e9, ev->nev);
	memcpy(b->data + HDR_ROOM - hl, head, hl);

	m = &ev->ring[ev->st.messages % ev->p.buffer_steps];
	if (m->chunk) {		/* the oldest message kept goes */
		kvev_chunk_put(m->chunk);
		m->chunk = NULL;
		m->len = 0;
	}
	c = ev->chunk;
	m->chunk = c;
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	m->data = b->data + HDR_ROOM - hl;
	m->len = b->len - (HDR_ROOM - hl);
	end = (size_t)(b->data - c->data) + b->len;
	c->used = (end + 7) & ~(size_t)7;
	if (c->used > c->size)
		c->used = c->size;
	kvev_batch_reset(ev);
	m->seq = ev->st.messages++;
	topic_of(ev, ev->ns, m->topic);
	seq_bytes(m->seq, sb);
	f[0] = m->topic, len[0] = strlen(m->topic);
	f[1] = sb, len[1] = 8;
	ret = send_frames(ev->pub, f, len, 2, ZMQ_SNDMORE);
	if (!ret)
		ret = send_kept(ev->pub, m);
	/* a PUB socket drops what subscribers cannot take: replay has it */
	return ret == -EAGAIN ? 0 : ret;
}

/**
 * kvev_serve_replay() - answer replay requests, waiting up to @timeout_ms
 * @ev: the publisher
 * @timeout_ms: how long to wait for the first (0: do not wait; -1: forever)
 *
 * A request is (identity, "", 8-byte big-endian start); the answer, as
 * vLLM's, is every kept message from start on as (identity, "", topic,
 * seq, payload), then (identity, "", "", -1, "").
 *
 * Return: requests answered, or -errno.
 */
int kvev_serve_replay(struct kvev *ev, int timeout_ms)
{
	zmq_pollitem_t it = { .socket = ev->router, .events = ZMQ_POLLIN };
	static const uint8_t end_seq[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	int served = 0;

	if (!ev->router) {	/* nothing to answer: just the wait */
		if (timeout_ms > 0) {
			struct timespec ts = { timeout_ms / 1000, (timeout_ms % 1000) * 1000000L };

			nanosleep(&ts, NULL);
		}
		return 0;
	}
	while (zmq_poll(&it, 1, served ? 0 : timeout_ms) > 0 && (it.revents & ZMQ_POLLIN)) {
		uint8_t id[256], frame[16], sb[8];
		uint64_t start = 0, s, first;
		const void *f[5];
		size_t len[5];
		int n, idn, more, nframes = 1, i, ret;
		size_t ml = sizeof(more);

		idn = zmq_recv(ev->router, id, sizeof(id), 0);
		if (idn < 0)
			return -zmq_errno();
		n = 0;
		for (;;) {
			if (zmq_getsockopt(ev->router, ZMQ_RCVMORE, &more, &ml) || !more)
				break;
			n = zmq_recv(ev->router, frame, sizeof(frame), 0);
			nframes++;
		}
		if (nframes != 3 || n != 8 || idn > (int)sizeof(id))
			continue;	/* not a replay request: ignored, as vLLM does */
		for (i = 0; i < 8; i++)
			start = start << 8 | frame[i];
		first = ev->st.messages > ev->p.buffer_steps ?
			ev->st.messages - ev->p.buffer_steps : 0;
		for (s = start > first ? start : first; s < ev->st.messages; s++) {
			const struct kvev_msg *m = &ev->ring[s % ev->p.buffer_steps];

			if (!m->len)
				continue;
			seq_bytes(m->seq, sb);
			f[0] = id, len[0] = (size_t)idn;
			f[1] = "", len[1] = 0;
			f[2] = m->topic, len[2] = strlen(m->topic);
			f[3] = sb, len[3] = 8;
			f[4] = m->data, len[4] = m->len;
			ret = send_frames(ev->router, f, len, 5, 0);
			if (ret)
				return ret;
		}
		f[0] = id, len[0] = (size_t)idn;
		f[1] = "", len[1] = 0;
		f[2] = "", len[2] = 0;
		f[3] = end_seq, len[3] = 8;
		f[4] = "", len[4] = 0;
		ret = send_frames(ev->router, f, len, 5, 0);
		if (ret)
			return ret;
		ev->st.replays++;
		served++;
	}
	return served;
}

