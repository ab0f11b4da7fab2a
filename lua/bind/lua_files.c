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
 *   dpprof.file_digest(path) -> "N bytes, fnv1a64 HEX" | nil, message
 *       the regular file's size and FNV-1a 64-bit hash, read as a stream (any size)
 *   dpprof.writable(path) -> true | nil, message
 *       whether write_file could replace what is at path: nothing, or a regular file
 *   dpprof.name_max(dir) -> the longest file name dir accepts (bytes)
 *   dpprof.remove_stale_temps(dir) -> how many were removed | nil, message
 *       the temporaries in dir that writers killed mid-write left (this host's, whose process
 *       is gone); a live writer's is never touched
 *   dpprof.mkdir_p(path) -> true | nil, message
 *       path and every missing directory above it
 *   dpprof.list_dir(path) -> sorted list of names | nil, message
 *       the names in the directory, without "." and ".."
 * (mkdir_p and list_dir make and read directories, not files, so they go to the system directly.) */
#include "lua_engine.h"

#include "lua_util.h"
#include "safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define LOCK_MT "dpprof.lock"
#define BUFFER_MT "dpprof.read_file.buffer"
#define DIR_MT "dpprof.list_dir.handle"

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

static int l_file_digest(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char why[1024];
    unsigned long long hash, size;
    if (dpfile_digest(path, &hash, &size, why, sizeof why) != 0) return fail(L, why);
    char text[64];
    snprintf(text, sizeof text, "%llu bytes, fnv1a64 %016llx", size, hash);
    lua_pushstring(L, text);
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

static int fail_result(lua_State *L, const char *fmt, const char *path, int e) {
    lua_pushnil(L);
    lua_pushfstring(L, fmt, path, strerror(e));
    return 2;
}

static int l_mkdir_p(lua_State *L) {
    size_t n;
    const char *path = luaL_checklstring(L, 1, &n);
    luaL_argcheck(L, n > 0 && n < PATH_MAX, 1, "path must be a non-empty path shorter than PATH_MAX");
    char buf[PATH_MAX];
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            struct stat st;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return fail_result(L, "cannot create '%s': %s", buf, errno);
            if (stat(buf, &st) != 0) return fail_result(L, "cannot create '%s': %s", buf, errno);
            if (!S_ISDIR(st.st_mode)) return fail_result(L, "cannot create '%s': %s", buf, ENOTDIR);
            *p = saved;
            if (saved == '\0') break;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int dir_gc(lua_State *L) {
    DIR **d = lua_touserdata(L, 1);
    if (*d) closedir(*d);
    *d = NULL;
    return 0;
}

static int l_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR **d = lua_newuserdatauv(L, sizeof *d, 0); /* closed by __gc if an error comes first */
    *d = NULL;
    static const luaL_Reg meta[] = {{"__gc", dir_gc}, {NULL, NULL}};
    dpl_new_type(L, DIR_MT, meta, NULL, NULL);
    luaL_setmetatable(L, DIR_MT);
    *d = opendir(path);
    if (!*d) return fail_result(L, "cannot list '%s': %s", path, errno);
    lua_newtable(L);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(*d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        lua_pushstring(L, e->d_name);
        lua_rawseti(L, -2, ++n);
    }
    closedir(*d);
    *d = NULL;
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, -3);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
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
    static const luaL_Reg fns[] = {
        {"read_file", l_read_file}, {"write_file", l_write_file}, {"lock", l_lock}, {"file_digest", l_file_digest},
        {"writable", l_writable},   {"name_max", l_name_max},     {"remove_stale_temps", l_remove_stale_temps},
        {"mkdir_p", l_mkdir_p},     {"list_dir", l_list_dir},     {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
