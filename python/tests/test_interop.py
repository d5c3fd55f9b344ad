"""ksc functions inside JAX and PyTorch programs: values and gradients
through ksc's [rev f] against the same computation written in JAX or
PyTorch. Skipped (with the reason) where JAX or PyTorch is not installed."""

import numpy as np
import pytest

import ksc

SOURCE = """
(def lse Float (v : Vec Float)
  (let (mx (max v))
    (add mx (log (sumbuild (size v) (lam (i : Integer) (exp (sub (index i v) mx))))))))

(def affine (Vec Float) ((a : Float) (v : Vec Float) (k : Integer))
  (build (size v) (lam (i : Integer) (add (mul a (index i v)) (to_float k)))))
"""


@pytest.fixture(scope="module")
def m():
    return ksc.loads(SOURCE, name="interop.ks")


def test_jax(m):
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import ksc.jax

    lse = ksc.jax.wrap(m.lse)
    affine = ksc.jax.wrap(m.affine)
    x = jnp.asarray(np.random.default_rng(0).normal(size=6))

    def through_ksc(x):
        return lse(affine(2.0, jnp.sin(x), 3))

    def in_jax(x):
        return jax.nn.logsumexp(2.0 * jnp.sin(x) + 3.0)

    assert abs(through_ksc(x) - in_jax(x)) < 1e-12
    np.testing.assert_allclose(jax.grad(through_ksc)(x), jax.grad(in_jax)(x), rtol=1e-10)
    np.testing.assert_allclose(jax.jit(jax.grad(through_ksc))(x), jax.grad(in_jax)(x), rtol=1e-10)
    # The gradient with respect to a scalar argument too.
    ga = jax.grad(lambda a: lse(affine(a, x, 0)))(1.5)
    assert abs(ga - jax.grad(lambda a: jax.nn.logsumexp(a * x))(1.5)) < 1e-10


def test_torch(m):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import ksc.torch

    lse = ksc.torch.wrap(m.lse)
    affine = ksc.torch.wrap(m.affine)
    x0 = np.random.default_rng(1).normal(size=6)
    x = torch.tensor(x0, requires_grad=True)
    y = lse(affine(2.0, torch.sin(x), 3))
    y.backward()
    x2 = torch.tensor(x0, requires_grad=True)
    y2 = torch.logsumexp(2.0 * torch.sin(x2) + 3.0, 0)
    y2.backward()
    assert abs(y.item() - y2.item()) < 1e-12
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-10)


def test_wrap_refuses_what_it_cannot_carry():
    pytest.importorskip("torch", reason="PyTorch is not installed")
    import ksc.torch

    m = ksc.loads("(def pair (Tuple Float Float) (p : Tuple Float Float) p)\n")
    with pytest.raises(TypeError, match="parameter `p` of pair"):
        ksc.torch.wrap(m.pair)
