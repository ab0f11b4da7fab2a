/* lua_profile.c: dpprof.profile, per-op measurement (engine/core/profile.h), and dpprof.host_memory,
 * the process's resident memory. Functions that take a device take its name as an optional
 * argument (default: the current device). */
#include "lua_engine.h"

#include "clock.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "lua_util.h"
#include "profile.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* profile.enable(on [, device]): per-op timing on (true) or off (false); turning it on forgets
 * the call log, and charges the device's allocations to the calls from now on */
static int l_enable(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    dp_profile_enable(dpl_opt_device(L, 2), lua_toboolean(L, 1));
    return 0;
}

static int l_enabled(lua_State *L) {
    lua_pushboolean(L, dp_profile_active);
    return 1;
}

/* profile.collect([device]): synchronises the device and reads its timers into the ledger */
static int l_collect(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK || dp_profile_collect(dev) != DP_OK) dpl_fail(L);
    return 0;
}

/* profile.cpu_clock(on): the CPU backend's calls timed by the process's CPU time (true) or the engine
 * clock (false, the default) */
static int l_cpu_clock(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    dp_profile_cpu_clock(lua_toboolean(L, 1));
    return 0;
}

/* profile.total_ms() -> the time of every call charged so far, ms */
static int l_total_ms(lua_State *L) {
    lua_pushnumber(L, dp_profile_total_ns() * 1e-6);
    return 1;
}

/* profile.calls() -> list of {op, base, start_ms, end_ms, seq, flops, bytes} on the engine clock,
 * oldest first (base: the op without its ledger section; seq: the ledger's add count when the call
 * ended, the same for calls made for one add; flops, bytes: the work added since the call before),
 * and the number of calls the full log dropped */
static int l_calls(lua_State *L) {
    size_t n = dp_profile_call_count();
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const dp_profile_call *c = dp_profile_call_at(i);
        const dp_ledger_entry *e = dp_ledger_at(c->entry);
        lua_createtable(L, 0, 3);
        lua_pushstring(L, e ? e->op : "(no op)"), lua_setfield(L, -2, "op");
        lua_pushnumber(L, (double)c->start_ns * 1e-6), lua_setfield(L, -2, "start_ms");
        lua_pushnumber(L, (double)c->end_ns * 1e-6), lua_setfield(L, -2, "end_ms");
        lua_pushinteger(L, (lua_Integer)c->seq), lua_setfield(L, -2, "seq");
        lua_pushnumber(L, c->flops), lua_setfield(L, -2, "flops");
        lua_pushnumber(L, c->bytes), lua_setfield(L, -2, "bytes");
        lua_pushstring(L, e ? e->base : "(no op)"), lua_setfield(L, -2, "base");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    dpl_push_bytes(L, dp_profile_calls_dropped());
    return 2;
}

/* profile.dropped() -> calls timed but not logged (the log holds DP_PROFILE_MAX_CALLS) */
static int l_dropped(lua_State *L) {
    dpl_push_bytes(L, dp_profile_calls_dropped());
    return 1;
}

/* profile.overhead_ns([device [, n=2000]]) -> host ns one timed call adds (mean of n) */
static int l_overhead_ns(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    lua_Integer n = luaL_optinteger(L, 2, 2000);
    luaL_argcheck(L, n >= 1 && n <= 10000000, 2, "n must be in 1..10000000");
    lua_pushnumber(L, dp_profile_overhead_ns(dev, (int)n));
    return 1;
}

/* profile.category(op) -> the category of a ledger op name (dp_engine_op_category) */
static int l_category(lua_State *L) {
    lua_pushstring(L, dp_engine_op_category(luaL_checkstring(L, 1)));
    return 1;
}

/* profile.peak(dtype [, device]) -> {flops, bandwidth, how}, or nil and why when unknown */
static int l_peak(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    dp_dtype t;
    if (dp_dtype_parse(name, &t) != 0) return luaL_argerror(L, 1, "unknown dtype (valid: f32, bf16)");
    dp_device *dev = dpl_opt_device(L, 2);
    double flops = 0, bw = 0;
    char how[512] = "";
    if (!dev->ops->peak) {
        lua_pushnil(L);
        lua_pushfstring(L, "the %s backend states no peak", dev->ops->name);
        return 2;
    }
    if (dev->ops->peak(dev, t, &flops, &bw, how, sizeof how) != DP_OK) {
        lua_pushnil(L);
        lua_pushstring(L, dp_error_message());
        return 2;
    }
    lua_createtable(L, 0, 3);
    lua_pushnumber(L, flops), lua_setfield(L, -2, "flops");
    lua_pushnumber(L, bw), lua_setfield(L, -2, "bandwidth");
    lua_pushstring(L, how), lua_setfield(L, -2, "how");
    return 1;
}

/* Reads curves {op = {x = {log10 work s...}, y = {log10 time s...}}, ...} at index idx into the
 * clock; raises naming the op on a bad curve. */
static void set_curves(lua_State *L, int idx) {
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *op = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!op || !lua_istable(L, -1)) {
            dp_clock_curves_clear();
            luaL_error(L, "dpprof.clock_model: curves must map op names to {x = {...}, y = {...}}");
        }
        double x[DP_CLOCK_MAX_KNOTS], y[DP_CLOCK_MAX_KNOTS];
        lua_getfield(L, -1, "x");
        lua_getfield(L, -2, "y");
        size_t n = lua_istable(L, -2) ? lua_rawlen(L, -2) : 0;
        int ok = n >= 1 && n <= DP_CLOCK_MAX_KNOTS && lua_istable(L, -1) && lua_rawlen(L, -1) == n;
        for (size_t i = 0; ok && i < n; i++) {
            lua_rawgeti(L, -2, (lua_Integer)i + 1);
            lua_rawgeti(L, -2, (lua_Integer)i + 1);
            ok = lua_isnumber(L, -2) && lua_isnumber(L, -1);
            x[i] = lua_tonumber(L, -2), y[i] = lua_tonumber(L, -1);
            lua_pop(L, 2);
        }
        lua_pop(L, 2);
        if (!ok || dp_clock_curve_set(op, n, x, y) != 0) {
            dp_clock_curves_clear();
            luaL_error(L, "dpprof.clock_model: curve '%s': x and y must be lists of 1 to %d finite numbers, x increasing",
                       op, DP_CLOCK_MAX_KNOTS);
        }
        lua_pop(L, 1);
    }
}

/* dpprof.clock_model(peak_flops, bandwidth [, curves [, gap_s]]): the engine clock advances by the
 * modelled time of each op recorded (a plan run's device time): its curve where curves has one
 * (clock.h), else its roofline, plus gap_s; clock_model(false) makes it real again and forgets
 * the curves */
static int l_clock_model(lua_State *L) {
    if (lua_isboolean(L, 1) && !lua_toboolean(L, 1)) {
        dp_clock_model(0, 0);
        dp_clock_curves_clear();
        return 0;
    }
    double f = luaL_checknumber(L, 1), b = luaL_checknumber(L, 2);
    luaL_argcheck(L, f > 0 && f < HUGE_VAL, 1, "peak flop/s must be a positive number");
    luaL_argcheck(L, b > 0 && b < HUGE_VAL, 2, "bandwidth must be a positive number of bytes/s");
    double gap = luaL_optnumber(L, 4, 0.0);
    luaL_argcheck(L, gap >= 0 && gap < 1.0, 4, "gap must be seconds in [0, 1)");
    dp_clock_curves_clear();
    if (!lua_isnoneornil(L, 3)) set_curves(L, 3);
    dp_clock_gap(gap);
    dp_clock_model(f, b);
    return 0;
}

/* dpprof.clock_overflowed() -> true when an op since dp.clock_model would have taken the modelled
 * clock past what it holds (clock.h: DP_CLOCK_LIMIT_NS); the clock stopped there */
static int l_clock_overflowed(lua_State *L) {
    lua_pushboolean(L, dp_clock_overflowed());
    return 1;
}

/* dpprof.clock_op_ms(op, flops, bytes) -> the modelled ms of one call of op ("recompute:gemm" is
 * gemm) on the model dp.clock_model set, and whether a calibrated curve gave it (false: the roofline) */
static int l_clock_op_ms(lua_State *L) {
    const char *op = luaL_checkstring(L, 1);
    const char *colon = strchr(op, ':'); /* "<section>:<op>" is timed as its op */
    if (colon && colon[1]) op = colon + 1;
    double f = luaL_checknumber(L, 2), b = luaL_checknumber(L, 3);
    if (!dp_clock_modelled()) return luaL_error(L, "dpprof.clock_op_ms: the clock is not modelled (dp.clock_model first)");
    int calibrated = 0;
    lua_pushnumber(L, dp_clock_op_seconds(op, f, b, &calibrated) * 1e3);
    lua_pushboolean(L, calibrated);
    return 2;
}

/* dpprof.call_unyielding(f, ...) -> f(...): f called so that it cannot yield: a coroutine.yield
 * inside raises "attempt to yield across a C-call boundary" (lua_call, no continuation). For the
 * script's callbacks inside a run that holds process-wide state (the modelled clock, per-op
 * profiling, the thread count): a yield would leave it on with the run abandoned. */
static int l_call_unyielding(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* One "Key:   1234 kB" line of /proc/self/status, in bytes; -1 when absent. */
static long long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') {
            if (sscanf(line + k + 1, "%lld", &v) != 1) v = -1;
            break;
        }
    fclose(f);
    return v < 0 ? -1 : v * 1024;
}

/* dpprof.host_memory() -> {rss_bytes, peak_rss_bytes} of this process (/proc/self/status VmRSS and
 * VmHWM); fields absent where the system does not say */
static int l_host_memory(lua_State *L) {
    lua_createtable(L, 0, 2);
    long long rss = status_kb("VmRSS"), hwm = status_kb("VmHWM");
    if (rss >= 0) lua_pushinteger(L, rss), lua_setfield(L, -2, "rss_bytes");
    if (hwm >= 0) lua_pushinteger(L, hwm), lua_setfield(L, -2, "peak_rss_bytes");
    return 1;
}

/* dpprof.host_memory_reset_peak() -> true when this process's peak RSS now starts from its current
 * RSS (Linux: "5" written to /proc/self/clear_refs), false when the system does not allow it */
static int l_host_memory_reset_peak(lua_State *L) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    int ok = f && fputs("5", f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    lua_pushboolean(L, ok);
    return 1;
}

void dpl_open_profile(lua_State *L) {
    static const luaL_Reg fns[] = {{"enable", l_enable},
                                   {"enabled", l_enabled},
                                   {"collect", l_collect},
                                   {"total_ms", l_total_ms},
                                   {"cpu_clock", l_cpu_clock},
                                   {"calls", l_calls},
                                   {"dropped", l_dropped},
                                   {"overhead_ns", l_overhead_ns},
                                   {"peak", l_peak},
                                   {"category", l_category},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "profile");
    static const luaL_Reg top[] = {{"clock_model", l_clock_model},
                                   {"clock_overflowed", l_clock_overflowed},
                                   {"clock_op_ms", l_clock_op_ms},
                                   {"call_unyielding", l_call_unyielding},
                                   {"host_memory", l_host_memory},
                                   {"host_memory_reset_peak", l_host_memory_reset_peak},
                                   {NULL, NULL}};
    luaL_setfuncs(L, top, 0);
}
