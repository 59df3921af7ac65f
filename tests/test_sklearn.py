"""scikit-learn's losses as shipped, traced and differentiated by hybridad:
``HuberRegressor``'s ``_huber_loss_and_gradient`` (its outliers a mask computed
from the values: a numpy array indexed by it, a guarded decision) and
``MLPClassifier``'s forward pass (every activation in place) with its log
loss.  The gradients equal scikit-learn's hand-written ones, on points where
the outliers differ too (another specialization).  ``benchmarks/bench_sklearn.py``
times them."""

import types
import warnings

import numpy as np
import pytest

import hybridad as ha

pytest.importorskip("sklearn")


def test_huber_loss_as_shipped():
    from sklearn.linear_model._huber import _huber_loss_and_gradient

    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 5))
    y = X @ rng.standard_normal(5) + rng.standard_normal(300) * np.where(
        rng.uniform(size=300) < 0.1, 8.0, 1.0)
    sw = rng.uniform(0.5, 1.5, 300)

    def loss(w):
        return _huber_loss_and_gradient(w, X, y, 1.35, 1e-3, sw)[0]

    plan = ha.compile(loss, np.ones(7), backend="numpy")  # (the benchmark runs numba)
    for k in range(3):  # other points: other outliers, the plan specializes again
        w = np.concatenate([rng.standard_normal(5) * (k + 1), [0.1 * k, 1.0 + k]])
        with warnings.catch_warnings():  # (it says so after a few: RetraceWarning)
            warnings.simplefilter("ignore", ha.RetraceWarning)
            res = plan.gradient(w)
        value, grad = _huber_loss_and_gradient(w, X, y, 1.35, 1e-3, sw)
        assert float(res.value) == pytest.approx(value, rel=1e-13)
        np.testing.assert_allclose(res.gradient, grad, rtol=1e-12, atol=1e-12)


def test_mlp_forward_pass_as_shipped():
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.neural_network import _multilayer_perceptron as mod
    from sklearn.neural_network._base import LOSS_FUNCTIONS

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    labels = rng.integers(0, 3, 40)
    for activation in ("relu", "tanh", "logistic"):
        model = MLPClassifier(hidden_layer_sizes=(8, 7), activation=activation, max_iter=2,
                              alpha=1e-3, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, labels)
        Y = model._label_binarizer.transform(labels).astype(np.float64)
        L = len(model.coefs_)

        def loss(*params, model=model, Y=Y, L=L):
            net = types.SimpleNamespace(n_layers_=model.n_layers_,
                                        activation=model.activation,
                                        out_activation_=model.out_activation_,
                                        coefs_=list(params[:L]), intercepts_=list(params[L:]))
            acts = mod.BaseMultilayerPerceptron._forward_pass(net, [X] + [None] * L)
            values = sum(np.dot(s.ravel(), s.ravel()) for s in net.coefs_)
            return LOSS_FUNCTIONS["log_loss"](Y, acts[-1]) + \
                (0.5 * model.alpha) * values / X.shape[0]

        params = [*model.coefs_, *model.intercepts_]
        res = ha.gradient(loss, *params, argnums=tuple(range(len(params))), backend="numpy")
        value, cg, ig = model._backprop(X, Y, None, [X] + [None] * L, [None] * L,
                                        [np.empty_like(c) for c in model.coefs_],
                                        [np.empty_like(b) for b in model.intercepts_])
        assert float(res.value) == pytest.approx(value, rel=1e-13)
        for got, want in zip(res.gradient, [*cg, *ig], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
