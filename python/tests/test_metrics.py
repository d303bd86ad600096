# SPDX-License-Identifier: MIT
"""kvmmd --metrics: Prometheus' own tools judge its /metrics, a real
Prometheus server scrapes it, and the Grafana dashboard in contrib/ asks
only for metrics that exist; the prefix query answers per tier.

promtool and prometheus are Debian's prometheus package
(scripts/install-deps.sh installs it); without them those tests are
skipped with the reason.
"""
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import kvmm
from kvmmd import KVMMD, running

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "contrib" / "grafana" / "kvmm.json"
GEOM = ["--page-size", "4", "--pages", "64", "--layers", "1", "--kv-heads", "1",
	"--head-dim", "4", "--host-pages", "64", "--quiet"]


def free_port():
	with socket.socket() as s:
		s.bind(("127.0.0.1", 0))
		return s.getsockname()[1]


def get(url, timeout=5):
	with urllib.request.urlopen(url, timeout=timeout) as r:
		return r.status, r.headers.get("Content-Type"), r.read().decode()


def post(url, body, timeout=5):
	req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
	try:
		with urllib.request.urlopen(req, timeout=timeout) as r:
			return r.status, json.loads(r.read())
	except urllib.error.HTTPError as e:
		with e:
			return e.code, json.loads(e.read())


def cache(ring, tokens, ns=0):
	toks = np.asarray(tokens, dtype=np.uint32)
	b = ring.batch()
	b.open(ns)
	seq = ring.submit(b)[0]
	b = ring.batch()
	b.match(seq, toks)
	b.extend(seq, len(toks))
	b.close(seq, toks)
	ring.submit(b)


def samples(text):
	"""{(name, labels): value} of an exposition."""
	out = {}
	for line in text.splitlines():
		if not line or line.startswith("#"):
			continue
		m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
		assert m, f"not a sample: {line!r}"
		out[(m.group(1), m.group(2) or "")] = float(m.group(3))
	return out


@pytest.fixture
def metrics_kvmmd(tmp_path):
	port = free_port()
	with running(tmp_path / "k.sock", GEOM + ["--metrics", f"127.0.0.1:{port}"]) as (_, sock):
		with kvmm.connect(sock) as ring:
			yield ring, f"http://127.0.0.1:{port}"


def test_metrics_cover_every_statistic_with_prometheus_names(metrics_kvmmd):
	ring, url = metrics_kvmmd
	cache(ring, range(1, 19))
	status, ctype, text = get(url + "/metrics")
	assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
	s = samples(text)
	st = ring.stats()
	# every counter kvmmctl stat shows is a sample: as many as statistics,
	# plus the namespaces' (cached and pinned of namespace 0) and three
	# histograms of 24 buckets, a sum and a count
	assert len(s) == len(kvmm.STAT_NAMES) + 2 + 3 * (24 + 2)
	assert s[("kvmm_match_calls_total", "")] == st.match_calls == 1
	assert s[("kvmm_pages", '{tier="device",state="cached"}')] == st.pages_cached == 4
	assert s[("kvmm_namespace_pages", '{ns="0",state="cached"}')] == 4
	assert s[("kvmm_tier_capacity_pages", '{tier="host"}')] == 64
	types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
	for name, kind in types.items():
		assert name.startswith("kvmm_")
		assert name.endswith("_total") == (kind == "counter"), name
		assert kind != "histogram" or name.endswith("_seconds"), name
	b = ring.batch()
	b.reclaim(4)				# demote to the host tier: seconds, bytes
	ring.submit(b)
	s = samples(get(url + "/metrics")[2])
	assert s[("kvmm_demoted_pages_total", '{tier="host"}')] == 4
	assert s[("kvmm_tier_written_bytes_total", '{tier="host"}')] > 0
	assert 0 < s[("kvmm_tier_write_seconds_total", '{tier="host"}')] < 10
	# histograms: one demotion; every command so far (open, match, extend,
	# close, reclaim, and the scrapes' own DUMPs), buckets cumulative
	assert types["kvmm_command_duration_seconds"] == "histogram"
	d = '{direction="demote",le="+Inf"}'
	assert s[("kvmm_tier_copy_duration_seconds_bucket", d)] == 1
	assert s[("kvmm_tier_copy_duration_seconds_count", '{direction="demote"}')] == 1
	assert s[("kvmm_tier_copy_duration_seconds_count", '{direction="promote"}')] == 0
	cmd = [v for (n, l), v in s.items() if n == "kvmm_command_duration_seconds_bucket"]
	assert cmd == sorted(cmd) and cmd[-1] == s[("kvmm_command_duration_seconds_count", "")] >= 5


def test_promtool_checks_the_metrics(metrics_kvmmd):
	promtool = shutil.which("promtool")
	if not promtool:
		pytest.skip("no promtool: install Debian's prometheus package (make deps)")
	ring, url = metrics_kvmmd
	cache(ring, range(1, 19))
	text = get(url + "/metrics")[2]
	r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
			   text=True)
	assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
		r.stdout + r.stderr


def test_a_prometheus_server_scrapes_a_counter_the_test_moved(tmp_path, metrics_kvmmd):
	prom = shutil.which("prometheus")
	if not prom:
		pytest.skip("no prometheus: install Debian's prometheus package (make deps)")
	ring, url = metrics_kvmmd
	target = url.split("//")[1]
	cfg = tmp_path / "prometheus.yml"
	cfg.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n"
		       f"  - job_name: kvmmd\n    static_configs:\n      - targets: ['{target}']\n")
	port = free_port()
	proc = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path}/tsdb",
				 f"--web.listen-address=127.0.0.1:{port}"],
				stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
	api = f"http://127.0.0.1:{port}/api/v1/query?query=kvmm_match_calls_total"
	try:
		for i in range(7):		# the counter the test moves: 7 MATCHes
			cache(ring, range(100 * i, 100 * i + 8))
		deadline = time.monotonic() + 60
		value = None
		while time.monotonic() < deadline:
			try:
				res = json.loads(get(api)[2])
				found = res["data"]["result"]
				if found:
					value = float(found[0]["value"][1])
					if value == 7:
						break
			except (urllib.error.URLError, ConnectionError, KeyError):
				pass
			time.sleep(0.5)
		assert value == 7
		assert found[0]["metric"]["job"] == "kvmmd"
	finally:
		proc.terminate()
		proc.wait(30)


def test_dashboard_asks_only_for_metrics_that_exist(metrics_kvmmd):
	ring, url = metrics_kvmmd
	cache(ring, range(1, 9))		# a namespace, for kvmm_namespace_pages
	names = {n for n, _ in samples(get(url + "/metrics")[2])}
	dash = json.loads(DASHBOARD.read_text())
	exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
	assert exprs and all(p.get("targets") for p in dash["panels"])
	for e in exprs:
		used = set(re.findall(r"\bkvmm_[a-z0-9_]+", e))
		assert used, e
		assert used <= names, f"{e}: {used - names} not in /metrics"


def test_prefix_query_answers_per_tier(metrics_kvmmd):
	ring, url = metrics_kvmmd
	a = list(range(1, 19))
	cache(ring, a)
	assert post(url + "/v1/prefix", {"tokens": a}) == (200, {
		"ns": 0, "tokens": 18, "page_size": 4,
		"cached": {"device": 16, "host": 0, "nvme": 0}, "cached_total": 16})
	b = ring.batch()
	b.reclaim(4)
	ring.submit(b)
	status, res = post(url + "/v1/prefix", {"tokens": a[:10], "ns": 0})
	assert status == 200 and res["cached"] == {"device": 0, "host": 8, "nvme": 0}
	assert post(url + "/v1/prefix", {"tokens": a, "ns": 1})[1]["cached_total"] == 0
	# refusals say what is wrong
	assert post(url + "/v1/prefix", {"tokens": [-1]})[0] == 400
	assert post(url + "/v1/prefix", {"tokens": "1 2"})[0] == 400
	assert post(url + "/v1/prefix", {"tokens": [1], "ns": -3})[0] == 400
	req = urllib.request.Request(url + "/v1/prefix", data=b"{", method="POST")
	with pytest.raises(urllib.error.HTTPError) as e:
		urllib.request.urlopen(req, timeout=5)
	assert e.value.code == 400
	e.value.close()
	with pytest.raises(urllib.error.HTTPError) as e:
		urllib.request.urlopen(url + "/v1/prefix", timeout=5)
	assert e.value.code == 405
	e.value.close()
	with pytest.raises(urllib.error.HTTPError) as e:
		urllib.request.urlopen(url + "/nothing", timeout=5)
	assert e.value.code == 404
	e.value.close()


def test_metrics_options_are_checked(tmp_path):
	if not KVMMD.exists():
		pytest.skip("kvmmd is not built")
	for bad, says in ((["--metrics", "localhost"], "not HOST:PORT"),
			  (["--metrics", "nohost:80"], "not HOST:PORT")):
		r = subprocess.run([str(KVMMD), "--socket", str(tmp_path / "x.sock")] + GEOM + bad,
				   capture_output=True, text=True, timeout=30)
		assert r.returncode == 1 and says in r.stderr
	with socket.socket() as s:		# a port in use
		s.bind(("127.0.0.1", 0))
		s.listen()
		r = subprocess.run([str(KVMMD), "--socket", str(tmp_path / "x.sock")] + GEOM +
				   ["--metrics", f"127.0.0.1:{s.getsockname()[1]}"],
				   capture_output=True, text=True, timeout=30)
		assert r.returncode == 1 and "cannot listen" in r.stderr
