# SPDX-License-Identifier: MIT
"""llama.py - a small Llama-style decoder in numpy, and an engine that keeps
its KV in kvmm.

The model: RMSNorm, RoPE, grouped-query attention (4 query heads over 2 KV
heads), SwiGLU, random float32 weights from a fixed seed.  With
``mla=True`` the attention is DeepSeek's MLA shape instead: one latent
vector per token (a compressed KV of ``kv_rank`` elements and a shared
RoPE key of ``rope_dim``), which is all the pool holds.

:func:`reference_logits` recomputes a whole token sequence with contiguous
KV (no cache).  :class:`Engine` serves requests the way an inference
engine does: MATCH the prompt, PROMOTE what a lower tier holds, EXTEND,
write each new token's KV into the slots the page table names (numpy
views of the pool), attend by gathering KV through the page table,
COMMIT, decode with batched EXTEND, CLOSE.
"""
import copy
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import kvmm


@dataclass(frozen=True)
class Config:
	"""The model's shape."""

	vocab: int = 97
	hidden: int = 128
	layers: int = 2
	q_heads: int = 4
	kv_heads: int = 2
	head_dim: int = 32
	ffn: int = 256
	mla: bool = False
	kv_rank: int = 48	# MLA: the compressed KV's width
	rope_dim: int = 16	# MLA: the shared RoPE key's width
	seed: int = 1234

	@property
	def latent_dim(self) -> int:
		"""MLA: elements of one token's latent vector in a layer."""
		return self.kv_rank + self.rope_dim

	def kvmm_geometry(self) -> Dict[str, object]:
		"""The Context() parameters of this model's KV, float32."""
		if self.mla:
			return {"layers": self.layers, "latent_dim": self.latent_dim,
				"dtype_bytes": 4, "attn": "mla"}
		return {"layers": self.layers, "kv_heads": self.kv_heads,
			"head_dim": self.head_dim, "dtype_bytes": 4}


class NumpyOps:
	"""The array operations the model's maths is written in, for numpy
	(float32 throughout); another library supplies the same methods
	(test_gpu_transformer.py's TorchOps) to run the same model."""

	einsum = staticmethod(np.einsum)
	exp = staticmethod(np.exp)

	@staticmethod
	def cat(xs: List[np.ndarray]) -> np.ndarray:
		"""Concatenation along the last axis."""
		return np.concatenate(xs, axis=-1)

	@staticmethod
	def rms(x: np.ndarray) -> np.ndarray:
		"""Root mean square over the last axis (kept), with RMSNorm's epsilon."""
		return np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)

	@staticmethod
	def repeat_heads(x: np.ndarray, n: int) -> np.ndarray:
		"""Each KV head @n times in a row (grouped-query attention)."""
		return np.repeat(x, n, axis=1)

	@staticmethod
	def rope_cos_sin(pos: np.ndarray, half: int) -> Tuple[np.ndarray, np.ndarray]:
		"""RoPE's cos and sin at positions @pos, (tokens, 1, half)."""
		freq = 10000.0 ** (-np.arange(half, dtype=np.float32) / half)
		ang = np.asarray(pos)[:, None].astype(np.float32) * freq[None, :]
		return np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

	@staticmethod
	def causal_softmax(scores: np.ndarray, pos: np.ndarray) -> np.ndarray:
		"""Softmax over keys (last axis) of (heads, queries, keys), a query
		at pos[i] seeing keys 0..pos[i]."""
		mask = np.arange(scores.shape[-1])[None, :] > pos[:, None]
		scores = np.where(mask[None], -np.inf, scores)
		scores -= scores.max(axis=-1, keepdims=True)
		p = np.exp(scores)
		return p / p.sum(axis=-1, keepdims=True)


class Model:
	"""Random weights of a Config, and the per-layer maths shared by both
	paths, written in the operations of @ops (numpy unless to() says)."""

	ops: Any = NumpyOps

	def __init__(self, cfg: Config) -> None:
		self.cfg = cfg
		rng = np.random.default_rng(cfg.seed)

		def w(*shape: int) -> np.ndarray:
			return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

		c = cfg
		self.embed = rng.standard_normal((c.vocab, c.hidden)).astype(np.float32)
		self.norm = (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32)
		self.head = w(c.hidden, c.vocab)
		self.layers = []
		for _ in range(c.layers):
			lw = {"attn_norm": (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
			      "ffn_norm": (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
			      "wo": w(c.q_heads * c.head_dim, c.hidden),
			      "w1": w(c.hidden, c.ffn), "w3": w(c.hidden, c.ffn),
			      "w2": w(c.ffn, c.hidden)}
			if c.mla:
				lw["wq"] = w(c.hidden, c.q_heads * (c.head_dim + c.rope_dim))
				lw["wdkv"] = w(c.hidden, c.kv_rank)
				lw["wkr"] = w(c.hidden, c.rope_dim)
				lw["wuk"] = w(c.kv_rank, c.q_heads * c.head_dim)
				lw["wuv"] = w(c.kv_rank, c.q_heads * c.head_dim)
			else:
				lw["wq"] = w(c.hidden, c.q_heads * c.head_dim)
				lw["wk"] = w(c.hidden, c.kv_heads * c.head_dim)
				lw["wv"] = w(c.hidden, c.kv_heads * c.head_dim)
			self.layers.append(lw)

	def to(self, ops: Any, convert: Any) -> "Model":
		"""This model with its weights through @convert and its maths in
		@ops (an object with NumpyOps' methods): the same model in
		another array library, on another device."""
		m = copy.copy(self)
		m.ops = ops
		m.embed, m.norm, m.head = convert(self.embed), convert(self.norm), convert(self.head)
		m.layers = [{name: convert(w) for name, w in lw.items()} for lw in self.layers]
		return m

	def rmsnorm(self, x: Any, weight: Any) -> Any:
		"""RMSNorm over the last axis."""
		return x / self.ops.rms(x) * weight

	def rope(self, x: Any, pos: Any) -> Any:
		"""Rotary embedding of x (tokens, heads, dim) at positions @pos."""
		half = x.shape[-1] // 2
		cos, sin = self.ops.rope_cos_sin(pos, half)
		x1, x2 = x[..., :half], x[..., half:]
		return self.ops.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos])

	def new_kv(self, li: int, h: Any, pos: Any) -> Tuple[Any, ...]:
		"""The KV layer @li stores for normed hidden states @h at @pos.

		MHA: (k, v), each (tokens, kv_heads, head_dim); MLA: (latent,),
		(tokens, latent_dim).
		"""
		c, lw = self.cfg, self.layers[li]
		if c.mla:
			kr = self.rope((h @ lw["wkr"])[:, None, :], pos)[:, 0, :]
			return (self.ops.cat([h @ lw["wdkv"], kr]),)
		k = (h @ lw["wk"]).reshape(-1, c.kv_heads, c.head_dim)
		v = (h @ lw["wv"]).reshape(-1, c.kv_heads, c.head_dim)
		return self.rope(k, pos), v

	def attend(self, li: int, h: Any, pos: Any, kv: Tuple[Any, ...]) -> Any:
		"""Causal attention of queries at @pos over the KV of positions 0..pos[-1]."""
		c, lw, ops = self.cfg, self.layers[li], self.ops
		n = kv[0].shape[0]
		if c.mla:
			q = (h @ lw["wq"]).reshape(-1, c.q_heads, c.head_dim + c.rope_dim)
			qn, qr = q[..., :c.head_dim], self.rope(q[..., c.head_dim:], pos)
			lat, kr = kv[0][:, :c.kv_rank], kv[0][:, c.kv_rank:]
			k_nope = (lat @ lw["wuk"]).reshape(n, c.q_heads, c.head_dim)
			v = (lat @ lw["wuv"]).reshape(n, c.q_heads, c.head_dim)
			scores = (ops.einsum("qhd,khd->hqk", qn, k_nope) +
				  ops.einsum("qhd,kd->hqk", qr, kr)) * (1.0 / math.sqrt(c.head_dim + c.rope_dim))
		else:
			q = self.rope((h @ lw["wq"]).reshape(-1, c.q_heads, c.head_dim), pos)
			group = c.q_heads // c.kv_heads
			k = ops.repeat_heads(kv[0], group)
			v = ops.repeat_heads(kv[1], group)
			scores = ops.einsum("qhd,khd->hqk", q, k) * (1.0 / math.sqrt(c.head_dim))
		p = ops.causal_softmax(scores, pos)
		out = ops.einsum("hqk,khd->qhd", p, v).reshape(len(pos), -1)
		return out @ lw["wo"]

	def ffn(self, li: int, x: Any) -> Any:
		"""SwiGLU feed-forward with its pre-norm, residual added."""
		lw = self.layers[li]
		h = self.rmsnorm(x, lw["ffn_norm"])
		a = h @ lw["w1"]
		return x + ((a / (1 + self.ops.exp(-a))) * (h @ lw["w3"])) @ lw["w2"]

	def logits(self, x: Any) -> Any:
		"""Final norm and LM head."""
		return self.rmsnorm(x, self.norm) @ self.head


def reference_logits(model: Model, tokens: np.ndarray) -> np.ndarray:
	"""Logits at every position of @tokens, recomputed with contiguous KV."""
	pos = np.arange(len(tokens))
	x = model.embed[tokens]
	for li, lw in enumerate(model.layers):
		h = model.rmsnorm(x, lw["attn_norm"])
		x = model.ffn(li, x + model.attend(li, h, pos, model.new_kv(li, h, pos)))
	return model.logits(x)


class Engine:
	"""Serves requests of a Model with its KV in a kvmm Context."""

	def __init__(self, model: Model, ctx: kvmm.Context) -> None:
		self.model, self.ctx = model, ctx
		self.pools = [ctx.kv(li) for li in range(model.cfg.layers)]

	def release(self) -> None:
		"""Drop the pool views, so that the context may close."""
		self.pools = []

	def forward(self, seq: kvmm.Sequence, tokens: np.ndarray, start: int) -> np.ndarray:
		"""Compute tokens[start:] over the cached KV of tokens[:start]; their logits.

		The sequence already holds KV slots for all of @tokens.  Each new
		token's KV is written into its slot in the pool; attention reads
		every position's KV by gathering the pool through the page table.
		"""
		model = self.model
		slots = seq.slots(0, len(tokens))
		pos = np.arange(start, len(tokens))
		x = model.embed[tokens[start:]]
		for li, lw in enumerate(model.layers):
			pool = [a for a in self.pools[li] if a is not None]
			h = model.rmsnorm(x, lw["attn_norm"])
			for buf, new in zip(pool, model.new_kv(li, h, pos)):
				buf[slots[start:]] = new
			kv = tuple(buf[slots] for buf in pool)
			x = model.ffn(li, x + model.attend(li, h, pos, kv))
		return model.logits(x)

	def prefill(self, prompt: np.ndarray) -> Tuple[kvmm.Sequence, int, np.ndarray]:
		"""Open a sequence for @prompt and compute what the cache lacks.

		Returns the sequence, the tokens reused from the cache and the
		logits of the positions computed.
		"""
		seq = self.ctx.open()
		n = len(prompt) - 1
		hit = seq.match(prompt, n)
		try:
			hit = seq.promote(prompt, n)
		except kvmm.NoSpace:
			pass
		seq.extend(len(prompt) - hit)
		logits = self.forward(seq, prompt, hit)
		seq.commit(prompt)
		return seq, hit, logits

	def serve(self, prompts: List[np.ndarray], steps: int) -> List[Dict[str, object]]:
		"""Serve @prompts as one batch: prefill each, then @steps greedy decode steps.

		Background reclaim's writes to NVMe are waited for first
		(Context.sync()), so that what each batch finds on which tier,
		and so the test, does not depend on the disk's timing.
		"""
		self.ctx.sync()
		reqs = []
		for prompt in prompts:
			seq, hit, logits = self.prefill(prompt)
			reqs.append({"seq": seq, "prompt_len": len(prompt), "tokens": list(prompt),
				     "logits": [logits], "start": hit})
		for step in range(steps):
			for r in reqs:
				r["tokens"].append(int(np.argmax(r["logits"][-1][-1])))
			if step == steps - 1:
				break
			self.ctx.extend_batch([r["seq"] for r in reqs], [1] * len(reqs))
			for r in reqs:
				toks = np.asarray(r["tokens"], dtype=np.int32)
				r["logits"].append(self.forward(r["seq"], toks, len(toks) - 1))
		for r in reqs:
			toks = np.asarray(r["tokens"], dtype=np.int32)
			r["seq"].close(toks, len(toks) - 1)
			r["tokens"] = toks
			r["logits"] = np.concatenate(r["logits"])
		return reqs


class RingSequence:
	"""A sequence opened through a ring: what Engine needs of kvmm.Sequence."""

	def __init__(self, ring: kvmm.Ring, seq_id: int) -> None:
		self.ring, self.id = ring, seq_id

	def _one(self, op: str, *args: object) -> int:
		"""Submit one command, Batch.@op(self.id, *@args); its result."""
		b = self.ring.batch()
		getattr(b, op)(self.id, *args)
		return self.ring.submit(b)[0]

	def match(self, tokens: np.ndarray, n: Optional[int] = None) -> int:
		return self._one("match", tokens, n)

	def promote(self, tokens: np.ndarray, n: Optional[int] = None) -> int:
		return self._one("promote", tokens, n)

	def extend(self, n: int) -> None:
		self._one("extend", n)

	def commit(self, tokens: np.ndarray, n: Optional[int] = None) -> int:
		return self._one("commit", tokens, n)

	def close(self, tokens: Optional[np.ndarray] = None, n: Optional[int] = None) -> None:
		self._one("close", tokens, n)

	def slots(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
		"""The slots of tokens [start, stop), from the row SEQ_ROW copies."""
		return self.ring.seq_row(self.id).slots(start, stop)


class RingContext:
	"""What Engine needs of kvmm.Context, over a ring to kvmmd in another process.

	The KV is the server's pool, mapped here (Ring.attach_pool()); the
	slots come from SEQ_ROW.
	"""

	def __init__(self, ring: kvmm.Ring, cfg: Config) -> None:
		self.ring, self.cfg = ring, cfg
		self.pool = ring.attach_pool()

	def kv(self, layer: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
		cell = (self.cfg.latent_dim,) if self.cfg.mla else (self.cfg.kv_heads,
								    self.cfg.head_dim)
		return self.pool.kv(layer, np.float32, cell)

	def open(self) -> RingSequence:
		b = self.ring.batch()
		b.open()
		return RingSequence(self.ring, self.ring.submit(b)[0])

	def extend_batch(self, seqs: List[RingSequence], counts: List[int]) -> None:
		b = self.ring.batch()
		for s, n in zip(seqs, counts):
			b.extend(s.id, n)
		self.ring.submit(b)

	def sync(self, timeout: float = 10.0) -> None:
		"""Wait until background reclaim has nothing in flight to NVMe."""
		deadline = time.monotonic() + timeout
		while self.ring.stats().host_pages_writeback and time.monotonic() < deadline:
			time.sleep(0.005)


def check_against_reference(model: Model, reqs: List[Dict[str, object]],
			    atol: float = 1e-5) -> float:
	"""Assert each request's logits and greedy tokens match a full recompute.

	Logits are compared at every position the engine computed; the tokens
	the engine generated must be the reference's greedy choices.  Returns
	the largest absolute logit difference seen.
	"""
	worst = 0.0
	for r in reqs:
		toks, start, plen = r["tokens"], r["start"], r["prompt_len"]
		ref = reference_logits(model, toks[:-1])
		diff = float(np.max(np.abs(r["logits"] - ref[start:])))
		assert diff <= atol, f"logits differ by {diff} (cache hit {start})"
		assert np.array_equal(np.argmax(ref[plen - 1:], axis=-1), toks[plen:])
		worst = max(worst, diff)
	return worst
