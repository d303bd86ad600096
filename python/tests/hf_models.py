# SPDX-License-Identifier: MIT
"""hf_models.py - tiny decoders of real transformers architectures, random
weights from a seed, and greedy generation with DynamicCache or kvmm's
cache: what test_transformers.py and its child processes share.

Three architectures from transformers' own config classes, with different
grouped-query ratios and head sizes: Llama (4 query heads over 2 KV heads
of 16), Qwen2 (6 over 2 of 16, biased QKV), Gemma (4 over 1 of 32, a
head wider than hidden / heads).
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import transformers
from transformers import (GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM,
			  Qwen2Config, Qwen2ForCausalLM)

import kvmm
from kvmm.transformers import KvmmCache, kv_geometry

VOCAB = 160
NEW_TOKENS = 32
OBJTREE = Path(os.environ.get("KVMM_O", Path(__file__).resolve().parents[2] / "build"))

ARCHS = {
	"llama": (LlamaConfig, LlamaForCausalLM,
		  dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
		       num_key_value_heads=2)),
	"qwen2": (Qwen2Config, Qwen2ForCausalLM,
		  dict(hidden_size=96, intermediate_size=160, num_attention_heads=6,
		       num_key_value_heads=2)),
	"gemma": (GemmaConfig, GemmaForCausalLM,
		  dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
		       num_key_value_heads=1, head_dim=32)),
}

transformers.logging.set_verbosity_error()


def build(arch: str, seed: int = 1234, layers: int = 2) -> Tuple[Any, Any]:
	"""(config, model) of @arch, float32, random weights from @seed, eval mode."""
	cfg_cls, model_cls, kw = ARCHS[arch]
	cfg = cfg_cls(vocab_size=VOCAB, num_hidden_layers=layers, max_position_embeddings=1024,
		      bos_token_id=1, eos_token_id=None, pad_token_id=0, **kw)
	torch.manual_seed(seed)
	return cfg, model_cls(cfg).eval()


def tokens(n: int, seed: int) -> torch.Tensor:
	"""@n random token ids (1, n) from @seed, none of them the pad id 0."""
	g = torch.Generator().manual_seed(seed)
	return torch.randint(3, VOCAB, (1, n), generator=g)


def generate(model: Any, ids: torch.Tensor, mask: Optional[torch.Tensor] = None,
	     cache: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
	"""Greedy generate of NEW_TOKENS: (sequences, logits (steps, batch, vocab)).

	The attention mask is always given: generate() would otherwise take
	every pad id (0) in @ids, a token the model may have generated, for
	padding."""
	kw: Dict[str, Any] = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
				  do_sample=False, output_logits=True, return_dict_in_generate=True,
				  pad_token_id=0)
	kw["attention_mask"] = torch.ones_like(ids) if mask is None else mask
	if cache is not None:
		kw["cache"] = cache
	with torch.no_grad():
		out = model.generate(ids, **kw)
	return out.sequences, torch.stack(out.logits)


def same(got: Tuple[torch.Tensor, torch.Tensor], ref: Tuple[torch.Tensor, torch.Tensor],
	 atol: float = 1e-5) -> float:
	"""Assert identical tokens and logits within @atol; the largest difference."""
	assert torch.equal(got[0], ref[0]), f"tokens differ:\n{got[0]}\n{ref[0]}"
	diff = float((got[1] - ref[1]).abs().max())
	assert diff <= atol, f"logits differ by {diff}"
	return diff


def turn(model: Any, cfg: Any, kv: Any, ids: torch.Tensor, mask: Optional[torch.Tensor] = None,
	 ) -> Tuple[torch.Tensor, List[int]]:
	"""One request through kvmm (@kv: a Context or a Ring), checked against
	DynamicCache: its sequences and the tokens matched per row."""
	ref = generate(model, ids, mask)
	cache = KvmmCache.for_prompt(kv, cfg, ids, mask)
	try:
		got = generate(model, ids, mask, cache)
		same(got, ref)
		matched = cache.matched
	except BaseException:
		cache.close()
		raise
	cache.close(got[0])
	return got[0], matched


def kvmmd_args(cfg: Any, ps: int, nvme: Path, pages: int = 4096, host_pages: int = 1024,
	       ) -> List[str]:
	"""kvmmd's options for @cfg's KV at page size @ps, with an NVMe file."""
	g = kv_geometry(cfg)
	return ["--page-size", str(ps), "--pages", str(pages // ps),
		"--host-pages", str(max(host_pages // ps, 1)), "--nvme-pages", str(16384 // ps),
		"--nvme-file", str(nvme), "--model-id", f"kvmm-tests/hf-{cfg.model_type}@1234",
		"--layers", str(g["layers"]), "--kv-heads", str(g["kv_heads"]),
		"--head-dim", str(g["head_dim"]), "--dtype-bytes", str(g["dtype_bytes"]),
		"--max-seqs", "16", "--max-seq-len", "512", "--quiet"]


def context(cfg: Any, ps: int, **kw: Any) -> kvmm.Context:
	"""A kvmm.Context for @cfg's KV at page size @ps (room for a few requests)."""
	params = dict(kv_geometry(cfg), page_size=ps, nr_pages=2048 // ps, max_seqs=16,
		      max_seq_len=512)
	params.update(kw)
	return kvmm.Context(**params)
