/* dpplot_lua_run: runs a Lua script with `dpprof.plot` loaded, for the binding's tests and the
 * fixture generator (this machine has the Lua library but no interpreter).
 *   dpplot_lua_run SCRIPT [ARGS...]     (arg[0] = SCRIPT, arg[1..] = ARGS)
 * Source is loaded in text mode only; errors print with a traceback and exit 1. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

#include "plot_lua.h"

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (!L) return 1;
    luaL_openlibs(L);
    lua_newtable(L);
    dpplot_lua_open(L);
    lua_setfield(L, -2, "plot");
    lua_setglobal(L, "dpprof");
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    lua_pushcfunction(L, traceback);
    int rc = luaL_loadfilex(L, argv[1], "t");
    if (rc == LUA_OK) {
        for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
        rc = lua_pcall(L, argc - 2, 0, 1);
    }
    if (rc != LUA_OK) fprintf(stderr, "%s\n", lua_tostring(L, -1));
    lua_close(L);
    return rc == LUA_OK ? 0 : 1;
}
