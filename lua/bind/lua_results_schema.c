/* lua_results_schema.c: dpprof.results_schema, the result JSON's one description
 * (common/results_schema.h) as Lua tables, for the validator in lua/dpprof/results.lua:
 *
 *   dpprof.results_schema = {
 *     version = 1,
 *     fields = {{path=, type=, when=, nonneg=, nullable=, open=, marks=, choices=}, ...}, -- in order
 *     choices = {statuses = {...}, phases = {...}, samplings = {...}, bounds = {...}},
 *   }
 *
 * type is "string", "integer", "number", "boolean", "object", "array", "scalar" or "any"; when is
 * "always", "ok", "failed", "oom", "predicted", "parent" or "optional"; the flags are booleans;
 * choices is nil or a list's name (results_schema.h says what each means). */
#include "lua_engine.h"

#include "results_schema.h"

#include <lauxlib.h>

static void set_flag(lua_State *L, const char *key, int on) {
    lua_pushboolean(L, on);
    lua_setfield(L, -2, key);
}

/* Sets t[key] (t on top) to a list of names, given as a NULL-terminated array. */
static void set_names(lua_State *L, const char *key, const char *const *names) {
    lua_newtable(L);
    for (int i = 0; names[i]; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, key);
}

void dpl_open_results_schema(lua_State *L) {
#define DPL_NAME(id, name) name,
    static const char *const statuses[] = {DPR_STATUSES(DPL_NAME) NULL};
    static const char *const phases[] = {DPR_PHASES(DPL_NAME) NULL};
    static const char *const samplings[] = {DPR_SAMPLINGS(DPL_NAME) NULL};
    static const char *const bounds[] = {DPR_BOUNDS(DPL_NAME) NULL};
#undef DPL_NAME
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, DPR_VERSION);
    lua_setfield(L, -2, "version");
    lua_createtable(L, DPR_N_FIELDS, 0);
    for (int id = 0; id < DPR_N_FIELDS; id++) {
        const dpr_field *f = dpr_field_of(id);
        lua_createtable(L, 0, 8);
        lua_pushstring(L, f->path);
        lua_setfield(L, -2, "path");
        lua_pushstring(L, dpr_type_name(f->type));
        lua_setfield(L, -2, "type");
        lua_pushstring(L, dpr_when_name(f->when));
        lua_setfield(L, -2, "when");
        set_flag(L, "nonneg", f->flags & DPR_NONNEG);
        set_flag(L, "nullable", f->flags & DPR_NULLABLE);
        set_flag(L, "open", f->flags & DPR_OPEN);
        set_flag(L, "marks", f->flags & DPR_MARKS);
        if (f->choices) {
            lua_pushstring(L, f->choices);
            lua_setfield(L, -2, "choices");
        }
        lua_rawseti(L, -2, id + 1);
    }
    lua_setfield(L, -2, "fields");
    lua_createtable(L, 0, 4);
    set_names(L, "statuses", statuses);
    set_names(L, "phases", phases);
    set_names(L, "samplings", samplings);
    set_names(L, "bounds", bounds);
    lua_setfield(L, -2, "choices");
    lua_setfield(L, -2, "results_schema");
}
