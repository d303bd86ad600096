# SPDX-License-Identifier: MIT
"""The keyed store over the remote tier: two stores in two contexts (two
machines, as far as the tier can tell) sharing values through a real Redis
Cluster, started for the module by scripts/redis-cluster.sh."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import kvmm

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "redis-cluster.sh"
VB = 5000


@pytest.fixture(scope="module")
def cluster():
	if not shutil.which("redis-server") or not shutil.which("redis-cli"):
		pytest.skip("redis-server/redis-cli not installed (apt-get install redis-server "
			    "redis-tools)")
	d = tempfile.mkdtemp(prefix="kvmm-py-redis-")
	try:
		seeds = subprocess.run([str(SCRIPT), "start", d], check=True, capture_output=True,
				       text=True, timeout=120).stdout.strip()
		yield seeds
	finally:
		subprocess.run([str(SCRIPT), "stop", d], check=False)
		shutil.rmtree(d, ignore_errors=True)


def stamp(i):
	return ((np.arange(VB, dtype=np.uint32) * 7 + i * 131) & 0xFF).astype(np.uint8)


def tree_geom(seeds, salt, **more):
	"""A context's parameters: a small pool, a host tier, the cluster as @salt."""
	return dict(layers=2, kv_heads=2, head_dim=16, dtype_bytes=2, page_size=16, nr_pages=64,
		    max_seqs=4, max_seq_len=1024, host_pages=64, model_id="remote-test@1",
		    remote=seeds, remote_salt=salt, **more)


def store(seeds, salt):
	return kvmm.KeyedStore("remote-test@1", host_bytes=1 << 20, page_bytes=4096,
			       remote=seeds, remote_salt=salt, remote_timeout_ms=2000)


def test_values_shared_through_the_cluster(cluster):
	a, b, c = store(cluster, "py-1"), store(cluster, "py-1"), store(cluster, "py-other")
	try:
		keys = [f"block-{i}" for i in range(6)]
		assert list(a.put_now(keys, [stamp(i) for i in range(6)])) == [0] * 6
		# b never saw them: found on the remote tier, read, then b's own
		assert list(b.exists_now(VB, keys + ["absent"])) == [0] * 6 + [-2]
		out = [np.zeros(VB, np.uint8) for _ in keys]
		res = b.call("get", keys, out)
		assert list(res) == [0] * 6
		for i, o in enumerate(out):
			assert np.array_equal(o, stamp(i))
		st = b.stats()
		assert st.keyed_remote_gets == 6 and st.keyed_values == 6
		assert st.remote_corrupt == 0
		# another tenant's salt: none of them
		assert list(c.exists_now(VB, keys)) == [-2] * 6
		assert c.stats().remote_probe_hits == 0
	finally:
		for s in (a, b, c):
			s.close()


def test_prefix_pushed_by_one_context_fetched_by_another(cluster):
	geom = tree_geom(cluster, "py-tree")
	a, b = kvmm.Context(**geom), kvmm.Context(**geom)
	try:
		tok = np.arange(1000, 1000 + 200, dtype=np.uint32)
		seq = a.open()
		seq.match(tok)
		seq.extend(200)
		seq.close(tok)
		assert a.remote_push(tok) == 192		# 12 whole pages
		assert b.tiers(tok) == (0, 0, 0)
		assert b.remote_fetch(tok) == 192
		assert b.tiers(tok)[1] == 192			# (device, host, NVMe)
		assert b.stats().remote_fetch_tokens == 192
		assert b.remote_fetch(tok) == 0			# it holds them now
		with pytest.raises(OSError) as e:
			a.remote_push(tok, ns=0xFFFFFFFF)
		assert e.value.errno == 22			# EINVAL
	finally:
		a.close()
		b.close()
	with kvmm.Context(**{k: v for k, v in geom.items() if not k.startswith("remote")}) as c:
		with pytest.raises(OSError) as e:
			c.remote_fetch(np.arange(32, dtype=np.uint32))
		assert e.value.errno == 95			# EOPNOTSUPP: no remote tier


def test_commits_written_through_on_their_own(cluster):
	geom = tree_geom(cluster, "py-wt")
	a, b = kvmm.Context(remote_write="commit", **geom), kvmm.Context(**geom)
	try:
		tok = np.arange(5000, 5000 + 200, dtype=np.uint32)
		seq = a.open()
		seq.match(tok)
		seq.extend(200)
		seq.close(tok)				# queues the write; returns at once
		a.sync()				# the worker wrote it
		st = a.stats()
		assert st.remote_put_pages == 12 and st.remote_push_tokens == 192
		assert b.remote_fetch(tok) == 192
	finally:
		a.close()
		b.close()
	with pytest.raises(ValueError, match="remote_write is"):
		kvmm.Context(remote_write="always", **geom)
	with pytest.raises(OSError) as e:		# a policy with no remote tier
		kvmm.Context(remote_write="demote",
			     **{k: v for k, v in geom.items() if not k.startswith("remote")})
	assert e.value.errno == 22


def test_auth_as_an_acl_user(cluster):
	ports = [hp.rsplit(":", 1)[1] for hp in cluster.split(",")]
	acl = ["ACL", "SETUSER", "py-auth", "on", ">pw-1", "~kvmm:*", "+@all"]
	for p in ports:
		subprocess.run(["redis-cli", "-p", p] + acl, check=True, capture_output=True)
	geom = tree_geom(cluster, "py-auth", remote_user="py-auth")
	try:
		with kvmm.Context(remote_password="pw-1", **geom) as a:
			tok = np.arange(9000, 9000 + 64, dtype=np.uint32)
			seq = a.open()
			seq.match(tok)
			seq.extend(64)
			seq.close(tok)
			assert a.remote_push(tok) == 64
		# the keyed store (and through it the vLLM and LMCache adapters)
		ks = kvmm.KeyedStore("remote-test@1", host_bytes=1 << 20, page_bytes=4096,
				     remote=cluster, remote_salt="py-auth", remote_user="py-auth",
				     remote_password="pw-1")
		try:
			assert list(ks.put_now(["a1"], [stamp(1)])) == [0]
		finally:
			ks.close()
		with pytest.raises(ValueError, match="kvmmd's --remote"):
			kvmm.KeyedStore("m@1", socket="/nonexistent.sock", remote_password="x")
		with pytest.raises(OSError) as e:
			kvmm.Context(remote_password="not-it", **geom)
		assert e.value.errno == 111			# ECONNREFUSED
		assert "WRONGPASS" in str(e.value)
		with pytest.raises(OSError) as e:		# a user without a password
			kvmm.Context(**geom)
		assert e.value.errno == 22
	finally:
		for p in ports:
			subprocess.run(["redis-cli", "-p", p, "ACL", "DELUSER", "py-auth"],
				       check=False, capture_output=True)


def test_remote_needs_an_in_process_store(cluster):
	with pytest.raises(ValueError, match="kvmmd's --remote"):
		kvmm.KeyedStore("m@1", socket="/nonexistent.sock", remote=cluster)


def test_unreachable_cluster_is_a_clear_error():
	with pytest.raises(OSError) as e:
		kvmm.KeyedStore("m@1", host_bytes=1 << 20, page_bytes=4096, remote="127.0.0.1:1",
				remote_timeout_ms=200)
	assert e.value.errno in (111, 5, 95)


# A "cluster" of one node, in the child: CLUSTER SLOTS names itself; any
# other command gets an array header of 2^31 - 1 elements and then nothing.
HOSTILE_NODE = r'''
import socket, sys, threading, time
import numpy as np
import kvmm

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
port = srv.getsockname()[1]

def serve(c):
	said = False
	while True:
		d = c.recv(65536)
		if not d:
			return
		if b"SLOTS" in d:
			c.sendall(b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % port)
		elif not said:
			said = True
			c.sendall(b"*2147483647\r\n")

def accept():
	while True:
		c, _ = srv.accept()
		threading.Thread(target=serve, args=(c,), daemon=True).start()

threading.Thread(target=accept, daemon=True).start()
s = kvmm.KeyedStore("hostile@1", host_bytes=1 << 20, page_bytes=4096,
		    remote=f"127.0.0.1:{port}", remote_timeout_ms=500)
for _ in range(3):
	t = time.monotonic()
	assert list(s.exists_now(5000, ["a", "b"])) == [-2, -2]
	assert list(s.call("get", ["a"], [np.zeros(5000, np.uint8)])) == [-2]
	took = time.monotonic() - t
	print(f"{took:.2f} s", flush=True)
	assert took < 5, took
s.close()
'''


def test_hostile_node_costs_a_call_its_deadline():
	"""A node that answers with a 2^31 - 1 element array costs an in-process
	store's calls their deadline (500 ms) at most, and the next calls
	too; in a child interpreter, so that a hang or a crash is a failure."""
	try:
		r = subprocess.run([sys.executable, "-c", HOSTILE_NODE], capture_output=True, text=True,
				   timeout=60)
	except subprocess.TimeoutExpired:
		pytest.fail("the store's calls did not end within 60 s")
	assert r.returncode == 0, r.stdout + r.stderr
	assert len(r.stdout.split()) == 6
