/* accountant_impl.h: what the accountant files (accountant*.c) share and nobody else needs. */
#ifndef DP_ACCOUNTANT_IMPL_H
#define DP_ACCOUNTANT_IMPL_H

#include "accountant.h"

#include <stddef.h>

/* Checks what every accountant is given: the history (dp_acct_check_history) and delta in (0, 1).
 */
int dp_acct_check_args(const dp_acct_segment *history, size_t n, double delta, char *err, size_t errlen);

#endif /* DP_ACCOUNTANT_IMPL_H */
