/* test_hf_llama3.c: the Llama-3-shaped checkpoints of tests/fixtures/hf (gen_llama3.py, made by
 * transformers): `llama3` (grouped-query attention, 2 kv heads for 4 query heads, head_dim 16
 * apart from hidden / heads, Llama-3.1's llama3 rope scaling, tied embeddings) and `llama3_mqa`
 * (1 kv head, yarn rope scaling, untied).
 *
 * 1. In f32 on the CPU, against PyTorch's float64: the loss and per-sample losses, every logit
 *    and every gradient to 1e-5 relative (logits and gradients relative to the tensor's largest
 *    entry: elementwise ratios of near-zero entries are noise). Measured: a few 1e-7 (f32
 *    rounding through 2 blocks of width 32 over 16 positions).
 * 2. Per-sample gradient norms of every DP method (materialize, ghost, mixed, flash tiles and
 *    strips, with twopass and bk) against explicit per-sample gradients (the model run once per
 *    sample), at 1e-4 relative per tensor and per sample, at T = 16 and T = 96: mixed picks ghost
 *    and materialize and flash picks Gram and gradient tiles, each at one of the two lengths
 *    (checked); at T = 16 the total norm also against PyTorch's (1e-4).
 * 3. Saving writes the fixture's tensors bit for bit (no lm_head when tied) and a config.json
 *    that reads back the same (kv heads, head_dim, rope scaling, tie).
 * 4. The CPU's bf16 reference path (what CUDA's bf16 is held to) against its f32, within the
 *    bounds below; and bf16 LoRA (frozen base weights bf16 only) against the same.
 *
 * The bf16 bounds: bf16 keeps 8 significant bits, so every stored activation (and weight copy)
 * is off by at most 2^-9 = 0.2% relative. A block rounds ~10 stored tensors in sequence (norm,
 * q/k/v, rope, attention, o, residual, norm, gate/up, SwiGLU, down, residual), so through 2
 * blocks and the head ~25 roundings: worst case 25 x 0.2% = 5%, with independent signs
 * sqrt(25) x 0.2% = 1% on the loss. A gradient is a product of ~2 x 25 rounded factors (the
 * forward's activations and the backward's), 10% with independent signs, times the
 * fixture's sensitivity: its weights are drawn large (std 0.3) so attention is nearly one-hot
 * and the logits span ~+-10, which amplifies a relative change of a score by up to ~2x.
 * Bounds: loss 2e-2 relative; each gradient tensor 0.25 relative in L2 (measured: 0.12 at
 * worst, llama3's first-layer k_proj adapter); all gradients together at cosine > 0.99
 * (measured 0.996). A missing rounding point moves none of these; a wrong kernel moves all.
 * 5. A LoRA adapter saved by PEFT, read and written in PEFT's names (check_peft). */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "dpprof_engine.h"
#include "dpsgd.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HF_TOL 1e-5
#define NORM_TOL 1e-4

static char fixtures[1024], tmpdir[64];
static dp_device *cpu;

typedef test_hf_ref reference;

static dp_model *load(const char *dir, int64_t T, int64_t B) {
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = T;
    o.batch = B;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, dir, &o, &m));
    return m;
}

static void batch_of(const reference *r, dp_tensor *x, dp_tensor *y) {
    int64_t shape[2] = {r->B, r->T};
    CHECK_OK(dp_tensor_init(x, cpu, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_init(y, cpu, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_from_host(x, r->inputs, sizeof(int32_t) * (size_t)(r->B * r->T)));
    CHECK_OK(dp_tensor_from_host(y, r->targets, sizeof(int32_t) * (size_t)(r->B * r->T)));
}

/* max |got - want| / max |want| over n values */
static double rel_err(const float *got, const float *want, int64_t n) {
    double diff = 0, ref = 0;
    for (int64_t k = 0; k < n; k++) {
        diff = fmax(diff, fabs((double)got[k] - want[k]));
        ref = fmax(ref, fabs((double)want[k]));
    }
    return diff / fmax(ref, 1e-30);
}

/* ---- 1. against PyTorch ------------------------------------------------------------------- */

static void check_against_pytorch(const char *name, dp_model *m, const reference *r, const char *dir) {
    dp_tensor x, y;
    batch_of(r, &x, &y);
    float loss = 0, per_sample[4] = {0};
    CHECK_OK(dp_model_forward(m, &x, &y, &loss, per_sample));
    printf("%s: loss %.9g, PyTorch (float64) %.9g, relative error %.2g\n", name, loss, r->loss,
           fabs(loss - r->loss) / r->loss);
    CHECK(fabs(loss - r->loss) <= HF_TOL * fabs(r->loss));
    for (int b = 0; b < r->B; b++)
        CHECK(fabs(per_sample[b] - r->per_sample_loss[b]) <= HF_TOL * fabs(r->per_sample_loss[b]));

    char path[1200];
    snprintf(path, sizeof path, "%s/logits.safetensors", dir);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    const dp_tensor *logits = dp_model_logits(m);
    CHECK(logits != NULL);
    if (f && logits) {
        const dp_st_tensor *t = dp_st_find(f, "logits");
        CHECK(t && t->numel == logits->numel);
        if (t && t->numel == logits->numel) {
            float *want = malloc((size_t)t->numel * sizeof *want);
            CHECK_OK(dp_st_read_f32(f, t, want, t->numel));
            double e = rel_err(logits->data, want, t->numel);
            printf("%s: %lld logits, relative error %.3g\n", name, (long long)t->numel, e);
            CHECK(e <= HF_TOL);
            free(want);
        }
    }
    dp_st_close(f);

    dp_backward_opts bo = {.sample_scale = NULL, .weight_grads = 1};
    CHECK_OK(dp_model_backward(m, &bo));
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (!f) return;
    CHECK_EQ_U64(dp_st_count(f), dp_model_param_count(m)); /* one reference gradient per parameter */
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dp_st_count(f); i++) {
        const dp_st_tensor *t = dp_st_at(f, i);
        dp_param *p = dp_model_param_named(m, t->name);
        if (!p || p->grad.numel != t->numel) {
            fprintf(stderr, "%s: no gradient like '%s'\n", name, t->name);
            check_failures++;
            continue;
        }
        float *want = malloc((size_t)t->numel * sizeof *want);
        CHECK_OK(dp_st_read_f32(f, t, want, t->numel));
        double e = rel_err(p->grad.data, want, t->numel);
        if (e > worst) worst = e, worst_name = t->name;
        if (!(e <= HF_TOL)) {
            fprintf(stderr, "%s: gradient of '%s': relative error %.3g > %g\n", name, t->name, e, HF_TOL);
            check_failures++;
        }
        free(want);
    }
    printf("%s: %d gradients, worst relative error %.3g (%s)\n", name, dp_st_count(f), worst, worst_name);
    dp_st_close(f);
    CHECK_OK(dp_model_zero_grad(m, 1));
    dp_tensor_release(&x);
    dp_tensor_release(&y);
}

/* ---- 2. per-sample norms of every method ----------------------------------------------------- */

static const dpsgd_norms_method norms_of[] = {DPSGD_NORMS_MATERIALIZE, DPSGD_NORMS_GHOST, DPSGD_NORMS_MIXED,
                                              DPSGD_NORMS_MIXED,       DPSGD_NORMS_FLASH, DPSGD_NORMS_FLASH};
static const dpsgd_clip_method clip_of[] = {DPSGD_CLIP_BK, DPSGD_CLIP_TWOPASS, DPSGD_CLIP_TWOPASS,
                                            DPSGD_CLIP_BK, DPSGD_CLIP_BK,      DPSGD_CLIP_TWOPASS};
#define N_METHODS (sizeof norms_of / sizeof *norms_of)

/* formulations seen per method, over both lengths (bits of dpsgd_formulation) */
static unsigned seen[N_METHODS];

/* Every method's per-sample norms on the batch against want (n_tp x B explicit squared norms);
 * with torch != NULL, each sample's total norm against PyTorch's too. */
static void check_norms(const char *name, dp_model *m, const dp_tensor *x, const dp_tensor *y, dp_param **tp, int n_tp,
                        const double *want, const double *torch) {
    const int64_t B = x->shape[0], T = x->shape[1];
    double *total = calloc((size_t)B, sizeof *total);
    for (int k = 0; k < n_tp; k++)
        for (int64_t i = 0; i < B; i++) total[i] += want[k * B + i];
    float row[4];
    for (size_t mi = 0; mi < N_METHODS; mi++) {
        dpsgd_config cfg;
        dpsgd_config_default(&cfg);
        cfg.norms = norms_of[mi];
        cfg.clip = clip_of[mi];
        cfg.flash_impl = mi == 5 ? DPSGD_FLASH_STRIPS : DPSGD_FLASH_TILES;
        dpsgd *dp = NULL;
        CHECK_OK(dpsgd_new(m, &cfg, &dp));
        if (!dp) continue;
        float loss;
        CHECK_OK(dpsgd_forward(dp, x, y, &loss, NULL));
        CHECK_OK(dpsgd_backward(dp));
        CHECK_OK(dpsgd_clip(dp));
        double worst = 0;
        for (int k = 0; k < n_tp; k++) {
            CHECK_OK(dpsgd_param_sq_norms(dp, tp[k], row, B));
            for (int64_t i = 0; i < B; i++) {
                double w = want[k * B + i], e = fabs(row[i] - w) / fmax(w, 1e-3 * total[i]);
                worst = fmax(worst, e);
                if (!(e <= NORM_TOL)) {
                    fprintf(stderr, "  %s T=%lld [%s+%s] %s sample %lld: got %.9g want %.9g\n", name, (long long)T,
                            dpsgd_norms_name(cfg.norms), dpsgd_clip_name(cfg.clip), tp[k]->name, (long long)i, row[i],
                            w);
                    check_failures++;
                }
            }
        }
        size_t ns;
        const float *norms = dpsgd_norms(dp, &ns);
        CHECK_EQ_U64(ns, B);
        for (int64_t i = 0; i < B && ns == (size_t)B; i++) {
            double got = (double)norms[i] * norms[i];
            CHECK(fabs(got - total[i]) <= NORM_TOL * total[i]);
            if (torch) CHECK(fabs(norms[i] - torch[i]) <= NORM_TOL * torch[i]);
        }
        char forms[160] = "";
        unsigned here = 0;
        for (size_t l = 0; l < dpsgd_layer_count(dp); l++) here |= 1u << dpsgd_layer(dp, l)->norms;
        for (unsigned f = 0; f <= DPSGD_FORM_GRAD_STRIP; f++)
            if (here & (1u << f))
                snprintf(forms + strlen(forms), sizeof forms - strlen(forms), " %s",
                         dpsgd_formulation_name((dpsgd_formulation)f));
        seen[mi] |= here;
        printf("  %s T=%lld %-11s+%-7s%s: worst per-tensor error %.2g; formulations%s\n", name, (long long)T,
               dpsgd_norms_name(cfg.norms), dpsgd_clip_name(cfg.clip), mi == 5 ? " strips" : "       ", worst, forms);
        dpsgd_free(dp);
        CHECK_OK(dp_model_zero_grad(m, 1));
    }
    free(total);
}

static void check_methods(const char *name, const char *dir, const reference *r) {
    memset(seen, 0, sizeof seen);
    const int64_t Ts[2] = {r->T, 96};
    for (int ti = 0; ti < 2; ti++) {
        dp_model *m = load(dir, Ts[ti], r->B);
        if (!m) return;
        dp_tensor x, y, *xi = NULL, *yi = NULL;
        if (ti == 0) { /* the reference batch */
            batch_of(r, &x, &y);
            xi = &x, yi = &y;
        } else {
            xi = test_ids(cpu, r->B, Ts[ti], dp_model_config_of(m)->vocab, 17);
            yi = test_ids(cpu, r->B, Ts[ti], dp_model_config_of(m)->vocab, 29);
        }
        int n = dp_model_param_count(m);
        dp_param **tp = malloc((size_t)n * sizeof *tp);
        for (int k = 0; k < n; k++) tp[k] = dp_model_param(m, k);
        double *want = malloc((size_t)(n * r->B) * sizeof *want);
        CHECK_OK(test_explicit_norms(m, xi, yi, tp, n, want));
        check_norms(name, m, xi, yi, tp, n, want, ti == 0 ? r->per_sample_grad_norm : NULL);
        free(want);
        free(tp);
        if (ti == 0) {
            dp_tensor_release(&x);
            dp_tensor_release(&y);
        } else {
            dp_tensor_free(xi);
            dp_tensor_free(yi);
        }
        dp_model_free(m);
    }
    /* over the two lengths, mixed and flash each picked both of their formulations */
    const unsigned ghost_mat = (1u << DPSGD_FORM_GHOST) | (1u << DPSGD_FORM_MATERIALIZE);
    const unsigned tiles = (1u << DPSGD_FORM_GRAM_TILE) | (1u << DPSGD_FORM_GRAD_TILE);
    const unsigned strips = (1u << DPSGD_FORM_GRAM_STRIP) | (1u << DPSGD_FORM_GRAD_STRIP);
    CHECK((seen[2] & ghost_mat) == ghost_mat && (seen[3] & ghost_mat) == ghost_mat);
    CHECK((seen[4] & tiles) == tiles);
    CHECK((seen[5] & strips) == strips);
}

/* ---- 3. saving ------------------------------------------------------------------------------ */

/* Files a and b hold the same tensors: names, sizes and bytes, and no more. */
static void same_tensors(const char *a, const char *b) {
    dp_st_file *fa = NULL, *fb = NULL;
    CHECK_OK(dp_st_open(a, &fa));
    CHECK_OK(dp_st_open(b, &fb));
    if (fa && fb) {
        CHECK_EQ_U64(dp_st_count(fa), dp_st_count(fb));
        for (int i = 0; i < dp_st_count(fa); i++) {
            const dp_st_tensor *x = dp_st_at(fa, i), *y = dp_st_find(fb, x->name);
            CHECK(y && x->end - x->begin == y->end - y->begin &&
                  memcmp(dp_st_data(fa, x), dp_st_data(fb, y), x->end - x->begin) == 0);
        }
    }
    dp_st_close(fa);
    dp_st_close(fb);
}

static void check_save(const char *name, dp_model *m, const char *dir) {
    char out[256], a[1200], b[1200];
    snprintf(out, sizeof out, "%s/%s", tmpdir, name);
    CHECK_OK(dp_model_save(m, out));
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    same_tensors(a, b); /* a tied head is not saved, as transformers does */
    dp_model_config c1, c2;
    CHECK_OK(dp_model_config_read(dir, &c1));
    CHECK_OK(dp_model_config_read(out, &c2));
    CHECK(c1.kv_heads == c2.kv_heads && c1.head_dim == c2.head_dim && c1.tie_head == c2.tie_head &&
          c1.rope_theta == c2.rope_theta && c1.ffn == c2.ffn && c1.max_positions == c2.max_positions);
    CHECK(memcmp(&c1.rope, &c2.rope, sizeof c1.rope) == 0);
}

#define BF16_LOSS_REL 2e-2
#define BF16_GRAD_REL 0.25
#define BF16_COSINE 0.99

/* loss and every gradient of the model loaded in f32 and in bf16 (with lora_rank > 0: adapters
 * on every linear, B drawn non-zero, the base frozen in bf16) on the reference batch */
static void check_bf16(const char *name, const char *dir, const reference *r, int lora_rank) {
    dp_model *m[2];
    float loss[2];
    for (int k = 0; k < 2; k++) {
        dp_model_load_opts o;
        dp_model_load_opts_default(&o);
        o.seq_len = r->T, o.batch = r->B, o.dtype = k ? DP_BF16 : DP_F32;
        o.lora_rank = lora_rank, o.lora_alpha = 2.0f * (float)lora_rank, o.seed = 5;
        o.lora_targets = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
        m[k] = NULL;
        CHECK_OK(dp_model_load(cpu, dir, &o, &m[k]));
        if (!m[k]) return;
        for (int i = 0; i < dp_model_param_count(m[k]); i++) { /* B = 0 would leave A without a gradient */
            dp_param *p = dp_model_param(m[k], i);
            if (p->kind == DP_PARAM_LORA_B)
                CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0, 0.3f, 7, (uint64_t)i));
        }
        CHECK_OK(dp_model_sync_compute_weights(m[k]));
        dp_tensor x, y;
        batch_of(r, &x, &y);
        CHECK_OK(dp_model_forward(m[k], &x, &y, &loss[k], NULL));
        CHECK_OK(dp_model_backward(m[k], NULL));
        dp_tensor_release(&x);
        dp_tensor_release(&y);
    }
    double worst = 0, dot = 0, n32 = 0, n16 = 0;
    for (int i = 0; i < dp_model_param_count(m[0]); i++) {
        dp_param *a = dp_model_param(m[0], i), *b = dp_model_param(m[1], i);
        CHECK(a->trainable == b->trainable && (a->grad.numel != 0) == (b->grad.numel != 0));
        if (!a->grad.numel || a->grad.numel != b->grad.numel) continue;
        const float *ga = a->grad.data, *gb = b->grad.data;
        double diff = 0, ref = 0;
        for (int64_t j = 0; j < a->grad.numel; j++) {
            dot += (double)ga[j] * gb[j], n32 += (double)ga[j] * ga[j], n16 += (double)gb[j] * gb[j];
            diff += ((double)gb[j] - ga[j]) * ((double)gb[j] - ga[j]), ref += (double)ga[j] * ga[j];
        }
        if (getenv("DP_TEST_VERBOSE")) printf("  %s: %.3g\n", a->name, sqrt(diff / ref));
        worst = fmax(worst, sqrt(diff / fmax(ref, 1e-300)));
    }
    const double cosine = dot / sqrt(n32 * n16), lrel = fabs(loss[1] - loss[0]) / loss[0];
    printf("%s bf16%s (CPU reference) vs f32: loss %.6f vs %.6f (relative %.2g, bound %g), worst gradient %.3g "
           "(bound %g), cosine %.5f\n",
           name, lora_rank ? " LoRA" : "", loss[1], loss[0], lrel, BF16_LOSS_REL, worst, BF16_GRAD_REL, cosine);
    CHECK(lrel <= BF16_LOSS_REL && worst <= BF16_GRAD_REL && cosine > BF16_COSINE);
    dp_model_free(m[0]);
    dp_model_free(m[1]);
}

/* Fixture name's directory into dir, its reference into r, and the model loaded at its batch. */
static dp_model *load_fixture(const char *name, char *dir, size_t n, reference *r) {
    snprintf(dir, n, "%s/%s", fixtures, name);
    if (test_hf_ref_read(dir, r) != 0) {
        fprintf(stderr, "cannot read %s/reference.json\n", dir);
        check_failures++;
        return NULL;
    }
    return load(dir, r->T, r->B);
}

static void check_fixture(const char *name, int kv_heads, dp_rope_type rope, int tied) {
    char dir[1100];
    reference r;
    dp_model *m = load_fixture(name, dir, sizeof dir, &r);
    if (!m) return;
    const dp_model_config *c = dp_model_config_of(m);
    CHECK(c->heads == 4 && c->kv_heads == kv_heads && c->head_dim == 16 && c->rope.type == rope && c->tie_head == tied);
    CHECK((dp_model_param_named(m, "lm_head.weight") == NULL) == tied);
    check_against_pytorch(name, m, &r, dir);
    check_save(name, m, dir);
    dp_model_free(m);
    check_methods(name, dir, &r);
    check_bf16(name, dir, &r, 0);
    check_bf16(name, dir, &r, 4);
}

/* 5. A LoRA adapter PEFT saved (llama3_mqa_lora: r 4, alpha 8, q_proj and v_proj, PEFT's default
 *    targets for llama): found beside the base, read as PEFT wrote it (one target per linear in
 *    PEFT's names), the loss and the adapters' gradients PyTorch's to 1e-5; saved again, the
 *    adapter file holds PEFT's names and bits and adapter_config.json PEFT's target_modules. */
static void check_peft(void) {
    char dir[1100], out[256], path[1200], mine[600];
    reference r;
    dp_model *m = load_fixture("llama3_mqa_lora", dir, sizeof dir, &r);
    if (!m) return;
    const dp_model_config *c = dp_model_config_of(m);
    CHECK(c->lora_rank == 4 && c->lora_alpha == 8.0f && c->lora_targets == (DP_LORA_Q | DP_LORA_V));
    CHECK(dp_model_num_params(m, 1) == 4 * (32 + 64) + 4 * (32 + 16)); /* q: 32 -> 64, v: 32 -> 16 */
    dp_tensor x, y;
    batch_of(&r, &x, &y);
    float loss;
    CHECK_OK(dp_model_forward(m, &x, &y, &loss, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    printf("llama3_mqa_lora (PEFT's adapter): loss %.9g, PyTorch %.9g\n", loss, r.loss);
    CHECK(fabs(loss - r.loss) <= HF_TOL * r.loss);
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    for (int i = 0; f && i < dp_st_count(f); i++) {
        const dp_st_tensor *t = dp_st_at(f, i);
        const char *prefix = "base_model.model.";
        dp_param *p =
            strncmp(t->name, prefix, strlen(prefix)) == 0 ? dp_model_param_named(m, t->name + strlen(prefix)) : NULL;
        CHECK(p && p->trainable && p->grad.numel == t->numel);
        if (!p || p->grad.numel != t->numel) continue;
        float *want = malloc((size_t)t->numel * sizeof *want);
        CHECK_OK(dp_st_read_f32(f, t, want, t->numel));
        double e = rel_err(p->grad.data, want, t->numel);
        printf("  %s: relative error %.3g\n", t->name, e);
        CHECK(e <= HF_TOL);
        free(want);
    }
    dp_st_close(f);
    snprintf(out, sizeof out, "%s/peft", tmpdir);
    CHECK_OK(dp_model_save(m, out));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    snprintf(mine, sizeof mine, "%s/adapter_model.safetensors", out);
    same_tensors(path, mine);
    snprintf(mine, sizeof mine, "%s/adapter_config.json", out);
    FILE *fp = fopen(mine, "rb");
    char text[4096] = "";
    if (fp) {
        size_t n = fread(text, 1, sizeof text - 1, fp);
        text[n] = '\0';
        fclose(fp);
    }
    cJSON *j = cJSON_Parse(text), *tm = j ? cJSON_GetObjectItem(j, "target_modules") : NULL;
    CHECK(cJSON_GetArraySize(tm) == 2 && strcmp(cJSON_GetArrayItem(tm, 0)->valuestring, "q_proj") == 0 &&
          strcmp(cJSON_GetArrayItem(tm, 1)->valuestring, "v_proj") == 0);
    cJSON_Delete(j);
    dp_tensor_release(&x);
    dp_tensor_release(&y);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-llama3-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    check_fixture("llama3", 2, DP_ROPE_LLAMA3, 1);
    check_fixture("llama3_mqa", 1, DP_ROPE_YARN, 0);
    check_peft();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    dp_engine_shutdown();
    return check_report("test_hf_llama3");
}
