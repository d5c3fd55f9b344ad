/* HT driver (hand tracking): reads ADBench's hand model directory
 * (bones.txt: `name:parent:16 base-relative:16 inverse-base-absolute`;
 * vertices.txt: `x:y:z:5 ignored:n:(bone:weight) x n`; triangles.txt:
 * `a:b:c`) and a data file handK_t26_cN.txt (`N 26`; N lines `corr x y z`;
 * for the complicated variant N lines `u1 u2`; 26 values of theta). The
 * variant is told by the count of numbers in the file.
 *
 *     hand ksc|ref DATAFILE [MODELDIR]
 *
 * MODELDIR defaults to ../big-model next to the data file (ADBench's layout:
 * hand/simple_big/ and hand/big-model/).
 *
 * Outputs: the objective is err (3N), the derivative the Jacobian, row-major:
 * 3N x 26 with respect to theta (simple), 3N x 28 (complicated: the
 * compressed u block, then theta). */
#include "worker.h"
#include "../reference/hand.c"
#include "hand.h"

static ref_hand_model model;
static int n, complicated, ntriangles;
static int64_t *corr, *triangles;
static double *theta, *us, *points, *err, *jac, *verts;
static ks_arena *A;
static ks_T1f ktheta, kus, kbase_rel, kinv_base_abs, kpositions, kweights, kpoints;
static ks_T1i kparents, kcorr, ktriangles;

static FILE *open_model(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(1); }
    return f;
}

/* Splits a line at ':' into at most max fields; returns their number. */
static int fields(char *line, char **out, int max) {
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, ":\r\n", &save); t && k < max; t = strtok_r(NULL, ":\r\n", &save)) out[k++] = t;
    return k;
}

static void read_model(const char *dir) {
    static char line[1 << 16];
    char *fs[256];
    FILE *f = open_model(dir, "bones.txt");
    int64_t *parents = xmalloc(sizeof(int64_t) * REF_MAXBONES);
    double *rel = xmalloc(sizeof(double) * 16 * REF_MAXBONES), *inv = xmalloc(sizeof(double) * 16 * REF_MAXBONES);
    int nb = 0;
    while (fgets(line, sizeof line, f)) {
        int k = fields(line, fs, 256);
        if (k == 0) continue;
        if (k != 34 || nb == REF_MAXBONES) { fprintf(stderr, "bad bones.txt line %d\n", nb + 1); exit(1); }
        parents[nb] = atol(fs[1]);
        if (parents[nb] >= nb) { fprintf(stderr, "bones.txt: parent after its child\n"); exit(1); }
        for (int e = 0; e < 16; e++) {
            rel[16 * nb + e] = strtod(fs[2 + e], NULL);
            inv[16 * nb + e] = strtod(fs[18 + e], NULL);
        }
        nb++;
    }
    fclose(f);
    if (nb != 22) { fprintf(stderr, "bones.txt: %d bones, the pose needs 22\n", nb); exit(1); }
    f = open_model(dir, "vertices.txt");
    long cap = 1024, nv = 0;
    double *pos = xmalloc(sizeof(double) * 3 * cap), *w = xmalloc(sizeof(double) * nb * cap);
    while (fgets(line, sizeof line, f)) {
        int k = fields(line, fs, 256);
        if (k == 0) continue;
        if (nv == cap) {
            cap *= 2;
            pos = realloc(pos, sizeof(double) * 3 * cap);
            w = realloc(w, sizeof(double) * nb * cap);
            if (!pos || !w) { fprintf(stderr, "out of memory\n"); exit(1); }
        }
        int cnt = k >= 9 ? atoi(fs[8]) : -1;
        if (cnt < 0 || k != 9 + 2 * cnt) { fprintf(stderr, "bad vertices.txt line %ld\n", nv + 1); exit(1); }
        for (int j = 0; j < 3; j++) pos[3 * nv + j] = strtod(fs[j], NULL);
        for (int b = 0; b < nb; b++) w[nb * nv + b] = 0.0;
        for (int e = 0; e < cnt; e++) {
            int b = atoi(fs[9 + 2 * e]);
            if (b < 0 || b >= nb) { fprintf(stderr, "vertices.txt: bad bone %d\n", b); exit(1); }
            w[nb * nv + b] = strtod(fs[10 + 2 * e], NULL);
        }
        nv++;
    }
    fclose(f);
    f = open_model(dir, "triangles.txt");
    long tcap = 1024;
    triangles = xmalloc(sizeof(int64_t) * 3 * tcap);
    while (fgets(line, sizeof line, f)) {
        int k = fields(line, fs, 256);
        if (k == 0) continue;
        if (k != 3) { fprintf(stderr, "bad triangles.txt line %d\n", ntriangles + 1); exit(1); }
        if (ntriangles == tcap) {
            tcap *= 2;
            triangles = realloc(triangles, sizeof(int64_t) * 3 * tcap);
            if (!triangles) { fprintf(stderr, "out of memory\n"); exit(1); }
        }
        for (int c = 0; c < 3; c++) {
            long t = atol(fs[c]);
            if (t < 0 || t >= nv) { fprintf(stderr, "triangles.txt: bad vertex %ld\n", t); exit(1); }
            triangles[3 * ntriangles + c] = t;
        }
        ntriangles++;
    }
    fclose(f);
    model.nb = nb;
    model.nverts = (int)nv;
    model.parents = parents;
    model.base_relatives = rel;
    model.inverse_base_absolutes = inv;
    model.base_positions = pos;
    model.weights = w;
}

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool;
    char dir[4096];
    if (argc >= 1) {
        snprintf(dir, sizeof dir, "%s", argv[0]);
    } else {
        const char *slash = strrchr(path, '/');
        int len = slash ? (int)(slash - path) : 1;
        snprintf(dir, sizeof dir, "%.*s/../big-model", len, slash ? path : ".");
    }
    read_model(dir);
    FILE *f = open_data(path);
    n = (int)rd(f);
    if ((int)rd(f) != REF_NTHETA) { fprintf(stderr, "expected 26 parameters\n"); exit(1); }
    long cnt = 0, cap = 1024;
    double *v = xmalloc(sizeof(double) * cap), x;
    while (fscanf(f, "%lf", &x) == 1) {
        if (cnt == cap) {
            cap *= 2;
            v = realloc(v, sizeof(double) * cap);
            if (!v) { fprintf(stderr, "out of memory\n"); exit(1); }
        }
        v[cnt++] = x;
    }
    fclose(f);
    if (cnt == 6L * n + REF_NTHETA) complicated = 1;
    else if (cnt != 4L * n + REF_NTHETA) { fprintf(stderr, "bad hand data file: %ld numbers\n", cnt); exit(1); }
    corr = xmalloc(sizeof(int64_t) * n);
    points = xmalloc(sizeof(double) * 3 * n);
    us = xmalloc(sizeof(double) * 2 * n);
    theta = xmalloc(sizeof(double) * REF_NTHETA);
    long limit = complicated ? ntriangles : model.nverts;
    for (int i = 0; i < n; i++) {
        corr[i] = (int64_t)v[4 * i];
        if (corr[i] < 0 || corr[i] >= limit) { fprintf(stderr, "correspondence out of range\n"); exit(1); }
        for (int j = 0; j < 3; j++) points[3 * i + j] = v[4 * i + 1 + j];
    }
    long p = 4L * n;
    if (complicated)
        for (long i = 0; i < 2L * n; i++) us[i] = v[p++];
    for (int k = 0; k < REF_NTHETA; k++) theta[k] = v[p++];
    free(v);
    nout[OBJ] = 3 * n;
    nout[GRAD] = 3 * n * (REF_NTHETA + 2 * complicated);
    err = xmalloc(sizeof(double) * nout[OBJ]);
    jac = xmalloc(sizeof(double) * nout[GRAD]);
    verts = xmalloc(sizeof(double) * 3 * model.nverts);
    A = ks_arena_new();
    ktheta = (ks_T1f){REF_NTHETA, theta};
    kparents = (ks_T1i){model.nb, (int64_t *)model.parents};
    kbase_rel = (ks_T1f){16 * model.nb, (double *)model.base_relatives};
    kinv_base_abs = (ks_T1f){16 * model.nb, (double *)model.inverse_base_absolutes};
    kpositions = (ks_T1f){3L * model.nverts, (double *)model.base_positions};
    kweights = (ks_T1f){(long)model.nb * model.nverts, (double *)model.weights};
    kcorr = (ks_T1i){n, corr};
    kus = (ks_T1f){2L * n, us};
    ktriangles = (ks_T1i){3L * ntriangles, triangles};
    kpoints = (ks_T1f){3L * n, points};
}

static void call(int tool, int which, double *out) {
    int ncols = REF_NTHETA + 2 * complicated;
    if (tool == REF) {
        if (which == OBJ) {
            if (complicated)
                ref_hand_complicated_objective(&model, theta, us, triangles, n, corr, points, err, verts);
            else
                ref_hand_objective(&model, theta, n, corr, points, err, verts);
            sink = err[0];
            if (out) memcpy(out, err, sizeof(double) * nout[OBJ]);
        } else {
            if (complicated)
                ref_hand_complicated_jacobian(&model, theta, us, triangles, n, corr, points, err, jac, verts);
            else
                ref_hand_jacobian(&model, theta, n, corr, points, err, jac, verts);
            sink = jac[0];
            if (out) memcpy(out, jac, sizeof(double) * nout[GRAD]);
        }
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        ks_T1f e = complicated
            ? hand_complicated_objective(A, ktheta, kus, kparents, kbase_rel, kinv_base_abs, kpositions, kweights,
                                         ktriangles, kcorr, kpoints)
            : hand_objective(A, ktheta, kparents, kbase_rel, kinv_base_abs, kpositions, kweights, kcorr, kpoints);
        sink = e.data[0];
        if (out) memcpy(out, e.data, sizeof(double) * nout[OBJ]);
    } else {
#ifndef KSC_NO_GRAD
        /* ksc's Jacobian is a row-major 3N x ncols matrix. */
        ks_T2f J = complicated
            ? hand_complicated_jacobian(A, ktheta, kus, kparents, kbase_rel, kinv_base_abs, kpositions, kweights,
                                        ktriangles, kcorr, kpoints)
            : hand_jacobian(A, ktheta, kparents, kbase_rel, kinv_base_abs, kpositions, kweights, kcorr, kpoints);
        if (J.size[0] != 3L * n || J.size[1] != ncols) {
            fprintf(stderr, "ksc's Jacobian is %ld x %ld, not %ld x %d\n", (long)J.size[0], (long)J.size[1], 3L * n, ncols);
            exit(1);
        }
        sink = J.data[0];
        if (out) memcpy(out, J.data, sizeof(double) * 3 * n * ncols);
#else
        (void)ncols;
#endif
    }
    ks_arena_reset(A, mk);
}

/* Central differences of every column (theta, and for the complicated
 * variant all u_i1 at once and all u_i2 at once, as the compressed u block)
 * against the reference Jacobian. */
static void ref_residuals(double *e) {
    if (complicated) ref_hand_complicated_objective(&model, theta, us, triangles, n, corr, points, e, verts);
    else ref_hand_objective(&model, theta, n, corr, points, e, verts);
}

static double fd_error(void) {
    int ncols = REF_NTHETA + 2 * complicated;
    if (complicated) ref_hand_complicated_jacobian(&model, theta, us, triangles, n, corr, points, err, jac, verts);
    else ref_hand_jacobian(&model, theta, n, corr, points, err, jac, verts);
    double *ep = xmalloc(sizeof(double) * 3 * n), *em = xmalloc(sizeof(double) * 3 * n);
    double *u0 = xmalloc(sizeof(double) * 2 * n);
    memcpy(u0, us, sizeof(double) * 2 * n);
    double worst = 0, h = 1e-5;
    for (int c = 0; c < ncols; c++) {
        /* column c: u block first for the complicated variant */
        int k = c - 2 * complicated;
        double t0 = k >= 0 ? theta[k] : 0;
        for (int sign = 1; sign >= -1; sign -= 2) {
            if (k >= 0) theta[k] = t0 + sign * h;
            else for (int i = 0; i < n; i++) us[2 * i + c] = u0[2 * i + c] + sign * h;
            ref_residuals(sign > 0 ? ep : em);
        }
        if (k >= 0) theta[k] = t0;
        else memcpy(us, u0, sizeof(double) * 2 * n);
        for (long r = 0; r < 3L * n; r++) {
            double e = relerr((ep[r] - em[r]) / (2 * h), jac[r * ncols + c]);
            if (e > worst) worst = e;
        }
    }
    free(ep); free(em); free(u0);
    return worst;
}
