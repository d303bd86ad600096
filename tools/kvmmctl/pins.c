// SPDX-License-Identifier: MIT
/*
 * tools/kvmmctl/pins.c - the operator's view of pins and namespaces:
 *
 *   kvmmctl pins [--ns NS]       every node pins end at: id, ns, size, owner
 *   kvmmctl ns                   per namespace: pinned and cached pages, limits
 *   kvmmctl unpin --id ID        drop every pin ending at node ID
 *   kvmmctl unpin --ns NS        drop every pin in namespace NS
 *
 * Pins are dropped with KVMM_OP_PIN_DROP, whoever took them (a tenant's
 * ring, KVMM_PIN_KEEP, the direct API): the way out when a tenant pinned
 * what it should not have and left.  Only an unbound (operator) ring may.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pins.h"

#define EXIT_REFUSED	1
#define EXIT_USAGE	2

static struct kvmm_ring *ring;
static bool json;

static int refused(const char *what, int res)
{
	const char *name = res == -EDQUOT ? "EDQUOT" : res == -EPERM ? "EPERM" :
			   res == -ENOENT ? "ENOENT" : res == -EINVAL ? "EINVAL" : "E?";

	fprintf(stderr, "kvmmctl: %s: %s (%s)\n", what, strerror(-res), name);
	return EXIT_REFUSED;
}

/* A number argument that fits @max, or exit with a usage error naming @opt. */
static uint64_t num_arg(const char *opt, const char *s, uint64_t max)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (!*s || *end || errno || *s == '-' || v > max) {
		fprintf(stderr, "kvmmctl: %s: '%s' is not a number up to %llu\n", opt, s,
			(unsigned long long)max);
		exit(EXIT_USAGE);
	}
	return v;
}

static int run1(void)
{
	struct kvmm_cqe *cqe;
	int ret;

	ret = kvmm_submit_and_wait(ring, 1);
	if (ret < 0)
		return ret;
	ret = kvmm_wait_cqe(ring, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	kvmm_cqe_seen(ring, cqe);
	return ret;
}

static struct kvmm_sqe *sqe_get(void)
{
	struct kvmm_sqe *sqe = kvmm_get_sqe(ring);

	if (!sqe) {
		fprintf(stderr, "kvmmctl: ring full\n");
		exit(EXIT_REFUSED);
	}
	return sqe;
}

/* Page through a DUMP of @kind; @fn gets each record. */
static int dump_all(uint32_t kind, void (*fn)(const void *rec, void *arg), void *arg)
{
	uint64_t cursor = 0;

	do {
		struct kvmm_dump_hdr *hdr = ring->buf;
		uint32_t i;
		int res;

		kvmm_prep_dump(sqe_get(), kind, cursor, 0, 0, (uint32_t)ring->buf_size);
		res = run1();
		if (res < 0)
			return res;
		for (i = 0; i < hdr->nr; i++)
			fn((char *)(hdr + 1) + (size_t)i * hdr->rec_size, arg);
		cursor = hdr->next;
	} while (cursor);
	return 0;
}

struct pins_opts {
	bool all;
	uint32_t ns;
	uint64_t shown;
};

static void show_pin(const void *rec, void *arg)
{
	const struct kvmm_dump_pin *p = rec;
	struct pins_opts *o = arg;

	if (!o->all && p->ns != o->ns)
		return;
	if (json)
		printf("%s{\"id\":%llu,\"ns\":%u,\"tokens\":%u,\"pages\":%u,\"pins\":%u,"
		       "\"keep\":%u,\"ring\":%u}", o->shown ? "," : "",
		       (unsigned long long)p->id, p->ns, p->tokens, p->pages, p->pins,
		       p->keep, p->owner);
	else
		printf("%12llu %10u %10u %8u %5u %5u %6u\n", (unsigned long long)p->id, p->ns,
		       p->tokens, p->pages, p->pins, p->keep, p->owner);
	o->shown++;
}

static int cmd_pins(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ns", required_argument, NULL, 'n' },
		{ 0 }
	};
	struct pins_opts o = { .all = true };
	int c, res;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c != 'n')
			return EXIT_USAGE;
		o.all = false;
		o.ns = (uint32_t)num_arg("--ns", optarg, UINT32_MAX);
	}
	if (optind < argc) {
		fprintf(stderr, "kvmmctl: pins: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (json)
		printf("[");
	else
		printf("%12s %10s %10s %8s %5s %5s %6s\n", "id", "ns", "tokens", "pages",
		       "pins", "keep", "ring");
	res = dump_all(KVMM_DUMP_PINS, show_pin, &o);
	if (json)
		printf("]\n");
	return res ? refused("pins", res) : 0;
}

static void show_ns(const void *rec, void *arg)
{
	const struct kvmm_dump_ns *n = rec;
	uint64_t *shown = arg;

	if (json)
		printf("%s{\"ns\":%u,\"pinned\":%llu,\"cached\":%llu,\"pin_limit\":%llu,"
		       "\"cache_limit\":%llu}", (*shown)++ ? "," : "", n->ns,
		       (unsigned long long)n->pinned, (unsigned long long)n->cached,
		       (unsigned long long)n->pin_limit, (unsigned long long)n->cache_limit);
	else
		printf("%10u %10llu %10llu %10llu %12llu\n", n->ns,
		       (unsigned long long)n->pinned, (unsigned long long)n->cached,
		       (unsigned long long)n->pin_limit, (unsigned long long)n->cache_limit);
}

static int cmd_ns(int argc, char **argv)
{
	uint64_t shown = 0;
	int res;

	if (argc > 1) {
		fprintf(stderr, "kvmmctl: ns: unexpected argument '%s'\n", argv[1]);
		return EXIT_USAGE;
	}
	if (json)
		printf("[");
	else
		printf("%10s %10s %10s %10s %12s\n", "ns", "pinned", "cached", "pin_limit",
		       "cache_limit");
	res = dump_all(KVMM_DUMP_NS, show_ns, &shown);
	if (json)
		printf("]\n");
	return res ? refused("ns", res) : 0;
}

static int cmd_unpin(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "id", required_argument, NULL, 'i' },
		{ "ns", required_argument, NULL, 'n' },
		{ 0 }
	};
	bool by_id = false, by_ns = false;
	uint64_t id = 0;
	uint32_t ns = 0;
	int c, res;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'i') {
			by_id = true;
			id = num_arg("--id", optarg, UINT64_MAX);
		} else if (c == 'n') {
			by_ns = true;
			ns = (uint32_t)num_arg("--ns", optarg, UINT32_MAX);
		} else {
			return EXIT_USAGE;
		}
	}
	if (by_id == by_ns || optind < argc) {
		fprintf(stderr, "kvmmctl: unpin: give --id ID or --ns NS (or token ids)\n");
		return EXIT_USAGE;
	}
	if (by_id)
		kvmm_prep_pin_drop(sqe_get(), KVMM_PIN_DROP_ID, 0, id);
	else
		kvmm_prep_pin_drop(sqe_get(), KVMM_PIN_DROP_NS, ns, 0);
	res = run1();
	if (res < 0)
		return refused("unpin", res);
	if (json)
		printf("{\"pins\":%d}\n", res);
	else
		printf("unpinned %d pins\n", res);
	return 0;
}

bool kvmmctl_pins_owns(const char *cmd, int argc, char **argv)
{
	int i;

	if (!strcmp(cmd, "pins") || !strcmp(cmd, "ns"))
		return true;
	if (strcmp(cmd, "unpin"))
		return false;
	/* unpin with token ids (not options, not --ns's value) is kvmmctl.c's */
	for (i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--id", 4))
			return true;
		if (!strcmp(argv[i], "--ns")) {
			i++;
			continue;
		}
		if (argv[i][0] != '-' || !strcmp(argv[i], "--"))
			return false;
	}
	return true;
}

int kvmmctl_pins_run(struct kvmm_ring *r, bool j, const char *cmd, int argc, char **argv)
{
	ring = r;
	json = j;
	if (!strcmp(cmd, "pins"))
		return cmd_pins(argc, argv);
	if (!strcmp(cmd, "ns"))
		return cmd_ns(argc, argv);
	return cmd_unpin(argc, argv);
}
