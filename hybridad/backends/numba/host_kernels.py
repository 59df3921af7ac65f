"""Ops that run Python on host arrays, as names in the generated source of a
numba program: each a driver bound at module level and called in an
object-mode block, into the node's buffer (:data:`hybridad.ops.host.HOST_OPS`)."""

from __future__ import annotations

__all__ = ["HostCall", "HostRun", "HostUfunc", "host_call", "host_run", "host_transform",
           "host_ufunc"]


class HostUfunc:
    """A ufunc without rules (op ``host_ufunc``) as a name in generated source,
    bound at module level from its import path (registered like a user
    kernel: :meth:`hybridad.backends.scalar.Constants.kernel`)."""

    cacheable = True

    def __init__(self, path):
        self.path = path
        self.ident = "_hu_" + "".join(c if c.isalnum() else "_" for c in path)

    def header_line(self):
        return (f"from numba import objmode as _objmode; from hybridad.ops.host import resolve "
                f"as _hu_resolve; {self.ident} = _hu_resolve({self.path!r})")

    def driver(self):
        from ...ops.host import resolve

        return resolve(self.path)


def host_ufunc(e):  # numpy's own ufunc, in object mode, into the node's buffer
    name = e.consts.kernel(HostUfunc(e.node.attrs["ufunc"]))
    e.w.emit("with _objmode():")
    e.w.emit(f"    {name}({', '.join(e.a)}, out={e.out})")


class HostCall:
    """A library function without rules (op ``host_call``) as a name in
    generated source: a driver ``(out, *arrays)`` rebuilt at module level from
    the node's import path, template and item (see :mod:`hybridad.ops.host`)."""

    cacheable = True

    def __init__(self, node):
        import hashlib
        import pickle

        self.attrs = (node.attrs["func"], node.attrs["template"], node.attrs["item"],
                      node.attrs["where"])
        self.blob = pickle.dumps(self.attrs, protocol=4).hex()
        digest = hashlib.sha1(self.blob.encode()).hexdigest()[:12]
        self.ident = "_hc_" + "".join(c if c.isalnum() else "_" for c in self.attrs[0]) + \
            "_" + digest

    def header_line(self):
        return (f"from numba import objmode as _objmode; from hybridad.ops.host import driver "
                f"as _hc_driver; {self.ident} = _hc_driver(bytes.fromhex({self.blob!r}))")

    def driver(self):
        from ...ops.host import driver

        return driver(bytes.fromhex(self.blob))


def host_call(e):  # the library function, in object mode, into the node's buffer
    name = e.consts.kernel(HostCall(e.node))
    e.w.emit("with _objmode():")
    e.w.emit(f"    {name}({', '.join([e.out, *e.a])})")


class HostRun:
    """A node whose op runs Python on host arrays (an ODE solved by scipy,
    :mod:`hybridad.ops.ode`) as a name in generated source: its op's
    reference ``run`` with the node's attributes, rebuilt at module level
    from their pickle (:func:`hybridad.ops.host.op_driver`), with the
    backend's ``extra`` keywords."""

    cacheable = True

    def __init__(self, node, extra):
        import hashlib
        import pickle

        self.blob = pickle.dumps((node.op, dict(node.attrs), dict(extra)), protocol=4).hex()
        self.ident = f"_hr_{node.op}_" + hashlib.sha1(self.blob.encode()).hexdigest()[:12]

    def header_line(self):
        return (f"from numba import objmode as _objmode; from hybridad.ops.host import "
                f"op_driver as _hr_driver; {self.ident} = _hr_driver(bytes.fromhex({self.blob!r}))")

    def driver(self):
        from ...ops.host import op_driver

        return op_driver(bytes.fromhex(self.blob))


def host_run(e):  # the op's Python run, in object mode, into the node's buffer
    # (the body of an ODE, an integrand, a root's function evaluated compiled:
    # hybridad.plans.ode_rhs)
    _objmode_run(e, {"evaluator": "numba"})


def host_transform(e):  # a library's transform (pocketfft's FFT), in object mode
    _objmode_run(e, {})


def _objmode_run(e, extra):
    name = e.consts.kernel(HostRun(e.node, extra))
    e.w.emit("with _objmode():")
    e.w.emit(f"    {name}({', '.join([e.out, *e.a])})")
