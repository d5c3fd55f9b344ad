"""ksc functions inside JAX programs.

    import ksc, ksc.jax
    m = ksc.load("lse.ks")
    lse = ksc.jax.wrap(m.lse_objective)
    jax.grad(lambda x: lse(jnp.sin(x)))(x)   # ksc's [rev lse_objective] inside

``wrap(f)`` is a JAX function (``jax.custom_vjp``) that calls the compiled
``f`` through ``jax.pure_callback`` and differentiates through ksc's
``[rev f]``, compiled on first use; it works under ``jax.jit`` too.

Scope: ``f``'s parameters are Floats, Integers and tensors of them (JAX
scalars and arrays); its result is a Float, a tensor of Floats, or a tuple
of those. The result's shape must follow from the arguments' shapes: it is
found by calling ``f`` once on zeros of those shapes, unless given as
``result_shape`` (a pytree of ``jax.ShapeDtypeStruct``). Floats are
float64 with ``jax_enable_x64``, else float32 (ksc computes in float64 and
the results are rounded). Integer arguments get no cotangent (``None``).
"""

import jax
import numpy as np

from . import _abi


def _to_ksc(a, t):
    """An array from a callback as the value ksc's parameter takes."""
    a = np.asarray(a)
    if t == "Float":
        return float(a)
    if t == "Integer":
        return int(a)
    return a


def _struct(shape, kind):
    dtype = jax.dtypes.canonicalize_dtype(np.float64 if kind == "Float" else np.int64)
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _shapes_of(v):
    """The ShapeDtypeStructs of a ksc result (floats)."""
    if isinstance(v, tuple):
        return tuple(_shapes_of(x) for x in v)
    return _struct(np.shape(v), "Float")


def _as(v, shapes):
    if isinstance(shapes, tuple):
        return tuple(_as(x, s) for x, s in zip(v, shapes))
    return np.asarray(v, dtype=shapes.dtype).reshape(shapes.shape)


def wrap(f, result_shape=None):
    """A JAX-callable, differentiable version of the ksc Function ``f``."""
    kinds = _abi.wrappable(f, "ksc.jax.wrap")
    module = f.module

    def ksc_args(args):
        return [_to_ksc(a, t) for a, (_, t) in zip(args, f.params)]

    def shapes(args):
        if result_shape is not None:
            return result_shape
        zeros = [np.zeros(np.shape(a), dtype=np.float64 if k == "Float" else np.int64) for a, k in zip(args, kinds)]
        return _shapes_of(f(*ksc_args(zeros)))

    @jax.custom_vjp
    def wrapped(*args):
        out = shapes(args)
        return jax.pure_callback(lambda *a: _as(f(*ksc_args(a)), out), out, *args)

    def forward(*args):
        return wrapped(*args), args

    def backward(args, cotangent):
        rev = module.derived("rev", f)
        floats = [i for i, k in enumerate(kinds) if k == "Float"]
        out_shapes = tuple(_struct(np.shape(args[i]), "Float") for i in floats)

        def run(*a):
            *primals, ct = a
            xs = ksc_args(primals)
            ct = jax.tree_util.tree_map(lambda c: np.asarray(c, dtype=np.float64), ct)
            ct = float(ct) if f.ret == "Float" else ct
            grads = rev(xs[0] if len(xs) == 1 else tuple(xs), ct)
            grads = (grads,) if len(xs) == 1 else grads
            return tuple(_as(grads[i], s) for i, s in zip(floats, out_shapes))

        cts = jax.pure_callback(run, out_shapes, *args, cotangent)
        full = [None] * len(args)
        for i, c in zip(floats, cts):
            full[i] = c
        return tuple(full)

    wrapped.defvjp(forward, backward)
    wrapped.__doc__ = f"ksc's {f.signature}, as a JAX function"
    return wrapped
