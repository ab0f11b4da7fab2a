/* engine_profile.c: the per-op profile as the facade reads it: each op of the ledger with its
 * category and its measured time. Which op falls in which category is this file's table (the
 * Lua side's dpprof.profile.category and dpprof.ops read it from here); the categories' names
 * and order are the result schema's (DPR_OP_CATEGORIES, common/results_schema.h). */
#include "dpprof_engine.h"

#include "results_schema.h"

#include <ctype.h>
#include <string.h>

#define OPCAT_ID(id, name) OPCAT_##id,
#define OPCAT_NAME(id, name) name,
enum { DPR_OP_CATEGORIES(OPCAT_ID) OPCAT_COUNT };
static const char *const category_names[OPCAT_COUNT] = {DPR_OP_CATEGORIES(OPCAT_NAME)};

/* Exact names first, then prefixes; everything else is "other" (embeddings, activations, the
 * loss, copies, fills, element-wise arithmetic). */
static const struct {
    const char *op;
    int category;
} exact[] = {
    {"gemm", OPCAT_MATMUL},
    {"gemm_batched", OPCAT_MATMUL},
    {"attention_fwd", OPCAT_ATTENTION},
    {"attention_bwd", OPCAT_ATTENTION},
    {"rope_fwd", OPCAT_ATTENTION},
    {"rope_bwd", OPCAT_ATTENTION},
    {"layernorm_fwd", OPCAT_NORM},
    {"layernorm_bwd", OPCAT_NORM},
    {"rmsnorm_fwd", OPCAT_NORM},
    {"rmsnorm_bwd", OPCAT_NORM},
    {"sumsq", OPCAT_PER_SAMPLE_NORMS},
    {"dp_scale_samples", OPCAT_CLIP},
    {"dp_noise", OPCAT_NOISE},
    {"adamw_step", OPCAT_OPTIMIZER},
    {"sgd_step", OPCAT_OPTIMIZER},
};
static const struct {
    const char *prefix;
    int category;
} prefixes[] = {
    {"dp_clip", OPCAT_CLIP}, {"dp_noise", OPCAT_NOISE}, {"dp_", OPCAT_PER_SAMPLE_NORMS}, {"comm_", OPCAT_COMM}};

const char *dp_engine_op_category(const char *op) {
    /* "<section>:<op>" (a ledger section, e.g. "recompute:gemm") is in its op's category */
    const char *p = op;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    if (p > op && *p == ':' && p[1]) op = p + 1;
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(op, exact[i].op) == 0) return category_names[exact[i].category];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(op, prefixes[i].prefix, strlen(prefixes[i].prefix)) == 0)
            return category_names[prefixes[i].category];
    return category_names[OPCAT_OTHER];
}

size_t dp_engine_op_count(void) { return dp_ledger_count(); }

int dp_engine_op_at(size_t i, dp_engine_op *out) {
    const dp_ledger_entry *e = dp_ledger_at(i);
    if (!e)
        return dp_error_set(DP_EINVAL, "dp_engine_op_at: op %zu is out of range (the ledger holds %zu ops)", i,
                            dp_ledger_count());
    *out = (dp_engine_op){.op = e->op,
                          .category = dp_engine_op_category(e->op),
                          .calls = e->calls,
                          .timed_calls = e->timed_calls,
                          .ms = e->time_ns * 1e-6,
                          .flops = e->flops,
                          .bytes = e->bytes,
                          .alloc_bytes = e->alloc_bytes,
                          .freed_bytes = e->freed_bytes};
    return DP_OK;
}
