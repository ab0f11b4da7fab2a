/* test_hf_exchange.c: Hugging Face checkpoints made by transformers (tests/fixtures/hf, see
 * gen_fixtures.py) load on the CPU and give PyTorch's float64 loss (1e-5 relative) and every
 * gradient (1e-4 relative to the tensor's largest entry) after one backward of the mean loss;
 * saving writes the same tensors bit for bit under the same names and layouts (GPT-2's Conv1D
 * in x out, its tied head omitted), and a reload is bit-identical; malformed checkpoints are
 * refused naming the file and tensor. The long fixtures (gpt2_t300, llama_gqa_t300 with grouped-
 * query attention: B 3 x T 300, five attention blocks of 64 with a ragged last one) are held to
 * the same bars (measured: loss 4.6e-8, gradients 1.14e-5, llama_gqa_t300's k_proj). */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fixtures[1024];
static char tmpdir[64];

typedef test_hf_ref reference;

/* A parameter's value or gradient on the host, in the HF layout (Conv1D transposed back). */
static float *to_hf_layout(const dp_param *p, const dp_tensor *t) {
    int64_t n = t->numel;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    CHECK_OK(dp_tensor_to_host(t, a, (uint64_t)n * sizeof *a));
    if (!p->hf_transposed) {
        free(b);
        return a;
    }
    int64_t rows = p->value.shape[0], cols = p->value.shape[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) b[c * rows + r] = a[r * cols + c];
    free(a);
    return b;
}

static void forward_backward(dp_model *m, const reference *r, float *loss, float *per_sample) {
    dp_device *dev = dp_model_device(m);
    int64_t shape[2] = {r->B, r->T};
    dp_tensor x, y;
    CHECK_OK(dp_tensor_init(&x, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_init(&y, dev, DP_I32, 2, shape, DP_CAT_INPUTS));
    CHECK_OK(dp_tensor_from_host(&x, r->inputs, sizeof(int32_t) * (size_t)(r->B * r->T)));
    CHECK_OK(dp_tensor_from_host(&y, r->targets, sizeof(int32_t) * (size_t)(r->B * r->T)));
    CHECK_OK(dp_model_forward(m, &x, &y, loss, per_sample));
    dp_backward_opts bo = {.sample_scale = NULL, .weight_grads = 1};
    CHECK_OK(dp_model_backward(m, &bo));
    dp_tensor_release(&x);
    dp_tensor_release(&y);
}

/* Loss and every gradient against PyTorch's. */
static void check_against_pytorch(const char *name, dp_model *m, const reference *r, const char *dir, double grad_tol) {
    float loss = 0, per_sample[8] = {0};
    forward_backward(m, r, &loss, per_sample);
    printf("%s: loss %.9g, PyTorch (float64) %.9g, relative error %.2g\n", name, loss, r->loss,
           fabs(loss - r->loss) / r->loss);
    /* f32 forward of a 2-layer model: a few ulps of accumulated rounding, far below 1e-5 */
    CHECK(fabs(loss - r->loss) <= 1e-5 * fabs(r->loss));
    for (int b = 0; b < r->B; b++)
        CHECK(fabs(per_sample[b] - r->per_sample_loss[b]) <= 1e-5 * fabs(r->per_sample_loss[b]));

    char path[1200];
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (!f) return;
    int trainable = 0;
    for (int i = 0; i < dp_model_param_count(m); i++) trainable += dp_model_param(m, i)->trainable;
    CHECK_EQ_U64(dp_st_count(f), trainable); /* one reference gradient per parameter, no more, no fewer */
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dp_st_count(f); i++) {
        const dp_st_tensor *t = dp_st_at(f, i);
        dp_param *p = dp_model_param_named(m, t->name);
        if (!p || !p->grad.numel) {
            fprintf(stderr, "%s: no gradient for '%s'\n", name, t->name);
            check_failures++;
            continue;
        }
        float *want = malloc((size_t)t->numel * sizeof *want);
        CHECK_OK(dp_st_read_f32(f, t, want, t->numel));
        float *got = to_hf_layout(p, &p->grad);
        /* relative to the tensor's largest entry: elementwise ratios of near-zero entries are
         * noise; grad_tol (1e-4) leaves ~100x margin over the f32 rounding of a T=8, d=32 model */
        double rel = test_rel_to_max(got, want, t->numel);
        if (rel > worst) {
            worst = rel;
            worst_name = t->name;
        }
        if (!(rel <= grad_tol)) {
            fprintf(stderr, "%s: gradient of '%s': relative %.3g > %g\n", name, t->name, rel, grad_tol);
            check_failures++;
        }
        free(want);
        free(got);
    }
    printf("%s: %d gradients, worst relative error %.3g (%s; tol %g)\n", name, dp_st_count(f), worst, worst_name,
           grad_tol);
    dp_st_close(f);
}

/* Every tensor of file a is in file b with the same name, dtype, shape and bytes (and no more). */
static void check_same_tensors(const char *a_path, const char *b_path) {
    dp_st_file *a = NULL, *b = NULL;
    CHECK_OK(dp_st_open(a_path, &a));
    CHECK_OK(dp_st_open(b_path, &b));
    if (a && b) {
        CHECK_EQ_U64(dp_st_count(a), dp_st_count(b));
        for (int i = 0; i < dp_st_count(a); i++) {
            const dp_st_tensor *x = dp_st_at(a, i), *y = dp_st_find(b, x->name);
            if (!y) {
                fprintf(stderr, "%s: '%s' missing from %s\n", a_path, x->name, b_path);
                check_failures++;
                continue;
            }
            int same = strcmp(x->dtype, y->dtype) == 0 && x->ndim == y->ndim &&
                       x->end - x->begin == y->end - y->begin && memcmp(x->shape, y->shape, sizeof x->shape) == 0 &&
                       memcmp(dp_st_data(a, x), dp_st_data(b, y), x->end - x->begin) == 0;
            if (!same) {
                fprintf(stderr, "'%s' differs between %s and %s\n", x->name, a_path, b_path);
                check_failures++;
            }
        }
    }
    dp_st_close(a);
    dp_st_close(b);
}

/* Save, compare the file with transformers', reload, compare every parameter bit for bit. */
static void check_round_trip(const char *name, dp_model *m, const char *dir, const reference *r) {
    char out[256], a[1200], b[1200];
    snprintf(out, sizeof out, "%s/%s", tmpdir, name);
    CHECK_OK(dp_model_save(m, out));
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    check_same_tensors(a, b); /* same names, layouts (GPT-2 in x out), no tied lm_head, same bits */

    dp_model_config c1, c2;
    CHECK_OK(dp_model_config_read(dir, &c1));
    CHECK_OK(dp_model_config_read(out, &c2));
    CHECK(c1.arch == c2.arch && c1.vocab == c2.vocab && c1.hidden == c2.hidden && c1.layers == c2.layers &&
          c1.heads == c2.heads && c1.ffn == c2.ffn && c1.max_positions == c2.max_positions &&
          c1.tie_head == c2.tie_head && c1.norm_eps == c2.norm_eps && c1.rope_theta == c2.rope_theta);

    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = r->T;
    o.batch = r->B;
    dp_model *m2 = NULL;
    CHECK_OK(dp_model_load(dp_model_device(m), out, &o, &m2));
    if (!m2) return;
    CHECK_EQ_U64(dp_model_param_count(m2), dp_model_param_count(m));
    for (int i = 0; i < dp_model_param_count(m); i++) {
        dp_param *p = dp_model_param(m, i), *q = dp_model_param_named(m2, p->name);
        CHECK(q != NULL);
        if (!q) continue;
        float *x = to_hf_layout(p, &p->value), *y = to_hf_layout(q, &q->value);
        if (memcmp(x, y, (size_t)p->value.numel * sizeof *x) != 0) {
            fprintf(stderr, "%s: '%s' changed through save and load\n", name, p->name);
            check_failures++;
        }
        free(x);
        free(y);
    }
    dp_model_free(m2);
}

/* Checkpoints dpprof must refuse, with the reason. */
static void check_refusals(dp_device *dev) {
    char dir[256], path[512], src[1200];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    mkdir(dir, 0777);
    expect_load_error(dev, "/nonexistent/dpprof", DP_EIO, "config.json", NULL);

    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, \"intermediate_size\": 88,"
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}");
    expect_load_error(dev, dir, DP_EINVAL, "num_attention_heads (4) must be a multiple of num_key_value_heads (3)",
                      NULL);
    write_file(path, "{\"model_type\": \"bert\"}");
    expect_load_error(dev, dir, DP_ENOTSUP, "'bert'", "gpt2, llama");
    write_file(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4,"
                     "\"n_positions\": 16, \"activation_function\": \"relu\"}");
    expect_load_error(dev, dir, DP_ENOTSUP, "'relu'", NULL);
    write_file(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_layer\": 2, \"n_head\": 4}");
    expect_load_error(dev, dir, DP_EINVAL, "'n_embd'", NULL);
    write_file(path, "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, \"intermediate_size\": 88,"
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16,"
                     "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 4.0}}");
    expect_load_error(dev, dir, DP_ENOTSUP, "rope type 'dynamic' is not supported",
                      "(supported: default, linear, llama3, yarn)");

    /* the fixture's config with a wrong number of layers: tensors of layer 2 are missing */
    write_file(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_embd\": 32, \"n_layer\": 3, \"n_head\": 4,"
                     "\"n_positions\": 16}");
    snprintf(src, sizeof src, "%s/gpt2/model.safetensors", fixtures);
    char dst[512];
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    copy_file(src, dst);
    expect_load_error(dev, dir, DP_EINVAL, "'transformer.h.2.ln_1.weight' is missing", NULL);
    /* one layer only: layer 1's tensors are unexpected */
    write_file(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_embd\": 32, \"n_layer\": 1, \"n_head\": 4,"
                     "\"n_positions\": 16}");
    expect_load_error(dev, dir, DP_EINVAL, "unexpected tensor 'transformer.h.1.", NULL);
    /* a wider vocabulary: wte's shape does not match */
    write_file(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4,"
                     "\"n_positions\": 16}");
    expect_load_error(dev, dir, DP_EINVAL, "'transformer.wte.weight' has shape [96x32]", "[100x32]");
    /* no weights at all */
    unlink(dst);
    expect_load_error(dev, dir, DP_EIO, "no weights", NULL);
    unlink(path);
    rmdir(dir);
}

static void check_model(dp_device *dev, const char *name, double grad_tol) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, name);
    reference r;
    if (test_hf_ref_read(dir, &r) != 0) {
        check_failures++;
        return;
    }
    dp_model *m = test_hf_load(dev, dir, &r, DP_F32);
    if (m) {
        const dp_model_config *c = dp_model_config_of(m);
        if (strcmp(name, "gpt2") == 0) {
            /* the tied head: no lm_head parameter, wte serves both (its gradient is both uses') */
            CHECK(c->tie_head == 1 && dp_model_param_named(m, "lm_head.weight") == NULL);
            CHECK(c->max_positions == 16 && c->norm_eps == 1e-5f);
        } else if (strcmp(name, "llama") == 0) {
            CHECK(c->tie_head == 0 && dp_model_param_named(m, "lm_head.weight") != NULL);
            CHECK(c->rope_theta == 10000.0f && c->ffn == 88);
        } else if (strcmp(name, "gpt2_t300") == 0) {
            CHECK(c->tie_head == 1 && c->max_positions == 320 && c->hidden == 48 && c->vocab == 160);
        } else { /* llama_gqa_t300: 4 query heads over 2 kv heads */
            CHECK(c->tie_head == 0 && c->heads == 4 && c->kv_heads == 2 && c->ffn == 136 && c->vocab == 160);
        }
        check_against_pytorch(name, m, &r, dir, grad_tol);
        check_round_trip(name, m, dir, &r);
        dp_model_free(m);
    }
}

/* LoRA adapters go to PEFT's files and come back. */
static void check_lora(dp_device *dev) {
    char dir[1100], out[256];
    snprintf(dir, sizeof dir, "%s/llama", fixtures);
    snprintf(out, sizeof out, "%s/lora", tmpdir);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    o.lora_rank = 4;
    o.lora_alpha = 8;
    o.lora_targets = DP_LORA_QKV | DP_LORA_DOWN;
    o.seed = 3;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(dev, dir, &o, &m));
    if (!m) return;
    /* give the B matrices values (they start at zero) so the round trip means something */
    for (int i = 0; i < dp_model_param_count(m); i++) {
        dp_param *p = dp_model_param(m, i);
        if (p->kind == DP_PARAM_LORA_B) CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0, 0.1f, 9, (uint64_t)i));
    }
    CHECK_OK(dp_model_save(m, out));
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", out);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    if (f) {
        CHECK_EQ_U64(dp_st_count(f), 2 * 2 * 4); /* 2 layers x (q, k, v, down) x (A, B) */
        const dp_st_tensor *t = dp_st_find(f, "base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight");
        CHECK(t && t->shape[0] == 4 && t->shape[1] == 32);
        t = dp_st_find(f, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
        CHECK(t && t->shape[0] == 32 && t->shape[1] == 4);
        dp_st_close(f);
    }
    dp_model_load_opts plain;
    dp_model_load_opts_default(&plain);
    plain.seq_len = 8;
    dp_model *m2 = NULL;
    CHECK_OK(dp_model_load(dev, out, &plain, &m2)); /* the adapters are found without being asked for */
    if (m2) {
        const dp_model_config *c = dp_model_config_of(m2);
        CHECK(c->lora_rank == 4 && c->lora_alpha == 8.0f && c->lora_targets == (DP_LORA_QKV | DP_LORA_DOWN));
        CHECK_EQ_U64(dp_model_param_count(m2), dp_model_param_count(m));
        for (int i = 0; i < dp_model_param_count(m); i++) {
            dp_param *p = dp_model_param(m, i), *q = dp_model_param_named(m2, p->name);
            CHECK(q && q->trainable == p->trainable);
            if (!q) continue;
            float *x = to_hf_layout(p, &p->value), *y = to_hf_layout(q, &q->value);
            CHECK(memcmp(x, y, (size_t)p->value.numel * sizeof *x) == 0);
            free(x);
            free(y);
        }
        dp_model_free(m2);
    }
    plain.lora_rank = 2;
    m2 = NULL;
    CHECK(dp_model_load(dev, out, &plain, &m2) == DP_EINVAL && strstr(dp_error_message(), "rank 4"));
    /* saving without LoRA over it removes the stale adapter files */
    dp_model_free(m);
    m = NULL;
    plain.lora_rank = 0;
    CHECK_OK(dp_model_load(dev, dir, &plain, &m));
    if (m) {
        CHECK_OK(dp_model_save(m, out));
        CHECK(access(path, F_OK) != 0);
        dp_model_free(m);
    }
}

/* The plan device loads a checkpoint's shapes (no values) and allocates what the CPU does. */
static void check_plan(dp_device *cpu) {
    dp_device *plan;
    if (dp_device_get(DP_DEV_PLAN, &plan) != DP_OK) return;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/llama", fixtures);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    dp_model *a = NULL, *b = NULL;
    dp_mem_stats before[2], after[2];
    dp_mem_get_stats(cpu->mem, &before[0]);
    dp_mem_get_stats(plan->mem, &before[1]);
    CHECK_OK(dp_model_load(cpu, dir, &o, &a));
    CHECK_OK(dp_model_load(plan, dir, &o, &b));
    dp_mem_get_stats(cpu->mem, &after[0]);
    dp_mem_get_stats(plan->mem, &after[1]);
    CHECK(after[0].current[DP_CAT_PARAMETERS] > before[0].current[DP_CAT_PARAMETERS]);
    CHECK_EQ_U64(after[1].current[DP_CAT_PARAMETERS] - before[1].current[DP_CAT_PARAMETERS],
                 after[0].current[DP_CAT_PARAMETERS] - before[0].current[DP_CAT_PARAMETERS]);
    if (b) CHECK(dp_model_save(b, "/tmp/never-written") == DP_ENOTSUP);
    dp_model_free(a);
    dp_model_free(b);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-hf-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    dp_device *dev;
    if (dp_device_get(DP_DEV_CPU, &dev) != DP_OK) {
        fprintf(stderr, "no cpu device: %s\n", dp_error_message());
        return 1;
    }
    check_model(dev, "gpt2", 1e-4);
    check_model(dev, "llama", 1e-4);
    check_model(dev, "gpt2_t300", 1e-4);
    check_model(dev, "llama_gqa_t300", 1e-4);
    check_lora(dev);
    check_refusals(dev);
    check_plan(dev);
    dp_engine_shutdown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_hf_exchange");
}
