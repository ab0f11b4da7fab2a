/* version.h: dpprof's version and the build's identity. */
#ifndef DP_VERSION_H
#define DP_VERSION_H

#define DPPROF_VERSION "0.1.0"

/* The git commit the binary was built from, "-dirty" when the tree differed ("unknown" outside a
 * checkout); defined in a source generated at every build (cmake/git_commit.cmake). */
const char *dp_build_commit(void);

#endif
