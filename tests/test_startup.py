"""Start-up cost: commands that need no model load none of the model stack.

``vstream --help``, ``schema`` and ``validate`` answer in a fraction of a
second because they import neither torch, torchvision, onnx nor PyAV (and
``validate`` loads models with ONNX Runtime alone). Checked in a fresh
interpreter, by what ends up in ``sys.modules``, never by timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vstream import assets

HEAVY = ("torch", "torchvision", "onnx", "av", "cv2", "scipy", "ray")

PROBE = """
import contextlib, io, json, sys
from vstream.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def imported_by(*args: str) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    return report["status"], {m.split(".")[0] for m in report["modules"]}


@pytest.fixture
def pipelines(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        f"    sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]\n"
    )
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--help"],
        ["schema"],
        ["run", "--conf", "2"],
        ["bench", "--source", "absent.mp4"],
        ["info", "absent.onnx"],
        ["info", "--imgsz", "7"],
    ],
    ids=[
        "help",
        "run-help",
        "schema",
        "bad-flag",
        "bench-without-its-file",
        "info-without-its-model",
        "info-bad-flag",
    ],
)
def test_commands_without_a_model_import_no_model_stack(args: list[str]) -> None:
    _, modules = imported_by(*args)
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_validate_loads_the_model_with_onnx_runtime_alone(pipelines: Path) -> None:
    status, modules = imported_by("validate", str(pipelines))
    assert status == 0
    assert "onnxruntime" in modules, "validate must really load the model"
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_validate_of_a_cluster_config_imports_no_ray(pipelines: Path) -> None:
    """Ray is looked for (an optional extra), not loaded: validate stays quick."""
    cluster = pipelines.with_name("cluster.yaml")
    cluster.write_text("cluster: {engine: ray, workers: 2}\n" + pipelines.read_text())
    status, modules = imported_by("validate", str(cluster))
    assert status == 0
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_the_python_api_stays_lazy() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vstream; before = 'torch' in sys.modules; vstream.Detector; "
            "print(before, 'torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_a_tracking_stream_loads_its_matcher_when_set_up_not_at_its_first_match() -> None:
    """scipy.optimize takes a second or more to import: loaded as a tracking stream is set up,
    it is not met by the first frames of a live stream; streams without tracking never load it."""
    probe = (
        "import json, sys\n"
        "from vstream.analytics import StreamAnalytics\n"
        "from vstream.config.analytics import AnalyticsConfig\n"
        "StreamAnalytics(AnalyticsConfig())\n"
        "before = 'scipy.optimize' in sys.modules\n"
        "StreamAnalytics(AnalyticsConfig(tracking={}))\n"
        "print(json.dumps([before, 'scipy.optimize' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, True]
