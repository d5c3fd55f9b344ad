/* Hand-written C reference of ADBench's hand tracking objective
 * (shared/docs/benchmarks.md), written from the formulas for this project.
 * Simple variant: the residuals err = Y - V[:, corr] (3N, err[3i + j]) and
 * their Jacobian with respect to theta (3N x 26, row-major). Complicated
 * variant: points on triangles at barycentric parameters us (N x 2), the
 * Jacobian 3N x 28 (the u block compressed to 2 columns, then theta).
 *
 * Model layout (flat, row-major; the same arrays ksc-examples/adbench/hand.ks
 * takes): parents (nb), base_relatives and inverse_base_absolutes (nb x 16,
 * 4 x 4 row-major each), base_positions (nverts x 3), weights (nverts x nb),
 * correspondences (N), points (N x 3).
 *
 * The objective follows ADBench's construction: the pose columns of the
 * bones from theta, R_b = Rz Ry Rx, relative_b = base_relative_b [R_b 0; 0 1],
 * absolute_b = absolute_parent relative_b, transform_b = absolute_b
 * inverse_base_absolute_b, linear blend skinning of every vertex of the model
 * (dense over the bones), then the global angle-axis rotation and the
 * translation.
 *
 * The Jacobian is hand-derived forward mode: the derivatives of every bone
 * transform with respect to the finger angles it depends on (a chain of 4 x 4
 * products along the parents), of the global rotation with respect to its
 * angle-axis vector (3-direction dual numbers), then only the N vertices that
 * have a correspondence are skinned with their tangents (after the residuals,
 * which skin every vertex). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REF_NTHETA 26
#define REF_MAXBONES 64

typedef struct {
    int nb, nverts;
    const int64_t *parents;
    const double *base_relatives, *inverse_base_absolutes, *base_positions, *weights;
} ref_hand_model;

/* Pose column of bone b (angles x, z, y) and the theta index of each angle
 * (-1: the angle is zero). Finger f = (b - 1) / 4 owns bones 4f + 1 .. 4f + 4;
 * its segment 2 takes theta[6 + 4f] (x) and theta[7 + 4f] (z), segments 3
 * and 4 theta[8 + 4f] and theta[9 + 4f] (x); other bones keep zero pose. */
static void ref_bone_pose_index(int b, int idx[3]) {
    idx[0] = idx[1] = idx[2] = -1;
    if (b < 1 || b > 20) return;
    int f = (b - 1) / 4, seg = (b - 1) % 4;
    if (seg == 1) { idx[0] = 6 + 4 * f; idx[1] = 7 + 4 * f; }
    else if (seg >= 2) idx[0] = 6 + seg + 4 * f;
}

/* c = a b for n x n row-major matrices. */
static void ref_matn_mul(int n, const double *a, const double *b, double *c) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s += a[n * i + k] * b[n * k + j];
            c[n * i + j] = s;
        }
}

/* R = Rz(tz) Ry(ty) Rx(tx); if dR is not NULL, also dR/dtx (dR[0..8]),
 * dR/dtz (dR[9..17]) and dR/dty (dR[18..26]). */
static void ref_euler(double tx, double tz, double ty, double *R, double *dR) {
    double cx = cos(tx), sx = sin(tx), cy = cos(ty), sy = sin(ty), cz = cos(tz), sz = sin(tz);
    double Rx[9] = {1, 0, 0, 0, cx, -sx, 0, sx, cx}, Ry[9] = {cy, 0, sy, 0, 1, 0, -sy, 0, cy},
           Rz[9] = {cz, -sz, 0, sz, cz, 0, 0, 0, 1}, zy[9];
    ref_matn_mul(3, Rz, Ry, zy);
    ref_matn_mul(3, zy, Rx, R);
    if (!dR) return;
    double dRx[9] = {0, 0, 0, 0, -sx, -cx, 0, cx, -sx}, dRy[9] = {-sy, 0, cy, 0, 0, 0, -cy, 0, -sy},
           dRz[9] = {-sz, -cz, 0, cz, -sz, 0, 0, 0, 0}, t[9];
    ref_matn_mul(3, zy, dRx, dR);
    ref_matn_mul(3, dRz, Ry, t);
    ref_matn_mul(3, t, Rx, dR + 9);
    ref_matn_mul(3, Rz, dRy, t);
    ref_matn_mul(3, t, Rx, dR + 18);
}

/* Numbers with 3 tangent components (for the angle-axis rotation). */
typedef struct { double v, d[3]; } ref_dual3;
static ref_dual3 d3c(double v) { ref_dual3 r = {v, {0, 0, 0}}; return r; }
static ref_dual3 d3add(ref_dual3 a, ref_dual3 b) { for (int k = 0; k < 3; k++) a.d[k] += b.d[k]; a.v += b.v; return a; }
static ref_dual3 d3sub(ref_dual3 a, ref_dual3 b) { for (int k = 0; k < 3; k++) a.d[k] -= b.d[k]; a.v -= b.v; return a; }
static ref_dual3 d3mul(ref_dual3 a, ref_dual3 b) {
    ref_dual3 r; r.v = a.v * b.v;
    for (int k = 0; k < 3; k++) r.d[k] = a.d[k] * b.v + a.v * b.d[k];
    return r;
}
static ref_dual3 d3div(ref_dual3 a, ref_dual3 b) {
    ref_dual3 r; r.v = a.v / b.v;
    for (int k = 0; k < 3; k++) r.d[k] = (a.d[k] - r.v * b.d[k]) / b.v;
    return r;
}
static ref_dual3 d3f(ref_dual3 a, double f, double df) {
    ref_dual3 r; r.v = f;
    for (int k = 0; k < 3; k++) r.d[k] = df * a.d[k];
    return r;
}

/* Rotation of the angle-axis vector a (identity below norm 1e-4); with
 * dR (27) also its derivatives with respect to a[0], a[1], a[2]. */
static void ref_angle_axis(const double *a, double *R, double *dR) {
    ref_dual3 x = {a[0], {1, 0, 0}}, y = {a[1], {0, 1, 0}}, z = {a[2], {0, 0, 1}};
    ref_dual3 sq = d3add(d3add(d3mul(x, x), d3mul(y, y)), d3mul(z, z));
    double nv = sqrt(sq.v);
    ref_dual3 out[9];
    if (nv < 0.0001) {
        for (int i = 0; i < 9; i++) out[i] = d3c(i % 4 == 0 ? 1.0 : 0.0);
    } else {
        ref_dual3 n = d3f(sq, nv, 0.5 / nv);
        x = d3div(x, n); y = d3div(y, n); z = d3div(z, n);
        ref_dual3 s = d3f(n, sin(n.v), cos(n.v)), c = d3f(n, cos(n.v), -sin(n.v));
        ref_dual3 one = d3c(1.0), oc = d3sub(one, c);
        out[0] = d3add(d3mul(x, x), d3mul(d3sub(one, d3mul(x, x)), c));
        out[1] = d3sub(d3mul(d3mul(x, y), oc), d3mul(z, s));
        out[2] = d3add(d3mul(d3mul(x, z), oc), d3mul(y, s));
        out[3] = d3add(d3mul(d3mul(x, y), oc), d3mul(z, s));
        out[4] = d3add(d3mul(y, y), d3mul(d3sub(one, d3mul(y, y)), c));
        out[5] = d3sub(d3mul(d3mul(y, z), oc), d3mul(x, s));
        out[6] = d3sub(d3mul(d3mul(x, z), oc), d3mul(y, s));
        out[7] = d3add(d3mul(d3mul(z, y), oc), d3mul(x, s));
        out[8] = d3add(d3mul(z, z), d3mul(d3sub(one, d3mul(z, z)), c));
    }
    for (int i = 0; i < 9; i++) {
        R[i] = out[i].v;
        if (dR)
            for (int k = 0; k < 3; k++) dR[9 * k + i] = out[i].d[k];
    }
}

/* base [R 0; 0 1] (R 3 x 3); with R = NULL and dR given: base [dR 0; 0 0]. */
static void ref_posed(const double *base, const double *R, double *out, int tangent) {
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 3; j++)
            out[4 * i + j] = base[4 * i] * R[j] + base[4 * i + 1] * R[3 + j] + base[4 * i + 2] * R[6 + j];
        out[4 * i + 3] = tangent ? 0.0 : base[4 * i + 3];
    }
}

/* The bone transforms (nb x 16). With dT (nb x 26 x 16) and dep (nb x 26),
 * also their derivatives with respect to theta, dep[b][k] telling whether
 * transform b depends on theta[k] at all (dT is then only written there). */
static void ref_transforms(const ref_hand_model *m, const double *theta, double *T, double *dT, char *dep) {
    double rel[16], absl[REF_MAXBONES][16], R[9], dR[27];
    static double dabs[REF_MAXBONES][REF_NTHETA][16];
    for (int b = 0; b < m->nb; b++) {
        int idx[3];
        ref_bone_pose_index(b, idx);
        double ang[3];
        for (int a = 0; a < 3; a++) ang[a] = idx[a] < 0 ? 0.0 : theta[idx[a]];
        ref_euler(ang[0], ang[1], ang[2], R, dT ? dR : NULL);
        const double *base = &m->base_relatives[16 * b];
        ref_posed(base, R, rel, 0);
        long p = (long)m->parents[b];
        if (p < 0) memcpy(absl[b], rel, sizeof rel);
        else ref_matn_mul(4, absl[p], rel, absl[b]);
        ref_matn_mul(4, absl[b], &m->inverse_base_absolutes[16 * b], &T[16 * b]);
        if (!dT) continue;
        /* d absolute_b = d absolute_p relative_b + absolute_p d relative_b */
        char *db = &dep[REF_NTHETA * b];
        memset(db, 0, REF_NTHETA);
        if (p >= 0)
            for (int k = 0; k < REF_NTHETA; k++)
                if (dep[REF_NTHETA * p + k]) {
                    ref_matn_mul(4, dabs[p][k], rel, dabs[b][k]);
                    db[k] = 1;
                }
        for (int a = 0; a < 3; a++) {
            int k = idx[a];
            if (k < 0) continue;
            double drel[16], t[16];
            ref_posed(base, dR + 9 * a, drel, 1);
            if (p >= 0) ref_matn_mul(4, absl[p], drel, t);
            else memcpy(t, drel, sizeof t);
            if (db[k])
                for (int e = 0; e < 16; e++) dabs[b][k][e] += t[e];
            else
                memcpy(dabs[b][k], t, sizeof t);
            db[k] = 1;
        }
        for (int k = 0; k < REF_NTHETA; k++)
            if (db[k]) ref_matn_mul(4, dabs[b][k], &m->inverse_base_absolutes[16 * b], &dT[(REF_NTHETA * b + k) * 16]);
    }
}

/* The residuals (3 n). Every vertex of the model is skinned and posed (as
 * ADBench does); verts is scratch of 3 nverts. */
static void ref_hand_objective(const ref_hand_model *m, const double *theta, int n, const int64_t *corr,
                               const double *points, double *err, double *verts) {
    double T[REF_MAXBONES * 16], Tt[12][REF_MAXBONES], Rg[9];
    ref_transforms(m, theta, T, NULL, NULL);
    ref_angle_axis(theta, Rg, NULL);
    int nb = m->nb;
    /* The top 3 rows of the transforms, entry-major: the loop over the bones
     * then reads each entry contiguously. */
    for (int b = 0; b < nb; b++)
        for (int e = 0; e < 12; e++) Tt[e][b] = T[16 * b + e];
    for (long v = 0; v < m->nverts; v++) {
        const double *x = &m->base_positions[3 * v], *w = &m->weights[(long)nb * v];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0;
        for (int b = 0; b < nb; b++) {
            s0 += (Tt[0][b] * x[0] + Tt[1][b] * x[1] + Tt[2][b] * x[2] + Tt[3][b]) * w[b];
            s1 += (Tt[4][b] * x[0] + Tt[5][b] * x[1] + Tt[6][b] * x[2] + Tt[7][b]) * w[b];
            s2 += (Tt[8][b] * x[0] + Tt[9][b] * x[1] + Tt[10][b] * x[2] + Tt[11][b]) * w[b];
        }
        double s[3] = {s0, s1, s2};
        for (int j = 0; j < 3; j++)
            verts[3 * v + j] = Rg[3 * j] * s[0] + Rg[3 * j + 1] * s[1] + Rg[3 * j + 2] * s[2] + theta[3 + j];
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3; j++) err[3 * i + j] = points[3 * i + j] - verts[3 * corr[i] + j];
}

/* What the derivative of a posed vertex needs: the bone transforms and
 * their theta derivatives, the global rotation and its derivatives. */
typedef struct {
    double T[REF_MAXBONES * 16], dT[REF_MAXBONES * REF_NTHETA * 16], Rg[9], dRg[27];
    char dep[REF_MAXBONES * REF_NTHETA];
} ref_hand_tangents;

static void ref_hand_tangents_at(const ref_hand_model *m, const double *theta, ref_hand_tangents *tg) {
    ref_transforms(m, theta, tg->T, tg->dT, tg->dep);
    ref_angle_axis(theta, tg->Rg, tg->dRg);
}

/* dP[k][j] = d (posed vertex v)_j / d theta[k]. */
static void ref_vertex_derivative(const ref_hand_model *m, const ref_hand_tangents *tg, long v,
                                  double dP[REF_NTHETA][3]) {
    int nb = m->nb;
    const double *x = &m->base_positions[3 * v], *w = &m->weights[(long)nb * v];
    double s[3] = {0, 0, 0}, ds[REF_NTHETA][3];
    memset(ds, 0, sizeof ds);
    for (int b = 0; b < nb; b++) {
        if (w[b] == 0.0) continue;
        for (int j = 0; j < 3; j++) {
            const double *t = &tg->T[16 * b + 4 * j];
            s[j] += (t[0] * x[0] + t[1] * x[1] + t[2] * x[2] + t[3]) * w[b];
        }
        for (int k = 6; k < REF_NTHETA; k++) {
            if (!tg->dep[REF_NTHETA * b + k]) continue;
            const double *d = &tg->dT[(REF_NTHETA * b + k) * 16];
            for (int j = 0; j < 3; j++)
                ds[k][j] += (d[4 * j] * x[0] + d[4 * j + 1] * x[1] + d[4 * j + 2] * x[2] + d[4 * j + 3]) * w[b];
        }
    }
    const double *Rg = tg->Rg;
    for (int j = 0; j < 3; j++) {
        for (int k = 0; k < 3; k++) {
            const double *d = &tg->dRg[9 * k + 3 * j];
            dP[k][j] = d[0] * s[0] + d[1] * s[1] + d[2] * s[2];
        }
        for (int k = 3; k < 6; k++) dP[k][j] = k - 3 == j ? 1.0 : 0.0;
        for (int k = 6; k < REF_NTHETA; k++)
            dP[k][j] = Rg[3 * j] * ds[k][0] + Rg[3 * j + 1] * ds[k][1] + Rg[3 * j + 2] * ds[k][2];
    }
}

/* The residuals err (3n, as ref_hand_objective: every vertex is skinned)
 * and the Jacobian, row-major 3n x 26: J[(3i + j) * 26 + k] = d err[3i + j] /
 * d theta[k], from the n corresponding vertices only. Like ADBench's
 * hand-written ("Manual") hand Jacobian, it returns the residuals with the
 * Jacobian (what a least-squares solver needs); without them it would take
 * a few per cent of the objective's time. */
static void ref_hand_jacobian(const ref_hand_model *m, const double *theta, int n, const int64_t *corr,
                              const double *points, double *err, double *J, double *verts) {
    static ref_hand_tangents tg;
    double dP[REF_NTHETA][3];
    ref_hand_objective(m, theta, n, corr, points, err, verts);
    ref_hand_tangents_at(m, theta, &tg);
    for (int i = 0; i < n; i++) {
        ref_vertex_derivative(m, &tg, corr[i], dP);
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < REF_NTHETA; k++) J[(3 * i + j) * REF_NTHETA + k] = -dP[k][j];
    }
}

/* The complicated variant: point i on triangle corr[i] (vertices t0, t1,
 * t2 of triangles, ntriangles x 3) at barycentric us[2i], us[2i + 1]:
 * err_i = Y_i - (u1 V[t0] + u2 V[t1] + (1 - u1 - u2) V[t2]). */
static void ref_hand_complicated_objective(const ref_hand_model *m, const double *theta, const double *us,
                                           const int64_t *triangles, int n, const int64_t *corr,
                                           const double *points, double *err, double *verts) {
    /* Every vertex posed (the simple objective with no points). */
    ref_hand_objective(m, theta, 0, corr, points, err, verts);
    for (int i = 0; i < n; i++) {
        const int64_t *t = &triangles[3 * corr[i]];
        double u1 = us[2 * i], u2 = us[2 * i + 1];
        for (int j = 0; j < 3; j++)
            err[3 * i + j] = points[3 * i + j] - (u1 * verts[3 * t[0] + j] + u2 * verts[3 * t[1] + j] +
                                                  (1.0 - u1 - u2) * verts[3 * t[2] + j]);
    }
}

/* Its residuals and Jacobian, row-major 3n x 28: columns 0 and 1 the
 * compressed u block (d err_i / d u_i1, d err_i / d u_i2: point i depends on
 * u_i only), then the 26 theta columns. */
static void ref_hand_complicated_jacobian(const ref_hand_model *m, const double *theta, const double *us,
                                          const int64_t *triangles, int n, const int64_t *corr,
                                          const double *points, double *err, double *J, double *verts) {
    static ref_hand_tangents tg;
    double dP[3][REF_NTHETA][3];
    const int nc = REF_NTHETA + 2;
    ref_hand_complicated_objective(m, theta, us, triangles, n, corr, points, err, verts);
    ref_hand_tangents_at(m, theta, &tg);
    for (int i = 0; i < n; i++) {
        const int64_t *t = &triangles[3 * corr[i]];
        double u[3] = {us[2 * i], us[2 * i + 1], 1.0 - us[2 * i] - us[2 * i + 1]};
        for (int c = 0; c < 3; c++) ref_vertex_derivative(m, &tg, t[c], dP[c]);
        for (int j = 0; j < 3; j++) {
            double *row = &J[(3 * i + j) * nc];
            row[0] = -(verts[3 * t[0] + j] - verts[3 * t[2] + j]);
            row[1] = -(verts[3 * t[1] + j] - verts[3 * t[2] + j]);
            for (int k = 0; k < REF_NTHETA; k++)
                row[2 + k] = -(u[0] * dP[0][k][j] + u[1] * dP[1][k][j] + u[2] * dP[2][k][j]);
        }
    }
}
