/* test_layers_cpu.c: every entry of the CPU layer table (layer_ops.h) against references:
 * forwards against naive double implementations (attention against an explicit T x T softmax,
 * cross-entropy against log-softmax), backwards against central finite differences of a scalar
 * projection L = sum(R * out) (or exact adjoint identities for the linear ops), bf16 storage
 * against f32 on the same rounded inputs, and bit-identical results for 1 and 4 threads.
 *
 * Finite-difference tolerance. Inputs are O(1) and the step is h = 1e-2. Central differences
 * have truncation error h^2/6 |L'''| ~ 2e-5 for these smooth O(1) functions. L is summed in
 * double from f32 outputs each within a few ulps (~2e-7 relative), so its rounding noise is
 * ~1e-6 and contributes ~1e-6 / (2h) = 5e-5. |fd - analytic| <= 1e-3 + 1e-2 |analytic| leaves
 * a margin of 10x over both, while a wrong term in a gradient (a missing factor, a sign, a
 * dropped mean) is off by O(|analytic|) and fails. */
#include "check.h"
#include "cpu_layers.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "philox.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FD_H 1e-2
#define FD_ATOL 1e-3
#define FD_RTOL 1e-2

static dp_device *cpu;
static const dp_layer_ops *ops = &dp_cpu_layer_ops;
static uint64_t stream_counter = 100;

static float *randn(int64_t n, float std) {
    float *x = malloc((size_t)n * sizeof *x);
    uint64_t s = stream_counter++;
    for (int64_t i = 0; i < n; i++) x[i] = std * dp_philox_normal(7, s, (uint64_t)i);
    return x;
}

static float *zeros(int64_t n) { return calloc((size_t)n, sizeof(float)); }

static float *copy_of(const float *x, int64_t n) {
    float *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

static double dot_fd(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* A scalar function of the op's inputs: recomputes the forward and returns sum(R * out). */
typedef double (*loss_fn)(void *ctx);

/* Checks analytic[i] against central differences of loss in x[i] for i = 0, step, 2*step, ... */
static double fd_check(const char *what, float *x, int64_t n, int64_t step, loss_fn loss, void *ctx,
                       const float *analytic) {
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + (float)FD_H;
        double lp = loss(ctx);
        x[i] = keep - (float)FD_H;
        double lm = loss(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2 * FD_H), an = analytic[i];
        double err = fabs(fd - an), lim = FD_ATOL + FD_RTOL * fabs(an);
        if (err / lim > worst) worst = err / lim;
        if (err > lim && bad++ < 3)
            fprintf(stderr, "  %s[%lld]: analytic %.7g, finite difference %.7g\n", what, (long long)i, an, fd);
    }
    printf("  %-28s max |fd - analytic| / tolerance = %.3f\n", what, worst);
    CHECK(bad == 0);
    return worst;
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static void round_bf16(const float *x, uint16_t *h, float *back, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        h[i] = dp_f32_to_bf16(x[i]);
        back[i] = dp_bf16_to_f32(h[i]);
    }
}

/* ---- LayerNorm / RMSNorm ---------------------------------------------------------------- */

typedef struct {
    int rms;
    int64_t N, d;
    float *x, *w, *b, *R, *out, *mean, *rstd;
} norm_ctx;

static double norm_loss(void *p) {
    norm_ctx *c = p;
    if (c->rms)
        CHECK_OK(ops->rmsnorm_forward(cpu, DP_F32, c->out, c->rstd, c->x, c->w, c->N, c->d, 1e-5f));
    else
        CHECK_OK(ops->layernorm_forward(cpu, DP_F32, c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->d, 1e-5f));
    return dot_fd(c->R, c->out, c->N * c->d);
}

static void test_norm(int rms) {
    printf("%s\n", rms ? "rmsnorm" : "layernorm");
    const int64_t N = 6, d = 16;
    norm_ctx c = {rms,          N,        d,       randn(N * d, 1), randn(d, 0.5f), randn(d, 0.5f), randn(N * d, 1),
                  zeros(N * d), zeros(N), zeros(N)};
    for (int64_t j = 0; j < d; j++) c.w[j] += 1.0f;
    for (int64_t i = 0; i < N * d; i++) c.x[i] += 0.3f; /* a non-zero mean */
    norm_loss(&c);
    /* forward against double */
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, ms = 0;
        for (int64_t j = 0; j < d; j++) mu += c.x[n * d + j], ms += (double)c.x[n * d + j] * c.x[n * d + j];
        mu /= d;
        double var = 0;
        for (int64_t j = 0; j < d; j++) var += (c.x[n * d + j] - mu) * (c.x[n * d + j] - mu);
        double rs = rms ? 1 / sqrt(ms / d + 1e-5) : 1 / sqrt(var / d + 1e-5);
        for (int64_t j = 0; j < d; j++) {
            double ref = rms ? c.x[n * d + j] * rs * c.w[j] : (c.x[n * d + j] - mu) * rs * c.w[j] + c.b[j];
            CHECK_CLOSE(c.out[n * d + j], ref, 1e-5);
        }
        CHECK_CLOSE(c.rstd[n], rs, 1e-5);
        if (!rms) CHECK_CLOSE(c.mean[n], mu, 1e-6);
    }
    /* backward */
    float *dx = zeros(N * d), *dw = zeros(d), *db = zeros(d);
    if (rms)
        CHECK_OK(ops->rmsnorm_backward(cpu, DP_F32, dx, dw, c.R, c.x, c.w, c.rstd, N, d, 0));
    else
        CHECK_OK(ops->layernorm_backward(cpu, DP_F32, dx, dw, db, c.R, c.x, c.w, c.mean, c.rstd, N, d, 0));
    fd_check("dx", c.x, N * d, 1, norm_loss, &c, dx);
    fd_check("dw", c.w, d, 1, norm_loss, &c, dw);
    if (!rms) fd_check("db", c.b, d, 1, norm_loss, &c, db);
    /* accumulate = 1 adds to dx; parameter gradients always accumulate */
    float *dx2 = copy_of(dx, N * d);
    if (rms)
        CHECK_OK(ops->rmsnorm_backward(cpu, DP_F32, dx2, dw, c.R, c.x, c.w, c.rstd, N, d, 1));
    else
        CHECK_OK(ops->layernorm_backward(cpu, DP_F32, dx2, dw, NULL, c.R, c.x, c.w, c.mean, c.rstd, N, d, 1));
    float *dw1 = zeros(d);
    if (rms)
        CHECK_OK(ops->rmsnorm_backward(cpu, DP_F32, dx, dw1, c.R, c.x, c.w, c.rstd, N, d, 0));
    else
        CHECK_OK(ops->layernorm_backward(cpu, DP_F32, dx, dw1, NULL, c.R, c.x, c.w, c.mean, c.rstd, N, d, 0));
    for (int64_t i = 0; i < N * d; i++) CHECK_CLOSE(dx2[i], 2.0 * dx[i], 1e-6);
    for (int64_t j = 0; j < d; j++) CHECK_CLOSE(dw[j], 2.0 * dw1[j], 1e-6);
    /* bf16 storage: the same arithmetic on rounded inputs, rounded outputs */
    uint16_t *xh = malloc((size_t)(N * d) * 2), *oh = malloc((size_t)(N * d) * 2);
    round_bf16(c.x, xh, c.x, N * d);
    norm_loss(&c);
    float *mean2 = zeros(N), *rstd2 = zeros(N);
    if (rms)
        CHECK_OK(ops->rmsnorm_forward(cpu, DP_BF16, oh, rstd2, xh, c.w, N, d, 1e-5f));
    else
        CHECK_OK(ops->layernorm_forward(cpu, DP_BF16, oh, mean2, rstd2, xh, c.w, c.b, N, d, 1e-5f));
    for (int64_t i = 0; i < N * d; i++) CHECK(oh[i] == dp_f32_to_bf16(c.out[i]));
    free(xh), free(oh), free(mean2), free(rstd2), free(dx), free(dx2), free(dw), free(dw1), free(db);
    free(c.x), free(c.w), free(c.b), free(c.R), free(c.out), free(c.mean), free(c.rstd);
}

/* ---- GELU, SwiGLU, bias ------------------------------------------------------------------ */

typedef struct {
    int swiglu;
    int64_t n;
    float *x, *u, *R, *out;
} act_ctx;

static double act_loss(void *p) {
    act_ctx *c = p;
    if (c->swiglu)
        CHECK_OK(ops->swiglu_forward(cpu, DP_F32, c->out, c->x, c->u, c->n));
    else
        CHECK_OK(ops->gelu_forward(cpu, DP_F32, c->out, c->x, c->n));
    return dot_fd(c->R, c->out, c->n);
}

static void test_activations(void) {
    const int64_t n = 200;
    act_ctx c = {0, n, randn(n, 2), randn(n, 1), randn(n, 1), zeros(n)};
    printf("gelu\n");
    act_loss(&c);
    for (int64_t i = 0; i < n; i++) {
        double x = c.x[i];
        CHECK_CLOSE(c.out[i], 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))), 1e-6);
    }
    float *dx = zeros(n);
    CHECK_OK(ops->gelu_backward(cpu, DP_F32, dx, c.R, c.x, n, 0));
    fd_check("dx", c.x, n, 1, act_loss, &c, dx);
    /* in place (dx aliasing dout) and accumulate */
    float *g = copy_of(c.R, n);
    CHECK_OK(ops->gelu_backward(cpu, DP_F32, g, g, c.x, n, 0));
    for (int64_t i = 0; i < n; i++) CHECK(g[i] == dx[i]);
    CHECK_OK(ops->gelu_backward(cpu, DP_F32, g, c.R, c.x, n, 1));
    for (int64_t i = 0; i < n; i++) CHECK_CLOSE(g[i], 2.0 * dx[i], 1e-6);

    printf("swiglu\n");
    c.swiglu = 1;
    act_loss(&c);
    for (int64_t i = 0; i < n; i++) {
        double x = c.x[i];
        CHECK_CLOSE(c.out[i], x / (1 + exp(-x)) * c.u[i], 1e-6);
    }
    float *dup = zeros(n);
    CHECK_OK(ops->swiglu_backward(cpu, DP_F32, dx, dup, c.R, c.x, c.u, n));
    fd_check("dgate", c.x, n, 1, act_loss, &c, dx);
    fd_check("dup", c.u, n, 1, act_loss, &c, dup);
    memcpy(g, c.R, (size_t)n * sizeof *g);
    CHECK_OK(ops->swiglu_backward(cpu, DP_F32, g, dup, g, c.x, c.u, n));
    for (int64_t i = 0; i < n; i++) CHECK(g[i] == dx[i]);
    free(g), free(dup), free(dx), free(c.x), free(c.u), free(c.R), free(c.out);

    /* bias: out += b; db = column sums (exact adjoint), over more rows than one partial */
    printf("bias\n");
    const int64_t rows = 300, cols = 7;
    float *o = randn(rows * cols, 1), *o0 = copy_of(o, rows * cols), *b = randn(cols, 1), *db = randn(cols, 1);
    float *db0 = copy_of(db, cols);
    CHECK_OK(ops->bias_add(cpu, DP_F32, o, b, rows, cols));
    for (int64_t i = 0; i < rows * cols; i++) CHECK(o[i] == o0[i] + b[i % cols]);
    CHECK_OK(ops->bias_backward(cpu, DP_F32, db, o0, rows, cols));
    for (int64_t j = 0; j < cols; j++) {
        double s = db0[j];
        for (int64_t r = 0; r < rows; r++) s += o0[r * cols + j];
        CHECK_CLOSE(db[j], s, 1e-5);
    }
    free(o), free(o0), free(b), free(db), free(db0);
}

/* ---- embeddings ------------------------------------------------------------------------- */

static void test_embedding(void) {
    printf("embedding\n");
    const int64_t B = 3, T = 5, N = B * T, d = 70, V = 9; /* d spans two column slices */
    int32_t ids[15];
    for (int64_t n = 0; n < N; n++) ids[n] = (int32_t)((n * 7 + 3) % V);
    ids[4] = ids[9] = 2; /* repeated ids accumulate */
    float *wte = randn(V * d, 1), *wpe = randn(T * d, 1), *out = zeros(N * d);
    CHECK_OK(ops->embedding_forward(cpu, DP_F32, DP_F32, out, ids, wte, wpe, N, T, d));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < d; j++) CHECK(out[n * d + j] == wte[ids[n] * d + j] + wpe[(n % T) * d + j]);
    CHECK_OK(ops->embedding_forward(cpu, DP_F32, DP_F32, out, ids, wte, NULL, N, T, d));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < d; j++) CHECK(out[n * d + j] == wte[ids[n] * d + j]);
    /* backward: the adjoint of the gather, summed in row order */
    float *dout = randn(N * d, 1), *dwte = randn(V * d, 1), *dwpe = randn(T * d, 1);
    double *rte = malloc((size_t)(V * d) * sizeof *rte), *rpe = malloc((size_t)(T * d) * sizeof *rpe);
    for (int64_t i = 0; i < V * d; i++) rte[i] = dwte[i];
    for (int64_t i = 0; i < T * d; i++) rpe[i] = dwpe[i];
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < d; j++) rte[ids[n] * d + j] += dout[n * d + j], rpe[(n % T) * d + j] += dout[n * d + j];
    CHECK_OK(ops->embedding_backward(cpu, DP_F32, dout, ids, dwte, dwpe, N, T, d, V));
    for (int64_t i = 0; i < V * d; i++) CHECK_CLOSE(dwte[i], rte[i], 1e-6);
    for (int64_t i = 0; i < T * d; i++) CHECK_CLOSE(dwpe[i], rpe[i], 1e-6);
    CHECK_OK(ops->embedding_backward(cpu, DP_F32, dout, ids, NULL, NULL, N, T, d, V)); /* frozen */
    ids[3] = (int32_t)V;
    CHECK(ops->embedding_backward(cpu, DP_F32, dout, ids, dwte, NULL, N, T, d, V) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "outside [0, 9)") != NULL);
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(rte), free(rpe);
}

/* ---- rotary embedding ------------------------------------------------------------------- */

/* the rotation by the given inverse frequencies, cos and sin times scale (yarn's attention
 * factor; 1 for every other rope) */
static void test_rope(float scale) {
    printf("rope, cos and sin scaled by %g\n", (double)scale);
    const int64_t B = 2, T = 9, N = B * T, H = 3, hd = 8, ldx = 2 * H * hd; /* a strided view */
    const float inv_freq[4] = {1.0f, 0.3f, 0.07f, 0.0011f};
    float *x = randn(N * ldx, 1), *x0 = copy_of(x, N * ldx);
    CHECK_OK(ops->rope(cpu, DP_F32, x, ldx, N, T, H, hd, inv_freq, scale, 0));
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < hd / 2; j++) {
                double a = (double)(n % T) * inv_freq[j], c = scale * cos(a), s = scale * sin(a);
                int64_t i1 = n * ldx + h * hd + j, i2 = i1 + hd / 2;
                double r1 = x0[i1] * c - x0[i2] * s, r2 = x0[i2] * c + x0[i1] * s;
                worst = fmax(worst, fmax(fabs(x[i1] - r1), fabs(x[i2] - r2)));
            }
    printf("  forward max error %.3g\n", worst);
    CHECK(worst < 1e-5);            /* f32 angles up to 8 rad: a few ulps of the angle */
    for (int64_t n = 0; n < N; n++) /* the other half of each row is untouched */
        for (int64_t i = H * hd; i < ldx; i++) CHECK(x[n * ldx + i] == x0[n * ldx + i]);
    /* the inverse is the adjoint (a scaled rotation): <R, rope(x)> == <rope^-1(R), x> */
    float *R = randn(N * ldx, 1);
    double lhs = dot_fd(R, x, N * ldx) - 0, rhs;
    for (int64_t n = 0; n < N; n++) /* drop the untouched half from both sides */
        for (int64_t i = H * hd; i < ldx; i++) lhs -= (double)R[n * ldx + i] * x[n * ldx + i];
    CHECK_OK(ops->rope(cpu, DP_F32, R, ldx, N, T, H, hd, inv_freq, scale, 1));
    rhs = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < H * hd; i++) rhs += (double)R[n * ldx + i] * x0[n * ldx + i];
    CHECK_CLOSE(lhs, rhs, 1e-5);
    CHECK_OK(ops->rope(cpu, DP_F32, x, ldx, N, T, H, hd, inv_freq, scale, 1));
    for (int64_t n = 0; n < N; n++) /* scale^2 times x: rotated back, scaled twice */
        for (int64_t i = 0; i < ldx; i++)
            CHECK_CLOSE(x[n * ldx + i], i < H * hd ? scale * scale * x0[n * ldx + i] : x0[n * ldx + i], 1e-5);
    free(x), free(x0), free(R);
}

/* ---- attention -------------------------------------------------------------------------- */

/* q (N x H*hd, row stride ld_q), k and v (N x Hkv*hd, row stride ld_kv): GPT-2's fused qkv
 * (q, k, v inside one buffer, ld 3d) or grouped-query attention's separate tensors */
typedef struct {
    int64_t B, T, H, Hkv, hd, ld_q, ld_kv;
    float scale;
    float *q, *k, *v, *R, *out, *lse;
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    CHECK_OK(ops->attention_forward(cpu, DP_F32, c->out, c->lse, c->q, c->k, c->v, c->ld_q, c->ld_kv, c->B, c->T, c->H,
                                    c->Hkv, c->hd, c->scale));
    return dot_fd(c->R, c->out, c->B * c->T * c->H * c->hd);
}

/* out and lse from an explicit T x T softmax in double, the kv heads repeated as transformers'
 * repeat_kv does (query head h reads kv head h / (H / Hkv)) */
static void att_reference(const att_ctx *c, double *out, double *lse) {
    const int64_t d = c->H * c->hd, T = c->T, group = c->H / c->Hkv;
    double *s = malloc((size_t)T * sizeof *s);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = c->q + (b * T + i) * c->ld_q + h * c->hd;
                const int64_t kv = (h / group) * c->hd;
                double mx = -INFINITY, z = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *k = c->k + (b * T + j) * c->ld_kv + kv;
                    s[j] = 0;
                    for (int64_t e = 0; e < c->hd; e++) s[j] += (double)q[e] * k[e];
                    s[j] *= c->scale;
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= i; j++) z += exp(s[j] - mx);
                lse[(b * c->H + h) * T + i] = mx + log(z);
                for (int64_t e = 0; e < c->hd; e++) {
                    double o = 0;
                    for (int64_t j = 0; j <= i; j++) o += exp(s[j] - mx) / z * c->v[(b * T + j) * c->ld_kv + kv + e];
                    out[(b * T + i) * d + h * c->hd + e] = o;
                }
            }
    free(s);
}

/* max |out - reference| and max |lse - reference| */
static void att_errors(const att_ctx *c, double *eo, double *el) {
    const int64_t n = c->B * c->T * c->H * c->hd, nl = c->B * c->H * c->T;
    double *ro = malloc((size_t)n * sizeof *ro), *rl = malloc((size_t)nl * sizeof *rl);
    att_reference(c, ro, rl);
    *eo = *el = 0;
    for (int64_t i = 0; i < n; i++) *eo = fmax(*eo, fabs(c->out[i] - ro[i]));
    for (int64_t i = 0; i < nl; i++) *el = fmax(*el, fabs(c->lse[i] - rl[i]));
    free(ro), free(rl);
}

/* dq, dk, dv of sum(R * out) from explicit T x T matrices in double, the kv heads repeated
 * (g[0]: N x H*hd, g[1] and g[2]: N x Hkv*hd, contiguous), and the same sums over the absolute
 * values of their terms (a[0..2]): the scale of the rounding error an f32 evaluation may make */
static void att_backward_reference(const att_ctx *c, double *g[3], double *a[3]) {
    const int64_t d = c->H * c->hd, dkv = c->Hkv * c->hd, T = c->T, hd = c->hd, N = c->B * T, group = c->H / c->Hkv;
    for (int k = 0; k < 3; k++) {
        memset(g[k], 0, (size_t)(N * (k ? dkv : d)) * sizeof(double));
        memset(a[k], 0, (size_t)(N * (k ? dkv : d)) * sizeof(double));
    }
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
#define Q(row, e) ((double)c->q[(b * T + (row)) * c->ld_q + h * hd + (e)])
#define K(row, e) ((double)c->k[(b * T + (row)) * c->ld_kv + kv * hd + (e)])
#define V(row, e) ((double)c->v[(b * T + (row)) * c->ld_kv + kv * hd + (e)])
#define RO(row, e) ((double)c->R[(b * T + (row)) * d + h * hd + (e)])
#define GQ(x, row, e) x[0][(b * T + (row)) * d + h * hd + (e)]
#define GKV(x, k, row, e) x[k][(b * T + (row)) * dkv + kv * hd + (e)]
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < T; i++) {
                const int64_t kv = h / group;
                double mx = -INFINITY, z = 0, D = 0;
                for (int64_t j = 0; j <= i; j++) {
                    p[j] = 0;
                    for (int64_t e = 0; e < hd; e++) p[j] += Q(i, e) * K(j, e);
                    p[j] *= c->scale;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) z += exp(p[j] - mx);
                for (int64_t j = 0; j <= i; j++) {
                    p[j] = exp(p[j] - mx) / z;
                    dp[j] = 0;
                    for (int64_t e = 0; e < hd; e++) dp[j] += RO(i, e) * V(j, e);
                    D += p[j] * dp[j];
                }
                for (int64_t j = 0; j <= i; j++) {
                    double ds = c->scale * p[j] * (dp[j] - D), as = c->scale * p[j] * (fabs(dp[j]) + fabs(D));
                    for (int64_t e = 0; e < hd; e++) {
                        GQ(g, i, e) += ds * K(j, e), GQ(a, i, e) += as * fabs(K(j, e));
                        GKV(g, 1, j, e) += ds * Q(i, e), GKV(a, 1, j, e) += as * fabs(Q(i, e));
                        GKV(g, 2, j, e) += p[j] * RO(i, e), GKV(a, 2, j, e) += p[j] * fabs(RO(i, e));
                    }
                }
            }
#undef Q
#undef K
#undef V
#undef RO
#undef GQ
#undef GKV
    free(p), free(dp);
}

/* max over dq, dk, dv (row strides ld_dq, ld_dkv) of |g - ref| / (u (T + group hd) |terms|): 1 is
 * the classic bound on a sum of that many f32 roundings (u = 2^-24) of terms whose absolute values
 * sum to |terms| (a kv head's gradient sums the T rows of each of its group's heads) */
static double att_backward_error(const att_ctx *c, const float *dq, const float *dk, const float *dv, int64_t ld_dq,
                                 int64_t ld_dkv) {
    const int64_t d = c->H * c->hd, dkv = c->Hkv * c->hd, N = c->B * c->T;
    double *r[3], *a[3];
    for (int k = 0; k < 3; k++) {
        r[k] = malloc((size_t)(N * (k ? dkv : d)) * sizeof(double));
        a[k] = malloc((size_t)(N * (k ? dkv : d)) * sizeof(double));
    }
    att_backward_reference(c, r, a);
    const double u = ldexp(1.0, -24) * (double)(c->H / c->Hkv * c->T + c->hd);
    const float *got[3] = {dq, dk, dv};
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        const int64_t w = k ? dkv : d, ld = k ? ld_dkv : ld_dq;
        for (int64_t n = 0; n < N; n++)
            for (int64_t e = 0; e < w; e++) {
                double err = fabs(got[k][n * ld + e] - r[k][n * w + e]) / (u * a[k][n * w + e] + 1e-30);
                worst = fmax(worst, err);
            }
    }
    for (int k = 0; k < 3; k++) free(r[k]), free(a[k]);
    return worst;
}

static void test_attention(void) {
    printf("attention\n");
    /* T = 70: two query/key blocks of 64, the second partial; q, k, v strided inside one qkv */
    att_ctx c = {2, 70, 2, 2, 8, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    const int64_t d = c.H * c.hd, N = c.B * c.T, ld = 3 * d;
    c.ld_q = c.ld_kv = ld;
    c.scale = 1.0f / sqrtf((float)c.hd);
    float *qkv = randn(N * ld, 1.5f);
    c.q = qkv, c.k = qkv + d, c.v = qkv + 2 * d;
    c.R = randn(N * d, 1), c.out = zeros(N * d), c.lse = zeros(c.B * c.H * c.T);
    att_loss(&c);
    double eo, el;
    att_errors(&c, &eo, &el);
    printf("  forward vs explicit softmax: max |out err| %.3g, max |lse err| %.3g\n", eo, el);
    CHECK(eo < 1e-5 && el < 1e-5); /* f32 dot products of 8 terms and sums of <= 70 terms */
    /* backward: dq, dk, dv written into a strided gradient buffer like the model's */
    float *dqkv = zeros(N * ld), *delta = zeros(c.B * c.H * c.T);
    CHECK_OK(ops->attention_backward(cpu, DP_F32, dqkv, dqkv + d, dqkv + 2 * d, ld, ld, c.R, c.out, c.lse, c.q, c.k,
                                     c.v, ld, ld, delta, c.B, c.T, c.H, c.Hkv, c.hd, c.scale));
    /* every element against explicit T x T matrices in double, within the f32 rounding bound */
    double eb = att_backward_error(&c, dqkv, dqkv + d, dqkv + 2 * d, ld, ld);
    printf("  dq, dk, dv vs explicit T x T: max error / rounding bound %.3f\n", eb);
    CHECK(eb < 1.0);
    /* every 7th element of q, k and v (both blocks, both heads, both samples) */
    fd_check("dq, dk, dv (every 7th)", qkv, N * ld, 7, att_loss, &c, dqkv);
    free(dqkv), free(delta), free(qkv), free(c.R), free(c.out), free(c.lse);

    /* three blocks (T = 130), contiguous q, k, v: forward against the reference, bf16 storage
     * within rounding, and bit-identical results for 1 and 4 threads */
    att_ctx e = {1, 130, 3, 3, 16, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    const int64_t d2 = e.H * e.hd, N2 = e.B * e.T, nl = e.B * e.H * e.T, ld2 = 3 * d2;
    e.ld_q = e.ld_kv = ld2;
    e.scale = 0.25f;
    float *qkv2 = randn(N2 * ld2, 1);
    e.q = qkv2, e.k = qkv2 + d2, e.v = qkv2 + 2 * d2;
    e.R = randn(N2 * d2, 1), e.out = zeros(N2 * d2), e.lse = zeros(nl);
    set_threads(1);
    att_loss(&e);
    float *g1 = zeros(N2 * ld2), *dl = zeros(nl);
    CHECK_OK(ops->attention_backward(cpu, DP_F32, g1, g1 + d2, g1 + 2 * d2, ld2, ld2, e.R, e.out, e.lse, e.q, e.k, e.v,
                                     ld2, ld2, dl, e.B, e.T, e.H, e.Hkv, e.hd, e.scale));
    float *out1 = copy_of(e.out, N2 * d2);
    set_threads(4);
    att_loss(&e);
    float *g4 = zeros(N2 * ld2);
    CHECK_OK(ops->attention_backward(cpu, DP_F32, g4, g4 + d2, g4 + 2 * d2, ld2, ld2, e.R, e.out, e.lse, e.q, e.k, e.v,
                                     ld2, ld2, dl, e.B, e.T, e.H, e.Hkv, e.hd, e.scale));
    set_threads(2);
    CHECK(memcmp(out1, e.out, (size_t)(N2 * d2) * sizeof(float)) == 0);
    CHECK(memcmp(g1, g4, (size_t)(N2 * ld2) * sizeof(float)) == 0);
    att_errors(&e, &eo, &el);
    CHECK(eo < 1e-5);
    eb = att_backward_error(&e, g1, g1 + d2, g1 + 2 * d2, ld2, ld2);
    printf("  three blocks, 3 heads: backward error / rounding bound %.3f\n", eb);
    CHECK(eb < 1.0);
    /* bf16 storage: the f32 arithmetic on the rounded inputs, the output rounded once */
    uint16_t *qh = malloc((size_t)(N2 * ld2) * 2), *oh = malloc((size_t)(N2 * d2) * 2);
    round_bf16(qkv2, qh, qkv2, N2 * ld2);
    att_loss(&e);
    float *lh = zeros(nl);
    CHECK_OK(ops->attention_forward(cpu, DP_BF16, oh, lh, qh, qh + d2, qh + 2 * d2, ld2, ld2, e.B, e.T, e.H, e.Hkv,
                                    e.hd, e.scale));
    for (int64_t i = 0; i < N2 * d2; i++) CHECK(oh[i] == dp_f32_to_bf16(e.out[i])); /* one rounding */
    for (int64_t i = 0; i < nl; i++) CHECK(lh[i] == e.lse[i]);                      /* the same f32 arithmetic */
    free(qh), free(oh), free(lh), free(g1), free(g4), free(dl), free(out1);
    free(qkv2), free(e.R), free(e.out), free(e.lse);
}

/* Grouped-query attention (H query heads over Hkv key/value heads; Hkv = 1 is multi-query): q in
 * its own buffer with padded rows, k and v interleaved in another (ld_kv = 2 Hkv hd), as they
 * never are in the model (different strides catch a mixed-up one). Forward against the explicit
 * softmax with the kv heads repeated; the backward against finite differences (dk, dv sum the
 * group's heads); bit-identical for 1 and 3 threads. */
static void test_attention_gqa(int64_t H, int64_t Hkv) {
    printf("attention, %lld query heads over %lld key/value heads\n", (long long)H, (long long)Hkv);
    att_ctx c = {2, 70, H, Hkv, 8, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    const int64_t d = H * c.hd, dkv = Hkv * c.hd, N = c.B * c.T, nl = c.B * H * c.T;
    c.ld_q = d + 3, c.ld_kv = 2 * dkv;
    c.scale = 1.0f / sqrtf((float)c.hd);
    float *q = randn(N * c.ld_q, 1.5f), *kv = randn(N * c.ld_kv, 1.5f);
    c.q = q, c.k = kv, c.v = kv + dkv;
    c.R = randn(N * d, 1), c.out = zeros(N * d), c.lse = zeros(nl);
    att_loss(&c);
    double eo, el;
    att_errors(&c, &eo, &el);
    printf("  forward vs explicit softmax (kv repeated): max |out err| %.3g, max |lse err| %.3g\n", eo, el);
    CHECK(eo < 1e-5 && el < 1e-5);
    float *dq = zeros(N * c.ld_q), *dkvb = zeros(N * c.ld_kv), *delta = zeros(nl);
    set_threads(1);
    CHECK_OK(ops->attention_backward(cpu, DP_F32, dq, dkvb, dkvb + dkv, c.ld_q, c.ld_kv, c.R, c.out, c.lse, c.q, c.k,
                                     c.v, c.ld_q, c.ld_kv, delta, c.B, c.T, H, Hkv, c.hd, c.scale));
    float *dq3 = zeros(N * c.ld_q), *dkv3 = zeros(N * c.ld_kv);
    set_threads(3);
    CHECK_OK(ops->attention_backward(cpu, DP_F32, dq3, dkv3, dkv3 + dkv, c.ld_q, c.ld_kv, c.R, c.out, c.lse, c.q, c.k,
                                     c.v, c.ld_q, c.ld_kv, delta, c.B, c.T, H, Hkv, c.hd, c.scale));
    set_threads(2);
    CHECK(memcmp(dq, dq3, (size_t)(N * c.ld_q) * sizeof(float)) == 0);
    CHECK(memcmp(dkvb, dkv3, (size_t)(N * c.ld_kv) * sizeof(float)) == 0);
    for (int64_t n = 0; n < N; n++) /* the padding of q's rows is not written */
        for (int64_t i = d; i < c.ld_q; i++) CHECK(dq[n * c.ld_q + i] == 0.0f);
    double eb = att_backward_error(&c, dq, dkvb, dkvb + dkv, c.ld_q, c.ld_kv);
    printf("  dq, dk, dv vs explicit T x T (kv repeated): max error / rounding bound %.3f\n", eb);
    CHECK(eb < 1.0);
    fd_check("dq (every 5th)", q, N * c.ld_q, 5, att_loss, &c, dq);
    fd_check("dk, dv (every 5th)", kv, N * c.ld_kv, 5, att_loss, &c, dkvb);
    free(q), free(kv), free(dq), free(dkvb), free(dq3), free(dkv3), free(delta);
    free(c.R), free(c.out), free(c.lse);
}

/* ---- cross-entropy ---------------------------------------------------------------------- */

typedef struct {
    int64_t N, T, V;
    float *logits, *scale, *losses, *lse;
    int32_t *targets;
} ce_ctx;

/* sum_n scale[n / T] * loss_n: the function whose gradient the backward writes */
static double ce_loss(void *p) {
    ce_ctx *c = p;
    CHECK_OK(ops->cross_entropy_forward(cpu, DP_F32, c->losses, c->lse, c->logits, c->targets, c->N, c->V));
    double s = 0;
    for (int64_t n = 0; n < c->N; n++) s += (double)c->scale[n / c->T] * c->losses[n];
    return s;
}

static void test_cross_entropy(void) {
    printf("cross_entropy\n");
    int32_t targets[6] = {0, 10, 3, 3, 7, 1};
    ce_ctx c = {6, 3, 11, randn(66, 2), NULL, zeros(6), zeros(6), targets};
    float scale[2] = {0.7f, -1.3f};
    c.scale = scale;
    ce_loss(&c);
    for (int64_t n = 0; n < c.N; n++) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < c.V; j++) mx = fmax(mx, c.logits[n * c.V + j]);
        for (int64_t j = 0; j < c.V; j++) z += exp(c.logits[n * c.V + j] - mx);
        double lse = mx + log(z);
        CHECK_CLOSE(c.lse[n], lse, 1e-6);
        CHECK_CLOSE(c.losses[n], lse - c.logits[n * c.V + targets[n]], 1e-6);
    }
    float *g = copy_of(c.logits, c.N * c.V);
    CHECK_OK(ops->cross_entropy_backward(cpu, DP_F32, g, c.lse, targets, scale, c.N, c.T, c.V));
    fd_check("dlogits", c.logits, c.N * c.V, 1, ce_loss, &c, g);
    targets[2] = 11;
    CHECK(ops->cross_entropy_forward(cpu, DP_F32, c.losses, c.lse, c.logits, targets, c.N, c.V) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "target 11 at row 2") != NULL);
    targets[2] = 3;
    /* bf16 logits: lse and losses from the rounded values, the gradient rounded once */
    uint16_t *lh = malloc(66 * 2);
    round_bf16(c.logits, lh, c.logits, 66);
    ce_loss(&c);
    float lo[6], ls[6];
    CHECK_OK(ops->cross_entropy_forward(cpu, DP_BF16, lo, ls, lh, targets, c.N, c.V));
    for (int n = 0; n < 6; n++) CHECK(lo[n] == c.losses[n] && ls[n] == c.lse[n]);
    memcpy(g, c.logits, 66 * sizeof *g);
    CHECK_OK(ops->cross_entropy_backward(cpu, DP_F32, g, c.lse, targets, scale, c.N, c.T, c.V));
    CHECK_OK(ops->cross_entropy_backward(cpu, DP_BF16, lh, c.lse, targets, scale, c.N, c.T, c.V));
    for (int i = 0; i < 66; i++) CHECK(lh[i] == dp_f32_to_bf16(g[i]));
    free(lh), free(g), free(c.logits), free(c.losses), free(c.lse);
}

/* ---- determinism of the column reductions ----------------------------------------------- */

static void test_thread_independence(void) {
    printf("thread independence of reductions\n");
    const int64_t N = 1000, d = 33; /* 8 partials of 128 rows */
    float *x = randn(N * d, 1), *g = randn(N * d, 1), *w = randn(d, 1), *b = randn(d, 1);
    float *out = zeros(N * d), *mean = zeros(N), *rstd = zeros(N);
    CHECK_OK(ops->layernorm_forward(cpu, DP_F32, out, mean, rstd, x, w, b, N, d, 1e-5f));
    float *dx[2], *dw[2], *db[2], *bb[2];
    for (int r = 0; r < 2; r++) {
        set_threads(r ? 4 : 1);
        dx[r] = zeros(N * d), dw[r] = zeros(d), db[r] = zeros(d), bb[r] = zeros(d);
        CHECK_OK(ops->layernorm_backward(cpu, DP_F32, dx[r], dw[r], db[r], g, x, w, mean, rstd, N, d, 0));
        CHECK_OK(ops->bias_backward(cpu, DP_F32, bb[r], g, N, d));
    }
    set_threads(2);
    CHECK(memcmp(dx[0], dx[1], (size_t)(N * d) * 4) == 0);
    CHECK(memcmp(dw[0], dw[1], (size_t)d * 4) == 0);
    CHECK(memcmp(db[0], db[1], (size_t)d * 4) == 0);
    CHECK(memcmp(bb[0], bb[1], (size_t)d * 4) == 0);
    for (int64_t j = 0; j < d; j++) CHECK(bb[0][j] == db[0][j]); /* the same fixed partition */
    for (int r = 0; r < 2; r++) free(dx[r]), free(dw[r]), free(db[r]), free(bb[r]);
    free(x), free(g), free(w), free(b), free(out), free(mean), free(rstd);
}

/* ---- optimizers against PyTorch's update rules in double -------------------------------- */

static void test_optimizers(void) {
    printf("adamw, sgd\n");
    const int64_t n = 50;
    float *p = randn(n, 1), *m = zeros(n), *v = zeros(n), *buf = zeros(n);
    double rp[50], rm[50] = {0}, rv[50] = {0};
    for (int64_t i = 0; i < n; i++) rp[i] = p[i];
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    for (int step = 1; step <= 3; step++) {
        float *g = randn(n, 1);
        CHECK_OK(
            ops->adamw_step(cpu, DP_F32, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step));
        for (int64_t i = 0; i < n; i++) {
            rp[i] *= 1 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - b2) * (double)g[i] * g[i];
            rp[i] -= lr * (rm[i] / (1 - pow(b1, step))) / (sqrt(rv[i] / (1 - pow(b2, step))) + eps);
        }
        free(g);
    }
    for (int64_t i = 0; i < n; i++) CHECK_CLOSE(p[i], rp[i], 1e-5);
    CHECK(ops->adamw_step(cpu, DP_F32, p, p, m, v, n, 0.1f, 0.9f, 0.99f, 1e-8f, 0, 0) == DP_EINVAL);
    for (int64_t i = 0; i < n; i++) rp[i] = p[i];
    double rb[50];
    for (int step = 1; step <= 3; step++) {
        float *g = randn(n, 1);
        CHECK_OK(ops->sgd_step(cpu, DP_F32, p, g, buf, n, 0.1f, 0.9f, 0.01f, step == 1));
        for (int64_t i = 0; i < n; i++) {
            double dd = g[i] + 0.01 * rp[i];
            rb[i] = step == 1 ? dd : 0.9 * rb[i] + dd;
            rp[i] -= 0.1 * rb[i];
        }
        free(g);
    }
    for (int64_t i = 0; i < n; i++) CHECK_CLOSE(p[i], rp[i], 1e-5);
    float *g = randn(n, 1);
    for (int64_t i = 0; i < n; i++) rp[i] = p[i] - 0.5 * g[i];
    CHECK_OK(ops->sgd_step(cpu, DP_F32, p, g, NULL, n, 0.5f, 0, 0, 0));
    for (int64_t i = 0; i < n; i++) CHECK_CLOSE(p[i], rp[i], 1e-6);
    /* bf16 parameters (no f32 master): the f32 step on the widened value, rounded once */
    uint16_t ph[50];
    float pf[50], mf[50] = {0}, vf[50] = {0}, m2[50] = {0}, v2[50] = {0};
    round_bf16(p, ph, pf, n);
    CHECK_OK(ops->adamw_step(cpu, DP_BF16, ph, g, m2, v2, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1));
    CHECK_OK(ops->adamw_step(cpu, DP_F32, pf, g, mf, vf, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1));
    for (int64_t i = 0; i < n; i++) CHECK(ph[i] == dp_f32_to_bf16(pf[i]) && m2[i] == mf[i] && v2[i] == vf[i]);
    round_bf16(pf, ph, pf, n);
    CHECK_OK(ops->sgd_step(cpu, DP_BF16, ph, g, NULL, n, 0.5f, 0, 0.01f, 0));
    CHECK_OK(ops->sgd_step(cpu, DP_F32, pf, g, NULL, n, 0.5f, 0, 0.01f, 0));
    for (int64_t i = 0; i < n; i++) CHECK(ph[i] == dp_f32_to_bf16(pf[i]));
    free(g), free(p), free(m), free(v), free(buf);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    CHECK(cpu->ops->layers == &dp_cpu_layer_ops);
    set_threads(2);
    test_norm(0);
    test_norm(1);
    test_activations();
    test_embedding();
    test_rope(1.0f);
    test_rope(1.2079442f); /* yarn's attention factor at factor 8: 0.1 ln 8 + 1 */
    test_attention();
    test_attention_gqa(4, 2);
    test_attention_gqa(3, 1);
    test_cross_entropy();
    test_thread_independence();
    test_optimizers();
    dp_engine_shutdown();
    return check_report("test_layers_cpu");
}
