"""ksc from Python: compile Knossos-style ``.ks`` programs, call their
functions and derivatives on NumPy arrays.

    import ksc
    m = ksc.load("gmm.ks")            # or ksc.loads(source)
    m.gmm_objective(x, alphas, ...)   # a function of the file
    g = m.grad("gmm_objective")(x, alphas, ...)   # through [rev gmm_objective]
    m["[rev gmm_objective]"]          # a derived function by name

The compiler is embedded (``ksc._native``); the only system requirement is
a C compiler (``$CC``, else ``cc``). See docs/python.md.
"""

from ._core import CompileError, Function, KscRuntimeError, Module, Overloads, load, loads

__all__ = ["CompileError", "Function", "KscRuntimeError", "Module", "Overloads", "load", "loads"]
