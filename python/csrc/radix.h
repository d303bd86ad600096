// SPDX-License-Identifier: MIT
/*
 * python/csrc/radix.h - the scratch struct of csrc/radix.c's calls.
 *
 * Shared by the cffi module (kvmm._kvmm, which compiles csrc/radix.c and
 * whose cdef repeats the struct for Python) and the C-API module
 * (kvmm._radix, csrc/radix_module.c, which calls radix.c's functions
 * through the cffi module's addresses: one copy of the library in the
 * process).
 */
#ifndef KVMM_PY_RADIX_H
#define KVMM_PY_RADIX_H

#include <stdint.h>

#include <libkvmm.h>

/**
 * struct kvmm_py_radix - one KvmmRadixCache's context and scratch
 * @ctx: the context, in engine-frames mode
 * @page_size: tokens per page, a power of two
 * @page_shift: its log2
 * @max_tokens: room at @tokens: the longest key (the context's max_seq_len)
 * @max_frames: room at @frames: a key's pages, and every page of the pool
 *	(what one eviction may hand back)
 * @tokens: a key's ids as uint32
 * @frames: frames of a path, of a key being inserted, or evicted ones
 * @nr_frames: valid entries at @frames after _match(), _path() or _evict()
 * @path_of: the node whose path @frames holds (@nr_frames pages) after
 *	_match() or _path(), for a _path_slots() of it to take without a
 *	second walk; the root's handle when @frames holds no path
 * @leaves: room for @max_frames: where each leaf an _evict() took ends at
 *	@frames, in the order evicted
 * @nr_leaves: valid entries at @leaves
 * @out: int64 room for @max_tokens entries (a tensor's memory): the
 *	duplicates a checkpoint frees
 * @nr_out: valid entries at @out after _checkpoint()
 *
 * Owned by the Python object, which allocates every buffer; the struct is
 * only ever used by the thread driving the cache, as the context is.
 */
struct kvmm_py_radix {
	struct kvmm_ctx *ctx;
	uint32_t page_size;
	uint32_t page_shift;
	uint32_t max_tokens;
	uint32_t max_frames;
	uint32_t *tokens;
	int32_t *frames;
	uint32_t nr_frames;
	struct kvmm_fnode path_of;
	uint32_t *leaves;
	uint32_t nr_leaves;
	int64_t *out;
	uint32_t nr_out;
};

#endif /* KVMM_PY_RADIX_H */
