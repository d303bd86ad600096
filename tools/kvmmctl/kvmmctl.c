// SPDX-License-Identifier: MIT
/*
 * tools/kvmmctl/kvmmctl.c - kvmmctl: inspect and steer a running kvmm
 * instance (kvmmd, or an engine's admin socket) through the command ring.
 * It uses only the public API and the ring, so it is also a conformance
 * test of the ABI.
 *
 *   kvmmctl [--socket PATH] [--json] COMMAND [ARGS]     (see kvmmctl(8))
 *
 * Exit codes: 0 done; 1 the instance refused the command (the reason is
 * printed); 2 bad usage; 3 no instance could be reached.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libkvmm.h>

#include "pins.h"

#define EXIT_REFUSED	1
#define EXIT_USAGE	2
#define EXIT_CONNECT	3

#define BUF_SIZE	(1u << 20)

static bool json;
static struct kvmm_ring ring;

static const char *errname(int err)
{
	switch (err) {
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case EBUSY: return "EBUSY";
	case ENOENT: return "ENOENT";
	case ENOMEM: return "ENOMEM";
	case EFAULT: return "EFAULT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EIO: return "EIO";
	case EDQUOT: return "EDQUOT";
	case EPERM: return "EPERM";
	default: return "E?";
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmmctl [--socket PATH] [--json] COMMAND [ARGS]\n"
		"  stat                       counters, like /proc/meminfo\n"
		"  top [--interval S] [--count N]   refreshing view: pages, hit rate, evictions/s\n"
		"  tree [--depth N] [--limit N]     the prefix tree\n"
		"  seqs                       open sequences\n"
		"  pin [--ns N] TOKEN...      pin a cached prefix (it outlives kvmmctl)\n"
		"  unpin [--ns N] TOKEN...    drop such a pin\n"
		"  pins [--ns N]              every pin: node id, ns, size, owning ring\n"
		"  unpin --id ID | --ns N     drop every pin at node ID, or in namespace N\n"
		"  ns                         per namespace: pinned and cached pages, limits\n"
		"  reclaim PAGES              evict at least PAGES cached pages\n"
		"  drop-caches                evict everything evictable\n"
		"  set KEY VALUE              wmark_min | wmark_low | wmark_high PAGES, policy lru|slru,\n"
		"                             nr_pages PAGES (resize the pool, up to pages_max),\n"
		"                             ns_pin_pages PAGES|auto, ns_cache_share PERCENT\n"
		"  probe                      ABI version, opcodes, features, pool shape\n"
		"The socket defaults to $KVMM_SOCKET, then /run/kvmm/kvmmd.sock.\n");
}

/* One command, synchronously: submit, wait, reap. */
/* A number argument, or exit with a usage error naming the option. */
static uint64_t num_arg(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (!*s || *end || errno || *s == '-') {
		fprintf(stderr, "kvmmctl: %s: '%s' is not a number\n", opt, s);
		exit(EXIT_USAGE);
	}
	return v;
}

static int run1(struct kvmm_sqe *sqe, uint32_t *cflags)
{
	struct kvmm_cqe *cqe;
	int ret, res;

	(void)sqe;
	ret = kvmm_submit_and_wait(&ring, 1);
	if (ret < 0)
		return ret;
	ret = kvmm_wait_cqe(&ring, &cqe);
	if (ret)
		return ret;
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

static int refused(const char *what, int res)
{
	fprintf(stderr, "kvmmctl: %s: %s (%s)\n", what, strerror(-res), errname(-res));
	return EXIT_REFUSED;
}

static int fetch_stats(uint64_t *v, uint32_t *nr)
{
	struct kvmm_sqe *sqe = sqe_get();
	struct kvmm_stats_snap *snap = ring.buf;
	int res;

	kvmm_prep_stats(sqe, 0, 0, (uint32_t)ring.buf_size);
	res = run1(sqe, NULL);
	if (res < 0)
		return res;
	*nr = snap->nr < NR_KVMM_STATS ? snap->nr : NR_KVMM_STATS;
	memcpy(v, snap + 1, *nr * sizeof(*v));
	return 0;
}

static int cmd_stat(void)
{
	uint64_t v[NR_KVMM_STATS];
	uint32_t nr, i;
	int res = fetch_stats(v, &nr);

	if (res)
		return refused("stat", res);
	if (json) {
		printf("{");
		for (i = 0; i < nr; i++)
			printf("%s\"%s\":%llu", i ? "," : "", kvmm_stat_name(i),
			       (unsigned long long)v[i]);
		printf("}\n");
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
};

static int cmd_top(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'c' },
		{ 0 }
	};
	uint64_t prev[NR_KVMM_STATS], cur[NR_KVMM_STATS];
	double interval = 1.0, t0, t1;
	long count = -1, k;
	bool tty = isatty(STDOUT_FILENO) && !json;
	uint32_t nr;
	int c, res;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'i') {
			char *end;

			interval = strtod(optarg, &end);
			if (*end || !*optarg)
				interval = 0;
		} else if (c == 'c') {
			count = (long)num_arg("--count", optarg);
		} else {
			return EXIT_USAGE;
		}
	}
	if (interval <= 0) {
		fprintf(stderr, "kvmmctl: top: --interval must be positive\n");
		return EXIT_USAGE;
	}
	res = fetch_stats(prev, &nr);
	if (res)
		return refused("top", res);
	t0 = now_s();
	for (k = 0; count < 0 || k < count; k++) {
		double dt, hit;
		uint64_t dm, dh, de;

		usleep((useconds_t)(interval * 1e6));
		res = fetch_stats(cur, &nr);
		if (res)
			return refused("top", res);
		t1 = now_s();
		dt = t1 - t0;
		dm = cur[KVMM_STAT_MATCH_TOKENS] - prev[KVMM_STAT_MATCH_TOKENS];
		dh = cur[KVMM_STAT_HIT_TOKENS] - prev[KVMM_STAT_HIT_TOKENS];
		de = cur[KVMM_STAT_EVICT_PAGES] - prev[KVMM_STAT_EVICT_PAGES];
		hit = dm ? (double)dh / (double)dm : 0.0;
		if (!json && tty)
			printf("\033[H\033[2J");
		if (!json && (tty || k == 0)) {
			for (c = 0; c < (int)ARRAY_LEN(top_cols); c++)
				printf("%10s ", top_cols[c].head);
			printf("%8s %10s %6s\n", "hit", "evict/s", "seqs");
		}
		if (json)
			printf("{\"t\":%.3f", t1);
		for (c = 0; c < (int)ARRAY_LEN(top_cols); c++) {
			unsigned long long v = (unsigned long long)cur[top_cols[c].item];

			if (json)
				printf(",\"%s\":%llu", kvmm_stat_name(top_cols[c].item), v);
			else
				printf("%10llu ", v);
		}
		if (json)
			printf(",\"hit_rate\":%.4f,\"evicted_pages_per_s\":%.1f,\"seqs_open\":%llu}\n",
			       hit, (double)de / dt, (unsigned long long)cur[KVMM_STAT_SEQS_OPEN]);
		else
			printf("%8.4f %10.1f %6llu\n", hit, (double)de / dt,
			       (unsigned long long)cur[KVMM_STAT_SEQS_OPEN]);
		fflush(stdout);
		memcpy(prev, cur, sizeof(prev));
		t0 = t1;
	}
	return 0;
}

/* Page through a DUMP; @fn gets each record. */
static int dump_all(uint32_t kind, int (*fn)(const void *rec, void *arg), void *arg)
{
	uint64_t cursor = 0;

	do {
		struct kvmm_sqe *sqe = sqe_get();
		struct kvmm_dump_hdr *hdr = ring.buf;
		uint32_t i;
		int res;

		kvmm_prep_dump(sqe, kind, cursor, 0, 0, (uint32_t)ring.buf_size);
		res = run1(sqe, NULL);
		if (res < 0)
			return res;
		for (i = 0; i < hdr->nr; i++)
			if (fn((char *)(hdr + 1) + (size_t)i * hdr->rec_size, arg))
				return 0;
		cursor = hdr->next;
	} while (cursor);
	return 0;
}

struct tree_opts {
	uint32_t max_depth;
	uint64_t limit, shown, hidden;
};

static int show_node(const void *rec, void *arg)
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
	if (json) {
		printf("%s{\"id\":%llu,\"parent\":%llu,\"ns\":%u,\"depth\":%u,\"len\":%u,"
		       "\"lock_ref\":%u,\"pins\":%u,\"prio\":%u,\"tier\":%u,\"hits\":%u,"
		       "\"atime\":%llu,\"evictable\":%s,\"host_copy\":%s,\"token0\":%u}",
		       o->shown > 1 ? "," : "",
		       (unsigned long long)n->id, (unsigned long long)n->parent, n->ns, n->depth,
		       n->len, n->lock_ref, n->pins, n->prio, n->tier, n->hits,
		       (unsigned long long)n->atime,
		       n->flags & KVMM_DUMP_F_EVICTABLE ? "true" : "false",
		       n->flags & KVMM_DUMP_F_SHADOW ? "true" : "false", n->token0);
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

static int cmd_tree(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "depth", required_argument, NULL, 'd' },
		{ "limit", required_argument, NULL, 'l' },
		{ 0 }
	};
	struct tree_opts o = { .max_depth = UINT32_MAX, .limit = 1000 };
	int c, res;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'd')
			o.max_depth = (uint32_t)num_arg("--depth", optarg);
		else if (c == 'l')
			o.limit = num_arg("--limit", optarg);
		else
			return EXIT_USAGE;
	}
	if (json)
		printf("[");
	else
		printf("tokens   (per node; indented by depth)\n");
	res = dump_all(KVMM_DUMP_NODES, show_node, &o);
	if (json)
		printf("]\n");
	if (res)
		return refused("tree", res);
	if (o.hidden && !json)
		printf("... %llu more nodes not shown (--depth, --limit)\n",
		       (unsigned long long)o.hidden);
	return 0;
}

static int show_seq(const void *rec, void *arg)
{
	const struct kvmm_dump_seq *s = rec;
	uint64_t *n = arg;

	if (json)
		printf("%s{\"seq\":%u,\"ns\":%u,\"len\":%u,\"cached\":%u,\"owner\":%u}",
		       (*n)++ ? "," : "", s->seq, s->ns, s->len, s->cached, s->owner);
	else
		printf("%8u %8u %10u %10u %8u\n", s->seq, s->ns, s->len, s->cached, s->owner);
	return 0;
}

static int cmd_seqs(void)
{
	uint64_t n = 0;
	int res;

	if (json)
		printf("[");
	else
		printf("%8s %8s %10s %10s %8s\n", "seq", "ns", "len", "cached", "ring");
	res = dump_all(KVMM_DUMP_SEQS, show_seq, &n);
	if (json)
		printf("]\n");
	return res ? refused("seqs", res) : 0;
}

static int cmd_pin(int argc, char **argv, bool pin)
{
	static const struct option lo[] = {
		{ "ns", required_argument, NULL, 'n' },
		{ 0 }
	};
	uint32_t *tok = ring.buf, n = 0, ns = 0;
	struct kvmm_sqe *sqe;
	int c, res;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c != 'n')
			return EXIT_USAGE;
		ns = (uint32_t)num_arg("--ns", optarg);
	}
	for (; optind < argc; optind++) {
		char *end;

		if (n == ring.buf_size / sizeof(*tok)) {
			fprintf(stderr, "kvmmctl: too many tokens\n");
			return EXIT_USAGE;
		}
		tok[n++] = (uint32_t)strtoul(argv[optind], &end, 0);
		if (*end || !*argv[optind]) {
			fprintf(stderr, "kvmmctl: '%s' is not a token id\n", argv[optind]);
			return EXIT_USAGE;
		}
	}
	if (!n) {
		fprintf(stderr, "kvmmctl: %s: give the prefix's token ids\n", pin ? "pin" : "unpin");
		return EXIT_USAGE;
	}
	sqe = sqe_get();
	if (pin)
		kvmm_prep_pin(sqe, ns, 0, 0, n, KVMM_PIN_KEEP);
	else
		kvmm_prep_unpin(sqe, ns, 0, 0, n, KVMM_PIN_KEEP);
	res = run1(sqe, NULL);
	if (res < 0)
		return refused(pin ? "pin" : "unpin", res);
	if (json)
		printf("{\"tokens\":%d}\n", res);
	else
		printf("%s %d tokens\n", pin ? "pinned" : "unpinned", res);
	return 0;
}

static int cmd_simple(const char *what, struct kvmm_sqe *sqe, const char *unit)
{
	int res = run1(sqe, NULL);

	if (res < 0)
		return refused(what, res);
	if (json)
		printf("{\"%s\":%d}\n", unit, res);
	else
		printf("%s: %d %s\n", what, res, unit);
	return 0;
}

static int cmd_set(int argc, char **argv)
{
	static const char *const keys[KVMM_SET_LAST] = {
		[KVMM_SET_WMARK_MIN] = "wmark_min", [KVMM_SET_WMARK_LOW] = "wmark_low",
		[KVMM_SET_WMARK_HIGH] = "wmark_high", [KVMM_SET_POLICY] = "policy",
		[KVMM_SET_NR_PAGES] = "nr_pages",
		[KVMM_SET_NS_PIN_PAGES] = "ns_pin_pages",
		[KVMM_SET_NS_CACHE_SHARE] = "ns_cache_share",
	};
	struct kvmm_sqe *sqe;
	uint64_t value;
	uint32_t key;
	char *end;
	int res;

	if (argc != 3)
		return EXIT_USAGE;
	for (key = 0; key < KVMM_SET_LAST && strcmp(keys[key], argv[1]); key++)
		;
	if (key == KVMM_SET_LAST) {
		fprintf(stderr, "kvmmctl: set: unknown key '%s'\n", argv[1]);
		return EXIT_USAGE;
	}
	if (key == KVMM_SET_POLICY) {
		if (!strcmp(argv[2], "lru"))
			value = KVMM_POLICY_LRU;
		else if (!strcmp(argv[2], "slru"))
			value = KVMM_POLICY_SLRU;
		else {
			fprintf(stderr, "kvmmctl: set policy: lru or slru\n");
			return EXIT_USAGE;
		}
	} else if (key == KVMM_SET_NS_PIN_PAGES && !strcmp(argv[2], "auto")) {
		value = KVMM_NS_PIN_AUTO;
	} else {
		value = strtoull(argv[2], &end, 0);
		if (*end || !*argv[2]) {
			fprintf(stderr, "kvmmctl: set: '%s' is not a number\n", argv[2]);
			return EXIT_USAGE;
		}
	}
	sqe = sqe_get();
	kvmm_prep_set(sqe, key, value);
	res = run1(sqe, NULL);
	if (res < 0)
		return refused("set", res);
	if (key == KVMM_SET_NR_PAGES) {
		if (!json)
			printf("nr_pages = %s (%d cached pages migrated)\n", argv[2], res);
		else
			printf("{\"nr_pages\":%s,\"migrated\":%d}\n", argv[2], res);
	} else if (!json) {
		printf("%s = %s\n", argv[1], argv[2]);
	} else {
		printf("{\"%s\":\"%s\"}\n", argv[1], argv[2]);
	}
	return 0;
}

static int cmd_probe(void)
{
	struct kvmm_sqe *sqe = sqe_get();
	struct kvmm_probe *p = ring.buf;
	int res;

	kvmm_prep_probe(sqe, 0, 0);
	res = run1(sqe, NULL);
	if (res < 0)
		return refused("probe", res);
	if (json) {
		printf("{\"abi\":%u,\"nr_ops\":%u,\"ops\":\"%#llx\",\"features\":\"%#llx\","
		       "\"page_size\":%u,\"nr_pages\":%u,\"max_seqs\":%u,\"max_seq_len\":%u,"
		       "\"sqe_size\":%u,\"cqe_size\":%u}\n", p->abi, p->nr_ops,
		       (unsigned long long)p->ops[0], (unsigned long long)p->features,
		       p->page_size, p->nr_pages, p->max_seqs, p->max_seq_len, p->sqe_size,
		       p->cqe_size);
		return 0;
	}
	printf("abi          %u\nopcodes      %u (mask %#llx)\nfeatures     %#llx\n"
	       "page size    %u tokens\npages        %u\nsequences    %u of up to %u tokens\n"
	       "entries      sqe %u B, cqe %u B\n", p->abi, p->nr_ops,
	       (unsigned long long)p->ops[0], (unsigned long long)p->features, p->page_size,
	       p->nr_pages, p->max_seqs, p->max_seq_len, p->sqe_size, p->cqe_size);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = BUF_SIZE };
	const char *path = getenv("KVMM_SOCKET");
	const char *cmd;
	struct kvmm_sqe *sqe;
	char *end;
	int c, ret;

	if (!path)
		path = "/run/kvmm/kvmmd.sock";
	while ((c = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
		switch (c) {
		case 's': path = optarg; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	ret = kvmm_ring_connect(path, &rp, &ring);
	if (ret) {
		fprintf(stderr, "kvmmctl: cannot reach %s: %s\n", path, strerror(-ret));
		return EXIT_CONNECT;
	}
	if (!strcmp(cmd, "stat")) {
		ret = cmd_stat();
	} else if (!strcmp(cmd, "top")) {
		ret = cmd_top(argc, argv);
	} else if (!strcmp(cmd, "tree")) {
		ret = cmd_tree(argc, argv);
	} else if (!strcmp(cmd, "seqs")) {
		ret = cmd_seqs();
	} else if (kvmmctl_pins_owns(cmd, argc, argv)) {
		ret = kvmmctl_pins_run(&ring, json, cmd, argc, argv);
	} else if (!strcmp(cmd, "pin") || !strcmp(cmd, "unpin")) {
		ret = cmd_pin(argc, argv, cmd[0] == 'p');
	} else if (!strcmp(cmd, "reclaim")) {
		unsigned long pages = argc == 2 ? strtoul(argv[1], &end, 0) : 0;

		if (argc != 2 || *end || !pages || pages > UINT32_MAX) {
			fprintf(stderr, "kvmmctl: reclaim PAGES (a positive number)\n");
			ret = EXIT_USAGE;
		} else {
			sqe = sqe_get();
			kvmm_prep_reclaim(sqe, (uint32_t)pages);
			ret = cmd_simple("reclaim", sqe, "pages");
		}
	} else if (!strcmp(cmd, "drop-caches")) {
		sqe = sqe_get();
		kvmm_prep_drop_caches(sqe);
		ret = cmd_simple("drop-caches", sqe, "pages");
	} else if (!strcmp(cmd, "set")) {
		ret = cmd_set(argc, argv);
	} else if (!strcmp(cmd, "probe")) {
		ret = cmd_probe();
	} else {
		fprintf(stderr, "kvmmctl: unknown command '%s'\n", cmd);
		ret = EXIT_USAGE;
	}
	if (ret == EXIT_USAGE && strcmp(cmd, "set") && strcmp(cmd, "reclaim"))
		usage(stderr);
	kvmm_ring_exit(&ring);
	return ret;
}
