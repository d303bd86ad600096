# SPDX-License-Identifier: MIT
"""Exceptions: every failed kvmm call raises an OSError subclass.

The C library returns a negative errno and changes nothing; the binding
raises :class:`Error` (an :class:`OSError`) carrying that errno, the name of
the call and whatever the library logged during it.  Where Python has its
own subclass for an errno (``ENOENT`` is :class:`FileNotFoundError`,
``EEXIST`` :class:`FileExistsError`, ``EPERM`` :class:`PermissionError`,
``ETIMEDOUT`` :class:`TimeoutError` ...) the exception is also an instance
of it, so both ``except kvmm.Error`` and ``except FileNotFoundError`` work.
"""
import errno as _errno
import os
from typing import Dict, Optional, Sequence, Type


class Error(OSError):
	"""Base of every exception the kvmm binding raises for a C error."""


class InvalidArgument(Error):
	"""EINVAL: a bad argument, an unknown or closed sequence, a bad length."""


class NoSpace(Error):
	"""ENOSPC: no pages even after reclaiming everything evictable."""


class Busy(Error):
	"""EBUSY: every page-table row in use, a file in use, live views."""


class OutOfMemory(Error, MemoryError):
	"""ENOMEM: the library could not allocate metadata."""


for _cls in (Error, InvalidArgument, NoSpace, Busy, OutOfMemory):
	_cls.__module__ = "kvmm"

_OWN: Dict[int, Type[Error]] = {
	_errno.EINVAL: InvalidArgument,
	_errno.ENOSPC: NoSpace,
	_errno.EBUSY: Busy,
	_errno.ENOMEM: OutOfMemory,
}

# Python's own OSError subclasses, by errno, as OSError(errno, ...) picks them.
_BUILTIN = {
	_errno.ENOENT: FileNotFoundError,
	_errno.EEXIST: FileExistsError,
	_errno.EPERM: PermissionError,
	_errno.EACCES: PermissionError,
	_errno.ETIMEDOUT: TimeoutError,
	_errno.ECONNRESET: ConnectionResetError,
	_errno.ECONNREFUSED: ConnectionRefusedError,
	_errno.EPIPE: BrokenPipeError,
	_errno.EINTR: InterruptedError,
	_errno.EAGAIN: BlockingIOError,
	_errno.ENOTDIR: NotADirectoryError,
	_errno.EISDIR: IsADirectoryError,
}
_cache: Dict[int, Type[Error]] = {}


def error_class(err: int) -> Type[Error]:
	"""Return the exception class raised for positive errno @err."""
	cls = _OWN.get(err) or _cache.get(err)
	if cls:
		return cls
	builtin = _BUILTIN.get(err)
	if builtin is None:
		return Error
	cls = type(builtin.__name__.replace("Error", "") + "Error", (Error, builtin),
		   {"__doc__": f"{_errno.errorcode[err]}: kvmm.Error and {builtin.__name__}."})
	cls.__module__ = "kvmm"
	_cache[err] = cls
	return cls


def make_error(ret: int, call: str, logged: Sequence[str] = (),
	       filename: Optional[str] = None) -> Error:
	"""Build the exception for negative errno @ret returned by C function @call."""
	err = -ret
	msg = f"{call}: {os.strerror(err)}"
	if logged:
		msg += " (" + "; ".join(line.rstrip() for line in logged) + ")"
	if filename is not None:
		return error_class(err)(err, msg, filename)
	return error_class(err)(err, msg)
