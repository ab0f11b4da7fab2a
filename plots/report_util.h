/* report_util.h: helpers shared by the report_*.c files (internal to plots/). */
#ifndef DPPLOT_REPORT_UTIL_H
#define DPPLOT_REPORT_UTIL_H

#include "dpplot_canvas.h"
#include "dpplot_panel.h"
#include "dpplot_report.h"

/* A canvas sized by the options; NULL (with a note) when it cannot be created. */
dpplot_canvas *dpplot_report_canvas(const dpplot_options *opt, const char *path, dpplot_strlist *notes);
/* What every single-figure report starts with: the canvas and its size, the title with the
 * selection's context line under it (top: the first free y below them), and the note naming
 * the results left out ("" when none). */
typedef struct dpplot_report_frame {
    dpplot_canvas *cv;
    double W, H, top;
    char leftout[512];
} dpplot_report_frame;
/* What a chart did with item i of its selection (the flags in `usable`). A chart examines at most
 * a fixed number of items (its arrays' size, `cap`); items past the flags it filled count as
 * DPPLOT_NO_ROOM too, so a directory of any size is drawn in part and the rest named. */
enum { DPPLOT_LEFT_OUT = 0, DPPLOT_DRAWN = 1, DPPLOT_NO_ROOM = 2 };
/* Opens f for a report titled `title` over sel (usable: n_usable flags, as above; cap: the most
 * items the chart draws); 0, or -1 with a note when the canvas cannot be created. When results
 * had no room, a note says how many and the chart's note counts them. */
int dpplot_report_begin(dpplot_report_frame *f, const dpplot_options *opt, const char *path, dpplot_strlist *notes,
                        const dpplot_selection *sel, const int *usable, size_t n_usable, size_t cap, const char *title);
/* The most panels m <= n that fit a W x H canvas below `top` in a grid of cols_of(m) columns
 * (cells (W - 20) / cols wide, the rows sharing H - top - 10 - bottom, each panel 10 px narrower
 * and 6 px shorter than its cell; bottom grows by 30 px, a note's line, once m < n), judged by
 * laying out `tightest` (the panel with the most to hold) on a scratch canvas: nothing is drawn.
 * 0 when not even one fits; n when the scratch canvas cannot be made. */
size_t dpplot_report_panels_fit(double W, double H, double top, double bottom, size_t n, size_t (*cols_of)(size_t),
                                const dpplot_panel_spec *tightest);
/* Writes cv to path and frees it; 1 when written, -1 (with a note) otherwise. */
int dpplot_report_save(dpplot_canvas *cv, const char *path, dpplot_strlist *notes);
/* The context line of a selection: sel->context, or the configuration its results share
 * ("gpt2 · 12 layers · d=768 · seq 1024 · batch 4 · f32 · full fine-tuning · adamw · device"). */
void dpplot_report_context(const dpplot_selection *sel, char *buf, size_t len);
/* Context line of one result's config, leaving out what its sweep varies (a chart over layers
 * does not say "4 layers": that is one of its points). */
void dpplot_report_context_of(const dpplot_result *r, char *buf, size_t len);
/* The configuration items[0..n) share, as a title line (model, shape, dtype, LoRA or full
 * fine-tuning, optimizer, distributed strategy, device, joined by " · "): what each has alike
 * and its sweep does not vary. */
void dpplot_report_fixed_config(const dpplot_result *const *items, size_t n, char *buf, size_t len);
/* "2 of 5 measured runs taken on a loaded machine (other processes kept up to 63% of the CPUs
 * busy)": the measured items[0..n) whose environment.host_load says loaded; "" when none. */
void dpplot_report_load_note(const dpplot_result *const *items, size_t n, char *buf, size_t len);
/* The legend's name of component c for the results of sel: the norm samples of a result read from
 * the legacy breakdown alone hold its per-sample gradients too ("Norm samples + per-sample grads"),
 * as summary.txt says; else dpplot_component_label(c). */
const char *dpplot_report_component_label(const dpplot_selection *sel, dpplot_component c);
/* Chart label of item i: its method (with its clipping style when not flat) when those are unique in sel,
 * else its experiment. */
const char *dpplot_report_label(const dpplot_selection *sel, size_t i);
/* Note listing results of sel left out of a chart (not ok, or lacking data), e.g.
 * "Not shown: flat (oom)", and counting those with no room ("; 5 more: the chart draws at most 32").
 * buf is "" when none were left out. `usable`: n_usable flags (DPPLOT_DRAWN ...); items from
 * n_usable on have no room. Returns the number of items with no room. */
size_t dpplot_report_left_out(const dpplot_selection *sel, const int *usable, size_t n_usable, size_t cap, char *buf,
                              size_t len);
/* The card's memory of the plan runs among items (plan.memory_bytes), NaN when none is a plan run
 * or their cards differ (issue 27: every memory axis of a plan run shows the card). */
double dpplot_report_card_bytes(const dpplot_result *const *items, size_t n);
/* The top of a memory axis that shows the card: data_max, or the card when the data reach half of
 * it (beyond that the card is noted, not drawn: an axis of empty space says nothing). */
double dpplot_report_card_axis(double data_max, double card);
/* Draws the card's memory across the panel (on its x axis when on_x, else its y axis) as a red
 * dashed line labelled "card 79.6 GiB", or, when it lies beyond the axis, a note at the axis's
 * end; nothing when card is NaN. Call between dpplot_panel_begin and dpplot_panel_end. */
void dpplot_report_card_line(const dpplot_panel *p, double card, int on_x);
struct cJSON;
/* A number field of a JSON document's object, or NAN with "<chart>: <where>'<key>' is missing or not
 * a number" in err (only the first reason is kept: err must start "" ). */
double dpplot_json_number(const struct cJSON *obj, const char *key, const char *chart, const char *where, char *err,
                          size_t errlen);
/* File name part of a path (after the last '/'). */
const char *dpplot_report_basename(const char *path);

#endif
