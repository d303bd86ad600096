// SPDX-License-Identifier: MIT
/*
 * ipc/server.c - serve command rings to other processes over a Unix
 * socket: what kvmmd runs, and what an engine starts to let kvmmctl in
 * (kvmm_server_start(), the "admin socket").
 *
 * DOC: serving rings
 *
 * An acceptor thread takes connections; each client gets a thread of its
 * own that reads the client's struct kvmm_hello (5 s at most), builds its
 * ring in a memfd (header, SQ, CQ, data area), passes the memfd and two
 * eventfd doorbells back with SCM_RIGHTS, and then serves the ring:
 * consume pending entries (one context lock per batch), ring the client's
 * doorbell if it sleeps, spin a little (long in polling mode), then sleep
 * on the SQ doorbell, the socket and the server's stop event.  The only
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
 * kvmm/ring.c).
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

#define KVMM_MAX_CLIENTS	256
#define KVMM_HELLO_TIMEOUT_MS	5000
#define KVMM_SPIN_SQ		2000		/* pause loops before sleeping */
#define KVMM_SPIN_SQ_POLL	2000000		/* polling mode: ~ a few ms */

struct kvmm_server;

/*
 * struct kvmm_client - one attached ring
 * @srv: its server; @next: on srv->clients (srv->lock)
 * @thread: serves it; @done: the thread finished (srv->lock)
 * @sock: the connection; @sq_fd, @cq_fd: doorbells
 * @region, @size: the shared ring region as mapped here
 * @disp: its dispatcher
 * @poll: spin long before sleeping
 * @bound: the ring is bound to a namespace: the pool is not shared with it
 */
struct kvmm_client {
	struct kvmm_server *srv;
	struct kvmm_client *next;
	pthread_t thread;
	bool done;
	int sock, sq_fd, cq_fd;
	void *region;
	size_t size;
	struct kvmm_disp *disp;
	bool poll;
	bool bound;
};

/*
 * struct kvmm_server - a listening socket and its clients
 * @ctx: the context served
 * @lsock: listening socket; @stop_fd: eventfd signalled once to stop all
 * @acceptor: the accepting thread
 * @lock: protects @clients and @nr_clients
 * @flags: KVMM_SERVER_*
 * @path: the socket's path, unlinked on stop
 */
struct kvmm_server {
	struct kvmm_ctx *ctx;
	int lsock, stop_fd;
	pthread_t acceptor;
	pthread_mutex_t lock;
	struct kvmm_client *clients;
	uint32_t nr_clients;
	uint32_t flags;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* @len bytes from the client, each part within KVMM_HELLO_TIMEOUT_MS. */
static int recv_timed(int sock, void *buf, size_t len)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	size_t got = 0;

	while (got < len) {
		ssize_t n;
		int r = poll(&pfd, 1, KVMM_HELLO_TIMEOUT_MS);

		if (r <= 0)
			return r ? -errno : -ETIMEDOUT;
		n = recv(sock, (char *)buf + got, len - got, 0);
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

/*
 * The client wrote to its socket: a share request is answered; anything
 * else (end of file, stray bytes) ends the connection (nonzero return).
 */
static int client_request(struct kvmm_client *c)
{
	struct kvmm_share_req req;

	if (recv_timed(c->sock, &req, sizeof(req)) || req.magic != KVMM_SHARE_MAGIC ||
	    req.resv[0] || req.resv[1])
		return -EPROTO;
	return kvmm_share_serve(c->srv->ctx, c->sock, c->bound);
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

/* Read the client's hello, build its ring, send it over. */
static int client_setup(struct kvmm_client *c)
{
	struct kvmm_ring_params p, rp;
	struct kvmm_welcome w = { 0 };
	struct kvmm_hello hello;
	int memfd = -1, fds[3], ret;

	ret = recv_timed(c->sock, &hello, sizeof(hello));
	if (ret)
		return ret;
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
	c->poll = (rp.flags & KVMM_RING_F_POLL) || (c->srv->flags & KVMM_SERVER_POLL);
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
	ret = kvmm_sock_send(c->sock, &w, sizeof(w), fds, 3);
	close(memfd);
	return ret;

out_refuse:
	if (memfd >= 0)
		close(memfd);
	w.status = ret;
	kvmm_sock_send(c->sock, &w, sizeof(w), NULL, 0);
	return ret;
}


/* Serve until the client goes or the server stops. */
static void client_serve(struct kvmm_client *c)
{
	struct kvmm_ring_hdr *hdr = c->region;
	struct pollfd pfd[3] = {
		{ .fd = c->sq_fd, .events = POLLIN },
		{ .fd = c->sock, .events = POLLIN },
		{ .fd = c->srv->stop_fd, .events = POLLIN },
	};
	unsigned long spins = c->poll ? KVMM_SPIN_SQ_POLL : KVMM_SPIN_SQ, i;
	uint64_t v;

	for (;;) {
		if (kvmm_disp_pending(c->disp)) {
			if (kvmm_disp_process(c->disp)) {
				notify_client(c);
				continue;
			}
			/* CQ full: the client must reap first; wait for its doorbell */
		} else {
			for (i = 0; i < spins && !kvmm_disp_pending(c->disp); i++)
				__builtin_ia32_pause();
			if (kvmm_disp_pending(c->disp))
				continue;
		}
		__atomic_store_n(&hdr->sq_sleeping, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (kvmm_disp_pending(c->disp) && kvmm_disp_process(c->disp)) {
			__atomic_store_n(&hdr->sq_sleeping, 0, __ATOMIC_RELAXED);
			notify_client(c);
			continue;
		}
		/* A full CQ cannot be waited on by doorbell alone: poll briefly. */
		while (poll(pfd, 3, kvmm_disp_pending(c->disp) ? 1 : -1) < 0 && errno == EINTR)
			;
		__atomic_store_n(&hdr->sq_sleeping, 0, __ATOMIC_RELAXED);
		if (pfd[0].revents & POLLIN)
			(void)!read(c->sq_fd, &v, sizeof(v));
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

static void accept_one(struct kvmm_server *srv)
{
	struct kvmm_client *c;
	int sock = accept4(srv->lsock, NULL, NULL, SOCK_CLOEXEC);

	if (sock < 0)
		return;
	pthread_mutex_lock(&srv->lock);
	reap_clients(srv, false);
	if (srv->nr_clients >= KVMM_MAX_CLIENTS) {
		struct kvmm_welcome w = { .status = -EBUSY };

		pthread_mutex_unlock(&srv->lock);
		kvmm_sock_send(sock, &w, sizeof(w), NULL, 0);
		close(sock);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c) {
		c->srv = srv;
		c->sock = sock;
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
	if (!c)
		close(sock);
}

static void *acceptor_thread(void *arg)
{
	struct kvmm_server *srv = arg;
	struct pollfd pfd[2] = {
		{ .fd = srv->lsock, .events = POLLIN },
		{ .fd = srv->stop_fd, .events = POLLIN },
	};

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (pfd[0].revents & POLLIN)
			accept_one(srv);
	}
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
	srv->stop_fd = eventfd(0, EFD_CLOEXEC);
	srv->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (srv->stop_fd < 0 || srv->lsock < 0) {
		ret = -errno;
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
	kvmm_doorbell(srv->stop_fd);	/* never read: every poller sees it */
	pthread_join(srv->acceptor, NULL);
	pthread_mutex_lock(&srv->lock);
	reap_clients(srv, true);
	pthread_mutex_unlock(&srv->lock);
	pthread_mutex_destroy(&srv->lock);
	close(srv->lsock);
	close(srv->stop_fd);
	unlink(srv->path);
	free(srv);
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
