/* memory.h: the tagged allocator and its probes.
 *
 * Every device allocation of the engine goes through a dp_mem: it carries a category (what the
 * bytes are for) and a module id (which part of the model asked, from scope.h). The allocator
 * keeps exact byte counts of requested sizes: current and peak per category and in total, the
 * bytes live per category and per module at the moment of the total peak, reserved bytes as the
 * device pool reports them, named snapshots and a bounded event log from which the timeline is
 * drawn. The raw memory comes from a dp_raw_allocator supplied by the device (malloc, a CUDA
 * memory pool, or nothing at all for the plan backend). Not thread-safe: the host engine is
 * single-threaded; kernels run in parallel below it. */
#ifndef DP_MEMORY_H
#define DP_MEMORY_H

#include "memory_categories.h"

#include <stddef.h>
#include <stdint.h>

/* What the bytes are for: DP_CAT_PARAMETERS, ... in common/memory_categories.h's order. */
typedef enum {
#define DP_CAT_ENUM(id, name, legacy, component) DP_CAT_##id,
    DPR_MEMORY_CATEGORIES(DP_CAT_ENUM)
#undef DP_CAT_ENUM
        DP_CAT_COUNT
} dp_category;

/* The category's name ("parameters", "gradients", ...), "?" when out of range. */
const char *dp_category_name(dp_category c);
/* Parses a category name; returns 0 and sets *out, or -1 when unknown. */
int dp_category_parse(const char *name, dp_category *out);
/* All category names joined by ", " (for error messages listing the valid choices). */
const char *dp_category_list(void);

/* Where raw bytes come from. alloc returns DP_OK and *ptr (NULL allowed for the plan backend
 * and for zero bytes), DP_EOOM when the device has no room, another code on failure (with
 * dp_error_set). reserved reports the pool's reserved bytes, or is NULL when reserved equals
 * allocated. */
typedef struct dp_raw_allocator {
    void *ctx;
    int (*alloc)(void *ctx, size_t bytes, void **ptr);
    void (*free)(void *ctx, void *ptr, size_t bytes);
    uint64_t (*reserved)(void *ctx);
} dp_raw_allocator;

/* One live allocation. Owned by whoever holds it; release with dp_mem_release. */
typedef struct dp_alloc {
    void *ptr;
    uint64_t bytes;
    uint32_t module;
    uint8_t category;
    uint8_t live;   /* 1 between a successful alloc and its release */
    uint32_t epoch; /* the allocator's hold epoch when it was made (dp_mem_hold_live) */
} dp_alloc;

typedef struct dp_mem_stats {
    uint64_t current[DP_CAT_COUNT];      /* bytes live now, per category */
    uint64_t peak[DP_CAT_COUNT];         /* each category's own peak since the last reset */
    uint64_t live_at_peak[DP_CAT_COUNT]; /* bytes live per category when the total peaked */
    uint64_t total_current, total_peak;
    uint64_t reserved_current, reserved_peak;
    uint64_t n_allocs, n_frees, n_live;
    int64_t peak_t_ns; /* clock time of the total peak */
    /* what was live when dp_mem_hold_live began the figures above and is still live, per
     * category and in all: left out of every other figure (0 when nothing is held) */
    uint64_t held[DP_CAT_COUNT];
    uint64_t held_total;
} dp_mem_stats;

typedef struct dp_mem_snapshot {
    char *name;
    double t_s;         /* dp_clock_s() when taken */
    uint64_t allocated; /* total bytes live */
    uint64_t reserved;
    uint64_t categories[DP_CAT_COUNT];
} dp_mem_snapshot;

/* One change of allocated bytes. After compaction (see dp_mem_event_stride) one event stands
 * for several: delta is their sum and allocated/reserved are their maxima. */
typedef struct dp_mem_event {
    int64_t t_ns;
    int64_t delta;      /* +bytes for an allocation, -bytes for a release */
    uint64_t allocated; /* total allocated after the event */
    uint64_t reserved;  /* reserved after the event */
    uint32_t module;
    uint8_t category;
} dp_mem_event;

/* What an allocation that did not fit asked for, and what was live then. */
typedef struct dp_oom_info {
    uint64_t requested;
    dp_category category;
    uint32_t module;
    uint64_t live[DP_CAT_COUNT];
    uint64_t total_live;
    uint64_t limit; /* the configured limit that refused it, 0 when the device refused */
    int valid;      /* 0 until an OOM happened */
} dp_oom_info;

typedef struct dp_mem dp_mem;

/* Creates an allocator over raw (copied); event_capacity bounds the event log (0 = default
 * 262144 events). Returns NULL when out of host memory. */
dp_mem *dp_mem_new(const dp_raw_allocator *raw, size_t event_capacity);
/* Frees the allocator's bookkeeping (not the live allocations: their owners must release them
 * first; dp_mem_stats.n_live tells how many are left). NULL is a no-op. */
void dp_mem_destroy(dp_mem *m);

/* Allocates bytes tagged with cat and the current scope's module. Returns DP_OK and fills *out;
 * DP_EOOM with dp_mem_last_oom() describing the request; DP_EINVAL for a bad category. */
int dp_mem_alloc(dp_mem *m, uint64_t bytes, dp_category cat, dp_alloc *out);
/* Same as dp_mem_alloc with an explicit module id. */
int dp_mem_alloc_module(dp_mem *m, uint64_t bytes, dp_category cat, uint32_t module, dp_alloc *out);
/* Releases a live allocation and marks it dead; a dead or zeroed dp_alloc is a no-op. */
void dp_mem_release(dp_mem *m, dp_alloc *a);

/* Moves a live allocation to another category and module (an owner taking over a buffer another
 * made: the bytes are counted where they now serve). Totals are unchanged; a peak reached before
 * keeps its old figures; the event log gets the move as a release and an allocation at the same
 * total. DP_EINVAL for a dead allocation, a bad category or the workspace. */
int dp_mem_retag(dp_mem *m, dp_alloc *a, dp_category cat, uint32_t module);
/* Copies the current figures into *out. */
void dp_mem_get_stats(dp_mem *m, dp_mem_stats *out);
/* Per-module figures for module id: bytes live now, its peak, and bytes live at the total peak. */
void dp_mem_module_stats(dp_mem *m, uint32_t module, uint64_t *current, uint64_t *peak, uint64_t *live_at_peak);
/* Starts new peaks: every peak and live-at-peak figure becomes the current one. */
void dp_mem_reset_peak(dp_mem *m);
/* Begins figures of their own (an experiment's): what is live now, but for the workspace
 * category (a device holds it from its start, and it is every experiment's), is held: left out
 * of every figure, the peaks, modules, snapshots and the event log, and reported as
 * dp_mem_stats.held; released, a held allocation leaves the held bytes. The limit still counts
 * it (the device holds it). Peaks are reset. A hold already begun ends first. */
void dp_mem_hold_live(dp_mem *m);
/* Ends the hold: the held bytes that are still live count again as any others. */
void dp_mem_end_hold(dp_mem *m);

/* A window's figures (e.g. one training phase): the highest total since dp_mem_window_reset and
 * the bytes live per category at that moment. Independent of the peaks above. */
typedef struct dp_mem_window {
    uint64_t peak;
    uint64_t live_at_peak[DP_CAT_COUNT];
    int64_t peak_t_ns; /* clock time of the window's peak */
} dp_mem_window;

/* Starts a new window at the current figures. */
void dp_mem_window_reset(dp_mem *m);
/* Copies the window's figures into *out. */
void dp_mem_window_get(dp_mem *m, dp_mem_window *out);
/* Bytes allocated and released since the allocator was made (monotonic; either may be NULL). */
void dp_mem_traffic(const dp_mem *m, uint64_t *allocated, uint64_t *released);

/* Refuses allocations that would take the total past limit bytes (0 = no limit). */
void dp_mem_set_limit(dp_mem *m, uint64_t limit);
/* The configured limit (0 = none). */
uint64_t dp_mem_limit(const dp_mem *m);
/* The last OOM's description (valid == 0 if none happened). */
const dp_oom_info *dp_mem_last_oom(const dp_mem *m);

/* Records a named snapshot of the current figures. Returns DP_OK or DP_EOOM (host memory). */
int dp_mem_snapshot_take(dp_mem *m, const char *name);
/* Number of snapshots taken since the last clear. */
size_t dp_mem_snapshot_count(const dp_mem *m);
/* Snapshot i (0-based, in order taken), NULL when out of range. */
const dp_mem_snapshot *dp_mem_snapshot_at(const dp_mem *m, size_t i);
/* Forgets all snapshots. */
void dp_mem_clear_snapshots(dp_mem *m);

/* Number of events in the log. */
size_t dp_mem_event_count(const dp_mem *m);
/* Event i (0-based, oldest first), NULL when out of range. */
const dp_mem_event *dp_mem_event_at(const dp_mem *m, size_t i);
/* How many raw events each logged event stands for (1 until the log first filled up). */
uint64_t dp_mem_event_stride(const dp_mem *m);
/* Empties the event log (and resets the stride to 1). */
void dp_mem_clear_events(dp_mem *m);

/* Downsamples the event log to at most max_points points: t_ns[i], allocated[i] and reserved[i]
 * are each bucket's maxima (taken at the time of its largest allocated figure), so the peak
 * survives. The arrays must hold max_points entries; returns the number of points written. */
size_t dp_mem_timeline(const dp_mem *m, size_t max_points, int64_t *t_ns, uint64_t *allocated, uint64_t *reserved);

#endif
