"""Host-side results: detections per frame, ready for sinks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vstream.frame import Frame


@dataclass(frozen=True)
class Detection:
    """One detected object, in pixels of the original frame."""

    bbox: tuple[float, float, float, float]
    """``(x1, y1, x2, y2)`` in original frame pixels."""
    score: float
    class_id: int
    label: str

    def to_record(self) -> dict[str, Any]:
        return {
            "bbox": [round(v, 2) for v in self.bbox],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }


@dataclass(frozen=True)
class FrameResult:
    """All detections of one frame, with the frame's identity and size."""

    stream_id: str
    frame_index: int
    pts_seconds: float
    width: int
    height: int
    detections: tuple[Detection, ...]

    def to_record(self) -> dict[str, Any]:
        """The JSON Lines record of this frame."""
        return {
            "stream": self.stream_id,
            "frame": self.frame_index,
            "pts": round(self.pts_seconds, 6),
            "width": self.width,
            "height": self.height,
            "detections": [d.to_record() for d in self.detections],
        }


def label_for(class_id: int, class_names: Mapping[int, str]) -> str:
    return class_names.get(class_id, str(class_id))


def split_by_frame(
    detections: np.ndarray, frames: Sequence[Frame], class_names: Mapping[int, str]
) -> list[FrameResult]:
    """Split a batch's host detections (rows of ``frame, x1, y1, x2, y2, score, class_id``)."""
    per_frame: list[list[Detection]] = [[] for _ in frames]
    for position, x1, y1, x2, y2, score, class_id in detections.tolist():
        cid = int(class_id)
        per_frame[int(position)].append(
            Detection((x1, y1, x2, y2), score, cid, label_for(cid, class_names))
        )
    return [
        FrameResult(f.stream_id, f.index, f.pts_seconds, f.width, f.height, tuple(dets))
        for f, dets in zip(frames, per_frame, strict=True)
    ]
