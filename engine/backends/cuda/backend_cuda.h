/* backend_cuda.h: the CUDA backend's table (cudart stream-ordered pool, cuBLAS, kernels/), for
 * dp_engine_init to register. Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_BACKEND_CUDA_H
#define DP_BACKEND_CUDA_H

#include "backend.h"

/* The CUDA backend. */
extern const dp_backend dp_backend_cuda;

#endif
