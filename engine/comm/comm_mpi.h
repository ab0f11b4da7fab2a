/* comm_mpi.h: the MPI transport (comm_mpi.c; stubs that refuse when built without MPI). */
#ifndef DP_COMM_MPI_H
#define DP_COMM_MPI_H

#include "comm.h"

/* MPI_Init and the world communicator's table, rank and size into c. DP_EDEVICE when MPI fails. */
int dp_comm_mpi_start(dp_comm *c);
/* rc 0: MPI_Finalize; otherwise MPI_Abort(rc) (never returns then). */
void dp_comm_mpi_stop(int rc);

#endif
