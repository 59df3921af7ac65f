"""Plans pickle as recipes, and ``hybridad.dask.gradient_map`` maps batched
gradients over the chunks of a dask array on a local cluster of 2 worker
processes."""

import pickle

import numpy as np
import pytest

import hybridad as ha
from hybridad.optim import SGD

da = pytest.importorskip("dask.array")


def expsum(x, a):
    r = np.sum(np.exp(-a * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def test_plans_pickle_as_recipes():
    x = np.linspace(-1, 1, 30)
    plan = ha.compile(expsum, x, 3.0)
    again = pickle.loads(pickle.dumps(plan))
    assert again is not plan and pickle.loads(pickle.dumps(plan)) is again  # once per process
    np.testing.assert_array_equal(again.gradient(x * 0.5, 3.0).gradient,
                                  plan.gradient(x * 0.5, 3.0).gradient)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(ha.compile(lambda x: np.sum(x * x), x, update=SGD(0.1)))


def _loss_over(A):
    def loss(x):
        return np.sum((A @ x) ** 2)
    return loss


def test_closures_over_other_arrays_unpickle_as_their_own_plans():
    """Plans of one code closing over different arrays, shipped by cloudpickle
    (dask's): each comes back computing with its own array -- the rebuilt
    plans were cached by a fingerprint that saw an array's type only, and
    the second came back as the first.  The same plan twice is still rebuilt
    once."""
    cloudpickle = pytest.importorskip("cloudpickle")
    rng = np.random.default_rng(0)
    A1, A2 = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    x = rng.standard_normal(3)
    p1, p2 = ha.compile(_loss_over(A1), x), ha.compile(_loss_over(A2), x)
    q1, q2 = (cloudpickle.loads(cloudpickle.dumps(p)) for p in (p1, p2))
    assert q1 is not q2 and cloudpickle.loads(cloudpickle.dumps(p2)) is q2
    for q, A in ((q1, A1), (q2, A2)):
        np.testing.assert_allclose(q.gradient(x).gradient, 2 * A.T @ (A @ x), rtol=1e-13)


def test_gradient_map_errors():
    x = np.zeros(4)
    with pytest.raises(TypeError, match="dask array"):
        from hybridad.dask import gradient_map
        gradient_map(expsum, x, 3.0)
    with pytest.raises(ValueError, match="shape"):
        gradient_map(ha.compile(expsum, x, 3.0), da.zeros((6, 5), chunks=3), 3.0)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_gradient_map_on_two_worker_processes(client):
    from hybridad.dask import gradient_map

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (240, 3, 10))
    DX = da.from_array(X, chunks=(50, 3, 10))  # 5 blocks of rows, one of them short
    values, grads = gradient_map(expsum, DX, 3.0)
    v, g = client.compute([values, grads], sync=True)
    plan = ha.compile(expsum, X[0], 3.0)
    ref = plan.gradient_batch(X, 3.0)
    np.testing.assert_allclose(v, ref.value, rtol=1e-13)
    np.testing.assert_allclose(g, ref.derivs[0], rtol=1e-13)
    pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2


def test_gradient_map_of_functions_shipped_by_value(client):
    """A lambda, a closure and a plan of one travel by value (cloudpickle):
    on a worker process nothing but the plan holds the function, and it must
    (the plan held it weakly: 'no longer exists' on every block)."""
    from hybridad.dask import gradient_map

    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (120, 6))
    DX = da.from_array(X, chunks=(40, 6))
    scale = 1.5

    def closure(x):
        return scale * np.sum(np.tanh(x) ** 2)

    for f in (lambda x: np.sum(np.logaddexp(0.0, -x)), closure):
        values, grads = gradient_map(f, DX)
        v, g = client.compute([values, grads], sync=True)
        ref = ha.compile(f, X[0]).gradient_batch(X)
        np.testing.assert_allclose(v, ref.value, rtol=1e-13)
        np.testing.assert_allclose(g, ref.derivs[0], rtol=1e-13)
    plan = ha.compile(closure, X[0])
    values, grads = gradient_map(plan, DX)
    v, _ = client.compute([values, grads], sync=True)
    np.testing.assert_allclose(v, plan.gradient_batch(X).value, rtol=1e-13)


def _worker_plans():
    """On a worker: the plans unpickled there and the batch sizes each holds."""
    from hybridad.plans.pickling import _REBUILT

    return sorted((id(p), sorted(k for k in p._batch_plans), [id(b) for b in
                                                               p._batch_plans.values()])
                  for p in _REBUILT.values())


def test_each_worker_builds_its_plan_once_and_reuses_it(client):
    """Every task unpickles the plan's recipe; a worker builds the plan (and a
    batch plan per block size) on its first task and reuses them afterwards."""
    from hybridad.dask import gradient_map

    client.run(lambda: __import__("hybridad.plans.pickling").plans.pickling._REBUILT.clear())
    X = np.random.default_rng(2).uniform(-1, 1, (400, 8))
    DX = da.from_array(X, chunks=(50, 8))  # 8 blocks of 50 rows
    want = ha.compile(expsum, X[0], 2.0).gradient_batch(X, 2.0)
    first = None
    for _ in range(3):
        v, g = client.compute(list(gradient_map(expsum, DX, 2.0)), sync=True)
        np.testing.assert_allclose(g, want.derivs[0], rtol=1e-13)
        held = client.run(_worker_plans)
        assert all(len(plans) <= 1 for plans in held.values()), held  # one plan a worker
        assert all(sizes == [50] for plans in held.values() for _, sizes, _ in plans), held
        first = first or held
        for worker, plans in held.items():  # the same objects: nothing rebuilt
            assert plans == first[worker] or not first[worker], (first, held)
    assert any(held.values())
