"""The transforms stage, graph to graph: :mod:`.autodiff` (the backward pass and
forward tangents as IR), :mod:`.batching` (chunks of tangents or cotangents),
:mod:`.partition` (fused elementwise regions), :mod:`.memory` (liveness and
the arena)."""

from . import costs as _costs  # noqa: F401  (hands the cost model to the region VJPs)
