"""Scans along one axis: ``cumsum``, ``cumprod``, ``cumprod_exclusive`` (the
products strictly before each position) and ``cumprod_adjoint`` (cumprod's
reverse scan), their derivatives exact with zeros and written as scans."""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .common import expand as _expand


def _cumprod_exclusive_run(out, x, axis, reverse):
    if reverse:
        x, out = np.flip(x, axis), np.flip(out, axis)
    n = x.shape[axis]
    head = [slice(None)] * x.ndim
    head[axis] = slice(0, 1)
    out[tuple(head)].fill(1)  # (assigning a Python 1 would allocate a 0-d array)
    if n > 1:
        src, dst = list(head), list(head)
        src[axis], dst[axis] = slice(0, n - 1), slice(1, n)
        np.multiply.accumulate(x[tuple(src)], axis=axis, out=out[tuple(dst)])


def _shift(t, axis, k):
    """t moved k places along axis (k > 0: towards the end), zeros coming in."""
    n = t.shape[axis]
    k = max(-n, min(n, k))
    zeros = np.zeros(t.shape[:axis] + (abs(k),) + t.shape[axis + 1:], t.dtype)
    keep = [slice(None)] * t.ndim
    keep[axis] = slice(0, n - k) if k >= 0 else slice(-k, n)
    parts = [zeros, t[tuple(keep)]] if k >= 0 else [t[tuple(keep)], zeros]
    return np.concatenate(parts, axis=axis)


def _flip(t, axis):
    return t[(slice(None),) * axis + (slice(None, None, -1),)]


def _cumprod_exclusive_vjp(g, node, active, x, ans, axis, reverse):
    # E_j = prod_{i<j} x_i: dE_j/dx_i = E_i prod_{i<k<j} x_k for i < j, so the
    # cotangent of x_i is E_i R_i with R_i = g_{i+1} + x_{i+1} R_{i+1} -- the
    # reverse scan of cumprod_adjoint on g moved one place back.  Exact with
    # zeros.  reverse=True is the same along the flipped axis.
    from ..core.trace import bind

    if reverse:
        (back,) = _cumprod_exclusive_vjp(_flip(g, axis), None, active, _flip(x, axis),
                                         _flip(ans, axis), axis, False)
        return (_flip(back, axis),)
    return (ans * bind("cumprod_adjoint", _shift(g, axis, -1), x, axis=axis),)


def _forward_scan(u, x, axis):
    """S_i = u_i + x_i S_{i-1} along axis (S_{-1} = 0): cumprod_adjoint's
    backward recurrence run along the flipped axis, x moved one place."""
    return _flip(_bind("cumprod_adjoint", _flip(u, axis), _shift(_flip(x, axis), axis, 1),
                       axis=axis), axis)


def _cumprod_exclusive_jvp(ts, node, x, ans, axis, reverse):
    # E_j = E_{j-1} x_{j-1}: dE_j = x_{j-1} dE_{j-1} + E_{j-1} dx_{j-1}
    if reverse:
        flipped = _cumprod_exclusive_jvp((_flip(ts[0], axis),), node, _flip(x, axis),
                                         _flip(ans, axis), axis, False)
        return _flip(flipped, axis)
    return _forward_scan(_shift(ans * ts[0], axis, 1), _shift(x, axis, 1), axis)


def _scan_batch(node, batched, *args, **attrs):
    """Scans along ``axis``: every operand batched (a broadcast view where it was
    not), the axis moved by one."""
    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    args = [a if b else _expand(a, k) for a, b in zip(args, batched, strict=True)]
    attrs["axis"] += 1
    return _bind(node.op, *args, **attrs)


register(Op("cumprod_exclusive", "compute", lambda x, axis, reverse: (x.shape, x.dtype),
            run=_cumprod_exclusive_run, vjp=_cumprod_exclusive_vjp,
            jvp=_cumprod_exclusive_jvp, batch=_scan_batch,
            doc="product of the elements strictly before (reverse: after) each position"))


def _cumsum_run(out, x, axis, reverse):
    if reverse:  # flipped views: accumulate writes through them in place
        x, out = np.flip(x, axis), np.flip(out, axis)
    np.add.accumulate(x, axis=axis, out=out)


def _cumsum_vjp(g, node, active, x, ans, axis, reverse):
    from ..core.trace import bind

    return (bind("cumsum", g, axis=axis, reverse=not reverse),)


register(Op("cumsum", "compute", lambda x, axis, reverse: (x.shape, x.dtype),
            run=_cumsum_run, vjp=_cumsum_vjp, batch=_scan_batch,
            jvp=lambda ts, node, x, ans, axis, reverse: _bind("cumsum", ts[0], axis=axis,
                                                              reverse=reverse),
            doc="inclusive running sum along one axis (reverse: from the end)"))

def _cumprod_run(out, x, axis):
    np.multiply.accumulate(x, axis=axis, out=out)


def _cumprod_vjp(g, node, active, x, ans, axis):
    # d y_i / d x_j = prod_{k <= i, k != j} x_k (j <= i), so the cotangent of
    # x_j is prod_{k < j} x_k * S_j with S_j = g_j + x_{j+1} S_{j+1}: exact
    # with zeros, no division.
    from ..core.trace import bind

    left = bind("cumprod_exclusive", x, axis=axis, reverse=False)
    return (left * bind("cumprod_adjoint", g, x, axis=axis),)


def _cumprod_jvp(ts, node, x, ans, axis):
    # y_i = y_{i-1} x_i: dy_i = x_i dy_{i-1} + y_{i-1} dx_i, exact with zeros
    left = _bind("cumprod_exclusive", x, axis=axis, reverse=False)
    return _forward_scan(left * ts[0], x, axis)


register(Op("cumprod", "compute", lambda x, axis: (x.shape, x.dtype), run=_cumprod_run,
            vjp=_cumprod_vjp, jvp=_cumprod_jvp, batch=_scan_batch,
            doc="inclusive running product along one axis"))


def _cumprod_adjoint_run(out, g, x, axis):
    g, x, out = (np.moveaxis(v, axis, 0) for v in (g, x, out))
    n = x.shape[0]
    np.copyto(out[n - 1:], g[n - 1:])
    for j in range(n - 2, -1, -1):  # one slice at a time (views, never scalars)
        np.multiply(x[j + 1:j + 2], out[j + 1:j + 2], out=out[j:j + 1])
        np.add(out[j:j + 1], g[j:j + 1], out=out[j:j + 1])


def _cumprod_adjoint_vjp(gs, node, active, g, x, ans, axis):
    # S_j = sum_{k>=j} g_k prod_{j<l<=k} x_l is linear in g; its transpose is
    # the forward scan T_k = gs_k + x_k T_{k-1} (written as cumprod_adjoint
    # along the flipped axis, x moved one place), and dS_j/dx_i =
    # (prod_{j<l<i} x_l) S_i for j < i gives x's cotangent S_i T_{i-1}.
    from ..core.trace import bind

    t = _flip(bind("cumprod_adjoint", _flip(gs, axis), _shift(_flip(x, axis), axis, 1),
                   axis=axis), axis)
    return (t if active[0] else None, ans * _shift(t, axis, 1) if active[1] else None)


def _cumprod_adjoint_jvp(ts, node, g, x, ans, axis):
    # S_j = g_j + x_{j+1} S_{j+1}: dS_j = (dg_j + dx_{j+1} S_{j+1}) + x_{j+1} dS_{j+1}
    tg, tx = ts
    u = tg
    if tx is not None:
        moved = _shift(tx * ans, axis, -1)
        u = moved if u is None else u + moved
    return _bind("cumprod_adjoint", u, x, axis=axis)


register(Op("cumprod_adjoint", "compute", lambda g, x, axis: (x.shape, x.dtype),
            run=_cumprod_adjoint_run, vjp=_cumprod_adjoint_vjp, jvp=_cumprod_adjoint_jvp,
            batch=_scan_batch,
            doc="S_j = g_j + x_{j+1} S_{j+1} along axis, from the end (cumprod's reverse scan)"))
