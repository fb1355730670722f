"""The per-track cache of secondary readings: when an object is read again, fresh or cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from secondary_models import linear_model

from vstream.cascade.attributes import AttributeCache, record_values
from vstream.cascade.model import SecondaryOutput
from vstream.cascade.stage import Cascade
from vstream.config.secondary import SecondaryConfig
from vstream.frame import Frame, PixelFormat
from vstream.results import ATTRIBUTES, Detections, FrameResult


class Reader:
    """Stands in for ``lambda rows: model.run(frame, boxes[rows])``: label = the frame's
    number, so a carried reading is told from a fresh one; records what was asked."""

    def __init__(self) -> None:
        self.frame = 0
        self.calls: list[list[int]] = []
        self.broken: list[int] = []
        """Detection rows read as NaN, as a broken model reads them."""

    def __call__(self, rows: np.ndarray) -> SecondaryOutput:
        self.calls.append(rows.tolist())
        n = len(rows)
        probabilities = np.zeros((n, 3), np.float32)
        probabilities[:, self.frame % 3] = 1
        scores = np.full(n, 0.5, np.float32)
        broken = np.isin(rows, self.broken)
        probabilities[broken] = scores[broken] = np.nan
        return SecondaryOutput(np.full(n, self.frame, np.int64), scores, probabilities, None)


def box(size: float) -> list[float]:
    return [10, 10, 10 + size, 10 + size]


def test_a_track_is_read_again_only_after_reinfer_seconds() -> None:
    cache, read = AttributeCache(reinfer_seconds=1.0, regrow=4.0), Reader()
    tracks = np.array([7, 8])
    boxes = np.array([box(20), box(30)], np.float32)
    everything = np.ones(2, bool)
    results = []
    for frame, pts in enumerate([0.0, 0.4, 0.99, 1.0, 1.5]):
        read.frame = frame
        results.append(cache.resolve(tracks, boxes, pts, everything, read))
    assert read.calls == [[0, 1], [], [], [0, 1], []]
    assert [r.fresh.tolist() for r in results] == [
        [True, True],
        [False, False],
        [False, False],
        [True, True],
        [False, False],
    ]
    assert [r.label_ids.tolist() for r in results] == [[0, 0], [0, 0], [0, 0], [3, 3], [3, 3]]
    np.testing.assert_array_equal(results[1].probabilities, results[0].probabilities)


def test_a_box_grown_by_regrow_is_read_again() -> None:
    cache, read = AttributeCache(reinfer_seconds=100.0, regrow=2.0), Reader()
    tracks, selected = np.array([1]), np.ones(1, bool)
    for size in (20, 25, 28.2, 28.3, 30):  # area 400: due at 800 (side 28.28...)
        cache.resolve(tracks, np.array([box(size)], np.float32), 0.0, selected, read)
    assert read.calls == [[0], [], [], [0], []]


def test_without_tracking_every_detection_is_read_every_frame() -> None:
    cache, read = AttributeCache(reinfer_seconds=10.0, regrow=2.0), Reader()
    untracked = np.array([-1, -1, 4])
    boxes = np.array([box(20)] * 3, np.float32)
    for pts in (0.0, 0.1, 0.2):
        result = cache.resolve(untracked, boxes, pts, np.ones(3, bool), read)
    assert read.calls == [[0, 1, 2], [0, 1], [0, 1]]
    assert result.fresh.tolist() == [True, True, False]
    assert len(cache) == 1  # only the tracked one is kept


def test_unselected_detections_are_never_read_and_say_so() -> None:
    cache, read = AttributeCache(1.0, 2.0), Reader()
    read.frame = 2
    result = cache.resolve(
        np.array([1, 2, 3]),
        np.array([box(9)] * 3, np.float32),
        0.0,
        np.array([True, False, True]),
        read,
    )
    assert read.calls == [[0, 2]]
    assert result.read.tolist() == [True, False, True]
    assert result.fresh.tolist() == [True, False, True]
    assert result.label_ids.tolist() == [2, -1, 2]
    assert np.isnan(result.scores[1]) and np.isnan(result.probabilities[1]).all()


def test_results_keep_detection_order_when_fresh_and_cached_mix() -> None:
    cache, read = AttributeCache(reinfer_seconds=1.0, regrow=10.0), Reader()
    boxes = np.array([box(10)] * 3, np.float32)
    cache.resolve(np.array([5, 6, 7]), boxes, 0.0, np.ones(3, bool), read)
    read.frame = 1
    result = cache.resolve(np.array([9, 6, 5]), boxes, 0.5, np.ones(3, bool), read)  # 9 is new
    assert read.calls[-1] == [0]
    assert result.label_ids.tolist() == [1, 0, 0]
    assert result.fresh.tolist() == [True, False, False]


def test_a_row_of_no_numbers_leaves_its_object_unread_and_its_tracks_reading_as_it_was() -> None:
    """A NaN row's argmax is the first label: it would be written, counted and matched by the
    lines' filters as one. It is no reading: neither fresh nor carried, and never kept."""
    cache, read = AttributeCache(reinfer_seconds=1.0, regrow=4.0), Reader()
    tracks, boxes = np.array([7, 8, 9]), np.array([box(20)] * 3, np.float32)
    cache.resolve(tracks[:2], boxes[:2], 0.0, np.ones(2, bool), read)
    read.frame, read.broken = 1, [0, 2]
    result = cache.resolve(tracks, boxes, 1.0, np.ones(3, bool), read)
    assert read.calls[-1] == [0, 1, 2]
    assert result.read.tolist() == [False, True, False]
    assert result.fresh.tolist() == [False, True, False]
    assert result.label_ids.tolist() == [-1, 1, -1]
    assert record_values(result, ("red", "green", "blue")) == [
        None,
        {"label": "green", "score": 0.5, "fresh": True},
        None,
    ]
    assert cache.last(7).label_ids.tolist() == [0] and cache.last(9) is None


def test_readings_of_ended_tracks_are_dropped_and_time_going_back_forgets_all() -> None:
    cache, read = AttributeCache(reinfer_seconds=1.0, regrow=2.0), Reader()
    boxes = np.array([box(10)] * 3, np.float32)
    cache.resolve(np.array([1, 2, 3]), boxes, 5.0, np.ones(3, bool), read)
    cache.retain({2, 40})
    assert len(cache) == 1
    cache.resolve(np.array([2]), boxes[:1], 5.5, np.ones(1, bool), read)
    assert read.calls[-1] == []  # still cached
    cache.resolve(np.array([2]), boxes[:1], 0.1, np.ones(1, bool), read)  # a looped file
    assert read.calls[-1] == [0]


def test_memory_is_bounded_by_the_live_tracks() -> None:
    cache, read = AttributeCache(reinfer_seconds=1.0, regrow=2.0), Reader()
    for frame in range(500):  # a new track every frame, each living 10 frames
        live = np.arange(max(1, frame - 9), frame + 1)
        boxes = np.array([box(10)] * len(live), np.float32)
        cache.resolve(live, boxes, frame * 0.04, np.ones(len(live), bool), read)
        cache.retain(live.tolist())
        assert len(cache) <= 10


def test_embeddings_are_carried_with_their_track() -> None:
    cache = AttributeCache(reinfer_seconds=1.0, regrow=2.0)
    vectors = np.eye(4, dtype=np.float32)[:2]

    def embed(rows: np.ndarray) -> SecondaryOutput:
        n = len(rows)
        return SecondaryOutput(np.full(n, -1), np.ones(n, np.float32), None, vectors[rows])

    boxes = np.array([box(10)] * 2, np.float32)
    cache.resolve(np.array([1, 2]), boxes, 0.0, np.ones(2, bool), embed)
    result = cache.resolve(np.array([2, 1]), boxes, 0.5, np.ones(2, bool), embed)
    np.testing.assert_array_equal(result.embeddings, vectors[[1, 0]])
    assert result.probabilities is None and not result.fresh.any()


def test_record_values_say_label_score_and_freshness() -> None:
    cache, read = AttributeCache(1.0, 2.0), Reader()
    read.frame = 1
    result = cache.resolve(
        np.array([1, 2]), np.array([box(9)] * 2, np.float32), 0.0, np.array([True, False]), read
    )
    assert record_values(result, ("red", "green", "blue")) == [
        {"label": "green", "score": 0.5, "fresh": True},
        None,
    ]
    multi = record_values(result, ("red", "green", "blue"), multi_label=True, threshold=0.5)
    assert multi == [{"labels": ["green"], "scores": [1.0], "fresh": True}, None]


def test_embeddings_reach_records_only_when_asked() -> None:
    cache = AttributeCache(1.0, 2.0)

    def embed(rows: np.ndarray) -> SecondaryOutput:
        n = len(rows)
        vectors = np.tile(np.array([[0.6, 0.8]], np.float32), (n, 1))
        return SecondaryOutput(np.full(n, -1), np.ones(n, np.float32), None, vectors)

    result = cache.resolve(np.array([-1]), np.array([box(9)], np.float32), 0.0, np.ones(1, bool),
                           embed)  # fmt: skip
    assert record_values(result, ()) == [None]
    assert record_values(result, (), keep_embedding=True) == [
        {"embedding": [0.6, 0.8], "fresh": True}
    ]


def test_carried_gives_only_the_tracks_last_readings_and_reads_nothing() -> None:
    """A frame the detector skipped: tracked objects keep their reading, others have none."""
    cache, read = AttributeCache(reinfer_seconds=0.0, regrow=4.0), Reader()
    read.frame = 2
    cache.resolve(
        np.array([7, 8]), np.array([box(20), box(30)], np.float32), 0.0, np.ones(2, bool), read
    )
    read.frame = 0
    empty = read(np.zeros(0, np.int64))
    carried = cache.carried(np.array([9, 8, -1, 7]), np.array([True, True, True, False]), empty)
    assert carried.read.tolist() == [False, True, False, False]
    assert not carried.fresh.any()
    assert carried.label_ids.tolist() == [-1, 2, -1, -1]
    assert len(cache) == 2  # nothing was added or dropped


def test_a_frame_finished_after_its_streams_removal_keeps_no_readings(tmp_path: Path) -> None:
    """A removed stream's frames still in the stages come through after its removal; readings
    kept for them would be kept for ever (a slow leak of a long-running server)."""
    path = linear_model(tmp_path / "c.onnx", np.eye(3))
    cascade = Cascade([SecondaryConfig(name="c", path=str(path))], {0: "a"}, device="cpu")
    cascade.counts("s")

    def finish(pts: float) -> FrameResult:
        picture = torch.zeros((40, 40, 3), dtype=torch.uint8)
        frame = Frame(picture, PixelFormat.RGB24, 40, 40, stream_id="s", pts_seconds=pts)
        boxes = np.array([[0, 0, 40, 40]], np.float32)
        detections = Detections(boxes, np.ones(1, np.float32), np.zeros(1, int), [1])
        result = FrameResult("s", 0, pts, 40, 40, detections)
        return cascade.apply(frame, result, detected=True, live_tracks=[1])

    finish(0.0)
    assert len(cascade.readings("s")[0]) == 1
    cascade.remove_stream("s")
    late = finish(0.04)
    assert late.detections.data[ATTRIBUTES][0]["c"]["fresh"]  # read, as it ever was
    cascade.attributes_of("s")(1)  # as the lines' filters ask
    assert cascade.readings("s") == {}
