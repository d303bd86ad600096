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
