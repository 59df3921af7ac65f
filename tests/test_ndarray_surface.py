"""Every public method, attribute and Python protocol of numpy.ndarray (and of the
numpy scalar a traced scalar stands for) on a tracer: it gives numpy's value and
derivative, raises the error numpy raises, or refuses with TracingError /
NotImplementedError naming it -- never an AttributeError or TypeError from
Python's internals, never another answer.

``SURFACE`` classifies each name; a name a future numpy adds fails
``test_every_name_is_classified`` until it is added here (and to Tracer).
"""

import copy
import math
import operator
import pickle

import numpy as np
import pytest

import hybridad as ha
from hybridad import TracingError
from hybridad.testing import numerical_gradient
from hybridad.core.tracer import Tracer

RNG = np.random.default_rng(7)
X = RNG.uniform(-1.0, 1.0, (3, 4))
W = RNG.uniform(-1.0, 1.0, (3, 4))
M = RNG.uniform(-1.0, 1.0, (4, 4))


def S(r):
    """A smooth scalar of any result (so derivatives are checked everywhere)."""
    return np.sum(np.sin(r * 1.0) * W) if np.shape(r) == W.shape else np.sum(np.sin(r * 1.0))


def _in_place(op, value):
    """``y = 1.5 x; z = y; y <op>= value(x)``: z is y, numpy's aliasing."""
    def f(x):
        y = x * 1.5
        z = y
        op(y, value(x))
        return S(z)

    return f


def _in_place_bool(op):
    def f(x):
        b = x > 0
        c = b
        op(b, x < 0.5)
        return np.sum(np.where(c, x, 0.0))

    return f


def _sorted_in_place(method, *args):
    def f(x):
        y = x * 1.0
        assert getattr(y, method)(*args) is None
        return S(y)

    return f


def _fill(x):
    y = x * 1.0
    y.fill(x[0, 1])
    return S(y) + S(x)


def _copy_is_new(make):
    def f(x):
        y = x * 2.0
        z = make(y)
        z += 1.0  # must not reach y
        return S(y) + 0.5 * S(z)

    return f


def _set_items(x):
    y = x * 1.0
    y[0] = x[1] ** 2  # a row from a traced expression
    y[:, 1] = 0.5  # a column from a constant
    y[y.shape[0] - 1, [0, 0]] = np.sin(x[0, :2])  # repeated positions: the last write wins
    return S(y) + S(y * x)


def _deleted(x):
    y = x * 1.0
    del y[0]


WORKS, REFUSED, NUMPY_ERROR, PYTHON = "works", "refused", "numpy error", "python"

# name: (WORKS, f) -- value and derivative as numpy's
#       (REFUSED, f, token) -- f raises TracingError / NotImplementedError naming token
#       (NUMPY_ERROR, f, exception) -- numpy and the tracer raise the same error
#       (PYTHON, why) -- object machinery with no numpy value to match
SURFACE = {
    "T": (WORKS, lambda x: S(x.T.T) + S(x.T @ x)),
    "__abs__": (WORKS, lambda x: S(abs(x))),
    "__add__": (WORKS, lambda x: S(x + W)),
    "__and__": (WORKS, lambda x: np.sum(np.where((x > 0) & (x < 0.5), x, 0.0))),
    "__array__": (REFUSED, lambda x: x.__array__(), "converted to a numpy array"),
    "__array_finalize__": (REFUSED, lambda x: x.__array_finalize__, "__array_finalize__"),
    "__array_function__": (WORKS, lambda x: np.sum(np.concatenate([x, W]))),
    "__array_interface__": (REFUSED, lambda x: x.__array_interface__, "__array_interface__"),
    "__array_namespace__": (WORKS, lambda x: S(x.__array_namespace__().cos(x))),
    "__array_priority__": (WORKS, lambda x: S(np.float64(2.0) * x + W * x)),
    "__array_struct__": (REFUSED, lambda x: x.__array_struct__, "__array_struct__"),
    "__array_ufunc__": (WORKS, lambda x: S(np.tanh(x))),
    "__array_wrap__": (REFUSED, lambda x: x.__array_wrap__, "__array_wrap__"),
    # (a Python decision on a value takes the traced call's, guarded: hybridad.core.decisions)
    "__bool__": (WORKS, lambda x: S(x) * (2.0 if bool(x[0, 0] > 0.1) else 1.0)),
    "__class__": (WORKS, lambda x: S(x) * (isinstance(x, np.ndarray) + 2 * isinstance(x[0, 0],
                                                                                    float))),
    "__class_getitem__": (PYTHON, "typing: ndarray[...] is a class-level alias"),
    "__complex__": (REFUSED, lambda x: complex(x[0, 0]), "complex()"),
    "__contains__": (REFUSED, lambda x: 0.5 in x, "`in`"),
    "__copy__": (WORKS, _copy_is_new(copy.copy)),
    "__deepcopy__": (WORKS, _copy_is_new(copy.deepcopy)),
    "__delattr__": (PYTHON, "attribute deletion"),
    "__delitem__": (NUMPY_ERROR, _deleted, ValueError),
    "__dir__": (PYTHON, "introspection"),
    "__divmod__": (WORKS, lambda x: S(divmod(x * 3.0, 0.7)[1]) + S(divmod(x, 0.3)[0])),
    "__dlpack__": (REFUSED, lambda x: x.__dlpack__(), "__dlpack__"),
    "__dlpack_device__": (REFUSED, lambda x: x.__dlpack_device__(), "__dlpack_device__"),
    "__doc__": (PYTHON, "documentation"),
    "__eq__": (WORKS, lambda x: np.sum(np.where(x == x[0, 0], x, W)) + np.sum(x == None)),  # noqa: E711
    "__float__": (REFUSED, lambda x: float(x[0, 0]), "float()"),  # (would drop the derivative)
    "__floordiv__": (WORKS, lambda x: S(x // 0.3) + S(x)),
    "__format__": (REFUSED, lambda x: f"{x[0, 0]:.3f}", "format()"),
    "__ge__": (WORKS, lambda x: np.sum(np.where(x >= 0.1, x, W))),
    "__getattribute__": (PYTHON, "attribute access"),
    "__getitem__": (WORKS, lambda x: S(x[1]) + S(x[:, 1:3]) + S(x[[0, 2]]) + S(x[x.shape[0] - 1,
                                                                                 2])),
    "__getstate__": (REFUSED, lambda x: x.__getstate__(), "Pickling"),
    "__gt__": (WORKS, lambda x: np.sum(np.where(x > 0.1, x, W))),
    "__hash__": (NUMPY_ERROR, lambda x: hash(x), TypeError),
    "__iadd__": (WORKS, _in_place(operator.iadd, lambda x: W * x)),
    "__iand__": (WORKS, _in_place_bool(operator.iand)),
    "__ifloordiv__": (WORKS, _in_place(operator.ifloordiv, lambda x: 0.7)),
    # integer shifts have no derivative rules: values of data (ops/host.py host_ufunc)
    "__ilshift__": (WORKS, lambda x: S(operator.ilshift((x > 0).astype(np.int64), 1) * x)),
    "__imatmul__": (WORKS, _in_place(operator.imatmul, lambda x: M)),
    "__imod__": (WORKS, _in_place(operator.imod, lambda x: 0.7)),
    "__imul__": (WORKS, _in_place(operator.imul, lambda x: x)),
    "__index__": (WORKS, lambda x: S(x) * [1.0, 2.0][(x[0, 0] > 0.1).astype(np.int64)]),
    "__init__": (PYTHON, "construction"),
    "__init_subclass__": (PYTHON, "subclassing"),
    "__int__": (WORKS, lambda x: S(x) * (1 + int(x[0, 0] > 0.1))),
    "__invert__": (WORKS, lambda x: np.sum(np.where(~(x > 0), x, 0.0))),
    "__ior__": (WORKS, _in_place_bool(operator.ior)),
    "__ipow__": (WORKS, _in_place(operator.ipow, lambda x: 2)),
    "__irshift__": (WORKS, lambda x: S(operator.irshift((x > 0).astype(np.int64) * 4, 1) * x)),
    "__isub__": (WORKS, _in_place(operator.isub, lambda x: x * W)),
    "__iter__": (WORKS, lambda x: sum(S(row) * k for k, row in enumerate(x))),
    "__itruediv__": (WORKS, _in_place(operator.itruediv, lambda x: x * x + 1.0)),
    "__ixor__": (WORKS, _in_place_bool(operator.ixor)),
    "__le__": (WORKS, lambda x: np.sum(np.where(x <= 0.1, x, W))),
    "__len__": (WORKS, lambda x: S(x) * len(x)),
    "__lshift__": (WORKS, lambda x: S(((x > 0).astype(np.int64) << 1) * x)),
    "__lt__": (WORKS, lambda x: np.sum(np.where(x < 0.1, x, W))),
    "__matmul__": (WORKS, lambda x: S(x @ M)),
    "__mod__": (WORKS, lambda x: S(x % 0.7)),
    "__mul__": (WORKS, lambda x: S(x * x)),
    "__ne__": (WORKS, lambda x: np.sum(np.where(x != x[0, 0], x, W)) + np.sum(x != None)),  # noqa: E711
    "__neg__": (WORKS, lambda x: S(-x)),
    "__new__": (PYTHON, "construction"),
    "__or__": (WORKS, lambda x: np.sum(np.where((x > 0.5) | (x < -0.5), x, 0.0))),
    "__pos__": (WORKS, _copy_is_new(operator.pos)),
    "__pow__": (WORKS, lambda x: S(x ** 2) + S(x ** 3.0)),
    "__radd__": (WORKS, lambda x: S(W + x) + S(1.0 + x)),
    "__rand__": (WORKS, lambda x: np.sum(np.where(True & (x > 0), x, 0.0))),
    "__rdivmod__": (WORKS, lambda x: S(divmod(2.5, x * x + 1.0)[1])),
    "__reduce__": (REFUSED, lambda x: pickle.dumps(x), "Pickling"),
    "__reduce_ex__": (REFUSED, lambda x: x.__reduce_ex__(4), "Pickling"),
    "__repr__": (PYTHON, "informative, not numpy's: debuggers and error messages call it"),
    "__rfloordiv__": (WORKS, lambda x: S(2.5 // (x * x + 1.0)) + S(x)),
    "__rlshift__": (WORKS, lambda x: S((1 << (x > 0).astype(np.int64)) * x)),
    "__rmatmul__": (WORKS, lambda x: S(M @ x.T)),
    "__rmod__": (WORKS, lambda x: S(2.5 % (x * x + 1.0))),
    "__rmul__": (WORKS, lambda x: S(2.0 * x) + S(W * x)),
    "__ror__": (WORKS, lambda x: np.sum(np.where(False | (x > 0), x, 0.0))),
    "__rpow__": (WORKS, lambda x: S(2.0 ** x)),
    "__rrshift__": (WORKS, lambda x: S((8 >> (x > 0).astype(np.int64)) * x)),
    "__rshift__": (WORKS, lambda x: S(((x > 0).astype(np.int64) * 4 >> 1) * x)),
    "__rsub__": (WORKS, lambda x: S(1.0 - x)),
    "__rtruediv__": (WORKS, lambda x: S(1.0 / (x * x + 1.0))),
    "__rxor__": (WORKS, lambda x: np.sum(np.where(True ^ (x > 0), x, 0.0))),
    "__setattr__": (PYTHON, "attribute assignment (ndarray's settable attributes refuse: "
                            "see test_setting_attributes_is_refused)"),
    "__setitem__": (WORKS, lambda x: _set_items(x)),
    "__setstate__": (REFUSED, lambda x: (x * 1.0).__setstate__(None), "__setstate__"),
    "__sizeof__": (PYTHON, "the Python object's size"),
    "__str__": (WORKS, lambda x: S(x) * (str(x) != "") * (f"{x}" != "")),  # (print in f)
    "__sub__": (WORKS, lambda x: S(x - W)),
    "__subclasshook__": (PYTHON, "abstract base classes"),
    "__truediv__": (WORKS, lambda x: S(x / (W * W + 1.0))),
    "__xor__": (WORKS, lambda x: np.sum(np.where((x > 0) ^ (x < 0.5), x, 0.0))),
    "all": (WORKS, lambda x: S(x) * (1 + x.all()) + np.sum((x > -0.9).all(axis=1))),
    "any": (WORKS, lambda x: S(x) * (1 + x.any()) + np.sum((x > 0.9).any(axis=0))),
    "argmax": (WORKS, lambda x: S(x) + 0.5 * x.argmax() + np.sum(x.argmax(axis=0)) +
               np.sum(x.argmax(1, keepdims=True))),
    "argmin": (WORKS, lambda x: S(x) + 0.5 * x.argmin() + np.sum(x.argmin(axis=1))),
    "argpartition": (WORKS, lambda x: S(x) + np.sum(x.argpartition([0, 1, 2, 3]) * W)),
    "argsort": (WORKS, lambda x: S(x) + np.sum(x.argsort(axis=0) * W)),
    "astype": (WORKS, lambda x: S(x.astype(np.float32).astype(np.float64) * 0) + S(x.astype(
        np.float64)) + np.sum((x > 0).astype(np.int32))),
    "base": (REFUSED, lambda x: x.base, ".base"),
    "byteswap": (REFUSED, lambda x: x.byteswap(), "x.byteswap()"),
    "choose": (REFUSED, lambda x: (x > 0).astype(np.int64).choose([W, 2 * W]), "x.choose()"),
    "clip": (WORKS, lambda x: S(x.clip(-0.5, 0.5)) + S(x.clip(min=0.0))),
    "compress": (WORKS, lambda x: S(x.compress([True, False, True], axis=0))),
    "conj": (WORKS, lambda x: S(x.conj())),
    "conjugate": (WORKS, lambda x: S(x.conjugate())),
    "copy": (WORKS, _copy_is_new(lambda y: y.copy())),
    "ctypes": (REFUSED, lambda x: x.ctypes, ".ctypes"),
    "cumprod": (WORKS, lambda x: S(x.cumprod(axis=1)) + S(x.cumprod())),
    "cumsum": (WORKS, lambda x: S(x.cumsum(axis=0)) + S(x.cumsum())),
    "data": (REFUSED, lambda x: x.data, ".data"),
    "device": (WORKS, lambda x: S(x) * (x.device == "cpu")),
    "diagonal": (WORKS, lambda x: S(x.diagonal()) + S(x.diagonal(1))),
    "dot": (WORKS, lambda x: S(x.dot(M)) + S(x[0].dot(x[1]))),
    "dtype": (WORKS, lambda x: S(x) * (x.dtype == np.float64)),
    "dump": (REFUSED, lambda x: x.dump("unused.npy"), "x.dump()"),
    "dumps": (REFUSED, lambda x: x.dumps(), "x.dumps()"),
    "fill": (WORKS, _fill),
    "flags": (REFUSED, lambda x: x.flags, ".flags"),
    "flat": (WORKS, lambda x: S(x.flat[5]) + S(x.flat[2:7]) + sum(x.flat) + len(x.flat)),
    "flatten": (WORKS, _copy_is_new(lambda y: y.flatten())),
    "getfield": (REFUSED, lambda x: x.getfield(np.float64), "x.getfield()"),
    "imag": (WORKS, lambda x: S(x + x.imag)),
    "item": (REFUSED, lambda x: x.item(0), ".item()"),
    "itemsize": (WORKS, lambda x: S(x) * x.itemsize),
    "mT": (WORKS, lambda x: S(x.mT.mT) + S(x.mT @ x)),
    "max": (WORKS, lambda x: x.max() + S(x.max(axis=0)) + x.max(initial=2.0)),
    "mean": (WORKS, lambda x: x.mean() + S(x.mean(axis=1)) + x.mean(where=x > 0)),
    "min": (WORKS, lambda x: x.min() + S(x.min(axis=1, keepdims=True))),
    "nbytes": (WORKS, lambda x: S(x) * x.nbytes),
    "ndim": (WORKS, lambda x: S(x) * x.ndim),
    "nonzero": (WORKS, lambda x: S(x[x.nonzero()]) + S(x[(x > 0).nonzero()] ** 2)),
    "partition": (WORKS, _sorted_in_place("partition", [0, 1, 2, 3])),
    "prod": (WORKS, lambda x: x.prod() + S(x.prod(axis=0)) + x.prod(where=x > 0)),
    "put": (REFUSED, lambda x: (x * 1.0).put([0], [1.0]), "x.put()"),
    "ravel": (WORKS, lambda x: S(x.ravel()) + S(x.T.ravel())),
    "real": (WORKS, lambda x: S(x.real)),
    "repeat": (WORKS, lambda x: S(x.repeat(2, axis=0)) + S(x.repeat([1, 0, 2], axis=0))),
    "reshape": (WORKS, lambda x: S(x.reshape(4, 3)) + S(x.reshape((2, -1)))),
    "resize": (REFUSED, lambda x: (x * 1.0).resize((12,)), "x.resize()"),
    "round": (WORKS, lambda x: S(x.round(1)) + S(x)),
    "searchsorted": (WORKS, lambda x: S(x) + np.sum(np.sort(x[0]).searchsorted(x[1])) +
                     np.sum(np.sort(x[0]).searchsorted(x[2], side="right"))),
    "setfield": (REFUSED, lambda x: (x * 1.0).setfield(1.0, np.float64), "x.setfield()"),
    "setflags": (REFUSED, lambda x: (x * 1.0).setflags(write=False), "x.setflags()"),
    "shape": (WORKS, lambda x: S(x) * x.shape[1]),
    "size": (WORKS, lambda x: S(x) * x.size),
    "sort": (WORKS, _sorted_in_place("sort", 0)),
    "squeeze": (WORKS, lambda x: S(x[:1].squeeze()) + S(x[:, :1].squeeze(axis=1))),
    "std": (WORKS, lambda x: x.std() + S(x.std(axis=0, ddof=1)) + x.std(where=x > -0.5)),
    "strides": (REFUSED, lambda x: x.strides, ".strides"),
    "sum": (WORKS, lambda x: x.sum() + S(x.sum(axis=1)) + x.sum(initial=1.5) +
            x.sum(where=x < 0.3)),
    "swapaxes": (WORKS, lambda x: S(x.swapaxes(0, 1) @ x)),
    "take": (WORKS, lambda x: S(x.take([0, 5, 7])) + S(x.take([1, 0], axis=0))),
    "to_device": (WORKS, lambda x: S(x.to_device("cpu"))),
    "tobytes": (REFUSED, lambda x: x.tobytes(), "x.tobytes()"),
    "tofile": (REFUSED, lambda x: x.tofile("unused.bin"), "x.tofile()"),
    "tolist": (REFUSED, lambda x: x.tolist(), ".tolist()"),
    "trace": (WORKS, lambda x: x.trace() + x.trace(offset=1)),
    "transpose": (WORKS, lambda x: S(x.transpose() @ x) + S(x.transpose(1, 0).T)),
    "var": (WORKS, lambda x: x.var() + S(x.var(axis=1, ddof=1)) + x.var(where=x > 0)),
    "view": (WORKS, lambda x: S(x.view()) + S(x.view(np.float64))),
}

# the numpy scalar a full integer index or a full reduction gives (np.float64,
# a Python float) has a few more: math.floor(s), round(s, n), s.hex(), ...
SCALAR_SURFACE = {
    # (Python ints decided on the traced call's values, as int() is)
    "__ceil__": (WORKS, lambda x: math.ceil(x[0, 0] * 3.7) + S(x) * math.ceil(x[1, 1])),
    "__floor__": (WORKS, lambda x: math.floor(x[0, 0] * 3.7) + S(x) * math.floor(x[1, 1])),
    "__trunc__": (WORKS, lambda x: math.trunc(x[0, 0] * 3.7) + S(x) * math.trunc(x[1, 1])),
    "__round__": (WORKS, lambda x: round(x[0, 0] * 3.7, 2) + round(x.sum(), 1) + S(x)),
    "__getformat__": (PYTHON, "float's class-level format query"),
    "__getnewargs__": (REFUSED, lambda x: x[0, 0].__getnewargs__(), "__getnewargs__"),
    "as_integer_ratio": (REFUSED, lambda x: x[0, 0].as_integer_ratio(), "as_integer_ratio"),
    "fromhex": (REFUSED, lambda x: x[0, 0].fromhex("0x1p0"), "fromhex"),
    "hex": (REFUSED, lambda x: x[0, 0].hex(), "x.hex()"),
    "is_integer": (REFUSED, lambda x: x[0, 0].is_integer(), "is_integer"),
}

CASES = {**SURFACE, **SCALAR_SURFACE}


def test_every_name_is_classified():
    names = set(dir(np.ndarray))
    scalar = set(dir(np.float64)) - names
    assert sorted(names - set(SURFACE)) == [], "classify these new ndarray names"
    assert sorted(set(SURFACE) - names) == [], "no longer ndarray's"
    assert sorted(scalar - set(SCALAR_SURFACE)) == [], "classify these numpy-scalar names"
    assert sorted(set(SCALAR_SURFACE) - scalar) == [], "no longer the scalar's"


def _names(kind):
    return sorted(n for n, case in CASES.items() if case[0] == kind)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", _names(WORKS))
def test_works_as_numpy(name, backend):
    f = CASES[name][1]
    res = ha.gradient(f, X, backend=backend)
    np.testing.assert_allclose(float(res.value), float(f(X.copy())), rtol=1e-12, atol=1e-12)
    num = numerical_gradient(f, X)
    np.testing.assert_allclose(res.gradient, num, rtol=0, atol=1e-6 * max(1.0, np.abs(num).max()))


@pytest.mark.parametrize("name", _names(REFUSED))
def test_refused_names_it(name):
    _, f, token = CASES[name]
    with pytest.raises((TracingError, NotImplementedError)) as info:
        ha.gradient(lambda x: f(x) * 0.0 + np.sum(x), X, backend="numpy")
    assert token in str(info.value)


@pytest.mark.parametrize("name", _names(NUMPY_ERROR))
def test_raises_as_numpy(name):
    _, f, error = CASES[name]
    with pytest.raises(error):
        f(X.copy())
    with pytest.raises(error):
        ha.gradient(lambda x: f(x) * 0.0 + np.sum(x), X, backend="numpy")


@pytest.mark.parametrize("name", _names(PYTHON))
def test_object_machinery_exists(name):
    if name in dir(np.ndarray):
        assert hasattr(Tracer, name)


@pytest.mark.parametrize("attr", ["shape", "dtype", "real", "imag", "flat", "__class__"])
def test_setting_attributes_is_refused(attr):
    def f(x):
        y = x * 1.0
        setattr(y, attr, np.zeros(12) if attr != "shape" else (4, 3))
        return np.sum(y)

    with pytest.raises(TracingError, match=attr if attr != "__class__" else "__class__"):
        ha.gradient(f, X, backend="numpy")
