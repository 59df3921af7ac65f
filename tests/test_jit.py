"""hybridad's own compiler of the numba backend's generated source
(hybridad.backends.jit): numba's semantics construct by construct, checked
against numba itself on the same source and the same edge values, bitwise;
its place in the backend (which programs it takes, which it leaves to numba,
the disk cache, the Python entry point)."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends import jit
from conftest import rand

_EDGE64 = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, -7.25, 1e-300, 5e-324, -5e-324,
                    1e300, -1e300, np.inf, -np.inf, np.nan, 709.0, -745.0, 2.0**53 + 1,
                    -(2.0**63), 0.1, 1e-8, 123456.789], np.float64)

_HEADER = textwrap.dedent("""\
    import math
    import numpy as np
    from numba import njit, prange
    from hybridad.backends.numba.rt import view_at as _view
    """)


def _module(source):
    ns = {"__name__": "jit_case"}
    exec(compile(source, "<jit case>", "exec"), ns)  # noqa: S102
    return ns


def _both(body, dtypes, out_dtype, n, flags='error_model="numpy"'):
    """``fn(ptrs..., n)`` of ``body`` (which reads ``x0``, ``x1``... and writes
    ``out`` at element ``i``) compiled by numba and by hybridad's compiler."""
    params = ", ".join(f"p{k}" for k in range(len(dtypes) + 1))
    views = "\n".join(f"    x{k} = _view(p{k}, np.int64(n), np.{np.dtype(d).name})"
                      for k, d in enumerate(dtypes))
    src = (_HEADER + f"\n@njit({flags})\ndef fn({params}, n):\n{views}\n"
           f"    out = _view(p{len(dtypes)}, np.int64(n), np.{np.dtype(out_dtype).name})\n"
           f"    for i in range(n):\n" + textwrap.indent(body, "        ") + "\n")
    ns = _module(src)
    numba_fn = ns["fn"]
    jitted = jit.compile_function(src, "fn", len(dtypes) + 2, lambda: ns)
    return numba_fn, jitted


def _run(fn, arrays, out):
    fn(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
    return out


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        both_nan = np.isnan(a) & np.isnan(b)
        return np.array_equal(np.where(both_nan, 0, a).view(a.dtype),
                              np.where(both_nan, 0, b).view(b.dtype)) and \
            np.array_equal(np.signbit(a) | both_nan, np.signbit(b) | both_nan)
    return np.array_equal(a, b)


def _pairs(values):
    x, y = np.meshgrid(values, values, indexing="ij")
    return np.ascontiguousarray(x.ravel()), np.ascontiguousarray(y.ravel())


def _check(body, arrays, out_dtype):
    numba_fn, jitted = _both(body, [a.dtype for a in arrays], out_dtype, arrays[0].size)
    n = arrays[0].size
    want = _run(numba_fn, arrays, np.zeros(n, out_dtype))
    got = _run(jitted, arrays, np.zeros(n, out_dtype))
    bad = [(tuple(a[i] for a in arrays), want[i], got[i]) for i in range(n)
           if not _same_bits(want[i:i + 1], got[i:i + 1])]
    assert not bad, f"{body}: (inputs, numba, hybridad): {bad[:5]}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "**"])
def test_binary_operators_as_numba(op, dtype):
    x, y = (a.astype(dtype) for a in _pairs(_EDGE64))
    _check(f"out[i] = x0[i] {op} x1[i]", [x, y], dtype)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "<<", ">>", "&", "|", "^"])
def test_integer_operators_as_numba(op):
    vals = np.array([0, 1, -1, 2, -7, 7, 63, 2**62, -(2**63), 2**63 - 1, 5, -5], np.int64)
    x, y = _pairs(vals)
    if op in ("<<", ">>"):
        y = np.abs(y) % 64
    out = np.float64 if op == "/" else np.int64
    _check(f"out[i] = x0[i] {op} x1[i]", [x, y], out)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_as_numba(op):
    x, y = _pairs(_EDGE64)
    _check(f"out[i] = x0[i] {op} x1[i]", [x, y], np.bool_)


UNARY = ["sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
         "arccosh", "arctanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
         "cbrt", "square", "absolute", "fabs", "sign", "floor", "ceil", "trunc", "rint",
         "reciprocal", "negative", "deg2rad", "rad2deg", "isnan", "isinf", "isfinite",
         "signbit", "logical_not"]
BINARY = ["maximum", "minimum", "fmax", "fmin", "hypot", "arctan2", "copysign", "logaddexp",
          "logaddexp2", "remainder", "fmod", "power", "floor_divide", "true_divide",
          "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", UNARY)
def test_numpy_unary_ufuncs_as_numba(name, dtype):
    x = _EDGE64.astype(dtype)
    out = getattr(np, name)(x[:1]).dtype
    _check(f"out[i] = np.{name}(x0[i])", [x], out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", BINARY)
def test_numpy_binary_ufuncs_as_numba(name, dtype):
    x, y = (a.astype(dtype) for a in _pairs(_EDGE64))
    out = getattr(np, name)(x[:1], y[:1]).dtype
    _check(f"out[i] = np.{name}(x0[i], x1[i])", [x, y], out)


@pytest.mark.parametrize("body", [
    "out[i] = min(x0[i], x1[i])", "out[i] = max(x0[i], x1[i])",
    "out[i] = max(min(x0[i], 3.0), -1.0)", "out[i] = abs(x0[i]) + -x1[i]",
    "out[i] = x0[i] if x0[i] > x1[i] else x1[i] * 2",
    "out[i] = (x0[i] > 0 and x1[i] < 1) or x0[i] == x1[i]",
    "out[i] = math.exp(x0[i]) if x0[i] < 700 else 0.0",
    "out[i] = np.float32(x0[i]) * np.float32(x1[i])",
    "out[i] = np.int64(x0[i] * 0) + np.float64(x1[i] > 0)",
    "out[i] = np.float64(x0[i]).view(np.int64) >> 52",
    "out[i] = x0[i] ** 2 + x1[i] ** -3 + x0[i] ** 0.5",
])
def test_expressions_as_numba(body):
    x, y = _pairs(_EDGE64)
    if "** -3" in body:  # (numba raises ZeroDivisionError for 0.0 ** -3 whatever its error model)
        keep = np.abs(y) > 1e-100  # (nor for a power that underflows to 0)
        x, y = np.ascontiguousarray(x[keep]), np.ascontiguousarray(y[keep])
    out = np.int64 if ">> 52" in body else np.float64
    _check(body, [x, y], out)


def test_power_by_a_runtime_integer_as_numba():
    """``x ** k`` for an integer ``k`` known only at run time: numba's
    repeated squaring (and a negative ``k`` inverting), not ``pow``."""
    x = _EDGE64[(_EDGE64 != 0) & (np.abs(_EDGE64) > 1e-30) & (np.abs(_EDGE64) < 1e30)]
    x = np.ascontiguousarray(np.repeat(x, 9))
    _check("out[i] = x0[i] ** (i % 9 - 4) + x0[i] ** np.int64(i % 3)", [x], np.float64)


def test_loops_branches_and_widening_as_numba():
    """Loop-carried values (an int that becomes a float), while/break/continue,
    nested branches, a literal tuple loop, views and slices."""
    body = textwrap.dedent("""\
        s = 0
        k = 0
        while k < 10:
            k += 1
            if k % 3 == 0:
                continue
            s += x0[i] * k
            if s > 100.0:
                break
        for a, b in ((1, 2.0), (3, 4.0)):
            s = s * a + b
        out[i] = s
        """)
    x = _EDGE64[np.isfinite(_EDGE64)]
    _check(body, [x], np.float64)


def test_array_views_as_numba():
    """Views cut from an address: slices, steps, reshape, transpose,
    broadcast_to, 0-d arrays, fills and copies, compared element by element."""
    src = _HEADER + textwrap.dedent("""\
        @njit(error_model="numpy")
        def fn(ap, bp, n):
            a = _view(ap, (np.int64(4), np.int64(6)), np.float64)
            b = _view(bp, np.int64(64), np.float64)
            t = a.T
            r = a.reshape((3, 8))
            s = a[1:, ::2]
            c = b[:24].reshape((6, 4))
            c[...] = 0
            c[1:3] = t[2:4]
            c[5] = r[2, 1:5]
            z = _view(bp + 8 * 40, (), np.float64)
            z[()] = s[2, 1] + np.broadcast_to(a[0:1, 3:4], (5, 3))[4, 2]
            w = b[30:40]
            for j in range(w.shape[0]):
                w[j] = a.size + a.shape[1] * j + len(s)
            b[41:50:2] = -1.0
        """)
    ns = _module(src)
    jitted = jit.compile_function(src, "fn", 3, lambda: ns)
    a = rand((4, 6), seed=3)
    outs = []
    for fn in (ns["fn"], jitted):
        b = np.full(64, 7.0)
        fn(a.ctypes.data, b.ctypes.data, 0)
        outs.append(b)
    np.testing.assert_array_equal(outs[1], outs[0])


def test_exceptions_and_python_entry_point():
    """A raise becomes that exception with its message -- a builtin one or
    another class (numpy's LinAlgError), its message a constant; a wrong
    argument count or a non-integer raise TypeError; results untouched."""
    src = _HEADER + textwrap.dedent("""\
        @njit(error_model="numpy")
        def fn(p, flag):
            a = _view(p, np.int64(2), np.float64)
            if flag == 1:
                raise ValueError('flag one')
            if flag == 2:
                raise RuntimeError('flag two')
            if flag == 3:
                raise np.linalg.LinAlgError(_MESSAGE)
            a[0] = 5.0
        _MESSAGE = "flag three"
        """)
    ns = _module(src)
    jitted = jit.compile_function(src, "fn", 2, lambda: ns)
    a = np.zeros(2)
    with pytest.raises(ValueError, match="flag one"):
        jitted(a.ctypes.data, 1)
    with pytest.raises(RuntimeError, match="flag two"):
        jitted(a.ctypes.data, 2)
    with pytest.raises(np.linalg.LinAlgError, match="flag three"):
        jitted(a.ctypes.data, 3)
    assert not a.any()
    with pytest.raises(TypeError):
        jitted(a.ctypes.data)
    with pytest.raises(TypeError):
        jitted(a.ctypes.data, 1.5)
    jitted(a.ctypes.data, 0)
    assert a[0] == 5.0


def test_unsupported_source_goes_to_numba():
    """What the compiler does not translate raises Unsupported (the numba
    backend then compiles it with numba): object mode with typed results,
    complex numbers, arrays allocated in the function."""
    for body in ("x = np.empty(3)", "with objmode(t='int64'):\n        t = 1", "z = 1j * p"):
        src = _HEADER + f"from numba import objmode\n\n@njit\ndef fn(p):\n    {body}\n"
        with pytest.raises(jit.Unsupported):
            jit.compile_function(src, "fn", 1, lambda: _module(src))


_OBJMODE = _HEADER + textwrap.dedent("""\
    from numba import objmode as _objmode

    CALLS = []


    def host(out, a, scale, b=None):
        CALLS.append((out.shape, out.strides, a.shape, a.strides, type(scale).__name__))
        if scale < 0:
            raise ValueError("negative scale")
        out[...] = np.sqrt(a) * scale
        if b is not None:
            out[...] += b.sum()


    @njit(error_model="numpy", nogil=True)
    def fn(p, q, r, n, scale):
        a = _view(p, np.int64(n * 3), np.float64).reshape((n, 3))
        out = _view(q, np.int64(n * 3), np.float64).reshape((n, 3))
        b = _view(r, np.int64(0), np.float32)
        for i in range(n):
            a[i, 0] += 1.0
        with _objmode():
            host(out, a, scale)
        s = 0.0
        for i in range(n):
            s += out[i, 0]
        if s > 1e300:
            raise RuntimeError("huge")
        at, outt, scale32 = a.T, out.T, np.float32(scale)
        with _objmode():
            host(outt, at, scale32, b=b)
    """)


@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning")
def test_object_mode_calls_python_as_numba():
    """``with objmode():`` around calls of Python functions: each call gets
    numpy views of the same memory (2-D, transposed, empty), numbers of
    their dtype and keywords, from a function running without the GIL; what
    the Python function wrote is read after it; an exception it raises
    comes out of the compiled function as itself.  The same as numba's."""
    import types

    got = {}
    for which in ("numba", "jit"):
        # a module of its own (numba's object mode looks its globals up in it)
        mod = types.ModuleType(f"jit_objmode_{which}")
        sys.modules[mod.__name__] = mod
        exec(compile(_OBJMODE, mod.__name__, "exec"), vars(mod))  # noqa: S102
        ns = vars(mod)
        fn = ns["fn"] if which == "numba" else jit.compile_function(_OBJMODE, "fn", 5,
                                                                    lambda ns=ns: ns)
        a, out, b = np.arange(12.0).reshape(4, 3), np.zeros((4, 3)), np.zeros(0, np.float32)
        fn(a.ctypes.data, out.ctypes.data, b.ctypes.data, 4, 2)
        with pytest.raises(ValueError, match="negative scale"):
            fn(a.ctypes.data, out.ctypes.data, b.ctypes.data, 4, -1)
        got[which] = (a, out, ns["CALLS"])
        assert jit.native(fn) is (None if which == "numba" else jit.native(fn))
    (a0, out0, calls0), (a1, out1, calls1) = got["numba"], got["jit"]
    assert _same_bits(a0, a1) and _same_bits(out0, out1)
    assert calls0 == calls1 and len(calls1) == 3


def test_plans_with_object_mode_run_on_it(tmp_path):
    """Plans with a loop (``fori_loop``: its runner called from object mode)
    and a host call (a library function without rules) are compiled by
    hybridad's compiler, allocate what numba's code does (the loop nothing),
    agree with numba's code to rounding, give the same bits cold and warm, and
    load from the disk cache in a new process without an LLVM compile."""
    code = textwrap.dedent("""\
        import json, sys
        import numpy as np
        import hybridad as ha
        from hybridad.backends.jit import engine
        from hybridad.testing import count_allocations
        from scipy.special import comb
        calls = []
        real = engine.compile_ir
        engine.compile_ir = lambda text, **kw: calls.append(1) or real(text, **kw)
        W = np.sin(np.arange(144.0)).reshape(12, 12) / 4
        x0, k = np.linspace(-1, 1, 12), np.full(12, 3.0)

        def euler(x, W):
            step = lambda i, x: x + 0.05 * np.tanh(W @ x)
            return np.sum(ha.fori_loop(0, 40, step, x) ** 2)

        out = []
        for f, args in ((euler, (x0, W)),
                        (lambda x, k: np.sum(comb(6, k) * np.sin(x) ** 2), (x0, k))):
            plan = ha.compile(f, *args)
            res = plan.new_result()
            plan.gradient(*args, out=res)
            with count_allocations() as c:
                plan.gradient(*args, out=res)
            assert "compiled by hybridad's own compiler" in plan.explain(), plan.explain()
            out.append([float(res.value), res.gradient.tolist(), c.allocations])
        print(json.dumps([len(calls), out]))
        """)
    runs = {}
    for name, jit_on, cache in (("cold", "1", "c"), ("warm", "1", "c"), ("numba", "0", "n")):
        env = dict(os.environ, HYBRIDAD_JIT=jit_on, HYBRIDAD_CACHE_DIR=str(tmp_path / cache))
        p = subprocess.run([sys.executable, "-c", code.replace(
            "assert \"compiled by", "assert jit_on == '0' or \"compiled by").replace(
            "import json, sys", f"import json, sys\njit_on = {jit_on!r}")], env=env,
            capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs[name] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["cold"][0] >= 1 and runs["warm"][0] == 0
    assert runs["cold"][1] == runs["warm"][1]  # the same bits from the cache
    for (v1, g1, a1), (v0, g0, a0) in zip(runs["cold"][1], runs["numba"][1], strict=True):
        np.testing.assert_allclose(v1, v0, rtol=1e-14)  # numba's code: to rounding
        np.testing.assert_allclose(g1, g0, rtol=1e-13, atol=1e-15)
        assert a1 == a0  # (the host call's own function allocates, under either)
    assert runs["cold"][1][0][2] == 0  # the loop: nothing per call
    x0 = np.linspace(-1, 1, 12)
    from scipy.special import comb
    want = 2 * comb(6, 3.0) * np.sin(x0) * np.cos(x0)
    np.testing.assert_allclose(runs["cold"][1][1][1], want, rtol=1e-13)


def _plan_programs(plan):
    return [plan._program.source]


def test_plans_run_on_it_and_match_numba(tmp_path):
    """Plans of every kind -- regions, reductions, products, parallel plans
    (prange loops on numba's threads, per-thread scratch) -- compiled by
    hybridad's compiler agree with the same plans under numba
    (HYBRIDAD_JIT=0) to rounding, and the program came from it.  Loaded from
    the disk cache in a new process (which has not started numba's threads
    nor registered a symbol) they run without an LLVM compile and give the
    same bits as when they were compiled."""
    code = textwrap.dedent("""\
        import json, sys
        import numpy as np
        import hybridad as ha
        from hybridad.backends.jit import engine
        from conftest import rand
        calls = []
        real = engine.compile_ir
        engine.compile_ir = lambda text, **kw: calls.append(1) or real(text, **kw)
        x = rand((300,), seed=1); A = rand((300, 300), seed=2); X = rand((4000, 8), seed=3)
        w = rand((8,), seed=4); big = rand((400000,), seed=5)
        cases = [
            (lambda x: np.sum(np.exp(-x * x) * np.cos(x)) + np.max(x), (big,)),
            (lambda x, A: np.sum(np.tanh(x) ** 2) + x @ (A @ x), (x, A)),
            (lambda w, X: np.mean(np.logaddexp(0, -(X @ w))) + np.sum(w * w), (w, X)),
            (lambda x: np.sum(np.exp(-x * x) * np.sin(x[::-1])) + np.max(x) * np.std(x), (x,)),
            (lambda x: np.sum(np.cumsum(x) ** 2) + np.sum(np.sort(x)[:10]), (x,)),
        ]
        out = []
        for f, args in cases:
            res = ha.compile(f, *args).gradient(*args)
            out.append([float(res.value), np.asarray(res.gradient).tolist()])
        print(json.dumps([len(calls), out]))
        """)
    runs = {}
    for name, jit_on in (("cold", "1"), ("warm", "1"), ("numba", "0")):
        env = dict(os.environ, HYBRIDAD_JIT=jit_on, HYBRIDAD_CACHE_DIR=str(tmp_path / jit_on),
                   PYTHONPATH=os.path.dirname(__file__) + os.pathsep +
                   os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs[name] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["cold"][0] >= 1 and runs["warm"][0] == 0
    assert runs["warm"][1] == runs["cold"][1]  # the same bits from the cache
    for (v1, g1), (v0, g0) in zip(runs["cold"][1], runs["numba"][1], strict=True):
        np.testing.assert_allclose(v1, v0, rtol=1e-13)
        np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-14)


def test_warm_cache_loads_without_compiling(tmp_path):
    """A program in the disk cache loads in a new process with no LLVM work
    and no numba compile; a damaged entry is discarded and recompiled."""
    code = textwrap.dedent("""\
        import time, numpy as np, hybridad as ha
        from hybridad.backends.jit import engine
        calls = []
        real = engine.compile_ir
        engine.compile_ir = lambda text, **kw: calls.append(1) or real(text, **kw)
        x = np.linspace(-1, 1, 50)
        plan = ha.compile(lambda x: np.sum(np.sin(x) ** 2), x)
        print(len(calls), float(plan.gradient(x).value))
        """)
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(tmp_path))
    outs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for p in outs:
        assert p.returncode == 0, p.stderr[-2000:]
    (cold, v0), (warm, v1) = (p.stdout.split() for p in outs)
    assert int(cold) >= 1 and int(warm) == 0 and v0 == v1
    for name in os.listdir(tmp_path / "jit"):
        path = tmp_path / "jit" / name
        data = bytearray(path.read_bytes())
        data[-10] ^= 0xFF
        path.write_bytes(bytes(data))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    recompiled, v2 = p.stdout.split()
    assert int(recompiled) >= 1 and v2 == v0
    assert "discarded damaged compiled code" in p.stderr


def test_compiles_from_threads_at_once():
    """Plans built in several threads at once (LLVM's objects are not
    thread-safe: one lock) each give their own correct gradient."""
    xs = [rand((40 + k,), seed=k) for k in range(6)]
    results = [None] * len(xs)

    def build(k):
        f = lambda x, k=k: np.sum(np.cos(x * (k + 1)) ** 2)  # noqa: E731
        results[k] = (f, ha.compile(f, xs[k]).gradient(xs[k]))
    threads = [threading.Thread(target=build, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, (f, res) in enumerate(results):
        ref = ha.compile(f, xs[k], backend="numpy").gradient(xs[k])
        np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12)


def test_a_parallel_loop_shorter_than_the_threads_keeps_the_thread_count():
    """A prange loop of fewer iterations than threads runs every one once,
    and the caller's numba thread count is what it was (numba's threading
    layer sets each team thread's count to the one it is given)."""
    import numba

    src = _HEADER + textwrap.dedent("""\
        @njit(parallel=True)
        def fn(p, n):
            a = _view(p, np.int64(8), np.float64)
            for i in prange(n):
                a[i] = a[i] + i + 1.0
        """)
    ns = _module(src)
    jitted = jit.compile_function(src, "fn", 2, lambda: ns)
    before = numba.get_num_threads()
    for n in (0, 1, 3, 8):
        a = np.zeros(8)
        jitted(a.ctypes.data, n)
        np.testing.assert_array_equal(a, [i + 1.0 if i < n else 0.0 for i in range(8)])
        assert numba.get_num_threads() == before


def test_programs_load_from_the_disk_cache_in_a_new_process(tmp_path):
    """Every symbol a program's machine code names is recorded with it: in a
    new process that has not started numba's threading layer nor registered
    a symbol, a program with a ``prange`` loop and ``get_thread_id()``, libm
    and BLAS-free arithmetic loads from the disk cache without an LLVM
    compile and gives the bits it gave when compiled (a load that missed a
    symbol would jump to address 0)."""
    code = _HEADER.replace("prange", "prange, get_thread_id") + textwrap.dedent('''\
        import json
        from hybridad.backends import jit
        from hybridad.backends.jit import engine
        calls = []
        real = engine.compile_ir
        engine.compile_ir = lambda text, **kw: calls.append(1) or real(text, **kw)
        SRC = """
        import math
        import numpy as np
        from numba import njit, prange, get_thread_id
        from hybridad.backends.numba.rt import view_at as _view
        @njit(parallel=True)
        def fn(p, q, n):
            a = _view(p, np.int64(n), np.float64)
            t = _view(q, np.int64(n), np.int64)
            for i in prange(n):
                a[i] = math.exp(-a[i] * a[i]) + np.log1p(abs(a[i])) + i
                t[i] = get_thread_id() >= 0
        """
        ns = {}
        exec(SRC, ns)
        fn = jit.compile_function(SRC, "fn", 3, lambda: ns)
        out = []
        for n in (0, 1, 3, 1000):
            a, t = np.linspace(-2, 2, n), np.zeros(n, np.int64)
            fn(a.ctypes.data, t.ctypes.data, n)
            out.append([a.tolist(), int(t.sum())])
        print(json.dumps([len(calls), out]))
        ''')
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    (cold, out0), (warm, out1) = runs
    assert cold >= 1 and warm == 0
    assert out0 == out1
    assert [t for _, t in out1] == [0, 1, 3, 1000]
    a = np.linspace(-2, 2, 1000)
    np.testing.assert_allclose(out1[3][0], np.exp(-a * a) + np.log1p(abs(a)) + np.arange(1000),
                               rtol=1e-15)


_BASE = np.random.default_rng(4).uniform(-1, 1, (64, 80))
_BASE3 = np.random.default_rng(5).uniform(-1, 1, (8, 10, 12))
_BASES = {np.float64: (_BASE, _BASE3),
          np.float32: (_BASE.astype(np.float32), _BASE3.astype(np.float32))}
_STRIDED = {  # captured views of other strides: read in place through a contiguous hull
    "columns": lambda b, b3: b[:, :48],
    "every_other_row": lambda b, b3: b[::2, 1:],
    "every_third": lambda b, b3: b.ravel()[::3][:3000],
    "block3": lambda b, b3: b3[1:, ::2, 2:12],  # (strides 120, 24, 1 elements: nested)
    "one_row_step": lambda b, b3: b[2:3, ::2],
    # reversed along an axis (a flipped kernel): the hull from the lowest address, read backward
    "reversed": lambda b, b3: b[::-1, :48],
    "reversed_flat": lambda b, b3: b.ravel()[::-1][:3000],
    "reversed_both_step": lambda b, b3: b[60:2:-2, ::-2],
    "reversed_middle3": lambda b, b3: b3[1:, ::-2, 2:12],
}
_FALLBACK = {  # strides no hull reads (numba compiles these plans, as before)
    "transposed_block": lambda b, b3: b[:, :48].T,
    "not_nested": lambda b, b3: b3[1:, ::3, 2:5],  # (strides 120, 36, 1)
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(_STRIDED) + sorted(_FALLBACK))
def test_captured_strided_views_compile_here_and_read_in_place(name, dtype):
    """A global view that is neither C nor F contiguous (``W[:, :k]``) reaches the
    program by object: hybridad's compiler builds the plan (numba's front end
    took 7-15 s for such plans), reading the view's own memory, with no
    allocation."""
    from hybridad.testing import assert_no_alloc

    bases = _BASES[dtype]
    view = {**_STRIDED, **_FALLBACK}[name](*bases)
    size = view.size

    def f(x):
        return np.sum(np.tanh(x[:size].reshape(view.shape) * view) ** 2) + np.sum(view * 0.5)

    x = rand((size + 3,), seed=len(name), dtype=dtype)
    plan = ha.compile(f, x)
    ref = ha.compile(f, x, backend="numpy")
    text = plan.explain()
    assert ("hybridad's own compiler" in text) == (name in _STRIDED), text
    rtol = 1e-5 if dtype == np.float32 else 1e-13
    got, want = plan.gradient(x), ref.gradient(x)
    np.testing.assert_allclose(float(got.value), float(want.value), rtol=rtol)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=rtol, atol=rtol / 100)
    res = plan.new_result()
    assert_no_alloc(plan.gradient, x, out=res, n=3)  # (the guards hash the view in place)
    base = bases[1] if np.shares_memory(view, bases[1]) else bases[0]
    saved = base.copy()
    try:  # the guards still see a change in place, small views and large ones
        base *= 1.25
        with pytest.raises(ha.StalePlanError, match="changed in place"):
            plan.gradient(x)
    finally:
        base[...] = saved


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sorts_compile_here_as_pairs_of_reals(dtype):
    """np.sort / argsort / median / partition pack (value, index) pairs in a
    complex buffer; the numba backend reads it as pairs of reals, so hybridad's
    compiler builds these plans (numba's front end took 5-7 s).  Insertion sort
    (rows up to 16) and heapsort (longer rows), NaN last and ties in their
    order, as numpy's stable sort."""
    def f(x, w):
        s = np.sort(x, axis=0)  # rows of 40: heapsort
        t = np.sort(x[:7], axis=1)  # rows of 9: insertion sort
        order = np.argsort(x, axis=0, kind="stable")
        return np.sum(s * w) + np.sum(t ** 2) + np.sum(order * x) + np.median(x[:, 3])

    rng = np.random.default_rng(8)
    x = np.round(rng.uniform(-2, 2, (40, 9)), 1).astype(dtype)  # ties
    x[5, 2] = x[17, 2] = np.nan
    w = rng.uniform(-1, 1, (40, 9)).astype(dtype)
    plan = ha.compile(f, x, w)
    assert "hybridad's own compiler" in plan.explain()
    got, want = plan.gradient(x, w), ha.compile(f, x, w, backend="numpy").gradient(x, w)
    np.testing.assert_array_equal(np.isnan(got.gradient), np.isnan(want.gradient))
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-6 if dtype == np.float32
                               else 1e-14)
    clean = np.nan_to_num(x, nan=0.25)
    got, want = plan.gradient(clean, w), ha.gradient(f, clean, w, backend="numpy")
    assert got.value == pytest.approx(float(want.value), rel=1e-5 if dtype == np.float32
                                      else 1e-13)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-5 if dtype == np.float32
                               else 1e-13, atol=1e-6)


def test_negative_whole_powers_by_squarings(monkeypatch):
    """``x ** -3.0`` (a float constant, as a plan's source writes every
    power and its derivative's ``x ** -4.0``) by squarings and one division,
    not libm's ``pow`` (30x slower): numpy's value to 3 units in the last
    place (16 for ``x ** -16``, each squaring doubling the error; beyond, libm's
    ``pow``), its special values exactly (0 -> inf, -0 -> -inf, inf -> 0, nan),
    a subnormal value where the positive power overflows (1e105 ** -3)."""
    x = np.concatenate([np.linspace(-3.0, 3.0, 601), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                      1e-100, -1e100, 1e105, -1e22, 3e19]])
    src = (_HEADER + "\nK3, K16 = np.float64(-3.0), np.float64(-16.0)\n@njit\ndef fn(p0, p1, n):\n"
           "    x = _view(p0, np.int64(n), np.float64)\n"
           "    out = _view(p1, (np.int64(n), np.int64(2)), np.float64)\n"
           "    for i in range(n):\n        out[i, 0] = x[i] ** K3\n"
           "        out[i, 1] = x[i] ** K16\n")
    ns = _module(src)
    from hybridad.backends.jit import engine
    modules, compile_ir = [], engine.compile_ir
    monkeypatch.setattr(engine, "compile_ir",
                        lambda text, **kw: modules.append(text) or compile_ir(text, **kw))
    # (a source of its own: never in the disk cache of an earlier run)
    jitted = jit.compile_function(src + f"# {uuid.uuid4()}\n", "fn", 3, lambda: ns)
    out = np.zeros((x.size, 2))
    jitted(x.ctypes.data, out.ctypes.data, x.size)
    with np.errstate(all="ignore"):
        want = np.stack([x ** -3.0, x ** -16.0], axis=1)
    # (a subnormal value: x ** 3 of 1e105 overflows, the power of 1 / x does not)
    tiny = np.abs(want) < np.finfo(np.float64).tiny
    np.testing.assert_allclose(out[tiny], want[tiny], rtol=0, atol=2 * 5e-324)
    special = ~np.isfinite(want) | (want == 0) | ~np.isfinite(x)[:, None] | tiny
    assert _same_bits(out[special & ~tiny], want[special & ~tiny])
    for k, ulps in ((0, 3), (1, 16)):
        ok = ~special[:, k]
        np.testing.assert_array_max_ulp(out[ok, k], want[ok, k], maxulp=ulps)
    assert modules and not any("llvm.pow" in m for m in modules)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_negative_whole_powers_in_a_plan_gradient_and_allocations(dtype):
    """A plan's ``x ** -3`` and ``x ** -16.0`` (their derivatives ``x ** -4``,
    ``x ** -17``: the second by ``pow``) against central differences, with no
    allocation per call."""
    from hybridad.testing import check_grads, count_allocations

    x = np.linspace(0.5, 2.0, 40).astype(dtype)

    def f(x):
        return np.sum(x ** -3 + 0.5 * (x + 0.25) ** -16.0)
    tol = 1e-6 if dtype == np.float64 else 2e-3
    check_grads(f, x, rtol=tol, atol=tol)
    plan = ha.compile(f, x)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    with count_allocations() as counts:
        plan.gradient(x, out=res)
    assert counts.allocations == 0


def test_counter_indices_and_integer_floor_division_as_numba():
    """Indices made of range counters (known nonnegative while translating:
    no wraparound emitted) and of values that may be negative (wrapped as
    numba wraps them); ``//`` and ``%`` by positive constants of both, and by
    a runtime divisor."""
    body = textwrap.dedent("""\
        j = (i * 7 + 3) % 5
        k = (i - 11) % 4
        q = (i - 11) // 4
        m = i // 3 + (i >> 1) + (i & 3)
        s = x0[j] + x0[k] * q + x0[m % n] + x0[i - 1] + x0[n - 1 - i]
        for t in range(2, n, 3):
            s += x0[t] * x0[(t * t) % n] + x0[(t * 2) % 7] - x0[t // 2]
        for t in range(n - 1, -1, -2):
            s -= x0[t] * (t % 3 - t // 4)
        out[i] = s + q * k - (i % n) + (-i) // 3 + (-i) % 5
        """)
    x = _EDGE64[np.isfinite(_EDGE64)]
    _check(body, [x], np.float64)


def _ir_of(src, nargs):
    from hybridad.backends.jit.module import Translator

    return Translator(src, _module(src)).translate("fn", nargs, "t")[0]


def test_counter_indices_need_no_wraparound():
    """The code a plan's loops index with: a counter's index is used as it
    is, a difference wraps (``icmp slt ..., 0`` then a select)."""
    def wraps(index):
        src = _HEADER + textwrap.dedent(f"""\
            @njit(error_model="numpy")
            def fn(p, n):
                x = _view(p, np.int64(32), np.float64)
                for i in range(1, 16):
                    for j in range(0, 8, 2):
                        x[{index}] = x[{index}] + 1.0
            """)
        return _ir_of(src, 2).count("icmp slt i64") - _ir_of(
            src.replace(f"x[{index}] = x[{index}] + 1.0", "pass"), 2).count("icmp slt i64")
    assert wraps("i") == wraps("2 * i + j") == wraps("(i * j) % 7 + i // 2") == 0
    assert wraps("i - 1") == 2 and wraps("j - i") == 2


def test_the_same_source_translates_to_the_same_ir_in_every_process():
    """Names bound differently in two branches become phis in sorted order:
    the IR (and so the machine code) does not depend on string hashing."""
    names = [f"v{k}" for k in range(12)]
    src = _HEADER + "\n@njit\ndef fn(p, n):\n    x = _view(p, np.int64(4), np.float64)\n" + \
        "".join(f"    {v} = x[{k % 4}]\n" for k, v in enumerate(names)) + \
        "    if n > 2:\n" + "".join(f"        {v} = {v} * 2.0 + n\n" for v in names) + \
        f"    x[0] = {' + '.join(names)}\n"
    code = ("import sys, hashlib; sys.path.insert(0, {tests!r}); from test_jit import _ir_of; "
            "print(hashlib.sha256(_ir_of({src!r}, 2).encode()).hexdigest())").format(
                tests=os.path.dirname(__file__), src=src)
    digests = set()
    for seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        digests.add(run.stdout.strip())
    assert len(digests) == 1


def test_library_functions_are_compiled_once_for_every_plan(tmp_path):
    """A library function with a loop (the argument check, the folds of a
    sum) is an object of its own in the disk cache, compiled once for every
    plan calling it with the same schemas: a second plan of the same shapes
    compiles only its own program; a new process loads them all without
    compiling; with the library objects gone, the plans are compiled again
    (which makes them) and give the same bits."""
    code = textwrap.dedent("""\
        import json, re, numpy as np, hybridad as ha
        from hybridad.backends.jit import engine
        compiled = []
        real = engine.compile_ir
        def counting(text, **kw):
            compiled.append("lib" if re.search(r'^define i32 @"hyblib[.]', text, re.M)
                            else "program")
            return real(text, **kw)
        engine.compile_ir = counting
        x = np.linspace(-1, 1, 50)
        out = []
        for f in (lambda x: np.sum(np.sin(x) ** 2), lambda x: np.sum(np.cos(x) ** 2)):
            before = len(compiled)
            g = ha.gradient(f, x)
            out.append([compiled[before:], float(g.value), g.gradient.tolist()])
        print(json.dumps(out))
        """)
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(tmp_path))

    def run():
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])
    cold = run()
    (first, *v0), (second, *v1) = cold
    assert "lib" in first and "program" in first
    assert second == ["program"]  # (the second plan: its own program only)
    libs = [n for n in os.listdir(tmp_path / "jit") if n.startswith("hyblib.")]
    assert len(libs) == first.count("lib")
    warm = run()
    assert [w[0] for w in warm] == [[], []] and [w[1:] for w in warm] == [v0, v1]
    for name in libs:
        os.unlink(tmp_path / "jit" / name)
    again = run()
    assert "lib" in again[0][0] and [a[1:] for a in again] == [v0, v1]
    np.testing.assert_allclose(v0[1], 2 * np.sin(np.linspace(-1, 1, 50)) *
                               np.cos(np.linspace(-1, 1, 50)), rtol=1e-14)


def test_a_plan_cached_after_the_cache_directory_moved_has_its_library_objects(tmp_path):
    """A process that loaded a library function's object from one cache
    directory writes it into another that lacks it, when a plan compiled
    there calls it: a later process loads that plan without compiling."""
    code = textwrap.dedent("""\
        import os, sys, numpy as np, hybridad as ha
        from hybridad.backends.jit import engine
        compiled = []
        real = engine.compile_ir
        engine.compile_ir = lambda text, **kw: compiled.append(1) or real(text, **kw)
        x = np.linspace(-1, 1, 40)
        for arg in sys.argv[1:]:
            where, c = arg.split("=")
            os.environ["HYBRIDAD_CACHE_DIR"] = where
            c = float(c)
            ha.gradient(lambda x: np.sum(np.sin(x) * x) + c * np.sum(x ** 2), x)
        print(len(compiled))
        """)
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    env = dict(os.environ)
    env.pop("HYBRIDAD_CACHE_DIR", None)
    runs = []
    for args in ((f"{first}=2", f"{second}=3"), (f"{second}=3",)):
        p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(int(p.stdout.split()[-1]))
    assert runs[0] >= 2 and runs[1] == 0
    assert sorted(n for n in os.listdir(tmp_path / "second" / "jit") if n.startswith("hyblib.")) \
        == sorted(n for n in os.listdir(tmp_path / "first" / "jit") if n.startswith("hyblib."))


def test_a_callable_owns_its_method_definition():
    """The C struct a compiled callable is made from is the callable's
    ``__self__``: it lives exactly as long as the callable.  Kept in a list of
    the wrapper module's, it was freed when the interpreter cleared that module
    at exit before a plan still holding the callable let go of it, which then
    read its flags from freed memory (a segfault at exit, depending on the
    order modules were imported in)."""
    import gc
    import weakref

    from hybridad.backends.jit import wrapper

    plan = ha.compile(lambda x: np.sum(np.sin(x) ** 2), rand((4,)))
    plan.gradient(rand((4,)))
    fns = [entry[2] for entry in jit._NATIVE.values()]
    assert fns and all(isinstance(fn.__self__, wrapper._MethodDef) for fn in fns)
    assert not hasattr(wrapper, "_KEEP")
    fn = wrapper.make_callable(jit.native(fns[0]), "probe")
    definition = weakref.ref(fn.__self__)
    del fn
    gc.collect()
    assert definition() is None  # (and nothing else holds it: freed with its callable)
