# SPDX-License-Identifier: MIT
"""The package's API: parameters, errors, token buffers, views and lifetimes."""
import array
import errno
import gc

import numpy as np
import pytest

import kvmm

from conftest import GEOM, fake_cuda_context


def toks(n, start=0):
	return np.arange(start, start + n, dtype=np.int32)


def test_defaults_come_from_the_library():
	d = kvmm.default_params()
	assert d["page_size"] is None and d["nr_pages"] is None and d["attn"] == "mha"
	assert "mem_fraction" in d and "nvme_path" in d


def test_mem_fraction_sizes_the_pool():
	cell = 2 * 2 * 8 * 4 * 2	# K and V, kv_heads * head_dim * 4 bytes, 2 layers
	with kvmm.Context(**GEOM, page_size=4, mem_total=1 << 20, mem_avail=1 << 20,
			  mem_fraction=0.5) as c:
		assert c.nr_pages == (1 << 19) // (cell * 4)
		assert c.stats().pages_total == c.nr_pages


def test_unknown_parameter_is_a_type_error():
	with pytest.raises(TypeError):
		kvmm.Context(**GEOM, page_size=4, nr_pages=64, page_sise=8)


def test_create_error_carries_errno_and_the_library_message():
	with pytest.raises(kvmm.InvalidArgument) as e:
		kvmm.Context(**GEOM, page_size=3, nr_pages=64)
	assert e.value.errno == errno.EINVAL
	assert isinstance(e.value, OSError)
	assert "kvmm_create" in str(e.value) and "page_size 3" in str(e.value)


def test_python_mapped_errno_is_both_classes(ctx):
	with pytest.raises(FileNotFoundError) as e:
		ctx.pin(toks(8, 100))
	assert isinstance(e.value, kvmm.Error) and e.value.errno == errno.ENOENT


def test_request_cycle_and_stats(ctx):
	p = toks(10)
	s = ctx.open()
	assert s.match(p, 9) == 0
	s.extend(10)
	assert s.info() == kvmm.SeqInfo(len=10, cached=0, ns=0)
	assert s.commit(p) == 8			# whole pages of 4
	s.close(p)
	s2 = ctx.open()
	assert s2.match(p, 9) == 8
	st = ctx.stats()
	assert isinstance(st, kvmm.Stats) and st.hit_tokens == 8 and st.seqs_open == 1
	assert ctx.lookup(p) == 8 and ctx.tiers(p) == (8, 0, 0)
	s2.close()
	ctx.pin(p, 8)
	ctx.set_priority(p, 3, 8)
	assert ctx.drop_caches() == 0		# pinned
	ctx.unpin(p, 8)
	assert ctx.reclaim(1) == 2
	ctx.check()


def test_no_space_changes_nothing(ctx):
	ctx.open().extend(200)
	s = ctx.open()
	with pytest.raises(kvmm.NoSpace) as e:
		s.extend(100)
	assert e.value.errno == errno.ENOSPC
	assert s.info().len == 0 and ctx.stats().pages_free == 64 - 50


@pytest.mark.parametrize("buf", [
	np.arange(8, dtype=np.int32), np.arange(8, dtype=np.uint32),
	array.array("i", range(8)), memoryview(array.array("I", range(8))),
])
def test_token_buffers_of_any_kind(ctx, buf):
	s = ctx.open()
	s.extend(8)
	assert s.commit(buf) == 8
	assert ctx.lookup(np.arange(8, dtype=np.int32)) == 8


@pytest.mark.parametrize("buf,exc", [
	(np.arange(8, dtype=np.int64), TypeError),
	(np.arange(8, dtype=np.float32), TypeError),
	([0, 1, 2, 3], TypeError),
	(np.arange(16, dtype=np.int32)[::2], ValueError),
	(np.arange(8, dtype=np.int32).reshape(2, 4), ValueError),
])
def test_bad_token_buffers_change_nothing(ctx, buf, exc):
	s = ctx.open()
	s.extend(8)
	with pytest.raises(exc):
		s.commit(buf)
	assert s.info().cached == 0 and ctx.stats().nodes == 0


def test_bad_lengths(ctx):
	s = ctx.open()
	with pytest.raises(ValueError):
		s.match(toks(8), -1)
	with pytest.raises(ValueError):
		s.match(toks(8), 9)
	with pytest.raises(ValueError):
		s.extend(-1)
	assert s.info().len == 0


def test_sequence_after_close_raises(ctx):
	s = ctx.open()
	s.close()
	s.close()				# twice: a no-op
	other = ctx.open()			# may take the same row
	with pytest.raises(kvmm.InvalidArgument):
		s.extend(1)
	assert other.info().len == 0


def test_closed_context_raises():
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
	s = c.open()
	c.close()
	assert c.closed and s.closed
	with pytest.raises(kvmm.Error):
		c.open()
	with pytest.raises(kvmm.Error):
		s.extend(1)
	c.close()


def test_kv_views_are_the_pool(ctx):
	k, v = ctx.kv(0)
	assert k.shape == (64 * 4, 2, 8) and k.dtype == np.float32
	s = ctx.open()
	s.extend(6)
	slots = s.slots()
	table = ctx.page_table()
	assert np.array_equal(slots // 4, np.repeat(table[s.id, :2], 4)[:6])
	assert not table.flags.writeable
	k[slots] = 7.0
	k2, _ = ctx.kv(0)
	assert np.all(k2[slots] == 7.0)
	assert k.__array_interface__["data"][0] == ctx.kv_layer_info(0)[0]
	ctx.kv(1)[0][slots[0], 0, 0] = 3.0
	assert ctx.kv(1)[0][slots[0], 0, 0] == 3.0 and k[slots[0], 0, 0] == 7.0


def test_dlpack_on_host_memory(ctx):
	k, _ = ctx.kv(0)
	assert k.__dlpack_device__()[0] == 1		# kDLCPU
	d = np.from_dlpack(k)
	d[5, 1, 2] = 42.0
	assert k[5, 1, 2] == 42.0


def test_views_keep_the_context_alive_and_close_refuses():
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
	k, _ = c.kv(0)
	row = c.open().row()
	assert c.live_views == 3
	with pytest.raises(kvmm.Busy):
		c.close()
	assert not c.closed
	del c				# the views hold it
	gc.collect()
	k[0, 0, 0] = 1.0		# still mapped: no use-after-free
	assert row.shape[0] == 256 // 4
	del k, row
	gc.collect()


def test_close_after_views_are_gone():
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
	k, v = c.kv(0)
	del k, v
	gc.collect()
	assert c.live_views == 0
	c.close()
	assert c.closed


def test_evict_policy_and_watermarks(ctx):
	assert ctx.evict_policy == "lru"
	ctx.evict_policy = "slru"
	assert ctx.evict_policy == "slru"
	with pytest.raises(kvmm.InvalidArgument):
		ctx.evict_policy = "nope"
	ctx.set_watermarks(1, 2, 4)
	st = ctx.stats()
	assert (st.wmark_min, st.wmark_low, st.wmark_high) == (1, 2, 4)


def test_cuda_pool_through_the_fake_driver():
	"""The cuda backend's K/V come out as __cuda_array_interface__ objects."""
	c = fake_cuda_context()
	k, v = c.kv(1)
	kp, vp, slot_bytes, nbytes = c.kv_layer_info(1)
	ki, vi = k.__cuda_array_interface__, v.__cuda_array_interface__
	assert ki["data"] == (kp, False) and vi["data"][0] == vp
	assert ki["shape"] == (nbytes // slot_bytes, 2, 8) and ki["typestr"] == "<f4"
	assert ki["strides"] == (slot_bytes, 32, 4) and ki["version"] == 3
	assert k.__dlpack_device__() == (2, 0)
	with pytest.raises(kvmm.Busy):
		c.close()
	del k, v
	gc.collect()
	c.close()
