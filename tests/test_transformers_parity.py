"""DETR-family decoding against transformers' own ``post_process_object_detection``.

``tools/families/transformers_oracle.py`` built four Hugging Face folders
(``model.onnx``, ``config.json``, ``preprocessor_config.json``) with random
heads whose scores spread, one per way transformers reads a DETR (DETR's
softmax with a no-object class; RT-DETR's, D-FINE's and RF-DETR's sigmoid with
the top-k over queries x classes), ran transformers' image processor, the
graph and its post-processing on the first frames of a parity video, and
stored the answers beside each folder (transformers is never imported here).
vstream reads each folder as a user would, with nothing set but the threshold
and the reference's top-k (its query count).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vstream.api import detect
from vstream.parity import PARITY_DIR, REQUIRED, agreement

FOLDERS = Path(__file__).parent / "data" / "families"
FAMILIES = ("detr", "rt_detr", "d_fine", "rf_detr")


def reference(name: str) -> dict:
    return json.loads((FOLDERS / name / "transformers.json").read_text())


@pytest.mark.parametrize("name", FAMILIES)
def test_vstream_finds_what_transformers_finds(name: str) -> None:
    """Before: DETR's softmax read as sigmoids (recall 0.71, precision 0.42), RT-DETR and
    D-FINE fed ImageNet-normalised values (0.00), RF-DETR one class per query (recall 0.71)."""
    ref = reference(name)
    results = detect(
        PARITY_DIR / ref["video"],
        model=FOLDERS / name / "model.onnx",
        conf=ref["threshold"],
        max_det=ref["max_det"],
        device="cpu",
        end_seconds=len(ref["frames"]) / 25,
    )
    ours = [[{"bbox": d.bbox, "class_id": d.class_id} for d in r.detections] for r in results]
    score = agreement(ours, ref["frames"])
    assert score.reference > 400, "enough boxes to measure a 1 % difference"
    assert score.recall >= REQUIRED and score.precision >= REQUIRED, str(score)


def test_the_references_hold_what_each_rule_makes() -> None:
    """DETR gives one class per query; the top-k families give some queries two classes
    (the same box twice), which one class per query would miss."""
    for name in FAMILIES:
        frames = reference(name)["frames"]
        shared = sum(
            len({d["class_id"] for d in frame if d["bbox"] == box["bbox"]}) > 1
            for frame in frames
            for box in frame
        )
        assert (shared == 0) if name == "detr" else (shared > 100), (name, shared)
        scores = [d["score"] for frame in frames for d in frame]
        assert sum(0.3 < s < 0.6 for s in scores) > 0.2 * len(scores), "scores spread"
