"""The GPU backend (``backend="cupy"``): the planned graph as one generated
Python function over device arrays, fused regions as generated CUDA kernels.

It is the numpy reference program (:func:`.numpy_backend.compile_program`)
with a second array module and a second dialect, not a second design:

* every buffer is a view of one device arena per dtype (the memory plan's,
  allocated once with ``cupy``), inputs and results are the caller's device
  arrays;
* reverse nodes (matmul, reductions, indexing, shape ops) run their op's
  ``run`` on device arrays: numpy's functions with ``out=`` dispatch to
  cupy (``__array_function__`` / ``__array_ufunc__``), matmul to cuBLAS;
* a ``region`` node is a kernel of :mod:`.cuda` (``hybridad_<hash>``, one
  thread per element: the value and the dual-number partials its
  ``region_partial`` users read, or ``g * partial`` in the backward sweep),
  launched through a :class:`Launcher`; a fused reduction runs after it over
  a scratch slot of the arena: a float sum, max or min by the kernels of
  :mod:`.reduce` (as every float ``sum``, ``max`` and ``min`` node; other
  dtypes by ``xp.max(..., out=)``).  Each operand's
  strides are folded into the kernel as constants: views (transposes,
  strided slices, broadcasts) are read in place, never copied.

The launcher is the only part that needs a GPU: :class:`CupyLauncher`
compiles the kernels with cupy's ``RawKernel`` (NVRTC).  Tests on machines
without one run the same program with numpy arrays and a launcher that
builds the same CUDA source into a host library with nvcc
(``tests/test_cupy_program.py``).
"""

from __future__ import annotations

import threading

import numpy as np

from ...ops import REGISTRY
from ...ops.lapack_names import LAPACK_OPS
from ...transforms.memory import layout_proto
from .cublas_capture import eager_gemm
from .fft import DEVICE_FFT
from .linalg import DEVICE_LINALG, Preallocated, Workspace, matmul
from .products import captured_products, product_loop, product_value
from .reduce import sum_levels, sum_scratch, summable
from .source import PREAMBLE, region_kernel

__all__ = ["CupyLauncher", "Launcher", "RegionCalls", "cupy_available", "device_scratch",
           "scratch_for_cupy"]

#: op -> its device library run (cuSOLVER's linear algebra, cuFFT's transforms):
#: through :class:`.linalg.Preallocated`, no arena scratch
DEVICE_RUNS = {**DEVICE_LINALG, **DEVICE_FFT}


def cupy_available():
    """Whether cupy imports and sees a CUDA device (the reason when not)."""
    try:
        import cupy
    except ImportError as err:
        return False, f"cupy is not installed ({err}); pip install hybridad[gpu]"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # noqa: BLE001 - cupy raises its own CUDARuntimeError
        return False, f"no CUDA device ({err})"
    return (count > 0, f"{count} CUDA device(s)" if count else "no CUDA device")


#: op -> how the GPU backend runs it, for every op that is not elementwise (an
#: elementwise op is spelled inside a region kernel by :data:`.source.CUDA_FUNCS`):
#: ``"kernel"`` -- a generated CUDA kernel of this backend (regions, the
#: float sums, maxima and minima of :mod:`.reduce`; other dtypes as ``"cupy"``);
#: ``"cupy"`` -- the op's numpy ``run`` on device arrays, which numpy
#: dispatches to cupy (``__array_function__``/``__array_ufunc__``);
#: ``"cublas"`` -- the same, a cuBLAS call (cupy refuses cuBLAS while a stream
#: is captured: a CUDA graph runs it between the captured segments);
#: ``"cusolver"`` -- a LAPACK primitive's device run (:mod:`.linalg`: cupy.linalg,
#: cuSOLVER), a library call as ``"cublas"``;
#: ``"cufft"`` -- a Fourier transform's device run (:mod:`.fft`: cupy.fft, cuFFT),
#: a library call as ``"cublas"``;
#: ``"loop"`` -- a loop node: the host runs its iterations, each launching its
#: body's GPU program (:mod:`hybridad.backends.loops`);
#: ``"host"`` -- runs on host LAPACK only: refused by :func:`check_supported`;
#: ``"unused"`` -- never in a cupy graph (its pass is not in the cupy lowering).
DEVICE_OPS = {
    "region": "kernel", "region_partial": "kernel", "sum": "kernel", "max": "kernel",
    "min": "kernel",
    "region_acc": "unused",  # fold_accumulations: not in LOWERING["cupy"]
    "matvec_pair": "unused",  # pair_matvecs: not in LOWERING["cupy"]
    "matvec_two": "unused",
    "matmul": "cublas",  # a library call: outside CUDA graph captures (CudaGraphRunner)
    **dict.fromkeys(("prod", "zeros", "copy", "iadd", "concatenate",
                     "reshape", "transpose", "broadcast_to", "getitem", "gather", "scatter",
                     "scatter_add", "scatter_flat", "scatter_add_flat", "cumsum", "cumprod",
                     "cumprod_exclusive", "cumprod_adjoint", "sort_pack", "sort_values",
                     "sort_index"), "cupy"),
    **dict.fromkeys(LAPACK_OPS, "host"),
    **dict.fromkeys(DEVICE_LINALG, "cusolver"),  # numpy's functions on device arrays
    **dict.fromkeys(DEVICE_FFT, "cufft"),
    "host_ufunc": "host",  # a numpy/scipy ufunc on host arrays
    "host_call": "host",  # a numpy/scipy function on host arrays
    "ode": "host",  # scipy.integrate's solver (hybridad.ops.ode)
    "ode_adjoint": "host",
    "quad": "host",  # scipy.integrate.quad (hybridad.ops.quad)
    "root": "host",  # scipy.optimize's root finders (hybridad.ops.root)
    "loop": "loop",  # hybridad.fori_loop / scan, rolled loops
}


def check_supported(nodes):
    """Raise ``NotImplementedError`` naming the first op the GPU backend cannot run
    (an ``@elementwise`` function is refused where its kernel is printed:
    :meth:`.cuda.CudaConstants.kernel`)."""
    for n in nodes:
        if n.op not in REGISTRY:  # input, const
            continue
        how = "kernel" if REGISTRY[n.op].kind == "elementwise" else DEVICE_OPS.get(n.op)
        if how == "host" and n.op in ("ode", "ode_adjoint", "quad", "root"):
            raise NotImplementedError(
                "an ODE, an integral or a root computed by scipy (odeint, solve_ivp, quad, brentq, "
                "fsolve) "
                "runs on host arrays only; backend='cupy' cannot run it: use backend='numba'")
        if how == "host" and n.op in ("host_ufunc", "host_call"):
            name = n.attrs.get("ufunc") or n.attrs["func"]
            raise NotImplementedError(
                f"{name} (at {n.attrs['where']}) has no rules in hybridad and runs "
                "on host arrays only; backend='cupy' cannot run it: use backend='numba'")
        if how == "loop":  # (what its body runs, said as for the plan's own nodes)
            check_supported(n.attrs["body"].graph.nodes)
            continue
        if how == "host":
            raise NotImplementedError(
                f"{n.op} (linear algebra) is not implemented on backend='cupy' yet (hybridad "
                f"runs it through host LAPACK; on the GPU: {', '.join(sorted(DEVICE_LINALG))});"
                " use backend='numba'")
        if how not in ("kernel", "cupy", "cublas", "cusolver", "cufft", "loop"):
            raise NotImplementedError(f"backend='cupy' has no way to run op {n.op!r}")


def device_scratch(nodes, products=False):
    """node id -> (dtype, elements): the GPU program's working memory in its
    arena -- the ops' declared workspaces (:func:`hybridad.transforms.memory.op_workspaces`)
    but those of the device linear-algebra and FFT runs (:data:`.linalg.DEVICE_LINALG`,
    :data:`.fft.DEVICE_FFT`: cuSOLVER's, cuFFT's and cupy's allocations come from
    the program's own :class:`.linalg.Workspace`, the CPU kernels' scratch would
    sit unused), and :func:`scratch_for_cupy`'s."""
    from ...transforms.memory import op_workspaces

    scratch = op_workspaces(nodes)
    for n in nodes:
        if n.op in DEVICE_RUNS:
            scratch.pop(n.id, None)
    scratch.update(scratch_for_cupy(nodes, products))
    return scratch


def scratch_for_cupy(nodes, products=False):
    """node id -> (dtype, elements): a value region with a fused float sum,
    max or min, a vjp region with its sum, and a sum node, their partial sums
    (doubles); a value region with another reduction writes its elementwise
    values there before cupy reduces them.  ``products``: float matrix products run as sums
    (:mod:`.products`), their partial sums too."""
    out = {}
    for n in nodes:
        loop = product_loop(n) if products and n.op == "matmul" else None
        if loop is not None:
            out[n.id] = (np.dtype(np.float64),
                         max(sum_scratch(loop, (len(loop) - 1,), n.dtype), 1))
            continue
        if n.op == "region" and n.attrs.get("axis") is not None:  # a vjp region's sum
            out[n.id] = (np.dtype(np.float64), max(sum_scratch(
                n.attrs["body"].shape, n.attrs["axis"], n.dtype, "sum"), 1))
            continue
        if n.op == "region" and n.attrs["mode"] == "value" and \
                n.attrs["body"].reduction is not None:
            body = n.attrs["body"]
            dt = body.nodes[-1].dtype
            count = max(int(np.prod(body.shape)), 1)
            red = body.reduction
            if _kernel_reduction(red):  # values never stored: the partial sums alone
                count = max(sum_scratch(body.shape, red.attrs["axis"], dt, red.op), 1) * 8 \
                    // dt.itemsize
            out[n.id] = (dt, count)
        elif _kernel_reduction(n):
            out[n.id] = (np.dtype(np.float64),
                         max(sum_scratch(n.args[0].shape, n.attrs["axis"], n.dtype, n.op), 1))
    return out


def _kernel_reduction(node):
    """Whether ``node`` (a reduction) is a float sum, max or min the kernels of
    :mod:`.reduce` run (cupy's max and min with ``out=`` break in its CUB
    path, and cupy's sums are less accurate)."""
    return node.op in ("sum", "max", "min") and summable(node.dtype) and \
        node.args[0].dtype == node.dtype


class Launcher:
    """Turns :class:`~.cuda.RegionKernel` objects into callables
    ``launch(*arrays)`` (the kernel's pointer arguments, in order)."""

    def build(self, kernels):
        """Callables for ``kernels`` (a list), in order."""
        raise NotImplementedError


def module_source(kernels):
    """One CUDA translation unit for a program's kernels: :data:`.source.PREAMBLE`
    once, then each kernel's code once (a program may launch one twice)."""
    codes = {}
    for k in kernels:
        codes.setdefault(k.name, k.code)
    return "\n".join([PREAMBLE, *codes.values()]) + "\n"


class CupyLauncher(Launcher):
    """Compiles a program's kernels as one ``cupy.RawModule`` (one NVRTC
    compilation of :func:`module_source`, where a module per kernel parsed
    and compiled the preamble's device functions once per kernel: the first
    call's cost; cupy caches the binary on disk) and launches them with 256
    threads per block on the current stream.  The element count is a
    preallocated ``np.int64``."""

    threads = 256

    def build(self, kernels):
        import cupy

        if not kernels:
            return []
        module = cupy.RawModule(code=module_source(kernels), options=("-std=c++17",))
        calls = []
        for k in kernels:
            raw = module.get_function(k.name)
            grid = (max(1, -(-k.size // self.threads)),)
            block = (self.threads,)
            n = np.int64(k.size)

            def launch(*arrays, raw=raw, grid=grid, block=block, n=n):
                raw(grid, block, (*arrays, n))

            launch.kernel = k
            calls.append(launch)
        return calls


def _gemm_run(out, a, b):
    """A matrix product by cuBLAS on the current stream through hybridad's
    handle (the device linear algebra's :func:`.linalg.matmul`; a capture
    records it as a node of its graph: ``gemm``), or cupy's where one GEMM
    cannot compute it."""
    matmul(out, a, b)


_gemm_run.gemm = True


#: the capture under way in this thread (:class:`CudaGraphRunner`): its recorder
#: of library calls, or None
_CAPTURE = threading.local()


def run_library_call(fn, *args):
    """``_lib`` of a GPU program: the call, now -- or, while this thread
    captures a CUDA graph, handed to the capture's recorder (a loop body's
    program, which a plan's program calls per iteration, makes its library
    calls through here too)."""
    record = getattr(_CAPTURE, "record", None)
    if record is None:
        fn(*args)
    else:
        record(fn, *args)


class RegionCalls:
    """The region statements of one program: collects the kernels while the
    program is generated, then builds them all at once (:meth:`finish`)."""

    def __init__(self, launcher, memplan, buffers, xp, products=False):
        self.launcher = launcher
        self.memplan = memplan
        self.buffers = buffers
        self.xp = xp
        #: float matrix products as this backend's kernels (:mod:`.products`;
        #: the memory plan holds their partial sums: ``scratch_for_cupy``)
        self.products = products
        self.kernels = []
        self.names = []
        self.workspace = None  # the device linalg runs' buffer (.linalg.Workspace)

    def partial_users(self, node, nodes):
        """``{wrt: region_partial node}`` of a value region."""
        return {u.attrs["wrt"]: u for u in nodes
                if u.op == "region_partial" and u.args[0] is node}

    def statement(self, node, names, ns, target, protos, nodes):
        """Source of one region node -- its kernel launch (and reduction) --
        or of a float sum node, or of a matrix product (:meth:`handles`)."""
        if node.op == "matmul":  # the sum over k of the products, made as they are added
            loop = product_loop(node)
            value = product_value(node, [_element_strides(protos[a.id]) for a in node.args])
            return self._sum_lines(node.id, loop, None, (len(loop) - 1,), node.dtype,
                                   ", ".join(names[a.id] for a in node.args), target,
                                   self.memplan.scratch_view(node.id).view(np.float64), ns,
                                   "sum", fused=value)
        if node.op != "region":
            x = node.args[0]
            return self._sum_lines(node.id, x.shape, _element_strides(protos[x.id]),
                                   node.attrs["axis"], node.dtype, names[x.id], target,
                                   self.memplan.scratch_view(node.id), ns, node.op)
        body, mode = node.attrs["body"], node.attrs["mode"]
        operands = node.args
        literal = [a.is_literal and a.size == 1 for a in operands]
        strides = [None if lit else _element_strides(protos[a.id])
                   for a, lit in zip(operands, literal, strict=True)]
        args = [names[a.id] for a, lit in zip(operands, literal, strict=True) if not lit]
        k = len(self.kernels)
        if mode == "vjp" and node.attrs.get("axis") is not None:
            # its sum (region_sums.sum_into_vjp_regions): the sum's first level
            # evaluates each product as it adds it -- no temporary
            kernel = region_kernel(body, "vjp", operands, wrt=node.attrs["wrt"],
                                   cotangent=operands[-1].shape, strides=strides, fused=True)
            part = self.memplan.scratch_view(node.id).view(np.float64)
            return self._sum_lines(node.id, body.shape, None, node.attrs["axis"], node.dtype,
                                   ", ".join(args), target, part, ns, "sum", fused=kernel)
        if mode == "vjp":
            kernel = region_kernel(body, "vjp", operands, wrt=node.attrs["wrt"],
                                   cotangent=operands[-1].shape, strides=strides)
            args.append(target)
        else:
            partials = self.partial_users(node, nodes)
            seeds = tuple(sorted(partials))
            red = body.reduction
            fused = red is not None and _kernel_reduction(red)
            kernel = region_kernel(body, "value", operands, seeds=seeds, strides=strides,
                                   fused=fused)
            if red is None:
                args.append(target)
            elif not fused:
                size = int(np.prod(body.shape))
                ns[f"_scr{node.id}"] = \
                    self.memplan.scratch_view(node.id)[:size].reshape(body.shape)
                args.append(f"_scr{node.id}")
            for w in seeds:
                pid = partials[w].id
                if pid in names:  # a caller's output buffer (named before the program)
                    args.append(names[pid])
                    continue
                ns[f"b{pid}"] = self.buffers[pid]
                args.append(f"b{pid}")
        red = body.reduction if mode == "value" else None
        if red is not None and _kernel_reduction(red):
            # the reduction's first level computes the region's elements as it
            # adds them (and stores their partials): no values in memory
            part = self.memplan.scratch_view(node.id).view(np.float64)
            return self._sum_lines(node.id, body.shape, None, red.attrs["axis"],
                                   body.nodes[-1].dtype, ", ".join(args), target, part, ns,
                                   red.op, fused=kernel)
        self.kernels.append(kernel)
        lines = [f"_rk{k}({', '.join(args)})"]
        if red is not None:
            axes = tuple(red.attrs["axis"])
            keep = tuple(1 if i in axes else s for i, s in enumerate(body.shape))
            ns[f"_red{node.id}"] = getattr(self.xp, red.op)
            lines.append(f"_red{node.id}(_scr{node.id}, axis={axes!r}, keepdims=True, "
                         f"out={target}.reshape({keep!r}))")
        return lines

    def handles(self, node):
        """Whether :meth:`statement` runs ``node`` (regions, float sums, and
        float matrix products where :attr:`products`)."""
        return node.op == "region" or _kernel_reduction(node) or \
            self.products and node.op == "matmul" and product_loop(node) is not None

    @staticmethod
    def library_call(node):
        """Whether ``node`` is a library call cupy refuses inside a stream
        capture (cuBLAS, cuSOLVER): the program makes it through ``_lib(fn,
        *args)``, which :class:`CudaGraphRunner` records between captured
        segments."""
        return DEVICE_OPS.get(node.op) in ("cublas", "cusolver", "cufft")

    def run_of(self, node):
        """This backend's own run of ``node``'s op, or None (the op's ``run``):
        a device linalg or FFT run, with its allocations preallocated after its
        first call (:class:`.linalg.Preallocated`, one per node; their buffer the
        program's :class:`.linalg.Workspace`)."""
        if node.op == "matmul":  # (cupy's matmul where GEMMs are not captured)
            return _gemm_run if captured_products() else None
        run = DEVICE_RUNS.get(node.op)
        if run is None:
            return None
        if self.workspace is None:  # (one for the program's linear algebra)
            self.workspace = Workspace(self.xp)
        return Preallocated(run, self.xp, self.workspace)

    run_library_call = staticmethod(run_library_call)

    def _sum_lines(self, nid, shape, strides, axis, dtype, source, target, scratch, ns,
                   op="sum", fused=None):
        """Launches summing ``source`` (an operand of ``shape``, element
        ``strides``; with ``fused``, the arguments of that region's value
        function) over ``axis`` into ``target``, partial sums in ``scratch``
        (a float64 view, bound here)."""
        lines = []
        for j, level in enumerate(sum_levels(shape, strides, axis, dtype, op, fused)):
            args = []
            for role, where in (("x", level.source), ("y", level.dest)):
                if where is None:
                    args.append(source if role == "x" else target)
                    continue
                off, count = where
                ns[f"_{role}{nid}_{j}"] = scratch[off:off + count]
                args.append(f"_{role}{nid}_{j}")
                if dtype == np.float64 and op == "sum":  # the errors follow the sums
                    ns[f"_{role}c{nid}_{j}"] = scratch[off + count:off + 2 * count]
                    args.append(f"_{role}c{nid}_{j}")
            lines.append(f"_rk{len(self.kernels)}({', '.join(args)})")
            self.kernels.append(level.kernel)
        return lines

    def finish(self, ns):
        """Build the kernels; bind them as ``_rk<k>`` in ``ns``."""
        for k, call in enumerate(self.launcher.build(self.kernels)):
            ns[f"_rk{k}"] = call


def _element_strides(array):
    item = array.dtype.itemsize
    if any(s % item for s in array.strides):
        raise NotImplementedError("an unaligned view cannot be read by a region kernel")
    return tuple(s // item for s in array.strides)


def region_protos(node, protos, static_array=None):
    """Record the strides prototype of ``node`` (an array, or a zero-memory
    array with its strides) in ``protos``."""
    if static_array is not None:
        protos[node.id] = static_array
    elif node.op == "input":
        protos[node.id] = layout_proto(node)
    elif node.args and REGISTRY.get(node.op) is not None and REGISTRY[node.op].kind == "view":
        protos[node.id] = REGISTRY[node.op].view(protos[node.args[0].id], **node.attrs)
    else:
        protos[node.id] = layout_proto(node)


def device():
    """``(cupy, CupyLauncher())`` for a plan with ``backend="cupy"``; raises
    ``RuntimeError`` saying why when cupy or a GPU is missing."""
    ok, why = cupy_available()
    if not ok:
        raise RuntimeError(f"backend='cupy' needs cupy and a CUDA GPU: {why}")
    import cupy

    return cupy, CupyLauncher()


class CudaGraphRunner:
    """A GPU plan's calls as CUDA graphs: a call with the same arrays as the
    captured ones -- the same device pointers and strides, as in a loop that
    updates ``x`` in place -- replays the graph: one launch per segment
    instead of one per kernel.

    ``compile(..., cuda_graph=True)`` captures at the first call, and anew
    for new arrays.  By default (``cuda_graph=None``, ``auto``) a plan runs
    its program eagerly and captures once the same arrays come back a second
    time in a row -- a loop over the same buffers replays from its third
    call, and calls with new arrays each time never capture -- only while
    the current stream is the default one (a replay orders with it), and
    never again after a capture failed (a step that reads a value on the
    host cannot be captured).  A capture first runs the program eagerly on
    the capture stream (that call's result; cuBLAS picks and loads its
    kernels outside the capture), then records it.

    cupy refuses cuBLAS calls while a stream is captured: the program's
    matrix products go through cuBLAS handles of hybridad's own
    (:func:`.cublas_capture.eager_gemm`, the same in and out of graphs, so
    a product has the same bits replayed or not), which the capture records
    as nodes of the graph -- a step with products is one graph (where no
    cuBLAS is found, a ``cuda_graph=True`` plan computes them with kernels of
    its own, :mod:`.products`).  Where a program still makes library calls
    (cuSOLVER; a product one GEMM cannot compute, of several batch axes or
    integers; every product under ``HYBRIDAD_CUDA_PRODUCTS=segments``) it
    is captured in segments: each library call (the program's ``_lib(fn,
    *args)``) ends the segment before it and is recorded with its arguments
    (arena views and the caller's arrays: the same pointers at every
    replay); a replay launches graph, call, graph, ... in order on the
    capture stream.  The stream is a blocking one, so it orders with work on
    the default stream."""

    def __init__(self, fn, auto=False):
        self.fn, self.auto = fn, auto
        self.key = self.steps = self.stream = None
        self.seen = None  # auto: the arrays of the last eager call
        self.failed = False  # auto: a capture failed; eager from then on

    @property
    def segments(self):
        """How many graphs a replay launches (library calls between them)."""
        return sum(1 for kind, _ in self.steps or () if kind == "graph")

    @staticmethod
    def _key(arrays):
        return tuple((a.data.ptr, a.strides) for a in arrays)

    def __call__(self, *arrays):
        key = self._key(arrays)
        if key == self.key:
            self.seen = key  # (arrays alternating with the graph's never capture)
            with self.stream:
                for kind, step in self.steps:
                    if kind == "graph":
                        step.launch(stream=self.stream)
                    else:
                        fn, args = step
                        fn(*args)
            return
        if self.auto and (self.failed or key != self.seen or not _default_stream()):
            self.seen = key
            self.fn(*arrays)
            return
        self.seen = key
        self._capture(arrays, key)

    def _capture(self, arrays, key):
        import cupy

        stream = self.stream = self.stream or cupy.cuda.Stream()
        with stream:  # this call's result; cuBLAS's kernels picked and loaded
            self.fn(*arrays)
        steps = []

        def record(fn, *args):
            if getattr(getattr(fn, "func", fn), "gemm", False) and eager_gemm(*args):
                return  # a cuBLAS GEMM, enqueued on the capture stream: a node of the graph
            steps.append(("graph", stream.end_capture()))
            steps.append(("call", (fn, args)))
            stream.begin_capture()

        with stream:
            _CAPTURE.record = record
            stream.begin_capture()
            try:
                self.fn(*arrays)
            except BaseException:
                _CAPTURE.record = None
                try:
                    stream.end_capture()
                except Exception:  # noqa: BLE001, S110 -- (an invalidated capture)
                    pass
                if not self.auto:
                    raise
                self.failed, self.key, self.steps = True, None, None
                return  # (this call's result is the eager run's)
            _CAPTURE.record = None
            steps.append(("graph", stream.end_capture()))
        self.steps, self.key = steps, key


def _default_stream():
    """Whether cupy's current stream is the legacy default stream (a replay on
    the blocking capture stream orders with it)."""
    import cupy

    return cupy.cuda.get_current_stream().ptr == 0
