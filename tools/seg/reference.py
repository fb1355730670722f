"""Ultralytics' masks on the parity videos with the demo segmentation model: what vstream must give.

Runs Ultralytics ``predict`` (its video reader, letterbox, ONNX Runtime
session, NMS and mask processing) with ``vstream/assets/demo_seg.onnx`` on the
first :data:`FRAMES` frames of each parity video and writes
``<video>.ultralytics_seg.json`` beside it: per frame the boxes in frame
pixels, scores, class ids and each object's mask. ``retina_masks=True``:
Ultralytics then makes the masks at the frame's size (its logits resampled
bilinearly to the frame, above 0, cropped to the box), the resolution
vstream's masks have. A mask is stored as the bounding window of its pixels
(``[x, y, w, h]``) and the window's bits, row-major, ``np.packbits``, zlib,
base64.
Otherwise as ``tools/parity/reference.py``: ``imgsz=320, conf=0.25, iou=0.45,
rect=False``. Ultralytics (AGPL-3.0) is an oracle here, never imported by
vstream or its tests::

    .venv/bin/python tools/seg/reference.py
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import tempfile
import zlib
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "parity"))

import reference as boxes_reference  # noqa: E402
import videos  # noqa: E402

MODEL = ROOT / "vstream" / "assets" / "demo_seg.onnx"
FRAMES = 24
"""Frames of each video: enough objects (100+ over the three) for a 1 % difference to show."""
ARGUMENTS: dict[str, Any] = {**boxes_reference.ARGUMENTS, "retina_masks": True}


def window(mask: np.ndarray) -> dict[str, Any]:
    """The mask's bounding window and its bits (an empty mask: an empty window)."""
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    if len(rows) == 0:
        return {"window": [0, 0, 0, 0], "bits": ""}
    y, x = int(rows[0]), int(cols[0])
    cut = mask[y : rows[-1] + 1, x : cols[-1] + 1]
    bits = base64.b64encode(zlib.compress(np.packbits(cut.reshape(-1)).tobytes(), 9)).decode()
    return {"window": [x, y, cut.shape[1], cut.shape[0]], "bits": bits}


def predict(model_path: Path, video_path: Path) -> list[dict[str, Any]]:
    """One record per frame: ``{"frame", "detections": [{"bbox", "score", "class_id", "window",
    "bits"}]}``."""
    from ultralytics import YOLO

    model = YOLO(str(model_path), task="segment")
    results = model.predict(source=str(video_path), stream=True, verbose=False, **ARGUMENTS)
    records = []
    for index, result in enumerate(islice(results, FRAMES)):
        boxes = result.boxes
        masks = (
            result.masks.data.cpu().numpy().astype(bool)
            if result.masks is not None
            else np.zeros((0, 1, 1), bool)
        )
        assert masks.shape[1:] == result.orig_shape, (masks.shape, result.orig_shape)
        detections = [
            {
                "bbox": [round(v, 3) for v in xyxy],
                "score": round(score, 6),
                "class_id": cls,
                **window(mask),
            }
            for xyxy, score, cls, mask in zip(
                boxes.xyxy.tolist(),
                boxes.conf.tolist(),
                boxes.cls.int().tolist(),
                masks,
                strict=True,
            )
        ]
        records.append({"frame": index, "detections": detections})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, default=videos.OUT_DIR)
    parser.add_argument("--model", type=Path, default=MODEL)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="seg-reference-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        from ultralytics import settings

        settings.update({"sync": False})
        for clip in videos.CLIPS:
            video_path = args.assets / clip.video_path
            records = predict(args.model, video_path)
            header = {
                "tool": "tools/seg/reference.py: Ultralytics predict, retina_masks",
                "video": video_path.name,
                "video_sha256": boxes_reference.sha256(video_path),
                "model": os.path.relpath(args.model, args.assets),
                "model_sha256": boxes_reference.sha256(args.model),
                "versions": boxes_reference.versions(),
                "arguments": ARGUMENTS,
                "width": clip.width,
                "height": clip.height,
            }
            out = args.assets / f"{clip.name}.ultralytics_seg.json"
            boxes_reference.write(out, header, records)
            count = sum(len(r["detections"]) for r in records)
            print(f"{out.name}: {len(records)} frames, {count} objects", flush=True)


if __name__ == "__main__":
    main()
