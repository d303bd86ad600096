# SPDX-License-Identifier: MIT
"""kvmmd --kv-events held to vLLM 0.33's own code (tests/engines/run.sh vllm).

Every message kvmmd publishes is received over a real ZMQ subscription and
decoded by vLLM's own classes (msgspec's decoder of
vllm.distributed.kv_events.KVEventBatch), and msgspec encodes the decoded
batch back into the very same bytes; the block hashes are those vLLM's
hash_block_tokens() computes for the same tokens and block size, with
sha256_cbor and with xxhash_cbor under a PYTHONHASHSEED.  vLLM's own
publisher tests (tests/distributed/test_events.py from the sdist) that
only need a publisher's messages, not its Python object, run against
kvmmd through a stand-in whose publish() makes kvmmd publish one message;
their subscriber is vLLM's MockSubscriber.  Then the replay socket, the
topics of namespaces, and the exactness of the whole stream over a replay
of the shared workload with host and NVMe tiers.
"""
import ctypes
import ctypes.util
import inspect
import json
import urllib.error
import os
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import msgspec
import numpy as np
import pytest
import zmq

import kvmm
from kvmm._kvmm import ffi, lib
from kvmmd import KVMMD, OBJTREE, running
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch
from vllm.utils.hashing import sha256_cbor, xxhash_cbor
from vllm.v1.core import kv_cache_utils

from tests.distributed import test_events as upstream
from tests.distributed.conftest import MockSubscriber

# the shared workload beside the clone, as the Makefile's SHARED
WORKLOAD = Path(os.environ.get("KVMM_SHARED",
			       Path(__file__).resolve().parents[2].parent / "shared")) / \
	"bench" / "workload.jsonl"
GEOM = ["--layers", "1", "--kv-heads", "1", "--head-dim", "4", "--quiet"]
MEDIUM = {"GPU": 0, "CPU": 1, "STORAGE": 2}
LOOKUP_TIERS = 1	# uapi/kvmm/ring.h KVMM_LOOKUP_TIERS (the package's cffi has no name for it)


class Publisher:
	"""kvmmd with --kv-events on ipc endpoints in @tmp, and a ring to it."""

	def __init__(self, tmp, args):
		self.endpoint = f"ipc://{tmp}/events"
		self.replay = f"ipc://{tmp}/replay"
		self.args = ["--kv-events", self.endpoint, "--kv-events-replay", self.replay] + \
			GEOM + args
		self.sock = tmp / "kvmmd.sock"
		self.next_token = 1

	def cache(self, tokens, ns=0):
		"""Run a request of @tokens through kvmmd and close it: its whole
		pages are committed (STORED events)."""
		toks = np.asarray(tokens, dtype=np.uint32)
		b = self.ring.batch()
		b.open(ns)
		seq = self.ring.submit(b)[0]
		b = self.ring.batch()
		b.match(seq, toks)
		hit = self.ring.submit(b)[0]
		b = self.ring.batch()
		b.extend(seq, len(toks) - hit)
		b.close(seq, toks)
		self.ring.submit(b)

	def fresh(self, n):
		"""@n tokens never seen before."""
		t = list(range(self.next_token, self.next_token + n))
		self.next_token += n
		return t


@pytest.fixture
def kvmmd_pub(tmp_path, request):
	"""A running kvmmd publishing events (args from the test's marker)."""
	m = request.node.get_closest_marker("kvmmd_args")
	pub = Publisher(tmp_path, list(m.args[0]) if m else ["--pages", "256", "--page-size", "4"])
	with running(pub.sock, pub.args) as (proc, sock):
		with kvmm.connect(sock) as ring:
			pub.ring = ring
			pub.proc = proc
			yield pub


def subscribe(endpoint, topic=b""):
	sub = zmq.Context.instance().socket(zmq.SUB)
	sub.setsockopt(zmq.SUBSCRIBE, topic)
	sub.connect(endpoint)
	time.sleep(0.3)		# ZMQ's slow joiner: subscriptions reach the PUB first
	return sub


def drain(sub, quiet_ms=500):
	"""Every (topic, seq, payload) until nothing comes for @quiet_ms."""
	out = []
	while sub.poll(quiet_ms):
		topic, seq, payload = sub.recv_multipart()
		out.append((topic, int.from_bytes(seq, "big"), payload))
	return out


def vllm_hashes(hash_fn, tokens, block_size, parent=None):
	"""vLLM's own block hashes of @tokens' whole blocks, after @parent."""
	out = []
	for i in range(0, len(tokens) - block_size + 1, block_size):
		parent = kv_cache_utils.hash_block_tokens(hash_fn, parent,
							  tokens[i:i + block_size])
		out.append(bytes(parent))
	return out


def decode_all(msgs):
	"""vLLM's decoder on every payload; msgspec must give back the same bytes."""
	dec = msgspec.msgpack.Decoder(type=KVEventBatch)
	batches = []
	for _, _, payload in msgs:
		batch = dec.decode(payload)
		assert msgspec.msgpack.encode(batch) == payload
		assert batch.data_parallel_rank == 0 and batch.ts > 1e9
		batches.append(batch)
	return batches


def check_stored_hashes(hash_fn, batches):
	"""Each BlockStored's hashes are vLLM's of its tokens, after its parent."""
	n = 0
	for batch in batches:
		for ev in batch.events:
			if isinstance(ev, BlockStored):
				assert ev.lora_id is None and ev.lora_name is None
				assert len(ev.token_ids) == ev.block_size * len(ev.block_hashes)
				assert ev.block_hashes == vllm_hashes(hash_fn, ev.token_ids, ev.block_size,
								      ev.parent_block_hash)
				n += 1
	return n


@pytest.mark.parametrize("ps", [4, 16])
def test_messages_decode_with_vllm_classes_and_hashes_are_vllms(tmp_path, ps):
	"""Stores, demotions to the host tier, promotion-free drops: all decode,
	byte for byte, and name blocks as vLLM's sha256_cbor does."""
	kv_cache_utils.init_none_hash(sha256_cbor)
	pub = Publisher(tmp_path, ["--pages", "64", "--page-size", str(ps), "--host-pages", "64"])
	with running(pub.sock, pub.args) as (_, sock), kvmm.connect(sock) as ring:
		pub.ring = ring
		sub = subscribe(pub.endpoint)
		a = pub.fresh(5 * ps + 1)		# five whole pages and a bit
		b = a[:3 * ps] + pub.fresh(2 * ps)	# shares three pages with a
		pub.cache(a)
		pub.cache(b)
		b2 = ring.batch()
		b2.reclaim(64)			# demote every cached page to the host tier
		ring.submit(b2)
		msgs = drain(sub)
		subprocess.run([str(OBJTREE / "bin" / "kvmmctl"), "--socket", sock,
				"drop-caches"], check=True, capture_output=True)
		msgs += drain(sub)
	assert msgs and [s for _, s, _ in msgs] == list(range(len(msgs)))
	assert {t for t, _, _ in msgs} == {b"kvmm/ns/0/"}
	batches = decode_all(msgs)
	assert check_stored_hashes(sha256_cbor, batches) >= 3
	events = [e for bt in batches for e in bt.events]
	# the router's view: a's and b's whole pages, as vLLM hashes the prompts
	ha, hb = vllm_hashes(sha256_cbor, a, ps), vllm_hashes(sha256_cbor, b, ps)
	stored_gpu = [h for e in events if isinstance(e, BlockStored) and e.medium == "GPU"
		      for h in e.block_hashes]
	assert stored_gpu == ha + hb[3:]
	assert events[0].parent_block_hash is None
	assert events[1].parent_block_hash == ha[2]
	on = defaultdict(set)
	for e in events:
		for h in e.block_hashes:
			if isinstance(e, BlockStored):
				on[e.medium].add(h)
			else:
				on[e.medium].remove(h)
	assert not on["GPU"] and not on["CPU"]	# demoted, then dropped
	assert any(isinstance(e, BlockStored) and e.medium == "CPU" for e in events)
	assert any(isinstance(e, BlockRemoved) and e.medium == "CPU" for e in events)


class _SystemXXH3:
	"""xxhash.xxh3_128_digest() over the system's libxxhash, for vLLM's
	xxhash_cbor where the venv has no xxhash package: the digest in
	XXH128_canonical_t order (high 64 bits first, big-endian), as the
	package's.  vLLM's own code still builds the CBOR, the seed and the
	chain."""

	class _H(ctypes.Structure):
		_fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

	def __init__(self):
		self._lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
		self._lib.XXH3_128bits.restype = self._H
		self._lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

	def xxh3_128_digest(self, data):
		h = self._lib.XXH3_128bits(bytes(data), len(data))
		return h.high64.to_bytes(8, "big") + h.low64.to_bytes(8, "big")


def test_xxhash_cbor_with_the_routers_seed(tmp_path, monkeypatch):
	"""--kv-events-hash xxhash_cbor --kv-events-seed S: vLLM's xxhash_cbor
	under PYTHONHASHSEED=S."""
	import vllm.utils.hashing as vh

	if vh._xxhash is None:
		monkeypatch.setattr(vh, "_xxhash", _SystemXXH3())
	monkeypatch.setenv("PYTHONHASHSEED", "20261128")
	kv_cache_utils.init_none_hash(xxhash_cbor)
	pub = Publisher(tmp_path, ["--pages", "64", "--page-size", "8", "--kv-events-hash",
				   "xxhash_cbor", "--kv-events-seed", "20261128"])
	with running(pub.sock, pub.args) as (_, sock), kvmm.connect(sock) as ring:
		pub.ring = ring
		sub = subscribe(pub.endpoint)
		a = pub.fresh(40)
		pub.cache(a)
		msgs = drain(sub)
	batches = decode_all(msgs)
	assert check_stored_hashes(xxhash_cbor, batches) == 1
	(ev,) = batches[0].events
	assert ev.block_hashes == vllm_hashes(xxhash_cbor, a, 8)
	assert all(len(h) == 16 for h in ev.block_hashes)
	kv_cache_utils.init_none_hash(sha256_cbor)


class KvmmdPublisher:
	"""What vLLM's publisher tests call a publisher, made of kvmmd: each
	publish() has kvmmd publish one message (one new page committed), and
	returns once it is out, since kvmmd reads its events every few ms and
	would put two quick commits in one message."""

	def __init__(self, pub):
		self.pub = pub
		self.sub = subscribe(pub.endpoint)

	def publish(self, batch):
		self.pub.cache(self.pub.fresh(4))
		assert self.sub.poll(5000), "kvmmd published nothing"
		self.sub.recv_multipart()

	def shutdown(self):
		self.sub.close()


# vLLM's tests that need only messages from a publisher; the others build
# their own vLLM publisher (test_topic_filtering, test_data_parallel_*,
# test_event_publisher_factory, test_full_replay_with_slow_subscriber),
# check the contents of their SampleBatch (test_basic_publishing), or
# publish 10,000 batches against a 10 s clock (test_high_volume).
UPSTREAM = ["test_multiple_events", "test_replay_mechanism", "test_replay_includes_topic",
	    "test_buffer_limit"]


@pytest.mark.parametrize("name", UPSTREAM)
def test_vllms_publisher_tests_against_kvmmd(tmp_path, name):
	steps = 100		# as their publisher_config fixture
	cfg = type("Config", (), {"buffer_steps": steps, "topic": "kvmm/ns/0/"})()
	pub = Publisher(tmp_path, ["--pages", "1024", "--page-size", "4",
				   "--kv-events-buffer-steps", str(steps)])
	with running(pub.sock, pub.args) as (_, sock), kvmm.connect(sock) as ring:
		pub.ring = ring
		sub = MockSubscriber([pub.endpoint], [pub.replay], cfg.topic,
				     decode_type=KVEventBatch)
		time.sleep(0.3)
		publisher = KvmmdPublisher(pub)
		fn = getattr(upstream, name)
		args = {"publisher": publisher, "subscriber": sub, "publisher_config": cfg}
		try:
			fn(**{k: args[k] for k in inspect.signature(fn).parameters})
		finally:
			publisher.shutdown()
			sub.close()


def test_replay_recovers_dropped_messages(kvmmd_pub):
	"""A subscriber that lost messages 3..6 asks the replay socket from 3 on
	and gets them, identical, and the ones after, then the end marker."""
	sub = subscribe(kvmmd_pub.endpoint)
	for _ in range(10):
		kvmmd_pub.cache(kvmmd_pub.fresh(8))
		time.sleep(0.05)	# one message each
	got = drain(sub)
	assert [s for _, s, _ in got] == list(range(10))
	kept = [m for m in got if not 3 <= m[1] <= 6]	# "dropped"
	gaps = [s for s in range(10) if s not in {m[1] for m in kept}]
	dealer = zmq.Context.instance().socket(zmq.DEALER)
	dealer.connect(kvmmd_pub.replay)
	dealer.send_multipart([b"", gaps[0].to_bytes(8, "big")])
	replayed = []
	while dealer.poll(2000):
		frames = dealer.recv_multipart()
		assert frames[0] == b""
		if not frames[3]:
			assert frames[1:] == [b"", (-1).to_bytes(8, "big", signed=True), b""]
			break
		replayed.append((frames[1], int.from_bytes(frames[2], "big"), frames[3]))
	assert replayed == got[3:]
	decode_all(replayed)
	dealer.close()


def test_each_namespace_has_its_own_topic(kvmmd_pub):
	"""Namespace 1's subscriber gets namespace 1's blocks and not namespace
	10's (ZMQ matches prefixes: the topic ends in a slash)."""
	kv_cache_utils.init_none_hash(sha256_cbor)
	s1 = subscribe(kvmmd_pub.endpoint, b"kvmm/ns/1/")
	s10 = subscribe(kvmmd_pub.endpoint, b"kvmm/ns/10/")
	a, b = kvmmd_pub.fresh(12), kvmmd_pub.fresh(12)
	kvmmd_pub.cache(a, ns=1)
	kvmmd_pub.cache(b, ns=10)
	kvmmd_pub.cache(a, ns=10)
	m1, m10 = drain(s1), drain(s10)
	assert {t for t, _, _ in m1} == {b"kvmm/ns/1/"}
	assert {t for t, _, _ in m10} == {b"kvmm/ns/10/"}
	tok1 = [t for bt in decode_all(m1) for e in bt.events for t in e.token_ids]
	tok10 = [t for bt in decode_all(m10) for e in bt.events for t in e.token_ids]
	assert tok1 == a and tok10 == b + a


def quiet_dump(ring, sock):
	"""DUMP's nodes once background writeback is done and no event came
	while it was taken, so that the stream up to now is the whole story."""
	deadline = time.monotonic() + 60
	while time.monotonic() < deadline:
		st = ring.stats()
		if st.host_pages_writeback or st.pages_writeback:
			time.sleep(0.1)
			continue
		tree = json.loads(subprocess.run(
			[str(OBJTREE / "bin" / "kvmmctl"), "--socket", sock, "--json", "tree",
			 "--limit", "10000000"], check=True, capture_output=True).stdout)
		if ring.stats().events == st.events:
			return tree
	pytest.fail("kvmmd never went quiet")


def lookup_tiers(ring, ns, tokens):
	"""LOOKUP with KVMM_LOOKUP_TIERS: tokens of the prefix on each tier."""
	b = ring.batch()
	fields = b._tokens(np.asarray(tokens, dtype=np.uint32), None)
	off = b._reserve(16, 8)
	b._add(lib.KVMM_OP_LOOKUP, ns=ns, arg=LOOKUP_TIERS, arg2=off, **fields)
	ring.submit(b)
	return np.frombuffer(ffi.buffer(ring._at(off), 12), dtype=np.uint32).tolist()


@pytest.mark.skipif(not WORKLOAD.exists(), reason=f"no {WORKLOAD}")
def test_stream_rebuilds_kvmms_tiers_exactly_over_the_shared_workload(tmp_path):
	"""A subscriber keeps a set of block hashes per medium from the whole
	stream of a replay of the shared workload through kvmmd with host and
	NVMe tiers.  At the end, per tier, it holds exactly what kvmm holds:
	the same number of pages as DUMP counts on each tier, and every block
	it has on a medium is on that tier in kvmm (LOOKUP with tiers on the
	block's whole prefix, rebuilt from the stream's parent links)."""
	kv_cache_utils.init_none_hash(sha256_cbor)
	ps = 16
	pub = Publisher(tmp_path, ["--page-size", str(ps), "--pages", "4000", "--host-pages",
				   "4000", "--nvme-file", str(tmp_path / "nvme"), "--nvme-pages",
				   "16000", "--nvme-reformat", "--model-id", "kv-events-test",
				   "--events", "64M"])
	msgs = []
	stop = threading.Event()
	sub = None

	def collect():
		while not stop.is_set():
			if sub.poll(100):
				t, s, p = sub.recv_multipart()
				msgs.append((t, int.from_bytes(s, "big"), p))

	th = threading.Thread(target=collect)
	try:
		with running(pub.sock, pub.args) as (_, sock):
			sub = subscribe(pub.endpoint)
			th.start()
			subprocess.run([str(OBJTREE / "bin" / "kvmm-bench"), "replay", "--workload",
					str(WORKLOAD), "--page-size", str(ps), "--via", "remote",
					"--socket", sock, "--repeat", "1", "--capacity-tokens", "64000"],
				       check=True, capture_output=True, timeout=600)
			with kvmm.connect(sock) as ring:
				tree = quiet_dump(ring, sock)
				time.sleep(1)		# the publisher's last read
				stop.set()
				th.join()
				on = {0: {}, 1: {}, 2: {}}	# tier: {hash: (parent, tokens)}
				assert [s for _, s, _ in msgs] == list(range(len(msgs)))
				for bt in decode_all(msgs):
					for e in bt.events:
						where = on[MEDIUM[e.medium]]
						if isinstance(e, BlockRemoved):
							for h in e.block_hashes:
								del where[h]
							continue
						parent = e.parent_block_hash
						for i, h in enumerate(e.block_hashes):
							where[h] = (parent, e.token_ids[i * ps:(i + 1) * ps])
							parent = h
				assert check_stored_hashes(sha256_cbor, decode_all(msgs[:50]))
				# 1. per tier, as many pages as DUMP shows
				dump = [0, 0, 0]
				for n in tree:
					dump[n["tier"]] += n["len"] // ps
				assert [len(on[t]) for t in range(3)] == dump
				assert dump[1] and dump[2], "the replay should reach host and NVMe"
				# 2. every block is where the stream says, by its prefix
				tier_of = {h: t for t in range(3) for h in on[t]}
				info = {h: v for t in range(3) for h, v in on[t].items()}
				parents = {v[0] for v in info.values()}
				for leaf in (h for h in info if h not in parents):
					chain = []
					h = leaf
					while h is not None:
						chain.append(h)
						h = info[h][0]
					chain.reverse()
					toks = [t for h in chain for t in info[h][1]]
					hits = lookup_tiers(ring, 0, toks)
					want = [sum(tier_of[h] == t for h in chain) * ps for t in range(3)]
					assert hits == want
	finally:
		stop.set()
		if th.is_alive():
			th.join()


def test_prefix_query_by_vllm_block_hashes(tmp_path):
	"""kvmmd --metrics answers a router that names the prompt's blocks by
	vLLM's own hashes as it answers one that sends the tokens, per tier
	and per namespace."""
	import socket
	import urllib.request

	kv_cache_utils.init_none_hash(sha256_cbor)
	with socket.socket() as s:
		s.bind(("127.0.0.1", 0))
		port = s.getsockname()[1]
	url = f"http://127.0.0.1:{port}/v1/prefix"
	pub = Publisher(tmp_path, ["--pages", "64", "--page-size", "4", "--host-pages", "64",
				   "--metrics", f"127.0.0.1:{port}"])

	def ask(body):
		req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
		try:
			with urllib.request.urlopen(req, timeout=5) as r:
				return r.status, json.loads(r.read())
		except urllib.error.HTTPError as e:
			with e:
				return e.code, json.loads(e.read())

	with running(pub.sock, pub.args) as (_, sock), kvmm.connect(sock) as ring:
		pub.ring = ring
		a, b = pub.fresh(24), pub.fresh(8)
		pub.cache(a[:12])
		pub.cache(a)			# two nodes of three pages
		b2 = ring.batch()
		b2.reclaim(3)			# the leaf's three pages to the host tier
		ring.submit(b2)
		pub.cache(b, ns=1)
		hashes = [h.hex() for h in vllm_hashes(sha256_cbor, a, 4)]
		deadline = time.monotonic() + 10
		while time.monotonic() < deadline:	# until the publisher read it all
			status, by_hash = ask({"block_hashes": hashes})
			if by_hash.get("cached_total") == 24:
				break
			time.sleep(0.05)
		assert status == 200
		assert by_hash["cached"] == ask({"tokens": a})[1]["cached"] == \
			{"device": 12, "host": 12, "nvme": 0}
		assert by_hash["tokens"] == 24
		# the leading run only, stopping at a miss
		assert ask({"block_hashes": hashes[:4] + ["00" * 32] + hashes[5:]})[1]["cached"] == \
			{"device": 12, "host": 4, "nvme": 0}
		# namespace 1's blocks are not namespace 0's, and the other way round
		hb = [h.hex() for h in vllm_hashes(sha256_cbor, b, 4)]
		assert ask({"block_hashes": hb, "ns": 0})[1]["cached_total"] == 0
		assert ask({"block_hashes": hb, "ns": 1})[1]["cached_total"] == 8
		assert ask({"block_hashes": hashes, "ns": 1})[1]["cached_total"] == 0
		# malformed hashes, or both forms at once, are refused
		assert ask({"block_hashes": ["abc"]})[0] == 400
		assert ask({"block_hashes": ["zz" * 32]})[0] == 400
		assert ask({"block_hashes": hashes, "tokens": a})[0] == 400
