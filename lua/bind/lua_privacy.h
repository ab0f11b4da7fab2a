/* lua_privacy.h: Lua 5.4 binding of the RDP accountant (engine/dp/privacy.h).
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
 */
#ifndef DP_LUA_PRIVACY_H
#define DP_LUA_PRIVACY_H

#include <lua.h>

/* Pushes the dpprof.privacy table {epsilon=, noise_multiplier=}; returns 1 (a lua_CFunction,
 * usable with luaL_requiref). Raises a Lua error only on out-of-memory. */
int dp_lua_privacy_open(lua_State *L);

#endif /* DP_LUA_PRIVACY_H */
