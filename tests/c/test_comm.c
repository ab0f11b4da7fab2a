/* test_comm.c: engine/comm without a launcher.
 * - The launcher is read from the environment as Open MPI, PMI and srun set it; malformed values
 *   (not integers, negative, a rank not below the size, a size without a rank) are refused naming
 *   the variable, and so is every one of a few thousand seeded random strings that is not a
 *   plain integer in range (the environment is input from outside).
 * - Strategies parse by name; unknown ones are refused naming the valid ones.
 * - Wire bytes of ring collectives per rank; the link model's seconds (intra within a node,
 *   inter beyond).
 * - A plan world records each collective in the ledger with those bytes and moves nothing; the
 *   world of one (no launcher) runs its collectives as copies. */
#include "check.h"
#include "device.h"
#include "comm.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK",
                                   "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) unsetenv(VARS[i]);
}

static void test_launcher(void) {
    dp_launch l;
    clear_env();
    CHECK_OK(dp_comm_launcher(&l));
    CHECK(l.launcher == NULL && l.rank == 0 && l.world_size == 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    CHECK_OK(dp_comm_launcher(&l));
    CHECK(l.launcher && strcmp(l.launcher, "mpirun") == 0 && l.rank == 3 && l.world_size == 4);
    clear_env();
    setenv("SLURM_STEP_NUM_TASKS", "16", 1);
    setenv("SLURM_PROCID", "9", 1);
    CHECK_OK(dp_comm_launcher(&l));
    CHECK(l.launcher && strcmp(l.launcher, "srun") == 0 && l.rank == 9 && l.world_size == 16);
    setenv("PMI_SIZE", "2", 1); /* PMI before Slurm's */
    setenv("PMI_RANK", "1", 1);
    CHECK_OK(dp_comm_launcher(&l));
    CHECK(l.launcher && strcmp(l.launcher, "pmi") == 0 && l.rank == 1 && l.world_size == 2);
    static const struct {
        const char *size, *rank, *named;
    } bad[] = {{"x", "0", "OMPI_COMM_WORLD_SIZE"},  {"2", "2", "OMPI_COMM_WORLD_RANK"},
               {"2", "-1", "OMPI_COMM_WORLD_RANK"}, {"0", "0", "OMPI_COMM_WORLD_SIZE"},
               {"2", NULL, "OMPI_COMM_WORLD_RANK"}, {"99999999999", "0", "OMPI_COMM_WORLD_SIZE"},
               {"2 ", "0", "OMPI_COMM_WORLD_SIZE"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_env();
        setenv("OMPI_COMM_WORLD_SIZE", bad[i].size, 1);
        if (bad[i].rank) setenv("OMPI_COMM_WORLD_RANK", bad[i].rank, 1);
        CHECK(dp_comm_launcher(&l) == DP_EINVAL);
        CHECK(strstr(dp_error_message(), bad[i].named) != NULL);
    }
    /* random strings: accepted only as integers 1..2^24 with a rank below them */
    srand(29);
    for (int it = 0; it < 4000; it++) {
        char size[12], rank[12];
        for (int j = 0; j < 11; j++) {
            size[j] = (char)(1 + rand() % 127);
            rank[j] = (char)(rand() % 4 ? '0' + rand() % 10 : 1 + rand() % 127);
        }
        size[1 + rand() % 10] = rank[1 + rand() % 10] = '\0';
        if (rand() % 2) size[0] = (char)('1' + rand() % 9), size[1] = '\0';
        clear_env();
        setenv("OMPI_COMM_WORLD_SIZE", size, 1);
        setenv("OMPI_COMM_WORLD_RANK", rank, 1);
        char *end;
        long s = strtol(size, &end, 10);
        int size_ok = *end == '\0' && end != size && s >= 1 && s <= 1 << 24;
        long r = strtol(rank, &end, 10);
        int rank_ok = *end == '\0' && end != rank && r >= 0 && r < s;
        int rc = dp_comm_launcher(&l);
        CHECK(rc == (size_ok && rank_ok ? DP_OK : DP_EINVAL));
        if (rc == DP_OK) CHECK(l.world_size == (int)s && l.rank == (int)r);
    }
    clear_env();
}

static void test_strategies(void) {
    dpsgd_strategy s;
    CHECK_OK(dpsgd_strategy_parse("ddp", &s));
    CHECK(s == DPSGD_STRATEGY_DDP);
    CHECK_OK(dpsgd_strategy_parse("zero2", &s));
    CHECK(s == DPSGD_STRATEGY_ZERO2 && dpsgd_strategy_supported(s));
    CHECK_OK(dpsgd_strategy_parse("fsdp", &s));
    CHECK(s == DPSGD_STRATEGY_FSDP && dpsgd_strategy_supported(s));
    CHECK(dpsgd_strategy_parse("zero3", &s) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "valid: ddp, zero2, fsdp") != NULL);
}

static void test_bytes_and_links(void) {
    CHECK_CLOSE(dp_comm_wire_bytes("comm_all_reduce", 800, 4), 1200, 0);
    CHECK_CLOSE(dp_comm_wire_bytes("comm_reduce_scatter", 800, 4), 600, 0);
    CHECK_CLOSE(dp_comm_wire_bytes("comm_all_gather", 800, 4), 600, 0);
    CHECK_CLOSE(dp_comm_wire_bytes("comm_broadcast", 800, 4), 800, 0);
    CHECK_CLOSE(dp_comm_wire_bytes("comm_all_reduce", 800, 1), 0, 0);
    dp_comm_link_model(8, 450e9, 50e9, 3.35e12);
    CHECK_CLOSE(dp_comm_link_seconds(450e9, 8), 1.0, 1e-12);
    CHECK_CLOSE(dp_comm_link_seconds(50e9, 9), 1.0, 1e-12);
    dp_comm_link_model(0, 0, 0, 0);
    CHECK_CLOSE(dp_comm_link_seconds(1e9, 8), 0.0, 0);
}

static const dp_ledger_entry *entry(const char *op) {
    for (size_t i = 0; i < dp_ledger_count(); i++)
        if (strcmp(dp_ledger_at(i)->op, op) == 0) return dp_ledger_at(i);
    return NULL;
}

static void test_plan_and_single(void) {
    dp_device *plan, *cpu;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    dp_comm pc;
    dp_comm_plan(&pc, 2, 4);
    int64_t n = 1000, part = 250;
    dp_tensor whole, shard;
    CHECK_OK(dp_tensor_init(&whole, plan, DP_F32, 1, &n, DP_CAT_GRADIENTS));
    CHECK_OK(dp_tensor_init(&shard, plan, DP_F32, 1, &part, DP_CAT_GRADIENTS));
    dp_ledger_reset();
    CHECK_OK(dp_comm_all_reduce(&pc, &whole));
    CHECK_OK(dp_comm_reduce_scatter(&pc, &whole, &shard));
    CHECK_OK(dp_comm_all_gather(&pc, &shard, &whole));
    CHECK(dp_comm_reduce_scatter(&pc, &shard, &shard) == DP_EINVAL); /* 250 is not 4 parts of 250 */
    const dp_ledger_entry *ar = entry("comm_all_reduce"), *rs = entry("comm_reduce_scatter"),
                          *ag = entry("comm_all_gather");
    CHECK(ar && rs && ag);
    if (ar && rs && ag) {
        CHECK_CLOSE(ar->bytes, 2.0 * 3 / 4 * 4000, 0);
        CHECK_CLOSE(rs->bytes, 3.0 / 4 * 4000, 0);
        CHECK_CLOSE(ag->bytes, 3.0 / 4 * 4000, 0);
        CHECK_EQ_U64(ar->calls, 1);
        CHECK_CLOSE(ar->flops, 0, 0);
    }
    /* bf16: an all-gather is a copy (fsdp's compute weights), 2 bytes an element on the wire; sums
     * and mixed dtypes are refused */
    dp_tensor whole16, shard16;
    CHECK_OK(dp_tensor_init(&whole16, plan, DP_BF16, 1, &n, DP_CAT_PARAMETERS));
    CHECK_OK(dp_tensor_init(&shard16, plan, DP_BF16, 1, &part, DP_CAT_PARAMETERS));
    dp_ledger_reset();
    CHECK_OK(dp_comm_all_gather(&pc, &shard16, &whole16));
    ag = entry("comm_all_gather");
    CHECK(ag != NULL);
    if (ag) CHECK_CLOSE(ag->bytes, 3.0 / 4 * 2000, 0);
    CHECK(dp_comm_reduce_scatter(&pc, &whole16, &shard16) == DP_ENOTSUP);
    CHECK(dp_comm_all_gather(&pc, &shard, &whole16) == DP_ENOTSUP);
    CHECK(dp_comm_all_reduce(&pc, &whole16) == DP_ENOTSUP);
    dp_tensor_release(&whole16);
    dp_tensor_release(&shard16);
    dp_tensor_release(&whole);
    dp_tensor_release(&shard);

    dp_comm *w;
    clear_env();
    CHECK_OK(dp_comm_world(&w));
    CHECK(w->rank == 0 && w->world_size == 1);
    int64_t four = 4;
    dp_tensor a, b;
    CHECK_OK(dp_tensor_init(&a, cpu, DP_F32, 1, &four, DP_CAT_OTHER));
    CHECK_OK(dp_tensor_init(&b, cpu, DP_F32, 1, &four, DP_CAT_OTHER));
    float v[4] = {1, 2, 3, 4}, got[4] = {0};
    CHECK_OK(dp_tensor_from_host(&a, v, sizeof v));
    CHECK_OK(dp_comm_all_reduce(w, &a)); /* a sum over one rank */
    CHECK_OK(dp_comm_reduce_scatter(w, &a, &b));
    CHECK_OK(dp_tensor_to_host(&b, got, sizeof got));
    CHECK(memcmp(v, got, sizeof v) == 0);
    CHECK_OK(dp_comm_barrier(w));
    size_t lens[1] = {5};
    char *all = NULL;
    CHECK_OK(dp_comm_all_gather_host(w, "hello", lens, &all));
    CHECK(all && lens[0] == 5 && memcmp(all, "hello", 5) == 0);
    free(all);
    dp_tensor_release(&a);
    dp_tensor_release(&b);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    test_launcher();
    test_strategies();
    test_bytes_and_links();
    test_plan_and_single();
    dp_comm_finalize();
    dp_engine_shutdown();
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures);
    return check_failures ? 1 : 0;
}
