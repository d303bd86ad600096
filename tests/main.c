// SPDX-License-Identifier: MIT
/*
 * tests/main.c - kvmm-tests: every CUnit suite in one binary.
 *
 *   kvmm-tests [-s SUITE] [-q]
 *
 * Prints CUnit's summary, then one line "cunit: N tests, N failed", and
 * exits non-zero when any test failed.  The line has a shape of its own:
 * make check's runner (python/check.sh) closes with the only
 * "N passed, N failed", which counts CUnit, pytest and the examples.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "helpers.h"
#include "autoconf.h"

int register_hostile_server_suite(void);
int register_hostile_remote_suite(void);
int register_hostile_kjob_suite(void);
int register_hostile_kvevents_suite(void);

static const suite_register_fn suites[] = {
	register_ctx_suite,
	register_page_alloc_suite,
	register_seq_suite,
	register_prefix_tree_suite,
	register_prefix_suite,
	register_vmscan_suite,
	register_stats_suite,
	register_check_suite,
	register_fault_suite,
	register_diff_suite,
	register_mock_suite,
	register_backend_suite,
	register_tier_suite,
	register_flush_suite,
	register_keyed_suite,
	register_frames_suite,
	register_events_suite,
	register_kvevents_suite,
	register_dispatch_suite,
	register_server_suite,
	register_spin_suite,
	register_abi_suite,
	register_engine_suite,
	register_ns_suite,
	register_hostile_tenant_suite,
	register_hostile_ring_suite,
	register_hostile_tools_suite,
	register_hostile_nvme_suite,
	register_hostile_server_suite,
	register_hostile_kjob_suite,
	register_hostile_kvevents_suite,
	register_remote_suite,
	register_remote_server_suite,
	register_hostile_remote_suite,
};

int main(int argc, char **argv)
{
	const char *only = NULL;
	unsigned run, failed;
	size_t i;
	int opt;

#if CONFIG_KVMM_CUDA_H
	/* the second process of a test that shares the pool across processes */
	if (argc == 4 && !strcmp(argv[1], "--cuda-attach-child"))
		return cuda_attach_child(argv[2], argv[3]);
#endif
	while ((opt = getopt(argc, argv, "s:q")) != -1) {
		switch (opt) {
		case 's': only = optarg; break;
		case 'q': break;
		default:
			fprintf(stderr, "usage: %s [-s SUITE]\n", argv[0]);
			return 2;
		}
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
		if (suites[i]()) {
			fprintf(stderr, "registering suite %zu: %s\n", i, CU_get_error_msg());
			CU_cleanup_registry();
			return 1;
		}
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (only) {
		CU_pSuite s = CU_get_suite(only);

		if (!s) {
			fprintf(stderr, "no suite named %s\n", only);
			CU_cleanup_registry();
			return 2;
		}
		CU_basic_run_suite(s);
	} else {
		CU_basic_run_tests();
	}
	run = CU_get_number_of_tests_run();
	failed = CU_get_number_of_tests_failed();
	printf("\ncunit: %u tests, %u failed\n", run, failed);
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
