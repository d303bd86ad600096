# SPDX-License-Identifier: MIT
"""Warm restart: a chat workload's cache back after a clean stop.

Forty conversations share a 50-token system prompt over a 512-token device
pool with host and NVMe tiers under it, served by an engine loop that
stamps every token's KV (a function of the token and its position) when it
computes it and checks the stamps of every token it is served from the
cache.  After ``Context.close()`` (in-process) or SIGTERM to kvmmd, a
context on the same file serves at least 95% of what was cached, every
byte checked; after SIGKILL mid-run, what reached the file comes back
below the prompt once a request computes it again, every byte right.
"""
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import kvmm
from kvmmd import KVMMD, answers

NCONV, SYS, TURN, TURNS = 40, 50, 12, 3
GEOM = dict(layers=1, kv_heads=1, head_dim=16, dtype_bytes=2, page_size=1, max_seqs=8,
	    max_seq_len=256)


def chat_prompt(c, t):
	"""Conversation @c's prompt at turn @t: the system prompt, then its turns."""
	parts = [np.arange(7000, 7000 + SYS, dtype=np.int32)]
	for i in range(t):
		base = 100000 + (c * 16 + i) * 64
		parts.append(np.arange(base, base + TURN, dtype=np.int32))
	return np.concatenate(parts)


def stamps(tokens, start, stop):
	"""The K and V every token's KV is computed as: exact in float16."""
	pos = np.arange(start, stop)
	t = tokens[start:stop].astype(np.int64)
	k = ((t * 7 + pos) % 2039).astype(np.float16)
	v = ((t * 13 + pos * 3) % 2027).astype(np.float16)
	return k[:, None, None], v[:, None, None]


class Engine:
	"""One request at a time: match, promote, check, compute the rest, close."""

	def __init__(self, kv, slots_of, run, settle=None):
		self.k, self.v = kv
		self.slots_of = slots_of	# (seq, start, stop) -> pool slots
		self.run = run			# (op, seq, tokens, n) -> result
		self.settle = settle		# after each request, or None

	def serve(self, tokens):
		n = len(tokens)
		seq = self.run("open", None, None, 0)
		hit = self.run("match", seq, tokens, n)
		hit = self.run("promote", seq, tokens, n)
		s = self.slots_of(seq, 0, hit)
		k, v = stamps(tokens, 0, hit)
		assert np.array_equal(self.k[s], np.broadcast_to(k, self.k[s].shape))
		assert np.array_equal(self.v[s], np.broadcast_to(v, self.v[s].shape))
		if hit < n:
			self.run("extend", seq, None, n - hit)
			s = self.slots_of(seq, hit, n)
			self.k[s], self.v[s] = stamps(tokens, hit, n)
		self.run("close", seq, tokens, n)
		if self.settle:
			self.settle()
		return hit

	def chat(self, turns=range(1, TURNS + 1)):
		for t in turns:
			for c in range(NCONV):
				self.serve(chat_prompt(c, t))

	def serve_all(self):
		"""Every conversation's last prompt again: the distinct tokens served
		from the cache (the system prompt once), which at page size 1 are
		pages of the cache."""
		hits = [self.serve(chat_prompt(c, TURNS)) for c in range(NCONV)]
		return sum(max(h - SYS, 0) for h in hits) + min(max(hits), SYS)


def ctx_engine(ctx):
	seqs = {}

	def run(op, seq, tokens, n):
		if op == "open":
			s = ctx.open()
			seqs[s.id] = s
			return s.id
		s = seqs[seq]
		if op == "match":
			return s.match(tokens, n)
		if op == "promote":
			return s.promote(tokens, n)
		if op == "extend":
			return s.extend(n)
		del seqs[seq]
		return s.close(tokens, n)

	return Engine(ctx.kv(0), lambda seq, a, b: seqs[seq].slots(a, b), run)


def with_ring(sock, fn, paced=False):
	"""fn(ring, engine) on a client of kvmmd at @sock, its pool mapped; the
	views go before the pool does.  @paced: after each request, the engine
	waits for background writeback to finish, as the time a model's step
	takes gives it."""
	with kvmm.connect(str(sock)) as ring:
		pool = ring.attach_pool()
		eng = ring_engine(ring, pool)
		if paced:
			eng.settle = lambda: writeback_done(ring)
		try:
			ret = fn(ring, eng)
		except BaseException:
			del eng			# a failure's frames keep the views: the pool goes with them
			raise
		del eng
		pool.close()
		return ret


def writeback_done(ring):
	deadline = time.monotonic() + 10
	while ring.stats().host_pages_writeback and time.monotonic() < deadline:
		time.sleep(0.001)


def ring_engine(ring, pool):
	def run(op, seq, tokens, n):
		b = ring.batch()
		if op == "open":
			b.open()
		elif op == "match":
			b.match(seq, tokens, n)
		elif op == "promote":
			b.promote(seq, tokens, n)
		elif op == "extend":
			b.extend(seq, n)
		else:
			b.close(seq, tokens, n)
		return ring.submit(b, timeout=30)[0]

	return Engine(pool.kv(0, np.float16, (1, 16)),
		      lambda seq, a, b: ring.seq_row(seq).slots(a, b), run)


def cached_pages(st):
	return st.pages_cached + st.host_pages_cached + st.nvme_pages_cached


def chat_ctx(path):
	return kvmm.Context(nr_pages=512, host_pages=256, nvme_pages=4096, nvme_path=path,
			    **GEOM)


def test_close_flushes_and_a_restart_serves_the_chat(tmp_path):
	path = str(tmp_path / "nvme")
	ctx = chat_ctx(path)
	eng = ctx_engine(ctx)
	eng.chat()
	del eng
	ctx.sync()
	assert ctx.lookup(chat_prompt(0, 0)) == SYS		# the prompt is hot on the device
	pages = cached_pages(ctx.stats())
	ctx.close()

	ctx = chat_ctx(path)
	assert ctx.stats().nvme_pages_cached * 100 >= pages * 95
	eng = ctx_engine(ctx)
	served = eng.serve_all()
	del eng
	assert served * 100 >= pages * 95
	ctx.check()
	ctx.close(flush_ms=0)


def test_flush_reports_and_keeps_the_tree(tmp_path):
	ctx = chat_ctx(str(tmp_path / "nvme"))
	eng = ctx_engine(ctx)
	eng.chat(turns=[1])
	del eng
	ctx.sync()
	before = ctx.stats()
	info = ctx.flush()
	assert isinstance(info, kvmm.FlushInfo)
	assert info.pages == cached_pages(before) - before.nvme_pages_cached and info.left == 0
	assert info.seconds > 0
	after = ctx.stats()
	assert cached_pages(after) == cached_pages(before)
	assert after.nvme_bytes_in > before.nvme_bytes_in
	ctx.close(flush_ms=0)
	plain = kvmm.Context(nr_pages=64, **GEOM)
	with pytest.raises(kvmm.Error):
		plain.flush()			# no NVMe tier
	plain.close()


def kvmmd_args(sock, path, extra=()):
	return [str(KVMMD), "--socket", str(sock), "--page-size", "1", "--pages", "512",
		"--host-pages", "256", "--nvme-pages", "4096", "--nvme-file", str(path),
		"--layers", "1", "--kv-heads", "1", "--head-dim", "16", "--max-seqs", "8",
		"--max-seq-len", "256", "--model-id", "chat-test", *extra]


def start(sock, path, extra=()):
	if not KVMMD.exists():
		pytest.skip(f"no {KVMMD}: build the tools first")
	if sock.exists():
		sock.unlink()		# a killed kvmmd's
	proc = subprocess.Popen(kvmmd_args(sock, path, extra), stdout=subprocess.DEVNULL,
				stderr=subprocess.PIPE, text=True)
	deadline = time.monotonic() + 10
	# the socket's file appears at bind(), a moment before listen() (and
	# a restart recovers its NVMe file in between): wait until it answers
	while not answers(sock) and proc.poll() is None and time.monotonic() < deadline:
		time.sleep(0.02)
	assert answers(sock), "kvmmd did not start"
	return proc


def stop(proc, sig):
	"""Signal kvmmd, wait for it to exit: (seconds it took, its log)."""
	t0 = time.monotonic()
	proc.send_signal(sig)
	_, err = proc.communicate(timeout=30)
	return time.monotonic() - t0, err


def test_kvmmd_sigterm_flushes_and_a_restart_serves_the_chat(tmp_path):
	sock, path = tmp_path / "kvmmd.sock", tmp_path / "nvme"
	proc = start(sock, path)
	try:
		def run(ring, eng):
			eng.chat()
			return cached_pages(ring.stats())

		pages = with_ring(sock, run)
	finally:
		took, log = stop(proc, signal.SIGTERM)
	assert proc.returncode == 0, log
	assert "flushed" in log and "0 left out" in log, log
	print(f"\nkvmmd SIGTERM: {pages} pages cached; exit in {took * 1000:.0f} ms; "
	      f"{[l for l in log.splitlines() if 'flushed' in l][0]}")

	proc = start(sock, path)
	try:
		def again(ring, eng):
			assert ring.stats().nvme_pages_cached * 100 >= pages * 95
			served = eng.serve_all()
			assert served * 100 >= pages * 95
			ring.check()

		with_ring(sock, again)
	finally:
		stop(proc, signal.SIGTERM)


def test_kvmmd_no_flush_when_told(tmp_path):
	"""--shutdown-flush-ms 0: the old stop, nothing written, nothing said."""
	sock, path = tmp_path / "kvmmd.sock", tmp_path / "nvme"
	proc = start(sock, path, ["--shutdown-flush-ms", "0"])
	try:
		with_ring(sock, lambda ring, eng: eng.chat(turns=[1]))
	finally:
		_, log = stop(proc, signal.SIGTERM)
	assert proc.returncode == 0 and "flushed" not in log, log


def test_kvmmd_sigkill_mid_run_recovers_what_reached_the_file(tmp_path):
	"""Killed in the middle of a turn: the system prompt was never written,
	yet the conversations that reached NVMe are served again below it, and
	every byte served is what was computed."""
	sock, path = tmp_path / "kvmmd.sock", tmp_path / "nvme"
	proc = start(sock, path)
	try:
		def run(ring, eng):
			eng.chat(turns=[1, 2])
			for c in range(NCONV // 2):
				eng.serve(chat_prompt(c, 3))
			st = ring.stats()
			proc.kill()
			proc.wait(10)
			return st.nvme_pages_cached

		on_nvme = with_ring(sock, run, paced=True)
	finally:
		if proc.poll() is None:
			proc.kill()
		proc.communicate(timeout=10)
	assert on_nvme > 0

	proc = start(sock, path)
	try:
		def again(ring, eng):
			st = ring.stats()
			waiting = st.orphan_pages
			assert waiting + st.nvme_pages_cached >= on_nvme * 9 // 10
			eng.serve_all()			# checks every token it is served
			st = ring.stats()
			print(f"\nkvmmd SIGKILL: {on_nvme} pages on NVMe when killed, {waiting} "
			      f"waiting at restart, {st.orphan_adopted} adopted, "
			      f"{st.nvme_promote_pages} promoted, {st.nvme_csum_fail} misses")
			assert st.orphan_adopted * 10 >= waiting * 9
			assert st.nvme_promote_pages * 10 >= on_nvme * 9
			ring.check()

		with_ring(sock, again)
	finally:
		stop(proc, signal.SIGTERM)


def test_drop_caches_tiers_counts_each_tier(tmp_path):
	"""Dropping the NVMe tier leaves the device alone and counts what went."""
	ctx = chat_ctx(str(tmp_path / "nvme"))
	eng = ctx_engine(ctx)
	eng.chat(turns=[1, 2])
	del eng
	ctx.sync()
	before = ctx.stats()
	assert before.nvme_pages_cached > 0
	freed = ctx.drop_caches_tiers(["nvme"])
	assert freed == {"device": 0, "host": 0, "nvme": before.nvme_pages_cached}
	after = ctx.stats()
	assert after.pages_cached == before.pages_cached and after.nvme_pages_cached == 0
	freed = ctx.drop_caches_tiers()
	assert freed["device"] > 0 and ctx.stats().nodes == 0
	with pytest.raises(ValueError):
		ctx.drop_caches_tiers(["gpu"])
	ctx.check()
	ctx.close(flush_ms=0)
