"""``import hybridad`` imports no numba, llvmlite, scipy or cupy; the numpy
backend runs without them; scipy's functions are traced however the user's
imports are ordered (each case in a fresh interpreter)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("numba", "llvmlite", "scipy", "cupy")
_REPORT = f"import json, sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"


def run(code, cwd=None, cache=None):
    """Run ``code`` in a fresh interpreter (``cache``: its disk cache); the
    last line it prints, parsed as JSON."""
    env = dict(os.environ, PYTHONWARNINGS="error::RuntimeWarning")
    if cache is not None:
        env["HYBRIDAD_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_module():
    assert run(f"import hybridad\n{_REPORT}") == []


def test_numpy_backend_runs_without_them():
    loaded = run(f"""
        import numpy as np
        import hybridad as ha

        A = np.arange(12.0).reshape(3, 4) / 10

        def f(x):
            return np.sum(np.exp(-(A @ x) ** 2)) + np.sum(np.tanh(x) * x) + np.linalg.norm(x)

        x = np.linspace(0.1, 1.0, 4)
        g = ha.gradient(f, x, backend="numpy").gradient
        fd = [(f(x + h) - f(x - h)) / 2e-6 for h in 1e-6 * np.eye(4)]
        assert np.allclose(g, fd, rtol=1e-6)
        ha.hessian(f, x, backend="numpy")
        ha.hvp(f, x, np.ones(4), backend="numpy")
        ha.jacobian(lambda x: np.sin(A @ x), x, backend="numpy")
        ha.compile(f, x, backend="numpy").gradient(x)
        {_REPORT}
    """)
    assert loaded == []
    assert run(f"""
        import numpy as np
        import hybridad as ha
        x = np.linspace(0.1, 1.0, 4)
        g = ha.gradient(lambda x: np.sum(np.cos(x) * x), x, backend="numpy").gradient
        assert np.allclose(g, np.cos(x) - x * np.sin(x))
        {_REPORT}
    """) == []


_SCIPY_CHECKS = """
    x = np.linspace(0.5, 2.0, 5)
    k = np.full(5, 2.0)
    A = 2 * np.eye(5) + 0.1
    for backend in BACKENDS:
        def grad(f, *data):
            return ha.gradient(f, x, *data, backend=backend).gradient
        # a ufunc, the same bound by name, a traced Python function, scipy.linalg
        assert np.allclose(grad(lambda x: scipy.special.gammaln(x).sum()),
                           scipy.special.digamma(x))
        assert np.allclose(grad(lambda x: gammaln(x).sum()), scipy.special.digamma(x))
        assert np.allclose(grad(lambda x: logsumexp(x)), scipy.special.softmax(x))
        if FULL:
            assert np.allclose(grad(lambda x: solve(A, x).sum()),
                               np.linalg.solve(A.T, np.ones(5)))
            # a distribution; a host call (comb of a traced, not differentiated k)
            assert np.allclose(grad(lambda x: scipy.stats.norm.logpdf(x).sum()), -x)
            assert np.allclose(grad(lambda x, k: np.sum(comb(5, k) * x), k), 10.0)
    print("[]")
"""
_SCIPY_MODULES = """
    import scipy.linalg
    import scipy.special
    import scipy.stats
"""
# names bound after hybridad is imported (bound before, they hold scipy's originals)
_SCIPY_NAMES = """
    from scipy.linalg import solve
    from scipy.special import comb, gammaln, logsumexp
"""
_SCIPY_IMPORTS = _SCIPY_MODULES + _SCIPY_NAMES


@pytest.mark.parametrize("order", ["scipy after hybridad", "scipy before hybridad"])
def test_scipy_is_traced_in_either_import_order(order):
    first, second = ("import hybridad as ha", _SCIPY_MODULES)
    if order.startswith("scipy before"):
        first, second = second, first
    run(textwrap.dedent("""
        import numpy as np
        BACKENDS, FULL = ("numpy",), True
    """) + textwrap.dedent(first) + textwrap.dedent(second) + textwrap.dedent(_SCIPY_NAMES)
        + textwrap.dedent(_SCIPY_CHECKS))


def test_numba_backend_after_a_lazy_import(tmp_path):
    run(textwrap.dedent("""
        import numpy as np
        import hybridad as ha
        BACKENDS, FULL = ("numba",), False
    """) + textwrap.dedent(_SCIPY_IMPORTS) + textwrap.dedent(_SCIPY_CHECKS), cache=tmp_path)
    code = f"""
        import numpy as np
        import hybridad as ha
        x = np.linspace(0.1, 1.0, 4)
        plan = ha.compile(lambda x: np.sum(np.cos(x) * x), x)
        g = plan.gradient(x).gradient
        assert np.allclose(g, np.cos(x) - x * np.sin(x))
        assert plan.tier == "numba" and "compiled by" in plan.explain()
        {_REPORT}
    """
    # compiled (a cold disk cache), then loaded from the cache: machine code
    # either way, made and loaded by llvmlite (numba is needed only by what
    # hybridad's own compiler refuses, and to compile the library functions
    # it translates: not for a program loaded from the cache)
    cold = run(code, cache=tmp_path / "cold")
    warm = run(code, cache=tmp_path / "cold")
    assert "llvmlite" in cold and "llvmlite" in warm, (cold, warm)
    assert "scipy" not in warm, warm


def test_wrapped_modules_keep_their_own_loader():
    assert run("""
        import json
        import hybridad
        import scipy.linalg
        import scipy.special
        print(json.dumps([m.__loader__ is m.__spec__.loader and
                          "hybridad" not in type(m.__loader__).__module__ and
                          getattr(m, name).__hybridad_original__ is not None
                          for m, name in ((scipy.special, "logsumexp"),
                                          (scipy.linalg, "solve"))]))
    """) == [True, True]


def test_after_import_hook(tmp_path):
    (tmp_path / "hd_probe_ok.py").write_text("VALUE = 42\n")
    (tmp_path / "hd_probe_bad.py").write_text("VALUE = 1\n")
    seen = run("""
        import json, sys, warnings
        from hybridad.frontend.after_import import after_import

        seen = []
        after_import(["hd_probe_ok"], lambda name: seen.append((name, sys.modules[name].VALUE)))
        def fail(name):
            raise ValueError("boom")
        after_import(["hd_probe_bad"], fail)
        import hd_probe_ok
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import hd_probe_bad  # the callback fails: a warning, the import succeeds
        assert hd_probe_bad.VALUE == 1
        assert any("boom" in str(w.message) for w in caught), caught
        import hd_probe_ok  # once
        print(json.dumps(seen))
    """, cwd=tmp_path)
    assert seen == [["hd_probe_ok", 42]]


def test_pickled_plan_in_a_fresh_process(tmp_path):
    (tmp_path / "hd_model.py").write_text(textwrap.dedent("""
        import numpy as np

        def loss(x):
            return np.sum(np.sin(x) ** 2)
    """))
    run("""
        import pickle, numpy as np, hybridad as ha, hd_model
        plan = ha.compile(hd_model.loss, np.ones(3), backend="numpy")
        with open("plan.pkl", "wb") as fh:
            pickle.dump(plan, fh)
        print("[]")
    """, cwd=tmp_path)
    assert run(f"""
        import pickle, numpy as np
        with open("plan.pkl", "rb") as fh:
            plan = pickle.load(fh)
        x = np.array([0.1, 0.2, 0.3])
        assert np.allclose(plan.gradient(x).gradient, np.sin(2 * x))
        {_REPORT}
    """, cwd=tmp_path) == []


def test_a_trace_while_another_thread_imports_scipy():
    # a background compile imports numba and with it scipy.special; a trace that
    # starts meanwhile must neither wrap the half-executed module (AttributeError:
    # partially initialized module) nor leave it unwrapped once its import is done
    out = run("""
        import importlib, importlib.abc, sys, threading, time
        import numpy as np
        import hybridad as ha
        ready = threading.Event()

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "scipy.special._logsumexp":  # scipy.special is executing now
                    ready.set()
                    time.sleep(1.0)
                return None

        sys.meta_path.insert(0, Slow())
        t = threading.Thread(target=lambda: importlib.import_module("scipy.special"))
        t.start()
        ready.wait()
        assert sys.modules["scipy.special"].__spec__._initializing
        g = ha.gradient(lambda x: np.sum(x ** 2), np.ones(3), backend="numpy").gradient
        assert np.allclose(g, 2.0)
        t.join()
        import scipy.special
        assert scipy.special.logsumexp.__hybridad_original__ is not None
        g = ha.gradient(lambda x: scipy.special.logsumexp(x), np.zeros(3), backend="numpy")
        assert np.allclose(g.gradient, 1 / 3)
        print('"ok"')
    """)
    assert out == "ok"


def test_tiered_plan_answers_before_numba_is_imported(tmp_path):
    """A tiered numba plan's trace, memory plan and reference program import
    no compiler (llvmlite, numba) and no scipy: the compile thread imports
    them, after the plan answered from its reference program (half a second
    of a first call).  A cold disk cache: the program is compiled."""
    out = run("""
        import importlib.abc, json, sys, threading
        import numpy as np
        import hybridad as ha

        who = {}

        class Watch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name in ("numba", "llvmlite", "scipy"):
                    who.setdefault(name, threading.current_thread().name)

        sys.meta_path.insert(0, Watch())
        rng = np.random.default_rng(0)
        X, y = rng.standard_normal((50, 10)), np.sign(rng.standard_normal(50))

        def f(w, X, y):
            return np.mean(np.logaddexp(0, -y * (X @ w))) + 1e-3 * np.sum(w * w)

        w = np.linspace(-1, 1, 10)
        plan = ha.compile(f, w, X, y, tiered=True)
        res = ha.GradientResult(w)
        plan.gradient(w, X, y, out=res)
        first = res.gradient.copy()
        assert plan.wait(600) and plan.tier == "numba"
        plan.gradient(w, X, y, out=res)
        assert np.allclose(res.gradient, first, rtol=1e-12, atol=1e-15)
        print(json.dumps(who))
    """, cache=tmp_path)
    # the compile thread loads the compiler (llvmlite; numba where it is
    # needed at all), and scipy if anything: never the caller's thread
    assert out.get("llvmlite", "").startswith("hybridad compile"), out
    assert not out.get("numba", "hybridad compile").startswith("Main"), out
    assert not out.get("scipy", "hybridad compile").startswith("Main"), out


@pytest.mark.parametrize("preload", ["", "import numba.np.arraymath"])
def test_numba_loads_its_numpy_functions_during_a_trace(preload):
    """numba loads its implementations of np.asarray & co. (numba.np.arraymath)
    whenever it first compiles: here while a trace has the constructors
    wrapped, or before hybridad was imported.  njit code calling them
    compiles during the trace and after it."""
    assert run(f"""
        import numba
        {preload}
        import numpy as np
        import hybridad as ha

        @numba.njit
        def during(a):
            return np.broadcast_to(np.asarray(a), (3, 2)).sum() + np.ascontiguousarray(a)[1]

        @numba.njit
        def after(a):
            return np.asarray(a).sum() + np.array((1.0, 2.0)).sum()

        seen = []

        def f(x):
            seen.append(during(np.arange(2.0)))
            return np.sum(np.array([x[0], 1.0]) ** 2)

        res = ha.gradient(f, np.ones(2), backend="numpy")
        assert seen == [4.0] and res.gradient[0] == 2.0
        assert after(np.arange(3.0)) == 6.0
        print("[]")
    """) == []


def test_a_warm_plan_loads_only_what_it_calls(tmp_path):
    """A compiled plan loaded from the disk cache imports neither the LAPACK
    kernels (scipy.linalg) nor scipy.special's bindings when it calls
    neither, and skips numba's registries of implementations (numba.np.*,
    numba.typed: only a compile needs them): the first gradient of a warm
    process pays numba's import and the load, not half a second more."""
    code = """
        import sys
        import numpy as np
        import hybridad as ha
        x = np.linspace(0.1, 1.0, 40)
        res = ha.gradient(lambda x: np.sum(np.tanh(x) * np.exp(-x)), x)
        assert np.allclose(res.gradient, (1 - np.tanh(x) ** 2) * np.exp(-x)
                           - np.tanh(x) * np.exp(-x), rtol=1e-12)
        import json
        print(json.dumps([m for m in ("scipy.linalg", "scipy.special", "numba.np.arraymath",
                                      "numba.typed.typedlist", "hybridad.ops.lapack")
                          if m in sys.modules]))
    """
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(tmp_path / "cache"))
    for warm in (False, True):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        loaded = json.loads(out.stdout.strip().splitlines()[-1])
        if warm:
            assert loaded == [], loaded
        else:  # (a compile refreshes numba's registries, and may import more)
            assert "hybridad.ops.lapack" not in loaded and "scipy.special" not in loaded, loaded
