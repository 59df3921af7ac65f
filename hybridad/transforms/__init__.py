"""Stage 4, the graph transforms, graph to graph: :mod:`.autodiff` (the backward pass and
forward tangents as IR), :mod:`.batching` (chunks of tangents or cotangents),
:mod:`.partition` (fused elementwise regions), :mod:`.memory` (liveness and
the arena)."""
