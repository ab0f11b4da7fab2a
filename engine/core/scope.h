/* scope.h: module paths for allocations. A stack of scope names ("layers", "3", "mlp", "fc")
 * makes the current dotted path ("layers.3.mlp.fc"); each distinct path is interned once and
 * named by a small integer id that allocations carry. Id 0 is the path "(none)". */
#ifndef DP_SCOPE_H
#define DP_SCOPE_H

#include <stdint.h>

#define DP_MODULE_NONE 0u
#define DP_SCOPE_MAX_DEPTH 32

/* Interns path and returns its id (DP_MODULE_NONE for "" or NULL); UINT32_MAX if out of host memory. */
uint32_t dp_module_intern(const char *path);
/* The path of id ("(none)" for DP_MODULE_NONE, "?" for an unknown id). */
const char *dp_module_name(uint32_t id);
/* Number of interned paths, "(none)" included; ids are 0 .. count-1. */
uint32_t dp_module_count(void);

/* Pushes a scope: the current path becomes parent.name. Returns DP_OK, or DP_EINVAL when the
 * stack is full or name is empty or contains a '.'-free invalid character. */
int dp_scope_push(const char *name);
/* Pushes a scope named by printf-style format (e.g. "layers.%d"); dots in it add several levels. */
int dp_scope_pushf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Pops the innermost scope (no-op on an empty stack). */
void dp_scope_pop(void);
/* Pops scopes until the stack has depth entries (used to unwind after an error). */
void dp_scope_unwind(int depth);
/* Current stack depth. */
int dp_scope_depth(void);
/* The id of the current path (DP_MODULE_NONE outside any scope). */
uint32_t dp_scope_current(void);

/* Frees the registry and empties the stack (at process end, so leak checkers stay quiet). */
void dp_scope_shutdown(void);

#endif
