/* lua_json.c: dpprof.json (encode, decode, null, array, object) on cJSON; see lua_json.h.
 *
 * Calls into Lua can raise (memory errors, our own errors), so every cJSON tree
 * lives in a "box" userdata whose __gc frees it: nothing is owned outside Lua's reach when a Lua
 * function is called. Items are attached to their parent as soon as they are created, so the
 * box's root reaches all of them. Printing is ours (two-space indentation, scalar arrays on one line). */
#include "lua_engine.h"
#include "lua_json.h"

#include "lua_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_BOX_MT "dpprof.json.box"
#define JSON_ARRAY_MT "dpprof.json.array"
#define JSON_OBJECT_MT "dpprof.json.object"
#define JSON_MAX_DEPTH 256 /* deeper than any result; a cycle in a Lua table ends here */

/* ---- the box: owns a cJSON tree until Lua collects it -------------------------------------- */

typedef struct json_box {
    cJSON *tree;
} json_box;

static void box_clear(json_box *b) {
    if (b->tree) cJSON_Delete(b->tree);
    b->tree = NULL;
}

static int box_gc(lua_State *L) {
    box_clear(lua_touserdata(L, 1));
    return 0;
}

static json_box *push_box(lua_State *L) {
    json_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->tree = NULL;
    static const luaL_Reg meta[] = {{"__gc", box_gc}, {NULL, NULL}};
    dpl_new_type(L, JSON_BOX_MT, meta, NULL, NULL);
    luaL_setmetatable(L, JSON_BOX_MT);
    return b;
}

/* Gives the table on top the metatable that marks it as a JSON array or object. */
static void set_mark(lua_State *L, const char *mt, const char *type) {
    if (luaL_newmetatable(L, mt)) {
        lua_pushstring(L, type);
        lua_setfield(L, -2, "__jsontype");
    }
    lua_setmetatable(L, -2);
}

void dpl_json_push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

/* ---- Lua -> JSON ------------------------------------------------------------------------- */

typedef struct encoder {
    lua_State *L;
    const char *fname;
    json_box *box;
    char path[512]; /* key path of the value being encoded, e.g. "timing.iter_ms[3]" */
    size_t path_len;
    int depth;
    int nonfinite_strings; /* write NaN and infinities as "NaN", "Infinity", "-Infinity" */
} encoder;

static int enc_fail(encoder *e, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *path = e->path_len ? e->path : "(top)";
    size_t n = strlen(path);
    return luaL_error(e->L, "%s: value at '%s%s' %s", e->fname, n > 160 ? "..." : "", n > 160 ? path + n - 160 : path,
                      what);
}

/* Appends to the key path; returns the old length to restore. */
static size_t path_push(encoder *e, const char *fmt, ...) {
    size_t old = e->path_len;
    if (old < sizeof e->path - 1) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(e->path + old, sizeof e->path - old, fmt, ap);
        va_end(ap);
        e->path_len = n < 0 ? old : (old + (size_t)n < sizeof e->path ? old + (size_t)n : sizeof e->path - 1);
    }
    return old;
}

static void path_pop(encoder *e, size_t old) {
    e->path_len = old;
    e->path[old] = '\0';
}

/* Attaches item to parent (under key, or appended when key is NULL; the box's root when parent
 * is NULL) before anything else can raise, so the box always reaches it. */
static cJSON *attach(encoder *e, cJSON *parent, const char *key, cJSON *item) {
    if (!item) luaL_error(e->L, "%s: out of memory", e->fname);
    if (!parent) {
        e->box->tree = item;
        return item;
    }
    cJSON_bool ok = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
    if (!ok) {
        cJSON_Delete(item);
        luaL_error(e->L, "%s: out of memory", e->fname);
    }
    return item;
}

static int cmp_keys(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void encode_value(encoder *e, int idx, cJSON *parent, const char *key);

static void encode_table(encoder *e, int idx, cJSON *parent, const char *key) {
    lua_State *L = e->L;
    if (++e->depth > JSON_MAX_DEPTH) enc_fail(e, "is nested deeper than %d levels (a cycle?)", JSON_MAX_DEPTH);
    luaL_checkstack(L, 6, "dpprof.json: nesting too deep");
    int mark = 0; /* 1: marked array, 2: marked object */
    if (luaL_getmetafield(L, idx, "__jsontype") != LUA_TNIL) {
        const char *t = lua_tostring(L, -1);
        mark = t && strcmp(t, "array") == 0 ? 1 : t && strcmp(t, "object") == 0 ? 2 : 0;
        lua_pop(L, 1);
    }
    lua_Integer n_int = 0, max_int = 0;
    size_t n_str = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING) {
            n_str++;
        } else if (kt == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
            lua_Integer k = lua_tointeger(L, -1);
            n_int++;
            if (k > max_int) max_int = k;
        } else if (kt == LUA_TNUMBER) {
            enc_fail(e, "has the key %s (JSON keys are strings; arrays are indexed 1..n)",
                     lua_pushfstring(L, "%s", lua_tostring(L, -1)));
        } else {
            enc_fail(e, "has a key of type %s (JSON keys are strings)", luaL_typename(L, -1));
        }
    }
    if (n_int && n_str) enc_fail(e, "mixes array items (1..n) and string keys");
    int as_array = n_int > 0 || (n_str == 0 && mark == 1);
    if (as_array && mark == 2) enc_fail(e, "is marked as a JSON object but has array items");
    if (!as_array && n_str && mark == 1) enc_fail(e, "is marked as a JSON array but has string keys");
    if (n_int && max_int != n_int)
        enc_fail(e, "is a sparse array (%lld items, largest index %lld)", (long long)n_int, (long long)max_int);

    if (as_array) {
        cJSON *arr = attach(e, parent, key, cJSON_CreateArray());
        for (lua_Integer i = 1; i <= n_int; i++) {
            size_t old = path_push(e, "[%lld]", (long long)i);
            lua_rawgeti(L, idx, i);
            encode_value(e, lua_gettop(L), arr, NULL);
            lua_pop(L, 1);
            path_pop(e, old);
        }
    } else {
        cJSON *obj = attach(e, parent, key, cJSON_CreateObject());
        /* the keys are strings of the table itself, so they stay alive while it is on the stack */
        const char **keys = lua_newuserdatauv(L, (n_str ? n_str : 1) * sizeof *keys, 0);
        size_t k = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            lua_pop(L, 1);
            if (k < n_str) keys[k++] = lua_tostring(L, -1);
        }
        if (k != n_str) enc_fail(e, "changed while it was being encoded");
        qsort(keys, n_str, sizeof *keys, cmp_keys);
        for (size_t i = 0; i < n_str; i++) {
            size_t old = path_push(e, e->path_len ? ".%s" : "%s", keys[i]);
            lua_getfield(L, idx, keys[i]);
            encode_value(e, lua_gettop(L), obj, keys[i]);
            lua_pop(L, 1);
            path_pop(e, old);
        }
        lua_pop(L, 1); /* keys */
    }
    e->depth--;
}

static void encode_value(encoder *e, int idx, cJSON *parent, const char *key) {
    lua_State *L = e->L;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: attach(e, parent, key, cJSON_CreateNull()); break;
    case LUA_TBOOLEAN: attach(e, parent, key, cJSON_CreateBool(lua_toboolean(L, idx))); break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, idx));
            attach(e, parent, key, cJSON_CreateRaw(buf)); /* exact, even past 2^53 */
        } else {
            double v = lua_tonumber(L, idx);
            if (!isfinite(v) && e->nonfinite_strings) {
                attach(e, parent, key, cJSON_CreateString(isnan(v) ? "NaN" : v < 0 ? "-Infinity" : "Infinity"));
                break;
            }
            if (isnan(v)) enc_fail(e, "is NaN (JSON has no NaN)");
            if (isinf(v)) enc_fail(e, "is %sinfinite (JSON has no infinity)", v < 0 ? "-" : "+");
            attach(e, parent, key, cJSON_CreateNumber(v));
        }
        break;
    case LUA_TSTRING: attach(e, parent, key, cJSON_CreateString(lua_tostring(L, idx))); break;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) {
            attach(e, parent, key, cJSON_CreateNull());
            break;
        }
        enc_fail(e, "is a light userdata (JSON cannot hold it)");
        break;
    case LUA_TTABLE: encode_table(e, idx, parent, key); break;
    default: enc_fail(e, "is a %s (JSON cannot hold it)", luaL_typename(L, idx));
    }
}

/* ---- printing the tree ------------------------------------------------------------------ */
/* The tree is printed into a luaL_Buffer, which leaves the stack alone while it is in use (the
 * tree was built first, so printing calls nothing else in Lua). */

static void print_string(luaL_Buffer *b, const char *s) {
    luaL_addchar(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': luaL_addstring(b, "\\\""); break;
        case '\\': luaL_addstring(b, "\\\\"); break;
        case '\n': luaL_addstring(b, "\\n"); break;
        case '\r': luaL_addstring(b, "\\r"); break;
        case '\t': luaL_addstring(b, "\\t"); break;
        case '\b': luaL_addstring(b, "\\b"); break;
        case '\f': luaL_addstring(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                char u[8];
                snprintf(u, sizeof u, "\\u%04x", *p);
                luaL_addstring(b, u);
            } else {
                luaL_addchar(b, (char)*p); /* UTF-8 passes through */
            }
        }
    }
    luaL_addchar(b, '"');
}

/* The shortest of %.15g and %.17g that reads back as the same double, with ".0" added to an
 * integral value so that it reads back as a float, not an integer. */
static void print_double(luaL_Buffer *b, double v) {
    char s[40];
    snprintf(s, sizeof s, "%.15g", v);
    if (strtod(s, NULL) != v) snprintf(s, sizeof s, "%.17g", v);
    if (!strpbrk(s, ".e")) strcat(s, ".0");
    luaL_addstring(b, s);
}

static int is_container(const cJSON *it) { return cJSON_IsArray(it) || cJSON_IsObject(it); }

static void print_indent(luaL_Buffer *b, int depth) {
    luaL_addchar(b, '\n');
    for (int i = 0; i < depth; i++) luaL_addstring(b, "  ");
}

/* indent < 0: compact. Otherwise the nesting depth: containers holding containers put one item
 * per line; containers of scalars (arrays, and objects of at most 6 keys) stay on one line. */
static void print_item(luaL_Buffer *b, const cJSON *it, int indent) {
    if (cJSON_IsRaw(it)) {
        luaL_addstring(b, it->valuestring);
    } else if (cJSON_IsNumber(it)) {
        print_double(b, it->valuedouble);
    } else if (cJSON_IsString(it)) {
        print_string(b, it->valuestring);
    } else if (cJSON_IsTrue(it)) {
        luaL_addstring(b, "true");
    } else if (cJSON_IsFalse(it)) {
        luaL_addstring(b, "false");
    } else if (is_container(it)) {
        int obj = cJSON_IsObject(it), n = 0, nested = 0;
        for (const cJSON *c = it->child; c; c = c->next, n++) nested |= is_container(c);
        int multiline = indent >= 0 && n > 0 && (nested || (obj && n > 6));
        luaL_addchar(b, obj ? '{' : '[');
        for (const cJSON *c = it->child; c; c = c->next) {
            if (multiline) print_indent(b, indent + 1);
            if (obj) {
                print_string(b, c->string ? c->string : "");
                luaL_addstring(b, indent >= 0 ? ": " : ":");
            }
            print_item(b, c, indent >= 0 ? indent + 1 : -1);
            if (c->next) luaL_addstring(b, multiline || indent < 0 ? "," : ", ");
        }
        if (multiline) print_indent(b, indent);
        luaL_addchar(b, obj ? '}' : ']');
    } else {
        luaL_addstring(b, "null");
    }
}

void dpl_json_encode(lua_State *L, int idx, int flags, const char *fname) {
    idx = lua_absindex(L, idx);
    int indent = flags & DPL_JSON_INDENT;
    encoder e = {.L = L,
                 .fname = fname,
                 .path_len = 0,
                 .depth = 0,
                 .nonfinite_strings = (flags & DPL_JSON_NONFINITE_STRINGS) != 0};
    e.path[0] = '\0';
    e.box = push_box(L);
    encode_value(&e, idx, NULL, NULL);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    print_item(&b, e.box->tree, indent ? 0 : -1);
    if (indent) luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    box_clear(e.box);
    lua_remove(L, -2); /* the box */
}

/* ---- JSON -> Lua ------------------------------------------------------------------------- */

/* cJSON keeps numbers as doubles only; to read integers past 2^53 exactly and to tell 3 from 3.0,
 * the decoder walks the text beside the tree: numbers appear in the text in the order a
 * depth-first walk of the tree meets them. */
typedef struct decoder {
    const char *text;
    size_t len, pos;
} decoder;

/* Finds the next number token at or after d->pos (skipping strings); sets *start and *n. */
static int next_number(decoder *d, const char **start, size_t *n) {
    while (d->pos < d->len) {
        char ch = d->text[d->pos];
        if (ch == '"') {
            for (d->pos++; d->pos < d->len && d->text[d->pos] != '"'; d->pos++)
                if (d->text[d->pos] == '\\') d->pos++;
            d->pos++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t b = d->pos;
            while (d->pos < d->len && strchr("+-0123456789.eE", d->text[d->pos])) d->pos++;
            *start = d->text + b;
            *n = d->pos - b;
            return 1;
        } else {
            d->pos++;
        }
    }
    return 0;
}

static void push_number(lua_State *L, decoder *d, double v) {
    const char *tok;
    size_t n;
    if (!d->text) { /* a tree without its text: integral values within 2^53 are integers */
        if (v >= -9007199254740992.0 && v <= 9007199254740992.0 && v == (double)(long long)v)
            lua_pushinteger(L, (lua_Integer)v);
        else
            lua_pushnumber(L, v);
        return;
    }
    if (next_number(d, &tok, &n) && n < 32 && !memchr(tok, '.', n) && !memchr(tok, 'e', n) && !memchr(tok, 'E', n)) {
        char buf[32];
        memcpy(buf, tok, n);
        buf[n] = '\0';
        char *end;
        errno = 0;
        long long i = strtoll(buf, &end, 10);
        if (errno == 0 && *end == '\0') {
            lua_pushinteger(L, (lua_Integer)i);
            return;
        }
    }
    lua_pushnumber(L, v);
}

static void push_decoded(lua_State *L, decoder *d, const cJSON *item) {
    luaL_checkstack(L, 4, "dpprof.json.decode: nesting too deep");
    if (cJSON_IsNull(item)) {
        dpl_json_push_null(L);
    } else if (cJSON_IsBool(item)) {
        lua_pushboolean(L, cJSON_IsTrue(item));
    } else if (cJSON_IsNumber(item)) {
        push_number(L, d, item->valuedouble);
    } else if (cJSON_IsString(item)) {
        lua_pushstring(L, item->valuestring);
    } else if (cJSON_IsArray(item)) {
        int n = 0;
        for (const cJSON *c = item->child; c; c = c->next) n++;
        lua_createtable(L, n, 0);
        set_mark(L, JSON_ARRAY_MT, "array");
        int i = 0;
        for (const cJSON *c = item->child; c; c = c->next) {
            push_decoded(L, d, c);
            lua_rawseti(L, -2, ++i);
        }
    } else if (cJSON_IsObject(item)) {
        int n = 0;
        for (const cJSON *c = item->child; c; c = c->next) n++;
        lua_createtable(L, 0, n);
        set_mark(L, JSON_OBJECT_MT, "object");
        for (const cJSON *c = item->child; c; c = c->next) {
            lua_pushstring(L, c->string ? c->string : "");
            push_decoded(L, d, c);
            lua_rawset(L, -3);
        }
    } else {
        dpl_json_push_null(L); /* cJSON_Raw and invalid cannot come out of the parser */
    }
}

static void line_col(const char *text, size_t pos, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

void dpl_json_decode(lua_State *L, const char *text, size_t len, const char *fname) {
    int line, col;
    /* JSON allows no control character but tab, newline and return between tokens, and none in a
     * string (RFC 8259: they are escaped there; tab, newline and return are let through); cJSON
     * takes any of them as white space and keeps them in strings, so a NUL in place of a space
     * passed, and one in a string cut it short. An escaped NUL (\u0000) would cut the string
     * short too (Lua gets cJSON's C string): refused as well. */
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            char hex[8];
            snprintf(hex, sizeof hex, "0x%02x", ch);
            line_col(text, i, &line, &col);
            luaL_error(L,
                       "%s: invalid JSON at line %d, column %d (control character %s: JSON allows tab, "
                       "newline and return between tokens, and none unescaped in a string)",
                       fname, line, col, hex);
        }
        if (ch == '"') {
            in_string = !in_string;
        } else if (in_string && ch == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && len - i >= 6 && memcmp(text + i + 2, "0000", 4) == 0) {
                line_col(text, i, &line, &col);
                luaL_error(L,
                           "%s: unsupported JSON at line %d, column %d (\\u0000 in a string: a NUL would cut "
                           "the string short)",
                           fname, line, col);
            }
            i++; /* the escaped character: an escaped quote does not end the string */
        }
    }
    json_box *b = push_box(L);
    const char *end = NULL;
    b->tree = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t pos = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    if (!b->tree) {
        line_col(text, pos, &line, &col);
        luaL_error(L, "%s: invalid JSON at line %d, column %d%s", fname, line, col,
                   len == 0     ? " (empty text)"
                   : pos >= len ? " (text ends too early)"
                                : "");
    }
    while (pos < len && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')) pos++;
    if (pos < len) {
        line_col(text, pos, &line, &col);
        luaL_error(L, "%s: invalid JSON at line %d, column %d (characters after the value)", fname, line, col);
    }
    decoder d = {text, len, 0};
    push_decoded(L, &d, b->tree);
    box_clear(b);
    lua_remove(L, -2); /* the box */
}

void dpl_json_push_tree(lua_State *L, const cJSON *item) {
    decoder d = {NULL, 0, 0};
    push_decoded(L, &d, item);
}

/* ---- dpprof.json ------------------------------------------------------------------------- */

/* json.encode(value [, {indent=false, nonfinite="error"|"string"}]) -> text */
static int l_encode(lua_State *L) {
    static const char *const keys[] = {"indent", "nonfinite", NULL};
    const char *fname = "dpprof.json.encode";
    luaL_checkany(L, 1);
    int flags = 0;
    if (!lua_isnoneornil(L, 2)) {
        dpl_check_keys(L, 2, fname, keys);
        if (dpl_opt_bool_field(L, 2, fname, "indent", 0)) flags |= DPL_JSON_INDENT;
        const char *nf = dpl_opt_str_field(L, 2, fname, "nonfinite", "error");
        if (strcmp(nf, "string") == 0)
            flags |= DPL_JSON_NONFINITE_STRINGS;
        else if (strcmp(nf, "error") != 0)
            luaL_error(L, "%s: 'nonfinite' must be \"error\" or \"string\" (got '%s')", fname, nf);
    }
    lua_settop(L, 1);
    dpl_json_encode(L, 1, flags, fname);
    return 1;
}

/* json.decode(text [, name]) -> value; name (e.g. a file name) prefixes error messages */
static int l_decode(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "dpprof.json.decode");
    dpl_json_decode(L, text, len, name);
    return 1;
}

/* Marks t (or a new table) as a JSON array / object; returns it. */
static int mark_table(lua_State *L, const char *mt, const char *type) {
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    } else {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_settop(L, 1);
    }
    set_mark(L, mt, type);
    return 1;
}

static int l_array(lua_State *L) { return mark_table(L, JSON_ARRAY_MT, "array"); }
static int l_object(lua_State *L) { return mark_table(L, JSON_OBJECT_MT, "object"); }

/* json.is_null(v) -> true when v is json.null */
static int l_is_null(lua_State *L) {
    lua_pushboolean(L, lua_type(L, 1) == LUA_TLIGHTUSERDATA && lua_touserdata(L, 1) == NULL);
    return 1;
}

void dpl_open_json(lua_State *L) {
    static const luaL_Reg fns[] = {{"encode", l_encode}, {"decode", l_decode},   {"array", l_array},
                                   {"object", l_object}, {"is_null", l_is_null}, {NULL, NULL}};
    luaL_newlib(L, fns);
    dpl_json_push_null(L);
    lua_setfield(L, -2, "null");
    lua_setfield(L, -2, "json");
}
