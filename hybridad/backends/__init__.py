"""Backends: turn a planned graph into something that runs.

* :mod:`.numpy_backend` -- the reference executor (always available, the oracle).
"""
