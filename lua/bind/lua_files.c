/* lua_files.c: files named by scripts, through common/safe_file (never a planted link, device or
 * FIFO; reads capped; writes atomic):
 *
 *   dpprof.read_file(path [, max_bytes]) -> text | nil, message
 *       the whole regular file (links followed); max_bytes defaults to 256 MiB
 *   dpprof.write_file(path, text) -> true | nil, message
 *       through a unique temporary and a rename; refuses to replace anything but a regular file
 *   dpprof.lock(path, note) -> lock | nil, holder
 *       an exclusive lock on the file at path (created if absent) holding note; when another
 *       process holds it, nil and the note that process left. lock:release() (also __close and
 *       __gc) lets it go; the lock dies with the process too.
 *   dpprof.writable(path) -> true | nil, message
 *       whether write_file could replace what is at path: nothing, or a regular file
 *   dpprof.name_max(dir) -> the longest file name dir accepts (bytes)
 *   dpprof.remove_stale_temps(dir) -> how many were removed | nil, message
 *       the temporaries in dir that writers killed mid-write left (this host's, whose process
 *       is gone); a live writer's is never touched */
#include "lua_engine.h"

#include "safe_file.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#define LOCK_MT "dpprof.lock"
#define BUFFER_MT "dpprof.read_file.buffer"

static int fail(lua_State *L, const char *why) {
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
}

static int buffer_gc(lua_State *L) {
    char **text = lua_touserdata(L, 1);
    free(*text);
    *text = NULL;
    return 0;
}

static int l_read_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer max = luaL_optinteger(L, 2, (lua_Integer)DPFILE_MAX_READ);
    luaL_argcheck(L, max >= 0, 2, "max_bytes must be >= 0");
    /* the buffer belongs to a userdata, so a memory error while pushing the string leaks nothing */
    char **text = lua_newuserdatauv(L, sizeof *text, 0);
    *text = NULL;
    luaL_setmetatable(L, BUFFER_MT);
    char why[1024];
    size_t len;
    if (dpfile_read(path, (size_t)max, text, &len, why, sizeof why) != 0) return fail(L, why);
    lua_pushlstring(L, *text, len);
    free(*text);
    *text = NULL;
    return 1;
}

static int l_write_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    char why[1024];
    if (dpfile_write(path, text, len, why, sizeof why) != 0) return fail(L, why);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_writable(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char why[1024];
    if (dpfile_check_target(path, why, sizeof why) != 0) return fail(L, why);
    lua_pushboolean(L, 1);
    return 1;
}

static int lock_release(lua_State *L) {
    int *fd = luaL_checkudata(L, 1, LOCK_MT);
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return 0;
}

static int l_lock(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    const char *note = luaL_optstring(L, 2, "");
    int *fd = lua_newuserdatauv(L, sizeof *fd, 0); /* released by __gc if an error comes first */
    *fd = -1;
    luaL_setmetatable(L, LOCK_MT);
    char why[1024];
    *fd = dpfile_lock(path, note, why, sizeof why);
    if (*fd < 0) return fail(L, why);
    return 1;
}

static int l_remove_stale_temps(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    char why[1024];
    int n = dpfile_remove_stale_temps(dir, why, sizeof why);
    if (n < 0) return fail(L, why);
    lua_pushinteger(L, n);
    return 1;
}

static int l_name_max(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    long n = pathconf(*dir ? dir : ".", _PC_NAME_MAX);
    lua_pushinteger(L, n > 0 ? n : NAME_MAX);
    return 1;
}

void dpl_open_files(lua_State *L) {
    if (luaL_newmetatable(L, LOCK_MT)) {
        static const luaL_Reg meta[] = {{"__gc", lock_release}, {"__close", lock_release}, {NULL, NULL}};
        luaL_setfuncs(L, meta, 0);
        lua_newtable(L);
        lua_pushcfunction(L, lock_release);
        lua_setfield(L, -2, "release");
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, BUFFER_MT)) {
        lua_pushcfunction(L, buffer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"read_file", l_read_file}, {"write_file", l_write_file}, {"lock", l_lock},
                                   {"writable", l_writable},   {"name_max", l_name_max},
                                   {"remove_stale_temps", l_remove_stale_temps}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
