/* lua_privacy.c: dpprof.privacy, the Lua face of the accountants (engine/privacy/accountant.h).
 *
 * dpprof.privacy.epsilon{[accountant="prv"|"rdp"|"pld",] sample_rate=, noise_multiplier=, steps=,
 *                        delta= [, eps_error=, delta_error= (prv) | value_discretization_interval=
 *                        (pld)]}
 *   -> result table {epsilon=, delta=, accountant=, sample_rate=, noise_multiplier=, steps=, and
 *      rdp: order=; prv: eps_error=, delta_error=, epsilon_estimate=, epsilon_lower=;
 *      pld: value_discretization_interval=, pessimistic=true}
 *      ε at δ after `steps` Poisson-sampled Gaussian steps; the default accountant is PRV (as
 *      Opacus's PrivacyEngine), whose epsilon is the upper end of its estimate; math.huge at σ = 0.
 *   history={{noise_multiplier=, sample_rate=, steps=}, ...} replaces the three one-segment keys
 *   for a history of segments (a noise schedule); the result then carries `history`.
 * dpprof.privacy.noise_multiplier{[accountant=,] epsilon=, delta=, sample_rate=, steps=
 *                                 [, epsilon_tolerance=0.01, accountant options]}
 *   -> the epsilon result at the σ found, plus noise_multiplier= and target_epsilon=: Opacus's
 *      get_noise_multiplier with that accountant; epsilon is within epsilon_tolerance below the
 *      target.
 * dpprof.privacy.accountants = {"rdp", "prv", "pld"}; dpprof.privacy.default_accountant = "prv";
 * dpprof.privacy.defaults = {eps_error=0.01, delta_error_fraction=0.001 (delta_error = that·δ),
 *                            value_discretization_interval=1e-4}.
 * Results print as "epsilon=... at delta=... (prv)" ("(rdp, order 12)"). Unknown or missing keys,
 * wrong types, out-of-range values, an unknown accountant and an option of another accountant
 * raise "script.lua:LINE: dpprof.privacy.<fn>: ..." naming the key and the valid keys, names or
 * range; an unreachable target ε raises too.
 *
 * Thin on purpose: check the option table strictly (a misspelt key must not
 * silently fall back to a default privacy parameter), call the accountant, return
 * a plain table that carries ε together with the δ it holds at and the accountant
 * that says so.
 *
 * Errors longjmp out of these functions; what they allocate is Lua's (the history's
 * segments are a userdata), and the message buffers live on the C stack and are
 * copied by lua_pushfstring first.
 */
#include "lua_engine.h"

#include "lua_util.h"

#include "accountant.h"

#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RESULT_METATABLE "dpprof.privacy.result"

static const char *const EPSILON_KEYS[] = {"accountant", "sample_rate", "noise_multiplier",
                                           "steps",      "history",     "delta",
                                           "eps_error",  "delta_error", "value_discretization_interval",
                                           NULL};
static const char EPSILON_KEY_LIST[] =
    "accountant, sample_rate, noise_multiplier, steps, history, delta, eps_error, delta_error, "
    "value_discretization_interval";

static const char *const NOISE_KEYS[] = {"accountant",  "epsilon",     "delta",
                                         "sample_rate", "steps",       "epsilon_tolerance",
                                         "eps_error",   "delta_error", "value_discretization_interval",
                                         NULL};
static const char NOISE_KEY_LIST[] =
    "accountant, epsilon, delta, sample_rate, steps, epsilon_tolerance, eps_error, delta_error, "
    "value_discretization_interval";

static const char *const SEGMENT_KEYS[] = {"noise_multiplier", "sample_rate", "steps", NULL};
static const char SEGMENT_KEY_LIST[] = "noise_multiplier, sample_rate, steps";

/* Which function and keys an option table is checked for, for the messages. */
typedef struct options {
    const char *function;     /* "dpprof.privacy.epsilon" */
    const char *const *valid; /* NULL-terminated */
    const char *key_list;     /* the valid keys, comma separated */
} options;

static const options EPSILON_OPTIONS = {"dpprof.privacy.epsilon", EPSILON_KEYS, EPSILON_KEY_LIST};
static const options NOISE_OPTIONS = {"dpprof.privacy.noise_multiplier", NOISE_KEYS, NOISE_KEY_LIST};

static int option_error(lua_State *L, const options *o, const char *fmt, ...);
static void check_keys(lua_State *L, int idx, const options *o);
static lua_Number field_number(lua_State *L, int idx, const options *o, const char *key);
static lua_Number field_number_or(lua_State *L, const options *o, const char *key, lua_Number fallback);
static lua_Integer field_integer(lua_State *L, int idx, const options *o, const char *key);
static void set_number(lua_State *L, const char *key, lua_Number value);
static dp_acct_kind field_accountant(lua_State *L, const options *o, dp_acct_options *opt);
static size_t field_history(lua_State *L, const options *o, dp_acct_segment **history);
static void push_result(lua_State *L, dp_acct_kind kind, double epsilon, double delta, const dp_acct_options *opt,
                        const dp_acct_detail *d, int n_fields);

/* epsilon{[accountant=,] sample_rate=, noise_multiplier=, steps= | history={...}, delta=,
 *         [eps_error=, delta_error= | value_discretization_interval=]} -> result table */
static int privacy_epsilon(lua_State *L) {
    const options *o = &EPSILON_OPTIONS;
    check_keys(L, 1, o);
    dp_acct_options opt;
    dp_acct_kind kind = field_accountant(L, o, &opt);
    lua_Number delta = field_number(L, 1, o, "delta");
    dp_acct_segment one, *history = &one;
    size_t n = field_history(L, o, &history);
    if (n == 0) {
        one.sample_rate = field_number(L, 1, o, "sample_rate");
        one.noise_multiplier = field_number(L, 1, o, "noise_multiplier");
        one.steps = (int64_t)field_integer(L, 1, o, "steps");
        n = 1;
    }

    char err[256];
    double epsilon;
    dp_acct_detail detail;
    if (dp_acct_epsilon(kind, history, n, delta, &opt, &epsilon, &detail, err, sizeof err) != DP_ACCT_OK)
        return option_error(L, o, "%s", err);

    push_result(L, kind, epsilon, delta, &opt, &detail, 9);
    if (history == &one) {
        set_number(L, "sample_rate", one.sample_rate);
        set_number(L, "noise_multiplier", one.noise_multiplier);
        lua_pushinteger(L, one.steps);
        lua_setfield(L, -2, "steps");
    } else {
        lua_getfield(L, 1, "history");
        lua_setfield(L, -2, "history");
    }
    return 1;
}

/* noise_multiplier{[accountant=,] epsilon=, delta=, sample_rate=, steps= [, epsilon_tolerance=,
 *                  accountant options]} -> result */
static int privacy_noise_multiplier(lua_State *L) {
    const options *o = &NOISE_OPTIONS;
    check_keys(L, 1, o);
    dp_acct_options opt;
    dp_acct_kind kind = field_accountant(L, o, &opt);
    lua_Number target_epsilon = field_number(L, 1, o, "epsilon");
    lua_Number delta = field_number(L, 1, o, "delta");
    lua_Number sample_rate = field_number(L, 1, o, "sample_rate");
    lua_Integer steps = field_integer(L, 1, o, "steps");
    lua_Number tolerance = field_number_or(L, o, "epsilon_tolerance", DP_ACCT_EPSILON_TOLERANCE);

    char err[256];
    double noise_multiplier, epsilon;
    if (dp_acct_noise_multiplier(kind, target_epsilon, delta, sample_rate, (int64_t)steps, tolerance, &opt,
                                 &noise_multiplier, &epsilon, err, sizeof err) != DP_ACCT_OK)
        return option_error(L, o, "%s", err);
    /* What the accountant reports besides ε (the order, PRV's estimate), at the σ found. */
    dp_acct_segment at = {noise_multiplier, sample_rate, (int64_t)steps};
    dp_acct_detail detail;
    if (dp_acct_epsilon(kind, &at, 1, delta, &opt, &epsilon, &detail, err, sizeof err) != DP_ACCT_OK)
        return option_error(L, o, "%s", err);

    push_result(L, kind, epsilon, delta, &opt, &detail, 10);
    set_number(L, "noise_multiplier", noise_multiplier);
    set_number(L, "sample_rate", sample_rate);
    lua_pushinteger(L, steps);
    lua_setfield(L, -2, "steps");
    set_number(L, "target_epsilon", target_epsilon);
    return 1;
}

/* __tostring: "[noise_multiplier=σ: ]epsilon=ε at delta=δ (accountant[, order α])" */
static int result_tostring(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    char text[200];
    int n = 0;
    if (lua_getfield(L, 1, "noise_multiplier") == LUA_TNUMBER && lua_getfield(L, 1, "target_epsilon") == LUA_TNUMBER)
        n = snprintf(text, sizeof text, "noise_multiplier=%.10g: ", lua_tonumber(L, -2));
    lua_getfield(L, 1, "epsilon");
    lua_getfield(L, 1, "delta");
    lua_getfield(L, 1, "accountant");
    n += snprintf(text + n, sizeof text - (size_t)n, "epsilon=%.10g at delta=%g (%s", lua_tonumber(L, -3),
                  lua_tonumber(L, -2), luaL_optstring(L, -1, "rdp"));
    if (lua_getfield(L, 1, "order") == LUA_TNUMBER && n < (int)sizeof text)
        n += snprintf(text + n, sizeof text - (size_t)n, ", order %g", lua_tonumber(L, -1));
    if (n < (int)sizeof text) snprintf(text + n, sizeof text - (size_t)n, ")");
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
    lua_createtable(L, 3, 0);
    for (int k = DP_ACCT_RDP; k <= DP_ACCT_PLD; k++) {
        lua_pushstring(L, dp_acct_name((dp_acct_kind)k));
        lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, "accountants");
    lua_pushstring(L, dp_acct_name(DP_ACCT_DEFAULT));
    lua_setfield(L, -2, "default_accountant");
    lua_createtable(L, 0, 3);
    set_number(L, "eps_error", DP_ACCT_PRV_EPS_ERROR);
    set_number(L, "delta_error_fraction", DP_ACCT_PRV_DELTA_ERROR_FRACTION);
    set_number(L, "value_discretization_interval", DP_ACCT_PLD_INTERVAL);
    lua_setfield(L, -2, "defaults");
    lua_setfield(L, -2, "privacy");
}

/* ---- accountants, histories, results ------------------------------------------------------ */

/* The accountant named by `accountant` (default DP_ACCT_DEFAULT) and its options; an option of
 * another accountant is an error. */
static dp_acct_kind field_accountant(lua_State *L, const options *o, dp_acct_options *opt) {
    static const struct {
        const char *key;
        dp_acct_kind kind;
    } owned[] = {
        {"eps_error", DP_ACCT_PRV}, {"delta_error", DP_ACCT_PRV}, {"value_discretization_interval", DP_ACCT_PLD}};
    dp_acct_kind kind = DP_ACCT_DEFAULT;
    int type = lua_getfield(L, 1, "accountant");
    if (type != LUA_TNIL) {
        char err[128];
        if (type != LUA_TSTRING)
            option_error(L, o, "'accountant' must be a string (valid: %s; got %s)", DP_ACCT_NAMES,
                         luaL_typename(L, -1));
        if (dp_acct_parse(lua_tostring(L, -1), &kind, err, sizeof err) != DP_ACCT_OK) option_error(L, o, "%s", err);
    }
    lua_pop(L, 1);
    for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++) {
        lua_getfield(L, 1, owned[k].key);
        if (!lua_isnil(L, -1) && kind != owned[k].kind)
            option_error(L, o, "'%s' applies to accountant '%s' only (accountant is '%s')", owned[k].key,
                         dp_acct_name(owned[k].kind), dp_acct_name(kind));
        lua_pop(L, 1);
    }
    dp_acct_options_default(opt);
    opt->eps_error = field_number_or(L, o, "eps_error", opt->eps_error);
    opt->delta_error = field_number_or(L, o, "delta_error", opt->delta_error);
    if (lua_getfield(L, 1, "delta_error") != LUA_TNIL && !(opt->delta_error > 0.0))
        option_error(L, o, "delta_error must be in (0, delta) (got %f)", opt->delta_error);
    lua_pop(L, 1);
    opt->interval = field_number_or(L, o, "value_discretization_interval", opt->interval);
    return kind;
}

/* The `history` option, {{noise_multiplier=, sample_rate=, steps=}, ...}, into a userdata left
 * on the stack; 0 (and nothing pushed) when absent. With it, the one-segment keys are errors. */
static size_t field_history(lua_State *L, const options *o, dp_acct_segment **history) {
    if (lua_getfield(L, 1, "history") == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1))
        option_error(L, o, "'history' must be a list of {%s} (got %s)", SEGMENT_KEY_LIST, luaL_typename(L, -1));
    static const char *const single[] = {"sample_rate", "noise_multiplier", "steps"};
    for (size_t k = 0; k < 3; k++)
        if (lua_getfield(L, 1, single[k]) != LUA_TNIL)
            option_error(L, o,
                         "give either 'history' or sample_rate, noise_multiplier, steps "
                         "(got both 'history' and '%s')",
                         single[k]);
        else
            lua_pop(L, 1);
    int hist = lua_gettop(L);
    size_t n = (size_t)luaL_len(L, hist);
    if (n == 0) option_error(L, o, "history is empty: give at least one segment {%s}", SEGMENT_KEY_LIST);
    dp_acct_segment *h = lua_newuserdatauv(L, n * sizeof *h, 0);
    const options seg = {o->function, SEGMENT_KEYS, SEGMENT_KEY_LIST};
    for (size_t k = 0; k < n; k++) {
        if (lua_geti(L, hist, (lua_Integer)k + 1) != LUA_TTABLE)
            option_error(L, o, "history[%d] must be a table {%s} (got %s)", (int)k + 1, SEGMENT_KEY_LIST,
                         luaL_typename(L, -1));
        int top = lua_gettop(L);
        check_keys(L, top, &seg);
        h[k].noise_multiplier = field_number(L, top, &seg, "noise_multiplier");
        h[k].sample_rate = field_number(L, top, &seg, "sample_rate");
        h[k].steps = (int64_t)field_integer(L, top, &seg, "steps");
        lua_pop(L, 1);
    }
    *history = h;
    return n;
}

/* Pushes the result table: epsilon, delta, accountant and what the accountant reports. */
static void push_result(lua_State *L, dp_acct_kind kind, double epsilon, double delta, const dp_acct_options *opt,
                        const dp_acct_detail *d, int n_fields) {
    lua_createtable(L, 0, n_fields);
    set_number(L, "epsilon", epsilon);
    set_number(L, "delta", delta);
    lua_pushstring(L, dp_acct_name(kind));
    lua_setfield(L, -2, "accountant");
    if (kind == DP_ACCT_RDP) {
        set_number(L, "order", d->order);
    } else if (kind == DP_ACCT_PRV) {
        set_number(L, "eps_error", opt->eps_error);
        set_number(L, "delta_error", d->delta_error);
        set_number(L, "epsilon_estimate", d->epsilon_estimate);
        set_number(L, "epsilon_lower", d->epsilon_lower);
    } else {
        set_number(L, "value_discretization_interval", opt->interval);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "pessimistic");
    }
    luaL_setmetatable(L, RESULT_METATABLE);
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

/* The value at idx must be a table whose keys are all in o->valid. */
static void check_keys(lua_State *L, int idx, const options *o) {
    if (lua_type(L, idx) != LUA_TTABLE)
        option_error(L, o, "expects a table of options {%s} (got %s)", o->key_list, luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        lua_pop(L, 1);                      /* keep the key for lua_next */
        if (lua_type(L, -1) != LUA_TSTRING) /* no lua_tostring: it would confuse lua_next */
            option_error(L, o, "unexpected %s key (valid keys: %s)", luaL_typename(L, -1), o->key_list);
        const char *key = lua_tostring(L, -1);
        int known = 0;
        for (const char *const *v = o->valid; *v != NULL && !known; v++) known = strcmp(*v, key) == 0;
        if (!known) option_error(L, o, "unknown key '%s' (valid keys: %s)", key, o->key_list);
    }
}

static lua_Number field_number(lua_State *L, int idx, const options *o, const char *key) {
    int type = lua_getfield(L, idx, key);
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
    return field_number(L, 1, o, key);
}

/* An integer, or a float with an exact integer value (1e5 is accepted). */
static lua_Integer field_integer(lua_State *L, int idx, const options *o, const char *key) {
    int type = lua_getfield(L, idx, key);
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
