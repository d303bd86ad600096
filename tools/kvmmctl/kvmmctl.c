// SPDX-License-Identifier: MIT
/*
 * tools/kvmmctl/kvmmctl.c - kvmmctl: inspect and steer a running kvmm
 * instance (kvmmd, or an engine's admin socket) through the command ring.
 * It uses only the public API and the ring, so it is also a conformance
 * test of the ABI.
 *
 *   kvmmctl [OPTIONS] COMMAND [ARGS] [OPTIONS]     (see kvmmctl(8))
 *
 * The whole command line is parsed and checked before anything is
 * connected to: options go anywhere (git, ip and kubectl habits), '--'
 * ends them, and an argument a command does not take is a usage error.
 * A command is one line of ctl_cmds[] (its options, a function checking
 * its operands, one running it); an option one line of ctl_opts[] and a
 * small function storing it.
 *
 * Exit codes: 0 done; 1 the instance refused the command (the reason is
 * printed); 2 bad usage; 3 no instance could be reached, it did not
 * answer in time (--timeout) or it went away.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "../lib/json.h"
#include "../lib/parse.h"

#define EXIT_REFUSED	1
#define EXIT_USAGE	2
#define EXIT_CONNECT	3

#define BUF_SIZE	(1u << 20)
#define MAX_TOKENS	(BUF_SIZE / sizeof(uint32_t))
#define MAX_SECONDS	86400.0		/* --timeout, --interval */

/* The command line, parsed and checked before anything is connected to. */
struct ctl {
	const char *path;
	bool json;
	struct timespec timeout;
	unsigned given;			/* bits of the options given */
	/* command options */
	double interval;
	uint64_t count;
	uint32_t depth;
	uint64_t limit;
	uint32_t ns;
	uint64_t id;
	/* operands */
	uint32_t *tok, ntok;
	uint32_t key;
	uint64_t value;
	const char *key_name, *value_str;
};

static struct kvmm_ring ring;
static bool lost;		/* the instance stopped answering */

static int usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("kvmmctl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs("\n(kvmmctl --help lists the commands and options)\n", stderr);
	va_end(ap);
	return EXIT_USAGE;
}

/* ---- numbers ---- */

static int num_arg(const char *what, const char *s, uint64_t max, uint64_t *v)
{
	int ret = parse_uint(s, max, v);

	if (ret)
		return usage_err("%s: '%s' %s (0 to %llu)", what, s, parse_strerror(ret),
				 (unsigned long long)max);
	return 0;
}

static int u32_arg(const char *what, const char *s, uint32_t *v)
{
	uint64_t x;

	if (num_arg(what, s, UINT32_MAX, &x))
		return EXIT_USAGE;
	*v = (uint32_t)x;
	return 0;
}

static int seconds_arg(const char *what, const char *s, double *v)
{
	int ret = parse_real(s, 0.001, MAX_SECONDS, v);

	if (ret)
		return usage_err("%s: '%s' %s (seconds, 0.001 to %.0f)", what, s,
				 parse_strerror(ret), MAX_SECONDS);
	return 0;
}

/* ---- options ---- */

enum { OPT_SOCKET, OPT_JSON, OPT_TIMEOUT, OPT_HELP, OPT_INTERVAL, OPT_COUNT,
       OPT_DEPTH, OPT_LIMIT, OPT_NS, OPT_ID, OPT_FOLLOW, NR_OPTS };

#define OPT(x)		(1u << OPT_##x)
#define OPT_VAL		256		/* getopt's value of option 0 (1 is an operand) */
#define GLOBAL_OPTS	(OPT(SOCKET) | OPT(JSON) | OPT(TIMEOUT) | OPT(HELP))

static int opt_socket(struct ctl *c, const char *v)
{
	struct sockaddr_un sa;

	if (!*v)
		return usage_err("--socket: the path is empty");
	if (strlen(v) >= sizeof(sa.sun_path))
		return usage_err("--socket: the path is longer than %zu bytes",
				 sizeof(sa.sun_path) - 1);
	c->path = v;
	return 0;
}

static int opt_json(struct ctl *c, const char *v)
{
	c->json = true;
	return 0;
}

static int opt_timeout(struct ctl *c, const char *v)
{
	double t;

	if (seconds_arg("--timeout", v, &t))
		return EXIT_USAGE;
	c->timeout.tv_sec = (time_t)t;
	c->timeout.tv_nsec = (long)((t - (double)c->timeout.tv_sec) * 1e9);
	return 0;
}

static int opt_help(struct ctl *c, const char *v)
{
	return 0;
}

static int opt_interval(struct ctl *c, const char *v)
{
	return seconds_arg("--interval", v, &c->interval);
}

static int opt_count(struct ctl *c, const char *v)
{
	return num_arg("--count", v, INT64_MAX, &c->count);
}

static int opt_depth(struct ctl *c, const char *v)
{
	return u32_arg("--depth", v, &c->depth);
}

static int opt_limit(struct ctl *c, const char *v)
{
	return num_arg("--limit", v, UINT64_MAX, &c->limit);
}

static int opt_ns(struct ctl *c, const char *v)
{
	return u32_arg("--ns", v, &c->ns);
}

static int opt_id(struct ctl *c, const char *v)
{
	return num_arg("--id", v, UINT64_MAX, &c->id);
}

static int opt_follow(struct ctl *c, const char *v)
{
	return 0;
}

static const struct ctl_opt {
	const char *name;
	const char *arg;		/* NULL: takes none */
	int (*set)(struct ctl *c, const char *v);
} ctl_opts[NR_OPTS] = {
	[OPT_SOCKET] = { "socket", "PATH", opt_socket },
	[OPT_JSON] = { "json", NULL, opt_json },
	[OPT_TIMEOUT] = { "timeout", "SECONDS", opt_timeout },
	[OPT_HELP] = { "help", NULL, opt_help },
	[OPT_INTERVAL] = { "interval", "SECONDS", opt_interval },
	[OPT_COUNT] = { "count", "N", opt_count },
	[OPT_DEPTH] = { "depth", "N", opt_depth },
	[OPT_LIMIT] = { "limit", "N", opt_limit },
	[OPT_NS] = { "ns", "N", opt_ns },
	[OPT_ID] = { "id", "ID", opt_id },
	[OPT_FOLLOW] = { "follow", NULL, opt_follow },
};

/* ---- one command on the ring ---- */

/*
 * Submit the prepared entry and wait at most --timeout for its result.
 * Return: the command's result; a transport error (the instance went
 * away or did not answer in time) sets @lost.
 */
static int run1(const struct ctl *c, uint32_t *cflags)
{
	struct kvmm_cqe *cqe;
	int ret, res;

	kvmm_submit(&ring);
	ret = kvmm_wait_cqe_timeout(&ring, &cqe, &c->timeout);
	if (ret) {
		lost = true;
		return ret;
	}
	res = cqe->res;
	if (cflags)
		*cflags = cqe->flags;
	kvmm_cqe_seen(&ring, cqe);
	return res;
}

static struct kvmm_sqe *sqe_get(void)
{
	struct kvmm_sqe *sqe = kvmm_get_sqe(&ring);

	if (!sqe) {
		fprintf(stderr, "kvmmctl: ring full\n");
		exit(EXIT_REFUSED);
	}
	return sqe;
}

static int refused(const struct ctl *c, const char *what, int res)
{
	if (lost) {
		fprintf(stderr, "kvmmctl: %s: %s %s: %s\n", what, c->path,
			res == -ETIMEDOUT ? "did not answer in time" : "went away",
			errno_str(-res));
		return EXIT_CONNECT;
	}
	fprintf(stderr, "kvmmctl: %s: %s\n", what, errno_str(-res));
	return EXIT_REFUSED;
}

static int fetch_stats(const struct ctl *c, uint64_t *v, uint32_t *nr)
{
	struct kvmm_sqe *sqe = sqe_get();
	struct kvmm_stats_snap *snap = ring.buf;
	int res;

	kvmm_prep_stats(sqe, 0, 0, (uint32_t)ring.buf_size);
	res = run1(c, NULL);
	if (res < 0)
		return res;
	*nr = snap->nr < NR_KVMM_STATS ? snap->nr : NR_KVMM_STATS;
	memcpy(v, snap + 1, *nr * sizeof(*v));
	return 0;
}

/* ---- the commands ---- */

static int cmd_stat(struct ctl *c)
{
	uint64_t v[NR_KVMM_STATS];
	uint32_t nr, i;
	int res = fetch_stats(c, v, &nr);

	if (res)
		return refused(c, "stat", res);
	if (c->json) {
		json_t *j = json_object();

		for (i = 0; j && i < nr; i++)
			json_object_set_new(j, kvmm_stat_name(i), tool_json_u64(v[i]));
		tool_json_line(j, stdout);
		return 0;
	}
	for (i = 0; i < nr; i++)
		printf("%-20s %14llu\n", kvmm_stat_name(i), (unsigned long long)v[i]);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s };

	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The page columns of top: heading, and the statistic (its name is the JSON key). */
static const struct {
	const char *head;
	unsigned item;
} top_cols[] = {
	{ "free", KVMM_STAT_PAGES_FREE },
	{ "owned", KVMM_STAT_PAGES_OWNED },
	{ "cached", KVMM_STAT_PAGES_CACHED },
	{ "evictable", KVMM_STAT_PAGES_EVICTABLE },
	{ "protected", KVMM_STAT_PAGES_PROTECTED },
	{ "host", KVMM_STAT_HOST_PAGES_CACHED },
	{ "copies", KVMM_STAT_PAGES_SHADOWED },
	{ "nvme", KVMM_STAT_NVME_PAGES_CACHED },
	{ "keyed_host", KVMM_STAT_KEYED_HOST_PAGES },
	{ "keyed_nvme", KVMM_STAT_KEYED_NVME_PAGES },
};

/* top --json: one object a line, the time, the page columns, then the rates. */
/* The remote tier's pages read and written per second (top's last columns). */
struct top_rates {
	double hit;		/* over the interval; -1 when nothing was matched */
	double hit_all;		/* since the instance started; -1 likewise */
	double evict_s;		/* device pages dropped (no lower tier kept them) */
	double demote_s;	/* device pages moved to the host tier */
	double remote_in_s;
	double remote_out_s;
};

static double ratio_or_none(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : -1.0;
}

static void top_json(const uint64_t *cur, double t1, const struct top_rates *r)
{
	json_t *j = json_pack("{s:o}", "t", tool_json_fixed(t1, 3));
	size_t i;

	for (i = 0; j && i < ARRAY_LEN(top_cols); i++)
		json_object_set_new(j, kvmm_stat_name(top_cols[i].item),
				    tool_json_u64(cur[top_cols[i].item]));
	if (j) {
		json_object_set_new(j, "hit_rate", tool_json_fixed(r->hit < 0 ? 0 : r->hit, 4));
		json_object_set_new(j, "hit_rate_total",
				    tool_json_fixed(r->hit_all < 0 ? 0 : r->hit_all, 4));
		json_object_set_new(j, "evicted_pages_per_s", tool_json_fixed(r->evict_s, 1));
		json_object_set_new(j, "demoted_pages_per_s", tool_json_fixed(r->demote_s, 1));
		json_object_set_new(j, "remote_get_pages_per_s", tool_json_fixed(r->remote_in_s, 1));
		json_object_set_new(j, "remote_put_pages_per_s", tool_json_fixed(r->remote_out_s, 1));
		json_object_set_new(j, "seqs_open", tool_json_u64(cur[KVMM_STAT_SEQS_OPEN]));
	}
	tool_json_line(j, stdout);
}

static void top_line(const struct ctl *c, const uint64_t *cur, const uint64_t *prev,
		     double t1, double dt, bool head)
{
	uint64_t dm = cur[KVMM_STAT_MATCH_TOKENS] - prev[KVMM_STAT_MATCH_TOKENS];
	uint64_t dh = cur[KVMM_STAT_HIT_TOKENS] - prev[KVMM_STAT_HIT_TOKENS];
	uint64_t de = cur[KVMM_STAT_EVICT_PAGES] - prev[KVMM_STAT_EVICT_PAGES];
	uint64_t dd = cur[KVMM_STAT_HOST_DEMOTE_PAGES] - prev[KVMM_STAT_HOST_DEMOTE_PAGES];
	struct top_rates r = {
		.hit = ratio_or_none(dh, dm),
		.hit_all = ratio_or_none(cur[KVMM_STAT_HIT_TOKENS], cur[KVMM_STAT_MATCH_TOKENS]),
		.evict_s = (double)de / dt,
		.demote_s = (double)dd / dt,
		.remote_in_s = (double)(cur[KVMM_STAT_REMOTE_GET_HITS] -
					prev[KVMM_STAT_REMOTE_GET_HITS]) / dt,
		.remote_out_s = (double)(cur[KVMM_STAT_REMOTE_PUT_PAGES] -
					 prev[KVMM_STAT_REMOTE_PUT_PAGES]) / dt,
	};
	size_t i;

	char hit[16], hit_all[16];

	if (c->json) {
		top_json(cur, t1, &r);
		fflush(stdout);
		return;
	}
	/*
	 * hit/int: this interval's (no MATCH in it: "-", not a rate of 0);
	 * hit/all: since the instance started.  drop/s are device pages
	 * evicted with no copy kept; demote/s those moved to the host tier.
	 */
	if (head) {
		for (i = 0; i < ARRAY_LEN(top_cols); i++)
			printf("%10s ", top_cols[i].head);
		printf("%8s %8s %10s %10s %6s %10s %10s\n", "hit/int", "hit/all", "drop/s",
		       "demote/s", "seqs", "rget/s", "rput/s");
	}
	for (i = 0; i < ARRAY_LEN(top_cols); i++)
		printf("%10llu ", (unsigned long long)cur[top_cols[i].item]);
	snprintf(hit, sizeof(hit), r.hit < 0 ? "-" : "%.4f", r.hit);
	snprintf(hit_all, sizeof(hit_all), r.hit_all < 0 ? "-" : "%.4f", r.hit_all);
	printf("%8s %8s %10.1f %10.1f %6llu %10.1f %10.1f\n", hit, hit_all, r.evict_s,
	       r.demote_s, (unsigned long long)cur[KVMM_STAT_SEQS_OPEN], r.remote_in_s,
	       r.remote_out_s);
	fflush(stdout);
}

static int cmd_top(struct ctl *c)
{
	uint64_t prev[NR_KVMM_STATS], cur[NR_KVMM_STATS];
	bool tty = isatty(STDOUT_FILENO) && !c->json;
	double t0, t1;
	uint64_t k;
	uint32_t nr;
	int res;

	res = fetch_stats(c, prev, &nr);
	if (res)
		return refused(c, "top", res);
	t0 = now_s();
	for (k = 0; !(c->given & OPT(COUNT)) || k < c->count; k++) {
		sleep_s(c->interval);
		res = fetch_stats(c, cur, &nr);
		if (res)
			return refused(c, "top", res);
		t1 = now_s();
		if (tty)
			printf("\033[H\033[2J");
		top_line(c, cur, prev, t1, t1 - t0, tty || k == 0);
		memcpy(prev, cur, sizeof(prev));
		t0 = t1;
	}
	return 0;
}

/* Page through a DUMP; @fn gets each record. */
static int dump_all(const struct ctl *c, uint32_t kind,
		    int (*fn)(const struct ctl *c, const void *rec, void *arg), void *arg)
{
	uint64_t cursor = 0;

	do {
		struct kvmm_sqe *sqe = sqe_get();
		struct kvmm_dump_hdr *hdr = ring.buf;
		uint32_t i;
		int res;

		kvmm_prep_dump(sqe, kind, cursor, 0, 0, (uint32_t)ring.buf_size);
		res = run1(c, NULL);
		if (res < 0)
			return res;
		for (i = 0; i < hdr->nr; i++)
			if (fn(c, (char *)(hdr + 1) + (size_t)i * hdr->rec_size, arg))
				return 0;
		cursor = hdr->next;
	} while (cursor);
	return 0;
}

/* One record of a --json list: a comma before every one but the first. */
static void json_item(json_t *j, bool first)
{
	if (!first)
		putchar(',');
	tool_json_put(j, stdout);
}

struct tree_opts {
	uint32_t max_depth;
	uint64_t limit, shown, hidden;
};

static int show_node(const struct ctl *c, const void *rec, void *arg)
{
	const struct kvmm_dump_node *n = rec;
	struct tree_opts *o = arg;

	if (n->depth > o->max_depth) {
		o->hidden++;
		return 0;
	}
	if (o->shown == o->limit) {
		o->hidden++;
		return 0;
	}
	o->shown++;
	if (c->json) {
		json_item(json_pack("{s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:b,s:b,s:I}",
			"id", tool_json_u64(n->id), "parent", tool_json_u64(n->parent),
			"ns", (json_int_t)n->ns, "depth", (json_int_t)n->depth,
			"len", (json_int_t)n->len, "lock_ref", (json_int_t)n->lock_ref,
			"pins", (json_int_t)n->pins, "prio", (json_int_t)n->prio,
			"tier", (json_int_t)n->tier, "hits", (json_int_t)n->hits,
			"atime", tool_json_u64(n->atime),
			"evictable", !!(n->flags & KVMM_DUMP_F_EVICTABLE),
			"host_copy", !!(n->flags & KVMM_DUMP_F_SHADOW),
			"token0", (json_int_t)n->token0), o->shown == 1);
		return 0;
	}
	if (n->flags & KVMM_DUMP_F_ROOT) {
		printf("ns %u\n", n->ns);
		return 0;
	}
	printf("%*s%-8u lock %-3u pins %-2u prio %u hits %-5u atime %-10llu tier %u%s%s  [%u...]\n",
	       2 * n->depth, "", n->len, n->lock_ref, n->pins, n->prio, n->hits,
	       (unsigned long long)n->atime, n->tier,
	       n->flags & KVMM_DUMP_F_SHADOW ? "+host" : "",
	       n->flags & KVMM_DUMP_F_EVICTABLE ? " evictable" : "", n->token0);
	return 0;
}

static int cmd_tree(struct ctl *c)
{
	struct tree_opts o = { .max_depth = c->depth, .limit = c->limit };
	int res;

	if (c->json)
		printf("[");
	else
		printf("tokens   (per node; indented by depth)\n");
	res = dump_all(c, KVMM_DUMP_NODES, show_node, &o);
	if (c->json)
		printf("]\n");
	if (res)
		return refused(c, "tree", res);
	if (o.hidden && !c->json)
		printf("... %llu more nodes not shown (--depth, --limit)\n",
		       (unsigned long long)o.hidden);
	return 0;
}

static int show_seq(const struct ctl *c, const void *rec, void *arg)
{
	const struct kvmm_dump_seq *s = rec;
	uint64_t *n = arg;

	if (c->json)
		json_item(json_pack("{s:I,s:I,s:I,s:I,s:I}", "seq", (json_int_t)s->seq,
				    "ns", (json_int_t)s->ns, "len", (json_int_t)s->len,
				    "cached", (json_int_t)s->cached, "owner", (json_int_t)s->owner),
			  !(*n)++);
	else
		printf("%8u %8u %10u %10u %8u\n", s->seq, s->ns, s->len, s->cached, s->owner);
	return 0;
}

/*
 * A DUMP of @kind as a list: a JSON array, or @header then a line per
 * record; @fn prints a record (the count of records shown in its @arg).
 */
static int dump_list(const struct ctl *c, const char *what, uint32_t kind,
		     const char *header,
		     int (*fn)(const struct ctl *c, const void *rec, void *arg))
{
	uint64_t shown = 0;
	int res;

	fputs(c->json ? "[" : header, stdout);
	res = dump_all(c, kind, fn, &shown);
	if (c->json)
		printf("]\n");
	return res ? refused(c, what, res) : 0;
}

static int cmd_seqs(struct ctl *c)
{
	return dump_list(c, "seqs", KVMM_DUMP_SEQS,
			 "     seq       ns        len     cached     ring\n", show_seq);
}

/* pin and unpin: TOKEN... (each a 32-bit token id) */
static int parse_tokens(struct ctl *c, int argc, char **argv)
{
	int i;

	if (!argc)
		return usage_err("%s: give the prefix's token ids", argv[-1]);
	if ((size_t)argc > MAX_TOKENS)
		return usage_err("%s: %d tokens; at most %zu", argv[-1], argc, MAX_TOKENS);
	c->tok = malloc((size_t)argc * sizeof(*c->tok));
	if (!c->tok) {
		fprintf(stderr, "kvmmctl: out of memory\n");
		exit(EXIT_REFUSED);
	}
	for (i = 0; i < argc; i++)
		if (u32_arg("token id", argv[i], &c->tok[i]))
			return EXIT_USAGE;
	c->ntok = (uint32_t)argc;
	return 0;
}

/*
 * unpin: TOKEN... drops one kept pin by its prefix; with no tokens, --id
 * ID or --ns N drops every pin at a node or in a namespace, whoever took
 * it (KVMM_OP_PIN_DROP: the operator's way out of a tenant's pins).
 */
static int parse_unpin(struct ctl *c, int argc, char **argv)
{
	bool by_id = c->given & OPT(ID), by_ns = c->given & OPT(NS);

	if (argc && !by_id)
		return parse_tokens(c, argc, argv);
	if (argc || by_id == by_ns)
		return usage_err("unpin: give --id ID or --ns NS (or token ids)");
	return 0;
}

static int pin_unpin(struct ctl *c, bool pin)
{
	const char *what = pin ? "pin" : "unpin";
	struct kvmm_sqe *sqe = sqe_get();
	int res;

	memcpy(ring.buf, c->tok, c->ntok * sizeof(*c->tok));
	if (pin)
		kvmm_prep_pin(sqe, c->ns, 0, 0, c->ntok, KVMM_PIN_KEEP);
	else
		kvmm_prep_unpin(sqe, c->ns, 0, 0, c->ntok, KVMM_PIN_KEEP);
	res = run1(c, NULL);
	if (res < 0)
		return refused(c, what, res);
	if (c->json)
		tool_json_line(json_pack("{s:i}", "tokens", res), stdout);
	else
		printf("%s %d tokens\n", pin ? "pinned" : "unpinned", res);
	return 0;
}

/* The server's page size (PROBE), or 0 when it does not say. */
static uint32_t probe_page_size(const struct ctl *c)
{
	struct kvmm_probe *p = ring.buf;

	kvmm_prep_probe(sqe_get(), 0, 0);
	return run1(c, NULL) < 0 ? 0 : p->page_size;
}

static int cmd_pin(struct ctl *c)
{
	uint32_t page_size;

	if (c->ntok) {
		/* a pin takes whole cached pages: say so rather than a bare EINVAL */
		page_size = probe_page_size(c);
		if (page_size > 1 && c->ntok < page_size) {
			fprintf(stderr, "kvmmctl: pin: %u tokens are less than a page: a pin "
				"takes whole cached pages of page_size %u tokens\n", c->ntok,
				page_size);
			return EXIT_REFUSED;
		}
	}
	return pin_unpin(c, true);
}

static int cmd_unpin(struct ctl *c)
{
	int res;

	if (c->ntok)
		return pin_unpin(c, false);
	if (c->given & OPT(ID))
		kvmm_prep_pin_drop(sqe_get(), KVMM_PIN_DROP_ID, 0, c->id);
	else
		kvmm_prep_pin_drop(sqe_get(), KVMM_PIN_DROP_NS, c->ns, 0);
	res = run1(c, NULL);
	if (res < 0)
		return refused(c, "unpin", res);
	if (c->json)
		tool_json_line(json_pack("{s:i}", "pins", res), stdout);
	else
		printf("unpinned %d pins\n", res);
	return 0;
}

static int show_pin(const struct ctl *c, const void *rec, void *arg)
{
	const struct kvmm_dump_pin *p = rec;
	uint64_t *shown = arg;

	if ((c->given & OPT(NS)) && p->ns != c->ns)
		return 0;
	if (c->json)
		json_item(json_pack("{s:o,s:I,s:I,s:I,s:I,s:I,s:I}", "id", tool_json_u64(p->id),
				    "ns", (json_int_t)p->ns, "tokens", (json_int_t)p->tokens,
				    "pages", (json_int_t)p->pages, "pins", (json_int_t)p->pins,
				    "keep", (json_int_t)p->keep, "ring", (json_int_t)p->owner),
			  !(*shown)++);
	else
		printf("%12llu %10u %10u %8u %5u %5u %6u\n", (unsigned long long)p->id, p->ns,
		       p->tokens, p->pages, p->pins, p->keep, p->owner);
	return 0;
}

static int cmd_pins(struct ctl *c)
{
	return dump_list(c, "pins", KVMM_DUMP_PINS,
			 "          id         ns     tokens    pages  pins  keep   ring\n", show_pin);
}

static int show_ns(const struct ctl *c, const void *rec, void *arg)
{
	const struct kvmm_dump_ns *n = rec;
	uint64_t *shown = arg;

	if (c->json)
		json_item(json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "ns", (json_int_t)n->ns,
				    "pinned", tool_json_u64(n->pinned),
				    "cached", tool_json_u64(n->cached),
				    "pin_limit", tool_json_u64(n->pin_limit),
				    "cache_limit", tool_json_u64(n->cache_limit),
				    "keyed_host", tool_json_u64(n->keyed_host),
				    "keyed_nvme", tool_json_u64(n->keyed_nvme)), !(*shown)++);
	else
		printf("%10u %10llu %10llu %10llu %12llu %10llu %10llu\n", n->ns,
		       (unsigned long long)n->pinned, (unsigned long long)n->cached,
		       (unsigned long long)n->pin_limit, (unsigned long long)n->cache_limit,
		       (unsigned long long)n->keyed_host, (unsigned long long)n->keyed_nvme);
	return 0;
}

static int cmd_ns(struct ctl *c)
{
	return dump_list(c, "ns", KVMM_DUMP_NS,
			 "        ns     pinned     cached  pin_limit  cache_limit keyed_host "
			 "keyed_nvme\n", show_ns);
}

static int show_kspace(const struct ctl *c, const void *rec, void *arg)
{
	const struct kvmm_dump_kspace *k = rec;
	char id[sizeof(k->model_id) + 1];
	uint64_t *shown = arg;

	memcpy(id, k->model_id, sizeof(k->model_id));
	id[sizeof(k->model_id)] = '\0';	/* the server's record: never trusted */
	if ((c->given & OPT(NS)) && k->ns != c->ns)
		return 0;
	if (c->json)
		json_item(json_pack("{s:I,s:I,s:s,s:o,s:I,s:o,s:o,s:o}", "id", (json_int_t)k->id,
				    "ns", (json_int_t)k->ns, "model_id", id,
				    "value_bytes", tool_json_u64(k->value_bytes),
				    "pages", (json_int_t)k->pages,
				    "values", tool_json_u64(k->values),
				    "host_pages", tool_json_u64(k->host_pages),
				    "nvme_pages", tool_json_u64(k->nvme_pages)), !(*shown)++);
	else
		printf("%6u %10u %12llu %6u %10llu %10llu %10llu  %s\n", k->id, k->ns,
		       (unsigned long long)k->value_bytes, k->pages,
		       (unsigned long long)k->values, (unsigned long long)k->host_pages,
		       (unsigned long long)k->nvme_pages, id[0] ? id : "(recovered)");
	return 0;
}

static int cmd_spaces(struct ctl *c)
{
	return dump_list(c, "spaces", KVMM_DUMP_KSPACES,
			 "    id         ns  value_bytes  pages     values host_pages nvme_pages"
			 "  model_id\n", show_kspace);
}

static int cmd_simple(struct ctl *c, const char *what, const char *unit)
{
	int res = run1(c, NULL);

	if (res < 0)
		return refused(c, what, res);
	if (c->json)
		tool_json_line(json_pack("{s:i}", unit, res), stdout);
	else
		printf("%s: %d %s\n", what, res, unit);
	return 0;
}

static int parse_reclaim(struct ctl *c, int argc, char **argv)
{
	if (argc != 1)
		return usage_err("reclaim: give one number of PAGES");
	if (num_arg("reclaim: PAGES", argv[0], UINT32_MAX, &c->value))
		return EXIT_USAGE;
	if (!c->value)
		return usage_err("reclaim: PAGES must be positive");
	return 0;
}

static int cmd_reclaim(struct ctl *c)
{
	kvmm_prep_reclaim(sqe_get(), (uint32_t)c->value);
	return cmd_simple(c, "reclaim", "pages");
}

static int parse_space_rm(struct ctl *c, int argc, char **argv)
{
	if (argc != 1)
		return usage_err("space-rm: give one space ID (kvmmctl spaces lists them)");
	return num_arg("space-rm: ID", argv[0], INT32_MAX, &c->value) ? EXIT_USAGE : 0;
}

/* space-rm ID: KDELETE with KVMM_KDELETE_SPACE, the space and its values go */
static int cmd_space_rm(struct ctl *c)
{
	struct kvmm_sqe *sqe = sqe_get();

	kvmm_prep_rw(sqe, KVMM_OP_KDELETE, 0, 0, 0, 0);
	sqe->arg = (uint32_t)c->value;
	sqe->arg2 = KVMM_KDELETE_SPACE;
	return cmd_simple(c, "space-rm", "values");
}

static const char *const tier_names[KVMM_NR_TIERS] = {
	[KVMM_TIER_DEVICE] = "device",
	[KVMM_TIER_HOST] = "host",
	[KVMM_TIER_NVME] = "nvme",
};

/* drop-caches [TIER...]: the tiers that may lose pages, all by default */
static int parse_drop_caches(struct ctl *c, int argc, char **argv)
{
	int i, t;

	c->value = argc ? 0 : KVMM_DROP_ALL;
	for (i = 0; i < argc; i++) {
		for (t = 0; t < KVMM_NR_TIERS && strcmp(argv[i], tier_names[t]); t++)
			;
		if (t == KVMM_NR_TIERS)
			return usage_err("drop-caches: unknown tier '%s' (device, host or nvme)",
					 argv[i]);
		c->value |= 1u << t;
	}
	return 0;
}

static int cmd_drop_caches(struct ctl *c)
{
	struct kvmm_drop_counts *cnt = ring.buf;
	int res, t;

	memset(cnt, 0, sizeof(*cnt));
	kvmm_prep_drop_caches_tiers(sqe_get(), (uint32_t)c->value, 0, 0, sizeof(*cnt));
	res = run1(c, NULL);
	if (res < 0)
		return refused(c, "drop-caches", res);
	if (c->json) {
		tool_json_line(json_pack("{s:i,s:I,s:I,s:I}", "pages", res,
					 "device", (json_int_t)cnt->pages[KVMM_TIER_DEVICE],
					 "host", (json_int_t)cnt->pages[KVMM_TIER_HOST],
					 "nvme", (json_int_t)cnt->pages[KVMM_TIER_NVME]), stdout);
		return 0;
	}
	printf("drop-caches: %d pages (", res);
	for (t = 0; t < KVMM_NR_TIERS; t++)
		printf("%s%s %llu", t ? ", " : "", tier_names[t],
		       (unsigned long long)cnt->pages[t]);
	printf(")\n");
	return 0;
}

static int parse_flush(struct ctl *c, int argc, char **argv)
{
	uint64_t half_ms = ((uint64_t)c->timeout.tv_sec * 1000 + c->timeout.tv_nsec / 1000000) / 2;

	if (argc > 1)
		return usage_err("flush: give at most one time limit, MS");
	if (argc)
		return num_arg("flush: MS", argv[0], UINT32_MAX, &c->value) ? EXIT_USAGE : 0;
	/* by default, half the wait for the answer: the answer comes in time */
	c->value = half_ms ? (half_ms < UINT32_MAX ? half_ms : UINT32_MAX) : 1;
	return 0;
}

/* flush [MS]: every cached page not on NVMe written to its file, parents first */
static int cmd_flush(struct ctl *c)
{
	uint32_t cflags = 0;
	int res;

	kvmm_prep_flush(sqe_get(), (uint32_t)c->value);
	res = run1(c, &cflags);
	if (res < 0)
		return refused(c, "flush", res);
	if (c->json)
		tool_json_line(json_pack("{s:i,s:b}", "pages", res, "complete",
					 !(cflags & KVMM_CQE_F_MORE)), stdout);
	else
		printf("flush: %d pages written to NVMe%s\n", res,
		       cflags & KVMM_CQE_F_MORE ? "; some cached pages were left out "
						  "(out of time or room on the tier)" : "");
	return 0;
}

/* check: every invariant of kvmmd's context; what broke is in kvmmd's log */
static int cmd_check(struct ctl *c)
{
	int res;

	kvmm_prep_check(sqe_get());
	res = run1(c, NULL);
	if (res < 0)
		return refused(c, "check", res);
	if (c->json)
		tool_json_line(json_pack("{s:b}", "ok", 1), stdout);
	else
		printf("check: every invariant holds\n");
	return 0;
}

/*
 * set KEY VALUE: a key's value is one of @words, or a number up to @max
 * (when @max is not 0).
 */
static const struct ctl_key {
	const char *name;
	uint32_t key;
	uint64_t max;
	const char *const *words;	/* words[i] means i, or @vals[i] */
	const uint64_t *vals;
	bool bytes;			/* a size: K, M, G, T (KiB...) suffixes */
} ctl_keys[] = {
	{ "wmark_min", KVMM_SET_WMARK_MIN, UINT32_MAX, NULL, NULL, false },
	{ "wmark_low", KVMM_SET_WMARK_LOW, UINT32_MAX, NULL, NULL, false },
	{ "wmark_high", KVMM_SET_WMARK_HIGH, UINT32_MAX, NULL, NULL, false },
	{ "policy", KVMM_SET_POLICY, 0,
	  (const char *const[]){ [KVMM_POLICY_LRU] = "lru", [KVMM_POLICY_SLRU] = "slru", NULL }, NULL, false },
	{ "nr_pages", KVMM_SET_NR_PAGES, UINT32_MAX, NULL, NULL, false },
	{ "ns_pin_pages", KVMM_SET_NS_PIN_PAGES, UINT32_MAX,
	  (const char *const[]){ "auto", NULL }, (const uint64_t[]){ KVMM_NS_PIN_AUTO }, false },
	{ "ns_cache_share", KVMM_SET_NS_CACHE_SHARE, 100, NULL, NULL, false },
	{ "keyed_share", KVMM_SET_KEYED_SHARE, 100, NULL, NULL, false },
	{ "events", KVMM_SET_EVENTS, KVMM_EVENTS_BUF_MAX,
	  (const char *const[]){ "off", NULL }, (const uint64_t[]){ 0 }, true },
	{ "ns_kspaces", KVMM_SET_NS_KSPACES, KVMM_KSPACES_MAX, NULL, NULL, false },
	{ "ns_kjob_bytes", KVMM_SET_NS_KJOB_BYTES, 1ull << 40, NULL, NULL, true },
};

static int parse_set(struct ctl *c, int argc, char **argv)
{
	const struct ctl_key *k;
	uint64_t i;

	if (argc != 2)
		return usage_err("set: give a KEY and a VALUE");
	for (k = ctl_keys; k < ctl_keys + ARRAY_LEN(ctl_keys); k++)
		if (!strcmp(k->name, argv[0]))
			break;
	if (k == ctl_keys + ARRAY_LEN(ctl_keys))
		return usage_err("set: unknown key '%s'", argv[0]);
	c->key = k->key;
	c->key_name = argv[0];
	c->value_str = argv[1];
	for (i = 0; k->words && k->words[i]; i++)
		if (!strcmp(k->words[i], argv[1])) {
			c->value = k->vals ? k->vals[i] : i;
			return 0;
		}
	if (k->bytes) {
		int ret = parse_bytes(argv[1], k->max, &c->value);

		if (ret)
			return usage_err("set: %s: '%s' %s (bytes, with K, M, G or T, up to %llu)",
					 k->name, argv[1], parse_strerror(ret),
					 (unsigned long long)k->max);
		return 0;
	}
	if (k->max)
		return num_arg(k->name, argv[1], k->max, &c->value);
	return usage_err("set: %s: '%s' is not one of its values", k->name, argv[1]);
}

/*
 * A SET the server refused with EINVAL: say which rule @c's value broke,
 * with the server's figures where the rule is about them.
 */
static void set_why(const struct ctl *c)
{
	uint64_t v[NR_KVMM_STATS];
	uint32_t nr;

	switch (c->key) {
	case KVMM_SET_WMARK_MIN:
	case KVMM_SET_WMARK_LOW:
	case KVMM_SET_WMARK_HIGH:
		if (fetch_stats(c, v, &nr) || nr <= KVMM_STAT_WMARK_HIGH ||
		    nr <= KVMM_STAT_PAGES_TOTAL) {
			fprintf(stderr, "kvmmctl: set: %s %s: the watermarks must keep "
				"wmark_min <= wmark_low <= wmark_high <= nr_pages\n",
				c->key_name, c->value_str);
			return;
		}
		fprintf(stderr, "kvmmctl: set: %s %s: the watermarks must keep wmark_min "
			"<= wmark_low <= wmark_high <= nr_pages; now wmark_min %llu, "
			"wmark_low %llu, wmark_high %llu, nr_pages %llu\n", c->key_name,
			c->value_str, (unsigned long long)v[KVMM_STAT_WMARK_MIN],
			(unsigned long long)v[KVMM_STAT_WMARK_LOW],
			(unsigned long long)v[KVMM_STAT_WMARK_HIGH],
			(unsigned long long)v[KVMM_STAT_PAGES_TOTAL]);
		return;
	case KVMM_SET_NR_PAGES:
		fprintf(stderr, "kvmmctl: set: nr_pages %s: 1 .. the pool's max_pages, and "
			"not below wmark_high\n", c->value_str);
		return;
	case KVMM_SET_NS_CACHE_SHARE:
	case KVMM_SET_KEYED_SHARE:
		fprintf(stderr, "kvmmctl: set: %s %s: a percentage in 1..100\n", c->key_name,
			c->value_str);
		return;
	default:
		return;
	}
}

static int cmd_set(struct ctl *c)
{
	int res;

	kvmm_prep_set(sqe_get(), c->key, c->value);
	res = run1(c, NULL);
	if (res == -EINVAL && !lost)
		set_why(c);
	if (res < 0)
		return refused(c, "set", res);
	if (c->key == KVMM_SET_NR_PAGES) {
		if (!c->json)
			printf("nr_pages = %llu (%d cached pages migrated)\n",
			       (unsigned long long)c->value, res);
		else
			tool_json_line(json_pack("{s:o,s:i}", "nr_pages", tool_json_u64(c->value),
						 "migrated", res), stdout);
	} else if (!c->json) {
		printf("%s = %s\n", c->key_name, c->value_str);
	} else {
		tool_json_line(json_pack("{s:s}", c->key_name, c->value_str), stdout);
	}
	return 0;
}

static int cmd_probe(struct ctl *c)
{
	struct kvmm_probe *p = ring.buf;
	int res;

	kvmm_prep_probe(sqe_get(), 0, 0);
	res = run1(c, NULL);
	if (res < 0)
		return refused(c, "probe", res);
	if (c->json) {
		char ops[24], features[24];

		/* masks as strings: a JSON reader would round a 64-bit integer */
		snprintf(ops, sizeof(ops), "%#llx", (unsigned long long)p->ops[0]);
		snprintf(features, sizeof(features), "%#llx", (unsigned long long)p->features);
		tool_json_line(json_pack("{s:I,s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}",
			"abi", (json_int_t)p->abi, "nr_ops", (json_int_t)p->nr_ops,
			"ops", ops, "features", features,
			"page_size", (json_int_t)p->page_size, "nr_pages", (json_int_t)p->nr_pages,
			"max_seqs", (json_int_t)p->max_seqs,
			"max_seq_len", (json_int_t)p->max_seq_len,
			"sqe_size", (json_int_t)p->sqe_size, "cqe_size", (json_int_t)p->cqe_size),
			stdout);
		return 0;
	}
	printf("abi          %u\nopcodes      %u (mask %#llx)\nfeatures     %#llx\n"
	       "page size    %u tokens\npages        %u\nsequences    %u of up to %u tokens\n"
	       "entries      sqe %u B, cqe %u B\n", p->abi, p->nr_ops,
	       (unsigned long long)p->ops[0], (unsigned long long)p->features, p->page_size,
	       p->nr_pages, p->max_seqs, p->max_seq_len, p->sqe_size, p->cqe_size);
	return 0;
}

/* ---- events ---- */

static const char *const event_names[KVMM_EVENT_LAST] = {
	[KVMM_EVENT_STORED] = "stored",
	[KVMM_EVENT_REMOVED] = "removed",
	[KVMM_EVENT_DEMOTED] = "demoted",
	[KVMM_EVENT_PROMOTED] = "promoted",
};


static const char *name_of(const char *const *names, uint32_t nr, uint32_t i)
{
	return i < nr && names[i] ? names[i] : "?";
}

/* A page identity as text: 32 hex digits, hi then lo (XXH128's canonical order). */
static void key_hex(const struct kvmm_key *k, char *s)
{
	snprintf(s, 33, "%016llx%016llx", (unsigned long long)k->hi, (unsigned long long)k->lo);
}

static void show_event(const struct ctl *c, const struct kvmm_cache_event *e)
{
	const struct kvmm_key *keys = (const struct kvmm_key *)(e + 1);
	const char *type = name_of(event_names, KVMM_EVENT_LAST, e->type);
	bool move = e->type == KVMM_EVENT_DEMOTED || e->type == KVMM_EVENT_PROMOTED;
	char hex[33];
	uint32_t i;

	key_hex(&e->parent, hex);
	if (c->json) {
		json_t *j = json_pack("{s:o,s:s,s:I}", "seq", tool_json_u64(e->seq), "type", type,
				      "ns", (json_int_t)e->ns);
		json_t *arr = json_array();

		if (move) {
			json_object_set_new(j, "from", json_string(name_of(tier_names, KVMM_NR_TIERS,
									   e->tier)));
			json_object_set_new(j, "to", json_string(name_of(tier_names, KVMM_NR_TIERS,
									 e->to)));
		} else {
			json_object_set_new(j, "tier", json_string(name_of(tier_names, KVMM_NR_TIERS,
									   e->tier)));
		}
		json_object_set_new(j, "pages", json_integer(e->pages));
		json_object_set_new(j, "parent", json_string(hex));
		for (i = 0; i < e->pages; i++) {
			key_hex(&keys[i], hex);
			json_array_append_new(arr, json_string(hex));
		}
		json_object_set_new(j, "keys", arr);
		tool_json_line(j, stdout);
		return;
	}
	printf("%llu %s ns %u ", (unsigned long long)e->seq, type, e->ns);
	if (move)
		printf("%s -> %s", name_of(tier_names, KVMM_NR_TIERS, e->tier),
		       name_of(tier_names, KVMM_NR_TIERS, e->to));
	else
		printf("%s", name_of(tier_names, KVMM_NR_TIERS, e->tier));
	printf(" pages %u parent %s keys", e->pages, hex);
	for (i = 0; i < e->pages; i++) {
		key_hex(&keys[i], hex);
		printf(" %s", hex);
	}
	putchar('\n');
}

/* A reader that fell behind: the events it missed, in the stream itself. */
static void show_lost(const struct ctl *c, uint64_t n, uint64_t at)
{
	if (c->json)
		tool_json_line(json_pack("{s:s,s:o,s:o}", "type", "lost", "lost",
					 tool_json_u64(n), "seq", tool_json_u64(at)), stdout);
	else
		printf("lost %llu events before %llu (the buffer overwrote them)\n",
		       (unsigned long long)n, (unsigned long long)at);
}

/*
 * events: every event the instance holds, oldest first; with --follow,
 * then the new ones as they come, polling every --interval; --count N
 * stops after N events.
 */
static int cmd_events(struct ctl *c)
{
	bool follow = c->given & OPT(FOLLOW), limit = c->given & OPT(COUNT);
	uint32_t flags = (c->given & OPT(NS)) ? KVMM_EVENTS_NS : 0;
	uint64_t cursor = 0, shown = 0;

	for (;;) {
		struct kvmm_events_hdr *hdr = ring.buf;
		const char *p = (const char *)(hdr + 1);
		uint32_t cflags = 0, i;
		int res;

		kvmm_prep_events(sqe_get(), cursor, flags, flags ? c->ns : 0, 0, 0,
				 (uint32_t)ring.buf_size);
		res = run1(c, &cflags);
		if (res == -EOPNOTSUPP && !lost) {
			fprintf(stderr, "kvmmctl: events: the instance records none "
				"(turn them on: kvmmctl set events BYTES)\n");
			return EXIT_REFUSED;
		}
		if (res < 0)
			return refused(c, "events", res);
		if (hdr->lost)
			show_lost(c, hdr->lost, cursor + hdr->lost);
		for (i = 0; i < hdr->nr && (!limit || shown < c->count); i++, shown++) {
			const struct kvmm_cache_event *e = (const void *)p;

			show_event(c, e);
			p += sizeof(*e) + (size_t)e->pages * sizeof(struct kvmm_key);
		}
		fflush(stdout);
		if (limit && shown >= c->count)
			return 0;
		cursor = hdr->next;
		if (cflags & KVMM_CQE_F_MORE)
			continue;
		if (!follow)
			return 0;
		sleep_s(c->interval);
	}
}

/*
 * The commands.  @opts are the options besides the global ones it takes;
 * @parse checks and stores its operands (NULL: it takes none); @run runs
 * it on the connected ring.
 */
static const struct ctl_cmd {
	const char *name;
	const char *args;
	const char *help;
	unsigned opts;
	int (*parse)(struct ctl *c, int argc, char **argv);
	int (*run)(struct ctl *c);
} ctl_cmds[] = {
	{ "stat", "", "counters, like /proc/meminfo", 0, NULL, cmd_stat },
	{ "top", "[--interval S] [--count N]",
	  "refreshing view: pages, hit rates, drops and demotions/s", OPT(INTERVAL) | OPT(COUNT),
	  NULL, cmd_top },
	{ "tree", "[--depth N] [--limit N]", "the prefix tree", OPT(DEPTH) | OPT(LIMIT),
	  NULL, cmd_tree },
	{ "seqs", "", "open sequences", 0, NULL, cmd_seqs },
	{ "pin", "[--ns N] TOKEN...", "pin a cached prefix (it outlives kvmmctl)", OPT(NS),
	  parse_tokens, cmd_pin },
	{ "unpin", "[--ns N] TOKEN...", "drop such a pin; with no tokens, --id ID or --ns N:\n"
	  "                               drop every pin at node ID, or in namespace N",
	  OPT(ID) | OPT(NS), parse_unpin, cmd_unpin },
	{ "pins", "[--ns N]", "every pin: node id, ns, size, owning ring", OPT(NS), NULL,
	  cmd_pins },
	{ "ns", "", "per namespace: pinned and cached pages, limits, keyed pages", 0, NULL,
	  cmd_ns },
	{ "spaces", "[--ns N]", "keyed spaces: model, value size, values, pages per tier",
	  OPT(NS), NULL, cmd_spaces },
	{ "space-rm", "ID", "remove keyed space ID and every value it stores here", 0,
	  parse_space_rm, cmd_space_rm },
	{ "reclaim", "PAGES", "evict at least PAGES cached pages", 0, parse_reclaim,
	  cmd_reclaim },
	{ "drop-caches", "[TIER...]", "evict everything evictable on the tiers named (device,\n"
	  "                               host, nvme; default all), counting each tier's pages", 0,
	  parse_drop_caches, cmd_drop_caches },
	{ "check", "", "verify every invariant of kvmmd's context (kvmm_check())", 0, NULL,
	  cmd_check },
	{ "flush", "[MS]", "write every cached page not on NVMe to its file, for at most\n"
	  "                               MS milliseconds (default: half of --timeout)", 0,
	  parse_flush, cmd_flush },
	{ "set", "KEY VALUE", "wmark_min | wmark_low | wmark_high PAGES, policy lru|slru,\n"
	  "                               nr_pages PAGES (resize the pool, up to pages_max),\n"
	  "                               ns_pin_pages PAGES|auto, ns_cache_share PERCENT,\n"
	  "                               keyed_share PERCENT, events BYTES|off,\n"
	  "                               ns_kspaces SPACES, ns_kjob_bytes BYTES",
	  0, parse_set, cmd_set },
	{ "events", "[--follow] [--interval S] [--count N] [--ns N]",
	  "cache events (stored, removed, demoted, promoted) with page keys",
	  OPT(FOLLOW) | OPT(INTERVAL) | OPT(COUNT) | OPT(NS), NULL, cmd_events },
	{ "probe", "", "ABI version, opcodes, features, pool shape", 0, NULL, cmd_probe },
};

static void usage(FILE *f)
{
	const struct ctl_cmd *cmd;
	char syn[64];

	fprintf(f, "usage: kvmmctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]\n");
	for (cmd = ctl_cmds; cmd < ctl_cmds + ARRAY_LEN(ctl_cmds); cmd++) {
		snprintf(syn, sizeof(syn), "%s %s", cmd->name, cmd->args);
		fprintf(f, "  %-28s %s\n", syn, cmd->help);
	}
	fprintf(f, "Options go before or after the command; '--' ends them.\n"
		"The socket defaults to $KVMM_SOCKET, then /run/kvmm/kvmmd.sock; every\n"
		"wait for the instance ends after --timeout seconds (default %d).\n"
		"Exit: 0 done, 1 refused, 2 bad usage, 3 instance unreachable, silent or gone.\n",
		KVMM_CONNECT_TIMEOUT_MS / 1000);
}

/* ---- the command line ---- */

static const struct ctl_cmd *find_cmd(const char *name)
{
	const struct ctl_cmd *cmd;

	for (cmd = ctl_cmds; cmd < ctl_cmds + ARRAY_LEN(ctl_cmds); cmd++)
		if (!strcmp(cmd->name, name))
			return cmd;
	return NULL;
}

/* An option getopt refused: say which, as the user typed it. */
static int bad_option(int c, char **argv)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		return usage_err("option '%s' needs a value", arg);
	if (optopt && strncmp(arg, "--", 2))
		return usage_err("unknown option '-%c'", optopt);
	return usage_err("unknown option '%s'", arg);
}

/*
 * Parse the options of the command line into @c, collecting the operands
 * in order in @ops.  Return: how many operands, or -1 with *@ret the exit
 * code.
 */
static int parse_opts(struct ctl *c, int argc, char **argv, char **ops, int *ret)
{
	struct option lo[NR_OPTS + 1] = { { 0 } };
	int i, n = 0, opt;

	for (i = 0; i < NR_OPTS; i++)
		lo[i] = (struct option){ ctl_opts[i].name,
					 ctl_opts[i].arg ? required_argument : no_argument,
					 NULL, OPT_VAL + i };
	opterr = 0;
	/* "-": operands come back in order as 1; ':': a missing value as ':' */
	while ((opt = getopt_long(argc, argv, "-:", lo, NULL)) != -1) {
		if (opt == 1) {
			ops[n++] = optarg;
			continue;
		}
		opt -= OPT_VAL;
		if (opt < 0 || opt >= NR_OPTS) {
			*ret = bad_option(opt + OPT_VAL, argv);
			return -1;
		}
		*ret = ctl_opts[opt].set(c, optarg);
		if (*ret)
			return -1;
		c->given |= 1u << opt;
	}
	while (optind < argc)
		ops[n++] = argv[optind++];
	return n;
}

/* The command @ops[0] names, checked against the options given and its operands. */
static const struct ctl_cmd *check_cmd(struct ctl *c, char **ops, int n, int *ret)
{
	const struct ctl_cmd *cmd = find_cmd(ops[0]);
	int i;

	if (!cmd) {
		*ret = usage_err("unknown command '%s'", ops[0]);
		return NULL;
	}
	for (i = 0; i < NR_OPTS; i++)
		if ((c->given & ~(GLOBAL_OPTS | cmd->opts)) & (1u << i)) {
			*ret = usage_err("%s: no option --%s", cmd->name, ctl_opts[i].name);
			return NULL;
		}
	if (cmd->parse)
		*ret = cmd->parse(c, n - 1, ops + 1);
	else if (n > 1)
		*ret = usage_err("%s: unexpected argument '%s'", cmd->name, ops[1]);
	return *ret ? NULL : cmd;
}

/*
 * Parse the whole command line into @c and find the command.  Return: the
 * command, or NULL with *@ret the exit code (0 for --help).
 */
static const struct ctl_cmd *parse_cmdline(struct ctl *c, int argc, char **argv, int *ret)
{
	const struct ctl_cmd *cmd = NULL;
	char **ops = calloc((size_t)argc + 1, sizeof(*ops));
	int n;

	if (!ops) {
		fprintf(stderr, "kvmmctl: out of memory\n");
		*ret = EXIT_REFUSED;
		return NULL;
	}
	n = parse_opts(c, argc, argv, ops, ret);
	if (n >= 0 && (c->given & OPT(HELP))) {
		usage(stdout);
		*ret = 0;
	} else if (!n) {
		usage(stderr);
		*ret = EXIT_USAGE;
	} else if (n > 0) {
		cmd = check_cmd(c, ops, n, ret);
	}
	free(ops);
	return cmd;
}

int main(int argc, char **argv)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = BUF_SIZE };
	struct ctl c = {
		.path = getenv("KVMM_SOCKET"),
		.timeout = { .tv_sec = KVMM_CONNECT_TIMEOUT_MS / 1000 },
		.interval = 1.0, .depth = UINT32_MAX, .limit = 1000,
	};
	const struct ctl_cmd *cmd;
	int ret = 0;

	if (!c.path || !*c.path)
		c.path = "/run/kvmm/kvmmd.sock";
	cmd = parse_cmdline(&c, argc, argv, &ret);
	if (!cmd)
		goto out;
	ret = kvmm_ring_connect_timeout(c.path, &rp, &ring, &c.timeout);
	if (ret) {
		fprintf(stderr, "kvmmctl: cannot reach %s: %s%s\n", c.path, errno_str(-ret),
			ret == -EPROTO ? " (not a kvmm server, or another ABI)" :
			ret == -ETIMEDOUT ? " (no answer within --timeout)" : "");
		ret = EXIT_CONNECT;
		goto out;
	}
	ret = cmd->run(&c);
	kvmm_ring_exit(&ring);
out:
	free(c.tok);
	return ret;
}
