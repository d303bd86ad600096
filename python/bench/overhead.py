# SPDX-License-Identifier: MIT
"""overhead.py - per-call cost of the Python binding beside the C API.

Runs the same request loop (open, MATCH 63 tokens of a cached 64-token
prompt, EXTEND the rest, COMMIT 64, CLOSE) through the kvmm package and through
overhead.c, alternating C and Python for several rounds, and prints JSON:
each round's median ns per call, then the medians over rounds and the
Python/C difference (the binding's overhead) per call.

    python python/bench/overhead.py [--rounds 5] [--iters 20000] [--page-size 1]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import kvmm

ROOT = Path(__file__).resolve().parents[2]
OPS = ("open", "match", "extend", "commit", "close")


def build_c(objtree: Path) -> Path:
	"""Compile overhead.c against this tree's libkvmm.a; return the binary."""
	exe = objtree / "python-bench" / "overhead"
	exe.parent.mkdir(parents=True, exist_ok=True)
	subprocess.check_call(["make", "-C", str(ROOT), "-s", "-j2", f"O={objtree}", "lib"])
	config = (objtree / "config.mk").read_text()
	libs = [f"-l{lib}" for flag, lib in (("LIBURING", "uring"), ("LIBNUMA", "numa"),
					     ("HIREDIS", "hiredis"))
		if f"CONFIG_KVMM_{flag} := y" in config]
	subprocess.check_call(["cc", "-O2", "-I", str(ROOT / "include"), "-I", str(ROOT / "uapi"),
			       "-o", str(exe), str(Path(__file__).with_name("overhead.c")),
			       str(objtree / "libkvmm.a"), "-pthread"] + libs)
	return exe


def run_python(iters: int, page_size: int) -> dict:
	"""Time each call of @iters requests through the package; median ns per call."""
	prompt = np.arange(64, dtype=np.int32)
	ns = {op: [] for op in OPS}
	clock = time.perf_counter_ns
	with kvmm.Context(layers=2, kv_heads=2, head_dim=32, dtype_bytes=4,
			  page_size=page_size, nr_pages=4096, max_seqs=16, max_seq_len=1024) as ctx:
		for _ in range(iters):
			t0 = clock()
			seq = ctx.open()
			t1 = clock()
			hit = seq.match(prompt, 63)
			t2 = clock()
			seq.extend(64 - hit)
			t3 = clock()
			seq.commit(prompt, 64)
			t4 = clock()
			seq.close()
			t5 = clock()
			for op, a, b in zip(OPS, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
				ns[op].append(b - a)
	out = {"lang": "python"}
	out.update({f"{op}_ns": statistics.median(v) for op, v in ns.items()})
	return out


def main() -> None:
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--rounds", type=int, default=5)
	ap.add_argument("--iters", type=int, default=20000)
	ap.add_argument("--page-size", type=int, default=1)
	ap.add_argument("--objtree", type=Path, default=ROOT / "build")
	args = ap.parse_args()
	exe = build_c(args.objtree)
	rounds = {"c": [], "python": []}
	for _ in range(args.rounds):
		c = subprocess.run([str(exe), str(args.iters), str(args.page_size)], check=True,
				   capture_output=True, text=True).stdout
		rounds["c"].append(json.loads(c))
		rounds["python"].append(run_python(args.iters, args.page_size))
	result = {"bench": "python_overhead", "page_size": args.page_size, "rounds": args.rounds,
		  "iters": args.iters, "python": sys.version.split()[0]}
	for op in OPS:
		c = statistics.median(r[f"{op}_ns"] for r in rounds["c"])
		py = statistics.median(r[f"{op}_ns"] for r in rounds["python"])
		result[op] = {"c_ns": c, "python_ns": py, "overhead_ns": py - c,
			      "ratio": round(py / c, 2) if c else None}
	print(json.dumps(result))


if __name__ == "__main__":
	main()
