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
    track_id: int | None = None
    """The confirmed track this detection is on (with tracking on); None otherwise."""
    predicted: bool = False
    """The box is the tracker's prediction on a frame the detector did not see
    (:mod:`vstream.engine.cadence`); the record says ``"predicted": true``."""

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "bbox": [round(v, 2) for v in self.bbox],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.track_id is not None:
            record["track_id"] = self.track_id
        if self.predicted:
            record["predicted"] = True
        return record


@dataclass(frozen=True)
class FrameResult:
    """All detections of one frame, with the frame's identity and size."""

    stream_id: str
    frame_index: int
    pts_seconds: float
    width: int
    height: int
    detections: tuple[Detection, ...]
    events: tuple[dict[str, Any], ...] | None = None
    """Line crossings, zone entries and exits, loitering; None where analytics are off."""
    line_counts: dict[str, dict[str, int]] | None = None
    """Running count per line and direction (``{"gate": {"in": 3, "out": 1}}``)."""
    zone_occupancy: dict[str, int] | None = None
    """Tracks inside each zone in this frame."""

    def to_record(self) -> dict[str, Any]:
        """The JSON Lines record of this frame (analytics keys only where analytics run)."""
        record: dict[str, Any] = {
            "stream": self.stream_id,
            "frame": self.frame_index,
            "pts": round(self.pts_seconds, 6),
            "width": self.width,
            "height": self.height,
            "detections": [d.to_record() for d in self.detections],
        }
        if self.events is not None:
            record["events"] = list(self.events)
        if self.line_counts is not None:
            record["lines"] = self.line_counts
        if self.zone_occupancy is not None:
            record["zones"] = self.zone_occupancy
        return record


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
