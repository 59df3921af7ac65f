"""NVRTC -- the compiler cupy launches kernels through -- compiles every CUDA
kernel hybridad generates, where cupy and libnvrtc are installed (the
``test-gpu`` extra); no GPU and no nvcc needed.  Running the kernels on the
host (``test_cuda_source.py``, ``test_cupy_program.py``) needs nvcc besides.
"""

import numpy as np
import pytest
from conftest import rand
from cuda_host import NVRTC, nvrtc_compile
from test_coverage import CASES
from test_cuda_source import op_kernels

import hybridad as ha
from hybridad.backends.cuda import program as cupy_backend

pytestmark = pytest.mark.skipif(NVRTC is None, reason="cupy with NVRTC is not installed "
                                "(pip install hybridad[test-gpu])")


class CompileOnly(cupy_backend.Launcher):
    """Compiles a program's exact translation unit with NVRTC, as
    ``CupyLauncher``'s ``cupy.RawModule`` would (one per program: its kernels
    together); its launches refuse to run (no device)."""

    def __init__(self):
        self.compiled = []

    def build(self, kernels):
        calls = []
        ptx = nvrtc_compile(cupy_backend.module_source(kernels), "module.cu") if kernels else ""
        for k in kernels:
            assert f".entry {k.name}(" in ptx
            self.compiled.append(k.name)

            def launch(*arrays, k=k):
                raise AssertionError(f"{k.name} launched without a device")

            calls.append(launch)
        return calls


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_op_kernel_compiles(dtype):
    # exactly the translation units CupyLauncher hands cupy.RawKernel (no host headers)
    cases, _ = op_kernels(dtype)
    ptx = nvrtc_compile(cupy_backend.module_source([k for k, _, _ in cases]), "ops.cu")
    for kernel, _, _ in cases:
        assert f".entry {kernel.name}(" in ptx


def mlp(W1, b1, W2, X, Y):
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 - Y) ** 2)


PLANS = {
    "exp_sum": (lambda x: np.sum(np.exp(-3 * (x + 1))) ** 2, lambda: (rand((50,)),), {}),
    "mlp": (mlp, lambda: (rand((1, 8)), rand((8,)), rand((8, 1)), rand((30, 1)),
                          rand((30, 1), seed=3)), {"argnums": (0, 1, 2)}),
    "axis_reductions": (lambda x: np.sum(np.max(np.tanh(x), axis=0) ** 2)
                        + np.sum(np.sum(np.exp(x), axis=1, keepdims=True) * x),
                        lambda: (rand((4, 5)),), {}),
    # every coverage case (np.linalg's too: they run on the GPU program)
    **{f"coverage:{name}": (CASES[name], lambda name=name: (rand((4, 5), seed=sum(map(
        ord, name))),), {}) for name in CASES},
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_kernels_compile(name, monkeypatch):
    launcher = CompileOnly()
    monkeypatch.setattr(cupy_backend, "device", lambda: (np, launcher))
    f, make, options = PLANS[name]
    ha.compile(f, *make(), backend="cupy", **options)
    assert launcher.compiled, "the plan built no kernel"


def test_the_device_linear_algebra_s_own_kernels_compile():
    # (cholesky's reverse rule keeps triangles in place: backends/cuda/linalg.py)
    from hybridad.backends.cuda.linalg import KEEP_LOWER_SOURCE

    ptx = nvrtc_compile(KEEP_LOWER_SOURCE, "keep_lower.cu")
    assert ".entry hybridad_keep_lower_double(" in ptx and \
        ".entry hybridad_keep_lower_float(" in ptx
