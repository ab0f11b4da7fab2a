/* dpprof.h: embedding the dpprof engine in another C program.
 *
 *   lua_State *L = luaL_newstate();
 *   luaL_openlibs(L);
 *   luaL_requiref(L, "dpprof", dpprof_openlib, 1);  // or package.preload
 *   ... run scripts that use dpprof ...
 *   lua_close(L);
 *   dpprof_shutdown();
 *
 * The Lua-side modules (lua/dpprof/, *.lua files) are found through $DPPROF_LUA_PATH, next to the binary
 * (../lua, ../share/dpprof/lua), from the Lua C module installed in LIBDIR/lua/5.4/ (the prefix's
 * share/dpprof/lua) or in the source tree the library was built from. */
#ifndef DPPROF_H
#define DPPROF_H

#include <lua.h>

/* lua_CFunction: pushes the dpprof module table (the same table on every call in one state). */
int dpprof_openlib(lua_State *L);
/* Frees the engine's process-wide state (devices, module names, ledger). Call after lua_close. */
void dpprof_shutdown(void);
/* The Lua C module's entry point (dpprof.so, `require("dpprof")` in a stock Lua 5.4): the module
 * of dpprof_openlib, and dpprof_shutdown when the state is closed. */
int luaopen_dpprof(lua_State *L);

#endif
