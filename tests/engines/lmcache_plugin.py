# SPDX-License-Identifier: MIT
"""pytest plugin: LMCache 0.5.6's L2 tests over kvmm's connector.

tests/v1/distributed/test_native_connector_l2_adapter.py wraps
MockNativeConnector (a dictionary completing inside submit) in LMCache's
NativeConnectorL2Adapter; here that name builds kvmm.lmcache's
KvmmNativeConnector instead, which completes on its own threads and
signals its eventfd, as a native connector does.  RecordingNativeConnector
(the mock, recording the lengths it is handed) becomes the same recorder
over kvmm's connector.

tests/v1/distributed/test_distributed_storage_manager.py gives its
StorageManager one MockL2Adapter (MockL2AdapterConfig(max_size_gb,
mock_bandwidth_gb)); here that name builds the config a user writes for
kvmm, LMCache's native_plugin adapter loading kvmm.lmcache's
KvmmNativeConnector, and the StorageManager builds it through LMCache's own
adapter factory.  The adaptations, each stated where it is made:

 - the file skips itself unless torch_dev.is_available(), which is False
   on a machine without an accelerator (LMCache's CPU stub device); the
   StorageManager, its L1 and its L2 adapters never use the device (its
   L1 is host memory), so the guard answers True while the file is
   imported, and only then;
 - max_size_gb becomes the native plugin's max_capacity_gb (LMCache's own
   accounting of its L2 usage); mock_bandwidth_gb, the mock's simulated
   transfer time, has no counterpart and is dropped;
 - the test's write_keys_and_wait_for_l2() asks the adapter
   debug_has_key(key), a method of the mock alone: kvmm's adapter answers
   it through LMCache's L2 adapter interface (a lookup of the key, whose
   bit says whether kvmm holds it, then the unlock of what it locked).

KVMM_ENGINE_SOCKET=PATH runs every connector through that kvmmd instead
of in this process (each its own model identity, so tests do not see each
other's values).
"""
import os
import time
import uuid

import pytest

from kvmm.lmcache import KvmmNativeConnector

_SOCKET = os.environ.get("KVMM_ENGINE_SOCKET")
# where each connector's store is: that kvmmd, or this process
_WHERE = ({"socket": _SOCKET, "ring_bytes": 4 << 20} if _SOCKET else
	  {"host_bytes": 16 << 20, "page_bytes": 4096})
_made = []	# the connectors a test made: closed after it (not all tests do)


class KvmmTestConnector(KvmmNativeConnector):
	"""MockNativeConnector's constructor (no arguments): a store of its own."""

	def __init__(self):
		super().__init__(model_id=f"lmcache-conformance-{uuid.uuid4()}", **_WHERE)
		_made.append(self)


class KvmmRecordingConnector(KvmmTestConnector):
	"""RecordingNativeConnector's records, over kvmm's connector."""

	def __init__(self):
		super().__init__()
		self.set_lengths = []
		self.get_lengths = []

	def submit_batch_set(self, keys, memoryviews):
		self.set_lengths.extend(len(mv) for mv in memoryviews)
		return super().submit_batch_set(keys, memoryviews)

	def submit_batch_get(self, keys, memoryviews):
		self.get_lengths.extend(len(mv) for mv in memoryviews)
		return super().submit_batch_get(keys, memoryviews)


_built = []	# the connectors LMCache's factory built in a test


class KvmmTestPluginConnector(KvmmNativeConnector):
	"""What the native_plugin adapter builds from adapter_params: a store
	of its own per StorageManager.  LMCache's adapter closes it
	(StorageManager.close(), after stopping the thread that polls its
	event fd), so the plugin does not."""

	def __init__(self, **params):
		super().__init__(**params)
		_built.append(self)


def kvmm_l2_config(max_size_gb, mock_bandwidth_gb):
	"""MockL2AdapterConfig's constructor: kvmm as the L2 native plugin,
	configured as a user configures it (engines.rst), a model identity of
	its own per StorageManager.  Adaptation: max_size_gb is LMCache's L2
	accounting (max_capacity_gb); mock_bandwidth_gb, the mock's simulated
	transfer time, is dropped."""
	from lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter import (
		NativePluginL2AdapterConfig)

	params = dict(_WHERE, model_id=f"lmcache-storage-manager-{uuid.uuid4()}")
	return NativePluginL2AdapterConfig.from_dict({
		"type": "native_plugin",
		"module_path": __name__,
		"class_name": "KvmmTestPluginConnector",
		"adapter_params": params,
		"max_capacity_gb": max_size_gb,
	})


def _debug_has_key(adapter, key, timeout=10.0):
	"""MockL2Adapter.debug_has_key(key) for LMCache's native connector
	adapter.  Adaptation: the mock answers from its dictionary; here the
	adapter's own interface asks kvmm (lookup and lock, then unlock), so
	the answer is kvmm's."""
	task = adapter.submit_lookup_and_lock_task([key], {})
	deadline = time.monotonic() + timeout
	while (found := adapter.query_lookup_and_lock_result(task)) is None:
		if time.monotonic() > deadline:
			raise TimeoutError("kvmm: no answer to a lookup in %.0f s" % timeout)
		time.sleep(0.005)
	if found.test(0):
		adapter.submit_unlock([key])
		return True
	return False


_NEEDS_DEVICE = "test_distributed_storage_manager.py"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
	"""Adaptation: the StorageManager file's device guard passes while it is
	imported (its tests use no device: the StorageManager's L1 is host
	memory); every other file sees LMCache's device as it is."""
	path = getattr(collector, "path", None)
	if path is None or path.name != _NEEDS_DEVICE:
		yield
		return
	from lmcache import torch_dev

	saved = torch_dev.__dict__.get("is_available")
	torch_dev.is_available = lambda: True
	try:
		yield
	finally:
		if saved is None:
			del torch_dev.is_available
		else:
			torch_dev.is_available = saved


@pytest.fixture(autouse=True)
def _kvmm_connector(request, monkeypatch):
	"""Put kvmm's connector where the test module builds its mock."""
	mod = request.module
	if hasattr(mod, "MockNativeConnector"):
		monkeypatch.setattr(mod, "MockNativeConnector", KvmmTestConnector)
	if hasattr(mod, "RecordingNativeConnector"):
		monkeypatch.setattr(mod, "RecordingNativeConnector", KvmmRecordingConnector)
	if hasattr(mod, "MockL2AdapterConfig"):
		from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (
			NativeConnectorL2Adapter)

		monkeypatch.setattr(mod, "MockL2AdapterConfig", kvmm_l2_config)
		monkeypatch.setattr(NativeConnectorL2Adapter, "debug_has_key",
				    _debug_has_key, raising=False)
	_built.clear()
	yield
	while _made:
		_made.pop().close()
	if "l2_storage_manager_config" in request.fixturenames:
		# a StorageManager given an L2 got kvmm's, built by LMCache's factory
		assert _built, "the StorageManager built no kvmm connector"
	_built.clear()
