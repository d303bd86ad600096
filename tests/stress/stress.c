// SPDX-License-Identifier: MIT
/*
 * tests/stress/stress.c - kvmm-stress: rings served to many processes at
 * once, clients killed at random points, and nothing may leak.
 *
 *   kvmm-stress [-k KILLS] [-c CLIENTS] [-b BINDIR]
 *
 * The server runs in this process (its threads are what ThreadSanitizer
 * watches under SAN=thread).  CLIENTS kvmm-stress-client processes run at
 * all times, each submitting random commands flat out; every few
 * milliseconds one is killed with SIGKILL and replaced, until KILLS kills
 * (default 120); some finish on their own first.  kvmmctl runs beside
 * them reading stat, tree and seqs.  Afterwards no sequence may be open
 * and no page owned, locked or pinned, and kvmm_check() must pass.
 * Prints CUnit's summary and "N passed, N failed".
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "../helpers.h"

extern char **environ;

static unsigned kills_wanted = 120, nclients = 4;
static const char *bindir = ".";
static char sock[108];

static pid_t spawn(char *const argv[])
{
	pid_t pid;

	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ))
		return -1;
	return pid;
}

static pid_t spawn_client(uint64_t seed)
{
	char path[512], s[32], ops[16];
	char *argv[] = { path, sock, s, ops, NULL };

	snprintf(path, sizeof(path), "%s/kvmm-stress-client", bindir);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
	snprintf(ops, sizeof(ops), "%u", 200 + (unsigned)(seed % 5000));
	return spawn(argv);
}

static pid_t spawn_ctl(unsigned what)
{
	static char *const cmds[][4] = {
		{ "stat", NULL }, { "tree", "--limit", "50", NULL }, { "seqs", NULL },
		{ "--json", "stat", NULL },
	};
	char path[512], *argv[8] = { path, "--socket", sock };
	int i;

	snprintf(path, sizeof(path), "%s/../bin/kvmmctl", bindir);
	for (i = 0; i < 4 && cmds[what % 4][i]; i++)
		argv[3 + i] = cmds[what % 4][i];
	argv[3 + i] = NULL;
	return spawn(argv);
}

static void stress_kill_clients_nothing_leaks(void)
{
	struct kvmm_params p = test_params(4, 2048, 64, 512);
	pid_t *pids = calloc(nclients, sizeof(*pids)), ctl = -1;
	unsigned kills = 0, clean = 0, failed = 0, ctl_runs = 0, ctl_fail = 0, i;
	struct kvmm_server *srv;
	struct kvmm_ctx *ctx;
	uint64_t seed = 1;
	int status;

	snprintf(sock, sizeof(sock), "/tmp/kvmm-stress-%d.sock", (int)getpid());
	CU_ASSERT_EQUAL_FATAL(kvmm_create(&p, &ctx), 0);
	CU_ASSERT_EQUAL_FATAL(kvmm_server_start(ctx, sock, 0, &srv), 0);
	srand(12345);
	while (kills < kills_wanted) {
		struct timespec ts = { 0, (2 + rand() % 20) * 1000000L };

		for (i = 0; i < nclients; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
				if (WIFEXITED(status) && !WEXITSTATUS(status))
					clean++;
				else
					failed++;
				pids[i] = 0;
			}
			if (pids[i] <= 0)
				pids[i] = spawn_client(seed++);
			CU_ASSERT_FATAL(pids[i] > 0);
		}
		if (ctl > 0 && waitpid(ctl, &status, WNOHANG) == ctl) {
			ctl_fail += !WIFEXITED(status) || WEXITSTATUS(status);
			ctl = -1;
		}
		if (ctl <= 0) {
			ctl = spawn_ctl(ctl_runs++);
			CU_ASSERT_FATAL(ctl > 0);
		}
		nanosleep(&ts, NULL);
		i = (unsigned)rand() % nclients;
		if (pids[i] > 0 && !kill(pids[i], SIGKILL)) {
			waitpid(pids[i], &status, 0);
			if (WIFSIGNALED(status))
				kills++;
			else if (WIFEXITED(status) && !WEXITSTATUS(status))
				clean++;
			else
				failed++;
			pids[i] = 0;
		}
	}
	for (i = 0; i < nclients; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status, 0);
		}
	}
	if (ctl > 0) {
		waitpid(ctl, &status, 0);
		ctl_fail += !WIFEXITED(status) || WEXITSTATUS(status);
	}
	for (i = 0; i < 1000 && kvmm_server_clients(srv); i++)
		usleep(10000);
	printf("\nstress: %u clients killed, %u finished, %u failed; kvmmctl ran %u times, "
	       "%u failed\n", kills, clean, failed, ctl_runs, ctl_fail);
	CU_ASSERT_EQUAL(kvmm_server_clients(srv), 0);
	CU_ASSERT_EQUAL(failed, 0);
	CU_ASSERT_EQUAL(ctl_fail, 0);
	CU_ASSERT(kills >= kills_wanted);
	kvmm_lock(ctx);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_SEQS_OPEN), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_OWNED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PROTECTED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_PINNED), 0);
	CU_ASSERT_EQUAL(test_stat(ctx, KVMM_STAT_PAGES_FREE) +
			test_stat(ctx, KVMM_STAT_PAGES_CACHED), 2048);
	CU_ASSERT_EQUAL(kvmm_check(ctx), 0);
	kvmm_unlock(ctx);
	kvmm_server_stop(srv);
	kvmm_destroy(ctx);
	free(pids);
}

int main(int argc, char **argv)
{
	unsigned run, nfailed;
	CU_pSuite s;
	int opt;

	while ((opt = getopt(argc, argv, "k:c:b:")) != -1) {
		switch (opt) {
		case 'k': kills_wanted = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'c': nclients = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'b': bindir = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-k KILLS] [-c CLIENTS] [-b BINDIR]\n", argv[0]);
			return 2;
		}
	}
	if (!nclients)
		nclients = 1;
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("kvmm_stress", NULL, NULL);
	if (!s || !CU_add_test(s, "stress_kill_clients_nothing_leaks",
			       stress_kill_clients_nothing_leaks))
		return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	run = CU_get_number_of_tests_run();
	nfailed = CU_get_number_of_tests_failed();
	printf("\n%u passed, %u failed\n", run - nfailed, nfailed);
	CU_cleanup_registry();
	return nfailed ? 1 : 0;
}
