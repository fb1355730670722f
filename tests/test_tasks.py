"""The task (detect, segment...) is recognised from the model file: layout and metadata.

The layouts are Ultralytics' own exports (tools/seg/layouts.py records their
output names, shapes and metadata at 320 in tests/data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from onnx_models import family_model

from vstream.cli.info import info_command
from vstream.errors import ModelError
from vstream.postprocess.formats import OutputInfo
from vstream.postprocess.tasks import Task, recognise_model

LAYOUTS = json.loads(
    (Path(__file__).parent / "data" / "ultralytics_task_layouts.json").read_text()
)["models"]


def _recognise(name: str):
    layout = LAYOUTS[name]
    outputs = [OutputInfo(n, tuple(shape)) for n, shape in layout["outputs"]]
    return recognise_model(outputs, (320, 320), layout["metadata"])


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("yolov8n-seg", "yolov8"),
        ("yolo11n-seg", "yolov8"),
        ("yolo26n-seg", "yolov8"),
        ("yolo26n-seg-end2end", "end2end"),
    ],
)
def test_ultralytics_segmentation_layouts(name: str, family: str) -> None:
    task, found = _recognise(name)
    assert task.task is Task.SEGMENT
    assert task.extra == 32 and task.aux == (1,)
    assert found.format.value == family
    assert found.order == (0, 1)  # the detection output, then the prototypes


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("yolov8n-cls", "a classification model cannot be the primary detector; use it as a"),
    ],
)
def test_tasks_vstream_does_not_read_are_named_in_one_line(name: str, words: str) -> None:
    with pytest.raises(ModelError) as error:
        _recognise(name)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_classifier_without_metadata_is_named_by_its_layout() -> None:
    with pytest.raises(ModelError, match="classification model cannot be the primary detector"):
        recognise_model([OutputInfo("output0", (1, 1000))], (224, 224))


def test_prototypes_without_metadata_make_a_segmentation_model() -> None:
    outputs = [OutputInfo("output0", (1, 4 + 3 + 32, 2100)), OutputInfo("p", (1, 32, 80, 80))]
    task, found = recognise_model(outputs, (320, 320))
    assert task.task is Task.SEGMENT and found.format.value == "yolov8"
    assert "3 classes" not in found.reasons[0] and "4+3" in found.reasons[0]


def test_info_prints_the_task_and_refuses_a_classifier(tmp_path: Path, capsys) -> None:
    outputs = {
        "output0": np.zeros((1, 4 + 2 + 32, 84), np.float32),
        "output1": np.zeros((1, 32, 16, 16), np.float32),
    }
    names = {"names": str({0: "a", 1: "b"}), "task": "segment"}
    model = family_model(tmp_path / "seg.onnx", outputs, imgsz=(64, 64), metadata=names)
    assert info_command(argparse.Namespace(model=model)) == 0
    printed = capsys.readouterr().out
    assert "task:     segment" in printed and "classes:  0=a, 1=b" in printed
    classifier = family_model(tmp_path / "cls.onnx", {"output0": np.zeros((1, 5), np.float32)})
    result = run_cli("info", classifier)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert "a classification model cannot be the primary detector" in line
