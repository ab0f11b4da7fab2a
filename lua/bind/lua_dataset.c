/* lua_dataset.c: data sets from Lua (issue 41.2): dpprof.dataset(path [, {format=, window=,
 * max_record_bytes=}]) opens a streaming reader (engine/text/dataset.h) as a userdata
 * ("dpprof.dataset") with
 *   ds:next()      -> record, line, index   (nil at the end): a string for text formats, the decoded
 *                                           JSON value for jsonl and json (dpprof.json's tables)
 *   ds:bad()       -> count, {{line=, reason=}, ...}   the bad records so far (the first ones kept)
 *   ds:progress()  -> bytes read, file size
 *   ds.format, ds.path                      (fields)
 *   ds:close()     (also __gc, __close)
 * An error that ends the stream (the file is not in its format, a read fails) is raised. */
#include "lua_engine.h"

#include "dataset.h"
#include "error.h"
#include "lua_json.h"
#include "lua_util.h"

#include <lauxlib.h>
#include <string.h>

#define DATASET_MT "dpprof.dataset"

typedef struct {
    dp_dataset *d;
} dpl_dataset;

static dp_dataset *check_ds(lua_State *L, int idx) {
    dpl_dataset *u = luaL_checkudata(L, idx, DATASET_MT);
    if (!u->d) luaL_argerror(L, idx, "data set was closed");
    return u->d;
}

static int l_dataset(lua_State *L) {
    static const char *const keys[] = {"format", "window", "max_record_bytes", NULL};
    const char *fname = "dpprof.dataset";
    const char *path = luaL_checkstring(L, 1);
    dp_dataset_opts o = {DP_DATASET_AUTO, 0, 0};
    if (!lua_isnoneornil(L, 2)) {
        dpl_check_keys(L, 2, fname, keys);
        const char *f = dpl_opt_str_field(L, 2, fname, "format", "auto");
        if (dp_dataset_format_parse(f, &o.format) != 0)
            return luaL_error(L, "%s: format '%s' is unknown (valid: auto, jsonl, json, text, windows)", fname, f);
        int64_t w = dpl_opt_int_field(L, 2, fname, "window", 0),
                m = dpl_opt_int_field(L, 2, fname, "max_record_bytes", 0);
        if (w < 0 || m < 0) return luaL_error(L, "%s: window and max_record_bytes must be >= 0", fname);
        o.window_bytes = (size_t)w;
        o.max_record_bytes = (size_t)m;
    }
    dpl_dataset *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->d = NULL;
    luaL_setmetatable(L, DATASET_MT);
    if (dp_dataset_open(path, &o, &u->d) != DP_OK) return luaL_error(L, "%s: %s", fname, dp_error_message());
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int l_next(lua_State *L) {
    dp_dataset *d = check_ds(L, 1);
    dp_record r;
    int got = dp_dataset_next(d, &r);
    if (got < 0) return luaL_error(L, "%s", dp_error_message());
    if (got == 0) {
        lua_pushnil(L);
        return 1;
    }
    if (r.json)
        dpl_json_push_tree(L, r.json);
    else
        lua_pushlstring(L, r.text ? r.text : "", r.len);
    lua_pushinteger(L, r.line);
    lua_pushinteger(L, r.index);
    return 3;
}

static int l_bad(lua_State *L) {
    dp_dataset *d = check_ds(L, 1);
    const dp_bad_record *kept = NULL;
    int n = 0;
    int64_t count = dp_dataset_bad(d, &kept, &n);
    lua_pushinteger(L, count);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, kept[i].line), lua_setfield(L, -2, "line");
        lua_pushstring(L, kept[i].reason), lua_setfield(L, -2, "reason");
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

static int l_progress(lua_State *L) {
    uint64_t done = 0, total = 0;
    dp_dataset_progress(check_ds(L, 1), &done, &total);
    lua_pushinteger(L, (lua_Integer)done);
    lua_pushinteger(L, (lua_Integer)total);
    return 2;
}

static int l_close(lua_State *L) {
    dpl_dataset *u = luaL_checkudata(L, 1, DATASET_MT);
    dp_dataset_close(u->d);
    u->d = NULL;
    return 0;
}

static int l_fields(lua_State *L) {
    dpl_dataset *u = luaL_checkudata(L, 1, DATASET_MT);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "path") == 0)
        lua_getiuservalue(L, 1, 1);
    else if (strcmp(k, "format") == 0 && u->d)
        lua_pushstring(L, dp_dataset_format_name(dp_dataset_format_of(u->d)));
    else
        lua_pushnil(L);
    return 1;
}

void dpl_open_dataset(lua_State *L) {
    static const luaL_Reg meta[] = {{"__gc", l_close}, {"__close", l_close}, {NULL, NULL}};
    static const luaL_Reg methods[] = {
        {"next", l_next}, {"bad", l_bad}, {"progress", l_progress}, {"close", l_close}, {NULL, NULL}};
    dpl_new_type(L, DATASET_MT, meta, methods, l_fields);
    lua_pushcfunction(L, l_dataset);
    lua_setfield(L, -2, "dataset");
}
