/* lua_util.h: helpers shared by the engine's Lua bindings: userdata types, option tables with
 * checked keys, device and category arguments, and turning an engine status into a Lua error.
 *
 * Conventions of lua/bind: each binding file has one opener, `void dpl_open_<name>(lua_State *L)`,
 * that adds its functions to the dpprof module table on top of the stack (openlib.c calls them
 * in turn); every userdata type is made by dpl_new_type, so its methods live in the metatable's
 * __methods and its __index is the same function everywhere. */
#ifndef DP_LUA_UTIL_H
#define DP_LUA_UTIL_H

#include "device.h"
#include "memory.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>

/* Creates the metatable `name` of a userdata type unless it exists (luaL_newmetatable): the
 * metamethods of meta (__gc, __close, __tostring...; may be NULL), the methods in its __methods
 * table (may be NULL), and, when methods or fields are given, __index: a key found in __methods
 * first, else fields(L) with the userdata at 1 and the key at 2 pushing one value (NULL: nil).
 * Each method is also package.loaded["<name less dpprof.>:<method>"], so that argument errors
 * name it ("model:forward") where Lua cannot name the call. Leaves the stack as it was. */
void dpl_new_type(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods, lua_CFunction fields);
/* Raises a Lua error with the engine's last error message (never returns). */
int dpl_fail(lua_State *L);
/* Raises "fname: unknown key 'k' (valid: ...)" unless every string key of the table at idx is
 * in the NULL-terminated list valid. A non-table at idx is an argument error. */
void dpl_check_keys(lua_State *L, int idx, const char *fname, const char *const *valid);
/* Pushes the NULL-terminated list valid as a Lua array: a grammar's keys, as dpl_check_keys takes them. */
void dpl_push_keys(lua_State *L, const char *const *valid);
/* The integer field key of the table at idx, or def when absent; an error naming fname and key
 * when present but not an integer (an integral float is one; a string never is). */
int64_t dpl_opt_int_field(lua_State *L, int idx, const char *fname, const char *key, int64_t def);
/* The number field key of the table at idx, or def when absent (error when not a number). */
double dpl_opt_num_field(lua_State *L, int idx, const char *fname, const char *key, double def);
/* The string field key of the table at idx, or def when absent (error when not a string).
 * The string stays valid while the table is alive. */
const char *dpl_opt_str_field(lua_State *L, int idx, const char *fname, const char *key, const char *def);
/* The boolean field key of the table at idx, or def when absent. */
int dpl_opt_bool_field(lua_State *L, int idx, const char *fname, const char *key, int def);
/* The current device (initialising the default), or a Lua error. */
dp_device *dpl_current_device(lua_State *L);
/* The device named by the string at idx (or the current device when none/nil), initialised. */
dp_device *dpl_opt_device(lua_State *L, int idx);
/* The device named name ("cpu", "cuda", "plan", "auto"), initialised, or a Lua error. */
dp_device *dpl_device_named(lua_State *L, const char *name);
/* Parses a category name or raises an error listing the valid ones. */
dp_category dpl_category(lua_State *L, const char *name, const char *fname);
/* Pushes an unsigned byte count as an integer (or a float past 2^63). */
void dpl_push_bytes(lua_State *L, uint64_t v);

#endif
