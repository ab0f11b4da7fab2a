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
 *   fuzz_results FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]    (default 3000 mutants, seed 1) */
#include "dpplot.h"
#include "dpprof.h"

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

static uint64_t rng_state;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(next_u64() % n) : 0; }

typedef struct fixture {
    char *dir, *name, *text; /* dir: the fixture directory's name ("single") */
} fixture;

static fixture fixtures[MAX_FIXTURES];
static size_t n_fixtures;

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

static int write_all(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

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
            char *text = read_all(file);
            if (!text) continue;
            fixture *f = &fixtures[n_fixtures++];
            f->dir = dup_str(dirs[d]);
            f->name = dup_str(e->d_name);
            f->text = text;
        }
        closedir(dir);
    }
}

/* ---- structural mutations ------------------------------------------------------------------- */

typedef struct node_list {
    cJSON **items;
    size_t n, cap;
} node_list;

static void collect(cJSON *it, node_list *l) {
    for (cJSON *c = it->child; c; c = c->next) {
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 256;
            l->items = realloc(l->items, l->cap * sizeof *l->items);
        }
        l->items[l->n++] = c;
        collect(c, l);
    }
}

static cJSON *parent_of(cJSON *root, cJSON *item) {
    for (cJSON *c = root->child; c; c = c->next) {
        if (c == item) return root;
        cJSON *p = parent_of(c, item);
        if (p) return p;
    }
    return NULL;
}

/* A hostile value: numbers at and past every edge, strings, containers, deep nesting. */
static cJSON *hostile_value(void) {
    static const char *const raws[] = {"0",
                                       "-1",
                                       "1.5",
                                       "0.5",
                                       "-0",
                                       "1e300",
                                       "-1e300",
                                       "1e999",
                                       "-1e999",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "-9223372036854775809",
                                       "18446744073709551616",
                                       "4.5e15",
                                       "1e-320",
                                       "123456789012345678901234567890",
                                       "3",
                                       "2.0",
                                       "true",
                                       "false",
                                       "null",
                                       "\"\"",
                                       "\"NaN\"",
                                       "\"Infinity\"",
                                       "\"ok\"",
                                       "\"oom\"",
                                       "\"ghost\"",
                                       "\"%s%n%d\"",
                                       "[]",
                                       "{}",
                                       "[0]",
                                       "[\"x\"]",
                                       "{\"a\":1}",
                                       "[null,1,\"2\"]",
                                       "{\"phase\":\"forward\"}"};
    size_t k = below(sizeof raws / sizeof *raws + 2);
    if (k < sizeof raws / sizeof *raws) return cJSON_CreateRaw(raws[k]);
    if (k == sizeof raws / sizeof *raws) { /* a long string */
        size_t n = 1 + below(20000);
        char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++) s[i] = (char)('a' + below(26));
        s[n] = '\0';
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v;
    }
    /* nesting: arrays 1 to 300 deep (cJSON's own limit is 1000) */
    size_t depth = 1 + below(300);
    cJSON *v = cJSON_CreateNumber(1);
    for (size_t i = 0; i < depth; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, v);
        v = a;
    }
    return v;
}

/* Replaces item (in parent) by replacement, keeping its key in an object. */
static void replace(cJSON *parent, cJSON *item, cJSON *replacement) {
    if (item->string && !replacement->string) {
        replacement->string = dup_str(item->string);
        replacement->type &= ~cJSON_StringIsConst;
    }
    cJSON_ReplaceItemViaPointer(parent, item, replacement);
}

static const char *const key_names[] = {
    "status", "memory", "timing", "peak_bytes", "categories", "spans",          "live_at_peak_bytes",
    "avg_ms", "sweep",  "vary",   "config",     "model",      "schema_version", "predicted",
    "plan",   "oom",    "",       "traceEvents"};

/* One structural mutation of root; returns 0 when it could not apply. */
static int mutate_tree(cJSON *root) {
    node_list l = {0};
    collect(root, &l);
    if (l.n == 0) {
        free(l.items);
        return 0;
    }
    cJSON *item = l.items[below(l.n)];
    cJSON *parent = parent_of(root, item);
    int done = 1;
    switch (below(6)) {
    case 0:
    case 1: replace(parent, item, hostile_value()); break;
    case 2: cJSON_Delete(cJSON_DetachItemViaPointer(parent, item)); break;
    case 3: /* rename a member */
        if (item->string) {
            char *old = item->string;
            item->string = dup_str(key_names[below(sizeof key_names / sizeof *key_names)]);
            free(old);
        } else {
            done = 0;
        }
        break;
    case 4: { /* a copy of another node, of another shape */
        cJSON *other = l.items[below(l.n)];
        int is_ancestor = 0;
        for (cJSON *p = item; p; p = parent_of(root, p)) is_ancestor |= p == other;
        for (cJSON *p = other; p && !is_ancestor; p = parent_of(root, p)) is_ancestor |= p == item;
        if (is_ancestor) {
            done = 0;
            break;
        }
        cJSON *copy = cJSON_Duplicate(other, 1);
        free(copy->string);
        copy->string = NULL;
        replace(parent, item, copy);
        break;
    }
    default: /* an array grown: its first item repeated up to 6000 times */
        if (cJSON_IsArray(item) && item->child) {
            size_t n = 1 + below(6000);
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(item, cJSON_Duplicate(item->child, 1));
        } else {
            done = 0;
        }
    }
    free(l.items);
    return done;
}

/* ---- text mutations ------------------------------------------------------------------------- */

static char *mutate_text(const char *text) {
    size_t n = strlen(text);
    char *out = malloc(n + 64);
    memcpy(out, text, n + 1);
    size_t edits = 1 + below(4);
    for (size_t e = 0; e < edits && n > 0; e++) {
        size_t at = below(n);
        switch (below(3)) {
        case 0: {
            static const char bytes[] = "{}[]\",:0123456789.eE-+ntfa\\\x01\xff";
            out[at] = bytes[below(sizeof bytes - 1)];
            break;
        }
        case 1: out[at] = '\0', n = at; break; /* cut */
        default:                               /* insert one byte */
            memmove(out + at + 1, out + at, n - at + 1);
            static const char inserted[] = "{[\",:-0.e9";
            out[at] = inserted[below(sizeof inserted - 1)];
            n++;
        }
    }
    return out;
}

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
    write_all(path, text);
    fprintf(stderr, "FAIL at mutant %zu (kept in %s): ", iter, path);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_results FIXTURES_DIR OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *out = argv[2];
    size_t iterations = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 3000;
    rng_state = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
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
        const fixture *f = &fixtures[below(n_fixtures)];
        char *text = NULL;
        if (below(5) == 0) {
            text = mutate_text(f->text);
            textual++;
        } else {
            cJSON *root = cJSON_Parse(f->text);
            size_t rounds = 1 + below(3);
            for (size_t r = 0; r < rounds; r++) mutate_tree(root);
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
        write_all(mutant_path, text);
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
            DIR *d = opendir(render_dir);
            for (struct dirent *e; d && (e = readdir(d));) {
                if (e->d_name[0] == '.') continue;
                snprintf(path, sizeof path, "%s/%s", render_dir, e->d_name);
                unlink(path);
            }
            if (d) closedir(d);
            snprintf(path, sizeof path, "%s/%s", render_dir, f->name);
            write_all(path, text);
            for (int k = 0; k < 2; k++) {
                const fixture *g = &fixtures[below(n_fixtures)];
                if (strcmp(g->dir, f->dir) != 0 || strcmp(g->name, f->name) == 0) continue;
                snprintf(path, sizeof path, "%s/%s", render_dir, g->name);
                write_all(path, g->text);
            }
            char err[512];
            int rc = dpplot_render_dir(render_dir, render_out, &opt, err, sizeof err);
            if (rc < -1 || rc > 1) fail(out, iter, text, "dpplot_render_dir returned %s", "out of -1..1");
            renders++;
        }
        cJSON_free(text);
    }
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("fuzz_results: %zu mutants (%zu structural, %zu textual, %zu still valid results), %zu plot renders, "
           "%.1f s CPU, %d failure(s)\n",
           iterations, structural, textual, valid_mutants, renders, s, failures);
    luaL_unref(L, LUA_REGISTRYINDEX, check_fn);
    lua_close(L);
    dpprof_shutdown();
    for (size_t i = 0; i < n_fixtures; i++) free(fixtures[i].dir), free(fixtures[i].name), free(fixtures[i].text);
    return failures ? 1 : 0;
}
