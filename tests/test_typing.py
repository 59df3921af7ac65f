"""The public API's type hints (PEP 561: the package ships ``py.typed``).

mypy checks the public modules (``[tool.mypy]`` in pyproject.toml) and, in
the same run, a user's script: the hints give the types a user expects, and
a wrong argument is an error there, before anything runs.
"""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import hybridad as ha
import hybridad.dask
import hybridad.scipy
import hybridad.testing
from hybridad.plans.hessian import HessianPlan
from hybridad.plans.jacobian import JacobianPlan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ha.__file__)))

USER = textwrap.dedent("""\
    import numpy as np
    import hybridad as ha
    from hybridad.scipy import minimize

    def f(x: np.ndarray) -> float:
        return float(np.sum(x ** 2))

    x = np.ones(3)
    res = ha.gradient(f, x)
    reveal_type(res)
    reveal_type(ha.hessian(f, x))
    reveal_type(ha.compile(f, x))
    minimize(f, x)
    plan = ha.compile(f, x, backend="numba", argnums=(0,))
    plan.gradient(x, out=res)
    ha.gradient(f, x, argnums="0")  # error: a string
    ha.compile(f, x, backend="jax")  # error: no such backend
    ha.optim.Adam(lr="big")  # error: a string
""")

REVEALED = ["hybridad.results.GradientResult", "hybridad.results.HessianResult",
            "hybridad.plans.plan.Plan"]


def test_mypy_checks_the_public_modules_and_a_users_script(tmp_path):
    pytest.importorskip("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER)
    env = {**os.environ, "MYPYPATH": ROOT}
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                          os.path.join(ROOT, "pyproject.toml"), "--cache-dir",
                          str(tmp_path / "cache"), str(script)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    out = run.stdout + run.stderr
    lines = [ln for ln in out.splitlines() if ": error:" in ln or ": note:" in ln]
    package = [ln for ln in lines if ln.startswith("hybridad") and ": error:" in ln]
    assert not package, out
    user = {int(ln.split(":")[1]): ln for ln in lines if ln.startswith(str(script))}
    source = USER.splitlines()
    for no, text in enumerate(source, 1):
        if "# error" in text:
            assert no in user and ": error:" in user[no], (text, out)
    revealed = [user[no] for no, text in enumerate(source, 1) if "reveal_type" in text]
    for line, want in zip(revealed, REVEALED, strict=True):
        assert f'"{want}"' in line, (want, line)
    errors = [ln for no, ln in user.items() if ": error:" in ln and "# error" not in
              source[no - 1]]
    assert not errors, out


def _public_callables():
    for name in ha.__all__:
        obj = getattr(ha, name)
        if inspect.isfunction(obj):
            yield f"hybridad.{name}", obj
    yield "hybridad.elementwise", ha.elementwise
    for mod in (hybridad.scipy, hybridad.dask, hybridad.testing):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj
    for cls in (ha.Plan, HessianPlan, JacobianPlan):
        for name in ("gradient", "value", "hvp", "hessian", "jacobian", "linearize", "step",
                     "gradient_batch", "explain", "new_result"):
            yield f"{cls.__name__}.{name}", inspect.unwrap(getattr(cls, name))
    for cls in (ha.GradientResult, ha.HvpResult, ha.HessianResult, ha.JacobianResult,
                ha.BatchGradientResult, ha.optim.SGD, ha.optim.Momentum, ha.optim.Adam):
        yield f"{cls.__name__}", cls.__init__


@pytest.mark.parametrize("name, fn", list(_public_callables()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_every_public_callable_is_annotated(name, fn):
    sig = inspect.signature(fn)
    missing = [p for p in sig.parameters if p not in ("self", "_checked")
               and sig.parameters[p].annotation is inspect.Parameter.empty]
    assert not missing, f"{name}: parameters without a hint: {missing}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return hint"
