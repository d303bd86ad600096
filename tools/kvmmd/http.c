// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/http.c - kvmmd's HTTP endpoints, served by libmicrohttpd on
 * its own thread:
 *
 *   GET  /metrics     Prometheus text format (metrics.c)
 *   POST /v1/prefix   {"tokens": [...], "ns": N}: how many of the prompt's
 *                     leading tokens this instance caches on each tier;
 *                     or {"block_hashes": ["hex", ...], "ns": N}, the
 *                     prompt's blocks named by vLLM's hash (--kv-events)
 *
 * on --metrics HOST:PORT, and the query alone on --query-socket PATH, a
 * Unix socket whose peers kvmmd knows by uid.  With --ns-per-uid a
 * namespace other than 0 is a tenant's: over TCP, where nobody is known,
 * it is not answered; over the Unix socket, a peer that is not root may
 * ask about its own uid's namespace only, as its ring would be bound.
 * So a tenant learns nothing of another's prompts from the query.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <autoconf.h>

#include "http.h"
#include "../lib/parse.h"

#if CONFIG_KVMM_KVEVENTS
#include "../lib/kvevents.h"
#endif

#if CONFIG_KVMM_HTTP
#include <jansson.h>
#include <microhttpd.h>

#include <libkvmm-ring.h>

#define BODY_MAX	(4u << 20)	/* a query's JSON: a million tokens, about */

/* Which listener a request came in on (the daemons' handler argument). */
struct listener {
	struct kvmmd_http *h;
	bool unix_sock;
};

struct kvmmd_http {
	struct kvmm_ctx *ctx;
	struct MHD_Daemon *tcp, *unix_sock;
	struct listener on[2];		/* tcp, unix */
	void *events;			/* struct kvev_thread, or NULL */
	char *sock_path;
	bool ns_per_uid;
};

/* A request's body as it arrives. */
struct body {
	char *data;
	size_t len;
	bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     char *text, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text,
								 MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *why)
{
	char *text = NULL;
	json_t *j = json_pack("{s:s}", "error", why);

	if (j)
		text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!text)
		return MHD_NO;
	return reply(c, status, "application/json", text, strlen(text));
}

static enum MHD_Result do_metrics(struct kvmmd_http *h, struct MHD_Connection *c)
{
	char *text;
	size_t len;
	int ret = kvmmd_metrics_text(h->ctx, NULL, NULL, &text, &len);

	if (ret)
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, errno_str(-ret));
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* The uid of the peer of a Unix socket connection; -1 if unknown. */
static long peer_uid(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct ucred cred;
	socklen_t sl = sizeof(cred);

	if (!ci || getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &sl))
		return -1;
	return (long)cred.uid;
}

/*
 * May this request ask about namespace @ns?  Without --ns-per-uid every
 * namespace is the operator's; with it, TCP gets namespace 0 only and a
 * Unix peer its own uid's (root: any).
 */
static const char *ns_refused(const struct listener *l, struct MHD_Connection *c, uint32_t ns)
{
	long uid;

	if (!l->h->ns_per_uid)
		return NULL;
	if (!l->unix_sock)
		return ns ? "a tenant's namespace: ask over --query-socket as its uid" : NULL;
	uid = peer_uid(c);
	if (uid == 0 || (uid > 0 && (uint32_t)uid == ns))
		return NULL;
	return "not your namespace";
}

/* LOOKUP with KVMM_LOOKUP_TIERS: the prompt's cached tokens per tier. */
static int lookup_tiers(struct kvmm_ctx *ctx, uint32_t ns, const uint32_t *tok, uint32_t n,
			struct kvmm_tier_hits *hits)
{
	size_t off = ((size_t)n * 4 + 7) & ~(size_t)7;
	char *buf = aligned_alloc(8, off + sizeof(*hits));
	struct kvmm_iovec iov = { buf, off + sizeof(*hits) };
	struct kvmm_sqe sqe;
	int ret;

	if (!buf)
		return -ENOMEM;
	memcpy(buf, tok, (size_t)n * 4);
	memset(&sqe, 0, sizeof(sqe));
	kvmm_prep_lookup(&sqe, ns, 0, 0, n);
	sqe.arg = KVMM_LOOKUP_TIERS;
	sqe.arg2 = off;
	ret = kvmm_ioctl(ctx, &sqe, &iov, 1);
	if (ret >= 0)
		memcpy(hits, buf + off, sizeof(*hits));
	free(buf);
	return ret < 0 ? ret : 0;
}

/*
 * {"block_hashes": [...]}: the leading blocks the KV event publisher has
 * seen stored, per tier, into @hits; *@n: the blocks asked about.
 * Return: NULL, or why the request is refused (400).
 */
static const char *lookup_hashes(const struct listener *l, uint32_t ns, json_t *arr,
				 uint32_t *n, struct kvmm_tier_hits *hits)
{
#if CONFIG_KVMM_KVEVENTS
	struct kvev *ev = l->h->events ? kvev_thread_publisher(l->h->events) : NULL;
	uint32_t hl, i, j;
	uint8_t *h;

	if (!ev)
		return "block hashes need kvmmd --kv-events";
	hl = kvev_hash_bytes(ev);
	*n = (uint32_t)json_array_size(arr);
	h = malloc((size_t)(*n ? *n : 1) * hl);
	if (!h)
		return "out of memory";
	for (i = 0; i < *n; i++) {
		const char *s = json_string_value(json_array_get(arr, i));

		if (!s || strlen(s) != 2 * hl)
			break;
		for (j = 0; j < hl; j++)
			if (sscanf(s + 2 * j, "%2hhx", &h[(size_t)i * hl + j]) != 1 ||
			    !isxdigit((unsigned char)s[2 * j]) ||
			    !isxdigit((unsigned char)s[2 * j + 1]))
				break;
		if (j < hl)
			break;
	}
	if (i < *n) {
		free(h);
		return "a block hash is not a hex string of the publisher's hash length";
	}
	kvev_lookup(ev, ns, h, *n, hits->tokens);
	free(h);
	return NULL;
#else
	return "block hashes need kvmmd --kv-events";
#endif
}

static enum MHD_Result do_prefix(const struct listener *l, struct MHD_Connection *c,
				 const struct body *b)
{
	static const char *const tiers[KVMM_NR_TIERS] = { "device", "host", "nvme" };
	struct kvmm_tier_hits hits;
	json_error_t jerr;
	json_t *req, *toks, *ns_j, *out, *cached, *bh;
	uint32_t *tok = NULL, ns = 0, n, i, total = 0;
	const char *why;
	char *text;
	int ret;

	if (b->too_big)
		return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the body is over 4 MiB");
	req = json_loadb(b->data ? b->data : "", b->len, 0, &jerr);
	if (!req)
		return reply_error(c, MHD_HTTP_BAD_REQUEST, "not JSON");
	toks = json_object_get(req, "tokens");
	bh = json_object_get(req, "block_hashes");
	ns_j = json_object_get(req, "ns");
	if (json_is_array(toks) == json_is_array(bh) || (ns_j && (!json_is_integer(ns_j) ||
					       json_integer_value(ns_j) < 0 ||
					       json_integer_value(ns_j) > UINT32_MAX))) {
		json_decref(req);
		return reply_error(c, MHD_HTTP_BAD_REQUEST, "want {\"tokens\": [ids...], "
				   "\"ns\": namespace} or {\"block_hashes\": [hex...], ...}");
	}
	if (ns_j)
		ns = (uint32_t)json_integer_value(ns_j);
	else if (l->unix_sock && l->h->ns_per_uid && peer_uid(c) > 0)
		ns = (uint32_t)peer_uid(c);	/* a tenant's own, by default */
	why = ns_refused(l, c, ns);
	if (why) {
		json_decref(req);
		return reply_error(c, MHD_HTTP_FORBIDDEN, why);
	}
	memset(&hits, 0, sizeof(hits));
	if (bh) {
		why = lookup_hashes(l, ns, bh, &n, &hits);
		json_decref(req);
		if (why)
			return reply_error(c, MHD_HTTP_BAD_REQUEST, why);
		n *= kvmm_page_size(l->h->ctx);
		goto answer;
	}
	n = (uint32_t)json_array_size(toks);
	tok = malloc((size_t)(n ? n : 1) * 4);
	for (i = 0; tok && i < n; i++) {
		json_t *t = json_array_get(toks, i);

		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > UINT32_MAX)
			break;
		tok[i] = (uint32_t)json_integer_value(t);
	}
	json_decref(req);
	if (!tok)
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	if (i < n) {
		free(tok);
		return reply_error(c, MHD_HTTP_BAD_REQUEST, "a token id is not in 0..2^32-1");
	}
	ret = n ? lookup_tiers(l->h->ctx, ns, tok, n, &hits) : 0;
	free(tok);
	if (ret)
		return reply_error(c, ret == -EINVAL ? MHD_HTTP_BAD_REQUEST :
				   MHD_HTTP_INTERNAL_SERVER_ERROR, errno_str(-ret));
answer:
	cached = json_object();
	for (i = 0; cached && i < KVMM_NR_TIERS; i++) {
		json_object_set_new(cached, tiers[i], json_integer(hits.tokens[i]));
		total += hits.tokens[i];
	}
	out = json_pack("{s:I,s:I,s:I,s:o,s:I}", "ns", (json_int_t)ns, "tokens", (json_int_t)n,
			"page_size", (json_int_t)kvmm_page_size(l->h->ctx), "cached", cached,
			"cached_total", (json_int_t)total);
	text = out ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (!text)
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	return reply(c, MHD_HTTP_OK, "application/json", text, strlen(text));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *data,
			      size_t *data_size, void **con_cls)
{
	const struct listener *l = cls;
	struct body *b = *con_cls;

	if (!strcmp(method, "GET") && !strcmp(url, "/metrics") && !l->unix_sock)
		return do_metrics(l->h, c);
	if (strcmp(url, "/v1/prefix"))
		return reply_error(c, MHD_HTTP_NOT_FOUND,
				   "try GET /metrics or POST /v1/prefix");
	if (strcmp(method, "POST"))
		return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "POST /v1/prefix");
	if (!b) {		/* the headers: the body comes next */
		b = calloc(1, sizeof(*b));
		*con_cls = b;
		return b ? MHD_YES : MHD_NO;
	}
	if (*data_size) {
		if (b->len + *data_size > BODY_MAX) {
			b->too_big = true;
		} else {
			char *d = realloc(b->data, b->len + *data_size);

			if (!d)
				return MHD_NO;
			memcpy(d + b->len, data, *data_size);
			b->data = d;
			b->len += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	return do_prefix(l, c, b);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct body *b = *con_cls;

	if (b) {
		free(b->data);
		free(b);
		*con_cls = NULL;
	}
}

/* HOST:PORT, HOST an IPv4 or [IPv6] address, into @ss.  Return: 0 or -EINVAL. */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl)
{
	const char *colon = strrchr(s, ':');
	char host[INET6_ADDRSTRLEN + 2];
	uint64_t port;
	size_t hl;

	if (!colon || parse_uint(colon + 1, 65535, &port))
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		host[hl - 1] = '\0';
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*sl = sizeof(*a);
		return inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1 ? 0 : -EINVAL;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		*sl = sizeof(*a);
		return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -EINVAL;
	}
}

static struct MHD_Daemon *start_daemon(struct listener *l, int fd, const struct sockaddr *sa,
				       unsigned flags)
{
	return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | flags, 0,
				NULL, NULL, handle, l,
				fd >= 0 ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR,
				fd >= 0 ? (void *)(intptr_t)fd : (void *)sa,
				MHD_OPTION_NOTIFY_COMPLETED, request_done, NULL,
				MHD_OPTION_CONNECTION_LIMIT, 64u,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
}

/* A listening Unix socket at @path that every local user may connect to. */
static int unix_listen(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd, ret;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || chmod(path, 0666) || listen(fd, 64)) {
		ret = -errno;
		close(fd);
		unlink(path);
		return ret;
	}
	return fd;
}

bool kvmmd_http_built(void)
{
	return true;
}

/**
 * kvmmd_http_start() - serve /metrics and the prefix query
 * @ctx: the context
 * @ho: where (--metrics, --query-socket) and whom to answer
 * @out: the server
 *
 * Return: 0, or -errno with a line on stderr saying why.
 */
int kvmmd_http_start(struct kvmm_ctx *ctx, const struct kvmmd_http_opts *ho,
		     struct kvmmd_http **out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	struct kvmmd_http *h = calloc(1, sizeof(*h));
	int fd;

	if (!h)
		return -ENOMEM;
	h->ctx = ctx;
	h->ns_per_uid = ho->ns_per_uid;
	h->events = ho->events;
	h->on[0] = (struct listener){ h, false };
	h->on[1] = (struct listener){ h, true };
	if (ho->listen) {
		if (parse_listen(ho->listen, &ss, &sl)) {
			fprintf(stderr, "kvmmd: --metrics %s: not HOST:PORT (an IPv4 address, "
				"or [IPv6])\n", ho->listen);
			goto out_fail;
		}
		h->tcp = start_daemon(&h->on[0], -1, (struct sockaddr *)&ss,
				      ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
		if (!h->tcp) {
			fprintf(stderr, "kvmmd: --metrics %s: cannot listen there (in use, or "
				"not this machine's address)\n", ho->listen);
			goto out_fail;
		}
	}
	if (ho->query_socket) {
		fd = unix_listen(ho->query_socket);
		if (fd < 0) {
			fprintf(stderr, "kvmmd: --query-socket %s: %s\n", ho->query_socket,
				errno_str(-fd));
			goto out_fail;
		}
		h->unix_sock = start_daemon(&h->on[1], fd, NULL, 0);
		if (!h->unix_sock) {
			close(fd);
			unlink(ho->query_socket);
			fprintf(stderr, "kvmmd: --query-socket %s: libmicrohttpd refused it\n",
				ho->query_socket);
			goto out_fail;
		}
		h->sock_path = strdup(ho->query_socket);
	}
	if (!ho->quiet && ho->listen)
		fprintf(stderr, "kvmmd: metrics and prefix query on http://%s/\n", ho->listen);
	*out = h;
	return 0;

out_fail:
	kvmmd_http_stop(h);
	return -EINVAL;
}

/** kvmmd_http_stop() - stop serving (NULL: nothing) */
void kvmmd_http_stop(struct kvmmd_http *h)
{
	if (!h)
		return;
	if (h->tcp)
		MHD_stop_daemon(h->tcp);
	if (h->unix_sock)
		MHD_stop_daemon(h->unix_sock);
	if (h->sock_path)
		unlink(h->sock_path);
	free(h->sock_path);
	free(h);
}

#else /* !CONFIG_KVMM_HTTP */

bool kvmmd_http_built(void)
{
	return false;
}

int kvmmd_http_start(struct kvmm_ctx *ctx, const struct kvmmd_http_opts *ho,
		     struct kvmmd_http **out)
{
	return -EOPNOTSUPP;
}

void kvmmd_http_stop(struct kvmmd_http *h)
{
}

#endif
