/* lua_options_schema.c: dpprof.options_schema, every option a configuration takes
 * (common/options_schema.h) as Lua tables:
 *
 *   dpprof.options_schema = {
 *     sections = {"experiment", "model", ...},                       -- in order
 *     options = {{section=, key=, type=, min=, max=, default=, choices={...}, doc=,
 *                 required=, zero_default=, fit=, sweep=, load=, set_elsewhere=, experiment=,
 *                 adamw=, sgd=, risk=}, ...},                                -- in order
 *     keys = function(section, filter) -> {key, ...}
 *   }
 *
 * min and max are present only where the schema bounds the value; choices only for a WORD with
 * its words listed; default is the docs' text of it; the flags are booleans (options_schema.h
 * says what each means). keys(section [, filter]) lists a section's keys in order, those whose
 * flags are all set in filter ({fit = true}) and, for each false, unset. */
#include "lua_engine.h"

#include "options_schema.h"

#include <lauxlib.h>
#include <string.h>

static const struct {
    unsigned bit;
    const char *name;
} flag_names[] = {{DPO_REQUIRED, "required"},
                  {DPO_ZERO_DEFAULT, "zero_default"},
                  {DPO_FIT, "fit"},
                  {DPO_SWEEP, "sweep"},
                  {DPO_LOAD, "load"},
                  {DPO_SET_ELSEWHERE, "set_elsewhere"},
                  {DPO_EXPERIMENT, "experiment"},
                  {DPO_ADAMW, "adamw"},
                  {DPO_SGD, "sgd"},
                  {DPO_RISK, "risk"}};
#define N_FLAGS (sizeof flag_names / sizeof *flag_names)

/* Pushes "a, b, c" as the list {"a", "b", "c"}. */
static void push_words(lua_State *L, const char *text) {
    lua_newtable(L);
    int n = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *end = e;
        while (end > p && end[-1] == ' ') end--;
        if (end > p) {
            lua_pushlstring(L, p, (size_t)(end - p));
            lua_rawseti(L, -2, ++n);
        }
        p = e;
    }
}

static void push_option(lua_State *L, const dpo_option *o) {
    lua_createtable(L, 0, 8 + (int)N_FLAGS);
    lua_pushstring(L, dpo_section_name(o->section)), lua_setfield(L, -2, "section");
    lua_pushstring(L, o->key), lua_setfield(L, -2, "key");
    lua_pushstring(L, dpo_type_name(o->type)), lua_setfield(L, -2, "type");
    if (o->type == DPO_T_INTEGER || o->type == DPO_T_NUMBER) {
        if (o->min > -DPO_UNBOUNDED) {
            if (o->type == DPO_T_INTEGER)
                lua_pushinteger(L, (lua_Integer)o->min);
            else
                lua_pushnumber(L, o->min);
            lua_setfield(L, -2, "min");
        }
        if (o->max < DPO_UNBOUNDED) {
            if (o->type == DPO_T_INTEGER)
                lua_pushinteger(L, (lua_Integer)o->max);
            else
                lua_pushnumber(L, o->max);
            lua_setfield(L, -2, "max");
        }
    }
    if (o->def) lua_pushstring(L, o->def), lua_setfield(L, -2, "default");
    if (o->choices) push_words(L, o->choices), lua_setfield(L, -2, "choices");
    lua_pushstring(L, o->doc), lua_setfield(L, -2, "doc");
    for (size_t f = 0; f < N_FLAGS; f++)
        lua_pushboolean(L, (o->flags & flag_names[f].bit) != 0), lua_setfield(L, -2, flag_names[f].name);
}

/* The section named by the string at idx, or an argument error naming the valid ones. */
static dpo_section check_section(lua_State *L, int idx) {
    const char *name = luaL_checkstring(L, idx);
    for (int s = 0; s < DPO_N_SECTIONS; s++)
        if (strcmp(name, dpo_section_name((dpo_section)s)) == 0) return (dpo_section)s;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int s = 0; s < DPO_N_SECTIONS; s++) {
        if (s) luaL_addstring(&b, ", ");
        luaL_addstring(&b, dpo_section_name((dpo_section)s));
    }
    luaL_pushresult(&b);
    return (dpo_section)luaL_argerror(
        L, idx, lua_pushfstring(L, "unknown section '%s' (valid: %s)", name, lua_tostring(L, -1)));
}

/* dpprof.options_schema.keys(section [, filter]) -> the section's keys, in order */
static int l_keys(lua_State *L) {
    dpo_section s = check_section(L, 1);
    unsigned with = 0, without = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
            size_t f = 0;
            while (f < N_FLAGS && strcmp(k, flag_names[f].name) != 0) f++;
            if (f == N_FLAGS) return luaL_error(L, "dpprof.options_schema.keys: unknown flag '%s'", k);
            if (lua_toboolean(L, -1))
                with |= flag_names[f].bit;
            else
                without |= flag_names[f].bit;
            lua_pop(L, 1);
        }
    }
    const char *keys[DPO_N_OPTIONS + 1];
    int n = dpo_keys(s, with, without, keys, DPO_N_OPTIONS + 1);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) lua_pushstring(L, keys[i]), lua_rawseti(L, -2, i + 1);
    return 1;
}

void dpl_open_options_schema(lua_State *L) {
    lua_createtable(L, 0, 3);
    lua_createtable(L, DPO_N_SECTIONS, 0);
    for (int s = 0; s < DPO_N_SECTIONS; s++)
        lua_pushstring(L, dpo_section_name((dpo_section)s)), lua_rawseti(L, -2, s + 1);
    lua_setfield(L, -2, "sections");
    lua_createtable(L, DPO_N_OPTIONS, 0);
    for (int i = 0; i < DPO_N_OPTIONS; i++) push_option(L, dpo_option_at(i)), lua_rawseti(L, -2, i + 1);
    lua_setfield(L, -2, "options");
    lua_pushcfunction(L, l_keys);
    lua_setfield(L, -2, "keys");
    lua_setfield(L, -2, "options_schema");
}
