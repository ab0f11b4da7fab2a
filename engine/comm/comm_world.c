/* comm_world.c: the process's world. Launched with more than one rank, MPI is started and the
 * world is MPI's; otherwise it is a world of one that starts nothing (exactly a run without a
 * launcher). */
#include "comm.h"

#include "comm_mpi.h"
#include "comm_nccl.h"
#include "error.h"

static dp_comm world;
static int world_made;

static int single_all_reduce(dp_comm *c, dp_tensor *t) { return (void)c, (void)t, DP_OK; }
static int single_parts(dp_comm *c, const dp_tensor *in, dp_tensor *out) { return (void)c, dp_tensor_copy(out, in); }
static int single_broadcast(dp_comm *c, dp_tensor *t, int root) { return (void)c, (void)t, (void)root, DP_OK; }
static int single_barrier(dp_comm *c) { return (void)c, DP_OK; }

static const dp_comm_ops single_ops = {"single",         single_all_reduce, single_parts, single_parts,
                                       single_broadcast, single_barrier,    NULL};

int dp_comm_world(dp_comm **out) {
    *out = &world;
    if (world_made) return DP_OK;
    dp_launch l;
    DP_TRY(dp_comm_launcher(&l));
    world.ops = &single_ops;
    world.rank = 0;
    world.world_size = 1;
    if (l.world_size > 1) {
        if (!dp_comm_mpi_compiled())
            return dp_error_set(DP_EINVAL,
                                "distributed: launched by %s as rank %d of %d, but this dpprof was built without MPI "
                                "(install libopenmpi-dev and rebuild)",
                                l.launcher, l.rank, l.world_size);
        DP_TRY(dp_comm_mpi_start(&world));
    }
    world_made = 1;
    return DP_OK;
}

void dp_comm_finalize(void) {
    dp_comm_nccl_stop();
    if (world_made && world.world_size > 1) dp_comm_mpi_stop(0);
    world_made = 0;
}

void dp_comm_abort(int rc) {
    if (world_made && world.world_size > 1) dp_comm_mpi_stop(rc ? rc : 1);
}
