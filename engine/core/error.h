/* error.h: status codes and the thread's last error message.
 * Engine functions return an int status (DP_OK or a DP_E* code) and record a one-line message;
 * nothing in the engine aborts on bad input or out-of-memory. */
#ifndef DP_ERROR_H
#define DP_ERROR_H

#include <stddef.h>

enum {
    DP_OK = 0,
    DP_EINVAL = 1,   /* bad argument or configuration */
    DP_EOOM = 2,     /* an allocation did not fit (device memory or a configured limit) */
    DP_EDEVICE = 3,  /* a device or library call failed */
    DP_EIO = 4,      /* a file could not be read or written */
    DP_ENOTSUP = 5,  /* the operation is not supported on this device or dtype */
    DP_EINTERNAL = 6 /* a broken invariant: a bug in dpprof */
};

/* Records code and a printf-style message as the thread's last error (one line: control
 * characters, such as a newline in a name read from a file, become '?'); returns code. */
int dp_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The thread's last error message ("" when none). Valid until the next dp_error_set. */
const char *dp_error_message(void);
/* The thread's last error code (DP_OK when none). */
int dp_error_code(void);
/* Clears the thread's last error. */
void dp_error_clear(void);
/* A short name for a status code ("ok", "invalid argument", "out of memory", ...). */
const char *dp_status_name(int code);

/* Propagates a non-zero status to the caller. */
#define DP_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        int dp_try_status_ = (expr);                                                                                   \
        if (dp_try_status_ != DP_OK) return dp_try_status_;                                                            \
    } while (0)

#endif
