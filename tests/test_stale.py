"""A result is always that of f as it is at call time (hybridad.frontend.guards).

What f reads besides its arguments -- globals, closure cells, ``self``'s
attributes, items of captured lists and dicts, attributes of the objects
those hold, captured arrays -- is baked into a plan when f is traced.  These
tests change each kind of value between calls and check that
``ha.gradient`` / ``hessian`` / ``hvp`` / ``jacobian`` / ``hybridad.scipy``
give the new function's derivatives, and that an explicit plan either still
computes the right thing or raises StalePlanError -- never the old function.
"""

import functools
import random
import time
import warnings

import numpy as np
import pytest

import hybridad as ha
from hybridad.plans import cache
from hybridad.errors import RetraceWarning, StalePlanError, TracingError
from hybridad.testing import count_allocations

X = np.array([0.5, -1.0, 2.0])
BACKENDS = ("numpy", "numba")


def check(f, x=X, backend="numpy", *args):
    """ha.gradient of f at x equals f's value and a finite-difference gradient."""
    res = ha.gradient(f, x, *args, backend=backend)
    np.testing.assert_allclose(float(res.value), f(x, *args), rtol=1e-13)
    eps = 1e-6
    num = np.array([(f(x + eps * e, *args) - f(x - eps * e, *args)) / (2 * eps)
                    for e in np.eye(x.size)]).reshape(x.shape)
    np.testing.assert_allclose(res.gradient, num, rtol=1e-6, atol=1e-6)
    return res


# ----------------------------------------------------------------------------
# the kinds of state f reads
# ----------------------------------------------------------------------------

class Model:
    offset = 0.0  # a class attribute

    def __init__(self):
        self.w = np.ones(3)
        self.scale = 2.0
        self.layer = Layer()

    def loss(self, x):
        return self.scale * np.sum((x * self.w) ** 2) + self.offset + self.layer(x)


class Layer:
    def __init__(self):
        self.b = np.zeros(3)
        self.gain = 1.0

    def __call__(self, x):
        return self.gain * np.sum(np.sin(x + self.b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_method_attributes(backend):
    m = Model()
    check(m.loss, backend=backend)
    m.w = np.array([1.0, 2.0, 3.0])  # an array attribute replaced
    check(m.loss, backend=backend)
    m.scale = 10.0  # a float attribute changed
    check(m.loss, backend=backend)
    m.w[0] = 5.0  # an array changed in place (the graph reads it by reference)
    check(m.loss, backend=backend)
    m.layer.gain = 3.0  # an attribute of an object f reaches through self
    check(m.loss, backend=backend)
    m.layer.b = np.full(3, 0.25)
    check(m.loss, backend=backend)
    m.layer = Layer()  # the object itself replaced
    check(m.loss, backend=backend)
    m.offset = 7.0  # an instance attribute now shadows the class attribute
    check(m.loss, backend=backend)


def test_class_attribute():
    class M(Model):
        pass

    m = M()
    check(m.loss)
    M.offset = 4.0
    check(m.loss)
    M.loss = lambda self, x: np.sum(x ** 3)  # the method itself replaced on the class
    check(m.loss)


SCALE = 1.0
POWER = 2


def helper(x):
    return np.sum(x ** POWER)


def uses_globals(x):
    return SCALE * helper(x)


def other_helper(x):
    return np.sum(np.cos(x))


GAIN = 2.0
PIECES = {}


def _piece(v):
    return GAIN * v ** 2


def uses_a_callback(x):  # the piece is looked up when f runs: only observing it finds GAIN
    return np.sum(np.piecewise(x, [x < 0, x >= 0], [PIECES["neg"], lambda v: v]))


def test_globals_read_by_a_callback_of_a_numpy_function():
    """np.piecewise calls the user's pieces from inside hybridad's dispatch
    (which is otherwise not observed): a global they read is guarded."""
    global GAIN
    PIECES["neg"] = _piece
    try:
        check(uses_a_callback)
        GAIN = 5.0
        check(uses_a_callback)
    finally:
        GAIN = 2.0


def test_globals_and_helpers():
    global SCALE, POWER, helper
    saved = SCALE, POWER, helper
    try:
        check(uses_globals)
        SCALE = 3.0  # a global float rebound
        check(uses_globals)
        POWER = 3  # a global the helper reads
        check(uses_globals)
        helper = other_helper  # the helper rebound
        check(uses_globals)
    finally:
        SCALE, POWER, helper = saved


def test_closures_lists_dicts():
    k = 2.0
    coef = [1.0, 2.0, 3.0]
    cfg = {"a": 1.0, "b": [0.5]}

    def f(x):
        return k * np.sum(sum(c * x ** i for i, c in enumerate(coef))) + cfg["a"] * \
            np.sum(x) * cfg["b"][0]

    check(f)
    coef[1] = 10.0  # an element of a captured list
    check(f)
    coef.append(4.0)  # the list grows
    check(f)
    cfg["a"] = -2.0  # a dict value
    check(f)
    cfg["b"][0] = 3.0  # nested
    check(f)
    k = 5.0  # the closure cell rebound  # noqa: F841 - read by f
    check(f)


def test_captured_array_read_as_numbers():
    c = np.array([1.0, 2.0, 3.0])

    def poly(x):  # numbers taken out of c while tracing: baked into the graph
        return np.sum(sum(c[i] * x ** i for i in range(3)))

    for backend in BACKENDS:
        ha.clear_cache()
        check(poly, backend=backend)
        c[1] = 10.0
        check(poly, backend=backend)
        c[1] = 2.0
    plan = ha.compile(poly, X, backend="numpy")
    c[2] = -1.0
    with pytest.raises(StalePlanError, match=r"values of the array c were changed in place"):
        plan.gradient(X)


def test_captured_mask_and_indices():
    mask = np.array([True, False, True])
    idx = np.array([0, 0, 2])

    def f(x):
        return np.sum(x[mask] ** 2) + np.sum(x[idx] ** 3)

    check(f)
    mask[1] = True
    check(f)
    idx[:] = [2, 1, 1]
    check(f)


def test_defaults_partial_callable():
    def f(x, p=2.0):
        return np.sum(x ** 2) * p

    check(f)
    f.__defaults__ = (5.0,)
    check(f)

    def g(x, scale):
        return scale * np.sum(np.exp(x))

    pg = functools.partial(g, scale=2.0)
    check(pg)
    pg.keywords["scale"] = -1.0
    check(pg)

    layer = Layer()
    check(layer)
    layer.gain = 4.0
    check(layer)


def test_property_and_slots():
    class P:
        __slots__ = ("a", "__weakref__")

        def __init__(self):
            self.a = 1.0

        @property
        def twice(self):
            return 2 * self.a

        def f(self, x):
            return self.twice * np.sum(x ** 2)

    p = P()
    check(p.f)
    p.a = 3.0
    check(p.f)


class Config:
    def __init__(self, alpha):
        self.alpha = alpha


def test_static_argument_object():
    def f(x, cfg):
        return cfg.alpha * np.sum(x ** 2)

    cfg = Config(1.0)
    check(f, X, "numpy", cfg)
    cfg.alpha = 4.0
    check(f, X, "numpy", cfg)


def test_in_place_change_of_graph_read_array_needs_no_retrace():
    big = np.linspace(0, 1, 4096)  # above SMALL_BYTES: read by reference, no content guard

    def f(x):
        return np.sum(np.outer(x, big[:3]) ** 2)

    plan = ha.compile(f, X, backend="numpy")
    before = plan.gradient(X).value.copy()
    big[:3] = 5.0
    after = plan.gradient(X)
    np.testing.assert_allclose(float(after.value), f(X), rtol=1e-14)
    assert after.value != before and plan._retraces == 0


# ----------------------------------------------------------------------------
# explicit plans, other entry points
# ----------------------------------------------------------------------------

def test_explicit_plan_raises_naming_the_value():
    m = Model()
    plan = ha.compile(m.loss, X, backend="numpy")
    plan.gradient(X)
    m.scale = 3.0
    with pytest.raises(StalePlanError, match=r"self\.scale was 2\.0 .* now 3\.0"):
        plan.gradient(X)
    m.scale = 2.0
    plan.gradient(X)  # as traced again: fine
    m.w = np.ones(3)
    with pytest.raises(StalePlanError, match=r"self\.w was replaced"):
        plan.gradient(X)
    res = ha.GradientResult(X)
    res.value[...] = 123.0
    with pytest.raises(StalePlanError):
        plan.gradient(X, out=res)
    assert res.value == 123.0 and not res.gradient.any()  # untouched


def test_explicit_plan_keeps_running_when_the_graph_is_the_same():
    state = {"unused": 1.0, "used": 2.0}

    def f(x):
        if state["unused"] > 10:  # read, but the branch is the same
            return np.sum(x)
        return state["used"] * np.sum(x ** 2)

    plan = ha.compile(f, X, backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RetraceWarning)
        for v in (2.0, 3.0):
            state["unused"] = v
            np.testing.assert_allclose(float(plan.gradient(X).value), f(X))
    with pytest.warns(RetraceWarning, match="traced again 3 times"):
        state["unused"] = 4.0
        plan.gradient(X)


@pytest.mark.parametrize("form", ["fori_loop", "scan", "python"])
def test_a_plan_with_loops_keeps_running_when_the_graph_is_the_same(form):
    # a loop's body is compared by its content: each trace makes its own
    # (a retrace gave a new body object, and the plan raised StalePlanError)
    state = {"unused": 1.0, "dt": 0.1}
    W = np.array([[0.5, -0.2, 0.1], [0.3, 0.4, -0.6], [0.0, 0.2, 0.9]])

    def step(x):
        return x + state["dt"] * np.tanh(W @ x)

    def f(x):
        if state["unused"] > 10:  # read, but the branch is the same
            return np.sum(x)
        if form == "fori_loop":
            x = ha.fori_loop(0, 60, lambda i, x: step(x), x)
        elif form == "scan":
            x, _ = ha.scan(lambda x, r: (step(x) * r, None), x, np.linspace(0.9, 1.0, 60))
        else:
            for _ in range(60):  # rolled by the plan
                x = step(x)
        return np.sum(x ** 2)

    plan = ha.compile(f, X, backend="numpy")
    assert any(n.op == "loop" for n in plan.graph.nodes)
    want = plan.gradient(X).gradient.copy()
    state["unused"] = 2.0
    np.testing.assert_array_equal(plan.gradient(X).gradient, want)
    state["dt"] = 0.2  # a constant of the body: a different graph
    with pytest.raises(StalePlanError, match="different graph"):
        plan.gradient(X)


def test_hessian_hvp_jacobian_scipy():
    m = Model()
    h1 = ha.hessian(m.loss, X).hessian.copy()
    m.scale = 5.0
    h2 = ha.hessian(m.loss, X)
    assert not np.allclose(h1, h2.hessian)
    plan_h = ha.compile(m.loss, X, hessian=True, backend="numpy")
    np.testing.assert_allclose(plan_h.hessian(X).hessian, h2.hessian, rtol=1e-12)
    v = np.array([1.0, 0.0, -1.0])
    np.testing.assert_allclose(ha.hvp(m.loss, X, v).hvp, h2.hessian @ v, rtol=1e-12)
    m.scale = 1.0
    np.testing.assert_allclose(ha.hvp(m.loss, X, v).hvp, ha.hessian(m.loss, X).hessian @ v,
                               rtol=1e-12)
    with pytest.raises(StalePlanError):
        plan_h.hessian(X)

    A = np.eye(3)

    def vec(x):
        return A @ np.sin(x)

    np.testing.assert_allclose(ha.jacobian(vec, X).jacobian, np.diag(np.cos(X)))
    A = 2 * np.eye(3)  # noqa: F841 - the closure cell now holds another matrix
    np.testing.assert_allclose(ha.jacobian(vec, X).jacobian, 2 * np.diag(np.cos(X)))

    import hybridad.scipy as hs

    target = {"c": np.array([1.0, 2.0])}

    def obj(x):
        return np.sum((x - target["c"]) ** 2)

    o = hs.Objective(obj, np.zeros(2))
    np.testing.assert_allclose(o.jac(np.zeros(2)), [-2.0, -4.0])
    target["c"] = np.array([3.0, 4.0])  # at the same x: the memoized result is stale
    np.testing.assert_allclose(o.jac(np.zeros(2)), [-6.0, -8.0])
    np.testing.assert_allclose(o.fun(np.zeros(2)), 25.0)
    np.testing.assert_allclose(o.hessp(np.zeros(2), np.ones(2)), [2.0, 2.0])
    res = hs.minimize(obj, np.zeros(2), method="trust-ncg")
    np.testing.assert_allclose(res.x, [3.0, 4.0], atol=1e-8)


def test_gradient_batch_after_change():
    m = Model()
    plan = ha.compile(m.loss, X, backend="numpy")
    Xs = np.stack([X, 2 * X])
    r1 = plan.gradient_batch(Xs)
    m.w[0] = 3.0  # in place, read by reference: the same plans stay right
    r2 = plan.gradient_batch(Xs)
    np.testing.assert_allclose(r2.value, [m.loss(X), m.loss(2 * X)], rtol=1e-13)
    assert not np.allclose(r1.value, r2.value)


# ----------------------------------------------------------------------------
# calls whose result changes without depending on the inputs
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("draw", [
    lambda: np.random.normal(size=3),
    lambda: np.random.rand(3),
    lambda: np.random.default_rng().normal(size=3),
    lambda: np.random.RandomState().uniform(size=3),
    lambda: np.random.RandomState(None).uniform(size=3),
    lambda: np.full(3, random.random()),
    lambda: np.full(3, random.gauss(0, 1)),
    lambda: np.full(3, time.time() % 1.0),
])
def test_nondeterministic_calls_are_refused(draw):
    def f(x):
        return np.sum(x * draw())

    with pytest.raises(TracingError, match=r"(numpy\.random|random\.|time\.).*pass them in as "
                                           r"an argument"):
        ha.gradient(f, X, backend="numpy")


_GEN = np.random.default_rng(1)
_LEGACY = np.random.RandomState(2)


def _noise():
    return _GEN.normal(size=3)


class _Noisy:
    def __init__(self):
        self.rng = np.random.default_rng(3)

    def loss(self, x):
        return np.sum((x + self.rng.normal(size=3)) ** 2)


@pytest.mark.parametrize("form", ["global", "legacy", "helper", "attribute", "default",
                                  "closure"])
def test_draws_from_a_generator_f_captured_are_refused(form):
    """A generator made outside ``f`` -- a global, a helper's, an instance's,
    a default, a closure's -- draws new numbers at every call of numpy's code;
    a plan would replay its one draw.  Its methods are compiled code no
    profiler sees: each generator ``f`` can reach is compared before and after
    the trace.  A plan replayed the first draw silently."""
    closed = np.random.default_rng(4)
    f = {"global": lambda x: np.sum((x + _GEN.standard_normal(3)) ** 2),
         "legacy": lambda x: np.sum((x + _LEGACY.randn(3)) ** 2),
         "helper": lambda x: np.sum((x + _noise()) ** 2),
         "attribute": _Noisy().loss,
         "default": lambda x, rng=_LEGACY: np.sum(x * rng.random(3)),
         "closure": lambda x: np.sum(x * closed.random(3))}[form]
    with pytest.raises(TracingError, match=r"draws from a (Generator|RandomState).*pass them "
                                           r"in as an argument"):
        ha.gradient(f, X, backend="numpy")


def test_a_generator_seeded_inside_f_and_one_only_read_are_fine():
    def seeded(x):
        return np.sum((x + np.random.default_rng(0).normal(size=3)) ** 2)

    want = 2 * (X + np.random.default_rng(0).normal(size=3))
    for _ in range(2):
        np.testing.assert_allclose(ha.gradient(seeded, X).gradient, want, rtol=1e-14)


class _Seeded:
    def __init__(self, seed):
        self.seed = seed

    def noise(self):
        return np.random.RandomState(self.seed).standard_normal(3)


@pytest.mark.parametrize("form", ["constant", "keyword", "name", "attribute", "alias"])
def test_a_legacy_generator_seeded_inside_f_is_fine(form):
    """``np.random.RandomState(0)`` draws fresh entropy from
    ``random.SystemRandom`` as it is made, then replaces it by the seed's
    (numpy's legacy seeding): its draws are the same at every call, and
    autograd's reparameterization test makes one inside ``f``.  It was
    refused as a call of ``random.getrandbits``.  Read from the call's
    bytecode: a seed given as a constant, a keyword, a name or an attribute,
    by any name of the class; a plan follows numpy's draws at new points."""
    from numpy.random import RandomState as Legacy

    seed = 7

    def f(x):
        rs = {"constant": lambda: np.random.RandomState(7),
              "keyword": lambda: np.random.RandomState(seed=7),
              "name": lambda: np.random.RandomState(seed),
              "alias": lambda: Legacy(7)}.get(form)
        noise = _Seeded(7).noise() if rs is None else rs().standard_normal(3)
        return np.sum((x + noise) ** 2) + np.sum(np.linalg.cholesky(np.eye(3) * x[0] ** 2) @ noise)

    noise = np.random.RandomState(7).standard_normal(3)
    for backend in ("numpy", "numba"):
        plan = ha.compile(f, X, backend=backend)
        for x in (X, X + 0.5):
            np.testing.assert_allclose(plan.gradient(x).value, f(x), rtol=1e-14)
            want = 2 * (x + noise)
            want[0] += np.sign(x[0]) * np.sum(noise)
            np.testing.assert_allclose(plan.gradient(x).gradient, want, rtol=1e-13)


def test_a_legacy_generator_with_no_seed_or_an_unread_one_is_refused():
    """``RandomState()`` / ``RandomState(None)`` / a name bound to None keep
    their fresh entropy: refused, naming the maker; a seed made by an
    expression is not read, and the draw is refused as before."""
    none = None
    for make, what in [(lambda: np.random.RandomState(), "numpy.random.RandomState"),
                       (lambda: np.random.RandomState(none), "numpy.random.RandomState"),
                       (lambda: np.random.RandomState(int("3")), "random.getrandbits")]:
        with pytest.raises(TracingError, match=what.replace(".", r"\.")):
            ha.gradient(lambda x, make=make: np.sum(x * make().random_sample(3)), X,
                        backend="numpy")
    np.testing.assert_allclose(ha.gradient(lambda x: np.sum(x ** 2) if _GEN else 0.0,
                                           X).gradient, 2 * X)


def test_the_observing_profiler_is_suspended_and_restored_exactly():
    """Traced operators, ufuncs and indexes suspend the observing profiler
    for their own work and restore it; inside a suspended (library) block
    they leave it suspended; no other thread sees it; after all that, a
    clock read is still refused, and after the trace no profiler is left."""
    import sys
    import threading

    from hybridad.core.observe import OBSERVED, paused

    seen = []

    def f(x):
        y = x * 2.0 + np.tanh(x)[0]
        seen.append((sys.getprofile() is not None, OBSERVED.profiler is sys.getprofile()))
        with paused():
            z = np.sin(y) - y
            seen.append((sys.getprofile(), OBSERVED.profiler))
        seen.append(sys.getprofile() is OBSERVED.profiler is not None)
        t = threading.Thread(target=lambda: seen.append(OBSERVED.profiler))
        t.start()
        t.join()
        return np.sum(z * time.time())

    with pytest.raises(TracingError, match="time"):
        ha.gradient(f, X, backend="numpy")
    assert seen == [(True, True), (None, None), True, None]
    assert sys.getprofile() is None and OBSERVED.profiler is None


def test_noise_passed_as_argument_is_fine():
    noise = np.random.default_rng(0).normal(size=3)
    res = ha.gradient(lambda x, n: np.sum(x * n), X, noise, backend="numpy")
    np.testing.assert_allclose(res.gradient, noise)


# ----------------------------------------------------------------------------
# cost and lifetime
# ----------------------------------------------------------------------------

def test_guarded_calls_allocate_nothing():
    m = Model()
    plan = ha.compile(m.loss, X)  # numba
    res = ha.GradientResult(X)
    assert plan.guards.count > 0
    for _ in range(3):
        plan.gradient(X, out=res)
        ha.gradient(m.loss, X, out=res)
    with count_allocations() as counts:
        for _ in range(50):
            plan.gradient(X, out=res)
            ha.gradient(m.loss, X, out=res)
    assert counts.allocations == 0


def test_plain_function_has_no_guards_to_check():
    plan = ha.compile(lambda x: np.sum(np.exp(x)), X, backend="numpy")
    # only the numpy module global, and the function's code object
    assert plan.guards.count <= 3, plan.guards.paths


def test_cache_does_not_keep_instances_alive():
    import gc
    import weakref

    m = Model()
    ha.gradient(m.loss, X, backend="numpy")
    ref = weakref.ref(m)
    n = len(cache._weak)
    del m
    gc.collect()
    assert ref() is None and len(cache._weak) < n


GAIN = 2.0


def test_elementwise_function_reading_a_global():
    global GAIN

    @ha.elementwise
    def amp(r):
        return GAIN * r * r

    def f(x):
        return np.sum(amp(x))

    try:
        check(f, backend="numba")
        GAIN = 5.0  # numba froze the old value into the kernel: a new one is compiled
        check(f, backend="numba")
    finally:
        GAIN = 2.0


def test_odd_objects_do_not_break_the_walk():
    class Proxy:  # attribute access that computes, and a cycle back to the model
        def __getattr__(self, name):
            return 1.0

    class Rec:
        def __init__(self):
            self.me = self
            self.proxy = Proxy()
            self.k = 2.0

        def f(self, x):
            return self.me.k * self.proxy.anything * np.sum(x ** 2)

    r = Rec()
    check(r.f)
    r.k = 3.0
    check(r.f)

    def fact(n):  # recursive: its global refers to itself
        return 1 if n <= 1 else n * fact(n - 1)

    def g(x):
        return fact(3) * np.sum(x)

    check(g)


# -- a value named like the guards' placeholder ---------------------------------------------
class Hartmann3:
    """As the benchmark collection writes it: constant arrays on ``self`` (one
    of them named ``p``) and a call counter."""

    def __init__(self):
        self.nfev = 0
        self.a = np.asarray([[3.0, 10., 30.], [0.1, 10., 35.], [3.0, 10., 30.], [0.1, 10., 35.]])
        self.p = np.asarray([[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470],
                             [0.1091, 0.8732, 0.5547], [0.03815, 0.5743, 0.8828]])
        self.c = np.asarray([1., 1.2, 3., 3.2])

    def fun(self, x, *args):
        self.nfev += 1
        XX = np.atleast_2d(x)
        d = np.sum(self.a * (XX - self.p) ** 2, axis=1)
        return -np.sum(self.c * np.exp(-d))


p = 2.0  # a global named p (read by _reads_global_p)
TABLE = {"p": 3.0, "q": 1.0}


def _reads_global_p(x):
    return np.sum(p * x ** 2)


def _reads_key_p(x):
    return np.sum(TABLE["p"] * x ** 2 + TABLE["q"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_named_p_is_guarded_without_retracing(backend):
    """The guards' source names an entry's parent ``p``; an attribute, global
    or dict key also called ``p`` was rewritten with it, so its guard read
    another value, failed on every call, and the plan traced ``f`` again each
    time (Hartmann3: 3.7 ms a gradient, 125x jax.jit)."""
    global p
    b = Hartmann3()
    x = np.array([0.2, 0.5, 0.3])
    for f in (b.fun, _reads_global_p, _reads_key_p):
        plan = ha.compile(f, x, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RetraceWarning)
            for _ in range(3):
                res = plan.gradient(x)
        check(f, x, backend)
        assert res.value == pytest.approx(f(x), rel=1e-13)
    assert b.nfev > 0
    traced = b.nfev
    ha.compile(b.fun, x, backend=backend).gradient(x)
    assert b.nfev == traced + 1  # (one trace for the new plan; its calls trace nothing)
    # and a change of any of them is still seen
    plan = ha.compile(b.fun, x, backend=backend)
    b.p = b.p + 0.1
    with pytest.raises(StalePlanError, match=r"self\.p was replaced"):
        plan.gradient(x)
    check(b.fun, x, backend)  # (ha.gradient: traced again, the new p's gradient)
    old = p
    try:
        p = 5.0
        check(_reads_global_p, x, backend)
        TABLE["p"] = 7.0
        check(_reads_key_p, x, backend)
    finally:
        p, TABLE["p"] = old, 3.0


def _helper_with_attribute(x):
    return _helper_with_attribute.k * x


_helper_with_attribute.k = 2.0


def _reads_own_attribute(x):
    return np.sum(_helper_with_attribute(x) ** 2) * _reads_own_attribute.k


_reads_own_attribute.k = 1.0


class ByConstantName:
    def __init__(self):
        self.k, self.w = 2.0, 3.0

    def loss(self, x):
        k = getattr(self, "k")  # noqa: B009 (as users write it)
        return np.sum(k * x ** 2) + vars(self)["w"] * np.sum(x) + \
            self.__dict__["k"] * np.sum(x ** 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_function_attributes_and_constant_name_reads_are_guarded(backend):
    """``f.k`` read inside ``f``, a helper's ``helper.k``, ``getattr(self,
    "k")``, ``vars(self)["w"]`` and ``self.__dict__["k"]``: a change of each
    gives the new function's gradient (they were not guarded: the old one,
    silently)."""
    f, h = _reads_own_attribute, _helper_with_attribute
    check(f, X, backend)
    try:
        f.k = 3.0
        check(f, X, backend)
        h.k = 5.0
        check(f, X, backend)
    finally:
        f.k, h.k = 1.0, 2.0
    m = ByConstantName()
    check(m.loss, X, backend)
    m.k = 7.0
    check(m.loss, X, backend)
    m.w = -1.0
    check(m.loss, X, backend)
    plan = ha.compile(m.loss, X, backend=backend)
    m.k = 1.5
    with pytest.raises(StalePlanError, match=r"self\.k was 7\.0"):
        plan.gradient(X)


def test_every_module_of_hybridad_is_library_code_not_the_users():
    """The profiler records user code and refuses its clock reads; the guards
    walk user code only.  Every module of the package is hybridad's own, in a
    checkout as in an installed copy (only ``core/`` counted once: a plan built
    inside a traced function read the clock in ``plans/buildtime.py``, and the
    outer trace refused it as the user's ``time.perf_counter``)."""
    import pathlib

    from hybridad.core.user_code import _is_user_file

    root = pathlib.Path(ha.__file__).resolve().parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 100
    assert [str(p) for p in files if _is_user_file(str(p))] == []
    assert _is_user_file(__file__)


_BIG = np.linspace(0.0, 1.0, 10_000)


def test_numpy_scalars_hybridads_own_code_hands_over_are_not_the_users_values():
    """A numpy scalar the user's code hands to a traced operation may be a
    number taken out of a captured array, and the guards then compare
    captured arrays by content at every call.  One that hybridad's own code
    hands over (scipy.stats' rules, a where's vjp) is not: only ``core/``
    counted as hybridad's, so a 10^4-element captured array was hashed at
    every call of a plan using ``scipy.stats``."""
    import scipy.stats as st

    def library(x):
        return np.sum(st.norm.logpdf(x, 0.2, 1.5)) + np.sum(np.where(x > 0.5, x, 0.0)) + \
            np.sum(x * _BIG[:3])

    def users(x):
        return np.sum(x * _BIG[:3]) * _BIG[7]  # (a number out of the captured array)

    x = np.array([0.3, 0.6, 0.9])
    for f, by_content in ((library, False), (users, True)):
        plan = ha.compile(f, x, backend="numpy")
        kinds = [e.extra[3] is not None for e in plan.guards._entries
                 if e.kind == "array" and "_BIG" in e.what]
        assert kinds == [by_content], (f.__name__, kinds)
        np.testing.assert_allclose(plan.gradient(x).gradient, ha.gradient(f, x).gradient)
