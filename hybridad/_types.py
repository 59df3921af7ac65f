"""Type aliases of the public API's hints (``py.typed``; checked by mypy in
``tests/test_typing.py``).  Only imported under ``TYPE_CHECKING`` or by
annotations, which ``from __future__ import annotations`` keeps as strings:
nothing here runs on a call.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Optional, Union

import numpy as np
import numpy.typing as npt

#: positional arguments that are differentiated
ArgNums = Union[int, "tuple[int, ...]"]
#: a plan's backend; None picks "cupy" for cupy arguments, else "numba"
Backend = Optional[Literal["numba", "numpy", "cupy"]]
#: a Jacobian's mode
JacobianMode = Literal["auto", "forward", "reverse"]
#: a differentiable argument: an array, or a tuple/list/dict of them
Pytree = Any
#: the user's function: plain numpy code
Function = Callable[..., Any]
#: a float array (value, gradient, Hessian buffers)
FloatArray = npt.NDArray[np.floating[Any]]

__all__ = ["ArgNums", "Backend", "FloatArray", "Function", "JacobianMode", "Pytree"]
