/* dpsgd_noise.c: the Gaussian mechanism, once per logical step. Every trainable gradient gets
 * N(0, (sigma ||C||_2)^2) per coordinate (||C||_2 over the clipping groups' bounds: C for flat),
 * added in place (no noise buffer) from the Philox stream of the step under the configured seed;
 * element j of parameter k is element offset_k + j of that stream (offsets: the trainable tensors concatenated in model
 * order), so the noise is the same bits on every device and independent of how tensors are laid out. Then the noisy sum
 * is divided by the expected logical batch size (Opacus's DPOptimizer). */
#include "dpsgd_impl.h"

#include "dispatch.h"
#include "error.h"
#include "ledger.h"
#include "ops.h"

/* "DPnoise" in the top bytes keeps the noise streams apart from the sampling streams and from
 * the model's initialisation streams when a script reuses one seed for both. */
#define NOISE_STREAM_TAG 0x4450000000000000ull

uint64_t dpsgd_noise_stream(int64_t step) { return NOISE_STREAM_TAG | ((uint64_t)step & 0xffffffffffffull); }

int dpsgd_add_noise(dpsgd *dp) {
    /* sigma C for flat; adaptive: its raised multiplier times the step's bound */
    float std = (float)(dpsgd_adaptive_noise_multiplier(&dp->cfg) * dpsgd_noise_norm(dp));
    float inv = (float)(1.0 / (double)dp->cfg.expected_batch_size);
    uint64_t stream = dpsgd_noise_stream(dp->steps);
    for (int k = 0; k < dp->n_params; k++) {
        dp_param *p = dp->params[k];
        DP_TRY(dpsgd_ensure_grad(dp, p));
        /* zero2: this rank's slice alone, at its elements' offsets in the stream */
        size_t n = (size_t)(p->sharded ? p->shard_n : p->grad.numel);
        uint64_t at = (uint64_t)(dp->offsets[k] + (p->sharded ? p->shard_lo : 0));
        if (n == 0) continue;
        if (std > 0.0f) {
            /* Philox4x32-10 and Box-Muller per 4 elements (counted as 32 flops per element), added
             * and divided in one pass: the same roundings as the addition, then dp_scale */
            dp_ledger_add("dp_noise", 32.0 * (double)n + (double)n, 8.0 * (double)n);
            DP_TRY(DP_DISPATCH(dp->dev, rand, DP_F32, p->grad.data, n, DP_RAND_NORMAL, 0.0f, std, dp->cfg.seed, stream,
                               at, 1, inv));
        } else {
            DP_TRY(dp_scale(&p->grad, inv));
        }
    }
    return DP_OK;
}
