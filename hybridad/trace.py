"""``hybridad.trace`` as it was before the package was laid out in folders
(:mod:`hybridad.core.trace` and :mod:`hybridad.core.tracer`), for code
that imports ``Tracer`` or ``Trace`` from here."""

from .core.trace import Trace, bind, current_trace
from .core.tracer import Tracer

__all__ = ["Trace", "Tracer", "bind", "current_trace"]
