# SPDX-License-Identifier: MIT
"""The keyed page store from Python: the C API, an in-process ring, kvmmd."""
import asyncio
import hashlib
import multiprocessing
import time

import numpy as np
import pytest

import kvmm
from conftest import GEOM
from kvmmd import running

VB = 3000	# bytes a value: 3 pages of 1 KiB at page size 4, the last part-filled


def stamp(i, vb=VB):
	return ((np.arange(vb, dtype=np.uint32) * 7 + i * 131) & 0xFF).astype(np.uint8)


@pytest.fixture
def hctx():
	"""A context with a host tier of 32 pages (10 values)."""
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=16, host_pages=32)
	yield c
	c.close()


def test_key_mapping():
	raw = bytes(range(16))
	assert kvmm.key_of(raw) == raw					# 16 bytes: as is
	assert kvmm.key_of(5) == (5).to_bytes(16, "little")
	assert kvmm.key_of("model@0@0@abc") == hashlib.blake2b(b"model@0@0@abc",
							      digest_size=16).digest()
	assert kvmm.key_of(b"x" * 32) == kvmm.key_of("x" * 32)
	with pytest.raises(ValueError):
		kvmm.key_of(1 << 128)
	with pytest.raises(TypeError):
		kvmm.key_of(1.5)
	arr = np.array([[1, 2], [3, 4]], dtype=np.uint64)
	assert kvmm.keys_array(arr).shape == (2, 16)
	assert kvmm.keys_array([raw, 7]).shape == (2, 16)


def test_put_get_exists_delete(hctx):
	sp = hctx.keyed("org/model@1", VB)
	keys = ["a", "b", "c"]
	res = sp.put(keys, [stamp(i).tobytes() for i in range(3)])
	assert list(res) == [0, 0, 0]
	res, out = sp.get(["c", "a", "zz"])
	assert list(res) == [0, 0, -2]					# ENOENT for the miss
	assert np.array_equal(out[0], stamp(2)) and np.array_equal(out[1], stamp(0))
	assert sp.exists(["a", "b", "nope", "c"]) == 2			# the run from the first
	assert sp.delete(["b", "nope"]) == 1
	assert sp.exists(["a", "b"]) == 1
	st = hctx.stats()
	assert st.keyed_values == 2 and st.keyed_puts == 3 and st.keyed_gets == 2
	assert st.keyed_host_pages == 2 * 3
	hctx.check()


def test_zero_copy_values_and_the_same_space(hctx):
	sp = hctx.keyed("org/model@1", VB)
	vals = np.stack([stamp(i) for i in range(4)])			# one (n, VB) array
	assert list(sp.put(np.arange(8, dtype=np.uint64).reshape(4, 2), vals)) == [0] * 4
	again = hctx.keyed("org/model@1", VB)				# the same three: the same space
	assert again.id == sp.id
	out = np.zeros((4, VB), dtype=np.uint8)
	res, got = again.get(np.arange(8, dtype=np.uint64).reshape(4, 2), out)
	assert got is out and list(res) == [0] * 4 and np.array_equal(out, vals)
	other = hctx.keyed("org/model@2", VB)				# another model sees none of it
	assert other.id != sp.id and other.exists(np.arange(8, dtype=np.uint64).reshape(4, 2)) == 0


def test_a_key_stored_twice_keeps_its_first_value(hctx):
	sp = hctx.keyed("m", VB)
	sp.put(["k"], [stamp(1)])
	sp.put(["k"], [stamp(2)])
	_, out = sp.get(["k"])
	assert np.array_equal(out[0], stamp(1))


def test_bad_values_store_nothing(hctx):
	sp = hctx.keyed("m", VB)
	with pytest.raises(ValueError):
		sp.put(["a", "b"], [stamp(0), stamp(1)[:-1]])		# one value too short
	with pytest.raises(ValueError):
		sp.put(["a"], [stamp(0), stamp(1)])			# more values than keys
	with pytest.raises(ValueError):
		sp.get(["a"], [bytes(VB)])				# not writable
	assert sp.exists(["a"]) == 0 and hctx.stats().keyed_values == 0
	with pytest.raises(kvmm.InvalidArgument):
		hctx.keyed("", VB)
	with pytest.raises(kvmm.InvalidArgument):
		hctx.keyed("m", 0)


def test_no_host_tier_is_refused(ctx):
	with pytest.raises(kvmm.Error) as e:
		ctx.keyed("m", VB)
	assert e.value.errno == 95					# EOPNOTSUPP


def test_pressure_evicts_and_never_fails_silently(hctx):
	sp = hctx.keyed("m", VB)
	for i in range(40):						# 4 times the host tier
		assert list(sp.put([i], [stamp(i)])) == [0]
	res, _ = sp.get(list(range(40)))
	assert (res == 0).sum() == 10 and (res[-10:] == 0).all()	# the newest stayed
	assert hctx.stats().keyed_evicts == 30


def test_in_process_ring(hctx):
	ring = hctx.ring()
	try:
		b = ring.batch()
		b.kspace("org/model@1", VB)
		sp = ring.submit(b)[0]
		b = ring.batch()
		i = b.kput(sp, ["a", "b"], [stamp(0), stamp(1)], VB)
		j = b.kget(sp, ["b", "x"], VB)
		k = b.kexists(sp, ["a", "b", "x"])
		assert ring.submit(b) == [2, 1, 2]
		assert list(b.kres(i)) == [0, 0] and list(b.kres(j)) == [0, -2]
		assert np.array_equal(b.kvalues(j)[0], stamp(1))
		assert k == 2
		_, out = hctx.keyed("org/model@1", VB).get(["a"])	# the C API's space too
		assert np.array_equal(out[0], stamp(0))
	finally:
		ring.close()


def test_a_removed_space_goes_with_its_values(hctx):
	sp = hctx.keyed("org/model@1", VB)
	assert list(sp.put(["a", "b"], [stamp(0), stamp(1)])) == [0, 0]
	old = sp.id
	assert sp.remove() == 2
	with pytest.raises(kvmm.InvalidArgument):
		sp.exists(["a"])				# the id names nothing now
	again = hctx.keyed("org/model@1", VB)			# made afresh, empty
	assert again.id != old and again.exists(["a"]) == 0
	hctx.check()
	ring = hctx.ring()
	try:							# through a ring
		b = ring.batch()
		b.kput(again.id, ["c"], [stamp(2)], VB)
		b.kspace_remove(again.id)
		assert ring.submit(b) == [1, 1]
		b = ring.batch()
		b.kexists(again.id, ["c"])
		with pytest.raises(kvmm.InvalidArgument):
			ring.submit(b)
	finally:
		ring.close()
	store = kvmm.KeyedStore("org/model@2", host_bytes=1 << 20, page_bytes=1 << 12)
	try:
		sid = store.space(VB)
		assert store.remove_space(VB) == 0
		assert store.space(VB) != sid
	finally:
		store.close()
	hctx.check()


@pytest.fixture
def kvmmd(tmp_path):
	"""A kvmmd with a host tier of 8 values over an NVMe file, page size 4."""
	with running(tmp_path / "kvmmd.sock",
		     ["--page-size", "4", "--pages", "16", "--host-pages", "24",
		      "--host-wmark-low", "12", "--host-wmark-high", "18",
		      "--nvme-pages", "600", "--nvme-file", str(tmp_path / "nvme"),
		      "--layers", "2", "--kv-heads", "2", "--head-dim", "8", "--dtype-bytes", "4",
		      "--model-id", "kvmmd-test"]) as served:
		yield served


def _store(sock, keys, base):
	with kvmm.connect(sock) as ring:
		b = ring.batch()
		b.kspace("org/model@1", VB)
		sp = ring.submit(b)[0]
		b = ring.batch()
		b.kput(sp, keys, [stamp(base + i) for i in range(len(keys))], VB)
		return ring.submit(b)[0]


def test_two_processes_share_through_kvmmd(kvmmd):
	_, sock = kvmmd
	ctx = multiprocessing.get_context("spawn")
	with ctx.Pool(1) as pool:					# another process stores ...
		assert pool.apply(_store, (sock, ["p", "q"], 10)) == 2
	with kvmm.connect(sock) as ring:				# ... this one hits
		b = ring.batch()
		b.kspace("org/model@1", VB)
		sp = ring.submit(b)[0]
		b = ring.batch()
		j = b.kget(sp, ["q", "p"], VB)
		assert ring.submit(b) == [2]
		vals = b.kvalues(j)
		assert np.array_equal(vals[0], stamp(11)) and np.array_equal(vals[1], stamp(10))


def test_a_bound_tenant_reaches_only_its_namespace(kvmmd):
	_, sock = kvmmd
	with kvmm.connect(sock, ns=5) as a, kvmm.connect(sock, ns=6) as b:
		ba = a.batch()
		ba.kspace("m", VB, ns=5)
		sa = a.submit(ba)[0]
		ba = a.batch()
		ba.kput(sa, ["secret"], [stamp(3)], VB)
		assert a.submit(ba) == [1]
		bb = b.batch()
		bb.kget(sa, ["secret"], VB)
		with pytest.raises(kvmm.InvalidArgument):
			b.submit(bb)
		bb = b.batch()
		bb.kspace("m", VB, ns=5)				# not its namespace
		with pytest.raises(PermissionError):
			b.submit(bb)


def _wait_nvme(ring, pages):
	deadline = time.monotonic() + 10
	while ring.stats().keyed_nvme_pages < pages and time.monotonic() < deadline:
		time.sleep(0.01)
	return ring.stats().keyed_nvme_pages


def staging_args(nvme, model_id):
	"""kvmmd whose host tier writes everything down to @nvme at once."""
	return ["--page-size", "4", "--pages", "16", "--host-pages", "24",
		"--host-wmark-low", "24", "--host-wmark-high", "24", "--nvme-pages", "600",
		"--nvme-file", str(nvme), "--layers", "2", "--kv-heads", "2", "--head-dim", "8",
		"--dtype-bytes", "4", "--model-id", model_id]


def test_kvmmd_restart_serves_what_was_written_down(tmp_path):
	sock, nvme = tmp_path / "k.sock", tmp_path / "nvme"
	args = staging_args(nvme, "restart-test")
	keys = [f"k{i}" for i in range(6)]
	with running(sock, args) as (_, path):
		assert _store(path, keys, 20) == 6
		with kvmm.connect(path) as ring:			# writeback takes them all down
			assert _wait_nvme(ring, 6 * 3) >= 6 * 3
	with running(tmp_path / "k2.sock", args) as (_, path), kvmm.connect(path) as ring:

		async def get():
			b = ring.batch()
			b.kspace("org/model@1", VB)
			sp = (await ring.submit_async(b))[0]
			b = ring.batch()
			j = b.kget(sp, keys, VB)			# from NVMe: completes later
			return await ring.submit_async(b), b.kvalues(j)

		res, vals = asyncio.run(get())
		assert res == [6]
		for i in range(6):
			assert np.array_equal(vals[i], stamp(20 + i))
		assert ring.stats().keyed_spaces == 1


def test_a_value_corrupted_on_disk_is_a_miss(tmp_path):
	sock, nvme = tmp_path / "k.sock", tmp_path / "nvme"
	args = staging_args(nvme, "flip-test")
	with running(sock, args) as (_, path):
		assert _store(path, ["v"], 40) == 1
		with kvmm.connect(path) as ring:
			assert _wait_nvme(ring, 3) >= 3
	data = bytearray(nvme.read_bytes())				# flip the value's bytes on disk
	pattern = stamp(40)[:64].tobytes()
	at = data.find(pattern)
	assert at > 0
	data[at + 10] ^= 0xFF
	nvme.write_bytes(bytes(data))
	with running(tmp_path / "k2.sock", args) as (_, path), kvmm.connect(path) as ring:
		b = ring.batch()
		b.kspace("org/model@1", VB)
		sp = ring.submit(b)[0]
		b = ring.batch()
		j = b.kget(sp, ["v"], VB)
		assert ring.submit(b) == [0]				# no value, not wrong bytes
		assert list(b.kres(j)) == [-74]				# EBADMSG
		assert ring.stats().nvme_csum_fail >= 1


def test_posted_batches_in_flight_together(hctx):
	"""post() several batches, each in its own part of the data area; poll() gives them back."""
	ring = hctx.ring()
	try:
		b = ring.batch()
		b.kspace("m", VB)
		sp = ring.submit(b)[0]
		b1 = ring.post_batch()
		b1.kput(sp, ["x", "y"], [stamp(1), stamp(2)], VB)
		b2 = ring.post_batch()
		b2.kput(sp, ["z"], [stamp(3)], VB)
		t1, t2 = ring.post(b1), ring.post(b2)
		with pytest.raises(kvmm.InvalidArgument):
			ring.batch()					# the whole area is not free
		done = {tag: res for tag, _, res in ring.poll()}	# in-process: already done
		assert done == {t1: [2], t2: [1]}
		b3 = ring.post_batch()
		j = b3.kget(sp, ["z", "x", "y"], VB)
		t3 = ring.post(b3)
		(tag, batch, res), = ring.poll()
		assert tag == t3 and batch is b3 and res == [3]
		vals = b3.kvalues(j)
		assert [np.array_equal(vals[i], stamp(k)) for i, k in enumerate((3, 1, 2))] == [True] * 3
		assert ring.batch() is not None				# nothing in flight: free again
	finally:
		ring.close()


def test_posted_get_from_nvme_wakes_the_doorbell(tmp_path):
	"""A KGET that reads NVMe completes later: arm(), wait on cq_fd, poll()."""
	import select

	sock, nvme = tmp_path / "k.sock", tmp_path / "nvme"
	with running(sock, staging_args(nvme, "post-test")) as (_, path):
		assert _store(path, ["n1", "n2"], 60) == 2
		with kvmm.connect(path) as ring:
			assert _wait_nvme(ring, 2 * 3) >= 2 * 3
			b = ring.batch()
			b.kspace("org/model@1", VB)
			sp = ring.submit(b)[0]
			pb = ring.post_batch()
			j = pb.kget(sp, ["n2", "n1"], VB)
			tag = ring.post(pb)
			got = []
			deadline = time.monotonic() + 10
			while not got and time.monotonic() < deadline:
				if not ring.arm():
					select.select([ring.cq_fd], [], [], 1.0)
				ring.disarm()
				got = ring.poll()
			assert [(t, r) for t, _, r in got] == [(tag, [2])]
			vals = pb.kvalues(j)
			assert np.array_equal(vals[0], stamp(61)) and np.array_equal(vals[1], stamp(60))
			assert ring.stats().keyed_nvme_pages >= 2 * 3	# read, not moved


@pytest.fixture
def nctx(tmp_path):
	"""A host tier of 32 pages (10 values) over NVMe of 300; writeback starts
	below 4 free host pages and goes on to 8."""
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=16, host_pages=32,
			 nvme_path=str(tmp_path / "nvme"), nvme_pages=300, host_wmark_low=4,
			 host_wmark_high=8)
	yield c
	c.close()


def _nvme_filled(c, n=30):
	"""Space "m" with values 0 .. n - 1, the oldest written down to NVMe."""
	sp = c.keyed("m", VB)
	for i in range(n):
		assert list(sp.put([i], [stamp(i)])) == [0]
		c.sync()
	return sp


def test_keyed_prefetch_reads_nvme_values_up_to_the_host(nctx):
	"""KeyedSpace.prefetch() brings values on NVMe up to the host tier in the
	order of its keys, only into free host pages above the low watermark by
	default (nothing evicted), more with reclaim and a budget; a get of them
	then reads the host, byte for byte, and counts as a prefetch hit."""
	sp = _nvme_filled(nctx)
	st = nctx.stats()
	room = (st.host_pages_free - 4) // 3
	assert room >= 1 and st.keyed_nvme_pages >= 3 * 10
	with pytest.raises(kvmm.InvalidArgument):
		sp.prefetch([0], reclaim=True)			# reclaim needs a budget
	assert sp.prefetch(list(range(10))) == room
	st = nctx.stats()
	assert st.prefetch_pages == 3 * room and st.keyed_evicts == 0
	assert st.host_pages_free >= 4
	assert sp.prefetch([0]) == 0				# on the host now
	res, out = sp.get(list(range(room)))
	assert (res == 0).all()
	assert all(np.array_equal(out[i], stamp(i)) for i in range(room))
	st2 = nctx.stats()
	assert st2.nvme_bytes_out == st.nvme_bytes_out and st2.prefetch_hits == 3 * room
	assert sp.prefetch(list(range(room, room + 3)), budget=9, reclaim=True) == 3
	res, out = sp.get(list(range(30)))
	assert (res == 0).all() and all(np.array_equal(out[i], stamp(i)) for i in range(30))
	nctx.check()


def test_keyed_prefetch_through_a_ring_and_cancel(nctx):
	"""Batch.kprefetch() completes at once with the reads it started; a kget
	after it gets the right bytes; prefetch_cancel() of another tag finds
	nothing, and a prefetch over (or never started) is not cancelled."""
	sp = _nvme_filled(nctx)
	ring = nctx.ring()
	try:
		b = ring.batch()
		with pytest.raises(ValueError):
			b.kprefetch(sp.id, [0], reclaim=True)
		i = b.kprefetch(sp.id, [0, 1, 999], budget=6, reclaim=True)
		assert ring.submit(b)[i] == 2
		b = ring.batch()
		j = b.kget(sp.id, [0, 1], VB)
		c = b.prefetch_cancel(12345, 0)
		res = ring.submit(b)
		assert res[j] == 2 and res[c] == 0
		got = b.kvalues(j)
		assert np.array_equal(got[0], stamp(0)) and np.array_equal(got[1], stamp(1))
		nctx.sync()
		st = nctx.stats()
		assert st.prefetch_pages + st.prefetch_canceled == 6
		nctx.check()
	finally:
		ring.close()
