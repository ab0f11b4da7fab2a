/* comm_nccl.h: the NCCL transport for CUDA tensors (comm_nccl.c). libnccl.so.2 is loaded at run
 * time (dlopen: $DPPROF_NCCL, else the loader's search path), so dpprof runs without NCCL until a
 * distributed CUDA run needs it. Built with the CUDA backend only; elsewhere it refuses. */
#ifndef DP_COMM_NCCL_H
#define DP_COMM_NCCL_H

#include "comm.h"

/* The NCCL communicator over `world` (its rank and size; a world of more than one rank shares
 * NCCL's unique id through world's host all-gather), on the current CUDA device. Made once.
 * DP_EINVAL naming the library, $DPPROF_NCCL and LD_LIBRARY_PATH when NCCL cannot be loaded;
 * DP_ENOTSUP when built without CUDA. */
int dp_comm_nccl(dp_comm *world, dp_comm **out);
/* Destroys the communicator (process end). */
void dp_comm_nccl_stop(void);

#endif
