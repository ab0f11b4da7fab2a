/* test_cpu_alloc.c: the CPU backend's raw blocks (cpu_alloc.c). Every block is 64-byte aligned;
 * a freed block of at least DP_CPU_KEEP_MIN bytes comes back to the next allocation of the same
 * rounded size and to no other; smaller ones are never kept; at most DP_CPU_KEEP_SLOTS blocks and
 * DP_CPU_KEEP_BYTES are kept, the oldest given back first; trim gives back everything. */
#include "check.h"
#include "cpu_alloc.h"

#include <stdint.h>
#include <string.h>

static size_t kept_blocks(void) {
    size_t n, bytes;
    dp_cpu_block_kept(&n, &bytes);
    return n;
}

static size_t kept_bytes(void) {
    size_t n, bytes;
    dp_cpu_block_kept(&n, &bytes);
    return bytes;
}

static void test_reuse(void) {
    dp_cpu_block_trim();
    const size_t big = 3 * DP_CPU_KEEP_MIN + 5; /* rounded to 64 bytes */
    char *a = dp_cpu_block_alloc(big);
    CHECK(a && (uintptr_t)a % 64 == 0);
    memset(a, 1, big);
    dp_cpu_block_free(a, big);
    CHECK(kept_blocks() == 1 && kept_bytes() == (big + 63) / 64 * 64);
    char *other = dp_cpu_block_alloc(big + 64); /* another rounded size: not that block */
    CHECK(other && other != a && kept_blocks() == 1);
    char *same = dp_cpu_block_alloc(big - 3); /* the same rounded size: that block */
    CHECK(same == a && kept_blocks() == 0 && kept_bytes() == 0);
    dp_cpu_block_free(same, big - 3);
    dp_cpu_block_free(other, big + 64);
    CHECK(kept_blocks() == 2);
    dp_cpu_block_trim();
    CHECK(kept_blocks() == 0 && kept_bytes() == 0);

    char *small = dp_cpu_block_alloc(DP_CPU_KEEP_MIN - 64); /* below the threshold: never kept */
    CHECK(small && (uintptr_t)small % 64 == 0);
    dp_cpu_block_free(small, DP_CPU_KEEP_MIN - 64);
    CHECK(kept_blocks() == 0);
    dp_cpu_block_free(NULL, 0);
    CHECK(kept_blocks() == 0);
}

static void test_limits(void) {
    dp_cpu_block_trim();
    /* more blocks than the slots, and more bytes than the limit, freed one after another */
    enum { N = DP_CPU_KEEP_SLOTS + 8 };
    static void *blocks[N];
    const size_t one = DP_CPU_KEEP_MIN;
    for (int i = 0; i < N; i++) CHECK((blocks[i] = dp_cpu_block_alloc(one)) != NULL);
    for (int i = 0; i < N; i++) dp_cpu_block_free(blocks[i], one);
    const size_t max_blocks = DP_CPU_KEEP_BYTES / one < DP_CPU_KEEP_SLOTS ? DP_CPU_KEEP_BYTES / one : DP_CPU_KEEP_SLOTS;
    CHECK(kept_blocks() == max_blocks && kept_bytes() == max_blocks * one);
    /* the newest were kept: the last block freed is the one an allocation gets back */
    int found = 0;
    void *back[8];
    for (int k = 0; k < 8; k++) {
        back[k] = dp_cpu_block_alloc(one);
        for (int i = N - (int)max_blocks; i < N; i++) found += back[k] == blocks[i];
    }
    CHECK(found == 8);
    for (int k = 0; k < 8; k++) dp_cpu_block_free(back[k], one);
    /* a block larger than the whole limit goes straight back */
    dp_cpu_block_trim();
    void *huge = dp_cpu_block_alloc(DP_CPU_KEEP_BYTES + 64);
    CHECK(huge != NULL);
    dp_cpu_block_free(huge, DP_CPU_KEEP_BYTES + 64);
    CHECK(kept_blocks() == 0);
    /* one that needs the room of older ones evicts them, oldest first */
    void *a = dp_cpu_block_alloc(DP_CPU_KEEP_BYTES / 2), *b = dp_cpu_block_alloc(DP_CPU_KEEP_BYTES / 2);
    void *c = dp_cpu_block_alloc(DP_CPU_KEEP_BYTES / 4);
    dp_cpu_block_free(a, DP_CPU_KEEP_BYTES / 2);
    dp_cpu_block_free(b, DP_CPU_KEEP_BYTES / 2);
    CHECK(kept_blocks() == 2 && kept_bytes() == DP_CPU_KEEP_BYTES);
    dp_cpu_block_free(c, DP_CPU_KEEP_BYTES / 4); /* a (the oldest) goes */
    CHECK(kept_blocks() == 2 && kept_bytes() == DP_CPU_KEEP_BYTES / 2 + DP_CPU_KEEP_BYTES / 4);
    CHECK(dp_cpu_block_alloc(DP_CPU_KEEP_BYTES / 2) == b);
    dp_cpu_block_free(b, DP_CPU_KEEP_BYTES / 2);
    dp_cpu_block_trim();
}

int main(void) {
    test_reuse();
    test_limits();
    return check_report("test_cpu_alloc");
}
