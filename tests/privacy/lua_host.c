/* lua_host.c: runs a Lua test script with require("dpprof") giving {privacy = ...}.
 *
 * Stand-in for the dpprof binary so that tests/privacy/test_privacy.lua runs in
 * CTest before the full engine links; the script passes by returning normally.
 * Usage: lua_host SCRIPT.lua
 */
#include "lua_privacy.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>

/* package.preload.dpprof: a module table holding only the privacy submodule. */
static int open_dpprof(lua_State *L)
{
    lua_newtable(L);
    dp_lua_privacy_open(L);
    lua_setfield(L, -2, "privacy");
    return 1;
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg != NULL ? msg : "(error object is not a string)", 1);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRIPT.lua\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "lua_host: out of memory\n");
        return 1;
    }
    luaL_openlibs(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, open_dpprof);
    lua_setfield(L, -2, "dpprof");
    lua_pop(L, 1);

    lua_pushcfunction(L, traceback);
    int rc = luaL_loadfilex(L, argv[1], "t");
    if (rc == LUA_OK)
        rc = lua_pcall(L, 0, 0, -2);
    if (rc != LUA_OK)
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
    lua_close(L);
    return rc == LUA_OK ? 0 : 1;
}
