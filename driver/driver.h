/* SPDX-License-Identifier: MIT */
/*
 * driver/driver.h - the driver contract: what the core asks of a backend
 * (the device pool's KV bytes) and of a store (a lower tier's pages).
 *
 * Private to the library and not installed: backends and stores register
 * in driver/backend.c, and an embedder only selects one by name
 * (kvmm_params.backend) and passes it its options (backend_arg).  The core
 * (kvmm/), ipc/share.c, the drivers, the tests and the benchmarks that
 * drive a backend or store directly (kvmm-bench cuda, tiers) include it.
 * A backend owns the KV bytes of a pool; the core never touches them.
 */
#ifndef KVMM_DRIVER_DRIVER_H
#define KVMM_DRIVER_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libkvmm.h>

/**
 * struct kvmm_backend_cfg - what a backend is asked to hold
 * @model: geometry of the KV
 * @page_size: tokens per page
 * @nr_pages: pages in the pool
 * @tier: KVMM_TIER_* of the pool
 * @arg: kvmm_params.backend_arg
 * @err: where init may write a line saying why it failed
 * @err_len: bytes at @err
 * @max_pages: pages the pool may be resized to (at least @nr_pages):
 *	reserve addresses for them, back only @nr_pages
 */
struct kvmm_backend_cfg {
	struct kvmm_model model;
	uint32_t page_size;
	uint32_t nr_pages;
	uint32_t tier;
	void *arg;
	char *err;
	size_t err_len;
	uint32_t max_pages;
};

/**
 * struct kvmm_kv_index_job - a batch's page-table rows, to be turned into
 *	FlashInfer's paged-KV arrays by the backend
 * @table: the page table (struct kvmm_table.base), host memory
 * @table_bytes: its size
 * @stride: entries per row
 * @page_size: tokens per page
 * @rows: each sequence's row (host)
 * @lens: each sequence's tokens (host)
 * @count: sequences
 * @indptr: out (backend memory), @count + 1 entries
 * @indices: out (backend memory), the total pages
 * @last: out (backend memory), @count entries
 * @stream: cuda: the CUstream the build is ordered on (NULL: the
 *	backend's own, and the call waits for it); ignored by mock
 */
struct kvmm_kv_index_job {
	const int32_t *table;
	size_t table_bytes;
	uint32_t stride;
	uint32_t page_size;
	const uint32_t *rows;
	const uint32_t *lens;
	uint32_t count;
	int32_t *indptr;
	int32_t *indices;
	int32_t *last;
	void *stream;
};

/**
 * struct kvmm_backend_ops - a KV pool's storage
 * @name: what kvmm_params.backend selects it by
 * @init: allocate the pool for @cfg; store private state in *@privp
 * @exit: release everything @init took
 * @kv_layer: describe layer @layer of the pool
 * @gather: copy pages @pfns[0..nr) out of the pool, page i to @dst[i]
 *	(host memory, kvmm_page_bytes() each, in the staging layout below;
 *	pages that do not overlap, copied in whatever order is fastest)
 * @scatter: the reverse: @src[i] into page @pfns[i] of the pool (pfns
 *	distinct)
 * @numa_node: the NUMA node nearest the pool's memory, or -1 if unknown
 * @mem_register: optional (with @mem_unregister): make host memory
 *	[@addr, +@len) a place @gather may copy to and @scatter from by
 *	DMA (CUDA: page-locked and mapped; device memory, as staging on
 *	the GPU, is taken as it is); 0 or a negative errno.  The
 *	lower tiers' stores register every such buffer (struct kvmm_dma)
 * @mem_unregister: undo @mem_register of the same range
 * @copy: optional: copy the leading @slots slots of page @src[i] onto page
 *	@dst[i], in every buffer (copy-on-write of a shared partial page)
 * @kv_indices: optional: build FlashInfer's kv_indptr, kv_indices and
 *	kv_last_page_len for a batch (struct kvmm_kv_index_job)
 * @mem_info: optional: the device memory this backend would hold its pool
 *	in, total and free now, before @init (for kvmm_params.mem_fraction
 *	sizing); called with kvmm_params.backend_arg, may write why it
 *	failed to @err
 * @info: optional: one line describing the pool (device, layout, mode)
 * @stream_wait: optional: make the engine's @stream (cuda: a CUstream)
 *	wait for every copy this backend has issued
 * @resize: optional: back pages [0, @nr_pages) of every buffer and no
 *	more than the backend's unit of mapping needs, without moving any
 *	byte of the pages that stay; @nr_pages is at most cfg->max_pages.
 *	Shrinking is asked only for pages the core holds free.  0, or a
 *	negative errno with the mapping as it was
 * @share: optional: describe the pool so another process can map it:
 *	fill @share's nbufs, mapped_pages, max_pages, nr_ext, nr_fds,
 *	granularity and device (the core fills the rest), and set *@ext to
 *	nr_ext extents and *@fds to nr_fds new descriptors (the order of
 *	struct kvmm_share), both from malloc; the caller closes and frees
 *	them.  -EOPNOTSUPP when this pool's memory cannot be exported
 * @import: optional: map a pool another process shared (@share, @ext,
 *	@fds; the descriptors stay the caller's) with the geometry in @cfg
 *	(nr_pages and max_pages as shared, arg the importer's backend_arg);
 *	the state stored in *@privp serves @kv_layer, @info and @exit only
 *
 * Staging layout of one page: for each layer, the page's K slots then
 * its V slots (MLA: its latent slots), slot after slot, as they sit in
 * the pool.  @gather and @scatter return 0 or a negative errno; on error
 * the destination's contents are undefined and nothing else changed.
 * @scatter (a promotion from NVMe) and @gather (background reclaim of the
 * device) may be called from the I/O worker while other calls run under
 * the context lock, on other pages.
 */
struct kvmm_backend_ops {
	const char *name;
	int (*init)(const struct kvmm_backend_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	int (*kv_layer)(void *priv, uint32_t layer, struct kvmm_kv_layer *out);
	int (*gather)(void *priv, const int32_t *pfns, uint32_t nr, void *const *dst);
	int (*scatter)(void *priv, const int32_t *pfns, uint32_t nr,
		       void *const *src);
	int (*numa_node)(void *priv);
	int (*mem_register)(void *priv, void *addr, size_t len);
	void (*mem_unregister)(void *priv, void *addr, size_t len);
	int (*copy)(void *priv, const int32_t *src, const int32_t *dst,
		    uint32_t nr, uint32_t slots);
	int (*kv_indices)(void *priv, const struct kvmm_kv_index_job *job);
	int (*table_map)(void *priv, const int32_t *table, size_t bytes, void **dev);
	int (*mem_info)(void *arg, uint64_t *total, uint64_t *avail, char *err,
			size_t err_len);
	int (*info)(void *priv, char *buf, size_t len);
	int (*stream_wait)(void *priv, void *stream);
	int (*resize)(void *priv, uint32_t nr_pages);
	int (*share)(void *priv, struct kvmm_share *share, struct kvmm_share_ext **ext,
		     int **fds);
	int (*import)(const struct kvmm_backend_cfg *cfg, const struct kvmm_share *share,
		      const struct kvmm_share_ext *ext, const int *fds, void **privp);
};

const struct kvmm_backend_ops *kvmm_backend_lookup(const char *name);
uint64_t kvmm_page_bytes(const struct kvmm_model *model, uint32_t page_size);

/**
 * struct kvmm_dma - how a store makes its memory reachable by the
 *	backend's copies: the backend's mem_register/mem_unregister
 * @reg: register [@addr, +@len) before the backend copies to or from it;
 *	0 or a negative errno (the store then fails what needed it)
 * @unreg: undo @reg of the same range, before the memory is freed
 * @priv: the backend's state, for both
 */
struct kvmm_dma {
	int (*reg)(void *priv, void *addr, size_t len);
	void (*unreg)(void *priv, void *addr, size_t len);
	void *priv;
};

/**
 * struct kvmm_store_cfg - what a lower-tier store is asked to hold
 * @page_bytes: bytes of one page in the staging layout
 * @nr_pages: pages
 * @tier: KVMM_TIER_*
 * @numa_node: node to place the memory on, -1 for no preference
 * @arg: kvmm_params.host_arg or nvme_arg
 * @model: the model geometry (a persistent store refuses another's file)
 * @page_size: tokens per page
 * @path: file or block device of a persistent store
 * @qd: I/O queue depth of a persistent store
 * @err: where init may write a line saying why it failed
 * @err_len: bytes at @err
 * @dma: registration for memory the backend copies to or from (a memory
 *	store's pages, an I/O store's buffers), or NULL when the backend
 *	needs none; valid until the store's exit
 * @model_id: kvmm_params.model_id (a persistent store refuses a file
 *	written under another)
 * @flags: kvmm_params.nvme_flags, for the NVMe store
 */
struct kvmm_store_cfg {
	uint64_t page_bytes;
	uint32_t nr_pages;
	uint32_t tier;
	int32_t numa_node;
	void *arg;
	struct kvmm_model model;
	uint32_t page_size;
	const char *path;
	uint32_t qd;
	char *err;
	size_t err_len;
	const struct kvmm_dma *dma;
	const char *model_id;
	uint32_t flags;
};

/**
 * struct kvmm_store_key - what a page of a persistent store holds
 * @id: the page's identity: XXH3-128, seeded with @ns, of the token ids of
 *	its whole prefix up to and including its own (a keyed value's page:
 *	of its space, key and index, kvmm_keyed_store_keys())
 * @parent: the identity of the page before it; zero for a first page (a
 *	keyed value's page: its key)
 * @ns: namespace of the prefix
 * @tokens: the page's own token ids (page_size of them)
 * @flags: KVMM_STORE_KEY_*
 * @index: a keyed value's page: which of its pages it is
 * @count: ... and how many it has
 * @space: ... and its space's model fingerprint
 * @value_bytes: ... and its space's value size
 *
 * A store records every field and hands them back to recover(); a read
 * checks @id, @parent, @ns, @flags and @tokens.
 */
struct kvmm_store_key {
	uint64_t id[2];
	uint64_t parent[2];
	uint32_t ns;
	const uint32_t *tokens;
	uint32_t flags;
	uint32_t index;
	uint32_t count;
	uint64_t space[2];
	uint64_t value_bytes;
};

#define KVMM_STORE_KEY_KEYED	(1u << 0)	/* a page of a keyed value */

/* Where a read page's bytes go as well (struct kvmm_store_ops.read's @to) */
struct kvmm_store_to {
	void *dst;
	uint64_t len;
};

/**
 * struct kvmm_store_ops - the bytes of a lower tier's pages
 * @name: what selects it
 * @init: set up @cfg->nr_pages pages; store private state in *@privp
 * @exit: release everything @init took
 *
 * A memory store (the host tier) has its pages in addressable memory:
 * @page: the address of page @pfn (kvmm_page_bytes() long)
 * @seal: pages @pfns were just written: record what they must read back as
 * @verify: check pages @pfns against what @seal recorded; return the
 *	number of leading pages that verify (nr when all do)
 * @fill: optional: copy @len bytes (at most a page) from @src into page
 *	@pfn, zero the rest of it, and seal it: what @page, memcpy, memset
 *	and @seal do, in one pass
 * @copy_out: optional: copy the first @len bytes of page @pfn to @dst and
 *	verify the whole page, in one pass: 0, or -EBADMSG (@dst's bytes are
 *	then not to be used)
 * @sum: optional: the checksum @seal recorded for page @pfn (kvmm_csum()
 *	of the page), for a write to an I/O store to check the page against
 *	as it copies it, instead of a @verify pass before
 *
 * An I/O store (the NVMe tier) has them behind reads and writes:
 * @write: write @src[i] as page @pfns[i], labelled @keys[i], on channel
 *	@chan (see @read); 0, or a negative errno after which no page of
 *	the call can be trusted.  With @expect, page i is checked against
 *	@expect[i] (its kvmm_csum()) as it is copied, and one that differs
 *	is not written: the call fails with -EBADMSG
 * @read: read pages @pfns and check them against @keys (identity) and
 *	their checksums; set @dst[i] to page i's bytes, valid until the next
 *	call on channel @chan.  With @to, page i's first @to[i].len bytes are
 *	also copied to @to[i].dst as it lands, while the other reads are in
 *	flight, its checksum taken in the same pass (a page that fails leaves
 *	its @to bytes not to be used).  Return the number of leading pages that read
 *	and verified; a store may stop early at its batch size, with *@err 0;
 *	otherwise *@err says why page [return] failed: -EBADMSG (it does not
 *	verify) or the I/O error.  Channel 0 is called under the context
 *	lock, channel 1 only from the I/O worker (migrate.c), each by one
 *	thread at a time; the two may run at once, on different pages
 * @recover: call @fn for every page found valid on the store at init
 *	(restart), with its key and a write sequence number (higher is newer);
 *	a nonzero return from @fn stops the walk and is returned
 *
 * Every page is checksummed; a page that fails verification is treated as
 * a miss by the core and never served.  @page and @verify may be called
 * from the I/O worker while other calls run under the context lock, on
 * pages of other nodes.
 */
#define KVMM_STORE_CHANS	2
struct kvmm_store_ops {
	const char *name;
	int (*init)(const struct kvmm_store_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	void *(*page)(void *priv, uint32_t pfn);
	void (*seal)(void *priv, const int32_t *pfns, uint32_t nr);
	uint32_t (*verify)(void *priv, const int32_t *pfns, uint32_t nr);
	void (*fill)(void *priv, uint32_t pfn, const void *src, uint64_t len);
	int (*copy_out)(void *priv, uint32_t pfn, void *dst, uint64_t len);
	uint64_t (*sum)(void *priv, uint32_t pfn);
	int (*write)(void *priv, uint32_t chan, const int32_t *pfns, uint32_t nr,
		     void *const *src, const struct kvmm_store_key *keys,
		     const uint64_t *expect);
	uint32_t (*read)(void *priv, uint32_t chan, const int32_t *pfns, uint32_t nr,
			 const struct kvmm_store_key *keys, const struct kvmm_store_to *to,
			 void **dst, int *err);
	int (*recover)(void *priv,
		       int (*fn)(void *arg, uint32_t pfn,
				 const struct kvmm_store_key *key, uint64_t seq),
		       void *arg);
};

const struct kvmm_store_ops *kvmm_store_lookup(uint32_t tier);

/**
 * struct kvmm_remote_cfg - what the remote tier's client is given
 * @seeds: "host:port[,host:port...]", nodes of the cluster to start from
 * @salt: the tenant's salt: nodes share pages only under the same salt
 * @model_id: kvmm_params.model_id: ... and the same model
 * @model: the model geometry (part of the identity too)
 * @page_size: tokens per page
 * @page_bytes: bytes of one page in the staging layout
 * @timeout_ms: every batch's deadline (0: 1000)
 * @user: the ACL user to AUTH as, or NULL (the server's default user)
 * @password: NULL: no AUTH; else the password every connection sends
 *	first (the store keeps a copy, wiped when it exits)
 * @err: where init may write a line saying why it failed
 * @err_len: bytes at @err
 */
struct kvmm_remote_cfg {
	const char *seeds;
	const char *salt;
	const char *model_id;
	struct kvmm_model model;
	uint32_t page_size;
	uint64_t page_bytes;
	uint32_t timeout_ms;
	const char *user;
	const char *password;
	char *err;
	size_t err_len;
};

/**
 * struct kvmm_remote_page - one page of a prefix, as the remote tier
 *	names it
 * @key: its content address, kvmm_remote_ops.chain()'s: the same on every
 *	node for the same salt, model, tokens and parent
 * @parent: the key of the page before it (zero for a first page)
 * @tokens: its token ids (page_size of them); NULL for a page named by
 *	its key alone (a keyed value's: the core derives @key from the value's
 *	key, and the value carries zeros where tokens would be)
 */
struct kvmm_remote_page {
	uint64_t key[2];
	uint64_t parent[2];
	const uint32_t *tokens;
};

/**
 * struct kvmm_remote_stats - the remote tier's counters
 * @probes, @probe_hits: pages probed, and found
 * @gets, @get_hits, @get_bytes: pages asked for, read and verified, bytes
 * @puts, @put_skipped, @put_bytes: pages written, found there already
 *	(not written), bytes written
 * @corrupt: values that did not verify (bad header, identity, checksum,
 *	length, a part missing): a miss, deleted
 * @timeouts: commands a shard did not answer by the deadline
 * @errors: commands failed otherwise (connection, cluster down)
 * @probe_ns, @get_ns, @put_ns: time in those batches, summed
 * @probe_batches, @get_batches, @put_batches: ... and their number
 * @moved, @ask, @connects, @refreshes: the client's redirections,
 *	connections made and slot maps read
 * @stale: idle connections it dropped because the server had sent what
 *	nobody asked for (out of step) or had closed them
 */
struct kvmm_remote_stats {
	uint64_t probes, probe_hits;
	uint64_t gets, get_hits, get_bytes;
	uint64_t puts, put_skipped, put_bytes;
	uint64_t corrupt;
	uint64_t timeouts, errors;
	uint64_t probe_ns, get_ns, put_ns;
	uint64_t probe_batches, get_batches, put_batches;
	uint64_t moved, ask, connects, refreshes;
	uint64_t stale;
};

/**
 * struct kvmm_remote_ops - a remote tier: content-addressed pages in a
 *	distributed store shared by many nodes
 * @name: what selects it
 * @init: connect as @cfg says; store private state in *@privp
 * @exit: release everything @init took
 * @chain: name @nr pages of a prefix: page i's tokens are
 *	@tokens[i * page_size ...], the first one's parent is @parent (zero
 *	for the prefix's first page); fill @out[0..nr)
 * @probe: how many of @pages, from the first, the store holds (one
 *	pipelined batch per shard); with @ok, ok[i] says whether page i is
 *	there, for every page
 * @get: read @pages into @dst[i] (page_bytes each); return how many,
 *	from the first, arrived and verified (header, identity, tokens,
 *	checksum).  A page that does not verify is a miss, is deleted and
 *	counted; the run ends at the first page that fails, and @dst of
 *	pages past it is not to be used, unless @ok says page by page which
 *	ones verified (for pages that are not a prefix: keyed values)
 * @put: write @src[i] as @pages[i], skipping pages the store has; the
 *	number of pages written or found there, or a negative errno when
 *	none could be
 * @drop: delete @pages from the store, best effort
 * @key_name: the store's key of part @part (0, or 1 for a value cut in
 *	two) of page @pg, NUL-terminated in @buf (at least 48 bytes); 0, or
 *	-EINVAL for a part the values do not have (for tools and tests)
 * @stats: copy the counters
 * @hiredis_writes: optional, for the benchmark: format commands with
 *	the client library instead of writing them from the page
 * @cancel: optional: from any thread, end the call in flight and make
 *	every later one a miss at once, waiting on no node (a context's
 *	shutdown, so that a stalled cluster does not hold it)
 *
 * Calls come from one thread at a time (@cancel excepted) and block up
 * to the deadline; the caller holds no lock the engine needs meanwhile.
 */
struct kvmm_remote_ops {
	const char *name;
	int (*init)(const struct kvmm_remote_cfg *cfg, void **privp);
	void (*exit)(void *priv);
	void (*chain)(void *priv, const uint64_t parent[2], const uint32_t *tokens,
		      uint32_t nr, struct kvmm_remote_page *out);
	uint32_t (*probe)(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
			  uint8_t *ok);
	uint32_t (*get)(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
			void *const *dst, uint8_t *ok);
	int (*put)(void *priv, const struct kvmm_remote_page *pages, uint32_t nr,
		   const void *const *src);
	void (*drop)(void *priv, const struct kvmm_remote_page *pages, uint32_t nr);
	int (*key_name)(void *priv, const struct kvmm_remote_page *pg, uint32_t part, char *buf,
			size_t len);
	void (*stats)(void *priv, struct kvmm_remote_stats *out);
	void (*hiredis_writes)(void *priv, bool on);
	void (*cancel)(void *priv);
};

const struct kvmm_remote_ops *kvmm_remote_lookup(const char *name);

#endif /* KVMM_DRIVER_DRIVER_H */
