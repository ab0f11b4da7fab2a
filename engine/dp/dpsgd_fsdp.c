/* dpsgd_fsdp.c: fsdp (ZeRO-3) parameters. Every trainable tensor is cut as zero2 cuts it
 * (dpsgd_shard.c); a block's tensor keeps its shape in dp_param.value but no storage outside a
 * pass over its block: this rank's part (s = ceil(n / N) floats, zeros after shard_n) lives in
 * dp_param.part under `parameters`, the optimizer steps it there, and the model's block weights
 * provider all-gathers the block's values before each pass and releases them after. The
 * embeddings, the final norm and the head (not blocks) stay whole, as zero2 keeps them. Gradients
 * are reduce-scattered after the clip (dpsgd_shard_reduce); dpsgd_fsdp_unshard gathers the whole
 * model again at the end of training. f32 models without frozen parameters only. */
#include "dpsgd_impl.h"

#include "error.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* the block index of p from its Hugging Face name, or -1 outside the blocks */
static int64_t block_of(const dp_model *m, const dp_param *p) {
    const char *prefix = dp_model_config_of(m)->arch == DP_ARCH_GPT ? "transformer.h." : "model.layers.";
    size_t n = strlen(prefix);
    if (strncmp(p->name, prefix, n) != 0) return -1;
    return strtoll(p->name + n, NULL, 10);
}

static int64_t part_len(const dpsgd *dp, const dp_param *p) {
    int64_t N = dp->comm->world_size;
    return (p->value.numel + N - 1) / N;
}

/* value keeps dtype and shape, loses its storage */
static void drop_value(dp_param *p) {
    int ndim = p->value.ndim;
    int64_t numel = p->value.numel;
    dp_tensor_release(&p->value);
    p->value.ndim = ndim;
    p->value.numel = numel;
}

/* every rank's part into a fresh value of p's shape under `parameters` */
static int gather_value(dpsgd *dp, dp_param *p) {
    int64_t s = part_len(dp, p), n = p->value.numel, N = dp->comm->world_size;
    int ndim = p->value.ndim;
    int64_t shape[DP_MAX_DIMS];
    memcpy(shape, p->value.shape, sizeof shape);
    DP_TRY(dp_tensor_init_module(&p->value, dp->dev, DP_F32, ndim, shape, DP_CAT_PARAMETERS, p->module));
    if (s * N == n) return dp_comm_all_gather(dp->comm, &p->part, &p->value);
    int64_t wshape[1] = {s * N}, head[1] = {n};
    dp_tensor whole, dst, src;
    int rc = dp_tensor_init_module(&whole, dp->dev, DP_F32, 1, wshape, DP_CAT_TEMP, p->module);
    if (rc == DP_OK) {
        rc = dp_comm_all_gather(dp->comm, &p->part, &whole);
        if (rc == DP_OK) rc = dp_tensor_view(&dst, &p->value, 0, 1, head);
        if (rc == DP_OK) rc = dp_tensor_view(&src, &whole, 0, 1, head);
        if (rc == DP_OK) rc = dp_tensor_copy(&dst, &src);
        dp_tensor_release(&whole);
    }
    if (rc != DP_OK) drop_value(p);
    return rc;
}

static int acquire(void *ctx, dp_model *m, int64_t layer) {
    dpsgd *dp = ctx;
    (void)m;
    for (int k = 0; k < dp->n_params; k++) {
        if (dp->fsdp_block[k] != layer) continue;
        int rc = gather_value(dp, dp->params[k]);
        if (rc != DP_OK) {
            for (int j = 0; j < k; j++)
                if (dp->fsdp_block[j] == layer) drop_value(dp->params[j]);
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
    (void)m;
    for (int k = 0; k < dp->n_params; k++)
        if (dp->fsdp_block[k] == layer) drop_value(dp->params[k]);
    if (dp->fsdp_grads && dp->fsdp_rc == DP_OK) dp->fsdp_rc = reduce_block(dp, layer);
}

int dpsgd_fsdp_gather_only(dpsgd *dp, int64_t layer) {
    DP_TRY(acquire(dp, dp->model, layer));
    release(dp, dp->model, layer);
    return DP_OK;
}

int dpsgd_fsdp_backward(dpsgd *dp, const dp_backward_opts *o) {
    if (!dp->fsdp_block || !o->weight_grads) return dp_model_backward(dp->model, o);
    dp->fsdp_grads = 1;
    dp->fsdp_rc = DP_OK;
    int rc = dp_model_backward(dp->model, o);
    dp->fsdp_grads = 0;
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
    const dp_model_config *cfg = dp_model_config_of(m);
    if (cfg->dtype != DP_F32)
        return dp_error_set(DP_ENOTSUP,
                            "distributed.strategy: fsdp is not implemented for dtype %s yet "
                            "(supported: f32; bf16 under ddp, zero2)",
                            dp_dtype_name(cfg->dtype));
    for (int i = 0; i < dp_model_param_count(m); i++)
        if (!dp_model_param(m, i)->trainable)
            return dp_error_set(DP_ENOTSUP, "distributed.strategy: fsdp is not implemented for frozen parameters "
                                            "(LoRA) yet (supported: full fine-tuning; LoRA under ddp, zero2)");
    DP_TRY(dpsgd_shard_setup(dp));
    dp->fsdp_block = malloc((size_t)(dp->n_params ? dp->n_params : 1) * sizeof *dp->fsdp_block);
    dp->fsdp_acc = calloc((size_t)(dp->n_params ? dp->n_params : 1), sizeof *dp->fsdp_acc);
    if (!dp->fsdp_block || !dp->fsdp_acc) return dp_error_set(DP_EOOM, "dp: out of host memory");
    for (int k = 0; k < dp->n_params; k++) {
        dp_param *p = dp->params[k];
        dp->fsdp_block[k] = block_of(m, p);
        if (dp->fsdp_block[k] < 0) continue;
        int64_t shape[1] = {part_len(dp, p)}, mine[1] = {p->shard_n};
        dp_tensor dst, src;
        DP_TRY(dp_tensor_init_module(&p->part, dp->dev, DP_F32, 1, shape, DP_CAT_PARAMETERS, p->module));
        int rc = dp_tensor_fill(&p->part, 0.0);
        if (rc == DP_OK && p->shard_n > 0) {
            rc = dp_tensor_view(&dst, &p->part, 0, 1, mine);
            if (rc == DP_OK) rc = dp_tensor_view(&src, &p->value, p->shard_lo, 1, mine);
            if (rc == DP_OK) rc = dp_tensor_copy(&dst, &src);
        }
        if (rc != DP_OK) return rc;
        drop_value(p);
    }
    dp_block_weights w = {dp, acquire, release};
    dp_model_set_block_weights(m, &w);
    return DP_OK;
}

int dpsgd_fsdp_after_step(dpsgd *dp) {
    if (!dp->fsdp_block) return DP_OK; /* unsharded already */
    for (int k = 0; k < dp->n_params; k++) {
        if (dp->fsdp_block[k] < 0)
            DP_TRY(dpsgd_shard_gather(dp, dp->params[k])); /* outside the blocks: whole, as zero2 */
        else
            dp_tensor_release(&dp->params[k]->grad); /* the part was spent; the next pass gathers */
    }
    return DP_OK;
}

int dpsgd_fsdp_unshard(dpsgd *dp) {
    if (!dp->fsdp_block) return DP_OK;
    for (int k = 0; k < dp->n_params; k++) {
        dp_param *p = dp->params[k];
        if (dp->fsdp_block[k] < 0 || p->part.alloc.live == 0) continue;
        DP_TRY(gather_value(dp, p));
        dp_tensor_release(&p->part);
    }
    dp_model_set_block_weights(dp->model, NULL);
    for (int k = 0; k < dp->n_params; k++) dp_tensor_release(&dp->fsdp_acc[k]);
    free(dp->fsdp_block);
    free(dp->fsdp_acc);
    dp->fsdp_block = NULL;
    dp->fsdp_acc = NULL;
    dpsgd_shard_clear(dp);
    return DP_OK;
}

void dpsgd_fsdp_clear(dpsgd *dp) {
    for (int k = 0; dp->fsdp_acc && k < dp->n_params; k++) dp_tensor_release(&dp->fsdp_acc[k]);
    free(dp->fsdp_acc);
    dp->fsdp_acc = NULL;
    if (!dp->fsdp_block) return;
    for (int k = 0; k < dp->n_params; k++) dp_tensor_release(&dp->params[k]->part);
    if (dp->model) dp_model_set_block_weights(dp->model, NULL);
    free(dp->fsdp_block);
    dp->fsdp_block = NULL;
    dpsgd_shard_clear(dp);
}
