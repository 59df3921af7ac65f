"""The generated source made a callable: compiled by hybridad's own compiler
(:mod:`hybridad.backends.jit`) where it translates the source, else by numba
(its verified disk cache, :mod:`.cache`, under numba's compiler lock taken the
safe way, :mod:`.locks`), with what every call passes the same way bound."""

from __future__ import annotations

import functools
import warnings

import numpy as np

from .split import check_budget

__all__ = ["bind", "link", "loop_driver", "own_dispatcher"]


def link(source, fn_name, memplan, arenas, table, in_specs, out_specs, const_args,
          objects, cacheable, extra=(), name="plan"):
    """Compile ``source`` and bind what every call passes the same way
    (:func:`bind`): the arenas' addresses, the guard table, numpy's array
    type, the addresses of ``extra`` arrays (a profiled plan's timers; ints as
    they are: a carried decision check's, :mod:`.prelude`) and the
    constants -- by ``id()`` where arrays go by object (:mod:`.rt`), else as
    arrays.  Returns ``(call, own dispatcher, fixed, bound)``."""
    arena_args = [memplan.arenas[dt].ctypes.data for dt in arenas]
    extra = [a if type(a) is int else a.ctypes.data for a in extra]
    if objects:
        fixed = arena_args + [table.ctypes.data, id(np.ndarray)] + extra
        protos = fixed + [0] * len(in_specs) + [0 if obj else v for v, obj in const_args] + \
            [0] * len(out_specs)
    else:
        fixed = arena_args + [table.ctypes.data, 0] + extra
        protos = fixed + [np.empty(s, d) for s, d in in_specs] + [v for v, _ in const_args] + \
            [np.empty(s, d) for s, d in out_specs]
    bound = [id(v) if obj else v for v, obj in const_args]
    own = own_dispatcher(source, fn_name, protos, cacheable, name)
    return bind(own, fixed, bound, len(in_specs), len(out_specs)), own, fixed, bound


def own_dispatcher(source, fn_name, protos, cacheable=True, name="plan"):
    """A dispatcher of the generated function compiled for the types of
    ``protos`` only (from numba's disk cache when warm); it compiles nothing
    else, so an argument of another type raises ``TypeError``.  Shared by
    every plan with the same source (:func:`.cache.compiled`): a rebuilt plan
    adds no machine code.

    A function of integer arguments whose source hybridad's own compiler
    translates (:mod:`hybridad.backends.jit`) is compiled by it instead,
    numba's front end skipped; the source alone decides which."""
    from .. import jit

    if jit.enabled() and all(type(p) is int for p in protos):
        check_budget(source, name, jit.COMPILE_S_PER_LINE,
                     lambda: jit.cached(source, fn_name, len(protos)))
        try:
            return jit.compile_function(source, fn_name, len(protos),
                                        lambda: vars(_module_safely(source)))
        except jit.Unsupported as why:
            jit.refused(fn_name, why, source)
    elif jit.enabled():  # (said in explain(), and under HYBRIDAD_JIT_DEBUG / _LOG)
        arrays = [p for p in protos if type(p) is not int]
        jit.refused(fn_name, jit.Unsupported(
            f"{len(arrays)} argument(s) passed as arrays (a captured constant of strides "
            f"{arrays[0].strides}, shape {arrays[0].shape}: no address to read it at)"
            if hasattr(arrays[0], "strides") else "an argument passed by value"), source)
    # numba's compile of a long source can take minutes: refused over the
    # budget before it starts (the plans then run their numpy reference program)
    check_budget(source, name)
    import numba
    from numba.core.errors import NumbaWarning

    from .locks import compiler_lock

    # numba's compiler lock taken the safe way (its target context made
    # first); numba's warnings (NumbaPerformanceWarning on generated code)
    # are not the user's
    with compiler_lock(), warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaWarning)
        return _cache().compiled(source, fn_name, tuple(numba.typeof(p) for p in protos),
                                 cacheable)


def _module_safely(source):
    """The generated module of ``source``, executed (its imports and ``@njit``
    decorators load numba and make its target context): the context made
    first the one safe way (:func:`.locks.make_numba_context`), as a numba
    compile does."""
    from .locks import make_numba_context

    make_numba_context()
    return _cache()._module(source)


def _cache():
    """The verified numba cache (:mod:`.cache`; imported when needed: it
    imports numba, which a program hybridad's own compiler makes never needs)."""
    from . import cache

    return cache


def bind(jitted, fixed, consts, n_in, n_out):
    """``call(*inputs, *outputs)``: the compiled function with the arenas'
    addresses, numpy's array type and the constants bound (a small generated
    Python function: no per-call packing)."""
    ns = {"_j": jitted}
    args = []
    for k, value in enumerate(fixed):
        ns[f"_f{k}"] = value
        args.append(f"_f{k}")
    ins = [f"a{i}" for i in range(n_in)]
    args += ins
    for k, c in enumerate(consts):
        ns[f"_c{k}"] = c
        args.append(f"_c{k}")
    outs = [f"o{k}" for k in range(n_out)]
    args += outs
    src = f"def call({', '.join(ins + outs)}):\n    return _j({', '.join(args)})\n"
    exec(compile(src, "<hybridad numba call>", "exec"), ns)  # noqa: S102
    return ns["call"]


def loop_driver(key, n):
    """``runs(plan, count, copies=None)``: a call of no arguments running one
    compiled loop that calls runner ``key``'s body natively ``count`` times,
    each iteration's ``n`` arguments computed from the ``int64[n, 5]``
    ``plan`` (rows ``(obj, alt, base, step, moves)``: see
    :func:`hybridad.backends.jit.loop_driver`; no dispatch per iteration, the
    caller keeps ``plan`` alive): hybridad's own driver when its compiler
    made the body (the plan's address read once, not at every call:
    ``.ctypes`` costs ~2 us), else numba's.  ``copies``: ``(rows, n_before,
    n_after)``, an ``int64[k, 3]`` table of ``(destination, source, bytes)``
    the call copies before and after the iterations (the caller keeps it
    alive); only hybridad's driver takes them (``runs.copies`` is True)."""
    from .. import jit
    from ..loops import runner_for
    from .abi import ABI

    data = ABI["data"]
    address = jit.native(runner_for(key)._parts_of_body[0])
    if address is not None:
        drive = jit.loop_driver(n)

        def runs(plan, count, copies=None):
            rows, before, after = (0, 0, 0) if copies is None else \
                (copies[0].ctypes.data, copies[1], copies[2])
            return functools.partial(drive, plan.ctypes.data, count, address, rows,
                                     before, after, data)
        # (its body's address, for a loop run in place: ..nesting; what a failing body raises)
        runs.copies, runs.address, runs.failed = True, address, jit.BodyFailed
        return runs
    import numba

    lines = []
    for j in range(n):
        lines += [f"        a{j} = p[{j}, 0] + odd * p[{j}, 1]",
                  f"        if p[{j}, 4] != 0:",
                  f"            _store(a{j} + data, p[{j}, 2] + t * p[{j}, 3])"]
    args = ", ".join(f"a{j}" for j in range(n))
    source = ("from numba import njit\n"
              "from hybridad.backends.loops import runner_for as _runner\n"
              "from hybridad.backends.numba.store import store_i64 as _store\n"
              f"_body = _runner({key!r})._parts_of_body[0]\n\n\n"
              "@njit(cache=True, nogil=True)\n"
              "def drive(p, count, data):\n"
              "    for t in range(count):\n"
              "        odd = t & 1\n" + "\n".join(lines) + "\n"
              f"        _body({args})\n")
    i64 = numba.types.int64
    drive = _cache().compiled(source, "drive", (numba.typeof(np.zeros((1, 1), np.int64)),
                                                i64, i64))
    return lambda plan, count: functools.partial(drive, plan, count, data)
