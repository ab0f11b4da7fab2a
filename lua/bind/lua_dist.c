/* lua_dist.c: dpprof.dist, the process's place among the ranks of a distributed run.
 *
 *   dp.dist.rank(), dp.dist.world_size()   this process's rank and the number of ranks (0 and 1
 *                                          when no launcher started it)
 *   dp.dist.barrier()                      waits for every rank
 *   dp.dist.launcher()                     "mpirun", "pmi", "srun" or nil
 *   dp.dist.STRATEGIES, dp.dist.KEYS       the strategies and the keys of a `distributed` table
 *   dp.dist.mpi_compiled                   whether this dpprof has the MPI transport */
#include "lua_engine.h"

#include "dist.h"
#include "error.h"
#include "lua_util.h"

#include <lauxlib.h>

const char *const dpl_dist_keys[] = {"strategy", "world_size", "rank", NULL};

static dp_comm *world(lua_State *L, const char *fname) {
    dp_comm *c;
    if (dp_dist_world(&c) != DP_OK) luaL_error(L, "%s: %s", fname, dp_error_message());
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

static int l_launcher(lua_State *L) {
    dp_launch l;
    if (dp_dist_launcher(&l) != DP_OK) return luaL_error(L, "dpprof.dist.launcher: %s", dp_error_message());
    if (l.launcher)
        lua_pushstring(L, l.launcher);
    else
        lua_pushnil(L);
    return 1;
}

void dpl_open_dist(lua_State *L) {
    static const luaL_Reg fns[] = {{"rank", l_rank},
                                   {"world_size", l_world_size},
                                   {"barrier", l_barrier},
                                   {"launcher", l_launcher},
                                   {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, fns, 0);
    lua_newtable(L);
    for (int s = DP_DIST_DDP; s < DP_DIST_N_STRATEGIES; s++) {
        lua_pushstring(L, dp_dist_strategy_name((dp_dist_strategy)s));
        lua_rawseti(L, -2, s);
    }
    lua_setfield(L, -2, "STRATEGIES");
    dpl_push_keys(L, dpl_dist_keys);
    lua_setfield(L, -2, "KEYS");
    lua_pushboolean(L, dp_dist_mpi_compiled());
    lua_setfield(L, -2, "mpi_compiled");
    lua_setfield(L, -2, "dist");
}
