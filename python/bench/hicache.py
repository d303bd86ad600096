# SPDX-License-Identifier: MIT
"""hicache.py - kvmm.sglang's HiCache storage paths beside memcpy.

SGLang's host KV pool of a Llama-3-8B-shaped model on CPU (32 layers, 8
KV heads of 128, bf16; pages of 16 tokens: 2 MiB a page, its K and its V
1 MiB each), in the page_first layout (pages moved in place) and
layer_first (gathered into a staging buffer, and scattered from it, a
chunk of pages at a time).  Per round: batch_set_v1 of 64 fresh pages,
batch_get_v1 of them into other slots, and a memcpy of the same bytes
between two buffers; medians over rounds, JSON lines with the ratio.
The pages read back are checked byte for byte.

Then the NVMe tier (page_first, SGLang's layout that moves pages in
place; --no-nvme skips it): the same backend in-process with an NVMe file
(extra config nvme_path/nvme_bytes; page_bytes of 1 MiB, so a page's K
and its V are one NVMe slot each) and a host tier of one batch that
writes everything down (extra config host_wmark_low/host_wmark_high at
its size, as kvmm-bench keyed's nvme case sets them; nvme_qd of --qd).
Per round, as kvmm-bench keyed does: fio writes the batch's bytes in
blocks of one slot at --qd on a file beside kvmm's (FILE.fio, the same
disk), then batch_set_v1 of 64 fresh pages and KeyedStore.sync() until
writeback has every value on NVMe (the value: from the call to the
sync's return; writeback_gbps: the sync alone, kvmm-bench keyed's
nvme_write); then fio reads them back and batch_get_v1 reads the batch
from NVMe into other slots.  Their ratios are medians of the rounds'
ratios (without fio: no fio_gbps, no ratio).  Needs SGLang
(tests/engines' environment) and fio for the comparison:

    ~/.cache/kvmm/venv-sglang-*/bin/python python/bench/hicache.py [--rounds 5] \
        [--nvme-rounds 9] [--nvme-file PATH] [--qd 32] [--no-nvme]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

import kvmm
from kvmm.sglang import KvmmHiCacheStorage, cpu_host_pool

L, H, D, P, PAGES = 32, 8, 128, 16, 64


def pool(layout):
	return cpu_host_pool(L, H, D, P, 2 * PAGES * P, torch.bfloat16, layout)	# room to read back


def storage_config(extra):
	return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
				    attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
				    enable_storage_metrics=False, is_page_first_layout=False,
				    model_name="bench", extra_config=extra)


def fio(path, rw, bs, nbytes, qd):
	"""fio's GB/s: @rw of @nbytes from offset 4096 in blocks of @bs at @qd,
	io_uring, O_DIRECT, registered buffers and file, as kvmm-bench's
	run_fio() (and the NVMe store) does."""
	out = subprocess.run(["fio", "--name=kvmm", f"--filename={path}", f"--rw={rw}",
			      f"--bs={bs}", f"--iodepth={qd}", "--ioengine=io_uring", "--direct=1",
			      "--fixedbufs", "--registerfiles", "--offset=4096", f"--size={nbytes}",
			      "--output-format=json"], check=True, capture_output=True, text=True)
	bw = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0][rw]["bw_bytes"]
	if not bw:
		raise RuntimeError(f"fio said nothing of {rw} on {path}")
	return bw / 1e9


def bench_nvme(a, page_bytes, nbytes, src_buf):
	"""The NVMe tier beside fio (see the module's docstring)."""
	value_bytes = page_bytes // 2		# a page's K, its V: one value, one kvmm page each
	nvals = 2 * PAGES
	slot = (value_bytes + 4096 + 4095) // 4096 * 4096	# the page and its header
	fio_file = a.nvme_file + ".fio"
	use_fio = shutil.which("fio") is not None
	hp = pool("page_first")
	hp.kv_buffer.view(torch.uint8).view(-1)[:nbytes] = torch.from_numpy(src_buf)
	be = KvmmHiCacheStorage(storage_config({
		"host_bytes": nvals * value_bytes, "nvme_path": a.nvme_file,
		"nvme_bytes": 2 * nvals * value_bytes, "page_bytes": value_bytes, "threads": 1,
		"host_wmark_low": nvals, "host_wmark_high": nvals, "nvme_qd": a.qd,
		"nvme_flags": kvmm.NVME_REFORMAT}))
	st = be.store
	try:
		be.register_mem_pool_host(hp)
		src = hp.alloc(PAGES * P)
		dst = hp.alloc(PAGES * P)
		put, wb, get, fput, fget = [], [], [], [], []
		for r in range(a.nvme_rounds + 1):	# round 0 warms up
			keys = [f"nvme{r:04d}{i:056x}" for i in range(PAGES)]
			fw = fio(fio_file, "write", slot, nvals * slot, a.qd) if use_fio else 0.0
			t0 = time.perf_counter()
			assert all(be.batch_set_v1(keys, src))
			t1 = time.perf_counter()
			st.sync()
			t2 = time.perf_counter()
			stats = st.stats()
			if stats.keyed_nvme_pages < nvals or stats.keyed_host_pages:
				raise RuntimeError(f"writeback left {stats.keyed_host_pages} values on "
						   f"the host, {stats.keyed_nvme_pages} on NVMe")
			fr = fio(fio_file, "read", slot, nvals * slot, a.qd) if use_fio else 0.0
			in0 = st.stats().nvme_bytes_out
			t3 = time.perf_counter()
			assert all(be.batch_get_v1(keys, dst))
			t4 = time.perf_counter()
			read = st.stats().nvme_bytes_out - in0
			if read < nvals * value_bytes:
				raise RuntimeError(f"the get read {read} bytes from NVMe, not "
						   f"{nvals * value_bytes}")
			if r:
				put.append(nbytes / (t2 - t0) / 1e9)
				wb.append(nbytes / (t2 - t1) / 1e9)
				get.append(nbytes / (t4 - t3) / 1e9)
				fput.append(fw)
				fget.append(fr)
		for i in range(PAGES):			# the bytes came back (as bytes: NaNs)
			if not torch.equal(hp.get_data_page(int(src[i * P])).view(torch.uint8),
					   hp.get_data_page(int(dst[i * P])).view(torch.uint8)):
				raise RuntimeError(f"page {i} came back different")
		st.check()
	finally:
		be.close()
		for f in (a.nvme_file, fio_file):
			if os.path.exists(f):
				os.unlink(f)
	for what, vals, fv, extra in (("batch_set_v1", put, fput, {"writeback_gbps":
					round(statistics.median(wb), 3)}),
				      ("batch_get_v1", get, fget, {})):
		line = {"bench": "hicache", "layout": "page_first", "tier": "nvme", "what": what,
			"value": round(statistics.median(vals), 3), "unit": "GB/s", **extra}
		if use_fio:
			line.update(fio_gbps=round(statistics.median(fv), 3), ratio=round(
				statistics.median(v / f for v, f in zip(vals, fv)), 3))
		line.update(page_bytes=page_bytes, pages=PAGES, block_bytes=slot, qd=a.qd,
			    rounds=a.nvme_rounds)
		print(json.dumps(line), flush=True)


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--rounds", type=int, default=5)
	ap.add_argument("--nvme-rounds", type=int, default=9, help="the disk drifts: more rounds")
	ap.add_argument("--nvme-file", default=f"/tmp/kvmm-bench-hicache-{os.getpid()}.nvme",
			help="kvmm's NVMe file (and fio's, FILE.fio, beside it); removed after")
	ap.add_argument("--qd", type=int, default=32, help="kvmm's and fio's queue depth")
	ap.add_argument("--no-nvme", action="store_true", help="the host case only")
	a = ap.parse_args()
	page_bytes = 2 * L * P * H * D * 2
	nbytes = PAGES * page_bytes
	src_buf = np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8)
	dst_buf = np.empty_like(src_buf)
	for layout in ("page_first", "layer_first"):
		hp = pool(layout)
		hp.kv_buffer.view(torch.uint8).view(-1)[:nbytes] = torch.from_numpy(src_buf)
		cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
					   attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
					   enable_storage_metrics=False, is_page_first_layout=False,
					   model_name="bench", extra_config={
						   "host_bytes": 2 * nbytes + (64 << 20)})
		be = KvmmHiCacheStorage(cfg)
		be.register_mem_pool_host(hp)
		src = hp.alloc(PAGES * P)
		dst = hp.alloc(PAGES * P)
		put, get, mc = [], [], []
		for r in range(a.rounds + 1):		# round 0 warms up
			keys = [f"{r:04d}{i:060x}" for i in range(PAGES)]
			t0 = time.perf_counter()
			assert all(be.batch_set_v1(keys, src))
			t1 = time.perf_counter()
			assert all(be.batch_get_v1(keys, dst))
			t2 = time.perf_counter()
			np.copyto(dst_buf, src_buf)
			t3 = time.perf_counter()
			if r:
				put.append(nbytes / (t1 - t0) / 1e9)
				get.append(nbytes / (t2 - t1) / 1e9)
				mc.append(nbytes / (t3 - t2) / 1e9)
		for i in range(PAGES):			# the bytes came back (as bytes: NaNs)
			if not torch.equal(hp.get_data_page(int(src[i * P])).view(torch.uint8),
					   hp.get_data_page(int(dst[i * P])).view(torch.uint8)):
				raise RuntimeError(f"{layout}: page {i} came back different")
		m = statistics.median(mc)
		for what, vals in (("batch_set_v1", put), ("batch_get_v1", get)):
			v = statistics.median(vals)
			print(json.dumps({"bench": "hicache", "layout": layout, "what": what,
					  "value": round(v, 3), "unit": "GB/s", "memcpy_gbps": round(m, 3),
					  "ratio": round(v / m, 3), "page_bytes": page_bytes,
					  "pages": PAGES}))
		be.close()
	if not a.no_nvme:
		bench_nvme(a, page_bytes, nbytes, src_buf)


if __name__ == "__main__":
	main()
