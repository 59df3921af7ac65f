"""How buffers look to the generated numba code: which views become copies
(:func:`materialize_for_numba`), scratch buffers, and each buffer's layout
(:func:`numba_layouts`)."""

from __future__ import annotations

from ...ops import REGISTRY
from ...transforms.memory import layout_proto
from .reduce import reduction_scratch
from .runner import view_at

__all__ = ["materialize_for_numba", "numba_layouts", "scratch_for_numba", "view_statement"]


def materialize_for_numba(nodes):
    """Ids of view nodes to copy into buffers: indexing views that are not one
    contiguous piece of a C array, and reshapes of operands numba does not
    type as C-contiguous.

    A contiguous slice (``x[1:]``, ``A[2:5]``, ``A[i]``) of a C array whose
    data address the generated code knows (an argument, a buffer, a captured
    constant passed by object, or such a view of one) stays a view: the
    address plus an offset, typed C-contiguous -- no copy.  So does a strided
    slice of a C array (``A[:, 1:]``, ``x[::2]``) that only fused regions and
    concatenations (``np.roll``) read: their loops index it in place (a numba
    array view, typed ``"A"``)."""
    from . import rt

    objects = rt.ABI is not None  # arrays arrive by object: their addresses are known
    layout, addressed, out = {}, {}, set()
    readers = {}
    for n in nodes:
        for i, a in enumerate(n.args):
            readers.setdefault(a.id, []).append((n, i))
    for n in nodes:
        if n.op == "input":
            layout[n.id], addressed[n.id] = "C", objects
        elif n.op == "const":
            v = n.attrs["value"]
            layout[n.id] = "C" if v.flags.c_contiguous else "A"
            addressed[n.id] = objects and v.flags.c_contiguous and v.flags.aligned and \
                v.dtype.isnative and not (n.is_literal and n.size == 1)
        elif REGISTRY[n.op].kind == "inplace":
            layout[n.id], addressed[n.id] = layout[n.args[0].id], addressed[n.args[0].id]
        elif n.op == "reshape" and layout[n.args[0].id] == "C":
            layout[n.id], addressed[n.id] = "C", addressed[n.args[0].id]
        elif n.op == "getitem" and addressed[n.args[0].id] and \
                contiguous_getitem_offset(n) is not None:
            layout[n.id], addressed[n.id] = "C", True
        elif n.op == "getitem" and strided_in_place(n, layout, readers):
            layout[n.id], addressed[n.id] = "A", False
        elif n.op in ("transpose", "broadcast_to"):
            layout[n.id], addressed[n.id] = "A", False
        else:
            if REGISTRY[n.op].kind == "view":
                out.add(n.id)
            layout[n.id], addressed[n.id] = "C", True
    return out


def strided_in_place(node, layout, readers):
    """Whether getitem ``node`` (slices and ints of a C array) can stay a numba
    view that regions index in place: every reader is a fused region reading it
    as an operand (not a ``region_acc`` target) or a ``concatenate`` (whose
    loops index each operand element by element)."""
    index = node.attrs["index"]
    if layout.get(node.args[0].id) != "C" or not node.shape or \
            not all(isinstance(i, (slice, int)) for i in index):
        return False
    users = readers.get(node.id, [])
    return bool(users) and all(u.op in ("region", "concatenate") or
                               u.op == "region_acc" and i > 0 for u, i in users)


def index_source(index):
    """Python source of a basic index of slices and ints (``1:, ::2, 3``)."""
    def one(i):
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if i.step is not None else "")
        return str(i)
    return ", ".join(one(i) for i in index)


def contiguous_getitem_offset(node):
    """Byte offset of ``getitem`` node's view into its C-contiguous operand
    when that view is itself C-contiguous, else None."""
    proto = layout_proto(node.args[0])  # C strides, no memory
    view = REGISTRY["getitem"].view(proto, **node.attrs)
    if not view.flags.c_contiguous or view.size == 0:
        return None
    return int(view.__array_interface__["data"][0] - proto.__array_interface__["data"][0])


def scratch_for_numba(nodes):
    """node id -> (dtype, elements) of scratch the generated code needs: a
    block per thread for two-phase full reductions, the float64 accumulator
    or the compensation of a reduction over leading axes (:mod:`.reduce`)."""
    import numba

    out = {}
    for n in nodes:
        need = reduction_scratch(n, numba.config.NUMBA_NUM_THREADS)
        if need is not None:
            out[n.id] = need
    return out


def numba_layouts(nodes, memplan):
    """node id -> the layout numba types its array with: ``"C"``, ``"F"`` or ``"A"``.

    Inputs arrive C-contiguous (the trampoline stages others), buffers are C,
    a 2-D transpose swaps C and F; other views are ``"A"``.  BLAS calls need
    ``"C"`` or ``"F"`` operands.
    """
    out = {}
    for n in nodes:
        storage = memplan.storage[n.id]
        if storage in ("input", "buffer"):
            out[n.id] = "C"
        elif storage == "const":
            v = n.attrs["value"]
            out[n.id] = "C" if v.flags.c_contiguous else "F" if v.flags.f_contiguous else "A"
        elif storage == "alias":
            out[n.id] = out[memplan.alias_of[n.id].id]
        elif n.op == "reshape":
            out[n.id] = "C"  # a reshape view is only made of a C operand
        elif n.op == "getitem":  # a contiguous piece of a C array, or a strided view
            out[n.id] = "C" if contiguous_getitem_offset(n) is not None else "A"
        elif n.op == "transpose" and len(n.shape) == 2 and n.attrs["axes"] == (1, 0):
            out[n.id] = {"C": "F", "F": "C"}.get(out[n.args[0].id], "A")
        else:
            out[n.id] = "A"
    return out


def view_statement(node, src, var, addresses):
    """The source binding ``var`` to view ``node`` of ``src`` (a view that
    :func:`materialize_for_numba` kept): from the data address where ``src``'s
    is known (``addresses``: variable -> (address, shape, dtype, order); the
    view's is added) -- a C reshape, a contiguous slice, a 2-D transpose as F
    -- else a numba array view."""
    c_source = src in addresses and addresses[src][3] == "C"
    op, attrs = node.op, node.attrs
    if c_source and op == "reshape":  # a C array's data, reshaped
        addresses[var] = (addresses[src][0], node.shape, node.dtype, "C")
    elif c_source and op == "getitem" and (off := contiguous_getitem_offset(node)) is not None:
        addresses[var] = (f"{addresses[src][0]} + {off}" if off else addresses[src][0],
                          node.shape, node.dtype, "C")
    elif c_source and op == "transpose" and attrs["axes"] == (1, 0):  # as F
        addresses[var] = (addresses[src][0], node.shape, node.dtype, "F")
    if var in addresses:
        return f"{var} = " + view_at(*addresses[var])
    if op == "reshape":
        return f"{var} = {src}.reshape({attrs['shape']!r})"
    if op == "transpose" and attrs["axes"] == (1, 0):
        return f"{var} = {src}.T"  # typed F-contiguous (BLAS-ready) by numba
    if op == "transpose":
        return f"{var} = np.transpose({src}, {attrs['axes']!r})"
    if op == "broadcast_to":
        return f"{var} = np.broadcast_to({src}, {attrs['shape']!r})"
    if op == "getitem":  # strided, read in place by regions (materialize_for_numba)
        return f"{var} = {src}[{index_source(attrs['index'])}]"
    raise AssertionError(f"view {op} should have been materialized")
