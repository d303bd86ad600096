# SPDX-License-Identifier: MIT
"""hf_chat.py - a small model of a real architecture under Hugging Face
transformers, with and without kvmm's prefix cache: measured, not
estimated.

    python hf_chat.py demo [--plot DIR]   a multi-turn chat, TTFT per turn
    python hf_chat.py bench [--json]      decode step and TTFT benchmarks

The model is built from transformers' own config class (Llama-shaped by
default, ``--arch qwen2`` for Qwen2) with random weights from a seed,
float32 on the CPU.  ``demo`` runs one conversation twice: with
``kvmm.transformers.KvmmCache`` (each turn's prompt matched in kvmm, only
the new part computed, the turn committed at its end) and with
transformers' ``DynamicCache`` alone (each turn computes its whole prompt,
as without a prefix cache), checks both generate the same tokens, and
prints the wall-clock time to first token of every turn (for kvmm
including the match) and the decode tokens per second; with ``--plot`` it
writes ``hf_ttft.svg`` (gnuplot) and its data there.  ``bench`` measures
the decode step time with kvmm's cache against DynamicCache at batch 1
and 8, and the TTFT of a prompt 90 % cached against none at several
prompt lengths: medians of alternating runs, with their ratios.  torch
runs on one thread unless ``--threads`` says otherwise: on a shared
machine its threads spin waiting for each other (a decode step of the
default model measured 2.9 ms on one thread and 11.9 on two, a busy
core beside).
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, Qwen2Config, \
	Qwen2ForCausalLM

import kvmm
from kvmm.transformers import KvmmCache, kv_geometry

transformers.logging.set_verbosity_error()
VOCAB = 2048
ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


def build(arch: str, hidden: int, layers: int, seed: int = 1234):
	"""(config, model): @hidden wide, @layers deep, 8 query heads over 2 KV heads."""
	cfg_cls, model_cls = ARCHS[arch]
	cfg = cfg_cls(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
		      num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
		      max_position_embeddings=8192, bos_token_id=1, eos_token_id=None,
		      pad_token_id=0)
	torch.manual_seed(seed)
	return cfg, model_cls(cfg).eval()


def tokens(n: int, seed: int) -> torch.Tensor:
	g = torch.Generator().manual_seed(seed)
	return torch.randint(3, VOCAB, (1, n), generator=g)


class Stamps(LogitsProcessor):
	"""Called once per generated token, after its forward pass: the times."""

	def __init__(self) -> None:
		self.t: List[float] = []

	def __call__(self, input_ids: Any, scores: Any) -> Any:
		self.t.append(time.perf_counter())
		return scores


def run(model: Any, ids: torch.Tensor, new: int, cache: Any = None) -> Any:
	"""Greedy generate of @new tokens; (sequences, the per-token stamps)."""
	st = Stamps()
	kw: Dict[str, Any] = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False,
				  attention_mask=torch.ones_like(ids), pad_token_id=0,
				  logits_processor=[st])
	if cache is not None:
		kw["cache"] = cache
	with torch.no_grad():
		out = model.generate(ids, **kw)
	return out, st.t


def context(cfg: Any, ps: int = 16, tokens_room: int = 1 << 16) -> kvmm.Context:
	return kvmm.Context(**kv_geometry(cfg), page_size=ps, nr_pages=tokens_room // ps,
			    max_seqs=16, max_seq_len=8192)


def turn(model: Any, cfg: Any, ctx: Optional[kvmm.Context], ids: torch.Tensor,
	 new: int) -> Dict[str, Any]:
	"""One chat turn, with kvmm's cache (@ctx) or without: its output,
	TTFT (s, from the call, the match included), decode tokens/s, tokens
	matched."""
	t0 = time.perf_counter()
	cache = KvmmCache.for_prompt(ctx, cfg, ids) if ctx is not None else None
	out, t = run(model, ids, new, cache)
	matched = cache.matched[0] if cache is not None else 0
	if cache is not None:
		cache.close(out)
	return {"out": out, "ttft": t[0] - t0, "tok_s": (len(t) - 1) / (t[-1] - t[0]),
		"matched": matched, "prompt": ids.shape[1]}


def demo(args: argparse.Namespace) -> int:
	cfg, model = build(args.arch, args.hidden, args.layers)
	print(f"demo: {args.arch}-shaped model, hidden {args.hidden}, {args.layers} layers, "
	      f"8 query heads over 2 KV heads, float32, random weights; "
	      f"torch {torch.__version__} on {torch.get_num_threads()} threads, "
	      f"transformers {transformers.__version__}")
	print(f"demo: a chat of {args.turns} turns: a {args.system}-token system prompt, "
	      f"{args.user} tokens per user message, {args.new} tokens per answer")
	rows = []
	with context(cfg) as ctx:
		hist = {True: tokens(args.system, 1), False: tokens(args.system, 1)}
		print(f"{'turn':>4} {'prompt':>6} {'cached':>6} {'TTFT kvmm':>10} {'TTFT none':>10} "
		      f"{'speedup':>7} {'tok/s kvmm':>10} {'tok/s none':>10}")
		for i in range(args.turns):
			user = tokens(args.user, 100 + i)
			res = {}
			for use in (True, False):
				ids = torch.cat([hist[use], user], dim=1)
				res[use] = turn(model, cfg, ctx if use else None, ids, args.new)
				hist[use] = res[use]["out"]
			if not torch.equal(res[True]["out"], res[False]["out"]):
				print("demo: the two runs generated different tokens", file=sys.stderr)
				return 1
			k, n = res[True], res[False]
			rows.append((i + 1, k["prompt"], k["matched"], k["ttft"], n["ttft"], k["tok_s"],
				     n["tok_s"]))
			print(f"{i + 1:>4} {k['prompt']:>6} {k['matched']:>6} {k['ttft'] * 1e3:>8.1f}ms "
			      f"{n['ttft'] * 1e3:>8.1f}ms {n['ttft'] / k['ttft']:>6.1f}x "
			      f"{k['tok_s']:>10.1f} {n['tok_s']:>10.1f}")
		ctx.check()
	tk = sum(r[3] for r in rows)
	tn = sum(r[4] for r in rows)
	print(f"demo: TTFT over all turns: {tk * 1e3:.0f} ms with kvmm's prefix cache, "
	      f"{tn * 1e3:.0f} ms without ({tn / tk:.1f}x); the same tokens generated")
	if args.plot:
		plot(Path(args.plot), rows, args)
	return 0


GNUPLOT = """set terminal svg size 800,480 dynamic font 'sans,12' background '#ffffff'
set grid lc rgb '#dddddd'
set key top left
set output 'hf_ttft.svg'
set title "Time to first token per chat turn, measured (transformers generate, CPU)\\n{name}"
set xlabel 'chat turn'
set ylabel 'TTFT (ms)'
set yrange [0:*]
set xtics 1
plot 'hf_ttft.dat' using 1:5 with linespoints lw 2 pt 7 lc rgb '#d62728' title 'no prefix cache', \\
     '' using 1:4 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'kvmm prefix cache'
"""


def plot(d: Path, rows: List[tuple], args: argparse.Namespace) -> None:
	"""hf_ttft.dat and, where gnuplot is, hf_ttft.svg in @d."""
	d.mkdir(parents=True, exist_ok=True)
	with open(d / "hf_ttft.dat", "w") as f:
		f.write("# turn prompt cached ttft_kvmm_ms ttft_none_ms tok_s_kvmm tok_s_none\n")
		for r in rows:
			f.write(f"{r[0]} {r[1]} {r[2]} {r[3] * 1e3:.3f} {r[4] * 1e3:.3f} {r[5]:.1f} "
				f"{r[6]:.1f}\n")
	name = (f"{args.arch}-shaped, hidden {args.hidden}, {args.layers} layers; system prompt "
		f"{args.system} tokens, {args.user} per message, {args.new} per answer")
	(d / "hf_ttft.gp").write_text(GNUPLOT.format(name=name))
	if shutil.which("gnuplot") is None:
		print(f"demo: no gnuplot: data in {d}/hf_ttft.dat")
		return
	subprocess.run(["gnuplot", "hf_ttft.gp"], cwd=d, check=True)
	print(f"demo: plot: {d}/hf_ttft.svg")


def bench_decode(model: Any, cfg: Any, batch: int, prompt: int, new: int,
		 repeat: int) -> Dict[str, Any]:
	"""Median decode step (ms) with kvmm's cache and with DynamicCache."""
	ids = torch.cat([tokens(prompt, 200 + b) for b in range(batch)])
	steps: Dict[str, List[float]] = {"kvmm": [], "dynamic": []}
	with context(cfg, tokens_room=batch * (prompt + new) * 2) as ctx:
		for _ in range(repeat):
			for which in ("kvmm", "dynamic"):
				cache = KvmmCache.for_prompt(ctx, cfg, ids) if which == "kvmm" else None
				_, t = run(model, ids, new, cache)
				if cache is not None:
					cache.close()
				steps[which] += [b - a for a, b in zip(t, t[1:])]
		ctx.check()
	k, d = (statistics.median(steps[w]) * 1e3 for w in ("kvmm", "dynamic"))
	return {"bench": "hf_decode_step", "batch": batch, "context": prompt, "steps": new - 1,
		"runs": repeat, "kvmm_ms": round(k, 3), "dynamic_ms": round(d, 3),
		"ratio": round(k / d, 3)}


def bench_ttft(model: Any, cfg: Any, prompt: int, repeat: int) -> Dict[str, Any]:
	"""Median TTFT (ms) of a @prompt-token prompt 90 % cached in kvmm
	against DynamicCache computing all of it."""
	ids = tokens(prompt, 300 + prompt)
	cached = prompt * 9 // 10
	ttft: Dict[str, List[float]] = {"kvmm": [], "none": []}
	with context(cfg, tokens_room=4 * prompt) as ctx:
		first = KvmmCache.for_prompt(ctx, cfg, ids[:, :cached + 1])
		out, _ = run(model, ids[:, :cached + 1], 1, first)
		first.close(out)
		matched = 0
		for _ in range(repeat):
			for which in ("kvmm", "none"):
				t0 = time.perf_counter()
				cache = KvmmCache.for_prompt(ctx, cfg, ids) if which == "kvmm" else None
				_, t = run(model, ids, 1, cache)
				ttft[which].append(t[0] - t0)
				if cache is not None:
					matched = cache.matched[0]
					cache.close()	# nothing committed: every run finds 90 %
		ctx.check()
	k, n = (statistics.median(ttft[w]) * 1e3 for w in ("kvmm", "none"))
	return {"bench": "hf_ttft", "prompt": prompt, "cached": matched, "runs": repeat,
		"kvmm_ms": round(k, 3), "none_ms": round(n, 3), "speedup": round(n / k, 2)}


def bench(args: argparse.Namespace) -> int:
	cfg, model = build(args.arch, args.hidden, args.layers)
	out = []
	for b in (1, 8):
		out.append(bench_decode(model, cfg, b, args.context, args.new, args.repeat))
	for p in args.prompts:
		out.append(bench_ttft(model, cfg, p, args.repeat))
	for r in out:
		r.update(arch=args.arch, hidden=args.hidden, layers=args.layers)
		if args.json:
			print(json.dumps(r), flush=True)
		elif r["bench"] == "hf_decode_step":
			print(f"decode step, batch {r['batch']}, {r['context']} tokens of context: "
			      f"kvmm {r['kvmm_ms']:.2f} ms, DynamicCache {r['dynamic_ms']:.2f} ms "
			      f"({r['ratio']:.2f}x)")
		else:
			print(f"TTFT, {r['prompt']}-token prompt, {r['cached']} cached: kvmm "
			      f"{r['kvmm_ms']:.1f} ms, no cache {r['none_ms']:.1f} ms "
			      f"({r['speedup']:.1f}x faster)")
	return 0


def main() -> int:
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("what", choices=("demo", "bench"))
	ap.add_argument("--arch", choices=sorted(ARCHS), default="llama")
	ap.add_argument("--hidden", type=int, default=256)
	ap.add_argument("--layers", type=int, default=4)
	ap.add_argument("--system", type=int, default=2048, help="demo: system prompt tokens")
	ap.add_argument("--user", type=int, default=64, help="demo: tokens per user message")
	ap.add_argument("--turns", type=int, default=6, help="demo: chat turns")
	ap.add_argument("--new", type=int, default=32, help="tokens generated per call")
	ap.add_argument("--plot", help="demo: write hf_ttft.svg and its data to this directory")
	ap.add_argument("--context", type=int, default=512, help="bench: decode context tokens")
	ap.add_argument("--prompts", type=int, nargs="+", default=[512, 1024, 2048, 4096],
			help="bench: prompt lengths of the TTFT benchmark")
	ap.add_argument("--repeat", type=int, default=5, help="bench: runs of each, alternating")
	ap.add_argument("--json", action="store_true", help="bench: one JSON line per figure")
	ap.add_argument("--threads", type=int, default=1,
			help="torch's threads (1: on a shared machine more spin and wait)")
	args = ap.parse_args()
	torch.set_num_threads(args.threads)
	return demo(args) if args.what == "demo" else bench(args)


if __name__ == "__main__":
	sys.exit(main())
