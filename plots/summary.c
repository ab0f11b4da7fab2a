/* summary.c: summary.txt, .csv, .md and .tex. */
#include "dpplot_summary.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot_axis.h"
#include "dpplot_palette.h"
#include "report_util.h"
#include "safe_file.h"
#include "sweep_util.h"

#define MIB 1048576.0

static const char *const legacy_titles[DPPLOT_N_LEGACY] = {"Model Parameters", "Optimizer States", "Gradients",
                                                           "Activation Hooks", "Norm Samples",     "Temp Matrices",
                                                           "Total Allocated",  "Peak Allocated"};

static void rule(FILE *f, char c, int n) {
    for (int i = 0; i < n; i++) fputc(c, f);
    fputc('\n', f);
}

static int in_table(const dpplot_result *r) { return r->status == DPPLOT_STATUS_OK && r->has_peak; }

/* The step time of every table (dpplot_step_ms: the median, as the charts draw it); NaN without. */
static double step_of(const dpplot_result *r, double *lo, double *hi) { return dpplot_step_ms(r, lo, hi); }

/* "790.12-1112.40": the spread beside a step time, "-" when unknown or a plan's (one number). */
static void spread_text(const dpplot_result *r, char *buf, size_t n) {
    double lo, hi;
    step_of(r, &lo, &hi);
    if (isfinite(lo) && isfinite(hi) && !r->predicted)
        snprintf(buf, n, "%.2f-%.2f", lo, hi);
    else
        snprintf(buf, n, "-");
}

/* What the step time column holds, for the line under each table. */
static const char *const STEP_NOTE =
    "Step time: the median of a point's repeated runs (each run's mean step), else of its timed iterations; "
    "spread: their min-max.";

/* " seq_len=8192 batch=4": the swept values of a point (empty for single runs). */
static void vary_text(const dpplot_result *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_vary && used < len; i++) {
        if (strcmp(r->vary[i].key, "method") == 0) continue;
        int w = snprintf(buf + used, len - used, " %s=%s", r->vary[i].key, r->vary[i].text);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Row name of a result: a sweep point reads "ghost seq_len=4096", anything else its chart label. */
static void row_name(const dpplot_result *r, char *buf, size_t len) {
    char vary[160];
    vary_text(r, vary, sizeof vary);
    if (vary[0])
        snprintf(buf, len, "%s%s", r->method, vary);
    else
        snprintf(buf, len, "%s", r->label);
}

/* Markdown cell text: '|' escaped. */
static void md_text(FILE *f, const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '|') fputc('\\', f);
        fputc(*p == '\n' ? ' ' : *p, f);
    }
}

/* ---- The kernel table (issue 17): each profiled run's top ops by time, per step. */

#define KERNEL_ROWS 10

/* "12.3" or "-" for a value that is not a finite number. */
static void num_or_dash(char *buf, size_t n, const char *fmt, double v) {
    if (isfinite(v))
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "-");
}

/* One row's cells: op, category, calls/step, ms/step, % of step, GFLOP/s, % of peak flops, GB/s,
 * % of peak bandwidth, MiB allocated per step. */
static void kernel_cells(const dpplot_result *r, const dpplot_op *o, char cells[10][48]) {
    double it = r->profile_iters > 0 ? r->profile_iters : 1;
    snprintf(cells[0], 48, "%s", o->op);
    snprintf(cells[1], 48, "%s", dpplot_op_category_name(o->category));
    num_or_dash(cells[2], 48, "%.1f", o->calls / it);
    num_or_dash(cells[3], 48, "%.3f", o->ms / it);
    num_or_dash(cells[4], 48, "%.1f", r->has_time && r->avg_ms > 0 ? 100.0 * o->ms / it / r->avg_ms : NAN);
    num_or_dash(cells[5], 48, "%.1f", o->flops_per_s / 1e9);
    num_or_dash(cells[6], 48, "%.1f", 100.0 * o->flops_fraction);
    num_or_dash(cells[7], 48, "%.1f", o->bytes_per_s / 1e9);
    num_or_dash(cells[8], 48, "%.1f", 100.0 * o->bandwidth_fraction);
    num_or_dash(cells[9], 48, "%.2f", o->alloc_bytes / it / MIB);
}

static const char *const kernel_header[10] = {"op",      "category", "calls/step", "ms/step",   "% step",
                                              "GFLOP/s", "% peak",   "GB/s",       "% peak BW", "alloc MiB/step"};

/* 1 when a listed op moved bytes faster than the peak bandwidth (operands in cache). */
static int kernel_bw_over_peak(const dpplot_results *rs) {
    for (size_t i = 0; i < rs->n; i++)
        for (size_t k = 0; k < rs->items[i].n_ops && k < KERNEL_ROWS; k++)
            if (rs->items[i].ops[k].bandwidth_fraction > 1.0) return 1;
    return 0;
}

static void write_kernel_table_txt(const dpplot_results *rs, FILE *f) {
    int any = 0;
    for (size_t i = 0; i < rs->n; i++) any |= rs->items[i].status == DPPLOT_STATUS_OK && rs->items[i].n_ops > 0;
    if (!any) return;
    fprintf(f, "\nKERNEL TABLE (profile = \"ops\"): the %d ops taking the most time, per step\n", KERNEL_ROWS);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (r->status != DPPLOT_STATUS_OK || r->n_ops == 0) continue;
        char name[256];
        row_name(r, name, sizeof name);
        fprintf(f, "\n%s%s:\n", name, r->profile_predicted ? " (modelled per op: estimated)" : "");
        fprintf(f, "  %-22s %-16s %10s %10s %7s %9s %7s %9s %9s %14s\n", kernel_header[0], kernel_header[1],
                kernel_header[2], kernel_header[3], kernel_header[4], kernel_header[5], kernel_header[6],
                kernel_header[7], kernel_header[8], kernel_header[9]);
        for (size_t k = 0; k < r->n_ops && k < KERNEL_ROWS; k++) {
            char c[10][48];
            kernel_cells(r, &r->ops[k], c);
            fprintf(f, "  %-22s %-16s %10s %10s %7s %9s %7s %9s %9s %14s\n", c[0], c[1], c[2], c[3], c[4], c[5], c[6],
                    c[7], c[8], c[9]);
        }
        if (r->n_ops > KERNEL_ROWS) fprintf(f, "  (%zu more ops)\n", r->n_ops - KERNEL_ROWS);
    }
    fprintf(f, "\n%% step = the op's share of the step time; %% peak = achieved rate over the device's peak (the\n"
               "result's profile.peak says how it was obtained); alloc = tagged bytes made for the op.\n");
    if (kernel_bw_over_peak(rs))
        fprintf(f, "%% peak BW over 100: the op's operands were cache-resident, served faster than the memory\n"
                   "peak it is measured against (bytes count what the op reads and writes, not DRAM traffic).\n");
}

static void write_kernel_table_md(const dpplot_results *rs, FILE *f) {
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (r->status != DPPLOT_STATUS_OK || r->n_ops == 0) continue;
        char name[256];
        row_name(r, name, sizeof name);
        fputs("\n### Kernel table: ", f);
        md_text(f, name);
        fprintf(f, "%s\n\n|", r->profile_predicted ? " (modelled, estimated)" : "");
        for (int c = 0; c < 10; c++) fprintf(f, " %s |", kernel_header[c]);
        fputs("\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n", f);
        for (size_t k = 0; k < r->n_ops && k < KERNEL_ROWS; k++) {
            char c[10][48];
            kernel_cells(r, &r->ops[k], c);
            fputs("|", f);
            for (int j = 0; j < 10; j++) {
                fputc(' ', f);
                md_text(f, c[j]);
                fputs(" |", f);
            }
            fputc('\n', f);
        }
    }
    if (kernel_bw_over_peak(rs))
        fputs("\n% peak BW over 100: the op's operands were cache-resident, served faster than the memory peak it is "
              "measured against.\n",
              f);
}

/* ---- What every report says of a plan run: whether it fits the card, and that its times are
 * estimates (issue 27). */

/* "yes", "no", or "" when r has no plan budget. */
static const char *fit_text(const dpplot_result *r) { return r->fit < 0 ? "" : r->fit ? "yes" : "no"; }

/* 1 when any result carries a plan budget / is predicted. */
static int any_fit(const dpplot_results *rs) {
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].fit >= 0) return 1;
    return 0;
}

static int any_predicted(const dpplot_results *rs) {
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].predicted) return 1;
    return 0;
}

/* The modelled device of the predicted results: "h100 model (NVIDIA H100 80GB HBM3 (SXM5))" from
 * environment.device_name, else plan.device_model; "several device models" when they differ. */
static void model_name(const dpplot_results *rs, char *buf, size_t len) {
    const char *name = NULL;
    buf[0] = '\0';
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!r->predicted) continue;
        const char *n = r->device_name ? r->device_name : r->device_model;
        if (!n) continue;
        if (strncmp(n, "plan: ", 6) == 0) n += 6;
        if (name && strcmp(name, n) != 0) {
            snprintf(buf, len, "several device models");
            return;
        }
        name = n;
    }
    snprintf(buf, len, "%s", name ? name : "the plan device's model");
}

/* The card's memory of the plan runs ("80.00 GiB"), "" when none or when they differ. */
static void card_text(const dpplot_results *rs, char *buf, size_t len) {
    double card = NAN;
    buf[0] = '\0';
    for (size_t i = 0; i < rs->n; i++) {
        double c = rs->items[i].card_bytes;
        if (!isfinite(c)) continue;
        if (isfinite(card) && c != card) return;
        card = c;
    }
    if (isfinite(card)) dpplot_format_value(card, DPPLOT_UNIT_BYTES, buf, len);
}

/* "calibrated" when every predicted result's times are a calibrated model's, "roofline" when none
 * are, "roofline or calibrated" for a mix. */
static const char *time_model(const dpplot_results *rs) {
    int cal = 0, roof = 0;
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].predicted) {
            if (rs->items[i].calibrated)
                cal = 1;
            else
                roof = 1;
        }
    return cal && roof ? "roofline or calibrated" : cal ? "calibrated" : "roofline";
}

/* The line that marks a plan run's times: "step times marked * are roofline (or calibrated)
 * estimates for the h100 model (...), not measurements". */
static void estimate_line(const dpplot_results *rs, const char *mark, char *buf, size_t len) {
    char model[200];
    model_name(rs, model, sizeof model);
    snprintf(buf, len,
             "%s estimated: predicted by the plan backend for %s; memory is exact accounting, the step time a "
             "%s estimate (not a measurement)",
             mark, model, time_model(rs));
}

/* The fit line under a table: what the Fits column compares. */
static void fit_line(const dpplot_results *rs, char *buf, size_t len) {
    char card[32];
    card_text(rs, card, sizeof card);
    snprintf(buf, len,
             "Fits: the predicted reserved peak (allocated peak x (1 + the model's reserve_overhead), plan.fits) "
             "within the card's %s%s less the CUDA context; a point that does not fit would run out of memory",
             card[0] ? card : "memory", card[0] ? " memory" : "");
}

/* The checkpointing advice of a plan point, in words (lua/dpprof/fit.lua's advice_text says the
 * same on the console): "fits with checkpoint=blocks at +33% step time (estimated 1500.4 -> 1998.7
 * ms)". 0 when r has none. */
static int advice_text(const dpplot_result *r, char *buf, size_t len) {
    if (r->advice < 0) return 0;
    const char *state = r->fit == 0 ? "does not fit" : "fits only with checkpointing";
    if (r->advice == 0) {
        char reserved[32];
        dpplot_format_value(r->advice_reserved_bytes, DPPLOT_UNIT_BYTES, reserved, sizeof reserved);
        snprintf(buf, len, "%s; does not fit even with checkpoint=blocks (every block recomputed: reserved %s)", state,
                 reserved);
    } else {
        double cost = r->advice_reference_ms > 0 ? (r->advice_step_ms / r->advice_reference_ms - 1) * 100 : 0;
        snprintf(buf, len, "%s; fits with checkpoint=%s at %+.0f%% step time (estimated %.1f -> %.1f ms)", state,
                 r->advice_checkpoint, cost, r->advice_reference_ms, r->advice_step_ms);
    }
    return 1;
}

/* Widest row name of the results in the table (at least `least`). */
static int name_width(const dpplot_results *rs, int least) {
    int w = least;
    for (size_t i = 0; i < rs->n; i++) {
        char name[256];
        row_name(&rs->items[i], name, sizeof name);
        int l = (int)strlen(name) + 2 + (rs->items[i].predicted ? 2 : 0);
        if (l > w) w = l;
    }
    return w;
}

/* What every run of the tables shares (model, shape, dtype, LoRA or full fine-tuning, optimizer,
 * strategy, device: what the charts' subtitles name), "" when nothing is shared or known. */
/* The runs in the tables (all of them when none finished and all_if_none), as a list to free;
 * NULL when there are none or the host is out of memory. */
static const dpplot_result **table_items(const dpplot_results *rs, int all_if_none, size_t *n) {
    *n = 0;
    const dpplot_result **items = rs->n ? malloc(rs->n * sizeof *items) : NULL;
    if (!items) return NULL;
    for (size_t i = 0; i < rs->n; i++)
        if (in_table(&rs->items[i])) items[(*n)++] = &rs->items[i];
    if (*n == 0 && all_if_none)
        for (size_t i = 0; i < rs->n; i++) items[(*n)++] = &rs->items[i];
    return items;
}

static void fixed_config(const dpplot_results *rs, char *buf, size_t len) {
    buf[0] = '\0';
    size_t n;
    const dpplot_result **items = table_items(rs, 1, &n); /* none finished: what was asked of them */
    if (!items) return;
    dpplot_report_fixed_config(items, n, buf, len);
    free(items);
}

#define CONFIG_LABEL "Configuration (every run): "

/* The load note of the runs in the table ("" when none was taken on a loaded machine). */
static void load_note(const dpplot_results *rs, char *buf, size_t len) {
    buf[0] = '\0';
    size_t n;
    const dpplot_result **items = table_items(rs, 0, &n);
    if (!items) return;
    dpplot_report_load_note(items, n, buf, len);
    free(items);
}

#define LOAD_TAIL ": their times are not what the machine gives one run (environment.host_load)."

int dpplot_summary_write_txt(const dpplot_results *rs, const dpplot_strlist *problems, FILE *f) {
    int fits = any_fit(rs), nw = name_width(rs, 30), width = nw + 5 * 19 + (fits ? 6 : 0);
    if (width < 100) width = 100;
    rule(f, '=', width);
    fprintf(f, "DETAILED MEMORY PROFILING SUMMARY\n");
    rule(f, '=', width);
    char config[1024];
    fixed_config(rs, config, sizeof config);
    if (config[0]) fprintf(f, "%s%s\n", CONFIG_LABEL, config);
    fprintf(f, "\n");
    fprintf(f, "%-*s %18s %18s %18s %18s %18s%s\n", nw, "Method", "Peak Memory (MB)", "Reserved Peak (MB)",
            "Step Time (ms)", "Spread (ms)", "Memory/Time", fits ? "  Fits" : "");
    rule(f, '-', width);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!in_table(r)) continue;
        double peak = r->peak_bytes / MIB;
        char name[256], reserved[32], time[32], spread[48], ratio[32];
        row_name(r, name, sizeof name);
        if (r->predicted) strncat(name, " *", sizeof name - strlen(name) - 1);
        num_or_dash(reserved, sizeof reserved, "%.2f", r->reserved_peak_bytes / MIB);
        double ms = step_of(r, NULL, NULL);
        if (isfinite(ms)) {
            snprintf(time, sizeof time, "%.2f", ms);
            snprintf(ratio, sizeof ratio, "%.2f", ms > 0 ? peak / ms : 0.0);
            spread_text(r, spread, sizeof spread);
        } else {
            snprintf(time, sizeof time, "n/a"), snprintf(ratio, sizeof ratio, "n/a"), snprintf(spread, sizeof spread, "-");
        }
        fprintf(f, "%-*s %18.2f %18s %18s %18s %18s", nw, name, peak, reserved, time, spread, ratio);
        if (fits) fprintf(f, "  %s", fit_text(r));
        fputc('\n', f);
    }
    rule(f, '=', width);
    fprintf(f, "%s\n", STEP_NOTE);
    char load[256];
    load_note(rs, load, sizeof load);
    if (load[0]) fprintf(f, "Load: %s%s\n", load, LOAD_TAIL);
    int left_out = 0;
    for (size_t i = 0; i < rs->n; i++) left_out |= !in_table(&rs->items[i]);
    if (left_out) {
        fprintf(f, "\nNOT IN THE TABLE (did not finish, or no peak memory):\n");
        for (size_t i = 0; i < rs->n; i++) {
            const dpplot_result *r = &rs->items[i];
            if (in_table(r)) continue;
            char name[256], req[32];
            row_name(r, name, sizeof name);
            fprintf(f, "  %s: %s", name, dpplot_status_name(r->status));
            if (r->status == DPPLOT_STATUS_OOM && isfinite(r->oom_requested_bytes)) {
                dpplot_format_value(r->oom_requested_bytes, DPPLOT_UNIT_BYTES, req, sizeof req);
                fprintf(f, ", requested %s", req);
                if (r->oom_category) fprintf(f, " of %s", r->oom_category);
                if (r->oom_module) fprintf(f, " in %s", r->oom_module);
            } else if (r->status == DPPLOT_STATUS_OK) {
                fprintf(f, " but no peak memory");
            }
            if (r->message) {
                /* first line of the message only: the summary stays one line per run */
                int len = (int)strcspn(r->message, "\r\n");
                fprintf(f, " (%.*s)", len, r->message);
            }
            fprintf(f, " [%s]\n", r->file);
        }
    }
    /* Plan points beyond the card, or fitting only with checkpointing: the setting that makes them fit. */
    int advised = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        char name[256], text[300];
        if (!in_table(r) || !advice_text(r, text, sizeof text)) continue;
        if (!advised) fprintf(f, "\nACTIVATION CHECKPOINTING (plan estimates: model.checkpoint, dpprof fit):\n");
        advised = 1;
        row_name(r, name, sizeof name);
        fprintf(f, "  %s: %s\n", name, text);
    }
    /* A run whose gradients were not live at its peak beside one whose were: say why. */
    int grads_elsewhere = 0;
    for (size_t i = 0; i < rs->n; i++)
        grads_elsewhere |= in_table(&rs->items[i]) && rs->items[i].legacy_mb[DPPLOT_LEGACY_GRADIENTS] > 0;
    fprintf(f, "\n");
    fprintf(f, "COMPONENT-LEVEL BREAKDOWN:\n");
    fprintf(f, "\n");
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!in_table(r)) continue;
        char name[256];
        row_name(r, name, sizeof name);
        fprintf(f, "\n%s:\n", name);
        rule(f, '-', 80);
        /* The components, largest first as users know them (ties keep the legacy key order);
         * the totals after them. */
        /* The legacy Norm Samples field holds the per-sample gradients too; with the exact categories
         * they get their own line, as in the charts; a file with the legacy breakdown only (the
         * PyTorch tooling's) cannot part them, and its line says it holds both. */
        const char *title[DPPLOT_N_LEGACY + 1];
        double mb[DPPLOT_N_LEGACY + 1];
        int n = 0;
        double psg_mb = r->components_exact ? r->component_bytes[DPPLOT_COMP_PER_SAMPLE_GRADS] / MIB : 0.0;
        for (int k = 0; k < DPPLOT_LEGACY_TOTAL_ALLOCATED; k++) {
            if (!isfinite(r->legacy_mb[k])) continue;
            title[n] = legacy_titles[k], mb[n] = r->legacy_mb[k];
            if (k == DPPLOT_LEGACY_NORM_SAMPLES && !r->components_exact)
                title[n] = "Norm Samples + Per-sample Grads";
            if (k == DPPLOT_LEGACY_NORM_SAMPLES && psg_mb > 0.0) {
                mb[n] = r->component_bytes[DPPLOT_COMP_NORM_SAMPLES] / MIB;
                n++;
                title[n] = "Per-sample Grads", mb[n] = psg_mb;
            }
            n++;
        }
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && mb[b] > mb[b - 1]; b--) {
                const char *t = title[b];
                double v = mb[b];
                title[b] = title[b - 1], mb[b] = mb[b - 1], title[b - 1] = t, mb[b - 1] = v;
            }
        for (int k = 0; k < n; k++) fprintf(f, "  %-40s %15.2f MB\n", title[k], mb[k]);
        fprintf(f, "  %-40s %15s\n", "", "----------");
        static const char *const totals[2] = {"Peak Allocated", "Total Allocated (at the end)"};
        static const int total_keys[2] = {DPPLOT_LEGACY_PEAK_ALLOCATED, DPPLOT_LEGACY_TOTAL_ALLOCATED};
        for (int k = 0; k < 2; k++)
            if (isfinite(r->legacy_mb[total_keys[k]]))
                fprintf(f, "  %-40s %15.2f MB\n", totals[k], r->legacy_mb[total_keys[k]]);
        if (grads_elsewhere && r->legacy_mb[DPPLOT_LEGACY_GRADIENTS] == 0) {
            if (isfinite(r->gradients_peak_bytes) && r->gradients_peak_bytes > 0)
                fprintf(f,
                        "  note: Gradients 0 MB: none were live at this run's peak; %s makes the parameters' "
                        "gradients after it (their own peak: %.2f MB)\n",
                        r->method, r->gradients_peak_bytes / MIB);
            else
                fprintf(f,
                        "  note: Gradients 0 MB: %s kept no parameter gradient (.grad) at any time of the timed "
                        "iterations\n",
                        r->method);
        }
    }
    write_kernel_table_txt(rs, f);
    fprintf(f, "\n");
    rule(f, '=', width);
    fprintf(f, "MB = MiB (2^20 bytes), as in the results files. Memory/Time = peak MB / avg ms.\n");
    fprintf(f, "Components are what was live at the peak; Total Allocated is what was still allocated at the end.\n");
    char line[512];
    if (any_predicted(rs)) {
        estimate_line(rs, "*", line, sizeof line);
        fprintf(f, "%s.\n", line);
        fprintf(f, "Reserved Peak of a plan run = the allocated peak plus the pool's overhead "
                   "(plan.predicted_reserved_bytes).\n");
    }
    if (fits) {
        fit_line(rs, line, sizeof line);
        fprintf(f, "%s.\n", line);
    }
    if (problems && problems->n > 0) {
        fprintf(f, "\nPROBLEMS READING RESULTS:\n");
        for (size_t i = 0; i < problems->n; i++) fprintf(f, "  %s\n", problems->items[i]);
    }
    return ferror(f) ? -1 : 0;
}

/* CSV field, quoted when it holds a comma, quote or line break. */
static void csv_text(FILE *f, const char *s) {
    if (!s) return;
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

static void csv_number(FILE *f, double v, int ok) {
    if (ok && isfinite(v)) fprintf(f, "%.2f", v);
}

/* Sorted, distinct swept keys across all results (method excluded: it has its own column). */
static size_t vary_keys(const dpplot_results *rs, const char **keys, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++)
        for (size_t v = 0; v < rs->items[i].n_vary; v++) {
            const char *k = rs->items[i].vary[v].key;
            if (strcmp(k, "method") == 0) continue;
            size_t j = 0;
            while (j < n && strcmp(keys[j], k) != 0) j++;
            if (j < n || n == cap) continue;
            size_t at = n++;
            while (at > 0 && strcmp(keys[at - 1], k) > 0) keys[at] = keys[at - 1], at--;
            keys[at] = k;
        }
    return n;
}

int dpplot_summary_write_csv(const dpplot_results *rs, FILE *f) {
    const char *keys[32];
    size_t nk = vary_keys(rs, keys, 32);
    fputs("file,experiment,method,status,predicted,sweep", f);
    for (size_t k = 0; k < nk; k++) fprintf(f, ",%s", keys[k]);
    fputs(",peak_memory_mb,reserved_peak_mb,step_time_ms,step_time_min_ms,step_time_max_ms,memory_per_time", f);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) fprintf(f, ",%s_mb", dpplot_component_key((dpplot_component)c));
    fputs(",fits,time_estimated_for,configuration,loaded_machine,message\n", f);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        csv_text(f, r->file), fputc(',', f);
        csv_text(f, r->experiment), fputc(',', f);
        csv_text(f, r->method), fputc(',', f);
        fprintf(f, "%s,%s,", dpplot_status_name(r->status), r->predicted ? "true" : "false");
        csv_text(f, r->sweep_name);
        for (size_t k = 0; k < nk; k++) {
            fputc(',', f);
            const dpplot_vary *v = dpplot_result_vary(r, keys[k]);
            if (v) csv_text(f, v->text);
        }
        fputc(',', f), csv_number(f, r->peak_bytes / MIB, r->has_peak);
        fputc(',', f), csv_number(f, r->reserved_peak_bytes / MIB, 1);
        double lo, hi, ms = step_of(r, &lo, &hi);
        fputc(',', f), csv_number(f, ms, isfinite(ms));
        fputc(',', f), csv_number(f, lo, isfinite(lo) && !r->predicted);
        fputc(',', f), csv_number(f, hi, isfinite(hi) && !r->predicted);
        fputc(',', f), csv_number(f, r->peak_bytes / MIB / ms, r->has_peak && isfinite(ms) && ms > 0);
        for (int c = 0; c < DPPLOT_N_COMPONENTS; c++)
            fputc(',', f), csv_number(f, r->component_bytes[c] / MIB, r->has_components);
        fprintf(f, ",%s,", fit_text(r));
        if (r->predicted) csv_text(f, r->device_model ? r->device_model : "plan");
        fputc(',', f);
        char config[1024]; /* the run's configuration but what its sweep varies (the other columns) */
        dpplot_report_context_of(r, config, sizeof config);
        csv_text(f, config);
        fprintf(f, ",%s,", r->predicted ? "" : r->loaded ? "true" : "false");
        csv_text(f, r->message);
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

int dpplot_summary_write_md(const dpplot_results *rs, FILE *f) {
    int fits = any_fit(rs), predicted = any_predicted(rs);
    fputs("| Method | Status |", f);
    if (fits) fputs(" Fits |", f);
    fputs(" Peak memory (MiB) |", f);
    if (fits) fputs(" Reserved peak (MiB) |", f);
    fprintf(f, " %s | Spread (ms) | Memory/time (MiB/ms) |", predicted ? "Step time (ms, * estimated)" : "Step time (ms)");
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++)
        fprintf(f, " %s (MiB) |", dpplot_component_label((dpplot_component)c));
    fputs(fits ? "\n|---|---|---|--:|--:|--:|--:|--:|" : "\n|---|---|--:|--:|--:|--:|", f);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) fputs("--:|", f);
    fputc('\n', f);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        char name[256];
        row_name(r, name, sizeof name);
        fputs("| ", f);
        md_text(f, name);
        fprintf(f, " | %s |", dpplot_status_name(r->status));
        if (fits) fprintf(f, " %s |", fit_text(r));
        if (r->has_peak)
            fprintf(f, " %.2f |", r->peak_bytes / MIB);
        else
            fputs(" |", f);
        if (fits) {
            if (isfinite(r->reserved_peak_bytes))
                fprintf(f, " %.2f |", r->reserved_peak_bytes / MIB);
            else
                fputs(" |", f);
        }
        double ms = step_of(r, NULL, NULL);
        char spread[48];
        spread_text(r, spread, sizeof spread);
        if (isfinite(ms))
            fprintf(f, " %.2f%s | %s |", ms, r->predicted ? " *" : "", strcmp(spread, "-") ? spread : "");
        else
            fputs(" | |", f);
        if (r->has_peak && isfinite(ms) && ms > 0)
            fprintf(f, " %.2f |", r->peak_bytes / MIB / ms);
        else
            fputs(" |", f);
        for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
            if (r->has_components)
                fprintf(f, " %.2f |", r->component_bytes[c] / MIB);
            else
                fputs(" |", f);
        }
        fputc('\n', f);
    }
    fprintf(f, "\n%s\n", STEP_NOTE);
    char load[256];
    load_note(rs, load, sizeof load);
    if (load[0]) {
        fputs("\nLoad: ", f);
        md_text(f, load);
        fprintf(f, "%s\n", LOAD_TAIL);
    }
    char line[1024];
    fixed_config(rs, line, sizeof line);
    if (line[0]) {
        fputs("\n" CONFIG_LABEL, f);
        md_text(f, line);
        fputc('\n', f);
    }
    if (predicted) {
        estimate_line(rs, "\\*", line, sizeof line);
        fprintf(f, "\n%s.\n", line);
    }
    if (fits) {
        fit_line(rs, line, sizeof line);
        fprintf(f, "\n%s.\n", line);
    }
    int advised = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        char name[256], text[300];
        if (!in_table(r) || !advice_text(r, text, sizeof text)) continue;
        if (!advised) fputs("\n**Activation checkpointing** (plan estimates):\n\n", f);
        advised = 1;
        row_name(r, name, sizeof name);
        fputs("- ", f);
        md_text(f, name);
        fputs(": ", f);
        md_text(f, text);
        fputc('\n', f);
    }
    write_kernel_table_md(rs, f);
    return ferror(f) ? -1 : 0;
}

static void tex_text(FILE *f, const char *s) {
    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '_':
        case '&':
        case '%':
        case '$':
        case '#':
        case '{':
        case '}': fputc('\\', f), fputc(*p, f); break;
        case '~': fputs("\\textasciitilde{}", f); break;
        case '^': fputs("\\textasciicircum{}", f); break;
        case '\\': fputs("\\textbackslash{}", f); break;
        default: fputc(*p, f);
        }
    }
}

/* " & 12.34" or " & --". */
static void tex_number(FILE *f, double v, int ok) {
    if (ok && isfinite(v))
        fprintf(f, " & %.2f", v);
    else
        fputs(" & --", f);
}

/* The method cell and one cell per swept variable (keys) of r. */
static void tex_point(FILE *f, const dpplot_result *r, const char *const *keys, size_t nk) {
    char name[256];
    if (nk > 0 || r->sweep_name)
        snprintf(name, sizeof name, "%s", r->method);
    else
        row_name(r, name, sizeof name);
    tex_text(f, name);
    for (size_t k = 0; k < nk; k++) {
        const dpplot_vary *v = dpplot_result_vary(r, keys[k]);
        fputs(" & ", f);
        if (v) tex_text(f, v->text);
    }
}

/* The header cells of the method and the swept variables. */
static void tex_point_header(FILE *f, const char *const *keys, size_t nk) {
    fputs("Method", f);
    for (size_t k = 0; k < nk; k++) {
        fputs(" & ", f);
        tex_text(f, keys[k]);
    }
}

int dpplot_summary_write_tex(const dpplot_results *rs, FILE *f) {
    const char *keys[32];
    size_t nk = vary_keys(rs, keys, 32);
    int fits = any_fit(rs), predicted = any_predicted(rs);
    int cols = 1 + (int)nk + 3 + 1 + (fits ? 2 : 0);
    fputs("% Generated by dpprof plot. Needs \\usepackage{booktabs}. MiB = 2^20 bytes.\n", f);
    fputs("% Two tabulars, ready for \\input inside a table: the runs, then their memory components at the peak.\n", f);
    fputs("\\begin{tabular}{l", f);
    for (size_t k = 0; k < nk; k++) fputc('r', f);
    fputs(fits ? "rrrrlc}\n\\toprule\n" : "rrrl}\n\\toprule\n", f);
    tex_point_header(f, keys, nk);
    fputs(" & Peak memory (MiB)", f);
    if (fits) fputs(" & Reserved peak (MiB)", f);
    fprintf(f, " & Step time (ms)%s & Memory/time (MiB/ms) & Status", predicted ? "$^{*}$" : "");
    if (fits) fputs(" & Fits", f);
    fputs(" \\\\\n\\midrule\n", f);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        tex_point(f, r, keys, nk);
        tex_number(f, r->peak_bytes / MIB, r->has_peak);
        if (fits) tex_number(f, r->reserved_peak_bytes / MIB, 1);
        double ms = step_of(r, NULL, NULL);
        tex_number(f, ms, isfinite(ms));
        if (isfinite(ms) && r->predicted) fputs("$^{*}$", f);
        tex_number(f, r->peak_bytes / MIB / ms, r->has_peak && isfinite(ms) && ms > 0);
        fprintf(f, " & %s", r->status == DPPLOT_STATUS_OOM ? "OOM" : dpplot_status_name(r->status));
        if (fits) fprintf(f, " & %s", fit_text(r));
        fputs(" \\\\\n", f);
    }
    fputs("\\bottomrule\n", f);
    fprintf(f, "\\multicolumn{%d}{l}{\\footnotesize Step time: the median of the repeated runs, else of the timed "
               "iterations} \\\\\n", cols);
    char line[1024];
    fixed_config(rs, line, sizeof line);
    if (line[0]) {
        fprintf(f, "\\multicolumn{%d}{l}{\\footnotesize " CONFIG_LABEL, cols);
        tex_text(f, line);
        fputs("} \\\\\n", f);
    }
    if (predicted) {
        /* short notes: a multicolumn row does not wrap */
        model_name(rs, line, sizeof line);
        fprintf(f, "\\multicolumn{%d}{l}{\\footnotesize $^{*}$ estimated (%s) for ", cols, time_model(rs));
        tex_text(f, line);
        fputs(", not measured} \\\\\n", f);
    }
    if (fits) {
        char card[32];
        card_text(rs, card, sizeof card);
        fprintf(f,
                "\\multicolumn{%d}{l}{\\footnotesize Fits: the predicted reserved peak within the card's %s less its "
                "context ",
                cols, card[0] ? card : "memory");
        tex_text(f, "(plan.fits)");
        fputs("} \\\\\n", f);
    }
    fputs("\\end{tabular}\n", f);

    /* The component breakdown, as summary.txt has it: what was live at each run's peak. */
    int any_components = 0;
    for (size_t i = 0; i < rs->n; i++) any_components |= in_table(&rs->items[i]) && rs->items[i].has_components;
    if (!any_components) return ferror(f) ? -1 : 0;
    fputs("\n\\medskip\n\n\\begin{tabular}{l", f);
    for (size_t k = 0; k < nk; k++) fputc('r', f);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) fputc('r', f);
    fputs("r}\n\\toprule\n", f);
    tex_point_header(f, keys, nk);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
        fputs(" & ", f);
        tex_text(f, dpplot_component_label((dpplot_component)c));
    }
    fputs(" & Peak \\\\\n", f);
    fprintf(f, "\\multicolumn{%d}{l}{\\footnotesize MiB live at the run's peak} \\\\\n\\midrule\n",
            1 + (int)nk + DPPLOT_N_COMPONENTS + 1);
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!in_table(r) || !r->has_components) continue;
        tex_point(f, r, keys, nk);
        for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) tex_number(f, r->component_bytes[c] / MIB, 1);
        tex_number(f, r->peak_bytes / MIB, 1);
        fputs(" \\\\\n", f);
    }
    fputs("\\bottomrule\n\\end{tabular}\n", f);
    return ferror(f) ? -1 : 0;
}

int dpplot_summary_write_all(const dpplot_results *rs, const dpplot_strlist *problems, const char *out_dir,
                             dpplot_strlist *notes) {
    static const char *const names[4] = {"summary.txt", "summary.csv", "summary.md", "summary.tex"};
    int failures = 0;
    for (int k = 0; k < 4; k++) {
        size_t len = strlen(out_dir) + strlen(names[k]) + 2;
        char *path = malloc(len);
        if (!path) {
            (void)dpplot_strlist_addf(notes, "%s: out of memory", names[k]);
            failures++;
            continue;
        }
        snprintf(path, len, "%s/%s", out_dir, names[k]);
        /* never through a link planted at the name, never over a device or FIFO */
        dpfile_writer w;
        char why[1024] = "";
        int rc = -1;
        if (dpfile_writer_open(&w, path, why, sizeof why) == 0) {
            FILE *f = w.fp;
            errno = 0; /* a failed fprintf leaves its reason here */
            switch (k) {
            case 0: rc = dpplot_summary_write_txt(rs, problems, f); break;
            case 1: rc = dpplot_summary_write_csv(rs, f); break;
            case 2: rc = dpplot_summary_write_md(rs, f); break;
            default: rc = dpplot_summary_write_tex(rs, f); break;
            }
            if (rc != 0) {
                snprintf(why, sizeof why, "%s: cannot write: %s", path,
                         errno ? strerror(errno) : "a write failed with no reason given");
                dpfile_writer_abort(&w);
            } else {
                rc = dpfile_writer_commit(&w, why, sizeof why);
            }
        }
        if (rc != 0) {
            (void)dpplot_strlist_addf(notes, "%s", why);
            failures++;
        }
        free(path);
    }
    return failures;
}
