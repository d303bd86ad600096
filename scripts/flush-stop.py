#!/usr/bin/env python3
"""How long kvmmd's stop takes with its flush to NVMe.

Starts build/bin/kvmmd with host and NVMe tiers (page size 16, 8 layers,
8 KV heads of 128, bf16: 512 KiB a page) in DIR, commits 200 prompts of
768 tokens sharing a 512-token prefix through a ring, sends SIGTERM and
times the exit; prints what was cached where, the time and kvmmd's flush
line.  Extra arguments go to kvmmd (--shutdown-flush-ms 200, say).

Usage: scripts/flush-stop.py DIR [KVMMD_OPTION ...]
(with the kvmm package importable: the venv make check builds, for one)
"""
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import kvmm

ROOT = Path(__file__).resolve().parent.parent
PAGE, LAYERS, HEADS, DIM = 16, 8, 8, 128
PAGE_BYTES = PAGE * LAYERS * HEADS * DIM * 2 * 2


def main():
	d = Path(sys.argv[1])
	d.mkdir(exist_ok=True)
	sock, nvme = d / "s", d / "nvme"
	for p in (sock, nvme):
		if p.exists():
			p.unlink()
	proc = subprocess.Popen(
		[str(ROOT / "build/bin/kvmmd"), "--socket", str(sock), "--page-size", str(PAGE),
		 "--pages", "1024", "--host-pages", "512", "--nvme-pages", "4096",
		 "--nvme-file", str(nvme), "--layers", str(LAYERS), "--kv-heads", str(HEADS),
		 "--head-dim", str(DIM), "--max-seqs", "8", "--max-seq-len", "4096",
		 "--model-id", "flush-stop", *sys.argv[2:]],
		stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
	while not sock.exists():
		if proc.poll() is not None:
			sys.exit(proc.stderr.read())
		time.sleep(0.02)
	with kvmm.connect(str(sock)) as ring:
		shared = np.arange(1, 513, dtype=np.int32)
		for c in range(200):
			own = np.arange(10**6 + c * 1000, 10**6 + c * 1000 + 256, dtype=np.int32)
			tok = np.concatenate([shared, own])
			b = ring.batch()
			b.open()
			seq = ring.submit(b)[0]
			b = ring.batch()
			b.match(seq, tok)
			hit = ring.submit(b)[0]
			b = ring.batch()
			if hit < len(tok):
				b.extend(seq, len(tok) - hit)
			b.close(seq, tok)
			ring.submit(b)
		st = ring.stats()
	up = st.pages_cached + st.host_pages_cached
	print(f"cached pages: device {st.pages_cached}, host {st.host_pages_cached}, "
	      f"nvme {st.nvme_pages_cached} ({up * PAGE_BYTES >> 20} MiB not on NVMe)")
	t0 = time.monotonic()
	proc.send_signal(signal.SIGTERM)
	_, err = proc.communicate()
	print(f"SIGTERM to exit: {(time.monotonic() - t0) * 1000:.0f} ms")
	print("".join(l + "\n" for l in err.splitlines() if l.startswith("kvmmd: flush")), end="")


if __name__ == "__main__":
	main()
