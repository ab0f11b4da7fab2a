/* test_data_exact.c: the engine's exact samples (issue 38.8), to the token, without Lua:
 * - dp_data_tokens_padded: each sample's inputs are its ids but the last and its targets the
 *   next ids, right-padded with 0 and DP_IGNORE_INDEX to T; an id outside [0, vocab) or a length
 *   outside [1, T] is DP_EINVAL naming the sample and the token;
 * - dp_data_from_file_seq: window w of a file of n tokens starts at (w mod floor((n - 1) / T)) * T
 *   (inputs T tokens, targets the T after them), wrapping at the end; the plan device takes the
 *   same calls (no tokens to write, the same checks). */
#include "check.h"
#include "data.h"
#include "device.h"
#include "dpprof_engine.h"
#include "layer_ops.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { B = 2, T = 4 };

static int row_is(const dp_batch *b, int row, const int32_t *in, const int32_t *tg) {
    const int32_t *x = (const int32_t *)b->inputs.data + row * T, *y = (const int32_t *)b->targets.data + row * T;
    for (int t = 0; t < T; t++)
        if (x[t] != in[t] || y[t] != tg[t]) {
            fprintf(stderr, "row %d position %d: input %d target %d, want %d and %d\n", row, t, x[t], y[t], in[t],
                    tg[t]);
            return 0;
        }
    return 1;
}

static void test_tokens(dp_device *cpu, dp_device *plan) {
    dp_batch b;
    CHECK_OK(dp_batch_init(&b, cpu, B, T));
    /* sample 0: 3 ids, 2 positions; sample 1: 5 ids, the whole window */
    const int64_t ids[] = {5, 6, 7, 1, 2, 3, 4, 9}, offsets[] = {0, 3}, lengths[] = {2, 4};
    CHECK_OK(dp_data_tokens_padded(&b.inputs, &b.targets, 10, ids, offsets, lengths));
    const int32_t in0[T] = {5, 6, 0, 0}, tg0[T] = {6, 7, DP_IGNORE_INDEX, DP_IGNORE_INDEX};
    const int32_t in1[T] = {1, 2, 3, 4}, tg1[T] = {2, 3, 4, 9};
    CHECK(row_is(&b, 0, in0, tg0));
    CHECK(row_is(&b, 1, in1, tg1));
    /* refusals, each naming the sample */
    const int64_t bad_ids[] = {5, 6, 7, 1, 2, 3, 4, 10};
    CHECK(dp_data_tokens_padded(&b.inputs, &b.targets, 10, bad_ids, offsets, lengths) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "sample 1's token 4 is 10, outside the vocabulary [0, 10)") != NULL);
    const int64_t too_long[] = {2, 5};
    CHECK(dp_data_tokens_padded(&b.inputs, &b.targets, 10, ids, offsets, too_long) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "sample 1 has length 5, outside [1, 4]") != NULL);
    const int64_t empty[] = {0, 4};
    CHECK(dp_data_tokens_padded(&b.inputs, &b.targets, 10, ids, offsets, empty) == DP_EINVAL);
    dp_batch_release(&b);
    /* the plan device takes the same samples, and refuses the same */
    dp_batch p;
    CHECK_OK(dp_batch_init(&p, plan, B, T));
    CHECK_OK(dp_data_tokens_padded(&p.inputs, &p.targets, 10, ids, offsets, lengths));
    CHECK(dp_data_tokens_padded(&p.inputs, &p.targets, 10, bad_ids, offsets, lengths) == DP_EINVAL);
    dp_batch_release(&p);
}

static void test_sequential(dp_device *cpu) {
    char path[] = "/tmp/dpprof-test-data-exact-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    uint16_t tokens[11];
    for (int i = 0; i < 11; i++) tokens[i] = (uint16_t)i; /* n = 11: M = floor(10 / 4) = 2 windows, at 0 and 4 */
    CHECK(write(fd, tokens, sizeof tokens) == (ssize_t)sizeof tokens);
    close(fd);
    dp_batch b;
    CHECK_OK(dp_batch_init(&b, cpu, B, T));
    CHECK_OK(dp_data_from_file_seq(&b.inputs, &b.targets, path, DP_TOKENS_U16, 16, 1)); /* windows 1 and 2 */
    const int32_t in0[T] = {4, 5, 6, 7}, tg0[T] = {5, 6, 7, 8}; /* window 1 at token 4 */
    const int32_t in1[T] = {0, 1, 2, 3}, tg1[T] = {1, 2, 3, 4}; /* window 2 wraps to 0 */
    CHECK(row_is(&b, 0, in0, tg0));
    CHECK(row_is(&b, 1, in1, tg1));
    /* an id outside the vocabulary in a window read is refused */
    CHECK(dp_data_from_file_seq(&b.inputs, &b.targets, path, DP_TOKENS_U16, 8, 1) == DP_EINVAL);
    dp_batch_release(&b);
    unlink(path);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    dp_device *cpu, *plan;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    test_tokens(cpu, plan);
    test_sequential(cpu);
    dp_engine_shutdown();
    return check_report("test_data_exact");
}
