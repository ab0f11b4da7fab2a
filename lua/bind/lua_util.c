/* lua_util.c: argument helpers for the bindings. */
#include "lua_util.h"

#include "error.h"

#include <string.h>

/* __index of every type: __methods first (any key), then the type's fields function (upvalue
 * 1, or nil), called directly so that its argument errors name this metamethod as before. */
static int type_index(lua_State *L) {
    lua_CFunction fields = lua_tocfunction(L, lua_upvalueindex(1));
    if (lua_getmetatable(L, 1) && lua_getfield(L, -1, "__methods") == LUA_TTABLE) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, -2) != LUA_TNIL) return 1;
    }
    lua_settop(L, 2);
    if (!fields) {
        lua_pushnil(L);
        return 1;
    }
    return fields(L);
}

/* Each method as package.loaded["model:forward"] (the type's name less "dpprof."): where Lua
 * cannot name a call (pcall(m.forward, m, x), a call from C), luaL_argerror looks the function
 * up there, so its message names the method rather than '?'. */
static void register_method_names(lua_State *L, const char *name, const luaL_Reg *methods) {
    const char *type = strncmp(name, "dpprof.", 7) == 0 ? name + 7 : name;
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    for (const luaL_Reg *r = methods; r->name; r++) {
        lua_pushfstring(L, "%s:%s", type, r->name);
        lua_pushcfunction(L, r->func);
        lua_rawset(L, -3);
    }
    lua_pop(L, 1);
}

void dpl_new_type(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods, lua_CFunction fields) {
    if (luaL_newmetatable(L, name)) {
        if (meta) luaL_setfuncs(L, meta, 0);
        if (methods) {
            lua_newtable(L);
            luaL_setfuncs(L, methods, 0);
            lua_setfield(L, -2, "__methods");
            register_method_names(L, name, methods);
        }
        if (methods || fields) {
            if (fields)
                lua_pushcfunction(L, fields);
            else
                lua_pushnil(L);
            lua_pushcclosure(L, type_index, 1);
            lua_setfield(L, -2, "__index");
        }
    }
    lua_pop(L, 1);
}

int dpl_fail(lua_State *L) { return luaL_error(L, "%s", dp_error_message()); }

void dpl_check_keys(lua_State *L, int idx, const char *fname, const char *const *valid) {
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue; /* array part: callers check it */
        const char *k = lua_tostring(L, -1);
        int ok = 0;
        for (const char *const *v = valid; *v; v++)
            if (strcmp(*v, k) == 0) ok = 1;
        if (!ok) {
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (const char *const *v = valid; *v; v++) {
                if (v != valid) luaL_addstring(&b, ", ");
                luaL_addstring(&b, *v);
            }
            luaL_pushresult(&b);
            luaL_error(L, "%s: unknown key '%s' (valid: %s)", fname, k, lua_tostring(L, -1));
        }
    }
}

void dpl_push_keys(lua_State *L, const char *const *valid) {
    lua_newtable(L);
    for (lua_Integer i = 0; valid[i]; i++) lua_pushstring(L, valid[i]), lua_rawseti(L, -2, i + 1);
}

int64_t dpl_opt_int_field(lua_State *L, int idx, const char *fname, const char *key, int64_t def) {
    int t = lua_getfield(L, idx, key);
    int64_t v = def;
    if (t != LUA_TNIL) {
        int isint = 0;
        /* a number only: "16" is refused as it is for number fields (lua_tointegerx would take
         * it); an integral float (4 * 2^20) is an integer */
        if (t == LUA_TNUMBER) v = (int64_t)lua_tointegerx(L, -1, &isint);
        if (!isint) {
            if (lua_type(L, -1) == LUA_TNUMBER)
                luaL_error(L, "%s: '%s' must be an integer (got %s)", fname, key, lua_tostring(L, -1));
            luaL_error(L, "%s: '%s' must be an integer (got %s)", fname, key, luaL_typename(L, -1));
        }
    }
    lua_pop(L, 1);
    return v;
}

double dpl_opt_num_field(lua_State *L, int idx, const char *fname, const char *key, double def) {
    int t = lua_getfield(L, idx, key);
    double v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TNUMBER) luaL_error(L, "%s: '%s' must be a number (got %s)", fname, key, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

const char *dpl_opt_str_field(lua_State *L, int idx, const char *fname, const char *key, const char *def) {
    int t = lua_getfield(L, idx, key);
    const char *v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TSTRING) luaL_error(L, "%s: '%s' must be a string (got %s)", fname, key, luaL_typename(L, -1));
        v = lua_tostring(L, -1);
    }
    lua_pop(L, 1); /* the table keeps the string alive */
    return v;
}

int dpl_opt_bool_field(lua_State *L, int idx, const char *fname, const char *key, int def) {
    int t = lua_getfield(L, idx, key);
    int v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TBOOLEAN) luaL_error(L, "%s: '%s' must be a boolean (got %s)", fname, key, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

dp_device *dpl_device_named(lua_State *L, const char *name) {
    dp_device_kind k;
    dp_device *dev;
    if (dp_device_parse(name, &k) != DP_OK || dp_device_get(k, &dev) != DP_OK) dpl_fail(L);
    return dev;
}

dp_device *dpl_current_device(lua_State *L) {
    dp_device *dev;
    if (dp_device_current(&dev) != DP_OK) dpl_fail(L);
    return dev;
}

dp_device *dpl_opt_device(lua_State *L, int idx) {
    if (lua_isnoneornil(L, idx)) return dpl_current_device(L);
    return dpl_device_named(L, luaL_checkstring(L, idx));
}

dp_category dpl_category(lua_State *L, const char *name, const char *fname) {
    dp_category c;
    if (dp_category_parse(name, &c) != 0)
        luaL_error(L, "%s: unknown category '%s' (valid: %s)", fname, name, dp_category_list());
    return c;
}

void dpl_push_bytes(lua_State *L, uint64_t v) {
    if (v <= (uint64_t)INT64_MAX)
        lua_pushinteger(L, (lua_Integer)v);
    else
        lua_pushnumber(L, (lua_Number)v);
}
