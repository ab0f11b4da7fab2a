/* axis.c: ticks (Heckbert's loose labelling), units, formatting and mapping. */
#include "dpplot_axis.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define KIB 1024.0

double dpplot_nice_number(double x, int round) {
    if (!(x > 0.0) || !isfinite(x)) return 1.0;
    double expv = floor(log10(x));
    double f = x / pow(10.0, expv), nf;
    if (round)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * pow(10.0, expv);
}

void dpplot_unit_choose(dpplot_unit unit, double max_abs, const char **name, double *divisor) {
    static const char *const bytes[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (unit == DPPLOT_UNIT_BYTES) {
        int i = 0;
        double d = 1.0;
        while (i < 4 && max_abs >= d * KIB) d *= KIB, i++;
        *name = bytes[i], *divisor = d;
    } else if (unit == DPPLOT_UNIT_MS) {
        if (max_abs >= 10000.0)
            *name = "s", *divisor = 1000.0;
        else
            *name = "ms", *divisor = 1.0;
    } else {
        *name = "", *divisor = 1.0;
    }
}

/* Prints v (display units) with `decimals` decimals, never as "-0". */
static void format_fixed(double v, int decimals, char *buf, size_t len) {
    if (fabs(v) < 0.5 * pow(10.0, -decimals)) v = 0.0;
    snprintf(buf, len, "%.*f", decimals, v);
}

int dpplot_ticks_linear(double lo, double hi, int target, dpplot_unit unit, int extend, dpplot_ticks *out) {
    memset(out, 0, sizeof *out);
    if (!isfinite(lo) || !isfinite(hi)) return -1;
    if (lo > hi) {
        double t = lo;
        lo = hi, hi = t;
    }
    if (target < 2) target = 2;
    if (target > DPPLOT_MAX_TICKS - 2) target = DPPLOT_MAX_TICKS - 2;
    const char *uname;
    double div;
    dpplot_unit_choose(unit, fmax(fabs(lo), fabs(hi)), &uname, &div);
    double a = lo / div, b = hi / div;
    if (a == b) { /* widen a degenerate range around its value */
        double pad = a == 0.0 ? 1.0 : fabs(a) * 0.5;
        a = a == 0.0 ? 0.0 : a - pad;
        b = b + pad;
        if (lo >= 0 && a < 0) a = 0;
    }
    double range = dpplot_nice_number(b - a, 0);
    double step = dpplot_nice_number(range / (target - 1), 1);
    double first = extend ? floor(a / step) * step : ceil(a / step - 1e-9) * step;
    double last = extend ? ceil(b / step) * step : floor(b / step + 1e-9) * step;
    int decimals = (int)fmax(-floor(log10(step) + 1e-9), 0.0);
    size_t n = 0;
    for (double v = first; v <= last + step * 0.5 && n < DPPLOT_MAX_TICKS; v += step) {
        double snapped = round(v / step) * step; /* keep accumulated error out of labels */
        out->value[n] = snapped * div;
        format_fixed(snapped, decimals, out->label[n], DPPLOT_TICK_LABEL);
        n++;
    }
    out->n = n;
    out->lo = extend ? first * div : a * div;
    out->hi = extend ? last * div : b * div;
    if (!(out->hi > out->lo)) out->hi = out->lo + step * div;
    snprintf(out->unit, sizeof out->unit, "%s", uname);
    out->divisor = div;
    return 0;
}

/* Label for a power-of-base tick on a log axis. */
static void log_label(double v, dpplot_unit unit, char *buf, size_t len) {
    if (unit != DPPLOT_UNIT_NONE) {
        dpplot_format_value(v, unit, buf, len);
    } else if (v >= 1e6) {
        snprintf(buf, len, "%.0e", v);
    } else if (v >= 1.0) {
        snprintf(buf, len, "%.0f", v);
    } else {
        snprintf(buf, len, "%g", v);
    }
}

int dpplot_ticks_log(double lo, double hi, dpplot_scale scale, int target, dpplot_unit unit, int extend,
                     dpplot_ticks *out) {
    memset(out, 0, sizeof *out);
    if (scale == DPPLOT_SCALE_LINEAR || !isfinite(lo) || !isfinite(hi)) return -1;
    if (lo > hi) {
        double t = lo;
        lo = hi, hi = t;
    }
    if (!(lo > 0.0)) return -1;
    if (target < 2) target = 2;
    double base = scale == DPPLOT_SCALE_LOG2 ? 2.0 : 10.0;
    double la = dpplot_scale_apply(scale, lo), lb = dpplot_scale_apply(scale, hi);
    if (lb - la < 1e-12) la -= 0.5, lb += 0.5; /* one value: half a power either side */
    double kmin = extend ? floor(la + 1e-9) : ceil(la - 1e-9);
    double kmax = extend ? ceil(lb - 1e-9) : floor(lb + 1e-9);
    /* Thin to about `target` ticks, keeping a stride that divides the powers evenly. */
    double count = kmax - kmin + 1;
    double stride = count > target ? ceil(count / target) : 1;
    size_t n = 0;
    for (double k = ceil(kmin / stride) * stride; k <= kmax && n < DPPLOT_MAX_TICKS; k += stride) {
        double v = pow(base, k);
        if (scale == DPPLOT_SCALE_LOG10 && lb - la < 2.0 && stride == 1) {
            /* Short log10 ranges: 1, 2, 5 per decade so there are enough labels to read. */
            for (int m = 0; m < 3 && n < DPPLOT_MAX_TICKS; m++) {
                static const double mult[3] = {1, 2, 5};
                double w = v * mult[m], lw = log10(w);
                if (lw < la - 1e-9 || lw > lb + 1e-9) continue;
                out->value[n] = w;
                log_label(w, unit, out->label[n], DPPLOT_TICK_LABEL);
                n++;
            }
            continue;
        }
        out->value[n] = v;
        log_label(v, unit, out->label[n], DPPLOT_TICK_LABEL);
        n++;
    }
    out->n = n;
    if (n < 2 && hi > lo) {
        /* No two powers inside a narrow range: place linear ticks on the log axis instead, each
         * labelled with its own unit, so the axis still reads. */
        dpplot_ticks lin;
        if (dpplot_ticks_linear(lo, hi, target < 3 ? 3 : target, unit, 0, &lin) == 0 && lin.n >= 2) {
            for (size_t i = 0; i < lin.n; i++) {
                out->value[i] = lin.value[i];
                if (unit == DPPLOT_UNIT_NONE)
                    snprintf(out->label[i], DPPLOT_TICK_LABEL, "%s", lin.label[i]);
                else
                    dpplot_format_value(lin.value[i], unit, out->label[i], DPPLOT_TICK_LABEL);
            }
            out->n = lin.n;
        }
    }
    out->lo = extend ? pow(base, fmin(kmin, la)) : pow(base, la);
    out->hi = extend ? pow(base, fmax(kmax, lb)) : pow(base, lb);
    out->unit[0] = '\0';
    out->divisor = 1.0;
    return 0;
}

int dpplot_ticks_compute(double lo, double hi, dpplot_scale scale, int target, dpplot_unit unit, int extend,
                         dpplot_ticks *out) {
    if (scale == DPPLOT_SCALE_LINEAR) return dpplot_ticks_linear(lo, hi, target, unit, extend, out);
    return dpplot_ticks_log(lo, hi, scale, target, unit, extend, out);
}

/* Value with up to 3 significant figures, no trailing zeros ("474.7", "1.25", "512"). */
static void format_short(double v, char *buf, size_t len) {
    double a = fabs(v);
    int decimals = a >= 100 ? 1 : a >= 10 ? 1 : 2;
    if (a >= 1000) decimals = 0;
    snprintf(buf, len, "%.*f", decimals, v);
    if (strchr(buf, '.')) { /* trim zeros after the point, then a bare point */
        size_t l = strlen(buf);
        while (l > 0 && buf[l - 1] == '0') buf[--l] = '\0';
        if (l > 0 && buf[l - 1] == '.') buf[--l] = '\0';
    }
    if (strcmp(buf, "-0") == 0) snprintf(buf, len, "0");
}

char *dpplot_format_value(double v, dpplot_unit unit, char *buf, size_t buflen) {
    if (!buf || buflen == 0) return buf;
    if (!isfinite(v)) {
        snprintf(buf, buflen, "n/a");
        return buf;
    }
    char num[32];
    if (unit == DPPLOT_UNIT_NONE) {
        if (fabs(v) >= 1e6)
            snprintf(num, sizeof num, "%.3g", v);
        else if (v == floor(v))
            snprintf(num, sizeof num, "%.0f", v);
        else
            format_short(v, num, sizeof num);
        snprintf(buf, buflen, "%s", num);
        return buf;
    }
    const char *uname;
    double div;
    dpplot_unit_choose(unit, fabs(v), &uname, &div);
    if (unit == DPPLOT_UNIT_MS && fabs(v) >= 1000.0) uname = "s", div = 1000.0;
    if (unit == DPPLOT_UNIT_MS && fabs(v) >= 100.0 && div == 1.0)
        snprintf(num, sizeof num, "%.0f", v);
    else if (unit == DPPLOT_UNIT_BYTES && div == 1.0)
        snprintf(num, sizeof num, "%.0f", v);
    else
        format_short(v / div, num, sizeof num);
    snprintf(buf, buflen, "%s %s", num, uname);
    return buf;
}

double dpplot_scale_apply(dpplot_scale scale, double v) {
    switch (scale) {
    case DPPLOT_SCALE_LOG2: return log2(v);
    case DPPLOT_SCALE_LOG10: return log10(v);
    default: return v;
    }
}

double dpplot_axis_map(const dpplot_axis *ax, double v) {
    if (ax->scale != DPPLOT_SCALE_LINEAR && !(v > 0.0)) return ax->pix_lo;
    double a = dpplot_scale_apply(ax->scale, ax->lo), b = dpplot_scale_apply(ax->scale, ax->hi);
    double t = (dpplot_scale_apply(ax->scale, v) - a) / (b - a);
    return ax->pix_lo + (ax->pix_hi - ax->pix_lo) * t;
}

int dpplot_scale_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "linear") == 0) return DPPLOT_SCALE_LINEAR;
    if (strcmp(s, "log2") == 0) return DPPLOT_SCALE_LOG2;
    if (strcmp(s, "log10") == 0) return DPPLOT_SCALE_LOG10;
    return -1;
}

int dpplot_unit_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "none") == 0) return DPPLOT_UNIT_NONE;
    if (strcmp(s, "bytes") == 0) return DPPLOT_UNIT_BYTES;
    if (strcmp(s, "ms") == 0) return DPPLOT_UNIT_MS;
    return -1;
}
