/* backend_plan.h: the plan backend (accounting only: no memory touched, no arithmetic), for
 * dp_engine_init to register, and the one setting it has. */
#ifndef DP_BACKEND_PLAN_H
#define DP_BACKEND_PLAN_H

#include "backend.h"

/* The plan backend. */
extern const dp_backend dp_backend_plan;

/* Makes the plan device model a CUDA device's fixed memory (cuda = 1: cuBLAS's workspace and the
 * kernels' scratch, tagged exactly as the CUDA backend tags them) or none (cuda = 0). DP_EINVAL
 * when plan is not the plan device. */
int dp_plan_model_workspace(dp_device *plan, int cuda);

#endif
