/* ledger.h: per-run accounting of work. Every op adds its floating-point operations and the
 * bytes it reads plus writes in device memory, keyed by op name. The ledger is device
 * independent, so the plan backend fills it exactly as the CPU and CUDA backends do. With
 * profile = "ops" (profile.h) each entry also gathers the measured time of its calls and the
 * tagged bytes allocated and freed for them.
 *
 * A section (dp_ledger_section) sets work apart: while one is open, an op is recorded under
 * "<section>:<op>" ("recompute:gemm" for an activation checkpoint's recomputed forward), so the
 * same op inside and outside it are two entries. */
#ifndef DP_LEDGER_H
#define DP_LEDGER_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_ledger_entry {
    const char *op;      /* the name: the op's literal, or "<section>:<op>" (owned by the ledger) */
    const char *base;    /* the op's literal */
    const char *section; /* the section's literal it was recorded in, or NULL */
    uint64_t calls;
    double flops;
    double bytes; /* read + written */
    double model_ns; /* the modelled time of its calls while the clock was modelled (clock.h), ns */
    /* measured (profile.h), zero unless profiling was on: */
    uint64_t timed_calls;              /* backend calls timed for this op */
    double time_ns;                    /* their device time, ns */
    uint64_t alloc_bytes, freed_bytes; /* tagged bytes allocated / freed for them */
} dp_ledger_entry;

/* Adds one call of op (a string literal) with its flops and bytes to the process's ledger, and
 * advances a modelled clock (clock.h) by its modelled time. */
void dp_ledger_add(const char *op, double flops, double bytes);
/* Number of distinct ops recorded. */
size_t dp_ledger_count(void);
/* Entry i, in order of first use; NULL when out of range. */
const dp_ledger_entry *dp_ledger_at(size_t i);
/* Index of the entry dp_ledger_add touched last; SIZE_MAX when none since the last reset. */
size_t dp_ledger_last(void);
/* The flops and bytes of the adds made since the last call of this function, while they were to
 * one entry (an add to another entry starts over), into *flops and *bytes; resets them. Returns
 * the number of adds made so far (a call that took no new add has the same number). */
uint64_t dp_ledger_take_work(double *flops, double *bytes);
/* The engine clock (dp_clock_ns) just before the first of the adds dp_ledger_take_work would take
 * now; -1 when there are none. On a modelled clock a profiled call spans from there to now. */
int64_t dp_ledger_work_start_ns(void);
/* Adds a measurement to entry i (ignored when out of range): calls timed, their time in ns, the
 * tagged bytes allocated and freed for them. */
void dp_ledger_measure(size_t i, uint64_t calls, double time_ns, uint64_t alloc_bytes, uint64_t freed_bytes);
/* Sums over all ops into *flops and *bytes (either may be NULL). */
void dp_ledger_totals(double *flops, double *bytes);
/* Opens section (a string literal; NULL closes it) for the ops recorded from now on; returns the
 * section that was open, to restore it. */
const char *dp_ledger_section(const char *section);
/* Forgets every entry. */
void dp_ledger_reset(void);
/* Frees the ledger's storage (process end). */
void dp_ledger_shutdown(void);

#endif
