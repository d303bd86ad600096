// SPDX-License-Identifier: MIT
/*
 * tools/kvmmd/kvmmd.c - kvmmd: own a kvmm context and serve command rings
 * to engines and admin tools in other processes over a Unix socket.
 *
 *   kvmmd --socket PATH [options]       (see kvmmd(8), or --help)
 *
 * Runs in the foreground with its log on stderr, which is what a
 * systemd service (Type=simple) or a container wants.  SIGINT and SIGTERM
 * stop it cleanly: every client's ring is released, the socket removed.
 *
 * Options are a table (kvmmd_opts[]); checks that involve several options
 * run once all are read, so their order never matters.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

#include "../lib/parse.h"
#include "http.h"
#include "publish.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmmd --socket PATH [options]\n"
		"  --socket PATH        Unix socket to serve (required)\n"
		"  --config FILE        read options from FILE: one 'name value' per line, '#' comments\n"
		"  --page-size N        tokens per page (power of two; default 16)\n"
		"  --pages N            pages in the pool (default 65536) ...\n"
		"  --mem-avail BYTES    ... or size it from free memory (with --mem-total, --mem-fraction)\n"
		"  --mem-total BYTES    total device memory (BYTES: a number, or with K, M, G, T)\n"
		"  --mem-fraction F     SGLang's mem_fraction_static (default 0.88)\n"
		"  --max-pages N        pages the pool may be resized to at run time\n"
		"                       (kvmmctl set nr_pages; default: its size, fixed)\n"
		"  --backend mock|cuda  where the KV lives (default mock: host memory)\n"
		"  --cuda-device N      the GPU of the cuda backend (default 0)\n"
		"  --layers N --kv-heads N --head-dim N --dtype-bytes N   MHA geometry (default 32 8 128 2)\n"
		"  --mla-dim N          MLA latent width instead of heads and head dim\n"
		"  --max-seqs N         page-table rows (default 1024)\n"
		"  --max-seq-len N      tokens per sequence (default 32768)\n"
		"  --wmark-min N --wmark-low N --wmark-high N   watermarks in pages (default 0)\n"
		"  --evict lru|slru     eviction policy (default lru)\n"
		"  --host-pages N       a host tier of N pages: reclaim demotes there (default 0: none)\n"
		"  --host-node N|nearest  its NUMA node (default nearest the device)\n"
		"  --nvme-file PATH     an NVMe tier below the host tier, in this file or block device;\n"
		"                       a kvmm file of the same geometry and model is recovered (restart)\n"
		"  --nvme-pages N       pages of the NVMe tier\n"
		"  --nvme-qd N          its io_uring queue depth (default 32)\n"
		"  --host-wmark-low N --host-wmark-high N   with an NVMe tier, background reclaim\n"
		"                       writes the oldest host pages down while fewer than low are\n"
		"                       free, until high are (default 1/8 and 1/4 of the host tier)\n"
		"  --model-id STR       the model whose KV this is (name and revision): the NVMe\n"
		"                       file records it and refuses to serve it to another model\n"
		"  --nvme-reformat      format the NVMe file afresh (a cold start), even one of\n"
		"                       another model or geometry or with a damaged superblock\n"
		"  --shutdown-flush-ms MS  on SIGTERM or SIGINT, write every cached page not on\n"
		"                       NVMe to its file for at most MS, so that a restart finds\n"
		"                       the whole cache (default 5000; 0: no flush)\n"
		"  --remote HOST:PORT[,...]  a Redis Cluster (or Valkey) below the host tier, shared\n"
		"                       with other machines: keyed values are written through to it\n"
		"                       and read from it when this machine has them not (needs\n"
		"                       --host-pages; see Documentation/admin-guide/remote.rst)\n"
		"  --remote-salt STR    the deployment's salt: pages are shared only under the same\n"
		"                       salt and --model-id, within one namespace (default empty)\n"
		"  --remote-timeout-ms MS  the deadline of every batch to the cluster (default 1000)\n"
		"  --remote-user NAME   the ACL user to AUTH as (with --remote-password-file)\n"
		"  --remote-password-file PATH  AUTH with the password on PATH's first line (a\n"
		"                       file only its owner may read)\n"
		"  --remote-write none|commit|demote  when prefix pages go to the cluster on their\n"
		"                       own: only when a client pushes them (RPUSH; default),\n"
		"                       after every commit, or as they leave the host tier\n"
		"  --write-policy write-back|write-through   copy KV to the host tier when\n"
		"                       reclaim demotes it (default), or when it is committed\n"
		"  --poll               serve every ring in polling mode (one core polls, 2 ms at most)\n"
		"  --ns-per-uid         bind each client that is not root to the namespace of its uid\n"
		"  --ns-pin-pages N|auto  pages a bound namespace may pin (default auto: half the pool)\n"
		"  --ns-kspaces N       keyed spaces one namespace may hold, also at recovery\n"
		"                       (0..1024, default 64)\n"
		"  --events BYTES       record cache events for routers in a buffer of BYTES\n"
		"                       (kvmmctl events; 8 KiB .. 1 GiB; default 0: off)\n"
		"  --ns-cache-share PCT   percent of the pool a namespace may cache before its own\n"
		"                       cache is reclaimed first (1..100, default 100: no share)\n"
		"  --keyed-share PCT    percent of the host and NVMe tiers the keyed page store's\n"
		"                       values may hold, the rest the prefix tree's, before the\n"
		"                       kind over its part is reclaimed first (1..100, default\n"
		"                       100: no split)\n"
		"  --ns-kjob-bytes N    memory the keyed commands (KPUT, KGET) of one namespace\n"
		"                       may make kvmmd hold at once; past it they get EDQUOT\n"
		"                       (4096 .. 2^40, default 64 MiB)\n"
		"  --max-clients N      clients attached at once (default 256)\n"
		"  --max-pending N      handshakes in progress, apart from them (default 64, up to 1024)\n"
		"  --handshake-ms MS    a whole hello must arrive within MS (default 5000)\n"
		"  --send-ms MS         a client must read a welcome or share answer within MS\n"
		"                       (default 5000)\n"
		"  --kv-events ENDPOINT publish cache events as vLLM's KV events (msgpack over a\n"
		"                       ZMQ PUB socket bound at ENDPOINT, tcp://HOST:PORT or ipc://PATH)\n"
		"  --kv-events-replay ENDPOINT  a ZMQ ROUTER socket that replays missed messages\n"
		"  --kv-events-topic STR  topic prefix: namespace N on 'STR/ns/N/' (default kvmm)\n"
		"  --kv-events-hash sha256_cbor|xxhash_cbor  block hashes as vLLM's\n"
		"                       prefix_caching_hash_algo (default sha256_cbor)\n"
		"  --kv-events-seed STR NONE_HASH's seed, the routers' PYTHONHASHSEED\n"
		"                       (default: vLLM's, 'vllm-none-hash')\n"
		"  --kv-events-buffer-steps N  messages kept for replay (default 10000)\n"
		"  --metrics HOST:PORT  serve Prometheus metrics (GET /metrics) and the prefix\n"
		"                       query (POST /v1/prefix) over HTTP at HOST:PORT\n"
		"  --query-socket PATH  the prefix query on a Unix socket too, where tenants\n"
		"                       (--ns-per-uid) ask about their own namespace\n"
		"  --quiet              log only errors\n");
}

/* What the command line and config file build. */
struct opts {
	struct kvmm_params p;
	struct kvmm_cuda_arg cuda;
	struct kvmm_mock_arg mock;
	char *socket;			/* the strings are owned: opts_free() */
	char *evict;
	char *nvme_path;
	char *backend;
	char *model_id;
	char *remote;
	char *remote_salt;
	char *remote_user;
	char *remote_password;		/* read from --remote-password-file */
	uint32_t server_flags;
	int quiet;
	uint64_t given;			/* bits of kvmmd_opts[] given */
	uint64_t ns_pin_pages;		/* KVMM_SET_NS_PIN_PAGES */
	uint64_t ns_cache_share;	/* KVMM_SET_NS_CACHE_SHARE */
	uint64_t keyed_share;		/* KVMM_SET_KEYED_SHARE */
	uint64_t events;		/* KVMM_SET_EVENTS */
	uint64_t ns_kspaces;		/* KVMM_SET_NS_KSPACES */
	uint64_t ns_kjob_bytes;		/* KVMM_SET_NS_KJOB_BYTES */
	uint64_t shutdown_flush_ms;	/* kvmm_flush() at a stop; 0: none */
	struct kvmmd_pub_opts pub;	/* --kv-events* */
	struct kvmmd_http_opts http;	/* --metrics, --query-socket */
	struct kvmm_server_limits lim;	/* 0: the server's default */
};

/*
 * One option: its name, whether it takes a value, and how the value is
 * stored.  A number option names its field (@off into struct opts) and
 * the largest value it holds (@max); a flag option's @max is the server
 * flag it sets; a choice option's values are @names (NULL-terminated),
 * the index of the one given stored as a uint32_t at @off; others have
 * their own @set.  Appending an option is one line here (and a small
 * function when it is none of those).
 */
struct kvmmd_opt {
	const char *name;
	int has_arg;
	int (*set)(struct opts *o, const struct kvmmd_opt *d, const char *val);
	size_t off;
	uint64_t max;
	const char *const *names;
};

#define P(field)	offsetof(struct opts, p.field)
#define L(field)	offsetof(struct opts, lim.field)

static int set_u32(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_u64(struct opts *o, const struct kvmmd_opt *d, const char *val);
/* A byte count: a number, then nothing or K, M, G or T (powers of 1024). */
static int set_bytes(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	int ret = parse_bytes(val, d->max, (uint64_t *)((char *)o + d->off));

	if (ret)
		fprintf(stderr, "kvmmd: --%s: '%s' %s (bytes, with K, M, G or T: 0 to %llu)\n",
			d->name, val, ret == -ERANGE ? "is out of range" : "is not a size",
			(unsigned long long)d->max);
	return ret ? -1 : 0;
}

static int set_i32(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_str(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_config(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_help(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_mem_fraction(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_bytes(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_mla(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_evict(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_flag(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_host_node(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_backend(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_choice(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_ns_pin_pages(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_percent(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_model_id(struct opts *o, const struct kvmmd_opt *d, const char *val);
static int set_secret_file(struct opts *o, const struct kvmmd_opt *d, const char *val);

enum { O_SOCKET, O_CONFIG, O_HELP, O_PAGE_SIZE, O_PAGES, O_MEM_AVAIL, O_MEM_TOTAL,
       O_MEM_FRAC, O_LAYERS, O_KV_HEADS, O_HEAD_DIM, O_DTYPE, O_MLA, O_MAX_SEQS,
       O_MAX_LEN, O_WMIN, O_WLOW, O_WHIGH, O_EVICT, O_POLL, O_QUIET, O_NS_UID,
       O_HOST_PAGES, O_HOST_NODE, O_NVME_FILE, O_NVME_PAGES, O_NVME_QD, O_WRITE_POLICY,
       O_MAX_PAGES, O_BACKEND, O_CUDA_DEVICE, O_NS_PIN_PAGES, O_NS_CACHE_SHARE,
       O_MODEL_ID, O_NVME_REFORMAT, O_MAX_CLIENTS, O_MAX_PENDING, O_HANDSHAKE_MS,
       O_SEND_MS, O_HOST_WLOW, O_HOST_WHIGH, O_KEYED_SHARE, O_REMOTE, O_REMOTE_SALT,
       O_REMOTE_TIMEOUT, O_EVENTS, O_REMOTE_WRITE, O_REMOTE_USER, O_REMOTE_PASSWORD_FILE,
       O_NS_KSPACES, O_NS_KJOB_BYTES, O_SHUTDOWN_FLUSH_MS, O_KV_EVENTS, O_KV_REPLAY,
       O_KV_TOPIC, O_KV_HASH, O_KV_SEED, O_KV_STEPS, O_METRICS, O_QUERY_SOCKET, NR_OPTS };

#define OPT_VAL	256		/* getopt's value of option 0 */

/* Choice options' values, at the index of the library's value. */
static const char *const write_policies[] = { "write-back", "write-through", NULL };
static const char *const remote_writes[] = { "none", "commit", "demote", NULL };
/* as enum kvev_hash */
static const char *const kv_hashes[] = { "sha256_cbor", "xxhash_cbor", NULL };

#define REQ	required_argument
#define NONE	no_argument
static const struct kvmmd_opt kvmmd_opts[NR_OPTS] = {
	[O_SOCKET] = { "socket", REQ, set_str, offsetof(struct opts, socket) },
	[O_CONFIG] = { "config", REQ, set_config },
	[O_HELP] = { "help", NONE, set_help },
	[O_PAGE_SIZE] = { "page-size", REQ, set_u32, P(page_size), UINT32_MAX },
	[O_PAGES] = { "pages", REQ, set_u32, P(nr_pages), UINT32_MAX },
	[O_MEM_AVAIL] = { "mem-avail", REQ, set_bytes, P(mem_avail), UINT64_MAX },
	[O_MEM_TOTAL] = { "mem-total", REQ, set_bytes, P(mem_total), UINT64_MAX },
	[O_MEM_FRAC] = { "mem-fraction", REQ, set_mem_fraction },
	[O_LAYERS] = { "layers", REQ, set_u32, P(model.layers), UINT32_MAX },
	[O_KV_HEADS] = { "kv-heads", REQ, set_u32, P(model.kv_heads), UINT32_MAX },
	[O_HEAD_DIM] = { "head-dim", REQ, set_u32, P(model.head_dim), UINT32_MAX },
	[O_DTYPE] = { "dtype-bytes", REQ, set_u32, P(model.dtype_bytes), UINT32_MAX },
	[O_MLA] = { "mla-dim", REQ, set_mla, P(model.latent_dim), UINT32_MAX },
	[O_MAX_SEQS] = { "max-seqs", REQ, set_u32, P(max_seqs), UINT32_MAX },
	[O_MAX_LEN] = { "max-seq-len", REQ, set_u32, P(max_seq_len), UINT32_MAX },
	[O_WMIN] = { "wmark-min", REQ, set_u32, P(wmark_min), UINT32_MAX },
	[O_WLOW] = { "wmark-low", REQ, set_u32, P(wmark_low), UINT32_MAX },
	[O_WHIGH] = { "wmark-high", REQ, set_u32, P(wmark_high), UINT32_MAX },
	[O_EVICT] = { "evict", REQ, set_evict, offsetof(struct opts, evict) },
	[O_POLL] = { "poll", NONE, set_flag, 0, KVMM_SERVER_POLL },
	[O_QUIET] = { "quiet", NONE, set_flag },
	[O_NS_UID] = { "ns-per-uid", NONE, set_flag, 0, KVMM_SERVER_NS_UID },
	[O_HOST_PAGES] = { "host-pages", REQ, set_u32, P(host_pages), UINT32_MAX },
	[O_HOST_WLOW] = { "host-wmark-low", REQ, set_u32, P(host_wmark_low), UINT32_MAX },
	[O_HOST_WHIGH] = { "host-wmark-high", REQ, set_u32, P(host_wmark_high), UINT32_MAX },
	[O_HOST_NODE] = { "host-node", REQ, set_host_node, P(host_node), INT32_MAX },
	[O_NVME_FILE] = { "nvme-file", REQ, set_str, offsetof(struct opts, nvme_path) },
	[O_NVME_PAGES] = { "nvme-pages", REQ, set_u32, P(nvme_pages), UINT32_MAX },
	[O_NVME_QD] = { "nvme-qd", REQ, set_u32, P(nvme_qd), UINT32_MAX },
	[O_WRITE_POLICY] = { "write-policy", REQ, set_choice, P(write_policy), 0,
			     write_policies },
	[O_MAX_PAGES] = { "max-pages", REQ, set_u32, P(max_pages), UINT32_MAX },
	[O_BACKEND] = { "backend", REQ, set_backend, offsetof(struct opts, backend) },
	[O_CUDA_DEVICE] = { "cuda-device", REQ, set_i32, offsetof(struct opts, cuda.device),
			    INT32_MAX },
	[O_NS_PIN_PAGES] = { "ns-pin-pages", REQ, set_ns_pin_pages,
			     offsetof(struct opts, ns_pin_pages), UINT32_MAX },
	[O_NS_CACHE_SHARE] = { "ns-cache-share", REQ, set_percent,
			       offsetof(struct opts, ns_cache_share), 100 },
	[O_KEYED_SHARE] = { "keyed-share", REQ, set_percent,
			    offsetof(struct opts, keyed_share), 100 },
	[O_EVENTS] = { "events", REQ, set_bytes, offsetof(struct opts, events),
		       KVMM_EVENTS_BUF_MAX },
	[O_NS_KSPACES] = { "ns-kspaces", REQ, set_u64, offsetof(struct opts, ns_kspaces),
			   KVMM_KSPACES_MAX },
	[O_NS_KJOB_BYTES] = { "ns-kjob-bytes", REQ, set_bytes, offsetof(struct opts, ns_kjob_bytes),
			      1ull << 40 },
	[O_MODEL_ID] = { "model-id", REQ, set_model_id, offsetof(struct opts, model_id) },
	[O_NVME_REFORMAT] = { "nvme-reformat", NONE, set_flag },
	[O_SHUTDOWN_FLUSH_MS] = { "shutdown-flush-ms", REQ, set_u64,
				  offsetof(struct opts, shutdown_flush_ms), UINT32_MAX },
	[O_MAX_CLIENTS] = { "max-clients", REQ, set_u32, L(max_clients), UINT32_MAX },
	[O_MAX_PENDING] = { "max-pending", REQ, set_u32, L(max_pending), 1024 },
	[O_HANDSHAKE_MS] = { "handshake-ms", REQ, set_u32, L(handshake_ms), UINT32_MAX },
	[O_SEND_MS] = { "send-ms", REQ, set_u32, L(send_ms), UINT32_MAX },
	[O_REMOTE] = { "remote", REQ, set_str, offsetof(struct opts, remote) },
	[O_REMOTE_SALT] = { "remote-salt", REQ, set_str, offsetof(struct opts, remote_salt) },
	[O_REMOTE_TIMEOUT] = { "remote-timeout-ms", REQ, set_u32, P(remote_timeout_ms), 600000 },
	[O_REMOTE_WRITE] = { "remote-write", REQ, set_choice, P(remote_write), 0, remote_writes },
	[O_REMOTE_USER] = { "remote-user", REQ, set_str, offsetof(struct opts, remote_user) },
	[O_REMOTE_PASSWORD_FILE] = { "remote-password-file", REQ, set_secret_file,
				     offsetof(struct opts, remote_password) },
	[O_KV_EVENTS] = { "kv-events", REQ, set_str, offsetof(struct opts, pub.endpoint) },
	[O_KV_REPLAY] = { "kv-events-replay", REQ, set_str, offsetof(struct opts, pub.replay) },
	[O_KV_TOPIC] = { "kv-events-topic", REQ, set_str, offsetof(struct opts, pub.topic) },
	[O_KV_HASH] = { "kv-events-hash", REQ, set_choice, offsetof(struct opts, pub.hash), 0,
			kv_hashes },
	[O_KV_SEED] = { "kv-events-seed", REQ, set_str, offsetof(struct opts, pub.seed) },
	[O_KV_STEPS] = { "kv-events-buffer-steps", REQ, set_u32,
			 offsetof(struct opts, pub.buffer_steps), 1u << 24 },
	[O_METRICS] = { "metrics", REQ, set_str, offsetof(struct opts, http.listen) },
	[O_QUERY_SOCKET] = { "query-socket", REQ, set_str, offsetof(struct opts, http.query_socket) },
};

/* A number within the option's range, or a message naming it. */
static int get_num(const struct kvmmd_opt *d, const char *val, uint64_t *v)
{
	int ret = parse_uint(val, d->max, v);

	if (ret)
		fprintf(stderr, "kvmmd: --%s: '%s' %s (0 to %llu)\n", d->name, val,
			parse_strerror(ret), (unsigned long long)d->max);
	return ret;
}

static int set_u32(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	uint64_t v;

	if (get_num(d, val, &v))
		return -1;
	*(uint32_t *)((char *)o + d->off) = (uint32_t)v;
	return 0;
}

static int set_u64(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	return get_num(d, val, (uint64_t *)((char *)o + d->off)) ? -1 : 0;
}

static int set_i32(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	uint64_t v;

	if (get_num(d, val, &v))
		return -1;
	*(int32_t *)((char *)o + d->off) = (int32_t)v;
	return 0;
}

/* A string option: the last one given wins; kvmmd owns the copy. */
static int set_str(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	char **dst = (char **)((char *)o + d->off);
	char *s;

	if (!*val) {
		fprintf(stderr, "kvmmd: --%s: the value is empty\n", d->name);
		return -1;
	}
	s = strdup(val);
	if (!s) {
		fprintf(stderr, "kvmmd: out of memory\n");
		return -1;
	}
	free(*dst);
	*dst = s;
	return 0;
}

static int set_help(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	return 0;
}

static int set_mem_fraction(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	double f;

	if (parse_real(val, 0.0, 1.0, &f) || f == 0.0) {
		fprintf(stderr, "kvmmd: --%s: '%s' is not a fraction in (0, 1]\n", d->name, val);
		return -1;
	}
	o->p.mem_fraction = f;
	return 0;
}

static int set_mla(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (set_u32(o, d, val))
		return -1;
	o->p.model.attn = KVMM_ATTN_MLA;
	return 0;
}

static int set_evict(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (strcmp(val, "lru") && strcmp(val, "slru")) {
		fprintf(stderr, "kvmmd: --%s: '%s' is not lru or slru\n", d->name, val);
		return -1;
	}
	return set_str(o, d, val);
}

static int set_flag(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (d == &kvmmd_opts[O_QUIET])
		o->quiet = 1;
	if (d == &kvmmd_opts[O_NVME_REFORMAT])
		o->p.nvme_flags |= KVMM_NVME_REFORMAT;
	o->server_flags |= (uint32_t)d->max;
	return 0;
}

static int set_host_node(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (!strcmp(val, "nearest")) {
		o->p.host_node = KVMM_NODE_NEAREST;
		return 0;
	}
	return set_i32(o, d, val);
}

static int set_backend(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (!kvmm_backend_available(val)) {
		fprintf(stderr, "kvmmd: --%s: no backend '%s' in this build\n", d->name, val);
		return -1;
	}
	return set_str(o, d, val);
}

static int set_choice(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	uint32_t i;

	for (i = 0; d->names[i]; i++) {
		if (!strcmp(val, d->names[i])) {
			*(uint32_t *)((char *)o + d->off) = i;
			return 0;
		}
	}
	fprintf(stderr, "kvmmd: --%s: '%s' is not one of:", d->name, val);
	for (i = 0; d->names[i]; i++)
		fprintf(stderr, " %s", d->names[i]);
	fputc('\n', stderr);
	return -1;
}

/*
 * A secret from a file (its first line), never from the command line,
 * where every user's ps(1) shows it.  A file that others than its owner
 * may read is refused: the secret is out already.
 */
static int set_secret_file(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	char **dst = (char **)((char *)o + d->off), *line = NULL;
	size_t cap = 0;
	struct stat st;
	ssize_t n;
	FILE *f = fopen(val, "re");

	if (!f || fstat(fileno(f), &st)) {
		fprintf(stderr, "kvmmd: --%s: %s: %s\n", d->name, val, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	if (st.st_mode & 077) {
		fprintf(stderr, "kvmmd: --%s: %s may be read by others than its owner "
			"(mode %03o): chmod 600 it\n", d->name, val, (unsigned)(st.st_mode & 0777));
		fclose(f);
		return -1;
	}
	n = getline(&line, &cap, f);
	fclose(f);
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	if (n <= 0) {
		fprintf(stderr, "kvmmd: --%s: %s: no secret on its first line\n", d->name, val);
		free(line);
		return -1;
	}
	if (*dst) {
		explicit_bzero(*dst, strlen(*dst));
		free(*dst);
	}
	*dst = line;
	return 0;
}

static int set_model_id(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (strlen(val) > KVMM_MODEL_ID_MAX) {
		fprintf(stderr, "kvmmd: --%s: '%.20s...' is longer than %u bytes\n", d->name, val,
			KVMM_MODEL_ID_MAX);
		return -1;
	}
	return set_str(o, d, val);
}

static int set_ns_pin_pages(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	if (!strcmp(val, "auto")) {
		o->ns_pin_pages = KVMM_NS_PIN_AUTO;
		return 0;
	}
	return set_u64(o, d, val);
}

static int set_percent(struct opts *o, const struct kvmmd_opt *d, const char *val)
{
	uint64_t v;

	if (get_num(d, val, &v))
		return -1;
	if (!v) {
		fprintf(stderr, "kvmmd: --%s: '%s' is not a percentage in 1..%llu\n", d->name,
			val, (unsigned long long)d->max);
		return -1;
	}
	*(uint64_t *)((char *)o + d->off) = v;
	return 0;
}

/* The tenants' limits, set as kvmmctl set would (the values are checked). */
static int set_ns_limits(struct kvmm_ctx *ctx, const struct opts *o)
{
	const struct { uint32_t key; uint64_t val; } sets[] = {
		{ KVMM_SET_NS_PIN_PAGES, o->ns_pin_pages },
		{ KVMM_SET_NS_CACHE_SHARE, o->ns_cache_share },
		{ KVMM_SET_KEYED_SHARE, o->keyed_share },
		{ KVMM_SET_NS_KSPACES, o->ns_kspaces },
		{ KVMM_SET_NS_KJOB_BYTES, o->ns_kjob_bytes },
		/* first: it sets the minimum; the publisher's setting (kvev_thread_start()) */
		{ KVMM_SET_EVENT_TOKENS, o->pub.endpoint ? KVMM_EVENT_TOKENS_STORED : 0 },
		{ KVMM_SET_EVENTS, o->events },
	};
	size_t i;
	int ret = 0;

	for (i = 0; !ret && i < sizeof(sets) / sizeof(sets[0]); i++) {
		struct kvmm_sqe set = { .opcode = KVMM_OP_SET, .arg = sets[i].key,
					.arg2 = sets[i].val };

		ret = kvmm_ioctl(ctx, &set, NULL, 0);
	}
	return ret;
}

static int apply(struct opts *o, int id, const char *val)
{
	if (kvmmd_opts[id].set(o, &kvmmd_opts[id], val))
		return -1;
	o->given |= 1ull << id;
	return 0;
}

/*
 * Split a config line into its words (at most @max, NUL-terminated in
 * place); a '#' starts a comment.  Return: the number of words, or
 * @max + 1 when there are more.
 */
static int split_words(char *line, char **w, int max)
{
	int n = 0;
	char *save, *t;

	line[strcspn(line, "#")] = '\0';
	for (t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
		if (n == max)
			return max + 1;
		w[n++] = t;
	}
	return n;
}

/* One "name [value]" line of a config file. */
static int config_line(struct opts *o, const char *path, unsigned lineno, char *line)
{
	const struct kvmmd_opt *d;
	char *w[3];
	int n = split_words(line, w, 2), id;

	if (!n)
		return 0;
	for (id = 0; id < NR_OPTS && strcmp(kvmmd_opts[id].name, w[0]); id++)
		;
	d = &kvmmd_opts[id];
	if (id == NR_OPTS || id == O_CONFIG || id == O_HELP) {
		fprintf(stderr, "kvmmd: %s:%u: unknown option '%s'\n", path, lineno, w[0]);
		return -1;
	}
	if (d->has_arg && n < 2) {
		fprintf(stderr, "kvmmd: %s:%u: '%s' needs a value\n", path, lineno, w[0]);
		return -1;
	}
	if (n > (d->has_arg ? 2 : 1)) {
		fprintf(stderr, "kvmmd: %s:%u: '%s' takes %s; trailing words on the line\n",
			path, lineno, w[0], d->has_arg ? "one value" : "no value");
		return -1;
	}
	return apply(o, id, d->has_arg ? w[1] : NULL);
}

/* A config file: "name value" lines with the long option names, '#' comments. */
static int set_config(struct opts *o, const struct kvmmd_opt *d, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	unsigned lineno = 0;
	int ret = 0;

	if (!f) {
		fprintf(stderr, "kvmmd: %s: %s\n", path, errno_str(errno));
		return -1;
	}
	while (!ret && fgets(line, sizeof(line), f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fprintf(stderr, "kvmmd: %s:%u: line longer than %zu bytes\n", path,
				lineno, sizeof(line) - 2);
			ret = -1;
		} else {
			ret = config_line(o, path, lineno, line);
		}
	}
	fclose(f);
	return ret;
}

/* --kv-events and its companions: a build that has them, a buffer big enough. */
static int check_kv_events(struct opts *o)
{
	const uint64_t companions = (1ull << O_KV_REPLAY) | (1ull << O_KV_TOPIC) |
		(1ull << O_KV_HASH) | (1ull << O_KV_SEED) | (1ull << O_KV_STEPS);

	if (!o->pub.endpoint) {
		if (o->given & companions) {
			fprintf(stderr, "kvmmd: the --kv-events-* options need --kv-events\n");
			return -1;
		}
		return 0;
	}
	if (!kvmmd_pub_built()) {
		fprintf(stderr, "kvmmd: --kv-events: this kvmmd was built without libzmq, "
			"msgpack-c or libcrypto (install libzmq3-dev libmsgpack-dev libssl-dev "
			"and rebuild)\n");
		return -1;
	}
	if (!o->events)
		o->events = 64u << 20;	/* seconds of a busy engine, tokens and all */
	if (o->events < KVMM_EVENTS_TOKENS_BUF_MIN) {
		fprintf(stderr, "kvmmd: --kv-events needs --events of %u bytes at least "
			"(the events keep their token ids)\n", KVMM_EVENTS_TOKENS_BUF_MIN);
		return -1;
	}
	if ((o->given & (1ull << O_KV_STEPS)) && !o->pub.buffer_steps) {
		fprintf(stderr, "kvmmd: --kv-events-buffer-steps must be 1 or more\n");
		return -1;
	}
	o->pub.interval_ms = 2;
	/* the prefix query (either listener) looks blocks up by vLLM hash */
	o->pub.index_hashes = o->http.listen || o->http.query_socket;
	o->pub.quiet = o->quiet;
	return 0;
}

/* --metrics, --query-socket: a build that has them. */
static int check_http(struct opts *o)
{
	if (!o->http.listen && !o->http.query_socket)
		return 0;
	if (!kvmmd_http_built()) {
		fprintf(stderr, "kvmmd: --metrics and --query-socket: this kvmmd was built "
			"without libmicrohttpd (install libmicrohttpd-dev and rebuild)\n");
		return -1;
	}
	o->http.ns_per_uid = o->server_flags & KVMM_SERVER_NS_UID;
	o->http.quiet = o->quiet;
	return 0;
}

/*
 * Checks that involve several options, made once everything is read so
 * the order they came in does not matter.
 */
static int check_opts(struct opts *o)
{
	static const int sizing[] = { O_MEM_AVAIL, O_MEM_TOTAL, O_MEM_FRAC };
	size_t i;

	if (!o->socket) {
		fprintf(stderr, "kvmmd: --socket PATH is required\n");
		return -1;
	}
	for (i = 0; i < sizeof(sizing) / sizeof(sizing[0]); i++)
		if ((o->given & (1ull << O_PAGES)) && (o->given & (1ull << sizing[i]))) {
			fprintf(stderr, "kvmmd: --pages and --%s both size the pool; give one\n",
				kvmmd_opts[sizing[i]].name);
			return -1;
		}
	if ((o->given & (1ull << O_MLA)) &&
	    (o->given & ((1ull << O_KV_HEADS) | (1ull << O_HEAD_DIM)))) {
		fprintf(stderr, "kvmmd: --mla-dim replaces --kv-heads and --head-dim; give one\n");
		return -1;
	}
	if (o->given & (1ull << O_MLA))
		o->p.model.kv_heads = o->p.model.head_dim = 0;
	if (o->given & ((1ull << O_MEM_AVAIL) | (1ull << O_MEM_TOTAL) | (1ull << O_MEM_FRAC)))
		o->p.nr_pages = 0;
	if (!o->p.nr_pages && o->p.mem_fraction == 0.0)
		o->p.mem_fraction = 0.88;
	if (!o->p.nr_pages && !o->p.mem_total)
		o->p.mem_total = o->p.mem_avail;
	o->p.evict_policy = o->evict;
	o->p.nvme_path = o->nvme_path;
	o->p.backend = o->backend;
	o->p.model_id = o->model_id;
	o->p.remote = o->remote;
	o->p.remote_salt = o->remote_salt;
	o->p.remote_user = o->remote_user;
	o->p.remote_password = o->remote_password;
	o->p.ns_kspaces = (uint32_t)o->ns_kspaces;	/* in force at recovery (0: default) */
	if (o->remote && !o->p.host_pages) {
		fprintf(stderr, "kvmmd: --remote needs --host-pages: values come and go "
			"through the host tier\n");
		return -1;
	}
	if (o->remote && !o->model_id && !o->quiet)
		fprintf(stderr, "kvmmd: warning: --remote without --model-id: every machine of "
			"the same geometry and salt shares the values, whatever its model\n");
	if (o->p.nvme_pages && !o->model_id && !o->quiet)
		fprintf(stderr, "kvmmd: warning: --nvme-file without --model-id: the file cannot "
			"tell this model's KV from another's of the same geometry\n");
	if (o->backend && !strcmp(o->backend, "cuda"))
		o->p.backend_arg = &o->cuda;
	return check_kv_events(o) || check_http(o) ? -1 : 0;
	return 0;
}

/*
 * An option getopt_long() refused (@c ':' for a value missing, '?'
 * otherwise): name it, and for an unknown name the nearest known one.
 */
static void bad_option(const struct option *lo, const char *arg, int c)
{
	char name[65];
	const char *near;

	if (c == ':' || strncmp(arg, "--", 2)) {
		fprintf(stderr, "kvmmd: %s: %s\n", arg,
			c == ':' ? "needs a value" : "unknown option");
		return;
	}
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
	near = option_nearest(name, lo);
	if (near && !strcmp(near, name))
		fprintf(stderr, "kvmmd: --%s takes no value\n", name);
	else if (near)
		fprintf(stderr, "kvmmd: unknown option --%s: did you mean --%s?\n", name, near);
	else
		fprintf(stderr, "kvmmd: unknown option --%s\n", name);
}

/* The command line, then the checks.  Return: 0, 1 for --help, or -1. */
static int parse_cmdline(struct opts *o, int argc, char **argv)
{
	struct option lo[NR_OPTS + 1] = { { 0 } };
	int c, i;

	for (i = 0; i < NR_OPTS; i++)
		lo[i] = (struct option){ kvmmd_opts[i].name, kvmmd_opts[i].has_arg, NULL,
					 OPT_VAL + i };
	opterr = 0;		/* bad_option() says what was wrong */
	while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
		if (c < OPT_VAL) {
			bad_option(lo, argv[optind - 1], c);
			return -1;
		}
		if (apply(o, c - OPT_VAL, optarg))
			return -1;
	}
	if (o->given & (1ull << O_HELP))
		return 1;
	if (optind != argc) {
		fprintf(stderr, "kvmmd: '%s': kvmmd takes no arguments, only options\n",
			argv[optind]);
		return -1;
	}
	return check_opts(o);
}

static void opts_free(struct opts *o)
{
	free(o->socket);
	free(o->evict);
	free(o->nvme_path);
	free(o->backend);
	free(o->model_id);
	free(o->remote);
	free(o->remote_salt);
	free(o->remote_user);
	if (o->remote_password)
		explicit_bzero(o->remote_password, strlen(o->remote_password));
	free(o->remote_password);
	free(o->pub.endpoint);
	free(o->pub.replay);
	free(o->pub.topic);
	free(o->pub.seed);
	free(o->http.listen);
	free(o->http.query_socket);
}

/* Who answers at @path, which is taken: another kvmm server, or not? */
static const char *who_answers(const char *path)
{
	static char buf[160];
	struct kvmm_ring_params rp = { .sq_entries = 1 };
	const struct timespec t = { .tv_sec = 1 };
	struct kvmm_ring ring;
	int ret = kvmm_ring_connect_timeout(path, &rp, &ring, &t);

	if (!ret) {
		kvmm_ring_exit(&ring);
		return "another kvmmd (or an engine's kvmm server) answers there";
	}
	if (ret == -EBUSY || ret == -EPERM)
		return "another kvmmd answers there (and refused a probe)";
	snprintf(buf, sizeof(buf), "a server that is not kvmm answers there (a probe got %s)",
		 errno_str(-ret));
	return buf;
}

/*
 * Wait for SIGINT or SIGTERM.  They are blocked from the start of main(),
 * before any thread exists, so every thread inherits the mask and one
 * arriving early stays pending here instead of being lost or killing
 * kvmmd half-started.
 */
static int wait_for_stop(const sigset_t *set)
{
	int sig;

	while (sigwait(set, &sig))
		;
	return sig;
}

/* The pool and its namespace limits, or a message saying why not.  Return: 0 or -1. */
static int pool_start(struct opts *o, struct kvmm_ctx **ctx)
{
	int ret = kvmm_create(&o->p, ctx);

	if (ret) {
		fprintf(stderr, "kvmmd: cannot create the pool: %s%s\n", errno_str(-ret),
			ret == -EINVAL ? " (check the geometry, page size, sizes, --max-pages and watermarks; "
					 "an NVMe tier needs --host-pages and --nvme-file, "
					 "write-through needs --host-pages)" :
			ret == -ECONNREFUSED ? " (the --remote cluster: see the line above)" :
			ret == -ENOSPC ? " (the memory budget holds no page)" : "");
		return -1;
	}
	ret = set_ns_limits(*ctx, o);
	if (ret) {
		fprintf(stderr, "kvmmd: cannot set the namespace limits or --events: %s\n", errno_str(-ret));
		kvmm_destroy(*ctx);
		*ctx = NULL;
		return -1;
	}
	return 0;
}

/* Serve @ctx at --socket with the client limits, or say why not.  Return: 0 or -1. */
static int server_start(struct opts *o, struct kvmm_ctx *ctx, struct kvmm_server **srv)
{
	int ret = kvmm_server_start(ctx, o->socket, o->server_flags, srv);
	const char *why;

	/* the options were checked; a limit refused here is a kvmmd bug */
	if (!ret && kvmm_server_set_limits(*srv, &o->lim)) {
		kvmm_server_stop(*srv);
		ret = -EINVAL;
	}
	if (!ret)
		return 0;
	/* first: who_answers() uses errno_str()'s buffer too */
	why = ret == -EADDRINUSE ? who_answers(o->socket) :
	      ret == -EEXIST ? "the path exists and is not a socket" : NULL;
	fprintf(stderr, "kvmmd: cannot serve %s: %s%s%s%s\n", o->socket, errno_str(-ret),
		why ? " (" : "", why ? why : "", why ? ")" : "");
	return -1;
}

/* What is served: the pool, and the tiers below it. */
static void say_serving(const struct opts *o, struct kvmm_ctx *ctx)
{
	uint64_t st[NR_KVMM_STATS];

	fprintf(stderr, "kvmmd: serving %s: %u pages of %u tokens, %u sequences of up to "
		"%u tokens, eviction %s\n", o->socket, kvmm_nr_pages(ctx),
		kvmm_page_size(ctx), o->p.max_seqs, o->p.max_seq_len,
		kvmm_evict_policy(ctx));
	if (!o->p.host_pages)
		return;
	kvmm_stats(ctx, st, NR_KVMM_STATS);
	fprintf(stderr, "kvmmd: host tier %u pages, %s", o->p.host_pages,
		o->p.write_policy == KVMM_WRITE_THROUGH ? "write-through" : "write-back");
	if (o->p.nvme_pages)
		fprintf(stderr, ", NVMe tier %u pages in %s (%s%llu recovered)",
			o->p.nvme_pages, o->p.nvme_path,
			o->p.nvme_flags & KVMM_NVME_REFORMAT ? "reformatted, " : "",
			(unsigned long long)st[KVMM_STAT_NVME_PAGES_CACHED]);
	if (o->p.remote)
		fprintf(stderr, ", remote tier on %s", o->p.remote);
	fputc('\n', stderr);
}

/*
 * Before the context goes: every cached page not on NVMe written to the
 * file, within --shutdown-flush-ms, and a line saying what was written.
 */
static void shutdown_flush(const struct opts *o, struct kvmm_ctx *ctx)
{
	struct kvmm_flush_info info;
	int64_t ret;

	if (!o->p.nvme_pages || !o->shutdown_flush_ms)
		return;
	ret = kvmm_flush(ctx, (uint32_t)o->shutdown_flush_ms, &info);
	if (ret < 0) {
		fprintf(stderr, "kvmmd: flush to NVMe failed: %s\n", errno_str((int)-ret));
		return;
	}
	if (!o->quiet || info.left)
		fprintf(stderr, "kvmmd: flushed %llu pages to NVMe in %.1f ms%s%llu left out%s\n",
			(unsigned long long)info.pages, info.ns / 1e6,
			info.left ? " (" : ", ", (unsigned long long)info.left,
			info.left ? ": out of time (--shutdown-flush-ms) or room on the tier)" : "");
}

int main(int argc, char **argv)
{
	struct opts o = {
		.p = {
			.size = sizeof(struct kvmm_params),
			.model = { .layers = 32, .kv_heads = 8, .head_dim = 128,
				   .dtype_bytes = 2, .attn = KVMM_ATTN_MHA },
			.page_size = 16, .nr_pages = 65536,
			.max_seqs = 1024, .max_seq_len = 32768,
			.host_node = KVMM_NODE_NEAREST,
		},
		/* clients may map the pool (kvmm_kv_pool_attach()) */
		.mock = { .shareable = true },
		.ns_pin_pages = KVMM_NS_PIN_AUTO,
		.ns_cache_share = 100,
		.keyed_share = 100,
		.ns_kspaces = KVMM_NS_KSPACES_DEFAULT,
		.ns_kjob_bytes = KVMM_NS_KJOB_BYTES_DEFAULT,
		.shutdown_flush_ms = 5000,
	};
	struct kvmm_server *srv = NULL;
	struct kvmmd_pub *pub = NULL;
	struct kvmmd_http *http = NULL;
	struct kvmm_ctx *ctx = NULL;
	sigset_t set;
	int ret, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	o.p.backend_arg = &o.mock;
	ret = parse_cmdline(&o, argc, argv);
	if (ret) {
		if (ret > 0)
			usage(stdout);
		else
			fprintf(stderr, "kvmmd: see 'kvmmd --help' for the options\n");
		opts_free(&o);
		return ret > 0 ? 0 : 2;
	}
	if (pool_start(&o, &ctx)) {
		opts_free(&o);
		return 1;
	}
	if (o.pub.endpoint && kvmmd_pub_start(ctx, &o.pub, &pub)) {
		kvmm_destroy(ctx);
		opts_free(&o);
		return 1;
	}
	o.http.events = pub;
	if ((o.http.listen || o.http.query_socket) && kvmmd_http_start(ctx, &o.http, &http)) {
		kvmmd_pub_stop(pub, o.quiet);
		kvmm_destroy(ctx);
		opts_free(&o);
		return 1;
	}
	if (server_start(&o, ctx, &srv)) {
		kvmmd_http_stop(http);
		kvmmd_pub_stop(pub, o.quiet);
		kvmm_destroy(ctx);
		opts_free(&o);
		return 1;
	}
	if (!o.quiet)
		say_serving(&o, ctx);
	sig = wait_for_stop(&set);
	if (!o.quiet)
		fprintf(stderr, "kvmmd: %s: stopping (%u clients attached)\n", strsignal(sig),
			kvmm_server_clients(srv));
	kvmm_server_stop(srv);
	kvmmd_http_stop(http);
	shutdown_flush(&o, ctx);
	kvmmd_pub_stop(pub, o.quiet);
	ret = kvmm_check(ctx);
	if (ret)
		fprintf(stderr, "kvmmd: invariant check failed at exit: %s\n", errno_str(-ret));
	kvmm_destroy(ctx);
	opts_free(&o);
	return ret ? 1 : 0;
}
