"""Running generated CUDA on the CPU, for tests on machines without a GPU.

Every region kernel's per-element function is ``__host__ __device__``
(:mod:`hybridad.backends.cuda.source`), so the very source a GPU would run
builds into a host program or shared library; nvcc compiles its device code
for sm_90 too, so it is compile-checked at the same time.  nvcc compiles with
the host's headers, NVRTC (what cupy launches through) without them: where
cupy and libnvrtc load (no GPU needed), :class:`HostLauncher` also hands each
kernel's exact source to NVRTC, as ``cupy.RawKernel`` would.

:class:`HostLauncher` builds a program's library in two parts, as nvcc's one
build took 0.75 s of fixed cost (CUDA's headers parsed twice, host stubs, a
device link), most of the suite's time spent on generated CUDA: the host
library by the host's C++ compiler, CUDA's keywords defined away
(:data:`HOST_PRELUDE`; nvcc's own build where that fails: a function only
CUDA's math library has on the host, such as ``normcdfinv``), and the same
source compiled for the device by nvcc (``-cubin``, sm_90) beside it.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

from hybridad.backends.cuda.program import Launcher, module_source

NVCC = shutil.which("nvcc")
NVCC_FLAGS = ["-arch=sm_90", "-std=c++17", "-O1", "-w"]


def nvcc_build(source, out, shared=False):
    """Build ``source`` with nvcc into ``out`` (an executable or a shared library)."""
    path = f"{out}.cu"
    with open(path, "w") as fh:
        fh.write(source)
    extra = ["-shared", "-Xcompiler", "-fPIC"] if shared else []
    build = subprocess.run([NVCC, *NVCC_FLAGS, *extra, "-o", out, path], capture_output=True,
                           text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]


#: CUDA's keywords for the host's C++ compiler: what a kernel's element function
#: and the module's helpers are, host code; the kernels (which the host library
#: never calls) read the built-in indices of a grid of one thread
HOST_PRELUDE = """
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
struct hd_dim3_host_ { unsigned x, y, z; };
static const hd_dim3_host_ blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0};
"""
CXX = shutil.which("g++") or shutil.which("c++")


def host_library(source, out):
    """Build ``source`` into the shared library ``out`` for the host: with the
    host's C++ compiler (:data:`HOST_PRELUDE` first) while nvcc compiles it
    for the device (sm_90: the compile check nvcc's own build made), or with
    nvcc's own build where the host compiler refuses it."""
    path = f"{out}.cu"
    with open(path, "w") as fh:
        fh.write(source)
    device = subprocess.Popen([NVCC, *NVCC_FLAGS, "-cubin", "-o", f"{out}.cubin", path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        host = None
        if CXX is not None:
            with open(f"{out}.cpp", "w") as fh:
                fh.write(HOST_PRELUDE + source)
            host = subprocess.run([CXX, "-std=c++17", "-O1", "-w", "-shared", "-fPIC", "-o", out,
                                   f"{out}.cpp"], capture_output=True, text=True, timeout=600)
        _, err = device.communicate(timeout=600)
    finally:
        if device.poll() is None:
            device.kill()
    assert device.returncode == 0, err[-4000:]
    if host is None or host.returncode:
        nvcc_build(source, out, shared=True)


def _nvrtc_program():
    """cupy's NVRTC program class when cupy and libnvrtc load (no GPU needed), else None."""
    try:
        from cupy.cuda import compiler

        compiler._NVRTCProgram('extern "C" __global__ void k() {}', "k.cu").compile(
            ("--gpu-architecture=compute_90",))
        return compiler._NVRTCProgram
    except Exception:  # noqa: BLE001 - no cupy, or no libnvrtc (pip install nvidia-cuda-nvrtc)
        return None


NVRTC = _nvrtc_program()


def nvrtc_compile(source, name="k.cu"):
    """PTX of ``source`` compiled by NVRTC as ``CupyLauncher`` has cupy do it."""
    ptx, _ = NVRTC(source, name).compile(("-std=c++17", "--gpu-architecture=compute_90"))
    return ptx.decode() if isinstance(ptx, bytes) else ptx


class HostLauncher(Launcher):
    """Builds a program's kernels into one host library (:func:`host_library`,
    cached by content) and calls each kernel's element function over its loop."""

    def __init__(self, directory=None):
        if directory is None:  # libraries keyed by their source's hash: reused across runs
            from hybridad.backends.numba.cache import cache_dir

            directory = os.path.join(cache_dir(), "cuda-host")
            os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.built = []

    def build(self, kernels):
        if not kernels:
            return []
        wrappers = []
        for k in kernels:
            params = [f"void* a{j}" for j in range(len(k.params) - 1)]
            types = _param_types(k)
            casts = [f"({t})a{j}" for j, t in enumerate(types)]
            wrappers.append(
                f'extern "C" void host_{k.name}({", ".join(params)}, long long n) {{\n'
                f"  for (long long i = 0; i < n; ++i) {k.name}_::element(i, {', '.join(casts)});"
                "\n}")
        # (the translation unit CupyLauncher has NVRTC compile, and the host wrappers)
        module = module_source(kernels)
        source = module + "\n".join(dict.fromkeys(wrappers)) + "\n"
        digest = hashlib.sha256(source.encode()).hexdigest()[:20]
        lib = os.path.join(self.directory, f"k{digest}.so")
        if not os.path.exists(lib):
            tmp = tempfile.mkdtemp(dir=self.directory)  # built aside, then moved in place
            host_library(source, os.path.join(tmp, "k.so"))
            os.replace(os.path.join(tmp, "k.so"), lib)
            shutil.rmtree(tmp, ignore_errors=True)
        if NVRTC is not None:  # the program's module, as cupy compiles it
            mark = os.path.join(self.directory, "nvrtc-" + hashlib.sha256(
                module.encode()).hexdigest()[:20])
            if not os.path.exists(mark):
                ptx = nvrtc_compile(module, "module.cu")
                assert all(f".entry {k.name}(" in ptx for k in kernels)
                open(mark, "w").close()
        dll = ctypes.CDLL(lib)
        self.built.append(source)
        calls = []
        for k in kernels:
            fn = getattr(dll, f"host_{k.name}")
            fn.restype = None
            n = ctypes.c_longlong(k.size)

            def launch(*arrays, fn=fn, n=n):
                fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays], n)

            launch.kernel = k
            calls.append(launch)
        return calls


def _param_types(kernel):
    """The C pointer types of a kernel's array parameters, from its code."""
    head = kernel.code.split(f"void {kernel.name}(", 1)[1].split(")", 1)[0]
    out = []
    for param in head.split(", ")[:-1]:
        out.append(param.rsplit(" ", 1)[0].replace(" __restrict__", ""))
    return out
