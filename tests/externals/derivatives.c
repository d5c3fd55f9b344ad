/* The external functions of derivatives.ks, with the exported calling
 * convention of a ksc program (the arena first, then every parameter as
 * its leaves; tuples returned as structs with fields f0, f1, ...). */
#include <math.h>
#include <stdint.h>

typedef struct ks_arena ks_arena;
void *ks_arena_alloc(ks_arena *A, int64_t bytes);
typedef struct { double f0; double f1; } pair;
typedef struct { int64_t size; double *data; } vec;

/* softsq x = log (1 + x^2) */
double softsq(ks_arena *A, double x) { (void)A; return log1p(x * x); }
double fwd$softsq(ks_arena *A, double x, double dx) { (void)A; return 2 * x / (1 + x * x) * dx; }
double rev$softsq(ks_arena *A, double x, double dr) { (void)A; return 2 * x / (1 + x * x) * dr; }

/* wmul (x, y) = x sin y */
double wmul(ks_arena *A, double x, double y) { (void)A; return x * sin(y); }
double fwd$wmul(ks_arena *A, double x, double y, double dx, double dy) {
    (void)A;
    return dx * sin(y) + x * cos(y) * dy;
}
pair rev$wmul(ks_arena *A, double x, double y, double dr) {
    (void)A;
    return (pair){dr * sin(y), dr * x * cos(y)};
}

double vsum(ks_arena *A, vec v) {
    (void)A;
    double s = 0;
    for (int64_t i = 0; i < v.size; i++) s += v.data[i];
    return s;
}

/* A tensor result lives in the arena. */
vec scaled(ks_arena *A, double s, vec v) {
    vec r = {v.size, ks_arena_alloc(A, v.size * (int64_t)sizeof(double))};
    for (int64_t i = 0; i < v.size; i++) r.data[i] = s * v.data[i];
    return r;
}
