// SPDX-License-Identifier: MIT
/*
 * tools/lib/util.c - small helpers the tools share: sorting, medians and
 * percentiles, and option parsing that refuses what it cannot read.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>

#include <libkvmm.h>

#include "parse.h"
#include "tools.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

void sort_u64(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
}

void sort_double(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double median(double *v, unsigned n)
{
	sort_double(v, n);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Nearest rank on sorted data; 0 for none. */
double percentile(const double *sorted, size_t n, double q)
{
	size_t k;

	if (!n)
		return 0;
	k = (size_t)ceil(q * (double)n);
	return sorted[k ? k - 1 : 0];
}

void die_usage(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", tool_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (!*s || *end || errno || *s == '-')
		die_usage("%s: '%s' is not a non-negative number", opt, s);
	return v;
}

double parse_double(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < 0)
		die_usage("%s: '%s' is not a non-negative number", opt, s);
	return v;
}

/**
 * die_bad_option() - say what was wrong with an option getopt_long() refused
 * @opts: the long options
 * @arg: the argument it refused (argv[optind - 1])
 * @opt: what getopt_long() returned: ':' (a value missing; the option
 *       string must start with ':') or '?'
 *
 * Names the option, suggests the nearest known one for a mistyped name,
 * and points at --help, in one line instead of the whole help.
 *
 * Context: exits 2 through die_usage().
 */
void die_bad_option(const struct option *opts, const char *arg, int opt)
{
	const struct option *o;
	const char *near;
	char name[65];
	size_t n;

	if (opt == ':')
		die_usage("%s needs a value (see --help)", arg);
	if (strncmp(arg, "--", 2))
		die_usage("unknown option '%s' (see --help)", arg);
	n = strcspn(arg + 2, "=");
	snprintf(name, sizeof(name), "%.*s", (int)(n < 64 ? n : 64), arg + 2);
	for (o = opts; o->name; o++)
		/* a known name refused: given a value it takes none */
		if (!strcmp(o->name, name))
			die_usage("--%s takes no value (see --help)", name);
	/* a prefix of several (getopt_long() takes a unique one) */
	for (o = opts; n && o->name; o++)
		if (!strncmp(o->name, name, n))
			die_usage("--%s is ambiguous: --%s and others start so (see --help)",
				  name, o->name);
	near = option_nearest(name, opts);
	if (near)
		die_usage("unknown option --%s: did you mean --%s? (see --help)", name, near);
	die_usage("unknown option --%s (see --help)", name);
}

/* A byte count with an optional K, M, G or T suffix (powers of 1024). */
uint64_t parse_size(const char *opt, const char *s)
{
	uint64_t v;
	int ret = parse_bytes(s, UINT64_MAX, &v);

	if (ret == -ERANGE)
		die_usage("%s: '%s' is too large", opt, s);
	if (ret)
		die_usage("%s: '%s' is not a size (a number, then K, M, G or T)", opt, s);
	return v;
}

/*
 * Context parameters for a tool that computes no attention: a 2-byte
 * stand-in per token, so the mock backend's pool costs next to nothing
 * and only the page and sequence counts matter.
 */
struct kvmm_params tool_params(uint32_t page_size, uint32_t nr_pages, uint32_t max_seqs,
			       uint32_t max_seq_len)
{
	struct kvmm_params p;

	kvmm_params_init(&p);
	p.model = (struct kvmm_model){ .layers = 1, .kv_heads = 1, .head_dim = 1,
				       .dtype_bytes = 2, .attn = KVMM_ATTN_MHA };
	p.page_size = page_size;
	p.nr_pages = nr_pages;
	p.max_seqs = max_seqs;
	p.max_seq_len = max_seq_len;
	return p;
}

/* How long ring_sqe() waits for the server to take submitted entries. */
#define RING_SQE_WAIT_NS	(2 * 1000000000ull)

/**
 * ring_sqe() - the next free submission entry, waiting for room if need be
 * @ring: the ring
 * @sqep: out: the entry, zeroed
 *
 * kvmm_get_sqe() returns NULL when the SQ is full.  When what fills it
 * has been submitted, the server frees the slots as it takes them (it
 * publishes sq_head before the completions), so this submits nothing and
 * waits, yielding, for one to free.  When entries prepared but not yet
 * submitted fill it, the caller's batch is larger than the ring: waiting
 * would never end.  Tools use this rather than kvmm_get_sqe(), whose NULL
 * they would otherwise write through.
 *
 * Return: 0; -ENOSPC when the caller's own unsubmitted entries fill the
 * SQ; -EBUSY when the server took none within 2 s (its CQ is full: reap
 * first).
 */
int ring_sqe(struct kvmm_ring *ring, struct kvmm_sqe **sqep)
{
	uint64_t deadline = 0;

	while (!(*sqep = kvmm_get_sqe(ring))) {
		if (ring->sqe_tail - ring->sq_tail > ring->sq_mask)
			return -ENOSPC;
		if (!deadline)
			deadline = now_ns() + RING_SQE_WAIT_NS;
		else if (now_ns() > deadline)
			return -EBUSY;
		sched_yield();
	}
	return 0;
}

/*
 * Submit the @n prepared entries, wait for their completions and reap
 * them all.  With @res, each result goes there (res[i] for the i-th entry
 * prepared: completions are matched by user_data, which this sets, as a
 * PROMOTE from NVMe completes after the entries behind it) and the return
 * is 0 or a transport error; without, the return is the first failed
 * command's.
 */
int ring_run(struct kvmm_ring *ring, uint32_t n, int32_t *res)
{
	struct kvmm_cqe *cqe;
	int ret, first = 0;
	uint32_t i;

	for (i = 0; i < n; i++)
		ring->sqes[(ring->sqe_tail - n + i) & ring->sq_mask].user_data = i;
	ret = kvmm_submit_and_wait(ring, n);
	if (ret < 0)
		return ret;
	for (i = 0; i < n; i++) {
		/* all there, as a rule: a wait only for what the I/O worker owes */
		ret = kvmm_peek_cqe(ring, &cqe) ? kvmm_wait_cqe(ring, &cqe) : 0;
		if (ret)
			return ret;
		if (res && cqe->user_data < n)
			res[cqe->user_data] = cqe->res;
		else if (!res && cqe->res < 0 && !first)
			first = cqe->res;
		kvmm_cqe_seen(ring, cqe);
	}
	return first;
}
