/* dpsgd_fsdp.c: fsdp (ZeRO-3) parameters. Every tensor, trainable or frozen, is cut as zero2 cuts
 * it (dpsgd_shard.c); it keeps its shape and dtype in dp_param.value but no storage outside a pass
 * that reads it: this rank's part (s = ceil(n / N) elements, zeros after its own) lives in
 * dp_param.part under `parameters` in value's dtype (the f32 master of a trainable tensor, a frozen
 * LoRA base in its own dtype: bf16 in a bf16 model), the optimizer steps a trainable part there,
 * and the model's block weights provider all-gathers a block's weights (or a pseudo-block's: the
 * embeddings, DP_MODEL_EMBEDDINGS; the final norm and the head, DP_MODEL_HEAD, which a tied head's
 * token embedding is read by too) before each pass and releases them after, in the dtype the pass
 * reads: a bf16 model's GEMM weight with an f32 master into its bf16 compute copy (the part cast to
 * bf16 first, so bf16 goes on the wire, as PyTorch FSDP's mixed precision), everything else into
 * value. Gradients (f32) are reduce-scattered once complete: per block (the head's with it) in a
 * backward that accumulates them, the embeddings' after it; per block in bk's clip as each block's
 * books are formed (dpsgd_fsdp_reduce_block), the tensors outside the blocks after the last clip
 * (dpsgd_shard_reduce); dpsgd_fsdp_unshard gathers the whole model again at the end of training. */
#include "dpsgd_impl.h"

#include "error.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* What the pass over block (or pseudo-block) `layer` reads of model parameter i: -1 nothing, 0 its
 * value, 1 its bf16 compute copy. Its own block's pass reads the copy a GEMM reads (the value for
 * the embedding lookup); a tied head (DP_MODEL_HEAD) reads the token embedding as its GEMM weight. */
static int reads(const dpsgd *dp, int i, int64_t layer) {
    const dpsgd_fsdp_held *h = &dp->fsdp_held[i];
    const dp_param *p = dp_model_param(dp->model, i);
    if (!h->parted) return -1;
    if (h->block == layer) return h->compute && layer != DP_MODEL_EMBEDDINGS;
    if (layer == DP_MODEL_HEAD && p->kind == DP_PARAM_EMBEDDING && dp_model_config_of(dp->model)->tie_head)
        return h->compute;
    return -1;
}

void dpsgd_fsdp_drop(dp_param *p, int compute) { dp_tensor_drop_storage(compute ? &p->compute : &p->value); }

int dpsgd_fsdp_gather(dpsgd *dp, dp_param *p, int compute) {
    dp_tensor *into = compute ? &p->compute : &p->value;
    dp_dtype dt = compute ? DP_BF16 : p->value.dtype;
    int ndim = p->value.ndim;
    int64_t shape[DP_MAX_DIMS], pshape[1] = {p->part.numel};
    memcpy(shape, p->value.shape, sizeof shape);
    dp_tensor cast = {0};
    const dp_tensor *part = &p->part;
    int rc = DP_OK;
    if (p->part.dtype != dt) { /* the f32 master part in the compute dtype: what goes on the wire */
        rc = dp_tensor_init_module(&cast, dp->dev, dt, 1, pshape, DP_CAT_TEMP, p->module);
        if (rc == DP_OK) rc = dp_tensor_copy(&cast, &p->part);
        part = &cast;
    }
    if (rc == DP_OK) rc = dp_tensor_init_module(into, dp->dev, dt, ndim, shape, DP_CAT_PARAMETERS, p->module);
    if (rc == DP_OK) rc = dpsgd_gather_parts(dp, p, part, into);
    dp_tensor_release(&cast);
    if (rc != DP_OK) {
        if (into->alloc.live) dp_tensor_release(into);
        into->ndim = ndim;
        into->numel = p->value.numel;
        into->dtype = dt;
        into->dev = dp->dev;
        memcpy(into->shape, shape, sizeof shape);
    }
    return rc;
}

static int acquire(void *ctx, dp_model *m, int64_t layer) {
    dpsgd *dp = ctx;
    int n = dp_model_param_count(m);
    for (int i = 0; i < n; i++) {
        int what = reads(dp, i, layer);
        if (what < 0) continue;
        int rc = dpsgd_fsdp_gather(dp, dp_model_param(m, i), what);
        if (rc != DP_OK) {
            for (int j = 0; j < i; j++)
                if (reads(dp, j, layer) >= 0) dpsgd_fsdp_drop(dp_model_param(m, j), reads(dp, j, layer));
            return rc;
        }
    }
    return DP_OK;
}

/* block l's gradient of this backward reduce-scattered into its part and added to the step's */
static int reduce_block(dpsgd *dp, int64_t layer) {
    for (int k = 0; k < dp->n_params; k++) {
        dp_param *p = dp->params[k];
        if (dp->fsdp_block[k] != layer || !p->grad.alloc.live) continue;
        DP_TRY(dpsgd_shard_reduce(dp, p)); /* p->grad is now this rank's part of it */
        if (!dp->fsdp_acc[k].alloc.live) {
            dp->fsdp_acc[k] = p->grad;
            memset(&p->grad, 0, sizeof p->grad);
            continue;
        }
        int rc = dp_axpy(&dp->fsdp_acc[k], 1.0f, &p->grad);
        dp_tensor_release(&p->grad);
        DP_TRY(rc);
    }
    return DP_OK;
}

int dpsgd_fsdp_reduce_block(dpsgd *dp, int64_t layer) {
    for (int k = 0; k < dp->n_params; k++) /* every rank reduces every tensor of the block: the calls pair */
        if (dp->fsdp_block[k] == layer) DP_TRY(dpsgd_ensure_grad(dp, dp->params[k]));
    return reduce_block(dp, layer);
}

static void release(void *ctx, dp_model *m, int64_t layer) {
    dpsgd *dp = ctx;
    int n = dp_model_param_count(m);
    for (int i = 0; i < n; i++)
        if (reads(dp, i, layer) >= 0) dpsgd_fsdp_drop(dp_model_param(m, i), reads(dp, i, layer));
    if (dp->fsdp_grads && dp->fsdp_rc == DP_OK) dp->fsdp_rc = reduce_block(dp, layer);
}

int dpsgd_fsdp_gather_only(dpsgd *dp, int64_t layer) {
    DP_TRY(acquire(dp, dp->model, layer));
    release(dp, dp->model, layer);
    return DP_OK;
}

int dpsgd_fsdp_backward(dpsgd *dp, const dp_backward_opts *o) {
    /* a backward that makes weight gradients: the model's own, or twopass's forming hooks' */
    if (!dp->fsdp_block || !(o->weight_grads || dp->form_factors)) return dp_model_backward(dp->model, o);
    dp->fsdp_grads = 1;
    dp->fsdp_rc = DP_OK;
    int rc = dp_model_backward(dp->model, o);
    dp->fsdp_grads = 0;
    if (rc == DP_OK && dp->fsdp_rc == DP_OK) /* the embeddings' gradient is complete at the backward's end */
        dp->fsdp_rc = reduce_block(dp, DP_MODEL_EMBEDDINGS);
    return rc != DP_OK ? rc : dp->fsdp_rc;
}

int dpsgd_fsdp_take_part(dpsgd *dp, int k) {
    if (!dp->fsdp_acc || !dp->fsdp_acc[k].alloc.live) return 0;
    dp_tensor_release(&dp->params[k]->grad);
    dp->params[k]->grad = dp->fsdp_acc[k];
    memset(&dp->fsdp_acc[k], 0, sizeof dp->fsdp_acc[k]);
    return 1;
}

int dpsgd_fsdp_setup(dpsgd *dp) {
    dp_model *m = dp->model;
    if (!m) return dp_error_set(DP_EINVAL, "distributed.strategy: fsdp needs the wrapper's model");
    int n = dp_model_param_count(m);
    int64_t r = dp->comm->rank, N = dp->comm->world_size;
    const dp_model_config *c = dp_model_config_of(m);
    int held_in_parts = dp_model_held_in_parts(m);
    if (held_in_parts && (c->parts_world != N || c->parts_rank != r))
        return dp_error_set(DP_EINVAL,
                            "distributed: the model was built in parts for rank %lld of a world of %lld; this run is "
                            "rank %lld of %lld (build it in parts for this run's rank and world, or whole)",
                            (long long)c->parts_rank, (long long)c->parts_world, (long long)r, (long long)N);
    DP_TRY(dpsgd_shard_setup(dp));
    dp->fsdp_block = malloc((size_t)(dp->n_params ? dp->n_params : 1) * sizeof *dp->fsdp_block);
    dp->fsdp_acc = calloc((size_t)(dp->n_params ? dp->n_params : 1), sizeof *dp->fsdp_acc);
    dp->fsdp_held = malloc((size_t)(n ? n : 1) * sizeof *dp->fsdp_held);
    if (!dp->fsdp_block || !dp->fsdp_acc || !dp->fsdp_held) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int k = 0; k < dp->n_params; k++) dp->fsdp_block[k] = dpsgd_param_block(dp->params[k]);
    for (int i = 0; i < n; i++) dp->fsdp_held[i] = (dpsgd_fsdp_held){0, 0, 0};
    /* the model says it is in this rank's parts before the first cut, so that a setup that fails
     * part-way leaves a model whose parts a second distribute to this rank takes as they are */
    if (!held_in_parts) dp_model_set_parts(m, N, r);
    for (int i = 0; i < n; i++) {
        dp_param *p = dp_model_param(m, i);
        /* rank r's elements [r s, min(n, (r+1) s)): zero2's slice (dpsgd_shard_setup), frozen tensors too;
         * a model built in parts for this rank (checked above) holds them already */
        if (!p->part.alloc.live) DP_TRY(dp_param_cut(p, N, r));
        dp->fsdp_held[i] = (dpsgd_fsdp_held){dpsgd_param_block(p), p->compute_copy, 1};
    }
    dp_block_weights w = {dp, acquire, release};
    dp_model_set_block_weights(m, &w);
    return DP_OK;
}

int dpsgd_fsdp_after_step(dpsgd *dp) {
    if (!dp->fsdp_block) return DP_OK; /* unsharded already */
    for (int k = 0; k < dp->n_params; k++)
        dp_tensor_release(&dp->params[k]->grad); /* the part was spent; the next pass gathers */
    return DP_OK;
}

/* p's whole value from the parts (its dtype), and its bf16 compute copy rebuilt from it */
static int unshard_param(dpsgd *dp, dp_param *p, int compute) {
    DP_TRY(dpsgd_fsdp_gather(dp, p, 0));
    if (compute) {
        DP_TRY(dp_tensor_init_module(&p->compute, dp->dev, DP_BF16, p->value.ndim, p->value.shape, DP_CAT_PARAMETERS,
                                     p->module));
        DP_TRY(dp_tensor_copy(&p->compute, &p->value));
    }
    dp_tensor_release(&p->part);
    return DP_OK;
}

int dpsgd_fsdp_unshard(dpsgd *dp) {
    if (!dp->fsdp_block) return DP_OK;
    int n = dp_model_param_count(dp->model);
    for (int i = 0; i < n; i++) {
        dp_param *p = dp_model_param(dp->model, i);
        if (!dp->fsdp_held[i].parted || p->part.alloc.live == 0) continue;
        DP_TRY(unshard_param(dp, p, dp->fsdp_held[i].compute));
        dp->fsdp_held[i].parted = 0;
    }
    dp_model_set_block_weights(dp->model, NULL);
    dp_model_set_parts(dp->model, 0, 0); /* built in parts or cut here, it is whole now */
    for (int k = 0; k < dp->n_params; k++) dp_tensor_release(&dp->fsdp_acc[k]);
    free(dp->fsdp_block);
    free(dp->fsdp_acc);
    free(dp->fsdp_held);
    dp->fsdp_block = NULL;
    dp->fsdp_acc = NULL;
    dp->fsdp_held = NULL;
    dpsgd_shard_clear(dp);
    return DP_OK;
}

void dpsgd_fsdp_clear(dpsgd *dp) {
    for (int k = 0; dp->fsdp_acc && k < dp->n_params; k++) dp_tensor_release(&dp->fsdp_acc[k]);
    free(dp->fsdp_acc);
    dp->fsdp_acc = NULL;
    /* the parts stay the model's (dp_param.part, the configuration's parts): its whole values have no
     * storage, so they are all it holds; whatever reads a part-held tensor refuses it, and a second
     * distribute to this rank takes them as they are */
    free(dp->fsdp_held);
    dp->fsdp_held = NULL;
    if (!dp->fsdp_block) return;
    if (dp->model) dp_model_set_block_weights(dp->model, NULL);
    free(dp->fsdp_block);
    dp->fsdp_block = NULL;
    dpsgd_shard_clear(dp);
}
