"""What the benchmark scripts share: the checkout on ``sys.path``, and the
pieces that moved into the package (:mod:`hybridad.bench`, also behind
``python -m hybridad bench``), re-exported here under their old names.

Importing this module puts the repository holding these scripts first on
``sys.path`` (benchmark the checkout, not an older installed copy), then
imports :mod:`hybridad.bench.harness` (timing batches, the error measure, the
plain-text table, package versions, the JSON output), and :func:`installed_bytecode`
for the benchmarks that time fresh processes and the MLP workload
with its hand-written gradient from :mod:`hybridad.bench.workloads`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def use_checkout():
    """Put the repository holding these scripts first on ``sys.path`` when it
    holds the hybridad package (once)."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "hybridad" / "__init__.py").is_file() and sys.path[0] != str(checkout):
        sys.path.insert(0, str(checkout))


def installed_bytecode():
    """Compile the checkout's modules to bytecode (``__pycache__``) once, as
    ``pip install`` does: a fresh-process benchmark then measures what a user
    who installed the package meets, not the compiling of ~150 modules from
    source that a checkout imported under ``PYTHONDONTWRITEBYTECODE`` pays on
    every import (0.4 s)."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "hybridad"), quiet=1)


#: seconds numpy's BLAS threads keep spinning after a product (OpenBLAS waits
#: about 2^28 cycles before it sleeps): on 2 cores they take them from a parallel
#: plan's threads, which then ran 2x slower (a dense Hessian at n = 1000 timed
#: right after its numpy reference: 2.9 ms, against 1.5 ms later)
BLAS_SPIN_S = 0.2


def blas_settled():
    """Wait until numpy's BLAS threads sleep again: after a numpy reference
    or row, before a plan is timed."""
    import time

    time.sleep(BLAS_SPIN_S)


use_checkout()

from hybridad.bench.harness import (  # noqa: E402,F401
    balanced_orders, batch_ns, format_table, gc_disabled, relative_error, version, write_json)
from hybridad.bench.workloads import MLP_WIDTHS, mlp, mlp_numpy  # noqa: E402,F401
