"""Every Python snippet of docs/api.md and README.md runs as written, in order.

The snippets of a page share one namespace (later ones use what earlier ones
imported), run in an empty folder so that what they write stays there, and
check themselves with ``assert`` where a result is worth stating.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "docs" / "api.md", ROOT / "README.md"]
_SNIPPET = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(page: Path) -> list[str]:
    return _SNIPPET.findall(page.read_text())


def test_the_pages_have_snippets() -> None:
    assert len(snippets(PAGES[0])) >= 6 and snippets(PAGES[1])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_snippet_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    for index, code in enumerate(snippets(page)):
        exec(compile(code, f"{page.name} snippet {index + 1}", "exec"), namespace)
        assert capsys.readouterr().out or "print(" not in code, (
            f"snippet {index + 1} printed nothing"
        )
