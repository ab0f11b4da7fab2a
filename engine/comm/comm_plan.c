/* comm_plan.c: the plan communicator. A simulated world of N in which this process is rank r:
 * every collective succeeds and moves nothing (plan tensors hold no data); dp_comm_* has already
 * recorded its ledger entry, so a plan run accounts rank r's collectives as a real rank does. */
#include "comm.h"

#include "error.h"

static int plan_all_reduce(dp_comm *c, dp_tensor *t) { return (void)c, (void)t, DP_OK; }
static int plan_parts(dp_comm *c, const dp_tensor *in, dp_tensor *out) { return (void)c, (void)in, (void)out, DP_OK; }
static int plan_broadcast(dp_comm *c, dp_tensor *t, int root) { return (void)c, (void)t, (void)root, DP_OK; }
static int plan_barrier(dp_comm *c) { return (void)c, DP_OK; }

static const dp_comm_ops plan_ops = {"plan",         plan_all_reduce, plan_parts, plan_parts,
                                     plan_broadcast, plan_barrier,    NULL};

void dp_comm_plan(dp_comm *c, int rank, int world_size) {
    c->ops = &plan_ops;
    c->rank = rank;
    c->world_size = world_size;
}
