"""When a GPU plan captures and replays CUDA graphs (CudaGraphRunner in
hybridad/backends/cuda/program.py), without a GPU: a stand-in for cupy's
streams and graphs counts what runs eagerly, what is captured and what is
replayed.  test_gpu.py checks the values on a device."""

import sys
import types

import pytest

from hybridad.backends.cuda import program
from hybridad.backends.cuda.program import CudaGraphRunner


class FakeStream:
    ptr = 7

    def __init__(self, log, current):
        self.log, self.current, self.capturing = log, current, False

    def __enter__(self):
        self.current.append(self)
        return self

    def __exit__(self, *exc):
        self.current.pop()

    def begin_capture(self):
        self.capturing = True
        self.log.append("begin")

    def end_capture(self):
        self.capturing = False
        self.log.append("end")
        log = self.log
        return types.SimpleNamespace(launch=lambda stream: log.append("launch"))


@pytest.fixture
def cupy(monkeypatch):
    log, current = [], []
    default = types.SimpleNamespace(ptr=0)
    cuda = types.SimpleNamespace(
        Stream=lambda: FakeStream(log, current),
        get_current_stream=lambda: current[-1] if current else default)
    fake = types.SimpleNamespace(cuda=cuda, log=log, default=default)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def arrays(*ptrs):
    return [types.SimpleNamespace(data=types.SimpleNamespace(ptr=p), strides=(8,))
            for p in ptrs]


def program_fn(cupy, fail_when_captured=False, library_call=None):
    def fn(*arrays):
        stream = cupy.cuda.get_current_stream()
        capturing = getattr(stream, "capturing", False)
        cupy.log.append("captured" if capturing else "eager")
        if library_call is not None:
            program.run_library_call(library_call, *arrays)
        if capturing and fail_when_captured:
            raise RuntimeError("a value read on the host")
    return fn


def test_auto_captures_once_the_same_arrays_come_back(cupy):
    runner = CudaGraphRunner(program_fn(cupy), auto=True)
    x, y = arrays(1, 2), arrays(3, 4)
    runner(*x)
    assert cupy.log == ["eager"]
    runner(*y)  # new arrays: eager again
    runner(*y)  # the same twice in a row: run (this call's result), then captured
    assert cupy.log == ["eager", "eager", "eager", "begin", "captured", "end"]
    del cupy.log[:]
    runner(*y)
    runner(*y)
    assert cupy.log == ["launch", "launch"]  # replayed
    del cupy.log[:]
    runner(*x)  # other arrays: eager, the graph kept for y
    runner(*y)
    assert cupy.log == ["eager", "launch"]
    moved = arrays(3, 4)
    moved[0].strides = (16,)  # the same pointer, another layout: not the graph's
    runner(*moved)
    assert cupy.log[-1] == "eager"
    del cupy.log[:]
    for _ in range(3):  # other arrays alternating with the graph's: never captured
        runner(*x)
        runner(*y)
    assert cupy.log == ["eager", "launch"] * 3


def test_explicit_graphs_capture_at_the_first_call(cupy):
    runner = CudaGraphRunner(program_fn(cupy), auto=False)
    x = arrays(1, 2)
    runner(*x)
    runner(*x)
    assert cupy.log == ["eager", "begin", "captured", "end", "launch"]


def test_auto_is_eager_off_the_default_stream(cupy):
    runner = CudaGraphRunner(program_fn(cupy), auto=True)
    x = arrays(1, 2)
    with FakeStream(cupy.log, []) as other:  # (a stream of the caller's)
        cupy.cuda.get_current_stream = lambda: other
        for _ in range(4):
            runner(*x)
    assert cupy.log == ["eager"] * 4


def test_a_failed_capture_leaves_auto_plans_eager(cupy):
    runner = CudaGraphRunner(program_fn(cupy, fail_when_captured=True), auto=True)
    x = arrays(1, 2)
    for _ in range(4):
        runner(*x)
    assert cupy.log == ["eager", "eager", "begin", "captured", "end", "eager", "eager"]
    assert runner.failed and runner.steps is None
    explicit = CudaGraphRunner(program_fn(cupy, fail_when_captured=True), auto=False)
    with pytest.raises(RuntimeError, match="on the host"):
        explicit(*x)


def test_library_calls_cut_the_graph_into_segments(cupy):
    def library(*arrays):  # (cuSOLVER, say: not capturable)
        cupy.log.append(f"library of {len(arrays)}")

    runner = CudaGraphRunner(program_fn(cupy, library_call=library), auto=False)
    x = arrays(1, 2)
    runner(*x)  # run once, then recorded between two graphs
    assert cupy.log == ["eager", "library of 2", "begin", "captured", "end", "begin", "end"]
    assert runner.segments == 2
    del cupy.log[:]
    runner(*x)
    assert cupy.log == ["launch", "library of 2", "launch"]
