/* device.c: the backend registry, lazily initialised devices and the current-device choice. */
#include "device.h"

#include "error.h"
#include "ledger.h"
#include "profile.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dp_backend *backends[DP_DEV_KIND_COUNT]; /* registered by dp_engine_init */
static dp_device devices[DP_DEV_KIND_COUNT];
static int initialised[DP_DEV_KIND_COUNT];
static int current = -1;
static int fallback_said;

static const char *const kind_names[DP_DEV_KIND_COUNT] = {"cpu", "cuda", "plan"};

const char *dp_device_kind_name(dp_device_kind k) { return (unsigned)k < DP_DEV_KIND_COUNT ? kind_names[k] : "?"; }

int dp_device_register(dp_device_kind k, const dp_backend *ops) {
    if ((unsigned)k >= DP_DEV_KIND_COUNT || !ops)
        return dp_error_set(DP_EINVAL, "dp_device_register: unknown device kind %d or no backend", (int)k);
    if (backends[k] == ops) return DP_OK;
    if (initialised[k])
        return dp_error_set(DP_EINVAL, "device '%s' is in use: its backend cannot change", kind_names[k]);
    backends[k] = ops;
    return DP_OK;
}

int dp_cuda_compiled(void) { return backends[DP_DEV_CUDA] != NULL; }

static int cuda_usable(char *why, size_t n) {
    const dp_backend *ops = backends[DP_DEV_CUDA];
    if (!ops) {
        snprintf(why, n, "this dpprof was built without CUDA");
        return 0;
    }
    return !ops->probe || ops->probe(why, n) > 0;
}

int dp_cuda_available(void) {
    char why[256];
    return cuda_usable(why, sizeof why);
}

int dp_device_parse(const char *name, dp_device_kind *out) {
    for (int k = 0; k < DP_DEV_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (dp_device_kind)k;
            return DP_OK;
        }
    if (strcmp(name, "auto") == 0) {
        char why[256];
        if (cuda_usable(why, sizeof why)) {
            *out = DP_DEV_CUDA;
            return DP_OK;
        }
        if (dp_cuda_compiled() && !fallback_said) {
            fprintf(stderr, "dpprof: no usable CUDA device (%s); falling back to the CPU\n", why);
            fallback_said = 1;
        }
        *out = DP_DEV_CPU;
        return DP_OK;
    }
    return dp_error_set(DP_EINVAL, "unknown device '%s' (valid: cpu, cuda, plan, auto)", name);
}

int dp_device_get(dp_device_kind k, dp_device **out) {
    if ((unsigned)k >= DP_DEV_KIND_COUNT) return dp_error_set(DP_EINVAL, "unknown device kind %d", (int)k);
    dp_device *dev = &devices[k];
    if (!initialised[k]) {
        const dp_backend *ops = backends[k];
        if (!ops && !backends[DP_DEV_CPU])
            return dp_error_set(DP_EDEVICE, "device '%s': no backend is registered (call dp_engine_init first)",
                                kind_names[k]);
        if (!ops) {
            char why[256];
            cuda_usable(why, sizeof why);
            return dp_error_set(DP_EDEVICE, "device '%s' is not available: %s", kind_names[k], why);
        }
        memset(dev, 0, sizeof *dev);
        dev->kind = k;
        dev->ops = ops;
        dp_raw_allocator raw = {dev, ops->raw_alloc, ops->raw_free, ops->reserved};
        dev->mem = dp_mem_new(&raw, 0);
        if (!dev->mem) return dp_error_set(DP_EOOM, "out of host memory creating the allocator");
        int rc = ops->init(dev); /* may allocate its workspace through dev->mem */
        if (rc != DP_OK) {
            ops->shutdown(dev); /* frees whatever init made before it failed */
            dp_mem_destroy(dev->mem);
            dev->mem = NULL;
            return rc;
        }
        initialised[k] = 1;
    }
    *out = dev;
    return DP_OK;
}

int dp_device_initialised(dp_device_kind k) { return (unsigned)k < DP_DEV_KIND_COUNT && initialised[k]; }

int dp_device_select(dp_device_kind k) {
    dp_device *dev;
    DP_TRY(dp_device_get(k, &dev));
    current = (int)k;
    return DP_OK;
}

int dp_device_current(dp_device **out) {
    if (current < 0) {
        const char *env = getenv("DPPROF_DEVICE");
        dp_device_kind k = DP_DEV_CPU;
        if (env && *env && dp_device_parse(env, &k) != DP_OK)
            return dp_error_set(DP_EINVAL, "DPPROF_DEVICE='%s': unknown device (valid: cpu, cuda, plan, auto)", env);
        DP_TRY(dp_device_select(k));
    }
    return dp_device_get((dp_device_kind)current, out);
}

int dp_device_sync(dp_device *dev) { return dev->ops->sync(dev); }

int dp_device_snapshot(dp_device *dev, const char *name) {
    DP_TRY(dp_device_sync(dev));
    return dp_mem_snapshot_take(dev->mem, name);
}

void dp_engine_shutdown(void) {
    dp_profile_shutdown(); /* first: pending device timers belong to a device still up */
    for (int k = 0; k < DP_DEV_KIND_COUNT; k++) {
        if (!initialised[k]) continue;
        dp_device *dev = &devices[k];
        dev->ops->sync(dev);
        dev->ops->shutdown(dev); /* releases its workspace through dev->mem */
        dp_mem_destroy(dev->mem);
        memset(dev, 0, sizeof *dev);
        initialised[k] = 0;
    }
    current = -1;
    dp_scope_shutdown();
    dp_ledger_shutdown();
}
