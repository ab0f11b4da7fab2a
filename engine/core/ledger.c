/* ledger.c: a small array of entries; op names are compared by pointer first (literals), then
 * by content, so the same name from two translation units still lands in one entry. An entry of a
 * section owns its "<section>:<op>" name. */
#include "ledger.h"

#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dp_ledger_entry *entries;
static size_t n_entries, cap_entries;
static size_t last = SIZE_MAX;
static const char *open_section;
/* the work of the adds to one entry since the last dp_ledger_take_work, and the adds so far */
static size_t work_entry = SIZE_MAX;
static double work_flops, work_bytes;
static int64_t work_start_ns = -1; /* the engine clock before the first of those adds; -1: none */
static uint64_t add_seq;

static int same(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* "<section>:<op>", or op itself outside a section; NULL when out of host memory */
static const char *entry_name(const char *op, const char *section) {
    if (!section) return op;
    size_t n = strlen(section) + strlen(op) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s:%s", section, op);
    return s;
}

void dp_ledger_add(const char *op, double flops, double bytes) {
    int64_t before_ns = dp_clock_ns();
    double ns = dp_clock_advance_op(op, flops, bytes);
    add_seq++;
    const char *section = open_section;
    size_t i;
    for (i = 0; i < n_entries; i++)
        if (entries[i].base == op && entries[i].section == section) break;
    if (i == n_entries)
        for (i = 0; i < n_entries; i++)
            if (same(entries[i].base, op) && same(entries[i].section, section)) break;
    if (i == n_entries) {
        if (n_entries == cap_entries) {
            size_t n = cap_entries ? 2 * cap_entries : 64;
            dp_ledger_entry *p = realloc(entries, n * sizeof *p);
            if (!p) return; /* accounting is best effort when the host is out of memory */
            entries = p;
            cap_entries = n;
        }
        const char *name = entry_name(op, section);
        if (!name) return;
        entries[n_entries++] = (dp_ledger_entry){.op = name, .base = op, .section = section};
    }
    entries[i].calls++;
    entries[i].flops += flops;
    entries[i].bytes += bytes;
    entries[i].model_ns += ns;
    if (i != work_entry) work_entry = i, work_flops = work_bytes = 0, work_start_ns = -1;
    if (work_start_ns < 0) work_start_ns = before_ns;
    work_flops += flops;
    work_bytes += bytes;
    last = i;
}

const char *dp_ledger_section(const char *section) {
    const char *was = open_section;
    open_section = section;
    return was;
}

size_t dp_ledger_count(void) { return n_entries; }

const dp_ledger_entry *dp_ledger_at(size_t i) { return i < n_entries ? &entries[i] : NULL; }

size_t dp_ledger_last(void) { return last; }

int64_t dp_ledger_work_start_ns(void) { return work_start_ns; }

uint64_t dp_ledger_take_work(double *flops, double *bytes) {
    *flops = work_flops, *bytes = work_bytes;
    work_flops = work_bytes = 0;
    work_start_ns = -1;
    return add_seq;
}

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
    for (size_t i = 0; i < n_entries; i++)
        if (entries[i].section) free((char *)entries[i].op);
    n_entries = 0;
    last = SIZE_MAX;
    work_entry = SIZE_MAX;
    work_flops = work_bytes = 0;
    work_start_ns = -1;
}

void dp_ledger_shutdown(void) {
    dp_ledger_reset();
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    last = SIZE_MAX;
    open_section = NULL;
}
