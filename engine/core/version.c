/* version.c: build identity; DPPROF_GIT_COMMIT is set by CMake at configure time. */
#include "version.h"

#ifndef DPPROF_GIT_COMMIT
#define DPPROF_GIT_COMMIT "unknown"
#endif

const char *dp_build_commit(void) { return DPPROF_GIT_COMMIT; }
