/* collective_sizes.c: under mpirun -np 2 with DPPROF_CHECK_COLLECTIVES=1, ranks that derived
 * different sizes for one collective (rank r: 4 + r elements) get an error on every rank naming
 * both sizes, not a buffer overrun or a hang (issue 37); equal sizes still sum. Exit 0 when every
 * check held on this rank. */
#include "device.h"
#include "comm.h"
#include "dpprof_engine.h"
#include "error.h"
#include "tensor.h"

#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "collective_sizes: " __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                                       \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

int main(void) {
    if (dp_engine_init() != DP_OK) return 1;
    dp_comm *w = NULL;
    if (dp_comm_world(&w) != DP_OK || w->world_size != 2) {
        fprintf(stderr, "collective_sizes: run me under mpirun -np 2 (%s)\n", dp_error_message());
        return 1;
    }
    CHECK(dp_comm_checking_sizes(), "DPPROF_CHECK_COLLECTIVES=1 turns the checks on");
    dp_device *cpu = NULL;
    if (dp_device_get(DP_DEV_CPU, &cpu) != DP_OK) return 1;
    int64_t shape[1] = {4 + w->rank};
    dp_tensor *t = dp_tensor_new(cpu, DP_F32, 1, shape, DP_CAT_OTHER);
    if (!t) return 1;
    int rc = dp_comm_all_reduce(w, t);
    CHECK(rc == DP_EINVAL, "mismatched all_reduce: DP_EINVAL, got %d", rc);
    const char *msg = dp_error_message();
    CHECK(strstr(msg, "ranks disagree on the size of a all_reduce") && strstr(msg, "4 f32") && strstr(msg, "5 f32"),
          "the message names both sizes: %s", msg);
    dp_tensor_free(t);
    /* equal sizes: the collective runs and sums */
    shape[0] = 3;
    if (!(t = dp_tensor_new(cpu, DP_F32, 1, shape, DP_CAT_OTHER))) return 1;
    float *v = t->data;
    for (int i = 0; i < 3; i++) v[i] = (float)(w->rank + 1);
    rc = dp_comm_all_reduce(w, t);
    CHECK(rc == DP_OK && v[0] == 3.0f && v[2] == 3.0f, "equal sizes sum: rc %d, %g", rc, (double)v[0]);
    dp_tensor_free(t);
    printf("collective_sizes: rank %d %s\n", w->rank, failures ? "FAILED" : "ok");
    dp_comm_finalize();
    dp_engine_shutdown();
    return failures ? 1 : 0;
}
