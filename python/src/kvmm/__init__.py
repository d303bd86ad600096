# SPDX-License-Identifier: MIT
"""kvmm - Python bindings of kvmm, the KV-cache memory manager.

    import numpy as np, kvmm
    with kvmm.Context(layers=2, kv_heads=2, head_dim=32, dtype_bytes=4,
                      page_size=16, nr_pages=256, max_seqs=8, max_seq_len=1024) as ctx:
        seq = ctx.open()
        prompt = np.arange(100, dtype=np.int32)
        hit = seq.match(prompt, len(prompt) - 1)
        seq.extend(len(prompt) - hit)
        k, v = ctx.kv(0)                  # views of layer 0's pool
        slots = seq.slots(hit)            # where the new tokens' KV goes
        ...
        seq.close(prompt)
        del k, v

See Documentation/userspace-api/python.rst.
"""
from ._core import (STAT_NAMES, Context, DeviceArray, FlushInfo, FrameNode, Sequence, SeqInfo, Stats,
		    backend_available, default_params)
from ._errors import Busy, Error, InvalidArgument, NoSpace, OutOfMemory, error_class
from ._keyed import KeyedSpace, key_of, keys_array
from ._kvmm import lib as _lib
from ._ring import Batch, Pool, Ring, SeqRow, connect
from ._store import Completion, KeyedStore

EXTEND_RESERVE: int = _lib.KVMM_EXTEND_RESERVE
EXTEND_NORECLAIM: int = _lib.KVMM_EXTEND_NORECLAIM
WRITE_BACK: int = _lib.KVMM_WRITE_BACK
WRITE_THROUGH: int = _lib.KVMM_WRITE_THROUGH
NVME_REFORMAT: int = _lib.KVMM_NVME_REFORMAT
CQE_F_LOWER: int = _lib.KVMM_CQE_F_LOWER

__version__ = "0.2.0"
__all__ = ["Ring", "Batch", "Pool", "SeqRow", "DeviceArray", "FrameNode", "connect", "Context", "Sequence", "SeqInfo", "FlushInfo", "Stats", "STAT_NAMES", "default_params",
	   "backend_available",
	   "KeyedSpace", "key_of", "keys_array", "KeyedStore", "Completion",
	   "Error", "InvalidArgument", "NoSpace", "Busy", "OutOfMemory", "error_class",
	   "EXTEND_RESERVE", "EXTEND_NORECLAIM", "WRITE_BACK", "WRITE_THROUGH",
	   "NVME_REFORMAT", "CQE_F_LOWER"]
