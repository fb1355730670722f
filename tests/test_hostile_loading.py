"""Hostile input, round three (issue 30): what loading a config or a model file may cost.

1. YAML bombs: a few hundred bytes of nested aliases expanded to gigabytes.

Each is refused now with one line (exit 2 from the CLI) before anything is
expanded or allocated. Where the unbounded code would take gigabytes or
minutes, the CLI runs in a child process whose memory or CPU time is bounded,
so a regression fails here instead of taking the machine.
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from helpers import run_cli

from vstream import assets
from vstream.cli import main
from vstream.config import ConfigError, parse_config

MEMORY = {resource.RLIMIT_AS: 2 * 2**30}
"""The child's address space: validate needs about 600 MB; the bombs took 5 to 11 GB."""


def pipelines(secondary: str = "", model: str = "{path: model.onnx}") -> str:
    return (
        "pipelines:\n"
        "  - name: p\n"
        f"    model: {model}\n"
        f"    secondary: [{secondary}]\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks: [{type: stdout}]\n"
    )


# -- 1. YAML bombs ---------------------------------------------------------------------------


def laughs(levels: int, first: str = "[x, x, x, x, x, x, x, x, x]") -> str:
    """A billion laughs: each level a list of nine aliases of the one before (9**levels)."""
    lines = [f"l0: &l0 {first}"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + f"\npipelines: *l{levels - 1}\n"


MERGES = (
    "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}\n"
    + "".join(f"m{k}: &m{k} [{', '.join([f'*m{k - 1}'] * 9)}]\n" for k in range(1, 7))
    + "pipelines: {<<: *m6}\n"
)


@pytest.mark.parametrize(
    ("document", "line", "message"),
    [
        (laughs(9), 7, "its aliases expand to more than 1,000,000 values"),
        (MERGES, 6, "its aliases expand to more than 1,000,000 values"),
        (
            laughs(6, f'"${{HOME}}{"x" * 20_000}"'),
            5,
            "its aliases expand to more than 16 MiB of text",
        ),
    ],
    ids=["billion-laughs", "merge-keys", "interpolated-text"],
)
def test_a_yaml_bomb_is_refused_before_it_expands(
    tmp_path: Path, document: str, line: int, message: str
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(document)
    assert len(document) < 21_000
    result = run_cli("validate", path, limits=MEMORY)
    assert result.returncode == 2, result.stderr
    assert result.stderr_lines == [f"vstream: {path}:{line}: {message} (refused: an alias bomb?)"]


def nested_by_aliases(levels: int) -> str:
    """Each anchor 10 levels deep around the one before: shallow as written, deep expanded."""
    lines = ["d0: &d0 x"]
    for level in range(1, levels):
        lines.append(f"d{level}: &d{level} {'[' * 10}*d{level - 1}{']' * 10}")
    return "\n".join(lines) + f"\npipelines: *d{levels - 1}\n"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("pipelines: &a [*a]\n", "p.yaml:1: an alias refers to a node that contains it"),
        ("pipelines: &a {x: [*a]}\n", "p.yaml:1: an alias refers to a node that contains it"),
        ("pipelines: " + "[" * 5000 + "]" * 5000, "p.yaml:1: nested deeper than 64 levels"),
        (
            nested_by_aliases(20),
            "p.yaml:8: its aliases nest deeper than 64 levels (refused: an alias bomb?)",
        ),
    ],
    ids=["recursive-list", "recursive-mapping", "deep", "deep-through-aliases"],
)
def test_recursive_and_deep_yaml_is_one_line(document: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(document, source="p.yaml")
    assert refused.value.lines() == [message]


def test_a_config_file_larger_than_4_mib_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(pipelines() + "#" * 4 * 2**20)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"vstream: error: cannot read config {path}: larger than 4 MiB "
        "(a pipelines file takes a few KiB)"
    ]
