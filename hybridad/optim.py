"""Update rules fused into the backward sweep: ``compile(..., update=SGD(lr))``.

A rule emits its update as IR after the gradient graph: elementwise ops and
in-place adds (``iadd``) into the parameter and into the rule's state arrays
(preallocated in the plan).  :func:`hybridad.transforms.updates.schedule_updates` then moves each
parameter's update to the earliest point of the sweep where its gradient is
complete and nothing still reads the parameter's old value, so the gradient
buffer dies there and its memory is reused by the rest of the backward pass
(:meth:`Plan.explain` shows the arena).  The partition fuses the update with
the ops that produce the gradient: ``p -= lr * g`` becomes ``p[i] += ...``
inside the loop that computes ``g``, with no gradient array at all when
nothing else reads it.

Every rule gives the same result as ``plan.gradient`` followed by the
update written with numpy, to rounding (tested).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SGD", "Adam", "Momentum", "UpdateRule"]


def _positive(name, value, upper=None):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number; got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0 or (upper is not None and value >= upper):
        bound = f"in (0, {upper})" if upper is not None else "positive and finite"
        raise ValueError(f"{name} must be {bound}; got {value!r}")
    return value


class UpdateRule:
    """An optimizer step applied in place to each differentiated parameter.

    Subclasses define :attr:`state` (names of per-parameter state arrays,
    zero at the start), :meth:`hyper` (scalars that change with the step
    count ``t``, handed to the plan as a small array each step) and
    :meth:`emit` (the update, written with numpy operations on tracers).

    Hyperparameters are live: every one reaches the compiled plan through
    :meth:`hyper`, read at each step, so setting one between steps
    (``plan.update.lr = 0.5 * plan.update.lr``, a schedule) changes the next
    step -- for every rule.  A new value is checked as the constructor checks
    it (:attr:`BOUNDS`)."""

    state: tuple = ()
    #: hyperparameter -> exclusive upper bound (None: any positive finite number)
    BOUNDS: dict = {}

    def __setattr__(self, name, value):
        if name in self.BOUNDS:
            value = _positive(name, value, upper=self.BOUNDS[name])
        object.__setattr__(self, name, value)

    def hyper(self, t):
        """Per-step scalars (a tuple of floats) for step ``t`` (1, 2, ...)."""
        return ()

    def shared(self, hyper):
        """Scalars every parameter's update uses, from the tracer of
        :meth:`hyper`'s values (computed once per step, not per parameter)."""
        return ()

    def emit(self, p, g, states, shared):
        """Emit the in-place update of parameter ``p`` from its gradient ``g``.

        ``states`` are the parameter's state arrays (tracers, updated in place
        with ``iadd``), ``shared`` what :meth:`shared` returned.  Returns the
        nodes that write (``iadd`` results)."""
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _iadd(acc, x):
    from .core.trace import bind

    return bind("iadd", acc, x)


class SGD(UpdateRule):
    """``p -= lr * g``.

    Parameters
    ----------
    lr : float
        Learning rate (positive, finite).
    """

    BOUNDS = {"lr": None}

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def hyper(self, t):
        return (self.lr,)

    def shared(self, hyper):
        return (-hyper[0],)

    def emit(self, p, g, states, shared):
        (neg_lr,) = shared
        return [_iadd(p, neg_lr * g)]


class Momentum(UpdateRule):
    """Heavy ball: ``v = momentum * v + g``; ``p -= lr * v``.

    Parameters
    ----------
    lr : float
    momentum : float, default 0.9
        In (0, 1).
    """

    state = ("velocity",)

    BOUNDS = {"lr": None, "momentum": 1.0}

    def __init__(self, lr: float, momentum: float = 0.9) -> None:
        self.lr = lr
        self.momentum = momentum

    def hyper(self, t):
        return (self.lr, self.momentum - 1.0)

    def shared(self, hyper):
        return -hyper[0], hyper[1]  # -lr, momentum - 1

    def emit(self, p, g, states, shared):
        (v,) = states
        neg_lr, decay = shared
        v1 = _iadd(v, decay * v + g)
        return [v1, _iadd(p, neg_lr * v1)]


class Adam(UpdateRule):
    """Adam (Kingma & Ba), bias-corrected:
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``p -= lr_t m / (sqrt(v) + eps_t)`` with ``lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)``
    and ``eps_t = eps sqrt(1 - b2^t)`` (the paper's efficient form).

    Parameters
    ----------
    lr : float, default 1e-3
    b1, b2 : float, default 0.9, 0.999
        In (0, 1).
    eps : float, default 1e-8
    """

    state = ("m", "v")

    BOUNDS = {"lr": None, "b1": 1.0, "b2": 1.0, "eps": None}

    def __init__(self, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8) -> None:
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps

    def hyper(self, t):
        c2 = math.sqrt(1.0 - self.b2 ** t)
        return (self.lr * c2 / (1.0 - self.b1 ** t), self.eps * c2, 1.0 - self.b1,
                1.0 - self.b2)

    def shared(self, hyper):
        return -hyper[0], hyper[1], hyper[2], hyper[3]  # -lr_t, eps_t, 1 - b1, 1 - b2

    def emit(self, p, g, states, shared):
        m, v = states
        neg_lr, eps, c1, c2 = shared
        m1 = _iadd(m, c1 * (g - m))
        v1 = _iadd(v, c2 * (g * g - v))
        return [m1, v1, _iadd(p, neg_lr * m1 / (np.sqrt(v1) + eps))]
