"""``demo-*`` and ``reference-*``: the boxes are right, not only fast.

Three yardsticks, each from outside the path being checked: the bundled
demo's ground truth (mAP@0.5 on the CPU), the CPU path's own boxes for the
GPU path (same frames, same classes, IoU >= :data:`MATCH_IOU`), and
Ultralytics' stored predictions on the parity videos (:mod:`vstream.parity`).
Each returns its line and numbers or raises. The demo checks score records
the runner made, so that the CPU path's records serve both ``demo-cpu`` and
``demo-gpu``; the reference checks run :func:`vstream.parity.measure`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vstream.assets import DEMO_MODEL, SAMPLE_GROUND_TRUTH, SAMPLE_VIDEO
from vstream.doctor.report import Failed, Skipped

MATCH_IOU = 0.9
"""IoU at which a GPU box counts as the same box as a CPU box."""
MATCH_FRACTION = 0.98
"""Share of boxes that must match between the GPU and the CPU path."""
DEMO_MAP = 0.9
"""mAP@0.5 the bundled demo model reaches on the bundled video (as the end-to-end tests hold)."""


def demo_accuracy(
    records: list[dict[str, Any]], model: Path, video: Path
) -> tuple[str, dict[str, Any]]:
    """mAP@0.5 of ``records`` against the bundled ground truth, which only the demo pair has."""
    from vstream.evaluation import evaluate

    # Resolved: the bundled pair given by a relative path or a link is the same pair.
    if (model.resolve(), video.resolve()) != (DEMO_MODEL.resolve(), SAMPLE_VIDEO.resolve()):
        raise Skipped("no ground truth for this model and video (the bundled demo has one)")
    truth = json.loads(SAMPLE_GROUND_TRUTH.read_text())
    accuracy = evaluate(records, truth)
    data = {"frames": len(records), "map50": round(accuracy.mean, 4)}
    if accuracy.mean < DEMO_MAP:
        raise Failed(f"{accuracy} < {DEMO_MAP}")
    return f"{len(records)} frames, {accuracy}", data


def gpu_matches_cpu(
    cpu_records: list[dict[str, Any]], records: list[dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """The GPU path's ``records`` hold the CPU path's boxes: :data:`MATCH_FRACTION` of them."""
    matched, total = match_records(cpu_records, records)
    share = matched / total if total else 1.0
    data = {
        "frames": len(records),
        "decoder": records[0]["decoder"] if records else None,
        "boxes": total,
        "matched": matched,
        "share": round(share, 4),
    }
    if len(records) != len(cpu_records):
        raise Failed(f"{len(records)} GPU records for {len(cpu_records)} CPU records")
    if share < MATCH_FRACTION:
        raise Failed(
            f"{matched} of {total} boxes ({share:.1%}) match the CPU's at IoU >= {MATCH_IOU}"
        )
    return (
        f"{matched} of {total} boxes ({share:.1%}) match the CPU path at IoU >= {MATCH_IOU} "
        f"({data['decoder']} decoder)"
    ), data


def match_records(
    reference: list[dict[str, Any]], candidate: list[dict[str, Any]], iou: float = MATCH_IOU
) -> tuple[int, int]:
    """``(matched, total)``: boxes of the same frame and class paired at ``iou`` or better.

    ``total`` counts the larger side's boxes of each frame, so a box missing
    on either side counts against the match.
    """
    from vstream.parity import count_matches

    by_frame = {(r["stream"], r["frame"]): r["detections"] for r in candidate}
    reference_by_frame = {(r["stream"], r["frame"]): r["detections"] for r in reference}
    matched = total = 0
    for key in set(reference_by_frame) | set(by_frame):
        mine, theirs = reference_by_frame.get(key, []), by_frame.get(key, [])
        total += max(len(mine), len(theirs))
        matched += count_matches(mine, theirs, iou)
    return matched, total


def reference_agreement(**options: Any) -> tuple[str, dict[str, Any]]:
    """vstream against Ultralytics' stored answers on every parity video (:mod:`vstream.parity`).

    ``options`` go to :func:`vstream.parity.measure`: the device and decoder to run with.
    Boxes pair at the parity module's IoU, not at this module's CPU-to-GPU :data:`MATCH_IOU`.
    """
    from vstream import parity

    found = parity.references()
    if not found:
        raise Skipped("no reference answers in vstream/assets/parity")
    agreements = {r.video.name: parity.measure(r, **options) for r in found}
    data = {
        name: {"recall": round(a.recall, 4), "precision": round(a.precision, 4), "boxes": a.ours}
        for name, a in agreements.items()
    }
    short = [f"{name}: {a}" for name, a in agreements.items() if not a.met]
    if short:
        raise Failed(f"below {parity.REQUIRED} at IoU >= {parity.MATCH_IOU}: " + "; ".join(short))
    worst = min(min(a.recall, a.precision) for a in agreements.values())
    return (
        f"{len(agreements)} videos, recall and precision >= {worst:.3f} "
        f"at IoU >= {parity.MATCH_IOU} (same class)"
    ), data
