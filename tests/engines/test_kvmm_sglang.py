# SPDX-License-Identifier: MIT
"""kvmm.sglang.KvmmHiCacheStorage under SGLang 0.5.23's own types.

SGLang ships no storage-backend tests in its packages (its test/ tree is
not in the sdist or wheel), so these drive the backend as HiCache does,
against a real CPU MHATokenToKVPoolHost in each layout: loaded through
SGLang's StorageBackendFactory as a dynamic backend with interface_v1,
pages set and read back byte for byte through batch_set_v1/batch_get_v1
(zero-copy layouts and the staged one), layer_first pages stored as
SGLang's own flat pages and read back where SGLang's own
set_from_flat_data_page() puts them (MHA and MLA pools, in chunks, from
two threads), batch_exists as the run of hits, the interface before v1,
layouts and TP ranks kept apart, two processes sharing through kvmmd,
and a tenant namespace.  Run by tests/engines/run.sh in the SGLang
environment.
"""
import contextlib
import hashlib
import multiprocessing
import os
import tempfile
import threading
from pathlib import Path

import pytest
import torch

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

from kvmmd import running
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

import kvmm.sglang
from kvmm.sglang import KvmmHiCacheStorage, cpu_host_pool

L, H, D, P, T = 2, 2, 8, 4, 64		# layers, heads, head dim, page size, device tokens
LAYOUTS = ["layer_first", "page_first", "page_first_direct"]


def host_pool(layout):
	return cpu_host_pool(L, H, D, P, T, torch.float32, layout)


def config(extra, tp_rank=0, mla=False, model="org/llama-test", **more):
	return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=2, pp_rank=0, pp_size=1, attn_cp_rank=0,
				    attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
				    is_page_first_layout=False, model_name=model,
				    extra_config=dict(extra), **more)


def backend(pool, socket=None, ns=None, **cfg):
	"""The backend as SGLang makes it: --hicache-storage-backend dynamic."""
	extra = {"backend_name": "kvmm", "module_path": "kvmm.sglang",
		 "class_name": "KvmmHiCacheStorage", "interface_v1": 1}
	extra.update({"socket": socket} if socket else {"host_bytes": 8 << 20, "page_bytes": 4096})
	if ns is not None:
		extra["ns"] = ns
	be = StorageBackendFactory.create_backend("dynamic", config(extra, **cfg), pool)
	be.register_mem_pool_host(pool)
	return be


def hashes(n, seed=0):
	"""SGLang's page keys: SHA-256 hex, chained."""
	out, prev = [], b""
	for i in range(n):
		prev = hashlib.sha256(prev + (seed * 1000 + i).to_bytes(4, "little")).digest()
		out.append(prev.hex())
	return out


def fill_pages(pool, idx, seed):
	g = torch.Generator().manual_seed(seed)
	for p in range(len(idx) // P):
		page = pool.get_dummy_flat_data_page()
		page.copy_(torch.rand(page.shape, generator=g))
		pool.set_from_flat_data_page(int(idx[p * P]), page)


def pages(pool, idx):
	return [pool.get_data_page(int(idx[p * P]), flat=True).clone() for p in range(len(idx) // P)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pages_round_trip_through_the_factory(layout):
	pool = host_pool(layout)
	be = backend(pool)
	assert isinstance(be, KvmmHiCacheStorage)
	src = pool.alloc(5 * P)
	fill_pages(pool, src, 1)
	want = pages(pool, src)
	keys = hashes(5)
	# page_first(_direct) keep a page's K and V contiguous: moved in place
	assert (be._page_views(src, 5) is None) == (layout == "layer_first")
	assert be.batch_exists(keys) == 0
	assert be.batch_set_v1(keys, src) == [True] * 5
	assert be.batch_exists(keys) == 5
	assert be.batch_exists(keys[:2] + hashes(1, seed=9) + keys[3:]) == 2
	dst = pool.alloc(5 * P)
	assert be.batch_get_v1(keys[::-1], dst) == [True] * 5
	got = pages(pool, dst)
	for a, b in zip(got, want[::-1]):
		assert torch.equal(a, b)
	miss = pool.alloc(2 * P)
	assert be.batch_get_v1([keys[0], hashes(1, seed=7)[0]], miss) == [True, False]
	be.close()


def mla_host_pool(layout, width=24):
	"""SGLang's MLA host pool (MLATokenToKVPoolHost) on CPU: a row of @width
	a token and layer, bf16."""
	from sglang.srt.mem_cache.device_pool_info import MLABufferInfo
	from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

	bufs = tuple(torch.zeros(P, 1, width, dtype=torch.bfloat16) for _ in range(L))
	info = MLABufferInfo(buffers=bufs, data_ptrs=torch.tensor([b.data_ptr() for b in bufs],
								   dtype=torch.uint64),
			     layer_indices=tuple(range(L)), device_layer_num=L, page_size=P,
			     kv_lora_rank=width - 8, qk_rope_head_dim=8, kv_cache_dim=width,
			     dtype=torch.bfloat16, device=torch.device("cpu"))
	return MLATokenToKVPoolHost(info, host_to_device_ratio=1.0, host_size=0, page_size=P,
				    layout=layout, pin_memory=False, device="cpu",
				    device_capacity_tokens=T, start_layer=0, end_layer=L - 1,
				    target_layer_num=L)


def as_bytes(t):
	return t.contiguous().view(torch.uint8)


def random_bytes(t, seed):
	"""Fill @t with random bytes (NaNs among them: compare as bytes)."""
	g = torch.Generator().manual_seed(seed)
	b = t.view(torch.uint8).view(-1)
	b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8, generator=g))


def scattered_pages(pool, n, seed):
	"""2 @n pages of @pool in a shuffled order, as two runs of host indices."""
	idx = pool.alloc(2 * n * P).view(-1, P)
	order = torch.randperm(2 * n, generator=torch.Generator().manual_seed(seed))
	idx = idx[order].reshape(-1)
	return idx[:n * P], idx[n * P:]


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("path", ["rows", "per_page"])
def test_layer_first_pages_are_sglang_flat_pages(monkeypatch, mla, path):
	"""A layer_first page is stored as SGLang's own flat page (its K, then its
	V: get_data_page(flat=True)), and one read back lands exactly where
	SGLang's own set_from_flat_data_page() puts it, nothing else in the pool
	touched; batches cross the staging buffer in chunks (of two pages
	here), gathered as rows or (a pool of another shape) a page at a time."""
	pool = mla_host_pool("layer_first") if mla else cpu_host_pool(L, H, D, P, T, torch.bfloat16,
								      "layer_first")
	page_bytes = pool.get_data_page(0, flat=True).nbytes
	monkeypatch.setattr(kvmm.sglang, "_STAGE_BYTES", 2 * page_bytes + 1)
	if path == "per_page":
		monkeypatch.setattr(kvmm.sglang, "_layer_rows", lambda pool, parts: None)
	be = backend(pool, mla=mla)
	assert (be._rows is not None) == (path == "rows")
	n = 7
	src, dst = scattered_pages(pool, n, seed=1)
	random_bytes(pool.kv_buffer, 2)
	keys = hashes(n, seed=21)
	assert be.batch_set_v1(keys, src) == [True] * n
	# what kvmm holds: SGLang's flat pages (read whole by the interface before v1)
	got = be.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
	for i in range(n):
		want = pool.get_data_page(int(src[i * P]), flat=True)
		assert got[i] is not None and torch.equal(as_bytes(got[i]), as_bytes(want))
	# flat pages stored by the interface before v1, read into layer_first slots
	flats = [pool.get_dummy_flat_data_page() for _ in range(n)]
	for i, f in enumerate(flats):
		random_bytes(f, 30 + i)
	keys = hashes(n, seed=22)
	assert be.batch_set(keys, flats)
	keys[3] = hashes(1, seed=23)[0]		# a miss: its slots keep what they held
	before = pool.kv_buffer.clone()
	ok = be.batch_get_v1(keys, dst)
	assert ok == [i != 3 for i in range(n)]
	after = pool.kv_buffer.clone()
	pool.kv_buffer.copy_(before)
	for i in range(n):
		if ok[i]:
			pool.set_from_flat_data_page(int(dst[i * P]), flats[i])
	assert torch.equal(as_bytes(after), as_bytes(pool.kv_buffer))
	assert not torch.equal(as_bytes(after), as_bytes(before))
	be.close()


def test_layer_first_from_two_threads():
	"""SGLang's backup and prefetch threads call at once: each stages in a
	buffer of its own."""
	pool = cpu_host_pool(L, H, D, P, 4 * T, torch.bfloat16, "layer_first")
	be = backend(pool)
	runs = [scattered_pages(pool, 12, seed=t) for t in range(2)]
	random_bytes(pool.kv_buffer, 5)
	errors = []

	def work(t):
		src, dst = runs[t]
		try:
			for r in range(10):
				keys = hashes(12, seed=100 * t + r)
				assert be.batch_set_v1(keys, src) == [True] * 12
				assert be.batch_get_v1(keys[::-1], dst) == [True] * 12
				for i in range(12):
					a = pool.get_data_page(int(src[i * P]))
					b = pool.get_data_page(int(dst[(11 - i) * P]))
					assert torch.equal(as_bytes(a), as_bytes(b))
		except BaseException as e:	# noqa: BLE001 - reported below
			errors.append(e)

	ts = [threading.Thread(target=work, args=(t,)) for t in range(2)]
	for t in ts:
		t.start()
	for t in ts:
		t.join()
	assert not errors, errors
	be.close()


def test_the_interface_before_v1():
	pool = host_pool("layer_first")
	be = backend(pool)
	idx = pool.alloc(2 * P)
	fill_pages(pool, idx, 2)
	flat = pages(pool, idx)
	keys = hashes(2, seed=2)
	assert be.batch_set(keys, flat)
	assert be.exists(keys[1]) and not be.exists(hashes(1, seed=3)[0])
	got = be.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
	assert all(torch.equal(a, b) for a, b in zip(got, flat))
	assert be.get(hashes(1, seed=3)[0], pool.get_dummy_flat_data_page()) is None
	assert be.set(hashes(1, seed=4)[0], flat[0])
	be.close()


def test_layouts_and_ranks_do_not_share_pages():
	"""page_first lays a page out token by token, the others layer by layer;
	another TP rank holds other heads: none of them may read another's."""
	a, b = host_pool("page_first"), host_pool("layer_first")
	with running_kvmmd() as sock:
		ba, bb = backend(a, sock), backend(b, sock)
		ra = backend(host_pool("page_first"), sock, tp_rank=1)
		idx = a.alloc(P)
		fill_pages(a, idx, 3)
		keys = hashes(1, seed=5)
		assert ba.batch_set_v1(keys, idx) == [True]
		assert ba.batch_exists(keys) == 1
		assert bb.batch_exists(keys) == 0 and ra.batch_exists(keys) == 0
		for be in (ba, bb, ra):
			be.close()


def test_dcp_shards_do_not_share_pages():
	"""Under decode context parallelism each DCP rank of an MLA model holds
	its own shard of every page, under the same page hash: a rank reads its
	own shard back, never another's, and a store cut for another topology
	(no DCP, another logical page size) sees none of them."""
	with running_kvmmd() as sock:
		pools = [mla_host_pool("page_first") for _ in range(2)]
		dcp = [backend(pools[r], sock, tp_rank=r, mla=True, dcp_size=2, dcp_rank=r,
			       logical_page_size=2 * P) for r in range(2)]
		idx = [pool.alloc(P) for pool in pools]
		for r in range(2):
			random_bytes(pools[r].kv_buffer, 40 + r)
		keys = hashes(1, seed=9)
		want = [pages(pools[r], idx[r])[0] for r in range(2)]
		assert not torch.equal(as_bytes(want[0]), as_bytes(want[1]))
		for r in range(2):
			assert dcp[r].batch_set_v1(keys, idx[r]) == [True]
		for r in range(2):
			pools[r].kv_buffer.zero_()
			assert dcp[r].batch_get_v1(keys, idx[r]) == [True]
			assert torch.equal(as_bytes(pages(pools[r], idx[r])[0]), as_bytes(want[r]))
		plain = backend(mla_host_pool("page_first"), sock, mla=True)
		other = backend(mla_host_pool("page_first"), sock, mla=True, dcp_size=2, dcp_rank=0,
				logical_page_size=4 * P)
		assert plain.batch_exists(keys) == 0 and other.batch_exists(keys) == 0
		for be in dcp + [plain, other]:
			be.close()


def _hybrid(kind, tmp_path):
	"""A backend of @kind ("kvmm", or "file": SGLang's own HiCacheFile) with a
	hybrid model's pools: the KV pool, and two that stand in for a Mamba
	state pool (a page a token) and an indexer pool (SGLang's host pool
	page protocol: get_data_page, get_dummy_flat_data_page,
	set_from_flat_data_page), random bytes in each."""
	from sglang.srt.mem_cache.hicache_storage import HiCacheFile, PoolName

	kv = host_pool("page_first")
	pools = {PoolName.MAMBA: cpu_host_pool(1, 1, 8, 1, T, torch.float32, "page_first"),
		 PoolName.INDEXER: cpu_host_pool(1, 1, 4, P, T, torch.float32, "layer_first")}
	for seed, pool in enumerate([kv, *pools.values()]):
		random_bytes(pool.kv_buffer, 70 + seed)
	if kind == "file":
		be = HiCacheFile(config({"file_storage_path": str(tmp_path)}), file_path=str(tmp_path))
		be.register_mem_pool_host(kv)
	else:
		be = backend(kv)
	for name, pool in pools.items():
		be.register_mem_host_pool_v2(pool, name)
	return be, kv, pools


def test_v2_pools_answer_as_sglangs_file_backend(tmp_path):
	"""A hybrid model's other host pools move through batch_*_v2: pages
	stored and read back byte for byte, and batch_exists_v2 answering as
	SGLang's own file backend does for the same pages stored (the KV run,
	each pool's hits, the restorable prefixes under ALL_PAGES and
	TRAILING_PAGES), for several patterns of what is stored."""
	from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

	n = 6
	for case, (kv_n, mamba_at, index_at) in enumerate([(6, [4, 5], range(6)), (6, [1, 4], [0, 1, 3]),
							   (4, [0, 1, 2, 3], [0, 1]), (6, [], range(6)),
							   (0, [0], [0]), (5, [2, 3, 4], [0, 2, 3, 4])]):
		keys = hashes(n, seed=60 + case)
		answers = []
		for kind in ("file", "kvmm"):
			be, kv, pools = _hybrid(kind, tmp_path / f"{case}")
			kv_idx = kv.alloc(n * P)
			if kind == "file":
				flats = [kv.get_data_page(int(kv_idx[i * P]), flat=True) for i in range(kv_n)]
				assert be.batch_set(keys[:kv_n], flats) or not kv_n
			else:
				assert be.batch_set_v1(keys[:kv_n], kv_idx[:kv_n * P]) == [True] * kv_n
			m_idx = pools[PoolName.MAMBA].alloc(n)
			x_idx = pools[PoolName.INDEXER].alloc(n * P)
			put = [PoolTransfer(name=PoolName.MAMBA, keys=[keys[i] for i in mamba_at],
					    host_indices=m_idx[mamba_at]),
			       PoolTransfer(name=PoolName.INDEXER, keys=[keys[i] for i in index_at],
					    host_indices=x_idx.view(-1, P)[list(index_at)].reshape(-1))]
			got = be.batch_set_v2(put)
			assert got == {PoolName.MAMBA: [True] * len(mamba_at),
				       PoolName.INDEXER: [True] * len(index_at)}
			ask = [PoolTransfer(name=PoolName.MAMBA, keys=keys[-2:],
					    hit_policy=PoolHitPolicy.TRAILING_PAGES),
			       PoolTransfer(name=PoolName.INDEXER, hit_policy=PoolHitPolicy.ALL_PAGES)]
			r = be.batch_exists_v2(keys, ask)
			answers.append((r.kv_hit_pages, dict(r.extra_pool_hit_pages),
					r.restorable_prefix_pages))
			# read the pages back into cleared pools: the same bytes
			moved = [(PoolName.MAMBA, int(m_idx[i])) for i in mamba_at] + \
				[(PoolName.INDEXER, int(x_idx[i * P])) for i in index_at]
			want = [pools[name].get_data_page(o, flat=True).clone() for name, o in moved]
			for pool in pools.values():
				pool.kv_buffer.zero_()
			got = be.batch_get_v2(put)
			assert got == {PoolName.MAMBA: [True] * len(mamba_at),
				       PoolName.INDEXER: [True] * len(index_at)}
			for (name, o), w in zip(moved, want):
				assert torch.equal(as_bytes(pools[name].get_data_page(o, flat=True)), as_bytes(w))
			be.close() if kind == "kvmm" else None
		assert answers[0] == answers[1], (case, answers)


def test_v2_what_moves_nothing(tmp_path):
	"""A pool never registered, host indices that are not a page a key, and
	a hit policy this backend does not answer (as SGLang's file backend,
	BLOCK_GROUPS): nothing moves, and the policy is a ValueError.  The KV
	pool named in a v2 transfer moves as v1 moves it."""
	from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

	be, kv, pools = _hybrid("kvmm", tmp_path)
	keys = hashes(2, seed=80)
	idx = pools[PoolName.INDEXER].alloc(2 * P)
	assert be.batch_set_v2([PoolTransfer(name=PoolName.SWA, keys=keys, host_indices=idx)]) == \
		{PoolName.SWA: [False, False]}
	assert be.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, keys=keys,
					     host_indices=idx[:P])]) == {PoolName.INDEXER: [False, False]}
	# the KV pool in a v2 transfer takes the v1 paths
	kv_idx = kv.alloc(2 * P)
	assert be.batch_set_v2([PoolTransfer(name=PoolName.KV, keys=keys, host_indices=kv_idx)]) == \
		{PoolName.KV: [True, True]}
	assert be.batch_exists(keys) == 2
	assert be.batch_get_v2([PoolTransfer(name=PoolName.KV, keys=keys, host_indices=kv_idx)]) == \
		{PoolName.KV: [True, True]}
	with pytest.raises(ValueError, match="hit policy"):
		be.batch_exists_v2(keys, [PoolTransfer(name=PoolName.INDEXER,
						       hit_policy=PoolHitPolicy.BLOCK_GROUPS)])
	assert be.batch_exists_v2(keys, [PoolTransfer(name=PoolName.INDEXER)]).kv_hit_pages == 0
	be.close()


def _store_pages(sock, seed):
	pool = host_pool("page_first")
	be = backend(pool, sock)
	idx = pool.alloc(3 * P)
	fill_pages(pool, idx, seed)
	ok = be.batch_set_v1(hashes(3, seed=seed), idx)
	want = [p.numpy().tobytes() for p in pages(pool, idx)]
	be.close()
	return ok, want


@contextlib.contextmanager
def running_kvmmd():
	"""A kvmmd for the test: 4 KiB pages, 16 MiB of host tier."""
	with tempfile.TemporaryDirectory() as d, running(
			Path(d) / "k.sock",
			["--page-size", "4", "--pages", "16", "--layers", "1", "--kv-heads", "1",
			 "--head-dim", "128", "--dtype-bytes", "4", "--host-pages", "4096",
			 "--model-id", "sglang-tests"]) as (_, sock):
		yield sock


def test_two_sglang_processes_share_through_kvmmd():
	with running_kvmmd() as sock:
		with multiprocessing.get_context("spawn").Pool(1) as p:
			ok, want = p.apply(_store_pages, (sock, 11))
		assert ok == [True] * 3
		pool = host_pool("page_first")
		be = backend(pool, sock)
		keys = hashes(3, seed=11)
		assert be.batch_exists(keys) == 3
		dst = pool.alloc(3 * P)
		assert be.batch_get_v1(keys, dst) == [True] * 3
		assert [p.numpy().tobytes() for p in pages(pool, dst)] == want
		be.close()


def test_a_tenant_sees_only_its_namespace():
	with running_kvmmd() as sock:
		pa, pb = host_pool("page_first"), host_pool("page_first")
		a, b = backend(pa, sock, ns=3), backend(pb, sock, ns=4)
		idx = pa.alloc(P)
		fill_pages(pa, idx, 5)
		keys = hashes(1, seed=12)
		assert a.batch_set_v1(keys, idx) == [True]
		assert a.batch_exists(keys) == 1 and b.batch_exists(keys) == 0
		assert b.batch_get_v1(keys, pb.alloc(P)) == [False]
		a.close()
		b.close()


def test_no_pool_yet_and_nothing_asked():
	be = KvmmHiCacheStorage(config({"host_bytes": 1 << 20, "page_bytes": 4096}))
	assert be.batch_exists([]) == 0
	assert be.batch_set_v1(hashes(1), torch.arange(P)) == [True]	# as SGLang's: no pool, no-op
	be.close()


@pytest.mark.parametrize("prefetch", [True, False])
def test_exists_then_get_reads_the_host(prefetch, tmp_path):
	"""HiCache's prefetch thread asks batch_exists and then gets the pages
	found: with the backend's prefetch option (the default), batch_exists
	starts the reads of the pages on NVMe up to kvmm's host tier, and the
	batch_get_v1 that follows reads them from there (prefetch hits, as many
	as were read up), byte for byte; with prefetch off nothing is read up."""
	pool = host_pool("page_first")
	extra = {"backend_name": "kvmm", "module_path": "kvmm.sglang",
		 "class_name": "KvmmHiCacheStorage", "interface_v1": 1,
		 "host_bytes": 12 * 4096, "page_bytes": 4096, "nvme_path": str(tmp_path / "n"),
		 "nvme_bytes": 256 * 4096, "host_wmark_low": 1, "host_wmark_high": 10}
	if not prefetch:
		extra["prefetch"] = False
	be = StorageBackendFactory.create_backend("dynamic", config(extra), pool)
	be.register_mem_pool_host(pool)
	src = pool.alloc(6 * P)
	fill_pages(pool, src, 3)
	want = pages(pool, src)
	keys = hashes(6, seed=3)
	# 12 values (a K and a V a page) fill the host tier: writeback writes
	# the 10 oldest down, and 9 host pages are room for a prefetch
	for i in range(6):
		assert be.batch_set_v1(keys[i:i + 1], src[i * P:(i + 1) * P]) == [True]
		be.store.sync()
	assert be.store.stats().keyed_nvme_pages > 0
	assert be.batch_exists(keys) == 6
	dst = pool.alloc(6 * P)
	assert be.batch_get_v1(keys, dst) == [True] * 6
	assert all(torch.equal(a, b) for a, b in zip(pages(pool, dst), want))
	st = be.store.stats()	# read up with prefetch only, and then read
	assert (st.prefetch_pages > 0) == prefetch and st.prefetch_hits == st.prefetch_pages
	be.store.check()
	be.close()


def test_prefetch_option_must_be_a_bool():
	with pytest.raises(ValueError, match="prefetch"):
		KvmmHiCacheStorage(config({"host_bytes": 1 << 20, "page_bytes": 4096,
					   "prefetch": "yes"}))
