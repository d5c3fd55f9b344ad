"""Values across the C ABI of a ksc library (the header's convention).

Types come from the native module as Python data: ``"Float"``,
``"Integer"``, ``"Bool"``, ``"String"``, ``("Tensor", rank, element)`` (a
``Vec`` is rank 1) and ``("Tuple", (components))``, hashable. In C a Float is a
``double``, an Integer an ``int64_t``, a Bool a ``bool``, a String a
``const char *``, a tensor ``{ int64_t size[rank]; T *data; }`` (row-major)
and a tuple a struct with fields ``f0``, ``f1``, ... A parameter of tuple
type is passed as its leaves, spread recursively.
"""

import ctypes
import numbers
import operator

import numpy as np

_SCALARS = {
    "Float": ctypes.c_double,
    "Integer": ctypes.c_int64,
    "Bool": ctypes.c_bool,
    "String": ctypes.c_char_p,
}

# The NumPy dtype of each scalar type's array elements.
_DTYPES = {"Float": np.float64, "Integer": np.int64, "Bool": np.bool_}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def show(t):
    """A type in .ks syntax: ``Vec Float``, ``Tuple Float Integer``."""
    if isinstance(t, str):
        return t
    if t[0] == "Tensor":
        inner = show(t[2])
        inner = f"({inner})" if " " in inner else inner
        return f"Vec {inner}" if t[1] == 1 else f"Tensor {t[1]} {inner}"
    parts = []
    for c in t[1]:
        s = show(c)
        parts.append(f"({s})" if " " in s else s)
    return " ".join(["Tuple"] + parts)


_CTYPES = {}


def ctype(t):
    """The ctypes type of a value of type ``t`` (one per type)."""
    if t in _CTYPES:
        return _CTYPES[t]
    if isinstance(t, str):
        c = _SCALARS[t]
    elif t[0] == "Tensor":
        rank, elem = t[1], t[2]
        c = type(
            f"ks_tensor_{len(_CTYPES)}",
            (ctypes.Structure,),
            {"_fields_": [("size", ctypes.c_int64 * rank), ("data", ctypes.POINTER(ctype(elem)))]},
        )
    else:
        comps = t[1]
        fields = [(f"f{i}", ctype(c)) for i, c in enumerate(comps)] or [("unit", ctypes.c_char)]
        c = type(f"ks_tuple_{len(_CTYPES)}", (ctypes.Structure,), {"_fields_": fields})
    _CTYPES[t] = c
    return c


def leaf_types(t):
    """The types of the C parameters a .ks parameter of type ``t`` is passed as."""
    if isinstance(t, tuple) and t[0] == "Tuple":
        return [lt for c in t[1] for lt in leaf_types(c)]
    return [t]


class Mismatch(TypeError):
    """A value that does not have the type asked for; ``where`` locates it
    inside the argument (``[3]``, ``[1][0]``: an element, a component)."""

    def __init__(self, what, where=""):
        super().__init__(what)
        self.what = what
        self.where = where

    def inside(self, prefix):
        return Mismatch(self.what, prefix + self.where)


def _describe(v):
    if isinstance(v, np.ndarray):
        return f"a {v.ndim}-D array of {v.dtype}"
    return f"a {type(v).__name__}"


def fits_int64(i):
    """Does the int ``i`` fit an Integer?"""
    return _INT64_MIN <= i <= _INT64_MAX


def scalar(v, t, strict):
    """A Python scalar as the C scalar of type ``t``. ``strict``: an int is
    not a Float (for choosing between overloads)."""
    if t == "Float":
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise Mismatch(f"expected a float (Float), got {_describe(v)}")
        if strict and not isinstance(v, (float, np.floating)):
            raise Mismatch(f"expected a float (Float), got {_describe(v)}")
        return float(v)
    if t == "Integer":
        if isinstance(v, (bool, np.bool_)):
            raise Mismatch(f"expected an int (Integer), got {_describe(v)}")
        try:
            i = operator.index(v)
        except TypeError:
            raise Mismatch(f"expected an int (Integer), got {_describe(v)}") from None
        if not fits_int64(i):
            raise Mismatch(f"the int {i} does not fit an Integer (64 bits)")
        return i
    if t == "Bool":
        if not isinstance(v, (bool, np.bool_)):
            raise Mismatch(f"expected a bool (Bool), got {_describe(v)}")
        return bool(v)
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytes):
        return v
    raise Mismatch(f"expected a str (String), got {_describe(v)}")


def _scalar_array(v, rank, elem, strict, keep):
    """An array of scalars as a tensor struct: zero-copy when ``v`` is a
    C-contiguous array of the element's dtype, else converted."""
    dtype = _DTYPES.get(elem)
    if dtype is None:  # String elements
        items = [scalar(x, elem, strict) for x in np.asarray(v, dtype=object).reshape(-1)]
        shape = np.shape(v)
        if len(shape) < rank:
            raise Mismatch(f"expected {rank} dimensions, got {len(shape)}")
        arr = (ctypes.c_char_p * len(items))(*items)
        keep.append(arr)
        return shape[:rank], ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
    arr = v if isinstance(v, np.ndarray) else np.asarray(v)
    if arr.ndim != rank:
        raise Mismatch(f"expected {rank}-D data ({show(('Tensor', rank, elem))}), got {_describe(arr)}")
    kind = arr.dtype.kind
    ok = {"Float": "fiu" if not strict else "f", "Integer": "iu", "Bool": "b"}[elem]
    if arr.size and kind not in ok:
        raise Mismatch(f"expected elements of {np.dtype(dtype).name} ({elem}), got {arr.dtype}")
    if elem == "Integer" and kind == "u" and arr.size and arr.max() > _INT64_MAX:
        raise Mismatch("an element does not fit an Integer (64 bits)")
    arr = np.ascontiguousarray(arr, dtype=dtype)
    keep.append(arr)
    return arr.shape, arr.ctypes.data_as(ctypes.POINTER(ctype(elem)))


def to_c(v, t, strict, keep):
    """The C value of ``v`` as type ``t``; what must outlive the call goes
    into ``keep``."""
    if isinstance(t, str):
        return scalar(v, t, strict)
    c = ctype(t)
    if t[0] == "Tuple":
        fields = _components(v, t, lambda x, ct: to_c(x, ct, strict, keep))
        return c(*fields)
    rank, elem = t[1], t[2]
    if isinstance(elem, str):
        shape, data = _scalar_array(v, rank, elem, strict, keep)
        return c((ctypes.c_int64 * rank)(*shape), data)
    # Elements that are tensors or tuples: an array of their structs.
    if isinstance(v, np.ndarray):
        if v.ndim < rank:
            raise Mismatch(f"expected at least {rank} dimensions ({show(t)}), got {_describe(v)}")
        shape = v.shape[:rank]
        items = list(v.reshape((-1,) + v.shape[rank:]))
    else:
        if rank != 1:
            raise Mismatch(f"expected an array of at least {rank} dimensions ({show(t)}), got {_describe(v)}")
        try:
            items = list(v)
        except TypeError:
            raise Mismatch(f"expected a sequence ({show(t)}), got {_describe(v)}") from None
        shape = (len(items),)
    structs = _located(items, [elem] * len(items), lambda x, et: to_c(x, et, strict, keep))
    arr = (ctype(elem) * len(structs))(*structs)
    keep.append(arr)
    return c((ctypes.c_int64 * rank)(*shape), ctypes.cast(arr, ctypes.POINTER(ctype(elem))))


def _components(v, t, convert):
    """The tuple ``v`` of the Tuple type ``t``, each component through
    ``convert(component, its type)``; a mismatch is located at its
    component."""
    comps = t[1]
    if not comps:
        if not (v is None or (isinstance(v, tuple) and not v)):
            raise Mismatch(f"expected () (the unit Tuple), got {_describe(v)}")
        return []
    if not isinstance(v, (tuple, list)) or len(v) != len(comps):
        raise Mismatch(f"expected a tuple of {len(comps)} ({show(t)}), got {_describe(v)}")
    return _located(v, comps, convert)


def _located(values, types, convert):
    """Each value through ``convert(value, its type)``; a mismatch is
    located at its position (``[i]``)."""
    out = []
    for i, (x, t) in enumerate(zip(values, types)):
        try:
            out.append(convert(x, t))
        except Mismatch as e:
            raise e.inside(f"[{i}]") from None
    return out


def spread(v, t, strict, keep):
    """The C arguments of a .ks parameter of type ``t``: its leaves, a
    tuple spread into its components, recursively."""
    if isinstance(t, tuple) and t[0] == "Tuple":
        return [leaf for part in _components(v, t, lambda x, ct: spread(x, ct, strict, keep)) for leaf in part]
    return [to_c(v, t, strict, keep)]


def _is_scalar_tensor(t):
    return isinstance(t, tuple) and t[0] == "Tensor" and isinstance(t[2], str) and t[2] != "String"


def has_scalar_tensors(t):
    """Does a value of type ``t`` hold tensors of scalars, itself or in its
    tuple's components (not inside other tensors)?"""
    if _is_scalar_tensor(t):
        return True
    return isinstance(t, tuple) and t[0] == "Tuple" and any(has_scalar_tensors(ct) for ct in t[1])


def scalar_tensors(c, t):
    """The tensors of scalars in a C value of type ``t``, itself or its
    tuple's components (not those inside other tensors), in the order
    ``from_c`` converts them: each as (address, bytes)."""
    if _is_scalar_tensor(t):
        n = int(np.prod([c.size[i] for i in range(t[1])]))
        address = ctypes.cast(c.data, ctypes.c_void_p).value
        return [(address, n * np.dtype(_DTYPES[t[2]]).itemsize)] if n > 0 and address else []
    if isinstance(t, tuple) and t[0] == "Tuple":
        return [x for i, ct in enumerate(t[1]) for x in scalar_tensors(getattr(c, f"f{i}"), ct)]
    return []


class _InPlace:
    """An array's memory left where the call put it (in an arena, which
    ``owner`` keeps from reuse while the array lives): NumPy reads it
    through ``__array_interface__`` and keeps this object as the array's
    base."""

    def __init__(self, address, shape, dtype, owner):
        self.__array_interface__ = {
            "data": (address, False),
            "shape": shape,
            "typestr": np.dtype(dtype).str,
            "version": 3,
        }
        self.owner = owner


def from_c(c, t, owner=None, in_place=()):
    """A C value of type ``t`` as Python data: scalars as float, int, bool,
    str; tuples as tuples; a tensor of scalars as an array of its shape; a
    tensor of equal-shaped arrays as one array (a ``Vec (Vec Float)`` of
    rows of one length is 2-D); other tensors as lists (rank 1) or object
    arrays. Everything is copied out of the arena, except the tensors of
    scalars whose addresses are in ``in_place``: those arrays use the
    arena's memory and keep ``owner`` alive."""
    if isinstance(t, str):
        if t == "String":
            return c.decode() if isinstance(c, bytes) else (c or b"").decode()
        return {"Float": float, "Integer": int, "Bool": bool}[t](c)
    if t[0] == "Tuple":
        return tuple(from_c(getattr(c, f"f{i}"), ct, owner, in_place) for i, ct in enumerate(t[1]))
    rank, elem = t[1], t[2]
    shape = tuple(c.size[i] for i in range(rank))
    n = int(np.prod(shape)) if shape else 1
    if _is_scalar_tensor(t):
        if n == 0:
            return np.zeros(shape, dtype=_DTYPES[elem])
        address = ctypes.cast(c.data, ctypes.c_void_p).value
        if address in in_place:
            return np.asarray(_InPlace(address, shape, _DTYPES[elem], owner))
        flat = np.ctypeslib.as_array(c.data, shape=(n,))
        return np.array(flat, dtype=_DTYPES[elem]).reshape(shape)
    items = [from_c(c.data[i], elem) for i in range(n)]
    if isinstance(elem, tuple) and elem[0] == "Tensor" and n > 0:
        shapes = {np.shape(x) for x in items}
        if len(shapes) == 1 and all(isinstance(x, np.ndarray) and x.dtype != object for x in items):
            return np.stack(items).reshape(shape + items[0].shape)
    if rank == 1:
        return items
    out = np.empty(n, dtype=object)
    out[:] = items
    return out.reshape(shape)


# What the JAX and PyTorch wrappers take.


def scalar_kind(t):
    """The scalar type of a Float, an Integer or a tensor of either; None
    for any other type."""
    if t in ("Float", "Integer"):
        return t
    if isinstance(t, tuple) and t[0] == "Tensor" and t[2] in ("Float", "Integer"):
        return t[2]
    return None


def result_of_floats(t):
    """Is ``t`` Floats: a Float, a tensor of Floats, or a tuple of them?"""
    if scalar_kind(t) == "Float":
        return True
    return isinstance(t, tuple) and t[0] == "Tuple" and bool(t[1]) and all(result_of_floats(c) for c in t[1])


def wrappable(f, who):
    """The scalar kind of each parameter of ``f`` (see ``scalar_kind``), for
    the JAX and PyTorch wrappers (``who`` names the wrapper in messages);
    a TypeError if they cannot carry ``f``."""
    kinds = [scalar_kind(t) for _, t in f.params]
    for (name, _), k in zip(f.params, kinds):
        if k is None:
            raise TypeError(f"{who}: parameter `{name}` of {f.short} is not a Float, an Integer or a tensor of them")
    if not result_of_floats(f.ret):
        raise TypeError(f"{who}: the result of {f.short} is not Floats (a Float, a tensor of Floats, or a tuple of them)")
    return kinds
