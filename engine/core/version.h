/* version.h: dpprof's version and the build's identity. */
#ifndef DP_VERSION_H
#define DP_VERSION_H

#define DPPROF_VERSION "0.1.0"

/* The git commit the binary was built from ("unknown" outside a checkout). */
const char *dp_build_commit(void);

#endif
