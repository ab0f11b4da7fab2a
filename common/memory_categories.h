/* memory_categories.h: the engine's memory categories, listed once.
 *
 * Every allocation of the engine is charged to one of these (engine/core/memory.h's dp_category,
 * made from this list: DP_CAT_<ID>, in this order, named by the string). A result's
 * memory.categories has one key per name (docs/results.md); the rest derives from the list too:
 *
 *   X(ID, "name", LEGACY, COMPONENT)
 *     LEGACY     the field of the legacy breakdown the category's bytes live at the peak add to,
 *                as its id in common/results_schema.h (DPR_BREAKDOWN_..._MB), or DPR_NO_LEGACY
 *                (none: it is counted in the total only); the writer (lua/dpprof/results.lua,
 *                through dpprof.memory.CATEGORIES) and the chart reader both sum by it;
 *     COMPONENT  the charts' component the bytes are drawn in (plots/dpplot_palette.h's
 *                DPPLOT_COMP_<COMPONENT>, whose label and colour plots/palette.c holds).
 *
 * A new category is one row here; a new component is also one in dpplot_palette.h and palette.c
 * (the plots part does not compile until it has them). Only the engine's code names a category
 * by its id; the LEGACY and COMPONENT columns are read where results_schema.h and plots are
 * included, so the engine never sees them. */
#ifndef DPPROF_MEMORY_CATEGORIES_H
#define DPPROF_MEMORY_CATEGORIES_H

#define DPR_MEMORY_CATEGORIES(X)                                                                                       \
    X(PARAMETERS, "parameters", DPR_BREAKDOWN_MODEL_PARAMETERS_MB, PARAMETERS)                                         \
    X(GRADIENTS, "gradients", DPR_BREAKDOWN_GRADIENTS_MB, GRADIENTS)                                                   \
    X(OPTIMIZER_STATES, "optimizer_states", DPR_BREAKDOWN_OPTIMIZER_STATES_MB, OPTIMIZER_STATES)                       \
    X(ACTIVATIONS, "activations", DPR_BREAKDOWN_ACTIVATION_HOOKS_MB, ACTIVATIONS)                                      \
    X(PER_SAMPLE_GRADS, "per_sample_grads", DPR_BREAKDOWN_NORM_SAMPLES_MB, PER_SAMPLE_GRADS)                           \
    X(NORM_SAMPLES, "norm_samples", DPR_BREAKDOWN_NORM_SAMPLES_MB, NORM_SAMPLES)                                       \
    X(TEMP, "temp", DPR_BREAKDOWN_TEMP_MATRICES_MB, TEMP)                                                              \
    X(OUTPUT_GRADS, "output_grads", DPR_BREAKDOWN_ACTIVATION_HOOKS_MB, OUTPUT_GRADS)                                   \
    X(INPUTS, "inputs", DPR_NO_LEGACY, OTHER)                                                                          \
    X(WORKSPACE, "workspace", DPR_BREAKDOWN_TEMP_MATRICES_MB, TEMP)                                                    \
    X(OTHER, "other", DPR_NO_LEGACY, OTHER)

#endif
