# SPDX-License-Identifier: MIT
"""An engine author's ordinary mistakes: each raises a clear exception.

Closed rings and contexts, a context closed under a call in another
thread, a registered buffer replaced under a read in flight, one ring
shared by threads, slots asked past a sequence's length.  A mistake that
could crash the interpreter runs in a child interpreter, so that a
segfault or a hang fails the test instead of ending the run.
"""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kvmm
from conftest import GEOM


def run_child(code: str, timeout: float = 60.0) -> str:
	"""Run @code in a fresh interpreter; fail on a signal, an error or a hang."""
	prelude = textwrap.dedent("""\
		import errno, os, sys, tempfile, threading, time
		import numpy as np
		import kvmm
		GEOM = dict(layers=2, kv_heads=2, head_dim=8, dtype_bytes=4, max_seqs=4,
			    max_seq_len=256)
		""")
	try:
		p = subprocess.run([sys.executable, "-X", "dev", "-c",
				    prelude + textwrap.dedent(code)],
				   capture_output=True, text=True, timeout=timeout)
	except subprocess.TimeoutExpired as e:
		pytest.fail(f"the child hung for {timeout} s: {e.stdout} {e.stderr}")
	assert p.returncode == 0, (f"the child ended with {p.returncode} "
				   f"(a negative code is a signal)\n{p.stdout}\n{p.stderr}")
	return p.stdout


# ---- slots only where the sequence has KV ----

def test_slots_past_length_raise(ctx):
	"""The decode off-by-one: the slot of a token not yet EXTENDed."""
	a, b = ctx.open(), ctx.open()
	a.extend(6)
	b.extend(6)
	assert np.array_equal(a.slots(0, 6), a.slots())
	with pytest.raises(IndexError, match="outside the sequence's 6 tokens"):
		a.slots(6, 7)
	with pytest.raises(IndexError):
		a.slots(0, 9)
	with pytest.raises(IndexError):
		a.slots(9)
	# a negative start is no Python slice: it would wrap to the pool's end
	with pytest.raises(IndexError):
		a.slots(-1)
	with pytest.raises(IndexError):
		a.slots(4, 2)
	assert len(a.slots(6)) == 0
	ctx.check()


def test_slots_after_extend_work(ctx):
	"""The same token is fine once its EXTEND ran: the check is the length."""
	s = ctx.open()
	s.extend(5)
	with pytest.raises(IndexError):
		s.slots(5, 6)
	s.extend(1)
	slot = s.slots(5, 6)
	assert slot[0] >= 0 and slot[0] // ctx.page_size == ctx.page_table()[s.id, 1]
	ctx.check()


def test_seqrow_slots_bounds(ctx):
	"""SeqRow.slots() checks as Sequence.slots() does (SEQ_ROW's copy)."""
	with ctx.ring() as ring:
		b = ring.batch()
		b.open()
		seq = ring.submit(b)[0]
		b = ring.batch()
		b.extend(seq, 5)
		ring.submit(b)
		row = ring.seq_row(seq)
		assert row.len == 5
		assert len(row.slots(-0, 5)) == 5
		for start, stop in ((-3, 2), (0, 6), (5, 8), (3, 1)):
			with pytest.raises(IndexError):
				row.slots(start, stop)
		b = ring.batch()
		b.close(seq)
		ring.submit(b)
	ctx.check()


# ---- nothing may crash the interpreter or hang ----

def test_batch_outputs_after_ring_close_raise():
	"""kvalues(), records(), row(), kres() of a batch whose ring was closed."""
	out = run_child("""
		ctx = kvmm.Context(**GEOM, page_size=4, nr_pages=16, host_pages=32)
		ring = ctx.ring()
		b = ring.batch()
		b.kspace("m", 3000)
		sp = ring.submit(b)[0]
		b = ring.batch()
		o = b.open()
		seq = ring.submit(b)[o]
		b = ring.batch()
		i = b.kput(sp, ["a"], [np.ones(3000, np.uint8)], 3000)
		j = b.kget(sp, ["a"], 3000)
		from kvmm._kvmm import lib
		d = b.dump(lib.KVMM_DUMP_KSPACES)
		r = b.seq_row(seq, 8)
		ring.submit(b)
		assert b.kres(j)[0] == 0 and b.kvalues(j)[0][0] == 1 and b.row(r).len == 0
		ring.close()
		for name, call in (("kres", lambda: b.kres(i)), ("kvalues", lambda: b.kvalues(j)),
				   ("records", lambda: b.records(d)), ("row", lambda: b.row(r)),
				   ("kput", lambda: b.kput(sp, ["b"], [np.ones(3000, np.uint8)], 3000)),
				   ("submit", lambda: ring.submit(b))):
			try:
				call()
			except kvmm.InvalidArgument as e:
				assert "closed" in str(e), e
				print(name, "raised")
			else:
				raise AssertionError(name + " did not raise")
		ctx.check()
		ctx.close()
		""")
	assert out.split() == ["kres", "raised", "kvalues", "raised", "records", "raised",
			       "row", "raised", "kput", "raised", "submit", "raised"]


def test_a_later_batch_makes_an_earlier_one_unreadable(ctx):
	"""The data area holds one batch: reading or submitting the one before
	raises instead of returning (or sending) the later batch's bytes."""
	with ctx.ring() as ring:
		b1 = ring.batch()
		b1.open()
		r1 = b1.seq_row(0, 4)
		b2 = ring.batch()
		b2.nop()
		with pytest.raises(kvmm.InvalidArgument, match="later batch"):
			ring.submit(b1)
		with pytest.raises(kvmm.InvalidArgument, match="later batch"):
			b1.match(0, np.arange(4, dtype=np.int32))
		assert ring.submit(b2) == [0]
		b0 = ring.batch()
		o = b0.open()
		seq = ring.submit(b0)[o]	# a ring's id: the row and its generation
		b3 = ring.batch()
		r3 = b3.seq_row(seq, 4)
		ring.submit(b3)
		assert b3.row(r3).len == 0
		ring.batch()
		with pytest.raises(kvmm.InvalidArgument, match="later batch"):
			b3.row(r3)
		del r1, seq
	ctx.check()


def test_close_while_another_thread_is_in_a_call():
	"""ctx.close() while a thread is inside a C call on the context: close()
	waits for the call, which finishes on a live context; calls after raise."""
	out = run_child("""
		import logging
		ctx = kvmm.Context(**GEOM, page_size=4, nr_pages=16)
		inside, release = threading.Event(), threading.Event()

		class Hold(logging.Handler):
			def emit(self, record):	# runs inside the C call (params.log)
				if threading.current_thread().name == "caller":
					inside.set()
					release.wait(30)
					try:	# a call from inside one: it may not close
						ctx.close()
					except kvmm.Busy as e:
						print("inner-busy:", "inside a call" in str(e))

		logging.getLogger("kvmm").addHandler(Hold())
		got = []

		def caller():
			try:
				ctx.set_watermarks(0, 9, 3)	# refused, with a log line
			except kvmm.InvalidArgument as e:
				got.append(str(e))

		t = threading.Thread(target=caller, name="caller")
		t.start()
		assert inside.wait(30), "the call never logged"
		closer = threading.Thread(target=ctx.close)
		closer.start()
		closer.join(0.3)
		print("waiting:", closer.is_alive() and not ctx.closed)
		release.set()
		t.join()
		closer.join()
		assert got and "wmark_low" in got[0], got
		try:
			ctx.check()
		except kvmm.InvalidArgument as e:
			print("closed:", "closed" in str(e))
		""")
	assert out.split() == ["waiting:", "True", "inner-busy:", "True", "closed:", "True"]


def test_close_races_calls_in_threads():
	"""Threads hammering a context while the main thread closes it: each
	call works, or raises InvalidArgument once the context is closed (or
	Busy when every row is taken); the library's state stays whole."""
	out = run_child("""
		for rnd in range(10):
			ctx = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
			toks = np.arange(64, dtype=np.int32)
			stop = threading.Event()
			errs = []

			def work():
				while not stop.is_set():
					try:
						s = ctx.open()
						s.extend(16)
						s.commit(toks, 16)
						ctx.lookup(toks)
						s.close()
					except kvmm.InvalidArgument as e:
						if "closed" not in str(e):
							errs.append(repr(e))
						return
					except kvmm.Busy as e:	# every row taken: another thread's
						pass

			ts = [threading.Thread(target=work) for _ in range(3)]
			for t in ts:
				t.start()
			time.sleep(0.005)
			ctx.close()
			stop.set()
			for t in ts:
				t.join()
			assert not errs, errs
		print("ok")
		""", timeout=120)
	assert out.split() == ["ok"]


def test_one_ring_shared_by_four_threads():
	"""A Ring used by 4 threads without a lock: calls that collide raise
	Busy or InvalidArgument (a later batch), none hangs; with a lock around
	each batch every one works."""
	out = run_child("""
		ctx = kvmm.Context(**dict(GEOM, max_seqs=64), page_size=4, nr_pages=64)
		done, refused, errs = [0], [0], []

		def work(lock):
			for _ in range(300):
				try:
					if lock:
						lock.acquire()
					try:
						b = ring.batch()
						b.open()
						seq = ring.submit(b, timeout=10)[0]
						b = ring.batch()
						b.extend(seq, 4)
						b.close(seq)
						ring.submit(b, timeout=10)
						done[0] += 1
					finally:
						if lock:
							lock.release()
				except (kvmm.Busy, kvmm.InvalidArgument) as e:
					refused[0] += 1
				except BaseException as e:
					errs.append(repr(e))

		for lock in (None, threading.Lock()):
			ring = ctx.ring()	# a fresh one: its sequences go with it
			done[0] = refused[0] = 0
			ts = [threading.Thread(target=work, args=(lock,)) for _ in range(4)]
			for t in ts:
				t.start()
			for t in ts:
				t.join()
			assert not errs, errs
			print(done[0] > 0, refused[0] if lock else "-")
			ring.close()
			ctx.check()
		ctx.close()
		""", timeout=120)
	assert out.split() == ["True", "-", "True", "0"]


def test_register_waits_for_a_kget_in_flight(tmp_path):
	"""Ring.register() replacing a buffer a posted KGET from NVMe still
	writes into: it returns once the read completed, so the old buffer can
	go (before, the I/O worker wrote into freed memory)."""
	out = run_child(f"""
		VB, N = 16 << 10, 32			# 32 values of 16 pages each
		ctx = kvmm.Context(**GEOM, page_size=4, nr_pages=16, host_pages=256,
				   host_wmark_low=240, host_wmark_high=240, nvme_pages=2048,
				   nvme_path={str(tmp_path / "nvme")!r})
		sp = ctx.keyed("m", VB)
		vals = [np.full(VB, i, np.uint8) for i in range(N)]
		for i in range(N):
			assert list(sp.put([i], [vals[i]])) == [0]
			deadline = time.monotonic() + 10	# written down before the next
			while ctx.stats().keyed_nvme_pages < i * 16 and \
			      time.monotonic() < deadline:
				ctx.sync()
		assert ctx.stats().keyed_evicts == 0, ctx.stats()
		ring = ctx.ring()
		b = ring.batch()
		b.kspace("m", VB)
		space = ring.submit(b)[0]
		for rnd in range(3):
			old = np.zeros(N * VB, np.uint8)		# mmap'd: unmapped when freed
			ring.register([old])
			pb = ring.post_batch()
			pb.kget_at(space, list(range(N)), 1, np.arange(N, dtype=np.uint64) * VB, VB)
			ring.post(pb)
			ring.register([np.zeros(64, np.uint8)])	# replaces buffer 1
			done = ring.poll()			# the KGET completed meanwhile
			assert len(done) == 1 and done[0][2] == [N], done
			got = old.reshape(N, VB)
			assert all((got[i] == i).all() for i in range(N))
			del old, got
		ring.close()
		ctx.check()
		ctx.close()
		print("ok")
		""")
	assert out.split() == ["ok"]


# ---- errors say why: the field and the rule ----

@pytest.mark.parametrize("params, words", [
	(dict(page_size=4, nr_pages=64, max_seqs=0), ("max_seqs 0", "1..")),
	(dict(page_size=4, nr_pages=64, max_seq_len=0), ("max_seq_len 0", "no default")),
	(dict(page_size=4), ("nr_pages", "mem_fraction")),
	(dict(page_size=4, nr_pages=64, wmark_low=9, wmark_high=3),
	 ("wmark_low 9", "min <= low <= high")),
	(dict(page_size=4, nr_pages=64, nvme_pages=8), ("nvme_pages", "host tier")),
	(dict(page_size=4, nr_pages=64, evict_policy="fifo"), ("evict_policy 'fifo'",)),
	(dict(page_size=4, nr_pages=64, host_pages=8, host_wmark_low=9, host_wmark_high=3),
	 ("host_wmark_low 9", "low <= high")),
	(dict(page_size=4, nr_pages=64, write_policy=1), ("write_policy", "host_pages")),
])
def test_create_refusal_names_field_and_rule(params, words):
	geom = dict(GEOM, **{k: v for k, v in params.items() if k in GEOM})
	rest = {k: v for k, v in params.items() if k not in GEOM}
	with pytest.raises(kvmm.InvalidArgument) as e:
		kvmm.Context(**geom, **rest)
	for w in words:
		assert w in str(e.value), str(e.value)


def test_create_without_max_seqs_says_so():
	"""The user who leaves max_seqs out is told it, not only EINVAL."""
	g = {k: v for k, v in GEOM.items() if k != "max_seqs"}
	with pytest.raises(kvmm.InvalidArgument, match=r"kvmm_create: .*\(create: max_seqs 0"):
		kvmm.Context(**g, page_size=4, nr_pages=64)


def test_sequence_refusals_name_the_rule(ctx):
	s = ctx.open()
	toks = np.arange(16, dtype=np.int32)
	with pytest.raises(kvmm.InvalidArgument, match="commit: n = 8 is past seq .* 0 tokens"):
		s.commit(toks, 8)
	with pytest.raises(kvmm.InvalidArgument, match="extend: seq .*: n = 0"):
		s.extend(0)
	with pytest.raises(kvmm.InvalidArgument, match="above max_seq_len 256"):
		s.extend(300)
	s.extend(4)
	with pytest.raises(kvmm.InvalidArgument, match="holds 4 tokens already"):
		s.match(toks)
	with pytest.raises(kvmm.InvalidArgument, match="named twice"):
		ctx.extend_batch([s, s], [1, 1])
	with pytest.raises(kvmm.InvalidArgument, match="min <= low <= high"):
		ctx.set_watermarks(0, 9, 3)
	s.close()
	ctx.check()


def test_default_params_are_those_in_effect():
	d = kvmm.default_params()
	assert d["nvme_qd"] == 32 and d["remote_timeout_ms"] == 1000
	assert d["evict_policy"] == "lru" and d["backend"] == "mock"
	assert d["max_seqs"] is None and d["page_size"] is None and d["nr_pages"] is None
	assert d["wmark_low"] == 0 and d["frames"] == "kvmm"
	# the whole dict goes back in: None is "not given"
	with kvmm.Context(**dict(d, **GEOM, page_size=4, nr_pages=64)) as c:
		assert c.evict_policy == "lru" and c.nr_pages == 64
		c.check()


def test_a_second_thread_on_a_busy_ring_raises_busy(tmp_path):
	"""While one thread sleeps inside a ring's call, another's call on it
	raises Busy at once; the ring works afterwards."""
	from kvmmd import running

	sock = tmp_path / "k.sock"
	with running(sock, ["--pages", "64", "--quiet"]) as (_, path):
		out = run_child(f"""
			with kvmm.connect({path!r}) as ring:
				got = []

				def sleeper():
					try:	# nothing in flight: sleeps on the CQ doorbell, in the ring
						ring.wait(timeout=1.5)
					except TimeoutError:
						got.append("timeout")

				t = threading.Thread(target=sleeper)
				t.start()
				time.sleep(0.3)
				for call in (ring.batch, ring.poll):
					try:
						call()
					except kvmm.Busy as e:
						print("busy:", "another thread" in str(e))
				t.join()
				b = ring.batch()
				b.nop()
				print(got, ring.submit(b))
				ring.check()
			""")
	assert out.split() == ["busy:", "True", "busy:", "True", "['timeout']", "[0]"]


@pytest.mark.parametrize("params, exc, words", [
	(dict(mem_total=1 << 20, mem_avail=1 << 10, mem_fraction=0.5), kvmm.NoSpace,
	 ("mem_fraction 0.5", "leaves nothing")),
	(dict(nr_pages=64, backend="tpu"), kvmm.Error, ("backend 'tpu'", "not in this build")),
	(dict(nr_pages=64, nvme_qd=5000), kvmm.InvalidArgument, ("nvme_qd 5000", "4096")),
	(dict(nr_pages=64, host_node=-2), kvmm.InvalidArgument, ("host_node -2",)),
	(dict(nr_pages=64, max_pages=32), kvmm.InvalidArgument, ("max_pages 32", "nr_pages (64)")),
	(dict(nr_pages=64, mem_fraction=0.5), kvmm.InvalidArgument, ("not both",)),
])
def test_create_refusals_of_other_errnos_say_why(params, exc, words):
	with pytest.raises(exc) as e:
		kvmm.Context(**GEOM, page_size=4, **params)
	for w in words:
		assert w in str(e.value), str(e.value)
