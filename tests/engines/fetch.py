#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/engines/fetch.py - an engine's source distribution, for run.sh.

  fetch.py fetch ENGINE CACHEDIR
      Prints the path of ENGINE's sdist in CACHEDIR, downloading it first
      when it is not there.  The file, its version and its sha256 are the
      ones sdists.txt (beside this script) pins; the address comes from
      PyPI's JSON simple API (PEP 691).  A download whose sha256 is not
      the pinned one is refused (exit 1); a cached file that does not
      match is downloaded again.

  fetch.py extract SDIST DEST MEMBER...
      Empties DEST and writes into it the MEMBERs of SDIST, paths relative
      to the sdist's top folder (NAME-VERSION/); a MEMBER ending in / is a
      whole folder.  Only regular files are written.  A MEMBER that the
      sdist lacks is an error (exit 1) naming it.

Standard library only: it runs with the machine's python3, before any
virtual environment exists.
"""

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PINS = os.path.join(HERE, "sdists.txt")
INDEX = os.environ.get("KVMM_PYPI_SIMPLE", "https://pypi.org/simple")
PEP691 = "application/vnd.pypi.simple.v1+json"
TIMEOUT = 120


def die(msg):
    print(f"fetch.py: {msg}", file=sys.stderr)
    sys.exit(1)


def pin(engine):
    """(version, filename, sha256) of ENGINE from sdists.txt."""
    with open(PINS, encoding="utf-8") as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 4:
                die(f"{PINS}: malformed line: {line.rstrip()}")
            name, version, filename, sha = fields
            if name == engine:
                return version, filename, sha.lower()
    die(f"{PINS}: no pin for engine {engine!r}")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_url(project, filename, sha):
    """The URL of FILENAME in PROJECT's PEP 691 listing."""
    url = f"{INDEX}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": PEP691})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            ctype = r.headers.get("Content-Type", "")
            body = r.read()
    except OSError as e:
        die(f"{url}: {e}")
    if not ctype.startswith(PEP691):
        die(f"{url}: answered {ctype or 'no content type'}, not {PEP691}")
    for entry in json.loads(body).get("files", []):
        if entry.get("filename") != filename:
            continue
        listed = entry.get("hashes", {}).get("sha256", "").lower()
        if listed and listed != sha:
            die(f"{filename}: PyPI lists sha256 {listed}, sdists.txt pins "
                f"{sha}; refusing it (was the file replaced? check "
                f"before changing the pin)")
        return entry["url"]
    die(f"{url}: no file {filename}")


def fetch(engine, cachedir):
    version, filename, sha = pin(engine)
    path = os.path.join(cachedir, filename)
    if os.path.exists(path):
        got = sha256_of(path)
        if got == sha:
            return path
        print(f"fetch.py: cached {path} has sha256 {got}, not the pinned "
              f"{sha}: downloading it again", file=sys.stderr)
        os.unlink(path)
    os.makedirs(cachedir, exist_ok=True)
    url = file_url(engine, filename, sha)
    print(f"fetch.py: downloading {url}", file=sys.stderr)
    fd, tmp = tempfile.mkstemp(prefix=f".{filename}.", dir=cachedir)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, \
                urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            for block in iter(lambda: r.read(1 << 20), b""):
                h.update(block)
                out.write(block)
        got = h.hexdigest()
        if got != sha:
            die(f"{filename} from {url} has sha256 {got}, but sdists.txt "
                f"pins {sha}: refusing it")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        die(f"{url}: {e}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def extract(sdist, dest, members):
    wanted = [m.strip("/") + ("/" if m.endswith("/") else "") for m in members]
    found = set()
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    top = None
    with tarfile.open(sdist, "r:*") as tf:
        for m in tf:
            parts = m.name.split("/", 1)
            if top is None:
                top = parts[0]
            if parts[0] != top or len(parts) < 2 or not m.isfile():
                continue
            rel = parts[1]
            hit = [w for w in wanted
                   if rel == w or (w.endswith("/") and rel.startswith(w))]
            if not hit:
                continue
            if rel.startswith("/") or ".." in rel.split("/"):
                die(f"{sdist}: refusing member {m.name}")
            found.update(hit)
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with tf.extractfile(m) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
    missing = [w for w in wanted if w not in found]
    if missing:
        shutil.rmtree(dest)
        die(f"{os.path.basename(sdist)} has no {', '.join(missing)} "
            f"(did the engine move its tests? update run.sh's list)")


def main(argv):
    if len(argv) == 3 and argv[0] == "fetch":
        print(fetch(argv[1], argv[2]))
    elif len(argv) >= 4 and argv[0] == "extract":
        extract(argv[1], argv[2], argv[3:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
