"""Ultralytics' own answers for a pose and an OBB model on the parity videos: test fixtures.

The models are the parity detector (``demo_tempered.onnx``: our weights, a real
model's scores) grown into Ultralytics' pose and OBB layouts by
``tests/onnx_models.py``'s ``task_model`` (keypoints and angles computed in the
graph from each row's box and scores), so they can be rebuilt by the tests
themselves and nothing Ultralytics trained is committed. Ultralytics ``predict``
(its video reader, letterbox, ONNX Runtime session, NMS: Fast NMS on the
probabilistic IoU for OBB; keypoint scaling) runs each on parity videos with
``reference.py``'s arguments, and the answers go to ``tests/data/tasks/``:
per frame the boxes, scores, class ids and the keypoints (``[x, y, score]``) or
the oriented boxes (``[cx, cy, w, h, angle]``), in frame pixels, with the
versions, arguments and the SHA-256 of the model and the video.

Ultralytics (AGPL-3.0) runs here as a separate oracle, never imported by vstream
or its tests. Needs ``pip install -e '.[bench]'``; runs offline::

    .venv/bin/python tools/parity/tasks.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import reference  # tools/parity, beside this script

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from onnx_models import task_model  # noqa: E402

OUT_DIR = ROOT / "tests" / "data" / "tasks"
VIDEOS = {"pose": "landscape_854x480.mp4", "obb": "standard_640x480.mp4"}
"""The parity video each task is checked on (one each keeps the tests' time short)."""


def predict(model_path: Path, video_path: Path, task: str) -> list[dict[str, Any]]:
    """One record per frame, as vstream writes them: boxes, scores, classes and the task's."""
    from ultralytics import YOLO

    model = YOLO(str(model_path), task=task)
    results = model.predict(
        source=str(video_path), stream=True, verbose=False, **reference.ARGUMENTS
    )
    records = []
    for index, result in enumerate(results):
        detections = []
        if task == "pose":
            boxes = result.boxes
            points = result.keypoints.data.tolist()
            for xyxy, score, cls, kpts in zip(
                boxes.xyxy.tolist(), boxes.conf.tolist(), boxes.cls.int().tolist(), points,
                strict=True,
            ):  # fmt: skip
                detections.append(
                    {
                        "bbox": [round(v, 3) for v in xyxy],
                        "score": round(score, 6),
                        "class_id": cls,
                        "keypoints": [[round(v, 3) for v in p] for p in kpts],
                    }
                )
        else:
            obb = result.obb
            for xywhr, score, cls in zip(
                obb.xywhr.tolist(), obb.conf.tolist(), obb.cls.int().tolist(), strict=True
            ):
                detections.append(
                    {
                        "obb": [round(v, 3) for v in xywhr[:4]] + [round(xywhr[4], 6)],
                        "score": round(score, 6),
                        "class_id": cls,
                    }
                )
        records.append({"frame": index, "detections": detections})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    assets = reference.videos.OUT_DIR
    with tempfile.TemporaryDirectory(prefix="parity-tasks-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        from ultralytics import settings

        settings.update({"sync": False})
        source = assets / reference.MODEL_NAME
        for task, video in VIDEOS.items():
            model_path = task_model(source, Path(tmp) / f"parity_{task}.onnx", task)
            video_path = assets / video
            records = predict(model_path, video_path, task)
            header = {
                "tool": "tools/parity/tasks.py: Ultralytics predict",
                "task": task,
                "video": video_path.name,
                "video_sha256": reference.sha256(video_path),
                "source_model": source.name,
                "model_sha256": reference.sha256(model_path),
                "versions": reference.versions(),
                "arguments": reference.ARGUMENTS,
            }
            out = args.out / f"{Path(video).stem}.{task}.json"
            reference.write(out, header, records)
            count = sum(len(r["detections"]) for r in records)
            print(f"{out.name}: {len(records)} frames, {count} objects", flush=True)


if __name__ == "__main__":
    main()
