/* dpsgd_state.c: the wrapper's per-batch state, shared by every dpsgd_*.c file: the trainable
 * parameters' norm rows, the books bk keeps, the layer records, gradients made on demand, and
 * their release. Helpers only: nothing here calls the conductor (dpsgd_step.c) or a formula. */
#include "dpsgd_impl.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

int64_t dpsgd_param_block(const dp_param *p) {
    static const char *const prefixes[] = {"model.layers.", "transformer.h."}; /* llama's, gpt's */
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
        size_t len = strlen(prefixes[k]);
        if (strncmp(p->name, prefixes[k], len) == 0 && p->name[len] >= '0' && p->name[len] <= '9')
            return strtoll(p->name + len, NULL, 10);
    }
    return p->kind == DP_PARAM_EMBEDDING || p->kind == DP_PARAM_POSITION ? DP_MODEL_EMBEDDINGS : DP_MODEL_HEAD;
}

int dpsgd_param_index(const dpsgd *dp, const dp_param *p) {
    for (int k = 0; k < dp->n_params; k++)
        if (dp->params[k] == p) return k;
    return -1;
}

int dpsgd_norm_row(dpsgd *dp, const dp_param *p, dp_tensor **row, int *accumulate) {
    int k = dpsgd_param_index(dp, p);
    if (k < 0) return dp_error_set(DP_EINTERNAL, "dp: hook for '%s', which is not trainable here", p->name);
    if (!dp->sq_norms.alloc.live) { /* the first hook of this backward: every parameter's row */
        int64_t shape[2] = {dp->n_params, dp->batch};
        DP_TRY(dp_tensor_init_module(&dp->sq_norms, dp->dev, DP_F32, 2, shape, DP_CAT_NORM_SAMPLES, DP_MODULE_NONE));
        for (int j = 0; j < dp->n_params; j++)
            DP_TRY(dp_tensor_view(&dp->sq_rows[j], &dp->sq_norms, (int64_t)j * dp->batch, 1, &dp->batch));
    }
    *row = &dp->sq_rows[k];
    *accumulate = dp->sq_written[k];
    dp->sq_written[k] = 1;
    return DP_OK;
}

int dpsgd_record_layer(dpsgd *dp, uint32_t module, const char *kind, dpsgd_formulation f) {
    if (dp->n_layers == dp->cap_layers) {
        size_t cap = dp->cap_layers ? 2 * dp->cap_layers : 64;
        dpsgd_layer_info *l = realloc(dp->layers, cap * sizeof *l);
        if (!l) return dp_error_set(DP_EOOM, "dp: out of host memory for the layer list");
        dp->layers = l;
        dp->cap_layers = cap;
    }
    dp->layers[dp->n_layers++] = (dpsgd_layer_info){.module = module, .kind = kind, .norms = f};
    return DP_OK;
}

dpsgd_book *dpsgd_book_add(dpsgd *dp, dpsgd_book_kind kind) {
    if (dp->n_books == dp->cap_books) {
        int cap = dp->cap_books ? 2 * dp->cap_books : 64;
        dpsgd_book *b = realloc(dp->books, (size_t)cap * sizeof *b);
        if (!b) {
            dp_error_set(DP_EOOM, "dp: out of host memory for the books");
            return NULL;
        }
        dp->books = b;
        dp->cap_books = cap;
    }
    dpsgd_book *b = &dp->books[dp->n_books++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->scale = 1.0f;
    b->block = -1;
    return b;
}

int dpsgd_ensure_grad(dpsgd *dp, dp_param *p) {
    if (p->grad.numel) return DP_OK;
    DP_TRY(
        dp_tensor_init_module(&p->grad, dp->dev, DP_F32, p->value.ndim, p->value.shape, DP_CAT_GRADIENTS, p->module));
    int rc = dp_tensor_fill(&p->grad, 0.0);
    if (rc != DP_OK) dp_tensor_release(&p->grad);
    return rc;
}

void dpsgd_release_batch_state(dpsgd *dp) {
    for (int k = 0; k < dp->n_books; k++) {
        dp_tensor_release(&dp->books[k].psg);
        dp_tensor_release(&dp->books[k].out_grad);
        dp_tensor_release(&dp->books[k].ids);
    }
    dp->n_books = 0;
    dp_tensor_release(&dp->tied.psg);
    dp_tensor_release(&dp->tied.rows);
    dp->tied.wte = NULL;
    dp_tensor_release(&dp->shared.gram);
    dp->shared.src = NULL;
    dp_tensor_release(&dp->sq_norms);
    for (int k = 0; k < dp->n_params; k++) dp->sq_written[k] = 0;
    dp_tensor_release(&dp->clip_dev);
}
