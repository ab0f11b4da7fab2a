/* lua_privacy.c: dpprof.privacy, the Lua face of the RDP accountant (engine/dp/privacy.h).
 *
 * dpprof.privacy.epsilon{sample_rate=, noise_multiplier=, steps=, delta=}
 *   -> result table {epsilon=, delta=, order=, sample_rate=, noise_multiplier=, steps=}
 *      ε at δ after `steps` Poisson-sampled Gaussian steps, as Opacus's RDPAccountant;
 *      order is the optimal RDP order (0 when steps = 0); epsilon is math.huge at σ = 0.
 * dpprof.privacy.noise_multiplier{epsilon=, delta=, sample_rate=, steps=
 *                                 [, epsilon_tolerance=0.01]}
 *   -> result table {noise_multiplier=, epsilon=, delta=, order=, sample_rate=, steps=,
 *                    target_epsilon=}: Opacus's get_noise_multiplier; epsilon is ε at the
 *      returned σ, within epsilon_tolerance below target_epsilon.
 * Results print as "epsilon=... at delta=... (order ...)". Unknown or missing keys, wrong
 * types and out-of-range values raise "script.lua:LINE: dpprof.privacy.<fn>: ..." naming
 * the key and the valid keys or range; an unreachable target ε raises too.
 *
 * Thin on purpose: check the option table strictly (a misspelt key must not
 * silently fall back to a default privacy parameter), call privacy.c, return
 * a plain table that carries ε together with the δ it holds at.
 *
 * Errors longjmp out of these functions; nothing here owns memory, and the
 * message buffers live on the C stack and are copied by lua_pushfstring first.
 */
#include "lua_engine.h"

#include "lua_util.h"
#include "privacy.h"

#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RESULT_METATABLE "dpprof.privacy.result"

static const char *const EPSILON_KEYS[] = {"sample_rate", "noise_multiplier", "steps", "delta", NULL};
static const char EPSILON_KEY_LIST[] = "sample_rate, noise_multiplier, steps, delta";

static const char *const NOISE_KEYS[] = {"epsilon", "delta", "sample_rate", "steps", "epsilon_tolerance", NULL};
static const char NOISE_KEY_LIST[] = "epsilon, delta, sample_rate, steps, epsilon_tolerance";

/* Which function and keys an option table is checked for, for the messages. */
typedef struct options {
    const char *function;     /* "dpprof.privacy.epsilon" */
    const char *const *valid; /* NULL-terminated */
    const char *key_list;     /* the valid keys, comma separated */
} options;

static const options EPSILON_OPTIONS = {"dpprof.privacy.epsilon", EPSILON_KEYS, EPSILON_KEY_LIST};
static const options NOISE_OPTIONS = {"dpprof.privacy.noise_multiplier", NOISE_KEYS, NOISE_KEY_LIST};

static int option_error(lua_State *L, const options *o, const char *fmt, ...);
static void check_keys(lua_State *L, const options *o);
static lua_Number field_number(lua_State *L, const options *o, const char *key);
static lua_Number field_number_or(lua_State *L, const options *o, const char *key, lua_Number fallback);
static lua_Integer field_integer(lua_State *L, const options *o, const char *key);
static void set_number(lua_State *L, const char *key, lua_Number value);

/* epsilon{sample_rate=, noise_multiplier=, steps=, delta=} -> result table */
static int privacy_epsilon(lua_State *L) {
    const options *o = &EPSILON_OPTIONS;
    check_keys(L, o);
    lua_Number sample_rate = field_number(L, o, "sample_rate");
    lua_Number noise_multiplier = field_number(L, o, "noise_multiplier");
    lua_Integer steps = field_integer(L, o, "steps");
    lua_Number delta = field_number(L, o, "delta");

    char err[256];
    double epsilon, order;
    if (dp_privacy_epsilon(sample_rate, noise_multiplier, (int64_t)steps, delta, &epsilon, &order, err, sizeof err) !=
        DP_PRIVACY_OK)
        return option_error(L, o, "%s", err);

    lua_createtable(L, 0, 6);
    set_number(L, "epsilon", epsilon);
    set_number(L, "delta", delta);
    set_number(L, "order", order);
    set_number(L, "sample_rate", sample_rate);
    set_number(L, "noise_multiplier", noise_multiplier);
    lua_pushinteger(L, steps);
    lua_setfield(L, -2, "steps");
    luaL_setmetatable(L, RESULT_METATABLE);
    return 1;
}

/* noise_multiplier{epsilon=, delta=, sample_rate=, steps= [, epsilon_tolerance=]} -> result */
static int privacy_noise_multiplier(lua_State *L) {
    const options *o = &NOISE_OPTIONS;
    check_keys(L, o);
    lua_Number target_epsilon = field_number(L, o, "epsilon");
    lua_Number delta = field_number(L, o, "delta");
    lua_Number sample_rate = field_number(L, o, "sample_rate");
    lua_Integer steps = field_integer(L, o, "steps");
    lua_Number tolerance = field_number_or(L, o, "epsilon_tolerance", DP_PRIVACY_EPSILON_TOLERANCE);

    char err[256];
    double noise_multiplier, epsilon, order;
    if (dp_privacy_noise_multiplier(target_epsilon, delta, sample_rate, (int64_t)steps, tolerance, &noise_multiplier,
                                    &epsilon, &order, err, sizeof err) != DP_PRIVACY_OK)
        return option_error(L, o, "%s", err);

    lua_createtable(L, 0, 7);
    set_number(L, "noise_multiplier", noise_multiplier);
    set_number(L, "epsilon", epsilon);
    set_number(L, "delta", delta);
    set_number(L, "order", order);
    set_number(L, "sample_rate", sample_rate);
    lua_pushinteger(L, steps);
    lua_setfield(L, -2, "steps");
    set_number(L, "target_epsilon", target_epsilon);
    luaL_setmetatable(L, RESULT_METATABLE);
    return 1;
}

/* __tostring: "[noise_multiplier=σ: ]epsilon=ε at delta=δ (order α)" */
static int result_tostring(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    char text[160];
    int n = 0;
    if (lua_getfield(L, 1, "noise_multiplier") == LUA_TNUMBER && lua_getfield(L, 1, "target_epsilon") == LUA_TNUMBER)
        n = snprintf(text, sizeof text, "noise_multiplier=%.10g: ", lua_tonumber(L, -2));
    lua_getfield(L, 1, "epsilon");
    lua_getfield(L, 1, "delta");
    lua_getfield(L, 1, "order");
    snprintf(text + n, sizeof text - (size_t)n, "epsilon=%.10g at delta=%g (order %g)", lua_tonumber(L, -3),
             lua_tonumber(L, -2), lua_tonumber(L, -1));
    lua_pushstring(L, text);
    return 1;
}

void dpl_open_privacy(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"epsilon", privacy_epsilon},
        {"noise_multiplier", privacy_noise_multiplier},
        {NULL, NULL},
    };
    static const luaL_Reg meta[] = {{"__tostring", result_tostring}, {NULL, NULL}};
    dpl_new_type(L, RESULT_METATABLE, meta, NULL, NULL);
    luaL_newlib(L, functions);
    lua_setfield(L, -2, "privacy");
}

/* ---- option-table helpers ---------------------------------------------- */

/* Raises "<where>dpprof.privacy.<fn>: <message>", where is the calling script's
 * line; named here rather than by luaL_argerror, which cannot name a function
 * reached through dp.privacy. */
static int option_error(lua_State *L, const options *o, const char *fmt, ...) {
    va_list ap;
    luaL_where(L, 1); /* the script line calling the C function */
    lua_pushfstring(L, "%s: ", o->function);
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 3);
    return lua_error(L);
}

/* Argument 1 must be a table whose keys are all in o->valid. */
static void check_keys(lua_State *L, const options *o) {
    if (lua_type(L, 1) != LUA_TTABLE)
        option_error(L, o, "expects a table of options {%s} (got %s)", o->key_list, luaL_typename(L, 1));
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
        lua_pop(L, 1);                      /* keep the key for lua_next */
        if (lua_type(L, -1) != LUA_TSTRING) /* no lua_tostring: it would confuse lua_next */
            option_error(L, o, "unexpected %s key (valid keys: %s)", luaL_typename(L, -1), o->key_list);
        const char *key = lua_tostring(L, -1);
        int known = 0;
        for (const char *const *v = o->valid; *v != NULL && !known; v++) known = strcmp(*v, key) == 0;
        if (!known) option_error(L, o, "unknown key '%s' (valid keys: %s)", key, o->key_list);
    }
}

static lua_Number field_number(lua_State *L, const options *o, const char *key) {
    int type = lua_getfield(L, 1, key);
    if (type == LUA_TNIL) option_error(L, o, "missing key '%s' (valid keys: %s)", key, o->key_list);
    if (type != LUA_TNUMBER) option_error(L, o, "'%s' must be a number (got %s)", key, luaL_typename(L, -1));
    lua_Number value = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return value;
}

static lua_Number field_number_or(lua_State *L, const options *o, const char *key, lua_Number fallback) {
    if (lua_getfield(L, 1, key) == LUA_TNIL) {
        lua_pop(L, 1);
        return fallback;
    }
    lua_pop(L, 1);
    return field_number(L, o, key);
}

/* An integer, or a float with an exact integer value (1e5 is accepted). */
static lua_Integer field_integer(lua_State *L, const options *o, const char *key) {
    int type = lua_getfield(L, 1, key);
    if (type == LUA_TNIL) option_error(L, o, "missing key '%s' (valid keys: %s)", key, o->key_list);
    if (type != LUA_TNUMBER) option_error(L, o, "'%s' must be an integer (got %s)", key, luaL_typename(L, -1));
    int is_integer;
    lua_Integer value = lua_tointegerx(L, -1, &is_integer);
    if (!is_integer) option_error(L, o, "'%s' must be an integer (got %f)", key, lua_tonumber(L, -1));
    lua_pop(L, 1);
    return value;
}

static void set_number(lua_State *L, const char *key, lua_Number value) {
    lua_pushnumber(L, value);
    lua_setfield(L, -2, key);
}
