# SPDX-License-Identifier: MIT
"""What the suites share: a small geometry and contexts over it (on the
mock, and on the cuda backend over tests/fakecuda), and the transformer
tests' two models."""
import errno
import gc
import os
from pathlib import Path

import pytest

import kvmm
from llama import Config, Model

GEOM = dict(layers=2, kv_heads=2, head_dim=8, dtype_bytes=4, max_seqs=4, max_seq_len=256)
FAKE = (Path(os.environ.get("KVMM_O", Path(__file__).resolve().parents[2] / "build")) /
	"tests" / "libfakecuda.so")


def fake_cuda_context() -> kvmm.Context:
	"""A context of GEOM on the cuda backend over libfakecuda (a driver
	made of host memory); the test is skipped where there is none."""
	if not FAKE.exists():
		pytest.skip(f"no {FAKE} (make check builds it where cuda.h is)")
	try:
		return kvmm.Context(**GEOM, page_size=4, nr_pages=64, backend="cuda",
				    cuda_driver=str(FAKE))
	except kvmm.Error as e:
		if e.errno == errno.EOPNOTSUPP:
			pytest.skip("no cuda backend in this build")
		raise


@pytest.fixture(scope="module")
def mha():
	"""The transformer tests' model, grouped-query attention."""
	return Model(Config())


@pytest.fixture(scope="module")
def mla():
	"""The same with DeepSeek's MLA KV."""
	return Model(Config(mla=True))


@pytest.fixture
def ctx():
	"""A context of 64 pages of 4 tokens, closed after the test."""
	c = kvmm.Context(**GEOM, page_size=4, nr_pages=64)
	yield c
	gc.collect()
	c.close()
