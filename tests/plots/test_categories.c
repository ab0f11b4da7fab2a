/* test_categories: the chart reader takes the memory categories from common/memory_categories.h:
 * every category charts in its component (other only where the list says so) and adds to its
 * legacy breakdown field; categories of one component share that field; a category the list does
 * not hold is reported, naming it, and not charted as Other in silence. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "results_schema.h"
#include "test_util.h"

#define MIB 1048576.0

static const struct {
    const char *name;
    int legacy;
    dpplot_component component;
    const char *component_id;
} cats[] = {
#define ROW(id, name, legacy, component) {name, legacy, DPPLOT_COMP_##component, #component},
    DPR_MEMORY_CATEGORIES(ROW)
#undef ROW
};
#define N_CATS (sizeof cats / sizeof cats[0])

/* The plots legacy index of a breakdown field id, or -1. */
static int legacy_index(int field) {
    static const int fields[DPPLOT_N_LEGACY] = {
        DPR_BREAKDOWN_MODEL_PARAMETERS_MB, DPR_BREAKDOWN_OPTIMIZER_STATES_MB, DPR_BREAKDOWN_GRADIENTS_MB,
        DPR_BREAKDOWN_ACTIVATION_HOOKS_MB, DPR_BREAKDOWN_NORM_SAMPLES_MB,     DPR_BREAKDOWN_TEMP_MATRICES_MB,
        DPR_BREAKDOWN_TOTAL_ALLOCATED_MB,  DPR_BREAKDOWN_PEAK_ALLOCATED_MB};
    for (int k = 0; k < DPPLOT_N_LEGACY; k++)
        if (fields[k] == field) return k;
    return -1;
}

static int has(const dpplot_strlist *l, const char *needle) {
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->items[i], needle)) return 1;
    return 0;
}

/* A result whose peak is `bytes` of category `name` alone (and in the forward phase's peak). */
static void load(const char *name, double bytes, dpplot_results *rs, dpplot_strlist *problems) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"experiment\": \"x\", \"status\": \"ok\", \"avg_time_ms\": 1.5, \"memory\": {\"peak_bytes\": %.0f, "
             "\"categories\": {\"%s\": {\"live_at_peak_bytes\": %.0f}}, "
             "\"phases\": {\"forward\": {\"peak_bytes\": %.0f, \"live_at_peak\": {\"%s\": %.0f}}}}}",
             bytes, name, bytes, bytes, name, bytes);
    memset(rs, 0, sizeof *rs);
    *problems = (dpplot_strlist){0};
    dpplot_results_add_json(rs, "case.json", json, problems);
    dpplot_results_finish(rs);
}

static void test_each_category(void) {
    for (size_t i = 0; i < N_CATS; i++) {
        /* the component named in the list is the palette's, key and all */
        char key[64];
        size_t k = 0;
        for (; cats[i].component_id[k] && k + 1 < sizeof key; k++)
            key[k] = (char)tolower((unsigned char)cats[i].component_id[k]);
        key[k] = '\0';
        tu_check(strcmp(dpplot_component_key(cats[i].component), key) == 0, "%s: component %s has key %s",
                 cats[i].name, cats[i].component_id, dpplot_component_key(cats[i].component));
        /* other only where the list says so: inputs and other */
        int to_other = strcmp(cats[i].name, "inputs") == 0 || strcmp(cats[i].name, "other") == 0;
        tu_check((cats[i].component == DPPLOT_COMP_OTHER) == to_other, "%s: charted as Other only when listed so",
                 cats[i].name);
        /* the legacy field is a breakdown field of the schema, or none */
        int li = legacy_index(cats[i].legacy);
        tu_check(cats[i].legacy == DPR_NO_LEGACY || (li >= 0 && li < DPPLOT_LEGACY_TOTAL_ALLOCATED),
                 "%s: legacy field %d is a per-category breakdown field", cats[i].name, cats[i].legacy);
        tu_check((cats[i].legacy == DPR_NO_LEGACY) == to_other, "%s: no legacy field only for inputs and other",
                 cats[i].name);
        /* categories of one component add to one legacy field */
        for (size_t j = 0; j < N_CATS; j++)
            if (cats[j].component == cats[i].component)
                tu_check(cats[j].legacy == cats[i].legacy, "%s and %s share a component but not a legacy field",
                         cats[i].name, cats[j].name);

        /* read from a result: the bytes in the component and the legacy field, nothing reported */
        const double bytes = 3.0 * MIB + 4096.0 * (double)(i + 1);
        dpplot_results rs;
        dpplot_strlist problems;
        load(cats[i].name, bytes, &rs, &problems);
        tu_check(problems.n == 0, "%s: %zu problems (first: %s)", cats[i].name, problems.n,
                 problems.n ? problems.items[0] : "");
        tu_check(rs.n == 1 && rs.items[0].has_components, "%s: one result with components", cats[i].name);
        if (rs.n == 1) {
            const dpplot_result *r = &rs.items[0];
            for (int c = 0; c < DPPLOT_N_COMPONENTS; c++)
                tu_check(r->component_bytes[c] == (c == (int)cats[i].component ? bytes : 0.0),
                         "%s: component %s holds %.0f", cats[i].name, dpplot_component_key((dpplot_component)c),
                         r->component_bytes[c]);
            for (int c = 0; c < DPPLOT_N_COMPONENTS; c++)
                tu_check(r->phase_components[DPPLOT_PHASE_FORWARD][c] == (c == (int)cats[i].component ? bytes : 0.0),
                         "%s: forward's component %s holds %.0f", cats[i].name,
                         dpplot_component_key((dpplot_component)c), r->phase_components[DPPLOT_PHASE_FORWARD][c]);
            for (int l = 0; l < DPPLOT_LEGACY_TOTAL_ALLOCATED; l++)
                tu_check(r->legacy_mb[l] == (l == li ? bytes / MIB : 0.0), "%s: legacy field %d holds %.6f",
                         cats[i].name, l, r->legacy_mb[l]);
        }
        dpplot_results_release(&rs);
        dpplot_strlist_release(&problems);
    }
}

static void test_unknown_category(void) {
    dpplot_results rs;
    dpplot_strlist problems;
    load("kv_cache", 2.0 * MIB, &rs, &problems);
    tu_check(problems.n == 1, "one problem for one unknown category in two places: %zu", problems.n);
    tu_check(has(&problems, "case.json: field 'memory.categories.kv_cache' is no memory category (valid: parameters, "
                            "gradients, optimizer_states, activations, per_sample_grads, norm_samples, temp, "
                            "output_grads, inputs, workspace, other); its bytes are charted as Other"),
             "the unknown category is named with the valid ones: '%s'", problems.n ? problems.items[0] : "");
    if (rs.n == 1) tu_check(rs.items[0].component_bytes[DPPLOT_COMP_OTHER] == 2.0 * MIB, "its bytes in Other");
    dpplot_results_release(&rs);
    dpplot_strlist_release(&problems);
}

int main(void) {
    test_each_category();
    test_unknown_category();
    return tu_finish("test_categories");
}
