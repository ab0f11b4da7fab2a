/* lua_tokenizer.c: Hugging Face tokenizers from Lua (issue 41.1): dpprof.tokenizer(path) loads a
 * tokenizer.json (the file, or a checkpoint folder holding one; engine/text/tokenizer.h) into a
 * userdata ("dpprof.tokenizer") with
 *   t:encode(text [, {special = true}])      -> {id, ...}   HF's encode(text, add_special_tokens=special).ids
 *   t:count(text [, {special = true}])       -> the number of those ids (no table made)
 *   t:count_many(texts [, {special =, threads = 1}])  -> each text's count, encoded on N threads
 *   t:decode(ids [, {skip_special = true}])  -> text        HF's decode(ids, skip_special_tokens=...)
 *   t:token(id)                              -> the token as the file spells it, or nil
 *   t:id(token)                              -> its id, or nil
 *   t:is_special(id)                         -> whether id is a special added token
 *   t.vocab_size, t.description, t.path      (fields)
 * Ids are 0-based, as the file's and the model's. A tokenizer is freed by __gc, __close or :free(). */
#include "lua_engine.h"

#include "error.h"
#include "lua_util.h"
#include "tokenizer.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_MT "dpprof.tokenizer"

typedef struct {
    dp_tokenizer *t;
} dpl_tokenizer;

static dp_tokenizer *check_tok(lua_State *L, int idx) {
    dpl_tokenizer *u = luaL_checkudata(L, idx, TOKENIZER_MT);
    if (!u->t) luaL_argerror(L, idx, "tokenizer was freed");
    return u->t;
}

/* dpprof.tokenizer(path) */
static int l_tokenizer(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dpl_tokenizer *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->t = NULL;
    luaL_setmetatable(L, TOKENIZER_MT);
    if (dp_tokenizer_load(path, &u->t) != DP_OK) return luaL_error(L, "dpprof.tokenizer: %s", dp_error_message());
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int opt_flag(lua_State *L, int idx, const char *fname, const char *key, int def) {
    static const char *const special_keys[] = {"special", NULL}, *const skip_keys[] = {"skip_special", NULL};
    if (lua_isnoneornil(L, idx)) return def;
    dpl_check_keys(L, idx, fname, strcmp(key, "special") == 0 ? special_keys : skip_keys);
    return dpl_opt_bool_field(L, idx, fname, key, def);
}

/* Encodes argument 2 with options at 3 into out (raising on an error, out freed). */
static void encode_arg(lua_State *L, const char *fname, dp_ids *out) {
    dp_tokenizer *t = check_tok(L, 1);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    int special = opt_flag(L, 3, fname, "special", 1);
    if (dp_tokenizer_encode(t, s, n, special, out) != DP_OK) {
        dp_ids_free(out);
        luaL_error(L, "%s: %s", fname, dp_error_message());
    }
}

static int l_encode(lua_State *L) {
    dp_ids ids = {0};
    encode_arg(L, "tokenizer:encode", &ids);
    lua_createtable(L, (int)(ids.n < 1u << 30 ? ids.n : 0), 0);
    for (size_t i = 0; i < ids.n; i++) {
        lua_pushinteger(L, ids.ids[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    dp_ids_free(&ids);
    return 1;
}

static int l_count(lua_State *L) {
    dp_ids ids = {0};
    encode_arg(L, "tokenizer:count", &ids);
    lua_pushinteger(L, (lua_Integer)ids.n);
    dp_ids_free(&ids);
    return 1;
}

/* t:count_many(texts [, {special = true | {flags...}, threads = N}]) -> {count, ...}: the ids of each
 * text, on N threads (default 1) */
static int l_count_many(lua_State *L) {
    static const char *const keys[] = {"special", "threads", NULL};
    const char *fname = "tokenizer:count_many";
    dp_tokenizer *t = check_tok(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 2);
    int threads = 1, all_special = 1, per_text = 0;
    if (!lua_isnoneornil(L, 3)) {
        dpl_check_keys(L, 3, fname, keys);
        threads = (int)dpl_opt_int_field(L, 3, fname, "threads", 1);
        if (threads < 1 || threads > 256) return luaL_error(L, "%s: threads must be 1..256", fname);
        int tp = lua_getfield(L, 3, "special");
        if (tp == LUA_TBOOLEAN)
            all_special = lua_toboolean(L, -1);
        else if (tp == LUA_TTABLE)
            per_text = 1;
        else if (tp != LUA_TNIL)
            return luaL_error(L, "%s: special must be a boolean or a list of them", fname);
        lua_pop(L, 1);
    }
    size_t m = (size_t)(n > 0 ? n : 1);
    const char **texts = lua_newuserdatauv(L, m * sizeof *texts, 0);
    size_t *lens = lua_newuserdatauv(L, m * sizeof *lens, 0);
    unsigned char *special = lua_newuserdatauv(L, m, 0);
    int64_t *counts = lua_newuserdatauv(L, m * sizeof *counts, 0);
    if (per_text) lua_getfield(L, 3, "special");
    int sp = lua_gettop(L);
    for (lua_Integer i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "%s: texts[%d] is not a string", fname, (int)(i + 1));
        texts[i] = lua_tolstring(L, -1, &lens[i]); /* the string stays in texts, which is alive */
        lua_pop(L, 1);
        if (per_text) {
            lua_geti(L, sp, i + 1);
            special[i] = (unsigned char)lua_toboolean(L, -1);
            lua_pop(L, 1);
        } else {
            special[i] = (unsigned char)all_special;
        }
    }
    if (dp_tokenizer_count_many(t, texts, lens, special, (size_t)n, threads, counts) != DP_OK)
        return luaL_error(L, "%s: %s", fname, dp_error_message());
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 0; i < n; i++) {
        lua_pushinteger(L, counts[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_decode(lua_State *L) {
    const char *fname = "tokenizer:decode";
    dp_tokenizer *t = check_tok(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int skip = opt_flag(L, 3, fname, "skip_special", 1);
    lua_Integer n = luaL_len(L, 2);
    int32_t *ids = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *ids, 0);
    for (lua_Integer i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < 0 || v > INT32_MAX) return luaL_error(L, "%s: ids[%d] is not a token id", fname, (int)(i + 1));
        ids[i] = (int32_t)v;
        lua_pop(L, 1);
    }
    char *text = NULL;
    size_t len = 0;
    if (dp_tokenizer_decode(t, ids, (size_t)n, skip, &text, &len) != DP_OK)
        return luaL_error(L, "%s: %s", fname, dp_error_message());
    lua_pushlstring(L, text, len);
    free(text);
    return 1;
}

static int l_token(lua_State *L) {
    dp_tokenizer *t = check_tok(L, 1);
    lua_Integer id = luaL_checkinteger(L, 2);
    const char *s = id >= 0 && id <= INT32_MAX ? dp_tokenizer_token(t, (int32_t)id) : NULL;
    if (s)
        lua_pushstring(L, s);
    else
        lua_pushnil(L);
    return 1;
}

static int l_id(lua_State *L) {
    dp_tokenizer *t = check_tok(L, 1);
    int32_t id = dp_tokenizer_token_id(t, luaL_checkstring(L, 2));
    if (id >= 0)
        lua_pushinteger(L, id);
    else
        lua_pushnil(L);
    return 1;
}

static int l_is_special(lua_State *L) {
    dp_tokenizer *t = check_tok(L, 1);
    lua_Integer id = luaL_checkinteger(L, 2);
    lua_pushboolean(L, id >= 0 && id <= INT32_MAX && dp_tokenizer_is_special(t, (int32_t)id));
    return 1;
}

static int l_free(lua_State *L) {
    dpl_tokenizer *u = luaL_checkudata(L, 1, TOKENIZER_MT);
    dp_tokenizer_free(u->t);
    u->t = NULL;
    return 0;
}

static int l_tostring(lua_State *L) {
    dpl_tokenizer *u = luaL_checkudata(L, 1, TOKENIZER_MT);
    if (!u->t)
        lua_pushliteral(L, "tokenizer(freed)");
    else
        lua_pushfstring(L, "tokenizer(%s)", dp_tokenizer_describe(u->t));
    return 1;
}

static int l_fields(lua_State *L) {
    dpl_tokenizer *u = luaL_checkudata(L, 1, TOKENIZER_MT);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "alive") == 0) {
        lua_pushboolean(L, u->t != NULL);
        return 1;
    }
    if (!u->t) return luaL_error(L, "tokenizer was freed (reading '%s')", k);
    if (strcmp(k, "vocab_size") == 0)
        lua_pushinteger(L, dp_tokenizer_vocab_size(u->t));
    else if (strcmp(k, "description") == 0)
        lua_pushstring(L, dp_tokenizer_describe(u->t));
    else if (strcmp(k, "path") == 0)
        lua_getiuservalue(L, 1, 1);
    else
        lua_pushnil(L);
    return 1;
}

void dpl_open_tokenizer(lua_State *L) {
    static const luaL_Reg meta[] = {{"__gc", l_free}, {"__close", l_free}, {"__tostring", l_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"encode", l_encode},         {"count", l_count}, {"count_many", l_count_many},
                                       {"decode", l_decode},         {"token", l_token}, {"id", l_id},
                                       {"is_special", l_is_special}, {"free", l_free},   {NULL, NULL}};
    dpl_new_type(L, TOKENIZER_MT, meta, methods, l_fields);
    lua_pushcfunction(L, l_tokenizer);
    lua_setfield(L, -2, "tokenizer");
}
