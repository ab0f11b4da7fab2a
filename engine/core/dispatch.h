/* dispatch.h: calling a backend entry. On a plan device every compute entry is skipped (the
 * caller has already recorded the allocation and the ledger); on a real device a missing entry
 * is DP_ENOTSUP naming the op and the device. */
#ifndef DP_DISPATCH_H
#define DP_DISPATCH_H

#include "device.h"
#include "error.h"

#define DP_DISPATCH(dev, entry, ...)                                                                                   \
    ((dev)->kind == DP_DEV_PLAN ? DP_OK                                                                                \
     : (dev)->ops->entry        ? (dev)->ops->entry((dev), __VA_ARGS__)                                                \
                         : dp_error_set(DP_ENOTSUP, "op '%s' is not implemented on %s", #entry, (dev)->ops->name))

/* The same for an entry of the layer table (layer_ops.h). */
#define DP_DISPATCH_LAYER(dev, entry, ...)                                                                             \
    ((dev)->kind == DP_DEV_PLAN ? DP_OK                                                                                \
     : ((dev)->ops->layers && (dev)->ops->layers->entry)                                                               \
         ? (dev)->ops->layers->entry((dev), __VA_ARGS__)                                                               \
         : dp_error_set(DP_ENOTSUP, "layer op '%s' is not implemented on %s", #entry, (dev)->ops->name))

/* The same for an entry of the DP table (dpsgd_ops.h). */
#define DPSGD_DISPATCH(dev, entry, ...)                                                                                \
    ((dev)->kind == DP_DEV_PLAN ? DP_OK                                                                                \
     : ((dev)->ops->dpsgd && (dev)->ops->dpsgd->entry)                                                                 \
         ? (dev)->ops->dpsgd->entry((dev), __VA_ARGS__)                                                                \
         : dp_error_set(DP_ENOTSUP, "dp op '%s' is not implemented on %s", #entry, (dev)->ops->name))

#endif
