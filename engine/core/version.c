/* version.c: build identity. DPPROF_GIT_COMMIT comes from the header cmake/git_commit.cmake
 * writes at every build (the commit, "-dirty" when the tree differed from it). */
#include "version.h"

#include "dpprof_git_commit.h"

const char *dp_build_commit(void) { return DPPROF_GIT_COMMIT; }
