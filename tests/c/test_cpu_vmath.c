/* test_cpu_vmath.c: the CPU backend's vectorisable exp, tanh and logistic (cpu_vmath.h) against
 * libm, over every 127th f32 bit pattern in range plus the edges: the accuracy the header states
 * (ulp distance), the limits (0 below the normal range, +inf above it, +-1 for large |x|) and NaN
 * passed through. */
#include "check.h"
#include "cpu_vmath.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ulps between a and b (both finite, same sign or zero), in the integer order of f32 */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

typedef float (*fn)(float);
static float ref_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

/* worst ulp error of f against ref over bit patterns in [lo, hi] (every step-th) */
static int64_t sweep(const char *name, fn f, fn ref, float lo, float hi, int64_t limit) {
    int64_t worst = 0;
    float worst_x = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t u = 0; u < 0x7f800000u; u += 127) {
            uint32_t bits = u | (sign ? 0x80000000u : 0);
            float x;
            memcpy(&x, &bits, 4);
            if (x < lo || x > hi) continue;
            int64_t e = ulps(f(x), ref(x));
            if (e > worst) worst = e, worst_x = x;
        }
    printf("  %-8s [%g, %g]: worst %lld ulp (at %.9g), limit %lld\n", name, lo, hi, (long long)worst, worst_x,
           (long long)limit);
    CHECK(worst <= limit);
    return worst;
}

int main(void) {
    printf("against libm\n");
    sweep("exp", dp_vexp, expf, -87.3f, 88.7f, 2);
    sweep("tanh", dp_vtanh, tanhf, -20.0f, 20.0f, 3);
    sweep("sigmoid", dp_vsigmoid, ref_sigmoid, -87.0f, 87.0f, 3);

    printf("limits\n");
    CHECK(dp_vexp(-87.35f) == 0.0f && dp_vexp(-1000.0f) == 0.0f && dp_vexp(-INFINITY) == 0.0f);
    CHECK(fabsf(dp_vexp(-87.338f) - expf(-87.338f)) < 0x1p-126f); /* the subnormal edge, absolutely */
    CHECK(isinf(dp_vexp(88.73f)) && isinf(dp_vexp(INFINITY)));
    CHECK(dp_vexp(0.0f) == 1.0f && dp_vexp(-0.0f) == 1.0f);
    CHECK(isnan(dp_vexp(NAN)));
    CHECK(dp_vtanh(30.0f) == 1.0f && dp_vtanh(-30.0f) == -1.0f && dp_vtanh(INFINITY) == 1.0f);
    CHECK(dp_vtanh(0.0f) == 0.0f && dp_vtanh(1e-30f) == 1e-30f);
    CHECK(dp_vsigmoid(-200.0f) == 0.0f && dp_vsigmoid(200.0f) == 1.0f && dp_vsigmoid(0.0f) == 0.5f);

    return check_report("test_cpu_vmath");
}
