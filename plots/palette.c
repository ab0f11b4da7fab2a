/* palette.c: method, component and phase colours; module path grouping. */
#include "dpplot_palette.h"

#include <string.h>

/* The colours (and the order) the charts have always given these six names, kept so that charts
 * do not change. This is not the list of DP methods: plots/ reads result JSON only and never sees
 * the engine's (dpprof.dpsgd.METHODS). Every other name a result carries, a preset added to the
 * engine later included, takes its colour by the rule in dpplot_method_color, which needs no
 * entry here. */
static const char *const preset_names[DPPLOT_N_PRESETS] = {"vanilla",     "flat", "ghost",
                                                           "mixed_ghost", "bk",   "flash_clip"};

/* Okabe-Ito; vanilla takes a neutral grey because it is the baseline, not a DP method. */
static const unsigned preset_colors[DPPLOT_N_PRESETS] = {
    0x666666, /* vanilla: grey */
    0xE69F00, /* flat: orange */
    0x0072B2, /* ghost: blue */
    0x56B4E9, /* mixed_ghost: sky blue */
    0x009E73, /* bk: bluish green */
    0xD55E00, /* flash_clip: vermillion */
};

/* Every other name: one of these by a hash of the name (Okabe-Ito's reddish purple, then Tol
 * colours far from the above), none of them a colour of the six. */
static const unsigned fallback_colors[] = {0xCC79A7, 0x332288, 0x882255, 0x999933,
                                           0x44AA99, 0xAA4499, 0x117733, 0x000000};
#define N_FALLBACK (sizeof fallback_colors / sizeof fallback_colors[0])

dpplot_rgb dpplot_method_color(const char *method) {
    if (!method) return dpplot_rgb_hex(0x999999);
    int rank = dpplot_method_rank(method);
    if (rank < DPPLOT_N_PRESETS) return dpplot_rgb_hex(preset_colors[rank]);
    /* FNV-1a: stable across runs and machines, so a custom method keeps its colour. */
    unsigned long h = 2166136261ul;
    for (const unsigned char *p = (const unsigned char *)method; *p; p++) h = ((h ^ *p) * 16777619ul) & 0xfffffffful;
    return dpplot_rgb_hex(fallback_colors[h % N_FALLBACK]);
}

int dpplot_method_rank(const char *method) {
    if (method)
        for (int i = 0; i < DPPLOT_N_PRESETS; i++)
            if (strcmp(method, preset_names[i]) == 0) return i;
    return DPPLOT_N_PRESETS;
}

const char *dpplot_method_preset(int i) { return i >= 0 && i < DPPLOT_N_PRESETS ? preset_names[i] : NULL; }

/* Paul Tol's "muted" scheme, one colour per component. */
static const unsigned component_colors[DPPLOT_N_COMPONENTS] = {
    0x332288, /* parameters: indigo */
    0x88CCEE, /* gradients: cyan */
    0x44AA99, /* optimizer states: teal */
    0x117733, /* activations: green */
    0x999933, /* output grads: olive */
    0xCC6677, /* per-sample grads: rose */
    0xEE7733, /* norm samples: orange (wine beside the parameters' indigo read as one) */
    0xDDCC77, /* temporaries: sand */
    0xBBBBBB, /* other: pale grey */
};
static const char *const component_labels[DPPLOT_N_COMPONENTS] = {"Parameters",   "Gradients",    "Optimizer states",
                                                                  "Activations",  "Output grads", "Per-sample grads",
                                                                  "Norm samples", "Temporaries",  "Other"};
static const char *const component_keys[DPPLOT_N_COMPONENTS] = {"parameters",   "gradients",    "optimizer_states",
                                                                "activations",  "output_grads", "per_sample_grads",
                                                                "norm_samples", "temp",         "other"};

dpplot_rgb dpplot_component_color(dpplot_component c) {
    return (unsigned)c < DPPLOT_N_COMPONENTS ? dpplot_rgb_hex(component_colors[c]) : dpplot_rgb_hex(0xBBBBBB);
}
const char *dpplot_component_label(dpplot_component c) {
    return (unsigned)c < DPPLOT_N_COMPONENTS ? component_labels[c] : "?";
}
const char *dpplot_component_key(dpplot_component c) {
    return (unsigned)c < DPPLOT_N_COMPONENTS ? component_keys[c] : "?";
}

static const char *const module_group_names[DPPLOT_N_MODULE_GROUPS] = {"embedding", "attention", "mlp",  "norm",
                                                                       "head",      "lora",      "other"};

dpplot_module_group dpplot_module_group_of(const char *path) {
    if (!path) return DPPLOT_MOD_OTHER;
    if (strstr(path, ".lora")) return DPPLOT_MOD_LORA;
    if (strstr(path, "attn")) return DPPLOT_MOD_ATTENTION;
    if (strstr(path, "mlp")) return DPPLOT_MOD_MLP;
    if (strstr(path, "ln_") || strstr(path, "norm")) return DPPLOT_MOD_NORM;
    if (strstr(path, "wte") || strstr(path, "wpe") || strstr(path, "embed")) return DPPLOT_MOD_EMBEDDING;
    if (strstr(path, "lm_head") || strstr(path, "loss")) return DPPLOT_MOD_HEAD;
    return DPPLOT_MOD_OTHER;
}

const char *dpplot_module_group_name(dpplot_module_group g) {
    return (unsigned)g < DPPLOT_N_MODULE_GROUPS ? module_group_names[g] : "?";
}

#define DPPLOT_PHASE_NAME(id, name) name,
static const char *const phase_names[DPPLOT_N_PHASES] = {DPR_PHASES(DPPLOT_PHASE_NAME)};
#undef DPPLOT_PHASE_NAME
_Static_assert(DPPLOT_N_PHASES == 7, "a colour per phase of the schema below");
static const unsigned phase_colors[DPPLOT_N_PHASES] = {
    0x88CCEE, /* forward: cyan */
    0xDDCC77, /* backward: sand */
    0xCC6677, /* clip: rose */
    0xAA4499, /* noise: purple */
    0x44AA99, /* optimizer: teal */
    0x999933, /* recompute: olive */
    0x332288, /* comm: indigo */
};

int dpplot_phase_from_name(const char *name) {
    if (name)
        for (int i = 0; i < DPPLOT_N_PHASES; i++)
            if (strcmp(name, phase_names[i]) == 0) return i;
    return -1;
}
const char *dpplot_phase_name(dpplot_phase p) { return (unsigned)p < DPPLOT_N_PHASES ? phase_names[p] : "?"; }
dpplot_rgb dpplot_phase_color(dpplot_phase p) {
    return (unsigned)p < DPPLOT_N_PHASES ? dpplot_rgb_hex(phase_colors[p]) : dpplot_rgb_hex(0xDDDDDD);
}

#define DPPLOT_OPCAT_NAME(id, name) name,
static const char *const opcat_names[DPPLOT_N_OPCATS] = {DPR_OP_CATEGORIES(DPPLOT_OPCAT_NAME)};
#undef DPPLOT_OPCAT_NAME
_Static_assert(DPPLOT_N_OPCATS == 9, "a label and a colour per op category of the schema below");
static const char *const opcat_labels[DPPLOT_N_OPCATS] = {
    "Matmul", "Attention", "Norm", "Per-sample norms", "Clip", "Noise", "Optimizer", "Communication", "Other"};
static const unsigned opcat_colors[DPPLOT_N_OPCATS] = {
    0x4477AA, /* matmul: blue */
    0x66CCEE, /* attention: cyan */
    0x228833, /* norm: green */
    0xCCBB44, /* per-sample norms: yellow */
    0xEE6677, /* clip: red */
    0xAA3377, /* noise: purple */
    0x555555, /* optimizer: dark grey */
    0x332288, /* comm: indigo */
    0xBBBBBB, /* other: pale grey */
};

dpplot_op_category dpplot_op_category_from_name(const char *name) {
    if (name)
        for (int i = 0; i < DPPLOT_N_OPCATS; i++)
            if (strcmp(name, opcat_names[i]) == 0) return (dpplot_op_category)i;
    return DPPLOT_OPCAT_OTHER;
}
const char *dpplot_op_category_name(dpplot_op_category c) {
    return (unsigned)c < DPPLOT_N_OPCATS ? opcat_names[c] : "?";
}
const char *dpplot_op_category_label(dpplot_op_category c) {
    return (unsigned)c < DPPLOT_N_OPCATS ? opcat_labels[c] : "?";
}
dpplot_rgb dpplot_op_category_color(dpplot_op_category c) {
    return (unsigned)c < DPPLOT_N_OPCATS ? dpplot_rgb_hex(opcat_colors[c]) : dpplot_rgb_hex(0xBBBBBB);
}
