/* model_linear.c: the pieces every block is made of: linears (with optional LoRA adapters)
 * and norms, forward and backward side by side, and the model's activation helpers (allocated
 * with dp_tensor_init_module: the model's module paths are absolute, whatever the caller's scope). */
#include "model_internal.h"

#include "error.h"
#include "layers.h"
#include "ops.h"

#include <string.h>

int dp_model_act(dp_model *m, dp_tensor *t, int64_t cols, dp_category cat, uint32_t module) {
    int64_t shape[3] = {m->B, m->T, cols};
    return dp_tensor_init_module(t, m->dev, m->t, 3, shape, cat, module);
}

int dp_model_stat(dp_model *m, dp_tensor *t, int heads, dp_category cat, uint32_t module) {
    int64_t shape[3] = {m->B, heads ? m->H : 1, m->T};
    return dp_tensor_init_module(t, m->dev, DP_F32, 3, shape, cat, module);
}

void dp_bw_done(const dp_bw *bw, dp_tensor *t) {
    if (bw->hold) return; /* freed with the block, after its block_end hook */
    if (!bw->retain || bw->recomputed) dp_tensor_release(t);
}

void dp_bw_done_input(const dp_bw *bw, dp_tensor *t) {
    if (bw->hold) return;
    if (!bw->retain) dp_tensor_release(t);
}

dp_tensor *dp_bw_grad(const dp_bw *bw, dp_param *p, int *rc) {
    *rc = DP_OK;
    if (!bw->weight_grads || !p || !p->trainable) return NULL;
    if (!p->grad.alloc.live) {
        *rc = dp_tensor_init_module(&p->grad, bw->m->dev, DP_F32, p->value.ndim, p->value.shape, DP_CAT_GRADIENTS,
                                    p->module);
        if (*rc == DP_OK) *rc = dp_tensor_fill(&p->grad, 0.0);
        if (*rc != DP_OK) return NULL;
    }
    return &p->grad;
}

/* The f32 tensor a kernel that takes f32 gains or biases reads for p: its value, or a transient
 * f32 copy of a bf16 one in *tmp (`temp`, p's module; the caller releases it). */
static int f32_param(dp_model *m, const dp_param *p, dp_tensor *tmp, const dp_tensor **out) {
    *out = &p->value;
    if (p->value.dtype == DP_F32) return DP_OK;
    DP_TRY(dp_tensor_init_module(tmp, m->dev, DP_F32, p->value.ndim, p->value.shape, DP_CAT_TEMP, p->module));
    *out = tmp;
    return dp_tensor_copy(tmp, &p->value);
}

/* t (any shape, rows of cols) as a rows x cols matrix */
static int mat(const dp_tensor *t, int64_t cols, dp_tensor *out) {
    int64_t shape[2] = {cols ? t->numel / cols : 0, cols};
    return dp_tensor_view(out, t, 0, 2, shape);
}

/* ---- linear ---------------------------------------------------------------------------- */

int dp_linear_forward(dp_model *m, const dp_linear *lin, const dp_tensor *x, dp_tensor *y, dp_tensor *lora_u) {
    dp_tensor x2, y2;
    DP_TRY(mat(x, lin->in, &x2));
    if (y) DP_TRY(mat(y, lin->out, &y2));
    if (y) DP_TRY(dp_matmul(&y2, &x2, 0, dp_model_gemm_weight(lin->w), 1, 1.0f, 0.0f)); /* x W^T */
    if (y && lin->b) {
        dp_tensor tmp = {0};
        const dp_tensor *b;
        int rc = f32_param(m, lin->b, &tmp, &b);
        if (rc == DP_OK) rc = dp_layer_bias_add(y, b);
        dp_tensor_release(&tmp);
        DP_TRY(rc);
    }
    if (!lin->lora_a) return DP_OK;
    /* the adapter: u = x A^T is saved for B's weight gradient; y += (alpha/r) u B^T */
    const int64_t r = m->cfg.lora_rank;
    dp_tensor u2;
    DP_TRY(dp_model_act(m, lora_u, r, DP_CAT_ACTIVATIONS, lin->lora_module));
    DP_TRY(mat(lora_u, r, &u2));
    DP_TRY(dp_matmul(&u2, &x2, 0, dp_model_gemm_weight(lin->lora_a), 1, 1.0f, 0.0f));
    if (!y) return DP_OK;
    return dp_matmul(&y2, &u2, 0, dp_model_gemm_weight(lin->lora_b), 1, m->lora_scale, 1.0f);
}

/* The weight-side work of one linear (W, and b when given) for output gradient G and input x:
 * the hook, then dW += scale G^T x and db += colsum(G). Frozen weights are skipped. */
static int weight_backward(const dp_bw *bw, dp_param *w, dp_param *b, const dp_tensor *x, const dp_tensor *G,
                           float scale) {
    if (!w->trainable) return DP_OK;
    const dp_layer_hooks *hk = bw->hooks;
    if (hk && hk->linear) DP_TRY(hk->linear(hk->ctx, bw->m, w, b, x, G, scale));
    int rc;
    dp_tensor *dw = dp_bw_grad(bw, w, &rc), x2, G2;
    DP_TRY(rc);
    if (dw) {
        DP_TRY(mat(x, w->value.shape[1], &x2));
        DP_TRY(mat(G, w->value.shape[0], &G2));
        DP_TRY(dp_matmul(dw, &G2, 1, &x2, 0, scale, 1.0f));
    }
    dp_tensor *db = dp_bw_grad(bw, b, &rc);
    DP_TRY(rc);
    if (db) DP_TRY(dp_layer_bias_backward(db, G));
    return DP_OK;
}

static int keeps_out_grad(const dp_bw *bw, const dp_linear *lin) {
    const dp_layer_hooks *hk = bw->hooks;
    const dp_model *m = bw->m;
    return hk && hk->keeps_out_grad && hk->adopt && lin->w->trainable &&
           hk->keeps_out_grad(hk->ctx, lin->w, m->B, m->T, lin->in, lin->out, m->t);
}

int dp_bw_out_grad(const dp_bw *bw, const dp_linear *lin, dp_tensor *t, int64_t cols, uint32_t temp_module) {
    if (keeps_out_grad(bw, lin)) return dp_model_act(bw->m, t, cols, DP_CAT_OUTPUT_GRADS, lin->w->module);
    return dp_model_act(bw->m, t, cols, DP_CAT_TEMP, temp_module);
}

int dp_bw_shared_input(const dp_bw *bw, const dp_tensor *A) {
    const dp_layer_hooks *hk = bw->hooks;
    return hk && hk->shared_input ? hk->shared_input(hk->ctx, A) : DP_OK;
}

int dp_bw_out_grad_held(const dp_bw *bw, const dp_linear *lin, dp_tensor *t) {
    if (!keeps_out_grad(bw, lin)) return DP_OK;
    return dp_tensor_retag(t, DP_CAT_OUTPUT_GRADS, lin->w->module);
}

int dp_bw_out_grad_done(const dp_bw *bw, const dp_linear *lin, dp_tensor *t) {
    int rc = DP_OK; /* under output_grads only when dp_bw_out_grad found the hooks keeping it */
    if (t->alloc.live && t->alloc.category == DP_CAT_OUTPUT_GRADS) rc = bw->hooks->adopt(bw->hooks->ctx, lin->w, t);
    dp_tensor_release(t); /* a no-op once adopted */
    return rc;
}

int dp_linear_backward(const dp_bw *bw, const dp_linear *lin, const dp_tensor *x, const dp_tensor *G, dp_tensor *dx,
                       int accumulate, dp_tensor *lora_u) {
    dp_model *m = bw->m;
    dp_tensor G2, dx2;
    DP_TRY(mat(G, lin->out, &G2));
    DP_TRY(mat(dx, lin->in, &dx2));
    DP_TRY(weight_backward(bw, lin->w, lin->b, x, G, 1.0f));
    DP_TRY(dp_matmul(&dx2, &G2, 0, dp_model_gemm_weight(lin->w), 0, 1.0f, accumulate ? 1.0f : 0.0f)); /* G W */
    if (!lin->lora_a) return DP_OK;
    /* the adapter as two linears with scale s = alpha/r: B (input u, output gradient G) and
     * A (input x, output gradient du = G B); dx += s du A */
    const int64_t r = m->cfg.lora_rank;
    const float s = m->lora_scale;
    dp_tensor du = {0}, du2;
    int rc = weight_backward(bw, lin->lora_b, NULL, lora_u, G, s);
    if (rc == DP_OK) rc = dp_model_act(m, &du, r, DP_CAT_TEMP, lin->lora_module);
    if (rc == DP_OK) rc = mat(&du, r, &du2);
    if (rc == DP_OK) rc = dp_matmul(&du2, &G2, 0, dp_model_gemm_weight(lin->lora_b), 0, 1.0f, 0.0f);
    if (rc == DP_OK) dp_bw_done(bw, lora_u);
    if (rc == DP_OK) rc = weight_backward(bw, lin->lora_a, NULL, x, &du, s);
    if (rc == DP_OK) rc = dp_matmul(&dx2, &du2, 0, dp_model_gemm_weight(lin->lora_a), 0, s, 1.0f);
    dp_tensor_release(&du);
    return rc;
}

/* ---- LayerNorm / RMSNorm ----------------------------------------------------------------- */

int dp_norm_forward(dp_model *m, const dp_norm *nm, const dp_tensor *x, dp_tensor *out, dp_tensor *mean,
                    dp_tensor *rstd) {
    dp_tensor tw = {0}, tb = {0};
    const dp_tensor *w, *b = NULL;
    int rc = f32_param(m, nm->w, &tw, &w);
    if (rc == DP_OK && nm->b) rc = f32_param(m, nm->b, &tb, &b);
    if (rc == DP_OK) rc = dp_layer_norm_forward(out, nm->b ? mean : NULL, rstd, x, w, b, m->cfg.norm_eps);
    dp_tensor_release(&tb);
    dp_tensor_release(&tw);
    return rc;
}

int dp_norm_backward(const dp_bw *bw, const dp_norm *nm, const dp_tensor *x, const dp_tensor *mean,
                     const dp_tensor *rstd, const dp_tensor *G, dp_tensor *dx, int accumulate) {
    const dp_layer_hooks *hk = bw->hooks;
    const dp_tensor *mu = nm->b ? mean : NULL;
    if (nm->w->trainable && hk && hk->norm) DP_TRY(hk->norm(hk->ctx, bw->m, nm->w, nm->b, x, mu, rstd, G));
    int rc;
    dp_tensor *dw = dp_bw_grad(bw, nm->w, &rc);
    DP_TRY(rc);
    dp_tensor *db = dp_bw_grad(bw, nm->b, &rc);
    DP_TRY(rc);
    dp_tensor tw = {0};
    const dp_tensor *w;
    rc = f32_param(bw->m, nm->w, &tw, &w);
    if (rc == DP_OK) rc = dp_layer_norm_backward(dx, dw, db, G, x, w, mu, rstd, accumulate);
    dp_tensor_release(&tw);
    return rc;
}
