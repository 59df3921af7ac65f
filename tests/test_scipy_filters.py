"""scipy.signal's recursive filters on traced values
(hybridad/frontend/scipy_filters.py): ``lfilter`` (with ``zi``, the final
delays), ``lfilter_zi`` and ``filtfilt``.  Values against scipy's, gradients
with respect to the signal, the initial delays and the coefficients against
central differences on both backends (``assert_grad``), a long signal whose
plan does not grow with its length, no allocation per call, the refusals."""

import numpy as np
import pytest
import scipy.signal as ss
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc

B, A = ss.butter(3, 0.2)
W40 = np.arange(40.0) / 40


CASES = {
    "signal": (lambda x: np.sum(ss.lfilter(B, A, x) * W40), (40,)),
    "fir": (lambda x: np.sum(ss.lfilter([0.5, 0.3, 0.2], [1.0], x) ** 2), (40,)),
    "gain": (lambda x: np.sum(ss.lfilter([2.0], [4.0], x) ** 2), (40,)),
    "axis0": (lambda x: np.sum(ss.lfilter(B, A, x.reshape(8, 5), axis=0) ** 2), (40,)),
    "initial_and_final_delays": (
        lambda x: np.sum(ss.lfilter(B, A, x[3:], zi=x[:3])[0] ** 2) +
        np.sum(ss.lfilter(B, A, x[3:], zi=ss.lfilter_zi(B, A) * x[3])[1] ** 3), (40,)),
    "numerator": (lambda b: np.sum(ss.lfilter(b, A, W40 - 0.5) ** 2), (4,)),
    "denominator": (lambda a: np.sum(ss.lfilter(B, a * 0.1 + A, W40 - 0.5) ** 2), (4,)),
    "ar_coefficients": (lambda phi: np.sum(ss.lfilter(
        [1.0], np.concatenate([[1.0], -0.2 * phi]), np.sin(np.arange(40.0))) ** 2), (2,)),
    "filtfilt_odd": (lambda x: np.sum(ss.filtfilt(B, A, x) * W40), (40,)),
    "filtfilt_even_rows": (lambda x: np.sum(ss.filtfilt(B, A, x.reshape(2, 20),
                                                        padtype="even") ** 2), (40,)),
    "filtfilt_constant_axis0": (lambda x: np.sum(ss.filtfilt(
        B, A, x.reshape(20, 2), axis=0, padtype="constant", padlen=4) ** 2), (40,)),
    "filtfilt_unpadded": (lambda x: np.sum(ss.filtfilt(B, A, x, padtype=None) ** 2), (40,)),
    "filtfilt_coefficients": (lambda a: np.sum(ss.filtfilt(B, A + 0.1 * a, W40) ** 2), (4,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name):
    f, shape = CASES[name]
    assert_grad(f, (rand(shape, seed=sum(map(ord, name))),))


def test_values_are_scipys():
    x = rand((3, 30), seed=4)
    for f in (lambda x: ss.lfilter(B, A, x), lambda x: ss.lfilter(B, A, x, axis=0),
              lambda x: ss.lfilter(B, A, x, zi=np.ones((3, 3)))[0],
              lambda x: ss.lfilter(B, A, x, zi=np.ones((3, 3)))[1],
              lambda x: ss.filtfilt(B, A, x), lambda x: ss.lfilter([1.0, 2.0], [3.0], x)):
        got = ha.jacobian(f, x, backend="numpy").value
        np.testing.assert_allclose(got, f(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(
        ha.jacobian(lambda a: ss.lfilter_zi(B, a), A, backend="numpy").value,
        ss.lfilter_zi(B, A), rtol=1e-13)


def test_a_long_signal_is_one_loop():
    """The recurrence is one loop whatever the length: the same traced nodes
    for 100 and 10^4 samples, and no allocation per call."""
    nodes = []
    for n in (100, 10_000):
        x = np.sin(np.arange(n) * 0.01)
        plan = ha.compile(lambda x: np.sum(ss.lfilter(B, A, x) ** 2), x)
        nodes.append(plan.build_times.nodes)
        res = plan.gradient(x)
        assert np.isclose(res.value, np.sum(ss.lfilter(B, A, x) ** 2), rtol=1e-12)
    assert nodes[0] == nodes[1]
    assert_no_alloc(plan.gradient, x, out=res, n=5)


def test_refusals():
    x = rand((20,), seed=5)
    with pytest.raises(NotImplementedError, match="gust"):
        ha.gradient(lambda x: np.sum(ss.filtfilt(B, A, x, method="gust")), x)
    with pytest.raises(ValueError, match="padlen"):
        ha.gradient(lambda x: np.sum(ss.filtfilt(B, A, x[:6])), x)
    with pytest.raises(ValueError, match="zi"):
        ha.gradient(lambda x: np.sum(ss.lfilter(B, A, x, zi=x[:2])[0]), x)
