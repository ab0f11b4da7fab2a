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
/* memory_analysis_overview.png: one page, three panels across: each run's peak, its memory at the
 * peak by component, and its step time (a panel left out where no run has its data). */
int dpplot_report_overview(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                           dpplot_strlist *notes);
/* memory_timeline_<point>.png for every configuration of each sweep (dpplot_options.timelines_each):
 * the memory_timeline chart of that point's methods. Returns the number of files that failed. */
int dpplot_report_timelines_each(const dpplot_results *rs, const char *out_dir, const dpplot_options *opt,
                                 dpplot_strlist *notes);
/* module_breakdown.png: memory live at the peak per module group, one bar per method. */
int dpplot_report_modules(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                          dpplot_strlist *notes);
/* op_breakdown.png: the per-op profile (profile = "ops") of each method: time per step and bytes
 * moved per step, stacked by op category (matmul, attention, norm, per-sample norms, clip, noise,
 * optimizer, other); the profile's own cost in a note. */
int dpplot_report_ops(const dpplot_selection *sel, const char *path, const dpplot_options *opt, dpplot_strlist *notes);
/* operation_level_breakdown.png: a panel per method, memory live at the peak of each phase by
 * component, the phase's end marked; the host's peak RSS in a note. */
int dpplot_report_phases(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                         dpplot_strlist *notes);
/* step_peaks.png: the peak of every timed step (steps[]: Poisson batches, samples of their own
 * lengths), a line per run, against the card's memory of plan runs (issue 31). Without such runs
 * it returns 0 and adds no note: most directories have none, and no reason to be told so. */
int dpplot_report_steps(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                        dpplot_strlist *notes);
/* clip_bound.png: adaptive clipping's bound at each logical step, a line per run that clipped
 * adaptively (issue 40.3); without such runs it returns 0 and adds no note. */
int dpplot_report_bounds(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                         dpplot_strlist *notes);
/* The note "Host peak RSS: vanilla 1.25 GiB, ..." of a selection's finished runs ("" when none
 * has memory.host_peak_rss_bytes). */
void dpplot_report_rss_note(const dpplot_selection *sel, char *buf, size_t len);
/* Sweep over one variable x_key: peak memory and step time against it, a line per method, OOM
 * points as crosses at the top; log2 x for seq_len, batch and other power-of-two sweeps. */
int dpplot_report_sweep(const dpplot_results *rs, const char *sweep_name, const char *x_key, const char *path,
                        const dpplot_options *opt, dpplot_strlist *notes);
/* Sweep over two variables: peak memory heatmaps (x_key across, y_key up), a panel per method,
 * one viridis scale and colorbar for all, OOM cells hatched. */
int dpplot_report_heatmap(const dpplot_results *rs, const char *sweep_name, const char *x_key, const char *y_key,
                          const char *path, const dpplot_options *opt, dpplot_strlist *notes);
/* The same for a metric (dpplot_metric in sweep_util.h: 0 peak, 1 time, 2 extra memory over vanilla,
 * 3 tokens per second) over the points matching filter ("key=value,...", NULL: all): a panel per
 * method and combination of the other swept values (facets, at most 24). */
int dpplot_report_heatmap_metric(const dpplot_results *rs, const char *sweep_name, const char *x_key, const char *y_key,
                                 int metric, const char *filter, const char *path, const dpplot_options *opt,
                                 dpplot_strlist *notes);

/* Sweep over three or four variables, small multiples (sweep_grid_<metric>.png): the metric
 * (dpplot_metric in sweep_util.h) against keys[0], a line per value of keys[1] (and per method),
 * one panel per value of keys[2] (columns) and keys[3] (rows), shared axes; the points matching
 * filter ("key=value,...", NULL: all). */
int dpplot_report_sweep_grid(const dpplot_results *rs, const char *sweep_name, const char *const *keys, size_t nk,
                             int metric, const char *filter, const char *path, const dpplot_options *opt,
                             dpplot_strlist *notes);
/* memory_timeline_points.png: one timeline panel per point of a sweep (its swept values but the
 * method), the methods' allocated memory overlaid, a shared memory axis; the points matching
 * filter; at most 30 panels. */
int dpplot_report_timeline_points(const dpplot_results *rs, const char *sweep_name, const char *filter,
                                  const char *path, const dpplot_options *opt, dpplot_strlist *notes);

#endif
