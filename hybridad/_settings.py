"""Per-thread build switches: set by :class:`hybridad.plans.plan.Plan` around the
stages that build a plan, read by the stage they steer (``serial_loops`` by
the loop writer, ``recompute_partials`` by the region VJP)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

_local = threading.local()


def enabled(name):
    """Whether switch ``name`` is on in this thread."""
    return getattr(_local, name, False)


@contextmanager
def switch(name, on=True):
    """Turn switch ``name`` on (or off) in this thread while active."""
    before = enabled(name)
    setattr(_local, name, bool(on))
    try:
        yield
    finally:
        setattr(_local, name, before)
