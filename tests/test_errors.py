"""Bad input: clear exceptions naming the argument, result buffers untouched."""

import numpy as np
import pytest
from conftest import rand

import hybridad as ha


def f(x, A):
    return np.sum(np.tanh(A @ x) ** 2)


@pytest.fixture
def setup():
    x, A = rand((4,), seed=1), rand((3, 4), seed=2)
    res = ha.GradientResult(x)
    res.value[...] = 7.0
    res.gradient[...] = 7.0
    return x, A, res


def untouched(res):
    return float(res.value) == 7.0 and np.all(res.gradient == 7.0)


def test_wrong_out_shape_and_dtype(setup):
    x, A, _ = setup
    for bad in (ha.GradientResult(np.ones(5)), ha.GradientResult(np.ones(4, np.float32)),
                ha.GradientResult(np.ones((4, 1)))):
        bad.gradient[...] = 7.0
        bad.value[...] = 7.0
        with pytest.raises(ValueError, match="out.gradient for argument 'x'"):
            ha.gradient(f, x, A, out=bad)
        assert untouched(bad)


def test_bad_value_buffer_and_out_type(setup):
    x, A, res = setup
    with pytest.raises(ValueError, match="out.value"):
        ha.gradient(f, x, A, out=ha.DiffResult(np.zeros(2), np.zeros(4)))
    with pytest.raises(TypeError, match="out must be"):
        ha.gradient(f, x, A, out=np.zeros(4))
    with pytest.raises(TypeError, match="value must be an ndarray"):
        ha.DiffResult(0.0, np.zeros(4))
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        ha.gradient(f, x, A, out=ha.DiffResult(np.zeros(()), ro))


def test_explicit_plan_rejects_wrong_x(setup):
    x, A, res = setup
    plan = ha.compile(f, x, A)
    with pytest.raises(ValueError, match="argument 'x' has shape \\(5,\\)"):
        plan.gradient(np.ones(5), A, out=res)
    with pytest.raises(ValueError, match="argument 'x'.*dtype float32"):
        plan.gradient(x.astype(np.float32), A, out=res)
    with pytest.raises(ValueError, match="argument 'A' has shape"):
        plan.gradient(x, np.ones((4, 4)), out=res)
    with pytest.raises(TypeError, match="takes 2 positional"):
        plan.gradient(x, out=res)
    assert untouched(res)


def test_non_numeric_and_integer_input(setup):
    x, A, res = setup
    with pytest.raises(TypeError, match="argument 'x' must be a floating-point"):
        ha.gradient(f, "abc", A)
    with pytest.raises(TypeError, match="argument 'x' must have a floating-point dtype"):
        ha.compile(f, np.arange(4), A)
    with pytest.raises(TypeError, match="argument 'x' must be a floating-point"):
        ha.compile(f, object(), A)
    with pytest.raises(TypeError, match="x must be a floating-point"):
        ha.GradientResult(np.arange(3))
    assert untouched(res)


def test_non_scalar_output(setup):
    x, A, res = setup
    with pytest.raises(ValueError, match="must return a scalar.*shape \\(3,\\)"):
        ha.gradient(lambda x, A: A @ x, x, A, out=res)
    with pytest.raises(TypeError, match="floating-point value"):
        ha.gradient(lambda x, A: np.sum(x > 0), x, A, out=res)
    assert untouched(res)


def test_argnums_out_of_range(setup):
    x, A, res = setup
    with pytest.raises(ValueError, match="argnums=2 is out of range"):
        ha.gradient(f, x, A, argnums=2, out=res)
    with pytest.raises(TypeError, match="argnums must be"):
        ha.gradient(f, x, A, argnums="x")
    with pytest.raises(ValueError, match="repeats"):
        ha.gradient(f, x, A, argnums=(0, 0))
    assert untouched(res)


def test_out_aliasing_input(setup):
    x, A, _ = setup
    with pytest.raises(ValueError, match="share memory with argument 'x'"):
        ha.gradient(f, x, A, out=ha.DiffResult(np.zeros(()), x))


def test_value_dependent_control_flow_names_line_and_fix():
    def g(x):
        if x[0] > 0:  # the offending line
            return np.sum(x)
        return np.sum(-x)

    # gradient and Hessian plans take the call's value, guarded
    # (hybridad.core.decisions); a plan traced from shapes alone (an optimizer
    # step's) refuses, naming the line and the fix
    assert np.array_equal(ha.gradient(g, np.ones(3)).gradient, np.ones(3))
    assert np.array_equal(ha.hessian(g, np.ones(3)).hessian, np.zeros((3, 3)))
    with pytest.raises(ha.TracingError) as err:
        _shapes_only(g, np.ones(3))
    msg = str(err.value)
    assert "if x[0] > 0:" in msg and "test_errors.py" in msg and "np.where" in msg

    with pytest.raises(ha.TracingError, match="float\\(\\)"):
        _shapes_only(lambda x: float(np.sum(x)) * x[0] ** 2, np.ones(3))
    with pytest.raises(ha.TracingError, match="bool"):
        _shapes_only(lambda x: np.sum(x ** 3) if np.all(x > 0) and True else 0.0, np.ones(3))
    with pytest.raises(ha.TracingError, match="np.maximum"):
        _shapes_only(lambda x: max(x[0], x[1]) ** 3, np.ones(3))


def _shapes_only(f, x):
    """A plan traced from shapes alone (an optimizer step's: no call's values)."""
    return ha.compile(f, x, update=ha.optim.SGD(lr=0.1))


def test_array_of_traced_values_points_to_stack():
    # np.array over traced values works (tests/test_constructs.py); numpy's own
    # function, bound to a name before tracing, still meets the tracer's refusal
    array = np._core.multiarray.array
    with pytest.raises(ha.TracingError, match="np.stack"):
        ha.gradient(lambda x: np.sum(array([x[0], x[1]])), np.ones(3))


def test_unsupported_function_is_named():
    # without a traced implementation numpy's own runs on values (tests/test_host_calls.py);
    # np.unique's result shape depends on them
    with pytest.raises(ha.TracingError, match="numpy.unique .*depends on the values"):
        ha.gradient(lambda x: np.sum(np.unique(x)), np.ones(3))
    with pytest.raises(NotImplementedError, match="numpy.logaddexp.accumulate"):
        ha.gradient(lambda x: np.sum(np.logaddexp.accumulate(x)), np.ones(3))


def test_value_dependent_indices():
    # gradient and Hessian plans take the call's mask and indices, guarded; a
    # plan traced from shapes alone refuses
    x = np.array([0.5, -1.0, 2.0])
    assert np.array_equal(ha.gradient(lambda x: np.sum(x[x > 0] ** 2), x).gradient,
                          [1.0, 0.0, 4.0])
    np.testing.assert_allclose(ha.hessian(lambda x: np.sum(x[x > 0] ** 3), x).hessian,
                               np.diag([3.0, 0.0, 12.0]))
    with pytest.raises(ha.TracingError, match="np.where"):
        _shapes_only(lambda x: np.sum(x[x > 0] ** 3), np.ones(3))
    with pytest.raises(ha.TracingError, match="constant arrays"):
        _shapes_only(lambda x: np.sum(x[np.floor(x).astype(int)] ** 3), np.ones(3))
    with pytest.raises(ha.TracingError, match="known at trace time"):
        _shapes_only(lambda x: np.sum(np.take(x, np.floor(x).astype(int)) ** 3), np.ones(3))
    with pytest.raises(IndexError, match="out of bounds"):
        ha.gradient(lambda x: np.sum(x[[0, 3]]), np.ones(3))


def test_in_place_write_to_traced_array():
    def g(x):
        x[0] = 1.0
        return np.sum(x)

    with pytest.raises(ha.TracingError, match="in-place"):
        ha.gradient(g, np.ones(3))


def test_explicit_plan_rejects_bad_out_and_leaves_it_untouched():
    # plan.gradient has a short validation path for plain arrays; every bad
    # case must still raise (naming the problem) and write nothing
    x = np.linspace(0.1, 1.0, 6)
    plan = ha.compile(lambda x: np.sum(np.exp(x)), x)
    ok = ha.GradientResult(x)
    plan.gradient(x, out=ok)
    np.testing.assert_allclose(ok.gradient, np.exp(x), rtol=1e-14)

    readonly = np.full(6, 7.0)
    readonly.flags.writeable = False
    bad_outs = [
        (ha.DiffResult(np.full((), 7.0), np.full(5, 7.0)), "shape"),
        (ha.DiffResult(np.full((), 7.0), np.full(6, 7.0, np.float32)), "dtype"),
        (ha.DiffResult(np.full((), 7.0), readonly), "writeable"),
        (ha.DiffResult(np.full((), 7.0), x), "share memory"),
        (ha.DiffResult(np.full(1, 7.0), np.full(6, 7.0)), "0-d"),
    ]
    for out, words in bad_outs:
        before = [np.array(out.value), np.array(out.derivs[0])]
        with pytest.raises(ValueError, match=words):
            plan.gradient(x, out=out)
        np.testing.assert_array_equal(out.value, before[0])
        np.testing.assert_array_equal(out.derivs[0], before[1])
    with pytest.raises(TypeError, match="out must be"):
        plan.gradient(x, out=(np.zeros(()), np.zeros(6)))
    np.testing.assert_allclose(ok.gradient, np.exp(x), rtol=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f, x, message", [
    (lambda A: np.sum(np.linalg.solve(A, np.ones(2))), np.ones((2, 2)), "Singular matrix"),
    (lambda A: np.sum(np.linalg.inv(A)), np.ones((2, 2)), "Singular matrix"),
    (lambda A: np.sum(np.linalg.cholesky(A)), -np.eye(2), "not positive definite"),
    # the value exists (0, or log 0 = -inf), the gradient A^-T does not
    (lambda A: np.linalg.det(A), np.ones((2, 2)), "Singular matrix"),
    (lambda A: np.linalg.slogdet(A)[1], np.ones((2, 2)), "Singular matrix"),
])
def test_singular_matrix_raises_linalg_error(backend, f, x, message):
    res = ha.GradientResult(x)
    res.gradient[...] = 7.0
    with pytest.raises(np.linalg.LinAlgError, match=message):
        ha.gradient(f, x, out=res, backend=backend)
    assert np.all(res.gradient == 7.0)


def test_linalg_shape_errors_are_numpys():
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        ha.gradient(lambda A: np.linalg.det(A), np.ones((2, 3)))
    with pytest.raises(np.linalg.LinAlgError, match="two-dimensional"):
        ha.gradient(lambda A: np.sum(np.linalg.inv(A)), np.ones(3))
    with pytest.raises(ValueError, match="does not match"):
        ha.gradient(lambda A: np.sum(np.linalg.solve(A, np.ones(3))), np.eye(2))


def test_singular_matrix_value_is_numpys():
    plan = ha.compile(lambda A: np.linalg.det(A), np.eye(2))
    assert plan.value(np.ones((2, 2))) == 0.0
    plan = ha.compile(lambda A: np.linalg.slogdet(A)[1], np.eye(2))
    assert plan.value(np.ones((2, 2))) == -np.inf


def test_compiled_extension_called_on_a_tracer_is_named():
    """Cython (scipy's own _ppoly.evaluate, a typed-memoryview function) or
    pybind11 code handed a traced array: a TracingError naming the function,
    the user's line and the ways out, not the extension's bare TypeError."""
    from scipy.interpolate import _ppoly

    def f(x):
        out = np.empty((3, 1))
        _ppoly.evaluate(np.ones((2, 1, 1)), np.array([0.0, 1.0]), x, 0, True, out)
        return np.sum(out)

    with pytest.raises(ha.TracingError) as err:
        ha.gradient(f, np.array([0.1, 0.2, 0.3]))
    msg = str(err.value)
    assert "scipy.interpolate._ppoly.evaluate" in msg and "_ppoly.pyx" in msg
    assert "test_errors.py" in msg and "_ppoly.evaluate(" in msg
    assert "@hybridad.elementwise" in msg and "on values" in msg

    def bound(x):  # what pybind11 says
        raise TypeError("loss(): incompatible function arguments. The following argument "
                        "types are supported: (arg0: numpy.ndarray) -> float")

    with pytest.raises(ha.TracingError, match="loss is compiled code"):
        ha.gradient(lambda x: bound(x) + np.sum(x), np.array([0.1, 0.2]))
    with pytest.raises(TypeError, match="has no len"):  # an ordinary TypeError: as it was
        ha.gradient(lambda x: np.sum(x) + len(5), np.array([0.1, 0.2]))


def test_a_newcomers_slips_are_named():
    """The function left out, a second prototype where one tuple was meant,
    a dict of arrays as scipy's ``x0``: each a TypeError saying what to pass,
    not numpy's or Python's own message from inside hybridad."""
    x, A = np.ones(3), np.ones((3, 3))
    for call in (lambda: ha.gradient(x, A), lambda: ha.compile(x, A),
                 lambda: ha.hessian(x, A), lambda: ha.hvp(x, x, A), lambda: ha.jacobian(3, x)):
        with pytest.raises(TypeError, match="f must be a callable"):
            call()
    for cls in (ha.GradientResult, ha.HvpResult):
        hint = rf"pass one tuple of prototypes: {cls.__name__}\(\(x, A\)\)"
        with pytest.raises(TypeError, match=hint):
            cls(x, A)
    with pytest.raises(TypeError, match="dtype must be a dtype"):
        ha.HessianResult(x, A)
    assert ha.GradientResult(x, np.float32).value.dtype == np.float32
    import hybridad.scipy as hs

    def fun(p):
        return np.sum(p ** 2)
    for x0, kind in (({"a": np.zeros(2)}, "dict"), ((np.zeros(2), np.zeros(3)), "tuple")):
        with pytest.raises(TypeError, match=f"x0 must be one real array.*a {kind} of arrays"):
            hs.minimize(fun, x0)
    np.testing.assert_allclose(hs.minimize(fun, [np.ones(2), np.ones(2)]).x, 0, atol=1e-6)
