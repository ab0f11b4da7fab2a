/* test_cuda_layers.c: every entry of the CUDA layer table against the CPU reference
 * (cpu_layers.c), f32 and bf16, through dev->ops->layers.
 *
 * Inputs are fresh Philox normals (never zeros), identical on both devices (bf16 inputs are
 * rounded once on the CPU and copied). Outputs are poisoned with NaN on both devices before
 * each call, so an element a kernel forgets to write fails the comparison (NaN never passes).
 * Each line prints max |cuda - cpu| / max |cpu| for one output and its tolerance:
 *   f32 element-wise ops: 1e-5 (both sides round the same f32 formula; only libm differs);
 *   f32 reductions and attention: 1e-5 relative to the largest element, which covers a
 *     different summation order over up to a few thousand terms (~sqrt(n) 6e-8 each);
 *   bf16 outputs: 1e-2 (an output can round one bf16 ulp, 2^-7 relative, the other way when
 *     the f32 values differ in their last bits); bf16 attention 2e-2 (the kernels round P and
 *     dS to bf16 for the tensor cores, 2^-9 relative per term, where the CPU keeps f32);
 *   rope f32 1e-5 (inv_freq comes from the same host powf, the angle product is the same f32
 *     rounding; only sinf/cosf differ, by ~2 ulp);
 *   AdamW and SGD: bit-identical by construction, checked at 0.
 * Sizes include odd and unaligned ones (d = 48, 50, 772, 3000; T = 1, 7, 300, 600; N = 7;
 * V = 50257; hd 16, 48, 64, 128, 256; pointers offset by one element) and both causal edges
 * (T = 1, and T not a multiple of any tile).
 *
 * DPPROF_BENCH=1 times each op at the two benchmark shapes (GPT-2 small: B 8, T 1024, d 768,
 * H 12, V 50257; large: B 1, T 16384, d 2048, H 16, V 32000) and prints achieved GB/s or
 * TFLOP/s against the H100 SXM roofline (3.35 TB/s HBM3, 989 TFLOP/s dense bf16 tensor,
 * 67 TFLOP/s f32 SIMT); the byte and flop counts are in bench_* below. Skips (77) without a
 * GPU. */
#include "check.h"
#include "test_util.h"
#include "clock.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "layer_ops.h"
#include "model.h"
#include "tensor.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dp_device *cpu, *gpu;
static uint64_t next_stream = 1; /* a fresh Philox stream for every input */
#define ROPE_MAX_PAIRS 256       /* the CUDA rope's largest head: 512 */

/* ---- paired buffers: the same contents on the CPU and the GPU -------------------------------- */

typedef struct {
    dp_tensor c, g;
    dp_dtype t;
    int64_t n;
} pair;

static void pair_alloc(pair *p, dp_dtype t, int64_t n) {
    p->t = t;
    p->n = n;
    CHECK_OK(dp_tensor_init(&p->c, cpu, t, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&p->g, gpu, t, 1, &n, DP_CAT_TEMP));
}

/* normal(mean, std) values, rounded to t once on the CPU, copied to the GPU */
static void pair_rand(pair *p, dp_dtype t, int64_t n, float mean, float std) {
    pair_alloc(p, t, n);
    dp_tensor tmp;
    CHECK_OK(dp_tensor_init(&tmp, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_rand(&tmp, DP_RAND_NORMAL, mean, std, 20240611, next_stream++));
    CHECK_OK(dp_tensor_copy(&p->c, &tmp));
    CHECK_OK(dp_tensor_copy(&p->g, &p->c));
    dp_tensor_release(&tmp);
}

/* outputs: NaN on both devices */
static void pair_nan(pair *p, dp_dtype t, int64_t n) {
    pair_alloc(p, t, n);
    CHECK_OK(dp_tensor_fill(&p->c, NAN));
    CHECK_OK(dp_tensor_fill(&p->g, NAN));
}

static void pair_free(pair *p) {
    dp_tensor_release(&p->c);
    dp_tensor_release(&p->g);
}

/* element i of the pair's buffer on each device */
static void *at_c(pair *p, int64_t i) { return (char *)p->c.data + i * (int64_t)dp_dtype_size(p->t); }
static void *at_g(pair *p, int64_t i) { return (char *)p->g.data + i * (int64_t)dp_dtype_size(p->t); }

static float *host_f32(const dp_tensor *t) {
    dp_tensor f;
    float *h = malloc((size_t)t->numel * sizeof *h);
    if (t->dev == cpu) {
        CHECK_OK(dp_tensor_init(&f, cpu, DP_F32, 1, &t->numel, DP_CAT_TEMP));
        CHECK_OK(dp_tensor_copy(&f, t));
    } else {
        dp_tensor same;
        CHECK_OK(dp_tensor_init(&same, cpu, t->dtype, 1, &t->numel, DP_CAT_TEMP));
        CHECK_OK(dp_tensor_copy(&same, t));
        CHECK_OK(dp_tensor_init(&f, cpu, DP_F32, 1, &t->numel, DP_CAT_TEMP));
        CHECK_OK(dp_tensor_copy(&f, &same));
        dp_tensor_release(&same);
    }
    memcpy(h, f.data, (size_t)t->numel * sizeof *h);
    dp_tensor_release(&f);
    return h;
}

/* max |g - c| / max |c| over elements off + r*ld + j (r < rows, j < cols); INFINITY when any
 * compared element is NaN on either side. */
static double pair_err_part(const pair *p, int64_t off, int64_t rows, int64_t cols, int64_t ld) {
    CHECK_OK(dp_device_sync(gpu));
    float *g = host_f32(&p->g), *c = host_f32(&p->c);
    double worst = 0, big = 0;
    int nan = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t i = off + r * ld + j;
            if (isnan(g[i]) || isnan(c[i])) nan = 1;
            big = fmax(big, fabs(c[i]));
            worst = fmax(worst, fabs((double)g[i] - c[i]));
        }
    free(g);
    free(c);
    if (nan) return INFINITY;
    return big > 0 ? worst / big : worst;
}

/* max |x| over the same elements of the GPU's (gpu = 1) or the CPU's copy; INFINITY on NaN */
static double pair_max_abs_part(const pair *p, int gpu_side, int64_t off, int64_t rows, int64_t cols, int64_t ld) {
    CHECK_OK(dp_device_sync(gpu));
    float *h = host_f32(gpu_side ? &p->g : &p->c);
    double m = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            const float x = h[off + r * ld + j];
            m = isnan(x) ? INFINITY : fmax(m, fabs(x));
        }
    free(h);
    return m;
}

static double pair_err(const pair *p) { return pair_err_part(p, 0, 1, p->n, p->n); }

static void report(const char *what, double err, double tol) {
    printf("  %-66s %9.2e  (tol %.0e) %s\n", what, err, tol, err <= tol ? "ok" : "FAIL");
    CHECK(err <= tol);
}

static double tol_of(dp_dtype t) { return t == DP_BF16 ? 1e-2 : 1e-5; }

/* i32 ids on both devices */
typedef struct {
    dp_tensor c, g;
} ipair;

static void ipair_init(ipair *p, const int32_t *h, int64_t n) {
    CHECK_OK(dp_tensor_init(&p->c, cpu, DP_I32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_init(&p->g, gpu, DP_I32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_tensor_from_host(&p->c, h, (uint64_t)n * 4));
    CHECK_OK(dp_tensor_from_host(&p->g, h, (uint64_t)n * 4));
}

static void ipair_free(ipair *p) {
    dp_tensor_release(&p->c);
    dp_tensor_release(&p->g);
}

static uint32_t lcg_state = 12345;
static int32_t rand_below(int64_t n) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (int32_t)((lcg_state >> 8) % (uint32_t)n);
}

#define CPU_L (cpu->ops->layers)
#define GPU_L (gpu->ops->layers)

/* ---- embeddings ------------------------------------------------------------------------------ */

static void test_embedding(dp_dtype t, dp_dtype wt, int64_t B, int64_t T, int64_t d, int64_t V, int with_wpe,
                           int with_dwte) {
    const int64_t N = B * T;
    char what[160];
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    for (int64_t n = 0; n < N; n++) ids[n] = rand_below(V);
    ipair id;
    ipair_init(&id, ids, N);
    pair wte, wpe, out, dout, dwte, dwpe;
    pair_rand(&wte, wt, V * d, 0, 1); /* bf16 tables: a bf16 model's frozen embeddings */
    pair_rand(&wpe, wt, T * d, 0, 1);
    pair_nan(&out, t, N * d);
    CHECK_OK(
        CPU_L->embedding_forward(cpu, t, wt, out.c.data, id.c.data, wte.c.data, with_wpe ? wpe.c.data : NULL, N, T, d));
    CHECK_OK(
        GPU_L->embedding_forward(gpu, t, wt, out.g.data, id.g.data, wte.g.data, with_wpe ? wpe.g.data : NULL, N, T, d));
    snprintf(what, sizeof what, "embedding_forward %s (tables %s) N=%lld T=%lld d=%lld V=%lld%s", dp_dtype_name(t),
             dp_dtype_name(wt), (long long)N, (long long)T, (long long)d, (long long)V, with_wpe ? "" : " no wpe");
    report(what, pair_err(&out), 0); /* a gather and one f32 add: exact */

    pair_rand(&dout, t, N * d, 0, 1);
    pair_rand(&dwte, DP_F32, V * d, 0, 1); /* gradients accumulate: start from non-zero values */
    pair_rand(&dwpe, DP_F32, T * d, 0, 1);
    CHECK_OK(CPU_L->embedding_backward(cpu, t, dout.c.data, id.c.data, with_dwte ? dwte.c.data : NULL,
                                       with_wpe ? dwpe.c.data : NULL, N, T, d, V));
    CHECK_OK(GPU_L->embedding_backward(gpu, t, dout.g.data, id.g.data, with_dwte ? dwte.g.data : NULL,
                                       with_wpe ? dwpe.g.data : NULL, N, T, d, V));
    snprintf(what, sizeof what, "embedding_backward %s dwte (same order as the CPU: exact)%s", dp_dtype_name(t),
             with_dwte ? "" : " frozen");
    report(what, pair_err(&dwte), 0);
    snprintf(what, sizeof what, "embedding_backward %s dwpe (exact)%s", dp_dtype_name(t), with_wpe ? "" : " absent");
    report(what, pair_err(&dwpe), 0);
    pair *ps[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
    ipair_free(&id);
    free(ids);
}

/* ---- LayerNorm / RMSNorm --------------------------------------------------------------------- */

static void test_norm(dp_dtype t, int rms, int64_t N, int64_t d, int accumulate, int with_grads, int offset) {
    char what[160];
    const char *name = rms ? "rmsnorm" : "layernorm";
    const float eps = 1e-5f;
    pair x, w, b, out, mean, rstd, dout, dx, dw, db;
    pair_rand(&x, t, N * d + offset, 0.3f, 2.0f);
    pair_rand(&w, DP_F32, d, 1.0f, 0.5f);
    pair_rand(&b, DP_F32, d, 0.0f, 0.5f);
    pair_nan(&out, t, N * d + offset);
    pair_nan(&mean, DP_F32, N);
    pair_nan(&rstd, DP_F32, N);
    if (rms) {
        CHECK_OK(
            CPU_L->rmsnorm_forward(cpu, t, at_c(&out, offset), rstd.c.data, at_c(&x, offset), w.c.data, N, d, eps));
        CHECK_OK(
            GPU_L->rmsnorm_forward(gpu, t, at_g(&out, offset), rstd.g.data, at_g(&x, offset), w.g.data, N, d, eps));
    } else {
        CHECK_OK(CPU_L->layernorm_forward(cpu, t, at_c(&out, offset), mean.c.data, rstd.c.data, at_c(&x, offset),
                                          w.c.data, b.c.data, N, d, eps));
        CHECK_OK(GPU_L->layernorm_forward(gpu, t, at_g(&out, offset), mean.g.data, rstd.g.data, at_g(&x, offset),
                                          w.g.data, b.g.data, N, d, eps));
    }
    snprintf(what, sizeof what, "%s_forward %s N=%lld d=%lld%s out", name, dp_dtype_name(t), (long long)N, (long long)d,
             offset ? " unaligned" : "");
    report(what, pair_err_part(&out, offset, 1, N * d, N * d), tol_of(t));
    snprintf(what, sizeof what, "%s_forward %s N=%lld d=%lld rstd", name, dp_dtype_name(t), (long long)N, (long long)d);
    report(what, pair_err(&rstd), 1e-5);
    if (!rms) {
        snprintf(what, sizeof what, "layernorm_forward %s N=%lld d=%lld mean", dp_dtype_name(t), (long long)N,
                 (long long)d);
        report(what, pair_err(&mean), 1e-5);
    }
    /* backward from the CPU's statistics on both devices */
    CHECK_OK(dp_tensor_copy(&rstd.g, &rstd.c));
    if (!rms) CHECK_OK(dp_tensor_copy(&mean.g, &mean.c));
    pair_rand(&dout, t, N * d + offset, 0, 1);
    if (accumulate)
        pair_rand(&dx, t, N * d + offset, 0, 1);
    else
        pair_nan(&dx, t, N * d + offset);
    pair_rand(&dw, DP_F32, d, 0, 1);
    pair_rand(&db, DP_F32, d, 0, 1);
    if (rms) {
        CHECK_OK(CPU_L->rmsnorm_backward(cpu, t, at_c(&dx, offset), with_grads ? dw.c.data : NULL, at_c(&dout, offset),
                                         at_c(&x, offset), w.c.data, rstd.c.data, N, d, accumulate));
        CHECK_OK(GPU_L->rmsnorm_backward(gpu, t, at_g(&dx, offset), with_grads ? dw.g.data : NULL, at_g(&dout, offset),
                                         at_g(&x, offset), w.g.data, rstd.g.data, N, d, accumulate));
    } else {
        CHECK_OK(CPU_L->layernorm_backward(cpu, t, at_c(&dx, offset), with_grads ? dw.c.data : NULL,
                                           with_grads ? db.c.data : NULL, at_c(&dout, offset), at_c(&x, offset),
                                           w.c.data, mean.c.data, rstd.c.data, N, d, accumulate));
        CHECK_OK(GPU_L->layernorm_backward(gpu, t, at_g(&dx, offset), with_grads ? dw.g.data : NULL,
                                           with_grads ? db.g.data : NULL, at_g(&dout, offset), at_g(&x, offset),
                                           w.g.data, mean.g.data, rstd.g.data, N, d, accumulate));
    }
    snprintf(what, sizeof what, "%s_backward %s N=%lld d=%lld%s%s dx", name, dp_dtype_name(t), (long long)N,
             (long long)d, accumulate ? " accumulate" : "", offset ? " unaligned" : "");
    report(what, pair_err_part(&dx, offset, 1, N * d, N * d), tol_of(t));
    if (with_grads) {
        snprintf(what, sizeof what, "%s_backward %s N=%lld d=%lld dw", name, dp_dtype_name(t), (long long)N,
                 (long long)d);
        report(what, pair_err(&dw), 1e-5);
        if (!rms) {
            snprintf(what, sizeof what, "layernorm_backward %s N=%lld d=%lld db", dp_dtype_name(t), (long long)N,
                     (long long)d);
            report(what, pair_err(&db), 1e-5);
        }
    } else {
        snprintf(what, sizeof what, "%s_backward %s frozen: dw untouched", name, dp_dtype_name(t));
        report(what, pair_err(&dw), 0);
    }
    pair *ps[] = {&x, &w, &b, &out, &mean, &rstd, &dout, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
}

/* ---- bias, GELU, SwiGLU ---------------------------------------------------------------------- */

static void test_bias(dp_dtype t, int64_t rows, int64_t cols) {
    char what[160];
    pair out, bias, db;
    pair_rand(&out, t, rows * cols, 0, 1);
    pair_rand(&bias, DP_F32, cols, 0, 1);
    CHECK_OK(CPU_L->bias_add(cpu, t, out.c.data, bias.c.data, rows, cols));
    CHECK_OK(GPU_L->bias_add(gpu, t, out.g.data, bias.g.data, rows, cols));
    snprintf(what, sizeof what, "bias_add %s %lld x %lld", dp_dtype_name(t), (long long)rows, (long long)cols);
    report(what, pair_err(&out), 0); /* one f32 add and one rounding on both */
    pair_rand(&db, DP_F32, cols, 0, 1);
    CHECK_OK(CPU_L->bias_backward(cpu, t, db.c.data, out.c.data, rows, cols));
    CHECK_OK(GPU_L->bias_backward(gpu, t, db.g.data, out.g.data, rows, cols));
    snprintf(what, sizeof what, "bias_backward %s %lld x %lld", dp_dtype_name(t), (long long)rows, (long long)cols);
    report(what, pair_err(&db), 1e-5);
    pair_free(&out);
    pair_free(&bias);
    pair_free(&db);
}

static void test_gelu_swiglu(dp_dtype t, int64_t n, int offset) {
    char what[160];
    const char *dt = dp_dtype_name(t), *un = offset ? " unaligned" : "";
    pair x, up, out, dout, dx, dx2, dup;
    pair_rand(&x, t, n + offset, 0, 2);
    pair_rand(&up, t, n + offset, 0, 1);
    pair_nan(&out, t, n + offset);
    CHECK_OK(CPU_L->gelu_forward(cpu, t, at_c(&out, offset), at_c(&x, offset), n));
    CHECK_OK(GPU_L->gelu_forward(gpu, t, at_g(&out, offset), at_g(&x, offset), n));
    snprintf(what, sizeof what, "gelu_forward %s n=%lld%s", dt, (long long)n, un);
    report(what, pair_err_part(&out, offset, 1, n, n), tol_of(t));
    pair_rand(&dout, t, n + offset, 0, 1);
    pair_nan(&dx, t, n + offset);
    CHECK_OK(CPU_L->gelu_backward(cpu, t, at_c(&dx, offset), at_c(&dout, offset), at_c(&x, offset), n, 0));
    CHECK_OK(GPU_L->gelu_backward(gpu, t, at_g(&dx, offset), at_g(&dout, offset), at_g(&x, offset), n, 0));
    snprintf(what, sizeof what, "gelu_backward %s n=%lld%s", dt, (long long)n, un);
    report(what, pair_err_part(&dx, offset, 1, n, n), tol_of(t));
    pair_rand(&dx2, t, n + offset, 0, 1);
    CHECK_OK(CPU_L->gelu_backward(cpu, t, at_c(&dx2, offset), at_c(&dout, offset), at_c(&x, offset), n, 1));
    CHECK_OK(GPU_L->gelu_backward(gpu, t, at_g(&dx2, offset), at_g(&dout, offset), at_g(&x, offset), n, 1));
    snprintf(what, sizeof what, "gelu_backward %s n=%lld accumulate%s", dt, (long long)n, un);
    report(what, pair_err_part(&dx2, offset, 1, n, n), tol_of(t));
    /* in place: dx aliases dout */
    CHECK_OK(CPU_L->gelu_backward(cpu, t, at_c(&dout, offset), at_c(&dout, offset), at_c(&x, offset), n, 0));
    CHECK_OK(GPU_L->gelu_backward(gpu, t, at_g(&dout, offset), at_g(&dout, offset), at_g(&x, offset), n, 0));
    snprintf(what, sizeof what, "gelu_backward %s n=%lld in place%s", dt, (long long)n, un);
    report(what, pair_err_part(&dout, offset, 1, n, n), tol_of(t));

    pair_free(&out);
    pair_nan(&out, t, n + offset);
    CHECK_OK(CPU_L->swiglu_forward(cpu, t, at_c(&out, offset), at_c(&x, offset), at_c(&up, offset), n));
    CHECK_OK(GPU_L->swiglu_forward(gpu, t, at_g(&out, offset), at_g(&x, offset), at_g(&up, offset), n));
    snprintf(what, sizeof what, "swiglu_forward %s n=%lld%s", dt, (long long)n, un);
    report(what, pair_err_part(&out, offset, 1, n, n), tol_of(t));
    pair_free(&dout);
    pair_rand(&dout, t, n + offset, 0, 1);
    pair_nan(&dup, t, n + offset);
    pair_free(&dx);
    pair_nan(&dx, t, n + offset);
    CHECK_OK(CPU_L->swiglu_backward(cpu, t, at_c(&dx, offset), at_c(&dup, offset), at_c(&dout, offset),
                                    at_c(&x, offset), at_c(&up, offset), n));
    CHECK_OK(GPU_L->swiglu_backward(gpu, t, at_g(&dx, offset), at_g(&dup, offset), at_g(&dout, offset),
                                    at_g(&x, offset), at_g(&up, offset), n));
    snprintf(what, sizeof what, "swiglu_backward %s n=%lld%s dgate", dt, (long long)n, un);
    report(what, pair_err_part(&dx, offset, 1, n, n), tol_of(t));
    snprintf(what, sizeof what, "swiglu_backward %s n=%lld%s dup", dt, (long long)n, un);
    report(what, pair_err_part(&dup, offset, 1, n, n), tol_of(t));
    pair *ps[] = {&x, &up, &out, &dout, &dx, &dx2, &dup};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
}

/* ---- rope -------------------------------------------------------------------------------------- */

/* inv_freq of Llama-3.1's rope (theta 500000, llama3 scaling factor 8 / low 1 / high 4 /
 * original 8192), or the default rope (theta 10000), computed by the model's own code */
static void rope_table(int64_t hd, int llama3, float *inv_freq, float *scale) {
    dp_model_config c;
    dp_model_config_default(&c, DP_ARCH_LLAMA);
    if (llama3) {
        c.rope_theta = 500000.0f;
        c.rope.type = DP_ROPE_LLAMA3;
        c.rope.factor = 8, c.rope.low_freq_factor = 1, c.rope.high_freq_factor = 4;
        c.rope.original_max_positions = 8192;
    }
    CHECK_OK(dp_rope_inv_freq(&c, hd, inv_freq, scale));
}

static void test_rope(dp_dtype t, int64_t B, int64_t T, int64_t H, int64_t hd, int llama3, float scale) {
    char what[200];
    const int64_t N = B * T, d = H * hd, ld = 3 * d; /* q and k inside a fused qkv row */
    float inv_freq[ROPE_MAX_PAIRS], unused;
    rope_table(hd, llama3, inv_freq, &unused);
    pair qkv;
    pair_rand(&qkv, t, N * ld, 0, 1);
    for (int inverse = 0; inverse < 2; inverse++) {
        for (int part = 0; part < 2; part++) {
            CHECK_OK(CPU_L->rope(cpu, t, at_c(&qkv, part * d), ld, N, T, H, hd, inv_freq, scale, inverse));
            CHECK_OK(GPU_L->rope(gpu, t, at_g(&qkv, part * d), ld, N, T, H, hd, inv_freq, scale, inverse));
        }
        snprintf(what, sizeof what, "rope%s%s %s B=%lld T=%lld H=%lld hd=%lld scale=%g (q, k in fused qkv)",
                 llama3 ? " llama3" : "", inverse ? " inverse" : "", dp_dtype_name(t), (long long)B, (long long)T,
                 (long long)H, (long long)hd, (double)scale);
        report(what, pair_err(&qkv), tol_of(t));
    }
    pair_free(&qkv);
}

/* ---- attention --------------------------------------------------------------------------------- */

/* q, k and v side by side in rows of (H + 2 Hkv) hd (GPT-2's fused qkv when Hkv == H); Hkv < H
 * is grouped-query attention (the dk, dv of a kv head sum its group's query heads) */
static void test_attention(dp_dtype t, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd) {
    char what[200], shape[120];
    const int64_t N = B * T, d = H * hd, dkv = Hkv * hd, ld = d + 2 * dkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const double tol = t == DP_BF16 ? 2e-2 : 1e-5;
    snprintf(shape, sizeof shape, "%s B=%lld T=%lld H=%lld Hkv=%lld hd=%lld", dp_dtype_name(t), (long long)B,
             (long long)T, (long long)H, (long long)Hkv, (long long)hd);
    pair qkv, out, lse, dout, dqkv, delta;
    pair_rand(&qkv, t, N * ld, 0, 1);
    pair_nan(&out, t, N * d);
    pair_nan(&lse, DP_F32, B * H * T);
    CHECK_OK(CPU_L->attention_forward(cpu, t, out.c.data, lse.c.data, at_c(&qkv, 0), at_c(&qkv, d), at_c(&qkv, d + dkv),
                                      ld, ld, B, T, H, Hkv, hd, scale));
    CHECK_OK(GPU_L->attention_forward(gpu, t, out.g.data, lse.g.data, at_g(&qkv, 0), at_g(&qkv, d), at_g(&qkv, d + dkv),
                                      ld, ld, B, T, H, Hkv, hd, scale));
    snprintf(what, sizeof what, "attention_forward %s out", shape);
    report(what, pair_err(&out), tol);
    snprintf(what, sizeof what, "attention_forward %s lse", shape);
    report(what, pair_err(&lse), 1e-5); /* f32 sums of the same scores on both */
    /* backward from the CPU's forward on both devices */
    CHECK_OK(dp_tensor_copy(&out.g, &out.c));
    CHECK_OK(dp_tensor_copy(&lse.g, &lse.c));
    pair_rand(&dout, t, N * d, 0, 1);
    pair_nan(&dqkv, t, N * ld);
    pair_nan(&delta, DP_F32, B * H * T);
    CHECK_OK(CPU_L->attention_backward(cpu, t, at_c(&dqkv, 0), at_c(&dqkv, d), at_c(&dqkv, d + dkv), ld, ld,
                                       dout.c.data, out.c.data, lse.c.data, at_c(&qkv, 0), at_c(&qkv, d),
                                       at_c(&qkv, d + dkv), ld, ld, delta.c.data, B, T, H, Hkv, hd, scale));
    CHECK_OK(GPU_L->attention_backward(gpu, t, at_g(&dqkv, 0), at_g(&dqkv, d), at_g(&dqkv, d + dkv), ld, ld,
                                       dout.g.data, out.g.data, lse.g.data, at_g(&qkv, 0), at_g(&qkv, d),
                                       at_g(&qkv, d + dkv), ld, ld, delta.g.data, B, T, H, Hkv, hd, scale));
    const char *names[3] = {"dq", "dk", "dv"};
    const int64_t off[3] = {0, d, d + dkv}, width[3] = {d, dkv, dkv};
    /* With one key (T = 1) each softmax row is the constant 1: the exact dq and dk are 0, and both
     * devices return only the rounding left by dS = P (dO.v - dO.o) with o = v, which no relative
     * comparison of the two can judge. There both must be at rounding level against the scale
     * of the exact terms: scale * hd * max|dO| * max|q, k, v| per product (to 2e-5 in f32, one bf16
     * ulp, 2^-8, in bf16). */
    const double noise = t == DP_BF16 ? 4e-3 : 2e-5;
    double mag = 0;
    if (T == 1) {
        float *hq = host_f32(&qkv.c), *ho = host_f32(&dout.c);
        double mx = 0, mo = 0;
        for (int64_t i = 0; i < N * ld; i++) mx = fmax(mx, fabs(hq[i]));
        for (int64_t i = 0; i < N * d; i++) mo = fmax(mo, fabs(ho[i]));
        mag = scale * (double)hd * mo * mx * mx;
        free(hq);
        free(ho);
    }
    for (int part = 0; part < 3; part++) {
        if (T == 1 && part < 2) {
            snprintf(what, sizeof what, "attention_backward %s %s (exact 0: max |x| / scale)", shape, names[part]);
            report(what, fmax(pair_max_abs_part(&dqkv, 0, off[part], N, width[part], ld),
                              pair_max_abs_part(&dqkv, 1, off[part], N, width[part], ld)) / mag, noise);
            continue;
        }
        snprintf(what, sizeof what, "attention_backward %s %s", shape, names[part]);
        report(what, pair_err_part(&dqkv, off[part], N, width[part], ld), t == DP_BF16 ? 3e-2 : 2e-5);
    }
    snprintf(what, sizeof what, "attention_backward %s delta", shape);
    report(what, pair_err(&delta), 1e-5);
    pair *ps[] = {&qkv, &out, &lse, &dout, &dqkv, &delta};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
}

/* ---- cross-entropy ----------------------------------------------------------------------------- */

static void test_cross_entropy(dp_dtype t, int64_t B, int64_t T, int64_t V) {
    char what[160];
    const int64_t N = B * T;
    int32_t *tg = malloc((size_t)N * sizeof *tg);
    for (int64_t n = 0; n < N; n++) tg[n] = rand_below(V);
    tg[0] = 0;
    if (N > 1) tg[N - 1] = (int32_t)(V - 1); /* both ends of a row */
    for (int64_t n = 2; n < N - 1; n += 3) tg[n] = DP_IGNORE_INDEX; /* pads: loss 0, gradient row 0 */
    ipair targets;
    ipair_init(&targets, tg, N);
    pair logits, losses, lse, scale;
    pair_rand(&logits, t, N * V, 0, 3);
    pair_nan(&losses, DP_F32, N);
    pair_nan(&lse, DP_F32, N);
    pair_rand(&scale, DP_F32, B, 1, 0.5f);
    CHECK_OK(CPU_L->cross_entropy_forward(cpu, t, losses.c.data, lse.c.data, logits.c.data, targets.c.data, N, V));
    CHECK_OK(GPU_L->cross_entropy_forward(gpu, t, losses.g.data, lse.g.data, logits.g.data, targets.g.data, N, V));
    snprintf(what, sizeof what, "cross_entropy_forward %s N=%lld V=%lld losses", dp_dtype_name(t), (long long)N,
             (long long)V);
    report(what, pair_err(&losses), 1e-5);
    snprintf(what, sizeof what, "cross_entropy_forward %s N=%lld V=%lld lse", dp_dtype_name(t), (long long)N,
             (long long)V);
    report(what, pair_err(&lse), 1e-5);
    CHECK_OK(dp_tensor_copy(&lse.g, &lse.c));
    CHECK_OK(CPU_L->cross_entropy_backward(cpu, t, logits.c.data, lse.c.data, targets.c.data, scale.c.data, N, T, V));
    CHECK_OK(GPU_L->cross_entropy_backward(gpu, t, logits.g.data, lse.g.data, targets.g.data, scale.g.data, N, T, V));
    snprintf(what, sizeof what, "cross_entropy_backward %s B=%lld T=%lld V=%lld (in place)", dp_dtype_name(t),
             (long long)B, (long long)T, (long long)V);
    report(what, pair_err(&logits), tol_of(t));
    /* the pads on the GPU itself: exactly 0 loss and an all-zero gradient row */
    float *hl = malloc((size_t)N * sizeof *hl);
    uint32_t *hg = malloc((size_t)V * sizeof *hg); /* a row's raw f32 or bf16 bits */
    CHECK_OK(dp_tensor_to_host(&losses.g, hl, (uint64_t)N * sizeof *hl));
    for (int64_t n = 0; n < N; n++) {
        if (tg[n] != DP_IGNORE_INDEX) continue;
        CHECK(hl[n] == 0.0f);
        dp_tensor row;
        int64_t rs[1] = {V};
        CHECK_OK(dp_tensor_view(&row, &logits.g, n * V, 1, rs));
        CHECK_OK(dp_tensor_to_host(&row, hg, dp_tensor_bytes(&row)));
        int64_t nonzero = 0; /* +0 or -0 */
        for (int64_t j = 0; j < V; j++)
            nonzero += t == DP_BF16 ? (((const uint16_t *)hg)[j] & 0x7fffu) != 0 : (hg[j] & 0x7fffffffu) != 0;
        CHECK_EQ_U64(nonzero, 0);
    }
    free(hl);
    free(hg);
    pair *ps[] = {&logits, &losses, &lse, &scale};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
    ipair_free(&targets);
    free(tg);
}

/* ---- optimizers -------------------------------------------------------------------------------- */

/* pt: the parameters' dtype (bf16: a bf16 model without f32 masters) */
static void test_optim(dp_dtype pt, int64_t n, int offset) {
    char what[160];
    pair p, g, m, v;
    pair_rand(&p, pt, n + offset, 0, 1);
    pair_rand(&g, DP_F32, n + offset, 0, 0.1f);
    pair_rand(&m, DP_F32, n + offset, 0, 0.01f);
    pair_rand(&v, DP_F32, n + offset, 0.01f, 0.001f);
    /* v must be >= 0: square it through the update with beta2 = 0 would change semantics; use |v| */
    {
        float *h = host_f32(&v.c);
        for (int64_t i = 0; i < v.n; i++) h[i] = fabsf(h[i]);
        CHECK_OK(dp_tensor_from_host(&v.c, h, (uint64_t)v.n * 4));
        CHECK_OK(dp_tensor_from_host(&v.g, h, (uint64_t)v.n * 4));
        free(h);
    }
    for (int64_t step = 1; step <= 3; step++) {
        CHECK_OK(CPU_L->adamw_step(cpu, pt, at_c(&p, offset), at_c(&g, offset), at_c(&m, offset), at_c(&v, offset), n,
                                   1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step));
        CHECK_OK(GPU_L->adamw_step(gpu, pt, at_g(&p, offset), at_g(&g, offset), at_g(&m, offset), at_g(&v, offset), n,
                                   1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step));
    }
    snprintf(what, sizeof what, "adamw_step x3 n=%lld%s %s p (bit-identical)", (long long)n, offset ? " unaligned" : "",
             dp_dtype_name(pt));
    report(what, pair_err(&p), 0);
    snprintf(what, sizeof what, "adamw_step x3 n=%lld%s m, v", (long long)n, offset ? " unaligned" : "");
    report(what, fmax(pair_err(&m), pair_err(&v)), 0);
    for (int mom = 0; mom < 2; mom++) {
        for (int step = 0; step < 2; step++) {
            CHECK_OK(CPU_L->sgd_step(cpu, pt, at_c(&p, offset), at_c(&g, offset), mom ? at_c(&m, offset) : NULL, n,
                                     0.1f, 0.9f, step ? 0.01f : 0.0f, step == 0));
            CHECK_OK(GPU_L->sgd_step(gpu, pt, at_g(&p, offset), at_g(&g, offset), mom ? at_g(&m, offset) : NULL, n,
                                     0.1f, 0.9f, step ? 0.01f : 0.0f, step == 0));
        }
        snprintf(what, sizeof what, "sgd_step x2 n=%lld%s%s (bit-identical)", (long long)n, mom ? " momentum" : "",
                 offset ? " unaligned" : "");
        report(what, fmax(pair_err(&p), pair_err(&m)), 0);
    }
    pair *ps[] = {&p, &g, &m, &v};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) pair_free(ps[i]);
}

/* ---- benchmarks (DPPROF_BENCH=1) --------------------------------------------------------------- */

#define HBM_GBS 3350.0   /* H100 SXM HBM3, GB/s */
#define TC_TFLOPS 989.0  /* dense bf16 tensor cores */
#define SIMT_TFLOPS 67.0 /* f32 FMA */

typedef struct {
    const char *name;
    int64_t B, T, d, H, V;
} bench_cfg;

static dp_tensor bench_tensor(dp_dtype t, int64_t n, float mean, float std) {
    dp_tensor x;
    CHECK_OK(dp_tensor_init(&x, gpu, t, 1, &n, DP_CAT_TEMP));
    if (t == DP_I32)
        CHECK_OK(dp_tensor_fill(&x, 0));
    else
        CHECK_OK(dp_tensor_rand(&x, DP_RAND_NORMAL, mean, std, 7, next_stream++));
    return x;
}

/* Seconds per call of one op: the median over timed samples, each sample `per` calls launched
 * back to back and one synchronisation (per grows until a sample lasts >= 2 ms, so the host's
 * synchronisation latency does not count against short kernels). */
typedef int (*bench_fn)(void *ctx);
static double bench_time(bench_fn fn, void *ctx) {
    CHECK_OK(fn(ctx)); /* warm-up */
    CHECK_OK(dp_device_sync(gpu));
    int per = 1;
    double sample = 0;
    for (;;) {
        int64_t t0 = dp_clock_ns();
        for (int i = 0; i < per; i++) CHECK_OK(fn(ctx));
        CHECK_OK(dp_device_sync(gpu));
        sample = (double)(dp_clock_ns() - t0) * 1e-9;
        if (sample >= 2e-3 || per >= 1024 || check_failures) break;
        per *= 4;
    }
    int reps = sample > 0.2 ? 3 : sample > 0.02 ? 5 : 11;
    double ts[11];
    for (int r = 0; r < reps; r++) {
        int64_t t0 = dp_clock_ns();
        for (int i = 0; i < per; i++) CHECK_OK(fn(ctx));
        CHECK_OK(dp_device_sync(gpu));
        ts[r] = (double)(dp_clock_ns() - t0) * 1e-9 / per;
    }
    for (int i = 1; i < reps; i++) /* insertion sort */
        for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
            double x = ts[j];
            ts[j] = ts[j - 1];
            ts[j - 1] = x;
        }
    return ts[reps / 2];
}

static void bench_report_bytes(const char *op, const char *cfg, dp_dtype t, double s, double bytes) {
    double gbs = bytes / s * 1e-9;
    printf("  %-24s %-6s %-5s %9.3f ms %8.1f GB/s  %5.1f%% of HBM roofline\n", op, cfg, dp_dtype_name(t), s * 1e3, gbs,
           100.0 * gbs / HBM_GBS);
}

static void bench_report_flops(const char *op, const char *cfg, dp_dtype t, double s, double flops, double peak) {
    double tf = flops / s * 1e-12;
    printf("  %-24s %-6s %-5s %9.3f ms %8.1f TFLOP/s %5.1f%% of %s peak\n", op, cfg, dp_dtype_name(t), s * 1e3, tf,
           100.0 * tf / peak, peak == TC_TFLOPS ? "tensor" : "SIMT");
}

typedef struct {
    dp_dtype t;
    int64_t B, T, d, H, hd, V, N;
    dp_tensor x, y, z, w, b, dw, db, s1, s2, ones, ids, big, logits, qkv, dqkv, out, lse, delta;
} bench_ctx;

static int b_emb_fwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->embedding_forward(gpu, c->t, DP_F32, c->x.data, c->ids.data, c->big.data, c->w.data, c->N, c->T,
                                    c->d);
}
static int b_emb_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->embedding_backward(gpu, c->t, c->x.data, c->ids.data, c->big.data, c->w.data, c->N, c->T, c->d, c->V);
}
static int b_ln_fwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->layernorm_forward(gpu, c->t, c->y.data, c->s1.data, c->s2.data, c->x.data, c->w.data, c->b.data, c->N,
                                    c->d, 1e-5f);
}
static int b_ln_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->layernorm_backward(gpu, c->t, c->z.data, c->dw.data, c->db.data, c->y.data, c->x.data, c->w.data,
                                     c->s1.data, c->s2.data, c->N, c->d, 1);
}
static int b_rms_fwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->rmsnorm_forward(gpu, c->t, c->y.data, c->s2.data, c->x.data, c->w.data, c->N, c->d, 1e-5f);
}
static int b_rms_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->rmsnorm_backward(gpu, c->t, c->z.data, c->dw.data, c->y.data, c->x.data, c->w.data, c->s2.data, c->N,
                                   c->d, 1);
}
static int b_bias_add(void *p) {
    bench_ctx *c = p;
    return GPU_L->bias_add(gpu, c->t, c->qkv.data, c->b.data, c->N, 3 * c->d);
}
static int b_bias_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->bias_backward(gpu, c->t, c->db.data, c->qkv.data, c->N, 3 * c->d);
}
static int b_gelu_fwd(void *p) { /* on the 4d MLP activation: qkv buffer holds >= 3 N d, big holds 4 N d */
    bench_ctx *c = p;
    return GPU_L->gelu_forward(gpu, c->t, c->dqkv.data, c->qkv.data, c->N * 3 * c->d);
}
static int b_gelu_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->gelu_backward(gpu, c->t, c->dqkv.data, c->dqkv.data, c->qkv.data, c->N * 3 * c->d, 0);
}
static int b_swiglu_fwd(void *p) {
    bench_ctx *c = p;
    int64_t n = c->N * c->d;
    return GPU_L->swiglu_forward(gpu, c->t, c->y.data, c->x.data, c->z.data, n);
}
static int b_swiglu_bwd(void *p) {
    bench_ctx *c = p;
    int64_t n = c->N * c->d;
    return GPU_L->swiglu_backward(gpu, c->t, c->out.data, c->dqkv.data, c->y.data, c->x.data, c->z.data, n);
}
static int b_rope(void *p) {
    bench_ctx *c = p;
    float inv_freq[ROPE_MAX_PAIRS], scale;
    rope_table(c->hd, 0, inv_freq, &scale);
    int rc = GPU_L->rope(gpu, c->t, c->qkv.data, 3 * c->d, c->N, c->T, c->H, c->hd, inv_freq, scale, 0);
    if (rc) return rc;
    return GPU_L->rope(gpu, c->t, (char *)c->qkv.data + c->d * dp_dtype_size(c->t), 3 * c->d, c->N, c->T, c->H, c->hd,
                       inv_freq, scale, 0);
}
static int b_att_fwd(void *p) {
    bench_ctx *c = p;
    size_t es = dp_dtype_size(c->t);
    char *q = c->qkv.data;
    return GPU_L->attention_forward(gpu, c->t, c->out.data, c->lse.data, q, q + c->d * es, q + 2 * c->d * es, 3 * c->d,
                                    3 * c->d, c->B, c->T, c->H, c->H, c->hd, 1.0f / sqrtf((float)c->hd));
}
static int b_att_bwd(void *p) {
    bench_ctx *c = p;
    size_t es = dp_dtype_size(c->t);
    char *q = c->qkv.data, *dq = c->dqkv.data;
    return GPU_L->attention_backward(gpu, c->t, dq, dq + c->d * es, dq + 2 * c->d * es, 3 * c->d, 3 * c->d, c->y.data,
                                     c->out.data, c->lse.data, q, q + c->d * es, q + 2 * c->d * es, 3 * c->d, 3 * c->d,
                                     c->delta.data, c->B, c->T, c->H, c->H, c->hd, 1.0f / sqrtf((float)c->hd));
}
static int b_ce_fwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->cross_entropy_forward(gpu, c->t, c->s1.data, c->s2.data, c->logits.data, c->ids.data, c->N, c->V);
}
static int b_ce_bwd(void *p) {
    bench_ctx *c = p;
    return GPU_L->cross_entropy_backward(gpu, c->t, c->logits.data, c->s2.data, c->ids.data, c->ones.data, c->N, c->T,
                                         c->V);
}
static int b_adamw(void *p) { /* over V x d parameters (the embedding) */
    bench_ctx *c = p;
    int64_t n = c->V * c->d;
    float *base = c->big.data;
    return GPU_L->adamw_step(gpu, DP_F32, base, base + n, base + 2 * n, base + 3 * n, n, 1e-4f, 0.9f, 0.999f, 1e-8f,
                             0.01f, 3);
}
static int b_sgd(void *p) {
    bench_ctx *c = p;
    int64_t n = c->V * c->d;
    float *base = c->big.data;
    return GPU_L->sgd_step(gpu, DP_F32, base, base + n, base + 2 * n, n, 1e-4f, 0.9f, 0.0f, 0);
}

static void bench_config(const bench_cfg *cfg, dp_dtype t) {
    bench_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.B = cfg->B, c.T = cfg->T, c.d = cfg->d, c.H = cfg->H, c.hd = cfg->d / cfg->H, c.V = cfg->V;
    c.N = c.B * c.T;
    const double es = (double)dp_dtype_size(t), N = (double)c.N, d = (double)c.d, V = (double)c.V, T = (double)c.T;
    const int64_t nbig = c.V * c.d * 4; /* an embedding's parameter, gradient and two f32 optimizer states */
    c.x = bench_tensor(t, c.N * c.d, 0, 1);
    c.y = bench_tensor(t, c.N * c.d, 0, 1);
    c.z = bench_tensor(t, c.N * c.d, 0, 1);
    c.out = bench_tensor(t, c.N * c.d, 0, 1);
    c.w = bench_tensor(DP_F32, c.T * c.d > 3 * c.d ? c.T * c.d : 3 * c.d, 1, 0.1f);
    c.b = bench_tensor(DP_F32, 3 * c.d, 0, 0.1f);
    c.dw = bench_tensor(DP_F32, 3 * c.d, 0, 0.1f);
    c.db = bench_tensor(DP_F32, 3 * c.d, 0, 0.1f);
    c.ones = bench_tensor(DP_F32, c.B, 1, 0);
    c.logits = bench_tensor(t, c.N * c.V, 0, 2);
    c.s1 = bench_tensor(DP_F32, c.N, 1, 0.1f);
    c.s2 = bench_tensor(DP_F32, c.N, 1, 0.1f);
    c.ids = bench_tensor(DP_I32, c.N, 0, 0);
    c.qkv = bench_tensor(t, c.N * 3 * c.d, 0, 1);
    c.dqkv = bench_tensor(t, c.N * 3 * c.d, 0, 1);
    c.lse = bench_tensor(DP_F32, c.B * c.H * c.T, 0, 1);
    c.delta = bench_tensor(DP_F32, c.B * c.H * c.T, 0, 1);
    {
        dp_tensor tmp = bench_tensor(DP_F32, nbig, 0, 0.01f);
        c.big = tmp;
    }
    /* ids in [0, V): a spread of token ids (consecutive, so each id has a few rows) */
    {
        int32_t *h = malloc((size_t)c.N * 4);
        for (int64_t n = 0; n < c.N; n++) h[n] = (int32_t)((n * 7919) % c.V);
        CHECK_OK(dp_tensor_from_host(&c.ids, h, (uint64_t)c.N * 4));
        free(h);
    }
    if (check_failures) return;
    const char *cn = cfg->name;
    /* byte counts: the fewest bytes each op must move (inputs read once, outputs written once) */
    bench_report_bytes("embedding_forward", cn, t, bench_time(b_emb_fwd, &c), N * d * (4 + es) + T * d * 4);
    bench_report_bytes("embedding_backward", cn, t, bench_time(b_emb_bwd, &c), N * d * (es + 8) + T * d * 8);
    bench_report_bytes("layernorm_forward", cn, t, bench_time(b_ln_fwd, &c), 2 * N * d * es + 8 * N);
    bench_report_bytes("layernorm_backward acc", cn, t, bench_time(b_ln_bwd, &c), 4 * N * d * es + 8 * N + 16 * d);
    bench_report_bytes("rmsnorm_forward", cn, t, bench_time(b_rms_fwd, &c), 2 * N * d * es + 4 * N);
    bench_report_bytes("rmsnorm_backward acc", cn, t, bench_time(b_rms_bwd, &c), 4 * N * d * es + 4 * N + 8 * d);
    bench_report_bytes("bias_add (N x 3d)", cn, t, bench_time(b_bias_add, &c), 2 * N * 3 * d * es);
    bench_report_bytes("bias_backward (N x 3d)", cn, t, bench_time(b_bias_bwd, &c), N * 3 * d * es);
    bench_report_bytes("gelu_forward (3 N d)", cn, t, bench_time(b_gelu_fwd, &c), 2 * 3 * N * d * es);
    bench_report_bytes("gelu_backward (3 N d)", cn, t, bench_time(b_gelu_bwd, &c), 3 * 3 * N * d * es);
    bench_report_bytes("swiglu_forward (N d)", cn, t, bench_time(b_swiglu_fwd, &c), 3 * N * d * es);
    bench_report_bytes("swiglu_backward (N d)", cn, t, bench_time(b_swiglu_bwd, &c), 5 * N * d * es);
    bench_report_bytes("rope (q and k)", cn, t, bench_time(b_rope, &c), 2 * 2 * N * d * es);
    /* attention flops over the causal triangle: forward 2 products of 2 hd flops per (row, key)
     * pair, backward 5 (FlashAttention-2's count; these kernels execute 7 for determinism) */
    const double pairs = (double)c.B * c.H * T * (T + 1) / 2, hd = (double)c.hd;
    const double peak = t == DP_BF16 ? TC_TFLOPS : SIMT_TFLOPS;
    bench_report_flops("attention_forward", cn, t, bench_time(b_att_fwd, &c), 4 * pairs * hd, peak);
    bench_report_flops("attention_backward", cn, t, bench_time(b_att_bwd, &c), 10 * pairs * hd, peak);
    bench_report_bytes("cross_entropy_forward", cn, t, bench_time(b_ce_fwd, &c), N * V * es);
    bench_report_bytes("cross_entropy_backward", cn, t, bench_time(b_ce_bwd, &c), 2 * N * V * es);
    if (t == DP_F32) {
        bench_report_bytes("adamw_step (V x d)", cn, t, bench_time(b_adamw, &c), 28 * V * d);
        bench_report_bytes("sgd_step momentum (V x d)", cn, t, bench_time(b_sgd, &c), 20 * V * d);
    }
    dp_tensor *ts[] = {&c.x,  &c.y,    &c.z,   &c.out, &c.w,    &c.b,   &c.dw,    &c.db,  &c.s1,
                       &c.s2, &c.ones, &c.ids, &c.qkv, &c.dqkv, &c.lse, &c.delta, &c.big, &c.logits};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) dp_tensor_release(ts[i]);
}

/* DPPROF_BENCH=1 runs everything; a value naming a config ("gpt2", "large") and/or a dtype
 * ("bf16", "f32"), e.g. "large,bf16", runs only those. */
static void bench(const char *sel) {
    static const bench_cfg cfgs[2] = {{"gpt2", 8, 1024, 768, 12, 50257}, {"large", 1, 16384, 2048, 16, 32000}};
    const int any_cfg = !strstr(sel, "gpt2") && !strstr(sel, "large");
    const int any_t = !strstr(sel, "bf16") && !strstr(sel, "f32");
    printf("benchmarks (median of timed runs after a warm-up; roofline: %.0f GB/s, %.0f / %.0f TFLOP/s):\n", HBM_GBS,
           TC_TFLOPS, SIMT_TFLOPS);
    for (int c = 0; c < 2; c++)
        for (int t = 1; t >= 0; t--)
            if ((any_cfg || strstr(sel, cfgs[c].name)) && (any_t || strstr(sel, dp_dtype_name((dp_dtype)t))))
                bench_config(&cfgs[c], (dp_dtype)t);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    if (!test_cuda_or_skip()) return 77;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK_OK(dp_device_get(DP_DEV_CUDA, &gpu));
    if (!cpu->ops->layers || !gpu->ops->layers) {
        printf("FAIL: a layer table is missing (cpu %p, cuda %p)\n", (const void *)cpu->ops->layers,
               (const void *)gpu->ops->layers);
        return 1;
    }
    printf("device: %s\n", gpu->info.name);
    const char *only = getenv("DPPROF_TEST_ONLY"); /* e.g. "attention" to run one family */
#define RUN(family) (!only || strstr(#family, only))
    for (int ti = 0; ti < 2; ti++) {
        const dp_dtype t = ti ? DP_BF16 : DP_F32;
        if (RUN(embedding)) {
            test_embedding(t, DP_F32, 2, 300, 772, 13, 1, 1);
            test_embedding(t, DP_BF16, 2, 300, 772, 13, 1, 0); /* bf16 tables */ /* many rows per id */
            test_embedding(t, DP_F32, 1, 7, 50, 50257, 1, 1);                    /* d not a multiple of 4 */
            test_embedding(t, DP_F32, 3, 7, 48, 5, 0, 1);                        /* no position embedding */
            test_embedding(t, DP_F32, 3, 7, 48, 5, 1, 0);                        /* frozen token embedding */
        }
        if (RUN(norm)) {
            static const int64_t shapes[][2] = {{1, 48},    {7, 772},  {300, 48}, {300, 772},
                                                {37, 2048}, {5, 3000}, {9, 50},   {600, 256}};
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
                for (int rms = 0; rms < 2; rms++) test_norm(t, rms, shapes[s][0], shapes[s][1], (int)(s & 1), 1, 0);
            test_norm(t, 0, 33, 768, 1, 0, 0); /* frozen */
            test_norm(t, 0, 33, 768, 0, 1, 1); /* unaligned rows */
            test_norm(t, 1, 33, 768, 1, 1, 1);
        }
        if (RUN(bias)) {
            test_bias(t, 300, 772);
            test_bias(t, 7, 50);
            test_bias(t, 1000, 2304);
        }
        if (RUN(activation)) {
            test_gelu_swiglu(t, 1000003, 0);
            test_gelu_swiglu(t, 7, 0);
            test_gelu_swiglu(t, 4099, 1);
        }
        if (RUN(rope)) {
            test_rope(t, 2, 300, 3, 64, 0, 1.0f);
            test_rope(t, 1, 7, 2, 16, 0, 1.0f);
            test_rope(t, 1, 33, 2, 128, 0, 1.0f);
            test_rope(t, 1, 9, 3, 10, 0, 1.0f);        /* hd % 4 == 2: one pair per access */
            test_rope(t, 1, 300, 2, 128, 1, 1.0f);     /* Llama-3.1's scaled frequencies */
            test_rope(t, 2, 77, 3, 64, 1, 1.2079442f); /* cos and sin scaled (yarn) */
            test_rope(t, 1, 5, 1, 512, 0, 1.0f);       /* the largest head on cuda */
        }
        if (RUN(attention)) {
            test_attention(t, 2, 300, 3, 3, 64);  /* T not a multiple of any tile */
            test_attention(t, 1, 600, 2, 2, 128); /* several tiles deep */
            test_attention(t, 2, 256, 2, 2, 64);  /* whole tiles */
            test_attention(t, 2, 1, 2, 2, 128);   /* T = 1: one key */
            test_attention(t, 1, 7, 2, 2, 16);    /* small head dim */
            test_attention(t, 1, 77, 3, 3, 48);   /* hd not a power of two */
            test_attention(t, 1, 130, 1, 1, 256); /* the largest head dim */
            test_attention(t, 2, 300, 4, 2, 64);  /* grouped-query: 2 query heads per kv head */
            test_attention(t, 1, 200, 8, 2, 128); /* groups of 4 (Llama-3-8B's 32 / 8) */
            test_attention(t, 2, 77, 3, 1, 48);   /* multi-query, SIMT */
            test_attention(t, 1, 130, 4, 1, 64);  /* multi-query, tensor cores in bf16 */
        }
        if (RUN(cross_entropy)) {
            test_cross_entropy(t, 7, 1, 50257);
            test_cross_entropy(t, 3, 11, 1000);
            test_cross_entropy(t, 2, 2, 31);
        }
        if (ti == 0 && RUN(optim)) {
            test_optim(DP_F32, 1000003, 0);
            test_optim(DP_BF16, 4099, 1); /* bf16 parameters (no f32 masters) */
            test_optim(DP_F32, 4099, 1);
        }
    }
    const char *b = getenv("DPPROF_BENCH");
    if (b && *b && strcmp(b, "0") != 0) bench(b);
    dp_engine_shutdown();
    return check_report("test_cuda_layers");
}
