# SPDX-License-Identifier: MIT
"""Context.prefetch(): a queued prompt's demoted prefix up ahead of its match."""
import errno

import numpy as np
import pytest

import kvmm

from conftest import GEOM


def toks(n, start=0):
	return np.arange(start, start + n, dtype=np.int32)


def cache(ctx, p):
	s = ctx.open()
	s.match(p, len(p) - 1)
	s.extend(len(p))
	s.close(p)


@pytest.fixture
def demoted():
	"""A 16-page device over a host tier, a 32-token prompt demoted whole."""
	with kvmm.Context(**GEOM, page_size=4, nr_pages=16, host_pages=64) as ctx:
		p = toks(32, 500)
		cache(ctx, p)
		assert ctx.reclaim(1 << 20) >= 8
		assert ctx.tiers(p) == (0, 32, 0)
		yield ctx, p


def test_prefetched_prompt_is_matched_on_the_device(demoted):
	ctx, p = demoted
	assert ctx.prefetch(p) == 8
	assert ctx.tiers(p) == (32, 0, 0)
	st = ctx.stats()
	assert st.prefetch_pages == 8 and st.prefetch_hits == 0 and st.host_promote_pages == 8
	s = ctx.open()
	assert s.match(p) == 32				# no promote needed
	assert ctx.stats().prefetch_hits == 8
	s.close()
	assert ctx.prefetch(p) == 0			# nothing below the device now
	ctx.check()


def test_prefetch_budget_and_reclaim(demoted):
	ctx, p = demoted
	assert ctx.prefetch(p, budget=3) == 3
	assert ctx.tiers(p) == (12, 20, 0)
	other = toks(13 * 4, 9000)		# the rest of the device, cached
	cache(ctx, other)
	assert ctx.stats().pages_free == 0
	assert ctx.prefetch(p) == 0			# no free room: nothing evicted
	assert ctx.prefetch(p, budget=2, reclaim=True) == 2
	assert ctx.tiers(p) == (20, 12, 0)
	ctx.check()


def test_prefetch_bad_arguments_change_nothing(demoted):
	ctx, p = demoted
	with pytest.raises(kvmm.InvalidArgument) as e:
		ctx.prefetch(p, reclaim=True)		# reclaim needs a budget
	assert e.value.errno == errno.EINVAL
	with pytest.raises(kvmm.InvalidArgument):
		ctx.prefetch(p, 0)
	assert ctx.prefetch(p, ns=5) == 0		# no such namespace: nothing
	assert ctx.tiers(p) == (0, 32, 0) and ctx.stats().prefetch_pages == 0
	ctx.check()


def test_ring_prefetch_and_cancel(demoted):
	ctx, p = demoted
	with ctx.ring() as ring:
		b = ring.batch()
		b.prefetch(p, budget=4)
		b.prefetch_cancel(1, 0)			# a tag this ring never posted
		assert ring.submit(b) == [4, 0]
		b = ring.batch()
		with pytest.raises(ValueError):
			b.prefetch(p, budget=1 << 31)	# the cancel bit
		with pytest.raises(ValueError):
			b.prefetch(p, budget=-1)
	assert ctx.tiers(p) == (16, 16, 0)
	ctx.check()
