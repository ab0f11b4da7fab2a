/* test_build_parts.c: a model built in parts (dp_model_config.parts_world, fsdp) from the start.
 *
 * 1. For gpt (tied, f32; bf16 without LoRA: the tied embedding's compute copy) and llama (f32
 *    untied; bf16 LoRA: a bf16 frozen base, f32 masters of the adapters), every rank r of N = 3
 *    and 4: the model built in parts for r holds in each dp_param.part exactly the bytes of rank
 *    r's part of the model built whole ([r s, min(n, (r+1) s)), s = ceil(n / N), zeros after),
 *    in value's dtype; value keeps shape and dtype without storage; no bf16 compute copy is made
 *    (compute_copy says one is read, as the whole build's live copy does).
 * 2. The allocator's peak during that build is, in exact bytes, the largest over the tensors of
 *    (the parts made so far, its own included, + the tensor whole), which is at most the parts +
 *    the largest tensor whole; after the build the parts alone are live.
 * 3. fsdp's setup (dpsgd_set_distributed) on a model built whole for the same rank cuts the same
 *    bytes; on a model built in parts for its rank it cuts nothing again (the same parts, the same
 *    live bytes); for another rank or world it refuses with one line naming both; ddp and zero2
 *    refuse a model in parts.
 * 4. A forward of a model in parts without fsdp is refused; parts outside 0 <= r < N are refused.
 * 5. A checkpoint saved by dp_model_save and loaded in parts (each tensor whole in a `temp`, cut,
 *    freed) holds the parts of the same checkpoint loaded whole, LoRA adapters too, peaks at the
 *    parts + the largest tensor whole (its temporary), and nothing under `temp` is left. */
#include "check.h"
#include "device.h"
#include "comm.h"
#include "dpprof_engine.h"
#include "dpsgd.h"
#include "error.h"
#include "memory.h"
#include "model.h"
#include "model_io.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dp_device *cpu;

typedef struct variant {
    dp_arch arch;
    int tied, lora, bf16;
} variant;

static dp_model_config config_of(const variant *v, int64_t world, int64_t rank) {
    dp_model_config c;
    dp_model_config_default(&c, v->arch);
    c.vocab = 37, c.hidden = 16, c.layers = 2, c.ffn = 24, c.seq_len = 5, c.batch = 12, c.seed = 11;
    c.heads = 2;
    if (v->arch == DP_ARCH_LLAMA) c.heads = 4, c.kv_heads = 2;
    c.tie_head = v->tied;
    if (v->lora) {
        c.lora_rank = 3, c.lora_alpha = 6.0f;
        c.lora_targets = v->arch == DP_ARCH_GPT ? DP_LORA_QKV | DP_LORA_FC : DP_LORA_ALL;
    }
    if (v->bf16) c.dtype = DP_BF16;
    c.parts_world = world, c.parts_rank = rank;
    return c;
}

static uint64_t live_total(void) {
    dp_mem_stats s;
    dp_mem_get_stats(cpu->mem, &s);
    return s.total_current;
}

/* rank r's part of whole's bytes (n elements of size es), zero-padded to s elements, into out */
static void expected_part(const dp_tensor *whole, int64_t N, int64_t r, unsigned char *out) {
    size_t es = dp_dtype_size(whole->dtype);
    int64_t n = whole->numel, s = dp_part_len(n, N), lo = s * r < n ? s * r : n, own = (lo + s < n ? lo + s : n) - lo;
    unsigned char *all = malloc((size_t)n * es + 1);
    CHECK_OK(dp_tensor_to_host(whole, all, (uint64_t)n * es));
    memset(out, 0, (size_t)s * es);
    if (own > 0) memcpy(out, all + (size_t)lo * es, (size_t)own * es);
    free(all);
}

/* every part of `parted` equals rank r's part of `whole`'s values, byte for byte */
static void check_parts(dp_model *whole, dp_model *parted, int64_t N, int64_t r, const char *what) {
    CHECK(dp_model_param_count(whole) == dp_model_param_count(parted));
    for (int i = 0; i < dp_model_param_count(whole) && i < dp_model_param_count(parted); i++) {
        dp_param *w = dp_model_param(whole, i), *p = dp_model_param(parted, i);
        size_t es = dp_dtype_size(w->value.dtype);
        int64_t s = dp_part_len(w->value.numel, N);
        CHECK(p->part.alloc.live && p->part.numel == s && p->part.dtype == w->value.dtype);
        CHECK(!p->value.alloc.live && p->value.numel == w->value.numel && p->value.dtype == w->value.dtype);
        CHECK(p->value.ndim == w->value.ndim && memcmp(p->value.shape, w->value.shape, sizeof p->value.shape) == 0);
        CHECK(!p->compute.alloc.live);
        CHECK(p->compute_copy == w->compute_copy);
        if (!p->part.alloc.live || p->part.numel != s) continue;
        unsigned char *want = malloc((size_t)s * es), *got = malloc((size_t)s * es);
        expected_part(&w->value, N, r, want);
        CHECK_OK(dp_tensor_to_host(&p->part, got, (uint64_t)s * es));
        if (memcmp(want, got, (size_t)s * es) != 0) {
            fprintf(stderr, "%s: rank %lld of %lld: '%s' differs from the whole model's part\n", what, (long long)r,
                    (long long)N, w->name);
            check_failures++;
        }
        free(want);
        free(got);
    }
}

/* the build's exact peak above `base`: max over tensors of (parts so far, its own included) + it whole */
static uint64_t expected_build_peak(dp_model *whole, int64_t N, uint64_t *parts_total, uint64_t *largest) {
    uint64_t parts = 0, peak = 0;
    *largest = 0;
    for (int i = 0; i < dp_model_param_count(whole); i++) {
        const dp_param *w = dp_model_param(whole, i);
        size_t es = dp_dtype_size(w->value.dtype);
        uint64_t n = (uint64_t)w->value.numel * es;
        parts += (uint64_t)dp_part_len(w->value.numel, N) * es;
        if (parts + n > peak) peak = parts + n;
        if (n > *largest) *largest = n;
    }
    *parts_total = parts;
    return peak;
}

static dpsgd *fsdp_wrap(dp_model *m, dp_comm *comm, int64_t N, int64_t r, int *rc) {
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    cfg.expected_batch_size = 12;
    cfg.max_physical_batch_size = 12;
    cfg.dataset_size = 1000;
    dpsgd *dp = NULL;
    CHECK_OK(dpsgd_new(m, &cfg, &dp));
    dp_comm_plan(comm, (int)r, (int)N);
    *rc = dp ? dpsgd_set_distributed(dp, comm, DPSGD_STRATEGY_FSDP) : DP_EINVAL;
    return dp;
}

static void test_variant(const variant *v, int64_t N) {
    char what[96];
    snprintf(what, sizeof what, "%s%s%s%s N=%lld", v->arch == DP_ARCH_GPT ? "gpt" : "llama", v->tied ? " tied" : "",
             v->lora ? " lora" : "", v->bf16 ? " bf16" : "", (long long)N);
    dp_model_config wc = config_of(v, 0, 0);
    dp_model *whole = NULL;
    CHECK_OK(dp_model_new(cpu, &wc, &whole));
    if (!whole) return;
    for (int i = 0; i < dp_model_param_count(whole); i++) { /* what the whole build copies, compute_copy says */
        const dp_param *p = dp_model_param(whole, i);
        CHECK(p->compute_copy == p->compute.alloc.live);
    }
    uint64_t parts_total, largest, want_peak = expected_build_peak(whole, N, &parts_total, &largest);
    CHECK(want_peak <= parts_total + largest);
    for (int64_t r = 0; r < N; r++) {
        dp_model_config pc = config_of(v, N, r);
        uint64_t base = live_total();
        dp_mem_reset_peak(cpu->mem);
        dp_model *parted = NULL;
        CHECK_OK(dp_model_new(cpu, &pc, &parted));
        if (!parted) continue;
        dp_mem_stats st;
        dp_mem_get_stats(cpu->mem, &st);
        CHECK_EQ_U64(st.total_peak - base, want_peak);
        CHECK_EQ_U64(st.total_current - base, parts_total);
        check_parts(whole, parted, N, r, what);

        /* fsdp on a model built in parts for its rank: no second cut */
        dp_comm comm;
        int rc;
        uint64_t before = live_total();
        dpsgd *dp = fsdp_wrap(parted, &comm, N, r, &rc);
        CHECK_OK(rc);
        CHECK_EQ_U64(live_total(), before);
        check_parts(whole, parted, N, r, what);
        dpsgd_free(dp);
        dp_model_free(parted);

        /* fsdp on a model built whole: the same parts */
        dp_model *again = NULL;
        CHECK_OK(dp_model_new(cpu, &wc, &again));
        dp = fsdp_wrap(again, &comm, N, r, &rc);
        CHECK_OK(rc);
        check_parts(whole, again, N, r, what);
        dpsgd_free(dp);
        dp_model_free(again);

        /* for another rank, and another world: refused, naming both */
        parted = NULL;
        CHECK_OK(dp_model_new(cpu, &pc, &parted));
        int64_t other = (r + 1) % N;
        dp = fsdp_wrap(parted, &comm, N, other, &rc);
        CHECK(rc == DP_EINVAL);
        char want[160];
        snprintf(want, sizeof want, "built in parts for rank %lld of a world of %lld; this run is rank %lld of %lld",
                 (long long)r, (long long)N, (long long)other, (long long)N);
        CHECK(strstr(dp_error_message(), want) != NULL);
        CHECK(strchr(dp_error_message(), '\n') == NULL);
        dpsgd_free(dp);
        dp = fsdp_wrap(parted, &comm, N == 3 ? 6 : 2, r % 2, &rc);
        CHECK(rc == DP_EINVAL);
        snprintf(want, sizeof want, "this run is rank %lld of %lld", (long long)(r % 2), (long long)(N == 3 ? 6 : 2));
        CHECK(strstr(dp_error_message(), want) != NULL);
        if (!strstr(dp_error_message(), want)) fprintf(stderr, "  got: %s\n", dp_error_message());
        dpsgd_free(dp);
        /* ddp and zero2 hold the whole model: refused, naming fsdp */
        dpsgd_config dcfg;
        dpsgd_config_default(&dcfg);
        dcfg.expected_batch_size = 12, dcfg.max_physical_batch_size = 12, dcfg.dataset_size = 1000;
        dp = NULL;
        CHECK_OK(dpsgd_new(parted, &dcfg, &dp));
        dp_comm_plan(&comm, (int)r, (int)N);
        CHECK(dp && dpsgd_set_distributed(dp, &comm, DPSGD_STRATEGY_ZERO2) == DP_EINVAL);
        CHECK(strstr(dp_error_message(), "only fsdp trains") != NULL);
        CHECK(dp && dpsgd_set_distributed(dp, &comm, DPSGD_STRATEGY_DDP) == DP_EINVAL);
        dpsgd_free(dp);
        dp_model_free(parted);
    }
    dp_model_free(whole);
}

static void test_refusals(void) {
    variant v = {DP_ARCH_LLAMA, 0, 0, 0};
    dp_model_config c = config_of(&v, 2, 2);
    dp_model *m = NULL;
    CHECK(dp_model_new(cpu, &c, &m) == DP_EINVAL && m == NULL);
    CHECK(strstr(dp_error_message(), "'parts'") != NULL);
    c = config_of(&v, 0, 1);
    CHECK(dp_model_new(cpu, &c, &m) == DP_EINVAL && m == NULL);
    c = config_of(&v, 2, 1);
    CHECK_OK(dp_model_new(cpu, &c, &m));
    if (!m) return;
    dp_tensor *ids = test_ids(cpu, 2, 5, c.vocab, 1), *tg = test_ids(cpu, 2, 5, c.vocab, 2);
    float loss;
    CHECK(dp_model_forward(m, ids, tg, &loss, NULL) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "held in parts") != NULL);
    dp_tensor_free(ids);
    dp_tensor_free(tg);
    dp_model_free(m);
}

static void test_load(const variant *v, int64_t N, const char *dir) {
    dp_model_config wc = config_of(v, 0, 0);
    dp_model *saved = NULL;
    CHECK_OK(dp_model_new(cpu, &wc, &saved));
    if (!saved) return;
    for (int i = 0; i < dp_model_param_count(saved); i++) { /* every value its own, LoRA's B too */
        dp_param *p = dp_model_param(saved, i);
        CHECK_OK(dp_tensor_rand(&p->value, DP_RAND_NORMAL, 0.0f, 0.5f, 77, 900 + (uint64_t)i));
    }
    CHECK_OK(dp_model_sync_compute_weights(saved));
    CHECK_OK(dp_model_save(saved, dir));
    dp_model_free(saved);
    dp_model_load_opts o;
    dp_model_load_opts_default(&o);
    o.dtype = wc.dtype, o.seq_len = wc.seq_len, o.batch = wc.batch;
    dp_model *whole = NULL;
    CHECK_OK(dp_model_load(cpu, dir, &o, &whole));
    if (!whole) return;
    for (int64_t r = 0; r < N; r++) {
        o.parts_world = N, o.parts_rank = r;
        dp_model *parted = NULL;
        uint64_t base = live_total();
        dp_mem_reset_peak(cpu->mem);
        CHECK_OK(dp_model_load(cpu, dir, &o, &parted));
        if (!parted) continue;
        dp_mem_stats st;
        dp_mem_get_stats(cpu->mem, &st);
        CHECK_EQ_U64(st.current[DP_CAT_TEMP], 0);
        uint64_t parts_total, largest;
        expected_build_peak(whole, N, &parts_total, &largest);
        CHECK_EQ_U64(st.total_current - base, parts_total);
        /* every part made by the build, then each tensor whole in its temporary: the largest one's */
        CHECK_EQ_U64(st.total_peak - base, parts_total + largest);
        check_parts(whole, parted, N, r, "loaded");
        dp_model_free(parted);
    }
    dp_model_free(whole);
}

int main(void) {
    dp_engine_init();
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    const variant vs[] = {
        {DP_ARCH_GPT, 1, 0, 0},   {DP_ARCH_GPT, 1, 0, 1},   {DP_ARCH_LLAMA, 0, 0, 0},
        {DP_ARCH_LLAMA, 0, 1, 1}, {DP_ARCH_LLAMA, 0, 1, 0},
    };
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        test_variant(&vs[k], 3);
        test_variant(&vs[k], 4);
    }
    test_refusals();
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/dpprof-parts-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "test_build_parts: cannot make a temporary directory\n");
        return 1;
    }
    const variant lv[] = {{DP_ARCH_LLAMA, 0, 1, 1}, {DP_ARCH_GPT, 1, 1, 0}, {DP_ARCH_LLAMA, 0, 0, 0}};
    for (size_t k = 0; k < sizeof lv / sizeof lv[0]; k++) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s/m%zu", dir, k);
        test_load(&lv[k], 3, sub);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_build_parts: could not remove %s\n", dir);
    dp_mem_stats st;
    dp_mem_get_stats(cpu->mem, &st);
    CHECK_EQ_U64(st.total_current, 0);
    return check_report("test_build_parts");
}
