/* SPDX-License-Identifier: MIT */
/*
 * ipc/ipc.h - the transport layer's private declarations.  ipc/ knows the
 * public API and the dispatcher interface (disp/disp.h), nothing else of
 * the core.
 */
#ifndef KVMM_IPC_H
#define KVMM_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>
#include "autoconf.h"
#include "../disp/disp.h"
#include "../driver/driver.h"

#define KVMM_EXPORT		__attribute__((visibility("default")))
#define KVMM_RING_MAX_ENTRIES	32768
#define KVMM_RING_MAX_BUF	(1u << 30)

size_t kvmm_ring_layout(const struct kvmm_ring_params *p, struct kvmm_ring_params *out);
size_t kvmm_ring_buf_off(const struct kvmm_ring_params *p);
void kvmm_ring_hdr_init(struct kvmm_ring_hdr *hdr, const struct kvmm_ring_params *p,
			uint32_t ring_id);
void kvmm_ring_attach(struct kvmm_disp *d, void *region, const struct kvmm_ring_params *p);
/*
 * The longest nap on a futex bell: past it a waiter sleeps on its eventfd
 * doorbell beside the socket (a peer gone), the deadline and the stop
 * event, which a nap does not watch.
 */
#define KVMM_NAP_MS		10

void kvmm_doorbell(int fd);
void kvmm_wake(uint32_t *sleeping, uint32_t *bell, int fd);
int kvmm_bell_nap(uint32_t *bell, uint32_t seen, int ms);
void kvmm_ring_wake(struct kvmm_ring_hdr *hdr, int cq_fd);
/*
 * struct kvmm_deadline - how long a wait on the other side may last: a
 * client's on its server, a server thread's on a client
 * @at_ms: kvmm_now_ms() after which it gives up (0: do not wait at all;
 *	KVMM_DEADLINE_NEVER: as long as it takes)
 * @stop_fd: an event waited on beside the socket (the server's stop
 *	event); -1 for none
 */
struct kvmm_deadline {
	uint64_t at_ms;
	int stop_fd;
};

#define KVMM_DEADLINE_NEVER	UINT64_MAX

uint64_t kvmm_now_ms(void);
int kvmm_deadline_init(struct kvmm_deadline *dl, const struct timespec *timeout);
int kvmm_deadline_left(const struct kvmm_deadline *dl);
int kvmm_sock_send(int sock, const void *buf, size_t len, const int *fds, uint32_t nfds);
int kvmm_sock_send_until(int sock, const void *buf, size_t len, const int *fds,
			 uint32_t nfds, const struct kvmm_deadline *dl);
int kvmm_sock_recv(int sock, void *buf, size_t len, int *fds, uint32_t max,
		   uint32_t *nfds);
int kvmm_sock_recv_until(int sock, void *buf, size_t len, int *fds, uint32_t max,
			 uint32_t *nfds, const struct kvmm_deadline *dl);
/**
 * struct kvmm_spin - how long one side of a ring polls before it sleeps
 *	(ipc/spin.c)
 * @budget_ns: the next poll's length; adapts to what polling bought
 * @max_ns: the most it grows to: what an idle poller may cost
 * @backoff: waits to sleep through, without polling, after a poll:
 *	doubled by a poll that failed, halved by one that paid
 * @skip: what is left of it before the next poll
 * @undo: 1 + the back-off before the last poll, which failed, until
 *	kvmm_spin_waited() hears how long that wait was; 0 otherwise
 * @undo_budget_ns: the budget before that poll
 */
struct kvmm_spin {
	uint64_t budget_ns;
	uint64_t max_ns;
	uint64_t undo_budget_ns;
	uint32_t backoff;
	uint32_t skip;
	uint32_t undo;
};

/* What one look of a poll found: the event, nothing yet, or no use polling. */
enum kvmm_spin_look {
	KVMM_SPIN_NOT_YET,
	KVMM_SPIN_READY,
	KVMM_SPIN_PEER_OFF,	/* the other side cannot act now: sleep at once */
};

uint64_t kvmm_now_ns(void);	/* the library's monotonic clock (kvmm/) */
bool kvmm_spin(struct kvmm_spin *s, enum kvmm_spin_look (*look)(void *arg),
	       uint32_t (*work)(void *arg), void *arg);
void kvmm_spin_say_cpu(uint32_t *cpu);
bool kvmm_spin_on_my_cpu(const uint32_t *cpu);
void kvmm_spin_waited(struct kvmm_spin *s, uint64_t waited_ns);
int kvmm_share_serve(struct kvmm_ctx *ctx, int sock, bool bound,
		     const struct kvmm_deadline *dl);

#endif
