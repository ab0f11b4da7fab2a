/* render_dir.c: dpplot_render_dir, everything `dpprof plot DIR` produces. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpplot.h"
#include "report_util.h"
#include "sweep_util.h"

#define MAX_SWEEPS_DESCRIBED 8 /* sweeps an error names the variables of */

/* mkdir -p; 0 when the directory exists afterwards. */
static int make_dirs(const char *path) {
    char buf[4096];
    if (!*path) { /* the loop below starts past the first character */
        errno = ENOENT;
        return -1;
    }
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* Product of a point's numeric swept values: bigger points are the more telling reference. */
static double point_size(const dpplot_result *r) {
    double s = 1.0;
    for (size_t i = 0; i < r->n_vary; i++)
        if (r->vary[i].is_number && strcmp(r->vary[i].key, "method") != 0) s *= r->vary[i].number;
    return s;
}

/* Standard charts compare methods at one configuration: the single runs of the directory, or,
 * in a sweep directory, the point where the most methods finished (largest such point), among
 * those matching `point` ("key=value,...", NULL: any). Fills items and returns the count; context
 * gets "at seq_len=2048" for sweeps. */
static size_t pick_reference(const dpplot_results *rs, const char *point, const dpplot_result **items, char *context,
                             size_t clen) {
    size_t n = 0;
    context[0] = '\0';
    for (size_t i = 0; i < rs->n; i++)
        if (!rs->items[i].sweep_name) items[n++] = &rs->items[i];
    if (n > 0) return n;
    const dpplot_result *best = NULL;
    size_t best_ok = 0;
    char key[256], other[256];
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_point_matches(r, point)) continue;
        dpplot_point_label(r, key, sizeof key);
        size_t ok = 0;
        for (size_t j = 0; j < rs->n; j++) {
            const dpplot_result *q = &rs->items[j];
            dpplot_point_label(q, other, sizeof other);
            if (strcmp(q->sweep_name, r->sweep_name) == 0 && strcmp(key, other) == 0 && q->status == DPPLOT_STATUS_OK)
                ok++;
        }
        if (!best || ok > best_ok || (ok == best_ok && point_size(r) > point_size(best))) best = r, best_ok = ok;
    }
    if (!best) return 0;
    dpplot_point_label(best, key, sizeof key);
    for (size_t j = 0; j < rs->n; j++) {
        dpplot_point_label(&rs->items[j], other, sizeof other);
        if (strcmp(rs->items[j].sweep_name, best->sweep_name) == 0 && strcmp(key, other) == 0)
            items[n++] = &rs->items[j];
    }
    char model[1024];
    dpplot_report_context_of(best, model, sizeof model);
    if (key[0]) /* the sweep varies more than the method: say which point the charts show */
        snprintf(context, clen, "%s%sat %s (sweep '%s')", model, model[0] ? "  ·  " : "", key, best->sweep_name);
    else
        snprintf(context, clen, "%s%ssweep '%s'", model, model[0] ? "  ·  " : "", best->sweep_name);
    return n;
}

/* File-name-safe copy of s (letters, digits, '-', '_'; others become '_'). */
static void safe_name(const char *s, char *buf, size_t len) {
    size_t i = 0;
    for (; s[i] && i < len - 1; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
        buf[i] = ok ? c : '_';
    }
    buf[i] = '\0';
}

/* Puts the keys named by axes ("x,y") first, in that order; a name the sweep does not vary is a
 * problem (--heatmap asked for what is not there: exit 1) and left. Without axes, seq_len goes
 * first when swept (it reads best across). */
static void order_keys(const char **keys, size_t nk, const char *axes, const char *sweep, dpplot_strlist *problems) {
    char want[2][96] = {"", ""};
    if (axes && *axes) {
        const char *comma = strchr(axes, ',');
        size_t len = comma ? (size_t)(comma - axes) : strlen(axes);
        snprintf(want[0], sizeof want[0], "%.*s", (int)(len < 95 ? len : 95), axes);
        if (comma) snprintf(want[1], sizeof want[1], "%s", comma + 1);
    } else {
        snprintf(want[0], sizeof want[0], "seq_len");
    }
    size_t placed = 0;
    for (int w = 0; w < 2; w++) {
        if (!want[w][0]) continue;
        size_t j = placed;
        while (j < nk && strcmp(keys[j], want[w]) != 0) j++;
        if (j == nk) {
            if (axes && *axes) {
                char have[256] = "";
                for (size_t k = 0; k < nk; k++)
                    snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", k ? ", " : "", keys[k]);
                (void)dpplot_strlist_addf(problems, "--heatmap: sweep '%s' does not vary '%s' (it varies: %s)", sweep,
                                          want[w], nk ? have : "nothing");
            }
            continue;
        }
        const char *k = keys[j];
        memmove(keys + placed + 1, keys + placed, (j - placed) * sizeof *keys);
        keys[placed++] = k;
    }
}

/* Appends to buf (of len, NUL-terminated) what printf makes of fmt; stops at the end, quietly. */
static void append(char *buf, size_t len, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(buf);
    if (used + 1 < len) snprintf(buf + used, len - used, fmt, a, b);
}

/* "sweep 'S' varies seq_len, batch; sweep 'T' varies lr" (with values: "seq_len (256, 512)"),
 * the choices a --point or --heatmap has in rs; only sweeps varying `only` when it is set. */
static void describe_sweeps(const dpplot_results *rs, int with_values, const char *only, char *buf, size_t len) {
    buf[0] = '\0';
    const char *seen[MAX_SWEEPS_DESCRIBED];
    size_t n_seen = 0;
    for (size_t i = 0; i < rs->n && n_seen < MAX_SWEEPS_DESCRIBED; i++) {
        const char *s = rs->items[i].sweep_name;
        size_t k = 0;
        while (s && k < n_seen && strcmp(seen[k], s) != 0) k++;
        if (!s || k < n_seen) continue;
        seen[n_seen++] = s;
        const char *keys[DPPLOT_SWEEP_MAX_KEYS];
        size_t nk = dpplot_sweep_keys(rs, s, keys, DPPLOT_SWEEP_MAX_KEYS);
        int has = !only;
        for (size_t j = 0; j < nk; j++) has |= only && strcmp(keys[j], only) == 0;
        if (!has) continue;
        append(buf, len, "%ssweep '%s' varies ", buf[0] ? "; " : "", s);
        if (nk == 0) append(buf, len, "%s%s", "only the method", "");
        for (size_t j = 0; j < nk; j++) {
            if (only && with_values && strcmp(keys[j], only) != 0) continue;
            append(buf, len, "%s%s", j && !(only && with_values) ? ", " : "", keys[j]);
            if (!with_values) continue;
            dpplot_value_set vs;
            dpplot_sweep_values(rs, s, keys[j], &vs);
            for (size_t v = 0; v < vs.n; v++) append(buf, len, "%s%s", v ? ", " : " over ", vs.text[v]);
            if (vs.dropped) append(buf, len, "%s%s", ", ...", "");
        }
    }
    if (!buf[0]) snprintf(buf, len, "no sweep varies anything but the method");
}

/* Whether some sweep point of rs varies key (method: whether some point has that method). */
static int some_sweep_varies(const dpplot_results *rs, const char *key) {
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (r->sweep_name && (strcmp(key, "method") == 0 || dpplot_result_vary(r, key))) return 1;
    }
    return 0;
}

/* Whether some sweep point of rs matches filter ("key=value,..."). */
static int some_point_matches(const dpplot_results *rs, const char *filter) {
    for (size_t i = 0; i < rs->n; i++)
        if (rs->items[i].sweep_name && dpplot_point_matches(&rs->items[i], filter)) return 1;
    return 0;
}

/* --point and --heatmap against what the results hold: 0 when each names swept variables and
 * values, else -1 and one line in problems naming the first thing asked for that is not there and
 * what is (the swept variables, their values, the methods). */
static int check_asked(const dpplot_results *rs, const dpplot_options *o, dpplot_strlist *problems) {
    char have[1536];
    int any_sweep = 0;
    for (size_t i = 0; i < rs->n && !any_sweep; i++) any_sweep = rs->items[i].sweep_name != NULL;
    const char *asked[2] = {o->point && *o->point ? "--point" : NULL, o->heatmap && *o->heatmap ? "--heatmap" : NULL};
    for (int a = 0; a < 2; a++)
        if (asked[a] && !any_sweep) {
            (void)dpplot_strlist_addf(problems, "%s %s: the directory holds no sweep (its results vary nothing)",
                                      asked[a], a ? o->heatmap : o->point);
            return -1;
        }
    if (asked[0]) {
        for (const char *p = o->point; *p;) {
            char item[256], key[256];
            size_t len = strcspn(p, ",");
            snprintf(item, sizeof item, "%.*s", (int)(len < 255 ? len : 255), p);
            p += len + (p[len] == ',');
            snprintf(key, sizeof key, "%.*s", (int)strcspn(item, "="), item);
            if (strcmp(key, "method") == 0 && !some_point_matches(rs, item)) {
                char methods[512] = "";
                for (size_t i = 0; i < rs->n; i++) {
                    const dpplot_result *r = &rs->items[i];
                    size_t j = 0;
                    while (j < i && !(rs->items[j].sweep_name && strcmp(rs->items[j].method, r->method) == 0)) j++;
                    if (r->sweep_name && j == i)
                        append(methods, sizeof methods, "%s%s", methods[0] ? ", " : "", r->method);
                }
                (void)dpplot_strlist_addf(problems, "--point %s: no sweep point has method %s (the methods: %s)",
                                          o->point, item + 7, methods);
                return -1;
            }
            if (!some_sweep_varies(rs, key)) {
                describe_sweeps(rs, 0, NULL, have, sizeof have);
                (void)dpplot_strlist_addf(problems, "--point %s: no sweep varies '%s' (%s)", o->point, key, have);
                return -1;
            }
            if (!some_point_matches(rs, item)) {
                describe_sweeps(rs, 1, key, have, sizeof have);
                (void)dpplot_strlist_addf(problems, "--point %s: no sweep point has %s (%s)", o->point, item, have);
                return -1;
            }
        }
        if (!some_point_matches(rs, o->point)) {
            describe_sweeps(rs, 1, NULL, have, sizeof have);
            (void)dpplot_strlist_addf(problems, "--point %s: no sweep point has all of these values together (%s)",
                                      o->point, have);
            return -1;
        }
    }
    if (asked[1]) {
        char want[2][128];
        const char *comma = strchr(o->heatmap, ',');
        size_t len = comma ? (size_t)(comma - o->heatmap) : strlen(o->heatmap);
        snprintf(want[0], sizeof want[0], "%.*s", (int)(len < 127 ? len : 127), o->heatmap);
        snprintf(want[1], sizeof want[1], "%s", comma ? comma + 1 : "");
        for (int w = 0; w < 2; w++)
            if (strcmp(want[w], "method") == 0 || !some_sweep_varies(rs, want[w])) {
                describe_sweeps(rs, 0, NULL, have, sizeof have);
                if (strcmp(want[w], "method") == 0)
                    (void)dpplot_strlist_addf(problems,
                                              "--heatmap %s: 'method' is not an axis (each method is a heatmap of "
                                              "its own; %s)",
                                              o->heatmap, have);
                else
                    (void)dpplot_strlist_addf(problems, "--heatmap %s: no sweep varies '%s' (%s)", o->heatmap, want[w],
                                              have);
                return -1;
            }
        if (strcmp(want[0], want[1]) == 0) {
            (void)dpplot_strlist_addf(problems, "--heatmap %s: X and Y must be two different swept variables",
                                      o->heatmap);
            return -1;
        }
        int both = 0;
        for (size_t i = 0; i < rs->n && !both; i++) {
            const dpplot_result *r = &rs->items[i];
            both = r->sweep_name && dpplot_result_vary(r, want[0]) && dpplot_result_vary(r, want[1]);
        }
        if (!both) {
            describe_sweeps(rs, 0, NULL, have, sizeof have);
            (void)dpplot_strlist_addf(problems, "--heatmap %s: no sweep varies both '%s' and '%s' (%s)", o->heatmap,
                                      want[0], want[1], have);
            return -1;
        }
    }
    return 0;
}

#define MAX_SWEEPS 32 /* sweeps of one directory drawn; the rest are named in a note */

/* Renders the charts of each sweep; returns the number of charts that failed to write. What the
 * options asked for and no sweep has goes to problems. */
static int render_sweeps(const dpplot_results *rs, const char *out_dir, const dpplot_options *o, dpplot_strlist *notes,
                         dpplot_strlist *problems) {
    const char *sweeps[MAX_SWEEPS];
    size_t n_sw = 0, more_sweeps = 0;
    int failures = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const char *s = rs->items[i].sweep_name;
        if (!s) continue;
        size_t k = 0;
        while (k < n_sw && strcmp(sweeps[k], s) != 0) k++;
        if (k < n_sw) continue;
        if (n_sw < MAX_SWEEPS) {
            sweeps[n_sw++] = s;
        } else { /* counted once each */
            size_t j = 0;
            while (j < i && !(rs->items[j].sweep_name && strcmp(rs->items[j].sweep_name, s) == 0)) j++;
            more_sweeps += j == i;
        }
    }
    if (n_sw == 0 && o->heatmap && *o->heatmap)
        (void)dpplot_strlist_addf(problems, "--heatmap %s: the directory holds no sweep (its results vary nothing)",
                                  o->heatmap);
    if (more_sweeps)
        (void)dpplot_strlist_addf(notes,
                                  "the directory holds %zu sweeps; the charts of %zu more are not drawn "
                                  "(plot them from a directory of their own)",
                                  n_sw + more_sweeps, more_sweeps);
    for (size_t w = 0; w < n_sw; w++) {
        const char *keys[DPPLOT_SWEEP_MAX_KEYS];
        size_t nk = dpplot_sweep_keys(rs, sweeps[w], keys, DPPLOT_SWEEP_MAX_KEYS);
        order_keys(keys, nk, o->heatmap, sweeps[w], problems);
        size_t n_methods = dpplot_sweep_method_count(rs, sweeps[w]);
        if (n_methods > DPPLOT_SWEEP_MAX_METHODS)
            (void)dpplot_strlist_addf(
                notes, "sweep '%s' has %zu methods; its charts draw the first %d, %zu are left out", sweeps[w],
                n_methods, DPPLOT_SWEEP_MAX_METHODS, n_methods - DPPLOT_SWEEP_MAX_METHODS);
        for (size_t k = 0; k < nk; k++) {
            dpplot_value_set vs;
            dpplot_sweep_values(rs, sweeps[w], keys[k], &vs);
            if (vs.dropped)
                (void)dpplot_strlist_addf(notes,
                                          "sweep '%s' has %zu values of '%s'; its charts draw %d, the points at "
                                          "the other %zu are left out",
                                          sweeps[w], vs.n + vs.dropped, keys[k], DPPLOT_SWEEP_MAX_VALUES, vs.dropped);
        }
        char prefix[96] = "", safe[64], path[4096], key_safe[64];
        if (n_sw > 1) {
            safe_name(sweeps[w], safe, sizeof safe);
            snprintf(prefix, sizeof prefix, "%s_", safe);
        }
        int rc;
        if (nk == 1) {
            safe_name(keys[0], key_safe, sizeof key_safe);
            snprintf(path, sizeof path, "%s/%ssweep_%s.png", out_dir, prefix, key_safe);
            if (dpplot_report_sweep(rs, sweeps[w], keys[0], path, o, notes) < 0) failures++;
        }
        if (nk >= 2) { /* heatmaps of every metric over the first two keys, the others faceted */
            static const char *const files[DPPLOT_N_METRICS] = {"memory_heatmap", "heatmap_time", "heatmap_extra",
                                                                "heatmap_tokens_per_s"};
            for (int m = 0; m < DPPLOT_N_METRICS; m++) {
                snprintf(path, sizeof path, "%s/%s%s.png", out_dir, prefix, files[m]);
                size_t before = notes->n;
                rc = dpplot_report_heatmap_metric(rs, sweeps[w], keys[0], keys[1], m, o->point, path, o, notes);
                if (rc < 0) failures++;
                /* extra memory needs vanilla at the same points: no note when the sweep has none */
                if (rc == 0 && m == DPPLOT_METRIC_EXTRA && notes->n == before + 1) {
                    free(notes->items[--notes->n]);
                }
            }
        }
        if (nk >= 3) { /* small multiples: a panel per value of the third (and fourth) key */
            for (int m = 0; m < 2; m++) {
                snprintf(path, sizeof path, "%s/%ssweep_grid_%s.png", out_dir, prefix, dpplot_metric_name(m));
                if (dpplot_report_sweep_grid(rs, sweeps[w], keys, nk < 4 ? nk : 4, m, o->point, path, o, notes) < 0)
                    failures++;
            }
            if (nk > 4)
                (void)dpplot_strlist_addf(notes,
                                          "sweep '%s' varies %zu variables besides method; the small multiples "
                                          "show four (fix the rest with --point KEY=VALUE)",
                                          sweeps[w], nk);
        }
        if (nk >= 1) {
            snprintf(path, sizeof path, "%s/%smemory_timeline_points.png", out_dir, prefix);
            if (dpplot_report_timeline_points(rs, sweeps[w], o->point, path, o, notes) < 0) failures++;
        }
    }
    return failures;
}

/* Moves the last k notes (the failures a step just reported) to problems; returns k. */
static int move_last(dpplot_strlist *notes, dpplot_strlist *problems, int k) {
    if (k <= 0) return k;
    size_t first = notes->n >= (size_t)k ? notes->n - (size_t)k : 0;
    for (size_t i = first; i < notes->n; i++) {
        (void)dpplot_strlist_addf(problems, "%s", notes->items[i]);
        free(notes->items[i]);
    }
    notes->n = first;
    return k;
}

int dpplot_render_dir(const char *results_dir, const char *out_dir, const dpplot_options *opt, char *err,
                      size_t errlen) {
    dpplot_options o = dpplot_options_resolve(opt);
    dpplot_strlist problems = {0}, notes = {0};
    dpplot_results rs = {0};
    int status = 0, failures = 0;
    if (err && errlen) err[0] = '\0';
    if (!out_dir) out_dir = results_dir;

    if (!results_dir || dpplot_results_load(results_dir, &rs, &problems) != 0) {
        status = -1;
    } else if (rs.n == 0) {
        (void)dpplot_strlist_addf(&problems, "%s: no results files (*.json with results) found", results_dir);
        status = -1;
    } else if (check_asked(&rs, &o, &problems) != 0) {
        status = 2; /* --point or --heatmap asks for what no result has: nothing is drawn */
    } else if (make_dirs(out_dir) != 0) {
        (void)dpplot_strlist_addf(&problems, "%s: cannot create output directory: %s", out_dir, strerror(errno));
        status = -1;
    } else {
        const dpplot_result **items = malloc(rs.n * sizeof *items);
        char context[1536], path[4096];
        if (!items) {
            (void)dpplot_strlist_addf(&problems, "out of memory");
            status = -1;
        } else {
            size_t n = pick_reference(&rs, o.point, items, context, sizeof context);
            if (n == 0 && o.point)
                (void)dpplot_strlist_addf(&problems,
                                          "--point %s: no sweep point matches; the standard charts are "
                                          "not drawn",
                                          o.point);
            dpplot_selection sel = {items, n, context[0] ? context : NULL};
            static const char *const files[9] = {"memory_breakdown_comparison.png",
                                                 "memory_timeline.png",
                                                 "performance_tradeoff.png",
                                                 "module_breakdown.png",
                                                 "op_breakdown.png",
                                                 "operation_level_breakdown.png",
                                                 "memory_analysis_overview.png",
                                                 "step_peaks.png",
                                                 "clip_bound.png"};
            int (*const charts[9])(const dpplot_selection *, const char *, const dpplot_options *, dpplot_strlist *) = {
                dpplot_report_breakdown, dpplot_report_timeline, dpplot_report_tradeoff,
                dpplot_report_modules,   dpplot_report_ops,      dpplot_report_phases,
                dpplot_report_overview,  dpplot_report_steps,    dpplot_report_bounds};
            for (int c = 0; c < (n > 0 ? 9 : 0); c++) {
                snprintf(path, sizeof path, "%s/%s", out_dir, files[c]);
                if (charts[c](&sel, path, &o, &notes) < 0) failures += move_last(&notes, &problems, 1);
            }
            free(items);
            failures += move_last(&notes, &problems, render_sweeps(&rs, out_dir, &o, &notes, &problems));
            if (o.timelines_each)
                failures += move_last(&notes, &problems, dpplot_report_timelines_each(&rs, out_dir, &o, &notes));
            failures += move_last(&notes, &problems, dpplot_summary_write_all(&rs, &problems, out_dir, &notes));
        }
    }
    if (status == 0 && (problems.n > 0 || failures > 0)) status = 1;
    if (o.warn) {
        for (size_t i = 0; i < problems.n; i++) o.warn(o.warn_user, problems.items[i]);
        for (size_t i = 0; i < notes.n; i++) o.warn(o.warn_user, notes.items[i]);
    }
    if (status != 0 && err && errlen) {
        const char *first = problems.n ? problems.items[0] : notes.n ? notes.items[0] : "failed";
        if (problems.n > 1)
            snprintf(err, errlen, "%s (and %zu more problems)", first, problems.n - 1);
        else
            snprintf(err, errlen, "%s", first);
    }
    dpplot_strlist_release(&problems);
    dpplot_strlist_release(&notes);
    dpplot_results_release(&rs);
    return status;
}
