# SPDX-License-Identifier: MIT
"""The pool and the page table shared with other libraries, and what
attention kernels read: torch CPU tensors as tokens, KV and page-table
views through DLPack (our own DLManagedTensor for DeviceArray),
kv_indices() and the device page table, on the mock backend, on the fake
CUDA driver and, where there is one, on a GPU with torch CUDA tensors.

Tests that need torch (CI's torch environment:
python/requirements-torch.txt) are skipped without it, those that need
the fake driver without tests/libfakecuda.so, and those that need a GPU
without torch.cuda and kvmm's cuda backend; the rest run everywhere.
"""
import ctypes
import gc

import numpy as np
import pytest

import kvmm
from kvmm import _core

from conftest import FAKE, GEOM, fake_cuda_context

try:
	import torch
except ImportError:
	torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
HAVE_GPU = (torch is not None and torch.cuda.is_available() and
	    kvmm.backend_available("cuda"))
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU for torch and kvmm")


def toks(n, start=0):
	return np.arange(start, start + n, dtype=np.int32)


# ---- the DLPack C structs as the standard lays them out (dlpack.h v0.8 / 1.0) ----
class DLDevice(ctypes.Structure):
	_fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
	_fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
	_fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
		    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
		    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
	_fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
		    ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
	_fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
		    ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
		    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
	("PyCapsule_GetPointer", ctypes.pythonapi))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
	("PyCapsule_SetName", ctypes.pythonapi))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
	("PyCapsule_GetName", ctypes.pythonapi))
STRUCTS = {b"dltensor": DLManagedTensor, b"dltensor_versioned": DLManagedTensorVersioned}


def managed(cap):
	"""The DLManagedTensor(Versioned) a capsule not yet consumed holds."""
	name = _get_name(cap)
	return STRUCTS[name].from_address(_get_pointer(cap, name))


def device_views(ctx, layer=0):
	"""A layer's (K, V) as DeviceArray objects over the mock's host memory:
	what the cuda backend gives, where a test can look at the bytes."""
	k, v, slot_bytes, nbytes = ctx.kv_layer_info(layer)
	return ctx._layer_views(k, v, slot_bytes, nbytes, np.float32,
				(GEOM["kv_heads"], GEOM["head_dim"]), 0)


class HostArray(kvmm.DeviceArray):
	"""A DeviceArray that says it is in host memory (kDLCPU), so numpy and
	torch on a CPU consume its capsule as they would a GPU one."""

	def __dlpack_device__(self):
		return (1, 0)


def host_array(ctx, layer=0):
	k, v = device_views(ctx, layer)
	h = HostArray(ctx._hold(k.ptr), k.shape, k.strides, k.dtype, 0, owner=ctx)
	del k, v
	return h


def expected_indices(ctx, seqs):
	"""FlashInfer's arrays for @seqs, from page_table() and the lengths, in Python."""
	table, ps = ctx.page_table(), ctx.page_size
	indptr, indices, last = [0], [], []
	for s in seqs:
		n = len(s)
		pages = -(-n // ps)
		indices += [int(p) for p in table[s.id, :pages]]
		indptr.append(indptr[-1] + pages)
		last.append(n - (pages - 1) * ps if n else 0)
	return indptr, indices, last


def open_batch(ctx, lens):
	"""Sequences of lengths @lens (0 included), each from a distinct prompt."""
	seqs = []
	for i, n in enumerate(lens):
		s = ctx.open()
		if n:
			s.extend(n)
		seqs.append(s)
	return seqs


# ---- torch CPU tensors (as before) ----
@needs_torch
def test_torch_tokens_are_taken_in_place(ctx):
	p = torch.arange(10, dtype=torch.int32)
	s = ctx.open()
	assert s.match(p, 9) == 0
	s.extend(10)
	assert s.commit(p) == 8
	s.close(p)
	s2 = ctx.open()
	assert s2.match(np.arange(10, dtype=np.int32), 9) == 8	# the same tokens
	s2.close()


@needs_torch
@pytest.mark.parametrize("bad, exc", [
	(lambda: torch.arange(10, dtype=torch.int64), TypeError),
	(lambda: torch.arange(20, dtype=torch.int32)[::2], ValueError),
	(lambda: torch.arange(12, dtype=torch.int32).reshape(3, 4), ValueError),
], ids=["int64", "strided", "2-D"])
def test_bad_torch_tokens_change_nothing(ctx, bad, exc):
	s = ctx.open()
	with pytest.raises(exc):
		s.match(bad())
	assert ctx.stats().match_calls == 0
	s.close()


@needs_torch
def test_kv_and_page_table_shared_with_torch(ctx):
	p = np.arange(8, dtype=np.int32)
	s = ctx.open()
	s.match(p, 7)
	s.extend(8)
	slots = s.slots(0, 8)
	k, _ = ctx.kv(0)
	tk = torch.from_dlpack(k)
	tk[int(slots[3])] = 5.0			# written through torch
	assert float(k[slots[3], 1, 7]) == 5.0	# read through numpy: same memory
	table = torch.from_dlpack(ctx.page_table())
	assert table.dtype == torch.int32 and int(table[s.id, 0]) == int(s.row()[0])
	s.close()
	del tk, table, k


# ---- DeviceArray.__dlpack__: the capsule and its DLManagedTensor ----
@pytest.mark.parametrize("max_version, name", [
	(None, b"dltensor"), ((0, 8), b"dltensor"), ((1, 0), b"dltensor_versioned"),
	((1, 3), b"dltensor_versioned"),
])
def test_dlpack_capsule_holds_a_managed_tensor_of_the_pool(ctx, max_version, name):
	k, v = device_views(ctx, 1)
	kp, vp, slot_bytes, nbytes = ctx.kv_layer_info(1)
	cap = k.__dlpack__(max_version=max_version)
	assert _get_name(cap) == name
	m = managed(cap)
	if name == b"dltensor_versioned":
		assert (m.major, m.minor) == (1, 0) and m.flags == 0	# writable, not a copy
	t = m.dl_tensor
	assert t.data == kp and t.byte_offset == 0
	assert (t.device.device_type, t.device.device_id) == (2, 0)		# kDLCUDA, ordinal
	assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)	# float32
	assert t.ndim == 3
	assert [t.shape[i] for i in range(3)] == [nbytes // slot_bytes, 2, 8]
	assert [t.strides[i] for i in range(3)] == [slot_bytes // 4, 8, 1]	# in elements
	assert m.deleter and m.manager_ctx
	del cap, m, t, k, v
	gc.collect()
	assert _core.dlpack_exports() == 0 and ctx.live_views == 0


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_dlpack_capsule_dropped_unconsumed_deletes_once_and_keeps_the_context(ctx, max_version):
	k = device_views(ctx)[0]
	base = _core.dlpack_exports()
	cap = k.__dlpack__(max_version=max_version)
	assert _core.dlpack_exports() == base + 1
	del k
	gc.collect()
	assert ctx.live_views == 1		# the capsule holds K's view
	with pytest.raises(kvmm.Busy):
		ctx.close()
	del cap				# never consumed: its destructor calls the deleter
	assert _core.dlpack_exports() == base
	gc.collect()
	assert ctx.live_views == 0
	ctx.close()


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_dlpack_capsule_consumed_is_deleted_by_its_consumer_only(ctx, max_version):
	k = device_views(ctx)[0]
	base = _core.dlpack_exports()
	cap = k.__dlpack__(max_version=max_version)
	m = managed(cap)
	assert _set_name(cap, b"used_" + _get_name(cap)) == 0	# a consumer took it
	assert _core.dlpack_exports() == base + 1
	DELETER(m.deleter)(ctypes.addressof(m))	# ... and its tensor went
	assert _core.dlpack_exports() == base
	del cap				# renamed: the destructor leaves it alone
	assert _core.dlpack_exports() == base
	del k, m
	gc.collect()
	assert ctx.live_views == 0


def test_dlpack_refuses_a_copy_and_another_device(ctx):
	k = device_views(ctx)[0]
	with pytest.raises(BufferError):
		k.__dlpack__(copy=True)
	with pytest.raises(BufferError):
		k.__dlpack__(dl_device=(1, 0))
	with pytest.raises(ValueError):
		k.__dlpack__(stream=0)		# ambiguous for CUDA (the standard)
	assert _core.dlpack_exports() == 0
	cap = k.__dlpack__(stream=1, dl_device=(2, 0), copy=False)	# mock: nothing to wait for
	assert _get_name(cap) == b"dltensor"
	del cap, k


def test_numpy_consumes_the_capsule_in_place(ctx):
	h = host_array(ctx)
	a = np.from_dlpack(h)
	assert a.ctypes.data == h.ptr and a.shape == h.shape and a.strides == h.strides
	k = ctx.kv(0)[0]
	a[7, 1, 3] = 2.5
	assert k[7, 1, 3] == 2.5
	del h, k
	gc.collect()
	assert _core.dlpack_exports() == 1 and ctx.live_views == 1	# numpy's array holds it
	del a
	gc.collect()
	assert _core.dlpack_exports() == 0 and ctx.live_views == 0


@needs_torch
def test_torch_consumes_the_capsule_in_place(ctx):
	h = host_array(ctx)
	t = torch.from_dlpack(h)
	kp = ctx.kv_layer_info(0)[0]
	assert t.data_ptr() == kp and tuple(t.shape) == h.shape
	assert t.stride() == tuple(s // 4 for s in h.strides)
	t[9] = 4.0
	k = ctx.kv(0)[0]
	assert float(k[9].min()) == float(k[9].max()) == 4.0
	del h, k
	gc.collect()
	assert _core.dlpack_exports() == 1
	del t				# torch calls the deleter
	gc.collect()
	assert _core.dlpack_exports() == 0 and ctx.live_views == 0


# ---- kv_indices(), the device page table, stream_wait() on the mock ----
@pytest.mark.parametrize("ps", [1, 4, 16])
def test_kv_indices_match_the_page_table(ps):
	with kvmm.Context(**dict(GEOM, max_seqs=8), page_size=ps, nr_pages=512 // ps) as ctx:
		lens = [5, 0, 16, 17, 1]
		seqs = open_batch(ctx, lens)
		total = sum(-(-n // ps) for n in lens)
		indptr = np.full(len(seqs) + 1, -7, np.int32)
		indices = np.full(total + 3, -7, np.int32)
		last = np.full(len(seqs), -7, np.int32)
		assert ctx.kv_indices(seqs, indptr, indices, last) == total
		ip, ix, lp = expected_indices(ctx, seqs)
		assert indptr.tolist() == ip and last.tolist() == lp
		assert indices[:total].tolist() == ix
		assert indices[total:].tolist() == [-7] * 3	# nothing past the total
		# ids do as well as Sequence objects; a sub-batch in another order
		sub = [seqs[3], seqs[0]]
		assert ctx.kv_indices([s.id for s in sub], indptr, indices, last) == \
			sum(-(-len(s) // ps) for s in sub)
		ip, ix, lp = expected_indices(ctx, sub)
		assert indptr[:3].tolist() == ip and last[:2].tolist() == lp
		assert indices[:ip[-1]].tolist() == ix
		for s in seqs:
			s.close()


@needs_torch
def test_kv_indices_into_torch_cpu_tensors(ctx):
	seqs = open_batch(ctx, [9, 4])
	indptr = torch.zeros(3, dtype=torch.int32)
	indices = torch.zeros(8, dtype=torch.int32)
	last = torch.zeros(2, dtype=torch.int32)
	assert ctx.kv_indices(seqs, indptr, indices, last) == 4
	ip, ix, lp = expected_indices(ctx, seqs)
	assert indptr.tolist() == ip and indices[:4].tolist() == ix and last.tolist() == lp


def test_kv_indices_refuses_bad_arrays_before_c(ctx):
	seqs = open_batch(ctx, [9, 4])
	good = lambda n: np.full(n, -7, np.int32)
	ro = good(3)
	ro.flags.writeable = False
	cases = [
		((good(3).astype(np.int64), good(8), good(2)), TypeError),
		((good(3), good(8).astype(np.uint32), good(2)), TypeError),
		((good(3), good(8), [0, 0]), TypeError),
		((good(6)[::2], good(8), good(2)), ValueError),
		((good(3), good(8).reshape(2, 4), good(2)), ValueError),
		((good(2), good(8), good(2)), ValueError),		# indptr: count + 1
		((good(3), good(8), good(1)), ValueError),		# last_page_len: count
		((ro, good(8), good(2)), ValueError),
	]
	for (ip, ix, lp), exc in cases:
		before = [np.array(a, copy=True) for a in (ip, ix, lp)]
		with pytest.raises(exc):
			ctx.kv_indices(seqs, ip, ix, lp)
		assert all(np.array_equal(a, b) for a, b in zip((ip, ix, lp), before))	# untouched
	with pytest.raises(ValueError):
		ctx.kv_indices([-1], good(2), good(8), good(1))
	with pytest.raises(TypeError):
		ctx.kv_indices(["0"], good(2), good(8), good(1))


def test_kv_indices_errors_from_c(ctx):
	seqs = open_batch(ctx, [9, 4])
	ip, ix, lp = np.full(3, -7, np.int32), np.full(8, -7, np.int32), np.full(2, -7, np.int32)
	with pytest.raises(kvmm.NoSpace):
		ctx.kv_indices(seqs, ip, ix[:3], lp)		# 4 pages, room for 3
	with pytest.raises(kvmm.InvalidArgument):
		ctx.kv_indices([seqs[0], seqs[0]], ip, ix, lp)	# named twice
	with pytest.raises(kvmm.InvalidArgument):
		ctx.kv_indices([seqs[0].id, 3], ip, ix, lp)	# not open
	assert (ip == -7).all() and (ix == -7).all() and (lp == -7).all()
	seqs[1].close()
	with pytest.raises(kvmm.InvalidArgument):
		ctx.kv_indices(seqs, ip, ix, lp)			# closed
	with kvmm.Context(**GEOM, page_size=4, nr_pages=64) as other:
		with pytest.raises(ValueError):
			other.kv_indices(seqs[:1], ip[:2], ix, lp[:1])	# another context's
	assert ctx.kv_indices([], ip[:1], ix[:0], lp[:0]) == 0 and ip[0] == 0


def test_device_page_table_on_a_host_backend_is_the_table(ctx):
	s = ctx.open()
	s.extend(9)
	dev = ctx.page_table(device=True)
	host = ctx.page_table()
	assert isinstance(dev, np.ndarray) and not dev.flags.writeable
	assert dev.ctypes.data == host.ctypes.data and dev.shape == host.shape
	s.extend(8)					# one table: the change shows in both
	assert dev[s.id, 3] == host[s.id, 3] >= 0
	ctx.stream_wait(1)				# mock: nothing to wait for
	with pytest.raises(TypeError):
		ctx.stream_wait("stream")
	del dev, host
	s.close()


def test_backend_available():
	assert kvmm.backend_available("mock")
	assert not kvmm.backend_available("no-such-backend")


# ---- the cuda backend over the fake driver (host memory that says it is a GPU) ----
@pytest.fixture
def fake():
	"""(a context on the cuda backend over libfakecuda, the driver library)."""
	c = fake_cuda_context()
	drv = ctypes.CDLL(str(FAKE))		# the library the backend opened: its state
	drv.fakecuda_calls.restype = ctypes.c_uint
	drv.fakecuda_calls.argtypes = [ctypes.c_char_p]
	yield c, drv
	gc.collect()
	c.close()


class FakeDeviceInt32:
	"""n int32 of the fake driver's device memory, with __cuda_array_interface__."""

	def __init__(self, drv, n, fill=-7):
		p = ctypes.c_uint64()
		assert drv.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4 * max(n, 1))) == 0
		self.drv, self.ptr, self.n = drv, p.value, n
		self.host = np.ctypeslib.as_array((ctypes.c_int32 * max(n, 1)).from_address(p.value))
		self.host[:] = fill
		self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<i4", "strides": None,
						 "data": (p.value, False), "version": 3}

	def __del__(self):
		self.drv.cuMemFree_v2(ctypes.c_uint64(self.ptr))


def test_kv_indices_on_the_fake_gpu(fake):
	ctx, drv = fake
	seqs = open_batch(ctx, [9, 0, 4, 12])
	ip, ix, lp = (FakeDeviceInt32(drv, 5), FakeDeviceInt32(drv, 10),
		      FakeDeviceInt32(drv, 4))
	launches = drv.fakecuda_calls(b"cuLaunchKernel")
	assert ctx.kv_indices(seqs, ip, ix, lp) == 7
	assert drv.fakecuda_calls(b"cuLaunchKernel") == launches + 2	# indptr, indices
	eip, eix, elp = expected_indices(ctx, seqs)
	assert ip.host.tolist() == eip and lp.host.tolist() == elp
	assert ix.host[:7].tolist() == eix and ix.host[7:].tolist() == [-7] * 3
	assert ctx.kv_indices(seqs[2:], ip, ix, lp, stream=1) == 4	# queued on a stream
	with pytest.raises(TypeError):					# host memory: refused
		ctx.kv_indices(seqs, np.zeros(5, np.int32), ix, lp)
	short = FakeDeviceInt32(drv, 3)
	with pytest.raises(ValueError):
		ctx.kv_indices(seqs, short, ix, lp)
	ro = FakeDeviceInt32(drv, 5)
	ro.__cuda_array_interface__["data"] = (ro.ptr, True)
	with pytest.raises(ValueError):
		ctx.kv_indices(seqs, ro, ix, lp)
	i64 = FakeDeviceInt32(drv, 10)
	i64.__cuda_array_interface__["typestr"] = "<i8"
	with pytest.raises(TypeError):
		ctx.kv_indices(seqs, ip, i64, lp)
	with pytest.raises(kvmm.NoSpace):
		ctx.kv_indices(seqs, ip, FakeDeviceInt32(drv, 6), lp)


def test_device_page_table_on_the_fake_gpu(fake):
	ctx, _ = fake
	s = ctx.open()
	s.extend(9)
	dev = ctx.page_table(device=True)
	host = ctx.page_table()
	assert isinstance(dev, kvmm.DeviceArray)
	cai = dev.__cuda_array_interface__
	assert cai["data"] == (host.ctypes.data, True)		# the fake maps host memory 1:1
	assert cai["shape"] == host.shape and cai["strides"] == host.strides
	assert cai["typestr"] == "<i4"
	for max_version in (None, (1, 0)):
		cap = dev.__dlpack__(max_version=max_version)
		m = managed(cap)
		t = m.dl_tensor
		assert t.data == host.ctypes.data and (t.device.device_type, t.ndim) == (2, 2)
		assert (t.dtype.code, t.dtype.bits) == (0, 32)			# int32
		assert (t.strides[0], t.strides[1]) == (host.shape[1], 1)
		if max_version:
			assert m.flags == 1				# DLPACK_FLAG_BITMASK_READ_ONLY
		del cap, m, t
	with pytest.raises(kvmm.Busy):
		ctx.close()
	del dev, host
	s.close()


def test_dlpack_stream_waits_for_kvmms_copies_on_the_fake_gpu(fake):
	ctx, drv = fake
	k, v = ctx.kv(0)
	assert isinstance(k, kvmm.DeviceArray)
	waits = lambda: drv.fakecuda_calls(b"cuStreamWaitEvent")
	n = waits()
	cap = k.__dlpack__()
	cap2 = k.__dlpack__(stream=-1)
	assert waits() == n				# no stream: nothing waited
	cap3 = k.__dlpack__(stream=1)			# CU_STREAM_LEGACY
	assert waits() == n + 2				# one event per copy lane
	ctx.stream_wait(0)				# torch's default stream: legacy
	assert waits() == n + 4
	assert _core.dlpack_exports() == 3
	del cap, cap2, cap3, k, v
	assert _core.dlpack_exports() == 0


# ---- torch tensors over kvmm's pool and page table: CPU on mock, CUDA on a GPU ----
@pytest.fixture(params=[
	pytest.param("cpu", marks=needs_torch),
	pytest.param("cuda", marks=needs_gpu),
])
def torch_ctx(request):
	"""(a context with a host tier, pages of 4 tokens, the torch device):
	the mock backend for "cpu", the cuda backend for "cuda"."""
	backend = "mock" if request.param == "cpu" else "cuda"
	with kvmm.Context(**GEOM, page_size=4, nr_pages=64, host_pages=64,
			  backend=backend) as c:
		yield c, torch.device(request.param)
		gc.collect()


def test_pool_and_page_table_as_torch_tensors(torch_ctx):
	"""Written through torch, demoted and promoted by kvmm, read back through torch."""
	ctx, dev = torch_ctx
	pools = []
	for layer in range(GEOM["layers"]):
		kp, vp, _, _ = ctx.kv_layer_info(layer)
		k, v = (torch.from_dlpack(a) for a in ctx.kv(layer))
		assert k.device.type == dev.type and k.dtype == torch.float32
		assert (k.data_ptr(), v.data_ptr()) == (kp, vp)	# no copy
		pools.append((k, v))
	prompt = toks(12, 1000)
	s = ctx.open()
	s.match(prompt, 11)
	s.extend(12)
	slots = torch.as_tensor(s.slots(0, 12), device=dev)
	val = torch.arange(12 * 2 * 8, dtype=torch.float32, device=dev).reshape(12, 2, 8)
	for layer, (k, v) in enumerate(pools):
		k[slots] = val + layer
		v[slots] = -val - layer
	if dev.type == "cuda":
		torch.cuda.synchronize()	# kvmm is about to copy the pool: our writes are done
	# The page table where kernels read it is the host's.
	table = torch.from_dlpack(ctx.page_table(device=True))
	assert table.device.type == dev.type and table.dtype == torch.int32
	assert torch.equal(table.cpu(), torch.from_numpy(ctx.page_table().copy()))
	s.close(prompt)
	assert ctx.reclaim(64) > 0		# to the host tier
	assert ctx.tiers(prompt)[1] == 12 and ctx.stats().host_demote_pages > 0
	s = ctx.open()
	assert s.match(prompt, 12) == 0
	assert s.promote(prompt, 12) == 12
	assert ctx.stats().host_promote_pages > 0
	if dev.type == "cuda":
		ctx.stream_wait(torch.cuda.current_stream())	# before kernels read what came back
	slots = torch.as_tensor(s.slots(0, 12), device=dev)
	for layer, (k, v) in enumerate(pools):
		assert torch.equal(k[slots], val + layer) and torch.equal(v[slots], -val - layer)
	# The same table, as it is now: no copy.
	assert torch.equal(table.cpu(), torch.from_numpy(ctx.page_table().copy()))
	# kv_indices into torch tensors in the backend's memory, on torch's stream.
	s2 = ctx.open()
	s2.extend(5)
	ip, ix, lp = (torch.full((n,), -7, dtype=torch.int32, device=dev) for n in (3, 8, 2))
	stream = torch.cuda.current_stream() if dev.type == "cuda" else None
	assert ctx.kv_indices([s, s2], ip, ix, lp, stream=stream) == 5
	eip, eix, elp = expected_indices(ctx, [s, s2])
	assert ip.tolist() == eip and ix[:5].tolist() == eix and lp.tolist() == elp
	assert ix[5:].tolist() == [-7] * 3
	assert ctx.kv_indices([s2], ip, ix, lp) == 2 and ip[:2].tolist() == [0, 2]	# no stream
	s.close()
	s2.close()
	del pools, k, v, table
