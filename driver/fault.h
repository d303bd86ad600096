/* SPDX-License-Identifier: MIT */
/*
 * driver/fault.h - the drivers' fault-injection knobs, for kvmm's own
 * tests, fuzzers and stress runs.
 *
 * Not installed and no part of the API: an embedder never sets these.
 * A test hands them to a driver through the one pointer each driver's
 * argument leaves for them: kvmm_mock_arg.faults for the mock backend,
 * kvmm_params.host_arg and kvmm_params.nvme_arg for the host and NVMe
 * stores.  Every driver keeps the pointer and reads the knobs at every
 * call, so a test can turn faults on and off while it runs.
 */
#ifndef KVMM_DRIVER_FAULT_H
#define KVMM_DRIVER_FAULT_H

#include <stdbool.h>
#include <stdint.h>

/**
 * struct kvmm_mock_faults - kvmm_mock_arg.faults: fault injection in the
 *	mock backend
 * @fail_init: make init fail with this negative errno
 * @fail_copy: make gather/scatter calls fail with this negative errno ...
 * @fail_every: ... on every @fail_every-th call (1: every call; 0: never)
 * @dma_strict: act as a device that reaches only registered host memory:
 *	a gather or scatter to or from memory outside every range given to
 *	mem_register fails with -EFAULT
 * @fail_register: make mem_register fail with this negative errno ...
 * @fail_register_at: ... on its @fail_register_at-th call (0: every call)
 * @dma_ranges: out: ranges registered now (0 after a clean destroy)
 * @fail_resize: make resize fail with this negative errno (0: never)
 * @fail_share: make share (export) fail with this negative errno
 * @latch: when not NULL, called with @latch_arg before every gather (so a
 *	test can hold a background demotion's copy on the I/O worker while
 *	it drives the rest; it may block)
 */
struct kvmm_mock_faults {
	int fail_init;
	int fail_copy;
	uint32_t fail_every;
	bool dma_strict;
	int fail_register;
	uint32_t fail_register_at;
	uint32_t dma_ranges;
	int fail_resize;
	int fail_share;
	void (*latch)(void *latch_arg);
	void *latch_arg;
};

/**
 * struct kvmm_host_arg - kvmm_params.host_arg: fault injection in the
 *	host store
 * @fail_init: make init fail with this negative errno
 * @flip_every: flip one bit of every @flip_every-th page verified, before
 *	verifying it (0: never), as memory corruption would
 */
struct kvmm_host_arg {
	int fail_init;
	uint32_t flip_every;
};

#define KVMM_NVME_SHORT		1	/* kvmm_nvme_arg.fault: a short transfer */

#define KVMM_NVME_SITE_WRITE	(1u << 0)
#define KVMM_NVME_SITE_READ	(1u << 1)
#define KVMM_NVME_SITE_SCAN	(1u << 2)	/* the restart scan */

/**
 * struct kvmm_nvme_arg - kvmm_params.nvme_arg: fault injection in the NVMe
 *	store, under its I/O path
 * @fail_init: make init fail with this negative errno
 * @fault: what a chosen completion turns into: a negative errno (-EIO,
 *	-ENOSPC, -EAGAIN, ...) or KVMM_NVME_SHORT (half the bytes moved)
 * @fault_every: choose every @fault_every-th completion (0: none) ...
 * @fault_sites: ... at these KVMM_NVME_SITE_* (0: all)
 * @flip_every: flip a bit in the data of every @flip_every-th page
 *	written, on its way to the file (0: never)
 * @tear_every: write only the first half of every @tear_every-th page, as
 *	a power cut would (0: never)
 * @latch: when not NULL, called with @latch_arg, the KVMM_NVME_SITE_* and
 *	the channel (0: calls under the context lock, 1: the I/O worker)
 *	before each batch of I/O starts; it may block, so a test can hold
 *	an I/O in flight (a promotion's reads) while it drives the rest
 * @latch_arg: for @latch
 *
 * The store keeps the pointer and reads the fields at every I/O.
 */
struct kvmm_nvme_arg {
	int fail_init;
	int fault;
	uint32_t fault_every;
	uint32_t fault_sites;
	uint32_t flip_every;
	uint32_t tear_every;
	void (*latch)(void *latch_arg, uint32_t site, uint32_t chan);
	void *latch_arg;
};

#endif /* KVMM_DRIVER_FAULT_H */
