/* lua_model_io.c: m:save(dir [, ids]), dpprof.model.load(dir, {...}) and dpprof.model.read_config(dir [, {adapter=}]):
 * Hugging Face checkpoints from scripts (model_io.h). Adds `save` to the model metatable's
 * __methods and `load`, `read_config` and LOAD_KEYS (load's options) to the dpprof.model table
 * that lua_model.c made. */
#include "lua_engine.h"

#include "error.h"
#include "lua_util.h"
#include "options_schema.h"
#include "model_io.h"

#include <lauxlib.h>
#include <string.h>

/* m:save(dir [, {bos_token_id=, eos_token_id=, pad_token_id=}]): the ids written to config.json and
 * generation_config.json in place of the origin's (a model made from a shape has none: null) */
static int l_save(lua_State *L) {
    static const char *const keys[] = {"bos_token_id", "eos_token_id", "pad_token_id", NULL};
    const char *fname = "model:save";
    dp_model *m = dpl_check_model(L, 1);
    const char *dir = luaL_checkstring(L, 2);
    dp_model_save_opts opts;
    dp_model_save_opts_default(&opts);
    if (!lua_isnoneornil(L, 3)) {
        dpl_check_keys(L, 3, fname, keys);
        int64_t *ids[3] = {&opts.bos_token_id, &opts.eos_token_id, &opts.pad_token_id};
        const int64_t V = dp_model_config_of(m)->vocab;
        for (int i = 0; i < 3; i++) {
            int given = lua_getfield(L, 3, keys[i]) != LUA_TNIL;
            lua_pop(L, 1);
            if (!given) continue;
            *ids[i] = dpl_opt_int_field(L, 3, fname, keys[i], -1);
            if (*ids[i] < 0 || *ids[i] >= V)
                luaL_error(L, "%s: '%s' must be a token id from 0 to %I (the vocabulary of %I; got %I)", fname, keys[i],
                           (lua_Integer)V - 1, (lua_Integer)V, (lua_Integer)*ids[i]);
        }
    }
    if (dp_model_save_with(m, dir, &opts) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    return 0;
}

/* The lora={rank=, alpha=, targets={...}} option into opts. */
static void read_lora(lua_State *L, int idx, const char *fname, dp_model_load_opts *opts) {
    static const char *const keys[] = {"rank", "alpha", "targets", NULL};
    if (lua_getfield(L, idx, "lora") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    int t = lua_gettop(L);
    if (!lua_istable(L, t)) luaL_error(L, "%s: 'lora' must be a table {rank=, alpha=, targets=}", fname);
    dpl_check_keys(L, t, fname, keys);
    int64_t rank = dpl_opt_int_field(L, t, fname, "rank", 0);
    if (rank <= 0 || rank > 1 << 20)
        luaL_error(L, "%s: 'lora.rank' must be an integer from 1 to %d (got %I)", fname, 1 << 20, (lua_Integer)rank);
    opts->lora_rank = (int)rank;
    opts->lora_alpha = (float)dpl_opt_num_field(L, t, fname, "alpha", (double)rank);
    if (lua_getfield(L, t, "targets") != LUA_TNIL) {
        if (!lua_istable(L, -1))
            luaL_error(L, "%s: 'lora.targets' must be a list of names (valid: " DP_LORA_TARGET_NAMES ")", fname);
        opts->lora_targets = dpl_lora_targets(L, lua_gettop(L), fname);
    }
    lua_pop(L, 2);
}

/* dpprof.model.read_config(dir) -> the options dpprof.model takes, from dir/config.json alone
 * (sizes, heads, rope, tie; no runtime choices: seq_len, batch, dtype, LoRA are the caller's) */
static int l_read_config(lua_State *L) {
    static const char *const keys[] = {"adapter", NULL};
    const char *fname = "dpprof.model.read_config";
    const char *dir = luaL_checkstring(L, 1);
    const char *adapter = NULL;
    if (!lua_isnoneornil(L, 2)) {
        dpl_check_keys(L, 2, fname, keys);
        adapter = dpl_opt_str_field(L, 2, fname, "adapter", NULL);
    }
    dp_model_config cfg;
    if (dp_model_config_read(dir, &cfg) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    cfg.lora_rank = 0;
    /* {adapter = DIR}: a PEFT adapter's rank, alpha and targets, as lora = {...} */
    if (adapter && dp_model_adapter_read(adapter, &cfg) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    dpl_push_model_config(L, &cfg);
    /* left out, so that they do not read as the file's: fields config.json does not give (dtype,
     * seed, master_weights and checkpoint at dpprof.model's defaults, mlp_ratio beside the file's
     * ffn). Not a list of options: those a caller adds are LOAD_KEYS; batch and seq_len keep the
     * defaults the file bounds. */
    static const char *const runtime[] = {"dtype", "master_weights", "seed", "mlp_ratio", "checkpoint"};
    for (size_t i = 0; i < sizeof runtime / sizeof *runtime; i++) lua_pushnil(L), lua_setfield(L, -2, runtime[i]);
    return 1;
}

/* dpprof.model.load's options beside the directory (dpprof.model.LOAD_KEYS, in this order): the
 * runtime choices a checkpoint's files leave to the caller, the one list of them (dp.experiment
 * lets a model with path= and its weights set these and no other of dpprof.model.KEYS). */
static const char *load_keys[DPO_N_OPTIONS + 1]; /* the schema's DPO_LOAD model rows */

/* What load takes beside LOAD_KEYS: not a runtime choice but more files, a PEFT adapter folder. */
static const char *load_all_keys[DPO_N_OPTIONS + 2]; /* load_keys and "adapter" */

/* dpprof.model.load(dir, {device=, dtype=, batch=, seq_len=, seed=, master_weights=, rope_theta=,
 * lora={rank=, alpha=, targets=}, checkpoint=, parts={world_size=, rank=}, adapter=DIR}) */
static int l_load(lua_State *L) {
    const char *fname = "dpprof.model.load";
    const char *dir = luaL_checkstring(L, 1);
    dp_model_load_opts opts;
    dp_model_load_opts_default(&opts);
    const char *device = NULL;
    if (!lua_isnoneornil(L, 2)) {
        dpl_check_keys(L, 2, fname, load_all_keys);
        opts.adapter = dpl_opt_str_field(L, 2, fname, "adapter", NULL);
        device = dpl_opt_str_field(L, 2, fname, "device", NULL);
        const char *dtype = dpl_opt_str_field(L, 2, fname, "dtype", "f32");
        if (dp_dtype_parse(dtype, &opts.dtype) != 0 || (opts.dtype != DP_F32 && opts.dtype != DP_BF16))
            luaL_error(L, "%s: unknown dtype '%s' (valid: f32, bf16)", fname, dtype);
        opts.batch = dpl_opt_int_field(L, 2, fname, "batch", 0);
        opts.seq_len = dpl_opt_int_field(L, 2, fname, "seq_len", 0);
        if (opts.batch < 0 || opts.seq_len < 0) luaL_error(L, "%s: 'batch' and 'seq_len' must be positive", fname);
        opts.seed = (uint64_t)dpl_opt_int_field(L, 2, fname, "seed", 0);
        opts.master_weights = dpl_opt_bool_field(L, 2, fname, "master_weights", opts.master_weights);
        opts.rope_theta = (float)dpl_opt_num_field(L, 2, fname, "rope_theta", 0);
        read_lora(L, 2, fname, &opts);
        opts.checkpoint = dpl_checkpoint_option(L, 2, fname);
        dpl_parts_option(L, 2, fname, &opts.parts_world, &opts.parts_rank);
    }
    dp_device *dev = device ? dpl_device_named(L, device) : dpl_current_device(L);
    dp_model *m;
    if (dp_model_load(dev, dir, &opts, &m) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    dpl_push_model(L, m); /* owns m from here (frees it if the push fails) */
    return 1;
}

void dpl_open_model_io(lua_State *L) {
    /* m:save */
    luaL_getmetatable(L, "dpprof.model");
    if (lua_getfield(L, -1, "__methods") != LUA_TTABLE)
        luaL_error(L, "dpl_open_model_io: the model metatable has no __methods (call dpl_open_model first)");
    lua_pushcfunction(L, l_save);
    lua_setfield(L, -2, "save");
    lua_pop(L, 2);
    /* dpprof.model.load */
    if (lua_getfield(L, -1, "model") != LUA_TTABLE)
        luaL_error(L, "dpl_open_model_io: dpprof.model is not a table (call dpl_open_model first)");
    lua_pushcfunction(L, l_load);
    lua_setfield(L, -2, "load");
    lua_pushcfunction(L, l_read_config);
    lua_setfield(L, -2, "read_config");
    int n = dpo_keys(DPO_S_MODEL, DPO_LOAD, 0, load_keys, DPO_N_OPTIONS + 1);
    memcpy(load_all_keys, load_keys, sizeof(char *) * (size_t)n);
    load_all_keys[n] = "adapter", load_all_keys[n + 1] = NULL;
    dpl_push_keys(L, load_keys);
    lua_setfield(L, -2, "LOAD_KEYS");
    lua_pop(L, 1);
}
