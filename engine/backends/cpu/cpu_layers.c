/* cpu_layers.c: the transformer layer ops on the CPU (layer_ops.h), the specification the CUDA
 * kernels are compared against.
 *
 * Arithmetic is f32 (bf16 values widened on load, rounded to nearest even on store); sums over a
 * row (LayerNorm statistics, the softmax denominator of the cross-entropy) are taken in double,
 * which makes this the more accurate side of any CPU/GPU comparison. Parallel loops split the
 * work into fixed pieces (rows, column slices, fixed row chunks) whose results
 * never depend on which thread ran them: column reductions (weight and bias gradients) keep one
 * partial per fixed chunk of PART_ROWS rows and add the partials in chunk order, so every result
 * is bit-identical for any OMP_NUM_THREADS. */
#include "cpu_layers.h"

#include "cpu_attention.h"
#include "cpu_util.h"
#include "cpu_vmath.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN 16384 /* elements below which a loop runs on one thread */
#define PART_ROWS 128 /* rows per partial of a column reduction */
#define COL_SLICE 64  /* columns per task of the embedding's scatter-add */
#define LANES 16      /* independent partial maxima and sums per row: a fixed order that vectorises */
#define INLINE static inline __attribute__((always_inline))

static int64_t n_parts(int64_t rows) { return (rows + PART_ROWS - 1) / PART_ROWS; }

/* dst[j] += sum over parts c (in order) of part[c*cols + j]. */
static void add_parts(float *dst, const double *part, int64_t parts, int64_t cols) {
#pragma omp parallel for schedule(static) if (parts * cols > PAR_MIN)
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t c = 0; c < parts; c++) s += part[c * cols + j];
        dst[j] = (float)((double)dst[j] + s);
    }
}

/* ---- embeddings ------------------------------------------------------------------------- */

static int cpu_embedding_forward(dp_device *dev, dp_dtype t, dp_dtype wt, void *out, const int32_t *ids,
                                 const void *wte, const void *wpe, int64_t N, int64_t T, int64_t d) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "embedding_forward"));
    DP_TRY(dp_cpu_need_float(wt, "embedding_forward"));
#pragma omp parallel for schedule(static) if (N * d > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const int64_t e = (int64_t)ids[n] * d, p = (n % T) * d;
        for (int64_t j = 0; j < d; j++) {
            const float v = dp_cpu_ld(wt, wte, e + j);
            dp_cpu_st(t, out, n * d + j, wpe ? v + dp_cpu_ld(wt, wpe, p + j) : v);
        }
    }
    return DP_OK;
}

static int cpu_embedding_backward(dp_device *dev, dp_dtype t, const void *dout, const int32_t *ids, float *dwte,
                                  float *dwpe, int64_t N, int64_t T, int64_t d, int64_t V) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "embedding_backward"));
    for (int64_t n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            return dp_error_set(DP_EINVAL, "embedding_backward: token id %d at row %lld is outside [0, %lld)",
                                (int)ids[n], (long long)n, (long long)V);
    if (dwte) {
        /* each task owns a slice of columns and visits the rows in increasing order */
        int64_t slices = (d + COL_SLICE - 1) / COL_SLICE;
#pragma omp parallel for schedule(static) if (N * d > PAR_MIN)
        for (int64_t s = 0; s < slices; s++) {
            int64_t j0 = s * COL_SLICE, j1 = j0 + COL_SLICE < d ? j0 + COL_SLICE : d;
            for (int64_t n = 0; n < N; n++) {
                float *row = dwte + (int64_t)ids[n] * d;
                for (int64_t j = j0; j < j1; j++) row[j] += dp_cpu_ld(t, dout, n * d + j);
            }
        }
    }
    if (dwpe) {
        int64_t B = N / T;
#pragma omp parallel for schedule(static) if (N * d > PAR_MIN)
        for (int64_t tt = 0; tt < T; tt++)
            for (int64_t j = 0; j < d; j++) {
                float s = 0;
                for (int64_t b = 0; b < B; b++) s += dp_cpu_ld(t, dout, (b * T + tt) * d + j);
                dwpe[tt * d + j] += s;
            }
    }
    return DP_OK;
}

/* ---- LayerNorm and RMSNorm -------------------------------------------------------------- *
 * A row's sums run in LANES double partial sums added in a fixed order (vectorised); the f32 rows
 * are compiled per instruction set (the same bits on each). */

/* sum over j < d of (x[o + j] - centre), or of its squares, in double */
INLINE double row_sum(dp_dtype t, const void *x, int64_t o, int64_t d, int squares, float centre) {
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int l = 0; l < LANES; l++) {
            double v = (double)dp_cpu_ld(t, x, o + j + l) - centre;
            acc[l] += squares ? v * v : v;
        }
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; j < d; j++) {
        double v = (double)dp_cpu_ld(t, x, o + j) - centre;
        s += squares ? v * v : v;
    }
    return s;
}

/* rows [n0, n1) of LayerNorm (b != NULL: mean saved) or RMSNorm (b == NULL) */
INLINE void norm_forward_rows(dp_dtype t, void *out, float *mean, float *rstd, const void *x, const float *w,
                              const float *b, int64_t n0, int64_t n1, int64_t d, float eps) {
    for (int64_t n = n0; n < n1; n++) {
        const int64_t o = n * d;
        const float mu = b ? (float)(row_sum(t, x, o, d, 0, 0.0f) / (double)d) : 0.0f;
        const float rs = (float)(1.0 / sqrt(row_sum(t, x, o, d, 1, mu) / (double)d + (double)eps));
        if (b) {
            for (int64_t j = 0; j < d; j++) dp_cpu_st(t, out, o + j, (dp_cpu_ld(t, x, o + j) - mu) * rs * w[j] + b[j]);
            mean[n] = mu;
        } else {
            for (int64_t j = 0; j < d; j++) dp_cpu_st(t, out, o + j, dp_cpu_ld(t, x, o + j) * rs * w[j]);
        }
        rstd[n] = rs;
    }
}

DP_CPU_CLONES static void norm_forward_rows_f32(void *out, float *mean, float *rstd, const void *x, const float *w,
                                                const float *b, int64_t n0, int64_t n1, int64_t d, float eps) {
    norm_forward_rows(DP_F32, out, mean, rstd, x, w, b, n0, n1, d, eps);
}

static int norm_forward(dp_dtype t, void *out, float *mean, float *rstd, const void *x, const float *w, const float *b,
                        int64_t N, int64_t d, float eps) {
    const int64_t rows = PART_ROWS / 4, chunks = (N + rows - 1) / rows;
#pragma omp parallel for schedule(static) if (N * d > PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t n0 = c * rows, n1 = n0 + rows < N ? n0 + rows : N;
        if (t == DP_F32)
            norm_forward_rows_f32(out, mean, rstd, x, w, b, n0, n1, d, eps);
        else
            norm_forward_rows(t, out, mean, rstd, x, w, b, n0, n1, d, eps);
    }
    return DP_OK;
}

static int cpu_layernorm_forward(dp_device *dev, dp_dtype t, void *out, float *mean, float *rstd, const void *x,
                                 const float *w, const float *b, int64_t N, int64_t d, float eps) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "layernorm_forward"));
    return norm_forward(t, out, mean, rstd, x, w, b, N, d, eps);
}

/* The rows of partial chunk c: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * w; for
 * RMSNorm (mean == NULL) the mean(g) term is absent and xhat = x rstd. pw, pb: the chunk's
 * partials of dw and db (either may be NULL). */
INLINE void norm_backward_rows(dp_dtype t, void *dx, double *pw, double *pb, const void *dout, const void *x,
                               const float *w, const float *mean, const float *rstd, int64_t n0, int64_t n1, int64_t d,
                               int accumulate) {
    for (int64_t n = n0; n < n1; n++) {
        const int64_t o = n * d;
        const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
        double ag[LANES] = {0}, agx[LANES] = {0}, sg = 0, sgx = 0;
        int64_t j = 0;
        for (; j + LANES <= d; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float xh = (dp_cpu_ld(t, x, o + j + l) - mu) * rs, g = dp_cpu_ld(t, dout, o + j + l) * w[j + l];
                ag[l] += g;
                agx[l] += (double)g * xh;
            }
        for (int l = 0; l < LANES; l++) sg += ag[l], sgx += agx[l];
        for (; j < d; j++) {
            float xh = (dp_cpu_ld(t, x, o + j) - mu) * rs, g = dp_cpu_ld(t, dout, o + j) * w[j];
            sg += g;
            sgx += (double)g * xh;
        }
        const float mg = mean ? (float)(sg / (double)d) : 0.0f, mgx = (float)(sgx / (double)d);
        for (j = 0; j < d; j++) { /* dout read before dx is written: they may alias */
            float xh = (dp_cpu_ld(t, x, o + j) - mu) * rs, go = dp_cpu_ld(t, dout, o + j);
            float v = (go * w[j] - mg - xh * mgx) * rs;
            dp_cpu_st(t, dx, o + j, accumulate ? dp_cpu_ld(t, dx, o + j) + v : v);
            if (pw) pw[j] += (double)go * xh;
            if (pb) pb[j] += go;
        }
    }
}

DP_CPU_CLONES static void norm_backward_rows_f32(void *dx, double *pw, double *pb, const void *dout, const void *x,
                                                 const float *w, const float *mean, const float *rstd, int64_t n0,
                                                 int64_t n1, int64_t d, int accumulate) {
    norm_backward_rows(DP_F32, dx, pw, pb, dout, x, w, mean, rstd, n0, n1, d, accumulate);
}

/* The backward of both norms, with the fixed-chunk partials of dw and db. */
static int norm_backward(dp_dtype t, void *dx, float *dw, float *db, const void *dout, const void *x, const float *w,
                         const float *mean, const float *rstd, int64_t N, int64_t d, int accumulate) {
    int64_t parts = n_parts(N);
    double *pw = dw ? calloc((size_t)(parts * d), sizeof *pw) : NULL;
    double *pb = db ? calloc((size_t)(parts * d), sizeof *pb) : NULL;
    if ((dw && !pw) || (db && !pb)) {
        free(pw);
        free(pb);
        return dp_error_set(DP_EOOM, "norm backward: out of host memory for %lld partials", (long long)(parts * d));
    }
#pragma omp parallel for schedule(static) if (N * d > PAR_MIN)
    for (int64_t c = 0; c < parts; c++) {
        int64_t n0 = c * PART_ROWS, n1 = (c + 1) * PART_ROWS < N ? (c + 1) * PART_ROWS : N;
        double *cw = pw ? pw + c * d : NULL, *cb = pb ? pb + c * d : NULL;
        if (t == DP_F32)
            norm_backward_rows_f32(dx, cw, cb, dout, x, w, mean, rstd, n0, n1, d, accumulate);
        else
            norm_backward_rows(t, dx, cw, cb, dout, x, w, mean, rstd, n0, n1, d, accumulate);
    }
    if (pw) add_parts(dw, pw, parts, d);
    if (pb) add_parts(db, pb, parts, d);
    free(pw);
    free(pb);
    return DP_OK;
}

static int cpu_layernorm_backward(dp_device *dev, dp_dtype t, void *dx, float *dw, float *db, const void *dout,
                                  const void *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                  int64_t d, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "layernorm_backward"));
    return norm_backward(t, dx, dw, db, dout, x, w, mean, rstd, N, d, accumulate);
}

static int cpu_rmsnorm_forward(dp_device *dev, dp_dtype t, void *out, float *rstd, const void *x, const float *w,
                               int64_t N, int64_t d, float eps) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "rmsnorm_forward"));
    return norm_forward(t, out, NULL, rstd, x, w, NULL, N, d, eps);
}

static int cpu_rmsnorm_backward(dp_device *dev, dp_dtype t, void *dx, float *dw, const void *dout, const void *x,
                                const float *w, const float *rstd, int64_t N, int64_t d, int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "rmsnorm_backward"));
    return norm_backward(t, dx, dw, NULL, dout, x, w, NULL, rstd, N, d, accumulate);
}

/* ---- bias, GELU, SwiGLU ----------------------------------------------------------------- */

static int cpu_bias_add(dp_device *dev, dp_dtype t, void *out, const float *bias, int64_t rows, int64_t cols) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "bias_add"));
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dp_cpu_st(t, out, r * cols + c, dp_cpu_ld(t, out, r * cols + c) + bias[c]);
    return DP_OK;
}

static int cpu_bias_backward(dp_device *dev, dp_dtype t, float *db, const void *g, int64_t rows, int64_t cols) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "bias_backward"));
    int64_t parts = n_parts(rows);
    double *part = calloc((size_t)(parts * cols), sizeof *part);
    if (!part) return dp_error_set(DP_EOOM, "bias_backward: out of host memory for partials");
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
    for (int64_t c = 0; c < parts; c++) {
        int64_t r1 = (c + 1) * PART_ROWS < rows ? (c + 1) * PART_ROWS : rows;
        for (int64_t r = c * PART_ROWS; r < r1; r++)
            for (int64_t j = 0; j < cols; j++) part[c * cols + j] += dp_cpu_ld(t, g, r * cols + j);
    }
    add_parts(db, part, parts, cols);
    free(part);
    return DP_OK;
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* The element-wise loops below run in spans of ELEM_SPAN elements across the team. Each span
 * function takes the dtype as an argument and is inlined into a branch where it is the literal
 * DP_F32, so the f32 loop loses its per-element dtype test and vectorises (cpu_vmath.h); bf16 goes
 * through the same arithmetic with widening loads and rounding stores. */
#define ELEM_SPAN 4096
#define SPANS(n) (((n) + ELEM_SPAN - 1) / ELEM_SPAN)
#define SPAN_END(c, n) ((c + 1) * ELEM_SPAN < (n) ? (c + 1) * ELEM_SPAN : (n))
INLINE float gelu_value(float v) { return 0.5f * v * (1.0f + dp_vtanh(GELU_SCALE * (v + 0.044715f * v * v * v))); }

INLINE float gelu_grad(float v) {
    float th = dp_vtanh(GELU_SCALE * (v + 0.044715f * v * v * v));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * v * v);
}

INLINE void gelu_forward_span(dp_dtype t, void *out, const void *x, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) dp_cpu_st(t, out, i, gelu_value(dp_cpu_ld(t, x, i)));
}

/* dx may alias dout: each element is read before it is written */
INLINE void gelu_backward_span(dp_dtype t, void *dx, const void *dout, const void *x, int accumulate, int64_t i0,
                               int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float r = dp_cpu_ld(t, dout, i) * gelu_grad(dp_cpu_ld(t, x, i));
        dp_cpu_st(t, dx, i, accumulate ? dp_cpu_ld(t, dx, i) + r : r);
    }
}

INLINE void swiglu_forward_span(dp_dtype t, void *out, const void *gate, const void *up, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float g = dp_cpu_ld(t, gate, i);
        dp_cpu_st(t, out, i, g * dp_vsigmoid(g) * dp_cpu_ld(t, up, i));
    }
}

/* dgate may alias dout */
INLINE void swiglu_backward_span(dp_dtype t, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                                 int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float g = dp_cpu_ld(t, gate, i), u = dp_cpu_ld(t, up, i), go = dp_cpu_ld(t, dout, i);
        float sig = dp_vsigmoid(g);
        dp_cpu_st(t, dgate, i, go * u * sig * (1.0f + g * (1.0f - sig)));
        dp_cpu_st(t, dup, i, go * g * sig);
    }
}

/* The f32 spans, compiled per instruction set (cpu_util.h: the same bits on each). */
DP_CPU_CLONES static void gelu_forward_f32(void *out, const void *x, int64_t i0, int64_t i1) {
    gelu_forward_span(DP_F32, out, x, i0, i1);
}

DP_CPU_CLONES static void gelu_backward_f32(void *dx, const void *dout, const void *x, int accumulate, int64_t i0,
                                            int64_t i1) {
    gelu_backward_span(DP_F32, dx, dout, x, accumulate, i0, i1);
}

DP_CPU_CLONES static void swiglu_forward_f32(void *out, const void *gate, const void *up, int64_t i0, int64_t i1) {
    swiglu_forward_span(DP_F32, out, gate, up, i0, i1);
}

DP_CPU_CLONES static void swiglu_backward_f32(void *dgate, void *dup, const void *dout, const void *gate,
                                              const void *up, int64_t i0, int64_t i1) {
    swiglu_backward_span(DP_F32, dgate, dup, dout, gate, up, i0, i1);
}

static int cpu_gelu_forward(dp_device *dev, dp_dtype t, void *out, const void *x, int64_t n) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "gelu_forward"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < SPANS(n); c++) {
        if (t == DP_F32)
            gelu_forward_f32(out, x, c * ELEM_SPAN, SPAN_END(c, n));
        else
            gelu_forward_span(t, out, x, c * ELEM_SPAN, SPAN_END(c, n));
    }
    return DP_OK;
}

static int cpu_gelu_backward(dp_device *dev, dp_dtype t, void *dx, const void *dout, const void *x, int64_t n,
                             int accumulate) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "gelu_backward"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < SPANS(n); c++) {
        if (t == DP_F32)
            gelu_backward_f32(dx, dout, x, accumulate, c * ELEM_SPAN, SPAN_END(c, n));
        else
            gelu_backward_span(t, dx, dout, x, accumulate, c * ELEM_SPAN, SPAN_END(c, n));
    }
    return DP_OK;
}

static int cpu_swiglu_forward(dp_device *dev, dp_dtype t, void *out, const void *gate, const void *up, int64_t n) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "swiglu_forward"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < SPANS(n); c++) {
        if (t == DP_F32)
            swiglu_forward_f32(out, gate, up, c * ELEM_SPAN, SPAN_END(c, n));
        else
            swiglu_forward_span(t, out, gate, up, c * ELEM_SPAN, SPAN_END(c, n));
    }
    return DP_OK;
}

static int cpu_swiglu_backward(dp_device *dev, dp_dtype t, void *dgate, void *dup, const void *dout, const void *gate,
                               const void *up, int64_t n) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "swiglu_backward"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < SPANS(n); c++) {
        if (t == DP_F32)
            swiglu_backward_f32(dgate, dup, dout, gate, up, c * ELEM_SPAN, SPAN_END(c, n));
        else
            swiglu_backward_span(t, dgate, dup, dout, gate, up, c * ELEM_SPAN, SPAN_END(c, n));
    }
    return DP_OK;
}

/* ---- rotary embedding ------------------------------------------------------------------- */

static int cpu_rope(dp_device *dev, dp_dtype t, void *x, int64_t ldx, int64_t N, int64_t T, int64_t H, int64_t hd,
                    const float *inv_freq, float scale, int inverse) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "rope"));
    if (hd % 2) return dp_error_set(DP_EINVAL, "rope: head dimension %lld is odd", (long long)hd);
    const int64_t half = hd / 2, P = N < T ? N : T;
    /* cos and sin of each (position, j) once: T x half of each, not N x half x H calls */
    float *cs = malloc((size_t)(2 * P * half) * sizeof *cs);
    if (!cs) return dp_error_set(DP_EOOM, "rope: out of host memory for the %lld angles", (long long)(P * half));
#pragma omp parallel for schedule(static) if (P * half > PAR_MIN / 16)
    for (int64_t pj = 0; pj < P * half; pj++) {
        const float pos = (float)(pj / half);
        const int64_t j = pj % half;
        /* the rounding points of layer_ops.h, the same on every device */
        const float angle = pos * inv_freq[j], sn = sinf(angle) * scale;
        cs[2 * pj] = cosf(angle) * scale;
        cs[2 * pj + 1] = inverse ? -sn : sn;
    }
#pragma omp parallel for schedule(static) if (N * H * hd > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *row = cs + 2 * (n % T) * half;
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < half; j++) {
                const float c = row[2 * j], s = row[2 * j + 1];
                int64_t i1 = n * ldx + h * hd + j, i2 = i1 + half;
                float x1 = dp_cpu_ld(t, x, i1), x2 = dp_cpu_ld(t, x, i2);
                dp_cpu_st(t, x, i1, x1 * c - x2 * s);
                dp_cpu_st(t, x, i2, x2 * c + x1 * s);
            }
    }
    free(cs);
    return DP_OK;
}

/* ---- fused softmax cross-entropy -------------------------------------------------------- */

static int check_targets(const int32_t *targets, int64_t N, int64_t V, const char *op) {
    for (int64_t n = 0; n < N; n++)
        if ((targets[n] < 0 || targets[n] >= V) && targets[n] != DP_IGNORE_INDEX)
            return dp_error_set(DP_EINVAL, "%s: target %d at row %lld is outside [0, %lld) (or -100, ignored)", op,
                                (int)targets[n], (long long)n, (long long)V);
    return DP_OK;
}

/* max of row[0..V) (f32 or bf16; NaN ignored as by a > test) */
INLINE float row_max(dp_dtype t, const void *row, int64_t V) {
    float m[LANES];
    for (int l = 0; l < LANES; l++) m[l] = -INFINITY;
    int64_t j = 0;
    for (; j + LANES <= V; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float x = dp_cpu_ld(t, row, j + l);
            m[l] = x > m[l] ? x : m[l];
        }
    float mx = -INFINITY;
    for (int l = 0; l < LANES; l++) mx = m[l] > mx ? m[l] : mx;
    for (; j < V; j++) mx = dp_cpu_ld(t, row, j) > mx ? dp_cpu_ld(t, row, j) : mx;
    return mx;
}

/* sum of e^(row[j] - mx) in double: LANES partial sums in a fixed order */
INLINE double row_sum_exp(dp_dtype t, const void *row, int64_t V, float mx) {
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= V; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (double)dp_vexp(dp_cpu_ld(t, row, j + l) - mx);
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; j < V; j++) s += (double)dp_vexp(dp_cpu_ld(t, row, j) - mx);
    return s;
}

/* row[j] = (softmax_j - [j == target]) * s, from the row's lse z */
INLINE void row_softmax_grad(dp_dtype t, void *row, int64_t V, float z, int32_t target, float s) {
    float pt = dp_vexp(dp_cpu_ld(t, row, target) - z);
    for (int64_t j = 0; j < V; j++) dp_cpu_st(t, row, j, dp_vexp(dp_cpu_ld(t, row, j) - z) * s);
    dp_cpu_st(t, row, target, (pt - 1.0f) * s);
}

/* The f32 rows, compiled per instruction set: the log-sum-exp's max and sum, and the gradient. */
DP_CPU_CLONES static double row_max_sum_f32(const void *row, int64_t V, float *mx) {
    *mx = row_max(DP_F32, row, V);
    return row_sum_exp(DP_F32, row, V, *mx);
}

DP_CPU_CLONES static void row_softmax_grad_f32(void *row, int64_t V, float z, int32_t target, float s) {
    row_softmax_grad(DP_F32, row, V, z, target, s);
}

static int cpu_cross_entropy_forward(dp_device *dev, dp_dtype t, float *losses, float *lse, const void *logits,
                                     const int32_t *targets, int64_t N, int64_t V) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "cross_entropy_forward"));
    DP_TRY(check_targets(targets, N, V, "cross_entropy_forward"));
    size_t es = dp_dtype_size(t);
#pragma omp parallel for schedule(static) if (N * V > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const char *row = (const char *)logits + (size_t)(n * V) * es;
        float mx;
        double s;
        if (t == DP_F32) {
            s = row_max_sum_f32(row, V, &mx);
        } else {
            mx = row_max(t, row, V);
            s = row_sum_exp(t, row, V, mx);
        }
        float z = mx + (float)log(s);
        lse[n] = z;
        losses[n] = targets[n] == DP_IGNORE_INDEX ? 0.0f : z - dp_cpu_ld(t, row, targets[n]);
    }
    return DP_OK;
}

static int cpu_cross_entropy_backward(dp_device *dev, dp_dtype t, void *logits, const float *lse,
                                      const int32_t *targets, const float *sample_scale, int64_t N, int64_t T,
                                      int64_t V) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(t, "cross_entropy_backward"));
    DP_TRY(check_targets(targets, N, V, "cross_entropy_backward"));
    size_t es = dp_dtype_size(t);
#pragma omp parallel for schedule(static) if (N * V > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        char *row = (char *)logits + (size_t)(n * V) * es;
        if (targets[n] == DP_IGNORE_INDEX) /* a pad: no gradient */
            memset(row, 0, (size_t)V * es);
        else if (t == DP_F32)
            row_softmax_grad_f32(row, V, lse[n], targets[n], sample_scale[n / T]);
        else
            row_softmax_grad(t, row, V, lse[n], targets[n], sample_scale[n / T]);
    }
    return DP_OK;
}

/* ---- optimizers ------------------------------------------------------------------------- */

/* PyTorch's single-tensor AdamW, operation for operation (lerp for m, sqrt(v)/sqrt(bc2) + eps),
 * for one element: updates m and v in place and returns the new parameter. */
static inline float adamw_elem(float pi, float gi, float *m, float *v, float beta1, float beta2, float eps, float decay,
                               float step_size, float bc2_sqrt) {
    pi *= decay;
    const float mi = *m + (1.0f - beta1) * (gi - *m);
    const float vi = *v * beta2 + (1.0f - beta2) * gi * gi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    *m = mi;
    *v = vi;
    return pi - step_size * (mi / denom);
}

/* AdamW on elements [i0, i1) of a parameter of dtype pt (f32 in a loop that vectorises, bf16
 * widened and rounded once); compiled per instruction set. */
DP_CPU_CLONES static void adamw_span(dp_dtype pt, void *p, const float *g, float *m, float *v, int64_t i0, int64_t i1,
                                     float beta1, float beta2, float eps, float decay, float step_size,
                                     float bc2_sqrt) {
    if (pt == DP_F32) {
        float *pf = p;
        for (int64_t i = i0; i < i1; i++)
            pf[i] = adamw_elem(pf[i], g[i], m + i, v + i, beta1, beta2, eps, decay, step_size, bc2_sqrt);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float pi =
            adamw_elem(dp_cpu_ld(pt, p, i), g[i], m + i, v + i, beta1, beta2, eps, decay, step_size, bc2_sqrt);
        dp_cpu_st(pt, p, i, pi);
    }
}

static int cpu_adamw_step(dp_device *dev, dp_dtype pt, void *p, const float *g, float *m, float *v, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(pt, "adamw_step"));
    if (step < 1) return dp_error_set(DP_EINVAL, "adamw_step: step %lld (counts from 1)", (long long)step);
    const float decay = 1.0f - lr * weight_decay;
    const double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < SPANS(n); c++)
        adamw_span(pt, p, g, m, v, c * ELEM_SPAN, SPAN_END(c, n), beta1, beta2, eps, decay, step_size, bc2_sqrt);
    return DP_OK;
}

static int cpu_sgd_step(dp_device *dev, dp_dtype pt, void *p, const float *g, float *buf, int64_t n, float lr,
                        float momentum, float weight_decay, int first_step) {
    (void)dev;
    DP_TRY(dp_cpu_need_float(pt, "sgd_step"));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float pi = dp_cpu_ld(pt, p, i);
        float d = weight_decay != 0.0f ? g[i] + weight_decay * pi : g[i];
        if (buf) {
            buf[i] = first_step ? d : momentum * buf[i] + d;
            d = buf[i];
        }
        dp_cpu_st(pt, p, i, pi - lr * d);
    }
    return DP_OK;
}

const dp_layer_ops dp_cpu_layer_ops = {
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .bias_add = cpu_bias_add,
    .bias_backward = cpu_bias_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .rope = cpu_rope,
    .attention_forward = dp_cpu_attention_forward,
    .attention_backward = dp_cpu_attention_backward,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .adamw_step = cpu_adamw_step,
    .sgd_step = cpu_sgd_step,
};
