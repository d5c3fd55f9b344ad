/* BA driver: reads an ADBench BA file (n m p; one camera (11); one point
 * (3); one weight; one feature (2)) and replicates it as ADBench's loader
 * does: n cameras, m points, p weights and features, all equal; observation
 * i sees point i mod m in camera i mod n. (No tool is told of the
 * duplication; every observation is computed.)
 *
 * "obj" is the residual vector (3p: the 2p reprojection residuals, then the
 * p weight residuals); "grad" the sparse Jacobian in CSR (layout in
 * ../reference/ba.c): its 31p values, then the 3p + 1 row pointers, then the
 * 31p column indices, all written as numbers. Both tools build the whole CSR
 * matrix (structure and values) in every timed call: ksc's `ba_jacobian`
 * is `[jacsparse1 ba_residuals]`, whose CSR arrays (64-bit integers) are
 * copied into ADBench's (32-bit) when the output is written, as the other
 * drivers convert ksc's results: the conversion is not timed. */
#include "worker.h"
#include "../reference/ba.c"
#include "ba.h"

static int n, m, p;
static double *cams, *X, *w, *feats, *res, *vals;
static int *cam_idx, *pt_idx, *rows, *cols;
static ks_arena *A;
static ks_T1T1f kcams, kX, kfeats;
static ks_T1f kw;
static ks_T1i kcam_idx, kpt_idx;

static ks_T1T1f rowsof(double *data, int r, int c) {
    ks_T1T1f v = {r, xmalloc(sizeof(ks_T1f) * (r ? r : 1))};
    for (int i = 0; i < r; i++) v.data[i] = (ks_T1f){c, data + (long)i * c};
    return v;
}

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool; (void)argc; (void)argv;
    FILE *f = open_data(path);
    n = (int)rd(f); m = (int)rd(f); p = (int)rd(f);
    double cam[11], pt[3], w0, feat[2];
    for (int k = 0; k < 11; k++) cam[k] = rd(f);
    for (int k = 0; k < 3; k++) pt[k] = rd(f);
    w0 = rd(f);
    feat[0] = rd(f); feat[1] = rd(f);
    fclose(f);
    cams = xmalloc(sizeof(double) * 11 * n);
    X = xmalloc(sizeof(double) * 3 * m);
    w = xmalloc(sizeof(double) * p);
    feats = xmalloc(sizeof(double) * 2 * p);
    cam_idx = xmalloc(sizeof(int) * p);
    pt_idx = xmalloc(sizeof(int) * p);
    int64_t *ci = xmalloc(sizeof(int64_t) * p), *pi = xmalloc(sizeof(int64_t) * p);
    for (int j = 0; j < n; j++) memcpy(&cams[11 * j], cam, sizeof cam);
    for (int j = 0; j < m; j++) memcpy(&X[3 * j], pt, sizeof pt);
    for (int i = 0; i < p; i++) {
        w[i] = w0;
        feats[2 * i] = feat[0];
        feats[2 * i + 1] = feat[1];
        cam_idx[i] = i % n;
        pt_idx[i] = i % m;
        ci[i] = cam_idx[i];
        pi[i] = pt_idx[i];
    }
    nout[OBJ] = 3 * p;
    nout[GRAD] = 31 * p + (3 * p + 1) + 31 * p;
    res = xmalloc(sizeof(double) * 3 * p);
    vals = xmalloc(sizeof(double) * 31 * p);
    rows = xmalloc(sizeof(int) * (3 * p + 1));
    cols = xmalloc(sizeof(int) * 31 * p);
    A = ks_arena_new();
    kcams = rowsof(cams, n, 11);
    kX = rowsof(X, m, 3);
    kfeats = rowsof(feats, p, 2);
    kw = (ks_T1f){p, w};
    kcam_idx = (ks_T1i){p, ci};
    kpt_idx = (ks_T1i){p, pi};
}

static void write_out(int which, double *out) {
    if (which == OBJ) {
        memcpy(out, res, sizeof(double) * 3 * p);
        return;
    }
    long q = 0;
    for (long k = 0; k < 31L * p; k++) out[q++] = vals[k];
    for (long k = 0; k <= 3L * p; k++) out[q++] = rows[k];
    for (long k = 0; k < 31L * p; k++) out[q++] = cols[k];
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) {
            ref_ba_objective(n, m, p, cams, X, w, feats, cam_idx, pt_idx, res);
            sink = res[0];
        } else {
            ref_ba_jacobian(n, m, p, cams, X, w, feats, cam_idx, pt_idx, vals, rows, cols);
            sink = vals[0];
        }
        if (out) write_out(which, out);
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        ks_t2T1t2ffT1f r = ba_objective(A, kcams, kX, kw, kfeats, kcam_idx, kpt_idx);
        sink = r.f0.data[0].f0;
        if (out) {
            for (int i = 0; i < p; i++) {
                res[2 * i] = r.f0.data[i].f0;
                res[2 * i + 1] = r.f0.data[i].f1;
                res[2 * p + i] = r.f1.data[i];
            }
        }
    } else {
#ifndef KSC_NO_GRAD
        /* ksc's [jacsparse1 ba_residuals]: shape, row offsets, columns, values. */
        ks_t4t2iiT1iT1iT1f J = ba_jacobian(A, kcams, kX, kw, kfeats, kcam_idx, kpt_idx);
        if (J.f0.f0 != 3L * p || J.f0.f1 != 11L * n + 3L * m + p || J.f1.size != 3L * p + 1 || J.f3.size != 31L * p ||
            J.f2.size != 31L * p) {
            fprintf(stderr, "ksc's sparse Jacobian is %ld x %ld with %ld entries, not ADBench's layout\n",
                    (long)J.f0.f0, (long)J.f0.f1, (long)J.f3.size);
            exit(1);
        }
        sink = J.f3.data[0];
        if (out) {
            memcpy(vals, J.f3.data, sizeof(double) * 31 * p);
            for (long k = 0; k <= 3L * p; k++) rows[k] = (int)J.f1.data[k];
            for (long k = 0; k < 31L * p; k++) cols[k] = (int)J.f2.data[k];
        }
#endif
    }
    if (out) write_out(which, out);
    ks_arena_reset(A, mk);
}

/* Central finite differences of the residual vector along sampled
 * parameters (every parameter of the first and last camera, of the first and
 * a middle point, and three weights), against the CSR column of the
 * reference's Jacobian (so zeros outside the sparsity pattern are checked
 * too). */
static double fd_error(void) {
    ref_ba_jacobian(n, m, p, cams, X, w, feats, cam_idx, pt_idx, vals, rows, cols);
    double *fp = xmalloc(sizeof(double) * 3 * p), *fm = xmalloc(sizeof(double) * 3 * p);
    double *col = xmalloc(sizeof(double) * 3 * p);
    double worst = 0, h = 1e-5;
    int cand[40], nc = 0;
    for (int k = 0; k < 11; k++) cand[nc++] = k;
    for (int k = 0; k < 11; k++) cand[nc++] = 11 * (n - 1) + k;
    for (int k = 0; k < 3; k++) cand[nc++] = 11 * n + k;
    for (int k = 0; k < 3; k++) cand[nc++] = 11 * n + 3 * (m / 2) + k;
    cand[nc++] = 11 * n + 3 * m;
    cand[nc++] = 11 * n + 3 * m + p / 2;
    cand[nc++] = 11 * n + 3 * m + p - 1;
    for (int c = 0; c < nc; c++) {
        int j = cand[c];
        double *x = j < 11 * n ? &cams[j] : j < 11 * n + 3 * m ? &X[j - 11 * n] : &w[j - 11 * n - 3 * m];
        double x0 = *x;
        *x = x0 + h; ref_ba_objective(n, m, p, cams, X, w, feats, cam_idx, pt_idx, fp);
        *x = x0 - h; ref_ba_objective(n, m, p, cams, X, w, feats, cam_idx, pt_idx, fm);
        *x = x0;
        memset(col, 0, sizeof(double) * 3 * p);
        for (int r = 0; r < 3 * p; r++)
            for (int k = rows[r]; k < rows[r + 1]; k++)
                if (cols[k] == j) col[r] += vals[k];
        for (int r = 0; r < 3 * p; r++) {
            double e = relerr((fp[r] - fm[r]) / (2 * h), col[r]);
            if (e > worst) worst = e;
        }
    }
    free(fp); free(fm); free(col);
    return worst;
}
