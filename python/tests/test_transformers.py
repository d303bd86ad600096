# SPDX-License-Identifier: MIT
"""kvmm.transformers: Hugging Face transformers' generate() over KvmmCache.

For three architectures (Llama, Qwen2, Gemma: GQA 2:1, 3:1 and MQA, heads
of 16 and 32) and page sizes 1 and 16, greedy generate of 32 tokens must
give the tokens DynamicCache gives and logits within 1e-5 (float32): on a
fresh prompt; on the next turn of a chat, its prefix served from kvmm;
after that prefix was demoted to the host tier, or to NVMe, and promoted
back; after kvmmd restarted on its NVMe file; from two processes sharing
one kvmmd; and for a left-padded batch of prompts of different lengths.
Then what is refused, and the errors on the way.

python/check-transformers.sh runs it in an environment with torch and
transformers; elsewhere it is skipped.
"""
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="no torch here (python/check-transformers.sh)")
pytest.importorskip("transformers", reason="no transformers here (python/check-transformers.sh)")

import numpy as np  # noqa: E402

import kvmm  # noqa: E402
from hf_models import (ARCHS, build, context, generate, kvmmd_args, same, tokens,  # noqa: E402
		       turn)
from kvmm.transformers import KvmmCache, kv_geometry  # noqa: E402
from kvmmd import running  # noqa: E402

PROMPT = 40		# the first turn's tokens
USER = 8		# tokens each later turn adds


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request):
	"""(config, model) of each architecture."""
	return build(request.param)


def floor(n, ps):
	return n // ps * ps


def next_turn(out, seed):
	"""The next chat turn's prompt: the conversation so far and USER more tokens."""
	return torch.cat([out, tokens(USER, seed)], dim=1)


@pytest.mark.parametrize("ps", [1, 16])
def test_fresh_prompt_then_next_turn_from_the_cache(arch, ps):
	cfg, model = arch
	with context(cfg, ps) as ctx:
		ids = tokens(PROMPT, 1)
		out, matched = turn(model, cfg, ctx, ids)
		assert matched == [0]
		ctx.check()
		# committed: every token with KV, i.e. all but the last generated
		assert ctx.lookup(out[0].int().numpy()) == floor(out.shape[1] - 1, ps)
		ids2 = next_turn(out, 2)
		out2, matched = turn(model, cfg, ctx, ids2)
		assert matched == [floor(out.shape[1] - 1, ps)]
		assert ctx.stats().hit_tokens >= matched[0]
		ctx.check()


@pytest.mark.parametrize("ps", [1, 16])
def test_kv_lives_in_the_pool_and_is_dynamic_caches(arch, ps):
	"""The KV the model wrote is in kvmm's pool (read back through the page
	table), equal to DynamicCache's; the layers hold no tensors of it."""
	cfg, model = arch
	ids = tokens(PROMPT, 3)
	with torch.no_grad():
		ref = model(ids, use_cache=True).past_key_values
	with context(cfg, ps) as ctx:
		cache = KvmmCache.for_prompt(ctx, cfg, ids)
		with torch.no_grad():
			model(ids, cache=cache, use_cache=True)
		assert cache.lengths == [PROMPT]
		for li, layer in enumerate(cache.layers):
			assert layer.keys is None and layer.values is None
			k, v = cache.kv(0, li)
			assert torch.allclose(k, ref.layers[li].keys[0], atol=1e-6)
			assert torch.allclose(v, ref.layers[li].values[0], atol=1e-6)
		cache.close()
		ctx.check()


def push_down(ctx):
	"""Reclaim the device pool a leaf at a time, each written down first."""
	while ctx.reclaim(1) > 0:
		ctx.sync()
	ctx.sync()


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("tier", ["host", "nvme"])
def test_prefix_demoted_and_promoted_back(arch, ps, tier, tmp_path):
	cfg, model = arch
	extra = dict(host_pages=1024 // ps)
	if tier == "nvme":
		# the host tier stages the NVMe one: background reclaim writes it all down
		hp = 256 // ps
		extra = dict(host_pages=hp, host_wmark_low=hp, host_wmark_high=hp, nvme_pages=8192 // ps,
			     nvme_path=str(tmp_path / "nvme"), model_id="kvmm-tests/hf@1234")
	with context(cfg, ps, **extra) as ctx:
		out, _ = turn(model, cfg, ctx, tokens(PROMPT, 4))
		push_down(ctx)
		ids2 = next_turn(out, 5)
		toks = ids2[0].int().numpy()
		where = ctx.tiers(toks)
		assert where[0] == 0
		assert (where[1] if tier == "host" else where[2]) >= floor(PROMPT, ps)
		out2, matched = turn(model, cfg, ctx, ids2)
		assert matched[0] >= floor(PROMPT, ps)
		s = ctx.stats()
		if tier == "host":
			assert s.host_demote_pages > 0 and s.host_promote_pages > 0
		else:
			assert s.nvme_demote_pages > 0 and s.nvme_promote_pages > 0
		ctx.check()


@pytest.mark.parametrize("ps", [1, 16])
def test_through_kvmmd_and_after_its_restart(arch, ps, tmp_path):
	"""The pool in kvmmd, mapped here: a chat turn, then kvmmd stopped
	(SIGTERM flushes to its NVMe file) and started again on the file; the
	next turn is served from what the file held."""
	cfg, model = arch
	args = kvmmd_args(cfg, ps, tmp_path / "nvme")
	sock = tmp_path / "kvmmd.sock"
	with running(sock, args) as (_, path), kvmm.connect(path) as ring:
		out, matched = turn(model, cfg, ring, tokens(PROMPT, 6))
		assert matched == [0]
		ids2 = next_turn(out, 7)
		out2, matched = turn(model, cfg, ring, ids2)
		assert matched == [floor(out.shape[1] - 1, ps)]
		ring.check()
	with running(sock, args) as (_, path), kvmm.connect(path) as ring:
		assert ring.stats().nvme_pages_cached > 0
		out3, matched = turn(model, cfg, ring, next_turn(out2, 8))
		assert matched == [floor(out2.shape[1] - 1, ps)]
		assert ring.stats().nvme_promote_pages > 0
		ring.check()


CHILD = textwrap.dedent("""
	import json, sys
	import kvmm, torch
	from hf_models import build, tokens, turn
	arch, sock, seeds = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
	cfg, model = build(arch)
	ids = torch.cat([tokens(n, s) for n, s in seeds], dim=1)
	with kvmm.connect(sock) as ring:
		out, matched = turn(model, cfg, ring, ids)
	print(json.dumps({"matched": matched[0], "out": out[0].tolist()}))
""")


def child(arch, sock, seeds):
	"""A process that serves one request through kvmmd (checked against
	DynamicCache there), started: its Popen."""
	return subprocess.Popen([sys.executable, "-c", CHILD, arch, sock, json.dumps(seeds)],
				stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reap(proc):
	out, err = proc.communicate(timeout=300)
	assert proc.returncode == 0, err
	return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("name", sorted(ARCHS))
def test_two_processes_share_one_kvmmd(name, ps, tmp_path):
	"""Process A serves a system prompt and a question; then B (A's chat,
	one turn on) and C (the same system prompt, another question) run at
	once, each in its own process, and find A's KV in kvmmd."""
	cfg, _ = build(name)
	system = [(PROMPT, 10)]
	with running(tmp_path / "kvmmd.sock", kvmmd_args(cfg, ps, tmp_path / "nvme")) as (_, sock):
		a = reap(child(name, sock, system + [(USER, 11)]))
		assert a["matched"] == 0
		b = child(name, sock, system + [(USER, 11), (len(a["out"]) - PROMPT - USER, 0)])
		c = child(name, sock, system + [(USER, 12)])
		b, c = reap(b), reap(c)
		assert c["matched"] == floor(PROMPT, ps)
		assert b["matched"] >= floor(PROMPT + USER, ps)


@pytest.mark.parametrize("ps", [1, 16])
def test_left_padded_batch_of_different_lengths(arch, ps):
	"""Three prompts at once, left-padded: one a chat's next turn (mostly
	cached), one sharing only a system prompt with it, one new; each a
	kvmm sequence of its own, each committed for its own next turn."""
	cfg, model = arch
	with context(cfg, ps) as ctx:
		first, _ = turn(model, cfg, ctx, tokens(PROMPT, 20))
		rows = [next_turn(first, 21)[0], torch.cat([tokens(PROMPT, 20), tokens(3, 22)], 1)[0],
			tokens(11, 23)[0]]
		width = max(len(r) for r in rows)
		ids = torch.zeros(len(rows), width, dtype=torch.long)
		mask = torch.zeros_like(ids)
		for i, r in enumerate(rows):
			ids[i, width - len(r):] = r
			mask[i, width - len(r):] = 1
		out, matched = turn(model, cfg, ctx, ids, mask)
		assert matched == [floor(first.shape[1] - 1, ps), floor(PROMPT, ps), 0]
		ctx.check()
		for i, r in enumerate(rows):	# each row's chat goes on alone
			pad = width - len(r)
			own = out[i:i + 1, pad:]
			_, again = turn(model, cfg, ctx, next_turn(own, 30 + i))
			assert again == [floor(own.shape[1] - 1, ps)]
		ctx.check()


# ---- what is refused, and the errors on the way ----

def test_sliding_window_is_refused():
	from transformers import MistralConfig
	cfg = MistralConfig(vocab_size=64, hidden_size=64, intermediate_size=128,
			    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
			    sliding_window=16)
	with pytest.raises(ValueError, match="sliding"):
		kv_geometry(cfg)
	cfg.sliding_window = None	# the same model with full attention is served
	assert kv_geometry(cfg)["kv_heads"] == 2


def test_right_padding_and_bad_shapes_are_refused(arch):
	cfg, _ = arch
	with context(cfg, 16) as ctx:
		ids = torch.ones(2, 5, dtype=torch.long)
		with pytest.raises(ValueError, match="left"):
			KvmmCache.for_prompt(ctx, cfg, ids, torch.tensor([[1, 1, 1, 0, 0]] * 2))
		with pytest.raises(ValueError, match="left"):
			KvmmCache.for_prompt(ctx, cfg, ids, torch.zeros(2, 5, dtype=torch.long))
		with pytest.raises(ValueError, match="shape"):
			KvmmCache.for_prompt(ctx, cfg, ids, torch.ones(2, 4, dtype=torch.long))
		with pytest.raises(ValueError, match="batch, length"):
			KvmmCache.for_prompt(ctx, cfg, ids[0])
		with pytest.raises(TypeError, match="Context or kvmm.Ring"):
			KvmmCache.for_prompt(object(), cfg, ids)
		assert ctx.stats().seqs_open == 0
		ctx.check()


def test_another_geometry_is_refused_and_releases_everything(arch):
	cfg, _ = arch
	geo = kv_geometry(cfg)
	with kvmm.Context(**dict(geo, head_dim=geo["head_dim"] * 2), page_size=16, nr_pages=16,
			  max_seqs=4, max_seq_len=256) as ctx:
		with pytest.raises(ValueError, match="geometry"):
			KvmmCache.for_prompt(ctx, cfg, tokens(20, 1))
		assert ctx.stats().seqs_open == 0 and ctx.live_views == 0


def test_kvmmd_of_another_geometry_is_refused(tmp_path):
	cfg, _ = build("llama")
	args = kvmmd_args(cfg, 16, tmp_path / "nvme")
	args[args.index("--head-dim") + 1] = "32"
	with running(tmp_path / "kvmmd.sock", args) as (
			_, sock), kvmm.connect(sock) as ring:
		with pytest.raises(ValueError, match="slots are"):
			KvmmCache.for_prompt(ring, cfg, tokens(20, 1))
		assert ring.stats().seqs_open == 0
		ring.check()


def test_pool_too_small_raises_nospace_and_leaks_nothing(arch):
	"""A prompt longer than the pool: EXTEND's ENOSPC out of generate(); the
	cache closes clean and the context is whole."""
	cfg, model = arch
	with context(cfg, 16, nr_pages=2) as ctx:
		cache = KvmmCache.for_prompt(ctx, cfg, tokens(PROMPT, 1))
		with pytest.raises(kvmm.NoSpace):
			generate(model, tokens(PROMPT, 1), cache=cache)
		with pytest.raises(RuntimeError, match="earlier step failed"):
			generate(model, tokens(PROMPT, 1), cache=cache)
		cache.close()
		cache.close()
		s = ctx.stats()
		assert s.seqs_open == 0 and ctx.live_views == 0
		ctx.check()


def test_no_room_to_promote_computes_the_prefix_again(arch, tmp_path):
	"""The prefix is on the host tier and the device has no free page for
	it (another sequence holds them): PROMOTE's ENOSPC is no error, the
	match is what the device holds (nothing), and the prompt is computed
	whole once the other sequence is gone."""
	cfg, model = arch
	with context(cfg, 16, nr_pages=16, host_pages=64) as ctx:
		out, _ = turn(model, cfg, ctx, tokens(PROMPT, 40))
		push_down(ctx)
		ids2 = next_turn(out, 41)
		assert ctx.tiers(ids2[0].int().numpy())[1] > 0
		hog = ctx.open()
		hog.extend(16 * 15)
		cache = KvmmCache.for_prompt(ctx, cfg, ids2)
		assert cache.matched == [0]
		hog.close()
		ref = generate(model, ids2)
		got = generate(model, ids2, cache=cache)
		same(got, ref)
		cache.close(got[0])
		ctx.check()


def test_closed_cache_and_foreign_sequences_are_refused(arch):
	cfg, model = arch
	with context(cfg, 16) as ctx:
		ids = tokens(PROMPT, 1)
		cache = KvmmCache.for_prompt(ctx, cfg, ids)
		with pytest.raises(ValueError, match="continue"):
			cache.close(tokens(PROMPT, 2))
		cache.close()
		with pytest.raises(RuntimeError, match="closed"):
			generate(model, ids, cache=cache)
		with pytest.raises(NotImplementedError):
			cache.reset()
		assert ctx.stats().seqs_open == 0
		ctx.check()


def test_generate_in_a_child_interpreter_survives_close_under_views(arch, tmp_path):
	"""Closing the context while a cache holds its pool is refused (Busy),
	never a crash: run where a segfault would fail the test."""
	script = textwrap.dedent("""
		import sys, kvmm
		from hf_models import build, context, tokens, generate
		from kvmm.transformers import KvmmCache
		cfg, model = build(sys.argv[1])
		ctx = context(cfg, 16)
		cache = KvmmCache.for_prompt(ctx, cfg, tokens(40, 1))
		try:
			ctx.close()
		except kvmm.Busy:
			print("busy")
		seqs, _ = generate(model, tokens(40, 1), cache=cache)
		cache.close(seqs)
		ctx.close()
		print("closed", ctx.closed)
	""")
	name = {"LlamaConfig": "llama", "Qwen2Config": "qwen2", "GemmaConfig": "gemma"}[
		type(arch[0]).__name__]
	p = subprocess.run([sys.executable, "-c", script, name], capture_output=True, text=True,
			   timeout=300)
	assert p.returncode == 0, p.stderr
	assert p.stdout.split() == ["busy", "closed", "True"]
