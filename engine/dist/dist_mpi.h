/* dist_mpi.h: the MPI transport (dist_mpi.c; stubs that refuse when built without MPI). */
#ifndef DP_DIST_MPI_H
#define DP_DIST_MPI_H

#include "dist.h"

/* MPI_Init and the world communicator's table, rank and size into c. DP_EDEVICE when MPI fails. */
int dp_dist_mpi_start(dp_comm *c);
/* rc 0: MPI_Finalize; otherwise MPI_Abort(rc) (never returns then). */
void dp_dist_mpi_stop(int rc);

#endif
