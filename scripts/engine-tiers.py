#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerate the tiered reference-engine tables of Documentation/performance.rst.

Runs kvmm-engine on its generated traffic with a 1,024-page device under
each tier configuration of the table, --runs times each, and prints the
table as reStructuredText; then runs each tiered configuration again
with --no-prefetch (the engine without PREFETCH, whose admission does not
count promotions) and prints a second table comparing the two.  It fails
(exit 1, saying why on stderr) when a row does not repeat (any figure of
either table differs by more than --tolerance between runs) or when a
configuration with a tier added has a lower hit rate than the same
configuration without it.

    scripts/engine-tiers.py [--engine build/bin/kvmm-engine] [--runs 3]
                            [--nvme-file /tmp/kvmm-engine-tiers.nvme]
                            [--seeds 1,2,3] [--engine-args "--max-wait 25"]

In the second table each pair is "without PREFETCH / with it".  With
--seeds, a third table runs each tiered configuration once more per
traffic seed (the generator's --seed; runs repeat exactly, as the first
two tables check), with and without PREFETCH, and says for how many
seeds PREFETCH lowers the TTFT p50 and p99, and the medians over them.
--engine-args adds options to every run but the --no-prefetch ones, which
stay the engine before PREFETCH (OLD_ENGINE: --no-prefetch, and every
later scheduler option that changes what it does set to what reproduces
that engine, run for run): so the tables measure an option of the
engine against that engine.
"""
import argparse
import json
import os
import subprocess
import sys

DEVICE_PAGES = 1024
NVME_PAGES = 8192
# the engine before PREFETCH, figure for figure
OLD_ENGINE = ("--no-prefetch", "--lookahead", "0")

# (label, host pages, NVMe tier?, the row without the last tier added)
ROWS = [
    ("none", 0, False, None),
    ("``--host-pages 1024``", 1024, False, 0),
    ("``--host-pages 1024 --nvme-pages 8192``", 1024, True, 1),
    ("``--host-pages 4096``", 4096, False, 0),
    ("``--host-pages 4096 --nvme-pages 8192``", 4096, True, 3),
]


def run(engine, host, nvme, nvme_file, extra=()):
    cmd = [engine, "--device-pages", str(DEVICE_PAGES), "--json", "-", "--quiet"]
    cmd += list(extra)
    if host:
        cmd += ["--host-pages", str(host)]
    if nvme:
        cmd += ["--nvme-file", nvme_file, "--nvme-pages", str(NVME_PAGES)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL).stdout
    r = json.loads(out)["results"]
    if not r["check_ok"]:
        sys.exit("%s: kvmm_check failed at the end of the run" % " ".join(cmd))
    t, e = r["tiers"], r["estimated"]
    return {
        "hit_rate": r["hit_rate"],
        "host_hit_rate": t["host_hit_rate"],
        "nvme_hit_rate": t["nvme_hit_rate"],
        "ttft_p50": e["ttft_p50_s"],
        "ttft_p99": e["ttft_p99_s"],
        "promote_seconds": t["promote_seconds"],
        "throttle_seconds": t["throttle_seconds"],
        "promotions_refused": t["promotions_refused"],
        "prefetch_tokens": t["prefetch_tokens"],
        "prefetch_hit_tokens": t["prefetch_hit_tokens"],
    }


def repeat(a, label, host, nvme, extra, bad):
    """--runs runs of one configuration; a figure that moves goes to @bad."""
    runs = [run(a.engine, host, nvme, a.nvme_file, extra) for _ in range(a.runs)]
    for key in runs[0]:
        vals = [x[key] for x in runs]
        if max(vals) - min(vals) > a.tolerance:
            bad.append("%s: %s differs between runs: %s" % (label, key, vals))
    return runs[0]


def table(head, body):
    width = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    rule = "  ".join("=" * w for w in width)
    print(rule)
    print("  ".join(h.ljust(w) for h, w in zip(head, width)).rstrip())
    print(rule)
    for b in body:
        print("  ".join(c.ljust(w) for c, w in zip(b, width)).rstrip())
    print(rule)


def seed_list(text):
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not a comma-separated list of seeds" % text)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def seeds_table(a, seeds):
    """Each tiered row at each traffic seed, with and without PREFETCH."""
    what = " ".join(("PREFETCH",) + a.engine_args)
    head = ["tiers", "seeds", "p50 lower with " + what, "p99 lower with " + what,
            "median p50", "median p99"]
    body = []
    for label, host, nvme, _ in ROWS:
        if not host:
            continue
        o, r = [], []
        for s in seeds:
            extra = ("--seed", str(s))
            o.append(run(a.engine, host, nvme, a.nvme_file, extra + OLD_ENGINE))
            r.append(run(a.engine, host, nvme, a.nvme_file, extra + a.engine_args))
        body.append([
            label,
            "%d" % len(seeds),
            "%d" % sum(y["ttft_p50"] < x["ttft_p50"] for x, y in zip(o, r)),
            "%d" % sum(y["ttft_p99"] < x["ttft_p99"] for x, y in zip(o, r)),
            "%.3f / %.3f s" % (median([x["ttft_p50"] for x in o]),
                               median([y["ttft_p50"] for y in r])),
            "%.1f / %.1f s" % (median([x["ttft_p99"] for x in o]),
                               median([y["ttft_p99"] for y in r])),
        ])
    if os.path.exists(a.nvme_file):
        os.unlink(a.nvme_file)
    table(head, body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="build/bin/kvmm-engine")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=0.002)
    ap.add_argument("--nvme-file", default="/tmp/kvmm-engine-tiers.nvme")
    ap.add_argument("--seeds", type=seed_list, default=[],
                    help="comma-separated traffic seeds for the third table")
    ap.add_argument("--engine-args", type=str.split, default=[],
                    help="options added to every run but the --no-prefetch ones")
    a = ap.parse_args()
    a.engine_args = tuple(a.engine_args)
    seeds = a.seeds

    rows, old, bad = [], {}, []
    for i, (label, host, nvme, _) in enumerate(ROWS):
        rows.append(repeat(a, label, host, nvme, a.engine_args, bad))
        if host:
            old[i] = repeat(a, label + " --no-prefetch", host, nvme, OLD_ENGINE, bad)
    if os.path.exists(a.nvme_file):
        os.unlink(a.nvme_file)
    for i, (label, _, _, without) in enumerate(ROWS):
        if without is not None and rows[i]["hit_rate"] < rows[without]["hit_rate"]:
            bad.append("%s: hit rate %.4f below %.4f without its last tier (%s)" %
                       (label, rows[i]["hit_rate"], rows[without]["hit_rate"],
                        ROWS[without][0]))

    head = ["tiers", "hit rate", "from host / from NVMe",
            "estimated TTFT p50 / p99", "promotion time charged",
            "waited for NVMe writes"]
    body = []
    for (label, host, nvme, _), r in zip(ROWS, rows):
        body.append([
            label,
            "%.4f" % r["hit_rate"],
            "%s / %s" % ("%.4f" % r["host_hit_rate"] if host else "-",
                         "%.4f" % r["nvme_hit_rate"] if nvme else "-"),
            "%.3f / %.1f s" % (r["ttft_p50"], r["ttft_p99"]),
            "%.1f s" % r["promote_seconds"] if host else "-",
            "%.1f s" % r["throttle_seconds"] if nvme else "-",
        ])
    table(head, body)
    print()
    head = ["tiers", "promotions refused", "estimated TTFT p50",
            "estimated TTFT p99", "hit rate", "prefetched / matched tokens"]
    body = []
    for i, (label, _, _, _) in enumerate(ROWS):
        if i not in old:
            continue
        o, r = old[i], rows[i]
        body.append([
            label,
            "%d / %d" % (o["promotions_refused"], r["promotions_refused"]),
            "%.3f / %.3f s" % (o["ttft_p50"], r["ttft_p50"]),
            "%.1f / %.1f s" % (o["ttft_p99"], r["ttft_p99"]),
            "%.4f / %.4f" % (o["hit_rate"], r["hit_rate"]),
            "%d / %d" % (r["prefetch_tokens"], r["prefetch_hit_tokens"]),
        ])
    table(head, body)
    if seeds:
        print()
        seeds_table(a, seeds)
    for why in bad:
        print("engine-tiers: " + why, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
