/* results_load.c: reading a results directory with cJSON into dpplot_results.
 *
 * Every field is read by its id in the result schema (common/results_schema.h, the description
 * the writer's validator walks too), never by a name of this file's own; each read checks that
 * the schema types the field as the reader takes it, and a disagreement is reported as a problem
 * naming both (tests/plots/test_schema.c fails on one). */
#define _POSIX_C_SOURCE 200809L
#include "dpplot_results.h"
#include "results_schema.h"
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
    int unknown_category_reported; /* a memory category not in the list was reported */
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

/* How the reader takes a field. */
typedef enum { AS_NUMBER, AS_STRING, AS_BOOLEAN, AS_OBJECT, AS_ARRAY, AS_SCALAR } read_as;

/* Checks that the schema types field id as the reader takes it; records a problem otherwise. */
static void expect(reader *rd, int id, read_as as) {
    static const char *const names[] = {"a number", "a string", "a boolean", "an object", "an array", "a scalar"};
    dpr_type t = dpr_field_of(id)->type;
    int ok = as == AS_NUMBER    ? t == DPR_T_NUMBER || t == DPR_T_INTEGER
             : as == AS_STRING  ? t == DPR_T_STRING
             : as == AS_BOOLEAN ? t == DPR_T_BOOLEAN
             : as == AS_OBJECT  ? t == DPR_T_OBJECT
             : as == AS_ARRAY   ? t == DPR_T_ARRAY
                                : t == DPR_T_SCALAR;
    if (!ok)
        PROBLEM(rd, "%s: plots reads '%s' as %s, but common/results_schema.h types it %s (reader and schema disagree)",
                rd->file, dpr_field_of(id)->path, names[as], dpr_type_name(t));
}

/* Field id's path with its placeholder ("{category}", "{phase}", "*") replaced by key (when
 * non-NULL), into buf. */
static const char *path_of(int id, const char *key, char *buf, size_t n) {
    const char *p = dpr_field_of(id)->path, *open = key ? strpbrk(p, "{*") : NULL;
    if (!open) {
        snprintf(buf, n, "%s", p);
        return buf;
    }
    const char *close = *open == '*' ? open + 1 : strchr(open, '}');
    snprintf(buf, n, "%.*s%s%s", (int)(open - p), p, key, close ? close + (*open != '*') : "");
    return buf;
}

/* The last key of field id's path ("module" of "memory.modules[].module"). */
static const char *key_of(int id) {
    const char *p = dpr_field_of(id)->path, *dot = strrchr(p, '.');
    return dot ? dot + 1 : p;
}

/* Item of field id (its placeholder replaced by key) below root, taken as `as`; NULL when absent. */
static const cJSON *field_at(reader *rd, const cJSON *root, int id, const char *key, read_as as) {
    char path[256];
    expect(rd, id, as);
    return at(root, path_of(id, key, path, sizeof path));
}

/* Member of an array element (or another object) `item`: field id's last key, taken as `as`. */
static const cJSON *member_of(reader *rd, const cJSON *item, int id, read_as as) {
    expect(rd, id, as);
    return cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, key_of(id)) : NULL;
}

/* Number of field id (key as in field_at): 1 when read into *out, 0 when absent (or null), -1
 * when of another type (a problem is recorded naming the field). */
static int number_at(reader *rd, const cJSON *root, int id, const char *key, double *out) {
    char path[256];
    const cJSON *it = field_at(rd, root, id, key, AS_NUMBER);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsNumber(it)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected a number", rd->file, path_of(id, key, path, sizeof path),
                type_name(it));
        return -1;
    }
    /* what the validator (results.lua) refuses, refused here too: a negative NONNEG field, an
     * INTEGER that is not one an int64 holds (1e308) */
    const dpr_field *f = dpr_field_of(id);
    double v = it->valuedouble;
    if ((f->flags & DPR_NONNEG) && v < 0) {
        PROBLEM(rd, "%s: field '%s' is %g, expected a number >= 0", rd->file, path_of(id, key, path, sizeof path), v);
        return -1;
    }
    if (f->type == DPR_T_INTEGER && (v != floor(v) || !(fabs(v) < 9223372036854775808.0))) {
        PROBLEM(rd, "%s: field '%s' is %g, expected an integer", rd->file, path_of(id, key, path, sizeof path), v);
        return -1;
    }
    *out = v;
    return 1;
}

/* String of field id, borrowed from the tree: NULL when absent or null; a problem when of another
 * type. */
static const char *string_at(reader *rd, const cJSON *root, int id) {
    const cJSON *it = field_at(rd, root, id, NULL, AS_STRING);
    if (!it || cJSON_IsNull(it)) return NULL;
    if (!cJSON_IsString(it)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected a string", rd->file, dpr_field_of(id)->path, type_name(it));
        return NULL;
    }
    return it->valuestring;
}

const char *dpplot_status_name(dpplot_status s) {
#define DPPLOT_STATUS_NAME(id, name) name,
    static const char *const names[] = {DPR_STATUSES(DPPLOT_STATUS_NAME) "unknown"};
#undef DPPLOT_STATUS_NAME
    return (unsigned)s <= DPPLOT_STATUS_UNKNOWN ? names[s] : "unknown";
}

static dpplot_status parse_status(reader *rd, const cJSON *root, int dpprof_file) {
    const char *s = string_at(rd, root, DPR_STATUS);
    if (!s) {
        /* Files from before dpprof carry no status: they only exist when the run finished. */
        if (dpprof_file && !field_at(rd, root, DPR_STATUS, NULL, AS_STRING))
            PROBLEM(rd, "%s: field '%s' missing; assuming ok", rd->file, dpr_field_of(DPR_STATUS)->path);
        return DPPLOT_STATUS_OK;
    }
    for (int i = 0; i < DPPLOT_STATUS_UNKNOWN; i++)
        if (strcmp(s, dpplot_status_name((dpplot_status)i)) == 0) return (dpplot_status)i;
    PROBLEM(rd, "%s: field 'status' has unknown value '%s'", rd->file, s);
    return DPPLOT_STATUS_UNKNOWN;
}

/* The memory categories (common/memory_categories.h): name, component, legacy breakdown field. */
static const struct {
    const char *name;
    dpplot_component component;
    int legacy; /* a DPR_BREAKDOWN_..._MB id, or DPR_NO_LEGACY */
} categories[] = {
#define DPPLOT_CATEGORY(id, name, legacy, component) {name, DPPLOT_COMP_##component, legacy},
    DPR_MEMORY_CATEGORIES(DPPLOT_CATEGORY)
#undef DPPLOT_CATEGORY
};
#define N_CATEGORIES (sizeof categories / sizeof categories[0])

/* Index of a category name in categories, or -1 when it is none of the engine's. */
static int category_index(const char *category) {
    for (size_t i = 0; i < N_CATEGORIES; i++)
        if (strcmp(category, categories[i].name) == 0) return (int)i;
    return -1;
}

/* The category names joined by ", ", for problems that list the valid ones. */
static const char *category_choices(void) {
#define DPPLOT_CATEGORY_ITEM(id, name, legacy, component) ", " name
    static const char list[] = DPR_MEMORY_CATEGORIES(DPPLOT_CATEGORY_ITEM);
#undef DPPLOT_CATEGORY_ITEM
    return list + 2;
}

/* Category name (a key of the object at path `in`) -> component it adds to. A name that is no
 * category adds to Other and is reported, once per file: a result of another engine version, or
 * a category this reader was built without, is not charted as Other in silence. */
static dpplot_component component_of(reader *rd, const char *category, const char *in) {
    int i = category_index(category);
    if (i >= 0) return categories[i].component;
    if (!rd->unknown_category_reported) {
        PROBLEM(rd, "%s: field '%s.%s' is no memory category (valid: %s); its bytes are charted as Other", rd->file, in,
                category, category_choices());
        rd->unknown_category_reported = 1;
    }
    return DPPLOT_COMP_OTHER;
}

/* The legacy breakdown's fields, in dpplot_legacy's order. */
static const int legacy_fields[DPPLOT_N_LEGACY] = {DPR_BREAKDOWN_MODEL_PARAMETERS_MB, DPR_BREAKDOWN_OPTIMIZER_STATES_MB,
                                                   DPR_BREAKDOWN_GRADIENTS_MB,        DPR_BREAKDOWN_ACTIVATION_HOOKS_MB,
                                                   DPR_BREAKDOWN_NORM_SAMPLES_MB,     DPR_BREAKDOWN_TEMP_MATRICES_MB,
                                                   DPR_BREAKDOWN_TOTAL_ALLOCATED_MB,  DPR_BREAKDOWN_PEAK_ALLOCATED_MB};

/* The legacy field (index into legacy_fields) a component's bytes add to: that of its
 * categories (common/memory_categories.h gives all categories of a component the same one;
 * tests/plots/test_categories.c holds it), or -1 for none. */
static int legacy_of_component(dpplot_component c) {
    for (size_t i = 0; i < N_CATEGORIES; i++)
        if (categories[i].component == c)
            for (int k = 0; k < DPPLOT_N_LEGACY; k++)
                if (legacy_fields[k] == categories[i].legacy) return k;
    return -1;
}

static void read_memory(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    int got = number_at(rd, root, DPR_MEMORY_PEAK_BYTES, NULL, &v);
    if (got == 1) {
        r->peak_bytes = v, r->has_peak = 1;
    } else if (number_at(rd, root, DPR_PEAK_MEMORY_MB, NULL, &v) == 1) {
        r->peak_bytes = v * MIB, r->has_peak = 1;
    } else if (got == 0 && r->status == DPPLOT_STATUS_OK && !field_at(rd, root, DPR_PEAK_MEMORY_MB, NULL, AS_NUMBER)) {
        PROBLEM(rd, "%s: field '%s' missing (and no '%s')", rd->file, dpr_field_of(DPR_MEMORY_PEAK_BYTES)->path,
                dpr_field_of(DPR_PEAK_MEMORY_MB)->path);
    }
    if (number_at(rd, root, DPR_MEMORY_RESERVED_PEAK_BYTES, NULL, &v) == 1) r->reserved_peak_bytes = v;
    if (number_at(rd, root, DPR_MEMORY_END_BYTES, NULL, &v) == 1) r->end_bytes = v;

    /* Components: exact categories first, the legacy breakdown second. */
    const cJSON *cats = field_at(rd, root, DPR_MEMORY_CATEGORIES, NULL, AS_OBJECT);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) r->component_bytes[c] = 0.0;
    if (cats && cJSON_IsObject(cats)) {
        const cJSON *cat;
        int any = 0;
        cJSON_ArrayForEach(cat, cats) {
            int id = DPR_MEMORY_CATEGORY_LIVE_AT_PEAK_BYTES;
            if (number_at(rd, root, id, cat->string, &v) == 1) {
                r->component_bytes[component_of(rd, cat->string, dpr_field_of(DPR_MEMORY_CATEGORIES)->path)] += v;
                any = 1;
            } else if (!field_at(rd, root, id, cat->string, AS_NUMBER) && cJSON_IsObject(cat)) {
                char path[256];
                PROBLEM(rd, "%s: field '%s' missing", rd->file, path_of(id, cat->string, path, sizeof path));
            }
        }
        r->has_components = r->components_exact = any;
    } else if (cats) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file, dpr_field_of(DPR_MEMORY_CATEGORIES)->path,
                type_name(cats));
    }
    const cJSON *bd = field_at(rd, root, DPR_BREAKDOWN, NULL, AS_OBJECT);
    for (int k = 0; k < DPPLOT_N_LEGACY; k++) r->legacy_mb[k] = NAN;
    if (bd && !cJSON_IsObject(bd))
        PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file, dpr_field_of(DPR_BREAKDOWN)->path,
                type_name(bd));
    if (bd && cJSON_IsObject(bd)) {
        for (int k = 0; k < DPPLOT_N_LEGACY; k++)
            if (number_at(rd, root, legacy_fields[k], NULL, &v) == 1) r->legacy_mb[k] = v;
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
    /* Legacy values absent from the file are derived as docs/results.md defines them: each the
     * sum of the components whose categories add to it. */
    if (r->has_components) {
        double derived[DPPLOT_N_LEGACY] = {0};
        int derivable[DPPLOT_N_LEGACY] = {0};
        for (int c = 0; c < DPPLOT_N_COMPONENTS; c++) {
            int k = legacy_of_component((dpplot_component)c);
            if (k >= 0) derived[k] += r->component_bytes[c], derivable[k] = 1;
        }
        for (int k = 0; k < DPPLOT_N_LEGACY; k++)
            if (derivable[k] && !isfinite(r->legacy_mb[k])) r->legacy_mb[k] = derived[k] / MIB;
    }
    if (!isfinite(r->legacy_mb[DPPLOT_LEGACY_TOTAL_ALLOCATED]) && isfinite(r->end_bytes))
        r->legacy_mb[DPPLOT_LEGACY_TOTAL_ALLOCATED] = r->end_bytes / MIB;
    if (!isfinite(r->legacy_mb[DPPLOT_LEGACY_PEAK_ALLOCATED]) && r->has_peak)
        r->legacy_mb[DPPLOT_LEGACY_PEAK_ALLOCATED] = r->peak_bytes / MIB;

    /* Modules, grouped. */
    const cJSON *mods = field_at(rd, root, DPR_MEMORY_MODULES, NULL, AS_ARRAY);
    if (mods && !cJSON_IsArray(mods)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an array", rd->file, dpr_field_of(DPR_MEMORY_MODULES)->path,
                type_name(mods));
    } else if (mods) {
        int index = 0, reported = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, mods) {
            const cJSON *name = member_of(rd, m, DPR_MEMORY_MODULE_MODULE, AS_STRING);
            const cJSON *live = member_of(rd, m, DPR_MEMORY_MODULE_LIVE_AT_PEAK_BYTES, AS_NUMBER);
            if (!cJSON_IsString(name) || !cJSON_IsNumber(live)) {
                if (!reported)
                    PROBLEM(rd, "%s: field '%s[%d]' needs a string '%s' and a number '%s'", rd->file,
                            dpr_field_of(DPR_MEMORY_MODULES)->path, index, key_of(DPR_MEMORY_MODULE_MODULE),
                            key_of(DPR_MEMORY_MODULE_LIVE_AT_PEAK_BYTES));
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
    int got = number_at(rd, root, DPR_TIMING_AVG_MS, NULL, &v);
    if (got == 1) {
        r->avg_ms = v, r->has_time = 1;
    } else if (number_at(rd, root, DPR_AVG_TIME_MS, NULL, &v) == 1) {
        r->avg_ms = v, r->has_time = 1;
    } else if (got == 0 && r->status == DPPLOT_STATUS_OK && !field_at(rd, root, DPR_AVG_TIME_MS, NULL, AS_NUMBER)) {
        PROBLEM(rd, "%s: field '%s' missing (and no '%s')", rd->file, dpr_field_of(DPR_TIMING_AVG_MS)->path,
                dpr_field_of(DPR_AVG_TIME_MS)->path);
    }
    for (int p = 0; p < DPPLOT_N_PHASES; p++) {
        r->phase_ms[p] = NAN;
        if (number_at(rd, root, DPR_TIMING_PHASE_MS, dpplot_phase_name((dpplot_phase)p), &v) == 1) r->phase_ms[p] = v;
    }
}

/* Numbers of a JSON array into a new array of n doubles (NaN for non-numbers); item is the
 * schema's id of the array's elements ("memory.timeline.t_ms[]"). */
static double *numbers(reader *rd, const cJSON *arr, int item, size_t n) {
    expect(rd, item, AS_NUMBER);
    const char *path = dpr_field_of(item)->path;
    int len = (int)strlen(path) - 2; /* without "[]" */
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
                PROBLEM(rd, "%s: field '%.*s[%zu]' is %s, expected a number", rd->file, len, path, i, type_name(it));
            reported = 1;
        }
        i++;
    }
    return out;
}

static int read_timeline(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *tl = field_at(rd, root, DPR_MEMORY_TIMELINE, NULL, AS_OBJECT);
    if (tl) {
        const cJSON *t = member_of(rd, tl, DPR_MEMORY_TIMELINE_T_MS, AS_ARRAY);
        const cJSON *a = member_of(rd, tl, DPR_MEMORY_TIMELINE_ALLOCATED_BYTES, AS_ARRAY);
        const cJSON *res = member_of(rd, tl, DPR_MEMORY_TIMELINE_RESERVED_BYTES, AS_ARRAY);
        const char *t_key = key_of(DPR_MEMORY_TIMELINE_T_MS);
        if (!cJSON_IsArray(t) || !cJSON_IsArray(a)) {
            PROBLEM(rd, "%s: field '%s' needs arrays '%s' and '%s'", rd->file, dpr_field_of(DPR_MEMORY_TIMELINE)->path,
                    t_key, key_of(DPR_MEMORY_TIMELINE_ALLOCATED_BYTES));
            return 0;
        }
        size_t nt = (size_t)cJSON_GetArraySize(t), na = (size_t)cJSON_GetArraySize(a);
        size_t n = nt < na ? nt : na;
        if (nt != na)
            PROBLEM(rd, "%s: field '%s' has %zu entries but '%s' has %zu", rd->file,
                    dpr_field_of(DPR_MEMORY_TIMELINE_ALLOCATED_BYTES)->path, na, t_key, nt);
        if (res && cJSON_IsArray(res) && (size_t)cJSON_GetArraySize(res) != nt)
            PROBLEM(rd, "%s: field '%s' has %d entries but '%s' has %zu", rd->file,
                    dpr_field_of(DPR_MEMORY_TIMELINE_RESERVED_BYTES)->path, cJSON_GetArraySize(res), t_key, nt);
        r->t_ms = numbers(rd, t, DPR_MEMORY_TIMELINE_T_MS_ITEM, n);
        r->allocated_bytes = numbers(rd, a, DPR_MEMORY_TIMELINE_ALLOCATED_BYTES_ITEM, n);
        r->reserved_bytes = res && cJSON_IsArray(res) ? numbers(rd, res, DPR_MEMORY_TIMELINE_RESERVED_BYTES_ITEM, n)
                                                      : numbers(rd, a, DPR_MEMORY_TIMELINE_ALLOCATED_BYTES_ITEM, n);
        if (!r->t_ms || !r->allocated_bytes || !r->reserved_bytes) return -1;
        /* reserved shorter than t_ms: pad with NaN (gap) */
        if (res && cJSON_IsArray(res))
            for (size_t i = (size_t)cJSON_GetArraySize(res); i < n; i++) r->reserved_bytes[i] = NAN;
        r->n_timeline = n;
    } else {
        const cJSON *snaps = field_at(rd, root, DPR_SNAPSHOTS, NULL, AS_ARRAY);
        if (!snaps) return 0;
        if (!cJSON_IsArray(snaps)) {
            PROBLEM(rd, "%s: field '%s' is %s, expected an array", rd->file, dpr_field_of(DPR_SNAPSHOTS)->path,
                    type_name(snaps));
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
            const cJSON *ts = member_of(rd, s, DPR_SNAPSHOT_TIMESTAMP, AS_NUMBER);
            const cJSON *al = member_of(rd, s, DPR_SNAPSHOT_ALLOCATED_MB, AS_NUMBER);
            const cJSON *re = member_of(rd, s, DPR_SNAPSHOT_RESERVED_MB, AS_NUMBER);
            if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(al)) {
                if (!reported)
                    PROBLEM(rd, "%s: field '%s[%zu]' needs numbers '%s' and '%s'", rd->file,
                            dpr_field_of(DPR_SNAPSHOTS)->path, i, key_of(DPR_SNAPSHOT_TIMESTAMP),
                            key_of(DPR_SNAPSHOT_ALLOCATED_MB));
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
    const cJSON *spans = field_at(rd, root, DPR_TIMING_SPANS, NULL, AS_ARRAY);
    if (spans && cJSON_IsArray(spans)) {
        size_t n = (size_t)cJSON_GetArraySize(spans);
        r->spans = malloc((n ? n : 1) * sizeof *r->spans);
        if (!r->spans) return -1;
        const cJSON *s;
        int index = 0, reported = 0;
        cJSON_ArrayForEach(s, spans) {
            const cJSON *ph = member_of(rd, s, DPR_TIMING_SPAN_PHASE, AS_STRING);
            const cJSON *st = member_of(rd, s, DPR_TIMING_SPAN_START_MS, AS_NUMBER);
            const cJSON *en = member_of(rd, s, DPR_TIMING_SPAN_END_MS, AS_NUMBER);
            const cJSON *it = member_of(rd, s, DPR_TIMING_SPAN_ITER, AS_NUMBER);
            int phase = cJSON_IsString(ph) ? dpplot_phase_from_name(ph->valuestring) : -1;
            if (phase < 0 || !cJSON_IsNumber(st) || !cJSON_IsNumber(en)) {
                if (!reported)
                    PROBLEM(rd, "%s: field '%s[%d]' needs a known '%s' and numbers '%s', '%s'", rd->file,
                            dpr_field_of(DPR_TIMING_SPANS)->path, index, key_of(DPR_TIMING_SPAN_PHASE),
                            key_of(DPR_TIMING_SPAN_START_MS), key_of(DPR_TIMING_SPAN_END_MS));
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
        PROBLEM(rd, "%s: field '%s' is %s, expected an array", rd->file, dpr_field_of(DPR_TIMING_SPANS)->path,
                type_name(spans));
    }
    return 0;
}

static int read_sweep(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *sw = field_at(rd, root, DPR_SWEEP, NULL, AS_OBJECT);
    if (!sw || cJSON_IsNull(sw)) return 0;
    if (!cJSON_IsObject(sw)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file, dpr_field_of(DPR_SWEEP)->path, type_name(sw));
        return 0;
    }
    const char *name = string_at(rd, root, DPR_SWEEP_NAME);
    r->sweep_name = dup_str(name ? name : "sweep");
    if (!r->sweep_name) return -1;
    const cJSON *vary = field_at(rd, root, DPR_SWEEP_VARY, NULL, AS_OBJECT);
    if (!cJSON_IsObject(vary)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file, dpr_field_of(DPR_SWEEP_VARY)->path,
                vary ? type_name(vary) : "missing");
        return 0;
    }
    expect(rd, DPR_SWEEP_VARY_VALUE, AS_SCALAR);
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
            char path[256];
            PROBLEM(rd, "%s: field '%s' is %s, expected a number or string", rd->file,
                    path_of(DPR_SWEEP_VARY_VALUE, v->string, path, sizeof path), type_name(v));
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

/* ---- The step-time spread, memory by phase, host RSS, the per-op profile and the script's own
 * snapshots (docs/results.md: "Memory by phase", "Per-op profile", "Repeats"). */

static void read_spread(reader *rd, const cJSON *root, dpplot_result *r) {
    double n, v, lo, hi;
    r->time_mid_ms = r->time_lo_ms = r->time_hi_ms = NAN;
    if (number_at(rd, root, DPR_REPEATS_N, NULL, &n) == 1 && n > 1 &&
        number_at(rd, root, DPR_REPEATS_AVG_MS_MEDIAN, NULL, &v) == 1 &&
        number_at(rd, root, DPR_REPEATS_AVG_MS_MIN, NULL, &lo) == 1 &&
        number_at(rd, root, DPR_REPEATS_AVG_MS_MAX, NULL, &hi) == 1) {
        r->n_runs = (int)n;
        r->time_mid_ms = v, r->time_lo_ms = lo, r->time_hi_ms = hi;
        return;
    }
    r->n_runs = 1;
    if (number_at(rd, root, DPR_TIMING_MEDIAN_MS, NULL, &v) == 1 &&
        number_at(rd, root, DPR_TIMING_MIN_MS, NULL, &lo) == 1 &&
        number_at(rd, root, DPR_TIMING_MAX_MS, NULL, &hi) == 1)
        r->time_mid_ms = v, r->time_lo_ms = lo, r->time_hi_ms = hi;
}

/* Number of member id of object item (its last key), NaN when absent or not a number. */
static double number_member(reader *rd, const cJSON *item, int id) {
    const cJSON *it = member_of(rd, item, id, AS_NUMBER);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static void read_phase_memory(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    for (int p = 0; p < DPPLOT_N_PHASES; p++) {
        r->phase_peak_bytes[p] = r->phase_end_bytes[p] = NAN;
        const char *name = dpplot_phase_name((dpplot_phase)p);
        if (number_at(rd, root, DPR_MEMORY_PHASE_PEAK_BYTES, name, &v) != 1) continue;
        r->phase_peak_bytes[p] = v;
        r->has_phase_memory = 1;
        if (number_at(rd, root, DPR_MEMORY_PHASE_END_BYTES, name, &v) == 1) r->phase_end_bytes[p] = v;
        const cJSON *cats = field_at(rd, root, DPR_MEMORY_PHASE_LIVE_AT_PEAK, name, AS_OBJECT), *cat;
        if (cats && !cJSON_IsObject(cats)) {
            char path[256];
            PROBLEM(rd, "%s: field '%s' is %s, expected an object", rd->file,
                    path_of(DPR_MEMORY_PHASE_LIVE_AT_PEAK, name, path, sizeof path), type_name(cats));
        }
        expect(rd, DPR_MEMORY_PHASE_LIVE_AT_PEAK_CATEGORY, AS_NUMBER);
        char in[256];
        path_of(DPR_MEMORY_PHASE_LIVE_AT_PEAK, name, in, sizeof in);
        if (cJSON_IsObject(cats)) cJSON_ArrayForEach(cat, cats) {
                if (cJSON_IsNumber(cat)) r->phase_components[p][component_of(rd, cat->string, in)] += cat->valuedouble;
            }
    }
    r->host_peak_rss_bytes = NAN;
    if (number_at(rd, root, DPR_MEMORY_HOST_PEAK_RSS_BYTES, NULL, &v) == 1) r->host_peak_rss_bytes = v;
}

static int read_profile(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    r->profile_overhead_ms = NAN;
    const cJSON *list = field_at(rd, root, DPR_PROFILE_OPS, NULL, AS_ARRAY);
    if (!list) return 0;
    if (!cJSON_IsArray(list)) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an array", rd->file, dpr_field_of(DPR_PROFILE_OPS)->path,
                type_name(list));
        return 0;
    }
    r->profile_iters = number_at(rd, root, DPR_PROFILE_ITERS, NULL, &v) == 1 && v >= 1 ? v : 1;
    r->profile_predicted = cJSON_IsTrue(field_at(rd, root, DPR_PROFILE_PREDICTED, NULL, AS_BOOLEAN));
    if (number_at(rd, root, DPR_PROFILE_OVERHEAD_MS_PER_ITER, NULL, &v) == 1) r->profile_overhead_ms = v;
    size_t n = (size_t)cJSON_GetArraySize(list);
    r->ops = calloc(n ? n : 1, sizeof *r->ops);
    if (!r->ops) return -1;
    const cJSON *it;
    int index = 0, reported = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON *op = member_of(rd, it, DPR_PROFILE_OP_OP, AS_STRING);
        const cJSON *cat = member_of(rd, it, DPR_PROFILE_OP_CATEGORY, AS_STRING);
        double ms = number_member(rd, it, DPR_PROFILE_OP_MS), bytes = number_member(rd, it, DPR_PROFILE_OP_BYTES);
        if (!cJSON_IsString(op) || !isfinite(ms) || !isfinite(bytes)) {
            if (!reported)
                PROBLEM(rd, "%s: field '%s[%d]' needs a string '%s' and numbers '%s', '%s'", rd->file,
                        dpr_field_of(DPR_PROFILE_OPS)->path, index, key_of(DPR_PROFILE_OP_OP),
                        key_of(DPR_PROFILE_OP_MS), key_of(DPR_PROFILE_OP_BYTES));
            reported = 1;
        } else {
            dpplot_op *o = &r->ops[r->n_ops];
            if (!(o->op = dup_str(op->valuestring))) return -1;
            o->category = dpplot_op_category_from_name(cJSON_IsString(cat) ? cat->valuestring : NULL);
            o->ms = ms, o->bytes = bytes;
            o->calls = number_member(rd, it, DPR_PROFILE_OP_CALLS);
            o->flops = number_member(rd, it, DPR_PROFILE_OP_FLOPS);
            o->flops_per_s = number_member(rd, it, DPR_PROFILE_OP_FLOPS_PER_S);
            o->bytes_per_s = number_member(rd, it, DPR_PROFILE_OP_BYTES_PER_S);
            o->flops_fraction = number_member(rd, it, DPR_PROFILE_OP_FLOPS_FRACTION);
            o->bandwidth_fraction = number_member(rd, it, DPR_PROFILE_OP_BANDWIDTH_FRACTION);
            o->alloc_bytes = number_member(rd, it, DPR_PROFILE_OP_ALLOC_BYTES);
            r->opcat_ms[o->category] += ms / r->profile_iters;
            r->opcat_bytes[o->category] += bytes / r->profile_iters;
            r->n_ops++;
        }
        index++;
    }
    return 0;
}

/* The snapshots a script took itself (snapshots[].custom), as marks on the timelines. */
static int read_marks(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *snaps = field_at(rd, root, DPR_SNAPSHOTS, NULL, AS_ARRAY), *s;
    if (!cJSON_IsArray(snaps)) return 0;
    size_t n = 0;
    cJSON_ArrayForEach(s, snaps) n += cJSON_IsTrue(member_of(rd, s, DPR_SNAPSHOT_CUSTOM, AS_BOOLEAN));
    if (n == 0) return 0;
    r->marks = calloc(n, sizeof *r->marks);
    if (!r->marks) return -1;
    cJSON_ArrayForEach(s, snaps) {
        const cJSON *name = member_of(rd, s, DPR_SNAPSHOT_NAME, AS_STRING);
        const cJSON *ts = member_of(rd, s, DPR_SNAPSHOT_TIMESTAMP, AS_NUMBER);
        if (!cJSON_IsTrue(member_of(rd, s, DPR_SNAPSHOT_CUSTOM, AS_BOOLEAN)) || !cJSON_IsString(name) ||
            !cJSON_IsNumber(ts))
            continue;
        dpplot_mark *m = &r->marks[r->n_marks];
        if (!(m->name = dup_str(name->valuestring))) return -1;
        m->t_ms = ts->valuedouble * 1000.0;
        r->n_marks++;
    }
    return 0;
}

/* The plan budget (predicted results): plan.fits, the card, the budget, the device model, and the
 * reserved peak as plan.lua defines it; also the gradients' own peak (summary.txt's note on them). */
static int read_plan(reader *rd, const cJSON *root, dpplot_result *r) {
    double v;
    r->fit = -1;
    r->card_bytes = r->budget_bytes = NAN;
    r->gradients_peak_bytes = NAN;
    if (number_at(rd, root, DPR_MEMORY_CATEGORY_PEAK_BYTES, "gradients", &v) == 1) r->gradients_peak_bytes = v;
    const cJSON *fits = field_at(rd, root, DPR_PLAN_FITS, NULL, AS_BOOLEAN);
    if (cJSON_IsBool(fits)) r->fit = cJSON_IsTrue(fits);
    if (number_at(rd, root, DPR_PLAN_MEMORY_BYTES, NULL, &v) == 1) r->card_bytes = v;
    if (number_at(rd, root, DPR_PLAN_BUDGET_BYTES, NULL, &v) == 1) r->budget_bytes = v;
    if (number_at(rd, root, DPR_PLAN_PREDICTED_RESERVED_BYTES, NULL, &v) == 1) r->reserved_peak_bytes = v;
    const char *s = string_at(rd, root, DPR_PLAN_DEVICE_MODEL);
    if (s && !(r->device_model = dup_str(s))) return -1;
    r->advice = -1;
    const cJSON *fits_with = field_at(rd, root, DPR_PLAN_CHECKPOINT_ADVICE_FITS, NULL, AS_BOOLEAN);
    const cJSON *ck = field_at(rd, root, DPR_PLAN_CHECKPOINT_ADVICE_CHECKPOINT, NULL, AS_SCALAR);
    if (cJSON_IsBool(fits_with) &&
        number_at(rd, root, DPR_PLAN_CHECKPOINT_ADVICE_STEP_MS, NULL, &r->advice_step_ms) == 1 &&
        number_at(rd, root, DPR_PLAN_CHECKPOINT_ADVICE_REFERENCE_STEP_MS, NULL, &r->advice_reference_ms) == 1 &&
        number_at(rd, root, DPR_PLAN_CHECKPOINT_ADVICE_PREDICTED_RESERVED_BYTES, NULL, &r->advice_reserved_bytes) ==
            1 &&
        (cJSON_IsString(ck) || cJSON_IsNumber(ck))) {
        r->advice = cJSON_IsTrue(fits_with);
        if (cJSON_IsString(ck))
            snprintf(r->advice_checkpoint, sizeof r->advice_checkpoint, "%s", ck->valuestring);
        else
            snprintf(r->advice_checkpoint, sizeof r->advice_checkpoint, "%g", ck->valuedouble);
    }
    return 0;
}

/* Each timed step's index and peak (steps[]); entries without both numbers are reported and
 * left out. */
static int read_steps(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *steps = field_at(rd, root, DPR_STEPS, NULL, AS_ARRAY), *s;
    if (!cJSON_IsArray(steps)) return 0;
    size_t n = (size_t)cJSON_GetArraySize(steps), i = 0;
    r->step_index = malloc((n ? n : 1) * sizeof *r->step_index);
    r->step_peak_bytes = malloc((n ? n : 1) * sizeof *r->step_peak_bytes);
    if (!r->step_index || !r->step_peak_bytes) return -1;
    int reported = 0;
    cJSON_ArrayForEach(s, steps) {
        const cJSON *k = member_of(rd, s, DPR_STEP_STEP, AS_NUMBER);
        const cJSON *peak = member_of(rd, s, DPR_STEP_PEAK_BYTES, AS_NUMBER);
        if (cJSON_IsNumber(k) && cJSON_IsNumber(peak)) {
            r->step_index[r->n_steps] = k->valuedouble;
            r->step_peak_bytes[r->n_steps++] = peak->valuedouble;
        } else if (!reported) {
            PROBLEM(rd, "%s: field '%s[%zu]' needs numbers '%s' and '%s'", rd->file, dpr_field_of(DPR_STEPS)->path, i,
                    key_of(DPR_STEP_STEP), key_of(DPR_STEP_PEAK_BYTES));
            reported = 1;
        }
        i++;
    }
    return 0;
}

/* Adaptive clipping's bound at each step, and the bound after the last (clipping.adaptive.steps[]);
 * a run with a step without both numbers keeps none (reported). */
static int read_bounds(reader *rd, const cJSON *root, dpplot_result *r) {
    const cJSON *steps = field_at(rd, root, DPR_CLIPPING_ADAPTIVE_STEPS, NULL, AS_ARRAY), *s;
    if (!cJSON_IsArray(steps) || cJSON_GetArraySize(steps) == 0) return 0;
    size_t n = (size_t)cJSON_GetArraySize(steps);
    r->bounds = malloc((n + 1) * sizeof *r->bounds);
    if (!r->bounds) return -1;
    double next = NAN;
    cJSON_ArrayForEach(s, steps) {
        const cJSON *b = member_of(rd, s, DPR_CLIPPING_ADAPTIVE_BOUND, AS_NUMBER);
        const cJSON *x = member_of(rd, s, DPR_CLIPPING_ADAPTIVE_NEXT, AS_NUMBER);
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(x)) {
            PROBLEM(rd, "%s: field '%s[%zu]' needs numbers '%s' and '%s'", rd->file,
                    dpr_field_of(DPR_CLIPPING_ADAPTIVE_STEPS)->path, r->n_bounds, key_of(DPR_CLIPPING_ADAPTIVE_BOUND),
                    key_of(DPR_CLIPPING_ADAPTIVE_NEXT));
            r->n_bounds = 0;
            return 0;
        }
        r->bounds[r->n_bounds++] = b->valuedouble;
        next = x->valuedouble;
    }
    r->bounds[r->n_bounds++] = next;
    return 0;
}

static int read_analyses(reader *rd, const cJSON *root, dpplot_result *r) {
    read_spread(rd, root, r);
    read_phase_memory(rd, root, r);
    if (read_profile(rd, root, r) != 0) return -1;
    if (read_steps(rd, root, r) != 0) return -1;
    if (read_bounds(rd, root, r) != 0) return -1;
    return read_marks(rd, root, r);
}

static void free_analyses(dpplot_result *r) {
    for (size_t i = 0; i < r->n_ops; i++) free(r->ops[i].op);
    free(r->ops);
    for (size_t i = 0; i < r->n_marks; i++) free(r->marks[i].name);
    free(r->marks);
    free(r->step_index), free(r->step_peak_bytes);
    free(r->bounds);
}

static void result_free(dpplot_result *r) {
    free(r->file), free(r->experiment), free(r->method), free(r->label), free(r->message), free(r->method_style);
    free(r->t_ms), free(r->allocated_bytes), free(r->reserved_bytes), free(r->spans);
    free(r->sweep_name);
    for (size_t i = 0; i < r->n_vary; i++) free(r->vary[i].key), free(r->vary[i].text);
    free(r->vary);
    free(r->oom_category), free(r->oom_module), free(r->arch), free(r->dtype), free(r->device_name);
    free(r->model_name), free(r->lora_targets), free(r->optimizer), free(r->strategy);
    free(r->device_model);
    free_analyses(r);
    memset(r, 0, sizeof *r);
}

/* 1 when root looks like a results document (any top-level key the schema marks as a result's). */
static int is_results_doc(const cJSON *root) {
    for (int id = 0; id < DPR_N_FIELDS; id++)
        if ((dpr_field_of(id)->flags & DPR_MARKS) && cJSON_GetObjectItemCaseSensitive(root, dpr_field_of(id)->path))
            return 1;
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

/* The configuration titles and summaries name besides the model's shape: the checkpoint's name,
 * LoRA, the optimizer, the distributed strategy (dpplot_result's model_name ... world_size). */
static int read_fixed_config(reader *rd, const cJSON *root, dpplot_result *r) {
    const char *s;
    double v;
    if ((s = string_at(rd, root, DPR_CONFIG_MODEL_PATH)) && *s) {
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/') n--; /* "dir/llama3_8b/" names llama3_8b */
        size_t b = n;
        while (b > 0 && s[b - 1] != '/') b--;
        if (!(r->model_name = malloc(n - b + 1))) return -1;
        memcpy(r->model_name, s + b, n - b), r->model_name[n - b] = '\0';
    }
    const cJSON *lora = field_at(rd, root, DPR_CONFIG_MODEL_LORA, NULL, AS_OBJECT);
    if (lora && cJSON_IsNull(lora)) {
        r->lora_rank = 0;
    } else if (lora && cJSON_IsObject(lora)) {
        if (number_at(rd, root, DPR_CONFIG_MODEL_LORA_RANK, NULL, &v) == 1) r->lora_rank = v;
        const cJSON *targets = field_at(rd, root, DPR_CONFIG_MODEL_LORA_TARGETS, NULL, AS_ARRAY);
        if (targets && cJSON_IsArray(targets)) {
            char joined[512] = "";
            const cJSON *t;
            expect(rd, DPR_CONFIG_MODEL_LORA_TARGETS_ITEM, AS_STRING);
            cJSON_ArrayForEach(t, targets) {
                if (!cJSON_IsString(t)) {
                    PROBLEM(rd, "%s: field '%s' holds %s, expected strings", rd->file,
                            dpr_field_of(DPR_CONFIG_MODEL_LORA_TARGETS)->path, type_name(t));
                    joined[0] = '\0';
                    break;
                }
                size_t used = strlen(joined);
                snprintf(joined + used, sizeof joined - used, "%s%s", used ? "," : "", t->valuestring);
            }
            if (joined[0] && !(r->lora_targets = dup_str(joined))) return -1;
        } else if (targets) {
            PROBLEM(rd, "%s: field '%s' is %s, expected an array", rd->file,
                    dpr_field_of(DPR_CONFIG_MODEL_LORA_TARGETS)->path, type_name(targets));
        }
    } else if (lora) {
        PROBLEM(rd, "%s: field '%s' is %s, expected an object or null", rd->file,
                dpr_field_of(DPR_CONFIG_MODEL_LORA)->path, type_name(lora));
    }
    if ((s = string_at(rd, root, DPR_CONFIG_OPTIMIZER_NAME)) && !(r->optimizer = dup_str(s))) return -1;
    if ((s = string_at(rd, root, DPR_DISTRIBUTED_STRATEGY)) && !(r->strategy = dup_str(s))) return -1;
    if (number_at(rd, root, DPR_DISTRIBUTED_WORLD_SIZE, NULL, &v) == 1) r->world_size = v;
    return 0;
}

static int fill_result(reader *rd, const cJSON *root, dpplot_result *r) {
    int dpprof_file = field_at(rd, root, DPR_SCHEMA_VERSION, NULL, AS_NUMBER) != NULL;
    r->status = parse_status(rd, root, dpprof_file);
    r->reserved_peak_bytes = r->end_bytes = NAN;
    r->oom_requested_bytes = NAN;
    r->seq_len = r->batch = r->layers = r->hidden = NAN;
    r->lora_rank = r->world_size = NAN;
    double v;
    if (dpprof_file && number_at(rd, root, DPR_SCHEMA_VERSION, NULL, &v) == 1 && v != DPR_VERSION)
        PROBLEM(rd, "%s: field '%s' is %g; this reader knows version %d", rd->file,
                dpr_field_of(DPR_SCHEMA_VERSION)->path, v, DPR_VERSION);

    const char *experiment = string_at(rd, root, DPR_EXPERIMENT);
    char stem[256];
    snprintf(stem, sizeof stem, "%s", rd->file);
    size_t sl = strlen(stem);
    if (sl > 5 && strcmp(stem + sl - 5, ".json") == 0) stem[sl - 5] = '\0';
    r->experiment = dup_str(experiment ? experiment : stem);
    const char *method = string_at(rd, root, DPR_METHOD);
    if (!method) method = string_at(rd, root, DPR_CONFIG_METHOD);
    if (!method && dpprof_file)
        PROBLEM(rd, "%s: field '%s' missing; using the experiment name", rd->file, dpr_field_of(DPR_METHOD)->path);
    if (!method) method = r->experiment ? r->experiment : "unknown";
    r->method = dup_str(method);
    const char *style = string_at(rd, root, DPR_CLIPPING_STYLE); /* a run clipped other than flat says so */
    char named[192];
    snprintf(named, sizeof named, style && strcmp(style, "flat") != 0 ? "%s (%s)" : "%s", method, style ? style : "");
    r->method_style = dup_str(named);
    const char *msg = string_at(rd, root, DPR_MESSAGE);
    r->message = dup_str(msg);
    const cJSON *pred = field_at(rd, root, DPR_PREDICTED, NULL, AS_BOOLEAN);
    r->predicted = cJSON_IsTrue(pred);
    const char *how = r->predicted ? string_at(rd, root, DPR_ESTIMATE_METHOD) : NULL;
    r->calibrated = how && strncmp(how, "calibrated", 10) == 0;
    r->loaded = cJSON_IsTrue(field_at(rd, root, DPR_ENVIRONMENT_HOST_LOAD_LOADED, NULL, AS_BOOLEAN));
    r->others_share = NAN;
    if (number_at(rd, root, DPR_ENVIRONMENT_HOST_LOAD_OTHERS_SHARE, NULL, &v) == 1) r->others_share = v;
    if (!r->experiment || !r->method || (msg && !r->message)) return -1;

    read_memory(rd, root, r);
    read_timing(rd, root, r);
    if (read_timeline(rd, root, r) != 0) return -1;
    if (read_sweep(rd, root, r) != 0) return -1;
    if (read_analyses(rd, root, r) != 0) return -1;
    if (read_plan(rd, root, r) != 0) return -1;

    if (number_at(rd, root, DPR_OOM_REQUESTED_BYTES, NULL, &v) == 1) r->oom_requested_bytes = v;
    const char *s;
    if ((s = string_at(rd, root, DPR_OOM_CATEGORY)) && !(r->oom_category = dup_str(s))) return -1;
    if ((s = string_at(rd, root, DPR_OOM_MODULE)) && !(r->oom_module = dup_str(s))) return -1;
    if (number_at(rd, root, DPR_CONFIG_MODEL_SEQ_LEN, NULL, &v) == 1) r->seq_len = v;
    if (number_at(rd, root, DPR_CONFIG_MODEL_BATCH, NULL, &v) == 1) r->batch = v;
    if (number_at(rd, root, DPR_CONFIG_MODEL_LAYERS, NULL, &v) == 1) r->layers = v;
    if (number_at(rd, root, DPR_CONFIG_MODEL_HIDDEN, NULL, &v) == 1) r->hidden = v;
    if ((s = string_at(rd, root, DPR_CONFIG_MODEL_ARCH)) && !(r->arch = dup_str(s))) return -1;
    if ((s = string_at(rd, root, DPR_CONFIG_MODEL_DTYPE)) && !(r->dtype = dup_str(s))) return -1;
    if ((s = string_at(rd, root, DPR_ENVIRONMENT_DEVICE_NAME)) && !(r->device_name = dup_str(s))) return -1;
    return read_fixed_config(rd, root, r);
}

int dpplot_results_add_json(dpplot_results *rs, const char *file, const char *json, dpplot_strlist *problems) {
    reader rd = {file, problems, 0};
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
    for (size_t i = 0; i < rs->n; i++)
        for (size_t j = 0; j < i && methods_unique; j++)
            if (strcmp(rs->items[i].method_style, rs->items[j].method_style) == 0) methods_unique = 0;
    for (size_t i = 0; i < rs->n; i++) {
        dpplot_result *r = &rs->items[i];
        free(r->label);
        r->label = dup_str(methods_unique ? r->method_style : r->experiment);
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
