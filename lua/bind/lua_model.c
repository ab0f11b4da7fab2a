/* lua_model.c: the model as a Lua userdata ("dpprof.model" metatable), dpprof.model{...} (a
 * callable table, so that other bindings can add dpprof.model.load and friends),
 * dpprof.model.check{...} (its option checks, without a device), dpprof.model.KEYS (its
 * options), the checkpoint setting's grammar (dpprof.model.checkpoint_parse, checkpoint_format,
 * checkpoint_name), dpprof.batch and dpprof.free_batch.
 *
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

#include "dist.h"

#include "data.h"
#include "error.h"
#include "lua_util.h"
#include "model.h"
#include "ops.h"
#include "scope.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MT "dpprof.model"
#define TENSOR_MT "dpprof.tensor"

typedef struct dpl_model {
    dp_model *m;
    int dist_strategy, dist_world, dist_rank; /* its `distributed` option (strategy 0: none) */
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

/* ---- configuration ----------------------------------------------------------------------- */

/* dpprof.model's options (dpprof.model.KEYS, in this order): the one list of them. Whoever takes
 * a model's options (dp.experiment's model, the fit command line) reads it and adds or leaves out
 * only its own (an experiment names its device at the top, and takes path= and weights=). */
static const char *const model_keys[] = {"arch",       "vocab",          "hidden",     "layers",      "heads",
                                         "kv_heads",   "head_dim",       "seq_len",    "batch",       "mlp_ratio",
                                         "ffn",        "max_positions",  "tie_head",   "dtype",       "norm_eps",
                                         "rope_theta", "rope_scaling",   "init_std",   "seed",        "device",
                                         "lora",       "master_weights", "checkpoint", "distributed", "parts",
                                         NULL};

static int64_t required_int(lua_State *L, int idx, const char *fname, const char *key) {
    if (lua_getfield(L, idx, key) == LUA_TNIL) luaL_error(L, "%s: '%s' is required (a positive integer)", fname, key);
    lua_pop(L, 1);
    return dpl_opt_int_field(L, idx, fname, key, 0);
}

/* lora = {rank=, alpha=rank, targets={"qkv"}} */
/* The LoRA target bits named by the list at idx (dpprof's groups or PEFT's module names:
 * DP_LORA_TARGET_NAMES); an error naming fname and the valid names for an unknown or empty
 * list. */
unsigned dpl_lora_targets(lua_State *L, int idx, const char *fname) {
    unsigned bits = 0;
    lua_Integer n = luaL_len(L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        const char *name = lua_tostring(L, -1);
        unsigned bit;
        if (!name || dp_lora_target_parse(name, &bit) != 0)
            luaL_error(L, "%s: unknown lora target '%s' (valid: " DP_LORA_TARGET_NAMES ")", fname,
                       name ? name : luaL_typename(L, -1));
        bits |= bit;
        lua_pop(L, 1);
    }
    if (!bits) luaL_error(L, "%s: 'lora.targets' is empty (valid: " DP_LORA_TARGET_NAMES ")", fname);
    return bits;
}

/* rope_scaling = {rope_type=, factor=, ...}: transformers' keys (Llama-3.1: rope_type="llama3",
 * factor=8, low_freq_factor=1, high_freq_factor=4, original_max_position_embeddings=8192) */
static void read_rope_scaling(lua_State *L, int idx, const char *fname, dp_model_config *cfg) {
    static const char *const keys[] = {
        "rope_type", "factor",    "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
        "beta_fast", "beta_slow", "mscale",          "mscale_all_dim",   "attention_factor",
        "truncate",  NULL};
    dp_rope_scaling_default(&cfg->rope);
    int t = lua_getfield(L, idx, "rope_scaling");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE)
        luaL_error(L, "%s: 'rope_scaling' must be a table {rope_type=, factor=, ...} (transformers' keys)", fname);
    int r = lua_gettop(L);
    dpl_check_keys(L, r, "dpprof.model: rope_scaling", keys);
    const char *type = dpl_opt_str_field(L, r, fname, "rope_type", "default");
    if (dp_rope_type_parse(type, &cfg->rope.type) != 0)
        luaL_error(L, "%s: rope type '%s' is not supported (supported: default, linear, llama3, yarn)", fname, type);
    dp_rope_scaling *s = &cfg->rope;
    s->factor = dpl_opt_num_field(L, r, fname, "factor", s->factor);
    s->low_freq_factor = dpl_opt_num_field(L, r, fname, "low_freq_factor", s->low_freq_factor);
    s->high_freq_factor = dpl_opt_num_field(L, r, fname, "high_freq_factor", s->high_freq_factor);
    s->original_max_positions = dpl_opt_int_field(L, r, fname, "original_max_position_embeddings", 0);
    s->beta_fast = dpl_opt_num_field(L, r, fname, "beta_fast", s->beta_fast);
    s->beta_slow = dpl_opt_num_field(L, r, fname, "beta_slow", s->beta_slow);
    s->mscale = dpl_opt_num_field(L, r, fname, "mscale", 0);
    s->mscale_all_dim = dpl_opt_num_field(L, r, fname, "mscale_all_dim", 0);
    s->attention_factor = dpl_opt_num_field(L, r, fname, "attention_factor", 0);
    s->truncate = dpl_opt_bool_field(L, r, fname, "truncate", 1);
    lua_pop(L, 1);
}

static void read_lora(lua_State *L, int idx, const char *fname, dp_model_config *cfg) {
    static const char *const keys[] = {"rank", "alpha", "targets", NULL};
    int t = lua_getfield(L, idx, "lora");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE) luaL_error(L, "%s: 'lora' must be a table {rank=, alpha=, targets=}", fname);
    int li = lua_gettop(L);
    dpl_check_keys(L, li, "dpprof.model: lora", keys);
    int64_t rank = required_int(L, li, "dpprof.model: lora", "rank");
    if (rank <= 0 || rank > 1 << 20)
        luaL_error(L, "%s: 'lora.rank' must be an integer from 1 to %d (got %I)", fname, 1 << 20, (lua_Integer)rank);
    cfg->lora_rank = (int)rank;
    cfg->lora_alpha = (float)dpl_opt_num_field(L, li, fname, "alpha", (double)rank);
    cfg->lora_targets = 0;
    t = lua_getfield(L, li, "targets");
    if (t == LUA_TNIL) {
        cfg->lora_targets = DP_LORA_QKV;
    } else if (t != LUA_TTABLE) {
        luaL_error(L, "%s: 'lora.targets' must be a list of names (valid: " DP_LORA_TARGET_NAMES ")", fname);
    } else {
        cfg->lora_targets = dpl_lora_targets(L, lua_gettop(L), fname);
    }
    lua_pop(L, 2);
}

/* ---- the checkpoint setting's grammar ------------------------------------------------------
 * checkpoint = false | "blocks" | N: the one reader of the setting as scripts, results and the
 * command line write it (dpprof.model, dpprof.model.load, dpprof.model.checkpoint_parse), its one
 * writer (m:config(), read_config, checkpoint_format) and its one display (checkpoint_name);
 * dp_model_checkpoint_check (model_config.c) bounds it by the layers. */

/* The largest N a script may give (every N-th block): the int dp_model_config holds, far past any
 * model's layers (DP_MODEL_MAX_LAYERS). */
#define CHECKPOINT_MAX (1 << 20)

/* The setting at idx (nil or false: 0, "blocks": 1, an integer N in 1..CHECKPOINT_MAX: N), or -1. */
static int checkpoint_value(lua_State *L, int idx) {
    int t = lua_type(L, idx);
    if (t == LUA_TNONE || t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, idx))) return 0;
    if (t == LUA_TSTRING && strcmp(lua_tostring(L, idx), "blocks") == 0) return 1;
    if (lua_isinteger(L, idx) && lua_tointeger(L, idx) >= 1 && lua_tointeger(L, idx) <= CHECKPOINT_MAX)
        return (int)lua_tointeger(L, idx);
    return -1;
}

/* Pushes why the setting at idx is refused: "'checkpoint' must be false, ... got X". */
static const char *push_checkpoint_refusal(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    int quote = lua_type(L, idx) == LUA_TSTRING;
    const char *got = luaL_tolstring(L, idx, NULL);
    lua_pushfstring(L,
                    "'checkpoint' must be false, \"blocks\" (every block) or an integer N >= 1 (every N-th block), "
                    "got %s%s%s",
                    quote ? "\"" : "", got, quote ? "\"" : "");
    lua_remove(L, -2);
    return lua_tostring(L, -1);
}

/* checkpoint = false | "blocks" | N at idx (absent: false): 0, 1 or N, as dp_model_config's. */
int dpl_checkpoint_option(lua_State *L, int idx, const char *fname) {
    lua_getfield(L, idx, "checkpoint");
    int n = checkpoint_value(L, -1);
    if (n < 0) luaL_error(L, "%s: %s", fname, push_checkpoint_refusal(L, -1));
    lua_pop(L, 1);
    return n;
}

/* Pushes checkpoint n as scripts write it: false, "blocks" or N. */
void dpl_push_checkpoint(lua_State *L, int n) {
    if (n == 0)
        lua_pushboolean(L, 0);
    else if (n == 1)
        lua_pushliteral(L, "blocks");
    else
        lua_pushinteger(L, n);
}

/* dpprof.model.checkpoint_parse(v [, layers]) -> n (0 off, 1 every block, N every N-th), or nil
 * and why: dpprof.model's refusal of checkpoint = v (for a model of `layers` blocks, when given)
 * without its "dpprof.model: " */
static int l_checkpoint_parse(lua_State *L) {
    int n = checkpoint_value(L, 1);
    if (n < 0) {
        lua_pushnil(L);
        push_checkpoint_refusal(L, 1);
        return 2;
    }
    if (!lua_isnoneornil(L, 2) && dp_model_checkpoint_check(n, (int64_t)luaL_checkinteger(L, 2)) != DP_OK) {
        const char *msg = dp_error_message();
        lua_pushnil(L);
        lua_pushstring(L, strncmp(msg, "model: ", 7) == 0 ? msg + 7 : msg);
        return 2;
    }
    lua_pushinteger(L, n);
    return 1;
}

/* dpprof.model.checkpoint_format(n) -> the setting n as scripts and results write it: false (0),
 * "blocks" (1) or N; checkpoint_parse's inverse. */
static int l_checkpoint_format(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= CHECKPOINT_MAX, 1, "a checkpoint setting is 0 (off), 1 (every block) or N");
    dpl_push_checkpoint(L, (int)n);
    return 1;
}

/* dpprof.model.checkpoint_name(v) -> the setting v as tables and reports show it: "off",
 * "blocks" or "every N" (as written: 1 is "every 1"); a refused v raises checkpoint_parse's why. */
static int l_checkpoint_name(lua_State *L) {
    int n = checkpoint_value(L, 1);
    if (n < 0) return luaL_error(L, "dpprof.model.checkpoint_name: %s", push_checkpoint_refusal(L, 1));
    if (n == 0)
        lua_pushliteral(L, "off");
    else if (lua_type(L, 1) == LUA_TSTRING)
        lua_pushliteral(L, "blocks");
    else
        lua_pushfstring(L, "every %d", n);
    return 1;
}

/* parts = {world_size = N, rank = r} of the table at idx (absent: whole, 0 and 0): the model built
 * in parts for rank r of N (dp_model_config.parts_world); dp_model_config_check bounds the values. */
void dpl_parts_option(lua_State *L, int idx, const char *fname, int64_t *world, int64_t *rank) {
    static const char *const keys[] = {"world_size", "rank", NULL};
    *world = 0, *rank = 0;
    int t = lua_getfield(L, idx, "parts");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE)
        luaL_error(L, "%s: 'parts' must be a table {world_size = N, rank = r} (the model built in parts for fsdp)",
                   fname);
    int pi = lua_gettop(L);
    dpl_check_keys(L, pi, "dpprof.model: parts", keys);
    *world = required_int(L, pi, "dpprof.model: parts", "world_size");
    if (lua_getfield(L, pi, "rank") == LUA_TNIL)
        luaL_error(L, "%s: 'parts.rank' is required (0 <= rank < world_size)", fname);
    lua_pop(L, 1);
    *rank = dpl_opt_int_field(L, pi, fname, "rank", 0);
    if (*world < 1 || *world > 1 << 20 || *rank < 0 || *rank >= *world)
        luaL_error(L,
                   "%s: 'parts' must be {world_size = N, rank = r} with 1 <= N <= %d and 0 <= r < N (got world_size "
                   "%I, rank %I)",
                   fname, 1 << 20, (lua_Integer)*world, (lua_Integer)*rank);
    lua_pop(L, 1);
}

/* The `distributed` option of the table at idx ({strategy=, world_size=, rank=}, dpprof.dist.KEYS)
 * into out: strategy (0 when absent), world size (0: the launched world's), rank (-1: not given). */
static void read_distributed(lua_State *L, int idx, const char *fname, int out[3]) {
    out[0] = 0, out[1] = 0, out[2] = -1;
    if (lua_getfield(L, idx, "distributed") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (!lua_istable(L, -1)) luaL_error(L, "%s: 'distributed' must be a table {strategy=, world_size=}", fname);
    int t = lua_gettop(L);
    dpl_check_keys(L, t, "dpprof.model: distributed", dpl_dist_keys);
    dp_dist_strategy s = DP_DIST_DDP; /* data parallel unless said */
    const char *name = dpl_opt_str_field(L, t, fname, "strategy", NULL);
    if (name && dp_dist_strategy_parse(name, &s) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    int64_t ws = dpl_opt_int_field(L, t, fname, "world_size", 0), rank = dpl_opt_int_field(L, t, fname, "rank", -1);
    if (ws < 0 || ws > 1 << 20 || rank < -1 || (ws > 0 && rank >= ws))
        luaL_error(L, "%s: distributed.world_size must be >= 1 and distributed.rank below it", fname);
    out[0] = (int)s, out[1] = (int)ws, out[2] = (int)rank;
    lua_pop(L, 1);
}

int dpl_model_distributed(lua_State *L, int idx, int *strategy, int *world_size, int *rank) {
    dpl_model *u = to_model(L, idx);
    *strategy = u->dist_strategy, *world_size = u->dist_world, *rank = u->dist_rank;
    return u->dist_strategy != 0;
}

/* Reads the option table at idx into cfg (all but the device). */
static void read_fields(lua_State *L, int idx, dp_model_config *cfg) {
    const char *fname = "dpprof.model";
    luaL_checktype(L, idx, LUA_TTABLE);
    dpl_check_keys(L, idx, fname, model_keys);
    const char *arch = dpl_opt_str_field(L, idx, fname, "arch", "gpt");
    dp_arch a;
    if (dp_arch_parse(arch, &a) != 0) luaL_error(L, "%s: unknown arch '%s' (valid: gpt, llama)", fname, arch);
    dp_model_config_default(cfg, a);
    cfg->vocab = required_int(L, idx, fname, "vocab");
    cfg->hidden = required_int(L, idx, fname, "hidden");
    cfg->layers = required_int(L, idx, fname, "layers");
    cfg->heads = required_int(L, idx, fname, "heads");
    cfg->kv_heads = dpl_opt_int_field(L, idx, fname, "kv_heads", 0);
    cfg->head_dim = dpl_opt_int_field(L, idx, fname, "head_dim", 0);
    cfg->seq_len = required_int(L, idx, fname, "seq_len");
    cfg->batch = dpl_opt_int_field(L, idx, fname, "batch", 1);
    cfg->mlp_ratio = dpl_opt_num_field(L, idx, fname, "mlp_ratio", cfg->mlp_ratio);
    cfg->ffn = dpl_opt_int_field(L, idx, fname, "ffn", 0);
    cfg->max_positions = dpl_opt_int_field(L, idx, fname, "max_positions", 0);
    cfg->tie_head = dpl_opt_bool_field(L, idx, fname, "tie_head", cfg->tie_head);
    const char *dt = dpl_opt_str_field(L, idx, fname, "dtype", "f32");
    if (strcmp(dt, "f32") == 0)
        cfg->dtype = DP_F32;
    else if (strcmp(dt, "bf16") == 0)
        cfg->dtype = DP_BF16;
    else
        luaL_error(L, "%s: unknown dtype '%s' (valid: f32, bf16)", fname, dt);
    cfg->master_weights = dpl_opt_bool_field(L, idx, fname, "master_weights", 1);
    cfg->norm_eps = (float)dpl_opt_num_field(L, idx, fname, "norm_eps", cfg->norm_eps);
    cfg->rope_theta = (float)dpl_opt_num_field(L, idx, fname, "rope_theta", cfg->rope_theta);
    read_rope_scaling(L, idx, fname, cfg);
    cfg->init_std = (float)dpl_opt_num_field(L, idx, fname, "init_std", cfg->init_std);
    cfg->seed = (uint64_t)dpl_opt_int_field(L, idx, fname, "seed", 0);
    read_lora(L, idx, fname, cfg);
    cfg->checkpoint = dpl_checkpoint_option(L, idx, fname);
    dpl_parts_option(L, idx, fname, &cfg->parts_world, &cfg->parts_rank);
    int dist[3];
    read_distributed(L, idx, fname, dist); /* checked here; kept by the model's userdata */
}

/* Reads the option table at idx into cfg and returns the device it asks for. */
static dp_device *read_config(lua_State *L, int idx, dp_model_config *cfg) {
    const char *fname = "dpprof.model";
    read_fields(L, idx, cfg);
    const char *devname = dpl_opt_str_field(L, idx, fname, "device", NULL);
    /* bf16 on the CPU is the slow exact reference of CUDA's bf16 (cpu_layers.c) */
    return devname ? dpl_device_named(L, devname) : dpl_current_device(L);
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
    dp_device *dev = read_config(L, 2, &cfg);
    if (dp_model_config_check(&cfg) != DP_OK) return model_fail(L);
    int dist[3];
    read_distributed(L, 2, "dpprof.model", dist);
    if (dist[0] == DP_DIST_FSDP && !dp_model_config_parted(&cfg)) { /* fsdp: built in parts for its rank */
        int64_t world = dist[1] > 0 ? dist[1] : 1, rank = dist[2] >= 0 ? dist[2] : 0;
        dp_comm *w;
        if (dev->kind != DP_DEV_PLAN) { /* the launched world's rank (a world_size it is not: wrap refuses) */
            if (dp_dist_world(&w) != DP_OK) return luaL_error(L, "dpprof.model: %s", dp_error_message());
            world = dist[1] > 0 && dist[1] != w->world_size ? 1 : w->world_size;
            rank = w->rank;
        }
        if (world > 1) cfg.parts_world = world, cfg.parts_rank = rank;
    }
    dpl_model *u = push_empty(L);
    if (dp_model_new(dev, &cfg, &u->m) != DP_OK) return model_fail(L);
    u->dist_strategy = dist[0], u->dist_world = dist[1], u->dist_rank = dist[2];
    gc_hint(L, (uint64_t)dp_model_num_params(u->m, 0) * 4);
    return 1;
}

/* dpprof.model.check{...} -> true: the checks dpprof.model makes of its options (keys, types,
 * sizes that fit together), raising the same errors, without a device and without building
 * anything (the device key, when given, is not looked at). */
static int l_model_check(lua_State *L) {
    dp_model_config cfg;
    read_fields(L, 1, &cfg);
    if (dp_model_config_check(&cfg) != DP_OK) return model_fail(L);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- batches ----------------------------------------------------------------------------- */

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

/* Raises unless bytes fit dev: its allocator's limit, else its memory (a size read from outside,
 * a checkpoint's seq_len, is checked before anything is allocated or filled). */
static void check_fits(lua_State *L, dp_device *dev, uint64_t bytes, const char *fname, const char *what) {
    uint64_t limit = dp_mem_limit(dev->mem), total = dev->info.total_memory;
    uint64_t cap = limit && (!total || limit < total) ? limit : total;
    if (!cap || bytes <= cap) return;
    char msg[512]; /* lua_pushfstring has no %.3f or %llu */
    snprintf(msg, sizeof msg, "%s: %s need %.3f GiB (%llu bytes) but the %s device has %.3f GiB (%llu bytes)", fname,
             what, (double)bytes / (double)(1ull << 30), (unsigned long long)bytes, dp_device_kind_name(dev->kind),
             (double)cap / (double)(1ull << 30), (unsigned long long)cap);
    luaL_error(L, "%s", msg);
}

/* An optional list field of n >= 1 integers (n = *n when *n > 0, else its length, at most max)
 * into a malloc'd array; NULL when absent. Raises naming the key. */
static int64_t *opt_int_list(lua_State *L, int idx, const char *fname, const char *key, int64_t *n, int64_t max) {
    lua_getfield(L, idx, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (!lua_istable(L, -1)) luaL_error(L, "%s: '%s' must be a list of integers", fname, key);
    int64_t len = (int64_t)luaL_len(L, -1);
    if (len < 1 || len > max)
        luaL_error(L, "%s: '%s' must list 1 to %d values (got %d)", fname, key, (int)max, (int)len);
    if (*n > 0 && len != *n) luaL_error(L, "%s: '%s' lists %d values, 'lengths' %d", fname, key, (int)len, (int)*n);
    int64_t *out = lua_newuserdatauv(L, (size_t)len * sizeof *out, 0); /* freed with the stack */
    for (int64_t i = 0; i < len; i++) {
        lua_rawgeti(L, -2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s: %s[%d] must be an integer", fname, key, (int)(i + 1));
        out[i] = (int64_t)v;
        lua_pop(L, 1);
    }
    lua_replace(L, -2); /* the array stays on the stack (in place of the list) until the call returns */
    *n = len;
    return out;
}

/* The given samples' ids, tokens = {{id, ...}, ...} at idx (B lists): into a malloc'd-by-Lua array
 * with each sample's offset; lengths[b] (when given: at most its ids less one, the first
 * lengths[b] + 1 ids taken) or else its ids less one. Raises naming the sample. */
static int64_t *token_lists(lua_State *L, int idx, const char *fname, int64_t B, int64_t **offsets, int64_t *lengths,
                            int given) {
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++) {
        if (lua_rawgeti(L, idx, b + 1) != LUA_TTABLE)
            luaL_error(L, "%s: tokens[%d] must be a list of token ids (got %s)", fname, (int)(b + 1),
                       luaL_typename(L, -1));
        int64_t n = (int64_t)luaL_len(L, -1);
        lua_pop(L, 1);
        if (n < 2)
            luaL_error(L,
                       "%s: tokens[%d] holds %d id(s): a sample needs at least 2 (its inputs and the next-token "
                       "targets)",
                       fname, (int)(b + 1), (int)n);
        if (given && lengths[b] > n - 1)
            luaL_error(L, "%s: lengths[%d] is %d but tokens[%d] holds %d ids (at most %d positions)", fname,
                       (int)(b + 1), (int)lengths[b], (int)(b + 1), (int)n, (int)(n - 1));
        if (!given) lengths[b] = n - 1;
        total += lengths[b] + 1;
    }
    int64_t *ids = lua_newuserdatauv(L, (size_t)total * sizeof *ids, 0); /* freed with the stack */
    *offsets = lua_newuserdatauv(L, (size_t)B * sizeof **offsets, 0);
    int64_t at = 0;
    for (int64_t b = 0; b < B; b++) {
        (*offsets)[b] = at;
        lua_rawgeti(L, idx, b + 1);
        for (int64_t j = 0; j <= lengths[b]; j++) {
            lua_rawgeti(L, -1, j + 1);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok)
                luaL_error(L, "%s: tokens[%d][%d] must be an integer token id (got %s)", fname, (int)(b + 1),
                           (int)(j + 1), luaL_typename(L, -1));
            ids[at++] = (int64_t)v;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    return ids;
}

/* dpprof.batch{model=, size=, seed=0, step=0, first=0, file=, file_dtype="uint16",
 * order="random"|"sequential"} (first: the global index of the batch's first sample, a rank's
 * slice of a distributed logical batch; with order = "sequential" the index of its first window
 * of the file read in order, no step), or a padded batch of samples of their own lengths:
 * dpprof.batch{model=, lengths={l1, ...}, padded=T, seed=, samples={ids...} | file=, file_dtype=,
 * starts={token offsets} | tokens={{id, ...}, ...}} (data.h; with tokens, lengths may be left out:
 * each sample's ids less one) */
static int l_batch(lua_State *L) {
    static const char *const keys[] = {"model",  "size",    "seed",   "step",  "file",   "file_dtype", "lengths",
                                       "padded", "samples", "starts", "first", "tokens", "order",      NULL};
    const char *fname = "dpprof.batch";
    luaL_checktype(L, 1, LUA_TTABLE);
    dpl_check_keys(L, 1, fname, keys);
    lua_getfield(L, 1, "model");
    if (!luaL_testudata(L, -1, MODEL_MT)) luaL_error(L, "%s: 'model' must be a model (from dpprof.model)", fname);
    dp_model *m = dpl_model_or_freed(L, lua_gettop(L));
    if (!m) luaL_error(L, "%s: 'model' was freed (m:free())", fname);
    lua_pop(L, 1);
    const dp_model_config *cfg = dp_model_config_of(m);
    int64_t nl = 0;
    int64_t *lengths = opt_int_list(L, 1, fname, "lengths", &nl, cfg->batch);
    int64_t *ids = NULL, *offsets = NULL; /* tokens = {...}: the given samples */
    int from_tokens = 0;                  /* the lengths are the token lists' */
    lua_getfield(L, 1, "tokens");
    if (!lua_isnil(L, -1)) {
        int tk = lua_gettop(L);
        if (!lua_istable(L, tk))
            luaL_error(L, "%s: 'tokens' must be a list of samples, each a list of token ids", fname);
        int64_t nt = (int64_t)luaL_len(L, tk);
        if (nt < 1 || nt > cfg->batch)
            luaL_error(L, "%s: 'tokens' must list 1 to %d samples (the model's batch; got %d)", fname, (int)cfg->batch,
                       (int)nt);
        if (lengths && nl != nt) luaL_error(L, "%s: 'tokens' lists %d samples, 'lengths' %d", fname, (int)nt, (int)nl);
        static const char *const apart[] = {"file", "samples", "starts", "order", NULL};
        for (int k = 0; apart[k]; k++) {
            lua_getfield(L, 1, apart[k]);
            if (!lua_isnil(L, -1))
                luaL_error(L, "%s: 'tokens' gives the samples' ids; '%s' gives them too (give one)", fname, apart[k]);
            lua_pop(L, 1);
        }
        int given = lengths != NULL;
        if (!given) {
            lengths = lua_newuserdatauv(L, (size_t)nt * sizeof *lengths, 0);
            nl = nt;
            from_tokens = 1;
        }
        ids = token_lists(L, tk, fname, nt, &offsets, lengths, given);
    } else {
        lua_pop(L, 1);
    }
    int64_t B = dpl_opt_int_field(L, 1, fname, "size", lengths ? nl : cfg->batch);
    if (B < 1 || B > cfg->batch)
        luaL_error(L, "%s: 'size' (%d) must be between 1 and the model's batch (%d)", fname, (int)B, (int)cfg->batch);
    if (lengths && B != nl) luaL_error(L, "%s: 'size' (%d) differs from the %d 'lengths'", fname, (int)B, (int)nl);
    uint64_t seed = (uint64_t)dpl_opt_int_field(L, 1, fname, "seed", 0);
    uint64_t step = (uint64_t)dpl_opt_int_field(L, 1, fname, "step", 0);
    int64_t first = dpl_opt_int_field(L, 1, fname, "first", 0);
    if (first < 0) luaL_error(L, "%s: 'first' (%lld) must be >= 0", fname, (long long)first);
    if (first > 0 && lengths)
        luaL_error(L, "%s: 'first' places windows of seq_len; a padded batch names its samples ('samples' or 'starts')",
                   fname);
    const char *file = dpl_opt_str_field(L, 1, fname, "file", NULL);
    const char *fdt = dpl_opt_str_field(L, 1, fname, "file_dtype", NULL);
    dp_token_dtype tdt = DP_TOKENS_U16;
    if (fdt && !file) luaL_error(L, "%s: 'file_dtype' needs 'file'", fname);
    if (fdt && dp_token_dtype_parse(fdt, &tdt) != 0)
        luaL_error(L, "%s: unknown file_dtype '%s' (valid: uint16, uint32)", fname, fdt);
    const char *order = dpl_opt_str_field(L, 1, fname, "order", "random");
    int sequential = strcmp(order, "sequential") == 0;
    if (!sequential && strcmp(order, "random") != 0)
        luaL_error(L, "%s: unknown order '%s' (valid: random, sequential)", fname, order);
    if (sequential && (!file || lengths))
        luaL_error(L, "%s: order = \"sequential\" reads windows of seq_len of 'file' in order (%s)", fname,
                   file ? "not a padded batch: leave 'lengths' out" : "give 'file'");
    if (sequential) {
        lua_getfield(L, 1, "step");
        if (!lua_isnil(L, -1))
            luaL_error(L,
                       "%s: order = \"sequential\" takes no 'step': 'first' is the index of the batch's first "
                       "window of the file",
                       fname);
        lua_pop(L, 1);
    }
    int64_t T = cfg->seq_len, *samples = NULL, *starts = NULL;
    if (lengths) {
        int64_t longest = 0;
        for (int64_t b = 0; b < B; b++) {
            if (from_tokens && lengths[b] > cfg->seq_len)
                luaL_error(L,
                           "%s: tokens[%d] holds %d ids, %d positions: more than the model's seq_len %d (give "
                           "lengths to cut it)",
                           fname, (int)(b + 1), (int)(lengths[b] + 1), (int)lengths[b], (int)cfg->seq_len);
            if (lengths[b] < 1 || lengths[b] > cfg->seq_len)
                luaL_error(L, "%s: lengths[%d] is %d, outside [1, %d] (the model's seq_len)", fname, (int)(b + 1),
                           (int)lengths[b], (int)cfg->seq_len);
            if (lengths[b] > longest) longest = lengths[b];
        }
        T = dpl_opt_int_field(L, 1, fname, "padded", longest);
        if (T < longest || T > cfg->seq_len)
            luaL_error(L, "%s: 'padded' (%d) must be from the longest sample (%d) to seq_len (%d)", fname, (int)T,
                       (int)longest, (int)cfg->seq_len);
        int64_t n = B;
        if (ids) {
            /* the given samples: their ids */
        } else if (file) {
            starts = opt_int_list(L, 1, fname, "starts", &n, cfg->batch);
            if (!starts) luaL_error(L, "%s: a padded batch from 'file' needs 'starts' (its documents' offsets)", fname);
        } else {
            samples = opt_int_list(L, 1, fname, "samples", &n, cfg->batch);
        }
    } else {
        static const char *const padded_only[] = {"padded", "samples", "starts", NULL};
        for (int k = 0; padded_only[k]; k++) {
            lua_getfield(L, 1, padded_only[k]);
            if (!lua_isnil(L, -1)) luaL_error(L, "%s: '%s' needs 'lengths' (a padded batch)", fname, padded_only[k]);
            lua_pop(L, 1);
        }
    }
    int64_t shape[2] = {B, T};
    dp_device *dev = dp_model_device(m);
    char what[96];
    snprintf(what, sizeof what, "the inputs and targets (2 x %lld x %lld i32)", (long long)B, (long long)T);
    check_fits(L, dev, 2 * (uint64_t)B * (uint64_t)T * 4u, fname, what);
    if (lengths && !file && !samples && !ids) { /* samples 0..B-1 */
        int64_t *first_ids = lua_newuserdatauv(L, (size_t)B * sizeof *first_ids, 0);
        for (int64_t b = 0; b < B; b++) first_ids[b] = b;
        samples = first_ids;
    }
    lua_createtable(L, 0, 4);
    dp_tensor *in = dpl_push_new_tensor(L, dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    lua_setfield(L, -2, "inputs");
    dp_tensor *tg = dpl_push_new_tensor(L, dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    lua_setfield(L, -2, "targets");
    lua_pushinteger(L, B);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, T);
    lua_setfield(L, -2, "padded");
    int rc;
    if (ids)
        rc = dp_data_tokens_padded(in, tg, cfg->vocab, ids, offsets, lengths);
    else if (lengths)
        rc = file ? dp_data_file_padded(in, tg, file, tdt, cfg->vocab, starts, lengths)
                  : dp_data_synthetic_padded(in, tg, cfg->vocab, seed, samples, lengths);
    else if (sequential)
        rc = dp_data_from_file_seq(in, tg, file, tdt, cfg->vocab, first);
    else
        rc = file ? dp_data_from_file_at(in, tg, file, tdt, cfg->vocab, seed, step, first)
                  : dp_data_synthetic_at(in, tg, cfg->vocab, seed, step, first);
    if (rc != DP_OK) dpl_fail(L);
    return 1;
}

static int docs_gc(lua_State *L) {
    dp_docs_free(luaL_checkudata(L, 1, "dpprof.documents"));
    return 0;
}

/* dpprof.documents{file=, file_dtype="uint16", eos=, vocab=} -> {starts={...}, lengths={...},
 * tokens=, empty=}: the token file's documents (data.h dp_docs; starts are token offsets) */
static int l_documents(lua_State *L) {
    static const char *const keys[] = {"file", "file_dtype", "eos", "vocab", NULL};
    const char *fname = "dpprof.documents";
    luaL_checktype(L, 1, LUA_TTABLE);
    dpl_check_keys(L, 1, fname, keys);
    const char *file = dpl_opt_str_field(L, 1, fname, "file", NULL);
    if (!file) luaL_error(L, "%s: 'file' (the token file) is required", fname);
    const char *fdt = dpl_opt_str_field(L, 1, fname, "file_dtype", "uint16");
    dp_token_dtype tdt;
    if (dp_token_dtype_parse(fdt, &tdt) != 0)
        luaL_error(L, "%s: unknown file_dtype '%s' (valid: uint16, uint32)", fname, fdt);
    int64_t eos = dpl_opt_int_field(L, 1, fname, "eos", -1);
    int64_t vocab = dpl_opt_int_field(L, 1, fname, "vocab", INT32_MAX); /* default: any id */
    if (eos < 0) luaL_error(L, "%s: 'eos' (the id that ends a document) is required", fname);
    /* the index lives in a userdata whose __gc frees it: a Lua error below leaks nothing */
    dp_docs *dd = lua_newuserdatauv(L, sizeof *dd, 0);
    memset(dd, 0, sizeof *dd);
    if (luaL_newmetatable(L, "dpprof.documents")) {
        lua_pushcfunction(L, docs_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (dp_docs_open(file, tdt, eos, vocab, dd) != DP_OK) return dpl_fail(L);
    dp_docs d = *dd;
    if (d.n > INT32_MAX) luaL_error(L, "%s: '%s' holds more documents than a Lua list takes", fname, file);
    lua_createtable(L, 0, 4);
    lua_createtable(L, (int)d.n, 0);
    lua_createtable(L, (int)d.n, 0);
    for (int64_t i = 0; i < d.n; i++) {
        lua_pushinteger(L, d.start[i]);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, d.length[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -3, "lengths");
    lua_setfield(L, -2, "starts");
    lua_pushinteger(L, d.tokens);
    lua_setfield(L, -2, "tokens");
    lua_pushinteger(L, d.empty);
    lua_setfield(L, -2, "empty");
    dp_docs_free(dd);
    return 1;
}

/* dpprof.free_batch(b): frees both tensors now (idempotent) */
static int l_free_batch(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *const fields[] = {"inputs", "targets"};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, 1, fields[i]);
        if (luaL_testudata(L, -1, TENSOR_MT)) {
            lua_getfield(L, -1, "free");
            lua_pushvalue(L, -2);
            lua_call(L, 1, 0);
        }
        lua_pop(L, 1);
    }
    return 0;
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

/* rope_scaling as dpprof.model takes it (nil for the default rope) */
static void push_rope_scaling(lua_State *L, const dp_rope_scaling *r) {
    if (r->type == DP_ROPE_DEFAULT) {
        lua_pushnil(L);
        return;
    }
    lua_createtable(L, 0, 11);
    lua_pushstring(L, dp_rope_type_name(r->type)), lua_setfield(L, -2, "rope_type");
    lua_pushnumber(L, r->factor), lua_setfield(L, -2, "factor");
    if (r->type == DP_ROPE_LINEAR) return;
    lua_pushinteger(L, r->original_max_positions), lua_setfield(L, -2, "original_max_position_embeddings");
    if (r->type == DP_ROPE_LLAMA3) {
        lua_pushnumber(L, r->low_freq_factor), lua_setfield(L, -2, "low_freq_factor");
        lua_pushnumber(L, r->high_freq_factor), lua_setfield(L, -2, "high_freq_factor");
        return;
    }
    lua_pushnumber(L, r->beta_fast), lua_setfield(L, -2, "beta_fast");
    lua_pushnumber(L, r->beta_slow), lua_setfield(L, -2, "beta_slow");
    const double opt[3] = {r->mscale, r->mscale_all_dim, r->attention_factor};
    const char *const names[3] = {"mscale", "mscale_all_dim", "attention_factor"};
    for (int i = 0; i < 3; i++)
        if (opt[i] > 0) lua_pushnumber(L, opt[i]), lua_setfield(L, -2, names[i]);
    lua_pushboolean(L, r->truncate), lua_setfield(L, -2, "truncate");
}

void dpl_push_model_config(lua_State *L, const dp_model_config *c) {
    lua_createtable(L, 0, 24);
    lua_pushstring(L, dp_arch_name(c->arch)), lua_setfield(L, -2, "arch");
    lua_pushinteger(L, c->vocab), lua_setfield(L, -2, "vocab");
    lua_pushinteger(L, c->hidden), lua_setfield(L, -2, "hidden");
    lua_pushinteger(L, c->layers), lua_setfield(L, -2, "layers");
    lua_pushinteger(L, c->heads), lua_setfield(L, -2, "heads");
    if (c->kv_heads) lua_pushinteger(L, c->kv_heads), lua_setfield(L, -2, "kv_heads");
    if (c->head_dim) lua_pushinteger(L, c->head_dim), lua_setfield(L, -2, "head_dim");
    if (c->seq_len) lua_pushinteger(L, c->seq_len), lua_setfield(L, -2, "seq_len");
    if (c->batch) lua_pushinteger(L, c->batch), lua_setfield(L, -2, "batch");
    lua_pushnumber(L, c->mlp_ratio), lua_setfield(L, -2, "mlp_ratio");
    if (c->ffn) lua_pushinteger(L, c->ffn), lua_setfield(L, -2, "ffn");
    if (c->max_positions) lua_pushinteger(L, c->max_positions), lua_setfield(L, -2, "max_positions");
    lua_pushboolean(L, c->tie_head), lua_setfield(L, -2, "tie_head");
    lua_pushstring(L, dp_dtype_name(c->dtype)), lua_setfield(L, -2, "dtype");
    lua_pushboolean(L, c->master_weights), lua_setfield(L, -2, "master_weights");
    lua_pushnumber(L, c->norm_eps), lua_setfield(L, -2, "norm_eps");
    lua_pushnumber(L, c->rope_theta), lua_setfield(L, -2, "rope_theta");
    push_rope_scaling(L, &c->rope);
    lua_setfield(L, -2, "rope_scaling");
    lua_pushnumber(L, c->init_std), lua_setfield(L, -2, "init_std");
    lua_pushinteger(L, (lua_Integer)c->seed), lua_setfield(L, -2, "seed");
    dpl_push_checkpoint(L, c->checkpoint), lua_setfield(L, -2, "checkpoint");
    if (dp_model_config_parted(c)) {
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, c->parts_world), lua_setfield(L, -2, "world_size");
        lua_pushinteger(L, c->parts_rank), lua_setfield(L, -2, "rank");
        lua_setfield(L, -2, "parts");
    }
    if (c->lora_rank > 0) {
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, c->lora_rank), lua_setfield(L, -2, "rank");
        lua_pushnumber(L, c->lora_alpha), lua_setfield(L, -2, "alpha");
        lua_newtable(L);
        int n = 0;
        for (unsigned bit = 1; bit <= DP_LORA_DOWN; bit <<= 1) /* llama: PEFT's names; gpt: its groups */
            if ((c->lora_targets & bit) && dp_lora_target_name(c->arch, bit))
                lua_pushstring(L, dp_lora_target_name(c->arch, bit)), lua_rawseti(L, -2, ++n);
        lua_setfield(L, -2, "targets");
        lua_setfield(L, -2, "lora");
    }
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
    dpl_push_keys(L, model_keys);
    lua_setfield(L, -2, "KEYS");
    lua_pushcfunction(L, l_checkpoint_parse);
    lua_setfield(L, -2, "checkpoint_parse");
    lua_pushcfunction(L, l_checkpoint_format);
    lua_setfield(L, -2, "checkpoint_format");
    lua_pushcfunction(L, l_checkpoint_name);
    lua_setfield(L, -2, "checkpoint_name");
    lua_setfield(L, -2, "model");
    lua_pushcfunction(L, l_batch);
    lua_setfield(L, -2, "batch");
    lua_pushcfunction(L, l_documents);
    lua_setfield(L, -2, "documents");
    lua_pushcfunction(L, l_free_batch);
    lua_setfield(L, -2, "free_batch");
}
