/* lua_checkpoint.c: the activation checkpointing setting's grammar (false | "blocks" | N) as
 * scripts, results and the command line write it: its reader (dpl_checkpoint_option), writer
 * (dpl_push_checkpoint) and dpprof.model.checkpoint_parse, checkpoint_format, checkpoint_name. */
#include "lua_engine.h"

#include "error.h"
#include "model.h"

#include <lauxlib.h>
#include <string.h>

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

void dpl_add_checkpoint_grammar(lua_State *L) {
    static const luaL_Reg fns[] = {{"checkpoint_parse", l_checkpoint_parse},
                                   {"checkpoint_format", l_checkpoint_format},
                                   {"checkpoint_name", l_checkpoint_name},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
