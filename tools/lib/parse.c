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
#include <getopt.h>
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

/**
 * parse_bytes() - a byte count of at most @max, with an optional unit
 * @s: a number as parse_uint() takes it, then nothing or one of K, M, G, T
 *     (either case; powers of 1024), which may be followed by "iB" or "B"
 * @max: the largest value the field holds
 * @v: out, set on success only
 *
 * "1G", "1g", "1GiB" and "1GB" are all 1 << 30, as kvmm-engine's
 * --device-mem has always read them.
 *
 * Return: 0; -EINVAL for no number, an unknown unit or trailing
 * characters; -ERANGE for a count larger than @max (or than 64 bits).
 */
int parse_bytes(const char *s, uint64_t max, uint64_t *v)
{
	static const char units[] = "KMGT";
	char num[32];
	const char *u, *end;
	uint64_t x;
	size_t n;
	int shift = 0, ret;

	if (!s)
		return -EINVAL;
	for (end = s; *end && !strchr("kmgtKMGT", *end); end++)
		;
	n = (size_t)(end - s);
	if (n >= sizeof(num))
		return -ERANGE;
	memcpy(num, s, n);
	num[n] = '\0';
	ret = parse_uint(num, UINT64_MAX, &x);
	if (ret)
		return ret;
	if (*end) {
		u = strchr(units, *end & ~0x20);
		if (end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B"))
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
	}
	if (x > (UINT64_MAX >> shift) || (x << shift) > max)
		return -ERANGE;
	*v = x << shift;
	return 0;
}

/* Edits (insert, delete, substitute) that turn @a into @b, up to 64 chars. */
static unsigned edit_distance(const char *a, const char *b)
{
	unsigned row[65], i, j, diag, up;
	size_t la = strlen(a), lb = strlen(b);

	if (la > 64 || lb > 64)
		return UINT32_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			up = row[j];
			row[j] = diag + (a[i - 1] != b[j - 1]);
			if (row[j] > up + 1)
				row[j] = up + 1;
			if (row[j] > row[j - 1] + 1)
				row[j] = row[j - 1] + 1;
			diag = up;
		}
	}
	return row[lb];
}

/**
 * option_nearest() - the known option a mistyped one most likely meant
 * @name: the name given, without its dashes
 * @opts: the long options, ended by one with a NULL name
 *
 * Return: the name of the option fewest edits away, if that is few
 * enough for a typo (2, and one more for every 4 characters), else NULL.
 */
const char *option_nearest(const char *name, const struct option *opts)
{
	const struct option *o, *best = NULL;
	unsigned d, best_d = UINT32_MAX;

	for (o = opts; o->name; o++) {
		d = edit_distance(name, o->name);
		if (d < best_d)
			best_d = d, best = o;
	}
	return best && best_d <= 2 + strlen(name) / 4 ? best->name : NULL;
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
