/* Hand-written C reference of the `project` experiment of seed 000 (figure
 * 11): the projections of N points by one camera of ADBench's bundle
 * adjustment, and their Jacobian, written from the formulas for this
 * project (the camera model and the chain rule are those of ba.c).
 *
 * Camera cam = [r (3), C (3), f, x0 (2), kappa (2)], points X_i (3).
 * Xo = X - C; theta = |r|, v = r / theta; Xcam = R Xo with
 * R = cos theta I + sin theta [v]x + (1 - cos theta) v v^T (Rodrigues; for
 * theta = 0, R = I + [r]x); p = Xcam[0:2] / Xcam[2], s = |p|^2,
 * L = 1 + kappa1 s + kappa2 s^2, proj = p L f + x0.
 *
 * Layout: the objective is the 2N projections, point-major (point i's x,
 * then y). The Jacobian (with respect to the camera and every point) is CSR
 * with 2N rows and 11 + 3N columns (the camera's 11, then point i's 3 at
 * 11 + 3i): rows 2i and 2i + 1 have 14 entries each, the camera's 11
 * columns then point i's 3 (ascending), including the principal point's
 * structural zero (d proj_x / d x0_y); 28N entries.
 *
 * The values are derived by hand (the chain rule through theta and
 * v = r / theta, then the projection), not by AD; what depends on the camera
 * only (theta, its sine and cosine, v, R and dv/dr) is computed once, outside
 * the loop over the points. benches/run.py checks them against central
 * finite differences. */
#include <math.h>
#include <string.h>

/* What the camera's rotation contributes to every point. */
typedef struct {
    int small;         /* theta = 0: R = I + [r]x */
    double th, c, s;   /* theta, cos theta, sin theta */
    double v[3];       /* r / theta */
    double R[3][3];    /* dXcam / dXo */
    double P[3][3];    /* dv / dr = (I - v v^T) / theta */
} ref_rotation;

static void ref_project_rotation(const double *cam, ref_rotation *q) {
    const double *r = cam;
    double sq = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    q->small = sq == 0.0;
    if (!q->small) {
        double th = sqrt(sq), c = cos(th), s = sin(th);
        q->th = th; q->c = c; q->s = s;
        for (int k = 0; k < 3; k++) q->v[k] = r[k] / th;
        const double *v = q->v;
        double vm[3][3] = {{0, -v[2], v[1]}, {v[2], 0, -v[0]}, {-v[1], v[0], 0}};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                q->R[a][b] = (a == b ? c : 0.0) + s * vm[a][b] + (1.0 - c) * v[a] * v[b];
                q->P[a][b] = ((a == b ? 1.0 : 0.0) - v[a] * v[b]) / th;
            }
    } else {
        double rm[3][3] = {{0, -r[2], r[1]}, {r[2], 0, -r[0]}, {-r[1], r[0], 0}};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) q->R[a][b] = (a == b ? 1.0 : 0.0) + rm[a][b];
    }
}

/* Xcam of one point. */
static void ref_project_rotate(const ref_rotation *q, const double *cam, const double *X, double *xo, double *xc) {
    for (int k = 0; k < 3; k++) xo[k] = X[k] - cam[3 + k];
    for (int a = 0; a < 3; a++) xc[a] = q->R[a][0] * xo[0] + q->R[a][1] * xo[1] + q->R[a][2] * xo[2];
}

/* The 2N projections. */
static void ref_project_objective(long N, const double *cam, const double *X, double *out) {
    ref_rotation q;
    ref_project_rotation(cam, &q);
    double f = cam[6], k1 = cam[9], k2 = cam[10];
    for (long i = 0; i < N; i++) {
        double xo[3], xc[3];
        ref_project_rotate(&q, cam, &X[3 * i], xo, xc);
        double px = xc[0] / xc[2], py = xc[1] / xc[2];
        double s = px * px + py * py;
        double L = 1.0 + k1 * s + k2 * s * s;
        out[2 * i] = px * L * f + cam[7];
        out[2 * i + 1] = py * L * f + cam[8];
    }
}

/* The CSR structure: rows (2N + 1), cols (28N). */
static void ref_project_structure(long N, long *rows, long *cols) {
    for (long i = 0; i < N; i++)
        for (int a = 0; a < 2; a++) {
            long *c = &cols[28 * i + 14 * a];
            rows[2 * i + a] = 28 * i + 14 * a;
            for (int k = 0; k < 11; k++) c[k] = k;
            for (int k = 0; k < 3; k++) c[11 + k] = 11 + 3 * i + k;
        }
    rows[2 * N] = 28 * N;
}

/* The Jacobian in CSR: vals (28N), rows (2N + 1), cols (28N). */
static void ref_project_jacobian(long N, const double *cam, const double *X, double *vals, long *rows, long *cols) {
    ref_project_structure(N, rows, cols);
    ref_rotation q;
    ref_project_rotation(cam, &q);
    double f = cam[6], k1 = cam[9], k2 = cam[10];
    const double *v = q.v;
    for (long i = 0; i < N; i++) {
        double xo[3], xc[3], Dr[3][3]; /* Dr = dXcam / dr */
        ref_project_rotate(&q, cam, &X[3 * i], xo, xc);
        double xm[3][3] = {{0, -xo[2], xo[1]}, {xo[2], 0, -xo[0]}, {-xo[1], xo[0], 0}};
        if (!q.small) {
            /* With v and theta independent:
             * dXcam/dtheta = -s Xo + c (v x Xo) + s (v . Xo) v,
             * dXcam/dv = -s [Xo]x + (1 - c)((v . Xo) I + v Xo^T);
             * then dtheta/dr = v^T, dv/dr = P. */
            double c = q.c, s = q.s;
            double vx[3] = {v[1] * xo[2] - v[2] * xo[1], v[2] * xo[0] - v[0] * xo[2], v[0] * xo[1] - v[1] * xo[0]};
            double vdx = v[0] * xo[0] + v[1] * xo[1] + v[2] * xo[2];
            double dth[3], dv[3][3];
            for (int a = 0; a < 3; a++) {
                dth[a] = -s * xo[a] + c * vx[a] + s * vdx * v[a];
                for (int b = 0; b < 3; b++) dv[a][b] = -s * xm[a][b] + (1.0 - c) * ((a == b ? vdx : 0.0) + v[a] * xo[b]);
            }
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    Dr[a][b] = dth[a] * v[b] + dv[a][0] * q.P[0][b] + dv[a][1] * q.P[1][b] + dv[a][2] * q.P[2][b];
        } else {
            /* Xcam = Xo + r x Xo: dXcam/dr = -[Xo]x. */
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) Dr[a][b] = -xm[a][b];
        }
        double iz = 1.0 / xc[2];
        double p[2] = {xc[0] * iz, xc[1] * iz};
        double s = p[0] * p[0] + p[1] * p[1];
        double L = 1.0 + k1 * s + k2 * s * s;
        double dLds = k1 + 2.0 * k2 * s;
        double dp[2][3] = {{iz, 0.0, -p[0] * iz}, {0.0, iz, -p[1] * iz}}; /* dp / dXcam */
        for (int a = 0; a < 2; a++) {
            /* d proj_a / d p_b = f (L delta_ab + 2 p_a p_b dL/ds); then through Xcam. */
            double dq[2], dx[3];
            for (int b = 0; b < 2; b++) dq[b] = f * ((a == b ? L : 0.0) + p[a] * dLds * 2.0 * p[b]);
            for (int k = 0; k < 3; k++) dx[k] = dq[0] * dp[0][k] + dq[1] * dp[1][k];
            double *row = &vals[28 * i + 14 * a];
            for (int b = 0; b < 3; b++) {
                double dr = 0.0, dX = 0.0;
                for (int k = 0; k < 3; k++) {
                    dr += dx[k] * Dr[k][b];
                    dX += dx[k] * q.R[k][b];
                }
                row[b] = dr;       /* rotation */
                row[3 + b] = -dX;  /* centre: Xo = X - C */
                row[11 + b] = dX;  /* the point */
            }
            row[6] = p[a] * L;             /* focal length */
            row[7] = a == 0 ? 1.0 : 0.0;   /* principal point */
            row[8] = a == 1 ? 1.0 : 0.0;
            row[9] = p[a] * f * s;         /* kappa1 */
            row[10] = p[a] * f * s * s;    /* kappa2 */
        }
    }
}
