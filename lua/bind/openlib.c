/* openlib.c: assembles the dpprof module from the engine's bindings (lua/bind/lua_*.c), the
 * privacy accountants, the charts (plots/) and the Lua-side modules (lua/dpprof/). */
#include "dpprof.h"

#include "device.h"
#include "comm.h"
#include "dpprof_engine.h"
#include "error.h"
#include "lua_engine.h"
#include "plot_lua.h"

#include <dlfcn.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DPPROF_SOURCE_LUA_DIR
#define DPPROF_SOURCE_LUA_DIR ""
#endif

static int has_modules(const char *dir) {
    char probe[PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s/dpprof/core.lua", dir) >= (int)sizeof probe) return 0;
    return access(probe, R_OK) == 0;
}

/* Finds the directory holding dpprof/core.lua; writes it to out and returns 1, or 0. */
static int find_lua_dir(char *out, size_t n) {
    const char *env = getenv("DPPROF_LUA_PATH");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return has_modules(out);
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        const char *rel[] = {"/../lua", "/../share/dpprof/lua", "/../../lua"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(out, n, "%s%s", exe, rel[i]);
            if (has_modules(out)) return 1;
        }
    }
    /* loaded as a Lua C module (dpprof.so in LIBDIR/lua/5.4/, LIBDIR one or two levels below the
     * prefix: lib/ or lib/x86_64-linux-gnu/): the prefix's share/dpprof/lua */
    Dl_info so;
    if (dladdr((void *)(uintptr_t)dpprof_openlib, &so) && so.dli_fname && strchr(so.dli_fname, '/')) {
        char lib[PATH_MAX];
        snprintf(lib, sizeof lib, "%s", so.dli_fname);
        *strrchr(lib, '/') = '\0';
        const char *rel[] = {"/../../../share/dpprof/lua", "/../../../../share/dpprof/lua"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(out, n, "%s%s", lib, rel[i]);
            if (has_modules(out)) return 1;
        }
    }
    snprintf(out, n, "%s", DPPROF_SOURCE_LUA_DIR);
    return *out && has_modules(out);
}

/* package.path = dir/?.lua;dir/?/init.lua;<old> */
static void add_to_path(lua_State *L, const char *dir) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

/* package.loaded["dpprof.<name>"] = dpprof.<name> for every table field of the module on top,
 * so that Lua's argument errors name functions "dpprof.memory.stats" rather than "?". */
static void register_subtables(lua_State *L) {
    int mod = lua_gettop(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushnil(L);
    while (lua_next(L, mod)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TTABLE) {
            lua_pushfstring(L, "dpprof.%s", lua_tostring(L, -2));
            lua_pushvalue(L, -2);
            lua_settable(L, -5);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Adds dpprof.plot. plots/ is a library of its own whose entry point, like dpprof_openlib's, is
 * a lua_CFunction pushing its table; here it becomes a dpl_open_* like the others. */
static void dpl_open_plot(lua_State *L) {
    dpplot_lua_open(L);
    lua_setfield(L, -2, "plot");
}

int dpprof_openlib(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    if (lua_getfield(L, -1, "dpprof") == LUA_TTABLE) {
        lua_remove(L, -2);
        return 1;
    }
    lua_pop(L, 1);
    if (dp_engine_init() != DP_OK) return luaL_error(L, "dpprof: %s", dp_error_message());

    lua_newtable(L);
    dpl_open_tensor(L);
    dpl_open_memory(L);
    dpl_open_device(L);
    dpl_open_profile(L);
    dpl_open_process(L);
    dpl_open_host(L);
    dpl_open_files(L);
    dpl_open_json(L);
    dpl_open_results_schema(L);
    dpl_open_options_schema(L);
    dpl_open_model(L);
    dpl_open_model_io(L);
    dpl_open_batch(L);
    dpl_open_optim(L);
    dpl_open_dp(L);
    dpl_open_dist(L);
    dpl_open_privacy(L);
    dpl_open_tokenizer(L);
    dpl_open_dataset(L);
    dpl_open_plot(L);

    /* registered before the Lua side loads, so that its require("dpprof") finds this table */
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "dpprof");
    lua_remove(L, -2);

    char dir[PATH_MAX];
    if (!find_lua_dir(dir, sizeof dir)) {
        const char *env = getenv("DPPROF_LUA_PATH");
        if (env && *env)
            return luaL_error(L,
                              "dpprof: DPPROF_LUA_PATH is '%s', which holds no dpprof/core.lua; set it to "
                              "the repository's lua/ directory or unset it",
                              env);
        return luaL_error(L,
                          "dpprof: cannot find its Lua modules (dpprof/core.lua) beside the binary "
                          "or in '%s'; set DPPROF_LUA_PATH to the repository's lua/ directory",
                          DPPROF_SOURCE_LUA_DIR);
    }
    lua_pushstring(L, dir);
    lua_setfield(L, -2, "lua_dir");
    add_to_path(L, dir);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "dpprof.core");
    lua_call(L, 1, 0);
    register_subtables(L);
    return 1;
}

void dpprof_shutdown(void) {
    dp_engine_shutdown();
    dp_comm_finalize();
}
