/* dpplot_risk.h: the chart of a `dpprof risk` document (dp.risk's answer as JSON, kind
 * "dpprof.risk"): the per-step peak's CDF per method as step curves, the card's budget as a
 * vertical line, and each method's chance that some step of the run exceeds it written in the
 * legend and the subtitle. */
#ifndef DPPLOT_RISK_H
#define DPPLOT_RISK_H

#include <stddef.h>

/* Draws the risk chart of json (the document's text) into a width x height canvas at scale and
 * writes it as PNG to path. 0 on success; -1 with a one-line reason in err (a field missing or
 * of the wrong type, named; an unwritable path). */
int dpplot_risk_chart(const char *json, const char *path, int width, int height, double scale, char *err,
                      size_t errlen);
/* dpplot_risk_chart that also says, in note (when non-NULL; "" when none), which methods' curves
 * coincide and so lie under another's ("vanilla coincides with flash_clip (drawn under it)"), as
 * the chart's subtitle and legend do. */
int dpplot_risk_chart_noted(const char *json, const char *path, int width, int height, double scale, char *note,
                            size_t notelen, char *err, size_t errlen);

/* The configuration line the chart's subtitle starts with, into buf: the model (a checkpoint's
 * directory name, else its arch), dtype, seq_len, LoRA's rank and targets or full fine-tuning, the
 * optimizer and the device model, joined by " · " (what the document says of them). 0, or -1
 * when json is not JSON. */
int dpplot_risk_config(const char *json, char *buf, size_t len);

#endif
