/* test_optim.c: AdamW and SGD against a reference computed here in double from PyTorch's update
 * rules, for a few steps of a small model's real gradients; lazy state allocation as the
 * allocator sees it; parameters without gradients skipped; frozen LoRA base weights without
 * state; the ledger; hyperparameter errors. */
#include "check.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "model.h"
#include "optim.h"
#include "scope.h"

#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 4 };

typedef struct host_copy {
    int n;
    float **value, **grad; /* per parameter; grad NULL when it has none */
} host_copy;

static void take(dp_model *m, host_copy *h) {
    h->n = dp_model_param_count(m);
    h->value = calloc((size_t)h->n, sizeof *h->value);
    h->grad = calloc((size_t)h->n, sizeof *h->grad);
    for (int i = 0; i < h->n; i++) {
        dp_param *p = dp_model_param(m, i);
        size_t bytes = (size_t)p->value.numel * sizeof(float);
        h->value[i] = malloc(bytes);
        CHECK_OK(dp_tensor_to_host(&p->value, h->value[i], bytes));
        if (p->grad.numel) {
            h->grad[i] = malloc(bytes);
            CHECK_OK(dp_tensor_to_host(&p->grad, h->grad[i], bytes));
        }
    }
}

static void drop(host_copy *h) {
    for (int i = 0; i < h->n; i++) {
        free(h->value[i]);
        free(h->grad[i]);
    }
    free(h->value);
    free(h->grad);
}

/* PyTorch's states, in double. */
typedef struct ref_state {
    double *m, *v;
    int64_t step;
} ref_state;

static dp_model *tiny(dp_device *dev, int lora) {
    dp_model_config c;
    dp_model_config_default(&c, DP_ARCH_GPT);
    c.vocab = 16;
    c.hidden = 8;
    c.layers = 1;
    c.heads = 2;
    c.seq_len = T;
    c.batch = B;
    c.seed = 7;
    c.init_std = 0.3f;
    if (lora) {
        c.lora_rank = 2;
        c.lora_alpha = 4;
        c.lora_targets = DP_LORA_QKV | DP_LORA_FC;
    }
    dp_model *m = NULL;
    CHECK_OK(dp_model_new(dev, &c, &m));
    return m;
}

/* One forward and backward on a batch fixed by seed (same tokens on every device). */
static void grads(dp_model *m, int seed) {
    dp_device *dev = dp_model_device(m);
    int32_t ids[B * (T + 1)];
    for (int i = 0; i < B * (T + 1); i++) ids[i] = (int32_t)((i * 7 + seed * 3 + i * i) % 16);
    int32_t in[B * T], tg[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = ids[b * (T + 1) + t];
            tg[b * T + t] = ids[b * (T + 1) + t + 1];
        }
    int64_t shape[2] = {B, T};
    dp_tensor x, y;
    CHECK_OK(dp_tensor_init(&x, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_init(&y, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    if (dev->kind != DP_DEV_PLAN) {
        CHECK_OK(dp_tensor_from_host(&x, in, sizeof in));
        CHECK_OK(dp_tensor_from_host(&y, tg, sizeof tg));
    }
    float loss;
    CHECK_OK(dp_model_forward(m, &x, &y, &loss, NULL));
    CHECK_OK(dp_model_backward(m, NULL));
    dp_tensor_release(&x);
    dp_tensor_release(&y);
}

/* Largest |got - want| / max(1e-3, |want|) over every parameter, after one step from `before`. */
static double compare(dp_model *m, const host_copy *want_values) {
    double worst = 0;
    for (int i = 0; i < want_values->n; i++) {
        dp_param *p = dp_model_param(m, i);
        float *got = malloc((size_t)p->value.numel * sizeof *got);
        CHECK_OK(dp_tensor_to_host(&p->value, got, (size_t)p->value.numel * sizeof *got));
        for (int64_t k = 0; k < p->value.numel; k++) {
            double w = want_values->value[i][k], e = fabs(got[k] - w) / fmax(1e-3, fabs(w));
            if (e > worst) worst = e;
        }
        free(got);
    }
    return worst;
}

/* AdamW for `steps` steps against the reference; lr, betas, eps, wd as given. */
static void test_adamw(dp_device *dev) {
    dp_model *m = tiny(dev, 0);
    if (!m) return;
    dp_optim_opts o;
    dp_optim_opts_default(&o, DP_OPTIM_ADAMW);
    CHECK(o.lr == 1e-3 && o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 0.01);
    o.lr = 0.01;
    o.beta1 = 0.8;
    o.beta2 = 0.95;
    o.eps = 1e-6;
    o.weight_decay = 0.1;
    dp_optimizer *opt = NULL;
    CHECK_OK(dp_optim_new(m, DP_OPTIM_ADAMW, &o, &opt));
    if (!opt) return;
    dp_mem_stats st;
    dp_mem_get_stats(dev->mem, &st);
    uint64_t states_before = st.current[DP_CAT_OPTIMIZER_STATES];
    CHECK_EQ_U64(dp_optim_state_bytes(opt), 0); /* lazily: nothing until the first step */

    int n = dp_model_param_count(m);
    ref_state *rs = calloc((size_t)n, sizeof *rs);
    dp_ledger_reset();
    for (int step = 1; step <= 3; step++) {
        grads(m, step);
        host_copy h;
        take(m, &h);
        for (int i = 0; i < n; i++) {
            int64_t numel = dp_model_param(m, i)->value.numel;
            if (!rs[i].m) {
                rs[i].m = calloc((size_t)numel, sizeof(double));
                rs[i].v = calloc((size_t)numel, sizeof(double));
            }
            rs[i].step++;
            double bc1 = 1 - pow(o.beta1, (double)rs[i].step), bc2 = 1 - pow(o.beta2, (double)rs[i].step);
            for (int64_t k = 0; k < numel; k++) {
                double g = h.grad[i][k], p = h.value[i][k];
                p -= o.lr * o.weight_decay * p;
                rs[i].m[k] = o.beta1 * rs[i].m[k] + (1 - o.beta1) * g;
                rs[i].v[k] = o.beta2 * rs[i].v[k] + (1 - o.beta2) * g * g;
                p -= o.lr * (rs[i].m[k] / bc1) / (sqrt(rs[i].v[k] / bc2) + o.eps);
                h.value[i][k] = (float)p;
            }
        }
        CHECK_OK(dp_optim_step(opt));
        /* f32 arithmetic against double: a few ulps of the parameter, relative 1e-5 of values >= 1e-3 */
        double err = compare(m, &h);
        printf("adamw step %d: max relative error %.3g\n", step, err);
        CHECK(err < 1e-5);
        drop(&h);
        CHECK_OK(dp_optim_zero_grad(opt, 1));
    }
    uint64_t want = 2 * sizeof(float) * (uint64_t)dp_model_num_params(m, 1);
    CHECK_EQ_U64(dp_optim_state_bytes(opt), want);
    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_OPTIMIZER_STATES] - states_before, want);
    CHECK_EQ_U64(dp_optim_steps(opt), 3);

    /* the ledger: one call per parameter per step, 16 flops and 28 bytes per element */
    const dp_ledger_entry *e = NULL;
    for (size_t i = 0; i < dp_ledger_count(); i++)
        if (strcmp(dp_ledger_at(i)->op, "adamw_step") == 0) e = dp_ledger_at(i);
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_U64(e->calls, 3 * (uint64_t)n);
        CHECK_EQ_U64((uint64_t)e->flops, 3 * 16 * (uint64_t)dp_model_num_params(m, 1));
        CHECK_EQ_U64((uint64_t)e->bytes, 3 * 28 * (uint64_t)dp_model_num_params(m, 1));
    }

    /* states carry the parameter's module: wte's exp_avg and exp_avg_sq sit under "wte" */
    dp_param *wte = dp_model_param_named(m, "transformer.wte.weight");
    CHECK(wte != NULL);
    if (wte) {
        uint64_t cur, peak, lap;
        dp_mem_module_stats(dev->mem, wte->module, &cur, &peak, &lap);
        CHECK_EQ_U64(cur, 3 * 4 * (uint64_t)wte->value.numel); /* value + exp_avg + exp_avg_sq; grads freed */
    }

    /* gradients set to none: step skips every parameter (PyTorch's `if p.grad is None`) */
    host_copy h;
    take(m, &h);
    CHECK_OK(dp_optim_step(opt));
    CHECK(compare(m, &h) == 0.0);
    drop(&h);

    for (int i = 0; i < n; i++) {
        free(rs[i].m);
        free(rs[i].v);
    }
    free(rs);
    dp_optim_free(opt);
    dp_mem_get_stats(dev->mem, &st);
    CHECK_EQ_U64(st.current[DP_CAT_OPTIMIZER_STATES], states_before);
    dp_model_free(m);
}

/* SGD with momentum and weight decay: buf = g' at the first step, then mu buf + g'. */
static void test_sgd(dp_device *dev, double momentum) {
    dp_model *m = tiny(dev, 0);
    if (!m) return;
    dp_optim_opts o;
    dp_optim_opts_default(&o, DP_OPTIM_SGD);
    CHECK(o.lr == 1e-3 && o.momentum == 0 && o.weight_decay == 0);
    o.lr = 0.05;
    o.momentum = momentum;
    o.weight_decay = 0.01;
    dp_optimizer *opt = NULL;
    CHECK_OK(dp_optim_new(m, DP_OPTIM_SGD, &o, &opt));
    if (!opt) return;
    int n = dp_model_param_count(m);
    double **buf = calloc((size_t)n, sizeof *buf);
    for (int step = 1; step <= 3; step++) {
        grads(m, 10 + step);
        host_copy h;
        take(m, &h);
        for (int i = 0; i < n; i++) {
            int64_t numel = dp_model_param(m, i)->value.numel;
            int first = !buf[i];
            if (first) buf[i] = calloc((size_t)numel, sizeof(double));
            for (int64_t k = 0; k < numel; k++) {
                double d = h.grad[i][k] + o.weight_decay * h.value[i][k];
                if (momentum != 0) {
                    buf[i][k] = first ? d : momentum * buf[i][k] + d;
                    d = buf[i][k];
                }
                h.value[i][k] = (float)(h.value[i][k] - o.lr * d);
            }
        }
        CHECK_OK(dp_optim_step(opt));
        double err = compare(m, &h);
        printf("sgd (momentum %g) step %d: max relative error %.3g\n", momentum, step, err);
        CHECK(err < 1e-5);
        drop(&h);
        CHECK_OK(dp_optim_zero_grad(opt, step % 2)); /* zeroed in place or freed: both work */
    }
    /* plain SGD keeps no state; with momentum one buffer per parameter */
    uint64_t want = momentum != 0 ? sizeof(float) * (uint64_t)dp_model_num_params(m, 1) : 0;
    CHECK_EQ_U64(dp_optim_state_bytes(opt), want);
    for (int i = 0; i < n; i++) free(buf[i]);
    free(buf);
    dp_optim_free(opt);
    dp_model_free(m);
}

/* LoRA: the frozen base gets neither a state nor a change; the adapters do. */
static void test_lora(dp_device *dev) {
    dp_model *m = tiny(dev, 1);
    if (!m) return;
    dp_optim_opts o;
    dp_optim_opts_default(&o, DP_OPTIM_ADAMW);
    o.lr = 0.01;
    dp_optimizer *opt = NULL;
    CHECK_OK(dp_optim_new(m, DP_OPTIM_ADAMW, &o, &opt));
    if (!opt) return;
    host_copy before;
    take(m, &before);
    grads(m, 3);
    CHECK_OK(dp_optim_step(opt));
    int64_t trainable = dp_model_num_params(m, 1);
    CHECK(trainable > 0 && trainable < dp_model_num_params(m, 0));
    CHECK_EQ_U64(dp_optim_state_bytes(opt), 2 * sizeof(float) * (uint64_t)trainable);
    int changed = 0;
    for (int i = 0; i < before.n; i++) {
        dp_param *p = dp_model_param(m, i);
        float *now = malloc((size_t)p->value.numel * sizeof *now);
        CHECK_OK(dp_tensor_to_host(&p->value, now, (size_t)p->value.numel * sizeof *now));
        int same = memcmp(now, before.value[i], (size_t)p->value.numel * sizeof *now) == 0;
        if (!p->trainable && !same) {
            fprintf(stderr, "frozen '%s' changed\n", p->name);
            check_failures++;
        }
        changed += p->trainable && !same;
        free(now);
    }
    CHECK(changed > 0);
    drop(&before);
    dp_optim_free(opt);
    dp_model_free(m);
}

/* The plan device allocates exactly the states the CPU does, at the same moment. */
static void test_plan(dp_device *cpu) {
    dp_device *plan;
    if (dp_device_get(DP_DEV_PLAN, &plan) != DP_OK) return;
    uint64_t bytes[2];
    dp_device *devs[2] = {cpu, plan};
    for (int d = 0; d < 2; d++) {
        dp_model *m = tiny(devs[d], 0);
        dp_optimizer *opt = NULL;
        dp_optim_opts o;
        dp_optim_opts_default(&o, DP_OPTIM_SGD);
        o.momentum = 0.9;
        CHECK_OK(dp_optim_new(m, DP_OPTIM_SGD, &o, &opt));
        grads(m, 1);
        CHECK_OK(dp_optim_step(opt));
        bytes[d] = dp_optim_state_bytes(opt);
        dp_optim_free(opt);
        dp_model_free(m);
    }
    CHECK(bytes[0] > 0);
    CHECK_EQ_U64(bytes[1], bytes[0]);
}

static void expect_bad(dp_optim_kind kind, dp_optim_opts o, const char *word) {
    CHECK(dp_optim_opts_check(kind, &o) == DP_EINVAL);
    if (!strstr(dp_error_message(), word)) {
        fprintf(stderr, "error '%s' does not name '%s'\n", dp_error_message(), word);
        check_failures++;
    }
}

static void test_errors(dp_device *dev) {
    dp_optim_opts a, s;
    dp_optim_opts_default(&a, DP_OPTIM_ADAMW);
    dp_optim_opts_default(&s, DP_OPTIM_SGD);
    dp_optim_opts x = a;
    x.lr = -1;
    expect_bad(DP_OPTIM_ADAMW, x, "lr");
    x = a;
    x.lr = NAN;
    expect_bad(DP_OPTIM_ADAMW, x, "lr");
    x = a;
    x.beta1 = 1.0;
    expect_bad(DP_OPTIM_ADAMW, x, "betas[1]");
    x = a;
    x.beta2 = -0.1;
    expect_bad(DP_OPTIM_ADAMW, x, "betas[2]");
    x = a;
    x.eps = -1e-8;
    expect_bad(DP_OPTIM_ADAMW, x, "eps");
    x = a;
    x.weight_decay = -0.01;
    expect_bad(DP_OPTIM_ADAMW, x, "weight_decay");
    x = s;
    x.momentum = -0.5;
    expect_bad(DP_OPTIM_SGD, x, "momentum");
    x = s;
    x.lr = INFINITY;
    expect_bad(DP_OPTIM_SGD, x, "lr");
    x = a;
    x.beta1 = 0.0; /* the edges PyTorch accepts */
    x.lr = 0.0;
    x.eps = 0.0;
    CHECK_OK(dp_optim_opts_check(DP_OPTIM_ADAMW, &x));

    dp_model *m = tiny(dev, 0);
    dp_optimizer *opt = (dp_optimizer *)1;
    x = a;
    x.lr = -1;
    CHECK(dp_optim_new(m, DP_OPTIM_ADAMW, &x, &opt) == DP_EINVAL && opt == NULL);
    CHECK_OK(dp_optim_new(m, DP_OPTIM_ADAMW, &a, &opt));
    CHECK(dp_optim_set_lr(opt, -0.5) == DP_EINVAL);
    CHECK_OK(dp_optim_set_lr(opt, 0.5));
    CHECK(dp_optim_opts_of(opt)->lr == 0.5);
    CHECK(strcmp(dp_optim_name(dp_optim_kind_of(opt)), "adamw") == 0);
    dp_optim_free(opt);
    dp_optim_free(NULL);
    dp_model_free(m);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    dp_device *dev;
    if (dp_device_get(DP_DEV_CPU, &dev) != DP_OK) {
        fprintf(stderr, "no cpu device: %s\n", dp_error_message());
        return 1;
    }
    test_adamw(dev);
    test_sgd(dev, 0.9);
    test_sgd(dev, 0.0);
    test_lora(dev);
    test_plan(dev);
    test_errors(dev);
    dp_engine_shutdown();
    return check_report("test_optim");
}
