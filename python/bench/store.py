# SPDX-License-Identifier: MIT
"""store.py - what the engine adapters' store costs beside the C store.

Puts and gets batches of 2 MiB values (vLLM's block of an 8B model) as
kvmm.vllm / kvmm.lmcache do, through kvmm.KeyedStore (worker threads,
rings, completions on an eventfd), in this process and through a kvmmd
started for the run, and the same batches through KeyedSpace (one C call
per batch, no threads: the C API's speed from Python), alternating the
three for several rounds.  Prints JSON lines: per figure the median GB/s
over rounds and its ratio to the direct figure.

    python python/bench/store.py [--rounds 5] [--batch 64] [--kvmmd build/bin/kvmmd]
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import kvmm

ROOT = Path(__file__).resolve().parents[2]
VB = 2 << 20


def wait_one(st):
	while True:
		select.select([st.event_fd], [], [])
		got = st.take()
		if got:
			assert len(got) == 1 and got[0].ok, got[0].error or got[0].res
			return


def timed_store(st, keys, src, dst):
	t0 = time.perf_counter()
	st.submit(1, "put", keys, src)
	wait_one(st)
	t1 = time.perf_counter()
	st.submit(2, "get", keys, dst)
	wait_one(st)
	t2 = time.perf_counter()
	return t1 - t0, t2 - t1


def timed_direct(sp, keys, src, dst):
	t0 = time.perf_counter()
	assert not sp.put(keys, src).any()
	t1 = time.perf_counter()
	res, _ = sp.get(keys, dst)
	assert not res.any()
	return t1 - t0, time.perf_counter() - t1


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--rounds", type=int, default=5)
	ap.add_argument("--batch", type=int, default=64)
	ap.add_argument("--kvmmd", default=str(ROOT / "build" / "bin" / "kvmmd"))
	a = ap.parse_args()
	n = a.batch
	host = 2 * n * VB
	rng = np.random.default_rng(1)
	src = rng.integers(0, 256, (n, VB), dtype=np.uint8)
	dst = np.empty_like(src)
	rows_src, rows_dst = list(src), list(dst)
	tmp = tempfile.mkdtemp()
	sock = os.path.join(tmp, "kvmmd.sock")
	# 64 KiB pages (4 tokens of 16 KiB): a value is 32 of them
	srv = subprocess.Popen([a.kvmmd, "--socket", sock, "--page-size", "4", "--pages", "16",
				"--layers", "1", "--kv-heads", "1", "--head-dim", "2048",
				"--dtype-bytes", "4", "--host-pages", str(host >> 16),
				"--model-id", "store-bench"], stdout=subprocess.DEVNULL)
	try:
		while not os.path.exists(sock):
			time.sleep(0.02)
		ctx = kvmm.Context(layers=1, kv_heads=1, head_dim=2048, dtype_bytes=4, page_size=4,
				   nr_pages=16, max_seqs=1, max_seq_len=64, host_pages=host >> 16)
		sp = ctx.keyed("store-bench", VB)
		local = kvmm.KeyedStore("store-bench", host_bytes=host)
		remote = kvmm.KeyedStore("store-bench", socket=sock)
		runs = {"direct": lambda k: timed_direct(sp, k, src, dst),
			"store_in_process": lambda k: timed_store(local, k, rows_src, rows_dst),
			"store_kvmmd": lambda k: timed_store(remote, k, rows_src, rows_dst)}
		res = {name: ([], []) for name in runs}
		for r in range(a.rounds + 1):		# round 0 warms the tiers up
			for name, run in runs.items():
				keys = [f"{name}-{r}-{i}" for i in range(n)]
				put, get = run(keys)
				if r:
					res[name][0].append(n * VB / put / 1e9)
					res[name][1].append(n * VB / get / 1e9)
				assert np.array_equal(dst[n - 1], src[n - 1])
		base = {op: statistics.median(res["direct"][i]) for i, op in enumerate(("put", "get"))}
		for name, (puts, gets) in res.items():
			for op, vals in (("put", puts), ("get", gets)):
				v = statistics.median(vals)
				print(json.dumps({"bench": "python_store", "what": f"{name}_{op}",
						  "value": round(v, 3), "unit": "GB/s",
						  "direct_gbps": round(base[op], 3),
						  "ratio": round(v / base[op], 3)}))
		local.close()
		remote.close()
		ctx.close()
	finally:
		srv.terminate()
		srv.wait()


if __name__ == "__main__":
	main()
