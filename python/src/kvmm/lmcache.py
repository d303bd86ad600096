# SPDX-License-Identifier: MIT
"""kvmm as an L2 store of LMCache (0.5.6), through its ``native_plugin`` adapter.

LMCache wraps a native connector (event_fd, submit_batch_get/set/exists/
delete, drain_completions, close) in its NativeConnectorL2Adapter; this is
one, over kvmm's keyed store, in the engine's process or shared by every
engine attached to one kvmmd.  LMCache takes it as an L2 adapter::

    --l2-adapter '{"type": "native_plugin", "module_path": "kvmm.lmcache",
                   "class_name": "KvmmNativeConnector",
                   "adapter_params": {"socket": "/run/kvmmd.sock",
                                      "model_id": "llama-3.1-8b@main"},
                   "max_capacity_gb": 64}'

adapter_params: ``socket``, ``ns``, ``model_id``, ``host_bytes``,
``nvme_path``, ``nvme_bytes``, ``page_bytes``, ``threads``,
``ring_bytes``, ``remote``, ``remote_salt``, ``remote_timeout_ms``,
``remote_user``, ``remote_password``
(kvmm.KeyedStore's).  Keys (``model@rank@group@hash``
strings) become 128-bit keys by kvmm.key_of() (BLAKE2b-128).  A value is
stored in the space of its size; a get reads the value of the buffer's
size.  See Documentation/admin-guide/engines.rst.
"""
import itertools
import os
import threading
from typing import Any, List, Optional, Sequence, Tuple

from ._store import KeyedStore

__all__ = ["KvmmNativeConnector"]

Completion = Tuple[int, bool, str, Optional[List[bool]]]


class KvmmNativeConnector:
	"""LMCache's native connector interface over :class:`kvmm.KeyedStore`.

	Every submit returns a future id at once; its completion, (id, ok,
	error, a bool per key), comes out of drain_completions() once the event
	fd is readable.  ok is True for a set or get when every key was stored
	or read, for an exists or delete when it ran (the bools say which keys
	are stored, or went).  Buffers must stay valid until their completion
	is drained, as LMCache keeps them.
	"""

	def __init__(self, socket: Optional[str] = None, ns: Optional[int] = None,
		     model_id: str = "lmcache", host_bytes: int = 1 << 30,
		     nvme_path: Optional[str] = None, nvme_bytes: int = 0,
		     page_bytes: int = 1 << 16, threads: int = 2,
		     ring_bytes: int = 64 << 20, remote: Optional[str] = None,
		     remote_salt: Optional[str] = None, remote_timeout_ms: int = 0,
		     remote_user: Optional[str] = None, remote_password: Optional[str] = None) -> None:
		self._store = KeyedStore(model_id, socket=socket, ns=ns, host_bytes=host_bytes,
					 nvme_path=nvme_path, nvme_bytes=nvme_bytes,
					 page_bytes=page_bytes, threads=threads,
					 ring_bytes=ring_bytes, remote=remote, remote_salt=remote_salt,
					 remote_timeout_ms=remote_timeout_ms, remote_user=remote_user,
					 remote_password=remote_password)
		self._ids = itertools.count(1)
		self._id_lock = threading.Lock()
		self._closed = False

	def event_fd(self) -> int:
		return self._store.event_fd

	def _submit(self, op: str, keys: Sequence[str], bufs: Any = None) -> int:
		with self._id_lock:
			fid = next(self._ids)
		self._store.submit(fid, op, [k.encode() if isinstance(k, str) else k for k in keys],
				   list(bufs) if bufs is not None else None)
		return fid

	def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
		return self._submit("put", keys, memoryviews)

	def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
		return self._submit("get", keys, memoryviews)

	def submit_batch_exists(self, keys: Sequence[str]) -> int:
		return self._submit("exists", keys)

	def submit_batch_delete(self, keys: Sequence[str]) -> int:
		return self._submit("delete", keys)

	def drain_completions(self) -> List[Completion]:
		out: List[Completion] = []
		for c in self._store.take():
			per_key = [bool(r == 0) for r in c.res]
			if c.op in ("exists", "delete"):
				ok = not c.error
			else:
				ok = c.ok
			err = c.error or ("" if ok else self._why(c.res))
			out.append((c.tag, ok, err, per_key))
		return out

	@staticmethod
	def _why(res: Any) -> str:
		bad = [int(r) for r in res if r]
		first = -bad[0]
		return (f"kvmm: {len(bad)} of {len(res)} keys failed, the first with "
			f"{os.strerror(first)}")

	def close(self) -> None:
		if not self._closed:
			self._closed = True
			self._store.close()

	def __del__(self) -> None:
		if not getattr(self, "_closed", True):
			self.close()
