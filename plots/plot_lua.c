/* plot_lua.c: dpprof.plot, the Lua face of the chart toolkit.
 *
 * Discipline (as liolib): every argument is checked and converted before any C resource exists;
 * arrays live in userdata kept by a scratch table on the stack, and strings are kept there too,
 * so a Lua error anywhere in parsing leaks nothing. The canvas is created after parsing, drawn
 * with no Lua calls, freed, and only then is an error raised if drawing or writing failed. */
#include "plot_lua.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpplot.h"

#define MESSAGES_MT "dpprof.plot.messages"
#define MAX_SERIES 64
#define MAX_POINTS 256
#define MAX_ITEMS 1048576 /* per array: far above any chart's need, far below trouble */

typedef struct {
    lua_State *L;
    const char *fn; /* function name for messages: "lines" */
    int spec;       /* absolute stack index of the options table */
    int scratch;    /* absolute stack index of the table that keeps allocations alive */
    int kept;
} ctx;

static void ctx_init(ctx *c, lua_State *L, const char *fn) {
    /* The function is named here, not by luaL_argerror: called through pcall it reads "?". */
    if (!lua_istable(L, 1))
        luaL_error(L, "bad argument #1 to 'dpprof.plot.%s' (expected a table of chart options, got %s)", fn,
                   luaL_typename(L, 1));
    lua_settop(L, 1);
    c->L = L, c->fn = fn, c->spec = 1, c->kept = 0;
    lua_newtable(L);
    c->scratch = lua_gettop(L);
}

/* Zeroed memory owned by the scratch table (collected by the GC, also after an error). */
static void *scratch_alloc(ctx *c, size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = lua_newuserdatauv(c->L, bytes, 0);
    memset(p, 0, bytes);
    lua_rawseti(c->L, c->scratch, ++c->kept);
    return p;
}

/* Raises "dpprof.plot.fn: field 'path' must be <expected> (got <type of stack top>)". */
static int bad_field(ctx *c, const char *path, const char *expected) {
    return luaL_error(c->L, "dpprof.plot.%s: field '%s' must be %s (got %s)", c->fn, path, expected,
                      luaL_typename(c->L, -1));
}

/* Pushes field key of table t; path gets "<prefix><key>" for messages. */
static int get_field(ctx *c, int t, const char *prefix, const char *key, char *path, size_t len) {
    snprintf(path, len, "%s%s", prefix, key);
    return lua_getfield(c->L, t, key);
}

/* String field or NULL when nil; kept alive by the scratch table. */
static const char *opt_string(ctx *c, int t, const char *prefix, const char *key) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    if (ty == LUA_TNIL) {
        lua_pop(c->L, 1);
        return NULL;
    }
    if (ty != LUA_TSTRING) bad_field(c, path, "a string");
    const char *s = lua_tostring(c->L, -1);
    lua_rawseti(c->L, c->scratch, ++c->kept);
    return s;
}

static double opt_number(ctx *c, int t, const char *prefix, const char *key, double dflt) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    double v = dflt;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TNUMBER) bad_field(c, path, "a number");
        v = lua_tonumber(c->L, -1);
    }
    lua_pop(c->L, 1);
    return v;
}

static int opt_bool(ctx *c, int t, const char *prefix, const char *key, int dflt) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    int v = dflt;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TBOOLEAN) bad_field(c, path, "a boolean");
        v = lua_toboolean(c->L, -1);
    }
    lua_pop(c->L, 1);
    return v;
}

static int opt_enum(ctx *c, int t, const char *prefix, const char *key, int (*parse)(const char *), int dflt,
                    const char *expected) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    int v = dflt;
    if (ty != LUA_TNIL) {
        v = ty == LUA_TSTRING ? parse(lua_tostring(c->L, -1)) : -1;
        if (v < 0) bad_field(c, path, expected);
    }
    lua_pop(c->L, 1);
    return v;
}

static dpplot_rgb opt_color(ctx *c, int t, const char *prefix, const char *key, dpplot_rgb dflt) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    dpplot_rgb v = dflt;
    if (ty != LUA_TNIL && (ty != LUA_TSTRING || dpplot_rgb_parse(lua_tostring(c->L, -1), &v) != 0))
        bad_field(c, path, "a colour \"#rrggbb\"");
    lua_pop(c->L, 1);
    return v;
}

/* Pushes table field key of t and returns 1; nil pushes nothing and returns 0 unless required. */
static int push_table(ctx *c, int t, const char *prefix, const char *key, int required) {
    char path[96];
    int ty = get_field(c, t, prefix, key, path, sizeof path);
    if (ty == LUA_TTABLE) return 1;
    if (ty == LUA_TNIL && !required) {
        lua_pop(c->L, 1);
        return 0;
    }
    return bad_field(c, path, "a table");
}

/* Length of the array on top of the stack. */
static size_t top_len(ctx *c, const char *path) {
    lua_Integer n = luaL_len(c->L, -1);
    if (n < 0 || n > MAX_ITEMS) luaL_error(c->L, "dpprof.plot.%s: field '%s' has too many items", c->fn, path);
    return (size_t)n;
}

/* Numbers of the array on top of the stack (left there); `false` gives NaN when holes_ok. */
static double *number_list(ctx *c, const char *path, int holes_ok, size_t *n) {
    lua_State *L = c->L;
    size_t len = top_len(c, path);
    double *out = scratch_alloc(c, len * sizeof *out);
    for (size_t i = 0; i < len; i++) {
        int ty = lua_geti(L, -1, (lua_Integer)i + 1);
        if (ty == LUA_TNUMBER)
            out[i] = lua_tonumber(L, -1);
        else if (holes_ok && ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))
            out[i] = NAN;
        else
            luaL_error(L, "dpprof.plot.%s: field '%s[%d]' must be a number%s (got %s)", c->fn, path, (int)i + 1,
                       holes_ok ? " or false" : "", luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    *n = len;
    return out;
}

/* Booleans of the array on top of the stack (left there). */
static unsigned char *bool_list(ctx *c, const char *path, size_t *n) {
    lua_State *L = c->L;
    size_t len = top_len(c, path);
    unsigned char *out = scratch_alloc(c, len);
    for (size_t i = 0; i < len; i++) {
        if (lua_geti(L, -1, (lua_Integer)i + 1) != LUA_TBOOLEAN)
            luaL_error(L, "dpprof.plot.%s: field '%s[%d]' must be a boolean (got %s)", c->fn, path, (int)i + 1,
                       luaL_typename(L, -1));
        out[i] = (unsigned char)lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    *n = len;
    return out;
}

/* Strings (numbers are converted) of the array on top of the stack (left there). */
static const char **string_list(ctx *c, const char *path, size_t *n) {
    lua_State *L = c->L;
    size_t len = top_len(c, path);
    const char **out = scratch_alloc(c, len * sizeof *out);
    for (size_t i = 0; i < len; i++) {
        int ty = lua_geti(L, -1, (lua_Integer)i + 1);
        if (ty != LUA_TSTRING && ty != LUA_TNUMBER)
            luaL_error(L, "dpprof.plot.%s: field '%s[%d]' must be a string (got %s)", c->fn, path, (int)i + 1,
                       luaL_typename(L, -1));
        out[i] = lua_tostring(L, -1);
        lua_rawseti(L, c->scratch, ++c->kept);
    }
    *n = len;
    return out;
}

/* Field wrappers: NULL with *n = 0 when the field is nil and not required. */
static double *number_field(ctx *c, int t, const char *prefix, const char *key, int required, int holes_ok, size_t *n) {
    char path[96];
    *n = 0;
    if (!push_table(c, t, prefix, key, required)) return NULL;
    snprintf(path, sizeof path, "%s%s", prefix, key);
    double *v = number_list(c, path, holes_ok, n);
    lua_pop(c->L, 1);
    return v;
}

static unsigned char *bool_field(ctx *c, int t, const char *prefix, const char *key, size_t *n) {
    char path[96];
    *n = 0;
    if (!push_table(c, t, prefix, key, 0)) return NULL;
    snprintf(path, sizeof path, "%s%s", prefix, key);
    unsigned char *v = bool_list(c, path, n);
    lua_pop(c->L, 1);
    return v;
}

static const char **string_field(ctx *c, int t, const char *key, int required, size_t *n) {
    *n = 0;
    if (!push_table(c, t, "", key, required)) return NULL;
    const char **v = string_list(c, key, n);
    lua_pop(c->L, 1);
    return v;
}

/* Pushes item i (1-based) of the list field `key` (a table), raising if it is not a table. */
static int push_item(ctx *c, int list, const char *key, size_t i) {
    if (lua_geti(c->L, list, (lua_Integer)i) != LUA_TTABLE)
        luaL_error(c->L, "dpprof.plot.%s: field '%s[%d]' must be a table (got %s)", c->fn, key, (int)i,
                   luaL_typename(c->L, -1));
    return lua_gettop(c->L);
}

/* Canvas size, titles and axes shared by every chart function. */
typedef struct {
    const char *out;
    int width, height;
    double scale;
    dpplot_chart_axes ax;
} chart_common;

static void parse_common(ctx *c, chart_common *cc, dpplot_unit x_unit, dpplot_unit y_unit) {
    int t = c->spec;
    const char *scales = "\"linear\", \"log2\" or \"log10\"", *units = "\"none\", \"bytes\" or \"ms\"";
    cc->out = opt_string(c, t, "", "out");
    if (!cc->out) luaL_error(c->L, "dpprof.plot.%s: field 'out' (the PNG path) is required", c->fn);
    cc->width = (int)opt_number(c, t, "", "width", DPPLOT_DEFAULT_WIDTH);
    cc->height = (int)opt_number(c, t, "", "height", DPPLOT_DEFAULT_HEIGHT);
    cc->scale = opt_number(c, t, "", "scale", 1.0);
    cc->ax = dpplot_chart_axes_default();
    cc->ax.title = opt_string(c, t, "", "title");
    cc->ax.subtitle = opt_string(c, t, "", "subtitle");
    cc->ax.x_label = opt_string(c, t, "", "x_label");
    cc->ax.y_label = opt_string(c, t, "", "y_label");
    cc->ax.x_scale = (dpplot_scale)opt_enum(c, t, "", "x_scale", dpplot_scale_parse, 0, scales);
    cc->ax.y_scale = (dpplot_scale)opt_enum(c, t, "", "y_scale", dpplot_scale_parse, 0, scales);
    cc->ax.x_unit = (dpplot_unit)opt_enum(c, t, "", "x_unit", dpplot_unit_parse, (int)x_unit, units);
    cc->ax.y_unit = (dpplot_unit)opt_enum(c, t, "", "y_unit", dpplot_unit_parse, (int)y_unit, units);
    cc->ax.x_min = opt_number(c, t, "", "x_min", NAN);
    cc->ax.x_max = opt_number(c, t, "", "x_max", NAN);
    cc->ax.y_min = opt_number(c, t, "", "y_min", NAN);
    cc->ax.y_max = opt_number(c, t, "", "y_max", NAN);
}

/* Parses spec.series for lines (timeline: 1, where x may be given as t and lines are steps). */
static size_t parse_series(ctx *c, dpplot_series *out, int timeline) {
    lua_State *L = c->L;
    push_table(c, c->spec, "", "series", 1);
    int list = lua_gettop(L);
    size_t n = top_len(c, "series");
    if (n == 0 || n > MAX_SERIES)
        luaL_error(L, "dpprof.plot.%s: field 'series' must hold 1 to %d series", c->fn, MAX_SERIES);
    for (size_t i = 0; i < n; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "series[%d].", (int)i + 1);
        int t = push_item(c, list, "series", i + 1);
        dpplot_series *s = &out[i];
        s->name = opt_string(c, t, prefix, "name");
        const char *xk = "x";
        if (timeline) {
            lua_getfield(L, t, "t");
            if (!lua_isnil(L, -1)) xk = "t";
            lua_pop(L, 1);
        }
        size_t nx, ny, no;
        s->x = number_field(c, t, prefix, xk, 1, 0, &nx);
        s->y = number_field(c, t, prefix, "y", 1, 1, &ny);
        if (nx != ny)
            luaL_error(L, "dpprof.plot.%s: field '%sy' has %d values but '%s%s' has %d", c->fn, prefix, (int)ny, prefix,
                       xk, (int)nx);
        s->n = nx;
        size_t nlo, nhi; /* whiskers: lo and hi values per point (false for none) */
        s->y_lo = number_field(c, t, prefix, "lo", 0, 1, &nlo);
        s->y_hi = number_field(c, t, prefix, "hi", 0, 1, &nhi);
        if ((s->y_lo && nlo != nx) || (s->y_hi && nhi != nx) || !s->y_lo != !s->y_hi)
            luaL_error(L, "dpprof.plot.%s: fields '%slo' and '%shi' go together, with a value per point", c->fn, prefix,
                       prefix);
        s->oom = bool_field(c, t, prefix, "oom", &no);
        if (s->oom && no != nx)
            luaL_error(L, "dpprof.plot.%s: field '%soom' has %d flags but '%s%s' has %d", c->fn, prefix, (int)no,
                       prefix, xk, (int)nx);
        s->color = opt_color(c, t, prefix, "color", dpplot_method_color(s->name ? s->name : ""));
        s->marker = (dpplot_marker)opt_enum(c, t, prefix, "marker", dpplot_marker_parse,
                                            timeline ? DPPLOT_MARKER_NONE : (int)dpplot_method_marker(s->name),
                                            "a marker name (\"circle\", \"square\", \"triangle\", \"diamond\", "
                                            "\"cross\", \"triangle_down\", \"hexagon\" or \"none\")");
        s->dashed = opt_bool(c, t, prefix, "dashed", 0);
        s->step = opt_bool(c, t, prefix, "step", timeline);
        s->line_width = opt_number(c, t, prefix, "line_width", 0);
        s->fill_alpha = opt_number(c, t, prefix, "fill", timeline && !s->dashed ? 0.15 : 0.0);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

/* Creates the canvas, runs draw, writes the PNG and frees, then raises any error. */
typedef int (*draw_fn)(dpplot_canvas *cv, const chart_common *cc, void *data);

static int render(ctx *c, const chart_common *cc, draw_fn draw, void *data) {
    char msg[512] = "";
    dpplot_canvas *cv = dpplot_canvas_new(cc->width, cc->height, cc->scale);
    if (!cv) {
        snprintf(msg, sizeof msg, "cannot create a %d×%d canvas at scale %g (64 to 16384 px a side)", cc->width,
                 cc->height, cc->scale);
    } else {
        if (draw(cv, cc, data) != 0)
            snprintf(msg, sizeof msg,
                     "the axes do not fit the canvas or a range is unusable "
                     "(a log scale over values <= 0?)");
        else if (dpplot_canvas_write_png(cv, cc->out, msg, sizeof msg) != 0 && !msg[0])
            snprintf(msg, sizeof msg, "cannot write '%s'", cc->out);
        dpplot_canvas_free(cv);
    }
    if (msg[0]) return luaL_error(c->L, "dpprof.plot.%s: %s", c->fn, msg);
    lua_pushstring(c->L, cc->out);
    return 1;
}

/* ---- lines ---- */
typedef struct {
    dpplot_series s[MAX_SERIES];
    size_t n;
} lines_data;

static int draw_lines(dpplot_canvas *cv, const chart_common *cc, void *data) {
    lines_data *d = data;
    return dpplot_chart_lines(cv, &cc->ax, d->s, d->n);
}

static int l_lines(lua_State *L) {
    ctx c;
    ctx_init(&c, L, "lines");
    chart_common cc;
    parse_common(&c, &cc, DPPLOT_UNIT_NONE, DPPLOT_UNIT_NONE);
    lines_data *d = scratch_alloc(&c, sizeof *d);
    d->n = parse_series(&c, d->s, 0);
    return render(&c, &cc, draw_lines, d);
}

/* ---- bars ---- */
typedef struct {
    const char **groups, **names;
    dpplot_bar_spec b;
} bars_data;

static int draw_bars(dpplot_canvas *cv, const chart_common *cc, void *data) {
    bars_data *d = data;
    return dpplot_chart_bars(cv, &cc->ax, d->groups, d->names, &d->b);
}

static int l_bars(lua_State *L) {
    ctx c;
    ctx_init(&c, L, "bars");
    chart_common cc;
    parse_common(&c, &cc, DPPLOT_UNIT_NONE, DPPLOT_UNIT_NONE);
    bars_data *d = scratch_alloc(&c, sizeof *d);
    size_t n_groups, n_notes;
    d->groups = string_field(&c, c.spec, "groups", 1, &n_groups);
    if (n_groups == 0) luaL_error(L, "dpprof.plot.bars: field 'groups' must name at least one group");
    push_table(&c, c.spec, "", "series", 1);
    int list = lua_gettop(L);
    size_t n = top_len(&c, "series");
    if (n == 0 || n > MAX_SERIES)
        luaL_error(L, "dpprof.plot.bars: field 'series' must hold 1 to %d series", MAX_SERIES);
    double *values = scratch_alloc(&c, n_groups * n * sizeof *values);
    dpplot_rgb *colors = scratch_alloc(&c, n * sizeof *colors);
    d->names = scratch_alloc(&c, n * sizeof *d->names);
    for (size_t i = 0; i < n; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "series[%d].", (int)i + 1);
        int t = push_item(&c, list, "series", i + 1);
        d->names[i] = opt_string(&c, t, prefix, "name");
        size_t nv;
        const double *v = number_field(&c, t, prefix, "values", 1, 1, &nv);
        if (nv != n_groups)
            luaL_error(L, "dpprof.plot.bars: field '%svalues' has %d values for %d groups", prefix, (int)nv,
                       (int)n_groups);
        for (size_t g = 0; g < n_groups; g++) values[g * n + i] = v[g];
        colors[i] = opt_color(&c, t, prefix, "color", dpplot_method_color(d->names[i] ? d->names[i] : ""));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    d->b.n_groups = n_groups, d->b.n_series = n, d->b.values = values, d->b.series_colors = colors;
    d->b.stacked = opt_bool(&c, c.spec, "", "stacked", 0);
    d->b.group_notes = string_field(&c, c.spec, "notes", 0, &n_notes);
    if (d->b.group_notes && n_notes != n_groups)
        luaL_error(L, "dpprof.plot.bars: field 'notes' has %d entries for %d groups", (int)n_notes, (int)n_groups);
    d->b.label_segments = opt_bool(&c, c.spec, "", "labels", d->b.stacked);
    d->b.unit = cc.ax.y_unit;
    return render(&c, &cc, draw_bars, d);
}

/* ---- scatter ---- */
typedef struct {
    dpplot_point p[MAX_POINTS];
    size_t n;
} scatter_data;

static int draw_scatter(dpplot_canvas *cv, const chart_common *cc, void *data) {
    scatter_data *d = data;
    return dpplot_chart_scatter(cv, &cc->ax, d->p, d->n);
}

static int l_scatter(lua_State *L) {
    ctx c;
    ctx_init(&c, L, "scatter");
    chart_common cc;
    parse_common(&c, &cc, DPPLOT_UNIT_NONE, DPPLOT_UNIT_NONE);
    scatter_data *d = scratch_alloc(&c, sizeof *d);
    push_table(&c, c.spec, "", "points", 1);
    int list = lua_gettop(L);
    d->n = top_len(&c, "points");
    if (d->n == 0 || d->n > MAX_POINTS)
        luaL_error(L, "dpprof.plot.scatter: field 'points' must hold 1 to %d points", MAX_POINTS);
    for (size_t i = 0; i < d->n; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "points[%d].", (int)i + 1);
        int t = push_item(&c, list, "points", i + 1);
        dpplot_point *p = &d->p[i];
        p->x = opt_number(&c, t, prefix, "x", NAN);
        p->y = opt_number(&c, t, prefix, "y", NAN);
        if (!isfinite(p->x) || !isfinite(p->y))
            luaL_error(L, "dpprof.plot.scatter: fields '%sx' and '%sy' must be finite numbers", prefix, prefix);
        p->label = opt_string(&c, t, prefix, "label");
        const char *method = opt_string(&c, t, prefix, "method");
        p->color = opt_color(&c, t, prefix, "color", dpplot_method_color(method ? method : ""));
        p->marker =
            (dpplot_marker)opt_enum(&c, t, prefix, "marker", dpplot_marker_parse, (int)dpplot_method_marker(method),
                                    "a marker name (\"circle\", \"square\", \"triangle\", \"diamond\", "
                                    "\"triangle_down\", \"hexagon\" or \"cross\")");
        p->hollow = opt_bool(&c, t, prefix, "hollow", 0);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return render(&c, &cc, draw_scatter, d);
}

/* ---- heatmap ---- */
typedef struct {
    const char **x_labels, **y_labels;
    const char *colorbar_label;
    dpplot_heatmap_spec h;
} heatmap_data;

static int draw_heatmap(dpplot_canvas *cv, const chart_common *cc, void *data) {
    heatmap_data *d = data;
    return dpplot_chart_heatmap(cv, &cc->ax, d->x_labels, d->y_labels, &d->h, d->colorbar_label);
}

/* Reads spec[key] as ny rows of nx numbers (is_bool: booleans) into out (row-major). */
static void parse_grid(ctx *c, const char *key, int required, int is_bool, size_t nx, size_t ny, double *numbers,
                       unsigned char *flags) {
    lua_State *L = c->L;
    if (!push_table(c, c->spec, "", key, required)) return;
    int rows = lua_gettop(L);
    if (top_len(c, key) != ny)
        luaL_error(L, "dpprof.plot.heatmap: field '%s' must hold %d rows (one per y label)", key, (int)ny);
    for (size_t r = 0; r < ny; r++) {
        char path[48];
        snprintf(path, sizeof path, "%s[%d]", key, (int)r + 1);
        if (lua_geti(L, rows, (lua_Integer)r + 1) != LUA_TTABLE) bad_field(c, path, "a table");
        size_t n;
        if (is_bool) {
            const unsigned char *row = bool_list(c, path, &n);
            if (n == nx) memcpy(flags + r * nx, row, nx);
        } else {
            const double *row = number_list(c, path, 1, &n);
            if (n == nx) memcpy(numbers + r * nx, row, nx * sizeof *row);
        }
        if (n != nx)
            luaL_error(L, "dpprof.plot.heatmap: field '%s' has %d values for %d x labels", path, (int)n, (int)nx);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static int l_heatmap(lua_State *L) {
    ctx c;
    ctx_init(&c, L, "heatmap");
    chart_common cc;
    parse_common(&c, &cc, DPPLOT_UNIT_NONE, DPPLOT_UNIT_NONE);
    heatmap_data *d = scratch_alloc(&c, sizeof *d);
    size_t nx, ny;
    d->x_labels = string_field(&c, c.spec, "x_labels", 1, &nx);
    d->y_labels = string_field(&c, c.spec, "y_labels", 1, &ny);
    if (nx == 0 || ny == 0) luaL_error(L, "dpprof.plot.heatmap: fields 'x_labels' and 'y_labels' must not be empty");
    double *values = scratch_alloc(&c, nx * ny * sizeof *values);
    unsigned char *oom = scratch_alloc(&c, nx * ny);
    parse_grid(&c, "values", 1, 0, nx, ny, values, NULL);
    parse_grid(&c, "oom", 0, 1, nx, ny, NULL, oom);
    double vmin = INFINITY, vmax = -INFINITY;
    for (size_t i = 0; i < nx * ny; i++)
        if (isfinite(values[i]) && !oom[i]) vmin = fmin(vmin, values[i]), vmax = fmax(vmax, values[i]);
    if (!(vmax >= vmin)) vmin = 0, vmax = 1;
    if (vmax == vmin) vmax = vmin + (vmin == 0 ? 1 : fabs(vmin));
    const char *cs = "\"linear\", \"log2\" or \"log10\"", *units = "\"none\", \"bytes\" or \"ms\"";
    d->h = (dpplot_heatmap_spec){nx,
                                 ny,
                                 values,
                                 oom,
                                 opt_number(&c, c.spec, "", "vmin", vmin),
                                 opt_number(&c, c.spec, "", "vmax", vmax),
                                 (dpplot_scale)opt_enum(&c, c.spec, "", "color_scale", dpplot_scale_parse, 0, cs),
                                 (dpplot_unit)opt_enum(&c, c.spec, "", "unit", dpplot_unit_parse, 0, units),
                                 opt_bool(&c, c.spec, "", "show_values", 1),
                                 NULL};
    if (!(d->h.vmax > d->h.vmin))
        luaL_error(L, "dpprof.plot.heatmap: fields 'vmin' and 'vmax' must satisfy vmin < vmax");
    if (d->h.color_scale != DPPLOT_SCALE_LINEAR && !(d->h.vmin > 0))
        luaL_error(L, "dpprof.plot.heatmap: field 'color_scale' is logarithmic but values reach %g", d->h.vmin);
    d->colorbar_label = opt_string(&c, c.spec, "", "colorbar_label");
    return render(&c, &cc, draw_heatmap, d);
}

/* ---- timeline ---- */
#define MAX_SPANS 4096
#define MAX_NOTES 32

typedef struct {
    dpplot_series s[MAX_SERIES];
    size_t n;
    dpplot_shade shades[MAX_SPANS];
    const char *shade_names[MAX_SPANS];
    size_t n_shades;
    dpplot_annotation notes[MAX_NOTES + 1];
    char peak_text[48];
    size_t n_notes;
} timeline_data;

static int draw_timeline(dpplot_canvas *cv, const chart_common *cc, void *data) {
    timeline_data *d = data;
    return dpplot_chart_timeline(cv, &cc->ax, d->s, d->n, d->shades, d->shade_names, d->n_shades, d->notes, d->n_notes);
}

static int l_timeline(lua_State *L) {
    ctx c;
    ctx_init(&c, L, "timeline");
    chart_common cc;
    parse_common(&c, &cc, DPPLOT_UNIT_MS, DPPLOT_UNIT_BYTES);
    timeline_data *d = scratch_alloc(&c, sizeof *d);
    d->n = parse_series(&c, d->s, 1);
    if (push_table(&c, c.spec, "", "spans", 0)) {
        int list = lua_gettop(L);
        d->n_shades = top_len(&c, "spans");
        if (d->n_shades > MAX_SPANS)
            luaL_error(L, "dpprof.plot.timeline: field 'spans' has more than %d spans", MAX_SPANS);
        for (size_t i = 0; i < d->n_shades; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "spans[%d].", (int)i + 1);
            int t = push_item(&c, list, "spans", i + 1);
            const char *phase = opt_string(&c, t, prefix, "phase");
            int ph = dpplot_phase_from_name(phase);
            dpplot_rgb dflt = ph >= 0 ? dpplot_phase_color((dpplot_phase)ph) : dpplot_rgb_hex(0xBBBBBB);
            d->shades[i].x0 = opt_number(&c, t, prefix, "start_ms", NAN);
            d->shades[i].x1 = opt_number(&c, t, prefix, "end_ms", NAN);
            if (!isfinite(d->shades[i].x0) || !isfinite(d->shades[i].x1))
                luaL_error(L, "dpprof.plot.timeline: fields '%sstart_ms' and '%send_ms' must be numbers", prefix,
                           prefix);
            d->shades[i].color = opt_color(&c, t, prefix, "color", dflt);
            d->shades[i].alpha = 0.3;
            d->shade_names[i] = phase;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (push_table(&c, c.spec, "", "annotations", 0)) {
        int list = lua_gettop(L);
        size_t n = top_len(&c, "annotations");
        if (n > MAX_NOTES)
            luaL_error(L, "dpprof.plot.timeline: field 'annotations' has more than %d entries", MAX_NOTES);
        for (size_t i = 0; i < n; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "annotations[%d].", (int)i + 1);
            int t = push_item(&c, list, "annotations", i + 1);
            dpplot_annotation *a = &d->notes[d->n_notes++];
            a->x = opt_number(&c, t, prefix, "x", NAN);
            a->y = opt_number(&c, t, prefix, "y", NAN);
            a->text = opt_string(&c, t, prefix, "text");
            if (!isfinite(a->x) || !isfinite(a->y) || !a->text)
                luaL_error(L, "dpprof.plot.timeline: field '%s' needs numbers x, y and a string text", prefix);
            a->color = opt_color(&c, t, prefix, "color", DPPLOT_INK);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (opt_bool(&c, c.spec, "", "peak", 1) && d->n > 0 && d->s[0].n > 0) {
        const dpplot_series *s = &d->s[0];
        size_t peak = 0;
        for (size_t i = 1; i < s->n; i++)
            if (s->y[i] > s->y[peak] || !isfinite(s->y[peak])) peak = i;
        if (isfinite(s->y[peak])) {
            char v[32];
            dpplot_format_value(s->y[peak], cc.ax.y_unit, v, sizeof v);
            snprintf(d->peak_text, sizeof d->peak_text, "peak %s", v);
            d->notes[d->n_notes++] = (dpplot_annotation){s->x[peak], s->y[peak], d->peak_text, s->color};
        }
    }
    return render(&c, &cc, draw_timeline, d);
}

/* ---- render_dir and utilities ---- */

/* Messages collected during dpplot_render_dir, owned by a userdata so an error while they are
 * pushed to Lua still frees them (__gc); release is idempotent. */
typedef struct {
    dpplot_strlist list;
} message_box;

static int messages_gc(lua_State *L) {
    message_box *b = luaL_checkudata(L, 1, MESSAGES_MT);
    dpplot_strlist_release(&b->list);
    return 0;
}

static void collect_message(void *user, const char *message) {
    (void)dpplot_strlist_addf(&((message_box *)user)->list, "%s", message);
}

/* The options table at idx's width, height and scale into dims[0..2] (those given; the others kept);
 * raises "bad argument #idx to 'fname'" naming a field that is not a number. */
static void read_dims(lua_State *L, int idx, const char *fname, double dims[3]) {
    static const char *const keys[3] = {"width", "height", "scale"};
    for (int k = 0; k < 3; k++) {
        int ty = lua_getfield(L, idx, keys[k]);
        if (ty != LUA_TNIL && ty != LUA_TNUMBER)
            luaL_error(L, "bad argument #%d to '%s' (field '%s' must be a number, got %s)", idx, fname, keys[k],
                       luaL_typename(L, -1));
        if (ty == LUA_TNUMBER) dims[k] = lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
}

static int l_render_dir(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    const char *out = luaL_optstring(L, 2, NULL);
    dpplot_options opt = dpplot_options_default();
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        double dims[3] = {opt.width, opt.height, opt.scale};
        read_dims(L, 3, "dpprof.plot.render_dir", dims);
        opt.width = (int)dims[0], opt.height = (int)dims[1], opt.scale = dims[2];
        /* point = "key=value,...", heatmap = "x_key,y_key" (dpplot_options); kept alive by the table */
        static const char *const strs[2] = {"point", "heatmap"};
        for (int k = 0; k < 2; k++) {
            int ty = lua_getfield(L, 3, strs[k]);
            if (ty != LUA_TNIL && ty != LUA_TSTRING)
                luaL_error(L, "bad argument #3 to 'dpprof.plot.render_dir' (field '%s' must be a string, got %s)",
                           strs[k], luaL_typename(L, -1));
            if (ty == LUA_TSTRING) *(k == 0 ? &opt.point : &opt.heatmap) = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        /* timelines = "each": also a memory_timeline_<point>.png per configuration ("points": not) */
        int ty = lua_getfield(L, 3, "timelines");
        if (ty != LUA_TNIL) {
            const char *v = ty == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            if (!v || (strcmp(v, "each") != 0 && strcmp(v, "points") != 0))
                luaL_error(L,
                           "bad argument #3 to 'dpprof.plot.render_dir' (field 'timelines' must be \"each\" or "
                           "\"points\", got %s)",
                           v ? v : luaL_typename(L, -1));
            opt.timelines_each = strcmp(v, "each") == 0;
        }
        lua_pop(L, 1);
    }
    message_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    memset(box, 0, sizeof *box);
    luaL_setmetatable(L, MESSAGES_MT);
    int box_index = lua_gettop(L);
    opt.warn = collect_message, opt.warn_user = box;
    char err[1024];
    int rc = dpplot_render_dir(dir, out, &opt, err, sizeof err);
    lua_pushboolean(L, rc == 0);
    if (rc == 0)
        lua_pushnil(L);
    else
        lua_pushstring(L, err);
    lua_createtable(L, (int)box->list.n, 0);
    for (size_t i = 0; i < box->list.n; i++) {
        lua_pushstring(L, box->list.items[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    dpplot_strlist_release(&box->list);
    (void)box_index;
    return 3;
}

static int l_method_color(lua_State *L) {
    char buf[8];
    dpplot_rgb_format(dpplot_method_color(luaL_checkstring(L, 1)), buf);
    lua_pushstring(L, buf);
    return 1;
}

/* plot.component_style(key) -> "#rrggbb", label: a memory component's colour and label as the
 * breakdown charts draw it (key: dpprof.memory.CATEGORIES[i].component); nil for an unknown key. */
static int l_component_style(lua_State *L) {
    const char *key = luaL_checkstring(L, 1);
    for (int c = 0; c < DPPLOT_N_COMPONENTS; c++)
        if (strcmp(key, dpplot_component_key((dpplot_component)c)) == 0) {
            char buf[8];
            dpplot_rgb_format(dpplot_component_color((dpplot_component)c), buf);
            lua_pushstring(L, buf);
            lua_pushstring(L, dpplot_component_label((dpplot_component)c));
            return 2;
        }
    lua_pushnil(L);
    return 1;
}

static int check_option(lua_State *L, int arg, int (*parse)(const char *), const char *expected) {
    if (lua_isnoneornil(L, arg)) return 0;
    int v = parse(luaL_checkstring(L, arg));
    if (v < 0) luaL_argerror(L, arg, lua_pushfstring(L, "expected %s", expected));
    return v;
}

static int l_ticks(lua_State *L) {
    double lo = luaL_checknumber(L, 1), hi = luaL_checknumber(L, 2);
    int scale = check_option(L, 3, dpplot_scale_parse, "\"linear\", \"log2\" or \"log10\"");
    int unit = check_option(L, 4, dpplot_unit_parse, "\"none\", \"bytes\" or \"ms\"");
    dpplot_ticks t;
    if (dpplot_ticks_compute(lo, hi, (dpplot_scale)scale, 6, (dpplot_unit)unit, 1, &t) != 0)
        return luaL_error(L, "dpprof.plot.ticks: range [%f, %f] is unusable on this scale", lo, hi);
    lua_createtable(L, (int)t.n, 0);
    for (size_t i = 0; i < t.n; i++) lua_pushnumber(L, t.value[i]), lua_rawseti(L, -2, (lua_Integer)i + 1);
    lua_createtable(L, (int)t.n, 0);
    for (size_t i = 0; i < t.n; i++) lua_pushstring(L, t.label[i]), lua_rawseti(L, -2, (lua_Integer)i + 1);
    lua_pushstring(L, t.unit);
    return 3;
}

static int l_format(lua_State *L) {
    double v = luaL_checknumber(L, 1);
    int unit = check_option(L, 2, dpplot_unit_parse, "\"none\", \"bytes\" or \"ms\"");
    char buf[64];
    lua_pushstring(L, dpplot_format_value(v, (dpplot_unit)unit, buf, sizeof buf));
    return 1;
}

/* dpprof.plot.risk(json, out [, {width=, height=, scale=}]) -> out, note: the chart of a `dpprof
 * risk` document (its JSON text; dpplot_risk.h) and what it notes (methods whose curves coincide,
 * one under another; nil when nothing); raises with the reason. */
/* A document chart's arguments: (json, out [, {width=, height=, scale=}]), 1600 x 1000 at scale 1 by
 * default. */
static void document_args(lua_State *L, const char *fname, const char **json, const char **out, double dims[3]) {
    *json = luaL_checkstring(L, 1);
    *out = luaL_checkstring(L, 2);
    dims[0] = 1600, dims[1] = 1000, dims[2] = 1;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        read_dims(L, 3, fname, dims);
    }
}

static int l_risk(lua_State *L) {
    const char *json, *out;
    double dims[3];
    document_args(L, "dpprof.plot.risk", &json, &out, dims);
    char err[512], note[512];
    if (dpplot_risk_chart_noted(json, out, (int)dims[0], (int)dims[1], dims[2], note, sizeof note, err, sizeof err) !=
        0)
        return luaL_error(L, "dpprof.plot.risk: %s", err);
    lua_pushstring(L, out);
    if (note[0])
        lua_pushstring(L, note);
    else
        lua_pushnil(L);
    return 2;
}

/* dpprof.plot.lengths(json, out [, {width=, height=, scale=}]) -> out: the chart of a `dpprof data`
 * document (its JSON text; dpplot_lengths.h); raises with the reason. */
static int l_lengths(lua_State *L) {
    const char *json, *out;
    double dims[3];
    document_args(L, "dpprof.plot.lengths", &json, &out, dims);
    char err[512];
    if (dpplot_lengths_chart(json, out, (int)dims[0], (int)dims[1], dims[2], err, sizeof err) != 0)
        return luaL_error(L, "dpprof.plot.lengths: %s", err);
    lua_pushstring(L, out);
    return 1;
}

static const luaL_Reg plot_funcs[] = {{"render_dir", l_render_dir},
                                      {"risk", l_risk},
                                      {"lengths", l_lengths},
                                      {"lines", l_lines},
                                      {"bars", l_bars},
                                      {"scatter", l_scatter},
                                      {"heatmap", l_heatmap},
                                      {"timeline", l_timeline},
                                      {"method_color", l_method_color},
                                      {"component_style", l_component_style},
                                      {"ticks", l_ticks},
                                      {"format", l_format},
                                      {NULL, NULL}};

int dpplot_lua_open(lua_State *L) {
    if (luaL_newmetatable(L, MESSAGES_MT)) {
        lua_pushcfunction(L, messages_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, messages_gc);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    luaL_newlib(L, plot_funcs);
    return 1;
}
