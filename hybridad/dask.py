"""``hybridad.dask``: the public name of :mod:`hybridad.interop.dask`."""

from .interop.dask import *  # noqa: F403
from .interop.dask import __all__, __doc__  # noqa: F401
