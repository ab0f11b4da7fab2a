/* dpplot_palette.h: fixed colours for methods, memory components, phases; viridis.
 *
 * A method has the same colour in every chart dpprof draws, by a rule that needs no list of
 * methods (plots/ reads result JSON only; the engine's list is dpprof.dpsgd.METHODS): the six
 * names charts have always drawn keep their Okabe-Ito colours (colour-blind safe) and order,
 * vanilla, flat, ghost, mixed_ghost, bk, flash_clip, so existing charts do not change; any
 * other name (a preset added later, "flash+twopass") takes one of eight fallback colours, none
 * of them one of the six, chosen by a hash of its name, so it too keeps its colour from chart
 * to chart. tests/lua/test_methods_known.lua checks that every preset of the engine's table
 * gets a colour no other preset has. Components and phases use Paul Tol's "muted" scheme,
 * which is colour-blind safe and distinct from the method colours. */
#ifndef DPPLOT_PALETTE_H
#define DPPLOT_PALETTE_H

#include "dpplot_canvas.h"
#include "results_schema.h"

/* Memory components of the breakdown charts, in stacking order (bottom first). */
typedef enum {
    DPPLOT_COMP_PARAMETERS,       /* parameters */
    DPPLOT_COMP_GRADIENTS,        /* gradients */
    DPPLOT_COMP_OPTIMIZER_STATES, /* optimizer_states */
    DPPLOT_COMP_ACTIVATIONS,      /* activations */
    DPPLOT_COMP_OUTPUT_GRADS,     /* output_grads (what book-keeping keeps) */
    DPPLOT_COMP_PER_SAMPLE_GRADS, /* per_sample_grads */
    DPPLOT_COMP_NORM_SAMPLES,     /* norm_samples */
    DPPLOT_COMP_TEMP,             /* temp + workspace */
    DPPLOT_COMP_OTHER,            /* inputs + other, and whatever the peak holds beyond the rest */
    DPPLOT_N_COMPONENTS
} dpplot_component;

/* Module groups of module_breakdown.png (docs/results.md, "Module paths"). */
typedef enum {
    DPPLOT_MOD_EMBEDDING,
    DPPLOT_MOD_ATTENTION,
    DPPLOT_MOD_MLP,
    DPPLOT_MOD_NORM,
    DPPLOT_MOD_HEAD,
    DPPLOT_MOD_LORA,
    DPPLOT_MOD_OTHER,
    DPPLOT_N_MODULE_GROUPS
} dpplot_module_group;

/* Training phases of timing.spans: the schema's (common/results_schema.h), in its order; recompute
 * (activation checkpointing) nests in a backward or clip span. */
typedef enum {
#define DPPLOT_PHASE_ENUM(id, name) DPPLOT_PHASE_##id,
    DPR_PHASES(DPPLOT_PHASE_ENUM)
#undef DPPLOT_PHASE_ENUM
        DPPLOT_N_PHASES
} dpplot_phase;

/* Op categories of a per-op profile (profile.ops[].category): the schema's (common/results_schema.h),
 * in its order, which is the charts'. */
typedef enum {
#define DPPLOT_OPCAT_ENUM(id, name) DPPLOT_OPCAT_##id,
    DPR_OP_CATEGORIES(DPPLOT_OPCAT_ENUM)
#undef DPPLOT_OPCAT_ENUM
        DPPLOT_N_OPCATS
} dpplot_op_category;

/* Number of names with a fixed colour and rank (vanilla ... flash_clip; see above). */
#define DPPLOT_N_PRESETS 6

/* Colour of a method by name: fixed for presets, a name-hashed fallback otherwise (NULL: grey). */
dpplot_rgb dpplot_method_color(const char *method);
/* Sort rank of a method: 0..5 for presets in canonical order, DPPLOT_N_PRESETS for the rest. */
int dpplot_method_rank(const char *method);
/* Preset name at rank i (0..5), or NULL when out of range. */
const char *dpplot_method_preset(int i);

/* Fill colour of a memory component. */
dpplot_rgb dpplot_component_color(dpplot_component c);
/* Human label of a component ("Optimizer states"); "?" when out of range. */
const char *dpplot_component_label(dpplot_component c);
/* Short key of a component as in CSV headers ("optimizer_states"); "?" when out of range. */
const char *dpplot_component_key(dpplot_component c);

/* Module group a dotted module path belongs to (lora, attention, mlp, norm, embedding, head,
 * other, tested in that order as docs/results.md specifies). NULL gives other. */
dpplot_module_group dpplot_module_group_of(const char *module_path);
/* Name of a module group ("attention"); "?" when out of range. */
const char *dpplot_module_group_name(dpplot_module_group g);

/* Phase by name ("forward", ...); -1 when unknown or NULL. */
int dpplot_phase_from_name(const char *name);
/* Name of a phase ("forward"); "?" when out of range. */
const char *dpplot_phase_name(dpplot_phase p);
/* Shading colour of a phase span (draw it light: alpha about 0.3). */
dpplot_rgb dpplot_phase_color(dpplot_phase p);

/* Op category by name ("matmul", ...); DPPLOT_OPCAT_OTHER when unknown or NULL. */
dpplot_op_category dpplot_op_category_from_name(const char *name);
/* Name of an op category as results write it ("per_sample_norms"); "?" when out of range. */
const char *dpplot_op_category_name(dpplot_op_category c);
/* Human label of an op category ("Per-sample norms"); "?" when out of range. */
const char *dpplot_op_category_label(dpplot_op_category c);
/* Fill colour of an op category (Paul Tol's "bright" scheme and greys). */
dpplot_rgb dpplot_op_category_color(dpplot_op_category c);

/* Viridis colour at t in [0, 1] (clamped; NaN gives the low end), from the 256-entry table. */
dpplot_rgb dpplot_viridis(double t);

#endif
