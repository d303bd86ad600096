// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/tiers.c - kvmm-bench tiers: how fast pages move between
 * tiers, against what the machine itself can do, measured in the same run.
 *
 * Host: the mock backend's gather and scatter of a scattered page set
 * between its pool (per layer K and V buffers, as a device pool is laid
 * out) and the host store's pages, beside one plain memcpy of the same
 * bytes between two contiguous buffers of the same kind of memory, in
 * the same rounds.  The pool holds the set, or --spread times it.  NVMe: the NVMe store writing and
 * reading pages (with its copies into bounce buffers and its checksums),
 * beside fio on the same file, block size (one slot) and queue depth.
 *
 * The geometry is a Llama-3-8B-shaped KV (32 layers, 8 KV heads of 128,
 * bf16: 128 KiB a token), at the page sizes engines use.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "../../driver/backend.h"

#define TIERS_REPEAT	5

struct tiers_opts {
	uint64_t set_bytes;	/* bytes moved per measurement */
	uint32_t spread;	/* host: the pool holds this many times the set */
	const char *nvme_file;
	uint32_t qd;
	bool fio;
	bool json;
};

#define tiers_model bench_model_8b

/* A shuffled 0..n-1: engines move pages scattered over the pool. */
static int32_t *shuffled(uint32_t n)
{
	int32_t *v = malloc(n * sizeof(*v));
	uint64_t x = 88172645463325252ull;
	uint32_t i;

	if (!v)
		return NULL;
	for (i = 0; i < n; i++)
		v[i] = (int32_t)i;
	for (i = n; i > 1; i--) {
		uint32_t j;
		int32_t t;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		j = (uint32_t)(x % i);
		t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
	return v;
}

/* What a store of @nr pages on @tier is asked for, in this geometry. */
static struct kvmm_store_cfg store_cfg(uint32_t tier, uint32_t page_size, uint32_t nr)
{
	return (struct kvmm_store_cfg){
		.page_bytes = kvmm_page_bytes(&tiers_model, page_size), .nr_pages = nr,
		.tier = tier, .numa_node = -1, .model = tiers_model, .page_size = page_size,
	};
}

/* Pages in the measured set: at least one, however large a page is. */
static uint32_t set_pages(const struct tiers_opts *o, uint64_t page_bytes)
{
	uint64_t nr = o->set_bytes / page_bytes;

	return nr ? (uint32_t)nr : 1;
}

/**
 * struct host_rounds - what host_bench() measured, TIERS_REPEAT rounds
 * @g: gather GB/s
 * @s: scatter GB/s
 * @m: memcpy GB/s
 * @gr: gather as a fraction of the same round's memcpy
 * @sr: scatter the same
 */
struct host_rounds {
	double g[TIERS_REPEAT], s[TIERS_REPEAT], m[TIERS_REPEAT];
	double gr[TIERS_REPEAT], sr[TIERS_REPEAT];
};

/*
 * Gather, scatter and memcpy, one after the other in every round, so the
 * machine's noise (it is shared) falls on all three alike; each copy
 * leaves what the next reads out of the cache (the set is far larger).
 */
static int host_measure(const struct kvmm_backend_ops *be, void *bpriv, const int32_t *pfns,
			uint32_t nr, void *const *addr, const struct memcpy_pair *mc,
			struct host_rounds *hr)
{
	unsigned r;
	int ret;

	for (r = 0; r < TIERS_REPEAT; r++) {
		uint64_t t0 = now_ns();

		ret = be->gather(bpriv, pfns, nr, addr);
		hr->g[r] = gbps(mc->bytes, (double)(now_ns() - t0));
		t0 = now_ns();
		ret = ret ?: be->scatter(bpriv, pfns, nr, addr);
		hr->s[r] = gbps(mc->bytes, (double)(now_ns() - t0));
		if (ret)
			return ret;
		hr->m[r] = memcpy_gbps(mc);
		hr->gr[r] = hr->g[r] / hr->m[r];
		hr->sr[r] = hr->s[r] / hr->m[r];
	}
	return 0;
}

static void host_report(const struct tiers_opts *o, uint32_t page_size, uint64_t page_bytes,
			uint32_t nr, uint32_t pool, struct host_rounds *hr)
{
	double g = median(hr->g, TIERS_REPEAT), s = median(hr->s, TIERS_REPEAT);
	double m = median(hr->m, TIERS_REPEAT), gr = median(hr->gr, TIERS_REPEAT);
	double sr = median(hr->sr, TIERS_REPEAT);

	if (!o->json) {
		printf("host  page size %-3u %4u of %5u pages of %7llu B: gather %6.2f GB/s, "
		       "scatter %6.2f GB/s, memcpy %6.2f GB/s (%.2f, %.2f of it)\n",
		       page_size, nr, pool, (unsigned long long)page_bytes, g, s, m, gr, sr);
		return;
	}
	tool_json_line(json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:i}",
		"bench", "tiers", "tier", "host", "page_size", (json_int_t)page_size,
		"page_bytes", (json_int_t)page_bytes, "pages", (json_int_t)nr,
		"pool_pages", (json_int_t)pool,
		"gather_gbps", tool_json_fixed(g, 2), "scatter_gbps", tool_json_fixed(s, 2),
		"memcpy_gbps", tool_json_fixed(m, 2),
		"gather_vs_memcpy", tool_json_fixed(gr, 3),
		"scatter_vs_memcpy", tool_json_fixed(sr, 3), "repeat", TIERS_REPEAT), stdout);
}

/* Prefault the @pool pages' buffers and the store's @nr pages; @addr[i] is page i. */
static void host_prefault(const struct kvmm_backend_ops *be, void *bpriv,
			  const struct kvmm_store_ops *st, void *spriv, uint32_t nr,
			  uint32_t pool, uint32_t page_size, void **addr)
{
	uint64_t page_bytes = kvmm_page_bytes(&tiers_model, page_size);
	struct kvmm_kv_layer kl;
	uint32_t i;

	for (i = 0; be->kv_layer(bpriv, i, &kl) == 0; i++) {
		prefault(kl.k, (size_t)kl.slot_bytes * pool * page_size);
		if (kl.v)
			prefault(kl.v, (size_t)kl.slot_bytes * pool * page_size);
	}
	for (i = 0; i < nr; i++) {
		addr[i] = st->page(spriv, i);
		prefault(addr[i], page_bytes);
	}
}

static int host_bench(const struct tiers_opts *o, uint32_t page_size)
{
	const struct kvmm_backend_ops *be = kvmm_backend_lookup("mock");
	const struct kvmm_store_ops *st = kvmm_store_lookup(KVMM_TIER_HOST);
	uint64_t page_bytes = kvmm_page_bytes(&tiers_model, page_size);
	uint32_t nr = set_pages(o, page_bytes), pool = nr * o->spread;
	struct kvmm_backend_cfg bcfg = { .model = tiers_model, .page_size = page_size,
					 .nr_pages = pool, .tier = KVMM_TIER_DEVICE };
	struct kvmm_store_cfg scfg = store_cfg(KVMM_TIER_HOST, page_size, nr);
	struct memcpy_pair mc = { 0 };
	struct host_rounds hr;
	void *bpriv = NULL, *spriv = NULL, **addr = NULL;
	int32_t *pfns = NULL;
	int ret;

	ret = be->init(&bcfg, &bpriv);
	if (ret)
		goto out;
	ret = st->init(&scfg, &spriv);
	if (ret)
		goto out;
	pfns = shuffled(pool);	/* the set: its first nr */
	addr = malloc(nr * sizeof(*addr));
	ret = -ENOMEM;
	if (!pfns || !addr)
		goto out;
	host_prefault(be, bpriv, st, spriv, nr, pool, page_size, addr);
	ret = memcpy_pair_init(&mc, nr * page_bytes) ?:
	      host_measure(be, bpriv, pfns, nr, addr, &mc, &hr);
	if (!ret)
		host_report(o, page_size, page_bytes, nr, pool, &hr);
out:
	if (ret)
		fprintf(stderr, "tiers: host, page size %u: %s\n", page_size, strerror(-ret));
	memcpy_pair_free(&mc);
	free(addr);
	free(pfns);
	if (spriv)
		st->exit(spriv);
	if (bpriv)
		be->exit(bpriv);
	return ret;
}

/*
 * What nvme_bench() moves: @nr pages of a host store, written to an NVMe
 * store of as many slots and read back, as the tier moves them.
 */
struct nvme_set {
	const struct kvmm_store_ops *host, *nv;
	void *hpriv, *npriv;
	uint32_t page_size, nr;
	uint64_t page_bytes;
	int32_t *pfns;
	void **src, **dst;
	struct kvmm_store_key *keys;
	uint32_t *tokens;
	char why[256];		/* what the NVMe store said when it failed */
};

/* The two stores, and the pages' addresses and keys; nvme_set_exit() undoes it. */
static int nvme_set_init(struct nvme_set *ns, const struct tiers_opts *o)
{
	struct kvmm_store_cfg hcfg = store_cfg(KVMM_TIER_HOST, ns->page_size, ns->nr);
	struct kvmm_store_cfg ncfg = store_cfg(KVMM_TIER_NVME, ns->page_size, ns->nr);
	uint32_t i, ps = ns->page_size;
	int ret;

	ncfg.path = o->nvme_file;
	ncfg.qd = o->qd;
	ncfg.err = ns->why;
	ncfg.err_len = sizeof(ns->why);
	unlink(o->nvme_file);
	ret = ns->host->init(&hcfg, &ns->hpriv) ?: ns->nv->init(&ncfg, &ns->npriv);
	if (ret)
		return ret;
	ns->pfns = malloc(ns->nr * sizeof(*ns->pfns));
	ns->src = malloc(ns->nr * sizeof(*ns->src));
	ns->dst = malloc(ns->nr * sizeof(*ns->dst));
	ns->keys = calloc(ns->nr, sizeof(*ns->keys));
	ns->tokens = calloc((size_t)ns->nr * ps, sizeof(*ns->tokens));
	if (!ns->pfns || !ns->src || !ns->dst || !ns->keys || !ns->tokens)
		return -ENOMEM;
	for (i = 0; i < ns->nr; i++) {
		ns->pfns[i] = (int32_t)i;	/* the slot allocator hands out runs */
		ns->src[i] = ns->host->page(ns->hpriv, i);
		prefault(ns->src[i], ns->page_bytes);
		ns->tokens[i * ps] = i;
		ns->keys[i] = (struct kvmm_store_key){ .id = { i + 1, 0 }, .parent = { i, 0 },
						       .tokens = ns->tokens + (size_t)i * ps };
	}
	return 0;
}

static void nvme_set_exit(struct nvme_set *ns, const struct tiers_opts *o)
{
	free(ns->tokens);
	free(ns->keys);
	free(ns->dst);
	free(ns->src);
	free(ns->pfns);
	if (ns->npriv)
		ns->nv->exit(ns->npriv);
	if (ns->hpriv)
		ns->host->exit(ns->hpriv);
	unlink(o->nvme_file);
}

/* Read every page of @ns back from the NVMe store. */
static int nvme_read_all(struct nvme_set *ns)
{
	uint32_t done, got;
	int err;

	for (done = 0; done < ns->nr; done += got) {
		got = ns->nv->read(ns->npriv, 0, ns->pfns + done, ns->nr - done, ns->keys + done,
				   NULL, ns->dst, &err);
		if (err || !got)
			return err ? err : -EIO;
	}
	return 0;
}

/* Write and read back the whole set TIERS_REPEAT times: the median GB/s of each. */
static int nvme_measure(struct nvme_set *ns, double *wgb, double *rgb)
{
	double w[TIERS_REPEAT], rd[TIERS_REPEAT];
	uint64_t bytes = ns->nr * ns->page_bytes;
	unsigned r;
	int ret;

	for (r = 0; r < TIERS_REPEAT; r++) {
		uint64_t t0 = now_ns();

		ret = ns->nv->write(ns->npriv, 0, ns->pfns, ns->nr, ns->src, ns->keys, NULL);
		w[r] = gbps(bytes, (double)(now_ns() - t0));
		if (ret)
			return ret;
		t0 = now_ns();
		ret = nvme_read_all(ns);
		rd[r] = gbps(bytes, (double)(now_ns() - t0));
		if (ret)
			return ret;
	}
	*wgb = median(w, TIERS_REPEAT);
	*rgb = median(rd, TIERS_REPEAT);
	return 0;
}

/* A slot (header and page, in 4 KiB blocks), from the size of the file the store made. */
static int nvme_slot_bytes(const struct tiers_opts *o, const struct nvme_set *ns,
			   uint64_t *slot_bytes)
{
	struct stat sb;

	if (stat(o->nvme_file, &sb) || (uint64_t)sb.st_size < 4096 + ns->nr * ns->page_bytes)
		return -EIO;
	*slot_bytes = ((uint64_t)sb.st_size - 4096) / ns->nr;
	return 0;
}

/* The NVMe figures of one page size; rates count slot bytes, as fio's do. */
struct nvme_figs {
	uint32_t page_size, pages, qd;
	uint64_t page_bytes, slot_bytes;
	double write_gbps, read_gbps;
	struct fio_result fio_write, fio_read;	/* zero without fio */
};

/* fio on the same file, block size and queue depth; it leaves zeros if it cannot. */
static void nvme_fio(const struct tiers_opts *o, struct nvme_figs *f)
{
	uint64_t bytes = f->pages * f->slot_bytes;

	if (!o->fio || !fio_present())
		return;
	if (run_fio(o->nvme_file, "write", f->slot_bytes, bytes, o->qd, &f->fio_write) ||
	    run_fio(o->nvme_file, "read", f->slot_bytes, bytes, o->qd, &f->fio_read))
		fprintf(stderr, "tiers: fio failed on %s\n", o->nvme_file);
}

static double vs_fio(double kvmm, const struct fio_result *fio)
{
	return fio->gbps > 0 ? kvmm / fio->gbps : 0.0;
}

/* One line of NVMe figures: JSON, or a sentence a person reads. */
static void print_nvme(const struct tiers_opts *o, const struct nvme_figs *f)
{
	double slot = (double)f->slot_bytes;

	if (!o->json) {
		printf("nvme  page size %-3u %4u slots of %7llu B, qd %u: write %.3f GB/s "
		       "(fio %.3f), read %.3f GB/s (fio %.3f)\n",
		       f->page_size, f->pages, (unsigned long long)f->slot_bytes, f->qd,
		       f->write_gbps, f->fio_write.gbps, f->read_gbps, f->fio_read.gbps);
		return;
	}
	tool_json_line(json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
				 "s:o,s:o,s:i}",
		"bench", "tiers", "tier", "nvme", "page_size", (json_int_t)f->page_size,
		"page_bytes", (json_int_t)f->page_bytes, "slot_bytes", (json_int_t)f->slot_bytes,
		"pages", (json_int_t)f->pages, "qd", (json_int_t)f->qd,
		"write_gbps", tool_json_fixed(f->write_gbps, 3),
		"read_gbps", tool_json_fixed(f->read_gbps, 3),
		"write_iops", tool_json_fixed(f->write_gbps * 1e9 / slot, 0),
		"read_iops", tool_json_fixed(f->read_gbps * 1e9 / slot, 0),
		"fio_write_gbps", tool_json_fixed(f->fio_write.gbps, 3),
		"fio_read_gbps", tool_json_fixed(f->fio_read.gbps, 3),
		"fio_write_iops", tool_json_fixed(f->fio_write.iops, 0),
		"fio_read_iops", tool_json_fixed(f->fio_read.iops, 0),
		"write_vs_fio", tool_json_fixed(vs_fio(f->write_gbps, &f->fio_write), 3),
		"read_vs_fio", tool_json_fixed(vs_fio(f->read_gbps, &f->fio_read), 3),
		"repeat", TIERS_REPEAT), stdout);
}

static int nvme_bench(const struct tiers_opts *o, uint32_t page_size)
{
	struct nvme_set ns = {
		.host = kvmm_store_lookup(KVMM_TIER_HOST), .nv = kvmm_store_lookup(KVMM_TIER_NVME),
		.page_size = page_size, .page_bytes = kvmm_page_bytes(&tiers_model, page_size),
	};
	struct nvme_figs f = { .page_size = page_size, .page_bytes = ns.page_bytes,
			       .qd = o->qd ? o->qd : 32 };
	double wgb, rgb;
	int ret;

	if (!ns.nv) {
		fprintf(stderr, "tiers: this build has no NVMe store (liburing)\n");
		return -EOPNOTSUPP;
	}
	ns.nr = f.pages = set_pages(o, ns.page_bytes);
	ret = nvme_set_init(&ns, o) ?: nvme_measure(&ns, &wgb, &rgb) ?:
	      nvme_slot_bytes(o, &ns, &f.slot_bytes);
	if (!ret) {
		nvme_fio(o, &f);
		/* kvmm's rate counts page bytes; fio's counts slot bytes: compare slots */
		f.write_gbps = wgb * (double)f.slot_bytes / (double)ns.page_bytes;
		f.read_gbps = rgb * (double)f.slot_bytes / (double)ns.page_bytes;
		print_nvme(o, &f);
	} else {
		fprintf(stderr, "tiers: nvme, page size %u: %s%s%s\n", page_size,
			strerror(-ret), ns.why[0] ? ": " : "", ns.why);
	}
	nvme_set_exit(&ns, o);
	return ret;
}

static void tiers_usage(void)
{
	fprintf(stderr,
		"usage: kvmm-bench tiers [--json] [--quick] [--set-mib N] [--spread N]\n"
		"                        [--nvme-file PATH] [--qd N] [--no-fio]\n");
}

int cmd_tiers(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "set-mib", required_argument, NULL, 's' },
		{ "spread", required_argument, NULL, 'x' },
		{ "nvme-file", required_argument, NULL, 'f' },
		{ "qd", required_argument, NULL, 'd' },
		{ "no-fio", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const uint32_t page_sizes[] = { 1, 16, 64 };
	struct tiers_opts o = { .set_bytes = 256ull << 20, .nvme_file = "kvmm-tiers.nvme",
				.qd = 32, .fio = true, .spread = 1 };
	unsigned i;
	int c, ret = 0;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'j': o.json = true; break;
		case 'q': o.set_bytes = 32ull << 20; break;
		case 's': o.set_bytes = parse_u64("--set-mib", optarg) << 20; break;
		case 'x': o.spread = (uint32_t)parse_u64("--spread", optarg); break;
		case 'f': o.nvme_file = optarg; break;
		case 'd': o.qd = (uint32_t)parse_u64("--qd", optarg); break;
		case 'n': o.fio = false; break;
		case 'h': tiers_usage(); return 0;
		default: tiers_usage(); return 2;
		}
	}
	if (!o.set_bytes || !o.qd || o.qd > 4096 || !o.spread || o.spread > 64)
		die_usage("tiers: --set-mib, --spread (at most 64) and --qd (at most 4096) "
			  "must be positive");
	if (o.fio && !fio_present())
		fprintf(stderr, "tiers: fio not found (apt-get install fio): NVMe without "
				"its baseline\n");
	for (i = 0; i < sizeof(page_sizes) / sizeof(page_sizes[0]); i++)
		ret |= host_bench(&o, page_sizes[i]);
	for (i = 0; i < sizeof(page_sizes) / sizeof(page_sizes[0]); i++)
		ret |= nvme_bench(&o, page_sizes[i]);
	return ret ? 1 : 0;
}
