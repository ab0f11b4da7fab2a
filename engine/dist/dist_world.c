/* dist_world.c: the process's world. Launched with more than one rank, MPI is started and the
 * world is MPI's; otherwise it is a world of one that starts nothing (exactly a run without a
 * launcher). */
#include "dist.h"

#include "dist_mpi.h"
#include "dist_nccl.h"
#include "error.h"

static dp_comm world;
static int world_made;

static int single_all_reduce(dp_comm *c, dp_tensor *t) { return (void)c, (void)t, DP_OK; }
static int single_parts(dp_comm *c, const dp_tensor *in, dp_tensor *out) { return (void)c, dp_tensor_copy(out, in); }
static int single_broadcast(dp_comm *c, dp_tensor *t, int root) { return (void)c, (void)t, (void)root, DP_OK; }
static int single_barrier(dp_comm *c) { return (void)c, DP_OK; }

static const dp_comm_ops single_ops = {"single",         single_all_reduce, single_parts, single_parts,
                                       single_broadcast, single_barrier,    NULL};

int dp_dist_world(dp_comm **out) {
    *out = &world;
    if (world_made) return DP_OK;
    dp_launch l;
    DP_TRY(dp_dist_launcher(&l));
    world.ops = &single_ops;
    world.rank = 0;
    world.world_size = 1;
    if (l.world_size > 1) {
        if (!dp_dist_mpi_compiled())
            return dp_error_set(DP_EINVAL,
                                "distributed: launched by %s as rank %d of %d, but this dpprof was built without MPI "
                                "(install libopenmpi-dev and rebuild)",
                                l.launcher, l.rank, l.world_size);
        DP_TRY(dp_dist_mpi_start(&world));
    }
    world_made = 1;
    return DP_OK;
}

void dp_dist_finalize(void) {
    dp_dist_nccl_stop();
    if (world_made && world.world_size > 1) dp_dist_mpi_stop(0);
    world_made = 0;
}

void dp_dist_abort(int rc) {
    if (world_made && world.world_size > 1) dp_dist_mpi_stop(rc ? rc : 1);
}
