# SPDX-License-Identifier: MIT
"""kvmm.vllm.KvmmSecondaryTier under vLLM 0.33's own types, beyond vLLM's tests:
bytes back as stored (batches of 0 to 5 blocks of 2 MiB), RETRY while a
store is in flight, partial promotion failure, two engine processes
sharing through kvmmd, kvmmd restarted on its NVMe file, stores larger
than the host tier streaming to NVMe, bad chunk ids and locality, and
vLLM's TieringOffloadingManager storing through kvmm and promoting back.

Run by tests/engines/run.sh in the vLLM environment (vLLM's sdist source on
PYTHONPATH, python/tests for the kvmmd helper).
"""
import multiprocessing
import time
from unittest.mock import MagicMock

import numpy as np
import pytest

from kvmmd import running
from vllm.v1.kv_offload.base import LookupResult, ReqContext
from vllm.v1.kv_offload.tiering.base import TransferJob

from kvmm.vllm import KvmmSecondaryTier

BLOCK = 2 << 20			# 16 tokens of an 8B model's KV, as vLLM's blocks are
ROWS = 12
CTX = ReqContext(req_id="kvmm")


def primary(seed=None):
	rows = np.zeros((ROWS, BLOCK), dtype=np.uint8)
	if seed is not None:
		rows[:] = np.random.default_rng(seed).integers(0, 256, rows.shape, dtype=np.uint8)
	return rows


def tier(rows, **kw):
	kw.setdefault("host_bytes", 64 << 20)
	return KvmmSecondaryTier(MagicMock(), memoryview(rows), "kvmm", model_id="llama-test@1",
				 **kw)


def key(n):
	return n.to_bytes(8, "big") + b"\x00" * 4	# vLLM's keys: block hash + group


def job(jid, keys, ids, promotion=False):
	return TransferJob(job_id=jid, keys=keys, chunk_ids=np.asarray(ids, dtype=np.int64),
			   is_promotion=promotion, req_context=CTX)


def finished(t):
	t.drain_jobs()
	return list(t.get_finished_jobs())


def kvmmd_args(tmp_path, nvme="nvme", extra=(), host_pages=1024):
	# 64 KiB pages (4 tokens of 16 KiB), 64 MiB of host tier, 256 MiB of NVMe
	return ["--page-size", "4", "--pages", "16", "--layers", "1", "--kv-heads", "1",
		"--head-dim", "2048", "--dtype-bytes", "4", "--host-pages", str(host_pages),
		"--nvme-pages", "4096", "--nvme-file", str(tmp_path / nvme),
		"--model-id", "vllm-tests", *extra]


@pytest.mark.parametrize("n", [0, 1, 2, 5])
@pytest.mark.parametrize("where", ["in-process", "kvmmd"])
def test_blocks_come_back_byte_for_byte(n, where, tmp_path):
	rows = primary(seed=n)
	want = rows[:n].copy()
	with running(tmp_path / "k.sock", kvmmd_args(tmp_path)) as (_, sock):
		t = tier(rows, **({"socket": sock} if where == "kvmmd" else {}))
		keys = [key(i) for i in range(n)]
		t.submit_store(job(1, keys, range(n)))
		(r,) = finished(t)
		assert r.job_id == 1 and r.success and r.transfer_bytes == n * BLOCK
		rows[:] = 0
		t.submit_load(job(2, keys, range(ROWS - n, ROWS), promotion=True))
		(r,) = finished(t)
		assert r.success and r.successful_keys is None
		assert np.array_equal(rows[ROWS - n:], want)
		assert [t.lookup(k, CTX) for k in keys] == [LookupResult.HIT] * n
		t.shutdown()


def test_retry_while_stored_then_hit():
	rows = primary(seed=1)
	t = tier(rows)
	t.submit_store(job(1, [key(1)], [0]))
	assert t.lookup(key(1), CTX) is LookupResult.RETRY	# until the job is reaped
	assert [r.success for r in finished(t)] == [True]
	assert t.lookup(key(1), CTX) is LookupResult.HIT
	assert t.lookup(key(2), CTX) is LookupResult.MISS
	t.shutdown()


def test_partial_promotion_names_the_blocks_loaded():
	rows = primary(seed=2)
	t = tier(rows)
	t.submit_store(job(1, [key(1), key(3)], [1, 3]))
	assert finished(t)[0].success
	t.submit_load(job(2, [key(1), key(2), key(3)], [5, 6, 7], promotion=True))
	(r,) = finished(t)
	assert not r.success and list(r.successful_keys) == [key(1), key(3)]
	assert np.array_equal(rows[5], rows[1]) and np.array_equal(rows[7], rows[3])
	t.submit_load(job(3, [key(2)], [8], promotion=False))
	(r,) = finished(t)
	assert not r.success and r.successful_keys is None
	t.shutdown()


def test_full_tier_evicts_and_says_what_failed():
	rows = primary(seed=3)
	t = tier(rows, host_bytes=4 * BLOCK)			# room for 4 blocks
	for i in range(ROWS):
		t.submit_store(job(i, [key(100 + i)], [i]))
	assert all(r.success for r in finished(t))		# the oldest made room
	hits = [t.lookup(key(100 + i), CTX) for i in range(ROWS)]
	assert 1 <= hits.count(LookupResult.HIT) <= 4 and hits[-1] is LookupResult.HIT
	t.shutdown()


def _engine_a(sock, seed):
	rows = primary(seed)
	t = tier(rows, socket=sock)
	t.submit_store(job(1, [key(i) for i in range(4)], range(4)))
	ok = finished(t)[0].success
	t.shutdown()
	return ok


def test_two_engines_share_through_kvmmd(tmp_path):
	with running(tmp_path / "k.sock", kvmmd_args(tmp_path)) as (_, sock):
		with multiprocessing.get_context("spawn").Pool(1) as pool:
			assert pool.apply(_engine_a, (sock, 7))
		want = primary(7)[:4]
		rows = primary()
		t = tier(rows, socket=sock)
		keys = [key(i) for i in range(4)]
		assert [t.lookup(k, CTX) for k in keys] == [LookupResult.HIT] * 4
		t.submit_load(job(2, keys, range(8, 12), promotion=True))
		assert finished(t)[0].success
		assert np.array_equal(rows[8:12], want)
		t.shutdown()


def test_kvmmd_restarted_on_its_nvme_file(tmp_path):
	# host watermarks at the whole tier: everything goes down to NVMe at once
	args = kvmmd_args(tmp_path, extra=("--host-wmark-low", "1024", "--host-wmark-high", "1024"))
	rows = primary(seed=9)
	with running(tmp_path / "k1.sock", args) as (proc, sock):
		t = tier(rows, socket=sock)
		t.submit_store(job(1, [key(i) for i in range(3)], range(3)))
		assert finished(t)[0].success
		deadline = time.monotonic() + 20
		while t._store.stats().keyed_nvme_pages < 3 * 32 and time.monotonic() < deadline:
			time.sleep(0.02)
		t.shutdown()
		proc.kill()				# no clean shutdown
		proc.wait()
	with running(tmp_path / "k2.sock", args) as (_, sock):
		out = primary()
		t = tier(out, socket=sock)
		keys = [key(i) for i in range(3)]
		assert [t.lookup(k, CTX) for k in keys] == [LookupResult.HIT] * 3
		t.submit_load(job(2, keys, [9, 10, 11], promotion=True))
		assert finished(t)[0].success
		assert np.array_equal(out[9:12], rows[:3])
		t.shutdown()


@pytest.mark.parametrize("bad", [ROWS, ROWS + 7, -1])
@pytest.mark.parametrize("op", ["store", "load"])
def test_chunk_outside_the_primary_fails_the_job(bad, op):
	rows = primary(seed=4)
	before = rows.copy()
	t = tier(rows)
	t.submit_store(job(1, [key(2)], [2]))
	assert [r.success for r in finished(t)] == [True]
	keys = [key(1), key(2)]
	submit = t.submit_store if op == "store" else t.submit_load
	submit(job(7, keys, [0, bad], promotion=(op == "load")))	# raises nothing
	assert t.has_pending_work()			# until it is reaped
	(r,) = finished(t)
	assert r.job_id == 7 and not r.success and r.successful_keys is None
	assert not t.has_pending_work()
	# nothing stuck, nothing moved: key 1 was never stored, key 2 still is
	assert t.lookup(key(1), CTX) is LookupResult.MISS
	assert t.lookup(key(2), CTX) is LookupResult.HIT
	assert np.array_equal(rows, before)
	t._store.check()
	t.shutdown()


@pytest.mark.parametrize("locality", ["local", "", "NEAR"])
def test_invalid_locality_is_refused(locality):
	with pytest.raises(ValueError, match="Locality"):
		tier(primary(), locality=locality)


@pytest.mark.parametrize("locality", [None, "LOCAL", "REMOTE"])
def test_locality_is_kept(locality):
	from vllm.v1.kv_offload.base import Locality
	t = tier(primary(), locality=locality)
	assert t.locality is (Locality(locality) if locality else None)
	t.shutdown()


@pytest.mark.parametrize("where", ["in-process", "kvmmd"])
def test_stores_larger_than_host_stream_to_nvme(where, tmp_path):
	"""A host tier of 4 blocks over NVMe: a 12-block job, then three more
	submitted back to back with no pause for the disk; while the tiers
	together have room, every block stored comes back byte for byte."""
	rows = primary(seed=11)
	want = rows.copy()
	# kvmmd: 128 host pages of 64 KiB (4 blocks), 128 blocks of NVMe
	with running(tmp_path / "k.sock", kvmmd_args(tmp_path, host_pages=128)) as (_, sock):
		kw = ({"socket": sock} if where == "kvmmd" else
		      dict(host_bytes=4 * BLOCK, nvme_path=str(tmp_path / "t.nvme"),
			   nvme_bytes=64 * BLOCK))
		t = tier(rows, **kw)
		t.submit_store(job(1, [key(i) for i in range(ROWS)], range(ROWS)))
		(r,) = finished(t)
		assert r.success and r.transfer_bytes == ROWS * BLOCK
		for j in range(1, 4):		# 36 more blocks, none waited for
			t.submit_store(job(1 + j, [key(100 * j + i) for i in range(ROWS)], range(ROWS)))
		assert [r.success for r in finished(t)] == [True] * 3
		for j in range(4):
			keys = [key(100 * j + i) for i in range(ROWS)]
			assert [t.lookup(k, CTX) for k in keys] == [LookupResult.HIT] * ROWS
			rows[:] = 0
			t.submit_load(job(10 + j, keys, range(ROWS), promotion=True))
			(r,) = finished(t)
			assert r.success and r.successful_keys is None
			assert np.array_equal(rows, want)
		t._store.check()
		t.shutdown()


def _block_of(i):
	return np.random.default_rng(1000 + i).integers(0, 256, BLOCK, dtype=np.uint8)


def _manager_step(m):
	from vllm.v1.kv_offload.base import ScheduleEndContext
	m.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
	list(m.take_events())


def _until(m, t, what):
	"""Step the manager (the tier's jobs done between steps) until @what() is
	not None; vLLM's scheduler steps the same way while a tier has work."""
	for _ in range(200):
		got = what()
		if got is not None:
			return got
		t.drain_jobs()
		_manager_step(m)
	raise AssertionError("the manager never got there")


@pytest.mark.parametrize("where", ["in-process", "kvmmd"])
def test_manager_evicts_into_kvmm_and_loads_back(where, tmp_path):
	"""vLLM's TieringOffloadingManager over its CPU primary tier (4 chunks)
	and kvmm's tier (a host tier of 2 blocks over NVMe): 8 requests of 3
	new blocks, stored one after another with no pause, go through the
	primary into kvmm and are evicted from the primary; then each block,
	looked up, is promoted back from kvmm and is byte for byte what was
	stored, while the tiers together have room."""
	from vllm.v1.kv_offload.base import LookupResult as LR, make_offload_key
	from vllm.v1.kv_offload.tiering.manager import (CPUPrimaryTierOffloadingManager,
							 TieringOffloadingManager)

	rows = np.zeros((4, BLOCK), dtype=np.uint8)
	region = MagicMock()
	region.create_kv_memoryview.return_value = memoryview(rows)
	keys = [make_offload_key(f"block{i}".encode(), 0) for i in range(24)]
	# kvmmd: 64 host pages of 64 KiB (2 blocks), 128 blocks of NVMe
	with running(tmp_path / "k.sock", kvmmd_args(tmp_path, host_pages=64)) as (_, sock):
		kw = ({"socket": sock} if where == "kvmmd" else
		      dict(host_bytes=2 * BLOCK, nvme_path=str(tmp_path / "t.nvme"),
			   nvme_bytes=64 * BLOCK))
		primary_tier = CPUPrimaryTierOffloadingManager(num_chunks=4, mmap_region=region)
		t = tier(rows, **kw)
		m = TieringOffloadingManager(primary_tier=primary_tier, secondary_tiers=[t])
		for r in range(8):
			ctx = ReqContext(req_id=f"store{r}")
			m.on_new_request(ctx)
			mine = keys[3 * r:3 * r + 3]
			out = _until(m, t, lambda: m.prepare_store(mine, ctx))
			assert list(out.keys_to_store) == mine
			for k, row in zip(out.keys_to_store, out.store_spec.block_ids):
				rows[row] = _block_of(keys.index(k))	# the GPU's write
			m.complete_store(mine, ctx, success=True)
			m.on_request_finished(ctx)
			_manager_step(m)
		_until(m, t, lambda: None if t.has_pending_work() else True)
		for i, k in enumerate(keys):
			ctx = ReqContext(req_id=f"load{i}")
			m.on_new_request(ctx)
			res = _until(m, t, lambda: {LR.HIT: True, LR.MISS: False}.get(m.lookup(k, ctx)))
			assert res, f"block {i} was lost"
			spec = m.prepare_load([k], ctx)
			assert np.array_equal(rows[spec.block_ids[0]], _block_of(i)), f"block {i} differs"
			m.complete_load([k], ctx)
			m.on_request_finished(ctx)
			_manager_step(m)
		assert t._store.stats().keyed_nvme_pages > 0	# the most went through NVMe
		t._store.check()
		m.shutdown()


def test_config_info_keys_match_the_filled_values():
	t = tier(primary())
	info = t.config_info()
	assert tuple(info) == KvmmSecondaryTier.config_info_keys({})
	assert info["kvmm_store"] == "in-process" and info["kvmm_model_id"] == "llama-test@1"
	t.shutdown()


def test_factory_loads_the_tier_by_module_path(tmp_path):
	"""The configuration engines.rst documents, through vLLM's own factory."""
	from vllm.v1.kv_offload.base import Locality
	from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
	rows = primary()
	t = SecondaryTierFactory.create_secondary_tier(
		{"type": "KvmmSecondaryTier", "module_path": "kvmm.vllm", "model_id": "f@1",
		 "host_bytes": 4 * BLOCK, "nvme_path": str(tmp_path / "f.nvme"),
		 "nvme_bytes": 16 * BLOCK, "locality": "LOCAL"},
		memoryview(rows), MagicMock())
	assert isinstance(t, KvmmSecondaryTier) and t.tier_type == "KvmmSecondaryTier"
	assert t.locality is Locality.LOCAL
	t.submit_store(job(1, [key(1)], [0]))
	assert [r.success for r in finished(t)] == [True]
	assert t.lookup(key(1), CTX) is LookupResult.HIT
	t.shutdown()


def _events_spec(on):
	spec = MagicMock()
	spec.kv_events_config.enable_kv_cache_events = on	# vLLM's global switch
	return spec


def _event_tier(rows, on=True, **kw):
	kw.setdefault("host_bytes", 4 * BLOCK)
	return KvmmSecondaryTier(_events_spec(on), memoryview(rows), "kvmm",
				 model_id="llama-events@1", enable_kv_events=True, **kw)


@pytest.mark.parametrize("where", ["in-process", "kvmmd"])
def test_kv_events_name_the_blocks_each_good_store_job_stored(where, tmp_path):
	"""One BlockStored event per store job that succeeded, with its keys,
	the tier's medium and locality; loads give none; take_events drains."""
	from vllm.v1.kv_offload.base import Locality
	rows = primary(seed=21)
	with running(tmp_path / "k.sock", kvmmd_args(tmp_path)) as (_, sock):
		kw = {"socket": sock} if where == "kvmmd" else {}
		t = _event_tier(rows, locality="REMOTE", **kw)
		t.submit_store(job(1, [key(1), key(2)], [0, 1]))
		t.submit_store(job(2, [key(3)], [2]))
		assert [r.success for r in finished(t)] == [True, True]
		ev = list(t.take_events())
		assert sorted(e.keys for e in ev) == [[key(1), key(2)], [key(3)]]
		assert all(e.medium is KvmmSecondaryTier.medium and not e.removed and
			   e.locality is Locality.REMOTE for e in ev)
		assert list(t.take_events()) == []
		t.submit_load(job(3, [key(1)], [5], promotion=True))
		assert [r.success for r in finished(t)] == [True]
		assert list(t.take_events()) == [] and t._store_job_keys == {}
		t.shutdown()


def test_kv_events_none_for_a_failed_store_job():
	"""A job larger than every tier below fails, wholly: it announces
	nothing, and the good job beside it announces its own keys only."""
	rows = primary(seed=22)
	t = _event_tier(rows)				# host tier of 4 blocks, no NVMe
	t.submit_store(job(1, [key(i) for i in range(5)], range(5)))
	t.submit_store(job(2, [key(9)], [9]))
	res = {r.job_id: r.success for r in finished(t)}
	assert res == {1: False, 2: True}
	ev = list(t.take_events())
	assert [e.keys for e in ev] == [[key(9)]]
	assert t._store_job_keys == {}
	t.shutdown()


@pytest.mark.parametrize("global_on", [False, True])
def test_kv_events_need_both_switches(global_on):
	"""The tier's enable_kv_events alone gives no events (vLLM's global
	flag gates them, as it does the fs tier's); neither does the global
	flag alone."""
	rows = primary(seed=23)
	t = _event_tier(rows, on=global_on)
	plain = tier(rows, host_bytes=4 * BLOCK)	# enable_kv_events not given
	for x in (t, plain):
		x.submit_store(job(1, [key(1)], [0]))
		assert [r.success for r in finished(x)] == [True]
	assert (t.events is not None) is global_on and plain.events is None
	assert len(list(t.take_events())) == (1 if global_on else 0)
	assert list(plain.take_events()) == []
	t.shutdown()
	plain.shutdown()


@pytest.mark.parametrize("prefetch", [True, False])
def test_lookup_then_load_reads_the_host(prefetch, tmp_path):
	"""vLLM's scheduler looks a waiting request's blocks up and submits their
	load right after: with the tier's prefetch option (the default), a
	lookup that finds a block on NVMe starts its read up to kvmm's host
	tier, and the load (which waits for that read, never reading twice)
	finds it there: prefetch hits as many as were read up, bytes as stored;
	with prefetch off, nothing is read up."""
	rows = primary(seed=21)
	want = rows.copy()
	t = tier(rows, host_bytes=8 * BLOCK, nvme_path=str(tmp_path / "t.nvme"),
		 nvme_bytes=64 * BLOCK, prefetch=prefetch)
	keys = [key(500 + i) for i in range(ROWS)]
	for i in range(ROWS):		# a block at a time, written down as it goes
		t.submit_store(job(1 + i, keys[i:i + 1], [i]))
		assert [r.success for r in finished(t)] == [True]
		t._store.sync()
	assert t._store.stats().keyed_nvme_pages > 0
	assert [t.lookup(k, CTX) for k in keys] == [LookupResult.HIT] * ROWS
	rows[:] = 0
	t.submit_load(job(100, keys, range(ROWS), promotion=True))
	(r,) = finished(t)
	assert r.success and np.array_equal(rows, want)
	st = t._store.stats()	# read up with prefetch only, and then read
	assert (st.prefetch_pages > 0) == prefetch and st.prefetch_hits == st.prefetch_pages
	t._store.check()
	t.shutdown()


def test_prefetch_option_must_be_a_bool():
	with pytest.raises(ValueError, match="prefetch"):
		tier(primary(), prefetch="yes")
