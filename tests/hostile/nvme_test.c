// SPDX-License-Identifier: MIT
/*
 * tests/hostile/nvme_test.c - a careless operator and the NVMe tier's
 * file: a second kvmmd on a file in use, a restart under another model,
 * a damaged superblock.  Each is the real kvmmd, started as the operator
 * would; the one that must be refused has to exit (non-zero, saying why)
 * before its deadline instead of serving, and a kvmmd already serving
 * must go on and stop cleanly, its invariant check included (kvmmd exits
 * 1 when kvmm_check() fails at exit).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include <libkvmm.h>

#include "../helpers.h"
#include "hostile.h"

#define DEADLINE_MS	10000	/* for kvmmd to start, or to refuse */

struct nvme_fixture {
	char dir[64];
	char file[128];		/* the NVMe tier's */
	char sock[2][128];
};

static int fixture_init(struct nvme_fixture *f)
{
	int ret = hostile_tmpdir(f->dir, sizeof(f->dir));

	if (ret)
		return ret;
	snprintf(f->file, sizeof(f->file), "%s/kv.nvme", f->dir);
	snprintf(f->sock[0], sizeof(f->sock[0]), "%s/a.sock", f->dir);
	snprintf(f->sock[1], sizeof(f->sock[1]), "%s/b.sock", f->dir);
	return 0;
}

static void fixture_exit(struct nvme_fixture *f)
{
	unlink(f->file);
	unlink(f->sock[0]);
	unlink(f->sock[1]);
	rmdir(f->dir);
}

/*
 * argv of a small kvmmd on socket @s of @f with an NVMe tier in @f->file,
 * model @model (NULL: none), then @extra (NULL-terminated, may be NULL).
 */
static void kvmmd_argv(const char **argv, const struct nvme_fixture *f, int s,
		       const char *model, const char *const *extra)
{
	static const char *const base[] = {
		"kvmmd", "--page-size", "16", "--pages", "64", "--layers", "2",
		"--kv-heads", "1", "--head-dim", "64", "--max-seqs", "8",
		"--max-seq-len", "1024", "--host-pages", "16", "--nvme-pages", "64",
	};
	size_t n = 0, i;

	for (i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		argv[n++] = base[i];
	argv[n++] = "--socket";
	argv[n++] = f->sock[s];
	argv[n++] = "--nvme-file";
	argv[n++] = f->file;
	if (model) {
		argv[n++] = "--model-id";
		argv[n++] = model;
	}
	for (i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
}

/* Start a kvmmd that must serve; Return: its pid, or -1 (it did not). */
static pid_t kvmmd_start(const struct nvme_fixture *f, int s, const char *model,
			 const char *const *extra)
{
	const char *argv[40];
	pid_t pid;

	kvmmd_argv(argv, f, s, model, extra);
	pid = hostile_spawn(argv, -1);
	if (pid <= 0)
		return -1;
	if (hostile_wait_socket(f->sock[s], DEADLINE_MS)) {
		kill(pid, SIGKILL);
		hostile_reap(pid, DEADLINE_MS);
		return -1;
	}
	return pid;
}

/*
 * Stop a serving kvmmd: it must exit 0, its invariant check passed.  kvmmd
 * blocks SIGTERM before anything else, so one sent at any time is taken.
 */
static int kvmmd_stop(pid_t pid)
{
	int st;

	kill(pid, SIGTERM);
	st = hostile_reap(pid, DEADLINE_MS);
	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		hostile_reap(pid, DEADLINE_MS);
	}
	return st;
}

/*
 * A kvmmd that must serve and then stop cleanly, as an operator's start
 * and stop.  Return: whether it served (the test goes on only then).
 */
static bool kvmmd_cycle(const struct nvme_fixture *f, int s, const char *model,
			const char *const *extra)
{
	pid_t pid = kvmmd_start(f, s, model, extra);

	CU_ASSERT(pid > 0);
	if (pid <= 0)
		return false;
	CU_ASSERT_EQUAL(kvmmd_stop(pid), 0);
	return true;
}

/* Run a kvmmd that must refuse: Return: its exit status, @out its words. */
static int kvmmd_refused(const struct nvme_fixture *f, int s, const char *model,
			 const char *const *extra, char *out, size_t len)
{
	const char *argv[40];

	kvmmd_argv(argv, f, s, model, extra);
	return hostile_run(argv, out, len, DEADLINE_MS);
}

/* Flip bit @bit of byte @at of @path. */
static void flip_bit(const char *path, off_t at, unsigned int bit)
{
	int fd = open(path, O_RDWR);
	unsigned char c = 0;

	CU_ASSERT(fd >= 0);
	if (fd < 0)
		return;
	CU_ASSERT_EQUAL(pread(fd, &c, 1, at), 1);
	c ^= (unsigned char)(1u << bit);
	CU_ASSERT_EQUAL(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

static void read_super(const char *path, char *buf)
{
	int fd = open(path, O_RDONLY);

	memset(buf, 0, 4096);
	CU_ASSERT(fd >= 0);
	if (fd < 0)
		return;
	CU_ASSERT_EQUAL(pread(fd, buf, 4096, 0), 4096);
	close(fd);
}

/*
 * Two kvmmd on one --nvme-file: the second exits 1 saying the file is in
 * use, before it serves; the first goes on serving and stops cleanly; once
 * it is gone the file may be taken again.
 */
static void test_second_kvmmd_on_file_refused(void)
{
	const char *const stat_argv[] = { "kvmmctl", "--socket", NULL, "stat", NULL };
	const char *ctl[5];
	struct nvme_fixture f;
	char out[4096];
	pid_t first;
	int st;

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	first = kvmmd_start(&f, 0, "model-a", NULL);
	CU_ASSERT(first > 0);
	if (first <= 0)
		goto out;

	st = kvmmd_refused(&f, 1, "model-a", NULL, out, sizeof(out));
	CU_ASSERT_EQUAL(st, 1);
	CU_ASSERT(strstr(out, f.file) != NULL);
	CU_ASSERT(strstr(out, "in use") != NULL);
	CU_ASSERT(access(f.sock[1], F_OK) != 0);	/* it never served */
	/* nor does asking to reformat take a file in use */
	st = kvmmd_refused(&f, 1, "model-a", (const char *const[]){ "--nvme-reformat", NULL },
			   out, sizeof(out));
	CU_ASSERT_EQUAL(st, 1);
	CU_ASSERT(strstr(out, "in use") != NULL);

	/* the first is alive and serving */
	CU_ASSERT(hostile_alive(first));
	memcpy(ctl, stat_argv, sizeof(ctl));
	ctl[2] = f.sock[0];
	CU_ASSERT_EQUAL(hostile_run(ctl, NULL, 0, DEADLINE_MS), 0);
	CU_ASSERT_EQUAL(kvmmd_stop(first), 0);

	/* the lock went with it */
	kvmmd_cycle(&f, 1, "model-a", NULL);
out:
	fixture_exit(&f);
}

/*
 * A restart under another --model-id is refused, naming both models, and
 * the file is left as it was; --nvme-reformat gives the new model a cold
 * tier, after which the old model is the one refused.
 */
static void test_other_model_refused(void)
{
	const char *const reformat[] = { "--nvme-reformat", NULL };
	struct nvme_fixture f;
	char out[4096], before[4096], after[4096], longid[KVMM_MODEL_ID_MAX + 2];

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	if (!kvmmd_cycle(&f, 0, "model-a", NULL))
		goto out;
	read_super(f.file, before);

	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-b", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "'model-a'") != NULL);
	CU_ASSERT(strstr(out, "'model-b'") != NULL);
	CU_ASSERT(strstr(out, "refusing") != NULL);
	/* no model id at all is not model-a either (and kvmmd warns) */
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, NULL, NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "without --model-id") != NULL);
	read_super(f.file, after);
	CU_ASSERT_EQUAL(memcmp(before, after, sizeof(before)), 0);
	/* an id the file cannot record is a usage error */
	memset(longid, 'm', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, longid, NULL, out, sizeof(out)), 2);
	CU_ASSERT(strstr(out, "kvmmd: --model-id: ") != NULL);
	CU_ASSERT(strstr(out, "longer than 255 bytes") != NULL);

	if (!kvmmd_cycle(&f, 0, "model-b", reformat))
		goto out;
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "'model-b'") != NULL);
out:
	fixture_exit(&f);
}

/*
 * One flipped bit in the superblock: kvmmd refuses the file, saying the
 * superblock is damaged, whether it asks for the file's geometry or
 * another one (which used to reformat it silently), and leaves it alone.
 */
static void test_damaged_superblock_refused(void)
{
	const char *const page32[] = { "--page-size", "32", NULL };
	const char *const reformat[] = { "--nvme-reformat", NULL };
	struct nvme_fixture f;
	char out[4096], before[4096], after[4096];

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	if (!kvmmd_cycle(&f, 0, "model-a", NULL))
		goto out;
	flip_bit(f.file, 33, 2);	/* in the epoch */
	read_super(f.file, before);

	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "superblock is damaged") != NULL);
	CU_ASSERT(strstr(out, f.file) != NULL);
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", page32, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "superblock is damaged") != NULL);
	read_super(f.file, after);
	CU_ASSERT_EQUAL(memcmp(before, after, sizeof(before)), 0);

	/* the operator's way out: a cold start */
	if (!kvmmd_cycle(&f, 0, "model-a", reformat))
		goto out;
	if (!kvmmd_cycle(&f, 0, "model-a", NULL))
		goto out;
out:
	fixture_exit(&f);
}

/*
 * A kvmmd that dies without its exit path (SIGKILL, a crash) does not keep
 * the file from the next one: the lock goes with the process.
 */
static void test_killed_kvmmd_releases_file(void)
{
	struct nvme_fixture f;
	int i;

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	for (i = 0; i < 5; i++) {
		pid_t pid = kvmmd_start(&f, 0, "model-a", NULL);

		CU_ASSERT(pid > 0);
		if (pid <= 0)
			break;
		kill(pid, SIGKILL);
		CU_ASSERT_EQUAL(hostile_reap(pid, DEADLINE_MS), 128 + SIGKILL);
		unlink(f.sock[0]);
	}
	fixture_exit(&f);
}

/*
 * Keep kvmmd's NVMe tier busy until it goes away: cache prefixes and
 * reclaim them, so that demotions and background writeback always have
 * io_uring writes in flight.  Runs in a forked child; exits when kvmmd
 * is gone.
 */
static void nvme_traffic(const char *sock)
{
	struct kvmm_ring_params rp = { .sq_entries = 8, .buf_size = 65536 };
	struct kvmm_ring ring;
	uint32_t *tok, round, i;
	int32_t seq;

	if (kvmm_ring_connect(sock, &rp, &ring))
		_exit(1);
	tok = ring.buf;
	for (round = 0;; round++) {
		for (i = 0; i < 512; i++)
			tok[i] = round * 512 + i + 1;
		kvmm_prep_open(child_sqe(&ring, __FILE__, __LINE__), 0);
		seq = hostile_ring1(&ring);
		if (seq < 0)
			_exit(0);
		kvmm_prep_extend(child_sqe(&ring, __FILE__, __LINE__), (uint32_t)seq, 512, 0);
		if (hostile_ring1(&ring) < 0)
			_exit(0);
		kvmm_prep_close(child_sqe(&ring, __FILE__, __LINE__), (uint32_t)seq, 0, 0, 512);
		if (hostile_ring1(&ring) < 0)
			_exit(0);
		kvmm_prep_reclaim(child_sqe(&ring, __FILE__, __LINE__), 32);
		if (hostile_ring1(&ring) < 0)
			_exit(0);
	}
}

/*
 * kill -9 of a kvmmd in the middle of NVMe I/O, then an immediate restart
 * on the same file, 20 times: every restart must serve.  The killed
 * process's in-flight io_uring requests hold the open file, and its lock,
 * for a moment after it is reaped; the restart waits for it (boundedly)
 * instead of failing with EBUSY.
 */
static void test_restart_after_kill_during_io(void)
{
	const char *const big[] = { "--pages", "128", "--host-pages", "32", "--nvme-pages",
				    "4096", NULL };
	struct nvme_fixture f;
	int i, served = 0;

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	for (i = 0; i < 20; i++) {
		pid_t pid = kvmmd_start(&f, 0, "model-a", big), traffic;

		CU_ASSERT(pid > 0);
		if (pid <= 0)
			break;
		served++;
		traffic = fork();
		if (!traffic)
			nvme_traffic(f.sock[0]);
		usleep(50000 + 10000 * (i % 5));	/* writes in flight by now */
		kill(pid, SIGKILL);
		CU_ASSERT_EQUAL(hostile_reap(pid, DEADLINE_MS), 128 + SIGKILL);
		if (traffic > 0)
			CU_ASSERT(hostile_reap(traffic, DEADLINE_MS) >= 0);
		unlink(f.sock[0]);
	}
	CU_ASSERT_EQUAL(served, 20);
	fixture_exit(&f);
}

/* As uid nobody in the shared directory: a link to @arg's target, planted. */
static int plant_link(void *arg)
{
	const char *const *p = arg;

	return symlink(p[1], p[0]) ? 60 : 0;
}

/* As uid nobody: an empty file of its own at @arg, mode 666, left for kvmmd. */
static int plant_file(void *arg)
{
	int fd = open(arg, O_RDWR | O_CREAT | O_EXCL, 0666);

	if (fd < 0 || fchmod(fd, 0666))
		return 61;
	close(fd);
	return 0;
}

static off_t file_bytes(const char *path)
{
	struct stat st;

	return lstat(path, &st) ? -1 : st.st_size;
}

/*
 * The operator names an --nvme-file in a directory every user may write
 * (not sticky, so the kernel's protected_symlinks does not step in).
 * Whatever another user leaves there, kvmmd (root) exits 1 saying why
 * instead of using it: a symbolic link (its target is
 * not created), a file of that user's (who would read every tenant's KV
 * and write what is served), a file of root's that others may read, a
 * file of data whose first 4 KiB happen to be zeros (formatted only with
 * --nvme-reformat), a procfs file that says it is empty.
 */
static void test_foreign_files_refused(void)
{
	const char *const reformat[] = { "--nvme-reformat", NULL };
	struct nvme_fixture f;
	char out[4096], target[160], zeros[4096] = { 0 }, data[256 * 1024];
	const char *link[2] = { NULL, target };
	struct nvme_fixture proc;
	int fd;

	CU_ASSERT_EQUAL_FATAL(fixture_init(&f), 0);
	CU_ASSERT_EQUAL_FATAL(chmod(f.dir, 0777), 0);	/* not sticky: links are followed */
	snprintf(target, sizeof(target), "%s.victim", f.dir);	/* root's directory */
	unlink(target);

	link[0] = f.file;
	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, plant_link, link, DEADLINE_MS), 0);
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "is a symbolic link") != NULL);
	CU_ASSERT_EQUAL(file_bytes(target), -1);		/* never created */
	unlink(f.file);

	CU_ASSERT_EQUAL(hostile_child(HOSTILE_NOBODY, plant_file, f.file, DEADLINE_MS), 0);
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "is owned by uid 65534") != NULL);
	CU_ASSERT_EQUAL(file_bytes(f.file), 0);			/* left alone */
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", reformat, out, sizeof(out)), 1);
	CU_ASSERT_EQUAL(file_bytes(f.file), 0);
	unlink(f.file);

	/* root's own file, but readable by all */
	fd = open(f.file, O_RDWR | O_CREAT | O_EXCL, 0600);
	CU_ASSERT(fd >= 0);
	CU_ASSERT_EQUAL(fchmod(fd, 0644), 0);
	close(fd);
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "(mode 644)") != NULL);
	unlink(f.file);

	/* data behind 4 KiB of zeros: not kvmm's, not formatted */
	memset(data, 0x5a, sizeof(data));
	fd = open(f.file, O_RDWR | O_CREAT | O_EXCL, 0600);
	CU_ASSERT(fd >= 0);
	CU_ASSERT_EQUAL(pwrite(fd, zeros, sizeof(zeros), 0), (ssize_t)sizeof(zeros));
	CU_ASSERT_EQUAL(pwrite(fd, data, sizeof(data), sizeof(zeros)), (ssize_t)sizeof(data));
	close(fd);
	CU_ASSERT_EQUAL(kvmmd_refused(&f, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "not recognisably a kvmm file") != NULL);
	CU_ASSERT(strstr(out, "--nvme-reformat") != NULL);
	fd = open(f.file, O_RDONLY);
	CU_ASSERT_EQUAL(pread(fd, out, sizeof(out), sizeof(zeros) + 1000), (ssize_t)sizeof(out));
	CU_ASSERT_EQUAL(memcmp(out, data, sizeof(out)), 0);	/* untouched */
	close(fd);
	kvmmd_cycle(&f, 0, "model-a", reformat);		/* the operator's say-so */
	kvmmd_cycle(&f, 0, "model-a", NULL);

	/* procfs: a file that reports 0 bytes is not an empty file */
	proc = f;
	snprintf(proc.file, sizeof(proc.file), "/proc/self/mem");
	CU_ASSERT_EQUAL(kvmmd_refused(&proc, 0, "model-a", NULL, out, sizeof(out)), 1);
	CU_ASSERT(strstr(out, "is on procfs") != NULL);
	unlink(target);
	fixture_exit(&f);
}

int register_hostile_nvme_suite(void)
{
	CU_pSuite s = CU_add_suite("kvmm_hostile_nvme", NULL, NULL);

	if (!s)
		return -1;
	ADD_TEST(s, test_second_kvmmd_on_file_refused);
	ADD_TEST(s, test_other_model_refused);
	ADD_TEST(s, test_damaged_superblock_refused);
	ADD_TEST(s, test_killed_kvmmd_releases_file);
	ADD_TEST(s, test_restart_after_kill_during_io);
	ADD_TEST(s, test_foreign_files_refused);
	return 0;
}
