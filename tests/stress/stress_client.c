// SPDX-License-Identifier: MIT
/*
 * tests/stress/stress_client.c - kvmm-stress-client SOCKET SEED OPS: attach
 * a ring and submit OPS random commands as fast as the server takes them
 * (requests that share prefixes, batches, pins), then exit, sometimes
 * without detaching.  kvmm-stress kills most of these at random points.
 * Refused commands (-ENOSPC, ...) are expected; a lost connection is not.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libkvmm.h>
#include <libkvmm-ring.h>

static uint64_t rs;

static uint32_t rnd(uint32_t n)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return n ? (uint32_t)((z ^ (z >> 31)) % n) : 0;
}

#define LEN	256
#define MAXSEQ	4

int main(int argc, char **argv)
{
	struct kvmm_ring_params rp = { .sq_entries = 16, .buf_size = 64 * 1024 };
	struct kvmm_ring ring;
	int32_t seqs[MAXSEQ];
	uint32_t *tok, nseq = 0, i, ops;
	struct kvmm_cqe *cqe;

	if (argc != 4)
		return 2;
	rs = strtoull(argv[2], NULL, 0);
	ops = (uint32_t)strtoul(argv[3], NULL, 0);
	if (kvmm_ring_connect(argv[1], &rp, &ring))
		return 3;
	tok = ring.buf;
	/* two shared templates, then per-client tails: lots of sharing */
	for (i = 0; i < LEN; i++)
		tok[i] = i < 64 ? i : (i < 128 ? 1000 + (uint32_t)(rs & 1) * 7 + i : rnd(50));
	for (i = 0; i < ops; i++) {
		struct kvmm_sqe *sqe = kvmm_get_sqe(&ring);
		uint32_t r = rnd(100), k = nseq ? rnd(nseq) : 0;
		bool open_op = false;
		uint8_t op;

		if (!sqe)
			return 4;
		if (r < 15 && nseq < MAXSEQ) {
			kvmm_prep_open(sqe, rnd(2));
			open_op = true;
		} else if (r < 35 && nseq) {
			kvmm_prep_match(sqe, (uint32_t)seqs[k], 0, 0, 1 + rnd(LEN - 1));
		} else if (r < 60 && nseq) {
			kvmm_prep_extend(sqe, (uint32_t)seqs[k], 1 + rnd(32), rnd(4) ? 0 : KVMM_EXTEND_RESERVE);
		} else if (r < 72 && nseq) {
			kvmm_prep_commit(sqe, (uint32_t)seqs[k], 0, 0, 1 + rnd(LEN - 1));
		} else if (r < 82 && nseq) {
			if (rnd(2))
				kvmm_prep_close(sqe, (uint32_t)seqs[k], 0, 0, rnd(2) ? 0 : 1 + rnd(64));
			else
				kvmm_prep_retract(sqe, (uint32_t)seqs[k], 0, 0, 0);
		} else if (r < 88) {
			kvmm_prep_pin(sqe, 0, 0, 0, 8 + rnd(56), 0);
		} else if (r < 92) {
			kvmm_prep_unpin(sqe, 0, 0, 0, 8 + rnd(56), 0);
		} else if (r < 96) {
			kvmm_prep_reclaim(sqe, 1 + rnd(64));
		} else {
			kvmm_prep_nop(sqe);
		}
		op = sqe->opcode;
		if (kvmm_submit_and_wait(&ring, 1) < 0 || kvmm_wait_cqe(&ring, &cqe))
			return 5;	/* the server went away */
		if (open_op && cqe->res >= 0)
			seqs[nseq++] = cqe->res;
		if (op == KVMM_OP_CLOSE && cqe->res == 0)
			seqs[k] = seqs[--nseq];
		kvmm_cqe_seen(&ring, cqe);
	}
	if (rnd(2))
		kvmm_ring_exit(&ring);	/* else the exit closes the socket */
	return 0;
}
