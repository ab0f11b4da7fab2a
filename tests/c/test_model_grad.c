/* test_model_grad.c: whole tiny models (gpt tied and untied, llama, both with LoRA) against
 * finite differences of their own loss, the DP hooks against the gradients they must add up to,
 * retained backwards, norm-only passes (weight_grads = 0) and the bf16 path.
 *
 * The objective is f = sum_i s_i L_i with uneven per-sample scales s, so the test also checks
 * that sample i's share of every gradient is scaled by s_i. Parameters are drawn at the scale of
 * the Hugging Face fixtures (weights 0.3, embeddings 0.5, gains 1 +- 0.2, biases 0.2; LoRA B
 * non-zero so that A's gradient is not trivially 0).
 *
 * Tolerance of the element-wise finite differences (step h = 1e-2, central): f is computed in
 * f32 through ~10^3 roundings of O(1) values, so two evaluations differ by rounding noise of
 * ~1e-6 (measured: |f(x+0) - f(x+ulp)| ~ 3e-7) and the quotient carries ~1e-6 / (2h) = 5e-5;
 * the truncation error h^2/6 |f'''| is ~2e-5 for |f'''| ~ 1 at these scales. So an element may
 * differ by 2e-4 + 1e-2 |g| (4x margin on the noise); a missing term, factor or sign in any
 * layer's backward moves whole tensors by O(|g|) >> that. */
#include "check.h"
#include "data.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "memory.h"
#include "model.h"
#include "philox.h"

#include <stdlib.h>
#include <string.h>

#define FD_H 1e-2
#define FD_ATOL 2e-4
#define FD_RTOL 1e-2

static dp_device *cpu;
static const float scales[3] = {0.7f, -0.4f, 1.3f}; /* s_i of the objective, B = 3 */

static float *vals(dp_tensor *t) { return (float *)t->data; }

/* draws every parameter at the fixtures' scale */
static void randomise(dp_model *m, uint64_t seed) {
    for (int i = 0; i < dp_model_param_count(m); i++) {
        dp_param *p = dp_model_param(m, i);
        float *v = vals(&p->value);
        for (int64_t j = 0; j < p->value.numel; j++) {
            float z = dp_philox_normal(seed, (uint64_t)i, (uint64_t)j);
            switch (p->kind) {
            case DP_PARAM_NORM_W: v[j] = 1.0f + 0.2f * z; break;
            case DP_PARAM_NORM_B:
            case DP_PARAM_LINEAR_B: v[j] = 0.2f * z; break;
            case DP_PARAM_EMBEDDING:
            case DP_PARAM_POSITION: v[j] = 0.5f * z; break;
            default: v[j] = 0.3f * z; break;
            }
        }
    }
}

/* f = sum_i s_i L_i */
static double objective(dp_model *m, dp_batch *bt) {
    float loss, per[3];
    CHECK_OK(dp_model_forward(m, &bt->inputs, &bt->targets, &loss, per));
    double f = 0;
    for (int i = 0; i < bt->inputs.shape[0]; i++) f += (double)scales[i] * per[i];
    return f;
}

static void backward(dp_model *m, const dp_layer_hooks *hooks, int weight_grads, int retain) {
    dp_backward_opts o = {scales, weight_grads, retain, hooks};
    CHECK_OK(dp_model_backward(m, &o));
}

/* Element-wise finite differences of f for every trainable parameter (about `samples`
 * elements of each, evenly spaced) against the gradient of one backward. */
static void check_fd(dp_model *m, dp_batch *bt, int64_t samples) {
    CHECK_OK(dp_model_zero_grad(m, 1));
    objective(m, bt);
    backward(m, NULL, 1, 0);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dp_model_param_count(m); i++) {
        dp_param *p = dp_model_param(m, i);
        if (!p->trainable) {
            CHECK(!p->grad.alloc.live); /* frozen: never a gradient */
            continue;
        }
        CHECK(p->grad.alloc.live);
        if (!p->grad.alloc.live) continue;
        float *x = vals(&p->value), *g = vals(&p->grad);
        int64_t n = p->value.numel, step = n > samples ? n / samples : 1;
        int bad = 0;
        double gmax = 0;
        for (int64_t j = 0; j < n; j++) gmax = fmax(gmax, fabs(g[j]));
        CHECK(gmax > 1e-3); /* a real gradient, not a vacuous check */
        for (int64_t j = 0; j < n; j += step) {
            float keep = x[j];
            double f[4];
            for (int k = 0; k < 4; k++) {
                x[j] = keep + (float)(FD_H * (k < 2 ? (k ? -1 : 1) : (k == 2 ? 2 : -2)));
                f[k] = objective(m, bt);
            }
            x[j] = keep;
            /* the five-point stencil: truncation O(h^4) */
            double fd = (8.0 * (f[0] - f[1]) - (f[2] - f[3])) / (12.0 * FD_H);
            double err = fabs(fd - g[j]), lim = FD_ATOL + FD_RTOL * fabs(g[j]);
            if (err / lim > worst) worst = err / lim, worst_name = p->name;
            if (err > lim && bad++ < 2)
                fprintf(stderr, "  %s[%lld]: backward %.7g, finite difference %.7g\n", p->name, (long long)j, g[j], fd);
        }
        CHECK(bad == 0);
    }
    dp_model_release_activations(m);
    printf("  finite differences: worst |fd - g| / tolerance = %.3f (%s)\n", worst, worst_name);
}

/* ---- hooks: what they receive must add up to the gradients -------------------------------- */

typedef struct {
    dp_model *m;
    int64_t B, T;
    double **acc; /* per parameter index: the gradient rebuilt from the hooks */
    int *calls;
    int bad;
} hook_ctx;

static int index_of(dp_model *m, const dp_param *p) { return (int)(p - dp_model_param(m, 0)); }

static int shape_ok(const hook_ctx *h, const dp_tensor *t, int64_t cols) {
    return t->ndim == 3 && t->shape[0] == h->B && t->shape[1] == h->T && t->shape[2] == cols && t->dtype == DP_F32;
}

static int on_linear(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *A, const dp_tensor *G,
                     float scale) {
    hook_ctx *h = ctx;
    const int64_t p = w->value.shape[0], d = w->value.shape[1], N = h->B * h->T;
    if (!shape_ok(h, A, d) || !shape_ok(h, G, p) || !w->trainable) {
        h->bad++;
        return DP_OK;
    }
    const float *a = A->data, *g = G->data;
    double *acc = h->acc[index_of(m, w)];
    h->calls[index_of(m, w)]++;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < p; i++)
            for (int64_t j = 0; j < d; j++) acc[i * d + j] += (double)scale * g[n * p + i] * a[n * d + j];
    if (b) {
        double *ab = h->acc[index_of(m, b)];
        h->calls[index_of(m, b)]++;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < p; i++) ab[i] += g[n * p + i];
    }
    return DP_OK;
}

static int on_norm(void *ctx, dp_model *m, dp_param *w, dp_param *b, const dp_tensor *x, const dp_tensor *mean,
                   const dp_tensor *rstd, const dp_tensor *G) {
    hook_ctx *h = ctx;
    const int64_t d = w->value.numel, N = h->B * h->T;
    if (!shape_ok(h, x, d) || !shape_ok(h, G, d) || rstd->numel != N || (mean != NULL) != (b != NULL)) {
        h->bad++;
        return DP_OK;
    }
    const float *xv = x->data, *g = G->data, *rs = rstd->data, *mu = mean ? mean->data : NULL;
    double *aw = h->acc[index_of(m, w)], *ab = b ? h->acc[index_of(m, b)] : NULL;
    h->calls[index_of(m, w)]++;
    if (b) h->calls[index_of(m, b)]++;
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < d; j++) {
            double xhat = ((double)xv[n * d + j] - (mu ? mu[n] : 0.0)) * rs[n];
            aw[j] += g[n * d + j] * xhat;
            if (ab) ab[j] += g[n * d + j];
        }
    return DP_OK;
}

static int on_embedding(void *ctx, dp_model *m, dp_param *wte, const dp_tensor *ids, const dp_tensor *G) {
    hook_ctx *h = ctx;
    const int64_t d = wte->value.shape[1], N = h->B * h->T;
    if (!shape_ok(h, G, d) || ids->numel != N || ids->dtype != DP_I32) {
        h->bad++;
        return DP_OK;
    }
    const int32_t *id = ids->data;
    const float *g = G->data;
    double *acc = h->acc[index_of(m, wte)];
    h->calls[index_of(m, wte)]++;
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < d; j++) acc[id[n] * d + j] += g[n * d + j];
    return DP_OK;
}

static int on_position(void *ctx, dp_model *m, dp_param *wpe, const dp_tensor *G) {
    hook_ctx *h = ctx;
    const int64_t d = wpe->value.shape[1];
    if (!shape_ok(h, G, d)) {
        h->bad++;
        return DP_OK;
    }
    const float *g = G->data;
    double *acc = h->acc[index_of(m, wpe)];
    h->calls[index_of(m, wpe)]++;
    for (int64_t b = 0; b < h->B; b++)
        for (int64_t t = 0; t < h->T; t++)
            for (int64_t j = 0; j < d; j++) acc[t * d + j] += g[(b * h->T + t) * d + j];
    return DP_OK;
}

static void hook_reset(hook_ctx *h) {
    for (int i = 0; i < dp_model_param_count(h->m); i++) {
        memset(h->acc[i], 0, (size_t)dp_model_param(h->m, i)->value.numel * sizeof(double));
        h->calls[i] = 0;
    }
    h->bad = 0;
}

static void check_hooks(dp_model *m, dp_batch *bt) {
    const int np = dp_model_param_count(m);
    hook_ctx h = {m,
                  bt->inputs.shape[0],
                  bt->inputs.shape[1],
                  calloc((size_t)np, sizeof(double *)),
                  calloc((size_t)np, sizeof(int)),
                  0};
    for (int i = 0; i < np; i++) h.acc[i] = calloc((size_t)dp_model_param(m, i)->value.numel, sizeof(double));
    dp_layer_hooks hooks = {
        .ctx = &h, .linear = on_linear, .norm = on_norm, .embedding = on_embedding, .position = on_position};

    /* with weight gradients: every trainable parameter's hooks add up to its gradient */
    CHECK_OK(dp_model_zero_grad(m, 1));
    objective(m, bt);
    backward(m, &hooks, 1, 0);
    CHECK(h.bad == 0);
    double worst = 0;
    for (int i = 0; i < np; i++) {
        dp_param *p = dp_model_param(m, i);
        CHECK(p->trainable ? h.calls[i] > 0 : h.calls[i] == 0);
        if (!p->trainable || !p->grad.alloc.live) continue;
        const float *g = vals(&p->grad);
        double gmax = 0, err = 0;
        for (int64_t j = 0; j < p->value.numel; j++) {
            gmax = fmax(gmax, fabs(g[j]));
            err = fmax(err, fabs(g[j] - h.acc[i][j]));
        }
        worst = fmax(worst, err / gmax);
        if (!(err <= 1e-5 * gmax)) fprintf(stderr, "  hooks of %s: max error %.3g of max %.3g\n", p->name, err, gmax);
        CHECK(err <= 1e-5 * gmax); /* f32 GEMMs against double sums of the same products */
    }
    printf("  hooks rebuild every gradient: max relative error %.3g\n", worst);

    /* a norm-only pass: the same hook inputs, no gradient allocated or touched */
    double **first = h.acc;
    h.acc = calloc((size_t)np, sizeof(double *));
    for (int i = 0; i < np; i++) h.acc[i] = calloc((size_t)dp_model_param(m, i)->value.numel, sizeof(double));
    hook_reset(&h);
    CHECK_OK(dp_model_zero_grad(m, 1));
    objective(m, bt);
    backward(m, &hooks, 0, 0);
    for (int i = 0; i < np; i++) {
        CHECK(!dp_model_param(m, i)->grad.alloc.live);
        CHECK(memcmp(first[i], h.acc[i], (size_t)dp_model_param(m, i)->value.numel * sizeof(double)) == 0);
    }
    for (int i = 0; i < np; i++) free(first[i]), free(h.acc[i]);
    free(first), free(h.acc), free(h.calls);
}

/* ---- retained backwards and memory hygiene -------------------------------------------------- */

static void check_retain(dp_model *m, dp_batch *bt) {
    dp_mem_stats st;
    const int np = dp_model_param_count(m);
    /* reference: one backward of the summed scales */
    float twice[3];
    for (int i = 0; i < 3; i++) twice[i] = 2.0f * scales[i];
    CHECK_OK(dp_model_zero_grad(m, 1));
    objective(m, bt);
    dp_backward_opts o = {twice, 1, 0, NULL};
    CHECK_OK(dp_model_backward(m, &o));
    float **ref = calloc((size_t)np, sizeof *ref);
    for (int i = 0; i < np; i++) {
        dp_param *p = dp_model_param(m, i);
        if (!p->grad.alloc.live) continue;
        ref[i] = malloc((size_t)p->grad.numel * sizeof(float));
        memcpy(ref[i], p->grad.data, (size_t)p->grad.numel * sizeof(float));
    }
    /* two backwards of one forward, the first retaining: the logits are recomputed */
    CHECK_OK(dp_model_zero_grad(m, 0));
    objective(m, bt);
    backward(m, NULL, 1, 1);
    dp_mem_get_stats(cpu->mem, &st);
    CHECK(st.current[DP_CAT_ACTIVATIONS] > 0);
    CHECK_EQ_U64(st.current[DP_CAT_TEMP], 0);
    backward(m, NULL, 1, 0);
    for (int i = 0; i < np; i++) {
        dp_param *p = dp_model_param(m, i);
        if (!ref[i]) continue;
        for (int64_t j = 0; j < p->grad.numel; j++) CHECK_CLOSE(vals(&p->grad)[j], ref[i][j], 1e-5);
        free(ref[i]);
    }
    free(ref);
    /* everything the passes allocated is gone; a third backward has nothing to go back through */
    dp_mem_get_stats(cpu->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_ACTIVATIONS], 0);
    CHECK_EQ_U64(st.current[DP_CAT_TEMP], 0);
    CHECK(dp_model_backward(m, NULL) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "forward") != NULL);
}

/* The bf16 path on the CPU (its reference): the same weights give a loss within bf16 rounding
 * of f32's and gradients pointing the same way. */
static void check_bf16(dp_model *m32, const dp_model_config *cfg, dp_batch *bt) {
    dp_model_config c = *cfg;
    c.dtype = DP_BF16;
    dp_model *m;
    CHECK_OK(dp_model_new(cpu, &c, &m));
    if (!m) return;
    for (int i = 0; i < dp_model_param_count(m); i++)
        CHECK_OK(dp_tensor_copy(&dp_model_param(m, i)->value, &dp_model_param(m32, i)->value));
    CHECK_OK(dp_model_sync_compute_weights(m));
    float l32, l16;
    CHECK_OK(dp_model_zero_grad(m32, 1));
    CHECK_OK(dp_model_forward(m32, &bt->inputs, &bt->targets, &l32, NULL));
    CHECK_OK(dp_model_backward(m32, NULL));
    CHECK_OK(dp_model_forward(m, &bt->inputs, &bt->targets, &l16, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    double dot = 0, n32 = 0, n16 = 0;
    for (int i = 0; i < dp_model_param_count(m); i++) {
        dp_param *a = dp_model_param(m32, i), *b = dp_model_param(m, i);
        if (!a->grad.alloc.live) continue;
        CHECK(b->grad.alloc.live && b->grad.dtype == DP_F32);
        for (int64_t j = 0; j < a->grad.numel; j++) {
            double x = vals(&a->grad)[j], y = vals(&b->grad)[j];
            dot += x * y, n32 += x * x, n16 += y * y;
        }
    }
    double cosine = dot / sqrt(n32 * n16), grad_err = sqrt(fmax(n32 + n16 - 2 * dot, 0.0) / n32);
    double loss_err = fabs(l16 - l32) / fabs(l32);
    printf("  bf16: loss %.5f vs f32 %.5f (relative %.2g), gradient relative error %.3g, cosine %.5f\n", l16, l32,
           loss_err, grad_err, cosine);
    /* Bounds in u = 2^-8, bf16's unit roundoff (8 significant bits, round to nearest: one
     * rounding moves a value by at most u relative). Every sum is accumulated in f32; what is
     * rounded is each stored activation and the weights' compute copies, so the error is a sum
     * of independent first-order terms of at most u each, and the loss, a mean over B T tokens
     * of d-term dot products, averages them: it must agree with f32's within one rounding, u
     * (measured 4.1e-4 to 1.2e-3). The gradient goes through the same roundings twice (forward
     * values, backward gradients) in each of the two blocks, about eight rounded tensors each
     * way: relative error at most 16 u = 2^-4 (measured 0.014 to 0.036), hence a cosine of at
     * least 1 - (16 u)^2 / 2 = 1 - 2^-9 (measured 0.99937 to 0.99990). */
    const double u = 1.0 / 256;
    CHECK(loss_err <= u);
    CHECK(grad_err <= 16 * u);
    CHECK(cosine >= 1.0 - (16 * u) * (16 * u) / 2);
    dp_model_free(m);
}

static void run_case(const char *name, dp_model_config cfg, int with_bf16) {
    printf("%s\n", name);
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(cpu, &cfg, &m));
    if (!m) return;
    randomise(m, 42);
    dp_batch bt;
    CHECK_OK(dp_batch_init(&bt, cpu, 3, cfg.seq_len));
    CHECK_OK(dp_data_synthetic(&bt.inputs, &bt.targets, cfg.vocab, 11, 0));
    check_fd(m, &bt, cfg.seq_len > 16 ? 24 : 64);
    check_hooks(m, &bt);
    check_retain(m, &bt);
    if (with_bf16) check_bf16(m, &cfg, &bt);
    dp_batch_release(&bt);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    dp_model_config gpt;
    dp_model_config_default(&gpt, DP_ARCH_GPT);
    gpt.vocab = 29, gpt.hidden = 16, gpt.layers = 2, gpt.heads = 2, gpt.seq_len = 7, gpt.batch = 3;
    gpt.max_positions = 70; /* more rows than seq_len: only the first T are used */
    run_case("gpt, tied head", gpt, 1);
    dp_model_config c = gpt;
    c.tie_head = 0;
    c.seq_len = 67; /* two attention blocks */
    run_case("gpt, untied head, T = 67", c, 0);
    c = gpt;
    c.lora_rank = 2, c.lora_alpha = 4, c.lora_targets = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
    run_case("gpt, LoRA on every linear", c, 1);

    dp_model_config llama;
    dp_model_config_default(&llama, DP_ARCH_LLAMA);
    llama.vocab = 29, llama.hidden = 16, llama.layers = 2, llama.heads = 2, llama.seq_len = 7, llama.batch = 3;
    llama.ffn = 24;
    run_case("llama", llama, 1);
    c = llama;
    c.seq_len = 67;
    run_case("llama, T = 67", c, 0);
    c = llama;
    c.lora_rank = 3, c.lora_alpha = 6, c.lora_targets = DP_LORA_QKV | DP_LORA_FC | DP_LORA_DOWN | DP_LORA_PROJ;
    run_case("llama, LoRA on every linear", c, 0);
    c = llama;
    c.heads = 4, c.kv_heads = 2, c.head_dim = 6; /* q 24 wide, k and v 12: groups of 2 query heads */
    run_case("llama, grouped-query attention, head_dim 6", c, 1);
    c.kv_heads = 1, c.seq_len = 67;
    c.lora_rank = 2, c.lora_alpha = 2, c.lora_targets = DP_LORA_QKV | DP_LORA_PROJ;
    run_case("llama, multi-query attention with LoRA, T = 67", c, 0);
    c = llama;
    c.tie_head = 1, c.kv_heads = 1; /* Llama-3.2-1B's tied head: embed_tokens gets both uses' gradient */
    run_case("llama, tied head", c, 1);
    dp_engine_shutdown();
    return check_report("test_model_grad");
}
