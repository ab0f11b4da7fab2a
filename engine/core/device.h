/* device.h: the devices of this process (cpu, cuda, plan), each with its backend and its own
 * tagged allocator, and the current device that new tensors land on.
 *
 * The registry knows backends only through their tables: dp_engine_init (dpprof_engine.h)
 * registers the ones this build has, so core links no backend.
 *
 * Devices are initialised on first use, never before: a sweep's parent process forks children
 * before anything touches CUDA, and each child initialises its own device. */
#ifndef DP_DEVICE_H
#define DP_DEVICE_H

#include "backend.h"
#include "memory.h"

#include <stdint.h>

typedef enum { DP_DEV_CPU = 0, DP_DEV_CUDA = 1, DP_DEV_PLAN = 2, DP_DEV_KIND_COUNT } dp_device_kind;

typedef struct dp_device_info {
    char name[256];        /* e.g. "NVIDIA H100 80GB HBM3", the CPU model, or "plan" */
    char cpu[128];         /* host CPU model */
    uint64_t total_memory; /* bytes on the device (host RAM for the CPU, the model's for plan) */
    int cores;             /* CPU threads, or CUDA multiprocessors */
    int cc_major, cc_minor;
    int driver_version, runtime_version; /* CUDA, as cudaDriverGetVersion reports; 0 elsewhere */
} dp_device_info;

struct dp_device {
    dp_device_kind kind;
    const dp_backend *ops;
    dp_mem *mem;
    void *impl; /* the backend's own state */
    dp_device_info info;
};

/* The kind's name: "cpu", "cuda", "plan". */
const char *dp_device_kind_name(dp_device_kind k);
/* Parses "cpu", "cuda", "plan" or "auto" ("auto" resolves to cuda when a GPU is usable, else cpu,
 * printing once to stderr why it fell back). Returns DP_OK or DP_EINVAL naming the valid choices. */
int dp_device_parse(const char *name, dp_device_kind *out);
/* Makes ops the backend of kind k. DP_EINVAL once a device of that kind is initialised with
 * another backend. Registering the same table again is a no-op. */
int dp_device_register(dp_device_kind k, const dp_backend *ops);
/* 1 when a CUDA backend is registered and a GPU is usable (initialises the CUDA runtime). */
int dp_cuda_available(void);
/* 1 when a CUDA backend is registered (this build has it, and dp_engine_init ran). */
int dp_cuda_compiled(void);

/* The device of kind k, initialised on first call. DP_EDEVICE when it cannot be used (no GPU). */
int dp_device_get(dp_device_kind k, dp_device **out);
/* The current device (initialising the default on first call: $DPPROF_DEVICE or "cpu"). */
int dp_device_current(dp_device **out);
/* Makes kind k current (initialising it). */
int dp_device_select(dp_device_kind k);
/* 1 when the device of kind k has been initialised in this process. */
int dp_device_initialised(dp_device_kind k);

/* Waits for the device's queued work (frees too: they are stream-ordered on CUDA). */
int dp_device_sync(dp_device *dev);
/* Synchronises and records a named memory snapshot on dev. */
int dp_device_snapshot(dp_device *dev, const char *name);

/* Shuts every initialised device down and frees process-wide state (scopes, ledger); the
 * registered backends stay. Tensors still alive must have been freed first. */
void dp_engine_shutdown(void);

#endif
