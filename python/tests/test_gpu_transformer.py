# SPDX-License-Identifier: MIT
"""The acceptance test's transformer (llama.py) in torch, with attention
reading KV through kvmm's page table on the device.

:class:`TorchEngine` serves test_transformer.py's workload as
llama.Engine does, with the model's weights as torch tensors on a device
and the KV pools as torch tensors over kvmm's own pool
(``torch.from_dlpack(ctx.kv(layer))``, no copy).  Each new token's K/V is
written into the slots the page table names, read where the backend's
kernels read it (``ctx.page_table(device=True)``); attention gathers every
position's K/V by the pages of FlashInfer's arrays that
``ctx.kv_indices()`` builds in device memory (``indptr``, ``indices``,
``last_page_len``), never by the host's copy of the table.  On the cuda
backend each step first orders torch's stream after kvmm's copies
(``ctx.stream_wait()``), so promoted KV is there before it is read.

Logits must match the numpy reference (llama.reference_logits) within
1e-5 on the CPU and 1e-4 on a GPU (float32, TF32 off), greedy tokens
exactly: with the prefix cache at page sizes 1, 16 and 64, and through
the host and NVMe tiers (demotion and promotion back) with MHA and MLA
geometry.  "cpu" runs on the mock backend (host memory); "cuda" on kvmm's
cuda backend and torch CUDA, skipped without a GPU.
"""
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import kvmm
import test_transformer
from llama import Engine, Model, NumpyOps, check_against_reference
from test_transformer import SYSTEM_LEN, check_tiered, tiered, workload

torch = pytest.importorskip("torch")

HAVE_GPU = torch.cuda.is_available() and kvmm.backend_available("cuda")
ATOL = {"cpu": 1e-5, "cuda": 1e-4}
MAX_POS = 4096		# positions the RoPE tables cover


class TorchOps:
	"""llama.NumpyOps' operations in torch, on @device; RoPE's cos and sin
	are numpy's own values (NumpyOps.rope_cos_sin over every position
	the tests reach), looked up on the device."""

	einsum = staticmethod(torch.einsum)
	exp = staticmethod(torch.exp)

	def __init__(self, device: Any) -> None:
		self.device = device
		self.rope_tables: Dict[int, Tuple[Any, Any]] = {}

	@staticmethod
	def cat(xs: List[Any]) -> Any:
		return torch.cat(xs, dim=-1)

	@staticmethod
	def rms(x: Any) -> Any:
		return torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6)

	@staticmethod
	def repeat_heads(x: Any, n: int) -> Any:
		return torch.repeat_interleave(x, n, dim=1)

	def rope_cos_sin(self, pos: Any, half: int) -> Tuple[Any, Any]:
		if half not in self.rope_tables:
			cos, sin = NumpyOps.rope_cos_sin(np.arange(MAX_POS), half)
			self.rope_tables[half] = (torch.from_numpy(cos).to(self.device),
						  torch.from_numpy(sin).to(self.device))
		cos, sin = self.rope_tables[half]
		return cos[pos], sin[pos]

	@staticmethod
	def causal_softmax(scores: Any, pos: Any) -> Any:
		mask = torch.arange(scores.shape[-1], device=scores.device)[None, :] > pos[:, None]
		scores = scores.masked_fill(mask[None], float("-inf"))
		p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
		return p / p.sum(dim=-1, keepdim=True)


_models: Dict[Tuple[int, str], Model] = {}


def torch_model(model: Model, device: Any) -> Model:
	"""@model in torch on @device (its weights copied there once)."""
	key = (id(model), str(device))
	if key not in _models:
		_models[key] = model.to(TorchOps(device),
					lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device))
	return _models[key]


class TorchEngine(Engine):
	"""llama.Engine with the compute in torch on @device and attention
	reading KV through kvmm's page table there.

	Its pools are torch tensors over kvmm's KV pool (DLPack, no copy) and
	its page table the device's view of kvmm's (page_table(device=True));
	prefill, commit, decode and close are Engine's.
	"""

	def __init__(self, model: Model, ctx: kvmm.Context, device: Any) -> None:
		self.model, self.ctx = model, ctx
		self.device = torch.device(device)
		self.tm = torch_model(model, self.device)
		self.pools: List[List[Any]] = []
		for li in range(model.cfg.layers):
			bufs = [torch.from_dlpack(a) for a in ctx.kv(li) if a is not None]
			k, v, _, _ = ctx.kv_layer_info(li)
			assert [b.data_ptr() for b in bufs] == [a for a in (k, v) if a], "a copy"
			assert all(b.device.type == self.device.type for b in bufs)
			self.pools.append(bufs)
		self.table = torch.from_dlpack(ctx.page_table(device=True))
		assert self.table.device.type == self.device.type
		self.stream = torch.cuda.current_stream() if self.device.type == "cuda" else None

	def release(self) -> None:
		"""Drop the tensors over kvmm's memory, so that the context may close."""
		self.pools = []
		self.table = None

	def kv_slots(self, seq: kvmm.Sequence, n: int) -> Any:
		"""The pool slots of a sequence's @n tokens, from kvmm's FlashInfer
		arrays in device memory: its pages' slots up to its length."""
		ps = self.ctx.page_size
		dev = self.device
		indptr = torch.full((2,), -1, dtype=torch.int32, device=dev)
		indices = torch.full((-(-n // ps) + 1,), -1, dtype=torch.int32, device=dev)
		last = torch.full((1,), -1, dtype=torch.int32, device=dev)
		pages = self.ctx.kv_indices([seq], indptr, indices, last, stream=self.stream)
		run = indices[:pages]			# one sequence: indptr[0] is 0
		slots = (run.long()[:, None] * ps +
			 torch.arange(ps, device=dev)[None, :]).reshape(-1)
		length = (indptr[1] - indptr[0] - 1) * ps + last[0]
		slots = slots[torch.arange(pages * ps, device=dev) < length]
		assert slots.shape[0] == n, f"kv_indices covers {slots.shape[0]} tokens, not {n}"
		return slots

	def forward(self, seq: kvmm.Sequence, tokens: np.ndarray, start: int) -> np.ndarray:
		"""Engine.forward() in torch: tokens[start:]'s K/V written at the
		slots the device page table names, attention over the KV that
		kvmm's kv_indices() pages gather; their logits (numpy)."""
		tm, dev, ps = self.tm, self.device, self.ctx.page_size
		if self.stream is not None:
			self.ctx.stream_wait(self.stream)	# promotions and demotions done first
		pos = torch.arange(start, len(tokens), device=dev)
		row = self.table[seq.id]
		new_slots = row[pos // ps].long() * ps + pos % ps
		kv_slots = self.kv_slots(seq, len(tokens))
		x = tm.embed[torch.as_tensor(tokens[start:].astype(np.int64), device=dev)]
		for li, lw in enumerate(tm.layers):
			pool = self.pools[li]
			h = tm.rmsnorm(x, lw["attn_norm"])
			for buf, new in zip(pool, tm.new_kv(li, h, pos)):
				buf[new_slots] = new
			kv = tuple(buf[kv_slots] for buf in pool)
			x = tm.ffn(li, x + tm.attend(li, h, pos, kv))
		return tm.logits(x).cpu().numpy()	# waits for the stream: kvmm may move pages next


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
	not HAVE_GPU, reason="no CUDA GPU for torch and kvmm"))])
def on(request, monkeypatch):
	"""(torch device, kvmm backend, logit tolerance); test_transformer's
	workload() serves with a TorchEngine on that device meanwhile."""
	dev = request.param
	if dev == "cuda":
		monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
		monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
	monkeypatch.setattr(test_transformer, "Engine",
			    lambda model, ctx: TorchEngine(model, ctx, dev))
	return dev, ("mock" if dev == "cpu" else "cuda"), ATOL[dev]


@pytest.mark.parametrize("ps", [1, 16, 64])
def test_prefix_cache_matches_reference(on, mha, ps):
	"""A pool big enough for everything: later turns reuse whole prefixes."""
	dev, backend, atol = on
	with kvmm.Context(**mha.cfg.kvmm_geometry(), page_size=ps, nr_pages=1024 // ps,
			  max_seqs=8, max_seq_len=512, backend=backend) as ctx:
		reqs = workload(mha.cfg, ctx, mha)
		check_against_reference(mha, reqs, atol)
		hits = [r["start"] for r in reqs]
		assert hits[0] == 0
		assert all(h >= SYSTEM_LEN // ps * ps for h in hits[1:])
		assert ctx.stats().hit_tokens == sum(hits)
		ctx.check()


@pytest.mark.parametrize("geometry", ["mha", "mla"])
@pytest.mark.parametrize("ps", [1, 16, 64])
def test_demoted_prefixes_come_back_exact(on, geometry, ps, tmp_path, request):
	"""A device pool too small: prefixes go to host and NVMe and are
	promoted back, and attention on the device reads them exactly."""
	dev, backend, atol = on
	model = request.getfixturevalue(geometry)
	with kvmm.Context(**tiered(model.cfg, ps, tmp_path / "nvme"), backend=backend) as ctx:
		check_tiered(ctx, model, ps, workload(model.cfg, ctx, model), atol)


def test_torch_engine_attends_over_kvmms_pool_in_place(mha):
	"""The slots kv_indices() gives are the page table's, and attention
	reads the pool itself: KV poisoned in place changes the logits."""
	with kvmm.Context(**mha.cfg.kvmm_geometry(), page_size=16, nr_pages=64,
			  max_seqs=8, max_seq_len=512) as ctx:
		eng = TorchEngine(mha, ctx, "cpu")
		prompt = np.arange(40, dtype=np.int32) % mha.cfg.vocab
		seq, hit, logits = eng.prefill(prompt)
		assert hit == 0
		ref = Engine(mha, ctx).forward(seq, prompt, 39)		# numpy, same KV
		assert np.max(np.abs(logits[-1:] - ref)) <= 1e-5
		slots = eng.kv_slots(seq, 40)
		assert slots.tolist() == seq.slots(0, 40).tolist()
		eng.pools[0][0][slots[:16]] = 1e3			# the first page's K, layer 0
		again = eng.forward(seq, prompt, 39)
		assert np.max(np.abs(again - logits[-1:])) > 1e-2
		seq.close()
		eng.release()
