/* cpu_alloc.c: raw memory for the CPU backend. A training step frees and allocates the same
 * large buffers every iteration (logits, output gradients, per-sample gradients, Gram matrices:
 * tens of MB at the bench shape). The C library serves blocks that large with mmap and unmaps
 * them on free, so every step faults each page in again and the kernel zeroes it: ~12k faults a
 * step on the llama bench shape, the page-zeroing alone a few % of the step. Freed blocks of at
 * least DP_CPU_KEEP_MIN bytes are therefore kept, up to DP_CPU_KEEP_SLOTS blocks and DP_CPU_KEEP_BYTES in all
 * (oldest given back first), and an allocation of exactly the same rounded size takes one back
 * (flash_clip on the llama bench shape: 220k faults and 1.3 s of system time over 8 steps
 * before, 91k and 0.4 s after). Under AddressSanitizer a kept block is poisoned until it is
 * taken back, so a use after free is still reported.
 * The allocator's figures are unaffected: they count what dpprof allocates, as the C library's
 * own free lists never showed; a kept block is host memory the process holds, as a CUDA pool's
 * reserve is on the GPU (at most DP_CPU_KEEP_BYTES more resident memory). */
#include "cpu_alloc.h"

#include <pthread.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KEEP_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KEEP_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KEEP_POISON(p, n) ((void)(p), (void)(n))
#define KEEP_UNPOISON(p, n) ((void)(p), (void)(n))
#endif
#include <stdint.h>
#include <stdlib.h>

#define CPU_ALIGN 64

typedef struct {
    void *ptr;
    size_t bytes; /* rounded */
    uint64_t age; /* when it was freed: the smallest goes first */
} kept_block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kept_block kept[DP_CPU_KEEP_SLOTS];
static int n_kept;
static size_t kept_bytes;
static uint64_t clock_ticks;

static size_t rounded_size(size_t bytes) {
    size_t r = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    return r < bytes ? 0 : r;
}

static void drop(int i) { /* kept[i] out of the list (the caller frees its memory) */
    kept_bytes -= kept[i].bytes;
    kept[i] = kept[--n_kept];
}

void *dp_cpu_block_alloc(size_t bytes) {
    size_t r = rounded_size(bytes);
    if (r == 0) return NULL;
    if (r >= DP_CPU_KEEP_MIN) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < n_kept; i++)
            if (kept[i].bytes == r) {
                void *p = kept[i].ptr;
                drop(i);
                pthread_mutex_unlock(&lock);
                KEEP_UNPOISON(p, r);
                return p;
            }
        pthread_mutex_unlock(&lock);
    }
    return aligned_alloc(CPU_ALIGN, r);
}

void dp_cpu_block_free(void *ptr, size_t bytes) {
    if (!ptr) return;
    size_t r = rounded_size(bytes);
    if (r < DP_CPU_KEEP_MIN || r > DP_CPU_KEEP_BYTES) {
        free(ptr);
        return;
    }
    void *evicted[DP_CPU_KEEP_SLOTS];
    int n_evicted = 0;
    pthread_mutex_lock(&lock);
    while (n_kept > 0 && (n_kept == DP_CPU_KEEP_SLOTS || kept_bytes + r > DP_CPU_KEEP_BYTES)) {
        int oldest = 0;
        for (int i = 1; i < n_kept; i++)
            if (kept[i].age < kept[oldest].age) oldest = i;
        evicted[n_evicted++] = kept[oldest].ptr;
        KEEP_UNPOISON(kept[oldest].ptr, kept[oldest].bytes);
        drop(oldest);
    }
    KEEP_POISON(ptr, r);
    kept[n_kept++] = (kept_block){ptr, r, ++clock_ticks};
    kept_bytes += r;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n_evicted; i++) free(evicted[i]); /* outside the lock */
}

void dp_cpu_block_trim(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_kept; i++) {
        KEEP_UNPOISON(kept[i].ptr, kept[i].bytes);
        free(kept[i].ptr);
    }
    n_kept = 0;
    kept_bytes = 0;
    pthread_mutex_unlock(&lock);
}

void dp_cpu_block_kept(size_t *blocks, size_t *bytes) {
    pthread_mutex_lock(&lock);
    *blocks = (size_t)n_kept;
    *bytes = kept_bytes;
    pthread_mutex_unlock(&lock);
}
