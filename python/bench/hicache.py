# SPDX-License-Identifier: MIT
"""hicache.py - kvmm.sglang's HiCache storage paths beside memcpy.

SGLang's host KV pool of a Llama-3-8B-shaped model on CPU (32 layers, 8
KV heads of 128, bf16; pages of 16 tokens: 2 MiB a page, its K and its V
1 MiB each), in the page_first layout (pages moved in place) and
layer_first (through one flat copy).  Per round: batch_set_v1 of 64
fresh pages, batch_get_v1 of them into other slots, and a memcpy of the
same bytes between two buffers; medians over rounds, JSON lines with the
ratio.  Needs SGLang (tests/engines' environment):

    ~/.cache/kvmm/venv-sglang-*/bin/python python/bench/hicache.py [--rounds 5]
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

from kvmm.sglang import KvmmHiCacheStorage, cpu_host_pool

L, H, D, P, PAGES = 32, 8, 128, 16, 64


def pool(layout):
	return cpu_host_pool(L, H, D, P, 2 * PAGES * P, torch.bfloat16, layout)	# room to read back


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--rounds", type=int, default=5)
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
		m = statistics.median(mc)
		for what, vals in (("batch_set_v1", put), ("batch_get_v1", get)):
			v = statistics.median(vals)
			print(json.dumps({"bench": "hicache", "layout": layout, "what": what,
					  "value": round(v, 3), "unit": "GB/s", "memcpy_gbps": round(m, 3),
					  "ratio": round(v / m, 3), "page_bytes": page_bytes,
					  "pages": PAGES}))
		be.close()


if __name__ == "__main__":
	main()
