"""Record the output layouts of Ultralytics' task exports, for the task-recognition tests.

Exports untrained YOLOv8n, YOLO11n and YOLO26n segmentation models (YOLO26 also
end-to-end), a classifier, and YOLOv8n, YOLO11n and YOLO26n pose and OBB models (YOLO26
also end-to-end), at 320 as a user would
(``export(format="onnx", imgsz=320)``), runs each once to learn its output
shapes, and writes their output names, shapes and metadata to a small JSON
file. The models themselves (11 to 14 MB each) are not kept. Ultralytics is
an oracle here, never a vstream dependency::

    .venv/bin/python tools/seg/layouts.py [--output tests/data/ultralytics_task_layouts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = ROOT / "tests" / "data" / "ultralytics_task_layouts.json"
IMGSZ = 320
EXPORTS: dict[str, tuple[str, dict[str, object]]] = {
    "yolov8n-seg": ("yolov8n-seg.yaml", {}),
    "yolo11n-seg": ("yolo11n-seg.yaml", {}),
    "yolo26n-seg": ("yolo26n-seg.yaml", {}),
    "yolo26n-seg-end2end": ("yolo26n-seg.yaml", {"end2end": True, "dynamic": False}),
    "yolov8n-cls": ("yolov8n-cls.yaml", {}),
    "yolov8n-pose": ("yolov8n-pose.yaml", {}),
    "yolov8n-obb": ("yolov8n-obb.yaml", {}),
    "yolo11n-pose": ("yolo11n-pose.yaml", {}),
    "yolo26n-pose": ("yolo26n-pose.yaml", {}),
    "yolo26n-pose-end2end": ("yolo26n-pose.yaml", {"end2end": True, "dynamic": False}),
    "yolo11n-obb": ("yolo11n-obb.yaml", {}),
    "yolo26n-obb": ("yolo26n-obb.yaml", {}),
    "yolo26n-obb-end2end": ("yolo26n-obb.yaml", {"end2end": True, "dynamic": False}),
}
KEPT_METADATA = ("task", "names", "kpt_shape", "end2end", "imgsz", "stride", "description")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="seg-layouts-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(Path(tmp) / "config"))
        import onnxruntime as ort
        import ultralytics
        from ultralytics import YOLO

        layouts = {}
        for key, (yaml_name, options) in EXPORTS.items():
            exported = YOLO(yaml_name).export(
                format="onnx", imgsz=IMGSZ, opset=17, simplify=False, **{"dynamic": True, **options}
            )
            session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
            image = np.zeros((1, 3, IMGSZ, IMGSZ), np.float32)
            values = session.run(None, {session.get_inputs()[0].name: image})
            metadata = session.get_modelmeta().custom_metadata_map
            layouts[key] = {
                "outputs": [
                    [o.name, list(v.shape)]
                    for o, v in zip(session.get_outputs(), values, strict=True)
                ],
                "metadata": {k: metadata[k] for k in KEPT_METADATA if k in metadata},
            }
            Path(exported).unlink()
    header = {"ultralytics": ultralytics.__version__, "imgsz": IMGSZ, "untrained": True}
    args.output.write_text(json.dumps({"made_with": header, "models": layouts}, indent=1) + "\n")
    print(args.output)


if __name__ == "__main__":
    main()
