/* module.c: dpprof as a Lua 5.4 C module (dpprof.so on package.cpath): `require("dpprof")`
 * in a stock lua5.4 or any program embedding Lua 5.4 gives the dpprof binary's module. The
 * engine's process-wide state is freed when the state closes (a userdata's __gc in the registry). */
#include "dpprof.h"

#include <lauxlib.h>

static int shutdown_gc(lua_State *L) {
    (void)L;
    dpprof_shutdown();
    return 0;
}

int luaopen_dpprof(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "dpprof.module") == LUA_TNIL) {
        lua_newuserdatauv(L, 1, 0);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, shutdown_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, "dpprof.module");
    }
    lua_pop(L, 1);
    return dpprof_openlib(L);
}
