/* SPDX-License-Identifier: MIT */
/*
 * kernels/fatbin.S - kv.cu's fatbin, embedded in libkvmm as read-only
 * data (KVMM_FATBIN is its path in the output tree).  The module API
 * wants the image aligned; 64 is what nvcc's own embedding uses.
 */
	.section .rodata.kvmm_kv_fatbin, "a"
	.balign 64
	.globl kvmm_kv_fatbin
	.hidden kvmm_kv_fatbin
kvmm_kv_fatbin:
	.incbin KVMM_FATBIN
	.globl kvmm_kv_fatbin_end
	.hidden kvmm_kv_fatbin_end
kvmm_kv_fatbin_end:
	.byte 0
	.section .note.GNU-stack, "", @progbits
