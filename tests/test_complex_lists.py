"""``np.array`` / ``np.asarray`` of a list holding complex traced values --
an optics transfer matrix ``[[cos d, 1j sin d / n], [1j n sin d, cos d]]``,
a rotation ``[[exp(1j t), 0], [0, 1]]``.  They raised ``ComplexArrayError``
("build arrays with np.stack"); the list is now made by parts, its real and
imaginary parts each one traced array (numbers, complex constants and real
traced values as they are, a real value's imaginary part zero)."""

import numpy as np
import pytest

import hybridad as ha


def _fd(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


def thin_film(d):
    """Reflectance of a stack of two layers (characteristic matrices)."""
    n, M = np.array([1.5, 2.1]), np.eye(2, dtype=complex)
    for j in range(2):
        delta = 2 * np.pi * n[j] * d[j] / 500.0
        Mj = np.array([[np.cos(delta), 1j * np.sin(delta) / n[j]],
                       [1j * n[j] * np.sin(delta), np.cos(delta)]])
        M = M @ Mj
    B, C = M[0, 0] + M[0, 1] * 1.52, M[1, 0] + M[1, 1] * 1.52
    return np.abs((B - C) / (B + C)) ** 2


def rotations(t):
    R = np.asarray([[np.exp(1j * t[0]), 0.0], [0.5 + 0.5j, np.exp(-1j * t[1]) * t[0]]])
    v = np.array([1.0 + 0.0j, t[1]])
    return np.sum(np.abs(R @ v) ** 2) + np.real(np.trace(R))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f, x", [(thin_film, np.array([90.0, 60.0])),
                                  (rotations, np.array([0.3, -0.8]))])
def test_complex_lists_differentiate(f, x, backend):
    plan = ha.compile(f, x, backend=backend)
    for at in (x, x * 1.3):
        res = plan.gradient(at)
        assert res.value == pytest.approx(f(at), rel=1e-12)
        np.testing.assert_allclose(res.gradient, _fd(f, at), rtol=1e-6, atol=1e-9)


def test_a_complex_list_keeps_complex64():
    def f(x):
        z = np.array([np.exp(1j * x), x + np.complex64(0j)])
        assert z.dtype == np.complex64
        return np.sum(np.abs(z * np.complex64(2.0)) ** 2)

    x = np.array([0.3, 0.7], np.float32)
    res = ha.gradient(f, x, backend="numpy")
    assert res.gradient.dtype == np.float32
    np.testing.assert_allclose(res.gradient, 8 * x, rtol=1e-6)
