# SPDX-License-Identifier: MIT
"""The Pythonic layer over libkvmm: Context, Sequence, Stats, views.

Every method is one C call plus argument checks; every failure raises (see
:mod:`kvmm._errors`) and, as in C, changes nothing.  Token arrays are any
1-D C-contiguous buffer of 4-byte integers (numpy ``int32``/``uint32``,
``array('i')``, a ``memoryview``), handed to C without a copy.  The page
table and the KV pool come out as numpy arrays over the library's memory;
each keeps its context alive, and closing a context while one is alive
raises :class:`kvmm.Busy`.
"""
import collections
import ctypes
import dataclasses
import errno
import itertools
import logging
import operator
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ._errors import Busy, InvalidArgument, make_error
from ._kvmm import ffi, lib
from ._radix import Node as _Node

__all__ = ["Context", "DeviceArray", "FrameNode", "Sequence", "SeqInfo", "Stats", "STAT_NAMES",
	   "backend_available", "default_params"]

_log = logging.getLogger("kvmm")

#: Names of the statistics items, in the library's order (kvmm_stat_name()).
STAT_NAMES: Tuple[str, ...] = tuple(ffi.string(lib.kvmm_stat_name(i)).decode()
				    for i in range(lib.NR_KVMM_STATS))

#: A snapshot of the context's statistics (kvmm_stats()), one int per item.
Stats = dataclasses.make_dataclass("Stats", [(n, int) for n in STAT_NAMES], frozen=True)
Stats.__doc__ = "A snapshot of kvmm_stats(): one field per enum kvmm_stat_item."
Stats.__module__ = "kvmm"

_MODEL_FIELDS = ("layers", "kv_heads", "head_dim", "latent_dim", "dtype_bytes")
_STR_FIELDS = ("model_id", "backend", "evict_policy", "nvme_path", "remote", "remote_salt",
	       "remote_user", "remote_password")
_INT_FIELDS = ("page_size", "max_seqs", "max_seq_len", "nr_pages", "max_pages", "mem_total",
	       "mem_avail", "mem_fraction", "wmark_min", "wmark_low", "wmark_high",
	       "host_pages", "host_node", "write_policy", "nvme_pages", "nvme_qd", "nvme_flags",
	       "host_wmark_low", "host_wmark_high", "remote_timeout_ms")
_ATTN = {"mha": lib.KVMM_ATTN_MHA, "mla": lib.KVMM_ATTN_MLA}
_FRAMES = {"kvmm": lib.KVMM_FRAMES_KVMM, "engine": lib.KVMM_FRAMES_ENGINE}
_REMOTE_WRITE = {"none": lib.KVMM_REMOTE_WRITE_NONE, "commit": lib.KVMM_REMOTE_WRITE_COMMIT,
		 "demote": lib.KVMM_REMOTE_WRITE_DEMOTE}
# struct module formats of 4-byte ints in native (little-endian) order
_TOKEN_FORMATS = frozenset(("i", "I", "@i", "@I", "=i", "=I", "<i", "<I"))
_U32_ARRAY = ffi.typeof("uint32_t[]")
_DTYPES = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.float64}


# What a field left 0 (or NULL) means when the library reads it (struct
# kvmm_params in libkvmm.h): a value of its own, or None where there is
# none: the field must be given, or is worked out from others.
_IN_EFFECT: Dict[str, Any] = {
	"layers": None, "kv_heads": None, "head_dim": None, "dtype_bytes": None,
	"page_size": None, "max_seqs": None, "max_seq_len": None,
	"nr_pages": None,		# or sized by mem_fraction
	"max_pages": None,		# nr_pages: the pool does not grow
	"mem_total": None, "mem_avail": None,	# with mem_fraction: the backend's figures
	"host_wmark_low": None,		# 1/8 of host_pages, at least 1
	"host_wmark_high": None,	# twice host_wmark_low
	"nvme_qd": 32, "remote_timeout_ms": 1000,
	"backend": "mock", "evict_policy": "lru",
}


def default_params() -> Dict[str, Any]:
	"""Return the defaults in effect by field name: what the library uses
	for a field that is not given (kvmm_params_init() leaves every field 0
	and the library reads 0 as its default).  None: the field has no
	default of its own, because it must be given (the model, ``page_size``,
	``max_seqs``, ``max_seq_len``, ``nr_pages`` or ``mem_fraction``
	sizing) or is worked out from others (``max_pages``, the host
	watermarks).  Context() takes None as "not given"."""
	p = ffi.new("struct kvmm_params *")
	lib.kvmm_params_init(p)
	out: Dict[str, Any] = {f: getattr(p.model, f) for f in _MODEL_FIELDS}
	out.update({f: getattr(p, f) for f in _INT_FIELDS})
	out.update({f: None for f in _STR_FIELDS})
	out["attn"] = "mla" if p.model.attn == lib.KVMM_ATTN_MLA else "mha"
	out["frames"] = "kvmm"
	out["remote_write"] = "none"
	out.update(_IN_EFFECT)
	return out


def backend_available(name: str) -> bool:
	"""Whether this build has the backend @name ("mock", "cuda"):
	kvmm_backend_available().  For cuda that says the backend is built in,
	not that a driver or a GPU is there: Context() finds out."""
	return bool(lib.kvmm_backend_available(name.encode()))


def tokens_arg(tokens: Any, n: Optional[int] = None) -> Tuple[Any, int]:
	"""Check a token buffer and return (a cdata over it, its length to pass).

	Raises TypeError for something that is not a buffer of 4-byte integers,
	ValueError for one that is not 1-D and C-contiguous or for an @n outside
	0..len(tokens).  Nothing is copied.  An object without the buffer
	protocol but with DLPack (a torch CPU tensor) is taken through
	numpy.from_dlpack(), which shares its memory; one on a device is a
	TypeError.
	"""
	try:
		mv = memoryview(tokens)
	except TypeError:
		if not hasattr(tokens, "__dlpack__"):
			raise
		try:
			mv = memoryview(np.from_dlpack(tokens))
		except (RuntimeError, BufferError, ValueError) as e:
			raise TypeError(f"tokens must be in host memory: {e}") from None
	if mv.format not in _TOKEN_FORMATS:
		raise TypeError(f"tokens must be 4-byte integers (int32/uint32), not format "
				f"{mv.format!r}")
	if mv.ndim != 1 or not mv.c_contiguous:
		raise ValueError("tokens must be a 1-D C-contiguous buffer")
	length = mv.shape[0]
	if n is None:
		n = length
	elif not 0 <= n <= length:
		raise ValueError(f"n = {n} is outside 0..{length}")
	return ffi.from_buffer(_U32_ARRAY, mv), n


_INT32_FORMATS = frozenset(("i", "@i", "=i", "<i"))
_INT32_PTR = ffi.typeof("int32_t *")
_INT32_ARRAY = ffi.typeof("int32_t[]")


def _host_int32_out(arr: Any, name: str, need: int) -> Tuple[Any, int]:
	"""(int32_t * over @arr, its length) for an out array in host memory.

	@arr is a writable 1-D C-contiguous buffer of int32 (numpy, a torch
	CPU tensor through DLPack) of at least @need entries.
	"""
	try:
		mv = memoryview(arr)
	except TypeError:
		if hasattr(arr, "__cuda_array_interface__"):
			raise TypeError(f"{name}: the backend's memory is host memory; this array "
					"is on a GPU") from None
		if not hasattr(arr, "__dlpack__"):
			raise TypeError(f"{name}: an int32 array, not {type(arr).__name__}") from None
		try:
			mv = memoryview(np.from_dlpack(arr))
		except (RuntimeError, BufferError, ValueError, TypeError) as e:
			raise TypeError(f"{name} must be in host memory: {e}") from None
	if mv.format not in _INT32_FORMATS:
		raise TypeError(f"{name} must be int32, not format {mv.format!r}")
	if mv.ndim != 1 or not mv.c_contiguous:
		raise ValueError(f"{name} must be a 1-D C-contiguous array")
	if mv.readonly:
		raise ValueError(f"{name} is read-only")
	if mv.shape[0] < need:
		raise ValueError(f"{name} has {mv.shape[0]} entries; {need} needed")
	if mv.shape[0] == 0:
		return ffi.NULL, 0
	return ffi.from_buffer(_INT32_ARRAY, mv, require_writable=True), mv.shape[0]


def _device_int32_out(arr: Any, name: str, need: int) -> Tuple[Any, int]:
	"""(int32_t * at @arr's device address, its length) for an out array in
	GPU memory: anything with ``__cuda_array_interface__`` (a torch CUDA
	tensor, a CuPy array), writable, 1-D, contiguous int32, at least
	@need entries."""
	cai = getattr(arr, "__cuda_array_interface__", None)
	if cai is None:
		raise TypeError(f"{name}: the backend's memory is device memory: an array with "
				f"__cuda_array_interface__, not {type(arr).__name__}")
	if np.dtype(cai["typestr"]) != np.dtype(np.int32):
		raise TypeError(f"{name} must be int32, not {cai['typestr']}")
	shape, strides = tuple(cai["shape"]), cai.get("strides")
	if len(shape) != 1 or (strides is not None and shape[0] > 1 and tuple(strides) != (4,)):
		raise ValueError(f"{name} must be a 1-D contiguous array")
	if cai.get("mask") is not None:
		raise ValueError(f"{name} must not be masked")
	ptr, readonly = cai["data"]
	if readonly:
		raise ValueError(f"{name} is read-only")
	if shape[0] < need:
		raise ValueError(f"{name} has {shape[0]} entries; {need} needed")
	return (ffi.cast(_INT32_PTR, ptr) if shape[0] else ffi.NULL), shape[0]


class _LogLines:
	"""What the library logged (params.log); the lines go to the next error."""

	def __init__(self) -> None:
		self.pending: collections.deque = collections.deque(maxlen=8)

	def take(self) -> List[str]:
		lines = list(self.pending)
		self.pending.clear()
		return lines


@ffi.def_extern()
def kvmm_py_log(priv, msg):
	"""params.log: keep the line for the error it explains, and log it."""
	line = ffi.string(msg).decode(errors="replace").rstrip()
	ffi.from_handle(priv).pending.append(line)
	_log.warning("%s", line)


@dataclasses.dataclass(frozen=True)
class SeqInfo:
	"""Where one sequence stands (struct kvmm_seq_info)."""

	len: int
	cached: int
	ns: int


@dataclasses.dataclass(frozen=True)
class FlushInfo:
	"""What :meth:`Context.flush` did (struct kvmm_flush_info): pages
	written to the NVMe tier's file, cached pages it did not write (out
	of time or room, or failed), and the seconds it took."""

	pages: int
	left: int
	seconds: float


def row_slots(row: np.ndarray, page_size: int, length: int, start: int,
	      stop: Optional[int]) -> np.ndarray:
	"""The pool slots of tokens [start, stop) of a page-table @row whose
	sequence holds @length tokens (a new int64 array).

	Only tokens the sequence has KV for have slots: IndexError unless
	0 <= start <= stop <= length (@stop None is @length).  Past the length
	a row holds -1 or a stale frame, and a negative index is no Python
	slice here: either would name another request's slot.
	"""
	start = operator.index(start)
	stop = length if stop is None else operator.index(stop)
	if not 0 <= start <= stop <= length:
		raise IndexError(f"kvmm: slots [{start}, {stop}) are outside the sequence's "
				 f"{length} tokens: 0 <= start <= stop <= len (EXTEND first)")
	t = np.arange(start, stop, dtype=np.int64)
	return row[t // page_size].astype(np.int64) * page_size + t % page_size


# ---- DLPack (https://dmlc.github.io/dlpack/latest/c_api.html), with ctypes ----
_KDLCPU, _KDLCUDA = 1, 2
_DL_CODES = {"i": 0, "u": 1, "f": 2}		# kDLInt, kDLUInt, kDLFloat
_CU_STREAM_LEGACY = 1				# (CUstream)0x1


class _DLDevice(ctypes.Structure):
	_fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
	_fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
	_fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
		    ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
		    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


# void (*deleter)(DLManagedTensor *self); void (*PyCapsule_Destructor)(PyObject *)
_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
	_fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
		    ("deleter", _DL_DELETER)]


class _DLPackVersion(ctypes.Structure):
	_fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
	_fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
		    ("deleter", _DL_DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DL_READ_ONLY = 1 << 0		# DLPACK_FLAG_BITMASK_READ_ONLY


# Prototypes of our own over ctypes.pythonapi's functions, so that its
# shared function objects keep whatever argtypes others give them.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
				 _CAPSULE_DESTRUCTOR)(("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
	("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
	("PyCapsule_GetPointer", ctypes.pythonapi))
# The names of capsules not yet consumed (a consumer renames one it takes).
_DLTENSOR = b"dltensor"
_DLTENSOR_VERSIONED = b"dltensor_versioned"

# Exported tensors not yet deleted, by the DLManagedTensor's address: the
# struct, its shape and strides, and the array (which holds its owner).
_dl_live: Dict[int, Tuple[Any, ...]] = {}


def _dl_release(addr: Optional[int]) -> None:
	"""The DLManagedTensor's deleter: drop what the export kept alive (once)."""
	try:
		_dl_live.pop(addr, None)
	except BaseException:	# pragma: no cover - interpreter shutdown
		pass


def _dl_capsule_gone(cap: Optional[int]) -> None:
	"""The capsule's destructor: a capsule never consumed deletes its tensor."""
	try:
		for name in (_DLTENSOR, _DLTENSOR_VERSIONED):
			if cap and _capsule_is_valid(cap, name):
				_dl_release(_capsule_pointer(cap, name))
	except BaseException:	# pragma: no cover - interpreter shutdown
		pass


_dl_deleter = _DL_DELETER(_dl_release)
_dl_destructor = _CAPSULE_DESTRUCTOR(_dl_capsule_gone)
# C may call them until the process ends (a tensor alive at exit): never freed.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_dl_deleter))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_dl_destructor))


def dlpack_exports() -> int:
	"""How many DLPack tensors of :class:`DeviceArray` objects are alive
	(exported and not yet deleted by their consumer or capsule)."""
	return len(_dl_live)


def _stream_arg(stream: Any) -> Any:
	"""A CUstream (a void *) from an int or an object with ``cuda_stream``
	(torch.cuda.Stream): 0, the default stream as torch reports it, is
	CU_STREAM_LEGACY; 1 and 2 are CU_STREAM_LEGACY and CU_STREAM_PER_THREAD
	as DLPack numbers them, which the driver takes as they are."""
	stream = getattr(stream, "cuda_stream", stream)
	try:
		s = operator.index(stream)
	except TypeError:
		raise TypeError(f"a stream is an int (a CUstream) or has cuda_stream, "
				f"not {type(stream).__name__}") from None
	if not 0 <= s < 1 << 64:
		raise ValueError(f"stream {s} is not a CUstream")
	return ffi.cast("void *", s or _CU_STREAM_LEGACY)


def frames_arg(frames: Any, n: int) -> np.ndarray:
	"""@frames as a C-contiguous int32 array of exactly @n entries.

	Any integer array-like is taken (a copy when it is not int32 already:
	SGLang's values are int64); values outside int32 are a ValueError, a
	non-integer dtype a TypeError.
	"""
	arr = np.asarray(frames)
	if arr.dtype.kind not in "iu":
		raise TypeError(f"frames must be integers, not {arr.dtype}")
	if arr.ndim != 1 or arr.shape[0] != n:
		raise ValueError(f"frames must be 1-D with {n} entries (one a page), not shape "
				 f"{arr.shape}")
	if arr.dtype != np.int32:
		if n and (arr.min() < -(1 << 31) or arr.max() >= 1 << 31):
			raise ValueError("a frame is outside int32")
		arr = arr.astype(np.int32)
	return np.ascontiguousarray(arr)


def _i32p(arr: np.ndarray) -> Any:
	"""An int32 * over @arr (which must stay alive for the call)."""
	return ffi.cast("int32_t *", arr.ctypes.data) if arr.size else ffi.NULL


_FNODE_P = ffi.typeof("struct kvmm_fnode *")


class FrameNode(_Node):
	"""A tree node as Context.frames_match()/frames_insert() name it: a
	handle (the node and its id), equal and hashable by both, so an engine
	can use it as a dict key.  The root's handle is falsy-named: ``is_root``.
	The handle is kept inline (kvmm._radix.Node, which the SGLang radix
	cache's C methods fill); ``id``, ``is_root`` and ``_key()`` are Node's."""

	__slots__ = ("__weakref__",)

	def __init__(self, h: Any = None) -> None:
		if h is not None:
			self._h.node = h.node
			self._h.id = h.id

	@classmethod
	def _new(cls) -> "FrameNode":
		"""A root's handle for a C call to fill in (the hot paths' constructor)."""
		return cls()

	@property
	def _h(self) -> Any:
		"""The handle as a struct kvmm_fnode * for a cffi call: borrowed, valid
		while this node lives (use it within the expression that has the node)."""
		return ffi.cast(_FNODE_P, self._addr)

	def __eq__(self, other: object) -> bool:
		return isinstance(other, FrameNode) and self._key() == other._key()

	def __hash__(self) -> int:
		return hash(self._key())

	def __repr__(self) -> str:
		return "FrameNode(root)" if self.is_root else f"FrameNode(id={self.id})"


class DeviceArray:
	"""An array in GPU memory: a layer's K or V, or the page table's
	device mapping, described by ``__cuda_array_interface__`` and DLPack.

	CuPy, Numba and torch (``torch.as_tensor(x, device="cuda")``,
	``torch.from_dlpack(x)``) take it without a copy.  It keeps its
	context alive as a host view does, and so does every DLPack tensor
	made of it until its consumer deletes it.
	"""

	def __init__(self, hold: Any, shape: Tuple[int, ...], strides: Tuple[int, ...],
		     dtype: np.dtype, device: int, owner: Any = None, readonly: bool = False) -> None:
		self._hold = hold
		self._owner = owner
		self.shape, self.strides, self.dtype, self.device = shape, strides, dtype, device
		self.readonly = readonly

	@property
	def ptr(self) -> int:
		"""The device address of element 0."""
		return int(ffi.cast("uintptr_t", self._hold))

	@property
	def __cuda_array_interface__(self) -> Dict[str, Any]:
		return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
			"data": (self.ptr, self.readonly), "version": 3}

	def __dlpack_device__(self) -> Tuple[int, int]:
		return (_KDLCUDA, self.device)

	def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
		       dl_device: Optional[Tuple[int, int]] = None,
		       copy: Optional[bool] = None) -> Any:
		"""A DLPack capsule over this memory, no copy.

		DLPack 1.0 ("dltensor_versioned", a DLManagedTensorVersioned
		whose flags say read-only for the page table's mapping) when
		@max_version is (1, x) or later, as torch and numpy ask; else the
		legacy "dltensor" (a DLManagedTensor), which cannot say read-only:
		writing through it to the page table is the caller's error.
		@stream (CUDA's numbering: 1 the legacy default stream, 2 the
		per-thread one, else a CUstream; None or -1: none) is made to wait
		for kvmm's copies (:meth:`Context.stream_wait`) before the consumer
		uses the memory on it.  BufferError for @copy True (kvmm exports
		its memory, never a copy) or a @dl_device other than
		:meth:`__dlpack_device__`.
		"""
		dev = self.__dlpack_device__()
		if copy:
			raise BufferError("kvmm: a DeviceArray exports its memory, not a copy")
		if dl_device is not None and tuple(dl_device) != tuple(dev):
			raise BufferError(f"kvmm: the array is on DLPack device {dev}, not {dl_device}")
		if stream is not None and stream != -1 and dev[0] == _KDLCUDA:
			if stream == 0:
				raise ValueError("DLPack: stream 0 is ambiguous for CUDA; 1 is the "
						 "legacy default stream")
			wait = getattr(self._owner, "stream_wait", None)
			if wait is not None:
				wait(stream)
		return self._capsule(dev, max_version is not None and max_version[0] >= 1)

	def _capsule(self, dev: Tuple[int, int], versioned: bool) -> Any:
		"""Build the managed tensor and the capsule that owns it until consumed."""
		code = _DL_CODES.get(self.dtype.kind)
		size = self.dtype.itemsize
		if code is None:
			raise BufferError(f"kvmm: no DLPack type for dtype {self.dtype}")
		if any(s % size for s in self.strides):
			raise BufferError(f"kvmm: strides {self.strides} are not whole {self.dtype} elements")
		ndim = len(self.shape)
		shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
		strides = (ctypes.c_int64 * max(ndim, 1))(*(s // size for s in self.strides))
		if versioned:
			m: Any = _DLManagedTensorVersioned()
			m.version = _DLPackVersion(1, 0)
			m.flags = _DL_READ_ONLY if self.readonly else 0
			name = _DLTENSOR_VERSIONED
		else:
			m = _DLManagedTensor()
			name = _DLTENSOR
		t = m.dl_tensor
		t.data = self.ptr
		t.device = _DLDevice(dev[0], dev[1])
		t.ndim = ndim
		t.dtype = _DLDataType(code, size * 8, 1)
		t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
		t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
		t.byte_offset = 0
		addr = ctypes.addressof(m)
		m.manager_ctx = addr
		m.deleter = _dl_deleter
		_dl_live[addr] = (m, shape, strides, self)
		try:
			return _capsule_new(addr, name, _dl_destructor)
		except BaseException:
			_dl_live.pop(addr, None)
			raise


class ViewOwner:
	"""Memory that numpy views are handed out over, counted while they live.

	Each view holds a cffi object whose release (when the last array over
	it goes) drops the count and whose destructor keeps this owner alive,
	so the memory cannot be freed under a view.
	"""

	_live = 0

	def _view(self, addr: Any, nbytes: int, dtype: Any, shape: Tuple[int, ...],
		  strides: Optional[Tuple[int, ...]] = None, readonly: bool = False) -> np.ndarray:
		"""Return an array over @nbytes at @addr that keeps this owner alive."""
		arr = np.ndarray(shape, dtype=dtype, buffer=ffi.buffer(self._hold(addr), nbytes),
				 strides=strides)
		if readonly:
			arr.flags.writeable = False
		return arr

	def _hold(self, addr: int) -> Any:
		"""A cdata at @addr whose life counts as a view of this owner."""
		self._live += 1
		return ffi.gc(ffi.cast("char *", addr), self._view_gone)

	def _view_gone(self, _owner: Any) -> None:
		self._live -= 1

	def _refuse_if_viewed(self, what: str) -> None:
		"""Raise kvmm.Busy while a view of this owner's memory is alive."""
		if self._live:
			raise Busy(errno.EBUSY, f"kvmm: {self._live} view(s) of the {what}'s memory "
				   "are alive; drop them before close()")

	@property
	def live_views(self) -> int:
		"""How many views of this memory (and rings over it) are alive."""
		return self._live

	def _layer_views(self, k: int, v: int, slot_bytes: int, nbytes: int, dtype: Any,
			 cell: Tuple[int, ...], device: Optional[int] = None) -> Tuple[Any, Any]:
		"""(K, V) arrays of a layer: (slots,) + @cell of @dtype; V None when @v is 0.

		Host memory gives numpy arrays; with @device (a CUDA ordinal),
		:class:`DeviceArray` objects.
		"""
		dt = np.dtype(dtype)
		slots = nbytes // slot_bytes
		inner = tuple(int(np.prod(cell[i + 1:], dtype=np.int64)) * dt.itemsize
			      for i in range(len(cell)))
		shape, strides = (slots,) + tuple(cell), (slot_bytes,) + inner
		if device is not None:
			views = [DeviceArray(self._hold(a), shape, strides, dt, device, owner=self)
				 for a in (k, v) if a]
		else:
			views = [self._view(a, nbytes, dt, shape, strides) for a in (k, v) if a]
		return views[0], (views[1] if v else None)


class _InCall:
	"""A Context method's C calls, counted as one (Context._in_call())."""

	def __init__(self, ctx: "Context") -> None:
		self.ctx = ctx

	__slots__ = ("ctx",)

	def __enter__(self) -> Any:
		ctx = self.ctx
		ctx._mu.acquire()
		if ctx._ptr is None:
			ctx._mu.release()
			raise InvalidArgument(errno.EINVAL, "kvmm: the context is closed")
		return ctx._ptr

	def __exit__(self, *exc: Any) -> None:
		self.ctx._mu.release()


class _KvEvents:
	"""A Context's publisher of vLLM KV events (python/csrc/kvevents.c):
	a thread that reads the context's events under its lock and
	publishes them, and answers replay requests, outside it."""

	HASHES = ("sha256_cbor", "xxhash_cbor")

	def __init__(self, ctx: "Context", kv_events: str, kv_events_replay: Optional[str] = None,
		     kv_events_topic: Optional[str] = None, kv_events_hash: str = "sha256_cbor",
		     kv_events_seed: Optional[str] = None, kv_events_interval_ms: int = 2) -> None:
		if kv_events_hash not in self.HASHES:
			raise ValueError(f"kv_events_hash is one of {self.HASHES}, not {kv_events_hash!r}")
		if kv_events_interval_ms < 0:
			raise ValueError("kv_events_interval_ms is not negative")
		self._ctx = ctx
		self._interval = int(kv_events_interval_ms)
		self._replay = kv_events_replay is not None
		keep = [ffi.new("char[]", v.encode()) if v is not None else ffi.NULL
			for v in (kv_events, kv_events_replay, kv_events_topic, kv_events_seed)]
		out = ffi.new("struct kvev **")
		with ctx._mu:
			ctx._check(lib.kvmm_py_kvev_create(ctx._c(), keep[0], keep[1], keep[2],
							   self.HASHES.index(kv_events_hash), keep[3], out),
				   "kv_events")
		self._ev = out[0]
		self._buf = ffi.new("uint64_t[]", lib.KVMM_PY_KVEV_BUF // 8)
		self._cursor = ffi.new("uint64_t *")
		self._stop = threading.Event()
		self._stopping = threading.Lock()
		self._err = 0
		self._thread = threading.Thread(target=self._run, name="kvmm-kv-events", daemon=True)
		self._thread.start()

	def _drain(self) -> int:
		"""Publish every event read so far.  Return: 0 or -errno."""
		while True:
			with self._ctx._mu:
				if self._ctx._ptr is None:
					return 0
				res = lib.kvmm_py_kvev_read(self._ctx._ptr, self._cursor, self._buf,
							    lib.KVMM_PY_KVEV_BUF)
			if res <= 0:
				return res
			ret = lib.kvmm_py_kvev_publish(self._ev, self._buf)
			if ret:
				return ret

	def _wait(self) -> int:
		"""Wait one interval, answering replay requests meanwhile, in
		pieces short enough that stop() is not kept waiting."""
		end = time.monotonic() + self._interval / 1000
		while not self._stop.is_set():
			left = end - time.monotonic()
			if left <= 0:
				return 0
			if not self._replay:
				self._stop.wait(left)
				continue
			ret = lib.kvmm_py_kvev_serve(self._ev, int(min(left * 1000, 50)))
			if ret < 0:
				return ret
		return 0

	def _run(self) -> None:
		while not self._stop.is_set():
			ret = self._drain()
			if not ret:
				ret = self._wait()
			if ret < 0 and not self._err:
				self._err = ret

	def stats(self) -> Dict[str, int]:
		if self._ev is None:
			return self._last
		st = ffi.new("uint64_t[6]")
		lib.kvmm_py_kvev_stats(self._ev, st)
		out = dict(zip(("messages", "stored", "removed", "lost", "unnamed", "replays"), st))
		out["error"] = self._err
		return out

	def stop(self) -> None:
		"""Publish what is left, stop the thread, close the sockets (once,
		whichever of two closing threads comes first)."""
		with self._stopping:
			if self._ev is None:
				return
			self._stop.set()
			self._thread.join()
			self._drain()
			self._last = self.stats()
			lib.kvmm_py_kvev_destroy(self._ev)
			self._ev = None


_serials = itertools.count(1)


class Context(ViewOwner):
	"""A kvmm context: one KV pool, its page table, prefix cache and tiers.

	Keyword arguments are the fields of struct kvmm_params (model geometry
	``layers``, ``kv_heads``, ``head_dim``, ``latent_dim``, ``dtype_bytes``,
	``attn`` "mha"/"mla"; ``page_size``, ``max_seqs``, ``max_seq_len``,
	``nr_pages`` or SGLang's ``mem_fraction`` with ``mem_total`` and
	``mem_avail``; watermarks, ``evict_policy``, ``host_pages``,
	``nvme_pages``, ``nvme_path``, ``nvme_flags``, ``model_id``, ``remote``,
	``remote_salt``, ``remote_timeout_ms``, ``remote_write`` "none",
	"commit" or "demote" ...);
	anything not given keeps the library's default (kvmm_params_init()).
	``shareable=True`` backs the mock pool with memfds.  Use it as a
	context manager, or call :meth:`close`.

	``kv_events="tcp://127.0.0.1:5557"`` publishes the context's cache
	events as vLLM's KV events on that ZMQ endpoint, from a thread that
	reads them under the context's lock (as ``kvmmd --kv-events``):
	``kv_events_replay`` (a ROUTER endpoint for missed messages),
	``kv_events_topic``, ``kv_events_hash`` ("sha256_cbor" or
	"xxhash_cbor"), ``kv_events_seed`` and ``kv_events_interval_ms``
	(how often it reads, default 2) as kvmmd's options of those names.
	"""

	def __init__(self, **params: Any) -> None:
		self._ptr = None
		# what this context's FrameNodes carry (_owner): a node of another
		# context, or of a closed one, is refused, never handed to the library
		self._serial = next(_serials)
		self._live = 0
		self._kvev = None
		kv_events = {k: params.pop(k) for k in list(params) if k.startswith("kv_events")}
		# The C context is one thread's at a time: every call holds _mu (a
		# reentrant lock: a log handler may call in); close() waits for
		# another thread's call and refuses inside one of its own.
		self._mu = threading.RLock()
		self._log_lines = _LogLines()
		self._log_handle = ffi.new_handle(self._log_lines)
		p, keep = self._params(params)
		out = ffi.new("struct kvmm_ctx **")
		self._check(lib.kvmm_create(p, out), "kvmm_create", params.get("nvme_path"))
		self._ptr = out[0]
		self._keep = keep
		self.model = {f: getattr(p.model, f) for f in _MODEL_FIELDS}
		self.model["attn"] = "mla" if p.model.attn == lib.KVMM_ATTN_MLA else "mha"
		self.page_size = lib.kvmm_page_size(self._ptr)
		self.max_seq_len = p.max_seq_len
		self._cuda_device = (params.get("cuda_device", 0)
				     if params.get("backend") == "cuda" else None)
		table = ffi.new("struct kvmm_table *")
		lib.kvmm_seq_table(self._ptr, table)
		self._table = np.frombuffer(ffi.buffer(table.base, 4 * table.rows * table.stride),
					    dtype=np.int32).reshape(table.rows, table.stride)
		self._table.flags.writeable = False
		if kv_events:
			try:
				self._kvev = _KvEvents(self, **kv_events)
			except BaseException:
				self.close(0)
				raise

	@property
	def kv_events_stats(self) -> Dict[str, int]:
		"""What the KV events publisher did (kv_events=): messages (the next
		sequence number), stored, removed, lost, unnamed, replays, and
		error, the first -errno its thread met (0: none)."""
		if self._kvev is None:
			raise InvalidArgument(errno.EINVAL, "kvmm: the context publishes no KV events")
		return self._kvev.stats()

	def _params(self, params: Dict[str, Any]):
		"""Build struct kvmm_params from keyword arguments over the defaults."""
		p = ffi.new("struct kvmm_params *")
		lib.kvmm_params_init(p)
		keep = [p]
		for key, val in params.items():
			if val is None and key in _IN_EFFECT:
				continue	# not given: the library's default (default_params())
			if key in _MODEL_FIELDS:
				setattr(p.model, key, val)
			elif key == "attn":
				p.model.attn = _ATTN[val]
			elif key == "frames":
				if val not in _FRAMES:
					raise ValueError(f"frames is 'kvmm' or 'engine', not {val!r}")
				p.frames = _FRAMES[val]
			elif key == "remote_write":
				if val not in _REMOTE_WRITE:
					raise ValueError("remote_write is 'none', 'commit' or 'demote', "
							 f"not {val!r}")
				p.remote_write = _REMOTE_WRITE[val]
			elif key in _STR_FIELDS:
				if val is not None:
					keep.append(ffi.new("char[]", str(val).encode()))
					setattr(p, key, keep[-1])
			elif key in _INT_FIELDS:
				setattr(p, key, val)
			elif key not in ("shareable", "cuda_device", "cuda_driver"):
				raise TypeError(f"Context() got an unknown parameter {key!r}")
		if params.get("shareable"):
			keep.append(ffi.new("struct kvmm_mock_arg *", {"shareable": True}))
			p.backend_arg = keep[-1]
		if params.get("backend") == "cuda":
			driver = params.get("cuda_driver")
			keep.append(ffi.new("char[]", driver.encode()) if driver else ffi.NULL)
			keep.append(ffi.new("struct kvmm_cuda_arg *",
					    {"device": params.get("cuda_device", 0), "driver": keep[-1]}))
			p.backend_arg = keep[-1]
		p.log = lib.kvmm_py_log
		p.log_priv = self._log_handle
		return p, keep

	def _check(self, ret: int, call: str, filename: Optional[str] = None) -> int:
		"""Return @ret, or raise the exception for a negative errno."""
		if ret < 0:
			raise make_error(ret, call, self._log_lines.take(), filename)
		return ret

	def _c(self):
		"""Return the C context, or raise if it is closed (only for a call
		that cannot race close(): the context's own constructor's)."""
		ptr = self._ptr
		if ptr is None:
			raise InvalidArgument(errno.EINVAL, "kvmm: the context is closed")
		return ptr

	def _raw(self, fn: Any, *args: Any) -> Any:
		"""fn(the C context, *args), as the context's one call at a time:
		another thread's call waits for it, and close() in another thread
		waits instead of freeing the context under it."""
		with self._mu:
			ptr = self._ptr
			if ptr is None:
				raise InvalidArgument(errno.EINVAL, "kvmm: the context is closed")
			return fn(ptr, *args)

	def _call(self, fn: Any, call: str, *args: Any) -> int:
		"""_raw(), raising the exception for a negative errno (see _check());
		the same lines, not a call of it: this is every method's hot path."""
		with self._mu:
			ptr = self._ptr
			if ptr is None:
				raise InvalidArgument(errno.EINVAL, "kvmm: the context is closed")
			ret = fn(ptr, *args)
		if ret < 0:
			raise make_error(ret, call, self._log_lines.take())
		return ret

	def _in_call(self) -> "_InCall":
		"""``with ctx._in_call() as ptr:`` for a method that makes several C
		calls or hands out a view: one call, as _raw() makes it."""
		return _InCall(self)

	def keyed(self, model_id: str, value_bytes: int, ns: int = 0) -> Any:
		"""The keyed page store's space of @value_bytes-byte values of model
		@model_id in namespace @ns (:class:`kvmm.KeyedSpace`); the context
		needs a host tier (``host_pages``)."""
		from ._keyed import KeyedSpace
		return KeyedSpace(self, model_id, value_bytes, ns)

	# ---- lifetime ----
	def close(self, flush_ms: int = 5000) -> None:
		"""Destroy the context (kvmm_destroy()); its sequences go with it.

		With an NVMe tier, :meth:`flush` runs first for at most @flush_ms
		milliseconds (0: no flush; best effort, never an error), so that a
		context opened later on the same file finds the cache again.
		Raises :class:`kvmm.Busy` while a view of its memory (or a ring) is
		alive, or when called from inside a call on it (a log handler's).
		A call another thread is inside finishes first; a call after
		close() raises InvalidArgument.  Closing twice is a no-op.
		"""
		if self._mu._is_owned():
			raise Busy(errno.EBUSY, "kvmm: close() from inside a call on the context")
		if self._kvev is not None and self._ptr is not None:
			self._refuse_if_viewed("context")
			self._kvev.stop()	# publishes what is left first
		self._mu.acquire()	# another thread's call ends first
		try:
			if self._ptr is None:
				return
			self._refuse_if_viewed("context")
			if flush_ms:	# best effort: a close never fails for it
				lib.kvmm_flush(self._ptr, flush_ms, ffi.NULL)
			ptr, self._ptr = self._ptr, None
			self._table = None
			lib.kvmm_destroy(ptr)
		finally:
			self._mu.release()

	@property
	def closed(self) -> bool:
		"""Whether :meth:`close` ran."""
		return self._ptr is None

	def __enter__(self) -> "Context":
		return self

	def __exit__(self, exc_type: Any, *exc: Any) -> None:
		if exc_type is not None and self._live:
			return	# keep the error; the last view's release frees the context
		self.close()

	def __del__(self) -> None:
		if getattr(self, "_ptr", None) is not None and not self._live:
			lib.kvmm_destroy(self._ptr)
			self._ptr = None

	# ---- sequences ----
	def open(self, ns: int = 0) -> "Sequence":
		"""Open a sequence (a page-table row) in namespace @ns."""
		out = ffi.new("uint32_t *")
		self._call(lib.kvmm_seq_open, "kvmm_seq_open", ns, out)
		return Sequence(self, out[0])

	def extend_batch(self, seqs: Iterable["Sequence"], counts: Iterable[int],
			 flags: int = 0) -> None:
		"""Extend each of @seqs by its entry of @counts, all or nothing."""
		ids = [s._id_checked(self) for s in seqs]
		counts = list(counts)
		if any(n < 0 for n in counts):
			raise ValueError("extend_batch: a negative count")
		if len(ids) != len(counts):
			raise ValueError("extend_batch: one count per sequence")
		self._call(lib.kvmm_seq_extend_batch, "kvmm_seq_extend_batch",
			   ffi.new("uint32_t[]", ids), ffi.new("uint32_t[]", counts), len(ids), flags)

	def ring(self, sq_entries: int = 64, buf_size: int = 1 << 20) -> Any:
		"""An in-process command ring over this context (kvmm_ring_init()).

		It counts as a view: close() refuses while it is open.
		"""
		from ._ring import Ring

		ring = Ring(owner=self)
		p = ffi.new("struct kvmm_ring_params *", {"sq_entries": sq_entries,
							  "buf_size": buf_size})
		with self._in_call() as ptr:
			return ring._start(lib.kvmm_ring_init(ptr, p, ring._r), "kvmm_ring_init",
					   buf_size)

	# ---- prefixes ----
	def lookup(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> int:
		"""Return how many tokens of the prefix are cached on the device."""
		buf, n = tokens_arg(tokens, n)
		return self._call(lib.kvmm_prefix_lookup, "kvmm_prefix_lookup", ns, buf, n)

	def remote_push(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> int:
		"""Write the cached pages of the prompt to the remote tier (a context
		made with ``remote=``): the tokens the cluster holds from the start
		afterwards.  After a commit, this is the tier's write-through."""
		buf, n = tokens_arg(tokens, n)
		return self._call(lib.kvmm_remote_push, "kvmm_remote_push", ns, buf, n)

	def remote_fetch(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> int:
		"""Bring the prompt's pages past what the tree holds from the remote
		tier to the host tier (a leaf the next match finds, promote brings
		up): the tokens fetched."""
		buf, n = tokens_arg(tokens, n)
		return self._call(lib.kvmm_remote_fetch, "kvmm_remote_fetch", ns, buf, n)

	def prefetch(self, tokens: Any, n: Optional[int] = None, ns: int = 0, budget: int = 0,
		     reclaim: bool = False) -> int:
		"""Bring the part of a queued prompt's cached prefix that is on the
		host or NVMe tier up to the device before it is admitted
		(kvmm_prefetch()), so that its match maps it with no promote.  At
		most @budget pages (0: as many as are free above the low watermark;
		nothing is evicted); with @reclaim, @budget pages taken as an
		allocation would, the coldest unlocked cached pages demoted for
		them.  Waits for the copy; returns the pages moved."""
		buf, n = tokens_arg(tokens, n)
		return self._call(lib.kvmm_prefetch, "kvmm_prefetch", ns, buf, n, budget,
				  lib.KVMM_PREFETCH_RECLAIM if reclaim else 0)

	def tiers(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> Tuple[int, ...]:
		"""Return the tokens of the prefix cached on each tier (device, host, NVMe)."""
		buf, n = tokens_arg(tokens, n)
		hits = ffi.new("struct kvmm_tier_hits *")
		self._call(lib.kvmm_prefix_tiers, "kvmm_prefix_tiers", ns, buf, n, hits)
		return tuple(hits.tokens[t] for t in range(lib.KVMM_NR_TIERS))

	def pin(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> None:
		"""Pin a cached prefix: never evicted until unpinned (pins nest)."""
		buf, n = tokens_arg(tokens, n)
		self._call(lib.kvmm_prefix_pin, "kvmm_prefix_pin", ns, buf, n)

	def unpin(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> None:
		"""Drop one pin of a prefix."""
		buf, n = tokens_arg(tokens, n)
		self._call(lib.kvmm_prefix_unpin, "kvmm_prefix_unpin", ns, buf, n)

	def set_priority(self, tokens: Any, prio: int, n: Optional[int] = None,
			 ns: int = 0) -> None:
		"""Set a cached prefix's eviction priority (0 is reclaimed first)."""
		buf, n = tokens_arg(tokens, n)
		self._call(lib.kvmm_prefix_set_prio, "kvmm_prefix_set_prio", ns, buf, n, prio)

	# ---- engine-owned frames (Context(frames="engine")) ----
	def frames_match(self, tokens: Any, ns: int = 0) -> Tuple[int, np.ndarray, "FrameNode"]:
		"""The longest cached prefix of @tokens (whole pages).

		Returns (tokens matched, their pages' frames (int32), the node the
		match ends on: split there; the root's when nothing matched).  The
		path is stamped as used; nothing is locked.
		"""
		buf, n = tokens_arg(tokens)
		frames = np.empty(n // self.page_size, dtype=np.int32)
		last = ffi.new("struct kvmm_fnode *")
		got = self._call(lib.kvmm_frames_match, "kvmm_frames_match", ns, buf, n, _i32p(frames),
				 last)
		return got, frames[:got // self.page_size], self._frame_node(last)

	def _frame_node(self, h: Any) -> "FrameNode":
		"""A FrameNode of the handle @h, one of this context's."""
		node = FrameNode(h)
		if h.node != ffi.NULL:
			node._owner = self._serial
		return node

	def _frame_h(self, node: Any, call: str) -> Any:
		"""@node's handle for a call of this context's: a FrameNode of
		another context (or of a closed one: its memory may be a node of
		this one's now) raises Error (ESTALE), as a node that is gone."""
		if not isinstance(node, FrameNode):
			raise TypeError(f"{call}() takes a FrameNode, not {type(node).__name__}")
		if node._owner != self._serial and not node.is_root:
			raise make_error(-errno.ESTALE, "kvmm_" + call)
		return node._h

	def frames_insert(self, tokens: Any, frames: Any, ns: int = 0) -> Tuple[int, "FrameNode"]:
		"""Cache @tokens (a whole number of pages) whose KV is in @frames, the
		engine's frame of each page.

		Returns (tokens the tree had already, the node the key ends on):
		the engine's frames for those tokens are duplicates, its own to
		free; the rest are the tree's until frames_evict() hands them back.
		Raises Busy for a frame the tree holds or one named twice, with
		nothing changed.
		"""
		buf, n = tokens_arg(tokens)
		fr = frames_arg(frames, n // self.page_size)
		last = ffi.new("struct kvmm_fnode *")
		had = self._call(lib.kvmm_frames_insert, "kvmm_frames_insert", ns, buf, n, _i32p(fr),
				 last)
		return had, self._frame_node(last)

	def frames_extend(self, tokens: Any, frames: Any, node: "FrameNode", node_len: int,
			  split: int = 0, inserted_len: int = 0,
			  ns: int = 0) -> Tuple[int, np.ndarray, "FrameNode"]:
		"""frames_insert() of @tokens whose first @node_len are the path to
		@node (a node the caller holds locked), without reading those: with
		frames_insert() of the first @split tokens too (a split, 0 for none)
		and the key's path stamped as frames_match() stamps it.  @frames
		holds the engine's frame of each page of @tokens (those of the first
		@node_len tokens are not read).  A node of the path counts a hit
		(the slru policy's) only if it ends past @inserted_len, the tokens
		the request inserted before, as SGLang counts them.

		Returns (tokens the tree had already, the tree's frame of each page
		of the key past @node_len as int32, the node the key ends on).
		Raises Error (EXDEV) when @node's path is not @node_len tokens of
		namespace @ns, Error (ESTALE) for a node that was evicted, Busy as
		frames_insert(); nothing changed on error.
		"""
		h = self._frame_h(node, "frames_extend")
		buf, n = tokens_arg(tokens)
		fr = frames_arg(frames, n // self.page_size).copy()
		last = ffi.new("struct kvmm_fnode *")
		had = self._call(lib.kvmm_frames_extend, "kvmm_frames_extend", ns, buf, n, _i32p(fr),
				 h, node_len, split, inserted_len, last)
		return had, fr[node_len // self.page_size:], self._frame_node(last)

	def frames_lock(self, node: "FrameNode", delta: int = 1) -> int:
		"""Lock (+1) or unlock (-1) the path to @node; return the tokens that
		moved between evictable and protected.  A node that was evicted
		raises Error (ESTALE); unlocking an unlocked one InvalidArgument."""
		return self._call(lib.kvmm_frames_lock, "kvmm_frames_lock",
				  self._frame_h(node, "frames_lock"), delta)

	def frames_evict(self, nr_pages: int, max_pages: Optional[int] = None) -> np.ndarray:
		"""Evict whole unlocked leaves, least recently used first, until
		@nr_pages are out (never more than @max_pages; by default room for
		whatever that takes); return their frames (int32), the engine's again."""
		if max_pages is None:
			# past @nr_pages only the last leaf's pages, at most a sequence's:
			# no need for room for the whole evictable tree on every call
			room = min(self.frames_sizes()[0] // self.page_size,
				   nr_pages + self.max_seq_len // self.page_size)
		else:
			room = max_pages
		out = np.empty(max(room, 0), dtype=np.int32)
		got = self._call(lib.kvmm_frames_evict, "kvmm_frames_evict", nr_pages, _i32p(out),
				 len(out))
		return out[:got]

	def frames_path(self, node: "FrameNode") -> np.ndarray:
		"""The frames (int32, a page each) of the path from the root to
		@node; empty for the root.  A node that was evicted raises Error
		(ESTALE)."""
		h = self._frame_h(node, "frames_path")
		room = max(self.max_seq_len // self.page_size, 1)
		out = np.empty(room, dtype=np.int32)
		got = self._call(lib.kvmm_frames_path, "kvmm_frames_path", h, _i32p(out), room)
		return out[:got]

	def frames_sizes(self) -> Tuple[int, int]:
		"""(evictable, protected) tokens of the tree."""
		ev = ffi.new("uint64_t *")
		pr = ffi.new("uint64_t *")
		self._call(lib.kvmm_frames_sizes, "kvmm_frames_sizes", ev, pr)
		return int(ev[0]), int(pr[0])

	def frames_cached(self) -> np.ndarray:
		"""The frames the tree holds (int32, increasing): a debugging walk
		over the pool's frames."""
		n = self._check(lib.kvmm_frames_cached(self._c(), ffi.NULL, 0), "kvmm_frames_cached")
		out = np.empty(n, dtype=np.int32)
		got = self._check(lib.kvmm_frames_cached(self._c(), _i32p(out), n),
				  "kvmm_frames_cached")
		return out[:min(got, n)]

	# ---- reclaim and tunables ----
	def reclaim(self, nr_pages: int) -> int:
		"""Evict at least @nr_pages pages (whole leaves); return the pages freed."""
		return self._call(lib.kvmm_reclaim, "kvmm_reclaim", nr_pages)

	def drop_caches(self) -> int:
		"""Evict everything evictable; return the device pages freed."""
		return self._call(lib.kvmm_drop_caches, "kvmm_drop_caches")

	def drop_caches_tiers(self, tiers: Iterable[str] = ("device", "host", "nvme")) -> Dict[str, int]:
		"""Evict what is evictable on @tiers only ("device", "host", "nvme"):
		a node with something below it on another tier stays.  Return the
		pages freed on each tier (kvmm_drop_caches_tiers())."""
		names = ("device", "host", "nvme")
		mask = 0
		for t in tiers:
			if t not in names:
				raise ValueError(f"drop_caches_tiers: unknown tier {t!r}")
			mask |= 1 << names.index(t)
		freed = ffi.new("uint64_t[]", lib.KVMM_NR_TIERS)
		self._call(lib.kvmm_drop_caches_tiers, "kvmm_drop_caches_tiers", mask, freed)
		return {n: int(freed[i]) for i, n in enumerate(names)}

	def sync(self) -> None:
		"""Wait for the demotions background reclaim has in flight, and settle
		them: every page it took is then on its new tier.  Returns at once
		without an NVMe tier."""
		self._call(lib.kvmm_sync, "kvmm_sync")

	def flush(self, timeout_ms: int = 0) -> FlushInfo:
		"""Write every cached page that is not on the NVMe tier to its file,
		parents first, for at most @timeout_ms milliseconds (0: no limit), so
		that a restart on the same file recovers the whole cache; the tree
		does not change (kvmm_flush()).  Raises without an NVMe tier."""
		info = ffi.new("struct kvmm_flush_info *")
		self._call(lib.kvmm_flush, "kvmm_flush", timeout_ms, info)
		return FlushInfo(int(info.pages), int(info.left), info.ns / 1e9)

	def set_watermarks(self, min: int, low: int, high: int) -> None:
		"""Set the reclaim watermarks, in pages."""
		self._call(lib.kvmm_set_watermarks, "kvmm_set_watermarks", min, low, high)

	@property
	def evict_policy(self) -> str:
		"""The eviction policy's name ("lru", "slru"); assignable."""
		with self._in_call() as ptr:
			return ffi.string(lib.kvmm_evict_policy(ptr)).decode()

	@evict_policy.setter
	def evict_policy(self, name: str) -> None:
		self._call(lib.kvmm_set_evict_policy, "kvmm_set_evict_policy", name.encode())

	def resize(self, nr_pages: int) -> int:
		"""Grow or shrink the device pool; return the pages migrated."""
		return self._call(lib.kvmm_resize, "kvmm_resize", nr_pages)

	@property
	def nr_pages(self) -> int:
		"""Pages in the device pool now."""
		return self._raw(lib.kvmm_nr_pages)

	# ---- observing ----
	def stats(self) -> Any:
		"""Return a :class:`kvmm.Stats` snapshot."""
		vals = ffi.new("uint64_t[]", len(STAT_NAMES))
		self._call(lib.kvmm_stats, "kvmm_stats", vals, len(STAT_NAMES))
		return Stats(*vals)

	def check(self) -> None:
		"""Verify every invariant of the context (kvmm_check())."""
		self._call(lib.kvmm_check, "kvmm_check")

	def page_state(self, pfn: int) -> int:
		"""Return a page's KVMM_PAGE_* state."""
		return self._call(lib.kvmm_page_state, "kvmm_page_state", pfn)

	def backend_info(self) -> str:
		"""One line on the backend."""
		buf = ffi.new("char[]", 256)
		self._call(lib.kvmm_backend_info, "kvmm_backend_info", buf, 256)
		return ffi.string(buf).decode()

	# ---- views of the library's memory ----
	def page_table(self, device: bool = False) -> Any:
		"""The whole page table, (max_seqs, pages per row) int32, read-only, in place.

		Entry [s, i] is the page frame of sequence s's page i, -1 where none.
		With @device, where the backend's kernels read it
		(kvmm_page_table_dev()): on cuda a read-only :class:`DeviceArray`
		over the host table mapped into the GPU (every change kvmm makes is
		seen there, no copy); on host backends the same as without.
		"""
		with self._in_call() as ptr:
			t = self._table
			if device:
				out = ffi.new("void **")
				ret = lib.kvmm_page_table_dev(ptr, out)
				if self._cuda_device is not None or ret != -errno.EOPNOTSUPP:
					self._check(ret, "kvmm_page_table_dev")
					addr = int(ffi.cast("uintptr_t", out[0]))
					if self._cuda_device is not None:
						return DeviceArray(self._hold(addr), t.shape, t.strides, t.dtype,
								   self._cuda_device, owner=self, readonly=True)
					return self._view(addr, t.nbytes, np.int32, t.shape, readonly=True)
			return self._view(t.ctypes.data, t.nbytes, np.int32, t.shape, readonly=True)

	def kv_indices(self, seqs: Iterable[Any], indptr: Any, indices: Any, last_page_len: Any,
		       stream: Any = None) -> int:
		"""FlashInfer's paged-KV arrays for a batch (kvmm_kv_indices()); the pages written.

		@seqs are open :class:`Sequence` objects (or their ids), each taken
		at its whole length.  Out, in the backend's memory (host: numpy
		int32 arrays or torch CPU tensors; cuda: int32 arrays with
		``__cuda_array_interface__``, e.g. torch CUDA tensors), 1-D and
		contiguous: @indptr (len(seqs) + 1 entries: sequence i's pages are
		indices[indptr[i]:indptr[i + 1]]), @indices (the page frames, as
		many as it has room for) and @last_page_len (len(seqs) entries:
		tokens in each last page, 1..page_size, 0 for an empty sequence).

		@stream (cuda: a CUstream as an int, or a torch.cuda.Stream; 0 is
		the legacy default stream): the build is queued on it and the call
		returns at once; the sequences must not change until the stream
		has run it.  None: the arrays are written when the call returns,
		so they must not be in use by queued GPU work.  Host backends
		ignore it.

		TypeError for an array of another dtype or in the wrong memory,
		ValueError for one too short, strided or read-only, before C runs;
		kvmm.NoSpace when @indices has too little room,
		kvmm.InvalidArgument for a sequence closed or named twice.
		"""
		self._c()
		ids = []
		for s in seqs:
			if isinstance(s, Sequence):
				ids.append(s._id_checked(self))
				continue
			i = operator.index(s)
			if not 0 <= i < 1 << 32:
				raise ValueError(f"kv_indices: sequence id {i} is out of range")
			ids.append(i)
		out = _host_int32_out if self._cuda_device is None else _device_int32_out
		ip, _ = out(indptr, "indptr", len(ids) + 1)
		ix, room = out(indices, "indices", 0)
		lp, _ = out(last_page_len, "last_page_len", len(ids))
		seq_arr = ffi.new("uint32_t[]", ids) if ids else ffi.NULL
		b = ffi.new("struct kvmm_kv_batch *", {"seqs": seq_arr, "count": len(ids),
						      "max_indices": min(room, 0xffffffff),
						      "indptr": ip, "indices": ix,
						      "last_page_len": lp})
		if stream is not None and self._cuda_device is not None:
			b.stream = _stream_arg(stream)
		return self._call(lib.kvmm_kv_indices, "kvmm_kv_indices", b)

	def stream_wait(self, stream: Any) -> None:
		"""Make work queued on @stream from now on wait for every copy kvmm
		has issued (kvmm_stream_wait()): demotions, promotions and KV
		copies, before an engine's kernels read the pool.

		@stream: a CUstream as an int or a torch.cuda.Stream (0, torch's
		default stream, and 1 are the legacy default stream, 2 the
		per-thread one).  Host backends have nothing to wait for: a no-op.
		"""
		ret = self._raw(lib.kvmm_stream_wait, _stream_arg(stream))
		if ret != -errno.EOPNOTSUPP:
			self._check(ret, "kvmm_stream_wait")

	def kv_layer_info(self, layer: int) -> Tuple[int, int, int, int]:
		"""Return (k address, v address or 0, slot bytes, bytes) of a layer."""
		with self._in_call() as ptr:
			return self._kv_layer_info(ptr, layer)

	def _kv_layer_info(self, ptr: Any, layer: int) -> Tuple[int, int, int, int]:
		"""kv_layer_info() within a call (_in_call()) that has @ptr."""
		out = ffi.new("struct kvmm_kv_layer *")
		self._check(lib.kvmm_kv_layer(ptr, layer, out), "kvmm_kv_layer")
		return (int(ffi.cast("uintptr_t", out.k)), int(ffi.cast("uintptr_t", out.v)),
			out.slot_bytes, out.bytes)

	def kv(self, layer: int, dtype: Any = None) -> Tuple[np.ndarray, Optional[np.ndarray]]:
		"""Return (K, V) of @layer as arrays over the pool, in place.

		MHA: each is (slots, kv_heads, head_dim); MLA: K is (slots,
		latent_dim), V is None.  Slot s holds the KV of the token the page
		table maps there.  @dtype defaults by dtype_bytes (2: float16,
		4: float32).  Host backends (mock) give writable numpy arrays; the
		cuda backend gives :class:`DeviceArray` objects
		(``__cuda_array_interface__``).
		"""
		with self._in_call() as ptr:	# no close() between the address and the views
			k, v, slot_bytes, nbytes = self._kv_layer_info(ptr, layer)
			m = self.model
			dt = np.dtype(dtype or _DTYPES[m["dtype_bytes"]])
			if dt.itemsize != m["dtype_bytes"]:
				raise TypeError(f"kv(): dtype {dt} is not {m['dtype_bytes']} bytes")
			dev = self._cuda_device
			if m["attn"] == "mla":
				return self._layer_views(k, 0, slot_bytes, nbytes, dt, (m["latent_dim"],), dev)
			return self._layer_views(k, v, slot_bytes, nbytes, dt, (m["kv_heads"], m["head_dim"]),
						 dev)


class Sequence:
	"""An open sequence: one row of the page table (kvmm_seq_open())."""

	__slots__ = ("ctx", "id", "_open")

	def __init__(self, ctx: Context, seq_id: int) -> None:
		self.ctx = ctx
		self.id = seq_id
		self._open = True

	def _id_checked(self, ctx: Optional[Context] = None) -> int:
		if not self._open or self.ctx._ptr is None:
			raise InvalidArgument(errno.EINVAL, f"kvmm: sequence {self.id} is closed")
		if ctx is not None and ctx is not self.ctx:
			raise ValueError("kvmm: the sequence belongs to another context")
		return self.id

	def _tok_call(self, fn: Any, name: str, tokens: Any, n: Optional[int]) -> int:
		seq = self._id_checked()
		buf, n = tokens_arg(tokens, n)
		return self.ctx._call(fn, name, seq, buf, n)

	def _commit_call(self, fn: Any, name: str, tokens: Any, n: Optional[int]) -> None:
		"""close/retract: commit tokens[:n] first, or nothing when @tokens is None."""
		if tokens is None:
			self.ctx._call(fn, name, self._id_checked(), ffi.NULL, 0)
		else:
			self._tok_call(fn, name, tokens, n)

	def match(self, tokens: Any, n: Optional[int] = None) -> int:
		"""Map the longest cached prefix of tokens[:n] (whole pages); return its length."""
		return self._tok_call(lib.kvmm_seq_match, "kvmm_seq_match", tokens, n)

	def promote(self, tokens: Any, n: Optional[int] = None) -> int:
		"""Bring the matched prefix's lower-tier part back; return the cached length."""
		return self._tok_call(lib.kvmm_seq_promote, "kvmm_seq_promote", tokens, n)

	def extend(self, n: int, flags: int = 0) -> None:
		"""Allocate KV for @n more tokens."""
		seq = self._id_checked()
		if n < 0:
			raise ValueError(f"n = {n} is negative")
		self.ctx._call(lib.kvmm_seq_extend, "kvmm_seq_extend", seq, n, flags)

	def commit(self, tokens: Any, n: Optional[int] = None) -> int:
		"""Insert the whole pages of tokens[cached:n] into the cache; return cached."""
		return self._tok_call(lib.kvmm_seq_commit, "kvmm_seq_commit", tokens, n)

	def retract(self, tokens: Any = None, n: Optional[int] = None) -> None:
		"""Commit tokens[:n] (if given), free the rest; the sequence stays open, empty."""
		self._commit_call(lib.kvmm_seq_retract, "kvmm_seq_retract", tokens, n)

	def close(self, tokens: Any = None, n: Optional[int] = None) -> None:
		"""Commit tokens[:n] (if given), release the row.  Closing twice is a no-op."""
		if not self._open or self.ctx._ptr is None:
			self._open = False
			return
		self._commit_call(lib.kvmm_seq_close, "kvmm_seq_close", tokens, n)
		self._open = False

	@property
	def closed(self) -> bool:
		"""Whether the sequence was closed (or its context was)."""
		return not self._open or self.ctx._ptr is None

	def info(self) -> SeqInfo:
		"""Return the sequence's length, cached length and namespace."""
		out = ffi.new("struct kvmm_seq_info *")
		self.ctx._call(lib.kvmm_seq_info, "kvmm_seq_info", self._id_checked(), out)
		return SeqInfo(out.len, out.cached, out.ns)

	def __len__(self) -> int:
		return self.info().len

	def row(self) -> np.ndarray:
		"""This sequence's page-table row, read-only, in place (a view)."""
		table = self.ctx.page_table()
		return table[self._id_checked() & lib.KVMM_SEQ_ROW_MASK]	# a ring's id too

	def slots(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
		"""Return the pool slots of tokens [start, stop) (a new int64 array).

		IndexError unless 0 <= start <= stop <= len(self): a token past the
		length has no KV of this sequence yet (EXTEND first).
		"""
		seq = self._id_checked()
		out = ffi.new("struct kvmm_seq_info *")
		with self.ctx._in_call() as ptr:	# the table is the context's memory
			self.ctx._check(lib.kvmm_seq_info(ptr, seq, out), "kvmm_seq_info")
			return row_slots(self.ctx._table[seq & lib.KVMM_SEQ_ROW_MASK], self.ctx.page_size,
					 out.len, start, stop)

	def __enter__(self) -> "Sequence":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()
