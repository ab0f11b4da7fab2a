/* dpsgd_flash.c: flash norms: fused tiled kernels that never hold a T x T matrix or a p x d
 * per-sample gradient (dpsgd_ops.h). Per layer the cost model (dpsgd_method.c) picks the Gram-tile
 * formulation (B T (T+1) (d+p) flops: the lower triangle of a_i a_i^T and g_i g_i^T, tile by
 * tile, multiplied and summed in registers) or the gradient-tile formulation (2 B T p d flops:
 * g_i^T a_i tile by tile, squared and summed in registers). Extra memory: the B-float norm row.
 * Embeddings group equal ids per sample after a per-sample sort (B x T keys, `temp`). */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"

#include <math.h>

int dpsgd_flash_linear(dpsgd *dp, dpsgd_formulation form, const dp_tensor *A, const dp_tensor *G, float scale,
                       dp_tensor *row, int accumulate) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], p = G->shape[2];
    double b = (double)B, t = (double)T, es = (double)dp_dtype_size(A->dtype);
    double bytes = b * t * (double)(d + p) * es + 4.0 * b * (accumulate ? 2.0 : 1.0);
    float alpha = scale * scale;
    if (form == DPSGD_FORM_GRAM_TILE) {
        dp_ledger_add("dp_flash_gram_tile", dpsgd_gram_tile_flops(B, T, d, p), bytes);
        return DPSGD_DISPATCH(dp->dev, gram_tile_sumsq, A->dtype, B, T, d, p, A->data, G->data, alpha, row->data,
                              accumulate);
    }
    if (form == DPSGD_FORM_GRAD_TILE) {
        dp_ledger_add("dp_flash_grad_tile", dpsgd_grad_tile_flops(B, T, d, p), bytes);
        return DPSGD_DISPATCH(dp->dev, grad_tile_sumsq, A->dtype, B, T, d, p, A->data, G->data, alpha, row->data,
                              accumulate);
    }
    return dp_error_set(DP_EINTERNAL, "flash norms: formulation '%s' is not a tile formulation",
                        dpsgd_formulation_name(form));
}

int dpsgd_grouped_embedding(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *G, dp_tensor *row,
                            int accumulate) {
    int64_t B = G->shape[0], T = G->shape[1], d = G->shape[2];
    dp_alloc keys;
    DP_TRY(dp_mem_alloc_module(dp->dev->mem, (uint64_t)(B * T) * sizeof(uint64_t), DP_CAT_TEMP, wte->module, &keys));
    double n = (double)(B * T);
    dp_ledger_add("dp_sort_ids", n * (T > 1 ? log2((double)T) : 1.0), 4.0 * n + 16.0 * n);
    int rc = DPSGD_DISPATCH(dp->dev, sort_ids, B, T, ids->data, keys.ptr);
    if (rc == DP_OK) {
        dp_ledger_add("dp_grouped_sumsq", 2.0 * n * (double)d,
                      n * (double)d * (double)dp_dtype_size(G->dtype) + 8.0 * n + 4.0 * (double)B);
        rc = DPSGD_DISPATCH(dp->dev, grouped_sumsq, G->dtype, B, T, d, G->data, keys.ptr, 1.0f, row->data, accumulate);
    }
    dp_mem_release(dp->dev->mem, &keys);
    return rc;
}

int dpsgd_flash_tied_rows(dpsgd *dp, const dp_param *wte, const dp_tensor *ids, const dp_tensor *A, const dp_tensor *G,
                          dp_tensor *rows) {
    int64_t B = A->shape[0], T = A->shape[1], d = A->shape[2], V = G->shape[2];
    int64_t rs[3] = {B, T, d};
    DP_TRY(dp_tensor_init_module(rows, dp->dev, DP_F32, 3, rs, DP_CAT_PER_SAMPLE_GRADS, wte->module));
    double b = (double)B, t = (double)T, es = (double)dp_dtype_size(A->dtype);
    dp_ledger_add("dp_flash_tied_rows", 2.0 * b * t * t * (double)d,
                  b * t * t * es + b * t * (double)d * (es + 4.0) + 4.0 * b * t);
    int rc = DPSGD_DISPATCH(dp->dev, tied_rows, A->dtype, B, T, d, V, G->data, ids->data, A->data, rows->data);
    if (rc != DP_OK) dp_tensor_release(rows);
    return rc;
}
