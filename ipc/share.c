// SPDX-License-Identifier: MIT
/*
 * ipc/share.c - descriptors over the socket: the ring's welcome, and the
 * KV pool shared with a client (kvmm_kv_pool_attach()).
 *
 * DOC: sharing the pool across processes
 *
 * kvmmd owns the device memory; an engine in another process must write
 * the KV its attention computes into the very pages the page table names.
 * The client sends a struct kvmm_share_req on its ring's socket; the
 * server thread serving that ring takes the context lock, asks the core
 * for a description (kvmm_kv_share(): the backend exports every physical
 * allocation as a file descriptor: a memfd for mock, a CUDA POSIX handle
 * for cuda), and sends it: the struct kvmm_share, its extents, then the
 * descriptors with SCM_RIGHTS in batches of at most KVMM_SHARE_FDS_MAX
 * (the kernel takes no more in one message).  The client hands them to
 * the same backend's import (kvmm_kv_pool_open()), which maps the memory at
 * addresses of its own, and closes them.  The wire format is in
 * uapi/kvmm/ring.h.
 *
 * A ring bound to a namespace (a tenant under KVMM_SERVER_NS_UID, or a
 * client that bound itself) is refused with -EPERM.  The descriptors map
 * whole buffers, and the frames of one namespace are scattered through
 * them and change owner as pages are freed and reused: a mapping limited
 * to one namespace would need a mapping per frame, remade on every
 * allocation.  So the pool is shared only with unbound clients (root, and
 * whoever the socket's permissions let in without --ns-per-uid): they are
 * trusted with every tenant's KV anyway.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"

#define KVMM_SHARE_MAX_FDS	(1u << 20)	/* a client's sanity bound */

/**
 * kvmm_now_ms() - CLOCK_MONOTONIC in milliseconds, what deadlines count in
 */
uint64_t kvmm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/**
 * kvmm_deadline_init() - a deadline @timeout from now, or none
 * @dl: caller's memory, set up on success (no stop event)
 * @timeout: how long; NULL for KVMM_DEADLINE_NEVER
 *
 * The deadline is rounded up to the next millisecond, so a wait never
 * gives up before @timeout has passed.
 *
 * Return: 0, or -EINVAL for a negative or unnormalised @timeout.
 */
int kvmm_deadline_init(struct kvmm_deadline *dl, const struct timespec *timeout)
{
	struct timespec ts;
	uint64_t now_ns;

	dl->stop_fd = -1;
	dl->at_ms = KVMM_DEADLINE_NEVER;
	if (!timeout)
		return 0;
	if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L)
		return -EINVAL;
	/* Past ~292 years from boot the ns sum overflows: that is never. */
	if ((uint64_t)timeout->tv_sec >= UINT64_MAX / 2000000000)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now_ns = (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
	dl->at_ms = (now_ns + (uint64_t)timeout->tv_sec * 1000000000 +
		     (uint64_t)timeout->tv_nsec + 999999) / 1000000;
	return 0;
}

/**
 * kvmm_deadline_left() - milliseconds to @dl's deadline, for poll()
 * @dl: the deadline
 *
 * Return: -1 for KVMM_DEADLINE_NEVER; 0 when it has passed; else at most
 * INT_MAX.
 */
int kvmm_deadline_left(const struct kvmm_deadline *dl)
{
	uint64_t now = kvmm_now_ms();

	if (dl->at_ms == KVMM_DEADLINE_NEVER)
		return -1;
	if (now >= dl->at_ms)
		return 0;
	return dl->at_ms - now > INT_MAX ? INT_MAX : (int)(dl->at_ms - now);
}

/*
 * Wait until @sock is ready for @events, at most until @dl; the stop event
 * ends the wait early.  Return: 0 to try the socket again; -ETIMEDOUT
 * past the deadline; -ESHUTDOWN when the stop event fired; poll()'s error.
 */
static int sock_wait(int sock, short events, const struct kvmm_deadline *dl)
{
	struct pollfd pfd[2] = {
		{ .fd = sock, .events = events },
		{ .fd = dl->stop_fd, .events = POLLIN },
	};
	int left = kvmm_deadline_left(dl);

	if (!left)
		return -ETIMEDOUT;
	if (poll(pfd, 2, left) < 0 && errno != EINTR)
		return -errno;
	if (pfd[1].revents)
		return -ESHUTDOWN;
	return 0;
}

/**
 * kvmm_sock_send() - send @len bytes and, with them, @nfds descriptors
 * @sock: a connected Unix stream socket
 * @buf: the data, at least one byte
 * @len: its length
 * @fds: descriptors (sent as SCM_RIGHTS; the caller keeps its own)
 * @nfds: how many, at most KVMM_SHARE_FDS_MAX
 *
 * Blocks as long as the peer does not read: a client's call, never a
 * server's (servers use kvmm_sock_send_until()).
 *
 * Return: 0, or -EPIPE.
 */
int kvmm_sock_send(int sock, const void *buf, size_t len, const int *fds, uint32_t nfds)
{
	return kvmm_sock_send_until(sock, buf, len, fds, nfds, NULL);
}

/* sendmsg() once, the descriptors (if any) riding on the first byte. */
static ssize_t send_part(int sock, const void *buf, size_t len, const int *fds,
			 uint32_t nfds, int flags)
{
	union {
		char buf[CMSG_SPACE(KVMM_SHARE_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	if (nfds) {
		memset(&cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
}

/**
 * kvmm_sock_send_until() - kvmm_sock_send() that gives up at a deadline
 *	or when the server stops
 * @sock: a connected Unix stream socket
 * @buf: the data, at least one byte
 * @len: its length
 * @fds: descriptors (SCM_RIGHTS, with the first byte); the caller keeps its own
 * @nfds: how many, at most KVMM_SHARE_FDS_MAX
 * @dl: the deadline (0: try once without waiting) and the stop event to
 *	wait on beside the socket; NULL: block until sent
 *
 * A peer that does not read cannot hold a server thread: the socket is
 * written without blocking and waited on with poll() until @dl.
 *
 * Return: 0; -ETIMEDOUT past the deadline; -ESHUTDOWN when the stop event
 * fired; -EPIPE when the peer is gone.  Bytes may have gone out before an
 * error: the conversation is over then.
 */
int kvmm_sock_send_until(int sock, const void *buf, size_t len, const int *fds,
			 uint32_t nfds, const struct kvmm_deadline *dl)
{
	size_t sent = 0;
	int ret;

	while (sent < len) {
		ssize_t n = send_part(sock, (const char *)buf + sent, len - sent,
				      sent ? NULL : fds, sent ? 0 : nfds,
				      dl ? MSG_DONTWAIT : 0);

		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || !dl || (errno != EAGAIN && errno != EWOULDBLOCK))
			return -EPIPE;
		ret = sock_wait(sock, POLLOUT, dl);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Keep the descriptors that came with @msg in @fds (room for @max, *@nfds
 * taken); close the rest.  Return: 0, or -EPROTO when any were closed or
 * the kernel truncated them.
 */
static int take_fds(struct msghdr *msg, int *fds, uint32_t max, uint32_t *nfds)
{
	struct cmsghdr *cm;
	int ret = 0;

	for (cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		uint32_t i, k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (uint32_t)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (*nfds < max) {
				fds[(*nfds)++] = fd;
			} else {
				close(fd);
				ret = -EPROTO;
			}
		}
	}
	if (msg->msg_flags & MSG_CTRUNC)
		ret = -EPROTO;
	return ret;
}

/**
 * kvmm_sock_recv() - receive exactly @len bytes and the descriptors
 *	that came with them
 * @sock: a connected Unix stream socket
 * @buf: where the data goes
 * @len: bytes expected
 * @fds: where descriptors go (close-on-exec), room for @max
 * @max: at most this many are expected; 0 for none
 * @nfds: out: how many came
 *
 * kvmm_sock_recv_until() without a deadline: blocks as long as the peer
 * does not write.
 *
 * Return: 0; -ECONNRESET at end of file; -EPROTO for more descriptors
 * than @max (all of them closed); the socket's error.
 */
int kvmm_sock_recv(int sock, void *buf, size_t len, int *fds, uint32_t max,
		   uint32_t *nfds)
{
	return kvmm_sock_recv_until(sock, buf, len, fds, max, nfds, NULL);
}

/**
 * kvmm_sock_recv_until() - receive exactly @len bytes and the descriptors
 *	that came with them, giving up at a deadline or when the server stops
 * @sock: a connected Unix stream socket
 * @buf: where the data goes
 * @len: bytes expected
 * @fds: where descriptors go (close-on-exec), room for @max
 * @max: at most this many are expected; 0 for none
 * @nfds: out: how many came
 * @dl: one deadline for the whole message however the peer splits it
 *	(0: take what is there without waiting), and the stop event to wait
 *	on beside the socket; NULL: block until it all came
 *
 * A peer that does not write cannot hold a waiter: the socket is read
 * without blocking and waited on with poll() until @dl.  The first error
 * ends the read; the conversation is over then.
 *
 * Return: 0; -ETIMEDOUT past the deadline; -ESHUTDOWN when the stop event
 * fired; -ECONNRESET at end of file; -EPROTO for more descriptors than
 * @max or truncated ones (all of them closed); the socket's error.
 */
int kvmm_sock_recv_until(int sock, void *buf, size_t len, int *fds, uint32_t max,
			 uint32_t *nfds, const struct kvmm_deadline *dl)
{
	union {
		char buf[CMSG_SPACE(KVMM_SHARE_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	size_t got = 0;
	int ret = 0;

	*nfds = 0;
	while (got < len && !ret) {
		struct iovec iov = { .iov_base = (char *)buf + got, .iov_len = len - got };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf) };
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (dl ? MSG_DONTWAIT : 0));

		if (n > 0) {
			got += (size_t)n;
			ret = take_fds(&msg, fds, max, nfds);
		} else if (!n) {
			ret = -ECONNRESET;
		} else if (errno == EINTR) {
			continue;
		} else if (!dl || (errno != EAGAIN && errno != EWOULDBLOCK)) {
			ret = -errno;
		} else {
			ret = sock_wait(sock, POLLIN, dl);
		}
	}
	if (ret)
		while (*nfds)
			close(fds[--*nfds]);
	return ret;
}

/* Send @nr descriptors in messages of KVMM_SHARE_FDS_MAX, each with its count. */
static int send_fds(int sock, const int *fds, uint32_t nr, const struct kvmm_deadline *dl)
{
	uint32_t at, n;
	int ret = 0;

	for (at = 0; at < nr && !ret; at += n) {
		n = nr - at < KVMM_SHARE_FDS_MAX ? nr - at : KVMM_SHARE_FDS_MAX;
		ret = kvmm_sock_send_until(sock, &n, sizeof(n), fds + at, n, dl);
	}
	return ret;
}

/**
 * kvmm_share_serve() - answer a client's struct kvmm_share_req
 * @ctx: the context whose pool is shared
 * @sock: the client's socket
 * @bound: the client's ring is bound to a namespace: refused (-EPERM)
 * @dl: the whole answer must be out by then (kvmm_sock_send_until())
 *
 * Return: 0 when the answer went out (a refusal included);
 * kvmm_sock_send_until()'s errors when the client cannot be written to.
 */
int kvmm_share_serve(struct kvmm_ctx *ctx, int sock, bool bound,
		     const struct kvmm_deadline *dl)
{
	struct kvmm_share_ext *ext = NULL;
	struct kvmm_share sh;
	int *fds = NULL, ret;

	if (bound) {
		sh = (struct kvmm_share){ .magic = KVMM_SHARE_MAGIC, .status = -EPERM };
		return kvmm_sock_send_until(sock, &sh, sizeof(sh), NULL, 0, dl);
	}
	kvmm_lock(ctx);
	ret = kvmm_kv_share(ctx, &sh, &ext, &fds);
	kvmm_unlock(ctx);
	if (ret)	/* sh is the refusal */
		return kvmm_sock_send_until(sock, &sh, sizeof(sh), NULL, 0, dl);
	ret = kvmm_sock_send_until(sock, &sh, sizeof(sh), NULL, 0, dl) ?:
	      kvmm_sock_send_until(sock, ext, sh.nr_ext * sizeof(*ext), NULL, 0, dl) ?:
	      send_fds(sock, fds, sh.nr_fds, dl);
	kvmm_kv_share_release(&sh, ext, fds);
	return ret;
}

/* The description, its extents and its descriptors, off the socket. */
static int share_recv(int sock, struct kvmm_share *sh, struct kvmm_share_ext **extp,
		      int **fdsp, const struct kvmm_deadline *dl)
{
	struct kvmm_share_ext *ext = NULL;
	uint32_t got = 0, n, k;
	int *fds = NULL, ret;

	ret = kvmm_sock_recv_until(sock, sh, sizeof(*sh), NULL, 0, &k, dl);
	if (ret)
		return ret;
	if (sh->magic != KVMM_SHARE_MAGIC)
		return -EPROTO;
	/* a refusal is a -errno; any other status is a damaged answer */
	if (sh->status)
		return sh->status < 0 && sh->status >= -4095 ? sh->status : -EPROTO;
	if (!sh->nr_ext || sh->nr_ext > KVMM_SHARE_MAX_FDS || sh->nr_fds > KVMM_SHARE_MAX_FDS)
		return -EPROTO;
	ext = malloc(sh->nr_ext * sizeof(*ext));
	fds = malloc((sh->nr_fds ? sh->nr_fds : 1) * sizeof(*fds));
	if (!ext || !fds) {
		ret = -ENOMEM;
		goto out;
	}
	ret = kvmm_sock_recv_until(sock, ext, sh->nr_ext * sizeof(*ext), NULL, 0, &k, dl);
	while (!ret && got < sh->nr_fds) {
		ret = kvmm_sock_recv_until(sock, &n, sizeof(n), fds + got, sh->nr_fds - got, &k,
					   dl);
		got += k;
		if (!ret && (n != k || !k))
			ret = -EPROTO;
	}
	if (!ret) {
		*extp = ext;
		*fdsp = fds;
		return 0;
	}
out:
	while (got)
		close(fds[--got]);
	free(fds);
	free(ext);
	return ret;
}

/**
 * kvmm_kv_pool_attach() - map the KV pool of the server a ring is connected to
 * @ring: a ring from kvmm_ring_connect()
 * @backend_arg: this side's backend argument (cuda: struct kvmm_cuda_arg,
 *	NULL for the defaults; the device is the server's, found by its PCI
 *	bus id)
 * @poolp: out: the pool as mapped here; kvmm_kv_pool_layer() gives each
 *	layer's addresses, kvmm_kv_pool_close() unmaps it
 *
 * Not concurrently with other calls on @ring.  The mapping covers the
 * pool as it was when attached; after the server resizes it, attach again.
 *
 * Return: 0; -EINVAL for an in-process ring (kvmm_kv_layer() serves
 * those); the server's refusal (-EOPNOTSUPP: its memory cannot be
 * exported; -EPERM: the ring is bound to a namespace, and a tenant may
 * not map every tenant's KV); kvmm_kv_pool_open()'s errors; -EPROTO or
 * -ECONNRESET for a broken conversation; -ETIMEDOUT when the answer did not
 * come within KVMM_CONNECT_TIMEOUT_MS.
 */
KVMM_EXPORT int kvmm_kv_pool_attach(struct kvmm_ring *ring, void *backend_arg,
				    struct kvmm_kv_pool **poolp)
{
	const struct timespec t = {
		.tv_sec = KVMM_CONNECT_TIMEOUT_MS / 1000,
		.tv_nsec = (KVMM_CONNECT_TIMEOUT_MS % 1000) * 1000000L,
	};

	return kvmm_kv_pool_attach_timeout(ring, backend_arg, poolp, &t);
}

/**
 * kvmm_kv_pool_attach_timeout() - kvmm_kv_pool_attach() with a deadline
 * @ring: a ring from kvmm_ring_connect()
 * @backend_arg: as for kvmm_kv_pool_attach()
 * @poolp: as for kvmm_kv_pool_attach()
 * @timeout: how long the request and the whole answer may take (relative;
 *	NULL: as long as the server takes)
 *
 * Return: as kvmm_kv_pool_attach(); -ETIMEDOUT past @timeout, after which
 * the share conversation on @ring is out of step (a late answer may still
 * arrive): close the ring, and connect again to attach; -EINVAL for a bad
 * @timeout.
 */
KVMM_EXPORT int kvmm_kv_pool_attach_timeout(struct kvmm_ring *ring, void *backend_arg,
					    struct kvmm_kv_pool **poolp,
					    const struct timespec *timeout)
{
	struct kvmm_share_req req = { .magic = KVMM_SHARE_MAGIC };
	struct kvmm_share_ext *ext;
	struct kvmm_deadline dl;
	struct kvmm_share sh;
	int *fds, ret;

	if (!ring || !ring->hdr || ring->ctx || ring->sock < 0 || !poolp ||
	    kvmm_deadline_init(&dl, timeout))
		return -EINVAL;
	ret = kvmm_sock_send_until(ring->sock, &req, sizeof(req), NULL, 0, &dl) ?:
	      share_recv(ring->sock, &sh, &ext, &fds, &dl);
	if (ret)
		return ret;
	ret = kvmm_kv_pool_open(&sh, ext, fds, backend_arg, poolp);
	kvmm_kv_share_release(&sh, ext, fds);
	return ret;
}
