/* test_memory.c: the allocator's figures are exact. Known sizes go in and out of several
 * categories and modules; every current, peak and live-at-peak byte count is asserted, as are
 * snapshots, the event log (and its compaction), the timeline, limits and the OOM report. */
#include "check.h"
#include "test_util.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "memory.h"
#include "scope.h"

#include <stdlib.h>
#include <string.h>

static void test_exact_figures(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    CHECK(m != NULL);
    uint32_t emb = dp_module_intern("wte"), fc = dp_module_intern("layers.0.mlp.fc");
    dp_alloc p1, p2, a1, a2, t1;
    CHECK_OK(dp_mem_alloc_module(m, 1000, DP_CAT_PARAMETERS, emb, &p1));
    CHECK_OK(dp_mem_alloc_module(m, 2000, DP_CAT_PARAMETERS, fc, &p2));
    CHECK_OK(dp_mem_alloc_module(m, 300, DP_CAT_ACTIVATIONS, fc, &a1));
    CHECK_OK(dp_mem_alloc_module(m, 700, DP_CAT_ACTIVATIONS, fc, &a2));
    CHECK_OK(dp_mem_alloc_module(m, 5000, DP_CAT_TEMP, fc, &t1)); /* total 9000: the peak */
    dp_mem_release(m, &t1);                                       /* 4000 */
    dp_mem_release(m, &a1);                                       /* 3700 */
    dp_alloc g1;
    CHECK_OK(dp_mem_alloc_module(m, 3000, DP_CAT_GRADIENTS, emb, &g1)); /* 6700 */
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 6700);
    CHECK_EQ_U64(s.total_peak, 9000);
    CHECK_EQ_U64(s.current[DP_CAT_PARAMETERS], 3000);
    CHECK_EQ_U64(s.current[DP_CAT_ACTIVATIONS], 700);
    CHECK_EQ_U64(s.current[DP_CAT_TEMP], 0);
    CHECK_EQ_U64(s.current[DP_CAT_GRADIENTS], 3000);
    CHECK_EQ_U64(s.peak[DP_CAT_ACTIVATIONS], 1000);
    CHECK_EQ_U64(s.peak[DP_CAT_TEMP], 5000);
    CHECK_EQ_U64(s.peak[DP_CAT_GRADIENTS], 3000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_PARAMETERS], 3000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_ACTIVATIONS], 1000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_TEMP], 5000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_GRADIENTS], 0); /* allocated after the peak */
    CHECK_EQ_U64(s.reserved_current, 6700);            /* no pool: reserved == allocated */
    CHECK_EQ_U64(s.reserved_peak, 9000);
    CHECK_EQ_U64(s.n_allocs, 6);
    CHECK_EQ_U64(s.n_frees, 2);
    CHECK_EQ_U64(s.n_live, 4);

    uint64_t cur, peak, lap;
    dp_mem_module_stats(m, fc, &cur, &peak, &lap);
    CHECK_EQ_U64(cur, 2700);
    CHECK_EQ_U64(peak, 8000);
    CHECK_EQ_U64(lap, 8000);
    dp_mem_module_stats(m, emb, &cur, &peak, &lap);
    CHECK_EQ_U64(cur, 4000);
    CHECK_EQ_U64(peak, 4000);
    CHECK_EQ_U64(lap, 1000);

    /* a new, higher peak moves live-at-peak with it */
    dp_alloc big;
    CHECK_OK(dp_mem_alloc_module(m, 10000, DP_CAT_PER_SAMPLE_GRADS, fc, &big)); /* 16700 */
    dp_mem_release(m, &big);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_peak, 16700);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_TEMP], 0);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_GRADIENTS], 3000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_PER_SAMPLE_GRADS], 10000);
    CHECK_EQ_U64(s.current[DP_CAT_PER_SAMPLE_GRADS], 0);

    /* reset: peaks start again from what is live */
    dp_mem_reset_peak(m);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_peak, 6700);
    CHECK_EQ_U64(s.peak[DP_CAT_TEMP], 0);
    CHECK_EQ_U64(s.peak[DP_CAT_PER_SAMPLE_GRADS], 0);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_GRADIENTS], 3000);
    dp_mem_module_stats(m, fc, &cur, &peak, &lap);
    CHECK_EQ_U64(peak, 2700);

    /* snapshots record the moment */
    CHECK_OK(dp_mem_snapshot_take(m, "before"));
    dp_mem_release(m, &g1);
    CHECK_OK(dp_mem_snapshot_take(m, "after"));
    CHECK_EQ_U64(dp_mem_snapshot_count(m), 2);
    const dp_mem_snapshot *s0 = dp_mem_snapshot_at(m, 0), *s1 = dp_mem_snapshot_at(m, 1);
    CHECK(strcmp(s0->name, "before") == 0 && strcmp(s1->name, "after") == 0);
    CHECK_EQ_U64(s0->allocated, 6700);
    CHECK_EQ_U64(s1->allocated, 3700);
    CHECK_EQ_U64(s0->categories[DP_CAT_GRADIENTS], 3000);
    CHECK_EQ_U64(s1->categories[DP_CAT_GRADIENTS], 0);
    CHECK(s1->t_s >= s0->t_s);

    /* the event log holds every change, in order, with the running total */
    CHECK_EQ_U64(dp_mem_event_count(m), 11);
    CHECK_EQ_U64(dp_mem_event_stride(m), 1);
    const int64_t deltas[11] = {1000, 2000, 300, 700, 5000, -5000, -300, 3000, 10000, -10000, -3000};
    uint64_t total = 0;
    for (size_t i = 0; i < 11; i++) {
        const dp_mem_event *e = dp_mem_event_at(m, i);
        total += (uint64_t)deltas[i];
        CHECK(e->delta == deltas[i]);
        CHECK_EQ_U64(e->allocated, total);
    }
    dp_mem_release(m, &g1); /* already released: a no-op */
    dp_mem_release(m, &p1);
    dp_mem_release(m, &p2);
    dp_mem_release(m, &a2);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 0);
    CHECK_EQ_U64(s.n_live, 0);
    dp_mem_destroy(m);
}

static void test_event_compaction_and_timeline(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 8); /* a tiny log, to force compaction */
    dp_alloc a[20];
    uint64_t peak = 0, cur = 0;
    for (int i = 0; i < 20; i++) { /* a sawtooth: up by i+1 then down by half of it */
        CHECK_OK(dp_mem_alloc(m, (uint64_t)(i + 1) * 16, DP_CAT_OTHER, &a[i]));
        cur += (uint64_t)(i + 1) * 16;
        if (cur > peak) peak = cur;
    }
    for (int i = 0; i < 20; i += 2) dp_mem_release(m, &a[i]);
    CHECK(dp_mem_event_count(m) <= 9);  /* 8 logged and one partly merged */
    CHECK(dp_mem_event_stride(m) >= 4); /* 30 raw events in at most 8 slots */
    uint64_t logged_max = 0;
    for (size_t i = 0; i < dp_mem_event_count(m); i++)
        if (dp_mem_event_at(m, i)->allocated > logged_max) logged_max = dp_mem_event_at(m, i)->allocated;
    CHECK_EQ_U64(logged_max, peak); /* compaction keeps the maximum */
    int64_t t[3];
    uint64_t al[3], re[3];
    size_t n = dp_mem_timeline(m, 3, t, al, re);
    CHECK_EQ_U64(n, 3);
    CHECK(al[0] == peak || al[1] == peak || al[2] == peak);
    CHECK(t[0] <= t[1] && t[1] <= t[2]);
    for (int i = 1; i < 20; i += 2) dp_mem_release(m, &a[i]);
    dp_mem_destroy(m);
}

/* a fresh allocator has no module table yet: resetting and reading it must be well defined */
static void test_fresh_allocator(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    dp_mem_reset_peak(m);
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_peak, 0);
    uint64_t cur = 1, peak = 1, lap = 1;
    dp_mem_module_stats(m, 0, &cur, &peak, &lap);
    CHECK(cur == 0 && peak == 0 && lap == 0);
    dp_mem_destroy(m);
}

static void test_limit_and_oom_report(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    dp_mem_set_limit(m, 4096);
    dp_alloc a, b;
    uint32_t mod = dp_module_intern("layers.3.attn.core");
    CHECK_OK(dp_mem_alloc_module(m, 3 << 10, DP_CAT_ACTIVATIONS, mod, &a));
    int rc = dp_mem_alloc_module(m, 2 << 10, DP_CAT_TEMP, mod, &b);
    CHECK(rc == DP_EOOM);
    CHECK(!b.live);
    const dp_oom_info *o = dp_mem_last_oom(m);
    CHECK(o->valid);
    CHECK_EQ_U64(o->requested, 2048);
    CHECK(o->category == DP_CAT_TEMP);
    CHECK(o->module == mod);
    CHECK_EQ_U64(o->live[DP_CAT_ACTIVATIONS], 3072);
    CHECK_EQ_U64(o->total_live, 3072);
    CHECK_EQ_U64(o->limit, 4096);
    const char *msg = dp_error_message();
    CHECK(strstr(msg, "out of memory") != NULL);
    CHECK(strstr(msg, "requested 2048 bytes") != NULL);
    CHECK(strstr(msg, "temp") != NULL);
    CHECK(strstr(msg, "layers.3.attn.core") != NULL);
    CHECK(strstr(msg, "activations=") != NULL);
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 3072); /* a refused request changes nothing */
    CHECK_EQ_U64(s.n_allocs, 1);
    CHECK(dp_mem_alloc(m, 1, (dp_category)99, &b) == DP_EINVAL);
    dp_mem_release(m, &a);
    dp_mem_destroy(m);
}

/* A hold (issue 38.3): what was live before it is left out of every figure and reported as held,
 * to the byte; the workspace stays counted; a held allocation released leaves the held bytes
 * only; the limit counts what is held; ending the hold counts it again. */
static void test_hold(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    uint32_t mod = dp_module_intern("script.model"), ws = dp_module_intern("cublas");
    dp_alloc held_a, held_b, w, own, again;
    CHECK_OK(dp_mem_alloc_module(m, 1000, DP_CAT_PARAMETERS, mod, &held_a));
    CHECK_OK(dp_mem_alloc_module(m, 200, DP_CAT_ACTIVATIONS, mod, &held_b));
    CHECK_OK(dp_mem_alloc_module(m, 64, DP_CAT_WORKSPACE, ws, &w));
    dp_mem_hold_live(m);
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 64); /* the workspace alone */
    CHECK_EQ_U64(s.total_peak, 64);
    CHECK_EQ_U64(s.held_total, 1200);
    CHECK_EQ_U64(s.held[DP_CAT_PARAMETERS], 1000);
    CHECK_EQ_U64(s.held[DP_CAT_ACTIVATIONS], 200);
    CHECK_EQ_U64(s.held[DP_CAT_WORKSPACE], 0);
    CHECK_EQ_U64(s.current[DP_CAT_PARAMETERS], 0);
    CHECK_EQ_U64(s.current[DP_CAT_WORKSPACE], 64);
    CHECK_EQ_U64(s.n_live, 1);
    uint64_t cur, peak, lap;
    dp_mem_module_stats(m, mod, &cur, &peak, &lap);
    CHECK(cur == 0 && peak == 0 && lap == 0);
    dp_mem_module_stats(m, ws, &cur, NULL, NULL);
    CHECK_EQ_U64(cur, 64);
    CHECK_OK(dp_mem_alloc_module(m, 300, DP_CAT_PARAMETERS, mod, &own));
    dp_mem_release(m, &held_a); /* the script frees its own tensor meanwhile */
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 364);
    CHECK_EQ_U64(s.total_peak, 364);
    CHECK_EQ_U64(s.current[DP_CAT_PARAMETERS], 300);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_PARAMETERS], 300);
    CHECK_EQ_U64(s.held_total, 200);
    CHECK_EQ_U64(s.held[DP_CAT_PARAMETERS], 0);
    CHECK_EQ_U64(s.n_live, 2);
    dp_mem_module_stats(m, mod, &cur, &peak, NULL);
    CHECK_EQ_U64(cur, 300);
    CHECK_EQ_U64(peak, 300);
    /* the limit counts what is held: 364 counted + 200 held + 500 > 1000 */
    dp_mem_set_limit(m, 1000);
    CHECK(dp_mem_alloc_module(m, 500, DP_CAT_TEMP, mod, &again) == DP_EOOM);
    CHECK(strstr(dp_error_message(), "live from before the experiment (held)") != NULL); /* the limit's reason */
    dp_mem_set_limit(m, 0);
    dp_mem_end_hold(m);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 564);
    CHECK_EQ_U64(s.held_total, 0);
    CHECK_EQ_U64(s.current[DP_CAT_ACTIVATIONS], 200);
    CHECK_EQ_U64(s.n_live, 3);
    dp_mem_module_stats(m, mod, &cur, NULL, NULL);
    CHECK_EQ_U64(cur, 500);
    /* a second hold holds what the first experiment left too */
    dp_mem_hold_live(m);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.held_total, 500);
    CHECK_EQ_U64(s.total_current, 64);
    dp_mem_release(m, &own);
    dp_mem_release(m, &held_b);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.held_total, 0);
    CHECK_EQ_U64(s.total_current, 64);
    dp_mem_end_hold(m);
    dp_mem_release(m, &w);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 0);
    CHECK_EQ_U64(s.n_live, 0);
    dp_mem_destroy(m);
}

/* A retag moves live bytes to another category and module: the totals stay, a peak reached
 * before keeps its old figures, the event log's deltas still sum per category to what is live,
 * held bytes move among the held figures; dead allocations and the workspace are refused. */
static void test_retag(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    uint32_t head = dp_module_intern("lm_head"), wte = dp_module_intern("transformer.wte");
    dp_alloc logits, t, w, old;
    CHECK_OK(dp_mem_alloc_module(m, 4000, DP_CAT_ACTIVATIONS, head, &logits));
    CHECK_OK(dp_mem_alloc_module(m, 1000, DP_CAT_TEMP, head, &t)); /* 5000: the peak */
    dp_mem_release(m, &t);
    CHECK_OK(dp_mem_retag(m, &logits, DP_CAT_OUTPUT_GRADS, wte));
    CHECK(logits.category == DP_CAT_OUTPUT_GRADS && logits.module == wte);
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 4000);
    CHECK_EQ_U64(s.total_peak, 5000);
    CHECK_EQ_U64(s.current[DP_CAT_ACTIVATIONS], 0);
    CHECK_EQ_U64(s.current[DP_CAT_OUTPUT_GRADS], 4000);
    CHECK_EQ_U64(s.peak[DP_CAT_OUTPUT_GRADS], 4000);
    CHECK_EQ_U64(s.peak[DP_CAT_ACTIVATIONS], 4000);
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_ACTIVATIONS], 4000); /* the peak came before the move */
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_OUTPUT_GRADS], 0);
    CHECK_EQ_U64(s.n_allocs, 2);
    CHECK_EQ_U64(s.n_live, 1);
    uint64_t cur, peak, lap;
    dp_mem_module_stats(m, head, &cur, &peak, &lap);
    CHECK(cur == 0 && peak == 5000 && lap == 5000);
    dp_mem_module_stats(m, wte, &cur, &peak, &lap);
    CHECK(cur == 4000 && peak == 4000 && lap == 0);
    int64_t by_cat[DP_CAT_COUNT] = {0};
    for (size_t i = 0; i < dp_mem_event_count(m); i++) {
        const dp_mem_event *e = dp_mem_event_at(m, i);
        by_cat[e->category] += e->delta;
        CHECK(e->allocated <= 5000);
    }
    CHECK(by_cat[DP_CAT_ACTIVATIONS] == 0 && by_cat[DP_CAT_OUTPUT_GRADS] == 4000 && by_cat[DP_CAT_TEMP] == 0);
    CHECK_EQ_U64(dp_mem_event_at(m, dp_mem_event_count(m) - 1)->allocated, 4000);
    /* held bytes move among the held figures, and count where they went once the hold ends */
    CHECK_OK(dp_mem_alloc_module(m, 64, DP_CAT_WORKSPACE, head, &w));
    dp_mem_hold_live(m);
    CHECK_OK(dp_mem_retag(m, &logits, DP_CAT_GRADIENTS, head));
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.held[DP_CAT_OUTPUT_GRADS], 0);
    CHECK_EQ_U64(s.held[DP_CAT_GRADIENTS], 4000);
    CHECK_EQ_U64(s.total_current, 64);
    CHECK(dp_mem_retag(m, &w, DP_CAT_TEMP, head) == DP_EINVAL);
    CHECK(strstr(dp_error_message(), "workspace") != NULL);
    CHECK(dp_mem_retag(m, &logits, DP_CAT_WORKSPACE, head) == DP_EINVAL);
    dp_mem_end_hold(m);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.current[DP_CAT_GRADIENTS], 4000);
    dp_mem_module_stats(m, head, &cur, NULL, NULL);
    CHECK_EQ_U64(cur, 4064);
    old = logits;
    dp_mem_release(m, &logits);
    CHECK(dp_mem_retag(m, &logits, DP_CAT_TEMP, head) == DP_EINVAL);
    CHECK(dp_mem_retag(m, &old, DP_CAT_COUNT, head) == DP_EINVAL); /* a bad category before anything */
    dp_mem_release(m, &w);
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_current, 0);
    CHECK_EQ_U64(s.current[DP_CAT_GRADIENTS], 0);
    dp_mem_destroy(m);
}

static void test_scopes(void) {
    int d = dp_scope_depth();
    CHECK_OK(dp_scope_push("layers"));
    CHECK_OK(dp_scope_pushf("%d", 3));
    CHECK_OK(dp_scope_push("mlp"));
    CHECK(strcmp(dp_module_name(dp_scope_current()), "layers.3.mlp") == 0);
    uint32_t id = dp_scope_current();
    dp_scope_pop();
    CHECK(strcmp(dp_module_name(dp_scope_current()), "layers.3") == 0);
    CHECK(dp_module_intern("layers.3.mlp") == id); /* interned once */
    dp_scope_unwind(d);
    CHECK(dp_scope_current() == DP_MODULE_NONE);
    CHECK(strcmp(dp_module_name(DP_MODULE_NONE), "(none)") == 0);
    CHECK(dp_scope_push("") == DP_EINVAL);
    for (int i = 0; i < DP_SCOPE_MAX_DEPTH; i++) dp_scope_push("x");
    CHECK(dp_scope_push("x") == DP_EINVAL);
    dp_scope_unwind(0);
}

/* The CPU device's allocator sees tensors' bytes the same way. */
static void test_device_allocator(void) {
    dp_device *cpu;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    dp_mem_stats s0, s1;
    dp_mem_get_stats(cpu->mem, &s0);
    dp_alloc a;
    CHECK_OK(dp_mem_alloc(cpu->mem, 12345, DP_CAT_INPUTS, &a));
    CHECK(a.ptr != NULL);
    memset(a.ptr, 1, 12345);
    dp_mem_get_stats(cpu->mem, &s1);
    CHECK_EQ_U64(s1.current[DP_CAT_INPUTS] - s0.current[DP_CAT_INPUTS], 12345);
    dp_mem_release(cpu->mem, &a);
}

int main(void) {
    CHECK_OK(dp_engine_init());
    test_exact_figures();
    test_event_compaction_and_timeline();
    test_fresh_allocator();
    test_limit_and_oom_report();
    test_hold();
    test_retag();
    test_scopes();
    test_device_allocator();
    dp_engine_shutdown();
    return check_report("test_memory");
}
