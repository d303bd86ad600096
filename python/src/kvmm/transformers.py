# SPDX-License-Identifier: MIT
"""kvmm.transformers - a Hugging Face transformers ``Cache`` whose KV lives in kvmm.

:class:`KvmmCache` is a subclass of transformers' ``Cache`` with one
:class:`KvmmLayer` (a ``CacheLayerMixin``) per decoder layer.  Each row of
the batch is a kvmm sequence; a layer's keys and values are written into
kvmm's pool at the slots the page table names, and read back by
gathering the pool through the page table, in the step that needs them:
between calls of the model no copy of the KV is kept outside kvmm.

Made for a prompt (:meth:`KvmmCache.for_prompt`), the cache matches each
row's cached prefix in kvmm (promoting what the host or NVMe tier holds),
so ``model.generate(input_ids, attention_mask=..., cache=cache)`` computes
only the unmatched suffix; :meth:`KvmmCache.close` with the generated
sequences commits the new tokens, for the next chat turn or another
request with the same prefix.  The pool is a kvmm.Context in this process
or kvmmd's, mapped through a ring (kvmm.connect()); on the cuda backend
the layers' pools are torch CUDA tensors over kvmm's device memory
(DLPack, no copy) — written, not yet run on a GPU.

Decoder-only models with full attention (MHA, GQA, MQA) whose KV geometry
is the pool's (``layers``, ``kv_heads``, ``head_dim``, ``dtype_bytes``);
sliding-window, chunked and linear-attention layers are refused.  A batch
is left-padded as transformers pads it (the attention mask's zeros come
first); right padding is refused.
"""
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin, get_layer_types_and_kwargs

from ._core import Context, row_slots
from ._errors import NoSpace
from ._ring import Ring

__all__ = ["KvmmCache", "KvmmLayer", "kv_geometry"]

_TORCH_DTYPES = {torch.float32: np.float32, torch.float16: np.float16,
		 torch.bfloat16: np.uint16}


def kv_geometry(config: Any) -> dict:
	"""The kvmm.Context() model fields of a transformers decoder @config:
	``layers``, ``kv_heads``, ``head_dim`` and ``dtype_bytes`` (the
	config's dtype, float32 when it names none).  ValueError for a model
	kvmm's cache does not serve (see :class:`KvmmCache`)."""
	types, _ = get_layer_types_and_kwargs(config)
	odd = sorted({t for t in types if t != "full_attention"})
	if odd:
		raise ValueError(f"kvmm.transformers: layers of type {', '.join(odd)} (e.g. a sliding "
				 "window) are not supported: only full attention; a model with "
				 "sliding_window=None is served")
	heads = config.num_attention_heads
	head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
	dtype = getattr(config, "dtype", None) or torch.float32
	if isinstance(dtype, str):
		dtype = getattr(torch, dtype)
	if dtype not in _TORCH_DTYPES:
		raise ValueError(f"kvmm.transformers: dtype {dtype} is not served")
	return {"layers": config.num_hidden_layers,
		"kv_heads": getattr(config, "num_key_value_heads", None) or heads,
		"head_dim": head_dim, "dtype_bytes": torch.empty((), dtype=dtype).element_size()}


def _tensor(a: Any) -> torch.Tensor:
	"""A torch tensor over a pool view, no copy: a numpy array (host
	backends, kvmmd's pool), or a kvmm.DeviceArray (the cuda backend)
	through DLPack."""
	if isinstance(a, np.ndarray):
		return torch.from_numpy(a)
	return torch.from_dlpack(a)


class _KV:
	"""What the cache asks of kvmm, in this process or through kvmmd."""

	def match(self, seq: Any, toks: np.ndarray, n: int) -> int:
		"""Map @seq to the cached prefix of toks[:n], promoted from the
		lower tiers where the device has room: the tokens it holds."""
		hit = self._match(seq, toks, n)
		try:
			hit = self._promote(seq, toks, n)
		except NoSpace:		# no room on the device: the device part alone
			pass
		return hit


class _LocalKV(_KV):
	"""The sequence calls over a kvmm.Context in this process."""

	def __init__(self, ctx: Context) -> None:
		self.ctx = ctx
		self.page_size = ctx.page_size

	def open(self, ns: int) -> Any:
		return self.ctx.open(ns)

	def _match(self, seq: Any, toks: np.ndarray, n: int) -> int:
		return seq.match(toks, n)

	def _promote(self, seq: Any, toks: np.ndarray, n: int) -> int:
		return seq.promote(toks, n)

	def extend(self, seqs: List[Any], counts: List[int]) -> None:
		self.ctx.extend_batch(seqs, counts)

	def frames(self, seqs: List[Any]) -> List[np.ndarray]:
		return [s.row() for s in seqs]

	def close(self, seq: Any, toks: Optional[np.ndarray], n: int) -> None:
		if toks is None:
			seq.close()
		else:
			seq.close(toks, n)

	def layer(self, li: int, cell: Tuple[int, int], dtype: Any) -> Tuple[Any, Any]:
		return self.ctx.kv(li, dtype)

	def release(self) -> None:
		pass


class _RingKV(_KV):
	"""The same calls through a ring to kvmmd, over its pool mapped here."""

	def __init__(self, ring: Ring) -> None:
		self.ring = ring
		self.pool = ring.attach_pool()
		self.page_size = ring.page_size

	def _submit(self, fill: Any) -> Tuple[Any, List[int]]:
		b = self.ring.batch()
		fill(b)
		return b, self.ring.submit(b)

	def open(self, ns: int) -> int:
		return self._submit(lambda b: b.open(ns))[1][0]

	def _match(self, seq: int, toks: np.ndarray, n: int) -> int:
		return self._submit(lambda b: b.match(seq, toks, n))[1][0]

	def _promote(self, seq: int, toks: np.ndarray, n: int) -> int:
		return self._submit(lambda b: b.promote(seq, toks, n))[1][0]

	def extend(self, seqs: List[int], counts: List[int]) -> None:
		def fill(b: Any) -> None:
			for s, n in zip(seqs, counts):
				if n:
					b.extend(s, n)
		self._submit(fill)

	def frames(self, seqs: List[int]) -> List[np.ndarray]:
		room = (self.ring.buf_size // max(len(seqs), 1) - 64) // 4
		b, _ = self._submit(lambda b: [b.seq_row(s, room) for s in seqs])
		return [b.row(i).frames for i in range(len(seqs))]

	def close(self, seq: int, toks: Optional[np.ndarray], n: int) -> None:
		self._submit(lambda b: b.close(seq, toks, n))

	def layer(self, li: int, cell: Tuple[int, int], dtype: Any) -> Tuple[Any, Any]:
		have = self.pool.kv(li, np.uint8)[0].shape[1]	# no view outlives this line
		want = int(np.prod(cell)) * np.dtype(dtype).itemsize
		if have != want:
			raise ValueError(f"kvmm.transformers: kvmmd's slots are {have} bytes, the "
					 f"model's KV {want} (kv_heads x head_dim x dtype)")
		return self.pool.kv(li, dtype, cell)

	def release(self) -> None:
		self.pool.close()


class KvmmLayer(CacheLayerMixin):
	"""One decoder layer's KV in kvmm's pool (its @cache's rows, layer @li).

	update() writes the new keys and values at their slots and returns the
	layer's whole KV, gathered from the pool, as (batch, kv_heads, length,
	head_dim) tensors for this step's attention alone.
	"""

	is_sliding = False
	is_compileable = False
	is_croppable = False

	def __init__(self, cache: "KvmmCache", li: int) -> None:
		super().__init__()
		self.cache, self.li = cache, li
		self.length = cache._start	# logical tokens this layer holds
		self.is_initialized = True
		self.device = torch.device("cpu")

	def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
		self.device = key_states.device

	def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
		   **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
		q = key_states.shape[-2]
		step = self.cache._step(self.length + q)
		k, v = self.cache._pools[self.li]
		b, h, _, d = key_states.shape
		if step.write_src.numel():
			new_k = key_states.transpose(1, 2).reshape(b * q, h, d)
			new_v = value_states.transpose(1, 2).reshape(b * q, h, d)
			k.index_copy_(0, step.write_dst, new_k.index_select(0, step.write_src))
			v.index_copy_(0, step.write_dst, new_v.index_select(0, step.write_src))
		self.length += q
		n = self.length
		return (k.index_select(0, step.gather).view(b, n, h, d).transpose(1, 2),
			v.index_select(0, step.gather).view(b, n, h, d).transpose(1, 2))

	def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
		return self.length + query_length, 0

	def get_seq_length(self) -> int:
		return self.length

	def get_max_length(self) -> int:
		return -1

	def reset(self) -> None:
		raise NotImplementedError("kvmm.transformers: a KvmmCache is not reset; close it and "
					  "make another for the next prompt")

	def crop(self, tokens_to_remove: int) -> None:
		raise NotImplementedError("kvmm.transformers: a KvmmCache is not cropped")

	def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
		raise NotImplementedError("kvmm.transformers: beam search is not served (each row is "
					  "a kvmm sequence of its own)")

	def batch_repeat_interleave(self, repeats: int) -> None:
		self.reorder_cache(None)

	def batch_select_indices(self, indices: torch.Tensor) -> None:
		self.reorder_cache(None)


class _Step:
	"""Where one forward pass's KV goes and comes from, shared by the layers:
	the pool slots the new tokens are written to (@write_dst) and which rows
	of the flattened (batch x new tokens) states they are (@write_src), and
	the slot of every (row, position) the attention reads (@gather)."""

	__slots__ = ("end", "write_src", "write_dst", "gather")


class KvmmCache(Cache):
	"""A transformers Cache over kvmm sequences, one per row of the batch.

	Made by :meth:`for_prompt`; closed by :meth:`close` (with the
	generated sequences: their tokens committed to kvmm's prefix cache).
	"""

	def __init__(self, kv: Any, config: Any, rows: List[np.ndarray], pads: List[int],
		     ns: int = 0) -> None:
		geo = kv_geometry(config)
		if not isinstance(kv, (Context, Ring)):
			raise TypeError(f"kvmm.transformers: a kvmm.Context or kvmm.Ring, not "
					f"{type(kv).__name__}")
		self._kv = _RingKV(kv) if isinstance(kv, Ring) else _LocalKV(kv)
		if isinstance(kv, Context):
			have = {f: kv.model[f] for f in geo}
			if have != geo or kv.model["attn"] != "mha":
				raise ValueError(f"kvmm.transformers: the context's KV geometry {have} is "
						 f"not the model's {geo}")
		self._seqs: List[Any] = []
		self._pools: List[Tuple[torch.Tensor, torch.Tensor]] = []
		self._rows, self._pads = rows, pads
		self._cur: Optional[_Step] = None
		self._closed = False
		self._broken: Optional[BaseException] = None
		dtype = getattr(config, "dtype", None) or torch.float32
		self._dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
		try:
			self._open(geo, ns)
		except BaseException:
			self._release(None)
			raise
		super().__init__(layers=[KvmmLayer(self, li) for li in range(geo["layers"])])

	def _open(self, geo: dict, ns: int) -> None:
		"""Open a sequence per row and match its prompt; map the pools."""
		cell = (geo["kv_heads"], geo["head_dim"])
		np_dtype = _TORCH_DTYPES[self._dtype]
		for li in range(geo["layers"]):	# no local holds a view: close() after an error
			self._pools.append(tuple(_tensor(a).view(self._dtype)
						 for a in self._kv.layer(li, cell, np_dtype)))
		self._lens = []
		for toks in self._rows:
			self._seqs.append(self._kv.open(ns))
			# the last token is always computed: its logits are the first new token's
			self._lens.append(self._kv.match(self._seqs[-1], toks, len(toks) - 1))
		self.matched = list(self._lens)
		# transformers' past is one length for the whole batch (left-padded)
		self._start = min(p + n for p, n in zip(self._pads, self._lens))

	@classmethod
	def for_prompt(cls, kv: Any, config: Any, input_ids: Any, attention_mask: Any = None,
		       ns: int = 0) -> "KvmmCache":
		"""A cache for @input_ids (batch, length), its cached prefix matched.

		@kv: a kvmm.Context (the pool in this process) or a kvmm.Ring
		connected to kvmmd.  @config: the model's config.  @attention_mask:
		transformers' (batch, length) mask, left padding only (its zeros
		first in each row); None for a batch without padding.  @ns: the
		sequences' kvmm namespace.  Each row's longest cached prefix is
		matched (and promoted from the host or NVMe tier), leaving at
		least its last token to compute; :attr:`matched` lists the
		tokens per row, and ``get_seq_length()`` is the past the whole
		batch starts from (the shortest row's, counted in padded
		positions).

		Pass the same @input_ids and @attention_mask to ``generate()`` (or
		the model): transformers then feeds only the tokens past
		``get_seq_length()``.  ValueError for a mask that is not left
		padding, a model kvmm does not serve or a geometry that is not
		the pool's; kvmm.NoSpace when the pool has no room for a row.
		"""
		ids = torch.as_tensor(input_ids)
		if ids.ndim != 2 or ids.shape[1] == 0:
			raise ValueError("kvmm.transformers: input_ids is (batch, length), length >= 1")
		mask = (torch.ones_like(ids) if attention_mask is None
			else torch.as_tensor(attention_mask).to(ids.device))
		if mask.shape != ids.shape:
			raise ValueError("kvmm.transformers: attention_mask is not input_ids' shape")
		rows, pads = [], []
		for r in range(ids.shape[0]):
			m = mask[r].bool()
			pad = int(ids.shape[1] - m.sum())
			if pad == ids.shape[1] or not bool(m[pad:].all()):
				raise ValueError(f"kvmm.transformers: row {r}'s attention mask is not left "
						 "padding (zeros, then ones; at least one token): pad on the "
						 "left (tokenizer.padding_side = 'left')")
			rows.append(np.ascontiguousarray(ids[r, pad:].cpu().numpy(), dtype=np.int32))
			pads.append(pad)
		return cls(kv, config, rows, pads, ns)

	def _step(self, end: int) -> _Step:
		"""The step that takes the layers' KV to @end logical positions:
		extend the sequences the first time it is asked for, then the same
		for every layer."""
		if self._closed:
			raise RuntimeError("kvmm.transformers: the cache is closed")
		cur = self._cur
		if cur is not None and cur.end == end:
			return cur
		start = self.layers[0].length if self.layers else self._start
		if cur is not None and end <= cur.end or end <= start:
			raise RuntimeError(f"kvmm.transformers: layers out of step (to {end}, the last "
					   f"step went to {cur.end if cur else start})")
		if self._broken:
			raise RuntimeError("kvmm.transformers: an earlier step failed "
					   f"({self._broken}); close the cache")
		ps = self._kv.page_size
		grow = [max(end - p - n, 0) for p, n in zip(self._pads, self._lens)]
		if any(grow):
			try:
				self._kv.extend(self._seqs, grow)
			except BaseException as e:	# through a ring some rows may have grown
				self._broken = e
				raise
		frames = self._kv.frames(self._seqs)
		gather, src, dst = [], [], []
		q = end - start
		for r, (pad, have, fr) in enumerate(zip(self._pads, self._lens, frames)):
			real = end - pad		# this row's tokens with KV after the step
			slots = row_slots(fr, ps, real, 0, None)
			first = slots[0] if len(slots) else 0
			# padding reads any real slot: the mask hides it
			gather.append(np.concatenate([np.full(end - len(slots), first, np.int64), slots]))
			# tokens of the step the row had no KV for yet: written
			lo = max(have, start - pad)
			new = np.arange(lo, real, dtype=np.int64)
			src.append(r * q + new + pad - start)
			dst.append(slots[lo:real])
			self._lens[r] = max(have, real)
		step = _Step()
		step.end = end
		dev = self._pools[0][0].device
		step.gather = torch.from_numpy(np.concatenate(gather)).to(dev)
		step.write_src = torch.from_numpy(np.concatenate(src)).to(dev)
		step.write_dst = torch.from_numpy(np.concatenate(dst)).to(dev)
		self._cur = step
		return step

	def kv(self, row: int, layer: int) -> Tuple[torch.Tensor, torch.Tensor]:
		"""Row @row's keys and values of layer @layer, (kv_heads, tokens,
		head_dim) each: a copy gathered from kvmm's pool, for inspection."""
		if self._closed:
			raise RuntimeError("kvmm.transformers: the cache is closed")
		fr = self._kv.frames([self._seqs[row]])[0]
		slots = torch.from_numpy(row_slots(fr, self._kv.page_size, self._lens[row], 0, None))
		slots = slots.to(self._pools[layer][0].device)
		return tuple(a.index_select(0, slots).transpose(0, 1).clone()
			     for a in self._pools[layer])

	@property
	def lengths(self) -> List[int]:
		"""Tokens each row's sequence holds KV for."""
		return list(self._lens)

	def _release(self, tokens: Optional[List[np.ndarray]]) -> None:
		"""Close the sequences (committing @tokens' rows) and drop the pools."""
		seqs, self._seqs = self._seqs, []
		self._pools = []
		self._cur = None
		try:
			for i, s in enumerate(seqs):
				if tokens is None:
					self._kv.close(s, None, 0)
				else:
					self._kv.close(s, tokens[i], self._lens[i])
		finally:
			self._kv.release()

	def close(self, sequences: Any = None) -> None:
		"""Close the sequences; with @sequences (generate()'s output, or any
		(batch, length) ids that start with the prompt), commit the tokens
		each row holds KV for first, for the next call to match.  Closing
		twice is a no-op."""
		if self._closed:
			return
		tokens = None
		if sequences is not None:
			seqs = torch.as_tensor(sequences)
			if seqs.ndim != 2 or seqs.shape[0] != len(self._rows):
				raise ValueError("kvmm.transformers: sequences is (batch, length), one row "
						 "per prompt")
			tokens = []
			for r, (pad, prompt) in enumerate(zip(self._pads, self._rows)):
				row = np.ascontiguousarray(seqs[r, pad:].cpu().numpy(), dtype=np.int32)
				if len(row) < self._lens[r] or not np.array_equal(row[:len(prompt)], prompt):
					raise ValueError(f"kvmm.transformers: row {r} of sequences does not "
							 "continue its prompt")
				tokens.append(row)
		self._closed = True
		self._release(tokens)

	def __enter__(self) -> "KvmmCache":
		return self

	def __exit__(self, *exc: Any) -> None:
		self.close()
