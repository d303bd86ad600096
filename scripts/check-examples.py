#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-examples.py - run every example of README.md and Documentation/*.rst.

    check-examples.py [--list] --prefix DIR --build DIR --python PY [FILE...]

Each code block of the documents is taken from the text itself, so an
example cannot drift from what the tests run.  A block's kind comes from
its language, or from a marker comment just before it (anywhere between
the previous block and this one):

    Markdown:  <!-- example: KIND -->       reStructuredText:  .. example: KIND

KIND is one of:

  c            a whole C program: built against the kvmm installed in
               --prefix (pkg-config, rpath to its lib/) and run; it must
               exit 0
  python       run in --python (the package's virtual environment); the
               Python blocks of one document are one session, run in
               order in one interpreter, as a reader would type them
  python, with kvmmd ARGS
               the same, with a kvmmd serving ./kvmmd.sock with ARGS
               started first (it stays up for the rest of the session)
  python, with transformers
               the same in --transformers-python (the environment of
               python/check-transformers.sh: torch and transformers), a
               session of its own; skipped, and counted so, without it
  shell        a shell session: bash -e in a scratch directory where
               build/ is --build and python3 is --python, so sessions of
               kvmmd and kvmmctl run against a real kvmmd; background
               jobs are killed at its end
  excerpt: WHY not run, and WHY says why (an ABI excerpt, output, a
               configuration for another program, a fragment of a
               program shown whole elsewhere)

Unmarked blocks in c, python, sh or console are c, python and shell; a
block of any other language or none must be marked, and the run fails on
one that is not.  Every example runs in a scratch directory of its own
(a document's Python session shares one).  Prints what it ran and a
count; exits 1 if any example failed or could not be classified.
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120
LANGS = {"c": "c", "python": "python", "sh": "shell", "console": "shell",
	 "bash": "shell"}

MD_FENCE = re.compile(r"^```(\S*)\s*$")
MD_MARK = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
RST_MARK = re.compile(r"^\s*\.\. example:\s*(.*?)\s*$")
RST_CODE = re.compile(r"^(\s*)\.\. code-block::\s*(\S*)\s*$")


class Block:
	def __init__(self, path, line, lang, text, mark):
		self.path, self.line, self.lang = path, line, lang
		self.text, self.mark = text, mark
		self.kind, self.why, self.kvmmd = None, None, None
		self.hf = False
		self.classify()

	def where(self):
		try:
			return f"{self.path.relative_to(ROOT)}:{self.line}"
		except ValueError:
			return f"{self.path}:{self.line}"

	def classify(self):
		m = self.mark
		if m is None:
			self.kind = LANGS.get(self.lang)
			return
		if m.startswith("excerpt:") and m[len("excerpt:"):].strip():
			self.kind, self.why = "excerpt", m[len("excerpt:"):].strip()
		elif m in ("c", "python", "shell"):
			self.kind = m
		elif m == "python, with transformers":
			self.kind, self.hf = "python", True
		elif m.startswith("python, with kvmmd"):
			self.kind, self.kvmmd = "python", shlex.split(m[len("python, with kvmmd"):])


def md_blocks(path):
	lines = path.read_text().split("\n")
	mark, i = None, 0
	while i < len(lines):
		m = MD_MARK.match(lines[i])
		if m:
			mark = m.group(1)
		f = MD_FENCE.match(lines[i])
		if f:
			start, body = i + 1, []
			i += 1
			while i < len(lines) and lines[i].strip() != "```":
				body.append(lines[i])
				i += 1
			yield Block(path, start, f.group(1), "\n".join(body) + "\n", mark)
			mark = None
		i += 1


def rst_body(lines, i, indent):
	"""Return (body, next) of the literal block whose blank line is at i."""
	while i < len(lines) and not lines[i].strip():
		i += 1
	body = []
	while i < len(lines) and (not lines[i].strip() or
				   len(lines[i]) - len(lines[i].lstrip()) > indent):
		body.append(lines[i])
		i += 1
	while body and not body[-1].strip():
		body.pop()
	strip = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
	return "\n".join(l[strip:] for l in body) + "\n", i


def rst_blocks(path):
	lines = path.read_text().split("\n")
	mark, i = None, 0
	while i < len(lines):
		line = lines[i]
		m = RST_MARK.match(line)
		c = RST_CODE.match(line)
		if m:
			mark = m.group(1)
			i += 1
			while i < len(lines) and lines[i].startswith("   ") and lines[i].strip():
				mark += " " + lines[i].strip()	# the comment goes on
				i += 1
		elif c:
			j = i + 1
			while j < len(lines) and lines[j].strip().startswith(":"):
				j += 1	# the directive's options
			body, nxt = rst_body(lines, j, len(c.group(1)))
			yield Block(path, i + 1, c.group(2), body, mark)
			mark, i = None, nxt
		elif line.rstrip().endswith("::") and not line.lstrip().startswith(".. ") \
				and i + 1 < len(lines) and not lines[i + 1].strip():
			indent = len(line) - len(line.lstrip())
			if line.lstrip().startswith(("* ", "- ")):
				indent += 2
			body, nxt = rst_body(lines, i + 1, indent)
			if body.strip():
				yield Block(path, i + 1, "", body, mark)
			mark, i = None, nxt
		else:
			i += 1


def run(cmd, cwd, env=None, stdin=None, timeout=TIMEOUT):
	"""Run cmd in its own process group; return (rc, output)."""
	p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin else
			     subprocess.DEVNULL, stdout=subprocess.PIPE,
			     stderr=subprocess.STDOUT, text=True, start_new_session=True)
	try:
		out, _ = p.communicate(stdin, timeout=timeout)
	except subprocess.TimeoutExpired:
		os.killpg(p.pid, signal.SIGKILL)
		out, _ = p.communicate()
		return 124, out + f"\n(timed out after {timeout} s)"
	return p.returncode, out


class Runner:
	def __init__(self, args):
		self.prefix, self.build = Path(args.prefix), Path(args.build)
		self.python = args.python
		self.scratch = Path(tempfile.mkdtemp(prefix="kvmm-examples-"))
		self.env = dict(os.environ)
		self.env["PKG_CONFIG_PATH"] = str(self.prefix / "lib/pkgconfig")
		self.env["PATH"] = f"{Path(self.python).parent}:{self.env['PATH']}"
		self.env.pop("KVMM_SOCKET", None)
		self.n = 0

	def workdir(self):
		self.n += 1
		d = self.scratch / str(self.n)
		d.mkdir()
		(d / "build").symlink_to(self.build)
		return d

	def c(self, blocks):
		for b in blocks:
			d = self.workdir()
			(d / "example.c").write_text(b.text)
			flags = subprocess.run(["pkg-config", "--cflags", "--libs", "kvmm"],
					       env=self.env, capture_output=True, text=True)
			if flags.returncode:
				yield b, 1, flags.stderr
				continue
			rc, out = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o",
				       "example", "example.c", *flags.stdout.split(),
				       f"-Wl,-rpath,{self.prefix / 'lib'}"], d, self.env)
			if rc == 0:
				rc, out = run(["./example"], d, self.env)
			yield b, rc, out

	def python_session(self, blocks, python=None):
		"""One interpreter (@python, default --python) runs the blocks in
		order; each reports its own end."""
		d = self.workdir()
		driver = ["import sys, traceback",
			  "ns = {'__name__': '__main__'}",
			  "def block(i, src):",
			  "    try:",
			  "        exec(compile(src, f'<example {i}>', 'exec'), ns)",
			  "    except BaseException:",
			  "        traceback.print_exc()",
			  "        print(f'@@ {i} failed', flush=True); sys.exit(1)",
			  "    print(f'@@ {i} ok', flush=True)"]
		daemon = None
		try:
			for i, b in enumerate(blocks):
				if b.kvmmd is not None and daemon is None:
					daemon = subprocess.Popen(
						[str(self.build / "bin/kvmmd"), "--socket", "kvmmd.sock",
						 *b.kvmmd], cwd=d, stdout=subprocess.DEVNULL,
						stderr=subprocess.DEVNULL, start_new_session=True)
					driver.append("import time, os")
					driver.append("for _ in range(500):\n"
						      "    if os.path.exists('kvmmd.sock'): break\n"
						      "    time.sleep(0.01)")
				driver.append(f"block({i}, {b.text!r})")
			(d / "driver.py").write_text("\n".join(driver) + "\n")
			rc, out = run([python or self.python, "-X", "dev", "driver.py"], d, self.env)
		finally:
			if daemon:
				os.killpg(daemon.pid, signal.SIGTERM)
				daemon.wait()
		done = {int(m.group(1)): m.group(2) for m in
			re.finditer(r"^@@ (\d+) (ok|failed)$", out, re.M)}
		broken = False
		for i, b in enumerate(blocks):
			state = done.get(i)
			if state == "ok":
				yield b, 0, ""
			elif broken:
				yield b, 1, "not run: an earlier block of this session failed"
			else:	# failed, or the interpreter died in it
				broken = True
				yield b, 1, re.sub(r"^@@ .*\n", "", out, flags=re.M) + f"(exit {rc})"

	def shell(self, blocks):
		for b in blocks:
			d = self.workdir()
			script = ("set -e -o pipefail\n"
				  "trap 'rc=$?; set +e; kill $(jobs -p) 2>/dev/null; wait; exit $rc' EXIT\n"
				  + b.text)
			rc, out = run(["bash", "-c", script], d, self.env)
			yield b, rc, out + (f"(exit {rc})" if rc else "")


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--list", action="store_true", help="list blocks and kinds, run nothing")
	ap.add_argument("--prefix", help="where kvmm is installed (lib/pkgconfig/kvmm.pc)")
	ap.add_argument("--build", help="the make output tree (its bin/ holds kvmmd)")
	ap.add_argument("--python", help="the interpreter with the kvmm package")
	ap.add_argument("--transformers-python",
			help="the interpreter with the package, torch and transformers")
	ap.add_argument("files", nargs="*", type=Path)
	args = ap.parse_args()
	files = args.files or [ROOT / "README.md", *sorted((ROOT / "Documentation").rglob("*.rst"))]
	blocks = []
	for f in files:
		f = f.resolve()
		blocks += list(md_blocks(f) if f.suffix == ".md" else rst_blocks(f))

	bad = [b for b in blocks if b.kind is None]
	for b in bad:
		what = f"marker '{b.mark}'" if b.mark else f"language '{b.lang or 'none'}'"
		print(f"examples: {b.where()}: cannot classify ({what}): mark it "
		      "'example: c|python|shell|excerpt: WHY'")
	if args.list:
		for b in blocks:
			print(f"{b.where()}: {b.kind or 'unclassified'}{': ' + b.why if b.why else ''}")
		return 1 if bad else 0
	if not (args.prefix and args.build and args.python):
		ap.error("--prefix, --build and --python are needed to run examples")

	r = Runner(args)
	results, skipped = [], []
	try:
		results += r.c([b for b in blocks if b.kind == "c"])
		for f in files:
			for hf in (False, True):
				session = [b for b in blocks if b.kind == "python" and b.hf == hf and
					   b.path == f.resolve()]
				if session and hf and not args.transformers_python:
					skipped += session
				elif session:
					results += r.python_session(session,
								    args.transformers_python if hf else None)
		results += r.shell([b for b in blocks if b.kind == "shell"])
	finally:
		shutil.rmtree(r.scratch, ignore_errors=True)
	failed = 0
	for b, rc, out in results:
		print(f"  {'ok  ' if rc == 0 else 'FAIL'} {b.kind:6} {b.where()}")
		if rc:
			failed += 1
			print("    " + out.rstrip().replace("\n", "\n    "))
	kinds = {k: sum(1 for b, _, _ in results if b.kind == k) for k in ("c", "python", "shell")}
	for b in skipped:
		print(f"  skip python {b.where()}: no transformers environment "
		      "(--transformers-python)")
	excerpts = sum(1 for b in blocks if b.kind == "excerpt")
	print(f"examples: {len(results)} run ({kinds['c']} C, {kinds['python']} Python, "
	      f"{kinds['shell']} shell), {failed} failed, {len(bad)} unmarked; "
	      f"{excerpts} excerpts not run" + (f"; {len(skipped)} skipped" if skipped else ""))
	return 1 if failed or bad else 0


if __name__ == "__main__":
	sys.exit(main())
