/* Hand-written C reference of the GMM objective (shared/docs/benchmarks.md),
 * written from the formula for this project. Same data as
 * ksc-examples/adbench/gmm.ks: seeded with the "ranhash" generator.
 *
 * ref_gmm_gradient: the gradient with respect to (alphas, means, icf),
 * written by hand (reverse mode of the formula), checked against central
 * finite differences by benches/run.py.
 *
 * Usage: gmm N K D REPS   prints the objective and the sum over REPS runs
 * (wishart gamma 1 + 1e-9 r, m = 0), like the .ks program's main.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static double ranhashdoub(int64_t seed) {
    uint64_t v = (uint64_t)seed * 3935559000370003845ULL + 2691343689449507681ULL;
    v ^= v >> 21;
    v ^= v << 37;
    v ^= v >> 4;
    v *= 4768777513237032717ULL;
    v ^= v << 20;
    v ^= v >> 41;
    v ^= v << 5;
    return 5.42101086242752217e-20 * (double)v;
}

static double ref_logsumexp(const double *v, int n) {
    double mx = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] > mx) mx = v[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp(v[i] - mx);
    return mx + log(s);
}

static double ref_log_gamma_distrib(double a, int p) {
    double r = 0.25 * p * (p - 1) * log(M_PI);
    for (int j = 0; j < p; j++) r += lgamma(a - 0.5 * j);
    return r;
}

/* icf: k rows of d(d+1)/2: q (d) then the strictly lower part of Q packed
 * column by column. */
static double ref_gmm_objective(int d, int k, int n, const double *alphas, const double *means, const double *icf,
                            const double *x, double wishart_gamma, int wishart_m) {
    int icf_size = d * (d + 1) / 2;
    double *qdiags = malloc(sizeof(double) * k * d);
    double *sum_qs = malloc(sizeof(double) * k);
    double *xcentered = malloc(sizeof(double) * d);
    double *qxcentered = malloc(sizeof(double) * d);
    double *main_term = malloc(sizeof(double) * k);
    for (int c = 0; c < k; c++) {
        sum_qs[c] = 0.0;
        for (int j = 0; j < d; j++) {
            sum_qs[c] += icf[c * icf_size + j];
            qdiags[c * d + j] = exp(icf[c * icf_size + j]);
        }
    }
    double slse = 0.0;
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < k; c++) {
            for (int j = 0; j < d; j++) xcentered[j] = x[i * d + j] - means[c * d + j];
            const double *q = &qdiags[c * d];
            const double *l = &icf[c * icf_size + d];
            for (int j = 0; j < d; j++) qxcentered[j] = q[j] * xcentered[j];
            int li = 0;
            for (int col = 0; col < d; col++)
                for (int row = col + 1; row < d; row++) qxcentered[row] += l[li++] * xcentered[col];
            double sq = 0.0;
            for (int j = 0; j < d; j++) sq += qxcentered[j] * qxcentered[j];
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * sq;
        }
        slse += ref_logsumexp(main_term, k);
    }
    double constant = -(double)n * d * 0.5 * log(2.0 * M_PI);
    int nw = d + wishart_m + 1;
    double cw = nw * d * (log(wishart_gamma) - 0.5 * log(2.0)) - ref_log_gamma_distrib(0.5 * nw, d);
    double prior = 0.0;
    for (int c = 0; c < k; c++) {
        double frob = 0.0;
        for (int j = 0; j < d; j++) frob += qdiags[c * d + j] * qdiags[c * d + j];
        for (int j = d; j < icf_size; j++) frob += icf[c * icf_size + j] * icf[c * icf_size + j];
        prior += 0.5 * wishart_gamma * wishart_gamma * frob - wishart_m * sum_qs[c];
    }
    free(qdiags);
    free(sum_qs);
    free(xcentered);
    free(qxcentered);
    free(main_term);
    return constant + slse - n * ref_logsumexp(alphas, k) + prior - k * cw;
}

/* Gradient of ref_gmm_objective with respect to alphas (k), means (k x d)
 * and icf (k x d(d+1)/2), written into ga, gm, gi. With y = Q_c (x_i - mu_c)
 * and w_c = softmax_c(main term): d main_c/d alpha_c = 1, d/d mu_c = Q^T y,
 * d/d q_cj = 1 - y_j xc_j exp(q_cj), d/d l(row j, col i) = -y_j xc_i. */
static void ref_gmm_gradient(int d, int k, int n, const double *alphas, const double *means, const double *icf,
                             const double *x, double wishart_gamma, int wishart_m, double *ga, double *gm,
                             double *gi) {
    int icf_size = d * (d + 1) / 2;
    double *qdiags = malloc(sizeof(double) * k * d);
    double *sum_qs = malloc(sizeof(double) * k);
    double *xc = malloc(sizeof(double) * k * d);
    double *y = malloc(sizeof(double) * k * d);
    double *main_term = malloc(sizeof(double) * k);
    double *qty = malloc(sizeof(double) * d);
    for (int i = 0; i < k; i++) ga[i] = 0.0;
    for (int i = 0; i < k * d; i++) gm[i] = 0.0;
    for (int i = 0; i < k * icf_size; i++) gi[i] = 0.0;
    for (int c = 0; c < k; c++) {
        sum_qs[c] = 0.0;
        for (int j = 0; j < d; j++) {
            sum_qs[c] += icf[c * icf_size + j];
            qdiags[c * d + j] = exp(icf[c * icf_size + j]);
        }
    }
    for (int i = 0; i < n; i++) {
        double mx = -INFINITY;
        for (int c = 0; c < k; c++) {
            double *xcc = &xc[c * d], *yc = &y[c * d];
            for (int j = 0; j < d; j++) xcc[j] = x[i * d + j] - means[c * d + j];
            const double *q = &qdiags[c * d];
            const double *l = &icf[c * icf_size + d];
            for (int j = 0; j < d; j++) yc[j] = q[j] * xcc[j];
            int li = 0;
            for (int col = 0; col < d; col++)
                for (int row = col + 1; row < d; row++) yc[row] += l[li++] * xcc[col];
            double sq = 0.0;
            for (int j = 0; j < d; j++) sq += yc[j] * yc[j];
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * sq;
            if (main_term[c] > mx) mx = main_term[c];
        }
        double s = 0.0;
        for (int c = 0; c < k; c++) {
            main_term[c] = exp(main_term[c] - mx);
            s += main_term[c];
        }
        for (int c = 0; c < k; c++) {
            double w = main_term[c] / s;
            const double *xcc = &xc[c * d], *yc = &y[c * d];
            const double *q = &qdiags[c * d];
            const double *l = &icf[c * icf_size + d];
            double *gq = &gi[c * icf_size], *gl = &gi[c * icf_size + d];
            ga[c] += w;
            /* Q^T y */
            for (int j = 0; j < d; j++) qty[j] = q[j] * yc[j];
            int li = 0;
            for (int col = 0; col < d; col++)
                for (int row = col + 1; row < d; row++) {
                    qty[col] += l[li] * yc[row];
                    gl[li] -= w * yc[row] * xcc[col];
                    li++;
                }
            for (int j = 0; j < d; j++) {
                gm[c * d + j] += w * qty[j];
                gq[j] += w * (1.0 - yc[j] * xcc[j] * q[j]);
            }
        }
    }
    /* - n lse(alphas) */
    double mx = alphas[0], s = 0.0;
    for (int c = 1; c < k; c++)
        if (alphas[c] > mx) mx = alphas[c];
    for (int c = 0; c < k; c++) s += exp(alphas[c] - mx);
    for (int c = 0; c < k; c++) ga[c] -= n * exp(alphas[c] - mx) / s;
    /* the Wishart prior */
    double g2 = wishart_gamma * wishart_gamma;
    for (int c = 0; c < k; c++) {
        for (int j = 0; j < d; j++) gi[c * icf_size + j] += g2 * qdiags[c * d + j] * qdiags[c * d + j] - wishart_m;
        for (int j = d; j < icf_size; j++) gi[c * icf_size + j] += g2 * icf[c * icf_size + j];
    }
    free(qdiags);
    free(sum_qs);
    free(xc);
    free(y);
    free(main_term);
    free(qty);
}

#ifndef REF_NO_MAIN
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000, k = argc > 2 ? atoi(argv[2]) : 25, d = argc > 3 ? atoi(argv[3]) : 10;
    int reps = argc > 4 ? atoi(argv[4]) : 20;
    int icf_size = d * (d + 1) / 2;
    double *x = malloc(sizeof(double) * n * d), *alphas = malloc(sizeof(double) * k);
    double *means = malloc(sizeof(double) * k * d), *icf = malloc(sizeof(double) * k * icf_size);
    int64_t base = 0;
    for (int i = 0; i < n * d; i++) x[i] = ranhashdoub(base + i);
    base += (int64_t)n * d;
    for (int c = 0; c < k; c++) alphas[c] = ranhashdoub(base + c);
    base += k;
    for (int i = 0; i < k * d; i++) means[i] = ranhashdoub(base + i);
    base += (int64_t)k * d;
    for (int i = 0; i < k * icf_size; i++) icf[i] = ranhashdoub(base + i) - 0.5;
    double total = 0.0;
    for (int r = 0; r < reps; r++) total += ref_gmm_objective(d, k, n, alphas, means, icf, x, 1.0 + 1e-9 * r, 0);
    printf("gmm objective n=%d k=%d d=%d: %.17g\nsum over %d repetitions: %.17g\n", n, k, d,
           ref_gmm_objective(d, k, n, alphas, means, icf, x, 1.0, 0), reps, total);
    return 0;
}
#endif
