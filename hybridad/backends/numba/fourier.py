"""The FFT ops (:mod:`hybridad.ops.fft`) in generated source: pocketfft's loop
called on each line (:func:`hybridad.ops.fft_kernels.pocketfft_lines`), its
arguments in the op's workspace; the op's reference run in object mode where
those loops are not available (:data:`hybridad.ops.fft_kernels.AVAILABLE`).

The kernel takes the lines as one run of equal steps: the operand's and the
result's last leading axis.  Leading axes before it are loops of the
generated source, each iteration a view one axis shorter.
"""

from __future__ import annotations

import numpy as np

from .host_kernels import host_transform
from .loops import here

__all__ = ["PocketLines", "fourier"]


class PocketLines:
    """:func:`hybridad.ops.fft_kernels.pocketfft_lines` as a name in generated
    source (registered like a user kernel:
    :meth:`hybridad.backends.scalar.Constants.kernel`)."""

    cacheable = True
    ident = "_pf_lines"

    def header_line(self):
        return f"from hybridad.ops.fft_kernels import pocketfft_lines as {self.ident}"

    def driver(self):
        from ...ops.fft_kernels import pocketfft_lines

        return pocketfft_lines


def fourier(e):
    """Emit ``e.node`` (op ``fft``, ``rfft`` or ``irfft``)."""
    from ...ops import fft_kernels
    from ...ops.fft import WORK_BYTES, factor, length_of

    if not fft_kernels.AVAILABLE:
        host_transform(e)
        return
    node, x = e.node, e.node.args[0]
    complex_in, complex_out = node.op != "rfft", node.op != "irfft"
    inverse = bool(node.attrs.get("inverse", False))
    length = length_of(node.op, x.shape, node.attrs.get("n"))
    fct = float(factor(node.op, node.dtype, node.attrs["norm"], length, inverse))
    code, flag = fft_kernels.ufunc_code(node.op, inverse, length, node.dtype)
    itemsize = np.dtype(node.dtype).itemsize
    lead = len(node.shape) - (2 if complex_out else 1)
    outer = node.shape[:max(lead - 1, 0)]
    at = here(len(outer), "f")[1:-1] if outer else ""
    xv, ov = (f"{name}[{at}]" if outer else name for name in (e.a[0], e.out))
    axis_in = x.shape[-2 if complex_in else -1]
    axis_out = node.shape[-2 if complex_out else -1]
    ax = 1 if lead else 0  # (the transformed axis of a line's view)
    fx, fo = f"_fx{node.id}", f"_fo{node.id}"
    lines = node.shape[lead - 1] if lead else 1
    line_in, line_out = (f"{fx}.strides[0]", f"{fo}.strides[0]") if lead else ("0", "0")
    name = e.consts.kernel(PocketLines())
    check = [f"if {fx}.strides[-1] != {itemsize}:",  # (an operand's parts side by side)
             f"    raise ValueError('{node.op}: the operand\\'s parts are not adjacent')"] \
        if complex_in else []
    body = [f"{fx} = {xv}", f"{fo} = {ov}", *check,
            f"{name}({code}, {flag}, {fx}, {fo}, {e.names[('scratch', node.id)]}, "
            f"{(WORK_BYTES - 8) // itemsize}, {fct!r}, {lines}, {axis_in}, {axis_out}, "
            f"{line_in}, {fx}.strides[{ax}], {line_out}, {fo}.strides[{ax}])"]
    e.w.nest(outer, body, prefix="f")
