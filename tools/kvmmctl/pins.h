/* SPDX-License-Identifier: MIT */
/*
 * tools/kvmmctl/pins.h - kvmmctl's operator commands for pins and
 * namespaces: pins, ns, and unpin by node id or by namespace.
 */
#ifndef KVMMCTL_PINS_H
#define KVMMCTL_PINS_H

#include <stdbool.h>

#include <libkvmm.h>

/*
 * kvmmctl_pins_owns() - is this command line one of pins.c's?
 * @cmd: the command word; @argc, @argv: it and its arguments
 *
 * "pins", "ns", and "unpin" with --id or without token ids (unpin with
 * token ids is kvmmctl.c's: it drops one kept pin by its prefix).
 */
bool kvmmctl_pins_owns(const char *cmd, int argc, char **argv);

/*
 * kvmmctl_pins_run() - run such a command on @ring
 * @json: print JSON rather than a table
 * Return: kvmmctl's exit code.
 */
int kvmmctl_pins_run(struct kvmm_ring *ring, bool json, const char *cmd,
		     int argc, char **argv);

#endif
