/* ledger.c: a small array of entries; op names are compared by pointer first (literals), then
 * by content, so the same name from two translation units still lands in one entry. */
#include "ledger.h"

#include "clock.h"

#include <stdlib.h>
#include <string.h>

static dp_ledger_entry *entries;
static size_t n_entries, cap_entries;
static size_t last = SIZE_MAX;

void dp_ledger_add(const char *op, double flops, double bytes) {
    dp_clock_advance(flops, bytes);
    size_t i;
    for (i = 0; i < n_entries; i++)
        if (entries[i].op == op) break;
    if (i == n_entries)
        for (i = 0; i < n_entries; i++)
            if (strcmp(entries[i].op, op) == 0) break;
    if (i == n_entries) {
        if (n_entries == cap_entries) {
            size_t n = cap_entries ? 2 * cap_entries : 64;
            dp_ledger_entry *p = realloc(entries, n * sizeof *p);
            if (!p) return; /* accounting is best effort when the host is out of memory */
            entries = p;
            cap_entries = n;
        }
        entries[n_entries++] = (dp_ledger_entry){.op = op};
    }
    entries[i].calls++;
    entries[i].flops += flops;
    entries[i].bytes += bytes;
    last = i;
}

size_t dp_ledger_count(void) { return n_entries; }

const dp_ledger_entry *dp_ledger_at(size_t i) { return i < n_entries ? &entries[i] : NULL; }

size_t dp_ledger_last(void) { return last; }

void dp_ledger_measure(size_t i, uint64_t calls, double time_ns, uint64_t alloc_bytes, uint64_t freed_bytes) {
    if (i >= n_entries) return;
    entries[i].timed_calls += calls;
    entries[i].time_ns += time_ns;
    entries[i].alloc_bytes += alloc_bytes;
    entries[i].freed_bytes += freed_bytes;
}

void dp_ledger_totals(double *flops, double *bytes) {
    double f = 0, b = 0;
    for (size_t i = 0; i < n_entries; i++) {
        f += entries[i].flops;
        b += entries[i].bytes;
    }
    if (flops) *flops = f;
    if (bytes) *bytes = b;
}

void dp_ledger_reset(void) {
    n_entries = 0;
    last = SIZE_MAX;
}

void dp_ledger_shutdown(void) {
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    last = SIZE_MAX;
}
