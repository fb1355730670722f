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


def test_no_tracks_or_no_detections_give_an_empty_distance() -> None:
    assert cosine_distance(np.zeros((0, 3)), np.stack([unit(1, 0, 0)])).shape == (0, 1)
    assert cosine_distance(np.stack([unit(1, 0, 0)]), np.zeros((0,))).shape == (1, 0)


def test_a_bad_momentum_is_refused() -> None:
    with pytest.raises(ValueError, match="momentum must be in"):
        AppearanceBank(momentum=1.0)


# -- ByteTracker with appearance ----------------------------------------------------------------

RED, BLUE = unit(1, 0, 0), unit(0, 0, 1)


def bounce_frames():
    """Two boxes meet head-on at 7.5 px a frame, overlapping by IoU 0.5 (below the duplicate
    gate), and turn back where they met: a constant-velocity prediction says they went on,
    so each track's prediction overlaps the other object's box more than its own (both
    within the IoU gate)."""
    from synthetic import Mover, render

    movers = [
        Mover([(0, 100, 200), (1.6, 400, 200), (3.2, 100, 200)]),
        Mover([(0, 700, 220), (1.6, 400, 220), (3.2, 700, 220)]),
    ]
    return render(movers, fps=25, seconds=3.2)


def run_tracker(frames, tracker, with_embeddings: bool) -> list[np.ndarray]:
    looks = np.stack([RED, BLUE])
    return [
        tracker.update(
            f.boxes,
            f.scores,
            f.class_ids,
            f.pts,
            looks[: len(f.boxes)] if with_embeddings else None,
        )
        for f in frames
    ]


def ids_per_object(ids: list[np.ndarray]) -> tuple[set[int], set[int]]:
    """Track ids given to object 0 and to object 1 (detections are listed per object)."""
    return (
        {int(i[0]) for i in ids if len(i) > 0 and i[0] > 0},
        {int(i[1]) for i in ids if len(i) > 1 and i[1] > 0},
    )


def test_iou_alone_swaps_ids_where_two_objects_turn_back_and_appearance_keeps_them() -> None:
    from vstream.tracking import ByteTracker, TrackingConfig

    frames = bounce_frames()
    plain = run_tracker(frames, ByteTracker(TrackingConfig()), with_embeddings=False)
    assert ids_per_object(plain) == ({1, 2}, {1, 2})  # the swap
    config = TrackingConfig(appearance="look", appearance_weight=0.5)
    tracker = ByteTracker(config)
    looked = run_tracker(frames, tracker, with_embeddings=True)
    assert ids_per_object(looked) == ({1}, {2})
    assert tracker.num_appearances == 2


def test_without_tracking_appearance_embeddings_change_nothing() -> None:
    from vstream.tracking import ByteTracker, TrackingConfig

    frames = bounce_frames()
    plain = run_tracker(frames, ByteTracker(TrackingConfig()), with_embeddings=False)
    given = run_tracker(frames, ByteTracker(TrackingConfig()), with_embeddings=True)
    weightless = ByteTracker(TrackingConfig(appearance="look", appearance_weight=0.0))
    for other in (given, run_tracker(frames, weightless, with_embeddings=True)):
        assert all(np.array_equal(a, b) for a, b in zip(plain, other, strict=True))


def test_appearance_never_joins_a_track_to_a_box_far_from_it() -> None:
    """A track's own look far away (no overlap with its prediction, and far from its path)
    does not take the track; a box that looks a little different where the track is
    predicted does."""
    from vstream.tracking import ByteTracker, TrackingConfig

    tracker = ByteTracker(TrackingConfig(appearance="look", appearance_weight=1.0))
    box = np.array([[100.0, 100.0, 140.0, 160.0]])
    for i in range(5):
        got = tracker.update(box, [0.9], [0], i / 25, RED[None])
    assert got.tolist() == [1]
    far = np.array([[400.0, 100.0, 440.0, 160.0]])
    got = tracker.update(
        np.concatenate([far, box]), [0.9, 0.9], [0, 0], 5 / 25, np.stack([RED, unit(1, 0.3, 0)])
    )
    assert got.tolist() == [-1, 1]


def test_the_bank_follows_the_live_tracks_and_reset_empties_it() -> None:
    from vstream.tracking import ByteTracker, TrackingConfig

    config = TrackingConfig(appearance="look", track_buffer_seconds=0.2)
    tracker = ByteTracker(config)
    rng = np.random.default_rng(0)
    for i in range(300):
        # Ten objects at a time, each replaced by a new one every 30 frames.
        generation = i // 30
        xs = 60.0 * np.arange(10) + 3.0 * (i % 30)
        boxes = np.stack([xs, np.full(10, 50.0), xs + 30, np.full(10, 90.0)], axis=1)
        boxes[:, 1::2] += 200.0 * (generation % 2)
        looks = rng.normal(size=(10, 8)).astype(np.float32)
        looks /= np.linalg.norm(looks, axis=1, keepdims=True)
        tracker.update(boxes, np.full(10, 0.9), np.zeros(10), i / 25, looks)
        assert tracker.num_appearances <= len(tracker.live_track_ids())
    assert tracker.num_appearances <= 20
    tracker.reset()
    assert tracker.num_appearances == 0


def test_embeddings_must_be_one_row_per_detection() -> None:
    from vstream.tracking import ByteTracker, TrackingConfig

    tracker = ByteTracker(TrackingConfig(appearance="look"))
    boxes = np.array([[0.0, 0, 10, 10], [20, 0, 30, 10]])
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(2, 4\)"):
        tracker.update(boxes, [0.9, 0.9], [0, 0], 0.0, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"\(2,\)"):
        tracker.update(boxes, [0.9, 0.9], [0, 0], 0.0, np.zeros(2, np.float32))


def test_a_track_that_turned_back_while_hidden_is_found_again_by_its_look() -> None:
    """Hidden for 0.6 s while it turns back: its prediction went on, 90 px past the box it
    comes back with, so IoU starts a new track; its look finds the old one."""
    from synthetic import Mover, render

    from vstream.tracking import ByteTracker, TrackingConfig

    mover = Mover([(0, 100, 200), (1.6, 340, 200), (2.0, 340, 200), (3.6, 100, 200)])
    mover.hidden = [(1.5, 2.1)]
    frames = render([mover], fps=25, seconds=3.6)

    def ids(tracker, looks: bool) -> set[int]:
        got = [
            tracker.update(
                f.boxes,
                f.scores,
                f.class_ids,
                f.pts,
                np.tile(RED, (len(f.boxes), 1)) if looks else None,
            )
            for f in frames
        ]
        return {int(i[0]) for i in got if len(i) and i[0] > 0}

    assert ids(ByteTracker(TrackingConfig()), looks=False) == {1, 2}
    assert ids(ByteTracker(TrackingConfig(appearance="look")), looks=True) == {1}


def test_a_box_that_looks_unlike_the_track_does_not_take_it() -> None:
    """Where the track is predicted there is only a box of another look: the track is not
    continued on it (a new object stands where it was), however well the boxes overlap."""
    from vstream.tracking import ByteTracker, TrackingConfig

    tracker = ByteTracker(TrackingConfig(appearance="look"))
    box = np.array([[100.0, 100.0, 140.0, 160.0]])
    for i in range(5):
        assert (
            tracker.update(box, [0.9], [0], i / 25, RED[None]).tolist()
            == [-1, -1, 1, 1, 1][i : i + 1]
        )
    assert tracker.update(box, [0.9], [0], 5 / 25, BLUE[None]).tolist() == [-1]
    plain = ByteTracker(TrackingConfig())
    for i in range(5):
        plain.update(box, [0.9], [0], i / 25)
    assert plain.update(box, [0.9], [0], 5 / 25, BLUE[None]).tolist() == [1]


# -- the demo embedder --------------------------------------------------------------------------


def test_the_demo_embedder_needs_no_keys_but_its_kind_and_tells_objects_apart() -> None:
    import json

    from vstream import VideoFileSource
    from vstream.assets import APPEARANCE_MODEL, SAMPLE_GROUND_TRUTH, SAMPLE_VIDEO
    from vstream.cascade import SecondaryModel
    from vstream.config.secondary import SecondaryConfig
    from vstream.inference.secondary_spec import check_secondary

    assert APPEARANCE_MODEL.stat().st_size < 500_000
    config = SecondaryConfig(name="look", path=str(APPEARANCE_MODEL), kind="embedding")
    spec = check_secondary(config)
    assert (spec.outputs, spec.input_size, spec.crop, spec.resize) == (
        "embedding",
        (32, 32),
        "stretch",
        "linear",
    )
    truth = json.loads(SAMPLE_GROUND_TRUTH.read_text())["frames"]
    model = SecondaryModel(config)
    vectors, ids = [], []
    for frame, expected in zip(VideoFileSource(SAMPLE_VIDEO), truth[:10], strict=False):
        vectors.append(model.run(frame, np.array([b[:4] for b in expected["boxes"]])).embeddings)
        ids += expected["ids"]
    vectors, ids = np.concatenate(vectors), np.array(ids)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    same = ids[:, None] == ids[None, :]
    assert similarity[same].min() > 0.8 > 0.5 > similarity[~same].max()


def test_a_box_mostly_inside_a_higher_scoring_one_has_no_look() -> None:
    """The crop of an object half hidden behind another reads as the one in front: its
    vector is ignored, so it cannot pull the front object's track onto itself."""
    from vstream.tracking.bytetrack import _covered

    boxes = np.array([[0, 0, 40, 40], [10, 0, 50, 40], [100, 0, 140, 40], [0, 0, 40, 40.0]])
    scores = np.array([0.9, 0.5, 0.9, 0.9])
    valid = np.array([True, True, True, False])
    assert _covered(boxes, scores, valid).tolist() == [False, True, False, False]
