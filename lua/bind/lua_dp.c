/* lua_dp.c: dpprof.dpsgd.wrap and the DP wrapper object ("dpprof.dpsgd" metatable).
 *
 *   local priv = dp.dpsgd.wrap(m, opt, {method=... | norms=..., clip=..., max_grad_norm=, ...,
 *                                    flash_impl="tiles"|"strips"})
 *   local step = priv:next_step()     -- {logical_size=n, physical={n1, n2, ...}, samples={i1, ...},
 *                                        first=, padding=}
 *     (samples: which of the dataset_size samples were drawn, 1-based; absent without dataset_size;
 *      a rank's slice is samples[first+1 .. first+sum(physical)]; padding: fsdp's padding physical
 *      batches after the rank's own, each priv:forward_padding(), backward(), clip())
 *   priv:forward(batch) -> loss, {L_1..L_B}; priv:backward(); priv:clip()   -- per physical batch
 *     (clip returns nil, or the first per-sample norm that is not finite and its sample)
 *   priv:noise()                      -- once per logical step, before opt:step()
 *   priv:stats(), priv:epsilon([delta [, accountant]]), priv:free()
 *   priv.method, priv.norms (nil for vanilla), priv.clip_method (nil for vanilla)
 *   priv:stats().clipping         {style, clip_fn, gamma, noise_norm, groups = {{name, max_grad_norm,
 *                                  tensors}...}} (nil for vanilla)
 *   dp.dpsgd.check(options, model_batch) -> true: wrap's checks of its options, without a model
 *   dp.dpsgd.WRAP_KEYS     wrap's option names, in order
 *   dp.dpsgd.split(n, max) -> {n1, ...}: the physical batch sizes of a logical batch of n samples, at
 *                       most max a batch, as the engine (and Opacus's BatchMemoryManager) splits it
 *   dp.dpsgd.poisson_draw(seed, step, q, N) -> {i1, ...}: the samples (1-based) Poisson sampling draws
 *                       at logical step `step` (from 0), as priv:next_step() draws them
 *
 * The engine's lists and defaults, made from its one table of each (engine/dp/dpsgd_method.c,
 * dpsgd_config_default), which every Lua module and the CLI read rather than keep their own:
 *   dp.dpsgd.METHODS       the presets' names in order, vanilla first: {"vanilla", "flat", ...}
 *   dp.dpsgd.PRESETS       {name = {norms=, clip=}} (vanilla: {}, neither)
 *   dp.dpsgd.NORMS, CLIPS  the norms and clip choices of norms=/clip=
 *   dp.dpsgd.FORMULATIONS  the per-layer formulations stats().layers[i].norms names
 *   dp.dpsgd.FLASH_IMPLS   flash_impl's choices
 *   dp.dpsgd.STYLES        clipping's choices: flat, per_layer, per_block, groups (lua_dp_clipping.c)
 *   dp.dpsgd.CLIP_FNS      clip_fn's choices: abadi, automatic
 *   dp.dpsgd.DEFAULTS      {max_grad_norm=, noise_multiplier=, delta=, poisson=, seed=, flash_impl=,
 *                        clipping=, clip_fn=, gamma=, accountant=}: what wrap (and an experiment) take
 *                        when not told
 *
 * `priv.clip` is the clip phase (a method), so the clip choice is read as priv.clip_method or
 * priv:stats().clip. The wrapper's user values keep the model and the optimizer alive; the
 * batch of the current forward is held and pinned by the model's userdata like one of
 * m:forward's (lua_model.c), and after every phase the pins follow what the model still holds.
 * The engine refuses a backward or clip whose forward the model no longer holds. As with
 * tensors, the userdata is made empty first and the engine object attached after, so an error in
 * between leaks nothing; __gc, __close and :free() share one idempotent release. */
#include "lua_engine.h"

#include "comm_nccl.h"
#include "dpsgd.h"
#include "error.h"
#include "lua_util.h"
#include "options_schema.h"
#include "scope.h"

#include <lauxlib.h>
#include <math.h>
#include <string.h>

#define DP_MT "dpprof.dpsgd"

enum { UV_MODEL = 1, UV_OPTIM = 2, N_UV = 2 };

typedef struct dpl_dp {
    dpsgd *dp;
} dpl_dp;

static dpl_dp *to_dp(lua_State *L, int idx) { return luaL_checkudata(L, idx, DP_MT); }

/* The live wrapper at idx; also checks that its model was not freed under it. */
static dpsgd *check_dp(lua_State *L, int idx) {
    dpl_dp *u = to_dp(L, idx);
    if (!u->dp) luaL_argerror(L, idx, "DP wrapper was freed");
    lua_getiuservalue(L, idx, UV_MODEL);
    if (!dpl_model_or_freed(L, lua_gettop(L))) luaL_error(L, "DP wrapper: its model was freed (m:free())");
    lua_pop(L, 1);
    return u->dp;
}

static int fail(lua_State *L, const char *fname) { return luaL_error(L, "%s: %s", fname, dp_error_message()); }

/* ---- dpprof.dpsgd.wrap --------------------------------------------------------------------------- */

/* wrap's options (dpprof.dpsgd.WRAP_KEYS, in this order): the one list of them. dp.experiment's dp
 * table takes them less five it deliberately sets elsewhere (method, norms and clip are an
 * experiment's top-level keys, as is seed, which seeds the whole run; expected_batch_size is its
 * model.batch) and plus its own accountant (which the wrapper takes per epsilon() call). */
static const char *wrap_keys[DPO_N_OPTIONS + 1]; /* the schema's dp section less DPO_EXPERIMENT's */

static void read_options(lua_State *L, int idx, dpsgd_config *cfg) {
    const char *fname = "dpprof.dpsgd.wrap";
    dpl_check_keys(L, idx, fname, wrap_keys);
    dpsgd_config_default(cfg);
    const char *method = dpl_opt_str_field(L, idx, fname, "method", NULL);
    const char *norms = dpl_opt_str_field(L, idx, fname, "norms", NULL);
    const char *clip = dpl_opt_str_field(L, idx, fname, "clip", NULL);
    if (method && (norms || clip)) luaL_error(L, "%s: give either 'method' or 'norms' and 'clip', not both", fname);
    if (method) {
        if (dpsgd_method_preset(method, &cfg->norms, &cfg->clip) != DP_OK) fail(L, fname);
    } else if (norms || clip) {
        char choices[256];
        if (!norms || !clip)
            luaL_error(L, "%s: 'norms' and 'clip' go together (%s)", fname,
                       dpsgd_choices_text(choices, sizeof choices));
        if (dpsgd_norms_parse(norms, &cfg->norms) != DP_OK || dpsgd_clip_parse(clip, &cfg->clip) != DP_OK)
            fail(L, fname);
    } else {
        char valid[256];
        luaL_error(L, "%s: 'method' is required (valid: %s), or 'norms' and 'clip'", fname,
                   dpsgd_list_join(DPSGD_LIST_PRESETS, valid, sizeof valid));
    }
    dpl_dp_read_clipping(L, idx, fname, cfg); /* max_grad_norm among them */
    cfg->noise_multiplier = dpl_opt_num_field(L, idx, fname, "noise_multiplier", cfg->noise_multiplier);
    cfg->sample_rate = dpl_opt_num_field(L, idx, fname, "sample_rate", cfg->sample_rate);
    cfg->dataset_size = dpl_opt_int_field(L, idx, fname, "dataset_size", cfg->dataset_size);
    cfg->expected_batch_size = dpl_opt_int_field(L, idx, fname, "expected_batch_size", cfg->expected_batch_size);
    cfg->max_physical_batch_size =
        dpl_opt_int_field(L, idx, fname, "max_physical_batch_size", cfg->max_physical_batch_size);
    cfg->poisson = dpl_opt_bool_field(L, idx, fname, "poisson", cfg->poisson);
    cfg->seed = (uint64_t)dpl_opt_int_field(L, idx, fname, "seed", (lua_Integer)cfg->seed);
    cfg->delta = dpl_opt_num_field(L, idx, fname, "delta", cfg->delta);
    const char *impl = dpl_opt_str_field(L, idx, fname, "flash_impl", NULL);
    if (impl && dpsgd_flash_impl_parse(impl, &cfg->flash_impl) != DP_OK) fail(L, fname);
    if (cfg->sample_rate == 0.0) { /* 0 is the engine's "derive it": given, it is refused */
        if (lua_getfield(L, idx, "sample_rate") != LUA_TNIL)
            luaL_error(L, "%s: 'sample_rate' must be in (0, 1] (got 0)", fname);
        lua_pop(L, 1); /* only what lua_getfield pushed: the options table stays at idx */
    }
}

static void distribute(lua_State *L, int idx, const char *fname, const dpsgd_dist_config *cfg);

/* wrap(model, optimizer, options) -> priv */
static int l_wrap(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    luaL_checktype(L, 3, LUA_TTABLE);
    dpsgd_config cfg;
    read_options(L, 3, &cfg);
    dpl_dp *u = lua_newuserdatauv(L, sizeof *u, N_UV);
    u->dp = NULL;
    luaL_setmetatable(L, DP_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, UV_MODEL);
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, UV_OPTIM);
    if (dpsgd_new(m, &cfg, &u->dp) != DP_OK) return fail(L, "dpprof.dpsgd.wrap");
    dpl_dp_set_groups(L, 3, "dpprof.dpsgd.wrap", &cfg, u->dp);
    dpsgd_dist_config dist; /* a model made with distributed = {...} trains as one rank */
    if (dpl_model_distributed(L, 1, &dist)) distribute(L, lua_gettop(L), "dpprof.dpsgd.wrap", &dist);
    return 1;
}

/* dp.check(options, model_batch) -> true: the checks wrap makes of its options (keys, methods,
 * C, sigma, delta, and sample rate, dataset size and batch agreeing), without a model. */
static int l_check(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer model_batch = luaL_checkinteger(L, 2);
    dpsgd_config cfg;
    read_options(L, 1, &cfg);
    if (dpsgd_config_check(&cfg, (int64_t)model_batch) != DP_OK) return fail(L, "dpprof.dpsgd.wrap");
    dpl_dp_set_groups(L, 1, "dpprof.dpsgd.wrap", &cfg, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- the phases ------------------------------------------------------------------------------- */

/* Pushes the plan's physical batch sizes {n1, ...}. */
static void push_split(lua_State *L, const dpsgd_step_plan *plan) {
    lua_createtable(L, (int)(plan->n_physical < 1 << 20 ? plan->n_physical : 0), 0);
    for (int64_t k = 0; k < plan->n_physical; k++) {
        lua_pushinteger(L, dpsgd_step_plan_batch(plan, k));
        lua_rawseti(L, -2, k + 1);
    }
}

/* dp.dpsgd.split(n, max_physical) -> {n1, ...} ({} for n = 0) */
static int l_split(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1), max = luaL_checkinteger(L, 2);
    luaL_argcheck(L, n >= 0 && n <= (lua_Integer)1 << 40, 1, "the logical batch size must be an integer in 0..2^40");
    luaL_argcheck(L, max >= 1, 2, "max_physical_batch_size must be an integer >= 1");
    dpsgd_step_plan plan;
    dpsgd_split((int64_t)n, (int64_t)max, &plan);
    push_split(L, &plan);
    return 1;
}

/* dp.dpsgd.poisson_draw(seed, step, q, N) -> {i1, ...} (1-based, increasing) */
static int l_poisson_draw(lua_State *L) {
    lua_Integer seed = luaL_checkinteger(L, 1), step = luaL_checkinteger(L, 2), N = luaL_checkinteger(L, 4);
    double q = luaL_checknumber(L, 3);
    luaL_argcheck(L, step >= 0, 2, "the step must be an integer >= 0");
    luaL_argcheck(L, q > 0 && q <= 1, 3, "the sample rate must be in (0, 1]");
    luaL_argcheck(L, N >= 1 && N <= (lua_Integer)1 << 31, 4, "the data set size must be an integer in 1..2^31");
    int64_t n = dpsgd_poisson_members((uint64_t)seed, (int64_t)step, q, (int64_t)N, NULL, 0);
    int64_t *ids = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ids, 0);
    dpsgd_poisson_members((uint64_t)seed, (int64_t)step, q, (int64_t)N, ids, n);
    lua_createtable(L, n < 1 << 24 ? (int)n : 0, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i] + 1);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* priv:next_step() -> {logical_size=n, physical={n1, ...}} */
static int l_next_step(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    dpsgd_step_plan plan;
    if (dpsgd_next_step(dp, &plan) != DP_OK) return fail(L, "priv:next_step");
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, plan.logical_size);
    lua_setfield(L, -2, "logical_size");
    push_split(L, &plan);
    lua_setfield(L, -2, "physical");
    lua_pushinteger(L, plan.first);
    lua_setfield(L, -2, "first");
    lua_pushinteger(L, plan.n_padding);
    lua_setfield(L, -2, "padding");
    /* the samples drawn (1-based), when the data set is known */
    if (dpsgd_config_of(dp)->dataset_size > 0 && plan.logical_size < 1 << 24) {
        int64_t n = plan.logical_size, *ids = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ids, 0);
        n = dpsgd_step_members(dp, ids, n);
        lua_createtable(L, (int)n, 0);
        for (int64_t i = 0; i < n; i++) {
            lua_pushinteger(L, ids[i] + 1);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -3, "samples");
        lua_pop(L, 1);
    }
    return 1;
}

/* Makes the wrapper at idx one rank of cfg's world (dpsgd_distribute); raises as fname. */
static void distribute(lua_State *L, int idx, const char *fname, const dpsgd_dist_config *cfg) {
    if (dpsgd_distribute(check_dp(L, idx), cfg) != DP_OK) fail(L, fname);
}

/* priv:distribute{strategy=, world_size=, rank=}: trains as one rank (see distribute). Strategies:
 * ddp (the default), zero2, fsdp. */
static int l_distribute(lua_State *L) {
    const char *fname = "priv:distribute";
    check_dp(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    dpsgd_dist_config cfg;
    dpl_dist_read(L, 2, fname, &cfg);
    distribute(L, 1, fname, &cfg);
    return 0;
}

/* priv:reduce_grads(): sums the step's gradients across the ranks (the comm phase). */
static int l_reduce_grads(lua_State *L) {
    if (dpsgd_reduce_grads(check_dp(L, 1)) != DP_OK) return fail(L, "priv:reduce_grads");
    return 0;
}

/* priv:gather_params(): zero2's all-gather of the updated parameters (after the optimizer); fsdp's
 * release of the spent gradient parts. */
static int l_gather_params(lua_State *L) {
    if (dpsgd_gather_params(check_dp(L, 1)) != DP_OK) return fail(L, "priv:gather_params");
    return 0;
}

/* priv:unshard(): fsdp's all-gather of the whole model at the end of training (nothing otherwise). */
static int l_unshard(lua_State *L) {
    if (dpsgd_unshard(check_dp(L, 1)) != DP_OK) return fail(L, "priv:unshard");
    return 0;
}

/* After a phase: the model's pins follow the state it still holds. */
static void sync_model(lua_State *L) {
    lua_getiuservalue(L, 1, UV_MODEL);
    dpl_model_sync_batch(L, lua_gettop(L));
    lua_pop(L, 1);
}

/* priv:forward(batch) -> loss, {L_1, ..., L_B} */
static int l_forward(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    dp_tensor *in, *tg;
    int held = dpl_batch_prepare(L, 2, "priv:forward", &in, &tg);
    if (in->ndim != 2 || in->dtype != DP_I32)
        return luaL_error(L, "priv:forward: batch.inputs must be an i32 B x T tensor");
    int64_t B = in->shape[0];
    float *losses = lua_newuserdatauv(L, (size_t)(B > 0 ? B : 1) * sizeof *losses, 0); /* owned by Lua */
    float loss;
    int rc = dpsgd_forward(dp, in, tg, &loss, losses);
    sync_model(L);
    if (rc != DP_OK) return fail(L, "priv:forward");
    lua_getiuservalue(L, 1, UV_MODEL);
    dpl_model_hold_batch(L, lua_gettop(L), held); /* the model keeps views of it until the clip */
    lua_pop(L, 1);
    lua_pushnumber(L, loss);
    lua_createtable(L, (int)B, 0);
    for (int64_t i = 0; i < B; i++) {
        lua_pushnumber(L, losses[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

/* priv:forward_padding() -> loss (0): a padding physical batch's forward (step.padding) */
static int l_forward_padding(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    float loss;
    int rc = dpsgd_forward_padding(dp, &loss);
    sync_model(L);
    if (rc != DP_OK) return fail(L, "priv:forward_padding");
    lua_pushnumber(L, loss);
    return 1;
}

static int l_backward(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    int rc = dpsgd_backward(dp);
    sync_model(L);
    if (rc != DP_OK) return fail(L, "priv:backward");
    return 0;
}

/* priv:clip() -> nil | norm, i: the first per-sample gradient norm that is not finite and its
 * sample (a scan of figures already on the host, so a caller checks every step for free) */
static int l_clip(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    int rc = dpsgd_clip(dp);
    sync_model(L);
    if (rc != DP_OK) return fail(L, "priv:clip");
    size_t n;
    const float *norms = dpsgd_norms(dp, &n);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(norms[i])) {
            lua_pushnumber(L, norms[i]);
            lua_pushinteger(L, (lua_Integer)i + 1);
            return 2;
        }
    }
    return 0;
}

static int l_noise(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    if (dpsgd_noise(dp) != DP_OK) return fail(L, "priv:noise");
    return 0;
}

/* ---- figures ---------------------------------------------------------------------------------- */

static void push_floats(lua_State *L, const float *v, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushnumber(L, v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void set_str(lua_State *L, const char *key, const char *v) {
    if (v)
        lua_pushstring(L, v);
    else
        lua_pushnil(L);
    lua_setfield(L, -2, key);
}

static const char *method_name(const dpsgd_config *c) {
    const char *p = dpsgd_method_preset_name(c->norms, c->clip);
    return p ? p : NULL;
}

/* priv:stats() -> {norms=, clip_factors=, layers={{module=, kind=, norms=}}, steps=, method=, ...} */
static int l_stats(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    const dpsgd_config *c = dpsgd_config_of(dp);
    size_t n;
    lua_createtable(L, 0, 12);
    const float *norms = dpsgd_norms(dp, &n); /* sets n: not in the same call's arguments */
    push_floats(L, norms, n);
    lua_setfield(L, -2, "norms");
    const float *factors = dpsgd_clip_factors(dp, &n);
    push_floats(L, factors, n);
    lua_setfield(L, -2, "clip_factors");
    size_t nl = dpsgd_layer_count(dp);
    lua_createtable(L, (int)nl, 0);
    for (size_t i = 0; i < nl; i++) {
        const dpsgd_layer_info *l = dpsgd_layer(dp, i);
        lua_createtable(L, 0, 3);
        set_str(L, "module", dp_module_name(l->module));
        set_str(L, "kind", l->kind);
        set_str(L, "norms", dpsgd_formulation_name(l->norms));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "layers");
    lua_pushinteger(L, dpsgd_steps(dp));
    lua_setfield(L, -2, "steps");
    int vanilla = c->norms == DPSGD_NORMS_NONE;
    const char *preset = method_name(c);
    if (preset)
        lua_pushstring(L, preset);
    else
        lua_pushfstring(L, "%s+%s", dpsgd_norms_name(c->norms), dpsgd_clip_name(c->clip));
    lua_setfield(L, -2, "method");
    set_str(L, "norms_method", vanilla ? NULL : dpsgd_norms_name(c->norms));
    set_str(L, "clip", vanilla ? NULL : dpsgd_clip_name(c->clip));
    lua_pushnumber(L, c->max_grad_norm);
    lua_setfield(L, -2, "max_grad_norm");
    lua_pushnumber(L, c->noise_multiplier);
    lua_setfield(L, -2, "noise_multiplier");
    lua_pushnumber(L, dpsgd_sample_rate(dp));
    lua_setfield(L, -2, "sample_rate");
    lua_pushinteger(L, dpsgd_expected_batch_size(dp));
    lua_setfield(L, -2, "expected_batch_size");
    lua_pushinteger(L, c->max_physical_batch_size);
    lua_setfield(L, -2, "max_physical_batch_size");
    if (!vanilla) {
        dpl_dp_push_clipping(L, dp);
        lua_setfield(L, -2, "clipping");
    }
    return 1;
}

/* priv:epsilon([delta [, accountant]]) -> epsilon after the steps taken, by the accountant
 * ("prv" by default, "rdp", "pld"); math.huge for vanilla or sigma = 0 */
static int l_epsilon(lua_State *L) {
    dpsgd *dp = check_dp(L, 1);
    double delta = luaL_optnumber(L, 2, 0.0);
    if (!lua_isnoneornil(L, 2) && !(delta > 0.0 && delta < 1.0)) return luaL_argerror(L, 2, "delta must be in (0, 1)");
    dp_acct_kind kind = DP_ACCT_DEFAULT;
    char err[128];
    if (!lua_isnoneornil(L, 3) && dp_acct_parse(luaL_checkstring(L, 3), &kind, err, sizeof err) != 0)
        return luaL_argerror(L, 3, err);
    double eps;
    if (dpsgd_epsilon(dp, delta, kind, &eps) != DP_OK) return fail(L, "priv:epsilon");
    lua_pushnumber(L, eps);
    return 1;
}

static int l_free(lua_State *L) {
    dpl_dp *u = to_dp(L, 1);
    dpsgd_free(u->dp);
    u->dp = NULL;
    for (int k = 1; k <= N_UV; k++) {
        lua_pushnil(L);
        lua_setiuservalue(L, 1, k);
    }
    return 0;
}

static int l_tostring(lua_State *L) {
    dpl_dp *u = to_dp(L, 1);
    if (!u->dp) {
        lua_pushliteral(L, "dpprof.dpsgd(freed)");
        return 1;
    }
    const dpsgd_config *c = dpsgd_config_of(u->dp);
    const char *preset = method_name(c);
    lua_pushfstring(L, "dpprof.dpsgd(%s: norms %s, clip %s, C %f, sigma %f, steps %d)", preset ? preset : "custom",
                    dpsgd_norms_name(c->norms), dpsgd_clip_name(c->clip), c->max_grad_norm, c->noise_multiplier,
                    (int)dpsgd_steps(u->dp));
    return 1;
}

static const luaL_Reg methods[] = {
    {"next_step", l_next_step},
    {"forward_padding", l_forward_padding},
    {"forward", l_forward},
    {"backward", l_backward},
    {"clip", l_clip},
    {"noise", l_noise},
    {"stats", l_stats},
    {"epsilon", l_epsilon},
    {"free", l_free},
    {"distribute", l_distribute},
    {"reduce_grads", l_reduce_grads},
    {"gather_params", l_gather_params},
    {"unshard", l_unshard},
    {NULL, NULL},
};

/* The choice fields method, norms and clip_method (dpl_new_type's __index looks in the methods
 * first); nil once freed */
static int l_fields(lua_State *L) {
    const char *key = luaL_checkstring(L, 2);
    dpl_dp *u = to_dp(L, 1);
    if (!u->dp) {
        lua_pushnil(L);
        return 1;
    }
    const dpsgd_config *c = dpsgd_config_of(u->dp);
    int vanilla = c->norms == DPSGD_NORMS_NONE;
    if (strcmp(key, "method") == 0) {
        const char *preset = method_name(c);
        if (preset)
            lua_pushstring(L, preset);
        else
            lua_pushfstring(L, "%s+%s", dpsgd_norms_name(c->norms), dpsgd_clip_name(c->clip));
    } else if (strcmp(key, "norms") == 0) {
        if (vanilla)
            lua_pushnil(L);
        else
            lua_pushstring(L, dpsgd_norms_name(c->norms));
    } else if (strcmp(key, "clip_method") == 0) {
        if (vanilla)
            lua_pushnil(L);
        else
            lua_pushstring(L, dpsgd_clip_name(c->clip));
    } else {
        lua_pushnil(L);
    }
    return 1;
}

/* ---- the engine's lists and defaults ---------------------------------------------------------- */

/* Sets t[key] (t on top) to the names of list, in order. */
static void set_list(lua_State *L, const char *key, dpsgd_list list) {
    lua_newtable(L);
    for (size_t i = 0; dpsgd_list_name(list, i); i++) {
        lua_pushstring(L, dpsgd_list_name(list, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, key);
}

/* PRESETS = {name = {norms=, clip=}} (vanilla: {}), from the engine's one table. */
static void set_presets(lua_State *L) {
    lua_newtable(L);
    for (size_t i = 0; dpsgd_list_name(DPSGD_LIST_PRESETS, i); i++) {
        const char *name = dpsgd_list_name(DPSGD_LIST_PRESETS, i);
        dpsgd_norms_method n;
        dpsgd_clip_method c;
        if (dpsgd_method_preset(name, &n, &c) != DP_OK) luaL_error(L, "dpprof.dpsgd: %s", dp_error_message());
        lua_createtable(L, 0, 2);
        set_str(L, "norms", n == DPSGD_NORMS_NONE ? NULL : dpsgd_norms_name(n));
        set_str(L, "clip", c == DPSGD_CLIP_NONE ? NULL : dpsgd_clip_name(c));
        lua_setfield(L, -2, name);
    }
    lua_setfield(L, -2, "PRESETS");
}

/* DEFAULTS: wrap's option defaults (dpsgd_config_default) and the default accountant. */
static void set_defaults(lua_State *L) {
    dpsgd_config cfg;
    dpsgd_config_default(&cfg);
    lua_createtable(L, 0, 7);
    lua_pushnumber(L, cfg.max_grad_norm);
    lua_setfield(L, -2, "max_grad_norm");
    lua_pushnumber(L, cfg.noise_multiplier);
    lua_setfield(L, -2, "noise_multiplier");
    lua_pushnumber(L, cfg.delta);
    lua_setfield(L, -2, "delta");
    lua_pushboolean(L, cfg.poisson);
    lua_setfield(L, -2, "poisson");
    lua_pushinteger(L, (lua_Integer)cfg.seed);
    lua_setfield(L, -2, "seed");
    set_str(L, "flash_impl", dpsgd_flash_impl_name(cfg.flash_impl));
    set_str(L, "clipping", dpsgd_style_name(cfg.clipping));
    set_str(L, "clip_fn", dpsgd_clip_fn_name(cfg.clip_fn));
    lua_pushnumber(L, cfg.gamma);
    lua_setfield(L, -2, "gamma");
    set_str(L, "accountant", dp_acct_name(DP_ACCT_DEFAULT));
    lua_setfield(L, -2, "DEFAULTS");
}

void dpl_open_dp(lua_State *L) {
    static const luaL_Reg meta[] = {{"__gc", l_free}, {"__close", l_free}, {"__tostring", l_tostring}, {NULL, NULL}};
    dpl_new_type(L, DP_MT, meta, methods, l_fields);
    lua_newtable(L);
    lua_pushcfunction(L, l_wrap);
    lua_setfield(L, -2, "wrap");
    lua_pushcfunction(L, l_check);
    lua_setfield(L, -2, "check");
    lua_pushcfunction(L, l_split);
    lua_setfield(L, -2, "split");
    lua_pushcfunction(L, l_poisson_draw);
    lua_setfield(L, -2, "poisson_draw");
    dpo_keys(DPO_S_DP, 0, DPO_EXPERIMENT, wrap_keys, DPO_N_OPTIONS + 1);
    dpl_push_keys(L, wrap_keys);
    lua_setfield(L, -2, "WRAP_KEYS");
    set_list(L, "METHODS", DPSGD_LIST_PRESETS);
    set_presets(L);
    set_list(L, "NORMS", DPSGD_LIST_NORMS);
    set_list(L, "CLIPS", DPSGD_LIST_CLIPS);
    set_list(L, "FORMULATIONS", DPSGD_LIST_FORMULATIONS);
    set_list(L, "FLASH_IMPLS", DPSGD_LIST_FLASH_IMPLS);
    set_list(L, "STYLES", DPSGD_LIST_STYLES);
    set_list(L, "CLIP_FNS", DPSGD_LIST_CLIP_FNS);
    set_defaults(L);
    lua_setfield(L, -2, "dpsgd");
}
