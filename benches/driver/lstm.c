/* LSTM driver: reads an ADBench LSTM file (l c b; main params 2l x 4b;
 * extra params 3 x b; state 2l x b; sequence c x b). Differentiated inputs:
 * main params, then extra params. */
#include "worker.h"
#include "../reference/lstm.c"
#include "lstm.h"

static int l, c, b;
static double *mainp, *extra, *state, *seq, *grad;
static ks_arena *A;
static ks_T1T1f kmain, kextra, kstate, kseq;

static ks_T1T1f rows(double *data, int r, int cols) {
    ks_T1T1f v = {r, xmalloc(sizeof(ks_T1f) * (r ? r : 1))};
    for (int i = 0; i < r; i++) v.data[i] = (ks_T1f){cols, data + (long)i * cols};
    return v;
}

static double *readn(FILE *f, long n) {
    double *p = xmalloc(sizeof(double) * n);
    for (long i = 0; i < n; i++) p[i] = rd(f);
    return p;
}

static void load(int tool, const char *path, int argc, char **argv) {
    (void)tool; (void)argc; (void)argv;
    FILE *f = open_data(path);
    l = (int)rd(f); c = (int)rd(f); b = (int)rd(f);
    if (b > 64) { fprintf(stderr, "b > 64\n"); exit(1); }
    mainp = readn(f, 2L * l * 4 * b);
    extra = readn(f, 3L * b);
    state = readn(f, 2L * l * b);
    seq = readn(f, (long)c * b);
    fclose(f);
    nout[OBJ] = 1;
    nout[GRAD] = 2 * l * 4 * b + 3 * b;
    grad = xmalloc(sizeof(double) * nout[GRAD]);
    A = ks_arena_new();
    kmain = rows(mainp, 2 * l, 4 * b);
    kextra = rows(extra, 3, b);
    kstate = rows(state, 2 * l, b);
    kseq = rows(seq, c, b);
}

static void call(int tool, int which, double *out) {
    if (tool == REF) {
        if (which == OBJ) {
            double v = ref_lstm_objective(l, c, b, mainp, extra, state, seq);
            sink = v; if (out) out[0] = v;
        } else {
            ref_lstm_gradient(l, c, b, mainp, extra, state, seq, grad, grad + 2 * l * 4 * b);
            if (out) memcpy(out, grad, sizeof(double) * nout[GRAD]);
        }
        return;
    }
    ks_mark mk = ks_arena_mark(A);
    if (which == OBJ) {
        double v = lstm_objective(A, kmain, kextra, kstate, kseq);
        sink = v; if (out) out[0] = v;
    } else {
#ifndef KSC_NO_GRAD
        ks_t2T1T1fT1T1f g = lstm_gradient(A, kmain, kextra, kstate, kseq);
        if (out) {
            long p = 0;
            for (int r = 0; r < 2 * l; r++)
                for (int j = 0; j < 4 * b; j++) out[p++] = g.f0.data[r].data[j];
            for (int r = 0; r < 3; r++)
                for (int j = 0; j < b; j++) out[p++] = g.f1.data[r].data[j];
        }
#endif
    }
    ks_arena_reset(A, mk);
}

static double fd_error(void) {
    ref_lstm_gradient(l, c, b, mainp, extra, state, seq, grad, grad + 2 * l * 4 * b);
    double worst = 0, h = 1e-5;
    long nm = 2L * l * 4 * b, np = nm + 3L * b;
    long step = np > 40 ? np / 40 : 1;
    for (long i = 0; i < np; i += step) {
        double *p = i < nm ? &mainp[i] : &extra[i - nm], p0 = *p;
        *p = p0 + h; double fp = ref_lstm_objective(l, c, b, mainp, extra, state, seq);
        *p = p0 - h; double fm = ref_lstm_objective(l, c, b, mainp, extra, state, seq);
        *p = p0;
        double e = relerr((fp - fm) / (2 * h), grad[i]);
        if (e > worst) worst = e;
    }
    return worst;
}
