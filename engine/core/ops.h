/* ops.h: the basic tensor ops. Each checks shapes, records its flops and bytes (read + written)
 * in the ledger under its name, then runs on the tensors' device. All operands of one op live on
 * one device. */
#ifndef DP_OPS_H
#define DP_OPS_H

#include "tensor.h"

/* An operand of dp_gemm_batched: the row-major matrix at data with leading dimension ld (elements),
 * the next batch item's `stride` elements on (0: one matrix for every item), used transposed when
 * trans. DP_MAT and DP_MAT_T spell the two uses. */
typedef struct dp_gemm_mat {
    const void *data;
    int64_t ld, stride;
    int trans;
} dp_gemm_mat;
#define DP_MAT(data, ld, stride) ((dp_gemm_mat){(data), (ld), (stride), 0})
#define DP_MAT_T(data, ld, stride) ((dp_gemm_mat){(data), (ld), (stride), 1})

/* C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i < batch: op(A) m x k, op(B) k x n, both of
 * ab_type; C of c_type, m x n items stored one after the other (ldc n). Records op (a string
 * literal) in the ledger with the product's flops and bytes, then runs it on dev. The caller
 * checked the shapes. The one way to the backends' gemm: dp_matmul and the per-sample norms'
 * products (dp/) go through it. */
int dp_gemm_batched(dp_device *dev, const char *op, int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                    dp_dtype ab_type, dp_gemm_mat a, dp_gemm_mat b, float beta, dp_dtype c_type, void *c);
/* C = alpha op(A) op(B) + beta C. 2-D operands, or 3-D batched over dim 0 where a 2-D A or B is
 * shared by every batch item. Ledger name "gemm" (or "gemm_batched"). */
int dp_matmul(dp_tensor *C, const dp_tensor *A, int trans_a, const dp_tensor *B, int trans_b, float alpha, float beta);
/* out = x + y, element-wise (same numel; out may alias x or y). */
int dp_add(dp_tensor *out, const dp_tensor *x, const dp_tensor *y);
/* x *= alpha. */
int dp_scale(dp_tensor *x, float alpha);
/* y += alpha x. */
int dp_axpy(dp_tensor *y, float alpha, const dp_tensor *x);
/* out[r] (+)= sum of squares of row r of x viewed as rows = out->numel rows; out is f32. */
int dp_sumsq_rows(dp_tensor *out, const dp_tensor *x, int accumulate);
/* Sum of squares of all of x, returned to the host (synchronises; 0 on plan). */
int dp_sumsq(const dp_tensor *x, double *out);

#endif
