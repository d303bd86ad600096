// SPDX-License-Identifier: MIT
/*
 * tools/lib/parse.c - strict number parsing, shared by kvmmctl and kvmmd.
 *
 * strtoull() and strtod() accept what no operator means: leading blanks,
 * a minus sign on an unsigned number (which then wraps), trailing junk,
 * "nan" and "inf", and values that overflow the field they land in.
 * These refuse all of it and say which it was.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

/**
 * parse_uint() - a non-negative integer of at most @max
 * @s: decimal digits, or hexadecimal after 0x (no sign, no blanks)
 * @max: the largest value the field holds
 * @v: out, set on success only
 *
 * A leading zero is not octal: "010" is ten.
 *
 * Return: 0; -EINVAL for no number or trailing characters (a sign too);
 * -ERANGE for one larger than @max.
 */
int parse_uint(const char *s, uint64_t max, uint64_t *v)
{
	int base = 10;
	unsigned long long x;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!((*s >= '0' && *s <= '9') || ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'f')))
			return -EINVAL;
	}
	errno = 0;
	x = strtoull(s, &end, base);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || x > max)
		return -ERANGE;
	*v = x;
	return 0;
}

/**
 * parse_real() - a finite number in [@min, @max]
 * @s: a decimal number (no blanks, no "nan", no "inf")
 * @min: the smallest accepted
 * @max: the largest accepted
 * @v: out, set on success only
 *
 * Return: 0; -EINVAL for no number, trailing characters or a value that
 * is not finite; -ERANGE for one outside [@min, @max].
 */
int parse_real(const char *s, double min, double max, double *v)
{
	char *end;
	double x;

	if (!s || !((*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '+'))
		return -EINVAL;
	errno = 0;
	x = strtod(s, &end);
	if (end == s || *end || !isfinite(x))
		return -EINVAL;
	if (errno == ERANGE || x < min || x > max)
		return -ERANGE;
	*v = x;
	return 0;
}

/* What a parse_*() error means, for a message. */
const char *parse_strerror(int err)
{
	return err == -ERANGE ? "is out of range" : "is not a number";
}

/**
 * errno_str() - "NAME: text" for an errno, whatever its value
 * @err: a positive errno
 *
 * Return: a static buffer (overwritten by the next call), e.g.
 * "EPERM: Operation not permitted"; a value that is no errno says so
 * instead of "Unknown error N".
 */
const char *errno_str(int err)
{
	static char buf[160];
	const char *name = strerrorname_np(err);

	if (name)
		snprintf(buf, sizeof(buf), "%s: %s", name, strerror(err));
	else
		snprintf(buf, sizeof(buf), "error %d (not an errno value)", err);
	return buf;
}
