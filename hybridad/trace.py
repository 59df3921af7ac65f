"""``hybridad.trace`` as it was before the package was laid out in folders
(:mod:`hybridad.frontend.trace` and :mod:`hybridad.frontend.tracer`), for code
that imports ``Tracer`` or ``Trace`` from here."""

from .frontend.trace import Trace, bind, current_trace
from .frontend.tracer import Tracer

__all__ = ["Trace", "Tracer", "bind", "current_trace"]
