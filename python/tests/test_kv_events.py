# SPDX-License-Identifier: MIT
"""Context(kv_events=...): an embedding engine's cache events as vLLM's KV
events, published from the package's thread under the Context's lock.

A ZMQ subscriber receives BlockStored for a prompt the test cached
through the Context, on the namespace's topic, with the prompt's token
ids; the replay socket sends the same message again; a bad endpoint or
hash is refused and leaves nothing running.
"""
import errno
import os
import struct
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

import kvmm

from conftest import GEOM

OBJTREE = Path(os.environ.get("KVMM_O", Path(__file__).resolve().parents[2] / "build"))
pytestmark = pytest.mark.skipif(
	"CONFIG_KVMM_KVEVENTS := y" not in ((OBJTREE / "config.mk").read_text()
					    if (OBJTREE / "config.mk").exists() else ""),
	reason="built without libzmq, msgpack-c or libcrypto (no KV events)")

PS = 4
PROMPT = list(range(1000, 1016))	# four pages: msgpack uint16s


def sub_socket(zctx, endpoint):
	s = zctx.socket(zmq.SUB)
	s.setsockopt(zmq.SUBSCRIBE, b"")
	s.connect(endpoint)
	return s


def cache(ctx, tokens, ns=0):
	tokens = np.array(tokens, dtype=np.int32)
	s = ctx.open(ns)
	s.extend(len(tokens))
	s.commit(tokens)
	s.close(tokens)


def stored_tokens(payload):
	"""The token ids of every BlockStored of one KVEventBatch, and the batch."""
	batch = msgpack.unpackb(payload, raw=False)
	return [t for ev in batch[1] if ev["type"] == "BlockStored" for t in ev["token_ids"]], batch


def test_context_publishes_block_stored(tmp_path):
	ev, rep = f"ipc://{tmp_path}/ev", f"ipc://{tmp_path}/rep"
	zctx = zmq.Context()
	try:
		with kvmm.Context(**GEOM, page_size=PS, nr_pages=64, kv_events=ev,
				  kv_events_replay=rep, kv_events_topic="eng") as ctx:
			sub = sub_socket(zctx, ev)
			# a subscription takes a moment to reach the publisher: prompts
			# until one is seen (each is told once: the others are cached)
			got, deadline, i = None, time.monotonic() + 20, 0
			while got is None and time.monotonic() < deadline:
				cache(ctx, [7] + [i] * (PS - 1), ns=3)
				i += 1
				if sub.poll(200):
					got = sub.recv_multipart()
			assert got is not None, "no message on the SUB socket"
			cache(ctx, PROMPT, ns=3)
			seen = []
			while sub.poll(5000):
				topic, seq, payload = sub.recv_multipart()
				assert topic == b"eng/ns/3/"
				toks, batch = stored_tokens(payload)
				seen += toks
				if PROMPT[0] in toks:
					break
			assert seen[-len(PROMPT):] == PROMPT
			assert batch[2] == 0 and isinstance(batch[0], float)
			(num,) = struct.unpack(">q", seq)

			# the replay socket sends that message again, then its end marker
			d = zctx.socket(zmq.DEALER)
			d.connect(rep)
			d.send_multipart([b"", struct.pack(">q", num)])
			assert d.poll(10000)
			_, topic2, seq2, payload2 = d.recv_multipart()
			assert (topic2, seq2, payload2) == (topic, seq, payload)
			ctx.check()
			st = ctx.kv_events_stats
			assert st["messages"] == num + 1 and st["stored"] >= 2 and st["unnamed"] == 0
			assert st["error"] == 0
		assert ctx.kv_events_stats["replays"] == 1
	finally:
		zctx.destroy(linger=0)


def test_removals_are_published_and_close_sends_the_rest(tmp_path):
	ev = f"ipc://{tmp_path}/ev"
	zctx = zmq.Context()
	try:
		ctx = kvmm.Context(**GEOM, page_size=PS, nr_pages=64, kv_events=ev,
				   kv_events_interval_ms=60000)	# only close() drains after the first
		sub = sub_socket(zctx, ev)
		time.sleep(0.5)
		cache(ctx, PROMPT)
		assert ctx.drop_caches() == 4
		ctx.close()				# publishes what the thread had not
		types = []
		while sub.poll(2000):
			_, _, payload = sub.recv_multipart()
			types += [e["type"] for e in msgpack.unpackb(payload, raw=False)[1]]
		assert types == ["BlockStored", "BlockRemoved"]
		assert ctx.kv_events_stats["removed"] == 1
	finally:
		zctx.destroy(linger=0)


@pytest.mark.parametrize("kw, exc", [
	({"kv_events": "nonsense://x"}, kvmm.InvalidArgument),
	({"kv_events": "ipc:///tmp/x", "kv_events_hash": "sha256"}, ValueError),
	({"kv_events": "ipc:///tmp/x", "kv_events_interval_ms": -1}, ValueError),
])
def test_bad_kv_events_options_are_refused(kw, exc):
	with pytest.raises(exc):
		kvmm.Context(**GEOM, page_size=PS, nr_pages=64, **kw)


def test_kv_events_stats_need_kv_events():
	with kvmm.Context(**GEOM, page_size=PS, nr_pages=64) as ctx:
		with pytest.raises(kvmm.InvalidArgument) as e:
			ctx.kv_events_stats
		assert e.value.errno == errno.EINVAL


def test_close_from_two_threads_publishes_and_frees_once(tmp_path):
	import threading

	ctx = kvmm.Context(**GEOM, page_size=PS, nr_pages=64, kv_events=f"ipc://{tmp_path}/ev")
	cache(ctx, PROMPT)
	ts = [threading.Thread(target=ctx.close) for _ in range(2)]
	for t in ts:
		t.start()
	for t in ts:
		t.join()
	assert ctx.closed and ctx.kv_events_stats["stored"] == 1
