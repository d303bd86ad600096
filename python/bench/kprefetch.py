# SPDX-License-Identifier: MIT
"""kprefetch.py - what the keyed prefetch saves an engine whose blocks are on NVMe.

The engines' pattern: look a request's blocks up (SGLang's HiCache prefetch
thread asks batch_exists for a batch; vLLM's scheduler calls lookup() once
per block), then some compute (the scheduler's step, other requests'
forward passes), then load what was found.  Here an in-process
kvmm.KeyedStore with an NVMe tier (a file in --dir, O_DIRECT where the
filesystem takes it) holds --values values of --value-bytes, most of them
written down to NVMe; each round takes a fresh batch of --batch keys that
are on NVMe, looks them up (exists_now: one command for the batch, or one
a key with --per-key), sleeps --compute-ms, and gets them (call("get") on
the calling thread's ring, as SGLang's backend does), with the lookup's
prefetch on or off, alternating, for --rounds rounds of each.  The batch
is deleted after the round, so the host room a prefetch may fill (free
pages above the low watermark) is the same every round.  Prints JSON
lines: per mode the median time of the get and of the whole round
(lookup + compute + get) over rounds, and the ratios off / on.

    python python/bench/kprefetch.py [--rounds 9] [--batch 16] [--compute-ms 20]
	[--per-key] [--dir .]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

import kvmm


def stamp(i, vb):
	return ((np.arange(vb, dtype=np.uint32) * 7 + i * 131) & 0xFF).astype(np.uint8)


def one_round(st, vb, keys, out, prefetch, compute_s, per_key):
	"""Lookup, compute, get; return (get seconds, round seconds)."""
	t0 = time.perf_counter()
	if per_key:
		found = [st.exists_now(vb, [k], prefetch=prefetch)[0] for k in keys]
	else:
		found = list(st.exists_now(vb, keys, prefetch=prefetch))
	assert found == [0] * len(keys), found
	time.sleep(compute_s)
	t1 = time.perf_counter()
	res = st.call("get", keys, out)
	t2 = time.perf_counter()
	assert not res.any(), res
	return t2 - t1, t2 - t0


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--rounds", type=int, default=9)
	ap.add_argument("--batch", type=int, default=16)
	ap.add_argument("--value-bytes", type=int, default=1 << 20)
	ap.add_argument("--compute-ms", type=float, default=20.0)
	ap.add_argument("--per-key", action="store_true", help="vLLM's lookup: a command a key")
	ap.add_argument("--dir", default=".", help="where the NVMe file goes")
	a = ap.parse_args()
	vb, n = a.value_bytes, 2 * a.rounds * a.batch
	page = 1 << 16
	vpages = -(-vb // page)
	# the host tier: room for two batches above a low watermark of one batch;
	# writeback keeps it there while the values are put
	host_pages = 4 * a.batch * vpages
	low, high = a.batch * vpages, 3 * a.batch * vpages
	with tempfile.TemporaryDirectory(dir=a.dir) as d, \
	     kvmm.KeyedStore("bench-kprefetch@1", host_bytes=host_pages * page,
			     nvme_path=os.path.join(d, "nvme"),
			     nvme_bytes=(n + 8 * a.batch + 8) * vpages * page,
			     page_bytes=page, host_wmark_low=low, host_wmark_high=high,
			     threads=1) as st:
		keys = [f"block-{i}" for i in range(n)]
		for s in range(0, n, a.batch):
			st.put_now(keys[s:s + a.batch], [stamp(i, vb) for i in range(s, s + a.batch)])
		st.sync()
		# the newest values are still on the host: push them down too, by
		# putting (and deleting) a host tier's worth of filler after them
		filler = [f"filler-{i}" for i in range(host_pages // vpages)]
		st.put_now(filler, [np.zeros(vb, np.uint8)] * len(filler))
		st.sync()
		st.call("delete", filler)
		nvme = st.stats().keyed_nvme_pages
		out = [np.empty(vb, np.uint8) for _ in range(a.batch)]
		times = {True: ([], []), False: ([], [])}
		for r in range(2 * a.rounds):
			prefetch = r % 2 == 1
			batch = keys[r * a.batch:(r + 1) * a.batch]
			g, t = one_round(st, vb, batch, out, prefetch, a.compute_ms / 1000, a.per_key)
			first = r * a.batch
			assert all(np.array_equal(o, stamp(first + i, vb)) for i, o in enumerate(out))
			times[prefetch][0].append(g)
			times[prefetch][1].append(t)
			st.call("delete", batch)
		stats = st.stats()
		st.check()
	med = {p: (statistics.median(times[p][0]), statistics.median(times[p][1]))
	       for p in times}
	common = dict(batch=a.batch, value_bytes=vb, compute_ms=a.compute_ms,
		      lookup="per-key" if a.per_key else "batch", rounds=a.rounds,
		      nvme_pages_at_start=nvme)
	for p in (False, True):
		print(json.dumps(dict(common, prefetch=p, get_ms=round(med[p][0] * 1e3, 3),
				      round_ms=round(med[p][1] * 1e3, 3))))
	print(json.dumps(dict(common, get_off_over_on=round(med[False][0] / med[True][0], 2),
			      round_off_over_on=round(med[False][1] / med[True][1], 3),
			      prefetch_pages=stats.prefetch_pages,
			      prefetch_hits=stats.prefetch_hits)))


if __name__ == "__main__":
	main()
