/* The `scan` workload's driver (issue 34): log-sum-exp as a `reduce`, the
 * linear recurrence as a `scan` over affine maps, nested cumulative
 * products. Data files (raw doubles): "n x..." (lse, nested), "n a... b..."
 * (recurrence). KIND: lse_reduce, recurrence, nested1 .. nested4. */
#include "worker.h"
#include "../reference/scan.c"
#include "scan.h"

static long n;
static int kind, levels; /* kind 0: lse, 1: recurrence, 2: nested */
static double *x, *a, *b, *g, *g2, *h, **ys;
static ks_arena *A;
static ks_T1f kx, ka, kb;

static ks_T1f vec(double *p) { ks_T1f v; v.size = n; v.data = p; return v; }

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool;
    const char *k = argc > 0 ? argv[0] : "lse_reduce";
    kind = strcmp(k, "recurrence") == 0 ? 1 : strncmp(k, "nested", 6) == 0 ? 2 : 0;
    levels = kind == 2 ? atoi(k + 6) : 0;
    FILE *f = open_data(path);
    n = (long)rd(f);
    if (kind == 1) {
        a = xmalloc(sizeof(double) * n);
        b = xmalloc(sizeof(double) * n);
        for (long i = 0; i < n; i++) a[i] = rd(f);
        for (long i = 0; i < n; i++) b[i] = rd(f);
        ka = vec(a);
        kb = vec(b);
        h = xmalloc(sizeof(double) * n);
    } else {
        x = xmalloc(sizeof(double) * n);
        for (long i = 0; i < n; i++) x[i] = rd(f);
        kx = vec(x);
    }
    fclose(f);
    g = xmalloc(sizeof(double) * n);
    g2 = xmalloc(sizeof(double) * n);
    ys = xmalloc(sizeof(double *) * (levels + 1));
    ys[0] = x;
    for (int j = 1; j <= levels; j++) ys[j] = xmalloc(sizeof(double) * n);
    nout[OBJ] = 1;
    nout[GRAD] = kind == 1 ? 2 * n : n;
    A = ks_arena_new();
}

static double ref_objective(void) {
    if (kind == 0) return ref_lse_objective(n, x);
    if (kind == 1) return ref_recurrence_objective(n, a, b);
    return ref_nested_objective(levels, n, ys);
}


static double ksc_objective(void) {
    switch (kind) {
    case 0: return lse_reduce_objective(A, kx);
    case 1: return recurrence_objective(A, ka, kb);
    default:
        switch (levels) {
        case 1: return nested1_objective(A, kx);
        case 2: return nested2_objective(A, kx);
        case 3: return nested3_objective(A, kx);
        default: return nested4_objective(A, kx);
        }
    }
}

static void ksc_gradient(double *out) {
#ifndef KSC_NO_GRAD
    ks_T1f r;
    if (kind == 1) {
        ks_t2T1fT1f p = recurrence_gradient(A, ka, kb);
        if (out) {
            memcpy(out, p.f0.data, sizeof(double) * n);
            memcpy(out + n, p.f1.data, sizeof(double) * n);
        }
        return;
    }
    switch (kind == 0 ? 0 : levels) {
    case 0: r = lse_reduce_gradient(A, kx); break;
    case 1: r = nested1_gradient(A, kx); break;
    case 2: r = nested2_gradient(A, kx); break;
    case 3: r = nested3_gradient(A, kx); break;
    default: r = nested4_gradient(A, kx); break;
    }
    if (out) memcpy(out, r.data, sizeof(double) * n);
#else
    (void)out;
#endif
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) { double v = ref_objective(); sink = v; if (out) out[0] = v; return; }
        if (kind == 1) {
            ref_recurrence_gradient(n, a, b, g, g2, h);
            if (out) { memcpy(out, g, sizeof(double) * n); memcpy(out + n, g2, sizeof(double) * n); }
            return;
        }
        if (kind == 0) ref_lse_gradient(n, x, g);
        else ref_nested_gradient(levels, n, ys, g);
        if (out) memcpy(out, g, sizeof(double) * n);
        return;
    }
    ks_mark m = ks_arena_mark(A);
    if (which == OBJ) { double v = ksc_objective(); sink = v; if (out) out[0] = v; }
    else ksc_gradient(out);
    ks_arena_reset(A, m);
}

/* The reference's gradient against central differences of its objective,
 * at 20 coordinates. Nested cumulative products of 10^6 elements are too
 * ill-conditioned for differences (a factor 1 + h raised to the power i^(k-1)):
 * their data is all ones, where element m of the gradient of sum y_k is
 * exactly C(n - m + k - 1, k), which this checks instead. */
static double fd_error(void) {
    double *dg = xmalloc(sizeof(double) * nout[GRAD]);
    call(REF, GRAD, dg);
    if (kind == 2) {
        double worst = 0;
        for (long m = 0; m < n; m += n > 20 ? n / 20 : 1) {
            if (x[m] != 1.0) { free(dg); return INFINITY; }
            double c = 1;
            for (int j = 1; j <= levels; j++) c = c * (double)(n - m + levels - j) / j;
            double e = relerr(c, dg[m]);
            if (e > worst) worst = e;
        }
        free(dg);
        return worst;
    }
    double worst = 0, h = 1e-5;
    long total = nout[GRAD], step = total > 20 ? total / 20 : 1;
    for (long i = 0; i < total; i += step) {
        double *p = kind == 1 ? (i < n ? &a[i] : &b[i - n]) : &x[i];
        double v0 = *p;
        *p = v0 + h; double fp = ref_objective();
        *p = v0 - h; double fm = ref_objective();
        *p = v0;
        double e = relerr((fp - fm) / (2 * h), dg[i]);
        if (e > worst) worst = e;
    }
    free(dg);
    return worst;
}
