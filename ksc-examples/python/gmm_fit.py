"""Fits a Gaussian mixture to synthetic points with SciPy's L-BFGS, using
ksc's gradient of the negative log-likelihood (gmm_fit.ks), and prints the
log-likelihood before and after.

    pip install ./python scipy
    python ksc-examples/python/gmm_fit.py
"""

import os

import numpy as np
import scipy.optimize

import ksc

K, D, N = 3, 2, 600

here = os.path.dirname(os.path.abspath(__file__))
m = ksc.load(os.path.join(here, "gmm_fit.ks"))
grad = m.grad("nll")

rng = np.random.default_rng(0)
centres = np.array([[-4.0, 0.0], [0.0, 4.0], [4.0, -2.0]])
x = np.concatenate([rng.normal(c, 0.7, size=(N // K, D)) for c in centres])


def unpack(theta):
    alphas = theta[:K]
    mu = theta[K : K + K * D].reshape(K, D)
    logsig = theta[K + K * D :].reshape(K, D)
    return alphas, mu, logsig


def objective(theta):
    """The negative log-likelihood and its gradient (ksc's [rev nll])."""
    alphas, mu, logsig = unpack(theta)
    value = m.nll(x, alphas, mu, logsig)
    _, g_alphas, g_mu, g_logsig = grad(x, alphas, mu, logsig)
    return value, np.concatenate([g_alphas, g_mu.ravel(), g_logsig.ravel()])


theta0 = np.concatenate([np.zeros(K), rng.normal(size=K * D), np.zeros(K * D)])
before = -objective(theta0)[0]
fit = scipy.optimize.minimize(objective, theta0, jac=True, method="L-BFGS-B")
after = -fit.fun
print(f"log-likelihood before: {before:.4f}")
print(f"log-likelihood after:  {after:.4f} ({fit.nit} iterations, {fit.message})")
print("means:", np.round(np.sort(unpack(fit.x)[1], axis=0), 2).tolist())
