/* fft.c: FFTW-backed self-convolution and convolution for the accountants. */
#include "fft.h"

#include <complex.h> /* before fftw3.h: fftw_complex is then double complex */
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* Below this many points on one side, convolution is summed directly. */
#define DIRECT_MAX 64
/* numpy's complex power squares for integer exponents below this, else calls cpow. */
#define SQUARING_MAX 100

static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

/* One real transform pair of length len over an owned real and complex buffer. */
typedef struct fft_pair {
    size_t len;
    double *real;
    fftw_complex *spec;
    fftw_plan forward, backward;
} fft_pair;

static int pair_open(fft_pair *p, size_t len);
static void pair_close(fft_pair *p);
static double complex power(double complex z, int64_t k);

size_t dp_acct_fft_fast_len(size_t n) {
    for (size_t m = n < 1 ? 1 : n;; m++) {
        size_t r = m;
        static const size_t primes[] = {2, 3, 5, 7};
        for (size_t i = 0; i < sizeof primes / sizeof primes[0]; i++)
            while (r % primes[i] == 0) r /= primes[i];
        if (r == 1) return m;
    }
}

int dp_acct_fft_self_convolve(const double *in, size_t n_in, size_t len, int64_t k, double *out) {
    fft_pair p;
    if (pair_open(&p, len) != 0) return -1;
    memcpy(p.real, in, n_in * sizeof *in);
    memset(p.real + n_in, 0, (len - n_in) * sizeof *in);
    fftw_execute(p.forward);
    size_t n_spec = len / 2 + 1;
    for (size_t i = 0; i < n_spec; i++) p.spec[i] = power(p.spec[i], k);
    fftw_execute(p.backward); /* unnormalised: len times the inverse */
    for (size_t i = 0; i < len; i++) out[i] = p.real[i] / (double)len;
    pair_close(&p);
    return 0;
}

int dp_acct_fft_convolve(const double *a, size_t na, const double *b, size_t nb, double *out) {
    size_t n_out = na + nb - 1;
    if (na <= DIRECT_MAX || nb <= DIRECT_MAX) {
        const double *s = na <= nb ? a : b, *l = na <= nb ? b : a;
        size_t ns = na <= nb ? na : nb, nl = na <= nb ? nb : na;
        memset(out, 0, n_out * sizeof *out);
        for (size_t i = 0; i < ns; i++)
            for (size_t j = 0; j < nl; j++) out[i + j] += s[i] * l[j];
        return 0;
    }
    size_t len = dp_acct_fft_fast_len(n_out);
    fft_pair pa, pb;
    if (pair_open(&pa, len) != 0) return -1;
    if (pair_open(&pb, len) != 0) {
        pair_close(&pa);
        return -1;
    }
    memcpy(pa.real, a, na * sizeof *a);
    memset(pa.real + na, 0, (len - na) * sizeof *a);
    memcpy(pb.real, b, nb * sizeof *b);
    memset(pb.real + nb, 0, (len - nb) * sizeof *b);
    fftw_execute(pa.forward);
    fftw_execute(pb.forward);
    for (size_t i = 0; i < len / 2 + 1; i++) pa.spec[i] *= pb.spec[i];
    fftw_execute(pa.backward);
    for (size_t i = 0; i < n_out; i++) out[i] = pa.real[i] / (double)len;
    pair_close(&pb);
    pair_close(&pa);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static int pair_open(fft_pair *p, size_t len) {
    memset(p, 0, sizeof *p);
    p->len = len;
    p->real = fftw_alloc_real(len);
    p->spec = fftw_alloc_complex(len / 2 + 1);
    if (p->real == NULL || p->spec == NULL) {
        pair_close(p);
        return -1;
    }
    pthread_mutex_lock(&planner_lock);
    p->forward = fftw_plan_dft_r2c_1d((int)len, p->real, p->spec, FFTW_ESTIMATE);
    p->backward = fftw_plan_dft_c2r_1d((int)len, p->spec, p->real, FFTW_ESTIMATE);
    pthread_mutex_unlock(&planner_lock);
    if (p->forward == NULL || p->backward == NULL) {
        pair_close(p);
        return -1;
    }
    return 0;
}

static void pair_close(fft_pair *p) {
    pthread_mutex_lock(&planner_lock);
    if (p->forward != NULL) fftw_destroy_plan(p->forward);
    if (p->backward != NULL) fftw_destroy_plan(p->backward);
    pthread_mutex_unlock(&planner_lock);
    fftw_free(p->real);
    fftw_free(p->spec);
    memset(p, 0, sizeof *p);
}

/* z^k as numpy computes complex ** int: binary powering below SQUARING_MAX, cpow above. */
static double complex power(double complex z, int64_t k) {
    if (k == 0) return 1.0;
    if (creal(z) == 0.0 && cimag(z) == 0.0) return 0.0;
    if (k == 1) return z;
    if (k >= SQUARING_MAX) { /* cpow(z, k) = cexp(k·clog(z)), skipping the angle on underflow */
        double log_r = (double)k * log(cabs(z));
        if (log_r < -746.0) return 0.0;
        double theta = (double)k * carg(z);
        return exp(log_r) * (cos(theta) + I * sin(theta));
    }
    double complex acc = 1.0, p = z;
    for (int64_t mask = 1;; mask <<= 1) {
        if (k & mask) acc = acc * p;
        if (k < (mask << 1)) break;
        p = p * p;
    }
    return acc;
}
