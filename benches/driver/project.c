/* `project` driver (seed 000's figure 11): one camera, N points. Data file
 * (.bin, benches/run.py's gen_project): N, the camera (11: r, C, f, x0,
 * kappa, ADBench's BA order), then the N points (3 each).
 *
 * "obj" is the 2N projections (point-major: point i's x, then y); "grad"
 * their Jacobian with respect to the camera and every point, in CSR (layout
 * in ../reference/project.c: 2N rows, 11 + 3N columns, 14 entries a row),
 * written as its 28N values, then its 2N + 1 row offsets, then its 28N
 * column indices. Both tools build the whole CSR matrix (structure and
 * values) in every timed call: ksc's `project_jacobian` is
 * `[jacsparse project_points]` of ksc-examples/adbench/project.ks, whose
 * arrays are copied into the output (untimed) when it is written. */
#include "worker.h"
#include "../reference/project.c"
#include "project.h"

static long N;
static double cam[11], *X, *res, *vals;
static long *rows, *cols;
static ks_arena *A;
static ks_T1f kcam;
static ks_T1t3fff kX;

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool; (void)argc; (void)argv;
    FILE *f = open_data(path);
    N = (long)rd(f);
    for (int k = 0; k < 11; k++) cam[k] = rd(f);
    X = xmalloc(sizeof(double) * 3 * N);
    for (long k = 0; k < 3 * N; k++) X[k] = rd(f);
    fclose(f);
    nout[OBJ] = 2 * N;
    nout[GRAD] = 28 * N + (2 * N + 1) + 28 * N;
    res = xmalloc(sizeof(double) * 2 * N);
    vals = xmalloc(sizeof(double) * 28 * N);
    rows = xmalloc(sizeof(long) * (2 * N + 1));
    cols = xmalloc(sizeof(long) * 28 * N);
    A = ks_arena_new();
    kcam = (ks_T1f){11, cam};
    /* The points as ksc's Vec (Tuple Float Float Float): the same memory
     * as the reference's N x 3 array. */
    kX = (ks_T1t3fff){N, (ks_t3fff *)X};
}

static void write_out(int which, double *out) {
    if (which == OBJ) {
        memcpy(out, res, sizeof(double) * 2 * N);
        return;
    }
    long q = 0;
    for (long k = 0; k < 28 * N; k++) out[q++] = vals[k];
    for (long k = 0; k <= 2 * N; k++) out[q++] = (double)rows[k];
    for (long k = 0; k < 28 * N; k++) out[q++] = (double)cols[k];
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) {
            ref_project_objective(N, cam, X, res);
            sink = res[0];
        } else {
            ref_project_jacobian(N, cam, X, vals, rows, cols);
            sink = vals[0];
        }
        if (out) write_out(which, out);
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        ks_T1t2ff r = project_points(A, kcam, kX);
        sink = r.data[0].f0;
        if (out)
            for (long i = 0; i < N; i++) {
                res[2 * i] = r.data[i].f0;
                res[2 * i + 1] = r.data[i].f1;
            }
    } else {
#ifndef KSC_NO_GRAD
        /* ksc's [jacsparse project_points]: shape, row offsets, columns, values. */
        ks_t4t2iiT1iT1iT1f J = project_jacobian(A, kcam, kX);
        if (J.f0.f0 != 2 * N || J.f0.f1 != 11 + 3 * N || J.f1.size != 2 * N + 1 || J.f2.size != 28 * N ||
            J.f3.size != 28 * N) {
            fprintf(stderr, "ksc's sparse Jacobian is %ld x %ld with %ld entries, not 2N x (11 + 3N) with 28N\n",
                    (long)J.f0.f0, (long)J.f0.f1, (long)J.f3.size);
            exit(1);
        }
        sink = J.f3.data[0];
        if (out) {
            memcpy(vals, J.f3.data, sizeof(double) * 28 * N);
            for (long k = 0; k <= 2 * N; k++) rows[k] = (long)J.f1.data[k];
            for (long k = 0; k < 28 * N; k++) cols[k] = (long)J.f2.data[k];
        }
#endif
    }
    if (out) write_out(which, out);
    ks_arena_reset(A, mk);
}

/* Central finite differences of the 2N projections along every camera
 * parameter and the 3 coordinates of the first, a middle and the last
 * point, against the column of the reference's CSR Jacobian (so zeros
 * outside the sparsity pattern are checked too). */
static double fd_error(void) {
    ref_project_jacobian(N, cam, X, vals, rows, cols);
    double *fp = xmalloc(sizeof(double) * 2 * N), *fm = xmalloc(sizeof(double) * 2 * N);
    double *col = xmalloc(sizeof(double) * 2 * N);
    double worst = 0, h = 1e-5;
    long cand[20];
    int nc = 0;
    for (int k = 0; k < 11; k++) cand[nc++] = k;
    for (int k = 0; k < 3; k++) {
        cand[nc++] = 11 + k;
        cand[nc++] = 11 + 3 * (N / 2) + k;
        cand[nc++] = 11 + 3 * (N - 1) + k;
    }
    for (int c = 0; c < nc; c++) {
        long j = cand[c];
        double *x = j < 11 ? &cam[j] : &X[j - 11];
        double x0 = *x;
        *x = x0 + h; ref_project_objective(N, cam, X, fp);
        *x = x0 - h; ref_project_objective(N, cam, X, fm);
        *x = x0;
        memset(col, 0, sizeof(double) * 2 * N);
        for (long r = 0; r < 2 * N; r++)
            for (long k = rows[r]; k < rows[r + 1]; k++)
                if (cols[k] == j) col[r] += vals[k];
        for (long r = 0; r < 2 * N; r++) {
            double e = relerr((fp[r] - fm[r]) / (2 * h), col[r]);
            if (e > worst) worst = e;
        }
    }
    free(fp); free(fm); free(col);
    return worst;
}
