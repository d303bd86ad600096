# SPDX-License-Identifier: MIT
"""What the engine adapters share: the keyed page store served off the caller's thread.

An engine's offloading interface (vLLM's secondary tier, LMCache's native
connector) submits batches of puts and gets and must not wait for them.
:class:`KeyedStore` takes a batch, runs it on one of its worker threads
through a command ring of that thread's own, and queues its completion;
an eventfd (:attr:`KeyedStore.event_fd`) is readable while completions
wait to be taken.

The store is either in this process (a :class:`kvmm.Context` made for it:
host tier, optionally NVMe; values go in and out of the caller's memory
with no copy besides the store's own) or kvmmd's (``socket``: every
engine process that connects shares its host and NVMe tiers; values cross
through each ring's data area, one copy each way).  Values of one size
share a space (ns, model_id, value_bytes); a batch of mixed sizes is
split per space.
"""
import collections
import errno
import os
import queue
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._core import Context
from ._errors import make_error
from ._keyed import _buffer, keys_array
from ._kvmm import ffi
from ._ring import Ring, connect

__all__ = ["KeyedStore", "Completion"]

# Entries a KPUT/KGET/KEXISTS/KDELETE may carry (KVMM_KIO_MAX in the C core)
_KIO_MAX = 4096
_ENTRY = ffi.sizeof("struct kvmm_kent")
# An in-process store's tier options and the kvmmd flags that set them for its store
_KVMMD_FLAGS = {"host_wmark_low": "--host-wmark-low", "host_wmark_high": "--host-wmark-high",
		"nvme_qd": "--nvme-qd", "nvme_flags": "--nvme-reformat"}


class Completion:
	"""One batch done: @tag as submitted, @res an int32 array (0 or -errno per
	key), @error a message when the batch failed as a whole ('' otherwise),
	@nbytes of values moved, @seconds it took from submit."""

	__slots__ = ("tag", "op", "res", "error", "nbytes", "seconds")

	def __init__(self, tag: Any, op: str, res: np.ndarray, error: str, nbytes: int,
		     seconds: float) -> None:
		self.tag, self.op, self.res, self.error = tag, op, res, error
		self.nbytes, self.seconds = nbytes, seconds

	@property
	def ok(self) -> bool:
		"""Every key succeeded (stored, read, found, deleted)."""
		return not self.error and not self.res.any()


class _Job:
	__slots__ = ("tag", "op", "keys", "bufs", "t0", "prefetch")

	def __init__(self, tag: Any, op: str, keys: np.ndarray, bufs: Optional[List[memoryview]],
		     prefetch: bool = False):
		self.tag, self.op, self.keys, self.bufs = tag, op, keys, bufs
		self.prefetch = prefetch
		self.t0 = time.monotonic()


class KeyedStore:
	"""The keyed page store for an engine adapter (see the module's docstring).

	@model_id: the identity of the model whose KV the values are; a value is
	only ever served under the identity it was stored with.  @socket: kvmmd's
	socket (shared store); None: a store in this process, of @host_bytes of
	host memory and, with @nvme_path, @nvme_bytes of that file, cut in pages
	of @page_bytes.  @ns: the namespace (a tenant's; through kvmmd the ring
	is bound to it).  @threads: worker threads (rings).  @ring_bytes: each
	ring's data area through kvmmd (values cross it; a batch larger is split).
	@remote: an in-process store's Redis Cluster ("host:port,..."), shared
	with other machines under @remote_salt (kvmmd has its own --remote);
	@remote_timeout_ms: its batches' deadline; @remote_user and
	@remote_password: AUTH on every connection to it (kvmmd's
	--remote-user, --remote-password-file).

	An in-process store with an NVMe tier also takes (kvmmd's store is set
	by its --host-wmark-low, --host-wmark-high, --nvme-qd, --nvme-reformat):
	@host_wmark_low, @host_wmark_high: background writeback starts when
	fewer than @host_wmark_low host pages (of @page_bytes) are free and
	writes the oldest values down to NVMe until @host_wmark_high are (at
	most the host tier's pages; both 0: the library's 1/8 and 1/4 of it);
	@nvme_qd: the NVMe tier's io_uring queue depth (0: 32); @nvme_flags:
	kvmm.NVME_REFORMAT formats @nvme_path afresh instead of recovering what
	it holds.  :meth:`sync` waits for the writeback.
	"""

	def __init__(self, model_id: str, socket: Optional[str] = None, ns: Optional[int] = None,
		     host_bytes: int = 1 << 30, nvme_path: Optional[str] = None,
		     nvme_bytes: int = 0, page_bytes: int = 1 << 16, threads: int = 2,
		     ring_bytes: int = 64 << 20, connect_timeout: float = 10.0,
		     remote: Optional[str] = None, remote_salt: Optional[str] = None,
		     remote_timeout_ms: int = 0, host_wmark_low: int = 0, host_wmark_high: int = 0,
		     nvme_qd: int = 0, nvme_flags: int = 0, remote_user: Optional[str] = None,
		     remote_password: Optional[str] = None) -> None:
		if not model_id:
			raise ValueError("kvmm: model_id must name the model (and its revision)")
		if threads < 1:
			raise ValueError(f"kvmm: threads = {threads}; at least 1")
		tier = dict(host_wmark_low=host_wmark_low, host_wmark_high=host_wmark_high,
			    nvme_qd=nvme_qd, nvme_flags=nvme_flags)
		for name, val in tier.items():
			if isinstance(val, bool) or not isinstance(val, int) or val < 0:
				raise ValueError(f"kvmm: {name} = {val!r}; an int >= 0")
		self.model_id, self.socket, self.ns = model_id, socket, ns or 0
		self._ctx: Optional[Context] = None
		if socket is None:
			if page_bytes < 64 or page_bytes & (page_bytes - 1):
				raise ValueError(f"kvmm: page_bytes = {page_bytes}: a power of two >= 64")
			if host_bytes < page_bytes:
				raise ValueError(f"kvmm: host_bytes = {host_bytes}: at least a page "
						 f"({page_bytes})")
			# pages of 4 tokens (a value's key takes 4 token words of its node:
			# a page of 4 holds the smallest value in one page) of K and V
			params: Dict[str, Any] = dict(
				layers=1, kv_heads=1, head_dim=page_bytes // 8, dtype_bytes=1,
				page_size=4, nr_pages=16, max_seqs=1, max_seq_len=64,
				host_pages=host_bytes // page_bytes, model_id=model_id)
			if nvme_path:
				params.update(nvme_path=nvme_path, nvme_pages=nvme_bytes // page_bytes)
			params.update((k, v) for k, v in tier.items() if v)
			if remote:
				params.update(remote=remote, remote_salt=remote_salt or "",
					      remote_timeout_ms=remote_timeout_ms,
					      remote_user=remote_user, remote_password=remote_password)
			self._ctx = Context(**params)
			self._open: Callable[[], Ring] = lambda: self._ctx.ring(  # type: ignore
				sq_entries=64, buf_size=1 << 20)
		else:
			if remote or remote_user or remote_password:
				raise ValueError("kvmm: remote= is kvmmd's --remote when the store "
						 "is kvmmd's (socket=)")
			given = [_KVMMD_FLAGS[k] for k, v in tier.items() if v]
			if given:
				raise ValueError(f"kvmm: the store is kvmmd's (socket=): its tiers "
						 f"are set by kvmmd's {', '.join(given)}")
			self._open = lambda: connect(socket, sq_entries=64, buf_size=ring_bytes,
						     timeout=connect_timeout, ns=ns)
		self.local = socket is None
		self._lock = threading.RLock()		# the control ring, the spaces
		self._spaces: Dict[int, int] = {}	# value_bytes: space id
		self._looked_for_spaces = 0.0
		self._ctl = self._open()
		self._q: "queue.SimpleQueue[Optional[_Job]]" = queue.SimpleQueue()
		self._done: Deque[Completion] = collections.deque()
		self._cv = threading.Condition()
		self._inflight = 0
		self._closed = False
		self.event_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
		self._rings: List[Ring] = []
		self._caller_rings: List[Ring] = []	# call()'s, one per calling thread
		self._tls = threading.local()
		self._threads: List[threading.Thread] = []
		try:
			for i in range(threads):
				self._rings.append(self._open())
		except BaseException:
			self._close_rings()
			raise
		for i in range(threads):
			t = threading.Thread(target=self._worker, args=(self._rings[i],),
					     name=f"kvmm-store-{i}", daemon=True)
			t.start()
			self._threads.append(t)

	# ---- spaces ----
	def space(self, value_bytes: int) -> int:
		"""The id of this store's space of @value_bytes-byte values (made on first use)."""
		sp = self._spaces.get(value_bytes)
		if sp is not None:
			return sp
		with self._lock:
			if value_bytes not in self._spaces:
				b = self._ctl.batch()
				b.kspace(self.model_id, value_bytes, self.ns)
				self._spaces[value_bytes] = self._ctl.submit(b)[0]
			return self._spaces[value_bytes]

	def known_sizes(self, refresh_after: float = 1.0) -> List[int]:
		"""The value sizes this model has spaces of: this store's, and (looked
		up at most every @refresh_after seconds) those other clients made."""
		now = time.monotonic()
		if now - self._looked_for_spaces >= refresh_after:
			self._looked_for_spaces = now
			for rec in self._list_spaces():
				if rec["model_id"] == self.model_id and rec["ns"] == self.ns:
					self._spaces.setdefault(rec["value_bytes"], rec["id"])
		return list(self._spaces)

	def _list_spaces(self) -> List[Dict[str, Any]]:
		if self.ns and not self.local:	# a bound ring may not list the context's spaces
			return []
		with self._lock:
			return self._ctl.kspaces()

	def remove_space(self, value_bytes: int) -> int:
		"""Remove this store's space of @value_bytes-byte values, with every value
		it holds on the host and NVMe tiers; return how many went.  It raises
		kvmm.Busy while one of this store's batches uses the space.  A later
		use of the size makes the space again, empty."""
		with self._lock:
			sp = self.space(value_bytes)	# may submit a batch of its own first
			b = self._ctl.batch()
			b.kspace_remove(sp)
			n = self._ctl.submit(b)[0]
			self._spaces.pop(value_bytes, None)
			return n

	def values(self, value_bytes: int) -> int:
		"""Values stored in the space of @value_bytes, on any tier."""
		sp = self.space(value_bytes)
		return next((r["values"] for r in self._list_spaces() if r["id"] == sp), 0)

	def stats(self) -> Any:
		"""The store's context's statistics (:class:`kvmm.Stats`: keyed_values,
		keyed_host_pages, keyed_nvme_pages, ...)."""
		with self._lock:
			return self._ctl.stats()

	def sync(self) -> None:
		"""Wait for the writeback to NVMe that background reclaim has in
		flight, and settle it: every value it took is then on NVMe
		(:meth:`kvmm.Context.sync`).  Returns at once without an NVMe tier.
		An in-process store's only: kvmmd writes its tiers back on its own
		(kvmm.Error, EOPNOTSUPP, through its socket)."""
		if not self.local:
			raise make_error(-errno.EOPNOTSUPP, "KeyedStore.sync",
					 ["a store through kvmmd cannot wait for kvmmd's writeback"])
		self._open_ctx().sync()

	def check(self) -> None:
		"""Verify every invariant of the store's context: kvmm.Error EUCLEAN
		when one is broken (:meth:`kvmm.Context.check`; through kvmmd its
		CHECK command, what broke in kvmmd's log, and EPERM for a store
		bound to a namespace: the check is of the whole context)."""
		if not self.local:
			with self._lock:
				self._ctl.check()
			return
		self._open_ctx().check()

	def _open_ctx(self) -> Context:
		"""An in-process store's context; ValueError once the store is closed."""
		ctx = self._ctx
		if ctx is None:
			raise ValueError("kvmm: the store is closed")
		return ctx

	# ---- now, on the caller's thread (short: no values move) ----
	def _thread_ring(self) -> Ring:
		"""The calling thread's own ring (made on its first call)."""
		ring = getattr(self._tls, "ring", None)
		if ring is None:
			with self._cv:
				if self._closed:
					raise ValueError("kvmm: the store is closed")
				ring = self._tls.ring = self._open()
				self._caller_rings.append(ring)
		return ring

	def exists_now(self, value_bytes: int, keys: Any, prefetch: bool = False) -> np.ndarray:
		"""For each of @keys, 0 if a value of @value_bytes is stored under it,
		else -ENOENT (KEXISTS, each key answered), on the caller's thread.

		@prefetch: in the same batch, start reading those of them that are on
		NVMe up to the host tier (KPREFETCH: free host pages above the low
		watermark only; it does not wait for the reads), so that a get of
		them soon after reads the host."""
		karr = keys_array(keys)
		return self._keys_cmd(self._thread_ring(), "exists", self.space(value_bytes), karr,
				      prefetch)

	def call(self, op: str, keys: Any, bufs: Optional[Sequence[Any]] = None,
		 prefetch: bool = False) -> np.ndarray:
		"""Run a batch as :meth:`submit` would, but on the caller's thread (a
		ring of its own), and return each key's result (0 or -errno).
		@prefetch (op "exists"): start reading the keys found on NVMe up to
		the host tier too, as :meth:`exists_now` does."""
		job = self._job(None, op, keys, bufs)
		job.prefetch = prefetch
		if not job.keys.shape[0]:
			return np.zeros(0, dtype=np.int32)
		return self._run(self._thread_ring(), job)

	def put_now(self, keys: Any, values: Sequence[Any]) -> np.ndarray:
		"""Store @values under @keys on the caller's thread; each one's result."""
		return self.call("put", keys, values)

	# ---- batches, off the caller's thread ----
	def _job(self, tag: Any, op: str, keys: Any, bufs: Optional[Sequence[Any]]) -> _Job:
		if op not in ("put", "get", "exists", "delete"):
			raise ValueError(f"kvmm: no such keyed operation {op!r}")
		karr = keys_array(keys)
		views = None
		if op in ("put", "get"):
			if bufs is None or len(bufs) != karr.shape[0]:
				raise ValueError(f"kvmm: {op} of {karr.shape[0]} keys needs as many buffers")
			views = [_buffer(b, op == "get") for b in bufs]
			if any(v.nbytes == 0 for v in views):
				raise ValueError("kvmm: an empty value")
		return _Job(tag, op, karr, views)

	def submit(self, tag: Any, op: str, keys: Any, bufs: Optional[Sequence[Any]] = None) -> None:
		"""Queue a batch: @op "put" (bufs: the values), "get" (bufs: where
		they go, each exactly a stored value's size), "exists" or "delete"
		(no bufs).  Its :class:`Completion` comes back with @tag; the buffers
		must stay valid until then."""
		job = self._job(tag, op, keys, bufs)
		with self._cv:
			if self._closed:
				raise ValueError("kvmm: the store is closed")
			self._inflight += 1
		if not job.keys.shape[0]:	# nothing to do: complete now, successfully
			self._complete(job, np.zeros(0, dtype=np.int32), "", 0)
			return
		self._q.put(job)

	def take(self) -> List[Completion]:
		"""Every completion there is (and the event fd read back to quiet)."""
		try:
			os.eventfd_read(self.event_fd)
		except BlockingIOError:
			pass
		out = []
		while self._done:
			out.append(self._done.popleft())
		return out

	@property
	def pending(self) -> int:
		"""Batches submitted and not yet complete."""
		return self._inflight

	def drain(self, timeout: Optional[float] = None) -> bool:
		"""Wait until every batch submitted so far is complete (then take()
		has them all); False if @timeout passed first."""
		with self._cv:
			return self._cv.wait_for(lambda: self._inflight == 0, timeout)

	def close(self) -> None:
		"""Finish the batches running, fail the queued ones (-ECANCELED), stop
		the threads, detach.  Idempotent."""
		with self._cv:
			if self._closed:
				return
			self._closed = True
		for _ in self._threads:
			self._q.put(None)
		for t in self._threads:
			t.join()
		self._close_rings()
		if self._ctx is not None:
			self._ctx.close()
			self._ctx = None
		os.close(self.event_fd)

	def _close_rings(self) -> None:
		for r in self._rings + self._caller_rings + [self._ctl]:
			r.close()

	def __enter__(self) -> "KeyedStore":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()

	# ---- the workers ----
	def _worker(self, ring: Ring) -> None:
		while True:
			job = self._q.get()
			if job is None:
				return
			if self._closed:
				res = np.full(job.keys.shape[0], -errno.ECANCELED, dtype=np.int32)
				self._complete(job, res, "kvmm: the store was closed first", 0)
				continue
			try:
				res = self._run(ring, job)
				err = ""
			except Exception as e:	# the ring failed (kvmmd gone ...): the batch did
				res = np.full(job.keys.shape[0], -errno.EIO, dtype=np.int32)
				err = f"kvmm: {type(e).__name__}: {e}"
			nbytes = sum(v.nbytes for v, r in zip(job.bufs, res) if not r) if job.bufs else 0
			self._complete(job, res, err, nbytes)

	def _complete(self, job: _Job, res: np.ndarray, err: str, nbytes: int) -> None:
		self._done.append(Completion(job.tag, job.op, res, err, nbytes,
					     time.monotonic() - job.t0))
		os.eventfd_write(self.event_fd, 1)
		with self._cv:
			self._inflight -= 1
			self._cv.notify_all()

	def _run(self, ring: Ring, job: _Job) -> np.ndarray:
		"""Run @job on @ring; each key's result."""
		n = job.keys.shape[0]
		res = np.zeros(n, dtype=np.int32)
		if job.op in ("exists", "delete"):
			sizes = self.known_sizes()
			res[:] = -errno.ENOENT
			for vb in sizes:	# a key is one space's at most, in practice
				r = self._keys_cmd(ring, job.op, self._spaces[vb], job.keys,
						   job.prefetch)
				res[r != -errno.ENOENT] = r[r != -errno.ENOENT]
			return res
		assert job.bufs is not None
		groups: Dict[int, List[int]] = collections.defaultdict(list)
		for i, v in enumerate(job.bufs):
			groups[v.nbytes].append(i)
		for vb, idx in groups.items():
			sp = self.space(vb)
			sel = np.asarray(idx)
			res[sel] = self._values_cmd(ring, job.op, sp, vb, job.keys[sel],
						    [job.bufs[i] for i in idx])
		return res

	def _keys_cmd(self, ring: Ring, op: str, sp: int, keys: np.ndarray,
		      prefetch: bool = False) -> np.ndarray:
		out = []
		for s in range(0, keys.shape[0], _KIO_MAX):
			b = ring.batch()
			i = (b.kexists if op == "exists" else b.kdelete)(sp, keys[s:s + _KIO_MAX], each=True)
			if prefetch and op == "exists":	# after the lookup: what it found
				b.kprefetch(sp, keys[s:s + _KIO_MAX])
			ring.submit(b)
			out.append(b.kres(i))
		return np.concatenate(out) if out else np.zeros(0, dtype=np.int32)

	def _values_cmd(self, ring: Ring, op: str, sp: int, vb: int, keys: np.ndarray,
			bufs: List[memoryview]) -> np.ndarray:
		"""KPUT or KGET of values of @vb bytes, as many per command as fit."""
		if self.local:
			return self._values_local(ring, op, sp, vb, keys, bufs)
		# Through kvmmd the values cross the data area, in parts that keep
		# up to eight batches in flight: one part is copied in (or out) while
		# the server works on the others.
		need = vb + _ENTRY + 192		# a value, its entry, alignment
		ring.post_slots = min(8, ring.buf_size // need)	# fewer, larger parts for big values
		if not ring.post_slots:
			ring.post_slots = 8
			raise ValueError(f"kvmm: a value of {vb} bytes does not fit the ring's "
					 f"{ring.buf_size}-byte data area (raise ring_bytes)")
		region = ring.buf_size // ring.post_slots // 64 * 64
		per = min(_KIO_MAX, (region - 128) // (vb + _ENTRY + 64))
		res = np.zeros(len(bufs), dtype=np.int32)
		flight: Dict[int, Tuple[int, int, List[memoryview]]] = {}	# tag: (start, index, part)
		s = 0
		try:
			while s < len(bufs) or flight:
				while s < len(bufs) and len(flight) < ring.post_slots:
					part = bufs[s:s + per]
					b = ring.post_batch()
					try:
						i = (b.kput(sp, keys[s:s + per], part, vb) if op == "put" else
						     b.kget(sp, keys[s:s + per], vb))
						flight[ring.post(b)] = (s, i, part)
					except BaseException:
						ring.discard(b)
						raise
					s += len(part)
				for tag, b, cmd in ring.wait():
					at, i, part = flight.pop(tag)
					if cmd[i] < 0:		# the command failed whole
						res[at:at + len(part)] = cmd[i]
						continue
					res[at:at + len(part)] = b.kres(i)
					if op == "get":
						b.kvalues(i, part, only_read=True)
		finally:
			for tag in list(flight):	# the ring broke: nothing more comes
				ring.discard(ring._posted.pop(tag)[0])
		return res

	def _values_local(self, ring: Ring, op: str, sp: int, vb: int, keys: np.ndarray,
			  bufs: List[memoryview]) -> np.ndarray:
		"""In-process: register the span of the caller's memory the values lie
		in as buffer 1, and name each value by its offset there."""
		out = []
		for s in range(0, len(bufs), _KIO_MAX):
			part = bufs[s:s + _KIO_MAX]
			holds = [ffi.from_buffer("char[]", mv, require_writable=(op == "get"))
				 for mv in part]
			addrs = np.array([int(ffi.cast("uintptr_t", h)) for h in holds], dtype=np.uint64)
			lo = int(addrs.min())
			ring.register([(lo, int(addrs.max()) + vb - lo)])
			b = ring.batch()
			fn = b.kput_at if op == "put" else b.kget_at
			i = fn(sp, keys[s:s + _KIO_MAX], 1, addrs - np.uint64(lo), vb)
			ring.submit(b)
			out.append(b.kres(i))
			del holds
		return np.concatenate(out)
