# SPDX-License-Identifier: MIT
"""kvmm as SGLang's HiCache storage backend (SGLang 0.5.23).

HiCache keeps SGLang's host-memory KV pool and, below it, a storage
backend addressed by page hashes; this is one, over kvmm's keyed store, in
the engine's process or shared by every SGLang process attached to one
kvmmd.  SGLang loads it as a dynamic backend::

    python -m sglang.launch_server --model-path ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "kvmm",
          "module_path": "kvmm.sglang", "class_name": "KvmmHiCacheStorage",
          "interface_v1": 1, "socket": "/run/kvmmd.sock"}'

Options in the extra config, besides SGLang's: ``socket`` (kvmmd's; omit
for a store in this process, sized by ``host_bytes`` and optionally
``nvme_path``/``nvme_bytes``, ``page_bytes``, its NVMe writeback tuned by
``host_wmark_low``/``host_wmark_high``, ``nvme_qd`` and ``nvme_flags``:
kvmm.KeyedStore's), ``ns``, ``threads``, ``ring_bytes``, ``prefetch``
(default true: batch_exists, which SGLang's prefetch thread calls before
it gets the pages, starts reading the pages found on NVMe up to kvmm's
host tier, so that the batch_get that follows reads host memory).
``interface_v1`` makes SGLang use batch_get_v1/batch_set_v1, which move
each page between the host pool and kvmm without a copy of ours where the
pool's layout keeps a page's K and its V contiguous (page_first,
page_first_direct); a hybrid model's other host pools (Mamba states, SWA,
indexers) move through batch_*_v2, a flat page a value.  A layer_first
page is stored as SGLang's flat page (its K, then its V, layer by layer): a batch's pages are gathered from
the pool into a staging buffer of the calling thread's, and scattered
back from it, by one numpy call per chunk of pages (16 MiB), no Python
loop over pages or layers.  See Documentation/admin-guide/engines.rst.
"""
import threading
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
						 PoolHitPolicy, PoolName, PoolTransferResult)

from ._store import KeyedStore

__all__ = ["KvmmHiCacheStorage", "KvmmRadixCache", "cpu_host_pool", "cpu_tree_cache", "register"]

_OPTIONS = ("socket", "ns", "host_bytes", "nvme_path", "nvme_bytes", "page_bytes", "threads",
	    "ring_bytes", "host_wmark_low", "host_wmark_high", "nvme_qd", "nvme_flags")
_ZERO_COPY = ("page_first", "page_first_direct")
# Pages that are not moved in place cross a staging buffer of each calling
# thread's, this many bytes at most (one page when a page is larger): a
# batch larger moves a chunk of pages at a time.
_STAGE_BYTES = 16 << 20


def _pool_name(name: Any) -> str:
	"""A host pool's name as a string (SGLang passes PoolName members or str)."""
	return str(getattr(name, "value", name))


def _byte_view(t: torch.Tensor) -> memoryview:
	"""A contiguous CPU tensor's bytes, without a copy."""
	return memoryview(t.view(torch.uint8).numpy()).cast("B")


class _Rows(NamedTuple):
	"""A layer_first pool's KV buffer as rows: a row is one page's tokens of
	one layer (of K or of V), contiguous in the pool, and a flat page is the
	page's rows in the buffer's order (K's layers, then V's).

	@kv: the pool's kv_buffer the rows view (checked before each use);
	@rows: its bytes as a 1-D numpy array of row-sized void items, row
	(o, p) of leading index o and page p at o * @npages + p; @per_page:
	rows a page has; @npages: pages the pool holds; @page_bytes: a flat
	page's bytes; @tokens: tokens the pool holds."""
	kv: torch.Tensor
	rows: np.ndarray
	per_page: int
	npages: int
	page_bytes: int
	tokens: int


def _layer_rows(pool: Any, parts: int) -> Optional[_Rows]:
	"""The rows of @pool's kv_buffer when it is laid out layer_first, with
	the token dimension in the middle: (..., tokens, ...), contiguous, in CPU
	memory, and its pages (each a slice of @parts contiguous runs of rows)
	are where SGLang's own get_data_page() puts them; None otherwise."""
	kv = getattr(pool, "kv_buffer", None)
	ps = getattr(pool, "page_size", 0)
	if (getattr(pool, "layout", None) != "layer_first" or not isinstance(kv, torch.Tensor)
			or kv.device.type != "cpu" or not kv.is_contiguous() or kv.dim() < 2 or ps < 1):
		return None
	try:
		first = pool.get_data_page(0, flat=False)
	except Exception:	# noqa: BLE001 - a pool of another shape: the generic path
		return None
	if (not isinstance(first, torch.Tensor) or first.dim() != kv.dim()
			or first.data_ptr() != kv.data_ptr() or first.stride() != kv.stride()):
		return None
	dims = [d for d in range(kv.dim()) if first.shape[d] != kv.shape[d]]
	if len(dims) != 1 or first.shape[dims[0]] != ps or kv.shape[dims[0]] % ps:
		return None
	t = dims[0]
	tokens = kv.shape[t]
	if tokens >= 2 * ps:		# the next page: ps tokens on, as the buffer's strides say
		try:
			second = pool.get_data_page(ps, flat=False)
		except Exception:	# noqa: BLE001
			return None
		if second.data_ptr() != kv.data_ptr() + ps * kv.stride(t) * kv.element_size():
			return None
	per_page = 1
	for d in kv.shape[:t]:
		per_page *= d
	if per_page % parts:
		return None
	row = ps * kv.stride(t) * kv.element_size()
	flat = kv.view(torch.uint8).numpy().reshape(-1)
	rows = flat.view(np.dtype((np.void, row)))
	return _Rows(kv, rows, per_page, tokens // ps, per_page * row, tokens)


def cpu_host_pool(layers: int, heads: int, head_dim: int, page_size: int, tokens: int,
		  dtype: torch.dtype = torch.float32, layout: str = "page_first") -> Any:
	"""SGLang's host KV pool (MHATokenToKVPoolHost) in CPU memory, over a
	device pool that is CPU memory too: the backend's tests and benchmarks
	on a machine without a GPU.  Holds @tokens tokens in pages of @page_size."""
	from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
	from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

	k = tuple(torch.zeros(page_size, heads, head_dim, dtype=dtype) for _ in range(layers))
	v = tuple(torch.zeros(page_size, heads, head_dim, dtype=dtype) for _ in range(layers))
	ptrs = [torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64) for ts in (k, v)]
	info = MHABufferInfo(buffers=KVBuffers(k=k, v=v, k_data_ptrs=ptrs[0], v_data_ptrs=ptrs[1],
					       layout=KVBufferLayout.NHD),
			     page_size=page_size, head_num=heads, head_dim=head_dim,
			     v_head_dim=head_dim, dtype=dtype, device=torch.device("cpu"))
	return MHATokenToKVPoolHost(info, host_to_device_ratio=1.0, host_size=0,
				    page_size=page_size, layout=layout, pin_memory=False,
				    device="cpu", device_capacity_tokens=tokens, start_layer=0,
				    end_layer=layers - 1)


class KvmmHiCacheStorage(HiCacheStorage):
	"""SGLang's HiCacheStorage over :class:`kvmm.KeyedStore`.

	Keys are SGLang's page hashes with this rank's suffix (model, TP rank
	and size, as SGLang's file backend; an MLA model's pages are shared by
	its ranks, each DCP shard of them by the ranks holding that shard),
	mapped to 128 bits by kvmm.key_of().  A page is stored as
	two values, its K and its V (one for MLA), as the zero-copy backends
	store them.  Every call runs on the calling thread with a ring of its
	own: SGLang calls from its prefetch and backup threads at once.
	"""

	def __init__(self, storage_config: HiCacheStorageConfig,
		     kwargs: Optional[Dict[str, Any]] = None) -> None:
		extra = dict(storage_config.extra_config or {})
		opts = {k: extra[k] for k in _OPTIONS if k in extra}
		self.config = storage_config
		self.is_mla = bool(storage_config.is_mla_model)
		model = (storage_config.model_name or "model").replace("/", "-")
		tp = f"_{model}_{storage_config.tp_rank}_{storage_config.tp_size}"
		shard = ""
		if getattr(storage_config, "pp_size", 1) > 1:
			shard += f"_{storage_config.pp_size}_{storage_config.pp_rank}"
		if getattr(storage_config, "attn_cp_size", 1) > 1:
			shard += f"_cp{storage_config.attn_cp_rank}_{storage_config.attn_cp_size}"
		if getattr(storage_config, "dcp_size", 1) > 1:
			# each DCP rank holds its own shard of an MLA page: the shard,
			# the topology and the logical page size join the key (as
			# SGLang's file backend keys them), so a rank never reads
			# another's shard, nor one cut for another topology
			shard += (f"_tp{storage_config.tp_size}_dcp{storage_config.dcp_rank}_"
				  f"{storage_config.dcp_size}_page{storage_config.logical_page_size}")
		self.suffix = (f"_{model}" if self.is_mla else tp) + shard
		# a Mamba state is the TP rank's even where the model's MLA KV is shared
		self._tp_suffix = tp + shard
		self._rank_suffix = self.suffix
		self.parts = ("",) if self.is_mla else ("_k", "_v")
		self.prefetch = extra.get("prefetch", True)
		if not isinstance(self.prefetch, bool):
			raise ValueError(f"kvmm HiCache storage: prefetch = {self.prefetch!r}; true "
					 "or false")
		self.store = KeyedStore(f"sglang:{model}", **opts)
		self.mem_pool_host: Any = None
		self._rows: Optional[_Rows] = None	# the pool's rows, when layer_first
		self._tls = threading.local()		# each calling thread's staging buffer

	# ---- the host pool ----
	def register_mem_pool_host(self, mem_pool_host: Any) -> None:
		"""Keep the pool; its layout joins the keys' suffix (page_first lays a
		page's bytes out token by token, the others layer by layer: pages
		of different layouts are never mixed up)."""
		super().register_mem_pool_host(mem_pool_host)
		layout = getattr(mem_pool_host, "layout", None)
		self.suffix = self._rank_suffix + (f"_{layout}" if layout else "")
		self._rows = _layer_rows(mem_pool_host, len(self.parts))

	def _names(self, keys: List[str]) -> List[str]:
		return [f"{k}{self.suffix}{p}" for k in keys for p in self.parts]

	def _page_views(self, host_indices: torch.Tensor, n: int) -> Optional[List[memoryview]]:
		"""The pool's bytes of each page's parts, in place; None when the
		layout does not keep them contiguous."""
		pool = self.mem_pool_host
		if getattr(pool, "layout", None) not in _ZERO_COPY:
			return None
		ps = pool.page_size
		out = []
		for i in range(n):
			page = pool.get_data_page(int(host_indices[i * ps]), flat=False)
			halves = (page,) if self.is_mla else (page[0], page[1])
			for h in halves:
				if not h.is_contiguous():
					return None
				out.append(_byte_view(h))
		return out

	def _pages_ok(self, res: np.ndarray, n: int) -> List[bool]:
		per = len(self.parts)
		return [bool((res[i * per:(i + 1) * per] == 0).all()) for i in range(n)]

	# ---- staging: the pages not moved in place ----
	def _stage(self, nbytes: int) -> np.ndarray:
		"""The calling thread's staging buffer, @nbytes of it (made, or made
		larger, on first need; kept for the next batch, its memory touched
		once)."""
		buf = getattr(self._tls, "stage", None)
		if buf is None or buf.nbytes < nbytes:
			buf = self._tls.stage = np.empty(nbytes, dtype=np.uint8)
		return buf[:nbytes]

	def _row_index(self, host_indices: torch.Tensor, n: int) -> Optional[np.ndarray]:
		"""Each of @n pages' rows in the pool (an (n, rows a page) array, in
		flat-page order); None when the pool has no rows or a page does
		not start on a page boundary inside it."""
		r = self._rows
		if r is None or self.mem_pool_host.kv_buffer is not r.kv:
			return None
		ps = self.mem_pool_host.page_size
		starts = host_indices[: n * ps: ps].to("cpu", torch.int64).numpy()
		if starts.shape[0] != n or (starts % ps).any() or starts.min() < 0 or \
				starts.max() + ps > r.tokens:
			return None
		lead = np.arange(r.per_page, dtype=np.intp) * r.npages
		return lead[None, :] + (starts // ps).astype(np.intp)[:, None]

	def _chunks(self, n: int, page_bytes: int) -> List[Tuple[int, int]]:
		per = max(1, _STAGE_BYTES // page_bytes)
		return [(a, min(a + per, n)) for a in range(0, n, per)]

	def _store_staged(self, op: str, names: List[str], stage: np.ndarray) -> np.ndarray:
		"""@op ("put", "get") of @names' values, which lie one after the other
		in @stage."""
		vb = stage.nbytes // len(names)
		mv = memoryview(stage)
		return self.store.call(op, names, [mv[j * vb:(j + 1) * vb] for j in range(len(names))])

	def _set_staged(self, keys: List[str], host_indices: torch.Tensor) -> np.ndarray:
		"""Store pages not laid out in place: each chunk gathered into the
		staging buffer (one numpy take of its rows, or a page's copy at a
		time for a pool of another shape), then stored from there."""
		n, per = len(keys), len(self.parts)
		names = self._names(keys)
		res = np.zeros(n * per, dtype=np.int32)
		idx = self._row_index(host_indices, n)
		if idx is not None:
			r = self._rows
			for a, b in self._chunks(n, r.page_bytes):
				stage = self._stage((b - a) * r.page_bytes)
				np.take(r.rows, idx[a:b].reshape(-1), out=stage.view(r.rows.dtype),
					mode="clip")		# in bounds: _row_index checked them
				res[a * per:b * per] = self._store_staged("put", names[a * per:b * per],
									  stage)
			return res
		pool, ps = self.mem_pool_host, self.mem_pool_host.page_size
		page_bytes = pool.get_data_page(int(host_indices[0]), flat=False).nbytes
		for a, b in self._chunks(n, page_bytes):
			stage = self._stage((b - a) * page_bytes)
			for i in range(a, b):
				page = pool.get_data_page(int(host_indices[i * ps]), flat=False)
				dst = torch.from_numpy(stage[(i - a) * page_bytes:(i - a + 1) * page_bytes])
				dst.view(page.dtype).view(page.shape).copy_(page)
			res[a * per:b * per] = self._store_staged("put", names[a * per:b * per], stage)
		return res

	def _get_staged(self, keys: List[str], host_indices: torch.Tensor) -> List[bool]:
		"""Read pages not laid out in place: each chunk into the staging buffer,
		then its pages read whole scattered to the pool (one numpy
		assignment of their rows, or SGLang's set_from_flat_data_page() a
		page at a time for a pool of another shape).  A page not read
		leaves the pool's slots as they were."""
		n, per = len(keys), len(self.parts)
		names = self._names(keys)
		pool, ps = self.mem_pool_host, self.mem_pool_host.page_size
		ok: List[bool] = []
		idx = self._row_index(host_indices, n)
		r = self._rows
		page_bytes = r.page_bytes if idx is not None else \
			pool.get_data_page(int(host_indices[0]), flat=False).nbytes
		for a, b in self._chunks(n, page_bytes):
			stage = self._stage((b - a) * page_bytes)
			got = self._pages_ok(self._store_staged("get", names[a * per:b * per], stage),
					     b - a)
			ok += got
			if idx is not None:
				rows = stage.view(r.rows.dtype)
				if all(got):
					r.rows[idx[a:b].reshape(-1)] = rows
				elif any(got):
					good = np.asarray(got)
					r.rows[idx[a:b][good].reshape(-1)] = \
						rows.reshape(b - a, r.per_page)[good].reshape(-1)
				continue
			for i in range(a, b):
				if got[i - a]:
					flat = torch.from_numpy(stage[(i - a) * page_bytes:
								      (i - a + 1) * page_bytes])
					pool.set_from_flat_data_page(int(host_indices[i * ps]),
								     flat.view(pool.dtype))
		return ok

	# ---- the v1 interface: pages between the host pool and kvmm ----
	def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
			 extra_info: Any = None) -> List[bool]:
		if self.mem_pool_host is None or getattr(self.mem_pool_host, "kv_buffer", 1) is None:
			return [True] * len(keys)
		if not keys:
			return []
		views = self._page_views(host_indices, len(keys))
		if views is None:	# gathered into the staging buffer, a chunk at a time
			return self._pages_ok(self._set_staged(keys, host_indices), len(keys))
		return self._pages_ok(self.store.call("put", self._names(keys), views), len(keys))

	def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
			 extra_info: Any = None) -> List[bool]:
		if self.mem_pool_host is None or getattr(self.mem_pool_host, "kv_buffer", 1) is None:
			return [True] * len(keys)
		if not keys:
			return []
		views = self._page_views(host_indices, len(keys))
		if views is None:	# through the staging buffer, a chunk at a time
			return self._get_staged(keys, host_indices)
		return self._pages_ok(self.store.call("get", self._names(keys), views), len(keys))

	def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
		"""How many of @keys, from the first on, are stored (every part of each)."""
		if not keys:
			return 0
		# the pages found are got next (SGLang's prefetch thread): those on
		# NVMe start their reads to the host tier now, in the same batch
		res = self.store.call("exists", self._names(keys), prefetch=self.prefetch)
		for i, good in enumerate(self._pages_ok(res, len(keys))):
			if not good:
				return i
		return len(keys)

	def exists(self, key: str) -> bool:
		return self.batch_exists([key]) == 1

	# ---- the v2 interface: a hybrid model's other host pools ----
	def _pool_names(self, keys: List[str], pool: Any, host: Any) -> List[str]:
		"""The value names of @keys' pages of the host pool named @pool,
		@host (None when not registered): one value a page, keyed as
		SGLang's file backend keys a component (the page hash, the pool's
		name, the rank's suffix: the TP rank's for Mamba states), and the
		pool's own layout."""
		name = _pool_name(pool)
		suffix = self._tp_suffix if name == "mamba" else self._rank_suffix
		layout = getattr(host, "layout", None)
		suffix += f"_{layout}" if layout else ""
		return [f"{k}.{name}{suffix}" for k in keys]

	def _pool(self, pool: Any) -> Any:
		for name, host in getattr(self, "registered_pools", {}).items():
			if _pool_name(name) == _pool_name(pool):
				return host
		return None

	def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
			    extra_info: Any = None) -> PoolTransferResult:
		"""The run of KV pages stored from the first, cut to the prefixes
		every other pool can restore too, as SGLang's file backend answers:
		an ALL_PAGES pool needs each page of the prefix, a TRAILING_PAGES
		pool (Mamba, SWA states) the prefix's last len(transfer.keys)."""
		kv = self.batch_exists(keys)
		hits: Dict[Any, int] = {PoolName.KV: kv} if kv else {}
		restorable = set(range(1, kv + 1))
		for t in pool_transfers or []:
			if not restorable:
				break
			if t.hit_policy not in (PoolHitPolicy.ALL_PAGES, PoolHitPolicy.TRAILING_PAGES):
				raise ValueError(f"kvmm HiCache storage: pool hit policy {t.hit_policy} is "
						 f"not supported")
			have = (self.store.call("exists", self._pool_names(keys[:kv], t.name,
									    self._pool(t.name)),
						prefetch=self.prefetch) == 0
				if kv else np.zeros(0, bool))
			# run[p]: how many pages up to page p - 1 are stored, back to back
			run = [0] * (kv + 1)
			for i in range(kv):
				run[i + 1] = run[i] + 1 if have[i] else 0
			if t.hit_policy == PoolHitPolicy.ALL_PAGES:
				ok = {p for p in range(1, kv + 1) if run[p] == p}
			else:
				trailing = max(1, len(t.keys) if t.keys else 1)
				ok = {p for p in range(1, kv + 1) if run[p] >= min(trailing, p)}
			if ok:
				hits[t.name] = max(ok)
			restorable &= ok
		order = sorted(restorable)
		return PoolTransferResult(order[-1] if order else 0, hits, order)

	def _batch_v2(self, op: str, transfers: List[Any]) -> Dict[Any, List[bool]]:
		"""@op ("get", "set") of each transfer's pages: the KV pool's through
		the v1 paths, any other's a flat page at a time (SGLang's
		get_data_page()/set_from_flat_data_page(), as its file backend
		moves them), one store call a transfer.  A transfer whose pool is
		not registered, or whose host indices are not a page per key,
		moves nothing."""
		out: Dict[Any, List[bool]] = {}
		for t in transfers:
			keys = list(t.keys or [])
			if _pool_name(t.name) == "kv":
				fn = self.batch_get_v1 if op == "get" else self.batch_set_v1
				out[t.name] = fn(keys, t.host_indices)
				continue
			host = self._pool(t.name)
			ps = (getattr(host, "page_size", 1) or 1) if host is not None else 1
			idx = t.host_indices
			if host is None or idx is None or idx.numel() != len(keys) * ps:
				out[t.name] = [False] * len(keys)
				continue
			if not keys:
				out[t.name] = []
				continue
			offs = idx[::ps].tolist()
			names = self._pool_names(keys, t.name, host)
			if op == "set":
				pages = [host.get_data_page(o, flat=True).contiguous() for o in offs]
				res = self.store.call("put", names, [_byte_view(p) for p in pages])
			else:
				pages = [host.get_dummy_flat_data_page() for _ in offs]
				res = self.store.call("get", names, [_byte_view(p) for p in pages])
				for r, o, page in zip(res, offs, pages):
					if r == 0:
						host.set_from_flat_data_page(o, page)
			out[t.name] = [bool(r == 0) for r in res]
		return out

	def batch_get_v2(self, transfers: List[Any], extra_info: Any = None) -> Dict[Any, List[bool]]:
		return self._batch_v2("get", transfers)

	def batch_set_v2(self, transfers: List[Any], extra_info: Any = None) -> Dict[Any, List[bool]]:
		return self._batch_v2("set", transfers)

	# ---- the interface before v1: whole flat pages, copied ----
	def set(self, key: str, value: Any = None, target_location: Any = None,
		target_sizes: Any = None) -> bool:
		return self.batch_set([key], [value])

	def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
		      target_sizes: Any = None) -> bool:
		if values is None or len(values) != len(keys):
			return False
		views = []
		for v in values:
			views += [_byte_view(c.contiguous()) for c in
				  v.reshape(-1).chunk(len(self.parts))]
		return all(self._pages_ok(self.store.call("put", self._names(keys), views), len(keys)))

	def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
		got = self.batch_get([key], [target_location] if target_location is not None else None)
		return got[0]

	def batch_get(self, keys: List[str], target_locations: Any = None,
		      target_sizes: Any = None) -> List[Any]:
		out: List[Any] = []
		for i, key in enumerate(keys):
			t = target_locations[i] if target_locations is not None else \
				self.mem_pool_host.get_dummy_flat_data_page()
			parts = t.reshape(-1).chunk(len(self.parts))
			res = self.store.call("get", self._names([key]), [_byte_view(c) for c in parts])
			out.append(t if (res == 0).all() else None)
		return out

	def close(self) -> None:
		self.store.close()


# ---- the radix cache: kvmm's tree as SGLang's prefix cache ----

import dataclasses  # noqa: E402
import errno  # noqa: E402
from array import array  # noqa: E402

from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
	BasePrefixCache, DecLockRefParams, DecLockRefResult, EvictParams, EvictResult,
	IncLockRefResult, MatchResult, TreeLock)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from sglang.srt.mem_cache.events import KVCacheEventRecorder  # noqa: E402
from sglang.srt.mem_cache.utils import (  # noqa: E402
	compute_node_event_hash_values, compute_node_hash_values)

from ._core import Context, FrameNode  # noqa: E402
from ._errors import make_error  # noqa: E402
from ._kvmm import ffi, lib  # noqa: E402
from . import _radix  # noqa: E402

# SGLang's policies whose order kvmm's tree keeps in this mode: slru counts
# a hit where SGLang's tree does (an insert, once a request, past the
# request's cache_inserted_len; never a match: see kvmm/frames.c).
_POLICIES = {"lru": "lru", "slru": "slru"}

_match = lib.kvmm_py_radix_match
_path_slots = lib.kvmm_py_radix_path_slots
_slots = lib.kvmm_py_radix_slots
_evict = lib.kvmm_py_radix_evict
_row_free = lib.kvmm_py_radix_row_free
_checkpoint = lib.kvmm_py_radix_checkpoint
_lock = lib.kvmm_frames_lock
_NULL = ffi.NULL
_I64 = torch.int64
_ENOLCK = -errno.ENOLCK
_SPARES = 4096


def _rest(cls: Any, skip: int) -> Any:
	"""The declared defaults of a NamedTuple @cls's fields after the first
	@skip, as a tuple, for the hot paths to make its instances without a
	call of its Python __new__ (a frame, once a request); None where a
	field has no default (they call the constructor then)."""
	names = cls._fields[skip:]
	if not all(f in cls._field_defaults for f in names):
		return None
	return tuple(cls._field_defaults[f] for f in names)


def _positional(cls: Any, *names: str) -> Any:
	"""@cls, a dataclass, where its first fields are @names (the hot paths
	pass them by position: a dataclass's own __init__ is quicker than
	filling in a new instance's __dict__, and keywords cost a little
	more); else a function that passes them by name."""
	if [f.name for f in dataclasses.fields(cls)][:len(names)] == list(names):
		return cls
	return lambda *args: cls(**dict(zip(names, args)))


_tuple_new = tuple.__new__
_MATCH_REST = _rest(MatchResult, 4)	# after (len, device, host, best match node)
_TreeLock = _positional(TreeLock, "node", "receipt")
_EvictResult = _positional(EvictResult, "num_tokens_evicted")


def _ids(ids: Any, n: int) -> array:
	"""The first @n token ids as array('q'), what SGLang's keys and requests
	hold and the C side reads in place (the hot paths take such an array
	as it is and call this only for another type: a list, a tensor)."""
	if type(ids) is array and ids.typecode == "q":
		return ids
	return array("q", [int(t) for t in ids[:n]])


def _page_freer(alloc: Any) -> Tuple[Any, int]:
	"""(the allocator's free_page_ids(), whether it puts what it frees in
	front of its free list) for SGLang's own two allocators: there
	free_segment() of a page-aligned segment is free_page_ids() of each
	page's first slot // page_size, and the token allocator appends what
	it frees where the paged one prepends it.  (None, 0) for another: the
	cache frees slots through free_segment(), a leaf at a time as
	RadixCache does."""
	try:
		from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
		from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
	except ImportError:	# pragma: no cover - another SGLang
		return None, 0
	if type(alloc) is TokenToKVPoolAllocator:
		return alloc.free_page_ids, 0
	if type(alloc) is PagedTokenToKVPoolAllocator:
		return alloc.free_page_ids, 1
	return None, 0


class _EventNode:
	"""What SGLang's KVCacheEventRecorder reads of a tree node: its key, its
	parent and the hashes of its pages (kvmm's tree nodes live in C)."""

	__slots__ = ("key", "parent", "hash_value", "event_hash_value")

	def __init__(self, key: Any, parent: Optional["_EventNode"], hash_value: Any = None,
		     event_hash_value: Any = None) -> None:
		self.key = key
		self.parent = parent
		self.hash_value = hash_value
		self.event_hash_value = event_hash_value


class KvmmRadixCache(BasePrefixCache):
	"""SGLang's RadixCache on kvmm's tree (``--radix-cache-backend kvmm``).

	SGLang's allocator keeps the slots (engine-owned frames: kvmm allocates
	none); the tree holds a frame a page, hands the frames of what it
	evicts back to SGLang's allocator, and answers as RadixCache does:
	match_prefix splits and returns lengths and nodes, path_device_indices
	the int64 slots, checkpoint inserts a request's row, repoints it at the
	tree's copy and frees the duplicates, inc/dec_lock_ref return the
	tokens moved.  Keys of another extra_key or cache_salt are another
	kvmm namespace.  KV events go to SGLang's own recorder as RadixCache's
	do.  Not supported (refused when asked): EAGLE's bigram keys,
	sliding-window trees, policies other than lru and slru.

	Each method the scheduler calls per request (match_prefix, lock,
	path_device_indices, checkpoint, free_kv_row, unlock, evict) is a C
	method of kvmm._radix bound onto the instance (_bind_fast()), which
	makes one call into python/csrc/radix.c over this object's scratch
	buffers and hands SGLang's allocator int64 tensors (page ids where
	the allocator takes them) it frees with one concatenation.  What it
	does not take (another type of ids, a device table, KV events, a
	disabled cache, other arguments) it hands, unchanged, to the Python
	method of the same name here, which does all.
	"""

	def __init__(self, params: Any) -> None:
		self.disable = params.disable
		self.req_to_token_pool = params.req_to_token_pool
		self.token_to_kv_pool_allocator = params.token_to_kv_pool_allocator
		self.page_size = params.page_size
		policy = (params.eviction_policy or "lru").lower()
		if policy not in _POLICIES:
			raise ValueError(f"kvmm radix cache: eviction policy {policy!r} is not one of "
					 f"{sorted(_POLICIES)}")
		config = dict(getattr(params, "eviction_policy_config", None) or {})
		if policy == "slru" and config.get("protected_threshold") == 2:
			del config["protected_threshold"]	# kvmm's, and SGLang's default
		if config:
			raise ValueError(f"kvmm radix cache: eviction policy config {config} is not "
					 f"supported (slru keeps a node reached twice: "
					 f"protected_threshold 2)")
		if params.is_eagle:
			raise ValueError("kvmm radix cache: EAGLE's bigram keys are not supported")
		if self.page_size < 1 or self.page_size & (self.page_size - 1):
			raise ValueError(f"kvmm radix cache: page size {self.page_size} is not a "
					 f"power of two")
		self.eviction_policy = policy
		alloc = self.token_to_kv_pool_allocator
		# an allocator that does not say where or how large (a bare Mock, as
		# SGLang's own unit tests pass) is a CPU one of 64Ki slots, as
		# RadixCache takes it; a slot outside that is refused by the tree
		dev = getattr(alloc, "device", None)
		self.device = torch.device(dev) if isinstance(dev, (str, torch.device)) else \
			torch.device("cpu")
		self._on_cpu = self.device.type == "cpu"
		size = getattr(alloc, "size", None)
		size = size if isinstance(size, int) else 1 << 16
		# SGLang's own recorder and queue, fed as RadixCache feeds it
		self.kv_events = KVCacheEventRecorder(
			enabled=bool(getattr(params, "enable_kv_cache_events", False)) and not self.disable,
			page_size=self.page_size,
			dynamo_format=getattr(params, "dynamo_kv_event_format", False),
			lora_names=getattr(params, "kv_event_lora_names", None))
		pool = self.req_to_token_pool
		self._max_len = (int(pool.req_to_token.shape[1]) if pool is not None else 1 << 20)
		# frames are page indices; SGLang's slot 0 (page 0) is padding, never handed out
		self._nr_pages = size // self.page_size + 1
		self._free_pages, self._prepends = _page_freer(alloc)
		# page ids straight to the allocator: its own, on the CPU
		self._free_now = self._free_pages if self._on_cpu else None
		self._alloc = alloc
		self._rt: Any = None		# the req_to_token tensor _row() last checked
		# every lock's receipt: a legacy cache's, empty (unlock() reads none)
		self._receipt = DecLockRefParams()
		self._ctx: Optional[Context] = None
		self.reset()

	@classmethod
	def create_simulated(cls, disable: bool = False, mock_allocator: Optional[Any] = None,
			     page_size: int = 1, enable_kv_cache_events: bool = False,
			     dynamo_kv_event_format: bool = False,
			     kv_event_lora_names: Optional[Any] = None) -> "KvmmRadixCache":
		"""RadixCache.create_simulated(): a cache without memory pools (no
		request table; @mock_allocator, or none, frees what it evicts)."""
		from sglang.srt.mem_cache.cache_init_params import CacheInitParams

		return cls(CacheInitParams(disable=disable, req_to_token_pool=None,
					   token_to_kv_pool_allocator=mock_allocator,
					   page_size=page_size,
					   enable_kv_cache_events=enable_kv_cache_events,
					   dynamo_kv_event_format=dynamo_kv_event_format,
					   kv_event_lora_names=kv_event_lora_names))

	# ---- lifecycle ----
	def reset(self) -> None:
		"""Empty the tree (SGLang clears its allocator beside it)."""
		fast = self.__dict__.get("_fast")
		if fast is not None:	# its later calls (a bound method kept) go to Python's
			fast._invalidate()
		if self._ctx is not None:
			self._ctx.close()
		ps = self.page_size
		self._ctx = Context(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, page_size=ps,
				    nr_pages=self._nr_pages, max_seqs=1,
				    max_seq_len=-(-self._max_len // ps) * ps, frames="engine",
				    evict_policy=self.eviction_policy)
		self._ns: Dict[Any, int] = {}
		self.root_node = FrameNode()
		self._empty = torch.empty((0,), dtype=torch.int64, device=self.device)
		self._matched: Tuple[Any, int] = (None, 0)	# match_prefix()'s last node, length
		# the C side's scratch (csrc/radix.c), alive as long as the context
		max_tokens = self._ctx.max_seq_len
		max_frames = max(max_tokens // ps, self._nr_pages)
		self._tokens_buf = ffi.new("uint32_t[]", max_tokens)
		self._frames_buf = ffi.new("int32_t[]", max_frames)
		self._leaves_buf = ffi.new("uint32_t[]", max_frames)
		self._out = torch.empty(max_tokens, dtype=torch.int64)
		# what evict() and free_kv_row() hand the allocator: an eviction's
		# slots (max_frames pages), a row's (max_tokens)
		self._spare_buf = torch.empty(max(max_frames * ps, max_tokens), dtype=_I64)
		self._spare_ptr = self._spare_buf.data_ptr()
		self._spare_len = len(self._spare_buf)
		self._spare: Dict[int, torch.Tensor] = {}	# its views, by length
		r = ffi.new("struct kvmm_py_radix *")
		r.ctx = self._c = self._ctx._c()
		r.page_size = ps
		r.page_shift = ps.bit_length() - 1
		r.max_tokens = max_tokens
		r.max_frames = max_frames
		r.tokens = self._tokens_buf
		r.frames = self._frames_buf
		r.leaves = self._leaves_buf
		r.out = ffi.cast("int64_t *", self._out.data_ptr())
		self._r = r
		# free_page_ids() takes page ids; free_segment() every slot
		self._pages = int(self._free_pages is not None and ps > 1)
		self._max_frames = max_frames
		# a page's slots where they are not frame * ps + 0..ps-1 (slots no
		# paged allocator hands out, as SGLang's own unit tests insert),
		# by the page's frame: what the cache answers and frees for it
		self._page_slots: Dict[int, torch.Tensor] = {}
		# with KV events: each page's namespace and hashes, by its frame
		self._event_pages: Dict[int, Tuple[Any, str, Optional[str]]] = {}
		self.kv_events.record_all_cleared()
		self._bind_fast()

	def _bind_fast(self) -> None:
		"""Bind the hot methods in C (kvmm._radix) onto this instance over the
		class's Python ones, which they hand what they do not do.  They
		hold what reset() set up (the scratch, the allocator's free): made
		again by each reset()."""
		fast = self.__dict__.get("_fast")
		if fast is not None:
			fast._invalidate()
		self._fast = _radix.Radix(self, self._r, _fast_env())
		for name in _FAST:
			if getattr(type(self), name) is getattr(KvmmRadixCache, name):
				setattr(self, name, getattr(self._fast, name))

	# ---- keys, rows, errors ----
	def _ns_of(self, key: Any) -> int:
		"""A kvmm namespace per (extra_key, cache_salt), as RadixCache keys
		its root's children."""
		return self._ns_tag((key.extra_key, getattr(key, "cache_salt", None)))

	def _ns_tag(self, tag: Tuple[Any, Any]) -> int:
		ns = self._ns.get(tag)
		if ns is None:
			ns = self._ns[tag] = len(self._ns)
		return ns

	def _mine(self, node: Any) -> bool:
		"""@node (a FrameNode) names a node of this cache's tree, or is a root's:
		not another cache's, nor this one's before a reset (whose memory
		the tree's nodes may be now), which the library is never handed."""
		return node._owner == self._ctx._serial or node.is_root

	def _raise(self, ret: int, call: str) -> None:
		if ret == -errno.ERANGE:
			raise ValueError("kvmm radix cache: token ids must fit 32 bits")
		self._ctx._check(ret, call)

	def _row(self, idx: int, n: int) -> int:
		"""The address of req_to_token's row @idx, @n slots long at least;
		0 where the table is not a contiguous int32 CPU tensor (the caller
		copies the row then)."""
		rt = self.req_to_token_pool.req_to_token
		if rt is not self._rt:
			self._rt = rt
			self._rt_ok = (rt.device.type == "cpu" and rt.dtype == torch.int32 and
				       rt.dim() == 2 and rt.is_contiguous())
			self._rt_rows, self._rt_len = rt.shape[0], rt.shape[1]
		if not 0 <= idx < self._rt_rows or n > self._rt_len:
			raise IndexError(f"kvmm radix cache: row {idx}[:{n}] outside req_to_token "
					 f"{tuple(rt.shape)}")
		return rt.data_ptr() + idx * self._rt_len * 4 if self._rt_ok else 0

	def _free(self, t: torch.Tensor, start: int) -> None:
		"""Give the allocator @t: page ids (self._pages) or slots of a row
		segment from @start."""
		if not self._on_cpu:
			t = t.to(self.device)
		if self._free_pages is not None:
			self._free_pages(t)
		else:
			self.token_to_kv_pool_allocator.free_segment(t, start_pos=start)

	def _spare_view(self, n: int) -> torch.Tensor:
		"""The first @n entries of _spare_buf, for the allocator to free where
		it copies what it is given before it returns (SGLang's own
		allocator, on the CPU: torch.cat into its free list, or a clone
		into a free group; all but need_sort, where the paged one keeps
		the tensor itself: asked at each free).  The C calls write there
		(_spare_ptr); the view is kept (_SPARES of them at most: a view
		holds no memory of its own) for the next free of @n, which
		free_kv_row() and evict() take from _spare by its length, without
		a call."""
		out = self._spare_buf[:n]
		if len(self._spare) < _SPARES:
			self._spare[n] = out
		return out

	def _own_slots(self, out: torch.Tensor) -> List[int]:
		"""Put back the slots SGLang gave the pages of @out (slots, whole
		pages) whose slots are not their frame's; returns those frames."""
		ps = self.page_size
		pages = out.view(-1, ps)
		own = []
		for i, f in enumerate((pages[:, 0] // ps).tolist()):
			slots = self._page_slots.get(f)
			if slots is not None:
				pages[i] = slots
				own.append(f)
		return own

	# ---- KV events: SGLang's recorder, given nodes as RadixCache's ----
	def _events_stored(self, key: Any, ids: Any, a: int, b: int, frames: List[int]) -> None:
		"""BlockStored of @key's tokens [@a, @b) (whole pages new to the tree,
		of @frames), as RadixCache records the node it adds for them: a
		page's hash chains the pages before it, so the hashes of the
		prefix are those of its tokens whatever nodes hold them."""
		ps = self.page_size
		extra, salt = key.extra_key, getattr(key, "cache_salt", None)
		root = _EventNode(RadixKey(array("q")), None, [], None)
		whole = _EventNode(RadixKey(array("q", ids[:b]), extra, cache_salt=salt), root)
		hv = whole.hash_value = compute_node_hash_values(whole, ps)
		ev = None if (extra, salt) == (None, None) else \
			compute_node_event_hash_values(whole, ps)
		p = a // ps
		parent = root
		if p:
			parent = _EventNode(RadixKey(array("q", ids[:a]), extra, cache_salt=salt), root,
					    hv[:p], ev[:p] if ev is not None else None)
		node = _EventNode(RadixKey(array("q", ids[a:b]), extra, cache_salt=salt), parent,
				  hv[p:], ev[p:] if ev is not None else None)
		self.kv_events.record_store(node)
		for i, f in enumerate(frames):
			self._event_pages[f] = ((extra, salt), hv[p + i],
						ev[p + i] if ev is not None else None)

	def _events_removed(self, frames: List[int]) -> None:
		"""BlockRemoved of the pages of @frames, leaving the tree in this
		order, as RadixCache records its leaves' (one event a run of one
		namespace: SGLang's queue joins consecutive removals anyway)."""
		ps = self.page_size
		run: List[Tuple[Any, str, Optional[str]]] = []
		for f in frames + [None]:
			page = self._event_pages.pop(f, None) if f is not None else None
			if run and (page is None or page[0] != run[0][0]):
				(extra, salt), n = run[0][0], len(run)
				node = _EventNode(RadixKey(array("q", bytes(8 * n * ps)), extra,
							   cache_salt=salt), None,
						  [x[1] for x in run],
						  [x[2] for x in run] if run[0][2] is not None else None)
				self.kv_events.record_remove(node)
				run = []
			if page is not None:
				run.append(page)

	# ---- BasePrefixCache ----
	def match_prefix(self, params: Any) -> MatchResult:
		key = params.key
		ids = key.token_ids
		if type(key) is RadixKey and key.limit is None and not key.is_bigram:
			n = len(ids)				# len(key), without its calls
		else:
			n = len(key)
		if n == 0 or self.disable:
			return MatchResult(0, self.root_node, self.root_node, self.root_node)
		if type(ids) is not array or ids.typecode != "q":
			ids = _ids(ids, n)
		tag = (key.extra_key, getattr(key, "cache_salt", None))
		ns = self._ns.get(tag)
		if ns is None:
			ns = self._ns_tag(tag)
		node = FrameNode()
		node._owner = self._ctx._serial
		h = node._h
		# the address last, after what may run Python code (the key's hash
		# may resize the array; it is read as it is now)
		addr, have = ids.buffer_info()
		got = _match(self._r, ns, addr, min(n, have), h)
		if got < 0:
			self._raise(got, "kvmm_frames_match")
		self._matched = node, got
		if _MATCH_REST is None:
			return MatchResult(got, node, node, node)
		return _tuple_new(MatchResult, (got, node, node, node) + _MATCH_REST)

	def path_device_indices(self, node: Any) -> torch.Tensor:
		try:
			h = node._h
		except AttributeError:
			raise TypeError(f"path_device_indices() takes a FrameNode, not "
					f"{type(node).__name__}") from None
		if not self._mine(node):
			self._raise(-errno.ESTALE, "kvmm_frames_path")
		# the node the last match returned: its path is as long as the match
		# said (unless the tree changed since), and one call fills it in
		last, room = self._matched
		if last is not node:
			room = 0
		out = torch.empty(room, dtype=_I64) if room else self._empty
		n = _path_slots(self._r, h, out.data_ptr() if room else 0, room)
		if n <= 0:
			if n < 0:
				self._raise(n, "kvmm_frames_path")
			return self._empty
		if n != room:
			out = torch.empty(n, dtype=_I64)
			_slots(self._r, out.data_ptr(), 1)
		if self._page_slots:
			self._own_slots(out)
		return out if self._on_cpu else out.to(self.device)

	def insert(self, params: Any) -> Any:
		"""RadixCache.insert(): the key's pages with @params.value's slots;
		returns InsertResult(prefix_len = tokens the tree had)."""
		from sglang.srt.mem_cache.base_prefix_cache import InsertResult

		if self.disable:
			return InsertResult(prefix_len=0)
		key = params.key
		value = params.value
		ps = self.page_size
		n = len(key) // ps * ps
		ids = _ids(key.token_ids, n)
		tokens = np.frombuffer(ids, dtype=np.int64, count=n)
		if n and (tokens.min() < 0 or tokens.max() >= 1 << 32):
			raise ValueError("kvmm radix cache: token ids must fit 32 bits")
		if value is None:	# RadixCache's debugging fallback: the token ids as slots
			value = torch.from_numpy(tokens.copy())
		pages = value[:n].to("cpu", torch.int64).reshape(-1, ps)
		frames = pages[:, 0] // ps
		odd = None
		if ps > 1 and n:
			odd = ((pages != pages[:, :1] + torch.arange(ps)).any(1) | (pages[:, 0] % ps != 0))
			if not odd.any():
				odd = None
			elif self._pages:
				raise ValueError(f"kvmm radix cache: slots {pages[odd][0].tolist()} are not "
						 f"a page of {type(self.token_to_kv_pool_allocator).__name__}'s "
						 f"(a page's slots are page * {ps} + 0..{ps - 1})")
		had, _, node = self._ctx.frames_extend(tokens.astype(np.uint32), frames.numpy(),
						       self.root_node, 0,
						       inserted_len=getattr(params, "inserted_len", 0),
						       ns=self._ns_of(key))
		if odd is not None:	# the new pages' own slots, by their frames
			for i in odd[had // ps:].nonzero().flatten().tolist():
				i += had // ps
				self._page_slots[int(frames[i])] = pages[i].clone()
		if self.kv_events.enabled and had < n:
			self._events_stored(key, ids, had, n, frames[had // ps:].tolist())
		return InsertResult(prefix_len=had, last_device_node=node)

	def checkpoint(self, req: Any, *, up_to: int, **kwargs: Any) -> None:
		"""Cache req's row up to @up_to as RadixCache does: insert the
		page-aligned key (and split it at the prompt's end), free the slots
		the tree had already, repoint the row at the tree's, and move the
		request's lock to the new end.  One C call where req_to_token is a
		CPU tensor; through a copy of the row where it is not."""
		if self.disable:
			return
		kv = req.kv
		if getattr(kv, "swa_evict_floor", 0) > 0:
			raise ValueError("kvmm radix cache: sliding-window requests are not supported")
		ids = req.full_untruncated_fill_ids
		n = len(ids)
		n = up_to if 0 <= up_to <= n else len(range(n)[:up_to])	# len(ids[:up_to])
		ps = self.page_size
		key_len = n - n % ps
		prompt = len(req.origin_input_ids)
		prompt = key_len if prompt >= n else prompt - prompt % ps
		if type(ids) is not array or ids.typecode != "q":
			ids = _ids(ids, key_len)
		protected = kv.cache_protected_len
		idx = kv.req_pool_idx
		rt = self.req_to_token_pool.req_to_token
		if rt is self._rt and self._rt_ok and 0 <= idx < self._rt_rows and \
				key_len <= self._rt_len:
			row = rt.data_ptr() + idx * self._rt_len * 4	# _row(), without its call
		else:
			row = self._row(idx, key_len)
		copy = None
		if not row:	# a device table: work on a CPU copy of the row
			copy = self.req_to_token_pool.req_to_token[idx, :key_len].to(
				"cpu", torch.int32, copy=True).contiguous()
			row = copy.data_ptr()
		old = req.lock
		if old is not None and not self._mine(old.node):
			raise ValueError(f"kvmm radix cache: unlock of {old.node!r}, a node of another "
					 f"tree (another cache's, or this one's before a reset)")
		last = FrameNode()
		last._owner = self._ctx._serial
		tag = (req.extra_key, req.cache_salt or None)
		ns = self._ns.get(tag)
		if ns is None:
			ns = self._ns_tag(tag)
		inserted = kv.cache_inserted_len
		unlock = old.node._h if old is not None else _NULL
		h = last._h
		# the address last, after what may run Python code (the key's hash
		# may resize the array, freeing the memory it was at)
		addr, have = ids.buffer_info()
		if have < key_len:
			raise IndexError(f"kvmm radix cache: the request's token ids shrank to {have} "
					 f"under checkpoint(up_to={up_to})")
		ret = _checkpoint(self._r, ns, addr, key_len, prompt, row, protected, inserted,
				  unlock, h, self._pages)
		dups = ret
		if ret < 0:
			if ret != _ENOLCK:
				self._raise(ret, "kvmm_frames_extend")
			dups = self._r.nr_out
		if copy is not None and protected < key_len:
			self.req_to_token_pool.write((idx, slice(protected, key_len)),
						     copy[protected:key_len].to(self.device))
		if dups:		# the row's slots the tree had already
			if self._free_now is not None:
				self._free_now(self._out[:dups].clone())
			else:
				self._free(self._out[:dups].clone(), protected)
		if self.kv_events.enabled:
			had = protected + dups * (ps if self._pages else 1)
			if had < key_len:	# the pages new to the tree: the row's own slots
				rt = copy if copy is not None else \
					self.req_to_token_pool.req_to_token[idx, :key_len]
				self._events_stored(RadixKey(ids, req.extra_key, cache_salt=tag[1]), ids,
						    had, key_len, (rt[had:key_len:ps].long() // ps).tolist())
		if key_len > kv.cache_inserted_len:
			kv.cache_inserted_len = key_len
		kv.cache_protected_len = key_len
		if ret == _ENOLCK:
			raise ValueError(f"kvmm radix cache: unlock of {old.node!r}, which holds no lock")
		req.lock = _TreeLock(last, self._receipt)
		req.last_node = last

	def free_kv_row(self, kv: Any, ranges: list) -> None:
		"""BasePrefixCache.free_kv_row(): the row's [start, end) slots back to
		the allocator.  One range of a request with no sliding-window
		cursor (all this cache takes) is one C call and one free; anything
		else goes SGLang's way."""
		if len(ranges) == 1 and not getattr(kv, "component_evicted_seqlens", 1):
			start, end = ranges[0]
			ps = self.page_size
			if 0 <= end <= start:
				return		# nothing to free
			if 0 <= start and not start & (ps - 1):
				idx = kv.req_pool_idx
				rt = self.req_to_token_pool.req_to_token
				if rt is self._rt and self._rt_ok and 0 <= idx < self._rt_rows and \
						end <= self._rt_len:
					row = rt.data_ptr() + idx * self._rt_len * 4	# as in checkpoint()
				else:
					row = self._row(idx, end)
				if row:
					n = (end - start + ps - 1) // ps if self._pages else end - start
					# (a table wider than the one the cache was made for
					# has rows longer than the buffer)
					keep = n <= self._spare_len and self._free_now is not None
					if keep and self._alloc.need_sort is False:
						out = self._spare.get(n)
						if out is None:
							out = self._spare_view(n)
						ptr = self._spare_ptr
					else:
						out = torch.empty(n, dtype=_I64)
						ptr = out.data_ptr()
					_row_free(self._r, row, start, end, ptr, self._pages)
					if self._free_now is not None:
						self._free_now(out)
					else:
						self._free(out, start)
					return
		super().free_kv_row(kv, ranges)

	def evict(self, params: EvictParams) -> EvictResult:
		"""Whole unlocked leaves, least recently used first, until
		@params.num_tokens are freed; their slots go back to the allocator,
		whose free list ends up as RadixCache's leaf-by-leaf frees leave
		it (in one call to SGLang's own allocators)."""
		if self.disable or params.num_tokens <= 0:
			return EvictResult()
		ps = self.page_size
		r = self._r
		pages = min(-(-params.num_tokens // ps), self._max_frames)
		expand = 0 if self._pages else 1	# slots, not page ids
		# one call: the frames, and their slots (or page ids) at _spare_buf
		got = _evict(r, pages, self._prepends, self._spare_ptr, expand)
		if got <= 0:
			if got < 0:
				self._raise(got, "kvmm_frames_evict")
			return EvictResult()
		n = got * ps if expand else got
		if self._free_now is not None and self._alloc.need_sort is False:
			out = self._spare.get(n)
			if out is None:
				out = self._spare_view(n)
		else:
			out = self._spare_buf[:n].clone()
		if self.kv_events.enabled:
			frames = (out[::ps] // ps if expand else out).tolist()
			if self._prepends and r.nr_leaves > 1:	# laid out last leaf first
				ends = [r.leaves[i] for i in range(r.nr_leaves)]
				order, top = [], len(frames)
				for start, end in zip([0] + ends, ends):
					order += frames[top - (end - start):top]
					top -= end - start
				frames = order
			self._events_removed(frames)
		if self._page_slots:
			for f in self._own_slots(out):
				del self._page_slots[f]
		if self._free_now is not None:
			self._free_now(out)
		elif self._free_pages is not None or r.nr_leaves == 1:
			self._free(out, 0)
		else:
			step = ps if expand else 1
			ends = [r.leaves[i] * step for i in range(r.nr_leaves)]
			for start, end in zip([0] + ends, ends):
				self._free(out[start:end], 0)
		return _EvictResult(got * ps)

	def lock(self, node: Any) -> TreeLock:
		"""BasePrefixCache.lock(): inc_lock_ref() and the receipt a legacy
		cache's release takes (an empty DecLockRefParams: this cache's one,
		which its unlock() does not read)."""
		if not self.disable:
			h = getattr(node, "_h", None)
			if h is None or not self._mine(node) or _lock(self._c, h, 1) < 0:
				self._lock_ref(node, 1)		# raises
		return _TreeLock(node, self._receipt)

	def unlock(self, lock: Any) -> None:
		if lock is not None and not self.disable:
			node = lock.node
			h = getattr(node, "_h", None)
			if h is None or not self._mine(node) or _lock(self._c, h, -1) < 0:
				self._lock_ref(node, -1)	# raises

	def _lock_ref(self, node: Any, delta: int) -> int:
		try:
			h = node._h
		except AttributeError:
			raise TypeError(f"kvmm radix cache: a lock of a FrameNode, not "
					f"{type(node).__name__}") from None
		ret = _lock(self._c, h, delta) if self._mine(node) else -errno.ESTALE
		if ret < 0:
			err = make_error(ret, "kvmm_frames_lock")
			if delta < 0:
				raise ValueError(f"kvmm radix cache: dec_lock_ref of {node!r}, which "
						 f"holds no lock") from err
			raise err
		return ret

	def inc_lock_ref(self, node: Any) -> IncLockRefResult:
		if self.disable:
			return IncLockRefResult(delta=0)
		return IncLockRefResult(delta=-self._lock_ref(node, 1))

	def dec_lock_ref(self, node: Any, params: Any = None) -> DecLockRefResult:
		"""Unlocking a node that holds no lock raises ValueError (SGLang's own
		tree lets the count go negative), and changes nothing."""
		if self.disable:
			return DecLockRefResult(delta=0)
		return DecLockRefResult(delta=self._lock_ref(node, -1))

	def supports_prefix_sharing(self) -> bool:
		return not self.disable

	def evictable_size(self) -> int:
		return self._ctx.frames_sizes()[0]

	def protected_size(self) -> int:
		return self._ctx.frames_sizes()[1]

	def total_size(self) -> int:
		ev, pr = self._ctx.frames_sizes()
		return ev + pr

	def all_values_flatten(self) -> torch.Tensor:
		"""Every slot the tree holds (RadixCache's, in the order of its nodes;
		here by frame): a debugging walk over the pool, not a hot path."""
		ps = self.page_size
		frames = torch.from_numpy(self._ctx.frames_cached().astype(np.int64))
		out = (frames[:, None] * ps + torch.arange(ps)).reshape(-1)
		if self._page_slots:
			self._own_slots(out)
		return out if self._on_cpu else out.to(self.device)

	def pretty_print(self) -> None:
		ev, pr = self._ctx.frames_sizes()
		print(f"kvmm radix cache: {ev} evictable + {pr} protected tokens, "
		      f"{len(self._ns)} key namespaces, page size {self.page_size}")

	def dfs_weight_order(self, node_handles: Any) -> Any:
		raise NotImplementedError("kvmm radix cache: the dfs-weight schedule policy walks "
					  "SGLang's own tree nodes; use lpm or fcfs")


# the methods kvmm._radix does in C
_FAST = ("match_prefix", "lock", "path_device_indices", "checkpoint", "free_kv_row", "unlock",
	 "evict")


def _fast_env() -> Dict[str, Any]:
	"""What kvmm._radix.Radix calls and answers with: SGLang's classes, the
	tensor constructor, and the Python methods it hands the rest to."""
	env = {"node_type": FrameNode, "radix_key": RadixKey, "match_result": MatchResult,
	       "match_rest": _MATCH_REST, "tree_lock": _TreeLock, "evict_result": _EvictResult,
	       "empty": torch.empty, "empty_kw": {"dtype": _I64}}
	env.update((name, getattr(KvmmRadixCache, name)) for name in _FAST)
	return env


def cpu_tree_cache(cls: Any, page_size: int, tokens: int, rows: int = 8,
		   max_context_len: int = 256, policy: str = "lru", events: bool = False) -> Any:
	"""A tree cache of @cls (RadixCache or KvmmRadixCache) over its own CPU
	ReqToTokenPool of @rows rows and a slot allocator of @tokens tokens, as
	SGLang builds them: the side-by-side tests' and the replay benchmark's.
	@events turns SGLang's KV events on (enable_kv_cache_events).
	Returns an object with .cache, .pool and .alloc."""
	from types import SimpleNamespace

	from sglang.srt.mem_cache.allocator import (PagedTokenToKVPoolAllocator,
						    TokenToKVPoolAllocator)
	from sglang.srt.mem_cache.cache_init_params import CacheInitParams
	from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

	pool = ReqToTokenPool(size=rows, max_context_len=max_context_len, device="cpu",
			      enable_memory_saver=False)
	if page_size == 1:
		alloc = TokenToKVPoolAllocator(size=tokens, dtype=torch.float16, device="cpu",
					       kvcache=None, need_sort=False)
	else:
		alloc = PagedTokenToKVPoolAllocator(size=tokens, page_size=page_size,
						    dtype=torch.float16, device="cpu", kvcache=None,
						    need_sort=False)
	cache = cls(CacheInitParams(disable=False, req_to_token_pool=pool,
				    token_to_kv_pool_allocator=alloc, page_size=page_size,
				    eviction_policy=policy, enable_kv_cache_events=events))
	return SimpleNamespace(cache=cache, pool=pool, alloc=alloc)


def _factory(ctx: Any) -> KvmmRadixCache:
	return KvmmRadixCache(ctx.params)


def register() -> None:
	"""The ``sglang.srt.plugins`` entry point: registers the radix-cache
	backend ``kvmm`` (``--radix-cache-backend kvmm``).  Idempotent."""
	from sglang.srt.mem_cache.registry import (register_radix_cache_backend,
						    registered_radix_cache_backends)

	if "kvmm" not in registered_radix_cache_backends():
		register_radix_cache_backend("kvmm", _factory)
