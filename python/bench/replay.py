# SPDX-License-Identifier: MIT
"""replay.py - ../shared/bench/workload.jsonl replayed through the kvmm package.

The replay rule of shared/bench/README.md, as ``kvmm-bench replay --via
direct`` runs it: in arrival order, finish the oldest request (FIFO) while
max_inflight are in flight or the conversation's previous turn is not
finished; admit = open, MATCH prompt[:N-1], EXTEND the rest, COMMIT the
prompt, EXTEND the L-1 decoded tokens; finish = CLOSE committing prompt
plus L-1 outputs.  Tokens are numpy int32 arrays built before the clock
starts; only the kvmm calls are timed.  Prints one JSON line per page
size: matched tokens, µs per request (median over --repeat runs).

    python python/bench/replay.py [--workload FILE] [--page-size 1 16] [--repeat 5]
"""
import argparse
import json
import statistics
import time
from collections import deque
from pathlib import Path

import numpy as np

import kvmm

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "bench" / "workload.jsonl"


def load(path: Path):
	"""Return (meta, requests): each request's prompt and full token arrays."""
	segs, reqs, meta = {}, [], None
	with open(path) as f:
		for line in f:
			rec = json.loads(line)
			kind = rec["type"]
			if kind == "meta":
				meta = rec
			elif kind == "segment":
				segs[rec["id"]] = np.asarray(rec["tokens"], dtype=np.int32)
			elif kind == "request":
				prompt = np.concatenate([segs[s] for s in rec["prompt_segments"]])
				out = max(rec["output_len"] - 1, 0)
				full = np.concatenate([prompt, segs[rec["output_segment"]][:out]])
				reqs.append((rec["prev"], prompt, full, out))
	return meta, reqs


def replay(meta, reqs, page_size: int) -> dict:
	"""One replay; returns matched tokens, seconds in kvmm calls, check result."""
	inflight = meta["max_inflight"]
	ctx = kvmm.Context(layers=1, kv_heads=1, head_dim=1, dtype_bytes=2, page_size=page_size,
			   nr_pages=meta["capacity_tokens"] // page_size, max_seqs=inflight,
			   max_seq_len=meta["max_seq_len"])
	fifo: deque = deque()
	done = [False] * len(reqs)
	matched = 0
	spent = 0.0
	clock = time.perf_counter

	def finish() -> float:
		r, seq = fifo.popleft()
		_, prompt, full, out = reqs[r]
		t0 = clock()
		seq.close(full)
		t1 = clock()
		done[r] = True
		return t1 - t0

	for r, (prev, prompt, full, out) in enumerate(reqs):
		while len(fifo) == inflight or (prev >= 0 and not done[prev] and fifo):
			spent += finish()
		n = len(prompt)
		t0 = clock()
		seq = ctx.open()
		m = seq.match(prompt, n - 1) if n > 1 else 0
		seq.extend(n - m)
		seq.commit(prompt)
		if out:
			seq.extend(out)
		spent += clock() - t0
		fifo.append((r, seq))
		matched += m
	while fifo:
		spent += finish()
	st = ctx.stats()
	ok = st.pages_owned == 0 and st.pages_free + st.pages_cached == st.pages_total
	ctx.check()
	ctx.close()
	return {"matched": matched, "seconds": spent, "evicted_tokens": st.evict_pages * page_size,
		"accounting_ok": ok}


def main() -> None:
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--workload", type=Path, default=DEFAULT)
	ap.add_argument("--page-size", type=int, nargs="+", default=[1, 16])
	ap.add_argument("--repeat", type=int, default=5)
	args = ap.parse_args()
	meta, reqs = load(args.workload)
	for ps in args.page_size:
		runs = [replay(meta, reqs, ps) for _ in range(args.repeat)]
		us = [1e6 * r["seconds"] / len(reqs) for r in runs]
		assert len({r["matched"] for r in runs}) == 1
		print(json.dumps({"bench": "python_replay", "workload": str(args.workload),
				  "page_size": ps, "requests": len(reqs),
				  "matched_tokens": runs[0]["matched"],
				  "hit_rate": round(runs[0]["matched"] / meta["total_prompt_tokens"], 4),
				  "evicted_tokens": runs[0]["evicted_tokens"],
				  "us_per_request": round(statistics.median(us), 3),
				  "us_min": round(min(us), 3), "us_max": round(max(us), 3),
				  "repeat": args.repeat,
				  "accounting_ok": all(r["accounting_ok"] for r in runs)}))


if __name__ == "__main__":
	main()
