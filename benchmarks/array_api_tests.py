"""The array API namespace of traced arrays, measured with the public array-api-tests suite.

What it measures
----------------
A traced array's ``x.__array_namespace__()`` is
:data:`hybridad.frontend.array_api.namespace`: numpy's namespace whose functions
dispatch traced arrays to hybridad.  The suite (data-apis/array-api-tests)
calls a module's functions on concrete arrays it makes with that module's
``asarray``/``zeros``/..., so run on the namespace directly it would only test
numpy.  This script writes an *adapter* module instead, and points the suite
at it (``ARRAY_API_TESTS_MODULE``):

* every array function of the standard (elementwise, statistical,
  manipulation, searching, sorting, set, indexing, utility, linear algebra,
  ``astype``, ``tril``/``triu``/``meshgrid``, and the ``linalg`` and ``fft``
  extensions) called with at least one real floating ndarray argument runs
  **through tracing**: the call becomes ``g(d, *arrays)``, which calls the
  namespace's function on the traced array arguments (ints and bools beside
  the floats included; the other arguments static), and its value is
  ``hybridad.jacobian(g, d, *arrays, backend="numpy").value``: the numpy
  reference executor running the traced program.  ``d`` is a 0-d float64
  dummy that ``g`` never reads, so only values are asked for (the Jacobian
  is all zeros); with ``--differentiate`` the first real floating argument is
  differentiated instead, so missing derivative rules and derivative passes
  that raise (a singular matrix) fail too.  Functions returning a tuple are
  traced once per element; a numpy scalar argument is traced as a 0-d array.
  A bool or integer result (``isnan``,
  ``argmax``, comparisons) is cast to float64 inside ``g`` and back
  afterwards, since a Jacobian needs floating values (exact for bools and
  indices);
* **passed through** to numpy unchanged: calls with no real floating array
  argument (integer and boolean arrays: hybridad differentiates floating
  arrays) and calls with a complex array argument (hybridad traces complex
  values only where a real argument leads to them);
* numpy's own: array creation (``asarray``, ``zeros``, ``arange``, the
  ``*_like`` functions, ``fftfreq``...), the data type utilities
  (``finfo``, ``result_type``, ``isdtype``...), dtypes and constants.

The arrays themselves are numpy's ndarrays, so the suite's tests of array
*operators* (``x + y``, ``x.__iadd__``: the ``[__name__...]`` cases of
test_operators_and_elementwise_functions.py) would test numpy only: they are
deselected.  The adapter declares the namespace's ``__array_api_version__``
(``--api-version`` overrides it), and the suite skips tests of later versions.

Output: per test file, passed / failed / skipped / errors; the failing tests
grouped by their error message (numbers and values blanked out); and how many
calls of each function went through tracing or were passed through.

Running it
----------
It needs a checkout of https://github.com/data-apis/array-api-tests with its
``array-api`` submodule (the spec stubs the suite reads:
``git submodule update --init``), and the suite's requirements: hypothesis,
ndindex and pytest-json-report (``pip install -r requirements.txt`` there);
pytest-xdist is used when present (``--workers``)::

    python benchmarks/array_api_tests.py --suite PATH [--max-examples N] [--json FILE]

``--files`` picks the suite's test files (default :data:`DEFAULT_FILES`);
``--differentiate`` as above; ``--keep`` keeps the folder with the adapter,
the junit report and the call counts; ``--module numpy`` (or
``array_api_strict``) runs the same selection on that module directly,
without the adapter, to tell hybridad's failures from numpy's own.
Hypothesis runs derandomized (the same examples every run), without
deadlines; the suite runs its elementwise ("unvectorized") tests with a tenth
of ``--max-examples``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

#: the suite's test files run by default
DEFAULT_FILES = ("test_operators_and_elementwise_functions.py", "test_statistical_functions.py",
                 "test_manipulation_functions.py", "test_searching_functions.py",
                 "test_sorting_functions.py", "test_linalg.py", "test_utility_functions.py",
                 "test_indexing_functions.py", "test_set_functions.py",
                 "test_data_type_functions.py", "test_special_cases.py", "test_fft.py")

#: the functions of the standard (2023.12 and later) the adapter traces
TRACED = frozenset("""
    abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift
    bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos
    cosh divide equal exp expm1 floor floor_divide greater greater_equal hypot imag
    isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp logical_and
    logical_not logical_or logical_xor maximum minimum multiply negative nextafter
    not_equal positive pow real reciprocal remainder round sign signbit sin sinh square
    sqrt subtract tan tanh trunc
    astype tril triu meshgrid take take_along_axis
    matmul matrix_transpose tensordot vecdot
    broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat
    reshape roll squeeze stack tile unstack
    argmax argmin count_nonzero nonzero searchsorted where
    unique_all unique_counts unique_inverse unique_values argsort sort
    cumulative_sum cumulative_prod max mean min prod std sum var all any diff
""".split())

#: the ``linalg`` and ``fft`` extensions' traced functions (the rest are numpy's)
TRACED_EXT = {
    "linalg": frozenset("""cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm
        matrix_power matrix_rank matrix_transpose outer pinv qr slogdet solve svd svdvals
        tensordot trace vecdot vector_norm""".split()),
    "fft": frozenset("""fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftshift
        ifftshift""".split()),
}

#: the environment variable that asks the adapter to differentiate (``--differentiate``)
DIFF_ENV = "HYBRIDAD_AAT_DIFFERENTIATE"

#: the environment variable naming the folder the adapter writes its call counts to
STATS_ENV = "HYBRIDAD_AAT_STATS"


# --------------------------------------------------------------------- adapter


#: (function name, "traced" | "no-float" | "complex" | "trace-error") -> calls
_CALLS: collections.Counter = collections.Counter()


def _leaves(obj, out):
    """The ndarrays (and numpy scalars) in ``obj``, through lists, tuples and dicts."""
    if isinstance(obj, (np.ndarray, np.generic)):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _leaves(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _leaves(o, out)
    return out


def _substitute(obj, values):
    """``obj`` with its leaves (in :func:`_leaves` order) taken from the iterator ``values``."""
    if isinstance(obj, (np.ndarray, np.generic)):
        return next(values)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_substitute(o, values) for o in obj)
    if isinstance(obj, dict):
        return {key: _substitute(o, values) for key, o in obj.items()}
    return obj


def _evaluate(fn, args, kwargs, x_at, leaves, k):
    """Trace ``fn(*args, **kwargs)`` with every array argument traced and return
    the value of output ``k`` (the whole output when ``k`` is None) and the
    output's structure.  ``x_at``: the leaf differentiated, or None for a
    0-d float64 dummy that ``fn`` never reads (values only)."""
    import hybridad as ha

    seen = {}
    order = list(range(len(leaves)))
    leaves = [np.asarray(a) if isinstance(a, np.generic) else a for a in leaves]
    if x_at is None:
        inputs = [np.zeros(()), *leaves]
    else:
        order = [x_at] + [i for i in order if i != x_at]
        inputs = [leaves[i] for i in order]

    def g(*traced):
        if x_at is None:
            traced = traced[1:]
        by_index = dict(zip(order, traced, strict=True))
        values = iter([by_index[i] for i in range(len(leaves))])
        a, kw = _substitute((args, kwargs), values)
        out = fn(*a, **kw)
        if isinstance(out, (tuple, list)):
            seen["kind"], seen["n"] = type(out), len(out)
            if not out:  # (unstack of an empty axis)
                seen["dtype"] = np.dtype(np.float64)
                return np.zeros(())
            out = out[k or 0]
        dtype = np.dtype(out.dtype) if hasattr(out, "dtype") else np.result_type(out)
        seen["dtype"] = dtype
        if dtype.kind not in "fc":
            out = out.astype(np.float64)  # (a Jacobian wants floating values)
        return out

    value = ha.jacobian(g, *inputs, backend="numpy").value
    if seen["dtype"].kind not in "fc":
        value = value.astype(seen["dtype"])
    return value, seen


def _traced(name, fn):
    """``fn`` of the namespace, called through tracing (see the module docstring)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        leaves = _leaves((args, kwargs), [])
        kinds = [np.dtype(a.dtype).kind for a in leaves]
        if "c" in kinds:
            _CALLS[name, "complex"] += 1
            return fn(*args, **kwargs)
        if "f" not in kinds:
            _CALLS[name, "no-float"] += 1
            return fn(*args, **kwargs)
        x_at = kinds.index("f") if os.environ.get(DIFF_ENV) else None
        try:
            value, seen = _evaluate(fn, args, kwargs, x_at, leaves, None)
            if "kind" in seen:
                values = [value][:seen["n"]] + [_evaluate(fn, args, kwargs, x_at, leaves, k)[0]
                                                for k in range(1, seen["n"])]
                kind = seen["kind"]
                value = kind(*values) if hasattr(kind, "_fields") else kind(values)
        except Exception:
            _CALLS[name, "trace-error"] += 1
            raise
        _CALLS[name, "traced"] += 1
        return value

    call.__hybridad_traced__ = True
    return call


def install_adapter(module_globals):
    """Fill the generated adapter module: numpy's namespace through
    :data:`hybridad.frontend.array_api.namespace`, the functions in
    :data:`TRACED` (and the extensions' :data:`TRACED_EXT`) replaced by
    :func:`_traced` wrappers."""
    import types

    from hybridad.frontend.array_api import namespace

    for name in dir(np):
        if not name.startswith("_"):
            module_globals.setdefault(name, getattr(np, name))
    for name in ("asarray", "astype", "sort", "argsort"):
        module_globals[name] = getattr(namespace, name)
    module_globals["__array_namespace_info__"] = np.__array_namespace_info__
    module_globals["__array_api_version__"] = os.environ.get(
        "HYBRIDAD_AAT_VERSION", namespace.__array_api_version__)
    for name in TRACED:
        if hasattr(namespace, name):
            module_globals[name] = _traced(name, getattr(namespace, name))
    for ext, names in TRACED_EXT.items():
        base = getattr(np, ext)
        sub = types.ModuleType(f"{module_globals['__name__']}.{ext}")
        for name in dir(base):
            if not name.startswith("_"):
                value = getattr(base, name)
                setattr(sub, name, _traced(f"{ext}.{name}", value) if name in names else value)
        module_globals[ext] = sub


def write_calls():
    """Write this process's call counts into the folder named by :data:`STATS_ENV`."""
    folder = os.environ.get(STATS_ENV)
    if folder:
        path = Path(folder) / f"calls-{os.getpid()}.json"
        path.write_text(json.dumps([[n, how, c] for (n, how), c in sorted(_CALLS.items())]))


ADAPTER = '''"""array-api-tests adapter: hybridad's array API namespace through tracing
(written by {script})."""
import importlib.util as _u
import sys as _s

_spec = _u.spec_from_file_location("_hybridad_array_api_tests", {script!r})
_m = _u.module_from_spec(_spec)
_s.modules[_spec.name] = _m
_spec.loader.exec_module(_m)
_m.install_adapter(globals())
'''

PLUGIN = '''"""Deselects the suite's tests of ndarray operators (numpy's, not traced);
has the adapter write its call counts at the end."""
import sys


def pytest_sessionfinish(session):
    adapter = sys.modules.get("_hybridad_array_api_tests")
    if adapter is not None:
        adapter.write_calls()


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if "[__" not in i.nodeid]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if "[__" in i.nodeid])
        items[:] = keep
'''


# ---------------------------------------------------------------------- runner


def _blank(message):
    """A failure message with its values blanked out, to group failures by cause."""
    line = next((ln for ln in message.splitlines() if ln.strip()), "")
    line = re.sub(r"array\(.*", "array(...)", line)
    line = re.sub(r"\bx\d?=[^,\]]+", "x=#", line)
    line = re.sub(r"(?<![A-Za-z_])[-+]?(\d+\.?\d*(e[-+]?\d+)?|inf|nan)(?![A-Za-z_])", "#", line)
    line = re.sub(r"\(#(, #)*,?\)", "(#)", line)
    return line[:160]


def parse_junit(path):
    """Per test file ``{passed, failed, skipped, errors}`` and the failures
    ``(file, test, kind, message)`` of a junit XML report."""
    counts = collections.defaultdict(collections.Counter)
    failures = []
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        file = next((p for p in parts if p.startswith("test_")), parts[-1]) + ".py"
        outcome = "passed"
        for child in case:
            tag = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(child.tag)
            if tag:
                outcome = tag
                if tag in ("failed", "errors"):
                    message = child.get("message") or child.text or ""
                    failures.append((file, case.get("name"), tag, message))
                break
        counts[file][outcome] += 1
    return counts, failures


def read_calls(folder):
    calls = collections.defaultdict(collections.Counter)
    for path in Path(folder).glob("calls-*.json"):
        for name, how, c in json.loads(path.read_text()):
            calls[name][how] += c
    return calls


def run_suite(args):
    """Run the suite's files; return (wall seconds, counts, failures, calls, pytest rc)."""
    suite = Path(args.suite).resolve()
    tests = suite / "array_api_tests"
    if not (tests / "__init__.py").is_file():
        sys.exit(f"{suite}: no array_api_tests/ package (not an array-api-tests checkout)")
    if not any((suite / "array-api" / "spec").glob("20*")):
        sys.exit(f"{suite}/array-api: the spec submodule is missing "
                 "(git submodule update --init in the checkout)")
    work = Path(tempfile.mkdtemp(prefix="hybridad-aat-"))
    stats = work / "calls"
    stats.mkdir()
    script = str(Path(__file__).resolve())
    (work / "hybridad_array_api.py").write_text(ADAPTER.format(script=script))
    (work / "hybridad_aat_plugin.py").write_text(PLUGIN)
    env = dict(os.environ)
    checkout = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(work), checkout, env.get("PYTHONPATH")) if p)
    env["ARRAY_API_TESTS_MODULE"] = args.module or "hybridad_array_api"
    env[STATS_ENV] = str(stats)
    if args.differentiate:
        env[DIFF_ENV] = "1"
    # the standard's version the suite tests: the namespace's unless told (with
    # --module too, so that both runs select the same tests)
    if not args.api_version:
        sys.path.insert(0, checkout)
        from hybridad.frontend.array_api import namespace

        args.api_version = namespace.__array_api_version__
    env["HYBRIDAD_AAT_VERSION"] = env["ARRAY_API_TESTS_VERSION"] = args.api_version
    junit = work / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
           "-p", "hybridad_aat_plugin", f"--junitxml={junit}",
           f"--max-examples={args.max_examples}", "--derandomize", "--disable-deadline",
           "-W", "ignore::RuntimeWarning", "--disable-warnings", "--tb=no", "-rN"]
    if args.workers > 1:
        try:
            import xdist  # noqa: F401

            cmd += ["-n", str(args.workers), "--dist", "loadfile"]
        except ImportError:
            print("pytest-xdist is not installed: one worker")
    cmd += [str(tests / f) for f in args.files] + args.pytest_args
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    rc = subprocess.call(cmd, cwd=work, env=env)  # (hypothesis's database goes in work)
    wall = time.perf_counter() - start
    if not junit.is_file():
        sys.exit(f"pytest (exit {rc}) wrote no report")
    counts, failures = parse_junit(junit)
    calls = read_calls(stats)
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return wall, counts, failures, calls, rc


def summarize(wall, counts, failures, calls, module):
    """Print the tables; return the summary as a dict (``--json``)."""
    cols = ("passed", "failed", "skipped", "errors")
    total = collections.Counter()
    print(f"\narray-api-tests on {module}: {wall:.0f} s\n")
    print(f"{'file':<46}" + "".join(f"{c:>9}" for c in cols))
    for file in sorted(counts):
        total.update(counts[file])
        print(f"{file:<46}" + "".join(f"{counts[file][c]:>9}" for c in cols))
    print(f"{'total':<46}" + "".join(f"{total[c]:>9}" for c in cols))
    groups = collections.defaultdict(list)
    for file, test, _kind, message in failures:
        groups[_blank(message)].append(f"{file[5:-3]}::{test}")
    if groups:
        print("\nfailures by cause:")
    for cause, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n[{len(tests)}] {cause}")
        for t in sorted(tests):
            print(f"    {t}")
    if calls:
        print("\ncalls: traced / passed through (no real floating array; complex) / "
              "raised while tracing")
        for name in sorted(calls):
            c = calls[name]
            print(f"  {name:<24} {c['traced']:>6} {c['no-float']:>6} {c['complex']:>6} "
                  f"{c['trace-error']:>6}")
        never = sorted(n for n in calls if calls[n]["traced"] == 0)
        if never:
            print("never traced (only non-float or complex inputs): " + ", ".join(never))
    return {"module": module, "wall_s": round(wall, 1),
            "files": {f: dict(c) for f, c in counts.items()}, "total": dict(total),
            "failures": {cause: tests for cause, tests in groups.items()},
            "calls": {n: dict(c) for n, c in calls.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", required=True, help="an array-api-tests checkout")
    parser.add_argument("--max-examples", type=int, default=100,
                        help="hypothesis examples per test (default 100, the suite's)")
    parser.add_argument("--json", help="write the summary to this file")
    parser.add_argument("--files", nargs="+", default=list(DEFAULT_FILES),
                        help="the suite's test files (default: %(default)s)")
    parser.add_argument("--module", help="run on this module directly (numpy, "
                        "array_api_strict), without the adapter")
    parser.add_argument("--api-version", help="the standard's version to test (default: "
                        "the namespace's __array_api_version__)")
    parser.add_argument("--differentiate", action="store_true",
                        help="differentiate the first real floating argument "
                        "(default: values only)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the folder with the adapter and the junit report")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="pytest-xdist workers (default 2)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    wall, counts, failures, calls, rc = run_suite(args)
    module = args.module or ("hybridad (traced, differentiated)" if args.differentiate
                             else "hybridad (traced)")
    summary = summarize(wall, counts, failures, calls, module)
    summary["pytest_exit"] = rc
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
