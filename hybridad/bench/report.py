"""The suite's report: the tables of a run and its goals summary, as text.

:func:`format_report` prints one table per workload (the columns of
:data:`COLUMNS`, with a ``dtype`` column when the run has dtypes other than
float64), the notes, and then the goals summary (:func:`goals`,
:func:`format_goals`).

Goals: on every ``gradient`` workload, size
and dtype, hybridad's default plan (the ``hybridad`` row) should take at
most :data:`GOAL_VS_JAX` times the ``jax.jit`` median and at most
:data:`GOAL_VS_NUMPY` times the ``hand numpy`` median, and at most
:data:`GOAL_VS_SERIAL` times the median of the same function's plan built
with ``parallel=False`` (the ``hybridad serial`` row).  Ratios of medians,
for every such row of the run, none left out; a comparison whose row is
missing (a peer not installed or not asked for) is None and counts as
neither met nor missed.  A miss is flagged ``overlap`` when the two rows'
min-max ranges overlap: within the run's own noise.

Imports numpy only.
"""

from __future__ import annotations

import numpy as np

from . import harness

GOAL_VS_JAX = 1.0  # hybridad / jax.jit
GOAL_VS_NUMPY = 1.0  # hybridad / hand numpy
GOAL_VS_SERIAL = 1.2  # hybridad (default plan) / hybridad serial (parallel=False)
#: (key of a goals row, the compared row's impl, the goal, the miss's short name)
GOALS = (("vs_jax", "jax.jit", GOAL_VS_JAX, "jax.jit"),
         ("vs_numpy", "hand numpy", GOAL_VS_NUMPY, "numpy"),
         ("vs_serial", "hybridad serial", GOAL_VS_SERIAL, "serial"))


def size_label(size_name, size):
    """``n=10^4`` for powers of ten from 1000, else ``n=500``."""
    exp = round(np.log10(size)) if size > 0 else 0
    return f"{size_name}=10^{exp}" if size >= 1000 and 10**exp == size else f"{size_name}={size}"


# --- goals ------------------------------------------------------------------------------------


def goals(doc):
    """The goals summary of a run's document: one dict per (workload, size, dtype).

    Parameters
    ----------
    doc : dict
        :func:`hybridad.bench.suite.run`'s document (``"workloads"``).

    Returns
    -------
    list of dict
        For every ``gradient`` workload, size and dtype with a ``hybridad``
        row: ``workload``, ``size``, ``size_name``, ``dtype``, the medians
        ``hybridad_s``, ``jax_s``, ``numpy_s``, ``serial_s`` (None where
        the row is missing), the ratios ``vs_jax``, ``vs_numpy``,
        ``vs_serial`` (hybridad's median over the other's), ``misses``
        (the short names of the goals missed: ``jax.jit``, ``numpy``,
        ``serial``), ``overlap`` (those of the misses whose two rows'
        min-max ranges overlap) and ``met`` (no miss).
    """
    out = []
    for name, w in doc["workloads"].items():
        if w.get("kind", "gradient") != "gradient":
            continue
        by_key = {}
        for r in w["rows"]:
            by_key.setdefault((r["size"], r.get("dtype", "float64")), {})[r["impl"]] = r
        for (size, dtype), rows in by_key.items():
            ha = rows.get("hybridad")
            if ha is None:
                continue
            entry = {"workload": name, "size": size, "size_name": w["size_name"],
                     "dtype": dtype, "hybridad_s": ha["median_s"]}
            misses, overlap = [], []
            for key, impl, goal, short in GOALS:
                other = rows.get(impl)
                entry[{"vs_jax": "jax_s", "vs_numpy": "numpy_s",
                       "vs_serial": "serial_s"}[key]] = other and other["median_s"]
                ratio = None if other is None else ha["median_s"] / other["median_s"]
                entry[key] = ratio
                if ratio is not None and ratio > goal:
                    misses.append(short)
                    if ha["min_s"] <= other["max_s"]:
                        overlap.append(short)
            entry.update(misses=misses, overlap=overlap, met=not misses)
            out.append(entry)
    return out


def _ratio_cell(ratio, goal):
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" + (" *" if ratio > goal else "")


def format_goals(rows):
    """The goals summary as text: a table and one line of totals."""
    if not rows:
        return "goals: no gradient workload with a hybridad row in this run"
    table = [{"workload": g["workload"], "size": size_label(g["size_name"], g["size"]),
              "dtype": g["dtype"], "hybridad": harness.format_time(g["hybridad_s"]),
              "jax": _ratio_cell(g["vs_jax"], GOAL_VS_JAX),
              "numpy": _ratio_cell(g["vs_numpy"], GOAL_VS_NUMPY),
              "serial": _ratio_cell(g["vs_serial"], GOAL_VS_SERIAL),
              "goals": "met" if g["met"] else "MISS " + ", ".join(
                  m + ("?" if m in g["overlap"] else "") for m in g["misses"])}
             for g in rows]
    columns = (("workload", "workload", "{}"), ("size", "size", "{}"), ("dtype", "dtype", "{}"),
               ("hybridad", "hybridad", "{}"), ("/ jax.jit", "jax", "{}"),
               ("/ hand numpy", "numpy", "{}"), ("/ serial", "serial", "{}"),
               ("goals", "goals", "{}"))
    missed = sum(not g["met"] for g in rows)
    counted = {short: sum(short in g["misses"] for g in rows) for _, _, _, short in GOALS}
    return "\n".join([
        f"goals: hybridad's median over jax.jit's <= {GOAL_VS_JAX:g} and over "
        f"hand numpy's <= {GOAL_VS_NUMPY:g}; default plan over parallel=False <= "
        f"{GOAL_VS_SERIAL:g}; * and MISS: over its goal, ?: the two rows' min-max ranges "
        "overlap (within noise)",
        harness.format_table(table, columns, {"workload", "size", "dtype", "goals"}),
        f"{missed} of {len(rows)} rows miss a goal (jax.jit: {counted['jax.jit']}, "
        f"hand numpy: {counted['numpy']}, serial: {counted['serial']})"])


# --- tables ------------------------------------------------------------------------------------


def format_bytes(value):
    """``0``, ``812 B``, ``31.3 kB``, ``8.00 MB`` (decimal units)."""
    if value is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B" if value else "0"


_TIMES = (  # (header, row key, format): the columns every table opens with
    ("size", "size_label", "{}"),
    ("impl", "impl", "{}"),
    ("median", "median_s", harness.format_time),
    ("min", "min_s", harness.format_time),
    ("max", "max_s", harness.format_time),
)
COLUMNS = (
    *_TIMES,
    ("x numba", "ratio_vs_numba", "{:.2f}"),
    ("grad/f", "grad_f_ratio", "{:.2f}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("bytes/call", "bytes_per_call", format_bytes),
    ("first call", "first_call_s", harness.format_time),
    ("peak RSS", "peak_rss_bytes", format_bytes),
    ("RSS/call", "call_rss_bytes", format_bytes),
)
DTYPE_COLUMN = ("dtype", "dtype", "{}")  # after "size" when the run has other dtypes


SPARSE_COLUMNS = (
    *_TIMES,
    ("deriv/f", "grad_f_ratio", "{:.2f}"),
    ("colors", "colors", "{}"),
    ("bound", "bound", "{}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("bytes/call", "bytes_per_call", format_bytes),
    ("first call", "first_call_s", harness.format_time),
)
TIME_UNIT = {"minimize": "whole minimize run",
             "sparse": "derivative call; deriv/f: over one call of f; colors: seeds (FD: "
                       "column groups), bound: the densest row's nonzeros"}


def format_report(doc):
    """The tables of a run (one per workload), its notes and its goals summary, as text."""
    out = []
    meta = doc["meta"]
    with_dtype = list(meta.get("dtypes", ["float64"])) != ["float64"]
    for name, w in doc["workloads"].items():
        rows = [dict(r, size_label=size_label(w["size_name"], r["size"])) for r in w["rows"]]
        out.append(f"{name}: {w['title']}; time per {w['time_unit']}")
        columns = SPARSE_COLUMNS if w.get("kind") == "sparse" else COLUMNS
        if with_dtype:
            columns = (columns[0], DTYPE_COLUMN, *columns[1:])
        out.append(harness.format_table(rows, columns, {"size", "impl", "dtype"},
                                        missing=lambda key: "n/a" if key in (
                                            "allocs_per_call", "bytes_per_call") else "-"))
        out.append("")
    out.append(f"medians of {meta['repeats']} batches of ~{meta['target_ms']:g} ms "
               f"(minimize: {meta['minimize_repeats']} rounds); x numba: median over the "
               f"hand-written numba gradient's; grad/f: over the numpy function's value "
               f"alone; allocs: numpy allocations per call (n/a: not numpy memory, see RSS); "
               f"RSS: fresh process, largest size, after the library's start-up"
               + ("; float64 rows" if with_dtype else ""))
    for note in doc.get("notes", []):
        out.append(f"note: {note}")
    for impl, why in doc["skipped"].items():
        out.append(f"note: {impl} skipped ({why})")
    out.append(f"{meta['cpu_count']} CPUs ({meta['cpu_model']}), numpy {meta['numpy']}, "
               f"numba {meta['numba']}, total {meta['total_s']:.0f} s")
    if meta.get("costs"):
        out.append(f"hybridad's cost table: {meta['costs']}")
    if doc.get("goals"):
        out.append("")
        out.append(format_goals(doc["goals"]))
    return "\n".join(out)
