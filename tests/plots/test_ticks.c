/* test_ticks: nice tick placement (linear, log2, log10), unit choice and formatting, mapping,
 * the fixed palette and module grouping. Pure arithmetic: no files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#define GIB 1073741824.0
#define MIB 1048576.0

static void expect_ticks(const char *what, const dpplot_ticks *t, const double *values, const char *const *labels,
                         size_t n) {
    if (!tu_check(t->n == n, "%s: %zu ticks, expected %zu", what, t->n, n)) {
        for (size_t i = 0; i < t->n; i++) fprintf(stderr, "    tick %g '%s'\n", t->value[i], t->label[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        tu_check(fabs(t->value[i] - values[i]) <= 1e-9 * fmax(1.0, fabs(values[i])),
                 "%s: tick %zu is %.17g, expected %.17g", what, i, t->value[i], values[i]);
        if (labels)
            tu_check(strcmp(t->label[i], labels[i]) == 0, "%s: label %zu is '%s', expected '%s'", what, i, t->label[i],
                     labels[i]);
    }
}

static void test_nice_numbers(void) {
    struct {
        double x;
        int round;
        double want;
    } cases[] = {{0.9, 1, 1},  {1.4, 1, 1}, {1.6, 1, 2},      {2.9, 1, 2},     {3.1, 1, 5},  {6.9, 1, 5},
                 {7.5, 1, 10}, {12, 0, 20}, {0.031, 0, 0.05}, {4500, 1, 5000}, {200, 0, 200}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = dpplot_nice_number(cases[i].x, cases[i].round);
        tu_check(fabs(got - cases[i].want) < 1e-12, "nice(%g, %d) = %g, expected %g", cases[i].x, cases[i].round, got,
                 cases[i].want);
    }
}

static void test_linear(void) {
    dpplot_ticks t;
    tu_check(dpplot_ticks_linear(0, 10, 6, DPPLOT_UNIT_NONE, 1, &t) == 0, "linear 0..10");
    expect_ticks("linear 0..10", &t, (double[]){0, 2, 4, 6, 8, 10}, (const char *[]){"0", "2", "4", "6", "8", "10"}, 6);
    tu_check(t.lo == 0 && t.hi == 10, "linear 0..10 range %g..%g", t.lo, t.hi);

    dpplot_ticks_linear(0, 1, 6, DPPLOT_UNIT_NONE, 1, &t);
    expect_ticks("linear 0..1", &t, (double[]){0, 0.2, 0.4, 0.6, 0.8, 1.0},
                 (const char *[]){"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}, 6);

    /* extend rounds the range out; no extend keeps it and ticks only inside */
    dpplot_ticks_linear(3, 97, 6, DPPLOT_UNIT_NONE, 1, &t);
    tu_check(t.lo == 0 && t.hi == 100, "extended 3..97 -> %g..%g, expected 0..100", t.lo, t.hi);
    dpplot_ticks_linear(3, 97, 6, DPPLOT_UNIT_NONE, 0, &t);
    tu_check(t.lo == 3 && t.hi == 97 && t.value[0] >= 3 && t.value[t.n - 1] <= 97,
             "unextended 3..97 keeps its range (%g..%g), ticks %g..%g", t.lo, t.hi, t.value[0], t.value[t.n - 1]);

    /* spanning zero: zero is a tick, labels never read "-0" */
    dpplot_ticks_linear(-3, 7, 6, DPPLOT_UNIT_NONE, 1, &t);
    int has_zero = 0;
    for (size_t i = 0; i < t.n; i++) {
        has_zero |= t.value[i] == 0.0;
        tu_check(strcmp(t.label[i], "-0") != 0, "label '-0' at tick %zu", i);
    }
    tu_check(has_zero, "range -3..7 has a tick at 0");

    /* a degenerate range is widened, a non-finite one refused */
    tu_check(dpplot_ticks_linear(5, 5, 6, DPPLOT_UNIT_NONE, 1, &t) == 0 && t.n >= 2 && t.lo < 5 && t.hi > 5,
             "5..5 widened around 5 (%g..%g, %zu ticks)", t.lo, t.hi, t.n);
    tu_check(dpplot_ticks_linear(0, 0, 6, DPPLOT_UNIT_NONE, 1, &t) == 0 && t.lo == 0 && t.hi > 0,
             "0..0 widened upwards");
    tu_check(dpplot_ticks_linear(0, NAN, 6, DPPLOT_UNIT_NONE, 1, &t) == -1, "NaN bound refused");
    tu_check(dpplot_ticks_linear(-INFINITY, 1, 6, DPPLOT_UNIT_NONE, 1, &t) == -1, "inf bound refused");
}

static void test_units(void) {
    dpplot_ticks t;
    /* GPT-2 small peaks around 5.84 GiB: GiB ticks at whole numbers */
    dpplot_ticks_linear(0, 5980.36 * MIB, 5, DPPLOT_UNIT_BYTES, 1, &t);
    expect_ticks("bytes 0..5.84 GiB, target 5", &t, (double[]){0, 2 * GIB, 4 * GIB, 6 * GIB},
                 (const char *[]){"0", "2", "4", "6"}, 4);
    dpplot_ticks_linear(0, 5980.36 * MIB, 10, DPPLOT_UNIT_BYTES, 1, &t);
    tu_check(strcmp(t.unit, "GiB") == 0 && t.divisor == GIB, "5.84 GiB range uses GiB (got '%s')", t.unit);
    expect_ticks("bytes 0..5.84 GiB", &t, (double[]){0, GIB, 2 * GIB, 3 * GIB, 4 * GIB, 5 * GIB, 6 * GIB},
                 (const char *[]){"0", "1", "2", "3", "4", "5", "6"}, 7);
    dpplot_ticks_linear(0, 474.7 * MIB, 6, DPPLOT_UNIT_BYTES, 1, &t);
    tu_check(strcmp(t.unit, "MiB") == 0, "474.7 MiB range uses MiB (got '%s')", t.unit);
    expect_ticks("bytes 0..474.7 MiB", &t, (double[]){0, 100 * MIB, 200 * MIB, 300 * MIB, 400 * MIB, 500 * MIB},
                 (const char *[]){"0", "100", "200", "300", "400", "500"}, 6);
    dpplot_ticks_linear(0, 900, 4, DPPLOT_UNIT_BYTES, 1, &t);
    tu_check(strcmp(t.unit, "B") == 0, "900 bytes use B (got '%s')", t.unit);
    dpplot_ticks_linear(0, 3 * 1024.0 * GIB, 4, DPPLOT_UNIT_BYTES, 1, &t);
    tu_check(strcmp(t.unit, "TiB") == 0, "3 TiB use TiB (got '%s')", t.unit);

    dpplot_ticks_linear(0, 503, 6, DPPLOT_UNIT_MS, 1, &t);
    tu_check(strcmp(t.unit, "ms") == 0, "503 ms uses ms (got '%s')", t.unit);
    dpplot_ticks_linear(0, 20000, 5, DPPLOT_UNIT_MS, 1, &t);
    tu_check(strcmp(t.unit, "s") == 0, "20000 ms uses s (got '%s')", t.unit);
    expect_ticks("ms 0..20 s", &t, (double[]){0, 5000, 10000, 15000, 20000},
                 (const char *[]){"0", "5", "10", "15", "20"}, 5);

    struct {
        double v;
        dpplot_unit u;
        const char *want;
    } fmt[] = {{497759232, DPPLOT_UNIT_BYTES, "474.7 MiB"},
               {5980.363 * MIB, DPPLOT_UNIT_BYTES, "5.84 GiB"},
               {16 * MIB, DPPLOT_UNIT_BYTES, "16 MiB"},
               {1020 * MIB, DPPLOT_UNIT_BYTES, "1020 MiB"},
               {0, DPPLOT_UNIT_BYTES, "0 B"},
               {512, DPPLOT_UNIT_BYTES, "512 B"},
               {245.725, DPPLOT_UNIT_MS, "246 ms"},
               {12.5, DPPLOT_UNIT_MS, "12.5 ms"},
               {4066.0, DPPLOT_UNIT_MS, "4.07 s"},
               {4096, DPPLOT_UNIT_NONE, "4096"},
               {NAN, DPPLOT_UNIT_BYTES, "n/a"}};
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
        char buf[32];
        dpplot_format_value(fmt[i].v, fmt[i].u, buf, sizeof buf);
        tu_check(strcmp(buf, fmt[i].want) == 0, "format(%g) = '%s', expected '%s'", fmt[i].v, buf, fmt[i].want);
    }
}

static void test_log(void) {
    dpplot_ticks t;
    tu_check(dpplot_ticks_log(256, 8192, DPPLOT_SCALE_LOG2, 10, DPPLOT_UNIT_NONE, 0, &t) == 0, "log2");
    expect_ticks("log2 256..8192", &t, (double[]){256, 512, 1024, 2048, 4096, 8192},
                 (const char *[]){"256", "512", "1024", "2048", "4096", "8192"}, 6);
    /* many powers thin out with an even stride, every label still a power of two */
    dpplot_ticks_log(1, 1073741824.0, DPPLOT_SCALE_LOG2, 6, DPPLOT_UNIT_NONE, 0, &t);
    tu_check(t.n >= 4 && t.n <= 8, "log2 1..2^30 thinned to %zu ticks", t.n);
    for (size_t i = 0; i < t.n; i++) {
        double l = log2(t.value[i]);
        tu_check(fabs(l - round(l)) < 1e-12, "log2 tick %g is a power of two", t.value[i]);
        if (i > 0)
            tu_check(fabs(log2(t.value[i] / t.value[i - 1]) - log2(t.value[1] / t.value[0])) < 1e-9,
                     "log2 ticks have an even stride");
    }
    /* byte ticks on a log2 axis carry their own unit */
    dpplot_ticks_log(256 * MIB, 4 * GIB, DPPLOT_SCALE_LOG2, 10, DPPLOT_UNIT_BYTES, 0, &t);
    expect_ticks("log2 bytes", &t, (double[]){256 * MIB, 512 * MIB, GIB, 2 * GIB, 4 * GIB},
                 (const char *[]){"256 MiB", "512 MiB", "1 GiB", "2 GiB", "4 GiB"}, 5);
    tu_check(t.unit[0] == '\0', "log byte axis has no shared unit");

    dpplot_ticks_log(1, 1000, DPPLOT_SCALE_LOG10, 10, DPPLOT_UNIT_NONE, 0, &t);
    expect_ticks("log10 1..1000", &t, (double[]){1, 10, 100, 1000}, (const char *[]){"1", "10", "100", "1000"}, 4);
    dpplot_ticks_log(10, 60, DPPLOT_SCALE_LOG10, 10, DPPLOT_UNIT_NONE, 0, &t);
    expect_ticks("log10 10..60 (1-2-5)", &t, (double[]){10, 20, 50}, (const char *[]){"10", "20", "50"}, 3);
    dpplot_ticks_log(300, 3000, DPPLOT_SCALE_LOG2, 10, DPPLOT_UNIT_NONE, 1, &t);
    tu_check(t.lo == 256 && t.hi == 4096, "extended log2 300..3000 -> %g..%g", t.lo, t.hi);

    /* a narrow range holding no two powers still gets readable (linear) ticks */
    dpplot_ticks_log(2.3e9, 2.6e9, DPPLOT_SCALE_LOG2, 6, DPPLOT_UNIT_BYTES, 0, &t);
    tu_check(t.n >= 2 && t.value[0] >= 2.3e9 && t.value[t.n - 1] <= 2.6e9 && strstr(t.label[0], "GiB"),
             "narrow log2 range: %zu ticks, first '%s'", t.n, t.n ? t.label[0] : "");
    tu_check(dpplot_ticks_log(0, 10, DPPLOT_SCALE_LOG2, 6, DPPLOT_UNIT_NONE, 0, &t) == -1, "log of 0 refused");
    tu_check(dpplot_ticks_log(-1, 10, DPPLOT_SCALE_LOG10, 6, DPPLOT_UNIT_NONE, 0, &t) == -1, "log of <0 refused");
    tu_check(dpplot_ticks_log(1, 10, DPPLOT_SCALE_LINEAR, 6, DPPLOT_UNIT_NONE, 0, &t) == -1, "linear refused");
    tu_check(dpplot_ticks_compute(1, 10, DPPLOT_SCALE_LINEAR, 6, DPPLOT_UNIT_NONE, 1, &t) == 0, "dispatch linear");
}

static void test_mapping(void) {
    dpplot_axis lin = {DPPLOT_SCALE_LINEAR, 0, 10, 100, 200};
    tu_check(dpplot_axis_map(&lin, 0) == 100 && dpplot_axis_map(&lin, 10) == 200 && dpplot_axis_map(&lin, 5) == 150,
             "linear mapping");
    dpplot_axis y = {DPPLOT_SCALE_LINEAR, 0, 10, 500, 100}; /* y grows downwards */
    tu_check(dpplot_axis_map(&y, 10) == 100 && dpplot_axis_map(&y, 0) == 500, "inverted y mapping");
    dpplot_axis lg = {DPPLOT_SCALE_LOG2, 256, 8192, 0, 500};
    tu_check(fabs(dpplot_axis_map(&lg, 1024) - 200) < 1e-9, "log2: 1024 is 2 of 5 doublings in");
    tu_check(dpplot_axis_map(&lg, 0) == 0 && dpplot_axis_map(&lg, -5) == 0, "log2 of <=0 maps to the low end");
    tu_check(dpplot_scale_parse("log2") == DPPLOT_SCALE_LOG2 && dpplot_scale_parse("log3") == -1, "scale names");
    tu_check(dpplot_unit_parse("bytes") == DPPLOT_UNIT_BYTES && dpplot_unit_parse("MB") == -1, "unit names");
}

static void test_palette(void) {
    char buf[8];
    const char *presets[] = {"vanilla", "flat", "ghost", "mixed_ghost", "bk", "flash_clip"};
    const char *hex[] = {"#666666", "#e69f00", "#0072b2", "#56b4e9", "#009e73", "#d55e00"};
    for (int i = 0; i < 6; i++) {
        dpplot_rgb_format(dpplot_method_color(presets[i]), buf);
        tu_check(strcmp(buf, hex[i]) == 0, "%s is %s, expected %s", presets[i], buf, hex[i]);
        tu_check(dpplot_method_rank(presets[i]) == i, "%s has rank %d", presets[i], i);
        for (int j = 0; j < i; j++) {
            dpplot_rgb a = dpplot_method_color(presets[i]), b = dpplot_method_color(presets[j]);
            tu_check(a.r != b.r || a.g != b.g || a.b != b.b, "%s and %s share a colour", presets[i], presets[j]);
        }
    }
    /* custom names: stable, and never a preset's colour */
    dpplot_rgb a = dpplot_method_color("flash+twopass"), b = dpplot_method_color("flash+twopass");
    tu_check(a.r == b.r && a.g == b.g && a.b == b.b, "custom colour is stable");
    const char *custom[] = {"flash+twopass", "ghost+twopass", "gram_tile+flat", "x", "lora_ghost"};
    for (size_t k = 0; k < 5; k++)
        for (int i = 0; i < 6; i++) {
            dpplot_rgb c = dpplot_method_color(custom[k]), p = dpplot_method_color(presets[i]);
            tu_check(c.r != p.r || c.g != p.g || c.b != p.b, "%s takes %s's colour", custom[k], presets[i]);
        }
    tu_check(dpplot_method_rank("flash+twopass") == DPPLOT_N_PRESETS, "custom rank");
    dpplot_rgb parsed;
    tu_check(dpplot_rgb_parse("#0072b2", &parsed) == 0 && fabs(parsed.b - 0xb2 / 255.0) < 1e-12, "parse colour");
    tu_check(dpplot_rgb_parse("#0072b", &parsed) == -1 && dpplot_rgb_parse("#0072bz", &parsed) == -1,
             "bad colours refused");
    tu_check(dpplot_phase_from_name("clip") == DPPLOT_PHASE_CLIP && dpplot_phase_from_name("lunch") == -1,
             "phase names");
    /* viridis ends and middle, from the published table */
    dpplot_rgb v0 = dpplot_viridis(0), v1 = dpplot_viridis(1), vm = dpplot_viridis(128.0 / 255.0);
    tu_check(fabs(v0.r - 0.267004) < 1e-6 && fabs(v1.g - 0.906157) < 1e-6 && fabs(vm.g - 0.566949) < 1e-6,
             "viridis table");
    tu_check(fabs(dpplot_viridis(NAN).r - v0.r) < 1e-12 && fabs(dpplot_viridis(7).r - v1.r) < 1e-12, "viridis clamps");
}

static void test_modules(void) {
    struct {
        const char *path;
        dpplot_module_group g;
    } cases[] = {{"wte", DPPLOT_MOD_EMBEDDING},
                 {"wpe", DPPLOT_MOD_EMBEDDING},
                 {"embed", DPPLOT_MOD_EMBEDDING},
                 {"layers.3.attn.qkv", DPPLOT_MOD_ATTENTION},
                 {"layers.3.attn.core", DPPLOT_MOD_ATTENTION},
                 {"layers.3.attn.q.lora_a", DPPLOT_MOD_LORA},
                 {"layers.0.mlp.fc.lora_b", DPPLOT_MOD_LORA},
                 {"layers.1.mlp.proj", DPPLOT_MOD_MLP},
                 {"layers.1.mlp.gate", DPPLOT_MOD_MLP},
                 {"layers.0.ln_1", DPPLOT_MOD_NORM},
                 {"layers.0.input_norm", DPPLOT_MOD_NORM},
                 {"ln_f", DPPLOT_MOD_NORM},
                 {"norm", DPPLOT_MOD_NORM},
                 {"lm_head", DPPLOT_MOD_HEAD},
                 {"loss", DPPLOT_MOD_HEAD},
                 {"(none)", DPPLOT_MOD_OTHER},
                 {NULL, DPPLOT_MOD_OTHER}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dpplot_module_group g = dpplot_module_group_of(cases[i].path);
        tu_check(g == cases[i].g, "module '%s' grouped as %s, expected %s", cases[i].path ? cases[i].path : "(null)",
                 dpplot_module_group_name(g), dpplot_module_group_name(cases[i].g));
    }
}

int main(void) {
    test_nice_numbers();
    test_linear();
    test_units();
    test_log();
    test_mapping();
    test_palette();
    test_modules();
    return tu_finish("test_ticks");
}
