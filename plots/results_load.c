/* results_load.c: reading a results directory with cJSON into dpplot_results. */
#define _POSIX_C_SOURCE 200809L
#include "dpplot_results.h"
#include "safe_file.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0

/* Where problems go while one file is read. */
typedef struct {
    const char *file;
    dpplot_strlist *problems;
} reader;

#define PROBLEM(rd, ...) (void)dpplot_strlist_addf((rd)->problems, __VA_ARGS__)

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static const char *type_name(const cJSON *it) {
    if (cJSON_IsString(it)) return "a string";
    if (cJSON_IsNumber(it)) return "a number";
    if (cJSON_IsBool(it)) return "a boolean";
    if (cJSON_IsNull(it)) return "null";
    if (cJSON_IsArray(it)) return "an array";
    if (cJSON_IsObject(it)) return "an object";
    return "invalid";
}

/* Item at a dotted path ("memory.peak_bytes") below obj, or NULL. */
static const cJSON *at(const cJSON *obj, const char *path) {
    char key[64];
    const cJSON *cur = obj;
    while (cur && *path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        if (len >= sizeof key) return NULL;
        memcpy(key, path, len);
        key[len] = '\0';
        cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        path += len + (dot ? 1 : 0);
    }
    return cur;
}

/* Number at path: 1 when read into *out, 0 when absent (or null), -1 when of another type
 * (a problem is recorded naming the field). */
static int number_at(reader *rd, const cJSON *root, const char *path, double *out) {
    const cJSON *it = at(root, path);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsNumber(it)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected a number", rd->file, path, type_name(it));
        return -1;
    }
    *out = it->valuedouble;
    return 1;
}

/* String at path, borrowed from the tree: NULL when absent or null; a problem when of another
 * type. */
static const char *string_at(reader *rd, const cJSON *root, const char *path) {
    const cJSON *it = at(root, path);
    if (!it || cJSON_IsNull(it)) return NULL;
    if (!cJSON_IsString(it)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected a string", rd->file, path, type_name(it));
        return NULL;
    }
    return it->valuestring;
}

const char *dpplot_status_name(dpplot_status s) {
    static const char *const names[] = {"ok", "oom", "error", "crashed", "timeout", "unknown"};
    return (unsigned)s <= DPPLOT_STATUS_UNKNOWN ? names[s] : "unknown";
}

static dpplot_status parse_status(reader *rd, const cJSON *root, int dpprof_file) {
    const char *s = string_at(rd, root, "status");
    if (!s) {
        /* Files from before dpprof carry no status: they only exist when the run finished. */
        if (dpprof_file && !at(root, "status")) PROBLEM(rd, "%s: field 'status' missing; assuming ok", rd->file);
        return DPPLOT_STATUS_OK;
    }
    for (int i = 0; i < DPPLOT_STATUS_UNKNOWN; i++)
        if (strcmp(s, dpplot_status_name((dpplot_status)i)) == 0) return (dpplot_status)i;
    PROBLEM(rd, "%s: field 'status' has unknown value '%s'", rd->file, s);
    return DPPLOT_STATUS_UNKNOWN;
}

/* Category name -> component it adds to. */
static dpplot_component component_of(const char *category) {
    static const struct {
        const char *name;
        dpplot_component c;
    } map[] = {{"parameters", DPPLOT_COMP_PARAMETERS},
               {"gradients", DPPLOT_COMP_GRADIENTS},
               {"optimizer_states", DPPLOT_COMP_OPTIMIZER_STATES},
               {"activations", DPPLOT_COMP_ACTIVATIONS},
               {"output_grads", DPPLOT_COMP_OUTPUT_GRADS},
               {"per_sample_grads", DPPLOT_COMP_PER_SAMPLE_GRADS},
               {"norm_samples", DPPLOT_COMP_NORM_SAMPLES},
               {"temp", DPPLOT_COMP_TEMP},
               {"workspace", DPPLOT_COMP_TEMP}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(category, map[i].name) == 0) return map[i].c;
    return DPPLOT_COMP_OTHER;
}

static const char *const legacy_keys[DPPLOT_N_LEGACY] = {
    "model_parameters_mb", "optimizer_states_mb", "gradients_mb",       "activation_hooks_mb",
    "norm_samples_mb",     "temp_matrices_mb",    "total_allocated_mb", "peak_allocated_mb"};

static void read_memory(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    int got = number_at(rd, root, "memory.peak_bytes", &v);
    if (got == 1) {
        r->peak_bytes = v, r->has_peak = 1;
    } else if (number_at(rd, root, "peak_memory_mb", &v) == 1) {
        r->peak_bytes = v * MIB, r->has_peak = 1;
    } else if (got == 0 && r->status == DPPLOT_STATUS_OK && !at(root, "peak_memory_mb")) {
        PROBLEM(rd, "%s: field 'memory.peak_bytes' missing (and no 'peak_memory_mb')", rd->file);
    }
    if (number_at(rd, root, "memory.reserved_peak_bytes", &v) == 1) r->reserved_peak_bytes = v;
    if (number_at(rd, root, "memory.end_bytes", &v) == 1) r->end_bytes = v;

    /* Components: exact categories first, the legacy breakdown second. */
    const cJSON *cats = at(root, "memory.categories");
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) r->component_bytes[c] = 0.0;
    if (cats && cJSON_IsObject(cats)) {
        const cJSON *cat;
        int any = 0;
        cJSON_ArrayForEach(cat, cats) {
            char path[128];
            snprintf(path, sizeof path, "memory.categories.%s.live_at_peak_bytes", cat->string);
            if (number_at(rd, root, path, &v) == 1) {
                r->component_bytes[component_of(cat->string)] += v;
                any = 1;
            } else if (!at(root, path) && cJSON_IsObject(cat)) {
                PROBLEM(rd, "%s: field '%s' missing", rd->file, path);
            }
        }
        r->has_components = any;
    } else if (cats) {
        PROBLEM(rd, "%s: field 'memory.categories' is %s, expected an object", rd->file, type_name(cats));
    }
    const cJSON *bd = at(root, "breakdown");
    for (int k = 0; k < DPPLOT_N_LEGACY; k++) r->legacy_mb[k] = NAN;
    if (bd && !cJSON_IsObject(bd))
        PROBLEM(rd, "%s: field 'breakdown' is %s, expected an object", rd->file, type_name(bd));
    if (bd && cJSON_IsObject(bd)) {
        for (int k = 0; k < DPPLOT_N_LEGACY; k++) {
            char path[64];
            snprintf(path, sizeof path, "breakdown.%s", legacy_keys[k]);
            if (number_at(rd, root, path, &v) == 1) r->legacy_mb[k] = v;
        }
    }
    if (!r->has_components && bd && cJSON_IsObject(bd)) {
        static const dpplot_component from_legacy[6] = {DPPLOT_COMP_PARAMETERS,   DPPLOT_COMP_OPTIMIZER_STATES,
                                                        DPPLOT_COMP_GRADIENTS,    DPPLOT_COMP_ACTIVATIONS,
                                                        DPPLOT_COMP_NORM_SAMPLES, DPPLOT_COMP_TEMP};
        for (int k = 0; k < 6; k++)
            if (isfinite(r->legacy_mb[k])) {
                r->component_bytes[from_legacy[k]] += r->legacy_mb[k] * MIB;
                r->has_components = 1;
            }
    }
    if (r->has_components && r->has_peak) {
        double sum = 0.0;
        for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) sum += r->component_bytes[c];
        if (r->peak_bytes > sum) r->component_bytes[DPPLOT_COMP_OTHER] += r->peak_bytes - sum;
    }
    /* Legacy values absent from the file are derived as docs/results.md defines them. */
    if (r->has_components) {
        const double *cb = r->component_bytes;
        double derived[6] = {cb[DPPLOT_COMP_PARAMETERS],
                             cb[DPPLOT_COMP_OPTIMIZER_STATES],
                             cb[DPPLOT_COMP_GRADIENTS],
                             cb[DPPLOT_COMP_ACTIVATIONS] + cb[DPPLOT_COMP_OUTPUT_GRADS],
                             cb[DPPLOT_COMP_NORM_SAMPLES] + cb[DPPLOT_COMP_PER_SAMPLE_GRADS],
                             cb[DPPLOT_COMP_TEMP]};
        for (int k = 0; k < 6; k++)
            if (!isfinite(r->legacy_mb[k])) r->legacy_mb[k] = derived[k] / MIB;
    }
    if (!isfinite(r->legacy_mb[DPPLOT_LEGACY_TOTAL_ALLOCATED]) && isfinite(r->end_bytes))
        r->legacy_mb[DPPLOT_LEGACY_TOTAL_ALLOCATED] = r->end_bytes / MIB;
    if (!isfinite(r->legacy_mb[DPPLOT_LEGACY_PEAK_ALLOCATED]) && r->has_peak)
        r->legacy_mb[DPPLOT_LEGACY_PEAK_ALLOCATED] = r->peak_bytes / MIB;

    /* Modules, grouped. */
    const cJSON *mods = at(root, "memory.modules");
    if (mods && !cJSON_IsArray(mods)) {
        PROBLEM(rd, "%s: field 'memory.modules' is %s, expected an array", rd->file, type_name(mods));
    } else if (mods) {
        int index = 0, reported = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, mods) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "module");
            const cJSON *live = cJSON_GetObjectItemCaseSensitive(m, "live_at_peak_bytes");
            if (!cJSON_IsString(name) || !cJSON_IsNumber(live)) {
                if (!reported)
                    PROBLEM(rd,
                            "%s: field 'memory.modules[%d]' needs a string 'module' and a number "
                            "'live_at_peak_bytes'",
                            rd->file, index);
                reported = 1;
            } else {
                r->module_bytes[dpplot_module_group_of(name->valuestring)] += live->valuedouble;
                r->has_modules = 1;
            }
            index++;
        }
    }
}

static void read_timing(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    int got = number_at(rd, root, "timing.avg_ms", &v);
    if (got == 1) {
        r->avg_ms = v, r->has_time = 1;
    } else if (number_at(rd, root, "avg_time_ms", &v) == 1) {
        r->avg_ms = v, r->has_time = 1;
    } else if (got == 0 && r->status == DPPLOT_STATUS_OK && !at(root, "avg_time_ms")) {
        PROBLEM(rd, "%s: field 'timing.avg_ms' missing (and no 'avg_time_ms')", rd->file);
    }
    for (int p = 0; p < DPPLOT_N_PHASES; p++) {
        char path[64];
        snprintf(path, sizeof path, "timing.phases_ms.%s", dpplot_phase_name((dpplot_phase)p));
        r->phase_ms[p] = NAN;
        if (number_at(rd, root, path, &v) == 1) r->phase_ms[p] = v;
    }
}

/* Numbers of a JSON array into a new array of n doubles (NaN for non-numbers). */
static double *numbers(reader *rd, const cJSON *arr, const char *path, size_t n) {
    double *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return NULL;
    size_t i = 0;
    int reported = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (i >= n) break;
        if (cJSON_IsNumber(it)) {
            out[i] = it->valuedouble;
        } else {
            out[i] = NAN;
            if (!reported)
                PROBLEM(rd, "%s: field '%s[%zu]' is %s, expected a number", rd->file, path, i, type_name(it));
            reported = 1;
        }
        i++;
    }
    return out;
}

static int read_timeline(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *tl = at(root, "memory.timeline");
    if (tl) {
        const cJSON *t = at(tl, "t_ms"), *a = at(tl, "allocated_bytes"), *res = at(tl, "reserved_bytes");
        if (!cJSON_IsArray(t) || !cJSON_IsArray(a)) {
            PROBLEM(rd, "%s: field 'memory.timeline' needs arrays 't_ms' and 'allocated_bytes'", rd->file);
            return 0;
        }
        size_t nt = (size_t)cJSON_GetArraySize(t), na = (size_t)cJSON_GetArraySize(a);
        size_t n = nt < na ? nt : na;
        if (nt != na)
            PROBLEM(rd, "%s: field 'memory.timeline.allocated_bytes' has %zu entries but 't_ms' has %zu", rd->file, na,
                    nt);
        if (res && cJSON_IsArray(res) && (size_t)cJSON_GetArraySize(res) != nt)
            PROBLEM(rd, "%s: field 'memory.timeline.reserved_bytes' has %d entries but 't_ms' has %zu", rd->file,
                    cJSON_GetArraySize(res), nt);
        r->t_ms = numbers(rd, t, "memory.timeline.t_ms", n);
        r->allocated_bytes = numbers(rd, a, "memory.timeline.allocated_bytes", n);
        r->reserved_bytes = res && cJSON_IsArray(res) ? numbers(rd, res, "memory.timeline.reserved_bytes", n)
                                                      : numbers(rd, a, "memory.timeline.allocated_bytes", n);
        if (!r->t_ms || !r->allocated_bytes || !r->reserved_bytes) return -1;
        /* reserved shorter than t_ms: pad with NaN (gap) */
        if (res && cJSON_IsArray(res))
            for (size_t i = (size_t)cJSON_GetArraySize(res); i < n; i++) r->reserved_bytes[i] = NAN;
        r->n_timeline = n;
    } else {
        const cJSON *snaps = at(root, "snapshots");
        if (!snaps) return 0;
        if (!cJSON_IsArray(snaps)) {
            PROBLEM(rd, "%s: field 'snapshots' is %s, expected an array", rd->file, type_name(snaps));
            return 0;
        }
        size_t n = (size_t)cJSON_GetArraySize(snaps);
        r->t_ms = malloc((n ? n : 1) * sizeof(double));
        r->allocated_bytes = malloc((n ? n : 1) * sizeof(double));
        r->reserved_bytes = malloc((n ? n : 1) * sizeof(double));
        if (!r->t_ms || !r->allocated_bytes || !r->reserved_bytes) return -1;
        size_t i = 0;
        double t0 = NAN;
        int reported = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, snaps) {
            const cJSON *ts = cJSON_GetObjectItemCaseSensitive(s, "timestamp");
            const cJSON *al = cJSON_GetObjectItemCaseSensitive(s, "allocated_mb");
            const cJSON *re = cJSON_GetObjectItemCaseSensitive(s, "reserved_mb");
            if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(al)) {
                if (!reported)
                    PROBLEM(rd, "%s: field 'snapshots[%zu]' needs numbers 'timestamp' and 'allocated_mb'", rd->file, i);
                reported = 1;
                r->t_ms[i] = r->allocated_bytes[i] = r->reserved_bytes[i] = NAN;
            } else {
                /* Legacy timestamps may be wall-clock seconds: count from the first snapshot. */
                if (isnan(t0)) t0 = ts->valuedouble;
                r->t_ms[i] = (ts->valuedouble - t0) * 1000.0;
                r->allocated_bytes[i] = al->valuedouble * MIB;
                r->reserved_bytes[i] = cJSON_IsNumber(re) ? re->valuedouble * MIB : r->allocated_bytes[i];
            }
            i++;
        }
        r->n_timeline = n;
    }
    const cJSON *spans = at(root, "timing.spans");
    if (spans && cJSON_IsArray(spans)) {
        size_t n = (size_t)cJSON_GetArraySize(spans);
        r->spans = malloc((n ? n : 1) * sizeof *r->spans);
        if (!r->spans) return -1;
        const cJSON *s;
        int index = 0, reported = 0;
        cJSON_ArrayForEach(s, spans) {
            const cJSON *ph = cJSON_GetObjectItemCaseSensitive(s, "phase");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "start_ms");
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "end_ms");
            const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, "iter");
            int phase = cJSON_IsString(ph) ? dpplot_phase_from_name(ph->valuestring) : -1;
            if (phase < 0 || !cJSON_IsNumber(st) || !cJSON_IsNumber(en)) {
                if (!reported)
                    PROBLEM(rd,
                            "%s: field 'timing.spans[%d]' needs a known 'phase' and numbers "
                            "'start_ms', 'end_ms'",
                            rd->file, index);
                reported = 1;
            } else {
                dpplot_span *sp = &r->spans[r->n_spans++];
                sp->phase = phase;
                sp->iter = cJSON_IsNumber(it) ? it->valueint : 0;
                sp->start_ms = st->valuedouble, sp->end_ms = en->valuedouble;
            }
            index++;
        }
    } else if (spans) {
        PROBLEM(rd, "%s: field 'timing.spans' is %s, expected an array", rd->file, type_name(spans));
    }
    return 0;
}

static int read_sweep(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *sw = at(root, "sweep");
    if (!sw || cJSON_IsNull(sw)) return 0;
    if (!cJSON_IsObject(sw)) {
        PROBLEM(rd, "%s: field 'sweep' is %s, expected an object", rd->file, type_name(sw));
        return 0;
    }
    const char *name = string_at(rd, root, "sweep.name");
    r->sweep_name = dup_str(name ? name : "sweep");
    if (!r->sweep_name) return -1;
    const cJSON *vary = at(root, "sweep.vary");
    if (!cJSON_IsObject(vary)) {
        PROBLEM(rd, "%s: field 'sweep.vary' is %s, expected an object", rd->file, vary ? type_name(vary) : "missing");
        return 0;
    }
    size_t n = (size_t)cJSON_GetArraySize(vary);
    r->vary = calloc(n ? n : 1, sizeof *r->vary);
    if (!r->vary) return -1;
    const cJSON *v;
    cJSON_ArrayForEach(v, vary) {
        dpplot_vary *dv = &r->vary[r->n_vary];
        char num[64];
        if (cJSON_IsNumber(v)) {
            dv->is_number = 1, dv->number = v->valuedouble;
            snprintf(num, sizeof num, "%g", v->valuedouble);
            dv->text = dup_str(num);
        } else if (cJSON_IsString(v)) {
            dv->text = dup_str(v->valuestring);
        } else if (cJSON_IsBool(v)) {
            dv->text = dup_str(cJSON_IsTrue(v) ? "true" : "false");
        } else {
            PROBLEM(rd, "%s: field 'sweep.vary.%s' is %s, expected a number or string", rd->file, v->string,
                    type_name(v));
            continue;
        }
        dv->key = dup_str(v->string);
        if (!dv->key || !dv->text) {
            free(dv->key), free(dv->text);
            return -1;
        }
        r->n_vary++;
    }
    return 0;
}

/* ---- Issue 17 fields: step-time spread, memory by phase, host RSS, the per-op profile, the
 * script's own snapshots (docs/results.md: "Memory by phase", "Per-op profile", "Repeats"). */

static void read_spread(reader *rd, const cJSON *root, dpplot_result *r) {
    double v, lo, hi;
    r->time_mid_ms = r->time_lo_ms = r->time_hi_ms = NAN;
    if (number_at(rd, root, "repeats.n", &v) == 1 && v > 1 && number_at(rd, root, "repeats.avg_ms.median", &v) == 1 &&
        number_at(rd, root, "repeats.avg_ms.min", &lo) == 1 && number_at(rd, root, "repeats.avg_ms.max", &hi) == 1) {
        double n = 0;
        (void)number_at(rd, root, "repeats.n", &n);
        r->n_runs = (int)n;
        r->time_mid_ms = v, r->time_lo_ms = lo, r->time_hi_ms = hi;
        return;
    }
    r->n_runs = 1;
    if (number_at(rd, root, "timing.median_ms", &v) == 1 && number_at(rd, root, "timing.min_ms", &lo) == 1 &&
        number_at(rd, root, "timing.max_ms", &hi) == 1)
        r->time_mid_ms = v, r->time_lo_ms = lo, r->time_hi_ms = hi;
}

static void read_phase_memory(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    for (int p = 0; p < DPPLOT_N_PHASES; p++) {
        r->phase_peak_bytes[p] = r->phase_end_bytes[p] = NAN;
        char path[128];
        const char *name = dpplot_phase_name((dpplot_phase)p);
        snprintf(path, sizeof path, "memory.phases.%s.peak_bytes", name);
        if (number_at(rd, root, path, &v) != 1) continue;
        r->phase_peak_bytes[p] = v;
        r->has_phase_memory = 1;
        snprintf(path, sizeof path, "memory.phases.%s.end_bytes", name);
        if (number_at(rd, root, path, &v) == 1) r->phase_end_bytes[p] = v;
        snprintf(path, sizeof path, "memory.phases.%s.live_at_peak", name);
        const cJSON *cats = at(root, path), *cat;
        if (cats && !cJSON_IsObject(cats))
            PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file, path, type_name(cats));
        if (cJSON_IsObject(cats)) cJSON_ArrayForEach(cat, cats) {
                if (cJSON_IsNumber(cat)) r->phase_components[p][component_of(cat->string)] += cat->valuedouble;
            }
    }
    r->host_peak_rss_bytes = NAN;
    if (number_at(rd, root, "memory.host_peak_rss_bytes", &v) == 1) r->host_peak_rss_bytes = v;
}

static double number_or_nan(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static int read_profile(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    r->profile_overhead_ms = NAN;
    const cJSON *list = at(root, "profile.ops");
    if (!list) return 0;
    if (!cJSON_IsArray(list)) {
        PROBLEM(rd, "%s: field 'profile.ops' is %s, expected an array", rd->file, type_name(list));
        return 0;
    }
    r->profile_iters = number_at(rd, root, "profile.iters", &v) == 1 && v >= 1 ? v : 1;
    r->profile_predicted = cJSON_IsTrue(at(root, "profile.predicted"));
    if (number_at(rd, root, "profile.overhead.ms_per_iter", &v) == 1) r->profile_overhead_ms = v;
    size_t n = (size_t)cJSON_GetArraySize(list);
    r->ops = calloc(n ? n : 1, sizeof *r->ops);
    if (!r->ops) return -1;
    const cJSON *it;
    int index = 0, reported = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(it, "category");
        double ms = number_or_nan(it, "ms"), bytes = number_or_nan(it, "bytes");
        if (!cJSON_IsString(op) || !isfinite(ms) || !isfinite(bytes)) {
            if (!reported)
                PROBLEM(rd, "%s: field 'profile.ops[%d]' needs a string 'op' and numbers 'ms', 'bytes'", rd->file,
                        index);
            reported = 1;
        } else {
            dpplot_op *o = &r->ops[r->n_ops];
            if (!(o->op = dup_str(op->valuestring))) return -1;
            o->category = dpplot_op_category_from_name(cJSON_IsString(cat) ? cat->valuestring : NULL);
            o->ms = ms, o->bytes = bytes;
            o->calls = number_or_nan(it, "calls"), o->flops = number_or_nan(it, "flops");
            o->flops_per_s = number_or_nan(it, "flops_per_s"), o->bytes_per_s = number_or_nan(it, "bytes_per_s");
            o->flops_fraction = number_or_nan(it, "flops_fraction");
            o->bandwidth_fraction = number_or_nan(it, "bandwidth_fraction");
            o->alloc_bytes = number_or_nan(it, "alloc_bytes");
            r->opcat_ms[o->category] += ms / r->profile_iters;
            r->opcat_bytes[o->category] += bytes / r->profile_iters;
            r->n_ops++;
        }
        index++;
    }
    return 0;
}

static int read_marks(const cJSON *root, dpplot_result *r) {
    const cJSON *snaps = at(root, "snapshots"), *s;
    if (!cJSON_IsArray(snaps)) return 0;
    size_t n = 0;
    cJSON_ArrayForEach(s, snaps) n += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "custom"));
    if (n == 0) return 0;
    r->marks = calloc(n, sizeof *r->marks);
    if (!r->marks) return -1;
    cJSON_ArrayForEach(s, snaps) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(s, "timestamp");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "custom")) || !cJSON_IsString(name) ||
            !cJSON_IsNumber(ts))
            continue;
        dpplot_mark *m = &r->marks[r->n_marks];
        if (!(m->name = dup_str(name->valuestring))) return -1;
        m->t_ms = ts->valuedouble * 1000.0;
        r->n_marks++;
    }
    return 0;
}

static int read_issue17(reader *rd, const cJSON *root, dpplot_result *r) {
    read_spread(rd, root, r);
    read_phase_memory(rd, root, r);
    if (read_profile(rd, root, r) != 0) return -1;
    return read_marks(root, r);
}

static void free_issue17(dpplot_result *r) {
    for (size_t i = 0; i < r->n_ops; i++) free(r->ops[i].op);
    free(r->ops);
    for (size_t i = 0; i < r->n_marks; i++) free(r->marks[i].name);
    free(r->marks);
}

static void result_free(dpplot_result *r) {
    free(r->file), free(r->experiment), free(r->method), free(r->label), free(r->message);
    free(r->t_ms), free(r->allocated_bytes), free(r->reserved_bytes), free(r->spans);
    free(r->sweep_name);
    for (size_t i = 0; i < r->n_vary; i++) free(r->vary[i].key), free(r->vary[i].text);
    free(r->vary);
    free(r->oom_category), free(r->oom_module), free(r->arch), free(r->dtype), free(r->device_name);
    free_issue17(r);
    memset(r, 0, sizeof *r);
}

/* 1 when root looks like a results document (any key the contract defines at the top). */
static int is_results_doc(const cJSON *root) {
    static const char *const keys[] = {"schema_version", "experiment",     "status",
                                       "memory",         "peak_memory_mb", "breakdown"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(root, keys[i])) return 1;
    return 0;
}

static void line_col(const char *text, const char *pos, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *p = text; p < pos && *p; p++) {
        if (*p == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

static int fill_result(reader *rd, const cJSON *root, dpplot_result *r) {
    int dpprof_file = at(root, "schema_version") != NULL;
    r->status = parse_status(rd, root, dpprof_file);
    r->reserved_peak_bytes = r->end_bytes = NAN;
    r->oom_requested_bytes = NAN;
    r->seq_len = r->batch = r->layers = r->hidden = NAN;
    double v;
    if (dpprof_file && number_at(rd, root, "schema_version", &v) == 1 && v != 1)
        PROBLEM(rd, "%s: field 'schema_version' is %g; this reader knows version 1", rd->file, v);

    const char *experiment = string_at(rd, root, "experiment");
    char stem[256];
    snprintf(stem, sizeof stem, "%s", rd->file);
    size_t sl = strlen(stem);
    if (sl > 5 && strcmp(stem + sl - 5, ".json") == 0) stem[sl - 5] = '\0';
    r->experiment = dup_str(experiment ? experiment : stem);
    const char *method = string_at(rd, root, "method");
    if (!method) method = string_at(rd, root, "config.method");
    if (!method && dpprof_file) PROBLEM(rd, "%s: field 'method' missing; using the experiment name", rd->file);
    if (!method) method = r->experiment ? r->experiment : "unknown";
    r->method = dup_str(method);
    const char *msg = string_at(rd, root, "message");
    r->message = dup_str(msg);
    const cJSON *pred = at(root, "predicted");
    r->predicted = cJSON_IsTrue(pred);
    if (!r->experiment || !r->method || (msg && !r->message)) return -1;

    read_memory(rd, root, r);
    read_timing(rd, root, r);
    if (read_timeline(rd, root, r) != 0) return -1;
    if (read_sweep(rd, root, r) != 0) return -1;
    if (read_issue17(rd, root, r) != 0) return -1;

    if (number_at(rd, root, "oom.requested_bytes", &v) == 1) r->oom_requested_bytes = v;
    const char *s;
    if ((s = string_at(rd, root, "oom.category")) && !(r->oom_category = dup_str(s))) return -1;
    if ((s = string_at(rd, root, "oom.module")) && !(r->oom_module = dup_str(s))) return -1;
    if (number_at(rd, root, "config.model.seq_len", &v) == 1) r->seq_len = v;
    if (number_at(rd, root, "config.model.batch", &v) == 1) r->batch = v;
    if (number_at(rd, root, "config.model.layers", &v) == 1) r->layers = v;
    if (number_at(rd, root, "config.model.hidden", &v) == 1) r->hidden = v;
    if ((s = string_at(rd, root, "config.model.arch")) && !(r->arch = dup_str(s))) return -1;
    if ((s = string_at(rd, root, "config.model.dtype")) && !(r->dtype = dup_str(s))) return -1;
    if ((s = string_at(rd, root, "environment.device_name")) && !(r->device_name = dup_str(s))) return -1;
    return 0;
}

int dpplot_results_add_json(dpplot_results *rs, const char *file, const char *json, dpplot_strlist *problems) {
    reader rd = {file, problems};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 0);
    if (!root) {
        const char *err = cJSON_GetErrorPtr();
        int line, col;
        line_col(json, err ? err : json, &line, &col);
        PROBLEM(&rd, "%s: invalid JSON at line %d, column %d", file, line, col);
        return -1;
    }
    if (!cJSON_IsObject(root)) {
        PROBLEM(&rd, "%s: top level is %s, expected an object", file, type_name(root));
        cJSON_Delete(root);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "traceEvents") || !is_results_doc(root)) {
        cJSON_Delete(root); /* a Chrome trace or some other JSON kept beside the results */
        return 1;
    }
    dpplot_result *items = realloc(rs->items, (rs->n + 1) * sizeof *items);
    if (!items) {
        cJSON_Delete(root);
        return -1;
    }
    rs->items = items;
    dpplot_result *r = &rs->items[rs->n];
    memset(r, 0, sizeof *r);
    r->file = dup_str(file);
    if (!r->file || fill_result(&rd, root, r) != 0) {
        PROBLEM(&rd, "%s: out of memory while reading", file);
        result_free(r);
        cJSON_Delete(root);
        return -1;
    }
    rs->n++;
    cJSON_Delete(root);
    return 0;
}

static int compare_vary(const dpplot_result *a, const dpplot_result *b) {
    for (size_t i = 0; i < a->n_vary; i++) {
        const dpplot_vary *va = &a->vary[i], *vb = dpplot_result_vary(b, va->key);
        if (!vb) continue;
        if (va->is_number && vb->is_number) {
            if (va->number != vb->number) return va->number < vb->number ? -1 : 1;
        } else {
            int c = strcmp(va->text, vb->text);
            if (c) return c;
        }
    }
    return 0;
}

static int compare_results(const void *pa, const void *pb) {
    const dpplot_result *a = pa, *b = pb;
    int ra = dpplot_method_rank(a->method), rb = dpplot_method_rank(b->method);
    if (ra != rb) return ra < rb ? -1 : 1;
    int c = strcmp(a->method, b->method);
    if (c) return c;
    if (!a->sweep_name != !b->sweep_name) return a->sweep_name ? 1 : -1;
    if (a->sweep_name && (c = strcmp(a->sweep_name, b->sweep_name))) return c;
    if ((c = compare_vary(a, b))) return c;
    if ((c = strcmp(a->experiment, b->experiment))) return c;
    return strcmp(a->file, b->file);
}

void dpplot_results_finish(dpplot_results *rs) {
    if (rs->n > 1) qsort(rs->items, rs->n, sizeof *rs->items, compare_results);
    int methods_unique = 1;
    for (size_t i = 1; i < rs->n; i++)
        if (strcmp(rs->items[i].method, rs->items[i - 1].method) == 0) methods_unique = 0;
    for (size_t i = 0; i < rs->n; i++) {
        dpplot_result *r = &rs->items[i];
        free(r->label);
        r->label = dup_str(methods_unique ? r->method : r->experiment);
    }
}

const dpplot_vary *dpplot_result_vary(const dpplot_result *r, const char *key) {
    for (size_t i = 0; i < r->n_vary; i++)
        if (strcmp(r->vary[i].key, key) == 0) return &r->vary[i];
    return NULL;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int dpplot_results_load(const char *dir, dpplot_results *out, dpplot_strlist *problems) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d) {
        (void)dpplot_strlist_addf(problems, "%s: cannot open results directory: %s", dir, strerror(errno));
        return -1;
    }
    dpplot_strlist names = {0};
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0 && e->d_name[0] != '.')
            if (dpplot_strlist_addf(&names, "%s", e->d_name) != 0) rc = -1;
    }
    closedir(d);
    if (names.n > 1) qsort(names.items, names.n, sizeof *names.items, by_name);
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        size_t plen = strlen(dir) + strlen(names.items[i]) + 2;
        char *path = malloc(plen);
        if (!path) {
            rc = -1;
            break;
        }
        snprintf(path, plen, "%s/%s", dir, names.items[i]);
        char *text, why[1024];
        /* only regular files, never blocking on a FIFO, at most DPFILE_MAX_READ bytes */
        if (dpfile_read(path, DPFILE_MAX_READ, &text, NULL, why, sizeof why) != 0) {
            (void)dpplot_strlist_addf(problems, "%s", why);
        } else {
            (void)dpplot_results_add_json(out, names.items[i], text, problems);
            free(text);
        }
        free(path);
    }
    dpplot_strlist_release(&names);
    dpplot_results_finish(out);
    if (rc != 0) (void)dpplot_strlist_addf(problems, "%s: out of memory while listing", dir);
    return rc;
}

void dpplot_results_release(dpplot_results *rs) {
    for (size_t i = 0; i < rs->n; i++) result_free(&rs->items[i]);
    free(rs->items);
    rs->items = NULL, rs->n = 0;
}
