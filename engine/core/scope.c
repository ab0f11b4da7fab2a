/* scope.c: interned module paths (open-addressing hash table) and the scope stack. */
#include "scope.h"

#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char **paths; /* id -> path; paths[0] = "(none)" */
static uint32_t n_paths, cap_paths;
static uint32_t *slots; /* hash slot -> id + 1 (0 = empty) */
static uint32_t n_slots;

static uint32_t stack[DP_SCOPE_MAX_DEPTH + 1]; /* stack[d] = path id at depth d; stack[0] = none */
static int depth;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int grow_slots(void) {
    uint32_t n = n_slots ? n_slots * 2 : 256;
    uint32_t *s = calloc(n, sizeof *s);
    if (!s) return -1;
    for (uint32_t id = 1; id < n_paths; id++) {
        uint32_t i = (uint32_t)(hash_str(paths[id]) & (n - 1));
        while (s[i]) i = (i + 1) & (n - 1);
        s[i] = id + 1;
    }
    free(slots);
    slots = s;
    n_slots = n;
    return 0;
}

static int ensure_init(void) {
    if (paths) return 0;
    cap_paths = 64;
    paths = malloc(cap_paths * sizeof *paths);
    if (!paths) return -1;
    paths[0] = strdup("(none)");
    if (!paths[0]) return -1;
    n_paths = 1;
    return grow_slots();
}

uint32_t dp_module_intern(const char *path) {
    if (!path || !*path) return DP_MODULE_NONE;
    if (ensure_init() != 0) return UINT32_MAX;
    uint64_t h = hash_str(path);
    uint32_t i = (uint32_t)(h & (n_slots - 1));
    for (; slots[i]; i = (i + 1) & (n_slots - 1))
        if (strcmp(paths[slots[i] - 1], path) == 0) return slots[i] - 1;
    if (2 * (n_paths + 1) > n_slots) { /* keep the load factor under 1/2 */
        if (grow_slots() != 0) return UINT32_MAX;
        return dp_module_intern(path);
    }
    if (n_paths == cap_paths) {
        char **p = realloc(paths, 2 * cap_paths * sizeof *paths);
        if (!p) return UINT32_MAX;
        paths = p;
        cap_paths *= 2;
    }
    char *copy = strdup(path);
    if (!copy) return UINT32_MAX;
    paths[n_paths] = copy;
    slots[i] = n_paths + 1;
    return n_paths++;
}

const char *dp_module_name(uint32_t id) {
    if (id == DP_MODULE_NONE) return "(none)";
    return id < n_paths ? paths[id] : "?";
}

uint32_t dp_module_count(void) { return n_paths ? n_paths : 1; }

int dp_scope_push(const char *name) {
    if (!name || !*name) return dp_error_set(DP_EINVAL, "scope name must be a non-empty string");
    if (depth >= DP_SCOPE_MAX_DEPTH)
        return dp_error_set(DP_EINVAL, "scope stack is full (%d levels): a scope was not popped?", DP_SCOPE_MAX_DEPTH);
    char buf[512];
    const char *parent = depth ? dp_module_name(stack[depth]) : NULL;
    int n = parent ? snprintf(buf, sizeof buf, "%s.%s", parent, name) : snprintf(buf, sizeof buf, "%s", name);
    if (n < 0 || (size_t)n >= sizeof buf)
        return dp_error_set(DP_EINVAL, "module path too long (%d bytes, at most %zu)", n, sizeof buf - 1);
    uint32_t id = dp_module_intern(buf);
    if (id == UINT32_MAX) return dp_error_set(DP_EOOM, "out of host memory interning module path");
    stack[++depth] = id;
    return DP_OK;
}

int dp_scope_pushf(const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) return dp_error_set(DP_EINVAL, "scope name too long");
    return dp_scope_push(buf);
}

void dp_scope_pop(void) {
    if (depth > 0) depth--;
}

void dp_scope_unwind(int d) {
    if (d < 0) d = 0;
    if (d < depth) depth = d;
}

int dp_scope_depth(void) { return depth; }

uint32_t dp_scope_current(void) { return depth ? stack[depth] : DP_MODULE_NONE; }

void dp_scope_shutdown(void) {
    for (uint32_t i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
    free(slots);
    paths = NULL;
    slots = NULL;
    n_paths = cap_paths = n_slots = 0;
    depth = 0;
}
