/* dpsgd_groups.c: the clipping groups of a style. Every trainable tensor belongs to one group g
 * with a bound C_g; sample i's gradient is clipped group by group, g's part by its factor c_gi
 * from the group's norm ||g_gi|| (the square root of the sum of its tensors' rows), so the
 * clipped sum's sensitivity is ||C||_2 over the groups (dpsgd_noise_norm). flat is one group of
 * every tensor (the factors and noise are then what they were before groups: c_i from C). */
#include "dpsgd_impl.h"

#include "error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dpsgd_groups_free(dpsgd *dp) {
    for (int g = 0; g < dp->n_groups && dp->group_name; g++) free(dp->group_name[g]);
    free(dp->group_name);
    free(dp->group_bound);
    free(dp->group_of);
    free(dp->group_block);
    dp->group_block = NULL;
    dp->early_possible = dp->early = 0;
    dp->group_name = NULL;
    dp->group_bound = NULL;
    dp->group_of = NULL;
    dp->n_groups = 0;
}

/* Whether name matches glob pat ('*' any run of characters, dots included). */
static int glob_match(const char *pat, const char *name) {
    const char *star = NULL, *resume = NULL;
    while (*name) {
        if (*pat == '*') {
            star = pat++;
            resume = name;
        } else if (*pat == *name) {
            pat++;
            name++;
        } else if (star) {
            pat = star + 1;
            name = ++resume;
        } else {
            return 0;
        }
    }
    while (*pat == '*') pat++;
    return *pat == '\0';
}

static int spec_matches(const dpsgd_group_spec *s, const char *name) {
    for (size_t j = 0; j < s->n_patterns; j++)
        if (s->patterns[j] && glob_match(s->patterns[j], name)) return 1;
    return 0;
}

/* A per_block group's name for tensor p: its block's prefix of its Hugging Face name
 * ("model.layers.3", "transformer.h.3") into buf, or "embeddings" / "head" outside the blocks (as
 * fsdp's pseudo-blocks are cut: dpsgd_param_block). */
static const char *block_name(const dp_param *p, char *buf, size_t n) {
    int64_t b = dpsgd_param_block(p);
    if (b == DP_MODEL_EMBEDDINGS) return "embeddings";
    if (b == DP_MODEL_HEAD) return "head";
    const char *end = strpbrk(p->name, "0123456789"); /* the prefixes hold no digit */
    while (*end >= '0' && *end <= '9') end++;
    snprintf(buf, n, "%.*s", (int)(end - p->name), p->name);
    return buf;
}

/* The working set of groups being built: names (owned), bounds, and each tensor's group. */
typedef struct {
    int n, cap;
    char **name;
    double *bound;
    int *of;
} groups_build;

static void build_free(groups_build *b) {
    for (int g = 0; g < b->n; g++) free(b->name[g]);
    free(b->name);
    free(b->bound);
    free(b->of);
}

/* The index of group `name` (added with bound C when new), or -1 on out of memory. */
static int group_index(groups_build *b, const char *name, double C) {
    for (int g = b->n - 1; g >= 0; g--)
        if (strcmp(b->name[g], name) == 0) return g;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        char **nm = realloc(b->name, (size_t)cap * sizeof *nm);
        if (nm) b->name = nm;
        double *bd = nm ? realloc(b->bound, (size_t)cap * sizeof *bd) : NULL;
        if (bd) b->bound = bd;
        if (!nm || !bd) return -1;
        b->cap = cap;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, name, len + 1);
    b->name[b->n] = copy;
    b->bound[b->n] = C;
    return b->n++;
}

/* The group of trainable tensor k under dp's style and the specs, into b (DP_EINVAL naming the
 * tensor when the groups style puts it in none or two). */
static int assign(dpsgd *dp, const dpsgd_group_spec *specs, size_t n_specs, int k, groups_build *b) {
    const dp_param *p = dp->params[k];
    double C = dp->cfg.max_grad_norm;
    const char *name = "all";
    char buf[160];
    switch (dp->cfg.clipping) {
    case DPSGD_STYLE_FLAT: break;
    case DPSGD_STYLE_PER_LAYER: {
        name = p->name;
        size_t found = n_specs;
        for (size_t s = 0; s < n_specs; s++) {
            if (!spec_matches(&specs[s], p->name)) continue;
            if (found < n_specs && specs[found].max_grad_norm != specs[s].max_grad_norm)
                return dp_error_set(DP_EINVAL,
                                    "dp: per_layer bounds: tensor '%s' matches two patterns with other "
                                    "bounds, '%s' (%g) and '%s' (%g)",
                                    p->name, specs[found].patterns[0], specs[found].max_grad_norm, specs[s].patterns[0],
                                    specs[s].max_grad_norm);
            found = s;
        }
        if (found < n_specs) C = specs[found].max_grad_norm;
        break;
    }
    case DPSGD_STYLE_PER_BLOCK: name = block_name(p, buf, sizeof buf); break;
    case DPSGD_STYLE_GROUPS: {
        size_t found = n_specs;
        for (size_t s = 0; s < n_specs; s++) {
            if (!spec_matches(&specs[s], p->name)) continue;
            if (found < n_specs)
                return dp_error_set(DP_EINVAL, "dp: clipping groups: tensor '%s' is in two groups, '%s' and '%s'",
                                    p->name, specs[found].name, specs[s].name);
            found = s;
        }
        if (found == n_specs)
            return dp_error_set(DP_EINVAL,
                                "dp: clipping groups: trainable tensor '%s' is in no group (every trainable tensor "
                                "must match a pattern of exactly one)",
                                p->name);
        name = specs[found].name;
        C = specs[found].max_grad_norm;
        break;
    }
    }
    int g = group_index(b, name, C);
    if (g < 0) return dp_error_set(DP_EOOM, "dp: out of host memory for the clipping groups");
    b->of[k] = g;
    return DP_OK;
}

static int check_specs(const dpsgd *dp, const dpsgd_group_spec *specs, size_t n_specs) {
    dpsgd_clip_style st = dp->cfg.clipping;
    if ((st == DPSGD_STYLE_FLAT || st == DPSGD_STYLE_PER_BLOCK) && n_specs > 0)
        return dp_error_set(DP_EINVAL,
                            "dp: clipping '%s' takes no groups (per_layer takes bounds by tensor name, "
                            "groups takes the groups)",
                            dpsgd_style_name(st));
    for (size_t s = 0; s < n_specs; s++) {
        const dpsgd_group_spec *g = &specs[s];
        const char *what = g->name ? g->name : "(unnamed)";
        if (st == DPSGD_STYLE_GROUPS && (!g->name || !g->name[0]))
            return dp_error_set(DP_EINVAL, "dp: clipping group %zu has no name", s + 1);
        if (st == DPSGD_STYLE_GROUPS)
            for (size_t t = 0; t < s; t++)
                if (strcmp(specs[t].name, g->name) == 0)
                    return dp_error_set(DP_EINVAL, "dp: two clipping groups are named '%s'", g->name);
        if (!(g->max_grad_norm > 0.0) || !isfinite(g->max_grad_norm))
            return dp_error_set(DP_EINVAL, "dp: clipping group '%s': max_grad_norm %g must be positive", what,
                                g->max_grad_norm);
        if (g->n_patterns == 0 || !g->patterns)
            return dp_error_set(DP_EINVAL, "dp: clipping group '%s' has no tensor name pattern", what);
        int any = 0;
        for (int k = 0; k < dp->n_params && !any; k++) any = spec_matches(g, dp->params[k]->name);
        if (!any)
            return dp_error_set(DP_EINVAL,
                                "dp: clipping group '%s': its patterns match no trainable tensor (e.g. '%s')", what,
                                g->patterns[0] ? g->patterns[0] : "");
    }
    return DP_OK;
}

/* Where each group is complete, by where its tensors' gradients are (dpsgd_param_block): its block
 * (>= 0), DP_MODEL_HEAD (the final norm, an untied head: before the blocks), else -1 (the
 * embeddings, or a group outside the blocks of both: at the clip); and whether early forming can
 * retain nothing (no group crosses blocks). */
static int early_setup(dpsgd *dp) {
    free(dp->group_block);
    dp->group_block = NULL;
    dp->early_possible = 0;
    int G = dp->n_groups;
    if (G < 2 || dp->cfg.clip == DPSGD_CLIP_NONE) return DP_OK; /* one group completes at the backward's end */
    dp->group_block = malloc((size_t)G * sizeof *dp->group_block);
    int *in_blocks = calloc((size_t)G, sizeof *in_blocks);
    if (!dp->group_block || !in_blocks) {
        free(in_blocks);
        return dp_error_set(DP_EOOM, "dp: out of host memory for the clipping groups");
    }
    const int64_t UNSEEN = INT64_MIN, MIXED = INT64_MIN + 1;
    for (int g = 0; g < G; g++) dp->group_block[g] = UNSEEN;
    for (int k = 0; k < dp->n_params; k++) {
        int g = dp->group_of[k];
        int64_t b = dpsgd_param_block(dp->params[k]), *gb = &dp->group_block[g];
        *gb = *gb == UNSEEN || *gb == b ? b : MIXED;
        in_blocks[g] |= b >= 0;
    }
    int any = 0, crossing = 0;
    for (int g = 0; g < G; g++) {
        int64_t b = dp->group_block[g];
        any |= b >= 0 || b == DP_MODEL_HEAD;
        crossing |= b == MIXED && in_blocks[g]; /* a group across blocks: everything retained, as before */
        if (b == MIXED || b == UNSEEN) dp->group_block[g] = -1; /* outside the blocks: at the clip */
    }
    free(in_blocks);
    dp->early_possible = any && !crossing;
    return DP_OK;
}

int dpsgd_set_clip_groups(dpsgd *dp, const dpsgd_group_spec *specs, size_t n_specs) {
    DP_TRY(check_specs(dp, specs, n_specs));
    if (dp->cfg.clipping == DPSGD_STYLE_GROUPS && n_specs == 0)
        return dp_error_set(DP_EINVAL, "dp: clipping 'groups' needs its groups (each with patterns and max_grad_norm)");
    groups_build b = {0};
    b.of = calloc((size_t)(dp->n_params ? dp->n_params : 1), sizeof *b.of);
    if (!b.of) return dp_error_set(DP_EOOM, "dp: out of host memory for the clipping groups");
    int rc = DP_OK;
    if (dp->cfg.clipping == DPSGD_STYLE_GROUPS) /* the groups in the specs' order */
        for (size_t s = 0; s < n_specs && rc == DP_OK; s++)
            if (group_index(&b, specs[s].name, specs[s].max_grad_norm) < 0)
                rc = dp_error_set(DP_EOOM, "dp: out of host memory for the clipping groups");
    for (int k = 0; k < dp->n_params && rc == DP_OK; k++) rc = assign(dp, specs, n_specs, k, &b);
    if (rc == DP_OK && b.n == 0 && group_index(&b, "all", dp->cfg.max_grad_norm) < 0) /* no trainable tensor */
        rc = dp_error_set(DP_EOOM, "dp: out of host memory for the clipping groups");
    if (rc != DP_OK) {
        build_free(&b);
        return rc;
    }
    dpsgd_groups_free(dp);
    dp->n_groups = b.n;
    dp->group_name = b.name;
    dp->group_bound = b.bound;
    dp->group_of = b.of;
    return early_setup(dp);
}

int dpsgd_groups_default(dpsgd *dp) {
    if (dp->cfg.clipping == DPSGD_STYLE_GROUPS) return DP_OK; /* none until the groups are given */
    return dpsgd_set_clip_groups(dp, NULL, 0);
}

double dpsgd_group_factor(const dpsgd *dp, double C, double n) {
    if (dp->cfg.clip_fn == DPSGD_CLIP_FN_AUTOMATIC) return C / (n + dp->cfg.gamma);
    double c = C / (n + 1e-6);
    return c < 1.0 ? c : 1.0;
}

size_t dpsgd_clip_group_count(const dpsgd *dp) { return (size_t)dp->n_groups; }

const char *dpsgd_clip_group_name(const dpsgd *dp, size_t g) {
    return g < (size_t)dp->n_groups ? dp->group_name[g] : NULL;
}

double dpsgd_clip_group_bound(const dpsgd *dp, size_t g) { return g < (size_t)dp->n_groups ? dp->group_bound[g] : 0.0; }

size_t dpsgd_clip_group_size(const dpsgd *dp, size_t g) {
    size_t n = 0;
    for (int k = 0; k < dp->n_params && dp->group_of; k++) n += (size_t)dp->group_of[k] == g;
    return n;
}

int dpsgd_param_clip_group(const dpsgd *dp, const dp_param *p) {
    int k = dpsgd_param_index(dp, p);
    return k >= 0 && dp->group_of ? dp->group_of[k] : -1;
}

double dpsgd_noise_norm(const dpsgd *dp) {
    if (dp->n_groups == 1) return dp->group_bound[0];
    double s = 0.0;
    for (int g = 0; g < dp->n_groups; g++) s += dp->group_bound[g] * dp->group_bound[g];
    return sqrt(s);
}
