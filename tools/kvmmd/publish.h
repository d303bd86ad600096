/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmmd/publish.h - kvmmd's KV event publisher thread (--kv-events)
 */
#ifndef KVMMD_PUBLISH_H
#define KVMMD_PUBLISH_H

#include <stdbool.h>
#include <stdint.h>

#include <libkvmm.h>

/* --kv-events and its companions; strings owned by kvmmd's options */
struct kvmmd_pub_opts {
	char *endpoint;
	char *replay;
	char *topic;
	char *seed;
	uint32_t hash;		/* enum kvev_hash */
	uint32_t buffer_steps;
	uint32_t interval_ms;	/* how often the buffer is read */
	bool index_hashes;	/* the prefix query asks it (--metrics, --query-socket) */
	int quiet;
};

struct kvmmd_pub;

bool kvmmd_pub_built(void);
int kvmmd_pub_start(struct kvmm_ctx *ctx, const struct kvmmd_pub_opts *po,
		    struct kvmmd_pub **out);
void kvmmd_pub_stop(struct kvmmd_pub *pub, bool quiet);

#endif
