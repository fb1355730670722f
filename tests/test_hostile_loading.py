"""Hostile input, round three (issue 30): what loading a config or a model file may cost.

1. YAML bombs: a few hundred bytes of nested aliases expanded to gigabytes;
2. model files declaring terabytes of inputs or outputs, read or allocated before any bound;
3. label lists: checked in quadratic time, and able to forge log lines.

Each is refused now with one line (exit 2 from the CLI) before anything is
expanded or allocated. Where the unbounded code would take gigabytes or
minutes, the CLI runs in a child process whose memory or CPU time is bounded,
so a regression fails here instead of taking the machine.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import rlimited, run_cli, tiny_detector
from onnx_models import constant_output_model
from secondary_models import declaring_model, linear_model

from vstream import assets
from vstream.cascade.model import SecondaryModel
from vstream.cli import main
from vstream.config import ConfigError, parse_config
from vstream.config.secondary import SecondaryConfig
from vstream.detector import Detector
from vstream.errors import ModelError
from vstream.inference.model import check_model
from vstream.inference.secondary_spec import check_secondary

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


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tiny_detector(tmp_path / "model.onnx")
    return tmp_path


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


# -- 2. model files declaring absurd sizes ---------------------------------------------------


def test_a_classifier_declaring_2e9_outputs_is_refused_before_its_labels_are_made(
    workdir: Path,
) -> None:
    model = declaring_model(workdir / "huge.onnx", 2_000_000_000)
    assert model.stat().st_size < 250
    config = workdir / "p.yaml"
    config.write_text(pipelines("{name: kind, path: huge.onnx, imgsz: 32}"))
    result = run_cli("validate", config, limits=MEMORY)
    assert result.returncode == 2, result.stderr
    assert result.stderr_lines == [
        f"vstream: {config}: pipelines[0].secondary[0]: huge.onnx: its inputs and outputs would "
        "take 244,141 MiB at batch 32, more than max_io_mib (2048 MiB); the largest is output "
        "'output0', declared [batch, 2000000000] float32: [32, 2000000000] is 244,141 MiB"
    ]


def test_a_classifier_of_more_than_100000_labels_is_refused(workdir: Path) -> None:
    declaring_model(workdir / "wide.onnx", 100_001)
    secondary = SecondaryConfig(name="kind", path=str(workdir / "wide.onnx"), imgsz=32)
    with pytest.raises(ModelError) as refused:
        check_secondary(secondary)
    assert str(refused.value) == (
        "wide.onnx: a classifier gives one value per label, at most 100,000; "
        "output 'output0' gives 100,001"
    )
    assert check_secondary(secondary.model_copy(update={"kind": "embedding"})).output_size


def test_validate_refuses_the_secondary_model_that_run_could_not_allocate(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linear_model(workdir / "wide.onnx", np.eye(3), imgsz=(100_000, 100_000))
    config = workdir / "p.yaml"
    config.write_text(pipelines("{name: kind, path: wide.onnx}"))
    assert main(["validate", str(config)]) == 2
    message = (
        "wide.onnx: its inputs and outputs would take 3,662,110 MiB at batch 32, more than "
        "max_io_mib (2048 MiB); the largest is input 'images', declared [batch, 3, 100000, "
        "100000] float32: [32, 3, 100000, 100000] is 3,662,110 MiB"
    )
    assert capsys.readouterr().err.splitlines() == [
        f"vstream: {config}: pipelines[0].secondary[0]: {message}"
    ]
    # What vstream run builds refuses it the same way, before allocating 3.8 TB.
    secondary = SecondaryConfig(name="kind", path=str(workdir / "wide.onnx"))
    with pytest.raises(ModelError) as refused:
        SecondaryModel(secondary)
    assert str(refused.value) == message


def test_validate_refuses_the_detector_that_run_could_not_allocate(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = np.zeros((1, 6, 16), np.float32)
    constant_output_model(workdir / "vast.onnx", output, imgsz=(1_000_000, 1_000_000))
    config = workdir / "p.yaml"
    config.write_text(pipelines(model="{path: vast.onnx}"))
    assert main(["validate", str(config)]) == 2
    message = (
        "vast.onnx: its inputs and outputs would take 11,444,092 MiB at batch 1, more than "
        "max_io_mib (2048 MiB); the largest is input 'images', declared [1, 3, 1000000, "
        "1000000] float32: [1, 3, 1000000, 1000000] is 11,444,092 MiB"
    )
    assert capsys.readouterr().err.splitlines() == [
        f"vstream: {config}: pipelines[0].model: {message}"
    ]
    with pytest.raises(ModelError) as refused:
        Detector(workdir / "vast.onnx", device="cpu")
    assert str(refused.value) == message


def test_the_budget_is_each_models_max_io_mib(workdir: Path) -> None:
    # 32 crops of 3x128x128 float32: 6 MiB of input.
    linear_model(workdir / "big.onnx", np.eye(3), imgsz=(128, 128))
    secondary = {"name": "kind", "path": str(workdir / "big.onnx")}
    assert check_secondary(SecondaryConfig(**secondary)).batch == 32
    with pytest.raises(ModelError, match=r"take 7 MiB at batch 32, more than max_io_mib \(4 MiB"):
        check_secondary(SecondaryConfig(**secondary, max_io_mib=4))
    assert check_secondary(SecondaryConfig(**secondary, max_io_mib=4, max_batch=16)).batch == 16
    config = parse_config(pipelines(model="{path: model.onnx, max_io_mib: 1}"), base_dir=workdir)
    assert config.pipelines[0].model.max_io_mib == 1


def test_an_overlong_metadata_value_is_refused_before_it_is_parsed(workdir: Path) -> None:
    # Python's literal parser takes about 470 bytes per character of such a list.
    names = "[" + "1," * 150_000 + "]"
    output = np.zeros((1, 6, 16), np.float32)
    constant_output_model(workdir / "m.onnx", output, metadata={"names": names})
    with pytest.raises(ModelError, match=r"^m\.onnx: metadata names is 300,002 characters long; "):
        check_model(workdir / "m.onnx", None, None, 2048)


# -- 3. labels -------------------------------------------------------------------------------


LABELS = """
import sys
from pydantic import ValidationError
from vstream.config.secondary import SecondaryConfig

labels = [f"l{i}" for i in range(100_000)]
assert SecondaryConfig(name="kind", path=sys.argv[1], labels=labels).labels == labels
labels[-1] = "l7"
try:
    SecondaryConfig(name="kind", path=sys.argv[1], labels=labels)
except ValidationError as exc:
    print(exc.errors()[0]["msg"])
"""


def test_100000_labels_are_checked_in_linear_time(workdir: Path) -> None:
    """The duplicate check was quadratic: 390 s for 100 000 labels; the child has 60 s of CPU."""
    done = subprocess.run(
        [sys.executable, "-c", LABELS, str(workdir / "model.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=rlimited({resource.RLIMIT_CPU: 60}),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Value error, labels listed twice: ['l7']\n"


def test_a_label_with_a_line_break_is_refused_from_the_config(workdir: Path) -> None:
    linear_model(workdir / "colour.onnx", np.eye(3))
    forged = "b\\n2026-01-01 00:00:00 INFO all clear"
    with pytest.raises(ConfigError, match="must not contain control characters"):
        secondary = f'{{name: c, path: colour.onnx, labels: [a, "{forged}", c]}}'
        parse_config(pipelines(secondary), base_dir=workdir)
    with pytest.raises(ConfigError, match="must not contain control characters"):
        model = f'{{path: model.onnx, class_names: [a, "{forged}"]}}'
        parse_config(pipelines(model=model), base_dir=workdir)


def test_a_label_with_a_line_break_is_refused_from_the_model_metadata(workdir: Path) -> None:
    forged = "b\n2026-01-01 00:00:00 INFO all clear"
    labels = json.dumps(["a", forged, "c"])
    linear_model(workdir / "colour.onnx", np.eye(3), metadata={"labels": labels})
    secondary = SecondaryConfig(name="c", path=str(workdir / "colour.onnx"))
    with pytest.raises(ModelError) as refused:
        check_secondary(secondary)
    assert str(refused.value) == (
        "colour.onnx: metadata labels holds a label with a control character: "
        "'b\\n2026-01-01 00:00:00 INFO all clear'"
    )
    # Labels given in the config replace the metadata's, which is then not read.
    assert check_secondary(secondary.model_copy(update={"labels": ["a", "b", "c"]})).labels
    tiny_detector(workdir / "named.onnx", classes=("a", forged))
    with pytest.raises(
        ModelError, match=r"named\.onnx: metadata names holds a label with a control"
    ):
        check_model(workdir / "named.onnx", None, None, 2048)
