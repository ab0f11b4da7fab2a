/* cpu_alloc.h: the CPU backend's raw memory (the allocator's dp_raw_allocator on the CPU). */
#ifndef DP_CPU_ALLOC_H
#define DP_CPU_ALLOC_H

#include <stddef.h>

/* Freed blocks of at least DP_CPU_KEEP_MIN bytes are kept for reuse by an allocation of the same
 * rounded size, at most DP_CPU_KEEP_SLOTS of them and DP_CPU_KEEP_BYTES in all (a step frees more
 * than 64 large blocks: FIFO over fewer slots kept none of them). */
#define DP_CPU_KEEP_MIN ((size_t)1 << 20)
#define DP_CPU_KEEP_SLOTS 512
#define DP_CPU_KEEP_BYTES ((size_t)512 << 20)

/* A 64-byte aligned block of at least bytes; NULL when the system has none. */
void *dp_cpu_block_alloc(size_t bytes);

/* Gives back a block from dp_cpu_block_alloc of that size. */
void dp_cpu_block_free(void *ptr, size_t bytes);

/* Returns every kept block to the system (backend shutdown; a test's clean slate). */
void dp_cpu_block_trim(void);

/* Blocks kept for reuse now, and their bytes (for tests). */
void dp_cpu_block_kept(size_t *blocks, size_t *bytes);

#endif
