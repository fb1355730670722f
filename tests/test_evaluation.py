"""Average precision on hand-made cases whose answer is known."""

from __future__ import annotations

import pytest

from vstream.evaluation import evaluate

TRUTH = {
    "names": ["a", "b"],
    "frames": [
        {"frame": 0, "boxes": [[0, 0, 10, 10, 0], [20, 20, 30, 30, 1]]},
        {"frame": 1, "boxes": [[0, 0, 10, 10, 0]]},
    ],
}


def det(bbox, score, class_id=0):
    return {"bbox": bbox, "score": score, "class_id": class_id}


def test_perfect_predictions() -> None:
    records = [
        {"frame": 0, "detections": [det([0, 0, 10, 10], 0.9), det([20, 20, 30, 30], 0.8, 1)]},
        {"frame": 1, "detections": [det([1, 0, 10, 10], 0.7)]},
    ]
    accuracy = evaluate(records, TRUTH)
    assert accuracy.per_class == {"a": 1.0, "b": 1.0}
    assert accuracy.mean == 1.0


def test_missed_object_halves_recall() -> None:
    records = [
        {"frame": 0, "detections": [det([0, 0, 10, 10], 0.9), det([20, 20, 30, 30], 0.8, 1)]}
    ]
    assert evaluate(records, TRUTH).per_class["a"] == pytest.approx(0.5)


def test_false_positive_ranked_first() -> None:
    records = [
        {"frame": 0, "detections": [det([50, 50, 60, 60], 0.95), det([0, 0, 10, 10], 0.9)]},
        {"frame": 1, "detections": [det([0, 0, 10, 10], 0.8)]},
    ]
    # Ranked: FP, TP, TP -> precision at recall 0.5 and 1.0 is 2/3.
    assert evaluate(records, TRUTH).per_class["a"] == pytest.approx(2 / 3)


def test_duplicates_and_wrong_class_do_not_count() -> None:
    records = [
        {
            "frame": 0,
            "detections": [
                det([0, 0, 10, 10], 0.9),
                det([0, 0, 10, 10], 0.85),
                det([20, 20, 30, 30], 0.8, 0),
            ],
        },
        {"frame": 1, "detections": []},
    ]
    accuracy = evaluate(records, TRUTH)
    assert accuracy.per_class["a"] == pytest.approx(0.5)
    assert accuracy.per_class["b"] == 0.0


def test_iou_threshold() -> None:
    records = [{"frame": 1, "detections": [det([0, 0, 10, 16], 0.9)]}]  # IoU 0.625
    assert evaluate(records, TRUTH, iou_threshold=0.5).per_class["a"] == pytest.approx(0.5)
    assert evaluate(records, TRUTH, iou_threshold=0.7).per_class["a"] == 0.0
