/* Hand-written C references of the micro-benchmarks of seed 000
 * (ksc-examples/adbench/micro.ks says what each computes) and of seed 001's
 * vectorSum (vectorsum.ks), written from the formulas for this project. */
#include <math.h>
#include <string.h>

static double ref_dot(long n, const double *u, const double *v) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += u[i] * v[i];
    return s;
}
/* gradient of dot: (v, u) */
static void ref_dot_gradient(long n, const double *u, const double *v, double *gu, double *gv) {
    for (long i = 0; i < n; i++) { gu[i] = v[i]; gv[i] = u[i]; }
}
static double ref_max(long n, const double *v) {
    double m = v[0];
    for (long i = 1; i < n; i++)
        if (v[i] > m) m = v[i];
    return m;
}
/* gradient of max: one-hot at the first maximum */
static void ref_max_gradient(long n, const double *v, double *g) {
    long k = 0;
    for (long i = 1; i < n; i++)
        if (v[i] > v[k]) k = i;
    for (long i = 0; i < n; i++) g[i] = 0.0;
    g[k] = 1.0;
}
static void ref_vadd(long n, const double *u, const double *v, double *o) {
    for (long i = 0; i < n; i++) o[i] = u[i] + v[i];
}
/* JVP of u + v: du + dv; VJP: (r, r) */
static void ref_vadd_jvp(long n, const double *du, const double *dv, double *o) {
    for (long i = 0; i < n; i++) o[i] = du[i] + dv[i];
}
static void ref_vadd_vjp(long n, const double *r, double *gu, double *gv) {
    for (long i = 0; i < n; i++) { gu[i] = r[i]; gv[i] = r[i]; }
}
static void ref_vscale(long n, double a, const double *v, double *o) {
    for (long i = 0; i < n; i++) o[i] = a * v[i];
}
/* JVP of a v along (da, 0): da v; VJP: (r . v, a r) */
static void ref_vscale_jvp(long n, const double *v, double da, double *o) {
    for (long i = 0; i < n; i++) o[i] = da * v[i];
}
static void ref_vscale_vjp(long n, double a, const double *v, const double *r, double *ga, double *gv) {
    double s = 0.0;
    for (long i = 0; i < n; i++) { s += r[i] * v[i]; gv[i] = a * r[i]; }
    *ga = s;
}
/* NNMF, rank 1: D = sum_ij log(w_i h_j) + A_ij / (w_i h_j); dD/dh_j =
 * sum_i (1/h_j - A_ij / (w_i h_j^2)). */
static double ref_nnmf(long m, long n, const double *w, const double *h, const double *a) {
    double s = 0.0;
    for (long i = 0; i < m; i++)
        for (long j = 0; j < n; j++) {
            double wh = w[i] * h[j];
            s += log(wh) + a[i * n + j] / wh;
        }
    return s;
}
static void ref_nnmf_gradient(long m, long n, const double *w, const double *h, const double *a, double *g) {
    for (long j = 0; j < n; j++) g[j] = m / h[j];
    for (long i = 0; i < m; i++) {
        double iw = 1.0 / w[i];
        for (long j = 0; j < n; j++) g[j] -= a[i * n + j] * iw / (h[j] * h[j]);
    }
}
/* Figure 8's Jacobians, written from the formula: d(u + v)/du is the n x n
 * identity, row-major (dense) or in CSR (row i holds one entry, column i,
 * value 1: values, row offsets (n + 1), column indices); d(a v)/da is the
 * column v (n x 1). */
static void ref_vadd_jac(long n, double *J) {
    memset(J, 0, sizeof(double) * n * n);
    for (long i = 0; i < n; i++) J[i * n + i] = 1.0;
}
static void ref_vadd_jacsparse(long n, double *vals, long *rows, long *cols) {
    for (long i = 0; i < n; i++) { vals[i] = 1.0; rows[i] = i; cols[i] = i; }
    rows[n] = n;
}
static void ref_vscale_jac(long n, const double *v, double *J) {
    for (long i = 0; i < n; i++) J[i] = v[i];
}
/* Seed 001's vectorSum: the sum of v, and its gradient by hand: d(sum v)/dv_i
 * is 1 for every i, so the gradient is n ones, n read from v's size (the
 * values are not read). */
static double ref_vectorsum(long n, const double *v) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += v[i];
    return s;
}
static void ref_vectorsum_gradient(long n, const double *v, double *g) {
    (void)v;
    for (long i = 0; i < n; i++) g[i] = 1.0;
}
