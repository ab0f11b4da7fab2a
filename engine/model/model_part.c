/* model_part.c: a parameter's part for one rank of a world (fsdp): the one cutting of a tensor,
 * shared by a model built in parts (dp_model_build_params, checkpoint loading) and fsdp's
 * distribute of a model built whole (engine/dp/dpsgd_fsdp.c). */
#include "model_internal.h"

#include "error.h"

int64_t dp_part_len(int64_t n, int64_t world) { return world > 1 ? (n + world - 1) / world : n; }

int dp_model_config_parted(const dp_model_config *cfg) { return cfg->parts_world > 1; }

void dp_tensor_drop_storage(dp_tensor *t) {
    int ndim = t->ndim;
    int64_t numel = t->numel;
    dp_tensor_release(t);
    t->ndim = ndim;
    t->numel = numel;
}

void dp_part_range(int64_t n, int64_t world, int64_t rank, int64_t *lo, int64_t *own) {
    int64_t s = dp_part_len(n, world);
    *lo = s * rank < n ? s * rank : n;
    *own = (*lo + s < n ? *lo + s : n) - *lo;
}

int dp_part_fill(dp_tensor *part, const dp_tensor *whole, int64_t world, int64_t rank) {
    int64_t lo, own;
    dp_part_range(whole->numel, world, rank, &lo, &own);
    int64_t mine[1] = {own};
    dp_tensor dst, src;
    int rc = dp_tensor_fill(part, 0.0);
    if (rc == DP_OK && own > 0) {
        rc = dp_tensor_view(&dst, part, 0, 1, mine);
        if (rc == DP_OK) rc = dp_tensor_view(&src, whole, lo, 1, mine);
        if (rc == DP_OK) rc = dp_tensor_copy(&dst, &src);
    }
    return rc;
}

int dp_param_part_from(dp_param *p, const dp_tensor *whole, int64_t world, int64_t rank) {
    int64_t n = whole->numel, shape[1] = {dp_part_len(n, world)};
    if (rank < 0 || (world > 1 && rank >= world) || whole->dtype != p->value.dtype || n != p->value.numel)
        return dp_error_set(DP_EINTERNAL, "model: '%s': part %lld of %lld from a tensor of another dtype or size",
                            p->name, (long long)rank, (long long)world);
    if (!p->part.alloc.live)
        DP_TRY(dp_tensor_init_module(&p->part, whole->dev, whole->dtype, 1, shape, DP_CAT_PARAMETERS, p->module));
    return dp_part_fill(&p->part, whole, world, rank);
}

int dp_param_cut(dp_param *p, int64_t world, int64_t rank) {
    DP_TRY(dp_param_part_from(p, &p->value, world, rank));
    dp_tensor_drop_storage(&p->value);
    if (p->compute.alloc.live) dp_tensor_drop_storage(&p->compute);
    return DP_OK;
}

void dp_model_set_parts(dp_model *m, int64_t world, int64_t rank) {
    m->cfg.parts_world = world;
    m->cfg.parts_rank = rank;
}

int dp_model_held_in_parts(dp_model *m) {
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].part.alloc.live) return 1;
    return 0;
}
