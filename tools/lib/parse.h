/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/parse.h - strict number parsing for the tools' options and
 * operands: what is not exactly a number in range is an error, never a
 * wrapped or truncated value.
 */
#ifndef KVMM_TOOLS_PARSE_H
#define KVMM_TOOLS_PARSE_H

#include <stdint.h>

int parse_uint(const char *s, uint64_t max, uint64_t *v);
int parse_bytes(const char *s, uint64_t max, uint64_t *v);
int parse_real(const char *s, double min, double max, double *v);
struct option;
const char *option_nearest(const char *name, const struct option *opts);
const char *parse_strerror(int err);
const char *errno_str(int err);

#endif
