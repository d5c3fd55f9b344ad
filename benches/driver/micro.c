/* Micro-benchmark driver. Extra argument: dot | max | vadd_jvp | vadd_vjp |
 * vscale_jvp | vscale_vjp | vadd_jac | vadd_jacsparse | vscale_jac | nnmf |
 * vectorsum.
 * Data file: "n", vectors u, v, r, s (n each), scalars a, da; for nnmf
 * "m n", w (m), h (n), A (m x n). vectorsum (seed 001) reads the former and
 * uses u only: the objective vectorSum(u) (1 number), the derivative its
 * gradient (n numbers, all ones), by forward mode over the n one-hot
 * directions in ksc.
 * "obj" is the primal function, "grad" its derivative (gradient, JVP, VJP or
 * Jacobian). The Jacobians (figure 8): vadd_jac d(u + v)/du, n x n
 * row-major; vadd_jacsparse the same in CSR, written as its n values, then
 * its n + 1 row offsets, then its n column indices (as the BA driver does);
 * vscale_jac d(a v)/da, n x 1. Each tool fills its whole output in every
 * timed call (ksc's arrays are copied into the output, untimed, when it is
 * written). */
#include "worker.h"
#include "../reference/micro.c"
/* nnmf and vectorsum are built from their own example programs, nnmf.ks
 * and vectorsum.ks: compile with -DNNMF or -DVECTORSUM. */
#ifdef NNMF
#include "nnmf.h"
#elif defined(VECTORSUM)
#include "vectorsum.h"
#else
#include "micro.h"
#endif

static const char *kind;
static long n, m;
static double *u, *v, *r, *s, a, da, *w, *h, *am, *o1, *o2, *o3, *jm;
static long *jrows, *jcols;
static ks_arena *A;
static ks_T1f ku, kv, kr, ks, kw, kh;
#ifdef NNMF
static ks_T1T1f ka;
#endif
#define IS(k) (strcmp(kind, k) == 0)
/* vadd's kinds (the objective is u + v), the others' vscale's (a v). */
#define VADD (strncmp(kind, "vadd", 4) == 0)

static double *readn(FILE *f, long k) {
    double *p = xmalloc(sizeof(double) * k);
    for (long i = 0; i < k; i++) p[i] = rd(f);
    return p;
}

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool;
    if (argc < 1) { fprintf(stderr, "micro: which benchmark?\n"); exit(2); }
    kind = argv[0];
    FILE *f = open_data(path);
    A = ks_arena_new();
    if (IS("nnmf")) {
        m = (long)rd(f); n = (long)rd(f);
        w = readn(f, m); h = readn(f, n); am = readn(f, m * n);
        kw = (ks_T1f){m, w}; kh = (ks_T1f){n, h};
#ifdef NNMF
        ka.size = m; ka.data = xmalloc(sizeof(ks_T1f) * m);
        for (long i = 0; i < m; i++) ka.data[i] = (ks_T1f){n, am + i * n};
#endif
        nout[OBJ] = 1; nout[GRAD] = n;
    } else {
        n = (long)rd(f);
        u = readn(f, n); v = readn(f, n); r = readn(f, n); s = readn(f, n);
        a = rd(f); da = rd(f);
        ku = (ks_T1f){n, u}; kv = (ks_T1f){n, v}; kr = (ks_T1f){n, r}; ks = (ks_T1f){n, s};
        nout[OBJ] = (IS("dot") || IS("max") || IS("vectorsum")) ? 1 : n;
        nout[GRAD] = (IS("dot") || IS("vadd_vjp")) ? 2 * n : IS("vscale_vjp") ? n + 1
                     : IS("vadd_jac") ? n * n : IS("vadd_jacsparse") ? 3 * n + 1 : n;
    }
    /* The Jacobians' outputs (the reference writes into them; ksc's are
     * copied there). */
    if (IS("vadd_jac")) jm = xmalloc(sizeof(double) * n * n);
    if (IS("vadd_jacsparse")) {
        jm = xmalloc(sizeof(double) * n);
        jrows = xmalloc(sizeof(long) * (n + 1));
        jcols = xmalloc(sizeof(long) * n);
    }
    fclose(f);
    o1 = xmalloc(sizeof(double) * (n + 1));
    o2 = xmalloc(sizeof(double) * (n + 1));
    o3 = xmalloc(sizeof(double) * (n + 1));
}

static void cp(double *dst, const double *src, long k) { if (dst) memcpy(dst, src, sizeof(double) * k); }

/* vadd_jacsparse's output: values, row offsets, column indices. */
static void write_csr(double *out) {
    if (!out) return;
    cp(out, jm, n);
    for (long i = 0; i <= n; i++) out[n + i] = (double)jrows[i];
    for (long i = 0; i < n; i++) out[2 * n + 1 + i] = (double)jcols[i];
}

static void call_ref(int which, double *out) {
    if (which == OBJ) {
        if (IS("dot")) { double x = ref_dot(n, u, v); sink = x; if (out) out[0] = x; }
        else if (IS("max")) { double x = ref_max(n, v); sink = x; if (out) out[0] = x; }
        else if (IS("nnmf")) { double x = ref_nnmf(m, n, w, h, am); sink = x; if (out) out[0] = x; }
        else if (IS("vectorsum")) { double x = ref_vectorsum(n, u); sink = x; if (out) out[0] = x; }
        else if (VADD) { ref_vadd(n, u, v, o1); cp(out, o1, n); }
        else { ref_vscale(n, a, v, o1); cp(out, o1, n); }
        return;
    }
    if (IS("dot")) { ref_dot_gradient(n, u, v, o1, o2); if (out) { cp(out, o1, n); cp(out + n, o2, n); } }
    else if (IS("max")) { ref_max_gradient(n, v, o1); cp(out, o1, n); }
    else if (IS("nnmf")) { ref_nnmf_gradient(m, n, w, h, am, o1); cp(out, o1, n); }
    else if (IS("vectorsum")) { ref_vectorsum_gradient(n, u, o1); sink = o1[0]; cp(out, o1, n); }
    else if (IS("vadd_jvp")) { ref_vadd_jvp(n, r, s, o1); cp(out, o1, n); }
    else if (IS("vadd_vjp")) { ref_vadd_vjp(n, r, o1, o2); if (out) { cp(out, o1, n); cp(out + n, o2, n); } }
    else if (IS("vscale_jvp")) { ref_vscale_jvp(n, v, da, o1); cp(out, o1, n); }
    else if (IS("vadd_jac")) { ref_vadd_jac(n, jm); sink = jm[0]; cp(out, jm, n * n); }
    else if (IS("vadd_jacsparse")) { ref_vadd_jacsparse(n, jm, jrows, jcols); sink = jm[0]; write_csr(out); }
    else if (IS("vscale_jac")) { ref_vscale_jac(n, v, o1); sink = o1[0]; cp(out, o1, n); }
    else { ref_vscale_vjp(n, a, v, r, o3, o2); if (out) { out[0] = o3[0]; cp(out + 1, o2, n); } }
}

#if !defined(NNMF) && !defined(VECTORSUM) && !defined(KSC_NO_GRAD)
static void check_shape(const char *what, long rows, long cols, long want_rows, long want_cols) {
    if (rows != want_rows || cols != want_cols) {
        fprintf(stderr, "ksc's %s is %ld x %ld, not %ld x %ld\n", what, rows, cols, want_rows, want_cols);
        exit(1);
    }
}
#endif

static void call_ksc(int which, double *out) {
    ks_mark mk = ks_arena_mark(A);
#ifdef NNMF
    if (which == OBJ) { double x = nnmf_objective(A, kw, kh, ka); sink = x; if (out) out[0] = x; }
#ifndef KSC_NO_GRAD
    else { ks_T1f g = nnmf_gradient(A, kw, kh, ka); cp(out, g.data, n); }
#endif
#elif defined(VECTORSUM)
    if (which == OBJ) { double x = vectorSum(A, ku); sink = x; if (out) out[0] = x; }
#ifndef KSC_NO_GRAD
    else { ks_T1f g = vectorsum_gradient(A, ku); sink = g.data[0]; cp(out, g.data, n); }
#endif
#else
    if (which == OBJ) {
        if (IS("dot")) { double x = dot_objective(A, ku, kv); sink = x; if (out) out[0] = x; }
        else if (IS("max")) { double x = max_objective(A, kv); sink = x; if (out) out[0] = x; }
        else if (VADD) { ks_T1f o = vadd(A, ku, kv); cp(out, o.data, n); }
        else { ks_T1f o = vscale(A, a, kv); cp(out, o.data, n); }
    } else {
#ifndef KSC_NO_GRAD
        if (IS("dot")) { ks_t2T1fT1f g = dot_gradient(A, ku, kv); if (out) { cp(out, g.f0.data, n); cp(out + n, g.f1.data, n); } }
        else if (IS("max")) { ks_T1f g = max_gradient(A, kv); cp(out, g.data, n); }
        else if (IS("vadd_jvp")) { ks_T1f g = vadd_jvp(A, ku, kv, kr, ks); cp(out, g.data, n); }
        else if (IS("vadd_vjp")) { ks_t2T1fT1f g = vadd_vjp(A, ku, kv, kr); if (out) { cp(out, g.f0.data, n); cp(out + n, g.f1.data, n); } }
        else if (IS("vscale_jvp")) { ks_T1f g = vscale_jvp(A, a, kv, da); cp(out, g.data, n); }
        else if (IS("vadd_jac")) {
            ks_T2f J = vadd_jac(A, ku, kv);
            check_shape("[jac1 vadd]", J.size[0], J.size[1], n, n);
            sink = J.data[0];
            cp(out, J.data, n * n);
        } else if (IS("vadd_jacsparse")) {
            /* [jacsparse1 vadd]: (tuple (tuple rows cols) row_offsets columns values) */
            ks_t4t2iiT1iT1iT1f J = vadd_jacsparse(A, ku, kv);
            check_shape("[jacsparse1 vadd]", J.f0.f0, J.f0.f1, n, n);
            if (J.f1.size != n + 1 || J.f2.size != n || J.f3.size != n) {
                fprintf(stderr, "ksc's [jacsparse1 vadd] has %ld row offsets and %ld entries, not %ld and %ld\n",
                        (long)J.f1.size, (long)J.f3.size, n + 1, n);
                exit(1);
            }
            sink = J.f3.data[0];
            if (out) {
                cp(jm, J.f3.data, n);
                for (long i = 0; i <= n; i++) jrows[i] = (long)J.f1.data[i];
                for (long i = 0; i < n; i++) jcols[i] = (long)J.f2.data[i];
                write_csr(out);
            }
        } else if (IS("vscale_jac")) {
            ks_T2f J = vscale_jac(A, a, kv);
            check_shape("[jac1 vscale]", J.size[0], J.size[1], n, 1);
            sink = J.data[0];
            cp(out, J.data, n);
        }
        else { ks_t2fT1f g = vscale_vjp(A, a, kv, kr); if (out) { out[0] = g.f0; cp(out + 1, g.f1.data, n); } }
#endif
    }
#endif
    ks_arena_reset(A, mk);
}

static void call(int tool, int which, double *out) {
    if (tool == REF) call_ref(which, out); else call_ksc(which, out);
}

/* The primal as a scalar or vector function of the differentiated inputs. */
static double *fo;
static double worst;
static void chk(double fd, double an) { double e = relerr(fd, an); if (e > worst) worst = e; }

static double fd_error(void) {
    double hh = 1e-5;
    double *g = xmalloc(sizeof(double) * (nout[GRAD] + 1));
    fo = xmalloc(sizeof(double) * (n + 1));
    double *fp = xmalloc(sizeof(double) * (n + 1)), *fm = xmalloc(sizeof(double) * (n + 1));
    call_ref(GRAD, g);
    worst = 0;
    long step = n > 20 ? n / 20 : 1;
    if (IS("vadd_jac") || IS("vadd_jacsparse") || IS("vscale_jac")) {
        /* Jacobian: perturb one column's input (u[j] at 20 sampled j, or a)
         * and compare the whole column, its zeros included (for the CSR
         * form, the column is gathered from its entries). */
        double *col = xmalloc(sizeof(double) * n);
        long ncols = IS("vscale_jac") ? 1 : n;
        for (long j = 0; j < ncols; j += (ncols > 20 ? step : 1)) {
            double *x = IS("vscale_jac") ? &a : &u[j];
            double x0 = *x;
            *x = x0 + hh; call_ref(OBJ, fp);
            *x = x0 - hh; call_ref(OBJ, fm);
            *x = x0;
            if (IS("vadd_jac")) for (long i = 0; i < n; i++) col[i] = g[i * n + j];
            else if (IS("vscale_jac")) for (long i = 0; i < n; i++) col[i] = g[i];
            else {
                const double *vals = g, *rows = g + n, *cols = g + 2 * n + 1;
                for (long i = 0; i < n; i++) {
                    col[i] = 0.0;
                    for (long k = (long)rows[i]; k < (long)rows[i + 1]; k++)
                        if ((long)cols[k] == j) col[i] += vals[k];
                }
            }
            for (long i = 0; i < n; i++) chk((fp[i] - fm[i]) / (2 * hh), col[i]);
        }
        free(col);
    } else if (IS("dot") || IS("max") || IS("nnmf") || IS("vectorsum") || IS("vadd_vjp") || IS("vscale_vjp")) {
        /* gradient or VJP: perturb one input at a time, project with r */
        int blocks = IS("dot") || IS("vadd_vjp") || IS("vscale_vjp") ? 2 : 1;
        for (int b = 0; b < blocks; b++) {
            long len = (IS("vscale_vjp") && b == 0) ? 1 : n;
            double *base = IS("dot") || IS("vadd_vjp") ? (b == 0 ? u : v) : IS("vscale_vjp") ? (b == 0 ? &a : v) : IS("nnmf") ? h : IS("vectorsum") ? u : v;
            long goff = IS("vscale_vjp") ? (b == 0 ? 0 : 1) : b * n;
            for (long i = 0; i < len; i += (len > 20 ? step : 1)) {
                double p0 = base[i], plus, minus;
                base[i] = p0 + hh; call_ref(OBJ, fp);
                base[i] = p0 - hh; call_ref(OBJ, fm);
                base[i] = p0;
                if (nout[OBJ] == 1) { plus = fp[0]; minus = fm[0]; }
                else { plus = ref_dot(n, r, fp); minus = ref_dot(n, r, fm); }
                chk((plus - minus) / (2 * hh), g[goff + i]);
            }
        }
    } else {
        /* JVP: along the tangent */
        double a0 = a;
        double *u0 = xmalloc(sizeof(double) * n), *v0 = xmalloc(sizeof(double) * n);
        memcpy(u0, u, sizeof(double) * n); memcpy(v0, v, sizeof(double) * n);
        for (int sign = 1; sign >= -1; sign -= 2) {
            if (IS("vadd_jvp")) for (long i = 0; i < n; i++) { u[i] = u0[i] + sign * hh * r[i]; v[i] = v0[i] + sign * hh * s[i]; }
            else a = a0 + sign * hh * da;
            call_ref(OBJ, sign > 0 ? fp : fm);
        }
        a = a0; memcpy(u, u0, sizeof(double) * n); memcpy(v, v0, sizeof(double) * n);
        for (long i = 0; i < n; i += step) chk((fp[i] - fm[i]) / (2 * hh), g[i]);
    }
    return worst;
}
