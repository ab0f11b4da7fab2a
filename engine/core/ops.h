/* ops.h: the basic tensor ops. Each checks shapes, records its flops and bytes (read + written)
 * in the ledger under its name, then runs on the tensors' device. All operands of one op live on
 * one device. */
#ifndef DP_OPS_H
#define DP_OPS_H

#include "tensor.h"

/* Records op (a string literal) in the ledger and runs g on dev. The caller checked the shapes. */
int dp_gemm_ex(dp_device *dev, const char *op, const dp_gemm_args *g);
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
