/* lua_json.h: JSON for the engine's Lua bindings (cJSON underneath), shared by dpprof.json and
 * dpprof.isolate.
 *
 * Lua -> JSON: keys are written sorted (byte order) so files are stable; Lua integers are written
 * exactly; floats with the fewest digits (15 or 17) that read back as the same double, and with
 * ".0" when integral, so they read back as floats; NaN and infinities are refused, or written as
 * the strings "NaN", "Infinity" and "-Infinity" with DPL_JSON_NONFINITE_STRINGS. A table whose
 * keys are exactly 1..n is an array, one with string keys an object; an empty table is an object
 * unless marked as an array (dpprof.json.array). dpprof.json.null stands for JSON null. Values
 * JSON cannot hold (functions, userdata, mixed or sparse tables, cycles) raise an error naming
 * the key path ("timing.iter_ms[3]").
 *
 * JSON -> Lua: objects and arrays become tables marked as such (so they encode back the same,
 * even when empty), numbers written without fraction or exponent become integers (exact over
 * the whole 64-bit range), other numbers floats, null becomes dpprof.json.null. */
#ifndef DP_LUA_JSON_H
#define DP_LUA_JSON_H

#include <lua.h>
#include <stddef.h>

/* dpl_json_encode flags: pretty-print with two spaces (else compact); non-finite numbers as strings. */
enum { DPL_JSON_INDENT = 1, DPL_JSON_NONFINITE_STRINGS = 2 };

/* Pushes the JSON text of the value at idx (flags: DPL_JSON_*). Raises a Lua error, naming fname
 * and the key path, for a value JSON cannot hold; owns nothing when it raises. */
void dpl_json_encode(lua_State *L, int idx, int flags, const char *fname);
/* Pushes the value decoded from text[0..len). Raises "fname: invalid JSON at line L, column C"
 * on a syntax error (or trailing characters); owns nothing when it raises. */
void dpl_json_decode(lua_State *L, const char *text, size_t len, const char *fname);
struct cJSON;
/* Pushes a parsed tree as dpl_json_decode would its text (integral numbers within 2^53 become
 * integers, as the text is not at hand to tell 3 from 3.0). */
void dpl_json_push_tree(lua_State *L, const struct cJSON *item);
/* Pushes dpprof.json.null (a light userdata) */
void dpl_json_push_null(lua_State *L);

#endif
