"""Agreement with a reference detector: the same boxes, of the same class, in the same frames.

A user's model was validated by the tool that trained it, Ultralytics'
``predict`` for most: vstream must find what that finds on the same video
with the same model and thresholds, or its numbers cannot be compared with
the user's. ``tools/parity/reference.py`` ran Ultralytics on the videos in
``vstream/assets/parity/`` and stored its answers beside them; this module
runs vstream the same way and scores the two against each other. Boxes pair
up frame by frame and class by class, at IoU >= :data:`MATCH_IOU`, by an
optimal assignment (a greedy one would undercount in crowds).

The tests hold the CPU path to recall and precision >= :data:`REQUIRED`, and
``vstream doctor`` measures the same on the user's machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vstream.assets import ASSETS_DIR
from vstream.tracking.base import iou_matrix

PARITY_DIR = ASSETS_DIR / "parity"
MATCH_IOU = 0.85
"""IoU at which a box counts as the reference's box (same frame, same class)."""
REQUIRED = 0.99
"""Recall and precision against the reference that the CPU path must reach."""

Box = Mapping[str, Any]
"""A detection as records hold it: ``bbox`` ``[x1, y1, x2, y2]`` and ``class_id``."""


@dataclass(frozen=True)
class Agreement:
    """How many of two detectors' boxes are the same boxes."""

    matched: int
    ours: int
    reference: int

    @property
    def recall(self) -> float:
        """Share of the reference's boxes vstream found."""
        return self.matched / self.reference if self.reference else 1.0

    @property
    def precision(self) -> float:
        """Share of vstream's boxes the reference found too."""
        return self.matched / self.ours if self.ours else 1.0

    @property
    def met(self) -> bool:
        return min(self.recall, self.precision) >= REQUIRED

    def __add__(self, other: Agreement) -> Agreement:
        return Agreement(
            self.matched + other.matched, self.ours + other.ours, self.reference + other.reference
        )

    def __str__(self) -> str:
        return (
            f"recall {self.recall:.3f}, precision {self.precision:.3f} "
            f"({self.matched} boxes shared; {self.ours} ours, {self.reference} the reference's)"
        )


def count_matches(ours: Sequence[Box], theirs: Sequence[Box], min_iou: float) -> int:
    """Pairs of one frame's boxes, same class, IoU >= ``min_iou``, assigned optimally."""
    return len(matched_pairs(ours, theirs, min_iou))


def matched_pairs(
    ours: Sequence[Box], theirs: Sequence[Box], min_iou: float
) -> list[tuple[int, int]]:
    """The pairs :func:`count_matches` counts, as positions in ``ours`` and ``theirs``."""
    from scipy.optimize import linear_sum_assignment

    pairs = []
    for class_id in {b["class_id"] for b in ours} & {b["class_id"] for b in theirs}:
        mine = [i for i, b in enumerate(ours) if b["class_id"] == class_id]
        others = [j for j, b in enumerate(theirs) if b["class_id"] == class_id]
        a = np.array([ours[i]["bbox"] for i in mine], dtype=np.float64)
        b = np.array([theirs[j]["bbox"] for j in others], dtype=np.float64)
        iou = iou_matrix(a, b)
        rows, cols = linear_sum_assignment(np.where(iou >= min_iou, -iou, 0.0))
        pairs += [
            (mine[r], others[c]) for r, c in zip(rows, cols, strict=True) if iou[r, c] >= min_iou
        ]
    return pairs


def agreement(
    ours: Iterable[Sequence[Box]], reference: Iterable[Sequence[Box]], min_iou: float = MATCH_IOU
) -> Agreement:
    """Score two detectors' boxes, given frame by frame in the same order."""
    total = Agreement(0, 0, 0)
    for mine, theirs in zip(ours, reference, strict=True):
        total += Agreement(count_matches(mine, theirs, min_iou), len(mine), len(theirs))
    return total


@dataclass(frozen=True)
class Reference:
    """The reference's answers on one parity video, and how it was run."""

    video: Path
    model: Path
    arguments: dict[str, Any]
    frames: list[list[Box]]

    @classmethod
    def load(cls, path: Path) -> Reference:
        data = json.loads(path.read_text())
        return cls(
            video=path.parent / data["video"],
            model=path.parent / data["model"],
            arguments=data["arguments"],
            frames=[record["detections"] for record in data["frames"]],
        )

    def options(self) -> dict[str, Any]:
        """vstream's options for the reference's arguments (imgsz, thresholds, max boxes)."""
        args = self.arguments
        return {
            "imgsz": args["imgsz"],
            "conf": args["conf"],
            "iou": args["iou"],
            "max_det": args["max_det"],
        }


def references() -> list[Reference]:
    """Every reference shipped in ``vstream/assets/parity/``, by video name."""
    return [Reference.load(p) for p in sorted(PARITY_DIR.glob("*.ultralytics.json"))]


def measure(reference: Reference, **options: Any) -> Agreement:
    """Run vstream as the reference was run (plus ``options``) and score it against it."""
    from vstream.api import detect

    results = detect(reference.video, model=reference.model, **reference.options(), **options)
    ours = [
        [
            {"bbox": tuple(box), "class_id": class_id}
            for box, class_id in zip(
                result.detections.xyxy.tolist(), result.detections.class_id.tolist(), strict=True
            )
        ]
        for result in results
    ]
    if len(ours) != len(reference.frames):
        raise ValueError(
            f"{reference.video.name}: {len(ours)} frames, the reference has {len(reference.frames)}"
        )
    return agreement(ours, reference.frames)
