/* report_modules.c: module_breakdown.png. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot_bars.h"
#include "dpplot_legend.h"
#include "dpplot_palette.h"
#include "report_util.h"

#define MAX_METHODS 32

int dpplot_report_modules(const dpplot_selection *sel, const char *path, const dpplot_options *opt,
                          dpplot_strlist *notes) {
    int usable[MAX_METHODS] = {0};
    size_t n = sel->n < MAX_METHODS ? sel->n : MAX_METHODS, idx[MAX_METHODS], n_ok = 0;
    for (size_t i = 0; i < n; i++) {
        const dpplot_result *r = sel->items[i];
        usable[i] = r->status == DPPLOT_STATUS_OK && r->has_modules ? DPPLOT_DRAWN : DPPLOT_LEFT_OUT;
        if (usable[i]) idx[n_ok++] = i;
    }
    if (n_ok == 0) {
        (void)dpplot_strlist_addf(notes, "%s: skipped, no finished run has memory.modules",
                                  dpplot_report_basename(path));
        return 0;
    }
    /* Groups holding a visible share of memory in some run, in the contract's order; groups under
     * 0.5% of the largest bar would be invisible slivers, so they are named in a note instead. */
    double largest = 0.0;
    for (size_t k = 0; k < n_ok; k++)
        for (int g = 0; g < DPPLOT_N_MODULE_GROUPS; g++) largest = fmax(largest, sel->items[idx[k]]->module_bytes[g]);
    const char *groups[DPPLOT_N_MODULE_GROUPS];
    int group_ids[DPPLOT_N_MODULE_GROUPS];
    size_t n_groups = 0;
    char hidden[160] = "";
    for (int g = 0; g < DPPLOT_N_MODULE_GROUPS; g++) {
        double most = 0.0;
        for (size_t k = 0; k < n_ok; k++) most = fmax(most, sel->items[idx[k]]->module_bytes[g]);
        const char *name = dpplot_module_group_name((dpplot_module_group)g);
        if (most >= 0.005 * largest && most > 0) {
            group_ids[n_groups] = g, groups[n_groups++] = name;
        } else if (most > 0) {
            size_t used = strlen(hidden);
            snprintf(hidden + used, sizeof hidden - used, "%s%s", used ? ", " : "", name);
        }
    }
    double values[DPPLOT_N_MODULE_GROUPS * MAX_METHODS];
    dpplot_rgb colors[MAX_METHODS];
    dpplot_legend_entry legend[MAX_METHODS];
    for (size_t k = 0; k < n_ok; k++) {
        const dpplot_result *r = sel->items[idx[k]];
        colors[k] = dpplot_method_color(r->method);
        legend[k] =
            (dpplot_legend_entry){dpplot_report_label(sel, idx[k]), colors[k], DPPLOT_SWATCH_BOX, DPPLOT_MARKER_NONE};
        for (size_t g = 0; g < n_groups; g++) values[g * n_ok + k] = r->module_bytes[group_ids[g]];
    }
    dpplot_report_frame f;
    if (dpplot_report_begin(&f, opt, path, notes, sel, usable, n, MAX_METHODS, "Memory live at the peak, by module") <
        0)
        return -1;
    dpplot_canvas *cv = f.cv;
    const double W = f.W, H = f.H;
    double top = f.top;
    char *leftout = f.leftout;
    top += dpplot_legend_draw(cv, (dpplot_rect){20, top, W - 40, 80}, legend, n_ok) + 10;
    dpplot_bar_spec b = {n_groups, n_ok, values, colors, 0, NULL, 0, DPPLOT_UNIT_BYTES, 0.8};
    double lo, hi;
    dpplot_bars_range(&b, &lo, &hi);
    dpplot_panel p;
    dpplot_panel_spec s = {0};
    s.y_label = "Memory";
    s.y_unit = DPPLOT_UNIT_BYTES;
    s.y_min = 0, s.y_max = hi * 1.05, s.y_extend = 1;
    s.x_categories = groups, s.n_x_categories = n_groups;
    s.x_label = "Module group";
    double bottom_note = leftout[0] || hidden[0] ? 30 : 0;
    if (dpplot_panel_begin(&p, cv, (dpplot_rect){10, top, W - 20, H - top - 10 - bottom_note}, &s) == 0) {
        dpplot_bars_draw(&p, &b);
        dpplot_panel_end(&p);
    }
    if (hidden[0]) {
        size_t used = strlen(leftout);
        snprintf(leftout + used, sizeof f.leftout - used, "%sUnder 0.5%% of the largest bar, not drawn: %s",
                 used ? ".  " : "", hidden);
    }
    dpplot_figure_note(cv, leftout);
    return dpplot_report_save(cv, path, notes);
}
