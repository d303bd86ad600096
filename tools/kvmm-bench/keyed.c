// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/keyed.c - kvmm-bench keyed: the keyed page store's
 * throughput and probe latency, against what the machine itself does.
 *
 * Values are 2 MiB: a 16-token block of a Llama-3-8B-shaped KV (128 KiB
 * a token), one page at page size 16, what vLLM offloads per block.
 *
 *  host:   batched puts of fresh keys (each batch evicts the previous
 *          one's values, as a full cache does) and batched gets, GB/s,
 *          beside one memcpy of the same bytes between buffers of the
 *          same kind, in the same rounds;
 *  nvme:   a host tier that writes everything down at once (both host
 *          watermarks at its size): after a batch put, background
 *          writeback of the batch to NVMe (timed by kvmm_sync()), then a
 *          batch get that reads it back, GB/s, beside fio on the same
 *          file with the same block size (one slot) and queue depth;
 *  remote: the same host put and get through a ring to a server in
 *          another process, the values in the ring's data area, against
 *          the in-process figures;
 *  exists: KEXISTS of 128 stored keys, microseconds a call, in-process
 *          and through the ring.
 *
 * Medians of rounds; --json prints one object per figure, then a summary.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libkvmm-ring.h>

#include "bench.h"

#define KEYED_ROUNDS	5
#define KEYED_NVME_ROUNDS 9	/* the disk drifts: more pairs of rounds */
#define EXISTS_KEYS	128
#define EXISTS_CALLS	2000
#define PAGE_TOKENS	16

struct keyed_opts {
	uint32_t batch;		/* values a put or get names */
	const char *nvme_file;
	uint32_t qd;
	bool fio;
	bool json;
};

static const char model_id[] = "meta-llama/Llama-3.1-8B@bench";

static uint64_t value_bytes(void)
{
	return kvmm_cell_bytes(&bench_model_8b) * PAGE_TOKENS;
}

static struct kvmm_key key_of(uint64_t round, uint64_t i)
{
	return (struct kvmm_key){ .lo = round * 0x9e3779b97f4a7c15ull + i, .hi = round };
}

static struct kvmm_params keyed_params(uint32_t host_pages)
{
	struct kvmm_params p;

	kvmm_params_init(&p);
	p.model = bench_model_8b;
	p.page_size = PAGE_TOKENS;
	p.nr_pages = 16;
	p.max_seqs = 4;
	p.max_seq_len = 256;
	p.host_pages = host_pages;
	p.host_node = KVMM_NODE_NEAREST;
	return p;
}

/* One figure, beside @vs_name's @vs (unless NULL) and their @ratio. */
static void report_ratio(const struct keyed_opts *o, const char *what, double v,
			 const char *unit, const char *vs_name, double vs, double ratio)
{
	report_figure(o->json, "keyed", what, v, unit, vs_name, vs, ratio, NULL);
}

static void report(const struct keyed_opts *o, const char *what, double v, const char *unit,
		   const char *vs_name, double vs)
{
	report_ratio(o, what, v, unit, vs_name, vs, vs > 0 ? v / vs : 0);
}

/*
 * struct keyed_set - the batch's values, caller side: @src stamped,
 * @dst for gets; @keys of the current round.
 */
struct keyed_set {
	uint32_t n;
	struct memcpy_pair mem;	/* a: the sources, b: the destinations */
	const void **src;
	void **dst;
	struct kvmm_key *keys;
	int32_t *res;
};

static void set_free(struct keyed_set *s)
{
	memcpy_pair_free(&s->mem);
	free(s->src);
	free(s->dst);
	free(s->keys);
	free(s->res);
}

static int set_init(struct keyed_set *s, uint32_t n)
{
	uint64_t vb = value_bytes();
	uint32_t i;

	memset(s, 0, sizeof(*s));
	s->n = n;
	s->src = calloc(n, sizeof(*s->src));
	s->dst = calloc(n, sizeof(*s->dst));
	s->keys = calloc(n, sizeof(*s->keys));
	s->res = calloc(n, sizeof(*s->res));
	if (!s->src || !s->dst || !s->keys || !s->res || memcpy_pair_init(&s->mem, n * vb)) {
		set_free(s);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		s->src[i] = s->mem.a + i * vb;
		s->dst[i] = s->mem.b + i * vb;
	}
	return 0;
}

static void set_keys(struct keyed_set *s, uint64_t round)
{
	uint32_t i;

	for (i = 0; i < s->n; i++)
		s->keys[i] = key_of(round, i);
}

/* One timed put (fresh keys of @round) and get of the set: GB/s each. */
static int put_get(struct kvmm_ctx *ctx, uint32_t sp, struct keyed_set *s, uint64_t round,
		   double *put, double *get)
{
	uint64_t bytes = (uint64_t)s->n * value_bytes(), t0;
	int ret;

	set_keys(s, round);
	t0 = now_ns();
	ret = kvmm_keyed_put(ctx, sp, s->keys, s->src, s->n, s->res);
	*put = gbps(bytes, (double)(now_ns() - t0));
	if (ret != (int)s->n)
		return ret < 0 ? ret : -ENOSPC;
	t0 = now_ns();
	ret = kvmm_keyed_get(ctx, sp, s->keys, s->dst, s->n, s->res);
	*get = gbps(bytes, (double)(now_ns() - t0));
	return ret == (int)s->n ? 0 : (ret < 0 ? ret : -EIO);
}

static int space_of(struct kvmm_ctx *ctx, uint32_t *sp)
{
	struct kvmm_keyed_spec spec = { .value_bytes = value_bytes(), .model_id = model_id };

	return kvmm_keyed_space(ctx, &spec, sp);
}

/*
 * memcpy of the set a value at a time, as a store without kvmm copies
 * each block: GB/s.  Below the size where glibc switches to streaming
 * stores, unlike the one large memcpy of memcpy_gbps().
 */
static double memcpy_values_gbps(const struct keyed_set *s)
{
	uint64_t vb = value_bytes(), t0 = now_ns();
	uint32_t i;

	for (i = 0; i < s->n; i++)
		memcpy(s->dst[i], s->src[i], vb);
	return gbps((uint64_t)s->n * vb, (double)(now_ns() - t0));
}

/* A host figure beside both memcpys: the set's one, and a value at a time. */
static void report_host(const struct keyed_opts *o, const char *what, double v, double mc,
			double mv)
{
	if (o->json) {
		tool_json_line(json_pack("{s:s,s:s,s:o,s:s,s:o,s:o,s:o,s:o}", "bench", "keyed",
					 "what", what, "value", tool_json_fixed(v, 3), "unit", "GB/s",
					 "memcpy_gbps", tool_json_fixed(mc, 3),
					 "ratio", tool_json_fixed(mc > 0 ? v / mc : 0, 3),
					 "memcpy_value_gbps", tool_json_fixed(mv, 3),
					 "ratio_value", tool_json_fixed(mv > 0 ? v / mv : 0, 3)), stdout);
		return;
	}
	printf("%-14s %10.3f GB/s    memcpy_gbps %.3f  ratio %.3f   memcpy_value_gbps %.3f  "
	       "ratio_value %.3f\n", what, v, mc, mc > 0 ? v / mc : 0, mv, mv > 0 ? v / mv : 0);
}

/* Host tier: put and get against memcpy; the medians go to @put and @get. */
static int bench_host(const struct keyed_opts *o, double *put_out, double *get_out)
{
	struct kvmm_params p = keyed_params(2 * o->batch);
	double put[KEYED_ROUNDS], get[KEYED_ROUNDS], mc[KEYED_ROUNDS], mv[KEYED_ROUNDS];
	struct kvmm_ctx *ctx = NULL;
	struct keyed_set s;
	uint32_t sp, r;
	int ret;

	ret = set_init(&s, o->batch);
	if (ret)
		return ret;
	ret = kvmm_create(&p, &ctx);
	if (!ret)
		ret = space_of(ctx, &sp);
	/* a warm-up round: first touches of the host tier stay out */
	for (r = 0; !ret && r < 2; r++)
		ret = put_get(ctx, sp, &s, 1000 + r, &put[0], &get[0]);
	for (r = 0; !ret && r < KEYED_ROUNDS; r++) {
		ret = put_get(ctx, sp, &s, r, &put[r], &get[r]);
		mc[r] = memcpy_gbps(&s.mem);
		mv[r] = memcpy_values_gbps(&s);
	}
	if (!ret) {
		*put_out = median(put, KEYED_ROUNDS);
		*get_out = median(get, KEYED_ROUNDS);
		report_host(o, "host_put", *put_out, median(mc, KEYED_ROUNDS), median(mv, KEYED_ROUNDS));
		report_host(o, "host_get", *get_out, median(mc, KEYED_ROUNDS), median(mv, KEYED_ROUNDS));
	}
	if (!ret && kvmm_check(ctx))
		ret = -EUCLEAN;
	kvmm_destroy(ctx);
	set_free(&s);
	return ret;
}

/*
 * NVMe tier: the batch put, then kvmm_sync() until writeback has it all
 * on NVMe (the host watermarks at the tier's size write everything down),
 * timed from the end of the put (whose settle queues the writeback: host
 * to NVMe, what fio's write is beside); then the batch read back from NVMe.  fio moves the same blocks on a file
 * beside it (PATH.fio, the same disk) in every round, just before kvmm
 * does, so a disk whose speed drifts between runs drifts under both; the
 * ratio is the median of the rounds' ratios.
 */
static int bench_nvme(const struct keyed_opts *o)
{
	struct kvmm_params p = keyed_params(o->batch);
	double wr[KEYED_NVME_ROUNDS], rd[KEYED_NVME_ROUNDS];
	double fwr[KEYED_NVME_ROUNDS], frd[KEYED_NVME_ROUNDS];
	uint64_t st[NR_KVMM_STATS], bytes, slot, t0;
	bool fio = o->fio && fio_present();
	struct kvmm_ctx *ctx = NULL;
	struct keyed_set s;
	char fio_file[4096];
	uint32_t sp, r;
	int ret;

	p.nvme_pages = 2 * o->batch;
	p.nvme_path = o->nvme_file;
	p.nvme_qd = o->qd;
	p.nvme_flags = KVMM_NVME_REFORMAT;
	p.model_id = model_id;
	p.host_wmark_low = p.host_wmark_high = o->batch;
	/* a slot is the page and its header: fio moves the same blocks */
	slot = (value_bytes() + 4096 + 4095) / 4096 * 4096;
	snprintf(fio_file, sizeof(fio_file), "%s.fio", o->nvme_file);
	ret = set_init(&s, o->batch);
	if (ret)
		return ret;
	bytes = (uint64_t)o->batch * value_bytes();
	ret = kvmm_create(&p, &ctx);
	if (!ret)
		ret = space_of(ctx, &sp);
	for (r = 0; !ret && r < KEYED_NVME_ROUNDS; r++) {
		struct fio_result fw = { 0 }, fr = { 0 };

		if (fio && run_fio(fio_file, "write", slot, o->batch * slot, o->qd, &fw)) {
			fprintf(stderr, "keyed: fio failed on %s\n", fio_file);
			fio = false;
		}
		set_keys(&s, r);
		ret = kvmm_keyed_put(ctx, sp, s.keys, s.src, s.n, s.res) == (int)s.n ? 0 : -ENOSPC;
		t0 = now_ns();	/* the put's settle queued the writeback of the batch */
		if (!ret)
			ret = kvmm_sync(ctx);
		wr[r] = gbps(bytes, (double)(now_ns() - t0));
		kvmm_stats(ctx, st, NR_KVMM_STATS);
		if (!ret && st[KVMM_STAT_KEYED_NVME_PAGES] < o->batch)
			ret = -EAGAIN;	/* writeback did not take it all down */
		if (fio && run_fio(fio_file, "read", slot, o->batch * slot, o->qd, &fr)) {
			fprintf(stderr, "keyed: fio failed on %s\n", fio_file);
			fio = false;
		}
		t0 = now_ns();
		if (!ret && kvmm_keyed_get(ctx, sp, s.keys, s.dst, s.n, s.res) != (int)s.n)
			ret = -EIO;
		rd[r] = gbps(bytes, (double)(now_ns() - t0));
		fwr[r] = fw.gbps;
		frd[r] = fr.gbps;
	}
	if (!ret && kvmm_check(ctx))
		ret = -EUCLEAN;
	kvmm_destroy(ctx);
	set_free(&s);
	unlink(fio_file);
	if (ret)
		return ret;
	report_ratio(o, "nvme_write", median(wr, KEYED_NVME_ROUNDS), "GB/s",
		     fio ? "fio_gbps" : NULL, median(fwr, KEYED_NVME_ROUNDS),
		     median_ratio(wr, fwr, KEYED_NVME_ROUNDS));
	report_ratio(o, "nvme_get", median(rd, KEYED_NVME_ROUNDS), "GB/s",
		     fio ? "fio_gbps" : NULL, median(frd, KEYED_NVME_ROUNDS),
		     median_ratio(rd, frd, KEYED_NVME_ROUNDS));
	return 0;
}

/* KEXISTS of 128 stored keys: microseconds a call, in-process. */
static int bench_exists_direct(const struct keyed_opts *o, double *us)
{
	struct kvmm_params p = keyed_params(EXISTS_KEYS + 8);
	struct kvmm_key keys[EXISTS_KEYS];
	double t[KEYED_ROUNDS];
	struct kvmm_ctx *ctx = NULL;
	void *v = calloc(1, value_bytes());
	uint32_t sp, i, r;
	int ret = v ? kvmm_create(&p, &ctx) : -ENOMEM;

	if (!ret)
		ret = space_of(ctx, &sp);
	for (i = 0; !ret && i < EXISTS_KEYS; i++) {
		const void *src = v;

		keys[i] = key_of(7, i);
		ret = kvmm_keyed_put(ctx, sp, &keys[i], &src, 1, NULL) == 1 ? 0 : -ENOSPC;
	}
	for (r = 0; !ret && r < KEYED_ROUNDS; r++) {
		uint64_t t0 = now_ns();

		for (i = 0; !ret && i < EXISTS_CALLS; i++)
			ret = kvmm_keyed_exists(ctx, sp, keys, EXISTS_KEYS, NULL) == EXISTS_KEYS ? 0 : -EIO;
		t[r] = (double)(now_ns() - t0) / 1e3 / EXISTS_CALLS;
	}
	if (!ret) {
		*us = median(t, KEYED_ROUNDS);
		report(o, "exists_128", *us, "us", NULL, 0);
	}
	kvmm_destroy(ctx);
	free(v);
	return ret;
}

/* Run one keyed command on @ring: its result. */
static int32_t ring_cmd(struct kvmm_ring *ring, uint8_t op, uint32_t sp, uint32_t n,
			uint64_t off)
{
	struct kvmm_sqe *sqe;
	int32_t res;
	int ret = ring_sqe(ring, &sqe);

	if (ret)
		return ret;
	kvmm_prep_rw(sqe, op, 0, 0, off, n);
	sqe->arg = sp;
	ret = ring_run(ring, 1, &res);
	return ret ? ret : res;
}

/*
 * Through a ring to a server in another process: put and get of the batch
 * (the values in the ring's data area, after the entries), then KEXISTS.
 */
static int bench_remote(const struct keyed_opts *o, double put_in, double get_in,
			double exists_in)
{
	struct kvmm_params p = keyed_params(2 * o->batch + EXISTS_KEYS);
	uint64_t vb = value_bytes(), ents = 64 * 1024;
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = ents + o->batch * vb };
	/* the in-process figures were taken on a context of the same host tier */
	double put[KEYED_ROUNDS], get[KEYED_ROUNDS], ex[KEYED_ROUNDS];
	uint64_t bytes = (uint64_t)o->batch * vb, t0;
	struct bench_server srv;
	struct kvmm_kspace_reg *reg;
	struct kvmm_ring ring;
	struct kvmm_kent *e;
	struct kvmm_key *k;
	char sock[108];
	int32_t sp = -1;
	uint32_t i, r;
	int ret;

	snprintf(sock, sizeof(sock), "/tmp/kvmm-bench-keyed-%d.sock", (int)getpid());
	if (server_spawn(&srv, &p, sock, KVMM_SERVER_POLL))
		return -ECHILD;
	ret = server_open(&srv) ? -ECHILD : kvmm_ring_connect(sock, &rp, &ring);
	if (ret) {
		server_reap(&srv);
		return ret;
	}
	reg = ring.buf;
	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = vb;
	strcpy(reg->model_id, model_id);
	{
		struct kvmm_sqe *sqe;

		ret = ring_sqe(&ring, &sqe);
		if (!ret) {
			kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
			ret = ring_run(&ring, 1, &sp);
		}
		if (!ret && sp < 0)
			ret = sp;
	}
	prefault((char *)ring.buf + ents, bytes);
	e = ring.buf;
	for (r = 0; !ret && r < KEYED_ROUNDS + 2; r++) {
		uint32_t at = r < 2 ? 0 : r - 2;	/* two warm-up rounds */

		for (i = 0; i < o->batch; i++)
			e[i] = (struct kvmm_kent){ .key = key_of(2000 + r, i), .off = ents + i * vb };
		t0 = now_ns();
		ret = ring_cmd(&ring, KVMM_OP_KPUT, (uint32_t)sp, o->batch, 0) == (int32_t)o->batch ?
		      0 : -ENOSPC;
		put[at] = gbps(bytes, (double)(now_ns() - t0));
		t0 = now_ns();
		if (!ret && ring_cmd(&ring, KVMM_OP_KGET, (uint32_t)sp, o->batch, 0) !=
			    (int32_t)o->batch)
			ret = -EIO;
		get[at] = gbps(bytes, (double)(now_ns() - t0));
	}
	/* KEXISTS of 128 keys, stored first (one value each, a page of the data area) */
	k = ring.buf;
	for (i = 0; !ret && i < EXISTS_KEYS; i++) {
		e[0] = (struct kvmm_kent){ .key = key_of(7, i), .off = ents };
		ret = ring_cmd(&ring, KVMM_OP_KPUT, (uint32_t)sp, 1, 0) == 1 ? 0 : -ENOSPC;
	}
	for (i = 0; i < EXISTS_KEYS; i++)
		k[i] = key_of(7, i);
	for (r = 0; !ret && r < KEYED_ROUNDS; r++) {
		t0 = now_ns();
		for (i = 0; !ret && i < EXISTS_CALLS; i++)
			ret = ring_cmd(&ring, KVMM_OP_KEXISTS, (uint32_t)sp, EXISTS_KEYS, 0) ==
			      EXISTS_KEYS ? 0 : -EIO;
		ex[r] = (double)(now_ns() - t0) / 1e3 / EXISTS_CALLS;
	}
	kvmm_ring_exit(&ring);
	if ((server_close(&srv) | server_reap(&srv)) && !ret)
		ret = -EUCLEAN;		/* the server's kvmm_check() failed */
	if (ret)
		return ret;
	report(o, "remote_put", median(put, KEYED_ROUNDS), "GB/s", "in_process_gbps", put_in);
	report(o, "remote_get", median(get, KEYED_ROUNDS), "GB/s", "in_process_gbps", get_in);
	report(o, "remote_exists", median(ex, KEYED_ROUNDS), "us", "in_process_us", exists_in);
	return 0;
}

static void keyed_usage(void)
{
	fprintf(stderr, "usage: kvmm-bench keyed [--json] [--quick] [--batch N]\n"
		"                        [--nvme-file PATH] [--qd N] [--no-fio]\n");
}

int cmd_keyed(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "batch", required_argument, NULL, 'b' },
		{ "nvme-file", required_argument, NULL, 'f' },
		{ "qd", required_argument, NULL, 'd' },
		{ "no-fio", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct keyed_opts o = { .batch = 64, .qd = 32, .fio = true };
	char file[256];
	double put = 0, get = 0, ex = 0;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'j': o.json = true; break;
		case 'q': o.batch = 16; break;
		case 'b': o.batch = (uint32_t)parse_u64("--batch", optarg); break;
		case 'f': o.nvme_file = optarg; break;
		case 'd': o.qd = (uint32_t)parse_u64("--qd", optarg); break;
		case 'n': o.fio = false; break;
		case 'h': keyed_usage(); return 0;
		default: keyed_usage(); return 2;
		}
	}
	if (optind != argc) {
		keyed_usage();
		return 2;
	}
	if (!o.batch || o.batch > 4096 || !o.qd || o.qd > 4096)
		die_usage("keyed: --batch and --qd are 1 to 4096");
	if (!o.nvme_file) {
		snprintf(file, sizeof(file), "/tmp/kvmm-bench-keyed-%d.nvme", (int)getpid());
		o.nvme_file = file;
	}
	ret = bench_host(&o, &put, &get);
	if (!ret)
		ret = bench_exists_direct(&o, &ex);
	if (!ret)
		ret = bench_nvme(&o);
	if (o.nvme_file == file)
		unlink(file);
	if (!ret)
		ret = bench_remote(&o, put, get, ex);
	if (ret) {
		fprintf(stderr, "keyed: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
