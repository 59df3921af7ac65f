"""The sparse results: :class:`SparseJacobianResult` and
:class:`SparseHessianResult` -- a pattern, its coloring, the seed matrix, the
compressed buffer and the decompression index, made once; a
``scipy.sparse.csr_array`` whose ``indices`` and ``indptr`` never change and
whose ``data`` each call overwrites.

Nothing here differentiates: :mod:`.run` fills a result from the compressed
pass of a cached plan.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..results import DiffResult
from . import coloring as _coloring
from ..frontend.guards import _snapshot, values_read
from .pattern import hessian_pattern, jacobian_pattern, trace_for_sparsity

__all__ = ["REVERSE_COST", "SparseHessianResult", "SparseJacobianResult"]

#: a reverse (cotangent) seed costs about this many forward (tangent) seeds:
#: the row coloring is used when ``colors_rows * REVERSE_COST < colors_columns``
REVERSE_COST = 2.0


def _as_pattern(pattern, what):
    if not sp.issparse(pattern):
        arr = np.asarray(pattern)
        if arr.ndim != 2:
            raise TypeError(f"{what} must be a 2-D scipy.sparse array or matrix (or a 2-D "
                            f"array of booleans); got {type(pattern).__name__}")
        pattern = sp.csr_array(arr != 0)
    p = sp.csr_array(pattern, dtype=bool, copy=True)
    p.sum_duplicates()
    p.eliminate_zeros()
    p.sort_indices()
    return p


def _float_proto(proto, name):
    arr = np.asarray(proto)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    return arr.shape, arr.dtype


def _parallel(parallel):
    if not isinstance(parallel, (bool, np.bool_)):
        raise TypeError(f"parallel must be True or False; got {parallel!r}")
    return bool(parallel)


def _signature(f, args, argnums):
    """What makes a later call the call the pattern was detected for."""
    from ..plans.arguments import arg_names, normalize_argnums, prepare_args

    nums, diff = normalize_argnums(argnums, len(args))
    leaves, treedefs = prepare_args(args, diff, lambda: arg_names(f, len(args)))
    return nums, treedefs, tuple((a.shape, a.dtype.str) for a in leaves)


def _identity(f):
    """``f`` as ``(weak reference to its owner, method function or None)``: a
    bound method is made anew at every attribute access; its instance and
    function are what stay the same."""
    import types
    import weakref

    owner, sub = (f.__self__, f.__func__) if type(f) is types.MethodType else (f, None)
    try:
        ref = weakref.ref(owner)
    except TypeError:  # not weakly referenceable: held

        def ref(owner=owner):
            return owner
    return ref, sub


def same_function(identity, f):
    """Whether ``f`` is the function ``identity`` (from :func:`_identity`) names."""
    import types

    ref, sub = identity
    owner, fsub = (f.__self__, f.__func__) if type(f) is types.MethodType else (f, None)
    return fsub is sub and ref() is owner


class _SparseResult(DiffResult):
    """What both sparse results share: the pattern, the coloring, the seeds, the
    compressed buffer and where each nonzero sits in it."""

    __slots__ = ("_bound", "_comp", "_data", "_detected", "_indices", "_indptr", "_matrix",
                 "_seed", "_sources", "coloring", "colors", "lower_bound", "mode", "parallel",
                 "pattern")

    def _setup(self, pattern, colors, mode, seed_len, comp_len, dtype, sources):
        self.pattern = pattern
        self.coloring = colors
        self.colors = int(colors.max(initial=-1)) + 1
        self.mode = mode
        c = self.colors
        self._seed = _coloring.seed_matrix(colors, seed_len, dtype)
        self._comp = np.zeros((c, comp_len), dtype)
        m = sp.csr_array((np.zeros(pattern.nnz, dtype), pattern.indices.copy(),
                          pattern.indptr.copy()), shape=pattern.shape)
        m.has_sorted_indices = True
        self._matrix = m
        # (scipy may convert what it is given: the arrays are those it holds)
        self._data, self._indices, self._indptr = m.data, m.indices, m.indptr
        assert self._data.dtype == dtype and self._data.flags.c_contiguous
        self._sources = np.ascontiguousarray(sources, dtype=np.intp)
        self._bound = None
        self._detected = None

    def _check_matrix(self, name):
        """The csr array still holds this result's own buffers (nothing replaced)."""
        m = self._matrix
        if m.data is not self._data or m.indices is not self._indices or \
                m.indptr is not self._indptr:
            raise ValueError(f"out.{name} no longer holds this result's arrays (its data, "
                             "indices or indptr were replaced): make a new result")
        return self._data

    def seeds(self):
        """The seed matrix ``S^T``, ``(colors, n)`` (forward / Hessian) or
        ``(colors, m)`` (reverse): row ``k`` is 1 at the columns (rows) of color
        ``k`` (a reference; do not modify)."""
        return self._seed

    def __repr__(self):
        m = self._matrix
        return (f"{type(self).__name__}(shape={m.shape}, nnz={m.nnz}, colors={self.colors}, "
                f"lower_bound={self.lower_bound}, mode={self.mode!r})")


class SparseJacobianResult(_SparseResult):
    """Preallocated value and sparse Jacobian of a function from one array to an array.

    ``SparseJacobianResult(f, x, *args, argnums=0)`` detects the pattern from
    ``f`` (:func:`hybridad.jacobian_sparsity`); ``SparseJacobianResult(pattern,
    y)`` takes a pattern you give and a prototype of ``f``'s value.  Either
    way the pattern is colored once and :func:`hybridad.jacobian` with
    ``out=`` this result fills it: one batched pass of ``colors`` seeds, then
    the nonzeros are copied straight into ``jacobian.data``.

    Parameters
    ----------
    f : callable or scipy.sparse array/matrix
        The function (plain numpy code, ``f(x, *args)``), or the pattern
        ``(y.size, x.size)`` (any nonzero is structural).
    x : ndarray
        With a function: its first argument (shape and dtype).  With a
        pattern: a prototype of ``f``'s value (shape and dtype).
    *args
        Further arguments of ``f`` (for detection; arrays are data).
    argnums : int, default 0
        The array argument differentiated.
    mode : {"auto", "forward", "reverse"}, default "auto"
        Column coloring and forward mode (``J @ S``: ``colors`` tangents), or
        row coloring and reverse mode (``S^T @ J``: ``colors`` cotangents);
        "auto" picks the cheaper (a cotangent costs :data:`REVERSE_COST`
        tangents).
    order : {"best", "largest_first", "smallest_last", "natural", "rlf"}
        The coloring (see :mod:`hybridad.sparse.coloring`).
    parallel : bool, default False
        Multithreaded loops in the plan (see :func:`hybridad.compile`).  Off by
        default: a sparse derivative usually runs between a solver's own
        multithreaded linear algebra (SuperLU, BLAS), and on shared or busy
        cores a batched pass of parallel loops measured 25-400x slower than
        serial ones here (2 cores; ``benchmarks/bench_sparse.py``).

    Attributes
    ----------
    value : ndarray
        Shaped like ``f``'s value; overwritten by each call.
    jacobian : scipy.sparse.csr_array, shape (y.size, x.size)
        ``J[i, j] = d y_i / d x_j`` over ``y`` and ``x`` flattened in C order,
        at the pattern's nonzeros.  The same object for the result's life:
        its ``indices`` and ``indptr`` never change, its ``data`` is
        overwritten in place by each call (keep ``jacobian.copy()`` to hold
        an old Jacobian).
    colors : int
        Seeds per call: the number of compressed directions.
    lower_bound : int
        The fewest colors any coloring of this pattern needs (the most
        nonzeros in one row -- column in reverse mode).
    mode : str
        "forward" or "reverse".
    pattern : scipy.sparse.csr_array
        The boolean pattern.
    coloring : ndarray
        The color of each column (forward) or row (reverse).

    Notes
    -----
    A call with another function, or other static arguments, than the
    pattern was detected for -- and every call of a result built from a
    pattern -- first detects that function's pattern once and refuses it
    (``ValueError``, nothing written) unless it lies within this result's.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> def f(x):
    ...     return x[1:] ** 2 - x[:-1]
    >>> x = np.arange(1.0, 5.0)
    >>> res = ha.SparseJacobianResult(f, x)
    >>> _ = ha.jacobian(f, x, out=res)
    >>> res.colors, res.jacobian.toarray()
    (2, array([[-1.,  4.,  0.,  0.],
           [ 0., -1.,  6.,  0.],
           [ 0.,  0., -1.,  8.]]))
    """

    __slots__ = ()

    def __init__(self, f, x, *args, argnums=0, mode="auto", order="best", parallel=False):
        self.parallel = _parallel(parallel)
        if mode not in ("auto", "forward", "reverse"):
            raise ValueError(f"mode must be 'auto', 'forward' or 'reverse'; got {mode!r}")
        if callable(f) and not sp.issparse(f):
            full = (x, *args)
            nodes, xnode, y = trace_for_sparsity(f, full, argnums)
            with values_read() as read:  # (captured arrays' zeros: the plans guard them)
                pattern = _as_pattern(jacobian_pattern(nodes, xnode, y), "pattern")
            yshape = tuple(y.shape)
            ydtype = y.dtype if y.dtype.kind == "f" else np.dtype(np.float64)
            detected = (_identity(f), _signature(f, full, argnums), _snapshots(read))
        else:
            if args:
                raise TypeError("SparseJacobianResult(pattern, y) takes no further arguments")
            pattern = _as_pattern(f, "pattern")
            yshape, ydtype = _float_proto(x, "y")
            detected = None
        m, n = pattern.shape
        if m != int(np.prod(yshape, dtype=np.int64)):
            raise ValueError(f"the pattern has {m} rows; the value has shape {yshape} "
                             f"({int(np.prod(yshape, dtype=np.int64))} elements)")
        bound_cols, bound_rows = _coloring.lower_bound(pattern, 1), \
            _coloring.lower_bound(pattern, 0)
        cols = None if mode == "reverse" else _coloring.color_columns(pattern, order)
        # rows only where they can win: reverse seeds cost REVERSE_COST forward ones
        rows = None if mode == "forward" or mode == "auto" and \
            bound_rows * REVERSE_COST >= cols.max(initial=-1) + 1 else \
            _coloring.color_rows(pattern, order)
        if rows is not None and (cols is None or
                                 (rows.max(initial=-1) + 1) * REVERSE_COST <
                                 cols.max(initial=-1) + 1):
            colors, mode, seed_len, comp_len, self.lower_bound = rows, "reverse", m, n, \
                bound_rows
        else:
            colors, mode, seed_len, comp_len, self.lower_bound = cols, "forward", n, m, \
                bound_cols
        sources = _coloring.jacobian_sources(pattern, colors, mode)
        super().__init__(np.zeros(yshape, ydtype))
        self._setup(pattern, colors, mode, seed_len, comp_len, ydtype, sources)
        self._derivs = (self._matrix,)
        self._detected = detected

    @property
    def jacobian(self):
        """The sparse Jacobian (a reference: the same csr array every call)."""
        return self._matrix


class SparseHessianResult(_SparseResult):
    """Preallocated value, gradient and sparse Hessian of a scalar function.

    ``SparseHessianResult(f, x, *args)`` detects the pattern
    (:func:`hybridad.hessian_sparsity`); ``SparseHessianResult(pattern, x)``
    takes a symmetric pattern you give and a prototype of ``x``.  The pattern
    is star-colored once; :func:`hybridad.hessian` with ``out=`` this result
    fills it from one batched pass of ``colors`` Hessian-vector products.

    Parameters
    ----------
    f : callable or scipy.sparse array/matrix
        The scalar function (``f(x, *args)``), or the pattern ``(x.size, x.size)``
        (made symmetric: both triangles are used).
    x : ndarray
        The differentiated argument's prototype (shape and dtype).
    *args
        Further arguments of ``f`` (for detection).
    argnums : int, default 0
        The array argument differentiated.
    order : {"best", "largest_first", "smallest_last", "natural"}
        The star coloring's vertex order.
    parallel : bool, default False
        As for :class:`SparseJacobianResult`.

    Attributes
    ----------
    value : ndarray, shape ()
    gradient : ndarray
        Shaped like ``x``.
    hessian : scipy.sparse.csr_array, shape (x.size, x.size)
        Symmetric, **both triangles stored**; the same object for the
        result's life, its ``data`` overwritten in place by each call.
    colors, lower_bound, pattern, coloring :
        As for :class:`SparseJacobianResult` (a star coloring).

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> def f(x):
    ...     return np.sum((x[1:] - x[:-1]) ** 2) + np.sum(x ** 4)
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> res = ha.hessian(f, x, out=ha.SparseHessianResult(f, x))
    >>> res.colors, res.hessian.toarray()
    (2, array([[ 14.,  -2.,   0.],
           [ -2.,  52.,  -2.],
           [  0.,  -2., 110.]]))
    """

    __slots__ = ()

    def __init__(self, f, x, *args, argnums=0, order="best", parallel=False):
        self.parallel = _parallel(parallel)
        if callable(f) and not sp.issparse(f):
            full = (x, *args)
            nodes, xnode, y = trace_for_sparsity(f, full, argnums)
            if y.size != 1:
                raise ValueError(f"a Hessian needs a scalar function; f returned shape "
                                 f"{tuple(y.shape)}")
            with values_read() as read:
                pattern = _as_pattern(hessian_pattern(nodes, xnode, y), "pattern")
            xshape, xdtype = tuple(xnode.shape), xnode.dtype
            vdtype = y.dtype if y.dtype.kind == "f" else xdtype
            detected = (_identity(f), _signature(f, full, argnums), _snapshots(read))
        else:
            if args:
                raise TypeError("SparseHessianResult(pattern, x) takes no further arguments")
            pattern = _as_pattern(f, "pattern")
            pattern = _as_pattern(pattern + pattern.T, "pattern")
            xshape, xdtype = _float_proto(x, "x")
            vdtype = xdtype
            detected = None
        n = int(np.prod(xshape, dtype=np.int64))
        if pattern.shape != (n, n):
            raise ValueError(f"the pattern has shape {pattern.shape}; x has {n} elements, so "
                             f"a Hessian pattern is ({n}, {n})")
        colors = _coloring.star_coloring(pattern, order)
        self.lower_bound = _coloring.lower_bound(pattern, 1)
        sources = _coloring.hessian_sources(pattern, colors)
        super().__init__(np.zeros((), vdtype), np.zeros(xshape, xdtype))
        self._setup(pattern, colors, "forward", n, n, xdtype, sources)
        self._derivs = (self._derivs[0], self._matrix)
        self._detected = detected

    @property
    def gradient(self):
        """The gradient buffer, shaped like ``x`` (a reference)."""
        return self._derivs[0]

    @property
    def hessian(self):
        """The sparse Hessian (a reference: the same csr array every call)."""
        return self._matrix


def _snapshots(read):
    """``{id: (array, snapshot)}`` of the captured arrays a pattern read the
    zeros of, as they were at detection (a plan bound to this result later
    trusts the pattern only while they are unchanged)."""
    return {k: (a, _snapshot(a)) for k, a in read.items()}
