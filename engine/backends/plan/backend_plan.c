/* backend_plan.c: the plan backend. Allocations are accounted by dp_mem but no memory is
 * touched; its compute entries are all NULL because dispatch (dispatch.h) returns at once on a
 * plan device. The ledger (recorded above the backend) and the allocator's figures are the
 * whole result. */
#include "backend_plan.h"
#include "device.h"
#include "error.h"

#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The workspace a modelled CUDA device holds from its start (see dp_plan_model_workspace). */
typedef struct plan_impl {
    dp_alloc cublas_workspace, scratch;
} plan_impl;

static int plan_init(dp_device *dev) {
    dev->impl = calloc(1, sizeof(plan_impl));
    if (!dev->impl) return dp_error_set(DP_EOOM, "out of host memory");
    snprintf(dev->info.name, sizeof dev->info.name, "plan");
    snprintf(dev->info.cpu, sizeof dev->info.cpu, "none");
    dev->info.total_memory = 0; /* the device model sets the budget, not the plan itself */
    dev->info.cores = 1;
    return DP_OK;
}

static void plan_shutdown(dp_device *dev) {
    plan_impl *im = dev->impl;
    if (!im) return;
    dp_mem_release(dev->mem, &im->cublas_workspace);
    dp_mem_release(dev->mem, &im->scratch);
    free(im);
    dev->impl = NULL;
}

int dp_plan_model_workspace(dp_device *dev, int cuda) {
    if (dev->kind != DP_DEV_PLAN) return dp_error_set(DP_EINVAL, "not the plan device");
    plan_impl *im = dev->impl;
    dp_mem_release(dev->mem, &im->cublas_workspace);
    dp_mem_release(dev->mem, &im->scratch);
    if (!cuda) return DP_OK;
    /* the same allocations, in the same order and with the same tags, as cuda_init's */
    DP_TRY(dp_mem_alloc_module(dev->mem, DP_CUDA_CUBLAS_WORKSPACE_BYTES, DP_CAT_WORKSPACE, dp_module_intern("cublas"),
                               &im->cublas_workspace));
    return dp_mem_alloc_module(dev->mem, DP_CUDA_SCRATCH_BYTES, DP_CAT_WORKSPACE, dp_module_intern("kernels"),
                               &im->scratch);
}

static int plan_raw_alloc(void *ctx, size_t bytes, void **ptr) {
    (void)ctx;
    (void)bytes;
    *ptr = NULL;
    return DP_OK;
}

static void plan_raw_free(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    (void)ptr;
    (void)bytes;
}

static int plan_sync(dp_device *dev) {
    (void)dev;
    return DP_OK;
}

const dp_backend dp_backend_plan = {
    .name = "plan",
    .init = plan_init,
    .shutdown = plan_shutdown,
    .raw_alloc = plan_raw_alloc,
    .raw_free = plan_raw_free,
    .sync = plan_sync,
};
