# SPDX-License-Identifier: MIT
"""The command ring: batched commands to a context, in-process or in kvmmd.

``kvmm.connect(path)`` attaches a ring to a server (kvmmd, or an engine's
kvmm_server_start()); ``Context.ring()`` makes one in-process.  Commands
are collected in a :class:`Batch` and submitted together; completions are
matched by position.  Token arrays are copied into the ring's data area
(buffer 0), the only memory a server in another process can read.
:meth:`Ring.submit_async` awaits the completions on an asyncio loop through
the CQ doorbell (an eventfd, with ``loop.add_reader``): a PROMOTE that
reads from NVMe completes later without blocking the loop or a thread.

A Ring serves one thread at a time: a call while another thread is inside
one on the same ring raises :class:`kvmm.Busy`, and a batch whose part of
the data area a later batch took raises :class:`kvmm.InvalidArgument`
when it is submitted or read, rather than send or return another batch's
bytes.
"""
import asyncio
import dataclasses
import errno
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._core import STAT_NAMES, Stats, ViewOwner, row_slots, tokens_arg
from ._errors import Busy, InvalidArgument, make_error
from ._keyed import keys_array, kspace_dict, kspace_reg, values_arg
from ._kvmm import ffi, lib

__all__ = ["Ring", "Batch", "Pool", "SeqRow", "connect"]

_NAMES = {lib.KVMM_OP_NOP: "NOP", lib.KVMM_OP_OPEN: "OPEN", lib.KVMM_OP_MATCH: "MATCH",
	  lib.KVMM_OP_EXTEND: "EXTEND", lib.KVMM_OP_COMMIT: "COMMIT",
	  lib.KVMM_OP_CLOSE: "CLOSE", lib.KVMM_OP_RETRACT: "RETRACT", lib.KVMM_OP_PIN: "PIN",
	  lib.KVMM_OP_UNPIN: "UNPIN", lib.KVMM_OP_RECLAIM: "RECLAIM",
	  lib.KVMM_OP_PRIO: "PRIO", lib.KVMM_OP_LOOKUP: "LOOKUP",
	  lib.KVMM_OP_PROMOTE: "PROMOTE", lib.KVMM_OP_DROP_CACHES: "DROP_CACHES",
	  lib.KVMM_OP_SEQ_ROW: "SEQ_ROW", lib.KVMM_OP_PROBE: "PROBE",
	  lib.KVMM_OP_KSPACE: "KSPACE", lib.KVMM_OP_KPUT: "KPUT", lib.KVMM_OP_KGET: "KGET",
	  lib.KVMM_OP_KEXISTS: "KEXISTS", lib.KVMM_OP_KDELETE: "KDELETE",
	  lib.KVMM_OP_CHECK: "CHECK", lib.KVMM_OP_FLUSH: "FLUSH",
	  lib.KVMM_OP_PREFETCH: "PREFETCH", lib.KVMM_OP_KPREFETCH: "KPREFETCH"}
_KENT = ffi.sizeof("struct kvmm_kent")
# struct kvmm_kent as numpy sees it: a batch's entries are filled and read whole
_KENT_DTYPE = np.dtype([("key", np.uint8, 16), ("off", "<u8"), ("buf", "<u2"),
			("resv", "<u2"), ("res", "<i4")])
assert _KENT_DTYPE.itemsize == _KENT
_DUMP_RECORDS = {lib.KVMM_DUMP_KSPACES: "struct kvmm_dump_kspace"}
_ROW_HDR = ffi.sizeof("struct kvmm_seq_row")


@dataclasses.dataclass(frozen=True)
class SeqRow:
	"""A sequence's page-table row as SEQ_ROW copied it (struct kvmm_seq_row).

	@frames: int32 page frame numbers, page i of the sequence at frames[i]
	(a copy: valid until the sequence next changes).
	"""

	len: int
	cached: int
	frames: np.ndarray
	page_size: int

	def slots(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
		"""The pool slots of tokens [start, stop) (a new int64 array), as
		Sequence.slots(): IndexError unless 0 <= start <= stop <= len."""
		return row_slots(self.frames, self.page_size, self.len, start, stop)


def _timespec(seconds: Optional[float]) -> Any:
	"""A struct timespec for a relative timeout, or NULL for none."""
	if seconds is None:
		return ffi.NULL
	return ffi.new("struct timespec *", (int(seconds), int(seconds % 1 * 1e9)))


class Batch:
	"""Commands to submit together; each method returns its index in the results."""

	def __init__(self, ring: "Ring", base: int = 0, limit: Optional[int] = None,
		     slot: Optional[int] = None) -> None:
		self.ring = ring
		self.ops: List[Tuple[int, dict]] = []
		self._off = base
		self._limit = ring.buf_size if limit is None else limit
		self.slot = slot	# a posted batch's region of the data area (Ring.post_batch())
		self._rows: Dict[int, int] = {}	# SEQ_ROW index: its output's offset
		self._kio: Dict[int, Tuple[int, Optional[int], int, int]] = {}	# KPUT/KGET ...
		# index: (entries' offset, values' offset in the data area or None, values,
		# value_bytes)
		self._dumps: Dict[int, Tuple[int, int]] = {}	# DUMP index: (offset, kind)

	def _add(self, op: int, **fields: int) -> int:
		self.ops.append((op, fields))
		return len(self.ops) - 1

	def _owns(self) -> bool:
		"""Whether this batch's part of the data area is still its own."""
		ring = self.ring
		if self.slot is None:
			return ring._current is self
		return ring._slot_last.get(self.slot) is self

	def _area(self) -> "Ring":
		"""The ring, checked open, not in another thread's use, and with this
		batch's part of the data area not taken by a later batch."""
		ring = self.ring
		with ring._using:
			if not ring._up:
				raise InvalidArgument(errno.EINVAL, "kvmm: the ring is closed")
			if not self._owns():
				raise InvalidArgument(errno.EINVAL,
						      "kvmm: a later batch took this batch's part of the "
						      "ring's data area: submit a batch and read its "
						      "results before making the next")
		return ring

	def _reserve(self, nbytes: int, align: int = 4) -> int:
		"""Take @nbytes of the data area for this batch; return their offset."""
		self._area()
		off = -(-self._off // align) * align
		if off + nbytes > self._limit:
			raise ValueError(f"the batch's payloads need {off + nbytes} bytes; its part "
					 f"of the ring's data area ends at {self._limit}")
		self._off = off + nbytes
		return off

	def _tokens(self, tokens: Any, n: Optional[int]) -> dict:
		"""Copy tokens[:n] into the data area; return the sqe's buf/off/len."""
		buf, n = tokens_arg(tokens, n)
		off = self._reserve(4 * n)
		ffi.memmove(self.ring._at(off), buf, 4 * n)
		return {"buf": 0, "off": off, "len": n}

	def nop(self) -> int:
		"""NOP: completes with 0."""
		return self._add(lib.KVMM_OP_NOP)

	def open(self, ns: int = 0) -> int:
		"""OPEN: the result is the new sequence's id."""
		return self._add(lib.KVMM_OP_OPEN, ns=ns)

	def match(self, seq: int, tokens: Any, n: Optional[int] = None) -> int:
		"""MATCH: the result is the matched length."""
		return self._add(lib.KVMM_OP_MATCH, seq=seq, **self._tokens(tokens, n))

	def promote(self, seq: int, tokens: Any, n: Optional[int] = None) -> int:
		"""PROMOTE: the result is the sequence's cached length (may complete later)."""
		return self._add(lib.KVMM_OP_PROMOTE, seq=seq, **self._tokens(tokens, n))

	def prefetch(self, tokens: Any, n: Optional[int] = None, ns: int = 0,
		     budget: int = 0, reclaim: bool = False) -> int:
		"""PREFETCH: bring the part of the prompt's cached prefix below the
		device up to it ahead of its MATCH, at most @budget pages (0: the
		free pages above the low watermark; with @reclaim, @budget pages
		taken as an allocation would).  The result is the pages moved (may
		complete later).  Cancel it with :meth:`prefetch_cancel`."""
		if not 0 <= budget < lib.KVMM_PREFETCH_CANCEL:
			raise ValueError(f"budget = {budget} is out of range")
		return self._add(lib.KVMM_OP_PREFETCH, ns=ns, arg=budget,
				 arg2=lib.KVMM_PREFETCH_RECLAIM if reclaim else 0,
				 **self._tokens(tokens, n))

	def prefetch_cancel(self, tag: int, index: int, ns: int = 0) -> int:
		"""Cancel the PREFETCH at @index of the batch :meth:`Ring.post`
		returned @tag for: it completes with -ECANCELED once its I/O is
		over, its device pages given back.  The result is how many were
		cancelled (0: it was over already).  A ring bound to a namespace
		names it in @ns, as in its other commands."""
		return self._add(lib.KVMM_OP_PREFETCH, ns=ns, arg=lib.KVMM_PREFETCH_CANCEL,
				 arg2=tag << 32 | index)

	def extend(self, seq: int, n: int, flags: int = 0) -> int:
		"""EXTEND one sequence by @n tokens."""
		if n < 0:
			raise ValueError(f"n = {n} is negative")
		return self._add(lib.KVMM_OP_EXTEND, seq=seq, arg=n, arg2=flags)

	def commit(self, seq: int, tokens: Any, n: Optional[int] = None) -> int:
		"""COMMIT: the result is the sequence's cached length."""
		return self._add(lib.KVMM_OP_COMMIT, seq=seq, **self._tokens(tokens, n))

	def close(self, seq: int, tokens: Any = None, n: Optional[int] = None) -> int:
		"""CLOSE, committing tokens[:n] first when given."""
		fields = self._tokens(tokens, n) if tokens is not None else {}
		return self._add(lib.KVMM_OP_CLOSE, seq=seq, **fields)

	def retract(self, seq: int, tokens: Any = None, n: Optional[int] = None) -> int:
		"""RETRACT: as CLOSE, the sequence staying open and empty."""
		fields = self._tokens(tokens, n) if tokens is not None else {}
		return self._add(lib.KVMM_OP_RETRACT, seq=seq, **fields)

	def lookup(self, tokens: Any, n: Optional[int] = None, ns: int = 0) -> int:
		"""LOOKUP: the result is the prefix's cached length on the device."""
		return self._add(lib.KVMM_OP_LOOKUP, ns=ns, **self._tokens(tokens, n))

	def pin(self, tokens: Any, n: Optional[int] = None, ns: int = 0,
		keep: bool = False) -> int:
		"""PIN (the ring's, or with @keep an operator's that outlives it)."""
		return self._add(lib.KVMM_OP_PIN, ns=ns, arg=lib.KVMM_PIN_KEEP if keep else 0,
				 **self._tokens(tokens, n))

	def unpin(self, tokens: Any, n: Optional[int] = None, ns: int = 0,
		  keep: bool = False) -> int:
		"""UNPIN."""
		return self._add(lib.KVMM_OP_UNPIN, ns=ns, arg=lib.KVMM_PIN_KEEP if keep else 0,
				 **self._tokens(tokens, n))

	def reclaim(self, pages: int) -> int:
		"""RECLAIM: the result is the pages freed."""
		return self._add(lib.KVMM_OP_RECLAIM, arg=pages)

	def flush(self, timeout_ms: int = 0) -> int:
		"""FLUSH (operator rings): the result is the pages written to the NVMe
		tier's file (kvmm_flush()); the completion's CQE_F_MORE flag says some
		were left out."""
		return self._add(lib.KVMM_OP_FLUSH, arg=timeout_ms)

	def check(self) -> int:
		"""CHECK: every invariant of the context (kvmm_check()); 0, or
		-EUCLEAN with what broke in the server's log."""
		return self._add(lib.KVMM_OP_CHECK)

	def seq_row(self, seq: int, pages: int) -> int:
		"""SEQ_ROW with room for @pages frames: the result is the row's frames.

		:meth:`row` reads it after the batch completed.
		"""
		if pages < 0:
			raise ValueError(f"pages = {pages} is negative")
		nbytes = _ROW_HDR + 4 * pages
		off = self._reserve(nbytes)
		self._rows[len(self.ops)] = off
		return self._add(lib.KVMM_OP_SEQ_ROW, seq=seq, buf=0, off=off, len=nbytes)

	# ---- the keyed page store (see kvmm.KeyedSpace for the rules) ----
	def kspace(self, model_id: str, value_bytes: int, ns: int = 0) -> int:
		"""KSPACE: the result is the space's id."""
		reg = kspace_reg(model_id, value_bytes)
		off = self._reserve(len(reg), align=8)
		ffi.memmove(self.ring._at(off), reg, len(reg))
		return self._add(lib.KVMM_OP_KSPACE, ns=ns, buf=0, off=off, len=len(reg))

	def _kentries(self, op: int, space: int, keys: Any, value_bytes: int,
		      values: Any = None, at: Optional[Tuple[int, Any]] = None) -> int:
		karr = keys_array(keys)
		n = karr.shape[0]
		ents = self._reserve(n * _KENT, align=8)
		e = self.ring._kents(ents, n)
		e["key"], e["resv"], e["res"] = karr, 0, 0
		if at is None:	# the values in the data area: all a server can read
			vals = self._reserve(n * value_bytes, align=64)
			e["buf"], e["off"] = 0, vals + np.arange(n, dtype=np.uint64) * value_bytes
			if values is not None:
				ptrs, keep = values_arg(values, n, value_bytes, False)
				for i in range(n):
					ffi.memmove(self.ring._at(vals + i * value_bytes), ptrs[i],
						    value_bytes)
				del keep
		else:		# where they are, in a registered buffer: nothing staged
			vals = None
			e["buf"], e["off"] = at
		self._kio[len(self.ops)] = (ents, vals, n, value_bytes)
		return self._add(op, arg=space, buf=0, off=ents, len=n)

	def kput(self, space: int, keys: Any, values: Any, value_bytes: int) -> int:
		"""KPUT @values (copied into the data area) under @keys: the result is the
		values stored; :meth:`kres` gives each one's."""
		return self._kentries(lib.KVMM_OP_KPUT, space, keys, value_bytes, values)

	def kget(self, space: int, keys: Any, value_bytes: int) -> int:
		"""KGET @keys: the result is the values read (it may complete later, from
		NVMe); :meth:`kvalues` copies them out, :meth:`kres` gives each one's result."""
		return self._kentries(lib.KVMM_OP_KGET, space, keys, value_bytes)

	def kput_at(self, space: int, keys: Any, buf: int, offsets: Any, value_bytes: int) -> int:
		"""KPUT of values already in registered buffer @buf (:meth:`Ring.register`),
		value i at byte offsets[i]: nothing is copied on the way (in-process rings)."""
		return self._kentries(lib.KVMM_OP_KPUT, space, keys, value_bytes, at=(buf, offsets))

	def kget_at(self, space: int, keys: Any, buf: int, offsets: Any, value_bytes: int) -> int:
		"""KGET straight into registered buffer @buf at byte offsets[i] (see kput_at)."""
		return self._kentries(lib.KVMM_OP_KGET, space, keys, value_bytes, at=(buf, offsets))

	def _kkeys(self, op: int, space: int, keys: Any, each: bool) -> int:
		karr = keys_array(keys)
		n = karr.shape[0]
		if not each:
			off = self._reserve(karr.nbytes, align=8)
			ffi.memmove(self.ring._at(off), karr.tobytes(), karr.nbytes)
			return self._add(op, arg=space, buf=0, off=off, len=n)
		off = self._reserve(n * _KENT, align=8)
		e = self.ring._kents(off, n)
		e["key"], e["off"], e["buf"], e["resv"], e["res"] = karr, 0, 0, 0, 0
		self._kio[len(self.ops)] = (off, None, n, 0)
		return self._add(op, arg=space, buf=0, off=off, len=n, arg2=lib.KVMM_KEYS_EACH)

	def kexists(self, space: int, keys: Any, each: bool = False) -> int:
		"""KEXISTS: the result is how many of @keys, from the first on, are stored;
		@each: how many of them are, and :meth:`kres` says of each (0, -ENOENT)."""
		return self._kkeys(lib.KVMM_OP_KEXISTS, space, keys, each)

	def kdelete(self, space: int, keys: Any, each: bool = False) -> int:
		"""KDELETE: the result is how many values went; @each: :meth:`kres` says of
		each key (0 deleted, -ENOENT not stored, -EBUSY being read)."""
		return self._kkeys(lib.KVMM_OP_KDELETE, space, keys, each)

	def kprefetch(self, space: int, keys: Any, budget: int = 0, reclaim: bool = False) -> int:
		"""KPREFETCH: start reading the values of @keys that are on NVMe up to
		the host tier, so that a KGET of them later reads the host: at most
		@budget host pages (0: the free pages above the host tier's low
		watermark, nothing evicted; with @reclaim, @budget pages taken as a
		put takes room).  It completes at once; the result is how many reads
		started.  A KGET of a value being read waits for that read.  Cancel
		it with :meth:`prefetch_cancel`."""
		if not 0 <= budget < 1 << 32:
			raise ValueError(f"budget = {budget} is out of range")
		if reclaim and not budget:
			raise ValueError("a prefetch with reclaim needs a budget")
		karr = keys_array(keys)
		off = self._reserve(karr.nbytes, align=8)
		ffi.memmove(self.ring._at(off), karr.tobytes(), karr.nbytes)
		return self._add(lib.KVMM_OP_KPREFETCH, arg=space, buf=0, off=off,
				 len=karr.shape[0],
				 arg2=budget | (lib.KVMM_KPREFETCH_RECLAIM if reclaim else 0))

	def kspace_remove(self, space: int) -> int:
		"""KDELETE with KVMM_KDELETE_SPACE: remove @space and every value it stores
		here; the result is how many values went (-EBUSY while a command of the
		space is in flight).  The id names nothing afterwards."""
		return self._add(lib.KVMM_OP_KDELETE, arg=space, arg2=lib.KVMM_KDELETE_SPACE)

	def kres(self, index: int) -> np.ndarray:
		"""Each value's result (0 or -errno) of the KPUT, KGET, or KEXISTS or
		KDELETE with each=True, at @index (read after the batch completed,
		before the ring's next batch)."""
		ents, _, n, _ = self._kio[index]
		return self._area()._kents(ents, n)["res"].copy()

	def kvalues(self, index: int, out: Any = None, only_read: bool = False) -> Any:
		"""The values the KGET at @index read, copied into @out (a new (n,
		value_bytes) uint8 array by default, or n buffers): one copy out of
		the data area.  @only_read: leave the rows of values not read as
		they were."""
		_, vals, n, vb = self._kio[index]
		if vals is None:
			raise ValueError("kvmm: that KGET read into a registered buffer, not the data area")
		ring = self._area()
		if out is None:
			out = np.empty((n, vb), dtype=np.uint8)
		ptrs, keep = values_arg(out, n, vb, True)
		res = self.kres(index) if only_read else np.zeros(n, dtype=np.int32)
		for i in range(n):
			if not res[i]:
				ffi.memmove(ptrs[i], ring._at(vals + i * vb), vb)
		del keep
		return out

	def dump(self, kind: int, cursor: int = 0, nbytes: int = 1 << 16) -> int:
		"""DUMP records of @kind (KVMM_DUMP_*) from @cursor into @nbytes of the
		data area; :meth:`records` reads them."""
		off = self._reserve(nbytes, align=8)
		self._dumps[len(self.ops)] = (off, kind)
		return self._add(lib.KVMM_OP_DUMP, buf=0, off=off, len=nbytes, arg=kind, arg2=cursor)

	def records(self, index: int) -> Tuple[List[Any], int]:
		"""The DUMP at @index: (its records as cdata copies, the next cursor or 0)."""
		off, kind = self._dumps[index]
		ring = self._area()
		hdr = ffi.cast("struct kvmm_dump_hdr *", ring._at(off))
		ctype = _DUMP_RECORDS[kind]
		size = ffi.sizeof(ctype)
		recs = []
		for i in range(hdr.nr):
			rec = ffi.new(ctype + " *")
			ffi.memmove(rec, ring._at(off + ffi.sizeof(hdr[0]) + i * hdr.rec_size),
				    min(size, hdr.rec_size))
			recs.append(rec)
		return recs, hdr.next

	def row(self, index: int) -> SeqRow:
		"""The row the SEQ_ROW at @index wrote (read before the ring's next batch)."""
		hdr = ffi.cast("struct kvmm_seq_row *", self._area()._at(self._rows[index]))
		frames = np.frombuffer(ffi.buffer(ffi.cast("char *", hdr + 1), 4 * hdr.pages),
				       dtype=np.int32).copy()
		return SeqRow(hdr.len, hdr.cached, frames, self.ring.page_size)


class _Using:
	"""``with ring._using:`` - the calling thread's turn on the ring, or Busy."""

	__slots__ = ("ring",)

	def __init__(self, ring: "Ring") -> None:
		self.ring = ring

	def __enter__(self) -> None:
		if not self.ring._mu.acquire(blocking=False):
			raise Busy(errno.EBUSY, "kvmm: the ring is in use by another thread: a Ring "
				   "serves one thread at a time (give each thread its own, or hold "
				   "a lock from batch() until its results are read)")

	def __exit__(self, *exc: Any) -> None:
		self.ring._mu.release()


def _one_thread(method: Any) -> Any:
	"""Run a Ring method as the calling thread's turn on the ring (_Using)."""
	def run(self: "Ring", *args: Any, **kwargs: Any) -> Any:
		with self._using:
			return method(self, *args, **kwargs)
	run.__name__, run.__qualname__, run.__doc__ = (method.__name__, method.__qualname__,
						       method.__doc__)
	return run


class Ring:
	"""A command ring (struct kvmm_ring); see the module's docstring."""

	def __init__(self, owner: Any = None) -> None:
		self._r = ffi.new("struct kvmm_ring *")
		self._owner = owner	# the in-process ring's Context, kept alive
		self._up = False
		self.buf_size = 0
		self._busy = False
		self.page_size = 0	# tokens per page of the context, from PROBE
		# batches posted without waiting (post()): tag -> [batch, results, left]
		self._posted: Dict[int, List[Any]] = {}
		self._slots: Dict[int, Batch] = {}	# regions held by post_batch() batches
		self._next_tag = 1
		self.post_slots = 8	# regions the data area is cut into for them
		# One thread at a time: the thread inside a call holds _mu (reentrant);
		# another one's call raises Busy rather than wait or interleave.
		self._mu = threading.RLock()
		self._using = _Using(self)
		self._current: Optional[Batch] = None	# the batch the data area is for
		self._slot_last: Dict[int, Batch] = {}	# post_batch() region: its last batch

	def _start(self, ret: int, call: str, buf_size: int) -> "Ring":
		if ret < 0:
			raise make_error(ret, call)
		self._up = True
		self.buf_size = buf_size
		if self._owner is not None:
			self._owner._live += 1	# the context may not close under it
		if self._owner is not None:
			self.page_size = self._owner.page_size
		elif buf_size >= ffi.sizeof("struct kvmm_probe"):
			try:
				self._probe()
			except BaseException:
				self.close()
				raise
		return self

	def batch(self) -> Batch:
		"""A new, empty batch for this ring (the whole data area: not while
		batches posted with :meth:`post` are in flight)."""
		with self._using:
			if self._slots:
				raise InvalidArgument(22, "kvmm: batches made by post_batch() hold parts "
						      "of the data area; poll() them (or discard()) first")
			self._slot_last.clear()		# the whole data area is the new batch's
			self._current = Batch(self)
			return self._current

	def post_batch(self) -> Batch:
		"""A new, empty batch to :meth:`post`: it has one of ``post_slots``
		regions of the data area to itself from now until :meth:`poll` returns
		it (or :meth:`discard` gives it back unposted)."""
		with self._using:
			free = [s for s in range(self.post_slots) if s not in self._slots]
			if not free:
				raise ValueError(f"kvmm: all {self.post_slots} regions for posted batches "
						 "are taken; poll() first")
			size = self.buf_size // self.post_slots // 64 * 64
			batch = Batch(self, free[0] * size, (free[0] + 1) * size, free[0])
			self._slots[free[0]] = batch
			self._slot_last[free[0]] = batch
			self._current = None	# the posted batches' regions overlap the whole area
			return batch

	def discard(self, batch: Batch) -> None:
		"""Give back the region of a post_batch() batch that will not be posted."""
		with self._using:
			if batch.slot is not None and self._slots.get(batch.slot) is batch and \
			   all(e[0] is not batch for e in self._posted.values()):
				del self._slots[batch.slot]

	def _ring(self) -> Any:
		if not self._up:
			raise InvalidArgument(22, "kvmm: the ring is closed")
		if self._busy:
			raise InvalidArgument(22, "kvmm: the ring has a batch in flight")
		return self._r

	def _post(self, batch: Batch, tag: int = 0) -> int:
		"""Fill and publish the batch's entries (user_data: @tag, then the
		index); return how many."""
		r = self._ring()
		if batch.ring is not self:
			raise ValueError("kvmm: the batch was made for another ring")
		if not tag and self._slots:
			raise InvalidArgument(22, "kvmm: batches made by post_batch() are in flight; "
					      "poll() them first")
		batch._area()
		for i, (op, fields) in enumerate(batch.ops):
			sqe = lib.kvmm_get_sqe(r)
			if sqe == ffi.NULL:
				raise ValueError(f"kvmm: the batch has more than the SQ's {i} free entries")
			sqe.opcode = op
			for key, val in fields.items():
				setattr(sqe, key, val)
			sqe.user_data = tag << 32 | i
		ret = lib.kvmm_submit(r)
		if ret < 0:
			raise make_error(ret, "kvmm_submit")
		return len(batch.ops)

	def _reap(self, batch: Batch, res: List[Optional[int]], flags: List[int]) -> int:
		"""Take every completion there is; return how many."""
		cqe = ffi.new("struct kvmm_cqe **")
		got = 0
		while lib.kvmm_peek_cqe(self._r, cqe) == 0:
			i = cqe[0].user_data
			res[i], flags[i] = cqe[0].res, cqe[0].flags
			lib.kvmm_cqe_seen(self._r, cqe[0])
			got += 1
		return got

	@staticmethod
	def _results(batch: Batch, res: List[Optional[int]]) -> List[int]:
		"""Return the results, or raise the first command's error."""
		for (op, _), r in zip(batch.ops, res):
			if r is not None and r < 0:
				err = make_error(r, _NAMES.get(op, str(op)))
				err.results = res
				raise err
		return res  # type: ignore[return-value]

	@_one_thread
	def submit(self, batch: Batch, timeout: Optional[float] = None) -> List[int]:
		"""Submit @batch, wait for all its completions, return their results.

		A command that failed raises its error (``.results`` holds every
		command's result, negative errnos included) after all completed.
		"""
		n = self._post(batch)
		res: List[Optional[int]] = [None] * n
		flags = [0] * n
		ts = _timespec(timeout)
		cqe = ffi.new("struct kvmm_cqe **")
		left = n - self._reap(batch, res, flags)
		while left:
			ret = lib.kvmm_wait_cqe_timeout(self._r, cqe, ts)
			if ret < 0:
				raise make_error(ret, "kvmm_wait_cqe")
			left -= self._reap(batch, res, flags)
		self.last_flags = flags
		return self._results(batch, res)

	async def submit_async(self, batch: Batch) -> List[int]:
		"""Submit @batch and await its completions on the running asyncio loop."""
		with self._using:
			n = self._post(batch)
		res: List[Optional[int]] = [None] * n
		flags = [0] * n
		left = n - self._reap(batch, res, flags)
		if left:
			loop = asyncio.get_running_loop()
			done = loop.create_future()
			fd = self._r.cq_fd

			def on_doorbell() -> None:
				nonlocal left
				lib.kvmm_py_cq_disarm(self._r)
				left -= self._reap(batch, res, flags)
				while left and lib.kvmm_py_cq_arm(self._r):
					lib.kvmm_py_cq_disarm(self._r)
					left -= self._reap(batch, res, flags)
				if not left and not done.done():
					done.set_result(None)

			self._busy = True
			loop.add_reader(fd, on_doorbell)
			try:
				if lib.kvmm_py_cq_arm(self._r):
					on_doorbell()
				await done
			finally:
				loop.remove_reader(fd)
				lib.kvmm_py_cq_disarm(self._r)
				self._busy = False
		self.last_flags = flags
		return self._results(batch, res)

	# ---- batches in flight without waiting: an engine's own event loop ----
	@_one_thread
	def post(self, batch: Batch) -> int:
		"""Submit @batch (from :meth:`post_batch`) without waiting for it; return
		its tag, which :meth:`poll` gives back with its results once every
		command of it has completed.  Several may be in flight at once."""
		if batch.slot is None or self._slots.get(batch.slot) is not batch or \
		   any(e[0] is batch for e in self._posted.values()):
			raise ValueError("kvmm: post() takes a batch from post_batch(), once")
		tag = self._next_tag
		self._next_tag = tag % 0x7FFFFFFF + 1
		self._posted[tag] = [batch, [None] * len(batch.ops), len(batch.ops)]
		try:
			self._post(batch, tag)
		except BaseException:
			del self._posted[tag]
			raise
		return tag

	@_one_thread
	def poll(self) -> List[Tuple[int, Batch, List[int]]]:
		"""Take every completion there is: return (tag, batch, results) for each
		posted batch now complete, in the order they completed.  Results are
		as the commands returned them (negative errnos are not raised); read
		a batch's outputs (kres, kvalues, row) before its slot is reused."""
		cqe = ffi.new("struct kvmm_cqe **")
		done = []
		while lib.kvmm_peek_cqe(self._r, cqe) == 0:
			ud, res = cqe[0].user_data, cqe[0].res
			lib.kvmm_cqe_seen(self._r, cqe[0])
			entry = self._posted.get(ud >> 32)
			if entry is None:
				continue
			entry[1][ud & 0xFFFFFFFF] = res
			entry[2] -= 1
			if not entry[2]:
				del self._posted[ud >> 32]
				self._slots.pop(entry[0].slot, None)
				done.append((ud >> 32, entry[0], entry[1]))
		return done

	@_one_thread
	def wait(self, timeout: Optional[float] = None) -> List[Tuple[int, Batch, List[int]]]:
		"""Sleep until a completion is there (kvmm_wait_cqe_timeout(): a server
		that went away raises), then :meth:`poll`."""
		ret = lib.kvmm_wait_cqe_timeout(self._r, ffi.new("struct kvmm_cqe **"),
						_timespec(timeout))
		if ret < 0:
			raise make_error(ret, "kvmm_wait_cqe")
		return self.poll()

	@property
	def cq_fd(self) -> int:
		"""The CQ doorbell (an eventfd): readable after :meth:`arm` once a
		completion may be there."""
		return self._r.cq_fd

	def arm(self) -> bool:
		"""Ask for the doorbell on the next completion.  Returns True when
		completions are ready already (then :meth:`poll` now, no need to wait)."""
		return bool(lib.kvmm_py_cq_arm(self._r))

	def disarm(self) -> None:
		"""After a wake-up on :attr:`cq_fd`: clear the request and the doorbell."""
		lib.kvmm_py_cq_disarm(self._r)

	def _at(self, off: int) -> Any:
		"""A char * at byte @off of the data area (InvalidArgument once closed)."""
		if not self._up:
			raise InvalidArgument(errno.EINVAL, "kvmm: the ring is closed")
		return ffi.cast("char *", self._r.buf) + off

	def _kents(self, off: int, n: int) -> np.ndarray:
		"""The n struct kvmm_kent at byte @off of the data area, as a numpy view."""
		return np.frombuffer(ffi.buffer(self._at(off), n * _KENT), dtype=_KENT_DTYPE)

	@_one_thread
	def register(self, buffers: List[Any]) -> None:
		"""Name memory that commands may refer to as buffer 1, 2, ... (in order;
		kvmm_ring_register_buffers(), in-process rings only: raises
		kvmm.Error EOPNOTSUPP across processes).  Each is a writable buffer
		object, kept alive until the next call, or an (address, length) pair
		the caller keeps valid.  Replaces the earlier set."""
		iov = ffi.new("struct kvmm_iovec[]", max(len(buffers), 1))
		keep = []
		for i, b in enumerate(buffers):
			if isinstance(b, tuple):
				iov[i].base, iov[i].len = ffi.cast("void *", b[0]), b[1]
			else:
				cb = ffi.from_buffer("char[]", b, require_writable=True)
				keep.append(cb)
				iov[i].base, iov[i].len = cb, len(cb)
		ret = lib.kvmm_ring_register_buffers(self._ring(), iov, len(buffers))
		if ret < 0:
			raise make_error(ret, "kvmm_ring_register_buffers")
		self._registered = keep

	@_one_thread
	def kspaces(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
		"""Every keyed space of the context (DUMP KVMM_DUMP_KSPACES; a ring bound
		to a namespace may not: kvmm.Error EPERM), as dicts of its fields."""
		out: List[Dict[str, Any]] = []
		cursor = 0
		while True:
			b = self.batch()
			i = b.dump(lib.KVMM_DUMP_KSPACES, cursor, min(self.buf_size, 1 << 16) // 8 * 8)
			self.submit(b, timeout)
			recs, cursor = b.records(i)
			out.extend(kspace_dict(r) for r in recs)
			if not cursor:
				return out

	@_one_thread
	def check(self, timeout: Optional[float] = None) -> None:
		"""Verify every invariant of the ring's context (CHECK): kvmm.Error
		EUCLEAN when one is broken (what broke is in the server's log),
		EPERM on a ring bound to a namespace."""
		b = self.batch()
		b.check()
		self.submit(b, timeout)

	@_one_thread
	def stats(self, timeout: Optional[float] = None) -> Any:
		"""The context's statistics through the ring (STATS), as :class:`kvmm.Stats`."""
		b = self.batch()
		head = ffi.sizeof("struct kvmm_stats_snap")
		off = b._reserve(head + 8 * len(STAT_NAMES), align=8)
		b._add(lib.KVMM_OP_STATS, buf=0, off=off, len=head + 8 * len(STAT_NAMES))
		nr = self.submit(b, timeout)[0]
		vals = ffi.cast("uint64_t *", self._at(off + head))
		return Stats(*(vals[i] if i < nr else 0 for i in range(len(STAT_NAMES))))

	@_one_thread
	def _probe(self) -> None:
		"""Ask the context's shape (PROBE): page_size."""
		b = self.batch()
		size = ffi.sizeof("struct kvmm_probe")
		off = b._reserve(size, align=8)
		b._add(lib.KVMM_OP_PROBE, buf=0, off=off, len=size)
		self.submit(b)
		self.page_size = ffi.cast("struct kvmm_probe *", self._at(off)).page_size

	@_one_thread
	def seq_row(self, seq: int, timeout: Optional[float] = None) -> SeqRow:
		"""The page-table row of @seq, a sequence this ring opened (SEQ_ROW)."""
		b = self.batch()
		i = b.seq_row(seq, (self.buf_size - _ROW_HDR) // 4)
		self.submit(b, timeout)
		return b.row(i)

	@_one_thread
	def attach_pool(self, timeout: Optional[float] = 10.0) -> "Pool":
		"""Map the server's KV pool into this process (kvmm_kv_pool_attach())."""
		return Pool(self, timeout)

	@_one_thread
	def close(self) -> None:
		"""Detach (kvmm_ring_exit()); the ring's sequences and pins are released."""
		if self._up:
			self._up = False
			lib.kvmm_ring_exit(self._r)
			if self._owner is not None:
				self._owner._live -= 1
				self._owner = None

	def __enter__(self) -> "Ring":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()

	def __del__(self) -> None:
		if getattr(self, "_up", False):
			self.close()


class Pool(ViewOwner):
	"""A server's KV pool mapped into this process, for a ring's client.

	The client does not know the server's geometry: :meth:`kv` gives each
	layer's slots as raw bytes unless told the dtype and the shape of one
	slot.  Views keep the mapping alive; close() refuses while one lives.
	"""

	def __init__(self, ring: Ring, timeout: Optional[float]) -> None:
		out = ffi.new("struct kvmm_kv_pool **")
		ret = lib.kvmm_kv_pool_attach_timeout(ring._ring(), ffi.NULL, out, _timespec(timeout))
		if ret < 0:
			raise make_error(ret, "kvmm_kv_pool_attach")
		self._pool = out[0]

	def _c(self) -> Any:
		if self._pool is None:
			raise InvalidArgument(22, "kvmm: the pool is closed")
		return self._pool

	@property
	def pages(self) -> int:
		"""Pages mapped."""
		return lib.kvmm_kv_pool_pages(self._c())

	def kv(self, layer: int, dtype: Any = np.uint8,
	       cell: Optional[Tuple[int, ...]] = None) -> Tuple[np.ndarray, Optional[np.ndarray]]:
		"""(K, V) of @layer: (slots,) + @cell arrays of @dtype (V None for MLA).

		@cell defaults to the whole slot in @dtype units, e.g. (kv_heads,
		head_dim) of float16 for an MHA model.
		"""
		out = ffi.new("struct kvmm_kv_layer *")
		ret = lib.kvmm_kv_pool_layer(self._c(), layer, out)
		if ret < 0:
			raise make_error(ret, "kvmm_kv_pool_layer")
		k, v = (int(ffi.cast("uintptr_t", p)) for p in (out.k, out.v))
		cell = cell or (out.slot_bytes // np.dtype(dtype).itemsize,)
		return self._layer_views(k, v, out.slot_bytes, out.bytes, dtype, cell)

	def close(self) -> None:
		"""Unmap the pool (kvmm_kv_pool_close()); refused while views live."""
		if self._pool is not None:
			self._refuse_if_viewed("pool")
			pool, self._pool = self._pool, None
			lib.kvmm_kv_pool_close(pool)

	def __enter__(self) -> "Pool":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()

	def __del__(self) -> None:
		if getattr(self, "_pool", None) is not None and not self._live:
			lib.kvmm_kv_pool_close(self._pool)


def connect(path: str, sq_entries: int = 64, buf_size: int = 1 << 20,
	    timeout: float = 10.0, ns: Optional[int] = None) -> Ring:
	"""Attach a ring to the kvmm server at Unix socket @path (kvmmd).

	@ns binds the ring to a namespace.  Raises kvmm.Error: TimeoutError
	past @timeout, ConnectionRefusedError/FileNotFoundError when nothing
	listens, the server's refusal otherwise.
	"""
	ring = Ring()
	p = ffi.new("struct kvmm_ring_params *", {"sq_entries": sq_entries, "buf_size": buf_size})
	if ns is not None:
		p.flags, p.ns = lib.KVMM_RING_F_NS, ns
	return ring._start(lib.kvmm_ring_connect_timeout(path.encode(), p, ring._r,
							 _timespec(timeout)),
			   "kvmm_ring_connect", buf_size)
