# SPDX-License-Identifier: MIT
"""make check's runner (python/check.sh) and its examples step
(scripts/check-examples.py): what they print and when they fail."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "scripts" / "check-examples.py"
SUMMARY = re.compile(r"^\d+ passed, \d+ failed$", re.M)
NESTED = pytest.mark.skipif(os.environ.get("KVMM_CHECK_NESTED") == "1",
			    reason="inside a check.sh that a test started")


def examples(*args, cwd=None):
	return subprocess.run([sys.executable, str(EXAMPLES), *map(str, args)],
			      capture_output=True, text=True, cwd=cwd, timeout=300)


def objtree():
	return Path(os.environ.get("KVMM_O", ROOT / "build"))


def test_every_documented_block_is_classified():
	r = examples("--list")
	assert r.returncode == 0, r.stdout + r.stderr
	kinds = re.findall(r": (c|python|shell|excerpt)\b", r.stdout)
	assert {"c", "python", "shell", "excerpt"} <= set(kinds)


def test_an_unmarked_literal_block_fails(tmp_path):
	doc = tmp_path / "doc.rst"
	doc.write_text("Title\n=====\n\nRun this::\n\n    print('hi')\n")
	r = examples("--list", doc)
	assert r.returncode == 1
	assert f"{doc}:4: cannot classify (language 'none')" in r.stdout


def test_an_excerpt_must_say_why(tmp_path):
	doc = tmp_path / "doc.md"
	doc.write_text("<!-- example: excerpt: -->\n```\nx\n```\n\n"
		       "<!-- example: excerpt: output -->\n```\ny\n```\n")
	r = examples("--list", doc)
	assert r.returncode == 1
	assert "doc.md:2: cannot classify (marker 'excerpt:')" in r.stdout
	assert "doc.md:7: excerpt: output" in r.stdout


def test_failing_examples_fail_the_run(tmp_path):
	doc = tmp_path / "doc.md"
	doc.write_text("```python\nx = 41\n```\n\n```python\nassert x + 1 == 43, 'wrong'\n```\n\n"
		       "```python\nprint('never')\n```\n\n```sh\necho fine\n```\n\n"
		       "```sh\ntrue\nfalse\necho never\n```\n")
	r = examples("--prefix", tmp_path, "--build", tmp_path, "--python", sys.executable, doc)
	assert r.returncode == 1, r.stdout
	lines = r.stdout.splitlines()
	assert "  ok   python " + str(doc) + ":1" in lines
	assert "  FAIL python " + str(doc) + ":5" in lines	# the session's second block
	assert "AssertionError: wrong" in r.stdout
	assert "  FAIL python " + str(doc) + ":9" in lines	# not run after it
	assert "  ok   shell  " + str(doc) + ":13" in lines
	assert "  FAIL shell  " + str(doc) + ":17" in lines	# bash -e
	assert "never" not in r.stdout.split(":17")[1]
	assert lines[-1] == ("examples: 5 run (0 C, 3 Python, 2 shell), 3 failed, "
			     "0 unmarked; 0 excerpts not run")


def test_transformers_examples_run_in_their_own_interpreter(tmp_path):
	"""'python, with transformers' blocks are a session of their own in
	--transformers-python; without it they are skipped, and counted so."""
	doc = tmp_path / "doc.rst"
	doc.write_text("A\n=\n\n.. example: python\n\nPlain::\n\n    plain = 1\n\n"
		       ".. example: python, with transformers\n\n::\n\n"
		       "    import sys, os\n"
		       "    assert 'plain' not in globals()\n"
		       "    assert os.environ['HF_PY_MARK'] == 'yes'\n")
	r = examples("--prefix", tmp_path, "--build", tmp_path, "--python", sys.executable, doc)
	assert r.returncode == 0, r.stdout
	assert f"  skip python {doc}:12: no transformers environment" in r.stdout
	assert r.stdout.splitlines()[-1] == ("examples: 1 run (0 C, 1 Python, 0 shell), 0 failed, "
					     "0 unmarked; 0 excerpts not run; 1 skipped")
	wrapper = tmp_path / "hfpy"
	wrapper.write_text(f"#!/bin/sh\nHF_PY_MARK=yes exec {sys.executable} \"$@\"\n")
	wrapper.chmod(0o755)
	r = examples("--prefix", tmp_path, "--build", tmp_path, "--python", sys.executable,
		     "--transformers-python", wrapper, doc)
	assert r.returncode == 0, r.stdout
	assert f"  ok   python {doc}:12" in r.stdout
	assert r.stdout.splitlines()[-1] == ("examples: 2 run (0 C, 2 Python, 0 shell), 0 failed, "
					     "0 unmarked; 0 excerpts not run")


def test_a_session_may_stop_its_own_background_jobs(tmp_path):
	"""A job the session killed itself (kvmmd in the README's tour) is gone
	before the session ends: that is no failure."""
	doc = tmp_path / "doc.md"
	# the job may die just as the session ends: often enough in 30 tries
	doc.write_text("```sh\nsleep 60 &\nkill %1\n```\n\n" * 30 +
		       "```sh\nsleep 60 &\ntrue\n```\n")
	r = examples("--prefix", tmp_path, "--build", tmp_path, "--python", sys.executable, doc)
	assert r.returncode == 0, r.stdout
	assert r.stdout.splitlines()[-1].startswith("examples: 31 run (0 C, 0 Python, 31 shell), 0 failed")


@NESTED
def test_check_prints_one_summary_line():
	"""kvmm-tests' own count has a shape of its own; the runner's line is the
	only "N passed, N failed", and the last."""
	tests = objtree() / "tests" / "kvmm-tests"
	r = subprocess.run([str(ROOT / "python" / "check.sh"), str(objtree()), "", str(tests),
			    "-s", "kvmm_abi"], capture_output=True, text=True, timeout=300)
	assert r.returncode == 0, r.stdout[-2000:]
	found = SUMMARY.findall(r.stdout)
	assert len(found) == 1, found
	assert r.stdout.rstrip().splitlines()[-1] == found[0]
	assert not found[0].startswith("0 passed")
	assert re.search(r"^cunit: \d+ tests, 0 failed$", r.stdout, re.M)


@NESTED
def test_skipped_tests_are_listed_with_their_reasons():
	env = dict(os.environ, KVMM_CHECK_NESTED="1",
		   PYTEST_ADDOPTS="-k test_skipped_tests_are_listed_with_their_reasons")
	r = subprocess.run([str(ROOT / "python" / "check.sh"), str(objtree()), "", "/bin/false",
			    "-s", "python"], capture_output=True, text=True, timeout=600, env=env)
	assert r.returncode == 0, r.stdout[-2000:]
	assert re.search(r"^SKIPPED \[1\] test_check\.py:\d+: inside a check\.sh that a test "
			 r"started$", r.stdout, re.M), r.stdout[-2000:]
	assert r.stdout.rstrip().splitlines()[-1] == "0 passed, 0 failed"


def test_one_compiler_per_output_tree(tmp_path):
	"""A compiler given once is the output tree's until another is given:
	a sub-make (make run's, make check's: under -R, with no built-in CC)
	and a plain make (pip's make lib) record the same flags, so switching
	between them rebuilds nothing."""
	o = tmp_path / "o"
	flags = o / ".flags"

	# as a user types it: not the variables of the make check running us
	env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}

	def make(*args):
		r = subprocess.run(["make", "-s", "-C", str(ROOT), f"O={o}", *args, str(flags)],
				   capture_output=True, text=True, timeout=300, env=env)
		assert r.returncode == 0, r.stdout + r.stderr
		return flags.read_text()

	assert make().startswith("cc ")				# the default
	assert (o / "toolchain.mk").read_text() == "KVMM_CC := cc\n"
	assert make("-R") == make()				# a sub-make agrees
	with_gcc = make("CC=gcc")
	assert with_gcc.startswith("gcc ")
	assert (o / "toolchain.mk").read_text() == "KVMM_CC := gcc\n"
	assert make() == with_gcc				# remembered
	assert make("-R") == with_gcc


@NESTED
@pytest.mark.parametrize("stub, want", [
	("echo 'make: install refused' >&2; exit 1", "make: install refused"),
	("exit 0", "examples: make install did not install LICENSE"),
])
def test_examples_count_a_broken_install(tmp_path, stub, want):
	"""An install that fails, or that leaves out what it must carry, is a
	failure in the closing count, never a silent pass."""
	(tmp_path / "make").write_text(f"#!/bin/sh\n{stub}\n")
	(tmp_path / "make").chmod(0o755)
	env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
	r = subprocess.run([str(ROOT / "python" / "check.sh"), str(objtree()), "", "/bin/false",
			    "-s", "examples"], capture_output=True, text=True, timeout=600, env=env)
	assert r.returncode != 0
	assert want in r.stdout
	last = r.stdout.rstrip().splitlines()[-1]
	assert SUMMARY.fullmatch(last) and not last.endswith(" 0 failed"), last
