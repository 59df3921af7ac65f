"""numpy's scalar types called on traced values: ``np.float64(loss)``,
``np.float32(x)``, ``np.int64(W[:, -1])`` (autograd's ``test_cast_to_int``).

They raised ``ConversionError`` (numpy converts the argument through its own
memory).  The second trace binds the user's names for numpy and its scalar
types to stand-ins (:mod:`hybridad.frontend.numpy_scalar_types`): a traced
argument is cast; the names keep working as types and dtypes meanwhile, and
are numpy's again after the trace."""

import numpy
import numpy as np
import pytest
from numpy import float64 as F64

import hybridad as ha


def _fd(f, x, eps=1e-6):
    flat = x.reshape(-1)
    out = np.zeros(flat.size)
    for i in range(flat.size):
        e = np.zeros(flat.size)
        e[i] = eps
        out[i] = (f(x + e.reshape(x.shape)) - f(x - e.reshape(x.shape))) / (2 * eps)
    return out.reshape(x.shape)


def cast_to_int(W):
    inds = np.ones(5)[:, None]
    np.concatenate((W, inds), axis=1)
    new_W, new_inds = W[:, :-1], np.int64(W[:, -1])
    assert new_inds.dtype == np.int64
    return new_W[new_inds].sum() * np.float64(np.sum(W ** 2))


def uses_the_names_as_types(x):
    y = np.float32(x) * np.float32(2.0)
    assert y.dtype == np.float32 and isinstance(np.float64(1.0), np.float64)
    z = np.zeros(3, dtype=np.float64) + F64(np.sum(x[:3] ** 2))
    assert np.finfo(np.float32).eps > 0 and z.dtype == np.float64
    assert issubclass(np.float64, np.floating) and np.dtype(np.int64) == np.int64
    return np.sum(y.astype(np.float64) ** 2) + np.sum(z) + numpy.double(np.max(x))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f, x", [
    (cast_to_int, np.column_stack([np.random.default_rng(0).standard_normal((5, 4)),
                                   np.array([0.2, 1.1, 2.7, 3.5, 0.9])])),
    (uses_the_names_as_types, np.array([0.3, -1.2, 2.0, 0.7])),
])
def test_scalar_types_cast_traced_values(f, x, backend):
    plan = ha.compile(f, x, backend=backend)
    for at in (x, x * 1.1):
        res = plan.gradient(at)
        assert res.value == pytest.approx(f(at), rel=1e-6 if f is uses_the_names_as_types
                                          else 1e-13)
        coarse = f is uses_the_names_as_types  # (float32 inside: a quadratic, a wide step)
        np.testing.assert_allclose(res.gradient, _fd(f, at, 1e-2 if coarse else 1e-6),
                                   rtol=1e-4 if coarse else 1e-6, atol=1e-6)
    assert globals()["np"] is numpy and globals()["F64"] is numpy.float64


def test_the_stand_ins_are_the_types_everywhere_else():
    from hybridad.frontend.numpy_made import _TYPES

    w = _TYPES[np.float64]
    assert w == np.float64 and np.float64 == w and hash(w) == hash(np.float64)
    assert isinstance(np.float64(2.0), w) and np.dtype(w) == np.float64
    assert repr(w) == repr(np.float64) and type(w(3.0)) is np.float64
    assert np.float64 is numpy.float64 and numpy.float64.__name__ == "float64"
