/* fuzz_mutate.h: what the fuzz targets share: a seeded generator (splitmix64, so a failure is
 * reproduced by its seed and iteration), hostile JSON values, structural mutations of a parsed
 * document (a node replaced, removed, renamed, swapped for a copy of another, an array grown) and
 * damage to text (bytes flipped, inserted, cut), and whole-file reads and writes. */
#ifndef DP_FUZZ_MUTATE_H
#define DP_FUZZ_MUTATE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Restarts the generator at seed. */
void fuzz_seed(uint64_t seed);
/* The next 64 random bits. */
uint64_t fuzz_u64(void);
/* A random index in [0, n) (0 when n is 0). */
size_t fuzz_below(size_t n);
/* A malloc'd copy of s. */
char *fuzz_strdup(const char *s);

/* A hostile value: numbers at and past every edge, strings, containers, deep nesting, or one of
 * the n_extra raw JSON texts in extra (values meaningful to the reader under test). */
cJSON *fuzz_hostile_value(const char *const *extra, size_t n_extra);
/* One structural mutation of root: a node replaced by a hostile value (with extra as above),
 * removed, renamed to one of the n_keys names in keys, replaced by a copy of another node, or an
 * array grown up to 6000 items. Returns 0 when the chosen mutation could not apply. */
int fuzz_mutate_tree(cJSON *root, const char *const *keys, size_t n_keys, const char *const *extra, size_t n_extra);
/* A malloc'd copy of the NUL-terminated text with 1 to 4 bytes flipped, inserted or cut. */
char *fuzz_mutate_text(const char *text);

/* The whole file at path, malloc'd with a NUL after its *len bytes (len may be NULL); NULL when it
 * cannot be read. */
char *fuzz_read_file(const char *path, size_t *len);
/* Writes len bytes to path (replacing it); 0 or -1. */
int fuzz_write_file(const char *path, const void *data, size_t len);

#endif
