# SPDX-License-Identifier: MIT
"""The acceptance test: a numpy Llama-style decoder whose KV lives in kvmm.

Every request's logits must equal a no-cache recompute within 1e-5 and its
greedy tokens must be the reference's: with the prefix cache, after
demotion to the host and NVMe tiers and promotion back, after a restart
from the NVMe file, and when a page on the file is corrupted (a recompute,
never wrong KV), and through kvmmd from another process.  Page sizes 1,
16 and 64; MHA (GQA) and MLA geometry.
"""
import numpy as np
import pytest

import kvmm
from kvmmd import running
from llama import Engine, RingContext, check_against_reference

DEVICE_PAGES = {1: 128, 16: 12, 64: 4}
HOST_PAGES = {1: 64, 16: 2, 64: 1}
SYSTEM_LEN = 40


def workload(cfg, ctx, model, convs=4, turns=3, seed=0):
	"""Multi-turn chats over one shared system prompt, two at a time.

	Each turn's prompt is the conversation so far plus 8 new user tokens;
	each request decodes 6 tokens greedily.  Returns the served requests.
	"""
	rng = np.random.default_rng(seed)
	system = rng.integers(0, cfg.vocab, SYSTEM_LEN).astype(np.int32)
	hist = [system] * convs
	eng = Engine(model, ctx)
	out = []
	try:
		for _ in range(turns):
			for c in range(0, convs, 2):
				prompts = [np.concatenate([hist[i], rng.integers(0, cfg.vocab, 8)
							   .astype(np.int32)]) for i in (c, c + 1)]
				reqs = eng.serve(prompts, 6)
				for i, r in zip((c, c + 1), reqs):
					hist[i] = r["tokens"]
				out += reqs
	finally:
		eng.release()
	return out


def push_down(cfg, ctx, model):
	"""Move every cached prefix of the workload to the NVMe tier.

	Reclaim empties the device a leaf at a time, waiting for background
	reclaim to write the host tier down after each (a burst of demotions
	faster than the disk would drop what the host tier cannot hold), and
	unrelated requests fill the tiers behind, so the workload's pages end
	on the file.
	"""
	rng = np.random.default_rng(99)
	eng = Engine(model, ctx)
	def drain():
		# a leaf at a time, each written down before the next comes
		while ctx.reclaim(1) > 0:
			ctx.sync()

	for _ in range(3):
		drain()
		eng.serve([rng.integers(0, cfg.vocab, 60).astype(np.int32) for _ in range(2)], 1)
	drain()
	eng.release()


def tiered(cfg, ps, path):
	"""Context() parameters: a small device pool over small host and NVMe tiers."""
	return dict(cfg.kvmm_geometry(), page_size=ps, nr_pages=DEVICE_PAGES[ps],
		    host_pages=HOST_PAGES[ps], nvme_pages=8192 // ps, nvme_path=str(path),
		    # the host tier stages the NVMe one: background reclaim writes it all down
		    host_wmark_low=HOST_PAGES[ps], host_wmark_high=HOST_PAGES[ps],
		    model_id="kvmm-tests/llama-numpy@1234", max_seqs=8, max_seq_len=512)


def check_tiered(ctx, model, ps, reqs, atol=1e-5):
	"""The tiered workload's requests exact, and its KV through both tiers."""
	check_against_reference(model, reqs, atol)
	s = ctx.stats()
	assert s.host_demote_pages > 0
	assert s.host_promote_pages + s.nvme_promote_pages > 0
	if ps != 16:		# 16: the host tier's 2 pages never overflow
		assert s.nvme_demote_pages > 0 and s.nvme_promote_pages > 0
	ctx.check()


@pytest.mark.parametrize("ps", [1, 16, 64])
def test_prefix_cache_matches_reference(mha, ps):
	"""A pool big enough for everything: later turns reuse whole prefixes."""
	with kvmm.Context(**mha.cfg.kvmm_geometry(), page_size=ps, nr_pages=1024 // ps,
			  max_seqs=8, max_seq_len=512) as ctx:
		reqs = workload(mha.cfg, ctx, mha)
		check_against_reference(mha, reqs)
		hits = [r["start"] for r in reqs]
		assert hits[0] == 0
		assert all(h >= SYSTEM_LEN // ps * ps for h in hits[1:])
		assert ctx.stats().hit_tokens == sum(hits)
		ctx.check()


def run_tiered(model, ps, path):
	"""The workload on a small device pool: exact logits through both tiers."""
	with kvmm.Context(**tiered(model.cfg, ps, path)) as ctx:
		k, v = ctx.kv(0)
		assert (v is None) == model.cfg.mla
		del k, v
		check_tiered(ctx, model, ps, workload(model.cfg, ctx, model))


@pytest.mark.parametrize("ps", [1, 16, 64])
def test_demoted_prefixes_come_back_exact(mha, ps, tmp_path):
	"""A device pool too small: prefixes go to host and NVMe and are promoted."""
	run_tiered(mha, ps, tmp_path / "nvme")


@pytest.mark.parametrize("ps", [1, 16, 64])
def test_mla_geometry(mla, ps, tmp_path):
	"""One latent vector per token: the same tiered loop."""
	run_tiered(mla, ps, tmp_path / "nvme")


@pytest.mark.parametrize("ps", [1, 16])
def test_restart_from_nvme_file(mha, ps, tmp_path):
	"""A new context on the same file finds the prefixes and serves exact KV."""
	params = tiered(mha.cfg, ps, tmp_path / "nvme")
	with kvmm.Context(**params) as ctx:
		first = workload(mha.cfg, ctx, mha)
		push_down(mha.cfg, ctx, mha)
		on_file = ctx.stats().nvme_pages_cached
	assert on_file > 0
	with kvmm.Context(**params) as ctx:
		# all of it comes back; so may older copies of pages that were
		# promoted since, which are still their prefixes' KV (keys say so)
		assert ctx.stats().nvme_pages_cached >= on_file
		again = workload(mha.cfg, ctx, mha)
		check_against_reference(mha, again)
		assert again[0]["start"] >= SYSTEM_LEN // ps * ps > first[0]["start"]
		assert ctx.stats().nvme_promote_pages > 0


def test_corrupted_page_is_recomputed(mha, tmp_path):
	"""A flipped byte of KV on the file: a checksum miss, recomputed, exact."""
	path = tmp_path / "nvme"
	params = tiered(mha.cfg, 1, path)
	with kvmm.Context(**params) as ctx:
		workload(mha.cfg, ctx, mha)
		push_down(mha.cfg, ctx, mha)
	# Layer 0's K of the first token, as the first prefill computed it.
	rng = np.random.default_rng(0)
	prompt = np.concatenate([rng.integers(0, mha.cfg.vocab, SYSTEM_LEN),
				 rng.integers(0, mha.cfg.vocab, 8)]).astype(np.int32)
	h = mha.rmsnorm(mha.embed[prompt], mha.layers[0]["attn_norm"])
	k0 = mha.new_kv(0, h, np.arange(len(prompt)))[0][0].tobytes()
	data = bytearray(path.read_bytes())
	at = data.find(k0[:64])
	assert at > 4096, "the first token's K is not on the file"
	data[at + 3] ^= 0x40
	path.write_bytes(bytes(data))
	with kvmm.Context(**params) as ctx:
		reqs = workload(mha.cfg, ctx, mha)
		check_against_reference(mha, reqs)
		assert reqs[0]["start"] == 0
		assert ctx.stats().nvme_csum_fail > 0


def kvmmd_args(cfg, ps, path):
	"""kvmmd's options for tiered()'s shape: the same pools, the same model."""
	p = tiered(cfg, ps, path)
	return ["--page-size", str(ps), "--pages", str(p["nr_pages"]),
		"--host-pages", str(p["host_pages"]), "--nvme-pages", str(p["nvme_pages"]),
		"--nvme-file", p["nvme_path"], "--host-wmark-low", str(p["host_wmark_low"]),
		"--host-wmark-high", str(p["host_wmark_high"]), "--model-id", p["model_id"],
		"--layers", str(cfg.layers), "--kv-heads", str(cfg.kv_heads),
		"--head-dim", str(cfg.head_dim), "--dtype-bytes", "4",
		"--max-seqs", str(p["max_seqs"]), "--max-seq-len", str(p["max_seq_len"]), "--quiet"]


@pytest.mark.parametrize("ps", [1, 16])
def test_through_kvmmd_from_another_process(mha, ps, tmp_path):
	"""The engine in this process, kvmm in kvmmd: KV through the mapped pool.

	Slots come from SEQ_ROW, commands go through the ring; the tiers
	demote and promote as in-process, and the logits are still exact.
	"""
	with running(tmp_path / "kvmmd.sock", kvmmd_args(mha.cfg, ps, tmp_path / "nvme")) as (
			_, sock), kvmm.connect(sock) as ring:
		ctx = RingContext(ring, mha.cfg)
		reqs = workload(mha.cfg, ctx, mha)
		check_against_reference(mha, reqs)
		assert all(r["start"] >= SYSTEM_LEN // ps * ps for r in reqs[1:])
		s = ring.stats()
		assert s.seqs_open == 0 and s.host_demote_pages > 0
		assert s.host_promote_pages + s.nvme_promote_pages > 0
		ctx.pool.close()
