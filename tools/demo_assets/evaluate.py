"""Score the exported ONNX model on the sample video through the vstream pipeline itself.

The number that matters is what a user gets from ``vstream run``: PyAV decode,
device letterbox, ONNX Runtime with IO binding, device decode and NMS, boxes
mapped back to frame pixels. So this runs exactly that path and scores the
records with :func:`vstream.evaluate`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from vstream import Detector, VideoFileSource, evaluate
from vstream.engine import detect_iter


@dataclass
class EvalResult:
    """Per-class AP@0.5, their mean, and the end-to-end time per frame in milliseconds."""

    ap: dict[str, float]
    map50: float
    total_ms: float
    frames: int


def score(
    onnx_path: Path,
    video_path: Path,
    gt_path: Path,
    conf: float = 0.001,
    iou: float = 0.45,
    threads: int = 2,
) -> EvalResult:
    """Run the model over every frame of the video and compare with the ground truth."""
    ground_truth = json.loads(gt_path.read_text())
    detector = Detector(onnx_path, device="cpu", conf=conf, iou=iou, intra_op_threads=threads)
    start = time.perf_counter()
    records = [r.to_record() for r in detect_iter(detector, [VideoFileSource(video_path)])]
    elapsed = time.perf_counter() - start
    if len(records) != len(ground_truth["frames"]):
        raise RuntimeError(
            f"decoded {len(records)} frames, the ground truth has {len(ground_truth['frames'])}"
        )
    accuracy = evaluate(records, ground_truth)
    return EvalResult(accuracy.per_class, accuracy.mean, 1e3 * elapsed / len(records), len(records))
