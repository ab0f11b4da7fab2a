/* fft.h: the FFTs the PRV and PLD accountants compose with, on FFTW (libfftw3).
 *
 * Real-to-complex transforms of doubles, FFTW_ESTIMATE plans (no timing runs, so results do
 * not depend on the machine's load). Plan creation, which FFTW does not make thread-safe, is
 * serialised here. Functions return 0, or -1 when memory runs out.
 */
#ifndef DP_ACCT_FFT_H
#define DP_ACCT_FFT_H

#include <stddef.h>
#include <stdint.h>

/* The smallest n' >= n of the form 2^a 3^b 5^c 7^d (sizes FFTW transforms fastest); n >= 1. */
size_t dp_acct_fft_fast_len(size_t n);

/* out[0..len) = irfft(rfft(in, len)^k): the k-fold circular self-convolution of in[0..n_in)
 * zero-padded to len (n_in <= len). Powers as numpy's complex `**` (squaring for k < 100, cpow
 * beyond). out may be in. */
int dp_acct_fft_self_convolve(const double *in, size_t n_in, size_t len, int64_t k, double *out);

/* out[0..na+nb-1) = the linear convolution of a[0..na) and b[0..nb) (scipy's fftconvolve);
 * direct sums when one side has at most 64 points. */
int dp_acct_fft_convolve(const double *a, size_t na, const double *b, size_t nb, double *out);

#endif /* DP_ACCT_FFT_H */
