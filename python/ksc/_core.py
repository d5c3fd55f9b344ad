"""Modules, functions and derivatives of compiled ``.ks`` programs."""

import ctypes
import os
import threading
import warnings

from . import _abi
from ._native import Session


class CompileError(Exception):
    """The program does not compile: its text or types have errors. ``str()``
    is the rendered message, each error located (``file:line:column``, the
    source line, a caret under the offending text), as ``ksc check`` prints
    it; ``diagnostics`` holds the same text."""

    def __init__(self, diagnostics):
        super().__init__(diagnostics)
        self.diagnostics = diagnostics


class KscRuntimeError(RuntimeError):
    """A run-time error in compiled code: an index out of range, a failed
    ``assert``, Integer overflow, division by zero, recursion too deep, or
    no memory. The message says what and where in the ``.ks`` source, and
    the calls it happened under. ``code`` is the library's error code (1:
    run time, 2: memory). The process goes on."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class _Library:
    """A loaded shared library and this module's arenas in it. A thread
    calls on an arena of its own (an arena serves one call at a time);
    when a call's large result is left in its arena (see
    ``Function._call_converted``), the arena goes with the result and the
    thread takes another, from ``idle`` (arenas whose results are gone,
    their memory already touched) or new."""

    # At most this many idle arenas are kept; more are freed.
    IDLE_MAX = 4

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        self.mark_type = type("ks_mark", (ctypes.Structure,), {"_fields_": [("block", ctypes.c_void_p), ("top", ctypes.c_void_p)]})
        lib.ks_arena_new.restype = ctypes.c_void_p
        lib.ks_arena_new.argtypes = []
        lib.ks_arena_free.restype = None
        lib.ks_arena_free.argtypes = [ctypes.c_void_p]
        lib.ks_arena_mark.restype = self.mark_type
        lib.ks_arena_mark.argtypes = [ctypes.c_void_p]
        lib.ks_arena_reset.restype = None
        lib.ks_arena_reset.argtypes = [ctypes.c_void_p, self.mark_type]
        lib.ks_arena_error.restype = ctypes.c_int
        lib.ks_arena_error.argtypes = [ctypes.c_void_p]
        lib.ks_arena_error_message.restype = ctypes.c_char_p
        lib.ks_arena_error_message.argtypes = [ctypes.c_void_p]
        lib.ks_arena_allocated_since.restype = ctypes.c_int
        lib.ks_arena_allocated_since.argtypes = [ctypes.c_void_p, self.mark_type, ctypes.c_void_p, ctypes.c_int64]
        lib.ks_arena_capacity.restype = ctypes.c_int64
        lib.ks_arena_capacity.argtypes = [ctypes.c_void_p]
        self.local = threading.local()
        self.arenas = set()
        self.idle = []
        self.lock = threading.Lock()

    def arena(self):
        """This thread's arena and its mark when empty: after each call the
        arena is reset to it (its first block is never freed, so the mark
        stays valid)."""
        a = getattr(self.local, "arena", None)
        if a is None:
            with self.lock:
                a = self.idle.pop() if self.idle else None
            if a is None:
                arena = self.lib.ks_arena_new()
                if not arena:
                    raise MemoryError("ksc: no memory for an arena")
                a = (arena, self.lib.ks_arena_mark(arena))
                with self.lock:
                    self.arenas.add(arena)
            self.local.arena = a
        return a

    def give_away(self, a):
        """This thread's arena ``a`` now belongs to a result; the thread's
        next call takes another."""
        if getattr(self.local, "arena", None) is a:
            self.local.arena = None

    def take_back(self, a):
        """An arena whose results are gone: emptied, and kept idle (or
        freed if enough are)."""
        arena, mark = a
        self.lib.ks_arena_reset(arena, mark)
        with self.lock:
            if len(self.idle) < self.IDLE_MAX:
                self.idle.append(a)
                return
            self.arenas.discard(arena)
        self.lib.ks_arena_free(arena)

    def __del__(self):
        free = getattr(getattr(self, "lib", None), "ks_arena_free", None)
        for a in getattr(self, "arenas", []):
            if free is not None:
                free(a)


class _ArenaLoan:
    """An arena lent to the arrays of one result, which use its memory;
    when the last of them is gone, the arena goes back to its library."""

    def __init__(self, library, a):
        self.library = library
        self.a = a

    def __del__(self):
        self.library.take_back(self.a)


# A result's arrays are left in the arena, not copied, when they hold at
# least this many bytes and the arena holds at most LOAN_SLACK times as
# much (so a loan never keeps much more memory than its arrays): copying
# them would cost more than the call from Python (8 MB take 0.8 ms).
LOAN_MIN_BYTES = 1 << 18
LOAN_SLACK = 4


class Function:
    """A compiled function: call it with Python values (float, int, bool,
    str, tuples, NumPy arrays of any rank; a ``Vec (Vec Float)`` from a 2-D
    array or a list of 1-D arrays). Arrays of the right dtype and layout
    are passed without a copy. Results are NumPy arrays, tuples and Python
    scalars, new objects (a large array may be the memory the call wrote
    it in, kept for it, rather than a copy; never an argument's).

    Attributes: ``name`` (its full .ks name, ``[rev [f Float]]``),
    ``short`` (``[rev f]``), ``params`` (name and type of each), ``ret``,
    ``signature`` (.ks text)."""

    def __init__(self, module, library, info):
        self._module = module
        self._library = library
        self.name = info["name"]
        self.short = info["short"]
        self.base = info["base"]
        self.derivs = list(info["derivs"])
        self.params = [(n, t) for n, t in info["params"]]
        self.ret = info["ret"]
        self._c = library.lib[info["c_name"]]
        leaves = [lt for _, t in self.params for lt in _abi.leaf_types(t)]
        self._c.argtypes = [ctypes.c_void_p] + [_abi.ctype(lt) for lt in leaves]
        self._c.restype = _abi.ctype(self.ret)
        # Does the result hold tensors of scalars outside other tensors
        # (returned as arrays, which may keep the arena's memory)?
        self._has_arrays = _abi.has_scalar_tensors(self.ret)

    @property
    def module(self):
        """The Module the function belongs to (for its derivatives:
        ``f.module.grad(f)``)."""
        return self._module

    @property
    def signature(self):
        params = " ".join(f"({n} : {_abi.show(t)})" for n, t in self.params)
        return f"{self.name} : ({params}) -> {_abi.show(self.ret)}"

    def __repr__(self):
        return f"<ksc function {self.signature}>"

    def _convert(self, args, strict):
        if len(args) != len(self.params):
            raise TypeError(f"{self.short} takes {len(self.params)} argument(s) ({self._param_list()}), got {len(args)}")
        keep = []
        c_args = []
        for (name, t), v in zip(self.params, args):
            # The common scalars without the general conversion.
            if (t == "Float" and type(v) is float) or (t == "Integer" and type(v) is int and _abi.fits_int64(v)):
                c_args.append(v)
                continue
            try:
                c_args.extend(_abi.spread(v, t, strict, keep))
            except _abi.Mismatch as e:
                raise TypeError(f"argument `{name}{e.where}` of {self.short} ({_abi.show(t)}): {e.what}") from None
        return c_args, keep

    def _param_list(self):
        return ", ".join(f"{n} : {_abi.show(t)}" for n, t in self.params)

    def _call_converted(self, c_args):
        lib = self._library
        a = lib.arena()
        arena, mark = a
        lent = False
        try:
            result = self._c(arena, *c_args)
            code = lib.lib.ks_arena_error(arena)
            if code:
                message = lib.lib.ks_arena_error_message(arena).decode(errors="replace")
                raise KscRuntimeError(message, code)
            if self._has_arrays:
                in_place = self._in_arena(lib, a, _abi.scalar_tensors(result, self.ret))
                if in_place:
                    lib.give_away(a)
                    lent = True
                    return _abi.from_c(result, self.ret, _ArenaLoan(lib, a), in_place)
            return _abi.from_c(result, self.ret)
        finally:
            if not lent:
                lib.lib.ks_arena_reset(arena, mark)

    @staticmethod
    def _in_arena(lib, a, arrays):
        """The addresses of the arrays of a result (``arrays``: its tensors
        of scalars, as address and bytes) to leave in the arena ``a``
        instead of copying them: those the call allocated (not an
        argument's memory), if together they are large and most of what
        the arena holds; else none. Arrays that share memory (a tuple of
        one vector twice) are copied, so that no two arrays alias."""
        arena, mark = a
        spans = sorted(arrays)
        shared = set()
        for (p, n), (q, m) in zip(spans, spans[1:]):
            if q < p + n:
                shared.update((p, q))
        mine = [(p, n) for p, n in spans if p not in shared and lib.lib.ks_arena_allocated_since(arena, mark, p, n)]
        total = sum(n for _, n in mine)
        if total < LOAN_MIN_BYTES or lib.lib.ks_arena_capacity(arena) > LOAN_SLACK * total:
            return set()
        return {p for p, _ in mine}

    def __call__(self, *args):
        c_args, keep = self._convert(args, strict=False)
        out = self._call_converted(c_args)
        del keep
        return out


class Overloads:
    """Several functions of one name, told apart by their argument types:
    a call goes to the first whose parameters the arguments match exactly
    (an int is not a Float, an int64 array not a float64 one), else to the
    first they convert to."""

    def __init__(self, name, functions):
        self.name = name
        self.functions = functions

    def __repr__(self):
        return f"<ksc overloads of {self.name}: " + "; ".join(f.signature for f in self.functions) + ">"

    def __call__(self, *args):
        for strict in (True, False):
            for f in self.functions:
                try:
                    c_args, keep = f._convert(args, strict)
                except TypeError:
                    continue
                out = f._call_converted(c_args)
                del keep
                return out
        sigs = "\n  ".join(f.signature for f in self.functions)
        raise TypeError(f"no definition of `{self.name}` takes these arguments; there are:\n  {sigs}")


class Module:
    """A compiled ``.ks`` program. Its functions are attributes
    (``m.f``; a name with several definitions resolves by argument types)
    and items by any of their names (``m["f"]``, ``m["[rev f]"]``,
    ``m["[rev [f Float]]"]``). ``grad``, ``vjp``, ``jvp`` and ``jacobian``
    give derivatives, compiling them on first use."""

    def __init__(self, session, path, cflags, checked, reassociate=False):
        self._session = session
        # One thread at a time in the session; the compiler runs without
        # the GIL, and a thread waiting here waits without it too.
        self._lock = threading.RLock()
        self._path = path
        self._cflags = cflags
        self._checked = checked
        self._reassociate = reassociate
        self._build()

    def _build(self):
        with self._lock:
            built = self._session.build(self._cflags, self._checked, self._reassociate)
        if built["errors"]:
            raise CompileError(built["diagnostics"])
        if built["diagnostics"]:
            warnings.warn(built["diagnostics"], stacklevel=3)
        library = _Library(built["library"])
        self._functions = [Function(self, library, info) for info in built["functions"]]

    def reload(self, source=None):
        """Compiles the module again: from ``source`` if given, else (for
        a module made by ``load``) from its file as it is now. What the
        edit did not change is not checked, derived or lowered again (the C
        compiler still compiles the whole library). Raises ``CompileError``
        (and keeps the previous functions) if the new text has errors."""
        if source is None:
            if self._path is None:
                raise ValueError("a module made by loads() is reloaded with its new source: reload(source)")
            with open(self._path, encoding="utf-8") as f:
                source = f.read()
        with self._lock:
            previous = self._session.text()
            self._session.set_text(source)
            try:
                self._build()
            except CompileError:
                self._session.set_text(previous)
                raise

    @property
    def functions(self):
        """Every exported function (the file's definitions and the derived
        functions of its ``gdef``s and of their callees)."""
        return list(self._functions)

    def _find(self, name):
        exact = [f for f in self._functions if f.name == name]
        if exact:
            return exact
        return [f for f in self._functions if f.short == name or (not f.derivs and f.base == name)]

    def __getitem__(self, name):
        found = self._find(name)
        if not found:
            raise KeyError(f"no function `{name}` in this module; it has: {', '.join(f.name for f in self._functions)}")
        return found[0] if len(found) == 1 else Overloads(name, found)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        found = [f for f in self.__dict__.get("_functions", []) if not f.derivs and f.base == name]
        if not found:
            raise AttributeError(f"no function `{name}` in this module")
        return found[0] if len(found) == 1 else Overloads(name, found)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | {f.base for f in self._functions if not f.derivs})

    def _primal(self, f):
        if isinstance(f, Function):
            return f
        found = self._find(f) if isinstance(f, str) else []
        if len(found) == 1:
            return found[0]
        if not found:
            raise KeyError(f"no function `{f}` in this module")
        raise TypeError(f"`{f}` has several definitions; name one in full: " + ", ".join(x.name for x in found))

    def derived(self, derivation, f):
        """The derived function ``[derivation f]`` (``"rev"``, ``"fwd"``,
        ``"jac"``, ``"jacsparse"``, ...) of ``f`` (a Function or a name),
        compiled on first use (as if the file had ``(gdef derivation f)``)."""
        f = self._primal(f)
        name = f"[{derivation} {f.name}]"
        with self._lock:
            found = [g for g in self._functions if g.name == name]
            if found:
                return found[0]
            text = self._session.text()
            self._session.set_text(text + f"\n; Asked for from Python.\n(gdef {derivation} {f.name})\n")
            try:
                self._build()
            except CompileError:
                self._session.set_text(text)
                raise
            found = [g for g in self._functions if g.name == name]
        if not found:
            raise TypeError(f"{name} cannot be called from Python: its type does not cross the C ABI")
        return found[0]

    def vjp(self, f):
        """``vjp(f)(args, cotangent)``: the cotangent of each argument of
        ``f`` (a tuple, or the one cotangent if ``f`` takes one argument),
        through ``[rev f]``. ``args`` is a tuple of ``f``'s arguments (or the
        argument itself if there is one)."""
        f = self._primal(f)
        rev = self.derived("rev", f)

        def vjp(args, cotangent):
            return rev(args if len(f.params) != 1 else _one(args), cotangent)

        return vjp

    def grad(self, f):
        """``grad(f)(*args)``: the gradient of a Float-valued ``f`` with
        respect to each argument (a tuple, or the one gradient if ``f``
        takes one argument), through ``[rev f]``."""
        f = self._primal(f)
        if f.ret != "Float":
            raise TypeError(f"grad needs a Float-valued function; {f.short} returns {_abi.show(f.ret)} (use vjp)")
        rev = self.derived("rev", f)

        def grad(*args):
            return rev(_packed(f, args), 1.0)

        return grad

    def jvp(self, f):
        """``jvp(f)(args, tangents)``: the tangent of ``f``'s result, through
        ``[fwd f]``. ``args`` and ``tangents`` are tuples of ``f``'s
        arguments and their tangents (or the one argument and tangent)."""
        f = self._primal(f)
        fwd = self.derived("fwd", f)

        def jvp(args, tangents):
            if len(f.params) == 1:
                return fwd(_one(args), _one(tangents))
            return fwd(args, tangents)

        return jvp

    def jacobian(self, f, sparse=False):
        """``jacobian(f)(*args)``: the Jacobian of ``f`` as a 2-D array (rows:
        the result's tangent flattened; columns: the arguments' tangents
        flattened), through ``[jac f]``. With ``sparse``, through
        ``[jacsparse f]``: a ``scipy.sparse.csr_matrix`` if SciPy is
        installed, else the tuple ``((rows, cols), row_offsets, columns,
        values)``."""
        f = self._primal(f)
        jac = self.derived("jacsparse" if sparse else "jac", f)

        def jacobian(*args):
            packed = _packed(f, args)
            # [jac f] takes f's arguments packed, [jacsparse f] as f does.
            out = jac(packed) if len(jac.params) == 1 else jac(*args)
            if not sparse:
                return out
            (rows, cols), offsets, columns, values = out
            try:
                import scipy.sparse
            except ImportError:
                return out
            return scipy.sparse.csr_matrix((values, columns, offsets), shape=(rows, cols))

        return jacobian


def _packed(f, args):
    """The arguments of ``f`` as its derivatives take them: the argument
    itself if ``f`` has one parameter, else the tuple of them."""
    if len(args) != len(f.params):
        raise TypeError(f"{f.short} takes {len(f.params)} argument(s) ({f._param_list()}), got {len(args)}")
    return args[0] if len(args) == 1 else args


def _one(args):
    """The argument of a one-parameter function, given alone or as a
    1-tuple."""
    if isinstance(args, tuple) and len(args) == 1:
        return args[0]
    return args


def loads(source, *, name="<string>", cflags=None, checked=True, reassociate=False):
    """Compiles ``.ks`` source text into a Module. ``name`` is the file name
    messages give. ``cflags`` replaces the C compiler's optimisation flags
    (default ``$KSC_CFLAGS``, else ``-O3 -march=native``); ``checked=False``
    removes bounds and overflow checks; ``reassociate=True`` lets the sums
    and maxima of loops over data be combined in any order, vectorised
    (``ksc build --reassociate``: results differ by rounding). Raises
    ``CompileError`` with the located diagnostics if the program has
    errors."""
    return Module(Session(source, name), None, cflags, checked, reassociate)


def load(path, *, cflags=None, checked=True, reassociate=False):
    """Compiles the ``.ks`` file at ``path`` into a Module (see ``loads``);
    ``Module.reload()`` compiles it again after an edit."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    return Module(Session(source, path), path, cflags, checked, reassociate)
