/* test_dp_noise.c: the Gaussian mechanism and the sampling of logical batches.
 * - The noise added to (zero) gradients has mean 0 and standard deviation sigma C / E over 2^20
 *   draws: the mean within 5 standard errors (s / sqrt(n)), the variance within 5 standard
 *   errors of a normal sample variance (s^2 sqrt(2 / (n-1))), the mass within one s within 5
 *   binomial standard errors of 0.6827.
 * - Element j of trainable tensor k is exactly (sigma C z) / E with z the Philox normal of element
 *   offset_k + j of the step's stream: the same bits for the same seed, on every device.
 * - Noise adds to an existing gradient; steps and seeds give independent noise.
 * - Poisson sampling: logical batch sizes have mean q N and variance q (1-q) N (5 standard
 *   errors), split into physical batches that add up; fixed batches always have E samples.
 * - epsilon after the steps is the accountant's. */
#include "check.h"
#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd_impl.h"
#include "error.h"
#include "philox.h"
#include "rdp.h"
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dp_device *cpu;

static dp_param make_param(const char *name, int64_t numel) {
    dp_param p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.kind = DP_PARAM_LINEAR_W;
    p.trainable = 1;
    p.module = dp_module_intern(name);
    CHECK_OK(dp_tensor_init(&p.value, cpu, DP_F32, 1, &numel, DP_CAT_PARAMETERS));
    return p;
}

static dpsgd *noise_wrapper(dp_param **ps, int n, double sigma, double C, int64_t E, uint64_t seed) {
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    CHECK_OK(dpsgd_method_preset("flash_clip", &cfg.norms, &cfg.clip));
    cfg.noise_multiplier = sigma;
    cfg.max_grad_norm = C;
    cfg.expected_batch_size = E;
    cfg.seed = seed;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new_params(cpu, &cfg, ps, n, 8, &dp));
    return dp;
}

static void test_moments(void) {
    const int64_t n = 1 << 20;
    const double sigma = 1.5, C = 2.0, E = 4.0, s = sigma * C / E;
    dp_param p = make_param("noise.big", n);
    dp_param *ps[1] = {&p};
    dpsgd *dp = noise_wrapper(ps, 1, sigma, C, (int64_t)E, 9);
    CHECK_OK(dpsgd_noise(dp));
    const float *x = p.grad.data;
    double sum = 0.0, sq = 0.0;
    int64_t within = 0;
    for (int64_t j = 0; j < n; j++) sum += x[j];
    double mean = sum / (double)n;
    for (int64_t j = 0; j < n; j++) {
        sq += (x[j] - mean) * (x[j] - mean);
        within += fabs(x[j]) <= s;
    }
    double var = sq / (double)(n - 1), frac = (double)within / (double)n, p1 = 0.682689492137086;
    printf("noise: n %lld, mean %.3g (tol %.3g), std %.6g (want %.6g), within 1 std %.5f\n", (long long)n, mean,
           5.0 * s / sqrt((double)n), sqrt(var), s, frac);
    CHECK(fabs(mean) <= 5.0 * s / sqrt((double)n));
    CHECK(fabs(var - s * s) <= 5.0 * s * s * sqrt(2.0 / (double)(n - 1)));
    CHECK(fabs(frac - p1) <= 5.0 * sqrt(p1 * (1.0 - p1) / (double)n));
    dpsgd_free(dp);
    dp_tensor_release(&p.value);
    dp_tensor_release(&p.grad);
}

static void test_exact_bits(void) {
    const double sigma = 0.8, C = 1.25;
    const int64_t E = 3;
    /* 1003 elements: b starts inside a Philox block and spans the CPU's batches of 1024 values */
    dp_param a = make_param("noise.a", 1003), b = make_param("noise.b", 777);
    dp_param *ps[2] = {&a, &b};
    dpsgd *dp = noise_wrapper(ps, 2, sigma, C, E, 1234);
    /* an existing gradient: the noise adds to it */
    CHECK_OK(dp_tensor_init(&a.grad, cpu, DP_F32, 1, &a.value.numel, DP_CAT_GRADIENTS));
    CHECK_OK(dp_tensor_fill(&a.grad, 0.5));
    CHECK_OK(dpsgd_noise(dp)); /* step 0 */
    float std = (float)(sigma * C), inv = (float)(1.0 / (double)E);
    int bad = 0;
    for (int64_t j = 0; j < 1003; j++) {
        float z = dp_philox_normal(1234, dpsgd_noise_stream(0), (uint64_t)j);
        float want = (0.5f + std * z) * inv;
        bad += ((float *)a.grad.data)[j] != want;
    }
    for (int64_t j = 0; j < 777; j++) {
        float z = dp_philox_normal(1234, dpsgd_noise_stream(0), (uint64_t)(1003 + j)); /* b follows a */
        float want = (0.0f + std * z) * inv;
        bad += ((float *)b.grad.data)[j] != want;
    }
    CHECK_EQ_U64(bad, 0);
    /* the same seed and step: the same bits; the next step or another seed: other noise */
    float *first = malloc(777 * sizeof *first);
    memcpy(first, b.grad.data, 777 * sizeof *first);
    dpsgd *again = noise_wrapper(ps, 2, sigma, C, E, 1234);
    CHECK_OK(dp_tensor_fill(&b.grad, 0.0));
    CHECK_OK(dpsgd_noise(again));
    CHECK(memcmp(first, b.grad.data, 777 * sizeof *first) == 0);
    CHECK_OK(dp_tensor_fill(&b.grad, 0.0));
    CHECK_OK(dpsgd_noise(again)); /* step 1 */
    double dot = 0.0, n1 = 0.0, n2 = 0.0;
    for (int j = 0; j < 777; j++) {
        double u = first[j], v = ((float *)b.grad.data)[j];
        dot += u * v, n1 += u * u, n2 += v * v;
    }
    CHECK(fabs(dot / sqrt(n1 * n2)) < 5.0 / sqrt(777.0)); /* uncorrelated */
    dpsgd *other = noise_wrapper(ps, 2, sigma, C, E, 1235);
    CHECK_OK(dp_tensor_fill(&b.grad, 0.0));
    CHECK_OK(dpsgd_noise(other));
    CHECK(memcmp(first, b.grad.data, 777 * sizeof *first) != 0);
    free(first);
    dpsgd_free(dp);
    dpsgd_free(again);
    dpsgd_free(other);
    dp_tensor_release(&a.value);
    dp_tensor_release(&a.grad);
    dp_tensor_release(&b.value);
    dp_tensor_release(&b.grad);
}

static void test_sampling(void) {
    dp_param p = make_param("sampling", 4);
    dp_param *ps[1] = {&p};
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    CHECK_OK(dpsgd_method_preset("ghost", &cfg.norms, &cfg.clip));
    cfg.poisson = 1;
    cfg.dataset_size = 1000;
    cfg.sample_rate = 0.05;
    cfg.max_physical_batch_size = 8;
    cfg.seed = 5;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new_params(cpu, &cfg, ps, 1, 8, &dp));
    CHECK_EQ_U64(dpsgd_expected_batch_size(dp), 50); /* Opacus: int(N q) */
    const int steps = 2000;
    double sum = 0.0, sq = 0.0;
    int split_ok = 1;
    for (int s = 0; s < steps; s++) {
        dpsgd_step_plan plan;
        CHECK_OK(dpsgd_next_step(dp, &plan));
        int64_t total = 0;
        for (int64_t k = 0; k < plan.n_physical; k++) {
            int64_t nb = dpsgd_step_plan_batch(&plan, k);
            split_ok &= nb >= 1 && nb <= 8;
            total += nb;
        }
        split_ok &= total == plan.logical_size;
        sum += (double)plan.logical_size;
        sq += (double)plan.logical_size * (double)plan.logical_size;
    }
    CHECK(split_ok);
    double mean = sum / steps, var = sq / steps - mean * mean, want = 1000 * 0.05, wvar = want * 0.95;
    printf("poisson: mean %.3f (want %.1f), variance %.3f (want %.2f)\n", mean, want, var, wvar);
    CHECK(fabs(mean - want) <= 5.0 * sqrt(wvar / steps));
    CHECK(fabs(var - wvar) <= 5.0 * wvar * sqrt(2.0 / (steps - 1)));
    dpsgd_free(dp);
    /* fixed batches: always E, noise once per logical batch; epsilon from the accountant */
    cfg.poisson = 0;
    cfg.sample_rate = 0;
    cfg.expected_batch_size = 20;
    cfg.noise_multiplier = 1.1;
    CHECK_OK(dpsgd_new_params(cpu, &cfg, ps, 1, 8, &dp));
    dpsgd_step_plan plan;
    CHECK_OK(dpsgd_next_step(dp, &plan));
    CHECK_EQ_U64(plan.logical_size, 20);
    CHECK_EQ_U64(plan.n_physical, 3);
    /* 20 at most 8 a batch: Opacus's array_split gives 7, 7, 6 (not 8, 8, 4) */
    CHECK_EQ_U64(plan.physical_size, 7);
    CHECK_EQ_U64(dpsgd_step_plan_batch(&plan, 0), 7);
    CHECK_EQ_U64(dpsgd_step_plan_batch(&plan, 1), 7);
    CHECK_EQ_U64(dpsgd_step_plan_batch(&plan, 2), 6);
    CHECK_EQ_U64(dpsgd_step_plan_batch(&plan, 3), 0);
    for (int s = 0; s < 7; s++) CHECK_OK(dpsgd_noise(dp));
    double eps, want_eps;
    CHECK_OK(dpsgd_epsilon(dp, 1e-5, DP_ACCT_RDP, &eps));
    CHECK(dp_acct_rdp_sampled_epsilon(0.02, 1.1, 7, 1e-5, &want_eps, NULL, NULL, 0) == DP_ACCT_OK);
    CHECK(eps == want_eps);
    dp_acct_segment seg = {1.1, 0.02, 7};
    CHECK_OK(dpsgd_epsilon(dp, 1e-5, DP_ACCT_PLD, &eps));
    CHECK(dp_acct_epsilon(DP_ACCT_PLD, &seg, 1, 1e-5, NULL, &want_eps, NULL, NULL, 0) == DP_ACCT_OK);
    CHECK(eps == want_eps);
    dpsgd_free(dp);
    dp_tensor_release(&p.value);
    dp_tensor_release(&p.grad);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_moments();
    test_exact_bits();
    test_sampling();
    dp_engine_shutdown();
    return check_report("test_dp_noise");
}
