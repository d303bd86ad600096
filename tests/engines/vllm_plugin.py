# SPDX-License-Identifier: MIT
"""pytest plugin: vLLM 0.33's own tiering tests with kvmm's tier in place of theirs.

tests/v1/kv_offload/tiering/test_tiering_offloading.py builds its secondary
tiers from ExampleSecondaryTierManager, an in-memory dictionary, and
reaches into it (``tier.chunks[key] = True`` to plant a block,
``tier.completed_jobs``, ``get_num_chunks()``).  Here that name is
kvmm.vllm.KvmmSecondaryTier under a thin shim that keeps those handles
(KvmmExampleCompat says how): its jobs are kvmm's, asynchronous, and the
shim waits for them only where the tests look at their outcome.  The one
test of the example tier's own config value is skipped (_TIERING_WHY).

tests/v1/kv_offload/tiering/test_fs_tier.py is the file-system tier's:
FileSystemTierManager becomes kvmm's tier with its NVMe file in root_dir
(host tier: 4 of the tests' 2 MiB blocks, so their larger jobs stream
through it to NVMe), and lookup_and_wait() looks up until no RETRY (theirs
waits on the fs tier's async lookup manager).  Every test that drives a
tier through the SecondaryTierManager interface runs against it, its KV
events included.  Where a test asks whether a stored block's file exists
(``os.path.exists(tier.file_mapper.get_file_name(key))``), it asks whether
kvmm's tier holds the block (_KvmmFileMapper).  Those that read or write
the fs tier's files, inspect its thread pool or O_DIRECT probe, or patch
its file functions are skipped with the reason (_FS_WHY;
Documentation/admin-guide/engines.rst lists them).

KVMM_ENGINE_SOCKET=PATH runs every tier through that kvmmd instead of in
this process (each tier its own model identity, so tests do not see each
other's blocks).
"""
import os
import time
import uuid

import numpy as np
import pytest

from vllm.v1.kv_offload.base import Medium

from kvmm.vllm import KvmmSecondaryTier

_SOCKET = os.environ.get("KVMM_ENGINE_SOCKET")
_made = []	# the tiers a test made: shut down after it (the tests never do)


def _where(**local):
	"""The store's options: kvmmd's socket, or a store in this process."""
	if _SOCKET:
		return {"socket": _SOCKET, "ring_bytes": 16 << 20}
	return local


def _shutdown(tier):
	"""Shut a test's tier down; through kvmmd, remove its space first: each
	tier has a model identity of its own, and kvmmd holds at most 64
	spaces a namespace (the tests make more tiers than that)."""
	if _SOCKET and not tier._store._closed:
		tier.drain_jobs()
		tier._store.remove_space(tier._vb)
	KvmmSecondaryTier.shutdown(tier)


def _holds(tier, key):
	"""Whether @tier's kvmm space holds a value under @key, on any tier."""
	return tier._store.exists_now(tier._vb, [bytes(key)])[0] == 0


class _HeldBlock:
	"""What _KvmmFileMapper names for a block: kvmm's, not a file."""

	def __init__(self, tier, key):
		self.tier, self.key = tier, key


class _KvmmFileMapper:
	"""tier.file_mapper where the fs tests check a block's file: the
	"file" of a block is the block in kvmm's tier (_OsForKvmm.path.exists
	asks the tier); nothing here can be opened, read or removed."""

	def __init__(self, tier):
		self._tier = tier

	def get_file_name(self, key):
		return _HeldBlock(self._tier, key)


class _PathForKvmm:
	"""os.path for test_fs_tier.py: exists() of a _HeldBlock asks kvmm."""

	def __getattr__(self, name):
		return getattr(os.path, name)

	@staticmethod
	def exists(p):
		return _holds(p.tier, p.key) if isinstance(p, _HeldBlock) else os.path.exists(p)


class _OsForKvmm:
	"""The os module as test_fs_tier.py sees it: os itself, path aside."""

	path = _PathForKvmm()

	def __getattr__(self, name):
		return getattr(os, name)


class _Chunks:
	"""tier.chunks as the tests use it, over the tier's kvmm space."""

	def __init__(self, tier):
		self._tier = tier

	def __setitem__(self, key, present):
		assert present is True
		res = self._tier._store.put_now([bytes(key)], [np.zeros(self._tier._vb, np.uint8)])
		assert res[0] == 0, f"kvmm refused to store a block: {res[0]}"

	def __contains__(self, key):
		return _holds(self._tier, key)

	def __len__(self):
		return self._tier._store.values(self._tier._vb)


class KvmmExampleCompat(KvmmSecondaryTier):
	"""ExampleSecondaryTierManager's constructor and handles, kvmm's tier underneath.

	Jobs run as kvmm runs them, off the caller's thread: submit_store() and
	submit_load() return at once.  The example tier completes a job inside
	submit; the tests look at the outcome at three points, and there the
	shim waits for kvmm's jobs in flight, each a point where an engine step
	would have let the I/O finish: on_schedule_end() (the end of a step;
	the manager reaps in the next one, as the tests expect),
	``completed_jobs`` (what finished and is not reaped yet) and
	get_num_chunks() (what the tier holds once its stores are done).
	``tier.chunks[key] = True`` plants a zero block through kvmm's own put.
	"""

	def __init__(self, offloading_spec, primary_kv_view, tier_type, custom_param=0,
		     backpressure_detector=None):
		super().__init__(offloading_spec, primary_kv_view, tier_type,
				 backpressure_detector=backpressure_detector,
				 model_id=f"vllm-conformance-{uuid.uuid4()}",
				 **_where(host_bytes=8 << 20))
		self.chunks = _Chunks(self)
		self._completed = []
		_made.append(self)

	def _settle(self):
		"""Wait for the jobs in flight; keep their results for the manager."""
		self._store.drain()	# not self.drain_jobs(): the tests count calls to it
		self._completed.extend(KvmmSecondaryTier.get_finished_jobs(self))

	@property
	def completed_jobs(self):
		self._settle()
		return self._completed

	def get_finished_jobs(self):
		done = self._completed + list(super().get_finished_jobs())
		self._completed = []
		return done

	def on_schedule_end(self, context):
		self._settle()
		super().on_schedule_end(context)

	def get_num_chunks(self):
		self._settle()
		return len(self.chunks)

	def shutdown(self):
		_shutdown(self)


class KvmmFsCompat(KvmmSecondaryTier):
	"""FileSystemTierManager's constructor: kvmm's tier, its NVMe file in root_dir.

	Its medium is the fs tier's (STORAGE, what the tests' events name):
	here kvmm's host tier is 4 blocks over the NVMe file, so what the
	tests store sits on NVMe, storage as the fs tier's files are; kvmm's
	tier itself says CPU, its host tier being where a block lands first.
	"""

	medium = Medium.STORAGE

	def __init__(self, offloading_spec, primary_kv_view, tier_type, root_dir,
		     n_read_threads=4, n_write_threads=4, enable_kv_events=False,
		     locality=None, backpressure_detector=None):
		block = primary_kv_view.strides[0]
		super().__init__(offloading_spec, primary_kv_view, tier_type,
				 backpressure_detector=backpressure_detector, locality=locality,
				 enable_kv_events=enable_kv_events,
				 model_id=f"vllm-fs-conformance-{uuid.uuid4()}",
				 threads=max(1, min(n_read_threads, n_write_threads)),
				 **_where(host_bytes=max(4 * block, 1 << 20),
					  nvme_path=os.path.join(root_dir, "kvmm.nvme"),
					  nvme_bytes=max(16 * block, 16 << 20)))
		self.file_mapper = _KvmmFileMapper(self)
		_made.append(self)

	def shutdown(self):
		_shutdown(self)


def _lookup_and_wait_for(default_ctx):
	"""test_fs_tier's lookup_and_wait(), for any tier: look up until nothing
	says RETRY (theirs waits on the fs tier's async lookup manager)."""
	from vllm.v1.kv_offload.base import LookupResult

	def lookup_and_wait(tier, keys, ctx=default_ctx, timeout=5.0):
		deadline = time.monotonic() + timeout
		while True:
			res = [tier.lookup(k, ctx) for k in keys]
			if LookupResult.RETRY not in res or time.monotonic() > deadline:
				return res
			time.sleep(0.01)
	return lookup_and_wait


# test_fs_tier.py: what runs against kvmm's tier, and why the rest does not.
# The use_c_ext=True cases of the tests run here skip themselves where
# vLLM's fs_io_C extension is not built (vLLM's own reason); their False
# cases monkeypatch only the fs module's switch, which kvmm's tier never
# reads, and run against kvmm's tier.
_FS_RUN = {"test_lookup_empty_tier", "test_failed_load_missing_file",
	   "test_multiple_jobs_tracked_independently", "test_multi_block_job_partial_failure",
	   "test_invalid_locality_raises_at_construction", "test_batch_lookup_dispatch",
	   "test_out_of_bounds_block_id_smoke", "test_batch_lookup_c_extension",
	   "test_successful_store_emits_stored_event", "test_store_event_uses_configured_locality",
	   "test_load_job_emits_no_event", "test_events_disabled_by_default",
	   "test_events_require_global_kv_events_flag",
	   "test_cascade_store_emits_fs_event_through_tiering_manager",
	   "test_store_creates_file_and_lookup_succeeds", "test_store_then_load_roundtrip",
	   "test_store_load_data_integrity"}
_FS_WHY = [
	(("test_store_accepts_block_published_by_another_writer",),
	 "writes and reads the fs tier's block file for a key (another writer's file, "
	 "os.replace and os.listdir of its folder); kvmm's tier keeps no file per block"),
	(("test_store_load_roundtrip_without_o_direct",),
	 "patches the fs tier's O_DIRECT probe and asserts its private _use_o_direct; "
	 "the round trip itself runs in test_store_load_data_integrity"),
	(("test_invalid_path_raises",),
	 "expects the fs tier to write a config file into root_dir at construction; "
	 "kvmm's tier has no root_dir (its NVMe file is opened where it is named)"),
	(("test_factory_forwards_locality",),
	 "builds the fs tier itself through vLLM's factory (type 'fs'), not the "
	 "class the module names; kvmm's tier takes locality the same way "
	 "(test_invalid_locality_raises_at_construction runs, and "
	 "test_kvmm_vllm.py::test_locality_is_kept)"),
	(("test_shutdown_discards_pending_tasks", "test_wait_idle_blocks"),
	 "inspects the fs tier's thread pool internals (_pool, queues)"),
	(("test_failed_load_corrects_verdict", "test_failed_load_after_abort",
	  "test_batched_partial_load_failure", "test_batched_load_first_block_fails",
	  "test_transient_load_failure_leaves_file"),
	 "corrupts or removes the fs tier's block files, or injects faults into its file "
	 "I/O functions; kvmm's (torn, flipped, failed NVMe I/O) are tested by its own "
	 "suites, partial promotion in test_kvmm_vllm.py"),
	(("test_mixed_job_results_emit", "test_partially_failed_store_emits"),
	 "fails a store by patching the fs tier's batch_store_block for one block "
	 "file's path; kvmm's tier has no such function or file, and the same "
	 "checks (one failed and one good job: one event, the good job's keys; a "
	 "job failed in part: no event) run in tests/engines/test_kvmm_vllm.py with "
	 "stores kvmm fails for real"),
	(("test_fs_tier_cross_tp_round_trip",),
	 "the fs tier's per-rank file layout across tensor-parallel ranks"),
]


# test_tiering_offloading.py: what does not apply to kvmm's tier, and why
_TIERING_WHY = {
	"test_config_info_keys_match_the_filled_values":
	"asserts the example tier's own config value (example_info, its custom_param); "
	"kvmm's tier declares and fills its own (test_kvmm_vllm.py::"
	"test_config_info_keys_match_the_filled_values)",
}


def pytest_collection_modifyitems(config, items):
	for item in items:
		name = item.originalname or item.name
		if item.fspath.basename == "test_tiering_offloading.py" and name in _TIERING_WHY:
			item.add_marker(pytest.mark.skip(reason=f"kvmm: {_TIERING_WHY[name]}"))
		if not item.fspath.basename == "test_fs_tier.py":
			continue
		if name in _FS_RUN:
			continue
		why = next((w for prefixes, w in _FS_WHY if name.startswith(prefixes)), None)
		if why:		# a test neither list names runs: no skip without a reason
			item.add_marker(pytest.mark.skip(reason=f"kvmm: {why}"))


@pytest.fixture(autouse=True)
def _kvmm_tiers(request, monkeypatch):
	"""Put kvmm's tier where the test module builds its own (the other
	files of the tiering folder test vLLM's own parts and run as shipped)."""
	mod = request.module
	name = mod.__name__.rsplit(".", 1)[-1]
	if name == "test_tiering_offloading":
		monkeypatch.setattr(mod, "ExampleSecondaryTierManager", KvmmExampleCompat)
	if name == "test_fs_tier":
		monkeypatch.setattr(mod, "FileSystemTierManager", KvmmFsCompat)
		monkeypatch.setattr(mod, "os", _OsForKvmm())
		monkeypatch.setattr(mod, "lookup_and_wait", _lookup_and_wait_for(mod._CTX))
	yield
	while _made:
		_made.pop().shutdown()
