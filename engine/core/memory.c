/* memory.c: the tagged allocator.
 *
 * Live-at-peak figures are copied lazily: a new total peak only sets peak_pending; the first
 * release after it (or a stats read) copies the per-category and per-module current figures,
 * which still equal those at the peak because nothing was released in between. So an
 * allocation costs O(1) however many modules there are. */
#include "memory.h"

#include "clock.h"
#include "error.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_EVENT_CAPACITY 262144u

/* The names, from common/memory_categories.h. */
#define DP_CAT_NAME(id, name, legacy, component) name,
static const char *const category_names[DP_CAT_COUNT] = {DPR_MEMORY_CATEGORIES(DP_CAT_NAME)};
#undef DP_CAT_NAME

struct dp_mem {
    dp_raw_allocator raw;
    dp_mem_stats s;
    int peak_pending;
    dp_mem_window win;
    int win_pending; /* as peak_pending, for the window */
    uint64_t allocated_total, released_total;
    uint64_t limit;
    dp_oom_info oom;

    uint64_t *mod_current, *mod_peak, *mod_live_at_peak; /* indexed by module id */
    uint64_t *mod_held;      /* held bytes per module (dp_mem_hold_live) */
    uint64_t *mod_workspace; /* live workspace bytes per module, held or not */
    uint32_t n_mod;

    /* the hold: allocations made before epoch hold_epoch (0: none held) outside the workspace
     * category are held; epoch counts the holds begun */
    uint32_t epoch, hold_epoch;
    uint64_t cat_live_n[DP_CAT_COUNT]; /* live allocations per category, held or not */
    uint64_t held_n_live;

    dp_mem_snapshot *snaps;
    size_t n_snaps, cap_snaps;

    dp_mem_event *events;
    size_t n_events, cap_events;
    uint64_t stride;      /* raw events per logged event */
    dp_mem_event pending; /* raw events merged so far into the next logged one */
    uint64_t n_pending;
};

const char *dp_category_name(dp_category c) { return (unsigned)c < DP_CAT_COUNT ? category_names[c] : "?"; }

int dp_category_parse(const char *name, dp_category *out) {
    for (int i = 0; i < DP_CAT_COUNT; i++)
        if (strcmp(name, category_names[i]) == 0) {
            *out = (dp_category)i;
            return 0;
        }
    return -1;
}

const char *dp_category_list(void) {
#define DP_CAT_ITEM(id, name, legacy, component) ", " name
    static const char list[] = DPR_MEMORY_CATEGORIES(DP_CAT_ITEM);
#undef DP_CAT_ITEM
    return list + 2; /* past the first ", " */
}

dp_mem *dp_mem_new(const dp_raw_allocator *raw, size_t event_capacity) {
    dp_mem *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->raw = *raw;
    m->cap_events = event_capacity ? event_capacity : DEFAULT_EVENT_CAPACITY;
    if (m->cap_events < 2) m->cap_events = 2;
    m->events = malloc(m->cap_events * sizeof *m->events);
    if (!m->events) {
        free(m);
        return NULL;
    }
    m->stride = 1;
    return m;
}

void dp_mem_destroy(dp_mem *m) {
    if (!m) return;
    dp_mem_clear_snapshots(m);
    free(m->snaps);
    free(m->events);
    free(m->mod_current);
    free(m->mod_peak);
    free(m->mod_live_at_peak);
    free(m->mod_held);
    free(m->mod_workspace);
    free(m);
}

static int grow_array(uint64_t **arr, uint32_t old_n, uint32_t n) {
    uint64_t *p = realloc(*arr, (size_t)n * sizeof *p);
    if (!p) return -1;
    memset(p + old_n, 0, (size_t)(n - old_n) * sizeof *p);
    *arr = p;
    return 0;
}

/* Grows the per-module arrays to hold module. On failure the arrays that grew stay valid and
 * n_mod is unchanged, so the figures stay consistent. */
static int ensure_module(dp_mem *m, uint32_t module) {
    if (module < m->n_mod) return 0;
    uint32_t n = m->n_mod ? m->n_mod : 64;
    while (n <= module) n *= 2;
    if (grow_array(&m->mod_current, m->n_mod, n) || grow_array(&m->mod_peak, m->n_mod, n) ||
        grow_array(&m->mod_live_at_peak, m->n_mod, n) || grow_array(&m->mod_held, m->n_mod, n) ||
        grow_array(&m->mod_workspace, m->n_mod, n))
        return -1;
    m->n_mod = n;
    return 0;
}

static void settle_peak(dp_mem *m) {
    if (m->win_pending) {
        memcpy(m->win.live_at_peak, m->s.current, sizeof m->s.current);
        m->win_pending = 0;
    }
    if (!m->peak_pending) return;
    memcpy(m->s.live_at_peak, m->s.current, sizeof m->s.current);
    if (m->n_mod) memcpy(m->mod_live_at_peak, m->mod_current, m->n_mod * sizeof *m->mod_current);
    m->peak_pending = 0;
}

static uint64_t reserved_now(dp_mem *m) { return m->raw.reserved ? m->raw.reserved(m->raw.ctx) : m->s.total_current; }

/* Halves the log: each pair of events becomes one (max allocated, summed delta). */
static void compact_events(dp_mem *m) {
    size_t j = 0;
    for (size_t i = 0; i + 1 < m->n_events; i += 2) {
        dp_mem_event a = m->events[i], b = m->events[i + 1];
        dp_mem_event e = a.allocated >= b.allocated ? a : b;
        e.delta = a.delta + b.delta;
        e.reserved = a.reserved > b.reserved ? a.reserved : b.reserved;
        m->events[j++] = e;
    }
    if (m->n_events % 2) m->events[j++] = m->events[m->n_events - 1];
    m->n_events = j;
    m->stride *= 2;
}

static void log_event(dp_mem *m, int64_t delta, uint8_t cat, uint32_t module) {
    dp_mem_event e = {dp_clock_ns(), delta, m->s.total_current, m->s.reserved_current, module, cat};
    if (m->n_pending == 0) {
        m->pending = e;
    } else {
        int64_t sum = m->pending.delta + delta;
        uint64_t res = m->pending.reserved > e.reserved ? m->pending.reserved : e.reserved;
        if (e.allocated >= m->pending.allocated) m->pending = e;
        m->pending.delta = sum;
        m->pending.reserved = res;
    }
    if (++m->n_pending < m->stride) return;
    if (m->n_events == m->cap_events) compact_events(m);
    m->events[m->n_events++] = m->pending;
    m->n_pending = 0;
}

static void record_oom(dp_mem *m, uint64_t bytes, dp_category cat, uint32_t module, uint64_t limit) {
    m->oom.requested = bytes;
    m->oom.category = cat;
    m->oom.module = module;
    memcpy(m->oom.live, m->s.current, sizeof m->oom.live);
    m->oom.total_live = m->s.total_current;
    m->oom.limit = limit;
    m->oom.valid = 1;
    char live[512];
    size_t off = 0;
    for (int c = 0; c < DP_CAT_COUNT && off < sizeof live; c++) {
        if (!m->s.current[c]) continue;
        int n = snprintf(live + off, sizeof live - off, "%s%s=%.1f MiB", off ? ", " : "", category_names[c],
                         (double)m->s.current[c] / 1048576.0);
        if (n > 0) off += (size_t)n;
    }
    if (off == 0) snprintf(live, sizeof live, "nothing");
    char why[96] = "", held[96] = "";
    if (limit) snprintf(why, sizeof why, " (limit %.1f MiB)", (double)limit / 1048576.0);
    if (m->s.held_total)
        snprintf(held, sizeof held, "; and %.1f MiB live from before the experiment (held)",
                 (double)m->s.held_total / 1048576.0);
    dp_error_set(DP_EOOM,
                 "out of memory%s: requested %llu bytes (%.1f MiB) for %s in module %s; "
                 "live %.1f MiB: %s%s",
                 why, (unsigned long long)bytes, (double)bytes / 1048576.0, category_names[cat], dp_module_name(module),
                 (double)m->s.total_current / 1048576.0, live, held);
}

int dp_mem_alloc_module(dp_mem *m, uint64_t bytes, dp_category cat, uint32_t module, dp_alloc *out) {
    memset(out, 0, sizeof *out);
    if ((unsigned)cat >= DP_CAT_COUNT)
        return dp_error_set(DP_EINVAL, "unknown memory category %d (valid: %s)", (int)cat, dp_category_list());
    if (ensure_module(m, module) != 0) return dp_error_set(DP_EOOM, "out of host memory (module table)");
    if (m->limit && m->s.total_current + m->s.held_total + bytes > m->limit) {
        record_oom(m, bytes, cat, module, m->limit);
        return DP_EOOM;
    }
    void *ptr = NULL;
    int rc = m->raw.alloc(m->raw.ctx, (size_t)bytes, &ptr);
    if (rc == DP_EOOM) {
        record_oom(m, bytes, cat, module, 0);
        return DP_EOOM;
    }
    if (rc != DP_OK) return rc;

    out->ptr = ptr;
    out->bytes = bytes;
    out->module = module;
    out->category = (uint8_t)cat;
    out->live = 1;
    out->epoch = m->epoch;
    m->cat_live_n[cat]++;
    if (cat == DP_CAT_WORKSPACE) m->mod_workspace[module] += bytes;

    dp_mem_stats *s = &m->s;
    s->current[cat] += bytes;
    if (s->current[cat] > s->peak[cat]) s->peak[cat] = s->current[cat];
    m->mod_current[module] += bytes;
    if (m->mod_current[module] > m->mod_peak[module]) m->mod_peak[module] = m->mod_current[module];
    s->total_current += bytes;
    if (s->total_current > s->total_peak) {
        s->total_peak = s->total_current;
        s->peak_t_ns = dp_clock_ns();
        m->peak_pending = 1;
    }
    if (s->total_current > m->win.peak) {
        m->win.peak = s->total_current;
        m->win.peak_t_ns = dp_clock_ns();
        m->win_pending = 1;
    }
    m->allocated_total += bytes;
    s->reserved_current = reserved_now(m);
    if (s->reserved_current > s->reserved_peak) s->reserved_peak = s->reserved_current;
    s->n_allocs++;
    s->n_live++;
    log_event(m, (int64_t)bytes, (uint8_t)cat, module);
    return DP_OK;
}

int dp_mem_alloc(dp_mem *m, uint64_t bytes, dp_category cat, dp_alloc *out) {
    return dp_mem_alloc_module(m, bytes, cat, dp_scope_current(), out);
}

/* Whether a live allocation is held (made before the hold began, in a category not kept). */
static int is_held(const dp_mem *m, const dp_alloc *a) {
    return m->hold_epoch && a->epoch < m->hold_epoch && a->category != DP_CAT_WORKSPACE;
}

void dp_mem_release(dp_mem *m, dp_alloc *a) {
    if (!a || !a->live) return;
    settle_peak(m);
    m->raw.free(m->raw.ctx, a->ptr, (size_t)a->bytes);
    dp_mem_stats *s = &m->s;
    m->cat_live_n[a->category]--;
    if (a->category == DP_CAT_WORKSPACE) m->mod_workspace[a->module] -= a->bytes;
    if (is_held(m, a)) { /* it leaves the held bytes: the figures of the hold never counted it */
        s->held[a->category] -= a->bytes;
        s->held_total -= a->bytes;
        m->mod_held[a->module] -= a->bytes;
        m->held_n_live--;
        m->released_total += a->bytes;
        memset(a, 0, sizeof *a);
        return;
    }
    s->current[a->category] -= a->bytes;
    m->mod_current[a->module] -= a->bytes;
    s->total_current -= a->bytes;
    s->reserved_current = reserved_now(m);
    if (s->reserved_current > s->reserved_peak) s->reserved_peak = s->reserved_current;
    s->n_frees++;
    s->n_live--;
    m->released_total += a->bytes;
    log_event(m, -(int64_t)a->bytes, a->category, a->module);
    memset(a, 0, sizeof *a);
}

int dp_mem_retag(dp_mem *m, dp_alloc *a, dp_category cat, uint32_t module) {
    if (!a || !a->live) return dp_error_set(DP_EINVAL, "memory retag: the allocation is not live");
    if ((unsigned)cat >= DP_CAT_COUNT)
        return dp_error_set(DP_EINVAL, "unknown memory category %d (valid: %s)", (int)cat, dp_category_list());
    if (cat == DP_CAT_WORKSPACE || a->category == DP_CAT_WORKSPACE)
        return dp_error_set(DP_EINVAL, "memory retag: the workspace is the device's, never retagged");
    if (ensure_module(m, module) != 0) return dp_error_set(DP_EOOM, "out of host memory (module table)");
    if (a->category == cat && a->module == module) return DP_OK;
    settle_peak(m); /* a peak reached before is recorded with the bytes where they were */
    m->cat_live_n[a->category]--;
    m->cat_live_n[cat]++;
    if (is_held(m, a)) { /* held bytes move between the held figures only */
        m->s.held[a->category] -= a->bytes;
        m->s.held[cat] += a->bytes;
        m->mod_held[a->module] -= a->bytes;
        m->mod_held[module] += a->bytes;
    } else {
        dp_mem_stats *s = &m->s;
        s->current[a->category] -= a->bytes;
        m->mod_current[a->module] -= a->bytes;
        log_event(m, -(int64_t)a->bytes, a->category, a->module);
        s->current[cat] += a->bytes;
        if (s->current[cat] > s->peak[cat]) s->peak[cat] = s->current[cat];
        m->mod_current[module] += a->bytes;
        if (m->mod_current[module] > m->mod_peak[module]) m->mod_peak[module] = m->mod_current[module];
        log_event(m, (int64_t)a->bytes, (uint8_t)cat, module);
    }
    a->category = (uint8_t)cat;
    a->module = module;
    return DP_OK;
}

void dp_mem_get_stats(dp_mem *m, dp_mem_stats *out) {
    settle_peak(m);
    m->s.reserved_current = reserved_now(m);
    if (m->s.reserved_current > m->s.reserved_peak) m->s.reserved_peak = m->s.reserved_current;
    *out = m->s;
}

void dp_mem_module_stats(dp_mem *m, uint32_t module, uint64_t *current, uint64_t *peak, uint64_t *live_at_peak) {
    settle_peak(m);
    int known = module < m->n_mod;
    if (current) *current = known ? m->mod_current[module] : 0;
    if (peak) *peak = known ? m->mod_peak[module] : 0;
    if (live_at_peak) *live_at_peak = known ? m->mod_live_at_peak[module] : 0;
}

void dp_mem_reset_peak(dp_mem *m) {
    dp_mem_stats *s = &m->s;
    memcpy(s->peak, s->current, sizeof s->peak);
    memcpy(s->live_at_peak, s->current, sizeof s->live_at_peak);
    s->total_peak = s->total_current;
    s->peak_t_ns = dp_clock_ns();
    s->reserved_current = reserved_now(m);
    s->reserved_peak = s->reserved_current;
    if (m->n_mod) { /* the module arrays are NULL until the first allocation */
        memcpy(m->mod_peak, m->mod_current, m->n_mod * sizeof *m->mod_peak);
        memcpy(m->mod_live_at_peak, m->mod_current, m->n_mod * sizeof *m->mod_live_at_peak);
    }
    m->peak_pending = 0;
}

void dp_mem_end_hold(dp_mem *m) {
    if (!m->hold_epoch) return;
    dp_mem_stats *s = &m->s;
    for (int c = 0; c < DP_CAT_COUNT; c++) s->current[c] += s->held[c], s->held[c] = 0;
    for (uint32_t i = 0; i < m->n_mod; i++) m->mod_current[i] += m->mod_held[i], m->mod_held[i] = 0;
    s->total_current += s->held_total;
    s->held_total = 0;
    s->n_live += m->held_n_live;
    m->held_n_live = 0;
    m->hold_epoch = 0;
    s->reserved_current = reserved_now(m);
}

void dp_mem_hold_live(dp_mem *m) {
    dp_mem_end_hold(m);
    settle_peak(m);
    /* every live allocation was made at an epoch below the new one: those outside the
     * workspace are held, their bytes moved from the counted figures to the held ones */
    m->epoch++;
    m->hold_epoch = m->epoch;
    dp_mem_stats *s = &m->s;
    for (int c = 0; c < DP_CAT_COUNT; c++) {
        if (c == DP_CAT_WORKSPACE) continue;
        s->held[c] = s->current[c];
        s->held_total += s->current[c];
        s->current[c] = 0;
        m->held_n_live += m->cat_live_n[c];
    }
    s->total_current -= s->held_total;
    s->n_live -= m->held_n_live;
    for (uint32_t i = 0; i < m->n_mod; i++) {
        m->mod_held[i] = m->mod_current[i] - m->mod_workspace[i];
        m->mod_current[i] = m->mod_workspace[i];
    }
    dp_mem_reset_peak(m);
}

void dp_mem_window_reset(dp_mem *m) {
    m->win.peak = m->s.total_current;
    memcpy(m->win.live_at_peak, m->s.current, sizeof m->win.live_at_peak);
    m->win.peak_t_ns = dp_clock_ns();
    m->win_pending = 0;
}

void dp_mem_window_get(dp_mem *m, dp_mem_window *out) {
    settle_peak(m);
    *out = m->win;
}

void dp_mem_traffic(const dp_mem *m, uint64_t *allocated, uint64_t *released) {
    if (allocated) *allocated = m->allocated_total;
    if (released) *released = m->released_total;
}

void dp_mem_set_limit(dp_mem *m, uint64_t limit) { m->limit = limit; }

uint64_t dp_mem_limit(const dp_mem *m) { return m->limit; }

const dp_oom_info *dp_mem_last_oom(const dp_mem *m) { return &m->oom; }

int dp_mem_snapshot_take(dp_mem *m, const char *name) {
    if (m->n_snaps == m->cap_snaps) {
        size_t n = m->cap_snaps ? 2 * m->cap_snaps : 32;
        dp_mem_snapshot *p = realloc(m->snaps, n * sizeof *p);
        if (!p) return dp_error_set(DP_EOOM, "out of host memory (snapshots)");
        m->snaps = p;
        m->cap_snaps = n;
    }
    dp_mem_snapshot *sn = &m->snaps[m->n_snaps];
    sn->name = strdup(name ? name : "");
    if (!sn->name) return dp_error_set(DP_EOOM, "out of host memory (snapshot name)");
    sn->t_s = dp_clock_s();
    sn->allocated = m->s.total_current;
    m->s.reserved_current = reserved_now(m);
    if (m->s.reserved_current > m->s.reserved_peak) m->s.reserved_peak = m->s.reserved_current;
    sn->reserved = m->s.reserved_current;
    memcpy(sn->categories, m->s.current, sizeof sn->categories);
    m->n_snaps++;
    return DP_OK;
}

size_t dp_mem_snapshot_count(const dp_mem *m) { return m->n_snaps; }

const dp_mem_snapshot *dp_mem_snapshot_at(const dp_mem *m, size_t i) { return i < m->n_snaps ? &m->snaps[i] : NULL; }

void dp_mem_clear_snapshots(dp_mem *m) {
    for (size_t i = 0; i < m->n_snaps; i++) free(m->snaps[i].name);
    m->n_snaps = 0;
}

/* The log as readers see it: the logged events, then the partly merged one (if any). */
size_t dp_mem_event_count(const dp_mem *m) { return m->n_events + (m->n_pending > 0); }

const dp_mem_event *dp_mem_event_at(const dp_mem *m, size_t i) {
    if (i < m->n_events) return &m->events[i];
    return i == m->n_events && m->n_pending ? &m->pending : NULL;
}

uint64_t dp_mem_event_stride(const dp_mem *m) { return m->stride; }

void dp_mem_clear_events(dp_mem *m) {
    m->n_events = 0;
    m->n_pending = 0;
    m->stride = 1;
}

size_t dp_mem_timeline(const dp_mem *m, size_t max_points, int64_t *t_ns, uint64_t *allocated, uint64_t *reserved) {
    size_t n = dp_mem_event_count(m);
    if (max_points == 0 || n == 0) return 0;
    size_t points = n < max_points ? n : max_points;
    for (size_t p = 0; p < points; p++) {
        size_t lo = p * n / points, hi = (p + 1) * n / points; /* bucket [lo, hi), never empty */
        const dp_mem_event *best = dp_mem_event_at(m, lo);
        uint64_t res = best->reserved;
        for (size_t i = lo + 1; i < hi; i++) {
            const dp_mem_event *e = dp_mem_event_at(m, i);
            if (e->allocated > best->allocated) best = e;
            if (e->reserved > res) res = e->reserved;
        }
        t_ns[p] = best->t_ns;
        allocated[p] = best->allocated;
        reserved[p] = res;
    }
    return points;
}
