"""Every elementwise op of the registry has a spelling in every backend that
prints kernels -- checked here on any machine (rendering only; nvcc and a GPU
compile and run the CUDA text in tests/test_cuda_source.py and test_gpu.py)."""

import numpy as np
import pytest

from hybridad.backends.cuda.source import CudaConstants
from hybridad.backends.scalar import Constants, render_region
from hybridad.core.trace import Trace, bind
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import derived
from hybridad.transforms.partition import Region

ELEMENTWISE = sorted(n for n, op in REGISTRY.items()
                     if op.kind == "elementwise" and op.dual is None)


def _one_node_region(name):
    op = REGISTRY[name]
    nin = op.ufunc.nin if op.ufunc is not None else {"where": 3, "cast": 1}.get(name, 2)
    tr = Trace()
    with tr:
        xs = [tr.input(k, (4,), np.dtype(np.float64)) for k in range(nin)]
        if name == "where":
            args = [bind("greater", xs[0], 0.0), xs[1], xs[2]]
        else:
            args = xs
        attrs = {"dtype": np.dtype(np.float32)} if name == "cast" else {}
        y = bind(name, *args, **attrs)
    inputs = [a.node for a in args]
    return Region([y.node], None, inputs)


@pytest.mark.parametrize("dialect", [Constants, CudaConstants], ids=["numba", "cuda"])
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_every_elementwise_op_renders_in_every_dialect(name, dialect):
    region = _one_node_region(name)
    rules = derived(REGISTRY[name])
    seeds = [k for k, n in enumerate(region.inputs) if n.dtype.kind == "f" and k in rules]
    sb = render_region(region, [f"in{k}" for k in range(len(region.inputs))], seeds,
                       dialect())
    assert sb.value and all(k in sb.partials for k in seeds)
    text = "\n".join(sb.lines)
    assert "np." not in text or dialect is Constants  # no Python spelling in CUDA


def test_the_table_covers_the_registry():
    assert {"exp", "where", "cast", "safe_multiply", "power", "maximum"} <= set(ELEMENTWISE)


def test_every_op_has_an_entry_in_every_backend():
    """Adding an op means saying how each backend runs it: numba's emitter table,
    the GPU backend's table (elementwise ops: their spelling, tested above), and
    the numpy reference's ``run``/``view`` on the op itself."""
    from hybridad.backends.cuda.program import DEVICE_OPS
    from hybridad.backends.numba.emit import EMITTERS

    missing = []
    for name, op in sorted(REGISTRY.items()):
        if op.kind == "elementwise":
            assert op.run is not None and op.partials is not None, name
            continue
        if op.kind == "composite":  # (lowered after tracing: never in a plan's graph)
            assert op.lower is not None and op.run is not None, name
            assert name not in EMITTERS and name not in DEVICE_OPS, name
            continue
        if name not in EMITTERS:
            missing.append(f"{name}: numba (backends/numba/emit.py EMITTERS)")
        if DEVICE_OPS.get(name) not in ("kernel", "cupy", "cublas", "cusolver", "cufft", "loop",
                                        "host", "unused"):
            missing.append(f"{name}: cupy (backends/cuda/program.py DEVICE_OPS)")
        if op.run is None and op.view is None and op.kind != "region":
            missing.append(f"{name}: numpy reference (Op.run / Op.view)")
    assert not missing, missing
    assert not set(EMITTERS) - set(REGISTRY), "an emitter for an op that does not exist"
    assert not set(DEVICE_OPS) - set(REGISTRY)


def test_op_facts_live_on_the_op():
    """What a pass needs to know of an elementwise op is declared with it."""
    expensive = {n for n, op in REGISTRY.items() if op.expensive}
    assert {"exp", "log", "sin", "power", "logaddexp"} <= expensive
    assert not expensive & {"add", "multiply", "negative", "maximum"}
    piecewise = {n for n, op in REGISTRY.items() if op.piecewise}
    assert {"absolute", "maximum", "remainder"} <= piecewise and "exp" not in piecewise
