/* test_cuda_model.c: the Hugging Face fixtures (tests/fixtures/hf) on CUDA against the CPU:
 * the loss and every parameter gradient in f32 (1e-4 relative), and in bf16 against the CPU's
 * f32 and against the CPU's bf16 reference within the bounds stated below; one AdamW step from
 * the same gradients on both devices. Skipped (exit 77) without a GPU. */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "optim.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%) on every activation and on the
 * GEMMs' weight copies; through two blocks the loss moves by ~1e-3 relative and a gradient by
 * ~10% of its tensor's largest entry with independent signs, times the fixture's sensitivity
 * (weights drawn with std 0.3: attention nearly one-hot, which amplifies a score's change up to
 * ~2x); test_hf_llama3 argues the same bound for the CPU's bf16 path. An H100 measured
 * (2026-11-26): loss 1.2e-4 (gpt2), 1.6e-3 (llama), 2.8e-3 (llama3); gradients 0.041 (gpt2,
 * h.1.ln_1.bias), 0.053 (llama, layers.1.input_layernorm.weight), 0.178 (llama3,
 * layers.1.self_attn.q_proj.weight), 0.028 (llama3_mqa). What the kernels must get right is
 * held by the tighter bounds against the CPU's bf16 reference below. */
#define BF16_LOSS_REL 1e-2
#define BF16_GRAD_REL 2.5e-1
/* bf16 on CUDA against the CPU's bf16 reference, which rounds at the same points (stored
 * activations, GEMM outputs, attention's P and dS on the tensor-core path): what differs is the
 * order of f32 sums and exp2/sinf approximations, so an output rounds one bf16 ulp the other
 * way now and then; the loss stays within a few ulps of 2^-9 relative, gradients within a
 * fraction of the bf16-vs-f32 bounds. An H100 measured (2026-11-26): loss 0 relative for gpt2,
 * llama and llama3, 8.1e-5 for llama3_mqa; gradients 2.1e-6 (gpt2) to 0.011 (llama3). */
#define BF16_CPU_LOSS_REL 2e-3
#define BF16_CPU_GRAD_REL 5e-2

static char fixtures[1024];

typedef test_hf_ref batch;

static float forward_backward(dp_model *m, const batch *b) {
    dp_device *dev = dp_model_device(m);
    int64_t shape[2] = {b->B, b->T};
    dp_tensor x, y;
    CHECK_OK(dp_tensor_init(&x, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_init(&y, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_from_host(&x, b->inputs, sizeof(int32_t) * (size_t)(b->B * b->T)));
    CHECK_OK(dp_tensor_from_host(&y, b->targets, sizeof(int32_t) * (size_t)(b->B * b->T)));
    float loss = 0;
    CHECK_OK(dp_model_forward(m, &x, &y, &loss, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    dp_tensor_release(&x);
    dp_tensor_release(&y);
    return loss;
}

static float *host(const dp_tensor *t) {
    float *h = malloc((size_t)t->numel * sizeof *h);
    CHECK_OK(dp_tensor_to_host(t, h, (uint64_t)t->numel * sizeof *h));
    return h;
}

/* max |a - b| / max |b| over one tensor */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double diff = 0, ref = 0;
    for (int64_t k = 0; k < n; k++) {
        diff = fmax(diff, fabs((double)a[k] - b[k]));
        ref = fmax(ref, fabs((double)b[k]));
    }
    return diff / fmax(ref, 1e-30);
}

/* Every gradient of gpu against cpu; returns the worst relative difference. */
static double compare_grads(const char *label, dp_model *gpu, dp_model *cpu, double tol) {
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dp_model_param_count(cpu); i++) {
        dp_param *c = dp_model_param(cpu, i), *g = dp_model_param(gpu, i);
        if (!c->grad.numel || !g->grad.numel || c->grad.numel != g->grad.numel) {
            fprintf(stderr, "%s: '%s' has no gradient on one device\n", label, c->name);
            check_failures++;
            continue;
        }
        float *a = host(&g->grad), *b = host(&c->grad);
        double r = rel_diff(a, b, c->grad.numel);
        if (r > worst) {
            worst = r;
            worst_name = c->name;
        }
        if (!(r <= tol)) {
            fprintf(stderr, "%s: gradient of '%s' differs by %.3g relative (bound %g)\n", label, c->name, r, tol);
            check_failures++;
        }
        free(a);
        free(b);
    }
    printf("%s: worst gradient difference %.3g relative (%s; bound %g)\n", label, worst, worst_name, tol);
    return worst;
}

/* AdamW from the CPU's gradients on both devices: parameters agree to f32 rounding. */
static void check_adamw(dp_model *gpu, dp_model *cpu) {
    for (int i = 0; i < dp_model_param_count(cpu); i++) {
        dp_param *c = dp_model_param(cpu, i), *g = dp_model_param(gpu, i);
        CHECK_OK(dp_tensor_copy(&g->grad, &c->grad));
        CHECK_OK(dp_tensor_copy(&g->value, &c->value));
    }
    dp_optim_opts o;
    dp_optim_opts_default(&o, DP_OPTIM_ADAMW);
    o.lr = 0.01;
    dp_optimizer *oc = NULL, *og = NULL;
    CHECK_OK(dp_optim_new(cpu, DP_OPTIM_ADAMW, &o, &oc));
    CHECK_OK(dp_optim_new(gpu, DP_OPTIM_ADAMW, &o, &og));
    for (int step = 0; step < 2; step++) {
        CHECK_OK(dp_optim_step(oc));
        CHECK_OK(dp_optim_step(og));
    }
    CHECK_EQ_U64(dp_optim_state_bytes(og), dp_optim_state_bytes(oc));
    double worst = 0;
    for (int i = 0; i < dp_model_param_count(cpu); i++) {
        float *a = host(&dp_model_param(gpu, i)->value), *b = host(&dp_model_param(cpu, i)->value);
        worst = fmax(worst, rel_diff(a, b, dp_model_param(cpu, i)->value.numel));
        free(a);
        free(b);
    }
    printf("adamw: worst parameter difference after two steps %.3g relative\n", worst);
    CHECK(worst <= 1e-6); /* the same f32 formula; sqrt and division are correctly rounded on both */
    dp_optim_free(oc);
    dp_optim_free(og);
}

static void check_fixture(dp_device *cpu_dev, dp_device *gpu_dev, const char *name) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, name);
    batch b;
    if (test_hf_ref_read(dir, &b) != 0) {
        fprintf(stderr, "cannot read %s/reference.json\n", dir);
        check_failures++;
        return;
    }
    dp_model *cpu = test_hf_load(cpu_dev, dir, &b, DP_F32), *gpu = test_hf_load(gpu_dev, dir, &b, DP_F32);
    dp_model *gpu_bf16 = test_hf_load(gpu_dev, dir, &b, DP_BF16), *cpu_bf16 = test_hf_load(cpu_dev, dir, &b, DP_BF16);
    if (!cpu || !gpu || !gpu_bf16 || !cpu_bf16) return;
    char label[64];

    float lc = forward_backward(cpu, &b), lg = forward_backward(gpu, &b);
    printf("%s f32: loss cpu %.9g cuda %.9g (relative %.3g)\n", name, lc, lg, fabs(lg - lc) / fabs(lc));
    CHECK(fabs(lg - lc) <= 1e-4 * fabs(lc));
    snprintf(label, sizeof label, "%s f32", name);
    compare_grads(label, gpu, cpu, 1e-4);

    float lb = forward_backward(gpu_bf16, &b);
    printf("%s bf16: loss cuda %.9g against cpu f32 %.9g (relative %.3g, bound %g)\n", name, lb, lc,
           fabs(lb - lc) / fabs(lc), BF16_LOSS_REL);
    CHECK(fabs(lb - lc) <= BF16_LOSS_REL * fabs(lc));
    snprintf(label, sizeof label, "%s bf16", name);
    compare_grads(label, gpu_bf16, cpu, BF16_GRAD_REL);

    float lcb = forward_backward(cpu_bf16, &b);
    printf("%s bf16: loss cuda %.9g against the cpu's bf16 reference %.9g (relative %.3g, bound %g)\n", name, lb, lcb,
           fabs(lb - lcb) / fabs(lcb), BF16_CPU_LOSS_REL);
    CHECK(fabs(lb - lcb) <= BF16_CPU_LOSS_REL * fabs(lcb));
    snprintf(label, sizeof label, "%s bf16 vs cpu bf16", name);
    compare_grads(label, gpu_bf16, cpu_bf16, BF16_CPU_GRAD_REL);

    check_adamw(gpu, cpu);
    dp_model_free(cpu_bf16);
    dp_model_free(gpu_bf16);
    dp_model_free(gpu);
    dp_model_free(cpu);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    if (!test_cuda_or_skip()) return 77;
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    dp_device *cpu, *gpu;
    if (dp_device_get(DP_DEV_CPU, &cpu) != DP_OK || dp_device_get(DP_DEV_CUDA, &gpu) != DP_OK) {
        fprintf(stderr, "devices: %s\n", dp_error_message());
        return 1;
    }
    check_fixture(cpu, gpu, "gpt2");
    check_fixture(cpu, gpu, "llama");
    check_fixture(cpu, gpu, "llama3");     /* grouped-query attention, llama3 rope, tied head */
    check_fixture(cpu, gpu, "llama3_mqa"); /* multi-query attention, yarn rope */
    dp_engine_shutdown();
    return check_report("test_cuda_model");
}
