"""Ultralytics' own predictions on the parity videos: the answers vstream must give.

Runs Ultralytics ``predict`` (its video reader, letterbox, ONNX Runtime session
and NMS) with the committed ONNX model on each committed parity video and
writes ``<video>.ultralytics.json`` beside it: per frame, the boxes ``[x1, y1,
x2, y2]`` in original-frame pixels, scores and class ids, as vstream records
have them (so :func:`vstream.evaluate` reads the file's ``frames`` as records).
The file also says which Ultralytics, OpenCV (its decoder and resize), torch,
ONNX Runtime and numpy made it, and the exact arguments.

Arguments: ``imgsz=320, conf=0.25, iou=0.45`` and Ultralytics' defaults
otherwise (class-aware NMS, ``max_det=300``), except ``rect=False``: by
default Ultralytics pads an input of a dynamic-size model only up to a
multiple of the stride (320x192 for 854x480), while vstream always feeds the
square ``imgsz`` input, so the reference letterboxes to 320x320 as vstream
does. The model is the same either way; only its input differs.

Ultralytics is AGPL-3.0: it runs here as a separate oracle, never imported by
vstream or its tests. Needs ``pip install -e '.[bench]'``; runs offline::

    .venv/bin/python tools/parity/reference.py [--assets vstream/assets/parity]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import videos  # tools/parity, beside this script

MODEL_NAME = "demo_tempered.onnx"
"""The model the answers are for: the demo with realistic scores (``tempered.py``)."""
ARGUMENTS: dict[str, Any] = {
    "imgsz": 320,
    "conf": 0.25,
    "iou": 0.45,
    "rect": False,
    "agnostic_nms": False,
    "max_det": 300,
    "device": "cpu",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> dict[str, str]:
    """The versions of everything on Ultralytics' path that can change its answers."""
    import cv2
    import onnxruntime
    import torch
    import ultralytics

    return {
        "ultralytics": ultralytics.__version__,
        "opencv": cv2.__version__,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
    }


def predict(model_path: Path, video_path: Path) -> list[dict[str, Any]]:
    """One record per frame: ``{"frame", "detections": [{"bbox", "score", "class_id"}]}``."""
    from ultralytics import YOLO

    model = YOLO(str(model_path), task="detect")
    results = model.predict(source=str(video_path), stream=True, verbose=False, **ARGUMENTS)
    records = []
    for index, result in enumerate(results):
        boxes = result.boxes
        detections = [
            {"bbox": [round(v, 3) for v in xyxy], "score": round(score, 6), "class_id": cls}
            for xyxy, score, cls in zip(
                boxes.xyxy.tolist(), boxes.conf.tolist(), boxes.cls.int().tolist(), strict=True
            )
        ]
        records.append({"frame": index, "detections": detections})
    return records


def write(path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """The JSON file, one frame per line so diffs stay readable."""
    frames = ",\n".join(json.dumps(record) for record in records)
    text = json.dumps(header, indent=1)[:-2] + ',\n "frames": [\n' + frames + "\n]}\n"
    json.loads(text)
    path.write_text(text)


def summary(records: list[dict[str, Any]], ground_truth: dict[str, Any]) -> str:
    """Detections, their score quantiles, and how they score against the ground truth."""
    from vstream import evaluate

    scores = np.array([d["score"] for r in records for d in r["detections"]])
    quantiles = np.quantile(scores, [0.05, 0.25, 0.5, 0.75, 0.95]) if len(scores) else []
    near = int(np.count_nonzero(scores < 0.3))
    return (
        f"{len(scores)} detections, score quantiles 5/25/50/75/95% "
        f"{' '.join(f'{q:.2f}' for q in quantiles)}, {near} below 0.3; "
        f"{evaluate(records, ground_truth)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, default=videos.OUT_DIR)
    args = parser.parse_args()
    model_path = args.assets / MODEL_NAME
    with tempfile.TemporaryDirectory(prefix="parity-reference-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        from ultralytics import settings

        settings.update({"sync": False})
        for clip in videos.CLIPS:
            video_path = args.assets / clip.video_path
            records = predict(model_path, video_path)
            header = {
                "tool": "tools/parity/reference.py: Ultralytics predict",
                "video": video_path.name,
                "video_sha256": sha256(video_path),
                "model": model_path.name,
                "model_sha256": sha256(model_path),
                "versions": versions(),
                "arguments": ARGUMENTS,
                "width": clip.width,
                "height": clip.height,
            }
            out = args.assets / f"{clip.name}.ultralytics.json"
            write(out, header, records)
            truth = json.loads((args.assets / clip.ground_truth_path).read_text())
            print(f"{out.name}: {len(records)} frames, {summary(records, truth)}", flush=True)


if __name__ == "__main__":
    main()
