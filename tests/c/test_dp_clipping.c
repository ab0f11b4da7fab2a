/* test_dp_clipping.c: clipping styles (flat, per_layer, per_block, groups) and clip functions
 * (abadi, automatic) for every norms method under bk and twopass (issue 40).
 *
 * Part 1, explicit: small GPT (tied) and Llama (LoRA) models; every sample's gradient is taken
 * alone (B = 1 backwards), grouped as the wrapper groups the tensors, each group's norm and
 * factor worked out in double, and the clipped sum sum_i c_gi g_pi formed; the wrapper's gradients
 * after clip must equal it for every style, clip function, norms method and clip (1e-5 of each tensor's
 * largest entry), its group norms those of the explicit gradients, with bounds at the median of
 * the group norms so that some clip and some do not. Part 2, PyTorch: the float64 references of
 * tests/fixtures/clipping (gen_clipping.py) for GPT-2, Llama and a PEFT LoRA Llama, every style.
 * Part 3: Opacus's DPPerLayerOptimizer factors and noise norm from its own fixture. Part 4: the
 * groups' refusals, and the noise's std sigma ||C||_2. */
#include "check.h"
#include "test_util.h"
#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd_impl.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"
#include "tensor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5       /* the explicit parts: f32 against f32 sums in another order */
#define TORCH_TOL 5e-5 /* against float64: measured at most 8.3e-6 (peft_llama automatic_per_layer) */

static dp_device *cpu;

/* ---- the reference: explicit per-sample gradients ------------------------------------------ */

/* g[k][i * n_k + j]: element j of trainable tensor tp[k]'s gradient of sample i alone (B = 1
 * backwards with scale 1, as the DP methods' per-sample gradients are defined). */
static double **explicit_grads(dp_model *m, const dp_tensor *inputs, const dp_tensor *targets, dp_param **tp,
                               int n_tp) {
    int64_t B = inputs->shape[0], T = inputs->shape[1];
    double **g = calloc((size_t)n_tp, sizeof *g);
    for (int k = 0; k < n_tp; k++) g[k] = calloc((size_t)(B * tp[k]->value.numel), sizeof **g);
    float *host = NULL;
    for (int64_t i = 0; i < B; i++) {
        int64_t one[2] = {1, T};
        dp_tensor in1, tg1;
        CHECK_OK(dp_tensor_view(&in1, inputs, i * T, 2, one));
        CHECK_OK(dp_tensor_view(&tg1, targets, i * T, 2, one));
        float loss, s = 1.0f;
        CHECK_OK(dp_model_forward(m, &in1, &tg1, &loss, NULL));
        dp_backward_opts o = {.sample_scale = &s, .weight_grads = 1, .retain = 0, .hooks = NULL};
        CHECK_OK(dp_model_backward(m, &o));
        for (int k = 0; k < n_tp; k++) {
            int64_t n = tp[k]->value.numel;
            if (!tp[k]->grad.numel) continue; /* no gradient: zeros */
            host = realloc(host, (size_t)n * sizeof *host);
            CHECK_OK(dp_tensor_to_host(&tp[k]->grad, host, (uint64_t)n * sizeof *host));
            for (int64_t j = 0; j < n; j++) g[k][i * n + j] = host[j];
        }
        CHECK_OK(dp_model_zero_grad(m, 1));
    }
    free(host);
    return g;
}

static void free_grads(double **g, int n_tp) {
    for (int k = 0; k < n_tp; k++) free(g[k]);
    free(g);
}

/* The groups' norms nrm[g * B + i] of the explicit gradients under dp's grouping. */
static double *group_norms_of(const dpsgd *dp, double **g, dp_param **tp, int n_tp, int64_t B) {
    int G = (int)dpsgd_clip_group_count(dp);
    double *nrm = calloc((size_t)(G * B), sizeof *nrm);
    for (int k = 0; k < n_tp; k++) {
        int grp = dpsgd_param_clip_group(dp, tp[k]);
        int64_t n = tp[k]->value.numel;
        for (int64_t i = 0; i < B; i++)
            for (int64_t j = 0; j < n; j++) nrm[grp * B + i] += g[k][i * n + j] * g[k][i * n + j];
    }
    for (int64_t x = 0; x < G * B; x++) nrm[x] = sqrt(nrm[x]);
    return nrm;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (not sorted in place). */
static double median(const double *v, int64_t n) {
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* max |got - want| over max |want| of tensor p's gradient (dpprof's layout) against want. */
static double grad_error(const dp_param *p, const double *want) {
    int64_t n = p->value.numel;
    float *got = calloc((size_t)n, sizeof *got);
    if (p->grad.numel) CHECK_OK(dp_tensor_to_host(&p->grad, got, (uint64_t)n * sizeof *got));
    double diff = 0, ref = 0;
    for (int64_t j = 0; j < n; j++) {
        diff = fmax(diff, fabs(got[j] - want[j]));
        ref = fmax(ref, fabs(want[j]));
    }
    free(got);
    return diff / fmax(ref, 1e-30);
}

/* ---- part 1: explicit gradients of small models --------------------------------------------- */

typedef struct model_case {
    const char *what;
    dp_arch arch;
    int tied, lora;
    const dpsgd_group_spec *groups; /* the groups style's groups for this model */
    size_t n_groups;
} model_case;

static dp_model *small_model(const model_case *mc, int64_t B, int64_t T) {
    dp_model_config cfg;
    dp_model_config_default(&cfg, mc->arch);
    cfg.vocab = 23;
    cfg.hidden = 16;
    cfg.heads = 2;
    cfg.layers = 2;
    cfg.ffn = 24;
    cfg.seq_len = T;
    cfg.batch = B;
    cfg.tie_head = mc->tied;
    cfg.seed = 17;
    if (mc->lora) {
        cfg.lora_rank = 2;
        cfg.lora_alpha = 4.0f;
        cfg.lora_targets = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
    }
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &cfg, &m));
    for (int k = 0; m && k < dp_model_param_count(m); k++) { /* LoRA B starts at 0: no gradient for A */
        dp_param *p = dp_model_param(m, k);
        if (p->kind == DP_PARAM_LORA_B) CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, 0.3f, 5, 300 + k));
    }
    return m;
}

/* A wrapper of style st and clip function fn, bound C for the style's default groups (and the
 * case's groups for the groups style, each with bound C times 1, 1.5, 2, ...). */
static dpsgd *wrap(dp_model *m, const model_case *mc, dpsgd_norms_method norms, dpsgd_clip_method clip,
                   dpsgd_flash_impl impl, dpsgd_clip_style st, dpsgd_clip_fn fn, double C) {
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = norms;
    cfg.clip = clip;
    cfg.flash_impl = impl;
    cfg.clipping = st;
    cfg.clip_fn = fn;
    cfg.max_grad_norm = C;
    cfg.noise_multiplier = 0.0;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (dp && st == DPSGD_STYLE_GROUPS) {
        dpsgd_group_spec specs[8];
        for (size_t g = 0; g < mc->n_groups; g++) {
            specs[g] = mc->groups[g];
            specs[g].max_grad_norm = C * (1.0 + 0.5 * (double)g);
        }
        CHECK_OK(dpsgd_set_clip_groups(dp, specs, mc->n_groups));
    }
    return dp;
}

static const char *norms_label(dpsgd_norms_method n, dpsgd_flash_impl impl) {
    return n == DPSGD_NORMS_FLASH && impl == DPSGD_FLASH_STRIPS ? "flash(strips)" : dpsgd_norms_name(n);
}

/* Every norms method under both clips (flash also with its strips). */
static const struct {
    dpsgd_norms_method norms;
    dpsgd_clip_method clip;
    dpsgd_flash_impl impl;
} methods[] = {
    {DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_BK, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_GHOST, DPSGD_CLIP_BK, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_MIXED, DPSGD_CLIP_BK, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_FLASH, DPSGD_CLIP_BK, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_FLASH, DPSGD_CLIP_BK, DPSGD_FLASH_STRIPS},
    {DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_GHOST, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_MIXED, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
    {DPSGD_NORMS_FLASH, DPSGD_CLIP_TWOPASS, DPSGD_FLASH_TILES},
};

/* One style and clip function under every norms method: the clipped sum and the group norms
 * against the explicit gradients g. */
static void check_style(dp_model *m, const model_case *mc, dp_param **tp, int n_tp, double **g, const dp_tensor *inputs,
                        const dp_tensor *targets, dpsgd_clip_style st, dpsgd_clip_fn fn) {
    int64_t B = inputs->shape[0];
    /* the bound: the median of the groups' norms (some clip, some do not) */
    dpsgd *probe = wrap(m, mc, DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_BK, DPSGD_FLASH_TILES, st, fn, 1.0);
    if (!probe) return;
    int G = (int)dpsgd_clip_group_count(probe);
    double *nrm = group_norms_of(probe, g, tp, n_tp, B);
    double C = median(nrm, G * B);
    dpsgd_free(probe);
    free(nrm);
    for (size_t mi = 0; mi < sizeof methods / sizeof *methods; mi++) {
        dpsgd *dp = wrap(m, mc, methods[mi].norms, methods[mi].clip, methods[mi].impl, st, fn, C);
        if (!dp) continue;
        char what[200];
        snprintf(what, sizeof what, "%s %s/%s [%s+%s]", mc->what, dpsgd_style_name(st), dpsgd_clip_fn_name(fn),
                 norms_label(methods[mi].norms, methods[mi].impl), dpsgd_clip_name(methods[mi].clip));
        G = (int)dpsgd_clip_group_count(dp);
        nrm = group_norms_of(dp, g, tp, n_tp, B);
        int clipped = 0, kept = 0;
        float loss;
        CHECK_OK(dpsgd_forward(dp, inputs, targets, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        /* the group norms the wrapper found */
        size_t ns, ng;
        const float *gn = dpsgd_group_norms(dp, &ns, &ng);
        CHECK_EQ_U64(ns, B);
        CHECK_EQ_U64(ng, G);
        for (int64_t i = 0; i < B && ns == (size_t)B && ng == (size_t)G; i++)
            for (int grp = 0; grp < G; grp++)
                if (!(fabs(gn[i * G + grp] - nrm[grp * B + i]) <= TOL * fmax(nrm[grp * B + i], 1e-3))) {
                    fprintf(stderr, "%s: group %s sample %lld norm %.9g, explicit %.9g\n", what,
                            dpsgd_clip_group_name(dp, (size_t)grp), (long long)i, gn[i * G + grp], nrm[grp * B + i]);
                    check_failures++;
                }
        /* the clipped sum */
        for (int k = 0; k < n_tp; k++) {
            int grp = dpsgd_param_clip_group(dp, tp[k]);
            double Cg = dpsgd_clip_group_bound(dp, (size_t)grp);
            int64_t n = tp[k]->value.numel;
            double *want = calloc((size_t)n, sizeof *want);
            for (int64_t i = 0; i < B; i++) {
                double c = dpsgd_group_factor(dp, Cg, nrm[grp * B + i]);
                if (k == 0 && c < 1.0) clipped++;
                if (k == 0 && c >= 1.0) kept++;
                for (int64_t j = 0; j < n; j++) want[j] += c * g[k][i * n + j];
            }
            double err = grad_error(tp[k], want);
            if (!(err <= TOL)) {
                fprintf(stderr, "%s: %s (group %s) clipped sum off by %.3g of its largest entry\n", what, tp[k]->name,
                        dpsgd_clip_group_name(dp, (size_t)grp), err);
                check_failures++;
            }
            free(want);
        }
        if (fn == DPSGD_CLIP_FN_ABADI && st == DPSGD_STYLE_FLAT) CHECK(clipped > 0 && kept > 0); /* the bound bites */
        free(nrm);
        dpsgd_free(dp);
        CHECK_OK(dp_model_zero_grad(m, 1));
    }
}

static void test_model(const model_case *mc) {
    const int64_t B = 3, T = 5;
    dp_model *m = small_model(mc, B, T);
    if (!m) return;
    dp_tensor *inputs = test_ids(cpu, B, T, 23, 7), *targets = test_ids(cpu, B, T, 23, 29);
    int n = dp_model_param_count(m), n_tp = 0;
    dp_param **tp = malloc((size_t)n * sizeof *tp);
    for (int k = 0; k < n; k++)
        if (dp_model_param(m, k)->trainable) tp[n_tp++] = dp_model_param(m, k);
    double **g = explicit_grads(m, inputs, targets, tp, n_tp);
    for (int st = 0; st < DPSGD_N_STYLES; st++)
        for (int fn = 0; fn < DPSGD_N_CLIP_FNS; fn++)
            check_style(m, mc, tp, n_tp, g, inputs, targets, (dpsgd_clip_style)st, (dpsgd_clip_fn)fn);
    /* per_block's groups: the embeddings, each block, the head (the final norm; lm_head when untied) */
    dpsgd *dp = wrap(m, mc, DPSGD_NORMS_MATERIALIZE, DPSGD_CLIP_BK, DPSGD_FLASH_TILES, DPSGD_STYLE_PER_BLOCK,
                     DPSGD_CLIP_FN_ABADI, 1.0);
    if (dp && !mc->lora) {
        const char *prefix = mc->arch == DP_ARCH_GPT ? "transformer.h." : "model.layers.";
        char b0[64], b1[64];
        snprintf(b0, sizeof b0, "%s0", prefix);
        snprintf(b1, sizeof b1, "%s1", prefix);
        CHECK_EQ_U64(dpsgd_clip_group_count(dp), 4);
        CHECK(strcmp(dpsgd_clip_group_name(dp, 0), "embeddings") == 0);
        CHECK(strcmp(dpsgd_clip_group_name(dp, 1), b0) == 0);
        CHECK(strcmp(dpsgd_clip_group_name(dp, 2), b1) == 0);
        CHECK(strcmp(dpsgd_clip_group_name(dp, 3), "head") == 0);
        CHECK_CLOSE(dpsgd_noise_norm(dp), 2.0, 1e-15); /* sqrt(4 x 1^2) */
    } else if (dp) {
        CHECK_EQ_U64(dpsgd_clip_group_count(dp), 2); /* LoRA: only the blocks' adapters train */
    }
    dpsgd_free(dp);
    free_grads(g, n_tp);
    free(tp);
    dp_tensor_free(inputs);
    dp_tensor_free(targets);
    dp_model_free(m);
}

/* ---- part 2: PyTorch's float64 references --------------------------------------------------- */


/* tests/fixtures/clipping/<sub>/reference.json, or NULL (a failure counted). */
static cJSON *clipping_fixture(const char *sub) {
    char dir[1100], path[1300];
    test_fixture_dir(dir, sizeof dir, "clipping");
    snprintf(path, sizeof path, "%s/%s/reference.json", dir, sub);
    return test_json_file(path);
}

/* A tensor name of the fixture as dpprof names it (PEFT's base_model.model. prefix dropped). */
static const char *dp_name(const char *hf) {
    const char *prefix = "base_model.model.";
    return strncmp(hf, prefix, strlen(prefix)) == 0 ? hf + strlen(prefix) : hf;
}

/* Tensor p's gradient in the Hugging Face layout (GPT-2's Conv1D transposed), as doubles. */
static double *grad_hf(const dp_param *p) {
    int64_t n = p->value.numel;
    float *a = calloc((size_t)n, sizeof *a);
    double *out = malloc((size_t)n * sizeof *out);
    if (p->grad.numel) CHECK_OK(dp_tensor_to_host(&p->grad, a, (uint64_t)n * sizeof *a));
    int64_t rows = p->value.ndim == 2 ? p->value.shape[0] : n, cols = p->value.ndim == 2 ? p->value.shape[1] : 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) out[p->hf_transposed ? c * rows + r : r * cols + c] = a[r * cols + c];
    free(a);
    return out;
}

/* One style of a fixture: the groups as it made them (each tensor named exactly), its bounds;
 * the wrapper's group of every tensor, its norms and clipped sums against the fixture's. */
static void check_fixture_style(dp_model *m, const char *model, const char *style, const cJSON *s, dp_st_file *sums,
                                const dp_tensor *inputs, const dp_tensor *targets, dpsgd_norms_method norms,
                                dpsgd_clip_method clip) {
    int automatic = strncmp(style, "automatic_", 10) == 0;
    const char *base = automatic ? style + 10 : style;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = norms;
    cfg.clip = clip;
    CHECK_OK(dpsgd_style_parse(base, &cfg.clipping));
    cfg.clip_fn = automatic ? DPSGD_CLIP_FN_AUTOMATIC : DPSGD_CLIP_FN_ABADI;
    if (automatic) cfg.gamma = cJSON_GetObjectItem(s, "gamma")->valuedouble;
    cfg.noise_multiplier = 0.0;
    const cJSON *groups = cJSON_GetObjectItem(s, "groups");
    int G = cJSON_GetArraySize(groups);
    cfg.max_grad_norm = cJSON_GetObjectItem(cJSON_GetArrayItem(groups, 0), "max_grad_norm")->valuedouble;
    /* groups: each spec the fixture's tensors by exact name; per_layer: every tensor its bound */
    dpsgd_group_spec *specs = calloc((size_t)G, sizeof *specs);
    const char ***pats = calloc((size_t)G, sizeof *pats);
    for (int g = 0; g < G; g++) {
        const cJSON *grp = cJSON_GetArrayItem(groups, g), *tensors = cJSON_GetObjectItem(grp, "tensors");
        int nt = cJSON_GetArraySize(tensors);
        pats[g] = calloc((size_t)nt, sizeof **pats);
        for (int t = 0; t < nt; t++) pats[g][t] = dp_name(cJSON_GetArrayItem(tensors, t)->valuestring);
        specs[g] = (dpsgd_group_spec){cJSON_GetObjectItem(grp, "name")->valuestring, pats[g], (size_t)nt,
                                      cJSON_GetObjectItem(grp, "max_grad_norm")->valuedouble};
    }
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    int given = cfg.clipping == DPSGD_STYLE_GROUPS || cfg.clipping == DPSGD_STYLE_PER_LAYER;
    if (dp && given) CHECK_OK(dpsgd_set_clip_groups(dp, specs, (size_t)G));
    char what[160];
    snprintf(what, sizeof what, "torch %s %s [%s+%s]", model, style, dpsgd_norms_name(norms), dpsgd_clip_name(clip));
    if (!dp) goto done;
    CHECK_EQ_U64(dpsgd_clip_group_count(dp), G);
    CHECK_CLOSE(dpsgd_noise_norm(dp), cJSON_GetObjectItem(s, "noise_norm")->valuedouble, 1e-12);
    float loss;
    CHECK_OK(dpsgd_forward(dp, inputs, targets, &loss, NULL));
    CHECK_OK(dpsgd_backward(dp));
    CHECK_OK(dpsgd_clip(dp));
    size_t ns, ng;
    const float *gn = dpsgd_group_norms(dp, &ns, &ng);
    const cJSON *want_norms = cJSON_GetObjectItem(s, "norms");
    for (int g = 0; g < G; g++) {
        const cJSON *grp = cJSON_GetArrayItem(groups, g);
        const char *first = dp_name(cJSON_GetArrayItem(cJSON_GetObjectItem(grp, "tensors"), 0)->valuestring);
        int mine = dpsgd_param_clip_group(dp, dp_model_param_named(m, first));
        const cJSON *tensors = cJSON_GetObjectItem(grp, "tensors");
        for (int t = 0; t < cJSON_GetArraySize(tensors); t++) { /* the same partition of the tensors */
            const char *name = dp_name(cJSON_GetArrayItem(tensors, t)->valuestring);
            if (dpsgd_param_clip_group(dp, dp_model_param_named(m, name)) != mine) {
                fprintf(stderr, "%s: %s is not in the group of %s\n", what, name, first);
                check_failures++;
            }
        }
        for (int i = 0; i < (int)ns && mine >= 0; i++) {
            double want = cJSON_GetArrayItem(cJSON_GetArrayItem(want_norms, g), i)->valuedouble;
            if (!(fabs(gn[i * (int)ng + mine] - want) <= TORCH_TOL * want)) {
                fprintf(stderr, "%s: group %s sample %d norm %.9g, torch %.9g\n", what,
                        cJSON_GetObjectItem(grp, "name")->valuestring, i, gn[i * (int)ng + mine], want);
                check_failures++;
            }
        }
    }
    double worst = 0;
    for (int k = 0; k < dp_model_param_count(m); k++) {
        dp_param *p = dp_model_param(m, k);
        if (!p->trainable) continue;
        char key[300];
        snprintf(key, sizeof key, "%s/%s%s", style, strstr(model, "peft") ? "base_model.model." : "", p->name);
        const dp_st_tensor *t = dp_st_find(sums, key);
        if (!t || t->numel != p->value.numel) {
            fprintf(stderr, "%s: the fixture has no clipped sum %s\n", what, key);
            check_failures++;
            continue;
        }
        float *want = malloc((size_t)t->numel * sizeof *want);
        double *want_d = malloc((size_t)t->numel * sizeof *want_d), *got = grad_hf(p);
        CHECK_OK(dp_st_read_f32(sums, t, want, t->numel));
        double diff = 0, ref = 0;
        for (int64_t j = 0; j < t->numel; j++) {
            diff = fmax(diff, fabs(got[j] - want[j]));
            ref = fmax(ref, fabs((double)want[j]));
        }
        double err = diff / fmax(ref, 1e-30);
        worst = fmax(worst, err);
        if (!(err <= TORCH_TOL)) {
            fprintf(stderr, "%s: %s clipped sum off by %.3g of its largest entry\n", what, p->name, err);
            check_failures++;
        }
        free(want);
        free(want_d);
        free(got);
    }
    if (getenv("DP_TEST_VERBOSE")) printf("%s: %d groups, worst %.3g\n", what, G, worst);
done:
    dpsgd_free(dp);
    CHECK_OK(dp_model_zero_grad(m, 1));
    for (int g = 0; g < G; g++) free(pats[g]);
    free(pats);
    free(specs);
}

static void test_fixture(const char *model, const char *base, const char *adapter) {
    char dir[1100], path[1200], bdir[1100], adir[1300];
    test_fixture_dir(dir, sizeof dir, "clipping");
    cJSON *r = clipping_fixture(model);
    if (!r) return;
    int B = cJSON_GetObjectItem(r, "batch")->valueint, T = cJSON_GetObjectItem(r, "seq_len")->valueint;
    test_fixture_dir(bdir, sizeof bdir, "hf");
    snprintf(adir, sizeof adir, "%s/%s", bdir, adapter ? adapter : "");
    size_t used = strlen(bdir);
    snprintf(bdir + used, sizeof bdir - used, "/%s", base);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = T;
    o.batch = B;
    o.dtype = DP_F32;
    if (adapter) o.adapter = adir;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, bdir, &o, &m));
    snprintf(path, sizeof path, "%s/%s/clipped.safetensors", dir, model);
    dp_st_file *sums = NULL;
    CHECK_OK(dp_st_open(path, &sums));
    int64_t shape[2] = {B, T};
    dp_tensor *inputs = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    dp_tensor *targets = dp_tensor_new(cpu, DP_I32, 2, shape, DP_CAT_INPUTS);
    int32_t *in = malloc((size_t)(B * T) * sizeof *in), *tg = malloc((size_t)(B * T) * sizeof *tg);
    const cJSON *tokens = cJSON_GetObjectItem(r, "tokens");
    for (int i = 0; i < B; i++)
        for (int t = 0; t < T; t++) {
            const cJSON *row = cJSON_GetArrayItem(tokens, i);
            in[i * T + t] = cJSON_GetArrayItem(row, t)->valueint;
            tg[i * T + t] = cJSON_GetArrayItem(row, t + 1)->valueint;
        }
    if (inputs && targets) {
        CHECK_OK(dp_tensor_from_host(inputs, in, (uint64_t)(B * T) * sizeof *in));
        CHECK_OK(dp_tensor_from_host(targets, tg, (uint64_t)(B * T) * sizeof *tg));
    }
    const cJSON *styles = cJSON_GetObjectItem(r, "styles");
    int n_styles = 0;
    for (const cJSON *s = styles ? styles->child : NULL; s && m && sums && inputs; s = s->next, n_styles++)
        for (int twopass = 0; twopass < 2; twopass++) /* bk's books, and twopass's forming backward */
            check_fixture_style(m, model, s->string, s, sums, inputs, targets,
                                twopass ? DPSGD_NORMS_GHOST : DPSGD_NORMS_MIXED,
                                twopass ? DPSGD_CLIP_TWOPASS : DPSGD_CLIP_BK);
    CHECK_EQ_U64(n_styles, 6); /* flat, per_layer, per_block, groups, automatic_flat, automatic_per_layer */
    free(in);
    free(tg);
    dp_tensor_free(inputs);
    dp_tensor_free(targets);
    dp_st_close(sums);
    dp_model_free(m);
    cJSON_Delete(r);
}

/* ---- part 3: Opacus's per-layer factors ----------------------------------------------------- */

static void test_opacus_per_layer(void) {
    cJSON *r = clipping_fixture("opacus");
    if (!r) return;
    const cJSON *pl = cJSON_GetObjectItem(r, "per_layer"), *names = cJSON_GetObjectItem(pl, "parameters");
    const cJSON *bounds = cJSON_GetObjectItem(pl, "max_grad_norm"), *norms = cJSON_GetObjectItem(pl, "norms");
    const cJSON *factors = cJSON_GetObjectItem(pl, "opacus_factors");
    int P = cJSON_GetArraySize(names);
    /* the network's tensors as parameters of a wrapper without a model: per_layer, a bound each */
    dp_param *params = calloc((size_t)P, sizeof *params);
    dp_param **pp = calloc((size_t)P, sizeof *pp);
    dpsgd_group_spec *specs = calloc((size_t)P, sizeof *specs);
    const char **pat = calloc((size_t)P, sizeof *pat);
    for (int k = 0; k < P; k++) {
        snprintf(params[k].name, sizeof params[k].name, "%s", cJSON_GetArrayItem(names, k)->valuestring);
        params[k].trainable = 1;
        pp[k] = &params[k];
        pat[k] = params[k].name;
        specs[k] = (dpsgd_group_spec){NULL, &pat[k], 1, cJSON_GetArrayItem(bounds, k)->valuedouble};
    }
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = DPSGD_NORMS_MATERIALIZE;
    cfg.clip = DPSGD_CLIP_BK;
    cfg.clipping = DPSGD_STYLE_PER_LAYER;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new_params(cpu, &cfg, pp, P, 4, &dp));
    if (dp) {
        CHECK_OK(dpsgd_set_clip_groups(dp, specs, (size_t)P));
        CHECK_EQ_U64(dpsgd_clip_group_count(dp), P);
        /* Opacus takes the bounds' norm in f32: 2.1190240383 against 2.1190241268 in double */
        CHECK_CLOSE(dpsgd_noise_norm(dp), cJSON_GetObjectItem(pl, "noise_norm")->valuedouble, 1e-15);
        CHECK_CLOSE(dpsgd_noise_norm(dp), cJSON_GetObjectItem(pl, "opacus_noise_std_at_sigma_1")->valuedouble, 1e-7);
        for (int k = 0; k < P; k++) {
            int g = dpsgd_param_clip_group(dp, &params[k]);
            for (int i = 0; i < cJSON_GetArraySize(cJSON_GetArrayItem(norms, k)); i++) {
                double n = cJSON_GetArrayItem(cJSON_GetArrayItem(norms, k), i)->valuedouble;
                double want = cJSON_GetArrayItem(cJSON_GetArrayItem(factors, k), i)->valuedouble;
                CHECK_CLOSE(dpsgd_group_factor(dp, dpsgd_clip_group_bound(dp, (size_t)g), n), want, 1e-14);
            }
        }
    }
    dpsgd_free(dp);
    free(params);
    free(pp);
    free(specs);
    free(pat);
    cJSON_Delete(r);
}

/* Opacus's AdaClipDPOptimizer over five noiseless steps: the per-sample norms the fixture recorded
 * fed to the wrapper's clip factors step by step (one tensor whose rows are those norms), the
 * bound's trajectory (before, unclipped count, after) equal to Opacus's float64 reproduction. */
static void test_opacus_adaclip(void) {
    cJSON *r = clipping_fixture("opacus");
    if (!r) return;
    const cJSON *runs = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "adaclip"), "runs");
    int n_runs = 0;
    for (const cJSON *run = runs ? runs->child : NULL; run; run = run->next, n_runs++) {
        const cJSON *c = cJSON_GetObjectItem(run, "config"), *traj = cJSON_GetObjectItem(run, "trajectory");
        int64_t B = cJSON_GetObjectItem(c, "batch")->valueint, one = 1;
        dp_param p = {.trainable = 1};
        snprintf(p.name, sizeof p.name, "w");
        CHECK_OK(dp_tensor_init(&p.value, cpu, DP_F32, 1, &one, DP_CAT_PARAMETERS));
        dp_param *pp = &p;
        dpsgd_config cfg;
        dpsgd_config_default(&cfg);
        cfg.norms = DPSGD_NORMS_MATERIALIZE;
        cfg.clip = DPSGD_CLIP_BK;
        cfg.noise_multiplier = 0.0;
        cfg.max_grad_norm = cJSON_GetObjectItem(c, "max_grad_norm")->valuedouble;
        cfg.expected_batch_size = B;
        cfg.adaptive = (dpsgd_adaptive){1,
                                        cJSON_GetObjectItem(c, "target_unclipped_quantile")->valuedouble,
                                        cJSON_GetObjectItem(c, "clipbound_learning_rate")->valuedouble,
                                        cJSON_GetObjectItem(c, "max_clipbound")->valuedouble,
                                        cJSON_GetObjectItem(c, "min_clipbound")->valuedouble,
                                        cJSON_GetObjectItem(c, "unclipped_num_std_after_construction")->valuedouble};
        dpsgd *dp = NULL;
        CHECK_OK(dpsgd_new_params(cpu, &cfg, &pp, 1, B, &dp));
        int steps = cJSON_GetArraySize(traj);
        float *sq = malloc((size_t)B * sizeof *sq), *factors = malloc((size_t)B * sizeof *factors);
        for (int k = 0; dp && k < steps; k++) {
            const cJSON *norms = cJSON_GetObjectItem(cJSON_GetArrayItem(traj, k), "per_sample_norms");
            for (int64_t i = 0; i < B; i++) {
                double n = cJSON_GetArrayItem(norms, (int)i)->valuedouble;
                sq[i] = (float)(n * n);
            }
            int64_t shape[2] = {1, B};
            dp->batch = B;
            CHECK_OK(dp_tensor_init_module(&dp->sq_norms, cpu, DP_F32, 2, shape, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE));
            CHECK_OK(dp_tensor_from_host(&dp->sq_norms, sq, (uint64_t)B * sizeof *sq));
            dp->sq_written[0] = 1;
            CHECK_OK(dpsgd_compute_clip_factors(dp, factors));
            dp_tensor_release(&dp->sq_norms);
            CHECK_OK(dpsgd_noise(dp));
        }
        size_t nh;
        const dpsgd_bound_step *h = dpsgd_bound_history(dp, &nh);
        CHECK_EQ_U64(nh, steps);
        for (int k = 0; k < steps && nh == (size_t)steps; k++) {
            const cJSON *st = cJSON_GetArrayItem(traj, k);
            CHECK_CLOSE(h[k].bound, cJSON_GetObjectItem(st, "bound_before")->valuedouble, 1e-12);
            CHECK_EQ_U64(h[k].unclipped, cJSON_GetObjectItem(st, "unclipped")->valueint);
            CHECK_EQ_U64(h[k].samples, B);
            CHECK_CLOSE(h[k].next, cJSON_GetObjectItem(st, "bound_after")->valuedouble, 1e-12);
            CHECK_CLOSE(h[k].next, cJSON_GetObjectItem(st, "opacus_bound_after")->valuedouble, 1e-6); /* Opacus's f32 */
        }
        free(sq);
        free(factors);
        dpsgd_free(dp);
        dp_tensor_release(&p.value);
        dp_tensor_release(&p.grad);
    }
    CHECK_EQ_U64(n_runs, 2); /* free, and clamped at both ends */
    /* the gradient's raised noise multiplier: Opacus's at sigma = unclipped_num_std = 1 */
    const cJSON *adj = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "adaclip"), "adjusted_noise");
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.noise_multiplier = cJSON_GetObjectItem(adj, "sigma")->valuedouble;
    cfg.adaptive =
        (dpsgd_adaptive){1, 0.5, 0.2, 10.0, 0.01, cJSON_GetObjectItem(adj, "unclipped_num_std")->valuedouble};
    CHECK_CLOSE(dpsgd_adaptive_noise_multiplier(&cfg),
                cJSON_GetObjectItem(adj, "opacus_gradient_noise_std")->valuedouble, 1e-15);
    cJSON_Delete(r);
}

/* ---- part 4: refusals and the noise ---------------------------------------------------------- */

static int refused(int rc, const char *w1, const char *w2) {
    const char *msg = dp_error_message();
    int ok = rc == DP_EINVAL && strstr(msg, w1) && (!w2 || strstr(msg, w2));
    if (!ok)
        fprintf(stderr, "expected a refusal naming '%s'%s%s, got %d: %s\n", w1, w2 ? " and " : "", w2 ? w2 : "", rc,
                msg);
    return ok;
}

static void test_refusals(void) {
    model_case mc = {"gpt", DP_ARCH_GPT, 1, 0, NULL, 0};
    dp_model *m = small_model(&mc, 2, 4);
    if (!m) return;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = DPSGD_NORMS_GHOST;
    cfg.clip = DPSGD_CLIP_BK;
    dpsgd *dp = NULL;
    cfg.clip_fn = DPSGD_CLIP_FN_AUTOMATIC;
    cfg.gamma = 0.0;
    CHECK(refused(dpsgd_new(m, &cfg, &dp), "gamma", "positive"));
    cfg.gamma = DPSGD_AUTOMATIC_GAMMA;
    cfg.adaptive = (dpsgd_adaptive){1, 0.5, 0.2, 10.0, 0.01, 1.0};
    CHECK(refused(dpsgd_new(m, &cfg, &dp), "adaptive clipping moves one bound", "'flat' and clip_fn 'abadi'"));
    cfg.clip_fn = DPSGD_CLIP_FN_ABADI;
    cfg.adaptive.unclipped_num_std = 0.4;
    CHECK(refused(dpsgd_new(m, &cfg, &dp), "unclipped_num_std 0.4 must be more than noise_multiplier / 2 = 0.5", NULL));
    cfg.adaptive.unclipped_num_std = 1.0;
    cfg.adaptive.min_clipbound = 20.0;
    CHECK(refused(dpsgd_new(m, &cfg, &dp), "0 < min_clipbound (20) <= max_clipbound (10)", NULL));
    cfg.adaptive.min_clipbound = 0.01;
    cfg.adaptive.target_unclipped_quantile = 1.5;
    CHECK(refused(dpsgd_new(m, &cfg, &dp), "target_unclipped_quantile 1.5 must be in [0, 1]", NULL));
    cfg.adaptive = (dpsgd_adaptive){0};
    cfg.clip_fn = DPSGD_CLIP_FN_AUTOMATIC;
    cfg.clipping = DPSGD_STYLE_GROUPS;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (!dp) goto out;
    const char *attn[] = {"*.attn.*"}, *mlp[] = {"*.mlp.*"}, *rest[] = {"*ln*", "transformer.w*"}, *all[] = {"*"};
    const char *none[] = {"nothing.*"};
    dpsgd_group_spec two[2] = {{"attn", attn, 1, 1.0}, {"mlp", mlp, 1, 1.0}};
    CHECK(refused(dpsgd_set_clip_groups(dp, two, 2), "in no group", "transformer.wte.weight"));
    dpsgd_group_spec overlap[3] = {{"attn", attn, 1, 1.0}, {"mlp", mlp, 1, 1.0}, {"all", all, 1, 1.0}};
    CHECK(refused(dpsgd_set_clip_groups(dp, overlap, 3), "in two groups", "'attn' and 'all'"));
    dpsgd_group_spec empty[4] = {
        {"attn", attn, 1, 1.0}, {"mlp", mlp, 1, 1.0}, {"rest", rest, 2, 1.0}, {"none", none, 1, 1.0}};
    CHECK(refused(dpsgd_set_clip_groups(dp, empty, 4), "'none'", "match no trainable tensor"));
    dpsgd_group_spec bad_bound[3] = {{"attn", attn, 1, 1.0}, {"mlp", mlp, 1, -2.0}, {"rest", rest, 2, 1.0}};
    CHECK(refused(dpsgd_set_clip_groups(dp, bad_bound, 3), "'mlp'", "must be positive"));
    dpsgd_group_spec twice[3] = {{"attn", attn, 1, 1.0}, {"attn", mlp, 1, 1.0}, {"rest", rest, 2, 1.0}};
    CHECK(refused(dpsgd_set_clip_groups(dp, twice, 3), "two clipping groups are named 'attn'", NULL));
    /* no groups yet: the step refuses, naming what is missing */
    dp_tensor *in = test_ids(cpu, 2, 4, 23, 3), *tg = test_ids(cpu, 2, 4, 23, 5);
    float loss;
    CHECK(refused(dpsgd_forward(dp, in, tg, &loss, NULL), "needs its groups", NULL));
    dpsgd_group_spec good[3] = {{"attn", attn, 1, 1.0}, {"mlp", mlp, 1, 2.0}, {"rest", rest, 2, 2.0}};
    CHECK_OK(dpsgd_set_clip_groups(dp, good, 3));
    CHECK_CLOSE(dpsgd_noise_norm(dp), 3.0, 1e-15); /* sqrt(1 + 4 + 4) */
    CHECK_OK(dpsgd_forward(dp, in, tg, &loss, NULL));
    dpsgd_free(dp);
    dp = NULL;
    cfg.clipping = DPSGD_STYLE_PER_BLOCK;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (dp) CHECK(refused(dpsgd_set_clip_groups(dp, good, 3), "takes no groups", NULL));
    dp_tensor_free(in);
    dp_tensor_free(tg);
out:
    dpsgd_free(dp);
    dp_model_free(m);
}

/* The noise's std is sigma ||C||_2: per_layer over a model's tensors, the added noise's sample
 * std over every coordinate (tens of thousands) within 3% of it. */
static void test_noise_norm(void) {
    model_case mc = {"llama", DP_ARCH_LLAMA, 0, 0, NULL, 0};
    dp_model *m = small_model(&mc, 2, 4);
    if (!m) return;
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.norms = DPSGD_NORMS_MATERIALIZE;
    cfg.clip = DPSGD_CLIP_BK;
    cfg.clipping = DPSGD_STYLE_PER_LAYER;
    cfg.max_grad_norm = 0.5;
    cfg.noise_multiplier = 1.5;
    cfg.expected_batch_size = 2;
    cfg.seed = 9;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    if (dp) {
        size_t G = dpsgd_clip_group_count(dp);
        CHECK_CLOSE(dpsgd_noise_norm(dp), 0.5 * sqrt((double)G), 1e-15);
        /* no samples: the noise alone, divided by the expected batch size */
        CHECK_OK(dp_model_zero_grad(m, 1));
        CHECK_OK(dpsgd_noise(dp));
        double s = 0, n = 0;
        for (int k = 0; k < dp_model_param_count(m); k++) {
            dp_param *p = dp_model_param(m, k);
            float *h = malloc((size_t)p->grad.numel * sizeof *h);
            CHECK_OK(dp_tensor_to_host(&p->grad, h, (uint64_t)p->grad.numel * sizeof *h));
            for (int64_t j = 0; j < p->grad.numel; j++) s += (double)h[j] * h[j] * 4.0; /* x2 batch, squared */
            n += (double)p->grad.numel;
            free(h);
        }
        double std = sqrt(s / n), want = 1.5 * dpsgd_noise_norm(dp);
        if (!(fabs(std - want) <= 0.03 * want)) {
            fprintf(stderr, "noise std %.6g over %.0f coordinates, want sigma ||C|| = %.6g\n", std, n, want);
            check_failures++;
        }
    }
    dpsgd_free(dp);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    static const char *gpt_attn[] = {"*.attn.*"}, *gpt_rest[] = {"*.mlp.*", "*ln_*", "transformer.w*"};
    static const char *lora_attn[] = {"*.self_attn.*"}, *lora_mlp[] = {"*.mlp.*"};
    static const dpsgd_group_spec gpt_groups[] = {{"attn", gpt_attn, 1, 1.0}, {"rest", gpt_rest, 3, 1.0}};
    static const dpsgd_group_spec lora_groups[] = {{"attn", lora_attn, 1, 1.0}, {"mlp", lora_mlp, 1, 1.0}};
    const model_case cases[] = {
        {"gpt tied", DP_ARCH_GPT, 1, 0, gpt_groups, 2},
        {"llama lora", DP_ARCH_LLAMA, 0, 1, lora_groups, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_model(&cases[i]);
    test_fixture("gpt2", "gpt2", NULL);
    test_fixture("llama", "llama", NULL);
    test_fixture("peft_llama", "llama", "peft/llama");
    test_opacus_per_layer();
    test_opacus_adaclip();
    test_refusals();
    test_noise_norm();
    return check_report("test_dp_clipping");
}
