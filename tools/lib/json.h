/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/json.h - how the tools write JSON: objects built with jansson,
 * printed compact (no spaces: the form scripts and CI grep), one object a
 * line, with figures rounded to the places they are meaningful to.
 */
#ifndef KVMM_TOOLS_JSON_H
#define KVMM_TOOLS_JSON_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

json_t *tool_json_fixed(double v, int places);
json_t *tool_json_u64(uint64_t v);
int tool_json_put(json_t *j, FILE *f);
int tool_json_line(json_t *j, FILE *f);

#endif
