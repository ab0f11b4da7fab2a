/* lua_privacy.h: Lua 5.4 binding of the privacy accountants (engine/accountant.h).
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
 */
#ifndef DP_LUA_PRIVACY_H
#define DP_LUA_PRIVACY_H

#include <lua.h>

/* Pushes the dpprof.privacy table {epsilon=, noise_multiplier=, accountants=, default_accountant=,
 * defaults=}; returns 1 (a lua_CFunction, usable with luaL_requiref). Raises a Lua error only on OOM. */
int dp_lua_privacy_open(lua_State *L);

#endif /* DP_LUA_PRIVACY_H */
