"""Adds into shifted slices of one 1-D buffer -- a stencil's gradient,
``g[:-1] += a`` and ``g[1:] += b`` -- as one loop over the buffer, each
element gathering what each slice adds there (in the slices' order: the
sums of one loop per slice, to the bit -- programs are compiled without
contraction, see program.py).  One loop per slice read and wrote the buffer
once each; one loop over the slices' bodies would carry a dependence from
each iteration to the next (two threads on one element in a ``prange``).
Gathered, a loop is race-free, so parallel and vectorized.

Two forms: ``region_acc`` chains (the gradient computed in the loop,
:func:`gather_starts`, :func:`gather_lines`) and ``scatter`` /
``scatter_add`` chains (stored partials placed into a zero buffer,
:func:`scatter_chains`, :func:`scatter_gather_lines`).  Pure text, as
:mod:`.loops`.
"""

from __future__ import annotations

import re

from ..scalar import render_region, safe_product

__all__ = ["gather_lines", "gather_starts", "scatter_chains", "scatter_gather_lines"]


def gather_starts(members):
    """The start of each ``region_acc`` member's slice (a list, in the
    members' order) when, over a 1-D body, they all add into one 1-D target
    through contiguous slices of the body's length (``g[:-1] += a``,
    ``g[1:] += b``: a stencil's gradient), else None.  Such adds run as one
    loop over the target's elements, each gathering what every slice adds
    there (:func:`gather_lines`)."""
    body = members[0].attrs["body"].shape
    if len(body) != 1:
        return None
    starts, target = [], None
    for m in members:
        t = m.args[0]
        root = t
        while root.op == "region_acc":  # (a chain of adds into one buffer)
            root = root.args[0]
        if len(t.shape) != 1 or (target is not None and root.id != target):
            return None
        target = root.id
        lo = _slice_start(m.attrs.get("index"), body[0], t.shape[0])
        if lo is None:
            return None
        starts.append(lo)
    return starts


def _run_loop(w, a, b, lines):
    """Emit ``lines`` as the loop over positions ``a`` to ``b`` of a gather
    (:meth:`.loops.LoopWriter.nest`: a ``prange`` when long, vmath's inlined
    functions), counting from 0: in a prange kernel, whose bounds are
    loaded, an index ``i0 - 1`` could be negative for all LLVM knows, and
    numba's wraparound of negative indices then stays in every load,
    unvectorized -- so every index is ``i0`` plus a non-negative offset."""
    w.nest((b - a,), lines, parallel=True)


def gather_lines(w, length, writes, regions, at, read, consts, fresh=None):
    """``region_acc`` members adding into one 1-D target through shifted
    slices (:func:`gather_starts`; ``at``: each slice's start, by its index
    text in ``writes``) as loops over the target's elements, one per run of
    positions that the same slices cover: each position adds what each
    slice's bodies give there, evaluated at the position less the slice's
    start, in the members' order -- the sums the separate
    loops made, and no element written by two iterations: race-free, so a
    ``prange``, and vectorized (the separate loops of a chain into one
    buffer each read and wrote all of it).

    ``fresh``: the target's length where it holds nothing yet (a ``zeros``
    buffer whose fill was left to this loop): each element is written, not
    added to -- the first slice's term as it is, zero where no slice adds.
    The sums are the same but for the sign of a zero (``0.0 + -0.0``), and
    the buffer is read and written once instead of filled, then read and
    written."""
    slices = [(at[where], target, ks) for (target, where), ks in writes.items()]
    cuts = sorted({lo for lo, _, _ in slices} | {lo + length for lo, _, _ in slices} |
                  ({0, fresh} if fresh is not None else set()))
    for a, b in zip(cuts, cuts[1:], strict=False):
        active = [(lo, target, ks) for lo, target, ks in slices if lo <= a and b <= lo + length]
        lines, stores = [], []
        for j, (lo, _, ks) in enumerate(active):
            mine, terms = [], []
            for key, first in regions.items():
                wanted = [k for rk, k in ks if rk == key]
                if not wanted:
                    continue
                body, mode = first.attrs["body"], first.attrs["mode"]
                reads = [read(x) for x in first.args[1:1 + len(body.inputs)]]
                seeds = sorted(set(wanted)) if mode == "vjp" else []
                sb = render_region(body, reads, seeds, consts, need_value=mode != "vjp")
                mine += sb.lines
                for k in wanted:
                    if mode != "vjp":
                        terms.append(sb.value)
                    elif sb.partials[k] != "0":
                        terms.append(safe_product(read(first.args[-1]), sb.partials[k],
                                                  body.nodes[-1].dtype, consts))
            if not terms:
                continue
            mine.append(f"_t{j} = " + " + ".join(f"({t})" for t in terms))
            lines.append(f"_j{j} = i0 + {a - lo}" if a > lo else f"_j{j} = i0")
            lines += [re.sub(r"\bi0\b", f"_j{j}", line) for line in mine]
            stores.append(f"_t{j}")
        at_ = f"[i0 + {a}]" if a else "[i0]"
        if not stores:
            if fresh is not None:  # (no slice adds here: the fill's zero)
                target = slices[0][1]
                _run_loop(w, a, b, [f"{target}{at_} = {consts.add(_zero_of(regions))}"])
            continue
        target = active[0][1]
        total = None if fresh is not None else f"{target}{at_}"
        for t in stores:  # (in the members' order: the separate loops' sums)
            total = t if total is None else f"({total} + {t})"
        _run_loop(w, a, b, [*lines, f"{target}{at_} = {total}"])


def _zero_of(regions):
    """The zero of the target's dtype, a region's result type (what its
    ``zeros`` fill would have written)."""
    first = next(iter(regions.values()))
    return first.args[0].dtype.type(0)


def _slice_start(index, length, n):
    """The start of ``index`` -- one contiguous slice of a 1-D array of ``n``
    elements -- covering ``length`` elements, or None for any other index."""
    if index is None:
        return 0 if length == n else None
    if len(index) != 1 or not isinstance(index[0], slice):
        return None
    lo, hi, step = index[0].indices(n)
    return lo if step == 1 and hi - lo == length else None


def scatter_chains(nodes):
    """first node id -> ``[scatter, scatter_add, ...]``: a ``scatter`` of a
    1-D value into a zero 1-D buffer through a contiguous slice followed, node
    after node, by ``scatter_add``s into that buffer through contiguous
    slices (a stencil's stored partials placed into its gradient), two or
    more in all."""
    chains, current = {}, None
    for n in nodes:
        if current is not None and n.op == "scatter_add" and n.args[0] is current[-1] and \
                len(n.shape) == 1 and len(n.args[1].shape) == 1 and \
                _slice_start(n.attrs["index"], n.args[1].shape[0], n.shape[0]) is not None:
            current.append(n)
            continue
        if current is not None and len(current) > 1:
            chains[current[0].id] = current
        current = None
        if n.op == "scatter" and len(n.shape) == 1 and len(n.args[0].shape) == 1 and \
                _slice_start(n.attrs["index"], n.args[0].shape[0], n.shape[0]) is not None:
            current = [n]
    if current is not None and len(current) > 1:
        chains[current[0].id] = current
    return chains


def scatter_gather_lines(w, members, names, zero):
    """A :func:`scatter_chains` chain as loops over its buffer, one per run of
    positions the same slices cover: the scatter's value where it places one
    (else ``zero``, the buffer's fill), then each add in order."""
    n = members[0].shape[0]
    target = names[members[0].id]
    parts = []  # (start, length, name of the value placed or added)
    for k, m in enumerate(members):
        g = m.args[0] if k == 0 else m.args[1]
        parts.append((_slice_start(m.attrs["index"], g.shape[0], n), g.shape[0], names[g.id]))
    cuts = sorted({0, n} | {lo for lo, _, _ in parts} | {lo + size for lo, size, _ in parts})
    for a, b in zip(cuts, cuts[1:], strict=False):
        total = None
        for k, (lo, size, name) in enumerate(parts):
            if lo <= a and b <= lo + size:
                read = f"{name}[i0 + {a - lo}]" if a > lo else f"{name}[i0]"
                total = read if k == 0 else f"({zero if total is None else total} + {read})"
        at = f"[i0 + {a}]" if a else "[i0]"
        _run_loop(w, a, b, [f"{target}{at} = {zero if total is None else total}"])
