/* dpplot_report.h: the standard charts of a results directory, each a function of results.
 *
 * Each returns 1 when it wrote the PNG, 0 when nothing applied (the reason is added to `notes`),
 * -1 when the canvas could not be created or the file not written (also noted). Results with a
 * status other than ok are left out of bar, scatter and timeline charts and counted in a note
 * on the chart; sweep charts draw OOM points as crosses. */
#ifndef DPPLOT_REPORT_H
#define DPPLOT_REPORT_H

#include <stddef.h>

#include "dpplot_options.h"
#include "dpplot_results.h"
#include "dpplot_strlist.h"

/* A set of results drawn together (borrowed pointers), and the line that says what they are. */
typedef struct {
    const dpplot_result *const *items;
    size_t n;
    const char *context; /* subtitle: model and config, e.g. "gpt2 · 12 layers · seq 1024";
                            NULL to derive it from the results */
} dpplot_selection;

/* memory_breakdown_comparison.png: left, stacked components per method (peak labelled); right,
 * each DP method's extra memory over vanilla by component (omitted without a vanilla run). */
int dpplot_report_breakdown(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                            dpplot_strlist *notes);
/* memory_timeline.png: a panel per method, allocated and reserved over time on shared axes,
 * phase spans shaded, the peak marked and labelled. */
int dpplot_report_timeline(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes);
/* performance_tradeoff.png: peak memory against step time, one labelled point per method,
 * with vanilla's values as dashed reference lines and overheads in the labels. */
int dpplot_report_tradeoff(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes);
/* module_breakdown.png: memory live at the peak per module group, one bar per method. */
int dpplot_report_modules(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                          dpplot_strlist *notes);
/* Sweep over one variable x_key: peak memory and step time against it, a line per method, OOM
 * points as crosses at the top; log2 x for seq_len, batch and other power-of-two sweeps. */
int dpplot_report_sweep(const dpplot_results *rs, const char *sweep_name, const char *x_key, const char *path,
                        const dpplot_options *opt, dpplot_strlist *notes);
/* Sweep over two variables: peak memory heatmaps (x_key across, y_key up), a panel per method,
 * one viridis scale and colorbar for all, OOM cells hatched. */
int dpplot_report_heatmap(const dpplot_results *rs, const char *sweep_name, const char *x_key, const char *y_key,
                          const char *path, const dpplot_options *opt, dpplot_strlist *notes);

#endif
