/* lua_model_options.c: dpprof.model's options read from a script's table into a dp_model_config
 * (the keys, LoRA, rope scaling, parts, distributed; dpl_model_read_options, which dpprof.model and
 * dpprof.model.check share) and written back as that table (dpl_push_model_config, m:config()). */
#include "lua_engine.h"

#include "comm.h"
#include "dpsgd_strategy.h"

#include "error.h"
#include "lua_util.h"
#include "model.h"
#include "options_schema.h"

#include <lauxlib.h>
#include <string.h>

/* ---- configuration ----------------------------------------------------------------------- */

/* dpprof.model's options (dpprof.model.KEYS): the schema's model section (common/options_schema.h),
 * filled by dpl_open_model. Whoever takes a model's options (dp.experiment's model, the fit command
 * line) reads them from the schema and adds or leaves out only its own. */
const char *dpl_model_keys[DPO_N_OPTIONS + 1];

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

int dpl_model_distributed_option(lua_State *L, int idx, const char *fname, dpsgd_dist_config *cfg) {
    if (lua_getfield(L, idx, "distributed") == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    dpl_dist_read(L, lua_gettop(L), fname, cfg);
    if (dpsgd_dist_config_check(cfg, DP_DEV_PLAN) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    lua_pop(L, 1);
    return 1;
}

/* Reads the option table at idx into cfg (all but the device). */
void dpl_model_read_options(lua_State *L, int idx, dp_model_config *cfg) {
    const char *fname = "dpprof.model";
    luaL_checktype(L, idx, LUA_TTABLE);
    dpl_check_keys(L, idx, fname, dpl_model_keys);
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
    cfg->master_weights = dpl_opt_bool_field(L, idx, fname, "master_weights", cfg->master_weights);
    cfg->norm_eps = (float)dpl_opt_num_field(L, idx, fname, "norm_eps", cfg->norm_eps);
    cfg->rope_theta = (float)dpl_opt_num_field(L, idx, fname, "rope_theta", cfg->rope_theta);
    read_rope_scaling(L, idx, fname, cfg);
    cfg->init_std = (float)dpl_opt_num_field(L, idx, fname, "init_std", cfg->init_std);
    cfg->seed = (uint64_t)dpl_opt_int_field(L, idx, fname, "seed", 0);
    read_lora(L, idx, fname, cfg);
    cfg->checkpoint = dpl_checkpoint_option(L, idx, fname);
    dpl_parts_option(L, idx, fname, &cfg->parts_world, &cfg->parts_rank);
    dpsgd_dist_config dist;
    dpl_model_distributed_option(L, idx, fname, &dist); /* checked here; kept by the model's userdata */
}

/* Reads the option table at idx into cfg and returns the device it asks for. */
dp_device *dpl_model_read_config(lua_State *L, int idx, dp_model_config *cfg) {
    const char *fname = "dpprof.model";
    dpl_model_read_options(L, idx, cfg);
    const char *devname = dpl_opt_str_field(L, idx, fname, "device", NULL);
    /* bf16 on the CPU is the slow exact reference of CUDA's bf16 (cpu_layers.c) */
    return devname ? dpl_device_named(L, devname) : dpl_current_device(L);
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
