/* plot_lua.h: the Lua binding of the chart toolkit (it becomes `dpprof.plot`).
 *
 *   plot.render_dir(dir [, out [, {width=, height=, scale=}]]) -> ok, err|nil, {messages}
 *   plot.lines{out=, title=, subtitle=, x_label=, y_label=, x_scale="linear|log2|log10",
 *              y_scale=, x_unit="none|bytes|ms", y_unit=, x_min=, x_max=, y_min=, y_max=,
 *              width=, height=, scale=,
 *              series={{name=, x={...}, y={...}, oom={bool...}, color="#rrggbb",
 *                       marker="circle|square|triangle|diamond|cross|none", dashed=, step=}}}
 *   plot.bars{out=, groups={...}, series={{name=, values={...}, color=}}, stacked=, notes={...},
 *             labels=, ...titles/units as lines}
 *   plot.scatter{out=, points={{x=, y=, label=, method=, color=, marker=, hollow=}}, ...}
 *   plot.heatmap{out=, x_labels={...}, y_labels={...}, values={{row 1 (bottom)}, ...},
 *                oom={{bool...}, ...}, unit=, color_scale=, vmin=, vmax=, colorbar_label=,
 *                show_values=, ...}
 *   plot.timeline{out=, series={{name=, t={ms...}, y={bytes...}, dashed=, color=}},
 *                 spans={{phase="forward", start_ms=, end_ms=}}, annotations={{x=, y=, text=}},
 *                 peak=true, ...}  (units default to ms across, bytes up)
 *   plot.method_color(name) -> "#rrggbb"
 *   plot.ticks(lo, hi [, scale [, unit]]) -> {values}, {labels}, unit
 *   plot.format(value, unit) -> "474.7 MiB"
 * Chart functions return the path written. Bad arguments raise errors naming the function, the
 * field and what was expected ("dpprof.plot.lines: field 'series[2].y' must be ..."). */
#ifndef DPPLOT_PLOT_LUA_H
#define DPPLOT_PLOT_LUA_H

#include <lua.h>

/* Pushes a new table holding the functions above (and registers the metatable they use);
 * returns 1, the number of values pushed. Raises a Lua error only when memory runs out. */
int dpplot_lua_open(lua_State *L);

#endif
