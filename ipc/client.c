// SPDX-License-Identifier: MIT
/*
 * ipc/client.c - the user's side of a command ring: set up in-process or
 * attached to a server in another process, submit, reap.
 *
 * DOC: rings and wake-ups
 *
 * Region layout (one block, shared across processes):
 *
 *   struct kvmm_ring_hdr | SQEs (64 B each) | CQEs (16 B each) | data area
 *
 * In-process, kvmm_submit() publishes the SQ tail and runs the dispatcher
 * inline: no thread, no syscall.  Across processes it publishes the tail
 * and wakes the server only if the server said it is going to sleep
 * (sq_sleeping), the way it said: a nap on the futex bell in the header
 * (bump it, FUTEX_WAKE) or a sleep on the eventfd doorbell (write it).
 * kvmm_wait_cqe() polls for a while (ipc/spin.c), then sets cq_sleeping,
 * looks once more, and naps on its own bell, at most KVMM_NAP_MS; only
 * past that does it sleep on its doorbell beside the socket, which shows
 * a server that went away.  A round trip between two napping sides so
 * costs a FUTEX_WAKE and a FUTEX_WAIT each, no poll() nor read().  Each side
 * writes its flag, issues a full fence, then re-reads the other side's
 * index, so a wake-up is never lost (the classic Dekker pairing with the
 * other side's "publish, fence, read the flag").  A server whose CQ is
 * full sleeps with cq_wait set; a client about to sleep for completions
 * (after its fence, so the cq_head it published pairs with the server's
 * fence and re-check) rings the SQ doorbell when it sees cq_wait.
 */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"

static bool is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

/**
 * kvmm_ring_layout() - check ring parameters and size the region
 * @p: the parameters (cq_entries 0 is filled in as 2 * sq_entries)
 * @out: the checked parameters
 *
 * Return: the region's size in bytes, or 0 for parameters out of range.
 */
size_t kvmm_ring_layout(const struct kvmm_ring_params *p, struct kvmm_ring_params *out)
{
	*out = *p;
	if (!out->cq_entries)
		out->cq_entries = out->sq_entries * 2;
	if (!is_pow2(out->sq_entries) || out->sq_entries > KVMM_RING_MAX_ENTRIES ||
	    !is_pow2(out->cq_entries) || out->cq_entries < out->sq_entries ||
	    out->cq_entries > 2 * KVMM_RING_MAX_ENTRIES || out->buf_size > KVMM_RING_MAX_BUF ||
	    (out->flags & ~KVMM_RING_F_FLAGS) || (out->ns && !(out->flags & KVMM_RING_F_NS)))
		return 0;
	return kvmm_ring_buf_off(out) + ((out->buf_size + 63) & ~(uint64_t)63);
}

/* The region's layout, in one place: header | SQEs | CQEs | data area. */
static size_t sq_off(void)
{
	return sizeof(struct kvmm_ring_hdr);
}

static size_t cq_off(const struct kvmm_ring_params *p)
{
	return sq_off() + (size_t)p->sq_entries * sizeof(struct kvmm_sqe);
}

size_t kvmm_ring_buf_off(const struct kvmm_ring_params *p)
{
	size_t off = cq_off(p) + (size_t)p->cq_entries * sizeof(struct kvmm_cqe);

	return (off + 63) & ~(size_t)63;
}

/* Give dispatcher @d the arrays of @region, laid out for @p. */
void kvmm_ring_attach(struct kvmm_disp *d, void *region, const struct kvmm_ring_params *p)
{
	kvmm_disp_attach(d, region, (struct kvmm_sqe *)((char *)region + sq_off()),
			 p->sq_entries, (struct kvmm_cqe *)((char *)region + cq_off(p)),
			 p->cq_entries);
}

/* Fill a fresh region's header; the creator does this before sharing it. */
void kvmm_ring_hdr_init(struct kvmm_ring_hdr *hdr, const struct kvmm_ring_params *p,
			uint32_t ring_id)
{
	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = KVMM_RING_MAGIC;
	hdr->abi = KVMM_ABI_VERSION;
	hdr->hdr_size = sizeof(*hdr);
	hdr->sq_entries = p->sq_entries;
	hdr->cq_entries = p->cq_entries;
	hdr->sq_off = (uint32_t)sq_off();
	hdr->cq_off = (uint32_t)cq_off(p);
	hdr->buf_off = (uint32_t)kvmm_ring_buf_off(p);
	hdr->buf_size = (uint32_t)p->buf_size;
	hdr->flags = p->flags;
	hdr->ring_id = ring_id;
	hdr->server_wakes = KVMM_RING_WAKES_BELL;
}

static void ring_notify(void *arg);

static void ring_map(struct kvmm_ring *ring, void *region, const struct kvmm_ring_params *p)
{
	ring->hdr = region;
	ring->sqes = (struct kvmm_sqe *)((char *)region + sq_off());
	ring->cqes = (struct kvmm_cqe *)((char *)region + cq_off(p));
	ring->buf = p->buf_size ? (char *)region + kvmm_ring_buf_off(p) : NULL;
	ring->buf_size = p->buf_size;
	ring->sq_mask = p->sq_entries - 1;
	ring->cq_mask = p->cq_entries - 1;
	ring->sqe_tail = ring->sq_tail = ring->cq_head = 0;
	ring->flags = p->flags;
}

/**
 * kvmm_ring_init() - an in-process ring on @ctx
 * @ctx: the context
 * @p: the ring's shape
 * @ring: caller's memory, set up on success
 *
 * Return: 0; -EINVAL for a shape out of range; -ENOMEM.
 */
KVMM_EXPORT int kvmm_ring_init(struct kvmm_ctx *ctx, const struct kvmm_ring_params *p,
			       struct kvmm_ring *ring)
{
	struct kvmm_ring_params rp;
	size_t size;
	void *region;
	int ret;

	if (!ctx || !p || !ring)
		return -EINVAL;
	size = kvmm_ring_layout(p, &rp);
	if (!size || (rp.flags & KVMM_RING_F_POLL))
		return -EINVAL;
	region = aligned_alloc(64, size);
	if (!region)
		return -ENOMEM;
	memset(ring, 0, sizeof(*ring));
	/* The I/O worker's deferred completions wake a waiter through it. */
	ring->cq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ring->cq_fd < 0) {
		free(region);
		return -errno;
	}
	ret = kvmm_disp_create(ctx, false, &ring->disp);
	if (ret) {
		close(ring->cq_fd);
		free(region);
		return ret;
	}
	kvmm_ring_hdr_init(region, &rp, kvmm_disp_id(ring->disp));
	ring_map(ring, region, &rp);
	ring->ctx = ctx;
	ring->sock = ring->sq_fd = -1;
	ring->map_size = size;
	kvmm_ring_attach(ring->disp, ring->hdr, &rp);
	kvmm_disp_set_notify(ring->disp, ring_notify, ring);
	kvmm_disp_set_buf(ring->disp, 0, ring->buf, ring->buf_size);
	if (rp.flags & KVMM_RING_F_NS)
		kvmm_disp_bind_ns(ring->disp, rp.ns);
	return 0;
}

/**
 * kvmm_ring_register_buffers() - name memory payloads may live in
 * @ring: an in-process ring
 * @iov: buffers; iov[i] becomes buffer i + 1 (0 is the ring's data area)
 * @nr: how many, at most KVMM_RING_MAX_BUFS - 1
 *
 * Replaces earlier registrations, once the ring's keyed commands still
 * reading or writing the buffers replaced (a KGET from NVMe, a KPUT) have
 * completed: when this returns the caller may free the old memory.
 * Across processes only the data area exists (the server cannot see the
 * client's memory): -EOPNOTSUPP.
 *
 * Context: may sleep until the ring's keyed commands in flight are done.
 * Return: 0, -EINVAL or -EOPNOTSUPP.
 */
KVMM_EXPORT int kvmm_ring_register_buffers(struct kvmm_ring *ring,
					   const struct kvmm_iovec *iov, uint32_t nr)
{
	uint32_t i;

	if (!ring || nr >= KVMM_RING_MAX_BUFS || (nr && !iov))
		return -EINVAL;
	if (!ring->ctx)
		return -EOPNOTSUPP;
	for (i = 0; i < nr; i++)
		if (!iov[i].base && iov[i].len)
			return -EINVAL;
	kvmm_disp_replace_bufs(ring->disp, iov, nr);
	return 0;
}

/* ---- across processes ---- */

/*
 * A server's refusal is a -errno; anything else in the status (a server
 * that is not kvmm, a damaged welcome) is a protocol error, never passed
 * on as if it were an errno.
 */
static int welcome_status(int32_t status)
{
	return status < 0 && status >= -4095 ? status : -EPROTO;
}

static int recv_welcome(int sock, struct kvmm_welcome *w, int fds[3],
			const struct kvmm_deadline *d)
{
	uint32_t n;
	int ret = kvmm_sock_recv_until(sock, w, sizeof(*w), fds, 3, &n, d);

	if (!ret && w->status)
		ret = welcome_status(w->status);
	else if (!ret && n != 3)
		ret = -EPROTO;
	if (ret)
		while (n)
			close(fds[--n]);
	return ret;
}

/* Connect @sock to @sa before @d (a Unix connect waits while the backlog is full). */
static int connect_deadline(int sock, const struct sockaddr_un *sa,
			    const struct kvmm_deadline *d)
{
	int ms = kvmm_deadline_left(d);

	if (ms >= 0) {
		struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

		if (!ms)
			return -ETIMEDOUT;
		if (setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
			return -errno;
	}
	if (!connect(sock, (const struct sockaddr *)sa, sizeof(*sa)))
		return 0;
	return errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
}

/**
 * kvmm_ring_connect_timeout() - attach a ring to a server, within a time
 * @path: the server's Unix socket
 * @p: the ring's shape; buf_size is the data area payloads go in
 * @ring: caller's memory, set up on success
 * @timeout: how long connecting and the handshake may take in all;
 *	NULL to wait as long as the server takes
 *
 * Return: 0; -EINVAL for a bad shape, path or timeout; the connect error
 * (-ENOENT, -ECONNREFUSED, ...); -ETIMEDOUT when the server did not
 * answer in time; -ECONNRESET when it closed the connection; the server's
 * refusal; -EPROTO for a server that does not speak this ABI.
 */
KVMM_EXPORT int kvmm_ring_connect_timeout(const char *path, const struct kvmm_ring_params *p,
					  struct kvmm_ring *ring,
					  const struct timespec *timeout)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmm_ring_params rp;
	struct kvmm_hello hello;
	struct kvmm_welcome w;
	struct kvmm_deadline d;
	int fds[3] = { -1, -1, -1 }, sock, ret;
	size_t size;
	void *region;

	if (!path || !*path || !p || !ring || strlen(path) >= sizeof(sa.sun_path) ||
	    kvmm_deadline_init(&d, timeout))
		return -EINVAL;
	size = kvmm_ring_layout(p, &rp);
	if (!size)
		return -EINVAL;
	strcpy(sa.sun_path, path);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	ret = connect_deadline(sock, &sa, &d);
	if (ret)
		goto out_close;
	hello = (struct kvmm_hello){
		.magic = KVMM_RING_MAGIC, .abi = KVMM_ABI_VERSION,
		.sqe_size = sizeof(struct kvmm_sqe), .cqe_size = sizeof(struct kvmm_cqe),
		.sq_entries = rp.sq_entries, .cq_entries = rp.cq_entries,
		.flags = rp.flags, .buf_size = rp.buf_size, .ns = rp.ns,
	};
	if (send(sock, &hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello)) {
		ret = errno == EAGAIN ? -ETIMEDOUT : -EPROTO;
		goto out_close;
	}
	ret = recv_welcome(sock, &w, fds, &d);
	if (ret)
		goto out_close;
	if (w.map_size != size || w.sq_entries != rp.sq_entries ||
	    w.cq_entries != rp.cq_entries || w.buf_size != rp.buf_size) {
		ret = -EPROTO;
		goto out_fds;
	}
	region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (region == MAP_FAILED) {
		ret = -errno;
		goto out_fds;
	}
	close(fds[0]);
	memset(ring, 0, sizeof(*ring));
	ring_map(ring, region, &rp);
	ring->sock = sock;
	ring->sq_fd = fds[1];
	ring->cq_fd = fds[2];
	ring->map_size = size;
	if (ring->hdr->magic != KVMM_RING_MAGIC || ring->hdr->abi != KVMM_ABI_VERSION) {
		kvmm_ring_exit(ring);
		return -EPROTO;
	}
	/* kvmm_submit() rings a napping server's bell */
	__atomic_store_n(&ring->hdr->client_wakes, KVMM_RING_WAKES_BELL, __ATOMIC_RELAXED);
	return 0;

out_fds:
	close(fds[0]);
	close(fds[1]);
	close(fds[2]);
out_close:
	close(sock);
	return ret;
}

/**
 * kvmm_ring_connect() - attach a ring to a server (kvmmd, an admin socket)
 * @path: the server's Unix socket
 * @p: the ring's shape; buf_size is the data area payloads go in
 * @ring: caller's memory, set up on success
 *
 * kvmm_ring_connect_timeout() with KVMM_CONNECT_TIMEOUT_MS: a server that
 * accepts and never answers is given up on.
 *
 * Return: as kvmm_ring_connect_timeout().
 */
KVMM_EXPORT int kvmm_ring_connect(const char *path, const struct kvmm_ring_params *p,
				  struct kvmm_ring *ring)
{
	const struct timespec t = {
		.tv_sec = KVMM_CONNECT_TIMEOUT_MS / 1000,
		.tv_nsec = (KVMM_CONNECT_TIMEOUT_MS % 1000) * 1000000L,
	};

	return kvmm_ring_connect_timeout(path, p, ring, &t);
}

/**
 * kvmm_ring_exit() - tear a ring down
 * @ring: the ring
 *
 * In-process, the sequences and pins the ring still holds are released;
 * across processes, closing the connection makes the server do it.
 */
KVMM_EXPORT void kvmm_ring_exit(struct kvmm_ring *ring)
{
	if (!ring || !ring->hdr)
		return;
	if (ring->ctx) {
		kvmm_disp_destroy(ring->disp);
		close(ring->cq_fd);
		free(ring->hdr);
	} else {
		munmap(ring->hdr, ring->map_size);
		close(ring->sq_fd);
		close(ring->cq_fd);
		close(ring->sock);
	}
	memset(ring, 0, sizeof(*ring));
}

/* Ring an eventfd doorbell. */
void kvmm_doorbell(int fd)
{
	uint64_t one = 1;
	ssize_t n;

	do {
		n = write(fd, &one, sizeof(one));
	} while (n < 0 && errno == EINTR);
}

/**
 * kvmm_wake() - wake the other side if it sleeps, the way it sleeps
 * @sleeping: its flag (sq_sleeping, cq_sleeping), read after a full fence
 *	that follows what was published for it
 * @bell: its futex bell, for KVMM_RING_SLEEP_BELL
 * @fd: its eventfd doorbell, for anything else but 0
 *
 * The sleeper reads the bell, sets its flag, fences and looks once more
 * before it naps on the bell's value: either it sees what was published,
 * or this sees its flag, and then the bell moved before FUTEX_WAIT
 * compares it (or wakes it in there).
 */
void kvmm_wake(uint32_t *sleeping, uint32_t *bell, int fd)
{
	uint32_t how = __atomic_load_n(sleeping, __ATOMIC_ACQUIRE);

	if (how == KVMM_RING_SLEEP_BELL) {
		__atomic_fetch_add(bell, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, bell, FUTEX_WAKE, 1, NULL, NULL, 0);
	} else if (how) {
		kvmm_doorbell(fd);
	}
}

/**
 * kvmm_bell_nap() - sleep on a futex bell while it still reads @seen
 * @bell: the bell, in the ring's region
 * @seen: its value read before the sleeper set its flag
 * @ms: the longest nap (at most KVMM_NAP_MS)
 *
 * Return: 0 when the bell rang, or may have (a spurious wake-up, a
 * signal: the caller looks again); -ETIMEDOUT after @ms without it.
 */
int kvmm_bell_nap(uint32_t *bell, uint32_t seen, int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	if (syscall(SYS_futex, bell, FUTEX_WAIT, seen, &ts, NULL, 0) && errno == ETIMEDOUT)
		return -ETIMEDOUT;
	return 0;
}

/*
 * Completions were published: wake the client if it said it sleeps (it
 * sets cq_sleeping, fences and looks at the CQ again: Dekker's pairing,
 * so one of the two sees the other).
 */
void kvmm_ring_wake(struct kvmm_ring_hdr *hdr, int cq_fd)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	kvmm_wake(&hdr->cq_sleeping, &hdr->cq_bell, cq_fd);
}

/* In-process: a deferred completion was posted by the I/O worker. */
static void ring_notify(void *arg)
{
	struct kvmm_ring *ring = arg;

	kvmm_ring_wake(ring->hdr, ring->cq_fd);
}

/**
 * kvmm_submit() - hand the prepared entries to the dispatcher
 * @ring: the ring
 *
 * Return: entries submitted (in-process: also executed, as far as the CQ
 * has room).
 */
KVMM_EXPORT int kvmm_submit(struct kvmm_ring *ring)
{
	uint32_t n = ring->sqe_tail - ring->sq_tail;

	if (!n)
		return 0;
	ring->sq_tail = ring->sqe_tail;
	/* Pairs with the dispatcher's acquire load of sq_tail. */
	__atomic_store_n(&ring->hdr->sq_tail, ring->sq_tail, __ATOMIC_RELEASE);
	if (ring->ctx) {
		while (kvmm_disp_pending(ring->disp) && kvmm_disp_process(ring->disp))
			;
		return (int)n;
	}
	kvmm_spin_say_cpu(&ring->hdr->client_cpu);
	/* Publish the tail, fence, then read the server's flag (Dekker). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	kvmm_wake(&ring->hdr->sq_sleeping, &ring->hdr->sq_bell, ring->sq_fd);
	return (int)n;
}

/* The most a client polls for a completion before it sleeps. */
#define KVMM_SPIN_CQ_NS	50000

/*
 * The client's poll budget, per thread: it follows how contended the
 * thread's core is, whichever ring it waits on (ipc/spin.c).
 */
static _Thread_local struct kvmm_spin cq_spin = {
	.budget_ns = KVMM_SPIN_CQ_NS, .max_ns = KVMM_SPIN_CQ_NS,
};

static uint32_t cq_ready(const struct kvmm_ring *ring)
{
	/* Pairs with the dispatcher's release store of cq_tail. */
	return __atomic_load_n(&ring->hdr->cq_tail, __ATOMIC_ACQUIRE) - ring->cq_head;
}

/*
 * struct cq_want - what wait_cq() polls for
 * @ring: the ring; @want: completions ready
 * @looked: this poll looked at where the server runs
 */
struct cq_want {
	const struct kvmm_ring *ring;
	uint32_t want;
	bool looked;
};

/*
 * The server cannot post while this thread holds the CPU it last ran on;
 * nor can it say it moved, so one look at server_cpu, the first, is
 * enough (the line it shares with sq_head is not pulled over at each).
 */
static enum kvmm_spin_look cq_look(void *arg)
{
	struct cq_want *w = arg;

	if (cq_ready(w->ring) >= w->want)
		return KVMM_SPIN_READY;
	if (w->looked)
		return KVMM_SPIN_NOT_YET;
	w->looked = true;
	return kvmm_spin_on_my_cpu(&w->ring->hdr->server_cpu) ? KVMM_SPIN_PEER_OFF :
								  KVMM_SPIN_NOT_YET;
}

/* How far the dispatcher has got through the entries it runs (a hint). */
static uint32_t cq_work(void *arg)
{
	const struct cq_want *w = arg;

	return __atomic_load_n(&w->ring->hdr->sq_done, __ATOMIC_RELAXED);
}

/*
 * A server whose CQ was full sleeps with cq_wait set until the client
 * reaped: ring its doorbell.  Cleared by the server when it wakes.
 */
static void cq_room_kick(struct kvmm_ring *ring)
{
	if (!ring->ctx && __atomic_load_n(&ring->hdr->cq_wait, __ATOMIC_RELAXED))
		kvmm_doorbell(ring->sq_fd);
}

/*
 * Nap on the CQ bell (a futex: no descriptor to read afterwards), at most
 * KVMM_NAP_MS and never past @d.
 * Return: 0 when woken, or when the completions were there; -ETIMEDOUT
 * when the nap ran out, or the server does not ring bells: sleep on the
 * doorbell next, beside the socket.
 */
static int cq_nap(struct kvmm_ring *ring, uint32_t want, const struct kvmm_deadline *d)
{
	struct kvmm_ring_hdr *hdr = ring->hdr;
	uint32_t seen = __atomic_load_n(&hdr->cq_bell, __ATOMIC_ACQUIRE);
	int ms = kvmm_deadline_left(d), ret = 0;

	if (!(__atomic_load_n(&hdr->server_wakes, __ATOMIC_RELAXED) & KVMM_RING_WAKES_BELL))
		return -ETIMEDOUT;	/* a server that only writes the doorbell */
	if (ms < 0 || ms > KVMM_NAP_MS)
		ms = KVMM_NAP_MS;
	/* Read the bell, set our flag, fence, look again (kvmm_wake()). */
	__atomic_store_n(&hdr->cq_sleeping, KVMM_RING_SLEEP_BELL, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	cq_room_kick(ring);	/* after the fence: pairs with the server's */
	if (cq_ready(ring) < want)
		ret = ms ? kvmm_bell_nap(&hdr->cq_bell, seen, ms) : -ETIMEDOUT;
	if (!ring->ctx)	/* where the wake-up put us: before we look awake */
		kvmm_spin_say_cpu(&hdr->client_cpu);
	__atomic_store_n(&hdr->cq_sleeping, 0, __ATOMIC_RELAXED);
	return ret;
}

/*
 * Wait until @want completions are ready: across processes, or in-process
 * for completions the I/O worker owes (there is no socket then).  After a
 * poll, a nap on the bell; only a nap that ran out is followed by a sleep
 * on the doorbell, which sees the server go and the deadline pass.
 */
static int wait_cq(struct kvmm_ring *ring, uint32_t want, const struct kvmm_deadline *d)
{
	struct pollfd pfd[2] = {
		{ .fd = ring->cq_fd, .events = POLLIN },
		{ .fd = ring->sock, .events = POLLIN },
	};
	struct cq_want w = { ring, want, false };
	uint64_t v, start = 0;
	bool slept = false;

	while (cq_ready(ring) < want) {
		cq_room_kick(ring);	/* early, not to spin while it sleeps */
		if (!start)
			start = kvmm_now_ns();
		w.looked = false;
		if (kvmm_spin(&cq_spin, cq_look, cq_work, &w))
			break;
		slept = true;
		if (!cq_nap(ring, want, d))
			continue;
		/* Set our flag, fence, look again (pairs with the server). */
		__atomic_store_n(&ring->hdr->cq_sleeping, KVMM_RING_SLEEP_DOORBELL,
				 __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		cq_room_kick(ring);	/* after the fence: pairs with the server's */
		if (cq_ready(ring) < want) {
			int n;

			while ((n = poll(pfd, 2, kvmm_deadline_left(d))) < 0) {
				if (errno != EINTR) {
					n = -errno;
					break;
				}
			}
			if (n <= 0 && cq_ready(ring) < want) {
				__atomic_store_n(&ring->hdr->cq_sleeping, 0, __ATOMIC_RELAXED);
				return n ? n : -ETIMEDOUT;
			}
			if ((pfd[0].revents & POLLIN) &&
			    read(ring->cq_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				return -errno;
			if (pfd[1].revents && cq_ready(ring) < want) {
				__atomic_store_n(&ring->hdr->cq_sleeping, 0, __ATOMIC_RELAXED);
				return -ECONNRESET;
			}
		}
		if (!ring->ctx)	/* where the wake-up put us: before we look awake */
			kvmm_spin_say_cpu(&ring->hdr->client_cpu);
		__atomic_store_n(&ring->hdr->cq_sleeping, 0, __ATOMIC_RELAXED);
	}
	if (slept)	/* the poll gave up: tell it how long the wait was */
		kvmm_spin_waited(&cq_spin, kvmm_now_ns() - start);
	return 0;
}

/**
 * kvmm_wait_cqe_timeout() - the oldest completion, waiting at most @timeout
 * @ring: the ring
 * @cqep: out; mark it with kvmm_cqe_seen() when done
 * @timeout: how long to wait in all; NULL: as long as it takes
 *
 * Return: 0; -ETIMEDOUT when nothing completed in time; -EINVAL for a
 * bad @timeout; -EAGAIN in-process when nothing is in flight (nothing
 * will ever complete: no entry waits and the I/O worker owes none);
 * -ECONNRESET when the server went away.
 */
KVMM_EXPORT int kvmm_wait_cqe_timeout(struct kvmm_ring *ring, struct kvmm_cqe **cqep,
				      const struct timespec *timeout)
{
	struct kvmm_deadline d;
	int ret;

	if (kvmm_deadline_init(&d, timeout))
		return -EINVAL;
	for (;;) {
		if (!kvmm_peek_cqe(ring, cqep))
			return 0;
		if (ring->ctx) {
			/* Entries the CQ had no room for run now. */
			if (kvmm_disp_pending(ring->disp) && kvmm_disp_process(ring->disp))
				continue;
			if (!kvmm_disp_deferred(ring->disp) && !cq_ready(ring))
				return -EAGAIN;
		}
		ret = wait_cq(ring, 1, &d);
		if (ret)
			return ret;
	}
}

/**
 * kvmm_wait_cqe() - the oldest completion, waiting for one if needed
 * @ring: the ring
 * @cqep: out; mark it with kvmm_cqe_seen() when done
 *
 * kvmm_wait_cqe_timeout() without a deadline.
 *
 * Return: 0; -EAGAIN in-process when nothing is in flight (nothing will
 * ever complete: no entry waits and the I/O worker owes none);
 * -ECONNRESET when the server went away.
 */
KVMM_EXPORT int kvmm_wait_cqe(struct kvmm_ring *ring, struct kvmm_cqe **cqep)
{
	return kvmm_wait_cqe_timeout(ring, cqep, NULL);
}

/**
 * kvmm_submit_and_wait() - submit, then wait until @wait_nr completions
 *	are ready to be reaped
 * @ring: the ring
 * @wait_nr: completions to wait for, counting those already ready; at
 *	most the CQ's size
 *
 * In-process everything that can run has run when kvmm_submit() returns,
 * and only the completions the I/O worker owes (a PROMOTE from NVMe) are
 * waited for.
 *
 * Return: entries submitted, or -errno from waiting.
 */
KVMM_EXPORT int kvmm_submit_and_wait(struct kvmm_ring *ring, uint32_t wait_nr)
{
	int n = kvmm_submit(ring), ret;
	uint32_t owed;

	if (wait_nr > ring->cq_mask + 1)
		wait_nr = ring->cq_mask + 1;
	if (ring->ctx) {
		/* Only the worker's deferred completions are still to come. */
		owed = cq_ready(ring) + kvmm_disp_deferred(ring->disp);
		if (wait_nr > owed)
			wait_nr = owed;
	}
	if (wait_nr) {
		struct kvmm_deadline d = { KVMM_DEADLINE_NEVER, -1 };

		ret = wait_cq(ring, wait_nr, &d);
		if (ret)
			return ret;
	}
	return n;
}
