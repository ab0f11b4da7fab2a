/* test_schema: the chart reader (plots/results_load.c) against the result schema
 * (common/results_schema.h), the one description the writer's validator walks too
 * (lua/dpprof/results.lua; tests/lua/test_results_schema.lua holds the writer and the validator to
 * it). The reader reads each field by its schema id and checks, at every read, that the schema
 * types the field as the reader takes it: a field retyped in the schema but not in the reader
 * (or the reverse) is reported as "reader and schema disagree", and this test fails on it for
 * every result the fixtures hold, the legacy forms the reader falls back to included. It also
 * checks the table's own shape and that what the reader takes is what the schema path holds. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results_schema.h"
#include "test_util.h"

static int has(const dpplot_strlist *l, const char *needle) {
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->items[i], needle)) return 1;
    return 0;
}

/* The table's shape: unique paths, each one's parent described before it (an object, or an
 * array for "[]"), placeholders and choices the two sides know, MARKS at the top only. */
static void test_table(void) {
    static const char *const choices[] = {"statuses",    "phases",        "samplings", "bounds",
                                          "profiles",    "op_categories", "rss_since", "formulations",
                                          "accountants", "flash_impls",   "styles",    "clip_fns"};
    for (int id = 0; id < DPR_N_FIELDS; id++) {
        const dpr_field *f = dpr_field_of(id);
        for (int j = 0; j < id; j++)
            tu_check(strcmp(f->path, dpr_field_of(j)->path) != 0, "'%s' described twice", f->path);
        char parent[256];
        snprintf(parent, sizeof parent, "%s", f->path);
        size_t n = strlen(parent);
        int array_item = n > 2 && strcmp(parent + n - 2, "[]") == 0;
        char *dot = strrchr(parent, '.');
        if (array_item)
            parent[n - 2] = '\0';
        else if (dot)
            *dot = '\0';
        else
            parent[0] = '\0';
        if (parent[0]) {
            int found = -1;
            for (int j = 0; j < id; j++)
                if (strcmp(dpr_field_of(j)->path, parent) == 0) found = j;
            tu_check(found >= 0, "'%s': its parent '%s' is not described before it", f->path, parent);
            if (found >= 0)
                tu_check(dpr_field_of(found)->type == (array_item ? DPR_T_ARRAY : DPR_T_OBJECT),
                         "'%s': its parent '%s' is a %s", f->path, parent, dpr_type_name(dpr_field_of(found)->type));
        }
        const char *key = array_item ? "[]" : dot ? dot + 1 : f->path;
        if (strchr(key, '{') || strchr(key, '*'))
            tu_check(strcmp(key, "{category}") == 0 || strcmp(key, "{phase}") == 0 || strcmp(key, "*") == 0,
                     "'%s': unknown placeholder '%s'", f->path, key);
        if (f->flags & DPR_MARKS) tu_check(!parent[0], "'%s' marks a result but is not at the top", f->path);
        if (f->choices) {
            int known = 0;
            for (size_t c = 0; c < sizeof choices / sizeof *choices; c++) known |= strcmp(f->choices, choices[c]) == 0;
            tu_check(known, "'%s': unknown choices '%s'", f->path, f->choices);
        }
    }
}

/* Loads every results file of a fixture directory; checks that the reader and the schema agree. */
static void test_directory(const char *set) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DPPLOT_FIXTURES, set);
    dpplot_results rs;
    dpplot_strlist problems = {0};
    tu_check(dpplot_results_load(dir, &rs, &problems) == 0, "%s: loaded", set);
    tu_check(rs.n > 0, "%s: results read", set);
    tu_check(!has(&problems, "disagree"), "%s: the reader and the schema disagree: %s", set,
             problems.n ? problems.items[0] : "");
    for (size_t i = 0; i < problems.n; i++)
        if (strstr(problems.items[i], "disagree")) printf("  %s\n", problems.items[i]);
    dpplot_results_release(&rs);
    dpplot_strlist_release(&problems);
}

/* The number at a schema path with no placeholder, read with cJSON alone. */
static double json_number(const cJSON *root, int id) {
    char path[256];
    snprintf(path, sizeof path, "%s", dpr_field_of(id)->path);
    const cJSON *cur = root;
    for (char *key = strtok(path, "."); key && cur; key = strtok(NULL, "."))
        cur = cJSON_GetObjectItemCaseSensitive(cur, key);
    return cJSON_IsNumber(cur) ? cur->valuedouble : NAN;
}

/* What the reader takes is what the schema's path holds. */
static void test_values(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/single/ghost.json", DPPLOT_FIXTURES);
    char *text = tu_read_file(path);
    tu_check(text != NULL, "single/ghost.json read");
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    dpplot_results rs = {0};
    dpplot_strlist problems = {0};
    tu_check(dpplot_results_add_json(&rs, "ghost.json", text, &problems) == 0 && rs.n == 1, "ghost.json loaded");
    if (rs.n == 1 && root) {
        const dpplot_result *r = &rs.items[0];
        tu_check(r->peak_bytes == json_number(root, DPR_MEMORY_PEAK_BYTES), "peak from %s",
                 dpr_field_of(DPR_MEMORY_PEAK_BYTES)->path);
        tu_check(r->avg_ms == json_number(root, DPR_TIMING_AVG_MS), "time from %s",
                 dpr_field_of(DPR_TIMING_AVG_MS)->path);
        tu_check(r->end_bytes == json_number(root, DPR_MEMORY_END_BYTES), "end bytes from %s",
                 dpr_field_of(DPR_MEMORY_END_BYTES)->path);
        tu_check(r->seq_len == json_number(root, DPR_CONFIG_MODEL_SEQ_LEN), "seq_len from %s",
                 dpr_field_of(DPR_CONFIG_MODEL_SEQ_LEN)->path);
        tu_check(r->legacy_mb[DPPLOT_LEGACY_GRADIENTS] == json_number(root, DPR_BREAKDOWN_GRADIENTS_MB),
                 "gradients_mb from %s", dpr_field_of(DPR_BREAKDOWN_GRADIENTS_MB)->path);
    }
    tu_check(problems.n == 0, "ghost.json: no problem (%s)", problems.n ? problems.items[0] : "");
    cJSON_Delete(root);
    free(text);
    dpplot_results_release(&rs);
    dpplot_strlist_release(&problems);
}

/* The reader's fallbacks (legacy keys only, snapshots for a timeline, an OOM record) are read
 * through the schema too. */
static void test_fallbacks(void) {
    static const char *const docs[] = {
        "{\"experiment\": \"ghost\", \"avg_time_ms\": 100.5, \"peak_memory_mb\": 1000,"
        " \"breakdown\": {\"model_parameters_mb\": 100, \"peak_allocated_mb\": 1000},"
        " \"snapshots\": [{\"name\": \"a\", \"allocated_mb\": 100, \"reserved_mb\": 120, \"timestamp\": 1.0}]}",
        "{\"schema_version\": 1, \"experiment\": \"x\", \"status\": \"oom\", \"method\": \"ghost\", \"message\": \"m\","
        " \"oom\": {\"requested_bytes\": 4096, \"category\": \"temp\", \"module\": \"layers.0\"},"
        " \"sweep\": {\"name\": \"s\", \"vary\": {\"seq_len\": 64, \"method\": \"ghost\"}}}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        dpplot_results rs = {0};
        dpplot_strlist problems = {0};
        dpplot_results_add_json(&rs, "doc.json", docs[i], &problems);
        tu_check(rs.n == 1, "document %zu read", i);
        tu_check(!has(&problems, "disagree"), "document %zu: the reader and the schema disagree: %s", i,
                 problems.n ? problems.items[0] : "");
        if (i == 1 && rs.n == 1)
            tu_check(rs.items[0].oom_requested_bytes == 4096 && rs.items[0].n_vary == 2, "OOM record and sweep read");
        dpplot_results_release(&rs);
        dpplot_strlist_release(&problems);
    }
}

int main(void) {
    test_table();
    test_directory("single");
    test_directory("sweep_seq");
    test_directory("sweep_2d");
    test_directory("malformed");
    test_values();
    test_fallbacks();
    return tu_finish("test_schema");
}
