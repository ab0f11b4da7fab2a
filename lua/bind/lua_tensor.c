/* lua_tensor.c: tensors as Lua full userdata ("dpprof.tensor" metatable).
 *
 * Following liolib, the userdata is created empty and given its metatable before the device
 * memory is allocated, so an error in between leaks nothing; __gc, __close and :free() share one
 * idempotent release. Device memory is invisible to Lua's GC, so creation tells the collector
 * about the bytes (a GC step proportional to them).
 *
 * A tensor can be pinned: a batch whose ids a pending backward reads (lua_model.c pins the batch
 * of the forward a model holds, until that state goes). Ids index the embedding tables, the
 * logits and the DP kernels' rows; they are checked once, at the forward, so while pinned every
 * method that writes into the tensor and :free() raise an error instead (on every device). */
#include "lua_engine.h"

#include "error.h"
#include "ops.h"
#include "scope.h"
#include "lua_util.h"

#include <lauxlib.h>
#include <string.h>

#define TENSOR_MT "dpprof.tensor"

typedef struct dpl_tensor {
    dp_tensor t;
    int alive;
    int pins; /* pending backwards reading it (a batch a model holds): no write, no free */
} dpl_tensor;

dp_tensor *dpl_check_tensor(lua_State *L, int idx) {
    dpl_tensor *u = luaL_checkudata(L, idx, TENSOR_MT);
    if (!u->alive) luaL_argerror(L, idx, "tensor was freed");
    return &u->t;
}

void dpl_tensor_pin(lua_State *L, int idx, int delta) {
    dpl_tensor *u = luaL_checkudata(L, idx, TENSOR_MT);
    u->pins += delta;
    if (u->pins < 0) u->pins = 0;
}

/* The live tensor at idx that fname is about to write into or free: refused while a pending
 * backward reads it, since the backward indexes tables with the ids its forward checked. */
static dp_tensor *check_writable(lua_State *L, int idx, const char *fname) {
    dp_tensor *t = dpl_check_tensor(L, idx);
    if (((dpl_tensor *)lua_touserdata(L, idx))->pins > 0)
        luaL_error(L,
                   "%s: the tensor is a batch that a pending backward reads (a model's forward saved it); it "
                   "cannot change or be freed until that backward (and the DP clip) is done, or "
                   "m:release_activations() drops it",
                   fname);
    return t;
}

/* Pushes an empty tensor userdata with its metatable. */
static dpl_tensor *push_empty(lua_State *L) {
    dpl_tensor *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, TENSOR_MT);
    return u;
}

static void gc_hint(lua_State *L, uint64_t bytes) {
    uint64_t kb = bytes >> 10;
    if (kb) lua_gc(L, LUA_GCSTEP, (int)(kb > (1u << 20) ? (1u << 20) : kb));
}

dp_tensor *dpl_push_new_tensor(lua_State *L, dp_device *dev, dp_dtype dt, int ndim, const int64_t *shape,
                               dp_category cat) {
    dpl_tensor *u = push_empty(L);
    if (dp_tensor_init(&u->t, dev, dt, ndim, shape, cat) != DP_OK) dpl_fail(L);
    u->alive = 1;
    gc_hint(L, dp_tensor_bytes(&u->t));
    return &u->t;
}

static int read_shape(lua_State *L, int idx, const char *fname, int64_t *shape) {
    if (lua_getfield(L, idx, "shape") != LUA_TTABLE)
        luaL_error(L, "%s: 'shape' must be a table of sizes, e.g. {2, 3}", fname);
    int ndim = (int)luaL_len(L, -1);
    if (ndim > DP_MAX_DIMS) luaL_error(L, "%s: shape has %d dimensions (at most %d)", fname, ndim, DP_MAX_DIMS);
    for (int i = 0; i < ndim; i++) {
        lua_geti(L, -1, i + 1);
        int isint = 0;
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (!isint) luaL_error(L, "%s: shape[%d] must be an integer (got %s)", fname, i + 1, luaL_typename(L, -1));
        if (v < 0) luaL_error(L, "%s: shape[%d] is negative (%d)", fname, i + 1, (int)v);
        shape[i] = v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return ndim;
}

/* dpprof.tensor{shape=, dtype="f32", category="other", device=current, fill=, module=} */
static int l_tensor(lua_State *L) {
    static const char *const keys[] = {"shape", "dtype", "category", "device", "fill", "module", NULL};
    const char *fname = "dpprof.tensor";
    dpl_check_keys(L, 1, fname, keys);
    int64_t shape[DP_MAX_DIMS];
    int ndim = read_shape(L, 1, fname, shape);
    dp_dtype dt;
    const char *dts = dpl_opt_str_field(L, 1, fname, "dtype", "f32");
    if (dp_dtype_parse(dts, &dt) != 0) luaL_error(L, "%s: unknown dtype '%s' (valid: f32, bf16, i32)", fname, dts);
    dp_category cat = dpl_category(L, dpl_opt_str_field(L, 1, fname, "category", "other"), fname);
    const char *devname = dpl_opt_str_field(L, 1, fname, "device", NULL);
    dp_device *dev = devname ? dpl_device_named(L, devname) : dpl_current_device(L);
    const char *module = dpl_opt_str_field(L, 1, fname, "module", NULL);
    int depth = dp_scope_depth();
    if (module && dp_scope_push(module) != DP_OK) dpl_fail(L);
    dpl_tensor *u = push_empty(L);
    int rc = dp_tensor_init(&u->t, dev, dt, ndim, shape, cat);
    dp_scope_unwind(depth);
    if (rc != DP_OK) dpl_fail(L);
    u->alive = 1;
    gc_hint(L, dp_tensor_bytes(&u->t));
    if (lua_getfield(L, 1, "fill") != LUA_TNIL) {
        if (dp_tensor_fill(&u->t, luaL_checknumber(L, -1)) != DP_OK) dpl_fail(L);
    }
    lua_pop(L, 1);
    return 1;
}

/* __gc: a pinned tensor is garbage only together with the model that pins it */
static int l_release(lua_State *L) {
    dpl_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    if (u->alive) {
        dp_tensor_release(&u->t);
        u->alive = 0;
    }
    return 0;
}

/* __close: as __gc, except that a pinned tensor is left to the collector (a to-be-closed
 * variable going out of scope must not free a batch a pending backward reads, nor raise while
 * an error may be unwinding) */
static int l_close(lua_State *L) {
    dpl_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    return u->pins > 0 ? 0 : l_release(L);
}

/* t:free(): now (idempotent), unless a pending backward reads it */
static int l_free(lua_State *L) {
    dpl_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    if (u->alive) check_writable(L, 1, "tensor:free");
    return l_release(L);
}

static int l_tostring(lua_State *L) {
    dpl_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    if (!u->alive) {
        lua_pushliteral(L, "tensor(freed)");
        return 1;
    }
    char buf[256];
    lua_pushfstring(L, "tensor(%s)", dp_tensor_describe(&u->t, buf, sizeof buf));
    return 1;
}

static int l_len(lua_State *L) {
    lua_pushinteger(L, dpl_check_tensor(L, 1)->numel);
    return 1;
}

static int l_shape(lua_State *L) {
    dp_tensor *t = dpl_check_tensor(L, 1);
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_size(lua_State *L) {
    dp_tensor *t = dpl_check_tensor(L, 1);
    if (lua_isnoneornil(L, 2)) return l_shape(L);
    lua_Integer d = luaL_checkinteger(L, 2);
    luaL_argcheck(L, d >= 1 && d <= t->ndim, 2, "dimension out of range");
    lua_pushinteger(L, t->shape[d - 1]);
    return 1;
}

static int l_fill(lua_State *L) {
    dp_tensor *t = check_writable(L, 1, "tensor:fill");
    if (dp_tensor_fill(t, luaL_checknumber(L, 2)) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* t:random{dist="normal"|"uniform", seed=0, stream=0, mean=0, std=1, low=0, high=1} */
static int l_random(lua_State *L) {
    static const char *const keys[] = {"dist", "seed", "stream", "mean", "std", "low", "high", NULL};
    const char *fname = "tensor:random";
    dp_tensor *t = check_writable(L, 1, fname);
    lua_settop(L, 2);
    if (lua_isnil(L, 2)) {
        lua_newtable(L);
        lua_replace(L, 2);
    }
    dpl_check_keys(L, 2, fname, keys);
    const char *dist = dpl_opt_str_field(L, 2, fname, "dist", "normal");
    uint64_t seed = (uint64_t)dpl_opt_int_field(L, 2, fname, "seed", 0);
    uint64_t stream = (uint64_t)dpl_opt_int_field(L, 2, fname, "stream", 0);
    int rc;
    if (strcmp(dist, "normal") == 0)
        rc = dp_tensor_rand(t, DP_RAND_NORMAL, (float)dpl_opt_num_field(L, 2, fname, "mean", 0),
                            (float)dpl_opt_num_field(L, 2, fname, "std", 1), seed, stream);
    else if (strcmp(dist, "uniform") == 0)
        rc = dp_tensor_rand(t, DP_RAND_UNIFORM, (float)dpl_opt_num_field(L, 2, fname, "low", 0),
                            (float)dpl_opt_num_field(L, 2, fname, "high", 1), seed, stream);
    else
        return luaL_error(L, "%s: unknown dist '%s' (valid: normal, uniform)", fname, dist);
    if (rc != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* t:to(device [, category]) -> a copy on device */
static int l_to(lua_State *L) {
    dp_tensor *t = dpl_check_tensor(L, 1);
    dp_device *dev = dpl_device_named(L, luaL_checkstring(L, 2));
    dp_category cat =
        lua_isnoneornil(L, 3) ? (dp_category)t->alloc.category : dpl_category(L, luaL_checkstring(L, 3), "tensor:to");
    if (!t->alloc.live) cat = DP_CAT_OTHER;
    dp_tensor *c = dpl_push_new_tensor(L, dev, t->dtype, t->ndim, t->shape, cat);
    if (dp_tensor_copy(c, t) != DP_OK) dpl_fail(L);
    return 1;
}

static int l_copy(lua_State *L) {
    dp_tensor *dst = check_writable(L, 1, "tensor:copy"), *src = dpl_check_tensor(L, 2);
    if (dp_tensor_copy(dst, src) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* Reads t's elements as doubles into a buffer owned by Lua (a userdata pushed on the stack),
 * so an error anywhere later leaks nothing. */
static double *read_values(lua_State *L, dp_tensor *t) {
    size_t bytes = (size_t)dp_tensor_bytes(t);
    void *raw = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    if (dp_tensor_to_host(t, raw, bytes) != DP_OK) dpl_fail(L);
    double *vals = lua_newuserdatauv(L, (size_t)(t->numel ? t->numel : 1) * sizeof *vals, 0);
    for (int64_t i = 0; i < t->numel; i++) {
        switch (t->dtype) {
        case DP_F32: vals[i] = ((float *)raw)[i]; break;
        case DP_BF16: vals[i] = dp_bf16_to_f32(((uint16_t *)raw)[i]); break;
        default: vals[i] = ((int32_t *)raw)[i]; break;
        }
    }
    lua_remove(L, -2); /* the raw bytes */
    return vals;
}

static void push_value(lua_State *L, const dp_tensor *t, double v) {
    if (t->dtype == DP_I32)
        lua_pushinteger(L, (lua_Integer)v);
    else
        lua_pushnumber(L, v);
}

/* t:totable() -> flat list of the elements (row-major) */
static int l_totable(lua_State *L) {
    dp_tensor *t = dpl_check_tensor(L, 1);
    double *vals = read_values(L, t);
    lua_createtable(L, (int)t->numel, 0);
    for (int64_t i = 0; i < t->numel; i++) {
        push_value(L, t, vals[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* t:get(i) -> element i (1-based, flat) */
static int l_get(lua_State *L) {
    dp_tensor *t = dpl_check_tensor(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    luaL_argcheck(L, i >= 1 && i <= t->numel, 2, "index out of range");
    dp_tensor one;
    int64_t shape = 1;
    if (dp_tensor_view(&one, t, i - 1, 1, &shape) != DP_OK) dpl_fail(L);
    push_value(L, t, read_values(L, &one)[0]);
    return 1;
}

/* t:set(list) -> t, from a flat list of numel numbers */
static int l_set(lua_State *L) {
    dp_tensor *t = check_writable(L, 1, "tensor:set");
    luaL_checktype(L, 2, LUA_TTABLE);
    if (luaL_len(L, 2) != t->numel)
        return luaL_error(L, "tensor:set: list has %d values, tensor has %d elements", (int)luaL_len(L, 2),
                          (int)t->numel);
    size_t bytes = (size_t)dp_tensor_bytes(t);
    /* read the numbers first (errors possible), then allocate and convert (no errors) */
    for (int64_t i = 0; i < t->numel; i++) {
        lua_geti(L, 2, i + 1);
        if (!lua_isnumber(L, -1)) return luaL_error(L, "tensor:set: value %d is not a number", (int)(i + 1));
        lua_pop(L, 1);
    }
    void *raw = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    for (int64_t i = 0; i < t->numel; i++) {
        lua_geti(L, 2, i + 1);
        double v = lua_tonumber(L, -1);
        lua_pop(L, 1);
        switch (t->dtype) {
        case DP_F32: ((float *)raw)[i] = (float)v; break;
        case DP_BF16: ((uint16_t *)raw)[i] = dp_f32_to_bf16((float)v); break;
        default: ((int32_t *)raw)[i] = (int32_t)v; break;
        }
    }
    if (dp_tensor_from_host(t, raw, bytes) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

static int l_sumsq(lua_State *L) {
    double s;
    if (dp_sumsq(dpl_check_tensor(L, 1), &s) != DP_OK) dpl_fail(L);
    lua_pushnumber(L, s);
    return 1;
}

static int l_add(lua_State *L) {
    dp_tensor *t = check_writable(L, 1, "tensor:add"), *x = dpl_check_tensor(L, 2);
    if (dp_add(t, t, x) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

static int l_scale(lua_State *L) {
    if (dp_scale(check_writable(L, 1, "tensor:scale"), (float)luaL_checknumber(L, 2)) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

static int l_axpy(lua_State *L) {
    dp_tensor *t = check_writable(L, 1, "tensor:axpy");
    float a = (float)luaL_checknumber(L, 2);
    if (dp_axpy(t, a, dpl_check_tensor(L, 3)) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* dpprof.matmul(C, A, B [, {trans_a=, trans_b=, alpha=1, beta=0}]) -> C */
static int l_matmul(lua_State *L) {
    static const char *const keys[] = {"trans_a", "trans_b", "alpha", "beta", NULL};
    const char *fname = "dpprof.matmul";
    dp_tensor *C = check_writable(L, 1, fname), *A = dpl_check_tensor(L, 2), *B = dpl_check_tensor(L, 3);
    int ta = 0, tb = 0;
    double alpha = 1, beta = 0;
    if (!lua_isnoneornil(L, 4)) {
        dpl_check_keys(L, 4, fname, keys);
        ta = dpl_opt_bool_field(L, 4, fname, "trans_a", 0);
        tb = dpl_opt_bool_field(L, 4, fname, "trans_b", 0);
        alpha = dpl_opt_num_field(L, 4, fname, "alpha", 1);
        beta = dpl_opt_num_field(L, 4, fname, "beta", 0);
    }
    if (dp_matmul(C, A, ta, B, tb, (float)alpha, (float)beta) != DP_OK) dpl_fail(L);
    lua_settop(L, 1);
    return 1;
}

static const luaL_Reg methods[] = {
    {"shape", l_shape}, {"size", l_size},       {"fill", l_fill}, {"random", l_random}, {"to", l_to},
    {"copy", l_copy},   {"totable", l_totable}, {"get", l_get},   {"set", l_set},       {"sumsq", l_sumsq},
    {"add", l_add},     {"scale", l_scale},     {"axpy", l_axpy}, {"free", l_free},     {NULL, NULL}};

/* The read-only fields (dpl_new_type's __index looks in the methods first) */
static int l_fields(lua_State *L) {
    dpl_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "alive") == 0) {
        lua_pushboolean(L, u->alive);
        return 1;
    }
    if (!u->alive) return luaL_error(L, "tensor was freed (reading '%s')", k);
    dp_tensor *t = &u->t;
    if (strcmp(k, "dtype") == 0)
        lua_pushstring(L, dp_dtype_name(t->dtype));
    else if (strcmp(k, "device") == 0)
        lua_pushstring(L, dp_device_kind_name(t->dev->kind));
    else if (strcmp(k, "category") == 0)
        lua_pushstring(L, dp_category_name((dp_category)t->alloc.category));
    else if (strcmp(k, "module") == 0)
        lua_pushstring(L, dp_module_name(t->alloc.module));
    else if (strcmp(k, "bytes") == 0)
        dpl_push_bytes(L, dp_tensor_bytes(t));
    else if (strcmp(k, "numel") == 0)
        lua_pushinteger(L, t->numel);
    else if (strcmp(k, "ndim") == 0)
        lua_pushinteger(L, t->ndim);
    else
        lua_pushnil(L);
    return 1;
}

void dpl_open_tensor(lua_State *L) {
    static const luaL_Reg meta[] = {
        {"__gc", l_release}, {"__close", l_close}, {"__tostring", l_tostring}, {"__len", l_len}, {NULL, NULL}};
    dpl_new_type(L, TENSOR_MT, meta, methods, l_fields);
    lua_pushcfunction(L, l_tensor);
    lua_setfield(L, -2, "tensor");
    lua_pushcfunction(L, l_matmul);
    lua_setfield(L, -2, "matmul");
}
