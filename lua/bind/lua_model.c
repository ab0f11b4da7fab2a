/* lua_model.c: the model as a Lua userdata ("dpprof.model" metatable) and its methods,
 * dpprof.model{...} (a callable table, so that other bindings can add dpprof.model.load and
 * friends), dpprof.model.check{...} (its option checks, without a device) and dpprof.model.KEYS.
 * Its options are read in lua_model_options.c, the checkpoint setting's grammar is
 * lua_checkpoint.c's, batches lua_batch.c's. *
 * As with tensors (liolib's order), the userdata is created empty with its metatable before the
 * model is built, so an error in between leaks nothing; __gc, __close and :free() share one
 * idempotent release.
 *
 * The userdata's user value holds the two tensors (not the script's table, whose fields a script
 * may reassign) of the batch whose forward the model holds, whoever ran it (m:forward or a DP
 * wrapper's), and pins them: while the model holds that forward, the tensors cannot be collected,
 * freed or written (lua_tensor.c), since its backward indexes tables with the ids the forward
 * checked. The pins go as soon as the engine no longer holds that forward (a backward that does
 * not retain, another forward, release_activations, free), which every binding that can change
 * the model's saved state checks after its call (dpl_model_sync_batch). */
#include "lua_engine.h"

#include "comm.h"
#include "dpsgd_strategy.h"

#include "error.h"
#include "lua_util.h"
#include "model.h"
#include "ops.h"
#include "options_schema.h"
#include "scope.h"

#include <lauxlib.h>
#include <math.h>
#include <string.h>

#define MODEL_MT "dpprof.model"
#define TENSOR_MT "dpprof.tensor"

typedef struct dpl_model {
    dp_model *m;
    int distributed;        /* whether it was made with a `distributed` option, */
    dpsgd_dist_config dist; /* and that option */
    int64_t last_batch;                       /* B of the forward whose batch is held (0: none) */
    uint64_t held_id;                         /* the engine's id of that forward (dp_model_forward_id; 0: none) */
} dpl_model;

static dpl_model *to_model(lua_State *L, int idx) { return luaL_checkudata(L, idx, MODEL_MT); }

dp_model *dpl_check_model(lua_State *L, int idx) {
    dpl_model *u = to_model(L, idx);
    if (!u->m) luaL_argerror(L, idx, "model was freed");
    return u->m;
}

dp_model *dpl_model_or_freed(lua_State *L, int idx) { return to_model(L, idx)->m; }

static void gc_hint(lua_State *L, uint64_t bytes) {
    uint64_t kb = bytes >> 10;
    if (kb) lua_gc(L, LUA_GCSTEP, (int)(kb > (1u << 20) ? (1u << 20) : kb));
}

/* An empty model userdata with its metatable and one user value (the last batch). */
static dpl_model *push_empty(lua_State *L) {
    dpl_model *u = lua_newuserdatauv(L, sizeof *u, 1);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, MODEL_MT);
    return u;
}

static int push_empty_protected(lua_State *L) {
    push_empty(L);
    return 1;
}

void dpl_push_model(lua_State *L, dp_model *m) {
    /* the userdata is made under a pcall: if Lua runs out of memory, m is freed, not leaked */
    lua_pushcfunction(L, push_empty_protected);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        dp_model_free(m);
        lua_error(L);
    }
    ((dpl_model *)lua_touserdata(L, -1))->m = m;
    gc_hint(L, (uint64_t)dp_model_num_params(m, 0) * 4);
}

int dpl_model_distributed(lua_State *L, int idx, dpsgd_dist_config *cfg) {
    dpl_model *u = to_model(L, idx);
    if (u->distributed) *cfg = u->dist;
    return u->distributed;
}
/* Raises the engine's error as dpprof.model's: "dpprof.model: ..." (the configuration checks
 * already say "model: ..."; an allocation failure does not). */
static int model_fail(lua_State *L) {
    const char *msg = dp_error_message();
    if (strncmp(msg, "model: ", 7) == 0) return luaL_error(L, "dpprof.%s", msg);
    return luaL_error(L, "dpprof.model: %s", msg);
}

/* dpprof.model{...} (called as the table dpprof.model, so the options are argument 2) */
static int l_model_new(lua_State *L) {
    dp_model_config cfg;
    dp_device *dev = dpl_model_read_config(L, 2, &cfg);
    if (dp_model_config_check(&cfg) != DP_OK) return model_fail(L);
    dpsgd_dist_config dist;
    int distributed = dpl_model_distributed_option(L, 2, "dpprof.model", &dist);
    if (distributed && dist.strategy == DPSGD_STRATEGY_FSDP && !dp_model_config_parted(&cfg)) {
        int64_t world, rank; /* fsdp: built in parts for its rank of the world it is placed in */
        if (dpsgd_dist_place(&dist, dev->kind, &world, &rank) != DP_OK)
            return luaL_error(L, "dpprof.model: %s", dp_error_message());
        if (world > 1) cfg.parts_world = world, cfg.parts_rank = rank;
    }
    dpl_model *u = push_empty(L);
    if (dp_model_new(dev, &cfg, &u->m) != DP_OK) return model_fail(L);
    u->distributed = distributed;
    if (distributed) u->dist = dist;
    gc_hint(L, (uint64_t)dp_model_num_params(u->m, 0) * 4);
    return 1;
}

/* dpprof.model.check{...} -> true: the checks dpprof.model makes of its options (keys, types,
 * sizes that fit together), raising the same errors, without a device and without building
 * anything (the device key, when given, is not looked at). */
static int l_model_check(lua_State *L) {
    dp_model_config cfg;
    dpl_model_read_options(L, 1, &cfg);
    if (dp_model_config_check(&cfg) != DP_OK) return model_fail(L);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- the batch a model holds ----------------------------------------------------------------------------- */

/* The live tensor at field key of the table at idx, left on the stack. */
static dp_tensor *batch_tensor(lua_State *L, int idx, const char *key, const char *fname) {
    lua_getfield(L, idx, key);
    if (!luaL_testudata(L, -1, TENSOR_MT))
        luaL_error(L, "%s: batch.%s must be a tensor (got %s); make batches with dpprof.batch", fname, key,
                   luaL_typename(L, -1));
    lua_getfield(L, -1, "alive");
    if (!lua_toboolean(L, -1)) luaL_error(L, "%s: batch.%s was freed", fname, key);
    lua_pop(L, 1);
    return dpl_check_tensor(L, lua_gettop(L));
}

int dpl_batch_prepare(lua_State *L, int batch, const char *fname, dp_tensor **inputs, dp_tensor **targets) {
    batch = lua_absindex(L, batch);
    luaL_checktype(L, batch, LUA_TTABLE);
    lua_createtable(L, 2, 0);
    *inputs = batch_tensor(L, batch, "inputs", fname);
    lua_rawseti(L, -2, 1);
    *targets = batch_tensor(L, batch, "targets", fname);
    lua_rawseti(L, -2, 2);
    return lua_gettop(L);
}

/* Unpins and forgets the batch the model userdata at idx holds. */
static void drop_batch(lua_State *L, int idx) {
    dpl_model *u = to_model(L, idx);
    if (lua_getiuservalue(L, idx, 1) == LUA_TTABLE)
        for (int i = 1; i <= 2; i++) {
            if (lua_rawgeti(L, -1, i) == LUA_TUSERDATA) dpl_tensor_pin(L, lua_gettop(L), -1);
            lua_pop(L, 1);
        }
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_setiuservalue(L, idx, 1);
    u->last_batch = 0;
    u->held_id = 0;
}

void dpl_model_sync_batch(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    dpl_model *u = to_model(L, idx);
    if (u->held_id && (!u->m || dp_model_forward_id(u->m) != u->held_id)) drop_batch(L, idx);
}

void dpl_model_hold_batch(lua_State *L, int idx, int prepared) {
    idx = lua_absindex(L, idx);
    prepared = lua_absindex(L, prepared);
    dpl_model *u = to_model(L, idx);
    drop_batch(L, idx); /* nothing below allocates: the pins cannot be left half made */
    for (int i = 1; i <= 2; i++) {
        lua_rawgeti(L, prepared, i);
        dpl_tensor_pin(L, lua_gettop(L), 1);
        if (i == 1) u->last_batch = dpl_check_tensor(L, lua_gettop(L))->shape[0];
        lua_pop(L, 1);
    }
    lua_pushvalue(L, prepared);
    lua_setiuservalue(L, idx, 1);
    u->held_id = dp_model_forward_id(u->m);
}

/* ---- methods ----------------------------------------------------------------------------- */

/* m:forward(batch) -> loss, {L_1, ..., L_B} */
static int l_forward(lua_State *L) {
    const char *fname = "model:forward";
    dp_model *m = dpl_check_model(L, 1);
    dp_tensor *in, *tg;
    int held = dpl_batch_prepare(L, 2, fname, &in, &tg);
    if (in->dtype != DP_I32 || in->ndim != 2 || in->shape[0] < 1)
        return luaL_error(L, "%s: batch.inputs must be i32 B x T (make batches with dpprof.batch)", fname);
    const int64_t B = in->shape[0]; /* ids outside the vocabulary: dp_model_forward says which */
    float *per = lua_newuserdatauv(L, (size_t)B * sizeof *per, 0);
    float loss;
    int rc = dp_model_forward(m, in, tg, &loss, per);
    dpl_model_sync_batch(L, 1); /* the earlier forward's state is gone either way */
    if (rc != DP_OK) return dpl_fail(L);
    dpl_model_hold_batch(L, 1, held);
    lua_pushnumber(L, loss);
    lua_createtable(L, (int)B, 0);
    for (int64_t i = 0; i < B; i++) {
        lua_pushnumber(L, per[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

/* m:backward{scale=nil|{s_1..s_B}, weight_grads=true, retain=false} */
static int l_backward(lua_State *L) {
    static const char *const keys[] = {"scale", "weight_grads", "retain", NULL};
    const char *fname = "model:backward";
    dpl_model *u = to_model(L, 1);
    dp_model *m = dpl_check_model(L, 1);
    lua_settop(L, 2);
    if (lua_isnil(L, 2)) lua_newtable(L), lua_replace(L, 2);
    dpl_check_keys(L, 2, fname, keys);
    dpl_model_sync_batch(L, 1);
    if (!u->held_id) return luaL_error(L, "%s: no forward to go back through (call m:forward first)", fname);
    dp_backward_opts o = {NULL, dpl_opt_bool_field(L, 2, fname, "weight_grads", 1),
                          dpl_opt_bool_field(L, 2, fname, "retain", 0), NULL};
    int t = lua_getfield(L, 2, "scale");
    if (t == LUA_TTABLE) {
        if (luaL_len(L, -1) != u->last_batch)
            return luaL_error(L, "%s: 'scale' has %d values; the forward had %d samples", fname, (int)luaL_len(L, -1),
                              (int)u->last_batch);
        float *s = lua_newuserdatauv(L, (size_t)u->last_batch * sizeof *s, 0);
        for (int64_t i = 0; i < u->last_batch; i++) {
            lua_geti(L, -2, i + 1);
            int isnum;
            s[i] = (float)lua_tonumberx(L, -1, &isnum);
            if (!isnum) return luaL_error(L, "%s: scale[%d] is not a number", fname, (int)(i + 1));
            lua_pop(L, 1);
        }
        o.sample_scale = s;
    } else if (t != LUA_TNIL) {
        return luaL_error(L, "%s: 'scale' must be a list of %d numbers or nil", fname, (int)u->last_batch);
    }
    int rc = dp_model_backward(m, &o);
    dpl_model_sync_batch(L, 1); /* unpinned unless retained */
    if (rc != DP_OK) return dpl_fail(L);
    return 0;
}

static int l_num_params(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    lua_pushinteger(L, dp_model_num_params(m, lua_toboolean(L, 2)));
    return 1;
}

static const char *kind_name(dp_param_kind k) {
    static const char *const names[] = {"embedding", "position", "linear_w", "linear_b", "norm_w",
                                        "norm_b",    "lora_a",   "lora_b",   "head"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

static void push_shape(lua_State *L, const dp_tensor *t) {
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* m:params() -> {{name=, shape=, kind=, trainable=, numel=, module=, hf_transposed=}, ...} */
static int l_params(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    int n = dp_model_param_count(m);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        dp_param *p = dp_model_param(m, i);
        lua_createtable(L, 0, 7);
        lua_pushstring(L, p->name), lua_setfield(L, -2, "name");
        push_shape(L, &p->value), lua_setfield(L, -2, "shape");
        lua_pushstring(L, kind_name(p->kind)), lua_setfield(L, -2, "kind");
        lua_pushboolean(L, p->trainable), lua_setfield(L, -2, "trainable");
        lua_pushinteger(L, p->value.numel), lua_setfield(L, -2, "numel");
        lua_pushstring(L, dp_module_name(p->module)), lua_setfield(L, -2, "module");
        lua_pushboolean(L, p->hf_transposed), lua_setfield(L, -2, "hf_transposed");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static dp_param *check_param(lua_State *L, dp_model *m, int idx, const char *fname) {
    const char *name = luaL_checkstring(L, idx);
    dp_param *p = dp_model_param_named(m, name);
    if (!p) luaL_error(L, "%s: no parameter named '%s' (m:params() lists them)", fname, name);
    return p;
}

/* a CPU f32 copy of t (zeros on plan, which holds no values) */
static void push_cpu_copy(lua_State *L, const dp_tensor *t) {
    dp_device *cpu;
    if (dp_device_get(DP_DEV_CPU, &cpu) != DP_OK) dpl_fail(L);
    dp_tensor *c = dpl_push_new_tensor(L, cpu, DP_F32, t->ndim, t->shape, DP_CAT_OTHER);
    if (t->dev->kind == DP_DEV_PLAN) {
        if (dp_tensor_fill(c, 0.0) != DP_OK) dpl_fail(L);
    } else if (dp_tensor_copy(c, t) != DP_OK) {
        dpl_fail(L);
    }
}

/* check_param for a read or write of the whole value, which fsdp's parts do not hold between passes */
static dp_param *check_whole_param(lua_State *L, dp_model *m, int idx, const char *fname) {
    dp_param *p = check_param(L, m, idx, fname);
    if (p->part.alloc.live)
        luaL_error(L,
                   "%s: '%s' is held in parts across the ranks (fsdp): its whole value exists only while a pass "
                   "that reads it runs; read it in on.finished (the experiment gathers the model for it) or after priv:unshard()",
                   fname, p->name);
    return p;
}

static int l_param(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    push_cpu_copy(L, &check_whole_param(L, m, 2, "model:param")->value);
    return 1;
}

static int l_grad(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    dp_param *p = check_param(L, m, 2, "model:grad");
    if (!p->grad.alloc.live)
        lua_pushnil(L);
    else
        push_cpu_copy(L, &p->grad);
    return 1;
}

/* m:set_param(name, t): copies t (f32, any device, same number of elements) into the parameter */
static int l_set_param(lua_State *L) {
    const char *fname = "model:set_param";
    dp_model *m = dpl_check_model(L, 1);
    dp_param *p = check_whole_param(L, m, 2, fname);
    dp_tensor *t = dpl_check_tensor(L, 3);
    if (t->dtype != DP_F32 || t->numel != p->value.numel)
        return luaL_error(L, "%s: '%s' needs f32 with %d elements (got %s with %d)", fname, p->name,
                          (int)p->value.numel, dp_dtype_name(t->dtype), (int)t->numel);
    if (dp_tensor_copy(&p->value, t) != DP_OK) return dpl_fail(L);
    if (p->compute.alloc.live && dp_tensor_copy(&p->compute, &p->value) != DP_OK) return dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* 1 when t holds a NaN or an infinity: its sum of squares, in double, is finite otherwise (an f32
 * or bf16 value squared cannot overflow a double); 0 on plan, which holds no values. */
static int tensor_nonfinite(lua_State *L, const dp_tensor *t) {
    if (t->dev->kind == DP_DEV_PLAN || t->numel == 0) return 0;
    double s;
    if (dp_sumsq(t, &s) != DP_OK) dpl_fail(L);
    return !isfinite(s);
}

/* m:nonfinite([what...]) -> nil | name, kind: the first tensor holding a NaN or an infinity, in
 * the order of the kinds asked for ("parameters", "gradients", "logits"; default all three),
 * parameters and gradients in m:params() order; kind is "parameter", "gradient" or "activation".
 * A parameter held in parts (fsdp) between the passes is read in this rank's part, as its value
 * has no storage then. Reads every tensor asked for (a sum of squares each, synchronising): for after a non-finite
 * loss or norm, not every step. */
static int l_nonfinite(lua_State *L) {
    static const char *const kinds[] = {"parameters", "gradients", "logits", NULL};
    dp_model *m = dpl_check_model(L, 1);
    int top = lua_gettop(L), want[3] = {top < 2, top < 2, top < 2};
    for (int a = 2; a <= top; a++) want[luaL_checkoption(L, a, NULL, kinds)] = 1;
    int n = dp_model_param_count(m);
    for (int k = 0; k < 2; k++) {
        if (!want[k]) continue;
        for (int i = 0; i < n; i++) {
            const dp_param *p = dp_model_param(m, i);
            const dp_tensor *t = k == 1 ? &p->grad : p->part.alloc.live ? &p->part : &p->value;
            if (k == 1 && !p->grad.alloc.live) continue;
            if (tensor_nonfinite(L, t)) {
                lua_pushstring(L, p->name);
                lua_pushstring(L, k == 0 ? "parameter" : "gradient");
                return 2;
            }
        }
    }
    const dp_tensor *logits = dp_model_logits(m);
    if (want[2] && logits && tensor_nonfinite(L, logits)) {
        lua_pushliteral(L, "logits");
        lua_pushliteral(L, "activation");
        return 2;
    }
    lua_pushnil(L);
    return 1;
}

static int l_zero_grad(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    int set_to_none = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
    if (dp_model_zero_grad(m, set_to_none) != DP_OK) return dpl_fail(L);
    return 0;
}

static int l_release_activations(lua_State *L) {
    dp_model_release_activations(dpl_check_model(L, 1));
    dpl_model_sync_batch(L, 1);
    return 0;
}

static int l_sync_compute(lua_State *L) {
    if (dp_model_sync_compute_weights(dpl_check_model(L, 1)) != DP_OK) return dpl_fail(L);
    return 0;
}
/* m:config() -> the configuration with defaults filled in */
static int l_config(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    dpl_push_model_config(L, dp_model_config_of(m));
    lua_pushstring(L, dp_device_kind_name(dp_model_device(m)->kind)), lua_setfield(L, -2, "device");
    return 1;
}

/* m:recompute_log() -> {total_ms=, spans={{start_ms=, end_ms=}...}}: the checkpointed blocks'
 * recomputations since the last call, on dpprof.clock()'s time line in ms (device-synchronised);
 * empties the log. spans holds at most the engine's DP_MODEL_SPAN_LOG; total_ms counts them all. */
static int l_recompute_log(lua_State *L) {
    dp_model *m = dpl_check_model(L, 1);
    size_t n;
    int64_t total;
    const dp_model_span *spans = dp_model_recompute_log(m, &n, &total);
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, (double)total / 1e6), lua_setfield(L, -2, "total_ms");
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushnumber(L, (double)spans[i].start_ns / 1e6), lua_setfield(L, -2, "start_ms");
        lua_pushnumber(L, (double)spans[i].end_ns / 1e6), lua_setfield(L, -2, "end_ms");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "spans");
    dp_model_clear_recompute_log(m);
    return 1;
}

static int l_free(lua_State *L) {
    dpl_model *u = to_model(L, 1);
    if (u->m) {
        dp_model_free(u->m);
        u->m = NULL;
        dpl_model_sync_batch(L, 1);
    }
    return 0;
}

static int l_tostring(lua_State *L) {
    dpl_model *u = to_model(L, 1);
    if (!u->m) {
        lua_pushliteral(L, "model(freed)");
        return 1;
    }
    const dp_model_config *c = dp_model_config_of(u->m);
    lua_pushfstring(L, "model(%s, %d layers, hidden %d, heads %d, vocab %d, %I parameters%s, %s, %s)",
                    dp_arch_name(c->arch), (int)c->layers, (int)c->hidden, (int)c->heads, (int)c->vocab,
                    (lua_Integer)dp_model_num_params(u->m, 0), c->lora_rank > 0 ? " with LoRA" : "",
                    dp_dtype_name(c->dtype), dp_device_kind_name(dp_model_device(u->m)->kind));
    return 1;
}

static const luaL_Reg methods[] = {{"forward", l_forward},
                                   {"backward", l_backward},
                                   {"num_params", l_num_params},
                                   {"params", l_params},
                                   {"param", l_param},
                                   {"grad", l_grad},
                                   {"nonfinite", l_nonfinite},
                                   {"set_param", l_set_param},
                                   {"zero_grad", l_zero_grad},
                                   {"release_activations", l_release_activations},
                                   {"sync_compute_weights", l_sync_compute},
                                   {"config", l_config},
                                   {"recompute_log", l_recompute_log},
                                   {"free", l_free},
                                   {NULL, NULL}};

/* The read-only fields alive, device, arch, dtype (dpl_new_type's __index looks in the methods
 * first) */
static int l_fields(lua_State *L) {
    dpl_model *u = to_model(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "alive") == 0) {
        lua_pushboolean(L, u->m != NULL);
        return 1;
    }
    if (!u->m) return luaL_error(L, "model was freed (reading '%s')", k);
    const dp_model_config *c = dp_model_config_of(u->m);
    if (strcmp(k, "device") == 0)
        lua_pushstring(L, dp_device_kind_name(dp_model_device(u->m)->kind));
    else if (strcmp(k, "arch") == 0)
        lua_pushstring(L, dp_arch_name(c->arch));
    else if (strcmp(k, "dtype") == 0)
        lua_pushstring(L, dp_dtype_name(c->dtype));
    else
        lua_pushnil(L);
    return 1;
}

void dpl_open_model(lua_State *L) {
    static const luaL_Reg meta[] = {{"__gc", l_free}, {"__close", l_free}, {"__tostring", l_tostring}, {NULL, NULL}};
    dpl_new_type(L, MODEL_MT, meta, methods, l_fields);
    /* dpprof.model: a table, callable as the constructor, open to dpprof.model.load & co */
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_model_new);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
    lua_pushcfunction(L, l_model_check);
    lua_setfield(L, -2, "check");
    dpo_keys(DPO_S_MODEL, 0, 0, dpl_model_keys, DPO_N_OPTIONS + 1);
    dpl_push_keys(L, dpl_model_keys);
    lua_setfield(L, -2, "KEYS");
    dpl_add_checkpoint_grammar(L);
    lua_setfield(L, -2, "model");
}
