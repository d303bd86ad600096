// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/publish.c - kvmmd's KV event publisher: a thread that reads
 * the context's cache events (EVENTS, with token ids) every few
 * milliseconds and publishes them as vLLM's KV events
 * (tools/lib/kvevents.c), answering replay requests in between.  The
 * engine never waits for it: events go through the context's event
 * buffer, which the thread drains under the context lock one read at a
 * time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <autoconf.h>

#include "publish.h"
#include "../lib/parse.h"

#if CONFIG_KVMM_KVEVENTS
#include "../lib/kvevents.h"

struct kvmmd_pub {
	struct kvmm_ctx *ctx;
	struct kvev *ev;
	pthread_t thread;
	pthread_mutex_t lock;
	bool stop;
	uint32_t interval_ms;
	int quiet;
	uint64_t cursor;
	void *buf;
};

bool kvmmd_pub_built(void)
{
	return true;
}

/* Publish everything new; Return: 0 or -errno (logged by the caller). */
static int drain(struct kvmmd_pub *pub)
{
	int ret;

	do
		ret = kvev_pump(pub->ev, pub->ctx, &pub->cursor, pub->buf,
				KVMM_EVENTS_TOKENS_LEN_MIN * 4);
	while (ret > 0);
	return ret;
}

static void *pub_thread(void *arg)
{
	struct kvmmd_pub *pub = arg;
	bool stop = false;
	int ret, errors = 0;

	while (!stop) {
		ret = drain(pub);
		if (ret < 0 && errors++ < 10)
			fprintf(stderr, "kvmmd: kv-events: publishing: %s\n", errno_str(-ret));
		/* the wait between reads is spent answering replay requests */
		ret = kvev_serve_replay(pub->ev, (int)pub->interval_ms);
		if (ret < 0 && errors++ < 10)
			fprintf(stderr, "kvmmd: kv-events: replay: %s\n", errno_str(-ret));
		pthread_mutex_lock(&pub->lock);
		stop = pub->stop;
		pthread_mutex_unlock(&pub->lock);
	}
	return NULL;
}

/**
 * kvmmd_pub_start() - bind the sockets and start publishing @ctx's events
 * @ctx: the context, with event token ids on (KVMM_SET_EVENT_TOKENS)
 * @po: the options
 * @out: the publisher
 *
 * Return: 0, or -errno with a line on stderr saying why.
 */
int kvmmd_pub_start(struct kvmm_ctx *ctx, const struct kvmmd_pub_opts *po,
		    struct kvmmd_pub **out)
{
	struct kvev_params p = {
		.endpoint = po->endpoint, .replay = po->replay, .topic = po->topic,
		.hash = po->hash, .seed = po->seed, .page_size = kvmm_page_size(ctx),
		.buffer_steps = po->buffer_steps,
	};
	struct kvmmd_pub *pub = calloc(1, sizeof(*pub));
	int ret;

	if (!pub)
		return -ENOMEM;
	pub->ctx = ctx;
	pub->interval_ms = po->interval_ms;
	pub->quiet = po->quiet;
	pub->buf = aligned_alloc(8, KVMM_EVENTS_TOKENS_LEN_MIN * 4);
	ret = pub->buf ? kvev_create(&p, &pub->ev) : -ENOMEM;
	if (ret) {
		fprintf(stderr, "kvmmd: --kv-events %s%s%s: %s\n", po->endpoint,
			po->replay ? ", replay " : "", po->replay ? po->replay : "",
			errno_str(-ret));
		free(pub->buf);
		free(pub);
		return ret;
	}
	pthread_mutex_init(&pub->lock, NULL);
	ret = -pthread_create(&pub->thread, NULL, pub_thread, pub);
	if (ret) {
		fprintf(stderr, "kvmmd: --kv-events: no thread: %s\n", errno_str(-ret));
		kvev_destroy(pub->ev);
		pthread_mutex_destroy(&pub->lock);
		free(pub->buf);
		free(pub);
		return ret;
	}
	if (!po->quiet)
		fprintf(stderr, "kvmmd: KV events on %s (%s, block size %u)%s%s\n", po->endpoint,
			kvev_hash_names[po->hash], kvmm_page_size(ctx),
			po->replay ? ", replay on " : "", po->replay ? po->replay : "");
	*out = pub;
	return 0;
}

/** kvmmd_pub_stop() - publish what is left, stop the thread, close the sockets */
void kvmmd_pub_stop(struct kvmmd_pub *pub)
{
	struct kvev_stats st;

	if (!pub)
		return;
	pthread_mutex_lock(&pub->lock);
	pub->stop = true;
	pthread_mutex_unlock(&pub->lock);
	pthread_join(pub->thread, NULL);
	drain(pub);
	kvev_get_stats(pub->ev, &st);
	if (!pub->quiet || st.lost || st.unnamed)
		fprintf(stderr, "kvmmd: KV events: %llu messages, %llu stored, %llu removed, "
			"%llu lost, %llu unnamed, %llu replays\n",
			(unsigned long long)st.messages, (unsigned long long)st.stored,
			(unsigned long long)st.removed, (unsigned long long)st.lost,
			(unsigned long long)st.unnamed, (unsigned long long)st.replays);
	kvev_destroy(pub->ev);
	pthread_mutex_destroy(&pub->lock);
	free(pub->buf);
	free(pub);
}

#else /* !CONFIG_KVMM_KVEVENTS */

bool kvmmd_pub_built(void)
{
	return false;
}

int kvmmd_pub_start(struct kvmm_ctx *ctx, const struct kvmmd_pub_opts *po,
		    struct kvmmd_pub **out)
{
	return -EOPNOTSUPP;
}

void kvmmd_pub_stop(struct kvmmd_pub *pub)
{
}

#endif
