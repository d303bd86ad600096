# SPDX-License-Identifier: MIT
"""kvmm as a secondary tier of vLLM's tiered KV offloading (vLLM 0.33).

vLLM keeps its GPU cache and its CPU primary tier; kvmm is the tier below
(host DRAM, NVMe), in this process or shared by every engine attached to
one kvmmd.  Configure it as vLLM documents for out-of-tree tiers::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both",
      "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 8589934592,
        "secondary_tiers": [{"type": "KvmmSecondaryTier",
                             "module_path": "kvmm.vllm",
                             "socket": "/run/kvmmd.sock"}]}}'

Options (the tier's dict, besides ``type`` and ``module_path``):
``socket`` (kvmmd's; omit for a store in this process, sized by
``host_bytes`` and optionally ``nvme_path``/``nvme_bytes``), ``ns``,
``model_id`` (default: the served model and its revision), ``threads``,
``ring_bytes``, ``locality`` ("LOCAL" or "REMOTE", as vLLM's tiers take
it: ValueError for anything else), ``enable_kv_events`` (as vLLM's fs
tier: a BlockStored event for each store job that succeeds, when KV cache
events are also on in vLLM's ``kv_events_config``); for a store in this process, ``remote`` (a Redis Cluster's
seeds, "host:port,...": blocks written through to it and read from it
when this machine has them not, shared with other machines),
``remote_salt``, ``remote_timeout_ms``, ``remote_user`` and
``remote_password``; ``prefetch`` (default true): a lookup that finds a
block on NVMe starts reading it up to kvmm's host tier, so that the load
vLLM submits for it next reads host memory.  See
Documentation/admin-guide/engines.rst and remote.rst.
"""
import collections
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Tuple

import numpy as np

from vllm.v1.kv_offload.base import (ConfigInfo, ConfigInfoMapping, Locality, LookupResult,
				     Medium, OffloadingEvent, OffloadKey, ReqContext,
				     RequestOffloadingContext)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from ._store import KeyedStore

__all__ = ["KvmmSecondaryTier"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KvmmTierInfo(ConfigInfo):
	"""The tier's config facts (vLLM's info metric labels)."""

	kvmm_store: str		# "in-process" or kvmmd's socket
	kvmm_model_id: str


def _model_id(spec: Any) -> str:
	"""The served model and revision from vLLM's config, when it has them."""
	try:
		mc = spec.vllm_config.model_config
		model, rev = mc.model, getattr(mc, "revision", None)
		dtype = getattr(spec.vllm_config.cache_config, "cache_dtype", "auto")
	except AttributeError:
		return ""
	if not isinstance(model, str):
		return ""
	return f"vllm:{model}@{rev if isinstance(rev, str) else 'main'}:{dtype}"


def _page_bytes(value_bytes: int) -> int:
	"""Pages of the in-process store: 64 KiB, or less for small blocks."""
	page = 1 << 16
	while page > 4096 and page // 2 >= value_bytes:
		page //= 2
	return page


class KvmmSecondaryTier(SecondaryTierManager):
	"""vLLM's SecondaryTierManager over kvmm's keyed store.

	Blocks are values of ``block_size_bytes`` (one row of the primary
	tier's view) under their OffloadKey (kvmm.key_of(): BLAKE2b-128 of keys
	that are not 16 bytes).  lookup() answers HIT, MISS, or RETRY while a
	store of that key is in flight; submit_store()/submit_load() queue the
	job on the store's threads and return; get_finished_jobs() reaps.
	"""

	medium: ClassVar[Medium] = Medium.CPU

	def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
		     backpressure_detector: Any = None, socket: Optional[str] = None,
		     ns: Optional[int] = None, model_id: Optional[str] = None,
		     host_bytes: int = 1 << 30, nvme_path: Optional[str] = None,
		     nvme_bytes: int = 0, threads: int = 2, ring_bytes: int = 64 << 20,
		     locality: Any = None, remote: Optional[str] = None,
		     remote_salt: Optional[str] = None, remote_timeout_ms: int = 0,
		     remote_user: Optional[str] = None, remote_password: Optional[str] = None,
		     enable_kv_events: bool = False, prefetch: bool = True) -> None:
		super().__init__(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
				 tier_type=tier_type, backpressure_detector=backpressure_detector)
		# as vLLM's own tiers take it: ValueError for anything but its names
		self.locality = Locality(locality) if locality is not None else None
		self._vb = self.block_size_bytes
		if not isinstance(prefetch, bool):
			raise ValueError(f"KvmmSecondaryTier: prefetch = {prefetch!r}; true or false")
		self._prefetch = prefetch
		# the primary tier's rows, as the store reads and writes them in place
		self._rows = np.frombuffer(primary_kv_view.cast("B"), dtype=np.uint8).reshape(
			primary_kv_view.shape[0], self._vb)
		self._store = KeyedStore(model_id or _model_id(offloading_spec) or "vllm",
					 socket=socket, ns=ns, host_bytes=host_bytes,
					 nvme_path=nvme_path, nvme_bytes=nvme_bytes,
					 page_bytes=_page_bytes(self._vb), threads=threads,
					 ring_bytes=ring_bytes, remote=remote, remote_salt=remote_salt,
					 remote_timeout_ms=remote_timeout_ms, remote_user=remote_user,
					 remote_password=remote_password)
		self._info = KvmmTierInfo(kvmm_store=socket or "in-process",
					  kvmm_model_id=self._store.model_id)
		# keys whose store is in flight: lookup() says RETRY for them
		self._storing: Dict[bytes, int] = collections.Counter()
		self._jobs: Dict[int, TransferJob] = {}
		# jobs refused at submit (a chunk id outside the primary tier):
		# failed as jobs, reaped by the next get_finished_jobs()
		self._refused: List[JobResult] = []
		# KV events, as vLLM's fs tier gives them: None unless the tier
		# asks for them and vLLM has KV cache events on; the keys of
		# each store job in flight are kept only then
		self.events: Optional[List[OffloadingEvent]] = None
		self._store_job_keys: Dict[int, List[OffloadKey]] = {}
		if enable_kv_events:
			cfg = getattr(offloading_spec, "kv_events_config", None)
			if getattr(cfg, "enable_kv_cache_events", False) is True:
				self.events = []
			else:
				logger.warning("enable_kv_events is set on secondary tier '%s' but "
					       "KV cache events are off in vLLM's kv_events_config: "
					       "the tier emits none", tier_type)

	# ---- lookups ----
	def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
		if self._storing.get(bytes(key)):
			return LookupResult.RETRY
		# a HIT makes vLLM submit a load of the block soon: one on NVMe
		# starts its read to the host tier now, in the same batch
		hit = self._store.exists_now(self._vb, [bytes(key)], prefetch=self._prefetch)[0] == 0
		return LookupResult.HIT if hit else LookupResult.MISS

	def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
		keys = [bytes(k) for k in keys]
		if keys:	# KEXISTS counts each value found as an access: the LRU sees it
			self._store.exists_now(self._vb, keys)

	# ---- jobs ----
	def _submit(self, job: TransferJob, op: str) -> None:
		keys = [bytes(k) for k in job.keys]
		chunk_ids = np.asarray(job.chunk_ids, dtype=np.int64).reshape(-1)
		if len(keys) != len(chunk_ids):
			raise ValueError(f"KvmmSecondaryTier: {len(keys)} keys but "
					 f"{len(chunk_ids)} chunk_ids")
		if len(chunk_ids) and (chunk_ids.min() < 0 or chunk_ids.max() >= len(self._rows)):
			# a bad job fails as a job, touching nothing (numpy would
			# raise past the end and wrap a negative id to another row)
			self._refused.append(JobResult(job_id=job.job_id, success=False))
			return
		bufs = [self._rows[c] for c in chunk_ids]
		self._store.submit(job.job_id, op, keys, bufs)
		self._jobs[job.job_id] = job
		if op == "put":
			for k in keys:
				self._storing[k] += 1
			if self.events is not None:
				self._store_job_keys[job.job_id] = list(job.keys)

	def submit_store(self, job_metadata: TransferJob) -> None:
		self._submit(job_metadata, "put")

	def submit_load(self, job_metadata: TransferJob) -> None:
		self._submit(job_metadata, "get")

	def get_finished_jobs(self) -> Iterable[JobResult]:
		out, self._refused = self._refused, []
		for c in self._store.take():
			job = self._jobs.pop(c.tag)
			keys = list(job.keys)
			ok = c.ok
			if c.op == "put":
				for k in keys:
					k = bytes(k)
					self._storing[k] -= 1
					if not self._storing[k]:
						del self._storing[k]
				stored = self._store_job_keys.pop(c.tag, None)
				if ok and stored and self.events is not None:
					self.events.append(OffloadingEvent(keys=stored, medium=self.medium,
									   removed=False,
									   locality=self.locality))
			partial: Optional[Tuple[OffloadKey, ...]] = None
			if not ok and job.is_promotion and (c.res == 0).any():
				partial = tuple(k for k, r in zip(keys, c.res) if r == 0)
			out.append(JobResult(job_id=c.tag, success=ok, successful_keys=partial,
					     transfer_time=c.seconds, transfer_bytes=c.nbytes))
		return out

	def take_events(self) -> Iterable[OffloadingEvent]:
		"""The BlockStored events of the store jobs reaped since the last
		call (a failed job, wholly or in part, gives none)."""
		if not self.events:
			return []
		out, self.events = self.events, []
		return out

	def has_pending_work(self) -> bool:
		return bool(self._refused) or self._store.pending > 0

	def drain_jobs(self) -> None:
		self._store.drain()

	def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
		# it gets the request's id, transfer params and hints, no block
		# keys: nothing to prefetch here (lookup() does, per key)
		return RequestOffloadingContext()

	def shutdown(self) -> None:
		self._store.close()

	# ---- config facts ----
	@classmethod
	def config_info_keys(cls, tier_config: Dict[str, Any]) -> Tuple[str, ...]:
		return KvmmTierInfo.config_info_keys()

	def config_info(self) -> ConfigInfoMapping:
		return self._info.as_config_info()
