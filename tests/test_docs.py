"""The user guide's examples run as a user runs them: every ```python block of
docs/*.md and the README, in order, pasted into one script per page, run in a
fresh interpreter with the library's defaults -- first with an empty disk
cache, then again with the cache the first run left."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
WITH_EXAMPLES = [p for p in PAGES if BLOCK.search(p.read_text())]


def _run_page(script, cwd, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDAD_")}
    env["HYBRIDAD_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, str(script)], env=env, cwd=str(cwd),
                          capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("page", WITH_EXAMPLES, ids=lambda p: p.name)
def test_examples_run_as_pasted_cold_and_warm(page, tmp_path):
    blocks = BLOCK.findall(page.read_text())
    script = tmp_path / f"{page.stem}_examples.py"
    script.write_text("\n\n".join(blocks))
    for cache_state in ("cold", "warm"):
        out = _run_page(script, tmp_path, tmp_path / "cache")
        assert out.returncode == 0, \
            f"{page.name} ({cache_state} cache):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        assert "Traceback" not in out.stderr, out.stderr[-4000:]


def test_guide_has_examples():
    assert len(BLOCK.findall((ROOT / "docs" / "guide.md").read_text())) >= 8


def test_coverage_page_is_current():
    # docs/coverage.md is generated from the registry: regenerate it with
    # `python -m hybridad.coverage > docs/coverage.md` when this fails
    from pathlib import Path

    from hybridad.coverage import render

    page = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"
    assert page.read_text() == render(), "docs/coverage.md is stale"
