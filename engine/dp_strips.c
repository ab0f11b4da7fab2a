/* dp_strips.c: flash's Gram formulation through strips of backend GEMMs (flash_gram = "strips").
 *
 * ||g_i^T a_i||^2 = <a_i a_i^T, g_i g_i^T> = sum over the lower triangle of S x S blocks, with
 * the off-diagonal blocks counted twice. Strip k holds rows [kS, kS + m) of both Gram matrices
 * against columns [0, kS) (off-diagonal, weight 2) and against themselves (the diagonal block,
 * both triangles, weight 1): batched GEMMs from the backend (cuBLAS, OpenBLAS) into a `temp`
 * workspace, reduced into the B-float row by the batched dot. The fused Gram-tile kernel does
 * the same sum in registers; strips trade a bounded workspace and one write and read of it for
 * the vendor GEMM's throughput.
 *
 * Sizes are functions of the shapes alone (plan = device): S = min(T, 256), halved while one
 * sample's strip pair (2 S T f32) exceeds the workspace bound; samples go Bc at a time so that
 * the two buffers (2 Bc S T f32) stay within DP_STRIP_WORKSPACE. Never a T x T matrix (for
 * T > S). Flops: sum over strips of 2 m (kS + m) (d + p) per sample, about B T^2 (d + p) (1 + S / T). */
#include "dp_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

void dp_strip_shape(int64_t B, int64_t T, int64_t *S, int64_t *Bc) {
    const int64_t floats = DP_STRIP_WORKSPACE / 8; /* per buffer pair: 2 x 4 bytes per element */
    int64_t s = T < DP_STRIP_ROWS ? T : DP_STRIP_ROWS;
    while (s > 16 && s * T > floats) s /= 2;
    int64_t bc = floats / (s * T > 0 ? s * T : 1);
    *S = s > 0 ? s : 1;
    *Bc = bc < 1 ? 1 : bc > B ? B : bc;
}

/* out[b] (m x n, f32) = x[i0 + b][r0 .. r0 + m) x[i0 + b][c0 .. c0 + n)^T for b < nb */
static int strip_gemm(dp_dpsgd *dp, const dp_tensor *x, int64_t i0, int64_t nb, int64_t r0, int64_t m, int64_t c0,
                      int64_t n, float *out) {
    int64_t T = x->shape[1], k = x->shape[2];
    dp_gemm_args g = {
        .trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f,
        .ab_type = x->dtype, .c_type = DP_F32,
        .a = dp_tensor_at(x, (i0 * T + r0) * k), .lda = k, .stride_a = T * k,
        .b = dp_tensor_at(x, (i0 * T + c0) * k), .ldb = k, .stride_b = T * k,
        .c = out, .ldc = n, .stride_c = m * n, .batch = nb,
    };
    return dp_gemm_ex(dp->dev, "dp_strip_gram", &g);
}

/* The blocks of rows [r0, r0 + m) against columns [c0, c0 + n) of both Gram matrices, for
 * samples [i0, i0 + nb): row[i] (+)= w <block_a, block_g>. */
static int strip_block(dp_dpsgd *dp, const dp_tensor *A, const dp_tensor *G, int64_t i0, int64_t nb, int64_t r0,
                       int64_t m, int64_t c0, int64_t n, dp_tensor *wa, dp_tensor *wg, float w, dp_tensor *row,
                       int accumulate) {
    DP_TRY(strip_gemm(dp, A, i0, nb, r0, m, c0, n, wa->data));
    DP_TRY(strip_gemm(dp, G, i0, nb, r0, m, c0, n, wg->data));
    double e = (double)(nb * m * n);
    dp_ledger_add("dp_strip_dot", 2.0 * e, 8.0 * e + 4.0 * (double)nb * (accumulate ? 2.0 : 1.0));
    return DP_DISPATCH_DP(dp->dev, batched_dot, nb, m * n, DP_F32, wa->data, DP_F32, wg->data, w,
                          dp_tensor_at(row, i0), accumulate);
}

int dp_strip_linear(dp_dpsgd *dp, const dp_param *w, const dp_tensor *A, const dp_tensor *G, float scale,
                    dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1], S, Bc;
    dp_strip_shape(B, T, &S, &Bc);
    int64_t ws[1] = {Bc * S * T};
    dp_tensor wa, wg;
    DP_TRY(dp_alloc_tensor(dp, &wa, DP_F32, 1, ws, DP_CAT_TEMP, w->module));
    int rc = dp_alloc_tensor(dp, &wg, DP_F32, 1, ws, DP_CAT_TEMP, w->module);
    if (rc != DP_OK) {
        dp_tensor_release(&wa);
        return rc;
    }
    const float s2 = scale * scale;
    for (int64_t i0 = 0; i0 < B && rc == DP_OK; i0 += Bc) {
        const int64_t nb = B - i0 < Bc ? B - i0 : Bc;
        for (int64_t r0 = 0; r0 < T && rc == DP_OK; r0 += S) {
            const int64_t m = T - r0 < S ? T - r0 : S;
            /* the diagonal block first: strip 0's writes the row (or adds, as the caller says) */
            rc = strip_block(dp, A, G, i0, nb, r0, m, r0, m, &wa, &wg, s2, row, r0 == 0 ? accumulate : 1);
            if (rc == DP_OK && r0 > 0) rc = strip_block(dp, A, G, i0, nb, r0, m, 0, r0, &wa, &wg, 2.0f * s2, row, 1);
        }
    }
    dp_tensor_release(&wg);
    dp_tensor_release(&wa);
    return rc;
}
