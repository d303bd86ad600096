# SPDX-License-Identifier: MIT
"""The engine adapters' store (kvmm.KeyedStore) and LMCache's connector
(kvmm.lmcache.KvmmNativeConnector, which needs no LMCache to run), in
this process and through kvmmd, shared by two processes."""
import errno
import multiprocessing
import select
import threading

import numpy as np
import pytest

import kvmm
from kvmm.lmcache import KvmmNativeConnector
from kvmmd import running


def stamp(i, n):
	return ((np.arange(n, dtype=np.uint32) * 13 + i * 71) & 0xFF).astype(np.uint8)


@pytest.fixture
def kvmmd(tmp_path):
	"""kvmmd with 4 MiB of host tier in 64 KiB pages over an 8 MiB NVMe file."""
	with running(tmp_path / "kvmmd.sock",
		     ["--page-size", "4", "--pages", "16", "--layers", "1", "--kv-heads", "1",
		      "--head-dim", "8192", "--dtype-bytes", "1", "--host-pages", "64",
		      "--nvme-pages", "128", "--nvme-file", str(tmp_path / "nvme"),
		      "--model-id", "store-test"]) as served:
		yield served


def wait_for(fd, timeout=10.0):
	return bool(select.select([fd], [], [], timeout)[0])


def take_all(store, n, timeout=10.0):
	out = []
	while len(out) < n:
		assert wait_for(store.event_fd, timeout), f"{len(out)} of {n} completions came"
		out += store.take()
	return out


@pytest.mark.parametrize("where", ["local", "kvmmd"])
def test_store_batches_off_the_callers_thread(where, kvmmd):
	args = {"socket": kvmmd[1]} if where == "kvmmd" else {"host_bytes": 4 << 20}
	with kvmm.KeyedStore("m@1", ring_bytes=1 << 20, **args) as st:
		vals = [stamp(i, 100_000) for i in range(12)]		# 2 pages each
		st.submit("put", "put", [f"k{i}" for i in range(12)], vals)
		(c,) = take_all(st, 1)
		assert c.tag == "put" and c.ok and c.nbytes == 12 * 100_000 and not c.error
		out = [np.zeros(100_000, np.uint8) for _ in range(3)]
		st.submit(7, "get", ["k3", "nope", "k11"], out)
		(c,) = take_all(st, 1)
		assert list(c.res) == [0, -errno.ENOENT, 0] and not c.ok
		assert np.array_equal(out[0], vals[3]) and np.array_equal(out[2], vals[11])
		assert not out[1].any()					# a miss leaves its buffer be
		st.submit(8, "exists", ["k0", "x", "k5"])
		assert list(take_all(st, 1)[0].res) == [0, -errno.ENOENT, 0]
		st.submit(9, "delete", ["k0", "x"])
		assert list(take_all(st, 1)[0].res) == [0, -errno.ENOENT]
		assert list(st.exists_now(100_000, ["k0", "k1"])) == [-errno.ENOENT, 0]
		assert st.values(100_000) == 11
		st.submit(10, "put", [], [])				# nothing: done at once
		assert take_all(st, 1)[0].ok


def test_store_sizes_are_spaces(kvmmd):
	with kvmm.KeyedStore("m@1", host_bytes=4 << 20) as st:
		st.submit(1, "put", ["a", "b"], [stamp(0, 300), stamp(1, 5000)])
		assert take_all(st, 1)[0].ok
		assert sorted(st.known_sizes()) == [300, 5000]
		small = np.zeros(300, np.uint8)
		st.submit(2, "get", ["b", "a"], [np.zeros(5000, np.uint8), small])
		c = take_all(st, 1)[0]
		assert c.ok and np.array_equal(small, stamp(0, 300))
		st.submit(3, "get", ["a"], [np.zeros(5000, np.uint8)])	# not stored at that size
		assert list(take_all(st, 1)[0].res) == [-errno.ENOENT]


def test_store_refuses_bad_input_and_loses_nothing():
	with pytest.raises(ValueError):
		kvmm.KeyedStore("")
	with pytest.raises(ValueError):
		kvmm.KeyedStore("m", page_bytes=1000)
	with kvmm.KeyedStore("m", host_bytes=1 << 20) as st:
		with pytest.raises(ValueError):
			st.submit(1, "frobnicate", ["a"])
		with pytest.raises(ValueError):
			st.submit(1, "put", ["a", "b"], [b"x"])		# one buffer short
		with pytest.raises(ValueError):
			st.submit(1, "get", ["a"], [b"read-only"])
		with pytest.raises(ValueError):
			st.submit(1, "put", ["a"], [b""])
		assert st.pending == 0 and st.take() == []
	with pytest.raises(ValueError):
		st.submit(1, "exists", ["a"])				# closed
	st.close()							# twice is fine


def test_store_full_evicts_never_fails_silently():
	"""16 values of 2 pages into 8 pages: each put stores (the oldest are evicted);
	a value larger than the whole tier fails, and says so."""
	with kvmm.KeyedStore("m", host_bytes=8 << 16) as st:
		for i in range(16):
			st.submit(i, "put", [f"v{i}"], [stamp(i, 100_000)])
		res = [c for c in take_all(st, 16)]
		assert all(c.ok for c in res)
		assert st.values(100_000) == 4
		st.submit(99, "put", ["huge"], [np.zeros(9 << 16, np.uint8)])
		c = take_all(st, 1)[0]
		assert not c.ok and c.res[0] == -errno.ENOSPC


def test_store_drain_waits_for_everything():
	with kvmm.KeyedStore("m", host_bytes=16 << 20, threads=3) as st:
		for i in range(30):
			st.submit(i, "put", [f"k{i}"], [stamp(i, 200_000)])
		assert st.drain(30)
		assert st.pending == 0 and len(st.take()) == 30


def test_value_larger_than_the_ring_fails_with_a_reason(kvmmd):
	with kvmm.KeyedStore("m", socket=kvmmd[1], ring_bytes=1 << 20, threads=1) as st:
		st.submit(1, "put", ["big", "small"], [np.zeros(2 << 20, np.uint8), stamp(0, 1000)])
		c = take_all(st, 1)[0]
		assert not c.ok and "ring_bytes" in c.error
		st.submit(2, "put", ["small"], [stamp(0, 1000)])	# the ring still serves
		assert take_all(st, 1)[0].ok


def test_kvmmd_gone_fails_the_batch_with_a_reason(tmp_path):
	with running(tmp_path / "k.sock", ["--page-size", "4", "--pages", "16", "--layers", "1",
					   "--kv-heads", "1", "--head-dim", "128",
					   "--host-pages", "64"]) as (proc, sock):
		st = kvmm.KeyedStore("m", socket=sock, ring_bytes=1 << 20, threads=1)
		st.submit(1, "put", ["a"], [stamp(0, 1000)])
		assert take_all(st, 1)[0].ok
		proc.kill()
		proc.wait()
		st.submit(2, "get", ["a"], [np.zeros(1000, np.uint8)])
		c = take_all(st, 1)[0]
		assert not c.ok and c.error.startswith("kvmm: ") and c.res[0] == -errno.EIO
		st.close()


# ---- LMCache's native connector ----

def lmc_drain(conn, n):
	out = {}
	while len(out) < n:
		assert wait_for(conn.event_fd())
		for fid, ok, err, bools in conn.drain_completions():
			out[fid] = (ok, err, bools)
	return out


def test_lmcache_connector_contract():
	conn = KvmmNativeConnector(host_bytes=4 << 20)
	keys = [f"llama@{r:08x}@0@{'ab' * 16}" for r in range(3)]
	vals = [bytearray(stamp(i, 4096).tobytes()) for i in range(3)]
	fs = conn.submit_batch_set(keys, [memoryview(v) for v in vals])
	assert lmc_drain(conn, 1)[fs] == (True, "", [True, True, True])
	fe = conn.submit_batch_exists([keys[0], "missing", keys[2]])
	assert lmc_drain(conn, 1)[fe] == (True, "", [True, False, True])
	bufs = [bytearray(4096) for _ in range(2)]
	fg = conn.submit_batch_get([keys[1], "missing"], [memoryview(b) for b in bufs])
	ok, err, bools = lmc_drain(conn, 1)[fg]
	assert not ok and bools == [True, False] and "1 of 2 keys failed" in err
	assert bufs[0] == vals[1]
	fd = conn.submit_batch_delete([keys[0], "missing"])
	assert lmc_drain(conn, 1)[fd] == (True, "", [True, False])
	conn.close()
	conn.close()


def test_lmcache_submits_from_threads_while_another_drains():
	conn = KvmmNativeConnector(host_bytes=16 << 20, threads=2)
	want, got, lock = {}, {}, threading.Lock()
	stop = threading.Event()

	def demux():
		while not stop.is_set() or len(got) < len(want):
			if wait_for(conn.event_fd(), 0.05):
				for fid, ok, err, bools in conn.drain_completions():
					got[fid] = ok

	def client(t):
		for i in range(20):
			v = memoryview(bytearray(stamp(t * 100 + i, 1024).tobytes()))
			fid = conn.submit_batch_set([f"t{t}k{i}"], [v])
			with lock:
				want[fid] = v

	d = threading.Thread(target=demux)
	d.start()
	ts = [threading.Thread(target=client, args=(t,)) for t in range(4)]
	for t in ts:
		t.start()
	for t in ts:
		t.join()
	stop.set()
	d.join(20)
	assert len(want) == 80 and set(got) == set(want) and all(got.values())
	conn.close()


def _lmc_store(sock, keys):
	conn = KvmmNativeConnector(socket=sock, model_id="shared@1", ring_bytes=1 << 20)
	fid = conn.submit_batch_set(keys, [memoryview(stamp(i, 3000)) for i in range(len(keys))])
	res = lmc_drain(conn, 1)[fid]
	conn.close()
	return res


def test_two_engine_processes_share_through_kvmmd(kvmmd):
	"""One process stores through its connector; another, which never stored a
	value of that size, finds the keys and reads the same bytes."""
	_, sock = kvmmd
	keys = [f"m@00000000@0@{i:064x}" for i in range(4)]
	with multiprocessing.get_context("spawn").Pool(1) as pool:
		assert pool.apply(_lmc_store, (sock, keys)) == (True, "", [True] * 4)
	conn = KvmmNativeConnector(socket=sock, model_id="shared@1", ring_bytes=1 << 20)
	fe = conn.submit_batch_exists(keys + ["absent"])
	assert lmc_drain(conn, 1)[fe][2] == [True] * 4 + [False]
	bufs = [bytearray(3000) for _ in keys]
	fg = conn.submit_batch_get(keys[::-1], [memoryview(b) for b in bufs])
	assert lmc_drain(conn, 1)[fg][:2] == (True, "")
	for b, i in zip(bufs, range(3, -1, -1)):
		assert bytes(b) == stamp(i, 3000).tobytes()
	conn.close()
	other = KvmmNativeConnector(socket=sock, model_id="other-model", ring_bytes=1 << 20)
	fe = other.submit_batch_exists(keys)		# another model's identity: none
	assert lmc_drain(other, 1)[fe][2] == [False] * 4
	other.close()


def test_lmcache_tenant_sees_only_its_namespace(kvmmd):
	_, sock = kvmmd
	a = KvmmNativeConnector(socket=sock, ns=3, ring_bytes=1 << 20)
	b = KvmmNativeConnector(socket=sock, ns=4, ring_bytes=1 << 20)
	fs = a.submit_batch_set(["secret"], [memoryview(stamp(1, 500))])
	assert lmc_drain(a, 1)[fs][0]
	fb = b.submit_batch_set(["mine"], [memoryview(stamp(2, 500))])	# same size, its own space
	assert lmc_drain(b, 1)[fb][0]
	fe = b.submit_batch_exists(["secret", "mine"])
	assert lmc_drain(b, 1)[fe][2] == [False, True]
	buf = bytearray(500)
	fg = b.submit_batch_get(["secret"], [memoryview(buf)])
	assert lmc_drain(b, 1)[fg][0] is False and not any(buf)
	a.close()
	b.close()


def test_ring_lists_spaces_and_each_results(kvmmd):
	_, sock = kvmmd
	with kvmm.connect(sock, buf_size=1 << 20) as ring:
		b = ring.batch()
		b.kspace("listed", 777)
		sp = ring.submit(b)[0]
		b = ring.batch()
		b.kput(sp, ["x"], [stamp(0, 777)], 777)
		ring.submit(b)
		spaces = {s["model_id"]: s for s in ring.kspaces()}
		assert spaces["listed"]["values"] == 1 and spaces["listed"]["value_bytes"] == 777
		b = ring.batch()
		i = b.kexists(sp, ["x", "y"], each=True)
		j = b.kdelete(sp, ["y", "x"], each=True)
		assert ring.submit(b) == [1, 1]
		assert list(b.kres(i)) == [0, -errno.ENOENT]
		assert list(b.kres(j)) == [-errno.ENOENT, 0]
	with kvmm.connect(sock, ns=2) as bound, pytest.raises(PermissionError):
		bound.kspaces()


def test_keyed_space_each_and_info():
	with kvmm.Context(layers=1, kv_heads=1, head_dim=128, dtype_bytes=1, page_size=4,
			  nr_pages=16, max_seqs=1, max_seq_len=16, host_pages=32) as ctx:
		sp = ctx.keyed("m", 1000)
		sp.put(["a", "b"], [stamp(0, 1000), stamp(1, 1000)])
		assert list(sp.exists_each(["a", "z", "b"])) == [0, -errno.ENOENT, 0]
		assert len(sp) == 2 and sp.info()["host_pages"] == 2 and sp.info()["model_id"] == "m"
		assert list(sp.delete_each(["z", "a"])) == [-errno.ENOENT, 0]
		assert len(sp) == 1
		ctx.check()


def test_store_writeback_options_and_sync(tmp_path):
	"""An in-process store's NVMe tier tuned by its options: host watermarks at
	the whole host tier write every value down, sync() waits until they are
	there; the file is recovered by the next store on it, or formatted afresh
	with nvme_flags=NVME_REFORMAT; the options reach the library (which
	checks them) and are kvmmd's own through a socket."""
	path = str(tmp_path / "nvme")
	tier = dict(host_bytes=16 << 16, nvme_path=path, nvme_bytes=64 << 16)
	keys = [f"wb{i}" for i in range(8)]
	with kvmm.KeyedStore("m@1", host_wmark_low=16, host_wmark_high=16, nvme_qd=4,
			     **tier) as st:
		assert list(st.put_now(keys, [stamp(i, 1 << 16) for i in range(8)])) == [0] * 8
		st.sync()
		stats = st.stats()
		assert stats.keyed_nvme_pages == 8 and stats.keyed_host_pages == 0
		out = [np.zeros(1 << 16, np.uint8) for _ in range(2)]
		assert list(st.call("get", keys[6:], out)) == [0, 0]
		assert all(np.array_equal(o, stamp(6 + i, 1 << 16)) for i, o in enumerate(out))
		st.check()
	with kvmm.KeyedStore("m@1", **tier) as st:		# the file recovered
		assert list(st.exists_now(1 << 16, keys[:2])) == [0, 0]
	with kvmm.KeyedStore("m@1", nvme_flags=kvmm.NVME_REFORMAT, **tier) as st:
		assert list(st.exists_now(1 << 16, keys[:2])) == [-errno.ENOENT] * 2
	with kvmm.KeyedStore("m@1", host_bytes=1 << 20) as st:
		st.sync()					# no NVMe tier: at once
	with pytest.raises(kvmm.InvalidArgument):
		kvmm.KeyedStore("m@1", host_wmark_low=8, host_wmark_high=4, **tier)
	with pytest.raises(kvmm.InvalidArgument):
		kvmm.KeyedStore("m@1", nvme_qd=1 << 20, **tier)
	with pytest.raises(ValueError, match="an int >= 0"):
		kvmm.KeyedStore("m@1", nvme_qd=-1, **tier)


def test_store_through_kvmmd_has_no_tier_options_and_checks_kvmmd(kvmmd):
	with pytest.raises(ValueError, match="--host-wmark-low, --nvme-qd"):
		kvmm.KeyedStore("m@1", socket=kvmmd[1], host_wmark_low=4, nvme_qd=8)
	with kvmm.KeyedStore("m@1", socket=kvmmd[1], ring_bytes=1 << 20, threads=1) as st:
		with pytest.raises(kvmm.Error) as e:
			st.sync()				# kvmmd writes back on its own
		assert e.value.errno == errno.EOPNOTSUPP
		st.submit(1, "put", ["a"], [stamp(0, 300)])
		assert take_all(st, 1)[0].ok
		st.check()					# kvmmd's CHECK: it all holds
	# a store bound to a namespace may not check the whole context
	with kvmm.KeyedStore("m@1", socket=kvmmd[1], ns=5, ring_bytes=1 << 20, threads=1) as st:
		with pytest.raises(kvmm.Error) as e:
			st.check()
		assert e.value.errno == errno.EPERM


def test_store_exists_now_prefetches_what_it_finds(tmp_path):
	"""exists_now(prefetch=True) (the vLLM tier's lookup, SGLang's
	batch_exists) answers as without it and starts reading the values found
	on NVMe up to the host tier: once the reads are over, a get of them
	reads the host (prefetch hits, no more NVMe bytes out)."""
	path = str(tmp_path / "nvme")
	vb = 1 << 16
	keys = [f"pf{i}" for i in range(8)]
	# the eighth put takes the last free host page: writeback writes the
	# six oldest down, and six host pages are free again
	with kvmm.KeyedStore("m@1", host_bytes=8 << 16, nvme_path=path, nvme_bytes=64 << 16,
			     host_wmark_low=1, host_wmark_high=6, threads=1) as st:
		for i, k in enumerate(keys):
			assert list(st.put_now([k], [stamp(i, vb)])) == [0]
			st.sync()
		nvme_pages = st.stats().keyed_nvme_pages
		assert nvme_pages == 6
		want = list(st.exists_now(vb, keys[:2] + ["none"]))
		assert list(st.exists_now(vb, keys[:2] + ["none"], prefetch=True)) == want
		assert want == [0, 0, -errno.ENOENT]
		st.sync()					# the I/O worker's reads are over
		s1 = st.stats()
		assert s1.prefetch_pages == 2 and s1.keyed_nvme_pages == nvme_pages - 2
		out = [np.zeros(vb, np.uint8) for _ in range(2)]
		assert list(st.call("get", keys[:2], out)) == [0, 0]
		assert all(np.array_equal(o, stamp(i, vb)) for i, o in enumerate(out))
		s2 = st.stats()
		assert s2.prefetch_hits == 2 and s2.nvme_bytes_out == s1.nvme_bytes_out
		assert list(st.call("exists", keys[2:4], prefetch=True)) == [0, 0]
		st.check()
