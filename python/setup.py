# SPDX-License-Identifier: MIT
"""setup.py - builds libkvmm.a with the tree's Makefile, then the extensions.

``pip install ./python`` from a clone of the repository runs ``make lib``
in the repository root (the parent of this directory) and links the
extension with the static library, so nothing of the build tree is needed
at run time.  KVMM_O names another make output tree (default: build).
Beside the cffi extension (kvmm._kvmm) a small C-API one, kvmm._radix
(csrc/radix_module.c): the SGLang radix cache's hot methods, calling the
cffi extension's functions (it links no library of its own).
"""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build_ffi import OBJTREE, ROOT  # noqa: E402


def lib_libs():
	"""Return the libraries libkvmm.a needs, from the probed config.mk."""
	libs = []
	config = (OBJTREE / "config.mk").read_text()
	for flag, lib in (("CONFIG_KVMM_LIBURING", "uring"), ("CONFIG_KVMM_LIBNUMA", "numa"),
			  ("CONFIG_KVMM_HIREDIS", "hiredis"), ("CONFIG_KVMM_KVEVENTS", "zmq"),
			  ("CONFIG_KVMM_KVEVENTS", "msgpackc"), ("CONFIG_KVMM_KVEVENTS", "crypto")):
		if f"{flag} := y" in config:
			libs.append(lib)
	return libs


class BuildWithLib(build_ext):
	"""build_ext that first builds libkvmm.a with make."""

	def run(self):
		if not (ROOT / "Makefile").exists():
			sys.exit(f"kvmm: {ROOT} is not a kvmm source tree; install from a clone")
		jobs = os.environ.get("KVMM_MAKE_JOBS", "2")
		subprocess.check_call(["make", "-C", str(ROOT), f"-j{jobs}", f"O={OBJTREE}", "lib"])
		for ext in self.extensions:
			if ext.name == "kvmm._kvmm":
				ext.libraries = lib_libs() + list(ext.libraries)
		super().run()


# kvmm._radix uses the stable ABI of 3.9 (Py_LIMITED_API in its source).
RADIX = Extension("kvmm._radix", sources=["csrc/radix_module.c"],
		  include_dirs=[str(ROOT / "include"), str(ROOT / "uapi"), str(HERE / "csrc")],
		  depends=[str(HERE / "csrc" / "radix.h"), str(ROOT / "include" / "libkvmm.h")],
		  extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
		  py_limited_api=True)

# cffi builds the extension against the stable ABI (_kvmm.abi3.so); tag the
# wheel so, and one build serves every CPython from 3.9 on.  setuptools'
# build directory lives in the make output tree: with one shared python/build,
# an extension linked with another tree's libkvmm.a (make check's, at DEBUG=3)
# looked up to date and was installed instead of relinking.
setup(ext_modules=[RADIX], cffi_modules=["build_ffi.py:ffibuilder"],
      cmdclass={"build_ext": BuildWithLib},
      options={"bdist_wheel": {"py_limited_api": "cp39"},
	       "build": {"build_base": str(OBJTREE / "python")}})
