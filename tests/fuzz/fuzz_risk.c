/* fuzz_risk: the inputs of `dpprof risk` that come from outside, mutated thousands of times:
 *   - the risk document (dpprof risk out=, the JSON dpplot_risk_chart draws): a seed document
 *     mutated as a tree (fuzz_mutate_tree, with the reader's field names) or as text, drawn every
 *     time on a small canvas; dpplot_risk_chart must return 0 or -1, and with -1 a one-line reason;
 *   - a lengths file (data.lengths_file: text, or a uint32 array), mutated as bytes from a text
 *     and a binary seed and read by dpprof.data.read_lengths_file: it returns lengths that are all
 *     whole numbers >= 1, or raises a refusal (exit_status 2) whose one-line message names the
 *     file; any other error fails.
 * Run under AddressSanitizer (build-asan) a crash, leak or overflow fails it. A failing mutant is
 * written to <out>/fuzz_risk_fail_<iteration>.
 *
 *   fuzz_risk OUT_DIR [ITERATIONS [SEED]]    (default 3000 of each, seed 1) */
#include "dpplot.h"
#include "dpprof.h"
#include "fuzz_mutate.h"

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const SEED_DOC =
    "{\"kind\":\"dpprof.risk\",\"budget_bytes\":85241626624,\"steps\":10000,\"sample_rate\":0.001,"
    "\"dataset_size\":50000,\"max_physical_batch_size\":8,\"whole_logical_batch\":false,\"methods\":["
    "{\"method\":\"flash_clip\",\"probability\":1,\"per_step\":0.65,\"cdf\":[{\"bytes\":17198596771,\"p\":0},"
    "{\"bytes\":60000000000,\"p\":0.2},{\"bytes\":85241626624,\"p\":0.35},{\"bytes\":200000000000,\"p\":1}]},"
    "{\"method\":\"vanilla\",\"probability\":0.001,\"per_step\":1e-07,\"cdf\":[{\"bytes\":1,\"p\":0.5},"
    "{\"bytes\":2,\"p\":1}]}]}";

static const char *const KEYS[] = {"kind",
                                   "budget_bytes",
                                   "steps",
                                   "sample_rate",
                                   "dataset_size",
                                   "max_physical_batch_size",
                                   "whole_logical_batch",
                                   "methods",
                                   "method",
                                   "probability",
                                   "per_step",
                                   "cdf",
                                   "bytes",
                                   "p"};
static const char *const EXTRA[] = {"\"dpprof.risk\"", "[]", "[{\"bytes\":1,\"p\":0.5}]", "{\"bytes\":1}", "1e308",
                                    "-1e308",          "0"};

/* Reads the lengths file at path in L: 0 when the answer is one the reader may give. */
static int check_lengths(lua_State *L, int fn, const char *path, char *why, size_t len) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, fn);
    lua_pushstring(L, path);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        snprintf(why, len, "the check raised: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    const char *verdict = lua_tostring(L, -1);
    int ok = verdict && strcmp(verdict, "ok") == 0;
    if (!ok) snprintf(why, len, "%s", verdict ? verdict : "(no verdict)");
    lua_pop(L, 1);
    return ok ? 0 : -1;
}

/* The check of one lengths file, in Lua: "ok", or what was wrong. */
static const char *const LENGTHS_CHUNK =
    "local data = dpprof.data\n"
    "return function(path)\n"
    "  local ok, r = pcall(data.read_lengths_file, path)\n"
    "  if ok then\n"
    "    if type(r) ~= 'table' or #r == 0 then return 'no lengths and no refusal' end\n"
    "    for i, v in ipairs(r) do\n"
    "      if math.type(v) ~= 'integer' or v < 1 then return 'length ' .. i .. ' is ' .. tostring(v) end\n"
    "    end\n"
    "    return 'ok'\n"
    "  end\n"
    "  if type(r) ~= 'table' or r.exit_status ~= 2 then return 'not a refusal: ' .. tostring(r) end\n"
    "  local msg = tostring(r)\n"
    "  if msg:find('\\n') then return 'a refusal of more than one line: ' .. msg end\n"
    "  if not msg:find(path, 1, true) then return 'a refusal not naming the file: ' .. msg end\n"
    "  return 'ok'\n"
    "end\n";

static void fail_write(const char *out, size_t it, const char *ext, const void *data, size_t len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/fuzz_risk_fail_%zu.%s", out, it, ext);
    (void)fuzz_write_file(path, data, len);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_risk OUT_DIR [ITERATIONS [SEED]]\n");
        return 2;
    }
    const char *out = argv[1];
    size_t iterations = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 3000;
    fuzz_seed(argc > 3 ? strtoull(argv[3], NULL, 10) : 1);
    mkdir(out, 0777);
    int failures = 0;
    char png[4200], err[512];
    snprintf(png, sizeof png, "%s/risk.png", out);
    for (size_t it = 0; it < iterations; it++) {
        char *text;
        if (fuzz_below(3) == 0) {
            text = fuzz_mutate_text(SEED_DOC);
        } else {
            cJSON *root = cJSON_Parse(SEED_DOC);
            for (size_t k = 1 + fuzz_below(3); k > 0; k--)
                (void)fuzz_mutate_tree(root, KEYS, sizeof KEYS / sizeof *KEYS, EXTRA, sizeof EXTRA / sizeof *EXTRA);
            text = cJSON_PrintUnformatted(root);
            cJSON_Delete(root);
        }
        if (!text) continue;
        err[0] = '\0';
        int rc = dpplot_risk_chart(text, png, 400, 300, 1.0, err, sizeof err);
        if (!(rc == 0 || (rc == -1 && err[0] && !strchr(err, '\n')))) {
            fprintf(stderr, "fuzz_risk: chart mutant %zu: rc %d, err '%s'\n", it, rc, err);
            fail_write(out, it, "json", text, strlen(text));
            failures++;
        }
        free(text);
    }

    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, dpprof_openlib);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_risk: %s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_setglobal(L, "dpprof");
    if (luaL_loadstring(L, LENGTHS_CHUNK) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_risk: %s\n", lua_tostring(L, -1));
        return 1;
    }
    int fn = luaL_ref(L, LUA_REGISTRYINDEX);
    static const char text_seed[] = "12\n  7\r\n\n300\n5\n";
    static const unsigned char bin_seed[] = {17, 0, 0, 0, 0x70, 0x11, 1, 0, 3, 0, 0, 0};
    char path[4200], why[1024];
    snprintf(path, sizeof path, "%s/lengths", out);
    for (size_t it = 0; it < iterations; it++) {
        char *mutant;
        size_t len;
        if (fuzz_below(2) == 0) {
            mutant = fuzz_mutate_text(text_seed);
            len = strlen(mutant);
        } else { /* bytes of the binary seed flipped, cut or grown (it holds NULs: not fuzz_mutate_text) */
            len = sizeof bin_seed + fuzz_below(9);
            mutant = malloc(len + 1);
            if (!mutant) return 1;
            for (size_t i = 0; i < len; i++) mutant[i] = i < sizeof bin_seed ? (char)bin_seed[i] : (char)fuzz_u64();
            len -= fuzz_below(5);
            for (size_t k = fuzz_below(4); k > 0 && len > 0; k--) mutant[fuzz_below(len)] = (char)fuzz_u64();
            mutant[len] = '\0';
        }
        if (fuzz_write_file(path, mutant, len) != 0 || check_lengths(L, fn, path, why, sizeof why) != 0) {
            fprintf(stderr, "fuzz_risk: lengths mutant %zu: %s\n", it, why);
            fail_write(out, it, "lengths", mutant, len);
            failures++;
        }
        free(mutant);
    }
    luaL_unref(L, LUA_REGISTRYINDEX, fn);
    lua_close(L);
    printf("fuzz_risk: %zu chart documents and %zu lengths files, %d failure(s)\n", iterations, iterations, failures);
    return failures ? 1 : 0;
}
