# SPDX-License-Identifier: MIT
"""kvmm._radix, the C methods of the SGLang radix cache, misused directly.

Its Radix is made by kvmm.sglang.KvmmRadixCache (whose behaviour the
SGLang engine suite checks, tests/engines/test_kvmm_sglang_radix.py);
these make it, and its Node, the base of kvmm.FrameNode, by hand and
wrongly: every mistake is an exception, never a crash.  Each runs in a
child interpreter, so that a segfault fails the test instead of ending
the run.
"""
import kvmm
from kvmm._kvmm import ffi
from kvmm._radix import Node, Radix

from test_misuse import run_child

# A stand-in for a KvmmRadixCache with what Radix() reads of one, over a
# real struct kvmm_py_radix (its fields as reset() sets them, no context:
# none of these reaches a C call).
FAKE = """
	from types import SimpleNamespace
	from kvmm._kvmm import ffi
	from kvmm._radix import Node, Radix

	class Buf:
		def __init__(self, n):
			self.mem = ffi.new("int64_t[]", n)
		def data_ptr(self):
			return int(ffi.cast("uintptr_t", self.mem))
		def __len__(self):
			return len(self.mem)

	class Frame(Node):
		__slots__ = ()

	class Result(tuple):
		pass

	r = ffi.new("struct kvmm_py_radix *")
	r.page_size, r.page_shift, r.max_frames = 4, 2, 8
	cache = SimpleNamespace(_ns={}, _page_slots={}, _spare={}, _free_now=None, _alloc=None,
				_receipt=None, _empty=None, _spare_buf=Buf(32), _out=None,
				kv_events=None, _pages=0, _prepends=0, _on_cpu=1, disable=False,
				_ctx=SimpleNamespace(_serial=1))
	def slow(*args, **kwargs):
		return ("slow", len(args))
	env = dict(node_type=Frame, radix_key=SimpleNamespace, match_result=Result, match_rest=None,
		   tree_lock=tuple, evict_result=tuple, empty=None, empty_kw={},
		   match_prefix=slow, lock=slow, path_device_indices=slow, checkpoint=slow,
		   free_kv_row=slow, unlock=slow, evict=slow)
	def refused(exc, fn, *args, **kwargs):
		try:
			fn(*args, **kwargs)
		except exc as e:
			return str(e)
		raise AssertionError(f"{fn} did not raise {exc.__name__}")
"""


def test_radix_of_the_wrong_arguments_is_refused():
	"""Not a struct kvmm_py_radix *, a NULL one, an environment missing a
	name or of the wrong types, a cache missing an attribute, a page size
	not a power of two, a spare buffer too short, a second __init__."""
	out = run_child(FAKE + """
	refused(TypeError, Radix)
	refused(TypeError, Radix, cache, 1, env)
	refused(TypeError, Radix, cache, ffi.new("int *"), env)
	refused(TypeError, Radix, cache, r, [])
	refused(ValueError, Radix, cache, ffi.cast("struct kvmm_py_radix *", 0), env)
	for name in env:
		refused(KeyError, Radix, cache, r, {k: v for k, v in env.items() if k != name})
	for name, bad in (("node_type", int), ("node_type", 3), ("match_result", list),
			  ("match_result", 3), ("match_rest", [1]), ("empty_kw", ())):
		refused(TypeError, Radix, cache, r, dict(env, **{name: bad}))
	for name in ("_ns", "_spare_buf", "_pages", "kv_events", "_ctx"):
		c = SimpleNamespace(**{k: v for k, v in vars(cache).items() if k != name})
		refused(AttributeError, Radix, c, r, env)
	refused(TypeError, Radix, SimpleNamespace(**dict(vars(cache), _ns=[])), r, env)
	refused(ValueError, Radix, SimpleNamespace(**dict(vars(cache), _pages=2)), r, env)
	refused(ValueError, Radix, SimpleNamespace(**dict(vars(cache), _ctx=SimpleNamespace(
		_serial=-1))), r, env)
	refused(ValueError, Radix, SimpleNamespace(**dict(vars(cache), _spare_buf=Buf(31))), r, env)
	r.page_shift = 1
	refused(ValueError, Radix, cache, r, env)
	r.page_size, r.page_shift = 0, 0
	refused(ValueError, Radix, cache, r, env)
	r.page_size, r.page_shift = 4, 2
	fast = Radix(cache, r, env)
	assert fast.valid
	refused(RuntimeError, fast.__init__, cache, r, env)
	assert fast.valid
	print("refused")
	""")
	assert "refused" in out


def test_methods_of_an_unmade_radix_raise():
	"""A Radix never initialised, or whose __init__ failed, raises on each
	method instead of reading what it does not hold."""
	out = run_child(FAKE + """
	failed = Radix.__new__(Radix)
	refused(TypeError, failed.__init__, cache, r, dict(env, node_type=int))
	for fast in (Radix.__new__(Radix), failed):
		for name in ("match_prefix", "lock", "unlock", "path_device_indices", "evict"):
			assert "not initialised" in refused(RuntimeError, getattr(fast, name), None)
		refused(RuntimeError, fast.checkpoint, None, up_to=1)
		refused(RuntimeError, fast.checkpoint)
		refused(RuntimeError, fast.free_kv_row, None, [])
		refused(RuntimeError, fast.free_kv_row, None)
		assert not fast.valid
		fast._invalidate()
	print("raised")
	""")
	assert "raised" in out


def test_a_disabled_or_invalidated_radix_hands_calls_to_python():
	"""What the C methods do not take goes to the class's method with the
	cache first: a disabled cache, one whose context was reset, arguments
	of another shape."""
	out = run_child(FAKE + """
	fast = Radix(cache, r, env)
	cache.disable = True
	for name in ("match_prefix", "lock", "unlock", "path_device_indices", "evict"):
		assert getattr(fast, name)(object()) == ("slow", 2), name
	assert fast.checkpoint(object(), up_to=3) == ("slow", 2)
	assert fast.free_kv_row(object(), []) == ("slow", 3)
	cache.disable = False
	assert fast.checkpoint(object()) == ("slow", 2)		# no up_to
	assert fast.checkpoint(object(), 3) == ("slow", 3)
	assert fast.checkpoint(object(), up_to="3") == ("slow", 2)
	assert fast.lock(object()) == ("slow", 2)		# not a Node
	assert fast.path_device_indices(3) == ("slow", 2)
	assert fast.unlock(None) is None
	fast._invalidate()
	assert not fast.valid
	assert fast.match_prefix(object()) == ("slow", 2)
	print("handed")
	""")
	assert "handed" in out


def test_node_is_a_handle():
	"""Node (FrameNode's base): a root's handle when made, its id and root
	flag read from the handle, _h a struct kvmm_fnode * over it that a cffi
	call fills in; FrameNode(h) copies a cdata handle; equal and hashable
	by (node, id)."""
	n = kvmm.FrameNode()
	assert n.is_root and n.id == 0 and n._key() == (0, 0) and repr(n) == "FrameNode(root)"
	n._h.id = 7
	n._h.node = ffi.cast("void *", 4096)
	assert not n.is_root and n.id == 7 and n._key() == (4096, 7)
	m = kvmm.FrameNode(n._h)
	assert m == n and hash(m) == hash(n) and m is not n and repr(m) == "FrameNode(id=7)"
	assert isinstance(n, Node) and int(ffi.cast("uintptr_t", n._h)) == n._addr
	assert kvmm.FrameNode() != n and kvmm.FrameNode() == kvmm.FrameNode()
	import weakref
	assert weakref.ref(n)() is n
	assert Node().is_root and isinstance(Radix, type)


def test_a_node_of_another_context_goes_to_python():
	"""A Node carries the serial of the context that named it (_owner, 0
	for none: a root's handle); the C methods hand one of another serial
	to the class's method without reading the node its handle names (an
	address that is no node here: read, it would fault)."""
	out = run_child(FAKE + """
	import kvmm
	fast = Radix(cache, r, env)
	n = kvmm.FrameNode()
	assert n._owner == 0
	n._h.node = ffi.cast("void *", 4096)
	n._h.id = 7
	n._owner = 2
	assert n._owner == 2
	assert fast.lock(n) == ("slow", 2)
	assert fast.unlock(SimpleNamespace(node=n)) == ("slow", 2)
	assert fast.path_device_indices(n) == ("slow", 2)
	refused(OverflowError, setattr, n, "_owner", -1)
	refused(TypeError, setattr, n, "_owner", "1")
	refused(AttributeError, delattr, n, "_owner")
	assert n._owner == 2
	print("handed")
	""")
	assert "handed" in out
