/* lua_dist.c: dpprof.dist, the process's place among the ranks of a distributed run.
 *
 *   dp.dist.rank(), dp.dist.world_size()   this process's rank and the number of ranks (0 and 1
 *                                          when no launcher started it)
 *   dp.dist.barrier()                      waits for every rank
 *   dp.dist.all_gather(s)                  every rank's string s, in rank order
 *   dp.dist.nccl()                         loads NCCL and makes its communicator (CUDA runs)
 *   dp.dist.launcher()                     "mpirun", "pmi", "srun" or nil
 *   dp.dist.link_model{...} | (false)      the links a plan run's collectives are timed on
 *   dp.dist.link_seconds(bytes, N)         a collective's modelled seconds on them
 *   dp.dist.check(d, device, how)          a `distributed` table checked by the engine (dpsgd_dist.h)
 *   dp.dist.STRATEGIES, dp.dist.KEYS       the strategies and the keys of a `distributed` table
 *   dp.dist.MAX_WORLD                      the most ranks a world may have (2^20)
 *   dp.dist.mpi_compiled                   whether this dpprof has the MPI transport */
#include "lua_engine.h"

#include "comm.h"
#include "comm_nccl.h"
#include "dpsgd_dist.h"
#include "dpsgd_strategy.h"
#include "error.h"
#include "lua_util.h"
#include "options_schema.h"

#include <lauxlib.h>
#include <stdlib.h>

/* the schema's distributed section (common/options_schema.h), filled by dpl_open_dist */
const char *dpl_dist_keys[DPO_N_OPTIONS + 1];

static dp_comm *world(lua_State *L, const char *fname) {
    dp_comm *c;
    if (dp_comm_world(&c) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
    return c;
}

static int l_rank(lua_State *L) {
    lua_pushinteger(L, world(L, "dpprof.dist.rank")->rank);
    return 1;
}

static int l_world_size(lua_State *L) {
    lua_pushinteger(L, world(L, "dpprof.dist.world_size")->world_size);
    return 1;
}

static int l_barrier(lua_State *L) {
    if (dp_comm_barrier(world(L, "dpprof.dist.barrier")) != DP_OK)
        return luaL_error(L, "dpprof.dist.barrier: %s", dp_error_message());
    return 0;
}

/* dp.dist.all_gather(s) -> {s_0, ..., s_{N-1}}: every rank's string, in rank order. */
static int l_all_gather(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    dp_comm *c = world(L, "dpprof.dist.all_gather");
    size_t *n = lua_newuserdatauv(L, (size_t)c->world_size * sizeof *n, 0);
    n[c->rank] = len;
    char *out;
    if (dp_comm_all_gather_host(c, s, n, &out) != DP_OK)
        return luaL_error(L, "dpprof.dist.all_gather: %s", dp_error_message());
    lua_createtable(L, c->world_size, 0);
    size_t at = 0;
    for (int r = 0; r < c->world_size; r++) {
        lua_pushlstring(L, out + at, n[r]);
        lua_rawseti(L, -2, r + 1);
        at += n[r];
    }
    free(out);
    return 1;
}

/* dp.dist.link_model{gpus_per_node=, intra_bytes_per_s=, inter_bytes_per_s=, device_bytes_per_s=}
 * or dp.dist.link_model(false): the links a plan run's collectives are timed on (comm.h). */
static int l_link_model(lua_State *L) {
    static const char *const keys[] = {"gpus_per_node", "intra_bytes_per_s", "inter_bytes_per_s", "device_bytes_per_s",
                                       NULL};
    const char *fname = "dpprof.dist.link_model";
    if (lua_isboolean(L, 1) && !lua_toboolean(L, 1)) {
        dp_comm_link_model(0, 0, 0, 0);
        return 0;
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    dpl_check_keys(L, 1, fname, keys);
    int64_t g = dpl_opt_int_field(L, 1, fname, "gpus_per_node", 0);
    double intra = dpl_opt_num_field(L, 1, fname, "intra_bytes_per_s", 0);
    double inter = dpl_opt_num_field(L, 1, fname, "inter_bytes_per_s", 0);
    double dev = dpl_opt_num_field(L, 1, fname, "device_bytes_per_s", 0);
    if (g < 1 || g > 1 << 20 || !(intra > 0) || !(inter > 0) || !(dev > 0))
        return luaL_error(L, "%s: gpus_per_node must be an integer >= 1 and the bandwidths positive", fname);
    dp_comm_link_model((int)g, intra, inter, dev);
    return 0;
}

/* dp.dist.link_seconds(wire_bytes, world_size) -> the modelled seconds on the link model (0: off) */
static int l_link_seconds(lua_State *L) {
    lua_pushnumber(L, dp_comm_link_seconds(luaL_checknumber(L, 1), (int)luaL_checkinteger(L, 2)));
    return 1;
}

/* dp.dist.nccl() -> true: NCCL loaded and its communicator over the world made, on the current
 * CUDA device (what a distributed CUDA run needs first); raises naming what is missing. */
static int l_nccl(lua_State *L) {
    dp_comm *c = world(L, "dpprof.dist.nccl");
    if (dp_comm_nccl(c, &c) != DP_OK) return luaL_error(L, "%s", dp_error_message());
    lua_pushboolean(L, 1);
    return 1;
}

static int l_launcher(lua_State *L) {
    dp_launch l;
    if (dp_comm_launcher(&l) != DP_OK) return luaL_error(L, "dpprof.dist.launcher: %s", dp_error_message());
    if (l.launcher)
        lua_pushstring(L, l.launcher);
    else
        lua_pushnil(L);
    return 1;
}

void dpl_dist_read(lua_State *L, int idx, const char *fname, dpsgd_dist_config *cfg) {
    dpsgd_dist_config_default(cfg);
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: distributed must be a table {strategy=, world_size=} (got %s)", fname,
                   luaL_typename(L, idx));
    const char *field = lua_pushfstring(L, "%s: distributed", fname); /* kept on the stack while read */
    dpl_check_keys(L, idx, field, dpl_dist_keys);
    const char *name = dpl_opt_str_field(L, idx, field, "strategy", NULL);
    if (name && dpsgd_strategy_parse(name, &cfg->strategy) != DP_OK)
        luaL_error(L, "%s: %s", fname, dp_error_message());
    cfg->world_size = dpl_opt_int_field(L, idx, field, "world_size", DPSGD_DIST_UNSET);
    cfg->rank = dpl_opt_int_field(L, idx, field, "rank", DPSGD_DIST_UNSET);
    lua_pop(L, 1);
}

/* dpl_dist_read of argument 1 into the config at argument 2 (a light userdata), under
 * lua_pcall so that l_check returns what it raises; argument 3 is the name to raise as. */
static int read_protected(lua_State *L) {
    dpl_dist_read(L, 1, lua_tostring(L, 3), lua_touserdata(L, 2));
    return 0;
}

/* dp.dist.check(d, device, how, fname) -> world_size, rank | nil, message (naming fname, by default
 * "dpprof.dist.check"; what the table's reading raises too): the `distributed` table d as a
 * run on `device` ("plan", "cpu", "cuda", ...) takes it (dpsgd_dist_config_check). how "run" (the
 * default): placed in this process's world (dpsgd_dist_place: on plan d's, 1 and 0 by default;
 * elsewhere the launched world's size and rank, which d's size must be); "launch": a configuration
 * launched elsewhere with its own ranks, not compared with this process's world (its size: d's, 1
 * by default); "recorded": a result's record, whose rank off the plan device was the launcher's. */
static int l_check(lua_State *L) {
    const char *device = luaL_checkstring(L, 2);
    static const char *const hows[] = {"run", "launch", "recorded", NULL};
    int how = luaL_checkoption(L, 3, "run", hows);
    const char *fname = luaL_optstring(L, 4, "dpprof.dist.check");
    dpsgd_dist_config cfg;
    lua_pushcfunction(L, read_protected);
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, &cfg);
    lua_pushstring(L, fname);
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    dp_device_kind kind = DP_DEV_CPU;
    if (dp_device_parse(device, &kind) != DP_OK) kind = DP_DEV_CPU; /* "auto" and the like: not a plan run */
    if (how == 2 && kind != DP_DEV_PLAN) cfg.rank = DPSGD_DIST_UNSET;
    int64_t ws, rank;
    int rc = how == 0 ? dpsgd_dist_place(&cfg, kind, &ws, &rank) : dpsgd_dist_config_check(&cfg, kind);
    if (rc != DP_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", fname, dp_error_message());
        return 2;
    }
    if (how != 0) {
        ws = cfg.world_size == DPSGD_DIST_UNSET ? 1 : cfg.world_size;
        rank = cfg.rank == DPSGD_DIST_UNSET ? 0 : cfg.rank;
    }
    lua_pushinteger(L, ws);
    lua_pushinteger(L, rank);
    return 2;
}

void dpl_open_dist(lua_State *L) {
    static const luaL_Reg fns[] = {{"rank", l_rank},
                                   {"world_size", l_world_size},
                                   {"barrier", l_barrier},
                                   {"launcher", l_launcher},
                                   {"all_gather", l_all_gather},
                                   {"nccl", l_nccl},
                                   {"link_model", l_link_model},
                                   {"link_seconds", l_link_seconds},
                                   {"check", l_check},
                                   {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, fns, 0);
    lua_newtable(L);
    for (int s = DPSGD_STRATEGY_DDP; s < DPSGD_N_STRATEGIES; s++) {
        lua_pushstring(L, dpsgd_strategy_name((dpsgd_strategy)s));
        lua_rawseti(L, -2, s);
    }
    lua_setfield(L, -2, "STRATEGIES");
    dpo_keys(DPO_S_DISTRIBUTED, 0, 0, dpl_dist_keys, DPO_N_OPTIONS + 1);
    dpl_push_keys(L, dpl_dist_keys);
    lua_setfield(L, -2, "KEYS");
    lua_pushinteger(L, DPSGD_MAX_WORLD);
    lua_setfield(L, -2, "MAX_WORLD");
    lua_pushboolean(L, dp_comm_mpi_compiled());
    lua_setfield(L, -2, "mpi_compiled");
    lua_setfield(L, -2, "dist");
}
