"""``hybridad.scipy``: the public name of :mod:`hybridad.interop.scipy`."""

from .interop.scipy import *  # noqa: F403
from .interop.scipy import __all__, __doc__  # noqa: F401
