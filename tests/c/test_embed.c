/* test_embed.c: another C program embeds the engine through libdpprof's one entry point,
 * dpprof_openlib, runs a script against it and reads the results back. */
#include "check.h"
#include "dpprof.h"

#include <lauxlib.h>
#include <lualib.h>
#include <string.h>

static const char *script = "local dp = require('dpprof')\n"
                            "dp.device('cpu')\n"
                            "local w <close> = dp.tensor{shape={256, 64}, category='parameters', module='embed'}\n"
                            "local a = dp.tensor{shape={1000}, category='activations'}\n"
                            "a:free()\n"
                            "local s = dp.memory.stats()\n"
                            "return s.current.parameters, s.peaks.activations, s.peak, dp.version\n";

int main(void) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "dpprof", dpprof_openlib, 1);
    lua_pop(L, 1);
    int rc = luaL_loadstring(L, script) || lua_pcall(L, 0, 4, 0);
    if (rc != LUA_OK) fprintf(stderr, "script failed: %s\n", lua_tostring(L, -1));
    CHECK(rc == LUA_OK);
    if (rc == LUA_OK) {
        CHECK_EQ_U64(lua_tointeger(L, -4), 256 * 64 * 4);
        CHECK_EQ_U64(lua_tointeger(L, -3), 4000);
        CHECK_EQ_U64(lua_tointeger(L, -2), 256 * 64 * 4 + 4000);
        CHECK(lua_isstring(L, -1) && strlen(lua_tostring(L, -1)) > 0);
    }
    /* a second openlib returns the same table */
    lua_pushcfunction(L, dpprof_openlib);
    lua_call(L, 0, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "dpprof");
    lua_call(L, 1, 1);
    CHECK(lua_rawequal(L, -1, -2));
    lua_close(L);
    dpprof_shutdown();
    return check_report("test_embed");
}
