/* ledger.c: a small array of entries; op names are compared by pointer first (literals), then
 * by content, so the same name from two translation units still lands in one entry. */
#include "ledger.h"

#include <stdlib.h>
#include <string.h>

static dp_ledger_entry *entries;
static size_t n_entries, cap_entries;

void dp_ledger_add(const char *op, double flops, double bytes) {
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
        entries[n_entries++] = (dp_ledger_entry){op, 0, 0.0, 0.0};
    }
    entries[i].calls++;
    entries[i].flops += flops;
    entries[i].bytes += bytes;
}

size_t dp_ledger_count(void) { return n_entries; }

const dp_ledger_entry *dp_ledger_at(size_t i) { return i < n_entries ? &entries[i] : NULL; }

void dp_ledger_totals(double *flops, double *bytes) {
    double f = 0, b = 0;
    for (size_t i = 0; i < n_entries; i++) {
        f += entries[i].flops;
        b += entries[i].bytes;
    }
    if (flops) *flops = f;
    if (bytes) *bytes = b;
}

void dp_ledger_reset(void) { n_entries = 0; }

void dp_ledger_shutdown(void) {
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
}
