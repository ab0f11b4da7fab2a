/* sweep_util.c: values, methods and metrics of sweep points (see sweep_util.h). */
#include "sweep_util.h"

#include "dpplot_palette.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dpplot_in_sweep(const dpplot_result *r, const char *sweep) {
    return r->sweep_name && strcmp(r->sweep_name, sweep) == 0;
}

/* Where a value of `checkpoint` (activation checkpointing: false, "blocks" or every N-th block)
 * sorts: by the share of blocks it recomputes, 0 for off to 1 for every block, so the axis runs
 * from the most memory to the least. */
static double checkpoint_share(const char *text) {
    if (strcmp(text, "blocks") == 0) return 1.0;
    char *end;
    double n = strtod(text, &end);
    return *end == '\0' && n >= 1 ? 1.0 / n : 0.0;
}

/* The axis label of a checkpoint value: "off", "every block", "every 2nd", "every 4th". */
static void checkpoint_label(const char *text, char *out, size_t n) {
    double share = checkpoint_share(text);
    if (share == 0.0)
        snprintf(out, n, "off");
    else if (share == 1.0)
        snprintf(out, n, "every block");
    else {
        long k = lround(1.0 / share);
        const char *suffix = k % 10 == 2 && k % 100 != 12 ? "nd" : k % 10 == 3 && k % 100 != 13 ? "rd" : "th";
        snprintf(out, n, "every %ld%s", k, suffix);
    }
}

static int value_before(const dpplot_value_set *vs, int checkpoint, size_t a, size_t b) {
    if (checkpoint) return checkpoint_share(vs->text[a]) < checkpoint_share(vs->text[b]);
    return vs->numeric ? vs->number[a] < vs->number[b] : strcmp(vs->text[a], vs->text[b]) < 0;
}

void dpplot_sweep_values(const dpplot_results *rs, const char *sweep, const char *key, dpplot_value_set *vs) {
    memset(vs, 0, sizeof *vs);
    const int checkpoint = strcmp(key, "checkpoint") == 0;
    vs->numeric = !checkpoint; /* checkpoint: off, every N-th, every block as categories */
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep)) continue;
        const dpplot_vary *v = dpplot_result_vary(r, key);
        if (!v) continue;
        if (!v->is_number) vs->numeric = 0;
        size_t k = 0;
        while (k < vs->n && strcmp(vs->text[k], v->text) != 0) k++;
        if (k < vs->n) continue;
        if (vs->n == DPPLOT_SWEEP_MAX_VALUES) {
            int seen = 0; /* counted once: among the earlier points past the limit? */
            for (size_t j = 0; j < i && !seen; j++) {
                const dpplot_vary *w =
                    dpplot_in_sweep(&rs->items[j], sweep) ? dpplot_result_vary(&rs->items[j], key) : NULL;
                seen = w && strcmp(w->text, v->text) == 0;
            }
            vs->dropped += !seen;
            continue;
        }
        vs->number[vs->n] = v->is_number ? v->number : NAN;
        vs->text[vs->n++] = v->text;
    }
    /* insertion sort: a handful of values */
    for (size_t i = 1; i < vs->n; i++)
        for (size_t j = i; j > 0; j--) {
            int swap = value_before(vs, checkpoint, j, j - 1);
            if (!swap) break;
            double tn = vs->number[j];
            const char *tt = vs->text[j];
            vs->number[j] = vs->number[j - 1], vs->text[j] = vs->text[j - 1];
            vs->number[j - 1] = tn, vs->text[j - 1] = tt;
        }
    for (size_t k = 0; k < vs->n; k++) {
        vs->label[k] = vs->text[k];
        if (checkpoint) {
            checkpoint_label(vs->text[k], vs->label_text[k], sizeof vs->label_text[k]);
            vs->label[k] = vs->label_text[k];
        }
    }
}

size_t dpplot_value_index(const dpplot_value_set *vs, const dpplot_vary *v) {
    for (size_t k = 0; v && k < vs->n; k++)
        if (strcmp(vs->text[k], v->text) == 0) return k;
    return vs->n;
}

size_t dpplot_sweep_method_count(const dpplot_results *rs, const char *sweep) {
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep)) continue;
        size_t j = 0;
        while (j < i && !(dpplot_in_sweep(&rs->items[j], sweep) && strcmp(rs->items[j].method, r->method) == 0)) j++;
        n += j == i;
    }
    return n;
}

size_t dpplot_sweep_methods(const dpplot_results *rs, const char *sweep, const char **methods) {
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep)) continue;
        size_t k = 0;
        while (k < n && strcmp(methods[k], r->method) != 0) k++;
        if (k == n && n < DPPLOT_SWEEP_MAX_METHODS) methods[n++] = r->method;
    }
    return n;
}

size_t dpplot_sweep_keys(const dpplot_results *rs, const char *sweep, const char **keys, size_t cap) {
    size_t nk = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep)) continue;
        for (size_t v = 0; v < r->n_vary; v++) {
            const char *k = r->vary[v].key;
            if (strcmp(k, "method") == 0) continue;
            size_t j = 0;
            while (j < nk && strcmp(keys[j], k) != 0) j++;
            if (j == nk && nk < cap) keys[nk++] = k;
        }
    }
    return nk;
}

const dpplot_result *dpplot_sweep_first(const dpplot_results *rs, const char *sweep) {
    for (size_t i = 0; i < rs->n; i++)
        if (dpplot_in_sweep(&rs->items[i], sweep)) return &rs->items[i];
    return NULL;
}

double dpplot_sweep_card_bytes(const dpplot_results *rs, const char *sweep) {
    double card = NAN;
    for (size_t i = 0; i < rs->n; i++) {
        const dpplot_result *r = &rs->items[i];
        if (!dpplot_in_sweep(r, sweep) || !r->predicted || !isfinite(r->card_bytes)) continue;
        if (isfinite(card) && r->card_bytes != card) return NAN;
        card = r->card_bytes;
    }
    return card;
}

int dpplot_wants_log2(const char *key, const dpplot_value_set *vs) {
    if (!vs->numeric || vs->n < 2) return 0;
    for (size_t k = 0; k < vs->n; k++)
        if (!(vs->number[k] > 0)) return 0;
    if (vs->number[vs->n - 1] / vs->number[0] < 4) return 0;
    if (strcmp(key, "seq_len") == 0 || strcmp(key, "batch") == 0 || strcmp(key, "hidden") == 0) return 1;
    for (size_t k = 0; k < vs->n; k++) {
        double l = log2(vs->number[k]);
        if (fabs(l - round(l)) > 1e-9) return 0;
    }
    return 1;
}

void dpplot_sweep_x_range(const dpplot_value_set *xs, const double *x, int log2x, double pad, double *xmin,
                          double *xmax) {
    *xmin = x[0], *xmax = x[xs->n - 1];
    if (!xs->numeric) {
        *xmin = -0.5, *xmax = (double)xs->n - 0.5;
    } else if (log2x) {
        *xmin /= pow(2, 0.35), *xmax *= pow(2, 0.35);
    } else {
        double d = (*xmax - *xmin) * pad + (*xmax == *xmin ? 1 : 0);
        *xmin -= d, *xmax += d;
    }
}

void dpplot_point_label(const dpplot_result *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_vary; i++) {
        if (strcmp(r->vary[i].key, "method") == 0) continue;
        int w = snprintf(buf + used, len - used, "%s%s=%s", used ? ", " : "", r->vary[i].key, r->vary[i].text);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}

int dpplot_point_matches(const dpplot_result *r, const char *filter) {
    if (!filter || !*filter) return 1;
    const char *p = filter;
    while (*p) {
        size_t len = strcspn(p, ",");
        char item[256];
        if (len >= sizeof item) return 0;
        memcpy(item, p, len);
        item[len] = '\0';
        p += len + (p[len] == ',');
        char *eq = strchr(item, '=');
        if (!eq) return 0;
        *eq = '\0';
        const char *want = eq + 1;
        if (strcmp(item, "method") == 0) {
            if (strcmp(r->method, want) != 0) return 0;
            continue;
        }
        const dpplot_vary *v = dpplot_result_vary(r, item);
        if (!v) return 0;
        if (v->is_number) {
            char *end;
            double x = strtod(want, &end);
            if (*end || x != v->number) return 0;
        } else if (strcmp(v->text, want) != 0) {
            return 0;
        }
    }
    return 1;
}

static const char *const metric_names[DPPLOT_N_METRICS] = {"peak", "time", "extra", "tokens_per_s"};

const char *dpplot_metric_name(dpplot_metric m) { return (unsigned)m < DPPLOT_N_METRICS ? metric_names[m] : "?"; }

int dpplot_metric_parse(const char *s) {
    for (int i = 0; s && i < DPPLOT_N_METRICS; i++)
        if (strcmp(s, metric_names[i]) == 0) return i;
    return -1;
}

const char *dpplot_metric_title(dpplot_metric m, int predicted) {
    switch (m) {
    case DPPLOT_METRIC_PEAK: return "Peak memory";
    case DPPLOT_METRIC_TIME: return predicted ? "Time per step (estimated)" : "Time per step";
    case DPPLOT_METRIC_EXTRA: return "Extra memory over vanilla";
    case DPPLOT_METRIC_TOKENS_PER_S: return predicted ? "Tokens per second (estimated)" : "Tokens per second";
    default: return "?";
    }
}

dpplot_unit dpplot_metric_unit(dpplot_metric m) {
    return m == DPPLOT_METRIC_TIME           ? DPPLOT_UNIT_MS
           : m == DPPLOT_METRIC_TOKENS_PER_S ? DPPLOT_UNIT_NONE
                                             : DPPLOT_UNIT_BYTES;
}

/* Whether a and b are the same point of a sweep but for the method. */
static int same_point(const dpplot_result *a, const dpplot_result *b) {
    if (!a->sweep_name || !b->sweep_name || strcmp(a->sweep_name, b->sweep_name) != 0) return 0;
    for (size_t i = 0; i < a->n_vary; i++) {
        if (strcmp(a->vary[i].key, "method") == 0) continue;
        const dpplot_vary *v = dpplot_result_vary(b, a->vary[i].key);
        if (!v || strcmp(v->text, a->vary[i].text) != 0) return 0;
    }
    return 1;
}

double dpplot_step_ms(const dpplot_result *r, double *lo, double *hi) {
    if (lo) *lo = NAN;
    if (hi) *hi = NAN;
    if (isfinite(r->time_mid_ms)) {
        if (lo) *lo = r->time_lo_ms;
        if (hi) *hi = r->time_hi_ms;
        return r->time_mid_ms;
    }
    return r->has_time ? r->avg_ms : NAN;
}

double dpplot_metric_value(const dpplot_results *rs, const dpplot_result *r, dpplot_metric m, double *lo, double *hi) {
    if (lo) *lo = NAN;
    if (hi) *hi = NAN;
    if (r->status != DPPLOT_STATUS_OK) return NAN;
    switch (m) {
    case DPPLOT_METRIC_PEAK: return r->has_peak ? r->peak_bytes : NAN;
    case DPPLOT_METRIC_TIME: return dpplot_step_ms(r, lo, hi);
    case DPPLOT_METRIC_TOKENS_PER_S: {
        double l = NAN, h = NAN, ms = dpplot_step_ms(r, &l, &h);
        if (!(ms > 0) || !isfinite(r->batch) || !isfinite(r->seq_len)) return NAN;
        double tokens = r->batch * r->seq_len;
        if (lo && h > 0) *lo = tokens / (h / 1000.0); /* the slowest run gives the fewest tokens */
        if (hi && l > 0) *hi = tokens / (l / 1000.0);
        return tokens / (ms / 1000.0);
    }
    case DPPLOT_METRIC_EXTRA:
        if (!r->has_peak || dpplot_method_rank(r->method) == 0) return NAN;
        for (size_t i = 0; i < rs->n; i++) {
            const dpplot_result *v = &rs->items[i];
            if (dpplot_method_rank(v->method) == 0 && v->status == DPPLOT_STATUS_OK && v->has_peak && same_point(r, v))
                return r->peak_bytes - v->peak_bytes;
        }
        return NAN;
    default: return NAN;
    }
}
