"""Several streams' tracks placed against their lines and zones at once (``placing.place``).

The oracles: each line's and zone's own geometry asked frame by frame (tested against
OpenCV in test_lines.py and test_zones.py), and a stream's analytics placing its own frames
(the path every predicted frame and lone stream takes). Placing together must give each
frame exactly those numbers, bit for bit, and so exactly the same events and counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import Mover, render

from tests.test_tracking_together import scene
from vstream.analytics.geometry import anchor_points
from vstream.analytics.placing import place
from vstream.analytics.shapes import keypoint_points
from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig
from vstream.tracking.bytetrack import update_together

PLACES = {
    "anchor": "bottom_center",
    "lines": [
        {"name": "across", "start": [0, 500], "end": [1000, 500]},
        {"name": "slant", "start": [200, 100], "end": [700, 900]},
    ],
    "zones": [
        {"name": "box", "points": [[100, 100], [600, 120], [580, 600], [90, 580]]},
        {"name": "u", "points": [[300, 300], [500, 300], [500, 700], [450, 700],
                                 [450, 400], [350, 400], [350, 700], [300, 700]]},
    ],
}  # fmt: skip


def analytics_for(
    extra: dict | None = None, keypoint_names: tuple[str, ...] = ()
) -> StreamAnalytics:
    config = AnalyticsConfig.model_validate({"tracking": {}, **PLACES, **(extra or {})})
    return StreamAnalytics(config, ["a", "b"], keypoint_names=keypoint_names)


def frames_of(seed: int, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray, None]]:
    """Frames of random boxes, some unconfirmed (id 0 or -1), empty ones among them."""
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        corner = rng.uniform(0, 950, (n, 2))
        boxes = np.concatenate([corner, corner + rng.uniform(5, 120, (n, 2))], axis=1)
        ids = rng.choice([-1, 0, 3, 7, 11, 12, 40], n)
        out.append((ids, boxes.astype(np.float32), None))
    return out


def assert_placed_alone(analytics: StreamAnalytics, frame: tuple, placement) -> None:
    ids, boxes, keypoints = frame
    confirmed = ids > 0
    anchors = points = anchor_points(np.asarray(boxes)[confirmed], analytics.config.anchor)
    seen = None
    if keypoints is not None and analytics.anchor_keypoints:
        points, seen = keypoint_points(anchors, keypoints[confirmed], analytics.anchor_keypoints)
    elif analytics.anchor_keypoints:
        seen = np.zeros(len(points), dtype=bool)
    assert (placement.seen is None) == (seen is None)
    expected = {
        "confirmed": confirmed,
        "ids": ids[confirmed],
        "points": points,
        "anchors": anchors,
        **({"seen": seen} if seen is not None else {}),
        "distances": tuple(line.segment.signed_distance(points) for line in analytics.lines),
        "inside": tuple(zone.polygon.contains(points) for zone in analytics.zones),
        "clear": tuple(
            zone.polygon.border_distance(points) > zone.dead_band for zone in analytics.zones
        ),
    }
    for name, want in expected.items():
        got = getattr(placement, name)
        for a, b in zip(want if isinstance(want, tuple) else [want],
                        got if isinstance(got, tuple) else [got], strict=True):  # fmt: skip
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), name


def test_frames_placed_together_get_exactly_what_each_gets_alone() -> None:
    analytics = analytics_for()
    frames = frames_of(0, [12, 0, 1, 30, 5, 0, 17])
    frames[2] = (np.array([0]), frames[2][1], None)  # nothing confirmed
    placements = place(analytics, frames)
    assert len(placements) == len(frames)
    for frame, placement in zip(frames, placements, strict=True):
        assert_placed_alone(analytics, frame, placement)
        assert_placed_alone(analytics, frame, place(analytics, [frame])[0])
    assert place(analytics, []) == []


def test_keypoints_stand_for_objects_together_and_frames_without_them_alone() -> None:
    names = ("nose", "left_ankle", "right_ankle")
    analytics = analytics_for({"anchor_keypoints": ["left_ankle", "right_ankle"]}, names)
    rng = np.random.default_rng(3)
    frames = []
    for ids, boxes, _ in frames_of(1, [6, 0, 9, 4]):
        keypoints = np.concatenate(
            [rng.uniform(0, 1000, (len(ids), 3, 2)), rng.uniform(0, 1, (len(ids), 3, 1))], axis=2
        )  # some ankles unseen (score under VISIBLE): those objects fall back to the box
        frames.append((ids, boxes, keypoints))
    for frame, placement in zip(frames, place(analytics, frames), strict=True):
        assert_placed_alone(analytics, frame, placement)
    mixed = [frames[0], (frames[2][0], frames[2][1], None), frames[3]]
    for frame, placement in zip(mixed, place(analytics, mixed), strict=True):
        assert_placed_alone(analytics, frame, placement)


def test_a_frame_whose_ids_and_boxes_disagree_is_refused_naming_both() -> None:
    analytics = analytics_for()
    good, bad = frames_of(2, [4, 5])
    with pytest.raises(ValueError, match="4 track ids for 3 boxes"):
        place(analytics, [good, (bad[0][:4], bad[1][:3], None)])
    (placement,) = place(analytics, [good])
    with pytest.raises(ValueError, match="a placement of 4 boxes for 5"):
        analytics.observe(bad[0], bad[1], 0.0, placement=placement)


def test_streams_placed_together_count_exactly_what_each_counts_alone() -> None:
    """Five streams of drifting, crossing, flickering objects (test_tracking_together's
    scenes), tracked and counted alone, and tracked and placed together: the same track
    ids, events and counts every frame."""
    streams = 5
    scenes = [scene(seed, frames=150, objects=12, fps=10.0) for seed in range(streams)]
    alone = [analytics_for() for _ in range(streams)]
    together = [analytics_for() for _ in range(streams)]
    kinds: set[str] = set()
    for step in range(150):
        frames = [scenes[s][step] for s in range(streams)]
        ids = update_together([a.tracker for a in together], frames)
        placements = place(together[0], [(i, f[0], None) for i, f in zip(ids, frames, strict=True)])
        for s, (boxes, scores, classes, pts) in enumerate(frames):
            want = alone[s].update(boxes, scores, classes, pts, (1000, 1000))
            got = together[s].observe(ids[s], boxes, pts, (1000, 1000), placement=placements[s])
            assert np.array_equal(want.track_ids, got.track_ids), (s, step)
            assert want.events == got.events, (s, step)
            assert (want.line_counts, want.zone_occupancy) == (got.line_counts, got.zone_occupancy)
            kinds.update(event.type for event in want.events)
    assert {"line_crossing", "zone_enter", "zone_exit"} <= kinds


def pairs(first: list, second: list) -> list[tuple]:
    """The items of two lists side by side (of one length)."""
    return list(zip(first, second, strict=True))


def test_a_zone_along_one_streams_frame_edge_placed_together_counts_as_alone() -> None:
    """Placing knows no frame size; each stream's zones then judge its own frame's edge. A
    dock on the bottom edge of a 640 x 360 stream counts the truck the frame cuts off; in a
    640 x 480 stream its bottom edge is a border like any other, and the truck is below it."""
    dock = {"name": "dock", "points": [[200, 250], [440, 250], [440, 360], [200, 360]]}
    config = AnalyticsConfig.model_validate({"tracking": {}, "zones": [dock]})
    truck = Mover([(0, 320, 520), (2, 320, 390), (10, 320, 390), (12, 320, 620)], size=(160, 200))
    sizes = [(640, 360), (640, 480)]
    scenes = [render([truck], fps=25, seconds=14, frame_size=size) for size in sizes]
    alone = [StreamAnalytics(config, ["truck"]) for _ in sizes]
    together = [StreamAnalytics(config, ["truck"]) for _ in sizes]
    found: list[list[str]] = [[], []]
    for step in range(len(scenes[0])):
        frames = [scene[step] for scene in scenes]
        ids = [a.track(f.boxes, f.scores, f.class_ids, f.pts) for a, f in pairs(together, frames)]
        placements = place(together[0], [(i, f.boxes, None) for i, f in pairs(ids, frames)])
        for s, frame in enumerate(frames):
            want = alone[s].update(frame.boxes, frame.scores, frame.class_ids, frame.pts, sizes[s])
            got = together[s].observe(
                ids[s], frame.boxes, frame.pts, sizes[s], placement=placements[s]
            )
            assert want.events == got.events and want.zone_occupancy == got.zone_occupancy
            found[s] += [event.type for event in got.events]
    assert found == [["zone_enter", "zone_exit"], []]


def test_hidden_keypoints_placed_together_stand_where_each_stream_last_saw_them() -> None:
    """Each stream remembers its own tracks' keypoint offsets: two streams of a person
    standing by the line, the feet hidden at different times, placed together, get exactly
    what each gets alone (and no crossing)."""
    names = ("nose", "left_ankle", "right_ankle")
    config = AnalyticsConfig.model_validate(
        {
            "tracking": {},
            "anchor_keypoints": ["left_ankle", "right_ankle"],
            "lines": [{"name": "gate", "start": [100, 200], "end": [500, 200]}],
        }
    )
    standing = Mover([(0, 300, 214), (6, 300, 214)], jitter=0.5)
    scenes = [render([standing], fps=25, seconds=6, seed=s) for s in range(2)]
    hidden = [(2.0, 2.6), (3.0, 3.8)]
    alone = [StreamAnalytics(config, ["person"], keypoint_names=names) for _ in scenes]
    together = [StreamAnalytics(config, ["person"], keypoint_names=names) for _ in scenes]
    crossings = 0
    for step in range(len(scenes[0])):
        frames = [scene[step] for scene in scenes]
        keypoints = []
        for s, frame in enumerate(frames):
            feet = 0.2 if hidden[s][0] <= frame.pts < hidden[s][1] else 0.9
            ((x1, y1, x2, y2),) = frame.boxes
            middle = (x1 + x2) / 2
            ankles = [[middle - 8, y2 - 22, feet], [middle + 8, y2 - 22, feet]]
            keypoints.append(np.array([[[middle, y1 + 10, 0.9], *ankles]]))
        ids = [a.track(f.boxes, f.scores, f.class_ids, f.pts) for a, f in pairs(together, frames)]
        boxes = [f.boxes for f in frames]
        placements = place(together[0], list(zip(ids, boxes, keypoints, strict=True)))
        for s, frame in enumerate(frames):
            want_ids = alone[s].track(frame.boxes, frame.scores, frame.class_ids, frame.pts)
            want = alone[s].observe(want_ids, frame.boxes, frame.pts, keypoints=keypoints[s])
            got = together[s].observe(
                ids[s], frame.boxes, frame.pts, keypoints=keypoints[s], placement=placements[s]
            )
            assert want.events == got.events and want.line_counts == got.line_counts
            crossings += len(got.events)
    assert crossings == 0
