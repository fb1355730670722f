"""Ultralytics' streaming predict on an ONNX model, as a process of its own.

Run by ``vstream bench --ultralytics``, never imported by vstream itself::

    python -m vstream.bench.ultralytics_predict VIDEO MODEL --imgsz 320

Ultralytics is told to stay offline (``YOLO_OFFLINE``, settings sync off,
its settings file in a directory of the caller's choosing) and to run its
ONNX backend on the CPU, on square ``imgsz x imgsz`` inputs as vstream does
(``rect=False``: by default it would shrink the padding of a dynamic model's
input to the stride, a smaller input than the other sides get). Prints
``{"frames": N, "detections": M}``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description="Ultralytics streaming predict, as a process.")
    parser.add_argument("video", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--imgsz", type=int, default=640)
    args = parser.parse_args()
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from ultralytics import YOLO, settings

    settings.update({"sync": False})
    model = YOLO(str(args.model), task="detect")
    frames = detections = 0
    for result in model.predict(
        source=str(args.video),
        stream=True,
        imgsz=args.imgsz,
        rect=False,
        device="cpu",
        verbose=False,
    ):
        frames += 1
        detections += len(result.boxes)
    print(json.dumps({"frames": frames, "detections": detections}))


if __name__ == "__main__":
    main()
