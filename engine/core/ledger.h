/* ledger.h: per-run accounting of work. Every op adds its floating-point operations and the
 * bytes it reads plus writes in device memory, keyed by op name. The ledger is device
 * independent, so the plan backend fills it exactly as the CPU and CUDA backends do.
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
} dp_ledger_entry;

/* Adds one call of op (a string literal) with its flops and bytes to the process's ledger. */
void dp_ledger_add(const char *op, double flops, double bytes);
/* Number of distinct ops recorded. */
size_t dp_ledger_count(void);
/* Entry i, in order of first use; NULL when out of range. */
const dp_ledger_entry *dp_ledger_at(size_t i);
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
