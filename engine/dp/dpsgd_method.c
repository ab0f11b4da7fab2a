/* dpsgd_method.c: the DP methods: presets, names, and the per-layer cost model that picks a norm
 * formulation. */
#include "dpsgd_impl.h"

#include "error.h"

#include <stdio.h>
#include <string.h>

/* The presets: the one list of DP methods by name, in the order results and charts show them
 * (vanilla, the baseline, first). dpprof.dpsgd.METHODS and dpprof.dpsgd.PRESETS are made from it, and
 * every Lua module and the CLI read those: a preset added here is known everywhere. */
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

/* Names by enum value; index 0 of norms and clip is vanilla's "none", which no one chooses. */
static const char *const norms_names[DPSGD_N_NORMS] = {"none", "materialize", "ghost", "mixed", "flash"};
static const char *const clip_names[DPSGD_N_CLIPS] = {"none", "twopass", "bk"};
static const char *const form_names[DPSGD_N_FORMULATIONS] = {
    "direct", "materialize", "ghost", "gram_tile", "grad_tile", "batch1", "grouped", "gram_strip", "grad_strip"};
static const char *const flash_impl_names[DPSGD_N_FLASH_IMPLS] = {"tiles", "strips"};
static const char *const style_names[DPSGD_N_STYLES] = {"flat", "per_layer", "per_block", "groups"};
static const char *const clip_fn_names[DPSGD_N_CLIP_FNS] = {"abadi", "automatic"};

const char *dpsgd_list_name(dpsgd_list list, size_t i) {
    switch (list) {
    case DPSGD_LIST_PRESETS: return i < N_PRESETS ? presets[i].name : NULL;
    case DPSGD_LIST_NORMS: return i + 1 < DPSGD_N_NORMS ? norms_names[i + 1] : NULL;
    case DPSGD_LIST_CLIPS: return i + 1 < DPSGD_N_CLIPS ? clip_names[i + 1] : NULL;
    case DPSGD_LIST_FORMULATIONS: return i < DPSGD_N_FORMULATIONS ? form_names[i] : NULL;
    case DPSGD_LIST_FLASH_IMPLS: return i < DPSGD_N_FLASH_IMPLS ? flash_impl_names[i] : NULL;
    case DPSGD_LIST_STYLES: return i < DPSGD_N_STYLES ? style_names[i] : NULL;
    case DPSGD_LIST_CLIP_FNS: return i < DPSGD_N_CLIP_FNS ? clip_fn_names[i] : NULL;
    }
    return NULL;
}

const char *dpsgd_list_join(dpsgd_list list, char *buf, size_t n) {
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (size_t i = 0; dpsgd_list_name(list, i) && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", dpsgd_list_name(list, i));
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

/* Parses name among list's names; DP_EINVAL "unknown <what> '<name>' (valid: ...)". */
static int parse(dpsgd_list list, const char *what, const char *name, size_t *index) {
    for (size_t i = 0; name && dpsgd_list_name(list, i); i++)
        if (strcmp(name, dpsgd_list_name(list, i)) == 0) {
            *index = i;
            return DP_OK;
        }
    char valid[256];
    return dp_error_set(DP_EINVAL, "unknown %s '%s' (valid: %s)", what, name ? name : "(null)",
                        dpsgd_list_join(list, valid, sizeof valid));
}

int dpsgd_method_preset(const char *name, dpsgd_norms_method *norms, dpsgd_clip_method *clip) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_PRESETS, "DP method", name, &i));
    *norms = presets[i].norms;
    *clip = presets[i].clip;
    return DP_OK;
}

int dpsgd_norms_parse(const char *name, dpsgd_norms_method *out) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_NORMS, "norms method", name, &i));
    *out = (dpsgd_norms_method)(i + 1);
    return DP_OK;
}

int dpsgd_clip_parse(const char *name, dpsgd_clip_method *out) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_CLIPS, "clip method", name, &i));
    *out = (dpsgd_clip_method)(i + 1);
    return DP_OK;
}

const char *dpsgd_choices_text(char *buf, size_t n) {
    char norms[128], clips[64];
    snprintf(buf, n, "norms: %s; clip: %s", dpsgd_list_join(DPSGD_LIST_NORMS, norms, sizeof norms),
             dpsgd_list_join(DPSGD_LIST_CLIPS, clips, sizeof clips));
    return buf;
}

const char *dpsgd_norms_name(dpsgd_norms_method n) { return (unsigned)n < DPSGD_N_NORMS ? norms_names[n] : "?"; }

const char *dpsgd_clip_name(dpsgd_clip_method c) { return (unsigned)c < DPSGD_N_CLIPS ? clip_names[c] : "?"; }

const char *dpsgd_method_preset_name(dpsgd_norms_method n, dpsgd_clip_method c) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (presets[i].norms == n && presets[i].clip == c) return presets[i].name;
    return NULL;
}

const char *dpsgd_formulation_name(dpsgd_formulation f) {
    return (unsigned)f < DPSGD_N_FORMULATIONS ? form_names[f] : "?";
}

int dpsgd_flash_impl_parse(const char *name, dpsgd_flash_impl *out) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_FLASH_IMPLS, "flash_impl", name, &i));
    *out = (dpsgd_flash_impl)i;
    return DP_OK;
}

const char *dpsgd_flash_impl_name(dpsgd_flash_impl g) {
    return (unsigned)g < DPSGD_N_FLASH_IMPLS ? flash_impl_names[g] : "?";
}

int dpsgd_style_parse(const char *name, dpsgd_clip_style *out) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_STYLES, "clipping style", name, &i));
    *out = (dpsgd_clip_style)i;
    return DP_OK;
}

const char *dpsgd_style_name(dpsgd_clip_style s) { return (unsigned)s < DPSGD_N_STYLES ? style_names[s] : "?"; }

int dpsgd_clip_fn_parse(const char *name, dpsgd_clip_fn *out) {
    size_t i = 0;
    DP_TRY(parse(DPSGD_LIST_CLIP_FNS, "clip_fn", name, &i));
    *out = (dpsgd_clip_fn)i;
    return DP_OK;
}

const char *dpsgd_clip_fn_name(dpsgd_clip_fn f) { return (unsigned)f < DPSGD_N_CLIP_FNS ? clip_fn_names[f] : "?"; }

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

double dpsgd_gram_tile_flops(int64_t B, int64_t T, int64_t d, int64_t p) {
    double b = (double)B, t = (double)T;
    return b * t * (t + 1.0) * ((double)d + (double)p) + b * t * (t + 1.0);
}

double dpsgd_grad_tile_flops(int64_t B, int64_t T, int64_t d, int64_t p) {
    double b = (double)B, pp = (double)p, dd = (double)d;
    return 2.0 * b * (double)T * pp * dd + 2.0 * b * pp * dd;
}

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
    double mat_f = dpsgd_grad_tile_flops(B, T, d, p), mat_b = io + 2.0 * b * pp * dd * 4.0;
    /* flash: the lower triangle of Gram tiles, or the gradient's tiles, operands read once */
    double gram_f = dpsgd_gram_tile_flops(B, T, d, p), grad_f = mat_f;
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

int dpsgd_flash_bk_materializes(dpsgd_norms_method norms, dpsgd_clip_method clip, int64_t B, int64_t T, int64_t d,
                                dp_dtype t) {
    /* per sample: p x d f32 per-sample gradient against the T x p output gradient in t */
    return norms == DPSGD_NORMS_FLASH && clip == DPSGD_CLIP_BK && B > 1 &&
           (double)d * 4.0 * DPSGD_FLASH_BK_PSG_FRACTION <= (double)T * (double)dp_dtype_size(t);
}

dpsgd_formulation dpsgd_choose_embedding(dpsgd_norms_method norms) {
    /* grouping costs O(B T d) and a sort, against ghost's 2 B T^2 d: mixed always groups */
    return norms == DPSGD_NORMS_GHOST ? DPSGD_FORM_GHOST : DPSGD_FORM_GROUPED;
}
