/* dpsgd_method.c: the DP methods: presets, names, and the per-layer cost model that picks a norm
 * formulation. */
#include "dpsgd_impl.h"

#include "error.h"

#include <string.h>

static const struct preset {
    const char *name;
    dpsgd_norms_method norms;
    dpsgd_clip_method clip;
} presets[] = {
    {"vanilla", DPSGD_NORMS_NONE, DPSGD_CLIP_NONE},   {"flat", DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_BK},
    {"ghost", DPSGD_NORMS_GHOST, DPSGD_CLIP_TWOPASS}, {"mixed_ghost", DPSGD_NORMS_MIXED, DPSGD_CLIP_TWOPASS},
    {"bk", DPSGD_NORMS_MIXED, DPSGD_CLIP_BK},         {"flash_clip", DPSGD_NORMS_FLASH, DPSGD_CLIP_BK},
};
#define N_PRESETS (sizeof presets / sizeof *presets)

static const char *const norms_names[] = {"none", "materialize", "ghost", "mixed", "flash"};
static const char *const clip_names[] = {"none", "twopass", "bk"};
static const char *const form_names[] = {"direct", "materialize", "ghost",      "gram_tile", "grad_tile",
                                         "batch1", "grouped",     "gram_strip", "grad_strip"};
static const char *const flash_impl_names[] = {"tiles", "strips"};

int dpsgd_method_preset(const char *name, dpsgd_norms_method *norms, dpsgd_clip_method *clip) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (name && strcmp(name, presets[i].name) == 0) {
            *norms = presets[i].norms;
            *clip = presets[i].clip;
            return DP_OK;
        }
    return dp_error_set(DP_EINVAL, "unknown DP method '%s' (valid: vanilla, flat, ghost, mixed_ghost, bk, flash_clip)",
                        name ? name : "(null)");
}

/* Index of name among names[lo..hi], or -1. */
static int find_name(const char *name, const char *const *names, int lo, int hi) {
    for (int i = lo; name && i <= hi; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

int dpsgd_norms_parse(const char *name, dpsgd_norms_method *out) {
    int i = find_name(name, norms_names, DPSGD_NORMS_MATERIALIZE, DPSGD_NORMS_FLASH);
    if (i < 0)
        return dp_error_set(DP_EINVAL, "unknown norms method '%s' (valid: materialize, ghost, mixed, flash)",
                            name ? name : "(null)");
    *out = (dpsgd_norms_method)i;
    return DP_OK;
}

int dpsgd_clip_parse(const char *name, dpsgd_clip_method *out) {
    int i = find_name(name, clip_names, DPSGD_CLIP_TWOPASS, DPSGD_CLIP_BK);
    if (i < 0) return dp_error_set(DP_EINVAL, "unknown clip method '%s' (valid: twopass, bk)", name ? name : "(null)");
    *out = (dpsgd_clip_method)i;
    return DP_OK;
}

const char *dpsgd_norms_name(dpsgd_norms_method n) { return (unsigned)n <= DPSGD_NORMS_FLASH ? norms_names[n] : "?"; }

const char *dpsgd_clip_name(dpsgd_clip_method c) { return (unsigned)c <= DPSGD_CLIP_BK ? clip_names[c] : "?"; }

const char *dpsgd_method_preset_name(dpsgd_norms_method n, dpsgd_clip_method c) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (presets[i].norms == n && presets[i].clip == c) return presets[i].name;
    return NULL;
}

const char *dpsgd_formulation_name(dpsgd_formulation f) {
    return (unsigned)f <= DPSGD_FORM_GRAD_STRIP ? form_names[f] : "?";
}

int dpsgd_flash_impl_parse(const char *name, dpsgd_flash_impl *out) {
    int i = find_name(name, flash_impl_names, DPSGD_FLASH_TILES, DPSGD_FLASH_STRIPS);
    if (i < 0) return dp_error_set(DP_EINVAL, "unknown flash_impl '%s' (valid: tiles, strips)", name ? name : "(null)");
    *out = (dpsgd_flash_impl)i;
    return DP_OK;
}

const char *dpsgd_flash_impl_name(dpsgd_flash_impl g) {
    return (unsigned)g <= DPSGD_FLASH_STRIPS ? flash_impl_names[g] : "?";
}

const char *dpsgd_linear_kind(const dp_param *w) {
    switch (w->kind) {
    case DP_PARAM_EMBEDDING: return "tied_head";
    case DP_PARAM_HEAD: return "head";
    case DP_PARAM_LORA_A: return "lora_a";
    case DP_PARAM_LORA_B: return "lora_b";
    default: return "linear";
    }
}

/* The cost model. One nominal device for every backend (a Hopper-class GPU: dense f32 on the
 * CUDA cores, bf16 on the tensor cores, HBM bandwidth), so that the choice, and with it every
 * allocation, is a function of the shapes alone: CPU, CUDA and plan runs allocate alike. The
 * estimate is a roofline, max(flops / rate, bytes / bandwidth); ties go to the Gram side. */
#define COST_F32_FLOPS 50e12
#define COST_BF16_FLOPS 600e12
#define COST_BYTES_PER_S 3.0e12

static double roofline(double flops, double bytes, dp_dtype t) {
    double f = flops / (t == DP_BF16 ? COST_BF16_FLOPS : COST_F32_FLOPS), b = bytes / COST_BYTES_PER_S;
    return f > b ? f : b;
}

dpsgd_formulation dpsgd_choose_linear(dpsgd_norms_method norms, int64_t B, int64_t T, int64_t d, int64_t p, dp_dtype t,
                                      double *flops, double *bytes) {
    double b = (double)B, tt = (double)T, dd = (double)d, pp = (double)p, es = (double)dp_dtype_size(t);
    double io = b * tt * (dd + pp) * es; /* reading A and G once */
    /* ghost: two T x T Gram GEMMs, written and read back by the dot */
    double ghost_f = 2.0 * b * tt * tt * (dd + pp) + 2.0 * b * tt * tt, ghost_b = io + 4.0 * b * tt * tt * 4.0;
    /* materialize: the batched GEMM g_i^T a_i, written and read back by the sum of squares */
    double mat_f = 2.0 * b * tt * pp * dd + 2.0 * b * pp * dd, mat_b = io + 2.0 * b * pp * dd * 4.0;
    /* flash: the lower triangle of Gram tiles, or the gradient's tiles, operands read once */
    double gram_f = b * tt * (tt + 1.0) * (dd + pp) + b * tt * (tt + 1.0), grad_f = mat_f;
    dpsgd_formulation f = DPSGD_FORM_DIRECT;
    switch (norms) {
    case DPSGD_NORMS_MATERIALIZE: f = DPSGD_FORM_MATERIALIZE; break;
    case DPSGD_NORMS_GHOST: f = DPSGD_FORM_GHOST; break;
    case DPSGD_NORMS_MIXED:
        f = roofline(ghost_f, ghost_b, t) <= roofline(mat_f, mat_b, t) ? DPSGD_FORM_GHOST : DPSGD_FORM_MATERIALIZE;
        break;
    case DPSGD_NORMS_FLASH:
        f = B == 1 ? DPSGD_FORM_BATCH1 : gram_f <= grad_f ? DPSGD_FORM_GRAM_TILE : DPSGD_FORM_GRAD_TILE;
        break;
    default: break;
    }
    double cf = 0.0, cb = 0.0;
    switch (f) {
    case DPSGD_FORM_GHOST:
        cf = ghost_f;
        cb = ghost_b;
        break;
    case DPSGD_FORM_MATERIALIZE:
    case DPSGD_FORM_BATCH1:
        cf = mat_f;
        cb = mat_b;
        break;
    case DPSGD_FORM_GRAM_TILE:
        cf = gram_f;
        cb = io + 4.0 * b;
        break;
    case DPSGD_FORM_GRAD_TILE:
        cf = grad_f;
        cb = io + 4.0 * b;
        break;
    default: break;
    }
    if (flops) *flops = cf;
    if (bytes) *bytes = cb;
    return f;
}

dpsgd_formulation dpsgd_choose_embedding(dpsgd_norms_method norms) {
    /* grouping costs O(B T d) and a sort, against ghost's 2 B T^2 d: mixed always groups */
    return norms == DPSGD_NORMS_GHOST ? DPSGD_FORM_GHOST : DPSGD_FORM_GROUPED;
}
