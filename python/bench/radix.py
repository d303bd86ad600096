# SPDX-License-Identifier: MIT
"""radix.py - ../shared/bench/workload.jsonl through SGLang's BasePrefixCache
interface, with SGLang's default tree cache (UnifiedRadixCache over its
Rust tree core), its RadixCache and kvmm's backend.

The replay rule of shared/bench/README.md, driven as SGLang 0.5.23's
scheduler drives a tree cache: in arrival order, finish the oldest request
(FIFO) while max_inflight are in flight or the conversation's previous
turn is not finished; admit = match_prefix(prompt[:N-1]), lock the last
node, allocate the rest of the prompt from SGLang's allocator (evicting
from the tree when it is short) into the request's req_to_token row,
checkpoint(up_to=N) (publish the prompt), then allocate the L-1 decoded
tokens; finish = checkpoint(up_to=N+L-1), free the request's rest of
the row (free_kv_row), unlock, free the row.  The allocator holds the
workload's capacity (250,512 tokens).  Only the tree cache's calls are
timed (match_prefix, lock, checkpoint, evict, free_kv_row, unlock); the
allocator and the row bookkeeping cost each the same.  Prints a JSON line
per page size: matched tokens and µs per request for each, and kvmm's
ratio to each (medians over --repeat runs, every cache in each run).

SGLang 0.5.23's default tree cache is UnifiedRadixCache, its tree over
the TreeCore SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND names (rust unless
set; the JSON line says which ran: unified_tree_core); it is built here
with the one full-attention component, as SGLang builds it for a plain
model, and driven through the same calls.  Its checkpoint() reads more
of the request than RadixCache's (rid, session, finished()): the
replay's requests carry those as a request that is not finished and in
no session has them.

A third column, SGLang's C++ tree (RadixCacheCpp, the experimental
sglang.srt.mem_cache.radix_cache_cpp that JIT-builds cpp_radix_tree/), is
replayed the same way when the installed SGLang has it and it builds and
runs here; otherwise the JSON line says it was not measured and why (the
error, as raised here): SGLang 0.5.23 ships no radix_cache_cpp module.

    ~/.cache/kvmm/venv-sglang-*/bin/python python/bench/radix.py [--page-size 1 16] [--repeat 3]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time
from array import array
from collections import deque
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
from sglang.srt.managers.schedule_batch import ReqKvInfo  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: E402

from kvmm.sglang import KvmmRadixCache, cpu_tree_cache  # noqa: E402
from replay import DEFAULT, load as load_arrays  # noqa: E402  (python/bench/replay.py)

def load(path: Path):
	"""(meta, requests): replay.py's, with each prompt and full token run as
	array('q'), the type SGLang's RadixKey holds."""
	meta, reqs = load_arrays(path)
	q = lambda a: array("q", a.astype("int64").tobytes())	# noqa: E731
	return meta, [(prev, q(prompt), q(full)) for prev, prompt, full, _ in reqs]


def cpp_tree():
	"""(RadixCacheCpp, None) when this SGLang has its C++ tree and the
	tree's JIT build succeeds (it runs at import), else (None, the error)."""
	try:
		from sglang.srt.mem_cache.radix_cache_cpp import RadixCacheCpp
	except Exception as e:	# noqa: BLE001  (ImportError, or the build's own)
		return None, why(e)
	return RadixCacheCpp, None


def unified_tree():
	"""(a factory of SGLang's default tree cache, None), or (None, why not):
	UnifiedRadixCache with the one full-attention component, as SGLang
	builds it for a plain model, over the tree core
	SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND names (rust by default)."""
	try:
		from sglang.srt.mem_cache.unified_cache.components import ComponentType
		from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
	except Exception as e:	# noqa: BLE001 - another SGLang
		return None, why(e)

	def make(params):
		params.tree_components = (ComponentType.FULL,)
		return UnifiedRadixCache(params)
	return make, None


def why(e: BaseException) -> str:
	"""@e as one line: its type and message, lines joined with " | " and cut
	at 400 characters (a failed build's message is the compiler's output)."""
	msg = " | ".join(ln.strip() for ln in str(e).strip().splitlines() if ln.strip())
	return f"{type(e).__name__}: {msg[:400]}"


def ceil_to(n: int, ps: int) -> int:
	return -(-n // ps) * ps


def _not_finished() -> bool:
	"""Req.finished() of a request being checkpointed: the replay frees the
	rest of its row itself (free_kv_row), as the scheduler does."""
	return False


def replay(cls, meta, reqs, ps: int) -> dict:
	"""One replay through @cls; matched tokens and seconds in the tree's calls."""
	inflight, cap = meta["max_inflight"], meta["capacity_tokens"]
	side = cpu_tree_cache(cls, ps, cap, rows=inflight,
			      max_context_len=ceil_to(meta["max_seq_len"], ps) + ps)
	tc, pool, alloc = side.cache, side.pool, side.alloc
	clock = time.perf_counter
	# The timed calls are bracketed by clock reads inline (calls made one
	# after the other share a bracket), their arguments built before: a
	# helper function around each call would add a call of its own to
	# every figure (about 0.4 us a call here, a few per cent of kvmm's
	# request).
	spent = 0.0

	def grab(n: int) -> torch.Tensor:
		"""@n slots (whole pages), evicting from the tree when short."""
		nonlocal spent
		if alloc.available_size() < n:
			p = EvictParams(num_tokens=n - alloc.available_size())
			t0 = clock()
			tc.evict(p)
			spent += clock() - t0
		got = alloc.alloc(n)
		assert got is not None, "the tree could not free enough"
		return got

	fifo: deque = deque()
	done = [False] * len(reqs)
	matched = 0

	def finish() -> None:
		nonlocal spent
		r, req = fifo.popleft()
		owned = len(req.full_untruncated_fill_ids)
		t0 = clock()
		tc.checkpoint(req, up_to=owned)
		spent += clock() - t0
		rest = [(req.kv.cache_protected_len, req.allocated)]
		t0 = clock()
		tc.free_kv_row(req.kv, rest)
		tc.unlock(req.lock)
		spent += clock() - t0
		req.lock = None
		pool.free_rows([req.kv.req_pool_idx])
		done[r] = True

	for r, (prev, prompt, full) in enumerate(reqs):
		while len(fifo) == inflight or (prev >= 0 and not done[prev] and fifo):
			finish()
		n = len(prompt)
		p = MatchPrefixParams(key=RadixKey(prompt[: n - 1]))
		t0 = clock()
		m_res = tc.match_prefix(p)
		lock = tc.lock(m_res.last_device_node)
		prefix = tc.path_device_indices(m_res.last_device_node)
		spent += clock() - t0
		m = m_res.device_prefix_len
		node = m_res.last_device_node
		prefix = prefix[:m]
		kv = ReqKvInfo()
		kv.req_pool_idx = pool.alloc_rows(1)[0]
		kv.cache_protected_len = m
		req = SimpleNamespace(kv=kv, full_untruncated_fill_ids=prompt, origin_input_ids=prompt,
				      extra_key=None, cache_salt=None, priority=None, lock=lock,
				      last_node=node, session=None, session_id=None, rid=str(r),
				      kv_rotation_base=None, finished=_not_finished)
		new = grab(ceil_to(n, ps) - m)
		pool.write((kv.req_pool_idx, slice(0, m)), prefix.to(torch.int32))
		pool.write((kv.req_pool_idx, slice(m, ceil_to(n, ps))), new.to(torch.int32))
		req.allocated = ceil_to(n, ps)
		t0 = clock()
		tc.checkpoint(req, up_to=n)
		spent += clock() - t0
		extra = ceil_to(len(full), ps) - req.allocated
		if extra > 0:
			dec = grab(extra)
			pool.write((kv.req_pool_idx, slice(req.allocated, req.allocated + extra)),
				   dec.to(torch.int32))
			req.allocated += extra
		req.full_untruncated_fill_ids = full
		fifo.append((r, req))
		matched += m
	while fifo:
		finish()
	ev, pr = tc.evictable_size(), tc.protected_size()
	ok = pr == 0 and alloc.available_size() + ev == cap
	return {"matched": matched, "seconds": spent, "accounting_ok": ok,
		"tree_core": getattr(tc, "_tree_core_backend", None)}


def main() -> None:
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--workload", type=Path, default=DEFAULT)
	ap.add_argument("--page-size", type=int, nargs="+", default=[1, 16])
	ap.add_argument("--repeat", type=int, default=3)
	ap.add_argument("--requests", type=int, default=0, help="the first N only (0: all)")
	args = ap.parse_args()
	meta, reqs = load(args.workload)
	if args.requests:
		reqs = reqs[: args.requests]
	cpp, cpp_why = cpp_tree()
	if cpp is None:
		print(f"radix: RadixCacheCpp not measured: {cpp_why}", file=sys.stderr, flush=True)
	unified, unified_why = unified_tree()
	if unified is None:
		print(f"radix: UnifiedRadixCache not measured: {unified_why}", file=sys.stderr,
		      flush=True)
	for ps in args.page_size:
		caches = [("radix", RadixCache), ("kvmm", KvmmRadixCache)]
		if unified is not None:
			caches.append(("unified", unified))
		if cpp is not None:
			caches.append(("cpp", cpp))
		res = {name: [] for name, _ in caches}
		for i in range(args.repeat):
			for name, cls in caches:
				if name == "cpp" and cpp is None:
					continue
				try:
					# the last replay's tree is garbage in cycles (RadixCache's
					# nodes and their parents): collected now, not by a
					# collection that lands in this replay's timed calls
					gc.collect()
					res[name].append(replay(cls, meta, reqs, ps))
				except Exception as e:	# noqa: BLE001
					if name != "cpp":
						raise
					cpp, cpp_why = None, why(e)	# built, but cannot be driven
					print(f"radix: RadixCacheCpp not measured: {cpp_why}",
					      file=sys.stderr, flush=True)
					continue
				print(f"radix: page size {ps} run {i + 1} {name}: "
				      f"{1e6 * res[name][-1]['seconds'] / len(reqs):.1f} us/request",
				      file=sys.stderr, flush=True)
		if "cpp" in res and len(res["cpp"]) < args.repeat:
			del res["cpp"]
		us = {k: statistics.median(1e6 * r["seconds"] / len(reqs) for r in v)
		      for k, v in res.items()}
		line = {
			"bench": "sglang_radix_replay", "page_size": ps, "requests": len(reqs),
			"matched_tokens_radix": res["radix"][0]["matched"],
			"matched_tokens_kvmm": res["kvmm"][0]["matched"],
			"us_per_request_radix": round(us["radix"], 2),
			"us_per_request_kvmm": round(us["kvmm"], 2),
			"speedup": round(us["radix"] / us["kvmm"], 2),
			# each run's own ratio: both trees ran back to back in it
			"speedup_per_run": [round(a["seconds"] / b["seconds"], 2)
					    for a, b in zip(res["radix"], res["kvmm"])],
			"repeat": args.repeat,
			"accounting_ok": all(r["accounting_ok"] for k in ("radix", "kvmm")
					     for r in res[k]),
			"cpp_measured": "cpp" in res,
			"cpp_not_measured_reason": None if "cpp" in res else cpp_why}
		if "unified" in res:
			line.update({
				"unified_tree_core": res["unified"][0]["tree_core"],
				"matched_tokens_unified": res["unified"][0]["matched"],
				"us_per_request_unified": round(us["unified"], 2),
				"speedup_vs_unified": round(us["unified"] / us["kvmm"], 2),
				"speedup_vs_unified_per_run": [
					round(a["seconds"] / b["seconds"], 2)
					for a, b in zip(res["unified"], res["kvmm"])],
				"accounting_ok_unified": all(r["accounting_ok"]
							     for r in res["unified"])})
		else:
			line["unified_not_measured_reason"] = unified_why
		if "cpp" in res:
			line.update({
				"matched_tokens_cpp": res["cpp"][0]["matched"],
				"matched_tokens_cpp_minus_radix":
					res["cpp"][0]["matched"] - res["radix"][0]["matched"],
				"us_per_request_cpp": round(us["cpp"], 2),
				"speedup_vs_cpp": round(us["cpp"] / us["kvmm"], 2),
				"accounting_ok_cpp": all(r["accounting_ok"] for r in res["cpp"])})
		print(json.dumps(line))


if __name__ == "__main__":
	main()
