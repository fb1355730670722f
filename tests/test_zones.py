"""Zones on synthetic scenes: entries, exits and dwell, occupancy, loitering, border flicker."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.spatial import ConvexHull
from synthetic import Mover, events, render, run

from vstream.analytics import AnalyticsConfig, StreamAnalytics, TrackingConfig, ZoneConfig
from vstream.analytics.events import attributes_match
from vstream.analytics.geometry import Polygon
from vstream.analytics.placing import place

# A 200 x 100 rectangle: x 200..400, y 150..250.
PEN = ZoneConfig(name="pen", points=[(200, 150), (400, 150), (400, 250), (200, 250)])


def analytics(*zones: ZoneConfig, **options) -> StreamAnalytics:
    return StreamAnalytics(AnalyticsConfig(zones=list(zones) or [PEN], **options), ["a", "b"])


def kinds(updates) -> list[str]:
    return [e["type"] for e in events(updates)]


def test_enter_and_exit_with_dwell_seconds() -> None:
    walker = Mover([(0, 100, 200), (1, 300, 200), (3, 300, 200), (4, 500, 200)])
    updates = run(analytics(), render([walker], fps=25, seconds=4))
    enter, leave = events(updates)
    assert enter["type"] == "zone_enter" and leave["type"] == "zone_exit"
    assert enter["zone"] == leave["zone"] == "pen" and enter["track_id"] == leave["track_id"] == 1
    # Clear of the 5 px band at x > 205 (t > 0.525) and x > 405 (t > 3.525): frames at 25 fps.
    assert enter["pts"] == pytest.approx(0.56) and leave["pts"] == pytest.approx(3.56)
    assert leave["dwell_seconds"] == pytest.approx(3.0)
    occupancy = [u.zone_occupancy["pen"] for u in updates]
    assert max(occupancy) == 1 and occupancy[-1] == 0
    assert occupancy.index(1) == 17  # pts 0.68: 0.1 s after the first clear frame


def test_flicker_on_the_border_makes_no_event_storm() -> None:
    # Parked on the left border, the box jitters across it by a few pixels for 20 s,
    # with now and then a one-frame spike 20 px inside.
    parked = Mover([(0, 100, 200), (1, 201, 200), (21, 201, 200)], jitter=2.0)
    frames = render([parked], fps=25, seconds=20, seed=7)
    for frame in frames[50::41]:
        frame.boxes[:, [0, 2]] += 20
    updates = run(analytics(), frames)
    assert kinds(updates) == []
    assert all(u.zone_occupancy["pen"] == 0 for u in updates)


def test_occupancy_is_entries_minus_exits_every_frame() -> None:
    movers = [
        Mover([(0, 100, 180), (2, 300, 180), (4, 300, 180), (6, 500, 180)]),
        Mover([(1, 300, 350), (2, 300, 220), (5, 300, 220), (6, 300, 350)], class_id=1),
        Mover([(0, 250, 240), (6, 250, 240)]),  # inside from its first frame
    ]
    inside = 0
    occupancy = []
    for update in run(analytics(), render(movers, fps=25, seconds=6)):
        for event in update.events:
            inside += {"zone_enter": 1, "zone_exit": -1}.get(event.type, 0)
        assert update.zone_occupancy["pen"] == inside
        occupancy.append(inside)
    assert max(occupancy) == 3 and occupancy[-1] == 1


def test_object_first_seen_inside_enters() -> None:
    updates = run(analytics(), render([Mover([(0, 300, 200), (2, 310, 200)])], 25, 2))
    assert kinds(updates) == ["zone_enter"]


def test_loitering_once_per_visit() -> None:
    pen = PEN.model_copy(update={"loiter_seconds": 2.0})
    walker = Mover(
        [
            *[(0, 100, 200), (1, 300, 200), (4, 300, 200), (5, 500, 200)],  # ~3 s inside
            *[(6, 500, 200), (7, 300, 200), (7.2, 300, 200), (8.2, 500, 200)],  # ~1.2 s
            *[(10, 500, 200), (11, 300, 200), (14, 300, 200), (15, 500, 200)],  # ~3 s
        ]
    )
    updates = run(analytics(pen), render([walker], fps=25, seconds=15))
    assert kinds(updates) == [
        "zone_enter",
        "loitering",
        "zone_exit",
        "zone_enter",
        "zone_exit",
        "zone_enter",
        "loitering",
        "zone_exit",
    ]
    loiter = next(e for e in events(updates) if e["type"] == "loitering")
    assert loiter["dwell_seconds"] == pytest.approx(2.0, abs=0.05)


def test_a_track_no_longer_seen_does_not_go_on_loitering() -> None:
    """It stood in the zone 9.6 s of a 10 s loitering limit and left the frame: the tracker
    keeps it (lost) for 2 s, and loitering, judged on its detections, is never said; it
    was said after it had gone, with a dwell longer than its exit's."""
    dock = ZoneConfig(
        name="dock", points=[(400, 100), (640, 100), (640, 300), (400, 300)], loiter_seconds=10
    )
    a = analytics(dock, tracking=TrackingConfig(track_buffer_seconds=2.0))
    walker = Mover([(0, 350, 200), (0.5, 450, 200), (9.0, 520, 200), (10.2, 700, 200)])
    frames = render([walker], fps=25, seconds=14, frame_size=(640, 360))
    updates = run(a, frames, frame_size=(640, 360))
    last_seen = max(f.pts for f in frames if len(f.boxes))
    enter, leave = events(updates)
    assert (enter["type"], leave["type"]) == ("zone_enter", "zone_exit")
    assert leave["pts"] == pytest.approx(last_seen) and leave["dwell_seconds"] < 10


def test_a_zone_entry_is_settled_by_a_detection_not_by_predictions() -> None:
    """Detected every 8th frame, a walker at 100 px/s stops 10 px short of the zone; between
    detections the tracker carries it on into the zone at its last velocity, and the next
    detection finds it outside: no entry (and no exit). One that walks in is entered, once.
    """

    def walk(stop_x: float) -> list[dict]:
        a = analytics()
        found: list[dict] = []
        for i in range(100):
            pts, x = i / 25, min(100.0 + 4 * i, stop_x)
            if i % 8 == 0:
                box = np.array([[x - 20, 140.0, x + 20, 200.0]])
                found += events([a.update(box, np.array([0.9]), np.array([0]), pts)])
            else:
                prediction = a.predict(pts)
                found += events([a.observe(prediction.track_ids, prediction.boxes, pts, None,
                                           predicted=True)])  # fmt: skip
        return found

    assert walk(190.0) == []
    assert [e["type"] for e in walk(300.0)] == ["zone_enter"]


def test_track_forgotten_inside_exits_when_last_seen() -> None:
    # Leaves the frame (no more detections) from inside a zone that touches the edge.
    edge_zone = ZoneConfig(name="dock", points=[(500, 100), (640, 100), (640, 300), (500, 300)])
    leaver = Mover([(0, 400, 200), (2, 630, 200)])
    config = TrackingConfig(track_buffer_seconds=0.5)
    a = analytics(edge_zone, tracking=config)
    updates = run(a, render([leaver], fps=25, seconds=3))
    enter, leave = events(updates)
    assert (enter["type"], leave["type"]) == ("zone_enter", "zone_exit")
    assert leave["pts"] == pytest.approx(2.0)  # last seen, reported 0.5 s later
    assert leave["dwell_seconds"] == pytest.approx(2.0 - enter["pts"])
    assert updates[-1].zone_occupancy["dock"] == 0 and a.num_track_states == 0


def test_class_filter_and_flicker() -> None:
    watched = PEN.model_copy(update={"classes": [1]})
    a_walker = Mover([(0, 100, 180), (2, 300, 180)], class_id=0)
    b_walker = Mover([(0, 100, 230), (2, 300, 230)], class_id=1)
    frames = render([a_walker, b_walker], fps=25, seconds=2)
    for frame in frames[::3]:
        frame.class_ids[:] = 0  # b flickers to class 0 one frame in three
    updates = run(analytics(watched), frames)
    assert [(e["type"], e["label"]) for e in events(updates)] == [("zone_enter", "b")]
    assert updates[-1].zone_occupancy == {"pen": 1}


def test_zones_of_different_streams_are_independent() -> None:
    walker = Mover([(0, 100, 200), (1, 300, 200), (3, 300, 200), (4, 500, 200)])
    first, second = analytics(), analytics()
    updates_first = run(first, render([walker], fps=25, seconds=4))
    updates_second = run(second, render([Mover([(0, 50, 50), (4, 60, 60)])], 25, 4))
    assert kinds(updates_first) == ["zone_enter", "zone_exit"] and kinds(updates_second) == []
    assert first.zone_totals() == {"pen": {"occupancy": 0, "entries": 1}}
    assert second.zone_totals() == {"pen": {"occupancy": 0, "entries": 0}}


@pytest.mark.parametrize("fps", [10, 60])
def test_same_events_at_any_fps(fps: int) -> None:
    walker = Mover([(0, 100, 200), (1, 300, 200), (3, 300, 200), (4, 500, 200)])
    poker = Mover(
        [
            (0, 300, 330),
            (1, 300, 256),
            (2, 300, 256),
            (2.01, 300, 240),
            (2.08, 300, 240),
            (2.09, 300, 256),
            (3, 300, 256),
        ]
    )  # 0.08 s inside
    updates = run(analytics(), render([walker, poker], fps=fps, seconds=4, seed=9))
    assert kinds(updates) == ["zone_enter", "zone_exit"]
    assert events(updates)[1]["dwell_seconds"] == pytest.approx(3.0, abs=1.5 / fps)


@pytest.mark.soak
def test_zone_state_is_bounded_over_20000_frames() -> None:
    rng = np.random.default_rng(2)
    a = analytics(PEN.model_copy(update={"loiter_seconds": 1.0}))
    fps, walkers, largest = 25.0, [], 0
    for i in range(20_000):
        if rng.random() < 0.04:
            walkers.append([0.0, rng.uniform(120, 280), rng.uniform(100, 250)])
        walkers = [w for w in walkers if w[0] <= 640]
        for w in walkers:
            w[0] += w[2] / fps
        boxes = np.array([[w[0] - 15, w[1] - 40, w[0] + 15, w[1]] for w in walkers])
        a.update(boxes.reshape(-1, 4), np.full(len(walkers), 0.9), np.zeros(len(walkers)), i / fps)
        largest = max(largest, a.num_track_states, a.tracker.num_tracks)
    assert a.zone_totals()["pen"]["entries"] > 300  # about 800 walkers, half through the pen
    assert largest < 40


def test_polygon_geometry() -> None:
    # A concave "U": the notch (x 4..6, y 0..8) is outside.
    u_shape = Polygon([(0, 0), (4, 0), (4, 8), (6, 8), (6, 0), (10, 0), (10, 10), (0, 10)])
    points = np.array([[2, 5], [5, 5], [5, 9], [11, 5], [8, 1]])
    assert u_shape.contains(points).tolist() == [True, False, True, False, True]
    np.testing.assert_allclose(u_shape.border_distance(points), [2, 1, 1, 1, 1])


@pytest.mark.parametrize(
    "points",
    [
        [(0, 0), (4, 0), (4, 8), (6, 8), (6, 0), (10, 0), (10, 10), (0, 10)],  # concave U
        [(100, 50), (900, 80), (700, 600), (420, 300), (150, 640)],  # concave, slanted edges
        [(0, 0), (1920, 0), (1920, 1080), (0, 1080)],  # the whole frame
    ],
)
def test_inside_and_border_distance_are_opencvs_point_polygon_test(points) -> None:
    """OpenCV's ``pointPolygonTest`` as the oracle: its sign says inside, its magnitude is
    the distance to the nearest edge (computed in float32 there, so compared to 1e-3)."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(7)
    contour = np.array(points, np.float32).reshape(-1, 1, 2)
    low, high = contour.min(axis=(0, 1)) - 20, contour.max(axis=(0, 1)) + 20
    samples = np.concatenate([rng.uniform(low, high, (3000, 2)), np.array(points, float)])
    signed = np.array([cv2.pointPolygonTest(contour, (x, y), True) for x, y in samples.tolist()])
    polygon = Polygon(points)
    np.testing.assert_allclose(polygon.border_distance(samples), np.abs(signed), atol=1e-3)
    away = np.abs(signed) > 1e-2  # on the border the two may round to either side
    assert polygon.contains(samples)[away].tolist() == (signed[away] > 0).tolist()
    assert polygon.contains(np.empty((0, 2))).shape == (0,)
    assert polygon.border_distance(np.empty((0, 2))).shape == (0,)


@pytest.mark.parametrize(
    "points",
    [
        [(0, 0), (10, 10), (10, 0), (0, 10)],  # equal lobes: signed areas cancel
        [(0, 0), (20, 20), (20, 0), (0, 10)],  # unequal lobes: one outweighs the other
        [(0, 10), (20, 0), (20, 20), (0, 0)],  # the same, drawn the other way round
        [(0, 0), (10, 0), (10, 10), (5, 0), (0, 10)],  # a corner touching an edge
    ],
)
def test_a_polygon_that_crosses_itself_is_refused_showing_where(points) -> None:
    with pytest.raises(ValidationError, match=r"zone 'z': the polygon crosses itself: edge \("):
        ZoneConfig(name="z", points=points)


def test_a_simple_polygon_is_accepted_drawn_either_way() -> None:
    u_shape = [(0, 0), (4, 0), (4, 8), (6, 8), (6, 0), (10, 0), (10, 10), (0, 10)]
    for points in (u_shape, u_shape[::-1], [(0, 0), (1, 0), (0, 1)]):
        assert len(ZoneConfig(name="z", points=points).points) == len(points)
    with pytest.raises(ValidationError, match=r"point 3 \(10, 10\) repeats the one before"):
        ZoneConfig(name="z", points=[(0, 0), (10, 0), (10, 10), (10, 10), (0, 10)])


def test_zone_config_is_validated() -> None:
    with pytest.raises(ValidationError, match="at least 3 items"):
        ZoneConfig(name="z", points=[(0, 0), (1, 1)])
    with pytest.raises(ValidationError, match="encloses no area"):
        ZoneConfig(name="z", points=[(0, 0), (1, 1), (2, 2)])
    with pytest.raises(ValidationError, match=r"must be in \(0, 3600\]"):
        ZoneConfig(name="z", points=[(0, 0), (1, 0), (0, 1)], loiter_seconds=0)
    with pytest.raises(ValidationError, match="repeated: pen"):
        AnalyticsConfig(zones=[PEN, PEN])
    with pytest.raises(ValidationError, match="class ids listed twice"):
        ZoneConfig(name="z", points=[(0, 0), (1, 0), (0, 1)], classes=[1, 1])


def test_a_zone_with_an_attribute_filter_follows_only_objects_read_so() -> None:
    # Two objects walk into the pen and out again; a classifier read track 1 as red and
    # track 2 as blue. The red-only zone sees one visit; both visits' events carry the
    # reading.
    walkers = [
        Mover([(0, 100, 170), (1, 300, 170), (3, 300, 170), (4, 500, 170)]),
        Mover([(0, 100, 230), (1, 300, 230), (3, 300, 230), (4, 500, 230)], class_id=1),
    ]
    reds = ZoneConfig(name="reds", points=PEN.points, attributes={"colour": ["red"]})
    stream = analytics(PEN, reds)
    readings = {1: {"colour": "red"}, 2: {"colour": "blue"}}
    updates = [
        stream.update(
            f.boxes, f.scores, f.class_ids, f.pts, attributes_of=lambda t: readings.get(t, {})
        )
        for f in render(walkers, fps=25, seconds=4)
    ]
    pen = [e for e in events(updates) if e["zone"] == "pen"]
    red = [e for e in events(updates) if e["zone"] == "reds"]
    assert [e["type"] for e in pen] == ["zone_enter"] * 2 + ["zone_exit"] * 2
    assert {e["track_id"]: e["attributes"]["colour"] for e in pen} == {1: "red", 2: "blue"}
    assert [(e["type"], e["track_id"]) for e in red] == [("zone_enter", 1), ("zone_exit", 1)]
    assert max(u.zone_occupancy["reds"] for u in updates) == 1

    # A track read only after it entered is not inside until it is read (then it enters).
    late = analytics(reds)
    entered = []
    for index, f in enumerate(render(walkers[:1], fps=25, seconds=4)):
        read = readings if index >= 30 else {}  # read from 1.2 s, after it entered at 0.56 s
        update = late.update(
            f.boxes, f.scores, f.class_ids, f.pts, attributes_of=lambda t, r=read: r.get(t, {})
        )
        entered += [e.pts for e in update.events if e.type == "zone_enter"]
    assert len(entered) == 1 and entered[0] >= 1.2


@pytest.mark.parametrize(
    ("reading", "passes"),
    [
        ("red", True),
        ("blue", False),
        (("blue", "red"), True),  # a multi-label reading passes with any label the filter lists
        (("blue", "green"), False),
        ((), False),  # a multi-label classifier that gave no label
        (None, False),  # the track was never read
    ],
)
def test_an_attribute_filter_takes_single_and_multi_label_readings(
    reading: str | tuple[str, ...] | None, passes: bool
) -> None:
    attributes = {} if reading is None else {"colour": reading}
    assert attributes_match({"colour": ["red", "white"]}, attributes) is passes
    assert attributes_match(None, attributes) is True  # no filter: everything passes


@pytest.mark.parametrize(
    "points",
    [
        [(0, 0), (200, 0), (200, 150), (0, 150)],  # the dashboard's corner: inside
        [(500, 300), (800, 300), (800, 500), (500, 500)],  # over the bottom-right corner
        [(700, 0), (800, 0), (800, 100)],  # right of the frame
        [(-50, 100), (300, -40), (350, 420), (10, 380)],  # out on every side
    ],
)
def test_a_convex_zones_share_in_the_frame_is_opencvs_intersection(points) -> None:
    cv2 = pytest.importorskip("cv2")
    frame = np.array([[0, 0], [640, 0], [640, 360], [0, 360]], np.float32)
    zone = np.array(points, np.float32)
    overlap, _ = cv2.intersectConvexConvex(zone, frame)
    expected = overlap / cv2.contourArea(zone)
    assert Polygon(points).share_in_frame(640, 360) == pytest.approx(expected, abs=1e-4)


def test_a_concave_zones_share_in_the_frame() -> None:
    # An L of three 100 x 100 squares, one of them right of a 640-wide frame: 2/3 inside.
    ell = [(540, 0), (740, 0), (740, 100), (640, 100), (640, 200), (540, 200)]
    assert Polygon(ell).share_in_frame(640, 360) == pytest.approx(2 / 3)


def test_parse_zone_spec() -> None:
    from vstream.analytics import parse_zone_spec

    assert parse_zone_spec("dock=0,0,200,0,200,150") == ZoneConfig(
        name="dock", points=[(0, 0), (200, 0), (200, 150)]
    )
    for spec, message in [
        ("dock", "expected NAME=X1,Y1,X2,Y2,X3,Y3,..."),
        ("dock=1,2,3,4", "at least 6"),
        ("dock=1,2,3,4,5,6,7", "an even count"),
        ("dock=1,2,3,4,5,x", "must be numbers"),
        ("my dock=0,0,1,0,0,1", "must start with a letter or digit"),
        ("dock=0,0,1,1,2,2", "encloses no area"),
        ("dock=0,0,1,0,0,1,1,1", "crosses itself"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_zone_spec(spec)


def test_a_zone_no_object_is_ever_clear_of_the_border_in_is_refused() -> None:
    """A sliver of 0.2 px² and a strip 10 px tall (no point of it farther than the 5 px dead
    band from its border) were accepted and counted nothing, silently."""
    sliver = ZoneConfig(name="pen", points=[(100, 100), (500, 100), (500, 100.001)])
    strip = ZoneConfig(name="lane", points=[(100, 195), (500, 195), (500, 205), (100, 205)])
    for zone in (sliver, strip):
        said = rf"zone '{zone.name}': no point of it is farther than the dead band \(5 px\) "
        with pytest.raises(ValidationError, match=said + r"from its border \(at most "):
            AnalyticsConfig(zones=[zone])
    wider = strip.model_copy(update={"points": [(100, 195), (500, 195), (500, 206), (100, 206)]})
    assert AnalyticsConfig(zones=[wider]).zones == [wider]
    assert AnalyticsConfig(zones=[strip], dead_band_pixels=4.9).zones == [strip]
    # A concave zone whose every arm is thin but whose convex hull is not passes (the check
    # is exact for convex zones only); one whose hull is thin too is refused.
    thin_u = [(0, 0), (4, 0), (4, 80), (76, 80), (76, 0), (80, 0), (80, 84), (0, 84)]
    assert AnalyticsConfig(zones=[ZoneConfig(name="u", points=thin_u)]).zones
    with pytest.raises(ValidationError, match="zone 'v': no point of it"):
        thin_v = [(0, 0), (100, 4), (200, 0), (200, 6), (0, 6)]
        AnalyticsConfig(zones=[ZoneConfig(name="v", points=thin_v)])


def test_refusing_a_convex_zone_agrees_with_where_objects_are_clear() -> None:
    """The oracle: the border distance zones place objects by, on a 0.07 px grid. A random
    convex zone is refused exactly when no point inside it is farther than the band from
    its border (zones within 0.1 px of the band either way are left out)."""
    rng = np.random.default_rng(5)
    decided = {True: 0, False: 0}
    for _ in range(100):
        corners = rng.uniform(0, 1, (rng.integers(3, 7), 2)) * rng.uniform(8, 50, 2)
        angle = rng.uniform(0, np.pi)
        turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        corners = corners @ turn.T + 100
        hull = ConvexHull(corners)
        points = [tuple(p) for p in corners[hull.vertices].tolist()]
        polygon = Polygon(points)
        low, high = corners.min(axis=0), corners.max(axis=0)
        xs, ys = np.meshgrid(*(np.arange(a, b, 0.07) for a, b in zip(low, high, strict=True)))
        grid = np.stack([xs.ravel(), ys.ravel()], axis=1)
        widest = polygon.border_distance(grid[polygon.contains(grid)]).max(initial=0.0)
        if abs(widest - 5.0) < 0.1:
            continue
        zone = ZoneConfig(name="z", points=points)
        try:
            AnalyticsConfig(zones=[zone])
            refused = False
        except ValidationError:
            refused = True
        assert refused == (widest < 5.0), (points, widest)
        decided[refused] += 1
    assert min(decided.values()) >= 10, decided


# A dock drawn on the bottom of a 640 x 360 picture, and the same dock drawn past it.
ON_EDGE = ZoneConfig(name="dock", points=[(200, 250), (440, 250), (440, 360), (200, 360)])
PAST_EDGE = ON_EDGE.model_copy(update={"points": [(200, 250), (440, 250), (440, 400), (200, 400)]})
# Drives in from below the frame and parks for 8 s, its rear 30 px past the bottom of the
# picture (the camera sees its top only: its box is cut off, its anchor on the edge), then
# backs out.
TRUCK = Mover([(0, 320, 520), (2, 320, 390), (10, 320, 390), (12, 320, 620)], size=(160, 200))


def test_a_zone_along_the_frame_edge_counts_objects_the_frame_cuts_off() -> None:
    """Its edge along the frame's is no border: the truck was never clear of it, and never
    inside. It is now, as in the same dock drawn past the edge (which always counted)."""
    size = (640, 360)
    frames = render([TRUCK], fps=25, seconds=14, frame_size=size)
    on_edge = run(analytics(ON_EDGE), frames, frame_size=size)
    past_edge = run(analytics(PAST_EDGE), frames, frame_size=size)
    assert kinds(on_edge) == ["zone_enter", "zone_exit"]
    assert events(on_edge) == events(past_edge)
    assert [u.zone_occupancy for u in on_edge] == [u.zone_occupancy for u in past_edge]
    # The dead band still holds on the dock's edges inside the picture.
    nearby = Mover([(0, 320, 150), (2, 320, 253), (6, 320, 253), (8, 320, 150)])
    frames = render([nearby], fps=25, seconds=10, frame_size=size)
    assert kinds(run(analytics(ON_EDGE), frames, frame_size=size)) == []


@pytest.mark.parametrize(
    ("anchor", "at"),
    [("center_right", (650, 200)), ("bottom_center", (320, 380)), ("bottom_right", (650, 380))],
)
def test_a_point_on_the_frames_far_edge_is_inside_a_zone_along_it(anchor, at) -> None:
    """Inside tests put a point on a polygon's right or bottom edge outside; one on the
    frame's far edge (a box the frame cuts off) is in the picture, so in a zone along it:
    the whole picture here, which an object parked half out of it enters."""
    size = (640, 360)
    whole = ZoneConfig(name="all", points=[(0, 0), (640, 0), (640, 360), (0, 360)])
    a = analytics(whole, anchor=anchor)
    x, y = at  # the box's bottom centre, beyond the frame: the box is cut off
    frames = render([Mover([(0, x, y), (2, x, y)])], fps=25, seconds=2, frame_size=size)
    (placement,) = place(a, [(np.array([1]), frames[0].boxes, None)])
    assert (placement.points == size).any() and not placement.inside[0].any()  # as drawn
    assert kinds(run(a, frames, frame_size=size)) == ["zone_enter"]


def test_a_zone_edge_is_left_out_of_the_border_only_where_it_is_off_the_frame() -> None:
    zone = Polygon([(-50, 100), (700, 100), (700, 300), (300, 400), (100, 360), (-50, 300)])
    # Edges: along y 100 (in the frame), along x 700 (past the right), a slant leaving the
    # frame (partly in it), one from y 400 to y 360 (past the bottom, touching it), a slant
    # partly in it, along x -50 (past the left).
    assert zone.edges_off_frame(640, 360).tolist() == [False, True, False, True, False, True]
    # The second edge cuts past the top-right corner, outside the frame.
    corner = Polygon([(600, 100), (620, -30), (700, 20), (700, 100)])
    assert corner.edges_off_frame(640, 360).tolist() == [False, True, True, False]
    points = np.array([[320.0, 200.0], [630.0, 200.0]])
    np.testing.assert_allclose(zone.border_distance(points), [100, 70])
    np.testing.assert_allclose(
        zone.border_distance(points, ~zone.edges_off_frame(640, 360)), [100, 100]
    )
    assert zone.border_distance(points, np.zeros(6, dtype=bool)).tolist() == [np.inf] * 2
