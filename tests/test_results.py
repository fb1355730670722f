"""Columnar detections: shapes, selection, immutability, per-frame split, and the records."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
import torch

from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig
from vstream.config.tracking import TrackingConfig
from vstream.engine.outputs import analyze
from vstream.frame import Frame, PixelFormat
from vstream.results import (
    ATTRIBUTES,
    KEYPOINTS,
    NO_TRACK,
    OBB,
    Detection,
    Detections,
    FrameResult,
    rotated_corners,
    split_by_frame,
)

NAMES = {0: "person", 1: "car"}


def three() -> Detections:
    return Detections(
        np.array([[1, 2, 3, 4], [10, 20, 30, 40], [5, 6, 7, 8]], np.float32),
        np.array([0.9, 0.5, 0.7], np.float32),
        np.array([0, 1, 7]),
        np.array([3, NO_TRACK, 9]),
        class_names=NAMES,
        data={"embedding": np.arange(6.0).reshape(3, 2), "predicted": np.array([0, 1, 0], bool)},
    )


def frame(index: int, width: int = 640, height: int = 360) -> Frame:
    data = torch.zeros((height, width, 3), dtype=torch.uint8)
    return Frame(data, PixelFormat.RGB24, width, height, stream_id="cam", index=index,
                 pts_seconds=index / 25)  # fmt: skip


def test_the_record_is_exactly_the_json_lines_format() -> None:
    """Keys, key order, rounding and track_id only where tracked: the bytes users parse."""
    detections = Detections(
        np.array([[412.3456, 80.1049, 470.9, 139.6], [1.0, 2.0, 3.0, 4.0]], np.float32),
        np.array([0.912345, 0.25], np.float32),
        np.array([0, 5]),
        np.array([7, NO_TRACK]),
        class_names={0: "disc"},
    )
    result = FrameResult("sample", 12, 0.48, 640, 360, detections, events=(),
                         line_counts={"gate": {"in": 1, "out": 0}})  # fmt: skip
    expected = (
        '{"stream":"sample","frame":12,"pts":0.48,"width":640,"height":360,"detections":['
        '{"bbox":[412.35,80.1,470.9,139.6],"score":0.9123,"class_id":0,"label":"disc",'
        '"track_id":7},'
        '{"bbox":[1.0,2.0,3.0,4.0],"score":0.25,"class_id":5,"label":"5"}],'
        '"events":[],"lines":{"gate":{"in":1,"out":0}}}'
    )
    assert json.dumps(result.to_record(), separators=(",", ":")) == expected


def test_records_round_as_python_rounds_every_number() -> None:
    """Boxes and scores are rounded a column at a time: the floats must be the ones Python's
    ``round`` gives each number (the oracle here), float32 or float64, halves included."""
    rng = np.random.default_rng(7)
    halves = np.array([0.125, 0.375, 2.5, 1.005, 2.675, 0.00005, 0.00015, 1e-9, -0.125])
    singles = np.concatenate(
        [
            rng.uniform(-10, 4000, 20_000),
            rng.uniform(0, 1, 20_000),
            np.round(rng.uniform(0, 4000, 4_000), 3),  # at or next to a third decimal
            np.round(rng.uniform(0, 1, 4_000), 5),
            halves,
            [np.inf, -np.inf, 0.0, -0.0, 3.4e38],
        ]
    )
    rows = len(singles) // 4 + 1  # every number in a box, the last row filled from the start
    for dtype in (np.float32, np.float64):
        boxes = np.resize(singles, rows * 4).astype(dtype).reshape(rows, 4)
        scores = singles[-rows:].astype(dtype)
        detections = Detections(boxes, scores, np.zeros(rows, np.int64))
        records = detections.records()
        assert [r["bbox"] for r in records] == [
            [round(v, 2) for v in box] for box in boxes.tolist()
        ]
        assert [r["score"] for r in records] == [round(v, 4) for v in scores.tolist()]
    nan = Detections(np.full((1, 4), np.nan, np.float32), np.array([np.nan], np.float32), [0])
    (record,) = nan.records()
    assert all(np.isnan(v) for v in [*record["bbox"], record["score"]])


def test_numbers_too_large_to_scale_are_rounded_as_python_rounds_them_without_a_warning() -> None:
    """Near the largest float64 the number scaled by ``10**digits`` overflows: Python rounds
    those, and numpy's overflow warning (which would reach a user's log) is not raised."""
    huge = np.array([[-1.7e308, -9e307, 1e300, 1.7e308]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (record,) = Detections(huge, np.array([1e308]), np.zeros(1, np.int64)).records()
    assert record["bbox"] == [round(v, 2) for v in huge[0].tolist()]
    assert record["score"] == round(1e308, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_keypoints_and_oriented_boxes_round_as_python_rounds(dtype: type) -> None:
    """A pose model's keypoints (pixels to 2 decimals, scores to 4) and an OBB model's boxes
    (the angle to 4) and corners (2) are rounded as boxes are: Python's ``round`` of each
    number is the oracle, halves included."""
    rng = np.random.default_rng(11)
    halves = [0.125, 2.675, 1.005, 0.00015, -0.125, 0.00005]
    count = 300
    boxes = np.tile(np.array([[0.0, 0.0, 10.0, 10.0]], dtype), (count, 1))
    points = rng.uniform(0, 2000, (count, 17, 3))
    points[..., 2] = rng.uniform(0, 1, (count, 17))
    points.reshape(-1)[: len(halves)] = halves
    points.reshape(-1)[-len(halves) :] = halves  # some halves land on the scores
    rotated = np.column_stack([rng.uniform(0, 2000, (count, 4)), rng.uniform(-1.6, 1.6, count)])
    rotated.reshape(-1)[: len(halves)] = halves
    points, rotated = points.astype(dtype), rotated.astype(dtype)
    both = {KEYPOINTS: points, OBB: rotated}
    records = Detections(boxes, np.full(count, 0.5), np.zeros(count, np.int64), data=both).records()
    assert [r["keypoints"] for r in records] == [
        [[round(x, 2), round(y, 2), round(score, 4)] for x, y, score in kp]
        for kp in points.tolist()
    ]
    assert [r["obb"] for r in records] == [
        [*(round(v, 2) for v in row[:4]), round(row[4], 4)] for row in rotated.tolist()
    ]
    corners = rotated_corners(rotated.astype(np.float64)).tolist()
    assert [r["corners"] for r in records] == [
        [[round(x, 2), round(y, 2)] for x, y in box] for box in corners
    ]


def test_a_frame_without_detections_has_an_empty_list() -> None:
    record = FrameResult("cam", 0, 0.0, 64, 48).to_record()
    assert record["detections"] == [] and "events" not in record


def test_shapes_that_disagree_are_named() -> None:
    with pytest.raises(ValueError, match=r"xyxy \(3, 4\), confidence \(2,\), class_id \(3,\)"):
        Detections(np.zeros((3, 4)), np.zeros(2), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"xyxy \(2, 5\)"):
        Detections(np.zeros((2, 5)), np.zeros(2), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"embedding \(2, 8\)"):
        Detections(np.zeros((3, 4)), np.zeros(3), np.zeros(3, np.int64),
                   data={"embedding": np.zeros((2, 8))})  # fmt: skip
    with pytest.raises(ValueError, match="class_id must hold integers"):
        Detections(np.zeros((1, 4)), np.zeros(1), np.array([0.5]))


def test_selection_keeps_every_column_aligned() -> None:
    dets = three()
    kept = dets[dets.confidence > 0.6]
    assert len(kept) == 2
    np.testing.assert_array_equal(kept.class_id, [0, 7])
    np.testing.assert_array_equal(kept.tracker_id, [3, 9])
    np.testing.assert_array_equal(kept.data["embedding"], [[0.0, 1.0], [4.0, 5.0]])
    np.testing.assert_array_equal(kept.data["predicted"], [False, False])
    assert kept.labels == ["person", "7"]
    by_index = dets[np.array([2, 0])]
    np.testing.assert_array_equal(by_index.xyxy, [[5, 6, 7, 8], [1, 2, 3, 4]])
    assert by_index.xyxy.dtype == np.float32  # the device's precision is kept
    assert len(dets[1:]) == 2 and len(dets[dets.confidence > 1]) == 0


def test_selections_and_added_columns_are_what_the_constructor_makes() -> None:
    """Rows and added columns skip the constructor's checks (they cannot fail there): the
    result must equal the constructor's, read-only, and anything else still be refused."""
    dets = three()
    selections = [
        [True, False, True],
        np.array([2, 0]),
        [1],
        [],
        slice(1, None),
        np.array([], np.intp),
    ]
    for rows in selections:
        made = Detections(
            dets.xyxy[rows],
            dets.confidence[rows],
            dets.class_id[rows],
            dets.tracker_id[rows],
            class_names=NAMES,
            data={k: v[rows] for k, v in dets.data.items()},
        )
        chosen = dets[rows]
        assert chosen == made and chosen.records() == made.records()
        assert not chosen.xyxy.flags.writeable and not chosen.data["embedding"].flags.writeable
    tracked = dets.with_columns(tracker_id=[5, 6, 7], data={"read": np.arange(3)})
    assert tracked.tracker_id.tolist() == [5, 6, 7] and set(tracked.data) == {
        "embedding",
        "predicted",
        "read",
    }
    assert not tracked.tracker_id.flags.writeable and tracked.xyxy is dets.xyxy
    with pytest.raises(ValueError, match=r"tracker_id \(2,\)"):
        dets.with_columns(tracker_id=[1, 2])
    with pytest.raises(ValueError, match="tracker_id must hold integers"):
        dets.with_columns(tracker_id=[0.5, 1, 2])
    with pytest.raises(ValueError, match=r"read \(4,\)"):
        dets.with_columns(data={"read": np.arange(4)})
    with pytest.raises(ValueError, match=r"xyxy \(1, 2, 4\)"):
        dets[np.array([[0, 1]])]
    with pytest.raises(IndexError):
        dets[[True, False]]


def test_one_detection_and_iteration_give_views() -> None:
    dets = three()
    assert dets[0] == Detection((1.0, 2.0, 3.0, 4.0), pytest.approx(0.9), 0, "person", 3)
    assert dets[1].track_id is None and dets[1].label == "car"
    assert [d.class_id for d in dets] == [0, 1, 7]
    assert [d.predicted for d in dets] == [False, True, False]
    assert [r.get("predicted") for r in dets.records()] == [None, True, None]
    columns = Detections(dets.xyxy, dets.confidence, dets.class_id, dets.tracker_id,
                         class_names=NAMES, data={"predicted": dets.data["predicted"]})  # fmt: skip
    assert Detections.from_detections(list(dets)) == columns != dets  # dets has embeddings too
    with pytest.raises(ValueError, match="class 0 labelled both 'a' and 'b'"):
        Detections.from_detections([Detection((0, 0, 1, 1), 1.0, 0, "a"),
                                    Detection((0, 0, 1, 1), 1.0, 0, "b")])  # fmt: skip


def test_detections_are_not_written_after_they_are_made() -> None:
    dets = three()
    with pytest.raises(ValueError, match="read-only"):
        dets.xyxy[0, 0] = 99.0
    with pytest.raises(ValueError, match="read-only"):
        dets.data["embedding"][0, 0] = 99.0
    with pytest.raises(AttributeError, match="immutable"):
        dets.confidence = np.zeros(3)  # type: ignore[misc]
    with pytest.raises(TypeError):
        dets.data["other"] = np.zeros(3)  # type: ignore[index]


def test_empty_and_default_tracks() -> None:
    empty = Detections.empty(NAMES)
    assert len(empty) == 0 and empty.xyxy.shape == (0, 4) and empty.records() == []
    untracked = Detections([[0, 0, 1, 1]], [0.5], [1])
    np.testing.assert_array_equal(untracked.tracker_id, [NO_TRACK])
    assert not untracked.tracked.any() and "track_id" not in untracked.records()[0]


def test_a_pickled_copy_is_equal_read_only_and_carries_only_names_in_use() -> None:
    dets = Detections([[0, 0, 1, 1]], [0.5], [1], class_names={i: f"c{i}" for i in range(80)})
    copy = pickle.loads(pickle.dumps(dets))
    assert copy == dets and copy.labels == ["c1"]
    assert dict(copy.class_names) == {1: "c1"}
    assert not copy.xyxy.flags.writeable


def test_split_by_frame_keeps_device_order_and_copies_out_of_the_staging_buffer() -> None:
    staging = np.array(
        [
            [1, 10, 10, 20, 20, 0.9, 1],
            [0, 1, 1, 2, 2, 0.8, 0],
            [1, 30, 30, 40, 40, 0.7, 0],
            [0, 3, 3, 4, 4, 0.6, 1],
        ],
        np.float32,
    )
    results = split_by_frame(staging, [frame(5), frame(6), frame(7)], NAMES)
    staging[:] = -1  # the next batch overwrites the staging buffer
    assert [r.frame_index for r in results] == [5, 6, 7]
    first, second, third = (r.detections for r in results)
    np.testing.assert_array_equal(first.xyxy, [[1, 1, 2, 2], [3, 3, 4, 4]])
    np.testing.assert_array_equal(second.confidence, np.float32([0.9, 0.7]))
    np.testing.assert_array_equal(second.class_id, [1, 0])
    assert second.labels == ["car", "person"] and len(third) == 0


@pytest.mark.parametrize(
    ("width", "layout"),
    [(7, {}), (7 + 3 * 3, {"keypoints": (3, 3)}), (7 + 5, {"obb": True})],
    ids=["boxes", "keypoints", "obb"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_split_by_frame_gives_what_the_constructor_makes_of_each_frames_rows(
    width: int, layout: dict, dtype: type
) -> None:
    """Each frame's columns are made without the constructor's checks: the constructor,
    given the same rows, is the oracle (values, dtypes, shapes, read-only), for empty frames,
    pose and OBB columns, and integer input too."""
    rng = np.random.default_rng(5)
    staging = rng.uniform(0, 50, (9, width)).astype(dtype)
    staging[:, 0] = [3, 0, 0, 2, 3, 0, 2, 2, 0]  # frame 1 has none
    staging[:, 6] = rng.integers(0, 3, 9)
    results = split_by_frame(staging, [frame(i) for i in range(4)], NAMES, **layout)
    for index, result in enumerate(results):
        rows = staging[staging[:, 0] == index]
        rows = rows if rows.dtype.kind == "f" else rows.astype(np.float64)
        data = {}
        if "keypoints" in layout:
            data[KEYPOINTS] = rows[:, 7:].reshape(-1, 3, 3)
        if layout.get("obb"):
            data[OBB] = rows[:, 7:]
        expected = Detections(rows[:, 1:5], rows[:, 5], rows[:, 6].astype(np.int64),
                              class_names=NAMES, data=data)  # fmt: skip
        got = result.detections
        assert got == expected and len(got) == len(rows)
        for name in ("xyxy", "confidence", "class_id", "tracker_id"):
            a, b = getattr(got, name), getattr(expected, name)
            assert a.dtype == b.dtype and a.shape == b.shape and not a.flags.writeable, name
        assert got.data.keys() == expected.data.keys()
        assert all(got.data[k].dtype == expected.data[k].dtype for k in got.data)
        assert got.records() == expected.records()


def analytics(conf: float) -> StreamAnalytics:
    config = AnalyticsConfig(tracking=TrackingConfig(confirm_hits=1))
    return StreamAnalytics(config, NAMES, conf=conf)


def test_analyze_tracks_the_columns_and_keeps_records_above_conf() -> None:
    stream = analytics(conf=0.3)
    # float32(0.3) is just above the float64 0.3 the records compare with: kept, as ever.
    scores = np.array([0.9, np.float32(0.3), 0.2], np.float32)
    boxes = np.array([[10, 10, 50, 50], [100, 100, 150, 150], [200, 200, 260, 260]], np.float32)
    for index in range(3):
        detections = Detections(boxes, scores, [0, 1, 0], class_names=NAMES,
                                data={"k": np.array([1, 2, 3])})  # fmt: skip
        result = analyze(stream, FrameResult("cam", index, index / 25, 640, 360, detections))
    kept = result.detections
    assert len(kept) == 2 and kept.labels == ["person", "car"]
    assert (kept.tracker_id > 0).all() and len(set(kept.tracker_id.tolist())) == 2
    np.testing.assert_array_equal(kept.data["k"], [1, 2])  # extra columns follow their boxes
    assert [set(r) >= {"track_id"} for r in kept.records()] == [True, True]


def test_attributes_reach_the_records_of_the_rows_read_and_survive_selection() -> None:
    values = np.empty(2, dtype=object)
    values[:] = [None, {"colour": {"label": "red", "score": 0.9, "fresh": True}}]
    dets = Detections([[0, 0, 5, 5], [1, 1, 6, 6]], [0.9, 0.8], [0, 1], data={ATTRIBUTES: values})
    records = dets.records()
    assert "attributes" not in records[0]
    assert records[1]["attributes"] == {"colour": {"label": "red", "score": 0.9, "fresh": True}}
    assert dets[np.array([False, True])].records() == [records[1]]
    assert pickle.loads(pickle.dumps(dets)).records() == records
