# SPDX-License-Identifier: MIT
"""kvmmd.py - start a kvmmd from the build tree for a test, in another process."""
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

OBJTREE = Path(os.environ.get("KVMM_O", Path(__file__).resolve().parents[2] / "build"))
KVMMD = OBJTREE / "bin" / "kvmmd"


def answers(sock: Path) -> bool:
	"""Whether a server listens at @sock."""
	with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
		try:
			s.connect(str(sock))
		except OSError:
			return False
	return True


@contextlib.contextmanager
def running(sock: Path, args: List[str]) -> Iterator[Tuple[subprocess.Popen, str]]:
	"""kvmmd --socket @sock @args while the block runs: (its process, the socket).

	Skips the test when kvmmd is not built; stops it with SIGTERM after.
	"""
	if not KVMMD.exists():
		pytest.skip(f"no {KVMMD}: build the tools first")
	proc = subprocess.Popen([str(KVMMD), "--socket", str(sock)] + args,
				stdout=subprocess.DEVNULL)
	try:
		deadline = time.monotonic() + 10
		# the socket's file appears at bind(), a moment before listen(): wait
		# until it answers, or a loaded machine reads ECONNREFUSED
		while not answers(sock) and proc.poll() is None and time.monotonic() < deadline:
			time.sleep(0.02)
		assert answers(sock), "kvmmd did not start"
		yield proc, str(sock)
	finally:
		if proc.poll() is None:
			proc.send_signal(signal.SIGTERM)
			proc.wait(10)
