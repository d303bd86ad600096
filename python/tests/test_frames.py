# SPDX-License-Identifier: MIT
"""Context(frames="engine"): the tree over frames the engine allocates
(kvmm_frames_* in C), as an engine with its own allocator (SGLang's
radix cache) drives it: insert hands the tree frames, eviction hands them
back, and every frame is always exactly one side's."""
import errno

import numpy as np
import pytest

import kvmm
from conftest import GEOM

NR = 64


@pytest.fixture(params=[1, 4])
def ectx(request):
	c = kvmm.Context(**GEOM, page_size=request.param, nr_pages=NR, frames="engine")
	yield c
	c.close()


def toks(*vals):
	return np.array(vals, dtype=np.int32)


def test_insert_match_evict_round_trip(ectx):
	ps = ectx.page_size
	a = np.arange(8 * ps, dtype=np.int32)
	frames = np.arange(8, dtype=np.int64) + 10		# SGLang's int64 values
	had, end = ectx.frames_insert(a, frames)
	assert had == 0 and not end.is_root
	got, fr, node = ectx.frames_match(a)
	assert got == 8 * ps and fr.tolist() == list(range(10, 18)) and node == end
	assert {node: 1}[end] == 1				# a dict key, as SGLang uses nodes
	# the whole again, longer: the tree had the first 8 pages
	longer = np.arange(12 * ps, dtype=np.int32)
	had, end2 = ectx.frames_insert(longer, np.arange(12) + 30)
	assert had == 8 * ps					# frames 30..37 are the engine's to free
	assert ectx.frames_sizes() == (12 * ps, 0)
	assert ectx.frames_cached().tolist() == list(range(10, 18)) + list(range(38, 42))
	assert ectx.frames_lock(end2, 1) == 12 * ps
	assert ectx.frames_evict(100).size == 0			# locked
	assert ectx.frames_lock(end2, -1) == 12 * ps
	out = ectx.frames_evict(1)
	assert sorted(out.tolist()) == list(range(38, 42))	# the newest leaf was the only one
	assert ectx.frames_match(longer)[0] == 8 * ps
	assert ectx.frames_cached().tolist() == list(range(10, 18))
	with pytest.raises(kvmm.Error) as e:
		ectx.frames_lock(end2, 1)			# evicted
	assert e.value.errno == errno.ESTALE
	ectx.check()


def test_refusals_change_nothing(ectx):
	ps = ectx.page_size
	a = np.arange(4 * ps, dtype=np.int32)
	ectx.frames_insert(a, [1, 2, 3, 4])
	with pytest.raises(kvmm.Busy):
		ectx.frames_insert(a + 1000, [4, 5, 6, 7])	# 4 is the tree's
	with pytest.raises(ValueError):
		ectx.frames_insert(a + 1000, [5, 6])		# a frame a page
	with pytest.raises(TypeError):
		ectx.frames_insert(a + 1000, [5.0, 6.0, 7.0, 8.0])
	with pytest.raises(TypeError):
		ectx.frames_insert(a.astype(np.int64), [5, 6, 7, 8])
	if ps > 1:
		with pytest.raises(kvmm.InvalidArgument):
			ectx.frames_insert(a[:ps + 1], [5])	# not whole pages
	with pytest.raises(kvmm.InvalidArgument):
		ectx.frames_insert(a + 1000, [5, 6, 7, NR])	# outside the pool
	_, _, node = ectx.frames_match(a)
	with pytest.raises(kvmm.InvalidArgument):
		ectx.frames_lock(node, -1)			# not locked
	with pytest.raises(TypeError):
		ectx.frames_lock(object(), 1)
	with pytest.raises(kvmm.Error) as e:
		ectx.open()					# kvmm allocates nothing here
	assert e.value.errno == errno.EOPNOTSUPP
	assert ectx.frames_sizes() == (4 * ps, 0)
	ectx.check()


def test_extend_reads_only_past_the_node(ectx):
	ps = ectx.page_size
	prompt = np.arange(8 * ps, dtype=np.int32)
	had, end = ectx.frames_insert(prompt, np.arange(8) + 10)
	assert ectx.frames_lock(end, 1) == 8 * ps
	# the request grows by 4 pages; its first 8 are garbage here: not read
	key = np.concatenate([np.full(8 * ps, 7, np.int32), np.arange(4 * ps, dtype=np.int32) + 500])
	frames = np.concatenate([np.full(8, -1), np.arange(4) + 30])
	had, tree, end2 = ectx.frames_extend(key, frames, end, 8 * ps, split=8 * ps)
	assert had == 8 * ps and tree.tolist() == [30, 31, 32, 33]
	ectx.frames_lock(end, -1)
	full = np.concatenate([prompt, key[8 * ps:]])
	got, fr, node = ectx.frames_match(full)
	assert got == 12 * ps and node == end2 and fr.tolist() == list(range(10, 18)) + [30, 31, 32, 33]
	# again, nothing new: the tree's frames come back, the engine's are duplicates
	had, tree, end3 = ectx.frames_extend(full, np.arange(12) + 40, end, 8 * ps)
	assert had == 12 * ps and tree.tolist() == [30, 31, 32, 33] and end3 == end2
	# the output past the split is a leaf of its own: evicting it leaves the prompt
	assert sorted(ectx.frames_evict(1).tolist()) == [30, 31, 32, 33]
	assert ectx.frames_match(full)[0] == 8 * ps
	ectx.check()


def test_extend_refusals(ectx):
	ps = ectx.page_size
	a = np.arange(8 * ps, dtype=np.int32)
	_, end = ectx.frames_insert(a, np.arange(8))
	for bad_len, ns in ((4 * ps, 0), (8 * ps, 1)):			# not the node's path
		with pytest.raises(kvmm.Error) as e:
			ectx.frames_extend(a, np.arange(8), end, bad_len, ns=ns)
		assert e.value.errno == errno.EXDEV
	with pytest.raises(TypeError):
		ectx.frames_extend(a, np.arange(8), "node", 8 * ps)
	ectx.frames_evict(8)
	with pytest.raises(kvmm.Error) as e:
		ectx.frames_extend(a, np.arange(8), end, 8 * ps)	# evicted
	assert e.value.errno == errno.ESTALE
	assert ectx.frames_sizes() == (0, 0)
	ectx.check()


def test_modes_are_told_apart():
	with pytest.raises(ValueError):
		kvmm.Context(**GEOM, page_size=1, nr_pages=NR, frames="sglang")
	with pytest.raises(kvmm.InvalidArgument):
		kvmm.Context(**GEOM, page_size=1, nr_pages=NR, frames="engine", host_pages=8)
	with kvmm.Context(**GEOM, page_size=1, nr_pages=NR) as c:
		with pytest.raises(kvmm.InvalidArgument):
			c.frames_match(toks(1, 2))
		with pytest.raises(kvmm.InvalidArgument):
			c.frames_cached()


def test_engine_under_pressure_never_loses_a_frame(ectx):
	"""Requests over shared prefixes with a free list of NR frames: the
	engine evicts when short; engine's + tree's frames always make NR."""
	ps = ectx.page_size
	rng = np.random.default_rng(5)
	free = list(range(NR))
	for _ in range(300):
		n = int(rng.integers(1, 12)) * ps
		t = np.concatenate([np.arange(8, dtype=np.int32) + 100 * int(rng.integers(4)),
				    rng.integers(0, 3, n).astype(np.int32)])[:n]
		got, fr, node = ectx.frames_match(t)
		ectx.frames_lock(node, 1)
		need = (n - got) // ps
		while len(free) < need:
			back = ectx.frames_evict(need - len(free))
			assert back.size > 0
			free += back.tolist()
		new, free = free[:need], free[need:]
		had, _ = ectx.frames_insert(t, fr.tolist() + new)
		assert had == got
		ectx.frames_lock(node, -1)
		ev, pr = ectx.frames_sizes()
		assert pr == 0 and len(free) + ev // ps == NR
		assert len(set(free)) == len(free)
	ectx.check()
