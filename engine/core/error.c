/* error.c: the thread's last error, kept as a code and a bounded message. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local int last_code;
static _Thread_local char last_message[1024];

int dp_error_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    /* one line whatever the message quotes: a tensor name from a file may hold a newline or an
     * escape sequence, shown as '?' (as ls -q does) */
    for (char *c = last_message; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    last_code = code;
    return code;
}

const char *dp_error_message(void) { return last_message; }

int dp_error_code(void) { return last_code; }

void dp_error_clear(void) {
    last_code = DP_OK;
    last_message[0] = '\0';
}

const char *dp_status_name(int code) {
    switch (code) {
    case DP_OK: return "ok";
    case DP_EINVAL: return "invalid argument";
    case DP_EOOM: return "out of memory";
    case DP_EDEVICE: return "device error";
    case DP_EIO: return "i/o error";
    case DP_ENOTSUP: return "not supported";
    default: return "internal error";
    }
}
