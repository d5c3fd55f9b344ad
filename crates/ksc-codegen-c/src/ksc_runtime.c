/* ksc_runtime.c: the functions of ksc's C runtime that are not inline
 * (ksc_runtime.h declares them and says how they are linked). */

/* The positive decimal number of bytes the environment variable `name`
 * holds, else 0 (unset or malformed; `ksc run` refuses a malformed one). */
static size_t ksrt_env_bytes(const char *name) {
    const char *s = getenv(name);
    char *end = NULL;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    return s && end != s && *end == 0 ? (size_t)v : 0;
}

/* The most bytes an arena's blocks may hold: $KSC_MAX_MEMORY (a decimal
 * number of bytes), else half the machine's physical memory. Growing past
 * it is an out-of-memory error, so a program cannot exhaust the machine
 * (the interpreter has the same limit on its heap; README, "Limits"). */
static size_t ksrt_max_memory(void) {
    static size_t max;
    if (!max) {
        max = ksrt_env_bytes("KSC_MAX_MEMORY");
        if (!max) {
            long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
            max = pages > 0 && page > 0 ? (size_t)pages / 2 * (size_t)page : SIZE_MAX;
        }
    }
    return max;
}

/* A new arena, or NULL if there is no memory for it. */
KSRT_API ks_arena *ksrt_arena_new(const ksrt_site *sites, int32_t nsites) {
    ks_arena *A = (ks_arena *)calloc(1, sizeof(ks_arena));
    if (!A) return NULL;
    A->sites = sites;
    A->nsites = nsites;
    /* A first block, so a mark always names a block. */
    ksrt_block *b = (ksrt_block *)malloc(sizeof(ksrt_block) + KSRT_FIRST_BLOCK + 16);
    if (!b) {
        free(A);
        return NULL;
    }
    b->size = KSRT_FIRST_BLOCK;
    b->start = (char *)(((uintptr_t)(b + 1) + 15) & ~(uintptr_t)15);
    b->prev = b->next = NULL;
    A->block = b;
    A->top = b->start;
    A->end = b->start + b->size;
    A->capacity = A->peak_capacity = b->size;
    return A;
}

KSRT_API void ksrt_arena_free(ks_arena *A) {
    if (!A) return;
    ksrt_block *b = A->block;
    while (b && b->next) b = b->next;
    while (b) {
        ksrt_block *p = b->prev;
        free(b);
        b = p;
    }
    ksrt_arena_free(A->scratch);
    for (int32_t t = 0; t < A->nworkers; t++) ksrt_arena_free(A->workers[t]);
    free(A->workers);
    free(A->frames);
    free(A);
}

/* Moves to the next block (reusing one kept from before, or a new one). */
KSRT_API void *ksrt_grow(ks_arena *A, size_t bytes) {
    ksrt_block *next = A->block ? A->block->next : NULL;
    while (next && next->size < bytes) {
        /* Too small for this request: drop it from the chain. */
        ksrt_block *after = next->next;
        A->capacity -= next->size;
        free(next);
        next = after;
        if (A->block) A->block->next = next;
    }
    if (!next) {
        size_t size = A->block ? A->block->size * 2 : KSRT_FIRST_BLOCK;
        if (size < bytes) size = bytes;
        size_t max = ksrt_max_memory();
        /* Within the limit: a block of just `bytes` if doubling would pass it. */
        if (A->capacity > max || size > max - A->capacity) size = bytes;
        if (A->capacity > max || size > max - A->capacity) ksrt_oom(A, bytes);
        next = (ksrt_block *)malloc(sizeof(ksrt_block) + size + 16);
        if (!next) ksrt_oom(A, bytes);
        next->size = size;
        next->start = (char *)(((uintptr_t)(next + 1) + 15) & ~(uintptr_t)15);
        next->prev = A->block;
        next->next = NULL;
        if (A->block) A->block->next = next;
        A->capacity += size;
        if (A->capacity > A->peak_capacity) A->peak_capacity = A->capacity;
    } else if (next->prev != A->block) {
        next->prev = A->block;
    }
    A->block = next;
    A->top = next->start + bytes;
    A->end = next->start + next->size;
    return next->start;
}

/* `ksrt_tape_reserve`'s slow path: a fresh buffer for the tape `data` of
 * `size` elements, copied, with room to grow. */
KSRT_API void *ksrt_tape_fresh(ks_arena *A, void *data, int64_t size, size_t elem) {
    int64_t cap = size < 8 ? 16 : 2 * size;
    ksrt_tape_hdr *h = (ksrt_tape_hdr *)ksrt_alloc_n(A, 1, sizeof(ksrt_tape_hdr) + (size_t)cap * elem);
    void *fresh = h + 1;
    if (size > 0) memcpy(fresh, data, (size_t)size * elem);
    KS_WORK(size);
    h->magic = KSRT_TAPE_MAGIC;
    h->self = fresh;
    h->used = size + 1;
    h->cap = cap;
    return fresh;
}

/* Whether the `bytes` bytes at `p` were allocated since the mark `m`: they
 * lie in the part of m's block above m's top, or in a block chained after
 * it up to the current one (a library's caller asks, before it keeps a
 * result's memory instead of copying it: a result may also be an
 * argument's memory, or a constant's). */
KSRT_API int ksrt_allocated_since(const ks_arena *A, ks_mark m, const void *p, size_t bytes) {
    const char *lo = (const char *)p;
    for (const ksrt_block *b = A->block; b; b = b->prev) {
        const char *start = b == m.block ? m.top : b->start;
        const char *end = b == A->block ? A->top : b->start + b->size;
        if (lo >= start && lo <= end && bytes <= (size_t)(end - lo)) return 1;
        if (b == m.block) break;
    }
    return 0;
}

KSRT_API ks_arena *ksrt_scratch(ks_arena *A) {
    if (!A->scratch) {
        A->scratch = ksrt_arena_new(NULL, 0);
        if (!A->scratch) ksrt_oom(A, KSRT_FIRST_BLOCK);
        A->scratch->owner = A;
    }
    return A->scratch;
}

static void ksrt_flush(void) { fflush(stdout); }

/* Where a site is, and the calls it is under, innermost first (at most
 * max_frames of them): the lines after an error's message, written to f,
 * or if f is NULL into buf. */
static void ksrt_where(ks_arena *A, int32_t site, FILE *f, char *buf, size_t cap, int32_t max_frames) {
    size_t n = 0;
    int32_t shown = 0;
    if (buf) buf[0] = 0;
#define KSRT_PUT(...) \
    do { \
        if (f) \
            fprintf(f, __VA_ARGS__); \
        else if (n < cap) { \
            int k = snprintf(buf + n, cap - n, __VA_ARGS__); \
            if (k > 0) n += (size_t)k; \
        } \
    } while (0)
    if (site >= 0 && site < A->nsites) {
        const ksrt_site *s = &A->sites[site];
        KSRT_PUT("  --> %s:%d:%d (in `%s`)\n", s->file, (int)s->line, (int)s->col, s->fun);
        int32_t frame = s->inlined_at;
        int32_t k = A->depth;
        for (;;) {
            while (frame >= 0 && frame < A->nsites) {
                const ksrt_site *c = &A->sites[frame];
                if (shown++ < max_frames)
                    KSRT_PUT("  = called from `%s` at %s:%d:%d\n", c->fun, c->file, (int)c->line, (int)c->col);
                frame = c->inlined_at;
            }
            if (k <= 0) break;
            frame = A->frames[--k];
        }
        if (shown > max_frames) KSRT_PUT("  ... and %d more calling frames\n", (int)(shown - max_frames));
    }
#undef KSRT_PUT
}

/* In a library's exported function: records the error in the arena and
 * returns to the entry of the exported function (`ksrt_enter`). */
static void ksrt_return_error(ks_arena *A, int code, const char *msg, int32_t site) __attribute__((noreturn, cold, noinline));

static void ksrt_return_error(ks_arena *A, int code, const char *msg, int32_t site) {
    char where[1536];
    ksrt_where(A, site, NULL, where, sizeof where, 6);
    A->error = code;
    A->error_site = site;
    snprintf(A->error_raw, sizeof A->error_raw, "%s", msg);
    snprintf(A->error_message, sizeof A->error_message, "%s\n%s", msg, where);
    siglongjmp(*A->on_error, 1);
}

static void ksrt_report(ks_arena *A, const char *msg, int32_t site) __attribute__((noreturn, cold, noinline));

static void ksrt_report(ks_arena *A, const char *msg, int32_t site) {
    while (A->owner) A = A->owner;
    if (A->on_error) ksrt_return_error(A, KS_ERROR_RUNTIME, msg, site);
    ksrt_flush();
    const char *path = getenv("KSC_ERROR_FILE");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        /* For `ksc run`, which renders the error with the source text. */
        /* The innermost KSRT_REPORTED_FRAMES frames, then how many more
         * (a recursion as deep as the stack allows has millions). */
        int32_t listed = A->depth < KSRT_REPORTED_FRAMES ? A->depth : KSRT_REPORTED_FRAMES;
        fprintf(f, "%s\n%d\n", msg, (int)site);
        for (int32_t i = A->depth - 1; i >= A->depth - listed; i--) fprintf(f, "%d ", (int)A->frames[i]);
        fprintf(f, "\n%d\n", (int)(A->depth - listed));
        fclose(f);
        exit(1);
    }
    fprintf(stderr, "error: run-time error: %s\n", msg);
    ksrt_where(A, site, stderr, NULL, 0, 6);
    exit(1);
}

KSRT_API void ksrt_fail_msg(ks_arena *A, int32_t site, const char *msg) { ksrt_report(A, msg, site); }

/* Room for at least n frames on A's shadow call stack; false if there is
 * no memory for it. */
static bool ksrt_frames_reserve(ks_arena *A, int64_t n) {
    if (n <= A->frames_cap) return true;
    int64_t cap = A->frames_cap < 1024 ? 1024 : (int64_t)A->frames_cap * 2;
    if (cap < n) cap = n;
    if (cap > INT32_MAX) cap = INT32_MAX;
    if (n > cap) return false;
    int32_t *f = (int32_t *)realloc(A->frames, (size_t)cap * sizeof(int32_t));
    if (!f) return false;
    A->frames = f;
    A->frames_cap = (int32_t)cap;
    return true;
}

/* Before a nested call at `site` whose frame would not fit (the shadow
 * call stack is full, or the native stack is below A->stack_end): fails
 * with "recursion too deep" if the native stack has run out (or there is
 * no memory for more frames), else grows the shadow call stack. */
KSRT_API void ksrt_deeper(ks_arena *A, int32_t site) {
    if (KSRT_STACK_HERE() < A->stack_end || !ksrt_frames_reserve(A, (int64_t)A->depth + 2))
        ksrt_fail_msg(A, site, "recursion too deep");
}

/* The stack_end (see ks_arena) of the calling thread: its stack's lowest
 * address (pthread_getattr_np: a thread's own stack as it was made; the
 * main thread's as far as its rlimit lets it grow) plus the margin;
 * computed once per thread. NULL if the bounds are unknown, or if the
 * caller is not running on that stack (a coroutine's or a signal
 * handler's own stack): then nothing is checked, as before ksc bounded
 * recursion by the stack. */
KSRT_API char *ksrt_thread_stack_end(void) {
    static __thread char *lo, *end, *top;
    static __thread bool known;
    if (!known) {
        known = true;
        pthread_attr_t at;
        void *addr = NULL;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &at) == 0) {
            if (pthread_attr_getstack(&at, &addr, &size) != 0) addr = NULL;
            pthread_attr_destroy(&at);
        }
        if (addr && size > 0) {
            size_t margin = size / 4 < KSRT_STACK_MARGIN ? size / 4 : KSRT_STACK_MARGIN;
            lo = (char *)addr;
            end = lo + margin;
            top = lo + size;
        }
    }
    char *here = KSRT_STACK_HERE();
    return end && here > lo && here < top ? end : NULL;
}

/* The bytes of native stack a program's calls may use: $KSC_MAX_STACK (a
 * decimal number of bytes), else half the memory limit (ksrt_max_memory),
 * as in the interpreter (README, "Limits"). */
static size_t ksrt_max_stack(void) {
    static size_t max;
    if (!max) {
        max = ksrt_env_bytes("KSC_MAX_STACK");
        if (!max) max = ksrt_max_memory() / 2;
    }
    return max;
}

/* Starts fn(arg) on a new thread whose stack has room for ksrt_max_stack()
 * bytes of calls above the margin: reserved address space
 * (MAP_NORESERVE), which the system backs with memory only as the calls
 * reach it, with a guard page at its end. A smaller stack if the system
 * refuses so large a reservation (an address-space rlimit); false if no
 * thread could be started. */
KSRT_API bool ksrt_run_on_big_stack(void *(*fn)(void *), void *arg) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t want = ksrt_max_stack();
    if (want > (SIZE_MAX >> 2)) want = SIZE_MAX >> 2;
    for (; want >= ((size_t)1 << 20); want /= 2) {
        size_t size = (want + KSRT_STACK_MARGIN + page - 1) / page * page;
        void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                          -1, 0);
        if (base == MAP_FAILED) continue;
        (void)mprotect(base, page, PROT_NONE);
        pthread_attr_t attr;
        pthread_t thread;
        bool ok = pthread_attr_init(&attr) == 0 && pthread_attr_setstack(&attr, base, size) == 0 &&
                  pthread_create(&thread, &attr, fn, arg) == 0;
        pthread_attr_destroy(&attr);
        if (ok) {
            pthread_join(thread, NULL);
            return true;
        }
        munmap(base, size);
    }
    return false;
}

/* Out of memory, reported at the call of the running function (an
 * allocation has no site of its own; `ksc run` blames `main` at depth 0). */
KSRT_API void ksrt_oom(ks_arena *A, size_t bytes) {
    char msg[256];
    size_t max = ksrt_max_memory();
    if (bytes == SIZE_MAX)
        snprintf(msg, sizeof msg, "out of memory: a tensor too large to allocate");
    else if (A->capacity > max || bytes > max - A->capacity)
        snprintf(msg, sizeof msg,
                 "out of memory: %zu more bytes would take the arena (%zu bytes) past its limit of %zu bytes (KSC_MAX_MEMORY)",
                 bytes, A->capacity, max);
    else
        snprintf(msg, sizeof msg,
                 "out of memory: the arena could not grow by %zu bytes (it holds %zu bytes)", bytes, A->capacity);
    while (A->owner) A = A->owner;
    int32_t site = -1;
    if (A->depth > 0) site = A->frames[--A->depth];
    if (A->on_error) ksrt_return_error(A, KS_ERROR_MEMORY, msg, site);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_failed(ks_arena *A, ks_mark m) {
    A->on_error = NULL;
    A->depth = 0;
    ksrt_reset(A, m);
    if (A->scratch) {
        /* Abandoned in the middle of a copy: empty it. */
        ksrt_block *b = A->scratch->block;
        while (b->prev) b = b->prev;
        ks_mark first = {b, b->start};
        ksrt_reset(A->scratch, first);
    }
}

/* $KSC_PAR_MIN_WORK, else KSRT_PAR_MIN_WORK (ksrt_par_min_work). */
KSRT_API int64_t ksrt_par_min_work_env(void) {
    const char *s = getenv("KSC_PAR_MIN_WORK");
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : -1;
    return s && end != s && *end == 0 && v >= 0 ? (int64_t)v : KSRT_PAR_MIN_WORK;
}

typedef struct {
    ks_arena *caller;
    int threads;
    int64_t n;
    /* The lowest failing thread (`threads` if none) and its arena. */
    int64_t failed_at;
    ks_arena *failed;
} ksrt_par;

/* In the team: this thread's number t, and its iterations [lo, hi). */
static inline int ksrt_par_range(ksrt_par *P, int64_t *lo, int64_t *hi) {
#ifdef _OPENMP
    int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    int t = 0, T = 1;
#endif
    /* T may be fewer than asked for (the OpenMP runtime decides). */
    *lo = (int64_t)((__int128)P->n * t / T);
    *hi = (int64_t)((__int128)P->n * (t + 1) / T);
    return t;
}

/* Before the team starts: worker arenas for `threads` threads, the
 * caller's call stack and sites copied into each. */
static void ksrt_par_begin(ks_arena *A, ksrt_par *P, int threads, int64_t n) {
    P->caller = A;
    P->threads = threads;
    P->n = n;
    P->failed_at = threads;
    P->failed = NULL;
    (void)ksrt_max_memory();
    if (A->nworkers < threads) {
        ks_arena **w = (ks_arena **)realloc(A->workers, (size_t)threads * sizeof(ks_arena *));
        if (!w) ksrt_oom(A, (size_t)threads * sizeof(ks_arena *));
        A->workers = w;
        for (int32_t t = A->nworkers; t < threads; t++) {
            w[t] = ksrt_arena_new(A->sites, A->nsites);
            if (!w[t]) {
                A->nworkers = t;
                ksrt_oom(A, KSRT_FIRST_BLOCK);
            }
        }
        A->nworkers = threads;
    }
    for (int t = 0; t < threads; t++) {
        ks_arena *W = A->workers[t];
        W->sites = A->sites;
        W->nsites = A->nsites;
        if (!ksrt_frames_reserve(W, A->depth)) ksrt_oom(A, (size_t)A->depth * sizeof(int32_t));
        W->depth = A->depth;
        if (A->depth) memcpy(W->frames, A->frames, (size_t)A->depth * sizeof(int32_t));
        W->error = KS_ERROR_NONE;
    }
}

/* In the team, after thread t's error (on its arena W): keep the error of
 * the thread with the lowest range. Each thread stops at its first error
 * and the ranges are in order, so that is the lowest failing iteration:
 * the serial loop's error. */
static void ksrt_par_failed(ksrt_par *P, int t, ks_arena *W) {
#ifdef _OPENMP
#pragma omp critical(ksrt_par_failed)
#endif
    {
        if (t < P->failed_at) {
            P->failed_at = t;
            P->failed = W;
        }
    }
}

/* After the team: raise the error of the lowest failing iteration, if any,
 * as the serial loop would have. */
static void ksrt_par_end(ksrt_par *P) {
    ks_arena *W = P->failed, *A = P->caller;
    if (!W) return;
    /* (Without memory for the worker's frames, the caller's own.) */
    if (ksrt_frames_reserve(A, W->depth)) {
        A->depth = W->depth;
        if (W->depth) memcpy(A->frames, W->frames, (size_t)W->depth * sizeof(int32_t));
    }
    char msg[sizeof W->error_raw];
    memcpy(msg, W->error_raw, sizeof msg);
    int code = W->error;
    W->error = KS_ERROR_NONE;
    if (code == KS_ERROR_MEMORY) {
        ks_arena *top = A;
        while (top->owner) top = top->owner;
        if (top->on_error) ksrt_return_error(top, KS_ERROR_MEMORY, msg, W->error_site);
    }
    ksrt_report(A, msg, W->error_site);
}

/* Runs fn(W, lo, hi, caps) for the ranges of 0 .. n on a team of
 * `threads`, each on its own arena W (emptied after), then raises the error
 * of the lowest failing range, if any. */
KSRT_API void ksrt_par_run(ks_arena *A, int threads, int64_t n, ksrt_range_fn fn, void *caps) {
    ksrt_par P;
    ksrt_par_begin(A, &P, threads, n);
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        int64_t lo, hi;
        int t = ksrt_par_range(&P, &lo, &hi);
        ks_arena *W = A->workers[t];
        W->stack_end = ksrt_thread_stack_end();
        ks_mark m = ksrt_mark(W);
        sigjmp_buf jb;
        if (sigsetjmp(jb, 0) == 0) {
            W->on_error = &jb;
            fn(W, lo, hi, caps);
        } else {
            ksrt_par_failed(&P, t, W);
        }
        W->on_error = NULL;
        ksrt_reset(W, m);
    }
    ksrt_par_end(&P);
}

/* An index or size as in the interpreter: `3` or `(2,3)`. */
static void ksrt_fmt_index(char *buf, size_t cap, int rank, const int64_t *v) {
    size_t n = 0;
    if (rank == 1) {
        snprintf(buf, cap, "%" PRId64, v[0]);
        return;
    }
    n += snprintf(buf + n, cap - n, "(");
    for (int i = 0; i < rank && n < cap; i++)
        n += snprintf(buf + n, cap - n, i ? ",%" PRId64 : "%" PRId64, v[i]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
}

KSRT_API void ksrt_fail_index(ks_arena *A, int32_t site, int rank, const int64_t *idx, const int64_t *size) {
    char a[256], b[256], msg[600];
    ksrt_fmt_index(a, sizeof a, rank, idx);
    ksrt_fmt_index(b, sizeof b, rank, size);
    snprintf(msg, sizeof msg, "index out of range: index %s in a tensor of size %s", a, b);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_negative(ks_arena *A, int32_t site, const char *prim, int rank, const int64_t *size) {
    char a[256], msg[400];
    ksrt_fmt_index(a, sizeof a, rank, size);
    snprintf(msg, sizeof msg, "`%s` with a negative size %s", prim, a);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_too_large(ks_arena *A, int32_t site, const char *prim, int rank, const int64_t *size,
                                uint64_t limit) {
    char a[256], msg[500];
    ksrt_fmt_index(a, sizeof a, rank, size);
    snprintf(msg, sizeof msg, "`%s` of size %s is too large: more than %" PRIu64 " elements (the limit, KSC_MAX_ELEMENTS)",
             prim, a, limit);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_sumbuild(ks_arena *A, int32_t site, int rank, const int64_t *size) {
    char a[256], msg[400];
    ksrt_fmt_index(a, sizeof a, rank, size);
    snprintf(msg, sizeof msg, "`sumbuild` of an empty range (size %s)", a);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_sizes(ks_arena *A, int32_t site, const char *what, int rank, const int64_t *a,
                            const int64_t *b) {
    char x[256], y[256], msg[700];
    ksrt_fmt_index(x, sizeof x, rank, a);
    ksrt_fmt_index(y, sizeof y, rank, b);
    snprintf(msg, sizeof msg, "%s: %s and %s", what, x, y);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_diag(ks_arena *A, int32_t site, int64_t rows, int64_t cols) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "`diag` needs as many rows as columns, but has %" PRId64 " rows and %" PRId64 " columns", rows, cols);
    ksrt_report(A, msg, site);
}

KSRT_API void ksrt_fail_matvec(ks_arena *A, int32_t site, int64_t rows, int64_t cols, int64_t n) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "`mul` of a matrix of size (%" PRId64 ",%" PRId64 ") and a vector of size %" PRId64, rows, cols, n);
    ksrt_report(A, msg, site);
}

/* Arena statistics on stderr at exit, if KSC_ARENA_STATS is set. */
KSRT_API void ksrt_stats(ks_arena *A) {
    if (!getenv("KSC_ARENA_STATS")) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "ksc-arena-peak-bytes %zu\nksc-max-rss-kib %ld\n", A->peak_capacity, (long)ru.ru_maxrss);
}
