/* strlist.c: owned string lists. */
#include "dpplot_strlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int dpplot_strlist_addf(dpplot_strlist *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) return -1;
    char *s = malloc((size_t)len + 1);
    if (!s) return -1;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **items = realloc(l->items, cap * sizeof *items);
        if (!items) {
            free(s);
            return -1;
        }
        l->items = items, l->cap = cap;
    }
    l->items[l->n++] = s;
    return 0;
}

void dpplot_strlist_release(dpplot_strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    l->items = NULL, l->n = l->cap = 0;
}
