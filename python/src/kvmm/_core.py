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
import dataclasses
import errno
import logging
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ._errors import Busy, InvalidArgument, make_error
from ._kvmm import ffi, lib

__all__ = ["Context", "Sequence", "SeqInfo", "Stats", "STAT_NAMES", "default_params"]

_log = logging.getLogger("kvmm")

#: Names of the statistics items, in the library's order (kvmm_stat_name()).
STAT_NAMES: Tuple[str, ...] = tuple(ffi.string(lib.kvmm_stat_name(i)).decode()
				    for i in range(lib.NR_KVMM_STATS))

#: A snapshot of the context's statistics (kvmm_stats()), one int per item.
Stats = dataclasses.make_dataclass("Stats", [(n, int) for n in STAT_NAMES], frozen=True)
Stats.__doc__ = "A snapshot of kvmm_stats(): one field per enum kvmm_stat_item."
Stats.__module__ = "kvmm"

_MODEL_FIELDS = ("layers", "kv_heads", "head_dim", "latent_dim", "dtype_bytes")
_STR_FIELDS = ("model_id", "backend", "evict_policy", "nvme_path")
_INT_FIELDS = ("page_size", "max_seqs", "max_seq_len", "nr_pages", "max_pages", "mem_total",
	       "mem_avail", "mem_fraction", "wmark_min", "wmark_low", "wmark_high",
	       "host_pages", "host_node", "write_policy", "nvme_pages", "nvme_qd", "nvme_flags",
	       "host_wmark_low", "host_wmark_high")
_ATTN = {"mha": lib.KVMM_ATTN_MHA, "mla": lib.KVMM_ATTN_MLA}
# struct module formats of 4-byte ints in native (little-endian) order
_TOKEN_FORMATS = frozenset(("i", "I", "@i", "@I", "=i", "=I", "<i", "<I"))
_U32_ARRAY = ffi.typeof("uint32_t[]")
_DTYPES = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.float64}


def default_params() -> Dict[str, Any]:
	"""Return the library's defaults (kvmm_params_init()) by field name."""
	p = ffi.new("struct kvmm_params *")
	lib.kvmm_params_init(p)
	out: Dict[str, Any] = {f: getattr(p.model, f) for f in _MODEL_FIELDS}
	out.update({f: getattr(p, f) for f in _INT_FIELDS})
	out.update({f: None for f in _STR_FIELDS})
	out["attn"] = "mla" if p.model.attn == lib.KVMM_ATTN_MLA else "mha"
	return out


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


def row_slots(row: np.ndarray, page_size: int, start: int, stop: int) -> np.ndarray:
	"""The pool slots of tokens [start, stop) of a page-table @row (a new int64 array)."""
	t = np.arange(start, stop, dtype=np.int64)
	return row[t // page_size].astype(np.int64) * page_size + t % page_size


class DeviceArray:
	"""A layer's K or V in GPU memory, described by ``__cuda_array_interface__``.

	CuPy, Numba and torch (``torch.as_tensor(x, device="cuda")``) take it
	without a copy.  It keeps its context alive as a host view does.
	"""

	def __init__(self, hold: Any, shape: Tuple[int, ...], strides: Tuple[int, ...],
		     dtype: np.dtype, device: int) -> None:
		self._hold = hold
		self.shape, self.strides, self.dtype, self.device = shape, strides, dtype, device

	@property
	def ptr(self) -> int:
		"""The device address of element 0."""
		return int(ffi.cast("uintptr_t", self._hold))

	@property
	def __cuda_array_interface__(self) -> Dict[str, Any]:
		return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
			"data": (self.ptr, False), "version": 3}

	def __dlpack_device__(self) -> Tuple[int, int]:
		return (2, self.device)		# kDLCUDA


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
			views = [DeviceArray(self._hold(a), shape, strides, dt, device) for a in (k, v) if a]
		else:
			views = [self._view(a, nbytes, dt, shape, strides) for a in (k, v) if a]
		return views[0], (views[1] if v else None)


class Context(ViewOwner):
	"""A kvmm context: one KV pool, its page table, prefix cache and tiers.

	Keyword arguments are the fields of struct kvmm_params (model geometry
	``layers``, ``kv_heads``, ``head_dim``, ``latent_dim``, ``dtype_bytes``,
	``attn`` "mha"/"mla"; ``page_size``, ``max_seqs``, ``max_seq_len``,
	``nr_pages`` or SGLang's ``mem_fraction`` with ``mem_total`` and
	``mem_avail``; watermarks, ``evict_policy``, ``host_pages``,
	``nvme_pages``, ``nvme_path``, ``nvme_flags``, ``model_id`` ...);
	anything not given keeps the library's default (kvmm_params_init()).
	``shareable=True`` backs the mock pool with memfds.  Use it as a
	context manager, or call :meth:`close`.
	"""

	def __init__(self, **params: Any) -> None:
		self._ptr = None
		self._live = 0
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
		self._cuda_device = (params.get("cuda_device", 0)
				     if params.get("backend") == "cuda" else None)
		table = ffi.new("struct kvmm_table *")
		lib.kvmm_seq_table(self._ptr, table)
		self._table = np.frombuffer(ffi.buffer(table.base, 4 * table.rows * table.stride),
					    dtype=np.int32).reshape(table.rows, table.stride)
		self._table.flags.writeable = False

	def _params(self, params: Dict[str, Any]):
		"""Build struct kvmm_params from keyword arguments over the defaults."""
		p = ffi.new("struct kvmm_params *")
		lib.kvmm_params_init(p)
		keep = [p]
		for key, val in params.items():
			if key in _MODEL_FIELDS:
				setattr(p.model, key, val)
			elif key == "attn":
				p.model.attn = _ATTN[val]
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
		"""Return the C context, or raise if it is closed."""
		ptr = self._ptr
		if ptr is None:
			raise InvalidArgument(errno.EINVAL, "kvmm: the context is closed")
		return ptr

	def keyed(self, model_id: str, value_bytes: int, ns: int = 0) -> Any:
		"""The keyed page store's space of @value_bytes-byte values of model
		@model_id in namespace @ns (:class:`kvmm.KeyedSpace`); the context
		needs a host tier (``host_pages``)."""
		from ._keyed import KeyedSpace
		return KeyedSpace(self, model_id, value_bytes, ns)

	# ---- lifetime ----
	def close(self) -> None:
		"""Destroy the context (kvmm_destroy()); its sequences go with it.

		Raises :class:`kvmm.Busy` while a view of its memory is alive.
		Closing twice is a no-op.
		"""
		if self._ptr is None:
			return
		self._refuse_if_viewed("context")
		ptr, self._ptr = self._ptr, None
		self._table = None
		lib.kvmm_destroy(ptr)

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
		self._check(lib.kvmm_seq_open(self._c(), ns, out), "kvmm_seq_open")
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
		self._check(lib.kvmm_seq_extend_batch(self._c(), ffi.new("uint32_t[]", ids),
						      ffi.new("uint32_t[]", counts), len(ids),
						      flags), "kvmm_seq_extend_batch")

	def ring(self, sq_entries: int = 64, buf_size: int = 1 << 20) -> Any:
		"""An in-process command ring over this context (kvmm_ring_init()).

		It counts as a view: close() refuses while it is open.
		"""
		from ._ring import Ring

		ring = Ring(owner=self)
		p = ffi.new("struct kvmm_ring_params *", {"sq_entries": sq_entries,
							  "buf_size": buf_size})
		return ring._start(lib.kvmm_ring_init(self._c(), p, ring._r), "kvmm_ring_init",
				   buf_size)

	# ---- prefixes ----
	def lookup(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> int:
		"""Return how many tokens of the prefix are cached on the device."""
		buf, n = tokens_arg(tokens, n)
		return self._check(lib.kvmm_prefix_lookup(self._c(), ns, buf, n),
				   "kvmm_prefix_lookup")

	def tiers(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> Tuple[int, ...]:
		"""Return the tokens of the prefix cached on each tier (device, host, NVMe)."""
		buf, n = tokens_arg(tokens, n)
		hits = ffi.new("struct kvmm_tier_hits *")
		self._check(lib.kvmm_prefix_tiers(self._c(), ns, buf, n, hits), "kvmm_prefix_tiers")
		return tuple(hits.tokens[t] for t in range(lib.KVMM_NR_TIERS))

	def pin(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> None:
		"""Pin a cached prefix: never evicted until unpinned (pins nest)."""
		buf, n = tokens_arg(tokens, n)
		self._check(lib.kvmm_prefix_pin(self._c(), ns, buf, n), "kvmm_prefix_pin")

	def unpin(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> None:
		"""Drop one pin of a prefix."""
		buf, n = tokens_arg(tokens, n)
		self._check(lib.kvmm_prefix_unpin(self._c(), ns, buf, n), "kvmm_prefix_unpin")

	def set_priority(self, tokens: Any, prio: int, n: Optional[int] = None,
			 ns: int = 0) -> None:
		"""Set a cached prefix's eviction priority (0 is reclaimed first)."""
		buf, n = tokens_arg(tokens, n)
		self._check(lib.kvmm_prefix_set_prio(self._c(), ns, buf, n, prio),
			    "kvmm_prefix_set_prio")

	# ---- reclaim and tunables ----
	def reclaim(self, nr_pages: int) -> int:
		"""Evict at least @nr_pages pages (whole leaves); return the pages freed."""
		return self._check(lib.kvmm_reclaim(self._c(), nr_pages), "kvmm_reclaim")

	def drop_caches(self) -> int:
		"""Evict everything evictable; return the pages freed."""
		return self._check(lib.kvmm_drop_caches(self._c()), "kvmm_drop_caches")

	def sync(self) -> None:
		"""Wait for the demotions background reclaim has in flight, and settle
		them: every page it took is then on its new tier.  Returns at once
		without an NVMe tier."""
		self._check(lib.kvmm_sync(self._c()), "kvmm_sync")

	def set_watermarks(self, min: int, low: int, high: int) -> None:
		"""Set the reclaim watermarks, in pages."""
		self._check(lib.kvmm_set_watermarks(self._c(), min, low, high),
			    "kvmm_set_watermarks")

	@property
	def evict_policy(self) -> str:
		"""The eviction policy's name ("lru", "slru"); assignable."""
		return ffi.string(lib.kvmm_evict_policy(self._c())).decode()

	@evict_policy.setter
	def evict_policy(self, name: str) -> None:
		self._check(lib.kvmm_set_evict_policy(self._c(), name.encode()),
			    "kvmm_set_evict_policy")

	def resize(self, nr_pages: int) -> int:
		"""Grow or shrink the device pool; return the pages migrated."""
		return self._check(lib.kvmm_resize(self._c(), nr_pages), "kvmm_resize")

	@property
	def nr_pages(self) -> int:
		"""Pages in the device pool now."""
		return lib.kvmm_nr_pages(self._c())

	# ---- observing ----
	def stats(self) -> Any:
		"""Return a :class:`kvmm.Stats` snapshot."""
		vals = ffi.new("uint64_t[]", len(STAT_NAMES))
		self._check(lib.kvmm_stats(self._c(), vals, len(STAT_NAMES)), "kvmm_stats")
		return Stats(*vals)

	def check(self) -> None:
		"""Verify every invariant of the context (kvmm_check())."""
		self._check(lib.kvmm_check(self._c()), "kvmm_check")

	def page_state(self, pfn: int) -> int:
		"""Return a page's KVMM_PAGE_* state."""
		return self._check(lib.kvmm_page_state(self._c(), pfn), "kvmm_page_state")

	def backend_info(self) -> str:
		"""One line on the backend."""
		buf = ffi.new("char[]", 256)
		self._check(lib.kvmm_backend_info(self._c(), buf, 256), "kvmm_backend_info")
		return ffi.string(buf).decode()

	# ---- views of the library's memory ----
	def page_table(self) -> np.ndarray:
		"""The whole page table, (max_seqs, pages per row) int32, read-only, in place.

		Entry [s, i] is the page frame of sequence s's page i, -1 where none.
		"""
		self._c()
		t = self._table
		return self._view(t.ctypes.data, t.nbytes, np.int32, t.shape, readonly=True)

	def kv_layer_info(self, layer: int) -> Tuple[int, int, int, int]:
		"""Return (k address, v address or 0, slot bytes, bytes) of a layer."""
		out = ffi.new("struct kvmm_kv_layer *")
		self._check(lib.kvmm_kv_layer(self._c(), layer, out), "kvmm_kv_layer")
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
		k, v, slot_bytes, nbytes = self.kv_layer_info(layer)
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
		return self.ctx._check(fn(self.ctx._ptr, seq, buf, n), name)

	def _commit_call(self, fn: Any, name: str, tokens: Any, n: Optional[int]) -> None:
		"""close/retract: commit tokens[:n] first, or nothing when @tokens is None."""
		if tokens is None:
			self.ctx._check(fn(self.ctx._ptr, self._id_checked(), ffi.NULL, 0), name)
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
		self.ctx._check(lib.kvmm_seq_extend(self.ctx._ptr, seq, n, flags), "kvmm_seq_extend")

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
		self.ctx._check(lib.kvmm_seq_info(self.ctx._ptr, self._id_checked(), out),
				"kvmm_seq_info")
		return SeqInfo(out.len, out.cached, out.ns)

	def __len__(self) -> int:
		return self.info().len

	def row(self) -> np.ndarray:
		"""This sequence's page-table row, read-only, in place (a view)."""
		table = self.ctx.page_table()
		return table[self._id_checked()]

	def slots(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
		"""Return the pool slots of tokens [start, stop) (a new int64 array)."""
		seq = self._id_checked()
		if stop is None:
			stop = self.info().len
		return row_slots(self.ctx._table[seq], self.ctx.page_size, start, stop)

	def __enter__(self) -> "Sequence":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()
