"""ksc functions inside PyTorch programs.

    import ksc, ksc.torch
    m = ksc.load("lse.ks")
    lse = ksc.torch.wrap(m.lse_objective)
    x = torch.randn(100, dtype=torch.float64, requires_grad=True)
    lse(torch.sin(x)).backward()      # ksc's [rev lse_objective] inside

``wrap(f)`` calls the compiled ``f`` on the tensors' data (on the CPU) and
is a ``torch.autograd.Function`` whose backward pass is ksc's ``[rev f]``,
compiled on first use. Scope as ``ksc.jax.wrap``: Float, Integer and tensor
parameters, a result of Floats (a Float, a tensor, or a tuple of them).
Results are float64 tensors; Integer arguments get no gradient.
"""

import numpy as np
import torch

from . import _abi


def _to_ksc(a, t):
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    if t == "Float":
        return float(a)
    if t == "Integer":
        return int(a)
    return np.asarray(a)


def _to_torch(v):
    if isinstance(v, tuple):
        return tuple(_to_torch(x) for x in v)
    return torch.as_tensor(np.asarray(v, dtype=np.float64))


def wrap(f):
    """A PyTorch-callable, differentiable version of the ksc Function ``f``."""
    kinds = _abi.wrappable(f, "ksc.torch.wrap")
    module = f.module

    def ksc_args(args):
        return [_to_ksc(a, t) for a, (_, t) in zip(args, f.params)]

    class Wrapped(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.ksc_args = ksc_args(args)
            ctx.shapes = [np.shape(a) if isinstance(a, torch.Tensor) else () for a in args]
            return _to_torch(f(*ctx.ksc_args))

        @staticmethod
        def backward(ctx, *cotangents):
            rev = module.derived("rev", f)
            xs = ctx.ksc_args
            cts = tuple(c.detach().cpu().numpy().astype(np.float64) for c in cotangents)
            ct = cts[0] if len(cts) == 1 else cts
            ct = float(ct) if f.ret == "Float" else ct
            grads = rev(xs[0] if len(xs) == 1 else tuple(xs), ct)
            grads = (grads,) if len(xs) == 1 else grads
            return tuple(
                torch.as_tensor(np.asarray(g, dtype=np.float64)).reshape(s) if k == "Float" and needed else None
                for g, s, k, needed in zip(grads, ctx.shapes, kinds, ctx.needs_input_grad)
            )

    def wrapped(*args):
        return Wrapped.apply(*args)

    wrapped.__doc__ = f"ksc's {f.signature}, as a PyTorch function"
    return wrapped
