# SPDX-License-Identifier: MIT
"""The ring client: batches to kvmmd in another process, asyncio PROMOTE."""
import asyncio
import errno
import time

import numpy as np
import pytest

import kvmm
from kvmmd import running

PS = 16


@pytest.fixture
def kvmmd(tmp_path):
	"""A kvmmd with a 16-page pool over a 4-page host tier and an NVMe file."""
	with running(tmp_path / "kvmmd.sock",
		     ["--page-size", str(PS), "--pages", "16", "--host-pages", "4",
		      "--nvme-pages", "256", "--host-wmark-low", "4", "--host-wmark-high", "4",
		      "--nvme-file", str(tmp_path / "nvme"), "--layers", "1", "--kv-heads", "1",
		      "--head-dim", "16", "--max-seqs", "8", "--max-seq-len", "1024"]) as served:
		yield served


def prompt(i, n=64):
	return np.arange(i * 1000, i * 1000 + n, dtype=np.int32)


def serve(ring, tokens):
	"""One request through the ring: open, match, extend, commit, close."""
	b = ring.batch()
	b.open()
	seq = ring.submit(b)[0]
	b = ring.batch()
	b.match(seq, tokens, len(tokens) - 1)
	hit = ring.submit(b)[0]
	b = ring.batch()
	b.extend(seq, len(tokens) - hit)
	b.commit(seq, tokens)
	b.close(seq, tokens)
	assert ring.submit(b) == [0, len(tokens), 0]
	return hit


def pushed_to_nvme(ring):
	"""Serve prompt(0), then 11 more through the 16-page pool, so that
	prompt(0) is written down to NVMe; a batch settles the writes."""
	serve(ring, prompt(0))
	for i in range(1, 12):			# 11 * 4 pages through a 16-page pool
		serve(ring, prompt(i))
	deadline = time.monotonic() + 10
	while ring.stats().host_pages_writeback and time.monotonic() < deadline:
		time.sleep(0.01)


def open_match(ring, tokens, n):
	"""OPEN a sequence and MATCH @n tokens: (seq, matched)."""
	b = ring.batch()
	b.open()
	seq = ring.submit(b)[0]
	b = ring.batch()
	b.match(seq, tokens, n)
	return seq, ring.submit(b)[0]


def test_requests_through_kvmmd(kvmmd):
	_, sock = kvmmd
	with kvmm.connect(sock) as ring:
		assert serve(ring, prompt(0)) == 0
		assert serve(ring, prompt(0)) == 48		# whole pages of 63 tokens
		b = ring.batch()
		b.lookup(prompt(0))
		b.lookup(prompt(1))
		assert ring.submit(b) == [64, 0]
		st = ring.stats()
		assert st.pages_total == 16 and st.hit_tokens == 48 and st.seqs_open == 0


def test_a_failed_command_raises_after_the_batch(kvmmd):
	_, sock = kvmmd
	with kvmm.connect(sock) as ring:
		b = ring.batch()
		b.nop()
		b.extend(7, 1)			# no such sequence
		b.lookup(prompt(0))
		with pytest.raises(kvmm.InvalidArgument) as e:
			ring.submit(b)
		assert e.value.results == [0, -22, 0] and "EXTEND" in str(e.value)


def test_stale_sequence_id_is_refused(kvmmd):
	"""An id kept past its CLOSE cannot close the request that reuses its row."""
	_, sock = kvmmd
	with kvmm.connect(sock) as ring:
		b = ring.batch()
		b.open()
		old = ring.submit(b)[0]
		b = ring.batch()
		b.close(old)
		b.open()
		new = ring.submit(b)[1]
		assert new != old
		b = ring.batch()
		b.extend(new, 20)
		b.close(old)
		with pytest.raises(kvmm.Error) as e:
			ring.submit(b)
		assert e.value.errno == errno.ESTALE and e.value.results == [0, -errno.ESTALE]
		assert len(ring.seq_row(new).frames) == -(-20 // PS) and ring.stats().seqs_open == 1
		b = ring.batch()
		b.close(new)
		assert ring.submit(b) == [0]
		ring.check()


def test_promote_from_nvme_awaited_on_asyncio(kvmmd):
	"""A prefix pushed to NVMe comes back by a PROMOTE the event loop awaits."""
	_, sock = kvmmd
	with kvmm.connect(sock) as ring:
		pushed_to_nvme(ring)
		seq, hit = open_match(ring, prompt(0), 63)
		assert hit == 0
		assert ring.last_flags[0] & kvmm.CQE_F_LOWER

		async def promote():
			b = ring.batch()
			b.promote(seq, prompt(0), 63)
			ticks = 0

			async def ticker():
				nonlocal ticks
				while True:
					ticks += 1
					await asyncio.sleep(0)

			t = asyncio.ensure_future(ticker())
			res = await asyncio.wait_for(ring.submit_async(b), 10)
			t.cancel()
			return res, ticks

		before = ring.stats()
		(cached,), ticks = asyncio.run(promote())
		assert cached == 48
		assert ticks > 0				# the loop ran meanwhile
		after = ring.stats()
		assert after.nvme_promote_pages > before.nvme_promote_pages
		assert after.promote_async == before.promote_async + 1	# it completed later
		b = ring.batch()
		b.extend(seq, 64 - 48)
		b.close(seq, prompt(0))
		assert ring.submit(b) == [0, 0]


def test_prefetch_from_nvme_through_kvmmd(kvmmd):
	"""A queued prompt's prefix on NVMe is PREFETCHed through kvmmd (the
	device full of cache: reclaim for it); its MATCH then finds it on the
	device, nothing left below, and prefetch_hits counts it."""
	_, sock = kvmmd
	with kvmm.connect(sock) as ring:
		pushed_to_nvme(ring)
		b = ring.batch()
		b.lookup(prompt(0), 63)
		b.prefetch(prompt(0), 63)		# the device is full of cache: no room
		b.prefetch(prompt(0), 63, budget=8, reclaim=True)
		assert ring.submit(b) == [0, 0, 3]
		st = ring.stats()
		assert st.prefetch_pages == 3 and st.prefetch_hits == 0
		seq, hit = open_match(ring, prompt(0), 63)
		assert hit == 48
		assert not ring.last_flags[0] & kvmm.CQE_F_LOWER
		assert ring.stats().prefetch_hits == 3
		b = ring.batch()
		b.extend(seq, 64 - 48)
		b.close(seq, prompt(0))
		b.prefetch_cancel(7, 0)			# nothing of that tag in flight
		assert ring.submit(b) == [0, 0, 0]
		ring.check()


def test_kvmmd_gone_mid_use_is_an_error_not_a_crash(kvmmd):
	proc, sock = kvmmd
	ring = kvmm.connect(sock)
	serve(ring, prompt(0))
	proc.kill()
	proc.wait(10)
	b = ring.batch()
	b.lookup(prompt(0))
	with pytest.raises(kvmm.Error) as e:
		ring.submit(b, timeout=5)
	assert isinstance(e.value, (ConnectionResetError, TimeoutError))
	ring.close()


def test_connect_to_nothing(tmp_path):
	with pytest.raises(kvmm.Error) as e:
		kvmm.connect(str(tmp_path / "none.sock"), timeout=1)
	assert isinstance(e.value, (FileNotFoundError, ConnectionRefusedError))


def test_in_process_ring_keeps_its_context():
	ctx = kvmm.Context(layers=1, kv_heads=1, head_dim=4, dtype_bytes=4, page_size=4,
			   nr_pages=64, max_seqs=4, max_seq_len=128)
	ring = ctx.ring()
	assert serve(ring, prompt(0, 20)) == 0
	assert ctx.lookup(prompt(0, 20)) == 20
	with pytest.raises(kvmm.Busy):
		ctx.close()
	ring.close()
	ctx.close()


def test_two_clients_share_the_pool_of_kvmmd(kvmmd):
	"""KV one client writes through its mapping is what another reads."""
	_, sock = kvmmd
	with kvmm.connect(sock) as a, kvmm.connect(sock) as b:
		pa, pb = a.attach_pool(), b.attach_pool()
		assert pa.pages == pb.pages == 16
		ka, va = pa.kv(0, np.float16, (1, 16))
		kb, vb = pb.kv(0, np.float16, (1, 16))
		assert ka.shape == (16 * PS, 1, 16)
		ka[5] = 1.5
		va[7, 0, 3] = -2.0
		assert np.all(kb[5] == 1.5) and vb[7, 0, 3] == -2.0
		with pytest.raises(kvmm.Busy):
			pa.close()
		del ka, va, kb, vb
		pa.close()
		pb.close()


def test_seq_row_is_the_page_table_row(kvmmd):
	"""SEQ_ROW: a ring's own sequence's frames, in other processes' pool."""
	_, sock = kvmmd
	with kvmm.connect(sock) as a, kvmm.connect(sock) as b:
		assert a.page_size == PS
		ops = a.batch()
		ops.open()
		seq = a.submit(ops)[0]
		ops = a.batch()
		ops.extend(seq, 40)
		ops.commit(seq, prompt(0, 32))
		ops.seq_row(seq, 3)
		assert a.submit(ops) == [0, 32, 3]
		row = ops.row(2)
		assert (row.len, row.cached, len(row.frames)) == (40, 32, 3)
		assert len(set(row.frames.tolist())) == 3 and row.frames.min() >= 0
		assert np.array_equal(row.slots(30, 34),
				      [row.frames[1] * PS + 14, row.frames[1] * PS + 15,
				       row.frames[2] * PS, row.frames[2] * PS + 1])
		assert np.array_equal(a.seq_row(seq).frames, row.frames)
		ops = a.batch()
		ops.seq_row(seq, 2)			# a frame short
		with pytest.raises(kvmm.InvalidArgument):
			a.submit(ops)
		with pytest.raises(kvmm.InvalidArgument):
			b.seq_row(seq)			# not b's
		ops = a.batch()
		ops.close(seq)
		a.submit(ops)
		with pytest.raises(kvmm.InvalidArgument):
			a.seq_row(seq)			# closed


def test_in_process_seq_row_matches_sequence_slots():
	with kvmm.Context(layers=1, kv_heads=1, head_dim=4, dtype_bytes=4, page_size=4,
			  nr_pages=64, max_seqs=4, max_seq_len=128) as ctx, ctx.ring() as ring:
		b = ring.batch()
		b.open()
		seq = ring.submit(b)[0]
		b = ring.batch()
		b.extend(seq, 23)
		ring.submit(b)
		row = ring.seq_row(seq)
		assert row.len == 23 and len(row.frames) == 6
		assert np.array_equal(row.slots(), kvmm.Sequence(ctx, seq).slots())
		b = ring.batch()
		b.close(seq)
		ring.submit(b)
