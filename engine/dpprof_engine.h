/* dpprof_engine.h: the engine as a C library (no Lua). */
#ifndef DPPROF_ENGINE_H
#define DPPROF_ENGINE_H

#include "device.h"

/* Registers the backends this build has (cpu, plan and, when compiled, cuda) with the device
 * registry. Call once before any device is used; calling again is harmless. DP_OK or the error. */
int dp_engine_init(void);

#endif
