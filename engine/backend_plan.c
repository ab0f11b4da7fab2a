/* backend_plan.c: the plan backend. Allocations are accounted by dp_mem but no memory is
 * touched; its compute entries are all NULL because dispatch (dispatch.h) returns at once on a
 * plan device. The ledger (recorded above the backend) and the allocator's figures are the
 * whole result. */
#include "backend.h"
#include "device.h"
#include "error.h"

#include <stdio.h>

static int plan_init(dp_device *dev) {
    snprintf(dev->info.name, sizeof dev->info.name, "plan");
    snprintf(dev->info.cpu, sizeof dev->info.cpu, "none");
    dev->info.total_memory = 0; /* the device model sets the budget, not the plan itself */
    dev->info.cores = 1;
    return DP_OK;
}

static void plan_shutdown(dp_device *dev) { (void)dev; }

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
