"""JAX and PyTorch workers of the benchmark (benches/run.py starts them).

    python peers.py jax|torch WORKLOAD DATAFILE [KIND]
    python peers.py jax|torch hand DATAFILE [MODELDIR]   (simple or complicated, told by the file)
    python peers.py jax|torch project DATAFILE   (seed 000's figure 11: one camera, N points)

Speaks the protocol of benches/driver/worker.h over stdin/stdout: `run obj N`,
`run grad N`, `out obj PATH`, `out grad PATH`, `mem`, `quit`; and `first`:
the seconds of the first call of the objective and of the derivative (JAX
traces and compiles there: its time to a first result). The programs
are written from the formulas of shared/docs/benchmarks.md in each library's
usual style (vectorised; `lax.scan` for JAX's LSTM); float64, one thread.
"""
import math
import os
import resource
import sys
import time

import numpy as np

TOOL, WORKLOAD, PATH = sys.argv[1], sys.argv[2], sys.argv[3]
KIND = sys.argv[4] if len(sys.argv) > 4 else WORKLOAD


def read_numbers(path):
    if path.endswith(".bin"):  # raw little-endian doubles (large generated inputs)
        return np.fromfile(path, dtype="<f8")
    with open(path) as f:
        return np.array(f.read().split(), dtype=np.float64)


def read_gmm(path):
    v = read_numbers(path)
    d, k, n = int(v[0]), int(v[1]), int(v[2])
    p = 3
    isz = d * (d + 1) // 2

    def take(cnt, shape):
        nonlocal p
        a = v[p:p + cnt].reshape(shape)
        p += cnt
        return a
    alphas = take(k, (k,))
    means = take(k * d, (k, d))
    icf = take(k * isz, (k, isz))
    x = take(n * d, (n, d))
    gamma, m = float(v[p]), int(v[p + 1])
    return d, k, n, alphas, means, icf, x, gamma, m


def read_lstm(path):
    v = read_numbers(path)
    l, c, b = int(v[0]), int(v[1]), int(v[2])
    p = 3

    def take(r, cols):
        nonlocal p
        a = v[p:p + r * cols].reshape(r, cols)
        p += r * cols
        return a
    main = take(2 * l, 4 * b)
    extra = take(3, b)
    state = take(2 * l, b)
    seq = take(c, b)
    return l, c, b, main, extra, state, seq


def read_scan(path):
    """The `scan` workload's data: (x,) or, for the recurrence, (a, b)."""
    v = read_numbers(path)
    n = int(v[0])
    return (v[1:1 + n], v[1 + n:1 + 2 * n]) if KIND == "recurrence" else (v[1:1 + n],)


def read_micro(path):
    v = read_numbers(path)
    if KIND == "nnmf":
        m, n = int(v[0]), int(v[1])
        w = v[2:2 + m]
        h = v[2 + m:2 + m + n]
        a = v[2 + m + n:2 + m + n + m * n].reshape(m, n)
        return dict(w=w, h=h, a=a)
    n = int(v[0])
    vec = [v[1 + i * n:1 + (i + 1) * n] for i in range(4)]
    return dict(u=vec[0], v=vec[1], r=vec[2], s=vec[3], a=float(v[1 + 4 * n]), da=float(v[2 + 4 * n]))


# The largest dense n x n matrix a peer makes: the Jacobian the
# vadd_jacsparse peers convert to CSR (JAX and PyTorch have no sparse
# Jacobian), the basis of n one-hot tangents of vectorsum's forward-mode
# gradient: 1 GiB, n = 11585.
DENSE_JACOBIAN_BYTES = 1 << 30


def refuse_dense_jacobian(n, lib, what=None):
    """vadd_jacsparse, vectorsum: refuses (before `ready`: benches/run.py
    records the message as the reason the tool is skipped) a dense n x n
    matrix that does not fit, instead of running out of memory. `what`: the
    matrix and why the library makes it (vadd_jacsparse's by default)."""
    if 8 * n * n > DENSE_JACOBIAN_BYTES:
        what = what or f"{lib} has no sparse Jacobian, and the dense {n} x {n} Jacobian of vadd_jacsparse"
        b = 8 * n * n
        size = f"{b / 1e12:.3g} TB" if b >= 1e12 else f"{b / 1e9:.3g} GB"
        raise SystemExit(f"{TOOL}: {what} ({size}) does not fit in memory: refused (it runs at n <= "
                         f"{math.isqrt(DENSE_JACOBIAN_BYTES // 8)})")


def vectorsum_basis(n, lib):
    """vectorsum's refusal: forward mode over the n one-hot directions, as
    seed 001's program computes the gradient, vectorised over an n x n
    basis of tangents."""
    refuse_dense_jacobian(n, lib, f"{lib} vectorises the forward-mode gradient of vectorSum over its {n} one-hot "
                                  f"tangents, and their dense {n} x {n} basis")


def read_project(path):
    """The `project` workload's data (benches/run.py's gen_project): N, one
    camera (11: r, C, f, x0, kappa), N points (N x 3)."""
    v = read_numbers(path)
    n = int(v[0])
    return v[1:12].copy(), v[12:12 + 3 * n].reshape(n, 3)


def project_fn(xp):
    """ADBench's BA projection for the `project` workload, for jax.numpy or
    torch (xp): project(cam, X) of points X (..., 3) by the camera cam (11),
    (..., 2); one point or a batch. As in the BA peers, theta is taken as 1
    where r = 0, so that the unused Rodrigues branch has no NaN derivative."""
    def project(cam, X):
        r0, r1, r2 = cam[0], cam[1], cam[2]
        x0, x1, x2 = X[..., 0] - cam[3], X[..., 1] - cam[4], X[..., 2] - cam[5]
        sq = r0 * r0 + r1 * r1 + r2 * r2
        nz = sq != 0
        th = xp.sqrt(xp.where(nz, sq, xp.ones_like(sq)))
        c, s = xp.cos(th), xp.sin(th)
        v0, v1, v2 = r0 / th, r1 / th, r2 / th
        t = (v0 * x0 + v1 * x1 + v2 * x2) * (1.0 - c)
        y0 = xp.where(nz, x0 * c + (v1 * x2 - v2 * x1) * s + v0 * t, x0 + (r1 * x2 - r2 * x1))
        y1 = xp.where(nz, x1 * c + (v2 * x0 - v0 * x2) * s + v1 * t, x1 + (r2 * x0 - r0 * x2))
        y2 = xp.where(nz, x2 * c + (v0 * x1 - v1 * x0) * s + v2 * t, x2 + (r0 * x1 - r1 * x0))
        px, py = y0 / y2, y1 / y2
        s2 = px * px + py * py
        L = 1.0 + cam[9] * s2 + cam[10] * s2 * s2
        return xp.stack([px * L * cam[6] + cam[7], py * L * cam[6] + cam[8]], -1)
    return project


def project_structure(arange, cat, n):
    """The CSR row offsets (2N + 1) and column indices (28N) of the `project`
    Jacobian (layout of benches/reference/project.c: rows 2i, 2i + 1 hold the
    camera's 11 columns, then point i's 3 at 11 + 3i), with the library's
    arange and concatenate."""
    rows = 14 * arange(2 * n + 1)
    pts = 11 + 3 * arange(n)[:, None] + arange(3)[None, :]
    camc = arange(11)[None, :] + 0 * arange(n)[:, None]
    block = cat([camc, pts], 1)
    return rows, cat([block, block], 1).reshape(-1)


def read_ba(path):
    """ADBench BA file, replicated as its loader does: n cameras, m points and
    p weights and features, all equal; observation i: camera i mod n, point i mod m."""
    v = read_numbers(path)
    n, m, p = int(v[0]), int(v[1]), int(v[2])
    cams = np.tile(v[3:14], (n, 1))
    X = np.tile(v[14:17], (m, 1))
    w = np.full(p, v[17])
    feats = np.tile(v[18:20], (p, 1))
    obs = np.arange(p, dtype=np.int64)
    return n, m, p, cams, X, w, feats, obs % n, obs % m


def ba_structure(arange, cat, n, m, p, cam_idx, pt_idx):
    """The CSR row pointers (3p + 1) and column indices (31p) of the BA
    Jacobian (layout of benches/reference/ba.c: rows 2i, 2i+1 of observation
    i with camera, point and weight columns; then the p weight rows), with
    the library's arange and concatenate."""
    rows = cat([15 * arange(2 * p), 30 * p + arange(p + 1)], 0)
    wcol = 11 * n + 3 * m + arange(p)
    block = cat([11 * cam_idx[:, None] + arange(11)[None, :],
                 11 * n + 3 * pt_idx[:, None] + arange(3)[None, :], wcol[:, None]], 1)
    cols = cat([cat([block, block], 1).reshape(-1), wcol], 0)
    return rows, cols


def gmm_constants(d, k, n, gamma, m):
    nw = d + m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(0.5 * nw + 0.5 * (1 - j)) for j in range(1, d + 1))
    cw = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lgd
    return -n * d * 0.5 * math.log(2 * math.pi) - k * cw


def tril_cols(d):
    """Row and column of each packed strictly-lower entry, column by column."""
    rows, cols = [], []
    for col in range(d):
        for row in range(col + 1, d):
            rows.append(row)
            cols.append(col)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


# ---------------------------------------------------------------- HT (hand tracking)
def read_hand(path, model_dir):
    """ADBench's hand model (bones.txt, vertices.txt, triangles.txt) and a
    data file, simple or complicated (told by the count of numbers):
    parents (22), base_relatives and inverse_base_absolutes (22 x 4 x 4),
    base_positions (nverts x 3), dense weights (nverts x 22), triangles
    (ntriangles x 3), corr (N), points (N x 3), us (N x 2, or None), theta (26)."""
    parents, rel, inv = [], [], []
    with open(os.path.join(model_dir, "bones.txt")) as f:
        for line in f:
            fs = line.strip().split(":")
            if len(fs) < 34:
                continue
            parents.append(int(fs[1]))
            rel.append(np.array(fs[2:18], dtype=np.float64).reshape(4, 4))
            inv.append(np.array(fs[18:34], dtype=np.float64).reshape(4, 4))
    nb = len(parents)
    pos, weights = [], []
    with open(os.path.join(model_dir, "vertices.txt")) as f:
        for line in f:
            fs = line.strip().split(":")
            if len(fs) < 9:
                continue
            pos.append([float(x) for x in fs[:3]])
            w = np.zeros(nb)
            for e in range(int(fs[8])):
                w[int(fs[9 + 2 * e])] = float(fs[10 + 2 * e])
            weights.append(w)
    with open(os.path.join(model_dir, "triangles.txt")) as f:
        triangles = np.array([[int(x) for x in line.strip().split(":")] for line in f if line.strip()],
                             dtype=np.int64)
    v = read_numbers(path)
    n = int(v[0])
    rows = v[2:2 + 4 * n].reshape(n, 4)
    rest = v[2 + 4 * n:]
    if len(rest) == 2 * n + 26:
        us, theta = rest[:2 * n].reshape(n, 2), rest[2 * n:]
    elif len(rest) == 26:
        us, theta = None, rest
    else:
        raise SystemExit(f"bad hand data file {path}")
    return (parents, np.array(rel), np.array(inv), np.array(pos), np.array(weights), triangles,
            rows[:, 0].astype(np.int64), rows[:, 1:].copy(), us, theta)


def hand_model_dir():
    """The model directory: the worker's last argument, else ../big-model next
    to the data file (ADBench's layout: hand/simple_big/, hand/big-model/)."""
    if len(sys.argv) > 4:
        return sys.argv[4]
    return os.path.join(os.path.dirname(os.path.abspath(PATH)), os.pardir, "big-model")


def hand_pose_index(nb):
    """(nb, 3) indices into [theta; 0] of bone b's angles (x, z, y), ADBench's
    pose: finger f owns bones 4f+1..4f+4; segment 2 gets theta[6+4f] (x) and
    theta[7+4f] (z), segments 3 and 4 theta[8+4f] and theta[9+4f] (x); the
    other bones keep zero pose (index 26: the appended zero)."""
    idx = np.full((nb, 3), 26, dtype=np.int64)
    for b in range(1, min(nb, 21)):
        f, seg = (b - 1) // 4, (b - 1) % 4
        if seg == 1:
            idx[b, 0], idx[b, 1] = 6 + 4 * f, 7 + 4 * f
        elif seg >= 2:
            idx[b, 0] = 6 + seg + 4 * f
    return idx


def hand_objective_fn(np_, data, stack, cat, where, sqrt):
    """err(theta) = Y - V[:, corr] (simple) or err(theta, us) = Y - (u1 V[t0]
    + u2 V[t1] + (1 - u1 - u2) V[t2]) (complicated, triangles[corr]), written
    once for jax.numpy and torch (np_ is the array module; stack, cat, where,
    sqrt its functions)."""
    parents, rel, inv, pos, weights, triangles, corr, points, idx = data
    nb = len(parents)
    posh = cat([pos, np_.ones((pos.shape[0], 1))], 1)

    def rot(c, s, axis):
        """Batched rotations about x (0), y (1), z (2) by angles with cosines c, sines s."""
        z, o = np_.zeros_like(c), np_.ones_like(c)
        if axis == 0:
            rows = [[o, z, z], [z, c, -s], [z, s, c]]
        elif axis == 1:
            rows = [[c, z, s], [z, o, z], [-s, z, c]]
        else:
            rows = [[c, -s, z], [s, c, z], [z, z, o]]
        return stack([stack(r, -1) for r in rows], -2)

    def posed_vertices(theta):
        ang = cat([theta, np_.zeros(1)], 0)[idx]                      # (nb, 3): x, z, y
        tx, tz, ty = ang[:, 0], ang[:, 1], ang[:, 2]
        R = rot(np_.cos(tz), np_.sin(tz), 2) @ rot(np_.cos(ty), np_.sin(ty), 1) @ rot(np_.cos(tx), np_.sin(tx), 0)
        relp = cat([rel[:, :, :3] @ R, rel[:, :, 3:]], 2)             # base_relative [R 0; 0 1]
        absolutes = []
        for b in range(nb):
            absolutes.append(relp[b] if parents[b] < 0 else absolutes[parents[b]] @ relp[b])
        T = stack(absolutes, 0) @ inv                               # (nb, 4, 4)
        curr = (T[:, :3, :] @ posh.T)                               # (nb, 3, nverts)
        V = (curr * weights.T[:, None, :]).sum(0)                   # (3, nverts)
        a = theta[:3]
        nrm = sqrt((a * a).sum())
        small = nrm < 1e-4
        safe = where(small, np_.ones_like(nrm), nrm)
        x, y, z = a[0] / safe, a[1] / safe, a[2] / safe
        s, c = np_.sin(safe), np_.cos(safe)
        Rg = stack([stack([x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s]),
                    stack([x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s]),
                    stack([x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c])])
        Rg = where(small, np_.eye(3), Rg)
        return Rg @ V + theta[3:6][:, None]                          # (3, nverts)

    def f(theta):
        return (points - posed_vertices(theta)[:, corr].T).reshape(-1)

    def f_complicated(theta, us):
        P = posed_vertices(theta)
        t = triangles[corr]
        u1, u2 = us[:, 0], us[:, 1]
        hp = u1 * P[:, t[:, 0]] + u2 * P[:, t[:, 1]] + (1 - u1 - u2) * P[:, t[:, 2]]
        return (points - hp.T).reshape(-1)
    return f, f_complicated


# ---------------------------------------------------------------- JAX
def setup_jax():
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    def ready(x):
        return jax.block_until_ready(x)

    if WORKLOAD == "lse":
        x = jnp.asarray(read_numbers(PATH)[1:])

        def f(x):
            mx = jnp.max(x)
            return mx + jnp.log(jnp.sum(jnp.exp(x - mx)))
        obj = jax.jit(f)
        grad = jax.jit(jax.grad(f))
        return (lambda: ready(obj(x))), (lambda: ready(grad(x)))
    if WORKLOAD == "scan":
        # Seed 002's workloads as JAX users write them: log-sum-exp with
        # jnp (lax.reduce over a custom monoid has no derivative), the
        # recurrence with lax.associative_scan over affine maps, nested
        # cumulative products with jnp.cumprod (an associative scan).
        args = tuple(jnp.asarray(a) for a in read_scan(PATH))
        if KIND == "lse_reduce":
            def f(x):
                mx = jnp.max(x)
                return mx + jnp.log(jnp.sum(jnp.exp(x - mx)))
        elif KIND == "recurrence":
            def compose(p, q):
                (a1, b1), (a2, b2) = p, q
                return a1 * a2, a2 * b1 + b2

            def f(a, b):
                return jnp.sum(jax.lax.associative_scan(compose, (a, b))[1])
        else:
            levels = int(KIND[len("nested"):])

            def f(x):
                for _ in range(levels):
                    x = jnp.cumprod(x)
                return jnp.sum(x)
        obj = jax.jit(f)
        grad = jax.jit(jax.grad(f, argnums=tuple(range(len(args)))))
        return (lambda: ready(obj(*args))), (lambda: ready(grad(*args)))
    if WORKLOAD == "gmm":
        d, k, n, alphas, means, icf, x, gamma, m = read_gmm(PATH)
        rows, cols = tril_cols(d)
        const = gmm_constants(d, k, n, gamma, m)
        xj = jnp.asarray(x)

        def f(alphas, means, icf):
            qs = icf[:, :d]
            ls = icf[:, d:]
            qd = jnp.exp(qs)
            sum_qs = jnp.sum(qs, 1)
            L = jnp.zeros((k, d, d)).at[:, rows, cols].set(ls)
            xc = xj[:, None, :] - means[None, :, :]
            qx = qd[None] * xc + jnp.einsum("kij,nkj->nki", L, xc)
            main = alphas[None] + sum_qs[None] - 0.5 * jnp.sum(qx * qx, 2)
            prior = jnp.sum(0.5 * gamma * gamma * (jnp.sum(qd * qd, 1) + jnp.sum(ls * ls, 1)) - m * sum_qs)
            return const + jnp.sum(logsumexp(main, 1)) - n * logsumexp(alphas) + prior
        args = tuple(jnp.asarray(a) for a in (alphas, means, icf))
        obj = jax.jit(f)
        grad = jax.jit(jax.grad(f, argnums=(0, 1, 2)))
        return (lambda: ready(obj(*args))), (lambda: ready(grad(*args)))
    if WORKLOAD == "lstm":
        l, c, b, main, extra, state, seq = read_lstm(PATH)
        seqj = jnp.asarray(seq)
        statej = jnp.asarray(state)
        sig = jax.nn.sigmoid

        def f(main, extra):
            def step(st, t):
                x = seqj[t] * extra[0]
                new = []
                for i in range(l):
                    w, bias = main[2 * i], main[2 * i + 1]
                    h, cell = st[2 * i], st[2 * i + 1]
                    fg = sig(x * w[:b] + bias[:b])
                    ig = sig(h * w[b:2 * b] + bias[b:2 * b])
                    og = sig(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                    g = jnp.tanh(h * w[3 * b:] + bias[3 * b:])
                    cell = cell * fg + ig * g
                    h = og * jnp.tanh(cell)
                    new += [h, cell]
                    x = h
                y = x * extra[1] + extra[2]
                lse = jnp.log(jnp.sum(jnp.exp(y)) + 2.0)
                return jnp.stack(new), jnp.sum(seqj[t + 1] * (y - lse))
            _, totals = jax.lax.scan(step, statej, jnp.arange(c - 1))
            return -jnp.sum(totals) / ((c - 1) * b)
        args = (jnp.asarray(main), jnp.asarray(extra))
        obj = jax.jit(f)
        grad = jax.jit(jax.grad(f, argnums=(0, 1)))
        return (lambda: ready(obj(*args))), (lambda: ready(grad(*args)))
    if WORKLOAD == "micro":
        D = {k: (jnp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in read_micro(PATH).items()}
        if KIND == "nnmf":
            def f(h, w, a):
                wh = w[:, None] * h[None, :]
                return jnp.sum(jnp.log(wh) + a / wh)
            obj = jax.jit(f)
            grad = jax.jit(jax.grad(f))
            args = (D["h"], D["w"], D["a"])
            return (lambda: ready(obj(*args))), (lambda: ready(grad(*args)))
        u, v, r, s, a, da = D["u"], D["v"], D["r"], D["s"], D["a"], D["da"]
        if KIND == "dot":
            obj = jax.jit(jnp.dot)
            grad = jax.jit(jax.grad(jnp.dot, argnums=(0, 1)))
            return (lambda: ready(obj(u, v))), (lambda: ready(grad(u, v)))
        if KIND == "max":
            obj = jax.jit(jnp.max)
            grad = jax.jit(jax.grad(jnp.max))
            return (lambda: ready(obj(v))), (lambda: ready(grad(v)))
        vadd = lambda u, v: u + v  # noqa: E731
        vscale = lambda a, v: a * v  # noqa: E731
        if KIND == "vadd_jvp":
            obj = jax.jit(vadd)
            der = jax.jit(lambda u, v, du, dv: jax.jvp(vadd, (u, v), (du, dv))[1])
            return (lambda: ready(obj(u, v))), (lambda: ready(der(u, v, r, s)))
        if KIND == "vadd_vjp":
            obj = jax.jit(vadd)
            der = jax.jit(lambda u, v, r: jax.vjp(vadd, u, v)[1](r))
            return (lambda: ready(obj(u, v))), (lambda: ready(der(u, v, r)))
        if KIND == "vscale_jvp":
            obj = jax.jit(vscale)
            der = jax.jit(lambda a, v, da: jax.jvp(lambda a: vscale(a, v), (a,), (da,))[1])
            return (lambda: ready(obj(a, v))), (lambda: ready(der(a, v, da)))
        if KIND == "vscale_vjp":
            obj = jax.jit(vscale)
            der = jax.jit(lambda a, v, r: jax.vjp(vscale, a, v)[1](r))
            return (lambda: ready(obj(a, v))), (lambda: ready(der(a, v, r)))
        # Figure 8's Jacobians, as a JAX user writes them: jit(jacfwd(f))
        # (forward mode, vmapped over the columns: n for vadd, 1 for vscale).
        if KIND == "vadd_jac":
            obj = jax.jit(vadd)
            der = jax.jit(jax.jacfwd(vadd))  # d(u + v)/du: n x n
            return (lambda: ready(obj(u, v))), (lambda: ready(der(u, v)))
        if KIND == "vscale_jac":
            aj = jnp.asarray(a)
            obj = jax.jit(vscale)
            der = jax.jit(jax.jacfwd(vscale))  # d(a v)/da: n (the n x 1 column)
            return (lambda: ready(obj(aj, v))), (lambda: ready(der(aj, v)))
        if KIND == "vectorsum":
            # Seed 001's vectorSum: the gradient by forward mode over the n
            # one-hot directions, as its program computes it: jacfwd (a JVP
            # vmapped over the identity's n columns, n x n work).
            vectorsum_basis(len(u), "JAX")
            vectorSum = jnp.sum
            obj = jax.jit(vectorSum)
            der = jax.jit(jax.jacfwd(vectorSum))  # n
            return (lambda: ready(obj(u))), (lambda: ready(der(u)))
        if KIND == "vadd_jacsparse":
            # JAX has no sparse Jacobian: the dense one (jit(jacfwd)), then
            # its nonzeros in CSR by jax.experimental.sparse.BCSR.fromdense,
            # inside the timed call. The count of nonzeros is known only from
            # the values, and jit needs it static: it is counted first (a
            # jitted count_nonzero, read back), then the conversion is jitted
            # for that count (5 times faster than an eager fromdense). Refused
            # where the dense one does not fit (n = 10^6: 8 TB).
            refuse_dense_jacobian(len(u), "JAX")
            from jax.experimental import sparse
            obj = jax.jit(vadd)
            dense = jax.jit(jax.jacfwd(vadd))
            count = jax.jit(jnp.count_nonzero)
            fromdense = jax.jit(sparse.BCSR.fromdense, static_argnames=("nse",))

            def der():
                J = dense(u, v)
                S = fromdense(J, nse=int(count(J)))
                return ready((S.data, S.indptr, S.indices))  # values, row offsets, columns
            return (lambda: ready(obj(u, v))), der
    if WORKLOAD == "project":
        # Seed 000's figure 11: per point, the 2 x 11 (camera) and 2 x 3
        # (point) blocks by forward mode (jacfwd over the 14 directions),
        # vmapped over the points; the CSR structure is built in the same
        # jitted call (as the BA peers, ksc and the reference build theirs in
        # every call; it depends on N only, so XLA may fold it to constants).
        cam, X = (jnp.asarray(a) for a in read_project(PATH))
        project = project_fn(jnp)
        local = jax.vmap(jax.jacfwd(project, argnums=(0, 1)), in_axes=(None, 0))

        def jac(cam, X):
            jc, jx = local(cam, X)  # (N, 2, 11), (N, 2, 3)
            rows, cols = project_structure(jnp.arange, jnp.concatenate, X.shape[0])
            return jnp.concatenate([jc, jx], 2).reshape(-1), rows, cols
        obj = jax.jit(project)
        der = jax.jit(jac)
        return (lambda: ready(obj(cam, X))), (lambda: ready(der(cam, X)))
    if WORKLOAD == "hand":
        parents, rel, inv, pos, weights, triangles, corr, points, us, theta = read_hand(PATH, hand_model_dir())
        data = (parents, jnp.asarray(rel), jnp.asarray(inv), jnp.asarray(pos), jnp.asarray(weights),
                jnp.asarray(triangles), jnp.asarray(corr), jnp.asarray(points),
                jnp.asarray(hand_pose_index(len(parents))))
        f, fc = hand_objective_fn(jnp, data, jnp.stack, jnp.concatenate, jnp.where, jnp.sqrt)
        th = jnp.asarray(theta)
        if us is None:
            obj = jax.jit(f)
            jac = jax.jit(jax.jacfwd(f))  # forward mode, vmapped over the 26 directions
            return (lambda: ready(obj(th))), (lambda: ready(jac(th)))
        uj = jnp.asarray(us)

        def jac_c(theta, us):
            """3N x 28: the u block compressed (one JVP per u column), then theta (jacfwd)."""
            du = [jax.jvp(lambda u: fc(theta, u), (us,), (jnp.zeros_like(us).at[:, c].set(1.0),))[1]
                  for c in range(2)]
            return jnp.concatenate([du[0][:, None], du[1][:, None], jax.jacfwd(fc)(theta, us)], 1)
        obj = jax.jit(fc)
        jac = jax.jit(jac_c)
        return (lambda: ready(obj(th, uj))), (lambda: ready(jac(th, uj)))
    if WORKLOAD == "ba":
        n, m, p, cams, X, w, feats, ci, pi = read_ba(PATH)
        ci, pi = jnp.asarray(ci), jnp.asarray(pi)

        def reproj(cam, X, w, feat):
            """One observation's two weighted reprojection residuals."""
            r, xo = cam[:3], X - cam[3:6]
            sq = jnp.dot(r, r)
            nz = sq != 0
            th = jnp.sqrt(jnp.where(nz, sq, 1.0))  # no NaN derivative from the unused branch
            c, s = jnp.cos(th), jnp.sin(th)
            v = r / th
            rot = xo * c + jnp.cross(v, xo) * s + v * (jnp.dot(v, xo) * (1.0 - c))
            xc = jnp.where(nz, rot, xo + jnp.cross(r, xo))
            pr = xc[:2] / xc[2]
            s2 = jnp.dot(pr, pr)
            L = 1.0 + cam[9] * s2 + cam[10] * s2 * s2
            return w * (pr * L * cam[6] + cam[7:9] - feat)

        def f(cams, X, w, feats):
            e = jax.vmap(reproj)(cams[ci], X[pi], w, feats)
            return jnp.concatenate([e.reshape(-1), 1.0 - w * w])
        local = jax.vmap(jax.jacrev(reproj, argnums=(0, 1, 2)))
        werr_grad = jax.vmap(jax.grad(lambda w: 1.0 - w * w))

        def jac(cams, X, w, feats):
            jc, jx, jw = local(cams[ci], X[pi], w, feats)
            block = jnp.concatenate([jc, jx, jw[:, :, None]], 2)  # (p, 2, 15)
            rows, cols = ba_structure(jnp.arange, jnp.concatenate, n, m, p, ci, pi)
            return jnp.concatenate([block.reshape(-1), werr_grad(w)]), rows, cols
        args = tuple(jnp.asarray(a) for a in (cams, X, w, feats))
        obj = jax.jit(f)
        der = jax.jit(jac)
        return (lambda: ready(obj(*args))), (lambda: ready(der(*args)))
    raise SystemExit(f"jax: unknown workload {WORKLOAD} {KIND}")


# ---------------------------------------------------------------- PyTorch
def setup_torch():
    import torch
    torch.set_num_threads(int(os.environ.get("KSC_BENCH_THREADS", "1")))
    torch.set_default_dtype(torch.float64)
    T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731

    if WORKLOAD == "scan":
        if KIND == "recurrence":
            raise SystemExit("torch: PyTorch has no parallel scan over a user's monoid (the recurrence)")
        (x,) = (T(a) for a in read_scan(PATH))
        xg = x.clone().requires_grad_(True)
        if KIND == "lse_reduce":
            def f(x):
                return torch.logsumexp(x, 0)
        else:
            levels = int(KIND[len("nested"):])

            def f(x):
                for _ in range(levels):
                    x = torch.cumprod(x, 0)
                return torch.sum(x)

        def obj():
            with torch.no_grad():
                return f(x)
        return obj, (lambda: torch.autograd.grad(f(xg), [xg]))
    if WORKLOAD == "lse":
        x = T(read_numbers(PATH)[1:])
        xg = x.clone().requires_grad_(True)

        def f(x):
            mx = torch.max(x)
            return mx + torch.log(torch.sum(torch.exp(x - mx)))

        def obj():
            with torch.no_grad():
                return f(x)
        return obj, (lambda: torch.autograd.grad(f(xg), [xg]))
    if WORKLOAD == "gmm":
        d, k, n, alphas, means, icf, x, gamma, m = read_gmm(PATH)
        rows, cols = (torch.tensor(a) for a in tril_cols(d))
        const = gmm_constants(d, k, n, gamma, m)
        xt = T(x)

        def f(alphas, means, icf):
            qs = icf[:, :d]
            ls = icf[:, d:]
            qd = torch.exp(qs)
            sum_qs = torch.sum(qs, 1)
            L = torch.zeros((k, d, d))
            L[:, rows, cols] = ls
            xc = xt[:, None, :] - means[None, :, :]
            qx = qd[None] * xc + torch.einsum("kij,nkj->nki", L, xc)
            main = alphas[None] + sum_qs[None] - 0.5 * torch.sum(qx * qx, 2)
            prior = torch.sum(0.5 * gamma * gamma * (torch.sum(qd * qd, 1) + torch.sum(ls * ls, 1)) - m * sum_qs)
            return const + torch.sum(torch.logsumexp(main, 1)) - n * torch.logsumexp(alphas, 0) + prior
        args = [T(a).requires_grad_(True) for a in (alphas, means, icf)]

        def obj():
            with torch.no_grad():
                return f(*args)
        return obj, (lambda: torch.autograd.grad(f(*args), args))
    if WORKLOAD == "lstm":
        l, c, b, main, extra, state, seq = read_lstm(PATH)
        seqt, statet = T(seq), T(state)

        def f(main, extra):
            st = [statet[i] for i in range(2 * l)]
            total = 0.0
            for t in range(c - 1):
                x = seqt[t] * extra[0]
                for i in range(l):
                    w, bias = main[2 * i], main[2 * i + 1]
                    h, cell = st[2 * i], st[2 * i + 1]
                    fg = torch.sigmoid(x * w[:b] + bias[:b])
                    ig = torch.sigmoid(h * w[b:2 * b] + bias[b:2 * b])
                    og = torch.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                    g = torch.tanh(h * w[3 * b:] + bias[3 * b:])
                    cell = cell * fg + ig * g
                    h = og * torch.tanh(cell)
                    st[2 * i], st[2 * i + 1] = h, cell
                    x = h
                y = x * extra[1] + extra[2]
                lse = torch.log(torch.sum(torch.exp(y)) + 2.0)
                total = total + torch.sum(seqt[t + 1] * (y - lse))
            return -total / ((c - 1) * b)
        args = [T(main).requires_grad_(True), T(extra).requires_grad_(True)]

        def obj():
            with torch.no_grad():
                return f(*args)
        return obj, (lambda: torch.autograd.grad(f(*args), args))
    if WORKLOAD == "micro":
        D = {k: (T(v) if isinstance(v, np.ndarray) else v) for k, v in read_micro(PATH).items()}

        def nograd(fn):
            def g():
                with torch.no_grad():
                    return fn()
            return g
        if KIND == "nnmf":
            w, a = D["w"], D["a"]
            h = D["h"].clone().requires_grad_(True)

            def f(h):
                wh = w[:, None] * h[None, :]
                return torch.sum(torch.log(wh) + a / wh)
            return nograd(lambda: f(h)), (lambda: torch.autograd.grad(f(h), [h]))
        u, v, r, s, a, da = D["u"], D["v"], D["r"], D["s"], D["a"], D["da"]
        ug, vg = u.clone().requires_grad_(True), v.clone().requires_grad_(True)
        ag = torch.tensor(a, requires_grad=True)
        if KIND == "dot":
            return nograd(lambda: torch.dot(u, v)), (lambda: torch.autograd.grad(torch.dot(ug, vg), [ug, vg]))
        if KIND == "max":
            return nograd(lambda: torch.max(v)), (lambda: torch.autograd.grad(torch.max(vg), [vg]))
        import torch.autograd.forward_ad as fwAD
        if KIND == "vadd_jvp":
            def der():
                with fwAD.dual_level():
                    return fwAD.unpack_dual(fwAD.make_dual(u, r) + fwAD.make_dual(v, s)).tangent
            return nograd(lambda: u + v), der
        if KIND == "vadd_vjp":
            return nograd(lambda: u + v), (lambda: torch.autograd.grad(ug + vg, [ug, vg], grad_outputs=r))
        if KIND == "vscale_jvp":
            at, dat = torch.tensor(a), torch.tensor(da)

            def der():
                with fwAD.dual_level():
                    return fwAD.unpack_dual(fwAD.make_dual(at, dat) * v).tangent
            return nograd(lambda: a * v), der
        if KIND == "vscale_vjp":
            return nograd(lambda: a * v), (lambda: torch.autograd.grad(ag * vg, [ag, vg], grad_outputs=r))
        # Figure 8's Jacobians and seed 001's vectorSum gradient (forward
        # mode over the n one-hot directions): vectorised forward mode, as
        # for HT.
        if KIND in ("vadd_jac", "vadd_jacsparse", "vscale_jac", "vectorsum"):
            if KIND == "vadd_jacsparse":
                refuse_dense_jacobian(len(u), "PyTorch")
            if KIND == "vectorsum":
                vectorsum_basis(len(u), "PyTorch")
            if hasattr(torch, "func"):
                jacfwd = lambda g, x: torch.func.jacfwd(g)(x)  # noqa: E731
            else:  # torch < 2: the same vectorised forward mode through the functional API
                jacfwd = lambda g, x: torch.autograd.functional.jacobian(g, x, vectorize=True, strategy="forward-mode")  # noqa: E731
            if KIND == "vscale_jac":
                at = torch.tensor(a)
                return nograd(lambda: a * v), (lambda: jacfwd(lambda a: a * v, at))  # n (the n x 1 column)
            if KIND == "vadd_jac":
                return nograd(lambda: u + v), (lambda: jacfwd(lambda u: u + v, u))  # n x n
            if KIND == "vectorsum":
                return nograd(lambda: torch.sum(u)), (lambda: jacfwd(torch.sum, u))  # n

            def der():
                # PyTorch has no sparse Jacobian: the dense one, then its
                # nonzeros in CSR (to_sparse_csr), inside the timed call.
                # Refused where the dense one does not fit (n = 10^6: 8 TB).
                J = jacfwd(lambda u: u + v, u).to_sparse_csr()
                return J.values(), J.crow_indices(), J.col_indices()
            return nograd(lambda: u + v), der
    if WORKLOAD == "project":
        # Seed 000's figure 11, as for JAX: torch.func's vmap of jacfwd over
        # the points (functorch's on torch < 2, the same API), the CSR
        # structure built in the same call.
        if hasattr(torch, "func"):
            vmap, jacfwd = torch.func.vmap, torch.func.jacfwd
        else:
            try:
                from functorch import jacfwd, vmap
            except ImportError:
                raise SystemExit(f"torch: PyTorch {torch.__version__} has neither torch.func nor functorch "
                                 "(vmap of jacfwd)")
        cam, X = (T(a) for a in read_project(PATH))
        project = project_fn(torch)
        local = vmap(jacfwd(project, argnums=(0, 1)), in_dims=(None, 0))

        def jac():
            jc, jx = local(cam, X)  # (N, 2, 11), (N, 2, 3)
            rows, cols = project_structure(torch.arange, torch.cat, X.shape[0])
            return torch.cat([jc, jx], 2).reshape(-1), rows, cols

        def obj():
            with torch.no_grad():
                return project(cam, X)
        return obj, jac
    if WORKLOAD == "hand":
        parents, rel, inv, pos, weights, triangles, corr, points, us, theta = read_hand(PATH, hand_model_dir())
        data = (parents, T(rel), T(inv), T(pos), T(weights), torch.tensor(triangles), torch.tensor(corr), T(points),
                torch.tensor(hand_pose_index(len(parents))))
        f, fc = hand_objective_fn(torch, data, torch.stack, torch.cat, torch.where, torch.sqrt)
        th = T(theta)
        if hasattr(torch, "func"):
            jacfwd = lambda g, x: torch.func.jacfwd(g)(x)  # noqa: E731
        else:  # torch < 2: the same vectorised forward mode through the functional API
            jacfwd = lambda g, x: torch.autograd.functional.jacobian(g, x, vectorize=True, strategy="forward-mode")  # noqa: E731
        if us is None:
            def obj():
                with torch.no_grad():
                    return f(th)
            return obj, (lambda: jacfwd(f, th))
        ut = T(us)
        import torch.autograd.forward_ad as fwAD

        def obj_c():
            with torch.no_grad():
                return fc(th, ut)

        def jac_c():
            """3N x 28: the u block compressed (one forward-mode JVP per u column), then theta."""
            du = []
            for c in range(2):
                tangent = torch.zeros_like(ut)
                tangent[:, c] = 1.0
                with fwAD.dual_level():
                    du.append(fwAD.unpack_dual(fc(th, fwAD.make_dual(ut, tangent))).tangent)
            return torch.cat([du[0][:, None], du[1][:, None], jacfwd(lambda t: fc(t, ut), th)], 1)
        return obj_c, jac_c
    if WORKLOAD == "ba":
        n, m, p, cams, X, w, feats, ci, pi = read_ba(PATH)
        cams, X, w, feats = T(cams), T(X), T(w), T(feats)
        ci, pi = torch.tensor(ci), torch.tensor(pi)

        def reproj(cam, X, w, feat):
            """The weighted reprojection residuals (p x 2) of all observations,
            from their cameras (p x 11), points (p x 3), weights and features."""
            r, xo = cam[:, :3], X - cam[:, 3:6]
            sq = torch.sum(r * r, 1)
            nz = sq != 0
            th = torch.sqrt(torch.where(nz, sq, torch.ones_like(sq)))  # no NaN derivative from the unused branch
            c, s = torch.cos(th)[:, None], torch.sin(th)[:, None]
            v = r / th[:, None]
            rot = xo * c + torch.cross(v, xo, dim=1) * s + v * (torch.sum(v * xo, 1)[:, None] * (1.0 - c))
            xc = torch.where(nz[:, None], rot, xo + torch.cross(r, xo, dim=1))
            pr = xc[:, :2] / xc[:, 2:3]
            s2 = torch.sum(pr * pr, 1)
            L = 1.0 + cam[:, 9] * s2 + cam[:, 10] * s2 * s2
            return w[:, None] * (pr * (L * cam[:, 6])[:, None] + cam[:, 7:9] - feat)

        def obj():
            with torch.no_grad():
                return torch.cat([reproj(cams[ci], X[pi], w, feats).reshape(-1), 1.0 - w * w])

        def jac():
            # Each observation's residuals depend only on its own camera, point
            # and weight: reverse mode once per residual row (2), with respect to
            # the gathered per-observation inputs, gives every local block.
            cg, xg, wg = cams[ci].requires_grad_(True), X[pi].requires_grad_(True), w.clone().requires_grad_(True)
            e = reproj(cg, xg, wg, feats)
            rows = []
            for a in (0, 1):
                go = torch.zeros_like(e)
                go[:, a] = 1.0
                gc, gx, gw = torch.autograd.grad(e, [cg, xg, wg], grad_outputs=go, retain_graph=a == 0)
                rows.append(torch.cat([gc, gx, gw[:, None]], 1))
            block = torch.stack(rows, 1)  # (p, 2, 15)
            w2 = w.clone().requires_grad_(True)
            (gw2,) = torch.autograd.grad(torch.sum(1.0 - w2 * w2), [w2])  # diagonal: the sum's gradient
            r, c = ba_structure(torch.arange, torch.cat, n, m, p, ci, pi)
            return torch.cat([block.reshape(-1), gw2]), r, c
        return obj, jac
    raise SystemExit(f"torch: unknown workload {WORKLOAD} {KIND}")


def flat(x):
    if isinstance(x, (tuple, list)):
        return np.concatenate([flat(e) for e in x]) if x else np.zeros(0)
    if hasattr(x, "detach"):
        x = x.detach().numpy()
    return np.asarray(x, dtype=np.float64).reshape(-1)


def save_out(path, a):
    """np.savetxt(path, a, fmt="%.17g"), three times faster (BA's Jacobian
    has 15 million numbers at ba5)."""
    with open(path, "w") as f:
        for i in range(0, len(a), 1 << 20):
            c = a[i:i + (1 << 20)].tolist()
            f.write(("%.17g\n" * len(c)) % tuple(c))


def peak_kib():
    """VmHWM (ru_maxrss would include the parent's peak from before exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    obj, grad = setup_jax() if TOOL == "jax" else setup_torch()
    fns = {"obj": obj, "grad": grad}
    # One warm-up call of each (JAX traces and compiles here): its time is
    # the time to a first result (`first`), not a timed sample.
    first = []
    for fn in (obj, grad):
        t0 = time.perf_counter()
        fn()
        first.append(time.perf_counter() - t0)
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        cmd = parts[0]
        if cmd == "run":
            fn, reps = fns[parts[1]], int(parts[2])
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            print(f"{time.perf_counter() - t0:.9g}", flush=True)
        elif cmd == "out":
            save_out(parts[2], flat(fns[parts[1]]()))
            print("ok", flush=True)
        elif cmd == "mem":
            print(peak_kib(), flush=True)
        elif cmd == "first":
            print(f"{first[0]:.6g} {first[1]:.6g}", flush=True)
        elif cmd == "quit":
            break
        else:
            print("error unknown command", flush=True)


if __name__ == "__main__":
    main()
