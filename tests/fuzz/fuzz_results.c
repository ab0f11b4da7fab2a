/* fuzz_results: mutates the result fixtures (tests/fixtures/results/<dir>/<name>.json) thousands of
 * times and feeds each mutant to everything that reads result JSON from outside:
 *   - plots' loader (dpplot_results_add_json) and, every RENDER_EVERY-th mutant, `dpprof plot`'s
 *     whole path (dpplot_render_dir on a directory holding the mutant beside two fixtures);
 *   - dpprof.results.validate and `dpprof compare FIXTURE MUTANT` (dpprof.cli.compare, in-process).
 * Run under AddressSanitizer (scripts/test.sh's build-asan) a crash, leak or overflow fails it;
 * in every build these fail it too: a Lua error out of compare or validate (compare must never
 * raise), an exit status of compare that disagrees with the schema (a valid result: 0 or 1; an
 * invalid document: 2), and a status of the plot renderer outside -1..1.
 *
 * Mutations (seeded, so a failure is reproduced by its seed and iteration): a node of the parsed
 * document replaced by a hostile value (huge, negative, fractional, non-finite, past int64, empty
 * and long strings, other containers, deep nesting), removed, renamed, replaced by a copy of
 * another node (type confusion with realistic shapes), an array grown far past its size; or the
 * text itself damaged (bytes flipped, inserted, cut). A failing mutant is written to
 * <out>/fuzz_fail_<iteration>.json.
 *
 * Then two series of whole `dpprof plot` runs on shapes one mutant cannot make: directories of 1 to
 * 200 results (every chart's limit and one past it, then at random; some results mutants), and a
 * result whose memory timeline has 0 to 1,000,000 points (around compare's 4,096, in order or not,
 * with nulls, huge, negative and repeated values, reserved of another length). A failure there is
 * named by its round.
 *
 *   fuzz_results FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]    (default 3000 mutants, seed 1) */
#include "dpplot.h"
#include "dpprof.h"
#include "fuzz_mutate.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RENDER_EVERY 12
#define MAX_FIXTURES 512
#define DIR_ROUNDS 14      /* directories of 1..200 results */
#define TIMELINE_ROUNDS 14 /* timelines of 0..1,000,000 points */

typedef struct fixture {
    char *dir, *name, *text; /* dir: the fixture directory's name ("single") */
} fixture;

static fixture fixtures[MAX_FIXTURES];
static size_t n_fixtures;

static int write_text(const char *path, const char *text) { return fuzz_write_file(path, text, strlen(text)); }

/* Every valid fixture file below root/<dir>/ (the malformed/ directory is left out: its files are
 * mutants already). */
static void load_fixtures(const char *root) {
    static const char *const dirs[] = {"single", "sweep_seq", "sweep_2d"};
    for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, dirs[d]);
        DIR *dir = opendir(path);
        if (!dir) continue;
        struct dirent *e;
        while ((e = readdir(dir)) && n_fixtures < MAX_FIXTURES) {
            size_t len = strlen(e->d_name);
            if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
            char file[4400];
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            char *text = fuzz_read_file(file, NULL);
            if (!text) continue;
            fixture *f = &fixtures[n_fixtures++];
            f->dir = fuzz_strdup(dirs[d]);
            f->name = fuzz_strdup(e->d_name);
            f->text = text;
        }
        closedir(dir);
    }
}

/* Mutations are fuzz_mutate.c's; a renamed member gets one of these names. */
static const char *const key_names[] = {
    "status", "memory", "timing", "peak_bytes", "categories", "spans",          "live_at_peak_bytes",
    "avg_ms", "sweep",  "vary",   "config",     "model",      "schema_version", "predicted",
    "plan",   "oom",    "",       "traceEvents"};

/* ---- the readers ---------------------------------------------------------------------------- */

static const char *const compare_chunk =
    "local cli, results, dp = require('dpprof.cli'), require('dpprof.results'), require('dpprof')\n"
    "return function(base, mutant)\n"
    "  local sink = function() end\n"
    "  local code = cli.compare({ base, mutant }, { out = sink, err = sink })\n"
    "  local ok, doc = pcall(dp.json.decode, dp.read_file(mutant) or '')\n"
    "  local valid = ok and type(doc) == 'table' and doc.traceEvents == nil and results.validate(doc)\n"
    "    and getmetatable(doc) ~= getmetatable(dp.json.array())\n"
    "  return code, valid and true or false\n"
    "end\n";

static int failures;

static void fail(const char *out, size_t iter, const char *text, const char *fmt, const char *detail) {
    failures++;
    char path[4200];
    snprintf(path, sizeof path, "%s/fuzz_fail_%zu.json", out, iter);
    write_text(path, text);
    fprintf(stderr, "FAIL at mutant %zu (kept in %s): ", iter, path);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
}

/* Removes every file of dir (not its subdirectories' files). */
static void clear_dir(const char *dir) {
    char path[4600];
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

/* dpprof plot on dir; a status outside -1..1 fails round `round` of series `what`. */
static void render_round(const char *dir, const char *render_out, const dpplot_options *opt, const char *what,
                         size_t round, size_t size) {
    char err[512];
    int rc = dpplot_render_dir(dir, render_out, opt, err, sizeof err);
    if (rc < -1 || rc > 1) {
        failures++;
        fprintf(stderr, "FAIL in %s round %zu (%zu): dpplot_render_dir returned %d\n", what, round, size, rc);
    }
}

/* Directories of 1..200 results of one fixture directory, one in eight a mutant. */
static void fuzz_directories(const char *render_dir, const char *render_out, const dpplot_options *opt) {
    static const size_t edges[] = {1, 2, 32, 33, 64, 65, 128, 129, 200};
    for (size_t round = 0; round < DIR_ROUNDS; round++) {
        size_t n = round < sizeof edges / sizeof *edges ? edges[round] : 1 + fuzz_below(200);
        const char *dir = fixtures[fuzz_below(n_fixtures)].dir;
        clear_dir(render_dir);
        for (size_t i = 0; i < n; i++) {
            const fixture *f = &fixtures[fuzz_below(n_fixtures)];
            for (size_t tries = 0; tries < 64 && strcmp(f->dir, dir) != 0; tries++)
                f = &fixtures[fuzz_below(n_fixtures)];
            char path[4600], *text = NULL;
            if (fuzz_below(8) == 0) {
                cJSON *root = cJSON_Parse(f->text);
                fuzz_mutate_tree(root, key_names, sizeof key_names / sizeof *key_names, NULL, 0);
                text = cJSON_PrintUnformatted(root);
                cJSON_Delete(root);
            }
            snprintf(path, sizeof path, "%s/r%03zu_%s", render_dir, i, f->name);
            write_text(path, text ? text : f->text);
            cJSON_free(text);
        }
        render_round(render_dir, render_out, opt, "directories", round, n);
    }
}

/* An array of n numbers: i-th of shape `shape` (0 ascending, 1 descending, 2 back and forth,
 * 3 constant, 4 random with huge and negative ones); a null now and then when holes is set. */
static cJSON *series(size_t n, int shape, double scale, int holes) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        double v = shape == 0   ? (double)i
                   : shape == 1 ? (double)(n - i)
                   : shape == 2 ? (double)((i * 7919) % (n ? n : 1))
                   : shape == 3 ? 1.0
                                : (double)(fuzz_u64() >> 11) * (fuzz_below(50) == 0 ? 1e290 : 1.0) *
                                      (fuzz_below(20) == 0 ? -1.0 : 1.0);
        cJSON_AddItemToArray(a, holes && fuzz_below(1000) == 0 ? cJSON_CreateNull() : cJSON_CreateNumber(v * scale));
    }
    return a;
}

/* A single/ result whose memory.timeline has a drawn length (every edge, then at random, one of a
 * million points) and shape, rendered alone. */
static void fuzz_timelines(const char *render_dir, const char *render_out, const dpplot_options *opt) {
    static const size_t lengths[] = {0, 1, 2, 4095, 4096, 4097, 1000000};
    const fixture *base = NULL;
    for (size_t i = 0; i < n_fixtures && !base; i++)
        if (strcmp(fixtures[i].dir, "single") == 0) base = &fixtures[i];
    if (!base) return;
    for (size_t round = 0; round < TIMELINE_ROUNDS; round++) {
        size_t n = round < sizeof lengths / sizeof *lengths ? lengths[round]
                   : fuzz_below(2)                          ? fuzz_below(5000)
                                                            : fuzz_below(200000);
        cJSON *root = cJSON_Parse(base->text);
        cJSON *tl = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "memory"), "timeline");
        if (!tl) {
            cJSON_Delete(root);
            continue;
        }
        int holes = fuzz_below(4) == 0;
        size_t n_reserved = fuzz_below(6) == 0 ? fuzz_below(n + 2) : n;
        cJSON_ReplaceItemInObject(tl, "t_ms", series(n, fuzz_below(3) == 0 ? (int)fuzz_below(5) : 0, 0.01, holes));
        cJSON_ReplaceItemInObject(tl, "allocated_bytes", series(n, 2 + (int)fuzz_below(3), 1e3, holes));
        cJSON_ReplaceItemInObject(tl, "reserved_bytes", series(n_reserved, 2 + (int)fuzz_below(3), 1e3, holes));
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        clear_dir(render_dir);
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", render_dir, base->name);
        if (text) write_text(path, text);
        cJSON_free(text);
        render_round(render_dir, render_out, opt, "timelines", round, n);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_results FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *out = argv[2];
    size_t iterations = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 3000;
    fuzz_seed(argc > 4 ? strtoull(argv[4], NULL, 10) : 1);
    mkdir(out, 0777);
    load_fixtures(argv[1]);
    if (n_fixtures < 3) {
        fprintf(stderr, "fuzz_results: found %zu fixtures under %s\n", n_fixtures, argv[1]);
        return 1;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, dpprof_openlib);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_results: %s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_setglobal(L, "dpprof");
    if (luaL_loadstring(L, compare_chunk) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_results: %s\n", lua_tostring(L, -1));
        return 1;
    }
    int check_fn = luaL_ref(L, LUA_REGISTRYINDEX);

    char mutant_path[4200], render_dir[4200], render_out[4200];
    snprintf(mutant_path, sizeof mutant_path, "%s/mutant.json", out);
    snprintf(render_dir, sizeof render_dir, "%s/render", out);
    snprintf(render_out, sizeof render_out, "%s/render_out", out);
    mkdir(render_dir, 0777);
    dpplot_options opt = dpplot_options_default();
    opt.scale = 0.1; /* 160 x 100 pixels: the whole layout runs, few pixels are filled */
    size_t structural = 0, textual = 0, valid_mutants = 0, renders = 0;
    clock_t t0 = clock();
    for (size_t iter = 0; iter < iterations; iter++) {
        const fixture *f = &fixtures[fuzz_below(n_fixtures)];
        char *text = NULL;
        if (fuzz_below(5) == 0) {
            text = fuzz_mutate_text(f->text);
            textual++;
        } else {
            cJSON *root = cJSON_Parse(f->text);
            size_t rounds = 1 + fuzz_below(3);
            for (size_t r = 0; r < rounds; r++)
                fuzz_mutate_tree(root, key_names, sizeof key_names / sizeof *key_names, NULL, 0);
            text = cJSON_PrintUnformatted(root);
            cJSON_Delete(root);
            structural++;
        }
        if (!text) continue;

        /* plots' loader */
        dpplot_results rs = {0};
        dpplot_strlist problems = {0};
        (void)dpplot_results_add_json(&rs, f->name, text, &problems);
        dpplot_results_finish(&rs);
        dpplot_results_release(&rs);
        dpplot_strlist_release(&problems);

        /* validate and compare (a fixture of the same directory as BASE) */
        write_text(mutant_path, text);
        char base[4400];
        snprintf(base, sizeof base, "%s/%s/%s", argv[1], f->dir, f->name);
        lua_rawgeti(L, LUA_REGISTRYINDEX, check_fn);
        lua_pushstring(L, base);
        lua_pushstring(L, mutant_path);
        if (lua_pcall(L, 2, 2, 0) != LUA_OK) {
            fail(out, iter, text, "compare or validate raised: %s", lua_tostring(L, -1));
            lua_pop(L, 1);
        } else {
            lua_Integer code = lua_tointeger(L, -2);
            int valid = lua_toboolean(L, -1);
            valid_mutants += valid;
            if (valid && code != 0 && code != 1)
                fail(out, iter, text, "compare exited %s on a valid result (0 or 1 expected)", code == 2 ? "2" : "?");
            if (!valid && code != 2)
                fail(out, iter, text, "compare exited %s on an invalid document (2 expected)", code ? "1" : "0");
            lua_pop(L, 2);
        }
        lua_gc(L, LUA_GCCOLLECT, 0);

        /* dpprof plot, now and then: the mutant beside two fixtures of its directory */
        if (iter % RENDER_EVERY == 0) {
            char path[4600];
            clear_dir(render_dir);
            snprintf(path, sizeof path, "%s/%s", render_dir, f->name);
            write_text(path, text);
            for (int k = 0; k < 2; k++) {
                const fixture *g = &fixtures[fuzz_below(n_fixtures)];
                if (strcmp(g->dir, f->dir) != 0 || strcmp(g->name, f->name) == 0) continue;
                snprintf(path, sizeof path, "%s/%s", render_dir, g->name);
                write_text(path, g->text);
            }
            char err[512];
            int rc = dpplot_render_dir(render_dir, render_out, &opt, err, sizeof err);
            if (rc < -1 || rc > 1) fail(out, iter, text, "dpplot_render_dir returned %s", "out of -1..1");
            renders++;
        }
        cJSON_free(text);
    }
    fuzz_directories(render_dir, render_out, &opt);
    fuzz_timelines(render_dir, render_out, &opt);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("fuzz_results: %zu mutants (%zu structural, %zu textual, %zu still valid results), %zu plot renders, "
           "%d directories of 1..200 results, %d timelines of 0..1000000 points, %.1f s CPU, %d failure(s)\n",
           iterations, structural, textual, valid_mutants, renders, DIR_ROUNDS, TIMELINE_ROUNDS, s, failures);
    luaL_unref(L, LUA_REGISTRYINDEX, check_fn);
    lua_close(L);
    dpprof_shutdown();
    for (size_t i = 0; i < n_fixtures; i++) free(fixtures[i].dir), free(fixtures[i].name), free(fixtures[i].text);
    return failures ? 1 : 0;
}
