/* engine.c: assembles the engine: the device registry (core) learns the backends here, so core
 * links none of them. */
#include "dpprof_engine.h"

#include "backend_cpu.h"
#include "backend_plan.h"
#include "cpu_blas.h"
#include "cpu_threads.h"
#include "error.h"

#include <stdio.h>
#ifdef DPPROF_HAVE_CUDA
#include "backend_cuda.h"
#endif

int dp_engine_init(void) {
    DP_TRY(dp_device_register(DP_DEV_CPU, &dp_backend_cpu));
    DP_TRY(dp_device_register(DP_DEV_PLAN, &dp_backend_plan));
#ifdef DPPROF_HAVE_CUDA
    DP_TRY(dp_device_register(DP_DEV_CUDA, &dp_backend_cuda));
#endif
    return DP_OK;
}

int dp_engine_threads(void) { return dp_cpu_threads(); }

const char *dp_engine_blas_reexec_core(void) { return dp_cpu_blas_reexec_core(); }

void dp_engine_blas_info(dp_engine_blas *out) {
    snprintf(out->library, sizeof out->library, "OpenBLAS");
    dp_cpu_blas_version(out->version, sizeof out->version);
    snprintf(out->core, sizeof out->core, "%s", dp_cpu_blas_core());
    snprintf(out->chosen_by, sizeof out->chosen_by, "%s", dp_cpu_blas_chosen_by());
    out->generic = dp_cpu_blas_core_is_generic(out->core);
}

int dp_engine_set_threads(int n) { return dp_cpu_set_threads(n); }
