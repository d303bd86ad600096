// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-route/route.c - kvmm-route: an example KV-aware router.
 *
 *   kvmm-route [--ns N] INSTANCE... -- TOKEN...
 *
 * An INSTANCE is a kvmmd socket (its events are read) or
 * http://HOST:PORT, the address of a kvmmd --metrics: it is asked with
 * the prefix query (POST /v1/prefix), which counts the prompt's cached
 * tokens on every tier without a ring or an event stream.
 *
 * Given several kvmm instances (kvmmd sockets) recording cache events
 * (kvmmd --events), it reads each one's event stream (EVENTS on a ring,
 * as kvmmctl events) into the set of page keys the instance caches, on
 * any tier (stored, demoted and promoted pages are in it; removed ones
 * are not), then hashes the prompt's whole pages the way kvmm names them
 * (XXH3-128 of the prefix's tokens up to and including the page, seeded
 * with the namespace) and counts, per instance, the leading run of the
 * prompt's pages it holds.  It prints one line per instance, "SOCKET
 * PAGES", then "route SOCKET" for the instance with the longest run (the
 * first one named on a tie).  A long-running router would keep the sets
 * and follow the streams (kvmmctl events --follow does the reading); this
 * one reads them once, which is what a test or a script needs.
 *
 * Exit: 0 routed; 1 an instance refused (no events recorded); 2 usage;
 * 3 an instance could not be reached.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "../lib/parse.h"

#define BUF_SIZE	(1u << 20)
#define MAX_SOCKETS	64

/* A set of 128-bit keys: open addressing, grown at half full; 0 is empty. */
struct keyset {
	struct kvmm_key *slot;
	size_t cap, nr;
};

static size_t key_hash(const struct kvmm_key *k, size_t cap)
{
	return (size_t)(k->lo ^ (k->hi * 0x9e3779b97f4a7c15ull)) & (cap - 1);
}

static bool key_zero(const struct kvmm_key *k)
{
	return !k->lo && !k->hi;
}

static struct kvmm_key *set_find(struct keyset *s, const struct kvmm_key *k)
{
	size_t i = key_hash(k, s->cap);

	while (!key_zero(&s->slot[i]) && memcmp(&s->slot[i], k, sizeof(*k)))
		i = (i + 1) & (s->cap - 1);
	return &s->slot[i];
}

static int set_grow(struct keyset *s)
{
	struct keyset n = { calloc(s->cap ? s->cap * 2 : 1024, sizeof(*n.slot)),
			    s->cap ? s->cap * 2 : 1024, 0 };
	size_t i;

	if (!n.slot)
		return -ENOMEM;
	for (i = 0; i < s->cap; i++)
		if (!key_zero(&s->slot[i])) {
			*set_find(&n, &s->slot[i]) = s->slot[i];
			n.nr++;
		}
	free(s->slot);
	*s = n;
	return 0;
}

static int set_add(struct keyset *s, const struct kvmm_key *k)
{
	struct kvmm_key *e;

	if ((s->nr + 1) * 2 > s->cap && set_grow(s))
		return -ENOMEM;
	e = set_find(s, k);
	if (key_zero(e)) {
		*e = *k;
		s->nr++;
	}
	return 0;
}

/* Remove @k, moving back the entries of its run (linear probing's delete). */
static void set_del(struct keyset *s, const struct kvmm_key *k)
{
	struct kvmm_key *e = s->cap ? set_find(s, k) : NULL;
	size_t i, j, h;

	if (!e || key_zero(e))
		return;
	i = (size_t)(e - s->slot);
	memset(e, 0, sizeof(*e));
	s->nr--;
	for (j = (i + 1) & (s->cap - 1); !key_zero(&s->slot[j]); j = (j + 1) & (s->cap - 1)) {
		h = key_hash(&s->slot[j], s->cap);
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			s->slot[i] = s->slot[j];
			memset(&s->slot[j], 0, sizeof(s->slot[j]));
			i = j;
		}
	}
}

static bool set_has(struct keyset *s, const struct kvmm_key *k)
{
	return s->cap && !key_zero(set_find(s, k));
}

/* Submit the prepared entry, wait for it; *@flags: its CQE flags. */
static int run1(struct kvmm_ring *ring, uint32_t *flags)
{
	struct kvmm_cqe *cqe;
	int ret, res;

	kvmm_submit(ring);
	ret = kvmm_wait_cqe(ring, &cqe);
	if (ret)
		return ret;
	res = cqe->res;
	*flags = cqe->flags;
	kvmm_cqe_seen(ring, cqe);
	return res;
}

/* Read every event @path holds into @s; *@ps: its page size.  Return: 0 or an exit code. */
static int read_instance(const char *path, uint32_t ns, struct keyset *s, uint32_t *ps)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = BUF_SIZE };
	struct kvmm_ring ring;
	uint64_t cursor = 0;
	uint32_t more = 0;
	int ret, res;

	ret = kvmm_ring_connect(path, &rp, &ring);
	if (ret) {
		fprintf(stderr, "kvmm-route: cannot reach %s: %s\n", path, errno_str(-ret));
		return 3;
	}
	kvmm_prep_probe(kvmm_get_sqe(&ring), 0, 0);
	res = run1(&ring, &more);
	if (res < 0)
		goto out_refused;
	*ps = ((struct kvmm_probe *)ring.buf)->page_size;
	do {
		const struct kvmm_events_hdr *hdr = ring.buf;
		const char *p = (const char *)(hdr + 1);
		uint32_t i, k;

		kvmm_prep_events(kvmm_get_sqe(&ring), cursor, KVMM_EVENTS_NS, ns, 0, 0, BUF_SIZE);
		res = run1(&ring, &more);
		more &= KVMM_CQE_F_MORE;
		if (res < 0)
			goto out_refused;
		if (hdr->lost)
			fprintf(stderr, "kvmm-route: %s: %llu events were lost; its set may be "
				"stale\n", path, (unsigned long long)hdr->lost);
		for (i = 0; i < hdr->nr; i++) {
			const struct kvmm_cache_event *e = (const void *)p;
			const struct kvmm_key *keys = (const void *)(e + 1);

			for (k = 0; k < e->pages; k++) {
				if (e->type == KVMM_EVENT_REMOVED)
					set_del(s, &keys[k]);
				else if (set_add(s, &keys[k]))
					res = -ENOMEM;
			}
			p += sizeof(*e) + (size_t)e->pages * sizeof(*keys);
		}
		if (res < 0)
			goto out_refused;
		cursor = hdr->next;
	} while (more);
	kvmm_ring_exit(&ring);
	return 0;
out_refused:
	fprintf(stderr, "kvmm-route: %s: %s%s\n", path, errno_str(-res),
		res == -EOPNOTSUPP ? " (it records no events: kvmmd --events BYTES)" : "");
	kvmm_ring_exit(&ring);
	return 1;
}

/* The leading pages of the prompt @tok (@n tokens) that @s holds. */
static uint32_t cached_run(struct keyset *s, uint32_t ns, const uint32_t *tok, uint32_t n,
			   uint32_t ps)
{
	XXH3_state_t st;
	uint32_t i;

	XXH3_128bits_reset_withSeed(&st, ns);
	for (i = 0; (i + 1) * (uint64_t)ps <= n; i++) {
		XXH128_hash_t h;
		struct kvmm_key k;

		XXH3_128bits_update(&st, tok + (size_t)i * ps, ps * sizeof(*tok));
		h = XXH3_128bits_digest(&st);
		k = (struct kvmm_key){ h.low64, h.high64 };
		if (!set_has(s, &k))
			break;
	}
	return i;
}

/*
 * Ask http://HOST:PORT (@url) for the prompt's cached tokens (the prefix
 * query); *@pages: the leading whole pages cached on any tier.  Return:
 * 0 or an exit code.
 */
static int query_instance(const char *url, uint32_t ns, const uint32_t *tok, uint32_t n,
			  uint32_t *pages)
{
	char host[64], *req = NULL, resp[4096], *colon;
	json_t *body = json_pack("{s:[],s:I}", "tokens", "ns", (json_int_t)ns), *ans = NULL;
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = -1, ret = 3, len, got = 0, r;
	char *text = NULL;
	uint64_t port;
	uint32_t i;

	snprintf(host, sizeof(host), "%s", url + strlen("http://"));
	host[strcspn(host, "/")] = '\0';
	colon = strrchr(host, ':');
	if (!colon || parse_uint(colon + 1, 65535, &port))
		goto out;
	*colon = '\0';
	a.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		goto out;
	for (i = 0; body && i < n; i++)
		json_array_append_new(json_object_get(body, "tokens"), json_integer(tok[i]));
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (!text)
		goto out;
	len = asprintf(&req, "POST /v1/prefix HTTP/1.1\r\nHost: %s\r\nContent-Type: "
		       "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
		       host, strlen(text), text);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (len < 0 || fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    write(fd, req, (size_t)len) != len)
		goto out;
	while (got < (int)sizeof(resp) - 1 &&
	       (r = (int)read(fd, resp + got, sizeof(resp) - 1 - (size_t)got)) > 0)
		got += r;
	resp[got] = '\0';
	ret = 1;
	if (!strncmp(resp, "HTTP/1.1 200", 12) && strstr(resp, "\r\n\r\n"))
		ans = json_loads(strstr(resp, "\r\n\r\n") + 4, 0, NULL);
	if (ans && json_integer_value(json_object_get(ans, "page_size")) > 0) {
		*pages = (uint32_t)(json_integer_value(json_object_get(ans, "cached_total")) /
				    json_integer_value(json_object_get(ans, "page_size")));
		ret = 0;
	}
out:
	if (ret)
		fprintf(stderr, "kvmm-route: %s: %s\n", url, ret == 3 ? "cannot reach it" :
			got ? strtok(resp, "\r") : "no answer");
	if (fd >= 0)
		close(fd);
	json_decref(ans);
	json_decref(body);
	free(text);
	free(req);
	return ret;
}

static int usage(void)
{
	fprintf(stderr, "usage: kvmm-route [--ns N] INSTANCE... -- TOKEN...\n"
		"  INSTANCE: a kvmmd socket (its cache events), or http://HOST:PORT of a\n"
		"  kvmmd --metrics (its prefix query)\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *socks[MAX_SOCKETS];
	uint32_t nsock = 0, ntok = 0, ns = 0, *tok, i, best = 0, best_run = 0;
	int a = 1, ret = 0;
	uint64_t v;

	if (a + 1 < argc && !strcmp(argv[a], "--ns")) {
		if (parse_uint(argv[a + 1], UINT32_MAX, &v))
			return usage();
		ns = (uint32_t)v;
		a += 2;
	}
	for (; a < argc && strcmp(argv[a], "--"); a++) {
		if (nsock == MAX_SOCKETS || argv[a][0] == '-')
			return usage();
		socks[nsock++] = argv[a];
	}
	if (!nsock || a >= argc - 1)
		return usage();
	tok = calloc((size_t)(argc - a), sizeof(*tok));
	if (!tok)
		return 1;
	for (a++; a < argc; a++) {
		if (parse_uint(argv[a], UINT32_MAX, &v)) {
			free(tok);
			return usage();
		}
		tok[ntok++] = (uint32_t)v;
	}
	for (i = 0; i < nsock && !ret; i++) {
		struct keyset s = { 0 };
		uint32_t ps = 0, run = 0;

		if (!strncmp(socks[i], "http://", 7))
			ret = query_instance(socks[i], ns, tok, ntok, &run);
		else
			ret = read_instance(socks[i], ns, &s, &ps);
		if (!ret) {
			if (strncmp(socks[i], "http://", 7))
				run = cached_run(&s, ns, tok, ntok, ps);
			printf("%s %u\n", socks[i], run);
			if (run > best_run || i == 0) {
				best = i;
				best_run = run;
			}
		}
		free(s.slot);
	}
	if (!ret)
		printf("route %s\n", socks[best]);
	free(tok);
	return ret;
}
