"""The numba CPU backend: the whole plan as one generated, compiled function
(:mod:`.program`), its loops (:mod:`.loops`, :mod:`.reduce`), the runtime it
calls (:mod:`.rt`, :mod:`.folds`, :mod:`.lapack`, :mod:`.vmath`, :mod:`.threads`), dual
numbers for user functions (:mod:`.dual`), small kernels of the plans
(:mod:`.kernels`) and the verified disk cache (:mod:`.cache`)."""

__all__ = ["build_program", "compiler_lock"]


def build_program(*args, **kwargs):
    """:func:`.program.compile_numba_program` (same arguments) under numba's
    compiler lock (process-wide, re-entrant): the program module's imports,
    the source generated and parsed, its functions compiled, one build at a
    time in the process.

    ``ast.parse`` is not thread-safe before Python 3.11.8 and 3.12.2
    (CPython gh-106905: the depth counter of the conversion to Python AST
    objects is the interpreter's, and a garbage collection inside it can
    switch threads).  A build parses its generated source (kernel outlining,
    function splitting), numba parses while it compiles, and the imports of a
    first build parse signatures (numpy.ma's, through scipy); two threads
    building at once -- a tiered plan's background compile beside a call that
    builds another program of the plan, or beside the serial twin -- raised
    ``SystemError: AST constructor recursion depth mismatch`` in a call.  A
    build's compile waited for this lock anyway: what is newly serialized is
    its code generation.

    The lock is taken by :func:`compiler_lock`.
    """
    with compiler_lock():
        from .program import compile_numba_program

        return compile_numba_program(*args, **kwargs)


def compiler_lock():
    """numba's compiler lock (process-wide, re-entrant), for hybridad code that
    compiles, or makes numba functions, while holding a lock of its own.

    One order everywhere: the compiler lock first, then hybridad's lock
    (``with compiler_lock(), _LOCK:``), never the other way round -- a thread
    holding hybridad's lock and compiling waits for the compiler lock, which a
    tiered plan's background build may hold while it needs that same lock
    (the first call of a plan with an ``@elementwise`` function compiled its
    ufunc under the function's lock while the build, inside the compiler
    lock, wanted that lock for the function's kernel: the process hung).

    numba's CPU target context is made before the lock is returned: numba
    makes it lazily, at the first ``@njit`` decorator, under the context's
    own lock and then the compiler lock; a holder of the compiler lock whose
    code made the first numba function (``program``'s imports) took the two
    the other way round, and a thread decorating its first ``@njit``
    function meanwhile (user code, a hybridad module imported lazily)
    deadlocked with it.

    Returns
    -------
    numba's global compiler lock (a context manager).
    """
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    cpu_target.target_context  # noqa: B018 - made now, outside the compiler lock
    return global_compiler_lock
