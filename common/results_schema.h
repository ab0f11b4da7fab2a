/* results_schema.h: the result JSON's fields (docs/results.md, schema_version 1), described once.
 *
 * Both sides of a result read this table: the writer's validator (lua/dpprof/results.lua walks it,
 * through dpprof.results_schema, made by lua/bind/lua_results_schema.c) and the chart reader
 * (plots/results_load.c reads each field by its id, DPR_<ID>, and checks that the type it reads
 * is the type described here). A field is added, renamed or retyped here, once.
 *
 * A path names a field below the top of the document: keys joined by ".", "[]" for each element
 * of an array ("snapshots[].name"), "{category}" for each of the engine's memory categories
 * (common/memory_categories.h; every one is required, no other key is allowed:
 * dpprof.memory.categories), "{phase}" for each of DPR_PHASES (every one required but those of
 * DPR_OPTIONAL_PHASES; under a row whose when is OPTIONAL, none: the phases that ran), "*" for any
 * key. A field's parent is described before it.
 *
 * when (below the top: wherever the parent is present): ALWAYS required; OK required in an ok
 * result (a failed run's config is what was asked for, before defaults: checked, not required);
 * FAILED required when status is not ok; OOM required when status is oom (except a Slurm task
 * stopped for its memory, which has no allocation to describe); PREDICTED required in an ok predicted (plan) result;
 * PARENT required wherever its parent is present; OPTIONAL never required. Whatever is present is checked, whatever
 * `when` says. Invariants that tie fields together (sums, orders, the plan's arithmetic, requirements that depend on
 * other fields' values) are the validator's code.
 *
 * flags: NONNEG (a number >= 0), NULLABLE (null allowed), OPEN (an object whose keys beyond
 * those described are part of the result too: configuration echoes, free-form fields), MARKS
 * (a key whose presence at the top marks a JSON document as meant to be a result).
 *
 * choices: NULL, or the name of the list the value must be in: the schema's own (statuses,
 * phases, samplings, bounds, profiles, op_categories, rss_since, below) or the engine's (formulations, accountants,
 * flash_impls, styles, clip_fns: the Lua side takes them from dpprof.dpsgd and dpprof.privacy; the chart reader does
 * not check them). */
#ifndef DPPROF_RESULTS_SCHEMA_H
#define DPPROF_RESULTS_SCHEMA_H

#include "memory_categories.h"

#include <stddef.h>

/* The schema_version this table describes. */
#define DPR_VERSION 1

/* The lists the schema holds, as X(ID, "name"). */
#define DPR_STATUSES(X) X(OK, "ok") X(OOM, "oom") X(ERROR, "error") X(CRASHED, "crashed") X(TIMEOUT, "timeout")
#define DPR_PHASES(X)                                                                                                  \
    X(FORWARD, "forward")                                                                                              \
    X(BACKWARD, "backward")                                                                                            \
    X(CLIP, "clip") X(NOISE, "noise") X(OPTIMIZER, "optimizer") X(RECOMPUTE, "recompute") X(COMM, "comm")
/* The phases a result may lack, read as 0 ms: those results written before them do not have
 * (recompute: activation checkpointing's recomputation of blocks, issue 16; comm: the gradients
 * summed across the ranks of a distributed run, issue 29). */
#define DPR_OPTIONAL_PHASES(X) X(RECOMPUTE, "recompute") X(COMM, "comm")
#define DPR_SAMPLINGS(X) X(POISSON, "poisson") X(FIXED, "fixed")
#define DPR_BOUNDS(X) X(COMPUTE, "compute") X(MEMORY, "memory") X(CALIBRATED, "calibrated") X(LINK, "link")
/* config.profile and profile.mode (a result carries `profile` only for "ops"). */
#define DPR_PROFILES(X) X(NONE, "none") X(OPS, "ops")
/* The categories a per-op profile groups ops by (profile.ops[].category), in the charts' order;
 * which op falls in which is the engine's table (engine/engine_profile.c). */
#define DPR_OP_CATEGORIES(X)                                                                                           \
    X(MATMUL, "matmul")                                                                                                \
    X(ATTENTION, "attention")                                                                                          \
    X(NORM, "norm")                                                                                                    \
    X(PER_SAMPLE_NORMS, "per_sample_norms")                                                                            \
    X(CLIP, "clip")                                                                                                    \
    X(NOISE, "noise")                                                                                                  \
    X(OPTIMIZER, "optimizer")                                                                                          \
    X(COMM, "comm")                                                                                                    \
    X(OTHER, "other")
/* Since when memory.host_peak_rss_bytes is the peak: the experiment's start (the kernel's peak was
 * reset) or the process's (it could not be). */
#define DPR_RSS_SINCE(X) X(EXPERIMENT, "experiment") X(PROCESS, "process")

typedef enum {
    DPR_T_STRING,
    DPR_T_INTEGER,
    DPR_T_NUMBER,
    DPR_T_BOOLEAN,
    DPR_T_OBJECT,
    DPR_T_ARRAY,
    DPR_T_SCALAR, /* a number, string or boolean */
    DPR_T_ANY
} dpr_type;

typedef enum {
    DPR_W_ALWAYS,
    DPR_W_OK,
    DPR_W_FAILED,
    DPR_W_OOM,
    DPR_W_PREDICTED,
    DPR_W_PARENT,
    DPR_W_OPTIONAL
} dpr_when;

enum { DPR_NONNEG = 1, DPR_NULLABLE = 2, DPR_OPEN = 4, DPR_MARKS = 8 };

/* X(ID, path, type, when, flags, choices) per field, parents first. */
#define DPR_FIELDS(X)                                                                                                  \
    X(SCHEMA_VERSION, "schema_version", INTEGER, ALWAYS, DPR_MARKS, NULL)                                              \
    X(STATUS, "status", STRING, ALWAYS, DPR_MARKS, "statuses")                                                         \
    X(EXPERIMENT, "experiment", STRING, ALWAYS, DPR_MARKS, NULL)                                                       \
    X(MESSAGE, "message", STRING, FAILED, 0, NULL)                                                                     \
    X(TRACEBACK, "traceback", STRING, OPTIONAL, 0, NULL)                                                               \
    X(CONFIG, "config", OBJECT, OK, DPR_OPEN, NULL)                                                                    \
    X(CONFIG_MODEL, "config.model", OBJECT, OK, DPR_OPEN, NULL)                                                        \
    X(CONFIG_MODEL_LAYERS, "config.model.layers", INTEGER, OK, DPR_NONNEG, NULL)                                       \
    X(CONFIG_MODEL_HIDDEN, "config.model.hidden", INTEGER, OK, DPR_NONNEG, NULL)                                       \
    X(CONFIG_MODEL_HEADS, "config.model.heads", INTEGER, OK, DPR_NONNEG, NULL)                                         \
    X(CONFIG_MODEL_SEQ_LEN, "config.model.seq_len", INTEGER, OK, DPR_NONNEG, NULL)                                     \
    X(CONFIG_MODEL_BATCH, "config.model.batch", INTEGER, OK, DPR_NONNEG, NULL)                                         \
    X(CONFIG_MODEL_VOCAB, "config.model.vocab", INTEGER, OK, DPR_NONNEG, NULL)                                         \
    X(CONFIG_MODEL_ARCH, "config.model.arch", STRING, OK, 0, NULL)                                                     \
    X(CONFIG_MODEL_DTYPE, "config.model.dtype", STRING, OK, 0, NULL)                                                   \
    X(CONFIG_MODEL_CHECKPOINT, "config.model.checkpoint", SCALAR, OPTIONAL, 0, NULL) /* false, "blocks" or N */        \
    X(CONFIG_MODEL_PATH, "config.model.path", STRING, OPTIONAL, 0, NULL) /* a checkpoint's directory */             \
    X(CONFIG_MODEL_LORA, "config.model.lora", OBJECT, OPTIONAL, DPR_NULLABLE | DPR_OPEN, NULL) /* null: no LoRA */     \
    X(CONFIG_MODEL_LORA_RANK, "config.model.lora.rank", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                           \
    X(CONFIG_MODEL_LORA_TARGETS, "config.model.lora.targets", ARRAY, OPTIONAL, 0, NULL)                                \
    X(CONFIG_MODEL_LORA_TARGETS_ITEM, "config.model.lora.targets[]", STRING, PARENT, 0, NULL)                          \
    X(CONFIG_METHOD, "config.method", STRING, OK, 0, NULL)                                                             \
    X(CONFIG_OPTIMIZER, "config.optimizer", OBJECT, OK, DPR_OPEN, NULL)                                                \
    X(CONFIG_OPTIMIZER_NAME, "config.optimizer.name", STRING, OK, 0, NULL)                                             \
    X(CONFIG_OPTIMIZER_LR, "config.optimizer.lr", NUMBER, OK, 0, NULL)                                                 \
    X(CONFIG_DP, "config.dp", OBJECT, OK, DPR_NULLABLE, NULL) /* null only for vanilla */                              \
    X(CONFIG_DP_MAX_GRAD_NORM, "config.dp.max_grad_norm", NUMBER, OK, 0, NULL)                                         \
    X(CONFIG_DP_NOISE_MULTIPLIER, "config.dp.noise_multiplier", NUMBER, OK, 0, NULL)                                   \
    X(CONFIG_DP_SAMPLE_RATE, "config.dp.sample_rate", NUMBER, OK, 0, NULL)                                             \
    X(CONFIG_DP_DELTA, "config.dp.delta", NUMBER, OK, 0, NULL)                                                         \
    X(CONFIG_DP_MAX_PHYSICAL_BATCH_SIZE, "config.dp.max_physical_batch_size", INTEGER, OK, 0, NULL)                    \
    X(CONFIG_DP_POISSON, "config.dp.poisson", BOOLEAN, OPTIONAL, 0, NULL)                                              \
    X(CONFIG_DP_ACCOUNTANT, "config.dp.accountant", STRING, OPTIONAL, 0, "accountants")                                \
    X(CONFIG_DP_DATASET_SIZE, "config.dp.dataset_size", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                           \
    X(CONFIG_DP_FLASH_IMPL, "config.dp.flash_impl", STRING, OPTIONAL, 0, "flash_impls")                                \
    X(CONFIG_DP_CLIPPING, "config.dp.clipping", STRING, OPTIONAL, 0, "styles")                                         \
    X(CONFIG_DP_CLIP_FN, "config.dp.clip_fn", STRING, OPTIONAL, 0, "clip_fns")                                         \
    X(CONFIG_DP_GAMMA, "config.dp.gamma", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                                          \
    X(CONFIG_DP_BOUNDS, "config.dp.bounds", OBJECT, OPTIONAL, DPR_OPEN, NULL) /* per_layer */                          \
    X(CONFIG_DP_GROUPS, "config.dp.groups", ARRAY, OPTIONAL, 0, NULL)                                                  \
    X(CONFIG_DP_GROUP, "config.dp.groups[]", OBJECT, PARENT, DPR_OPEN, NULL)                                           \
    X(CONFIG_DP_ADAPTIVE, "config.dp.adaptive", OBJECT, OPTIONAL, DPR_OPEN, NULL)                                      \
    X(CONFIG_ITERS, "config.iters", INTEGER, OK, DPR_NONNEG, NULL)                                                     \
    X(CONFIG_WARMUP, "config.warmup", INTEGER, OK, DPR_NONNEG, NULL)                                                   \
    X(CONFIG_DEVICE, "config.device", STRING, OK, 0, NULL)                                                             \
    X(CONFIG_SEED, "config.seed", INTEGER, OK, 0, NULL)                                                                \
    X(CONFIG_PROFILE, "config.profile", STRING, OPTIONAL, 0, "profiles")                                               \
    X(CONFIG_THREADS, "config.threads", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* >= 1; when the experiment set it */    \
    X(METHOD, "method", STRING, OK, 0, NULL)                                                                           \
    X(NORMS, "norms", STRING, OK, DPR_NULLABLE, NULL)                                                                  \
    X(CLIP, "clip", STRING, OK, DPR_NULLABLE, NULL)                                                                    \
    X(PREDICTED, "predicted", BOOLEAN, OK, 0, NULL)                                                                    \
    X(SNAPSHOTS, "snapshots", ARRAY, OK, 0, NULL)                                                                      \
    X(SNAPSHOT, "snapshots[]", OBJECT, PARENT, 0, NULL)                                                                \
    X(SNAPSHOT_NAME, "snapshots[].name", STRING, PARENT, 0, NULL)                                                      \
    X(SNAPSHOT_ALLOCATED_MB, "snapshots[].allocated_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                             \
    X(SNAPSHOT_RESERVED_MB, "snapshots[].reserved_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                               \
    X(SNAPSHOT_TIMESTAMP, "snapshots[].timestamp", NUMBER, PARENT, DPR_NONNEG, NULL)                                   \
    X(SNAPSHOT_CATEGORIES, "snapshots[].categories", OBJECT, PARENT, 0, NULL)                                          \
    X(SNAPSHOT_CATEGORY, "snapshots[].categories.{category}", INTEGER, PARENT, DPR_NONNEG, NULL)                       \
    X(SNAPSHOT_CUSTOM, "snapshots[].custom", BOOLEAN, OPTIONAL, 0, NULL) /* the script's own (ctx:snapshot) */         \
    X(MEMORY, "memory", OBJECT, OK, DPR_MARKS, NULL)                                                                   \
    X(MEMORY_PEAK_BYTES, "memory.peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                       \
    X(MEMORY_WARMUP_PEAK_BYTES, "memory.warmup_peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                         \
    X(MEMORY_RESERVED_PEAK_BYTES, "memory.reserved_peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                     \
    X(MEMORY_END_BYTES, "memory.end_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                         \
    X(MEMORY_CATEGORIES, "memory.categories", OBJECT, PARENT, 0, NULL)                                                 \
    X(MEMORY_CATEGORY, "memory.categories.{category}", OBJECT, PARENT, 0, NULL)                                        \
    X(MEMORY_CATEGORY_CURRENT_BYTES, "memory.categories.{category}.current_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)  \
    X(MEMORY_CATEGORY_PEAK_BYTES, "memory.categories.{category}.peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)        \
    X(MEMORY_CATEGORY_LIVE_AT_PEAK_BYTES, "memory.categories.{category}.live_at_peak_bytes", INTEGER, PARENT,          \
      DPR_NONNEG, NULL)                                                                                                \
    X(MEMORY_MODULES, "memory.modules", ARRAY, PARENT, 0, NULL)                                                        \
    X(MEMORY_MODULE, "memory.modules[]", OBJECT, PARENT, 0, NULL)                                                      \
    X(MEMORY_MODULE_MODULE, "memory.modules[].module", STRING, PARENT, 0, NULL)                                        \
    X(MEMORY_MODULE_PEAK_BYTES, "memory.modules[].peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                      \
    X(MEMORY_MODULE_LIVE_AT_PEAK_BYTES, "memory.modules[].live_at_peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)      \
    X(MEMORY_TIMELINE, "memory.timeline", OBJECT, PARENT, 0, NULL)                                                     \
    X(MEMORY_TIMELINE_T_MS, "memory.timeline.t_ms", ARRAY, PARENT, 0, NULL)                                            \
    X(MEMORY_TIMELINE_T_MS_ITEM, "memory.timeline.t_ms[]", NUMBER, PARENT, 0, NULL)                                    \
    X(MEMORY_TIMELINE_ALLOCATED_BYTES, "memory.timeline.allocated_bytes", ARRAY, PARENT, 0, NULL)                      \
    X(MEMORY_TIMELINE_ALLOCATED_BYTES_ITEM, "memory.timeline.allocated_bytes[]", INTEGER, PARENT, 0, NULL)             \
    X(MEMORY_TIMELINE_RESERVED_BYTES, "memory.timeline.reserved_bytes", ARRAY, PARENT, 0, NULL)                        \
    X(MEMORY_TIMELINE_RESERVED_BYTES_ITEM, "memory.timeline.reserved_bytes[]", INTEGER, PARENT, 0, NULL)               \
    X(MEMORY_PHASES, "memory.phases", OBJECT, OPTIONAL, 0, NULL) /* the phases that ran in the timed iterations */     \
    X(MEMORY_PHASE, "memory.phases.{phase}", OBJECT, OPTIONAL, 0, NULL)                                                \
    X(MEMORY_PHASE_PEAK_BYTES, "memory.phases.{phase}.peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                  \
    X(MEMORY_PHASE_LIVE_AT_PEAK, "memory.phases.{phase}.live_at_peak", OBJECT, PARENT, 0, NULL)                        \
    X(MEMORY_PHASE_LIVE_AT_PEAK_CATEGORY, "memory.phases.{phase}.live_at_peak.{category}", INTEGER, PARENT,            \
      DPR_NONNEG, NULL)                                                                                                \
    X(MEMORY_PHASE_END_BYTES, "memory.phases.{phase}.end_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                    \
    X(MEMORY_PHASE_LIVE_AT_END, "memory.phases.{phase}.live_at_end", OBJECT, PARENT, 0, NULL)                          \
    X(MEMORY_PHASE_LIVE_AT_END_CATEGORY, "memory.phases.{phase}.live_at_end.{category}", INTEGER, PARENT, DPR_NONNEG,  \
      NULL)                                                                                                            \
    X(MEMORY_HELD_BEFORE_BYTES, "memory.held_before_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* absent: older */  \
    X(MEMORY_HOST_PEAK_RSS_BYTES, "memory.host_peak_rss_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                   \
    X(MEMORY_HOST_PEAK_RSS_SINCE, "memory.host_peak_rss_since", STRING, OPTIONAL, 0, "rss_since") /* with the above */ \
    X(PEAK_MEMORY_MB, "peak_memory_mb", NUMBER, OK, DPR_MARKS, NULL)                                                   \
    X(BREAKDOWN, "breakdown", OBJECT, OK, DPR_MARKS, NULL)                                                             \
    X(BREAKDOWN_MODEL_PARAMETERS_MB, "breakdown.model_parameters_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                \
    X(BREAKDOWN_OPTIMIZER_STATES_MB, "breakdown.optimizer_states_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                \
    X(BREAKDOWN_GRADIENTS_MB, "breakdown.gradients_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                              \
    X(BREAKDOWN_ACTIVATION_HOOKS_MB, "breakdown.activation_hooks_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                \
    X(BREAKDOWN_NORM_SAMPLES_MB, "breakdown.norm_samples_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                        \
    X(BREAKDOWN_TEMP_MATRICES_MB, "breakdown.temp_matrices_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                      \
    X(BREAKDOWN_TOTAL_ALLOCATED_MB, "breakdown.total_allocated_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                  \
    X(BREAKDOWN_PEAK_ALLOCATED_MB, "breakdown.peak_allocated_mb", NUMBER, PARENT, DPR_NONNEG, NULL)                    \
    X(AVG_TIME_MS, "avg_time_ms", NUMBER, OPTIONAL, 0, NULL) /* required with timing.iter_ms */                        \
    X(TIMING, "timing", OBJECT, OK, 0, NULL)                                                                           \
    X(TIMING_ITER_MS, "timing.iter_ms", ARRAY, PARENT, 0, NULL)                                                        \
    X(TIMING_ITER_MS_ITEM, "timing.iter_ms[]", NUMBER, PARENT, DPR_NONNEG, NULL)                                       \
    X(TIMING_AVG_MS, "timing.avg_ms", NUMBER, OPTIONAL, 0, NULL) /* these four: required with iter_ms */               \
    X(TIMING_MEDIAN_MS, "timing.median_ms", NUMBER, OPTIONAL, 0, NULL)                                                 \
    X(TIMING_MIN_MS, "timing.min_ms", NUMBER, OPTIONAL, 0, NULL)                                                       \
    X(TIMING_MAX_MS, "timing.max_ms", NUMBER, OPTIONAL, 0, NULL)                                                       \
    X(TIMING_PHASES_MS, "timing.phases_ms", OBJECT, PARENT, 0, NULL)                                                   \
    X(TIMING_PHASE_MS, "timing.phases_ms.{phase}", NUMBER, PARENT, DPR_NONNEG, NULL)                                   \
    X(TIMING_SPANS, "timing.spans", ARRAY, PARENT, 0, NULL)                                                            \
    X(TIMING_SPAN, "timing.spans[]", OBJECT, PARENT, 0, NULL)                                                          \
    X(TIMING_SPAN_PHASE, "timing.spans[].phase", STRING, PARENT, 0, "phases")                                          \
    X(TIMING_SPAN_ITER, "timing.spans[].iter", INTEGER, PARENT, DPR_NONNEG, NULL)                                      \
    X(TIMING_SPAN_START_MS, "timing.spans[].start_ms", NUMBER, PARENT, 0, NULL)                                        \
    X(TIMING_SPAN_END_MS, "timing.spans[].end_ms", NUMBER, PARENT, 0, NULL)                                            \
    X(ESTIMATE, "timing.estimate", OBJECT, PREDICTED, 0, NULL)                                                         \
    X(ESTIMATE_DEVICE_MODEL, "timing.estimate.device_model", STRING, PARENT, 0, NULL)                                  \
    X(ESTIMATE_METHOD, "timing.estimate.method", STRING, PARENT, 0, NULL)                                              \
    X(ESTIMATE_DTYPE, "timing.estimate.dtype", STRING, PARENT, 0, NULL)                                                \
    X(ESTIMATE_PEAK_FLOPS, "timing.estimate.peak_flops", NUMBER, PARENT, 0, NULL)                                      \
    X(ESTIMATE_BANDWIDTH, "timing.estimate.bandwidth", NUMBER, PARENT, 0, NULL)                                        \
    X(ESTIMATE_LEDGER_MS, "timing.estimate.ledger_ms", NUMBER, PARENT, DPR_NONNEG, NULL)                               \
    X(ESTIMATE_LABEL, "timing.estimate.label", STRING, PARENT, 0, NULL)                                                \
    X(ESTIMATE_OPS, "timing.estimate.ops", ARRAY, PARENT, 0, NULL)                                                     \
    X(ESTIMATE_OP, "timing.estimate.ops[]", OBJECT, PARENT, 0, NULL)                                                   \
    X(ESTIMATE_OP_OP, "timing.estimate.ops[].op", STRING, PARENT, 0, NULL)                                             \
    X(ESTIMATE_OP_CALLS, "timing.estimate.ops[].calls", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                           \
    X(ESTIMATE_OP_FLOPS, "timing.estimate.ops[].flops", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                            \
    X(ESTIMATE_OP_BYTES, "timing.estimate.ops[].bytes", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                            \
    X(ESTIMATE_OP_MS, "timing.estimate.ops[].ms", NUMBER, PARENT, DPR_NONNEG, NULL)                                    \
    X(ESTIMATE_OP_BOUND, "timing.estimate.ops[].bound", STRING, PARENT, 0, "bounds")                                   \
    X(ESTIMATE_MODEL_FILE, "timing.estimate.model_file", STRING, OPTIONAL, 0, NULL) /* calibrated models: */         \
    X(ESTIMATE_CALIBRATION, "timing.estimate.calibration", OBJECT, OPTIONAL, 0, NULL)                                  \
    X(ESTIMATE_CALIBRATION_DEVICE, "timing.estimate.calibration.device", STRING, PARENT, 0, NULL)                      \
    X(ESTIMATE_CALIBRATION_DEVICE_NAME, "timing.estimate.calibration.device_name", STRING, PARENT, 0, NULL)            \
    X(ESTIMATE_CALIBRATION_COMMIT, "timing.estimate.calibration.commit", STRING, PARENT, 0, NULL)                      \
    X(ESTIMATE_CALIBRATION_DATE, "timing.estimate.calibration.date", STRING, PARENT, 0, NULL)                          \
    X(ESTIMATE_CALIBRATION_GAP_S, "timing.estimate.calibration.gap_s", NUMBER, PARENT, DPR_NONNEG, NULL)               \
    X(ESTIMATE_FALLBACK_OPS, "timing.estimate.fallback_ops", ARRAY, OPTIONAL, 0, NULL)                                 \
    X(ESTIMATE_FALLBACK_OP, "timing.estimate.fallback_ops[]", STRING, PARENT, 0, NULL)                                 \
    X(ESTIMATE_FIT_ERROR, "timing.estimate.fit_error", ARRAY, OPTIONAL, 0, NULL)                                       \
    X(ESTIMATE_FIT_ERROR_ITEM, "timing.estimate.fit_error[]", OBJECT, PARENT, 0, NULL)                                 \
    X(ESTIMATE_FIT_ERROR_OP, "timing.estimate.fit_error[].op", STRING, PARENT, 0, NULL)                                \
    X(ESTIMATE_FIT_ERROR_MEDIAN, "timing.estimate.fit_error[].median", NUMBER, PARENT, DPR_NONNEG, NULL)               \
    X(ESTIMATE_FIT_ERROR_WORST, "timing.estimate.fit_error[].worst", NUMBER, PARENT, DPR_NONNEG, NULL)                 \
    X(ESTIMATE_FIT_ERROR_RUNS, "timing.estimate.fit_error[].runs", INTEGER, PARENT, DPR_NONNEG, NULL)                  \
    X(PLAN, "plan", OBJECT, PREDICTED, 0, NULL) /* predicted results only */                                           \
    X(PLAN_DEVICE_MODEL, "plan.device_model", STRING, PARENT, 0, NULL)                                                 \
    X(PLAN_MEMORY_BYTES, "plan.memory_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                       \
    X(PLAN_CONTEXT_BYTES, "plan.context_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                     \
    X(PLAN_PEAK_BYTES, "plan.peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                           \
    X(PLAN_BUDGET_BYTES, "plan.budget_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                       \
    X(PLAN_PREDICTED_RESERVED_BYTES, "plan.predicted_reserved_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)               \
    X(PLAN_HEADROOM_BYTES, "plan.headroom_bytes", INTEGER, PARENT, 0, NULL)                                            \
    X(PLAN_FITS, "plan.fits", BOOLEAN, PARENT, 0, NULL)                                                                \
    X(PLAN_RESERVE_OVERHEAD, "plan.reserve_overhead", NUMBER, PARENT, DPR_NONNEG, NULL)                                \
    X(PLAN_WORKSPACE, "plan.workspace", BOOLEAN, PARENT, 0, NULL)                                                      \
    X(PLAN_CHECKPOINT_ADVICE, "plan.checkpoint_advice", OBJECT, OPTIONAL, 0, NULL) /* sweep points: fit.lua */         \
    X(PLAN_CHECKPOINT_ADVICE_CHECKPOINT, "plan.checkpoint_advice.checkpoint", SCALAR, PARENT, 0, NULL)                 \
    X(PLAN_CHECKPOINT_ADVICE_FITS, "plan.checkpoint_advice.fits", BOOLEAN, PARENT, 0, NULL)                            \
    X(PLAN_CHECKPOINT_ADVICE_STEP_MS, "plan.checkpoint_advice.step_ms", NUMBER, PARENT, DPR_NONNEG, NULL)              \
    X(PLAN_CHECKPOINT_ADVICE_REFERENCE_STEP_MS, "plan.checkpoint_advice.reference_step_ms", NUMBER, PARENT,            \
      DPR_NONNEG, NULL)                                                                                                \
    X(PLAN_CHECKPOINT_ADVICE_PREDICTED_RESERVED_BYTES, "plan.checkpoint_advice.predicted_reserved_bytes", INTEGER,     \
      PARENT, DPR_NONNEG, NULL)                                                                                        \
    X(LEDGER, "ledger", ARRAY, OK, 0, NULL)                                                                            \
    X(LEDGER_ENTRY, "ledger[]", OBJECT, PARENT, 0, NULL)                                                               \
    X(LEDGER_OP, "ledger[].op", STRING, PARENT, 0, NULL)                                                               \
    X(LEDGER_CALLS, "ledger[].calls", INTEGER, PARENT, DPR_NONNEG, NULL)                                               \
    X(LEDGER_FLOPS, "ledger[].flops", NUMBER, PARENT, DPR_NONNEG, NULL)                                                \
    X(LEDGER_BYTES, "ledger[].bytes", NUMBER, PARENT, DPR_NONNEG, NULL)                                                \
    X(LAYERS, "layers", ARRAY, OK, 0, NULL)                                                                            \
    X(LAYER, "layers[]", OBJECT, PARENT, 0, NULL)                                                                      \
    X(LAYER_MODULE, "layers[].module", STRING, PARENT, 0, NULL)                                                        \
    X(LAYER_KIND, "layers[].kind", STRING, PARENT, 0, NULL)                                                            \
    X(LAYER_NORMS, "layers[].norms", STRING, PARENT, 0, "formulations")                                                \
    X(CLIPPING, "clipping", OBJECT, OPTIONAL, 0, NULL) /* DP runs */                                                   \
    X(CLIPPING_STYLE, "clipping.style", STRING, PARENT, 0, "styles")                                                   \
    X(CLIPPING_CLIP_FN, "clipping.clip_fn", STRING, PARENT, 0, "clip_fns")                                             \
    X(CLIPPING_GAMMA, "clipping.gamma", NUMBER, OPTIONAL, DPR_NONNEG, NULL) /* automatic */                            \
    X(CLIPPING_NOISE_NORM, "clipping.noise_norm", NUMBER, PARENT, DPR_NONNEG, NULL)                                    \
    X(CLIPPING_GROUPS, "clipping.groups", ARRAY, PARENT, 0, NULL)                                                      \
    X(CLIPPING_GROUP, "clipping.groups[]", OBJECT, PARENT, 0, NULL)                                                    \
    X(CLIPPING_GROUP_NAME, "clipping.groups[].name", STRING, PARENT, 0, NULL)                                          \
    X(CLIPPING_GROUP_BOUND, "clipping.groups[].max_grad_norm", NUMBER, PARENT, DPR_NONNEG, NULL)                       \
    X(CLIPPING_GROUP_TENSORS, "clipping.groups[].tensors", INTEGER, PARENT, DPR_NONNEG, NULL)                          \
    X(CLIPPING_ADAPTIVE, "clipping.adaptive", OBJECT, OPTIONAL, 0, NULL) /* adaptive clipping */                       \
    X(CLIPPING_ADAPTIVE_QUANTILE, "clipping.adaptive.target_unclipped_quantile", NUMBER, PARENT, DPR_NONNEG, NULL)     \
    X(CLIPPING_ADAPTIVE_LR, "clipping.adaptive.clipbound_learning_rate", NUMBER, PARENT, DPR_NONNEG, NULL)             \
    X(CLIPPING_ADAPTIVE_MAX, "clipping.adaptive.max_clipbound", NUMBER, PARENT, DPR_NONNEG, NULL)                      \
    X(CLIPPING_ADAPTIVE_MIN, "clipping.adaptive.min_clipbound", NUMBER, PARENT, DPR_NONNEG, NULL)                      \
    X(CLIPPING_ADAPTIVE_COUNT_STD, "clipping.adaptive.unclipped_num_std", NUMBER, PARENT, DPR_NONNEG, NULL)            \
    X(CLIPPING_ADAPTIVE_SIGMA, "clipping.adaptive.noise_multiplier", NUMBER, PARENT, DPR_NONNEG, NULL)                 \
    X(CLIPPING_ADAPTIVE_STEPS, "clipping.adaptive.steps", ARRAY, PARENT, 0, NULL)                                      \
    X(CLIPPING_ADAPTIVE_STEP, "clipping.adaptive.steps[]", OBJECT, PARENT, 0, NULL)                                    \
    X(CLIPPING_ADAPTIVE_BOUND, "clipping.adaptive.steps[].bound", NUMBER, PARENT, DPR_NONNEG, NULL)                    \
    X(CLIPPING_ADAPTIVE_SAMPLES, "clipping.adaptive.steps[].samples", INTEGER, PARENT, DPR_NONNEG, NULL)               \
    X(CLIPPING_ADAPTIVE_UNCLIPPED, "clipping.adaptive.steps[].unclipped", INTEGER, PARENT, DPR_NONNEG, NULL)           \
    X(CLIPPING_ADAPTIVE_FRACTION, "clipping.adaptive.steps[].fraction", NUMBER, PARENT, 0, NULL)                       \
    X(CLIPPING_ADAPTIVE_NEXT, "clipping.adaptive.steps[].next", NUMBER, PARENT, DPR_NONNEG, NULL)                      \
    X(ENVIRONMENT, "environment", OBJECT, OK, 0, NULL)                                                                 \
    X(ENVIRONMENT_DEVICE, "environment.device", STRING, PARENT, 0, NULL)                                               \
    X(ENVIRONMENT_DEVICE_NAME, "environment.device_name", STRING, PARENT, 0, NULL)                                     \
    X(ENVIRONMENT_CPU, "environment.cpu", STRING, PARENT, 0, NULL)                                                     \
    X(ENVIRONMENT_GIT_COMMIT, "environment.git_commit", STRING, PARENT, 0, NULL)                                       \
    X(ENVIRONMENT_DPPROF_VERSION, "environment.dpprof_version", STRING, PARENT, 0, NULL)                               \
    X(ENVIRONMENT_HOSTNAME, "environment.hostname", STRING, PARENT, 0, NULL)                                           \
    X(ENVIRONMENT_CORES, "environment.cores", INTEGER, PARENT, DPR_NONNEG, NULL)                                       \
    X(ENVIRONMENT_THREADS, "environment.threads", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* >= 1; absent: older */       \
    X(ENVIRONMENT_DRIVER_VERSION, "environment.driver_version", STRING, PARENT, DPR_NULLABLE, NULL)                    \
    X(ENVIRONMENT_CUDA_VERSION, "environment.cuda_version", STRING, PARENT, DPR_NULLABLE, NULL)                        \
    X(ENVIRONMENT_BLAS, "environment.blas", OBJECT, OPTIONAL, 0, NULL) /* the CPU backend's; absent: older */         \
    X(ENVIRONMENT_BLAS_LIBRARY, "environment.blas.library", STRING, PARENT, 0, NULL)                                   \
    X(ENVIRONMENT_BLAS_VERSION, "environment.blas.version", STRING, PARENT, 0, NULL)                                   \
    X(ENVIRONMENT_BLAS_CORE, "environment.blas.core", STRING, PARENT, 0, NULL)                                         \
    X(ENVIRONMENT_BLAS_CHOSEN_BY, "environment.blas.chosen_by", STRING, PARENT, 0, NULL)                               \
    X(ENVIRONMENT_BLAS_GENERIC, "environment.blas.generic", BOOLEAN, PARENT, 0, NULL)                                  \
    X(ENVIRONMENT_HOST_LOAD, "environment.host_load", OBJECT, OPTIONAL, 0, NULL) /* absent: older, or no /proc */     \
    X(ENVIRONMENT_HOST_LOAD_WALL_S, "environment.host_load.wall_s", NUMBER, PARENT, DPR_NONNEG, NULL)                  \
    X(ENVIRONMENT_HOST_LOAD_CPU_S, "environment.host_load.cpu_s", NUMBER, PARENT, DPR_NONNEG, NULL)                    \
    X(ENVIRONMENT_HOST_LOAD_CORES, "environment.host_load.cores", INTEGER, PARENT, DPR_NONNEG, NULL)                   \
    X(ENVIRONMENT_HOST_LOAD_OTHERS_SHARE, "environment.host_load.others_share", NUMBER, PARENT, DPR_NONNEG, NULL)      \
    X(ENVIRONMENT_HOST_LOAD_LOADED, "environment.host_load.loaded", BOOLEAN, PARENT, 0, NULL)                          \
    X(ENVIRONMENT_HOST_LOAD_START, "environment.host_load.loadavg_start", ARRAY, OPTIONAL, 0, NULL)                   \
    X(ENVIRONMENT_HOST_LOAD_START_ITEM, "environment.host_load.loadavg_start[]", NUMBER, PARENT, DPR_NONNEG, NULL)    \
    X(ENVIRONMENT_HOST_LOAD_END, "environment.host_load.loadavg_end", ARRAY, OPTIONAL, 0, NULL)                       \
    X(ENVIRONMENT_HOST_LOAD_END_ITEM, "environment.host_load.loadavg_end[]", NUMBER, PARENT, DPR_NONNEG, NULL)        \
    X(ENVIRONMENT_DEVICE_MODEL, "environment.device_model", OBJECT, OPTIONAL, DPR_OPEN, NULL) /* plan runs */          \
    X(PRIVACY, "privacy", OBJECT, OK, DPR_NULLABLE, NULL) /* null for vanilla only */                                  \
    X(PRIVACY_NOISE_MULTIPLIER, "privacy.noise_multiplier", NUMBER, PARENT, DPR_NONNEG, NULL)                          \
    X(PRIVACY_SAMPLE_RATE, "privacy.sample_rate", NUMBER, PARENT, DPR_NONNEG, NULL)                                    \
    X(PRIVACY_DELTA, "privacy.delta", NUMBER, PARENT, DPR_NONNEG, NULL)                                                \
    X(PRIVACY_EPSILON, "privacy.epsilon", NUMBER, PARENT, DPR_NONNEG | DPR_NULLABLE, NULL)                             \
    X(PRIVACY_STEPS, "privacy.steps", INTEGER, PARENT, DPR_NONNEG, NULL)                                               \
    X(PRIVACY_ACCOUNTANT, "privacy.accountant", STRING, OPTIONAL, 0, "accountants") /* absent: RDP, older results */   \
    X(PRIVACY_ACCOUNTANT_PARAMS, "privacy.accountant_params", OBJECT, OPTIONAL, DPR_OPEN, NULL) /* with accountant */  \
    X(PRIVACY_SAMPLING, "privacy.sampling", STRING, OPTIONAL, 0, "samplings")                                          \
    X(PRIVACY_CAVEAT, "privacy.caveat", STRING, OPTIONAL, 0, NULL) /* with fixed sampling, only then */                \
    X(PRIVACY_EPSILON_ERROR, "privacy.epsilon_error", STRING, OPTIONAL, 0, NULL)                                       \
    X(STEPS, "steps", ARRAY, OPTIONAL, 0, NULL) /* poisson or data of samples' own lengths: each timed step */         \
    X(STEP, "steps[]", OBJECT, PARENT, 0, NULL)                                                                        \
    X(STEP_STEP, "steps[].step", INTEGER, PARENT, DPR_NONNEG, NULL)                                                    \
    X(STEP_LOGICAL_SIZE, "steps[].logical_size", INTEGER, PARENT, DPR_NONNEG, NULL)                                    \
    X(STEP_PHYSICAL, "steps[].physical", ARRAY, PARENT, 0, NULL)                                                       \
    X(STEP_PHYSICAL_BATCH, "steps[].physical[]", OBJECT, PARENT, 0, NULL)                                              \
    X(STEP_PHYSICAL_SIZE, "steps[].physical[].size", INTEGER, PARENT, DPR_NONNEG, NULL)                                \
    X(STEP_PHYSICAL_PADDED, "steps[].physical[].padded", INTEGER, PARENT, DPR_NONNEG, NULL)                            \
    X(STEP_PEAK_BYTES, "steps[].peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                        \
    X(DATA, "data", OBJECT, OPTIONAL, 0, NULL) /* data of samples' own lengths */                                      \
    X(DATA_SOURCE, "data.source", STRING, PARENT, 0, NULL)                                                             \
    X(DATA_SAMPLES, "data.samples", INTEGER, PARENT, DPR_NONNEG, NULL)                                                 \
    X(DATA_CUT, "data.cut", INTEGER, PARENT, DPR_NONNEG, NULL)                                                         \
    X(DATA_LONGEST, "data.longest", INTEGER, PARENT, DPR_NONNEG, NULL)                                                 \
    X(DATA_PAD_TO, "data.pad_to", INTEGER, PARENT, DPR_NONNEG, NULL)                                                   \
    X(DATA_GROUP_BY_LENGTH, "data.group_by_length", BOOLEAN, PARENT, 0, NULL)                                          \
    X(DATA_TOO_LONG, "data.too_long", STRING, PARENT, 0, NULL)                                                         \
    X(DATA_EMPTY_DOCUMENTS, "data.empty_documents", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* token files */             \
    X(DATA_RECORDS, "data.records", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* data sets of text: records read */         \
    X(DATA_BAD, "data.bad", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* records that gave no sample */                     \
    X(DATA_BAD_RECORDS, "data.bad_records", ARRAY, OPTIONAL, 0, NULL) /* the first of them */                          \
    X(DATA_BAD_RECORD, "data.bad_records[]", OBJECT, PARENT, 0, NULL)                                                  \
    X(DATA_BAD_LINE, "data.bad_records[].line", INTEGER, PARENT, DPR_NONNEG, NULL)                                     \
    X(DATA_BAD_REASON, "data.bad_records[].reason", STRING, PARENT, 0, NULL)                                           \
    X(DATA_NO_LOSS, "data.no_loss", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* no loss within seq_len: left out */        \
    X(DATA_TOKENS, "data.tokens", INTEGER, OPTIONAL, DPR_NONNEG, NULL) /* the samples' tokens */                       \
    X(DATA_TOKENIZER, "data.tokenizer", STRING, OPTIONAL, 0, NULL)                                                     \
    X(DATA_FORMAT, "data.format", STRING, OPTIONAL, 0, NULL)                                                           \
    X(OOM, "oom", OBJECT, OOM, 0, NULL)                                                                                \
    X(OOM_REQUESTED_BYTES, "oom.requested_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                                   \
    X(OOM_CATEGORY, "oom.category", STRING, PARENT, 0, NULL)                                                           \
    X(OOM_MODULE, "oom.module", STRING, PARENT, 0, NULL)                                                               \
    X(OOM_LIVE_BYTES, "oom.live_bytes", OBJECT, PARENT, 0, NULL)                                                       \
    X(OOM_LIVE_BYTES_CATEGORY, "oom.live_bytes.{category}", INTEGER, PARENT, DPR_NONNEG, NULL)                         \
    X(OOM_TOTAL_LIVE_BYTES, "oom.total_live_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                               \
    X(OOM_LIMIT_BYTES, "oom.limit_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                                         \
    X(OOM_DEVICE, "oom.device", STRING, OPTIONAL, 0, NULL)                                                             \
    X(DISTRIBUTED, "distributed", OBJECT, OPTIONAL, 0, NULL) /* distributed runs only (issue 29) */                    \
    X(DISTRIBUTED_STRATEGY, "distributed.strategy", STRING, PARENT, 0, NULL)                                           \
    X(DISTRIBUTED_WORLD_SIZE, "distributed.world_size", INTEGER, PARENT, DPR_NONNEG, NULL)                             \
    X(DISTRIBUTED_RANK, "distributed.rank", INTEGER, PARENT, DPR_NONNEG, NULL)                                         \
    X(DISTRIBUTED_RANKS, "distributed.ranks", ARRAY, OPTIONAL, 0, NULL) /* rank 0's combined result */                 \
    X(DISTRIBUTED_RANKS_ITEM, "distributed.ranks[]", OBJECT, PARENT, 0, NULL)                                          \
    X(DISTRIBUTED_RANKS_RANK, "distributed.ranks[].rank", INTEGER, PARENT, DPR_NONNEG, NULL)                           \
    X(DISTRIBUTED_RANKS_PEAK_BYTES, "distributed.ranks[].peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)               \
    X(DISTRIBUTED_RANKS_CATEGORIES, "distributed.ranks[].categories", OBJECT, PARENT, 0, NULL)                         \
    X(DISTRIBUTED_RANKS_CATEGORY, "distributed.ranks[].categories.{category}", INTEGER, PARENT, DPR_NONNEG, NULL)      \
    X(DISTRIBUTED_RANKS_LIVE_AT_PEAK, "distributed.ranks[].live_at_peak", OBJECT, PARENT, 0, NULL)                     \
    X(DISTRIBUTED_RANKS_LIVE, "distributed.ranks[].live_at_peak.{category}", INTEGER, PARENT, DPR_NONNEG, NULL)        \
    X(DISTRIBUTED_LARGEST, "distributed.largest", OBJECT, OPTIONAL, 0, NULL)                                           \
    X(DISTRIBUTED_LARGEST_PEAK_BYTES, "distributed.largest.peak_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)             \
    X(DISTRIBUTED_LARGEST_RANK, "distributed.largest.rank", INTEGER, PARENT, DPR_NONNEG, NULL)                         \
    X(DISTRIBUTED_LARGEST_CATEGORIES, "distributed.largest.categories", OBJECT, PARENT, 0, NULL)                       \
    X(DISTRIBUTED_LARGEST_CATEGORY, "distributed.largest.categories.{category}", OBJECT, PARENT, 0, NULL)              \
    X(DISTRIBUTED_LARGEST_CATEGORY_PEAK_BYTES, "distributed.largest.categories.{category}.peak_bytes", INTEGER,        \
      PARENT, DPR_NONNEG, NULL)                                                                                        \
    X(DISTRIBUTED_LARGEST_CATEGORY_RANK, "distributed.largest.categories.{category}.rank", INTEGER, PARENT,            \
      DPR_NONNEG, NULL)                                                                                                \
    X(DISTRIBUTED_LARGEST_MODULES, "distributed.largest.modules", ARRAY, PARENT, 0, NULL)                              \
    X(DISTRIBUTED_LARGEST_MODULE, "distributed.largest.modules[]", OBJECT, PARENT, 0, NULL)                            \
    X(DISTRIBUTED_LARGEST_MODULE_MODULE, "distributed.largest.modules[].module", STRING, PARENT, 0, NULL)              \
    X(DISTRIBUTED_LARGEST_MODULE_PEAK_BYTES, "distributed.largest.modules[].peak_bytes", INTEGER, PARENT, DPR_NONNEG,  \
      NULL)                                                                                                            \
    X(DISTRIBUTED_LARGEST_MODULE_RANK, "distributed.largest.modules[].rank", INTEGER, PARENT, DPR_NONNEG, NULL)        \
    X(SWEEP, "sweep", OBJECT, OPTIONAL, 0, NULL) /* sweep points only */                                               \
    X(SWEEP_NAME, "sweep.name", STRING, PARENT, 0, NULL)                                                               \
    X(SWEEP_CONFIG, "sweep.config", OBJECT, OPTIONAL, DPR_OPEN, NULL)                                                  \
    X(SWEEP_CONFIG_HASH, "sweep.config_hash", STRING, OPTIONAL, 0, NULL)                                               \
    X(SWEEP_VARY, "sweep.vary", OBJECT, PARENT, 0, NULL)                                                               \
    X(SWEEP_VARY_VALUE, "sweep.vary.*", SCALAR, OPTIONAL, 0, NULL)                                                     \
    X(SWEEP_PLACEMENT, "sweep.placement", OBJECT, OPTIONAL, 0, NULL) /* where the point ran */                         \
    X(SWEEP_PLACEMENT_HOST, "sweep.placement.host", STRING, OPTIONAL, 0, NULL)                                         \
    X(SWEEP_PLACEMENT_CUDA_VISIBLE_DEVICES, "sweep.placement.cuda_visible_devices", STRING, OPTIONAL, 0, NULL)         \
    X(SWEEP_PLACEMENT_SLOT, "sweep.placement.slot", INTEGER, OPTIONAL, 0, NULL) /* >= 1 */                             \
    X(SWEEP_PLACEMENT_SLOTS, "sweep.placement.slots", INTEGER, OPTIONAL, 0, NULL)                                      \
    X(SWEEP_PLACEMENT_THREADS, "sweep.placement.threads", INTEGER, OPTIONAL, 0, NULL)                                  \
    X(SWEEP_PLACEMENT_SLURM, "sweep.placement.slurm", OBJECT, OPTIONAL, 0, NULL) /* Slurm array tasks */               \
    X(SWEEP_PLACEMENT_SLURM_JOB_ID, "sweep.placement.slurm.job_id", STRING, OPTIONAL, 0, NULL)                         \
    X(SWEEP_PLACEMENT_SLURM_TASK_JOB_ID, "sweep.placement.slurm.task_job_id", STRING, OPTIONAL, 0, NULL)               \
    X(SWEEP_PLACEMENT_SLURM_NODE, "sweep.placement.slurm.node", STRING, OPTIONAL, 0, NULL)                             \
    X(SWEEP_PLACEMENT_SLURM_CLUSTER, "sweep.placement.slurm.cluster", STRING, OPTIONAL, 0, NULL)                       \
    X(SWEEP_PLACEMENT_SLURM_STATE, "sweep.placement.slurm.state", STRING, OPTIONAL, 0, NULL)                           \
    X(SWEEP_PLACEMENT_SLURM_EXIT_CODE, "sweep.placement.slurm.exit_code", STRING, OPTIONAL, 0, NULL)                   \
    X(SWEEP_PLACEMENT_SLURM_STATE_SOURCE, "sweep.placement.slurm.state_source", STRING, OPTIONAL, 0, NULL)             \
    X(SWEEP_PLACEMENT_SLURM_ARRAY_TASK_ID, "sweep.placement.slurm.array_task_id", INTEGER, OPTIONAL, DPR_NONNEG, NULL) \
    X(PROFILE, "profile", OBJECT, OPTIONAL, 0, NULL) /* profile = "ops" only */                                        \
    X(PROFILE_MODE, "profile.mode", STRING, PARENT, 0, "profiles")                                                     \
    X(PROFILE_PREDICTED, "profile.predicted", BOOLEAN, PARENT, 0, NULL)                                                \
    X(PROFILE_ITERS, "profile.iters", INTEGER, PARENT, 0, NULL) /* >= 1 */                                             \
    X(PROFILE_DTYPE, "profile.dtype", STRING, PARENT, 0, NULL)                                                         \
    X(PROFILE_PEAK, "profile.peak", OBJECT, PARENT, DPR_NULLABLE, NULL)          /* null: peak_error says why */       \
    X(PROFILE_PEAK_FLOPS, "profile.peak.flops", NUMBER, PARENT, 0, NULL)         /* > 0 */                             \
    X(PROFILE_PEAK_BANDWIDTH, "profile.peak.bandwidth", NUMBER, PARENT, 0, NULL) /* > 0 */                             \
    X(PROFILE_PEAK_HOW, "profile.peak.how", STRING, PARENT, 0, NULL)                                                   \
    X(PROFILE_PEAK_ERROR, "profile.peak_error", STRING, OPTIONAL, 0, NULL)                                             \
    X(PROFILE_OVERHEAD, "profile.overhead", OBJECT, PARENT, 0, NULL)                                                   \
    X(PROFILE_OVERHEAD_NS_PER_CALL, "profile.overhead.ns_per_call", NUMBER, PARENT, DPR_NONNEG, NULL)                  \
    X(PROFILE_OVERHEAD_CALLS_PER_ITER, "profile.overhead.calls_per_iter", NUMBER, PARENT, DPR_NONNEG, NULL)            \
    X(PROFILE_OVERHEAD_MS_PER_ITER, "profile.overhead.ms_per_iter", NUMBER, PARENT, DPR_NONNEG, NULL)                  \
    X(PROFILE_CALLS_DROPPED, "profile.calls_dropped", INTEGER, PARENT, DPR_NONNEG, NULL)                               \
    X(PROFILE_PHASES, "profile.phases", OBJECT, PARENT, 0, NULL)                                                       \
    X(PROFILE_PHASE, "profile.phases.{phase}", OBJECT, OPTIONAL, 0, NULL) /* the phases that ran */                    \
    X(PROFILE_PHASE_MS, "profile.phases.{phase}.ms", NUMBER, PARENT, DPR_NONNEG, NULL)                                 \
    X(PROFILE_PHASE_OPS_MS, "profile.phases.{phase}.ops_ms", NUMBER, PARENT, DPR_NONNEG, NULL)                         \
    X(PROFILE_PHASE_OUTSIDE_OPS_MS, "profile.phases.{phase}.outside_ops_ms", NUMBER, PARENT, DPR_NONNEG, NULL)         \
    X(PROFILE_OPS, "profile.ops", ARRAY, PARENT, 0, NULL) /* largest ms first */                                       \
    X(PROFILE_OP, "profile.ops[]", OBJECT, PARENT, 0, NULL)                                                            \
    X(PROFILE_OP_OP, "profile.ops[].op", STRING, PARENT, 0, NULL)                                                      \
    X(PROFILE_OP_CATEGORY, "profile.ops[].category", STRING, PARENT, 0, "op_categories")                               \
    X(PROFILE_OP_CALLS, "profile.ops[].calls", INTEGER, PARENT, DPR_NONNEG, NULL)                                      \
    X(PROFILE_OP_TIMED_CALLS, "profile.ops[].timed_calls", INTEGER, PARENT, DPR_NONNEG, NULL)                          \
    X(PROFILE_OP_MS, "profile.ops[].ms", NUMBER, PARENT, DPR_NONNEG, NULL)                                             \
    X(PROFILE_OP_FLOPS, "profile.ops[].flops", NUMBER, PARENT, DPR_NONNEG, NULL)                                       \
    X(PROFILE_OP_BYTES, "profile.ops[].bytes", NUMBER, PARENT, DPR_NONNEG, NULL)                                       \
    X(PROFILE_OP_FLOPS_PER_S, "profile.ops[].flops_per_s", NUMBER, PARENT, DPR_NONNEG | DPR_NULLABLE, NULL)            \
    X(PROFILE_OP_BYTES_PER_S, "profile.ops[].bytes_per_s", NUMBER, PARENT, DPR_NONNEG | DPR_NULLABLE, NULL)            \
    X(PROFILE_OP_FLOPS_FRACTION, "profile.ops[].flops_fraction", NUMBER, PARENT, DPR_NONNEG | DPR_NULLABLE, NULL)      \
    X(PROFILE_OP_BANDWIDTH_FRACTION, "profile.ops[].bandwidth_fraction", NUMBER, PARENT, DPR_NONNEG | DPR_NULLABLE,    \
      NULL)                                                                                                            \
    X(PROFILE_OP_ALLOC_BYTES, "profile.ops[].alloc_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                          \
    X(PROFILE_OP_FREED_BYTES, "profile.ops[].freed_bytes", INTEGER, PARENT, DPR_NONNEG, NULL)                          \
    X(REPEATS, "repeats", OBJECT, OPTIONAL, 0, NULL)    /* sweep points run with repeats = N > 1 */                    \
    X(REPEATS_N, "repeats.n", INTEGER, PARENT, 0, NULL) /* >= 1, the number of runs */                                 \
    X(REPEATS_RUNS, "repeats.runs", ARRAY, PARENT, 0, NULL)                                                            \
    X(REPEATS_RUN, "repeats.runs[]", OBJECT, PARENT, 0, NULL)                                                          \
    X(REPEATS_RUN_STATUS, "repeats.runs[].status", STRING, PARENT, 0, "statuses")                                      \
    X(REPEATS_RUN_MESSAGE, "repeats.runs[].message", STRING, OPTIONAL, 0, NULL) /* a failed run's first line */        \
    X(REPEATS_RUN_AVG_MS, "repeats.runs[].avg_ms", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                                 \
    X(REPEATS_RUN_MEDIAN_MS, "repeats.runs[].median_ms", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                           \
    X(REPEATS_RUN_MIN_MS, "repeats.runs[].min_ms", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                                 \
    X(REPEATS_RUN_MAX_MS, "repeats.runs[].max_ms", NUMBER, OPTIONAL, DPR_NONNEG, NULL)                                 \
    X(REPEATS_RUN_ITER_MS, "repeats.runs[].iter_ms", ARRAY, OPTIONAL, 0, NULL)                                         \
    X(REPEATS_RUN_ITER_MS_ITEM, "repeats.runs[].iter_ms[]", NUMBER, PARENT, DPR_NONNEG, NULL)                          \
    X(REPEATS_RUN_PHASES_MS, "repeats.runs[].phases_ms", OBJECT, OPTIONAL, 0, NULL)                                    \
    X(REPEATS_RUN_PHASE_MS, "repeats.runs[].phases_ms.{phase}", NUMBER, PARENT, DPR_NONNEG, NULL)                      \
    X(REPEATS_RUN_PEAK_BYTES, "repeats.runs[].peak_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL)                        \
    X(REPEATS_RUN_HOST_PEAK_RSS_BYTES, "repeats.runs[].host_peak_rss_bytes", INTEGER, OPTIONAL, DPR_NONNEG, NULL)      \
    X(REPEATS_RUN_PLACEMENT, "repeats.runs[].placement", OBJECT, OPTIONAL, DPR_OPEN, NULL) /* as sweep.placement */    \
    X(REPEATS_AVG_MS, "repeats.avg_ms", OBJECT, OPTIONAL, 0, NULL) /* over the ok runs; with any */                    \
    X(REPEATS_AVG_MS_MEDIAN, "repeats.avg_ms.median", NUMBER, PARENT, DPR_NONNEG, NULL)                                \
    X(REPEATS_AVG_MS_MIN, "repeats.avg_ms.min", NUMBER, PARENT, DPR_NONNEG, NULL)                                      \
    X(REPEATS_AVG_MS_MAX, "repeats.avg_ms.max", NUMBER, PARENT, DPR_NONNEG, NULL)                                      \
    X(REPEATS_PEAK_BYTES, "repeats.peak_bytes", OBJECT, OPTIONAL, 0, NULL)                                             \
    X(REPEATS_PEAK_BYTES_MIN, "repeats.peak_bytes.min", INTEGER, PARENT, DPR_NONNEG, NULL)                             \
    X(REPEATS_PEAK_BYTES_MAX, "repeats.peak_bytes.max", INTEGER, PARENT, DPR_NONNEG, NULL)                             \
    X(TRACE_FILE, "trace_file", STRING, OPTIONAL, 0, NULL)                                                             \
    X(SAVE_DIR, "save_dir", STRING, OPTIONAL, 0, NULL)                                                                 \
    X(EXTRA, "extra", ANY, OPTIONAL, DPR_OPEN, NULL)

/* The fields by id: DPR_<ID> (DPR_MEMORY_PEAK_BYTES), in the table's order. */
typedef enum {
#define DPR_ENUM_ID(id, path, type, when, flags, choices) DPR_##id,
    DPR_FIELDS(DPR_ENUM_ID)
#undef DPR_ENUM_ID
        DPR_N_FIELDS
} dpr_id;

/* No field: a memory category whose bytes no legacy breakdown field holds (memory_categories.h). */
#define DPR_NO_LEGACY (-1)

/* One field's description. */
typedef struct dpr_field {
    const char *path;
    dpr_type type;
    dpr_when when;
    unsigned flags;
    const char *choices; /* NULL or a list's name */
} dpr_field;

/* The description of field id (NULL when out of range). */
static inline const dpr_field *dpr_field_of(int id) {
    static const dpr_field fields[DPR_N_FIELDS] = {
#define DPR_ENTRY(id, path, type, when, flags, choices) {path, DPR_T_##type, DPR_W_##when, flags, choices},
        DPR_FIELDS(DPR_ENTRY)
#undef DPR_ENTRY
    };
    return id >= 0 && id < DPR_N_FIELDS ? &fields[id] : NULL;
}

/* The name of a type ("integer"; "scalar" is a number, string or boolean), as the Lua side has it. */
static inline const char *dpr_type_name(dpr_type t) {
    static const char *const names[] = {"string", "integer", "number", "boolean", "object", "array", "scalar", "any"};
    return (unsigned)t <= DPR_T_ANY ? names[t] : "?";
}

/* The name of a `when` ("always", "ok", "failed", "oom", "predicted", "parent", "optional"). */
static inline const char *dpr_when_name(dpr_when w) {
    static const char *const names[] = {"always", "ok", "failed", "oom", "predicted", "parent", "optional"};
    return (unsigned)w <= DPR_W_OPTIONAL ? names[w] : "?";
}

#endif
