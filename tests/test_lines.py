"""Line counting on synthetic scenes: one test per failure mode line counters are known for."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from synthetic import Mover, events, render, run

from vstream.analytics import (
    AnalyticsConfig,
    Anchor,
    LineConfig,
    StreamAnalytics,
    TrackingConfig,
    ZoneConfig,
    parse_line_spec,
)
from vstream.analytics.geometry import Segment
from vstream.analytics.lines import LineCounter

GATE = LineConfig(name="gate", start=(100, 200), end=(500, 200))  # left to right, at y = 200


def analytics(*lines: LineConfig, **options) -> StreamAnalytics:
    config = AnalyticsConfig(lines=list(lines) or [GATE], **options)
    return StreamAnalytics(config, ["person", "car"])


def counts(updates) -> dict:
    return updates[-1].line_counts


def test_direction_convention() -> None:
    """Looking from start to end, left to right is 'in': down across a left-to-right line."""
    down = render([Mover([(0, 300, 120), (2, 300, 280)])], fps=25, seconds=2)
    up = render([Mover([(0, 300, 280), (2, 300, 120)])], fps=25, seconds=2)
    assert counts(run(analytics(), down))["gate"] == {"in": 1, "out": 0}
    assert counts(run(analytics(), up))["gate"] == {"in": 0, "out": 1}
    reversed_gate = LineConfig(name="gate", start=(500, 200), end=(100, 200))
    assert counts(run(analytics(reversed_gate), down))["gate"] == {"in": 0, "out": 1}
    # A vertical line drawn downwards: its right, on the screen, is the left of the frame.
    door = LineConfig(name="door", start=(300, 50), end=(300, 350))
    leftward = render([Mover([(0, 450, 200), (2, 150, 200)])], fps=25, seconds=2)
    assert counts(run(analytics(door), leftward))["door"] == {"in": 1, "out": 0}


def test_event_record() -> None:
    updates = run(analytics(), render([Mover([(0, 300, 120), (2, 300, 280)])], 25, 2))
    (event,) = events(updates)
    assert event == {
        "type": "line_crossing",
        "line": "gate",
        "direction": "in",
        "track_id": 1,
        "class_id": 0,
        "label": "person",
        "pts": pytest.approx(1.08),  # first frame with the anchor beyond the 5 px band
    }


def test_jitter_on_the_line_never_counts() -> None:
    # Parked on the line, the box jitters by +-4 px around it (inside the 5 px dead band)...
    parked = Mover([(0, 300, 120), (1, 300, 199), (21, 300, 199)], jitter=2.0)
    frames = render([parked], fps=25, seconds=20, seed=3)
    # ... and now and then a single-frame spike 15 px across the line (a bad detection).
    for frame in frames[60::37]:
        frame.boxes[:, [1, 3]] += 15
    updates = run(analytics(), frames)
    assert {int(i) for u in updates for i in u.track_ids if i > 0} == {1}
    assert counts(updates)["gate"] == {"in": 0, "out": 0}


def test_back_and_forth_crossings_count_each_time() -> None:
    pacing = Mover([(0, 300, 120), (2, 300, 280), (4, 300, 120), (6, 300, 280), (8, 300, 120)])
    updates = run(analytics(), render([pacing], fps=25, seconds=8))
    assert [e["direction"] for e in events(updates)] == ["in", "out", "in", "out"]
    assert {e["track_id"] for e in events(updates)} == {1}


def test_only_the_drawn_segment_counts() -> None:
    beside = Mover([(0, 560, 120), (2, 560, 280)])  # the line ends at x = 500
    through = Mover([(0, 480, 120), (2, 480, 280)])
    assert counts(run(analytics(), render([beside], 25, 2)))["gate"] == {"in": 0, "out": 0}
    assert counts(run(analytics(), render([through], 25, 2)))["gate"] == {"in": 1, "out": 0}
    # Around the end: down beside the segment, then back up through it. Only 'out' counts.
    around = Mover([(0, 560, 120), (2, 560, 280), (3, 400, 280), (5, 400, 120)])
    assert counts(run(analytics(), render([around], 25, 5)))["gate"] == {"in": 0, "out": 1}


def test_crossing_while_occluded_counts_once_on_one_track() -> None:
    hidden_on_the_line = Mover([(0, 300, 120), (3, 300, 280)], hidden=[(1.2, 1.8)])
    updates = run(analytics(), render([hidden_on_the_line], fps=25, seconds=3))
    assert counts(updates)["gate"] == {"in": 1, "out": 0}
    assert {int(i) for u in updates for i in u.track_ids if i > 0} == {1}


@pytest.mark.parametrize("gone", ["leaves", "hidden"])
def test_a_crossing_just_before_the_track_ends_still_counts(gone: str) -> None:
    """Across the line, then gone (out of the frame, or hidden until its track is forgotten)
    before min_seconds_on_side: counted when the tracker forgets the track, at the pts it
    was first seen across; exactly once."""
    if gone == "leaves":
        crosser = Mover([(0, 300, 120), (1, 300, 210)])  # beyond the band for 0.04 s, then gone
    else:  # hidden for longer than the track buffer, back under a new id on the far side
        crosser = Mover([(0, 300, 120), (1, 300, 210), (5, 300, 260)], hidden=[(1.02, 4.0)])
    updates = run(analytics(), render([crosser], fps=25, seconds=5))
    assert [(e["direction"], e["track_id"]) for e in events(updates)] == [("in", 1)]
    assert events(updates)[0]["pts"] == pytest.approx(0.96)
    assert counts(updates)["gate"] == {"in": 1, "out": 0}


def test_a_track_carried_across_only_by_predictions_is_not_counted_when_it_ends() -> None:
    """A crossing pending when its track is forgotten counts if the track's last detection
    saw it across; predicted boxes (frames the detector did not see) alone never do."""
    line = LineCounter(LineConfig(name="gate", start=(0, 200), end=(400, 200)), 5.0, 0.1)

    def seen(track: int, y: float, pts: float, predicted: bool) -> list:
        point = np.array([[200.0, y]])
        distances = line.place(point)
        return line.observe(
            np.array([track]), point, distances, np.array([0]), pts, str, predicted=predicted
        )

    for track, detected_across in [(1, False), (2, True)]:
        assert seen(track, 150.0, 0.0, predicted=False) == []
        assert seen(track, 215.0, 0.04, predicted=not detected_across) == []
        assert seen(track, 230.0, 0.2, predicted=True) == [], "a prediction settles nothing"
    counted = line.forget(frozenset(), str)
    assert [(e.track_id, e.direction, e.pts) for e in counted] == [(2, "in", 0.04)]


def test_a_track_that_ends_on_its_own_side_or_in_the_band_never_counts() -> None:
    in_the_band = Mover([(0, 300, 120), (1, 300, 203)])  # gone while on the line
    back = Mover([(0, 300, 120), (1, 300, 210), (1.2, 300, 190)])  # a spike across, back
    counted = Mover([(0, 300, 120), (2, 300, 280)])  # counted before it leaves: not again
    for mover, expected in [(in_the_band, 0), (back, 0), (counted, 1)]:
        updates = run(analytics(), render([mover], fps=25, seconds=4))
        assert counts(updates)["gate"]["in"] == expected


def test_two_objects_crossing_each_other_on_the_line() -> None:
    down = Mover([(0, 280, 100), (3, 320, 300)])
    up = Mover([(0, 320, 300), (3, 280, 100)], class_id=1)
    updates = run(analytics(), render([down, up], fps=25, seconds=3, seed=2))
    assert counts(updates)["gate"] == {"in": 1, "out": 1}
    assert sorted((e["direction"], e["label"]) for e in events(updates)) == [
        ("in", "person"),
        ("out", "car"),
    ]


def test_id_switch_near_the_line_loses_the_crossing_never_doubles_it() -> None:
    """Documented behaviour: a track's first side is never a crossing.

    The object vanishes just before the line for longer than the track buffer and
    comes back past it under a new id. The old track never reached the far side and
    the new one started there, so nothing counts: the crossing is lost, not doubled.
    """
    switched = Mover([(0, 300, 100), (3, 300, 300)], hidden=[(1.3, 2.6)])
    updates = run(analytics(), render([switched], fps=25, seconds=3))
    assert {int(i) for u in updates for i in u.track_ids if i > 0} == {1, 2}
    assert counts(updates)["gate"] == {"in": 0, "out": 0}


def test_stop_and_go_with_repeated_id_switches_does_not_inflate_counts() -> None:
    """opendatacam #204: a car stopping on the line got a new id ten times and was counted
    each time. Here it stops on the line, is lost for longer than the track buffer ten
    times (ten new ids), jittering across the line, then drives on."""
    stops = [(2.0 + 2 * k, 3.2 + 2 * k) for k in range(10)]
    car = Mover([(0, 300, 120), (1.5, 300, 201), (22, 300, 201), (24, 300, 300)], hidden=stops)
    config = TrackingConfig(track_buffer_seconds=1.0)
    updates = run(analytics(tracking=config), render([car], fps=25, seconds=24, seed=4))
    assert len({int(i) for u in updates for i in u.track_ids if i > 0}) == 11
    assert counts(updates)["gate"]["in"] <= 1 and counts(updates)["gate"]["out"] == 0


def test_unconfirmed_detections_never_count() -> None:
    # Scored below new_track_score (conf, 0.25): a track never starts, so no id and no count.
    faint = Mover([(0, 300, 120), (2, 300, 280)], score=0.2)
    updates = run(analytics(), render([faint], fps=25, seconds=2))
    assert all((u.track_ids == -1).all() for u in updates)
    assert counts(updates)["gate"] == {"in": 0, "out": 0}
    # Detected every other frame: tentative tracks never reach three hits in a row.
    frames = render([Mover([(0, 300, 120), (2, 300, 280)])], fps=25, seconds=2)
    for frame in frames[1::2]:
        frame.boxes, frame.scores, frame.class_ids = (
            frame.boxes[:0],
            frame.scores[:0],
            frame.class_ids[:0],
        )
    assert counts(run(analytics(), frames))["gate"] == {"in": 0, "out": 0}


@pytest.mark.parametrize(
    ("anchor", "line", "path"),
    [
        # 4 px above the bottom edge; objects leave (and come back in) downwards.
        (Anchor.BOTTOM_CENTER, ((0, 356), (640, 356)), [(0, 320, 250), (2, 320, 430)]),
        (Anchor.BOTTOM_CENTER, ((0, 356), (640, 356)), [(0, 320, 430), (2, 320, 250)]),
        # 3 px from the left edge; objects leave leftwards.
        (Anchor.CENTER_LEFT, ((3, 0), (3, 360)), [(0, 200, 200), (2, -100, 200)]),
        # Exactly along the top edge, counted with the top anchor of clipped boxes.
        (Anchor.TOP_CENTER, ((0, 0.5), (640, 0.5)), [(0, 320, 150), (2, 320, -20)]),
    ],
)
def test_line_near_the_frame_edge_counts(anchor, line, path) -> None:
    """supervision #1838: near the edge the band would leave no room; it is narrowed."""
    edge = LineConfig(name="edge", start=line[0], end=line[1])
    updates = run(
        analytics(edge, anchor=anchor),
        render([Mover(path)], fps=25, seconds=2, frame_size=(640, 360)),
        frame_size=(640, 360),
    )
    assert sum(counts(updates)["edge"].values()) == 1


def test_segment_reach_in_frame() -> None:
    bottom = Segment((0, 356), (640, 356))
    assert bottom.reach_in_frame(640, 360) == pytest.approx((356.0, 4.0))
    short = Segment((100, 100), (200, 200))  # diagonal, away from the edges
    out_reach, in_reach = short.reach_in_frame(640, 360)
    assert out_reach > 100 and in_reach > 100
    outside = Segment((700, 100), (800, 100))  # no part of the frame lies beside it
    assert outside.reach_in_frame(640, 360) == (0.0, 0.0)


def test_class_filter_and_flicker() -> None:
    cars_only = LineConfig(name="gate", start=(100, 200), end=(500, 200), classes=[1])
    person = Mover([(0, 200, 120), (2, 200, 280)], class_id=0)
    car = Mover([(0, 400, 120), (2, 400, 280)], class_id=1)
    frames = render([person, car], fps=25, seconds=2)
    # The car's detections flicker to "person" one frame in three: still one car track.
    for frame in frames[::3]:
        frame.class_ids[frame.class_ids == 1] = 0
    a = analytics(cars_only)
    updates = run(a, frames)
    assert counts(updates)["gate"] == {"in": 1, "out": 0}
    assert [(e["class_id"], e["label"]) for e in events(updates)] == [(1, "car")]
    assert a.line_totals() == {"gate": {"in": {"car": 1}, "out": {}}}


def test_many_lines_and_totals_per_class() -> None:
    lines = [GATE, LineConfig(name="lane", start=(300, 50), end=(300, 350))]
    movers = [
        Mover([(0, 200, 120), (2, 200, 280)], class_id=0),
        Mover([(0, 400, 120), (2, 400, 280)], class_id=1),
        Mover([(0, 150, 320), (2, 450, 320)], class_id=1),
    ]
    a = analytics(*lines)
    updates = run(a, render(movers, fps=25, seconds=2))
    assert counts(updates) == {"gate": {"in": 2, "out": 0}, "lane": {"in": 0, "out": 1}}
    assert a.line_totals() == {
        "gate": {"in": {"person": 1, "car": 1}, "out": {}},
        "lane": {"in": {}, "out": {"car": 1}},
    }


def scene() -> list[Mover]:
    """Objects crossing the gate in both directions (4 in, 2 out), one back and forth, and
    one poking 15 px across for 0.08 s (several frames at 60 fps, none at 10 fps)."""
    return [
        Mover([(0, 150, 100), (3, 150, 300)]),
        Mover([(0.5, 250, 320), (3.5, 250, 90)], class_id=1),
        Mover([(1, 350, 130), (2.5, 350, 260), (4, 350, 130), (5.5, 350, 260)]),
        Mover([(0, 450, 150), (6, 460, 250)], jitter=1.5),
        Mover(
            [
                (0, 200, 100),
                (1.5, 200, 198),
                (2.0, 200, 198),
                (2.01, 200, 215),
                (2.08, 200, 215),
                (2.09, 200, 198),
                (3, 200, 198),
                (4, 200, 100),
            ]
        ),
    ]


def test_same_counts_at_10_and_60_fps() -> None:
    results = []
    for fps in (10, 60):
        updates = run(analytics(), render(scene(), fps=fps, seconds=6, seed=5))
        results.append((counts(updates), sorted(e["direction"] for e in events(updates))))
    assert results[0] == results[1]
    assert results[0][0] == {"gate": {"in": 4, "out": 2}}


def test_streams_do_not_share_state() -> None:
    alone = run(analytics(), render(scene(), fps=25, seconds=6))
    first, second = analytics(), analytics()
    quiet = render([Mover([(0, 150, 100), (6, 160, 150)])], fps=25, seconds=6)
    mixed_first, mixed_second = [], []
    for a, b in zip(render(scene(), fps=25, seconds=6), quiet, strict=True):
        mixed_first += run(first, [a])
        mixed_second += run(second, [b])
    assert counts(mixed_first) == counts(alone) == {"gate": {"in": 4, "out": 2}}
    assert counts(mixed_second) == {"gate": {"in": 0, "out": 0}}
    assert events(mixed_first) == events(alone)
    assert {int(i) for u in mixed_second for i in u.track_ids if i > 0} == {1}


@pytest.mark.soak
def test_line_state_is_bounded_over_20000_frames() -> None:
    """People keep walking through the gate for 20,000 frames (800 s at 25 fps)."""
    rng = np.random.default_rng(1)
    a = analytics(tracking=TrackingConfig(track_buffer_seconds=1.0))
    fps, walkers, largest, expected = 25.0, [], 0, 0
    for i in range(20_000):
        if rng.random() < 0.05:
            x, down = rng.uniform(120, 480), bool(rng.random() < 0.5)
            walkers.append([x, 60.0 if down else 340.0, 120.0 if down else -120.0])
            expected += 1
        walkers = [w for w in walkers if 40 <= w[1] <= 360]
        for w in walkers:
            w[1] += w[2] / fps
        boxes = np.array([[w[0] - 15, w[1] - 40, w[0] + 15, w[1]] for w in walkers])
        a.update(boxes.reshape(-1, 4), np.full(len(walkers), 0.9), np.zeros(len(walkers)), i / fps)
        largest = max(largest, a.num_track_states, a.tracker.num_tracks)
    totals = a.line_totals()["gate"]
    assert sum(totals["in"].values()) + sum(totals["out"].values()) > 900
    assert largest < 40  # about 3 walkers at a time, plus one second of forgotten ones


def test_line_config_is_validated() -> None:
    with pytest.raises(ValidationError, match="same point"):
        LineConfig(name="gate", start=(1, 2), end=(1, 2))
    with pytest.raises(ValidationError, match="must be a number"):
        LineConfig(name="gate", start=(1, True), end=(1, 2))
    with pytest.raises(ValidationError, match="pattern"):
        LineConfig(name="no spaces", start=(0, 0), end=(1, 2))
    with pytest.raises(ValidationError, match="repeated: gate"):
        AnalyticsConfig(lines=[GATE, GATE])
    with pytest.raises(ValidationError, match=r"must be in \[0, 10000\]"):
        AnalyticsConfig(dead_band_pixels=-1)
    with pytest.raises(ValidationError, match="extra"):
        AnalyticsConfig.model_validate({"line": []})
    config = AnalyticsConfig.model_validate(
        {"lines": [{"name": "gate", "start": [0, 1], "end": [20, 3], "classes": [0, 2]}]}
    )
    assert config.enabled and config.effective_tracking == TrackingConfig()
    assert config.anchor is Anchor.BOTTOM_CENTER and not AnalyticsConfig().enabled


def test_a_real_models_scores_count_at_its_conf() -> None:
    """Scores spread down to conf (a real model): counted at the pipeline's conf, untuned."""
    walker = Mover([(0, 300, 120), (2, 300, 280)], score=0.35)
    config = AnalyticsConfig(lines=[GATE])
    at_conf = StreamAnalytics(config, ["person"], conf=0.3)
    assert counts(run(at_conf, render([walker], fps=25, seconds=2)))["gate"]["in"] == 1
    stricter = StreamAnalytics(config, ["person"], conf=0.4)
    assert counts(run(stricter, render([walker], fps=25, seconds=2)))["gate"]["in"] == 0


def test_the_detector_keeps_what_the_trackers_second_stage_needs() -> None:
    assert AnalyticsConfig().candidate_conf(0.25) == 0.25  # no tracking: conf
    assert AnalyticsConfig(lines=[GATE]).candidate_conf(0.25) == 0.1  # low_score
    assert AnalyticsConfig(tracking=TrackingConfig(low_score=0.05)).candidate_conf(0.5) == 0.05
    assert AnalyticsConfig(lines=[GATE]).candidate_conf(0.05) == 0.05


def test_parse_line_spec() -> None:
    assert parse_line_spec("gate=10,20,300,20.5") == LineConfig(
        name="gate", start=(10, 20), end=(300, 20.5)
    )
    for spec, message in [
        ("gate", "expected NAME=X1,Y1,X2,Y2"),
        ("gate=1,2,3", "expected 4 numbers"),
        ("gate=1,2,3,x", "must be numbers"),
        ("my gate=1,2,3,4", "must start with a letter or digit"),
        ("gate=5,5,5,5", "same point"),
        ("gate=1,2,3,inf", "finite"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_line_spec(spec)


@pytest.mark.parametrize(
    "start, end",
    [
        ((0, 400), (1280, 400)),  # the README's old example, below a 640x360 frame
        ((900, 100), (900, 600)),  # right of it
        ((320, 360), (320, 0)),  # on the bundled sample's gate: wholly inside
        ((0, 180), (1280, 180)),  # half inside
        ((-100, -50), (700, 400)),  # through a corner region, out on both ends
        ((640, 0), (640, 360)),  # along the right edge: inside
        ((100, 500), (800, -200)),  # diagonal, clipped by the bottom and the right edges
    ],
)
def test_a_segments_share_in_the_frame_is_opencvs_clipped_length(start, end) -> None:
    cv2 = pytest.importorskip("cv2")
    width, height = 640, 360
    # OpenCV clips to [x, x + w - 1]: a rectangle one wider is the frame [0, 640] x [0, 360].
    inside, a, b = cv2.clipLine((0, 0, width + 1, height + 1), start, end)
    expected = np.hypot(*np.subtract(b, a)) / np.hypot(*np.subtract(end, start)) if inside else 0
    share = Segment(start, end).share_in_frame(width, height)
    assert share == pytest.approx(expected, abs=0.01)


def test_lines_and_zones_outside_the_frame_are_said_once(caplog) -> None:
    """The first frame's size is the first moment a line drawn for another size shows."""
    config = AnalyticsConfig(
        lines=[
            LineConfig(name="gate", start=(0, 400), end=(1280, 400)),
            LineConfig(name="half", start=(0, 180), end=(1280, 180)),
            LineConfig(name="mid", start=(320, 360), end=(320, 0)),
        ],
        zones=[ZoneConfig(name="far", points=[(700, 0), (800, 0), (800, 100)])],
    )
    counter = StreamAnalytics(config, ["a"], stream="sample")
    none = np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=np.int64)
    with caplog.at_level("WARNING", logger="vstream.analytics"):
        for pts in (0.0, 0.04, 0.08):
            counter.update(*none, pts, (640, 360))
    assert caplog.messages == [
        "stream sample: line gate lies outside the 640x360 frame: it will count nothing",
        "stream sample: line half lies 50 % outside the 640x360 frame: only the part inside counts",
        "stream sample: zone far lies outside the 640x360 frame: it will count nothing",
    ]


def test_a_line_shorter_than_twice_the_dead_band_is_refused() -> None:
    """A line of 0.001 px was accepted and counted nothing, silently."""
    tiny = parse_line_spec("gate=300,200,300.001,200")
    said = r"line 'gate' is 0\.001 px long, shorter than twice the dead band around it "
    with pytest.raises(ValidationError, match=said + r"\(2 x 5 px\)"):
        AnalyticsConfig(lines=[tiny])
    with pytest.raises(ValidationError, match=r"line 'short' is 9\.9 px long"):
        AnalyticsConfig(lines=[LineConfig(name="short", start=(0, 0), end=(9.9, 0))])
    at_least = LineConfig(name="gate", start=(0, 0), end=(6, 8))  # 10 px: twice the band
    assert AnalyticsConfig(lines=[at_least]).lines == [at_least]
    assert AnalyticsConfig(lines=[tiny], dead_band_pixels=0.0).lines == [tiny]


def feet_scene(
    mover: Mover, hidden: list[tuple[float, float]], seconds: float
) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """Frames of one person: their box, and keypoints (nose, left and right ankle) with the
    ankles 22 px above the box's bottom (a box ends below the feet), scoring 0.2 while the
    feet are ``hidden`` (a passer-by in front), else 0.9."""
    scene = []
    for frame in render([mover], fps=25, seconds=seconds):
        feet = 0.2 if any(start <= frame.pts < end for start, end in hidden) else 0.9
        x1, y1, x2, y2 = frame.boxes.T
        centre = (x1 + x2) / 2
        keypoints = np.stack(
            [
                np.stack([centre, y1 + 10, np.full_like(x1, 0.9)], axis=1),
                np.stack([centre - 8, y2 - 22, np.full_like(x1, feet)], axis=1),
                np.stack([centre + 8, y2 - 22, np.full_like(x1, feet)], axis=1),
            ],
            axis=1,
        )
        scene.append((frame.pts, frame.boxes, keypoints))
    return scene


def count_by_feet(scene, **options) -> tuple[list[dict], StreamAnalytics]:
    feet = ["left_ankle", "right_ankle"]
    config = AnalyticsConfig(lines=[GATE], anchor_keypoints=feet, **options)
    a = StreamAnalytics(config, ["person"], keypoint_names=["nose", "left_ankle", "right_ankle"])
    updates = []
    for pts, boxes, keypoints in scene:
        n = len(boxes)
        ids = a.track(boxes, np.full(n, 0.9), np.zeros(n, dtype=np.int64), pts)
        updates.append(a.observe(ids, boxes, pts, (640, 360), keypoints=keypoints))
    return events(updates), a


def test_hidden_feet_do_not_move_a_person_across_the_line() -> None:
    """Standing with the ankles 8 px before the line and the box's bottom 14 px past it, a
    person whose feet were hidden twice was placed by the box's bottom then: counted in and
    out twice without moving. Their ankles stand where they last were from the box."""
    standing = Mover([(0, 300, 214), (6, 300, 214)], jitter=0.5)
    hidden = [(2.0, 2.6), (4.0, 4.6)]
    found, a = count_by_feet(feet_scene(standing, hidden, 6))
    assert found == []
    assert len(a.keypoint_offsets) == 1

    # One who walks across with the feet hidden at the line is counted as one seen all along.
    walker = Mover([(0, 300, 120), (3, 300, 320), (3.5, 300, 320)])
    seen, _ = count_by_feet(feet_scene(walker, [], 5))
    found, a = count_by_feet(
        feet_scene(walker, [(1.3, 1.9)], 5), tracking=TrackingConfig(track_buffer_seconds=0.5)
    )
    assert [e["direction"] for e in seen] == ["in"]
    assert [(e["direction"], e["track_id"]) for e in found] == [
        (e["direction"], e["track_id"]) for e in seen
    ]
    assert found[0]["pts"] == pytest.approx(seen[0]["pts"], abs=0.05)
    assert len(a.keypoint_offsets) == 0, "the offset goes with the forgotten track"
