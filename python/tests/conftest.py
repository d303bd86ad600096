# SPDX-License-Identifier: MIT
"""What the API suites share: a small geometry and a context over it."""
import gc

import pytest

import kvmm

GEOM = dict(layers=2, kv_heads=2, head_dim=8, dtype_bytes=4, max_seqs=4, max_seq_len=256)


@pytest.fixture
def ctx():
	"""A context of 64 pages of 4 tokens, closed after the test."""
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
	yield c
	gc.collect()
	c.close()
