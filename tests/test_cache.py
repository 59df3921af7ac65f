"""The disk cache (hybridad.backends.numba.cache): private, verified before anything
in it runs, rebuilt when damaged; compiled code shared by content (no leak)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from importlib._bootstrap_external import _code_to_timestamp_pyc

import numpy as np
import pytest

import hybridad as ha
from hybridad import _sources as sources
from hybridad.__main__ import main
from hybridad.backends.numba import cache

ROOT = os.geteuid() == 0
SRC = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x * 3.0 + 1.0\n"
LOAD = """
import sys, warnings
warnings.simplefilter("always")
from hybridad.backends.numba import cache
f = cache.load_function(sys.argv[1], "f")
print(f(2.0), sum(f.stats.cache_hits.values()))
"""


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """A fresh, private HYBRIDAD_CACHE_DIR for this test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDAD_CACHE_DIR", str(path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)  # numba's files beside ours
    return path


def _run(script, path, *args):
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(path))
    env.pop("NUMBA_CACHE_DIR", None)  # (numba's files beside ours, where the tests look)
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split(), out.stderr


def _cache_warnings(record):
    return [str(w.message) for w in record if "hybridad cache" in str(w.message)]


# -- damaged entries: discarded with a warning, rebuilt; a later process survives ---------
@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache holding SRC and numba's index and data of ``f`` (one earlier process)."""
    path = tmp_path_factory.mktemp("warm") / "cache"
    assert _run(LOAD, path, SRC)[0] == ["7.0", "0"]
    return path


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif how == "flip":
        flipped = bytearray(data)
        for i in range(len(data) // 3, len(data), max(1, len(data) // 7)):
            flipped[i] ^= 0xA5
        path.write_bytes(bytes(flipped))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "non_utf8":
        path.write_bytes(b"\xff\xfe\x80" + data)
    elif how == "shared":  # writable by others: not trusted
        os.chmod(path, 0o666)
    elif how == "unreadable":
        os.chmod(path, 0)


DAMAGES = ["truncate", "flip", "empty", "shared",
           pytest.param("unreadable", marks=pytest.mark.skipif(ROOT, reason="root reads all"))]
CASES = [("py", "non_utf8")] + [
    pytest.param(kind, *how.values, marks=how.marks) if hasattr(how, "values") else (kind, how)
    for kind in ("py", "nbi", "nbc") for how in DAMAGES]


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_damaged_entry_is_discarded_and_rebuilt(warm, tmp_path, kind, how):
    path = tmp_path / "cache"
    shutil.copytree(warm, path)  # modes and mtimes kept (numba's source stamp)
    targets = list(path.rglob(f"*.{kind}"))
    assert targets
    for target in targets:
        _damage(target, how)
    out, err = _run(LOAD, path, SRC)
    assert out[0] == "7.0"
    assert "hybridad cache: discarded" in err, err
    # rebuilt: verified files, which the next process uses without a warning
    (py,) = path.glob("*.py")
    assert py.read_bytes() == SRC.encode()
    for name in (path / "__pycache__").iterdir():
        cache._VerifiedCacheFile._read(str(name))
    if how == "flip":
        out, err = _run(LOAD, path, SRC)
        assert out == ["7.0", "1"] and "hybridad cache:" not in err


LOAD_FAILING = """
import sys, warnings
warnings.simplefilter("always")
from numba.core import caching
from hybridad.backends.numba import cache


def fails(self, *args, **kwargs):  # as in a child forked while numba was half imported
    raise ImportError("cannot import name 'x' from partially initialized module "
                      "'numba.cpython.charseq' (most likely due to a circular import)")


caching.FunctionCache._load_overload = fails  # (the load hybridad makes: see cache.py)
f = cache.load_function(sys.argv[1], "f")
print(f(2.0), sum(f.stats.cache_hits.values()))
"""


def test_a_valid_entry_is_never_deleted_for_the_process_s_own_trouble(warm, tmp_path):
    """A verified entry that this process fails to load (an ImportError: a
    module half imported by a thread a fork left behind) is recompiled, and
    the compile's save replaces it: no file of it is deleted, and the next
    process loads it."""
    path = tmp_path / "cache"
    shutil.copytree(warm, path)
    before = sorted(p.name for p in (path / "__pycache__").iterdir())
    out, err = _run(LOAD_FAILING, path, SRC)
    assert out[0] == "7.0"
    assert "could not load the numba cache" in err and "discarded" not in err, err
    assert sorted(p.name for p in (path / "__pycache__").iterdir()) == before
    for name in (path / "__pycache__").iterdir():
        cache._VerifiedCacheFile._read(str(name))  # still verified entries
    out, err = _run(LOAD, path, SRC)
    assert out == ["7.0", "1"] and "hybridad cache:" not in err


PLAN = """
import sys, warnings
import numpy as np
import hybridad as ha
warnings.simplefilter("always")
res = ha.gradient(lambda x: np.sum(np.exp(x) * x), np.linspace(0.0, 1.0, 5))
print(float(res.value), float(res.gradient[2]))
"""


@pytest.mark.parametrize("how", ["garbage", pytest.param("fifo", marks=pytest.mark.skipif(
    not hasattr(os, "mkfifo"), reason="no FIFOs here"))])
@pytest.mark.parametrize("jit", ["1", "0"], ids=["hybridad", "numba"])
def test_later_process_survives_a_garbage_plan_cache(tmp_path, monkeypatch, jit, how):
    """Every file of the cache overwritten with garbage, or replaced by a
    FIFO (whose open waited for a writer: the process hung): the next
    process discards them and compiles again -- hybridad's compiler's object
    code (the default) and numba's cache (``HYBRIDAD_JIT=0``)."""
    monkeypatch.setenv("HYBRIDAD_JIT", jit)
    path = tmp_path / "cache"
    first, err = _run(PLAN, path)
    assert "hybridad cache:" not in err  # (a warning, not the slow-build note)
    files = [f for f in path.rglob("*") if f.is_file()]
    assert {f.suffix for f in files} == ({".py", ".o"} if jit == "1" else
                                         {".py", ".nbi", ".nbc"})
    for f in files:
        if how == "fifo":
            f.unlink()
            os.mkfifo(f, 0o600)
        else:
            f.write_bytes(os.urandom(64))
    again, err = _run(PLAN, path)
    assert again == first and "hybridad cache: discarded" in err


# -- only verified content runs ----------------------------------------------------------
def test_planted_bytecode_never_runs(cache_env):
    src = f"X = 1\n\n\ndef f():\n    return X\n# {uuid.uuid4().hex}\n"
    modname = "hybridad_" + cache.source_hash(src)
    cache_env.mkdir(mode=0o700)
    py = cache_env / f"{modname}.py"
    py.write_text(src)
    os.chmod(py, 0o600)
    # bytecode whose header matches the verified .py, but which says X = 666
    planted = compile(src.replace("X = 1", "X = 666"), str(py), "exec")
    st = os.stat(py)
    pyc = importlib.util.cache_from_source(str(py))
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, "wb") as fh:
        fh.write(_code_to_timestamp_pyc(planted, st.st_mtime, st.st_size))
    assert cache.load_function(src, "f")() == 1


# -- the directory: private or not used; no fallback -----------------------------------------
def test_cache_dir_is_created_private(cache_env):
    old = os.umask(0o022)
    try:
        f = cache.load_function(SRC + f"# {uuid.uuid4().hex}\n", "f")
    finally:
        os.umask(old)
    assert f(2.0) == 7.0
    assert cache_env.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in cache_env.glob("*.py"))


def _foreign(path):
    path.mkdir()
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize("make", [
    lambda p: p.mkdir(mode=0o777) or os.chmod(p, 0o777),
    lambda p: p.mkdir() or os.chmod(p, 0o770),
    pytest.param(_foreign, marks=pytest.mark.skipif(not ROOT, reason="needs chown")),
], ids=["world-writable", "group-writable", "other-owner"])
def test_shared_or_foreign_dir_is_refused_with_one_warning(cache_env, make):
    make(cache_env)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for k in range(2):
            src = SRC.replace("3.0", f"{k + 3}.0") + f"# {uuid.uuid4().hex}\n"
            assert cache.load_function(src, "f")(2.0) == 2.0 * (k + 3) + 1.0
    assert len(_cache_warnings(record)) == 1
    assert list(cache_env.iterdir()) == []  # compiled in memory, nothing written


def test_unusable_dir_falls_back_to_nothing_shared(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HYBRIDAD_CACHE_DIR", str(blocker / "cache"))
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert cache.load_function(SRC + f"# {uuid.uuid4().hex}\n", "f")(1.0) == 4.0
    assert len(_cache_warnings(record)) == 1
    assert list(shared.iterdir()) == []


def test_cli_cache_info_and_clear(cache_env, capsys):
    """``--info`` counts and ``--clear`` deletes every file hybridad wrote:
    the generated modules, numba's files and hybridad's compiler's objects
    (``jit/``: a plan's program and the library functions' it calls)."""
    cache.load_function(f"X = 1\n# {uuid.uuid4().hex}\n", "X")
    x, c = np.linspace(-1.0, 1.0, 7), float(uuid.uuid4().int % 1000)
    ha.gradient(lambda x: np.sum(np.sin(x) * x) + c * np.sum(x), x)
    objects = [n for n in os.listdir(cache_env / "jit") if n.endswith(".o")]
    assert objects
    assert main(["cache", "--info"]) == 0
    text = capsys.readouterr().out
    modules = [n for n in os.listdir(cache_env) if n.endswith(".py")]
    assert str(cache_env) in text and f"{len(modules)} generated modules" in text
    assert f"{len(objects)} compiled objects" in text
    keep = cache_env / "mine.txt"
    keep.write_text("not hybridad's")
    assert main(["cache", "--clear"]) == 0
    assert [p.name for p in cache_env.iterdir()] == ["mine.txt"]


# -- compiled code is shared by content: rebuilding a plan does not leak ----------------------
def _rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


_REBUILDS = """
import os, numpy as np, hybridad as ha
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
x = np.linspace(0.0, 1.0, 3)
def build():
    return ha.compile(lambda x: np.sum(x * x + 1.0), x)
a, b = build(), build()
assert a._program.parts[0] is b._program.parts[0]  # one dispatcher
for _ in range(50):
    build()
n, before = 600, rss()
for _ in range(n):
    build()
print((rss() - before) / n)
"""


def test_rebuilding_a_plan_reuses_its_machine_code(cache_env):
    """A rebuilt plan takes the machine code it had: RSS per rebuild (in a
    process of its own: a test worker's heap after other tests grew 12.8 kB a
    rebuild over this window once, 0.6 kB alone)."""
    out, _ = _run(_REBUILDS, cache_env)
    per_rebuild = float(out[-1])
    assert per_rebuild < 8 * 1024, per_rebuild  # was ~46 KiB: a dispatcher each


@pytest.mark.slow
def test_soak_rss_flat_over_rebuilds_and_calls(cache_env):
    """10^4 plan rebuilds (a lambda made in a loop: each one a new plan) and
    10^5 calls: RSS grows by a bounded amount per rebuild and not at all per
    call (bounded: ~30 s)."""
    x = np.linspace(0.0, 1.0, 8)
    res = ha.GradientResult(x)
    for _ in range(100):  # warm-up: caches, allocator pools
        ha.gradient(lambda x: np.sum(np.tanh(x) * x), x, out=res)
    before = _rss()
    n = 10_000
    for _ in range(n):
        ha.gradient(lambda x: np.sum(np.tanh(x) * x), x, out=res)
    per_rebuild = (_rss() - before) / n
    assert per_rebuild < 4 * 1024, f"{per_rebuild:.0f} B of RSS per rebuild"
    plan = ha.compile(lambda x: np.sum(np.tanh(x) * x), x)
    for _ in range(1000):
        plan.gradient(x, out=res)
    before = _rss()
    for _ in range(100_000):
        plan.gradient(x, out=res)
    assert _rss() - before < 256 * 1024, f"{_rss() - before} B of RSS over 10^5 calls"


# -- the key covers the library code the machine code was compiled from -----------------
def test_key_covers_every_library_module_the_code_depends_on(monkeypatch):
    """numba's cache checks only the cached function's own file: a plan's key
    must change with any hybridad module its machine code was built from,
    imported by the generated source or by those modules in turn (folds.py's
    reductions, threshold.py's frozen constants), else an upgraded hybridad
    runs the old code."""
    plan = ha.compile(lambda x: np.sum(np.exp(x)), np.ones(3000, np.float32))
    src = plan.explain()
    src = src[src.index("import numpy as np"):]
    modules = tuple(sorted(set(cache._IMPORTS.findall(src))))
    files = {os.path.relpath(f, os.path.dirname(ha.__file__))
             for f in sources.module_closure(modules)}
    numba_dir = os.path.join("backends", "numba")
    for name in ("rt", "vmath", "folds", "threshold", "abi"):
        assert os.path.join(numba_dir, name + ".py") in files
    assert os.path.join(numba_dir, "emit.py") not in files  # the generator is not in the key
    real = sources._read
    before = cache.source_hash(src)
    for name in ("folds", "threshold"):
        changed = os.path.join(numba_dir, name + ".py")
        monkeypatch.setattr(sources, "_read", lambda p, c=changed: real(p) + b"#" * p.endswith(c))
        sources.library_digest.cache_clear()
        assert cache.source_hash(src) != before, name
    monkeypatch.setattr(sources, "_read", real)
    sources.library_digest.cache_clear()
    assert cache.source_hash(src) == before


def _user_function(x):
    return x + 1.0


def test_library_functions_numba_caches_are_stamped_with_their_imports(monkeypatch):
    """hybridad's own ``cache=True`` functions: numba stamps their cache with
    their own file alone, so an edit to threshold.py (constants rt.py's loops
    freeze) left rt.py's cached machine code running.  Their locator stamps
    it with the source of the module's import closure instead; every module
    with such functions installs it before the first one."""
    import re

    import numba

    from hybridad import _libcache as libcache
    from hybridad.backends.numba import folds, rt, vmath
    from hybridad.ops import lapack_solve

    package = os.path.dirname(ha.__file__)
    users = []
    for dirpath, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as fh:
                    text = fh.read()
                first = re.search(r"^\s*@(?:numba\.)?njit\([^)]*cache=True|njit\(cache=True\)\(",
                                  text, re.M)
                if first:
                    users.append(name)
                    assert "install()" in text[:first.start()], name
    assert {"rt.py", "vmath.py", "folds.py", "lapack.py", "coloring.py", "kernels.py"} <= set(users)

    for fn in (rt.gemm_threads, vmath.vtanh, folds.fold_sum, lapack_solve.solve_triangular):
        locator = fn._cache._impl.locator
        assert type(locator) in libcache._LOCATORS, fn
        assert fn._cache._cache_file._source_stamp == locator.get_source_stamp()
    assert type(numba.njit(cache=True)(_user_function)._cache._impl.locator) \
        not in libcache._LOCATORS  # others' functions keep numba's own

    stamps = [f._cache._impl.locator.get_source_stamp for f in (rt.gemm_threads, vmath.vtanh)]
    before = [s() for s in stamps]
    real = sources._read
    changed = os.path.join("backends", "numba", "threshold.py")
    monkeypatch.setattr(sources, "_read", lambda p: real(p) + b"#" * p.endswith(changed))
    sources.library_digest.cache_clear()
    after = [s() for s in stamps]
    assert after[0] != before[0]  # rt imports threshold
    assert after[1] == before[1]  # vmath does not
    monkeypatch.setattr(sources, "_read", real)
    sources.library_digest.cache_clear()
    assert [s() for s in stamps] == before


LOADED_BOTH = """
import numpy as np, hybridad as ha
from hybridad.backends.jit import engine
def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
n = 200
rng = np.random.default_rng(0)
x, v = rng.uniform(-1, 1, n), rng.standard_normal(n)
ha.compile(rosen, x, hvp=True)  # (its program loaded first)
p = ha.compile(rosen, x, hessian=True)
p.linearize(x)
p.hvp(v=v, out=np.zeros(n))
try:  # the tangent program's own checks refuse it: a ValueError raised in machine code
    p.hvp(v=np.ones(n + 1), out=ha.HvpResult(x))
except ValueError as e:
    print("refused:", str(e).split(";")[0])
V = rng.standard_normal((3, n))
out = np.zeros((3, n))
p.hvp(v=V, out=out)
print(np.allclose(out, V @ ha.hessian(rosen, x, backend="numpy").hessian, rtol=1e-12))
"""


def test_machine_code_from_the_cache_raises_beside_numbas_code(cache_env):
    """Programs of hybridad's compiler, loaded from the disk cache, that raise a
    builtin exception -- after numba's compiler started in the process.  They
    named the C API's ``PyExc_ValueError``, which numba registers in the
    process's one symbol table as the class itself, not the variable holding
    it: whichever came last won, and the code that raised read the class one
    word off (a segfault, in the second process, every programs' code loaded
    from the cache).  Their exceptions are cells of the compiler's own now."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for _ in range(2):  # cold, then every program from the cache
        out = subprocess.run([sys.executable, "-c", LOADED_BOTH], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split("\n")[-2:] == ["True", ""], out.stdout
        assert "refused: v must have shape (200,)" in out.stdout
    objects = list((cache_env / "jit").glob("*.o"))
    assert objects
    for path in objects:  # no object names a symbol numba's compiler registers otherwise
        data = path.read_bytes()
        assert b"PyExc_" not in data and b"_Py_NoneStruct" not in data, path
