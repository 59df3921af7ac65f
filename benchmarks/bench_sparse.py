"""Sparse Jacobians and Hessians (hybridad.sparse): time per sparse derivative
against one call of the function, against hybridad's dense derivative (where
it fits), against scipy's colored finite differences and against JAX's dense
``jacfwd`` / ``hessian`` (where they fit); colors against the pattern's
maximum row degree (the lower bound of any coloring); and a stiff
``solve_ivp`` run end to end.

Problems
--------
* ``brusselator`` -- the 2-D Brusselator reaction-diffusion system, two
  species on an N x N periodic grid (5-point Laplacian by ``np.roll``):
  ``2 N^2`` unknowns, 6 nonzeros per Jacobian row.  N = 32, 128, 512.
* ``bratu`` -- the 2-D Bratu energy ``1/2 |grad u|^2 - lambda h^2 sum exp(u)``
  (zero Dirichlet boundary, differences by ``np.diff``): ``N^2`` unknowns, a
  5-point Hessian.  N = 32, 128, 512.
* ``minsurf`` -- the minimal-surface area on an N x N grid (forward
  differences, 7-point Hessian).  N = 32, 128, 512.
* ``ivp`` -- ``scipy.integrate.solve_ivp(method="BDF")`` on the Brusselator
  at 128 x 128 from ``t = 0`` to ``--t-end``: with hybridad's exact sparse
  Jacobian (:class:`hybridad.scipy.OdeJacobian`), with scipy's colored
  finite differences (``jac_sparsity=`` the detected pattern), and -- where
  it fits -- scipy's default dense finite differences (``jac=None``): one
  such Jacobian is ``2 N^2`` function calls and an ``(2 N^2)^2`` matrix, so
  at N = 128 only its cost is estimated.

Columns: ``colors`` / ``bound`` (max nonzeros in a row) and their ratio;
``1-pass`` (the fewest colors of one greedy pass or RLF alone: what
``order="best"``'s improvement passes -- lattice coloring, iterated greedy,
tabu search -- start from); ``color_s`` (the ``"best"`` coloring alone);
``setup_s`` (detection + coloring, once); microseconds per call of ``f``
(plain numpy), hybridad's sparse derivative (``ha.jacobian(..., out=res)``;
for Hessians ``ha.hessian``: value, gradient and Hessian; serial plans, the
default), the same with multithreaded plans (``parallel=True``),
hybridad's dense derivative, scipy's ``approx_derivative(..., sparsity=)``
(for Hessians: of hybridad's gradient), JAX (jit of jacfwd / hessian, x64);
``sparse/f`` is the sparse derivative over one ``f``.

Usage::

    python benchmarks/bench_sparse.py                 # everything (a few minutes)
    python benchmarks/bench_sparse.py --quick         # N = 32 and 128, no ivp
    python benchmarks/bench_sparse.py --json out.json
    python benchmarks/bench_sparse.py --repeats 3       # fewer timed batches
"""

from __future__ import annotations

import argparse
import time

import _harness  # noqa: F401  (the checkout first on sys.path)
import numpy as np
import scipy.sparse as sp
from scipy.optimize._numdiff import approx_derivative, group_columns

import hybridad as ha
from hybridad.bench.harness import format_table, time_round_robin, write_json
from hybridad.bench.sparse_workloads import bratu, brusselator, minimal_surface
from hybridad.sparse import coloring

DENSE_LIMIT = 4096  # unknowns: dense Jacobians and Hessians up to this size


# ----------------------------------------------------------------------------
# problems
# ----------------------------------------------------------------------------
def brusselator_rhs(t, y, n):
    return brusselator(y, n)


def brusselator_y0(n, seed=0):
    rng = np.random.default_rng(seed)
    x = np.arange(n) / n
    u = 1.0 + np.sin(2 * np.pi * x)[None, :] * np.ones((n, 1))
    v = 3.0 + 0.1 * rng.random((n, n))
    return np.concatenate([u.ravel(), v.ravel()])


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    return jax, jnp


def _jax_brusselator(jnp, n):
    def lap_j(a):
        return (jnp.roll(a, 1, 0) + jnp.roll(a, -1, 0) + jnp.roll(a, 1, 1) +
                jnp.roll(a, -1, 1) - 4 * a)

    def f(y):
        u = y[:n * n].reshape(n, n)
        v = y[n * n:].reshape(n, n)
        uuv = u * u * v
        du = 3.4 + uuv - 2.0 * u + 0.002 * n * n * lap_j(u)
        dv = u - uuv + 0.002 * n * n * lap_j(v)
        return jnp.concatenate([du.ravel(), dv.ravel()])

    return f


def _jax_bratu(jnp, n):
    def f(u):
        h = 1.0 / (n + 1)
        g = u.reshape(n, n)
        dx, dy = jnp.diff(g, axis=0), jnp.diff(g, axis=1)
        edge = jnp.sum(g[0] ** 2) + jnp.sum(g[-1] ** 2) + jnp.sum(g[:, 0] ** 2) + \
            jnp.sum(g[:, -1] ** 2)
        return 0.5 * (jnp.sum(dx * dx) + jnp.sum(dy * dy) + edge) - 6.0 * h * h * \
            jnp.sum(jnp.exp(u))

    return f


# ----------------------------------------------------------------------------
# measurements
# ----------------------------------------------------------------------------
def _coloring(res, kind):
    """Seconds of the result's ``"best"`` coloring alone, and the fewest colors of
    one greedy pass (or RLF) without the improvement passes."""
    if kind == "hessian":
        color, names = coloring.star_coloring, coloring.ORDERS
    else:
        color = coloring.color_rows if res.mode == "reverse" else coloring.color_columns
        names = coloring.METHODS
    t0 = time.perf_counter()
    colors = color(res.pattern)
    seconds = time.perf_counter() - t0
    assert int(colors.max()) + 1 == res.colors
    return {"color_s": seconds,
            "one_pass": min(int(color(res.pattern, m).max()) + 1 for m in names)}


def _parallel_call(derivative, result, f, x, *args):
    """The same sparse derivative with multithreaded plans (``parallel=True``)."""
    res = result(f, x, *args, parallel=True)
    return lambda: derivative(f, x, *args, out=res)


def bench_jacobian(n, settings, jax_mod):
    y = brusselator_y0(n)
    m = y.size
    t0 = time.perf_counter()
    res = ha.SparseJacobianResult(brusselator, y, n)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ha.jacobian(brusselator, y, n, out=res)
    first = time.perf_counter() - t0
    structure = res.pattern
    groups = group_columns(structure)
    fd = approx_derivative(lambda v: brusselator(v, n), y, sparsity=(structure, groups))
    scale = np.abs(res.jacobian.data).max()
    assert abs(res.jacobian - sp.csr_array(fd)).max() <= 1e-5 * scale, "sparse J vs FD"
    calls = {"f": lambda: brusselator(y, n),
             "sparse": lambda: ha.jacobian(brusselator, y, n, out=res),
             "parallel": _parallel_call(ha.jacobian, ha.SparseJacobianResult, brusselator, y,
                                        n),
             "fd": lambda: approx_derivative(lambda v: brusselator(v, n), y,
                                             sparsity=(structure, groups))}
    if m <= DENSE_LIMIT:
        dres = ha.JacobianResult(y, y)
        calls["dense"] = lambda: ha.jacobian(brusselator, y, n, out=dres)
        if jax_mod is not None:
            jax, jnp = jax_mod
            jf = jax.jit(jax.jacfwd(_jax_brusselator(jnp, n)))
            yj = jnp.asarray(y)
            np.testing.assert_allclose(np.asarray(jf(yj)), res.jacobian.toarray(), rtol=1e-10,
                                       atol=1e-10)
            calls["jax"] = lambda: jf(yj).block_until_ready()
    times = dict(zip(calls, time_round_robin(list(calls.values()), settings["repeats"],
                                             settings["target_ms"]), strict=True))
    return _row("brusselator", n, m, res, setup, first, times, fd_groups=int(groups.max()) + 1,
                **_coloring(res, "jacobian"))


def bench_hessian(name, n, settings, jax_mod):
    if name == "bratu":
        f, args, x = bratu, (n,), np.random.default_rng(1).uniform(-0.5, 0.5, n * n)
    else:
        boundary = np.zeros((n + 2, n + 2))
        boundary[0] = np.sin(np.linspace(0.0, np.pi, n + 2))
        f, args, x = minimal_surface, (boundary,), np.random.default_rng(2).uniform(-.5, .5,
                                                                                     n * n)
    t0 = time.perf_counter()
    res = ha.SparseHessianResult(f, x, *args)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ha.hessian(f, x, *args, out=res)
    first = time.perf_counter() - t0
    gres = ha.GradientResult(x)

    def grad(v):
        ha.gradient(f, v, *args, out=gres)
        return gres.gradient.copy()

    structure = res.pattern
    groups = group_columns(structure)
    calls = {"f": lambda: f(x, *args),
             "sparse": lambda: ha.hessian(f, x, *args, out=res),
             "parallel": _parallel_call(ha.hessian, ha.SparseHessianResult, f, x, *args),
             "fd": lambda: approx_derivative(grad, x, sparsity=(structure, groups))}
    if x.size <= DENSE_LIMIT:
        dres = ha.HessianResult(x)
        calls["dense"] = lambda: ha.hessian(f, x, *args, out=dres)
        if jax_mod is not None and name == "bratu":
            jax, jnp = jax_mod
            jh = jax.jit(jax.hessian(_jax_bratu(jnp, n)))
            xj = jnp.asarray(x)
            np.testing.assert_allclose(np.asarray(jh(xj)), res.hessian.toarray(), rtol=1e-9,
                                       atol=1e-9)
            calls["jax"] = lambda: jh(xj).block_until_ready()
    times = dict(zip(calls, time_round_robin(list(calls.values()), settings["repeats"],
                                             settings["target_ms"]), strict=True))
    return _row(name, n, x.size, res, setup, first, times, fd_groups=int(groups.max()) + 1,
                **_coloring(res, "hessian"))


def _row(problem, n, size, res, setup, first, times, fd_groups, color_s, one_pass):
    us = {k: v[0] for k, v in times.items()}
    return {"problem": problem, "grid": f"{n}x{n}", "unknowns": size, "nnz": res.pattern.nnz,
            "colors": res.colors, "bound": res.lower_bound,
            "colors_over_bound": res.colors / max(res.lower_bound, 1), "fd_groups": fd_groups,
            "one_pass": one_pass, "color_s": color_s,
            "mode": res.mode, "setup_s": setup, "first_call_s": first,
            "f_us": us["f"], "sparse_us": us["sparse"], "parallel_us": us.get("parallel"),
            "dense_us": us.get("dense"), "fd_us": us["fd"], "jax_us": us.get("jax"),
            "sparse_over_f": us["sparse"] / us["f"],
            "parallel_over_f": None if "parallel" not in us else us["parallel"] / us["f"],
            "fd_over_sparse": us["fd"] / us["sparse"]}


def bench_ivp(n, t_end, dense_fd):
    from scipy.integrate import solve_ivp

    import hybridad.scipy as hs

    y0 = brusselator_y0(n)
    opts = dict(method="BDF", args=(n,), rtol=1e-6, atol=1e-8)
    rows = []
    t0 = time.perf_counter()
    jac = hs.OdeJacobian(brusselator_rhs, 0.0, y0, n)
    jac(0.0, y0, n)  # (compiled, or loaded from the disk cache)
    setup = time.perf_counter() - t0
    runs = [("hybridad OdeJacobian (sparse)", dict(jac=jac)),
            ("scipy FD, jac_sparsity=pattern", dict(jac_sparsity=jac.result.pattern))]
    if dense_fd:
        runs.append(("scipy FD, dense (jac=None)", {}))
    for label, extra in runs:
        t0 = time.perf_counter()
        sol = solve_ivp(brusselator_rhs, (0.0, t_end), y0, **opts, **extra)
        rows.append({"run": label, "seconds": time.perf_counter() - t0, "success": sol.success,
                     "nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu,
                     "y_end": sol.y[:, -1]})
    ref = rows[0]["y_end"]
    for r in rows:
        r["max_diff_vs_hybridad"] = float(np.max(np.abs(r.pop("y_end") - ref)))
    # one Jacobian by each way, alone
    y = y0 + 0.01
    t_jac = min(_time(lambda: jac(0.0, y, n)) for _ in range(5))
    structure = jac.result.pattern
    groups = group_columns(structure)
    t_fd = min(_time(lambda: approx_derivative(lambda v: brusselator(v, n), y,
                                               sparsity=(structure, groups))) for _ in range(5))
    t_f = min(_time(lambda: brusselator(y, n)) for _ in range(20))
    meta = {"grid": f"{n}x{n}", "unknowns": y0.size, "t_end": t_end, "setup_s": setup,
            "jacobian_us": t_jac * 1e6, "colored_fd_us": t_fd * 1e6,
            "dense_fd_estimate_s": t_f * y0.size}
    return rows, meta


def _time(call):
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------
def _us(v):
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


COLUMNS = [("problem", "problem", "{}"), ("grid", "grid", "{}"), ("n", "unknowns", "{:,}"),
           ("mode", "mode", "{}"), ("colors", "colors", "{}"), ("bound", "bound", "{}"),
           ("c/bound", "colors_over_bound", "{:.2f}"), ("1-pass", "one_pass", "{}"),
           ("fd grp", "fd_groups", "{}"), ("color s", "color_s", "{:.2f}"),
           ("setup s", "setup_s", "{:.2f}"), ("f us", "f_us", _us),
           ("sparse us", "sparse_us", _us), ("sparse/f", "sparse_over_f", "{:.1f}"),
           ("parallel us", "parallel_us", _us), ("par/f", "parallel_over_f", "{:.1f}"),
           ("dense us", "dense_us", _us), ("colored FD us", "fd_us", _us),
           ("FD/sparse", "fd_over_sparse", "{:.1f}"), ("jax us", "jax_us", _us)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 32 and 128, no ivp run")
    parser.add_argument("--sizes", type=int, nargs="+", help="grid sizes N")
    parser.add_argument("--no-ivp", action="store_true")
    parser.add_argument("--t-end", type=float, default=1.0, help="the ivp run's end time")
    parser.add_argument("--json", help="write rows and meta to this file")
    parser.add_argument("--repeats", type=int, help="timed batches per row (default 5; 3 "
                        "with --quick)")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([32, 128] if args.quick else [32, 128, 512])
    settings = {"repeats": args.repeats or (3 if args.quick else 5),
                "target_ms": 30.0 if args.quick else 60.0}
    jax_mod = _jax()
    rows = []
    for n in sizes:
        rows.append(bench_jacobian(n, settings, jax_mod))
        print(format_table(rows[-1:], COLUMNS, {"problem", "grid", "mode"}), flush=True)
    for name in ("bratu", "minsurf"):
        for n in sizes:
            rows.append(bench_hessian(name, n, settings, jax_mod))
            print(format_table(rows[-1:], COLUMNS, {"problem", "grid", "mode"}), flush=True)
    print()
    print(format_table(rows, COLUMNS, {"problem", "grid", "mode"}))
    meta = {"jax": jax_mod is not None}
    if not (args.quick or args.no_ivp):
        ivp_rows, ivp_meta = bench_ivp(128, args.t_end, dense_fd=False)
        print()
        print(format_table(ivp_rows, [("solve_ivp BDF, Brusselator 128x128", "run", "{}"),
                                      ("seconds", "seconds", "{:.2f}"), ("nfev", "nfev", "{}"),
                                      ("njev", "njev", "{}"), ("nlu", "nlu", "{}"),
                                      ("max |y - y_ha|", "max_diff_vs_hybridad", "{:.1e}")],
                           {"solve_ivp BDF, Brusselator 128x128"}))
        print(f"one Jacobian: hybridad {ivp_meta['jacobian_us']:,.0f} us, scipy colored FD "
              f"{ivp_meta['colored_fd_us']:,.0f} us; scipy's default dense FD would take "
              f"{ivp_meta['dense_fd_estimate_s']:.1f} s per Jacobian ({ivp_meta['unknowns']} "
              f"calls of f) and a {ivp_meta['unknowns']}^2 matrix "
              f"({ivp_meta['unknowns'] ** 2 * 8 / 2**30:.0f} GiB): not run")
        meta["ivp"] = {**ivp_meta, "rows": ivp_rows}
        small_rows, small_meta = bench_ivp(32, args.t_end, dense_fd=True)
        print(format_table(small_rows, [("solve_ivp BDF, Brusselator 32x32", "run", "{}"),
                                        ("seconds", "seconds", "{:.2f}"),
                                        ("nfev", "nfev", "{}"), ("njev", "njev", "{}"),
                                        ("nlu", "nlu", "{}"),
                                        ("max |y - y_ha|", "max_diff_vs_hybridad", "{:.1e}")],
                           {"solve_ivp BDF, Brusselator 32x32"}))
        meta["ivp_small"] = {**small_meta, "rows": small_rows}
    if args.json:
        write_json(args.json, rows, meta)


if __name__ == "__main__":
    main()
