/* comm_mpi.c: collectives over MPI's world communicator, on host (CPU) tensors, f32 sums (and bf16
 * all-gathers, a copy).
 * Errors return (MPI_ERRORS_RETURN) and become dpprof errors naming the collective. */
#include "comm_mpi.h"

#include "error.h"

#ifdef DPPROF_HAVE_MPI
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

int dp_comm_mpi_compiled(void) { return 1; }

static int mpi_check(int rc, const char *op) {
    if (rc == MPI_SUCCESS) return DP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dp_error_set(DP_EDEVICE, "distributed: MPI %s failed: %.*s", op, len, msg);
}

static int host_only(const dp_tensor *t, const char *op) {
    if (t->dev->kind != DP_DEV_CPU)
        return dp_error_set(DP_ENOTSUP, "distributed: MPI %s moves CPU tensors only (a CUDA run needs NCCL)", op);
    return DP_OK;
}

static int mpi_all_reduce(dp_comm *c, dp_tensor *t) {
    (void)c;
    DP_TRY(host_only(t, "all_reduce"));
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, t->data, (int)t->numel, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                     "all_reduce");
}

static int mpi_reduce_scatter(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    (void)c;
    DP_TRY(host_only(in, "reduce_scatter"));
    return mpi_check(MPI_Reduce_scatter_block(in->data, out->data, (int)out->numel, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                     "reduce_scatter");
}

static int mpi_all_gather(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    (void)c;
    DP_TRY(host_only(in, "all_gather"));
    /* a copy, no arithmetic: MPI has no bf16, whose elements move as 2-byte units */
    MPI_Datatype t = in->dtype == DP_BF16 ? MPI_UINT16_T : MPI_FLOAT;
    return mpi_check(MPI_Allgather(in->data, (int)in->numel, t, out->data, (int)in->numel, t, MPI_COMM_WORLD),
                     "all_gather");
}

static int mpi_broadcast(dp_comm *c, dp_tensor *t, int root) {
    (void)c;
    DP_TRY(host_only(t, "broadcast"));
    return mpi_check(MPI_Bcast(t->data, (int)t->numel, MPI_FLOAT, root, MPI_COMM_WORLD), "broadcast");
}

static int mpi_barrier(dp_comm *c) {
    (void)c;
    return mpi_check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
}

static int mpi_all_gather_host(dp_comm *c, const void *buf, size_t *n, char **out) {
    int N = c->world_size, mine = (int)n[c->rank];
    int *lens = calloc((size_t)N, sizeof *lens), *at = calloc((size_t)N, sizeof *at);
    if (!lens || !at) {
        free(lens);
        free(at);
        return dp_error_set(DP_EOOM, "all_gather_host: out of host memory");
    }
    int rc = mpi_check(MPI_Allgather(&mine, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD), "all_gather");
    size_t total = 0;
    for (int r = 0; r < N && rc == DP_OK; r++) {
        at[r] = (int)total;
        total += (size_t)lens[r];
        n[r] = (size_t)lens[r];
    }
    if (rc == DP_OK && total > INT32_MAX) rc = dp_error_set(DP_EINVAL, "all_gather_host: %zu bytes is too many", total);
    if (rc == DP_OK && !(*out = malloc(total ? total : 1)))
        rc = dp_error_set(DP_EOOM, "all_gather_host: out of host memory");
    if (rc == DP_OK)
        rc = mpi_check(MPI_Allgatherv(buf, mine, MPI_CHAR, *out, lens, at, MPI_CHAR, MPI_COMM_WORLD), "all_gather");
    free(lens);
    free(at);
    return rc;
}

static const dp_comm_ops mpi_ops = {"mpi",         mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather,
                                    mpi_broadcast, mpi_barrier,    mpi_all_gather_host};

int dp_comm_mpi_start(dp_comm *c) {
    int started = 0;
    MPI_Initialized(&started);
    if (!started) DP_TRY(mpi_check(MPI_Init(NULL, NULL), "init"));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    DP_TRY(mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "comm_rank"));
    DP_TRY(mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size), "comm_size"));
    c->ops = &mpi_ops;
    return DP_OK;
}

void dp_comm_mpi_stop(int rc) {
    int started = 0, finished = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (!started || finished) return;
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
}

#else

int dp_comm_mpi_compiled(void) { return 0; }

int dp_comm_mpi_start(dp_comm *c) {
    (void)c;
    return dp_error_set(DP_EINVAL, "distributed: this dpprof was built without MPI");
}

void dp_comm_mpi_stop(int rc) { (void)rc; }

#endif
