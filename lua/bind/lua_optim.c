/* lua_optim.c: dpprof.optim.adamw / dpprof.optim.sgd, optimizers as Lua full userdata
 * ("dpprof.optim" metatable).
 *
 * The userdata's uservalue holds the model's userdata, so the model outlives the optimizer
 * whatever order the GC finds them in; every method checks the model was not freed explicitly
 * (m:free()) before touching it. __gc, __close and :free() share one idempotent release of the
 * optimizer states. */
#include "lua_engine.h"

#include "error.h"
#include "lua_util.h"
#include "options_schema.h"
#include "optim.h"

#include <lauxlib.h>
#include <string.h>

#define OPTIM_MT "dpprof.optim"

typedef struct dpl_optim {
    dp_optimizer *o; /* NULL once freed */
} dpl_optim;

/* The live optimizer at idx, with its model checked alive; an argument error otherwise. */
struct dp_optimizer *dpl_check_optim(lua_State *L, int idx) {
    dpl_optim *u = luaL_checkudata(L, idx, OPTIM_MT);
    if (!u->o) luaL_argerror(L, idx, "optimizer was freed");
    lua_getiuservalue(L, idx, 1);
    lua_getfield(L, -1, "alive"); /* the model's own view of whether m:free() was called */
    if (!lua_toboolean(L, -1)) luaL_error(L, "optimizer: its model was freed (m:free()) before the optimizer");
    lua_pop(L, 2);
    return u->o;
}

/* Each optimizer's keys: the schema's optimizer rows of its flag, less name (the constructor's
 * own); filled by dpl_open_optim. */
static const char *adamw_keys[DPO_N_OPTIONS + 1], *sgd_keys[DPO_N_OPTIONS + 1];

/* Reads the options shared by both optimizers and the kind's own into opts. */
static void read_opts(lua_State *L, int idx, const char *fname, dp_optim_kind kind, dp_optim_opts *opts) {
    dp_optim_opts_default(opts, kind);
    if (lua_isnoneornil(L, idx)) return;
    dpl_check_keys(L, idx, fname, kind == DP_OPTIM_ADAMW ? adamw_keys : sgd_keys);
    opts->lr = dpl_opt_num_field(L, idx, fname, "lr", opts->lr);
    opts->weight_decay = dpl_opt_num_field(L, idx, fname, "weight_decay", opts->weight_decay);
    if (kind == DP_OPTIM_SGD) {
        opts->momentum = dpl_opt_num_field(L, idx, fname, "momentum", opts->momentum);
        return;
    }
    opts->eps = dpl_opt_num_field(L, idx, fname, "eps", opts->eps);
    int t = lua_getfield(L, idx, "betas");
    if (t != LUA_TNIL) {
        if (t != LUA_TTABLE || luaL_len(L, -1) != 2)
            luaL_error(L, "%s: 'betas' must be a table of two numbers, e.g. {0.9, 0.999}", fname);
        double b[2];
        for (int i = 0; i < 2; i++) {
            if (lua_geti(L, -1, i + 1) != LUA_TNUMBER)
                luaL_error(L, "%s: betas[%d] must be a number (got %s)", fname, i + 1, luaL_typename(L, -1));
            b[i] = lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
        opts->beta1 = b[0];
        opts->beta2 = b[1];
    }
    lua_pop(L, 1);
}

static int new_optim(lua_State *L, dp_optim_kind kind, const char *fname) {
    dp_model *m = dpl_check_model(L, 1);
    dp_optim_opts opts;
    read_opts(L, 2, fname, kind, &opts);
    if (dp_optim_opts_check(kind, &opts) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    dpl_optim *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->o = NULL;
    luaL_setmetatable(L, OPTIM_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1); /* keeps the model alive as long as the optimizer */
    if (dp_optim_new(m, kind, &opts, &u->o) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    return 1;
}

/* dpprof.optim.adamw(m, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0.01}) */
static int l_adamw(lua_State *L) { return new_optim(L, DP_OPTIM_ADAMW, "dpprof.optim.adamw"); }

/* dpprof.optim.sgd(m, {lr=1e-3, momentum=0, weight_decay=0}) */
static int l_sgd(lua_State *L) { return new_optim(L, DP_OPTIM_SGD, "dpprof.optim.sgd"); }

/* opt:step() */
static int l_step(lua_State *L) {
    dp_optimizer *o = dpl_check_optim(L, 1);
    if (dp_optim_step(o) != DP_OK) luaL_error(L, "optimizer:step: %s", dp_error_message());
    return 0;
}

/* opt:zero_grad([set_to_none=true]) */
static int l_zero_grad(lua_State *L) {
    dp_optimizer *o = dpl_check_optim(L, 1);
    int set_to_none = lua_isnoneornil(L, 2) ? 1 : (luaL_checktype(L, 2, LUA_TBOOLEAN), lua_toboolean(L, 2));
    if (dp_optim_zero_grad(o, set_to_none) != DP_OK) luaL_error(L, "optimizer:zero_grad: %s", dp_error_message());
    return 0;
}

/* opt:state_bytes() -> bytes of optimizer state allocated now */
static int l_state_bytes(lua_State *L) {
    dpl_push_bytes(L, dp_optim_state_bytes(dpl_check_optim(L, 1)));
    return 1;
}

/* opt:steps() -> number of steps taken */
static int l_steps(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dp_optim_steps(dpl_check_optim(L, 1)));
    return 1;
}

/* opt:set_lr(lr) */
static int l_set_lr(lua_State *L) {
    dp_optimizer *o = dpl_check_optim(L, 1);
    if (dp_optim_set_lr(o, luaL_checknumber(L, 2)) != DP_OK) luaL_error(L, "optimizer:set_lr: %s", dp_error_message());
    return 0;
}

/* opt:config() -> {name=, lr=, weight_decay=, betas={}, eps= | momentum=} (the results' `optimizer`) */
static int l_config(lua_State *L) {
    dp_optimizer *o = dpl_check_optim(L, 1);
    dp_optim_kind kind = dp_optim_kind_of(o);
    const dp_optim_opts *h = dp_optim_opts_of(o);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, dp_optim_name(kind));
    lua_setfield(L, -2, "name");
    lua_pushnumber(L, h->lr);
    lua_setfield(L, -2, "lr");
    lua_pushnumber(L, h->weight_decay);
    lua_setfield(L, -2, "weight_decay");
    if (kind == DP_OPTIM_ADAMW) {
        lua_createtable(L, 2, 0);
        lua_pushnumber(L, h->beta1);
        lua_rawseti(L, -2, 1);
        lua_pushnumber(L, h->beta2);
        lua_rawseti(L, -2, 2);
        lua_setfield(L, -2, "betas");
        lua_pushnumber(L, h->eps);
        lua_setfield(L, -2, "eps");
    } else {
        lua_pushnumber(L, h->momentum);
        lua_setfield(L, -2, "momentum");
    }
    return 1;
}

static int l_release(lua_State *L) {
    dpl_optim *u = luaL_checkudata(L, 1, OPTIM_MT);
    if (u->o) {
        dp_optim_free(u->o);
        u->o = NULL;
    }
    return 0;
}

static int l_tostring(lua_State *L) {
    dpl_optim *u = luaL_checkudata(L, 1, OPTIM_MT);
    if (!u->o) {
        lua_pushliteral(L, "optimizer(freed)");
        return 1;
    }
    const dp_optim_opts *h = dp_optim_opts_of(u->o);
    lua_pushfstring(L, "optimizer(%s, lr=%f, steps=%I, state=%I bytes)", dp_optim_name(dp_optim_kind_of(u->o)), h->lr,
                    (lua_Integer)dp_optim_steps(u->o), (lua_Integer)dp_optim_state_bytes(u->o));
    return 1;
}

/* keys less "name" (the first optimizer row) */
static void optimizer_keys(unsigned flag, const char **keys) {
    int n = dpo_keys(DPO_S_OPTIMIZER, flag, 0, keys, DPO_N_OPTIONS + 1);
    if (n > 0 && strcmp(keys[0], "name") == 0) memmove(keys, keys + 1, sizeof(char *) * (size_t)n);
}

void dpl_open_optim(lua_State *L) {
    optimizer_keys(DPO_ADAMW, adamw_keys);
    optimizer_keys(DPO_SGD, sgd_keys);
    static const luaL_Reg methods[] = {
        {"step", l_step},
        {"zero_grad", l_zero_grad},
        {"state_bytes", l_state_bytes},
        {"steps", l_steps},
        {"set_lr", l_set_lr},
        {"config", l_config},
        {"free", l_release},
        {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__gc", l_release},
        {"__close", l_release},
        {"__tostring", l_tostring},
        {NULL, NULL},
    };
    static const luaL_Reg funcs[] = {{"adamw", l_adamw}, {"sgd", l_sgd}, {NULL, NULL}};
    dpl_new_type(L, OPTIM_MT, meta, methods, NULL);
    luaL_newlib(L, funcs);
    lua_setfield(L, -2, "optim");
}
