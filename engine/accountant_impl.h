/* accountant_impl.h: what the accountant files (accountant*.c) share and nobody else needs. */
#ifndef DP_ACCOUNTANT_IMPL_H
#define DP_ACCOUNTANT_IMPL_H

#include <stddef.h>

/* Writes the formatted message into err (if err != NULL and errlen > 0); returns status. */
int dp_acct_fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* DP_ACCOUNTANT_IMPL_H */
