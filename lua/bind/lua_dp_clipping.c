/* lua_dp_clipping.c: dpprof.dpsgd.wrap's clipping options, read into the engine's (dpsgd.h):
 *
 *   clipping = "flat" | "per_layer" | "per_block" | "groups"     (dp.dpsgd.STYLES)
 *   clip_fn = "abadi" | "automatic", gamma = 0.01                (dp.dpsgd.CLIP_FNS)
 *   adaptive = {target_unclipped_quantile =, clipbound_learning_rate =, max_clipbound =,
 *     min_clipbound =, unclipped_num_std =}   (Opacus's AdaClip, with flat abadi clipping)
 *   bounds = { ["pattern"] = bound, ... }   (clipping = "per_layer"): the tensors a pattern names
 *     (Hugging Face names, '*' any run of characters) get its bound, the others max_grad_norm
 *   groups = { {name = "attn", patterns = {"pattern", ...}, max_grad_norm = C}, ... }
 *     (clipping = "groups": each trainable tensor in exactly one; a group without max_grad_norm
 *     takes max_grad_norm, one without a name is "group<i>"; patterns may be one text)
 *
 * The specs point into the option table's strings and live in a userdata on the stack, so an
 * error raised while reading them leaks nothing. */
#include "lua_engine.h"

#include "dpsgd.h"
#include "error.h"
#include "lua_util.h"

#include <lauxlib.h>
#include <math.h>
#include <string.h>

/* A bound read from the value at the top of the stack: a positive finite number, else raises. */
static double bound_of(lua_State *L, const char *fname, const char *what) {
    int isnum = 0;
    double v = lua_tonumberx(L, -1, &isnum);
    if (!isnum || lua_type(L, -1) != LUA_TNUMBER || !(v > 0.0) || !isfinite(v))
        luaL_error(L, "%s: %s must be a positive number (got %s)", fname, what, luaL_tolstring(L, -1, NULL));
    return v;
}

/* adaptive = {target_unclipped_quantile =, clipbound_learning_rate =, max_clipbound =,
 * min_clipbound =, unclipped_num_std =}: every key given (Opacus's AdaClip has no defaults) */
static void read_adaptive(lua_State *L, int idx, const char *fname, dpsgd_config *cfg) {
    static const char *const keys[] = {"target_unclipped_quantile",
                                       "clipbound_learning_rate",
                                       "max_clipbound",
                                       "min_clipbound",
                                       "unclipped_num_std",
                                       NULL};
    int kind = lua_getfield(L, idx, "adaptive");
    if (kind == LUA_TNIL || (kind == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
        lua_pop(L, 1);
        return;
    }
    if (kind != LUA_TTABLE) luaL_error(L, "%s: adaptive must be a table {%s = ...}", fname, keys[0]);
    int t = lua_gettop(L);
    char where[96];
    snprintf(where, sizeof where, "%s: adaptive", fname);
    dpl_check_keys(L, t, where, keys);
    double v[5];
    for (int k = 0; k < 5; k++) {
        if (lua_getfield(L, t, keys[k]) != LUA_TNUMBER)
            luaL_error(L, "%s: adaptive.%s must be a number (every one of %s, %s, %s, %s, %s is needed)", fname,
                       keys[k], keys[0], keys[1], keys[2], keys[3], keys[4]);
        v[k] = lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
    cfg->adaptive = (dpsgd_adaptive){1, v[0], v[1], v[2], v[3], v[4]};
    lua_pop(L, 1);
}

void dpl_dp_read_clipping(lua_State *L, int idx, const char *fname, dpsgd_config *cfg) {
    const char *style = dpl_opt_str_field(L, idx, fname, "clipping", NULL);
    if (style && dpsgd_style_parse(style, &cfg->clipping) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    const char *fn = dpl_opt_str_field(L, idx, fname, "clip_fn", NULL);
    if (fn && dpsgd_clip_fn_parse(fn, &cfg->clip_fn) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    cfg->gamma = dpl_opt_num_field(L, idx, fname, "gamma", cfg->gamma);
    cfg->max_grad_norm = dpl_opt_num_field(L, idx, fname, "max_grad_norm", cfg->max_grad_norm);
    if (lua_getfield(L, idx, "bounds") != LUA_TNIL) {
        if (cfg->clipping != DPSGD_STYLE_PER_LAYER)
            luaL_error(L,
                       "%s: bounds (by tensor name) are given only with clipping = \"per_layer\" (clipping is \"%s\")",
                       fname, dpsgd_style_name(cfg->clipping));
        if (!lua_istable(L, -1)) luaL_error(L, "%s: bounds must be a table {[\"pattern\"] = bound, ...}", fname);
    }
    lua_pop(L, 1);
    read_adaptive(L, idx, fname, cfg);
    if (lua_getfield(L, idx, "groups") != LUA_TNIL) {
        if (cfg->clipping != DPSGD_STYLE_GROUPS)
            luaL_error(L, "%s: groups are given only with clipping = \"groups\" (clipping is \"%s\")", fname,
                       dpsgd_style_name(cfg->clipping));
        if (!lua_istable(L, -1) || luaL_len(L, -1) < 1)
            luaL_error(L, "%s: groups must be a list of groups, each {name =, patterns = {...}, max_grad_norm =}",
                       fname);
    } else if (cfg->clipping == DPSGD_STYLE_GROUPS) {
        luaL_error(L,
                   "%s: clipping = \"groups\" needs groups = {{name =, patterns = {\"pattern\", ...}, "
                   "max_grad_norm =}, ...}",
                   fname);
    }
    lua_pop(L, 1);
}

/* The specs of per_layer's bounds table at idx (one pattern each) into a userdata pushed on the
 * stack; *n their count. */
static dpsgd_group_spec *per_layer_specs(lua_State *L, int idx, const char *fname, size_t *n) {
    size_t count = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) count++;
    /* the specs, then one pattern pointer each, in one block */
    dpsgd_group_spec *specs = lua_newuserdatauv(L, count * (sizeof *specs + sizeof(const char *)) + 1, 0);
    const char **pats = (const char **)(specs + count);
    size_t k = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "%s: bounds' keys must be tensor-name patterns (text)", fname);
        const char *pat = lua_tostring(L, -2);
        char what[200];
        snprintf(what, sizeof what, "bounds[\"%.160s\"]", pat);
        pats[k] = pat;
        specs[k] = (dpsgd_group_spec){NULL, &pats[k], 1, bound_of(L, fname, what)};
        k++;
    }
    *n = k;
    return specs;
}

/* The patterns of group g (its table at t): a list of texts, or one text; pushed: a table of them. */
static lua_Integer group_patterns(lua_State *L, int t, const char *fname, int g) {
    int kind = lua_getfield(L, t, "patterns");
    if (kind == LUA_TSTRING) { /* one pattern: a list of it */
        lua_createtable(L, 1, 0);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
    } else if (kind != LUA_TTABLE) {
        luaL_error(L, "%s: groups[%d].patterns must be a list of tensor-name patterns (or one)", fname, g);
    }
    lua_Integer np = luaL_len(L, -1);
    if (np < 1) luaL_error(L, "%s: groups[%d] names no tensor-name pattern", fname, g);
    for (lua_Integer j = 1; j <= np; j++) {
        if (lua_geti(L, -1, j) != LUA_TSTRING)
            luaL_error(L, "%s: groups[%d].patterns[%d] must be a tensor-name pattern (text)", fname, g, (int)j);
        lua_pop(L, 1);
    }
    return np;
}

/* The specs of the groups list at idx into a userdata pushed on the stack; *n their count. */
static dpsgd_group_spec *groups_specs(lua_State *L, int idx, const char *fname, double default_bound, size_t *n) {
    static const char *const keys[] = {"name", "patterns", "max_grad_norm", NULL};
    int G = (int)luaL_len(L, idx);
    lua_Integer total = 0;
    lua_createtable(L, G, 0); /* each group's patterns, kept alive while the specs point into them */
    int lists = lua_gettop(L);
    for (int g = 1; g <= G; g++) {
        if (lua_geti(L, idx, g) != LUA_TTABLE)
            luaL_error(L, "%s: groups[%d] must be a table {name =, patterns = {...}, max_grad_norm =}", fname, g);
        char where[64];
        snprintf(where, sizeof where, "%s: groups[%d]", fname, g);
        dpl_check_keys(L, lua_gettop(L), where, keys);
        total += group_patterns(L, lua_gettop(L), fname, g);
        lua_rawseti(L, lists, g);
        lua_pop(L, 1);
    }
    size_t bytes = (size_t)G * sizeof(dpsgd_group_spec) + (size_t)total * sizeof(const char *) + (size_t)G * 24;
    dpsgd_group_spec *specs = lua_newuserdatauv(L, bytes, 1);
    lua_pushvalue(L, lists);
    lua_setiuservalue(L, -2, 1);
    const char **pats = (const char **)(specs + G);
    char *names = (char *)(pats + total); /* "group<i>" for the unnamed */
    lua_Integer used = 0;
    for (int g = 1; g <= G; g++) {
        lua_geti(L, idx, g);
        int t = lua_gettop(L);
        lua_geti(L, lists, g);
        lua_Integer np = luaL_len(L, -1);
        for (lua_Integer j = 1; j <= np; j++) {
            lua_geti(L, -1, j);
            pats[used + j - 1] = lua_tostring(L, -1); /* the lists table keeps the string alive */
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        char *name = names + (g - 1) * 24;
        snprintf(name, 24, "group%d", g);
        const char *nm = dpl_opt_str_field(L, t, fname, "name", name);
        double C = default_bound;
        if (lua_getfield(L, t, "max_grad_norm") != LUA_TNIL) {
            char what[64];
            snprintf(what, sizeof what, "groups[%d].max_grad_norm", g);
            C = bound_of(L, fname, what);
        }
        lua_pop(L, 1);
        specs[g - 1] = (dpsgd_group_spec){nm, &pats[used], (size_t)np, C};
        used += np;
        lua_pop(L, 1);
    }
    *n = (size_t)G;
    return specs;
}

void dpl_dp_set_groups(lua_State *L, int idx, const char *fname, const dpsgd_config *cfg, dpsgd *dp) {
    int top = lua_gettop(L);
    size_t n = 0;
    dpsgd_group_spec *specs = NULL;
    if (cfg->clipping == DPSGD_STYLE_PER_LAYER && lua_getfield(L, idx, "bounds") == LUA_TTABLE)
        specs = per_layer_specs(L, lua_gettop(L), fname, &n);
    else if (cfg->clipping == DPSGD_STYLE_GROUPS && lua_getfield(L, idx, "groups") == LUA_TTABLE)
        specs = groups_specs(L, lua_gettop(L), fname, cfg->max_grad_norm, &n);
    if (specs && dp && dpsgd_set_clip_groups(dp, specs, n) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    lua_settop(L, top);
}

/* clipping.adaptive: the settings and every step's bound {bound, samples, unclipped, fraction, next} */
static void push_adaptive(lua_State *L, const dpsgd *dp) {
    const dpsgd_adaptive *a = &dpsgd_config_of(dp)->adaptive;
    lua_createtable(L, 0, 7);
    const struct {
        const char *key;
        double v;
    } fields[] = {{"target_unclipped_quantile", a->target_unclipped_quantile},
                  {"clipbound_learning_rate", a->clipbound_learning_rate},
                  {"max_clipbound", a->max_clipbound},
                  {"min_clipbound", a->min_clipbound},
                  {"unclipped_num_std", a->unclipped_num_std},
                  {"noise_multiplier", dpsgd_adaptive_noise_multiplier(dpsgd_config_of(dp))}};
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) {
        lua_pushnumber(L, fields[k].v);
        lua_setfield(L, -2, fields[k].key);
    }
    size_t n;
    const dpsgd_bound_step *h = dpsgd_bound_history(dp, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 5);
        lua_pushnumber(L, h[i].bound);
        lua_setfield(L, -2, "bound");
        lua_pushinteger(L, h[i].samples);
        lua_setfield(L, -2, "samples");
        lua_pushinteger(L, h[i].unclipped);
        lua_setfield(L, -2, "unclipped");
        lua_pushnumber(L, h[i].fraction);
        lua_setfield(L, -2, "fraction");
        lua_pushnumber(L, h[i].next);
        lua_setfield(L, -2, "next");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "steps");
    lua_setfield(L, -2, "adaptive");
}

void dpl_dp_push_clipping(lua_State *L, const dpsgd *dp) {
    const dpsgd_config *c = dpsgd_config_of(dp);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, dpsgd_style_name(c->clipping));
    lua_setfield(L, -2, "style");
    lua_pushstring(L, dpsgd_clip_fn_name(c->clip_fn));
    lua_setfield(L, -2, "clip_fn");
    if (c->clip_fn == DPSGD_CLIP_FN_AUTOMATIC) {
        lua_pushnumber(L, c->gamma);
        lua_setfield(L, -2, "gamma");
    }
    lua_pushnumber(L, dpsgd_noise_norm(dp));
    lua_setfield(L, -2, "noise_norm");
    size_t G = dpsgd_clip_group_count(dp);
    lua_createtable(L, (int)G, 0);
    for (size_t g = 0; g < G; g++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, dpsgd_clip_group_name(dp, g));
        lua_setfield(L, -2, "name");
        lua_pushnumber(L, dpsgd_clip_group_bound(dp, g));
        lua_setfield(L, -2, "max_grad_norm");
        lua_pushinteger(L, (lua_Integer)dpsgd_clip_group_size(dp, g));
        lua_setfield(L, -2, "tensors");
        lua_rawseti(L, -2, (lua_Integer)g + 1);
    }
    lua_setfield(L, -2, "groups");
    if (c->adaptive.enabled) push_adaptive(L, dp);
}
