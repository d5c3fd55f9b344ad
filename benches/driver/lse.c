/* LSE driver: data file "n" then n numbers. */
#include "worker.h"
#include "../reference/lse.c"
#include "lse.h"

static long n;
static double *x, *g;
static ks_arena *A;
static ks_T1f kx;

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool; (void)argc; (void)argv;
    FILE *f = open_data(path);
    n = (long)rd(f);
    x = xmalloc(sizeof(double) * n);
    g = xmalloc(sizeof(double) * n);
    for (long i = 0; i < n; i++) x[i] = rd(f);
    fclose(f);
    nout[OBJ] = 1;
    nout[GRAD] = n;
    A = ks_arena_new();
    kx.size = n;
    kx.data = x;
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) { double v = ref_lse_objective(n, x); sink = v; if (out) out[0] = v; }
        else { ref_lse_gradient(n, x, g); if (out) memcpy(out, g, sizeof(double) * n); }
        return;
    }
    ks_mark m = ks_arena_mark(A);
    if (which == OBJ) { double v = lse_objective(A, kx); sink = v; if (out) out[0] = v; }
    else {
#ifndef KSC_NO_GRAD
        ks_T1f r = lse_gradient(A, kx);
        if (out) memcpy(out, r.data, sizeof(double) * n);
#endif
    }
    ks_arena_reset(A, m);
}

static double fd_error(void) {
    ref_lse_gradient(n, x, g);
    double worst = 0, h = 1e-5;
    long step = n > 20 ? n / 20 : 1;
    for (long i = 0; i < n; i += step) {
        double x0 = x[i];
        x[i] = x0 + h; double fp = ref_lse_objective(n, x);
        x[i] = x0 - h; double fm = ref_lse_objective(n, x);
        x[i] = x0;
        double e = relerr((fp - fm) / (2 * h), g[i]);
        if (e > worst) worst = e;
    }
    return worst;
}
