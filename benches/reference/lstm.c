/* Hand-written C reference of ADBench's diagonal LSTM
 * (shared/docs/benchmarks.md), written from the formulas for this project:
 * the objective, and its gradient with respect to main_params (2l x 4b) and
 * extra_params (3 x b) by hand-written reverse mode over a tape of the gate
 * values of every step and layer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* One step of all layers on input x (b); updates state (2l x b); writes y.
 * If tape is not NULL, records per layer: u, hprev, cprev, f, i, o, g, tanh(cnew) (8b). */
static void ref_lstm_predict(int l, int b, const double *main_params, const double *extra, double *state,
                             const double *x, double *y, double *tape) {
    double u[64], hprev[64], cprev[64];
    for (int j = 0; j < b; j++) u[j] = x[j] * extra[j];
    for (int i = 0; i < l; i++) {
        const double *w = &main_params[(2 * i) * 4 * b], *bias = &main_params[(2 * i + 1) * 4 * b];
        double *h = &state[(2 * i) * b], *c = &state[(2 * i + 1) * b];
        double *t = tape ? &tape[(long)i * 8 * b] : NULL;
        memcpy(hprev, h, sizeof(double) * b);
        memcpy(cprev, c, sizeof(double) * b);
        for (int j = 0; j < b; j++) {
            double f = ref_sigmoid(u[j] * w[j] + bias[j]);
            double ig = ref_sigmoid(hprev[j] * w[b + j] + bias[b + j]);
            double o = ref_sigmoid(u[j] * w[2 * b + j] + bias[2 * b + j]);
            double g = tanh(hprev[j] * w[3 * b + j] + bias[3 * b + j]);
            c[j] = cprev[j] * f + ig * g;
            double tc = tanh(c[j]);
            h[j] = o * tc;
            if (t) {
                t[j] = u[j]; t[b + j] = hprev[j]; t[2 * b + j] = cprev[j]; t[3 * b + j] = f;
                t[4 * b + j] = ig; t[5 * b + j] = o; t[6 * b + j] = g; t[7 * b + j] = tc;
            }
        }
        memcpy(u, h, sizeof(double) * b);
    }
    for (int j = 0; j < b; j++) y[j] = u[j] * extra[b + j] + extra[2 * b + j];
}

static double ref_lstm_objective(int l, int c, int b, const double *main_params, const double *extra,
                                 const double *state0, const double *seq) {
    double *state = malloc(sizeof(double) * 2 * l * b), y[64];
    memcpy(state, state0, sizeof(double) * 2 * l * b);
    double total = 0.0;
    for (int t = 0; t < c - 1; t++) {
        ref_lstm_predict(l, b, main_params, extra, state, &seq[t * b], y, NULL);
        double s = 0.0;
        for (int j = 0; j < b; j++) s += exp(y[j]);
        double lse = log(s + 2.0);
        for (int j = 0; j < b; j++) total += seq[(t + 1) * b + j] * (y[j] - lse);
    }
    free(state);
    return -total / ((double)(c - 1) * b);
}

/* gmain (2l x 4b) and gextra (3 x b). */
static void ref_lstm_gradient(int l, int c, int b, const double *main_params, const double *extra,
                              const double *state0, const double *seq, double *gmain, double *gextra) {
    long per_step = (long)l * 8 * b + b; /* layer tapes, then the top output h */
    double *tape = malloc(sizeof(double) * per_step * (c > 1 ? c - 1 : 1));
    double *state = malloc(sizeof(double) * 2 * l * b), y[64];
    double *ys = malloc(sizeof(double) * b * (c > 1 ? c - 1 : 1));
    memcpy(state, state0, sizeof(double) * 2 * l * b);
    for (int t = 0; t < c - 1; t++) {
        ref_lstm_predict(l, b, main_params, extra, state, &seq[t * b], y, &tape[t * per_step]);
        memcpy(&tape[t * per_step + (long)l * 8 * b], &state[(2 * (l - 1)) * b], sizeof(double) * b);
        memcpy(&ys[t * b], y, sizeof(double) * b);
    }
    memset(gmain, 0, sizeof(double) * 2 * l * 4 * b);
    memset(gextra, 0, sizeof(double) * 3 * b);
    double *dh = calloc((size_t)l * b, sizeof(double)), *dc = calloc((size_t)l * b, sizeof(double));
    double scale = -1.0 / ((double)(c - 1) * b);
    double dy[64], du[64];
    for (int t = c - 2; t >= 0; t--) {
        const double *yt = &ys[t * b], *gold = &seq[(t + 1) * b];
        double s = 0.0, sg = 0.0;
        for (int j = 0; j < b; j++) { s += exp(yt[j]); sg += gold[j]; }
        for (int j = 0; j < b; j++) dy[j] = scale * (gold[j] - sg * exp(yt[j]) / (s + 2.0));
        const double *htop = &tape[t * per_step + (long)l * 8 * b];
        for (int j = 0; j < b; j++) {
            gextra[b + j] += dy[j] * htop[j];
            gextra[2 * b + j] += dy[j];
            du[j] = dy[j] * extra[b + j];
        }
        for (int i = l - 1; i >= 0; i--) {
            const double *w = &main_params[(2 * i) * 4 * b];
            double *gw = &gmain[(2 * i) * 4 * b], *gb = &gmain[(2 * i + 1) * 4 * b];
            const double *tp = &tape[t * per_step + (long)i * 8 * b];
            for (int j = 0; j < b; j++) {
                double u = tp[j], hprev = tp[b + j], cprev = tp[2 * b + j], f = tp[3 * b + j];
                double ig = tp[4 * b + j], o = tp[5 * b + j], g = tp[6 * b + j], tc = tp[7 * b + j];
                double dhn = dh[i * b + j] + du[j];
                double dcn = dc[i * b + j] + dhn * o * (1.0 - tc * tc);
                double zo = dhn * tc * o * (1.0 - o);
                double zf = dcn * cprev * f * (1.0 - f);
                double zi = dcn * g * ig * (1.0 - ig);
                double zg = dcn * ig * (1.0 - g * g);
                gw[j] += zf * u; gb[j] += zf;
                gw[b + j] += zi * hprev; gb[b + j] += zi;
                gw[2 * b + j] += zo * u; gb[2 * b + j] += zo;
                gw[3 * b + j] += zg * hprev; gb[3 * b + j] += zg;
                du[j] = zf * w[j] + zo * w[2 * b + j];
                dh[i * b + j] = zi * w[b + j] + zg * w[3 * b + j];
                dc[i * b + j] = dcn * f;
            }
        }
        for (int j = 0; j < b; j++) gextra[j] += du[j] * seq[t * b + j];
    }
    free(tape); free(state); free(ys); free(dh); free(dc);
}
