"""Code LLVM's vectorizer must not see: the loops that read or write memory
backwards, and scans.

llvmlite's LLVM is built with assertions, so an LLVM bug the optimizer hits
is an abort of the whole process, not an exception.  LLVM 20's loop
vectorizer costs a reversed access (``x[::-1]``, ``out[n - 1 - i]``) in two
ways that disagree at some constant trip counts -- 28-31 and 44-47 elements
of a Cox likelihood's reversed cumulative sum (llvm-project#177780) -- and
asserts.  hybridad's compiler marks each such loop, and every scan (which no
vectorizer runs in lanes), ``llvm.loop.vectorize.enable = false``
(``backends/jit/arrays``)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hybridad.backends.jit.module import Translator

_HEADER = textwrap.dedent("""\
    import numpy as np
    from numba import njit, prange
    from hybridad.backends.numba.rt import view_at as _view
    from hybridad.backends.numba.simd import serial_loop as _serial_loop
    """)


def _ir(body):
    src = _HEADER + "\n@njit(error_model='numpy')\ndef fn(ap, bp, n):\n" + \
        "    a = _view(ap, np.int64(40), np.float64)\n" + \
        "    b = _view(bp, np.int64(40), np.float64)\n" + textwrap.indent(body, "    ")
    ns = {"__name__": "llvm_guard_case"}
    exec(compile(src, "<case>", "exec"), ns)  # noqa: S102
    text, _, _ = Translator(src, ns).translate("fn", 3, "guard_case")
    return text


def _serial_loops(text):
    """How many loops of ``text`` carry the loop ID that turns vectorization off."""
    off = re.findall(r'^(!\d+) = !\{ !"llvm.loop.vectorize.enable", i1 0 \}$', text, re.M)
    if not off:
        return 0
    ids = re.findall(r"^(!\d+) = !\{ \1, " + off[0] + r" \}$", text, re.M)
    return sum(len(re.findall(r"!llvm.loop " + i + r"\b", text)) for i in ids)


@pytest.mark.parametrize("body,serial", [
    ("for i in range(40):\n    b[i] = a[i] * 2.0\n", 0),
    ("s = a[::2]\nfor i in range(20):\n    b[i] += s[i] + s[i // 2]\n", 0),
    ("r = a[::-1]\nfor i in range(40):\n    b[i] = r[i] * 2.0\n", 1),
    ("for i in range(40):\n    b[39 - i] = a[i]\n", 1),
    ("for i in range(40):\n    b[39 + -1 * i] += a[39 + -1 * i]\n", 1),
    ("for i in range(39, -1, -1):\n    b[i] = a[i]\n", 1),
    ("for i in range(39, -1, -1):\n    b[39 - i] = a[39 - i]\n", 0),
    ("for j in range(4):\n    for i in range(10):\n        b[10 * j + 9 - i] = a[i]\n", 1),
    ("p = 0.0\nfor t in range(40):\n    _serial_loop()\n    p += a[t]\n    b[t] = p\n", 1),
    ("for i in prange(40):\n    b[i] = a[39 - i]\n", 1),
    ("for i in range(29):\n    for j in range(1):\n        b[28 - i + j] = a[i + j]\n", 1),
    ("for i in range(10):\n    for j in range(4):\n        b[4 * (9 - i) + j] = a[4 * i + j]\n",
     1),
], ids=["forward", "stepped", "reversed-view", "reversed-write", "reversed-both",
        "falling-counter", "falling-twice", "inner-reversed", "scan", "prange",
        "outer-reversed", "outer-reversed-rows"])
def test_loops_that_run_backwards_are_not_vectorized(body, serial):
    assert _serial_loops(_ir(body)) == serial


def test_a_reversed_cumulative_sum_at_the_trip_counts_that_aborted():
    """The Hessian of a Cox-style partial likelihood (a reversed cumulative
    sum of exponentials) over 30 and 45 subjects: LLVM aborted the process
    while compiling its second-order programs."""
    code = textwrap.dedent("""\
        import numpy as np, hybridad as ha
        f = lambda x: np.sum(np.log(np.cumsum(np.exp(x))[::-1]))
        g = lambda x: np.sum(np.sin(np.cumprod(1 + 0.1 * np.tanh(x))))
        for n in (30, 45):
            x = np.linspace(-1, 1, n)
            H = ha.hessian(f, x).hessian
            np.testing.assert_allclose(H, ha.hessian(f, x, backend="numpy").hessian,
                                       rtol=1e-12, atol=1e-14)
            v = np.cos(np.arange(n))
            hv = ha.hvp(g, x ** 3, v).hvp
            np.testing.assert_allclose(hv, ha.hvp(g, x ** 3, v, backend="numpy").hvp,
                                       rtol=1e-12, atol=1e-14)
            # a reversed column: its inner loop of one unrolled away, the outer one reversed
            C = np.cos(np.arange(n))[:, None]
            res = ha.gradient(lambda z: np.sum(z[::-1] * C), x[:, None])
            np.testing.assert_array_equal(res.gradient, C[::-1])
        print("ok")
        """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-2000:])


def test_reversed_loops_compute_what_numpy_does():
    import hybridad as ha

    x = np.linspace(-1.0, 1.0, 45)
    f = lambda z: np.sum(np.flip(np.cumsum(np.flip(np.exp(z)))) * z[::-1])  # noqa: E731
    got = ha.gradient(f, x).gradient
    want = ha.gradient(f, x, backend="numpy").gradient
    np.testing.assert_allclose(got, want, rtol=1e-13)
