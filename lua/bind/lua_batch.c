/* lua_batch.c: token batches for a model: dpprof.batch (windows of a token file or random tokens,
 * or padded batches of samples of their own lengths), dpprof.documents (a token file's documents),
 * and dpprof.free_batch. */
#include "lua_engine.h"

#include "data.h"
#include "error.h"
#include "lua_util.h"
#include "model.h"
#include "ops.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MT "dpprof.model"
#define TENSOR_MT "dpprof.tensor"

/* Raises unless bytes fit dev: its allocator's limit, else its memory (a size read from outside,
 * a checkpoint's seq_len, is checked before anything is allocated or filled). */
static void check_fits(lua_State *L, dp_device *dev, uint64_t bytes, const char *fname, const char *what) {
    uint64_t limit = dp_mem_limit(dev->mem), total = dev->info.total_memory;
    uint64_t cap = limit && (!total || limit < total) ? limit : total;
    if (!cap || bytes <= cap) return;
    char msg[512]; /* lua_pushfstring has no %.3f or %llu */
    snprintf(msg, sizeof msg, "%s: %s need %.3f GiB (%llu bytes) but the %s device has %.3f GiB (%llu bytes)", fname,
             what, (double)bytes / (double)(1ull << 30), (unsigned long long)bytes, dp_device_kind_name(dev->kind),
             (double)cap / (double)(1ull << 30), (unsigned long long)cap);
    luaL_error(L, "%s", msg);
}

/* An optional list field of n >= 1 integers (n = *n when *n > 0, else its length, at most max)
 * into a malloc'd array; NULL when absent. Raises naming the key. */
static int64_t *opt_int_list(lua_State *L, int idx, const char *fname, const char *key, int64_t *n, int64_t max) {
    lua_getfield(L, idx, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (!lua_istable(L, -1)) luaL_error(L, "%s: '%s' must be a list of integers", fname, key);
    int64_t len = (int64_t)luaL_len(L, -1);
    if (len < 1 || len > max)
        luaL_error(L, "%s: '%s' must list 1 to %d values (got %d)", fname, key, (int)max, (int)len);
    if (*n > 0 && len != *n) luaL_error(L, "%s: '%s' lists %d values, 'lengths' %d", fname, key, (int)len, (int)*n);
    int64_t *out = lua_newuserdatauv(L, (size_t)len * sizeof *out, 0); /* freed with the stack */
    for (int64_t i = 0; i < len; i++) {
        lua_rawgeti(L, -2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s: %s[%d] must be an integer", fname, key, (int)(i + 1));
        out[i] = (int64_t)v;
        lua_pop(L, 1);
    }
    lua_replace(L, -2); /* the array stays on the stack (in place of the list) until the call returns */
    *n = len;
    return out;
}

/* The given samples' ids, tokens = {{id, ...}, ...} at idx (B lists): into a malloc'd-by-Lua array
 * with each sample's offset; lengths[b] (when given: at most its ids less one, the first
 * lengths[b] + 1 ids taken) or else its ids less one. Raises naming the sample. */
static int64_t *token_lists(lua_State *L, int idx, const char *fname, int64_t B, int64_t **offsets, int64_t *lengths,
                            int given) {
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++) {
        if (lua_rawgeti(L, idx, b + 1) != LUA_TTABLE)
            luaL_error(L, "%s: tokens[%d] must be a list of token ids (got %s)", fname, (int)(b + 1),
                       luaL_typename(L, -1));
        int64_t n = (int64_t)luaL_len(L, -1);
        lua_pop(L, 1);
        if (n < 2)
            luaL_error(L,
                       "%s: tokens[%d] holds %d id(s): a sample needs at least 2 (its inputs and the next-token "
                       "targets)",
                       fname, (int)(b + 1), (int)n);
        if (given && lengths[b] > n - 1)
            luaL_error(L, "%s: lengths[%d] is %d but tokens[%d] holds %d ids (at most %d positions)", fname,
                       (int)(b + 1), (int)lengths[b], (int)(b + 1), (int)n, (int)(n - 1));
        if (!given) lengths[b] = n - 1;
        total += lengths[b] + 1;
    }
    int64_t *ids = lua_newuserdatauv(L, (size_t)total * sizeof *ids, 0); /* freed with the stack */
    *offsets = lua_newuserdatauv(L, (size_t)B * sizeof **offsets, 0);
    int64_t at = 0;
    for (int64_t b = 0; b < B; b++) {
        (*offsets)[b] = at;
        lua_rawgeti(L, idx, b + 1);
        for (int64_t j = 0; j <= lengths[b]; j++) {
            lua_rawgeti(L, -1, j + 1);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok)
                luaL_error(L, "%s: tokens[%d][%d] must be an integer token id (got %s)", fname, (int)(b + 1),
                           (int)(j + 1), luaL_typename(L, -1));
            ids[at++] = (int64_t)v;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    return ids;
}

/* The loss masks of the given samples, loss = {mask, ...} at idx beside tokens (B entries): each a
 * string of one byte a token id ("\1": the id carries loss as a target, "\0": it does not) or
 * false (every id does); into a malloc'd-by-Lua array parallel to ids. Raises naming the sample. */
static unsigned char *loss_masks(lua_State *L, int idx, const char *fname, int64_t B, const int64_t *offsets,
                                 const int64_t *lengths) {
    if (!lua_istable(L, idx) || (int64_t)luaL_len(L, idx) != B)
        luaL_error(L, "%s: 'loss' must list one mask a sample of 'tokens' (%d)", fname, (int)B);
    int64_t total = offsets[B - 1] + lengths[B - 1] + 1;
    unsigned char *loss = lua_newuserdatauv(L, (size_t)total, 0);
    for (int64_t b = 0; b < B; b++) {
        int t = lua_rawgeti(L, idx, b + 1);
        size_t n = 0;
        const char *m = t == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
        if (t != LUA_TSTRING && !(t == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
            luaL_error(L, "%s: loss[%d] must be a string of one byte a token id, or false", fname, (int)(b + 1));
        int any = 0;
        for (int64_t j = 0; j <= lengths[b]; j++) {
            if (m && (size_t)j >= n)
                luaL_error(L, "%s: loss[%d] holds %d bytes, fewer than the sample's %d ids", fname, (int)(b + 1),
                           (int)n, (int)(lengths[b] + 1));
            loss[offsets[b] + j] = (unsigned char)(m ? m[j] != 0 : 1);
            any |= j > 0 && loss[offsets[b] + j];
        }
        if (!any)
            luaL_error(L, "%s: sample %d has no target that carries loss (its mask drops every one)", fname,
                       (int)(b + 1));
        lua_pop(L, 1);
    }
    return loss;
}

/* dpprof.batch{model=, size=, seed=0, step=0, first=0, file=, file_dtype="uint16",
 * order="random"|"sequential"} (first: the global index of the batch's first sample, a rank's
 * slice of a distributed logical batch; with order = "sequential" the index of its first window
 * of the file read in order, no step), or a padded batch of samples of their own lengths:
 * dpprof.batch{model=, lengths={l1, ...}, padded=T, seed=, samples={ids...} | file=, file_dtype=,
 * starts={token offsets} | tokens={{id, ...}, ...} [, loss={mask, ...}]} (data.h; with tokens,
 * lengths may be left out: each sample's ids less one; loss: the ids that carry no loss as targets,
 * loss_masks) */
static int l_batch(lua_State *L) {
    static const char *const keys[] = {"model",      "size",    "seed",   "step",    "file",
                                       "file_dtype", "lengths", "padded", "samples", "starts",
                                       "first",      "tokens",  "order",  "loss",    NULL};
    const char *fname = "dpprof.batch";
    luaL_checktype(L, 1, LUA_TTABLE);
    dpl_check_keys(L, 1, fname, keys);
    lua_getfield(L, 1, "model");
    if (!luaL_testudata(L, -1, MODEL_MT)) luaL_error(L, "%s: 'model' must be a model (from dpprof.model)", fname);
    dp_model *m = dpl_model_or_freed(L, lua_gettop(L));
    if (!m) luaL_error(L, "%s: 'model' was freed (m:free())", fname);
    lua_pop(L, 1);
    const dp_model_config *cfg = dp_model_config_of(m);
    int64_t nl = 0;
    int64_t *lengths = opt_int_list(L, 1, fname, "lengths", &nl, cfg->batch);
    int64_t *ids = NULL, *offsets = NULL; /* tokens = {...}: the given samples */
    unsigned char *loss = NULL;           /* and their loss masks */
    int from_tokens = 0;                  /* the lengths are the token lists' */
    lua_getfield(L, 1, "tokens");
    if (!lua_isnil(L, -1)) {
        int tk = lua_gettop(L);
        if (!lua_istable(L, tk))
            luaL_error(L, "%s: 'tokens' must be a list of samples, each a list of token ids", fname);
        int64_t nt = (int64_t)luaL_len(L, tk);
        if (nt < 1 || nt > cfg->batch)
            luaL_error(L, "%s: 'tokens' must list 1 to %d samples (the model's batch; got %d)", fname, (int)cfg->batch,
                       (int)nt);
        if (lengths && nl != nt) luaL_error(L, "%s: 'tokens' lists %d samples, 'lengths' %d", fname, (int)nt, (int)nl);
        static const char *const apart[] = {"file", "samples", "starts", "order", NULL};
        for (int k = 0; apart[k]; k++) {
            lua_getfield(L, 1, apart[k]);
            if (!lua_isnil(L, -1))
                luaL_error(L, "%s: 'tokens' gives the samples' ids; '%s' gives them too (give one)", fname, apart[k]);
            lua_pop(L, 1);
        }
        int given = lengths != NULL;
        if (!given) {
            lengths = lua_newuserdatauv(L, (size_t)nt * sizeof *lengths, 0);
            nl = nt;
            from_tokens = 1;
        }
        ids = token_lists(L, tk, fname, nt, &offsets, lengths, given);
        lua_getfield(L, 1, "loss");
        if (!lua_isnil(L, -1)) loss = loss_masks(L, lua_gettop(L), fname, nt, offsets, lengths);
    } else {
        lua_pop(L, 1);
        lua_getfield(L, 1, "loss");
        if (!lua_isnil(L, -1)) luaL_error(L, "%s: 'loss' masks the samples of 'tokens' (give them)", fname);
        lua_pop(L, 1);
    }
    int64_t B = dpl_opt_int_field(L, 1, fname, "size", lengths ? nl : cfg->batch);
    if (B < 1 || B > cfg->batch)
        luaL_error(L, "%s: 'size' (%d) must be between 1 and the model's batch (%d)", fname, (int)B, (int)cfg->batch);
    if (lengths && B != nl) luaL_error(L, "%s: 'size' (%d) differs from the %d 'lengths'", fname, (int)B, (int)nl);
    uint64_t seed = (uint64_t)dpl_opt_int_field(L, 1, fname, "seed", 0);
    uint64_t step = (uint64_t)dpl_opt_int_field(L, 1, fname, "step", 0);
    int64_t first = dpl_opt_int_field(L, 1, fname, "first", 0);
    if (first < 0) luaL_error(L, "%s: 'first' (%lld) must be >= 0", fname, (long long)first);
    if (first > 0 && lengths)
        luaL_error(L, "%s: 'first' places windows of seq_len; a padded batch names its samples ('samples' or 'starts')",
                   fname);
    const char *file = dpl_opt_str_field(L, 1, fname, "file", NULL);
    const char *fdt = dpl_opt_str_field(L, 1, fname, "file_dtype", NULL);
    dp_token_dtype tdt = DP_TOKENS_U16;
    if (fdt && !file) luaL_error(L, "%s: 'file_dtype' needs 'file'", fname);
    if (fdt && dp_token_dtype_parse(fdt, &tdt) != 0)
        luaL_error(L, "%s: unknown file_dtype '%s' (valid: uint16, uint32)", fname, fdt);
    const char *order = dpl_opt_str_field(L, 1, fname, "order", "random");
    int sequential = strcmp(order, "sequential") == 0;
    if (!sequential && strcmp(order, "random") != 0)
        luaL_error(L, "%s: unknown order '%s' (valid: random, sequential)", fname, order);
    if (sequential && (!file || lengths))
        luaL_error(L, "%s: order = \"sequential\" reads windows of seq_len of 'file' in order (%s)", fname,
                   file ? "not a padded batch: leave 'lengths' out" : "give 'file'");
    if (sequential) {
        lua_getfield(L, 1, "step");
        if (!lua_isnil(L, -1))
            luaL_error(L,
                       "%s: order = \"sequential\" takes no 'step': 'first' is the index of the batch's first "
                       "window of the file",
                       fname);
        lua_pop(L, 1);
    }
    int64_t T = cfg->seq_len, *samples = NULL, *starts = NULL;
    if (lengths) {
        int64_t longest = 0;
        for (int64_t b = 0; b < B; b++) {
            if (from_tokens && lengths[b] > cfg->seq_len)
                luaL_error(L,
                           "%s: tokens[%d] holds %d ids, %d positions: more than the model's seq_len %d (give "
                           "lengths to cut it)",
                           fname, (int)(b + 1), (int)(lengths[b] + 1), (int)lengths[b], (int)cfg->seq_len);
            if (lengths[b] < 1 || lengths[b] > cfg->seq_len)
                luaL_error(L, "%s: lengths[%d] is %d, outside [1, %d] (the model's seq_len)", fname, (int)(b + 1),
                           (int)lengths[b], (int)cfg->seq_len);
            if (lengths[b] > longest) longest = lengths[b];
        }
        T = dpl_opt_int_field(L, 1, fname, "padded", longest);
        if (T < longest || T > cfg->seq_len)
            luaL_error(L, "%s: 'padded' (%d) must be from the longest sample (%d) to seq_len (%d)", fname, (int)T,
                       (int)longest, (int)cfg->seq_len);
        int64_t n = B;
        if (ids) {
            /* the given samples: their ids */
        } else if (file) {
            starts = opt_int_list(L, 1, fname, "starts", &n, cfg->batch);
            if (!starts) luaL_error(L, "%s: a padded batch from 'file' needs 'starts' (its documents' offsets)", fname);
        } else {
            samples = opt_int_list(L, 1, fname, "samples", &n, cfg->batch);
        }
    } else {
        static const char *const padded_only[] = {"padded", "samples", "starts", NULL};
        for (int k = 0; padded_only[k]; k++) {
            lua_getfield(L, 1, padded_only[k]);
            if (!lua_isnil(L, -1)) luaL_error(L, "%s: '%s' needs 'lengths' (a padded batch)", fname, padded_only[k]);
            lua_pop(L, 1);
        }
    }
    int64_t shape[2] = {B, T};
    dp_device *dev = dp_model_device(m);
    char what[96];
    snprintf(what, sizeof what, "the inputs and targets (2 x %lld x %lld i32)", (long long)B, (long long)T);
    check_fits(L, dev, 2 * (uint64_t)B * (uint64_t)T * 4u, fname, what);
    if (lengths && !file && !samples && !ids) { /* samples 0..B-1 */
        int64_t *first_ids = lua_newuserdatauv(L, (size_t)B * sizeof *first_ids, 0);
        for (int64_t b = 0; b < B; b++) first_ids[b] = b;
        samples = first_ids;
    }
    lua_createtable(L, 0, 4);
    dp_tensor *in = dpl_push_new_tensor(L, dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    lua_setfield(L, -2, "inputs");
    dp_tensor *tg = dpl_push_new_tensor(L, dev, DP_I32, 2, shape, DP_CAT_INPUTS);
    lua_setfield(L, -2, "targets");
    lua_pushinteger(L, B);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, T);
    lua_setfield(L, -2, "padded");
    int rc;
    if (ids)
        rc = dp_data_tokens_padded_masked(in, tg, cfg->vocab, ids, offsets, lengths, loss);
    else if (lengths)
        rc = file ? dp_data_file_padded(in, tg, file, tdt, cfg->vocab, starts, lengths)
                  : dp_data_synthetic_padded(in, tg, cfg->vocab, seed, samples, lengths);
    else if (sequential)
        rc = dp_data_from_file_seq(in, tg, file, tdt, cfg->vocab, first);
    else
        rc = file ? dp_data_from_file_at(in, tg, file, tdt, cfg->vocab, seed, step, first)
                  : dp_data_synthetic_at(in, tg, cfg->vocab, seed, step, first);
    if (rc != DP_OK) dpl_fail(L);
    return 1;
}

static int docs_gc(lua_State *L) {
    dp_docs_free(luaL_checkudata(L, 1, "dpprof.documents"));
    return 0;
}

/* dpprof.documents{file=, file_dtype="uint16", eos=, vocab=} -> {starts={...}, lengths={...},
 * tokens=, empty=}: the token file's documents (data.h dp_docs; starts are token offsets) */
static int l_documents(lua_State *L) {
    static const char *const keys[] = {"file", "file_dtype", "eos", "vocab", NULL};
    const char *fname = "dpprof.documents";
    luaL_checktype(L, 1, LUA_TTABLE);
    dpl_check_keys(L, 1, fname, keys);
    const char *file = dpl_opt_str_field(L, 1, fname, "file", NULL);
    if (!file) luaL_error(L, "%s: 'file' (the token file) is required", fname);
    const char *fdt = dpl_opt_str_field(L, 1, fname, "file_dtype", "uint16");
    dp_token_dtype tdt;
    if (dp_token_dtype_parse(fdt, &tdt) != 0)
        luaL_error(L, "%s: unknown file_dtype '%s' (valid: uint16, uint32)", fname, fdt);
    int64_t eos = dpl_opt_int_field(L, 1, fname, "eos", -1);
    int64_t vocab = dpl_opt_int_field(L, 1, fname, "vocab", INT32_MAX); /* default: any id */
    if (eos < 0) luaL_error(L, "%s: 'eos' (the id that ends a document) is required", fname);
    /* the index lives in a userdata whose __gc frees it: a Lua error below leaks nothing */
    dp_docs *dd = lua_newuserdatauv(L, sizeof *dd, 0);
    memset(dd, 0, sizeof *dd);
    if (luaL_newmetatable(L, "dpprof.documents")) {
        lua_pushcfunction(L, docs_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (dp_docs_open(file, tdt, eos, vocab, dd) != DP_OK) return dpl_fail(L);
    dp_docs d = *dd;
    if (d.n > INT32_MAX) luaL_error(L, "%s: '%s' holds more documents than a Lua list takes", fname, file);
    lua_createtable(L, 0, 4);
    lua_createtable(L, (int)d.n, 0);
    lua_createtable(L, (int)d.n, 0);
    for (int64_t i = 0; i < d.n; i++) {
        lua_pushinteger(L, d.start[i]);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, d.length[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -3, "lengths");
    lua_setfield(L, -2, "starts");
    lua_pushinteger(L, d.tokens);
    lua_setfield(L, -2, "tokens");
    lua_pushinteger(L, d.empty);
    lua_setfield(L, -2, "empty");
    dp_docs_free(dd);
    return 1;
}

/* dpprof.free_batch(b): frees both tensors now (idempotent) */
static int l_free_batch(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *const fields[] = {"inputs", "targets"};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, 1, fields[i]);
        if (luaL_testudata(L, -1, TENSOR_MT)) {
            lua_getfield(L, -1, "free");
            lua_pushvalue(L, -2);
            lua_call(L, 1, 0);
        }
        lua_pop(L, 1);
    }
    return 0;
}

void dpl_open_batch(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"batch", l_batch}, {"documents", l_documents}, {"free_batch", l_free_batch}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
