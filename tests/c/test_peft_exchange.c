/* test_peft_exchange.c: LoRA adapters made by PEFT (tests/fixtures/hf/peft, see gen_peft.py) on
 * the tiny fixture models load into dpprof and give PyTorch's float64 loss (1e-5 relative, as
 * test_hf_exchange), every adapter gradient (1e-4 relative to the tensor's largest entry) with the
 * base frozen, and PyTorch's per-sample gradient norms over the adapters under every DP method
 * (2e-5 relative: f32 sums; measured at most 4.7e-6); saving writes PEFT's adapter tensors back
 * bit for bit; adapter_config.json keys that would change what the adapters compute (per-module
 * ranks or alphas, a LoRA bias, DoRA) are refused. Until this fixture a saved adapter was only
 * ever read back by dpprof itself (issue 13), which a shared error (a transposed lora_A, the scale
 * alpha/r applied twice) would pass. The long adapters (gpt2_t300, llama_gqa_t300: T = 300, every
 * linear adapted, rank 8, alpha 12, Llama with grouped-query attention) hold the scale alpha/r at
 * a second point and flash's tiles and strips over three flash tiles to PyTorch.
 * The adapters load as PEFT writes them, a folder apart from the base (dp_model_load_opts.adapter:
 * model = {path = BASE, adapter = DIR}), to the same values as a folder holding both; the folder
 * alone is refused saying how to load it (issue 38.7: it used to fail with "config.json: cannot
 * read"), with the base PEFT's base_model_name_or_path names when that is a local folder; and the
 * saved adapter_config.json names its base (base_model_name_or_path: the checkpoint the base came
 * from, absolute; it was null, and peft.AutoPeftModelForCausalLM.from_pretrained(dir) then looked
 * for a hub repository named "None"). */
#include "check.h"
#include "test_hf_ref.h"
#include "test_util.h"

#include "device.h"
#include "dpprof_engine.h"
#include "dpsgd.h"
#include "error.h"
#include "model.h"
#include "model_io.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEFT_LONG_REL_TOL 2e-5 /* T = 300: measured at most 4.2e-6 (llama_gqa_t300) */

static char fixtures[1024];
static char tmpdir[64];
static dp_device *cpu;

/* A checkpoint directory with the base model and PEFT's adapter side by side (PEFT keeps them
 * apart; dpprof reads one directory). */
static void assemble(const char *name, const char *out) {
    char from[1200], to[512];
    CHECK(mkdir(out, 0777) == 0);
    static const char *const base_files[] = {"config.json", "model.safetensors"};
    static const char *const adapter_files[] = {"adapter_config.json", "adapter_model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s/%s", fixtures, name, base_files[i]);
        snprintf(to, sizeof to, "%s/%s", out, base_files[i]);
        copy_file(from, to);
        snprintf(from, sizeof from, "%s/peft/%s/%s", fixtures, name, adapter_files[i]);
        snprintf(to, sizeof to, "%s/%s", out, adapter_files[i]);
        copy_file(from, to);
    }
}

/* PEFT's name of a LoRA parameter of dpprof's (its HF name behind PEFT's prefix). */
static void peft_name(const dp_param *p, char *out, size_t n) { snprintf(out, n, "base_model.model.%s", p->name); }

/* Loss and the adapters' gradients against PyTorch's; nothing else trains. */
static void check_loss_and_grads(const char *name, dp_model *m, const test_hf_ref *r, const char *fixture,
                                 double grad_tol) {
    dp_tensor *in, *tg;
    test_hf_batch(cpu, r, &in, &tg);
    float loss = 0, per_sample[TEST_HF_MAX_B] = {0};
    CHECK_OK(dp_model_forward(m, in, tg, &loss, per_sample));
    CHECK_OK(dp_model_backward(m, NULL));
    printf("%s + PEFT adapter: loss %.9g, PyTorch (float64) %.9g, relative error %.2g\n", name, loss, r->loss,
           fabs(loss - r->loss) / r->loss);
    CHECK(fabs(loss - r->loss) <= 1e-5 * fabs(r->loss));
    for (int64_t i = 0; i < r->B; i++)
        CHECK(fabs(per_sample[i] - r->per_sample_loss[i]) <= 1e-5 * fabs(r->per_sample_loss[i]));

    char path[1200];
    snprintf(path, sizeof path, "%s/grads.safetensors", fixture);
    dp_st_file *f = NULL;
    CHECK_OK(dp_st_open(path, &f));
    int trainable = 0, compared = 0;
    double worst = 0;
    for (int i = 0; f && i < dp_model_param_count(m); i++) {
        dp_param *p = dp_model_param(m, i);
        int lora = p->kind == DP_PARAM_LORA_A || p->kind == DP_PARAM_LORA_B;
        CHECK(p->trainable == lora); /* PEFT freezes the base */
        if (!lora) {
            CHECK(p->grad.numel == 0);
            continue;
        }
        trainable++;
        char key[200];
        peft_name(p, key, sizeof key);
        const dp_st_tensor *t = dp_st_find(f, key);
        if (!t || t->numel != p->grad.numel || p->grad.numel == 0) {
            fprintf(stderr, "%s: no PyTorch gradient matching '%s'\n", name, key);
            check_failures++;
            continue;
        }
        float *want = malloc((size_t)t->numel * sizeof *want), *got = malloc((size_t)t->numel * sizeof *got);
        CHECK_OK(dp_st_read_f32(f, t, want, t->numel));
        CHECK_OK(dp_tensor_to_host(&p->grad, got, (uint64_t)t->numel * sizeof *got));
        double rel = test_rel_to_max(got, want, t->numel);
        worst = fmax(worst, rel);
        if (!(rel <= grad_tol)) {
            fprintf(stderr, "%s: gradient of '%s': relative error %.3g > %g\n", name, key, rel, grad_tol);
            check_failures++;
        }
        compared++;
        free(want);
        free(got);
    }
    if (f) CHECK_EQ_U64(dp_st_count(f), trainable); /* every adapter tensor, no more */
    CHECK_EQ_U64(compared, trainable);
    printf("%s + PEFT adapter: %d adapter gradients, worst relative error %.3g (tol %g)\n", name, compared, worst,
           grad_tol);
    dp_st_close(f);
    CHECK_OK(dp_model_zero_grad(m, 1));
    dp_tensor_free(in);
    dp_tensor_free(tg);
}


/* dpprof's save writes PEFT's adapter tensors back: same names, shapes and bytes; its
 * adapter_config.json names the base it was loaded from (absolute: PEFT resolves a relative path
 * from the working directory), and the directory loads back. */
static void check_save(dp_model *m, const char *name, const char *out) {
    CHECK_OK(dp_model_save(m, out));
    char a[1200], b[512];
    snprintf(a, sizeof a, "%s/%s", fixtures, name);
    char *base = realpath(a, NULL);
    snprintf(b, sizeof b, "%s/adapter_config.json", out);
    cJSON *j = test_read_json(b);
    const cJSON *named = cJSON_GetObjectItemCaseSensitive(j, "base_model_name_or_path");
    if (!base || !cJSON_IsString(named) || strcmp(named->valuestring, base) != 0) {
        fprintf(stderr, "%s: saved base_model_name_or_path is %s, want \"%s\"\n", name,
                cJSON_IsString(named) ? named->valuestring : "not a string", base ? base : "?");
        check_failures++;
    }
    cJSON_Delete(j);
    free(base);
    dp_model *back = NULL;
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    CHECK_OK(dp_model_load(cpu, out, &o, &back));
    CHECK(back && dp_model_config_of(back)->lora_rank == dp_model_config_of(m)->lora_rank);
    dp_model_free(back);
    snprintf(a, sizeof a, "%s/peft/%s/adapter_model.safetensors", fixtures, name);
    snprintf(b, sizeof b, "%s/adapter_model.safetensors", out);
    dp_st_file *fa = NULL, *fb = NULL;
    CHECK_OK(dp_st_open(a, &fa));
    CHECK_OK(dp_st_open(b, &fb));
    if (fa && fb) {
        CHECK_EQ_U64(dp_st_count(fb), dp_st_count(fa));
        for (int i = 0; i < dp_st_count(fa); i++) {
            const dp_st_tensor *x = dp_st_at(fa, i), *y = dp_st_find(fb, x->name);
            CHECK(y && y->ndim == x->ndim && y->numel == x->numel && strcmp(y->dtype, x->dtype) == 0);
            if (!y) continue;
            for (int d = 0; d < x->ndim; d++) CHECK(y->shape[d] == x->shape[d]);
            CHECK(memcmp(dp_st_data(fa, x), dp_st_data(fb, y), (size_t)(x->end - x->begin)) == 0);
        }
    }
    dp_st_close(fa);
    dp_st_close(fb);
}

/* adapter_config.json keys that change what the adapters compute: refused, never ignored (an
 * alpha_pattern loaded without a word would scale some adapters wrong) */
static void check_refusals(const char *name, const char *dir) {
    char path[512], fixture[1200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    snprintf(fixture, sizeof fixture, "%s/peft/%s/adapter_config.json", fixtures, name);
    static const struct {
        const char *key, *value, *word;
    } cases[] = {
        {"alpha_pattern", "{\"down_proj\": 16, \"c_fc\": 16}", "'alpha_pattern'"},
        {"rank_pattern", "{\"c_attn\": 2, \"down_proj\": 2}", "'rank_pattern'"},
        {"lora_bias", "true", "lora_bias"},
        {"use_dora", "true", "use_dora"},
        {"alpha_pattern", "[]", "'alpha_pattern' must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *fp = fopen(fixture, "rb");
        cJSON *j = NULL;
        if (fp) {
            static char text[1 << 16];
            size_t n = fread(text, 1, sizeof text - 1, fp);
            fclose(fp);
            text[n] = '\0';
            j = cJSON_Parse(text);
        }
        CHECK(j != NULL);
        if (!j) return;
        cJSON_ReplaceItemInObject(j, cases[i].key, cJSON_Parse(cases[i].value));
        char *out = cJSON_Print(j);
        cJSON_Delete(j);
        fp = fopen(path, "wb");
        CHECK(fp && out);
        if (fp && out) fputs(out, fp);
        if (fp) fclose(fp);
        cJSON_free(out);
        dp_model_load_opts o;
        dp_model_load_opts_default(&o);
        o.seq_len = 8;
        dp_model *m = NULL;
        int rc = dp_model_load(cpu, dir, &o, &m);
        if (rc == DP_OK || !strstr(dp_error_message(), cases[i].word)) {
            fprintf(stderr, "%s: adapter_config.json with %s = %s: status %d, '%s'\n", name, cases[i].key,
                    cases[i].value, rc, rc == DP_OK ? "loaded" : dp_error_message());
            check_failures++;
        }
        dp_model_free(m);
    }
    copy_file(fixture, path);
}

/* One fixture: PEFT's adapter peft/<name> on the base <name>, with the rank, alpha and dpprof
 * targets it must load as, the tolerances of its adapter gradients (relative to each tensor's
 * largest entry) and per-sample norms, and the formulations (bit f for dpsgd_formulation f) the
 * DP methods' layers must have used among them: the kernels the fixture is there to test. */
typedef struct {
    const char *name;
    unsigned targets;
    int rank;
    float alpha;
    double grad_tol, norm_tol;
    unsigned forms;
} peft_case;

static void check_model(const peft_case *pc) {
    const char *name = pc->name;
    char fixture[1100], dir[256], saved[256];
    snprintf(fixture, sizeof fixture, "%s/peft/%s", fixtures, name);
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    snprintf(saved, sizeof saved, "%s/%s-saved", tmpdir, name);
    test_hf_ref r;
    if (test_hf_ref_read(fixture, &r) != 0) {
        check_failures++;
        return;
    }
    /* PEFT's folder as PEFT wrote it, on its base */
    char base[1100];
    snprintf(base, sizeof base, "%s/%s", fixtures, name);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = r.T;
    o.batch = r.B;
    o.adapter = fixture;
    dp_model *m = NULL;
    CHECK_OK(dp_model_load(cpu, base, &o, &m));
    if (!m) return;
    assemble(name, dir); /* the same files in one folder: the same model */
    dp_model *together = test_hf_load(cpu, dir, &r, DP_F32);
    CHECK(together && dp_model_param_count(together) == dp_model_param_count(m));
    for (int i = 0; together && i < dp_model_param_count(m) && i < dp_model_param_count(together); i++) {
        const dp_tensor *x = &dp_model_param(m, i)->value, *y = &dp_model_param(together, i)->value;
        CHECK(x->numel == y->numel && memcmp(x->data, y->data, (size_t)x->numel * sizeof(float)) == 0);
    }
    dp_model_free(together);
    const dp_model_config *c = dp_model_config_of(m);
    CHECK(c->lora_rank == pc->rank && c->lora_alpha == pc->alpha && c->lora_targets == pc->targets);
    check_loss_and_grads(name, m, &r, fixture, pc->grad_tol);
    char what[64];
    snprintf(what, sizeof what, "%s + PEFT adapter", name);
    unsigned forms = 0;
    test_hf_check_dp_norms_forms(m, &r, pc->norm_tol, what, &forms);
    for (int f = 0; f < DPSGD_N_FORMULATIONS; f++)
        if ((pc->forms >> f & 1) && !(forms >> f & 1)) {
            fprintf(stderr, "%s: no layer used the '%s' formulation\n", what, dpsgd_formulation_name(f));
            check_failures++;
        }
    check_save(m, name, saved);
    dp_model_free(m);
    check_refusals(name, dir);
}

/* PEFT's adapter folder alone is no checkpoint: refused naming what it holds and how to load it, with
 * the base its adapter_config.json names when that is a local folder; adapter = a folder without
 * one, or beside a base holding adapters of its own, refused naming the conflict. */
static void check_adapter_folder(void) {
    char adapter[1100], base[1100], copy[256], path[1200], src[1200];
    snprintf(adapter, sizeof adapter, "%s/peft/gpt2", fixtures);
    snprintf(base, sizeof base, "%s/gpt2", fixtures);
    expect_load_error(cpu, adapter, DP_EIO, "holds a PEFT adapter (adapter_config.json) but no config.json",
                      "model = {path = BASE, adapter = \"");
    dp_model_config cfg;
    CHECK(dp_model_config_read(adapter, &cfg) == DP_EIO &&
          strstr(dp_error_message(), "dpprof.model.load(BASE, {adapter"));
    /* base_model_name_or_path naming a local checkpoint: the message names it */
    snprintf(copy, sizeof copy, "%s/adapter-named", tmpdir);
    CHECK(mkdir(copy, 0777) == 0);
    snprintf(src, sizeof src, "%s/adapter_model.safetensors", adapter);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", copy);
    copy_file(src, path);
    snprintf(src, sizeof src, "%s/adapter_config.json", adapter);
    cJSON *j = test_read_json(src);
    if (j) cJSON_ReplaceItemInObject(j, "base_model_name_or_path", cJSON_CreateString(base));
    char *text = j ? cJSON_Print(j) : NULL;
    snprintf(path, sizeof path, "%s/adapter_config.json", copy);
    if (text) write_file(path, text);
    cJSON_free(text);
    cJSON_Delete(j);
    char want[1500];
    snprintf(want, sizeof want, "model = {path = \"%s\", adapter = \"%s\"}", base, copy);
    expect_load_error(cpu, copy, DP_EIO, "but no config.json", want);
    /* a hub name there: said to be none of the local folders */
    write_file(path, "{\"peft_type\": \"LORA\", \"r\": 4, \"base_model_name_or_path\": \"openai-community/gpt2\"}");
    expect_load_error(cpu, copy, DP_EIO, "model = {path = BASE",
                      "base_model_name_or_path 'openai-community/gpt2' is no local checkpoint folder");
    /* a local folder that is no checkpoint: said so */
    char text2[1400];
    snprintf(text2, sizeof text2, "{\"peft_type\": \"LORA\", \"r\": 4, \"base_model_name_or_path\": \"%s\"}", tmpdir);
    write_file(path, text2);
    snprintf(want, sizeof want, "base_model_name_or_path '%s' is a folder without config.json", tmpdir);
    expect_load_error(cpu, copy, DP_EIO, "model = {path = BASE", want);

    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.seq_len = 8;
    dp_model *m = NULL;
    o.adapter = base; /* a checkpoint, not an adapter */
    CHECK(dp_model_load(cpu, base, &o, &m) == DP_OK && m && dp_model_config_of(m)->lora_rank == 0); /* its own dir */
    dp_model_free(m);
    m = NULL;
    snprintf(src, sizeof src, "%s/llama", fixtures);
    o.adapter = src;
    CHECK(dp_model_load(cpu, base, &o, &m) == DP_EIO && !m && strstr(dp_error_message(), "no adapter_config.json") &&
          strstr(dp_error_message(), "adapter = DIR names a PEFT adapter folder"));
    /* a base with adapters of its own and adapter = another folder: one or the other */
    snprintf(src, sizeof src, "%s/llama3_mqa_lora", fixtures);
    snprintf(path, sizeof path, "%s/peft/llama", fixtures);
    o.adapter = path;
    CHECK(dp_model_load(cpu, src, &o, &m) == DP_EINVAL && !m &&
          strstr(dp_error_message(), "LoRA adapters of its own") && strstr(dp_error_message(), "give one"));
}

int main(void) {
    CHECK_OK(dp_engine_init());
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    test_fixture_dir(fixtures, sizeof fixtures, "hf");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dpprof-peft-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    /* T = 300 (three flash tiles), every linear adapted, alpha / r = 1.5, Llama with grouped-query
     * attention: flash's gradient tiles and strips on the adapters, bk's materialized LoRA B. The
     * gradients of the long fixtures are held to 3e-4: measured 1.1e-4 (llama's q_proj lora_B, an
     * ill-conditioned sum over 900 positions: PyTorch's own f32 backward is 3.4e-5 to 4.6e-5 off
     * float64 on it) */
    const unsigned t300 = 1u << DPSGD_FORM_GRAD_TILE | 1u << DPSGD_FORM_GRAD_STRIP | 1u << DPSGD_FORM_MATERIALIZE;
    const unsigned all = DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_FC | DP_LORA_DOWN;
    const peft_case cases[] = {
        {"gpt2", DP_LORA_QKV | DP_LORA_FC, 4, 8.0f, 1e-4, 2e-5, 0}, /* norms: f32 sums, measured at most 4.7e-6 */
        {"llama", DP_LORA_QKV | DP_LORA_PROJ | DP_LORA_DOWN, 4, 8.0f, 1e-4, 2e-5, 0},
        {"gpt2_t300", all, 8, 12.0f, 3e-4, PEFT_LONG_REL_TOL, t300},
        {"llama_gqa_t300", all, 8, 12.0f, 3e-4, PEFT_LONG_REL_TOL, t300},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_model(&cases[i]);
    check_adapter_folder();
    dp_engine_shutdown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_peft_exchange");
}
