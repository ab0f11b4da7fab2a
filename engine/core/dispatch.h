/* dispatch.h: calling a backend entry. On a plan device every compute entry is skipped (the
 * caller has already recorded the allocation and the ledger); on a real device a missing entry
 * is DP_ENOTSUP naming the op and the device. While profiling is on (profile.h) every call,
 * skipped ones on a plan device included, is timed and charged to the ledger entry added last. */
#ifndef DP_DISPATCH_H
#define DP_DISPATCH_H

#include "device.h"
#include "error.h"
#include "profile.h"

/* call, timed when profiling is on: begin is sequenced before the call by the comma operator. */
#define DP_PROFILED(dev, call) (dp_profile_active ? dp_profile_end((dev), (dp_profile_begin(dev), (call))) : (call))

#define DP_DISPATCH(dev, entry, ...)                                                                                   \
    ((dev)->kind == DP_DEV_PLAN ? DP_PROFILED(dev, DP_OK)                                                              \
     : (dev)->ops->entry        ? DP_PROFILED(dev, (dev)->ops->entry((dev), __VA_ARGS__))                              \
                         : dp_error_set(DP_ENOTSUP, "op '%s' is not implemented on %s", #entry, (dev)->ops->name))

/* The same for an entry of the layer table (layer_ops.h). */
#define DP_DISPATCH_LAYER(dev, entry, ...)                                                                             \
    ((dev)->kind == DP_DEV_PLAN ? DP_PROFILED(dev, DP_OK)                                                              \
     : ((dev)->ops->layers && (dev)->ops->layers->entry)                                                               \
         ? DP_PROFILED(dev, (dev)->ops->layers->entry((dev), __VA_ARGS__))                                             \
         : dp_error_set(DP_ENOTSUP, "layer op '%s' is not implemented on %s", #entry, (dev)->ops->name))

/* The same for an entry of the DP table (dpsgd_ops.h). */
#define DPSGD_DISPATCH(dev, entry, ...)                                                                                \
    ((dev)->kind == DP_DEV_PLAN ? DP_PROFILED(dev, DP_OK)                                                              \
     : ((dev)->ops->dpsgd && (dev)->ops->dpsgd->entry)                                                                 \
         ? DP_PROFILED(dev, (dev)->ops->dpsgd->entry((dev), __VA_ARGS__))                                              \
         : dp_error_set(DP_ENOTSUP, "dp op '%s' is not implemented on %s", #entry, (dev)->ops->name))

#endif
