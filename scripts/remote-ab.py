#!/usr/bin/env python3
"""The replay through a ring to another process against the C API, A/B.

Usage: scripts/remote-ab.py ROUNDS KVMM_BENCH... [--workload FILE]

Each round, at page sizes 1 and 16, runs every kvmm-bench binary given
(old and new builds, alternating) with `replay --repeat 5 --json`, first
direct, then `--via remote`, and records us_per_request and, for the
remote run, the CPU the rest of the machine used meanwhile (/proc/stat
busy time minus our own rusage, in cores).  Prints every run, then the
medians and the remote/direct ratio over all rounds and over the quiet
ones (the others under 0.3 cores): on a shared machine the ratio depends
on whether the two processes get a core each.
"""
import json, os, resource, statistics, subprocess, sys, time
args = sys.argv[1:]
W = "../shared/bench/workload.jsonl"
if "--workload" in args:
    i = args.index("--workload"); W = args[i + 1]; del args[i:i + 2]
if len(args) < 2:
    sys.exit(__doc__)
rounds = int(args[0]); bins = args[1:]
HZ = os.sysconf("SC_CLK_TCK")

def busy():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    return (sum(v) - v[3] - v[4]) / HZ      # all but idle and iowait

def run(b, ps, via):
    cmd = [b, "replay", "--workload", W, "--page-size", str(ps), "--repeat", "5", "--json"]
    if via != "direct":
        cmd += ["--via", via]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN); b0 = busy(); t0 = time.time()
    j = json.loads(subprocess.check_output(cmd))
    t1 = time.time(); b1 = busy(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    assert j["accounting_ok"]
    return j["us_per_request"], j["matched_tokens"], max(0.0, (b1 - b0 - ours) / (t1 - t0))

res = {}
print("loadavg", open("/proc/loadavg").read().strip())
for r in range(rounds):
    for ps in (1, 16):
        for b in bins:
            d, md, _ = run(b, ps, "direct")
            x, mx, other = run(b, ps, "remote")
            assert md == mx
            res.setdefault((b, ps), []).append((d, x, other, md))
print("loadavg", open("/proc/loadavg").read().strip())
for ps in (1, 16):
    for b in bins:
        rows = res[(b, ps)]
        def summ(sel, tag):
            if not sel:
                print(f"   {tag}: no runs"); return
            d = statistics.median(s[0] for s in sel); x = statistics.median(s[1] for s in sel)
            rr = statistics.median(s[1] / s[0] for s in sel)
            print(f"   {tag} ({len(sel)} runs): direct {d:.3f} remote {x:.3f} us/req, "
                  f"remote/direct {x/d:.2f}x (median of per-run ratios {rr:.2f}x)")
        print(f"ps={ps:2} {b}  matched {sorted(set(s[3] for s in rows))}")
        print("   runs (direct, remote, other cores):", " ".join(f"({s[0]:.2f},{s[1]:.2f},{s[2]:.2f})" for s in rows))
        summ(rows, "all")
        summ([s for s in rows if s[2] < 0.3], "quiet (other load < 0.3 cores)")
