/* cuda_dpsgd.h: the CUDA implementation of the per-sample DP kernels (dpsgd_ops.h), mapping each
 * entry to its launcher in kernels/dp_kernels.h. Only compiled with DPPROF_HAVE_CUDA. */
#ifndef DP_CUDA_DPSGD_H
#define DP_CUDA_DPSGD_H

#include "dpsgd_ops.h"

/* The CUDA DP table (kernels on the backend's stream; deterministic run to run). */
extern const dpsgd_ops dpsgd_cuda_ops;

#endif
