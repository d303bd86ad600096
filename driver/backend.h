/* SPDX-License-Identifier: MIT */
/*
 * driver/backend.h - the backends this build can offer; only
 * driver/backend.c includes it.
 */
#ifndef KVMM_DRIVER_BACKEND_H
#define KVMM_DRIVER_BACKEND_H

#include <libkvmm.h>

extern const struct kvmm_backend_ops kvmm_mock_backend;
extern const struct kvmm_store_ops kvmm_host_store;
extern const struct kvmm_store_ops kvmm_nvme_store;

#endif
