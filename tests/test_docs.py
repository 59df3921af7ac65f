"""The user guide's examples run: every ```python block of docs/*.md and the
README, in order, one namespace per file."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_run(page, capsys):
    blocks = BLOCK.findall(page.read_text())
    ns = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{page.name}[block {i}]", "exec"), ns)  # noqa: S102


def test_guide_has_examples():
    assert len(BLOCK.findall((ROOT / "docs" / "guide.md").read_text())) >= 8


def test_coverage_page_is_current():
    # docs/coverage.md is generated from the registry: regenerate it with
    # `python -m hybridad.coverage > docs/coverage.md` when this fails
    from pathlib import Path

    from hybridad.coverage import render

    page = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"
    assert page.read_text() == render(), "docs/coverage.md is stale"
