/* Hand-written C reference of LSE (shared/docs/benchmarks.md), written from
 * the formula for this project: lse(x) = max x + log sum exp(x_i - max x),
 * gradient softmax(x). */
#include <math.h>

static double ref_lse_objective(long n, const double *x) {
    double mx = x[0];
    for (long i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (long i = 0; i < n; i++) s += exp(x[i] - mx);
    return mx + log(s);
}

static void ref_lse_gradient(long n, const double *x, double *g) {
    double mx = x[0];
    for (long i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (long i = 0; i < n; i++) {
        g[i] = exp(x[i] - mx);
        s += g[i];
    }
    double inv = 1.0 / s;
    for (long i = 0; i < n; i++) g[i] *= inv;
}
