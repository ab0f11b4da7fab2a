/* dpsgd_strips.c: flash norms through strips of backend GEMMs (flash_impl = "strips"): the vendor
 * GEMM's throughput for a bounded workspace and one write and read of it, where the fused tile
 * kernels (dpsgd_flash.c) keep every product in registers.
 *
 * Gram formulation: ||g_i^T a_i||^2 = <a_i a_i^T, g_i g_i^T> = sum over the lower triangle of
 * S x S blocks, with the off-diagonal blocks counted twice. Strip k holds rows [kS, kS + m) of both
 * Gram matrices against columns [0, kS) (off-diagonal, weight 2) and against themselves (the
 * diagonal block, both triangles, weight 1): batched GEMMs into two `temp` buffers, reduced into
 * the B-float row by the batched dot. S = min(T, 256), halved while one sample's strip pair
 * (2 S T f32) exceeds the workspace bound; samples go Bc at a time so that the two buffers
 * (2 Bc S T f32) stay within DPSGD_STRIP_WORKSPACE. Per pass of samples: the diagonal blocks in one
 * GEMM per matrix when S divides T, then one GEMM per matrix and strip. Never a T x T matrix (for
 * T > S). Flops: sum over strips of 2 m (kS + m) (d + p) per sample, about B T^2 (d + p) (1 + S/T).
 *
 * Gradient formulation: ||g_i^T a_i||^2 = sum over blocks of P rows of the per-sample gradient,
 * each (G_i[:, block])^T A_i (P x d, over K = T) formed by a batched GEMM into one `temp` buffer
 * and squared into the row by the dot. P = min(p, 8 Mi / d) and samples Bc at a time keep the
 * buffer (Bc P d f32) within DPSGD_STRIP_WORKSPACE: never the whole p x d gradient of a sample when
 * p d exceeds it. Flops: 2 B T p d (+ 2 B p d for the squares).
 *
 * Sizes are functions of the shapes alone, so plan runs allocate as device runs do. */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

void dpsgd_strip_shape(int64_t B, int64_t T, int64_t *S, int64_t *Bc) {
    const int64_t floats = DPSGD_STRIP_WORKSPACE / 8; /* per buffer pair: 2 x 4 bytes per element */
    int64_t s = T < DPSGD_STRIP_ROWS ? T : DPSGD_STRIP_ROWS;
    while (s > 16 && s * T > floats) s /= 2;
    int64_t bc = floats / (s * T > 0 ? s * T : 1);
    *S = s > 0 ? s : 1;
    *Bc = bc < 1 ? 1 : bc > B ? B : bc;
}

/* out[j] (m x n, f32) = rows [r0 + j s, + m) of x (B T x k, flattened) times rows [c0 + j s, + n)
 * of x, transposed, for j < count */
static int strip_gemm(dpsgd *dp, const dp_tensor *x, int64_t r0, int64_t c0, int64_t m, int64_t n, int64_t count,
                      int64_t s, float *out) {
    int64_t k = x->shape[2];
    return dp_gemm_batched(dp->dev, "dp_strip_gram", count, m, n, k, 1.0f, x->dtype,
                           DP_MAT(dp_tensor_at(x, r0 * k), k, s * k), DP_MAT_T(dp_tensor_at(x, c0 * k), k, s * k), 0.0f,
                           DP_F32, out);
}

/* The same blocks of both Gram matrices (strip_gemm's), then row[i0 + i] (+)= w <block_a, block_g>
 * summed over the count / nb blocks of each of the nb samples (consecutive in the workspace). */
static int strip_block(dpsgd *dp, const dp_tensor *A, const dp_tensor *G, int64_t r0, int64_t c0, int64_t m, int64_t n,
                       int64_t count, int64_t s, dp_tensor *wa, dp_tensor *wg, float w, dp_tensor *row, int64_t i0,
                       int64_t nb, int accumulate) {
    DP_TRY(strip_gemm(dp, A, r0, c0, m, n, count, s, wa->data));
    DP_TRY(strip_gemm(dp, G, r0, c0, m, n, count, s, wg->data));
    double e = (double)(count * m * n);
    dp_ledger_add("dp_strip_dot", 2.0 * e, 8.0 * e + 4.0 * (double)nb * (accumulate ? 2.0 : 1.0));
    return DPSGD_DISPATCH(dp->dev, batched_dot, nb, count / nb * m * n, DP_F32, wa->data, DP_F32, wg->data, w,
                          dp_tensor_at(row, i0), accumulate);
}

int dpsgd_strip_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1], S, Bc;
    dpsgd_strip_shape(B, T, &S, &Bc);
    int64_t ws[1] = {Bc * S * T};
    dp_tensor wa, wg;
    DP_TRY(dp_tensor_init_module(&wa, dp->dev, DP_F32, 1, ws, DP_CAT_TEMP, w->module));
    int rc = dp_tensor_init_module(&wg, dp->dev, DP_F32, 1, ws, DP_CAT_TEMP, w->module);
    if (rc != DP_OK) {
        dp_tensor_release(&wa);
        return rc;
    }
    const float s2 = scale * scale;
    const int64_t nt = T / S; /* whole strips */
    for (int64_t i0 = 0; i0 < B && rc == DP_OK; i0 += Bc) {
        const int64_t nb = B - i0 < Bc ? B - i0 : Bc, base = i0 * T;
        /* the diagonal blocks first (they write the row, or add as the caller says): when S
         * divides T, every sample's in one GEMM per matrix (nb nt blocks S rows apart, nb S T
         * floats), else strip by strip */
        if (T % S == 0) {
            rc = strip_block(dp, A, G, base, base, S, S, nb * nt, S, &wa, &wg, s2, row, i0, nb, accumulate);
        } else {
            for (int64_t r = 0; r < T && rc == DP_OK; r += S) {
                const int64_t m = T - r < S ? T - r : S;
                rc = strip_block(dp, A, G, base + r, base + r, m, m, nb, T, &wa, &wg, s2, row, i0, nb,
                                 r == 0 ? accumulate : 1);
            }
        }
        /* then strip k's rows against the columns before it, counted twice */
        for (int64_t r = S; r < T && rc == DP_OK; r += S) {
            const int64_t m = T - r < S ? T - r : S;
            rc = strip_block(dp, A, G, base + r, base, m, r, nb, T, &wa, &wg, 2.0f * s2, row, i0, nb, 1);
        }
    }
    dp_tensor_release(&wg);
    dp_tensor_release(&wa);
    return rc;
}

/* ---- the gradient formulation -------------------------------------------------------------- */

void dpsgd_grad_strip_shape(int64_t B, int64_t d, int64_t p, int64_t *P, int64_t *Bc) {
    const int64_t floats = (int64_t)(DPSGD_STRIP_WORKSPACE / 4), dd = d > 0 ? d : 1;
    int64_t rows = floats / dd;
    if (rows > p) rows = p;
    if (rows < 1) rows = 1;
    int64_t bc = floats / (rows * dd);
    *P = rows;
    *Bc = bc < 1 ? 1 : bc > B ? B : bc;
}

int dpsgd_grad_strip_linear(dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                            dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], p = G->shape[2], P, Bc;
    dpsgd_grad_strip_shape(B, d, p, &P, &Bc);
    int64_t ws[1] = {Bc * P * d};
    dp_tensor wk;
    DP_TRY(dp_tensor_init_module(&wk, dp->dev, DP_F32, 1, ws, DP_CAT_TEMP, w->module));
    int rc = DP_OK;
    for (int64_t i0 = 0; i0 < B && rc == DP_OK; i0 += Bc) {
        const int64_t nb = B - i0 < Bc ? B - i0 : Bc;
        for (int64_t p0 = 0; p0 < p && rc == DP_OK; p0 += P) {
            const int64_t m = p - p0 < P ? p - p0 : P;
            /* wk[i] (m x d) = G_i[:, p0 .. p0 + m)^T A_i: rows p0.. of sample i's gradient */
            rc = dp_gemm_batched(dp->dev, "dp_strip_grad", nb, m, d, T, 1.0f, A->dtype,
                                 DP_MAT_T(dp_tensor_at(G, i0 * T * p + p0), p, T * p),
                                 DP_MAT(dp_tensor_at(A, i0 * T * d), d, T * d), 0.0f, DP_F32, wk.data);
            if (rc != DP_OK) break;
            double e = (double)(nb * m * d);
            dp_ledger_add("dp_strip_sumsq", 2.0 * e, 4.0 * e + 4.0 * (double)nb * 2.0);
            rc = DPSGD_DISPATCH(dp->dev, batched_dot, nb, m * d, DP_F32, wk.data, DP_F32, wk.data, scale * scale,
                                dp_tensor_at(row, i0), p0 == 0 ? accumulate : 1);
        }
    }
    dp_tensor_release(&wk);
    return rc;
}
