// SPDX-License-Identifier: MIT
/*
 * tests/ipc/spin_test.c - kvmm_spin: how long a side of a ring polls
 * before it sleeps (ipc/spin.c).  The policy is checked by what it does,
 * not by how long it takes: a fake event counts the looks, so "polled"
 * is two looks or more and "slept straight away" exactly one, whatever
 * the scheduler does to the test meanwhile.
 */
#include <sched.h>
#include <stdint.h>

#include "../helpers.h"
#include "../../ipc/ipc.h"

/*
 * struct fake_event - what a poller waits for
 * @looks: times ready() looked
 * @ready_at: the look at which it is there (1 up); 0: never
 * @off_at: the look from which the other side cannot act (1 up); 0: never
 */
struct fake_event {
	uint32_t looks;
	uint32_t ready_at;
	uint32_t off_at;
};

static enum kvmm_spin_look fake_ready(void *arg)
{
	struct fake_event *e = arg;

	if (++e->looks == e->ready_at)
		return KVMM_SPIN_READY;
	return e->off_at && e->looks >= e->off_at ? KVMM_SPIN_PEER_OFF : KVMM_SPIN_NOT_YET;
}

/* One wait as ipc/ does it: poll, and after a failed poll sleep, here 5 µs. */
static uint32_t one_wait(struct kvmm_spin *s, uint32_t ready_at, bool *got)
{
	struct fake_event e = { .ready_at = ready_at };

	*got = kvmm_spin(s, fake_ready, NULL, &e);
	if (!*got)
		kvmm_spin_waited(s, 5000);
	return e.looks;
}

/*
 * A poll that fails makes the next waits sleep without polling, 1, 2, 4
 * ... of them, up to 256; polls that pay bring polling back by halves.
 * (A poll used to follow every sleep, at twice the sleep's length, which
 * is what spun on the core the other side needed.)
 */
static void spin_backs_off_after_failed_polls_and_comes_back(void)
{
	struct kvmm_spin s = { .budget_ns = 10000, .max_ns = 50000 };
	uint32_t k, n, want;
	bool got;

	for (k = 0; k < 12; k++) {
		/* a poll: it looks more than once, and the event never comes */
		CU_ASSERT(one_wait(&s, 0, &got) >= 2);
		CU_ASSERT_FALSE(got);
		want = k < 8 ? 1u << k : 256;
		for (n = 0; n < want; n++) {
			if (one_wait(&s, 0, &got) != 1)
				break;
		}
		CU_ASSERT_EQUAL(n, want);
	}
	/* the machine is quiet again: each poll pays, the back-off halves */
	for (want = 128; want; want /= 2) {
		CU_ASSERT_EQUAL(one_wait(&s, 3, &got), 3);	/* polled */
		CU_ASSERT(got);
		for (n = 0; n < want; n++) {
			if (one_wait(&s, 0, &got) != 1)
				break;
		}
		CU_ASSERT_EQUAL(n, want);
	}
	CU_ASSERT_EQUAL(one_wait(&s, 3, &got), 3);
	CU_ASSERT(got);
	CU_ASSERT_EQUAL(s.backoff, 0);
	CU_ASSERT_EQUAL(s.skip, 0);
}

/* While polls pay, every wait polls: the quiet machine's fast path stays. */
static void spin_keeps_polling_while_polls_pay(void)
{
	struct kvmm_spin s = { .budget_ns = 50000, .max_ns = 50000 };
	uint32_t i;
	bool got;

	for (i = 0; i < 1000; i++) {
		CU_ASSERT_EQUAL(one_wait(&s, 2, &got), 2);
		CU_ASSERT(got);
	}
	CU_ASSERT_EQUAL(s.budget_ns, 50000);
	/* a failed poll now and then costs one sleep, not the polling */
	CU_ASSERT(one_wait(&s, 0, &got) >= 2);
	CU_ASSERT_EQUAL(one_wait(&s, 0, &got), 1);
	for (i = 0; i < 100; i++)
		CU_ASSERT_EQUAL(one_wait(&s, 2, &got), 2);
}

/*
 * A failed poll followed by a wait past the ceiling is the other side
 * being idle (an engine computing between steps), not contention: it
 * does not count, and a burst after idle spells polls again at once.
 */
static void spin_idle_spells_do_not_back_off(void)
{
	struct kvmm_spin s = { .budget_ns = 50000, .max_ns = 50000 };
	struct fake_event e;
	uint32_t i;
	bool got;

	for (i = 0; i < 20; i++) {
		e = (struct fake_event){ .ready_at = 0 };
		CU_ASSERT_FALSE(kvmm_spin(&s, fake_ready, NULL, &e));
		kvmm_spin_waited(&s, 10 * 1000 * 1000);		/* 10 ms later */
		CU_ASSERT_EQUAL(s.backoff, 0);
		CU_ASSERT_EQUAL(s.skip, 0);
		/* nor the budget: the next poll is as long (it used to halve) */
		CU_ASSERT_EQUAL(s.budget_ns, 50000);
	}
	/* the burst: its first wait is short, the ones after it poll */
	kvmm_spin_waited(&s, 3000);
	for (i = 0; i < 10; i++)
		CU_ASSERT_EQUAL(one_wait(&s, 2, &got), 2);
	/* contention still counts: a failed poll, then a short wait */
	CU_ASSERT(one_wait(&s, 0, &got) >= 2);
	CU_ASSERT_EQUAL(s.backoff, 1);
	CU_ASSERT_EQUAL(one_wait(&s, 0, &got), 1);
}

/*
 * struct slow_event - an event whose looks take 2 µs each, longer than
 * the poller's budget, and the other side's work done so far
 * @e: the event
 * @moving: the work counter moves at each look; else it stays put
 * @work: the counter
 */
struct slow_event {
	struct fake_event e;
	bool moving;
	uint32_t work;
};

static enum kvmm_spin_look slow_ready(void *arg)
{
	struct slow_event *se = arg;
	uint64_t t = kvmm_now_ns();

	while (kvmm_now_ns() - t < 2000)
		;
	if (se->moving)
		se->work++;
	return fake_ready(&se->e);
}

static uint32_t slow_work(void *arg)
{
	return ((struct slow_event *)arg)->work;
}

/*
 * A poll goes on past its budget while the other side is seen working
 * (a long batch of commands), and stops at the budget when it is not.
 * (A client used to sleep at its ceiling in the middle of a long batch,
 * and paid a wake-up for each.)
 */
static void spin_polls_on_while_the_peer_works(void)
{
	struct kvmm_spin s = { .budget_ns = 1000, .max_ns = 50000 };
	struct slow_event se = { .e = { .ready_at = 40 } };
	uint32_t i;
	bool got = false;

	/* still: the first budget ends the poll, one more look and done */
	CU_ASSERT_FALSE(kvmm_spin(&s, slow_ready, slow_work, &se));
	CU_ASSERT_EQUAL(se.e.looks, 2);
	/*
	 * moving: polled through to the event, 40 looks (80 µs); a poll
	 * descheduled meanwhile stops, so a loaded machine may need a few
	 */
	for (i = 0; i < 50 && !got; i++) {
		s = (struct kvmm_spin){ .budget_ns = 1000, .max_ns = 50000 };
		se = (struct slow_event){ .e = { .ready_at = 40 }, .moving = true };
		got = kvmm_spin(&s, slow_ready, slow_work, &se);
	}
	CU_ASSERT(got);
	CU_ASSERT_EQUAL(se.e.looks, 40);
	/* without a counter to read, the budget is the bound */
	s = (struct kvmm_spin){ .budget_ns = 1000, .max_ns = 50000 };
	se = (struct slow_event){ .e = { .ready_at = 40 }, .moving = true };
	CU_ASSERT_FALSE(kvmm_spin(&s, slow_ready, NULL, &se));
	CU_ASSERT_EQUAL(se.e.looks, 2);
}

/* A budget of 0 (an idle poller's ceiling spent) looks once and sleeps. */
static void spin_with_no_budget_only_looks(void)
{
	struct kvmm_spin s = { .budget_ns = 0, .max_ns = 50000 };
	struct fake_event e = { .ready_at = 0 };

	CU_ASSERT_FALSE(kvmm_spin(&s, fake_ready, NULL, &e));
	CU_ASSERT_EQUAL(e.looks, 1);
	/* a wait past the ceiling says nothing: the budget stays 0 */
	kvmm_spin_waited(&s, 50000);
	CU_ASSERT_EQUAL(s.budget_ns, 0);
	/* a short one brings it back, twice as long, at least 1 µs */
	kvmm_spin_waited(&s, 100);
	CU_ASSERT_EQUAL(s.budget_ns, 1000);
	kvmm_spin_waited(&s, 40000);
	CU_ASSERT_EQUAL(s.budget_ns, 50000);
}

/*
 * A look that finds the other side cannot act (it last ran on this very
 * CPU, or sleeps) ends the poll there: no look after it.  It is not a
 * failed poll: neither the budget nor the back-off moves, so the next
 * wait polls as before.  (Polls used to spin their whole budget on the
 * CPU the other side needed, and then back off from polling altogether.)
 */
static void spin_stops_at_once_when_the_peer_is_off(void)
{
	struct kvmm_spin s = { .budget_ns = 50000, .max_ns = 50000 };
	struct fake_event e;
	uint32_t i;
	bool got;

	for (i = 0; i < 100; i++) {
		e = (struct fake_event){ .off_at = 1 };
		CU_ASSERT_FALSE(kvmm_spin(&s, fake_ready, NULL, &e));
		CU_ASSERT_EQUAL(e.looks, 1);
		e = (struct fake_event){ .off_at = 4 };
		CU_ASSERT_FALSE(kvmm_spin(&s, fake_ready, NULL, &e));
		CU_ASSERT_EQUAL(e.looks, 4);
		CU_ASSERT_EQUAL(s.backoff, 0);
		CU_ASSERT_EQUAL(s.skip, 0);
		CU_ASSERT_EQUAL(s.budget_ns, 50000);
	}
	/* the event first: it counts, whatever the other side does next */
	e = (struct fake_event){ .ready_at = 2, .off_at = 3 };
	CU_ASSERT(kvmm_spin(&s, fake_ready, NULL, &e));
	/* and a poll that pays still polls */
	CU_ASSERT_EQUAL(one_wait(&s, 3, &got), 3);
	CU_ASSERT(got);
	/* while a back-off lasts, one look, and it may find the event */
	CU_ASSERT(one_wait(&s, 0, &got) >= 2);
	CU_ASSERT_EQUAL(s.backoff, 1);
	e = (struct fake_event){ .ready_at = 1 };
	CU_ASSERT(kvmm_spin(&s, fake_ready, NULL, &e));
	CU_ASSERT_EQUAL(e.looks, 1);
}

/* Each side names its CPU (1 up); 0 means unknown and is nobody's. */
static void spin_cpu_hints(void)
{
	uint32_t mine = 0, other;
	cpu_set_t set, old;
	int cpu;

	CU_ASSERT_FALSE(kvmm_spin_on_my_cpu(&mine));
	/* stay on one CPU while the hint is compared */
	CU_ASSERT_FATAL(!sched_getaffinity(0, sizeof(old), &old));
	cpu = sched_getcpu();
	CU_ASSERT_FATAL(cpu >= 0);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	CU_ASSERT_FATAL(!sched_setaffinity(0, sizeof(set), &set));
	kvmm_spin_say_cpu(&mine);
	CU_ASSERT_EQUAL(mine, (uint32_t)cpu + 1);
	CU_ASSERT(kvmm_spin_on_my_cpu(&mine));
	other = mine + 1;
	CU_ASSERT_FALSE(kvmm_spin_on_my_cpu(&other));
	CU_ASSERT(!sched_setaffinity(0, sizeof(old), &old));
}

int register_spin_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_spin", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, spin_backs_off_after_failed_polls_and_comes_back);
	ADD_TEST(s, spin_keeps_polling_while_polls_pay);
	ADD_TEST(s, spin_idle_spells_do_not_back_off);
	ADD_TEST(s, spin_with_no_budget_only_looks);
	ADD_TEST(s, spin_polls_on_while_the_peer_works);
	ADD_TEST(s, spin_stops_at_once_when_the_peer_is_off);
	ADD_TEST(s, spin_cpu_hints);
	return 0;
}
