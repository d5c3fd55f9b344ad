/* Hand-written C reference of ADBench's bundle adjustment
 * (shared/docs/benchmarks.md), written from the formulas for this project.
 *
 * Camera c = [r (3), C (3), f, x0 (2), kappa (2)], point X (3), weight w,
 * feature m (2). Xo = X - C; theta^2 = |r|^2; if theta^2 != 0, v = r / theta
 * and Xcam = Xo cos theta + (v x Xo) sin theta + v (v . Xo)(1 - cos theta),
 * else Xcam = Xo + r x Xo. p = Xcam[0:2] / Xcam[2], s = |p|^2,
 * L = 1 + kappa1 s + kappa2 s^2, proj = p L f + x0. Residuals of observation
 * i: w (proj - m) (2 values) and 1 - w^2.
 *
 * Layout (ADBench's): the residual vector is the 2p reprojection residuals
 * (observation-major, x then y), then the p weight residuals. The Jacobian
 * is CSR with 3p rows and 11n + 3m + p columns (cameras, then points, then
 * weights): row 2i + a (a = 0, 1) has 15 entries, camera cam_idx[i]'s 11
 * columns, point pt_idx[i]'s 3, weight i's (in this order, which is
 * ascending); row 2p + i has one entry, weight i's, -2 w_i. 31p nonzeros.
 *
 * The Jacobian's values are derived by hand (the chain rule through theta
 * and v = r / theta for the rotation, then the projection), not by AD;
 * benches/run.py checks them against central finite differences. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Xcam of one observation (cam: 11 numbers, X: 3). */
static void ref_ba_rotate(const double *cam, const double *X, double *xc) {
    const double *r = cam;
    double xo[3] = {X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]};
    double sq = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    if (sq != 0.0) {
        double th = sqrt(sq), c = cos(th), s = sin(th);
        double v[3] = {r[0] / th, r[1] / th, r[2] / th};
        double vx[3] = {v[1] * xo[2] - v[2] * xo[1], v[2] * xo[0] - v[0] * xo[2], v[0] * xo[1] - v[1] * xo[0]};
        double t = (v[0] * xo[0] + v[1] * xo[1] + v[2] * xo[2]) * (1.0 - c);
        for (int k = 0; k < 3; k++) xc[k] = xo[k] * c + vx[k] * s + v[k] * t;
    } else {
        double rx[3] = {r[1] * xo[2] - r[2] * xo[1], r[2] * xo[0] - r[0] * xo[2], r[0] * xo[1] - r[1] * xo[0]};
        for (int k = 0; k < 3; k++) xc[k] = xo[k] + rx[k];
    }
}

/* The two reprojection residuals of one observation. */
static void ref_ba_reproj(const double *cam, const double *X, double w, const double *feat, double *err) {
    double xc[3];
    ref_ba_rotate(cam, X, xc);
    double px = xc[0] / xc[2], py = xc[1] / xc[2];
    double s = px * px + py * py;
    double L = 1.0 + cam[9] * s + cam[10] * s * s;
    err[0] = w * (px * L * cam[6] + cam[7] - feat[0]);
    err[1] = w * (py * L * cam[6] + cam[8] - feat[1]);
}

/* The residual vector (3p): reprojection residuals, then weight residuals. */
static void ref_ba_objective(int n, int m, int p, const double *cams, const double *X, const double *w,
                             const double *feats, const int *cam_idx, const int *pt_idx, double *out) {
    (void)n; (void)m;
    for (int i = 0; i < p; i++)
        ref_ba_reproj(&cams[11 * cam_idx[i]], &X[3 * pt_idx[i]], w[i], &feats[2 * i], &out[2 * i]);
    for (int i = 0; i < p; i++) out[2 * p + i] = 1.0 - w[i] * w[i];
}

/* The local Jacobian of one observation: J[a * 15 + k], rows a = x, y;
 * columns cam (11), X (3), w. */
static void ref_ba_local_jacobian(const double *cam, const double *X, double w, const double *feat, double *J) {
    const double *r = cam;
    double xo[3] = {X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]};
    double xc[3];
    double R[3][3];   /* dXcam / dXo */
    double Dr[3][3];  /* dXcam / dr */
    double sq = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    if (sq != 0.0) {
        double th = sqrt(sq), c = cos(th), s = sin(th);
        double v[3] = {r[0] / th, r[1] / th, r[2] / th};
        double vx[3] = {v[1] * xo[2] - v[2] * xo[1], v[2] * xo[0] - v[0] * xo[2], v[0] * xo[1] - v[1] * xo[0]};
        double vdx = v[0] * xo[0] + v[1] * xo[1] + v[2] * xo[2];
        for (int k = 0; k < 3; k++) xc[k] = xo[k] * c + vx[k] * s + v[k] * vdx * (1.0 - c);
        /* R = c I + s [v]x + (1 - c) v v^T, where [v]x y = v x y. */
        double vm[3][3] = {{0, -v[2], v[1]}, {v[2], 0, -v[0]}, {-v[1], v[0], 0}};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) R[a][b] = (a == b ? c : 0.0) + s * vm[a][b] + (1.0 - c) * v[a] * v[b];
        /* Partial derivatives with v and theta independent:
         * dXcam/dtheta = -s Xo + c (v x Xo) + s (v . Xo) v,
         * dXcam/dv = -s [Xo]x + (1 - c)((v . Xo) I + v Xo^T)   (v x Xo = -[Xo]x v). */
        double dth[3], dv[3][3];
        double xm[3][3] = {{0, -xo[2], xo[1]}, {xo[2], 0, -xo[0]}, {-xo[1], xo[0], 0}};
        for (int a = 0; a < 3; a++) {
            dth[a] = -s * xo[a] + c * vx[a] + s * vdx * v[a];
            for (int b = 0; b < 3; b++)
                dv[a][b] = -s * xm[a][b] + (1.0 - c) * ((a == b ? vdx : 0.0) + v[a] * xo[b]);
        }
        /* dtheta/dr = v^T, dv/dr = (I - v v^T) / theta. */
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                double t = dth[a] * v[b];
                for (int k = 0; k < 3; k++) t += dv[a][k] * ((k == b ? 1.0 : 0.0) - v[k] * v[b]) / th;
                Dr[a][b] = t;
            }
    } else {
        /* Xcam = Xo + r x Xo: dXcam/dXo = I + [r]x, dXcam/dr = -[Xo]x. */
        double rx[3] = {r[1] * xo[2] - r[2] * xo[1], r[2] * xo[0] - r[0] * xo[2], r[0] * xo[1] - r[1] * xo[0]};
        for (int k = 0; k < 3; k++) xc[k] = xo[k] + rx[k];
        double rm[3][3] = {{0, -r[2], r[1]}, {r[2], 0, -r[0]}, {-r[1], r[0], 0}};
        double xm[3][3] = {{0, -xo[2], xo[1]}, {xo[2], 0, -xo[0]}, {-xo[1], xo[0], 0}};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                R[a][b] = (a == b ? 1.0 : 0.0) + rm[a][b];
                Dr[a][b] = -xm[a][b];
            }
    }
    double f = cam[6], k1 = cam[9], k2 = cam[10];
    double iz = 1.0 / xc[2];
    double p[2] = {xc[0] * iz, xc[1] * iz};
    double s = p[0] * p[0] + p[1] * p[1];
    double L = 1.0 + k1 * s + k2 * s * s;
    double dLds = k1 + 2.0 * k2 * s;
    /* dp/dXcam (2 x 3). */
    double dp[2][3] = {{iz, 0.0, -p[0] * iz}, {0.0, iz, -p[1] * iz}};
    for (int a = 0; a < 2; a++) {
        /* d proj_a / d p_b = f (L delta_ab + p_a dL/ds 2 p_b); then through Xcam. */
        double dq[2];
        for (int b = 0; b < 2; b++) dq[b] = f * ((a == b ? L : 0.0) + p[a] * dLds * 2.0 * p[b]);
        double dx[3]; /* w d proj_a / d Xcam */
        for (int k = 0; k < 3; k++) dx[k] = w * (dq[0] * dp[0][k] + dq[1] * dp[1][k]);
        double *row = &J[a * 15];
        for (int b = 0; b < 3; b++) {
            double dr = 0.0, dX = 0.0;
            for (int k = 0; k < 3; k++) {
                dr += dx[k] * Dr[k][b];
                dX += dx[k] * R[k][b];
            }
            row[b] = dr;        /* rotation */
            row[3 + b] = -dX;   /* centre: Xo = X - C */
            row[11 + b] = dX;   /* point */
        }
        row[6] = w * p[a] * L;                  /* focal length */
        row[7] = a == 0 ? w : 0.0;              /* principal point */
        row[8] = a == 1 ? w : 0.0;
        row[9] = w * p[a] * f * s;              /* kappa1 */
        row[10] = w * p[a] * f * s * s;         /* kappa2 */
        row[14] = p[a] * L * f + cam[7 + a] - feat[a]; /* weight */
    }
}

/* The CSR structure of the Jacobian: rows (3p + 1), cols (31p). */
static void ref_ba_structure(int n, int m, int p, const int *cam_idx, const int *pt_idx, int *rows, int *cols) {
    for (int i = 0; i < p; i++) {
        for (int a = 0; a < 2; a++) {
            int *c = &cols[30 * i + 15 * a];
            rows[2 * i + a] = 30 * i + 15 * a;
            for (int k = 0; k < 11; k++) c[k] = 11 * cam_idx[i] + k;
            for (int k = 0; k < 3; k++) c[11 + k] = 11 * n + 3 * pt_idx[i] + k;
            c[14] = 11 * n + 3 * m + i;
        }
    }
    for (int i = 0; i < p; i++) {
        rows[2 * p + i] = 30 * p + i;
        cols[30 * p + i] = 11 * n + 3 * m + i;
    }
    rows[3 * p] = 31 * p;
}

/* The Jacobian in CSR: vals (31p), rows (3p + 1), cols (31p). */
static void ref_ba_jacobian(int n, int m, int p, const double *cams, const double *X, const double *w,
                            const double *feats, const int *cam_idx, const int *pt_idx, double *vals, int *rows,
                            int *cols) {
    ref_ba_structure(n, m, p, cam_idx, pt_idx, rows, cols);
    for (int i = 0; i < p; i++)
        ref_ba_local_jacobian(&cams[11 * cam_idx[i]], &X[3 * pt_idx[i]], w[i], &feats[2 * i], &vals[30 * i]);
    for (int i = 0; i < p; i++) vals[30 * p + i] = -2.0 * w[i];
}
