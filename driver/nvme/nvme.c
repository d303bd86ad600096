// SPDX-License-Identifier: MIT
/*
 * driver/nvme/nvme.c - the NVMe tier's store: KV pages in a file or on a
 * block device, through io_uring.
 *
 * DOC: on-disk format
 *
 *   offset 0        superblock (4 KiB): magic, version, geometry, epoch,
 *                   model identity, checksum
 *   offset 4096     slot 0, slot 1, ... each slot_bytes (a 4 KiB multiple)
 *
 * The superblock says whose KV the file holds: the geometry (page size,
 * bytes a page, struct kvmm_model) and a fingerprint of the engine's model
 * id (XXH3-128 of the string), under an XXH3-64 checksum.  A file is
 * recovered only when all of it is this context's; a file of another
 * model, geometry or layout version, or one whose superblock does not
 * check, is refused with a message saying which, unless the context asks
 * to reformat (KVMM_NVME_REFORMAT).  It is never served.  The store holds
 * an exclusive OFD lock on the file while it is open, so a second context
 * on the same file is refused (-EBUSY) instead of overwriting the first's
 * slots.
 *
 * A slot is one page: a header, the page's token ids, then its KV bytes in
 * the staging layout (at data_off):
 *
 *   magic | ns | seq | epoch | id | parent | flags | index | count | resv |
 *   space | value_bytes | data_csum | hdr_csum | tokens[]
 *
 * (layout version 3; version 2 had no flags .. value_bytes, version 1
 * no model identity in the superblock: both are refused by name).  A page
 * of a keyed value (flags KVMM_STORE_KEY_KEYED) has its value's key as
 * parent, its index among the value's count pages, and its space's model
 * fingerprint and value size, so that a restart finds the whole value.
 *
 * id is the page's identity (XXH3-128 of its namespace and every token of
 * its prefix through this page) and parent the identity of the page
 * before it, so at a restart the pages find their places in the tree again
 * without any other index: the slot headers are the journal.  A header
 * counts only when its own checksum (hdr_csum, over the header and tokens)
 * holds and its epoch is the superblock's (a reformatted file's old slots
 * never come back); a slot whose data was torn fails data_csum when it is
 * read and is a miss.  Reads also compare the header with the identity the
 * core expects, so a lost write (a slot still holding an older page) is a
 * miss too, never wrong KV.  seq orders two copies of the same page.
 *
 * I/O is O_DIRECT where the filesystem takes it (buffered otherwise), in
 * batches of up to the queue depth through an io_uring, from bounce
 * buffers registered with it (IORING_OP_{READ,WRITE}_FIXED); the file
 * is not registered, so that it and its lock go with the process.  There
 * are two channels, each a ring and its bounce
 * buffers: channel 0 for calls under the context lock (the restart scan,
 * synchronous reads), channel 1 for the I/O worker's writes and reads
 * (set up at its first use), so a synchronous read never waits for a
 * demotion's writes or shares their buffers.  Short transfers and -EAGAIN
 * are resubmitted for the rest, a few times; anything else fails the
 * pages of that I/O.
 *
 * Fault injection (kvmm_nvme_arg, read at every I/O) rewrites completions
 * as they are reaped, flips or tears pages on their way to the file, and
 * lets a test's latch hold a batch before it starts.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/fs.h>
#include <linux/magic.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <libkvmm.h>
#include "autoconf.h"
#include "../backend.h"
#include "../csum/csum.h"

#if CONFIG_KVMM_LIBURING
#include <liburing.h>

#define NVME_MAGIC		"KVMMNVM1"	/* every layout version */
#define NVME_VERSION		3
#define NVME_SLOT_MAGIC		0x504d564bu	/* "KVMP" */
#define NVME_BLOCK		4096u
#define NVME_TRIES		4	/* submissions of one I/O before it fails */
#define NVME_DEFAULT_QD		32
#define NVME_BOUNCE_BYTES	(256ull << 20)	/* beyond qd slots */
#define NVME_LOCK_WAIT_MS	2000	/* for a killed instance's lock to go */
#define NVME_LOCK_NAP_NS	2000000	/* between two tries */

/*
 * The superblock, version 2.  The model is known by its geometry and by
 * a fingerprint of the engine's model id (XXH3-128, zero for none), the
 * id itself kept to say whose file it is.  A file of version 1 (the same
 * fields up to and including @model, then its checksum where @model_fp
 * is now) is recognised, to be refused with its name.
 */
struct nvme_super {
	char magic[8];
	uint32_t version;
	uint32_t page_size;
	uint64_t page_bytes;
	uint64_t slot_bytes;
	uint64_t epoch;
	uint32_t nr_slots;
	uint32_t data_off;
	struct kvmm_model model;
	uint64_t model_fp[2];
	char model_id[KVMM_MODEL_ID_MAX + 1];	/* NUL-terminated, NUL-padded */
	uint64_t csum;		/* XXH3-64 of everything before it */
};

_Static_assert(sizeof(struct nvme_super) <= 4096, "the superblock is one block");

struct nvme_slot_hdr {
	uint32_t magic;
	uint32_t ns;
	uint64_t seq;
	uint64_t epoch;
	uint64_t id[2];
	uint64_t parent[2];
	uint32_t flags;		/* KVMM_STORE_KEY_*; the rest of the key: */
	uint32_t index;
	uint32_t count;
	uint32_t resv;
	uint64_t space[2];
	uint64_t value_bytes;
	uint64_t data_csum;
	uint64_t hdr_csum;	/* XXH3-64 of the header (this field 0) and tokens */
	uint32_t tokens[];
};

/* One transfer of a batch: bounce buffer i to or from the file. */
struct nvme_io {
	uint64_t off;
	uint32_t len;
	uint32_t done;
	int res;
	int tries;
};

/* A ring and its bounce buffers, used by one thread at a time. */
struct nvme_chan {
	struct io_uring ring;
	bool ring_up;
	bool fixed_bufs;	/* bounce buffers registered */
	bool dma_reg;		/* bounce buffers registered with the backend */
	const char *why;	/* what failed, with err */
	bool broken;		/* the ring failed: every later I/O fails */
	int err;		/* why setting it up failed, for good */
	uint32_t nbounce;	/* bounce slots: qd, or more for deeper reads */
	char *bounce;		/* nbounce slots */
	struct nvme_io *io;	/* nbounce */
	uint32_t *free_slots;	/* nbounce: the pump's free bounce slots */
	uint64_t completions;	/* for arg->fault_every */
};

struct nvme_store {
	int fd;
	bool direct;		/* O_DIRECT took */
	struct nvme_chan chan[KVMM_STORE_CHANS];
	uint32_t qd;		/* I/Os in flight at most */
	uint32_t page_size;
	uint64_t page_bytes;
	uint64_t slot_bytes;
	uint32_t data_off;
	uint32_t hdr_len;	/* header and tokens */
	uint32_t nr_slots;
	uint32_t old_slots;	/* slots of a recovered file to scan */
	uint64_t epoch;
	uint64_t seq;		/* next write's sequence number; atomic */
	const struct kvmm_nvme_arg *arg;
	uint64_t written;	/* pages, for flip_every and tear_every (atomic) */
	struct kvmm_dma dma;	/* .reg NULL: the backend needs no registration */
};

static int nvme_err(const struct kvmm_store_cfg *cfg, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Say why init fails, in the caller's buffer, and return @err. */
static int nvme_err(const struct kvmm_store_cfg *cfg, int err, const char *fmt, ...)
{
	va_list ap;

	if (cfg->err && cfg->err_len) {
		va_start(ap, fmt);
		vsnprintf(cfg->err, cfg->err_len, fmt, ap);
		va_end(ap);
	}
	return err;
}

static uint64_t round_up(uint64_t x, uint64_t to)
{
	return (x + to - 1) / to * to;
}

static char *slot_buf(const struct nvme_store *ns, const struct nvme_chan *ch, uint32_t i)
{
	return ch->bounce + (uint64_t)i * ns->slot_bytes;
}

static uint64_t slot_off(const struct nvme_store *ns, uint32_t slot)
{
	return NVME_BLOCK + (uint64_t)slot * ns->slot_bytes;
}

static uint64_t hdr_csum(const struct nvme_slot_hdr *h, uint32_t hdr_len)
{
	XXH3_state_t st;
	struct nvme_slot_hdr copy = *h;

	copy.hdr_csum = 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &copy, sizeof(copy));
	XXH3_64bits_update(&st, h->tokens, hdr_len - sizeof(copy));
	return XXH3_64bits_digest(&st);
}

static uint64_t super_csum(const struct nvme_super *sb)
{
	return XXH3_64bits(sb, offsetof(struct nvme_super, csum));
}

/* Version 1 ended after @model with the checksum of what came before. */
static bool super_is_v1(const struct nvme_super *sb)
{
	return sb->version == 1 &&
	       sb->model_fp[0] == XXH3_64bits(sb, offsetof(struct nvme_super, model_fp));
}

/* The fingerprint of model id @id: XXH3-128 of its bytes; zero for none. */
static void model_fp(const char *id, uint64_t fp[2])
{
	XXH128_hash_t h;

	fp[0] = fp[1] = 0;
	if (!id || !*id)
		return;
	h = XXH3_128bits(id, strlen(id));
	fp[0] = h.low64;
	fp[1] = h.high64;
}

static void chan_exit(struct nvme_store *ns, struct nvme_chan *ch)
{
	if (ch->ring_up)
		io_uring_queue_exit(&ch->ring);
	if (ch->dma_reg)
		ns->dma.unreg(ns->dma.priv, ch->bounce, ch->nbounce * ns->slot_bytes);
	free(ch->bounce);
	free(ch->io);
	free(ch->free_slots);
}

/*
 * Give the file's lock back now, before closing: the close gives it back
 * only with the last reference to the open file, which the kernel's
 * teardown of a ring may still hold for a moment.
 */
static void unlock_file(struct nvme_store *ns)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET };

	fcntl(ns->fd, F_OFD_SETLK, &fl);
}

static void nvme_exit(void *priv)
{
	struct nvme_store *ns = priv;
	uint32_t c;

	if (!ns)
		return;
	for (c = 0; c < KVMM_STORE_CHANS; c++)
		chan_exit(ns, &ns->chan[c]);
	if (ns->fd >= 0) {
		unlock_file(ns);
		close(ns->fd);
	}
	free(ns);
}

/* ---- the I/O engine: one batch through the ring, retried as needed ---- */

static bool fault_due(const struct nvme_store *ns, struct nvme_chan *ch, uint32_t site)
{
	const struct kvmm_nvme_arg *a = ns->arg;

	if (!a || !a->fault_every || (a->fault_sites && !(a->fault_sites & site)))
		return false;
	return !(++ch->completions % a->fault_every);
}

/* A test's latch (kvmm_nvme_arg.latch) may hold the batch about to start. */
static void nvme_latch(const struct nvme_store *ns, const struct nvme_chan *ch,
		       uint32_t site)
{
	const struct kvmm_nvme_arg *a = ns->arg;

	if (a && a->latch)
		a->latch(a->latch_arg, site, (uint32_t)(ch - ns->chan));
}

static void nvme_prep(struct nvme_store *ns, struct nvme_chan *ch, bool write, uint32_t i)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ch->ring);
	struct nvme_io *io = &ch->io[i];
	char *buf = slot_buf(ns, ch, i) + io->done;
	unsigned int len = io->len - io->done;
	int fd = ns->fd;
	uint64_t off = io->off + io->done;

	/* Never more than qd in flight, so there is always an sqe. */
	if (ch->fixed_bufs && write)
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, (int)i);
	else if (ch->fixed_bufs)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, (int)i);
	else if (write)
		io_uring_prep_write(sqe, fd, buf, len, off);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	io_uring_sqe_set_data64(sqe, i);
	io->tries++;
}

/*
 * The I/O pump.  While @fill(ns, slot, arg) has pages, it puts the next one
 * into the free bounce slot it is given (data, io->off, io->len) and it is
 * submitted at once; completions free their slots for more, so the queue
 * stays full across a request of any length and the copies into the bounce
 * buffers overlap the device's work.  Short transfers and -EAGAIN are
 * resubmitted for the rest.  Each finished slot's io->res is 0 or a
 * negative errno (a write looks only at the first; a read, which never
 * asks for more than nbounce pages, finds each page's in its slot), and
 * @done, if given, sees the slot then, while the rest is still in flight.
 * After a failure nothing more is filled.
 *
 * Return: 0 or the first failure's errno.
 */
static int nvme_pump(struct nvme_store *ns, struct nvme_chan *ch, bool write, uint32_t site,
		     bool (*fill)(struct nvme_store *ns, struct nvme_chan *ch,
				  uint32_t slot, void *arg),
		     void (*done)(struct nvme_store *ns, struct nvme_chan *ch,
				  uint32_t slot, void *arg),
		     void *arg)
{
	uint32_t nfree = ch->nbounce, head = 0, inflight = 0, i;
	bool more = !ch->broken;
	int first = ch->broken ? -EIO : 0;

	nvme_latch(ns, ch, site);
	/*
	 * Free slots are a FIFO from slot 0 up, freed ones joining at the
	 * back: a request of at most nbounce pages gets slots 0, 1, 2, ...
	 */
	for (i = 0; i < ch->nbounce; i++)
		ch->free_slots[i] = i;
	while (more || inflight) {
		struct io_uring_cqe *cqe;
		int ret;

		while (more && nfree && inflight < ns->qd) {
			uint32_t slot = ch->free_slots[head];
			struct nvme_io *io = &ch->io[slot];

			if (!(more = fill(ns, ch, slot, arg)))
				break;
			head = (head + 1) % ch->nbounce;
			nfree--;
			io->done = 0;
			io->tries = 0;
			io->res = 0;
			nvme_prep(ns, ch, write, slot);
			/* the device starts early; then in eights, saving syscalls */
			if (++inflight % 8 == 1)
				io_uring_submit(&ch->ring);
		}
		if (!inflight)
			break;
		ret = io_uring_submit_and_wait(&ch->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			/*
			 * The ring itself broke.  Completions still owed could
			 * land on a later request's buffers, so the store gives
			 * up: this and every later I/O fails.
			 */
			ch->broken = true;
			return ret;
		}
		while (io_uring_peek_cqe(&ch->ring, &cqe) == 0) {
			uint32_t slot = (uint32_t)io_uring_cqe_get_data64(cqe);
			struct nvme_io *io = &ch->io[slot];
			int res = cqe->res;

			io_uring_cqe_seen(&ch->ring, cqe);
			inflight--;
			if (fault_due(ns, ch, site)) {
				if (ns->arg->fault != KVMM_NVME_SHORT)
					res = ns->arg->fault;
				else if (res > 0)
					res = (int)((uint32_t)res / 2 / NVME_BLOCK * NVME_BLOCK);
			}
			if (res > 0)
				io->done += (uint32_t)res;
			if (io->done < io->len) {
				if ((res >= 0 || res == -EAGAIN || res == -EINTR) &&
				    io->tries < NVME_TRIES) {
					nvme_prep(ns, ch, write, slot);
					inflight++;
					continue;
				}
				io->res = res < 0 ? res : -EIO;
				if (!first)
					first = io->res;
				more = false;
			}
			if (done)
				done(ns, ch, slot, arg);
			ch->free_slots[(head + nfree++) % ch->nbounce] = slot;
		}
	}
	return first;
}

/* ---- pages ---- */

/* Is the page just written an every-th one (fault injection)? */
static bool nth_written(uint64_t written, uint32_t every)
{
	return every && !(written % every);
}

struct nvme_wr {
	const int32_t *pfns;
	void *const *src;
	const struct kvmm_store_key *keys;
	const uint64_t *expect;		/* what each page must hash to, or NULL */
	uint32_t nr, next;
	int err;			/* -EBADMSG: a page did not, and the rest stayed */
};

/* Put the next page of a write, with its header, into bounce slot @slot. */
static bool write_fill(struct nvme_store *ns, struct nvme_chan *ch, uint32_t slot,
		       void *arg)
{
	struct nvme_wr *wr = arg;
	const struct kvmm_store_key *k = &wr->keys[wr->next];
	struct nvme_slot_hdr *h = (void *)slot_buf(ns, ch, slot);
	char *data = slot_buf(ns, ch, slot) + ns->data_off;
	struct nvme_io *io = &ch->io[slot];
	uint64_t written;

	if (wr->next == wr->nr)
		return false;
	/*
	 * Both channels write (the worker's writeback, and a command that
	 * found the host tier full): the sequence numbers recovery orders
	 * copies by are taken atomically, so no two writes share one.
	 */
	*h = (struct nvme_slot_hdr){
		.magic = NVME_SLOT_MAGIC, .ns = k->ns,
		.seq = __atomic_fetch_add(&ns->seq, 1, __ATOMIC_RELAXED),
		.epoch = ns->epoch,
		.id = { k->id[0], k->id[1] },
		.parent = { k->parent[0], k->parent[1] },
		.flags = k->flags, .index = k->index, .count = k->count,
		.space = { k->space[0], k->space[1] },
		.value_bytes = k->value_bytes,
	};
	memcpy(h->tokens, k->tokens, (size_t)ns->page_size * sizeof(uint32_t));
	h->data_csum = kvmm_csum_fill(data, wr->src[wr->next], ns->page_bytes, ns->page_bytes);
	if (wr->expect && h->data_csum != wr->expect[wr->next]) {
		wr->err = -EBADMSG;	/* the source page is not what was sealed */
		return false;
	}
	h->hdr_csum = hdr_csum(h, ns->hdr_len);
	written = __atomic_add_fetch(&ns->written, 1, __ATOMIC_RELAXED);
	io->off = slot_off(ns, (uint32_t)wr->pfns[wr->next]);
	io->len = (uint32_t)ns->slot_bytes;
	if (ns->arg && nth_written(written, ns->arg->flip_every))
		data[written % ns->page_bytes] ^= 0x10;
	if (ns->arg && nth_written(written, ns->arg->tear_every))
		io->len = (uint32_t)(ns->slot_bytes / 2 / NVME_BLOCK * NVME_BLOCK);
	wr->next++;
	return true;
}

static int chan_setup(struct nvme_store *ns, struct nvme_chan *ch);

/* Channel @chan, set up at its first use. */
static struct nvme_chan *chan_get(struct nvme_store *ns, uint32_t chan, int *err)
{
	struct nvme_chan *ch = &ns->chan[chan < KVMM_STORE_CHANS ? chan : 0];

	*err = ch->ring_up ? 0 : chan_setup(ns, ch);
	return ch;
}

static int nvme_write(void *priv, uint32_t chan, const int32_t *pfns, uint32_t nr,
		      void *const *src, const struct kvmm_store_key *keys,
		      const uint64_t *expect)
{
	struct nvme_store *ns = priv;
	struct nvme_wr wr = { .pfns = pfns, .src = src, .keys = keys, .expect = expect,
			      .nr = nr };
	int err;
	struct nvme_chan *ch = chan_get(ns, chan, &err);

	if (err)
		return err;
	err = nvme_pump(ns, ch, true, KVMM_NVME_SITE_WRITE, write_fill, NULL, &wr);
	return wr.err ? wr.err : err;
}

/* Reads and the scan: @n blocks of @len at the slots @pfns or from @first. */
struct nvme_rd {
	const int32_t *pfns;
	const struct kvmm_store_key *keys;	/* a read checks each page against */
	const struct kvmm_store_to *to;		/* and copies it to, when not NULL */
	uint32_t first;
	uint32_t n, next;
	uint32_t len;
};

static bool read_fill(struct nvme_store *ns, struct nvme_chan *ch, uint32_t slot,
		      void *arg)
{
	struct nvme_rd *rd = arg;
	struct nvme_io *io = &ch->io[slot];

	if (rd->next == rd->n)
		return false;
	/* n <= nbounce, so slots are never reused: page i is in slot i. */
	io->off = slot_off(ns, rd->pfns ? (uint32_t)rd->pfns[rd->next] :
				  rd->first + rd->next);
	io->len = rd->len;
	rd->next++;
	return true;
}

/* A header read back from the file: does it hold what @k says? */
static bool hdr_valid(const struct nvme_store *ns, const struct nvme_slot_hdr *h)
{
	return h->magic == NVME_SLOT_MAGIC && h->epoch == ns->epoch &&
	       h->hdr_csum == hdr_csum(h, ns->hdr_len);
}

static bool hdr_is(const struct nvme_store *ns, const struct nvme_slot_hdr *h,
		   const struct kvmm_store_key *k)
{
	return hdr_valid(ns, h) && h->ns == k->ns && h->flags == k->flags &&
	       h->id[0] == k->id[0] && h->id[1] == k->id[1] &&
	       h->parent[0] == k->parent[0] && h->parent[1] == k->parent[1] &&
	       !memcmp(h->tokens, k->tokens, (size_t)ns->page_size * sizeof(uint32_t));
}

/* A page read has landed in @slot: check it while the others are in flight. */
static void read_done(struct nvme_store *ns, struct nvme_chan *ch, uint32_t slot,
		      void *arg)
{
	const struct nvme_rd *rd = arg;
	const struct nvme_slot_hdr *h = (void *)slot_buf(ns, ch, slot);
	const void *data = slot_buf(ns, ch, slot) + ns->data_off;
	uint64_t csum;

	if (ch->io[slot].res)
		return;
	if (!hdr_is(ns, h, &rd->keys[slot])) {
		ch->io[slot].res = -EBADMSG;
		return;
	}
	if (rd->to)	/* the copy and the check in one pass, the rest in flight */
		csum = kvmm_csum_copy_out(rd->to[slot].dst, data, rd->to[slot].len,
					  ns->page_bytes);
	else
		csum = kvmm_csum(data, ns->page_bytes);
	if (csum != h->data_csum)
		ch->io[slot].res = -EBADMSG;
}


static uint32_t nvme_read(void *priv, uint32_t chan, const int32_t *pfns, uint32_t nr,
			  const struct kvmm_store_key *keys, const struct kvmm_store_to *to,
			  void **dst, int *err)
{
	struct nvme_store *ns = priv;
	struct nvme_chan *ch = chan_get(ns, chan, err);
	struct nvme_rd rd = { .pfns = pfns, .keys = keys, .to = to,
			      .len = (uint32_t)ns->slot_bytes };
	uint32_t i;

	if (*err)
		return 0;
	rd.n = nr < ch->nbounce ? nr : ch->nbounce;
	nvme_pump(ns, ch, false, KVMM_NVME_SITE_READ, read_fill, read_done, &rd);
	for (i = 0; i < rd.next; i++) {
		if (ch->io[i].res) {
			*err = ch->io[i].res;
			return i;
		}
		dst[i] = slot_buf(ns, ch, i) + ns->data_off;
	}
	*err = i < rd.n ? -EIO : 0;	/* the ring broke before all were asked */
	return i;
}

/*
 * The restart scan: read every old slot's header block and hand the valid
 * ones to @fn.  A slot whose read fails is skipped, as an empty one.
 */
static int nvme_recover(void *priv,
			int (*fn)(void *arg, uint32_t pfn,
				  const struct kvmm_store_key *key, uint64_t seq),
			void *arg)
{
	struct nvme_store *ns = priv;
	struct nvme_chan *ch = &ns->chan[0];
	uint32_t len = (uint32_t)round_up(ns->data_off, NVME_BLOCK);
	uint32_t slot, n, i;
	int ret;

	for (slot = 0; slot < ns->old_slots; slot += n) {
		struct nvme_rd rd = { .first = slot, .len = len };

		n = ns->old_slots - slot < ch->nbounce ? ns->old_slots - slot : ch->nbounce;
		rd.n = n;
		nvme_pump(ns, ch, false, KVMM_NVME_SITE_SCAN, read_fill, NULL, &rd);
		for (i = 0; i < rd.next; i++) {
			const struct nvme_slot_hdr *h = (void *)slot_buf(ns, ch, i);
			struct kvmm_store_key k;

			if (ch->io[i].res || !hdr_valid(ns, h))
				continue;
			k = (struct kvmm_store_key){
				.id = { h->id[0], h->id[1] },
				.parent = { h->parent[0], h->parent[1] },
				.ns = h->ns, .tokens = h->tokens,
				.flags = h->flags, .index = h->index, .count = h->count,
				.space = { h->space[0], h->space[1] },
				.value_bytes = h->value_bytes,
			};
			if (h->seq >= ns->seq)
				ns->seq = h->seq + 1;
			ret = fn(arg, slot + i, &k, h->seq);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* ---- opening the file ---- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Take the file's lock: an exclusive OFD lock on the whole file, held as
 * long as the store keeps it open.  Two contexts on one file (two kvmmd,
 * or two kvmm_create() in one process: the lock belongs to the open file,
 * not the process) would overwrite each other's slots, so the second is
 * refused.
 *
 * An instance killed with I/O in flight keeps the lock a moment after it
 * is reaped: its io_uring requests hold the open file until the kernel has
 * cancelled them, in the background.  So a lock that is taken is tried
 * again for up to NVME_LOCK_WAIT_MS before the file counts as in use; a
 * wait that was needed is said (a note in @cfg->err, which the core logs).
 */
static int lock_file(struct nvme_store *ns, const struct kvmm_store_cfg *cfg)
{
	const struct timespec nap = { .tv_nsec = NVME_LOCK_NAP_NS };
	uint64_t start = now_ms(), waited = 0;

	for (;;) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

		if (!fcntl(ns->fd, F_OFD_SETLK, &fl))
			break;
		if (errno != EAGAIN && errno != EACCES)
			return nvme_err(cfg, -errno, "cannot lock %s: %s (kvmm refuses a file "
					"it cannot lock)", cfg->path, strerror(errno));
		waited = now_ms() - start;
		if (waited >= NVME_LOCK_WAIT_MS)
			return nvme_err(cfg, -EBUSY, "%s is in use: another kvmm instance (a "
					"kvmmd, or a context in some process) held its lock "
					"for the %u ms kvmm waits, and a file serves one context "
					"at a time; stop that one or use another file",
					cfg->path, NVME_LOCK_WAIT_MS);
		nanosleep(&nap, NULL);
	}
	if (waited)
		nvme_err(cfg, 0, "%s: waited %llu ms for its lock (an instance that was "
			 "killed with I/O in flight holds it until the kernel has "
			 "cancelled that I/O)", cfg->path, (unsigned long long)waited);
	return 0;
}

/* The pseudo filesystem @fd is on (procfs, sysfs, ...), or NULL: storage. */
static const char *pseudo_fs(int fd)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} fs[] = {
		{ PROC_SUPER_MAGIC, "procfs" }, { SYSFS_MAGIC, "sysfs" },
		{ DEBUGFS_MAGIC, "debugfs" }, { TRACEFS_MAGIC, "tracefs" },
		{ CGROUP_SUPER_MAGIC, "cgroupfs" }, { CGROUP2_SUPER_MAGIC, "cgroup2fs" },
		{ SECURITYFS_MAGIC, "securityfs" }, { BPF_FS_MAGIC, "bpffs" },
		{ EFIVARFS_MAGIC, "efivarfs" }, { PSTOREFS_MAGIC, "pstore" },
		{ DEVPTS_SUPER_MAGIC, "devpts" },
	};
	struct statfs sfs;
	size_t i;

	if (fstatfs(fd, &sfs))
		return NULL;
	for (i = 0; i < sizeof(fs) / sizeof(fs[0]); i++)
		if ((unsigned long)sfs.f_type == fs[i].magic)
			return fs[i].name;
	return NULL;
}

/*
 * Whether the file just opened may hold the tier: a file or block device
 * on storage, owned by this process's user, that nobody else may read or
 * write (a block device's group may: the disk group can read the raw
 * disk anyway).  The file holds every tenant's KV at rest, and what is in
 * it is served: whoever else may write it chooses KV, whoever may read it
 * reads everyone's.
 */
static int file_check(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		      struct stat *st)
{
	mode_t others;
	const char *fs;

	if (fstat(ns->fd, st))
		return nvme_err(cfg, -errno, "cannot stat %s: %s", cfg->path,
				strerror(errno));
	if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode))
		return nvme_err(cfg, -EINVAL, "%s is neither a file nor a block device",
				cfg->path);
	fs = pseudo_fs(ns->fd);
	if (fs)
		return nvme_err(cfg, -EINVAL, "%s is on %s, not on storage: refusing it "
				"(it is no file for KV, whatever size it reports)", cfg->path, fs);
	if (st->st_uid != geteuid())
		return nvme_err(cfg, -EPERM, "%s is owned by uid %u, not by this process's "
				"uid %u: whoever owns it could read every tenant's KV at rest "
				"and write what is served; refusing it (use a file of this "
				"user's, mode 600)", cfg->path, (unsigned)st->st_uid,
				(unsigned)geteuid());
	others = S_ISBLK(st->st_mode) ? 007 : 077;
	if (st->st_mode & others)
		return nvme_err(cfg, -EPERM, "%s may be read or written by %s (mode %03o): "
				"it holds every tenant's KV at rest; refusing it (chmod %s it)",
				cfg->path, S_ISBLK(st->st_mode) ? "others" : "its group or others",
				(unsigned)(st->st_mode & 0777), S_ISBLK(st->st_mode) ? "o-rw" : "600");
	return 0;
}

/*
 * Open the file, never through a symbolic link (one planted in a
 * directory others may write would have kvmm create or overwrite its
 * target), check it, and lock it.
 */
static int open_file(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		     struct stat *st)
{
	const int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
	int ret;

	ns->fd = open(cfg->path, flags | O_DIRECT, 0600);
	ns->direct = ns->fd >= 0;
	if (ns->fd < 0 && errno == EINVAL)	/* tmpfs and friends */
		ns->fd = open(cfg->path, flags, 0600);
	if (ns->fd < 0 && errno == ELOOP)
		return nvme_err(cfg, -ELOOP, "%s is a symbolic link: kvmm does not follow "
				"one to its NVMe file (a link planted in a directory others may "
				"write would have it create or overwrite the target); give the "
				"file's own path", cfg->path);
	if (ns->fd < 0)
		return nvme_err(cfg, -errno, "cannot open %s: %s", cfg->path,
				strerror(errno));
	ret = file_check(ns, cfg, st);
	return ret ? ret : lock_file(ns, cfg);
}

static int file_size(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		     const struct stat *st, uint64_t *size, bool *blk)
{
	*blk = S_ISBLK(st->st_mode);
	if (*blk) {
		if (ioctl(ns->fd, BLKGETSIZE64, size))
			return nvme_err(cfg, -errno, "cannot size %s: %s", cfg->path,
					strerror(errno));
		return 0;
	}
	*size = (uint64_t)st->st_size;
	return 0;
}

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	return !n || (!c[0] && !memcmp(c, c + 1, n - 1));
}

/* The model id a context passes: printable, and short enough to record. */
static int check_model_id(const struct kvmm_store_cfg *cfg)
{
	const char *id = cfg->model_id;
	size_t i, n;

	if (!id)
		return 0;
	n = strnlen(id, KVMM_MODEL_ID_MAX + 1);
	if (n > KVMM_MODEL_ID_MAX)
		return nvme_err(cfg, -EINVAL, "model_id is longer than %u bytes",
				KVMM_MODEL_ID_MAX);
	for (i = 0; i < n; i++)
		if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
			return nvme_err(cfg, -EINVAL, "model_id has a control character "
					"(0x%02x at byte %zu)", (unsigned char)id[i], i);
	return 0;
}

/* "8 layers x 2 KV heads x 64 x 2 bytes (MHA)": a geometry, for messages. */
static void geom_str(char *buf, size_t len, uint32_t page_size, const struct kvmm_model *m)
{
	if (m->attn == KVMM_ATTN_MLA)
		snprintf(buf, len, "page size %u, %u layers x %u latent x %u bytes (MLA)",
			 page_size, m->layers, m->latent_dim, m->dtype_bytes);
	else
		snprintf(buf, len, "page size %u, %u layers x %u KV heads x %u x %u bytes%s",
			 page_size, m->layers, m->kv_heads, m->head_dim, m->dtype_bytes,
			 m->attn == KVMM_ATTN_MHA ? "" : " (unknown attention)");
}

/* A model id recorded in a file, made safe to print. */
static const char *id_str(char *id)
{
	size_t i;

	id[KVMM_MODEL_ID_MAX] = '\0';
	for (i = 0; id[i]; i++)
		if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
			id[i] = '?';
	return id;
}

#define REFORMAT_HINT	"reformat it (KVMM_NVME_REFORMAT, kvmmd --nvme-reformat: its " \
			"pages are dropped) or use another file"

/*
 * A kvmm superblock that checks: is it this context's?  Its layout
 * version, geometry and model fingerprint must all be ours.
 */
static int super_matches(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
			 struct nvme_super *sb)
{
	char theirs[160], ours[160];
	uint64_t fp[2];

	geom_str(theirs, sizeof(theirs), sb->page_size, &sb->model);
	geom_str(ours, sizeof(ours), cfg->page_size, &cfg->model);
	if (sb->page_size != cfg->page_size || sb->page_bytes != cfg->page_bytes ||
	    sb->slot_bytes != ns->slot_bytes || sb->data_off != ns->data_off ||
	    memcmp(&sb->model, &cfg->model, sizeof(sb->model)))
		return nvme_err(cfg, -EEXIST, "%s holds KV of another geometry (%s; this "
				"context: %s); refusing it: " REFORMAT_HINT,
				cfg->path, theirs, ours);
	model_fp(cfg->model_id, fp);
	if (sb->model_fp[0] != fp[0] || sb->model_fp[1] != fp[1])
		return nvme_err(cfg, -EEXIST, "%s holds KV of model '%.80s'%s; this context "
				"is model '%.80s'%s: refusing to serve another model's KV: "
				REFORMAT_HINT, cfg->path, id_str(sb->model_id),
				sb->model_fp[0] | sb->model_fp[1] ? "" : " (no model id)",
				cfg->model_id ? cfg->model_id : "",
				fp[0] | fp[1] ? "" : " (no model id)");
	return 0;
}

/*
 * The superblock of a kvmm file: checked, then compared with this
 * context's.  A damaged one is never guessed at: -EUCLEAN, loudly.
 */
static int super_check(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		       struct nvme_super *sb, ssize_t got)
{
	if (got < NVME_BLOCK)
		return nvme_err(cfg, -EUCLEAN, "%s: the superblock is damaged (the file "
				"ends at byte %zd of it); refusing the file, nothing on it is "
				"served: " REFORMAT_HINT, cfg->path, got);
	if (super_is_v1(sb))
		return nvme_err(cfg, -EEXIST, "%s has layout version 1, which records no "
				"model identity; this kvmm writes version %u and does not "
				"recover older files: " REFORMAT_HINT, cfg->path, NVME_VERSION);
	if (sb->version == 2 && sb->csum == super_csum(sb))
		return nvme_err(cfg, -EEXIST, "%s has layout version 2, whose slots do not "
				"say which pages are keyed values; this kvmm writes version %u "
				"and does not recover older files: " REFORMAT_HINT, cfg->path,
				NVME_VERSION);
	if (sb->version != NVME_VERSION || sb->csum != super_csum(sb))
		return nvme_err(cfg, -EUCLEAN, "%s: the superblock is damaged (%s); refusing "
				"the file, nothing on it is served: " REFORMAT_HINT, cfg->path,
				sb->version == NVME_VERSION || sb->version == 1 ?
				"its checksum does not match" :
				"unknown layout version, or a bit flipped in it");
	return super_matches(ns, cfg, sb);
}

/*
 * Read the superblock of a file of @size bytes: a kvmm file of this
 * geometry and model is recovered (old_slots set); an empty one, or any
 * kvmm file or one whose first 4 KiB are zeros when reformatting is
 * asked, is formatted; a kvmm file of another model, geometry or layout
 * version is refused (-EEXIST), one whose superblock is damaged too
 * (-EUCLEAN), a non-empty one that is not recognisably kvmm's without
 * reformatting (-EINVAL), and one that does not start with zeros or
 * kvmm's magic always (-EINVAL).
 */
static int read_super(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		      uint64_t size, struct nvme_super *sb)
{
	ssize_t got;
	uint64_t have;
	int ret;

	ns->old_slots = 0;
	memset(sb, 0, NVME_BLOCK);
	got = pread(ns->fd, sb, NVME_BLOCK, 0);	/* short for a short file */
	if (got < 0)
		return nvme_err(cfg, -errno, "cannot read the superblock of %s: %s",
				cfg->path, strerror(errno));
	if (!size)
		return 0;
	if (memcmp(sb->magic, NVME_MAGIC, sizeof(sb->magic)) && !all_zero(sb, NVME_BLOCK))
		return nvme_err(cfg, -EINVAL, "%s is not a kvmm NVMe tier file; "
				"refusing to overwrite it, even to reformat (zero its "
				"first 4 KiB and reformat to hand it to kvmm)", cfg->path);
	if (memcmp(sb->magic, NVME_MAGIC, sizeof(sb->magic)) &&
	    !(cfg->flags & KVMM_NVME_REFORMAT))
		return nvme_err(cfg, -EINVAL, "%s holds %llu bytes but no kvmm superblock "
				"(its first 4 KiB are zeros): not recognisably a kvmm file, "
				"so it is not formatted; reformat (KVMM_NVME_REFORMAT, kvmmd "
				"--nvme-reformat) to hand it to kvmm", cfg->path,
				(unsigned long long)size);
	if (cfg->flags & KVMM_NVME_REFORMAT)
		return 0;
	ret = super_check(ns, cfg, sb, got);
	if (ret)
		return ret;
	have = (size - NVME_BLOCK) / ns->slot_bytes;	/* a truncated file has fewer */
	ns->old_slots = sb->nr_slots;
	if (ns->old_slots > have)
		ns->old_slots = (uint32_t)have;
	if (ns->old_slots > ns->nr_slots)
		ns->old_slots = ns->nr_slots;
	ns->epoch = sb->epoch;
	return 0;
}

static uint64_t new_epoch(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return XXH3_64bits_withSeed(&ts, sizeof(ts), (uint64_t)getpid()) | 1;
}

/*
 * Write the superblock, then make the file big enough: a file kvmm made
 * is recognisably its own from the first write on, so a start cut short
 * never leaves a file of zeros the next start would refuse to format.
 */
static int write_super(struct nvme_store *ns, const struct kvmm_store_cfg *cfg,
		       uint64_t size, bool blk, struct nvme_super *sb)
{
	uint64_t need = slot_off(ns, ns->nr_slots);
	int ret;

	if (blk && size < need)
		return nvme_err(cfg, -ENOSPC, "%s holds %llu bytes; %u pages need %llu",
				cfg->path, (unsigned long long)size, ns->nr_slots,
				(unsigned long long)need);
	if (!ns->epoch)
		ns->epoch = new_epoch();
	memset(sb, 0, NVME_BLOCK);
	memcpy(sb->magic, NVME_MAGIC, sizeof(sb->magic));
	sb->version = NVME_VERSION;
	sb->page_size = cfg->page_size;
	sb->page_bytes = cfg->page_bytes;
	sb->slot_bytes = ns->slot_bytes;
	sb->epoch = ns->epoch;
	sb->nr_slots = ns->nr_slots;
	sb->data_off = ns->data_off;
	sb->model = cfg->model;
	model_fp(cfg->model_id, sb->model_fp);
	if (cfg->model_id)
		strncpy(sb->model_id, cfg->model_id, KVMM_MODEL_ID_MAX);
	sb->csum = super_csum(sb);
	errno = 0;
	if (pwrite(ns->fd, sb, NVME_BLOCK, 0) != NVME_BLOCK)
		return nvme_err(cfg, errno ? -errno : -EIO, "cannot write the superblock of %s",
				cfg->path);
	if (!blk && size < need) {
		ret = posix_fallocate(ns->fd, 0, (off_t)need);
		if (ret == EINVAL || ret == EOPNOTSUPP)
			ret = ftruncate(ns->fd, (off_t)need) ? errno : 0;
		if (ret)
			return nvme_err(cfg, -ret, "cannot make %s %llu bytes for %u pages: %s",
					cfg->path, (unsigned long long)need, ns->nr_slots,
					strerror(ret));
	}
	return 0;
}

/*
 * Set up channel @ch: its bounce buffers and its ring.  A failure is kept,
 * so a channel that cannot be had fails every call the same way.
 */
static int chan_setup(struct nvme_store *ns, struct nvme_chan *ch)
{
	const char *why = "no memory for the bounce buffers";
	struct iovec *iov;
	uint32_t i;
	int ret;

	if (ch->err)
		return ch->err;
	/*
	 * A read hands back pages in bounce slots, so it asks for at most
	 * nbounce at a time and the queue drains at its end: with four
	 * queues' worth of slots (up to NVME_BOUNCE_BYTES) it stays full
	 * for most of it.
	 */
	ch->nbounce = ns->qd;
	while (ch->nbounce < 4 * ns->qd &&
	       (ch->nbounce + ns->qd) * ns->slot_bytes <= NVME_BOUNCE_BYTES)
		ch->nbounce += ns->qd;
	ret = -ENOMEM;
	if (posix_memalign((void **)&ch->bounce, NVME_BLOCK, ch->nbounce * ns->slot_bytes)) {
		ch->bounce = NULL;
		goto fail;
	}
	ch->io = calloc(ch->nbounce, sizeof(*ch->io));
	ch->free_slots = calloc(ch->nbounce, sizeof(*ch->free_slots));
	iov = calloc(ch->nbounce, sizeof(*iov));
	if (!ch->io || !ch->free_slots || !iov) {
		free(iov);
		goto fail;
	}
	/* The backend scatters promoted pages straight from the bounce slots. */
	if (ns->dma.reg) {
		why = "cannot register the bounce buffers for DMA";
		ret = ns->dma.reg(ns->dma.priv, ch->bounce, ch->nbounce * ns->slot_bytes);
		if (ret) {
			free(iov);
			goto fail;
		}
		ch->dma_reg = true;
	}
	why = "io_uring_queue_init";
	ret = io_uring_queue_init(ns->qd, &ch->ring, 0);
	if (ret) {
		free(iov);
		goto fail;
	}
	ch->ring_up = true;
	for (i = 0; i < ch->nbounce; i++)
		iov[i] = (struct iovec){ slot_buf(ns, ch, i), ns->slot_bytes };
	/*
	 * The registration only speeds things up: go on without it.  The
	 * file is not registered: a ring holds a registered file until the
	 * kernel has torn the ring down, in the background after the process
	 * is gone, and the file's lock with it, so a kvmmd started right
	 * after one that crashed would find the file in use.
	 */
	ch->fixed_bufs = !io_uring_register_buffers(&ch->ring, iov, ch->nbounce);
	free(iov);
	return 0;
fail:
	chan_exit(ns, ch);
	memset(ch, 0, sizeof(*ch));
	ch->err = ret;
	ch->why = why;
	return ret;
}

static int nvme_init(const struct kvmm_store_cfg *cfg, void **privp)
{
	const struct kvmm_nvme_arg *arg = cfg->arg;
	struct nvme_store *ns;
	struct nvme_super *sb = NULL;
	struct stat st;
	uint64_t size = 0;
	bool blk = false;
	int ret;

	if (arg && arg->fail_init)
		return nvme_err(cfg, arg->fail_init < 0 ? arg->fail_init : -EIO,
				"injected init failure");
	if (!cfg->page_bytes || !cfg->nr_pages || !cfg->page_size || !cfg->path ||
	    !*cfg->path)
		return nvme_err(cfg, -EINVAL, "the NVMe tier needs a path and pages");
	if (cfg->flags & ~KVMM_NVME_FLAGS)
		return nvme_err(cfg, -EINVAL, "nvme_flags 0x%x has unknown bits 0x%x",
				cfg->flags, cfg->flags & ~KVMM_NVME_FLAGS);
	ret = check_model_id(cfg);
	if (ret)
		return ret;
	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	ns->fd = -1;
	ns->arg = arg;
	if (cfg->dma)
		ns->dma = *cfg->dma;
	ns->qd = cfg->qd ? cfg->qd : NVME_DEFAULT_QD;
	ns->page_size = cfg->page_size;
	ns->page_bytes = cfg->page_bytes;
	ns->nr_slots = cfg->nr_pages;
	ns->hdr_len = (uint32_t)(sizeof(struct nvme_slot_hdr) +
				 cfg->page_size * sizeof(uint32_t));
	ns->data_off = (uint32_t)round_up(ns->hdr_len, 64);
	ns->slot_bytes = round_up(ns->data_off + cfg->page_bytes, NVME_BLOCK);
	ns->seq = 1;
	ret = -ENOMEM;
	if (ns->qd > 4096 || ns->slot_bytes > (1ull << 30)) {
		ret = nvme_err(cfg, -EINVAL, "queue depth %u or page of %llu bytes too large",
			       ns->qd, (unsigned long long)cfg->page_bytes);
		goto out;
	}
	if (posix_memalign((void **)&sb, NVME_BLOCK, NVME_BLOCK))
		goto out;
	ret = open_file(ns, cfg, &st);
	if (!ret)
		ret = file_size(ns, cfg, &st, &size, &blk);
	if (!ret)
		ret = read_super(ns, cfg, size, sb);
	if (!ret)
		ret = write_super(ns, cfg, size, blk, sb);
	if (!ret) {
		ret = chan_setup(ns, &ns->chan[0]);
		if (ret)
			nvme_err(cfg, ret, "%s (queue depth %u): %s", ns->chan[0].why, ns->qd,
				 strerror(-ret));
	}
	free(sb);
	if (!ret) {
		*privp = ns;
		return 0;
	}
out:
	nvme_exit(ns);
	return ret;
}

const struct kvmm_store_ops kvmm_nvme_store = {
	.name = "nvme",
	.init = nvme_init,
	.exit = nvme_exit,
	.write = nvme_write,
	.read = nvme_read,
	.recover = nvme_recover,
};
#endif /* CONFIG_KVMM_LIBURING */
