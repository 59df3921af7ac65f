"""Storing an int64 at an address from compiled code: numba's loop driver
of a rolled loop sets the data address of a runner's view object before each
iteration (:func:`hybridad.backends.numba.link.loop_driver`)."""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["store_i64"]


@intrinsic
def store_i64(typingctx, address, value):
    """Store the integer ``value`` as an int64 at ``address``."""
    if not isinstance(address, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64 = context.get_value_type(types.int64)
        val = context.cast(builder, args[1], signature.args[1], types.int64)
        builder.store(val, builder.inttoptr(args[0], i64.as_pointer()))
        return context.get_dummy_value()

    return types.none(address, value), codegen
