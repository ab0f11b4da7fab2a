/* dpplot_results.h: a results directory read into plain structs (docs/results.md, schema 1).
 *
 * Only what the charts and summaries need is kept. Fields that dpprof writes in two forms are
 * read from dpprof's exact form first and the legacy form second (memory.peak_bytes, then
 * peak_memory_mb; timing.avg_ms, then avg_time_ms; memory.categories, then breakdown). Every
 * problem found (file unreadable, invalid JSON, a field missing or of the wrong type) is added to
 * the caller's problem list as one line naming the file and the field, and reading goes on with
 * whatever else the file holds. Byte figures are bytes (double: exact up to 2^53). */
#ifndef DPPLOT_RESULTS_H
#define DPPLOT_RESULTS_H

#include <stddef.h>

#include "dpplot_palette.h"
#include "dpplot_strlist.h"
#include "results_schema.h"

/* A result's status: the schema's statuses (common/results_schema.h) in its order, then UNKNOWN. */
typedef enum {
#define DPPLOT_STATUS_ENUM(id, name) DPPLOT_STATUS_##id,
    DPR_STATUSES(DPPLOT_STATUS_ENUM)
#undef DPPLOT_STATUS_ENUM
        DPPLOT_STATUS_UNKNOWN
} dpplot_status;

/* One swept variable of a sweep point: a number or a string. */
typedef struct {
    char *key;     /* e.g. "seq_len" */
    int is_number; /* 1: number holds the value; 0: text does */
    double number;
    char *text; /* string value, or the number printed ("%g") */
} dpplot_vary;

/* One phase span on the timeline's clock. */
typedef struct {
    int phase; /* dpplot_phase */
    int iter;  /* 0 = warm-up */
    double start_ms, end_ms;
} dpplot_span;

/* One op of a per-op profile (profile.ops[]); totals over the profile's timed iterations. */
typedef struct {
    char *op;
    dpplot_op_category category;
    double calls, ms, flops, bytes;
    double flops_per_s, bytes_per_s;           /* NaN when not measured */
    double flops_fraction, bandwidth_fraction; /* of the device's peak; NaN when unknown */
    double alloc_bytes;
} dpplot_op;

/* A snapshot the script took itself (snapshots[i].custom), marked on timelines. */
typedef struct {
    char *name;
    double t_ms;
} dpplot_mark;

/* The legacy "breakdown" object, in MiB (NaN where absent and not derivable). */
typedef enum {
    DPPLOT_LEGACY_MODEL_PARAMETERS,
    DPPLOT_LEGACY_OPTIMIZER_STATES,
    DPPLOT_LEGACY_GRADIENTS,
    DPPLOT_LEGACY_ACTIVATION_HOOKS,
    DPPLOT_LEGACY_NORM_SAMPLES,
    DPPLOT_LEGACY_TEMP_MATRICES,
    DPPLOT_LEGACY_TOTAL_ALLOCATED,
    DPPLOT_LEGACY_PEAK_ALLOCATED,
    DPPLOT_N_LEGACY
} dpplot_legacy;

/* One results file. Strings are owned (freed by dpplot_results_release) and never NULL unless
 * noted. */
typedef struct {
    char *file;         /* base name, e.g. "ghost.json" */
    char *experiment;   /* "experiment", else the file name without .json */
    char *method;       /* "method", else config.method, else "unknown" */
    char *label;        /* short name for charts: the method, or the experiment where methods repeat
                           (set by dpplot_results_load) */
    char *method_style; /* the method, with its clipping style when not flat: "flash_clip (per_block)" */
    dpplot_status status;
    char *message;  /* "message" (NULL when absent) */
    int predicted;  /* 1: plan backend estimate */
    int calibrated; /* 1: its times are a calibrated estimate (timing.estimate.method "calibrated: ..."), 0: roofline */
    int loaded;     /* 1: taken on a loaded machine (environment.host_load.loaded) */
    double others_share; /* environment.host_load.others_share: the CPUs other processes kept busy, NaN when absent */

    int has_peak;                                      /* peak_bytes is known */
    double peak_bytes, reserved_peak_bytes, end_bytes; /* reserved/end: NaN when absent */
    int has_time;                                      /* avg_ms is known */
    double avg_ms;
    double phase_ms[DPPLOT_N_PHASES]; /* timing.phases_ms, NaN when absent */

    int has_components;                          /* component_bytes is known (from memory.categories or breakdown) */
    int components_exact;                        /* component_bytes is from memory.categories (not the breakdown) */
    double component_bytes[DPPLOT_N_COMPONENTS]; /* live at the peak; OTHER absorbs the rest */
    double legacy_mb[DPPLOT_N_LEGACY];           /* the legacy breakdown object, MiB */
    int has_modules;
    double module_bytes[DPPLOT_N_MODULE_GROUPS]; /* live at the peak, summed per group */

    size_t n_timeline; /* memory.timeline, else snapshots (timestamp s -> ms) */
    double *t_ms, *allocated_bytes, *reserved_bytes;
    size_t n_spans;
    dpplot_span *spans;

    char *sweep_name; /* NULL when not a sweep point */
    size_t n_vary;
    dpplot_vary *vary;

    double oom_requested_bytes;      /* oom.requested_bytes, NaN when absent */
    char *oom_category, *oom_module; /* NULL when absent */

    /* config.model echoes used in titles; NaN / NULL when absent */
    double seq_len, batch, layers, hidden;
    char *arch, *dtype;
    char *device_name; /* environment.device_name, NULL when absent */
    /* What else the configuration fixes, named in titles and summaries: the checkpoint's directory
     * name (config.model.path's last part), LoRA's rank (config.model.lora.rank; 0 for lora = null,
     * full fine-tuning; NaN when the file does not say) and targets joined by "," (NULL without),
     * the optimizer (config.optimizer.name) and a distributed run's strategy and world size
     * (distributed.*; NULL / NaN for one process). */
    char *model_name, *lora_targets, *optimizer, *strategy;
    double lora_rank, world_size;

    /* The plan budget of a predicted result (plan.*): fit is 1 when plan.fits holds, 0 when it does not,
     * -1 when the result has no budget (not a plan run). card_bytes (plan.memory_bytes) and budget_bytes
     * (plan.budget_bytes) are NaN when absent; device_model (plan.device_model) NULL when absent. A
     * predicted result's reserved_peak_bytes is plan.predicted_reserved_bytes (lua/dpprof/plan.lua's one
     * definition: the allocated peak plus the pool's overhead), not memory.reserved_peak_bytes. */
    int fit;
    double card_bytes, budget_bytes;
    char *device_model;
    double gradients_peak_bytes; /* memory.categories.gradients.peak_bytes: their own peak; NaN when absent */
    /* plan.checkpoint_advice (a sweep point beyond the card, or fitting only with checkpointing): advice is -1
     * when absent, 1 when advice_checkpoint ("blocks", "4") makes it fit, 0 when not even that does; the
     * estimated step times with it and without checkpointing, and its reserved peak. */
    int advice;
    char advice_checkpoint[24];
    double advice_step_ms, advice_reference_ms, advice_reserved_bytes;

    /* The analyses beyond peak and time (results_load.c, read_analyses). */
    /* The step time's spread: over repeated runs (repeats.avg_ms, n_runs > 1), else over the
     * iterations (timing.median_ms, min_ms, max_ms); NaN when unknown. */
    int n_runs;
    double time_mid_ms, time_lo_ms, time_hi_ms;
    /* Memory by phase (memory.phases): bytes live at each phase's peak by component, the peak and
     * the end; NaN where a phase is absent. has_phase_memory: any phase read. */
    int has_phase_memory;
    double phase_peak_bytes[DPPLOT_N_PHASES], phase_end_bytes[DPPLOT_N_PHASES];
    double phase_components[DPPLOT_N_PHASES][DPPLOT_N_COMPONENTS];
    double host_peak_rss_bytes; /* memory.host_peak_rss_bytes, NaN when absent */
    /* The per-op profile (profile = "ops"): ops largest time first; per-iteration sums by category. */
    size_t n_ops;
    dpplot_op *ops;
    double profile_iters; /* 0 without a profile */
    int profile_predicted;
    double profile_overhead_ms;          /* per iteration, NaN when absent */
    double opcat_ms[DPPLOT_N_OPCATS];    /* per iteration */
    double opcat_bytes[DPPLOT_N_OPCATS]; /* bytes moved per iteration */
    size_t n_marks;
    dpplot_mark *marks;
    /* Each timed step of a run with Poisson batches or samples of their own lengths (steps[]):
     * its index (steps[].step) and peak (steps[].peak_bytes); n_steps 0 without steps. */
    size_t n_steps;
    double *step_index, *step_peak_bytes;
    /* Adaptive clipping's bound at each logical step (clipping.adaptive.steps[].bound, in order,
     * then the last step's next bound): n_bounds 0 without adaptive clipping. */
    size_t n_bounds;
    double *bounds;
} dpplot_result;

typedef struct {
    dpplot_result *items; /* sorted: method rank, then method, then sweep values, then file */
    size_t n;
} dpplot_results;

/* Reads every *.json in dir (not recursive; Chrome trace files are skipped) into out, sorted.
 * Problems go to `problems` (one line each, naming file and field). Returns 0 when the directory
 * was read (even if some files were malformed), -1 when it cannot be opened or memory ran out;
 * out is valid (maybe empty) either way and must be released. */
int dpplot_results_load(const char *dir, dpplot_results *out, dpplot_strlist *problems);
/* Parses one results document (JSON text) named `file` and appends it to rs; problems as above.
 * Returns 0 when added, 1 when the text was not a results document (skipped), -1 on invalid
 * JSON or out of memory (a problem is recorded). Call dpplot_results_finish after the last. */
int dpplot_results_add_json(dpplot_results *rs, const char *file, const char *json, dpplot_strlist *problems);
/* Sorts the results and sets their chart labels (done by dpplot_results_load). */
void dpplot_results_finish(dpplot_results *rs);
/* Frees everything rs owns; rs is then empty. */
void dpplot_results_release(dpplot_results *rs);

/* Name of a status ("ok", "oom", ...). */
const char *dpplot_status_name(dpplot_status s);
/* The vary entry for key in r, or NULL. */
const dpplot_vary *dpplot_result_vary(const dpplot_result *r, const char *key);

#endif
