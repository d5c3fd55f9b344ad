/* Hand-written sequential C references of the `scan` workload (issue 34;
 * seed 002's examples), written from the formulas for this project:
 *   lse:        max x + log sum exp(x_i - max x), gradient softmax(x)
 *               (reference/lse.c);
 *   recurrence: h_t = a_t h_(t-1) + b_t, h_(-1) = 0, L = sum_t h_t; its
 *               adjoint l_t = 1 + a_(t+1) l_(t+1) gives dL/da_t = l_t h_(t-1),
 *               dL/db_t = l_t;
 *   nested k:   y_1 = cumprod x, y_(j+1) = cumprod y_j, L = sum y_k; the
 *               adjoint of y = cumprod z is dz_m = (sum_(i>=m) dy_i y_i) / z_m. */
#include <math.h>
#include <stdlib.h>

#include "lse.c"

static double ref_recurrence_objective(long n, const double *a, const double *b) {
    double h = 0, s = 0;
    for (long t = 0; t < n; t++) {
        h = a[t] * h + b[t];
        s += h;
    }
    return s;
}

/* da, db: n each; h: scratch of n. */
static void ref_recurrence_gradient(long n, const double *a, const double *b, double *da, double *db, double *h) {
    double hp = 0;
    for (long t = 0; t < n; t++) h[t] = hp = a[t] * hp + b[t];
    double l = 0;
    for (long t = n - 1; t >= 0; t--) {
        l = 1 + (t + 1 < n ? a[t + 1] * l : 0);
        da[t] = l * (t > 0 ? h[t - 1] : 0);
        db[t] = l;
    }
}

static void ref_cumprod(long n, const double *z, double *y) {
    double p = 1;
    for (long i = 0; i < n; i++) y[i] = p = p * z[i];
}

/* ys: k + 1 arrays of n (ys[0] = x), filled with the levels. */
static double ref_nested_objective(int k, long n, double **ys) {
    for (int j = 1; j <= k; j++) ref_cumprod(n, ys[j - 1], ys[j]);
    double s = 0;
    for (long i = 0; i < n; i++) s += ys[k][i];
    return s;
}

/* g: n, the gradient with respect to ys[0]; ys as above. */
static void ref_nested_gradient(int k, long n, double **ys, double *g) {
    ref_nested_objective(k, n, ys);
    for (long i = 0; i < n; i++) g[i] = 1;
    for (int j = k; j >= 1; j--) {
        double acc = 0;
        for (long m = n - 1; m >= 0; m--) {
            acc += g[m] * ys[j][m];
            g[m] = acc / ys[j - 1][m];
        }
    }
}
