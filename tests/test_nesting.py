"""Loops run in place by compiled code (hybridad/backends/nesting.py,
backends/jit/nests.py): a plan's loops, and loops inside loop bodies.

Where hybridad's compiler translates a program that calls a loop's runner in
object mode, and the runner's body is its machine code, the program runs the
loop itself: no switch to Python per loop, and a body with a loop inside
runs from its runner's compiled driver like any other.  Before, a 1000 x 5
nested ``fori_loop`` gradient took 33.6 ms (11.7x jax.jit): each outer step
called the inner loop's runner through Python.  Checked here: nested
``fori_loop`` / ``scan`` models of two and three levels, a matrix carry and
iteration indices, gradients and Hessians against the numpy backend and
finite differences, float32, nothing held beside the arena and nothing
allocated per call, two threads sharing the runners, a runner made again
after its plans were dropped, a loop the code cannot run in place, and the
disk cache: warm, and an entry translated for another runner layout."""

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends import loops, nesting
from hybridad.testing import count_allocations

RNG = np.random.default_rng(11)
N = 5
W0 = RNG.standard_normal((N, N)) * 0.4
X0 = RNG.standard_normal(N)
XS = RNG.standard_normal((4, 3, N)) * 0.3


def indexed(x, W):
    """A fori_loop inside a fori_loop's body, both reading their index."""
    def outer(i, x):
        return ha.fori_loop(0, 3, lambda j, y: y + 0.05 * (i + 1) * np.tanh(W @ y) + 0.01 * j, x)
    return np.sum(ha.fori_loop(0, 4, outer, x) ** 2)


def scanned(x, W, Xs):
    """A scan inside a scan's body: rows of rows, per-iteration outputs of both."""
    def outer(c, rows):
        def inner(d, xe):
            d = d + 0.1 * np.tanh(W @ d + xe)
            return d, np.sum(d)
        return ha.scan(inner, c, rows)
    c, ys = ha.scan(outer, x, Xs)
    return np.sum(c ** 2) + np.sum(ys ** 2)


def three_levels(x, W):
    def l1(i, x):
        def l2(j, y):
            return ha.fori_loop(0, 2, lambda k, z: z + 0.05 * np.sin(W @ z), y) * 0.95
        return ha.fori_loop(0, 2, l2, x)
    return np.sum(ha.fori_loop(0, 3, l1, x) ** 2)


def matrix_carry(x, W):
    """Two carries, the inner loop's a matrix."""
    def outer(i, c):
        x, P = c
        P = ha.fori_loop(0, 2, lambda j, P: 0.5 * (P @ W) + 0.1 * P, P)
        return x + 0.1 * np.tanh(P @ x), P
    x, P = ha.fori_loop(0, 3, outer, (x, 0.5 * np.eye(N) + 0.0 * W))
    return np.sum(x ** 2) + np.sum(P)


MODELS = {"indexed": (indexed, (X0, W0)), "scanned": (scanned, (X0, W0, XS)),
          "three_levels": (three_levels, (X0, W0)), "matrix_carry": (matrix_carry, (X0, W0))}


def _inner_runners(before):
    """The runners made since ``before`` (registry keys) whose body has no loop."""
    return [r for k, r in list(loops._RUNNERS.items()) if k not in before and
            not any(m.op == "loop" for m in r.body.graph.nodes)]


@pytest.mark.parametrize("kind", ["gradient", "hessian"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_nested_loops_run_in_place_and_match_the_reference(name, kind):
    f, args = MODELS[name]
    gc.collect()
    before = set(loops._RUNNERS.keys())
    opts = {"hessian": True} if kind == "hessian" else {}
    plan = ha.compile(f, *args, **opts)
    out = ha.HessianResult(args[0]) if kind == "hessian" else ha.GradientResult(args[0])
    call = getattr(plan, kind)
    call(*args, out=out)
    want = getattr(getattr(ha.compile(f, *args, backend="numpy", **opts), kind)(*args), kind)
    np.testing.assert_allclose(getattr(out, kind), want, rtol=1e-13,
                               atol=1e-14 * np.abs(want).max())
    if kind == "gradient":  # (and against finite differences along a direction)
        v = np.random.default_rng(2).standard_normal(N)
        eps = 1e-6
        fd = (f(X0 + eps * v, *args[1:]) - f(X0 - eps * v, *args[1:])) / (2 * eps)
        np.testing.assert_allclose(out.gradient @ v, fd, rtol=1e-6, atol=1e-9)
    assert plan.memory.held_bytes == 0  # (every loop's workspace in the arena)
    with count_allocations() as counts:
        for _ in range(3):
            call(*args, out=out)
    assert counts.allocations == 0, counts
    inner = _inner_runners(before)
    assert inner and all(not r._tables and r._last is None for r in inner)  # (no Python call)


def test_nested_loops_in_float32():
    x, W = X0.astype(np.float32), W0.astype(np.float32)
    got = ha.compile(three_levels, x, W).gradient(x, W).gradient
    want = ha.compile(three_levels, X0, W0, backend="numpy").gradient(X0, W0).gradient
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_two_threads_share_the_runners():
    """The code run in place keeps its state on its stack and in the calling
    plan's arena: two plans of one model (one set of runners) called from two
    threads at once give each its own bits."""
    plans = [ha.compile(indexed, X0, W0) for _ in range(2)]
    want = plans[0].gradient(X0, W0).gradient.copy()
    xs = [X0, X0 * 0.5]
    wants = [want, plans[1].gradient(xs[1], W0).gradient.copy()]
    bad = []

    def work(k):
        out = ha.GradientResult(X0)
        for _ in range(300):
            plans[k].gradient(xs[k], W0, out=out)
            if not np.array_equal(out.gradient, wants[k]):
                bad.append(k)
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_a_runner_made_again_after_its_plans_went_is_the_one_run():
    """Compiled code is kept for the process, runners go with their plans: a
    runner made again (other bound values) points the code at its own
    context before any call."""
    def f(x, W):
        return indexed(x, W) + np.sum(ha.fori_loop(0, 2, lambda i, y: np.cos(W @ y), x))

    plan = ha.compile(f, X0, W0)
    want = plan.gradient(X0, W0).gradient.copy()
    del plan
    gc.collect()
    junk = [np.full(64, 7.0) for _ in range(2000)]  # (the freed memory used again)
    again = ha.compile(f, X0, W0)
    np.testing.assert_array_equal(again.gradient(X0, W0).gradient, want)
    del junk


def test_operands_a_loop_cannot_read_in_place_are_copied_and_the_loops_run_in_place():
    """Inner loops scanning the rows of a broadcast row (C rows, step 0 between
    them: read in place), of a column broadcast (each row one element
    repeated: not C, so copied once by the plan) and of a transposed operand
    (copied once too) all run in place, and so does a loop whose constant is a
    captured Fortran-order array (copied by the plan at each call: it is the
    user's array, read as it is then).  The same results everywhere.  Before,
    a scan over the broadcast row inside a fori_loop got a wrong gradient (the
    runner's copy of an operand that moved kept the broadcast's strides), and
    the column broadcast and the captured array made their runners run from
    Python at every call, staging them."""
    captured = np.asfortranarray(W0)

    def f(x, W):
        def outer(i, x):
            rows = np.broadcast_to(x, (3, N))
            cols = np.broadcast_to(x[:, None], (N, 3))
            return ha.scan(lambda c, r: (c + 0.1 * np.tanh(r * c), c), x, rows)[0] + \
                ha.scan(lambda c, r: (c + 0.1 * np.tanh(np.sum(r) * c), c), x, cols)[0] + \
                ha.scan(lambda c, col: (c + 0.1 * np.tanh(col * c), c), x, W.T)[0]
        return np.sum(ha.fori_loop(0, 3, outer, x) ** 2)

    def g(x, W):
        def outer(i, x):
            return ha.scan(lambda c, col: (c + 0.2 * np.sin(col * c), c), x, captured)[0] * 0.9
        return np.sum(ha.fori_loop(0, 3, outer, x) ** 2)

    eps = 1e-6
    for fn, inner_loops in ((f, 3), (g, 1)):
        gc.collect()
        before = set(loops._RUNNERS.keys())
        plan = ha.compile(fn, X0, W0)
        got = plan.gradient(X0, W0).gradient
        want = ha.compile(fn, X0, W0, backend="numpy").gradient(X0, W0).gradient
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
        fd = np.array([(fn(X0 + eps * e, W0) - fn(X0 - eps * e, W0)) / (2 * eps)
                       for e in np.eye(N)])
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)
        made = [r for k, r in list(loops._RUNNERS.items()) if k not in before]
        assert made and not [r for r in made if r._tables], fn.__name__  # (none from Python)
        out = ha.GradientResult(X0)
        plan.gradient(X0, W0, out=out)
        with count_allocations() as counts:
            for _ in range(3):
                plan.gradient(X0, W0, out=out)
        assert counts.allocations == 0, (fn.__name__, counts)
        assert sum(r._last is None for r in _inner_runners(before)) >= inner_loops
    captured[0, 0] += 1.0  # (the plan reads the captured array as it is at the call)
    np.testing.assert_allclose(plan.gradient(X0, W0).gradient,
                               ha.compile(g, X0, W0, backend="numpy").gradient(X0, W0).gradient,
                               rtol=1e-13, atol=1e-14)


_CACHED = r"""
import sys
import numpy as np
import hybridad as ha
from hybridad.backends import nesting
if sys.argv[1] == "other":
    nesting.FORMAT += 1  # (the cached code was made for another layout of the spec)
W = np.linspace(-1, 1, 16).reshape(4, 4)


def f(x, W):
    def outer(i, x):
        return 0.5 * (x + ha.fori_loop(0, 3, lambda j, y: y + 0.01 * np.tanh(W @ y), x))
    return np.sum(ha.fori_loop(0, 7, outer, x) ** 2)


print(repr(ha.gradient(f, np.linspace(0.1, 0.4, 4), W).gradient.tobytes()))
"""


def test_the_disk_cache_gives_the_same_bits_and_translates_a_stale_entry_again(tmp_path):
    """Fresh processes on one cache: cold, warm, then with the spec of the
    loops changed (the cached code baked the old one in: it is translated
    again, not run on the wrong offsets)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    got = []
    for how in ("cold", "warm", "other"):
        out = subprocess.run([sys.executable, "-c", _CACHED, how], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        got.append(out.stdout.strip().splitlines()[-1])
    assert got[0] == got[1] == got[2]


def test_the_spec_is_what_the_code_bakes_in():
    """The spec of a runner it runs in place: the counts of its body's
    arguments add up, and its workspace holds the two sets of carries and
    the body's arenas."""
    ha.compile(indexed, X0, W0).gradient(X0, W0)
    specs = [r.nest()[0] for r in list(loops._RUNNERS.values()) if r.nest() is not None]
    assert specs
    for s in specs:
        assert s["format"] == nesting.FORMAT
        assert s["nargs"] == s["n_fixed"] + s["n_bound"] + s["index"] + 2 * s["nc"] + s["nx"] + \
            s["nconst"] + len(s["rows"])
        ends = [o + b for c in s["carries"] for o, b in zip(c, s["carry_bytes"], strict=True)]
        assert max(ends + s["arenas"]) <= s["work"]


def test_without_hybridads_compiler_the_outer_body_keeps_its_own(monkeypatch):
    """With ``HYBRIDAD_JIT=0`` numba compiles the bodies and a body with a
    loop inside runs from Python on its own arena: the plan gives it no
    workspace and counts what its runner holds, and the results are the
    same as the compiled plan's."""
    want = ha.compile(indexed, X0, W0).gradient(X0, W0).gradient.copy()
    monkeypatch.setenv("HYBRIDAD_JIT", "0")
    plan = ha.compile(indexed, X0, W0)
    got = plan.gradient(X0, W0).gradient
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    outer = [n for n in plan.graph.nodes if n.op == "loop"]
    assert outer and not any(n.id in plan.memory.scratch for n in outer)
    assert plan.memory.held_bytes > 0


def test_a_runner_called_from_python_stages_a_moving_broadcast_in_c_order(monkeypatch):
    """A runner called from Python (numba's code: ``HYBRIDAD_JIT=0``) with an
    operand whose address moves between calls at one place -- the broadcast
    of the outer loop's carry, its two sets in turn -- copies it into a
    buffer of its own: C order, as its compiled run reads rows.  That buffer
    came from ``np.empty_like``, which keeps a broadcast's stride order: the
    rows were read 8 bytes apart, a wrong gradient."""
    def f(x, W):
        def outer(i, x):
            rows = np.broadcast_to(x, (3, N))
            return ha.scan(lambda c, r: (c + 0.1 * np.tanh(r), c), x, rows)[0]
        return np.sum(ha.fori_loop(0, 3, outer, x) ** 2)

    want = ha.compile(f, X0, W0, backend="numpy").gradient(X0, W0).gradient
    monkeypatch.setenv("HYBRIDAD_JIT", "0")
    got = ha.compile(f, X0, W0).gradient(X0, W0).gradient
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
