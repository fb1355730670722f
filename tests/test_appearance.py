"""Appearance cost: cosine distance of unit vectors blended into the IoU cost, and the bank."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from vstream.tracking.appearance import AppearanceBank, blend_costs, cosine_distance
from vstream.tracking.base import iou_matrix


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, np.float32)
    return v / np.linalg.norm(v)


def test_cosine_distance_is_zero_alike_one_opposite_and_nan_without_a_vector() -> None:
    tracks = np.stack([unit(1, 0), unit(0, 1), np.zeros(2, np.float32)])
    detections = np.stack([unit(1, 0), unit(-1, 0)])
    got = cosine_distance(tracks, detections)
    np.testing.assert_allclose(got[:2], [[0.0, 1.0], [0.5, 0.5]], atol=1e-6)
    assert np.isnan(got[2]).all()


def test_the_iou_gate_holds_and_missing_vectors_leave_the_iou_cost() -> None:
    iou_cost = np.array([[0.2, np.inf], [0.6, 0.3]])
    appearance = np.array([[1.0, 0.0], [np.nan, 0.1]])
    got = blend_costs(iou_cost, appearance, weight=0.5)
    np.testing.assert_allclose(got, [[0.6, np.inf], [0.6, 0.2]])
    np.testing.assert_array_equal(blend_costs(iou_cost, appearance, 0.0), iou_cost)


def test_appearance_keeps_ids_through_a_crossing_iou_alone_swaps() -> None:
    """Two objects mid-crossing, a little further on than predicted: each predicted box
    overlaps the other object's detection more than its own, so IoU alone swaps the
    ids; the objects look different, and the blended cost keeps them."""
    predicted = np.array([[100, 100, 140, 140], [110, 100, 150, 140]], np.float64)
    detections = np.array([[106, 100, 146, 140], [104, 100, 144, 140]], np.float64)
    # Track 0 (red) is really detection 0, track 1 (blue) detection 1.
    track_vectors = np.stack([unit(1, 0, 0), unit(0, 0, 1)])
    detection_vectors = np.stack([unit(1, 0.1, 0), unit(0.1, 0, 1)])
    iou_cost = 1 - iou_matrix(predicted, detections)
    rows, cols = linear_sum_assignment(iou_cost)
    assert cols[np.argsort(rows)].tolist() == [1, 0]  # the swap
    blended = blend_costs(iou_cost, cosine_distance(track_vectors, detection_vectors), 0.5)
    rows, cols = linear_sum_assignment(blended)
    assert cols[np.argsort(rows)].tolist() == [0, 1]


def test_the_bank_smooths_keeps_unit_length_and_forgets_ended_tracks() -> None:
    bank = AppearanceBank(momentum=0.5)
    bank.update(np.array([3, 4, -1]), np.stack([unit(1, 0), unit(0, 1), unit(1, 1)]))
    bank.update(np.array([3, 4]), np.stack([unit(0, 1), np.zeros(2, np.float32)]))
    got = bank.vectors(np.array([3, 4, 9]), 2)
    np.testing.assert_allclose(got[0], unit(1, 1), atol=1e-6)  # halfway, made unit again
    np.testing.assert_allclose(got[1], unit(0, 1))  # a zero vector is no reading
    np.testing.assert_array_equal(got[2], [0, 0])  # unknown track: no vector
    assert len(bank) == 2  # the untracked detection (-1) was not kept
    bank.retain([4])
    assert len(bank) == 1 and not bank.vectors(np.array([3]), 2).any()


def test_a_bad_momentum_is_refused() -> None:
    with pytest.raises(ValueError, match="momentum must be in"):
        AppearanceBank(momentum=1.0)
