/* SPDX-License-Identifier: MIT */
/*
 * tests/fakecuda/fakecuda.h - the controls of the fake CUDA driver.  Tests
 * reach them with dlsym on the same library the cuda backend opened.
 */
#ifndef KVMM_FAKECUDA_H
#define KVMM_FAKECUDA_H

#include <stddef.h>

void fakecuda_reset(void);			/* defaults, no armed failure */
void fakecuda_devices(int n);			/* what cuDeviceGetCount says */
void fakecuda_vmm(int on);			/* virtual memory management */
void fakecuda_mem(size_t total, size_t avail);	/* what cuMemGetInfo says */
void fakecuda_fail(const char *fn, unsigned nth, int res); /* nth call of fn fails */
unsigned fakecuda_calls(const char *fn);	/* calls since reset */
long fakecuda_live(void);			/* objects not yet freed */

#endif
