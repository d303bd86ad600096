// SPDX-License-Identifier: MIT
/*
 * python/csrc/radix.c - kvmm.sglang.KvmmRadixCache's calls, each one C call.
 *
 * SGLang's tree cache is driven a few times per request with a whole
 * prompt at a time: token ids as int64 (array('q')), slots as int64
 * tensors, a request's row of int32 slots in req_to_token.  Done as a
 * string of Python steps (convert the ids, read the row, insert, insert
 * again at the prompt's end, free the duplicates, match, rewrite the row,
 * move the lock) each SGLang method cost tens of microseconds in numpy and
 * torch calls, far more than the tree's work.  Here each method is one
 * call into the library's public frames API (libkvmm.h) over scratch
 * buffers the Python object owns; Python passes addresses (the array's
 * buffer, the tensor's data_ptr()) it has checked, and keeps the objects
 * alive across the call.  Nothing here knows the tree's insides.
 *
 * Slots: at page size 1 a slot is a frame; above it a page's slots are
 * frame * page_size + 0 .. page_size - 1, and the first slot of a page in
 * a row names its frame (slot >> page_shift), as SGLang's paged allocator
 * reads it.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <libkvmm.h>

#include "radix.h"

/*
 * The loops below run over whole prompts several times a request: they
 * keep the struct's fields in locals and restrict their pointers so that
 * they vectorize (the int32 stores could alias the struct otherwise).
 */

/* ids [@from, @n) into r->tokens at the same places; -ERANGE for one not a uint32 */
static int radix_tokens(struct kvmm_py_radix *r, const int64_t *restrict ids, uint32_t from,
			uint32_t n)
{
	uint32_t *restrict out = r->tokens;
	uint64_t any = 0;
	uint32_t i;

	if (n > r->max_tokens)
		return -EINVAL;
	for (i = from; i < n; i++) {
		any |= (uint64_t)ids[i];
		out[i] = (uint32_t)ids[i];
	}
	return any >> 32 ? -ERANGE : 0;
}

/* the frames of a row's pages [@first, @end) into r->frames (each page's first slot) */
static void radix_row_frames(struct kvmm_py_radix *r, const int32_t *restrict slot,
			     uint32_t first, uint32_t end)
{
	int32_t *restrict out = r->frames;
	uint32_t i, shift = r->page_shift;

	if (!shift) {
		memcpy(out + first, slot + first, (size_t)(end - first) * sizeof(*out));
		return;
	}
	for (i = first; i < end; i++)
		out[i] = slot[(size_t)i << shift] >> shift;
}

/* the row's positions [@from, @to) pointed at r->frames' slots */
static void radix_row_write(const struct kvmm_py_radix *r, int32_t *restrict slot,
			    uint32_t from, uint32_t to)
{
	const int32_t *restrict frames = r->frames;
	uint32_t i, shift = r->page_shift, mask = r->page_size - 1;

	if (from >= to)
		return;
	if (!shift) {
		memcpy(slot + from, frames + from, (size_t)(to - from) * sizeof(*slot));
		return;
	}
	for (i = from; i < to; i++)
		slot[i] = (frames[i >> shift] << shift) + (int32_t)(i & mask);
}

/* @nr frames as int64 at @out: slots (each page's, @expand) or the frames */
static void radix_expand(const struct kvmm_py_radix *r, const int32_t *restrict frames,
			 uint32_t nr, int64_t *restrict out, int expand)
{
	uint32_t i, j, ps = r->page_size, shift = r->page_shift;

	if (!expand || ps == 1) {
		for (i = 0; i < nr; i++)
			out[i] = frames[i];
		return;
	}
	for (i = 0; i < nr; i++)
		for (j = 0; j < ps; j++)
			out[((size_t)i << shift) + j] = ((int64_t)frames[i] << shift) + j;
}

/**
 * kvmm_py_radix_match() - match_prefix(): the longest cached prefix of @ids
 * @r: the cache
 * @ns: the key's namespace
 * @ids: int64 token ids (an address)
 * @n: how many; a trailing partial page is not looked at
 * @last: out, the node the match ends on
 *
 * Return: tokens matched, or -errno (-ERANGE for an id outside uint32).
 */
static int kvmm_py_radix_match(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids,
			       uint32_t n, struct kvmm_fnode *last)
{
	int ret;

	n &= ~(r->page_size - 1);
	r->path_of = (struct kvmm_fnode){ 0 };
	ret = radix_tokens(r, (const int64_t *)ids, 0, n);
	if (ret)
		return ret;
	ret = kvmm_frames_match(r->ctx, ns, r->tokens, n, r->frames, last);
	if (ret > 0) {		/* the matched path's frames: the node's path */
		r->path_of = *last;
		r->nr_frames = (uint32_t)ret >> r->page_shift;
	}
	return ret;
}

/**
 * kvmm_py_radix_path() - a node's path into r->frames, for _slots()
 * @r: the cache
 * @node: the node
 *
 * Return: tokens on the path (r->nr_frames pages), or -errno.
 */
static int64_t kvmm_py_radix_path(struct kvmm_py_radix *r, const struct kvmm_fnode *node)
{
	int ret;

	/*
	 * A node's path never changes while the node lives (a split keeps
	 * the lower part's node, and nothing merges nodes), and only an
	 * eviction ends a node here: _evict() and _checkpoint(), which
	 * overwrite @frames, forget @path_of.
	 */
	if (node->node && node->node == r->path_of.node && node->id == r->path_of.id)
		return (int64_t)r->nr_frames << r->page_shift;
	r->path_of = (struct kvmm_fnode){ 0 };
	ret = kvmm_frames_path(r->ctx, node, r->frames, r->max_frames);
	r->nr_frames = ret < 0 ? 0 : (uint32_t)ret;
	if (ret > 0)
		r->path_of = *node;
	return ret < 0 ? ret : (int64_t)ret << r->page_shift;
}

/**
 * kvmm_py_radix_path_slots() - path_device_indices() in one call
 * @r: the cache
 * @node: the node
 * @out: int64 room for @room slots (an address)
 * @room: slots that fit at @out: the path's length where the caller knows
 *	it (the match that returned @node said it), else 0
 *
 * _path() and, when the path's slots fit @room, _slots() into @out.
 *
 * Return: tokens on the path (written when 0 < tokens <= @room), or -errno.
 */
static int64_t kvmm_py_radix_path_slots(struct kvmm_py_radix *r, const struct kvmm_fnode *node,
					uintptr_t out, uint32_t room)
{
	int64_t ret = kvmm_py_radix_path(r, node);

	if (ret > 0 && ret <= room)
		radix_expand(r, r->frames, r->nr_frames, (int64_t *)out, 1);
	return ret;
}

/**
 * kvmm_py_radix_slots() - r->frames (from _path() or _evict()) as int64
 * @r: the cache
 * @out: room for r->nr_frames entries, or that many pages' slots (an address)
 * @expand: each page's slots; else the frames themselves
 */
static void kvmm_py_radix_slots(const struct kvmm_py_radix *r, uintptr_t out, int expand)
{
	radix_expand(r, r->frames, r->nr_frames, (int64_t *)out, expand);
}

/* reverse @n frames in place */
static void radix_reverse(int32_t *f, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n / 2; i++) {
		int32_t t = f[i];

		f[i] = f[n - 1 - i];
		f[n - 1 - i] = t;
	}
}

/**
 * kvmm_py_radix_evict() - evict(): whole LRU leaves, their frames into r->frames
 * @r: the cache
 * @nr_pages: pages wanted
 * @reverse: the leaves last evicted first (each leaf's frames in order)
 * @out_at: where to write them as int64 as well, as _slots() does (an
 *	address, room for r->max_frames entries, or that many pages' slots
 *	with @expand), or 0
 * @expand: each page's slots at @out_at; else the frames themselves
 *
 * RadixCache frees each leaf as it evicts it, one allocator call each:
 * r->leaves[] says where each leaf's frames end (in the order evicted,
 * without @reverse), for a caller that frees them so; @reverse lays them
 * out for one call to an allocator that puts what it frees in front of its
 * free list (SGLang's paged one), whose list then ends up as the
 * leaf-by-leaf calls would leave it.
 *
 * Return: frames evicted (r->nr_frames, in r->nr_leaves leaves), or -errno.
 */
static int64_t kvmm_py_radix_evict(struct kvmm_py_radix *r, uint32_t nr_pages, int reverse,
				   uintptr_t out_at, int expand)
{
	uint32_t out = 0, i, start;
	int64_t ret = 0;

	r->nr_frames = r->nr_leaves = 0;
	r->path_of = (struct kvmm_fnode){ 0 };
	while (out < nr_pages) {	/* one leaf a call: a leaf's pages are >= 1 */
		ret = kvmm_frames_evict(r->ctx, 1, r->frames + out, r->max_frames - out);
		if (ret <= 0)
			break;
		out += (uint32_t)ret;
		r->leaves[r->nr_leaves++] = out;
	}
	if (ret < 0 && !out)
		return ret;
	if (reverse && r->nr_leaves > 1) {
		radix_reverse(r->frames, out);
		for (i = 0, start = 0; i < r->nr_leaves; i++) {
			uint32_t len = r->leaves[r->nr_leaves - 1 - i] -
				       (i + 1 < r->nr_leaves ? r->leaves[r->nr_leaves - 2 - i] : 0);

			radix_reverse(r->frames + start, len);
			start += len;
		}
	}
	r->nr_frames = out;
	if (out_at)
		radix_expand(r, r->frames, out, (int64_t *)out_at, expand);
	return out;
}

/**
 * kvmm_py_radix_row_free() - a row's slots [@start, @end) as the allocator frees them
 * @r: the cache
 * @row: the row's int32 slots (an address)
 * @start: first position, page aligned
 * @end: one past the last; a partial last page counts whole
 * @out: int64 room for the result (an address)
 * @pages: write each page's frame (its first slot >> page_shift) instead of
 *	the slots
 *
 * Return: entries written.
 */
static uint32_t kvmm_py_radix_row_free(const struct kvmm_py_radix *r, uintptr_t row,
				       uint32_t start, uint32_t end, uintptr_t out, int pages)
{
	const int32_t *restrict s = (const int32_t *)row;
	int64_t *restrict o = (int64_t *)out;
	uint32_t i, n, shift = r->page_shift;

	if (end <= start)
		return 0;
	if (!pages || !shift) {
		for (i = 0; i < end - start; i++)
			o[i] = s[start + i];
		return end - start;
	}
	n = (end - start + r->page_size - 1) >> shift;
	for (i = 0; i < n; i++)
		o[i] = s[start + ((size_t)i << shift)] >> shift;
	return n;
}

/* the key's [@held, @key_len) as the tree reads it: tokens, and the row's frames */
static int radix_key(struct kvmm_py_radix *r, uintptr_t ids, const int32_t *slot,
		     uint32_t held, uint32_t key_len)
{
	int ret = radix_tokens(r, (const int64_t *)ids, held, key_len);

	if (!ret)
		radix_row_frames(r, slot, held >> r->page_shift, key_len >> r->page_shift);
	return ret;
}

/**
 * kvmm_py_radix_checkpoint() - checkpoint(): cache a request's row as RadixCache does
 * @r: the cache
 * @ns: the request's namespace
 * @ids: its int64 token ids (an address), @key_len of them
 * @key_len: the key, page aligned
 * @prompt_len: the prompt's page-aligned length: where the key is split
 *	when 0 < @prompt_len < @key_len
 * @row: the request's int32 row (an address), @key_len slots at least
 * @protected: the row's first positions the tree owns already (its lock)
 * @inserted: the tokens the request inserted before (its
 *	cache_inserted_len): the nodes that count a hit end past them
 * @unlock: the request's lock to drop, or NULL
 * @last: out, the key's node, locked in its stead
 * @pages: the duplicates as page frames, not slots (see _row_free())
 *
 * Inserts the key with the row's frames, splits it at the prompt's end
 * and stamps its path as RadixCache's insert, insert and match do; copies
 * the duplicates (the row's [@protected, had) the tree held already) to
 * r->out (r->nr_out of them) for the caller to free, points the row's
 * [@protected, @key_len) at the tree's slots, unlocks @unlock and locks
 * @last.  The request's first @protected tokens are the path to @unlock
 * (SGLang's cache_protected_len: the tree owns them for it), so they are
 * not read again: one kvmm_frames_extend() from @unlock takes the rest.
 * Where @unlock is not that (another length, gone), the key is read whole
 * and inserted from the root.  An error before the duplicates are copied
 * changes nothing but the tree (r->nr_out is 0); one of the insert
 * changes nothing at all.
 *
 * Return: r->nr_out, the duplicates to free (>= 0); -ENOLCK when @unlock
 * held no lock (or is gone): the rest is done, r->nr_out set and @last not
 * locked, as RadixCache's sequence of calls leaves it; another -errno.
 */
static int64_t kvmm_py_radix_checkpoint(struct kvmm_py_radix *r, uint32_t ns, uintptr_t ids,
					uint32_t key_len, uint32_t prompt_len, uintptr_t row,
					uint32_t protected, uint32_t inserted,
					const struct kvmm_fnode *unlock, struct kvmm_fnode *last,
					int pages)
{
	static const struct kvmm_fnode root;
	const struct kvmm_fnode *from = &root;
	uint32_t had_end, held = 0, split;
	int32_t *slot = (int32_t *)row;
	int64_t ret;
	int had;

	r->nr_out = 0;
	r->path_of = (struct kvmm_fnode){ 0 };	/* @frames is the key's now */
	if ((key_len | protected) & (r->page_size - 1))
		return -EINVAL;
	if (unlock && protected <= key_len) {
		from = unlock;
		held = protected;
	}
	split = prompt_len < key_len ? prompt_len : 0;
	ret = radix_key(r, ids, slot, held, key_len);
	if (ret)
		return ret;
	had = kvmm_frames_extend(r->ctx, ns, r->tokens, key_len, r->frames, from, held, split,
				 inserted, last);
	if ((had == -EXDEV || had == -ESTALE) && from != &root) {
		ret = radix_key(r, ids, slot, 0, held);
		if (ret)
			return ret;
		had = kvmm_frames_extend(r->ctx, ns, r->tokens, key_len, r->frames, &root, 0,
					 split, inserted, last);
	}
	if (had < 0)
		return had;
	had_end = (uint32_t)had > protected ? (uint32_t)had : protected;
	r->nr_out = kvmm_py_radix_row_free(r, row, protected, had_end, (uintptr_t)r->out, pages);
	radix_row_write(r, slot, protected, key_len);
	if (unlock && kvmm_frames_lock(r->ctx, unlock, -1) < 0)
		return -ENOLCK;
	ret = kvmm_frames_lock(r->ctx, last, 1);
	return ret < 0 ? ret : r->nr_out;
}
