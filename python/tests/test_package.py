# SPDX-License-Identifier: MIT
"""What the installed distribution carries beside the code."""
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_distribution_carries_the_licence():
	dist = metadata.distribution("kvmm")
	files = [f for f in dist.files or () if f.name == "LICENSE"]
	assert files, "no LICENSE in the installed kvmm distribution"
	text = files[0].locate().read_text()
	assert text == (ROOT / "LICENSE").read_text()
	assert text.startswith("MIT License")
