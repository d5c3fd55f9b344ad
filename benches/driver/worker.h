/* The worker protocol shared by every C benchmark driver (benches/run.py
 * talks to it over stdin/stdout, one command per line):
 *
 *   run obj N     call the objective N times, print the seconds taken
 *   run grad N    the same for the derivative
 *   out obj PATH  write the objective's output (%.17g, one per line)
 *   out grad PATH write the derivative's output
 *   fd            (reference only) print the largest error of the
 *                 derivative against central finite differences
 *   mem           print the peak resident set size in KiB (VmHWM: unlike
 *                 ru_maxrss it does not inherit the parent's peak across exec)
 *   quit
 *
 * A driver defines: `load(tool, path, argc, argv)` (which returns the
 * number of outputs), `call(tool, which, out)` (out may be NULL: timing),
 * `fd_error()`, and sets `has_grad[tool]`. tool 0 is ksc, 1 the reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

enum { KSC = 0, REF = 1 };
enum { OBJ = 0, GRAD = 1 };

static int nout[2];
/* Results of timed calls go here, so the compiler cannot drop the calls. */
static volatile double sink;
static void load(int tool, const char *path, int argc, char **argv);
static void call(int tool, int which, double *out);
static double fd_error(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* Data files are whitespace-separated text (the ADBench formats), or, if
 * their name ends in .bin, the same numbers as raw little-endian doubles
 * (the large generated inputs: fast to read). */
static int binary_input;
static FILE *open_data(const char *path) {
    size_t n = strlen(path);
    binary_input = n > 4 && strcmp(path + n - 4, ".bin") == 0;
    FILE *f = fopen(path, binary_input ? "rb" : "r");
    if (!f) { perror(path); exit(1); }
    return f;
}

/* Reads the next number of a data file. */
static double rd(FILE *f) {
    double x;
    if (binary_input ? fread(&x, sizeof x, 1, f) != 1 : fscanf(f, "%lf", &x) != 1) {
        fprintf(stderr, "bad input file\n");
        exit(1);
    }
    return x;
}

/* Relative error of benchmarks.md: |a - b| / max(1, |a| + |b|). */
static double relerr(double a, double b) {
    double s = (a < 0 ? -a : a) + (b < 0 ? -b : b);
    double d = a - b;
    if (d < 0) d = -d;
    return d / (s > 1 ? s : 1);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s ksc|ref DATAFILE [ARGS]\n", argv[0]); return 2; }
    int tool = strcmp(argv[1], "ksc") == 0 ? KSC : REF;
    load(tool, argv[2], argc - 3, argv + 3);
    printf("ready\n");
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16] = "", what[16] = "", arg[4000] = "";
        sscanf(line, "%15s %15s %3999s", cmd, what, arg);
        int which = strcmp(what, "grad") == 0 ? GRAD : OBJ;
        if (strcmp(cmd, "run") == 0) {
            long n = atol(arg);
            double t0 = now();
            for (long i = 0; i < n; i++) call(tool, which, NULL);
            printf("%.9g\n", now() - t0);
        } else if (strcmp(cmd, "out") == 0) {
            double *o = xmalloc(sizeof(double) * nout[which]);
            call(tool, which, o);
            FILE *f = fopen(arg, "w");
            for (int i = 0; i < nout[which]; i++) fprintf(f, "%.17g\n", o[i]);
            fclose(f);
            free(o);
            printf("ok\n");
        } else if (strcmp(cmd, "fd") == 0) {
            printf("%.6g\n", fd_error());
        } else if (strcmp(cmd, "mem") == 0) {
            long kib = -1;
            FILE *st = fopen("/proc/self/status", "r");
            char l2[256];
            while (st && fgets(l2, sizeof l2, st))
                if (sscanf(l2, "VmHWM: %ld", &kib) == 1) break;
            if (st) fclose(st);
            printf("%ld\n", kib);
        } else if (strcmp(cmd, "quit") == 0) {
            break;
        } else {
            printf("error unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
