/* SPDX-License-Identifier: MIT */
/*
 * python/csrc/kvevents.c - a Context's cache events as vLLM's KV events
 * (tools/lib/kvevents.c), for kvmm.Context(kv_events=...).
 *
 * The direct API takes no lock of the context's own, so the publisher
 * cannot be kvmmd's thread that reads the context whenever it likes:
 * the package's thread reads EVENTS (kvmm_py_kvev_read()) holding the
 * Context's lock, as every other call, and publishes, and answers
 * replay requests, without it.  Compiled in only where the build found
 * libzmq (and linked with it, setup.py); elsewhere every entry point
 * says -EOPNOTSUPP.
 */
#include <errno.h>
#include <string.h>

#define KVMM_PY_KVEV_BUF	(KVMM_EVENTS_TOKENS_LEN_MIN * 4)

#if KVMM_PY_KVEVENTS
/* compiled into the extension (setuptools takes no source outside python/) */
#include "kvevents.c"
#include "kvevents_buf.c"
#include "kvevents_pack.c"

/* Token ids on, then a buffer of @bytes unless one big enough is there. */
static int kvmm_py_kvev_enable(struct kvmm_ctx *ctx, uint64_t bytes)
{
	struct kvmm_sqe tokens = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENT_TOKENS,
				   .arg2 = KVMM_EVENT_TOKENS_STORED };
	struct kvmm_sqe set = { .opcode = KVMM_OP_SET, .arg = KVMM_SET_EVENTS, .arg2 = 0 };
	uint64_t st[NR_KVMM_STATS];
	int ret = kvmm_stats(ctx, st, NR_KVMM_STATS);

	if (ret < 0)
		return ret;
	if (st[KVMM_STAT_EVENTS_BYTES] >= KVMM_EVENTS_TOKENS_BUF_MIN)
		return kvmm_ioctl(ctx, &tokens, NULL, 0);
	ret = kvmm_ioctl(ctx, &set, NULL, 0);
	if (!ret)
		ret = kvmm_ioctl(ctx, &tokens, NULL, 0);
	set.arg2 = bytes;
	return ret ? ret : kvmm_ioctl(ctx, &set, NULL, 0);
}

static int kvmm_py_kvev_create(struct kvmm_ctx *ctx, const char *endpoint, const char *replay,
			       const char *topic, int hash, const char *seed, struct kvev **out)
{
	struct kvev_params p = {
		.endpoint = endpoint, .replay = replay, .topic = topic,
		.hash = (enum kvev_hash)hash, .seed = seed, .page_size = kvmm_page_size(ctx),
		.stored_tokens = true, .yield_pages = KVEV_YIELD_PAGES,
	};
	int ret;

	if (hash < 0 || hash >= NR_KVEV_HASH)
		return -EINVAL;
	ret = kvmm_py_kvev_enable(ctx, 64u << 20);
	return ret ? ret : kvev_create(&p, out);
}

/* One EVENTS read with token ids from @cursor on.  Return: events, or -errno. */
static int kvmm_py_kvev_read(struct kvmm_ctx *ctx, uint64_t *cursor, void *buf, uint32_t len)
{
	struct kvmm_iovec iov = { buf, len };
	struct kvmm_sqe sqe;
	int res;

	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_events(&sqe, *cursor, KVMM_EVENTS_TOKENS, 0, 0, 0, len);
	res = kvmm_ioctl(ctx, &sqe, &iov, 1);
	if (res >= 0)
		*cursor = ((const struct kvmm_events_hdr *)buf)->next;
	return res;
}

static int kvmm_py_kvev_publish(struct kvev *ev, const void *buf)
{
	return kvev_publish(ev, buf);
}

static int kvmm_py_kvev_serve(struct kvev *ev, int timeout_ms)
{
	return kvev_serve_replay(ev, timeout_ms);
}

/* messages, stored, removed, lost, unnamed, replays */
static void kvmm_py_kvev_stats(struct kvev *ev, uint64_t *out)
{
	struct kvev_stats st;

	kvev_get_stats(ev, &st);
	out[0] = st.messages, out[1] = st.stored, out[2] = st.removed;
	out[3] = st.lost, out[4] = st.unnamed, out[5] = st.replays;
}

static void kvmm_py_kvev_destroy(struct kvev *ev)
{
	kvev_destroy(ev);
}
#else
struct kvev;

static int kvmm_py_kvev_create(struct kvmm_ctx *ctx, const char *endpoint, const char *replay,
			       const char *topic, int hash, const char *seed, struct kvev **out)
{
	return -EOPNOTSUPP;
}

static int kvmm_py_kvev_read(struct kvmm_ctx *ctx, uint64_t *cursor, void *buf, uint32_t len)
{
	return -EOPNOTSUPP;
}

static int kvmm_py_kvev_publish(struct kvev *ev, const void *buf)
{
	return -EOPNOTSUPP;
}

static int kvmm_py_kvev_serve(struct kvev *ev, int timeout_ms)
{
	return -EOPNOTSUPP;
}

static void kvmm_py_kvev_stats(struct kvev *ev, uint64_t *out)
{
}

static void kvmm_py_kvev_destroy(struct kvev *ev)
{
}
#endif
