"""The same masks as Ultralytics' ``predict`` on the parity videos, with the demo seg model.

``vstream/assets/demo_seg.onnx`` is the demo detector with a mask head of our
own in Ultralytics' segmentation layout, its scores spread as a real model's
(tools/seg/demo_model.py). Ultralytics' answers on the first frames of each
parity video, masks at the frame's size (``retina_masks``), were stored beside
the videos by tools/seg/reference.py (Ultralytics is never imported here).
Boxes pair up as in tests/test_parity.py; the masks of paired boxes must
overlap as Ultralytics' do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from vstream.api import detect
from vstream.masks import Mask
from vstream.parity import MATCH_IOU, PARITY_DIR, REQUIRED, matched_pairs
from vstream.results import MASKS

MASK_IOU = 0.99
"""Mean IoU of the masks of paired boxes that vstream must reach (issue 32 asks 0.95; the
same resampling rule as Ultralytics' gives 0.9996 to 1.0000)."""
REFERENCES = sorted(PARITY_DIR.glob("*.ultralytics_seg.json"))


def _theirs(detection: dict, width: int, height: int) -> np.ndarray:
    full = np.zeros((height, width), bool)
    x, y, w, h = detection["window"]
    if w and h:
        bits = np.frombuffer(zlib.decompress(base64.b64decode(detection["bits"])), np.uint8)
        full[y : y + h, x : x + w] = np.unpackbits(bits, count=w * h).reshape(h, w)
    return full


def _ours(mask: Mask) -> np.ndarray:
    full = np.zeros((mask.frame_height, mask.frame_width), bool)
    full[mask.y : mask.y + mask.height, mask.x : mask.x + mask.width] = mask.window()
    return full


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: p.name.split(".")[0])
def test_the_cpu_path_makes_ultralytics_masks(path: Path) -> None:
    reference = json.loads(path.read_text())
    video, model = path.parent / reference["video"], path.parent / reference["model"]
    for key, file in (("model_sha256", model), ("video_sha256", video)):
        assert reference[key] == hashlib.sha256(file.read_bytes()).hexdigest(), key
    args = reference["arguments"]
    options = {k: args[k] for k in ("imgsz", "conf", "iou", "max_det")}
    frames = reference["frames"]
    results = list(islice(detect(video, model=model, device="cpu", **options), len(frames)))
    matched = ours_count = theirs_count = 0
    ious = []
    for result, frame in zip(results, frames, strict=True):
        detections = result.detections
        mine = [
            {"bbox": box, "class_id": c}
            for box, c in zip(detections.xyxy.tolist(), detections.class_id.tolist(), strict=True)
        ]
        theirs = frame["detections"]
        pairs = matched_pairs(mine, theirs, MATCH_IOU)
        matched, ours_count = matched + len(pairs), ours_count + len(mine)
        theirs_count += len(theirs)
        for i, j in pairs:
            a = _ours(detections.data[MASKS][i])
            b = _theirs(theirs[j], result.width, result.height)
            ious.append((a & b).sum() / max((a | b).sum(), 1))
    assert theirs_count > 80, "enough objects to see a 1 % difference"
    recall, precision = matched / theirs_count, matched / ours_count
    assert recall >= REQUIRED and precision >= REQUIRED, (recall, precision)
    assert np.mean(ious) >= MASK_IOU, (np.mean(ious), np.min(ious))
