"""The suite's figure: time per call against size (log-log), one line per
implementation, above a panel of numpy allocations per call, one column per
workload.  Needs matplotlib (imported here only; ImportError without it).
"""

from __future__ import annotations

STYLE = {  # impl -> (color, marker); others get the default cycle
    "hybridad": ("#d62728", "o"),
    "ha.gradient": ("#ff9896", "o"),
    "hand numpy": ("#1f77b4", "s"),
    "hand numpy out=": ("#aec7e8", "s"),
    "hand numba": ("#2ca02c", "^"),
    "scipy rosen_der": ("#98df8a", "v"),
    "jax.jit": ("#9467bd", "D"),
    "torch": ("#ff7f0e", "P"),
    "autograd": ("#8c564b", "X"),
}


def plot(doc, path, dpi=72):
    """Draw the suite's document ``doc`` (see :func:`hybridad.bench.suite.run`) to ``path``.

    Parameters
    ----------
    doc : dict
        ``{"workloads": {name: {"rows": [...], "size_name": ..., ...}}, ...}``.
    path : str
        The image file (PNG by its extension).
    dpi : int, default 72
        Resolution (the default keeps the PNG small).

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    workloads = list(doc["workloads"].items())
    cols = len(workloads)
    fig = Figure(figsize=(3.4 * cols + 0.6, 6.4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, cols, squeeze=False)
    seen = {}
    for j, (name, w) in enumerate(workloads):
        top, bottom = axes[0][j], axes[1][j]
        impls = list(dict.fromkeys(r["impl"] for r in w["rows"]))
        for impl in impls:
            rows = sorted((r for r in w["rows"] if r["impl"] == impl), key=lambda r: r["size"])
            color, marker = STYLE.get(impl, (None, "o"))
            sizes = [r["size"] for r in rows]
            med = [r["median_s"] for r in rows]
            line, = top.plot(sizes, med, marker=marker, color=color, label=impl, ms=4, lw=1.2)
            top.fill_between(sizes, [r["min_s"] for r in rows], [r["max_s"] for r in rows],
                             color=line.get_color(), alpha=0.15, lw=0)
            seen.setdefault(impl, line)
            counted = [r for r in rows if r["allocs_per_call"] is not None]
            if counted:
                bottom.plot([r["size"] for r in counted],
                            [r["allocs_per_call"] for r in counted], marker=marker,
                            color=line.get_color(), ms=4, lw=1.2)
        top.set_xscale("log")
        top.set_yscale("log")
        top.set_title(name, fontsize=10)
        top.set_ylabel({"minimize": "seconds per minimize run",
                        "sparse": "seconds per sparse derivative"}.get(
                            w["kind"], "seconds per value+gradient"), fontsize=8)
        bottom.set_xscale("log")
        bottom.set_yscale("symlog", linthresh=1)
        top_allocs = max((r["allocs_per_call"] or 0 for r in w["rows"]), default=0)
        bottom.set_ylim(-0.3, max(2.0, 3.0 * top_allocs))
        bottom.set_xlabel(w["size_name"], fontsize=9)
        bottom.set_ylabel("numpy allocations per call" + (" (evaluation)" if w["kind"]
                                                           == "minimize" else ""), fontsize=8)
        for ax in (top, bottom):
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(labelsize=7)
            ax.grid(True, which="major", alpha=0.3)
    meta = doc.get("meta", {})
    fig.suptitle(f"hybridad bench{' --quick' if meta.get('quick') else ''}: medians "
                 f"(band: min-max); jax and torch allocate outside numpy (not counted); "
                 f"{meta.get('cpu_count', '?')} CPUs, {meta.get('date', '')}", fontsize=9)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=len(seen),
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=dpi)
