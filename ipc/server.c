// SPDX-License-Identifier: MIT
/*
 * ipc/server.c - serve command rings to other processes over a Unix
 * socket: what kvmmd runs, and what an engine starts to let kvmmctl in
 * (kvmm_server_start(), the "admin socket").
 *
 * DOC: serving rings
 *
 * An acceptor thread takes connections and reads their struct
 * kvmm_hello itself, without blocking: at most max_pending handshakes at
 * a time (a new connection evicts the oldest when they are all taken),
 * each with one deadline for the whole hello (handshake_ms), so
 * connections that trickle their hello byte by byte hold neither a client
 * slot nor a thread, and cannot lock new clients out.  A complete hello
 * is refused with -EBUSY over max_clients (after reading it all, so the refusal is what the
 * client reads, not a reset), or handed to a thread of its own that
 * builds the ring in a sealed memfd (header, SQ, CQ, data area), passes
 * the memfd and two eventfd doorbells back with SCM_RIGHTS, and then
 * serves the ring:
 * consume pending entries (one context lock per batch), ring the client's
 * doorbell if it sleeps, poll for a while (ipc/spin.c: longer in polling
 * mode, and one thread of the server at a time), nap on the SQ's futex
 * bell for at most KVMM_NAP_MS, then sleep on the SQ doorbell, the
 * socket and the server's stop event.  When the
 * CQ is full the thread sleeps on the doorbell at once, with cq_wait set: the client
 * rings the SQ doorbell once it has reaped and waits (or submits), so a
 * client that leaves its CQ full costs nothing while it sleeps.  The only
 * thing a client may write after its hello is a request for the KV pool
 * (ipc/share.c), answered on the same thread.
 *
 * A client that closes its socket, exits or is killed leaves the socket at
 * EOF; its thread then destroys its dispatcher, which closes every
 * sequence the ring still holds and drops every pin it took: no page stays
 * owned or locked for a client that is gone.  Bytes that are not a share
 * request are treated the same.
 *
 * Nothing the client can write into the shared region is trusted: the
 * dispatcher keeps its own copy of the geometry and of its indices (see
 * disp/dispatch.c).
 *
 * No server thread waits on a client without a deadline and the stop
 * event: every socket is non-blocking, and what the server sends (the
 * welcome, share answers) must be out within send_ms, what it reads
 * after the hello (a share request, once its first byte came) within
 * handshake_ms; a nap on the bell lasts KVMM_NAP_MS at most, and a ring
 * thread looks at the server's stop flag after each command and each
 * nap, so a client that keeps it busy does not keep it from stopping.
 * So kvmm_server_stop() ends in bounded time whatever the
 * clients do.  The limits (struct kvmm_server_limits) are set with
 * kvmm_server_set_limits().
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc.h"

/* The defaults of struct kvmm_server_limits. */
#define KVMM_MAX_CLIENTS	256
#define KVMM_MAX_PENDING	64	/* handshakes in progress, beside the clients */
#define KVMM_HANDSHAKE_MS	5000	/* a whole hello (or share request) */
#define KVMM_SEND_MS		5000	/* a whole welcome or share answer */
#define KVMM_PENDING_CAP	1024	/* the most max_pending may be */
#define KVMM_SPIN_SQ_NS		50000		/* idle poll before sleeping */
#define KVMM_SPIN_SQ_POLL_NS	2000000		/* polling mode */

struct kvmm_server;

/*
 * struct kvmm_client - one attached ring
 * @srv: its server; @next: on srv->clients (srv->lock)
 * @thread: serves it; @done: the thread finished (srv->lock)
 * @hello: what the acceptor read
 * @sock: the connection (non-blocking); @sq_fd, @cq_fd: doorbells
 * @region, @size: the shared ring region as mapped here
 * @disp: its dispatcher
 * @spin: how long it polls an empty SQ before sleeping (long in polling
 *	mode); only the thread holding srv->poller polls
 * @bound: the ring is bound to a namespace: the pool is not shared with it
 */
struct kvmm_client {
	struct kvmm_server *srv;
	struct kvmm_client *next;
	pthread_t thread;
	bool done;
	struct kvmm_hello hello;
	int sock, sq_fd, cq_fd;
	void *region;
	size_t size;
	struct kvmm_disp *disp;
	struct kvmm_spin spin;
	bool bound;
};

/*
 * struct kvmm_pending - a handshake in progress (the acceptor's own)
 * @sock: the connection (non-blocking)
 * @got: bytes of @hello read so far
 * @deadline: kvmm_now_ms() by which the whole hello must be in
 */
struct kvmm_pending {
	int sock;
	uint32_t got;
	uint64_t deadline;
	struct kvmm_hello hello;
};

/*
 * struct kvmm_server - a listening socket and its clients
 * @ctx: the context served
 * @lsock: listening socket; @stop_fd: eventfd signalled once to stop all
 * @acceptor: the accepting thread
 * @poller: a client thread polls its empty SQ (at most one at a time,
 *	so an idle server never holds more than one core)
 * @stopping: kvmm_server_stop() has begun: client threads leave
 * @lock: protects @clients and @nr_clients; taken to change @lim
 * @lim: the limits (each field read on its own, atomically)
 * @flags: KVMM_SERVER_*
 * @path: the socket's path, unlinked on stop
 * @pend, @pfd: the acceptor's handshakes and its poll set (KVMM_PENDING_CAP)
 */
struct kvmm_server {
	struct kvmm_ctx *ctx;
	int lsock, stop_fd;
	pthread_t acceptor;
	bool poller, stopping;
	pthread_mutex_t lock;
	struct kvmm_client *clients;
	uint32_t nr_clients;
	struct kvmm_server_limits lim;
	uint32_t flags;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct kvmm_pending *pend;
	struct pollfd *pfd;
};

/* One of srv->lim's fields, as set now. */
static uint32_t limit(const uint32_t *field)
{
	return __atomic_load_n(field, __ATOMIC_RELAXED);
}

/* A deadline @ms from now, given up early when the server stops. */
static struct kvmm_deadline deadline_in(struct kvmm_server *srv, uint32_t ms)
{
	return (struct kvmm_deadline){ .at_ms = kvmm_now_ms() + ms, .stop_fd = srv->stop_fd };
}

/*
 * @len bytes from the client, all of them by handshake_ms from now.  It
 * has no business sending descriptors: any are closed (-EPROTO).
 */
static int recv_until(struct kvmm_server *srv, int sock, void *buf, size_t len)
{
	struct kvmm_deadline dl = deadline_in(srv, limit(&srv->lim.handshake_ms));
	uint32_t nfds;

	return kvmm_sock_recv_until(sock, buf, len, NULL, 0, &nfds, &dl);
}

/*
 * The client wrote to its socket: a share request is answered; anything
 * else (end of file, stray bytes) ends the connection (nonzero return).
 */
static int client_request(struct kvmm_client *c)
{
	struct kvmm_share_req req;

	struct kvmm_deadline dl;

	if (recv_until(c->srv, c->sock, &req, sizeof(req)) || req.magic != KVMM_SHARE_MAGIC ||
	    req.resv[0] || req.resv[1])
		return -EPROTO;
	dl = deadline_in(c->srv, limit(&c->srv->lim.send_ms));
	return kvmm_share_serve(c->srv->ctx, c->sock, c->bound, &dl);
}

/*
 * With KVMM_SERVER_NS_UID a client that is not root is bound to the
 * namespace of its uid (SO_PEERCRED): a binding it asked for must agree.
 */
static int client_tenant(struct kvmm_client *c, struct kvmm_ring_params *p)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (!(c->srv->flags & KVMM_SERVER_NS_UID))
		return 0;
	if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		return -errno;
	if (!cred.uid)
		return 0;
	if ((p->flags & KVMM_RING_F_NS) && p->ns != cred.uid)
		return -EPERM;
	p->flags |= KVMM_RING_F_NS;
	p->ns = cred.uid;
	return 0;
}

/* After a batch or a deferred completion: wake the client if it sleeps. */
static void notify_client(void *arg)
{
	struct kvmm_client *c = arg;

	kvmm_ring_wake(c->region, c->cq_fd);
}

/* Refuse a connection with @status: best effort, never waiting. */
static void refuse(int sock, int status)
{
	struct kvmm_welcome w = { .status = status };
	struct kvmm_deadline now = { .at_ms = 0, .stop_fd = -1 };

	kvmm_sock_send_until(sock, &w, sizeof(w), NULL, 0, &now);
}

/* Check the client's hello, build its ring, send it over. */
static int client_setup(struct kvmm_client *c)
{
	const struct kvmm_hello hello = c->hello;
	struct kvmm_deadline dl = deadline_in(c->srv, limit(&c->srv->lim.send_ms));
	struct kvmm_ring_params p, rp;
	struct kvmm_welcome w = { 0 };
	int memfd = -1, fds[3], ret;

	if (hello.magic != KVMM_RING_MAGIC || hello.abi != KVMM_ABI_VERSION ||
	    hello.sqe_size != sizeof(struct kvmm_sqe) ||
	    hello.cqe_size != sizeof(struct kvmm_cqe) || hello.resv0 || hello.resv1) {
		ret = -EPROTO;
		goto out_refuse;
	}
	p = (struct kvmm_ring_params){ .sq_entries = hello.sq_entries,
				       .cq_entries = hello.cq_entries,
				       .buf_size = hello.buf_size, .flags = hello.flags,
				       .ns = hello.ns };
	ret = client_tenant(c, &p);
	if (ret)
		goto out_refuse;
	c->size = kvmm_ring_layout(&p, &rp);
	if (!c->size) {
		ret = -EINVAL;
		goto out_refuse;
	}
	c->spin.max_ns = (rp.flags & KVMM_RING_F_POLL) || (c->srv->flags & KVMM_SERVER_POLL) ?
			 KVMM_SPIN_SQ_POLL_NS : KVMM_SPIN_SQ_NS;
	c->spin.budget_ns = c->spin.max_ns;
	/* Sealed: a client that shrank it would make our next access a SIGBUS. */
	memfd = memfd_create("kvmm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0 || ftruncate(memfd, (off_t)c->size) < 0 ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = -errno;
		goto out_refuse;
	}
	c->region = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (c->region == MAP_FAILED) {
		c->region = NULL;
		ret = -errno;
		goto out_refuse;
	}
	c->sq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->sq_fd < 0 || c->cq_fd < 0) {
		ret = -errno;
		goto out_refuse;
	}
	ret = kvmm_disp_create(c->srv->ctx, true, &c->disp);
	if (ret)
		goto out_refuse;
	c->bound = rp.flags & KVMM_RING_F_NS;
	if (c->bound)
		kvmm_disp_bind_ns(c->disp, rp.ns);
	kvmm_ring_hdr_init(c->region, &rp, kvmm_disp_id(c->disp));
	kvmm_ring_attach(c->disp, c->region, &rp);
	kvmm_disp_set_notify(c->disp, notify_client, c);
	kvmm_disp_set_buf(c->disp, 0, rp.buf_size ? (char *)c->region +
			  kvmm_ring_buf_off(&rp) : NULL, rp.buf_size);

	w.ring_id = kvmm_disp_id(c->disp);
	w.map_size = c->size;
	w.sq_entries = rp.sq_entries;
	w.cq_entries = rp.cq_entries;
	w.buf_size = rp.buf_size;
	fds[0] = memfd;
	fds[1] = c->sq_fd;
	fds[2] = c->cq_fd;
	ret = kvmm_sock_send_until(c->sock, &w, sizeof(w), fds, 3, &dl);
	close(memfd);
	return ret;

out_refuse:
	if (memfd >= 0)
		close(memfd);
	w.status = ret;
	kvmm_sock_send_until(c->sock, &w, sizeof(w), NULL, 0, &dl);
	return ret;
}


/*
 * Entries to run?  None can come while the client sleeps waiting for
 * completions it has not been given (every completion posted is read:
 * the head has caught up with the tail), nor while this thread holds the
 * CPU the client last ran on.  A client still flagged asleep with
 * completions to read is being woken by them: its next entry is what
 * the poll is for.
 */
static enum kvmm_spin_look sq_look(void *arg)
{
	const struct kvmm_client *c = arg;
	struct kvmm_ring_hdr *hdr = c->region;

	if (kvmm_disp_pending(c->disp))
		return KVMM_SPIN_READY;
	if ((__atomic_load_n(&hdr->cq_sleeping, __ATOMIC_RELAXED) &&
	     __atomic_load_n(&hdr->cq_head, __ATOMIC_RELAXED) ==
	     __atomic_load_n(&hdr->cq_tail, __ATOMIC_RELAXED)) ||
	    kvmm_spin_on_my_cpu(&hdr->client_cpu))
		return KVMM_SPIN_PEER_OFF;
	return KVMM_SPIN_NOT_YET;
}

/*
 * Poll @c's empty SQ for a while (ipc/spin.c), if no other client thread
 * of the server is polling.  Return: entries came.
 */
static bool client_poll(struct kvmm_client *c)
{
	bool *poller = &c->srv->poller, got;

	if (__atomic_exchange_n(poller, true, __ATOMIC_ACQUIRE))
		return kvmm_disp_pending(c->disp);
	got = kvmm_spin(&c->spin, sq_look, NULL, c);
	__atomic_store_n(poller, false, __ATOMIC_RELEASE);
	return got;
}

/*
 * Sleep on the SQ doorbell, the socket and the stop event, saying first
 * what we wait for (new entries, the SQ empty since @idle; with a full
 * CQ, room in it too).
 * Return: false when entries could run after all, and did (no sleep);
 * true after a sleep, its events in pfd[0..2].revents.
 */
static bool client_sleep(struct kvmm_client *c, struct pollfd *pfd, bool cq_full,
			 uint64_t idle)
{
	struct kvmm_ring_hdr *hdr = c->region;
	uint64_t v;
	bool ran;

	/*
	 * Flag, fence, look once more: pairs with the client's "publish
	 * sq_tail or cq_head, fence, read our flags" in kvmm_submit() and
	 * wait_cq() (ipc/client.c), so its doorbell wakes us and no timer
	 * is needed.
	 */
	__atomic_store_n(&hdr->sq_sleeping, KVMM_RING_SLEEP_DOORBELL, __ATOMIC_RELAXED);
	__atomic_store_n(&hdr->cq_wait, cq_full, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ran = kvmm_disp_pending(c->disp) && kvmm_disp_process(c->disp);
	if (!ran)
		while (poll(pfd, 3, -1) < 0 && errno == EINTR)
			;
	__atomic_store_n(&hdr->sq_sleeping, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&hdr->cq_wait, 0, __ATOMIC_RELAXED);
	if (ran) {
		notify_client(c);
		return false;
	}
	if (pfd[0].revents & POLLIN)
		(void)!read(c->sq_fd, &v, sizeof(v));
	if (!cq_full)	/* how long the SQ stayed empty: worth polling? */
		kvmm_spin_waited(&c->spin, kvmm_now_ns() - idle);
	return true;
}

/*
 * Nap on the SQ bell (a futex: no descriptor to read afterwards) for the
 * client's next entries, at most KVMM_NAP_MS: the socket and the stop
 * event are not watched meanwhile, so a nap that runs out is followed by
 * a sleep on the doorbell (client_sleep()).
 * Return: true when woken, or when entries came before it slept; false
 * when it ran out, or the client does not ring bells.
 */
static bool client_nap(struct kvmm_client *c, uint64_t idle)
{
	struct kvmm_ring_hdr *hdr = c->region;
	uint32_t seen = __atomic_load_n(&hdr->sq_bell, __ATOMIC_ACQUIRE);
	bool woke = true;

	if (!(__atomic_load_n(&hdr->client_wakes, __ATOMIC_RELAXED) & KVMM_RING_WAKES_BELL))
		return false;	/* a client that only writes the doorbell */
	/* Read the bell, set our flag, fence, look again (kvmm_wake()). */
	__atomic_store_n(&hdr->sq_sleeping, KVMM_RING_SLEEP_BELL, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!kvmm_disp_pending(c->disp))
		woke = !kvmm_bell_nap(&hdr->sq_bell, seen, KVMM_NAP_MS);
	__atomic_store_n(&hdr->sq_sleeping, 0, __ATOMIC_RELAXED);
	if (woke)	/* how long the SQ stayed empty: worth polling? */
		kvmm_spin_waited(&c->spin, kvmm_now_ns() - idle);
	return woke;
}

/* Serve until the client goes or the server stops. */
static void client_serve(struct kvmm_client *c)
{
	struct pollfd pfd[3] = {
		{ .fd = c->sq_fd, .events = POLLIN },
		{ .fd = c->sock, .events = POLLIN },
		{ .fd = c->srv->stop_fd, .events = POLLIN },
	};

	for (;;) {
		bool cq_full = false;
		uint64_t idle = 0;

		/* a client that keeps us busy does not keep the server from stopping */
		if (__atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED))
			return;
		kvmm_spin_say_cpu(&((struct kvmm_ring_hdr *)c->region)->server_cpu);

		if (kvmm_disp_pending(c->disp)) {
			if (kvmm_disp_process(c->disp)) {
				notify_client(c);
				continue;
			}
			cq_full = true;	/* the client must reap first */
		} else {
			idle = kvmm_now_ns();
			if (client_poll(c) || client_nap(c, idle))
				continue;
		}
		if (!client_sleep(c, pfd, cq_full, idle))
			continue;
		if (pfd[2].revents)
			return;	/* stop */
		if (pfd[1].revents && client_request(c))
			return;	/* EOF, error, stray bytes */
	}
}

static void client_free(struct kvmm_client *c)
{
	kvmm_disp_destroy(c->disp);
	if (c->region)
		munmap(c->region, c->size);
	if (c->sq_fd >= 0)
		close(c->sq_fd);
	if (c->cq_fd >= 0)
		close(c->cq_fd);
	close(c->sock);
}

static void *client_thread(void *arg)
{
	struct kvmm_client *c = arg;

	if (!client_setup(c))
		client_serve(c);
	client_free(c);
	pthread_mutex_lock(&c->srv->lock);
	c->done = true;
	pthread_mutex_unlock(&c->srv->lock);
	return NULL;
}

/* Join the threads of clients that finished; srv->lock held. */
static void reap_clients(struct kvmm_server *srv, bool all)
{
	struct kvmm_client **pp = &srv->clients;

	while (*pp) {
		struct kvmm_client *c = *pp;

		if (!c->done && !all) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		srv->nr_clients--;
		pthread_mutex_unlock(&srv->lock);
		pthread_join(c->thread, NULL);
		free(c);
		pthread_mutex_lock(&srv->lock);
	}
}

/* A complete hello: a client of its own, or -EBUSY over the limit. */
static void handshake_done(struct kvmm_server *srv, int sock, const struct kvmm_hello *hello)
{
	struct kvmm_client *c = NULL;

	pthread_mutex_lock(&srv->lock);
	reap_clients(srv, false);
	if (srv->nr_clients < limit(&srv->lim.max_clients))
		c = calloc(1, sizeof(*c));
	if (c) {
		c->srv = srv;
		c->sock = sock;
		c->hello = *hello;
		c->sq_fd = c->cq_fd = -1;
		if (pthread_create(&c->thread, NULL, client_thread, c)) {
			free(c);
			c = NULL;
		} else {
			c->next = srv->clients;
			srv->clients = c;
			srv->nr_clients++;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	if (!c) {
		/* the hello was read in full: the client reads this, not a reset */
		refuse(sock, -EBUSY);
		close(sock);
	}
}

/* Drop handshake @i: refused with @status (0: silently) and closed. */
static void pending_drop(struct kvmm_pending *pend, uint32_t *nr, uint32_t i, int status)
{
	if (status)
		refuse(pend[i].sock, status);
	close(pend[i].sock);
	pend[i] = pend[--*nr];
}

/* Read what handshake @i sent; a complete hello leaves the pending set. */
static void pending_read(struct kvmm_server *srv, struct kvmm_pending *pend, uint32_t *nr,
			 uint32_t i)
{
	struct kvmm_pending *p = &pend[i];

	for (;;) {
		ssize_t n = recv(p->sock, (char *)&p->hello + p->got,
				 sizeof(p->hello) - p->got, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;		/* more later */
		if (n <= 0) {
			pending_drop(pend, nr, i, 0);	/* gone */
			return;
		}
		p->got += (uint32_t)n;
		if (p->got == sizeof(p->hello)) {
			handshake_done(srv, p->sock, &p->hello);
			pend[i] = pend[--*nr];
			return;
		}
	}
}

/*
 * Take every connection waiting; each becomes a pending handshake (the
 * oldest one makes room when all max_pending are taken) whose hello
 * is read at once: a well-behaved client has usually sent it already.
 */
static void accept_all(struct kvmm_server *srv, struct kvmm_pending *pend, uint32_t *nr)
{
	for (;;) {
		int sock = accept4(srv->lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		uint32_t i, old = 0;

		if (sock < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;		/* EAGAIN: none left; EMFILE...: next time */
		}
		while (*nr && *nr >= limit(&srv->lim.max_pending)) {
			for (old = 0, i = 1; i < *nr; i++)
				if (pend[i].deadline < pend[old].deadline)
					old = i;
			pending_drop(pend, nr, old, -EBUSY);
		}
		pend[*nr] = (struct kvmm_pending){
			.sock = sock,
			.deadline = kvmm_now_ms() + limit(&srv->lim.handshake_ms),
		};
		pending_read(srv, pend, nr, (*nr)++);
	}
}

/* Milliseconds to the nearest handshake deadline, -1 for none. */
static int pending_timeout(const struct kvmm_pending *pend, uint32_t nr)
{
	struct kvmm_deadline dl = { .at_ms = KVMM_DEADLINE_NEVER, .stop_fd = -1 };
	uint32_t i;

	for (i = 0; i < nr; i++)
		if (pend[i].deadline < dl.at_ms)
			dl.at_ms = pend[i].deadline;
	return kvmm_deadline_left(&dl);	/* -1 when none is pending */
}

static void *acceptor_thread(void *arg)
{
	struct kvmm_server *srv = arg;
	struct kvmm_pending *pend = srv->pend;
	struct pollfd *pfd = srv->pfd;
	uint32_t nr = 0, i;

	for (;;) {
		uint64_t now;

		pfd[0] = (struct pollfd){ .fd = srv->lsock, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = srv->stop_fd, .events = POLLIN };
		for (i = 0; i < nr; i++)
			pfd[2 + i] = (struct pollfd){ .fd = pend[i].sock, .events = POLLIN };
		if (poll(pfd, 2 + nr, pending_timeout(pend, nr)) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		/* backwards: a dropped entry is replaced by one already seen */
		now = kvmm_now_ms();
		for (i = nr; i--; ) {
			if (pfd[2 + i].revents)
				pending_read(srv, pend, &nr, i);
			else if (now >= pend[i].deadline)
				pending_drop(pend, &nr, i, -ETIMEDOUT);
		}
		if (pfd[0].revents & POLLIN)
			accept_all(srv, pend, &nr);
	}
	while (nr)
		pending_drop(pend, &nr, nr - 1, 0);
	return NULL;
}

/* Bind @path, replacing a stale socket but never a live server's. */
static int bind_path(int sock, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int probe;

	strcpy(sa.sun_path, path);
	if (!bind(sock, (struct sockaddr *)&sa, sizeof(sa)))
		return 0;
	if (errno != EADDRINUSE)
		return -errno;
	if (lstat(path, &st) || !S_ISSOCK(st.st_mode))
		return -EEXIST;		/* something else lives there: leave it */
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe < 0)
		return -errno;
	if (!connect(probe, (struct sockaddr *)&sa, sizeof(sa))) {
		close(probe);
		return -EADDRINUSE;	/* a server answers there */
	}
	close(probe);
	if (unlink(path) && errno != ENOENT)
		return -errno;
	return bind(sock, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
}

/**
 * kvmm_server_start() - serve rings on @ctx at a Unix socket
 * @ctx: the context
 * @path: socket path; a stale socket there is replaced
 * @flags: KVMM_SERVER_POLL; KVMM_SERVER_NS_UID: bind every client that is
 *	not root to the namespace of its uid (root clients, the admin's
 *	kvmmctl among them, stay unbound)
 * @srvp: out
 *
 * The context is then driven by server threads too: the owner must use
 * kvmm_lock() around its own direct calls (rings take it per batch).
 *
 * Return: 0; -EINVAL for a bad path or flags; -EADDRINUSE when a server
 * already answers at @path; -EEXIST when @path is something other than a
 * socket; the socket, bind or thread error.
 */
KVMM_EXPORT int kvmm_server_start(struct kvmm_ctx *ctx, const char *path, uint32_t flags,
				  struct kvmm_server **srvp)
{
	struct kvmm_server *srv;
	int ret;

	if (!ctx || !path || !srvp || !*path ||
	    (flags & ~(KVMM_SERVER_POLL | KVMM_SERVER_NS_UID)))
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	if (strlen(path) >= sizeof(srv->path)) {
		free(srv);
		return -EINVAL;
	}
	strcpy(srv->path, path);
	srv->ctx = ctx;
	srv->flags = flags;
	srv->lim = (struct kvmm_server_limits){
		.max_clients = KVMM_MAX_CLIENTS, .max_pending = KVMM_MAX_PENDING,
		.handshake_ms = KVMM_HANDSHAKE_MS, .send_ms = KVMM_SEND_MS,
	};
	srv->pend = calloc(KVMM_PENDING_CAP, sizeof(*srv->pend));
	srv->pfd = calloc(2 + KVMM_PENDING_CAP, sizeof(*srv->pfd));
	srv->stop_fd = eventfd(0, EFD_CLOEXEC);
	srv->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (srv->stop_fd < 0 || srv->lsock < 0) {
		ret = -errno;
		goto out_close;
	}
	if (!srv->pend || !srv->pfd) {
		ret = -ENOMEM;
		goto out_close;
	}
	ret = bind_path(srv->lsock, path);
	if (ret)
		goto out_close;
	if (listen(srv->lsock, 64)) {
		ret = -errno;
		goto out_unlink;
	}
	pthread_mutex_init(&srv->lock, NULL);
	ret = -pthread_create(&srv->acceptor, NULL, acceptor_thread, srv);
	if (ret) {
		pthread_mutex_destroy(&srv->lock);
		goto out_unlink;
	}
	*srvp = srv;
	return 0;

out_unlink:
	unlink(path);
out_close:
	if (srv->lsock >= 0)
		close(srv->lsock);
	if (srv->stop_fd >= 0)
		close(srv->stop_fd);
	free(srv->pend);
	free(srv->pfd);
	free(srv);
	return ret;
}

/**
 * kvmm_server_stop() - stop serving; every client's ring is released
 * @srv: the server, or NULL
 */
KVMM_EXPORT void kvmm_server_stop(struct kvmm_server *srv)
{
	if (!srv)
		return;
	__atomic_store_n(&srv->stopping, true, __ATOMIC_RELAXED);	/* seen after a nap */
	kvmm_doorbell(srv->stop_fd);	/* never read: every poller sees it */
	pthread_join(srv->acceptor, NULL);
	pthread_mutex_lock(&srv->lock);
	reap_clients(srv, true);
	pthread_mutex_unlock(&srv->lock);
	pthread_mutex_destroy(&srv->lock);
	close(srv->lsock);
	close(srv->stop_fd);
	unlink(srv->path);
	free(srv->pend);
	free(srv->pfd);
	free(srv);
}

/**
 * kvmm_server_set_limits() - change what the server grants its clients
 * @srv: the server
 * @lim: the new limits; a field of 0 sets that limit's default
 *
 * Takes effect for connections and requests from now on: lowering
 * max_clients detaches nobody, a lower max_pending evicts the oldest
 * handshakes at the next connection.
 *
 * Return: 0; -EINVAL for a NULL argument, a non-zero reserved field or
 * max_pending over 1024.
 */
KVMM_EXPORT int kvmm_server_set_limits(struct kvmm_server *srv,
				       const struct kvmm_server_limits *lim)
{
	if (!srv || !lim || lim->resv[0] || lim->resv[1] || lim->resv[2] || lim->resv[3] ||
	    lim->max_pending > KVMM_PENDING_CAP)
		return -EINVAL;
	pthread_mutex_lock(&srv->lock);
	__atomic_store_n(&srv->lim.max_clients, lim->max_clients ?: KVMM_MAX_CLIENTS,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&srv->lim.max_pending, lim->max_pending ?: KVMM_MAX_PENDING,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&srv->lim.handshake_ms, lim->handshake_ms ?: KVMM_HANDSHAKE_MS,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&srv->lim.send_ms, lim->send_ms ?: KVMM_SEND_MS, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&srv->lock);
	return 0;
}

/**
 * kvmm_server_clients() - rings attached now (finished ones not counted)
 * @srv: the server
 */
KVMM_EXPORT uint32_t kvmm_server_clients(struct kvmm_server *srv)
{
	struct kvmm_client *c;
	uint32_t n = 0;

	pthread_mutex_lock(&srv->lock);
	for (c = srv->clients; c; c = c->next)
		n += !c->done;
	pthread_mutex_unlock(&srv->lock);
	return n;
}
