/* profile.h: per-op measurement for profile = "ops" (off by default).
 *
 * When on, every backend call made through the dispatch macros (dispatch.h) is timed and
 * charged to the ledger entry its tensor-level caller added last (ledger.h: the op's name, flops
 * and bytes), with the tagged bytes allocated and released on its device since the previous call
 * ended: the engine makes an op's buffers right before calling it and releases what the op
 * before no longer needs, so these are the op's own buffers. A backend with timers (CUDA: events
 * recorded on its stream) times a call on the device, read by dp_profile_collect after a
 * synchronisation; a synchronous one (CPU) on the engine clock around the call. On a plan device
 * the clock is modelled (clock.h): a call lasts the modelled time of its own work, the adds to
 * its entry since the previous call (dp_ledger_work_start_ns); work no call follows is no call's. Every call is logged (entry, start, end on the engine clock) for the
 * trace's op slices, up to DP_PROFILE_MAX_CALLS (the rest counted as dropped).
 *
 * A call nested in another (none today: backends never dispatch) is part of the outer one.
 * Not thread-safe, like the rest of the engine's host side. */
#ifndef DP_PROFILE_H
#define DP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_device dp_device;

#define DP_PROFILE_MAX_CALLS (1u << 18)

/* One timed call on the engine clock. */
typedef struct dp_profile_call {
    uint32_t entry;           /* the ledger entry charged */
    int64_t start_ns, end_ns; /* engine clock; a device-timed call is placed on it by its device time */
    uint64_t seq;             /* the ledger's add count when the call ended: calls with the same seq ran for one add */
    double flops, bytes;      /* the work added to the entry since the previous call (dp_ledger_take_work) */
} dp_profile_call;

/* Non-zero while profiling is on: what the dispatch macros test before timing a call. */
extern int dp_profile_active;

/* Turns profiling on (forgetting the call log and pending timers) or off (dropping pending
 * timers: collect first). dev (may be NULL) is the device whose allocations the first call is
 * charged with from now on. */
void dp_profile_enable(dp_device *dev, int on);
/* Marks the start of a backend call on dev (from the dispatch macros). */
void dp_profile_begin(dp_device *dev);
/* Marks the end of the call begun last on dev and charges it; returns rc unchanged. */
int dp_profile_end(dp_device *dev, int rc);
/* Reads the device timers of the calls made since the last collect into the ledger and the log;
 * call after synchronising dev. DP_OK, or the backend's error. */
int dp_profile_collect(dp_device *dev);
/* Total time of the calls charged so far, ns (the sum over the ledger's measured time). */
double dp_profile_total_ns(void);
/* Number of calls in the log. */
size_t dp_profile_call_count(void);
/* Call i of the log (oldest first), NULL when out of range. */
const dp_profile_call *dp_profile_call_at(size_t i);
/* Calls timed but not logged because the log was full. */
uint64_t dp_profile_calls_dropped(void);
/* Host nanoseconds one timed call adds on dev (its begin and end around an empty call, the mean
 * of n; nothing is charged or logged). Profiling need not be on. */
double dp_profile_overhead_ns(dp_device *dev, int n);
/* Times the calls of synchronous backends (CPU) by the process's CPU time instead of the engine clock
 * (on: 1): what other processes on a shared machine take does not count, which is right with one
 * thread (dpprof calibrate). A call's log entry starts where it did and lasts its CPU time. */
void dp_profile_cpu_clock(int on);
/* Frees the log (process end). */
void dp_profile_shutdown(void);

#endif
