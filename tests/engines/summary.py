#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/engines/summary.py - run.sh's closing report.

  summary.py ENGINE:STATUS:JUNITXML...

For each engine, pytest's exit STATUS and the JUnit XML it wrote (run with
-o junit_family=xunit1, so that each test case names its file): prints,
per test file, how many tests passed, failed (failures and errors) and were
skipped, with the skip reasons, then one closing line "N passed, N failed"
over all the engines.  An engine whose pytest exited non-zero without a
failure in its XML (it crashed, collected nothing, or wrote no XML) counts
as one failure.  Exits 0 when nothing failed, 1 otherwise.

Standard library only.
"""

import collections
import os
import sys
import xml.etree.ElementTree as ET


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def case_file(case, where):
    f = case.get("file")
    if f:
        # Relative to pytest's rootdir (the engine's folder, where the
        # XML is); a file from outside it is named from this tree's root.
        if f.startswith(".." + os.sep):
            f = os.path.relpath(os.path.normpath(os.path.join(where, f)), ROOT)
        return f
    # No file attribute (xunit2, or a collection error): the dotted
    # module path is the best name there is.
    return case.get("classname") or case.get("name") or "?"


def engine_results(path):
    """{file: {"passed"|"failed"|"skipped": n, "reasons": Counter}}"""
    files = collections.OrderedDict()
    where = os.path.dirname(os.path.abspath(path))
    for case in ET.parse(path).getroot().iter("testcase"):
        r = files.setdefault(case_file(case, where), {
            "passed": 0, "failed": 0, "skipped": 0,
            "reasons": collections.Counter()})
        if case.find("failure") is not None or case.find("error") is not None:
            r["failed"] += 1
        elif case.find("skipped") is not None:
            r["skipped"] += 1
            msg = case.find("skipped").get("message") or "no reason given"
            r["reasons"][msg] += 1
        else:
            r["passed"] += 1
    return files


def main(args):
    total = collections.Counter()
    for arg in args:
        engine, status, path = arg.split(":", 2)
        status = int(status)
        files = {}
        if os.path.exists(path):
            try:
                files = engine_results(path)
            except ET.ParseError as e:
                print(f"{engine}: unreadable {path}: {e}")
        failed = 0
        for name, r in sorted(files.items()):
            print(f"{engine}: {name}: passed {r['passed']}, "
                  f"failed {r['failed']}, skipped {r['skipped']}")
            for reason, n in sorted(r["reasons"].items()):
                print(f"{engine}:     skipped {n}: {reason}")
            for k in ("passed", "failed", "skipped"):
                total[k] += r[k]
            failed += r["failed"]
        if status != 0 and failed == 0:
            print(f"{engine}: pytest exited {status} with no failed test "
                  f"recorded: counted as one failure")
            total["failed"] += 1
    if total["skipped"]:
        print(f"skipped {total['skipped']} (not failures)")
    print(f"{total['passed']} passed, {total['failed']} failed")
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    if not sys.argv[1:]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
