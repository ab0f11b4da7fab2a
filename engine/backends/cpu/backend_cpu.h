/* backend_cpu.h: the CPU backend's table (C, OpenBLAS, OpenMP), for dp_engine_init to register. */
#ifndef DP_BACKEND_CPU_H
#define DP_BACKEND_CPU_H

#include "backend.h"

/* The CPU backend. */
extern const dp_backend dp_backend_cpu;

#endif
