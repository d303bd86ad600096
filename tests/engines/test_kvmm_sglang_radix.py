# SPDX-License-Identifier: MIT
"""kvmm.sglang.KvmmRadixCache against SGLang 0.5.23's own RadixCache, call by call.

SGLang's packages ship no RadixCache tests, so these drive both caches
through the same sequences of BasePrefixCache calls, each over its own
CPU ReqToTokenPool and slot allocator built alike, and assert the same
answers after every call: insert's prefix_len, match's length and the
slots path_device_indices gives, inc/dec_lock_ref's deltas, evict's
count, evictable/protected sizes, and checkpoint's effect on a request's
row and on the allocator.  Random sequences at page sizes 1 and 4, and
the cases SGLang's upstream unit tests cover (splits, lock refs
protecting a path, extra keys, page-aligned keys, empty keys).  Bad input
as SGLang sees it: a dec_lock_ref of an unlocked node is a ValueError
here (RadixCache lets the count go negative), with nothing changed.
Run by tests/engines/run.sh in the SGLang environment.
"""
import gc
import os
import random
import subprocess
import sys
import unittest.mock
from array import array
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

from sglang.srt.managers.schedule_batch import ReqKvInfo
from sglang.srt.disaggregation.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from sglang.srt.mem_cache.base_prefix_cache import (DecLockRefParams, EvictParams, InsertParams,
						     MatchPrefixParams, TreeLock)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from kvmm import Busy
from kvmm.sglang import KvmmRadixCache, cpu_tree_cache, register

SLOTS = 512


def build(cls, ps, policy="lru", events=False):
	"""A cache of @cls over its own request pool and allocator."""
	return cpu_tree_cache(cls, ps, SLOTS, policy=policy, events=events)


def K(tokens, extra=None):
	return RadixKey(array("q", tokens), extra_key=extra)


def slots(base, n, ps):
	"""@n slots of whole pages from page @base on: what an allocator hands out."""
	return torch.arange(base * ps, base * ps + n, dtype=torch.int64)


class Pair:
	"""Both caches, the same call on each, the answers compared."""

	def __init__(self, ps, policy="lru", events=False):
		self.ps = ps
		self.ref = build(RadixCache, ps, policy, events)
		self.kv = build(KvmmRadixCache, ps, policy, events)
		self.nr_events = 0

	def sizes(self):
		a = (self.ref.cache.evictable_size(), self.ref.cache.protected_size())
		b = (self.kv.cache.evictable_size(), self.kv.cache.protected_size())
		assert a == b, f"sizes: RadixCache {a}, kvmm {b}"
		self.events()
		return a

	def events(self):
		"""The KV events each cache queued since the last call: the same."""
		a = self.ref.cache.take_events()
		b = self.kv.cache.take_events()
		assert a == b, f"KV events: RadixCache {a}, kvmm {b}"
		self.nr_events += len(a)
		return a

	def insert(self, key, value):
		a = self.ref.cache.insert(InsertParams(key=key, value=value)).prefix_len
		b = self.kv.cache.insert(InsertParams(key=key, value=value)).prefix_len
		assert a == b, f"insert prefix_len: RadixCache {a}, kvmm {b}"
		self.sizes()
		return a

	def match(self, key):
		a = self.ref.cache.match_prefix(MatchPrefixParams(key=key))
		b = self.kv.cache.match_prefix(MatchPrefixParams(key=key))
		assert a.device_prefix_len == b.device_prefix_len, \
			f"match: RadixCache {a.device_prefix_len}, kvmm {b.device_prefix_len}"
		ia = self.ref.cache.path_device_indices(a.last_device_node)
		ib = self.kv.cache.path_device_indices(b.last_device_node)
		assert ib.dtype == torch.int64 and ib.is_contiguous()
		assert torch.equal(ia, ib), f"path indices: RadixCache {ia.tolist()}, kvmm {ib.tolist()}"
		assert b.last_host_node == b.last_device_node == b.best_match_node
		self.sizes()
		return a.device_prefix_len, (a.last_device_node, b.last_device_node)

	def lock(self, nodes, inc=True):
		if inc:
			a = self.ref.cache.inc_lock_ref(nodes[0]).delta
			b = self.kv.cache.inc_lock_ref(nodes[1]).delta
		else:
			a = self.ref.cache.dec_lock_ref(nodes[0]).delta
			b = self.kv.cache.dec_lock_ref(nodes[1]).delta
		assert a == b, f"lock delta: RadixCache {a}, kvmm {b}"
		self.sizes()

	def evict(self, n):
		a = self.ref.cache.evict(EvictParams(num_tokens=n)).num_tokens_evicted
		b = self.kv.cache.evict(EvictParams(num_tokens=n)).num_tokens_evicted
		assert a == b, f"evict({n}): RadixCache {a}, kvmm {b}"
		assert self.ref.alloc.available_size() == self.kv.alloc.available_size()
		self.sizes()
		return a


@pytest.fixture(params=[1, 4])
def pair(request):
	return Pair(request.param)


def test_splits_and_branches(pair):
	ps = pair.ps
	a = [1, 2, 3, 4, 5, 6, 7, 8]
	assert pair.insert(K(a), slots(1, 8, ps)) == 0
	assert pair.insert(K([1, 2, 3, 4, 9, 10, 11, 12]), slots(10, 8, ps)) == 4
	assert pair.match(K(a))[0] == 8
	assert pair.match(K([1, 2, 3, 4, 9, 10, 11, 12]))[0] == 8
	assert pair.match(K([1, 2, 3, 4, 5, 6]))[0] == (6 if ps == 1 else 4)	# splits
	assert pair.match(K([1, 2, 3, 99]))[0] == (3 if ps == 1 else 0)
	assert pair.match(K([42]))[0] == 0


def test_empty_and_unaligned_keys(pair):
	ps = pair.ps
	assert pair.match(K([]))[0] == 0
	assert pair.insert(K([7] * 10), slots(1, 10, ps)) == 0	# only whole pages stay
	assert pair.sizes() == (10 if ps == 1 else 8, 0)
	assert pair.match(K([7] * 7))[0] == (7 if ps == 1 else 4)


def test_extra_keys_are_apart(pair):
	ps = pair.ps
	t = [1, 2, 3, 4, 5, 6, 7, 8]
	pair.insert(K(t, "lora-a"), slots(1, 8, ps))
	pair.insert(K(t), slots(20, 8, ps))
	assert pair.match(K(t, "lora-b"))[0] == 0
	assert pair.match(K(t, "lora-a"))[0] == 8
	assert pair.match(K(t))[0] == 8


def test_locks_protect_a_path(pair):
	ps = pair.ps
	pair.insert(K(list(range(16))), slots(1, 16, ps))
	pair.insert(K(list(range(100, 108))), slots(40, 8, ps))
	_, nodes = pair.match(K(list(range(12))))
	pair.lock(nodes)
	pair.lock(nodes)					# nested
	assert pair.evict(1000) == 4 + 8			# the tail past 12, and the other key
	assert pair.match(K(list(range(16))))[0] == 12
	pair.lock(nodes, inc=False)
	pair.lock(nodes, inc=False)
	assert pair.evict(1000) == 12
	assert pair.sizes() == (0, 0)


def test_lru_order(pair):
	ps = pair.ps
	keys = [[k * 100 + i for i in range(8)] for k in range(4)]
	for k, key in enumerate(keys):
		pair.insert(K(key), slots(1 + 10 * k, 8, ps))
	pair.match(K(keys[0]))				# 0 is the newest now
	assert pair.evict(8) == 8				# 1 goes
	assert pair.match(K(keys[1]))[0] == 0
	assert pair.match(K(keys[0]))[0] == 8
	assert pair.evict(16) == 16			# 2 and 3
	assert pair.match(K(keys[0]))[0] == 8


def test_slru_counts_a_hit_as_sglang_does():
	"""slru keeps what was inserted twice over what was inserted once; an
	insert by a request that inserted the key before (inserted_len) and a
	match count no hit.  z goes first, though x is newer and matched."""
	p = Pair(1, "slru")
	x, y, z = ([base + i for i in range(16)] for base in (100, 200, 300))
	p.insert(K(y), slots(1, 16, 1))
	p.insert(K(y), slots(17, 16, 1))
	p.insert(K(z), slots(33, 16, 1))
	for side in (p.ref, p.kv):
		side.cache.insert(InsertParams(key=K(z), value=slots(49, 16, 1), inserted_len=16))
	p.insert(K(x), slots(65, 16, 1))
	for _ in range(3):
		p.match(K(x))
	assert p.evict(1) == 16
	assert [p.match(K(t))[0] for t in (z, x, y)] == [0, 16, 16]
	assert p.evict(1) == 16
	assert [p.match(K(t))[0] for t in (x, y)] == [0, 16]


def test_dec_of_an_unlocked_node_is_refused():
	p = Pair(1)
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	_, nodes = p.match(K([1, 2, 3]))
	with pytest.raises(ValueError):
		p.kv.cache.dec_lock_ref(nodes[1])
	assert p.kv.cache.evictable_size() == 3 and p.kv.cache.protected_size() == 0


def test_refused_configurations():
	for policy in ("fifo", "lfu", "mru", "filo", "priority", "tlru"):
		with pytest.raises(ValueError):
			build(KvmmRadixCache, 1, policy=policy)
	# slru's threshold is kvmm's 2 (SGLang's default): another is refused
	side = build(KvmmRadixCache, 1, policy="lru")
	for policy, config, ok in (("slru", {"protected_threshold": 2}, True),
				   ("slru", {"protected_threshold": 3}, False),
				   ("lru", {"x": 1}, False)):
		params = CacheInitParams(disable=False, req_to_token_pool=side.pool,
					 token_to_kv_pool_allocator=side.alloc, page_size=1,
					 eviction_policy=policy, eviction_policy_config=config)
		if ok:
			KvmmRadixCache(params)
		else:
			with pytest.raises(ValueError, match="config"):
				KvmmRadixCache(params)


def test_registered_as_a_backend():
	from sglang.srt.mem_cache.registry import (get_radix_cache_factory,
						    registered_radix_cache_backends)

	register()
	register()					# idempotent, as plugins may load twice
	assert "kvmm" in registered_radix_cache_backends()
	ctx = SimpleNamespace(params=CacheInitParams(disable=False, req_to_token_pool=None,
						     token_to_kv_pool_allocator=None, page_size=1))
	assert isinstance(get_radix_cache_factory("kvmm")(ctx), KvmmRadixCache)


@pytest.mark.parametrize("events", [False, True])
@pytest.mark.parametrize("policy", ["lru", "slru"])
@pytest.mark.parametrize("ps", [1, 4])
def test_random_calls_agree(ps, policy, events):
	"""Inserts over shared prefixes, matches, locks and unlocks, evictions
	under pressure: the same answers after every call, under each eviction
	policy both trees have (slru: a node inserted twice is kept over one
	inserted once, whatever matched it); with KV events on, the same
	events queued after every call, keys of three namespaces among them."""
	p = Pair(ps, policy, events)
	rng = random.Random(ps)
	base, locked = 1, []
	for _ in range(600):
		op = rng.random()
		prefix = [rng.randrange(3) * 1000 + i for i in range(rng.choice([0, 4, 8]))]
		key = prefix + [rng.randrange(4) for _ in range(rng.randrange(1, 13))]
		if op < 0.45:
			n = len(key) // ps * ps
			if base * ps + n >= SLOTS:
				p.evict(rng.randrange(1, 64))
				continue
			ns = rng.choice([None, None, "lora", "salt"])
			k = RadixKey(array("q", key), "lora" if ns == "lora" else None,
				     cache_salt="s1" if ns == "salt" else None)
			p.insert(k, slots(base, len(key), ps))
			base += -(-n // ps) if n else 0
		elif op < 0.7:
			_, nodes = p.match(K(key))
			if rng.random() < 0.5:
				p.lock(nodes)
				locked.append(nodes)
		elif op < 0.85 and locked:
			p.lock(locked.pop(rng.randrange(len(locked))), inc=False)
		else:
			p.evict(rng.randrange(1, 40))
	while locked:
		p.lock(locked.pop(), inc=False)
	p.evict(10 ** 6)
	assert p.sizes() == (0, 0)
	assert (p.nr_events > 20) == events


def make_req(side, tokens, prompt_len):
	"""A request of @tokens over fresh slots of @side's allocator, as the
	scheduler leaves one before checkpoint()."""
	kv = ReqKvInfo()
	kv.req_pool_idx = side.pool.alloc_rows(1)[0]
	n = -(-len(tokens) // side.cache.page_size) * side.cache.page_size
	idx = side.alloc.alloc(n)
	side.pool.write((kv.req_pool_idx, slice(0, n)), idx.to(torch.int32))
	return SimpleNamespace(kv=kv, full_untruncated_fill_ids=array("q", tokens),
			       origin_input_ids=array("q", tokens[:prompt_len]), extra_key=None,
			       cache_salt=None, priority=None, lock=None,
			       last_node=side.cache.root_node)


@pytest.mark.parametrize("ps", [1, 4])
def test_checkpoint_as_the_scheduler_calls_it(ps):
	"""checkpoint() of requests sharing a prompt: the same rows, the same
	slots freed, the same locks; then release as release_kv_cache does."""
	p = Pair(ps)
	prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [5, 6, 7, 8, 9, 10, 11, 12, 40, 41]]
	for toks in prompts:
		reqs = [make_req(side, toks, 6) for side in (p.ref, p.kv)]
		for side, req in zip((p.ref, p.kv), reqs):
			side.cache.checkpoint(req, up_to=len(toks))
		a, b = reqs
		assert a.kv.cache_protected_len == b.kv.cache_protected_len
		row = slice(0, len(toks))
		assert torch.equal(p.ref.pool.req_to_token[a.kv.req_pool_idx, row],
				   p.kv.pool.req_to_token[b.kv.req_pool_idx, row])
		assert p.ref.alloc.available_size() == p.kv.alloc.available_size()
		p.sizes()
		for side, req in zip((p.ref, p.kv), reqs):
			side.cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, len(toks))])
			side.cache.unlock(req.lock)
			req.lock = None
		p.sizes()
	assert p.match(K(prompts[1]))[0] == len(prompts[1]) // ps * ps
	assert p.evict(10 ** 6) > 0 and p.sizes() == (0, 0)


class Requests:
	"""Requests through both caches as SGLang's scheduler drives a tree
	cache (python/bench/radix.py's replay, small): admit = match_prefix,
	lock, the prefix and fresh slots (evicting when short) into a row,
	checkpoint the prompt; finish = checkpoint everything, free_kv_row,
	unlock.  Every answer, row and allocator size compared as it goes."""

	def __init__(self, ps, rows=6, policy="lru", events=False):
		self.ps = ps
		self.p = Pair(ps, policy, events)
		self.sides = (self.p.ref, self.p.kv)
		self.live = []

	def rows(self, reqs, n):
		for a, b in [reqs]:
			assert a.kv.cache_protected_len == b.kv.cache_protected_len
			ra = self.p.ref.pool.req_to_token[a.kv.req_pool_idx, :n]
			rb = self.p.kv.pool.req_to_token[b.kv.req_pool_idx, :n]
			assert torch.equal(ra, rb), f"rows: RadixCache {ra.tolist()}, kvmm {rb.tolist()}"
		assert self.p.ref.alloc.available_size() == self.p.kv.alloc.available_size()
		self.p.sizes()

	def grab(self, n):
		"""@n slots on each side, evicting alike when short."""
		short = n - self.p.ref.alloc.available_size()
		if short > 0:
			self.p.evict(short)
		got = [side.alloc.alloc(n) for side in self.sides]
		assert (got[0] is None) == (got[1] is None)
		return got if got[0] is not None else None

	def admit(self, prompt, full):
		ps, n = self.ps, len(prompt)
		m, nodes = self.p.match(K(prompt[: n - 1]))
		locks = [side.cache.lock(node) for side, node in zip(self.sides, nodes)]
		alloc = -(-n // ps) * ps
		new = self.grab(alloc - m)
		if new is None:
			for side, lock in zip(self.sides, locks):
				side.cache.unlock(lock)
			return False
		reqs = []
		for side, node, lock, slots_ in zip(self.sides, nodes, locks, new):
			kv = ReqKvInfo()
			kv.req_pool_idx = side.pool.alloc_rows(1)[0]
			kv.cache_protected_len = m
			prefix = side.cache.path_device_indices(node)[:m]
			side.pool.write((kv.req_pool_idx, slice(0, m)), prefix.to(torch.int32))
			side.pool.write((kv.req_pool_idx, slice(m, alloc)), slots_.to(torch.int32))
			req = SimpleNamespace(kv=kv, full_untruncated_fill_ids=array("q", prompt),
					      origin_input_ids=array("q", prompt), extra_key=None,
					      cache_salt=None, priority=None, lock=lock, last_node=node,
					      allocated=alloc)
			side.cache.checkpoint(req, up_to=n)
			reqs.append(req)
		self.rows(reqs, alloc)
		extra = -(-len(full) // ps) * ps - alloc
		dec = self.grab(extra) if extra > 0 else None
		for side, req in zip(self.sides, reqs):
			if dec is not None:
				slots_ = dec[self.sides.index(side)]
				side.pool.write((req.kv.req_pool_idx, slice(alloc, alloc + extra)),
						slots_.to(torch.int32))
				req.allocated += extra
			req.full_untruncated_fill_ids = array("q", full[: req.allocated])
		self.live.append(reqs)
		return True

	def finish(self, i=0):
		reqs = self.live.pop(i)
		owned = len(reqs[0].full_untruncated_fill_ids)
		for side, req in zip(self.sides, reqs):
			side.cache.checkpoint(req, up_to=owned)
		self.rows(reqs, owned)
		for side, req in zip(self.sides, reqs):
			side.cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, req.allocated)])
			side.cache.unlock(req.lock)
			req.lock = None
			side.pool.free_rows([req.kv.req_pool_idx])
		assert self.p.ref.alloc.available_size() == self.p.kv.alloc.available_size()
		self.p.sizes()


@pytest.mark.parametrize("policy", ["lru", "slru"])
@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("way", ["row", "int64 table", "free_segment", "events", "python"])
def test_requests_agree(ps, way, policy):
	"""Admitted and finished requests over shared prefixes, under eviction
	pressure: the same rows, slots and sizes at every step.  "int64 table"
	is a req_to_token the C side cannot write (a device's, in SGLang): the
	row goes through a CPU copy; "free_segment" an allocator whose
	free_page_ids() the cache does not use; "events" with KV events on,
	the same events queued at every step (checkpoint's stores among them);
	"python" through the class's Python methods, not kvmm._radix's."""
	r = Requests(ps, policy=policy, events=way == "events")
	if way == "int64 table":
		for side in r.sides:
			side.pool.req_to_token = side.pool.req_to_token.to(torch.int64)
	elif way == "free_segment":
		kv = r.p.kv.cache			# as for an allocator not SGLang's own
		kv._free_pages, kv._free_now, kv._prepends, kv._pages = None, None, 0, 0
		kv._bind_fast()			# the C methods read them when made
	elif way == "python":			# the Python methods the C ones hand rare calls
		for name in PER_REQUEST:
			delattr(r.p.kv.cache, name)
	rng = random.Random(ps * 7 + len(way))
	systems = [[rng.randrange(1000) for _ in range(rng.randrange(4, 40))] for _ in range(3)]
	seen = []
	for _ in range(120):
		if len(r.live) == 6 or (r.live and rng.random() < 0.4):
			r.finish(rng.randrange(len(r.live)))
			continue
		if seen and rng.random() < 0.25:	# the same answer twice: duplicates to free
			prompt, full = rng.choice(seen)
		else:
			prompt = rng.choice(systems) + [rng.randrange(1000)
							for _ in range(rng.randrange(1, 30))]
			full = prompt + [rng.randrange(1000) for _ in range(rng.randrange(0, 20))]
			seen.append((prompt, full))
		r.admit(prompt, full)
	while r.live:
		r.finish()
	assert r.p.sizes()[1] == 0
	assert r.p.evict(10 ** 6) >= 0 and r.p.sizes() == (0, 0)
	assert r.p.ref.alloc.available_size() == r.p.kv.alloc.available_size() == SLOTS
	assert (r.p.nr_events > 20) == (way == "events")


def test_path_of_an_earlier_match_agrees(pair):
	"""path_device_indices of a node other than the last match's (two
	calls then: the path, then its slots), and of the last match's after
	a split above it: RadixCache's slots."""
	ps = pair.ps
	pair.insert(K(list(range(1, 17))), slots(1, 16, ps))
	pair.insert(K(list(range(1, 9)) + [50] * 8), slots(20, 16, ps))
	_, first = pair.match(K(list(range(1, 17))))
	_, second = pair.match(K(list(range(1, 9)) + [50] * 8))
	pair.insert(K(list(range(1, 5)) + [60] * 4), slots(40, 8, ps))	# splits above both
	for nodes in (first, second):
		a = pair.ref.cache.path_device_indices(nodes[0])
		b = pair.kv.cache.path_device_indices(nodes[1])
		assert torch.equal(a, b), f"path: RadixCache {a.tolist()}, kvmm {b.tolist()}"
		assert len(b) == 16
	pair.kv.cache._ctx.check()


def test_path_of_the_last_match_after_other_calls(pair):
	"""path_device_indices of the last match's node, asked for after calls
	that reuse the scratch the match left its path in (a checkpoint of
	another request, an eviction of other leaves, a lock): RadixCache's
	slots; and, the node evicted, refused as gone."""
	sides = (pair.ref, pair.kv)
	for key in (list(range(1, 17)), [70 + i for i in range(8)]):
		got = [s.alloc.alloc(len(key)) for s in sides]	# slots no request holds
		assert torch.equal(*got)
		pair.insert(K(key), got[0])
	for between in ("checkpoint", "evict", "lock"):
		nodes = [s.cache.match_prefix(MatchPrefixParams(key=K(list(range(1, 17))))
					       ).last_device_node for s in sides]
		if between == "checkpoint":	# another key, all of it new to the tree
			toks = [200 + i for i in range(12)]
			reqs = [make_req(s, toks, 8) for s in sides]
			for s, req in zip(sides, reqs):
				s.cache.checkpoint(req, up_to=len(toks))
				s.cache.unlock(req.lock)
		elif between == "evict":	# the least recently used leaf, not the match's
			pair.evict(1)
		else:
			pair.lock(nodes)
			pair.lock(nodes, inc=False)
		a, b = (s.cache.path_device_indices(n) for s, n in zip(sides, nodes))
		assert torch.equal(a, b), f"{between}: RadixCache {a.tolist()}, kvmm {b.tolist()}"
		assert len(b) == 16
		pair.sizes()
	kv = pair.kv.cache
	node = kv.match_prefix(MatchPrefixParams(key=K(list(range(1, 17))))).last_device_node
	assert kv.evict(EvictParams(num_tokens=10 ** 6)).num_tokens_evicted > 0
	with pytest.raises(OSError):
		kv.path_device_indices(node)
	kv._ctx.check()


def test_frees_to_an_allocator_that_keeps_them():
	"""SGLang's paged allocator under need_sort keeps the tensors it is
	given (staged until its next sort): evictions of the same length hand
	it a tensor each, none written over by the next, and its free pages
	stay RadixCache's."""
	p = Pair(4)
	for side in (p.ref, p.kv):
		side.alloc.need_sort = True
	for i in range(4):
		p.insert(K([100 * i + t for t in range(8)]), slots(1 + 2 * i, 8, 4))
	for _ in range(4):
		assert p.evict(8) == 8			# one leaf of two pages a call
		a, b = (sorted(side.alloc.get_all_free_pages().tolist()) for side in (p.ref, p.kv))
		assert a == b, f"free pages: RadixCache {a}, kvmm {b}"
	assert len(p.kv.alloc.staged_pages) == 4 and not p.kv.cache._spare
	p.kv.cache._ctx.check()


# What the scheduler calls per request: each a C method of kvmm._radix,
# entering no Python frame of the adapter's and making no cffi call.
PER_REQUEST = ("match_prefix", "lock", "path_device_indices", "checkpoint", "free_kv_row",
	       "unlock", "evict")
# the frames a call may enter: a dataclass's generated __init__ (TreeLock,
# EvictResult, which the C methods construct), and the first free of a
# length (_spare_view())
ALLOWED_FRAMES = {"__init__", "_spare_view"}


class CallCounter:
	"""Wraps @cache's per-request methods; for each call records the Python
	frames entered under it (SGLang's allocator's aside: it frees what the
	cache hands it, the same work under any tree) and the calls into
	kvmm's cffi library (kvmm._kvmm.lib), by a profile hook set for the call."""

	def __init__(self, cache):
		from kvmm._kvmm import lib

		self.lib = {id(getattr(lib, n)) for n in dir(lib) if callable(getattr(lib, n))}
		self.seen = {name: [] for name in PER_REQUEST}
		for name in PER_REQUEST:
			setattr(cache, name, self.wrap(name, getattr(cache, name)))

	def wrap(self, name, fn):
		def call(*args, **kwargs):
			frames, calls = [], [0]

			def hook(frame, event, arg):
				if event == "call" and "mem_cache/allocator" not in frame.f_code.co_filename:
					frames.append(frame.f_code.co_name)
				elif event == "c_call" and id(arg) in self.lib:
					calls[0] += 1
			sys.setprofile(hook)
			try:
				return fn(*args, **kwargs)
			finally:
				sys.setprofile(None)
				self.seen[name].append((frames, calls[0]))
		return call


def _random_requests(r, rng, systems):
	"""80 random admissions and finishes of @r, then the rest finished."""
	for _ in range(80):
		if len(r.live) == 6 or (r.live and rng.random() < 0.4):
			r.finish(rng.randrange(len(r.live)))
			continue
		prompt = rng.choice(systems) + [rng.randrange(1000) for _ in range(rng.randrange(1, 30))]
		r.admit(prompt, prompt + [rng.randrange(1000) for _ in range(rng.randrange(0, 20))])
	while r.live:
		r.finish()


@pytest.mark.parametrize("ps", [1, 4])
def test_per_request_calls_are_c_methods(ps):
	"""Each call the scheduler makes per request (python/bench/radix.py's
	replay) is a method of kvmm._radix bound onto the cache, which enters
	no Python frame of the adapter's (only the dataclass it returns, made
	by its own __init__) and no cffi call, through the random requests of
	test_requests_agree, the answers still compared with RadixCache's at
	every step.  The tensors evict() and free_kv_row() hand SGLang's
	allocator (which copies them) are views of one buffer, kept by length
	and used again: most frees make none."""
	r = Requests(ps)
	for name in PER_REQUEST:
		m = getattr(r.p.kv.cache, name)
		assert getattr(m, "__self__", None) is r.p.kv.cache._fast, f"{name}: {m!r}"
	rng = random.Random(ps)
	systems = [[rng.randrange(1000) for _ in range(rng.randrange(4, 40))] for _ in range(3)]
	r.admit(systems[0], systems[0])		# the key namespace's first use names it
	counter = CallCounter(r.p.kv.cache)
	# no collection of other tests' garbage (a __del__ of theirs) under a call
	gc.disable()
	try:
		_random_requests(r, rng, systems)
	finally:
		gc.enable()
	r.p.kv.cache._ctx.check()
	for name in PER_REQUEST:
		seen = counter.seen[name]
		assert seen, f"{name} was never called"
		for frames, calls in seen:
			# a free of a length not freed before makes the view it keeps
			assert set(frames) <= ALLOWED_FRAMES, f"{name}: Python frames {frames}"
			assert calls == 0, f"{name}: {calls} cffi calls"
	frees = counter.seen["evict"] + counter.seen["free_kv_row"]
	made = sum("_spare_view" in frames for frames, _ in frees)
	assert len(counter.seen["evict"]) > 3 and made < len(frees) / 2, (made, len(frees))


def test_free_kv_row_ranges_agree():
	"""free_kv_row of several ranges (SGLang's way) and of an empty one."""
	p = Pair(4)
	toks = list(range(1, 21))
	reqs = [make_req(side, toks, 20) for side in (p.ref, p.kv)]
	for side, req in zip((p.ref, p.kv), reqs):
		side.cache.free_kv_row(req.kv, [(8, 8)])
		side.cache.free_kv_row(req.kv, [(0, 4), (4, 8), (12, 20)])
	assert p.ref.alloc.available_size() == p.kv.alloc.available_size()
	assert torch.equal(p.ref.alloc.free_pages, p.kv.alloc.free_pages)


def _free_of_a_wider_row(ps):
	"""free_kv_row of a whole row of a request table wider than the one
	the cache was made for (its scratch sized by that one): the same
	slots freed as RadixCache frees."""
	p = Pair(ps)
	sides = (p.ref, p.kv)
	wide = 8 * p.kv.cache._spare_len
	for side in sides:
		side.pool.req_to_token = (torch.arange(4 * wide, dtype=torch.int32) % 256 + ps).view(4, wide)
		kv = ReqKvInfo()
		kv.req_pool_idx = 1
		side.cache.free_kv_row(kv, [(0, wide)])
	a, b = (side.alloc.free_pages for side in sides)
	assert torch.equal(a, b), f"free pages: RadixCache {len(a)}, kvmm {len(b)}"
	p.kv.cache._ctx.check()


def in_child(call):
	"""This module's @call (a string: a function and its arguments) in a
	child interpreter: a crash in it is a failed test, not a crashed pytest."""
	env = dict(os.environ, PYTHONPATH=os.pathsep.join(
		[os.path.dirname(os.path.abspath(__file__))] + sys.path))
	run = subprocess.run([sys.executable, "-c", "import test_kvmm_sglang_radix as t; "
			      f"t.{call}; print('agreed')"],
			     env=env, capture_output=True, text=True, timeout=300)
	assert run.returncode == 0 and "agreed" in run.stdout, \
		f"exit {run.returncode}: {run.stderr[-2000:]}"


@pytest.mark.parametrize("ps", [1, 4])
def test_free_kv_row_of_a_wider_table(ps):
	"""_free_of_a_wider_row() in a child interpreter: a write past the
	cache's scratch is a failed test, not a crashed pytest."""
	in_child(f"_free_of_a_wider_row({ps})")


def _free_of_a_range_ending_before_it(ps, python):
	"""free_kv_row of a range whose end is before its start (a negative
	end), through the C method or (@python) the class's: (the exception's
	type, the allocator's free size), the tree checked."""
	side = build(KvmmRadixCache, ps)
	if python:
		for name in PER_REQUEST:
			delattr(side.cache, name)
	req = make_req(side, list(range(1, 9)), 8)
	before = side.alloc.available_size()
	try:
		side.cache.free_kv_row(req.kv, [(0, -ps)])
		err = None
	except Exception as e:	# noqa: BLE001
		err = type(e).__name__
	side.cache._ctx.check()
	return err, side.alloc.available_size() - before


def _range_ending_before_it(ps):
	c, py = (_free_of_a_range_ending_before_it(ps, python) for python in (False, True))
	assert c == py, f"C {c}, Python {py}"
	assert c[1] == 0, f"{c[1]} slots freed"


@pytest.mark.parametrize("ps", [1, 4])
def test_free_kv_row_of_a_range_ending_before_it(ps):
	"""A range with a negative end is the Python method's (which refuses it
	as it did): never a row read from its start up to 4G entries on."""
	in_child(f"_range_ending_before_it({ps})")


# a key long enough that its array is its own mapping (past malloc's
# largest mmap threshold): memory read after its free is a fault
LONG = (32 << 20) // 8 + 4096


class Evil:
	"""An extra_key whose first hash runs @fn (later ones are plain)."""

	def __init__(self, fn):
		self.fn = fn

	def __hash__(self):
		fn, self.fn = self.fn, None
		if fn:
			fn()
		return 7

	def __eq__(self, other):
		return self is other


def _hostile_hash(what, call):
	"""A match_prefix (@call "match") or checkpoint ("checkpoint") whose
	key's extra_key's hash empties the token ids' array (@what "shrink":
	their memory freed) or resets the cache (@what "reset": its context
	and scratch freed) between the C method's reading the request and its
	call: the call reads what is there then, or hands it to the Python
	method; the tree checked after.  (Before, the shrink faulted; the
	reset's freed scratch is mostly remapped at once by the new context's,
	so only AddressSanitizer saw it read: see Documentation/admin-guide/
	security.rst.)"""
	side = cpu_tree_cache(KvmmRadixCache, 1, 1 << 16, rows=2, max_context_len=LONG)
	cache = side.cache
	ids = array("q", range(1, LONG + 1))
	fn = (lambda: ids.__delitem__(slice(None))) if what == "shrink" else cache.reset
	if call == "match":
		res = cache.match_prefix(MatchPrefixParams(key=RadixKey(ids, extra_key=Evil(fn))))
		assert res.device_prefix_len == 0
	else:
		req = make_req(side, list(range(1, 9)), 8)
		req.full_untruncated_fill_ids = ids
		req.extra_key = Evil(fn)
		try:
			cache.checkpoint(req, up_to=8)
		except IndexError:	# the key shrunk under the Python method
			assert what == "shrink"
	cache._ctx.check()


@pytest.mark.parametrize("what", ["shrink", "reset"])
@pytest.mark.parametrize("call", ["match", "checkpoint"])
def test_a_hash_that_frees_what_a_call_reads(what, call):
	in_child(f"_hostile_hash({what!r}, {call!r})")


def test_bad_token_ids_are_refused():
	"""Ids outside 32 bits: ValueError, from match and from checkpoint, with
	nothing changed."""
	p = Pair(1)
	kv = p.kv.cache
	for bad in (1 << 32, -1):
		with pytest.raises(ValueError):
			kv.match_prefix(MatchPrefixParams(key=K([1, 2, bad])))
		req = make_req(p.kv, [1, 2, 3, bad], 4)
		row = p.kv.pool.req_to_token[req.kv.req_pool_idx, :4].clone()
		with pytest.raises(ValueError):
			kv.checkpoint(req, up_to=4)
		assert torch.equal(p.kv.pool.req_to_token[req.kv.req_pool_idx, :4], row)
		assert kv.evictable_size() == kv.protected_size() == 0 and req.lock is None


def test_lists_of_ids_are_taken():
	"""Keys and requests holding lists rather than array('q') (RadixCache
	wants arrays throughout; kvmm's converts)."""
	p = Pair(1)
	assert p.insert(K([1, 2, 3, 4]), slots(1, 4, 1)) == 0
	res = p.kv.cache.match_prefix(MatchPrefixParams(key=RadixKey([1, 2, 3, 9])))
	assert res.device_prefix_len == 3
	req = make_req(p.kv, [1, 2, 3, 4, 5], 5)
	req.full_untruncated_fill_ids = list(req.full_untruncated_fill_ids)
	p.kv.cache.checkpoint(req, up_to=5)
	assert req.kv.cache_protected_len == 5 and p.kv.cache.protected_size() == 5


@pytest.mark.parametrize("ps", [1, 4])
def test_checkpoint_of_a_lock_past_the_protected_part(ps):
	"""A request holding its lock deeper than its cache_protected_len (the
	tree owns less of its row than the lock covers): kvmm cannot take the
	key past the lock on the request's word and reads it whole, and
	answers as RadixCache does: the same row, frees and sizes."""
	p = Pair(ps)
	toks = list(range(50, 50 + 6 * ps))
	p.insert(K(toks[:4 * ps]), slots(1, 4 * ps, ps))
	reqs = []
	for side in (p.ref, p.kv):
		node = side.cache.match_prefix(MatchPrefixParams(key=K(toks[:4 * ps]))).last_device_node
		req = make_req(side, toks, len(toks))
		tree = side.cache.path_device_indices(node)
		side.pool.write((req.kv.req_pool_idx, slice(0, 2 * ps)), tree[:2 * ps].to(torch.int32))
		req.kv.cache_protected_len = 2 * ps
		req.lock = side.cache.lock(node)
		side.cache.checkpoint(req, up_to=len(toks))
		reqs.append(req)
	a, b = reqs
	assert a.kv.cache_protected_len == b.kv.cache_protected_len == len(toks)
	assert torch.equal(p.ref.pool.req_to_token[a.kv.req_pool_idx, :len(toks)],
			   p.kv.pool.req_to_token[b.kv.req_pool_idx, :len(toks)])
	assert p.ref.alloc.available_size() == p.kv.alloc.available_size()
	p.sizes()
	for side, req in zip((p.ref, p.kv), reqs):
		side.cache.unlock(req.lock)
	p.sizes()


def test_checkpoint_of_an_unheld_lock():
	"""checkpoint() whose request holds a lock the tree does not: ValueError
	after the rest is done (the row cached and repointed), no lock taken."""
	p = Pair(1)
	kv = p.kv.cache
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	node = kv.match_prefix(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	req = make_req(p.kv, [1, 2, 3, 4], 4)
	req.lock = kv.lock(node)
	kv.unlock(req.lock)				# the request's lock is gone
	with pytest.raises(ValueError):
		kv.checkpoint(req, up_to=4)
	assert req.kv.cache_protected_len == 4
	assert p.kv.pool.req_to_token[req.kv.req_pool_idx, :3].tolist() == [1, 2, 3]
	assert kv.evictable_size() == 4 and kv.protected_size() == 0


def test_bad_nodes_and_rows():
	"""A node that is not kvmm's, one that was evicted, a row outside the pool."""
	p = Pair(1)
	kv = p.kv.cache
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	node = kv.match_prefix(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	with pytest.raises(TypeError):
		kv.path_device_indices(object())
	with pytest.raises(TypeError):
		kv.lock(object())
	assert kv.evict(EvictParams(num_tokens=100)).num_tokens_evicted == 3
	with pytest.raises(OSError):
		kv.path_device_indices(node)
	with pytest.raises(OSError):
		kv.lock(node)
	with pytest.raises(ValueError):
		kv.unlock(TreeLock(node, DecLockRefParams()))
	assert kv.path_device_indices(kv.root_node).numel() == 0
	req = make_req(p.kv, [1, 2, 3, 4], 4)
	req.kv.req_pool_idx = 10 ** 6
	with pytest.raises(IndexError):
		kv.checkpoint(req, up_to=4)
	assert kv.evictable_size() == kv.protected_size() == 0


def _errors(python):
	"""The errors of the per-request calls, made on a kvmm cache through its
	C methods or (@python) the class's Python ones: (the call, the
	exception's type and message) each, and the tree checked after."""
	p = Pair(1)
	kv = p.kv.cache
	if python:
		for name in PER_REQUEST:
			delattr(kv, name)
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	node = kv.match_prefix(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	out = []

	def err(what, fn, *args, **kwargs):
		try:
			fn(*args, **kwargs)
		except Exception as e:	# noqa: BLE001
			out.append((what, type(e).__name__, str(e)))
			kv._ctx.check()
			return
		out.append((what, None, None))

	req = make_req(p.kv, [1, 2, 3, 1 << 32], 4)
	err("match, an id past 32 bits", kv.match_prefix, MatchPrefixParams(key=K([1, 1 << 32])))
	err("match, a negative id", kv.match_prefix, MatchPrefixParams(key=K([-1, 2])))
	err("checkpoint, an id past 32 bits", kv.checkpoint, req, up_to=4)
	req.full_untruncated_fill_ids = array("q", [1, 2, 3, 4])
	err("checkpoint, a negative up_to", kv.checkpoint, req, up_to=-7)
	err("checkpoint, up_to not by name", kv.checkpoint, req, 4)
	err("checkpoint, no up_to", kv.checkpoint, req)
	err("checkpoint, no request", kv.checkpoint, None, up_to=4)
	idx = req.kv.req_pool_idx
	req.kv.req_pool_idx = 10 ** 6
	err("checkpoint, a row outside the table", kv.checkpoint, req, up_to=4)
	err("free_kv_row, a row outside the table", kv.free_kv_row, req.kv, [(0, 4)])
	req.kv.req_pool_idx = "0"
	err("checkpoint, a row index not an int", kv.checkpoint, req, up_to=4)
	req.kv.req_pool_idx = idx
	err("free_kv_row, a range past the row", kv.free_kv_row, req.kv, [(0, 10 ** 9)])
	err("free_kv_row, a range not a pair", kv.free_kv_row, req.kv, [(0, 1, 2)])
	err("free_kv_row, one argument", kv.free_kv_row, req.kv)
	lock = kv.lock(node)
	kv.unlock(lock)
	req.lock = lock
	err("checkpoint, a lock not held", kv.checkpoint, req, up_to=4)
	err("unlock, a lock not held", kv.unlock, lock)
	err("unlock, not a lock", kv.unlock, object())
	err("lock, not a node", kv.lock, object())
	err("path, not a node", kv.path_device_indices, None)
	err("match, not params", kv.match_prefix, object())
	err("evict, a count not a number", kv.evict, EvictParams(num_tokens="3"))
	err("evict", kv.evict, EvictParams(num_tokens=100))
	err("path, an evicted node", kv.path_device_indices, node)
	err("lock, an evicted node", kv.lock, node)
	assert kv.evictable_size() == kv.protected_size() == 0
	return out


def test_c_methods_raise_as_python_ones():
	"""Each error of a per-request call, bad arguments and the library's
	errors alike, is the same exception with the same message through the
	C methods as through the class's Python ones, the tree left checked."""
	c, py = _errors(False), _errors(True)
	assert [e[0] for e in c] == [e[0] for e in py]
	for a, b in zip(c, py):
		assert a == b, f"C {a}, Python {b}"
	# up_to < 0 is a slice's (the key up to that many from the end)
	assert [e[0] for e in c if e[1] is None] == ["checkpoint, a negative up_to", "evict"]


def test_a_method_kept_past_reset():
	"""A bound C method kept across reset() (which closes the context it
	held) hands its calls to the Python method: the new tree answers."""
	p = Pair(1)
	kv = p.kv.cache
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	match, lock, unlock = kv.match_prefix, kv.lock, kv.unlock
	node = match(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	old = kv._fast
	kv.reset()
	assert not old.valid and kv._fast.valid and kv.match_prefix.__self__ is kv._fast
	assert match(MatchPrefixParams(key=K([1, 2, 3]))).device_prefix_len == 0
	with pytest.raises(OSError):
		lock(node)		# a node of the closed tree
	p.kv.alloc.clear()
	p.kv.cache.insert(InsertParams(key=K([4, 5]), value=slots(1, 2, 1)))
	res = match(MatchPrefixParams(key=K([4, 5])))
	unlock(lock(res.last_device_node))
	assert res.device_prefix_len == 2 and kv.evictable_size() == 2
	kv._ctx.check()


def _foreign_nodes(python):
	"""Nodes of another cache, and of this one before a reset (whose memory
	the new tree's nodes reuse, their ids counting from 1 again), handed
	to lock, unlock, path_device_indices and checkpoint (as its request's
	lock), through the C methods or (@python) the class's: each refused
	as a node that is gone, neither tree changed, both checked."""
	a, b = build(KvmmRadixCache, 1), build(KvmmRadixCache, 1)
	if python:
		for side in (a, b):
			for name in PER_REQUEST:
				delattr(side.cache, name)
	for side in (a, b):
		side.cache.insert(InsertParams(key=K([1, 2, 3]), value=slots(1, 3, 1)))
	old = b.cache.match_prefix(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	b.cache.reset()
	b.alloc.clear()
	b.cache.insert(InsertParams(key=K([1, 2, 3]), value=slots(1, 3, 1)))
	held = b.cache.lock(b.cache.match_prefix(MatchPrefixParams(key=K([1, 2, 3])))
			    .last_device_node)
	other = a.cache.match_prefix(MatchPrefixParams(key=K([1, 2, 3]))).last_device_node
	for node in (other, old):
		with pytest.raises(OSError):
			b.cache.lock(node)
		with pytest.raises(ValueError):
			b.cache.unlock(TreeLock(node, DecLockRefParams()))
		with pytest.raises(OSError):
			b.cache.path_device_indices(node)
		req = make_req(b, [1, 2, 3, 4], 4)
		req.lock = TreeLock(node, DecLockRefParams())
		with pytest.raises(ValueError):
			b.cache.checkpoint(req, up_to=4)
		assert req.kv.cache_protected_len == 0
		with pytest.raises(OSError):
			b.cache._ctx.frames_lock(node)
		for side in (a, b):
			side.cache._ctx.check()
		assert (a.cache.evictable_size(), a.cache.protected_size()) == (3, 0)
		assert (b.cache.evictable_size(), b.cache.protected_size()) == (0, 3)
	b.cache.unlock(held)
	assert b.cache.protected_size() == 0


@pytest.mark.parametrize("python", [False, True])
def test_nodes_of_another_tree_are_refused(python):
	in_child(f"_foreign_nodes({python})")


def test_a_cache_is_collected():
	"""The cache and its C methods (which hold it: a cycle through its
	__dict__) are collected once dropped."""
	import weakref

	p = Pair(1)
	p.insert(K([1, 2, 3]), slots(1, 3, 1))
	ref = weakref.ref(p.kv.cache)
	del p
	gc.collect()
	assert ref() is None


# ---- what SGLang's own unit tests of RadixCache check, on both caches ----
# (test/registered/unit/mem_cache/test_radix_cache_unit.py, which SGLang's
# packages do not ship: a cache made by create_simulated(), a bare Mock
# allocator, insert(value=None), KV events taken after each step)

def pool_less(cls, alloc=None, page_size=1, enable_kv_cache_events=False, disable=False):
	"""A cache of @cls without memory pools, as create_simulated() makes one
	(built here from its parameters: test_create_simulated tests that)."""
	return cls(CacheInitParams(disable=disable, req_to_token_pool=None,
				   token_to_kv_pool_allocator=alloc, page_size=page_size,
				   enable_kv_cache_events=enable_kv_cache_events))


def simulated(mock=False, **kw):
	"""RadixCache and kvmm's cache without pools, each with a bare Mock
	allocator of its own when @mock (one to evict into)."""
	return tuple(pool_less(cls, unittest.mock.Mock() if mock else None, **kw)
		     for cls in (RadixCache, KvmmRadixCache))


def both(caches, fn):
	"""fn(cache) on each; the answers and the KV events queued the same."""
	a, b = (fn(c) for c in caches)
	ea, eb = (c.take_events() for c in caches)
	assert ea == eb, f"KV events: RadixCache {ea}, kvmm {eb}"
	return a, b, ea


def path(cache, key):
	return cache.path_device_indices(cache.match_prefix(MatchPrefixParams(key=key)).last_device_node)


@pytest.mark.parametrize("ps,disable,events", [(1, False, False), (4, False, True),
					       (1, True, False), (2, True, True)])
def test_create_simulated(ps, disable, events):
	"""A cache without pools, as create_simulated() makes RadixCache's: the
	same page size, device and KV-event switch (off when disabled)."""
	ref, kv = (cls.create_simulated(page_size=ps, disable=disable, enable_kv_cache_events=events)
		   for cls in (RadixCache, KvmmRadixCache))
	assert type(kv) is KvmmRadixCache
	for c in (ref, kv):
		assert (c.page_size, c.disable, c.device) == (ps, disable, torch.device("cpu"))
		assert c.kv_events.enabled == (events and not disable)
	*_, ev = both((ref, kv), lambda c: c.insert(InsertParams(key=K(list(range(8))),
								  value=torch.arange(8) + 8)))
	assert len(ev) == (2 if events and not disable else 0)	# cleared, stored


@pytest.mark.parametrize("ps", [1, 2, 4])
def test_kv_events_of_inserts_and_evictions(ps):
	"""BlockStored a run of new pages, chained to the page before; BlockRemoved
	of what eviction takes; AllBlocksCleared at reset: SGLang's own event
	objects, hashes and coalescing, the same as RadixCache queues them,
	in each key namespace (extra_key, cache_salt)."""
	caches = simulated(True, page_size=ps, enable_kv_cache_events=True)
	_, _, ev = both(caches, lambda c: None)
	assert [type(e) for e in ev] == [AllBlocksCleared]
	keys = [K([1, 2, 3, 4, 5, 6, 7, 8]), K([1, 2, 3, 4, 9, 10, 11, 12]),
		K([1, 2, 3, 4, 1, 2, 3, 4]), K([1, 2, 3, 4, 5, 6, 7, 8], "lora-a"),
		RadixKey(array("q", [1, 2, 3, 4, 5, 6]), None, cache_salt="s")]
	base = 1
	for key in keys:
		val = slots(base, len(key), ps)
		base += len(key) // ps + 1
		_, _, ev = both(caches, lambda c: c.insert(InsertParams(key=key, value=val)).prefix_len)
		assert ev and all(type(e) is BlockStored for e in ev)
		assert all(len(e.token_ids) == len(e.block_hashes) * ps for e in ev)
	both(caches, lambda c: c.insert(InsertParams(key=keys[0], value=slots(90, 8, ps))))
	_, _, ev = both(caches, lambda c: c.evict(EvictParams(num_tokens=6)).num_tokens_evicted)
	assert ev and all(type(e) is BlockRemoved for e in ev)
	_, _, ev = both(caches, lambda c: c.evict(EvictParams(num_tokens=10 ** 6)).num_tokens_evicted)
	for c in caches:
		c.reset()
	_, _, ev = both(caches, lambda c: None)
	assert [type(e) for e in ev] == [AllBlocksCleared]
	# stored again after a reset: the same hashes as the first time
	both(caches, lambda c: c.insert(InsertParams(key=keys[0], value=slots(1, 8, ps))))


def test_bare_mock_allocator():
	"""An allocator that is a bare unittest.mock.Mock (no size, no device):
	a CPU cache whose evictions free_segment() what RadixCache frees."""
	for events in (False, True):
		mocks = (unittest.mock.Mock(), unittest.mock.Mock())
		mocks[0].available_size.return_value = mocks[1].available_size.return_value = 10
		caches = tuple(pool_less(cls, m, enable_kv_cache_events=events)
			       for cls, m in zip((RadixCache, KvmmRadixCache), mocks))
		assert caches[1].device == torch.device("cpu")
		for key, val in (([1, 2], [10, 20]), ([3, 4], [30, 40])):
			both(caches, lambda c: c.insert(InsertParams(key=K(key), value=torch.tensor(val))))
		a, b, _ = both(caches, lambda c: c.evict(EvictParams(num_tokens=2)).num_tokens_evicted)
		assert a == b >= 2
		calls = [[(c.args[0].tolist(), c.kwargs) for c in m.free_segment.call_args_list]
			 for m in mocks]
		assert calls[0] == calls[1] and calls[1]
		assert caches[0].total_size() == caches[1].total_size() == 2
		assert "10" in caches[1].available_and_evictable_str()


@pytest.mark.parametrize("ps", [1, 2, 4])
def test_insert_without_value(ps):
	"""insert(value=None): the token ids stand for the slots, as
	RadixCache's debugging fallback has it."""
	caches = simulated(page_size=ps)
	for toks in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 8, 9, 10, 11]):
		a, b, _ = both(caches, lambda c: c.insert(InsertParams(key=K(toks), value=None)).prefix_len)
		assert a == b
		assert caches[0].total_size() == caches[1].total_size()
	for toks in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 8, 9, 10, 11, 12]):
		a, b = (path(c, K(toks)) for c in caches)
		assert torch.equal(a, b) and len(b) == min(len(toks), 8) // ps * ps


def test_slots_no_paged_allocator_hands_out():
	"""At page size 2, pages whose slots are not page * 2 + 0..1 ([10, 20],
	...): the cache answers and frees those slots, not others; with
	SGLang's own paged allocator, which never hands such pages out, the
	insert is refused with nothing changed; two pages that would share a
	frame are refused too."""
	seq1, seq2 = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 9, 10]
	for mocks in ((None, None), (unittest.mock.Mock(), unittest.mock.Mock())):
		caches = tuple(pool_less(cls, m, page_size=2)
			       for cls, m in zip((RadixCache, KvmmRadixCache), mocks))
		for seq in (seq1, seq2):
			val = torch.tensor([x * 10 for x in seq])
			both(caches, lambda c: c.insert(InsertParams(key=K(seq), value=val)).prefix_len)
		for q in (seq1, seq2, [1, 2, 3, 4, 999, 1000], [1, 2, 3, 4, 5, 6, 777, 888]):
			a, b = (path(c, K(q)) for c in caches)
			assert torch.equal(a, b), f"{q}: RadixCache {a.tolist()}, kvmm {b.tolist()}"
		assert path(caches[1], K(seq1)).tolist() == [10, 20, 30, 40, 50, 60, 70, 80]
	a, b, _ = both(caches, lambda c: c.evict(EvictParams(num_tokens=10 ** 6)).num_tokens_evicted)
	assert a == b == 10
	freed = [sorted(x for c in m.free_segment.call_args_list for x in c.args[0].tolist())
		 for m in mocks]
	assert freed[0] == freed[1] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
	# the same frames again, their own slots this time
	kv = caches[1]
	kv.insert(InsertParams(key=K(seq1), value=torch.tensor([10, 11, 30, 31, 50, 51, 70, 71])))
	assert path(kv, K(seq1)).tolist() == [10, 11, 30, 31, 50, 51, 70, 71]
	with pytest.raises(Busy):		# [2, 3] and [3, 4]: frame 1 twice
		kv.insert(InsertParams(key=K([7, 7, 8, 8]), value=torch.tensor([2, 3, 3, 4])))
	assert kv.total_size() == 8
	paged = build(KvmmRadixCache, 2).cache
	with pytest.raises(ValueError, match="not a page"):
		paged.insert(InsertParams(key=K(seq2), value=torch.tensor([10, 20, 90, 100])))
	assert paged.total_size() == 0 and path(paged, K(seq2)).numel() == 0


@pytest.mark.parametrize("ps", [1, 2, 4])
def test_all_values_flatten(ps):
	"""Every slot the tree holds, as RadixCache's all_values_flatten() gives
	them (in another order): its own slots, slots given as they were
	(page size 2: [10, 20]) among them, and none once evicted."""
	vals = [([1, 2], [10, 20]), ([3, 4], [30, 40]), ([1, 2, 5, 6], [50, 60, 70, 80]),
		([9] * 8, list(range(96, 104)))]
	for mocks in ((None, None), (unittest.mock.Mock(), unittest.mock.Mock())):
		caches = tuple(pool_less(cls, m, page_size=ps)
			       for cls, m in zip((RadixCache, KvmmRadixCache), mocks))
		for key, val in vals:
			both(caches, lambda c: c.insert(InsertParams(key=K(key),
								     value=torch.tensor(val))))
		a, b = (c.all_values_flatten() for c in caches)
		assert b.dtype == torch.int64 and sorted(a.tolist()) == sorted(b.tolist())
		assert len(b) == caches[1].total_size()
	both(caches, lambda c: c.evict(EvictParams(num_tokens=4)))	# into the Mocks
	a, b = (c.all_values_flatten() for c in caches)
	assert sorted(a.tolist()) == sorted(b.tolist()) and len(b) < 14
