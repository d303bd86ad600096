# SPDX-License-Identifier: MIT
"""torch CPU tensors in and out: tokens taken in place, KV and page-table
views shared with torch.from_dlpack().  Runs where torch is installed (CI's
torch environment: python/requirements-torch.txt); skipped elsewhere."""
import numpy as np
import pytest

import kvmm

torch = pytest.importorskip("torch")



def test_torch_tokens_are_taken_in_place(ctx):
	p = torch.arange(10, dtype=torch.int32)
	s = ctx.open()
	assert s.match(p, 9) == 0
	s.extend(10)
	assert s.commit(p) == 8
	s.close(p)
	s2 = ctx.open()
	assert s2.match(np.arange(10, dtype=np.int32), 9) == 8	# the same tokens
	s2.close()


@pytest.mark.parametrize("bad, exc", [
	(torch.arange(10, dtype=torch.int64), TypeError),
	(torch.arange(20, dtype=torch.int32)[::2], ValueError),
	(torch.arange(12, dtype=torch.int32).reshape(3, 4), ValueError),
])
def test_bad_torch_tokens_change_nothing(ctx, bad, exc):
	s = ctx.open()
	with pytest.raises(exc):
		s.match(bad)
	assert ctx.stats().match_calls == 0
	s.close()


def test_kv_and_page_table_shared_with_torch(ctx):
	p = np.arange(8, dtype=np.int32)
	s = ctx.open()
	s.match(p, 7)
	s.extend(8)
	slots = s.slots(0, 8)
	k, _ = ctx.kv(0)
	tk = torch.from_dlpack(k)
	tk[int(slots[3])] = 5.0			# written through torch
	assert float(k[slots[3], 1, 7]) == 5.0	# read through numpy: same memory
	table = torch.from_dlpack(ctx.page_table())
	assert table.dtype == torch.int32 and int(table[s.id, 0]) == int(s.row()[0])
	s.close()
	del tk, table, k
