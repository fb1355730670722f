"""The package's own imports point one way: no loops, and no leaf reaching up to the wiring.

Read from the source with :mod:`ast` (every module under ``vstream/``, and
every import in it, those inside functions too), not by importing: a lazy
import inside a function is still an arrow, and the one that closed the loop
between ``detector.py`` and ``engine/pipeline.py`` was exactly that.

Two levels are checked for cycles: modules, and the units directly under
``vstream`` (``vstream.config``, ``vstream.engine``, ``vstream.detector``...),
so that ``config`` reading an option from ``analytics`` which reads one from
``config`` counts as the loop it is even when no single module imports itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "vstream"

WIRING = ("vstream.engine", "vstream.cluster", "vstream.server", "vstream.cli")
"""What runs the data path; the data path itself never imports it."""

MAY_IMPORT_WIRING = (*WIRING, "vstream.api", "vstream.doctor", "vstream.bench", "vstream.__main__")
"""The entry points, which sit on top of the wiring."""


def _module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """For every module under ``root``, the package's own modules it imports, anywhere in it.

    ``from a.b import c`` points at ``a.b.c`` when that is a module, else at
    ``a.b``; a name that is no module points at the closest enclosing one.
    """
    modules = _module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                submodules = [f"{origin}.{alias.name}" for alias in node.names]
                named = [n for n in submodules if n in modules] or [origin]
            else:
                continue
            for target in named:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph.get(node, ())):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)):
            return cycle
    return None


def unit_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The same arrows between the units directly under ``vstream`` (``vstream.config``...)."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    units: dict[str, set[str]] = {}
    for source, targets in graph.items():
        units.setdefault(unit(source), set()).update(
            unit(t) for t in targets if unit(t) != unit(source) and unit(t) != "vstream"
        )
    return units


def wiring_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """``module -> wiring`` for every module outside the entry points that imports the wiring."""
    return [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        if not _within(source, MAY_IMPORT_WIRING)
        for target in sorted(targets)
        if _within(target, WIRING)
    ]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_walk_sees_every_kind_of_import(graph: dict[str, set[str]]) -> None:
    # detect() imports the engine inside a function, relatively or not; both must be seen.
    assert "vstream.engine.pipeline" in graph["vstream.api"]
    assert "vstream.config.base" in graph["vstream.config.model"]
    assert len(graph) > 100


def test_no_module_imports_itself_round_a_loop(graph: dict[str, set[str]]) -> None:
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_loop_between_the_parts_of_the_package(graph: dict[str, set[str]]) -> None:
    units = unit_graph(graph)
    assert find_cycle(units) is None, " -> ".join(find_cycle(units) or [])


def test_only_the_entry_points_import_the_wiring(graph: dict[str, set[str]]) -> None:
    assert wiring_imports(graph) == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A leaf importing the engine inside a function, closing a loop, is caught both ways."""
    package = tmp_path / "vstream"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "pipeline.py").write_text("from ..detector import Detector\n")
    (package / "detector.py").write_text(
        "def stream():\n    from vstream.engine.pipeline import detect_iter\n"
    )
    graph = import_graph(package)
    assert graph["vstream.detector"] == {"vstream.engine.pipeline"}
    assert find_cycle(graph) == ["vstream.detector", "vstream.engine.pipeline", "vstream.detector"]
    assert find_cycle(unit_graph(graph)) == [
        "vstream.detector",
        "vstream.engine",
        "vstream.detector",
    ]
    assert wiring_imports(graph) == ["vstream.detector -> vstream.engine.pipeline"]
