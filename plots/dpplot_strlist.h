/* dpplot_strlist.h: a growable list of owned strings (warnings, problems found in results). */
#ifndef DPPLOT_STRLIST_H
#define DPPLOT_STRLIST_H

#include <stddef.h>

typedef struct {
    char **items; /* owned, NUL-terminated */
    size_t n, cap;
} dpplot_strlist;

/* Appends a printf-formatted string; 0 on success, -1 when out of memory (the list is unchanged). */
int dpplot_strlist_addf(dpplot_strlist *l, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Frees every string and the array; the list is then empty and reusable. */
void dpplot_strlist_release(dpplot_strlist *l);

#endif
