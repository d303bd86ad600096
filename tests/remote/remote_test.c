// SPDX-License-Identifier: MIT
/*
 * tests/remote/remote_test.c - the remote tier's client against a real
 * Redis Cluster: 3 masters and 3 replicas started on free loopback ports
 * by scripts/redis-cluster.sh for the suite, and torn down by PID.
 *
 * Every page is stamped: its bytes are a function of its key, so any page
 * a read hands back is checked against what it must hold.  The faults
 * (a value corrupted or cut on the server, a crafted value, FLUSHALL, a
 * client killed mid-write, a master stopped or killed mid-batch) may only
 * ever cost misses, never a wrong page.
 *
 * Without redis-server (or a build without hiredis) the suite is not
 * registered, and says so.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include <jansson.h>

#include "../../kvmm/internal.h"
#include "../helpers.h"
#include "../hostile/hostile.h"
#include "autoconf.h"

#if CONFIG_KVMM_HIREDIS

#define PS	16		/* tokens per page */
#define SMALL	(64u << 10)	/* bytes of a page in most tests */

static const struct kvmm_remote_ops *ops;
static char cdir[256];
static char seeds[512];
static const char *script = KVMM_SRCTREE "/scripts/redis-cluster.sh";

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The first line @cmd prints, into @out. */
static int sh_line(char *out, size_t len, const char *cmd)
{
	FILE *f = popen(cmd, "r");
	int st;

	if (!f)
		return -1;
	out[0] = '\0';
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = '\0';
	while (fgetc(f) != EOF)	/* the rest, so that it is not killed by SIGPIPE */
		;
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int suite_clean(void);

static int suite_init(void)
{
	char cmd[600];
	const char *tmp = getenv("TMPDIR");

	snprintf(cdir, sizeof(cdir), "%s/kvmm-redis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(cdir))
		return -1;
	snprintf(cmd, sizeof(cmd), "%s start %s", script, cdir);
	if (sh_line(seeds, sizeof(seeds), cmd) || !strchr(seeds, ':')) {
		fprintf(stderr, "remote: could not start a cluster (%s)\n", cdir);
		suite_clean();
		return -1;
	}
	ops = kvmm_remote_lookup("redis");
	return ops ? 0 : -1;
}

static int suite_clean(void)
{
	sh("%s stop %s", script, cdir);
	sh("rm -rf %s", cdir);
	return 0;
}

/* A client of the suite's cluster; @page_bytes per page, @salt. */
/* A client AUTHenticating as @user with @password (NULL: none); why not in @err. */
static void *client_auth(uint64_t page_bytes, const char *salt, const char *model_id,
			 const char *user, const char *password, char *err, size_t err_len)
{
	struct kvmm_remote_cfg cfg = {
		.seeds = seeds, .salt = salt, .model_id = model_id,
		.model = { .layers = 2, .kv_heads = 2, .head_dim = 64, .dtype_bytes = 2 },
		.page_size = PS, .page_bytes = page_bytes, .timeout_ms = 1500,
		.user = user, .password = password, .err = err, .err_len = err_len,
	};
	void *priv = NULL;

	return ops->init(&cfg, &priv) ? NULL : priv;
}

static void *client(uint64_t page_bytes, const char *salt, const char *model_id)
{
	char err[256] = "";
	void *priv = client_auth(page_bytes, salt, model_id, NULL, NULL, err, sizeof(err));

	if (!priv)
		fprintf(stderr, "\n  remote init: %s\n", err);
	return priv;
}

/* Page bytes that are a function of the page's key. */
static void stamp(void *dst, uint64_t len, const uint64_t key[2])
{
	uint64_t x = key[0] ^ (key[1] * 0x9e3779b97f4a7c15ull), *p = dst;
	uint64_t i;

	for (i = 0; i < len / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = x;
	}
}

static bool stamped(const void *src, uint64_t len, const uint64_t key[2])
{
	void *want = malloc(len);
	bool same;

	stamp(want, len, key);
	same = !memcmp(want, src, len);
	free(want);
	return same;
}

/* A prefix of @nr pages: tokens, names and stamped bytes. */
struct prefix {
	uint32_t nr;
	uint64_t page_bytes;
	uint32_t *tok;
	struct kvmm_remote_page *pg;
	void **buf;	/* the stamped pages */
	void **out;	/* where reads land */
};

static struct prefix *prefix_new(void *priv, uint32_t nr, uint64_t page_bytes, uint32_t seed)
{
	struct prefix *p = calloc(1, sizeof(*p));
	uint32_t i;

	p->nr = nr;
	p->page_bytes = page_bytes;
	p->tok = malloc(sizeof(uint32_t) * PS * nr);
	p->pg = calloc(nr, sizeof(*p->pg));
	p->buf = calloc(nr, sizeof(void *));
	p->out = calloc(nr, sizeof(void *));
	test_tokens(p->tok, PS * nr, seed);
	ops->chain(priv, NULL, p->tok, nr, p->pg);
	for (i = 0; i < nr; i++) {
		p->buf[i] = malloc(page_bytes);
		p->out[i] = malloc(page_bytes);
		stamp(p->buf[i], page_bytes, p->pg[i].key);
	}
	return p;
}

static void prefix_free(struct prefix *p)
{
	uint32_t i;

	for (i = 0; i < p->nr; i++) {
		free(p->buf[i]);
		free(p->out[i]);
	}
	free(p->tok);
	free(p->pg);
	free(p->buf);
	free(p->out);
	free(p);
}

/* Read @p back: the run that verified, every page of it checked. */
static uint32_t get_checked(void *priv, struct prefix *p)
{
	uint32_t i, run;

	for (i = 0; i < p->nr; i++)
		memset(p->out[i], 0xa5, p->page_bytes);
	run = ops->get(priv, p->pg, p->nr, p->out, NULL);
	CU_ASSERT(run <= p->nr);
	for (i = 0; i < run; i++)
		CU_ASSERT_FATAL(stamped(p->out[i], p->page_bytes, p->pg[i].key));
	return run;
}

/* redis-cli in cluster mode, following redirections, output to @out. */
static int rcli(char *out, size_t len, const char *args)
{
	char cmd[1024];
	const char *colon = strchr(seeds, ':');

	snprintf(cmd, sizeof(cmd), "redis-cli -c -h 127.0.0.1 -p %d %s 2>&1", atoi(colon + 1), args);
	return sh_line(out, len, cmd);
}

static void key_name(void *priv, char *out, const struct kvmm_remote_page *pg, int part)
{
	CU_ASSERT_EQUAL(ops->key_name(priv, pg, (uint32_t)part, out, 64), 0);
}

static struct kvmm_remote_stats stats_of(void *priv)
{
	struct kvmm_remote_stats st;

	ops->stats(priv, &st);
	return st;
}

/* ---- tests ---- */

static void remote_roundtrip(void)
{
	void *priv = client(SMALL, "tenant-a", "model-x");
	struct prefix *p;
	struct kvmm_remote_stats st;

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 32, SMALL, 1);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, p->nr, NULL), 0);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, p->nr, (const void *const *)p->buf), 32);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, p->nr, NULL), 32);
	CU_ASSERT_EQUAL(get_checked(priv, p), 32);
	/* a second put finds every page there and writes none */
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, p->nr, (const void *const *)p->buf), 32);
	st = stats_of(priv);
	CU_ASSERT_EQUAL(st.puts, 32);
	CU_ASSERT_EQUAL(st.put_skipped, 32);
	CU_ASSERT_EQUAL(st.get_hits, 32);
	CU_ASSERT_EQUAL(st.corrupt, 0);
	CU_ASSERT_EQUAL(st.timeouts + st.errors, 0);
	CU_ASSERT_EQUAL(st.moved + st.ask, 0);	/* every key went to its slot's node */
	/* a prefix past what is there: the run stops at the first missing page */
	{
		struct prefix *q = prefix_new(priv, 40, SMALL, 1);

		CU_ASSERT_EQUAL(ops->probe(priv, q->pg, q->nr, NULL), 32);
		CU_ASSERT_EQUAL(get_checked(priv, q), 32);
		prefix_free(q);
	}
	prefix_free(p);
	ops->exit(priv);
}

/*
 * An ACL user on every node, allowed kvmm's keys and the commands it
 * sends only (as remote.rst tells operators to set it up): a client that
 * AUTHenticates as it writes and reads; a wrong password is refused at
 * init with the server's reason; a user the ACL keeps off kvmm's keys
 * writes nothing and reads nothing, in counted errors, never a wrong page.
 */
static void remote_auth(void)
{
	char err[256] = "";
	struct prefix *p;
	struct kvmm_remote_stats st;
	void *priv, *off;

	CU_ASSERT_EQUAL_FATAL(sh("for p in $(cat %s/ports); do "
				 "redis-cli -p $p ACL SETUSER kvmm-ok on '>s3cret' '~kvmm:*' '+@read' "
				 "'+@write' '+@keyspace' '+cluster|slots' '+asking' "
				 ">/dev/null && redis-cli -p $p ACL SETUSER kvmm-off on '>s3cret' "
				 "'~other:*' '+@all' >/dev/null || exit 1; done", cdir), 0);
	priv = client_auth(SMALL, "auth", "model-x", "kvmm-ok", "s3cret", err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 16, SMALL, 41);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, p->nr, (const void *const *)p->buf), 16);
	CU_ASSERT_EQUAL(get_checked(priv, p), 16);
	st = stats_of(priv);
	CU_ASSERT_EQUAL(st.errors + st.timeouts, 0);
	/* a wrong password: refused, and said so */
	CU_ASSERT_PTR_NULL(client_auth(SMALL, "auth", "model-x", "kvmm-ok", "wrong", err,
				       sizeof(err)));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "refused AUTH as user 'kvmm-ok'"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "WRONGPASS"));
	/* a user kept off the keys: every command refused, nothing served */
	off = client_auth(SMALL, "auth", "model-x", "kvmm-off", "s3cret", err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(off);
	CU_ASSERT_EQUAL(ops->probe(off, p->pg, p->nr, NULL), 0);
	CU_ASSERT_EQUAL(get_checked(off, p), 0);
	CU_ASSERT(ops->put(off, p->pg, p->nr, (const void *const *)p->buf) < 0);
	st = stats_of(off);
	CU_ASSERT(st.errors > 0);
	CU_ASSERT_EQUAL(st.puts + st.get_hits + st.probe_hits, 0);
	ops->exit(off);
	ops->drop(priv, p->pg, p->nr);
	prefix_free(p);
	ops->exit(priv);
	CU_ASSERT_EQUAL(sh("for p in $(cat %s/ports); do "
			   "redis-cli -p $p ACL DELUSER kvmm-ok kvmm-off >/dev/null || exit 1; done",
			   cdir), 0);
}

/* The same tokens under another salt or model are other pages. */
static void remote_identity(void)
{
	void *a = client(SMALL, "tenant-a", "model-x");
	void *b = client(SMALL, "tenant-b", "model-x");
	void *c = client(SMALL, "tenant-a", "model-y");
	struct prefix *pa, *pb, *pc;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	pa = prefix_new(a, 8, SMALL, 2);
	pb = prefix_new(b, 8, SMALL, 2);
	pc = prefix_new(c, 8, SMALL, 2);
	CU_ASSERT(memcmp(pa->pg[0].key, pb->pg[0].key, 16) != 0);
	CU_ASSERT(memcmp(pa->pg[0].key, pc->pg[0].key, 16) != 0);
	CU_ASSERT_EQUAL(ops->put(a, pa->pg, 8, (const void *const *)pa->buf), 8);
	CU_ASSERT_EQUAL(ops->probe(b, pb->pg, 8, NULL), 0);
	CU_ASSERT_EQUAL(ops->probe(c, pc->pg, 8, NULL), 0);
	CU_ASSERT_EQUAL(get_checked(b, pb), 0);
	/* pages of one prefix differ from the same tokens after another parent */
	{
		struct kvmm_remote_page other;

		ops->chain(a, pa->pg[3].key, pa->tok, 1, &other);
		CU_ASSERT(memcmp(other.key, pa->pg[0].key, 16) != 0);
	}
	prefix_free(pa);
	prefix_free(pb);
	prefix_free(pc);
	ops->exit(a);
	ops->exit(b);
	ops->exit(c);
}

/* MEMORY USAGE: a 2 MiB page costs 2 MiB and a little, not 2.5. */
static void remote_value_size(void)
{
	uint64_t pb = 2u << 20;
	void *priv = client(pb, "tenant-size", "model-x");
	struct prefix *p;
	char k0[64], k1[64], cmd[128], out[128];
	long long m0, m1, naive;

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 2, pb, 3);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 2, (const void *const *)p->buf), 2);
	key_name(priv, k0, &p->pg[0], 0);
	key_name(priv, k1, &p->pg[0], 1);
	snprintf(cmd, sizeof(cmd), "MEMORY USAGE '%s' SAMPLES 0", k0);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	m0 = atoll(out);
	snprintf(cmd, sizeof(cmd), "MEMORY USAGE '%s' SAMPLES 0", k1);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	m1 = atoll(out);
	/* what one value of the page and its header would have cost */
	CU_ASSERT_EQUAL(sh("head -c %llu /dev/zero | redis-cli -c -h 127.0.0.1 -p %d -x SET "
			   "kvmm-naive-value >/dev/null 2>&1",
			   (unsigned long long)(pb + 96 + PS * 4), atoi(strchr(seeds, ':') + 1)), 0);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), "MEMORY USAGE kvmm-naive-value SAMPLES 0"), 0);
	naive = atoll(out);
	rcli(out, sizeof(out), "DEL kvmm-naive-value");
	fprintf(stderr, "\n  2 MiB page: %lld + %lld bytes on the server (one value: %lld) ",
		m0, m1, naive);
	CU_ASSERT(m0 > 0 && m1 > 0);
	CU_ASSERT(m0 + m1 <= (long long)pb + (long long)pb / 128);
	CU_ASSERT(naive >= (long long)pb + (long long)pb / 8);
	CU_ASSERT_EQUAL(get_checked(priv, p), 2);
	prefix_free(p);
	ops->exit(priv);
}

/* Two processes: one writes a prefix, the other reads it; counters agree. */
static void remote_two_processes(void)
{
	void *priv;
	struct prefix *p;
	int pipefd[2], st;
	uint64_t child_puts = 0;
	pid_t pid;

	CU_ASSERT_EQUAL_FATAL(pipe(pipefd), 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		struct kvmm_remote_stats cs;
		void *c = client(SMALL, "tenant-share", "model-x");
		struct prefix *q;

		if (!c)
			_exit(1);
		q = prefix_new(c, 24, SMALL, 4);
		if (ops->put(c, q->pg, 24, (const void *const *)q->buf) != 24)
			_exit(2);
		ops->stats(c, &cs);
		if (write(pipefd[1], &cs.puts, sizeof(cs.puts)) != sizeof(cs.puts))
			_exit(3);
		_exit(0);
	}
	close(pipefd[1]);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_EQUAL(read(pipefd[0], &child_puts, sizeof(child_puts)), sizeof(child_puts));
	close(pipefd[0]);
	priv = client(SMALL, "tenant-share", "model-x");
	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 24, SMALL, 4);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 24, NULL), 24);
	CU_ASSERT_EQUAL(get_checked(priv, p), 24);
	CU_ASSERT_EQUAL(stats_of(priv).get_hits, child_puts);
	CU_ASSERT_EQUAL(stats_of(priv).get_bytes, child_puts * SMALL);
	prefix_free(p);
	ops->exit(priv);
}

/* A byte changed on the server: that page is a miss, counted and deleted. */
static void remote_corrupt_value(void)
{
	void *priv = client(SMALL, "tenant-corrupt", "model-x");
	struct prefix *p;
	char k[64], cmd[160], out[64];

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 16, SMALL, 5);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 16, (const void *const *)p->buf), 16);
	key_name(priv, k, &p->pg[9], 0);
	snprintf(cmd, sizeof(cmd), "SETRANGE '%s' 5000 X", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 16, NULL), 16);	/* a probe cannot tell */
	CU_ASSERT_EQUAL(get_checked(priv, p), 9);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 1);
	snprintf(cmd, sizeof(cmd), "EXISTS '%s'", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_STRING_EQUAL(out, "0");
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 16, NULL), 9);
	/* the header's own bytes, too (it trails the page's, tokens last) */
	key_name(priv, k, &p->pg[2], 0);
	snprintf(cmd, sizeof(cmd), "STRLEN '%s'", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	snprintf(cmd, sizeof(cmd), "SETRANGE '%s' %lld Z", k, atoll(out) - (96 + PS * 4) + 40);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_EQUAL(get_checked(priv, p), 2);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 2);
	/* and a value cut short */
	key_name(priv, k, &p->pg[1], 0);
	snprintf(cmd, sizeof(cmd), "SET '%s' short", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_EQUAL(get_checked(priv, p), 1);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 3);
	prefix_free(p);
	ops->exit(priv);
}

/* A 2-part value with its second key deleted: a miss, both parts dropped. */
static void remote_part_deleted(void)
{
	uint64_t pb = 2u << 20;
	void *priv = client(pb, "tenant-part", "model-x");
	struct prefix *p;
	char k[64], cmd[160], out[64];

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 6, pb, 6);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 6, (const void *const *)p->buf), 6);
	key_name(priv, k, &p->pg[4], 1);
	snprintf(cmd, sizeof(cmd), "DEL '%s'", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_STRING_EQUAL(out, "1");
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 6, NULL), 4);	/* a probe checks both */
	CU_ASSERT_EQUAL(get_checked(priv, p), 4);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 1);
	key_name(priv, k, &p->pg[4], 0);
	snprintf(cmd, sizeof(cmd), "EXISTS '%s'", k);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), cmd), 0);
	CU_ASSERT_STRING_EQUAL(out, "0");
	/* written again, it is whole again */
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 6, (const void *const *)p->buf), 6);
	CU_ASSERT_EQUAL(get_checked(priv, p), 6);
	prefix_free(p);
	ops->exit(priv);
}

/*
 * A value with the right key, a right header and checksums, but another
 * page's tokens (a client with a bug, or a hostile one): a miss.
 */
static void remote_crafted_value(void)
{
	void *priv = client(SMALL, "tenant-craft", "model-x");
	struct prefix *p;
	struct kvmm_remote_page forged;
	uint32_t wrong[PS];

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 4, SMALL, 7);
	/* page 0 written under its key, with other tokens in the value */
	memcpy(wrong, p->tok, sizeof(wrong));
	wrong[3] ^= 1;
	forged = p->pg[0];
	forged.tokens = wrong;
	CU_ASSERT_EQUAL(ops->put(priv, &forged, 1, (const void *const *)p->buf), 1);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 4, NULL), 1);
	CU_ASSERT_EQUAL(get_checked(priv, p), 0);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 1);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 4, NULL), 0);	/* and it is gone */
	/* ... or the right tokens with the wrong parent */
	forged = p->pg[1];
	forged.parent[0] ^= 1;
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 1, (const void *const *)p->buf), 1);
	CU_ASSERT_EQUAL(ops->put(priv, &forged, 1, (const void *const *)&p->buf[1]), 1);
	CU_ASSERT_EQUAL(get_checked(priv, p), 1);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 2);
	prefix_free(p);
	ops->exit(priv);
}

static void remote_flushall(void)
{
	void *priv = client(SMALL, "tenant-flush", "model-x");
	struct prefix *p;
	char m[64];
	FILE *f;
	char cmd[600];

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 16, SMALL, 8);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 16, (const void *const *)p->buf), 16);
	snprintf(cmd, sizeof(cmd), "%s masters %s", script, cdir);
	f = popen(cmd, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	while (fgets(m, sizeof(m), f))
		CU_ASSERT_EQUAL(sh("redis-cli -h 127.0.0.1 -p %d FLUSHALL >/dev/null", atoi(m)), 0);
	pclose(f);
	CU_ASSERT_EQUAL(ops->probe(priv, p->pg, 16, NULL), 0);
	CU_ASSERT_EQUAL(get_checked(priv, p), 0);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 0);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 16, (const void *const *)p->buf), 16);
	CU_ASSERT_EQUAL(get_checked(priv, p), 16);
	prefix_free(p);
	ops->exit(priv);
}

/* A client killed while it writes leaves nothing that reads as a page. */
static void remote_client_killed(void)
{
	uint64_t pb = 2u << 20;
	void *priv = client(pb, "tenant-kill", "model-x");
	struct prefix *p;
	uint32_t round, got;
	pid_t pid;

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 48, pb, 9);
	for (round = 0; round < 3; round++) {
		pid = fork();
		CU_ASSERT_FATAL(pid >= 0);
		if (pid == 0) {
			void *c = client(pb, "tenant-kill", "model-x");
			struct prefix *q;

			if (!c)
				_exit(1);
			q = prefix_new(c, 48, pb, 9);
			ops->put(c, q->pg, 48, (const void *const *)q->buf);
			_exit(0);
		}
		usleep(20000 + round * 15000);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		/* whatever it wrote whole reads back right; the rest is a miss */
		got = get_checked(priv, p);
		CU_ASSERT(got <= 48);
		/* finish the job: what is missing is written, the rest skipped */
		CU_ASSERT_EQUAL(ops->put(priv, p->pg, 48, (const void *const *)p->buf), 48);
		CU_ASSERT_EQUAL(get_checked(priv, p), 48);
		/* start over for the next round */
		CU_ASSERT_EQUAL(sh("%s masters %s | while read port pid; do "
				   "redis-cli -h 127.0.0.1 -p $port FLUSHALL >/dev/null; done",
				   script, cdir), 0);
	}
	prefix_free(p);
	ops->exit(priv);
}

struct killer {
	pid_t pid;
	int sig;
	useconds_t after;
};

static void *kill_after(void *arg)
{
	struct killer *k = arg;

	usleep(k->after);
	kill(k->pid, k->sig);
	return NULL;
}

/* The first master's "PORT PID". */
static int first_master(int *port, pid_t *pid)
{
	char cmd[600], out[64];

	snprintf(cmd, sizeof(cmd), "%s masters %s", script, cdir);
	if (sh_line(out, sizeof(out), cmd) || sscanf(out, "%d %d", port, pid) != 2)
		return -1;
	return 0;
}

/*
 * Read @p until the cluster has failed over and every page is back (for
 * 30 s at most); until then every read is misses and good pages, never a
 * wrong one (get_checked()).  The pages read at the end.
 */
static uint32_t read_after_failover(void *priv, struct prefix *p)
{
	struct kvmm_remote_stats st;
	struct timespec t0, t;
	uint32_t got = 0, tries = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		got = get_checked(priv, p);
		tries++;
		if (got == p->nr)
			break;
		usleep(100000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 30);
	st = stats_of(priv);
	fprintf(stderr, "then %u of %u after %u more reads (%lu slot maps read, %lu timeouts, "
		"%lu errors) ", got, p->nr, tries, (unsigned long)st.refreshes,
		(unsigned long)st.timeouts, (unsigned long)st.errors);
	return got;
}

/*
 * A master stopped (SIGSTOP: a partition) in the middle of a batch: the
 * batch ends by its deadline with misses, never a stall and never a wrong
 * page; after the failover the pages its replica holds read again.
 */
static void remote_master_stopped(void)
{
	uint64_t pb = 256u << 10;
	void *priv = client(pb, "tenant-stop", "model-x");
	struct prefix *p;
	struct killer k = { .sig = SIGSTOP, .after = 2000 };
	struct timespec t0, t1;
	pthread_t th;
	int port;
	uint32_t got;
	double secs;

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 64, pb, 10);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 64, (const void *const *)p->buf), 64);
	CU_ASSERT_EQUAL_FATAL(first_master(&port, &k.pid), 0);
	sh("redis-cli -h 127.0.0.1 -p %d WAIT 1 2000 >/dev/null", port);
	pthread_create(&th, NULL, kill_after, &k);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	got = get_checked(priv, p);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(th, NULL);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CU_ASSERT(secs < 1.5 + 1.0);	/* the deadline, and some slack */
	fprintf(stderr, "\n  stopped master: %u of 64 pages, %.2f s, %lu timeouts ", got, secs,
		(unsigned long)stats_of(priv).timeouts);
	/* until the failover, reads are misses or good pages: never wrong ones */
	CU_ASSERT_EQUAL(read_after_failover(priv, p), p->nr);
	CU_ASSERT(stats_of(priv).timeouts > 0);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 0);
	kill(k.pid, SIGCONT);
	CU_ASSERT_EQUAL(sh("%s wait %s 30", script, cdir), 0);
	prefix_free(p);
	ops->exit(priv);
}

/* A master killed (SIGKILL) mid-batch: the same, by a broken connection. */
static void remote_master_killed(void)
{
	uint64_t pb = 256u << 10;
	void *priv = client(pb, "tenant-kill9", "model-x");
	struct prefix *p;
	struct killer k = { .sig = SIGKILL, .after = 2000 };
	pthread_t th;
	int port;
	uint32_t got;

	CU_ASSERT_PTR_NOT_NULL_FATAL(priv);
	p = prefix_new(priv, 64, pb, 11);
	CU_ASSERT_EQUAL(ops->put(priv, p->pg, 64, (const void *const *)p->buf), 64);
	CU_ASSERT_EQUAL_FATAL(first_master(&port, &k.pid), 0);
	sh("redis-cli -h 127.0.0.1 -p %d WAIT 1 2000 >/dev/null", port);
	pthread_create(&th, NULL, kill_after, &k);
	got = get_checked(priv, p);
	pthread_join(th, NULL);
	fprintf(stderr, "\n  killed master: %u of 64 pages, %lu errors ", got,
		(unsigned long)stats_of(priv).errors);
	CU_ASSERT_EQUAL(read_after_failover(priv, p), p->nr);
	CU_ASSERT(stats_of(priv).errors + stats_of(priv).timeouts > 0);
	CU_ASSERT_EQUAL(stats_of(priv).corrupt, 0);
	CU_ASSERT(stats_of(priv).refreshes >= 2);
	prefix_free(p);
	ops->exit(priv);
}

static void remote_bad_config(void)
{
	char err[256] = "";
	struct kvmm_remote_cfg cfg = {
		.salt = "t", .model_id = "m", .page_size = PS, .page_bytes = SMALL,
		.timeout_ms = 300, .err = err, .err_len = sizeof(err),
	};
	void *priv = NULL;
	char port[64];

	cfg.seeds = "no-port-here";
	CU_ASSERT(ops->init(&cfg, &priv) < 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad seed"));
	/* a port nobody listens on */
	snprintf(port, sizeof(port), "127.0.0.1:1");
	cfg.seeds = port;
	CU_ASSERT(ops->init(&cfg, &priv) < 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "CLUSTER SLOTS"));
	cfg.seeds = NULL;
	CU_ASSERT_EQUAL(ops->init(&cfg, &priv), -EINVAL);
	CU_ASSERT_PTR_NULL(priv);
}


/* ---- the keyed store over the remote tier (kvmm_params.remote) ---- */

#define KVB	3000	/* bytes a keyed value: pages of the test geometry, the last part-filled */
static const char kmodel[] = "remote-test-model@1";

static struct kvmm_key kkey(uint32_t i)
{
	return (struct kvmm_key){ .lo = 0x9e3779b97f4a7c15ull * (i + 7), .hi = i };
}

static void kstamp(uint8_t *v, uint32_t i)
{
	uint32_t b;

	for (b = 0; b < KVB; b++)
		v[b] = (uint8_t)(i * 131u ^ b * 7u ^ b >> 8);
}

/*
 * Parameters of a context of @dev device pages of 16 tokens (sequences of
 * up to @max_len), a host tier of @host_pages and the suite's cluster
 * under it, as tenant @salt.
 */
static struct kvmm_params remote_params(uint32_t dev, uint32_t max_len, const char *salt,
					uint32_t host_pages)
{
	struct kvmm_params p = test_params(16, dev, 4, max_len);

	p.host_pages = host_pages;
	p.host_node = KVMM_NODE_NEAREST;
	p.remote = seeds;
	p.remote_salt = salt;
	p.remote_timeout_ms = 1500;
	p.model_id = kmodel;
	return p;
}

/* A context with a host tier of @host_pages and the suite's cluster under it. */
static struct kvmm_ctx *remote_ctx(const char *salt, uint32_t host_pages, struct test_log *log)
{
	struct kvmm_params p = remote_params(16, 64, salt, host_pages);
	struct kvmm_ctx *ctx = NULL;

	if (log) {
		p.log = test_log_fn;
		p.log_priv = log;
	}
	if (kvmm_create(&p, &ctx))
		return NULL;
	return ctx;
}

static uint32_t kspace(struct kvmm_ctx *ctx)
{
	struct kvmm_keyed_spec spec = { .ns = 0, .value_bytes = KVB, .model_id = kmodel };
	uint32_t id = ~0u;

	CU_ASSERT_EQUAL(kvmm_keyed_space(ctx, &spec, &id), 0);
	return id;
}

/* Keyed values @from .. @from + @n - 1 through kvmm_keyed_put()/get(). */
static int kio(struct kvmm_ctx *ctx, uint32_t sp, uint32_t from, uint32_t n, bool put,
	       int32_t *res, uint32_t *good)
{
	struct kvmm_key keys[32];
	static uint8_t vals[32][KVB];
	void *bufs[32];
	uint8_t want[KVB];
	uint32_t i;
	int ret;

	for (i = 0; i < n; i++) {
		keys[i] = kkey(from + i);
		bufs[i] = vals[i];
		if (put)
			kstamp(vals[i], from + i);
		else
			memset(vals[i], 0, KVB);
	}
	ret = put ? kvmm_keyed_put(ctx, sp, keys, (const void *const *)bufs, n, res) :
		    kvmm_keyed_get(ctx, sp, keys, bufs, n, res);
	for (i = 0, *good = 0; !put && i < n; i++) {
		kstamp(want, from + i);
		if (!res || !res[i])
			*good += !memcmp(want, vals[i], KVB);
	}
	return ret;
}

static int kexists(struct kvmm_ctx *ctx, uint32_t sp, uint32_t from, uint32_t n, int32_t *res)
{
	struct kvmm_key keys[32];
	uint32_t i;

	for (i = 0; i < n; i++)
		keys[i] = kkey(from + i);
	return kvmm_keyed_exists(ctx, sp, keys, n, res);
}

/*
 * Values one context put are found and read by another (another machine,
 * as far as the tier can tell: nothing but the cluster between them),
 * byte for byte; then they are here, and no longer asked for.
 */
static void remote_keyed_shared(void)
{
	struct kvmm_ctx *a = remote_ctx("keyed-1", 256, NULL);
	struct kvmm_ctx *b = remote_ctx("keyed-1", 256, NULL);
	int32_t res[32];
	uint32_t sa, sb, good;
	uint64_t probes;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	sa = kspace(a);
	sb = kspace(b);
	CU_ASSERT_EQUAL(kio(a, sa, 0, 8, true, NULL, &good), 8);
	CU_ASSERT(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES) > 0);
	CHECK_OK(a);
	/* b has none of them here: the run goes on on the remote tier */
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_VALUES), 0);
	CU_ASSERT_EQUAL(kexists(b, sb, 0, 10, NULL), 8);
	CU_ASSERT_EQUAL(kexists(b, sb, 6, 4, res), 2);
	CU_ASSERT(res[0] == 0 && res[1] == 0 && res[2] == -ENOENT && res[3] == -ENOENT);
	CU_ASSERT_EQUAL(kio(b, sb, 0, 10, false, res, &good), 8);
	CU_ASSERT_EQUAL(good, 8);
	CU_ASSERT(res[8] == -ENOENT && res[9] == -ENOENT);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_REMOTE_GETS), 8);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_VALUES), 8);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_CORRUPT), 0);
	CHECK_OK(b);
	/* now they are b's own: a run of them asks the remote tier nothing */
	probes = test_stat(b, KVMM_STAT_REMOTE_PROBES);
	CU_ASSERT_EQUAL(kexists(b, sb, 0, 8, NULL), 8);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_PROBES), probes);
	CU_ASSERT_EQUAL(kio(b, sb, 0, 8, false, NULL, &good), 8);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_REMOTE_GETS), 8);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

#define XPAGES	2048			/* pages of a large value (512 bytes each) */
#define XVB	(XPAGES * 512u)
#define XSCRATCH (128 << 10)		/* a probe's window, and then some */

/*
 * KEXISTS in a space of large values costs probes, and memory, that
 * follow its answer, not the keys times the value's pages: a key the
 * tier lacks costs one probe whatever the value size, a key it has costs
 * its pages, a run stops at its first miss; the scratch is one window,
 * given back.  Context a stores one value of XPAGES pages (written
 * through); b, with nothing here, asks about it and three keys no one
 * stored.
 */
static void remote_keyed_exists_follows_answer(void)
{
	struct kvmm_keyed_spec spec = { .value_bytes = XVB, .model_id = kmodel };
	struct kvmm_params pa = remote_params(16, 64, "kx-1", XPAGES + 64);
	struct kvmm_params pb = remote_params(16, 64, "kx-1", 64);
	struct kvmm_ctx *a = NULL, *b = NULL;
	struct test_alloc ta = { 0 };
	struct kvmm_key keys[4];
	uint8_t *v = malloc(XVB);
	const void *src = v;
	int32_t res[4];
	uint32_t sa, sb, i;
	uint64_t probes;
	long long before;

	pb.alloc = &test_alloc_ops;
	pb.alloc_priv = &ta;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&pa, &a), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&pb, &b), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_space(a, &spec, &sa), 0);
	CU_ASSERT_EQUAL(kvmm_keyed_space(b, &spec, &sb), 0);
	for (i = 0; i < 4; i++)
		keys[i] = kkey(900 + i);
	memset(v, 0x5a, XVB);
	CU_ASSERT_EQUAL(kvmm_keyed_put(a, sa, keys, &src, 1, NULL), 1);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), XPAGES);
	CHECK_OK(a);

	/* the three no one stored: a probe each, each way of asking */
	probes = test_stat(b, KVMM_STAT_REMOTE_PROBES);
	before = ta.peak_bytes = ta.live_bytes;
	CU_ASSERT_EQUAL(kvmm_keyed_exists(b, sb, keys + 1, 3, NULL), 0);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_PROBES) - probes, 3);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(b, sb, keys + 1, 3, res), 0);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_PROBES) - probes, 6);
	CU_ASSERT(res[0] == -ENOENT && res[1] == -ENOENT && res[2] == -ENOENT);
	/* with the stored one first: the first pages, then its other pages */
	probes = test_stat(b, KVMM_STAT_REMOTE_PROBES);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(b, sb, keys, 4, res), 1);
	CU_ASSERT(res[0] == 0 && res[1] == -ENOENT && res[2] == -ENOENT && res[3] == -ENOENT);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_PROBES) - probes, 4 + XPAGES - 1);
	probes = test_stat(b, KVMM_STAT_REMOTE_PROBES);
	CU_ASSERT_EQUAL(kvmm_keyed_exists(b, sb, keys, 4, NULL), 1);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_PROBES) - probes, 4 + XPAGES - 1);
	CU_ASSERT(ta.peak_bytes - before <= XSCRATCH);
	CU_ASSERT_EQUAL(ta.live_bytes, before);		/* given back */
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_VALUES), 0);	/* nothing read */
	CHECK_OK(b);
	kvmm_destroy(a);
	kvmm_destroy(b);
	CU_ASSERT_EQUAL(ta.live_blocks, 0);
	free(v);
}

#define GVB		(1ull << 30)	/* the largest value size */
#define KX_MS		60000

/*
 * As uid nobody in its own namespace: KEXISTS of 4 keys no one stored in
 * a space of 1 GiB values, as a run and with an answer each.  Return: 0,
 * or the step that went wrong.
 */
static int exists_attacker(void *arg)
{
	struct kvmm_ring_params rp = { .sq_entries = 4, .buf_size = 65536 };
	struct kvmm_kspace_reg *reg;
	struct kvmm_ring ring;
	struct kvmm_kent *e;
	struct kvmm_key *k;
	struct kvmm_sqe *sqe;
	int32_t sp;
	uint32_t i;

	if (kvmm_ring_connect(arg, &rp, &ring))
		return 10;
	reg = ring.buf;
	memset(reg, 0, sizeof(*reg));
	reg->value_bytes = GVB;
	strcpy(reg->model_id, kmodel);
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 0, 0, sizeof(*reg));
	sqe->ns = getuid();
	sp = hostile_ring1(&ring);
	if (sp < 0)
		return 11;
	k = ring.buf;
	for (i = 0; i < 4; i++)
		k[i] = kkey(4000 + i);
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KEXISTS, 0, 0, 0, 4);
	sqe->arg = (uint32_t)sp;
	if (hostile_ring1(&ring) != 0)
		return 12;
	e = ring.buf;
	for (i = 0; i < 4; i++)
		e[i] = (struct kvmm_kent){ .key = kkey(4000 + i), .res = 12345 };
	sqe = hostile_sqe(&ring);
	kvmm_prep_rw(sqe, KVMM_OP_KEXISTS, 0, 0, 0, 4);
	sqe->arg = (uint32_t)sp;
	sqe->arg2 = KVMM_KEYS_EACH;
	if (hostile_ring1(&ring) != 0)
		return 13;
	for (i = 0; i < 4; i++)
		if (e[i].res != -ENOENT)
			return 14;
	kvmm_ring_exit(&ring);
	return 0;
}

/*
 * The same through kvmmd --ns-per-uid on the suite's cluster: a probe a
 * key (8 in all), and kvmmd's memory afterwards what it was before (not
 * hundreds of MiB a key, nor kept).
 */
static void remote_kvmmd_exists_costs_its_answer(void)
{
	char dir[64], sock[96], out[8192];
	const char *argv[] = { "kvmmd", "--socket", sock, "--ns-per-uid", "--quiet",
			       "--pages", "256", "--page-size", "16", "--layers", "1",
			       "--kv-heads", "1", "--head-dim", "8", "--dtype-bytes", "2",
			       "--max-seqs", "8", "--host-pages", "4096", "--remote", seeds,
			       "--remote-salt", "kx-2", "--model-id", kmodel, NULL };
	const char *stat[] = { "kvmmctl", "stat", "--json", "--socket", sock, NULL };
	uint64_t rss0, rss1;
	json_t *j;
	pid_t pid;

	CU_ASSERT_FATAL(!hostile_tmpdir(dir, sizeof(dir)));
	snprintf(sock, sizeof(sock), "%s/kvmmd.sock", dir);
	pid = hostile_spawn(argv, -1);
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT_FATAL(!hostile_wait_socket(sock, 10000) && !chmod(sock, 0777));
	rss0 = hostile_rss_anon(pid);
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, exists_attacker, sock, KX_MS), 0);
	rss1 = hostile_rss_anon(pid);
	CU_ASSERT(rss0 > 0 && rss1 <= rss0 + (8 << 10));
	CU_ASSERT_EQUAL(hostile_run(stat, out, sizeof(out), 10000), 0);
	j = json_loads(out, 0, NULL);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "remote_probes")), 8);
	json_decref(j);
	CU_ASSERT(hostile_alive(pid));
	kill(pid, SIGTERM);
	CU_ASSERT_EQUAL(hostile_reap(pid, 30000), 0);
	unlink(sock);
	rmdir(dir);
}

/*
 * Under KVMM_REMOTE_WRITE_DEMOTE, background reclaim of the host tier
 * takes keyed values out of the machine too; they were written through
 * when put, so they are not written again, and a get of one brings it
 * back from the cluster.
 */
static void remote_keyed_demote(void)
{
	struct kvmm_params p = remote_params(16, 64, "keyed-demote", 32);
	struct kvmm_ctx *a = NULL;
	int32_t res[32];
	uint32_t sa, good, i, put = 0;
	int ret;

	p.remote_write = KVMM_REMOTE_WRITE_DEMOTE;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &a), 0);
	sa = kspace(a);
	for (i = 0; i < 8; i++) {	/* 4 values of 6 pages a batch: a batch fits */
		ret = kio(a, sa, i * 4, 4, true, res, &good);
		put += ret > 0 ? (uint32_t)ret : 0;
		CU_ASSERT_EQUAL(kvmm_sync(a), 0);
		CHECK_OK(a);
	}
	CU_ASSERT_EQUAL(put, 32);
	CU_ASSERT(test_stat(a, KVMM_STAT_HOST_EVICT_PAGES) > 0);
	CU_ASSERT(test_stat(a, KVMM_STAT_WRITEBACK_RUNS) > 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_DEMOTE_PAGES), 0);
	/* the first ones are gone from here: read back from the cluster */
	CU_ASSERT_EQUAL(kio(a, sa, 0, 4, false, res, &good), 4);
	CU_ASSERT_EQUAL(good, 4);
	CU_ASSERT(test_stat(a, KVMM_STAT_KEYED_REMOTE_GETS) > 0);
	CHECK_OK(a);
	kvmm_destroy(a);
}

/* Another salt sees none of them; misses give their frames back. */
static void remote_keyed_salt(void)
{
	struct kvmm_ctx *a = remote_ctx("keyed-2", 256, NULL);
	struct kvmm_ctx *c = remote_ctx("keyed-2-other", 256, NULL);
	int32_t res[8];
	uint32_t sa, sc, good;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	sa = kspace(a);
	sc = kspace(c);
	CU_ASSERT_EQUAL(kio(a, sa, 100, 4, true, NULL, &good), 4);
	CU_ASSERT_EQUAL(kexists(c, sc, 100, 4, NULL), 0);
	CU_ASSERT_EQUAL(kio(c, sc, 100, 4, false, res, &good), 0);
	CU_ASSERT(res[0] == -ENOENT && res[3] == -ENOENT);
	CU_ASSERT_EQUAL(test_stat(c, KVMM_STAT_HOST_PAGES_FREE), 256);
	CU_ASSERT_EQUAL(test_stat(c, KVMM_STAT_KEYED_VALUES), 0);
	CHECK_OK(c);
	kvmm_destroy(a);
	kvmm_destroy(c);
}

/* Every master's port, as a shell loop's list. */
static int each_master(const char *what)
{
	return sh("%s masters %s | while read port pid; do %s; done", script, cdir, what);
}

/*
 * A value changed on the server is a miss for the reader, counted and
 * deleted; the other values hit.  The cluster is emptied first, so that
 * the one key changed is of this test's values.
 */
static void remote_keyed_corrupt(void)
{
	struct kvmm_ctx *a = remote_ctx("keyed-3", 256, NULL);
	struct kvmm_ctx *b = remote_ctx("keyed-3", 256, NULL);
	int32_t res[4];
	uint32_t sa, sb, good;
	char key[128] = "";

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	sa = kspace(a);
	sb = kspace(b);
	CU_ASSERT_EQUAL(each_master("redis-cli -h 127.0.0.1 -p $port FLUSHALL >/dev/null"), 0);
	CU_ASSERT_EQUAL(kio(a, sa, 200, 4, true, NULL, &good), 4);
	/* one key of one value: a byte of it changed */
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "%s masters %s | while read port pid; do "
			 "redis-cli -h 127.0.0.1 -p $port --scan --pattern 'kvmm:*'; done | "
			 "grep -v ':1$' | head -1", script, cdir);
		CU_ASSERT_EQUAL(sh_line(key, sizeof(key), cmd), 0);
	}
	CU_ASSERT_FATAL(!strncmp(key, "kvmm:{", 6));
	{
		char args[200], out[64];

		snprintf(args, sizeof(args), "SETRANGE '%s' 10 X", key);
		CU_ASSERT_EQUAL(rcli(out, sizeof(out), args), 0);
	}
	CU_ASSERT_EQUAL(kio(b, sb, 200, 4, false, res, &good), 3);
	CU_ASSERT_EQUAL(good, 3);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_CORRUPT), 1);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_KEYED_VALUES), 3);
	CHECK_OK(b);
	/* the bad value is gone from the cluster too: asked again, a miss */
	CU_ASSERT_EQUAL(kexists(b, sb, 200, 4, res), 3);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_CORRUPT), 1);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

/*
 * Through a ring: KEXISTS asks the remote tier with the context's lock
 * dropped, and a KGET of values only the cluster has goes to the I/O
 * worker and completes later, the values stored here after it.
 */
static void remote_keyed_ring(void)
{
	struct kvmm_ctx *a = remote_ctx("keyed-4", 256, NULL);
	struct kvmm_ctx *b = remote_ctx("keyed-4", 256, NULL);
	struct test_kring r;
	struct kvmm_kent *e;
	struct kvmm_key *k;
	uint8_t want[KVB];
	uint32_t sa, good, i;
	int32_t sb;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	sa = kspace(a);
	CU_ASSERT_EQUAL(kio(a, sa, 300, 6, true, NULL, &good), 6);
	test_kring_init(b, &r, 0, 0);
	{
		struct kvmm_kspace_reg *reg = (void *)r.mem;
		struct kvmm_sqe *sqe = TEST_SQE(&r.ring);

		memset(reg, 0, sizeof(*reg));
		reg->value_bytes = KVB;
		snprintf(reg->model_id, sizeof(reg->model_id), "%s", kmodel);
		kvmm_prep_rw(sqe, KVMM_OP_KSPACE, 0, 1, 0, sizeof(*reg));
		sb = test_ring1(&r.ring, NULL);
		CU_ASSERT_FATAL(sb >= 0);
	}
	k = (void *)r.mem;
	for (i = 0; i < 8; i++)
		k[i] = kkey(300 + i);
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KEXISTS, (uint32_t)sb, 8), 6);
	e = (void *)r.mem;
	for (i = 0; i < 8; i++)
		e[i] = (struct kvmm_kent){ .key = kkey(300 + i), .off = 4096 + (uint64_t)i * KVB,
					   .buf = 1, .res = 12345 };
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KGET, (uint32_t)sb, 8), 6);
	for (i = 0; i < 6; i++) {
		CU_ASSERT_EQUAL(e[i].res, 0);
		kstamp(want, 300 + i);
		CU_ASSERT(!memcmp(r.mem + 4096 + (uint64_t)i * KVB, want, KVB));
	}
	CU_ASSERT(e[6].res == -ENOENT && e[7].res == -ENOENT);
	CU_ASSERT_EQUAL(test_stat_locked(b, KVMM_STAT_KEYED_REMOTE_GETS), 6);
	CU_ASSERT_EQUAL(test_stat_locked(b, KVMM_STAT_KEYED_VALUES), 6);
	/* a put through the ring writes through: a third context reads it */
	for (i = 0; i < 2; i++) {
		e[i] = (struct kvmm_kent){ .key = kkey(310 + i), .off = 4096 + (uint64_t)i * KVB,
					   .buf = 1, .res = 12345 };
		kstamp(r.mem + 4096 + (uint64_t)i * KVB, 310 + i);
	}
	CU_ASSERT_EQUAL(test_kring_io(&r, KVMM_OP_KPUT, (uint32_t)sb, 2), 2);
	CU_ASSERT_EQUAL(kexists(a, sa, 310, 2, NULL), 2);
	CU_ASSERT_EQUAL(kio(a, sa, 310, 2, false, NULL, &good), 2);
	CU_ASSERT_EQUAL(good, 2);
	test_kring_exit(&r);	/* the worker's last settle is behind the ring's exit */
	kvmm_lock(b);
	CHECK_OK(b);
	kvmm_unlock(b);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

/* ---- the prefix tree over the remote tier (kvmm_remote_push/fetch) ---- */

/*
 * A context of 32 device pages of 16 tokens, @host host pages (watermarks
 * 4 and 8), an NVMe tier of 64 pages at @nvme (or none), the cluster,
 * remote write policy @write.
 */
static struct kvmm_ctx *tree_ctx_w(const char *salt, uint32_t host, const char *nvme,
				   uint32_t write)
{
	struct kvmm_params p = remote_params(32, 1024, salt, host);
	struct kvmm_ctx *ctx = NULL;

	p.host_wmark_low = 4;
	p.host_wmark_high = 8;
	p.nvme_pages = nvme ? 64 : 0;
	p.nvme_path = nvme;
	p.nvme_flags = KVMM_NVME_REFORMAT;
	p.remote_write = write;
	return kvmm_create(&p, &ctx) ? NULL : ctx;
}

static struct kvmm_ctx *tree_ctx(const char *salt)
{
	return tree_ctx_w(salt, 64, NULL, KVMM_REMOTE_WRITE_NONE);
}

/*
 * Machine A computes a prompt (its KV stamped by token and position) and
 * pushes it; machine B, which never saw it, fetches it to its host tier,
 * MATCHes it there as a host hit, PROMOTEs it to the device, and finds
 * every byte of it as A wrote it.  A prompt that goes on past A's is
 * fetched as far as A had it; another salt fetches nothing.
 */
static void remote_tree_push_fetch(void)
{
	struct kvmm_ctx *a = tree_ctx("tree-1"), *b = tree_ctx("tree-1"), *c = tree_ctx("tree-2");
	uint32_t tok[200];

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	test_tokens(tok, 200, 77);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 136, false), 0);		/* 8 full pages + 8 */
	CU_ASSERT_EQUAL(kvmm_remote_push(a, 0, tok, 136), 128);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 8);
	CU_ASSERT_EQUAL(kvmm_remote_push(a, 0, tok, 136), 128);	/* all there already */
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_SKIPPED), 8);
	CHECK_OK(a);
	/* b: nothing here, 8 pages there (the prompt goes on past them) */
	CU_ASSERT_EQUAL(kvmm_remote_fetch(b, 0, tok, 200), 128);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_HOST_PAGES_CACHED), 8);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_FETCH_TOKENS), 128);
	CHECK_OK(b);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(b, 0, tok, 200), 0);	/* had them all now */
	/* served: matched on the host tier, promoted, KV as a wrote it */
	CU_ASSERT_EQUAL(test_kv_serve(b, tok, 200, true), 128);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_HOST_PROMOTE_PAGES), 8);
	CHECK_OK(b);
	/* and what b computed past them, b pushes: a finds the rest there */
	CU_ASSERT_EQUAL(kvmm_remote_push(b, 0, tok, 200), 192);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(a, 0, tok, 200), 64);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 200, true), 192);
	CHECK_OK(a);
	/* another tenant: nothing */
	CU_ASSERT_EQUAL(kvmm_remote_fetch(c, 0, tok, 200), 0);
	CU_ASSERT_EQUAL(test_stat(c, KVMM_STAT_REMOTE_PROBE_HITS), 0);
	CHECK_OK(c);
	CU_ASSERT_EQUAL(kvmm_remote_push(NULL, 0, tok, 16), -EINVAL);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(a, 0, NULL, 16), -EINVAL);
	{
		struct kvmm_ctx *none = test_ctx(16, 32, 4, 64);	/* no remote tier */

		CU_ASSERT_EQUAL(kvmm_remote_push(none, 0, tok, 16), -EOPNOTSUPP);
		CU_ASSERT_EQUAL(kvmm_remote_fetch(none, 0, tok, 16), -EOPNOTSUPP);
		kvmm_destroy(none);
	}
	kvmm_destroy(a);
	kvmm_destroy(b);
	kvmm_destroy(c);
}

/* A page changed on the server ends the fetch there: nothing wrong is served. */
static void remote_tree_corrupt(void)
{
	struct kvmm_ctx *a = tree_ctx("tree-3"), *b = tree_ctx("tree-3");
	struct kvmm_remote_page pg[8];
	uint32_t tok[128];
	char key[64], args[160], out[64];
	uint64_t seed[2];
	void *priv;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	test_tokens(tok, 128, 78);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 128, false), 0);
	CU_ASSERT_EQUAL(kvmm_remote_push(a, 0, tok, 128), 128);
	/* the names a page 5 of that prefix has, as any client with its salt sees them */
	{
		char err[256];
		struct kvmm_remote_cfg cfg = {
			.seeds = seeds, .salt = "tree-3", .model_id = kmodel,
			.page_size = 16, .timeout_ms = 1500, .err = err, .err_len = sizeof(err),
		};
		struct kvmm_params p = test_params(16, 32, 4, 1024);

		cfg.model = p.model;
		cfg.page_bytes = kvmm_cell_bytes(&p.model) * 16;
		CU_ASSERT_EQUAL_FATAL(ops->init(&cfg, &priv), 0);
	}
	kvmm_remote_ns_seed(0, seed);	/* namespace 0's names */
	ops->chain(priv, seed, tok, 8, pg);
	key_name(priv, key, &pg[5], 0);
	snprintf(args, sizeof(args), "SETRANGE '%s' 3 X", key);
	CU_ASSERT_EQUAL(rcli(out, sizeof(out), args), 0);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(b, 0, tok, 128), 80);
	CU_ASSERT_EQUAL(test_stat(b, KVMM_STAT_REMOTE_CORRUPT), 1);
	CU_ASSERT_EQUAL(test_kv_serve(b, tok, 128, true), 80);
	CHECK_OK(b);
	ops->exit(priv);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

/*
 * KVMM_REMOTE_WRITE_COMMIT: a commit queues the write of its new whole
 * pages and returns; the worker writes them with the prefix locked, and
 * the next sync settles it.  A prefix written once is not asked about
 * again; one that goes on writes only its new pages.  Another machine
 * fetches all of them, byte for byte.
 */
static void remote_write_commit(void)
{
	struct kvmm_ctx *a = tree_ctx_w("wt-1", 64, NULL, KVMM_REMOTE_WRITE_COMMIT);
	struct kvmm_ctx *b = tree_ctx("wt-1");
	uint64_t probes;
	uint32_t tok[200];

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	test_tokens(tok, 200, 81);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 136, false), 0);	/* 8 whole pages */
	CHECK_OK(a);		/* the push in flight holds its lock */
	CU_ASSERT_EQUAL(kvmm_sync(a), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUSH_TOKENS), 128);
	CHECK_OK(a);
	/* served again and committed: nothing written, nothing asked */
	probes = test_stat(a, KVMM_STAT_REMOTE_PROBES);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 136, false), 128);
	CU_ASSERT_EQUAL(kvmm_sync(a), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 8);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PROBES), probes);
	/* a prompt that goes on: its 4 new pages */
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 200, false), 128);
	CU_ASSERT_EQUAL(kvmm_sync(a), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 12);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_SKIPPED), 0);
	CHECK_OK(a);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(b, 0, tok, 200), 192);
	CU_ASSERT_EQUAL(test_kv_serve(b, tok, 200, true), 192);
	CHECK_OK(b);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

/*
 * Requests with prompts of their own (4 pages each), 12 of them through a
 * device of 32 pages and a host tier of 16: reclaim demotes the oldest to
 * the host tier, and background reclaim takes the host tier's oldest out
 * of the machine.  With KVMM_REMOTE_WRITE_DEMOTE every page that leaves
 * the host tier that way is written first (host frames held until it is),
 * and another machine is served all of them.  With an NVMe tier below,
 * the pages written down to it are written to the cluster too.
 */
static void write_demote_run(const char *salt, const char *nvme)
{
	struct kvmm_ctx *a = tree_ctx_w(salt, 16, nvme, KVMM_REMOTE_WRITE_DEMOTE);
	struct kvmm_ctx *b = tree_ctx(salt);
	uint32_t tok[12][64], i, fetched = 0;
	uint64_t left;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	for (i = 0; i < 12; i++) {
		test_tokens(tok[i], 64, 900 + i + (nvme ? 50 : 0));
		CU_ASSERT_EQUAL(test_kv_serve(a, tok[i], 64, false), 0);
		CU_ASSERT_EQUAL(kvmm_sync(a), 0);	/* background reclaim keeps up */
		CHECK_OK(a);
	}
	left = nvme ? test_stat(a, KVMM_STAT_NVME_DEMOTE_PAGES) :
		      test_stat(a, KVMM_STAT_HOST_EVICT_PAGES);
	CU_ASSERT(left >= 8);
	CU_ASSERT(test_stat(a, KVMM_STAT_WRITEBACK_RUNS) > 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_DEMOTE_PAGES), left);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), left);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_HOST_PAGES_WRITEBACK), 0);
	CU_ASSERT(test_stat(a, KVMM_STAT_HOST_PAGES_FREE) >= 4);
	/* b is served every prompt the cluster has, as a computed it */
	for (i = 0; i < 12; i++) {
		int got = kvmm_remote_fetch(b, 0, tok[i], 64);

		CU_ASSERT(got == 0 || got == 64);
		if (got <= 0)
			continue;
		fetched += (uint32_t)got / 16;
		CU_ASSERT_EQUAL(test_kv_serve(b, tok[i], 64, true), 64);
		CHECK_OK(b);
	}
	CU_ASSERT_EQUAL(fetched, left);
	/* and the oldest, gone from a, comes back to a from there */
	if (!nvme) {
		CU_ASSERT_EQUAL(kvmm_prefix_lookup(a, 0, tok[0], 64), 0);
		CU_ASSERT_EQUAL(kvmm_remote_fetch(a, 0, tok[0], 64), 64);
		CU_ASSERT_EQUAL(test_kv_serve(a, tok[0], 64, true), 64);
	}
	CHECK_OK(a);
	kvmm_destroy(a);
	kvmm_destroy(b);
}

static void remote_write_demote(void)
{
	write_demote_run("demote-1", NULL);
}

/*
 * Host pages that do not verify as background reclaim takes them out of
 * the machine (memory corrupted after they were sealed) are never
 * written to the cluster: they are dropped, and counted as checksum
 * failures of the host tier.
 */
static void remote_write_demote_corrupt(void)
{
	struct kvmm_host_arg host = { .flip_every = 1 };
	struct kvmm_params p = remote_params(32, 1024, "demote-bad", 16);
	struct kvmm_ctx *a = NULL;
	uint32_t tok[64], i;

	p.host_wmark_low = 4;
	p.host_wmark_high = 8;
	p.host_arg = &host;
	p.remote_write = KVMM_REMOTE_WRITE_DEMOTE;
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &a), 0);
	for (i = 0; i < 12; i++) {
		test_tokens(tok, 64, 970 + i);
		CU_ASSERT_EQUAL(test_kv_serve(a, tok, 64, false), 0);
		CU_ASSERT_EQUAL(kvmm_sync(a), 0);
		CHECK_OK(a);
	}
	CU_ASSERT(test_stat(a, KVMM_STAT_HOST_EVICT_PAGES) >= 8);
	CU_ASSERT(test_stat(a, KVMM_STAT_HOST_CSUM_FAIL) > 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_DEMOTE_PAGES), 0);
	kvmm_destroy(a);
}

static void remote_write_demote_nvme(void)
{
	const char *path = test_tmp_file("remote-demote.nvme");

	write_demote_run("demote-2", path);
	unlink(path);
}

/*
 * A write-through to a cluster whose masters are all stopped: the commit
 * returns before the batch's deadline; the write times out on the
 * worker; the prefix is unlocked and not taken as written, so the next
 * commit over it, with the cluster back, writes it.
 */
static void remote_write_stalled(void)
{
	struct kvmm_ctx *a = tree_ctx_w("wt-stall", 64, NULL, KVMM_REMOTE_WRITE_COMMIT);
	uint32_t tok[64], i;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	test_tokens(tok, 64, 83);
	CU_ASSERT_EQUAL(kvmm_remote_fetch(a, 0, tok, 64), 0);	/* connected, slot map read */
	/* a stopped master answers no "masters" query: remember them */
	CU_ASSERT_EQUAL(sh("%s masters %s > %s/stopped", script, cdir, cdir), 0);
	CU_ASSERT_EQUAL(sh("while read port pid; do kill -STOP $pid; done < %s/stopped", cdir), 0);
	CU_ASSERT_EQUAL(test_kv_serve(a, tok, 64, false), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_TIMEOUTS), 0);	/* not waited for */
	CHECK_OK(a);
	CU_ASSERT_EQUAL(kvmm_sync(a), 0);
	CU_ASSERT(test_stat(a, KVMM_STAT_REMOTE_TIMEOUTS) > 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 0);
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_PAGES_PROTECTED), 0);
	CHECK_OK(a);
	CU_ASSERT_EQUAL(sh("while read port pid; do kill -CONT $pid; done < %s/stopped", cdir), 0);
	CU_ASSERT_EQUAL(sh("%s wait %s", script, cdir), 0);
	/* a write may still meet the failover's last redirections: retried */
	for (i = 0; i < 10 && test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES) < 4; i++) {
		CU_ASSERT_EQUAL(test_kv_serve(a, tok, 64, false), 64);
		CU_ASSERT_EQUAL(kvmm_sync(a), 0);
		if (test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES) < 4)
			fprintf(stderr, "\n  write %u after the stall: %llu of 4 pages ", i,
				(unsigned long long)test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES));
		usleep(200000);
	}
	CU_ASSERT_EQUAL(test_stat(a, KVMM_STAT_REMOTE_PUT_PAGES), 4);
	CHECK_OK(a);
	kvmm_destroy(a);
}

/*
 * Two kvmm-engine processes over one cluster: the second, with a cold
 * cache of its own, is served what the first pushed (through its host
 * tier), and its hit rate shows it.
 */
static double engine_run(const char *json, const char *salt, uint64_t *remote_tokens)
{
	const char *argv[] = { "kvmm-engine", "--requests", "120", "--seed", "5",
			       "--host-pages", "2048", "--remote", seeds, "--remote-salt", salt,
			       "--quiet", "--json", json, NULL };
	json_error_t jerr;
	json_t *j, *res, *tiers;
	double rate = -1;
	int st = hostile_run(argv, NULL, 0, 120000);

	CU_ASSERT_EQUAL(st, 0);
	j = json_load_file(json, 0, &jerr);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	res = json_object_get(j, "results");
	tiers = json_object_get(res, "tiers");
	CU_ASSERT_PTR_NOT_NULL_FATAL(tiers);
	*remote_tokens = (uint64_t)json_integer_value(json_object_get(tiers, "remote_tokens"));
	rate = json_real_value(json_object_get(res, "hit_rate"));
	CU_ASSERT(json_is_true(json_object_get(res, "check_ok")));
	json_decref(j);
	return rate;
}

static void remote_two_engines(void)
{
	const char *json = test_tmp_file("engine.json");
	uint64_t first_remote, second_remote;
	double first, second;

	first = engine_run(json, "engines-1", &first_remote);
	second = engine_run(json, "engines-1", &second_remote);
	fprintf(stderr, "\n  hit rate: one engine %.4f, the second over the cluster %.4f "
		"(%llu tokens from the remote tier) ", first, second,
		(unsigned long long)second_remote);
	CU_ASSERT_EQUAL(first_remote, 0);
	CU_ASSERT(second_remote > 0);
	CU_ASSERT(second > first);
	unlink(json);
}

static void remote_keyed_params(void)
{
	struct kvmm_params p = test_params(16, 16, 4, 64);
	struct kvmm_ctx *ctx = NULL;
	struct test_log log = { 0 };

	p.log = test_log_fn;
	p.log_priv = &log;
	p.remote = seeds;		/* no host tier */
	CU_ASSERT_EQUAL(kvmm_create(&p, &ctx), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "host_pages"));
	p.host_pages = 64;
	p.remote = "127.0.0.1:1";	/* nobody there */
	p.remote_timeout_ms = 300;
	CU_ASSERT(kvmm_create(&p, &ctx) < 0);
	CU_ASSERT_PTR_NULL(ctx);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "CLUSTER SLOTS"));
	p.remote = "not-a-seed";
	CU_ASSERT(kvmm_create(&p, &ctx) < 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "bad seed"));
}

int register_remote_suite(void)
{
	CU_pSuite s;

	if (system("command -v redis-server >/dev/null 2>&1 && "
		   "command -v redis-cli >/dev/null 2>&1")) {
		fprintf(stderr, "remote: suite not run: redis-server/redis-cli not installed "
			"(apt-get install redis-server redis-tools)\n");
		return 0;
	}
	s = CU_add_suite("remote", suite_init, suite_clean);
	if (!s)
		return -1;
	ADD_TEST(s, remote_bad_config);
	ADD_TEST(s, remote_roundtrip);
	ADD_TEST(s, remote_auth);
	ADD_TEST(s, remote_identity);
	ADD_TEST(s, remote_value_size);
	ADD_TEST(s, remote_two_processes);
	ADD_TEST(s, remote_corrupt_value);
	ADD_TEST(s, remote_part_deleted);
	ADD_TEST(s, remote_crafted_value);
	ADD_TEST(s, remote_flushall);
	ADD_TEST(s, remote_client_killed);
	ADD_TEST(s, remote_keyed_params);
	ADD_TEST(s, remote_keyed_shared);
	ADD_TEST(s, remote_keyed_salt);
	ADD_TEST(s, remote_keyed_corrupt);
	ADD_TEST(s, remote_keyed_demote);
	ADD_TEST(s, remote_keyed_ring);
	ADD_TEST(s, remote_keyed_exists_follows_answer);
	ADD_TEST(s, remote_kvmmd_exists_costs_its_answer);
	ADD_TEST(s, remote_tree_push_fetch);
	ADD_TEST(s, remote_tree_corrupt);
	ADD_TEST(s, remote_write_commit);
	ADD_TEST(s, remote_write_demote);
	ADD_TEST(s, remote_write_demote_nvme);
	ADD_TEST(s, remote_write_demote_corrupt);
	ADD_TEST(s, remote_two_engines);
	ADD_TEST(s, remote_master_stopped);
	ADD_TEST(s, remote_master_killed);
	ADD_TEST(s, remote_write_stalled);
	return 0;
}

#else /* !CONFIG_KVMM_HIREDIS */

int register_remote_suite(void)
{
	fprintf(stderr, "remote: suite not run: built without hiredis (apt-get install libhiredis-dev)\n");
	return 0;
}

#endif
