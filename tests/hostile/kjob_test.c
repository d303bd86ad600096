// SPDX-License-Identifier: MIT
/*
 * tests/hostile/kjob_test.c - kvmm_hostile_kjob: a tenant of kvmmd (uid
 * nobody, bound to its own namespace by --ns-per-uid) tries to hold it
 * with keyed commands of a huge value size: KGETs of 24 entries all
 * pointing at one region of its data area, first of keys that are not
 * stored (what once made kvmmd allocate and zero entries x value pages of
 * metadata under its lock), then of a value it stored, read 24 times per
 * command.  Meanwhile another tenant sends LOOKUPs one after the other,
 * timing each, and samples kvmmd's anonymous memory.
 *
 * What is asserted is what does not depend on the machine's load: every
 * command answers what it must, kvmmd's anonymous memory never grows by
 * more than the value it holds plus the namespace's keyed job limit (and
 * slack for the allocator), kvmmd stays up and kvmm_check() holds at its
 * exit.  The LOOKUP latencies and the memory are printed (p50, p99, max),
 * not asserted: run the suite alone to read them.  KVMM_KJOB_ATTACK_VB
 * sets the value size of the misses: 1073737728 (1 GiB less the page the
 * entries take, the most a data area holds) is the attack as first
 * reported; the default keeps a run against an unfixed kvmmd affordable.
 *
 * And KPREFETCH across tenants: one may neither prefetch another's values
 * nor cancel another's prefetch.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers.h"
#include "hostile.h"

#define VICTIM_UID	65533u
#define HOST_PAGES	"262144"	/* 128 MiB of 512-byte pages */
#define PAGE_BYTES	512		/* 2 x 1 layer x 1 head x 8 dims x 2 bytes x 16 tokens */
#define STORED_VB	(64u << 20)	/* the value the attacker stores and reads */
#define MISS_VB		(64u << 20)	/* the default value size of the misses */
#define ENTRIES		24
#define MISS_ROUNDS	40
#define HIT_ROUNDS	4
#define MAX_SAMPLES	(1u << 21)
#define SLACK		(32ull << 20)	/* the allocator's arenas, the ring's own */
#define TIMEOUT_MS	120000

/*
 * ThreadSanitizer keeps shadow memory for every byte kvmmd touches (the
 * values it copies, several times their size): its memory is then no
 * measure of kvmmd's own.
 */
#if defined(__SANITIZE_THREAD__)
#define RSS_MEANINGFUL	false
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RSS_MEANINGFUL	false
#endif
#endif
#ifndef RSS_MEANINGFUL
#define RSS_MEANINGFUL	true
#endif

/* What the victim and the attacker share with the parent (MAP_SHARED). */
struct kjob_shared {
	volatile int done;		/* the attacker finished */
	volatile int ready;		/* the victim measures */
	uint32_t nr;			/* latencies taken */
	uint64_t rss0;			/* kvmmd's RssAnon (KiB) before the attack */
	uint64_t rss_max;		/* ... the most it was during */
	uint64_t miss_vb;
	uint32_t lat_ns[MAX_SAMPLES];
};

struct kjob_env {
	char dir[64];
	char sock[96];
	pid_t kvmmd;
	struct kjob_shared *sh;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Start kvmmd on @argv, its socket @sock open to every uid, into *@pid. */
static bool kvmmd_up(pid_t *pid, const char *sock, const char *const argv[])
{
	*pid = hostile_spawn(argv, -1);
	if (*pid > 0 && !hostile_wait_socket(sock, 10000) && !chmod(sock, 0777))
		return true;
	CU_FAIL("kvmmd did not start");
	return false;
}

static bool env_start(struct kjob_env *e, const char *extra1, const char *extra2)
{
	const char *argv[] = { "kvmmd", "--socket", e->sock, "--ns-per-uid", "--quiet",
			       "--pages", "256", "--page-size", "16", "--layers", "1",
			       "--kv-heads", "1", "--head-dim", "8", "--dtype-bytes", "2",
			       "--max-seqs", "8", "--max-seq-len", "4096",
			       "--host-pages", HOST_PAGES, extra1, extra2, NULL };

	memset(e, 0, sizeof(*e));
	e->sh = mmap(NULL, sizeof(*e->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	CU_ASSERT_FATAL(e->sh != MAP_FAILED);
	memset(e->sh, 0, sizeof(*e->sh));
	CU_ASSERT_FATAL(!hostile_tmpdir(e->dir, sizeof(e->dir)));
	snprintf(e->sock, sizeof(e->sock), "%s/kvmmd.sock", e->dir);
	return kvmmd_up(&e->kvmmd, e->sock, argv);
}

/* Stop kvmmd.  Return: its exit status (0: kvmm_check() held at exit). */
static int env_stop(struct kjob_env *e)
{
	int st = -1;

	if (e->kvmmd > 0) {
		kill(e->kvmmd, SIGTERM);
		st = hostile_reap(e->kvmmd, 30000);
		if (st == -ETIMEDOUT) {
			kill(e->kvmmd, SIGKILL);
			hostile_reap(e->kvmmd, 10000);
		}
	}
	unlink(e->sock);
	rmdir(e->dir);
	munmap(e->sh, sizeof(*e->sh));
	return st;
}

/* KSPACE of @vb-byte values in the ring's namespace.  Return: its id or -errno. */
static int32_t kspace(struct kvmm_ring *ring, uint64_t vb)
{
	struct kvmm_kspace_reg *reg = ring->buf;
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = vb;
	strcpy(reg->model_id, "org/attack@1");
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
	sqe->ns = getuid();
	return hostile_ring1(ring);
}

/* A KPUT or KGET of @n entries (at offset 0) of key @key + i, all at @off. */
static int32_t kio(struct kvmm_ring *ring, uint8_t op, int32_t sp, uint64_t key, bool same,
		   uint32_t n, uint64_t off)
{
	struct kvmm_kent *e = ring->buf;
	struct kvmm_sqe *sqe = hostile_sqe(ring);
	uint32_t i;

	for (i = 0; i < n; i++)
		e[i] = (struct kvmm_kent){ .key = { key + (same ? 0 : i), 1 }, .off = off,
					   .res = 12345 };
	kvmm_prep_rw(sqe, op, 0, 0, 0, n);
	sqe->arg = (uint32_t)sp;
	return hostile_ring1(ring);
}

static int all_res(struct kvmm_ring *ring, uint32_t n, int32_t want)
{
	const struct kvmm_kent *e = ring->buf;
	uint32_t i;

	for (i = 0; i < n; i++)
		if (e[i].res != want)
			return -1;
	return 0;
}

/*
 * The attacker, as nobody: KGETs of ENTRIES keys not stored, in a space of
 * shared->miss_vb-byte values, all pointing at one region; then a value of
 * STORED_VB stored and read ENTRIES times per KGET into one region.
 * Return: 0, or the step that went wrong.
 */
static int attacker(void *arg)
{
	struct kjob_env *e = arg;
	uint64_t vb = e->sh->miss_vb, data = 4096;
	struct kvmm_ring_params rp = {
		.sq_entries = 4,
		.buf_size = data + (vb > STORED_VB ? vb : STORED_VB),
	};
	struct kvmm_ring ring;
	int32_t sp, sp2;
	uint32_t r;
	uint8_t *v;
	int ret = 0;

	if (kvmm_ring_connect(e->sock, &rp, &ring))
		return 10;
	while (!e->sh->ready)
		usleep(1000);
	sp = kspace(&ring, vb);
	if (sp < 0)
		ret = 11;
	for (r = 0; !ret && r < MISS_ROUNDS; r++)
		if (kio(&ring, KVMM_OP_KGET, sp, 1000, false, ENTRIES, data) != 0 ||
		    all_res(&ring, ENTRIES, -ENOENT))
			ret = 12;
	sp2 = ret ? -1 : vb == STORED_VB ? sp : kspace(&ring, STORED_VB);
	if (!ret && sp2 < 0)
		ret = 13;
	v = (uint8_t *)ring.buf + data;
	if (!ret) {
		memset(v, 0xa5, STORED_VB);
		if (kio(&ring, KVMM_OP_KPUT, sp2, 7, true, 1, data) != 1)
			ret = 14;
	}
	for (r = 0; !ret && r < HIT_ROUNDS; r++) {
		memset(v, 0, STORED_VB);
		if (kio(&ring, KVMM_OP_KGET, sp2, 7, true, ENTRIES, data) != ENTRIES ||
		    all_res(&ring, ENTRIES, 0))
			ret = 15;
		else if (v[0] != 0xa5 || v[STORED_VB - 1] != 0xa5 ||
			 memcmp(v, v + 1, STORED_VB - 1))
			ret = 16;
	}
	e->sh->done = 1;
	kvmm_ring_exit(&ring);
	return ret;
}

/*
 * The victim, another tenant: caches 64 tokens, then LOOKUPs them one
 * after the other until the attacker is done, timing each, and samples
 * kvmmd's anonymous memory every millisecond.  Return: 0, or the step.
 */
static int victim(void *arg)
{
	struct kjob_env *e = arg;
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	struct kvmm_ring ring;
	uint32_t *tok, i;
	uint64_t last = 0;
	int32_t seq;

	if (kvmm_ring_connect(e->sock, &rp, &ring))
		return 20;
	tok = ring.buf;
	for (i = 0; i < 64; i++)
		tok[i] = 5000 + i;
	kvmm_prep_open(hostile_sqe(&ring), getuid());
	seq = hostile_ring1(&ring);
	if (seq < 0)
		return 21;
	kvmm_prep_extend(hostile_sqe(&ring), (uint32_t)seq, 64, 0);
	if (hostile_ring1(&ring))
		return 22;
	kvmm_prep_close(hostile_sqe(&ring), (uint32_t)seq, 0, 0, 64);
	if (hostile_ring1(&ring))
		return 23;
	e->sh->rss0 = e->sh->rss_max = hostile_rss_anon(e->kvmmd);
	e->sh->ready = 1;
	while (!e->sh->done) {
		uint64_t t0 = now_ns(), t1;
		int32_t got;

		kvmm_prep_lookup(hostile_sqe(&ring), getuid(), 0, 0, 64);
		got = hostile_ring1(&ring);
		t1 = now_ns();
		if (got != 64)
			return 24;
		if (e->sh->nr < MAX_SAMPLES)
			e->sh->lat_ns[e->sh->nr++] = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX :
								     t1 - t0);
		if (t1 - last > 1000000) {
			uint64_t kib = hostile_rss_anon(e->kvmmd);

			if (kib > e->sh->rss_max)
				e->sh->rss_max = kib;
			last = t1;
		}
	}
	kvmm_ring_exit(&ring);
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Run the victim (as VICTIM_UID) beside the attacker (as nobody). */
static void run_attack(struct kjob_env *e, int *att, int *vic)
{
	pid_t pid = fork();

	CU_ASSERT_FATAL(pid >= 0);
	if (!pid)
		_exit(hostile_child(VICTIM_UID, victim, e, TIMEOUT_MS));
	*att = hostile_child(HOSTILE_NOBODY, attacker, e, TIMEOUT_MS);
	e->sh->done = 1;
	*vic = hostile_reap(pid, TIMEOUT_MS);
}

/*
 * The attack, and what it may not do: memory past the value and the
 * limit, or a command that answers wrong; the latencies are printed.
 */
static void kjob_huge_values_do_not_hold_kvmmd(void)
{
	const char *vb_env = getenv("KVMM_KJOB_ATTACK_VB");
	struct kjob_env e;
	uint64_t grown;
	int att, vic;

	if (!env_start(&e, NULL, NULL)) {
		env_stop(&e);
		return;
	}
	e.sh->miss_vb = vb_env && *vb_env ? strtoull(vb_env, NULL, 0) : 0;
	if (!e.sh->miss_vb)
		e.sh->miss_vb = MISS_VB;
	run_attack(&e, &att, &vic);
	CU_ASSERT_EQUAL(att, 0);
	CU_ASSERT_EQUAL(vic, 0);
	CU_ASSERT(e.sh->nr > 0);
	CU_ASSERT(e.sh->rss0 > 0);		/* the memory was measured */
	grown = (e.sh->rss_max - e.sh->rss0) << 10;
	/* the value it stored, in the host tier, and the namespace's limit */
	CU_ASSERT(!RSS_MEANINGFUL || grown <= STORED_VB + KVMM_NS_KJOB_BYTES_DEFAULT + SLACK);
	if (e.sh->nr) {
		uint32_t n = e.sh->nr;

		qsort(e.sh->lat_ns, n, sizeof(uint32_t), cmp_u32);
		printf("\n    %u LOOKUPs beside %u KGETs of %d misses of %llu bytes and %d KGETs "
		       "of %d x %u bytes: p50 %.1f us, p99 %.1f us, max %.1f us; kvmmd "
		       "RssAnon %llu -> at most %llu KiB ",
		       n, MISS_ROUNDS, ENTRIES, (unsigned long long)e.sh->miss_vb, HIT_ROUNDS,
		       ENTRIES, STORED_VB, e.sh->lat_ns[n / 2] / 1e3,
		       e.sh->lat_ns[(uint64_t)n * 99 / 100] / 1e3, e.sh->lat_ns[n - 1] / 1e3,
		       (unsigned long long)e.sh->rss0, (unsigned long long)e.sh->rss_max);
	}
	CU_ASSERT(hostile_alive(e.kvmmd));
	CU_ASSERT_EQUAL(env_stop(&e), 0);
}

/*
 * The tenant, as nobody, under --ns-kjob-bytes: a KGET whose memory
 * would pass it is refused with EDQUOT (its entries untouched); a small
 * one passes.  Return: 0, or the step.
 */
static int over_limit(void *arg)
{
	struct kjob_env *e = arg;
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 1 << 20 };
	struct kvmm_ring ring;
	int32_t sp;

	if (kvmm_ring_connect(e->sock, &rp, &ring))
		return 30;
	sp = kspace(&ring, 64 * PAGE_BYTES);
	if (sp < 0)
		return 31;
	if (kio(&ring, KVMM_OP_KGET, sp, 1, false, 1000, 65536) != -EDQUOT ||
	    all_res(&ring, 1000, 12345))
		return 32;
	if (kio(&ring, KVMM_OP_KGET, sp, 1, false, 4, 65536) != 0 || all_res(&ring, 4, -ENOENT))
		return 33;
	kvmm_ring_exit(&ring);
	return 0;
}

/* kvmmd --ns-kjob-bytes sets the limit; kvmmctl set ns_kjob_bytes changes it. */
static void kjob_limit_is_set_by_kvmmd_and_kvmmctl(void)
{
	const char *bad[] = { "kvmmd", "--ns-kjob-bytes", "2T1", NULL };
	char out[4096];
	struct kjob_env e;

	CU_ASSERT_EQUAL(hostile_run(bad, out, sizeof(out), 10000), 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "ns-kjob-bytes"));
	if (!env_start(&e, "--ns-kjob-bytes", "65536")) {
		env_stop(&e);
		return;
	}
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, over_limit, &e, TIMEOUT_MS), 0);
	{
		const char *small[] = { "kvmmctl", "--socket", e.sock, "set", "ns_kjob_bytes",
					"100", NULL };
		const char *big[] = { "kvmmctl", "--socket", e.sock, "set", "ns_kjob_bytes",
				      "1G", NULL };	/* a size takes its unit */
		const char *unit[] = { "kvmmctl", "--socket", e.sock, "set", "ns_kjob_bytes",
				       "1Q", NULL };

		CU_ASSERT_EQUAL(hostile_run(small, out, sizeof(out), 10000), 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "EINVAL"));
		CU_ASSERT_EQUAL(hostile_run(unit, out, sizeof(out), 10000), 2);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "K, M, G or T"));
		CU_ASSERT_EQUAL(hostile_run(big, out, sizeof(out), 10000), 0);
	}
	/* now the big KGET passes: the same child, its first step changes */
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, over_limit, &e, TIMEOUT_MS), 32);
	CU_ASSERT(hostile_alive(e.kvmmd));
	CU_ASSERT_EQUAL(env_stop(&e), 0);
}

/* ---- KPREFETCH across tenants ---- */

#define PF_VB		(1u << 20)	/* 2048 pages of 512 bytes */
#define PF_VALUES	16
#define PF_KEEP		10	/* the oldest, most on NVMe; the rest deleted */
#define PF_UD		0x7a11ull	/* the victim's prefetch's user_data */

/*
 * What the victim and the attacker share: the victim's space id and
 * phase, the attacker's answers.
 */
struct pf_shared {
	volatile int phase;	/* 2: the victim's prefetch in flight; 3: attacked */
	volatile int32_t space;
	volatile int32_t foreign_prefetch, foreign_cancel, own_prefetch;
};

struct pf_env {
	char dir[64];
	char sock[96];
	char nvme[96];
	pid_t kvmmd;
	struct pf_shared *sh;
};

/* kvmmd with a host tier of 8 values over NVMe, writing down below 2 free */
static bool pf_start(struct pf_env *e)
{
	const char *argv[] = { "kvmmd", "--socket", e->sock, "--ns-per-uid", "--quiet",
			       "--pages", "256", "--page-size", "16", "--layers", "1",
			       "--kv-heads", "1", "--head-dim", "8", "--dtype-bytes", "2",
			       "--max-seqs", "8", "--max-seq-len", "4096",
			       "--host-pages", "16384", "--host-wmark-low", "4096",
			       "--host-wmark-high", "8192", "--nvme-file", e->nvme,
			       "--nvme-pages", "65536", NULL };

	memset(e, 0, sizeof(*e));
	e->sh = mmap(NULL, sizeof(*e->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	CU_ASSERT_FATAL(e->sh != MAP_FAILED);
	memset((void *)e->sh, 0, sizeof(*e->sh));
	CU_ASSERT_FATAL(!hostile_tmpdir(e->dir, sizeof(e->dir)));
	snprintf(e->sock, sizeof(e->sock), "%s/kvmmd.sock", e->dir);
	snprintf(e->nvme, sizeof(e->nvme), "%s/nvme", e->dir);
	return kvmmd_up(&e->kvmmd, e->sock, argv);
}

/* A KPREFETCH of keys 1 .. @n of space @sp, tagged @ud, @arg2.  Return: its res. */
static int32_t kprefetch(struct kvmm_ring *ring, int32_t sp, uint32_t n, uint64_t ud,
			 uint64_t arg2)
{
	struct kvmm_key *k = ring->buf;
	struct kvmm_sqe *sqe = hostile_sqe(ring);
	uint32_t i;

	for (i = 0; i < n; i++)
		k[i] = (struct kvmm_key){ 1 + i, 1 };
	kvmm_prep_rw(sqe, KVMM_OP_KPREFETCH, 0, 0, 0, n);
	sqe->arg = (uint32_t)sp;
	sqe->arg2 = arg2;
	sqe->user_data = ud;
	return hostile_ring1(ring);
}

static int32_t pf_cancel(struct kvmm_ring *ring, uint64_t ud)
{
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	kvmm_prep_prefetch_cancel(sqe, ud);
	sqe->ns = getuid();
	return hostile_ring1(ring);
}

static uint64_t pf_stat(struct kvmm_ring *ring, unsigned item)
{
	struct kvmm_stats_snap *snap = ring->buf;
	uint32_t len = sizeof(*snap) + NR_KVMM_STATS * sizeof(uint64_t);
	struct kvmm_sqe *sqe = hostile_sqe(ring);

	kvmm_prep_rw(sqe, KVMM_OP_STATS, 0, 0, 0, len);
	if (hostile_ring1(ring) < 0 || snap->nr <= item)
		return ~0ull;
	return ((const uint64_t *)(snap + 1))[item];
}

/*
 * The victim (uid 65533): stores PF_VALUES values (most written down to
 * NVMe), deletes the newest, prefetches the others (tagged PF_UD) and,
 * while the reads are in flight, lets the attacker try; then reads every
 * value back byte for byte.  Its prefetch is never cancelled: prefetch_canceled stays 0.
 */
static int pf_victim_steps(struct pf_env *e)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 + PF_VB };
	struct kvmm_ring ring;
	struct kvmm_sqe *sqe;
	uint8_t *v;
	int32_t sp;
	uint32_t i;

	if (kvmm_ring_connect(e->sock, &rp, &ring))
		return 40;
	sp = kspace(&ring, PF_VB);
	if (sp < 0)
		return 41;
	v = (uint8_t *)ring.buf + 4096;
	for (i = 0; i < PF_VALUES; i++) {
		memset(v, (int)(0x10 + i), PF_VB);
		if (kio(&ring, KVMM_OP_KPUT, sp, 1 + i, true, 1, 4096) != 1)
			return 42;
	}
	e->sh->space = sp;
	/* the newest values, on the host tier, go: room for the prefetch */
	for (i = 0; i < PF_VALUES - PF_KEEP; i++)
		((struct kvmm_key *)ring.buf)[i] = (struct kvmm_key){ 1 + PF_KEEP + i, 1 };
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KDELETE, 0, 0, 0, PF_VALUES - PF_KEEP);
	sqe->arg = (uint32_t)sp;
	if (hostile_ring1(&ring) != PF_VALUES - PF_KEEP)
		return 47;
	if (kprefetch(&ring, sp, PF_KEEP, PF_UD, 0) <= 0)
		return 43;
	e->sh->phase = 2;
	while (e->sh->phase != 3)
		usleep(1000);
	for (i = 0; i < PF_KEEP; i++) {
		if (kio(&ring, KVMM_OP_KGET, sp, 1 + i, true, 1, 4096) != 1)
			return 44;
		if (v[0] != 0x10 + i || memcmp(v, v + 1, PF_VB - 1))
			return 45;
	}
	if (pf_stat(&ring, KVMM_STAT_PREFETCH_CANCELED) != 0 ||
	    pf_stat(&ring, KVMM_STAT_PREFETCH_PAGES) == 0)
		return 46;
	kvmm_ring_exit(&ring);
	return 0;
}

static int pf_victim(void *arg)
{
	struct pf_env *e = arg;
	int ret = pf_victim_steps(e);

	if (e->sh->phase < 2)	/* it failed early: the attacker waits no more */
		e->sh->phase = 2;
	return ret;
}

/*
 * The attacker, as nobody: KPREFETCH of the victim's space id (not in its
 * namespace: EINVAL), PREFETCH's cancel of the victim's user_data (not
 * its ring's: nothing cancelled), and a KPREFETCH of the same keys in a
 * space of its own (other values: none stored, nothing read).
 */
static int pf_attacker(void *arg)
{
	struct pf_env *e = arg;
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 4096 };
	struct kvmm_ring ring;
	int32_t own;

	if (kvmm_ring_connect(e->sock, &rp, &ring))
		return 50;
	while (e->sh->phase != 2)
		usleep(1000);
	e->sh->foreign_cancel = pf_cancel(&ring, PF_UD);
	e->sh->foreign_prefetch = kprefetch(&ring, e->sh->space, PF_VALUES, 1, 0);
	own = kspace(&ring, PF_VB);
	e->sh->own_prefetch = own < 0 ? own : kprefetch(&ring, own, PF_VALUES, PF_UD, 0);
	e->sh->phase = 3;
	kvmm_ring_exit(&ring);
	return 0;
}

static int pf_attack(void *arg)
{
	return hostile_child(HOSTILE_NOBODY, pf_attacker, arg, TIMEOUT_MS);
}

/*
 * One tenant can neither prefetch another's values nor cancel another's
 * prefetch, whatever user_data it names; the victim's values all come
 * back, kvmmd stays up and kvmm_check() holds at its exit.
 */
static void kjob_prefetch_is_the_tenants_own(void)
{
	struct pf_env e;
	pid_t att;
	int st;

	if (!pf_start(&e)) {
		kill(e.kvmmd, SIGTERM);
		hostile_reap(e.kvmmd, 30000);
		return;
	}
	att = fork();
	CU_ASSERT_FATAL(att >= 0);
	if (!att)
		_exit(pf_attack(&e));
	CU_ASSERT_EQUAL(hostile_child(VICTIM_UID, pf_victim, &e, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(hostile_reap(att, TIMEOUT_MS), 0);
	CU_ASSERT_EQUAL(e.sh->foreign_cancel, 0);
	CU_ASSERT_EQUAL(e.sh->foreign_prefetch, -EINVAL);
	CU_ASSERT_EQUAL(e.sh->own_prefetch, 0);
	CU_ASSERT(hostile_alive(e.kvmmd));
	kill(e.kvmmd, SIGTERM);
	st = hostile_reap(e.kvmmd, 30000);
	CU_ASSERT_EQUAL(st, 0);
	munmap((void *)e.sh, sizeof(*e.sh));
}

int register_hostile_kjob_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_kjob", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, kjob_huge_values_do_not_hold_kvmmd);
	ADD_TEST(s, kjob_limit_is_set_by_kvmmd_and_kvmmctl);
	ADD_TEST(s, kjob_prefetch_is_the_tenants_own);
	return 0;
}
