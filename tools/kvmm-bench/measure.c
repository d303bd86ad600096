// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench/measure.c - what the throughput benchmarks (tiers,
 * keyed) measure kvmm against: memcpy of the same bytes in the same kind
 * of memory, and fio on the same file with the same block size and queue
 * depth.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "bench.h"
#include "../../driver/backend.h"

/* A Llama-3-8B-shaped KV: 32 layers, 8 KV heads of 128, bf16: 128 KiB a token. */
const struct kvmm_model bench_model_8b = {
	.layers = 32, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2,
	.attn = KVMM_ATTN_MHA,
};

/* Touch every page of @p so first-touch faults stay out of the timings. */
void prefault(void *p, size_t n)
{
	memset(p, 0x5a, n);
}

double gbps(uint64_t bytes, double ns)
{
	return ns > 0 ? (double)bytes / ns : 0.0;
}

void memcpy_pair_free(struct memcpy_pair *m)
{
	if (m->a)
		munmap(m->a, m->bytes);
	if (m->b)
		munmap(m->b, m->bytes);
	m->a = m->b = NULL;
}

/*
 * Two contiguous buffers of @bytes, mapped as the pool and the host store
 * are (huge pages hinted, kvmm_map_anon()), so a copy through 4 KiB pages
 * does not lower the bar; prefaulted.
 */
int memcpy_pair_init(struct memcpy_pair *m, uint64_t bytes)
{
	m->bytes = bytes;
	m->a = kvmm_map_anon(bytes);
	m->b = kvmm_map_anon(bytes);
	if (!m->a || !m->b) {
		memcpy_pair_free(m);
		return -ENOMEM;
	}
	prefault(m->a, bytes);
	prefault(m->b, bytes);
	return 0;
}

/* One memcpy of the pair: GB/s. */
double memcpy_gbps(const struct memcpy_pair *m)
{
	uint64_t t0 = now_ns();

	memcpy(m->b, m->a, m->bytes);
	return gbps(m->bytes, (double)(now_ns() - t0));
}

/**
 * run_fio() - fio on @path: @rw ("write" or "read") of @bytes from offset
 *	4096 (past the superblock) in blocks of @bs at queue depth @qd,
 *	io_uring, O_DIRECT, registered buffers and file, as the NVMe store
 *	does
 * @path: the file
 * @rw: "write" or "read"
 * @bs: block size
 * @bytes: bytes in all
 * @qd: queue depth
 * @res: out
 *
 * Return: 0, or a negative errno (-EIO: fio failed or said nothing).
 */
int run_fio(const char *path, const char *rw, uint64_t bs, uint64_t bytes,
	    uint32_t qd, struct fio_result *res)
{
	char cmd[1024], line[4096];
	uint64_t bw = 0;
	double iops = 0;
	FILE *f;
	int status;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvmm --filename='%s' --rw=%s --bs=%llu --iodepth=%u "
		 "--ioengine=io_uring --direct=1 --fixedbufs --registerfiles "
		 "--offset=4096 --size=%llu --output-format=json 2>/dev/null",
		 path, rw, (unsigned long long)bs, qd, (unsigned long long)bytes);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	/* Pick "bw_bytes" and "iops" out of the job's rw section. */
	while (fgets(line, sizeof(line), f)) {
		static char section[16];
		char *p;

		if (strstr(line, "\"read\" :") || strstr(line, "\"write\" :"))
			snprintf(section, sizeof(section), "%s",
				 strstr(line, "\"read\"") ? "read" : "write");
		if (strcmp(section, rw))
			continue;
		if ((p = strstr(line, "\"bw_bytes\" :")) && !bw)
			bw = strtoull(p + 12, NULL, 10);
		if ((p = strstr(line, "\"iops\" :")) && !iops)
			iops = strtod(p + 8, NULL);
	}
	status = pclose(f);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) || !bw)
		return -EIO;
	res->gbps = (double)bw / 1e9;
	res->iops = iops;
	return 0;
}

int fio_present(void)
{
	return system("fio --version >/dev/null 2>&1") == 0;
}

/**
 * report_figure() - one figure of a throughput benchmark
 * @json: as a JSON line (else a line for people)
 * @bench: the benchmark's name
 * @what: the figure's
 * @v: its value, in @unit
 * @vs_name: what it is compared with, or NULL
 * @vs: ... its value
 * @ratio: and the ratio to report (the caller's: a median of per-round
 *	ratios is not the ratio of the medians)
 * @extra: NULL, or fields to add to the JSON object (taken)
 */
void report_figure(bool json, const char *bench, const char *what, double v, const char *unit,
		   const char *vs_name, double vs, double ratio, json_t *extra)
{
	if (json) {
		json_t *j = json_pack("{s:s,s:s,s:o,s:s}", "bench", bench, "what", what,
				      "value", tool_json_fixed(v, 3), "unit", unit);

		if (j && vs_name) {
			json_object_set_new(j, vs_name, tool_json_fixed(vs, 3));
			json_object_set_new(j, "ratio", tool_json_fixed(ratio, 3));
		}
		if (j && extra)
			json_object_update(j, extra);
		json_decref(extra);
		tool_json_line(j, stdout);
		return;
	}
	json_decref(extra);
	printf("%-14s %10.3f %-5s", what, v, unit);
	if (vs_name)
		printf("   %s %.3f  ratio %.3f", vs_name, vs, ratio);
	printf("\n");
}

/* The median over @n rounds (at most 64) of @a[r] / @b[r]: what pairs run side by side say. */
double median_ratio(const double *a, const double *b, uint32_t n)
{
	double q[64];
	uint32_t r;

	for (r = 0; r < n && r < 64; r++)
		q[r] = b[r] > 0 ? a[r] / b[r] : 0;
	return median(q, r);
}
