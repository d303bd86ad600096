// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/publish.c - kvmmd's KV event publisher (--kv-events): the
 * publisher thread of tools/lib/kvevents.c on kvmmd's context, its
 * failures said on stderr.  A build without libzmq, msgpack-c or
 * libcrypto has none, and kvmmd refuses the option.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <autoconf.h>

#include "publish.h"
#include "../lib/parse.h"

#if CONFIG_KVMM_KVEVENTS
#include "../lib/kvevents.h"

bool kvmmd_pub_built(void)
{
	return true;
}

/**
 * kvmmd_pub_start() - bind the sockets and start publishing @ctx's events
 * @ctx: the context (its event buffer already set: --events)
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
		.hash = po->hash, .seed = po->seed, .buffer_steps = po->buffer_steps,
		.index_hashes = po->index_hashes,
	};
	struct kvev_thread *t;
	int ret = kvev_thread_start(ctx, &p, 0, po->interval_ms, &t);

	if (ret) {
		fprintf(stderr, "kvmmd: --kv-events %s%s%s: %s\n", po->endpoint,
			po->replay ? ", replay " : "", po->replay ? po->replay : "",
			errno_str(-ret));
		return ret;
	}
	if (!po->quiet)
		fprintf(stderr, "kvmmd: KV events on %s (%s, block size %u)%s%s\n", po->endpoint,
			kvev_hash_names[po->hash], kvmm_page_size(ctx),
			po->replay ? ", replay on " : "", po->replay ? po->replay : "");
	*out = (struct kvmmd_pub *)t;
	return 0;
}

/** kvmmd_pub_stop() - publish what is left, stop, and say what was done */
void kvmmd_pub_stop(struct kvmmd_pub *pub, bool quiet)
{
	struct kvev_stats st = { 0 };
	int ret;

	if (!pub)
		return;
	ret = kvev_thread_stop((struct kvev_thread *)pub, &st);
	if (ret)
		fprintf(stderr, "kvmmd: KV events: publishing failed: %s\n", errno_str(-ret));
	if (!quiet || st.lost || st.unnamed)
		fprintf(stderr, "kvmmd: KV events: %llu messages, %llu stored, %llu removed, "
			"%llu lost, %llu unnamed, %llu replays\n",
			(unsigned long long)st.messages, (unsigned long long)st.stored,
			(unsigned long long)st.removed, (unsigned long long)st.lost,
			(unsigned long long)st.unnamed, (unsigned long long)st.replays);
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

void kvmmd_pub_stop(struct kvmmd_pub *pub, bool quiet)
{
}

#endif
