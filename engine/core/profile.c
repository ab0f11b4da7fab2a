/* profile.c: timing of backend calls for profile = "ops" (see profile.h). */
#include "profile.h"

#include "clock.h"
#include "device.h"
#include "error.h"
#include "ledger.h"

#include <stdlib.h>

int dp_profile_active;

/* A call whose device timers are not read yet. */
typedef struct pending_call {
    size_t entry;
    uint64_t seq;
    double flops, bytes;
    void *from, *to;
    int64_t host_start_ns; /* engine clock when the start mark was recorded */
} pending_call;

static struct {
    int depth;                    /* calls in progress (nesting) */
    dp_device *dev;               /* the device of the call in progress */
    int64_t start_ns;             /* host start of the call in progress */
    void *mark;                   /* its start mark (timed backends) */
    dp_device *traffic_dev;       /* the device whose allocator traffic is charged */
    uint64_t allocated, released; /* that allocator's counters when the previous call ended */
    int dry;                      /* measuring the overhead: charge and log nothing */
    int cpu_clock;                /* synchronous calls timed by the process's CPU time */
    int64_t cpu_start_ns;         /* its CPU time at the start of the call in progress */

    pending_call *pending;
    size_t n_pending, cap_pending;
    dp_profile_call *log;
    size_t n_log;
    uint64_t dropped;
    double total_ns;
} P;

static void release_pending(void) {
    for (size_t i = 0; i < P.n_pending; i++) {
        pending_call *c = &P.pending[i];
        dp_device *dev = P.dev ? P.dev : P.traffic_dev;
        if (dev && dev->ops->timer_release) {
            if (c->from) dev->ops->timer_release(dev, c->from);
            if (c->to) dev->ops->timer_release(dev, c->to);
        }
    }
    P.n_pending = 0;
}

void dp_profile_enable(dp_device *dev, int on) {
    release_pending();
    P.n_log = 0;
    P.dropped = 0;
    P.total_ns = 0;
    P.depth = 0;
    P.traffic_dev = dev;
    if (dev) dp_mem_traffic(dev->mem, &P.allocated, &P.released);
    dp_profile_active = on != 0;
}

static void log_call(size_t entry, int64_t start_ns, int64_t end_ns, uint64_t seq, double flops, double bytes) {
    if (P.n_log == DP_PROFILE_MAX_CALLS) {
        P.dropped++;
        return;
    }
    if (!P.log) {
        P.log = malloc(DP_PROFILE_MAX_CALLS * sizeof *P.log);
        if (!P.log) { /* the log is best effort; the ledger's figures are not affected */
            P.dropped++;
            return;
        }
    }
    P.log[P.n_log++] = (dp_profile_call){(uint32_t)entry, start_ns, end_ns, seq, flops, bytes};
}

/* The tagged bytes dev's allocator made and released since the previous call ended. */
static void traffic_since_last(dp_device *dev, uint64_t *allocated, uint64_t *released) {
    uint64_t a, r;
    dp_mem_traffic(dev->mem, &a, &r);
    if (P.traffic_dev != dev) { /* the first call on this device: nothing to charge before it */
        P.traffic_dev = dev;
        P.allocated = a, P.released = r;
    }
    *allocated = a - P.allocated, *released = r - P.released;
    P.allocated = a, P.released = r;
}

void dp_profile_begin(dp_device *dev) {
    if (P.depth++ > 0) return;
    P.dev = dev;
    P.mark = NULL;
    if (dev->ops->timer_mark && dev->ops->timer_mark(dev, &P.mark) != DP_OK) P.mark = NULL;
    P.start_ns = dp_clock_ns(); /* a modelled clock's call has moved it already: see dp_profile_end */
    if (P.cpu_clock) P.cpu_start_ns = dp_clock_cpu_ns();
}

int dp_profile_end(dp_device *dev, int rc) {
    if (P.depth == 0 || --P.depth > 0) return rc;
    int64_t end_ns = dp_clock_ns();
    int64_t cpu_end_ns = P.cpu_clock ? dp_clock_cpu_ns() : 0;
    if (P.dry) { /* the overhead measurement: the same reads, nothing charged */
        uint64_t a, r;
        dp_mem_traffic(dev->mem, &a, &r);
        P.allocated ^= a ^ r ^ (uint64_t)dp_ledger_last(); /* kept: the reads must happen */
        P.allocated ^= a ^ r ^ (uint64_t)dp_ledger_last();
        if (P.mark && dev->ops->timer_release) dev->ops->timer_release(dev, P.mark);
        return rc;
    }
    size_t entry = dp_ledger_last();
    double work_flops, work_bytes;
    /* a modelled clock's call costs its own adds' time: the clock also moved for work recorded
     * since the previous call that no call follows (in another phase, perhaps), which is not this
     * call's */
    int64_t work_start_ns = dp_ledger_work_start_ns();
    uint64_t seq = dp_ledger_take_work(&work_flops, &work_bytes);
    uint64_t allocated, released;
    traffic_since_last(dev, &allocated, &released);
    if (P.mark) { /* timed on the device: read at the next collect */
        void *to = NULL;
        if (dev->ops->timer_mark(dev, &to) != DP_OK) to = NULL;
        if (P.n_pending == P.cap_pending) {
            size_t n = P.cap_pending ? 2 * P.cap_pending : 1024;
            pending_call *p = realloc(P.pending, n * sizeof *p);
            if (!p) {
                dev->ops->timer_release(dev, P.mark);
                if (to) dev->ops->timer_release(dev, to);
                dp_ledger_measure(entry, 0, 0.0, allocated, released);
                return rc;
            }
            P.pending = p, P.cap_pending = n;
        }
        P.pending[P.n_pending++] = (pending_call){entry, seq, work_flops, work_bytes, P.mark, to, P.start_ns};
        dp_ledger_measure(entry, 0, 0.0, allocated, released);
        return rc;
    }
    double ns = (double)(end_ns - P.start_ns);
    if (dp_clock_modelled())
        P.start_ns = work_start_ns >= 0 ? work_start_ns : end_ns, ns = (double)(end_ns - P.start_ns);
    else if (P.cpu_clock)
        ns = (double)(cpu_end_ns - P.cpu_start_ns);
    dp_ledger_measure(entry, 1, ns, allocated, released);
    P.total_ns += ns;
    log_call(entry, P.start_ns, P.start_ns + (int64_t)ns, seq, work_flops, work_bytes);
    return rc;
}

int dp_profile_collect(dp_device *dev) {
    if (P.n_pending == 0 || !dev->ops->timer_ms) {
        release_pending();
        return DP_OK;
    }
    /* Calls are placed on the engine clock from the first one's host start, by device time: the
     * queue runs them in order, so they never overlap, and all of them ended before the sync
     * that preceded this collect returned. */
    pending_call *first = &P.pending[0];
    for (size_t i = 0; i < P.n_pending; i++) {
        pending_call *c = &P.pending[i];
        if (!c->from || !c->to) continue;
        double ms = dev->ops->timer_ms(dev, c->from, c->to);
        double offset_ms = dev->ops->timer_ms(dev, first->from, c->from);
        if (!(ms >= 0) || !(offset_ms >= 0)) continue;
        double ns = ms * 1e6;
        dp_ledger_measure(c->entry, 1, ns, 0, 0);
        P.total_ns += ns;
        int64_t start = first->host_start_ns + (int64_t)(offset_ms * 1e6);
        log_call(c->entry, start, start + (int64_t)ns, c->seq, c->flops, c->bytes);
    }
    release_pending();
    return DP_OK;
}

void dp_profile_cpu_clock(int on) { P.cpu_clock = on != 0; }

double dp_profile_total_ns(void) { return P.total_ns; }

size_t dp_profile_call_count(void) { return P.n_log; }

const dp_profile_call *dp_profile_call_at(size_t i) { return i < P.n_log ? &P.log[i] : NULL; }

uint64_t dp_profile_calls_dropped(void) { return P.dropped; }

double dp_profile_overhead_ns(dp_device *dev, int n) {
    if (n <= 0) n = 1;
    int was_dry = P.dry, depth = P.depth;
    P.dry = 1;
    P.depth = 0;
    int64_t t0 = dp_clock_ns();
    for (int i = 0; i < n; i++) dp_profile_end(dev, (dp_profile_begin(dev), DP_OK));
    int64_t t1 = dp_clock_ns();
    P.dry = was_dry;
    P.depth = depth;
    return (double)(t1 - t0) / n;
}

void dp_profile_shutdown(void) {
    release_pending();
    free(P.pending);
    free(P.log);
    P.pending = NULL, P.log = NULL;
    P.cap_pending = P.n_pending = P.n_log = 0;
    dp_profile_active = 0;
}
