"""A YOLOv8n-sized detector for the benchmark figures, built offline, never committed.

Ultralytics builds YOLOv8n from its model description with random weights
(3.2 M parameters, 8.7 GFLOPs at 640, the size the throughput targets are
stated for) and exports it to ONNX with a dynamic batch and input size, so
one file serves imgsz 320 and 640. Nothing is downloaded: Ultralytics is kept
offline and its settings file goes to a temporary directory.

Random weights score every anchor near zero, so postprocessing finds no box
above the threshold: its cost in the figures is the floor (thresholding the
8400 anchors), not a busy scene's NMS. Needs ``pip install -e '.[bench]'``::

    .venv/bin/python benchmarks/make_yolov8n_onnx.py [--output benchmarks/generated/yolov8n.onnx]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "generated" / "yolov8n.onnx"


def build(output: Path) -> Path:
    """Export a randomly initialised YOLOv8n to ``output``; return its path."""
    with tempfile.TemporaryDirectory(prefix="yolov8n-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        from ultralytics import YOLO, settings

        settings.update({"sync": False})
        cwd = Path.cwd()
        os.chdir(tmp)  # the export is written next to the model description
        try:
            model = YOLO("yolov8n.yaml")
            exported = model.export(format="onnx", imgsz=640, dynamic=True, opset=17)
        finally:
            os.chdir(cwd)
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(tmp) / exported), output)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    try:
        import ultralytics  # noqa: F401
    except ImportError:
        sys.exit("ultralytics is not installed: .venv/bin/pip install -e '.[bench]'")
    path = build(args.output.resolve())
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MB)")


if __name__ == "__main__":
    main()
