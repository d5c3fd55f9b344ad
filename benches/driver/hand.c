/* HT driver (hand tracking, simple variant): reads ADBench's hand model
 * directory (bones.txt: `name:parent:16 base-relative:16 inverse-base-absolute`;
 * vertices.txt: `x:y:z:5 ignored:n:(bone:weight) x n`) and a data file
 * handK_t26_cN.txt (`N 26`; N lines `corr x y z`; 26 values of theta).
 *
 *     hand ksc|ref DATAFILE [MODELDIR]
 *
 * MODELDIR defaults to ../big-model next to the data file (ADBench's layout:
 * hand/simple_big/ and hand/big-model/).
 *
 * Outputs: the objective is err (3N), the derivative the Jacobian with
 * respect to theta, row-major 3N x 26. */
#include "worker.h"
#include "../reference/hand.c"
#include "hand.h"

static ref_hand_model model;
static int n;
static int64_t *corr;
static double *theta, *points, *err, *jac, *verts;
static ks_arena *A;
static ks_T1f ktheta, kbase_rel, kinv_base_abs, kpositions, kweights, kpoints;
static ks_T1i kparents, kcorr;

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
    corr = xmalloc(sizeof(int64_t) * n);
    points = xmalloc(sizeof(double) * 3 * n);
    theta = xmalloc(sizeof(double) * REF_NTHETA);
    for (int i = 0; i < n; i++) {
        corr[i] = (int64_t)rd(f);
        if (corr[i] < 0 || corr[i] >= model.nverts) { fprintf(stderr, "correspondence out of range\n"); exit(1); }
        for (int j = 0; j < 3; j++) points[3 * i + j] = rd(f);
    }
    for (int k = 0; k < REF_NTHETA; k++) theta[k] = rd(f);
    fclose(f);
    nout[OBJ] = 3 * n;
    nout[GRAD] = 3 * n * REF_NTHETA;
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
    kpoints = (ks_T1f){3L * n, points};
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) {
            ref_hand_objective(&model, theta, n, corr, points, err, verts);
            sink = err[0];
            if (out) memcpy(out, err, sizeof(double) * nout[OBJ]);
        } else {
            ref_hand_jacobian(&model, theta, n, corr, points, err, jac, verts);
            sink = jac[0];
            if (out) memcpy(out, jac, sizeof(double) * nout[GRAD]);
        }
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        ks_T1f e = hand_objective(A, ktheta, kparents, kbase_rel, kinv_base_abs, kpositions, kweights, kcorr, kpoints);
        sink = e.data[0];
        if (out) memcpy(out, e.data, sizeof(double) * nout[OBJ]);
    } else {
#ifndef KSC_NO_GRAD
        ks_T1T1f J = hand_jacobian(A, ktheta, kparents, kbase_rel, kinv_base_abs, kpositions, kweights, kcorr, kpoints);
        sink = J.data[0].data[0];
        if (out)
            for (long r = 0; r < 3L * n; r++) memcpy(&out[r * REF_NTHETA], J.data[r].data, sizeof(double) * REF_NTHETA);
#endif
    }
    ks_arena_reset(A, mk);
}

/* Central differences of every theta column against the reference Jacobian. */
static double fd_error(void) {
    ref_hand_jacobian(&model, theta, n, corr, points, err, jac, verts);
    double *ep = xmalloc(sizeof(double) * 3 * n), *em = xmalloc(sizeof(double) * 3 * n);
    double worst = 0, h = 1e-5;
    for (int k = 0; k < REF_NTHETA; k++) {
        double t0 = theta[k];
        theta[k] = t0 + h; ref_hand_objective(&model, theta, n, corr, points, ep, verts);
        theta[k] = t0 - h; ref_hand_objective(&model, theta, n, corr, points, em, verts);
        theta[k] = t0;
        for (long r = 0; r < 3L * n; r++) {
            double e = relerr((ep[r] - em[r]) / (2 * h), jac[r * REF_NTHETA + k]);
            if (e > worst) worst = e;
        }
    }
    free(ep); free(em);
    return worst;
}
