/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmmd/http.h - kvmmd's HTTP endpoints (--metrics, --query-socket):
 * Prometheus /metrics and the prefix query, served with libmicrohttpd.
 */
#ifndef KVMMD_HTTP_H
#define KVMMD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <libkvmm.h>

/* --metrics and --query-socket; strings owned by kvmmd's options */
struct kvmmd_http_opts {
	char *listen;		/* HOST:PORT of /metrics and the query, or NULL */
	char *query_socket;	/* a Unix socket for tenants' queries, or NULL */
	bool ns_per_uid;	/* tenants are bound to their uid's namespace */
	void *events;		/* the KV event publisher (struct kvmmd_pub), or NULL:
				 * queries by vLLM block hash need it */
	int quiet;
};

struct kvmmd_http;

bool kvmmd_http_built(void);
int kvmmd_http_start(struct kvmm_ctx *ctx, const struct kvmmd_http_opts *ho,
		     struct kvmmd_http **out);
void kvmmd_http_stop(struct kvmmd_http *h);

/* metrics.c */
int kvmmd_metrics_text(struct kvmm_ctx *ctx, void (*extra)(FILE *f, void *arg), void *extra_arg,
		       char **out, size_t *len);

#endif
