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
 * scheduler time slice.  So a poller spends a budget of time, not of
 * loops, and the budget follows what polling bought lately:
 *
 *  - a poll that sees its event keeps the budget;
 *  - a poll that runs out halves it: waits that long are not worth a core;
 *  - so does a poll that finds it was descheduled (two looks at the clock
 *    far apart), and it stops there: the core is contended, and the other
 *    side may be the one waiting for it;
 *  - a wait that ended (by the doorbell) within the ceiling sets it to
 *    twice that wait: polling that long would have caught it.
 *
 * Under sustained contention the budget so decays to nothing and both
 * sides sleep between doorbells; a quiet spell brings it back.
 *
 * The ceiling bounds what an idle ring costs: a server thread polls at
 * most that long after its last entry, a client that long for a
 * completion, and both then sleep on their doorbells.
 */
#include "ipc.h"

/* Two looks at the clock this far apart: the poller was descheduled. */
#define KVMM_SPIN_PREEMPT_NS	30000
/* The least a budget grows to after a short wait. */
#define KVMM_SPIN_MIN_NS	1000

/**
 * kvmm_spin() - poll @ready for at most @s's budget
 * @s: the poller's budget, adapted here
 * @ready: the event polled for
 * @arg: its argument
 *
 * Return: whether @ready became true; false means sleep on the doorbell,
 * then tell kvmm_spin_waited() how long the whole wait took.
 */
bool kvmm_spin(struct kvmm_spin *s, bool (*ready)(const void *arg), const void *arg)
{
	uint64_t start, last, now;

	if (!s->budget_ns)
		return ready(arg);
	start = last = kvmm_now_ns();
	while (!ready(arg)) {
		__builtin_ia32_pause();
		now = kvmm_now_ns();
		if (now - last > KVMM_SPIN_PREEMPT_NS || now - start >= s->budget_ns) {
			s->budget_ns /= 2;
			return ready(arg);
		}
		last = now;
	}
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

	if (waited_ns >= s->max_ns)
		return;
	if (b < KVMM_SPIN_MIN_NS)
		b = KVMM_SPIN_MIN_NS;
	s->budget_ns = b < s->max_ns ? b : s->max_ns;
}
