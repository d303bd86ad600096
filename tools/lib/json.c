// SPDX-License-Identifier: MIT
/*
 * tools/lib/json.c - the tools' JSON output through jansson.
 *
 * jansson prints a real with "%.17g", which shows a figure's binary
 * representation error (0.3 as 0.29999999999999999).  A figure is rounded
 * here as printf("%.*f") rounds it, and everything is printed with 15
 * significant digits, which give back any decimal of 15 digits or fewer
 * exactly: 12.30 prints as 12.3, 5.00 as 5.0, the same numbers.  None of
 * this runs where a benchmark times anything.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "json.h"

#define TOOL_JSON_FLAGS	(JSON_COMPACT | JSON_REAL_PRECISION(15))

/**
 * tool_json_fixed() - a figure as printf("%.*f", @places, @v) writes it
 * @v: the figure
 * @places: digits after the point; 0 gives an integer
 *
 * Return: a new reference: a real, an integer for @places 0, or null when
 * @v is not finite (a ratio over a zero, which JSON has no number for).
 */
json_t *tool_json_fixed(double v, int places)
{
	char buf[64];

	if (!isfinite(v))
		return json_null();
	if (!places && fabs(v) < 9e18)
		return json_integer((json_int_t)llround(v));
	snprintf(buf, sizeof(buf), "%.*f", places, v);
	return json_real(strtod(buf, NULL));
}

/**
 * tool_json_u64() - an unsigned 64-bit count; jansson's integers are signed
 * @v: the count
 *
 * Return: a new reference: an integer, or a real past INT64_MAX.
 */
json_t *tool_json_u64(uint64_t v)
{
	return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

/**
 * tool_json_put() - print @j on @f, compact, and drop the reference
 * @j: the value; NULL (a json_pack() that failed) prints nothing
 * @f: where
 *
 * Return: 0, or -EIO when @j was NULL or @f would not take it.
 */
int tool_json_put(json_t *j, FILE *f)
{
	int ret = j ? json_dumpf(j, f, TOOL_JSON_FLAGS) : -1;

	json_decref(j);
	return ret ? -EIO : 0;
}

/**
 * tool_json_line() - print @j on @f as one line and drop the reference
 * @j: the value, as for tool_json_put()
 * @f: where
 *
 * Return: 0 or -EIO, as tool_json_put().
 */
int tool_json_line(json_t *j, FILE *f)
{
	int ret = tool_json_put(j, f);

	if (ret)
		return ret;
	return fputc('\n', f) == EOF ? -EIO : 0;
}
