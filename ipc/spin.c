// SPDX-License-Identifier: MIT
/*
 * ipc/spin.c - how long one side of a ring polls before it sleeps.
 *
 * DOC: adaptive polling
 *
 * Polling sees the other side's entries a few hundred nanoseconds after
 * they are published, where a doorbell costs a system call and a wake-up
 * (microseconds).  That holds only while each side has a core of its own:
 * on a machine whose cores are shared a poller holds the core the other
 * side (or anyone) is waiting for, and a round trip then costs a
 * scheduler time slice.  A sleeper, on the contrary, is what the
 * scheduler favours: woken by the doorbell, it preempts whatever spins
 * on the core.  So a poller spends a budget of time, not of loops, and
 * polls at all only while polling pays:
 *
 *  - a poll that runs out, or finds it was descheduled (two looks at the
 *    clock far apart), halves the budget: the core is contended, or the
 *    wait is long, and the other side may be the one waiting for the core;
 *  - it also doubles the back-off (0, then 1, 2, 4 ... up to
 *    KVMM_SPIN_BACKOFF_MAX), the number of waits the poller then sleeps
 *    through without polling before it tries again (a probe);
 *  - a poll that sees its event halves the back-off, so polling comes
 *    back as soon as most polls pay, and stays away while most do not
 *    (the back-off is a running vote of the last polls' outcomes);
 *  - a wait that ended (by the doorbell) within the ceiling sets the
 *    budget to twice that wait: the next poll lasts that long;
 *  - a wait that lasted past the ceiling was the other side being idle
 *    (an engine computing between steps) or busy with a long command, not
 *    being kept off a core: the failed poll before it is not counted, in
 *    the back-off nor in the budget, so a burst after an idle spell polls
 *    as soon as its waits are short again, as long as it did before.
 *
 * The back-off is what keeps a contended machine from collapsing: a wait
 * the scheduler's wake-up made short used to set the budget again to
 * twice that wait, and the next poll spun that long on the core the
 * other side needed, so a round trip cost a time slice of whoever held
 * it.  Now, under sustained contention, both sides sleep between
 * doorbells and pay one probe every KVMM_SPIN_BACKOFF_MAX waits; on a
 * quiet machine polls pay and the back-off stays at 0.
 *
 * The ceiling bounds what an idle ring costs: a server thread polls at
 * most that long after its last entry, a client that long for a
 * completion, and both then sleep on their doorbells.  A ceiling is no
 * reason to sleep, though, while the other side is running the very
 * commands the poll waits for: a batch of long prompts can take longer
 * to run than the ceiling, and a client that slept then would pay a
 * wake-up for each batch, the larger the batch the surer.  So a client's
 * poll reads, once per budget, how many entries the dispatcher has run
 * (the header's sq_done, which it stores after each), and while that
 * moves and neither side was descheduled it polls another budget, up to
 * KVMM_SPIN_WORK_NS in all (Linux's mutexes spin on the same grounds,
 * while the owner runs).  Once per budget, not at each look: the line
 * then stays with the dispatcher, whose store costs it nothing.
 *
 * A poll also stops at once, without counting as failed, when it can
 * see that what it waits for cannot happen while it polls: each side
 * says in the ring's header which CPU it last ran on (server_cpu,
 * client_cpu), and a poller that finds the other side's CPU is its own
 * holds the very core the other side needs (the scheduler often puts the
 * two on one CPU when the others are busy: each wake-up pulls the woken
 * side to the waker's CPU).  Sleeping at once hands the CPU over: a
 * round trip then costs two wake-ups on one CPU, a couple of µs, where
 * polling cost the poll's whole budget.  Likewise a server does not poll
 * for entries while its client sleeps waiting for completions.  These
 * are hints, read without trusting them: a wrong one costs a wake-up or
 * a poll, never a lost doorbell (the flags and fences below decide that).
 */
#include <sched.h>

#include "ipc.h"

/* Two looks at the clock this far apart: the poller was descheduled. */
#define KVMM_SPIN_PREEMPT_NS	30000
/* The least a budget grows to after a short wait. */
#define KVMM_SPIN_MIN_NS	1000
/*
 * The longest a poll goes on while the other side is seen working for it
 * (kvmm_spin()'s @work moving); a scheduler's time slice is longer.
 */
#define KVMM_SPIN_WORK_NS	1000000
/* The most waits slept through between two polls. */
#define KVMM_SPIN_BACKOFF_MAX	256

/* 1 + the CPU this thread runs on (glibc reads it from rseq: a load). */
static uint32_t my_cpu(void)
{
	int cpu = sched_getcpu();

	return cpu < 0 ? 0 : (uint32_t)cpu + 1;
}

/**
 * kvmm_spin_say_cpu() - tell the other side which CPU this side runs on
 * @cpu: this side's field in the ring's header (server_cpu, client_cpu)
 *
 * Written only when it changed, not to bounce the line for nothing.
 */
void kvmm_spin_say_cpu(uint32_t *cpu)
{
	uint32_t now = my_cpu();

	if (__atomic_load_n(cpu, __ATOMIC_RELAXED) != now)
		__atomic_store_n(cpu, now, __ATOMIC_RELAXED);
}

/**
 * kvmm_spin_on_my_cpu() - did the other side last run on this CPU?
 * @cpu: its field in the ring's header; 0 (not said) is never ours
 */
bool kvmm_spin_on_my_cpu(const uint32_t *cpu)
{
	uint32_t v = __atomic_load_n(cpu, __ATOMIC_RELAXED);

	return v && v == my_cpu();
}

/**
 * kvmm_spin() - poll with @look for at most @s's budget
 * @s: the poller's budget, adapted here
 * @look: one look for the event; KVMM_SPIN_PEER_OFF ends the poll at
 *	once and is not counted as a failed poll
 * @work: NULL, or how much of the work waited for the other side has
 *	done so far (a counter it moves as it goes): read once per budget,
 *	and while it moves the poll goes on, up to KVMM_SPIN_WORK_NS
 * @arg: their argument
 *
 * While a back-off from failed polls lasts it does not poll at all, only
 * looks once.
 *
 * Return: whether the event came; false means sleep on the doorbell,
 * then tell kvmm_spin_waited() how long the whole wait took.
 */
bool kvmm_spin(struct kvmm_spin *s, enum kvmm_spin_look (*look)(void *arg),
	       uint32_t (*work)(void *arg), void *arg)
{
	enum kvmm_spin_look l;
	uint64_t start, last, now, first;
	uint32_t done = 0;

	s->undo = 0;
	if (!s->budget_ns || s->skip) {
		if (s->skip)
			s->skip--;
		return look(arg) == KVMM_SPIN_READY;
	}
	start = last = first = kvmm_now_ns();
	if (work)
		done = work(arg);
	while ((l = look(arg)) != KVMM_SPIN_READY) {
		if (l == KVMM_SPIN_PEER_OFF)
			return false;
		__builtin_ia32_pause();
		now = kvmm_now_ns();
		if (work && now - start >= s->budget_ns && now - last <= KVMM_SPIN_PREEMPT_NS &&
		    now - first < KVMM_SPIN_WORK_NS) {
			uint32_t d = work(arg);

			if (d != done) {	/* still at it: another budget */
				done = d;
				start = now;
			}
		}
		if (now - last > KVMM_SPIN_PREEMPT_NS || now - start >= s->budget_ns) {
			s->undo_budget_ns = s->budget_ns;
			s->budget_ns /= 2;
			s->undo = s->backoff + 1;
			s->backoff = s->backoff ? 2 * s->backoff : 1;
			if (s->backoff > KVMM_SPIN_BACKOFF_MAX)
				s->backoff = KVMM_SPIN_BACKOFF_MAX;
			s->skip = s->backoff;
			return look(arg) == KVMM_SPIN_READY;	/* it may have come */
		}
		last = now;
	}
	s->backoff /= 2;
	s->skip = s->backoff;
	return true;
}

/**
 * kvmm_spin_waited() - a wait that kvmm_spin() gave up on has ended
 * @s: the poller's budget
 * @waited_ns: how long the wait took, polling and sleeping
 */
void kvmm_spin_waited(struct kvmm_spin *s, uint64_t waited_ns)
{
	uint64_t b = 2 * waited_ns;

	if (waited_ns >= s->max_ns) {
		if (s->undo) {	/* an idle spell, not contention */
			s->backoff = s->undo - 1;
			s->skip = s->backoff;
			s->budget_ns = s->undo_budget_ns;
		}
		s->undo = 0;
		return;
	}
	s->undo = 0;
	if (b < KVMM_SPIN_MIN_NS)
		b = KVMM_SPIN_MIN_NS;
	s->budget_ns = b < s->max_ns ? b : s->max_ns;
}
