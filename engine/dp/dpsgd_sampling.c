/* dpsgd_sampling.c: logical batches. Poisson sampling (each of the N samples joins with probability
 * q, Opacus's UniformWithReplacementSampler) draws only the size here: N uniforms from the
 * Philox stream of the step, counted below q. Fixed batches always have the expected size. A
 * logical batch is split into physical batches of at most max_physical_batch_size samples
 * (Opacus's BatchMemoryManager); noise is added once per logical batch. */
#include "dpsgd_impl.h"

#include "error.h"
#include "philox.h"

#include <math.h>
#include <string.h>

#define SAMPLING_STREAM_TAG 0x5350000000000000ull /* "SP": apart from the noise streams */

int dpsgd_sampling_setup(dpsgd_config *cfg, int64_t model_batch) {
    if (cfg->sample_rate < 0.0 || cfg->sample_rate > 1.0 || cfg->sample_rate != cfg->sample_rate)
        return dp_error_set(DP_EINVAL, "dp: sample_rate %g is outside (0, 1]", cfg->sample_rate);
    if (cfg->dataset_size < 0 || cfg->expected_batch_size < 0 || cfg->max_physical_batch_size < 0)
        return dp_error_set(DP_EINVAL, "dp: dataset_size, expected_batch_size and max_physical_batch_size must "
                                       "be positive");
    if (cfg->poisson) {
        if (cfg->dataset_size <= 0)
            return dp_error_set(DP_EINVAL, "dp: poisson sampling needs dataset_size (the N each step samples from)");
        if (cfg->sample_rate == 0.0) {
            if (cfg->expected_batch_size <= 0)
                return dp_error_set(DP_EINVAL, "dp: poisson sampling needs sample_rate or expected_batch_size");
            cfg->sample_rate = (double)cfg->expected_batch_size / (double)cfg->dataset_size;
        } else if (cfg->expected_batch_size == 0) {
            /* Opacus: expected_batch_size = int(len(dataset) * sample_rate) */
            cfg->expected_batch_size = (int64_t)((double)cfg->dataset_size * cfg->sample_rate);
        }
        if (cfg->expected_batch_size < 1)
            return dp_error_set(DP_EINVAL, "dp: sample_rate %g of dataset_size %lld expects no sample per step",
                                cfg->sample_rate, (long long)cfg->dataset_size);
    } else {
        if (cfg->expected_batch_size == 0) cfg->expected_batch_size = model_batch;
        if (cfg->sample_rate == 0.0 && cfg->dataset_size > 0)
            cfg->sample_rate = (double)cfg->expected_batch_size / (double)cfg->dataset_size;
    }
    if (cfg->sample_rate > 1.0)
        return dp_error_set(DP_EINVAL, "dp: expected_batch_size %lld exceeds dataset_size %lld",
                            (long long)cfg->expected_batch_size, (long long)cfg->dataset_size);
    /* The accountant takes q, the noise is divided by the expected batch size, and Poisson draws
     * about q N samples a step: given all three, they must agree (Opacus: expected = int(q N)). */
    if (cfg->dataset_size > 0) {
        double qn = cfg->sample_rate * (double)cfg->dataset_size;
        if (!(fabs(qn - (double)cfg->expected_batch_size) < 1.0))
            return dp_error_set(DP_EINVAL,
                                "dp: sample_rate %g x dataset_size %lld = %g samples a step, but the expected "
                                "batch size is %lld: the accountant's q, the sampler and the noise's divisor "
                                "must agree (give dataset_size %.0f for this batch, or leave sample_rate out "
                                "to derive it from the batch)",
                                cfg->sample_rate, (long long)cfg->dataset_size, qn, (long long)cfg->expected_batch_size,
                                floor((double)cfg->expected_batch_size / cfg->sample_rate + 0.5));
    }
    if (cfg->max_physical_batch_size == 0) cfg->max_physical_batch_size = model_batch;
    if (cfg->max_physical_batch_size > model_batch)
        return dp_error_set(DP_EINVAL, "dp: max_physical_batch_size %lld exceeds the model's batch %lld",
                            (long long)cfg->max_physical_batch_size, (long long)model_batch);
    return DP_OK;
}

/* Splits the plan's local_size samples into physical batches of at most max_physical as Opacus's
 * BatchMemoryManager does: numpy.array_split into ceil(n / max) parts, the first n mod parts one
 * larger, so the physical batches differ by at most one sample (dpsgd_step_plan_batch). */
static void split_local(dpsgd_step_plan *plan, int64_t max_physical) {
    int64_t n = plan->local_size;
    /* ceil(n / max) without n + max - 1, which overflows for a max near INT64_MAX */
    plan->n_physical = n > 0 && max_physical > 0 ? n / max_physical + (n % max_physical != 0) : 0;
    plan->physical_size = plan->n_physical > 0 ? (n + plan->n_physical - 1) / plan->n_physical : 0;
}

int dpsgd_sampling_plan(const dpsgd_config *cfg, int64_t k, dpsgd_step_plan *out) {
    /* the logical size: the members of step k, counted (none written) */
    dpsgd_split(dpsgd_sampling_members(cfg, k, NULL, 0), cfg->max_physical_batch_size, out);
    return DP_OK;
}

int dpsgd_sampling_slice(dpsgd_step_plan *plan, int rank, int world_size, int64_t max_physical) {
    int64_t n = plan->logical_size, N = world_size > 0 ? world_size : 1;
    plan->first = n * rank / N;
    plan->local_size = n * (rank + 1) / N - plan->first;
    split_local(plan, max_physical);
    return DP_OK;
}

void dpsgd_sampling_pad(dpsgd_step_plan *plan, int world_size, int64_t max_physical) {
    int64_t most = plan->n_physical;
    for (int r = 0; r < world_size; r++) {
        dpsgd_step_plan other = *plan;
        dpsgd_sampling_slice(&other, r, world_size, max_physical);
        if (other.n_physical > most) most = other.n_physical;
    }
    plan->n_padding = most - plan->n_physical;
}

void dpsgd_split(int64_t n, int64_t max_physical, dpsgd_step_plan *out) {
    out->logical_size = out->local_size = n;
    out->first = 0;
    out->n_padding = 0;
    split_local(out, max_physical);
}

int64_t dpsgd_sampling_members(const dpsgd_config *cfg, int64_t k, int64_t *out, int64_t cap) {
    int64_t n = 0, N = cfg->dataset_size;
    if (cfg->poisson) { /* each sample joins when its 23-bit uniform (2j+1)/2^24 is below q */
        uint64_t stream = SAMPLING_STREAM_TAG | ((uint64_t)k & 0xffffffffffffull);
        double q = cfg->sample_rate;
        for (int64_t blk = 0; blk * 4 < N; blk++) {
            dp_philox_out o = dp_philox4x32(cfg->seed, stream, (uint64_t)blk);
            for (int j = 0; j < 4 && blk * 4 + j < N; j++)
                if ((double)dp_philox_uniform_word(o.v[j]) < q) {
                    if (n < cap) out[n] = blk * 4 + j;
                    n++;
                }
        }
        return n;
    }
    /* fixed: the data set in order, batch after batch (wrapping round) */
    int64_t B = cfg->expected_batch_size;
    for (int64_t i = 0; i < B; i++, n++)
        if (n < cap) out[n] = N > 0 ? (int64_t)(((uint64_t)k * (uint64_t)B + (uint64_t)i) % (uint64_t)N) : i;
    return n;
}

int64_t dpsgd_poisson_members(uint64_t seed, int64_t step, double q, int64_t N, int64_t *out, int64_t cap) {
    dpsgd_config cfg; /* what the draw reads of a configuration */
    memset(&cfg, 0, sizeof cfg);
    cfg.poisson = 1, cfg.seed = seed, cfg.sample_rate = q, cfg.dataset_size = N;
    return dpsgd_sampling_members(&cfg, step, out, cap);
}

int64_t dpsgd_step_plan_batch(const dpsgd_step_plan *plan, int64_t k) {
    if (k < 0 || k >= plan->n_physical) return 0;
    int64_t n = plan->local_size, parts = plan->n_physical;
    return n / parts + (k < n % parts);
}
