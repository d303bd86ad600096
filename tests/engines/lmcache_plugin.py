# SPDX-License-Identifier: MIT
"""pytest plugin: LMCache 0.5.6's native-connector adapter tests over kvmm's connector.

tests/v1/distributed/test_native_connector_l2_adapter.py wraps
MockNativeConnector (a dictionary completing inside submit) in LMCache's
NativeConnectorL2Adapter; here that name builds kvmm.lmcache's
KvmmNativeConnector instead, which completes on its own threads and
signals its eventfd, as a native connector does.  RecordingNativeConnector
(the mock, recording the lengths it is handed) becomes the same recorder
over kvmm's connector.

KVMM_ENGINE_SOCKET=PATH runs every connector through that kvmmd instead
of in this process (each its own model identity, so tests do not see each
other's values).
"""
import os
import uuid

import pytest

from kvmm.lmcache import KvmmNativeConnector

_SOCKET = os.environ.get("KVMM_ENGINE_SOCKET")
_made = []	# the connectors a test made: closed after it (not all tests do)


class KvmmTestConnector(KvmmNativeConnector):
	"""MockNativeConnector's constructor (no arguments): a store of its own."""

	def __init__(self):
		where = ({"socket": _SOCKET, "ring_bytes": 4 << 20} if _SOCKET else
			 {"host_bytes": 16 << 20, "page_bytes": 4096})
		super().__init__(model_id=f"lmcache-conformance-{uuid.uuid4()}", **where)
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


@pytest.fixture(autouse=True)
def _kvmm_connector(request, monkeypatch):
	"""Put kvmm's connector where the test module builds its mock."""
	mod = request.module
	if hasattr(mod, "MockNativeConnector"):
		monkeypatch.setattr(mod, "MockNativeConnector", KvmmTestConnector)
	if hasattr(mod, "RecordingNativeConnector"):
		monkeypatch.setattr(mod, "RecordingNativeConnector", KvmmRecordingConnector)
	yield
	while _made:
		_made.pop().close()
