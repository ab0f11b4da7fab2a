/* dpplot_render: the path `dpprof plot DIR [--out DIR]` takes, as a standalone program for tests.
 *   dpplot_render DIR [--out DIR] [--scale S] [--width W] [--height H]
 * Prints each problem or note on stderr; exits 0 when all went well, 1 when some input was
 * malformed (what could be rendered was), 2 when nothing could be rendered or on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpplot.h"

static void print_warning(void *user, const char *message) {
    (void)user;
    fprintf(stderr, "dpplot: %s\n", message);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    dpplot_options opt = dpplot_options_default();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc)
            opt.scale = atof(argv[++i]);
        else if (strcmp(argv[i], "--width") == 0 && i + 1 < argc)
            opt.width = atoi(argv[++i]);
        else if (strcmp(argv[i], "--height") == 0 && i + 1 < argc)
            opt.height = atoi(argv[++i]);
        else if (!dir && argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr, "usage: %s DIR [--out DIR] [--scale S] [--width W] [--height H]\n", argv[0]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: %s DIR [--out DIR] [--scale S] [--width W] [--height H]\n", argv[0]);
        return 2;
    }
    opt.warn = print_warning;
    char err[1024];
    int rc = dpplot_render_dir(dir, out, &opt, err, sizeof err);
    if (rc != 0) fprintf(stderr, "dpplot: %s\n", err);
    return rc == 0 ? 0 : rc > 0 ? 1 : 2;
}
