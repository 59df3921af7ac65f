"""A build is silent unless it is slow: numba's own warnings never reach the
user, and a build running past ``SLOW_BUILD_S`` seconds says so once on the
``hybridad`` logger -- what compiles, and how to avoid the wait."""

import logging
import time
import warnings

import numpy as np

import hybridad as ha
import hybridad.backends.numba as backend
from hybridad.backends.numba import program


def test_numba_warnings_of_a_build_do_not_reach_the_user(monkeypatch):
    from numba.core.errors import NumbaPerformanceWarning

    original = program.compile_numba_program

    def noisy(*args, **kwargs):
        warnings.warn("no transformation for parallel execution was possible",
                      NumbaPerformanceWarning, stacklevel=1)
        return original(*args, **kwargs)

    monkeypatch.setattr(program, "compile_numba_program", noisy)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plan = ha.compile(lambda x: np.sum(np.sinh(x) * x), np.linspace(0, 1, 7))
        warnings.warn("the user's own", UserWarning, stacklevel=1)  # still shown after it
    assert [type(w.message) for w in seen] == [UserWarning], [str(w.message) for w in seen]
    x = np.linspace(0, 1, 7)
    np.testing.assert_allclose(plan.gradient(x).gradient, np.cosh(x) * x + np.sinh(x),
                               rtol=1e-14)


def test_a_slow_build_says_so_once(monkeypatch, caplog):
    original = program.compile_numba_program

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return original(*args, **kwargs)

    monkeypatch.setattr(program, "compile_numba_program", slow)
    monkeypatch.setattr(backend, "SLOW_BUILD_S", 0.05)
    monkeypatch.setattr(backend, "_told", [])
    with caplog.at_level(logging.WARNING, logger="hybridad"):
        ha.compile(lambda x: np.sum(np.cosh(x) * x), np.linspace(0, 1, 5))
        ha.compile(lambda x: np.sum(np.cosh(x) * x * x), np.linspace(0, 1, 5))
    said = [r.getMessage() for r in caplog.records if r.name == "hybridad"]
    assert len(said) == 2, said  # once per slow build
    assert all("compiling the gradient program of " in m and "<lambda> (over" in m
               for m in said)
    assert "disk cache" in said[0] and "disk cache" not in said[1]  # the hint once


def test_a_quick_build_says_nothing(monkeypatch, caplog):
    monkeypatch.setattr(backend, "SLOW_BUILD_S", 60.0)
    with caplog.at_level(logging.DEBUG, logger="hybridad"):
        ha.compile(lambda x: np.sum(np.cos(x) * x), np.linspace(0, 1, 5))
    assert not [r for r in caplog.records if r.name == "hybridad"]
