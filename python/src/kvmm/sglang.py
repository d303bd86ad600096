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
``nvme_path``/``nvme_bytes``, ``page_bytes``), ``ns``, ``threads``,
``ring_bytes``.
``interface_v1`` makes SGLang use batch_get_v1/batch_set_v1, which move
each page between the host pool and kvmm without a copy of ours where the
pool's layout keeps a page's K and its V contiguous (page_first,
page_first_direct); layer_first pages go through one flat copy.  See
Documentation/admin-guide/engines.rst.
"""
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from ._store import KeyedStore

__all__ = ["KvmmHiCacheStorage", "cpu_host_pool"]

_OPTIONS = ("socket", "ns", "host_bytes", "nvme_path", "nvme_bytes", "page_bytes", "threads",
	    "ring_bytes")
_ZERO_COPY = ("page_first", "page_first_direct")


def _byte_view(t: torch.Tensor) -> memoryview:
	"""A contiguous CPU tensor's bytes, without a copy."""
	return memoryview(t.view(torch.uint8).numpy()).cast("B")


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
	its ranks), mapped to 128 bits by kvmm.key_of().  A page is stored as
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
		self.suffix = f"_{model}" if self.is_mla else \
			f"_{model}_{storage_config.tp_rank}_{storage_config.tp_size}"
		if getattr(storage_config, "pp_size", 1) > 1:
			self.suffix += f"_{storage_config.pp_size}_{storage_config.pp_rank}"
		if getattr(storage_config, "attn_cp_size", 1) > 1:
			self.suffix += f"_cp{storage_config.attn_cp_rank}_{storage_config.attn_cp_size}"
		self._rank_suffix = self.suffix
		self.parts = ("",) if self.is_mla else ("_k", "_v")
		self.store = KeyedStore(f"sglang:{model}", **opts)
		self.mem_pool_host: Any = None

	# ---- the host pool ----
	def register_mem_pool_host(self, mem_pool_host: Any) -> None:
		"""Keep the pool; its layout joins the keys' suffix (page_first lays a
		page's bytes out token by token, the others layer by layer: pages
		of different layouts are never mixed up)."""
		super().register_mem_pool_host(mem_pool_host)
		layout = getattr(mem_pool_host, "layout", None)
		self.suffix = self._rank_suffix + (f"_{layout}" if layout else "")

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

	# ---- the v1 interface: pages between the host pool and kvmm ----
	def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
			 extra_info: Any = None) -> List[bool]:
		if self.mem_pool_host is None or getattr(self.mem_pool_host, "kv_buffer", 1) is None:
			return [True] * len(keys)
		views = self._page_views(host_indices, len(keys))
		if views is None:	# one flat copy per page, split in its parts
			views = []
			ps = self.mem_pool_host.page_size
			for i in range(len(keys)):
				flat = self.mem_pool_host.get_data_page(int(host_indices[i * ps]), flat=True)
				views += [_byte_view(c.contiguous()) for c in flat.chunk(len(self.parts))]
		return self._pages_ok(self.store.call("put", self._names(keys), views), len(keys))

	def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
			 extra_info: Any = None) -> List[bool]:
		if self.mem_pool_host is None or getattr(self.mem_pool_host, "kv_buffer", 1) is None:
			return [True] * len(keys)
		views = self._page_views(host_indices, len(keys))
		if views is not None:
			return self._pages_ok(self.store.call("get", self._names(keys), views), len(keys))
		pool = self.mem_pool_host	# through flat pages, all in one batch
		flats = [pool.get_dummy_flat_data_page() for _ in keys]
		views = [_byte_view(c) for f in flats for c in f.chunk(len(self.parts))]
		ok = self._pages_ok(self.store.call("get", self._names(keys), views), len(keys))
		for i, good in enumerate(ok):
			if good:
				pool.set_from_flat_data_page(int(host_indices[i * pool.page_size]), flats[i])
		return ok

	def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
		"""How many of @keys, from the first on, are stored (every part of each)."""
		if not keys:
			return 0
		res = self.store.call("exists", self._names(keys))
		for i, good in enumerate(self._pages_ok(res, len(keys))):
			if not good:
				return i
		return len(keys)

	def exists(self, key: str) -> bool:
		return self.batch_exists([key]) == 1

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
