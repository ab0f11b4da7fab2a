/* dpplot_lengths.h: the chart of a `dpprof data` document (kind "dpprof.data"): a histogram of the
 * samples' tokens as a filled step curve, the 50th, 90th and 99th percentiles and the seq_len cut
 * (when the document has one) as vertical lines named in the legend with their values. */
#ifndef DPPLOT_LENGTHS_H
#define DPPLOT_LENGTHS_H

#include <stddef.h>

/* Draws the lengths chart of json (the document's text) into a width x height canvas at scale and
 * writes it as PNG to path. 0 on success; -1 with a one-line reason in err (a field missing or of
 * the wrong type, named; an unwritable path). */
int dpplot_lengths_chart(const char *json, const char *path, int width, int height, double scale, char *err,
                         size_t errlen);

#endif
