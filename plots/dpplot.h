/* dpplot.h: dpprof's charts and reports, from results JSON alone (`dpprof plot DIR`).
 *
 * Include this for the whole toolkit: canvas and text (dpplot_canvas.h), ticks and axes
 * (dpplot_axis.h), panels (dpplot_panel.h), palette (dpplot_palette.h), legends
 * (dpplot_legend.h), lines/scatter/spans (dpplot_lines.h), bars (dpplot_bars.h), heatmaps
 * (dpplot_heatmap.h), results reading (dpplot_results.h), summaries (dpplot_summary.h) and the
 * standard charts (dpplot_report.h). The Lua binding is declared in plot_lua.h.
 *
 * Messages: the library never prints. dpplot_render_dir passes every problem and note, one line
 * each, to options.warn (when set) as it finds them, and copies the first problem into err. */
#ifndef DPPLOT_H
#define DPPLOT_H

#include <stddef.h>

#include "dpplot_axis.h"
#include "dpplot_bars.h"
#include "dpplot_canvas.h"
#include "dpplot_charts.h"
#include "dpplot_heatmap.h"
#include "dpplot_legend.h"
#include "dpplot_lines.h"
#include "dpplot_options.h"
#include "dpplot_palette.h"
#include "dpplot_panel.h"
#include "dpplot_report.h"
#include "dpplot_results.h"
#include "dpplot_risk.h"
#include "dpplot_lengths.h"
#include "dpplot_strlist.h"
#include "dpplot_summary.h"

/* Renders every chart that applies to the results in results_dir, and the summaries, into
 * out_dir (created if missing; NULL means results_dir): memory_breakdown_comparison.png,
 * memory_timeline.png, performance_tradeoff.png, module_breakdown.png, sweep_<var>.png and
 * memory_heatmap.png for sweeps, summary.txt/.csv/.md/.tex. opt may be NULL (defaults).
 * Returns 0 when all went well; 1 when some input was malformed or some output could not be
 * written (everything else was still rendered); -1 when nothing could be rendered (directory
 * unreadable, no results, out_dir not creatable); 2 when opt's point or heatmap names a variable,
 * value or method no sweep point has (nothing is rendered; the message names what there is). On
 * non-zero, err (if errlen > 0) holds a
 * one-line message naming the file and field of the first problem. */
int dpplot_render_dir(const char *results_dir, const char *out_dir, const dpplot_options *opt, char *err,
                      size_t errlen);

#endif
