/* test_profile.c: the pieces of profile = "ops" in the engine, with exact figures.
 *   - the memory window: its peak and what was live at it, independent of the run's peak, and
 *     the allocator's traffic counters;
 *   - the modelled clock: each op recorded advances it by max(flops/peak, bytes/bandwidth);
 *   - the profiler on the CPU: a call is charged to the ledger entry added last, with the bytes
 *     allocated and freed since the call before; nested calls count once; off, nothing is charged;
 *   - on the plan device: a call lasts the modelled time of its op. */
#include "check.h"
#include "test_util.h"
#include "clock.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "memory.h"
#include "ops.h"
#include "profile.h"
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_window(void) {
    dp_raw_allocator raw = {NULL, test_raw_alloc, test_raw_free, NULL};
    dp_mem *m = dp_mem_new(&raw, 0);
    dp_alloc p, a, t;
    CHECK_OK(dp_mem_alloc(m, 1000, DP_CAT_PARAMETERS, &p));
    CHECK_OK(dp_mem_alloc(m, 5000, DP_CAT_TEMP, &t)); /* the run's peak: 6000 */
    dp_mem_release(m, &t);
    dp_mem_window_reset(m); /* a phase starts at 1000 */
    dp_mem_window w;
    dp_mem_window_get(m, &w);
    CHECK_EQ_U64(w.peak, 1000);
    CHECK_OK(dp_mem_alloc(m, 300, DP_CAT_ACTIVATIONS, &a));
    CHECK_OK(dp_mem_alloc(m, 2000, DP_CAT_TEMP, &t)); /* the phase's peak: 3300 */
    dp_mem_release(m, &t);
    dp_mem_window_get(m, &w);
    CHECK_EQ_U64(w.peak, 3300);
    CHECK_EQ_U64(w.live_at_peak[DP_CAT_PARAMETERS], 1000);
    CHECK_EQ_U64(w.live_at_peak[DP_CAT_ACTIVATIONS], 300);
    CHECK_EQ_U64(w.live_at_peak[DP_CAT_TEMP], 2000);
    dp_mem_stats s;
    dp_mem_get_stats(m, &s);
    CHECK_EQ_U64(s.total_peak, 6000); /* the run's peak is untouched */
    CHECK_EQ_U64(s.live_at_peak[DP_CAT_TEMP], 5000);
    uint64_t made, released;
    dp_mem_traffic(m, &made, &released);
    CHECK_EQ_U64(made, 1000 + 5000 + 300 + 2000);
    CHECK_EQ_U64(released, 5000 + 2000);
    dp_mem_release(m, &a);
    dp_mem_release(m, &p);
    dp_mem_destroy(m);
}

static void test_modelled_clock(void) {
    dp_ledger_reset();
    dp_clock_model(1e12, 1e11); /* 1 TFLOP/s, 100 GB/s */
    CHECK(dp_clock_modelled());
    int64_t t0 = dp_clock_ns();
    dp_ledger_add("compute_bound", 2e9, 1e6); /* 2 ms of flops, 10 us of bytes */
    CHECK_EQ_U64(dp_clock_ns() - t0, 2000000);
    dp_ledger_add("memory_bound", 1e6, 1e9); /* 1 us of flops, 10 ms of bytes */
    CHECK_EQ_U64(dp_clock_ns() - t0, 12000000);
    dp_clock_model(0, 0);
    CHECK(!dp_clock_modelled());
    CHECK(dp_clock_advance(1e9, 1e9) == 0.0);
    dp_ledger_reset();
}

/* The ledger entry named op, or NULL. */
static const dp_ledger_entry *entry(const char *op) {
    for (size_t i = 0; i < dp_ledger_count(); i++)
        if (strcmp(dp_ledger_at(i)->op, op) == 0) return dp_ledger_at(i);
    return NULL;
}

static void test_cpu_calls(void) {
    dp_device *cpu;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    int64_t n = 1 << 16;
    dp_tensor x, y, out;
    CHECK_OK(dp_tensor_init(&x, cpu, DP_F32, 1, &n, DP_CAT_OTHER));
    CHECK_OK(dp_tensor_init(&y, cpu, DP_F32, 1, &n, DP_CAT_OTHER));
    dp_ledger_reset();
    /* off: nothing is measured */
    CHECK_OK(dp_tensor_fill(&x, 1.0));
    CHECK(entry("fill") && entry("fill")->timed_calls == 0 && entry("fill")->time_ns == 0.0);
    dp_profile_enable(cpu, 1);
    CHECK_OK(dp_tensor_fill(&y, 2.0));
    /* the output made for the add is charged to it */
    CHECK_OK(dp_tensor_init(&out, cpu, DP_F32, 1, &n, DP_CAT_TEMP));
    CHECK_OK(dp_add(&out, &x, &y));
    dp_tensor_release(&out); /* released after the add: charged to the next call */
    CHECK_OK(dp_scale(&x, 3.0f));
    CHECK_OK(dp_profile_collect(cpu));
    const dp_ledger_entry *fill = entry("fill"), *add = entry("add"), *scale = entry("scale");
    CHECK(fill && add && scale);
    if (fill && add && scale) {
        CHECK_EQ_U64(fill->timed_calls, 1);
        CHECK_EQ_U64(fill->alloc_bytes, 0);
        CHECK_EQ_U64(add->timed_calls, 1);
        CHECK_EQ_U64(add->alloc_bytes, (uint64_t)n * 4);
        CHECK_EQ_U64(add->freed_bytes, 0);
        CHECK_EQ_U64(scale->freed_bytes, (uint64_t)n * 4);
        CHECK(add->time_ns > 0 && scale->time_ns > 0);
        CHECK_CLOSE(dp_profile_total_ns(), fill->time_ns + add->time_ns + scale->time_ns, 1e-12);
        CHECK_EQ_U64(dp_profile_call_count(), 3);
        const dp_profile_call *c = dp_profile_call_at(1);
        CHECK(c && strcmp(dp_ledger_at(c->entry)->op, "add") == 0 && c->end_ns >= c->start_ns);
        CHECK(dp_profile_call_at(0)->end_ns <= c->start_ns); /* calls in order, never overlapping */
    }
    /* a call nested in another is part of it */
    dp_profile_begin(cpu);
    CHECK_OK(dp_scale(&x, 1.0f));
    CHECK_EQ_U64(dp_profile_end(cpu, DP_OK), DP_OK);
    CHECK_EQ_U64(entry("scale")->timed_calls, 2);
    CHECK_EQ_U64(dp_profile_call_count(), 4);
    double before = dp_profile_total_ns();
    CHECK(dp_profile_overhead_ns(cpu, 100) > 0);
    CHECK(dp_profile_total_ns() == before && dp_profile_call_count() == 4); /* the overhead charges nothing */
    dp_profile_enable(NULL, 0);
    CHECK_OK(dp_scale(&x, 1.0f));
    CHECK_EQ_U64(entry("scale")->timed_calls, 2);
    dp_tensor_release(&x);
    dp_tensor_release(&y);
    dp_ledger_reset();
}

static void test_plan_calls(void) {
    dp_device *plan;
    CHECK_OK(dp_device_get(DP_DEV_PLAN, &plan));
    int64_t n = 1 << 20;
    dp_tensor x;
    CHECK_OK(dp_tensor_init(&x, plan, DP_F32, 1, &n, DP_CAT_OTHER));
    dp_ledger_reset();
    dp_clock_model(1e12, 1e11);
    dp_profile_enable(plan, 1);
    CHECK_OK(dp_scale(&x, 2.0f)); /* n flops, 8n bytes: 83.886 us of bytes */
    CHECK_OK(dp_profile_collect(plan));
    const dp_ledger_entry *e = entry("scale");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_U64(e->timed_calls, 1);
        CHECK_CLOSE(e->time_ns, 8.0 * (double)n / 1e11 * 1e9, 1e-6);
    }
    /* work the clock modelled with no call after it (here 1 us of "copy_h2d"; in a run, ops of an
     * earlier phase) is not the next call's: a call spans its own adds alone (issue 37: a plan
     * run's forward ops took longer than the forward) */
    dp_ledger_add("copy_h2d", 0, 1e5);
    int64_t before = dp_clock_ns();
    CHECK_OK(dp_scale(&x, 2.0f));
    CHECK_OK(dp_profile_collect(plan));
    e = entry("scale");
    CHECK(e && e->timed_calls == 2);
    if (e) CHECK_CLOSE(e->time_ns, 2 * 8.0 * (double)n / 1e11 * 1e9, 1e-6);
    const dp_profile_call *last = dp_profile_call_at(dp_profile_call_count() - 1);
    CHECK(last && last->start_ns == before && last->end_ns == dp_clock_ns());
    dp_profile_enable(NULL, 0);
    dp_clock_model(0, 0);
    dp_tensor_release(&x);
    dp_ledger_reset();
}

/* A calibrated clock (clock.h): every call of an op with a curve costs the curve at its roofline
 * work plus the gap, an op without one its roofline plus the gap; the sum is what the clock shows
 * and what each ledger entry's model_ns holds. */
static void test_calibrated_clock(void) {
    dp_ledger_reset();
    const double x[3] = {-8, -6, -4}, y[3] = {-6, -5, -4};
    CHECK_EQ_U64(dp_clock_curve_set("gemm", 3, x, y), 0);
    dp_clock_gap(1e-6);
    dp_clock_model(1e12, 1e11); /* w = max(flops / 1e12, bytes / 1e11) */
    int64_t t0 = dp_clock_ns();
    dp_ledger_add("gemm", 1e6, 0);     /* w = 1e-6: a knot, 1e-5 s */
    dp_ledger_add("gemm", 1e5, 0);     /* w = 1e-7: halfway between knots in log10: 10^-5.5 s */
    dp_ledger_add("gemm", 1e9, 0);     /* w = 1e-3: above the last knot, its rate: 1e-3 s */
    dp_ledger_add("gemm", 1e2, 0);     /* w = 1e-10: below, the first segment's slope 0.5: 1e-7 s */
    dp_ledger_add("layernorm_fwd", 0, 1e6); /* no curve: the roofline, 1e-5 s */
    double gemm_s = 1e-5 + pow(10.0, -5.5) + 1e-3 + 1e-7 + 4 * 1e-6, ln_s = 1e-5 + 1e-6;
    CHECK_CLOSE((double)(dp_clock_ns() - t0), (gemm_s + ln_s) * 1e9, 1e-6); /* the clock rounds to 1 ns */
    CHECK_CLOSE(entry("gemm")->model_ns, gemm_s * 1e9, 1e-12);
    CHECK_CLOSE(entry("layernorm_fwd")->model_ns, ln_s * 1e9, 1e-12);
    int calibrated = -1;
    CHECK_CLOSE(dp_clock_op_seconds("gemm", 1e6, 0, &calibrated), 1.1e-5, 1e-12);
    CHECK(calibrated == 1);
    CHECK_CLOSE(dp_clock_op_seconds("layernorm_fwd", 0, 1e6, &calibrated), 1.1e-5, 1e-12);
    CHECK(calibrated == 0);
    /* a section's op ("recompute:gemm") is timed by its op's curve */
    const char *was = dp_ledger_section("recompute");
    dp_ledger_add("gemm", 1e6, 0);
    dp_ledger_section(was);
    CHECK_CLOSE(entry("recompute:gemm")->model_ns, 1.1e-5 * 1e9, 1e-12);
    /* one knot: a constant rate through it; no work: the knot's time */
    const double x1[1] = {-6}, y1[1] = {-5.5};
    CHECK_EQ_U64(dp_clock_curve_set("attention_fwd", 1, x1, y1), 0);
    CHECK_CLOSE(dp_clock_curve_eval("attention_fwd", 1e-4), 1e-4 * pow(10.0, 0.5), 1e-12);
    CHECK_CLOSE(dp_clock_curve_eval("attention_fwd", 0.0), pow(10.0, -5.5), 1e-12);
    CHECK(dp_clock_curve_eval("no_such_op", 1.0) == -1.0);
    CHECK_EQ_U64(dp_clock_curve_count(), 2);
    /* bad knots are refused and change nothing */
    const double flat[2] = {-6, -6}, nan_[2] = {-6, NAN}, ok2[2] = {-7, -5};
    CHECK(dp_clock_curve_set("gemm", 2, flat, ok2) == -1);
    CHECK(dp_clock_curve_set("gemm", 2, ok2, nan_) == -1);
    CHECK(dp_clock_curve_set("gemm", 0, x, y) == -1);
    CHECK(dp_clock_curve_set("gemm", DP_CLOCK_MAX_KNOTS + 1, x, y) == -1);
    CHECK(dp_clock_curve_set("", 3, x, y) == -1);
    CHECK_CLOSE(dp_clock_curve_eval("gemm", 1e-6), 1e-5, 1e-12);
    /* a curve replaced */
    CHECK_EQ_U64(dp_clock_curve_set("gemm", 2, ok2, ok2), 0);
    CHECK_CLOSE(dp_clock_curve_eval("gemm", 1e-6), 1e-6, 1e-12);
    t0 = dp_clock_ns();
    dp_ledger_add("gemm", 1e6, 0);
    CHECK_CLOSE((double)(dp_clock_ns() - t0), (1e-6 + 1e-6) * 1e9, 1e-6);
    /* an op the ledger found without a curve gets one: its next call uses it (the lookup is not kept) */
    t0 = dp_clock_ns();
    dp_ledger_add("rmsnorm_fwd", 0, 1e6); /* no curve: the roofline, 1e-5 s */
    CHECK_CLOSE((double)(dp_clock_ns() - t0), (1e-5 + 1e-6) * 1e9, 1e-6);
    CHECK_EQ_U64(dp_clock_curve_set("rmsnorm_fwd", 2, ok2, y), 0); /* (-7, -6) (-5, -5) */
    t0 = dp_clock_ns();
    dp_ledger_add("rmsnorm_fwd", 0, 1e6); /* w = 1e-5: the last knot, 10^-5 s... */
    dp_ledger_add("rmsnorm_fwd", 0, 1e5); /* ...and w = 1e-6: halfway, 10^-5.5 s */
    CHECK_CLOSE((double)(dp_clock_ns() - t0), (1e-5 + pow(10.0, -5.5) + 2e-6) * 1e9, 1e-4); /* 1 ns of rounding */
    CHECK_EQ_U64(dp_clock_curve_count(), 3);
    /* cleared: the roofline, no gap */
    dp_clock_curves_clear();
    t0 = dp_clock_ns();
    dp_ledger_add("gemm", 1e6, 0);
    CHECK_EQ_U64(dp_clock_ns() - t0, 1000);
    dp_clock_model(0, 0);
    dp_ledger_reset();
}

/* The ledger's work since the last take, and the profile log's per-call flops, bytes and seq. */
static void test_call_work(void) {
    dp_ledger_reset();
    double f, b;
    dp_ledger_take_work(&f, &b);
    dp_ledger_add("copy_h2d", 0, 10);
    uint64_t s1 = dp_ledger_take_work(&f, &b);
    CHECK(f == 0 && b == 10);
    dp_ledger_add("copy_h2d", 0, 10);
    dp_ledger_add("copy_h2d", 0, 5); /* two adds to one entry: their sum */
    uint64_t s2 = dp_ledger_take_work(&f, &b);
    CHECK(b == 15 && s2 == s1 + 2);
    dp_ledger_add("gemm", 7, 1);
    dp_ledger_add("add", 3, 2); /* another entry starts over */
    CHECK_EQ_U64(dp_ledger_take_work(&f, &b), s2 + 2);
    CHECK(f == 3 && b == 2);
    CHECK_EQ_U64(dp_ledger_take_work(&f, &b), s2 + 2); /* nothing new: the same count, no work */
    CHECK(f == 0 && b == 0);

    dp_device *cpu;
    CHECK_OK(dp_device_get(DP_DEV_CPU, &cpu));
    int64_t n = 1 << 10;
    dp_tensor x;
    CHECK_OK(dp_tensor_init(&x, cpu, DP_F32, 1, &n, DP_CAT_OTHER));
    dp_profile_enable(cpu, 1);
    CHECK_OK(dp_scale(&x, 2.0f));
    CHECK_OK(dp_scale(&x, 2.0f));
    CHECK_OK(dp_profile_collect(cpu));
    CHECK_EQ_U64(dp_profile_call_count(), 2);
    const dp_profile_call *a = dp_profile_call_at(0), *c = dp_profile_call_at(1);
    CHECK(a && c);
    if (a && c) {
        CHECK(a->flops == (double)n && a->bytes == 8.0 * (double)n); /* scale: n flops, 2 x 4n bytes */
        CHECK(c->flops == (double)n && c->seq == a->seq + 1);
    }
    dp_profile_enable(NULL, 0);
    /* timed by the process's CPU time: a call lasts what the CPU spent on it, placed at its start */
    dp_profile_enable(cpu, 1);
    dp_profile_cpu_clock(1);
    int64_t cpu0 = dp_clock_cpu_ns();
    CHECK_OK(dp_scale(&x, 2.0f));
    int64_t cpu1 = dp_clock_cpu_ns();
    dp_profile_cpu_clock(0);
    CHECK_OK(dp_profile_collect(cpu));
    const dp_profile_call *t = dp_profile_call_at(0);
    CHECK(t && t->end_ns - t->start_ns > 0 && t->end_ns - t->start_ns <= cpu1 - cpu0);
    dp_profile_enable(NULL, 0);
    dp_tensor_release(&x);
    dp_ledger_reset();
}


int main(void) {
    CHECK_OK(dp_engine_init());
    test_window();
    test_modelled_clock();
    test_cpu_calls();
    test_plan_calls();
    test_calibrated_clock();
    test_call_work();
    dp_engine_shutdown();
    return check_report("test_profile");
}
