/* comm.h: training across processes. A communicator is a table of collectives (all_reduce,
 * reduce_scatter, all_gather, broadcast, barrier) declared here like the backends' op tables and
 * filled by one transport: MPI for CPU tensors (comm_mpi.c), NCCL for CUDA tensors (comm_nccl.c,
 * loaded at run time), and the plan communicator
 * (comm_plan.c), a simulated world of N in which this process plays rank r, which moves no data.
 * Every collective goes through the dp_comm_* calls below, which record it in the ledger
 * ("comm_all_reduce", ...: no flops, the bytes this rank puts on the wire, a ring's) and time it
 * in the per-op profile, so a plan run and a real rank record the same entries.
 *
 * The world (dp_comm_world) is made once per process: a launcher found in the environment
 * (dp_comm_launcher) with more than one rank starts MPI (MPI_Init); otherwise the world has size
 * 1 and nothing is started. dp_comm_finalize ends MPI at process end. */
#ifndef DP_COMM_H
#define DP_COMM_H

#include "tensor.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dp_comm dp_comm;

/* The collectives a transport implements, over contiguous f32 tensors of the communicator's
 * device kind (an all_gather's may be bf16 too: a copy). Sums are element-wise. reduce_scatter: in holds world_size equal parts, out (one
 * part) gets the sum of every rank's part `rank`; all_gather: in is this rank's part, out the
 * world_size parts in rank order. */
typedef struct dp_comm_ops {
    const char *name; /* "mpi", "plan" */
    int (*all_reduce)(dp_comm *c, dp_tensor *t);
    int (*reduce_scatter)(dp_comm *c, const dp_tensor *in, dp_tensor *out);
    int (*all_gather)(dp_comm *c, const dp_tensor *in, dp_tensor *out);
    int (*broadcast)(dp_comm *c, dp_tensor *t, int root);
    int (*barrier)(dp_comm *c);
    /* host bytes, not tensors: every rank's n[r] bytes into out (sum of n, in rank order); n[rank]
     * and buf are this rank's on entry, n[] every rank's on return (out is then malloc'ed) */
    int (*all_gather_host)(dp_comm *c, const void *buf, size_t *n, char **out);
} dp_comm_ops;

struct dp_comm {
    const dp_comm_ops *ops;
    int rank, world_size;
};

/* How this process was launched: the launcher's name ("mpirun", "pmi", "srun") with this rank and
 * the world size, or name NULL, rank 0, size 1 when none (read from OMPI_COMM_WORLD_SIZE/RANK,
 * PMI_SIZE/PMI_RANK, SLURM_STEP_NUM_TASKS/SLURM_PROCID in that order; a malformed value: DP_EINVAL
 * naming the variable). */
typedef struct dp_launch {
    const char *launcher;
    int rank, world_size;
} dp_launch;
int dp_comm_launcher(dp_launch *out);

/* The process's world: made at the first call (MPI_Init when launched with more than one rank;
 * DP_EINVAL when so launched but this dpprof was built without MPI). *out is never NULL on DP_OK. */
int dp_comm_world(dp_comm **out);
/* Non-zero when MPI was compiled into this dpprof. */
int dp_comm_mpi_compiled(void);
/* Ends the world at process end (MPI_Finalize when started). Idempotent. */
void dp_comm_finalize(void);
/* Ends every rank of a started MPI world with status rc (MPI_Abort), after this rank failed, so
 * that no rank waits forever in a collective; returns when the world has one rank. */
void dp_comm_abort(int rc);

/* A plan communicator: world_size ranks of which this process is `rank`; moves nothing. */
void dp_comm_plan(dp_comm *c, int rank, int world_size);

/* The links a plan run's collectives are timed on (its modelled clock): gpus_per_node ranks share
 * a node, joined by links of intra_Bps bytes/s per direction; nodes by inter_Bps. A ring over the
 * world runs at the slowest link it crosses: intra within one node, inter beyond. A collective
 * then lasts wire bytes / that bandwidth (bandwidth alone: no latency term, a lower bound like the
 * roofline). device_Bps is the device model's memory bandwidth, by which the ledger's roofline has
 * already timed the wire bytes. Any argument <= 0 turns it off (the roofline alone). */
void dp_comm_link_model(int gpus_per_node, double intra_Bps, double inter_Bps, double device_Bps);
/* The modelled seconds of a collective moving wire bytes across a world of world_size ranks on the
 * link model (0 when it is off). */
double dp_comm_link_seconds(double wire_bytes, int world_size);

/* Wire bytes one rank sends in a ring collective over `bytes` of data (per rank: all_reduce
 * 2 (N-1)/N bytes, reduce_scatter and all_gather (N-1)/N of the full buffer, broadcast bytes). */
double dp_comm_wire_bytes(const char *op, double bytes, int world_size);

/* Whether the collectives first compare every rank's element count and dtype (a mismatch: DP_EINVAL
 * on every rank, naming both): in debug builds, and where DPPROF_CHECK_COLLECTIVES=1. */
int dp_comm_checking_sizes(void);

/* The collectives, through c's table, each a ledger entry with its wire bytes (0 in a world of
 * one, whose collectives still run: NCCL's of one rank is a copy) and timed in the profile on t's
 * device. */
int dp_comm_all_reduce(dp_comm *c, dp_tensor *t);
int dp_comm_reduce_scatter(dp_comm *c, const dp_tensor *in, dp_tensor *out);
int dp_comm_all_gather(dp_comm *c, const dp_tensor *in, dp_tensor *out);
int dp_comm_broadcast(dp_comm *c, dp_tensor *t, int root);
int dp_comm_barrier(dp_comm *c);
/* Every rank's bytes (a result's summary): n has world_size entries, n[rank] this rank's length
 * on entry and every rank's on return; *out (freed by the caller) holds them in rank order. Not
 * in the ledger: host bookkeeping, not training. A world of one (or a plan world): its own. */
int dp_comm_all_gather_host(dp_comm *c, const void *buf, size_t *n, char **out);

#endif
