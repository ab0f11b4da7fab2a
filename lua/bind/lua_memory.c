/* lua_memory.c: dpprof.memory, the allocator's probes as seen from scripts. Every function takes
 * an optional device name as its last argument (default: the current device). */
#include "lua_engine.h"

#include "error.h"
#include "lua_util.h"
#include "results_schema.h"
#include "scope.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

static void push_category_map(lua_State *L, const uint64_t *v) {
    lua_createtable(L, 0, DP_CAT_COUNT);
    for (int c = 0; c < DP_CAT_COUNT; c++) {
        dpl_push_bytes(L, v[c]);
        lua_setfield(L, -2, dp_category_name((dp_category)c));
    }
}

/* memory.stats([device]) -> {allocated, peak, reserved, reserved_peak, n_allocs, n_frees, n_live,
 *   peak_time, limit, current={cat=bytes}, peaks={cat=bytes}, live_at_peak={cat=bytes},
 *   held={cat=bytes}, held_total} (held: what memory.hold left out and is still live) */
static int l_stats(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_stats s;
    dp_mem_get_stats(dev->mem, &s);
    lua_createtable(L, 0, 14);
    dpl_push_bytes(L, s.total_current), lua_setfield(L, -2, "allocated");
    dpl_push_bytes(L, s.total_peak), lua_setfield(L, -2, "peak");
    dpl_push_bytes(L, s.reserved_current), lua_setfield(L, -2, "reserved");
    dpl_push_bytes(L, s.reserved_peak), lua_setfield(L, -2, "reserved_peak");
    dpl_push_bytes(L, s.n_allocs), lua_setfield(L, -2, "n_allocs");
    dpl_push_bytes(L, s.n_frees), lua_setfield(L, -2, "n_frees");
    dpl_push_bytes(L, s.n_live), lua_setfield(L, -2, "n_live");
    dpl_push_bytes(L, dp_mem_limit(dev->mem)), lua_setfield(L, -2, "limit");
    lua_pushnumber(L, (double)s.peak_t_ns * 1e-9), lua_setfield(L, -2, "peak_time");
    push_category_map(L, s.current), lua_setfield(L, -2, "current");
    push_category_map(L, s.peak), lua_setfield(L, -2, "peaks");
    push_category_map(L, s.live_at_peak), lua_setfield(L, -2, "live_at_peak");
    push_category_map(L, s.held), lua_setfield(L, -2, "held");
    dpl_push_bytes(L, s.held_total), lua_setfield(L, -2, "held_total");
    lua_pushstring(L, dp_device_kind_name(dev->kind)), lua_setfield(L, -2, "device");
    return 1;
}

/* memory.hold([device]): what is live now (but the workspace) is held: left out of every figure
 * from now on, reported as stats().held, until memory.end_hold (dp_mem_hold_live) */
static int l_hold(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_hold_live(dev->mem);
    return 0;
}

/* memory.end_hold([device]): what is still held counts again */
static int l_end_hold(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_end_hold(dev->mem);
    return 0;
}

static void push_snapshot(lua_State *L, const dp_mem_snapshot *sn) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, sn->name), lua_setfield(L, -2, "name");
    lua_pushnumber(L, sn->t_s), lua_setfield(L, -2, "timestamp");
    dpl_push_bytes(L, sn->allocated), lua_setfield(L, -2, "allocated");
    dpl_push_bytes(L, sn->reserved), lua_setfield(L, -2, "reserved");
    push_category_map(L, sn->categories), lua_setfield(L, -2, "categories");
}

/* memory.snapshot(name [, device]) -> the snapshot taken (after synchronising) */
static int l_snapshot(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    dp_device *dev = dpl_opt_device(L, 2);
    if (dp_device_snapshot(dev, name) != DP_OK) dpl_fail(L);
    push_snapshot(L, dp_mem_snapshot_at(dev->mem, dp_mem_snapshot_count(dev->mem) - 1));
    return 1;
}

static int l_snapshots(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    size_t n = dp_mem_snapshot_count(dev->mem);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        push_snapshot(L, dp_mem_snapshot_at(dev->mem, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_clear_snapshots(lua_State *L) {
    dp_mem_clear_snapshots(dpl_opt_device(L, 1)->mem);
    return 0;
}

static int l_reset_peak(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_reset_peak(dev->mem);
    return 0;
}

/* memory.window_reset([device]): starts a window (a phase) whose own peak memory.window reports */
static int l_window_reset(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_window_reset(dev->mem);
    return 0;
}

/* memory.window([device]) -> {peak, peak_time, live_at_peak={cat=bytes}} since window_reset */
static int l_window(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    if (dp_device_sync(dev) != DP_OK) dpl_fail(L);
    dp_mem_window w;
    dp_mem_window_get(dev->mem, &w);
    lua_createtable(L, 0, 3);
    dpl_push_bytes(L, w.peak), lua_setfield(L, -2, "peak");
    lua_pushnumber(L, (double)w.peak_t_ns * 1e-9), lua_setfield(L, -2, "peak_time");
    push_category_map(L, w.live_at_peak), lua_setfield(L, -2, "live_at_peak");
    return 1;
}

typedef struct {
    uint32_t id;
    uint64_t cur, peak, lap;
} module_row;

/* largest live-at-peak first, then largest peak, then the module's id (a total order: the same
 * list every run) */
static int module_row_cmp(const void *pa, const void *pb) {
    const module_row *a = pa, *b = pb;
    if (a->lap != b->lap) return a->lap > b->lap ? -1 : 1;
    if (a->peak != b->peak) return a->peak > b->peak ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* memory.modules([device]) -> list of {module, current, peak, live_at_peak}, largest live-at-peak
 * first (then largest peak, then the order the modules were first named), for every module that
 * ever held memory */
static int l_modules(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    uint32_t count = dp_module_count(), n = 0;
    module_row *rows = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof *rows, 0);
    for (uint32_t id = 0; id < count; id++) {
        module_row r = {.id = id};
        dp_mem_module_stats(dev->mem, id, &r.cur, &r.peak, &r.lap);
        if (r.peak || r.cur) rows[n++] = r;
    }
    qsort(rows, n, sizeof *rows, module_row_cmp);
    lua_createtable(L, (int)n, 0);
    for (uint32_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, dp_module_name(rows[i].id)), lua_setfield(L, -2, "module");
        dpl_push_bytes(L, rows[i].cur), lua_setfield(L, -2, "current");
        dpl_push_bytes(L, rows[i].peak), lua_setfield(L, -2, "peak");
        dpl_push_bytes(L, rows[i].lap), lua_setfield(L, -2, "live_at_peak");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* memory.events([device]) -> list of {t_ms, delta, allocated, reserved, category, module}, and
 * the stride (raw events per logged one) as a second result */
static int l_events(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    size_t n = dp_mem_event_count(dev->mem);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const dp_mem_event *e = dp_mem_event_at(dev->mem, i);
        lua_createtable(L, 0, 6);
        lua_pushnumber(L, (double)e->t_ns * 1e-6), lua_setfield(L, -2, "t_ms");
        lua_pushinteger(L, e->delta), lua_setfield(L, -2, "delta");
        dpl_push_bytes(L, e->allocated), lua_setfield(L, -2, "allocated");
        dpl_push_bytes(L, e->reserved), lua_setfield(L, -2, "reserved");
        lua_pushstring(L, dp_category_name((dp_category)e->category)), lua_setfield(L, -2, "category");
        lua_pushstring(L, dp_module_name(e->module)), lua_setfield(L, -2, "module");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    dpl_push_bytes(L, dp_mem_event_stride(dev->mem));
    return 2;
}

/* memory.timeline([max_points=4096 [, device]]) -> {t_ms={}, allocated_bytes={}, reserved_bytes={}} */
static int l_timeline(lua_State *L) {
    lua_Integer maxp = luaL_optinteger(L, 1, 4096);
    luaL_argcheck(L, maxp >= 1 && maxp <= (1 << 24), 1, "max_points must be in 1..16777216");
    dp_device *dev = dpl_opt_device(L, 2);
    size_t cap = (size_t)maxp;
    int64_t *t = lua_newuserdatauv(L, cap * sizeof *t, 0);
    uint64_t *a = lua_newuserdatauv(L, cap * sizeof *a, 0);
    uint64_t *r = lua_newuserdatauv(L, cap * sizeof *r, 0);
    size_t n = dp_mem_timeline(dev->mem, cap, t, a, r);
    lua_createtable(L, 0, 3);
    const char *names[3] = {"t_ms", "allocated_bytes", "reserved_bytes"};
    for (int k = 0; k < 3; k++) {
        lua_createtable(L, (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            if (k == 0)
                lua_pushnumber(L, (double)t[i] * 1e-6);
            else
                dpl_push_bytes(L, k == 1 ? a[i] : r[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, names[k]);
    }
    return 1;
}

static int l_clear_events(lua_State *L) {
    dp_mem_clear_events(dpl_opt_device(L, 1)->mem);
    return 0;
}

/* memory.set_limit(bytes [, device]): allocations past bytes fail as out of memory (0 = none) */
static int l_set_limit(lua_State *L) {
    lua_Integer b = luaL_checkinteger(L, 1);
    luaL_argcheck(L, b >= 0, 1, "limit must be >= 0 bytes");
    dp_mem_set_limit(dpl_opt_device(L, 2)->mem, (uint64_t)b);
    return 0;
}

void dpl_push_oom(lua_State *L, const dp_oom_info *o, const char *device) {
    lua_createtable(L, 0, 7);
    dpl_push_bytes(L, o->requested), lua_setfield(L, -2, "requested_bytes");
    lua_pushstring(L, dp_category_name(o->category)), lua_setfield(L, -2, "category");
    lua_pushstring(L, dp_module_name(o->module)), lua_setfield(L, -2, "module");
    push_category_map(L, o->live), lua_setfield(L, -2, "live_bytes");
    dpl_push_bytes(L, o->total_live), lua_setfield(L, -2, "total_live_bytes");
    dpl_push_bytes(L, o->limit), lua_setfield(L, -2, "limit_bytes");
    lua_pushstring(L, device), lua_setfield(L, -2, "device");
}

/* memory.last_oom([device]) -> the OOM record (dpl_push_oom) of the device's last refused
 * allocation, or nil */
static int l_last_oom(lua_State *L) {
    dp_device *dev = dpl_opt_device(L, 1);
    const dp_oom_info *o = dp_mem_last_oom(dev->mem);
    if (!o->valid) {
        lua_pushnil(L);
        return 1;
    }
    dpl_push_oom(L, o, dp_device_kind_name(dev->kind));
    return 1;
}

static int l_push_scope(lua_State *L) {
    if (dp_scope_push(luaL_checkstring(L, 1)) != DP_OK) dpl_fail(L);
    return 0;
}

static int l_pop_scope(lua_State *L) {
    (void)L;
    dp_scope_pop();
    return 0;
}

static int l_current_scope(lua_State *L) {
    lua_pushstring(L, dp_module_name(dp_scope_current()));
    return 1;
}

static int scope_finish(lua_State *L, int status, lua_KContext depth) {
    dp_scope_unwind((int)depth);
    if (status != LUA_OK && status != LUA_YIELD) return lua_error(L);
    return lua_gettop(L) - 1; /* everything fn returned (slot 1 is the error handler placeholder) */
}

/* memory.scope(name, fn, ...) -> fn(...)'s results, with name pushed while fn runs (popped even
 * when fn raises; the error is re-raised) */
static int l_scope(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int depth = dp_scope_depth();
    if (dp_scope_push(name) != DP_OK) dpl_fail(L);
    lua_remove(L, 1); /* fn, args... */
    lua_pushnil(L);   /* keep slot 1 for scope_finish's count */
    lua_insert(L, 1);
    int nargs = lua_gettop(L) - 2;
    int status = lua_pcallk(L, nargs, LUA_MULTRET, 0, depth, scope_finish);
    return scope_finish(L, status, depth);
}

/* dpprof.memory.CATEGORIES: common/memory_categories.h's list, in the engine's order, as
 * {{name = "parameters", legacy = "model_parameters_mb", component = "parameters"}, ...}; legacy
 * is the legacy breakdown's field the category adds to (nil for none), component the charts'. */
static void push_category_table(lua_State *L) {
    static const struct {
        const char *name;
        int legacy;
        const char *component; /* the component's id, upper case */
    } cats[] = {
#define DPL_CATEGORY(id, name, legacy, component) {name, legacy, #component},
        DPR_MEMORY_CATEGORIES(DPL_CATEGORY)
#undef DPL_CATEGORY
    };
    const size_t n = sizeof cats / sizeof cats[0];
    const char *prefix = dpr_field_of(DPR_BREAKDOWN)->path;
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, cats[i].name);
        lua_setfield(L, -2, "name");
        const dpr_field *f = dpr_field_of(cats[i].legacy); /* NULL for DPR_NO_LEGACY */
        if (f) {                                           /* "breakdown.<field>" */
            lua_pushstring(L, f->path + strlen(prefix) + 1);
            lua_setfield(L, -2, "legacy");
        }
        char comp[64];
        size_t k = 0;
        for (; cats[i].component[k] && k + 1 < sizeof comp; k++)
            comp[k] = (char)tolower((unsigned char)cats[i].component[k]);
        comp[k] = '\0';
        lua_pushstring(L, comp);
        lua_setfield(L, -2, "component");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

void dpl_open_memory(lua_State *L) {
    static const luaL_Reg fns[] = {{"stats", l_stats},
                                   {"snapshot", l_snapshot},
                                   {"snapshots", l_snapshots},
                                   {"clear_snapshots", l_clear_snapshots},
                                   {"reset_peak", l_reset_peak},
                                   {"hold", l_hold},
                                   {"end_hold", l_end_hold},
                                   {"window_reset", l_window_reset},
                                   {"window", l_window},
                                   {"modules", l_modules},
                                   {"events", l_events},
                                   {"timeline", l_timeline},
                                   {"clear_events", l_clear_events},
                                   {"set_limit", l_set_limit},
                                   {"last_oom", l_last_oom},
                                   {"push_scope", l_push_scope},
                                   {"pop_scope", l_pop_scope},
                                   {"current_scope", l_current_scope},
                                   {"scope", l_scope},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_createtable(L, DP_CAT_COUNT, 0);
    for (int c = 0; c < DP_CAT_COUNT; c++) {
        lua_pushstring(L, dp_category_name((dp_category)c));
        lua_rawseti(L, -2, c + 1);
    }
    lua_setfield(L, -2, "categories");
    push_category_table(L);
    lua_setfield(L, -2, "CATEGORIES");
    lua_setfield(L, -2, "memory");
}
