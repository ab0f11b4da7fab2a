/* engine.c: assembles the engine: the device registry (core) learns the backends here, so core
 * links none of them. */
#include "dpprof_engine.h"

#include "backend_cpu.h"
#include "backend_plan.h"
#include "cpu_threads.h"
#include "error.h"
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

int dp_engine_set_threads(int n) { return dp_cpu_set_threads(n); }
