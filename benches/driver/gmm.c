/* GMM driver: reads an ADBench GMM file (d k n; alphas; means; icf; x;
 * gamma m). Differentiated inputs in order: alphas, means, icf. */
#include "worker.h"
#define REF_NO_MAIN
#include "../reference/gmm.c"
#include "gmm.h"

static int d, k, n, m, icf_size;
static double gamma_, *alphas, *means, *icf, *x, *grad;
static ks_arena *A;
static ks_T1f kalphas;
static ks_T1T1f kx, kmeans, kicf;

static ks_T1T1f rows(double *data, int r, int c) {
    ks_T1T1f v = {r, xmalloc(sizeof(ks_T1f) * (r ? r : 1))};
    for (int i = 0; i < r; i++) v.data[i] = (ks_T1f){c, data + (long)i * c};
    return v;
}

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool; (void)argc; (void)argv;
    FILE *f = open_data(path);
    d = (int)rd(f); k = (int)rd(f); n = (int)rd(f);
    icf_size = d * (d + 1) / 2;
    alphas = xmalloc(sizeof(double) * k);
    means = xmalloc(sizeof(double) * k * d);
    icf = xmalloc(sizeof(double) * k * icf_size);
    x = xmalloc(sizeof(double) * (long)n * d);
    for (int i = 0; i < k; i++) alphas[i] = rd(f);
    for (int i = 0; i < k * d; i++) means[i] = rd(f);
    for (int i = 0; i < k * icf_size; i++) icf[i] = rd(f);
    for (long i = 0; i < (long)n * d; i++) x[i] = rd(f);
    gamma_ = rd(f);
    m = (int)rd(f);
    fclose(f);
    nout[OBJ] = 1;
    nout[GRAD] = k + k * d + k * icf_size;
    grad = xmalloc(sizeof(double) * nout[GRAD]);
    A = ks_arena_new();
    kalphas = (ks_T1f){k, alphas};
    kx = rows(x, n, d);
    kmeans = rows(means, k, d);
    kicf = rows(icf, k, icf_size);
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) {
            double v = ref_gmm_objective(d, k, n, alphas, means, icf, x, gamma_, m);
            sink = v; if (out) out[0] = v;
        } else {
            ref_gmm_gradient(d, k, n, alphas, means, icf, x, gamma_, m, grad, grad + k, grad + k + k * d);
            if (out) memcpy(out, grad, sizeof(double) * nout[GRAD]);
        }
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        double v = gmm_objective(A, kx, kalphas, kmeans, kicf, gamma_, m);
        sink = v; if (out) out[0] = v;
    } else {
#ifndef KSC_NO_GRAD
        ks_t3T1fT1T1fT1T1f g = gmm_gradient(A, kx, kalphas, kmeans, kicf, gamma_, m);
        if (out) {
            long p = 0;
            for (int c = 0; c < k; c++) out[p++] = g.f0.data[c];
            for (int c = 0; c < k; c++)
                for (int j = 0; j < d; j++) out[p++] = g.f1.data[c].data[j];
            for (int c = 0; c < k; c++)
                for (int j = 0; j < icf_size; j++) out[p++] = g.f2.data[c].data[j];
        }
#endif
    }
    ks_arena_reset(A, mk);
}

static double fd_error(void) {
    ref_gmm_gradient(d, k, n, alphas, means, icf, x, gamma_, m, grad, grad + k, grad + k + k * d);
    double *ps[3] = {alphas, means, icf};
    long sz[3] = {k, (long)k * d, (long)k * icf_size};
    double worst = 0, h = 1e-5;
    long off = 0;
    for (int b = 0; b < 3; b++) {
        long step = sz[b] > 10 ? sz[b] / 10 : 1;
        for (long i = 0; i < sz[b]; i += step) {
            double *p = &ps[b][i], p0 = *p;
            *p = p0 + h; double fp = ref_gmm_objective(d, k, n, alphas, means, icf, x, gamma_, m);
            *p = p0 - h; double fm = ref_gmm_objective(d, k, n, alphas, means, icf, x, gamma_, m);
            *p = p0;
            double e = relerr((fp - fm) / (2 * h), grad[off + i]);
            if (e > worst) worst = e;
        }
        off += sz[b];
    }
    return worst;
}
