# SPDX-License-Identifier: MIT
"""The keyed page store: values an engine names by its own keys.

``Context.keyed(model_id, value_bytes)`` gives a :class:`KeyedSpace` of
the context's host and NVMe tiers (C: ``kvmm_keyed_*``); through a ring the
same commands are :meth:`kvmm.Batch.kspace`, ``kput``, ``kget``,
``kexists``, ``kdelete`` and ``kprefetch``.  See Documentation/userspace-api/python.rst.

Keys are 128 bits.  :func:`key_of` maps what engines use onto them: 16
bytes are taken as they are, an ``int`` below 2**128 as its little-endian
bytes, anything else (a SHA-256 block hash, LMCache's
``model@rank@group@hash`` string) by BLAKE2b with a 16-byte digest, so
two different keys share a value with probability below n**2 / 2**129
for n keys in a space.  Values are any C-contiguous buffers of exactly
the space's ``value_bytes`` (bytes, bytearray, memoryview, numpy arrays,
torch CPU tensors through DLPack), or one 2-D array of ``n`` rows of
``value_bytes`` bytes; they are handed to C without a copy.
"""
import hashlib
from typing import Any, Dict, List, Tuple

import numpy as np

from ._kvmm import ffi, lib

__all__ = ["KeyedSpace", "key_of", "keys_array"]

_KEY_BYTES = 16


def key_of(key: Any) -> bytes:
	"""The 16 bytes kvmm stores @key under (see the module's docstring)."""
	if isinstance(key, int):
		if not 0 <= key < 1 << 128:
			raise ValueError(f"an int key must be in 0 .. 2**128 - 1, not {key}")
		return key.to_bytes(_KEY_BYTES, "little")
	if isinstance(key, str):
		key = key.encode()
	if isinstance(key, (bytes, bytearray, memoryview)):
		raw = bytes(key)
		return raw if len(raw) == _KEY_BYTES else hashlib.blake2b(
			raw, digest_size=_KEY_BYTES).digest()
	raise TypeError(f"a key is bytes, str or int, not {type(key).__name__}")


def keys_array(keys: Any) -> np.ndarray:
	"""@keys as a C-contiguous (n, 16) uint8 array (a view when it already is one).

	A numpy array of shape (n, 2) uint64 or (n, 16) uint8 is taken as n
	keys as they are; anything else is an iterable of keys for key_of().
	"""
	if isinstance(keys, np.ndarray):
		if keys.ndim == 2 and keys.dtype == np.uint64 and keys.shape[1] == 2:
			keys = keys.view(np.uint8)
		if keys.ndim != 2 or keys.dtype != np.uint8 or keys.shape[1] != _KEY_BYTES:
			raise ValueError("a key array is (n, 2) uint64 or (n, 16) uint8, not "
					 f"{keys.shape} {keys.dtype}")
		return np.ascontiguousarray(keys)
	rows = [key_of(k) for k in keys]
	out = np.empty((len(rows), _KEY_BYTES), dtype=np.uint8)
	for i, raw in enumerate(rows):
		out[i] = np.frombuffer(raw, dtype=np.uint8)
	return out


def _buffer(obj: Any, writable: bool) -> memoryview:
	"""A contiguous byte memoryview of @obj (DLPack for a torch CPU tensor)."""
	try:
		mv = memoryview(obj)
	except TypeError:
		if not hasattr(obj, "__dlpack__"):
			raise TypeError(f"a value is a buffer, not {type(obj).__name__}") from None
		try:
			mv = memoryview(np.from_dlpack(obj))
		except (RuntimeError, BufferError, ValueError) as e:
			raise TypeError(f"a value must be in host memory: {e}") from None
	if not mv.c_contiguous:
		raise ValueError("a value must be C-contiguous")
	if writable and mv.readonly:
		raise ValueError("a value to read into must be writable")
	return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


def values_arg(values: Any, n: int, value_bytes: int, writable: bool) -> Tuple[Any, List[Any]]:
	"""A ``void *[n]`` over @values and what must stay alive while it is used.

	@values is one array of n rows of @value_bytes bytes, or n buffers of
	@value_bytes bytes each.  Nothing is copied.
	"""
	ptrs = ffi.new("void *[]", max(n, 1))
	keep: List[Any] = [ptrs]
	if isinstance(values, np.ndarray) and values.ndim >= 2:
		if values.shape[0] != n or values[0].nbytes != value_bytes:
			raise ValueError(f"values are {values.shape} of {values.dtype}; need {n} rows "
					 f"of {value_bytes} bytes")
		mv = _buffer(values, writable)
		base = ffi.from_buffer("char[]", mv, require_writable=writable)
		keep.append(base)
		for i in range(n):
			ptrs[i] = base + i * value_bytes
		return ptrs, keep
	values = list(values)
	if len(values) != n:
		raise ValueError(f"{len(values)} values for {n} keys")
	for i, v in enumerate(values):
		mv = _buffer(v, writable)
		if mv.nbytes != value_bytes:
			raise ValueError(f"value {i} has {mv.nbytes} bytes; the space's values have "
					 f"{value_bytes}")
		buf = ffi.from_buffer("char[]", mv, require_writable=writable)
		keep.append(buf)
		ptrs[i] = buf
	return ptrs, keep


class KeyedSpace:
	"""A space of the keyed page store on a context (kvmm_keyed_space()).

	The values of @value_bytes bytes of model @model_id in namespace @ns:
	every client that registers the same three shares them.  Methods are
	one C call each; a bad argument raises, a value's own failure is in
	the array they return (0 or a negative errno per key).
	"""

	def __init__(self, ctx: Any, model_id: str, value_bytes: int, ns: int = 0) -> None:
		self._ctx = ctx
		self.model_id, self.value_bytes, self.ns = model_id, value_bytes, ns
		mid = ffi.new("char[]", model_id.encode())
		spec = ffi.new("struct kvmm_keyed_spec *", {"ns": ns, "value_bytes": value_bytes,
							    "model_id": mid})
		out = ffi.new("uint32_t *")
		ctx._call(lib.kvmm_keyed_space, "kvmm_keyed_space", spec, out)
		self.id = out[0]

	def _keys(self, keys: Any) -> Tuple[Any, int, np.ndarray]:
		arr = keys_array(keys)
		return ffi.cast("struct kvmm_key *", ffi.from_buffer(arr)), arr.shape[0], arr

	def put(self, keys: Any, values: Any) -> np.ndarray:
		"""Store @values under @keys; return each one's result (0, -ENOSPC ...).

		A key already stored keeps its value (the same key names the same
		KV) and counts as stored.
		"""
		k, n, karr = self._keys(keys)
		ptrs, keep = values_arg(values, n, self.value_bytes, False)
		res = np.zeros(n, dtype=np.int32)
		self._ctx._call(lib.kvmm_keyed_put, "kvmm_keyed_put", self.id, k,
				ffi.cast("const void *const *", ptrs), n,
				ffi.cast("int32_t *", ffi.from_buffer(res)))
		del keep, karr
		return res

	def get(self, keys: Any, out: Any = None) -> Tuple[np.ndarray, Any]:
		"""Read the values of @keys into @out: (each one's result, @out).

		@out defaults to a new (n, value_bytes) uint8 array.  A result is
		0, -ENOENT (not stored), -EBADMSG (it failed its checksum or its
		identity and was dropped: never wrong bytes) or an I/O error; the
		row of a value that failed is not to be used.
		"""
		k, n, karr = self._keys(keys)
		if out is None:
			out = np.empty((n, self.value_bytes), dtype=np.uint8)
		ptrs, keep = values_arg(out, n, self.value_bytes, True)
		res = np.zeros(n, dtype=np.int32)
		self._ctx._call(lib.kvmm_keyed_get, "kvmm_keyed_get", self.id, k, ptrs, n,
				ffi.cast("int32_t *", ffi.from_buffer(res)))
		del keep, karr
		return res, out

	def exists(self, keys: Any) -> int:
		"""How many of @keys, from the first on, are stored."""
		k, n, karr = self._keys(keys)
		ret = self._ctx._call(lib.kvmm_keyed_exists, "kvmm_keyed_exists", self.id, k, n,
				      ffi.NULL)
		del karr
		return ret

	def prefetch(self, keys: Any, budget: int = 0, reclaim: bool = False) -> int:
		"""Read the values of @keys that are on NVMe up to the host tier ahead
		of their get (kvmm_keyed_prefetch()): at most @budget host pages (0:
		the free pages above the host tier's low watermark: nothing is
		evicted); with @reclaim, @budget pages taken as a put would.  Values
		not stored, on the host already, or being read are skipped.  Waits
		for the reads; returns how many values moved up."""
		k, n, karr = self._keys(keys)
		ret = self._ctx._call(lib.kvmm_keyed_prefetch, "kvmm_keyed_prefetch", self.id, k, n,
				      budget, lib.KVMM_PREFETCH_RECLAIM if reclaim else 0)
		del karr
		return ret

	def _each(self, fn: Any, name: str, keys: Any) -> np.ndarray:
		k, n, karr = self._keys(keys)
		res = np.zeros(n, dtype=np.int32)
		self._ctx._call(fn, name, self.id, k, n,
				ffi.cast("int32_t *", ffi.from_buffer(res)))
		del karr
		return res

	def exists_each(self, keys: Any) -> np.ndarray:
		"""For each of @keys, 0 if it is stored, else -ENOENT (int32 array)."""
		return self._each(lib.kvmm_keyed_exists, "kvmm_keyed_exists", keys)

	def delete(self, keys: Any) -> int:
		"""Drop the values of @keys (keys not stored are skipped); return how many went."""
		k, n, karr = self._keys(keys)
		ret = self._ctx._call(lib.kvmm_keyed_delete, "kvmm_keyed_delete", self.id, k, n,
				      ffi.NULL)
		del karr
		return ret

	def delete_each(self, keys: Any) -> np.ndarray:
		"""Drop the values of @keys: for each, 0 (deleted), -ENOENT (not stored)
		or -EBUSY (a get through a ring is reading it; it stays)."""
		return self._each(lib.kvmm_keyed_delete, "kvmm_keyed_delete", keys)

	def remove(self) -> int:
		"""Remove the space and every value it stores on the host and NVMe tiers
		(kvmm_keyed_space_remove()); return how many values went.  The space's
		id names nothing afterwards: this object's other calls raise."""
		return self._ctx._check(lib.kvmm_keyed_space_remove(self._ctx._c(), self.id),
					"kvmm_keyed_space_remove")

	def info(self) -> Dict[str, Any]:
		"""What the space holds (kvmm_keyed_info()): values, host_pages,
		nvme_pages, value_bytes, pages (a value's), ns, model_id, id."""
		rec = ffi.new("struct kvmm_dump_kspace *")
		self._ctx._call(lib.kvmm_keyed_info, "kvmm_keyed_info", self.id, rec)
		return kspace_dict(rec)

	def __len__(self) -> int:
		"""The values stored in the space, on any tier."""
		return self.info()["values"]


def kspace_dict(rec: Any) -> Dict[str, Any]:
	"""A struct kvmm_dump_kspace as a dict of its fields."""
	return {"id": rec.id, "ns": rec.ns, "value_bytes": rec.value_bytes, "pages": rec.pages,
		"values": rec.values, "host_pages": rec.host_pages, "nvme_pages": rec.nvme_pages,
		"model_id": ffi.string(rec.model_id).decode(errors="replace")}


def kspace_reg(model_id: str, value_bytes: int) -> bytes:
	"""The bytes of a struct kvmm_kspace_reg (KSPACE's input)."""
	mid = model_id.encode()
	size = ffi.sizeof("struct kvmm_kspace_reg")
	if not mid or len(mid) >= size - 16:
		raise ValueError(f"model_id must be 1 .. {size - 17} bytes")
	reg = ffi.new("struct kvmm_kspace_reg *", {"value_bytes": value_bytes})
	ffi.memmove(reg.model_id, mid, len(mid))
	return bytes(ffi.buffer(reg))
