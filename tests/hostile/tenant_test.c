// SPDX-License-Identifier: MIT
/*
 * tests/hostile/tenant_test.c - kvmm_hostile_tenant: a tenant of kvmmd
 * (bound to its uid's namespace by --ns-per-uid, running as another uid)
 * tries to hold the pool: it caches nearly all of it, pins all it can
 * with KVMM_PIN_KEEP and exits, reading no page-table row (SEQ_ROW) but
 * its own on the way.  Its pins stop at the namespace's pin
 * limit (-EDQUOT); it may PREFETCH (and cancel) in its namespace only;
 * another tenant can still allocate; the operator lists
 * the pins with kvmmctl, drops them by node id and by namespace, and
 * drop-caches then frees the rest.  kvmmd stays up and its kvmm_check()
 * at exit holds.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helpers.h"
#include "hostile.h"

#define PAGE		16		/* tokens per page */
#define POOL		128		/* pages */
#define HOG_TOKENS	(120 * PAGE)	/* what the hog caches */
#define OTHER_UID	65533u
#define TIMEOUT_MS	10000

struct tenant {
	char dir[64];
	char sock[96];
	pid_t kvmmd;
};

/* kvmmd --ns-per-uid on a small pool, its socket open to every uid. */
static int kvmmd_start(struct tenant *t, const char *extra1, const char *extra2)
{
	const char *argv[] = { "kvmmd", "--socket", t->sock, "--ns-per-uid", "--quiet",
			       "--pages", "128", "--page-size", "16", "--layers", "1",
			       "--kv-heads", "1", "--head-dim", "8", "--max-seqs", "8",
			       "--max-seq-len", "4096", extra1, extra2, NULL };

	memset(t, 0, sizeof(*t));
	t->kvmmd = -1;
	if (hostile_tmpdir(t->dir, sizeof(t->dir)))
		return -1;
	snprintf(t->sock, sizeof(t->sock), "%s/kvmmd.sock", t->dir);
	t->kvmmd = hostile_spawn(argv, -1);
	if (t->kvmmd < 0 || hostile_wait_socket(t->sock, TIMEOUT_MS))
		return -1;
	return chmod(t->sock, 0777);
}

/* Stop kvmmd; Return: its exit status (0: kvmm_check() held at exit). */
static int tenant_stop(struct tenant *t)
{
	int st = -1;

	if (t->kvmmd > 0) {
		kill(t->kvmmd, SIGTERM);
		st = hostile_reap(t->kvmmd, TIMEOUT_MS);
		if (st == -ETIMEDOUT) {
			kill(t->kvmmd, SIGKILL);
			hostile_reap(t->kvmmd, TIMEOUT_MS);
		}
	}
	unlink(t->sock);
	rmdir(t->dir);
	return st;
}

/* Start kvmmd for a test; Return: whether it serves (a failure is one). */
static bool tenant_start(struct tenant *t, const char *extra1, const char *extra2)
{
	if (!kvmmd_start(t, extra1, extra2))
		return true;
	CU_FAIL("kvmmd did not start");
	tenant_stop(t);
	return false;
}

/* The end of a test: kvmmd survived it, and stops with kvmm_check() holding. */
static void tenant_finish(struct tenant *t)
{
	CU_ASSERT(hostile_alive(t->kvmmd));
	CU_ASSERT_EQUAL(tenant_stop(t), 0);
}

/*
 * SEQ_ROW from a tenant: its own sequence's row (HOG_TOKENS of KV), and
 * -EINVAL for every other row, the operator's open one among them.
 * Return: 0, or -1.
 */
static int rows_but_its_own(struct kvmm_ring *ring, uint32_t own)
{
	const uint64_t off = 4 * HOG_TOKENS;
	const struct kvmm_seq_row *row = (void *)((char *)ring->buf + off);
	uint32_t seq;

	for (seq = 0; seq < 8; seq++) {
		kvmm_prep_seq_row(hostile_sqe(ring), seq, 0, off, 4096);
		if (hostile_ring1(ring) != (seq == own ? HOG_TOKENS / PAGE : -EINVAL))
			return -1;
	}
	kvmm_prep_seq_row(hostile_sqe(ring), own, 0, off, 4096);
	return hostile_ring1(ring) == HOG_TOKENS / PAGE && row->len == HOG_TOKENS ? 0 : -1;
}

/*
 * The hog, as uid nobody: cache 120 of the 128 pages in its namespace
 * (reading no page-table row but its own), pin them all with
 * KVMM_PIN_KEEP (refused past the limit), pin half the pool and a
 * quarter, then leave.  Return: 0, or the step that went wrong.
 */
static int hog(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	const char *sock = arg;
	struct kvmm_ring ring;
	uint32_t ns = getuid(), *tok, i;
	struct kvmm_sqe *sqe;
	int32_t seq;

	if (kvmm_ring_connect(sock, &rp, &ring))
		return 10;
	tok = ring.buf;
	for (i = 0; i < HOG_TOKENS; i++)
		tok[i] = 1000 + i;
	kvmm_prep_open(hostile_sqe(&ring), ns);
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 11;
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, HOG_TOKENS, 0);
	if (hostile_ring1(&ring))
		return 12;
	if (rows_but_its_own(&ring, (uint32_t)seq))
		return 19;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)seq, 0, 0, HOG_TOKENS);
	if (hostile_ring1(&ring))
		return 13;
	kvmm_prep_pin(hostile_sqe(&ring), ns, 0, 0, HOG_TOKENS, KVMM_PIN_KEEP);
	if (hostile_ring1(&ring) != -EDQUOT)
		return 14;
	kvmm_prep_pin(hostile_sqe(&ring), ns, 0, 0, POOL / 2 * PAGE, KVMM_PIN_KEEP);
	if (hostile_ring1(&ring) != POOL / 2 * PAGE)
		return 15;
	kvmm_prep_pin(hostile_sqe(&ring), ns, 0, 0, POOL / 4 * PAGE, KVMM_PIN_KEEP);
	if (hostile_ring1(&ring) != POOL / 4 * PAGE)
		return 16;
	/* not a token more */
	kvmm_prep_pin(hostile_sqe(&ring), ns, 0, 0, (POOL / 2 + 1) * PAGE, KVMM_PIN_KEEP);
	if (hostile_ring1(&ring) != -EDQUOT)
		return 17;
	/* nor may it drop the operator's way, or see others' pins */
	kvmm_prep_pin_drop(hostile_sqe(&ring), KVMM_PIN_DROP_NS, ns, 0);
	if (hostile_ring1(&ring) != -EPERM)
		return 18;
	/* it prefetches and cancels in its own namespace only */
	kvmm_prep_prefetch(hostile_sqe(&ring), 0, 0, 0, HOG_TOKENS, 4);
	if (hostile_ring1(&ring) != -EPERM)
		return 30;
	kvmm_prep_prefetch(hostile_sqe(&ring), ns, 0, 0, HOG_TOKENS, 4);
	if (hostile_ring1(&ring) != 0)		/* all of it on the device */
		return 31;
	kvmm_prep_prefetch_cancel(hostile_sqe(&ring), 1);
	if (hostile_ring1(&ring) != -EPERM)
		return 32;
	sqe = hostile_sqe(&ring);
	kvmm_prep_prefetch_cancel(sqe, 1);
	sqe->ns = ns;
	if (hostile_ring1(&ring) != 0)
		return 33;
	kvmm_ring_exit(&ring);
	return 0;
}

/* Another tenant: 60 pages must be had, from the hog's unpinned cache. */
static int other(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	const char *sock = arg;
	struct kvmm_ring ring;
	int32_t seq;

	if (kvmm_ring_connect(sock, &rp, &ring))
		return 20;
	kvmm_prep_open(hostile_sqe(&ring), getuid());
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 21;
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, 60 * PAGE, 0);
	if (hostile_ring1(&ring))
		return 22;
	kvmm_ring_exit(&ring);
	return 0;
}

/* kvmmctl --socket S ARGS...; its output in @out.  Return: its exit status. */
static int ctl(struct tenant *t, char *out, size_t len, const char *a1, const char *a2,
	       const char *a3, const char *a4)
{
	const char *argv[] = { "kvmmctl", "--socket", t->sock, a1, a2, a3, a4, NULL };

	return hostile_run(argv, out, len, TIMEOUT_MS);
}

/* As a tenant: kvmmctl pins, unpin --ns and check are refused (exit 1, EPERM). */
static int ctl_as_tenant(void *arg)
{
	struct tenant *t = arg;
	const char *pins[] = { "kvmmctl", "--socket", t->sock, "pins", NULL };
	const char *unpin[] = { "kvmmctl", "--socket", t->sock, "unpin", "--ns", "65534",
				NULL };
	const char *check[] = { "kvmmctl", "--socket", t->sock, "check", NULL };
	char out[1024];

	if (hostile_run(pins, out, sizeof(out), TIMEOUT_MS) != 1 || !strstr(out, "EPERM"))
		return 30;
	if (hostile_run(unpin, out, sizeof(out), TIMEOUT_MS) != 1 || !strstr(out, "EPERM"))
		return 31;
	if (hostile_run(check, out, sizeof(out), TIMEOUT_MS) != 1 || !strstr(out, "EPERM"))
		return 32;
	return 0;
}

/* The id of the pin record of @tokens tokens in kvmmctl pins --json output. */
static unsigned long long pin_id(const char *json, unsigned tokens)
{
	char want[64];
	const char *p;

	snprintf(want, sizeof(want), "\"tokens\":%u,", tokens);
	p = strstr(json, want);
	if (!p)
		return 0;
	while (p > json && strncmp(p, "{\"id\":", 6))
		p--;
	return strtoull(p + 6, NULL, 10);
}

static void tenant_pins_stop_at_the_limit_and_the_operator_drops_them(void)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	char out[4096], arg[32];
	unsigned long long id;
	struct kvmm_ring op;
	struct tenant t;
	int32_t seq;

	if (!tenant_start(&t, NULL, NULL))
		return;
	/* the operator holds a sequence open, whose row the hog must not read */
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(t.sock, &rp, &op), 0);
	kvmm_prep_open(hostile_sqe(&op), 0);
	seq = hostile_ring1(&op);
	CU_ASSERT(seq >= 0);
	kvmm_prep_extend(hostile_sqe(&op), (uint32_t)seq, PAGE, 0);
	CU_ASSERT_EQUAL(hostile_ring1(&op), 0);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, hog, t.sock, TIMEOUT_MS), 0);
	CU_ASSERT(hostile_alive(t.kvmmd));
	kvmm_ring_exit(&op);
	/* the hog is gone, its kept pins are not: half the pool is still there */
	CU_ASSERT_EQUAL(hostile_child(OTHER_UID, other, t.sock, TIMEOUT_MS), 0);

	/* the operator sees both pins, by node id, namespace and size */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "pins", NULL, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"ns\":65534,\"tokens\":1024,\"pages\":64,"
				      "\"pins\":1,\"keep\":1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"ns\":65534,\"tokens\":512,\"pages\":32,"));
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, ctl_as_tenant, &t, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "ns", NULL, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "{\"ns\":65534,\"pinned\":64,\"cached\":64,"
				      "\"pin_limit\":64,"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "pins", NULL, NULL), 0);
	id = pin_id(out, 1024);
	CU_ASSERT(id != 0);
	snprintf(arg, sizeof(arg), "%llu", id);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--id", arg, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "unpinned 1 pins"));
	/* the same id again: nothing pinned there any more */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--id", arg, NULL), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ENOENT"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "pins", "--ns", "65534", NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "65534"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--ns", "65534", NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "unpinned 1 pins"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "pins", NULL, NULL), 0);
	CU_ASSERT_STRING_EQUAL(out, "[]\n");
	/* and the hog's cache is everyone's again */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "drop-caches", NULL, NULL), 0);
	CU_ASSERT_STRING_EQUAL(out, "{\"pages\":64,\"device\":64,\"host\":0,\"nvme\":0}\n");
	/* the operator verifies the instance's invariants */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "check", NULL, NULL, NULL), 0);
	CU_ASSERT_STRING_EQUAL(out, "check: every invariant holds\n");
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "check", NULL, NULL), 0);
	CU_ASSERT_STRING_EQUAL(out, "{\"ok\":true}\n");
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "check", "now", NULL, NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "check: unexpected argument 'now'"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "ns", NULL, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "{\"ns\":65534,\"pinned\":0,\"cached\":0,"));
	/* usage errors name what is wrong */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--id", "1", "--ns"), 2);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--id", "x", NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "--id"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--id", "1", "--ns=2"), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "give --id ID or --ns NS"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "unpin", "--ns", "4294967296", NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "--ns"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "pins", "now", NULL, NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "pins: unexpected argument 'now'"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "ns", "all", NULL, NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns: unexpected argument 'all'"));
	tenant_finish(&t);
}

static void tenant_limits_are_set_by_kvmmd_and_kvmmctl(void)
{
	const char *bad1[] = { "kvmmd", "--ns-cache-share", "0", NULL };
	const char *bad2[] = { "kvmmd", "--ns-pin-pages", "4294967296", NULL };
	char out[4096];
	struct tenant t;

	CU_ASSERT_EQUAL(hostile_run(bad1, out, sizeof(out), TIMEOUT_MS), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns-cache-share"));
	CU_ASSERT_EQUAL(hostile_run(bad2, out, sizeof(out), TIMEOUT_MS), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns-pin-pages"));
	if (!tenant_start(&t, "--ns-pin-pages=16", "--ns-cache-share=50"))
		return;
	CU_ASSERT_EQUAL(hostile_child(OTHER_UID, other, t.sock, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "ns", NULL, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"pin_limit\":16,\"cache_limit\":64,"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_pin_pages", "auto", NULL), 0);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_cache_share", "25", NULL), 0);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "ns", NULL, NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"pin_limit\":64,\"cache_limit\":32,"));
	/* out of range: kvmmctl says so; 0 is the instance's to refuse */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_cache_share", "101", NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns_cache_share"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_cache_share", "0", NULL), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "EINVAL"));
	tenant_finish(&t);
}

/* ---- keyed spaces: one tenant cannot take the table ---- */

#define KSPACES_DEFAULT	64	/* kvmmd's --ns-kspaces default */

/* KSPACE in the caller's namespace, values of @vb bytes: the space id or -errno. */
static int32_t kspace(struct kvmm_ring *ring, uint64_t vb)
{
	struct kvmm_kspace_reg *reg = ring->buf;
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = vb;
	snprintf(reg->model_id, sizeof(reg->model_id), "tenant-model");
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
	sqe->ns = getuid();
	return hostile_ring1(ring);
}

/* KDELETE with KVMM_KDELETE_SPACE: values dropped, or -errno. */
static int32_t kspace_rm(struct kvmm_ring *ring, uint32_t id)
{
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	kvmm_prep_rw(sqe, KVMM_OP_KDELETE, 0, 0, 0, 0);
	sqe->arg = id;
	sqe->arg2 = KVMM_KDELETE_SPACE;
	return hostile_ring1(ring);
}

/*
 * The space hog, as uid nobody: registers spaces until refused; that must
 * be -ENOSPC at the limit (*arg spaces), not at the table's end.  It then
 * removes one, may take one again, and cannot remove another's space.
 */
struct space_hog {
	const char *sock;
	int limit;		/* spaces it may register still */
	uint64_t base;		/* the value size of the first: each run its own */
	int32_t foreign;	/* another namespace's space, or -1 */
};

static int space_hog(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	const struct space_hog *h = arg;
	struct kvmm_ring ring;
	int32_t id = 0, first = -1;
	int n;

	if (kvmm_ring_connect(h->sock, &rp, &ring))
		return 40;
	for (n = 0; n < 2048; n++) {
		id = kspace(&ring, h->base + (uint64_t)n);
		if (id < 0)
			break;
		if (first < 0)
			first = id;
	}
	if (id != -ENOSPC)
		return 41;
	if (n != h->limit)
		return 42;
	if (h->foreign >= 0 && kspace_rm(&ring, (uint32_t)h->foreign) != -EINVAL)
		return 43;
	if (first >= 0 && kspace_rm(&ring, (uint32_t)first) != 0)
		return 44;
	if (first >= 0 && kspace_rm(&ring, (uint32_t)first) != -EINVAL)	/* gone */
		return 45;
	if (first >= 0 && kspace(&ring, 999999) < 0)	/* room for one again */
		return 46;
	kvmm_ring_exit(&ring);
	return 0;
}

/* Another tenant (and root below) still registers a space. */
static int space_other(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	struct kvmm_ring ring;

	if (kvmm_ring_connect(arg, &rp, &ring))
		return 50;
	if (kspace(&ring, 4096) < 0)
		return 51;
	kvmm_ring_exit(&ring);
	return 0;
}

static void tenant_keyed_spaces_stop_at_the_namespace_limit(void)
{
	const char *bad[] = { "kvmmd", "--ns-kspaces", "1025", NULL };
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	struct space_hog h = { .limit = KSPACES_DEFAULT, .base = 1000, .foreign = 0 };
	struct kvmm_ring op;
	char out[4096];
	struct tenant t;

	CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), TIMEOUT_MS), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns-kspaces"));
	if (!tenant_start(&t, "--host-pages", "64"))
		return;
	h.sock = t.sock;
	CU_ASSERT_EQUAL_FATAL(kvmm_ring_connect(t.sock, &rp, &op), 0);
	CU_ASSERT_EQUAL(kspace(&op, 4096), 0);		/* root's space 0 */
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, space_hog, &h, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_child(OTHER_UID, space_other, t.sock, TIMEOUT_MS), 0);
	CU_ASSERT(kspace(&op, 8192) > 0);		/* and root */
	/* the operator raises the limit: the hog gets that many, no more */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_kspaces", "100", NULL), 0);
	h.limit = 100 - KSPACES_DEFAULT;
	h.base = 5000;
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, space_hog, &h, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "set", "ns_kspaces", "1025", NULL), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns_kspaces"));
	/* and removes a tenant's space: kvmmctl spaces lists it no more */
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "spaces", "--ns", "65534"), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "{\"id\":2,"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "space-rm", "2", NULL, NULL), 0);
	CU_ASSERT_STRING_EQUAL(out, "space-rm: 0 values\n");
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "--json", "spaces", "--ns", "65534"), 0);
	CU_ASSERT_PTR_NULL(strstr(out, "{\"id\":2,"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "space-rm", "2", NULL, NULL), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "EINVAL"));
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "space-rm", NULL, NULL, NULL), 2);
	CU_ASSERT_EQUAL(ctl(&t, out, sizeof(out), "check", NULL, NULL, NULL), 0);
	kvmm_ring_exit(&op);
	tenant_finish(&t);

	/* --ns-kspaces sets it from the start */
	if (!tenant_start(&t, "--host-pages=64", "--ns-kspaces=3"))
		return;
	h = (struct space_hog){ .sock = t.sock, .limit = 3, .base = 1000, .foreign = -1 };
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, space_hog, &h, TIMEOUT_MS), 0);
	tenant_finish(&t);
}

int register_hostile_tenant_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_tenant", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, tenant_pins_stop_at_the_limit_and_the_operator_drops_them);
	ADD_TEST(s, tenant_limits_are_set_by_kvmmd_and_kvmmctl);
	ADD_TEST(s, tenant_keyed_spaces_stop_at_the_namespace_limit);
	return 0;
}
