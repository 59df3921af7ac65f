"""The suite's figure: one panel per workload in a grid, time per call of each
implementation (log scale), numpy allocations per call written beside each
point.  Needs matplotlib (imported here only; ImportError without it).
"""

from __future__ import annotations

import importlib.util
import math
import textwrap

#: impl -> (color, marker): each implementation its own colour and marker
STYLE = {
    "hybridad": ("#d62728", "o"),
    "hybridad serial": ("#e377c2", "v"),
    "ha.gradient": ("#ff7f0e", "^"),
    "hand numpy": ("#1f77b4", "s"),
    "hand numpy out=": ("#17becf", "D"),
    "hand numba": ("#2ca02c", "P"),
    "scipy rosen_der": ("#bcbd22", "X"),
    "scipy colored FD": ("#000000", "x"),
    "jax.jit": ("#9467bd", "*"),
    "torch": ("#8c564b", "h"),
    "autograd": ("#7f7f7f", "p"),
}
_SPARE = [("#393b79", "<"), ("#637939", ">"), ("#8c6d31", "d"), ("#843c39", "8")]
_UNIT = {"minimize": "seconds per minimize run", "sparse": "seconds per sparse derivative"}


def _style(impl, spare):
    if impl not in STYLE:
        STYLE[impl] = _SPARE[len(spare) % len(_SPARE)]
        spare.append(impl)
    return STYLE[impl]


def _allocs(n):
    return "" if n is None else f"{n:g} alloc" + ("" if n == 1 else "s")


def plot(doc, path, dpi=100):
    """Draw the suite's document ``doc`` (see :func:`hybridad.bench.suite.run`) to ``path``.

    One panel per workload, three to a row.  A workload measured at several
    sizes gets a line per implementation (seconds per call against size,
    log-log, the band between the fastest and slowest batch); one measured at
    one size gets a point per implementation (one row each, seconds on a log
    axis).  Each point at the largest size is labelled with its numpy
    allocations per call.

    Parameters
    ----------
    doc : dict
        ``{"workloads": {name: {"rows": [...], "size_name": ..., ...}}, ...}``.
    path : str
        The image file (PNG by its extension).
    dpi : int, default 100
        Resolution: panels of 4.4 x 3.3 inches, text at 8-10 points.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    workloads = [(n, w) for n, w in doc["workloads"].items() if w["rows"]]
    cols = min(3, max(1, len(workloads)))
    rows = max(1, math.ceil(len(workloads) / cols))
    fig = Figure(figsize=(4.4 * cols, 3.3 * rows + 1.25))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    spare, seen = [], {}
    for k, (name, w) in enumerate(workloads):
        ax = axes[k // cols][k % cols]
        impls = list(dict.fromkeys(r["impl"] for r in w["rows"]))
        sizes = sorted({r["size"] for r in w["rows"]})
        unit = _UNIT.get(w.get("kind"), "seconds per value+gradient call")
        for i, impl in enumerate(impls):
            color, marker = _style(impl, spare)
            mine = sorted((r for r in w["rows"] if r["impl"] == impl), key=lambda r: r["size"])
            seen.setdefault(impl, (color, marker))
            last = mine[-1]
            if len(sizes) > 1:
                xs = [r["size"] for r in mine]
                ax.plot(xs, [r["median_s"] for r in mine], marker=marker, color=color, ms=6,
                        lw=1.4)
                ax.fill_between(xs, [r["min_s"] for r in mine], [r["max_s"] for r in mine],
                                color=color, alpha=0.15, lw=0)
                at = (last["size"], last["median_s"])
            else:
                y = len(impls) - 1 - i
                ax.plot([last["median_s"]], [y], marker=marker, color=color, ms=8, ls="none")
                ax.plot([last["min_s"], last["max_s"]], [y, y], color=color, lw=2, alpha=0.4)
                at = (last["median_s"], y)
            text = _allocs(last.get("allocs_per_call"))
            if text:
                ax.annotate(text, at, xytext=(7, 3), textcoords="offset points", fontsize=8,
                            color=color)
        title = textwrap.wrap(f"{name}: {w.get('title', '')}", 52)
        ax.set_title("\n".join(title[:2]) + (" ..." if len(title) > 2 else ""), fontsize=9)
        if len(sizes) > 1:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"{w['size_name']} (problem size)", fontsize=9)
            ax.set_ylabel(unit, fontsize=9)
            ax.margins(x=0.25)
        else:
            ax.set_xscale("log")
            ax.set_yticks(range(len(impls)), list(reversed(impls)), fontsize=9)
            ax.set_ylim(-0.7, len(impls) - 0.3)
            ax.set_xlabel(f"{unit} at {w['size_name']} = {sizes[0]:,}", fontsize=9)
            ax.margins(x=0.3)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=8)
        ax.grid(True, which="major", alpha=0.3)
    for k in range(len(workloads), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    meta = doc.get("meta", {})
    fig.suptitle(f"hybridad bench{' --quick' if meta.get('quick') else ''}: median time per "
                 f"call (band: fastest to slowest batch), {meta.get('cpu_count', '?')} CPUs, "
                 f"{meta.get('date', '')}\nnumpy allocations per call beside each point "
                 f"(jax and torch allocate outside numpy: not counted)", fontsize=10)
    handles = [Line2D([], [], color=c, marker=m, ms=7, lw=1.4) for c, m in seen.values()]
    fig.legend(handles, list(seen), loc="lower center", ncol=min(len(seen), 6), fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0.8 / (3.3 * rows + 1.25), 1, 1 - 0.45 / (3.3 * rows + 1.25)))
    fig.savefig(path, dpi=dpi)


def write_plot(doc, path, asked=True):
    """Draw a run's first dtype's rows to ``path``; the line to print.

    Without matplotlib: a note saying so when the plot was ``asked`` for by
    name, else nothing (the command line's default plot is drawn only where
    matplotlib is installed).
    """
    if importlib.util.find_spec("matplotlib") is None:
        return ("matplotlib is not installed: no plot written (pip install matplotlib, or "
                "hybridad[bench])") if asked else ""
    first = doc["meta"]["dtypes"][0]  # one line per row: the first dtype's rows
    plot({**doc, "workloads": {name: {**w, "rows": [r for r in w["rows"] if r["dtype"] == first]}
                               for name, w in doc["workloads"].items()}}, path)
    return f"plot written to {path}"
