// SPDX-License-Identifier: MIT
/*
 * python/csrc/radix_module.c - kvmm._radix: KvmmRadixCache's hot methods in C.
 *
 * Each SGLang scheduler call of kvmm.sglang.KvmmRadixCache was already one
 * call into csrc/radix.c, but the Python around it (reading the request's
 * fields, checking types, making the node, the result and the tensors)
 * cost as much again, and more in a scheduler whose own torch work keeps
 * the interpreter's code out of the caches.  Here those bodies are C:
 * struct radix holds what a KvmmRadixCache's methods read on every call
 * (its scratch struct, the classes it answers with, its allocator's free)
 * and its methods are bound onto the cache instance, so SGLang's call of
 * cache.match_prefix() enters C with no Python frame.
 *
 * Only the common shape is done here: keys of array('q'), a request table
 * that is an int32 CPU tensor, no KV events, SGLang's own CPU allocator.
 * Anything else (another type, an odd argument, events on, a device
 * table) is handed whole, before anything changed, to the Python method
 * of the cache's class, which keeps the complete behaviour and raises its
 * errors; so does a cache whose context was reset (the struct is
 * invalidated first).  The csrc/radix.c functions are the cffi module's
 * (kvmm._kvmm), called through the addresses it exports, so one copy of
 * libkvmm serves the process.
 *
 * struct node (kvmm._radix.Node) is the base of kvmm.FrameNode: a tree
 * node's handle kept inline, so that a match or a checkpoint fills it
 * without allocating a cffi object beside it.
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "radix.h"

/* csrc/radix.c's entry points and kvmm_frames_lock(), from kvmm._kvmm */
static struct {
	int (*match)(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids, uint32_t n,
		     struct kvmm_fnode *last);
	int64_t (*path_slots)(struct kvmm_py_radix *r, const struct kvmm_fnode *node,
			      uintptr_t out, uint32_t room);
	void (*slots)(const struct kvmm_py_radix *r, uintptr_t out, int expand);
	int64_t (*evict)(struct kvmm_py_radix *r, uint32_t nr_pages, int reverse,
			 uintptr_t out, int expand);
	uint32_t (*row_free)(const struct kvmm_py_radix *r, uintptr_t row, uint32_t start,
			     uint32_t end, uintptr_t out, int pages);
	int64_t (*checkpoint)(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids,
			      uint32_t key_len, uint32_t prompt_len, uintptr_t row,
			      uint32_t protected, uint32_t inserted,
			      const struct kvmm_fnode *unlock, struct kvmm_fnode *last, int pages);
	int64_t (*lock)(struct kvmm_ctx *ctx, const struct kvmm_fnode *node, int delta);
} ops;

static const char *const op_names[] = {
	"kvmm_py_radix_match", "kvmm_py_radix_path_slots", "kvmm_py_radix_slots",
	"kvmm_py_radix_evict", "kvmm_py_radix_row_free", "kvmm_py_radix_checkpoint",
	"kvmm_frames_lock",
};

/* attribute and method names, interned once */
enum {
	S_key, S_token_ids, S_limit, S_is_bigram, S_extra_key, S_cache_salt, S_disable,
	S_buffer_info, S_typecode, S_data_ptr, S_kv, S_swa_evict_floor,
	S_full_untruncated_fill_ids, S_origin_input_ids, S_cache_protected_len,
	S_cache_inserted_len, S_req_pool_idx, S_req_to_token_pool, S_req_to_token, S_lock,
	S_node, S_last_node, S_kv_events, S_enabled, S_num_tokens, S_need_sort,
	S_component_evicted_seqlens, S_raise, S_row, S_rt_ok, S_rt_rows, S_rt_len,
	S_spare_view, S_own_slots, S_ns_tag, S_lock_ref, S_free, S_up_to, NR_S
};

static const char *const s_names[NR_S] = {
	[S_key] = "key", [S_token_ids] = "token_ids", [S_limit] = "limit",
	[S_is_bigram] = "is_bigram", [S_extra_key] = "extra_key", [S_cache_salt] = "cache_salt",
	[S_disable] = "disable", [S_buffer_info] = "buffer_info", [S_typecode] = "typecode",
	[S_data_ptr] = "data_ptr", [S_kv] = "kv", [S_swa_evict_floor] = "swa_evict_floor",
	[S_full_untruncated_fill_ids] = "full_untruncated_fill_ids",
	[S_origin_input_ids] = "origin_input_ids", [S_cache_protected_len] = "cache_protected_len",
	[S_cache_inserted_len] = "cache_inserted_len", [S_req_pool_idx] = "req_pool_idx",
	[S_req_to_token_pool] = "req_to_token_pool", [S_req_to_token] = "req_to_token",
	[S_lock] = "lock", [S_node] = "node", [S_last_node] = "last_node",
	[S_kv_events] = "kv_events", [S_enabled] = "enabled", [S_num_tokens] = "num_tokens",
	[S_need_sort] = "need_sort", [S_component_evicted_seqlens] = "component_evicted_seqlens",
	[S_raise] = "_raise", [S_row] = "_row", [S_rt_ok] = "_rt_ok", [S_rt_rows] = "_rt_rows",
	[S_rt_len] = "_rt_len", [S_spare_view] = "_spare_view", [S_own_slots] = "_own_slots",
	[S_ns_tag] = "_ns_tag", [S_lock_ref] = "_lock_ref", [S_free] = "_free", [S_up_to] = "up_to",
};

static PyObject *s[NR_S];
static PyObject *array_type;	/* array.array */
static PyTypeObject *node_type;	/* kvmm._radix.Node */

/*
 * What struct radix keeps a reference to, read from the cache (and its
 * module) when it is made: the objects its methods read or call.
 */
enum {
	O_CACHE,	/* the KvmmRadixCache */
	O_R,		/* its cffi struct kvmm_py_radix (kept alive) */
	O_NS,		/* _ns: namespace by (extra_key, cache_salt) */
	O_PAGE_SLOTS,	/* _page_slots */
	O_SPARE,	/* _spare: views of _spare_buf by length */
	O_FREE_NOW,	/* _free_now: the allocator's free_page_ids, or None */
	O_ALLOC,	/* _alloc */
	O_RECEIPT,	/* _receipt */
	O_EMPTY,	/* _empty: the empty int64 tensor */
	O_SPARE_BUF,	/* _spare_buf */
	O_OUT_BUF,	/* _out (r->out) */
	O_KV_EVENTS,	/* kv_events */
	O_NODE_TYPE,	/* FrameNode, a subclass of Node */
	O_RADIX_KEY,	/* RadixKey */
	O_MATCH_RESULT,	/* MatchResult */
	O_MATCH_REST,	/* its defaults after the first four fields, or None */
	O_TREE_LOCK,	/* TreeLock (or a function making one) */
	O_EVICT_RESULT,	/* EvictResult (or a function making one) */
	O_EMPTY_FN,	/* torch.empty */
	O_EMPTY_KW,	/* {"dtype": torch.int64} */
	O_SLOW_MATCH,	/* the class's own methods, for what C does not do */
	O_SLOW_LOCK,
	O_SLOW_PATH,
	O_SLOW_CHECKPOINT,
	O_SLOW_FREE_KV_ROW,
	O_SLOW_UNLOCK,
	O_SLOW_EVICT,
	O_MATCHED,	/* the node the last match here returned, or NULL */
	O_RT,		/* the req_to_token tensor rt_* describe, or NULL */
	NR_O
};

/* the keys of the dict Radix() takes, for the O_* from O_NODE_TYPE on */
static const char *const env_names[] = {
	"node_type", "radix_key", "match_result", "match_rest", "tree_lock", "evict_result",
	"empty", "empty_kw", "match_prefix", "lock", "path_device_indices", "checkpoint",
	"free_kv_row", "unlock", "evict",
};

/* the cache's attributes, for O_NS up to O_KV_EVENTS */
static const char *const cache_names[] = {
	"_ns", "_page_slots", "_spare", "_free_now", "_alloc", "_receipt", "_empty",
	"_spare_buf", "_out", "kv_events",
};

/*
 * @owner is the serial of the context whose tree @h names a node of
 * (Context._serial; 0 for a root's handle, which names none): a handle
 * names a node by its address and an id that counts from 1 in each
 * context, so one of another context (or of one a reset closed, whose
 * memory the next context's nodes may reuse) could name a live node of
 * this one, or memory no longer a node.  Such a node is refused before
 * the library sees it.
 */
struct node {
	PyObject_HEAD
	struct kvmm_fnode h;
	unsigned long long owner;
};

struct radix {
	PyObject_HEAD
	PyObject *o[NR_O];
	struct kvmm_py_radix *r;
	unsigned long long serial;	/* the context's: what its nodes' owner is */
	uint32_t page_size;
	uint32_t page_shift;
	uint32_t max_frames;
	int pages;		/* _pages: free page ids, not slots */
	int prepends;		/* _prepends */
	int on_cpu;
	int valid;		/* cleared by _invalidate() before the context closes */
	uint32_t matched_len;
	uintptr_t spare_ptr;
	Py_ssize_t spare_len;
	int rt_ok;
	Py_ssize_t rt_rows;
	Py_ssize_t rt_len;
};

#define SLOW_ARGS(self, slot, ...) \
	PyObject_CallFunctionObjArgs((self)->o[slot], (self)->o[O_CACHE], __VA_ARGS__, NULL)

/* the class's method @slot called with the cache and @args, @kwargs */
static PyObject *slow_call(struct radix *self, int slot, PyObject *args, PyObject *kwargs)
{
	Py_ssize_t i, n = PyTuple_Size(args);
	PyObject *all = PyTuple_New(n + 1), *res;

	if (!all)
		return NULL;
	Py_INCREF(self->o[O_CACHE]);
	PyTuple_SetItem(all, 0, self->o[O_CACHE]);
	for (i = 0; i < n; i++) {
		PyObject *a = PyTuple_GetItem(args, i);

		Py_INCREF(a);
		PyTuple_SetItem(all, i + 1, a);
	}
	res = PyObject_Call(self->o[slot], all, kwargs);
	Py_DECREF(all);
	return res;
}

/* ---- small helpers ---- */

/* @o's attribute @name is truthy: 1, 0, or -1 with an exception set */
static int attr_true(PyObject *o, int name)
{
	PyObject *v = PyObject_GetAttr(o, s[name]);
	int ret;

	if (!v)
		return -1;
	ret = PyObject_IsTrue(v);
	Py_DECREF(v);
	return ret;
}

/* @o's attribute @name as an integer in [@lo, @hi]: 0, 1 when it is not one
 * (or is missing), -1 with an exception set */
static int attr_int(PyObject *o, int name, long long lo, long long hi, long long *out)
{
	PyObject *v = PyObject_GetAttr(o, s[name]);
	int overflow;

	if (!v) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
		return 1;
	}
	if (!PyLong_Check(v)) {
		Py_DECREF(v);
		return 1;
	}
	*out = PyLong_AsLongLongAndOverflow(v, &overflow);
	Py_DECREF(v);
	if (*out == -1 && PyErr_Occurred())
		return -1;
	return overflow || *out < lo || *out > hi;
}

static int set_int(PyObject *o, int name, long long v)
{
	PyObject *n = PyLong_FromLongLong(v);
	int ret;

	if (!n)
		return -1;
	ret = PyObject_SetAttr(o, s[name], n);
	Py_DECREF(n);
	return ret;
}

/* a tensor's data_ptr(), or 0 with an exception set */
static uintptr_t data_ptr(PyObject *t)
{
	PyObject *p = PyObject_CallMethodObjArgs(t, s[S_data_ptr], NULL);
	uintptr_t ret;

	if (!p)
		return 0;
	ret = (uintptr_t)PyLong_AsVoidPtr(p);
	Py_DECREF(p);
	if (!ret && !PyErr_Occurred())
		PyErr_SetString(PyExc_RuntimeError, "kvmm radix cache: a tensor without memory");
	return ret;
}

/* a new int64 tensor of @n entries, and its memory at *@ptr */
static PyObject *empty_i64(struct radix *self, Py_ssize_t n, uintptr_t *ptr)
{
	PyObject *args = Py_BuildValue("(n)", n), *t;

	if (!args)
		return NULL;
	t = PyObject_Call(self->o[O_EMPTY_FN], args, self->o[O_EMPTY_KW]);
	Py_DECREF(args);
	if (t && ptr && !(*ptr = data_ptr(t)))
		Py_CLEAR(t);
	return t;
}

/*
 * @ids's buffer when it is an array('q') (what SGLang's keys and requests
 * hold): 1 with *@addr and *@n, 0 for anything else, -1 with an exception.
 */
static int ids_buffer(PyObject *ids, uintptr_t *addr, Py_ssize_t *n)
{
	PyObject *tc, *info;
	int ret;

	if ((PyObject *)Py_TYPE(ids) != array_type)
		return 0;
	tc = PyObject_GetAttr(ids, s[S_typecode]);
	if (!tc)
		return -1;
	ret = PyUnicode_CompareWithASCIIString(tc, "q") == 0;
	Py_DECREF(tc);
	if (!ret)
		return 0;
	info = PyObject_CallMethodObjArgs(ids, s[S_buffer_info], NULL);
	if (!info)
		return -1;
	ret = PyTuple_Check(info) && PyTuple_Size(info) == 2;
	if (ret) {
		*addr = (uintptr_t)PyLong_AsVoidPtr(PyTuple_GetItem(info, 0));
		*n = PyLong_AsSsize_t(PyTuple_GetItem(info, 1));
		if (PyErr_Occurred())
			ret = -1;
	}
	Py_DECREF(info);
	return ret;
}

/*
 * @ids's buffer read again, and the struct checked valid, just before a C
 * call: what came before it may have run Python code (a key's __hash__, an
 * attribute's getter, a finalizer the collector ran under an allocation)
 * that resized the array (freeing the memory its address named) or reset
 * the cache (closing the context and freeing the scratch @r names).  The
 * array's buffer_info() allocates its tuple before it reads the address,
 * so nothing runs between this and the call.  0 with *@addr and *@n (at
 * least @min of them), 1 for the Python method (nothing changed yet), -1
 * with an exception set.
 */
static int ids_again(struct radix *self, PyObject *ids, Py_ssize_t min, uintptr_t *addr,
		     Py_ssize_t *n)
{
	int ret = ids_buffer(ids, addr, n);

	if (ret <= 0)
		return ret < 0 ? -1 : 1;
	return !self->valid || *n < min || *n > UINT32_MAX;
}

/* the namespace of (@extra, @salt), made when new (the cache's _ns_tag()):
 * >= 0, or -1 with an exception set */
static long long ns_of(struct radix *self, PyObject *extra, PyObject *salt)
{
	PyObject *tag = PyTuple_Pack(2, extra, salt), *v;
	long long ns = -1;

	if (!tag)
		return -1;
	v = PyDict_GetItemWithError(self->o[O_NS], tag);
	if (v) {
		Py_INCREF(v);
	} else if (!PyErr_Occurred()) {
		v = PyObject_CallMethodObjArgs(self->o[O_CACHE], s[S_ns_tag], tag, NULL);
	}
	Py_DECREF(tag);
	if (!v)
		return -1;
	ns = PyLong_AsLongLong(v);
	Py_DECREF(v);
	if (ns == -1 && PyErr_Occurred())
		return -1;
	if (ns < 0 || ns > UINT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "kvmm radix cache: namespace %lld", ns);
		return -1;
	}
	return ns;
}

static struct node *node_new(struct radix *self)
{
	PyTypeObject *tp = (PyTypeObject *)self->o[O_NODE_TYPE];
	allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
	struct node *n = (struct node *)alloc(tp, 0);	/* a root's handle: zeroed */

	if (n)
		n->owner = self->serial;
	return n;
}

/* @o is a Node of this cache's context (or a root's handle) */
static int is_node(struct radix *self, PyObject *o)
{
	struct node *n = (struct node *)o;

	return PyObject_TypeCheck(o, node_type) && (!n->h.node || n->owner == self->serial);
}

/* the cache's _raise(@ret, @call): raises as the Python methods do */
static int raise_ret(struct radix *self, int64_t ret, const char *call)
{
	PyObject *r = PyObject_CallMethod(self->o[O_CACHE], "_raise", "Ls", (long long)ret, call);

	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}

/* the cache is disabled, or this struct outlived its context: 1, 0, -1
 * (valid read last: reading disable may run a getter that resets the cache) */
static int go_slow(struct radix *self)
{
	int ret;

	if (!self->o[O_CACHE]) {
		PyErr_SetString(PyExc_RuntimeError, "kvmm._radix.Radix: not initialised");
		return -1;
	}
	ret = attr_true(self->o[O_CACHE], S_disable);
	return ret ? ret : !self->valid;
}

/* kv_events.enabled, or a page with slots of its own: 1, 0, -1 */
static int with_extras(struct radix *self)
{
	int ret = attr_true(self->o[O_KV_EVENTS], S_enabled);

	if (ret)
		return ret;
	return PyDict_Size(self->o[O_PAGE_SLOTS]) > 0;
}

/* the allocator copies what it frees before it returns: need_sort is False */
static int alloc_copies(struct radix *self)
{
	PyObject *v = PyObject_GetAttr(self->o[O_ALLOC], s[S_need_sort]);
	int ret;

	if (!v) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
		return 0;
	}
	ret = v == Py_False;
	Py_DECREF(v);
	return ret;
}

/* _spare_buf's first @n entries, a view kept in _spare (_spare_view()) */
static PyObject *spare_view(struct radix *self, Py_ssize_t n)
{
	PyObject *key = PyLong_FromSsize_t(n), *v;

	if (!key)
		return NULL;
	v = PyDict_GetItemWithError(self->o[O_SPARE], key);
	if (v) {
		Py_INCREF(v);
	} else if (!PyErr_Occurred()) {
		v = PyObject_CallMethodObjArgs(self->o[O_CACHE], s[S_spare_view], key, NULL);
	}
	Py_DECREF(key);
	return v;
}

/*
 * The address of req_to_token's row @idx, @n slots long at least, as the
 * cache's _row() finds it (which checks a table it has not seen): > 0,
 * 0 when the caller must take the Python path (a table not an int32 CPU
 * tensor, a row outside it: the Python method raises), -1 with an
 * exception set.
 */
static int row_of(struct radix *self, long long idx, long long n, uintptr_t *row)
{
	PyObject *pool, *rt, *v;
	long long ok, rows, len;
	uintptr_t base;

	pool = PyObject_GetAttr(self->o[O_CACHE], s[S_req_to_token_pool]);
	if (!pool)
		return -1;
	rt = PyObject_GetAttr(pool, s[S_req_to_token]);
	Py_DECREF(pool);
	if (!rt)
		return -1;
	if (rt != self->o[O_RT]) {
		v = PyObject_CallMethod(self->o[O_CACHE], "_row", "LL", idx, n);
		Py_XDECREF(v);
		if (!v || attr_int(self->o[O_CACHE], S_rt_ok, 0, 1, &ok) ||
		    attr_int(self->o[O_CACHE], S_rt_rows, 0, PY_SSIZE_T_MAX, &rows) ||
		    attr_int(self->o[O_CACHE], S_rt_len, 0, UINT32_MAX, &len)) {
			Py_DECREF(rt);
			PyErr_Clear();	/* the Python method raises it again */
			return 0;
		}
		Py_XDECREF(self->o[O_RT]);
		self->o[O_RT] = rt;
		Py_INCREF(rt);
		self->rt_ok = (int)ok;
		self->rt_rows = (Py_ssize_t)rows;
		self->rt_len = (Py_ssize_t)len;
	}
	if (!self->rt_ok || idx < 0 || idx >= self->rt_rows || n > self->rt_len) {
		Py_DECREF(rt);
		return 0;
	}
	base = data_ptr(rt);
	Py_DECREF(rt);
	if (!base)
		return -1;
	*row = base + (uintptr_t)idx * (uintptr_t)self->rt_len * 4;
	return 1;
}

/* give the allocator @t (page ids, or a row's slots from @start) */
static int free_out(struct radix *self, PyObject *t, long long start)
{
	PyObject *r;

	if (self->o[O_FREE_NOW] != Py_None)
		r = PyObject_CallFunctionObjArgs(self->o[O_FREE_NOW], t, NULL);
	else
		r = PyObject_CallMethod(self->o[O_CACHE], "_free", "OL", t, start);
	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}

/* ---- the methods ---- */

static PyObject *radix_match_prefix_one(struct radix *self, PyObject *params)
{
	PyObject *key, *ids = NULL, *v, *extra = NULL, *salt = NULL, *res;
	struct node *node;
	PyTypeObject *tp;
	Py_ssize_t n, len, i;
	long long ns;
	uintptr_t addr;
	int ret, got;

	ret = go_slow(self);
	if (ret)
		goto slow_or_err;
	key = PyObject_GetAttr(params, s[S_key]);
	if (!key)
		goto slow_clear;
	if ((PyObject *)Py_TYPE(key) != self->o[O_RADIX_KEY]) {
		Py_DECREF(key);
		goto slow;
	}
	v = PyObject_GetAttr(key, s[S_limit]);
	ret = v ? (v != Py_None) : -1;
	Py_XDECREF(v);
	if (!ret)
		ret = attr_true(key, S_is_bigram);
	if (!ret) {
		ids = PyObject_GetAttr(key, s[S_token_ids]);
		ret = ids ? ids_buffer(ids, &addr, &n) : -1;
		ret = ret < 0 ? -1 : !ret;
	}
	if (!ret && (n <= 0 || n > UINT32_MAX))
		ret = 1;
	if (!ret) {
		extra = PyObject_GetAttr(key, s[S_extra_key]);
		salt = extra ? PyObject_GetAttr(key, s[S_cache_salt]) : NULL;
		ret = salt ? 0 : -1;
	}
	if (ret) {
		Py_XDECREF(extra);
		Py_XDECREF(ids);
		Py_DECREF(key);
		goto slow_clear;
	}
	ns = ns_of(self, extra, salt);
	Py_DECREF(extra);
	Py_DECREF(salt);
	Py_DECREF(key);
	if (ns < 0) {
		Py_DECREF(ids);
		return NULL;
	}
	node = node_new(self);
	if (!node) {
		Py_DECREF(ids);
		return NULL;
	}
	/* the key's hash, a finalizer: the array resized, the cache reset */
	ret = ids_again(self, ids, 1, &addr, &len);
	n = len < n ? len : n;	/* as the Python method reads it */
	if (ret) {
		Py_DECREF(node);
		Py_DECREF(ids);
		if (ret < 0)
			return NULL;
		goto slow;
	}
	got = ops.match(self->r, (uint32_t)ns, addr, (uint32_t)n, &node->h);
	Py_DECREF(ids);
	if (got < 0 && raise_ret(self, got, "kvmm_frames_match")) {
		Py_DECREF(node);
		return NULL;
	}
	Py_INCREF(node);
	Py_XDECREF(self->o[O_MATCHED]);
	self->o[O_MATCHED] = (PyObject *)node;
	self->matched_len = got > 0 ? (uint32_t)got : 0;
	v = PyLong_FromLong(got);
	if (!v) {
		Py_DECREF(node);
		return NULL;
	}
	if (self->o[O_MATCH_REST] == Py_None) {
		res = PyObject_CallFunctionObjArgs(self->o[O_MATCH_RESULT], v, node, node, node,
						   NULL);
		Py_DECREF(v);
		Py_DECREF(node);
		return res;
	}
	/* the NamedTuple filled in as tuple.__new__ fills it: no Python frame */
	tp = (PyTypeObject *)self->o[O_MATCH_RESULT];
	res = ((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 4 + PyTuple_Size(
								   self->o[O_MATCH_REST]));
	if (!res) {
		Py_DECREF(v);
		Py_DECREF(node);
		return NULL;
	}
	PyTuple_SetItem(res, 0, v);
	Py_INCREF(node);
	Py_INCREF(node);
	PyTuple_SetItem(res, 1, (PyObject *)node);
	PyTuple_SetItem(res, 2, (PyObject *)node);
	PyTuple_SetItem(res, 3, (PyObject *)node);
	for (i = 0; i < PyTuple_Size(self->o[O_MATCH_REST]); i++) {
		v = PyTuple_GetItem(self->o[O_MATCH_REST], i);
		Py_INCREF(v);
		PyTuple_SetItem(res, 4 + i, v);
	}
	return res;
slow_clear:
	if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_AttributeError))
		return NULL;
	PyErr_Clear();
	goto slow;
slow_or_err:
	if (ret < 0)
		return NULL;
slow:
	return SLOW_ARGS(self, O_SLOW_MATCH, params);
}

/* lock() and unlock(): @delta on @node's lock, raising as _lock_ref() does:
 * 0, 1 for the Python method (the cache was reset meanwhile), -1 */
static int lock_node(struct radix *self, PyObject *node, int delta)
{
	PyObject *r;

	if (!self->valid)
		return 1;
	if (ops.lock(self->r->ctx, &((struct node *)node)->h, delta) >= 0)
		return 0;
	r = PyObject_CallMethod(self->o[O_CACHE], "_lock_ref", "Oi", node, delta);
	Py_XDECREF(r);
	return r ? 0 : -1;
}

static PyObject *radix_lock_one(struct radix *self, PyObject *node)
{
	int ret = go_slow(self);

	if (ret < 0)
		return NULL;
	if (!ret)
		ret = is_node(self, node) ? lock_node(self, node, 1) : 1;
	if (ret < 0)
		return NULL;
	if (ret)
		return SLOW_ARGS(self, O_SLOW_LOCK, node);
	return PyObject_CallFunctionObjArgs(self->o[O_TREE_LOCK], node, self->o[O_RECEIPT], NULL);
}

static PyObject *radix_unlock_one(struct radix *self, PyObject *lock)
{
	PyObject *node;
	int ret;

	ret = go_slow(self);
	if (ret < 0 || lock == Py_None)
		return ret < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
	node = ret ? NULL : PyObject_GetAttr(lock, s[S_node]);
	if (!node || !is_node(self, node)) {
		Py_XDECREF(node);
		PyErr_Clear();
		return SLOW_ARGS(self, O_SLOW_UNLOCK, lock);
	}
	ret = lock_node(self, node, -1);
	Py_DECREF(node);
	if (ret < 0)
		return NULL;
	if (ret)
		return SLOW_ARGS(self, O_SLOW_UNLOCK, lock);
	Py_RETURN_NONE;
}

static PyObject *radix_path_device_indices_one(struct radix *self, PyObject *node)
{
	PyObject *out;
	uint32_t room = 0;
	uintptr_t ptr = 0;
	int64_t n;
	int ret = go_slow(self);

	if (ret < 0)
		return NULL;
	if (ret || !self->on_cpu || !is_node(self, node))
		return SLOW_ARGS(self, O_SLOW_PATH, node);
	/* the node the last match returned: its path is as long as the match said */
	if (node == self->o[O_MATCHED])
		room = self->matched_len;
	if (room) {
		out = empty_i64(self, room, &ptr);
		if (!out)
			return NULL;
	} else {
		out = self->o[O_EMPTY];
		Py_INCREF(out);
	}
	if (!self->valid) {	/* reset by a finalizer under torch.empty() */
		Py_DECREF(out);
		return SLOW_ARGS(self, O_SLOW_PATH, node);
	}
	n = ops.path_slots(self->r, &((struct node *)node)->h, ptr, room);
	if (n <= 0) {
		Py_DECREF(out);
		if (n < 0 && raise_ret(self, n, "kvmm_frames_path"))
			return NULL;
		Py_INCREF(self->o[O_EMPTY]);
		return self->o[O_EMPTY];
	}
	if (n != room) {
		Py_DECREF(out);
		out = empty_i64(self, (Py_ssize_t)n, &ptr);
		if (!out)
			return NULL;
		if (!self->valid) {	/* r->frames freed by a reset */
			Py_DECREF(out);
			return SLOW_ARGS(self, O_SLOW_PATH, node);
		}
		ops.slots(self->r, ptr, 1);
	}
	if (PyDict_Size(self->o[O_PAGE_SLOTS]) > 0) {
		PyObject *r = PyObject_CallMethodObjArgs(self->o[O_CACHE], s[S_own_slots], out, NULL);

		if (!r) {
			Py_DECREF(out);
			return NULL;
		}
		Py_DECREF(r);
	}
	return out;
}

/* what checkpoint() reads of a request, for its one C call */
struct ckpt {
	uintptr_t ids;
	long long key_len, prompt, protected, inserted, idx;
	uintptr_t row;
	PyObject *kv;
	PyObject *old;		/* req.lock's node, or NULL */
	PyObject *ids_obj;
};

/* checkpoint()'s arguments read from @req: 1 when the C path takes them,
 * 0 for the Python method, -1 with an exception set */
static int ckpt_read(struct radix *self, PyObject *req, long long up_to, struct ckpt *c)
{
	long long n, prompt;
	PyObject *v;
	Py_ssize_t len;
	int ret, overflow = 0;

	c->kv = PyObject_GetAttr(req, s[S_kv]);
	if (!c->kv)
		return -1;
	/* getattr(kv, "swa_evict_floor", 0) > 0: the Python method refuses it */
	v = PyObject_GetAttr(c->kv, s[S_swa_evict_floor]);
	if (!v) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
	} else {
		ret = PyLong_Check(v) && PyLong_AsLongLongAndOverflow(v, &overflow) <= 0 &&
		      overflow <= 0;
		Py_DECREF(v);
		if (PyErr_Occurred())
			return -1;
		if (!ret)
			return 0;
	}
	c->ids_obj = PyObject_GetAttr(req, s[S_full_untruncated_fill_ids]);
	if (!c->ids_obj)
		return -1;
	ret = ids_buffer(c->ids_obj, &c->ids, &len);
	if (ret <= 0)
		return ret;
	n = len;
	if (up_to < 0 || up_to > n || up_to > UINT32_MAX)
		return 0;
	c->key_len = up_to - up_to % self->page_size;
	v = PyObject_GetAttr(req, s[S_origin_input_ids]);
	if (!v)
		return -1;
	len = PyObject_Size(v);
	Py_DECREF(v);
	if (len < 0)
		return -1;
	prompt = len;
	c->prompt = prompt >= up_to ? c->key_len : prompt - prompt % self->page_size;
	if (attr_int(c->kv, S_cache_protected_len, 0, UINT32_MAX, &c->protected) ||
	    attr_int(c->kv, S_cache_inserted_len, 0, UINT32_MAX, &c->inserted) ||
	    attr_int(c->kv, S_req_pool_idx, 0, PY_SSIZE_T_MAX, &c->idx))
		return PyErr_Occurred() ? -1 : 0;
	ret = row_of(self, c->idx, c->key_len, &c->row);
	if (ret <= 0)
		return ret;
	v = PyObject_GetAttr(req, s[S_lock]);
	if (!v)
		return -1;
	if (v != Py_None) {
		c->old = PyObject_GetAttr(v, s[S_node]);
		Py_DECREF(v);
		if (!c->old)
			return -1;
		if (!is_node(self, c->old))
			return 0;
	} else {
		Py_DECREF(v);
	}
	return 1;
}

/* the request's lock moved to @last, its lengths to @key_len; raises as
 * the Python method does when the old lock held none (@enolck) */
static PyObject *ckpt_done(struct radix *self, PyObject *req, struct ckpt *c, PyObject *last,
			   int enolck)
{
	PyObject *lock;

	if (c->key_len > c->inserted && set_int(c->kv, S_cache_inserted_len, c->key_len))
		return NULL;
	if (set_int(c->kv, S_cache_protected_len, c->key_len))
		return NULL;
	if (enolck) {
		PyErr_Format(PyExc_ValueError,
			     "kvmm radix cache: unlock of %R, which holds no lock", c->old);
		return NULL;
	}
	lock = PyObject_CallFunctionObjArgs(self->o[O_TREE_LOCK], last, self->o[O_RECEIPT], NULL);
	if (!lock)
		return NULL;
	if (PyObject_SetAttr(req, s[S_lock], lock) ||
	    PyObject_SetAttr(req, s[S_last_node], last)) {
		Py_DECREF(lock);
		return NULL;
	}
	Py_DECREF(lock);
	Py_RETURN_NONE;
}

static PyObject *radix_checkpoint(struct radix *self, PyObject *args, PyObject *kwargs)
{
	struct ckpt c = { 0 };
	PyObject *req, *v, *extra, *salt, *res = NULL;
	struct node *last = NULL;
	long long up_to, ns;
	int64_t ret, dups;
	Py_ssize_t len;
	int overflow;

	overflow = go_slow(self);
	if (overflow)
		goto slow_or_err;
	if (PyTuple_Size(args) != 1 || !kwargs || PyDict_Size(kwargs) != 1)
		goto slow;
	v = PyDict_GetItemWithError(kwargs, s[S_up_to]);
	if (!v || !PyLong_Check(v)) {
		if (PyErr_Occurred())
			return NULL;
		goto slow;
	}
	up_to = PyLong_AsLongLongAndOverflow(v, &overflow);
	if (overflow || (up_to == -1 && PyErr_Occurred())) {
		PyErr_Clear();
		goto slow;
	}
	overflow = with_extras(self);
	if (overflow)
		goto slow_or_err;
	req = PyTuple_GetItem(args, 0);
	overflow = ckpt_read(self, req, up_to, &c);
	if (overflow <= 0)
		goto slow_or_err;
	v = PyObject_GetAttr(req, s[S_cache_salt]);
	salt = v && PyObject_IsTrue(v) == 1 ? v : Py_None;	/* req.cache_salt or None */
	Py_INCREF(salt);
	Py_XDECREF(v);
	extra = PyErr_Occurred() ? NULL : PyObject_GetAttr(req, s[S_extra_key]);
	ns = extra ? ns_of(self, extra, salt) : -1;
	Py_XDECREF(extra);
	Py_DECREF(salt);
	if (ns < 0)
		goto out;
	last = node_new(self);
	if (!last)
		goto out;
	overflow = ids_again(self, c.ids_obj, up_to, &c.ids, &len);
	if (overflow) {
		Py_DECREF(last);
		goto slow_or_err;
	}
	ret = ops.checkpoint(self->r, (uint32_t)ns, c.ids, (uint32_t)c.key_len,
			     (uint32_t)c.prompt, c.row, (uint32_t)c.protected,
			     (uint32_t)c.inserted, c.old ? &((struct node *)c.old)->h : NULL,
			     &last->h, self->pages);
	dups = ret;
	if (ret < 0) {
		if (ret != -ENOLCK) {
			if (raise_ret(self, ret, "kvmm_frames_extend"))
				goto out;
			dups = 0;
		} else {
			dups = self->r->nr_out;
		}
	}
	if (dups) {		/* the row's slots the tree had already */
		uintptr_t ptr;
		PyObject *t = empty_i64(self, (Py_ssize_t)dups, &ptr);

		if (!t)
			goto out;
		memcpy((void *)ptr, self->r->out, (size_t)dups * sizeof(int64_t));
		overflow = free_out(self, t, c.protected);
		Py_DECREF(t);
		if (overflow)
			goto out;
	}
	res = ckpt_done(self, req, &c, (PyObject *)last, ret == -ENOLCK);
out:
	Py_XDECREF(last);
	Py_XDECREF(c.kv);
	Py_XDECREF(c.ids_obj);
	Py_XDECREF(c.old);
	return res;
slow_or_err:
	Py_XDECREF(c.kv);
	Py_XDECREF(c.ids_obj);
	Py_XDECREF(c.old);
	if (overflow < 0)
		return NULL;
slow:
	return slow_call(self, O_SLOW_CHECKPOINT, args, kwargs);
}

/* free_kv_row()'s one range [*@start, *@end): 1, 0 (the Python method), -1 */
static int one_range(PyObject *kv, PyObject *ranges, long long *start, long long *end)
{
	PyObject *r, *a, *b;
	int ret, ov1 = 0, ov2 = 0;

	if (!PyList_Check(ranges) || PyList_Size(ranges) != 1)
		return 0;
	/* not getattr(kv, "component_evicted_seqlens", 1): no sliding-window cursor */
	ret = attr_true(kv, S_component_evicted_seqlens);
	if (ret < 0 && PyErr_ExceptionMatches(PyExc_AttributeError)) {
		PyErr_Clear();
		ret = 1;
	}
	if (ret)
		return ret < 0 ? -1 : 0;
	r = PyList_GetItem(ranges, 0);
	if (!PyTuple_Check(r) || PyTuple_Size(r) != 2)
		return 0;
	a = PyTuple_GetItem(r, 0);
	b = PyTuple_GetItem(r, 1);
	if (!PyLong_Check(a) || !PyLong_Check(b))
		return 0;
	*start = PyLong_AsLongLongAndOverflow(a, &ov1);
	*end = PyLong_AsLongLongAndOverflow(b, &ov2);
	if (PyErr_Occurred())
		return -1;
	return !ov1 && !ov2;
}

static PyObject *radix_free_kv_row(struct radix *self, PyObject *args, PyObject *kwargs)
{
	PyObject *kv, *ranges, *out;
	long long start, end, idx, n;
	uintptr_t row, ptr;
	int ret;

	ret = go_slow(self);
	if (ret < 0)
		return NULL;
	if (ret || (kwargs && PyDict_Size(kwargs)) || PyTuple_Size(args) != 2)
		return slow_call(self, O_SLOW_FREE_KV_ROW, args, kwargs);
	kv = PyTuple_GetItem(args, 0);
	ranges = PyTuple_GetItem(args, 1);
	if (!ret)
		ret = !one_range(kv, ranges, &start, &end);
	if (!ret && 0 <= end && end <= start)
		Py_RETURN_NONE;		/* nothing to free */
	/* an end before the start (a negative one) is the Python method's */
	if (!ret)
		ret = start < 0 || end < start || (start & (self->page_size - 1)) ||
		      end > UINT32_MAX;
	if (!ret)
		ret = attr_int(kv, S_req_pool_idx, 0, PY_SSIZE_T_MAX, &idx);
	if (!ret)
		ret = !row_of(self, idx, end, &row);
	if (ret) {
		if (PyErr_Occurred())
			return NULL;
		return slow_call(self, O_SLOW_FREE_KV_ROW, args, kwargs);
	}
	n = self->pages ? (end - start + self->page_size - 1) >> self->page_shift : end - start;
	ret = n <= self->spare_len && self->o[O_FREE_NOW] != Py_None;
	if (ret)
		ret = alloc_copies(self);
	if (ret < 0)
		return NULL;
	if (ret) {
		out = spare_view(self, (Py_ssize_t)n);
		ptr = self->spare_ptr;
	} else {
		out = empty_i64(self, (Py_ssize_t)n, &ptr);
	}
	if (!out)
		return NULL;
	ops.row_free(self->r, row, (uint32_t)start, (uint32_t)end, ptr, self->pages);
	ret = free_out(self, out, start);
	Py_DECREF(out);
	if (ret)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *radix_evict_one(struct radix *self, PyObject *params)
{
	PyObject *out;
	long long want, pages;
	uint32_t ps = self->page_size;
	int64_t got, n;
	int expand = !self->pages, ret;

	ret = go_slow(self);
	if (!ret)
		ret = with_extras(self);
	if (!ret)
		ret = self->o[O_FREE_NOW] == Py_None;
	if (!ret)
		ret = attr_int(params, S_num_tokens, 1, LLONG_MAX - ps, &want);
	if (!ret)
		ret = !self->valid;	/* num_tokens's getter may reset the cache */
	if (ret) {
		if (PyErr_Occurred())
			return NULL;
		return SLOW_ARGS(self, O_SLOW_EVICT, params);
	}
	pages = (want + ps - 1) / ps;
	if (pages > self->max_frames)
		pages = self->max_frames;
	/* one call: the frames, and their slots (or page ids) at _spare_buf */
	got = ops.evict(self->r, (uint32_t)pages, self->prepends, self->spare_ptr, expand);
	if (got <= 0) {
		if (got < 0 && raise_ret(self, got, "kvmm_frames_evict"))
			return NULL;
		return PyObject_CallFunctionObjArgs(self->o[O_EVICT_RESULT], NULL);
	}
	n = expand ? got * ps : got;
	ret = alloc_copies(self);
	if (ret < 0)
		return NULL;
	if (ret) {
		out = spare_view(self, (Py_ssize_t)n);
	} else {	/* the allocator keeps the tensor: one of its own */
		uintptr_t ptr;

		out = empty_i64(self, (Py_ssize_t)n, &ptr);
		if (out)
			memcpy((void *)ptr, (void *)self->spare_ptr, (size_t)n * sizeof(int64_t));
	}
	if (!out)
		return NULL;
	ret = free_out(self, out, 0);
	Py_DECREF(out);
	if (ret)
		return NULL;
	out = PyLong_FromLongLong(got * ps);
	if (!out)
		return NULL;
	{
		PyObject *res = PyObject_CallFunctionObjArgs(self->o[O_EVICT_RESULT], out, NULL);

		Py_DECREF(out);
		return res;
	}
}

/*
 * The methods SGLang calls with one argument: a call of another shape
 * (a keyword, another count) goes to the Python method, which says what
 * is wrong as it always did.
 */
static PyObject *slow_or_raise(struct radix *self, int slot, PyObject *args, PyObject *kwargs)
{
	if (go_slow(self) < 0)
		return NULL;
	return slow_call(self, slot, args, kwargs);
}

#define RADIX_ONE_ARG(name, slot)							\
static PyObject *radix_##name(struct radix *self, PyObject *args, PyObject *kwargs)	\
{											\
	if (!self->o[O_CACHE] || (kwargs && PyDict_Size(kwargs)) || PyTuple_Size(args) != 1) \
		return slow_or_raise(self, slot, args, kwargs);				\
	return radix_##name##_one(self, PyTuple_GetItem(args, 0));			\
}

RADIX_ONE_ARG(match_prefix, O_SLOW_MATCH)
RADIX_ONE_ARG(lock, O_SLOW_LOCK)
RADIX_ONE_ARG(unlock, O_SLOW_UNLOCK)
RADIX_ONE_ARG(path_device_indices, O_SLOW_PATH)
RADIX_ONE_ARG(evict, O_SLOW_EVICT)

static PyObject *radix_invalidate(struct radix *self, PyObject *unused)
{
	self->valid = 0;
	Py_CLEAR(self->o[O_MATCHED]);
	Py_RETURN_NONE;
}

static PyObject *radix_get_valid(struct radix *self, void *closure)
{
	return PyBool_FromLong(self->valid);
}

/* ---- the type ---- */

/* @obj's int attribute @name into *@out (in [0, @hi]): 0, or -1 raising */
static int init_int(PyObject *obj, const char *name, long long hi, long long *out)
{
	PyObject *v = PyObject_GetAttrString(obj, name);

	if (!v)
		return -1;
	*out = PyLong_AsLongLong(v);
	Py_DECREF(v);
	if (*out == -1 && PyErr_Occurred())
		return -1;
	if (*out < 0 || *out > hi) {
		PyErr_Format(PyExc_ValueError, "kvmm._radix: %s = %lld", name, *out);
		return -1;
	}
	return 0;
}

/* the cache's context's serial (cache._ctx._serial), its nodes' owner */
static int init_serial(struct radix *self, PyObject *cache)
{
	PyObject *ctx = PyObject_GetAttrString(cache, "_ctx");
	long long v;
	int ret;

	if (!ctx)
		return -1;
	ret = init_int(ctx, "_serial", LLONG_MAX, &v);
	Py_DECREF(ctx);
	if (!ret)
		self->serial = (unsigned long long)v;
	return ret;
}

/* the cffi struct's address, checked to be one: the module's ffi.typeof() */
static int init_struct(struct radix *self, PyObject *r)
{
	PyObject *mod, *ffi = NULL, *want = NULL, *got = NULL, *got2, *addr = NULL;
	int ret = -1;

	mod = PyImport_ImportModule("kvmm._kvmm");
	if (!mod)
		return -1;
	ffi = PyObject_GetAttrString(mod, "ffi");
	if (!ffi)
		goto out;
	want = PyObject_CallMethod(ffi, "typeof", "s", "struct kvmm_py_radix *");
	got = want ? PyObject_CallMethod(ffi, "typeof", "O", r) : NULL;
	if (!got)
		goto out;
	if (got != want) {
		PyErr_SetString(PyExc_TypeError, "kvmm._radix.Radix() takes a struct kvmm_py_radix *");
		goto out;
	}
	got2 = PyObject_CallMethod(ffi, "cast", "sO", "uintptr_t", r);
	addr = got2 ? PyNumber_Long(got2) : NULL;
	Py_XDECREF(got2);
	if (!addr)
		goto out;
	if (!addr)
		goto out;
	self->r = PyLong_AsVoidPtr(addr);
	if (!self->r) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "kvmm._radix.Radix() of NULL");
		goto out;
	}
	ret = 0;
out:
	Py_XDECREF(addr);
	Py_XDECREF(got);
	Py_XDECREF(want);
	Py_XDECREF(ffi);
	Py_DECREF(mod);
	return ret;
}

/*
 * Radix(cache, r, env): the fast methods of @cache (a KvmmRadixCache whose
 * reset() made @r, its struct kvmm_py_radix), with @env the classes and
 * functions they use (env_names).  Reads what the cache's methods read of
 * the cache on every call and holds it: made again by each reset().
 */
static int radix_init(PyObject *obj, PyObject *args, PyObject *kwargs)
{
	struct radix *self = (struct radix *)obj;
	PyObject *cache, *r, *env;
	long long v;
	size_t i;

	static_assert(sizeof(env_names) / sizeof(env_names[0]) == O_SLOW_EVICT + 1 - O_NODE_TYPE,
		      "an environment name an entry");
	static_assert(sizeof(cache_names) / sizeof(cache_names[0]) == O_KV_EVENTS + 1 - O_NS,
		      "a cache attribute an entry");
	if (self->o[O_CACHE]) {
		PyErr_SetString(PyExc_RuntimeError, "kvmm._radix.Radix: initialised already");
		return -1;
	}
	if (!PyArg_ParseTuple(args, "OOO!:Radix", &cache, &r, &PyDict_Type, &env))
		return -1;
	if (init_struct(self, r))
		return -1;
	for (i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++) {
		PyObject *e = PyDict_GetItemString(env, env_names[i]);

		if (!e) {
			PyErr_Format(PyExc_KeyError, "kvmm._radix.Radix: no %s", env_names[i]);
			goto fail;
		}
		Py_INCREF(e);
		self->o[O_NODE_TYPE + i] = e;
	}
	for (i = 0; i < sizeof(cache_names) / sizeof(cache_names[0]); i++) {
		self->o[O_NS + i] = PyObject_GetAttrString(cache, cache_names[i]);
		if (!self->o[O_NS + i])
			goto fail;
	}
	if (!PyType_Check(self->o[O_NODE_TYPE]) ||
	    !PyType_IsSubtype((PyTypeObject *)self->o[O_NODE_TYPE], node_type) ||
	    !PyType_Check(self->o[O_MATCH_RESULT]) ||
	    !PyType_IsSubtype((PyTypeObject *)self->o[O_MATCH_RESULT], &PyTuple_Type) ||
	    !(PyType_GetFlags((PyTypeObject *)self->o[O_MATCH_RESULT]) & Py_TPFLAGS_HEAPTYPE) ||
	    (self->o[O_MATCH_REST] != Py_None && !PyTuple_Check(self->o[O_MATCH_REST])) ||
	    !PyType_Check(self->o[O_RADIX_KEY]) || !PyDict_Check(self->o[O_EMPTY_KW]) ||
	    !PyDict_Check(self->o[O_NS]) || !PyDict_Check(self->o[O_PAGE_SLOTS]) ||
	    !PyDict_Check(self->o[O_SPARE])) {
		PyErr_SetString(PyExc_TypeError, "kvmm._radix.Radix: an environment of other types");
		goto fail;
	}
	Py_INCREF(r);
	self->o[O_R] = r;
	Py_INCREF(cache);
	self->o[O_CACHE] = cache;
	/* r's fields are the cache's, set by its reset() */
	self->page_size = self->r->page_size;
	self->page_shift = self->r->page_shift;
	self->max_frames = self->r->max_frames;
	if (!self->page_size || self->page_size & (self->page_size - 1) ||
	    1u << self->page_shift != self->page_size) {
		PyErr_SetString(PyExc_ValueError, "kvmm._radix.Radix: a page size not a power of two");
		goto fail;
	}
	if (init_serial(self, cache))
		goto fail;
	if (init_int(cache, "_pages", 1, &v))
		goto fail;
	self->pages = (int)v;
	if (init_int(cache, "_prepends", 1, &v))
		goto fail;
	self->prepends = (int)v;
	if (init_int(cache, "_on_cpu", 1, &v))
		goto fail;
	self->on_cpu = (int)v;
	/* evict() writes up to max_frames pages' slots at _spare_buf */
	self->spare_len = PyObject_Size(self->o[O_SPARE_BUF]);
	if (self->spare_len < 0)
		goto fail;
	if ((unsigned long long)self->spare_len < (unsigned long long)self->max_frames *
						   self->page_size) {
		PyErr_SetString(PyExc_ValueError, "kvmm._radix.Radix: _spare_buf too short");
		goto fail;
	}
	self->spare_ptr = data_ptr(self->o[O_SPARE_BUF]);
	if (!self->spare_ptr)
		goto fail;
	self->valid = 1;
	return 0;
fail:
	for (i = 0; i < NR_O; i++)
		Py_CLEAR(self->o[i]);
	return -1;
}

static int radix_traverse(PyObject *obj, visitproc visit, void *arg)
{
	struct radix *self = (struct radix *)obj;
	int i;

	Py_VISIT(Py_TYPE(obj));
	for (i = 0; i < NR_O; i++)
		Py_VISIT(self->o[i]);
	return 0;
}

static int radix_clear(PyObject *obj)
{
	struct radix *self = (struct radix *)obj;
	int i;

	self->valid = 0;
	for (i = 0; i < NR_O; i++)
		Py_CLEAR(self->o[i]);
	return 0;
}

static void radix_dealloc(PyObject *obj)
{
	PyTypeObject *tp = Py_TYPE(obj);

	PyObject_GC_UnTrack(obj);
	radix_clear(obj);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(obj);
	Py_DECREF(tp);
}

/* SGLang's calls, each taking what the Python method takes */
#define RADIX_METHOD(name, doc) \
	{ #name, (PyCFunction)(void (*)(void))radix_##name, METH_VARARGS | METH_KEYWORDS, doc }

static PyMethodDef radix_methods[] = {
	RADIX_METHOD(match_prefix, "KvmmRadixCache.match_prefix(params)"),
	RADIX_METHOD(lock, "KvmmRadixCache.lock(node)"),
	RADIX_METHOD(unlock, "KvmmRadixCache.unlock(lock)"),
	RADIX_METHOD(path_device_indices, "KvmmRadixCache.path_device_indices(node)"),
	RADIX_METHOD(checkpoint, "KvmmRadixCache.checkpoint(req, *, up_to)"),
	RADIX_METHOD(free_kv_row, "KvmmRadixCache.free_kv_row(kv, ranges)"),
	RADIX_METHOD(evict, "KvmmRadixCache.evict(params)"),
	{ "_invalidate", (PyCFunction)radix_invalidate, METH_NOARGS,
	  "Hand every later call to the Python methods (the context is closing)." },
	{ NULL }
};

static PyGetSetDef radix_getset[] = {
	{ "valid", (getter)radix_get_valid, NULL, "Whether the C methods run", NULL },
	{ NULL }
};

static PyType_Slot radix_slots[] = {
	{ Py_tp_doc, "The C methods of one KvmmRadixCache (kvmm.sglang)." },
	{ Py_tp_init, radix_init },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_dealloc, radix_dealloc },
	{ Py_tp_traverse, radix_traverse },
	{ Py_tp_clear, radix_clear },
	{ Py_tp_methods, radix_methods },
	{ Py_tp_getset, radix_getset },
	{ 0, NULL }
};

static PyType_Spec radix_spec = {
	.name = "kvmm._radix.Radix",
	.basicsize = sizeof(struct radix),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = radix_slots,
};

/* ---- Node: a tree node's handle, inline ---- */

static PyObject *node_get_addr(PyObject *self, void *closure)
{
	return PyLong_FromVoidPtr(&((struct node *)self)->h);
}

static PyObject *node_get_id(PyObject *self, void *closure)
{
	return PyLong_FromUnsignedLongLong(((struct node *)self)->h.id);
}

static PyObject *node_get_is_root(PyObject *self, void *closure)
{
	return PyBool_FromLong(!((struct node *)self)->h.node);
}

static PyObject *node_get_owner(PyObject *self, void *closure)
{
	return PyLong_FromUnsignedLongLong(((struct node *)self)->owner);
}

static int node_set_owner(PyObject *self, PyObject *v, void *closure)
{
	unsigned long long owner;

	if (!v) {
		PyErr_SetString(PyExc_AttributeError, "kvmm._radix.Node: _owner is not deletable");
		return -1;
	}
	owner = PyLong_AsUnsignedLongLong(v);
	if (owner == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	((struct node *)self)->owner = owner;
	return 0;
}

static PyObject *node_key(PyObject *self, PyObject *unused)
{
	struct node *n = (struct node *)self;

	return Py_BuildValue("(NK)", PyLong_FromVoidPtr(n->h.node),
			     (unsigned long long)n->h.id);
}

static void node_dealloc(PyObject *obj)
{
	PyTypeObject *tp = Py_TYPE(obj);

	((freefunc)PyType_GetSlot(tp, Py_tp_free))(obj);
	Py_DECREF(tp);
}

static PyGetSetDef node_getset[] = {
	{ "_addr", node_get_addr, NULL, "The handle's address (borrowed: valid while the node lives)",
	  NULL },
	{ "id", node_get_id, NULL, "The node's id (0 for a namespace's root)", NULL },
	{ "is_root", node_get_is_root, NULL, "Whether this is a root's handle", NULL },
	{ "_owner", node_get_owner, node_set_owner,
	  "The serial of the context whose node this names (0: none's)", NULL },
	{ NULL }
};

static PyMethodDef node_methods[] = {
	{ "_key", node_key, METH_NOARGS, "(the node's address, its id)" },
	{ NULL }
};

static PyType_Slot node_slots[] = {
	{ Py_tp_doc, "A tree node's handle (struct kvmm_fnode), the base of kvmm.FrameNode." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_dealloc, node_dealloc },
	{ Py_tp_getset, node_getset },
	{ Py_tp_methods, node_methods },
	{ 0, NULL }
};

static PyType_Spec node_spec = {
	.name = "kvmm._radix.Node",
	.basicsize = sizeof(struct node),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.slots = node_slots,
};

/* ---- the module ---- */

/* the cffi module's entry points into ops, by address */
static int init_ops(void)
{
	PyObject *mod, *ffi = NULL, *lib = NULL, *p = NULL, *addr = NULL;
	void **slot = (void **)&ops;
	size_t i;
	int ret = -1;

	static_assert(sizeof(ops) == sizeof(op_names) / sizeof(op_names[0]) * sizeof(void *),
		      "one name an entry point");
	mod = PyImport_ImportModule("kvmm._kvmm");
	if (!mod)
		return -1;
	ffi = PyObject_GetAttrString(mod, "ffi");
	lib = ffi ? PyObject_GetAttrString(mod, "lib") : NULL;
	if (!lib)
		goto out;
	for (i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
		p = PyObject_CallMethod(ffi, "addressof", "Os", lib, op_names[i]);
		addr = p ? PyObject_CallMethod(ffi, "cast", "sO", "uintptr_t", p) : NULL;
		Py_CLEAR(p);
		if (!addr)
			goto out;
		p = addr;
		addr = PyNumber_Long(p);
		Py_CLEAR(p);
		if (!addr)
			goto out;
		slot[i] = PyLong_AsVoidPtr(addr);
		Py_CLEAR(addr);
		if (!slot[i]) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_ImportError, "kvmm._radix: no %s", op_names[i]);
			goto out;
		}
	}
	ret = 0;
out:
	Py_XDECREF(lib);
	Py_XDECREF(ffi);
	Py_DECREF(mod);
	return ret;
}

static struct PyModuleDef radix_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvmm._radix",
	.m_doc = "KvmmRadixCache's hot methods in C (kvmm.sglang); private.",
	.m_size = -1,
};

PyMODINIT_FUNC PyInit__radix(void)
{
	PyObject *m, *arr, *radix_type;
	int i;

	for (i = 0; i < NR_S; i++) {
		s[i] = PyUnicode_InternFromString(s_names[i]);
		if (!s[i])
			return NULL;
	}
	if (init_ops())
		return NULL;
	arr = PyImport_ImportModule("array");
	if (!arr)
		return NULL;
	array_type = PyObject_GetAttrString(arr, "array");
	Py_DECREF(arr);
	if (!array_type)
		return NULL;
	m = PyModule_Create(&radix_module);
	if (!m)
		return NULL;
	node_type = (PyTypeObject *)PyType_FromSpec(&node_spec);
	radix_type = PyType_FromSpec(&radix_spec);
	if (!node_type || !radix_type) {
		Py_XDECREF(radix_type);
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(node_type);
	if (PyModule_AddObject(m, "Node", (PyObject *)node_type) ||
	    PyModule_AddObject(m, "Radix", radix_type)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
