"""Several streams' trackers stepped together (``update_together``) against each stepped alone.

The single-stream tracker is the oracle here (its behaviour is tested against ByteTrack's in
test_tracking.py and the reference tests): stepping streams together must give each stream
exactly what it gets alone, bit for bit, through crowds, resets, new classes, bad boxes,
duplicate detections, empty frames and predicted frames between.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from vstream import assets
from vstream.config import parse_data
from vstream.engine import Engine
from vstream.tracking import ByteTracker, TrackingConfig, stacked
from vstream.tracking.bytetrack import update_together

COLUMNS = ("mean", "cov", "ids", "state", "hits", "first_pts", "last_pts", "seen", "score")


def scene(seed: int, frames: int, objects: int, fps: float) -> list[tuple]:
    """Drifting objects with box noise, misses, low scores, class flicker, a duplicate box as
    another class now and then, an invalid box now and then, and crowds that overlap."""
    rng = np.random.default_rng(seed)
    centre = rng.uniform(100, 900, (objects, 2))
    velocity = rng.normal(0, 60, (objects, 2))
    size = rng.uniform(30, 120, (objects, 2))
    out = []
    for i in range(frames):
        centre += velocity / fps
        seen = rng.random(objects) > 0.1
        boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)[seen]
        boxes += rng.normal(0, 2.0, boxes.shape)
        scores = rng.choice([0.2, 0.35, 0.55, 0.8, 0.9], len(boxes))
        classes = rng.integers(0, 2 + seed % 4, len(boxes))
        if len(boxes) and rng.random() < 0.2:  # the same object once more, as another class
            boxes = np.concatenate([boxes, boxes[:1] + 1.0])
            scores = np.concatenate([scores, scores[:1] - 0.05])
            classes = np.concatenate([classes, classes[:1] + 1])
        if len(boxes) and rng.random() < 0.05:
            boxes[-1, 2] = np.nan
        out.append((boxes, scores, classes, i / fps))
    return out


def assert_same(alone: ByteTracker, together: ByteTracker) -> None:
    for name in COLUMNS:
        a, b = getattr(alone._tracks, name), getattr(together._tracks, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    # Votes: a tracker stepped with others may hold more (zero) class columns.
    a, b = alone._tracks.votes, together._tracks.votes
    assert np.array_equal(a, b[:, : a.shape[1]]) and not b[:, a.shape[1] :].any()
    assert alone._next_id == together._next_id
    assert alone.live_track_ids() == together.live_track_ids()


def test_streams_stepped_together_get_exactly_what_each_gets_alone() -> None:
    settings = [(0, 0, 30.0), (1, 3, 25.0), (2, 12, 30.0), (3, 1, 10.0), (4, 25, 60.0)]
    scenes = [scene(seed, 240, objects, fps) for seed, objects, fps in settings]
    # One stream starts again (a looped file: pts go back), one has a stretch of nothing.
    scenes[1] = scenes[1][:120] + [
        (b, s, c, p - scenes[1][120][3]) for b, s, c, p in scenes[1][120:]
    ]
    for k in range(60, 90):
        scenes[2][k] = (np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=np.int64), scenes[2][k][3])
    config = TrackingConfig(low_score=0.3)
    alone = [ByteTracker(config, conf=0.5) for _ in scenes]
    together = [ByteTracker(config, conf=0.5) for _ in scenes]
    confirmed = 0
    for i in range(240):
        frames = [s[i] for s in scenes]
        expected = [t.update(*f) for t, f in zip(alone, frames, strict=True)]
        got = update_together(together, frames)
        for e, g in zip(expected, got, strict=True):
            assert e.dtype == g.dtype and np.array_equal(e, g), i
            confirmed += int((e > 0).sum())
    for a, t in zip(alone, together, strict=True):
        assert_same(a, t)
    assert confirmed > 1000  # the scenes did track


def test_a_subset_of_streams_and_predicted_frames_between() -> None:
    """Streams stepped together in one batch and alone or predicted (a detection cadence)
    in others keep matching their lone twins."""
    scenes = [scene(seed, 150, 6, 30.0) for seed in range(4)]
    alone = [ByteTracker() for _ in scenes]
    together = [ByteTracker() for _ in scenes]
    rng = np.random.default_rng(9)
    for i in range(150):
        chosen = [k for k in range(4) if rng.random() < 0.7]
        for k in range(4):
            if k not in chosen:
                p = scenes[k][i][3]
                a, b = alone[k].predict(p), together[k].predict(p)
                assert np.array_equal(a.boxes, b.boxes) and np.array_equal(a.track_ids, b.track_ids)
        expected = [alone[k].update(*scenes[k][i]) for k in chosen]
        got = update_together([together[k] for k in chosen], [scenes[k][i] for k in chosen])
        for e, g in zip(expected, got, strict=True):
            assert np.array_equal(e, g)
    for a, t in zip(alone, together, strict=True):
        assert_same(a, t)


def test_crowds_go_to_the_hungarian_algorithm_and_clear_frames_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a stream whose candidate pairs share a track or a detection needs the assignment
    solver; the others' pairs are the assignment. Both kinds occur, with the same result."""
    solved: list[tuple[int, int]] = []
    solve = stacked.hungarian

    def counting(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        solved.append(cost.shape)
        return solve(cost)

    monkeypatch.setattr(stacked, "hungarian", counting)
    crowd = scene(5, 80, 30, 30.0)  # 30 objects in 800x800 pixels overlap
    clear = [(b[:2], s[:2], c[:2], p) for b, s, c, p in scene(6, 80, 2, 30.0)]
    alone = [ByteTracker(), ByteTracker()]
    together = [ByteTracker(), ByteTracker()]
    for i in range(80):
        frames = [crowd[i], clear[i]]
        expected = [t.update(*f) for t, f in zip(alone, frames, strict=True)]
        during = len(solved)
        got = update_together(together, frames)
        for e, g in zip(expected, got, strict=True):
            assert np.array_equal(e, g)
        assert len(solved) - during <= 3  # at most one solve per stage, the crowd's
    assert solved  # the crowd needed it
    assert_same(alone[1], together[1])


def test_a_refused_frame_changes_no_tracker() -> None:
    frames = scene(0, 20, 4, 30.0)
    trackers = [ByteTracker(), ByteTracker()]
    for f in frames[:10]:
        update_together(trackers, [f, f])
    before = [{n: getattr(t._tracks, n).copy() for n in COLUMNS} for t in trackers]
    boxes, scores, classes, pts = frames[10]
    with pytest.raises(ValueError, match="boxes"):
        update_together(trackers, [frames[10], (boxes, scores[:-1], classes, pts)])
    with pytest.raises(ValueError, match="finite"):
        update_together(trackers, [frames[10], (boxes, scores, classes, float("nan"))])
    for t, saved in zip(trackers, before, strict=True):
        for name in COLUMNS:
            assert np.array_equal(getattr(t._tracks, name), saved[name])
        assert t._pts == frames[9][3]


def test_what_cannot_be_stepped_together_is_refused() -> None:
    frame = scene(0, 1, 3, 30.0)[0]
    tracker = ByteTracker()
    with pytest.raises(ValueError, match="twice"):
        update_together([tracker, tracker], [frame, frame])
    with pytest.raises(ValueError, match="settings"):
        update_together([ByteTracker(), ByteTracker(TrackingConfig(match_iou=0.5))], [frame, frame])
    with pytest.raises(ValueError, match="one each"):
        update_together([ByteTracker()], [frame, frame])
    assert update_together([], []) == []


def best_matching(block: np.ndarray) -> set[tuple[int, int]]:
    """The pairs of ``block`` (infinite: refused) whose cost plus
    :data:`stacked.UNMATCHED_COST` for each row and column left over is least, found as an
    integer program by scipy's HiGHS (no assignment solver, no extended matrix)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    rows, cols = np.isfinite(block).nonzero()
    if len(rows) == 0:
        return set()
    # Each pair taken saves two left over (2 x 0.5) and costs its own.
    gain = block[rows, cols] - 2 * stacked.UNMATCHED_COST
    each_row = (rows[None, :] == np.arange(block.shape[0])[:, None]).astype(float)
    each_col = (cols[None, :] == np.arange(block.shape[1])[:, None]).astype(float)
    once = LinearConstraint(np.vstack([each_row, each_col]), 0, 1)
    found = milp(gain, constraints=once, integrality=np.ones(len(gain)), bounds=Bounds(0, 1))
    taken = found.x > 0.5
    return set(zip(rows[taken].tolist(), cols[taken].tolist(), strict=True))


def test_each_stream_s_assignment_is_the_least_costly_for_its_block() -> None:
    """:func:`stacked.match` against an integer program's optimum on each stream's own cost
    block (a pair's cost, and :data:`stacked.UNMATCHED_COST` for each track or detection
    left over, as ByteTrack's ``lapjv`` with a cost limit weighs them), over random blocks:
    sparse ones that take the no-solver path and dense ones that do not."""
    rng = np.random.default_rng(3)
    for trial in range(200):
        streams = int(rng.integers(1, 6))
        n_rows, n_cols = rng.integers(0, 7, streams), rng.integers(0, 7, streams)
        rows = np.repeat(np.arange(streams), n_rows)
        cols = np.repeat(np.arange(streams), n_cols)
        pairs = stacked.Blocks(np.arange(len(rows)), rows, np.arange(len(cols)), cols, streams)
        cost = rng.uniform(0, 1, pairs.size)
        cost[rng.random(len(cost)) < (0.9 if trial % 2 else 0.3)] = np.inf
        got_rows, got_cols, free_rows, free_cols = stacked.match(pairs, cost)
        expected = set()
        for s in range(streams):
            block = pairs.block(cost, s)
            if block.size == 0:
                continue
            base_r, base_c = n_rows[:s].sum(), n_cols[:s].sum()
            expected |= {(base_r + i, base_c + j) for i, j in best_matching(block)}
        assert set(zip(got_rows.tolist(), got_cols.tolist(), strict=True)) == expected
        assert sorted(free_rows.tolist()) == sorted(set(range(len(rows))) - set(got_rows.tolist()))
        assert sorted(free_cols.tolist()) == sorted(set(range(len(cols))) - set(got_cols.tolist()))


def run_tracked(
    tmp_path: Path, name: str, streams: int, batch: int, cascade: bool = False
) -> dict[str, list[dict]]:
    """``streams`` streams with tracking, a counting line and a zone through the engine, ``batch``
    frames a batch, on the tempered demo model (real-looking scores, 0.25-0.9): records by
    stream. ``cascade``: the demo colour classifier reads the tracked objects, and a second
    line counts only the warm-coloured ones."""
    parity = assets.SAMPLE_VIDEO.parent / "parity"
    sources = [
        {"id": "early", "uri": str(assets.SAMPLE_VIDEO), "end_seconds": 3},
        {"id": "landscape", "uri": str(parity / "landscape_854x480.mp4")},
        {"id": "late", "uri": str(assets.SAMPLE_VIDEO), "start_seconds": 3},
        {"id": "portrait", "uri": str(parity / "portrait_480x848.mp4")},
    ][:streams]
    pipeline = {
        "name": name,
        "model": {"path": str(parity / "demo_tempered.onnx")},
        "postprocess": {"conf": 0.4},
        "runtime": {"device": "cpu", "batch_size": batch},
        "analytics": {
            "tracking": {},
            "lines": [{"name": "gate", "start": [0, 200], "end": [460, 200]}],
            "zones": [{"name": "left", "points": [[0, 0], [230, 0], [230, 480], [0, 480]]}],
        },
        "sources": sources,
        "sinks": [{"type": "jsonl", "path": f"{name}.jsonl"}],
    }
    if cascade:
        pipeline["secondary"] = [
            {"name": "colour", "path": "vstream://colour.onnx", "on": {"min_size": 12}}
        ]
        warm = {"colour": ["red", "orange", "yellow"]}
        line = {"name": "warm", "start": [0, 200], "end": [460, 200], "attributes": warm}
        pipeline["analytics"]["lines"].append(line)  # type: ignore[index]
    config = parse_data({"pipelines": [pipeline]}, base_dir=tmp_path)
    with Engine(config, base_dir=tmp_path) as engine:
        engine.wait(threading.Event(), until_files_done=True)
    by_stream: dict[str, list[dict]] = {}
    for line in (tmp_path / f"{name}.jsonl").read_text().splitlines():
        record = json.loads(line)
        record.pop("time", None)
        by_stream.setdefault(record["stream"], []).append(record)
    return by_stream


@pytest.mark.parametrize(
    ("streams", "batch", "cascade"),
    [(4, 4, False), (2, 8, False), (4, 4, True)],
    ids=["4x1", "2x4", "classifier"],
)
def test_the_engine_s_records_are_the_same_with_trackers_stepped_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streams: int, batch: int, cascade: bool
) -> None:
    """Every record (track ids, crossings, zone events, counts, a classifier's readings)
    is the same whether the pipeline steps a batch's trackers together and places their
    tracks against the lines and the zone together, or takes one frame at a time, with a
    stream once a batch or several times (then round by round), with a cascade's classifier
    reading the tracked objects or not; and it did step and place together every round
    that held two streams or more.

    Which rounds hold several streams depends on how fast each reader fills its queue (a
    loaded machine gives batches of one stream), so the count is checked against the
    rounds this run's batches actually made, not against the frames in all."""
    from vstream.engine import pipeline

    stepped_together: list[int] = []
    placed_together: list[int] = []
    shared_rounds: list[int] = []
    together, place = pipeline.update_together, pipeline.place
    track_together = pipeline.Pipeline._track_together

    def counting_rounds(self: pipeline.Pipeline, batch: object, positions: list[int]) -> dict:
        if len(positions) > 1:
            shared_rounds.append(len(positions))
        return track_together(self, batch, positions)

    def counting(trackers: list, frames: list) -> list:
        stepped_together.append(len(trackers))
        return together(trackers, frames)

    def counting_places(analytics: object, frames: list) -> list:
        placed_together.append(len(frames))
        return place(analytics, frames)

    monkeypatch.setattr(pipeline, "update_together", counting)
    monkeypatch.setattr(pipeline, "place", counting_places)
    monkeypatch.setattr(pipeline.Pipeline, "_track_together", counting_rounds)
    stepped = run_tracked(tmp_path, "together", streams, batch, cascade)
    monkeypatch.setattr(pipeline.Pipeline, "track_together", False)
    frames_together, frames_placed = sum(stepped_together), sum(placed_together)
    frames_in_shared_rounds = sum(shared_rounds)
    stepped_together.clear()
    placed_together.clear()
    alone = run_tracked(tmp_path, "alone", streams, batch, cascade)
    assert not stepped_together and not placed_together
    assert len(alone) == len(stepped) == streams
    assert frames_together == frames_in_shared_rounds > 0
    assert frames_placed == frames_together
    for stream, records in alone.items():
        assert [r["frame"] for r in records] == sorted(r["frame"] for r in records)
        for a, b in zip(records, stepped[stream], strict=True):
            assert a == b, (stream, a["frame"])
    tracked = [d for rs in alone.values() for r in rs for d in r["detections"] if "track_id" in d]
    assert len(tracked) > 100
    events = {e["type"] for rs in alone.values() for r in rs for e in r.get("events", ())}
    assert {"line_crossing", "zone_enter"} <= events  # compared too
    if cascade:
        read = [
            d for rs in alone.values() for r in rs for d in r["detections"] if "attributes" in d
        ]
        assert len(read) > 50
