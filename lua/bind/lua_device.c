/* lua_device.c: device choice and information, synchronisation, the ledger, the clock, version,
 * the CPU thread count. */
#include "lua_engine.h"

#include "backend_plan.h"
#include "clock.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "lua_util.h"
#include "version.h"

#include <lauxlib.h>

static void push_info(lua_State *L, const dp_device *dev) {
    const dp_device_info *i = &dev->info;
    lua_createtable(L, 0, 9);
    lua_pushstring(L, dp_device_kind_name(dev->kind)), lua_setfield(L, -2, "kind");
    lua_pushstring(L, i->name), lua_setfield(L, -2, "name");
    lua_pushstring(L, i->cpu), lua_setfield(L, -2, "cpu");
    dpl_push_bytes(L, i->total_memory), lua_setfield(L, -2, "total_memory");
    lua_pushinteger(L, i->cores), lua_setfield(L, -2, "cores");
    if (dev->kind == DP_DEV_CUDA) {
        lua_pushfstring(L, "%d.%d", i->cc_major, i->cc_minor), lua_setfield(L, -2, "compute_capability");
        lua_pushfstring(L, "%d.%d", i->driver_version / 1000, (i->driver_version % 1000) / 10);
        lua_setfield(L, -2, "driver_version");
        lua_pushfstring(L, "%d.%d", i->runtime_version / 1000, (i->runtime_version % 1000) / 10);
        lua_setfield(L, -2, "cuda_version");
    }
}

/* dpprof.device([name]) -> info table of the current device, after selecting name if given
 * ("cpu", "cuda", "plan" or "auto") */
static int l_device(lua_State *L) {
    if (!lua_isnoneornil(L, 1)) {
        dp_device_kind k;
        if (dp_device_parse(luaL_checkstring(L, 1), &k) != DP_OK || dp_device_select(k) != DP_OK) dpl_fail(L);
    }
    push_info(L, dpl_current_device(L));
    return 1;
}

/* dpprof.device_info(name) -> info table of that device (initialising it) */
static int l_device_info(lua_State *L) {
    push_info(L, dpl_device_named(L, luaL_checkstring(L, 1)));
    return 1;
}

static int l_cuda_available(lua_State *L) {
    lua_pushboolean(L, dp_cuda_available());
    return 1;
}

static int l_sync(lua_State *L) {
    if (dp_device_sync(dpl_opt_device(L, 1)) != DP_OK) dpl_fail(L);
    return 0;
}

/* dpprof.ledger() -> list of {op, calls, flops, bytes} in order of first use; entries measured by
 * profile = "ops" also have timed_calls, time_ms, alloc_bytes and freed_bytes; entries recorded
 * while the clock was modelled have model_ms (their modelled time, clock.h) */
static int l_ledger(lua_State *L) {
    size_t n = dp_ledger_count();
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const dp_ledger_entry *e = dp_ledger_at(i);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, e->op), lua_setfield(L, -2, "op");
        lua_pushinteger(L, (lua_Integer)e->calls), lua_setfield(L, -2, "calls");
        lua_pushnumber(L, e->flops), lua_setfield(L, -2, "flops");
        lua_pushnumber(L, e->bytes), lua_setfield(L, -2, "bytes");
        if (e->model_ns > 0) lua_pushnumber(L, e->model_ns * 1e-6), lua_setfield(L, -2, "model_ms");
        if (e->timed_calls || e->alloc_bytes || e->freed_bytes) {
            lua_pushinteger(L, (lua_Integer)e->timed_calls), lua_setfield(L, -2, "timed_calls");
            lua_pushnumber(L, e->time_ns * 1e-6), lua_setfield(L, -2, "time_ms");
            dpl_push_bytes(L, e->alloc_bytes), lua_setfield(L, -2, "alloc_bytes");
            dpl_push_bytes(L, e->freed_bytes), lua_setfield(L, -2, "freed_bytes");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_ledger_reset(lua_State *L) {
    (void)L;
    dp_ledger_reset();
    return 0;
}

/* dpprof.clock() -> seconds on the engine's monotonic clock (the timeline's clock) */
static int l_clock(lua_State *L) {
    lua_pushnumber(L, dp_clock_s());
    return 1;
}

/* dpprof.plan_workspace(cuda): the plan device holds a CUDA device's fixed workspace (true) or
 * nothing (false), so its figures match what that device would allocate */
static int l_plan_workspace(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    if (dp_plan_model_workspace(dpl_device_named(L, "plan"), lua_toboolean(L, 1)) != DP_OK) dpl_fail(L);
    return 0;
}

/* dpprof.threads([n]) -> the CPU backend's thread count, after setting it to n (an integer >= 1)
 * when given: for this process and the children it forks afterwards */
static int l_threads(lua_State *L) {
    if (!lua_isnoneornil(L, 1)) {
        lua_Integer n = luaL_checkinteger(L, 1);
        if (n < 1 || n > DPL_MAX_THREADS)
            return luaL_argerror(L, 1, lua_pushfstring(L, "a thread count from 1 to %d expected", DPL_MAX_THREADS));
        if (dp_engine_set_threads((int)n) != DP_OK) dpl_fail(L);
    }
    lua_pushinteger(L, dp_engine_threads());
    return 1;
}

void dpl_open_device(lua_State *L) {
    static const luaL_Reg fns[] = {{"device", l_device},
                                   {"device_info", l_device_info},
                                   {"cuda_available", l_cuda_available},
                                   {"sync", l_sync},
                                   {"ledger", l_ledger},
                                   {"ledger_reset", l_ledger_reset},
                                   {"clock", l_clock},
                                   {"plan_workspace", l_plan_workspace},
                                   {"threads", l_threads},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
    lua_pushboolean(L, dp_cuda_compiled()), lua_setfield(L, -2, "cuda_compiled");
    lua_pushinteger(L, DPL_MAX_THREADS), lua_setfield(L, -2, "MAX_THREADS");
    /* the device kinds' names (engine/core/device.c) and "auto", which its parser also takes */
    lua_createtable(L, DP_DEV_KIND_COUNT + 1, 0);
    for (int k = 0; k < DP_DEV_KIND_COUNT; k++) {
        lua_pushstring(L, dp_device_kind_name((dp_device_kind)k));
        lua_rawseti(L, -2, k + 1);
    }
    lua_pushliteral(L, "auto");
    lua_rawseti(L, -2, DP_DEV_KIND_COUNT + 1);
    lua_setfield(L, -2, "DEVICES");
    lua_pushstring(L, DPPROF_VERSION), lua_setfield(L, -2, "version");
    lua_pushstring(L, dp_build_commit()), lua_setfield(L, -2, "git_commit");
}
